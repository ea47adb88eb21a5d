"""Data: state-tracking tasks (``tasks``), text corpora (``text``), images as patches (``images``).

``char_ptb(root=None)`` is the public entry point for Penn Treebank; the root comes
from the argument, then ``STRUCTATTN_DATA``, then ``data/``.
"""

from structattn_lite.data.images import cifar10_available
from structattn_lite.data.text import (
    FALLBACK_LABEL,
    char_ptb,
    fallback_corpus,
    fetch,
    load_corpus,
    ptb_available,
)
