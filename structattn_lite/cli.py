"""Command line: ``structattn`` (also ``python -m structattn_lite``).

structattn run csp --task parity --preset paper --profile quick
structattn run attention --profile quick
structattn data fetch ptb
structattn study --profile quick      (executes the notebooks, as ``make study`` does)
"""

from __future__ import annotations

import argparse
import sys

from structattn_lite import __version__
from structattn_lite.config import PROFILES


def _run_csp(args) -> int:
    from structattn_lite.studies.grokking.experiment import grokking_grid, sweep
    from structattn_lite.studies.grokking.report import summarize

    runs = [r for r in grokking_grid(args.profile) if args.task in (None, r.task)]
    runs = [r for r in runs if args.preset in (None, r.preset)]
    records = sweep(runs)
    print(summarize(records).to_string(index=False))
    return 0


def _run_attention(args) -> int:
    from structattn_lite.studies.attention.experiment import run_profile

    print(run_profile(args.profile).to_string(index=False))
    return 0


def _fetch(args) -> int:
    from structattn_lite.data import fetch

    print(fetch(args.dataset, root=args.root))
    return 0


def _study(args) -> int:
    from structattn_lite.notebook_runner import run_notebooks

    run_notebooks(args.profile, only=args.only)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="structattn", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train (or reload cached) runs of one experiment")
    run_sub = run.add_subparsers(dest="experiment", required=True)
    csp = run_sub.add_parser("csp", help="CSP on state-tracking tasks (grokking grid)")
    csp.add_argument("--task", choices=("parity", "mod3", "dyck1"))
    csp.add_argument("--preset", choices=("paper", "upstream"))
    csp.add_argument("--profile", choices=PROFILES, default="quick")
    csp.set_defaults(func=_run_csp)
    att = run_sub.add_parser("attention", help="dot vs dense vs matroidal attention on char-PTB")
    att.add_argument("--profile", choices=PROFILES, default="quick")
    att.set_defaults(func=_run_attention)

    data = sub.add_parser("data", help="datasets")
    data_sub = data.add_subparsers(dest="action", required=True)
    fetch = data_sub.add_parser("fetch", help="download a dataset (needs a network)")
    fetch.add_argument("dataset", choices=("ptb", "cifar10"))
    fetch.add_argument("--root", default=None, help="default: $STRUCTATTN_DATA, then data/")
    fetch.set_defaults(func=_fetch)

    study = sub.add_parser("study", help="execute the notebooks into reports/ (as make study)")
    study.add_argument("--profile", choices=PROFILES, default="quick")
    study.add_argument("--only", nargs="*", help="notebook name prefixes, e.g. 03")
    study.set_defaults(func=_study)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
