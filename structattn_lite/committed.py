"""Run the ablation and length grids and write their compact CSVs to data/results/.

    python -m structattn_lite.committed                    # the committed grids (hours on 2 cores)
    python -m structattn_lite.committed --grid paper       # the paper's full grids (a GPU or days)
    python -m structattn_lite.committed --collect-only     # export whatever the RunStore holds

Runs are cached one record per config in the RunStore (``STRUCTATTN_RUNS``), so an
interrupted sweep resumes where it stopped and ``--collect-only`` can export a partial
grid (every cell then reports the seeds it actually has).
"""

from __future__ import annotations

import argparse

import torch

from structattn_lite.ablations import GRIDS, run_tables
from structattn_lite.csp_tables import ABLATIONS_CSV
from structattn_lite.length_study import LENGTH_GRIDS, run_length_grid
from structattn_lite.length_tables import LENGTH_CSV
from structattn_lite.paths import results_dir

# Lengths kept in the committed curves (every length up to 16, then sparser): compact
# enough to ship, dense enough for the figure and the L = 16..256 table.
KEPT_LENGTHS = [*range(1, 17), *range(18, 33, 2), *range(40, 257, 8)]


def export(grid: str, only: str | None = None, run_missing: bool = True) -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    if only in (None, "ablations"):
        df = run_tables(grid, run_missing=run_missing)
        df.round(5).to_csv(out / ABLATIONS_CSV, index=False)
        print(
            f"{out / ABLATIONS_CSV}: {len(df)} runs, per seed {df.groupby('seed').size().to_dict()}"
        )
    if only in (None, "length"):
        curves = run_length_grid(grid, run_missing=run_missing)
        curves = curves[curves["length"].isin(KEPT_LENGTHS)]
        curves.round(3).to_csv(out / LENGTH_CSV, index=False)
        runs = curves.groupby(["task", "protocol", "model", "seed"]).ngroups
        print(f"{out / LENGTH_CSV}: {runs} runs, {len(curves)} rows")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--grid", default="committed", choices=sorted(set(GRIDS) & set(LENGTH_GRIDS))
    )
    parser.add_argument("--only", choices=("ablations", "length"))
    parser.add_argument(
        "--collect-only", action="store_true", help="export cached runs, train nothing"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    export(args.grid, args.only, run_missing=not args.collect_only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
