"""Peak memory and time of `structattn findings`, which recomputes the ledger from
data/results and checks it against claims.csv, the README and LEDGER.md.

    python benchmarks/bench_findings_memory.py [--reps 3]

Each repetition runs the command in a fresh process and reads that process's peak
resident set (``resource.getrusage(RUSAGE_CHILDREN)``, the largest child so far, so the
runs go from the smallest expected upward: one bare interpreter first, as the floor)
and its wall time. Printed: the interpreter's floor, then findings' peak RSS and time
per repetition, and whether torch was imported.
Target from issue 54: findings imports no torch and peaks at most 300 MB (it peaked at
1.10-1.16 GB while it imported torch, 0.81 GB of it torch alone).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

TARGET_MB = 300
RUN = (
    "import sys\n"
    "from structattn_lite.cli import main\n"
    "code = main(['findings'])\n"
    "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def child_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    print(f"interpreter floor: {child_peak_mb():.0f} MB")
    worst, ok = 0.0, True
    for rep in range(args.reps):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True,
                              env=os.environ)  # fmt: skip
        seconds = time.perf_counter() - start
        peak = child_peak_mb()  # the largest child so far: findings, from the first run on
        worst = max(worst, peak)
        torch_line = next((ln for ln in done.stderr.splitlines() if "torch imported" in ln), "?")
        print(
            f"run {rep + 1}: exit {done.returncode}, peak {peak:.0f} MB, {seconds:.1f} s, {torch_line}"
        )
        ok &= done.returncode == 0 and "False" in torch_line
    met = ok and worst <= TARGET_MB
    print(
        f"findings peak {worst:.0f} MB against a target of {TARGET_MB} MB: {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
