"""The attention study's tuning: rates chosen on validation only, the grids it expands to,
the edge check past the sweep, and whether a sweep's choice holds at the full budget."""

from __future__ import annotations

import collections
import dataclasses
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_attention_study import TINY, _garbage_test_split

from structattn_lite import claims
from structattn_lite.config import PROFILES, results_dir
from structattn_lite.data import fallback_corpus
from structattn_lite.records import RunRecord, RunStore, config_dict
from structattn_lite.studies.attention import experiment as st
from structattn_lite.studies.attention import grids, results, tables
from structattn_lite.studies.attention import report as tr
from structattn_lite.studies.attention.report import rate_drift, tuning_table


def test_tuning_never_reads_the_test_split():
    corpus = fallback_corpus()
    configs = [st.with_recipe(st.Config(kind=k, **TINY), lr=lr)
               for k in ("dot", "matroidal") for lr in (1e-3, 1e-2)]  # fmt: skip
    clean = [st.run(c, progress=False, corpus=corpus) for c in configs]
    doctored = [st.run(c, progress=False, corpus=_garbage_test_split(corpus)) for c in configs]
    assert st.choose_lrs(doctored) == st.choose_lrs(clean)
    learning = ["step", "lr", "train_loss", "val_bpc"]  # all but the clock columns
    assert all(
        r.history[learning].equals(s.history[learning])
        for r, s in zip(clean, doctored, strict=True)
    )
    final = st.replace(configs[0], read_test=True)  # a final run does read it, at the end
    with pytest.raises(IndexError):
        st.run(final, progress=False, corpus=_garbage_test_split(corpus))


def test_choose_lrs_takes_the_best_validation_rate_per_variant():
    runs = [st.run(st.with_recipe(st.Config(kind="dot", **TINY), lr=lr), progress=False)
            for lr in (1e-4, 1e-2)]  # fmt: skip
    best = min(runs, key=lambda r: r.history["val_bpc"].min())
    assert st.choose_lrs(runs) == {st.variant_key(runs[0].config): best.config["recipe"]["lr"]}


def test_grids_have_every_part_and_fair_tuning(tmp_path):
    for name in grids.GRIDS:
        configs = grids.variant_configs(name, st.Config, "ptb")
        parts = {grids.part(c) for c in configs}
        assert "main" in parts and len(configs) == len(set(map(st.Config.__hash__, configs)))
        assert "digits" in parts or name not in PROFILES
    committed = grids.variant_configs("committed", st.Config, "ptb")
    assert {grids.part(c) for c in committed} == {"main", "low data", "stability", "digits"}
    spec = grids.GRIDS["committed"]
    tuning = st.tuning_grid("committed")
    final = st.final_grid("committed", {st.variant_key(c): 1e-3 for c in tuning})
    assert {c.recipe.max_steps for c in final if grids.part(c) == "main"} == {
        spec["recipe"]["max_steps"]
    }
    assert not any(c.read_test for c in tuning) and all(c.read_test for c in final)
    # every part on every seed
    assert {c.seed for c in final if grids.part(c) == "main"} == set(spec["seeds"])
    for secondary in ("stability", "low data"):
        assert {c.seed for c in final if grids.part(c) == secondary} == set(spec["seeds"])
    # the smallest fraction and stability take turns seed by seed, then the larger
    # fractions: a sweep cut short has the low-data verdict's runs and stability first
    tail = [c for c in final if grids.part(c) in ("stability", "low data")]
    smallest = min(spec["fractions"])
    first = [c for c in tail if c.data_fraction in (smallest, 1.0)]
    assert tail[: len(first)] == first
    assert [c.seed for c in first] == sorted(c.seed for c in first)
    labels = {st.variant_label(c) for c in committed}
    assert {
        "matroidal m=1d",
        "matroidal m=4d",
        "dense (sep q/k)",
        "matroidal m=2d (sep q/k)",
    } <= labels
    tuning = st.tuning_grid("quick")
    assert not any(c.read_test for c in tuning) and len({c.seed for c in tuning}) == 1
    assert len(tuning) == len({st.variant_key(c) for c in tuning}) * len(
        grids.GRIDS["quick"]["lrs"]
    )
    assert st.grid("quick", store=RunStore(tmp_path)) == tuning  # nothing tuned yet
    lrs = {st.variant_key(c): 1e-3 for c in tuning}
    final = st.final_grid("quick", lrs)
    assert all(c.read_test and c.recipe.lr == 1e-3 for c in final)


