"""Text corpora for the attention study: character-level Penn Treebank and a fallback.

``char_ptb(root=None)`` reads Mikolov's ``ptb.char.{train,valid,test}.txt`` from
``<root>/ptb/`` (or ``<root>/``), root from the argument, then ``STRUCTATTN_DATA``, then
``data/``; it verifies the md5 of each file and builds the 50-symbol vocabulary from
the training split. ``fallback_corpus()`` is text every Python installation has (the
standard library's docstrings), for machines without PTB; it is always labelled as
such. ``fetch("ptb" | "cifar10")`` downloads for users who are online; nothing in the
tests downloads.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import sysconfig
import tarfile
import urllib.request
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from structattn_lite.config import check_choice, data_root

SPLITS = ("train", "valid", "test")
PTB_FILES = {  # name, bytes, md5 (from the data README; Mikolov's simple-examples release)
    "train": ("ptb.char.train.txt", 10034964, "874909f99060142f6b88cc74c34baaa2"),
    "valid": ("ptb.char.valid.txt", 786084, "9e0fe5bec2a8bf43fd686dc23d5ab8bb"),
    "test": ("ptb.char.test.txt", 884846, "1f9a2d1afe00f76e8bfbe09a65439681"),
}
PTB_NAMES = [name for name, _, _ in PTB_FILES.values()]
PTB_URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
FALLBACK_LABEL = "FALLBACK: Python standard-library docstrings (not Penn Treebank)"
DATASETS = ("ptb", "cifar10")


@dataclass
class CharCorpus:
    """Three encoded splits (LongTensor of symbol ids) and the vocabulary they share."""

    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    vocab: tuple[str, ...]
    source: str  # "ptb" or FALLBACK_LABEL
    location: str

    def encode(self, symbols: str | list[str]) -> torch.Tensor:
        return torch.from_numpy(encode(list(symbols), self.vocab))

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def summary(self) -> dict[str, object]:
        return {
            "source": self.source,
            "location": self.location,
            "vocab_size": len(self.vocab),
            **{f"{s}_symbols": len(getattr(self, s)) for s in SPLITS},
        }


# --- vocabulary -------------------------------------------------------------------


def encode(symbols: list[str], vocab: tuple[str, ...]) -> np.ndarray:
    """Symbol ids (int64), id i for vocab[i] (a vocabulary is the sorted distinct symbols
    of its training text); a ValueError lists any symbol the vocabulary lacks."""
    if any(len(s) != 1 for s in vocab):
        raise ValueError("vocab must hold single characters")
    codes = np.frombuffer("".join(symbols).encode("utf-32-le"), dtype=np.uint32)
    if len(codes) != len(symbols):
        raise ValueError("every symbol must be a single character")
    vocab_codes = np.array([ord(s) for s in vocab], dtype=np.int64)
    table = np.full(max(int(codes.max(initial=0)), int(vocab_codes.max(initial=0))) + 1, -1)
    table[vocab_codes] = np.arange(len(vocab))
    ids = table[codes]
    if (ids < 0).any():
        unknown = sorted({chr(c) for c in codes[ids < 0]})
        raise ValueError(
            f"unknown vocabulary symbols {unknown}: the vocabulary (built from the training "
            f"split) has {len(vocab)} symbols {list(vocab)}; map or drop these symbols first"
        )
    return ids.astype(np.int64)


# --- Penn Treebank ----------------------------------------------------------------


def _missing_message(root: Path) -> str:
    # Name what is missing from whichever of the two folders holds more of the files.
    folder = max((root / "ptb", root), key=lambda d: sum((d / f).is_file() for f in PTB_NAMES))
    missing = ", ".join(f for f in PTB_NAMES if not (folder / f).is_file())
    return (
        f"Penn Treebank character files not found: {folder} lacks {missing} (looked for "
        f"{', '.join(PTB_NAMES)} in {root / 'ptb'} and {root}). Put the three files (data/ "
        f"folder of Mikolov's simple-examples release) in {root / 'ptb'}, or set STRUCTATTN_DATA (or pass root=) to a folder "
        f"that holds ptb/, or run `structattn data fetch ptb` on a machine that is online."
    )


def missing_ptb(where: str | Path) -> str:
    """What is wrong with ``where`` as a folder of the PTB files, in a few words."""
    path = Path(where)
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is a file, not a folder"
    return f"neither {path / 'ptb'} nor {path} holds {', '.join(PTB_NAMES)}"


def ptb_dir(root: str | Path | None = None) -> Path | None:
    """The folder that holds the three ptb.char files, or None."""
    base = data_root(root)
    for folder in (base / "ptb", base):
        if all((folder / f).is_file() for f in PTB_NAMES):
            return folder
    return None


def ptb_available(root: str | Path | None = None) -> bool:
    return ptb_dir(root) is not None


def verify_file(path: Path, size: int, md5: str) -> None:
    """ValueError naming the file, expected and actual size/md5, and the fix."""
    with open(path, "rb") as fh:
        got_md5, got_size = hashlib.file_digest(fh, "md5").hexdigest(), path.stat().st_size
    if got_md5 != md5:
        raise ValueError(
            f"{path} is corrupt or not the standard release: md5 {got_md5} (size {got_size} "
            f"bytes), expected md5 {md5} (size {size} bytes). Replace it with the original "
            f"file (e.g. `structattn data fetch ptb`)."
        )


def read_char_file(path: Path) -> list[str]:
    """Symbols of a ptb.char file: single characters separated by one space; '\\n' kept."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path} is not a UTF-8 text file ({err.reason} at byte {err.start}); "
            "replace it with the original ptb.char file"
        ) from None
    symbols = [s for s in text.split(" ") if s]
    bad = next((s for s in symbols if len(s) != 1), None)
    if bad is not None:
        raise ValueError(f"{path} is not a character file: found the token {bad!r}")
    return symbols


