"""The CSP paper's claims: Tables 3 and 4 at the paper's size, the grokking gap and the
gradient-norm spike at the jump."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from structattn_lite import names, stats
from structattn_lite.claims.rows import (
    PAPER_TEXT,
    diverged_seeds,
    fresh_reader,
    priced,
    published_row,
    read,
    row,
)
from structattn_lite.claims.rules import rule as rule_of
from structattn_lite.names import PAPER_TASKS, display_name
from structattn_lite.studies.ablations.grids import COMMITTED_CSV, PAPER_TABLE3, PAPER_TABLE4
from structattn_lite.studies.ablations.grids import GRIDS as ABLATION_GRIDS
from structattn_lite.studies.ablations.report import load_results
from structattn_lite.studies.grokking.grids import PAPER_GROKKING_GAP
from structattn_lite.studies.grokking.report import (
    GAP_METRIC,
    PLATEAU_ABOVE_CHANCE,
    SPIKE_WINDOW,
    censored_gaps,
    seed_gaps,
    spike_epoch,
)
from structattn_lite.studies.grokking.results import committed_records

# --- the CSP paper: Tables 3 and 4 -------------------------------------------------------


def _table_rows(frame: pd.DataFrame | None, cells, grid: str, command, table: str):
    """One row per (cell, task): ``cells`` lists (claim words, selector, published)."""
    rows = []
    for ident, words, select, published, task in cells:
        values, diverged = _cell_values(frame, select, task)
        number = "(no published number)" if math.isnan(published) else f"{published:.2f}"
        rows.append(published_row(
            values, diverged, published, bounds=stats.UNIT,  # accuracy, F1
            id=ident, study="CSP", claim=f"{words}: {display_name(task)} {names.metric_name(task)} {number}",
            source=f"CSP paper, Table {table}", protocol=PAPER_TEXT, grid=grid,
            notebook="04, Tables 3 and 4",
            command=command(ident) if callable(command) else command,
        ))  # fmt: skip
    return rows


def _cell_values(frame: pd.DataFrame | None, select, task: str) -> tuple[pd.Series, int]:
    """A cell's per-seed scores (the task's metric) and how many of its seeds diverged: a
    diverged run's last evaluation is no trained model's, so it has no score."""
    runs = frame[select(frame) & (frame["task"] == task)] if frame is not None else None
    if runs is None:
        runs = pd.DataFrame(columns=[names.metric(task), "status"])
    diverged = runs["status"] == "diverged"
    return runs.loc[~diverged, names.metric(task)].dropna(), int(diverged.sum())


ABLATIONS_COMMAND = "structattn run ablations --grid {grid} --seed-batching"


def table3() -> list[dict]:
    words = {"focal": display_name("focal"),
             "ce": f"{display_name('ce')} instead of {display_name('focal')}"}  # fmt: skip
    cells = [
        (f"table3/{loss}/{task}", words[loss], _selector(loss=loss), PAPER_TABLE3[loss, task], task)
        for loss in ("focal", "ce")
        for task in PAPER_TASKS
    ]
    return _table_rows(read("csp_ablations_paper_text.csv"), cells, "paper_text",
                       ABLATIONS_COMMAND.format(grid="paper_text"), "3")  # fmt: skip


def _selector(**equal) -> Callable[[pd.DataFrame], pd.Series]:
    """The rows of a frame whose columns hold every value of ``equal``."""
    return lambda frame: frame[list(equal)].eq(pd.Series(equal)).all(axis=1)


def table4() -> list[dict]:
    """Table 4's nine rows; the full rotated model is Table 3's focal runs (shared)."""
    both = load_results((COMMITTED_CSV["paper_table4"], COMMITTED_CSV["paper_text"]),
                        missing_ok=True)  # fmt: skip
    frame = None if both is None else both[both["loss"] == "focal"]  # Table 4 is all focal
    cells = []
    for (rotation, variant), numbers in PAPER_TABLE4.items():
        for task, published in zip(PAPER_TASKS, numbers, strict=True):
            if math.isnan(published):
                continue
            words = f"{display_name(variant)}, {rotation} rotation"
            select = _selector(rotation=rotation, variant=variant, preset="paper")
            cells.append((f"table4/{rotation}/{variant}/{task}", words, select, published, task))

    def command(ident: str) -> str:  # the full rotated model's seeds are paper_text's runs
        grid = "paper_text" if ident.startswith("table4/with/+norm/") else "paper_table4"
        return ABLATIONS_COMMAND.format(grid=grid)

    return _table_rows(frame, cells, "paper_table4 (+ paper_text)", command, "4")


# --- the CSP paper: its "A beats B" sentences about the ablations -------------------------
# Each compares two of the Table 3 and 4 cells above, on their per-seed values; a cell is a
# row's id without its task.
ABLATION_CLAIMS = {  # key -> (the paper's words, tasks, cell A, cell B)
    "rotation": ("rotation is the core inductive bias", PAPER_TASKS,
                 "table4/with/+norm", "table4/without/+norm"),
    "silu_per_step": ("SiLU inside every step hurts", PAPER_TASKS,
                      "table4/with/base", "table4/with/+silu"),
    "skip": ("the block skip helps", PAPER_TASKS, "table4/with/+skip", "table4/with/+silu"),
    "norm_vs_layernorm": ("the complex norm beats LayerNorm", ("dyck1",),
                          "table4/with/+norm", "table4/with/layernorm"),
    "focal_vs_ce": ("focal loss beats cross-entropy", ("mod3", "dyck1"),
                    "table3/focal", "table3/ce"),
    # section 3.3.2, on the full model (grid paper_332: no Table 4 row holds these cells)
    "skip_in_full": ("removing the skip from the full model drops accuracy", PAPER_TASKS,
                     "table4/with/+norm", "paper_332/-skip"),
    "step_silu_in_full": ("SiLU inside every step underperforms SiLU at the block boundary",
                          PAPER_TASKS, "table4/with/+norm", "paper_332/+stepsilu"),
    # section 2.3, on the full model (grid paper_rope): its rotation against RoPE's form
    "rotation_elementwise": ("rotating each complex dim on its own beats RoPE-style pairwise "
                             "rotation", PAPER_TASKS, "table4/with/+norm", "paper_rope/+norm"),
}  # fmt: skip
# cells read from a grid of their own (no Table 3 or 4 row holds them): grid -> its rows'
# (variant, rotation label)
OWN_GRID_CELLS = {"paper_332": (("-skip", "with"), ("+stepsilu", "with")),
                  "paper_rope": (("+norm", "pairwise"),)}  # fmt: skip


def _to_reach(task: str, reached: int, seeds: int, grid: str) -> str:
    """What would give a side of ``task`` with too few values (``reached`` of its ``seeds``
    reach the level measured) its ``stats.MIN_SEEDS``, at the share that reach it now."""
    if not reached:
        return (f"; no {display_name(task)} seed of {seeds} reaches it here, so no seed count "
                "would decide it at this share")  # fmt: skip
    need = math.ceil(stats.MIN_SEEDS * seeds / reached)
    return (
        f"; {reached} of {seeds} {display_name(task)} seeds reach it, so about {need} "
        f"would give {stats.MIN_SEEDS}{priced(need - seeds, grid, task=task, preset='paper')}"
    )


def _side(values: list[float], diverged: int) -> str:
    """A cell's per-seed values and diverged seeds, in words."""
    mean = f"{sum(values) / len(values):.3f} over {len(values)}" if values else "no value"
    return f"{mean} ({diverged} diverged)" if diverged else mean


