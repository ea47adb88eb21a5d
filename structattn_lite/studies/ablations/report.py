"""Tables 3 and 4 from run records: ours (mean +- sd over seeds) beside the paper, a verdict.

The committed records are ``data/results/csp_ablations.csv`` (one row per run, with its
config columns); ``load_results`` reads them, ``table3``/``table4`` summarize, ``style``
renders a pandas Styler, ``save_table`` writes it to ``figures/`` (HTML and PNG/PDF), and
``grid_caption`` says which grid a table came from.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from structattn_lite.config import results_dir
from structattn_lite.report import format_mean_sd
from structattn_lite.studies.ablations.experiment import (
    COMMITTED_CSV,
    METRIC,
    PAPER_TABLE3,
    PAPER_TABLE4,
    TASKS,
    claim_verdict,
    verdict,
)

ABLATIONS_CSV = COMMITTED_CSV["committed"]
TASK_TITLES = {"parity": "parity (acc)", "mod3": "mod-3 (acc)", "dyck1": "parentheses (F1)"}


# What each loss name means in a table (the focal alpha convention is explicit).
LOSS_NAMES = {
    "focal": "focal loss (alpha 0.25 on class 1, 0.75 on class 0: Lin et al.)",
    "focal_constant": "focal loss (alpha 0.25 on every class: the authors')",
    "ce": "cross-entropy",
}


def load_results(
    name: str = ABLATIONS_CSV, root: Path | None = None, missing_ok: bool = False
) -> pd.DataFrame | None:
    """The committed records ``name``; None when missing and ``missing_ok``."""
    path = (root or results_dir()) / name
    if missing_ok and not path.exists():
        return None
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing; run the committed grid (see the notebook) first"
        )
    return pd.read_csv(path)


def cell_stats(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean, sd and seed count of each task's metric per cell (``keys`` + task)."""
    df = df.assign(value=[r[METRIC[r["task"]]] for _, r in df.iterrows()])
    out = df.groupby([*keys, "task"])["value"].agg(mean="mean", sd="std", seeds="count")
    return out.reset_index()


def _wide(stats: pd.DataFrame, keys: list[str], paper_of) -> pd.DataFrame:
    rows = []
    for cell, group in stats.groupby(keys, sort=False):
        cell = cell if isinstance(cell, tuple) else (cell,)
        row = dict(zip(keys, cell, strict=True))
        for task in TASKS:
            hit = group[group["task"] == task]
            mean = hit["mean"].iloc[0] if len(hit) else math.nan
            sd = hit["sd"].iloc[0] if len(hit) else math.nan
            paper = paper_of(row, task)
            row[(task, "ours")] = mean
            row[(task, "sd")] = sd
            row[(task, "seeds")] = int(hit["seeds"].iloc[0]) if len(hit) else 0
            row[(task, "paper")] = paper
            row[(task, "verdict")] = verdict(mean, sd, paper, row[(task, "seeds")])
        rows.append(row)
    table = pd.DataFrame(rows).set_index(keys)
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


def table3(df: pd.DataFrame) -> pd.DataFrame:
    """Focal vs cross-entropy (paper Table 3), full model, random split; per preset."""
    sub = df[(df["variant"] == "+norm") & (df["rotation"] == "with") & (df["split"] == "random")]
    stats = cell_stats(sub, ["preset", "loss"])
    return _wide(stats, ["preset", "loss"], lambda r, t: PAPER_TABLE3.get((r["loss"], t), math.nan))


def table4(df: pd.DataFrame) -> pd.DataFrame:
    """Structural ablations (paper Table 4), focal loss, random split; per preset."""
    sub = df[(df["loss"] == "focal") & (df["split"] == "random")]
    stats = cell_stats(sub, ["preset", "rotation", "variant"])
    order = {k: i for i, k in enumerate(PAPER_TABLE4)}
    stats = stats.assign(
        _o=[order.get((r, v), 99) for r, v in zip(stats["rotation"], stats["variant"], strict=True)]
    )
    stats = stats.sort_values(["preset", "_o"]).drop(columns="_o")

    def paper(row, task):
        numbers = PAPER_TABLE4.get((row["rotation"], row["variant"]))
        return numbers[TASKS.index(task)] if numbers else math.nan

    return _wide(stats, ["preset", "rotation", "variant"], paper)


