"""Every code key a reader may meet, registered once: its display name, and where it has
them its colour, marker and dash (a model or variant), a table's column title, the metric
it is scored on and chance level (a task), or what it means in words (a loss); and the
findings' group of each ledger id's prefix. Figures, tables, the ledger, the notebooks
and the dashboards read them from here; code keys stay in code. An unregistered key is a
one-line error (``entry``), never a silent fallback. Imports nothing from the package
(the bottom layer).

The authors' README calls their model "CSP-Vanilla": that word names only their table's
row ("their README's CSP-Vanilla row"), never our model.
"""

from __future__ import annotations

from dataclasses import dataclass

TEXT = "CSP (paper text)"
CODE_SWITCHES = "CSP (paper text, code's switches)"


def authors(revision: str) -> str:
    """The authors' model at one revision of their code, e.g. ``authors("3bb9f71")``."""
    return f"CSP (authors' code, {revision})"


@dataclass(frozen=True)
class Entry:
    """One registered key: its display ``name``; a model's ``color``, ``marker`` and dash
    ``ls``; a task's column ``title``, ``metric`` (the record column it is scored on),
    ``metric_name`` and ``chance`` level (the majority class of the whole string); a
    loss's or an accuracy's ``gloss`` (what it is)."""

    name: str
    color: str | None = None
    marker: str | None = None
    ls: str | tuple | None = None
    title: str | None = None
    metric: str | None = None
    metric_name: str | None = None
    chance: float | None = None
    gloss: str | None = None


# --- models and attention variants: one colour each, the same in every figure ------------
#
# No two alike and none grey (grey is the "undecided" verdict's colour). The first nine
# are seaborn's colour-blind-safe palette; the rest (Paul Tol's and Okabe-Ito-like hues)
# replace the palette's repeats past its tenth colour. A model's marker and dash are fixed
# by its place in this list: models are only ever appended, so none moves.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
_MODELS = [  # (key, display name, colour)
    ("csp_paper", TEXT, "#0173b2"),
    ("csp_code_switches", CODE_SWITCHES, "#de8f05"),
    ("csp_authors", authors("3bb9f71"), "#029e73"),
    # the length study's baselines
    ("lstm", "LSTM", "#d55e00"),
    ("gru", "GRU", "#cc78bc"),
    ("transformer", "Transformer", "#ca9161"),
    ("diag_rnn", "diagonal RNN [0, 1]", "#fbafe4"),
    ("diag_rnn_neg", "diagonal RNN [-1, 1]", "#882255"),
    ("complex_rnn", "complex RNN", "#ece133"),
    # the attention study's variants
    ("dot", "dot product", "#56b4e9"),
    ("dense", "dense Mahalanobis", "#004949"),
    ("matroidal m=2d", "matroidal m=2d", "#b66dff"),
    ("dense (sep q/k)", "dense Mahalanobis (separate q/k)", "#66a61e"),
    ("matroidal m=1d", "matroidal m=d", "#ee3377"),
    ("matroidal m=4d", "matroidal m=4d", "#920000"),
    ("matroidal m=2d (sep q/k)", "matroidal m=2d (separate q/k)", "#005aff"),
    # the authors' code at the other revisions the study runs
    ("csp_authors_7d6c56a", authors("7d6c56a"), "#332288"),
    ("authors_befce39", authors("befce39"), "#6b3e26"),
]
# A CSP preset (the grokking and ablation grids' name) is the length study's model of it:
# the same entry, so the same name, colour, marker and dash.
ALIASES = {
    "paper": "csp_paper",
    "code_switches": "csp_code_switches",
    "authors_3bb9f71": "csp_authors",
    "upstream": "csp_authors",
    "authors_7d6c56a": "csp_authors_7d6c56a",
}

# --- tasks: the ledger's words, the tables' column titles, metrics and chance levels -----
_TASKS = {
    "parity": Entry("parity", title="parity (acc)", metric="test_seq_acc",
                    metric_name="accuracy", chance=0.5),
    "mod3": Entry("mod-3", title="mod-3 (acc)", metric="test_seq_acc",
                  metric_name="accuracy", chance=2 / 3),
    "dyck1": Entry("parentheses", title="parentheses (F1)", metric="test_seq_f1",
                   metric_name="F1", chance=0.5),
    "modk": Entry("mod-k"),
    "mod3_authors": Entry("mod-3 (the authors' labels)"),
    "dyck1_authors": Entry("parentheses (the authors' labels)"),
}  # fmt: skip
# The tasks of the CSP paper's tables, in their order (the ledger's, the tables' columns).
PAPER_TASKS = ("parity", "mod3", "dyck1")