def _ablation_cells() -> dict[str, tuple[list[float], int]]:
    """Every cell an "A beats B" row compares, by its id: its trained seeds' values and how
    many seeds diverged. The Table 3 and 4 cells are those rows' own; the cells of grids
    of their own (``OWN_GRID_CELLS``) are read from their files, as the table rows read
    theirs."""
    cells = {}
    for r in (*table3(), *table4()):
        k = diverged_seeds(r["reason"])
        cells[r["id"]] = (list(r["values"]["ours"]), k[0] if k else 0)
    for grid, rows in OWN_GRID_CELLS.items():
        frame = read(COMMITTED_CSV[grid])
        for variant, rotation in rows:
            for task in PAPER_TASKS:
                pick = _selector(variant=variant, rotation=rotation)
                values, diverged = _cell_values(frame, pick, task)
                cells[f"{grid}/{variant}/{task}"] = (values.tolist(), diverged)
    return cells


def ablation_claims() -> list[dict]:
    """One row per claim and task: mean(A) - mean(B) on the cells' trained seeds (Welch),
    by the row's rule; a side with fewer than 3 trained seeds (the rest diverged) leaves the
    row undecided, and its reason says so."""
    cells = _ablation_cells()
    rows = []
    for key, (words, tasks, a, b) in ABLATION_CLAIMS.items():
        for task in tasks:
            ident, (va, da), (vb, db) = (
                f"ablation/{key}/{task}",
                cells[f"{a}/{task}"],
                cells[f"{b}/{task}"],
            )
            grid = next((g for g in OWN_GRID_CELLS if b.startswith(f"{g}/")), "paper_table4")
            (diff, low, high), verdict, reason = stats.difference(
                va, vb, delta=rule_of(ident).delta, claim="greater")  # fmt: skip
            planned = len(ABLATION_GRIDS[grid]["seeds"]) if grid in OWN_GRID_CELLS else 0
            sides, shown = f"A {_side(va, da)}, B {_side(vb, db)}", vb
            if not vb and not db:
                reason = "B's runs are not trained yet"
            elif len(vb) + db < planned:  # read once all its seeds are in, not on a part
                (diff, low, high), verdict = (math.nan,) * 3, stats.UNDECIDED
                sides, shown = f"A {_side(va, da)}, B not read yet", []  # not even its mean
                reason = (f"{len(vb) + db} of B's seeds are in; its fresh grid trains "
                          f"{planned}, and the row is read once all are")  # fmt: skip
            elif verdict == stats.UNDECIDED and (da or db):
                reason = (f"fewer than {stats.MIN_SEEDS} trained seeds on a side: the rest "
                          "diverged, so no accuracy to compare")  # fmt: skip
                if key in ON_THE_FULL_MODEL:
                    reason += (f"; row `ablation/{ON_THE_FULL_MODEL[key]}/{task}` asks it of "
                               "the full model, which trains")  # fmt: skip
            rows.append(row(
                {"A": va, "B": shown}, test="superiority", id=ident, study="CSP",
                claim=f"{words}: {display_name(task)} {names.metric_name(task)}, "
                      f"A `{a}` against B `{b}`",
                source=f"CSP paper, section {'2.3' if grid == 'paper_rope' else '3.3'}",
                published=math.nan, ours=diff, low=low,
                high=high, seeds=len(va) + da + len(vb) + db, verdict=verdict,
                reason=f"{sides}; {reason}", protocol=PAPER_TEXT,
                grid=f"{grid} (+ paper_text)", notebook="04, the paper's claims",
                command=ABLATIONS_COMMAND.format(grid=grid), cell={"task": task},
            ))  # fmt: skip
    return rows


