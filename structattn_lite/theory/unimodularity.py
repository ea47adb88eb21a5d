"""Exact total-unimodularity checks for the support matrix A.

A matrix is totally unimodular (TU) when every square submatrix has determinant
0, +1 or -1. Everything here is exact: entries become Python ints and determinants
use Bareiss' fraction-free elimination, so no float round-off can flip a verdict.

The check tries cheap certificates first and only falls back to enumerating minors:

1. an entry outside {-1, 0, 1} is itself a 1 x 1 violation;
2. network structure (every column, or every row, has at most one +1 and at most
   one -1; oriented graph incidence matrices are the example) is TU;
3. at most two nonzeros per column (or per row): the Heller-Tompkins criterion
   decides exactly via a 2-colouring of a signed graph on the rows, and a failed
   colouring yields an odd cycle whose submatrix has determinant +-2;
4. a 0/1 matrix with consecutive ones in every column (or row) is TU;
5. otherwise every square submatrix is checked, smallest first, up to a cap.

``ghouila_houri`` is an independent brute-force characterisation for small matrices,
used by the tests and the notebook to cross-check the main path.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from math import comb
from typing import Any

import networkx as nx
import numpy as np

from structattn_lite.theory.support import incidence_matrix

DEFAULT_MAX_MINORS = 20_000  # pure-Python Bareiss: about half a second of work

CRITERIA = ("empty", "entries", "network", "heller-tompkins", "interval", "exhaustive")


@dataclass(frozen=True, eq=False)
class TUViolation:
    """A square submatrix ``A[rows][:, cols]`` whose determinant has ``|det| > 1``."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]
    submatrix: np.ndarray  # int64, read-only
    det: int

    def __str__(self) -> str:
        return (
            f"rows {list(self.rows)}, cols {list(self.cols)}, det = {self.det}:\n{self.submatrix}"
        )


@dataclass(frozen=True, eq=False)
class TUCertificate:
    """The verdict, which criterion in ``CRITERIA`` decided it, and why."""

    is_tu: bool
    criterion: str
    reason: str
    violation: TUViolation | None = None

    def __str__(self) -> str:
        verdict = "totally unimodular" if self.is_tu else "NOT totally unimodular"
        text = f"{verdict} [{self.criterion}]: {self.reason}"
        return text if self.violation is None else f"{text}\nviolating minor: {self.violation}"


def as_integer_matrix(A: Any, name: str = "A") -> np.ndarray:
    """``A`` as an int64 matrix, or a ValueError naming what is wrong.

    Booleans are accepted and read as 0/1; floats must be finite and integral.
    """
    arr = np.asarray(A)
    if arr.dtype == object or np.iscomplexobj(arr) or arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real integer matrix, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got {arr.ndim}-D shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            raise ValueError(
                f"{name} must have integer entries; {name}[{i}, {j}] = {arr[i, j].item()!r} is not"
            )
    return arr.astype(np.int64)


def exact_det(M: Any) -> int:
    """Determinant of a square integer matrix, exactly (Bareiss, Python ints)."""
    M = as_integer_matrix(M, "M")
    if M.shape[0] != M.shape[1]:
        raise ValueError(f"exact_det needs a square matrix, got shape {M.shape}")
    a, n = M.tolist(), M.shape[0]  # Python ints: no overflow, no rounding
    sign, prev = 1, 1
    for k in range(n - 1):
        if a[k][k] == 0:  # pivot: swap in a lower row with a nonzero in this column
            swap = next((i for i in range(k + 1, n) if a[i][k] != 0), None)
            if swap is None:
                return 0
            a[k], a[swap] = a[swap], a[k]
            sign = -sign
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                # Exact division: Bareiss' invariant keeps every entry a minor of M.
                a[i][j] = (a[i][j] * a[k][k] - a[i][k] * a[k][j]) // prev
        prev = a[k][k]
    return sign * a[-1][-1] if n else 1


def _violation(A: np.ndarray, rows: list[int], cols: list[int]) -> TUViolation:
    rows, cols = sorted(rows), sorted(cols)
    sub = A[np.ix_(rows, cols)].copy()
    sub.flags.writeable = False
    return TUViolation(tuple(rows), tuple(cols), sub, exact_det(sub))


def _transpose(v: TUViolation) -> TUViolation:
    sub = v.submatrix.T.copy()
    sub.flags.writeable = False
    return TUViolation(v.cols, v.rows, sub, v.det)  # det(S^T) = det(S)


def _is_network(A: np.ndarray) -> bool:
    """At most one +1 and at most one -1 in every column."""
    return bool(((A == 1).sum(axis=0) <= 1).all() and ((A == -1).sum(axis=0) <= 1).all())


