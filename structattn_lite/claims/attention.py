"""The attention card's hypothesis, row by row."""

from __future__ import annotations

import math

from structattn_lite import names, stats
from structattn_lite.claims.rows import fresh_reader, read, row
from structattn_lite.claims.rules import rule as rule_of
from structattn_lite.names import display_name as name
from structattn_lite.studies.attention.tables import cell_values, tuning_schedule

# --- the attention card -----------------------------------------------------------------

ATTENTION_COMMAND = "structattn run attention --grid committed"


def _untuned(runs, dataset: str = "ptb") -> str | None:
    """None when ``runs`` chose their rates on ``dataset`` as the tuning rule asks
    (``stats.RULES["tuning"]``); else how they chose them, for the reason of a row the
    rule leaves undecided."""
    steps, seeds, at_budget, enough = tuning_schedule(runs, dataset)
    if at_budget and enough:
        return None
    why = "not at this budget" if not at_budget else f"fewer than {stats.MIN_SEEDS} seeds"
    return f"over {steps} steps of {seeds}, {why}"


def committed_protocol(runs) -> str:
    """The committed grid's protocol, its tuning read off its runs."""
    steps, seeds, at_budget, _ = tuning_schedule(runs)
    chosen = (f"at this budget over {seeds} (widened at the sweep's edge)" if at_budget
              else f"over {steps} steps of {seeds} (not at this budget)")  # fmt: skip
    return (
        "2-layer, 8-head Transformer, d_model 128, character PTB, context 128, batch 32, "
        f"1,000 steps; each variant's rate chosen on validation {chosen}, then 5 seeds; "
        "validation bpc"
    )


def _attention_row(
    ident: str,
    words: str,
    result,
    values=(),
    *,
    protocol: str,
    test: str,
    untuned: str | None = None,
    untuned_cost: str = "",
    **fields,
) -> dict:
    """A comparison's row, decided by ``test`` (the rules table's name for ``result``'s
    test); ``untuned`` (how the rates were chosen, when not as the tuning rule asks) leaves
    it undecided."""
    if callable(result):  # decided with the row's smallest effect of interest
        result = result(rule_of(ident).delta)
    (diff, low, high), verdict, reason = (
        result if untuned is None else stats.untuned(result, untuned, untuned_cost)
    )
    return row(values, test=test, id=ident, study="attention", claim=words, source="the attention card",
                ours=diff, low=low, high=high, verdict=verdict, reason=reason,
                protocol=protocol,
                grid=fields.pop("grid", "committed (attention)"),
                notebook=fields.pop("notebook", "02, the card's hypothesis"),
                command=fields.pop("command", ATTENTION_COMMAND), **fields)  # fmt: skip


def _interaction_row(ident, words, samples, names, where, **fields) -> dict:
    """A row for "the edge of a over b is larger in the first setting than in the second":
    (a1 - b1) - (a2 - b2), its Welch-Satterthwaite interval below 0."""
    result = stats.interaction_difference(*samples, where=where, delta=rule_of(ident).delta)
    return _attention_row(
        ident, words, result,
        {f"{v}, {at}": x for (v, at), x in zip(names, samples, strict=True)},
        seeds=min(len(x) for x in samples), test="interaction", **fields)  # fmt: skip


def _not_worse_than_dense(ident, where, split, bpc_of, fields_of=None, **fields) -> list[dict]:
    """Rows for "matroidal m=2d is equal to or better than dense with the same q/k sharing
    (within the bpc margin)", shared q/k then separate; ``bpc_of(variant, row id)`` gives
    the per-seed bpc on ``split`` in seed order; ``fields_of(row id, (dense, matroidal))``,
    fields of one row (e.g. the fresh grid it is read on, or its cost in those variants)."""
    rows = []
    for qk, suffix in (("shared", ""), ("sep", " (sep q/k)")):
        mat, dense = "matroidal m=2d" + suffix, "dense" + suffix
        key = f"{ident}/{qk}"
        a, b = bpc_of(dense, key), bpc_of(mat, key)
        bpc = rule_of(key).delta
        own = {**fields, **(fields_of(key, (dense, mat)) if fields_of else {})}
        rows.append(_attention_row(
            key, f"{where}{name(mat)}: {split} bpc equal to or better than "
            f"{name(dense)} (within {bpc})", stats.difference(a, b, delta=bpc, claim="not_worse"),
            {dense: a, mat: b}, seeds=min(len(a), len(b)), test="noninferiority", **own))  # fmt: skip
    return rows