def test_the_edge_check_tunes_past_the_sweep_and_never_enters_the_choice(monkeypatch):
    # the committed grid with a rate past its sweep's top (a grid may leave it out)
    spec = {**grids.GRIDS["committed"], "edge_lrs": (9.6e-2,)}
    monkeypatch.setitem(grids.GRIDS, "committed", spec)
    edge, tuning = st.edge_grid("committed"), st.tuning_grid("committed")
    assert len(edge) == len(tuning) // len(spec["lrs"])
    assert {c.recipe.lr for c in edge} == set(spec["edge_lrs"]) and not any(
        c.read_test for c in edge
    )
    assert min(spec["edge_lrs"]) > max(spec["lrs"])
    # the same tuning runs but for the rate, so a wider sweep later reuses them from the store
    assert [st.with_recipe(c, lr=spec["lrs"][0]) for c in edge[:: len(spec["edge_lrs"])]] == [
        c for c in tuning if c.recipe.lr == spec["lrs"][0]
    ]
    assert st.edge_grid("long") == [] and st.edge_grid("quick") == []
    # A rate past the sweep beating the kept one is reported; the * stays on the sweep.
    runs = pd.DataFrame({
        "tuning": True, "dataset": "ptb", "variant": ["dot"] * 3 + ["dense"] * 3,
        "lr": [1e-3, 2e-3, 4e-3] * 2, "val_bpc": [3.0, 2.9, 2.5, 2.8, 2.9, 3.1], "val_loss": 0.0,
        "read_test": False, "max_steps": 6,
    })  # fmt: skip
    table = tuning_table(runs, sweep=(1e-3, 2e-3)).set_index("variant")
    assert table.loc["dot", 2e-3] == "2.900*" and table.loc["dot", 4e-3] == "2.500"
    assert table.loc["dot", "past the edge (check)"] == "0.004 better by 0.400"
    assert table.loc["dense", "past the edge (check)"] == "choice holds"
    assert "past the edge (check)" not in tuning_table(runs)  # every rate is the sweep


def test_the_long_grid_reuses_the_committed_rates_and_ships_its_own_files():
    # No tuning of its own: the committed grid's validation runs choose its rates, so a
    # store holding them yields the long grid's final runs at those rates, test read once.
    assert st.tuning_grid("long") == st.tuning_grid("committed")
    # nothing tuned yet (a store with no committed run to restore)
    assert st.grid("long", store=_Store({})) == st.tuning_grid("committed")
    lrs = {st.variant_key(c): 1e-3 * (i + 1) for i, c in enumerate(st.tuning_grid("committed"))}
    final = st.final_grid("long", lrs)
    spec = grids.GRIDS["long"]
    assert {grids.part(c) for c in final} == {"main"}
    assert len(final) == len(spec["main"]) * len(spec["seeds"])
    assert sorted({c.seed for c in final}) == list(spec["seeds"])
    assert all(c.read_test and c.recipe.lr == lrs[st.variant_key(c)] for c in final)
    assert {c.recipe.max_steps for c in final} == {spec["recipe"]["max_steps"]}
    with pytest.raises(ValueError, match=r"grid='nope' is not allowed; choose one of"):
        st.tuning_grid("nope")
    with pytest.raises(ValueError, match=r"grid='quick' is not allowed; choose one of"):
        st.export([], grid="quick")