# Table 4's cumulative claims whose rows diverged on every seed, and the section 3.3.2 row
# that asks the same of the full model
ON_THE_FULL_MODEL = {"skip": "skip_in_full", "silu_per_step": "step_silu_in_full"}


# --- the CSP paper: grokking gap and gradient-norm spike ----------------------------------
# What a seed's gap is, is the grokking study's (``seed_gaps``, the one definition); when a
# task's gap reproduces the paper's is decided here (``gap_verdict``), and its notebook's
# table reads that row by id.


GAP_PRESETS = ("paper", "authors_3bb9f71")  # the models whose grokking the ledger tests
GAP_COMMAND = "structattn run grokking --grid gap --seed-batching"  # the epoch-by-epoch runs
MORE_SEEDS_COMMAND = "structattn run grokking --grid gap_seeds --seed-batching"


def gap_verdict(seeds: pd.DataFrame, paper: tuple[float, float], column: str):
    """(ours, low, high, verdict, reason) of one task's gap at one threshold, by the gap
    rule (``stats.gap``): ``seeds`` is one row per seed (``seed_gaps``); a seed that never
    jumped counts as one that never reached the threshold."""
    jumped = seeds[seeds["jump"].notna()]
    times, reached = censored_gaps(jumped, column)
    never = len(seeds) - len(jumped)  # censored at 0: out of the risk set from the start
    times = pd.concat([times, pd.Series([0.0] * never)], ignore_index=True)
    reached = pd.concat([reached, pd.Series([False] * never)], ignore_index=True)
    level = column.split("_")[1]
    return stats.gap(times, reached, int(seeds["plateau"].sum()), paper, level)