def _fresh_reader():
    """``read_on(row id)`` (``rows.fresh_reader``) for the attention rows: the final runs of
    the fresh grid a row's rule names, once all are in."""
    return fresh_reader(lambda grid, _: fresh_finals(grid), "{grid} (attention)",
                        "structattn run attention --grid {grid}")  # fmt: skip


LOWPARAM_PROTOCOL = (
    "2-layer Transformer, d_model 32 (4 heads) and 64 (8 heads), character PTB, context "
    "128, batch 32; cosine over at most 4,000 steps, early stop after 1,000 steps without a "
    "better validation bpc; each variant's rate chosen on validation at this budget over 3 "
    "seeds (widened at the sweep's edge), then 5 seeds; test bpc"
)
LOW_DATA_PROTOCOL = LOWPARAM_PROTOCOL + "; d_model 32 on 1% and 100% of the text"
LOWPARAM_COMMAND = "structattn run attention --grid lowparam"


def low_parameters() -> list[dict]:
    """The card's low-parameter half, from the ``lowparam`` grid's test bpc: matroidal m=2d
    (shared, and separate q/k) not worse than dense at d_model 32 and at 64, and its edge
    over dense and over dot larger at 32 than at 64; then its low-data half at d_model 32,
    under the same stop rule: the edge larger on 1% of the text than on all of it. (The 1%
    runs end on the early stop; the full-text runs mostly reach the step cap first.)"""
    runs = read("attention_lowparam_runs.csv")
    if runs is None:
        return []
    cells = cell_values(runs)
    m = "matroidal m=2d"
    # the card asks for runs "at convergence": say how many the step cap ended instead
    full = runs[~runs["tuning"].astype(bool) & (runs["fraction"] == 1.0)]
    capped = f"; {(full['stop'] == 'max_steps').sum()} of {len(full)} full-text finals ended at the step cap, not on the early stop"  # fmt: skip
    fields = dict(protocol=LOWPARAM_PROTOCOL + capped, untuned=_untuned(runs), grid="lowparam (attention)",
                  notebook="02, few parameters", command=LOWPARAM_COMMAND)  # fmt: skip
    read_on = _fresh_reader()

    def test_bpc(d, variant, ident):
        """Per-seed test bpc of one cell: the fresh seeds ``ident``'s rule names once they
        are all in, else the lowparam grid's."""
        frame = read_on(ident)[0]
        if frame is None:
            return cells.get((d, variant, 1.0), [])
        pick = frame[
            (frame["d_model"] == d) & (frame["variant"] == variant) & (frame["fraction"] == 1.0)
        ]
        return pick.sort_values("seed")["test_bpc"].astype(float).tolist()

    rows = []
    for d in (32, 64):
        rows += _not_worse_than_dense(
            f"attention/low_parameters/d{d}", f"at d_model {d}, ", "test",
            lambda variant, ident, d=d: test_bpc(d, variant, ident),
            fields_of=lambda ident, _, d=d: {**read_on(ident)[1], "cell": {"d_model": d}},
            **fields)  # fmt: skip
    for base, suffix in (("dense", ""), ("dot", "/dot")):
        names = [(m, "d 32"), (base, "d 32"), (m, "d 64"), (base, "d 64")]
        samples = [cells.get((int(at[2:]), v, 1.0), []) for v, at in names]
        rows.append(_interaction_row(
            f"attention/low_parameters{suffix}", f"{name(m)}'s edge over {name(base)} is larger at "
            "d_model 32 than at 64", samples, names, "at d 32", **fields))  # fmt: skip
    for base in ("dense", "dot"):
        cells_read = [(m, 0.01), (base, 0.01), (m, 1.0), (base, 1.0)]
        samples = [cells.get((32, v, fraction), []) for v, fraction in cells_read]
        names = [(v, f"{fraction:.0%}") for v, fraction in cells_read]
        rows.append(_interaction_row(
            f"attention/low_data/d32/{base}", "at d_model 32, under one stop rule (early stop or "
            f"the step cap), {name(m)}'s edge over {name(base)} is larger with 1% of the text than with all of it",
            samples, names, "at 1%", **{**fields, "protocol": LOW_DATA_PROTOCOL + capped,
                                        "notebook": "02, low data"}))  # fmt: skip
    return rows


