"""The README's "What we found": the verdicts counted by source, "In short" (each line
citing the ledger rows it rests on), four figures; and ``LEDGER.md``, the whole ledger
with the rules that decided it.

Everything here is rendered from ``data/results`` through ``claims.ledger()``.
``structattn findings --write`` rewrites ``data/results/claims.csv``, the four figures
(``figures/findings_*.png``), ``LEDGER.md`` and the README section between its markers;
tests fail when any of them differs from what the committed records give, or when an
"In short" line states a verdict its rows do not have.
"""

from __future__ import annotations

import csv
import fnmatch
import gzip
import io
import os
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from structattn_lite import claims, files, names, schemas, stats
from structattn_lite.claims.rows import diverged_seeds
from structattn_lite.claims.rules import CONFIRMATORY, EXPLORATORY
from structattn_lite.claims.rules import rule as rule_of
from structattn_lite.config import figures_dir, repo_root, results_dir
from structattn_lite.names import display_name
from structattn_lite.report import (
    BAND,
    VERDICT_COLOR,
    figure_bytes,
    figure_size,
    length_panel,
    plot_ours,
    save_figure,
)
from structattn_lite.studies.grokking.report import GAP_METRIC, LEVELS, seed_curves
from structattn_lite.studies.grokking.results import committed_records
from structattn_lite.studies.length.grids import AUTHORS_TASK, GRIDS

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
LEDGER_MD = "LEDGER.md"  # the whole ledger, at the repository's root

