"""Tests for structattn_lite.theory: incidence, support rules, metric, TU, fast form."""

from __future__ import annotations

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
import torch

from structattn_lite import theory as th


def frac_det(M: np.ndarray) -> Fraction:
    """Gaussian elimination over the rationals: independent of the module's Bareiss."""
    a = [[Fraction(int(x)) for x in row] for row in M]
    n, det = len(a), Fraction(1)
    for k in range(n):
        piv = next((i for i in range(k, n) if a[i][k] != 0), None)
        if piv is None:
            return Fraction(0)
        if piv != k:
            a[k], a[piv] = a[piv], a[k]
            det = -det
        det *= a[k][k]
        for i in range(k + 1, n):
            f = a[i][k] / a[k][k]
            a[i] = [x - f * y for x, y in zip(a[i], a[k], strict=True)]
    return det


def random_graph_edges(n: int, m: int, seed: int) -> list[tuple[int, int]]:
    G = nx.gnm_random_graph(n, m, seed=seed)
    rng = np.random.default_rng(seed)  # random orientations too
    return [(u, v) if rng.random() < 0.5 else (v, u) for u, v in G.edges()]


def network_matrix(n_nodes: int, n_arcs: int, seed: int) -> np.ndarray:
    """Tree-edge x arc matrix: +-1 where an arc's tree path uses the edge forwards/backwards."""
    rng = np.random.default_rng(seed)
    T = nx.random_labeled_tree(n_nodes, seed=seed)
    tree = [(u, v) if rng.random() < 0.5 else (v, u) for u, v in T.edges()]
    N = np.zeros((len(tree), n_arcs), dtype=np.int64)
    for j in range(n_arcs):
        s, t = rng.choice(n_nodes, size=2, replace=False)
        path = nx.shortest_path(T, int(s), int(t))
        for a, b in zip(path, path[1:], strict=False):
            i = tree.index((a, b)) if (a, b) in tree else tree.index((b, a))
            N[i, j] = 1 if tree[i] == (a, b) else -1
    return N


def assert_real_violation(A: np.ndarray, v: th.TUViolation) -> None:
    sub = np.asarray(A)[np.ix_(v.rows, v.cols)]
    assert np.array_equal(sub, v.submatrix)
    assert len(v.rows) == len(v.cols)
    assert abs(frac_det(sub)) > 1 and frac_det(sub) == v.det
    assert round(np.linalg.det(sub.astype(float))) == v.det  # tiny: float is fine here


# --- incidence and support rules --------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_incidence_matches_networkx_incidence_matrix(seed: int) -> None:
    pytest.importorskip("scipy")  # networkx builds its sparse matrices with scipy
    edges = random_graph_edges(7, 10, seed)
    G = nx.Graph(edges)
    G.add_nodes_from(range(7))
    ref = nx.incidence_matrix(G, nodelist=range(7), edgelist=edges, oriented=True)
    assert np.array_equal(th.incidence_matrix(7, edges), ref.toarray())


@pytest.mark.parametrize("seed", range(4))
def test_incidence_convention_and_laplacian(seed: int) -> None:
    edges = random_graph_edges(8, 12, seed)
    A = th.incidence_matrix(8, edges)
    assert A.dtype == np.int64 and A.shape == (8, 12)
    for e, (u, v) in enumerate(edges):  # networkx's convention: tail -1, head +1
        assert A[u, e] == -1 and A[v, e] == 1 and np.count_nonzero(A[:, e]) == 2
    w = np.random.default_rng(seed).uniform(0.1, 3.0, size=len(edges))
    G = nx.Graph()
    G.add_nodes_from(range(8))
    G.add_weighted_edges_from((u, v, we) for (u, v), we in zip(edges, w, strict=True))
    W = nx.to_numpy_array(G, nodelist=range(8), weight="weight")
    np.testing.assert_allclose((A * w) @ A.T, np.diag(W.sum(1)) - W, atol=1e-12)
    assert th.laplacian_identity_gap(8, edges, w) < 1e-12


def test_max_support_edges() -> None:
    assert [th.max_support_edges(r, 6) for r in th.SUPPORT_RULES] == [15, 15, 6, 5]


