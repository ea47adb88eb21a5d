"""Tables and the plain-words verdict of the attention study, from run records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from structattn_lite.models.attention_checks import FAILURE_KEYS
from structattn_lite.runs import RunRecord

PARAM_KEYS = ("params_total", "params_attention", "params_metric")
FLOP_KEYS = ("flops_fast", "flops_reference", "flops_analytic", "flops_pairwise")


def summarize(records: list[RunRecord]) -> pd.DataFrame:
    """One row per run: final metric, stability, failures, size, cost."""
    rows = []
    for r in records:
        c, x, h = r.config, r.extra, r.history
        final = x.get("final", {})
        row = {
            "variant": x.get("variant", c["kind"]),
            "dataset": c["dataset"],
            "kind": c["kind"],
            "m": c["m"] or (2 * c["d_model"] // c["n_heads"] if c["kind"] == "matroidal" else None),
            "shared_qk": c["shared_qk"] if c["kind"] != "dot" else None,
            "fraction": c["data_fraction"],
            "seed": c["seed"],
            "status": r.status,
            "steps": len(x.get("step_grad_norms", [])),
            "val_bpc": final.get("val_bpc", math.nan),
            "val_acc": final.get("val_acc", math.nan),
            "train_bpc": h["train_bpc"].iloc[-1] if "train_bpc" in h and len(h) else math.nan,
            "grad_norm_var": x.get("grad_norm_var", math.nan),
            "grad_norm_var_late": x.get("grad_norm_var_late", math.nan),
            **{k: x.get(k, math.nan) for k in PARAM_KEYS + FLOP_KEYS},
            "metric_drift": _metric_drift(c, x.get("weights")),
            "seconds_per_step": x.get("seconds_per_step") or math.nan,
            "seconds": x.get("seconds", math.nan),
        }
        for k in (*FAILURE_KEYS, "entries"):  # the check batch at every eval, and at the end
            col = h[k] if k in h else pd.Series(dtype=float)
            vals = [*col.tolist(), x.get("failures_final", {}).get(k, math.nan)]
            vals = [v for v in vals if not (isinstance(v, float) and math.isnan(v))]
            agg = max if k == "fast_ref_gap" else sum
            row[k] = agg(vals) if vals else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _metric_drift(config: dict, weights) -> float:
    """Largest relative change of the metric from its start: l_e vs d/2m (matroidal),
    eigenvalues of M vs 1 + eps (dense); NaN for dot."""
    if not weights or config["kind"] == "dot":
        return math.nan
    d = config["d_model"] // config["n_heads"]
    w = np.asarray(weights, dtype=float)
    start = d / (2 * (config["m"] or 2 * d)) if config["kind"] == "matroidal" else 1 + config["eps"]
    return float(np.abs(w / start - 1).max())


def _mean_sd(s: pd.Series, digits: int) -> str:
    s = s.dropna()
    if not len(s):
        return "n/a"
    if len(s) == 1:
        return f"{s.iloc[0]:.{digits}f} (n=1)"
    return f"{s.mean():.{digits}f} ± {s.std(ddof=1):.{digits}f} (n={len(s)})"


def measurement_table(summary: pd.DataFrame, fraction: float = 1.0) -> pd.DataFrame:
    """Every measurement per variant at one data fraction: mean ± sd over seeds."""
    sub = summary[summary["fraction"] == fraction]
    metric = "val_acc" if sub["val_bpc"].isna().all() else "val_bpc"
    out = []
    for variant, g in sub.groupby("variant", sort=False):
        out.append(
            {
                "variant": variant,
                metric: _mean_sd(g[metric], 3),
                "train_bpc": _mean_sd(g["train_bpc"], 3),
                "grad-norm var": _mean_sd(g["grad_norm_var"], 4),
                "max metric drift": _mean_sd(g["metric_drift"], 3),
                "s/step": _mean_sd(g["seconds_per_step"], 3),
                "params total": int(g["params_total"].iloc[0]),
                "params attention": int(g["params_attention"].iloc[0]),
                "params metric": int(g["params_metric"].iloc[0]),
                "attn MFLOPs fast": g["flops_fast"].iloc[0] / 1e6,
                "attn MFLOPs ref (+pairwise)": (
                    g["flops_reference"].iloc[0] + g["flops_pairwise"].iloc[0]
                )
                / 1e6,
                "NaN/Inf logits": int(g["nonfinite_logits"].sum()),
                "underflow rows": int(g["underflow_rows"].sum()),
                "zero softmax rows": int(g["zero_rows"].sum()),
                "neg. sq. dist (of logits)": (
                    f"{int(g['neg_sq_dist'].sum())} of {int(g['entries'].sum())}"
                    if g["neg_sq_dist"].notna().any()
                    else "n/a"
                ),
                "max |fast-ref|": f"{g['fast_ref_gap'].max():.1e}",
                "diverged": int((g["status"] != "ok").sum()),
            }
        )
    return pd.DataFrame(out)


def fraction_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Validation bpc (mean ± sd) per variant and data fraction, for the sweep's variants."""
    kinds = summary[summary["fraction"] < 1]["variant"].unique()
    sub = summary[summary["variant"].isin(kinds)]
    table = sub.groupby(["variant", "fraction"], sort=False)["val_bpc"].apply(
        lambda s: _mean_sd(s, 3)
    )
    return table.unstack("fraction")


