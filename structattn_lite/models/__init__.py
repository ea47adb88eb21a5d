"""The models: the state-tracking study's (the text's CSP, its authors' revisions
and the baselines; built by ``build``) and the attention kinds (``attention``, each a
registered class).

The names ``build`` defines load on first use, so importing one attention kind does not
load the recurrent models: ``from structattn_lite.models import build_model`` works as
before.
"""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    build = importlib.import_module(f"{__name__}.build")
    if not hasattr(build, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(build, name)