# --- everything else a table, caption or claim names --------------------------------------
_WORDS = {
    # the ablations' losses (Table 3), each with what it is (the focal alpha made explicit)
    "focal": Entry("focal loss",
                   gloss="focal loss (alpha 0.25 on class 1, 0.75 on class 0: Lin et al.)"),
    "ce": Entry("cross-entropy", gloss="cross-entropy"),
    "focal_constant": Entry("focal loss (the authors' alpha)",
                            gloss="focal loss (alpha 0.25 on every class: the authors')"),
    "ce_all_positions": Entry("cross-entropy on every position",
                              gloss="cross-entropy averaged over every position: the authors'"),
    # the variants of the block (Table 4)
    "base": Entry("Base (no SiLU, skip or norm)"),
    "+silu": Entry("+SiLU (inside every step)"),
    "+skip": Entry("+Skip"),
    "+norm": Entry("+Norm (the full model)"),
    "layernorm": Entry("LayerNorm instead of the complex norm"),
    "-skip": Entry("the full model without its skip"),
    "+stepsilu": Entry("the full model with SiLU inside every step"),
    # the attention card's two ways of projecting queries and keys
    "shared": Entry("shared q/k"),
    "sep": Entry("separate q/k"),
    # the parameter groups whose gradient-norm variance the attention card compares
    "total": Entry("all parameters"),
    "layer0": Entry("layer 0"),
    "layer1": Entry("layer 1"),
    "metric": Entry("the metric's parameters"),
    # the n-gram floors drawn and tabled under the attention study's text runs
    **{f"{k} floor": Entry(f"{k} floor (add-0.1 {k} model)") for k in ("unigram", "bigram",
                                                                         "trigram")},
    # the matroidal metric's sizes m, as the attention card's best-m row compares them
    "m=1d": Entry("m=d"),
    "m=2d": Entry("m=2d"),
    "m=4d": Entry("m=4d"),
    # the length study's three accuracies at a length L
    "seq_acc": Entry("whole string", gloss="whole string (label at position L)"),
    "unseen_acc": Entry("beyond the training length",
                        gloss="positions beyond the training length"),
    "all_acc": Entry("all positions",
                     gloss="all L positions (the authors' README metric, we believe)"),
    # the attention study's validation curves
    "val_bpc": Entry("validation bits per character"),
    "val_loss": Entry("validation loss (nats)"),
}  # fmt: skip

# The ablation grids a caption names (`structattn run ablations --grid <key>`); apart from
# ENTRIES, as "paper" names the profile's grid here and the text's model there.
ABLATION_GRIDS = {
    "paper_text": "Table 3's grid",
    "paper_table4": "Table 4's grid",
    "paper_332": "section 3.3.2's grid",
    "paper_rope": "section 2.3's grid",
    "smoke": "the smoke profile's grid",
    "quick": "the quick profile's grid",
    "paper": "the paper profile's grid",
}


def ablation_grid(grid: str) -> str:
    """An ablation grid in words; an unregistered one is a one-line error."""
    if grid not in ABLATION_GRIDS:
        raise ValueError(f"grid={grid!r} has no entry in names.ABLATION_GRIDS: register it there")
    return ABLATION_GRIDS[grid]


# --- who made the claims: the findings group the ledger's rows by their id's prefix -------
_PAPER = "the CSP paper (Tables 3 and 4, grokking gaps, gradient-norm spikes, its curves)"
_FIELD = "the wider field (Grazzi et al.; the Chomsky-hierarchy paper) on parity at length"
_CARD = "the attention card (its hypothesis, and what it computes from the paper)"
SOURCE_GROUPS = {
    "table3": _PAPER, "table4": _PAPER, "ablation": _PAPER, "gap": _PAPER, "spike": _PAPER, "csp": _PAPER,
    "authors": "the authors' README length table (their CSP-Vanilla row)",
    "grazzi": _FIELD, "chomsky": _FIELD,
    "attention": _CARD, "theory": _CARD,
}  # fmt: skip

# A table's key columns whose values are code keys, and the header each is shown under.
COLUMNS = {"preset": "model", "model": "model", "variant": "variant", "rival": "rival",
           "task": "task", "loss": "loss"}  # fmt: skip

ENTRIES: dict[str, Entry] = {
    **{key: Entry(name, color, MARKERS[i % len(MARKERS)], LINESTYLES[i % len(LINESTYLES)])
       for i, (key, name, color) in enumerate(_MODELS)},
    **_TASKS,
    **_WORDS,
}  # fmt: skip
ENTRIES |= {alias: ENTRIES[key] for alias, key in ALIASES.items()}
MODELS = tuple(key for key, _, _ in _MODELS)  # the styled models, in their fixed order
DISPLAY_NAMES: dict[str, str] = {key: e.name for key, e in ENTRIES.items()}


