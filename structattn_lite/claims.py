"""The claims ledger: every published claim the study tests, one row each, decided from
the committed records in ``data/results/`` by the rules of ``stats``.

``ledger()`` builds the table; ``write()`` saves it as ``data/results/claims.csv`` and
``markdown()`` renders it for the README and the notebooks. Nothing here reads a run
store or trains: the table is a function of the committed files alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from structattn_lite import stats
from structattn_lite.config import results_dir

CLAIMS_CSV = "claims.csv"
COLUMNS = [
    "id", "study", "claim", "source", "published", "ours", "low", "high", "seeds",
    "verdict", "reason", "rule", "protocol", "grid", "notebook", "command",
]  # fmt: skip

TASK_NAME = {"parity": "parity", "mod3": "mod-3", "dyck1": "parentheses"}
METRIC = {"parity": "test_seq_acc", "mod3": "test_seq_acc", "dyck1": "test_seq_f1"}
METRIC_NAME = {"parity": "accuracy", "mod3": "accuracy", "dyck1": "F1"}
PAPER_TEXT = (
    "the text's model (d 64, 3 layers), 5,000/5,000/10,000 strings of length 16, 80/20 "
    "i.i.d. split, focal loss, Adam 1e-3 with plateau halving, up to 300 epochs, early stop "
    "once validation held 100% for 10 epochs"
)


def _read(name: str) -> pd.DataFrame | None:
    path = results_dir() / name
    return pd.read_csv(path) if path.exists() else None


def _row(**fields) -> dict:
    return {column: fields.get(column, math.nan) for column in COLUMNS}


def _equivalence_row(values: pd.Series, diverged: int, published: float, margin: float,
                     **fields) -> dict:  # fmt: skip
    verdict, reason = stats.equivalence(values.tolist(), published, margin, diverged=diverged)
    mean, low, high, n = stats.mean_interval(values.tolist())
    rule = f"equivalence, margin ±{margin}"
    return _row(published=published, ours=mean, low=low, high=high, seeds=n + diverged,
                verdict=verdict, reason=reason, rule=rule, **fields)  # fmt: skip


# --- the CSP paper: Tables 3 and 4 -------------------------------------------------------


def _table_rows(frame: pd.DataFrame | None, cells, grid: str, command: str, table: str):
    """One row per (cell, task): ``cells`` lists (claim words, selector, published)."""
    rows = []
    for ident, words, select, published, task in cells:
        runs = frame[select(frame) & (frame["task"] == task)] if frame is not None else None
        if runs is None:
            runs = pd.DataFrame(columns=[METRIC[task], "status"])
        diverged = runs["status"] == "diverged"  # its last evaluation is no trained model's
        values = runs.loc[~diverged, METRIC[task]].dropna()
        diverged = int(diverged.sum())
        rows.append(
            _equivalence_row(
                values,
                diverged,
                published,
                stats.ACCURACY_MARGIN,
                id=ident,
                study="CSP",
                claim=f"{words}: {TASK_NAME[task]} {METRIC_NAME[task]} {published:.2f}",
                source=f"CSP paper, Table {table}",
                protocol=PAPER_TEXT,
                grid=grid,
                notebook="04, Tables 3 and 4",
                command=command,
            )  # fmt: skip
        )
    return rows


def table3() -> list[dict]:
    from structattn_lite.studies.ablations.experiment import PAPER_TABLE3

    words = {"focal": "focal loss", "ce": "cross-entropy instead of focal loss"}
    cells = [
        (f"table3/{loss}/{task}", words[loss], _selector(loss=loss), PAPER_TABLE3[loss, task], task)
        for loss in ("focal", "ce")
        for task in TASK_NAME
    ]
    command = "structattn run ablations --grid paper_text --seed-batching"
    return _table_rows(_read("csp_ablations_paper_text.csv"), cells, "paper_text", command, "3")


def _selector(**equal) -> Callable[[pd.DataFrame], pd.Series]:
    def select(frame: pd.DataFrame) -> pd.Series:
        mask = pd.Series(True, index=frame.index)
        for column, value in equal.items():
            mask &= frame[column] == value
        return mask

    return select


ROW_WORDS = {
    "base": "Base (no SiLU, skip or norm)", "+silu": "+SiLU (inside every step)",
    "+skip": "+Skip", "+norm": "+Norm (the full model)",
    "layernorm": "LayerNorm instead of the complex norm",
}  # fmt: skip


def table4() -> list[dict]:
    """Table 4's nine rows; the full rotated model is Table 3's focal runs (shared)."""
    from structattn_lite.studies.ablations.experiment import PAPER_TABLE4

    ablated = _read("csp_ablations_paper_table4.csv")
    full = _read("csp_ablations_paper_text.csv")
    if full is not None:
        full = full[full["loss"] == "focal"]
    frame = pd.concat([f for f in (ablated, full) if f is not None]) if (
        ablated is not None or full is not None) else None  # fmt: skip
    cells = []
    for (rotation, variant), numbers in PAPER_TABLE4.items():
        for task, published in zip(TASK_NAME, numbers, strict=True):
            if math.isnan(published):
                continue
            words = f"{ROW_WORDS[variant]}, {rotation} rotation"
            select = _selector(rotation=rotation, variant=variant, preset="paper")
            cells.append((f"table4/{rotation}/{variant}/{task}", words, select, published, task))
    command = "structattn run ablations --grid paper_table4 --seed-batching"
    return _table_rows(frame, cells, "paper_table4 (+ paper_text)", command, "4")


# --- the CSP paper: grokking gap and gradient-norm spike ----------------------------------

GAP_METRIC = "test_seq_acc"
CHANCE = {"parity": 0.5, "mod3": 2 / 3, "dyck1": 0.5}  # majority class of the whole string
PLATEAU_ABOVE_CHANCE = 0.1  # an epoch "at chance" scores below chance + this
PLATEAU_EPOCHS = 2  # a grokking phase: at least this many epochs at chance before the jump
SPIKE_WINDOW = 2  # a spike "at the jump" falls within this many epochs of it


def seed_gaps(history: pd.DataFrame, task: str) -> dict:
    """One seed's jump (first epoch at 90%), the gaps to 99% and 100% (None: not reached),
    whether it sat at chance before the jump, and its spike's offset from the jump."""
    acc = history[GAP_METRIC].tolist()
    epochs = history["epoch"].tolist()
    first = {lvl: next((e for e, a in zip(epochs, acc, strict=True) if a >= lvl), None)
             for lvl in (0.9, 0.99, 1.0)}  # fmt: skip
    jump = first[0.9]
    before = [a for e, a in zip(epochs, acc, strict=True) if jump is None or e < jump]
    plateau = sum(a < CHANCE[task] + PLATEAU_ABOVE_CHANCE for a in before) >= PLATEAU_EPOCHS
    spike = int(history.loc[history["grad_norm_max"].idxmax(), "epoch"])
    return {
        "jump": jump,
        "last": epochs[-1],
        "gap_99": None if jump is None or first[0.99] is None else first[0.99] - jump,
        "gap_100": None if jump is None or first[1.0] is None else first[1.0] - jump,
        "plateau": plateau,
        "spike_offset": None if jump is None else spike - jump,
    }