TEXT, AUTHORS = display_name("paper"), display_name("authors_3bb9f71")
# "In short": (topic, the sentence, the ledger ids or fnmatch patterns it rests on). Our
# reading of the rows, but the rows decide: a line's verdict is the one verdict its rows
# share (a line whose rows disagree is refused), and its numbers are the rows' own,
# written ``{id|column:format}`` (``{id|reached}``: a gap row's "k of n" seeds at 100%).
IN_SHORT = [
    ("CSP, the paper's tables",
     "The full model (rotation, SiLU, skip and the complex norm) learns parity, mod-3 and "
     "parentheses as Tables 3 and 4 report (no seed of 10 below 0.98 on any task).",
     ["table3/focal/*", "table4/with/+norm/*"]),
    ("CSP, the paper's tables",
     "Every Table 4 row with no normalization at all (base, +SiLU, +skip) diverges at the "
     "paper's settings (a non-finite loss on every seed), with rotation or without.",
     ["table4/*/base/*", "table4/*/+silu/*", "table4/*/+skip/*"]),
    ("CSP, the paper's tables",
     "The full model without rotation solves all three tasks, where the paper has it fail, "
     "so \"rotation is the core inductive bias\" does not reproduce: with minus without is "
     "{ablation/rotation/parity|ours:+.3f} on parity, {ablation/rotation/mod3|ours:+.3f} on "
     "mod-3, well inside the 0.02 a gain would need.",
     ["table4/without/+norm/*", "ablation/rotation/*"]),
    ("CSP, the paper's tables",
     "With LayerNorm instead of the complex norm it solves parentheses, where the paper has "
     "F1 0; on parity and mod-3 it stays at chance (notebook 04; the paper prints no number "
     "there, so those cells are no ledger rows).", ["table4/with/layernorm/dyck1"]),
    ("CSP, the paper's tables",
     "Section 3.3.2 on the full model, on fresh runs after their rules: taking the skip out "
     "costs no accuracy on any task (with minus without: {ablation/skip_in_full/parity|ours:+.3f} "
     "on parity, {ablation/skip_in_full/mod3|ours:+.3f} on mod-3, "
     "{ablation/skip_in_full/dyck1|ours:+.3f} on parentheses), and neither does moving the SiLU "
     "inside every step on mod-3 and parentheses.",
     ["ablation/skip_in_full/*", "ablation/step_silu_in_full/mod3",
      "ablation/step_silu_in_full/dyck1"]),
    ("CSP, the paper's tables",
     "Section 2.3's claim that rotating each complex dimension on its own beats RoPE-style "
     "pairwise rotation does not hold on mod-3 and parentheses, on runs trained after its "
     "rule: both forms solve them (element-wise minus pairwise: "
     "{ablation/rotation_elementwise/mod3|ours:+.3f} "
     "[{ablation/rotation_elementwise/mod3|low:+.3f}, "
     "{ablation/rotation_elementwise/mod3|high:+.3f}] on mod-3, "
     "{ablation/rotation_elementwise/dyck1|ours:+.3f} on parentheses).",
     ["ablation/rotation_elementwise/mod3", "ablation/rotation_elementwise/dyck1"]),
    ("CSP, the paper's tables",
     "On parity it stays undecided: element-wise minus pairwise is "
     "{ablation/rotation_elementwise/parity|ours:+.3f} "
     "[{ablation/rotation_elementwise/parity|low:+.3f}, "
     "{ablation/rotation_elementwise/parity|high:+.3f}], the pairwise seeds too spread to say.",
     ["ablation/rotation_elementwise/parity"]),
    ("CSP, the paper's tables",
     "On parity the per-step SiLU's loss ({ablation/step_silu_in_full/parity|ours:+.3f}, "
     "interval up to {ablation/step_silu_in_full/parity|high:+.3f}) is too uncertain to say "
     "whether it reaches 0.02.", ["ablation/step_silu_in_full/parity"]),
    ("CSP, the paper's tables",
     "Trained with cross-entropy instead of focal loss, the model still solves mod-3 and "
     "parentheses, where Table 3 prints failures (parity has no published number); focal "
     "loss gains nothing over it here.",
     ["table3/ce/mod3", "table3/ce/dyck1", "ablation/focal_vs_ce/*"]),
    ("CSP, grokking",
     f"{TEXT} does not show the paper's short gaps from 90% to 100% test accuracy: on parity "
     "{gap/paper/parity|reached} seeds reach 100%, on mod-3 {gap/paper/mod3|reached}.",
     ["gap/paper/parity", "gap/paper/mod3"]),
    ("CSP, grokking",
     f"{AUTHORS} reaches 100% on parity in {{gap/authors_3bb9f71/parity|reached}} seeds, but "
     "its mean gap from 90% to 100%, {gap/authors_3bb9f71/parity|ours:.1f} epochs "
     "[{gap/authors_3bb9f71/parity|low:.1f}, {gap/authors_3bb9f71/parity|high:.1f}], is "
     "longer than the paper's 3.2 ± 1.2.", ["gap/authors_3bb9f71/parity"]),
    ("CSP, grokking",
     "On parentheses neither model sits at chance before its jump, so there is no gap to "
     f"measure; on mod-3 the gap of {AUTHORS}, {{gap/authors_3bb9f71/mod3|ours:.1f}} epochs "
     "[{gap/authors_3bb9f71/mod3|low:.1f}, {gap/authors_3bb9f71/mod3|high:.1f}] over the "
     "seeds that reach 100% ({gap/authors_3bb9f71/mod3|reached}), straddles the edge of the "
     "paper's 8.4 ± 2.1.",
     ["gap/paper/dyck1", "gap/authors_3bb9f71/dyck1", "gap/authors_3bb9f71/mod3"]),
    ("CSP, grokking",
     f"On parity and mod-3 the largest gradient norm of {TEXT} does not mark the jump: "
     "fewer than half its seeds spike there...", ["spike/paper/parity", "spike/paper/mod3"]),
    ("CSP, grokking",
     "...and for the authors' model on parity and mod-3, whether it does stays undecided; "
     "on parentheses no seed sits at chance before the jump, so there is nothing for a "
     "spike to mark.",
     ["spike/paper/dyck1", "spike/authors_3bb9f71/*"]),
    ("CSP, grokking",
     "The paper's curves do not read as it says: parentheses learn first, not last (first "
     "epoch at 90%, parentheses minus parity: {csp/convergence/order|ours:+.0f} epochs), and "
     "they never sit at chance before it.",
     ["csp/convergence/order", "csp/plateau/dyck1"]),
    ("CSP, grokking",
     "Mod-3 sits at chance for {csp/plateau/mod3|ours:.0f} epochs "
     "[{csp/plateau/mod3|low:.0f}, {csp/plateau/mod3|high:.0f}] before its jump, within the "
     "margin of the paper's 'about 80', and its largest gradient norm falls at epoch "
     "{csp/grad_profile/mod3|ours:.0f} [{csp/grad_profile/mod3|low:.0f}, "
     "{csp/grad_profile/mod3|high:.0f}], within that of the paper's 'around 85'.",
     ["csp/plateau/mod3", "csp/grad_profile/mod3"]),
    ("CSP, grokking",
     "Whether the gap grows with the task's difficulty stays undecided: too few seeds reach "
     "100%.", ["csp/gap_order"]),
    ("CSP, length",
     "The authors' own length table holds at the training length, with their code at the "
     "revision behind each row, and past it for mod-3 and parentheses at L = 32...",
     ["authors/*/L16", "authors/mod3/L32", "authors/dyck1/L32"]),
    ("CSP, length",
     "...while parity at L = 32 and L = 64 and mod-3 and parentheses at L = 64 stay "
     "undecided. Parity at L = 64 was reproduced on seeds 0-9, read before its rule; on "
     "the fresh seeds 10-21 that decide it, one seed tracks parity perfectly at L = 64 and "
     "one falls further, so its interval, [{authors/parity/L64|low:.3f}, "
     "{authors/parity/L64|high:.3f}], is wider than the margin around the README's 0.72.",
     ["authors/parity/L32", "authors/parity/L64", "authors/mod3/L64", "authors/dyck1/L64"]),
    ("CSP, length",
     "The wider field's parity results at length reproduce at their protocol (lengths 1-40, "
     f"each rate chosen on longer validation strings): {display_name('lstm')}, "
     f"{display_name('gru')} and the {display_name('diag_rnn_neg')} hold; a "
     f"{display_name('transformer')} and a {display_name('diag_rnn')} fall to chance. "
     f"Trained at length 16 only, all but the {display_name('diag_rnn_neg')} read the same...",
     ["chomsky/*", "grazzi/diag_rnn", "grazzi/diag_rnn_neg", "grazzi/diag_rnn/at_T16"]),
    ("CSP, length",
     f"...where the {display_name('diag_rnn_neg')} stays at chance "
     "({grazzi/diag_rnn_neg/at_T16|ours:.2f}): a finding about the protocol; the claim is "
     "decided at theirs.",
     ["grazzi/diag_rnn_neg/at_T16"]),
    ("Matroidal attention",
     "What the card computes from the paper holds for every committed support: each is "
     "totally unimodular, and each metric is positive definite with eigenvalues at least "
     "eps for any weights.", ["theory/tu", "theory/psd"]),
    ("Matroidal attention",
     "With each rate chosen on validation at the budget it is judged at, matroidal m=2d has "
     "far fewer metric parameters than dense, no non-finite logits, and classifies the "
     "digits as well.",
     ["attention/fewer_parameters", "attention/stable/nonfinite", "attention/digits"]),
    ("Matroidal attention",
     f"With separate q/k it is not worse than {display_name('dense (sep q/k)')} (within the "
     "margin) on validation at d_model 128 and on test at 64 and 32.",
     ["attention/not_worse/sep", "attention/low_parameters/d64/sep",
      "attention/low_parameters/d32/sep"]),
    ("Matroidal attention",
     "With separate q/k its metric's gradient-norm variance is lower than dense's "
     "(log ratio {attention/smoother/sep/metric|ours:.2f})...",
     ["attention/smoother/sep/metric"]),
    ("Matroidal attention",
     "...while the whole model's and layer 0's stay undecided...",
     ["attention/smoother/sep", "attention/smoother/sep/layer0"]),
    ("Matroidal attention",
     "...and in layer 1 the two differ by less than the 25% in variance that would matter.",
     ["attention/smoother/sep/layer1"]),
    ("Matroidal attention",
     "With the shared projection, on the 12 fresh seeds its rule named, it is not worse than "
     "dense on validation at d_model 128: dense minus matroidal "
     "{attention/not_worse/shared|ours:+.3f} bpc [{attention/not_worse/shared|low:+.3f}, "
     "{attention/not_worse/shared|high:+.3f}]...",
     ["attention/not_worse/shared"]),
    ("Matroidal attention",
     "...but it is not smoother: in layer 0, layer 1 and the metric its gradient-norm "
     "variance is not 25% below dense's (log ratios {attention/smoother/shared/layer0|ours:+.2f}, "
     "{attention/smoother/shared/layer1|ours:+.2f}, {attention/smoother/shared/metric|ours:+.2f})...",
     ["attention/smoother/shared/layer0", "attention/smoother/shared/layer1",
      "attention/smoother/shared/metric"]),
    ("Matroidal attention",
     "...while the whole model's variance, and not-worse at d_model 64 (on the "
     "{attention/low_parameters/d64/shared|seeds:.0f} fresh seeds its rule named: dense minus "
     "matroidal {attention/low_parameters/d64/shared|ours:+.3f} bpc "
     "[{attention/low_parameters/d64/shared|low:+.3f}, "
     "{attention/low_parameters/d64/shared|high:+.3f}]), stay undecided.",
     ["attention/smoother/shared", "attention/low_parameters/d64/shared"]),
    ("Matroidal attention",
     "At d_model 32, on the 15 fresh seeds its rule named, it is not worse than dense on "
     "test: dense minus matroidal {attention/low_parameters/d32/shared|ours:+.3f} bpc "
     "[{attention/low_parameters/d32/shared|low:+.3f}, "
     "{attention/low_parameters/d32/shared|high:+.3f}].",
     ["attention/low_parameters/d32/shared"]),
    ("Matroidal attention",
     f"Its edge over {display_name('dot')} grows with less text, at d_model 128 and at 32.",
     ["attention/low_data/dot", "attention/low_data/d32/dot"]),
    ("Matroidal attention",
     "With half its coefficients pruned and a short fine-tune it keeps its validation bpc "
     "(paired by seed), and it saturates no more softmax rows than dense.",
     ["attention/pruning", "attention/stable/saturated"]),
    ("Matroidal attention",
     "Against dense, its edge does not grow with less text at d_model 128 by the 0.02 bpc "
     "that would matter (the card's low-data hypothesis): on the fresh seeds the edge with "
     "1% of the text minus the edge with all of it is {attention/low_data/dense|ours:+.3f} bpc "
     "[{attention/low_data/dense|low:+.3f}, {attention/low_data/dense|high:+.3f}].",
     ["attention/low_data/dense"]),
    ("Matroidal attention",
     "At d_model 32 that edge, the best support size, bfloat16, and whether the edge grows "
     "as the model shrinks stay undecided.",
     ["attention/low_data/d32/dense", "attention/best_m", "attention/stable/bfloat16",
      "attention/low_parameters", "attention/low_parameters/dot"]),
    ("Matroidal attention",
     "The 8,000-step rows stay undecided: no rate was tuned at that budget.",
     ["attention/long/*"]),
]  # fmt: skip