def test_the_earlier_sweeps_the_figures_draw_load_beside_the_current_ones(tmp_path, monkeypatch):
    first = tr.load_first_sweep()  # the committed grid's first sweep: every final at 0.006
    finals = first[~first["tuning"].astype(bool)]
    assert len(finals) and set(finals["lr"]) == {6e-3}
    long_first = tables.load_earlier(grids.LONG_FIRST_SWEEP_CSV)
    finals = [r for r in long_first if r.config["read_test"]]
    assert finals and {r.config["recipe"]["lr"] for r in finals} == {6e-3}
    assert {r.config["recipe"]["max_steps"] for r in finals} == {8000}
    # the committed grid's tuning over both schedules, each run once
    tuning = tables.load_tuning_histories()
    assert len({r.key for r in tuning}) == len(tuning) and not any(
        r.config["read_test"] for r in tuning
    )
    steps = {r.config["recipe"]["max_steps"] for r in tuning if r.config["dataset"] == "ptb"}
    assert steps == {600, 1000}
    with pytest.raises(ValueError, match=r"grid='quick' is not allowed; choose one of"):
        tables.load_summary("quick")
    # a grid whose files are not there loads as None / no runs
    monkeypatch.setattr("structattn_lite.config.results_dir", lambda: tmp_path)
    assert tables.load_summary("long") is None
    assert tables.load_committed_histories("long") == []


def test_each_part_shows_the_ledger_rows_it_decides_and_the_floors_of_its_text():
    ledger = claims.ledger()
    low = tr.ledger_rows(ledger, "low_data/dense", "low_data/dot")  # the committed grid's
    assert list(low["id"]) == ["attention/low_data/dense", "attention/low_data/dot"]
    few = tr.ledger_rows(ledger, "low_parameters", "low_data/d32")  # grid lowparam's
    assert set(few["id"]) >= {"attention/low_data/d32/dense", "attention/low_data/d32/dot",
                              "attention/low_parameters/d32/sep"}  # fmt: skip
    assert set(few["id"]).isdisjoint(low["id"])
    assert set(tr.ledger_rows(ledger, "stable", "digits")["id"]) == {
        "attention/stable/nonfinite", "attention/stable/saturated", "attention/stable/bfloat16",
        "attention/digits"}  # fmt: skip
    assert tr.ledger_rows(ledger, "no_such_row").empty
    floors = {"valid": {"bigram": 3.3}, "test": {"bigram": 3.4}}
    text_and_digits = pd.DataFrame({"dataset": ["ptb", "digits"]})
    assert tr.floors_for(text_and_digits, "ptb", floors) is floors
    assert tr.floors_for(text_and_digits, "fallback", floors) is None


def test_rate_drift_names_runs_trained_at_rates_their_source_grid_no_longer_chooses():
    def runs(rates, part="main"):
        return pd.DataFrame({"variant": list(rates), "lr": list(rates.values()),
                             "tuning": False, "part": part})  # fmt: skip

    long = runs({"dot": 6e-3, "matroidal m=2d": 6e-3})
    assert rate_drift(long, runs({"dot": 6e-3, "matroidal m=2d": 6e-3})).empty
    assert rate_drift(long, None).empty
    moved = rate_drift(long, pd.concat([runs({"dot": 2.4e-2}), runs({"matroidal m=2d": 6e-3}),
                                        runs({"matroidal m=2d": 1e-3}, "low data")]))  # fmt: skip
    assert moved.values.tolist() == [["dot", 6e-3, 2.4e-2]]  # the low-data rate never enters


