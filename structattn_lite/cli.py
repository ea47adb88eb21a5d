"""Command line: ``structattn`` (also ``python -m structattn_lite``).

structattn run grokking --profile quick --seed 0           train (or reuse) one study's grid
structattn run length --grid committed --executor ray      the same grid as Ray tasks
structattn export ablations --grid paper_table4             write data/results/ from records
structattn data fetch ptb                                  download a dataset (online users)
structattn findings --write                                README findings from data/results
structattn figures                                         redraw figures/ from data/results
structattn study --profile quick                           execute the notebooks (make study)

Every argument is checked before anything trains (exit status 2, one line naming it).
``run``, ``export`` and ``study`` exit with status 1, after a summary naming them, when
any run failed or was skipped (held by another process, at a path that cannot be
written), and with a one-line error when the run store cannot be written.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
import warnings

from structattn_lite import __version__, config

# Only light modules above: the parser (and --help) must not import torch or a study;
# each command imports what it needs when it runs.

RUNS_HELP = (
    "where run records are kept and looked up (default: the STRUCTATTN_RUNS environment "
    "variable, else data/runs/ in the checkout)"
)


# The config fields each narrowing or overriding flag of ``run`` reads: a study whose
# configs have none of them does not take the flag.
FLAG_FIELDS = {
    "task": ("task",),
    "epochs": ("epochs",),
    "length": ("length", "train_length"),
    "lr": ("optim",),  # the rate an OptimConfig holds (the attention grids tune theirs)
}


def _fields(study) -> set[str]:
    config_class = getattr(study, "Config", None)
    return {f.name for f in dataclasses.fields(config_class)} if config_class else set()


def _check_flags(args) -> None:
    """A ValueError for a flag the study's runs do not take (it would be ignored, or
    crash), naming the studies that take it; read from tables that load no torch."""
    from structattn_lite.studies import study_table

    def takers(flag: str) -> str:
        return ", ".join(n for n in config.STUDY_NAMES if flag in study_table(n, "RUN_FLAGS"))

    takes = study_table(args.study, "RUN_FLAGS")
    if getattr(args, "seed_batching", False) and "seed_batching" not in takes:
        raise ValueError(
            f"--seed-batching is not taken by the {args.study} study (each of its runs "
            f"trains itself); the studies that take it are: {takers('seed_batching')}"
        )
    for flag in FLAG_FIELDS:
        if getattr(args, flag, None) is not None and flag not in takes:
            raise ValueError(
                f"--{flag} is not taken by the {args.study} study; the studies that take "
                f"it are: {takers(flag)}"
            )


def _narrow(configs: list, flag: str, wanted: list, study: str, grid: str) -> list:
    """The configs whose ``flag`` field is among ``wanted``; a ValueError listing what
    the grid has when none is."""
    kept = [c for c in configs if getattr(c, flag) in wanted]
    if not kept:
        have = sorted({getattr(c, flag) for c in configs}, key=str)
        raise ValueError(
            f"--{flag} {' '.join(map(str, wanted))} matches no run of the {study} study's "
            f"grid {grid!r}; its {flag}s are: {', '.join(map(str, have))}"
        )
    return kept


def _configs(args) -> list:
    """The study's grid, narrowed by --task/--seed and with --epochs/--length overrides."""
    from structattn_lite.studies import get_study

    study = get_study(args.study)
    grid = args.grid or args.profile
    configs = study.grid(grid)
    if args.task:
        configs = _narrow(configs, "task", args.task, args.study, grid)
    if args.seed:
        asked = _narrow(configs, "seed", args.seed, args.study, grid)
        if getattr(args, "stacks", None):  # each asked seed's whole stack
            stacks = {args.stacks.of(c) or (c.seed,) for c in asked}
            widened = [c for c in configs if (args.stacks.of(c) or (c.seed,)) in stacks]
            if len(widened) > len(asked) and not getattr(args, "stack_noted", False):
                print(
                    f"structattn: the {grid} grid trains its seeds in stacks, and a seed's "
                    f"float32 numbers depend on its stack: --seed means its whole stack "
                    f"({'; '.join(' '.join(map(str, s)) for s in sorted(stacks))})",
                    file=sys.stderr,
                )
                args.stack_noted = True
            asked = widened
        configs = asked
    overrides = {
        field: getattr(args, flag) for flag in ("epochs", "length") for field in FLAG_FIELDS[flag]
    }
    fields = _fields(study)  # the grid's configs are all of the study's Config class
    changes = {k: v for k, v in overrides.items() if v is not None and k in fields}
    if not configs:
        raise ValueError(f"no run of study {args.study!r} matches those filters")
    configs = [dataclasses.replace(c, **changes) for c in configs]
    if args.lr is not None:  # the one rate every run's optimizer starts from
        configs = [dataclasses.replace(c, optim=dataclasses.replace(c.optim, lr=args.lr))
                   for c in configs]  # fmt: skip
    for c in configs:  # each run's data can be drawn (--length 3: only 8 parity strings)
        try:
            if hasattr(c, "check_data"):
                c.check_data()
        except ValueError as err:
            named = ", ".join(f"{k}={getattr(c, k)}" for k in ("task", "preset", "model", "seed")
                              if hasattr(c, k))  # fmt: skip
            raise ValueError(
                f"the {args.study} run ({named}) cannot draw its data: {err}"
            ) from None
    return configs