@pytest.mark.parametrize("rule", th.SUPPORT_RULES)
@pytest.mark.parametrize("seed", [0, 3])
def test_support_edges_shape_and_structure(rule: str, seed: int) -> None:
    n, cap = 7, th.max_support_edges(rule, 7)
    for m in sorted({n - 1, cap}):
        edges = th.support_edges(rule, n, m, seed)
        assert len(edges) == m == len({frozenset(e) for e in edges})  # distinct edges
        G = nx.Graph(edges)
        G.add_nodes_from(range(n))
        assert nx.is_connected(G)  # every rule is connected at m >= n - 1 (ring: m = n)
        assert th.support_matrix(rule, n, m, seed).shape == (n, m)
    if rule == "ring":
        assert sorted(d for _, d in nx.Graph(th.support_edges(rule, n, n)).degree()) == [2] * n


def test_random_support_depends_on_seed_only() -> None:
    a, b = th.support_edges("random", 9, 14, seed=1), th.support_edges("random", 9, 14, seed=1)
    assert a == b and a != th.support_edges("random", 9, 14, seed=2)


def test_prefix_rules_can_be_disconnected() -> None:
    assert th.support_edges("ring", 6, 2) == [(0, 1), (1, 2)]
    assert th.support_edges("complete", 4, 3) == [(0, 1), (0, 2), (0, 3)]


# --- the metric and its identities ------------------------------------------------


@pytest.mark.parametrize("rule", th.SUPPORT_RULES)
@pytest.mark.parametrize("eps", [1e-4, 0.3])
def test_metric_identities(rule: str, eps: float) -> None:
    n, rng = 9, np.random.default_rng(7)
    m = th.max_support_edges(rule, n) if rule != "complete" else 12
    A, w = th.support_matrix(rule, n, m, seed=5), rng.uniform(0.0, 4.0, size=m)
    M = th.metric_matrix(A, w, eps)
    terms = th.rank_one_terms(A, w)
    np.testing.assert_allclose(sum(we * P for we, P in terms) + eps * np.eye(n), M, atol=1e-12)
    for _ in range(5):
        assert th.quadratic_form_identity_gap(A, w, eps, rng.standard_normal(n)) < 1e-10
    assert th.all_ones_residual(A) == 0.0
    lam = th.metric_spectrum(A, w, eps)
    assert lam[0] >= eps - 1e-12
    np.testing.assert_allclose(M @ np.ones(n), eps * np.ones(n), atol=1e-12)  # 1 sees only eps
    np.testing.assert_allclose(th.condition_number(A, w, eps), np.linalg.cond(M), rtol=1e-8)
    report = th.identity_report(n, th.support_edges(rule, n, m, seed=5), w, eps)
    assert max(abs(v) for k, v in report.items() if k != "condition number") < 1e-10


def test_metric_accepts_general_real_support() -> None:
    A = np.random.default_rng(0).standard_normal((5, 7))
    w = np.arange(7.0)
    np.testing.assert_allclose(th.metric_matrix(A, w, 0.1), A @ np.diag(w) @ A.T + 0.1 * np.eye(5))
    assert th.condition_number(th.support_matrix("path", 4, 3), np.ones(3), 0.0) == float("inf")


# --- total unimodularity ----------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_incidence_matrices_are_tu(seed: int) -> None:
    A = th.incidence_matrix(9, random_graph_edges(9, 16, seed))
    cert = th.tu_certificate(A)
    assert cert.is_tu and cert.criterion == "network" and th.tu_violation(A) is None
    assert th.is_totally_unimodular(A[:6, :7]) and th.ghouila_houri(A[:6, :7])


@pytest.mark.parametrize("seed", range(4))
def test_network_matrices_are_tu_by_exhaustive_check(seed: int) -> None:
    N = network_matrix(6, 6, seed)
    assert th.is_totally_unimodular(N) and th.ghouila_houri(N)
    assert th.exhaustive_tu_violation(N) is None