def _gap_cost(seeds: pd.DataFrame, paper, numbers, verdict: str, grid: str, **cell) -> str:
    """What the seeds that would decide an undecided gap row (``stats.gap``'s count of seeds
    reaching 100%) come to in all, at the share that reach it now, and their cost."""
    reached, n = int(seeds["gap_100"].notna().sum()), len(seeds)
    if (verdict != stats.UNDECIDED or seeds["plateau"].sum() < stats.MIN_SEEDS
            or reached < stats.MIN_SEEDS or 2 * reached < n):  # fmt: skip
        return ""  # decided, or undecided for a reason no seed count changes (stats.gap)
    edges = (paper[0] - paper[1], paper[0] + paper[1])
    need = stats.seeds_to_decide(*numbers, reached, edges)
    if not math.isfinite(need) or need > 1000:
        return ""  # its reason says no seed count would decide it
    in_all = math.ceil(need * n / reached)
    return f"; that is about {in_all} seeds in all" + priced(in_all - n, grid, **cell)


def _complete(grid: str, seeds) -> list | None:
    """A fresh grokking grid's committed records of ``seeds``, once every task and preset
    of the grid has them all; else None."""
    from structattn_lite.studies.grokking.grids import GRIDS

    records = [r for r in committed_records(grid) if r.seed in seeds]
    spec = GRIDS[grid]
    have = {(r.config["task"], r.config["preset"], r.seed) for r in records}
    need = {(t, p, s) for t in spec["tasks"] for p in spec["presets"] for s in seeds}
    return records if need <= have else None


def _fresh_reader():
    """``read_on(row id)`` (``rows.fresh_reader``) for the gap grid's rows."""
    return fresh_reader(
        _complete, "{grid}", "structattn run grokking --grid {grid} --seed-batching"
    )


def _gap_frame(records, in_gap=None) -> pd.DataFrame:
    """Per seed: task, preset, seed, its gaps (``seed_gaps``) and whether a run is one
    only ``gap_seeds`` holds (not in ``in_gap``, the gap grid's keys; None: none is)."""
    rows = [{"task": r.config["task"], "preset": r.config["preset"], "seed": r.seed,
             "more_seeds": in_gap is not None and (r.experiment, r.key) not in in_gap,
             **seed_gaps(r.history, r.config["task"])} for r in records if len(r.history)]  # fmt: skip
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["task", "preset"])