def _check_light(args) -> None:
    """The arguments checked without torch or a study (a refusal in a fraction of a
    second): a ValueError naming the bad one."""
    if getattr(args, "threads", None) is not None:  # checked first, as an integer >= 1 too
        config.check_threads("--threads", args.threads)
    for name in ("epochs", "length"):
        if getattr(args, name, None) is not None:
            config.check_int(f"--{name}", getattr(args, name), minimum=1)
    if getattr(args, "lr", None) is not None:
        config.check_number("--lr", args.lr, minimum=0.0, strict=True)
    if getattr(args, "address", None) is not None and args.executor != "ray":
        raise ValueError(
            f"--address {args.address} needs --executor ray (it names a Ray cluster); "
            f"the executor is {args.executor!r}"
        )


def _check(args) -> None:
    """Every argument, before anything trains: a ValueError naming the bad one."""
    _check_light(args)
    if args.command in ("run", "export"):  # the study's grid, read without torch
        from structattn_lite.studies import study_table

        if args.command == "export":  # the grids an export writes: its COMMITTED_CSV
            config.check_choice("--grid", args.grid, list(study_table(args.study, "COMMITTED_CSV")))
        else:
            config.check_choice(
                "--grid", args.grid or args.profile, study_table(args.study, "GRIDS")
            )
            _check_flags(args)  # the flags the study's runs take, also without torch
    if getattr(args, "device", None) is not None:
        config.resolve_device(args.device, kinds=config.TRAINING_DEVICES)
    if getattr(args, "executor", None) == "ray" and args.address is not None:
        from structattn_lite.runs import connect_ray

        connect_ray(args.address)  # a bad or unreachable address: one line, before training
    if args.command == "study":  # the attention notebook reads PTB, or the fallback
        from structattn_lite.data.text import resolve_dataset

        with warnings.catch_warnings():  # the notebook shows the fallback's banner itself
            warnings.simplefilter("ignore")
            resolve_dataset()  # STRUCTATTN_DATA naming a place without PTB: one line
    if args.command == "figures":
        config.figures_dir()  # STRUCTATTN_FIGURES names a folder (or nothing yet)
    if args.command == "run":
        _whole_stacks(args)
        args.configs = _configs(args)


def _whole_stacks(args) -> None:
    """``args.stacks``: the stacks the grid trains its seeds in (``config.seed_stacks``;
    None: it names none). There --seed k means k's whole stack, since a seed's float32
    numbers depend on its stack (``_configs`` widens it; a note on stderr says so)."""
    from structattn_lite.studies import study_table

    args.stacks = config.seed_stacks(study_table(args.study, "GRIDS")[args.grid or args.profile])


@contextlib.contextmanager
def _unfinished_log():
    """A file where this command's sweeps (and its notebooks' kernels) list the runs they
    leave unfinished (``runs.UNFINISHED_ENV``); yields its path."""
    from structattn_lite.runs import UNFINISHED_ENV

    old = os.environ.get(UNFINISHED_ENV)
    with tempfile.TemporaryDirectory(prefix="structattn-") as folder:
        os.environ[UNFINISHED_ENV] = path = os.path.join(folder, "unfinished.jsonl")
        try:
            yield path
        finally:
            if old is None:
                os.environ.pop(UNFINISHED_ENV, None)
            else:
                os.environ[UNFINISHED_ENV] = old


