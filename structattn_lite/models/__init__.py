"""Sequence models for the state-tracking study, behind one constructor.

Every model maps LongTensor tokens [B, T] to logits [B, T, C], one prediction per
prefix; a sequence-level prediction reads the last position.
"""

from __future__ import annotations

from torch import nn

from structattn_lite.models.csp import CSP, CSP_PRESETS, CSPConfig, csp_config
from structattn_lite.validation import check_choice

MODELS = ("csp",)


def build_model(name: str, preset: str | None = None, **options) -> nn.Module:
    """``build_model("csp", preset="paper" | "upstream", **overrides)``."""
    check_choice("model", name, MODELS)
    return CSP(csp_config(preset or "paper", **options))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "CSP",
    "CSPConfig",
    "CSP_PRESETS",
    "MODELS",
    "build_model",
    "count_parameters",
    "csp_config",
]
