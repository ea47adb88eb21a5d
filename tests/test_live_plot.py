"""The notebook's live plot says which run it draws (it drew two bare panels before)."""

from __future__ import annotations

import torch
from torch import nn

from structattn_lite import report
from structattn_lite.training.trainer import Trainer


def test_live_plot_title_names_its_run(monkeypatch):
    shown = []
    monkeypatch.setattr(report, "display", shown.append)
    live = report.LivePlot()
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    trainer = Trainer(
        nn.Linear(3, 1),
        lambda m, a, b: nn.functional.mse_loss(m(a), b),
        callbacks=[live],
        progress=False,
    )
    trainer.fit(
        2,
        lambda g: [(x, y)],
        lambda m: {"test_acc": 0.5},
        torch.Generator(),
        desc="parity/paper/s0",
    )
    titles = [fig.get_suptitle() for fig in shown]
    assert titles == ["parity/paper/s0, epoch 1", "parity/paper/s0, epoch 2"]
