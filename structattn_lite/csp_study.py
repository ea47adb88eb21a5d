"""The CSP state-tracking experiment: one frozen config per run, cached run records.

``run_csp(config)`` trains one model on one task split and returns a ``RunRecord``;
``sweep`` runs many configs through the ``RunStore`` so notebooks reload rather than
retrain; ``profile_grid`` lists the grid each profile runs.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from structattn_lite import profiles
from structattn_lite.losses import get_loss
from structattn_lite.metrics import grokking_gap, predict, scores
from structattn_lite.models import CSP_PRESETS, build_model, count_parameters
from structattn_lite.paths import results_dir
from structattn_lite.results import (
    RunRecord,
    RunStore,
    export_histories,
    load_histories,
)
from structattn_lite.tasks import PAPER_N, StateTrackingData, make_dataset
from structattn_lite.training import OptimConfig, Trainer, few_threads

EXPERIMENT = "csp"


@dataclass(frozen=True)
class CSPRun:
    """Everything that determines one run; its hash keys the cached record."""

    task: str = "parity"
    model: str = "csp"
    preset: str | None = "paper"
    model_options: dict = field(default_factory=dict)  # overrides of the preset's fields
    task_options: dict = field(default_factory=dict)  # k, target, balanced, negatives, label
    seed: int = 0
    length: int = 16
    n: int = 5000
    labels: str = "sequence"
    leaky: bool = False
    loss: str = "focal"
    epochs: int = 300
    batch_size: int = 64
    optim: OptimConfig = field(default_factory=OptimConfig)
    hold_perfect: int | None = None  # early stop after this many epochs at 100% (None: never)


def build_data(cfg: CSPRun) -> StateTrackingData:
    return make_dataset(
        cfg.task,
        cfg.n,
        cfg.length,
        cfg.seed,
        labels=cfg.labels,
        leaky=cfg.leaky,
        **cfg.task_options,
    )


def build_csp_model(cfg: CSPRun, n_classes: int) -> torch.nn.Module:
    return build_model(cfg.model, preset=cfg.preset, n_classes=n_classes, **cfg.model_options)


def run_csp(cfg: CSPRun, callbacks=(), progress: bool = True) -> RunRecord:
    """Train one config from its seed; the history is identical for identical configs."""
    data = build_data(cfg)
    torch.manual_seed(cfg.seed)
    model = build_csp_model(cfg, data.n_classes)
    loss = get_loss(cfg.loss)
    last_only = cfg.labels == "sequence"

    def loss_fn(m, x, y):
        logits = m(x)
        return loss(logits[:, -1], y[:, -1]) if last_only else loss(logits, y)

    def batches(generator):
        order = torch.randperm(len(data.x_train), generator=generator)
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            yield data.x_train[idx], data.y_train[idx]

    def evaluate(m):
        train = scores(predict(m, data.x_train), data.y_train, cfg.labels)
        pred_test = predict(m, data.x_test)
        test = scores(pred_test, data.y_test, cfg.labels)
        last = scores(pred_test, data.y_test, "sequence")  # whole string, as the paper scores
        return {
            "train_acc": train["acc"],
            "test_acc": test["acc"],
            "test_f1": test["f1"],
            "test_seq_acc": last["acc"],
            "test_seq_f1": last["f1"],
        }

    def held_perfect(rows):
        k = cfg.hold_perfect
        return k is not None and len(rows) >= k and all(r["test_acc"] == 1.0 for r in rows[-k:])

    trainer = Trainer(model, loss_fn, cfg.optim, callbacks=callbacks, progress=progress)
    start = time.perf_counter()
    result = trainer.fit(
        cfg.epochs,
        batches,
        evaluate,
        torch.Generator().manual_seed(cfg.seed),
        stop_when=held_perfect,
        desc=f"{cfg.task}/{cfg.preset or cfg.model}/s{cfg.seed}",
    )
    seconds = time.perf_counter() - start
    return RunRecord.from_training(
        EXPERIMENT,
        cfg,
        result,
        step_grad_norms=result.step_grad_norms,
        n_parameters=count_parameters(model),
        seconds=seconds,
        data=data.summary(),
    )


def sweep(
    configs: list[CSPRun], store: RunStore | None = None, progress: bool = True, callbacks=()
) -> list[RunRecord]:
    """Run (or reload) each config; a diverged run is recorded and the sweep goes on."""
    from tqdm.auto import tqdm

    store = store or RunStore()
    out = []
    with few_threads():
        for cfg in tqdm(configs, desc="runs", disable=not progress):
            train = lambda c: run_csp(c, callbacks=callbacks, progress=progress)  # noqa: E731
            out.append(store.get_or_run(EXPERIMENT, cfg, train))
    return out


# Per-profile grid for the grokking notebook: smoke proves the pipeline in seconds,
# quick shows the effects on 2 cores in minutes, paper is the paper's protocol.
GROKKING_PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "tasks": ("parity",),
        "seeds": (0,),
        "epochs": 2,
        "n": 400,
        "presets": ("paper", "upstream"),
    },
    "quick": {
        "tasks": ("parity", "mod3", "dyck1"),
        "seeds": (0, 1),
        "epochs": 25,
        "n": 1000,
        "presets": ("paper", "upstream"),
    },
    "paper": {
        "tasks": ("parity", "mod3", "dyck1"),
        "seeds": tuple(range(10)),
        "epochs": 300,
        "n": None,
        "presets": ("paper", "upstream"),
    },
}


# The larger grid whose records ship in data/results (too long for the quick profile).
SHIPPED_GROKKING = {
    "tasks": ("parity", "mod3", "dyck1"),
    "seeds": (0, 1, 2),
    "epochs": 100,
    "n": None,
    "presets": ("paper", "upstream"),
    "hold_perfect": 10,
}


def grokking_grid(profile: str) -> list[CSPRun]:
    """The runs behind the grokking figures and table for a profile (or ``"shipped"``).

    The paper's own protocol (i.i.d. samples, random split) is used so its numbers are
    comparable; the ablation and length notebooks test what that protocol hides.
    """
    spec = SHIPPED_GROKKING if profile == "shipped" else profiles.pick(profile, GROKKING_PROFILES)
    runs = []
    for task in spec["tasks"]:
        for preset in spec["presets"]:
            for seed in spec["seeds"]:
                runs.append(
                    CSPRun(
                        task=task,
                        preset=preset,
                        seed=seed,
                        n=spec["n"] or PAPER_N[task],
                        leaky=True,
                        labels="prefix" if preset == "upstream" else "sequence",
                        epochs=spec["epochs"],
                        hold_perfect=spec.get("hold_perfect"),
                    )
                )
    return runs


def summarize(records: list[RunRecord]) -> pd.DataFrame:
    """One row per run: final test accuracy, F1, grokking gap, epoch of the largest grad norm."""
    rows = []
    for r in records:
        h = r.history
        acc = h["test_acc"].tolist() if len(h) else []
        rows.append(
            {
                "task": r.config["task"],
                "preset": r.config["preset"] or r.config["model"],
                "seed": r.seed,
                "status": r.status,
                "epochs_run": len(h),
                "final_test_acc": acc[-1] if acc else float("nan"),
                "final_test_f1": h["test_f1"].iloc[-1] if len(h) else float("nan"),
                "grokking_gap": grokking_gap(acc),
                "spike_epoch": int(h.loc[h["grad_norm_max"].idxmax(), "epoch"]) if len(h) else None,
                "seconds_per_epoch": r.extra.get("seconds", float("nan")) / max(len(h), 1),
            }
        )
    return pd.DataFrame(rows)


# Paper section 4.2.1: epochs from 90% to 100% test accuracy, mean and sd over 10 seeds.
PAPER_GROKKING_GAP = {"parity": (3.2, 1.2), "mod3": (8.4, 2.1), "dyck1": (12.7, 3.4)}


SHIPPED_GROKKING_CSV = "csp_grokking_histories.csv.gz"


def shipped_grokking_records() -> list[RunRecord]:
    """The shipped grid's records (data/results), or [] when they are not there."""
    path = results_dir() / SHIPPED_GROKKING_CSV
    return load_histories(path) if path.exists() else []


