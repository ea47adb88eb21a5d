"""Ablation grids, verdict logic, tables, and seed-batched training equal to per-seed runs."""

import dataclasses
import math

import pandas as pd
import pytest
import torch

from structattn_lite.records import RunStore
from structattn_lite.report import NO_ROW, ledger_rows, style
from structattn_lite.runs import sweep, train
from structattn_lite.studies.ablations import experiment as ab
from structattn_lite.studies.ablations import report as ct
from structattn_lite.training.state_tracking import CSPRun
from structattn_lite.training.trainer import OptimConfig


def test_unknown_grid_names_the_allowed_ones():
    with pytest.raises(ValueError, match="grid='huge' is not allowed"):
        ab.grid("huge")
    assert "committed" not in ab.GRIDS  # the small grid stopped on test accuracy: retired


def test_paper_text_grid_is_the_gap_grid_once_per_loss(tmp_path, monkeypatch):
    from structattn_lite.records import RunRecord, config_hash
    from structattn_lite.studies.grokking import experiment as grokking

    configs = ab.grid("paper_text")
    gap = [r for r in grokking.grid("gap") if r.preset == "paper"]
    focal = [c for c in configs if c.loss == "focal"]
    assert [config_hash("csp", c) for c in focal] == [config_hash("csp", r) for r in gap]
    ce = [c for c in configs if c.loss == "ce"]  # the focal row's first 5 seeds
    assert [dataclasses.replace(c, loss="focal") for c in ce] == [c for c in focal if c.seed < 5]
    assert len(focal) == 30 and len(ce) == 15
    assert {c.labels for c in configs} == {"sequence"} and {c.epochs for c in configs} == {300}
    assert {(c.task, c.n) for c in configs} == {("parity", 5000), ("mod3", 5000), ("dyck1", 10000)}
    cells = {tuple(sorted(ab.cell_of(dataclasses.asdict(c)).items())) for c in configs}
    assert {dict(c)["table"] for c in cells} == {"3", "4"} and len(cells) == 6  # 3 tasks x 2 losses
    history = pd.DataFrame(
        {"test_seq_acc": [0.5, 1.0], "test_seq_f1": [0.0, 1.0], "test_acc": [0.6, 1.0]}
    )
    records = [
        RunRecord("csp", config_hash("csp", c), dataclasses.asdict(c), history) for c in configs
    ]
    frame = ab.records_frame(records, "paper_text")
    assert set(frame["d_model"]) == {64} and set(frame["n_layers"]) == {3}
    assert set(frame["variant"]) == {"+norm"} and set(frame["val_fraction"]) == {0.1}
    caption = ct.grid_caption(frame)
    assert "100% validation accuracy" in caption and "sequence labels" in caption
    assert "focal loss (alpha 0.25 on class 1, 0.75 on class 0" in caption
    assert "focal:" not in caption and "ce:" not in caption  # words, not code keys
    monkeypatch.setattr(ab, "results_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match="grid must be one of"):
        ab.export(records, grid="quick")
    (path,) = ab.export(records, grid="paper_text")
    assert path.name == ab.COMMITTED_CSV["paper_text"]
    t3 = ct.table3(ct.load_results((path.name,), root=tmp_path))
    assert t3.loc[("paper", "ce"), ("mod3", "ours")] == 1.0
    assert ct.load_results(("missing.csv",), root=tmp_path, missing_ok=True) is None


def _fake_frame():
    rows = []
    for preset in ("paper", "code_switches"):
        for rotation, variant in ab.PAPER_TABLE4:
            for seed in range(5):
                for task in ab.TASKS:
                    value = 0.5 + 0.005 * seed if rotation == "without" else 1.0
                    rows.append({"table": "4", "rotation": rotation, "variant": variant, "loss": "focal",
                                 "split": "random", "task": task, "preset": preset, "seed": seed,
                                 "status": "ok", "test_seq_acc": value, "test_seq_f1": value,
                                 "test_in_train": 0.1})  # fmt: skip
        for task in ab.TASKS:
            for seed in range(5):
                rows.append({"table": "3", "rotation": "with", "variant": "+norm", "loss": "ce", "split": "random",
                             "task": task, "preset": preset, "seed": seed, "status": "ok",
                             "test_seq_acc": 0.67, "test_seq_f1": 0.0, "test_in_train": 0.1})  # fmt: skip
    return pd.DataFrame(rows)


def test_tables_put_ours_beside_the_paper():
    df = _fake_frame()
    t4 = ct.table4(df)
    row = t4.loc[("paper", "without", "base")]
    assert row[("parity", "ours")] == pytest.approx(0.51) and row[("parity", "paper")] == 0.5
    # each cell's verdict is the committed ledger's row, read by id, never recomputed from
    # these runs; a cell the ledger has no row for (another preset) has none
    ledger = ledger_rows()
    assert row[("parity", "verdict")] == ledger.at["table4/without/base/parity", "verdict"]
    assert t4.loc[("code_switches", "with", "+silu"), ("parity", "verdict")] == NO_ROW
    t3 = ct.table3(df)
    assert t3.loc[("paper", "ce"), ("mod3", "verdict")] == ledger.at["table3/ce/mod3", "verdict"]
    claims = ct.claims_rows()  # the paper's "A beats B" claims: the ledger's rows, read
    from structattn_lite.claims.csp import ABLATION_CLAIMS

    ids = [i for i in ledger.index if i.startswith("ablation/")]
    assert len(ids) == sum(len(tasks) for _, tasks, _, _ in ABLATION_CLAIMS.values())
    assert all(c in w for c, w in zip(claims["claim"], ledger.loc[ids, "claim"], strict=True))
    assert list(claims["verdict"]) == list(ledger.loc[ids, "verdict"])
    shown = ct.display_table(t4)
    assert (
        shown.loc[("paper", "with", "+norm"), ("parity (acc)", "ours")] == "1.00 ± 0.00 (5 seeds)"
    )
    assert "verdict" in style(shown).to_html()


def test_committed_results_are_the_paper_size_grids():
    df = ct.load_results()
    assert set(df["grid"]) <= {"paper_text", "paper_table4"} and set(df["task"]) == set(ab.TASKS)
    assert set(df["val_fraction"]) == {0.1}  # every early stop read validation
    assert set(df["d_model"]) == {64} and set(df["n_layers"]) == {3}


def test_a_diverged_cell_is_counted_not_averaged():
    df = _fake_frame()
    mask = (df["rotation"] == "with") & (df["variant"] == "base") & (df["preset"] == "paper")
    df.loc[mask, "status"] = "diverged"
    t4 = ct.table4(df)
    verdict = ledger_rows().at["table4/with/base/parity", "verdict"]
    assert t4.loc[("paper", "with", "base"), ("parity", "verdict")] == verdict
    shown = ct.display_table(t4)
    assert shown.loc[("paper", "with", "base"), ("parity (acc)", "ours")] == "diverged (5 of 5)"


def _tiny(seed, **kw):
    return CSPRun(task="parity", preset="code_switches", seed=seed, length=8, n=120, labels="prefix",
                  epochs=3, batch_size=32, model_options={"d_model": 6, "n_layers": 2},
                  optim=OptimConfig(lr=3e-3, plateau_patience=0), **kw)  # fmt: skip


def test_a_seed_batched_sweep_equals_per_seed_runs_and_is_reloaded(tmp_path):
    """``sweep(..., seed_batching=True)`` trains the seeds of a config together
    (``runs.train`` of a list), gives the records per-seed runs give, and reloads them."""
    # float64: CSP's training is chaotic at float32 rounding level (differences grow
    # ~10x per step), so equality is checked where rounding is negligible.
    configs = [_tiny(s) for s in (0, 1, 2)]
    stacked, alone = RunStore(tmp_path / "stacked"), RunStore(tmp_path / "alone")
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        together = sweep(ab, configs, store=stacked, progress=False, seed_batching=True)
        one_by_one = sweep(ab, configs, store=alone, progress=False)
    finally:
        torch.set_default_dtype(old)
    assert [r.extra.get("seed_batched") for r in together] == [3, 3, 3]
    for a, b in zip(one_by_one, together, strict=True):  # one by one: stacks of one seed
        assert a.key == b.key and a.status == b.status and a.extra["seed_batched"] == 1
        pd.testing.assert_frame_equal(a.history, b.history, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(
            torch.tensor(b.extra["step_grad_norms"]),
            torch.tensor(a.extra["step_grad_norms"]),
            rtol=1e-6,
            atol=1e-9,
        )
    again = sweep(ab, configs, store=stacked, progress=False, seed_batching=True, only_cached=True)
    assert [r.key for r in again] == [r.key for r in together]  # reloaded, not retrained


def test_paper_table4_grid_is_table4_in_the_paper_setting():
    """Eight rows x 3 tasks x 5 seeds, each the paper_text run with only its row's
    switches; the full rotated model is not retrained (it is the gap grid's run)."""
    from structattn_lite.records import config_hash
    from structattn_lite.studies.grokking import experiment as gk

    runs = ab.grid("paper_table4")
    assert len(runs) == 8 * 3 * 5
    cells = {(ab.cell_of(dataclasses.asdict(c))["rotation"], ab.cell_of(dataclasses.asdict(c))["variant"])
             for c in runs}  # fmt: skip
    assert cells == set(ab.PAPER_TABLE4) - {("with", "+norm")}
    assert all(c.hold_perfect == 10 and c.val_fraction > 0 and c.epochs == 300 for c in runs)
    full = ab.paper_setting_run("mod3", "paper", 3, epochs=300, hold_perfect=10,
                                model_options=ab.row_switches("paper", "with", "+norm"))  # fmt: skip
    assert config_hash("csp", full) in {config_hash("csp", c) for c in gk.grid("gap")}


def test_paper_table4_export_keeps_rows_of_earlier_sessions(tmp_path, monkeypatch):
    monkeypatch.setattr(ab, "results_dir", lambda: tmp_path)
    runs = [dataclasses.replace(c, epochs=1, n=200) for c in ab.grid("paper_table4")]
    first, second = (
        train("grokking", runs[1], progress=False),
        train("grokking", runs[0], progress=False),
    )
    (path,) = ab.export([first], grid="paper_table4")
    ab.export([second], grid="paper_table4")
    table = pd.read_csv(path)
    assert table["seed"].tolist() == [0, 1]  # both kept, in grid order
    ab.export([second], grid="paper_table4")  # exporting a run again replaces its row
    assert len(pd.read_csv(path)) == 2


def _cell(ident: str, values: list[float], diverged: int = 0) -> dict:
    n = len(values) + diverged
    reason = f"{diverged} of {n} seeds diverged (non-finite loss)" if diverged else "read"
    return {"id": ident, "values": {"ours": values}, "reason": reason}


def test_the_papers_a_beats_b_claims_are_ledger_rows_on_the_cells_seeds(monkeypatch):
    """Each "A beats B" sentence is a ledger row read from its two cells' per-seed values by
    its rule (Welch, delta 0.02): a clear win is reproduced, a tie not reproduced, and a
    side whose seeds diverged leaves the row undecided, saying why and what would decide."""
    from structattn_lite.claims import csp

    cells = {}
    for _, tasks, a, b in csp.ABLATION_CLAIMS.values():
        for task in tasks:
            cells[f"{a}/{task}"] = _cell(f"{a}/{task}", [1.0, 0.99, 1.0, 0.98, 1.0])
            cells[f"{b}/{task}"] = _cell(f"{b}/{task}", [0.5, 0.52, 0.49, 0.51, 0.5])
    cells["table4/with/+norm/mod3"] = _cell("table4/with/+norm/mod3", [0.6, 0.601, 0.6, 0.602, 0.6])
    cells["table4/without/+norm/mod3"] = _cell(
        "table4/without/+norm/mod3", [0.601, 0.6, 0.6, 0.6, 0.601]
    )
    cells["table4/with/+silu/dyck1"] = _cell("table4/with/+silu/dyck1", [0.4], diverged=4)
    monkeypatch.setattr(csp, "table3", lambda: [c for i, c in cells.items() if "table3" in i])
    monkeypatch.setattr(csp, "table4", lambda: [c for i, c in cells.items() if "table4" in i])
    rows = {r["id"]: r for r in csp.ablation_claims()}
    assert len(rows) == sum(len(tasks) for _, tasks, _, _ in csp.ABLATION_CLAIMS.values())
    win = rows["ablation/rotation/parity"]
    assert win["verdict"] == "reproduced" and win["ours"] == pytest.approx(0.994 - 0.504)
    assert win["seeds"] == 10 and win["values"] == {
        "A": [1.0, 0.99, 1.0, 0.98, 1.0],
        "B": [0.5, 0.52, 0.49, 0.51, 0.5],
    }
    assert rows["ablation/rotation/mod3"]["verdict"] == "not reproduced"  # a tie
    silu = rows["ablation/skip/dyck1"]  # B: 1 trained seed, 4 diverged
    assert silu["verdict"] == "undecided" and silu["seeds"] == 10
    assert "B 0.400 over 1 (4 diverged)" in silu["reason"]
    assert "`ablation/skip_in_full/dyck1` asks it of the full model" in silu["reason"]


def test_section_2_3s_pairwise_rotation_is_its_own_grid_and_claim(monkeypatch):
    """Grid paper_rope trains the full model with RoPE-style pairwise rotation at the paper's
    setting (no other switch), labelled as no Table 4 cell; its claim reads A from the full
    model's cells and B from the grid's committed file, and says where to train it."""
    from structattn_lite.claims import csp

    configs = ab.grid("paper_rope")
    assert len(configs) == 15 and {c.task for c in configs} == set(ab.TASKS)
    assert all(c.model_options == {"rotation": "pairwise"} for c in configs)
    cell = ab.cell_of(dataclasses.asdict(configs[0]))
    assert (cell["rotation"], cell["variant"], cell["table"]) == ("pairwise", "+norm", "2.3")
    cells = {f"{side}/{task}": _cell(f"{side}/{task}", [1.0, 0.99, 1.0, 0.98, 1.0])
             for _, tasks, *sides in csp.ABLATION_CLAIMS.values() for side in sides
             for task in tasks if side.startswith("table")}  # fmt: skip
    monkeypatch.setattr(csp, "table3", lambda: [c for i, c in cells.items() if "table3" in i])
    monkeypatch.setattr(csp, "table4", lambda: [c for i, c in cells.items() if "table4" in i])
    b = [0.5, 0.52, 0.49, 0.51, 0.5]
    committed = pd.DataFrame({"task": "parity", "variant": "+norm", "rotation": "pairwise",
                              "status": "early_stop", "test_seq_acc": b, "test_seq_f1": b})  # fmt: skip
    real_read = csp.read
    monkeypatch.setattr(
        csp, "read", lambda name: committed if "paper_rope" in name else real_read(name)
    )
    rows = {r["id"]: r for r in csp.ablation_claims()}
    parity = rows["ablation/rotation_elementwise/parity"]
    assert parity["values"]["B"] == b and parity["verdict"] == "reproduced"
    assert parity["source"] == "CSP paper, section 2.3" and "--grid paper_rope" in parity["command"]
    assert "B's runs are not trained yet" in rows["ablation/rotation_elementwise/mod3"]["reason"]
    # a part of the grid's seeds is not read: the row waits for all five its rule names
    part = committed.head(3)
    monkeypatch.setattr(csp, "read", lambda name: part if "paper_rope" in name else real_read(name))
    parity = {r["id"]: r for r in csp.ablation_claims()}["ablation/rotation_elementwise/parity"]
    assert parity["verdict"] == "undecided" and math.isnan(parity["ours"])
    assert "3 of B's seeds are in; its fresh grid trains 5" in parity["reason"]
    assert ", B not read yet;" in parity["reason"] and "over 3" not in parity["reason"]
    assert parity["values"]["B"] == []  # nor shown seed by seed
