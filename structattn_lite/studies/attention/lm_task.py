"""The character language-model task of the attention study: windows, batches, bpc.

Training batches are random windows of the (leading ``data_fraction`` of the) training
text; every evaluation reads fixed, evenly spaced windows of one split, so each point of
a learning curve sees the same text. Only ``evaluate_test`` touches the test split.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from structattn_lite.data import load_corpus
from structattn_lite.data.text import CharCorpus
from structattn_lite.models.lm import CharLM

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
