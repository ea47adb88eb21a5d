"""Theory of the matroidal metric: its support, its algebra, and total unimodularity.

``support`` builds oriented incidence matrices and the graph rules the attention
module draws its support from; ``metric`` holds M = A diag(l) A^T + eps I, its rank-one
terms, the identities the notebook checks and the folded (fast) attention logits;
``unimodularity`` decides total unimodularity exactly; ``explorer`` draws it all.
"""

from __future__ import annotations

from structattn_lite.config import lazy_getattr

# name -> the submodule that holds it: each loads on first use, so a module that needs
# only the support (the attention kinds) does not load the algebra or the TU checks
_HOMES = {
    "all_ones_residual": "metric",
    "condition_number": "metric",
    "folded_logits": "metric",
    "folded_qk": "metric",
    "identity_report": "metric",
    "laplacian_identity_gap": "metric",
    "metric_matrix": "metric",
    "metric_spectrum": "metric",
    "pairwise_logits_reference": "metric",
    "quadratic_form_identity_gap": "metric",
    "rank_one_terms": "metric",
    "sdpa_output_gap": "metric",
    "softmax_gap": "metric",
    "weighted_laplacian": "metric",
    "SUPPORT_RULES": "support",
    "incidence_matrix": "support",
    "max_support_edges": "support",
    "random_weights": "support",
    "support_edges": "support",
    "support_matrix": "support",
    "CRITERIA": "unimodularity",
    "DEFAULT_MAX_MINORS": "unimodularity",
    "TUCertificate": "unimodularity",
    "TUViolation": "unimodularity",
    "as_integer_matrix": "unimodularity",
    "count_square_submatrices": "unimodularity",
    "exact_det": "unimodularity",
    "exhaustive_tu_violation": "unimodularity",
    "ghouila_houri": "unimodularity",
    "is_totally_unimodular": "unimodularity",
    "tu_certificate": "unimodularity",
    "tu_examples": "unimodularity",
    "tu_violation": "unimodularity",
}
__all__ = list(_HOMES)


__getattr__ = lazy_getattr(__name__, _HOMES)
