"""Figures and the run browser for the attention notebook (02_attention_variants).

Every plot builds a ``matplotlib.figure.Figure`` directly (no pyplot state), so a cell
can end with ``fig`` and ``structattn_lite.plots.save_figure`` writes it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from structattn_lite.runs import RunRecord

NOTEBOOK = "02_attention"


def slug(name: str) -> str:
    """A file-name-safe form of a variant label: "matroidal m=2d (sep q/k)" -> "matroidal_m2d_sep_qk"."""
    return "_".join("".join(ch for ch in name if ch.isalnum() or ch == " ").split())


def _palette(variants: list[str]) -> dict[str, tuple]:
    return dict(zip(variants, sns.color_palette("tab10", len(variants)), strict=False))


def _variants(records: list[RunRecord]) -> list[str]:
    return list(dict.fromkeys(r.extra["variant"] for r in records))


def plot_learning_curves(
    records: list[RunRecord], fractions: tuple[float, ...] | None = None
) -> Figure:
    """Validation (solid) and training (dashed) bpc against steps, one panel per data fraction.

    Training bpc is the mean over the steps since the previous evaluation, so it lags;
    with little text the validation curve turning up while training falls is overfitting.
    """
    fractions = fractions or tuple(
        sorted({r.config["data_fraction"] for r in records}, reverse=True)
    )
    colors = _palette(_variants(records))
    fig = Figure(figsize=(4.5 * len(fractions), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(fractions), sharey=True))
    for ax, fraction in zip(axes, fractions, strict=True):
        recs = [r for r in records if r.config["data_fraction"] == fraction and r.status == "ok"]
        seen = set()
        for r in recs:
            h, v = r.history, r.extra["variant"]
            ax.plot(
                h["step"], h["val_bpc"], color=colors[v], lw=1.2, label=None if v in seen else v
            )
            ax.plot(h["step"], h["train_bpc"], color=colors[v], lw=0.8, ls="--")
            seen.add(v)
        ax.set(xlabel="step", title=f"data fraction {fraction:g}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("bits per character (solid: validation, dashed: train)")
    return fig


def plot_fraction_sweep(summary: pd.DataFrame) -> Figure:
    """Final validation bpc against the fraction of training text (mean ± sd over seeds)."""
    kinds = summary[summary["fraction"] < 1]["variant"].unique()
    sub = summary[summary["variant"].isin(kinds)]
    fig = Figure(figsize=(5.5, 4), layout="constrained")
    ax = fig.subplots()
    for variant, g in sub.groupby("variant", sort=False):
        stats = g.groupby("fraction")["val_bpc"].agg(["mean", "std"]).fillna(0.0)
        ax.errorbar(
            stats.index, stats["mean"], yerr=stats["std"], marker="o", capsize=3, label=variant
        )
    ax.set_xscale("log")
    ax.set(
        xlabel="fraction of the training text", ylabel="validation bpc", title="data-fraction sweep"
    )
    ax.legend(fontsize=8)
    return fig


def plot_grad_norms(records: list[RunRecord], fraction: float = 1.0) -> Figure:
    """Per-step gradient norms (before clipping), first seed of each variant."""
    recs = [r for r in records if r.config["data_fraction"] == fraction]
    colors = _palette(_variants(recs))
    fig = Figure(figsize=(10, 3.5), layout="constrained")
    ax = fig.subplots()
    done = set()
    for r in recs:
        v = r.extra["variant"]
        if v in done:
            continue
        done.add(v)
        ax.plot(r.extra["step_grad_norms"], color=colors[v], lw=0.8, label=v)
    ax.set(xlabel="step", ylabel="gradient norm (pre-clip)", yscale="log", title="gradient norms")
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_learned_weights(record: RunRecord) -> Figure:
    """l = softplus(theta) per layer (heads x columns), or dense M's eigenvalues per head."""
    weights = [np.asarray(w) for w in record.extra.get("weights", [])]
    fig = Figure(figsize=(4.5 * max(len(weights), 1), 3.2), layout="constrained")
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
    fig.suptitle(record.extra["variant"] + f" (seed {record.seed})", fontsize=10)
    return fig