@lru_cache(maxsize=2)
def _load_ptb(folder: str, verify: bool) -> CharCorpus:
    split_symbols = {}
    for split, (name, size, md5) in PTB_FILES.items():
        path = Path(folder) / name
        if verify:
            verify_file(path, size, md5)
        split_symbols[split] = read_char_file(path)
    vocab = tuple(sorted(set(split_symbols["train"])))
    enc = {s: torch.from_numpy(encode(v, vocab)) for s, v in split_symbols.items()}
    return CharCorpus(enc["train"], enc["valid"], enc["test"], vocab, "ptb", folder)


def char_ptb(root: str | Path | None = None, verify: bool = True) -> CharCorpus:
    """Character-level PTB: splits encoded with the train vocabulary (50 symbols).

    FileNotFoundError (saying where to put the files) when they are missing;
    ValueError when a file fails its checksum (``verify=False`` skips that check).
    """
    folder = ptb_dir(root)
    if folder is None:
        raise FileNotFoundError(_missing_message(data_root(root)))
    return _load_ptb(str(folder.resolve()), bool(verify))


# --- fallback corpus --------------------------------------------------------------

_KEEP = re.compile(r"[^a-z0-9 \n.,;:'\"()\-/&$#*<>=+%]")


@lru_cache(maxsize=1)
def fallback_corpus() -> CharCorpus:
    """Docstrings of the standard library's top-level modules, PTB-style symbols.

    Lowercased, runs of blanks to one '_' (PTB's word boundary), one paragraph per
    line, rare characters dropped; split 90/5/5 in file order. Deterministic for a
    given Python version; a stand-in to exercise the pipeline, not a benchmark.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        docs += [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, kinds)]
    text = _KEEP.sub("", "\n".join(d for d in docs if d).lower())
    lines = (re.sub(r"\s+", "_", p.strip()) for p in re.split(r"\n\s*\n|\n", text))
    symbols = list("\n".join(line for line in lines if line) + "\n")
    n = len(symbols)
    cut1, cut2 = int(0.9 * n), int(0.95 * n)
    vocab = tuple(sorted(set(symbols)))
    ids = torch.from_numpy(encode(symbols, vocab))
    return CharCorpus(ids[:cut1], ids[cut1:cut2], ids[cut2:], vocab, FALLBACK_LABEL, str(stdlib))


def load_corpus(name: str, root: str | Path | None = None) -> CharCorpus:
    """ "ptb" (error if absent) or "fallback"."""
    check_choice("dataset", name, ("ptb", "fallback"))
    return char_ptb(root) if name == "ptb" else fallback_corpus()


# --- downloads (users who are online; never called by tests with a real URL) -----


def _download(url: str, dest: Path) -> Path:
    from tqdm.auto import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    with urllib.request.urlopen(url) as resp, open(tmp, "wb") as fh:  # noqa: S310
        total = int(resp.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
            for chunk in iter(lambda: resp.read(1 << 16), b""):
                fh.write(chunk)
                bar.update(len(chunk))
    tmp.replace(dest)
    return dest


def fetch(dataset: str, root: str | Path | None = None, url: str | None = None) -> Path:
    """Download ``"ptb"`` (checksummed char files into <root>/ptb) or ``"cifar10"``."""
    check_choice("dataset", dataset, DATASETS)
    base = data_root(root)
    if dataset == "cifar10":
        from torchvision.datasets import CIFAR10

        for train in (True, False):
            CIFAR10(str(base), train=train, download=True)
        return base / "cifar-10-batches-py"
    if (found := ptb_dir(root)) is not None:
        return found
    target = base / "ptb"
    archive = _download(url or PTB_URL, base / "simple-examples.tgz")
    wanted = {name: (size, md5) for name, size, md5 in PTB_FILES.values()}
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and name in wanted:
                with tar.extractfile(member) as src, open(target / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    for name, (size, md5) in wanted.items():
        if not (target / name).is_file():
            raise FileNotFoundError(f"{archive} has no {name}; is it the simple-examples archive?")
        verify_file(target / name, size, md5)
    return target


def resolve_dataset(root=None) -> str:
    """ "ptb" when its files are there, else "fallback" with a warning (never silent); a
    ValueError when ``STRUCTATTN_DATA`` names a place without them (a missing or empty
    folder, a file): the fallback is only for when no data folder was named."""
    if ptb_available(root):
        return "ptb"
    named = os.environ.get("STRUCTATTN_DATA")
    if root is None and named:
        raise ValueError(
            f"STRUCTATTN_DATA={named!r} names no folder holding Penn Treebank "
            f"({missing_ptb(named)}); point it at the folder that holds ptb/, or unset it "
            "to use the fallback corpus"
        )
    warnings.warn(f"Penn Treebank not found; using the {FALLBACK_LABEL}", stacklevel=2)
    return "fallback"