def _heller_tompkins(A: np.ndarray, line: str = "column") -> TUCertificate:
    """Decide TU for a {-1,0,1} matrix with at most two nonzeros per column.

    Rows are nodes; a column with two nonzeros is an edge asking for its rows to be in
    the same class (opposite signs) or in different classes (same sign). TU holds iff
    such a 2-colouring exists; a conflict closes a cycle whose submatrix has det +-2.
    ``line`` only names A's columns in the reason (the caller may pass a transpose).
    """
    others = "rows" if line == "column" else "columns"
    n_rows = A.shape[0]
    adj: list[list[tuple[int, int, int]]] = [[] for _ in range(n_rows)]
    for j in range(A.shape[1]):
        nz = np.flatnonzero(A[:, j]).tolist()
        if len(nz) == 2:
            r, s = nz
            parity = int(A[r, j] == A[s, j])  # 1: the two rows must differ in colour
            adj[r].append((s, j, parity))
            adj[s].append((r, j, parity))
    colour: list[int | None] = [None] * n_rows
    tree = nx.Graph()  # the BFS forest, each edge labelled with its column of A
    for root in range(n_rows):
        if colour[root] is not None:
            continue
        colour[root] = 0
        queue = deque([root])
        while queue:
            u = queue.popleft()
            for v, j, parity in adj[u]:
                want = colour[u] ^ parity
                if colour[v] is None:
                    colour[v] = want
                    tree.add_edge(u, v, col=j)
                    queue.append(v)
                elif colour[v] != want:  # the tree path from u to v and column j: an odd cycle
                    rows = nx.shortest_path(tree, u, v)
                    cols = [tree.edges[a, b]["col"] for a, b in itertools.pairwise(rows)]
                    return TUCertificate(
                        False,
                        "heller-tompkins",
                        f"at most two nonzeros per {line}, but the {others} admit no valid "
                        f"2-colouring: the cycle through {others} {sorted(rows)} is odd",
                        _violation(A, rows, cols + [j]),
                    )
    side = [i for i in range(n_rows) if colour[i] == 1]
    return TUCertificate(
        True,
        "heller-tompkins",
        f"at most two nonzeros per {line} and the {others} split validly: {side} vs the rest",
    )


def _is_interval(A: np.ndarray) -> bool:
    """0/1 entries with the ones of every column consecutive."""
    if not np.isin(A, (0, 1)).all():
        return False
    starts = np.diff(A, axis=0, prepend=0) == 1  # where a run of ones begins
    return bool((starts.sum(axis=0) <= 1).all())


def count_square_submatrices(n_rows: int, n_cols: int, min_size: int = 1) -> int:
    """How many square submatrices of size >= min_size an n_rows x n_cols matrix has."""
    return sum(comb(n_rows, k) * comb(n_cols, k) for k in range(min_size, min(n_rows, n_cols) + 1))


def exhaustive_tu_violation(A: Any, max_minors: int = DEFAULT_MAX_MINORS) -> TUViolation | None:
    """The smallest square submatrix with |det| > 1, by checking all of them, or None.

    Refuses (ValueError) when there are more than ``max_minors`` submatrices.
    """
    A = as_integer_matrix(A)
    total = count_square_submatrices(*A.shape)
    if total > max_minors:
        raise ValueError(
            f"A of shape {A.shape} is too large for the exhaustive TU check: it has "
            f"{total} square submatrices, over the cap max_minors={max_minors}"
        )
    return _enumerate_minors(A)


def _enumerate_minors(A: np.ndarray) -> TUViolation | None:
    n_rows, n_cols = A.shape
    for k in range(1, min(n_rows, n_cols) + 1):  # smallest first: a minimal witness
        for rows in itertools.combinations(range(n_rows), k):
            block = A[list(rows)]
            for cols in itertools.combinations(range(n_cols), k):
                det = exact_det(block[:, list(cols)])
                if abs(det) > 1:
                    return _violation(A, list(rows), list(cols))
    return None


