"""The notebook's live plot says which run it draws (it drew two bare panels before)."""

from __future__ import annotations

import torch
from torch import nn

from structattn_lite import report
from structattn_lite.training.trainer import Callback, Trainer


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


def test_a_csp_run_feeds_live_plots_and_its_progress_bar(monkeypatch, capsys):
    """A CSP run trains seed-stacked (one seed): callbacks still see every step and every
    epoch's row with the run's name, as on a Trainer, and the progress bar shows the run."""
    from structattn_lite.runs import train
    from structattn_lite.training.state_tracking import CSPRun

    shown, steps = [], []
    monkeypatch.setattr(report, "display", shown.append)

    class Steps(Callback):
        def on_batch_end(self, trainer, loss, grad_norm):
            steps.append((trainer.run_name, loss, grad_norm))

    cfg = CSPRun(n=100, length=8, epochs=2, batch_size=32, model_options={"d_model": 8})
    record = train("grokking", cfg, callbacks=[report.LivePlot(), Steps()], progress=True)
    assert record.extra["seed_batched"] == 1
    titles = [fig.get_suptitle() for fig in shown]
    assert titles == ["parity/paper/s0, epoch 1", "parity/paper/s0, epoch 2"]
    assert [n for _, _, n in steps] == record.extra["step_grad_norms"]
    assert {name for name, _, _ in steps} == {"parity/paper/s0"}
    assert "parity/paper/s0" in capsys.readouterr().err