def split_table(df: pd.DataFrame) -> pd.DataFrame:
    """Full model, focal loss: the paper's random split vs a disjoint one."""
    sub = df[(df["variant"] == "+norm") & (df["rotation"] == "with") & (df["loss"] == "focal")]
    stats = cell_stats(sub, ["preset", "split"])
    overlap = (
        sub.groupby(["preset", "split", "task"])["test_in_train"].mean().rename("test_in_train")
    )
    return stats.merge(overlap.reset_index(), on=["preset", "split", "task"])


CLAIMS = [  # (claim, tasks, (cell A), (cell B)): the paper says A beats B
    ("rotation is the core inductive bias", TASKS, ("with", "+norm"), ("without", "+norm")),
    ("SiLU inside every step hurts", TASKS, ("with", "base"), ("with", "+silu")),
    ("block skip helps", TASKS, ("with", "+skip"), ("with", "+silu")),
    ("complex norm beats LayerNorm", ("dyck1",), ("with", "+norm"), ("with", "layernorm")),
]


def claims_table(df: pd.DataFrame) -> pd.DataFrame:
    """Each ablation claim of the paper, tested on our runs per preset and task (Welch
    95% interval of the difference of means; see ``claim_verdict``)."""
    t4, t3 = table4(df), table3(df)

    def cell(table, key, task):
        return tuple(table.loc[key, (task, k)] for k in ("ours", "sd", "seeds"))

    rows = []
    for preset in t4.index.get_level_values("preset").unique():
        tests = [
            (claim, task, t4, (preset, *a), (preset, *b))
            for claim, tasks, a, b in CLAIMS
            for task in tasks
        ]
        tests += [
            ("focal loss beats cross-entropy", task, t3, (preset, "focal"), (preset, "ce"))
            for task in ("mod3", "dyck1")
        ]
        for claim, task, table, a, b in tests:
            if a not in table.index or b not in table.index:
                continue
            ca, cb = cell(table, a, task), cell(table, b, task)
            rows.append(
                {
                    "preset": preset,
                    "claim": claim,
                    "task": task,
                    "A": ca[0],
                    "B": cb[0],
                    "verdict": claim_verdict(ca, cb),
                }
            )
    return pd.DataFrame(rows)


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """Merge ours and sd into one 'mean +- sd' string column per task."""
    out = pd.DataFrame(index=table.index)
    for task in TASKS:
        if (task, "ours") not in table:
            continue
        ours, sd, seeds = table[(task, "ours")], table[(task, "sd")], table[(task, "seeds")]
        out[(TASK_TITLES[task], "ours")] = [
            format_mean_sd(m, s, k) for m, s, k in zip(ours, sd, seeds, strict=True)
        ]
        out[(TASK_TITLES[task], "paper")] = [
            "-" if math.isnan(p) else f"{p:.2f}" for p in table[(task, "paper")]
        ]
        out[(TASK_TITLES[task], "verdict")] = table[(task, "verdict")]
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    return out


def grid_caption(df: pd.DataFrame) -> str:
    """The grid a table came from: profile, seeds, epochs, sizes, protocol."""
    seeds = sorted(df["seed"].unique().tolist())
    cells = ["table", "rotation", "variant", "loss", "split", "task", "preset"]
    per_cell = df.groupby([c for c in cells if c in df])["seed"].nunique()
    spread = (
        f"{per_cell.min()}"
        if per_cell.min() == per_cell.max()
        else f"{per_cell.min()}-{per_cell.max()}"
    )
    hold = df["hold_perfect"].dropna().unique()
    # Grids made before the validation split stopped on test accuracy: say so.
    validated = "val_fraction" in df and bool((df["val_fraction"] > 0).all())
    read = "validation" if validated else "test (this grid predates the validation split)"
    stop = f", early stop after {int(hold[0])} epochs at 100% {read} accuracy" if len(hold) else ""
    return (
        f"grid '{df['grid'].iloc[0]}': {len(df)} runs in {len(per_cell)} cells, {spread} seeds per cell "
        f"(seeds {seeds}); up to "
        f"{int(df['epochs'].max())} epochs (mean run {df['epochs_run'].mean():.0f}){stop}; "
        f"n={sorted(df['n'].unique().tolist())}, d_model={int(df['d_model'].iloc[0])}, "
        f"{int(df['n_layers'].iloc[0])} layers, {df['labels'].iloc[0]} labels, lr={df['lr'].iloc[0]}, "
        "scored on the whole string (last position)"
        + "".join(
            f"; {loss}: {LOSS_NAMES[loss]}"
            for loss in sorted(df["loss"].unique())
            if loss in LOSS_NAMES
        )
    )


