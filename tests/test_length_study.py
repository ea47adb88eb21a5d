"""Length evaluation, the two training protocols, leakage, and the length tables."""

import pandas as pd
import pytest
import torch
from torch import nn

from structattn_lite.data.leakage import leakage_table
from structattn_lite.data.tasks import make_task
from structattn_lite.runs import train
from structattn_lite.studies.length import authors as la
from structattn_lite.studies.length import experiment as ls
from structattn_lite.studies.length import report as lt
from structattn_lite.studies.length import results


class Oracle(nn.Module):
    """Perfect per-prefix parity logits, or a constant class when ``constant``."""

    def __init__(self, constant=False):
        super().__init__()
        self.constant = constant

    def forward(self, x):
        label = torch.zeros_like(x) if self.constant else x.cumsum(1) % 2
        return nn.functional.one_hot(label, 2).float()


def test_length_curve_scores_every_length():
    cfg = ls.LengthRun(task="parity", train_length=16, max_eval_length=64, n_eval=50)
    task = make_task("parity")
    perfect = ls.length_curve(Oracle(), task, cfg)
    assert perfect["length"].tolist() == list(range(1, 65))
    assert (perfect[["seq_acc", "all_acc"]] == 1).all().all()
    assert (
        perfect["unseen_acc"].iloc[:16].isna().all()
        and (perfect["unseen_acc"].iloc[16:] == 1).all()
    )
    const = ls.length_curve(Oracle(constant=True), task, cfg)
    assert 0.3 < const["all_acc"].iloc[-1] < 0.7


def test_dyck_is_scored_on_balanced_strings_of_even_lengths():
    lengths = ls.eval_lengths("dyck1", 256)
    assert (
        all(n % 2 == 0 for n in lengths) and lengths[-1] == 256 and 16 in lengths and 128 in lengths
    )
    cfg = ls.LengthRun(task="dyck1", protocol="variable", train_length=40)
    assert ls.train_lengths(cfg) == list(range(2, 41, 2))


def test_variable_protocol_runs_and_records_a_curve(tmp_path):
    cfg = ls.LengthRun(
        task="mod3",
        model="gru",
        protocol="variable",
        train_length=10,
        epochs=2,
        steps_per_epoch=3,
        max_eval_length=32,
        n_eval=16,
    )
    record = train("length", cfg)
    curve = pd.DataFrame(record.extra["curve"])
    assert len(curve) == 32 and record.history["test_acc"].between(0, 1).all()
    frame = ls.curves_frame([record])
    assert {"task", "model", "protocol", "seed", "n_parameters"} <= set(frame.columns)
    with pytest.raises(ValueError, match="protocol='random' is not allowed"):
        ls.LengthRun(protocol="random")


def test_random_split_leaks_and_disjoint_does_not():
    sizes = {"small": {"parity": 3000, "dyck1": 2000}}
    table = leakage_table(tasks=("parity", "dyck1"), sizes=sizes, length=16, seeds=(0,))
    random = table.xs("random (paper)", level="split")["test strings in train"]
    disjoint = table.xs("disjoint (ours)", level="split")
    assert (disjoint["test strings in train"] == 0).all()
    assert random.xs("dyck1", level="task").iloc[0] > 0.2  # only 1,430 balanced strings exist
    assert random.xs("parity", level="task").iloc[0] > 0
    prefixes = table.xs("random (paper)", level="split")["test prefixes in train"]
    assert (prefixes > random).all()


def test_length_table_sits_beside_the_authors_numbers():
    rows = []
    for model in ("lstm", "diag_rnn"):
        for seed in (0, 1):
            for length in ls.TABLE_LENGTHS:
                rows.append(
                    {
                        "task": "parity",
                        "protocol": "fixed",
                        "model": model,
                        "seed": seed,
                        "length": length,
                        "all_acc": 1.0 - seed * 0.1,
                        "n_parameters": 100,
                    }
                )
    table = lt.length_table(pd.DataFrame(rows))
    assert table.loc[("parity", "fixed", "lstm"), "L=64"] == "0.950 ± 0.071"
    assert table.loc[("parity", "fixed", "lstm"), "authors L=64"] == "1.000"
    assert table.loc[("parity", "fixed", "diag_rnn"), "authors L=64"] == "-"


