"""Bad inputs and faults a careless user meets (issue 45): each gives a one-line error or
is set aside and recomputed, with nothing lost."""

from __future__ import annotations

import json
import math

import pytest
from toy_study import Toy, ToyStudy

from structattn_lite.config import check_number
from structattn_lite.records import CorruptRecordWarning, RunStore
from structattn_lite.runs import sweep

# --- records that are not UTF-8 ------------------------------------------------------


@pytest.mark.parametrize(
    "mangle",
    [
        lambda raw: raw[:10] + b"\xff" + raw[10:],
        lambda raw: raw.decode("utf-8").encode("utf-16"),
    ],
    ids=["stray 0xff byte", "re-saved as UTF-16"],
)
def test_a_record_that_is_not_utf8_is_set_aside_and_retrained(tmp_path, mangle):
    store, study = RunStore(tmp_path), ToyStudy()
    (record,) = sweep(study, [Toy()], store=store, progress=False)
    path = store.path("toy", record.key)
    path.write_bytes(mangle(path.read_bytes()))
    with pytest.warns(CorruptRecordWarning, match="corrupt"):
        (again,) = sweep(study, [Toy()], store=store, progress=False)
    assert len(study.calls) == 2 and again.status == "ok"
    assert path.with_suffix(".corrupt").exists()
    assert json.loads(path.read_text())["key"] == record.key  # the retrained record


# --- NaN and inf ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_check_number_refuses_nan_and_inf_naming_the_parameter(value):
    with pytest.raises(ValueError, match="^lr must be a finite number"):
        check_number("lr", value, minimum=0, strict=True)


def test_a_nan_learning_rate_is_refused_before_anything_trains():
    from structattn_lite.studies.attention.recipe import Recipe
    from structattn_lite.training.trainer import OptimConfig

    with pytest.raises(ValueError, match="lr"):
        OptimConfig(lr=math.nan)
    with pytest.raises(ValueError, match="lr"):
        Recipe(lr=math.nan)


def test_a_nan_validation_fraction_is_refused():
    from structattn_lite.data.splits import make_dataset
    from structattn_lite.studies.length.experiment import LengthRun
    from structattn_lite.training.state_tracking import CSPRun

    with pytest.raises(ValueError, match="val_fraction"):
        CSPRun(val_fraction=math.nan)
    with pytest.raises(ValueError, match="val_fraction"):
        LengthRun(val_fraction=math.nan)
    with pytest.raises(ValueError, match="val_fraction"):
        make_dataset("parity", 100, 8, 0, val_fraction=math.nan)


def test_a_nan_theta_init_is_refused():
    from structattn_lite.models.metric_attention import MatroidalAttention

    with pytest.raises(ValueError, match="theta_init"):
        MatroidalAttention(16, 2, theta_init=math.nan)