# --- prose rendered from the tables (no number in notebook 04 is typed by hand) -------


def _cell_text(table: pd.DataFrame, key, task: str) -> str:
    ours, sd, seeds = (table.loc[key, (task, k)] for k in ("ours", "sd", "seeds"))
    paper, verdict_ = table.loc[key, (task, "paper")], table.loc[key, (task, "verdict")]
    name = TASK_TITLES[task].split(" (")[0] + (" F1" if task == "dyck1" else "")
    ours_text = format_mean_sd(ours, sd, int(seeds)).replace(f" ({int(seeds)} seeds)", "")
    if math.isnan(paper):
        return f"{name} {ours_text} (no paper number)"
    return f"{name} {ours_text} (paper {paper:.2f}: {verdict_})"


def _verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    verdicts = [table[(t, "verdict")] for t in TASKS if (t, "verdict") in table]
    flat = pd.concat(verdicts).str.split(" ").str[0].replace({"not": "not reproduced"})
    flat = flat[~pd.concat(verdicts).isin(["no paper number", "not run"])]
    return {k: int((flat == k).sum()) for k in ("reproduced", "not reproduced", "inconclusive")}


def _table_prose(table: pd.DataFrame, label) -> str:
    lines = [
        f"- {label(key)}: " + "; ".join(_cell_text(table, key, t) for t in TASKS) + "."
        for key in table.index
    ]
    c = _verdict_counts(table)
    lines.append(
        f"\nOf the {sum(c.values())} cells with a paper number, {c['reproduced']} reproduced, "
        f"{c['not reproduced']} did not, and {c['inconclusive']} are inconclusive (95% "
        "interval too wide to decide)."
    )
    return "\n".join(lines)


def table3_findings(results: pd.DataFrame) -> str:
    """Table 3's prose: each row's cells against the paper, and the verdict counts."""
    return "**Read from the table.**\n\n" + _table_prose(
        table3(results), lambda k: f"`{k[0]}`, {LOSS_NAMES.get(k[1], k[1])}"
    )


def findings(results: pd.DataFrame) -> dict[str, str]:
    """Notebook 04's prose, as Markdown rendered from the committed records."""
    t3, t4 = table3(results), table4(results)
    claims, split = claims_table(results), split_table(results)
    out = {
        "table3": table3_findings(results),
        "table4": "**Read from the table.**\n\n"
        + _table_prose(t4, lambda k: f"`{k[0]}`, {k[1]} rotation, {k[2]}"),
    }
    counts = claims["verdict"].value_counts()
    named = []
    for word in ("supported", "contradicted"):
        hits = claims[claims["verdict"] == word]
        groups = hits.groupby(["claim", "preset"], sort=False)["task"].apply(", ".join)
        items = [f"{claim} (`{preset}`: {tasks})" for (claim, preset), tasks in groups.items()]
        named.append(f"*{word.capitalize()}:* " + ("; ".join(items) if items else "none") + ".")
    out["claims"] = (
        f"Of the {len(claims)} claim tests, {counts.get('supported', 0)} are supported, "
        f"{counts.get('contradicted', 0)} contradicted and {counts.get('undecided', 0)} "
        "undecided (the 95% interval of the difference contains zero).\n\n" + "\n\n".join(named)
    )
    rows = []
    for (preset, task), g in split.groupby(["preset", "task"], sort=False):
        by = g.set_index("split")
        rows.append(
            f"`{preset}` {TASK_TITLES[task]}: random {by.loc['random', 'mean']:.2f} "
            f"(test strings in train: {by.loc['random', 'test_in_train']:.1%}) → disjoint "
            f"{by.loc['disjoint', 'mean']:.2f}"
        )
    out["split"] = "**Read from the table.** " + "; ".join(rows) + "."
    # Table 3's focal row is Table 4's full model ("+norm", with rotation): count it once.
    ce_rows = t3[t3.index.get_level_values("loss") == "ce"]
    c3, c4 = _verdict_counts(ce_rows), _verdict_counts(t4)
    total = {k: c3[k] + c4[k] for k in c3}
    out["summary"] = (
        f"Across Tables 3 and 4, {total['reproduced']} of the {sum(total.values())} distinct cells with a "
        f"paper number reproduced, {total['not reproduced']} did not and "
        f"{total['inconclusive']} are inconclusive at {int(results['seed'].nunique())} seeds; "
        f"{counts.get('supported', 0)} of the paper's {len(claims)} ablation claim tests are "
        "supported by our runs."
    )
    return out
