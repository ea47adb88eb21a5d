"""Theory of the matroidal metric: its support, its algebra, and total unimodularity.

``support`` builds oriented incidence matrices and the graph rules the attention
module draws its support from; ``metric`` holds M = A diag(l) A^T + eps I, its rank-one
terms, the identities the notebook checks and the folded (fast) attention logits;
``unimodularity`` decides total unimodularity exactly; ``explorer`` draws it all.
"""

from structattn_lite.theory.metric import (
    all_ones_residual,
    condition_number,
    folded_logits,
    folded_qk,
    identity_report,
    laplacian_identity_gap,
    metric_matrix,
    metric_spectrum,
    pairwise_logits_reference,
    quadratic_form_identity_gap,
    rank_one_terms,
    sdpa_output_gap,
    softmax_gap,
    weighted_laplacian,
)
from structattn_lite.theory.support import (
    SUPPORT_RULES,
    incidence_matrix,
    max_support_edges,
    random_weights,
    support_edges,
    support_matrix,
)
from structattn_lite.theory.unimodularity import (
    CRITERIA,
    DEFAULT_MAX_MINORS,
    TUCertificate,
    TUViolation,
    as_integer_matrix,
    count_square_submatrices,
    exact_det,
    exhaustive_tu_violation,
    ghouila_houri,
    is_totally_unimodular,
    tu_certificate,
    tu_examples,
    tu_violation,
)