def test_the_rate_history_ends_at_the_rates_the_committed_finals_ran_at():
    history = tr.rate_history()
    assert list(history.index.names) == ["grid", "finals steps", "variant", "sweep"]
    for grid, steps in (("committed", 1000), ("long", 8000)):
        finals = tables.main_finals(tables.load_summary(grid))
        finals = finals[finals["dataset"] == "ptb"]
        ran_at = finals.groupby("variant")["lr"].first()
        rows = history.loc[(grid, steps)]
        assert set(rows.index.get_level_values("variant")) == set(ran_at.index)
        for variant, lr in ran_at.items():
            last = rows.loc[variant].iloc[-1]  # oldest first: the committed sweep ends it
            assert rows.loc[variant].index[-1] == "committed" and last["rate"] == pytest.approx(lr)
            seeds = finals[finals["variant"] == variant]["seed"].nunique()
            assert f"(n={seeds}, 95% t)" in last["validation bpc"]
    tuned = history.xs("committed", level="sweep").loc[("committed", 1000)]
    assert set(tuned["steps tuned at"]) == {1000} and set(tuned["tuning seeds"]) == {3}


def test_best_known_keeps_each_variant_at_its_better_rate_on_validation():
    def finals_at(lr, variant, val, test):
        return pd.DataFrame({"variant": variant, "lr": lr, "val_bpc": [val, val + 0.02],
                             "test_bpc": test, "part": "main", "tuning": False,
                             "fraction": 1.0, "precision": "float32"})  # fmt: skip

    first = pd.concat([finals_at(6e-3, "dot", 2.00, 9.0), finals_at(6e-3, "dense", 2.40, 1.0)])
    current = pd.concat([
        finals_at(4.8e-2, "dot", 2.10, 1.0), finals_at(2.4e-2, "dense", 2.10, 9.0),
        finals_at(1.2e-2, "new only", 2.0, 5.0), finals_at(1e-3, "dot", 0.1, 0.1).assign(tuning=True),
    ])  # fmt: skip
    best = tr.best_known(first, current)
    # validation decides, whatever the test numbers say; tuning runs never enter
    assert best.groupby("variant", sort=False)["lr"].first().to_dict() == {
        "dot": 6e-3, "dense": 2.4e-2, "new only": 1.2e-2}  # fmt: skip
    assert list(best["sweep"].unique()) == ["first", "current"]
    assert set(best["test_bpc"]) == {9.0, 5.0} and len(best) == 6


def test_best_known_chooses_per_fraction_for_the_low_data_part():
    def runs(lr, variant, fraction, val, part="low data", precision="float32"):
        return pd.DataFrame({"variant": variant, "lr": lr, "fraction": fraction, "val_bpc": [val, val],
                             "test_bpc": 3.0, "part": part, "precision": precision, "tuning": False})  # fmt: skip

    first = pd.concat([runs(6e-3, "dot", 0.01, 3.0), runs(6e-3, "dot", 1.0, 2.0, "main"),
                       runs(6e-3, "dot", 1.0, 1.0, "stability", "bfloat16")])  # fmt: skip
    current = pd.concat([runs(4.8e-2, "dot", 0.01, 2.5), runs(4.8e-2, "dot", 1.0, 2.2, "main"),
                         runs(4.8e-2, "dot", 1.0, 0.5, "stability", "bfloat16")])  # fmt: skip
    best = tr.best_known(first, current, parts=("main", "low data"))
    # each fraction picks its own rate on validation; bfloat16 runs never enter
    rates = best.groupby("fraction")["lr"].first().to_dict()
    assert rates == {0.01: 4.8e-2, 1.0: 6e-3}
    assert set(best["precision"]) == {"float32"} and len(best) == 4
    assert set(tr.best_known(first, current)["part"]) == {"main"}