def _advantage(summary: pd.DataFrame, fraction: float, a: str, b: str) -> tuple[float, float]:
    """mean(b) - mean(a) in bpc (positive: a is better) and the standard error."""
    sub = summary[summary["fraction"] == fraction]
    xa, xb = (
        sub[sub["variant"] == a]["val_bpc"].dropna(),
        sub[sub["variant"] == b]["val_bpc"].dropna(),
    )
    if len(xa) < 2 or len(xb) < 2:  # no spread, no verdict
        return (float(xb.mean() - xa.mean()) if len(xa) and len(xb) else math.nan), math.nan
    se = math.sqrt(
        np.nan_to_num(xa.var(ddof=1)) / len(xa) + np.nan_to_num(xb.var(ddof=1)) / len(xb)
    )
    return float(xb.mean() - xa.mean()), se


def _edge_verdict(low: tuple[float, float], full: tuple[float, float]) -> str:
    if math.isnan(low[1]) or math.isnan(full[1]):
        return "NOT TESTABLE (needs at least 2 seeds per variant and fraction)"
    if low[0] > 2 * max(low[1], 1e-9) and low[0] > full[0]:
        return "HELD (the edge is positive beyond 2 s.e. and largest with the least data)"
    if low[0] > 0 and low[0] > full[0]:
        return "INCONCLUSIVE (the edge leans that way but is within 2 s.e. of seed noise)"
    return "DID NOT HOLD at this budget"


def low_data_verdict(summary: pd.DataFrame, structured: str = "matroidal m=2d") -> str:
    """Did the structured metric help most when data is scarce? Plain words.

    Judged against the dense metric, which differs only in how M is parametrised; the
    comparison with dot product is reported too but changes three things at once.
    """
    fractions = sorted(summary["fraction"].unique())
    if len(fractions) < 2:
        return "Only one data fraction was run: the low-data hypothesis was not tested."
    lines, verdicts = [], {}
    for rival in ("dense", "dot"):
        adv = {f: _advantage(summary, f, structured, rival) for f in fractions}
        parts = [
            f"fraction {f:g}: {a:+.3f}" + (" (no spread)" if math.isnan(se) else f" ± {se:.3f}")
            for f, (a, se) in adv.items()
        ]
        verdicts[rival] = _edge_verdict(adv[fractions[0]], adv[fractions[-1]])
        lines.append(
            f"  {structured} vs {rival}, bpc of {rival} minus {structured} (positive = "
            f"{structured} better): " + "; ".join(parts) + f" -> {verdicts[rival]}"
        )
    head = (
        f"Low-data hypothesis, judged against the dense metric (same projection and distance, "
        f"only M's parametrisation differs): {verdicts['dense']}.\n"
        f"Against dot product (distance, shared projection and metric all differ at once): "
        f"{verdicts['dot']}."
    )
    return head + "\n" + "\n".join(lines)


def findings(summary: pd.DataFrame) -> str:
    """The comparisons the study was built for, in sentences, from the full-data runs."""
    full = summary[summary["fraction"] == 1.0]
    g = full.groupby("variant", sort=False)
    mean, n = g["val_bpc"].mean(), g["val_bpc"].count()
    out = [
        f"lowest validation bpc at full data: {mean.idxmin()} ({mean.min():.3f}, n={n[mean.idxmin()]})"
    ]
    for a, b, what in [
        ("matroidal m=2d", "dense", "matroidal vs dense, both with the seed's shared projection"),
        ("matroidal m=2d (sep q/k)", "matroidal m=2d", "separate q/k vs shared z (matroidal)"),
        ("dense (sep q/k)", "dense", "separate q/k vs shared z (dense)"),
        ("matroidal m=2d", "dot", "matroidal (shared z) vs dot"),
        ("matroidal m=2d (sep q/k)", "dot", "matroidal (sep q/k) vs dot"),
    ]:
        adv, se = _advantage(summary, 1.0, a, b)
        if not math.isnan(adv):
            spread = "no spread" if math.isnan(se) else f"± {se:.3f} s.e."
            out.append(f"{what}: {adv:+.3f} bpc {spread} (positive: {a} better)")
    mats = [v for v in mean.index if v.startswith("matroidal m=") and "sep" not in v]
    if mats:
        out.append("matroidal m sweep: " + ", ".join(f"{v[10:]}: {mean[v]:.3f}" for v in mats))
    fails = full[["nonfinite_logits", "underflow_rows", "zero_rows"]].sum().sum()
    out.append(f"NaN/Inf logits, underflowing or zero softmax rows over all runs: {int(fails)}")
    drift = g["metric_drift"].max().dropna()
    if len(drift):
        out.append(
            "largest relative change of the metric from its initial value (l_e, or M's "
            "eigenvalues): " + ", ".join(f"{k} {v:.1%}" for k, v in drift.items())
        )
    var = g["grad_norm_var"].mean()
    out.append("gradient-norm variance: " + ", ".join(f"{k} {v:.4f}" for k, v in var.items()))
    return "\n".join(out)
