"""Train S seeds of one config at once, each as if alone: one stacked model per group.

``stack_models`` turns reference models of one config into one stacked model (every
parameter with a leading seed axis: ``models.csp_stacked``, ``models.csp_authors_stacked``)
and ``unstack_model`` takes a seed back out. ``run_csp_stacked(configs)`` is ``run_csp``
for configs equal but for their seed, trained together by ``StackedTrainer`` (per-seed
data order, Adam, lr schedule, clipping, NaN guard and stop rule: see
``training.stacked_trainer``) through the state-tracking driver (``training.driver``),
and returns the records ``run_csp`` would. A model with no stacked form (the baselines)
runs one seed at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

# --- stacked CSP runs ------------------------------------------------------------------


def stack_models(models: Sequence[nn.Module]) -> nn.Module | None:
    """One stacked model for reference models of one config, or None if it has no stacked form."""
    from structattn_lite.models.csp import CSP
    from structattn_lite.models.csp_authors import AuthorsCSP
    from structattn_lite.models.csp_authors_stacked import stack_authors
    from structattn_lite.models.csp_stacked import stack_csps

    if all(type(m) is CSP for m in models) and len({m.cfg for m in models}) == 1:
        return stack_csps(list(models))
    if all(type(m) is AuthorsCSP for m in models) and len({m.cfg for m in models}) == 1:
        return stack_authors(list(models))
    return None


def unstack_model(stacked: nn.Module, i: int, template: nn.Module | None = None) -> nn.Module:
    """Seed ``i`` of a model made by ``stack_models``, as its reference model (a copy).

    ``template`` (one of the stacked reference models) is accepted for symmetry and unused.
    """
    from structattn_lite.models.csp_stacked import StackedCSP, unstack_csp

    if isinstance(stacked, StackedCSP):
        return unstack_csp(stacked, i)
    from structattn_lite.models.csp_authors_stacked import StackedAuthorsCSP, unstack_authors

    if isinstance(stacked, StackedAuthorsCSP):
        return unstack_authors(stacked, i)
    raise ValueError(f"not a stacked model: {type(stacked).__name__}")


def run_csp_stacked(
    configs: Sequence, progress: bool = False, device: str = "cpu", checkpoint=None
) -> list:
    """``run_csp`` for configs equal but for their seed, trained together; one record each.

    Records are keyed and filled as ``run_csp`` keys and fills them (plus ``seed_batched``,
    the number of seeds trained together), so a ``RunStore`` serves either path's records.
    A model with no stacked form (the baselines) runs one seed at a time through ``run_csp``.
    ``checkpoint``, a ``stacked=True`` plan, checkpoints the stacked unit; seeds run one at
    a time do not checkpoint (one file cannot hold several runs).
    """
    from structattn_lite.training.driver import run_together
    from structattn_lite.training.state_tracking import csp_record, csp_setup, run_csp

    configs = list(configs)
    return run_together(
        configs,
        csp_setup,
        csp_record,
        lambda c: run_csp(c, progress=progress, device=device),
        device=device,
        checkpoint=checkpoint,
        eval_chunk=max(64, 256 // max(len(configs), 1)),  # rows per seed and pass (measured best)
    )
