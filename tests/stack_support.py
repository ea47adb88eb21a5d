"""Shared by the stacked-model tests: float64 reference models to stack and compare."""

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
