"""Data: char-PTB (real when present; missing/corrupt files made here), fallback, CIFAR."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from structattn_lite.config import data_root
from structattn_lite.data import images
from structattn_lite.data import text as data

REAL_ROOT = os.environ.get("STRUCTATTN_DATA")
needs_ptb = pytest.mark.skipif(
    not data.ptb_available(REAL_ROOT),
    reason="Penn Treebank not found: set STRUCTATTN_DATA to a folder that holds ptb/",
)


def write_char_files(folder: Path, texts: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, (name, _, _) in data.PTB_FILES.items():
        (folder / name).write_text(" ".join(texts[split]) + " ")


@needs_ptb
def test_real_char_ptb_has_the_standard_vocabulary_and_sizes():
    c = data.char_ptb(REAL_ROOT)
    assert c.source == "ptb"
    assert len(c.vocab) == 50 and "\n" in c.vocab and "_" in c.vocab
    assert len(c.train) == 5_017_482  # single-char tokens (the README quotes 5,017,483)
    assert 390_000 < len(c.valid) < 396_000 and 440_000 < len(c.test) < 445_000
    text = "the_cat\n"
    assert c.decode(c.encode(text)) == text
    assert c.decode(c.valid[:9]) == "consumers"


def test_root_argument_then_environment_then_data(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path / "env"))
    assert data_root(tmp_path / "arg") == tmp_path / "arg"
    assert data_root() == tmp_path / "env"
    monkeypatch.delenv("STRUCTATTN_DATA")
    assert data_root().name == "data"


def test_missing_files_say_where_to_put_them(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path))
    with pytest.raises(
        FileNotFoundError, match=r"ptb\.char\.train\.txt.*structattn data fetch ptb"
    ) as err:
        data.char_ptb()
    assert str(tmp_path / "ptb") in str(err.value)
    assert not data.ptb_available()


def test_corrupt_file_fails_its_checksum(tmp_path):
    write_char_files(tmp_path / "ptb", {"train": "ab_c\n", "valid": "ab", "test": "c"})
    with pytest.raises(
        ValueError, match=r"ptb\.char\.train\.txt is corrupt .* expected md5 874909f9"
    ):
        data.char_ptb(tmp_path)


def test_small_files_without_checksum_and_unknown_symbols(tmp_path):
    write_char_files(tmp_path / "ptb", {"train": "ab_ba\nab", "valid": "ba_", "test": "ab"})
    c = data.char_ptb(tmp_path, verify=False)
    assert c.vocab == ("\n", "_", "a", "b") and c.decode(c.train) == "ab_ba\nab"
    write_char_files(tmp_path / "bad" / "ptb", {"train": "ab_ba", "valid": "abz", "test": "ab"})
    with pytest.raises(ValueError, match=r"unknown vocabulary symbols \['z'\].*3 symbols"):
        data.char_ptb(tmp_path / "bad", verify=False)
    with pytest.raises(ValueError, match=r"unknown vocabulary symbols \['Q'\]"):
        c.encode("aQ")


def test_fallback_corpus_is_labelled_and_usable():
    c = data.fallback_corpus()
    assert "FALLBACK" in c.source and "not Penn Treebank" in c.source
    assert len(c.train) > 100_000 and len(c.valid) > 5_000
    assert "_" in c.vocab and "\n" in c.vocab and len(c.vocab) < 80
    assert data.load_corpus("fallback") is c
    with pytest.raises(ValueError, match=r"dataset='wiki' is not allowed"):
        data.load_corpus("wiki")


def _tar_url(tmp_path: Path, files: dict[str, bytes]) -> str:
    buf = tmp_path / "simple-examples.tgz"
    with tarfile.open(buf, "w") as tar:  # uncompressed: fast; tarfile reads either
        for name, blob in files.items():
            info = tarfile.TarInfo(f"./simple-examples/data/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return buf.as_uri()


def test_fetch_checks_what_it_downloads(tmp_path):
    url = _tar_url(tmp_path, {n: b"x y \n " for n, _, _ in data.PTB_FILES.values()})
    with pytest.raises(ValueError, match="is corrupt"):
        data.fetch("ptb", root=tmp_path / "root", url=url)
    with pytest.raises(ValueError, match=r"dataset='mnist' is not allowed"):
        data.fetch("mnist", root=tmp_path)


@needs_ptb
def test_fetch_extracts_and_verifies_the_release(tmp_path):
    src = data.ptb_dir(REAL_ROOT)
    files = {n: (src / n).read_bytes() for n, _, _ in data.PTB_FILES.values()}
    out = data.fetch("ptb", root=tmp_path, url=_tar_url(tmp_path, files))
    assert out == tmp_path / "ptb"
    assert len(data.char_ptb(tmp_path).vocab) == 50


def test_patchify_layout():
    img = torch.arange(3 * 8 * 8, dtype=torch.float32).view(3, 8, 8)
    tokens = images.Patchify(4)(img)
    assert tokens.shape == (4, 48)
    torch.testing.assert_close(tokens[1].view(3, 4, 4), img[:, 0:4, 4:8])  # row-major patches
    with pytest.raises(ValueError, match="patch=3 must divide"):
        images.Patchify(3)(img)


def make_fake_cifar(root: Path, per_batch: int = 12) -> None:
    """A tiny cifar-10-batches-py folder in torchvision's own pickle format."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        labels = [int(i % 10) for i in range(per_batch)]
        img = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        img[:, 0] = np.array(labels, dtype=np.uint8)[:, None, None] * 25  # learnable: red = label
        blob = {"data": img.reshape(per_batch, -1), "labels": labels}
        (folder / name).write_bytes(pickle.dumps(blob))
    meta = {"label_names": [f"class{i}" for i in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))


@pytest.fixture
def fake_cifar(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as tv_cifar

    make_fake_cifar(tmp_path)
    # the fake pickles cannot match the real archive's md5s; everything else is real
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path))
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path))
    return tmp_path


def test_cifar_patches_through_the_torchvision_loader(fake_cifar):
    train = images.cifar10_patches(train=True, patch=4)
    test = images.cifar10_patches(fake_cifar, train=False, patch=8)
    assert len(train) == 60 and len(test) == 12
    x, y = train[3]
    assert x.shape == (64, 48) and y == 3
    assert test[0][0].shape == (16, 192)
    assert images.cifar10_available()


def test_cifar_missing_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"structattn data fetch cifar10"):
        images.cifar10_patches(tmp_path)


def test_cifar_patch_run_trains_and_measures(fake_cifar):
    from structattn_lite.studies.attention.experiment import Config, run
    from structattn_lite.studies.attention.recipe import Recipe

    cfg = Config(dataset="cifar10", kind="matroidal", m=16, d_model=32, n_heads=2, batch_size=8,
                 recipe=Recipe(max_steps=4, warmup_steps=1, eval_every=2), eval_windows=6,
                 final_eval_windows=6, read_test=True)  # fmt: skip
    rec = run(cfg, progress=False)
    assert rec.status == "ok" and 0.0 <= rec.extra["final"]["val_acc"] <= 1.0
    assert 0.0 <= rec.extra["final"]["test_acc"] <= 1.0
    assert rec.extra["data"]["train_images_used"] == 54
    assert rec.extra["audit"]["fast_ref_gap"] < 1e-4
