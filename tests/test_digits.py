"""scikit-learn's 8x8 digits as patch tokens: splits, patches, scaling, errors, a run."""

from __future__ import annotations

import pytest
import torch
from sklearn.datasets import load_digits

from structattn_lite.data.images import digits_patches
from structattn_lite.studies.attention import experiment as st
from structattn_lite.studies.attention.recipe import Recipe


def _images_back(tokens: torch.Tensor, patch: int) -> torch.Tensor:
    """Undo the patching by hand: token (r, c) holds rows r*p.., columns c*p.. row-major."""
    n, per_side = len(tokens), 8 // patch
    out = torch.empty(n, 8, 8)
    for t in range(per_side * per_side):
        r, c = divmod(t, per_side)
        out[:, r * patch : (r + 1) * patch, c * patch : (c + 1) * patch] = tokens[:, t].view(
            n, patch, patch
        )
    return out


def _train_stats(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sd of the training images, from the documented split rule (test first,
    then validation, then training, in one seeded permutation)."""
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    train = images[order[600:]]
    return train.mean(), train.std()


def test_splits_are_disjoint_cover_every_image_and_keep_their_labels():
    raw = load_digits()
    images = torch.as_tensor(raw.images, dtype=torch.float32)
    index = {tuple(row.tolist()): i for i, row in enumerate(images.flatten(1))}
    mean, std = _train_stats(images)
    splits = {s: digits_patches(s) for s in ("train", "valid", "test")}
    assert [len(splits[s][0]) for s in ("train", "valid", "test")] == [1197, 300, 300]
    assert splits["train"][0].shape[1:] == (16, 4)
    train_back = _images_back(splits["train"][0], 2)
    assert train_back.mean().abs() < 1e-5 and (train_back.std() - 1).abs() < 1e-4
    seen = []
    for tokens, labels in splits.values():
        pixels = torch.round(_images_back(tokens, 2) * std + mean)  # back to 0..16
        for img, label in zip(pixels, labels, strict=True):
            i = index[tuple(img.flatten().tolist())]
            assert int(raw.target[i]) == int(label)
            seen.append(i)
    assert sorted(seen) == list(range(len(images)))  # disjoint and complete


def test_patch_sizes_and_determinism():
    a, _ = digits_patches("valid", patch=4)
    assert a.shape == (300, 4, 16)
    b, _ = digits_patches("valid", patch=4)
    assert torch.equal(a, b)
    c, _ = digits_patches("valid", patch=4, seed=1)
    assert not torch.equal(a, c)


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match=r"split='dev' is not allowed; choose one of"):
        digits_patches("dev")
    with pytest.raises(ValueError, match="patch=3 must divide the image size 8x8"):
        digits_patches("train", patch=3)
    with pytest.raises(ValueError, match="n_valid \\+ n_test must leave training images"):
        digits_patches("train", n_valid=1000, n_test=900)


def test_the_three_variants_learn_the_digits_in_seconds():
    recipe = Recipe(lr=3e-3, max_steps=120, warmup_steps=12, eval_every=60, check_every=20)
    accs = {}
    for kind in ("dot", "dense", "matroidal"):
        cfg = st.Config(dataset="digits", kind=kind, d_model=32, n_heads=4, n_layers=1,
                        batch_size=32, recipe=recipe, eval_windows=300, final_eval_windows=300,
                        prune_fractions=(), read_test=True)  # fmt: skip
        rec = st.run(cfg, progress=False)
        assert rec.extra["variant"] == st.variant_label(cfg) and rec.extra["fast_path"]["rows"] > 0
        accs[kind] = rec.extra["final"]["test_acc"]
    assert min(accs.values()) > 0.3, accs  # chance is 0.1
