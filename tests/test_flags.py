"""Every flag is checked before torch is imported (a refusal in one line naming the flag, in
a fraction of a second); a repeated --seed or --task adds up, as the help says; and the
config types refuse a seed out of range (naming ``seed``), ``val_fraction`` >= 1 and a
bool field given anything but True or False (a new hash for the same run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REFUSED = {  # argv -> what the one line must name
    "empty --grid": (["run", "grokking", "--grid", ""], "--grid"),
    "empty export --grid": (["export", "grokking", "--grid", ""], "--grid"),
    **{
        f"unknown {study} {command} --grid": ([command, study, "--grid", "nope"], "--grid='nope'")
        for study in ("grokking", "ablations", "length", "attention")
        for command in ("run", "export")
    },
    "--seed without a value": (["run", "grokking", "--seed"], "--seed"),
    "--task without a value": (["run", "grokking", "--task", "--epochs", "2"], "--task"),
    "--address without ray": (["run", "grokking", "--address", "127.0.0.1:6379"], "--address"),
    "empty --runs-dir": (["run", "grokking", "--runs-dir", ""], "--runs-dir"),
    "empty study --runs-dir": (["study", "--runs-dir", ""], "--runs-dir"),
    "--threads 0": (["run", "grokking", "--threads", "0"], "--threads"),
    "--epochs 0": (["run", "grokking", "--epochs", "0"], "--epochs"),
    "--lr 0": (["run", "grokking", "--lr", "0"], "--lr"),
    "--lr on attention": (["run", "attention", "--lr", "0.01"], "--lr is not taken"),
    "--epochs on attention": (["run", "attention", "--epochs", "3"], "--epochs is not taken"),
    "--seed-batching on attention": (["run", "attention", "--seed-batching"], "--seed-batching"),
    "--lr nan": (["run", "ablations", "--lr", "nan"], "--lr"),
}

CHECK = """
import sys
from structattn_lite import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(code, "torch" in sys.modules, "pandas" in sys.modules or "numpy" in sys.modules)
"""
# A grid name is checked against tables that load neither torch nor numpy and pandas (the
# 0.2 s of a bare start, where pandas alone took 0.4 s); the other flags need no table.
LIGHT = {case for case in REFUSED if "--grid" in REFUSED[case][1]}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_bad_flag_is_refused_in_one_line_before_torch_is_imported(case, tmp_path):
    argv, flag = REFUSED[case]
    env = {**os.environ, "STRUCTATTN_RUNS": str(tmp_path / "runs")}
    done = subprocess.run(  # a flag let through would train: cut it short
        [sys.executable, "-c", CHECK, *argv],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    code, torch_loaded, tables_loaded = done.stdout.split()
    err = done.stderr.strip()
    assert code == "2" and len(err.splitlines()) == 1 and flag in err, (code, err)
    assert "Traceback" not in err and "usage:" not in err
    assert torch_loaded == "False", f"torch was imported before refusing {argv}"
    if case in LIGHT:
        assert tables_loaded == "False", f"numpy or pandas was imported before refusing {argv}"
    assert not list(tmp_path.iterdir())  # nothing written where it ran


def test_a_repeated_seed_or_task_adds_up_as_the_help_says():
    from structattn_lite.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["run", "grokking", "--seed", "0", "--seed", "1", "2",
                              "--task", "parity", "--task", "mod3"])  # fmt: skip
    assert args.seed == [0, 1, 2] and args.task == ["parity", "mod3"]
    run = parser._subparsers._group_actions[0].choices["run"]
    helps = {a.dest: a.help for a in run._actions}
    assert "--seed 0 --seed 1 is --seed 0 1" in helps["seed"]
    assert "--task parity --task mod3 is --task parity mod3" in helps["task"]


# --- the config types --------------------------------------------------------------------


def csp(**changes):
    from structattn_lite.training.state_tracking import CSPRun

    return CSPRun(**changes)


def length_run(**changes):
    from structattn_lite.studies.length.experiment import LengthRun

    return LengthRun(**changes)


def attention_run(**changes):
    from structattn_lite.studies.attention.experiment import Config

    return Config(**changes)


BAD_CONFIGS = {
    "CSPRun seed 2**64": (csp, {"seed": 2**64}, "seed"),
    "LengthRun seed 2**40": (length_run, {"seed": 2**40}, "seed"),
    "attention seed 2**33": (attention_run, {"seed": 2**33}, "seed"),
    "CSPRun val_fraction 1.0": (csp, {"val_fraction": 1.0}, "val_fraction"),
    "LengthRun val_fraction 1.5": (length_run, {"val_fraction": 1.5}, "val_fraction"),
    "CSPRun leaky 'yes'": (csp, {"leaky": "yes"}, "leaky"),
    "CSPRun leaky 1": (csp, {"leaky": 1}, "leaky"),
    "attention shared_qk 1": (attention_run, {"shared_qk": 1}, "shared_qk"),
    "attention read_test 0": (attention_run, {"read_test": 0}, "read_test"),
    "CSPRun n too small to split": (csp, {"n": 2}, "n"),
    "CSPRun parentheses at an odd length": (csp, {"task": "dyck1", "length": 15}, "length"),
    "LengthRun n too small to split": (length_run, {"n": 2}, "n"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_config_refuses_a_value_out_of_its_range_naming_it(case):
    make, changes, name = BAD_CONFIGS[case]
    make()  # the defaults are a valid config
    if name == "seed":
        from structattn_lite.config import SEED_MAX

        assert make(seed=SEED_MAX).seed == SEED_MAX  # the largest seed is taken
    with pytest.raises(ValueError, match=rf"^{name}\b") as err:
        make(**changes)
    assert len(str(err.value).splitlines()) == 1


# --- the store's root and the committed results' folder ------------------------------------


@pytest.mark.parametrize("how", ["a file", "a link loop", "a path through a file"])
def test_a_store_root_that_cannot_be_a_folder_is_refused_in_one_line(tmp_path, capsys, how):
    from structattn_lite import cli

    target = tmp_path / "runs"
    if how == "a file":
        target.write_text("not a folder")
    elif how == "a link loop":
        target.symlink_to(target)
    else:
        (tmp_path / "file").write_text("")
        target = tmp_path / "file" / "runs"
    argv = ["run", "grokking", "--profile", "smoke", "--epochs", "1", "--runs-dir", str(target)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--runs-dir" in err and str(target) in err, err


def test_findings_name_a_results_folder_that_is_missing(tmp_path, monkeypatch, capsys):
    from structattn_lite import cli

    missing = tmp_path / "no such results"
    monkeypatch.setenv("STRUCTATTN_RESULTS", str(missing))
    assert cli.main(["findings"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(missing) in err and "STRUCTATTN_RESULTS" in err


def test_seed_batching_is_refused_by_a_study_that_does_not_take_it(tmp_path, capsys):
    from structattn_lite import cli

    argv = ["run", "attention", "--profile", "smoke", "--seed-batching", "--runs-dir"]
    assert cli.main([*argv, str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--seed-batching" in err and "grokking" in err, err
    assert not (tmp_path / "runs").exists()  # nothing trained


def test_length_is_checked_against_every_runs_data_before_the_first_trains(tmp_path, capsys):
    from structattn_lite import cli

    runs = tmp_path / "runs"
    argv = ["run", "ablations", "--grid", "smoke", "--length", "3", "--runs-dir", str(runs)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "length 3" in err and "only 8 exist" in err, err
    assert not runs.exists()  # nothing trained


@pytest.mark.parametrize("study", ["grokking", "ablations", "length", "attention"])
def test_an_export_of_a_grid_with_no_committed_file_is_refused_in_one_line(study, tmp_path, capsys):
    """Every study names the grids it exports (COMMITTED_CSV); another is refused in one
    line that lists them, before any run is read (the length study's raised a traceback)."""
    from structattn_lite import cli
    from structattn_lite.studies import get_study, study_table

    argv = ["export", study, "--grid", "nope", "--only-cached", "--runs-dir"]
    assert cli.main([*argv, str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--grid='nope'" in err, err
    assert all(grid in err for grid in get_study(study).COMMITTED_CSV)
    for table in ("GRIDS", "COMMITTED_CSV"):  # one table each, two doors to it
        assert getattr(get_study(study), table) is study_table(study, table)


def test_lr_overrides_every_runs_rate_as_epochs_does_its_epochs():
    """``--lr`` reaches each run's optimizer the one way a rate does (its OptimConfig), so
    the run is a new config with its own hash; the rest of the grid is unchanged."""
    import dataclasses

    from structattn_lite.cli import _configs, build_parser
    from structattn_lite.records import config_hash

    parse = build_parser().parse_args
    for study in ("grokking", "ablations", "length"):
        plain = _configs(parse(["run", study, "--grid", "smoke"]))
        faster = _configs(parse(["run", study, "--grid", "smoke", "--lr", "0.0123"]))
        assert {c.optim.lr for c in faster} == {0.0123} != {c.optim.lr for c in plain}
        assert [
            dataclasses.replace(c, optim=p.optim) for c, p in zip(faster, plain, strict=True)
        ] == plain
        assert not {config_hash("x", c) for c in faster} & {config_hash("x", c) for c in plain}


@pytest.mark.parametrize("study", ["attention", "grokking", "ablations", "length"])
def test_the_run_flags_a_study_declares_are_those_its_configs_read(study):
    """RUN_FLAGS (read before torch loads) is what the study's config class and setup
    say: a flag whose config field it has, and seed batching where its runs stack."""
    from structattn_lite.cli import FLAG_FIELDS, _fields
    from structattn_lite.studies import get_study, study_table

    module = get_study(study)
    fields = _fields(module)
    derived = {flag for flag, names in FLAG_FIELDS.items() if fields & set(names)}
    derived |= {"seed_batching"} if hasattr(module, "setup") else set()
    assert set(study_table(study, "RUN_FLAGS")) == derived