def cited_rows(table: pd.DataFrame, patterns: list[str]) -> pd.DataFrame:
    """The ledger rows whose id matches one of ``patterns`` (fnmatch, as "In short" cites
    them); a pattern that matches no row is an error naming it."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in table["id"]):
            raise ValueError(f"pattern {pattern!r} matches no id of the ledger")
    return table[[any(fnmatch.fnmatchcase(i, p) for p in patterns) for i in table["id"]]]


_FIELD = re.compile(r"\{([^{}|]+)\|([a-z_]+)(?::([^{}]+))?\}")
_REACHED = re.compile(r"(\d+ of \d+) seeds reached")


def line_verdict(table: pd.DataFrame, ids: list[str]) -> str:
    """The one verdict every row ``ids`` cites shares; rows that disagree are refused."""
    verdicts = set(cited_rows(table, ids)["verdict"])
    if len(verdicts) != 1:
        raise ValueError(f"the rows {ids} disagree ({sorted(verdicts)}); a line states one verdict")
    return verdicts.pop()


def line_text(table: pd.DataFrame, text: str) -> str:
    """``text`` with its ``{id|column:format}`` fields filled from the ledger's rows."""

    def fill(match: re.Match) -> str:
        ident, column, spec = match.groups()
        found = table[table["id"] == ident]
        if found.empty:
            raise ValueError(f"an In short line cites {ident!r}, which is no ledger row")
        r = found.iloc[0]
        if column == "reached":
            return _REACHED.search(r["reason"]).group(1)
        return format(r[column], spec or "")

    return _FIELD.sub(fill, text)


