"""The matroidal Mahalanobis metric, its algebra, and the fast exact attention form.

The seed's metric is x^T M x = sum_e l_e (a_e^T x)^2 + eps ||x||^2 with a fixed sparse
support A (d x m) and learned weights l_e >= 0, i.e. M = A diag(l) A^T + eps I.

Sections, top to bottom: the metric and its rank-one terms; numeric identities the
notebook and tests assert; the reference and folded attention logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from structattn_lite.config import check_number
from structattn_lite.theory.support import Edge, _int, incidence_matrix

if TYPE_CHECKING:  # the torch forms are imported where called: the algebra needs numpy only
    import torch

# --- the metric -------------------------------------------------------------------


def _check_metric_args(A: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"A must be a 2-D matrix (d x m), got shape {A.shape}")
    if w.shape != (A.shape[1],):
        raise ValueError(
            f"weights must have shape ({A.shape[1]},) to match A's "
            f"{A.shape[1]} columns, got {w.shape}"
        )
    if not (np.isfinite(A).all() and np.isfinite(w).all()):
        raise ValueError("A and weights must be finite")
    if (w < 0).any():
        e = int(np.argmax(w < 0))
        raise ValueError(
            f"weights must be nonnegative (the metric must stay PSD); weights[{e}] = {w[e]}"
        )
    return A, w


def metric_matrix(A: Any, weights: Any, eps: float) -> np.ndarray:
    """M = sum_e w_e a_e a_e^T + eps I = A diag(w) A^T + eps I (float64, d x d)."""
    A, w = _check_metric_args(A, weights)
    eps = check_number("eps", eps, minimum=0.0)  # finite: check_number refuses inf
    M = (A * w) @ A.T
    return 0.5 * (M + M.T) + eps * np.eye(A.shape[0])  # symmetric to the last bit


def rank_one_terms(A: Any, weights: Any) -> list[tuple[float, np.ndarray]]:
    """The explicit decomposition: (w_e, a_e a_e^T) for each column e of A."""
    A, w = _check_metric_args(A, weights)
    return [(float(w[e]), np.outer(A[:, e], A[:, e])) for e in range(A.shape[1])]


def metric_spectrum(A: Any, weights: Any, eps: float) -> np.ndarray:
    """Eigenvalues of M, ascending."""
    return np.linalg.eigvalsh(metric_matrix(A, weights, eps))


def condition_number(A: Any, weights: Any, eps: float) -> float:
    """lambda_max / lambda_min of M; inf when M is numerically singular (eps = 0 here)."""
    lam = metric_spectrum(A, weights, eps)
    singular = lam[0] <= len(lam) * np.finfo(np.float64).eps * max(lam[-1], 0.0)
    return float("inf") if singular else float(lam[-1] / lam[0])


# --- identities the notebook shows and the tests assert ---------------------------


def quadratic_form_identity_gap(A: Any, weights: Any, eps: float, x: Any) -> float:
    """|x^T M x - (sum_e w_e (a_e^T x)^2 + eps ||x||^2)|."""
    A, w = _check_metric_args(A, weights)
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (A.shape[0],):
        raise ValueError(f"x must have shape ({A.shape[0]},), got {x.shape}")
    lhs = x @ metric_matrix(A, w, eps) @ x
    rhs = np.sum(w * (A.T @ x) ** 2) + eps * (x @ x)
    return float(abs(lhs - rhs))


def weighted_laplacian(n_nodes: int, edges: Sequence[Edge], weights: Any) -> np.ndarray:
    """D - W of the weighted graph, built by networkx (repeated edges: weights add up)."""
    G = nx.MultiGraph()
    G.add_nodes_from(range(_int("n_nodes", n_nodes, 1)))
    G.add_weighted_edges_from((u, v, float(we)) for (u, v), we in zip(edges, weights, strict=True))
    W = nx.to_numpy_array(G, nodelist=range(n_nodes), weight="weight")  # parallel edges: summed
    return np.diag(W.sum(axis=1)) - W


def laplacian_identity_gap(n_nodes: int, edges: Sequence[Edge], weights: Any) -> float:
    """max |A diag(w) A^T - L_w| for the incidence A of ``edges``."""
    A = incidence_matrix(n_nodes, edges)
    return float(
        np.abs(metric_matrix(A, weights, 0.0) - weighted_laplacian(n_nodes, edges, weights)).max()
    )


def all_ones_residual(A: Any) -> float:
    """max |A^T 1|: zero for incidence columns, so 1 is invisible to the Laplacian part."""
    A = np.asarray(A, dtype=np.float64)
    return float(np.abs(A.T @ np.ones(A.shape[0])).max()) if A.size else 0.0


def identity_report(
    n_nodes: int, edges: Sequence[Edge], weights: Any, eps: float, seed: int = 0
) -> dict[str, float]:
    """Every identity the notebook checks, for one support and a random x from ``seed``."""
    A = incidence_matrix(n_nodes, edges)
    x = np.random.default_rng(seed).standard_normal(n_nodes)
    lam = metric_spectrum(A, weights, eps)
    ones = np.ones(n_nodes) / np.sqrt(n_nodes)
    return {
        "quadratic form gap": quadratic_form_identity_gap(A, weights, eps, x),
        "Laplacian gap": laplacian_identity_gap(n_nodes, edges, weights),
        "max |A^T 1|": all_ones_residual(A),
        "min eigenvalue - eps": float(lam[0] - eps),
        "1^T M 1 / n - eps": float(ones @ metric_matrix(A, weights, eps) @ ones - eps),
        "condition number": condition_number(A, weights, eps),
    }


# --- attention logits: the seed's reference path and the folded fast form ---------


def _metric_torch(A: Any, w: Any, eps: float, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    import torch

    A_t = torch.as_tensor(A, dtype=like.dtype, device=like.device)  # numpy or tensor
    w_t = torch.as_tensor(w, dtype=like.dtype, device=like.device)
    _check_metric_args(A_t.detach().cpu().numpy(), w_t.detach().cpu().numpy())
    eps = check_number("eps", eps, minimum=0.0)
    M = (A_t * w_t) @ A_t.T + eps * torch.eye(A_t.shape[0], dtype=like.dtype, device=like.device)
    return A_t, w_t, M


def pairwise_logits_reference(
    z_q: torch.Tensor, z_k: torch.Tensor, A: Any, w: Any, eps: float, tau: float
) -> torch.Tensor:
    """The seed's pseudocode: explicit pairwise deltas, logits = -dist / (2 tau).

    z_q: [..., Nq, d], z_k: [..., Nk, d] -> [..., Nq, Nk]. Materialises Nq x Nk x m.
    """
    import torch

    tau = check_number("tau", tau, minimum=0.0, strict=True)
    A_t, w_t, _ = _metric_torch(A, w, eps, z_q)
    u_q = torch.einsum("dm,...nd->...nm", A_t, z_q)  # u[n, e] = a_e^T z_n
    u_k = torch.einsum("dm,...nd->...nm", A_t, z_k)
    delta = u_q[..., :, None, :] - u_k[..., None, :, :]
    diff = z_q[..., :, None, :] - z_k[..., None, :, :]
    dist = (delta**2 * w_t).sum(-1) + eps * (diff**2).sum(-1)
    return -dist / (2 * tau)


def folded_qk(
    z_q: torch.Tensor, z_k: torch.Tensor, A: Any, w: Any, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q~ = [M z_i, 1] and k~ = [z_j, -0.5 z_j^T M z_j]: one extra head dimension."""
    import torch

    _, _, M = _metric_torch(A, w, eps, z_q)
    mz_q = z_q @ M  # M is symmetric, so row-vector z M = (M z)^T
    bias = -0.5 * ((z_k @ M) * z_k).sum(-1, keepdim=True)
    q = torch.cat([mz_q, torch.ones_like(mz_q[..., :1])], dim=-1)
    return q, torch.cat([z_k, bias], dim=-1)