def test_the_low_parameter_arm_fits_m_2d_and_tunes_at_its_own_budget():
    assert [grids.heads_for(d) for d in (32, 64, 128)] == [4, 8, 8]
    with pytest.raises(ValueError, match="d_model=4 has no head width"):
        grids.heads_for(4)
    spec = grids.GRIDS["lowparam"]
    tuning = st.tuning_grid("lowparam")
    final = st.final_grid("lowparam", {st.variant_key(c): 1e-3 for c in tuning})
    for c in tuning + final:  # m = 2 d_head distinct columns fit in every head
        assert c.d_model in (32, 64) and c.m == 2 * c.d_head if c.kind == "matroidal" else True
        assert c.d_head * (c.d_head - 1) // 2 >= 2 * c.d_head
    # an early stop on validation, and the rates tuned at exactly the finals' budget (only
    # the seed, the rate and read_test differ)
    assert {(c.recipe.max_steps, c.recipe.patience) for c in final} == {(4000, 4)}
    assert {dataclasses.replace(c.recipe, lr=1.0) for c in tuning} == {
        dataclasses.replace(c.recipe, lr=1.0) for c in final
    }
    assert {c.seed for c in tuning} == set(spec["tune_seeds"]) and len(spec["tune_seeds"]) >= 3
    assert {c.seed for c in final} == set(spec["seeds"]) and len(spec["seeds"]) >= 5
    assert not any(c.read_test for c in tuning) and all(c.read_test for c in final)
    labels = {(c.d_model, st.variant_label(c)) for c in final}
    assert (
        len(labels) == 10 and {(32, "matroidal m=2d (sep q/k)"), (32, "dense (sep q/k)")} <= labels
    )
    assert [c.d_model for c in tuning] == sorted(c.d_model for c in tuning)  # smallest first
    # the low-data half: dot, dense and matroidal at the smallest size on 1% and 10% of the
    # text, every seed, stopped like the full-text runs at the rate chosen on the full text
    low = [c for c in final if c.data_fraction < 1]
    assert {(c.d_model, c.data_fraction) for c in low} == {(32, 0.01), (32, 0.1)}
    assert {st.variant_label(c) for c in low} == {"dot", "dense", "matroidal m=2d"}
    assert len(low) == 2 * 3 * len(spec["seeds"]) and all(c.recipe.lr == 1e-3 for c in low)
    assert {st.variant_key(c) for c in low} <= {st.variant_key(c) for c in tuning}
    committed = st.final_grid("committed", collections.defaultdict(lambda: 1e-3))
    assert {(c.d_model, c.recipe.patience) for c in committed if c.data_fraction < 1} == {
        (128, grids.LOW_DATA_PATIENCE)  # the committed grid's low data keeps its own stop
    }


@pytest.mark.parametrize("name", ["committed", "paper"])
def test_a_grid_that_reports_verdicts_chooses_its_rates_at_its_own_budget_over_three_seeds(
    name,
):
    spec = grids.GRIDS[name]
    tuning = st.tuning_grid(name)
    final = st.final_grid(name, {st.variant_key(c): 1e-3 for c in tuning})
    for dataset in ("ptb", "digits"):  # only the seed, the rate and read_test differ
        recipes = [{dataclasses.replace(c.recipe, lr=1.0) for c in configs
                    if c.dataset == dataset and grids.part(c) in ("main", "digits")}
                   for configs in (tuning, final)]  # fmt: skip
        assert recipes[0] == recipes[1] and len(recipes[0]) == 1
    assert spec["widen_edges"] and len(spec["tune_seeds"]) >= 3
    keys = {st.variant_key(c) for c in tuning}
    assert len(tuning) == len(keys) * len(spec["lrs"]) * len(spec["tune_seeds"])
    assert not any(c.read_test for c in tuning)


class _Store:
    """A run store holding made-up tuning records: best validation bpc by (key, lr)."""

    def __init__(self, bpc):
        self.bpc = bpc

    def path(self, experiment, key):  # a path that exists: no committed run to restore
        return Path(__file__)

    def load(self, experiment, cfg):
        best = self.bpc.get((st.variant_key(cfg), cfg.recipe.lr))
        if best is None or cfg.read_test:
            return None
        return RunRecord(experiment, "k", config_dict(cfg), pd.DataFrame({"val_bpc": [best]}))