def _report_unfinished(path: str, records=()) -> int:
    """Name the runs left unfinished on stderr (those not among ``records`` finished
    since); 1 if there are any, else 0."""
    from structattn_lite.records import FINISHED
    from structattn_lite.runs import read_unfinished

    done = {(r.experiment, r.key) for r in records if r.status in FINISHED}
    left = [e for e in read_unfinished(path) if (e["experiment"], e["key"]) not in done]
    if not left:
        return 0
    lines = [f"structattn: {len(left)} run(s) did not finish; run the command again to retry:"]
    for e in left:
        cfg = e["config"]
        named = ", ".join(
            f"{k}={cfg[k]}" for k in ("dataset", "task", "kind", "model", "seed") if k in cfg
        )
        lines.append(f"  {e['experiment']} run {e['key']} ({named}): {e['why'].splitlines()[0]}")
    print("\n".join(lines), file=sys.stderr)
    return 1


def _summary(records) -> str:
    """One line per run: what varies across the grid, its status, its last logged metrics."""
    import pandas as pd

    configs = pd.json_normalize([r.config for r in records])
    varying = [c for c in configs.columns if configs[c].astype(str).nunique() > 1]
    rows = []
    for (_, cfg), r in zip(configs[varying].iterrows(), records, strict=True):
        last = r.history.iloc[-1].to_dict() if len(r.history) else {}
        metrics = {
            k: round(v, 4) if isinstance(v, (int, float)) else v
            for k, v in last.items()
            if "acc" in k or "bpc" in k
        }
        rows.append({**cfg.to_dict(), "status": r.status, "epochs": len(r.history), **metrics})
    return pd.DataFrame(rows).to_string(index=False)


def _sweep_options(args) -> dict:
    """The flags of ``_execution_options`` that ``runs.sweep`` takes as they are."""
    return {
        k: getattr(args, k) for k in ("only_cached", "threads", "executor", "address", "device")
    }


def _run(args) -> int:
    from structattn_lite.runs import run_staged

    def waiting(count: int) -> None:
        print(f"structattn: waiting for {count} run(s) another process is training",
              file=sys.stderr)  # fmt: skip

    with _unfinished_log() as log:
        records = run_staged(
            args.study, lambda: _configs(args), first=args.configs,  # built and checked by _check
            wait=args.wait, on_wait=waiting, seed_batching=args.seed_batching,
            stacks=args.stacks, **_sweep_options(args),
        )  # fmt: skip
        print(_summary(records) if records else "no finished runs")
        return _report_unfinished(log, records)


def _export(args) -> int:
    from structattn_lite.runs import sweep
    from structattn_lite.studies import get_study

    study = get_study(args.study)
    with _unfinished_log() as log:
        stacks = config.seed_stacks(getattr(study, "GRIDS", {}).get(args.grid, {}))
        records = sweep(study, study.grid(args.grid), stacks=stacks, **_sweep_options(args))
        finished = [r for r in records if r.status != "failed"]
        if not finished:
            print(f"structattn: no finished run of grid {args.grid!r} to export", file=sys.stderr)
            return 1
        for path in study.export(finished, grid=args.grid):
            print(f"{path}: {len(finished)} runs of grid {args.grid!r}")
        return _report_unfinished(log, records)


def _fetch(args) -> int:
    from structattn_lite.data import fetch

    try:
        print(fetch(args.dataset, root=args.root))
    except OSError as err:  # no network (URLError is an OSError), or a refused download
        files = {
            "ptb": "ptb.char.train.txt, ptb.char.valid.txt and ptb.char.test.txt (Mikolov's "
            "simple-examples release, data/ folder)",
            "cifar10": "the cifar-10-batches-py/ folder of the CIFAR-10 python release",
        }[args.dataset]
        where = "<root>/ptb/" if args.dataset == "ptb" else "<root>/"
        print(
            f"structattn: could not download {args.dataset} ({err}). Without a network, copy "
            f"{files} into {where}, where <root> is the --root argument, else the folder named "
            "by the STRUCTATTN_DATA environment variable, else data/ in this checkout; for "
            "example `export STRUCTATTN_DATA=/path/to/data` with the files in "
            "/path/to/data/ptb/. Checksums are verified when the files are read.",
            file=sys.stderr,
        )
        return 2
    return 0


