"""Classification losses over per-position logits [..., C]."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.ops import sigmoid_focal_loss

from structattn_lite.config import check_choice

LOSSES = ("focal", "ce")


def focal_loss(logits: torch.Tensor, target: torch.Tensor, gamma: float = 2.0, alpha: float = 0.25):
    """Binary focal loss (Lin et al.) on two-class logits.

    softmax over two classes is sigmoid(z1 - z0), so the sigmoid focal loss of the
    margin is exactly the focal loss of the two-class softmax.
    """
    if logits.shape[-1] != 2:
        raise ValueError(
            f"focal loss needs a binary target (2 classes), got {logits.shape[-1]}; use loss='ce'"
        )
    margin = logits[..., 1] - logits[..., 0]
    return sigmoid_focal_loss(
        margin, target.to(margin.dtype), alpha=alpha, gamma=gamma, reduction="mean"
    )


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def get_loss(name: str):
    check_choice("loss", name, LOSSES)
    return focal_loss if name == "focal" else cross_entropy