def test_a_best_rate_at_the_edge_widens_the_sweep_until_it_is_not():
    tuning = st.tuning_grid("lowparam")
    keys = list(dict.fromkeys(st.variant_key(c) for c in tuning))
    interior = {(k, lr): 2.0 + abs(lr - 6e-3) for k in keys for lr in (3e-3, 6e-3, 1.2e-2)}
    grid = st.grid("lowparam", store=_Store(interior))
    finals = [c for c in grid if c.read_test]
    assert len(grid) == len(tuning) + len(finals) and {c.recipe.lr for c in finals} == {6e-3}
    # the first variant is best at the top rate: it gets 0.024, and no finals until that
    # rate's records are in; then 0.024 is worse and the choice (0.012) is interior
    top = {**interior, **{(keys[0], lr): 3.0 - lr for lr in (3e-3, 6e-3, 1.2e-2)}}
    grid = st.grid("lowparam", store=_Store(top))
    wider = [c for c in grid if c.recipe.lr == 2.4e-2]
    assert {st.variant_key(c) for c in wider} == {keys[0]} and len(wider) == 3
    assert keys[0] not in {st.variant_key(c) for c in grid if c.read_test}
    # a variant widens (and gets finals) once its own runs are in, whatever the others lack
    partial = {k: v for k, v in top.items() if k != (keys[-1], 3e-3)}
    grid = st.grid("lowparam", store=_Store(partial))
    assert {st.variant_key(c) for c in grid if c.recipe.lr == 2.4e-2} == {keys[0]}
    assert {st.variant_key(c) for c in grid if c.read_test} == set(keys[1:-1])
    grid = st.grid("lowparam", store=_Store({**top, (keys[0], 2.4e-2): 9.0}))
    assert {c.recipe.lr for c in grid if c.read_test and st.variant_key(c) == keys[0]} == {1.2e-2}
    assert st.widened_rates([_Store(top).load("attention", c) for c in tuning[:3]]) == {
        keys[0]: [3e-3, 6e-3, 1.2e-2, 2.4e-2]
    }


def test_the_low_parameter_export_keeps_the_runs_of_earlier_sessions(tmp_path, monkeypatch):
    monkeypatch.setattr(st.cfgmod, "results_dir", lambda: tmp_path)
    runs = [st.run(st.with_recipe(st.Config(kind="dot", **TINY), lr=lr), progress=False)
            for lr in (1e-3, 1e-2)]  # fmt: skip
    summary, histories, *_ = st.export(runs[:1], grid="lowparam")
    st.export(runs[1:], grid="lowparam")  # a later session's run
    assert set(pd.read_csv(summary)["key"]) == {r.key for r in runs}
    st.export(runs[1:], grid="lowparam")  # exporting a run again replaces it
    assert len(pd.read_csv(summary)) == 2 and pd.read_csv(histories)["key"].nunique() == 2


def test_the_low_parameter_finals_ran_at_the_rate_the_shown_sweep_is_lowest_at():
    from structattn_lite.studies.attention import lowparam

    histories = tables.load_committed_histories("lowparam")
    sweep = lowparam.tuning(histories)
    shown = {
        k: g.loc[g["val bpc"].idxmin(), "lr"] for k, g in sweep.groupby(["d_model", "variant"])
    }
    finals = tables.finished_finals(tables.load_summary("lowparam"), fraction=None)  # low data too
    ran = {k: set(g["lr"]) for k, g in finals.groupby(["d_model", "variant"])}
    assert ran and all(ran[k] == {shown[k]} for k in ran)
    chosen = sweep.set_index(["d_model", "variant"]).loc[list(ran)]  # every tuning seed in
    assert (chosen["seeds"] == len(grids.GRIDS["lowparam"]["tune_seeds"])).all()


