"""Figures for the attention notebook (02_attention_variants).

Every plot builds a ``matplotlib.figure.Figure`` directly (no pyplot state), so a cell
can end with ``fig`` and ``structattn_lite.plots.save_figure`` writes it.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from structattn_lite.names import display_name
from structattn_lite.records import RunRecord
from structattn_lite.report import figure_size, model_style
from structattn_lite.studies.attention.grids import MAIN_VARIANTS
from structattn_lite.studies.attention.tables import float32_finals, rate_sweep, variant_label


def in_grid_order(variants) -> list[str]:
    """The distinct ``variants`` (labels) in the order the grids list them
    (``grids.MAIN_VARIANTS``: dot, dense, then the matroidal sizes), so a panel keeps its
    place however the records were exported; any other label follows, as met."""
    known = [variant_label({"kind": kind, "m": factor, "d_model": 1, "n_heads": 1,
                            "shared_qk": shared}) for kind, factor, shared in MAIN_VARIANTS]  # fmt: skip
    met = list(dict.fromkeys(variants))
    return sorted(met, key=lambda v: known.index(v) if v in known else len(known) + met.index(v))


def _message(text: str) -> Figure:
    """A small figure that says why there is nothing to draw."""
    fig = Figure(figsize=figure_size(1, height=2))
    fig.subplots().text(0.5, 0.5, text, ha="center")
    return fig


def _history_frame(records: list[RunRecord], metric: str) -> pd.DataFrame:
    rows = []
    for r in records:
        if r.status != "ok" or metric not in r.history:
            continue
        h = r.history
        rows.append(pd.DataFrame({"variant": r.extra["variant"], "seed": r.seed,
                                  "step": h["step"], metric: h[metric]}))  # fmt: skip
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def plot_learning_curves(
    records: list[RunRecord], metric: str = "val_bpc", floors: dict | None = None
) -> Figure:
    """One panel per variant (every seed thin, the mean over seeds bold), and a last panel
    with each variant's mean minus dot product's at the same step, so no curve hides
    another. ``floors`` (name -> bpc) draws the n-gram floors as dotted lines."""
    frame = _history_frame(records, metric)
    if frame.empty:
        return _message("no finished runs")
    variants = in_grid_order(frame["variant"])
    panels = len(variants) + 1
    rows = -(-panels // 4)  # at most 4 a row, and the rows as evenly filled as they go
    cols = -(-panels // rows)
    fig = Figure(figsize=figure_size(2, height=2.2 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True)).ravel()
    means = frame.groupby(["variant", "step"])[metric].mean()
    # one scale for every variant, so panels compare by eye, set from every curve and
    # floor (sharing the first panel's limits clipped curves that ended below it)
    low = min([frame[metric].min(), *(floors or {}).values()])
    high = max([frame[metric].max(), *(floors or {}).values()])
    pad = 0.04 * (high - low or 1)
    for k, (ax, v) in enumerate(zip(axes, variants, strict=False)):
        style = model_style(v)
        for _, g in frame[frame["variant"] == v].groupby("seed"):
            ax.plot(g["step"], g[metric], color=style["color"], lw=0.6, alpha=0.5)
        ax.plot(means[v].index, means[v].values, color=style["color"], lw=2)
        title = textwrap.fill(style["name"], 24)  # two lines, not into the next title
        ax.set(title=title, xlabel="training step", ylim=(low - pad, high + pad))
        for name, value in (floors or {}).items():
            ax.axhline(value, color="grey", ls=":", lw=0.8)
            ax.text(ax.get_xlim()[0], value, f" {name}", fontsize=6, va="bottom", color="grey")
        if k % cols == 0:  # the scale is shared: label it once per row
            ax.set_ylabel(display_name(metric))
        else:
            ax.tick_params(labelleft=False)
    diff_ax = axes[len(variants)]
    if "dot" in variants:
        for v in variants:
            if v != "dot":
                d = (means[v] - means["dot"]).dropna()
                style = model_style(v)
                diff_ax.plot(d.index, d.values, color=style["color"], lw=1.5, label=style["name"])
        diff_ax.axhline(0, color="black", lw=0.8)
        diff_ax.set(title=f"difference to {model_style('dot')['name']}\n(mean; below 0: better)",
                    xlabel="training step", ylabel=f"variant minus {model_style('dot')['name']}")  # fmt: skip
        # beside the figure, not over the curves: the gaps move from panel to panel
        fig.legend(*diff_ax.get_legend_handles_labels(), loc="outside lower center",
                   ncols=3, fontsize=7, title="each minus dot product:", title_fontsize=7)  # fmt: skip
    for ax in axes[panels:]:
        ax.set_axis_off()
    for ax in axes[max(0, panels - cols) : (rows - 1) * cols]:  # nothing below to show the steps
        ax.tick_params(labelbottom=True)
    return fig


def plot_fraction_sweep(summary: pd.DataFrame, rates: str | None = None) -> Figure:
    """Test bpc against the fraction of training text (mean and 95% t interval);
    ``rates`` says in the title which rates the runs were trained at."""
    from structattn_lite.stats import t_half_width

    sub = float32_finals(summary)
    sub = sub[sub["variant"].isin(sub[sub["fraction"] < 1]["variant"].unique())]
    fig = Figure(figsize=figure_size(1, height=2.6), layout="constrained")
    ax = fig.subplots()
    for variant, g in sub.groupby("variant", sort=False):
        agg = g.groupby("fraction")["test_bpc"].agg(["mean", "std", "count"])
        half = [t_half_width(sd, n) for sd, n in zip(agg["std"], agg["count"], strict=True)]
        style = model_style(variant)
        ax.errorbar(agg.index, agg["mean"], yerr=np.nan_to_num(half), marker=style["marker"],
                    color=style["color"], capsize=3, label=style["name"])  # fmt: skip
    ax.set_xscale("log")
    title = "low-data sweep (bars: 95% t over seeds)"
    ax.set(xlabel="fraction of the training text used", ylabel="test bits per character",
           title=f"{title}\n{rates}" if rates else title)  # fmt: skip
    ax.legend(fontsize=8)
    return fig


def plot_rate_sweeps(records: list[RunRecord], ran_at: dict[str, float] | None = None) -> Figure:
    """One panel per language-model variant: the mean over seeds of each tuning run's best
    validation bpc against its peak rate, a line per tuning schedule (its steps and seeds;
    a ring on the rate it picks), and a dotted line at the rate the final runs trained at
    (``ran_at``: variant -> rate). Where the lines' rings differ, the schedule decided."""
    text = [r for r in records if r.config["dataset"] not in ("digits", "cifar10")]
    if not text:
        return _message("no tuning runs")
    frames = []
    for steps in sorted({r.config["recipe"]["max_steps"] for r in text}):
        sweep = rate_sweep([r for r in text if r.config["recipe"]["max_steps"] == steps])
        frames.append(sweep.assign(steps=steps, variant=sweep["key"].str.split("|").str[1]))
    frame = pd.concat(frames, ignore_index=True)
    variants = in_grid_order(variant_label(r.config) for r in text)
    # one line style per schedule, named once for the whole figure (a legend in every
    # panel covered its curves); a point with fewer seeds than its schedule says how many
    schedules = frame.groupby("steps")["seeds"].max()
    dashes = dict(zip(schedules.index, ("--", "-", ":"), strict=False))
    cols = min(4, len(variants))
    rows = -(-len(variants) // cols)
    fig = Figure(figsize=figure_size(2, height=2.1 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True)).ravel()
    for ax, variant in zip(axes, variants, strict=False):
        style = model_style(variant)
        for steps, g in frame[frame["variant"] == variant].groupby("steps"):
            g = g.sort_values("lr")
            ax.plot(g["lr"], g["best"], ls=dashes[steps], marker=style["marker"],
                    color=style["color"])  # fmt: skip
            for _, cell in g[g["seeds"] < schedules[steps]].iterrows():
                ax.annotate(f"{cell['seeds']} of {schedules[steps]}", (cell["lr"], cell["best"]),
                            xytext=(0, 5), textcoords="offset points", ha="center", fontsize=5)  # fmt: skip
            best = g.loc[g["best"].idxmin()]
            ax.plot(best["lr"], best["best"], "o", ms=11, mfc="none", color=style["color"])
        if ran_at and variant in ran_at:
            ax.axvline(ran_at[variant], color="grey", ls=":", lw=0.9)
        ax.set_xscale("log", base=2)
        rates = sorted(frame["lr"].unique())
        ax.set_xticks(rates, [f"{lr:g}" for lr in rates], fontsize=6, minor=False)
        ax.set(title=textwrap.fill(style["name"], 24), xlabel="peak learning rate")
    for ax in axes[::cols]:
        ax.set_ylabel("best validation bpc\n(mean over seeds)")
    for ax in axes[len(variants) :]:
        ax.set_axis_off()
    handles = [Line2D([], [], color="grey", ls=dashes[steps], label=f"{steps:,} steps, "
                      f"{seeds} seed{'s' * (seeds > 1)}") for steps, seeds in schedules.items()]  # fmt: skip
    spare = axes[len(variants)] if len(variants) < len(axes) else None
    if spare is not None:  # the empty panel holds the key
        spare.legend(handles=handles, loc="center", fontsize=7, title="tuning schedule",
                     title_fontsize=7, frameon=False)  # fmt: skip
    else:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=7)
    fig.suptitle("tuning: ring = the rate each schedule picks; dotted = the finals' rate",
                 fontsize=9)  # fmt: skip
    return fig


