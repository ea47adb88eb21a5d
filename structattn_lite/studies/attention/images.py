"""CIFAR-10 as patch tokens for the attention study (runs only where the data is on disk).

The last tenth of the training images (at most 5,000) is held out as the validation
set; the official test split is not touched, so nothing is selected on it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from structattn_lite.data import cifar10_patches
from structattn_lite.models.lm import LMConfig, PatchClassifier


def _stack(dataset, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*(dataset[i] for i in indices), strict=True)
    return torch.stack(xs), torch.tensor(ys)


@torch.no_grad()
def accuracy(model: PatchClassifier, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> float:
    was_training = model.training
    model.eval()
    hits = sum((model(x[i : i + batch]).argmax(-1) == y[i : i + batch]).sum().item()
               for i in range(0, len(x), batch))  # fmt: skip
    model.train(was_training)
    return hits / len(x)


def cifar_task(cfg, options: dict):
    """(model, loss_fn, batches, metric, check_x, data) as ``attention_study`` expects."""
    train = cifar10_patches(train=True, patch=4)
    n = len(train)
    n_val = max(1, min(5000, n // 10))
    n_fit = max(1, int((n - n_val) * cfg.data_fraction))
    val_x, val_y = _stack(train, list(range(n - n_val, n))[: cfg.final_eval_windows])
    n_patches, patch_dim = val_x.shape[1:]
    torch.manual_seed(cfg.seed)
    lm_cfg = LMConfig(
        vocab_size=1,
        block_size=n_patches,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        attention=cfg.kind,
        attention_options=options,
    )
    model = PatchClassifier(lm_cfg, patch_dim=patch_dim, n_classes=10)

    def batches(generator):
        for _ in range(cfg.steps_per_eval):
            idx = torch.randint(0, n_fit, (cfg.batch_size,), generator=generator)
            yield _stack(train, idx.tolist())

    def metric(m, count):
        return {"val_acc": accuracy(m, val_x[:count], val_y[:count])}

    data = {"source": "cifar10", "train_images_used": n_fit, "val_images": len(val_x)}
    return (
        model,
        (lambda m, x, y: F.cross_entropy(m(x), y)),
        batches,
        metric,
        val_x[: cfg.check_windows],
        data,
    )