def test_fit_seeds_counts_each_seed_by_its_own_stop_rule():
    rows = []
    for model, finals in (("lstm", (1.0, 0.999)), ("diag_rnn", (1.0, 0.95))):
        for seed, final in enumerate(finals):
            for length in (8, 16, 32):
                rows.append({"task": "parity", "protocol": "fixed", "model": model,
                             "seed": seed, "length": length, "train_length": 16,
                             "seq_acc": 1.0, "all_acc": 1.0, "n_parameters": 10,
                             "stop_at_fit": 0.999, "final_val_seq_acc": final})  # fmt: skip
    curves = pd.DataFrame(rows)
    fitted = lt.fit_seeds(curves)
    assert fitted["parity", "fixed", "lstm"] == 2 and fitted["parity", "fixed", "diag_rnn"] == 1
    assert lt.length_table(curves).loc[("parity", "fixed", "diag_rnn"), "fit"] == "1/2"
    assert "fit" not in lt.length_table(curves.drop(columns="stop_at_fit"))  # no rule, no column


def test_reach_table_reads_how_far_each_model_holds():
    acc = {"lstm": (1.0, 1.0, 1.0, 0.97), "gru": (1.0, 1.0, 0.90, 0.5), "rnn": (0.9, 0.8, 0.5, 0.5)}
    curves = pd.DataFrame([{"task": "parity", "protocol": "fixed", "model": model, "seed": 0,
                            "length": length, "train_length": 16, "seq_acc": a}
                           for model, accs in acc.items()
                           for length, a in zip((8, 16, 32, 64), accs, strict=True)])  # fmt: skip
    table = lt.reach_table(curves)
    fixed = table.loc[("fixed", "parity")]
    holds = fixed["holds to L"]  # the rnn does not hold even its training length
    assert holds["lstm"] == 64 and holds["gru"] == 16 and pd.isna(holds["rnn"])
    assert fixed["fits"].tolist() == [True, True, False]
    assert fixed["at longest"].tolist() == [0.97, 0.5, 0.5]


@pytest.mark.parametrize("grid", sorted(ls.GRIDS))
def test_every_grid_can_build_its_fixed_protocol_datasets(grid):
    """A dataset the grid cannot build fails its run only hours in (a disjoint Dyck-1
    split half balanced holds at most 2 x 1,430 strings of length 16)."""
    configs = [c for c in ls.grid(grid) if c.protocol == "fixed"]
    for c in {(c.task, c.n, c.train_length, c.split): c for c in configs}.values():
        data = ls.fixed_protocol_data(c)
        assert len(data.x_train) + len(data.x_val) + len(data.x_test) == c.n


def test_committed_grid_takes_its_string_count_per_task():
    n = {c.task: c.n for c in ls.grid("committed")}
    assert n == {"parity": 10_000, "mod3": 10_000, "dyck1": 2_000}
    runs = pd.DataFrame([{"task": t, "protocol": "fixed", "model": "lstm", "seed": 0,
                          "n": k, "length": 16, "steps": 5, "train_length": 16}
                         for t, k in n.items()])  # fmt: skip
    assert "n = 2000 (parentheses), 10000 (mod-3, parity) strings" in lt.length_caption(runs)


def test_a_refit_grid_trains_again_longer_only_the_cells_that_did_not_fit(tmp_path, monkeypatch):
    from structattn_lite.records import RunRecord, RunStore, config_dict, config_hash

    spec = {**ls.GRIDS["smoke"], "seeds": (0, 1), "run": {"stop_at_fit": 0.999},
            "refit": {"epochs": 5}}  # fmt: skip
    monkeypatch.setitem(ls.GRIDS, "two_pass", spec)
    store = RunStore(tmp_path)
    first = ls.grid("two_pass", store=store)
    assert len(first) == 4 and {c.epochs for c in first} == {2}  # nothing on disk yet

    def record(c, final, epochs=None):  # a finished run whose last validation score is final
        h = pd.DataFrame({"val_seq_acc": [0.5, final][: epochs or c.epochs]})
        status = "early_stop" if final >= 0.999 else "ok"
        rec = RunRecord("length", config_hash("length", c), config_dict(c), h, status=status)
        store.save(rec)
        return rec

    # lstm fits on both seeds; csp_authors misses on seed 1 only (0.995 < 0.999)
    finals = {
        ("lstm", 0): 1.0,
        ("lstm", 1): 1.0,
        ("csp_authors", 0): 1.0,
        ("csp_authors", 1): 0.995,
    }
    recs = [record(c, finals[c.model, c.seed]) for c in first[:-1]]
    assert ls.grid("two_pass", store=store) == first  # the first pass is not all on disk
    recs.append(record(first[-1], finals[first[-1].model, first[-1].seed]))
    assert results.unfit_cells(recs) == {("parity", "fixed", "csp_authors")}
    both = ls.grid("two_pass", store=store)
    refit = both[len(first) :]
    assert both[: len(first)] == first
    assert [(c.model, c.seed, c.epochs) for c in refit] == [
        ("csp_authors", 0, 5),
        ("csp_authors", 1, 5),
    ]
    # each cell's last pass is what ships: the refit for csp_authors, the first for lstm
    kept = results.last_pass(recs + [record(c, 1.0) for c in refit])
    assert sorted((r.config["model"], r.config["epochs"]) for r in kept) == [
        ("csp_authors", 5), ("csp_authors", 5), ("lstm", 2), ("lstm", 2)]  # fmt: skip


