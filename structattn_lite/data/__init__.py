"""Data: state-tracking tasks (``tasks``), text corpora (``text``), images as patches (``images``).

``char_ptb(root=None)`` is the public entry point for Penn Treebank; the root comes
from the argument, then ``STRUCTATTN_DATA``, then ``data/``.
"""

from structattn_lite.data.images import Patchify, cifar10_available, cifar10_patches
from structattn_lite.data.text import (
    FALLBACK_LABEL,
    CharCorpus,
    build_vocab,
    char_ptb,
    encode,
    fallback_corpus,
    fetch,
    load_corpus,
    ptb_available,
)

__all__ = [
    "CharCorpus",
    "FALLBACK_LABEL",
    "Patchify",
    "build_vocab",
    "char_ptb",
    "cifar10_available",
    "cifar10_patches",
    "encode",
    "fallback_corpus",
    "fetch",
    "load_corpus",
    "ptb_available",
]
