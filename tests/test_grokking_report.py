"""The grokking study's gap and spike analysis: one metric for every preset, a Welch
verdict against the paper that a wide interval cannot pass, and the spike's offset."""

from __future__ import annotations

import pandas as pd
import pytest

from structattn_lite.records import RunRecord
from structattn_lite.report import NO_ROW, ledger_rows
from structattn_lite.stats import welch_difference
from structattn_lite.studies.grokking import report
from structattn_lite.studies.grokking.experiment import GRIDS, grid


def record(seed: int, seq_acc: list[float], prefix_acc: list[float], norms: list[float]):
    """A run whose per-prefix accuracy (its labels) and whole-string accuracy differ."""
    epochs = range(1, len(seq_acc) + 1)
    history = pd.DataFrame(
        {
            "epoch": list(epochs),
            "train_acc": prefix_acc,
            "test_acc": prefix_acc,
            "test_f1": prefix_acc,
            "test_seq_acc": seq_acc,
            "grad_norm_max": norms,
        }
    )
    config = {"task": "parity", "preset": "authors_3bb9f71", "model": "csp", "seed": seed}
    return RunRecord("csp", f"k{seed}", config, history)


def test_gap_and_jump_read_whole_string_accuracy_not_the_runs_labels():
    # Per-prefix accuracy passes 90% at epoch 1 and 100% at epoch 2; the whole string
    # reaches 90% at epoch 3 and 100% at epoch 6. The spike (largest norm) is at epoch 4.
    run = record(0, [0.5, 0.6, 0.92, 0.95, 0.99, 1.0], [0.95, 1.0, 1.0, 1.0, 1.0, 1.0],
                 [1, 1, 2, 9, 1, 1])  # fmt: skip
    row = report.summarize([run]).iloc[0]
    assert (row.jump_epoch, row.grokking_gap, row.spike_epoch) == (3, 3, 4)
    assert row.spike_minus_jump == 1
    on_labels = report.summarize([run], metric="test_acc").iloc[0]
    assert (on_labels.jump_epoch, on_labels.grokking_gap) == (1, 1)


def test_welch_difference_matches_a_hand_computation():
    # sd 1, n 4 on each side: se = sqrt(1/4 + 1/4), df = 6, t(0.975, 6) = 2.4469
    diff, low, high = welch_difference((5.0, 1.0, 4), (3.0, 1.0, 4))
    assert diff == 2.0 and (high - low) / 2 == pytest.approx(2.4469 * 0.5**0.5, rel=1e-4)
    assert all(v != v for v in welch_difference((5.0, 1.0, 1), (3.0, 1.0, 4))[1:])


def test_grokking_table_counts_seeds_and_spikes():
    # Every seed sits at chance, jumps at epoch 3 and reaches 100% at 4; seeds 1 and 2
    # spike at the jump, seed 0 four epochs after it.
    spikes = {0: [1, 1, 1, 1, 1, 1, 9], 1: [1, 1, 5, 1, 1, 1, 1], 2: [1, 1, 5, 1, 1, 1, 1]}
    acc = [0.5, 0.5, 0.92, 1.0, 1.0, 1.0, 1.0]
    runs = [record(s, acc, [1.0] * 7, spikes[s]) for s in range(3)]
    row = report.grokking_table(runs).iloc[0]
    assert (row.seeds, row["reached 100%"], row["at chance first"]) == (3, 3, 3)
    assert row["gap to 100% (KM median)"] == 1 and row["spike at jump"] == "2 of 3"
    # the verdict is the committed ledger's row for the authors' model on parity, read by
    # id (its 25 seeds, not these 3): tests/test_ledger_verdicts.py alters it
    ledger = ledger_rows().loc["gap/authors_3bb9f71/parity"]
    assert row["ledger row"] == "gap/authors_3bb9f71/parity"
    assert (row.verdict, row.reason) == (ledger["verdict"], ledger["reason"])
    assert row["ledger: gap to 100% [95%]"].endswith(f"({ledger['seeds']} seeds)")
    stalled = [record(s, acc[:3] + [0.99] * 4, [1.0] * 7, spikes[s]) for s in range(3)]
    row = report.grokking_table(stalled).iloc[0]
    assert row["reached 100%"] == 0 and row["gap to 100% (KM median)"] == report.NOT_REACHED
    assert row["reached 99%"] == 3 and row.verdict == ledger["verdict"]
    other = [RunRecord("csp", r.key, {**r.config, "preset": "code_switches"}, r.history)
             for r in runs]  # fmt: skip
    assert report.grokking_table(other).iloc[0].verdict == NO_ROW  # no ledger row: no verdict


def test_gap_grid_is_the_papers_sizes_with_a_validation_stop():
    spec, runs = GRIDS["gap"], grid("gap")
    assert len(runs) == len(spec["tasks"]) * len(spec["presets"]) * len(spec["seeds"])
    assert len(spec["seeds"]) >= 5 and {r.epochs for r in runs} == {300}
    assert {(r.task, r.n) for r in runs} == {("parity", 5000), ("mod3", 5000), ("dyck1", 10000)}
    assert all(r.val_fraction > 0 and r.hold_perfect == 10 for r in runs)


def test_gap_seeds_grid_is_the_gap_grid_with_more_seeds():
    import dataclasses

    more = grid("gap_seeds")
    assert {c.task for c in more} == {"mod3", "parity"}
    for task in ("mod3", "parity"):  # the authors' model: 25 seeds per task with the gap grid
        gap = {c.seed: c for c in grid("gap") if c.task == task and c.preset == "authors_3bb9f71"}
        extra = [c for c in more if c.task == task]
        assert {c.seed for c in extra}.isdisjoint(gap) and len(extra) + len(gap) == 25
        assert all(dataclasses.replace(c, seed=0) == gap[0] for c in extra)
    assert [c.task for c in more] == sorted(c.task for c in more)  # mod-3's seeds first
    assert len({c.seed for c in grid("gap")}) == 10  # the paper's count, for every cell


def test_browser_shows_a_smoke_profiles_one_task_and_seed_as_labels():
    """Notebook 03 in the smoke profile trains one task and one seed: its browser offered
    each as a dropdown with one option. A label stands in for each, and the committed grid's
    five seeds and three tasks bring the dropdowns back, opening on parity."""
    import ipywidgets as W

    from structattn_lite.dashboard import controls
    from structattn_lite.studies.grokking.experiment import committed_records

    gap = committed_records("gap")
    smoke = [r for r in gap if (r.config["task"], r.seed) == ("mod3", 0)]
    app = report.grokking_browser({"profile smoke": smoke, "gap grid": gap})
    row = app.children[0].children
    shown = [w for w in row if w.layout.display != "none"]
    source = next(w for w in shown if isinstance(w, W.Dropdown))
    facts = sorted(w.value for w in shown if isinstance(w, W.Label))
    assert facts == ["seed: 0", "task: mod-3"]
    assert [w.description for w in shown if isinstance(w, W.Dropdown)] == ["source", "preset"]
    source.value = "gap grid"
    shown = [w for w in row if w.layout.display != "none"]
    assert not [w for w in shown if isinstance(w, W.Label)]
    assert controls(app)["task"][0][0] == "parity"
