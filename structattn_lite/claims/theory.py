"""The attention card's claims "computed from the paper", decided by computation over the
supports of every committed matroidal model: each support is totally unimodular, and each
metric M = A diag(l) A^T + eps I is positive definite for any l = softplus(theta)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from structattn_lite import stats
from structattn_lite.claims.rows import read, row
from structattn_lite.theory import (
    metric_matrix,
    metric_spectrum,
    rank_one_terms,
    support_matrix,
    tu_certificate,
)

EPS = 1e-4  # the attention modules' eps (``MetricAttention``)
THETA_DRAWS = 200  # theta ~ N(0, 3^2) per support, and the extremes +-30
COMMAND = "structattn findings"  # computed each time the ledger is


def supports() -> pd.DataFrame:
    """(d_head, m) of every committed matroidal model (the committed and low-parameter
    attention grids), with the support its modules draw (rule "random", seed 0)."""
    frames = [read(name) for name in ("attention_runs.csv", "attention_lowparam_runs.csv")]
    runs = pd.concat([f for f in frames if f is not None], ignore_index=True)
    mat = runs[runs["kind"] == "matroidal"]
    cells = pd.DataFrame({"d_head": mat["d_model"] // mat["n_heads"], "m": mat["m"].astype(int)})
    return cells.drop_duplicates().sort_values(["d_head", "m"]).reset_index(drop=True)


def _draws(m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = np.vstack([rng.normal(0.0, 3.0, (THETA_DRAWS, m)), np.full((1, m), -30.0),
                       np.full((1, m), 30.0)])  # fmt: skip
    return np.logaddexp(0.0, theta)  # softplus


def theory() -> list[dict]:
    cells = supports()
    if cells.empty:
        return []
    shapes = ", ".join(f"{d}x{m}" for d, m in cells.itertuples(index=False))
    fields = dict(study="attention", source="the attention card (computed from the paper)",
                  protocol=f"the supports of every committed matroidal model (d_head x m: {shapes}); "
                           "graph-incidence columns, rule 'random', seed 0",
                  grid="committed, lowparam (attention)", notebook="01, theory", command=COMMAND)  # fmt: skip
    certificates = [tu_certificate(support_matrix("random", d, m)) for d, m in cells.itertuples(index=False)]  # fmt: skip
    bad = sum(not c.is_tu for c in certificates)
    criteria = sorted({c.criterion for c in certificates})
    rows = [row(
        test="count", id="theory/tu", claim="every graph-incidence support is totally unimodular",
        ours=bad, seeds=len(cells), verdict=stats.NOT_REPRODUCED if bad else stats.REPRODUCED,
        reason=f"{len(cells) - bad} of {len(cells)} supports totally unimodular (exact; "
               f"{', '.join(criteria)})", **fields)]  # fmt: skip
    lowest, gap = np.inf, 0.0
    for i, (d, m) in enumerate(cells.itertuples(index=False)):
        A = support_matrix("random", d, m)
        for w in _draws(m, seed=i):
            lowest = min(lowest, float(metric_spectrum(A, w, EPS).min()))
            terms = sum(lw * term for lw, term in rank_one_terms(A, w)) + EPS * np.eye(d)
            gap = max(gap, float(np.abs(terms - metric_matrix(A, w, EPS)).max()))
    ok = lowest >= EPS * (1 - 1e-9) and gap < 1e-12
    rows.append(row(
        test="count", id="theory/psd", claim="M = A diag(l) A^T + eps I is a sum of rank-one PSD terms plus "
        "eps I, so positive definite with eigenvalues at least eps, for any l = softplus(theta)",
        ours=lowest, seeds=len(cells), verdict=stats.REPRODUCED if ok else stats.NOT_REPRODUCED,
        reason=f"smallest eigenvalue {lowest:.3g} (eps {EPS:g}) over {THETA_DRAWS + 2} draws of theta "
               f"per support; rank-one sum minus M at most {gap:.1e}", **fields))  # fmt: skip
    return rows