def plot_weight_histograms(records: list[RunRecord]) -> Figure:
    """Distribution of learned l_e across heads and layers, per matroidal variant."""
    recs = [r for r in records if r.config["kind"] == "matroidal" and r.extra.get("weights")]
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.subplots()
    for v in _variants(recs):
        vals = np.concatenate(
            [np.ravel(w) for r in recs if r.extra["variant"] == v for w in r.extra["weights"]]
        )
        ax.hist(vals, bins=40, histtype="step", label=v)
    ax.set(xlabel="l_e = softplus(theta_e)", ylabel="columns", title="learned matroidal weights")
    ax.legend(fontsize=8)
    return fig


def plot_attention_map(record: RunRecord, layer: int = 0, head: int = 0) -> Figure:
    """Softmax attention of one layer and head on the fixed validation window."""
    A = np.asarray(record.extra["maps"][layer][head])
    text = record.extra["data"].get("map_text", "")[: A.shape[0]]
    fig = Figure(figsize=(5, 4.5), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(A, cmap="magma", vmin=0, vmax=1)
    if len(text) == A.shape[0]:
        labels = [t if t != "\n" else "⏎" for t in text]
        ax.set_xticks(range(len(labels)), labels, fontsize=5)
        ax.set_yticks(range(len(labels)), labels, fontsize=5)
    ax.set(
        xlabel="key",
        ylabel="query",
        title=f"{record.extra['variant']} s{record.seed}: layer {layer}, head {head}",
    )
    fig.colorbar(im, ax=ax, fraction=0.046)
    return fig


def plot_pruning(records: list[RunRecord]) -> Figure:
    """Validation bpc after dropping columns with l_e < delta, against the fraction kept."""
    fig = Figure(figsize=(5.5, 4), layout="constrained")
    ax = fig.subplots()
    for r in records:
        p = pd.DataFrame(r.extra.get("pruning", []))
        if len(p) and r.config["data_fraction"] == 1.0:
            ax.plot(p["kept"], p["val_bpc"], marker="o", label=f"{r.extra['variant']} s{r.seed}")
    ax.set(
        xlabel="fraction of support columns kept",
        ylabel="validation bpc",
        title="pruning columns with l_e < delta (delta: a quantile of l)",
    )
    ax.legend(fontsize=7)
    return fig


def run_browser(records: list[RunRecord]):
    """Widget: pick a run, a layer and a head; see its curve, attention map and weights."""
    import ipywidgets as w
    from IPython.display import display

    ok = [r for r in records if r.status == "ok" and r.extra.get("maps")]
    names = [f"{r.extra['variant']} | f={r.config['data_fraction']:g} | seed {r.seed}" for r in ok]
    run = w.Dropdown(options=list(zip(names, range(len(ok)), strict=True)), description="run")
    layer = w.IntSlider(
        0, 0, max(len(ok[0].extra["maps"]) - 1, 0) if ok else 0, description="layer"
    )
    head = w.IntSlider(
        0, 0, max(len(ok[0].extra["maps"][0]) - 1, 0) if ok else 0, description="head"
    )
    out = w.Output()

    def show(*_):
        out.clear_output(wait=True)
        if not ok:
            return
        r = ok[run.value]
        with out:
            display(plot_attention_map(r, layer.value, head.value))
            display(plot_learned_weights(r))
            cols = [
                c
                for c in ("step", "train_bpc", "val_bpc", "fast_ref_gap", "neg_sq_dist")
                if c in r.history
            ]
            display(r.history[cols].round(4))

    for control in (run, layer, head):
        control.observe(show, names="value")
    show()
    return w.VBox([w.HBox([run, layer, head]), out])