def _as_committed(name, tmp_path, monkeypatch):
    """A results folder holding a copy of grid ``name``'s committed files (runs, then
    histories), read in place of data/results, with the text the grid was trained on."""
    files = [tmp_path / "results" / f for f in grids.COMMITTED_CSV[name]]
    for path in files:
        path.parent.mkdir(exist_ok=True)
        shutil.copy(st.cfgmod.results_dir() / path.name, path)
    monkeypatch.setattr(st.cfgmod, "results_dir", lambda: tmp_path / "results")
    monkeypatch.setattr(st, "resolve_dataset", lambda root=None: "ptb")  # as committed
    return tmp_path / "results", files


@pytest.mark.parametrize("name", results.GROWN_ACROSS_SESSIONS)
def test_a_new_store_gets_a_grids_committed_runs_and_exports_them_unchanged(
    name, tmp_path, monkeypatch
):
    if not (results_dir() / grids.COMMITTED_CSV[name][0]).exists():
        pytest.skip(f"grid {name} has committed nothing yet (it trains across sessions)")
    committed = tables.load_committed_histories(name)
    _, files = _as_committed(name, tmp_path, monkeypatch)
    store = RunStore(tmp_path / "runs")
    configs = st.grid(name, store=store)  # restores, then reads the store
    assert all(store.path("attention", r.key).exists() for r in committed)
    if grids.GRIDS[name].get("rates_from") is None:
        # the grid still asks for every committed run: none retrained
        cached = {r.key: r for c in configs if (r := store.load("attention", c)) is not None}
        assert set(cached) == {r.key for r in committed}
        tuned = [r for r in cached.values() if not r.config["read_test"]]
        assert st.choose_lrs(tuned) == st.choose_lrs(
            [r for r in committed if not r.config["read_test"]]
        )
    else:  # its tuning is its source grid's, whose files this folder lacks: it asks for
        # that tuning first, and its committed finals wait in the store
        assert not any(c.read_test for c in configs)
        cached = {r.key: store.load("attention", r.config) for r in committed}
    before = [path.read_bytes() for path in files]
    st.export(list(cached.values()), grid=name)  # restored runs keep their rows
    assert [path.read_bytes() for path in files] == before
    new = st.run(st.with_recipe(st.Config(kind="dot", **TINY), lr=1e-3), progress=False)
    st.export([new], grid=name)  # a later session's run joins the committed ones
    summary = pd.read_csv(files[0])
    assert set(summary["key"]) == {r.key for r in committed} | {new.key}
    assert len(summary) == len(committed) + 1


def _made_up_tuning(configs, bpc_of_lr):
    return [RunRecord("attention", st.config_hash("attention", c), config_dict(c),
                      pd.DataFrame({"step": [1], "val_bpc": [bpc_of_lr(c.recipe.lr)],
                                    "val_loss": [bpc_of_lr(c.recipe.lr)]}))
            for c in configs]  # fmt: skip


def _retune_again(monkeypatch):
    """The committed grid retuned once more, on tuning seeds none of its records has, so
    its committed tuning runs play the part of the schedule being replaced."""
    spec = {**grids.GRIDS["committed"], "tune_seeds": (5, 6, 7)}
    monkeypatch.setitem(grids.GRIDS, "committed", spec)


def test_the_ledger_says_how_the_committed_records_chose_their_rates():
    from structattn_lite.claims import attention as ca

    first = tr.load_first_sweep()
    # the first finals, tuned over 600 steps of seed 0
    assert "over 600 steps of one seed (not at this budget)" in ca.committed_protocol(first)
    assert "(600 steps of one seed, not at this budget)" in ca.long_protocol(first)
    # the retuned grid: its tuning runs as long as its finals, on three seeds
    protocol = ca.committed_protocol(tables.load_summary("committed"))
    assert "chosen on validation at this budget over 3 seeds" in protocol
    assert "not at this budget" not in protocol
