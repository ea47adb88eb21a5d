"""Data: state-tracking tasks (``tasks``), text corpora (``text``), images as patches (``images``).

``char_ptb(root=None)`` is the public entry point for Penn Treebank; the root comes
from the argument, then ``STRUCTATTN_DATA``, then ``data/``.
"""

from structattn_lite.config import lazy_getattr

# name -> the submodule that defines it, imported when first used: the images and text
# loaders load torch, and a module that reads only the task sizes needs neither
_LAZY = {
    "cifar10_available": "images",
    "FALLBACK_LABEL": "text",
    "char_ptb": "text",
    "fallback_corpus": "text",
    "fetch": "text",
    "load_corpus": "text",
    "ptb_available": "text",
}
__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