def grokking() -> list[dict]:
    # gap: seeds 0-9 per cell; gap_seeds: seeds 10-24 of the authors' model on parity and
    # mod-3. A run in both files (gap_seeds trained mod-3 seeds 5-9 that gap's file holds)
    # counts once. A row whose rule names fresh seeds reads those alone once all are in.
    gap = committed_records("gap")
    in_gap = {(r.experiment, r.key) for r in gap}
    records = list(
        {(r.experiment, r.key): r for r in gap + committed_records("gap_seeds")}.values()
    )
    per_seed = _gap_frame(records, in_gap)
    read_on = _fresh_reader()
    protocol = PAPER_TEXT.replace(display_name("paper"), "each model")
    rows = []
    for preset in GAP_PRESETS:
        for task, paper in PAPER_GROKKING_GAP.items():
            fresh, where = read_on(f"gap/{preset}/{task}")
            frame = per_seed if fresh is None else _gap_frame(fresh)
            seeds = frame[(frame["task"] == task) & (frame["preset"] == preset)]
            if seeds.empty:
                continue
            # the command that trains every seed the row reads
            command = GAP_COMMAND + (
                f" && {MORE_SEEDS_COMMAND}" if seeds["more_seeds"].any() else ""
            )
            where = {"grid": "gap", "command": command, **where}
            jumped = seeds[seeds["jump"].notna()]
            verdicts = {level: gap_verdict(seeds, paper, f"gap_{level}") for level in ("100", "99")}
            ours, low, high, verdict, reason = verdicts["100"]
            reason += _gap_cost(seeds, paper, (ours, low, high), verdict, where["grid"],
                                task=task, preset=preset)  # fmt: skip
            rows.append(row(
                {"gap to 100%": seeds["gap_100"].tolist(), "gap to 99%": seeds["gap_99"].tolist()},
                test="gap", id=f"gap/{preset}/{task}", study="CSP",
                claim=f"grokking gap (90% to 100% test accuracy), {display_name(task)}, "
                      f"{display_name(preset)}: {paper[0]} ± {paper[1]} epochs",
                source="CSP paper, section 4.2.1", published=paper[0], ours=ours, low=low,
                high=high, seeds=len(seeds), verdict=verdict,
                reason=f"{reason} (at 99%: {verdicts['99'][4].split(';')[0]})",
                protocol=protocol, notebook="03, grokking gap", **where,
            ))  # fmt: skip
            # the spike "at the jump" presumes a jump from chance: only such seeds count
            phased = jumped[jumped["plateau"].astype(bool)]
            at = int((phased["spike_offset"].abs() <= SPIKE_WINDOW).sum())
            if len(phased) < stats.MIN_SEEDS:
                verdict = stats.UNDECIDED
                reason = (f"no phase at chance to measure: {len(phased)} of {len(seeds)} seeds "
                          f"sat at chance before the jump ({at} of them spike within "
                          f"±{SPIKE_WINDOW} epochs); only a protocol whose runs sit at chance "
                          "first can decide it")  # fmt: skip
            else:
                verdict, reason = stats.majority(at, len(phased), f"spike within ±{SPIKE_WINDOW} "
                                                 "epochs of the 90% jump")  # fmt: skip
                reason += f" (of the {len(phased)} of {len(seeds)} seeds at chance before it)"
                planned = rule_of(f"spike/{preset}/{task}").fresh
                if verdict == stats.UNDECIDED and planned and not where.get("fresh_read"):
                    reason += f"; its fresh grid trains {len(planned[2])} seeds"
                elif verdict == stats.UNDECIDED:
                    need = stats.majority_seeds(at, len(phased))
                    if need <= 1000:  # only seeds at chance first count: a share of them
                        more = (need - len(phased)) * len(seeds) / len(phased)
                        reason += f"; that is about {more:.0f} more seeds in all" + priced(
                            more, where["grid"], task=task, preset=preset)  # fmt: skip
            share = stats.share_interval(at, len(phased)) if len(phased) else (math.nan,) * 2
            rows.append(row(
                {"spike minus jump (epochs)": phased["spike_offset"].tolist()},
                test="majority", id=f"spike/{preset}/{task}", study="CSP",
                claim=f"the largest gradient norm coincides with the jump, {display_name(task)}, "
                      f"{display_name(preset)}",
                source="CSP paper, section 4.2.1", ours=at / max(len(phased), 1),
                low=share[0], high=share[1], seeds=len(phased), verdict=verdict, reason=reason,
                protocol=protocol, notebook="03, gradient-norm spikes", **where,
            ))  # fmt: skip
    return rows


# --- the CSP paper's other claims about its curves (section 3.2, Fig. 3, section 4.2.1) ----
PAPER_PLATEAU = {"mod3": 80.0, "dyck1": 120.0}  # Fig. 3: epochs at chance, "about"
PAPER_SPIKE_EPOCH = ("mod3", 85.0)  # Fig. 4 / section 4.2.2: "around epoch 85", on mod-3