def export_shipped_grokking(store: RunStore | None = None) -> Path:
    """Write the finished runs of the shipped grid to data/results (to commit them)."""
    store = store or RunStore()
    done = [r for r in (store.load(EXPERIMENT, c) for c in grokking_grid("shipped")) if r]
    return export_histories(done, results_dir() / SHIPPED_GROKKING_CSV)


def grokking_table(records: list[RunRecord]) -> pd.DataFrame:
    """Grokking gap per task and preset over seeds, beside the paper's number."""
    runs = summarize(records)
    rows = []
    for (task, preset), group in runs.groupby(["task", "preset"], sort=False):
        gaps = group["grokking_gap"].dropna().astype(float)
        paper_mean, paper_sd = PAPER_GROKKING_GAP.get(task, (float("nan"), float("nan")))
        reached, seeds = len(gaps), len(group)
        if reached == 0:
            verdict = "not reproduced: no seed reached 100%"
        elif abs(gaps.mean() - paper_mean) <= 2 * paper_sd:
            verdict = f"{reached}/{seeds} seeds reached 100%; gap within 2 sd of the paper"
        else:
            verdict = f"{reached}/{seeds} seeds reached 100%; gap outside 2 sd of the paper"
        rows.append(
            {
                "task": task,
                "preset": preset,
                "seeds": seeds,
                "seeds_at_100": reached,
                "final_test_acc": f"{group.final_test_acc.mean():.3f} ± {group.final_test_acc.std(ddof=0):.3f}",
                "gap_ours": f"{gaps.mean():.1f} ± {gaps.std(ddof=0):.1f}"
                if reached
                else "not reached",
                "gap_paper": f"{paper_mean} ± {paper_sd}",
                "max_epochs": int(group["epochs_run"].max()),
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)


def preset_table() -> pd.DataFrame:
    """The CSP presets side by side; ``differs`` marks where text and code disagree."""
    table = pd.DataFrame({name: dataclasses.asdict(cfg) for name, cfg in CSP_PRESETS.items()})
    table["differs"] = table["paper"] != table["upstream"]
    return table