def gap_verdict(seeds: pd.DataFrame, paper: tuple[float, float], column: str):
    """(ours, low, high, verdict, reason) of one task's gap at one threshold."""
    from structattn_lite.studies.grokking.experiment import PAPER_SEEDS

    jumped = seeds[seeds["jump"].notna()]
    reached = jumped[column].notna()
    times = jumped[column].where(reached, jumped["last"] - jumped["jump"]).astype(float)
    median = stats.km_median(times, reached)
    k, n = int(reached.sum()), len(seeds)
    mean, low, high, _ = stats.mean_interval(jumped.loc[reached, column].astype(float))
    level = column.split("_")[1]
    counts = f"{k} of {n} seeds reached {level}%, KM median {median:g} epochs"
    if int(seeds["plateau"].sum()) < stats.MIN_SEEDS:
        sat = int(seeds["plateau"].sum())
        return (
            mean,
            low,
            high,
            stats.UNDECIDED,
            (f"no grokking phase to measure: {sat} of {n} seeds at chance before the jump"),
        )
    if 2 * k < n:
        return mean, low, high, stats.NOT_REPRODUCED, f"{counts} (the paper: all of 10)"
    if k < stats.MIN_SEEDS:
        return mean, low, high, stats.UNDECIDED, f"{counts}, fewer than {stats.MIN_SEEDS}"
    _, dlow, dhigh = stats.welch_difference(
        stats.summary(jumped.loc[reached, column].astype(float)), (*paper, PAPER_SEEDS)
    )
    margin = paper[1]
    text = f"{counts}; Welch ours - paper [{dlow:+.1f}, {dhigh:+.1f}], margin ±{margin}"
    if dhigh < -margin or dlow > margin:
        return mean, low, high, stats.NOT_REPRODUCED, text
    if k == n and -margin <= dlow and dhigh <= margin:
        return mean, low, high, stats.REPRODUCED, text
    return mean, low, high, stats.UNDECIDED, text


