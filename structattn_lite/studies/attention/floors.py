"""N-gram floors: the bits per character of add-alpha n-gram models of the same text.

A language model that does not beat the bigram floor has learned no more than which
character tends to follow which; every table of the attention study prints these floors
beside the Transformers' numbers. Counts come from the training split only.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from structattn_lite.config import check_int, check_number

FLOOR_ORDERS = (1, 2, 3)


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
    names = {1: "unigram", 2: "bigram", 3: "trigram"}
    data = getattr(corpus, split)
    return {
        names[n]: ngram_bpc(corpus.train, data, n, len(corpus.vocab), alpha) for n in FLOOR_ORDERS
    }


def floor_table(corpus, alpha: float = 0.1) -> dict[str, dict[str, float]]:
    """{"valid": floors, "test": floors}: what every language-model table prints."""
    return {split: ngram_floors(corpus, split, alpha) for split in ("valid", "test")}
