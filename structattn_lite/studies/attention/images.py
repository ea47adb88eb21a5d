"""Images as patch tokens for the attention study: the 8x8 digits (offline) and CIFAR-10.

The digits ship with scikit-learn and are split train / validation / test by
``data.images.digits_patches``; CIFAR-10 runs only where it is on disk, with the last
tenth of its training images (at most 5,000) as validation and its official test split
read only by ``evaluate_test``. The same blocks as the language model, non-causal,
mean-pooled into a classifier.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from structattn_lite.data.images import cifar10_patches, digits_patches
from structattn_lite.models.lm import PatchClassifier


@torch.no_grad()
def scores(model: PatchClassifier, x: torch.Tensor, y: torch.Tensor, batch: int = 256):
    """(mean cross-entropy in nats, accuracy) of ``model`` on images ``x``, labels ``y``."""
    was_training = model.training
    model.eval()
    loss, hits = 0.0, 0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch])
        loss += F.cross_entropy(logits, y[i : i + batch], reduction="sum").item()
        hits += (logits.argmax(-1) == y[i : i + batch]).sum().item()
    model.train(was_training)
    return loss / len(x), hits / len(x)


def _stack(dataset, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*(dataset[i] for i in indices), strict=True)
    return torch.stack(xs), torch.tensor(ys)


@dataclass
class ImageTask:
    """Training images (the leading ``data_fraction``), validation images, and a loader
    for the test split that nothing but ``evaluate_test`` calls."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    valid_x: torch.Tensor
    valid_y: torch.Tensor
    load_test: object  # () -> (x, y)
    batch_size: int
    seed: int
    source: str

    @classmethod
    def build(cls, cfg, device: str = "cpu") -> ImageTask:
        if cfg.dataset == "digits":
            tx, ty = digits_patches("train")
            vx, vy = digits_patches("valid")
            load_test = lambda: digits_patches("test")  # noqa: E731
        else:
            full = cifar10_patches(train=True, patch=4)
            n = len(full)
            n_val = max(1, min(5000, n // 10))
            tx, ty = _stack(full, list(range(n - n_val)))
            vx, vy = _stack(full, list(range(n - n_val, n)))
            test = lambda: _stack(t := cifar10_patches(train=False), list(range(len(t))))  # noqa: E731
            load_test = test
        n_fit = max(1, int(len(tx) * cfg.data_fraction))
        tx, ty, vx, vy = (t.to(device) for t in (tx[:n_fit], ty[:n_fit], vx, vy))
        return cls(tx, ty, vx, vy, lambda: tuple(t.to(device) for t in load_test()),
                   cfg.batch_size, cfg.seed, cfg.dataset)  # fmt: skip

    @property
    def tokens(self) -> tuple[int, int]:
        """(patches per image, numbers per patch)."""
        return tuple(self.train_x.shape[1:])

    def batches(self):
        gen = torch.Generator().manual_seed(self.seed)

        def batch(step: int):
            idx = torch.randint(0, len(self.train_x), (self.batch_size,), generator=gen)
            idx = idx.to(self.train_x.device)
            return self.train_x[idx], self.train_y[idx]

        batch.generator = gen  # what a checkpoint saves and restores
        return batch

    def evaluate(self, model: PatchClassifier, count: int) -> dict[str, float]:
        loss, acc = scores(model, self.valid_x[:count], self.valid_y[:count])
        return {"val_loss": loss, "val_acc": acc}

    def evaluate_test(self, model: PatchClassifier, count: int) -> dict[str, float]:
        x, y = self.load_test()
        loss, acc = scores(model, x[:count], y[:count])
        return {"test_loss": loss, "test_acc": acc}

    def check_batch(self, count: int = 4) -> torch.Tensor:
        return self.valid_x[:count]