MODEL_WORDS = {"paper": "the text's model", "authors_3bb9f71": "the authors' CSP (3bb9f71)"}


def grokking() -> list[dict]:
    from structattn_lite.studies.grokking.experiment import PAPER_GROKKING_GAP, committed_records

    records = committed_records("gap")
    per_seed = pd.DataFrame(
        [{"task": r.config["task"], "preset": r.config["preset"], "seed": r.seed,
          **seed_gaps(r.history, r.config["task"])} for r in records if len(r.history)]
    )  # fmt: skip
    protocol = PAPER_TEXT.replace("the text's model", "each model")
    command = "structattn run grokking --grid gap --seed-batching"
    rows = []
    for preset in MODEL_WORDS:
        for task, paper in PAPER_GROKKING_GAP.items():
            seeds = per_seed[(per_seed["task"] == task) & (per_seed["preset"] == preset)]
            if seeds.empty:
                continue
            ours, low, high, verdict, reason = gap_verdict(seeds, paper, "gap_100")
            *_, reason_99 = gap_verdict(seeds, paper, "gap_99")
            rows.append(_row(
                id=f"gap/{preset}/{task}", study="CSP",
                claim=f"grokking gap (90% to 100% test accuracy), {TASK_NAME[task]}, "
                      f"{MODEL_WORDS[preset]}: {paper[0]} ± {paper[1]} epochs",
                source="CSP paper, section 4.2.1", published=paper[0], ours=ours, low=low,
                high=high, seeds=len(seeds), verdict=verdict,
                reason=f"{reason} (at 99%: {reason_99.split(';')[0]})",
                rule="gap: Welch vs the paper, margin ± its sd; censored seeds (KM)",
                protocol=protocol, grid="gap", notebook="03, grokking gap", command=command,
            ))  # fmt: skip
            jumped = seeds[seeds["jump"].notna()]
            at = int((jumped["spike_offset"].abs() <= SPIKE_WINDOW).sum())
            verdict, reason = stats.majority(at, len(jumped), f"spike within ±{SPIKE_WINDOW} "
                                             "epochs of the 90% jump")  # fmt: skip
            rows.append(_row(
                id=f"spike/{preset}/{task}", study="CSP",
                claim=f"the largest gradient norm coincides with the jump, {TASK_NAME[task]}, "
                      f"{MODEL_WORDS[preset]}",
                source="CSP paper, section 4.2.1", ours=at / max(len(jumped), 1),
                low=stats.share_interval(at, len(jumped))[0] if len(jumped) else math.nan,
                high=stats.share_interval(at, len(jumped))[1] if len(jumped) else math.nan,
                seeds=len(jumped), verdict=verdict, reason=reason,
                rule="majority of seeds (Clopper-Pearson)", protocol=protocol, grid="gap",
                notebook="03, gradient-norm spikes", command=command,
            ))  # fmt: skip
    return rows


# --- the authors' README length table, and the wider field ------------------------------


def authors_length() -> list[dict]:
    from structattn_lite.studies.length.authors import AUTHORS_TASK
    from structattn_lite.studies.length.report import AUTHORS

    curves = _read("length_authors.csv.gz")
    rows = []
    for task, name in AUTHORS_TASK.items():
        published = AUTHORS[name]["CSP-Vanilla"]
        for length, number in zip((16, 32, 64), published, strict=True):
            at = curves[(curves["task"] == task) & (curves["length"] == length)] if (
                curves is not None) else pd.DataFrame(columns=["all_acc", "status"])  # fmt: skip
            rows.append(_equivalence_row(
                at["all_acc"].dropna(), 0, number, stats.ACCURACY_MARGIN,
                id=f"authors/{name}/L{length}", study="CSP",
                claim=f"CSP-Vanilla, {TASK_NAME[name]}, accuracy over all positions at "
                      f"L = {length}: {number:.3f}",
                source="the authors' README (hilhert/CSP)",
                protocol="the authors' code and protocol: their model and revision per task, "
                         "cross-entropy on every prefix, Adam 1e-4 with cosine, 300 epochs, "
                         "10,000 strings at T = 16, 80/20 i.i.d.",
                grid="authors", notebook="05, the authors' length table",
                command="structattn run length --grid authors --seed-batching",
            ))  # fmt: skip
    return rows