def _curves_per_seed(records, preset: str = "paper") -> pd.DataFrame:
    """Per seed of ``records`` (a grid's): its first epoch at 90% (the jump), its epochs at
    chance before the jump, and its gap to 100% (None when never reached)."""
    rows = []
    for r in records:
        task = r.config["task"]
        if r.config["preset"] != preset or not len(r.history):
            continue
        h, gaps = r.history, seed_gaps(r.history, task)
        before = h["epoch"] < gaps["jump"] if gaps["jump"] is not None else True
        at_chance = int(
            ((h[GAP_METRIC] < names.chance(task) + PLATEAU_ABOVE_CHANCE) & before).sum()
        )
        rows.append({"task": task, "seed": r.seed, "jump": gaps["jump"], "at_chance": at_chance,
                     "gap_100": gaps["gap_100"], "spike": spike_epoch(h)})  # fmt: skip
    return pd.DataFrame(rows, columns=["task", "seed", "jump", "at_chance", "gap_100", "spike"])


def curves() -> list[dict]:
    """The paper's words about its training curves, on CSP (paper text)'s gap runs (or the
    fresh seeds a row's rule names, once all are in)."""
    committed = _curves_per_seed(committed_records("gap"))
    if committed.empty:
        return []
    read_on = _fresh_reader()

    def per_seed(ident):
        """The per-seed frame a row reads, and its grid, command and ``fresh_read``."""
        fresh, where = read_on(ident)
        frame = committed if fresh is None else _curves_per_seed(fresh)
        return frame, {"grid": "gap", "command": GAP_COMMAND, **where}

    def of(frame, task, column):
        return frame.loc[frame["task"] == task, column].dropna().tolist()

    fields = dict(study="CSP", protocol=PAPER_TEXT)
    rows = []

    def longer(ident, first, second, column, words, source):
        """A row for "``first``'s ``column`` is larger than ``second``'s" (Welch, delta)."""
        frame, where = per_seed(ident)
        a, b = of(frame, first, column), of(frame, second, column)
        (diff, low, high), verdict, reason = stats.difference(
            a, b, delta=rule_of(ident).delta, claim="greater")  # fmt: skip
        for task, values in ((first, a), (second, b)):
            if verdict == stats.UNDECIDED and len(values) < stats.MIN_SEEDS:
                reason += _to_reach(task, len(values), int((frame["task"] == task).sum()),
                                    where["grid"])  # fmt: skip
        return row(
            {display_name(first): a, display_name(second): b}, test="superiority", id=ident,
            claim=f"{words}, {display_name('paper')}", source=source, ours=diff, low=low,
            high=high, seeds=min(len(a), len(b)), verdict=verdict, reason=reason,
            notebook="03, grokking gap", **fields, **where)  # fmt: skip

    rows.append(longer("csp/convergence/order", "dyck1", "parity", "jump",
                       "parentheses take longer than parity to converge (about 150 against 50 "
                       "epochs)", "CSP paper, section 3.2"))  # fmt: skip
    for task, paper in PAPER_PLATEAU.items():
        ident = f"csp/plateau/{task}"
        frame, where = per_seed(ident)
        values = pd.Series(of(frame, task, "at_chance"), dtype=float)
        rows.append(published_row(
            values, 0, paper, bounds=stats.EPOCHS, id=ident,
            cell={"task": task, "preset": "paper"},
            claim=f"{display_name(task)} sits at chance for about {paper:.0f} epochs before it learns, "
                  f"{display_name('paper')}", source="CSP paper, Fig. 3",
            notebook="03, grokking gap", **fields, **where))  # fmt: skip
    task, paper = PAPER_SPIKE_EPOCH
    ident = f"csp/grad_profile/{task}"
    frame, where = per_seed(ident)
    rows.append(published_row(
        pd.Series(of(frame, task, "spike"), dtype=float), 0, paper, bounds=stats.EPOCHS,
        id=ident, cell={"task": task, "preset": "paper"},
        claim=f"on {display_name(task)} the gradient norm spikes around epoch {paper:.0f}, after "
              f"a flat phase, {display_name('paper')}", source="CSP paper, section 4.2.2 and Fig. 4",
        notebook="03, grokking gap", **fields, **where))  # fmt: skip
    rows.append(longer("csp/gap_order", "mod3", "parity", "gap_100",
                       "the grokking gap grows with difficulty: mod-3's is longer than parity's",
                       "CSP paper, section 4.2.1"))  # fmt: skip
    return rows