def in_short(table: pd.DataFrame | None = None) -> str:
    """The "In short" lines, grouped by topic: each with its verdict (its rows'), the
    numbers its rows give, how many of its rows are exploratory, and the ids it cites."""
    table = claims.ledger() if table is None else table
    lines, topic = [], None
    for about, text, ids in IN_SHORT:
        if about != topic:
            lines.append(f"- **{about}**")
            topic = about
        rows = cited_rows(table, ids)
        explored = int((rows["evidence"] == EXPLORATORY).sum())
        note = f" ({explored} of {len(rows)} rows exploratory)" if explored else ""
        cited = " ".join(f"`{i}`" for i in ids)
        verdict = line_verdict(table, ids)
        lines.append(f"  - *{verdict}*{note}: {line_text(table, text)} [{cited}]")
    return "\n".join(lines)


NOT_RUN = "not run yet"  # the reason of a claim no committed record decides (stats.decide)
FIGURES = ("findings_ledger", "findings_attention", "findings_grokking", "findings_length")


# Rows that read the same runs as another row and claim the same of them: counted once.
SAME_RUNS = {"table4/with/+norm/*": "table3/focal/*"}  # Table 4's full model is Table 3's runs


def verdict_counts(table: pd.DataFrame) -> pd.DataFrame:
    """One row per source of claims and one for all of them: how many claims, how many of
    each verdict, and how many confirmatory (the rule committed before the runs) and
    exploratory; a row that repeats another's claim on the same runs (``SAME_RUNS``) is
    counted once. A source ``names.SOURCE_GROUPS`` does not list is a group of its own."""
    repeated = cited_rows(table, list(SAME_RUNS))["id"]
    table = table[~table["id"].isin(repeated)]
    prefix = table["id"].str.split("/").str[0]
    group = [names.source_group(p, s) for p, s in zip(prefix, table["source"], strict=True)]
    groups = {words: table[[g == words for g in group]] for words in dict.fromkeys(group)}
    rows = [{"claims from": words, "claims": len(g), **claims.counts(g),
             CONFIRMATORY: int((g["evidence"] == CONFIRMATORY).sum()),
             EXPLORATORY: int((g["evidence"] == EXPLORATORY).sum())}
            for words, g in {**groups, "all sources": table}.items() if len(g)]  # fmt: skip
    return pd.DataFrame(rows)