WIDER_FIELD = [  # (id, model, claim, source, published, verdict override)
    ("grazzi/diag_rnn", "diag_rnn",
     "a diagonal linear RNN with eigenvalues in [0, 1] fails parity at length (chance, 0.5)",
     "Grazzi et al., negative eigenvalues", 0.5),
    ("grazzi/diag_rnn_neg", "diag_rnn_neg",
     "the same RNN with eigenvalues in [-1, 1] solves parity at length (1.0)",
     "Grazzi et al., negative eigenvalues", 1.0),
    ("chomsky/lstm", "lstm", "an LSTM solves parity at length (1.0)",
     "Deletang et al., Neural Networks and the Chomsky Hierarchy", 1.0),
    ("chomsky/gru", "gru", "a gated RNN (here a GRU) solves parity at length (1.0)",
     "Deletang et al., Neural Networks and the Chomsky Hierarchy", 1.0),
    ("chomsky/transformer", "transformer", "a Transformer does not: parity at length 0.52",
     "Deletang et al., Neural Networks and the Chomsky Hierarchy", 0.52),
]  # fmt: skip


def wider_field() -> list[dict]:
    """Parity far past the training length. Ours trains on length 16 only and scores at
    256; both papers train on lengths up to 40. A claim that a model solves parity holds a
    fortiori under our shorter training, but a failure here does not refute it."""
    curves = _read("length_generalization.csv.gz")
    longest = curves["length"].max() if curves is not None else 256
    rows = []
    for ident, model, words, source, published in WIDER_FIELD:
        at = curves[(curves["task"] == "parity") & (curves["model"] == model) &
                    (curves["length"] == longest)] if curves is not None else pd.DataFrame(
            columns=["seq_acc"])  # fmt: skip
        row = _equivalence_row(
            at["seq_acc"].dropna(), 0, published, stats.LENGTH_MARGIN, id=ident, study="wider",
            claim=f"{words}", source=source,
            protocol=f"ours: trained at T = 16 on 10,000 strings (disjoint split), whole-string "
                     f"accuracy at L = {longest}; theirs trains on lengths up to 40",
            grid="committed (length)", notebook="05, baselines at length",
            command="structattn run length --grid committed --seed-batching",
        )  # fmt: skip
        if published == 1.0 and row["verdict"] == stats.NOT_REPRODUCED:
            # Trained on length 16 only, a model that fails has not been tried as they did.
            row["verdict"] = stats.UNDECIDED
            row["reason"] = f"fails at our protocol ({row['ours']:.2f}), not run at theirs"
        rows.append(row)
    return rows


# --- the attention card -----------------------------------------------------------------

ATTENTION_PROTOCOL = (
    "2-layer, 8-head Transformer, d_model 128, character PTB, context 128, batch 32, "
    "1,000 steps; each variant's rate chosen on validation over 600 steps of one seed "
    "(not at this budget), then 5 seeds; validation bpc"
)
ATTENTION_COMMAND = "structattn run attention --grid committed"


def _attention_row(ident: str, words: str, result, rule: str, **fields) -> dict:
    (diff, low, high), verdict, reason = result
    return _row(id=ident, study="attention", claim=words, source="the attention card",
                ours=diff, low=low, high=high, verdict=verdict, reason=reason, rule=rule,
                protocol=fields.pop("protocol", ATTENTION_PROTOCOL), grid="committed (attention)",
                notebook="02, the card's hypothesis", command=ATTENTION_COMMAND,
                **fields)  # fmt: skip


