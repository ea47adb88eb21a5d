"""No decision reads the test split: early stopping, plateaus and fit-stops read validation.

Each test trains twice, once with the test labels replaced by garbage; every training
quantity and the epoch the run stopped at must be identical.
"""

import dataclasses

import pandas as pd
import pytest
import torch

import structattn_lite.training.state_tracking as state_tracking
from structattn_lite.runs import train
from structattn_lite.studies.length import experiment as length
from structattn_lite.training.state_tracking import CSPRun
from structattn_lite.training.trainer import OptimConfig

TRAINING_COLUMNS = ["epoch", "train_loss", "grad_norm_mean", "grad_norm_max", "lr"]


def _scramble_test_labels(data):
    flipped = dataclasses.replace(data, y_test=1 - data.y_test)  # every test label wrong
    return flipped


def test_csp_early_stop_and_plateau_ignore_the_test_split(monkeypatch):
    cfg = CSPRun(
        task="parity",
        model="gru",
        preset=None,
        length=10,
        n=400,
        labels="prefix",
        epochs=30,
        batch_size=32,
        hold_perfect=2,
        model_options={"d_model": 16},
        optim=OptimConfig(lr=1e-2, plateau_patience=1),
    )
    clean = train("grokking", cfg, progress=False)
    real = state_tracking.build_data
    monkeypatch.setattr(state_tracking, "build_data", lambda c: _scramble_test_labels(real(c)))
    garbled = train("grokking", cfg, progress=False)
    assert clean.status == "early_stop"  # the rule fired, on validation
    assert garbled.status == clean.status and len(garbled.history) == len(clean.history)
    pd.testing.assert_frame_equal(
        clean.history[TRAINING_COLUMNS], garbled.history[TRAINING_COLUMNS]
    )
    assert (garbled.history["test_acc"] < clean.history["test_acc"]).all()  # test was garbled


def test_length_fit_stop_ignores_the_test_split(monkeypatch):
    cfg = length.LengthRun(
        task="parity",
        model="gru",
        n=600,
        epochs=15,
        stop_at_fit=0.9,
        fit_patience=2,
        max_eval_length=20,
        n_eval=20,
        model_options={"d_model": 16, "n_layers": 1},
        optim=OptimConfig(lr=1e-2),
    )
    clean = train("length", cfg)
    real = length.make_dataset
    monkeypatch.setattr(
        length, "make_dataset", lambda *a, **k: _scramble_test_labels(real(*a, **k))
    )
    garbled = train("length", cfg)
    assert clean.status == "early_stop" and len(clean.history) < cfg.epochs
    assert len(garbled.history) == len(clean.history)
    pd.testing.assert_frame_equal(
        clean.history[TRAINING_COLUMNS], garbled.history[TRAINING_COLUMNS]
    )


def test_an_early_stop_without_a_validation_split_is_refused():
    with pytest.raises(ValueError, match="hold_perfect reads the validation split"):
        CSPRun(hold_perfect=3, val_fraction=0.0)
    with pytest.raises(ValueError, match="stop_at_fit needs a validation split"):
        length.LengthRun(stop_at_fit=0.99, val_fraction=0.0)
    torch.manual_seed(0)  # keep the global RNG state predictable for later tests


def test_no_committed_run_stopped_or_chose_on_the_test_split():
    """Every committed CSP run with an early stop carved a validation split for it; the
    retired grids (their stop read test accuracy) are gone."""
    import json

    from structattn_lite.config import results_dir

    root = results_dir()
    assert not (root / "csp_ablations.csv").exists()
    assert not (root / "csp_grokking_histories.csv.gz").exists()
    for path in sorted(root.glob("csp_ablations_*.csv")):
        table = pd.read_csv(path)
        stopped = table["hold_perfect"].notna()
        assert (table.loc[stopped, "val_fraction"] > 0).all(), path.name
    for path in sorted(root.glob("csp_*.csv.gz")):
        configs = pd.read_csv(path, usecols=["config"])["config"].drop_duplicates().map(json.loads)
        for config in configs:
            if config.get("hold_perfect") is not None:
                assert config["val_fraction"] > 0, (path.name, config)
    for path in sorted(root.glob("length_*.csv.gz")):
        table = pd.read_csv(path)
        stopped = table["stop_at_fit"].notna()  # the fit-stop reads validation accuracy
        assert table.loc[stopped, "final_val_seq_acc"].notna().all(), path.name
    for path in sorted(root.glob("attention_*runs*.csv")):
        table = pd.read_csv(path)
        assert set(table["stop"]) <= {"max_steps", "early_stop", "patience"}, path.name
