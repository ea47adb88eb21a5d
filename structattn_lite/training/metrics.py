"""Accuracy, F1 and accuracy at lengths never seen in training, of predictions on a split
(the grokking gap read from these per epoch is ``studies.grokking.report.grokking_gap``)."""

from __future__ import annotations

import torch

IGNORE = -100  # the label of a padding position (cross-entropy's ignore_index)


def _scored(pred: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    keep = target != IGNORE
    return pred[keep], target[keep]


def accuracy(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Share of correct predictions over the positions that carry a label."""
    pred, target = _scored(pred, target)
    return (pred == target).float().mean().item() if target.numel() else float("nan")


def f1_score(pred: torch.Tensor, target: torch.Tensor) -> float:
    """F1 of class 1 for binary targets; macro-F1 over classes present otherwise."""
    pred, target = _scored(pred, target)
    if not target.numel():
        return float("nan")
    classes = [1] if int(max(pred.max(), target.max())) <= 1 else target.unique().tolist()
    scores = []
    for c in classes:
        tp = ((pred == c) & (target == c)).sum().item()
        fp = ((pred == c) & (target != c)).sum().item()
        fn = ((pred != c) & (target == c)).sum().item()
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores)


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Class predictions [N, T] for every prefix, on ``x``'s device (run on the model's)."""
    model.eval()
    where = next(model.parameters(), x).device  # a parameterless model runs where x is
    out = [
        model(x[i : i + batch_size].to(where)).argmax(-1).to(x.device)
        for i in range(0, len(x), batch_size)
    ]
    return torch.cat(out)


def scores(pred: torch.Tensor, target: torch.Tensor, labels: str) -> dict[str, float]:
    """Accuracy and F1 on the last labelled position ("sequence": the whole string, which
    for a padded string is its last real symbol) or on every labelled prefix ("prefix")."""
    if labels == "sequence":
        pred, target = last_labelled(pred, target)
    return {"acc": accuracy(pred, target), "f1": f1_score(pred, target)}


def last_labelled(pred: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prediction and label at each row's last position that carries a label."""
    positions = torch.arange(target.shape[1], device=target.device)
    last = torch.where(target != IGNORE, positions, -1).max(1).values.clamp(min=0)
    rows = torch.arange(len(target), device=target.device)
    return pred[rows, last], target[rows, last]


def length_scores(pred: torch.Tensor, target: torch.Tensor, train_length: int) -> dict[str, float]:
    """Accuracy at an evaluation length: the whole string (its last labelled position) and
    the positions beyond the training length (``unseen_acc``; NaN if none is labelled)."""
    return {
        "seq_acc": accuracy(*last_labelled(pred, target)),
        "unseen_acc": accuracy(pred[:, train_length:], target[:, train_length:]),
    }
