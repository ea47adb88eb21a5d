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


# --- structattn figures ---------------------------------------------------------------


def test_figures_removes_only_files_it_drew_itself(tmp_path, monkeypatch, capsys):
    from structattn_lite import cli, committed_figures

    monkeypatch.setenv("STRUCTATTN_FIGURES", str(tmp_path))
    (tmp_path / "my_notes.txt").write_text("a user's own file")
    (tmp_path / "drafts").mkdir()  # a subfolder (it crashed with IsADirectoryError)
    draws = [["02_a.png", "02_b.png"], ["02_b.png"]]  # the second redraw no longer draws a

    def write_all(out):
        paths = [out / name for name in draws.pop(0)]
        for path in paths:
            path.write_bytes(b"drawn")
        return paths

    monkeypatch.setattr(committed_figures, "write_all", write_all)
    assert cli.main(["figures"]) == 0
    assert (tmp_path / "my_notes.txt").exists() and (tmp_path / "drafts").is_dir()
    assert cli.main(["figures"]) == 0
    assert not (tmp_path / "02_a.png").exists()  # it drew this one, and draws it no more
    assert (tmp_path / "02_b.png").exists() and (tmp_path / "my_notes.txt").exists()
    out = capsys.readouterr().out
    assert "02_a.png: removed" in out and "my_notes" not in out