def plot_grad_norms(records: list[RunRecord], group: str = "total") -> Figure:
    """Per-step gradient norms before clipping (one group: "total", a layer, "metric"),
    first seed of each variant; the warmup is shaded."""
    recs = [r for r in records if r.status == "ok" and group in r.extra.get("grad_norms", {})]
    fig = Figure(figsize=figure_size(2, height=2.6), layout="constrained")
    ax = fig.subplots()
    done = set()
    for r in recs:
        v = r.extra["variant"]
        if v in done:
            continue
        done.add(v)
        norms = r.extra["grad_norms"][group]
        stride = max(1, r.extra["steps"] // max(len(norms), 1))
        style = model_style(v)
        ax.plot(np.arange(len(norms)) * stride, norms, color=style["color"], lw=0.8,
                label=style["name"])  # fmt: skip
    if recs:
        ax.axvspan(0, recs[0].config["recipe"]["warmup_steps"], color="grey", alpha=0.15)
    ax.set(xlabel="training step", ylabel=f"gradient norm before clipping ({group})",
           yscale="log", title="gradient norms (shaded: warmup, left out of the variance)")  # fmt: skip
    fig.legend(loc="outside lower center", ncols=4, fontsize=7)  # not over the norms
    return fig


def plot_learned_weights(record: RunRecord) -> Figure:
    """l = softplus(theta) per layer (heads x columns), or dense M's eigenvalues per head."""
    weights = [np.asarray(w) for w in record.extra.get("weights", [])]
    fig = Figure(figsize=figure_size(2, height=2.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, max(len(weights), 1)))
    if not weights:
        axes[0].text(0.5, 0.5, "dot-product attention: no metric weights", ha="center")
        axes[0].set_axis_off()
        return fig
    what = "l_e" if record.config["kind"] == "matroidal" else "eigenvalues of M"
    for layer, (ax, W) in enumerate(zip(axes, weights, strict=True)):
        im = ax.imshow(W, aspect="auto", cmap="viridis")
        ax.set(xlabel="support column e" if what == "l_e" else "eigenvalue index", ylabel="head",
               title=f"layer {layer}: {what}")  # fmt: skip
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"{model_style(record.extra['variant'])['name']} (seed {record.seed})")
    return fig


