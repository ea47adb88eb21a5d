"""The support explorer of the theory notebook (01_theory) and dashboard 1: a support
graph, its metric's spectrum and its total unimodularity, drawn for any rule and size.
(The notebook draws its other figures in its own cells, where the reader sees them.)

Every plot builds a ``matplotlib.figure.Figure`` directly (not via pyplot), so nothing
leaks into global state, a notebook cell can end with ``fig`` to show it, and
``structattn_lite.plots.save_figure`` writes it.
"""

from __future__ import annotations

import html
import io

import networkx as nx
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from structattn_lite.config import check_choice
from structattn_lite.report import figure_size
from structattn_lite.theory import (
    SUPPORT_RULES,
    TUCertificate,
    incidence_matrix,
    max_support_edges,
    metric_matrix,
    metric_spectrum,
    random_weights,
    support_edges,
    tu_certificate,
)

# Every support rule of the model gives an oriented incidence matrix, which is always
# totally unimodular; the explorer adds one that need not be, since that is the case a
# student learns from: the ring with both entries of a column +1 (the unoriented incidence
# matrix). An even ring is still TU (it is bipartite); an odd ring is not: the whole cycle
# is a square submatrix with determinant 2.
UNORIENTED_RING = "ring, unoriented"
EXPLORER_RULES = (*SUPPORT_RULES, UNORIENTED_RING)


def _graph_rule(rule: str) -> str:
    """The support rule whose edges ``rule`` draws (the unoriented ring: the ring's)."""
    check_choice("rule", rule, EXPLORER_RULES)
    return "ring" if rule == UNORIENTED_RING else rule


def explorer_support(rule: str, n_nodes: int, m: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """The edges and the support matrix A of one of ``EXPLORER_RULES``: the model's
    oriented incidence matrix, or for ``UNORIENTED_RING`` its absolute value."""
    edges = support_edges(_graph_rule(rule), n_nodes, m, seed)
    A = incidence_matrix(n_nodes, edges)
    return edges, np.abs(A) if rule == UNORIENTED_RING else A


def _heatmap(ax: Axes, X: np.ndarray, title: str, xlabel: str = "", ylabel: str = "") -> None:
    vmax = float(np.abs(X).max()) or 1.0  # symmetric scale: the sign is the point
    im = ax.imshow(X, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel, xticks=[], yticks=[])
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)


def support_title(rule: str, n_nodes: int, edges: list, seed: int = 0) -> str:
    """What the graph panel draws, in words: a rule's whole graph only when every one of its
    edges is there; otherwise how many of them the edge budget m kept, and the nodes left
    isolated (``complete`` at m = 8 on 16 nodes is the star at node 0, not K16)."""
    cap, m = max_support_edges(_graph_rule(rule), n_nodes), len(edges)
    isolated = n_nodes - len({u for edge in edges for u in edge})
    if rule == "random":
        words = f"random connected graph, {m} of {cap} possible edges, seed={seed}"
    elif m == cap:
        words = f"{rule} graph on {n_nodes} nodes: all {m} edges"
    else:
        words = f"{rule} rule capped at m={m}: first {m} of its {cap} edges"
    return words + (f"\n{isolated} of {n_nodes} nodes isolated" if isolated else "")


def explore_support(
    rule: str, n_nodes: int, m: int, seed: int = 0, eps: float = 1e-2
) -> tuple[Figure, TUCertificate]:
    """The graph, A, M and the spectrum of one support, with its TU certificate; a support
    that is not totally unimodular has its violating submatrix (``tu_violation``) outlined
    in the panel of A, its determinant in the title."""
    edges, A = explorer_support(rule, n_nodes, m, seed)
    cert = tu_certificate(A)
    w = random_weights(m, seed)
    fig = Figure(figsize=figure_size(2, height=5.6), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    G = nx.Graph()
    G.add_nodes_from(range(n_nodes))
    G.add_edges_from(edges)
    pos = nx.circular_layout(G)  # numpy only; rings and paths read naturally
    nx.draw_networkx(G, pos, ax=axes[0], node_size=160, font_size=7, width=1 + w / w.max())
    axes[0].set_title(support_title(rule, n_nodes, edges, seed), fontsize=7)  # within 7 in
    axes[0].set_axis_off()
    kind = "unoriented incidence" if rule == UNORIENTED_RING else "incidence"
    _heatmap(axes[1], A, f"A ({kind})", "edge e", "node")
    if cert.violation is not None:
        _outline(axes[1], cert.violation)
    _heatmap(axes[2], metric_matrix(A, w, eps), "M = A diag(w) A^T + eps I")
    lam = metric_spectrum(A, w, eps)
    axes[3].semilogy(lam, "o-", ms=4)
    axes[3].axhline(eps, color="k", ls="--", lw=1)
    axes[3].set(xlabel="eigenvalue index", title=f"spectrum, cond = {lam[-1] / lam[0]:.3g}")
    return fig, cert


def _outline(ax: Axes, violation) -> None:
    """Box the cells of a violating submatrix (its rows and columns need not be adjacent)
    and name its determinant in the title."""
    from matplotlib.patches import Rectangle

    for i in violation.rows:
        for j in violation.cols:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="black", lw=1.2))
    size = len(violation.rows)
    ax.set_title(f"{ax.get_title()}\nboxed: a {size} x {size} minor, det = {violation.det}")


def png_bytes(fig: Figure, dpi: int = 90) -> bytes:
    """The figure as PNG bytes (for an Image widget)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def support_explorer(n_max: int = 16):
    """An ipywidgets explorer: graph family, size, m, seed, eps -> A, M, spectrum, TU."""
    import ipywidgets as W

    rule = W.Dropdown(options=EXPLORER_RULES, value="ring", description="rule")
    n = W.IntSlider(value=8, min=3, max=n_max, description="n_nodes")
    m = W.IntSlider(value=8, min=1, max=8, description="m")
    seed = W.BoundedIntText(value=0, min=0, max=2**31 - 1, description="seed")
    eps = W.FloatLogSlider(value=1e-2, base=10, min=-4, max=0, description="eps")
    # An Image widget: the figure travels as PNG bytes in the widget's own state, so no
    # output capture is involved (see notebook_runner.defer_output_widget_echo).
    verdict, picture = W.HTML(), W.Image(format="png")
    busy = [False]  # adjusting m's range fires its observer; draw once per change

    def refresh(_=None) -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            hi = max_support_edges(_graph_rule(rule.value), n.value)
            lo = n.value - 1 if rule.value == "random" else 1
            whole = m.value == m.max and rule.value != "random"
            m.max = max(hi, m.min)  # order matters: min may never exceed max
            m.min, m.max = lo, hi
            if whole:  # m at its maximum stays there: `complete` draws the complete graph
                m.value = hi
            fig, cert = explore_support(rule.value, n.value, m.value, seed.value, eps.value)
        finally:
            busy[0] = False
        colour = "green" if cert.is_tu else "crimson"
        verdict.value = f"<pre style='color:{colour}'>{html.escape(str(cert))}</pre>"
        picture.value = png_bytes(fig)

    for widget in (rule, n, m, seed, eps):
        widget.observe(refresh, names="value")
    refresh()
    return W.VBox([W.HBox([rule, n, m]), W.HBox([seed, eps]), verdict, picture])