def test_committed_length_results_cover_the_grid():
    curves = lt.load_curves()
    assert set(curves["task"]) == {"parity", "mod3", "dyck1"}
    spec = ls.GRIDS["committed"]
    assert set(curves["protocol"]) == set(spec["protocols"])
    assert set(curves["model"]) == set(spec["models"]) and set(curves["grid"]) == {"committed"}
    assert curves["length"].max() == 256 and "grid '" in lt.length_caption(curves)


def test_authors_table_sets_their_number_against_our_interval():
    rows = []
    for seed, (a16, a32, a64) in enumerate(
        [(1.0, 0.92, 0.50), (1.0, 0.93, 0.95)] * 2 + [(1.0, 0.91, 0.7)]
    ):
        for length, acc in ((16, a16), (32, a32), (64, a64)):
            rows.append(
                {
                    "task": "parity",
                    "model": "csp_authors",
                    "seed": seed,
                    "length": length,
                    "all_acc": acc,
                    "seq_acc": acc,
                }
            )
    from structattn_lite.report import ledger_rows

    table = la.authors_table(pd.DataFrame(rows))
    assert table.loc[("parity", 32), "authors' README"] == "0.922"
    assert table.loc[("parity", 32), "ours, all positions"] == "0.922"  # these 5 seeds' mean
    # the verdict, interval, seeds and reason are the committed ledger's row, read by id
    # (never recomputed from these curves: tests/test_ledger_verdicts.py alters the ledger)
    ledger = ledger_rows()
    for length in (16, 32, 64):
        row, ident = table.loc[("parity", length)], f"authors/parity/L{length}"
        assert row["ledger row"] == ident
        assert (row["verdict"], row["reason"]) == tuple(ledger.loc[ident, ["verdict", "reason"]])
        assert row["ledger: all positions [95%]"].endswith(f"({ledger.at[ident, 'seeds']} seeds)")
    low = pd.DataFrame(rows).assign(all_acc=lambda d: d["all_acc"] - 0.2 * (d["length"] == 32))
    assert (
        la.authors_table(low).loc[("parity", 32), "verdict"] == table.loc[("parity", 32), "verdict"]
    )


def test_authors_mod3_is_built_with_their_vocabulary_of_three():
    from structattn_lite.data.tasks import make_task
    from structattn_lite.models import count_parameters

    (cfg,) = [c for c in ls.grid("authors") if c.task == "mod3_authors" and c.seed == 0]
    task = make_task(cfg.task, **cfg.task_options)
    model = ls.build_length_model(cfg, task.n_classes, task.vocab_size)
    assert task.vocab_size == 3 and count_parameters(model) == 4893  # their README's count
    assert make_task("mod3_authors").vocab_size == 2  # the tokens themselves are 0 and 1
    with pytest.raises(ValueError, match="vocab_size"):
        make_task("mod3_authors", vocab_size=4)


def test_length_browser_opens_on_the_metric_it_is_given_and_shows_it_in_words():
    from structattn_lite.dashboard import controls
    from structattn_lite.names import display_name

    app = lt.length_browser({"committed grid": lt.load_curves()}, metric="seq_acc")
    offered, shown = controls(app)["metric"]
    assert shown == display_name("seq_acc") == "whole string"
    assert sorted(offered) == sorted(display_name(m) for m in lt.METRICS)  # no code keys
    app = lt.length_browser({"committed grid": lt.load_curves()}, metric="all_acc")
    assert controls(app)["metric"][1] == display_name("all_acc")


def test_the_committed_authors_runs_have_their_readme_parameter_counts():
    table = pd.read_csv(results.results_dir() / results.COMMITTED_CSV["authors"])
    counts = table.groupby("task")["n_parameters"].unique().map(list).to_dict()
    assert counts == {"parity": [4686], "mod3_authors": [4893], "dyck1_authors": [4795]}
    assert table.groupby("task")["seed"].nunique().to_dict() == {t: 10 for t in counts}