@pytest.mark.parametrize(
    ("name", "criterion"),
    [("consecutive ones", "interval"), ("identity", "network"),
     ("oriented incidence, 5-cycle", "network"),
     ("unoriented incidence, 4-cycle", "heller-tompkins")],
)  # fmt: skip
def test_known_tu_examples(name: str, criterion: str) -> None:
    A = th.tu_examples()[name]
    cert = th.tu_certificate(A)
    assert cert.is_tu and cert.criterion == criterion and cert.violation is None
    assert th.exhaustive_tu_violation(A) is None and th.ghouila_houri(A)


@pytest.mark.parametrize(
    "A",
    [np.abs(th.incidence_matrix(k, [(i, (i + 1) % k) for i in range(k)])) for k in (3, 5, 7)]
    + [np.array([[1, 1], [-1, 1]]), np.array([[1, 0], [2, 1]]), np.array([[0, -3.0]])],
)
def test_known_non_tu_matrices_give_real_certificates(A: np.ndarray) -> None:
    v = th.tu_violation(A)
    assert v is not None and not th.is_totally_unimodular(A) and not th.ghouila_houri(A)
    assert_real_violation(A, v)
    assert th.exhaustive_tu_violation(A) is not None


def test_heller_tompkins_on_rows_transposes_the_certificate() -> None:
    K = np.abs(th.incidence_matrix(4, [(0, 1), (1, 2), (2, 0), (0, 3)])).T  # 3 nonzeros/col
    cert = th.tu_certificate(K)
    assert not cert.is_tu and cert.criterion == "heller-tompkins" and "per row" in cert.reason
    assert_real_violation(K, cert.violation)


def test_random_small_matrices_agree_with_ghouila_houri_and_exhaustive() -> None:
    rng, verdicts = np.random.default_rng(0), []
    for _ in range(150):
        shape = tuple(rng.integers(1, 6, size=2))
        A = rng.choice([-1, 0, 0, 1], size=shape)
        cert = th.tu_certificate(A)
        assert cert.is_tu == th.ghouila_houri(A) == (th.exhaustive_tu_violation(A) is None)
        if not cert.is_tu:
            assert_real_violation(A, cert.violation)
        verdicts.append(cert.is_tu)
    assert 20 < sum(verdicts) < 130  # both outcomes were exercised


def test_exact_det_matches_rationals() -> None:
    rng = np.random.default_rng(1)
    for k in range(1, 7):
        for _ in range(10):
            M = rng.integers(-3, 4, size=(k, k))
            assert th.exact_det(M) == frac_det(M)


# --- the fast exact attention form ------------------------------------------------


@pytest.mark.parametrize("rule", ["ring", "random"])
def test_folded_form_matches_reference(rule: str) -> None:
    g = torch.Generator().manual_seed(0)
    zq, zk, v = (torch.randn(3, 7, 6, generator=g, dtype=torch.float64) for _ in range(3))
    m = th.max_support_edges(rule, 6) if rule == "ring" else 9
    A, w, eps, tau = th.support_matrix(rule, 6, m, seed=2), th.random_weights(m, 1), 1e-4, 0.7
    assert th.softmax_gap(zq, zk, A, w, eps, tau) < 1e-6
    offset = th.folded_logits(zq, zk, A, w, eps, tau) - th.pairwise_logits_reference(
        zq, zk, A, w, eps, tau
    )
    M = torch.as_tensor(th.metric_matrix(A, w, eps))
    row_term = 0.5 * torch.einsum("bnd,de,bne->bn", zq, M, zq) / tau
    torch.testing.assert_close(offset, row_term[..., None].expand_as(offset))
    for causal in (True, False):
        assert th.sdpa_output_gap(zq, zk, v, A, w, eps, tau, causal) < 1e-6
    ref_self = th.pairwise_logits_reference(zq, zq, A, w, eps, tau)  # shared projection
    assert torch.equal(ref_self.argmax(-1), torch.arange(7).expand(3, 7))  # diagonal wins


