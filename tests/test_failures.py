"""Runs that fail loudly and recover (issue 27): corrupt checkpoints and records, locks,
bad arguments, a blocked or full store, and the task and data options at their ends.
"""

from __future__ import annotations

import pytest

from structattn_lite.data import text
from structattn_lite.data.splits import make_dataset

# --- tasks and data ------------------------------------------------------------------


@pytest.mark.parametrize("balanced", [0.0, 1.0])
@pytest.mark.parametrize("leaky", [False, True])
def test_dyck1_works_at_both_ends_of_balanced(balanced, leaky):
    data = make_dataset("dyck1", n=100, length=12, seed=0, balanced=balanced, leaky=leaky)
    labels = data.y_train[:, -1].float()  # the last prefix's label is the sequence label
    assert len(data.x_train) == 70 and labels.eq(balanced).all()


def test_char_ptb_names_the_missing_split_file(tmp_path):
    folder = tmp_path / "ptb"
    folder.mkdir()
    (folder / "ptb.char.train.txt").write_text("a b ")
    (folder / "ptb.char.test.txt").write_text("a b ")
    with pytest.raises(FileNotFoundError) as err:
        text.char_ptb(tmp_path, verify=False)
    message = str(err.value)
    lacks = message.split("lacks", 1)[1].split("(", 1)[0]
    assert "ptb.char.valid.txt" in lacks and "train" not in lacks and "test" not in lacks


def test_char_ptb_rejects_a_root_that_is_not_a_path():
    with pytest.raises(ValueError, match="root"):
        text.char_ptb(123)


def test_char_ptb_names_a_file_that_is_not_utf8(tmp_path):
    folder = tmp_path / "ptb"
    folder.mkdir()
    for name, _, _ in text.PTB_FILES.values():
        (folder / name).write_text("a b ")
    bad = folder / "ptb.char.valid.txt"
    bad.write_bytes(b"a \xff b ")
    with pytest.raises(ValueError, match="ptb.char.valid.txt") as err:
        text.char_ptb(tmp_path, verify=False)
    assert not isinstance(err.value, UnicodeDecodeError)
