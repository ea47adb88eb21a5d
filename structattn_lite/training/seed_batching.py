"""Train S seeds of one config at once, each as if alone: one stacked model per group.

``stack_models`` turns reference models of one config into one stacked model (every
parameter with a leading seed axis: ``models.csp_stacked``, ``models.csp_authors_stacked``)
and ``unstack_model`` takes a seed back out; the state-tracking driver
(``training.driver.train_seeds``) trains every run of such a model this way, one seed
included. A model with no stacked form (the baselines) runs one seed at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def stack_models(models: Sequence[nn.Module]) -> nn.Module | None:
    """One stacked model for reference models of one config, or None if it has no stacked form."""
    from structattn_lite.models.csp_authors_stacked import StackedAuthorsCSP
    from structattn_lite.models.csp_stacked import StackedCSP

    for stacked in (StackedCSP, StackedAuthorsCSP):
        if (
            all(type(m) is stacked.reference for m in models)
            and len({m.cfg for m in models}) == 1
            and stacked.has_form(models[0].cfg)
        ):
            return stacked.stack(list(models))
    return None


def unstack_model(stacked: nn.Module, i: int) -> nn.Module:
    """Seed ``i`` of a model made by ``stack_models``, as its reference model (a copy)."""
    from structattn_lite.models.csp_stacked import SeedStack

    if not isinstance(stacked, SeedStack):
        raise ValueError(f"not a stacked model: {type(stacked).__name__}")
    return stacked.unstack(i)
