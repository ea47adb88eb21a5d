"""Shared by the stacked-model tests: float64 reference models to stack and compare, and
the readable reference run the stacked training path is compared with."""

import torch


def reference_models(model_cls, cfg, seeds, perturb=0.0):
    """One float64 ``model_cls(cfg)`` per seed, each weight optionally moved off its
    initialisation (some revisions start their angles at zero, where gradients vanish)."""
    models = []
    for s in seeds:
        torch.manual_seed(s)
        model = model_cls(cfg).double()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(perturb * torch.randn_like(p))
        models.append(model)
    return models


def reference_run(cfg):
    """A state-tracking config trained the readable way: its reference model on a
    ``Trainer`` (``driver.run_alone``), what the stacked path must equal."""
    from structattn_lite.training import state_tracking
    from structattn_lite.training.driver import run_alone

    return run_alone(state_tracking.csp_setup(cfg), state_tracking.csp_record)
