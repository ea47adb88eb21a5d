"""The state-tracking study's constructor: CSP (the text's presets and the authors'
revisions) and the baselines, each from one checked config.

Every model maps LongTensor tokens [B, T] to logits [B, T, C], one prediction per
prefix; a sequence-level prediction reads the last position.
"""

from __future__ import annotations

from torch import nn

from structattn_lite.config import check_choice
from structattn_lite.models.baselines import BASELINES, baseline_config, build_baseline
from structattn_lite.models.csp import CSP, CSP_PRESETS, CSPConfig, csp_config
from structattn_lite.models.csp_authors import (
    AUTHORS_PRESETS,
    AuthorsCSP,
    AuthorsCSPConfig,
    authors_config,
)

MODELS = ("csp", *BASELINES)
# "upstream" is the brief's public name for the authors' code: the revision behind their
# README's parity row.
PRESET_ALIASES = {"upstream": "authors_3bb9f71"}
PRESETS = (*CSP_PRESETS, *AUTHORS_PRESETS, *PRESET_ALIASES)


def preset_config(preset: str = "paper", **overrides) -> CSPConfig | AuthorsCSPConfig:
    """The config a CSP preset names, with some fields replaced (errors list what is allowed).

    ``paper`` (the text's reading) and ``code_switches`` give a :class:`CSPConfig`;
    ``authors_<revision>`` (and its alias ``upstream``) an :class:`AuthorsCSPConfig`.
    """
    preset = PRESET_ALIASES.get(check_choice("preset", preset, PRESETS), preset)
    if preset in AUTHORS_PRESETS:
        return authors_config(preset, **overrides)
    return csp_config(preset, **overrides)


def model_config(name: str, preset: str | None = None, **options):
    """The checked config ``build_model(name, preset, **options)`` builds its model from
    (errors list what is allowed), with no model built."""
    check_choice("model", name, MODELS)
    if name == "csp":
        return preset_config(preset or "paper", **options)
    if preset is not None:
        raise ValueError(
            f"preset={preset!r} only applies to model 'csp'; baseline {name!r} takes "
            "options such as d_model and n_layers instead (pass preset=None)"
        )
    return baseline_config(name, **options)


def build_model(name: str, preset: str | None = None, **options) -> nn.Module:
    """``build_model("csp", preset=one of PRESETS, **overrides)``, or a baseline (one of
    ``BASELINES``, no presets) from ``vocab_size``, ``n_classes``, ``d_model``, ``n_layers``..."""
    cfg = model_config(name, preset, **options)
    if name != "csp":
        return build_baseline(name, **options)
    return AuthorsCSP(cfg) if isinstance(cfg, AuthorsCSPConfig) else CSP(cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
