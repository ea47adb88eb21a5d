"""Accuracy, F1, the grokking gap, and accuracy at lengths never seen in training."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def accuracy(pred: torch.Tensor, target: torch.Tensor) -> float:
    return (pred == target).float().mean().item()


def f1_score(pred: torch.Tensor, target: torch.Tensor) -> float:
    """F1 of class 1 for binary targets; macro-F1 over classes present otherwise."""
    classes = [1] if int(max(pred.max(), target.max())) <= 1 else target.unique().tolist()
    scores = []
    for c in classes:
        tp = ((pred == c) & (target == c)).sum().item()
        fp = ((pred == c) & (target != c)).sum().item()
        fn = ((pred != c) & (target == c)).sum().item()
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores)


def grokking_gap(test_accuracy: Sequence[float], low: float = 0.9, high: float = 1.0) -> int | None:
    """Epochs from first reaching ``low`` to first reaching ``high`` test accuracy.

    Epochs count from 1 (row i is epoch i + 1); None when either level is never reached.
    """
    first_low = next((i for i, a in enumerate(test_accuracy) if a >= low), None)
    first_high = next((i for i, a in enumerate(test_accuracy) if a >= high), None)
    if first_low is None or first_high is None:
        return None
    return first_high - first_low


def first_epoch_at(test_accuracy: Sequence[float], level: float) -> int | None:
    return next((i + 1 for i, a in enumerate(test_accuracy) if a >= level), None)


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Class predictions [N, T] for every prefix."""
    model.eval()
    out = [model(x[i : i + batch_size]).argmax(-1) for i in range(0, len(x), batch_size)]
    return torch.cat(out)


def scores(pred: torch.Tensor, target: torch.Tensor, labels: str) -> dict[str, float]:
    """Accuracy and F1 on the last position ("sequence") or on every prefix ("prefix")."""
    if labels == "sequence":
        pred, target = pred[:, -1], target[:, -1]
    return {"acc": accuracy(pred, target), "f1": f1_score(pred, target)}


def length_scores(pred: torch.Tensor, target: torch.Tensor, train_length: int) -> dict[str, float]:
    """Accuracy at an evaluation length: whole sequence (last position) and unseen positions.

    ``unseen_acc`` scores only positions beyond the training length (NaN if none).
    """
    unseen = pred[:, train_length:]
    return {
        "seq_acc": accuracy(pred[:, -1], target[:, -1]),
        "unseen_acc": accuracy(unseen, target[:, train_length:])
        if unseen.numel()
        else float("nan"),
    }