def long_protocol(runs) -> str:
    """The long grid's protocol: the committed grid's rates, tuned as its runs say."""
    steps, seeds, *_ = tuning_schedule(runs)
    return (
        "2-layer, 8-head Transformer, d_model 128, character PTB, context 128, batch 32, "
        f"8,000 steps; each variant at the rate the committed grid chose ({steps} steps of "
        f"{seeds}, not at this budget), 3 seeds; validation bpc"
    )


def long_budget() -> list[dict]:
    """At eight times the committed budget (the ``long`` grid), "equal or better than
    dense": matroidal m=2d against dense with the same q/k sharing, on validation bpc."""
    runs = read("attention_long_runs.csv")
    if runs is None:
        return []
    from structattn_lite.studies.attention.grids import GRIDS

    finals = runs[~runs["tuning"].astype(bool) & (runs["part"] == "main")].sort_values("seed")
    tuning = GRIDS["committed"]  # how the rates it reads were tuned, there at 1,000 steps

    def cost(_, variants):
        """What tuning this row's two variants at 8,000 steps would cost: every rate of the
        committed sweep on its tuning seeds, at the pace of these finals."""
        pair = finals[finals["variant"].isin(variants)]
        n = len(variants) * len(tuning["lrs"]) * len(tuning["tune_seeds"])
        hours = n * float(pair["cpu_seconds"].median()) / 3600
        return {
            "untuned_cost": f" (about {n} tuning runs, {hours:.0f} CPU-hours at these "
            "runs' pace, more where a best rate sits at the sweep's edge)"
        }

    return _not_worse_than_dense(
        "attention/long/not_worse", "after 8,000 steps, ", "validation",
        lambda variant, _: finals.loc[finals["variant"] == variant, "val_bpc"].tolist(),
        fields_of=cost, protocol=long_protocol(runs), untuned=_untuned(runs),
        grid="long (attention)", notebook="02, at a longer budget",
        command="structattn run attention --grid long")  # fmt: skip


def fresh_finals(grid: str = "fresh"):
    """A fresh grid's final runs once every planned seed of every cell is in (the rows
    whose rules name the grid read these alone), else None. Its cells: the main
    variants on the full text, the low-data variants on its smallest fraction, and the
    bfloat16 variants."""
    from structattn_lite.studies.attention.grids import COMMITTED_CSV, CORE_VARIANTS, GRIDS

    runs = read(COMMITTED_CSV[grid][0])
    if runs is None:
        return None
    spec = GRIDS[grid]
    finals = runs[~runs["tuning"].astype(bool) & (runs["status"] != "failed")]
    expected = {
        ("main", 1.0, "float32"): spec["main"],
        ("stability", 1.0, "bfloat16"): spec["bf16"],
    }
    if spec["fractions"]:
        low = ("low data", min(spec["fractions"]), "float32")
        expected[low] = spec.get("low_data", CORE_VARIANTS)
    have = finals.groupby(["part", "fraction", "precision", "variant"])["seed"].agg(set)
    planned = set(spec["seeds"])
    complete = all(
        have.get((*cell, names.variant_key(kind, shared, factor)), set()) >= planned
        for cell, variants in expected.items() for kind, factor, shared in variants
    )  # fmt: skip
    return finals if complete else None


SMOOTHER_GROUPS = ("total", "layer0", "layer1", "metric")  # names.py says each in words