def _study(args) -> int:
    from structattn_lite.notebook_runner import notebooks, run_notebooks

    if args.only and not notebooks(args.only):
        names = ", ".join(p.name for p in notebooks())
        print(
            f"structattn: --only {' '.join(args.only)} matches no notebook; the notebooks "
            f"are: {names}",
            file=sys.stderr,
        )
        return 2
    from papermill.exceptions import PapermillExecutionError

    with _unfinished_log() as log:
        try:
            run_notebooks(args.profile, only=args.only, device=args.device)
        except PapermillExecutionError as err:
            print(f"structattn: a notebook failed: {err.ename}: {err.evalue}", file=sys.stderr)
            _report_unfinished(log)
            return 1
        return _report_unfinished(log)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _findings(args) -> int:
    from structattn_lite import findings

    try:
        table = findings.check_committed()
        if args.write:  # everything made and checked first, then each file replaced whole
            findings.write_readme(table)
        else:  # claims.csv as committed must be the ledger the records give
            findings.check_ledger(table)
    except (ValueError, OSError) as err:  # a damaged committed file, a file in the way
        print(f"structattn: {_one_line(err)}", file=sys.stderr)
        return 1
    if args.write:
        print("README.md findings rewritten from data/results")
    else:
        print(findings.render(table))
    return 0