def plot_weight_histograms(records: list[RunRecord]) -> Figure:
    """Distribution of learned l_e across heads and layers, per matroidal variant."""
    recs = [r for r in records if r.config["kind"] == "matroidal" and r.extra.get("weights")]
    fig = Figure(figsize=figure_size(1, height=2.4), layout="constrained")
    ax = fig.subplots()
    for v in in_grid_order(r.extra["variant"] for r in recs):
        vals = np.concatenate(
            [np.ravel(w) for r in recs if r.extra["variant"] == v for w in r.extra["weights"]]
        )
        style = model_style(v)
        ax.hist(vals, bins=40, histtype="step", color=style["color"], label=style["name"])
    ax.set(xlabel=r"learned weight $\ell_e = \mathrm{softplus}(\theta_e)$", ylabel="columns",
           title="learned matroidal weights")  # fmt: skip
    fig.legend(loc="outside lower center", fontsize=7)  # below the axes, not over the bars
    return fig


def plot_attention_map(record: RunRecord, layer: int = 0, head: int = 0) -> Figure:
    """Softmax attention of one layer and head on the fixed validation window."""
    A = np.asarray(record.extra["maps"][layer][head])
    text = record.extra["data"].get("map_text", "")[: A.shape[0]]
    fig = Figure(figsize=figure_size(1, height=3.2), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(A, cmap="magma", vmin=0, vmax=1)
    if len(text) == A.shape[0]:
        labels = [t if t != "\n" else "⏎" for t in text]
        ax.set_xticks(range(len(labels)), labels, fontsize=5)
        ax.set_yticks(range(len(labels)), labels, fontsize=5)
    name = model_style(record.extra["variant"])["name"]
    ax.set(xlabel="key", ylabel="query", title=f"{name}, seed {record.seed}\nlayer {layer}, head {head}")  # fmt: skip
    fig.colorbar(im, ax=ax, fraction=0.046)
    return fig


def plot_pruning(records: list[RunRecord]) -> Figure:
    """Validation bpc after dropping columns with l_e < delta and a short fine-tune,
    against the share of support columns kept."""
    fig = Figure(figsize=figure_size(1, height=2.6), layout="constrained")
    ax = fig.subplots()
    for r in records:
        p = pd.DataFrame(r.extra.get("pruning", []))
        if len(p) and r.config["data_fraction"] == 1.0 and "val_bpc" in p:
            style = model_style(r.extra["variant"])
            ax.plot(p["kept"], p["val_bpc"], color=style["color"], marker=style["marker"],
                    alpha=0.7, label=f"{style['name']}, seed {r.seed}")  # fmt: skip
    ax.set(xlabel="share of support columns kept", ylabel="validation bits per character",
           title="pruning columns with $\\ell_e < \\delta$,\nthen a short fine-tune")  # fmt: skip
    fig.legend(loc="outside lower center", ncols=2, fontsize=6)  # below, not over the curves
    return fig
