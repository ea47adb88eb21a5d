"""The attention card's hypothesis, row by row."""

from __future__ import annotations

import math

from structattn_lite import stats
from structattn_lite.claims.rows import read, row

# --- the attention card -----------------------------------------------------------------

ATTENTION_PROTOCOL = (
    "2-layer, 8-head Transformer, d_model 128, character PTB, context 128, batch 32, "
    "1,000 steps; each variant's rate chosen on validation over 600 steps of one seed "
    "(not at this budget), then 5 seeds; validation bpc"
)
ATTENTION_COMMAND = "structattn run attention --grid committed"


def _attention_row(ident: str, words: str, result, rule: str, values=(), **fields) -> dict:
    (diff, low, high), verdict, reason = result
    return row(values, id=ident, study="attention", claim=words, source="the attention card",
                ours=diff, low=low, high=high, verdict=verdict, reason=reason, rule=rule,
                protocol=fields.pop("protocol", ATTENTION_PROTOCOL), grid="committed (attention)",
                notebook="02, the card's hypothesis", command=ATTENTION_COMMAND,
                **fields)  # fmt: skip


def attention() -> list[dict]:
    """The card's hypothesis, row by row, at the committed grid's budget: "equal or better
    validation loss with fewer metric parameters, smoother training, and no loss of
    stability relative to the dense baseline", most of all with little data or few
    parameters. Each row's rule names the difference it reads and its sign."""
    runs = read("attention_runs.csv")
    if runs is None:
        return []
    finals = runs[~runs["tuning"].astype(bool)]

    def col(part, variant, column, fraction=1.0, precision="float32"):
        pick = finals[
            (finals["part"] == part)
            & (finals["variant"] == variant)
            & (finals["fraction"] == fraction)
            & (finals["precision"] == precision)
        ]
        return pick.sort_values("seed")[column].tolist()  # fmt: skip

    bpc, m = stats.BPC_MARGIN, "matroidal m=2d"
    not_worse = f"baseline minus matroidal, Welch; 'not worse' when above -{bpc} bpc"
    rows = []
    for ident, mat, dense in (("shared", m, "dense"), ("sep", f"{m} (sep q/k)", "dense (sep q/k)")):
        a, b = col("main", dense, "val_bpc"), col("main", mat, "val_bpc")
        rows.append(_attention_row(
            f"attention/not_worse/{ident}", f"{mat}: validation bpc equal to or better than "
            f"{dense} (within {bpc})", stats.difference(a, b, margin=bpc, claim="not_worse"),
            not_worse, {dense: a, mat: b}, seeds=min(len(a), len(b))))  # fmt: skip
        a, b = col("main", mat, "gnv_total"), col("main", dense, "gnv_total")
        rows.append(_attention_row(
            f"attention/smoother/{ident}", f"{mat}: smoother training than {dense} (lower "
            "gradient-norm variance after warmup)", stats.difference(a, b, claim="less"),
            "matroidal minus baseline, Welch; below 0", {mat: a, dense: b},
            seeds=min(len(a), len(b))))  # fmt: skip
    ours, dense = col("main", m, "params_metric"), col("main", "dense", "params_metric")
    fewer = ours[0] < dense[0] if ours and dense else None
    rows.append(row(
        id="attention/fewer_parameters", study="attention", source="the attention card",
        claim=f"{m} has fewer metric parameters than dense", ours=ours[0] if ours else math.nan,
        published=math.nan, seeds=len(ours),
        verdict=stats.REPRODUCED if fewer else stats.NOT_REPRODUCED if fewer is False else
        stats.UNDECIDED, reason=f"{ours[0]:.0f} against {dense[0]:.0f} metric parameters"
        if ours and dense else "not run", rule="exact count", protocol=ATTENTION_PROTOCOL,
        grid="committed (attention)", notebook="02, parameters and FLOPs",
        command=ATTENTION_COMMAND))  # fmt: skip
    matroidal = finals[finals["kind"] == "matroidal"]
    bad = int((matroidal["fast_nonfinite"] + matroidal["audit_nonfinite_logits"] > 0).sum())
    rows.append(row(
        id="attention/stable/nonfinite", study="attention", source="the attention card",
        claim="no non-finite attention logits in any matroidal run", ours=bad,
        seeds=len(matroidal), verdict=stats.REPRODUCED if bad == 0 and len(matroidal) >=
        stats.MIN_SEEDS else stats.NOT_REPRODUCED if bad else stats.UNDECIDED,
        reason=f"{bad} of {len(matroidal)} matroidal runs had a non-finite logit",
        rule="count over every final run", protocol=ATTENTION_PROTOCOL,
        grid="committed (attention)", notebook="02, numerical audit",
        command=ATTENTION_COMMAND))  # fmt: skip
    shift = {v: [x - y for x, y in zip(col("stability", v, "val_bpc", precision="bfloat16"),
                                       col("main", v, "val_bpc"), strict=False)]
             for v in ("dense", m)}  # fmt: skip
    rows.append(_attention_row(
        "attention/stable/bfloat16", f"{m} loses no more to bfloat16 autocast than dense "
        f"(shift of validation bpc, same seeds, within {bpc})",
        stats.difference(shift["dense"], shift[m], margin=bpc, claim="not_worse"), not_worse,
        shift, seeds=len(shift[m])))  # fmt: skip
    for base in ("dense", "dot"):
        low = [col("low data", v, "val_bpc", fraction=0.01) for v in (m, base)]
        full = [col("main", v, "val_bpc") for v in (m, base)]
        diff, lo, hi = stats.interaction(*low, *full)
        verdict = (stats.UNDECIDED if math.isnan(lo) else stats.REPRODUCED if hi < 0 else
                   stats.NOT_REPRODUCED if lo > 0 else stats.UNDECIDED)  # fmt: skip
        rows.append(row(
            {f"{v}, {share}": x for (v, share), x in zip(
                [(m, "1%"), (base, "1%"), (m, "100%"), (base, "100%")], low + full, strict=True)},
            id=f"attention/low_data/{base}", study="attention", source="the attention card",
            claim=f"{m}'s edge over {base} is larger with 1% of the text than with all of it",
            ours=diff, low=lo, high=hi, seeds=min(len(x) for x in low + full), verdict=verdict,
            reason=f"interaction {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] (negative: larger edge "
            "at 1%)", rule="interaction, Welch-Satterthwaite interval below 0",
            protocol=ATTENTION_PROTOCOL + "; 1% and 100% of the text", grid="committed "
            "(attention)", notebook="02, low data", command=ATTENTION_COMMAND))  # fmt: skip
    rows.append(row(
        id="attention/low_parameters", study="attention", source="the attention card",
        claim=f"{m}'s edge over dense is larger at d_model 32 and 64 than at 128", seeds=0,
        verdict=stats.UNDECIDED, reason="not run: no committed run below d_model 128",
        rule="interaction, Welch-Satterthwaite interval below 0",
        protocol="d_model 32, 64 and 128 to convergence (planned)", grid="none yet",
        notebook="02", command="not committed yet"))  # fmt: skip
    sizes = {k: col("main", f"matroidal m={k}", "val_bpc") for k in ("1d", "2d", "4d")}
    best, runner = sorted(sizes, key=lambda k: sum(sizes[k]) / max(len(sizes[k]), 1))[:2]
    rows.append(
        _attention_row(
            "attention/best_m",
            f"one support size m is best (lowest validation bpc: m={best})",
            stats.difference(sizes[best], sizes[runner], claim="less"),
            f"m={best} minus the next best (m={runner}), Welch; below 0",
            {f"m={k}": v for k, v in sizes.items()},
            seeds=len(sizes[best]),
        )
    )
    pruned = col("main", m, "prune_val_bpc_0.5")
    rows.append(_attention_row(
        "attention/pruning", f"{m} keeps its validation bpc (within {bpc}) with half its "
        "coefficients pruned and a short fine-tune", stats.difference(
            col("main", m, "val_bpc"), pruned, margin=bpc, claim="not_worse"),
        f"unpruned minus pruned, Welch; 'not worse' when above -{bpc} bpc",
        {"unpruned": col("main", m, "val_bpc"), "half pruned": pruned},
        seeds=len(pruned)))  # fmt: skip
    a, b = col("digits", m, "test_acc"), col("digits", "dense", "test_acc")
    rows.append(_attention_row(
        "attention/digits", f"{m} classifies 8x8 digits as well as dense (test accuracy "
        f"within {stats.ACCURACY_MARGIN})", stats.difference(
            a, b, margin=stats.ACCURACY_MARGIN, claim="not_worse"),
        f"matroidal minus dense, Welch; 'not worse' when above -{stats.ACCURACY_MARGIN}",
        {m: a, "dense": b}, seeds=len(a),
        protocol="digits as 4x4 patch tokens, 400 steps, 5 seeds; test accuracy"))  # fmt: skip
    return rows