# --- bad inputs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: th.incidence_matrix(4, [(0, 1), (2, 2)]), r"edge 1 = \(2, 2\) has equal endpoints"),
        (lambda: th.incidence_matrix(4, [(0, 4)]), r"outside the range 0\.\.3"),
        (lambda: th.incidence_matrix(0, []), "n_nodes must be >= 1"),
        (lambda: th.metric_matrix(np.eye(2), [1.0, -0.5], 0.1), r"nonnegative.*weights\[1\]"),
        (lambda: th.metric_matrix(np.eye(2), [1.0, 1.0], -1e-3), "eps must be >= 0"),
        (lambda: th.metric_matrix(np.eye(2), [1.0, 1.0, 1.0], 0.1), "weights must have shape"),
        (lambda: th.is_totally_unimodular(np.ones(3)), "must be a 2-D matrix"),
        (lambda: th.tu_violation(np.array([[1.0, 0.5]])), r"integer entries; A\[0, 1\] = 0.5"),
        (lambda: th.support_edges("path", 5, 5), r"m=5 exceeds.*'path'.*n_nodes=5.*maximum is 4"),
        (lambda: th.support_edges("complete", 4, 7), "maximum is 6"),
        (lambda: th.support_edges("random", 6, 3), "at least n_nodes - 1 = 5"),
        (lambda: th.support_edges("ring", 2, 2), "needs n_nodes >= 3"),
        (lambda: th.support_edges("star", 5, 2), r"rule='star' is not allowed"),
        (lambda: th.tu_certificate(np.tril(np.ones((9, 9), int)) - np.eye(9, k=3, dtype=int)),
         r"too large for the exhaustive TU check.*max_minors=20000\. Already checked"),
        (lambda: th.ghouila_houri(np.ones((11, 12))), "max_size=10"),
        (lambda: th.folded_logits(torch.ones(1, 2, 2), torch.ones(1, 2, 2), np.eye(2),
                                  [1.0, 1.0], 0.1, 0.0), "tau must be > 0"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_clear_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_explorer_runs_headless() -> None:
    pytest.importorskip("ipywidgets")
    from structattn_lite.theory.explorer import explore_support, support_explorer

    fig, cert = explore_support("random", 7, 10, seed=1)
    assert cert.is_tu and len(fig.axes) >= 4
    box = support_explorer()
    rule, _, m = box.children[0].children
    picture = box.children[3]
    before = picture.value
    assert before[:8] == b"\x89PNG\r\n\x1a\n"  # the figure, as PNG bytes
    rule.value = "path"
    assert (m.min, m.max) == (1, 7) and "totally unimodular" in box.children[2].value
    assert picture.value[:4] == b"\x89PNG" and picture.value != before  # redrawn


def test_explorer_offers_a_support_that_fails_total_unimodularity() -> None:
    """Every rule the explorer offered gave an oriented incidence matrix, always TU: its
    unoriented ring fails on an odd cycle (|det| = 2), and the page shows the minor."""
    from structattn_lite.theory.explorer import (
        EXPLORER_RULES,
        UNORIENTED_RING,
        explore_support,
        explorer_support,
        support_explorer,
    )

    _, A = explorer_support(UNORIENTED_RING, 7, 7)
    assert not th.is_totally_unimodular(A)
    violation = th.tu_violation(A)
    assert violation is not None and abs(violation.det) > 1
    assert frac_det(A[np.ix_(violation.rows, violation.cols)]) == violation.det
    assert not th.ghouila_houri(A)  # the independent check agrees
    _, even = explorer_support(UNORIENTED_RING, 8, 8)  # an even cycle is bipartite: TU
    assert th.is_totally_unimodular(even) and th.ghouila_houri(even)
    fig, cert = explore_support(UNORIENTED_RING, 5, 5)
    assert not cert.is_tu and f"det = {cert.violation.det}" in fig.axes[1].get_title()
    app = support_explorer()
    rule, n, _ = app.children[0].children
    assert tuple(rule.options) == EXPLORER_RULES and UNORIENTED_RING in rule.options
    n.value = 7
    rule.value = UNORIENTED_RING
    assert "NOT totally unimodular" in app.children[2].value
    assert "det = 2" in app.children[2].value  # the violating minor, printed
    n.value = 8
    assert "NOT" not in app.children[2].value
    with pytest.raises(ValueError, match="rule='star' is not allowed"):
        explorer_support("star", 5, 3)
