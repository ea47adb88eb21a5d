"""What the length study runs: its models (display name -> model and preset), their
sizes, and its grids, from the tests' smoke grid to the paper profile."""

from __future__ import annotations

import dataclasses

from structattn_lite.names import PAPER_TASKS
from structattn_lite.training.options import OptimConfig

TABLE_LENGTHS = (16, 32, 64, 128, 256)  # the lengths the length tables show

PROTOCOLS = ("fixed", "variable", "grazzi")

# Display name -> (model, preset). "csp_paper" is the text's reading; "csp_code_switches"
# the text's block with the code's cumulative angle and decay gates; "csp_authors" the
# authors' model exactly as in the revision behind their README's CSP-Vanilla parity row.
LENGTH_MODELS = {
    "csp_paper": ("csp", "paper"),
    "csp_code_switches": ("csp", "code_switches"),
    "csp_authors": ("csp", "authors_3bb9f71"),
    "csp_authors_7d6c56a": ("csp", "authors_7d6c56a"),  # their README's mod-3 and Dyck-1 rows
    "lstm": ("lstm", None),
    "gru": ("gru", None),
    "transformer": ("transformer", None),
    "diag_rnn": ("diag_rnn", None),
    "diag_rnn_neg": ("diag_rnn_neg", None),
    "complex_rnn": ("complex_rnn", None),
}

# Per-model sizes near CSP's (d=32, 2 layers: ~7-9k parameters) for the length grids.
MODEL_SIZES = {
    "csp_paper": {"d_model": 32, "n_layers": 2},
    "csp_code_switches": {"d_model": 32, "n_layers": 2},
    "csp_authors": {"d_model": 32, "n_layers": 3},  # the authors' hidden 32, 3 layers
    "csp_authors_7d6c56a": {"d_model": 32, "n_layers": 3},
    "lstm": {"d_model": 32, "n_layers": 1},
    "gru": {"d_model": 32, "n_layers": 1},
    "transformer": {"d_model": 32, "n_layers": 1},
    "diag_rnn": {"d_model": 24, "n_layers": 2},
    "diag_rnn_neg": {"d_model": 24, "n_layers": 2},
    "complex_rnn": {"d_model": 20, "n_layers": 2},
}
GRIDS = {
    "smoke": {
        "tasks": ("parity",), "models": ("lstm", "csp_authors"), "protocols": ("fixed",),
        "seeds": (0,), "epochs": 2, "n": 300, "max_eval_length": 64, "n_eval": 32,
    },
    "quick": {
        "tasks": ("parity",), "models": ("lstm", "csp_authors", "diag_rnn_neg"),
        "protocols": ("fixed",), "seeds": (0,), "epochs": 8, "n": 2000,
        "max_eval_length": 256, "n_eval": 100,
    },
    # committed: the fixed protocol at a budget where the training length is fit: every run
    # trains until its validation whole-string accuracy has held 0.999 for 3 epochs, at
    # most 300 epochs with the rate on a cosine from 1e-3 to 1e-5 (a constant rate left
    # validation swinging by 0.2), 5 seeds. Parity and mod-3 take the authors' 10,000
    # strings (7,000 train, 1,000 validation, 2,000 test; at 2,000 strings 7 of 27 models
    # x tasks did not fit); Dyck-1 keeps 2,000, since a disjoint split half balanced can
    # hold at most 2 x 1,430 strings of length 16. ``n`` per task, as ``models`` may be.
    # refit: a cell where some seed had not fit after the first pass (validation only) is
    # trained again on every seed for 600 epochs, the cosine over those 600.
    # Its curves ship in data/results/length_generalization.csv.gz (each cell's last pass).
    "committed": {
        "tasks": PAPER_TASKS,
        "models": tuple(m for m in LENGTH_MODELS if m != "csp_authors_7d6c56a"),
        "protocols": ("fixed",),
        "seeds": tuple(range(5)),
        "epochs": 300,
        "n": {"parity": 10_000, "mod3": 10_000, "dyck1": 2_000},
        "max_eval_length": 256,
        "n_eval": 200,
        "run": {
            "stop_at_fit": 0.999,
            "optim": OptimConfig(lr=1e-3, schedule="cosine", t_max=300, eta_min=1e-5),
        },
        "refit": {
            "epochs": 600,
            "optim": OptimConfig(lr=1e-3, schedule="cosine", t_max=600, eta_min=1e-5),
        },
    },
    # authors: the authors' README table, their model (the revision behind each row) and
    # their protocol: 10,000 i.i.d. strings split 80/20 at random, cross-entropy averaged
    # over every position, Adam 1e-4 with weight decay 1e-7, cosine to 1e-6 over 300
    # epochs, clipping at 1.0, batch 64, seeds 0-9 (their 5 and 5 more);
    # scored on 4,000 fresh strings per length up to 64 (30 runs of 37,500 steps).
    "authors": {
        "tasks": ("parity", "mod3_authors", "dyck1_authors"),
        "models": {
            "parity": ("csp_authors",),
            "mod3_authors": ("csp_authors_7d6c56a",),
            "dyck1_authors": ("csp_authors_7d6c56a",),
        },
        "protocols": ("fixed",),
        # their mod-3 script's vocabulary (4,893 parameters; their initial weights)
        "task_options": {"mod3_authors": {"vocab_size": 3}},
        "seeds": tuple(range(10)),
        "epochs": 300,
        "n": 10_000,
        "max_eval_length": 64,
        "n_eval": 4000,
        "run": {
            "split": "random",
            "val_fraction": 0.0,
            "loss": "ce_all_positions",
            "optim": OptimConfig(
                lr=1e-4, weight_decay=1e-7, schedule="cosine", t_max=300, eta_min=1e-6, clip=1.0
            ),
        },
    },
    "paper": {
        "tasks": PAPER_TASKS,
        "models": tuple(LENGTH_MODELS),
        "protocols": ("fixed", "variable"),
        "seeds": tuple(range(5)),
        "epochs": 100,
        "n": {"parity": 5000, "mod3": 5000, "dyck1": 2000},  # Dyck-1: see "committed"
        "max_eval_length": 256,
        "n_eval": 500,
    },
}  # fmt: skip