def tu_certificate(A: Any, max_minors: int = DEFAULT_MAX_MINORS) -> TUCertificate:
    """Decide total unimodularity exactly and say which criterion decided it.

    ``max_minors`` bounds the exhaustive fallback; a larger matrix that no certificate
    decides raises ValueError saying what was already checked. Input rules are those of
    ``as_integer_matrix`` (booleans read as 0/1, floats must be integral).
    """
    A = as_integer_matrix(A)
    if A.size == 0:
        return TUCertificate(True, "empty", f"shape {A.shape} has no square submatrix")
    bad = np.argwhere(np.abs(A) > 1)
    if bad.size:
        i, j = (int(k) for k in bad[0])
        return TUCertificate(
            False,
            "entries",
            f"entry A[{i}, {j}] = {A[i, j]} is outside {{-1, 0, 1}}",
            _violation(A, [i], [j]),
        )
    for M, where in ((A, "column"), (A.T, "row")):
        if _is_network(M):
            return TUCertificate(
                True,
                "network",
                f"every {where} has at most one +1 and one -1 (oriented incidence structure)",
            )
    for M, where in ((A, "column"), (A.T, "row")):
        if (np.count_nonzero(M, axis=0) <= 2).all():
            cert = _heller_tompkins(M, where)
            if cert.violation is None or where == "column":
                return cert
            return TUCertificate(False, cert.criterion, cert.reason, _transpose(cert.violation))
    for M, where in ((A, "column"), (A.T, "row")):
        if _is_interval(M):
            return TUCertificate(
                True, "interval", f"0/1 entries with consecutive ones in every {where}"
            )
    total = count_square_submatrices(*A.shape, min_size=2)
    if total > max_minors:
        raise ValueError(
            f"A of shape {A.shape} is too large for the exhaustive TU check: "
            f"{total} square submatrices of size >= 2 exceed the cap max_minors={max_minors}. "
            "Already checked: all entries are in {-1, 0, 1}; not a network matrix; more "
            "than two nonzeros in some column and in some row; no consecutive-ones "
            "structure. Pass a larger max_minors to run it anyway."
        )
    v = _enumerate_minors(A)
    if v is None:
        return TUCertificate(
            True,
            "exhaustive",
            f"all {total} square submatrices of size >= 2 have determinant in {{-1, 0, 1}}",
        )
    return TUCertificate(
        False, "exhaustive", f"a {len(v.rows)} x {len(v.rows)} minor has determinant {v.det}", v
    )


def is_totally_unimodular(A: Any, max_minors: int = DEFAULT_MAX_MINORS) -> bool:
    """True iff every square submatrix of A has determinant in {-1, 0, 1} (exact)."""
    return tu_certificate(A, max_minors).is_tu


def tu_violation(A: Any, max_minors: int = DEFAULT_MAX_MINORS) -> TUViolation | None:
    """A square submatrix of A with |det| > 1, or None when A is totally unimodular."""
    return tu_certificate(A, max_minors).violation


def ghouila_houri(A: Any, max_size: int = 10) -> bool:
    """Ghouila-Houri's characterisation, by brute force (independent of the above).

    A is TU iff every subset of rows has a +-1 signing whose signed column sums all lie
    in {-1, 0, 1}. TU is invariant under transposition, so the smaller side is used;
    it costs about 3**min(shape) signings, hence the ``max_size`` limit.
    """
    A = as_integer_matrix(A)
    if A.shape[0] > A.shape[1]:
        A = A.T
    if A.shape[0] > max_size:
        raise ValueError(
            f"ghouila_houri enumerates ~3**{A.shape[0]} signings; min(shape) must be "
            f"<= max_size={max_size}"
        )
    for k in range(1, A.shape[0] + 1):
        # Fix the first sign: negating a signing only negates its sums.
        signs = np.array([(1, *tail) for tail in itertools.product((1, -1), repeat=k - 1)])
        for rows in itertools.combinations(range(A.shape[0]), k):
            sums = signs @ A[list(rows)]
            if not (np.abs(sums) <= 1).all(axis=1).any():
                return False
    return True


def tu_examples(seed: int = 0) -> dict[str, np.ndarray]:
    """Small matrices the notebook and tests use: TU and not, with a telling structure."""
    c5 = [(i, (i + 1) % 5) for i in range(5)]
    rng = np.random.default_rng(seed)
    return {
        "oriented incidence, 5-cycle": incidence_matrix(5, c5),
        "unoriented incidence, 5-cycle": np.abs(incidence_matrix(5, c5)),
        "unoriented incidence, 4-cycle": np.abs(incidence_matrix(4, c5[:3] + [(3, 0)])),
        "consecutive ones": np.array(
            [[1, 0, 0, 1, 0], [1, 1, 0, 1, 0], [1, 1, 1, 0, 0], [0, 1, 1, 0, 1]]
        ),
        "identity": np.eye(4, dtype=np.int64),
        "[[1, 1], [-1, 1]]": np.array([[1, 1], [-1, 1]]),
        "entry 2": np.array([[1, 0], [2, 1]]),
        "random {-1, 0, 1}": rng.integers(-1, 2, size=(5, 6)),
    }
