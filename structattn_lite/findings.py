"""The README's "What we found": the verdicts counted by source, the claims ledger, four
figures.

Everything here is rendered from ``data/results`` through ``claims.ledger()``.
``structattn findings --write`` rewrites ``data/results/claims.csv``, the four figures
(``figures/findings_*.png``) and the README section between its markers; tests fail when
any of them differs from what the committed records give.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from structattn_lite import claims, stats
from structattn_lite.claims.rows import diverged_seeds
from structattn_lite.config import figures_dir, repo_root
from structattn_lite.report import MODEL_STYLE, VERDICT_COLOR, figure_size, save_figure

START, END = "<!-- findings:start -->", "<!-- findings:end -->"

GROUPS = {  # who made the claims -> the ledger ids' prefixes
    "the CSP paper (Tables 3 and 4, grokking gaps, gradient-norm spikes)": (
        "table3", "table4", "gap", "spike"),
    "the authors' README length table (CSP-Vanilla)": ("authors",),
    "the wider field (Grazzi et al.; the Chomsky-hierarchy paper) on parity at length": (
        "grazzi", "chomsky"),
    "the attention card's hypothesis": ("attention",),
}  # fmt: skip
FIGURES = ("findings_ledger", "findings_attention", "findings_grokking", "findings_length")


def _group(table: pd.DataFrame, prefixes: tuple[str, ...]) -> pd.DataFrame:
    return table[table["id"].str.split("/").str[0].isin(prefixes)]


def verdict_counts(table: pd.DataFrame) -> pd.DataFrame:
    """One row per source of claims and one for all of them: how many claims, and how
    many of each verdict."""
    groups = {words: _group(table, prefixes) for words, prefixes in GROUPS.items()}
    rows = [{"claims from": words, "claims": len(g), **claims.counts(g)}
            for words, g in {**groups, "all sources": table}.items() if len(g)]  # fmt: skip
    return pd.DataFrame(rows)


def ledger_figure(table: pd.DataFrame):
    """Ours (mean and 95% interval over seeds) against the published number ± margin,
    one line per claim with a published number, coloured by verdict. Every number here is
    an accuracy or F1, so intervals and margins are drawn inside [0, 1]. A row whose seeds
    diverged has no value of ours: its red x sits in a column of its own on the right,
    "k of n", never on the value axis (where it would read as "ours = published")."""
    rows = table[table["published"].notna() & ~table["id"].str.startswith("gap/")]
    rows = rows.iloc[::-1]
    height = 0.13 * len(rows) + 0.8
    fig, (ax, side) = plt.subplots(1, 2, sharey=True, figsize=figure_size(2, height=height),
                                   gridspec_kw={"width_ratios": (6, 1), "wspace": 0.04})  # fmt: skip
    y = list(range(len(rows)))
    margin = rows["rule"].str.extract(r"±([\d.]+)")[0].astype(float)
    band_low = (rows["published"] - margin).clip(0, 1)
    band_high = (rows["published"] + margin).clip(0, 1)
    ax.barh(y, band_high - band_low, left=band_low, height=0.6, color="#dddddd",
            label="published ± margin")  # fmt: skip
    ours = rows["ours"]
    low, high = rows["low"].fillna(ours).clip(0, 1), rows["high"].fillna(ours).clip(0, 1)
    for verdict, color in VERDICT_COLOR.items():
        pick = (rows["verdict"] == verdict).to_numpy() & ours.notna().to_numpy()
        yy = [i for i, p in zip(y, pick, strict=True) if p]
        ax.errorbar(ours[pick], yy, xerr=[ours[pick] - low[pick], high[pick] - ours[pick]],
                    fmt="o", color=color, ms=3, lw=1, label=f"ours: {verdict}")  # fmt: skip
    diverged = [diverged_seeds(r) for r in rows["reason"]]
    for yy, counts, value in zip(y, diverged, ours, strict=True):
        if counts is None:
            continue
        k, n = counts
        unrun = pd.isna(value)  # no finite seed at all: the x is the row's only mark
        side.scatter([0.12], [yy], marker="x", color=VERDICT_COLOR[stats.NOT_REPRODUCED],
                     s=12 if unrun else 6, alpha=1 if unrun else 0.5)  # fmt: skip
        side.text(0.3, yy, f"{k} of {n}", va="center", fontsize=5.5)
    side.set_xlim(0, 1)
    side.set_xticks([])
    side.set_title("seeds diverged", fontsize=6)
    side.spines[["left", "bottom"]].set_visible(False)
    side.tick_params(left=False)
    ax.set_yticks(y, [_short(i) for i in rows["id"]], fontsize=5.5)
    ax.set_xlabel("accuracy or F1 (published beside ours)")
    ax.set_xlim(-0.03, 1.03)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(plt.Line2D([], [], marker="x", ls="", color=VERDICT_COLOR[stats.NOT_REPRODUCED]))
    labels.append("diverged (non-finite loss): no value of ours, right column")
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.55, -0.6 / height),
              ncol=3, fontsize=6)  # fmt: skip
    ax.set_title("Every claim with a published number: ours against it")
    return fig


# The attention rows that compare bits per character, by how the rule reads them: a
# baseline minus matroidal that must stay above -margin ("not worse"), or a difference or
# interaction that must lie below 0 (the claim's side).
ATTENTION_PANELS = {  # title -> the ids it holds (a regular expression)
    "not worse: baseline minus matroidal (bpc), above the margin":
        r"attention/((long/)?not_worse/.*|low_parameters/d\d+/.*|stable/bfloat16|pruning)",
    "below 0: interaction or difference (bpc)":
        r"attention/(low_data/.*|low_parameters(/dot)?|best_m)",
}  # fmt: skip


def attention_figure(table: pd.DataFrame):
    """The attention card's bits-per-character rows: each difference with its 95%
    interval, coloured by verdict, against the side the claim needs; rows with no runs yet
    are named and left empty."""
    picked = {title: table[table["id"].str.fullmatch(ids)]
              for title, ids in ATTENTION_PANELS.items()}  # fmt: skip
    heights = [len(rows) for rows in picked.values()]
    fig, axes = plt.subplots(2, 1, figsize=figure_size(2, 0.2 * sum(heights) + 1.4),
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    for ax, (title, rows) in zip(axes, picked.items(), strict=True):
        rows = rows.iloc[::-1]
        y = list(range(len(rows)))
        if title.startswith("not worse"):
            ax.axvspan(-stats.BPC_MARGIN, 1, color="#dddddd")
        else:
            ax.axvspan(-1, 0, color="#dddddd")
        ax.axvline(0, color="#555555", lw=0.6)
        for yy, (_, r) in zip(y, rows.iterrows(), strict=True):
            if pd.isna(r["low"]):
                ax.text(0, yy, "no runs yet", fontsize=5.5, va="center", ha="center", color="0.4")
                continue
            color = VERDICT_COLOR[r["verdict"]]
            hollow = f"; {stats.UNTUNED} " in r["reason"]  # the tuning rule decided it
            ax.errorbar(r["ours"], yy, xerr=[[r["ours"] - r["low"]], [r["high"] - r["ours"]]],
                        fmt="o", ms=3, lw=1, color=color, mfc="white" if hollow else color)  # fmt: skip
        ax.set_yticks(y, [r.removeprefix("attention/").replace("/", " · ") for r in rows["id"]],
                      fontsize=5.5)  # fmt: skip
        ends = pd.concat([rows["low"], rows["high"]]).dropna().abs()
        reach = max(ends.max() if len(ends) else 0, stats.BPC_MARGIN) * 1.15
        ax.set_xlim(-reach, reach)
        ax.set_title(title, fontsize=7)
    axes[-1].set_xlabel("bits per character; dots coloured by verdict")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=v)
               for v, c in VERDICT_COLOR.items()]  # fmt: skip
    handles.append(plt.Line2D([], [], marker="o", ls="", color=VERDICT_COLOR[stats.UNDECIDED],
                              mfc="white", label="undecided: rates not tuned at this budget"))  # fmt: skip
    fig.legend(handles=handles, fontsize=6, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _short(ident: str) -> str:
    return ident.replace("authors_3bb9f71", "authors").replace("/", " · ")


GAP_LEVELS = {0.9: ":", 0.99: "--", 1.0: "-"}  # the levels a gap is read between
ZOOM = (0.95, 1.0)  # the lower panels: wide enough for 99% to stand clear of 100%


def grokking_figure():
    """The text's model at the paper's size: whole-string test accuracy per seed, over its
    whole range (top) and zoomed to the last 5% (bottom), where 99% and 100% are apart;
    the 90%, 99% and 100% levels are named in the legend, and each task's title says how
    many seeds ever reached 100%."""
    from matplotlib.lines import Line2D

    from structattn_lite.studies.grokking.experiment import committed_records

    records = [r for r in committed_records("gap") if r.config["preset"] == "paper"]
    tasks = list(claims.TASK_NAME)
    fig, axes = plt.subplots(2, 3, figsize=figure_size(2, height=3.6), sharex="col",
                             gridspec_kw={"height_ratios": (3, 2)})  # fmt: skip
    style = MODEL_STYLE["csp_paper"]
    for (top, zoom), task in zip(axes.T, tasks, strict=True):
        runs = [r for r in records if r.config["task"] == task and len(r.history)]
        for r in runs:
            h = r.history
            for ax in (top, zoom):
                ax.plot(h["epoch"], h[claims.GAP_METRIC], color=style["color"], lw=0.8,
                        alpha=0.8)  # fmt: skip
        for ax in (top, zoom):
            for level, ls in GAP_LEVELS.items():
                ax.axhline(level, color="#555555", ls=ls, lw=0.6)
        reached = sum(bool((r.history[claims.GAP_METRIC] >= 1.0).any()) for r in runs)
        top.set_title(f"{claims.TASK_NAME[task]}: {reached} of {len(runs)} seeds reach 100%")
        top.set_ylim(0.4, 1.02)
        zoom.set_ylim(ZOOM[0], ZOOM[1] + 0.002)
        zoom.set_xlabel("epoch")
    axes[0, 0].set_ylabel("whole-string\ntest accuracy")
    axes[1, 0].set_ylabel(f"zoomed to\n{ZOOM[0]:.0%}–{ZOOM[1]:.0%}")
    for ax in axes[:, 1:].ravel():
        ax.tick_params(labelleft=False)
    handles = [Line2D([], [], color=style["color"], lw=0.8, label="one seed")]
    handles += [Line2D([], [], color="#555555", ls=ls, lw=0.6, label=f"{level:.0%}")
                for level, ls in GAP_LEVELS.items()]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=6)
    fig.suptitle(f"{style['name']} at the paper's size, one line per seed (grid 'gap')")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


LENGTH_MODELS = ("lstm", "gru", "transformer", "diag_rnn", "diag_rnn_neg", "csp_paper")


def length_figure():
    """Parity far past the training length (16): whole-string accuracy, mean over seeds."""
    curves = pd.read_csv(claims.results_dir() / "length_generalization.csv.gz")
    parity = curves[curves["task"] == "parity"]
    fig, ax = plt.subplots(figsize=figure_size(1, height=2.3))
    for model in LENGTH_MODELS:
        at = parity[parity["model"] == model].groupby("length")["seq_acc"].mean()
        style = MODEL_STYLE[model]
        ax.plot(at.index, at.values, color=style["color"], marker=style["marker"], ms=2.5,
                markevery=4, lw=1, label=style["name"])  # fmt: skip
    ax.axvline(16, color="#555555", ls=":", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("string length (trained at 16)")
    ax.set_ylabel("whole-string accuracy, parity")
    ax.legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    return fig


def figures_markdown() -> str:
    return "\n".join(f"![{name}](figures/{name}.png)" for name in FIGURES)


def render(table: pd.DataFrame | None = None) -> str:
    """The section, from the ledger."""
    table = claims.ledger() if table is None else table
    rules = "\n".join(f"- **{name}**: {text}" for name, text in stats.RULES.items())
    return "\n\n".join([
        verdict_counts(table).to_markdown(index=False),
        figures_markdown(),
        "The rules, fixed before the runs were read (`structattn_lite/stats.py`), with "
        f"margins ±{stats.ACCURACY_MARGIN} on accuracy and F1, ±{stats.LENGTH_MARGIN} far past "
        f"the training length and ±{stats.BPC_MARGIN} bits per character, and at least "
        f"{stats.MIN_SEEDS} seeds:\n\n" + rules,
        claims.markdown(table),
        "Every row's protocol, grid, notebook section and command are in "
        "`data/results/claims.csv`.",
    ])  # fmt: skip


def readme_section(text: str | None = None) -> str:
    """The section currently in README.md (between the markers)."""
    text = text if text is not None else (repo_root() / "README.md").read_text()
    match = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not match:
        raise ValueError(f"README.md has no {START} ... {END} section")
    return match.group(1)


def write_figures(out: Path | None = None) -> list[Path]:
    """Render the four figures into ``out`` (default ``figures/``), PNG only."""
    drawn = {"findings_ledger": lambda: ledger_figure(claims.ledger()),
             "findings_attention": lambda: attention_figure(claims.ledger()),
             "findings_grokking": grokking_figure, "findings_length": length_figure}  # fmt: skip
    paths = []
    for name in FIGURES:
        fig = drawn[name]()
        paths.append(save_figure(fig, *name.split("_", 1), out=out or figures_dir(), pdf=False)[0])
        plt.close(fig)
    return paths


def write_readme() -> None:
    """Rewrite claims.csv, the four figures and the README section."""
    claims.write()
    write_figures()
    path = repo_root() / "README.md"
    text = path.read_text()
    old = readme_section(text)
    path.write_text(text.replace(f"{START}\n{old}\n{END}", f"{START}\n{render()}\n{END}"))