def counts_note(table: pd.DataFrame) -> str:
    """What the counts leave out, in words."""
    pairs = [f"`{a}` repeats `{b}` on the same runs" for a, b in SAME_RUNS.items()]
    n = len(cited_rows(table, list(SAME_RUNS)))
    return (f"Counted once where two rows read the same runs for the same claim ({n} rows: "
            f"{'; '.join(pairs)}). *Confirmatory*: decided by a rule committed before its "
            "runs were read; *exploratory*: the rule came after (`structattn_lite/claims/"
            "rules.csv` says which, and which fresh seeds will confirm it).")  # fmt: skip


def _name(key: str) -> str:
    """A display name without its gloss ("+SiLU (inside every step)" -> "+SiLU", "LayerNorm
    instead of the complex norm" -> "LayerNorm"), where a figure row has no room for it;
    the ledger's claim keeps the whole name."""
    return re.split(r" \(| instead of ", display_name(key))[0]


def _attention_label(parts: list[str]) -> str | None:
    """The words of an attention row (``attention/<parts>``), or None for one not named
    here. Each row compares matroidal m=2d with a baseline: the panel's title says which
    side the claim needs."""
    match parts:
        case ["not_worse", qk]:
            return f"validation, {display_name(qk)}"
        case ["long", "not_worse", qk]:
            return f"validation after 8,000 steps, {display_name(qk)}"
        case ["low_parameters", size, qk] if size.startswith("d"):
            return f"test at d_model {size[1:]}, {display_name(qk)}"
        case ["stable", "bfloat16"]:
            return "bfloat16's shift of validation"
        case ["pruning"]:
            return "half its coefficients pruned"
        case ["low_data", baseline]:
            return f"edge over {display_name(baseline)}: 1% of the text vs all"
        case ["low_data", size, baseline]:
            return f"edge over {display_name(baseline)}: 1% vs all, d_model {size[1:]}"
        case ["low_parameters", *baseline]:
            return f"edge over {display_name((baseline or ['dense'])[0])}: d_model 32 vs 64"
        case ["best_m"]:
            return "one support size m is best"
    return None


def row_label(ident: str, claim: str = "") -> str:
    """A ledger row's label in a figure: words, with every model, variant, task and loss
    named as ``names.DISPLAY_NAMES`` names it (the figure prints the id beside it, to look
    the row up in LEDGER.md). A row of a kind not named here is labelled by its claim."""
    head, *parts = ident.split("/")
    match [head, *parts]:
        case ["table3", loss, task]:
            return f"Table 3, {display_name(loss)}: {display_name(task)}"
        case ["table4", rotation, variant, task]:
            return f"Table 4, {_name(variant)}, {rotation} rotation: {display_name(task)}"
        case ["authors", name, length]:
            task = {v: k for k, v in AUTHORS_TASK.items()}[name]
            (model,) = GRIDS["authors"]["models"][task]  # the revision behind their row
            return f"{display_name(model)}: {display_name(name)} at L = {length[1:]}"
        case ["grazzi" | "chomsky", model, *at]:
            trained = ", trained at T = 16 only" if at else ""
            return f"{display_name(model)}: parity at length{trained}"
        case ["attention", *rest] if (words := _attention_label(rest)) is not None:
            return words
    if not claim:
        raise ValueError(f"ident={ident!r} has no figure label; pass its claim")
    return re.sub(r"(: | )[\d.]+( \(their README's.*\))?$", "", claim)


def _label_rows(ax, y, rows: pd.DataFrame, beside=None, x: float = 1.02, title: str = ""):
    """Each row's words (``row_label``) on ``ax``'s y axis, and its ledger id, small and
    grey, at ``x`` (a fraction of the width of ``beside``, default ``ax``) on the row's
    line: the figure's text, not the axes' (to look the row up in LEDGER.md)."""
    ax.set_yticks(y, [row_label(i, c) for i, c in zip(rows["id"], rows["claim"], strict=True)],
                  fontsize=5.5)  # fmt: skip
    beside = beside or ax
    at = blended_transform_factory(beside.transAxes, beside.transData)
    for yy, ident in zip(y, rows["id"], strict=True):
        ax.figure.text(x, yy, ident, transform=at, va="center", fontsize=4.5, color="0.45")
    if title:
        ax.figure.text(x, 1.0, title, transform=beside.transAxes, va="bottom", fontsize=5,
                       color="0.45")  # fmt: skip


