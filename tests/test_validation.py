"""Nothing trusted unchecked (``structattn_lite.schemas``): a run record with a value out of
range, a history of the wrong length or without a column its tables read is set aside and
retrained like a corrupt one; a committed results file with such a row, a run twice or a
failed run is refused in one line naming the file, the line and the column."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from structattn_lite import cli
from structattn_lite.records import CorruptRecordWarning, RunRecord, RunStore, config_hash

CONFIG = {"task": "mod3", "seed": 0, "epochs": 2}


def csp_history(epochs: int = 2, **last) -> pd.DataFrame:
    rows = [
        {"epoch": e, "train_loss": 0.1, "train_acc": 0.9, "test_acc": 0.9, "test_f1": 0.9,
         "test_seq_acc": 0.8, "test_seq_f1": 0.8, "val_acc": 0.9}
        for e in range(1, epochs + 1)
    ]  # fmt: skip
    rows[-1].update(last)
    return pd.DataFrame(rows)


BAD = {
    "accuracy 1.5, test_acc -3": (csp_history(test_seq_acc=1.5, test_acc=-3.0), "outside [0, 1]"),
    "1 of its 2 epochs": (csp_history(1), "1 history rows for its 2 epochs"),
    "102 rows for 2 epochs": (csp_history(102), "102 history rows for its 2 epochs"),
    "no test_seq_acc": (csp_history().drop(columns="test_seq_acc"), "no test_seq_acc column"),
    "a history that is a list": ("list", "not a table"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_record_is_set_aside_and_not_served(tmp_path, case):
    store = RunStore(tmp_path)
    good = RunRecord("csp", config_hash("csp", CONFIG), CONFIG, csp_history())
    path = store.save(good)
    assert store.load("csp", CONFIG).history.equals(good.history)  # a whole one is served
    history, why = BAD[case]
    if isinstance(history, str):  # written as a list of rows, not a dict of columns
        blob = good.to_json() | {"history": csp_history().to_dict(orient="records")}
        path.write_text(json.dumps(blob))
    else:
        store.save(RunRecord("csp", good.key, CONFIG, history))
    with pytest.warns(CorruptRecordWarning, match=re.escape(why)):
        assert store.load("csp", CONFIG) is None  # so the sweep trains it again
    assert not path.exists() and path.with_suffix(".corrupt").exists()


def test_a_stopped_run_may_have_fewer_rows_than_epochs(tmp_path):
    store = RunStore(tmp_path)
    stopped = RunRecord("csp", config_hash("csp", CONFIG), CONFIG, csp_history(1), "early_stop")
    store.save(stopped)
    assert store.load("csp", CONFIG) is not None
    store.save(RunRecord("csp", stopped.key, CONFIG, csp_history(1)))  # the same, status ok
    with pytest.warns(CorruptRecordWarning, match="no early stop"):
        assert store.load("csp", CONFIG) is None


# --- committed results --------------------------------------------------------------------


ABLATIONS = "csp_ablations_paper_text.csv"


def _out_of_range(t: pd.DataFrame) -> pd.DataFrame:
    return t.assign(
        test_seq_acc=t["test_seq_acc"].mask(t["loss"].eq("ce") & t["task"].eq("mod3"), 1.5)
    )


def _failed(t: pd.DataFrame) -> pd.DataFrame:
    return t.assign(status=t["status"].mask(t.index == 7, "failed"))


EDITS = {  # how the file is spoiled -> the line and the column the refusal must name
    "accuracy 1.5": (_out_of_range, "test_seq_acc"),
    "5 seed rows twice": (lambda t: pd.concat([t, t.tail(5)], ignore_index=True), "seed"),
    "a failed run": (_failed, "status"),
    "epochs run short": (lambda t: t.assign(epochs_run=t["epochs"] - 1, status="ok"), "epochs_run"),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_findings_refuse_a_bad_committed_file_naming_file_line_and_column(
    results_copy, capsys, case
):
    edit, column = EDITS[case]
    path = results_copy / ABLATIONS
    table = pd.read_csv(path)
    edit(table).to_csv(path, index=False)
    bad = pd.read_csv(path)
    assert cli.main(["findings"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert (
        ABLATIONS in err
        and "line " in err
        and f"column {column}"
        in err.replace(
            "column table, rotation, variant, loss, split, task, preset, seed", "column seed"
        )
    ), err
    line = int(err.split("line ")[1].split(",")[0])
    assert 2 <= line <= len(bad) + 1  # a line of the file, past the header
    if case == "accuracy 1.5":
        assert bad.at[line - 2, "test_seq_acc"] == 1.5
    if case == "a failed run":
        assert line == 7 + 2
