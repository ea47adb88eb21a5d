"""The support of the matroidal metric: oriented incidence matrices and the graph rules.

A column of an oriented incidence matrix has one -1 and one +1 (an edge u -> v), so
A diag(l) A^T is a weighted graph Laplacian and A is totally unimodular.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations, islice
from typing import Any

import networkx as nx
import numpy as np

from structattn_lite.config import check_choice, check_int

Edge = tuple[int, int]


def _int(param: str, value: Any, minimum: int | None = None) -> int:
    """check_int that also takes numpy integers (e.g. from a slider or an array)."""
    return check_int(param, int(value) if isinstance(value, np.integer) else value, minimum)


# --- incidence matrices -----------------------------------------------------------


def incidence_matrix(n_nodes: int, edges: Iterable[Sequence[int]]) -> np.ndarray:
    """Oriented incidence matrix (int64, n_nodes x len(edges)).

    Column e of edge (u, v) has -1 at u and +1 at v: networkx's convention (tail -1,
    head +1), so it equals ``nx.incidence_matrix(G, nodelist=range(n_nodes),
    edgelist=edges, oriented=True)`` exactly. Repeated edges are allowed (a multigraph
    is still totally unimodular); self-loops and unknown nodes are not.
    """
    n_nodes = _int("n_nodes", n_nodes, minimum=1)
    edges = list(edges)
    A = np.zeros((n_nodes, len(edges)), dtype=np.int64)
    for e, edge in enumerate(edges):
        if len(edge) != 2:
            raise ValueError(f"edge {e} = {edge!r} must be a pair of nodes (u, v)")
        u, v = (_int(f"edge {e} endpoint", x) for x in edge)
        if u == v:
            raise ValueError(
                f"edge {e} = ({u}, {v}) has equal endpoints; a self-loop has no incidence column"
            )
        if not (0 <= u < n_nodes and 0 <= v < n_nodes):
            raise ValueError(
                f"edge {e} = ({u}, {v}) has a node outside the range "
                f"0..{n_nodes - 1} (n_nodes={n_nodes})"
            )
        A[u, e], A[v, e] = -1, 1
    return A


# --- support rules (shared with structattn_lite.attention) ------------------------

SUPPORT_RULES = ("complete", "random", "ring", "path")


def max_support_edges(rule: str, n_nodes: int) -> int:
    """The most edges ``rule`` can supply on n_nodes nodes (ring needs n_nodes >= 3)."""
    check_choice("rule", rule, SUPPORT_RULES)
    n = _int("n_nodes", n_nodes, minimum=1)
    if rule == "ring":
        if n < 3:
            raise ValueError(f"rule='ring' needs n_nodes >= 3 for a simple cycle, got {n}")
        return n
    return n - 1 if rule == "path" else n * (n - 1) // 2


def support_edges(rule: str, n_nodes: int, m: int, seed: int = 0) -> list[Edge]:
    """m edges of the graph family ``rule`` on n_nodes nodes, each as (u, v) with u != v.

    - complete: the first m edges of the complete graph in lexicographic order; the
      star at node 0 comes first, so any m >= n_nodes - 1 gives a connected graph.
    - random: a connected graph with exactly m distinct edges drawn from ``seed``: a
      random spanning tree, then extra edges; needs n_nodes - 1 <= m <= n(n-1)/2.
    - ring / path: the cycle 0-1-...-(n-1)-0 / the path 0-1-...-(n-1). A smaller m
      takes a prefix, which leaves the graph disconnected (isolated nodes remain).
    ``seed`` only matters for ``random``.
    """
    cap = max_support_edges(rule, n_nodes)
    m = _int("m", m, minimum=1)
    if m > cap:
        raise ValueError(
            f"m={m} exceeds what rule={rule!r} can supply on "
            f"n_nodes={n_nodes}: the maximum is {cap} edges"
        )
    if rule == "complete":
        return list(islice(combinations(range(n_nodes), 2), m))
    if rule in ("ring", "path"):
        return [(i, (i + 1) % n_nodes) for i in range(m)]
    if m < n_nodes - 1:
        raise ValueError(
            f"rule='random' builds a connected graph, so m={m} must be at "
            f"least n_nodes - 1 = {n_nodes - 1} (and at most {cap})"
        )
    return _random_connected_edges(n_nodes, m, _int("seed", seed, minimum=0))


def _random_connected_edges(n: int, m: int, seed: int) -> list[Edge]:
    rng = np.random.default_rng(seed)
    tree = nx.random_labeled_tree(n, seed=seed)  # uniform over the n^(n-2) labelled trees
    edges = sorted(tuple(sorted(e)) for e in tree.edges())
    taken = set(edges)
    rest = [e for e in combinations(range(n), 2) if e not in taken]
    picks = rng.choice(len(rest), size=m - len(edges), replace=False)
    return edges + [rest[i] for i in sorted(picks)]


def support_matrix(rule: str, n_nodes: int, m: int, seed: int = 0) -> np.ndarray:
    """``incidence_matrix`` of ``support_edges(rule, n_nodes, m, seed)`` (n_nodes x m)."""
    return incidence_matrix(n_nodes, support_edges(rule, n_nodes, m, seed))


def random_weights(m: int, seed: int = 0) -> np.ndarray:
    """softplus(theta) with theta ~ N(0, 1): weights shaped like a freshly built model's."""
    theta = np.random.default_rng(_int("seed", seed, 0)).standard_normal(_int("m", m, 1))
    return np.logaddexp(0.0, theta)