def test_figures_folder_naming_a_file_gives_one_line(tmp_path, monkeypatch, capsys):
    from structattn_lite import cli

    afile = tmp_path / "figures.txt"
    afile.write_text("not a folder")
    monkeypatch.setenv("STRUCTATTN_FIGURES", str(afile))
    assert cli.main(["figures"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "STRUCTATTN_FIGURES" in err
    assert afile.read_text() == "not a folder"


# --- Ray ------------------------------------------------------------------------------


@pytest.fixture
def fake_ray(monkeypatch):
    """A stand-in for the ``ray`` module that records how ``ray.init`` was called."""
    import sys
    from types import ModuleType, SimpleNamespace

    ray = ModuleType("ray")
    ray.calls, ray.refuse = [], None
    constants = SimpleNamespace(ENABLE_RAY_CLUSTER=True)
    private = ModuleType("ray._private")
    private.ray_constants = constants

    def init(**kwargs):
        ray.calls.append({**kwargs, "cluster": constants.ENABLE_RAY_CLUSTER})
        if ray.refuse is not None:
            raise ray.refuse

    ray.init, ray.is_initialized, ray._private = init, lambda: False, private
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray._private", private)
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", constants)
    return ray


def test_a_local_ray_instance_listens_on_loopback_only(fake_ray):
    from structattn_lite.runs import connect_ray

    connect_ray()
    (call,) = fake_ray.calls
    # Ray on Linux swaps 127.0.0.1 for the host's address unless told it is no cluster
    assert call["_node_ip_address"] == "127.0.0.1" and call["cluster"] is False
    assert call["include_dashboard"] is False


def test_a_bad_ray_address_gives_one_line_before_anything_trains(fake_ray, runs_here, capsys):
    from structattn_lite import cli

    fake_ray.refuse = ConnectionError("Could not find any running Ray instance.\nmore")
    args = ["run", "grokking", "--profile", "smoke", "--executor", "ray"]
    assert cli.main([*args, "--address", "10.9.9.9:6379"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--address" in err and "10.9.9.9:6379" in err
    assert not list(runs_here.iterdir())


@pytest.fixture
def runs_here(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTATTN_RUNS", str(tmp_path))
    return tmp_path


# --- flags a study does not take; filters that match nothing ----------------------------


@pytest.mark.parametrize(
    "flag", [["--epochs", "3"], ["--length", "8"], ["--task", "parity"]], ids=lambda f: f[0]
)
def test_a_flag_the_attention_study_does_not_take_is_refused(flag, runs_here, capsys):
    from structattn_lite import cli

    assert cli.main(["run", "attention", "--profile", "smoke", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag[0] in err and "Traceback" not in err
    assert "grokking" in err and "length" in err  # the studies that take it
    assert not list(runs_here.iterdir())


@pytest.mark.parametrize(
    "flag, listed",
    [(["--seed", "999"], "0"), (["--task", "bogus"], "parity")],
    ids=["seed", "task"],
)
def test_a_filter_that_matches_nothing_lists_what_exists(flag, listed, runs_here, capsys):
    from structattn_lite import cli

    assert cli.main(["run", "grokking", "--profile", "smoke", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag[0] in err
    assert f"{flag[0].lstrip('-')}s are: " in err and listed in err.split("are: ")[1]


# --- STRUCTATTN_DATA naming a wrong place ------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_a_data_folder_named_but_wrong_is_an_error_not_the_fallback(kind, tmp_path, monkeypatch):
    from structattn_lite.studies.attention import experiment

    where = tmp_path / "data"
    if kind == "empty":
        where.mkdir()
    elif kind == "file":
        where.write_text("not a folder")
    monkeypatch.setenv("STRUCTATTN_DATA", str(where))
    with pytest.raises(ValueError, match=r"^STRUCTATTN_DATA=.*names no folder holding Penn"):
        experiment.resolve_dataset()


@pytest.mark.parametrize("command", [["run", "attention", "--profile", "smoke"], ["study"]])
def test_the_cli_names_a_wrong_data_folder_in_one_line(command, runs_here, monkeypatch, capsys):
    from structattn_lite import cli, notebook_runner

    monkeypatch.setattr(notebook_runner, "run_notebooks", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setenv("STRUCTATTN_DATA", str(runs_here / "nowhere"))
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "STRUCTATTN_DATA" in err and "nowhere" in err


# --- huge values -----------------------------------------------------------------------


def test_threads_beyond_the_cores_give_one_line(runs_here, capsys):
    import os

    from structattn_lite import cli

    assert cli.main(["run", "grokking", "--profile", "smoke", "--threads", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--threads=100000" in err
    assert f"{os.cpu_count()} cores" in err
    assert not list(runs_here.iterdir())


def test_a_length_no_split_can_hold_gives_one_line(runs_here, capsys):
    from structattn_lite import cli

    assert cli.main(["run", "grokking", "--profile", "smoke", "--length", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "length=100000" in err


def reference_overlap(x_train, x_test, x_val):
    """The statistics by their definition: sets of byte-string prefixes (n L^2)."""
    rows = lambda x: [r.tobytes() for r in x.numpy().astype("uint8")]  # noqa: E731
    train, test, val = rows(x_train), rows(x_test), rows(x_val)
    length = x_train.shape[1]
    hits = sum(sum(r[:t] in {s[:t] for s in train} for r in test) for t in range(1, length + 1))
    return {
        "n_distinct": len(set(train) | set(test) | set(val)),
        "test_in_train": sum(r in set(train) for r in test) / len(test),
        "test_prefixes_in_train": hits / (len(test) * length),
        "val_in_train": sum(r in set(train) for r in val) / len(val),
    }


@pytest.mark.parametrize(
    "task, n, length", [("parity", 600, 12), ("mod3", 400, 8), ("dyck1", 300, 10)]
)
def test_overlap_stats_match_their_definition(task, n, length):
    from structattn_lite.data.splits import make_dataset

    data = make_dataset(task, n, length, 0, leaky=True)
    assert data.stats == pytest.approx(reference_overlap(data.x_train, data.x_test, data.x_val))
    assert 0 < data.stats["test_prefixes_in_train"] < 1


def test_overlap_stats_are_linear_in_the_length():
    """n L^2 took minutes at L = 20,000 (and never ended at 100,000); n L log n, seconds."""
    import time

    import torch

    from structattn_lite.data.splits import overlap_stats

    x = torch.randint(0, 2, (1000, 20000), generator=torch.Generator().manual_seed(0))
    start = time.process_time()
    stats = overlap_stats(x[:700], x[700:], x[:100])
    assert time.process_time() - start < 15
    assert stats["test_in_train"] == 0 and stats["val_in_train"] == 1.0


# --- errors that ended in a traceback ------------------------------------------------------


def test_ctrl_c_exits_130_with_one_line(runs_here, monkeypatch, capsys):
    from structattn_lite import cli, runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "train", interrupted)
    assert cli.main(["run", "grokking", "--profile", "smoke"]) == 130
    err = [line for line in capsys.readouterr().err.splitlines() if "structattn" in line]
    assert err == [f"structattn: {cli.INTERRUPTED}"] and "resumes" in err[0]


@pytest.mark.parametrize("long", ["path", "name"])
def test_a_runs_dir_longer_than_the_system_allows_gives_one_line(long, runs_here, capsys):
    import os

    from structattn_lite import cli

    if long == "path":
        where = runs_here / "/".join(["d" * 200] * (os.pathconf("/", "PC_PATH_MAX") // 200 + 1))
    else:
        where = runs_here / ("d" * (os.pathconf("/", "PC_NAME_MAX") + 1))
    args = ["run", "grokking", "--profile", "smoke", "--runs-dir", str(where)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--runs-dir" in err and "MAX" in err


# --- the parser without torch ---------------------------------------------------------------


def test_help_and_the_parser_import_no_torch_nor_any_study():
    import subprocess
    import sys

    code = (
        "import sys, contextlib, io\n"
        "from structattn_lite.cli import build_parser, main\n"
        "build_parser()\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['run', '--help'])\n"
        "assert 'structattn' in out.getvalue()\n"
        "heavy = [m for m in ('torch', 'pandas', 'structattn_lite.studies') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_parsers_study_names_are_the_studies():
    from structattn_lite.config import STUDY_NAMES
    from structattn_lite.studies import STUDIES

    assert tuple(STUDIES) == STUDY_NAMES


# --- runs on a GPU -------------------------------------------------------------------------


@pytest.fixture
def restore_determinism():
    import os

    import torch

    flag, env = (
        torch.are_deterministic_algorithms_enabled(),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )
    yield
    torch.use_deterministic_algorithms(flag)
    if env is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = env


def test_a_run_on_cuda_uses_deterministic_kernels(monkeypatch, restore_determinism):
    import os

    import torch

    from structattn_lite.config import training_device

    torch.use_deterministic_algorithms(False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert training_device("cpu") == "cpu"  # the CPU is left as it is
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert training_device("cuda:0") == "cuda:0"
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_each_unit_on_cuda_is_deterministic_in_its_own_process(monkeypatch, restore_determinism):
    import torch

    from structattn_lite.runs import train

    torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen = []

    class Study:
        def run(self, cfg, progress, callbacks, device, checkpoint):
            seen.append((device, torch.are_deterministic_algorithms_enabled()))

    train(Study(), Toy(), device="cuda")  # as a Ray worker runs it
    assert seen == [("cuda", True)]


def test_exported_histories_say_where_each_run_trained(tmp_path):
    import pandas as pd

    from structattn_lite.records import export_histories, load_histories

    store, study = RunStore(tmp_path / "runs"), ToyStudy()
    records = sweep(study, [Toy(), Toy(lr=0.2)], store=store, progress=False)
    records[1].device = "cuda"
    path = export_histories(records, tmp_path / "h.csv")
    assert list(pd.read_csv(path)["device"].unique()) == ["cpu", "cuda"]
    assert [r.device for r in load_histories(path)] == ["cpu", "cuda"]
    assert "device" not in load_histories(path)[0].history
    # a file committed before the column: its runs trained on the CPU
    pd.read_csv(path).drop(columns="device").to_csv(path, index=False)
    back = load_histories(path)
    assert [r.device for r in back] == ["cpu", "cpu"] and "device" not in back[0].history


# --- damaged committed results ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, cut",
    [("attention_runs.csv", 40), ("attention_histories.csv.gz", 100), ("claims.csv", 7)],
    ids=["summary cut mid-row", "gzip cut short", "claims cut mid-row"],
)
def test_findings_refuse_a_committed_file_cut_short(results_copy, capsys, name, cut):
    from structattn_lite import cli

    path = results_copy / name
    path.write_bytes(path.read_bytes()[:-cut])
    assert cli.main(["findings"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and name in err and "Traceback" not in err


def test_findings_refuse_records_that_lost_the_runs_of_decided_claims(results_copy, capsys):
    from structattn_lite import cli, findings

    assert len(findings.check_committed()) > 0  # the copy as committed: whole
    import pandas as pd

    readme = (findings.repo_root() / "README.md").read_bytes()
    path = results_copy / "csp_ablations_paper_text.csv"
    runs = pd.read_csv(path)
    runs[runs["loss"] != "ce"].to_csv(path, index=False)  # whole, without its CE runs
    assert cli.main(["findings", "--write"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "table3/ce/" in err and "claims.csv" in err
    path = results_copy / "attention_runs.csv"
    path.write_text(path.read_text().splitlines()[0] + "\n")  # no runs at all
    assert cli.main(["findings", "--write"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "restore data/results" in err
    assert (findings.repo_root() / "README.md").read_bytes() == readme


# --- the README's command section ------------------------------------------------------------


def test_the_readme_says_how_to_run_structattn_and_what_it_reads():
    from structattn_lite.config import repo_root

    text = (repo_root() / "README.md").read_text()
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/structattn" in section and "source .venv/bin/activate" in section
    assert "make study" in section and "Penn Treebank" in section
    assert "STRUCTATTN_DATA" in section and "fallback" in section


# --- the teaching app's kernels ----------------------------------------------------------------


def test_the_teaching_app_culls_the_kernels_of_closed_pages():
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
    from voila.app import Voila
    from voila.voila_kernel_manager import voila_kernel_manager_factory

    from structattn_lite.dashboard import CULL_IDLE_S, voila_args

    app = Voila()
    app.parse_command_line(voila_args(["dashboards", "--no-browser", "--port=8866"]))
    manager = voila_kernel_manager_factory(  # the class Voila builds its kernels with
        AsyncMappingKernelManager, False, 0
    )
    kernels = manager(parent=app)
    assert kernels.cull_idle_timeout == CULL_IDLE_S > 0 and kernels.cull_interval > 0
    assert kernels.cull_connected is False  # an open page keeps its kernel
    # the user's own setting wins
    app = Voila()
    app.parse_command_line(voila_args(["--MappingKernelManager.cull_idle_timeout=600"]))
    assert AsyncMappingKernelManager(config=app.config).cull_idle_timeout == 600


def test_findings_recomputes_the_ledger_without_importing_torch():
    """`structattn findings` rebuilds every ledger row from data/results and checks the
    committed files against it without loading torch (it peaked at 1.1 GB when it did;
    benchmarks/bench_findings_memory.py measures the peak, about 0.23 GB now). The study
    modules it reads load their torch parts only where a run is built or trained."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from structattn_lite.cli import main\n"
        "code = main(['findings'])\n"
        "print(code, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "0 False", (
        done.stdout[-500:],
        done.stderr[-500:],
    )