def accuracy_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the ledger figure draws, bottom up: those with a published accuracy or F1
    (gap/ and csp/ rows count epochs)."""
    rows = table[table["published"].notna() & ~table["id"].str.startswith(("gap/", "csp/"))]
    return rows.iloc[::-1]


def ledger_figure(table: pd.DataFrame):
    """Ours (mean and 95% interval over seeds) against the published number ± margin,
    one line per claim with a published number, coloured by verdict. Every number here is
    an accuracy or F1, so intervals and margins are drawn inside [0, 1]. A row whose seeds
    diverged has no value of ours: its red x sits in a column of its own on the right,
    "k of n", never on the value axis (where it would read as "ours = published")."""
    rows = accuracy_rows(table)
    height = 0.13 * len(rows) + 0.8
    fig, (ax, side) = plt.subplots(1, 2, sharey=True, figsize=figure_size(2, height=height),
                                   gridspec_kw={"width_ratios": (6, 1), "wspace": 0.04})  # fmt: skip
    y = list(range(len(rows)))
    margin = pd.Series([rule_of(i).delta for i in rows["id"]], index=rows.index)
    band_low = (rows["published"] - margin).clip(0, 1)
    band_high = (rows["published"] + margin).clip(0, 1)
    ax.barh(y, band_high - band_low, left=band_low, height=0.6, color="#dddddd",
            label="published ± margin")  # fmt: skip
    ours = rows["ours"]
    drawn = rows.assign(low=rows["low"].fillna(ours).clip(0, 1),
                        high=rows["high"].fillna(ours).clip(0, 1))  # fmt: skip
    for yy, (_, r) in zip(y, drawn.iterrows(), strict=True):
        if not pd.isna(r["ours"]):
            plot_ours(ax, yy, r)
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
    _label_rows(ax, y, rows, beside=side, x=0.95, title="ledger id")
    ax.set_xlabel("accuracy or F1 (published beside ours)")
    ax.set_xlim(-0.03, 1.03)
    handles, labels = ax.get_legend_handles_labels()
    for verdict, color in VERDICT_COLOR.items():
        handles.append(plt.Line2D([], [], marker="o", ms=3, ls="", color=color))
        labels.append(f"ours: {verdict}")
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
            hollow = f"; {stats.UNTUNED} " in r["reason"]  # the tuning rule decided it
            plot_ours(ax, yy, r, hollow=hollow)
        _label_rows(ax, y, rows)
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


ZOOM = (0.95, 1.0)  # the lower panels: wide enough for 99% to stand clear of 100%


def grokking_figure():
    """The text's model at the paper's size: whole-string test accuracy per seed, over its
    whole range (top) and zoomed to the last 5% (bottom), where 99% and 100% are apart;
    the 90%, 99% and 100% levels are named in the legend, and each task's title says how
    many seeds ever reached 100%."""
    records = [r for r in committed_records("gap") if r.config["preset"] == "paper"]
    tasks = names.PAPER_TASKS
    fig, axes = plt.subplots(2, 3, figsize=figure_size(2, height=3.6), sharex="col",
                             gridspec_kw={"height_ratios": (3, 2)})  # fmt: skip
    style = names.style("csp_paper")
    for (top, zoom), task in zip(axes.T, tasks, strict=True):
        runs = [r for r in records if r.config["task"] == task and len(r.history)]
        for ax in (top, zoom):
            seed_curves(ax, runs, style["color"], alpha=0.8)
        reached = sum(bool((r.history[GAP_METRIC] >= 1.0).any()) for r in runs)
        top.set_title(f"{display_name(task)}: {reached} of {len(runs)} seeds reach 100%")
        top.set_ylim(0.4, 1.02)
        zoom.set_ylim(ZOOM[0], ZOOM[1] + 0.002)
        zoom.set_xlabel("epoch")
    axes[0, 0].set_ylabel("whole-string\ntest accuracy")
    axes[1, 0].set_ylabel(f"zoomed to\n{ZOOM[0]:.0%}–{ZOOM[1]:.0%}")
    for ax in axes[:, 1:].ravel():
        ax.tick_params(labelleft=False)
    handles = [Line2D([], [], color=style["color"], lw=0.8, label="one seed")]
    handles += [Line2D([], [], color="#555555", ls=ls, lw=0.6, label=f"{level:.0%}")
                for level, ls in LEVELS.items()]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=6)
    fig.suptitle(f"{style['name']} at the paper's size, one line per seed (grid 'gap')")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


LENGTH_MODELS = ("lstm", "gru", "transformer", "diag_rnn", "diag_rnn_neg", "csp_paper")


def length_figure():
    """Parity far past the training length (16): whole-string accuracy (``length_panel``:
    mean over seeds, 95% t band)."""
    curves = pd.read_csv(results_dir() / "length_generalization.csv.gz")
    parity = curves[curves["task"] == "parity"]
    fig, ax = plt.subplots(figsize=figure_size(1, height=2.3))
    length_panel(ax, parity, "seq_acc", models=LENGTH_MODELS, trained_to=16)
    ax.set_xlabel("string length (trained at 16)")
    ax.set_ylabel("whole-string accuracy, parity")
    ax.legend(fontsize=6, loc="lower left", title=BAND.replace("; ", "\n"), title_fontsize=5)
    fig.tight_layout()
    return fig


def figures_markdown(names=FIGURES) -> str:
    return "\n".join(f"![{name}](figures/{name}.png)" for name in names)


def rules() -> str:
    rules = "\n".join(f"- **{name}**: {text}" for name, text in stats.RULES.items())
    return (
        "Each row's test, its smallest effect of interest (delta) with the reason for it, and "
        "the seeds that decide it are one row of `structattn_lite/claims/rules.csv`, "
        "committed before the runs it decides; a row whose rule came after its runs were "
        "read is *exploratory* (column `evidence`) until fresh seeds confirm it. The tests "
        f"(`structattn_lite/stats.py`), each with at least {stats.MIN_SEEDS} seeds:\n\n" + rules
    )


def render(table: pd.DataFrame | None = None) -> str:
    """The README section, from the ledger."""
    table = claims.ledger() if table is None else table
    return "\n\n".join([
        "**In short** (our reading; each line's verdict and numbers are those of the rows it "
        f"cites, ids as in [the ledger]({LEDGER_MD})):\n\n" + in_short(table),
        verdict_counts(table).to_markdown(index=False),
        counts_note(table),
        f"Every claim is one row of [the ledger]({LEDGER_MD}) (`data/results/claims.csv`, "
        "with each row's protocol, grid, notebook section and command), decided by the rule "
        "`structattn_lite/claims/rules.csv` gives it.",
        figures_markdown(FIGURES),
    ])  # fmt: skip


def render_ledger(table: pd.DataFrame | None = None) -> str:
    """``LEDGER.md``: every row of ``claims.csv`` with its verdict, and the rules."""
    table = claims.ledger() if table is None else table
    return "\n\n".join([
        "# The claims ledger",
        f"Generated by `structattn findings --write` from `data/results/` ({len(table)} "
        "claims; the same rows as `data/results/claims.csv`, which also holds each row's "
        "rule, protocol, grid, notebook section and command). Back to the "
        "[README](README.md).",
        rules(),
        claims.markdown(table, ids=True),
    ]) + "\n"  # fmt: skip


def readme_section(text: str | None = None) -> str:
    """The section currently in README.md (between the markers)."""
    readme = repo_root() / "README.md"
    text = text if text is not None else files.read_text(readme)
    match = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not match:
        raise ValueError(
            f"{readme} has no {START} ... {END} section (each marker on a line of its own); "
            "restore the markers (git checkout -- README.md) before writing findings"
        )
    return match.group(1)


def _damage(path: Path) -> str | None:
    """Why a committed CSV is not whole (it cannot be read or decompressed, it ends
    mid-row, a row has not as many fields as the header), or None."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", newline="") as fh:
            text = fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as err:
        return f"cannot be read ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    if not text:
        return "is empty"
    if not text.endswith("\n"):
        return "ends mid-row"
    rows = csv.reader(io.StringIO(text))
    width = len(next(rows))
    for n, fields in enumerate(rows, start=2):
        if len(fields) != width:
            return f"has {len(fields)} fields on row {n}, where its header has {width}"
    return None


