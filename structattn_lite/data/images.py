"""Images as patch tokens for the attention study.

CIFAR-10 goes through torchvision's real loader and downloads when online (it cannot be
downloaded on the machines this project is built on).
"""

from __future__ import annotations

from pathlib import Path

import torch

from structattn_lite.config import check_choice, check_int, data_root


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


# --- scikit-learn's 8x8 digits: real images that need no download ---------------------

DIGITS_SPLITS = ("train", "valid", "test")


def digits_patches(
    split: str = "train", patch: int = 2, n_valid: int = 300, n_test: int = 300, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(patch tokens [n, (8/p)^2, p^2], labels [n]) of one split of the 1,797 digits.

    The images ship with scikit-learn (``sklearn.datasets.load_digits``), so this works
    offline. One fixed permutation (``seed``) splits them into test (the first
    ``n_test``), validation (the next ``n_valid``) and training (the rest); pixels
    (0..16) are standardised with the training split's mean and standard deviation.
    """
    from sklearn.datasets import load_digits

    check_choice("split", split, DIGITS_SPLITS)
    n_valid, n_test = check_int("n_valid", n_valid, 1), check_int("n_test", n_test, 1)
    data = load_digits()
    images = torch.as_tensor(data.images, dtype=torch.float32)  # [1797, 8, 8]
    labels = torch.as_tensor(data.target, dtype=torch.long)
    if n_valid + n_test >= len(images):
        raise ValueError(
            f"n_valid + n_test must leave training images: got {n_valid} + {n_test} "
            f"of {len(images)}"
        )
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    parts = {
        "test": order[:n_test],
        "valid": order[n_test : n_test + n_valid],
        "train": order[n_test + n_valid :],
    }
    train = images[parts["train"]]
    mean, std = train.mean(), train.std()
    to_tokens = Patchify(patch)
    chosen = (images[parts[split]] - mean) / std
    tokens = torch.stack([to_tokens(img[None]) for img in chosen])
    return tokens, labels[parts[split]]
