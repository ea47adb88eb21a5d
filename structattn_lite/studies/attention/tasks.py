"""What a run of the attention study reads: the character language-model task, the
images as patch tokens, and the n-gram floors of the text.

Text. Training batches are random windows of the (leading ``data_fraction`` of the)
training text; every evaluation reads fixed, evenly spaced windows of one split, so each
point of a learning curve sees the same text. A language model that does not beat the
bigram floor (an add-alpha n-gram model of the same text, counted on the training split
only) has learned no more than which character tends to follow which; every table of the
study prints these floors beside the Transformers' numbers.

Images. The 8x8 digits ship with scikit-learn and are split train / validation / test by
``data.images.digits_patches``; CIFAR-10 runs only where it is on disk, with the last
tenth of its training images (at most 5,000) as validation. The same blocks as the
language model, non-causal, mean-pooled into a classifier.

Only ``evaluate_test`` touches a test split.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from structattn_lite.config import check_int, check_number
from structattn_lite.data import load_corpus
from structattn_lite.data.images import cifar10_patches, digits_patches
from structattn_lite.data.text import CharCorpus
from structattn_lite.models.lm import CharLM, PatchClassifier

# --- text -------------------------------------------------------------------------

LN2 = math.log(2.0)


def windows(data: torch.Tensor, starts: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, next-symbol targets) [len(starts), T] of the windows at ``starts``."""
    starts = starts.to(data.device)
    chunk = data[starts[:, None] + torch.arange(T + 1, device=data.device)]
    return chunk[:, :-1], chunk[:, 1:]


def eval_starts(n: int, T: int, count: int) -> torch.Tensor:
    """Evenly spaced, fixed window starts: every evaluation sees the same text."""
    return torch.linspace(0, n - T - 2, min(count, n - T - 1)).long()


@torch.no_grad()
def bits_per_char(model: CharLM, data: torch.Tensor, T: int, count: int, batch: int = 64) -> float:
    """Mean next-symbol cross-entropy in bits over ``count`` fixed windows of ``data``."""
    was_training = model.training
    model.eval()
    starts, total = eval_starts(len(data), T, count), 0.0
    for i in range(0, len(starts), batch):
        x, y = windows(data, starts[i : i + batch], T)
        total += model.loss(x, y).item() * len(x)
    model.train(was_training)
    return total / len(starts) / LN2


@dataclass
class LMTask:
    """What a run needs from the corpus; ``corpus.test`` is read by ``evaluate_test`` only."""

    corpus: CharCorpus
    train: torch.Tensor  # the leading data_fraction of the training split
    block_size: int
    batch_size: int
    seed: int

    @classmethod
    def build(cls, cfg, corpus: CharCorpus | None = None, device: str = "cpu") -> LMTask:
        corpus = corpus if corpus is not None else load_corpus(cfg.dataset)
        n = max(cfg.block_size + 2, math.ceil(cfg.data_fraction * len(corpus.train)))
        if torch.device(device).type != "cpu":  # the splits live where the model does
            corpus = dataclasses.replace(
                corpus, train=corpus.train.to(device), valid=corpus.valid.to(device),
                test=corpus.test.to(device),
            )  # fmt: skip
        return cls(corpus, corpus.train[:n], cfg.block_size, cfg.batch_size, cfg.seed)

    def batches(self):
        """``batch(step)``: step's random training windows, from the run's own generator."""
        gen = torch.Generator().manual_seed(self.seed)
        T, n = self.block_size, len(self.train)

        def batch(step: int):
            starts = torch.randint(0, n - T - 1, (self.batch_size,), generator=gen)
            return windows(self.train, starts, T)

        batch.generator = gen  # what a checkpoint saves and restores
        return batch

    def evaluate(self, model: CharLM, count: int) -> dict[str, float]:
        return {"val_bpc": bits_per_char(model, self.corpus.valid, self.block_size, count)}

    def evaluate_test(self, model: CharLM, count: int) -> dict[str, float]:
        return {"test_bpc": bits_per_char(model, self.corpus.test, self.block_size, count)}

    def check_batch(self, count: int = 4) -> torch.Tensor:
        """Fixed validation windows for the reference-path audit and attention maps."""
        valid, T = self.corpus.valid, self.block_size
        return windows(valid, eval_starts(len(valid), T, count), T)[0]


# --- n-gram floors of the text ----------------------------------------------------

FLOOR_ORDERS = {"unigram": 1, "bigram": 2, "trigram": 3}


def ngram_bpc(
    train: torch.Tensor, evaluate: torch.Tensor, order: int, vocab_size: int, alpha: float = 0.1
) -> float:
    """Bits per symbol of ``evaluate`` under an add-``alpha`` ``order``-gram model of ``train``.

    p(s | c) = (count(c s) + alpha) / (count(c) + alpha V), c the previous order - 1
    symbols; the first order - 1 symbols of ``evaluate`` (no full context) are skipped.
    """
    order = check_int("order", order, minimum=1)
    V = check_int("vocab_size", vocab_size, minimum=1)
    alpha = check_number("alpha", alpha, minimum=0.0, strict=True)
    if V**order > 2**31:
        raise ValueError(f"vocab_size**order = {V**order} is too large for a dense count table")
    tr, ev = (np.asarray(t, dtype=np.int64) for t in (train, evaluate))
    if len(ev) < order or len(tr) < order:
        raise ValueError(f"need at least order={order} symbols in both splits")

    def codes(a: np.ndarray) -> np.ndarray:  # each n-gram as one base-V integer
        n = len(a) - order + 1
        out = np.zeros(n, dtype=np.int64)
        for k in range(order):
            out = out * V + a[k : k + n]
        return out

    counts = np.bincount(codes(tr), minlength=V**order).reshape(-1, V).astype(float)
    context = counts.sum(1)
    grams = codes(ev)
    ctx, sym = grams // V, grams % V
    p = (counts[ctx, sym] + alpha) / (context[ctx] + alpha * V)
    return float(-np.log(p).mean() / math.log(2))


def ngram_floors(corpus, split: str = "valid", alpha: float = 0.1) -> dict[str, float]:
    """{"unigram": .., "bigram": .., "trigram": ..} bits per character on ``split``."""
    data, V = getattr(corpus, split), len(corpus.vocab)
    return {name: ngram_bpc(corpus.train, data, n, V, alpha) for name, n in FLOOR_ORDERS.items()}


def floor_table(corpus, alpha: float = 0.1) -> dict[str, dict[str, float]]:
    """{"valid": floors, "test": floors}: what every language-model table prints."""
    return {split: ngram_floors(corpus, split, alpha) for split in ("valid", "test")}


def floor_frame(corpus) -> pd.DataFrame:
    """The n-gram floors of ``corpus`` as rows (split, model, bpc), for the export."""
    return pd.DataFrame([{"split": split, "model": name, "bpc": round(bpc, 4)}
                         for split, row in floor_table(corpus).items()
                         for name, bpc in row.items()])  # fmt: skip


# --- images ------------------------------------------------------------------------


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
            load_test = lambda: _stack(t := cifar10_patches(train=False), list(range(len(t))))  # noqa: E731
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
