"""The attention study's verdicts in plain words, from the run summary of ``report``.

Each verdict reads an interval over seeds and says which test it used: Welch's t for the
difference between two variants (``report.difference``), a paired t over seeds for the
same variant in two precisions. A verdict with too few seeds for an interval says so.
"""

from __future__ import annotations

import math

import pandas as pd

from structattn_lite.studies.attention.report import (
    difference,
    finals,
    float32_finals,
    main_finals,
    t_half_width,
)


def low_data_edges(summary: pd.DataFrame, structured: str = "matroidal m=2d") -> dict:
    """Per rival ("dense", "dot"): the verdict on the structured metric's edge (rival
    minus structured test bpc, 95% Welch t) at the smallest fraction against full data,
    and that edge per fraction; empty when only one fraction was run."""
    sub = float32_finals(summary)
    fractions = sorted(sub["fraction"].unique())
    if len(fractions) < 2:
        return {}
    out = {}
    for rival in ("dense", "dot"):
        res = {}
        for f in fractions:
            at = sub[sub["fraction"] == f]
            res[f] = difference(at[at["variant"] == structured]["test_bpc"],
                                at[at["variant"] == rival]["test_bpc"])  # fmt: skip
        out[rival] = (_edge_verdict(res[fractions[0]], res[fractions[-1]]), res)
    return out


def low_data_verdict(summary: pd.DataFrame, structured: str = "matroidal m=2d") -> str:
    """Did the structured metric help most when data is scarce? Plain words, from 95%
    Welch t intervals on the difference in test bpc (rival minus structured)."""
    edges = low_data_edges(summary, structured)
    if not edges:
        return "Only one data fraction was run: the low-data hypothesis was not tested."
    lines = []
    for rival, (verdict, res) in edges.items():
        parts = [f"fraction {f:g}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={n})"
                 for f, (d, lo, hi, n) in res.items()]  # fmt: skip
        lines.append(f"  {rival} minus {structured} (positive: {structured} better): "
                     + "; ".join(parts) + f" -> {verdict}")  # fmt: skip
    head = (
        "Low-data hypothesis (test bpc; 95% Welch t intervals over seeds), judged against "
        f"the dense metric (only M's parametrisation differs): {edges['dense'][0]}.\n"
        f"Against dot product (distance, shared projection and metric all differ at once): "
        f"{edges['dot'][0]}."
    )
    return head + "\n" + "\n".join(lines)


def precision_verdict(summary: pd.DataFrame) -> str:
    """What bfloat16 autocast costs each variant of the stability part: its test bpc minus
    the same variant's float32 run of the main part on the same seed (same initialisation
    and data order), as a 95% paired t interval over those seeds."""
    sub = finals(summary)
    sub = sub[sub["part"].isin(["main", "stability"]) & (sub["fraction"] == 1.0)]
    lines = []
    for variant in sub[sub["precision"] == "bfloat16"]["variant"].unique():
        runs = sub[sub["variant"] == variant].pivot_table(
            index="seed", columns="precision", values="test_bpc"
        )
        diffs = (runs["bfloat16"] - runs["float32"]).dropna()
        d, n = float(diffs.mean()), len(diffs)
        if n < 2:
            lines.append(f"{variant} {d:+.3f} (n={n}, no interval)")
            continue
        half = t_half_width(diffs)
        lo, hi = d - half, d + half
        word = "worse" if lo > 0 else "better" if hi < 0 else "no difference shown"
        lines.append(f"{variant} {d:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={n} seeds): {word}")
    if not lines:
        return "No bfloat16 runs: the stability part was not run."
    return ("bfloat16 autocast minus float32 on the same seed, test bpc (95% paired t over "
            "seeds; positive: bfloat16 worse): " + "; ".join(lines))  # fmt: skip


def _edge_verdict(low, full) -> str:
    d_low, lo_low, _, n = low
    if math.isnan(lo_low) or math.isnan(full[1]):
        return f"NOT TESTABLE (needs at least 2 seeds per variant and fraction; have {n})"
    if lo_low > 0 and d_low > full[0]:
        return "HELD (the edge at the smallest fraction excludes 0 and exceeds full data's)"
    if d_low > 0 and d_low > full[0]:
        return "INCONCLUSIVE (the edge leans that way but its interval includes 0)"
    return "DID NOT HOLD at this budget"


def contrasts(summary: pd.DataFrame) -> list[str]:
    """The comparisons the study was built for (test bpc differences of the main part,
    95% Welch t), one sentence each."""
    main = main_finals(summary)
    mean = main.groupby("variant", sort=False)["test_bpc"].mean()
    out = []
    for a, b, what in [
        ("matroidal m=2d", "dense", "matroidal vs dense, both with the seed's shared projection"),
        ("matroidal m=2d (sep q/k)", "matroidal m=2d", "separate q/k vs shared z (matroidal)"),
        ("dense (sep q/k)", "dense", "separate q/k vs shared z (dense)"),
        ("matroidal m=2d", "dot", "matroidal (shared z) vs dot"),
        ("matroidal m=2d (sep q/k)", "dot", "matroidal (separate q/k) vs dot"),
    ]:
        if a in mean.index and b in mean.index:
            d, lo, hi, k = difference(main[main["variant"] == a]["test_bpc"],
                                      main[main["variant"] == b]["test_bpc"])  # fmt: skip
            ci = (
                "no interval (one seed)"
                if math.isnan(lo)
                else f"95% Welch t [{lo:+.3f}, {hi:+.3f}]"
            )
            out.append(f"{what}: {d:+.3f} bpc, {ci}, n={k} (positive: {a} better)")
    return out


def findings(summary: pd.DataFrame) -> str:
    """The comparisons the study was built for, in sentences, from the main part."""
    main = main_finals(summary)
    if not len(main):
        return "No final runs of the main comparison."
    g = main.groupby("variant", sort=False)
    mean, n = g["test_bpc"].mean(), g["test_bpc"].count()
    best = mean.idxmin()
    out = [f"lowest test bpc: {best} ({mean.min():.3f}, n={n[best]})", *contrasts(summary)]
    sat = main.groupby("variant", sort=False).apply(
        lambda x: x["fast_saturated_rows"].sum() / max(x["fast_rows"].sum(), 1)
    )
    out.append("softmax rows saturated (one-hot to float32) inside training steps: "
               + ", ".join(f"{k} {v:.1%}" for k, v in sat.items()))  # fmt: skip
    out.append(f"non-finite values inside training steps: {int(main['fast_nonfinite'].sum())}; "
               f"float64 fallbacks (separate q/k past the logit bound): "
               f"{int(main['fast_fallbacks'].sum())}")  # fmt: skip
    return "\n".join(out)
