"""The one display name of every model, variant, task, loss and length metric: what
figures, tables, the ledger, the notebooks and the dashboards show for a code key. Prose
reads its names from here; code keys stay in code. Imports nothing from the package (the
bottom layer).

The authors' README calls their model "CSP-Vanilla": that word names only their table's
row ("their README's CSP-Vanilla row"), never our model.
"""

from __future__ import annotations

TEXT = "CSP (paper text)"
CODE_SWITCHES = "CSP (paper text, code's switches)"


def authors(revision: str) -> str:
    """The authors' model at one revision of their code, e.g. ``authors("3bb9f71")``."""
    return f"CSP (authors' code, {revision})"


DISPLAY_NAMES: dict[str, str] = {
    # CSP: the text's model, and the authors' code at each revision the study runs
    "csp_paper": TEXT,
    "paper": TEXT,
    "csp_code_switches": CODE_SWITCHES,
    "code_switches": CODE_SWITCHES,
    "csp_authors": authors("3bb9f71"),
    "authors_3bb9f71": authors("3bb9f71"),
    "upstream": authors("3bb9f71"),
    "csp_authors_7d6c56a": authors("7d6c56a"),
    "authors_7d6c56a": authors("7d6c56a"),
    "authors_befce39": authors("befce39"),
    # the length study's baselines
    "lstm": "LSTM",
    "gru": "GRU",
    "transformer": "Transformer",
    "diag_rnn": "diagonal RNN [0, 1]",
    "diag_rnn_neg": "diagonal RNN [-1, 1]",
    "complex_rnn": "complex RNN",
    # the attention study's variants
    "dot": "dot product",
    "dense": "dense Mahalanobis",
    "dense (sep q/k)": "dense Mahalanobis (separate q/k)",
    "matroidal m=1d": "matroidal m=d",
    "matroidal m=2d": "matroidal m=2d",
    "matroidal m=4d": "matroidal m=4d",
    "matroidal m=2d (sep q/k)": "matroidal m=2d (separate q/k)",
    # the tasks (the ledger's words)
    "parity": "parity",
    "mod3": "mod-3",
    "dyck1": "parentheses",
    "modk": "mod-k",
    "mod3_authors": "mod-3 (the authors' labels)",
    "dyck1_authors": "parentheses (the authors' labels)",
    # the ablations' losses (Table 3) and variants of the block (Table 4)
    "focal": "focal loss",
    "ce": "cross-entropy",
    "focal_constant": "focal loss (the authors' alpha)",
    "ce_all_positions": "cross-entropy on every position",
    "base": "Base (no SiLU, skip or norm)",
    "+silu": "+SiLU (inside every step)",
    "+skip": "+Skip",
    "+norm": "+Norm (the full model)",
    "layernorm": "LayerNorm instead of the complex norm",
    # the attention card's two ways of projecting queries and keys
    "shared": "shared q/k",
    "sep": "separate q/k",
    # the length study's three accuracies at a length L
    "seq_acc": "whole string",
    "unseen_acc": "beyond the training length",
    "all_acc": "all positions",
}


def display_name(key: str) -> str:
    """The display name of a model's or variant's code key; an unknown key is an error
    naming the table."""
    if key not in DISPLAY_NAMES:
        raise ValueError(
            f"key={key!r} has no display name in names.DISPLAY_NAMES; add it there "
            f"(known keys: {', '.join(sorted(DISPLAY_NAMES))})"
        )
    return DISPLAY_NAMES[key]