def variant_key(kind: str, shared: bool = True, m: int | None = None, d_head: int = 1) -> str:
    """An attention variant's key in configs' tables, records and figures: "dot", "dense",
    "matroidal m=2d" (m as a multiple of d_head where it is one; None: 2 d_head), with
    " (sep q/k)" for separate projections. A grid's (kind, factor, shared) is
    ``variant_key(kind, shared, factor)``."""
    out = kind
    if kind == "matroidal":
        m = m or 2 * d_head
        out += f" m={m // d_head}d" if m % d_head == 0 else f" m={m}"
    if kind != "dot" and not shared:
        out += " (sep q/k)"
    return out


def register_model(key: str, name: str, color: str) -> Entry:
    """Register a model or attention variant that the list above lacks (a registered
    attention class does this for its own kind): appended, so no model's marker or dash
    moves. Registering a key again with the same name and colour changes nothing; with
    others it is a one-line error."""
    if key in ENTRIES:
        known = ENTRIES[key]
        if (known.name, known.color) != (name, color):
            raise ValueError(
                f"key={key!r} is registered as {known.name!r} ({known.color}); "
                f"not again as {name!r} ({color})"
            )
        return known
    if not isinstance(color, str) or not color.startswith("#"):
        raise ValueError(f"color={color!r} for key={key!r} must be a '#rrggbb' colour")
    i = len(_MODELS)
    _MODELS.append((key, name, color))
    ENTRIES[key] = added = Entry(
        name, color, MARKERS[i % len(MARKERS)], LINESTYLES[i % len(LINESTYLES)]
    )
    DISPLAY_NAMES[key] = name
    _STYLES[added] = {"name": name, "color": color, "marker": added.marker, "ls": added.ls}
    return added


def register(key: str, added: Entry) -> Entry:
    """Register a key that the tables above lack (a registered task does this for itself:
    its name, column title, metric, metric name and chance level). Registering a key
    again with the same entry changes nothing; with another it is a one-line error."""
    if key in ENTRIES and ENTRIES[key] != added:
        raise ValueError(
            f"key={key!r} is registered as {ENTRIES[key].name!r}; not again as {added.name!r}"
        )
    ENTRIES[key] = added
    DISPLAY_NAMES[key] = added.name
    return added


def entry(key: str) -> Entry:
    """The registered entry of ``key``; an unregistered key is a one-line error."""
    if key not in ENTRIES:
        raise ValueError(
            f"key={key!r} has no entry in names.DISPLAY_NAMES: register it in "
            "structattn_lite/names.py"
        )
    return ENTRIES[key]


def display_name(key: str) -> str:
    """The display name of a code key (a model, variant, task, loss, ...)."""
    return entry(key).name


def _field(key: str, field: str, kind: str):
    value = getattr(entry(key), field)
    if value is None:
        raise ValueError(f"key={key!r} is registered in names.py with no {field} (not a {kind})")
    return value


def style(key: str) -> dict:
    """A model's or variant's display ``name``, ``color``, ``marker`` and dash ``ls``."""
    _field(key, "color", "model or variant")
    return _STYLES[ENTRIES[key]]


_STYLES = {e: {"name": e.name, "color": e.color, "marker": e.marker, "ls": e.ls}
           for e in ENTRIES.values() if e.color is not None}  # fmt: skip


def title(task: str) -> str:
    """A task's column title in a table ("parentheses (F1)")."""
    return _field(task, "title", "task of the paper's tables")


def metric(task: str) -> str:
    """The record column a task is scored on ("test_seq_f1" for parentheses)."""
    return _field(task, "metric", "task of the paper's tables")


def metric_name(task: str) -> str:
    """The metric's name in words ("F1")."""
    return _field(task, "metric_name", "task of the paper's tables")


def chance(task: str) -> float:
    """A task's chance level: the majority class of the whole string."""
    return _field(task, "chance", "task of the paper's tables")


def gloss(key: str) -> str:
    """What a loss or a length-study accuracy is, in words (a focal loss's alpha made
    explicit; which positions an accuracy scores)."""
    return _field(key, "gloss", "loss or accuracy")


def source_group(prefix: str, source: str) -> str:
    """The findings' group of the claims whose ledger id starts ``prefix/``; a prefix not
    in ``SOURCE_GROUPS`` is its own group, named by the ledger's ``source`` words (a claim
    from a new source is never hidden)."""
    return SOURCE_GROUPS.get(prefix, source)
