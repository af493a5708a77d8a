"""Linear queries under local differential privacy (R. Bassily, "Linear Queries Estimation
with Local Differential Privacy", AISTATS 2019; read the docs page Mechanisms › Linear
queries, docs/mechanisms/linear-queries.md, first: it lists the errata this package
corrects).

Setting: user values in [0, J); a query matrix A (d × J) whose column ``a_v`` is the vector of
d answers for a user holding v; the server wants A·p, p the users' distribution (or A·p̂, p̂
their histogram).

Offline protocols (the query matrix is fixed in advance):

GaussianLinearQueries(queries, epsilon, delta, calibration="analytic")
    (ε, δ)-LDP, Algorithms 1/2: each user sends ``a_v + N(0, σ² I_d)``; σ is calibrated to the
    exact L2 sensitivity Δ2 = max ‖a_v − a_v'‖ (the paper uses r, but Δ2 can be 2r).
RejectionSamplingLinearQueries(queries, epsilon, n_users)
    Pure ε-LDP, Algorithms 3/4 with a clipped acceptance probability (as printed, the
    algorithm leaks through its output and is biased), its clipping band calibrated to the
    exact ⊥ ratio so that the realized ε is the ε asked for (the paper's band spends ε/2),
    and its acceptance scale e^{−b} instead of the paper's ½ (more accepted reports).

Adaptive protocol (each query chosen from the answers so far):

AdaptiveLinearQueries(n_users, rounds, epsilon, r, seed)
    Pure ε-LDP, Algorithm 6 (adaptive sample splitting): one bit per user; an interactive
    session (pose / respond / submit, or answer); :func:`adaptive_error_bound` is Theorem 5.2.

Distribution estimation (A = I_J): :func:`compare_distribution_estimation` measures the
Gaussian protocol + simplex projection against projected Hadamard Response on the same users,
for a given p, n, ε (:func:`distribution_estimates`, :func:`distribution_sigma`).

Server-side projection: ``estimate(..., projection="symmetric" | "convex")`` projects the
offline protocols' mean onto conv{±a_v} or conv{a_v} (:func:`ldpdist.kernels.project_hull`).

The offline protocols keep the paper's formulas only behind ``paper_faithful=True``, which warns and is NOT
private. Helpers: :func:`l2_sensitivity`; :mod:`ldpdist.linear.calibration` (Gaussian
calibrations and the exact privacy profile); the rejection protocol's closed forms
(:func:`good_set_tail`, :func:`rejection_sigma`, :func:`acceptance_probability`,
:func:`accepted_mean_factor`).

Rust core: rust/linear/ (sensitivity.rs, gaussian.rs, rejection.rs, adaptive.rs); sampling is chunked
per-stream ChaCha12, so seeded reports are the same on any number of threads.
"""

from . import calibration
from .adaptive import AdaptiveLinearQueries, Round, adaptive_error_bound
from .distribution import (DistributionComparison, compare_distribution_estimation,
                           distribution_estimates, distribution_sigma)
from ._queries import SENSITIVITY_WORK_LIMIT, QueryMatrix, l2_sensitivity
from .gaussian import GaussianLinearQueries
from .rejection import (MAX_EPSILON, RejectionSamplingLinearQueries, accepted_mean_factor,
                        acceptance_probability, good_set_tail, rejection_sigma)

__all__ = [
    "AdaptiveLinearQueries",
    "Round",
    "adaptive_error_bound",
    "compare_distribution_estimation",
    "distribution_estimates",
    "distribution_sigma",
    "DistributionComparison",
    "GaussianLinearQueries",
    "RejectionSamplingLinearQueries",
    "QueryMatrix",
    "l2_sensitivity",
    "SENSITIVITY_WORK_LIMIT",
    "calibration",
    "good_set_tail",
    "rejection_sigma",
    "acceptance_probability",
    "accepted_mean_factor",
    "MAX_EPSILON",
]