def attention() -> list[dict]:
    """The card's hypothesis, row by row, at the committed grid's budget: "equal or better
    validation loss with fewer metric parameters, smoother training, and no loss of
    stability relative to the dense baseline", most of all with little data or few
    parameters. Each row's rule names the difference it reads and its sign."""
    runs = _read("attention_runs.csv")
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
            not_worse, seeds=min(len(a), len(b))))  # fmt: skip
        a, b = col("main", mat, "gnv_total"), col("main", dense, "gnv_total")
        rows.append(_attention_row(
            f"attention/smoother/{ident}", f"{mat}: smoother training than {dense} (lower "
            "gradient-norm variance after warmup)", stats.difference(a, b, claim="less"),
            "matroidal minus baseline, Welch; below 0", seeds=min(len(a), len(b))))  # fmt: skip
    ours, dense = col("main", m, "params_metric"), col("main", "dense", "params_metric")
    fewer = ours[0] < dense[0] if ours and dense else None
    rows.append(_row(
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
    rows.append(_row(
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
        seeds=len(shift[m])))  # fmt: skip
    for base in ("dense", "dot"):
        low = [col("low data", v, "val_bpc", fraction=0.01) for v in (m, base)]
        full = [col("main", v, "val_bpc") for v in (m, base)]
        diff, lo, hi = stats.interaction(*low, *full)
        verdict = (stats.UNDECIDED if math.isnan(lo) else stats.REPRODUCED if hi < 0 else
                   stats.NOT_REPRODUCED if lo > 0 else stats.UNDECIDED)  # fmt: skip
        rows.append(_row(
            id=f"attention/low_data/{base}", study="attention", source="the attention card",
            claim=f"{m}'s edge over {base} is larger with 1% of the text than with all of it",
            ours=diff, low=lo, high=hi, seeds=min(len(x) for x in low + full), verdict=verdict,
            reason=f"interaction {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] (negative: larger edge "
            "at 1%)", rule="interaction, Welch-Satterthwaite interval below 0",
            protocol=ATTENTION_PROTOCOL + "; 1% and 100% of the text", grid="committed "
            "(attention)", notebook="02, low data", command=ATTENTION_COMMAND))  # fmt: skip
    rows.append(_row(
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
            seeds=len(sizes[best]),
        )
    )
    pruned = col("main", m, "prune_val_bpc_0.5")
    rows.append(_attention_row(
        "attention/pruning", f"{m} keeps its validation bpc (within {bpc}) with half its "
        "coefficients pruned and a short fine-tune", stats.difference(
            col("main", m, "val_bpc"), pruned, margin=bpc, claim="not_worse"),
        f"unpruned minus pruned, Welch; 'not worse' when above -{bpc} bpc",
        seeds=len(pruned)))  # fmt: skip
    a, b = col("digits", m, "test_acc"), col("digits", "dense", "test_acc")
    rows.append(_attention_row(
        "attention/digits", f"{m} classifies 8x8 digits as well as dense (test accuracy "
        f"within {stats.ACCURACY_MARGIN})", stats.difference(
            a, b, margin=stats.ACCURACY_MARGIN, claim="not_worse"),
        f"matroidal minus dense, Welch; 'not worse' when above -{stats.ACCURACY_MARGIN}",
        seeds=len(a),
        protocol="digits as 4x4 patch tokens, 400 steps, 5 seeds; test accuracy"))  # fmt: skip
    return rows


# --- the table --------------------------------------------------------------------------

SECTIONS: list[Callable[[], list[dict]]] = [table3, table4, grokking, authors_length,
                                             wider_field, attention]  # fmt: skip


def ledger() -> pd.DataFrame:
    """Every claim's row, computed from the committed records (rounded as written)."""
    table = pd.DataFrame([row for section in SECTIONS for row in section()], columns=COLUMNS)
    for column in ("published", "ours", "low", "high"):
        table[column] = table[column].astype(float).round(4)
    table["seeds"] = table["seeds"].astype(int)
    return table


def path() -> Path:
    return results_dir() / CLAIMS_CSV


def write() -> Path:
    ledger().to_csv(path(), index=False)
    return path()


def committed() -> pd.DataFrame:
    return pd.read_csv(path())


def _cell(x: float, digits: int = 3) -> str:
    return "" if pd.isna(x) else f"{x:.{digits}f}"


def markdown(table: pd.DataFrame | None = None, prefixes: tuple[str, ...] = ()) -> str:
    """The ledger as a Markdown table: claim, published, ours [95% interval] (seeds),
    verdict and its reason (the rule and protocol columns stay in the CSV); only the
    rows whose id starts with one of ``prefixes`` ("table4", "gap", ...), if given."""
    table = ledger() if table is None else table
    if prefixes:
        table = table[table["id"].str.split("/").str[0].isin(prefixes)]
    lines = ["| claim | source | published | ours [95% interval] (seeds) | verdict | reason |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for _, r in table.iterrows():
        ours = _cell(r["ours"]) or "–"
        if not pd.isna(r["low"]) and r["low"] != r["high"]:
            ours += f" [{_cell(r['low'])}, {_cell(r['high'])}]"
        lines.append(
            f"| {r['claim']} | {r['source']} | {_cell(r['published'], 2)} | {ours} "
            f"({r['seeds']}) | **{r['verdict']}** | {r['reason']} |"
        )
    return "\n".join(lines)


def counts(table: pd.DataFrame | None = None) -> dict[str, int]:
    table = ledger() if table is None else table
    return {v: int((table["verdict"] == v).sum()) for v in stats.VERDICTS}
