"""The attention study's run summary and the tables of what each variant measured.

``summarize`` turns records into one row per run (the committed CSV is this table);
every table reads that summary, so the notebook renders committed grids without
retraining. The tables that compare (variant against variant, rate against rate) are
``report``'s. Intervals are 95% Student-t intervals over seeds; differences between two
variants use Welch's t interval. Language-model tables carry the n-gram floors.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from structattn_lite import names, stats
from structattn_lite.records import RunRecord, config_dict
from structattn_lite.studies.attention.grids import (
    COMMITTED_CSV,
    IMAGE_DATASETS,
    RECIPE_TARGET_BPC,
    RETIRED_TUNING_CSV,
    part,
)

PARAM_KEYS = ("params_total", "params_attention", "params_metric")
FLOP_KEYS = ("flops_fast", "flops_reference", "flops_analytic", "flops_pairwise")
AUDIT_KEYS = ("nonfinite_logits", "underflow_rows", "zero_rows", "neg_sq_dist", "fast_ref_gap")
FAST_KEYS = ("rows", "nonfinite", "saturated_rows", "max_abs_logit", "fallbacks", "calls")
GRID_KEYS = ("d_model", "n_heads", "n_layers", "block_size", "batch_size")


def variant_label(cfg) -> str:
    """ "dot", "dense", "matroidal m=2d", with " (sep q/k)" for separate projections."""
    c = cfg if isinstance(cfg, dict) else config_dict(cfg)
    return names.variant_key(c["kind"], c["shared_qk"], c["m"], c["d_model"] // c["n_heads"])


def variant_key(cfg) -> str:
    """What a learning rate is tuned for: the variant on its dataset and model size."""
    c = cfg if isinstance(cfg, dict) else config_dict(cfg)
    return f"{c['dataset']}|{variant_label(c)}|d{c['d_model']}h{c['n_heads']}l{c['n_layers']}"


def rate_sweep(records: list[RunRecord]) -> pd.DataFrame:
    """One row per (variant_key, peak rate): ``best``, the mean over the tuning seeds of
    each run's best validation number (diverged runs count as infinitely bad), and
    ``seeds``. What ``choose_lrs`` chooses from, and what a tuning table shows."""
    rows = []
    for r in records:
        monitor = "val_loss" if r.config["dataset"] in IMAGE_DATASETS else "val_bpc"
        best = r.history[monitor].min() if r.status == "ok" and len(r.history) else math.inf
        rows.append({"key": r.extra.get("variant_key") or variant_key(r.config),
                     "lr": r.config["recipe"]["lr"], "best": best})  # fmt: skip
    return (pd.DataFrame(rows, columns=["key", "lr", "best"]).groupby(["key", "lr"])["best"]
            .agg(best="mean", seeds="size").reset_index())  # fmt: skip


def summarize(records: list[RunRecord]) -> pd.DataFrame:
    """One row per run: final numbers, stability, counters, size, cost."""
    rows = []
    for r in records:
        c, x, h = r.config, r.extra, r.history
        final, recipe = x.get("final", {}), c["recipe"]
        var = x.get("grad_norm_var", {})
        row = {
            "variant": x.get("variant", c["kind"]), "part": part(c), "dataset": c["dataset"],
            "kind": c["kind"], "m": c["m"], "shared_qk": c["shared_qk"] if c["kind"] != "dot" else None,
            "fraction": c["data_fraction"], "precision": recipe["precision"], "seed": c["seed"],
            "lr": recipe["lr"], "tuning": not c["read_test"], "status": r.status,
            "device": r.device,
            "stop": x.get("stop"), "steps": x.get("steps"), "best_step": x.get("best_step"),
            "train_bpc": h["train_bpc"].iloc[-1] if "train_bpc" in h and len(h) else math.nan,
            **{k: final.get(k, math.nan) for k in ("val_bpc", "test_bpc", "val_loss",
                                                    "val_acc", "test_loss", "test_acc")},
            **{f"gnv_{k}": v for k, v in var.items()},
            **{f"fast_{k}": x.get("fast_path", {}).get(k, math.nan) for k in FAST_KEYS},
            **{f"audit_{k}": x.get("audit", {}).get(k, math.nan) for k in AUDIT_KEYS},
            **{k: x.get(k, math.nan) for k in (*PARAM_KEYS, *FLOP_KEYS)},
            "attn_ms": x.get("attn_ms", math.nan),
            "attn_time_vs_dot": x.get("attn_time_vs_dot", math.nan),
            "metric_drift": _metric_drift(c, x.get("weights")),
            "seconds": x.get("seconds", math.nan), "cpu_seconds": x.get("cpu_seconds", math.nan),
            **{k: c[k] for k in GRID_KEYS}, "max_steps": recipe["max_steps"],
            "warmup_steps": recipe["warmup_steps"],
        }  # fmt: skip
        for p in x.get("pruning", []):  # validation after pruning a share of the columns
            if p["fraction"] > 0 and "val_bpc" in p:
                row[f"prune_kept_{p['fraction']:g}"] = p["kept"]
                row[f"prune_val_bpc_{p['fraction']:g}"] = p["val_bpc"]
        rows.append(row)
    return pd.DataFrame(rows)


def _committed_file(grid: str, which: int, missing_ok: bool = True):
    """The path of a committed grid's runs (0) or histories (1) file; a FileNotFoundError
    naming it when it is not there, unless ``missing_ok``."""
    from structattn_lite.config import check_choice, missing_committed, results_dir

    path = results_dir() / COMMITTED_CSV[check_choice("grid", grid, COMMITTED_CSV)][which]
    if not missing_ok and not path.exists():
        raise missing_committed(path)
    return path


def load_summary(grid: str = "committed", missing_ok: bool = True) -> pd.DataFrame | None:
    """A committed grid's summary (``data/results/attention_runs.csv`` for ``committed``);
    None if it is not there and ``missing_ok``, else a FileNotFoundError naming the file."""
    path = _committed_file(grid, 0, missing_ok)
    return pd.read_csv(path) if path.exists() else None


def load_committed_histories(grid: str = "committed", missing_ok: bool = True) -> list[RunRecord]:
    """A committed grid's learning curves as records (empty if not there and
    ``missing_ok``, else a FileNotFoundError naming the file)."""
    path = _committed_file(grid, 1, missing_ok)
    return load_earlier(path.name) if path.exists() else []


def load_earlier(name: str) -> list[RunRecord]:
    """The records of a histories file in data/results (``grids``'s earlier sweeps)."""
    from structattn_lite.config import results_dir
    from structattn_lite.records import load_histories

    return load_histories(results_dir() / name)


def load_tuning_histories() -> list[RunRecord]:
    """Every tuning run of the committed grid: 600 steps of one seed (``RETIRED_TUNING_CSV``)
    and 1,000 steps of three, which its rates come from (a run in both, once), so its
    choices can be read across the two tuning schedules."""
    runs = [*load_earlier(RETIRED_TUNING_CSV), *load_committed_histories("committed")]
    return list({r.key: r for r in runs if not r.config["read_test"]}.values())


def tuning_schedule(runs: pd.DataFrame, dataset: str = "ptb") -> tuple[str, str, bool, bool]:
    """How ``runs`` (a grid's summary) chose each variant's rate on ``dataset``, read off
    its tuning runs: their steps ("600"), their seeds ("one seed", "3 seeds"), whether they
    trained as long as the grid's finals, and whether each rate had ``stats.MIN_SEEDS``
    seeds (what ``stats.RULES["tuning"]`` asks)."""
    on = runs[runs["dataset"] == dataset]
    tuned = on[on["tuning"].astype(bool)]
    steps = sorted(int(s) for s in tuned["max_steps"].unique())
    seeds = int(tuned.groupby(["variant", "lr"])["seed"].nunique().min())
    budget = int(on.loc[~on["tuning"].astype(bool), "max_steps"].max())
    return (
        "/".join(f"{s:,}" for s in steps),
        ("one seed" if seeds == 1 else f"{seeds} seeds"),
        steps == [budget],
        seeds >= stats.MIN_SEEDS,
    )


def budget_table(records: list[RunRecord], target: float = RECIPE_TARGET_BPC) -> pd.DataFrame:
    """Per final language-model run: the first evaluation at or below ``target``
    validation bpc (step and core-minutes of training then), and the best it reached."""
    rows = []
    for r in records:
        h, c = r.history, r.config
        if not c.get("read_test") or "val_bpc" not in h or h["val_bpc"].isna().all():
            continue
        below = h[h["val_bpc"] <= target]
        first = below.iloc[0] if len(below) else None
        best = h.loc[h["val_bpc"].idxmin()]
        rows.append({
            "variant": r.extra.get("variant", c["kind"]), "seed": c["seed"],
            f"step at <= {target} val bpc": int(first["step"]) if first is not None else "not reached",
            "core-minutes then": round(first["cpu_seconds"] / 60, 1) if first is not None else "",
            "best val bpc": round(float(best["val_bpc"]), 3), "at step": int(best["step"]),
            "steps": int(h["step"].max()), "core-minutes in all": round(h["cpu_seconds"].max() / 60, 1),
        })  # fmt: skip
    return pd.DataFrame(rows)


def grid_caption(summary: pd.DataFrame, sweep=None) -> str:
    """The grid a table came from, read from the runs: seeds and steps per part, model,
    tuning (the rates a variant chose among: ``sweep``, or every tuned rate when None;
    others are the edge check). Printed under every committed table."""
    fin = finals(summary)
    parts = []
    for (name, fraction), g in fin.groupby(["part", "fraction"], sort=False):
        seeds = g.groupby("variant")["seed"].nunique()
        spread = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
        steps = "/".join(str(int(v)) for v in sorted(g["max_steps"].unique()))
        label = f"{name} ({fraction:.0%} of the text)" if name == "low data" else name
        parts.append(
            f"{label}: {g['variant'].nunique()} variant(s) × {spread} seed(s), {steps} steps"
        )
    lm = fin[~fin["dataset"].isin(["digits", "cifar10"])]
    model = (
        f"d_model {lm['d_model'].iloc[0]}, {lm['n_heads'].iloc[0]} heads, "
        f"{lm['n_layers'].iloc[0]} layers, context {lm['block_size'].iloc[0]}, "
        f"batch {lm['batch_size'].iloc[0]}"
        if len(lm)
        else "no language-model runs"
    )
    tun = summary[summary["tuning"].astype(bool) & summary["dataset"].isin(fin["dataset"])]
    swept = tun["lr"].isin(sweep) if sweep is not None else tun["lr"].notna()
    rates = "/".join(f"{v:g}" for v in sorted(tun.loc[swept, "lr"].unique()))
    past = "/".join(f"{v:g}" for v in sorted(tun.loc[~swept, "lr"].unique()))
    edge = f"; rates {past} checked past the sweep's edge (never chosen)" if past else ""
    steps = {
        what: "/".join(str(int(v)) for v in sorted(g["max_steps"].unique()))
        for what, g in tun.groupby(tun["dataset"].isin(["digits", "cifar10"]).map(
            {False: "text", True: "images"}))
    }  # fmt: skip
    over = ", ".join(f"{what} over {n} steps" for what, n in steps.items())
    return (
        "; ".join(parts)
        + f"; {model}; rates {rates} tuned per variant on validation ({over}){edge}; "
        + "test read once per final run"
    )


def pruning_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Validation bpc (95% t interval) after pruning each share of the support columns
    and a short fine-tune, per matroidal variant of the main comparison."""
    sub = finals(summary)
    sub = sub[(sub["part"] == "main") & (sub["kind"] == "matroidal")]
    cols = [c for c in sub.columns if c.startswith("prune_val_bpc_")]
    if not len(sub) or not cols:
        return pd.DataFrame()
    rows = []
    for variant, g in sub.groupby("variant", sort=False):
        row = {"variant": variant, "unpruned val bpc": interval(g["val_bpc"])}
        for c in cols:
            frac = c.removeprefix("prune_val_bpc_")
            kept = g[f"prune_kept_{frac}"].mean()
            row[f"drop {float(frac):.0%} (keep {kept:.0%})"] = interval(g[c])
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


def interval(values, digits: int = 3) -> str:
    """ "mean ± half-width (n=k, 95% t)"; one seed has no interval and says so."""
    v = pd.Series(values, dtype=float).dropna()
    if not len(v):
        return "n/a"
    if len(v) == 1:
        return f"{v.iloc[0]:.{digits}f} (n=1, no interval)"
    half = stats.t_half_width(float(v.std(ddof=1)), len(v))
    return f"{v.mean():.{digits}f} ± {half:.{digits}f} (n={len(v)}, 95% t)"


def difference(a, b) -> tuple[float, float, float, int]:
    """mean(b) - mean(a), its 95% Welch interval (low, high), and the smaller n."""
    sa, sb = stats.summary(a), stats.summary(b)
    diff, low, high = stats.welch_difference(sb, sa)
    return float(diff), low, high, min(sa[2], sb[2])


def finals(summary: pd.DataFrame) -> pd.DataFrame:
    """The final runs (tuning runs left out) that finished."""
    return summary[~summary["tuning"].astype(bool)]


def finished_finals(runs: pd.DataFrame | None, fraction: float | None = 1.0) -> pd.DataFrame:
    """A grid's final runs (those that read the test split once), finished, on this
    fraction of the text (None: every fraction)."""
    if runs is None or runs.empty:
        return pd.DataFrame(columns=["d_model", "variant", "fraction", "seed"])
    done = runs[~runs["tuning"].astype(bool) & (runs["status"] == "ok")]
    if fraction is not None:
        done = done[done["fraction"] == fraction]
    return done.sort_values(["d_model", "variant", "fraction", "seed"])


def cell_values(runs: pd.DataFrame | None, column: str = "test_bpc") -> dict:
    """{(d_model, variant, fraction of the text): per-seed values} of the final runs, for
    the ledger."""
    out = {}
    for (d, variant, fraction), g in finished_finals(runs, fraction=None).groupby(
        ["d_model", "variant", "fraction"]
    ):
        out[(int(d), variant, float(fraction))] = g[column].astype(float).tolist()
    return out


def float32_finals(summary: pd.DataFrame, parts=("main", "low data")) -> pd.DataFrame:
    """The float32 final runs of ``parts`` (by default those the low-data sweep reads)."""
    fin = finals(summary)
    return fin[fin["part"].isin(parts) & (fin["precision"] == "float32")]


def main_finals(summary: pd.DataFrame) -> pd.DataFrame:
    """The final runs of the main comparison."""
    fin = finals(summary)
    return fin[fin["part"] == "main"]


def floor_rows(floors: dict[str, dict[str, float]] | None) -> pd.DataFrame:
    """The n-gram floors (``tasks.floor_table``) as rows with "val bpc" and "test bpc"."""
    if not floors:
        return pd.DataFrame()
    return pd.DataFrame([{"variant": names.display_name(f"{k} floor"),
                          "test bpc": f"{floors['test'][k]:.3f}",
                          "val bpc": f"{floors['valid'][k]:.3f}"} for k in floors["valid"]])  # fmt: skip


def measurement_table(summary: pd.DataFrame, which: str = "main", floors=None) -> pd.DataFrame:
    """Every measurement per variant of one part ("main", "stability", "digits", ...)."""
    sub = finals(summary)
    sub = sub[sub["part"] == which]
    image = which in ("digits", "cifar10")
    out = []
    for variant, g in sub.groupby("variant", sort=False):
        fast_rows = g["fast_rows"].sum()
        row = {"variant": variant}
        if image:
            row.update({"test acc": interval(g["test_acc"]), "val acc": interval(g["val_acc"]),
                        "test loss": interval(g["test_loss"])})  # fmt: skip
        else:
            row.update({"test bpc": interval(g["test_bpc"]), "val bpc": interval(g["val_bpc"])})
        row.update({
            "lr (tuned)": f"{g['lr'].iloc[0]:g}",
            "grad-norm var after warmup": interval(g["gnv_total"], 4),
            "metric grad-norm var": interval(g.get("gnv_metric", pd.Series(dtype=float)), 5),
            "grad-norm var by layer (mean)": ", ".join(
                f"{c[4:]} {g[c].mean():.2g}" for c in g.columns if c.startswith("gnv_layer")
            ),
            "max metric drift": interval(g["metric_drift"]),
            "params total / attention / metric": (
                f"{int(g['params_total'].iloc[0])} / {int(g['params_attention'].iloc[0])} / "
                f"{int(g['params_metric'].iloc[0])}"),
            "attn MFLOPs (kernel width)": f"{g['flops_fast'].iloc[0] / 1e6:.2f}",
            "attn time / dot (measured)": interval(g["attn_time_vs_dot"], 2),
            "core-s per run": interval(g["cpu_seconds"], 1),
            "saturated rows (training)": f"{g['fast_saturated_rows'].sum() / max(fast_rows, 1):.1%}",
            "non-finite (training)": int(g["fast_nonfinite"].sum()),
            "fallbacks / calls": f"{int(g['fast_fallbacks'].sum())} / {int(g['fast_calls'].sum())}",
            "largest |logit| (training)": f"{g['fast_max_abs_logit'].max():.3g}",
            "audit: max |fast - ref|": f"{g['audit_fast_ref_gap'].max():.1e}",
            "audit: neg. sq. dist": (f"{int(g['audit_neg_sq_dist'].sum())}"
                                     if g["audit_neg_sq_dist"].notna().any() else "n/a"),
            "diverged": int((g["status"] != "ok").sum()),
        })  # fmt: skip
        out.append(row)
    table = pd.DataFrame(out)
    if not image:  # a floor has a bpc and nothing else: blank, not NaN, in its other cells
        table = pd.concat([table, floor_rows(floors)], ignore_index=True).astype(object).fillna("")
    return table


def fraction_table(summary: pd.DataFrame, floors=None) -> pd.DataFrame:
    """Test bpc (95% t interval) per variant and fraction of the training text."""
    sub = float32_finals(summary)
    kinds = sub[sub["fraction"] < 1]["variant"].unique()
    sub = sub[sub["variant"].isin(kinds)]
    table = sub.groupby(["variant", "fraction"], sort=False)["test_bpc"].apply(interval)
    table = table.unstack("fraction").reset_index()
    if floors:
        for k, v in floors["test"].items():
            table.loc[len(table)] = [f"{k} floor"] + [f"{v:.3f}"] * (table.shape[1] - 1)
    return table
