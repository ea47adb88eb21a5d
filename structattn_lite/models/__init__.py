"""Sequence models for the state-tracking study, behind one constructor.

Every model maps LongTensor tokens [B, T] to logits [B, T, C], one prediction per
prefix; a sequence-level prediction reads the last position.
"""

from __future__ import annotations

from torch import nn

from structattn_lite.config import check_choice
from structattn_lite.models.baselines import BASELINES, DEFAULTS, build_baseline
from structattn_lite.models.csp import CSP, CSP_PRESETS, CSPConfig, csp_config

MODELS = ("csp", *BASELINES)


def build_model(name: str, preset: str | None = None, **options) -> nn.Module:
    """``build_model("csp", preset="paper" | "upstream", **overrides)``, or a baseline.

    Baselines (``lstm``, ``gru``, ``transformer``, ``diag_rnn``, ``diag_rnn_neg``,
    ``complex_rnn``) take ``vocab_size``, ``n_classes``, ``d_model``, ``n_layers`` (and
    ``n_heads``, ``scan``) and have no presets.
    """
    check_choice("model", name, MODELS)
    if name == "csp":
        return CSP(csp_config(preset or "paper", **options))
    if preset is not None:
        raise ValueError(
            f"preset={preset!r} only applies to model 'csp'; baseline {name!r} takes "
            "options such as d_model and n_layers instead (pass preset=None)"
        )
    return build_baseline(name, **options)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "BASELINES",
    "CSP",
    "CSPConfig",
    "CSP_PRESETS",
    "DEFAULTS",
    "MODELS",
    "build_model",
    "count_parameters",
    "csp_config",
]