def attention() -> list[dict]:
    """The card's hypothesis, row by row, at the committed grid's budget: "equal or better
    validation loss with fewer metric parameters, smoother training, and no loss of
    stability relative to the dense baseline", most of all with little data or few
    parameters. Each row's rule names the difference it reads and its sign."""
    runs = read("attention_runs.csv")
    if runs is None:
        return []
    finals = runs[~runs["tuning"].astype(bool)]
    protocol = committed_protocol(runs)
    untuned = _untuned(runs)
    read_on = _fresh_reader()

    def attention_row(ident, *args, **fields):
        """A row read on the fresh seeds its rule names once they are all in."""
        fields = {"protocol": protocol, "untuned": untuned, **read_on(ident)[1], **fields}
        return _attention_row(ident, *args, **fields)  # fmt: skip

    def col(part, variant, column, fraction=1.0, precision="float32", ident=None):
        """Per-seed values of one cell, from the fresh seeds when ``ident``'s rule names
        them and they are all in, else from the committed grid's."""
        fresh = None if ident is None else read_on(ident)[0]
        frame = finals if fresh is None else fresh
        pick = frame[(frame["part"] == part) & (frame["variant"] == variant)
                     & (frame["fraction"] == fraction) & (frame["precision"] == precision)]  # fmt: skip
        return pick.sort_values("seed")[column].tolist()  # fmt: skip

    m = "matroidal m=2d"
    rows = []
    for ident, mat, dense in (("shared", m, "dense"), ("sep", f"{m} (sep q/k)", "dense (sep q/k)")):
        key = f"attention/not_worse/{ident}"
        a, b = col("main", dense, "val_bpc", ident=key), col("main", mat, "val_bpc", ident=key)
        bpc = rule_of(key).delta
        rows.append(attention_row(
            key, f"{name(mat)}: validation bpc equal to or better "
            f"than {name(dense)} (within {bpc})",
            lambda delta, a=a, b=b: stats.difference(a, b, delta=delta, claim="not_worse"),
            {dense: a, mat: b}, seeds=min(len(a), len(b)), test="noninferiority"))  # fmt: skip
        for group in SMOOTHER_GROUPS:  # the whole model, each layer, the metric
            key = f"attention/smoother/{ident}" + ("" if group == "total" else f"/{group}")
            a = col("main", mat, f"gnv_{group}", ident=key)
            b = col("main", dense, f"gnv_{group}", ident=key)
            rows.append(attention_row(
                key,
                f"{name(mat)}: smoother training than {name(dense)} (lower gradient-norm variance after "
                f"warmup, {name(group)})",
                lambda delta, a=a, b=b: stats.difference(a, b, delta=delta, claim="less", log=True),
                {mat: a, dense: b}, seeds=min(len(a), len(b)), test="log_ratio"))  # fmt: skip
    ours, dense = col("main", m, "params_metric"), col("main", "dense", "params_metric")
    fewer = ours[0] < dense[0] if ours and dense else None
    # what the two rows below (a count, not a difference) share with the card's other rows
    card = dict(study="attention", source="the attention card", protocol=protocol,
                grid="committed (attention)", command=ATTENTION_COMMAND)  # fmt: skip
    rows.append(row(
        test="count", id="attention/fewer_parameters", claim=f"{name(m)} has fewer metric parameters than "
        f"{name('dense')}", ours=ours[0] if ours else math.nan, seeds=len(ours),
        verdict=stats.REPRODUCED if fewer else stats.NOT_REPRODUCED if fewer is False else
        stats.UNDECIDED, reason=f"{ours[0]:.0f} against {dense[0]:.0f} metric parameters"
        if ours and dense else "not run", notebook="02, parameters and FLOPs",
        **card))  # fmt: skip
    matroidal = finals[finals["kind"] == "matroidal"]
    bad = int((matroidal["fast_nonfinite"] + matroidal["audit_nonfinite_logits"] > 0).sum())
    rows.append(row(
        test="count", id="attention/stable/nonfinite", claim="no non-finite attention logits in any matroidal run",
        ours=bad, seeds=len(matroidal), verdict=stats.REPRODUCED if bad == 0 and len(matroidal) >=
        stats.MIN_SEEDS else stats.NOT_REPRODUCED if bad else stats.UNDECIDED,
        reason=f"{bad} of {len(matroidal)} matroidal runs had a non-finite logit",
        notebook="02, numerical audit", **card))  # fmt: skip
    key = "attention/stable/saturated"
    share = {v: [s / r for s, r in zip(col("main", v, "fast_saturated_rows", ident=key),
                                       col("main", v, "fast_rows", ident=key), strict=True)]
             for v in ("dense", m)}  # fmt: skip
    rows.append(attention_row(
        key, f"{name(m)} saturates no more attention rows than {name('dense')} "
        "(share of softmax rows whose largest weight is 1 to working precision)",
        lambda delta: stats.difference(share[m], share["dense"], delta=delta, claim="not_more",
                                       spec="+.2e"),
        share, seeds=len(share[m]), notebook="02, numerical audit", test="noninferiority"))  # fmt: skip
    key = "attention/stable/bfloat16"
    shift = {v: [x - y for x, y in zip(col("stability", v, "val_bpc", precision="bfloat16", ident=key),
                                       col("main", v, "val_bpc", ident=key), strict=False)]
             for v in ("dense", m)}  # fmt: skip
    rows.append(attention_row(
        key, f"{name(m)} loses no more to bfloat16 autocast than {name('dense')} "
        f"(shift of validation bpc, same seeds, within {rule_of(key).delta})",
        lambda delta: stats.difference(shift["dense"], shift[m], delta=delta, claim="not_worse"),
        shift, seeds=len(shift[m]), test="noninferiority"))  # fmt: skip
    for base in ("dense", "dot"):
        key = f"attention/low_data/{base}"
        low = [col("low data", v, "val_bpc", fraction=0.01, ident=key) for v in (m, base)]
        full = [col("main", v, "val_bpc", ident=key) for v in (m, base)]
        rows.append(_interaction_row(
            key, f"{name(m)}'s edge over {name(base)} is larger with 1% of the "
            "text than with all of it", low + full, [(m, "1%"), (base, "1%"), (m, "100%"),
            (base, "100%")], "at 1%", protocol=protocol + "; 1% and 100% of the "
            "text", notebook="02, low data", untuned=untuned, **read_on(key)[1]))  # fmt: skip
    rows += long_budget()
    rows += low_parameters()
    sizes = {k: col("main", f"matroidal m={k}", "val_bpc") for k in ("1d", "2d", "4d")}
    best, runner = sorted(sizes, key=lambda k: sum(sizes[k]) / max(len(sizes[k]), 1))[:2]
    rows.append(attention_row(
        "attention/best_m", f"one support size m is best (lowest validation bpc: m={best}, "
        f"against the next best, m={runner})",
        lambda delta: stats.difference(sizes[best], sizes[runner], delta=delta, claim="less"),
        {f"m={k}": v for k, v in sizes.items()}, seeds=len(sizes[best]), test="superiority"))  # fmt: skip
    key = "attention/pruning"
    unpruned, pruned = col("main", m, "val_bpc"), col("main", m, "prune_val_bpc_0.5")
    rows.append(_attention_row(  # one variant against itself: the tuning rule has no say
        key, f"{name(m)} keeps its validation bpc (within {rule_of(key).delta}) with half its "
        "coefficients pruned and a short fine-tune",
        lambda delta: stats.difference(pruned, unpruned, delta=delta, claim="not_more", paired=True),
        {"unpruned": unpruned, "half pruned": pruned}, seeds=len(pruned),
        protocol=protocol, test="paired_noninferiority"))  # fmt: skip
    key = "attention/digits"
    a, b = col("digits", m, "test_acc"), col("digits", "dense", "test_acc")
    rows.append(attention_row(
        key, f"{name(m)} classifies 8x8 digits as well as {name('dense')} (test accuracy "
        f"within {rule_of(key).delta})",
        lambda delta: stats.difference(a, b, delta=delta, claim="not_worse"),
        {m: a, "dense": b}, seeds=len(a), untuned=_untuned(runs, "digits"), test="noninferiority",
        protocol="digits as 4x4 patch tokens, 400 steps, 5 seeds; test accuracy"))  # fmt: skip
    return rows