def test_the_authors_export_replaces_the_runs_it_holds_and_keeps_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    spec = {**ls.GRIDS["smoke"], "tasks": ("parity", "mod3"), "seeds": (0, 1)}
    monkeypatch.setitem(ls.GRIDS, "authors", spec)
    configs = ls.grid("authors")
    runs = {(c.task, c.model, c.seed): c for c in configs}
    first = [train("length", c, progress=False) for c in configs if c.seed == 1]
    (path,) = ls.export(first, grid="authors")
    again = train("length", runs[("mod3", "lstm", 0)], progress=False)
    ls.export([again], grid="authors")
    table = pd.read_csv(path)
    ids = table[["seed", "task", "model"]].drop_duplicates().apply(tuple, axis=1).tolist()
    assert ids == [(0, "mod3", "lstm"), *[(1, c.task, c.model) for c in configs if c.seed == 1]]
    kept = table[table["seed"] == 1].reset_index(drop=True)
    fresh = pd.read_csv(ls.export(first, grid="authors")[0])
    assert kept.equals(fresh[fresh["seed"] == 1].reset_index(drop=True))  # unchanged rows
    assert len(fresh) == len(table)  # exporting runs again replaces their rows


def test_grazzi_validation_is_longer_than_training_and_shorter_than_test():
    """The rate of the grazzi grid is chosen on strings of length 128 scored at 64..128:
    longer than any training string (1..40), never a reported test length (256, 500)."""
    from structattn_lite.studies.length.grids import GRAZZI_TEST_LENGTHS, GRAZZI_VAL_LENGTHS

    configs = ls.grid("grazzi")
    assert {c.optim.lr for c in configs} == {1e-3, 3e-3, 1e-2}
    assert {c.optim.schedule for c in configs} == {"constant"}
    assert {(c.protocol, c.train_length, c.batch_size) for c in configs} == {("grazzi", 40, 128)}
    assert {c.epochs * c.steps_per_epoch for c in configs} == {2000}
    setup = ls.length_setup(configs[0])
    x_val, y_val = setup.tensors["x_val"], setup.tensors["y_val"]
    first, last = GRAZZI_VAL_LENGTHS
    scored = (y_val != -100).any(0).nonzero().flatten() + 1  # 1-based prefix lengths
    assert x_val.shape[-1] == last and scored.min() == first and scored.max() == last
    assert last < min(GRAZZI_TEST_LENGTHS) and first > configs[0].train_length
    batch = next(iter(setup.sample(torch.Generator().manual_seed(0))))
    assert batch[0].shape[0] == 128 and batch[0].shape[1] <= 40


def test_grazzi_rates_are_chosen_on_validation_alone():
    """Highest mean final validation accuracy wins; a diverged seed counts as 0; ties go
    to the lower rate; the test columns never enter."""
    rows = []
    for lr, vals, test in (
        (1e-3, (0.6, 0.6), 1.0),
        (3e-3, (0.9, 0.9), 0.5),
        (1e-2, (1.0, 0.9), 0.5),
    ):
        for seed, v in enumerate(vals):
            rows.append({"task": "parity", "model": "m", "lr": lr, "seed": seed,
                         "final_val_acc": v, "seq_acc": test, "status": "ok"})  # fmt: skip
    frame = pd.DataFrame(rows)
    chosen = results.chosen_rates(frame)
    assert chosen.loc[chosen["chosen"], "lr"].tolist() == [1e-2]
    frame.loc[(frame["lr"] == 1e-2) & (frame["seed"] == 1), "status"] = "diverged"
    chosen = results.chosen_rates(frame)
    assert chosen.loc[chosen["chosen"], "lr"].tolist() == [3e-3]  # 0.5 mean against 0.9
    frame.loc[frame["lr"] == 1e-2, ["final_val_acc", "status"]] = (0.9, "ok")
    chosen = results.chosen_rates(frame)
    assert chosen.loc[chosen["chosen"], "lr"].tolist() == [3e-3]  # a tie: the lower rate


def test_the_length_reports_order_tasks_and_never_drop_one():
    """The paper's tasks come first in its order; a task the study adds is kept after them
    (the figure's panels and the reach table used to drop any task not on a fixed list)."""
    import pandas as pd

    from structattn_lite.studies.length.report import _in_order

    assert _in_order(pd.Series(["dyck1", "parity", "dyck1"])) == ["parity", "dyck1"]
    assert _in_order(pd.Series(["modk", "mod3", "parity"])) == ["parity", "mod3", "modk"]
