"""Command line: ``structattn`` (also ``python -m structattn_lite``).

structattn run grokking --profile quick --seed 0           train (or reuse) one study's grid
structattn run length --grid committed --executor ray      the same grid as Ray tasks
structattn export ablations                                write data/results/ from records
structattn data fetch ptb                                  download a dataset (online users)
structattn findings --write                                README findings from data/results
structattn study --profile quick                           execute the notebooks (make study)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from structattn_lite import __version__
from structattn_lite.config import GRIDS, PROFILES
from structattn_lite.studies import STUDIES


def _configs(args) -> list:
    """The study's grid, narrowed by --task/--seed and with --epochs/--length overrides."""
    from structattn_lite.studies import get_study

    study = get_study(args.study)
    configs = study.grid(args.grid or args.profile)
    if args.task:
        configs = [c for c in configs if c.task in args.task]
    if args.seed:
        configs = [c for c in configs if c.seed in args.seed]
    overrides = {"epochs": args.epochs, "length": args.length, "train_length": args.length}
    out = []
    for c in configs:
        names = {f.name for f in dataclasses.fields(c)}
        changes = {k: v for k, v in overrides.items() if v is not None and k in names}
        out.append(dataclasses.replace(c, **changes))
    if not out:
        raise SystemExit(f"structattn: no run of study {args.study!r} matches those filters")
    return out


def _summary(records) -> str:
    """One line per run: what varies across the grid, its status, its last logged metrics."""
    import pandas as pd

    configs = pd.json_normalize([r.config for r in records])
    varying = [c for c in configs.columns if configs[c].astype(str).nunique() > 1]
    rows = []
    for (_, cfg), r in zip(configs[varying].iterrows(), records, strict=True):
        last = r.history.iloc[-1].to_dict() if len(r.history) else {}
        metrics = {k: round(v, 4) for k, v in last.items() if "acc" in k or "bpc" in k}
        rows.append({**cfg.to_dict(), "status": r.status, "epochs": len(r.history), **metrics})
    return pd.DataFrame(rows).to_string(index=False)


def _run(args) -> int:
    from structattn_lite.runs import sweep

    configs = _configs(args)
    while True:
        records = sweep(
            args.study,
            configs,
            only_cached=args.only_cached,
            threads=args.threads,
            seed_batching=args.seed_batching,
            executor=args.executor,
            address=args.address,
            device=args.device,
        )
        # A staged grid (attention: tune, then the finals; length: fit, then refit the
        # cells that did not) grows once its first stage is on disk: go on until it stops.
        grown = [] if args.only_cached else _configs(args)
        if not grown or grown == configs:
            break
        configs = grown
    print(_summary(records) if records else "no finished runs")
    return 0


def _export(args) -> int:
    from structattn_lite.runs import sweep
    from structattn_lite.studies import get_study

    study = get_study(args.study)
    records = sweep(
        study,
        study.grid(args.grid),
        only_cached=args.only_cached,
        threads=args.threads,
        executor=args.executor,
        address=args.address,
        device=args.device,
    )
    finished = [r for r in records if r.status != "failed"]
    if not finished:
        print(f"structattn: no finished run of grid {args.grid!r} to export", file=sys.stderr)
        return 1
    import inspect

    grid_arg = {"grid": args.grid} if "grid" in inspect.signature(study.export).parameters else {}
    for path in study.export(finished, **grid_arg):
        print(f"{path}: {len(finished)} runs of grid {args.grid!r}")
    return 0


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
    run_notebooks(args.profile, only=args.only, device=args.device)
    return 0


def _findings(args) -> int:
    from structattn_lite import findings

    if args.write:
        findings.write_readme()
        print("README.md findings rewritten from data/results")
    else:
        print(findings.render())
    return 0


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
        help="with --executor ray: the address of an existing Ray cluster "
        "(default: start a local Ray instance)",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="structattn", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train (or reuse cached) runs of one study's grid")
    run.add_argument("study", choices=STUDIES, help="the study (one per notebook 02-05)")
    run.add_argument(
        "--profile",
        choices=PROFILES,
        default="quick",
        help="smoke (seconds), quick (minutes, default) or paper (hours)",
    )
    run.add_argument(
        "--grid",
        default=None,
        help=f"a grid by name instead of the profile's: {', '.join(GRIDS)}, or a study's "
        "other committed grid (e.g. grokking: paper_era; length: authors); a committed "
        "grid's results ship in data/results",
    )
    run.add_argument("--task", nargs="*", help="only these tasks (e.g. parity mod3)")
    run.add_argument("--seed", nargs="*", type=int, help="only these seeds")
    run.add_argument("--epochs", type=int, help="override every run's epoch count")
    run.add_argument("--length", type=int, help="override the training length of every run")
    run.add_argument(
        "--seed-batching",
        action="store_true",
        help="train runs that differ only in their seed together",
    )
    _execution_options(run)
    run.set_defaults(func=_run)

    export = sub.add_parser("export", help="write a study's committed results to data/results")
    export.add_argument("study", choices=STUDIES)
    export.add_argument(
        "--grid", default="committed", help="the committed grid to export (default: committed)"
    )
    _execution_options(export)
    export.set_defaults(func=_export)

    data = sub.add_parser("data", help="datasets")
    data_sub = data.add_subparsers(dest="action", required=True)
    fetch = data_sub.add_parser("fetch", help="download a dataset (needs a network)")
    fetch.add_argument("dataset", choices=("ptb", "cifar10"))
    fetch.add_argument("--root", default=None, help="default: $STRUCTATTN_DATA, then data/")
    fetch.set_defaults(func=_fetch)

    found = sub.add_parser("findings", help="the README's findings, from data/results")
    found.add_argument("--write", action="store_true", help="rewrite them in README.md")
    found.set_defaults(func=_findings)

    study = sub.add_parser("study", help="execute the notebooks into reports/ (as make study)")
    study.add_argument("--profile", choices=PROFILES, default="quick")
    study.add_argument("--only", nargs="*", help="notebook name prefixes, e.g. 03")
    study.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, or auto (default cpu)")
    study.set_defaults(func=_study)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