# authors_short: the authors' grid at a fifth of the epochs (60, the cosine over those 60),
# the budget two shared CPU cores afford; its curves ship in data/results/length_authors_short.csv.gz.
GRIDS["authors_short"] = {
    **GRIDS["authors"],
    "epochs": 60,
    "run": {
        **GRIDS["authors"]["run"],
        "optim": dataclasses.replace(GRIDS["authors"]["run"]["optim"], t_max=60),
    },
}


# authors_fresh: fresh seeds for the rows of the authors' table that seeds decide (the rules
# in claims/rules.csv were committed before these runs): mod-3 seeds 10-19 and parity seeds
# 10-21 in the authors grid's setting, which no other run of those rows uses. Each task's
# seeds train as one stack, which is part of their protocol (``stack``: its committed
# records trained beside 10 and 12 seeds).
GRIDS["authors_fresh"] = {
    **GRIDS["authors"],
    "tasks": ("mod3_authors", "parity"),
    "seeds": {"mod3_authors": tuple(range(10, 20)), "parity": tuple(range(10, 22))},
    "stack": "all",
}


# grazzi: Grazzi et al.'s protocol for parity at length, for the diagonal RNNs
# and the baselines of the committed grid: fresh strings every step, one length per batch
# drawn from 1..40, a label per prefix, batch 128, Adam at a constant rate for 2,000 steps
# (20 "epochs" of 100 batches), 5 seeds; scored at every length up to 500 on fresh strings.
# The rate is chosen per model out of ``lrs`` on validation alone: strings of length 128
# scored at lengths 64..128 (``GRAZZI_VAL_LENGTHS``), never at a reported test length
# (``GRAZZI_TEST_LENGTHS``); the rule is ``results.chosen_rates``, written before the runs.
GRAZZI_VAL_LENGTHS = (64, 128)  # first and last validation length (inclusive)
GRAZZI_TEST_LENGTHS = (256, 500)
GRIDS["grazzi"] = {
    "tasks": ("parity",),
    "models": ("diag_rnn_neg", "diag_rnn", "lstm", "gru", "transformer"),
    "protocols": ("grazzi",),
    "seeds": tuple(range(5)),
    "epochs": 20,
    "n": 2000,  # unused: the protocol draws fresh strings
    "max_eval_length": GRAZZI_TEST_LENGTHS[-1],
    "n_eval": 500,
    "lrs": (1e-3, 3e-3, 1e-2),
    "run": {"batch_size": 128, "steps_per_epoch": 100},
}


# grid -> the file its committed runs ship in (data/results)
COMMITTED_CSV = {
    "committed": "length_generalization.csv.gz",
    "authors": "length_authors.csv.gz",
    "authors_short": "length_authors_short.csv.gz",
    "grazzi": "length_grazzi.csv.gz",
    "authors_fresh": "length_authors_fresh.csv.gz",
}


# Authors' README: trained at T=16, mean over 5 seeds, accuracy at L = 16 / 32 / 64.
AUTHORS = {
    "parity": {
        "RNN": (1.000, 1.000, 1.000),
        "complex RNN": (1.000, 0.999, 0.994),
        "CSP-Vanilla": (1.000, 0.922, 0.716),
        "CSP-Fast": (0.962, 0.790, 0.645),
        "Mamba-neg": (0.967, 0.776, 0.638),
        "Transformer": (0.976, 0.727, 0.600),
    },
    "mod3": {
        "RNN": (1.000, 1.000, 1.000),
        "complex RNN": (1.000, 0.996, 0.983),
        "CSP-Vanilla": (1.000, 0.980, 0.921),
        "CSP-Fast": (1.000, 0.974, 0.876),
        "Mamba-neg": (1.000, 0.803, 0.565),
        "Transformer": (0.999, 0.646, 0.475),
    },
    "dyck1": {
        "Transformer": (1.000, 0.995, 0.983),
        "RNN": (1.000, 0.999, 0.990),
        "complex RNN": (1.000, 1.000, 0.984),
        "CSP-Vanilla": (0.999, 0.972, 0.857),
        "CSP-Fast": (0.993, 0.966, 0.919),
        "Mamba-neg": (1.000, 0.981, 0.900),
    },
}
# Our task behind each of their table's tasks (their labels for mod-3 and parentheses)
AUTHORS_TASK = {"parity": "parity", "mod3_authors": "mod3", "dyck1_authors": "dyck1"}

# The ``structattn run`` flags this study's runs take (``cli.FLAG_FIELDS``: a field of its
# config each reads; seed_batching: its runs stack by seed), so the command line refuses
# any other before torch loads; tests/test_flags.py checks it against the config class.
RUN_FLAGS = ("task", "epochs", "length", "lr", "seed_batching")
