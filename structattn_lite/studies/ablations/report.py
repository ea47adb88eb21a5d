"""Tables 3 and 4 from run records: ours (mean +- sd over seeds) beside the paper, a verdict.

The committed records are ``data/results/csp_ablations.csv`` (one row per run, with its
config columns); ``load_results`` reads them, ``table3``/``table4`` summarize, ``style``
renders a pandas Styler, ``save_table`` writes it to ``figures/`` (HTML and PNG/PDF), and
``grid_caption`` says which grid a table came from.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd

from structattn_lite.config import figures_dir, results_dir
from structattn_lite.studies.ablations.experiment import (
    METRIC,
    PAPER_TABLE3,
    PAPER_TABLE4,
    TASKS,
    claim_verdict,
    verdict,
)

ABLATIONS_CSV = "csp_ablations.csv"
TASK_TITLES = {"parity": "parity (acc)", "mod3": "mod-3 (acc)", "dyck1": "parentheses (F1)"}


def load_results(name: str = ABLATIONS_CSV, root: Path | None = None) -> pd.DataFrame:
    path = (root or results_dir()) / name
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
            row[(task, "verdict")] = verdict(mean, sd, paper)
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
    """Each ablation claim of the paper, tested on our means, per preset and task."""
    t4, t3 = table4(df), table3(df)
    rows = []
    for preset in t4.index.get_level_values("preset").unique():
        for claim, tasks, a, b in CLAIMS:
            for task in tasks:
                try:
                    va, vb = (
                        t4.loc[(preset, *a), (task, "ours")],
                        t4.loc[(preset, *b), (task, "ours")],
                    )
                except KeyError:
                    continue
                rows.append({"preset": preset, "claim": claim, "task": task, "A": va, "B": vb,
                             "verdict": claim_verdict(va, vb)})  # fmt: skip
        for task in ("mod3", "dyck1"):
            try:
                va, vb = (
                    t3.loc[(preset, "focal"), (task, "ours")],
                    t3.loc[(preset, "ce"), (task, "ours")],
                )
            except KeyError:
                continue
            rows.append({"preset": preset, "claim": "focal loss beats cross-entropy", "task": task,
                         "A": va, "B": vb, "verdict": claim_verdict(va, vb)})  # fmt: skip
    return pd.DataFrame(rows)


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """Merge ours and sd into one 'mean +- sd' string column per task."""
    out = pd.DataFrame(index=table.index)
    for task in TASKS:
        if (task, "ours") not in table:
            continue
        ours, sd, seeds = table[(task, "ours")], table[(task, "sd")], table[(task, "seeds")]
        out[(TASK_TITLES[task], "ours")] = [
            _mean_sd(m, s, k) for m, s, k in zip(ours, sd, seeds, strict=True)
        ]
        out[(TASK_TITLES[task], "paper")] = [
            "-" if math.isnan(p) else f"{p:.2f}" for p in table[(task, "paper")]
        ]
        out[(TASK_TITLES[task], "verdict")] = table[(task, "verdict")]
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    return out


def _mean_sd(mean: float, sd: float, seeds: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.2f} (1 seed)" if seeds < 2 else f"{mean:.2f} ± {sd:.2f}"


def _verdict_color(value) -> str:
    text = str(value)
    if text.startswith("reproduced") or text == "supported":
        return "background-color: #d9f2d9"
    if text.startswith("not reproduced") or text == "contradicted":
        return "background-color: #f8d7da"
    if text.startswith("not supported"):
        return "background-color: #fff3cd"
    return ""


def style(display: pd.DataFrame, caption: str = ""):
    """A pandas Styler that colours the verdict cells."""
    verdict_cols = [
        c for c in display.columns if (c[-1] if isinstance(c, tuple) else c) == "verdict"
    ]
    return display.style.map(_verdict_color, subset=verdict_cols).set_caption(caption)


def save_table(display: pd.DataFrame, notebook: str, name: str, caption: str = "") -> list[Path]:
    """Write the table to figures/ as HTML (styled) and PNG/PDF (a matplotlib table)."""
    import matplotlib.pyplot as plt

    from structattn_lite.report import save_figure

    out = figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    html = out / f"{notebook}_{name}.html"
    html.write_text(style(display, caption).set_uuid(f"{notebook}_{name}").to_html())  # stable ids
    flat = display.reset_index()
    flat.columns = [
        " ".join(str(p) for p in c if p) if isinstance(c, tuple) else str(c) for c in flat.columns
    ]
    fig, ax = plt.subplots(figsize=(min(2 + 1.5 * flat.shape[1], 30), 0.9 + 0.22 * len(flat)))
    ax.axis("off")
    text = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row] for row in flat.values]
    tab = ax.table(
        cellText=text,
        colLabels=list(flat.columns),
        loc="center",
        cellLoc="center",
    )
    tab.auto_set_font_size(False)
    tab.set_fontsize(7)
    tab.auto_set_column_width(list(range(flat.shape[1])))
    for (r, c), cell in tab.get_celld().items():
        if r > 0:
            color = _verdict_color(flat.iat[r - 1, c]).replace("background-color: ", "")
            if color:
                cell.set_facecolor(color)
    ax.set_title(textwrap.fill(caption, 160), fontsize=7)
    paths = save_figure(fig, notebook, name)
    plt.close(fig)
    return [html, *paths]


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
    stop = f", early stop after {int(hold[0])} epochs at 100% prefix accuracy" if len(hold) else ""
    return (
        f"grid '{df['grid'].iloc[0]}': {len(df)} runs in {len(per_cell)} cells, {spread} seeds per cell "
        f"(seeds {seeds}); up to "
        f"{int(df['epochs'].max())} epochs (mean run {df['epochs_run'].mean():.0f}){stop}; "
        f"n={sorted(df['n'].unique().tolist())}, d_model={int(df['d_model'].iloc[0])}, "
        f"{int(df['n_layers'].iloc[0])} layers, {df['labels'].iloc[0]} labels, lr={df['lr'].iloc[0]}, "
        "scored on the whole string (last position)"
    )