def _figures(args) -> int:
    from structattn_lite import committed_figures

    folder = config.figures_dir()
    try:  # every file's place checked before any is drawn; each then replaced whole
        committed_figures.check_targets(folder)
        written = committed_figures.write_all(folder)
    except (ValueError, OSError) as err:
        print(f"structattn: {_one_line(err)}", file=sys.stderr)
        return 1
    for path in committed_figures.stale(folder, written):  # only files it drew itself
        path.unlink()
        print(f"{path}: removed (drawn earlier, from no committed record now)")
    committed_figures.record_drawn(folder, written)
    print(f"{len(written)} files in {folder} redrawn from data/results")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with a refusal in one line (its usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _nonempty(flag: str):
    """An argparse type: the text given, refusing an empty one (which would otherwise
    mean the default silently), naming ``flag``."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"needs a value, got {text!r}")
        return text

    parse.__name__ = flag  # argparse names the type in some messages
    return parse


def _execution_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda, cuda:N, or auto (CUDA when present); default cpu",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: this process (default); ray: one Ray task per run",
    )
    p.add_argument(
        "--address",
        default=None,
        type=_nonempty("--address"),
        help="with --executor ray (refused without it): the address of an existing Ray "
        "cluster (default: start a local Ray instance)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op torch threads per training process (default 1: these "
        "models are too small to gain from more)",
    )
    p.add_argument(
        "--only-cached",
        action="store_true",
        help="train nothing; use only the runs already on disk",
    )
    p.add_argument("--runs-dir", default=None, type=_nonempty("--runs-dir"), help=RUNS_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="structattn",
        description=__doc__.split("\n")[0],
        epilog="Run records are kept in $STRUCTATTN_RUNS (default: data/runs/ in the "
        "checkout); --runs-dir on run, export and study overrides it.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train (or reuse cached) runs of one study's grid")
    run.add_argument("study", choices=config.STUDY_NAMES, help="the study (one per notebook 02-05)")
    run.add_argument(
        "--profile",
        choices=config.PROFILES,
        default="quick",
        help="smoke (seconds), quick (minutes, default) or paper (hours)",
    )
    run.add_argument(
        "--grid",
        default=None,
        type=_nonempty("--grid"),
        help=f"a grid by name instead of the profile's: {', '.join(config.GRIDS)}, or a study's "
        "other committed grid (e.g. grokking: paper_era; length: authors); a committed "
        "grid's results ship in data/results",
    )
    run.add_argument(
        "--task",
        nargs="+",
        action="extend",
        type=_nonempty("--task"),
        help="only these tasks (e.g. parity mod3); repeated, they add up: --task parity "
        "--task mod3 is --task parity mod3",
    )
    run.add_argument(
        "--seed",
        nargs="+",
        action="extend",
        type=int,
        help="only these seeds; repeated, they add up: --seed 0 --seed 1 is --seed 0 1",
    )
    run.add_argument("--epochs", type=int, help="override every run's epoch count")
    run.add_argument("--length", type=int, help="override the training length of every run")
    run.add_argument(
        "--lr",
        type=float,
        help="override every run's learning rate (its optimizer's starting rate); the "
        "attention study chooses its rates on validation and does not take it",
    )
    run.add_argument(
        "--seed-batching",
        action="store_true",
        help="train runs that differ only in their seed together (a grid that names its "
        "stacks always trains them so, and --seed k then trains k's whole stack)",
    )
    run.add_argument(
        "--wait",
        action="store_true",
        help="before stopping, wait for the runs another process is training (a staged "
        "grid's next stage may follow them), instead of exiting nonzero naming them",
    )
    _execution_options(run)
    run.set_defaults(func=_run)

    export = sub.add_parser("export", help="write a study's committed results to data/results")
    export.add_argument("study", choices=config.STUDY_NAMES)
    export.add_argument(
        "--grid",
        required=True,
        type=_nonempty("--grid"),
        help="the committed grid to export: one with a committed results file (the study's "
        "COMMITTED_CSV; another is refused with the list)",
    )
    _execution_options(export)
    export.set_defaults(func=_export)

    data = sub.add_parser("data", help="datasets")
    data_sub = data.add_subparsers(dest="action", required=True)
    fetch = data_sub.add_parser("fetch", help="download a dataset (needs a network)")
    fetch.add_argument("dataset", choices=("ptb", "cifar10"))
    fetch.add_argument(
        "--root",
        default=None,
        type=_nonempty("--root"),
        help="default: $STRUCTATTN_DATA, then data/",
    )
    fetch.set_defaults(func=_fetch)

    found = sub.add_parser("findings", help="the README's findings, from data/results")
    found.add_argument(
        "--write",
        action="store_true",
        help="rewrite them: claims.csv, LEDGER.md, the findings figures and README.md's "
        "section (without it: print them, exiting 1 naming each row where the committed "
        "claims.csv differs from the ledger the records give)",
    )
    found.set_defaults(func=_findings)

    figures = sub.add_parser(
        "figures", help="redraw figures/ from data/results (and remove what none draws)"
    )
    figures.set_defaults(func=_figures)

    study = sub.add_parser("study", help="execute the notebooks into reports/ (as make study)")
    study.add_argument("--profile", choices=config.PROFILES, default="quick")
    study.add_argument(
        "--only",
        nargs="+",
        action="extend",
        type=_nonempty("--only"),
        help="notebook name prefixes, e.g. 03; repeated, they add up",
    )
    study.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, or auto (default cpu)")
    study.add_argument("--runs-dir", default=None, type=_nonempty("--runs-dir"), help=RUNS_HELP)
    study.set_defaults(func=_study)
    return parser


INTERRUPTED = "interrupted; a rerun resumes from the last checkpoint"


def _check_path(param: str, path: str) -> str:
    """The absolute ``path``; a ValueError naming ``param`` when it is longer than the
    system allows (PATH_MAX for the whole, NAME_MAX for a part)."""
    full = os.path.abspath(path)
    path_max, name_max = (os.pathconf("/", name) for name in ("PC_PATH_MAX", "PC_NAME_MAX"))
    if (size := len(os.fsencode(full))) >= path_max:
        raise ValueError(
            f"{param} is {size} bytes long, over this system's limit of {path_max - 1} "
            "(PATH_MAX); choose a shorter path"
        )
    if (longest := max(len(os.fsencode(part)) for part in full.split(os.sep))) > name_max:
        raise ValueError(
            f"{param} has a folder name of {longest} bytes, over this system's limit of "
            f"{name_max} (NAME_MAX); choose shorter names"
        )
    return full


def _check_store_root(param: str, root) -> None:
    """A ValueError naming ``param`` when the run store's root is no folder (a file, a
    link loop, a path through a file) and cannot become one; one line, not one per run."""
    path = os.fspath(root)
    try:
        if not os.path.isdir(os.path.realpath(path, strict=True)):
            raise ValueError(f"{param}={path!r} is a file; it must name a folder of run records")
        return
    except FileNotFoundError:
        pass  # made when the first record is written, if its parents allow
    except OSError as err:  # a link loop, a path through a file
        raise ValueError(f"{param}={path!r} cannot be a folder: {err.strerror}") from None
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"{param}={path!r} cannot be made: {parent} is not a folder")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_light(args)  # before torch is imported
        if getattr(args, "runs_dir", None):  # the store, and the notebooks' kernels, read it
            os.environ["STRUCTATTN_RUNS"] = _check_path("--runs-dir", args.runs_dir)
        if args.command in ("run", "export", "study"):  # the commands that use the store
            named = "--runs-dir" if getattr(args, "runs_dir", None) else "STRUCTATTN_RUNS"
            _check_store_root(named, config.runs_dir())
        _check(args)
    except ValueError as err:
        print(f"structattn: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"structattn: {INTERRUPTED}", file=sys.stderr)
        return 130
    from structattn_lite.records import ExportRefused, StoreError

    try:
        return args.func(args)
    except (StoreError, ExportRefused) as err:  # a full disk; a grid not ready to export
        print(f"structattn: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: each run checkpoints as it trains
        print(f"\nstructattn: {INTERRUPTED}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