def check_committed(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ledger (``claims.ledger()``, or ``table``) when every committed file parses
    and no claim that ``claims.csv`` decided has lost its records; else a one-line
    ValueError naming the file or the claims (a file cut mid-row changed verdicts
    silently)."""
    root = results_dir()
    if not root.is_dir():
        named = "STRUCTATTN_RESULTS" if os.environ.get("STRUCTATTN_RESULTS") else "data/results"
        raise ValueError(
            f"{root} ({named}) is not a folder of committed results; point STRUCTATTN_RESULTS "
            "at one, or restore data/results from git"
        )
    for path in sorted([*root.glob("*.csv"), *root.glob("*.csv.gz")]):
        if (why := _damage(path)) is not None:
            raise ValueError(
                f"{path} {why}; restore it (git checkout -- {path.name} in data/results) "
                "or re-export its grid before reading findings"
            )
        if path.name != claims.CLAIMS_CSV:  # the ledger's own output: check_ledger's
            if (why := schemas.committed_problem(path, pd.read_csv(path))) is not None:
                raise ValueError(f"{why}; restore the file from git or re-export its grid")
    if table is None:
        try:
            table = claims.ledger()
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise ValueError(
                f"the committed records give no ledger ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); restore data/results "
                "from git before reading or writing findings"
            ) from None
    if claims.path().exists():
        before = claims.committed().set_index("id")
        now = table.set_index("id")
        decided = before.index[before["reason"] != NOT_RUN]
        lost = [i for i in decided if i not in now.index or now.at[i, "reason"] == NOT_RUN]
        if lost:
            raise ValueError(
                f"the committed records lack the runs of {len(lost)} claim(s) claims.csv "
                f"decided ({', '.join(lost[:3])}{', ...' if len(lost) > 3 else ''}); "
                "restore data/results from git before reading or writing findings"
            )
    return table


def ledger_differences(table: pd.DataFrame) -> list[str]:
    """Where the committed ``claims.csv`` differs from ``table`` (the ledger the committed
    records give), compared as written (the CSV ``claims.write`` would write): each entry
    an id with what differs, "id (verdict, reason)", "id (duplicated)", "id (missing)" or
    "id (not in the ledger)", in the ledger's order; the columns, if they differ; [] when
    the file is the ledger, row for row."""

    def as_written(data: bytes) -> pd.DataFrame:
        return pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)

    path = claims.path()
    if not path.exists():
        return [f"{path.name} (missing)"]
    now = as_written(files.csv_bytes(table, path, index=False))
    before = as_written(path.read_bytes())
    if list(before.columns) != list(now.columns):
        return [f"columns ({', '.join(before.columns)}; the ledger has {', '.join(now.columns)})"]
    out = []
    counts = before["id"].value_counts()
    old = before.drop_duplicates("id").set_index("id")
    for ident, row in now.set_index("id").iterrows():
        if ident not in old.index:
            out.append(f"{ident} (missing)")
            continue
        changed = [c for c in row.index if row[c] != old.at[ident, c]]
        if counts[ident] > 1:
            changed.append("duplicated")
        if changed:
            out.append(f"{ident} ({', '.join(changed)})")
    out += [f"{i} (not in the ledger)" for i in old.index if i not in set(now["id"])]
    if list(before.drop_duplicates("id")["id"]) != list(now["id"]) and not out:
        out.append("the rows' order")
    return out


def check_ledger(table: pd.DataFrame) -> None:
    """A one-line ValueError naming each row (and column) where the committed
    ``claims.csv`` differs from ``table``, the ledger the committed records give (a
    verdict edited by hand, a row duplicated or removed); None when they agree."""
    if diffs := ledger_differences(table):
        raise ValueError(
            f"{claims.path()} differs from the ledger the committed records give in "
            f"{len(diffs)} place(s): {'; '.join(diffs)}; run `structattn findings --write` "
            "to rewrite it from data/results"
        )


def _drawings(table: pd.DataFrame | None = None) -> dict:
    """The four figures' names and the functions that draw them (from ``table``, the
    ledger, where a figure draws from it)."""
    ledger = (lambda: table) if table is not None else claims.ledger
    return {"findings_ledger": lambda: ledger_figure(ledger()),
            "findings_attention": lambda: attention_figure(ledger()),
            "findings_grokking": grokking_figure, "findings_length": length_figure}  # fmt: skip


def write_figures(out: Path | None = None, table: pd.DataFrame | None = None) -> list[Path]:
    """Render the four figures into ``out`` (default ``figures/``), PNG only."""
    paths = []
    for name, draw in _drawings(table).items():
        fig = draw()
        paths.append(save_figure(fig, *name.split("_", 1), out=out or figures_dir(), pdf=False)[0])
        plt.close(fig)
    return paths


def planned_writes(table: pd.DataFrame | None = None) -> dict[Path, bytes]:
    """Every file ``findings --write`` writes, and its new bytes, all made in memory:
    claims.csv, the four figures, LEDGER.md and README.md with its section replaced. A
    one-line ValueError naming the file when one cannot be made or written (the README's
    markers missing, a directory or an unwritable folder in the way), before any is."""
    readme = repo_root() / "README.md"
    targets = [claims.path(), *(figures_dir() / f"{name}.png" for name in FIGURES),
               repo_root() / LEDGER_MD, readme]  # fmt: skip
    files.check_writable(targets)
    try:
        text = files.read_text(readme)
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {readme}: {err}") from None
    old = readme_section(text)
    table = claims.ledger() if table is None else table
    writes = {claims.path(): files.csv_bytes(table, claims.path(), index=False)}
    for name, draw in _drawings(table).items():
        fig = draw()
        writes[figures_dir() / f"{name}.png"] = figure_bytes(fig, "png")
        plt.close(fig)
    writes[repo_root() / LEDGER_MD] = render_ledger(table).encode(files.ENCODING)
    section = f"{START}\n{render(table)}\n{END}"
    writes[readme] = text.replace(f"{START}\n{old}\n{END}", section).encode(files.ENCODING)
    assert list(writes) == targets, "planned_writes' targets and writes disagree"
    return writes


def write_readme(table: pd.DataFrame | None = None) -> list[Path]:
    """Rewrite claims.csv, the four figures, LEDGER.md and the README section, from
    ``table`` (default: the ledger the committed records give). Everything is made and
    checked first (``planned_writes``); then each file is replaced whole, so a kill
    leaves each one old or new, never cut short."""
    writes = planned_writes(table)
    for path, data in writes.items():
        files.write_bytes(path, data)
    return list(writes)