def folded_logits(
    z_q: torch.Tensor, z_k: torch.Tensor, A: Any, w: Any, eps: float, tau: float
) -> torch.Tensor:
    """q~ . k~ / tau = reference logits + 0.5 z_i^T M z_i / tau (constant along a row)."""
    tau = check_number("tau", tau, minimum=0.0, strict=True)
    q, k = folded_qk(z_q, z_k, A, w, eps)
    return q @ k.transpose(-1, -2) / tau


def softmax_gap(
    z_q: torch.Tensor, z_k: torch.Tensor, A: Any, w: Any, eps: float, tau: float
) -> float:
    """max |softmax(reference) - softmax(folded)| over all rows."""
    ref = pairwise_logits_reference(z_q, z_k, A, w, eps, tau).softmax(-1)
    fast = folded_logits(z_q, z_k, A, w, eps, tau).softmax(-1)
    return float((ref - fast).abs().max())


def sdpa_output_gap(
    z_q: torch.Tensor,
    z_k: torch.Tensor,
    v: torch.Tensor,
    A: Any,
    w: Any,
    eps: float,
    tau: float,
    causal: bool = True,
) -> float:
    """max |softmax(reference) v - SDPA(q~, k~, v, scale=1/tau)|, causal by default."""
    import torch

    logits = pairwise_logits_reference(z_q, z_k, A, w, eps, tau)
    if causal:
        n_q, n_k = logits.shape[-2:]
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=logits.device).tril()
        logits = logits.masked_fill(~keep, float("-inf"))
    q, k = folded_qk(z_q, z_k, A, w, eps)
    fast = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, scale=1.0 / tau
    )
    return float((logits.softmax(-1) @ v - fast).abs().max())
