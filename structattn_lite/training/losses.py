"""Classification losses over per-position logits [..., C]; targets of -100 are ignored.

Two focal losses go by the same name in the literature and in the CSP code, so the choice
is explicit (``alpha_mode``):

- ``"class"`` (Lin et al. 2017; torchvision's ``sigmoid_focal_loss``): binary, the positive
  class weighted by alpha and the negative by 1 - alpha;
- ``"constant"`` (the authors' utils/train.py): ``alpha (1 - p_t)^gamma CE``, the same alpha
  for every class, so alpha only scales the loss; any number of classes.

By name (``get_loss``): ``"focal"`` (class alpha), ``"focal_constant"``, ``"ce"``, and
``"ce_all_positions"``: the authors' reduction, ``mean`` over every position with ignored
ones counted as zero (their ``torch.mean`` of an unreduced ``CrossEntropyLoss``), which
differs from ``"ce"`` only when labels are ignored (padded Dyck-1 strings).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from structattn_lite.config import check_choice, check_number

IGNORE_INDEX = -100
ALPHA_MODES = ("class", "constant")
AVERAGES = ("labelled", "all_positions")
LOSSES = ("focal", "ce", "focal_constant", "ce_all_positions")


def _flat(logits: torch.Tensor, target: torch.Tensor):
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} need one class axis more than target "
            f"{tuple(target.shape)}"
        )
    return logits.reshape(-1, logits.shape[-1]), target.reshape(-1)


def reduce(
    per_position: torch.Tensor, labelled: torch.Tensor, average: str, dim: int | None = None
) -> torch.Tensor:
    """The mean of the per-position losses over the labelled positions ("labelled"; none
    labelled: a zero that keeps the graph) or over all of them ("all_positions"), over
    everything or along ``dim`` (one mean per seed of a stacked run). It reads nothing
    back to the host."""
    check_choice("average", average, AVERAGES)
    if average == "all_positions":
        return per_position.mean() if dim is None else per_position.mean(dim)
    labelled = labelled.to(per_position.dtype)
    if dim is None:
        return (per_position * labelled).sum() / labelled.sum().clamp(min=1)
    return (per_position * labelled).sum(dim) / labelled.sum(dim).clamp(min=1)


def ce_terms(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at each position, shaped as ``target`` (0 where it is ignored)."""
    flat = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        target.reshape(-1),
        reduction="none",
        ignore_index=IGNORE_INDEX,
    )
    return flat.view(target.shape)


def focal_constant_terms(
    logits: torch.Tensor, target: torch.Tensor, gamma: float = 2.0, alpha: float = 0.25
) -> torch.Tensor:
    """The authors' focal loss, ``alpha (1 - p_t)^gamma CE``, at each position."""
    ce = ce_terms(logits, target)
    return alpha * (1 - torch.exp(-ce)) ** gamma * ce


def focal_class_terms(
    logits: torch.Tensor, target: torch.Tensor, gamma: float = 2.0, alpha: float = 0.25
) -> torch.Tensor:
    """Lin et al.'s binary focal loss at each position, on the margin of 2-class logits:
    softmax over two classes is sigmoid(z1 - z0). Ignored positions are not masked."""
    from torchvision.ops import sigmoid_focal_loss  # imported here: it costs ~2 s at start-up

    margin = logits[..., 1] - logits[..., 0]
    return sigmoid_focal_loss(
        margin, (target == 1).to(margin.dtype), alpha=alpha, gamma=gamma, reduction="none"
    )


def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    alpha_mode: str = "class",
    average: str = "labelled",
) -> torch.Tensor:
    """Focal loss, ``alpha_mode`` "class" (binary, Lin et al.) or "constant" (the authors')."""
    check_choice("alpha_mode", alpha_mode, ALPHA_MODES)
    check_number("gamma", gamma, minimum=0.0)
    check_number("alpha", alpha, minimum=0.0)
    flat_logits, flat_target = _flat(logits, target)
    labelled = flat_target != IGNORE_INDEX
    if alpha_mode == "constant":
        per_position = focal_constant_terms(flat_logits, flat_target, gamma, alpha)
        return reduce(per_position, labelled, average)
    check_binary(flat_logits.shape[-1], alpha)
    per_position = focal_class_terms(flat_logits, flat_target, gamma, alpha)
    return reduce(per_position * labelled, labelled, average)


def check_binary(n_classes: int, alpha: float = 0.25) -> None:
    """What the class-alpha focal loss needs: two classes and alpha in [0, 1]."""
    if n_classes != 2:
        raise ValueError(
            f"focal loss needs a binary target (2 classes) with alpha_mode='class', got "
            f"{n_classes}; use alpha_mode='constant' (loss='focal_constant') or "
            "loss='ce'"
        )
    if alpha > 1:
        raise ValueError(f"alpha must lie in [0, 1] with alpha_mode='class', got {alpha}")


focal_constant = partial(focal_loss, alpha_mode="constant")  # the authors' focal loss


def cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, average: str = "labelled"
) -> torch.Tensor:
    """Mean cross-entropy over labelled positions (``average="all_positions"``: the authors')."""
    flat_logits, flat_target = _flat(logits, target)
    ce = ce_terms(flat_logits, flat_target)
    return reduce(ce, flat_target != IGNORE_INDEX, average)


# name -> (per-position terms, how they are averaged): what ``get_loss(name)`` computes,
# for a trainer that averages them itself (one mean per seed: ``per_seed_loss``).
TERMS = {
    "focal": (focal_class_terms, "labelled"),
    "focal_constant": (focal_constant_terms, "labelled"),
    "ce": (ce_terms, "labelled"),
    "ce_all_positions": (ce_terms, "all_positions"),
}


def get_loss(name: str):
    check_choice("loss", name, LOSSES)
    return {
        "focal": focal_loss,
        "focal_constant": focal_constant,
        "ce": cross_entropy,
        "ce_all_positions": partial(cross_entropy, average="all_positions"),
    }[name]


def per_seed_loss(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``losses.get_loss(name)`` applied to each seed: logits [S, ..., C], y [S, ...] -> [S].

    The per-position terms are ``losses``' own (``losses.TERMS``), computed for all seeds
    at once and averaged once per seed.
    """
    get_loss(name)  # validates the name
    terms, average = TERMS[name]

    def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        n_seeds = logits.shape[0]
        if name == "focal":
            check_binary(logits.shape[-1])
        per = terms(logits.reshape(n_seeds, -1, logits.shape[-1]), target.reshape(n_seeds, -1))
        return reduce(per, target.reshape(n_seeds, -1) != IGNORE_INDEX, average, dim=1)

    return loss
