"""Images as patch tokens for the attention study.

CIFAR-10 goes through torchvision's real loader and downloads when online (it cannot be
downloaded on the machines this project is built on).
"""

from __future__ import annotations

from pathlib import Path

import torch

from structattn_lite.config import check_int, data_root


class Patchify:
    """Image tensor [C, H, W] -> patch tokens [(H/p)(W/p), C p p], row-major patches."""

    def __init__(self, patch: int = 4):
        self.patch = check_int("patch", patch, minimum=1)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        C, H, W = img.shape
        p = self.patch
        if H % p or W % p:
            raise ValueError(f"patch={p} must divide the image size {H}x{W}")
        t = img.reshape(C, H // p, p, W // p, p).permute(1, 3, 0, 2, 4)
        return t.reshape((H // p) * (W // p), C * p * p)


def cifar10_patches(
    root: str | Path | None = None, train: bool = True, patch: int = 4, download: bool = False
):
    """torchvision's CIFAR10 whose items are (patch tokens [64, 48] for p=4, label)."""
    from torchvision import transforms
    from torchvision.datasets import CIFAR10

    base = data_root(root)
    if not download and not (base / "cifar-10-batches-py").is_dir():
        raise FileNotFoundError(
            f"CIFAR-10 not found in {base / 'cifar-10-batches-py'}: run `structattn data "
            f"fetch cifar10` when online, or point STRUCTATTN_DATA (or root=) at the folder "
            f"that holds cifar-10-batches-py/"
        )
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    tf = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize(mean, std), Patchify(patch)]
    )
    return CIFAR10(str(base), train=train, transform=tf, download=download)


def cifar10_available(root: str | Path | None = None) -> bool:
    return (data_root(root) / "cifar-10-batches-py").is_dir()
