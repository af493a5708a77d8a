"""Distribution estimation as linear queries: the Gaussian protocol on A = I_J against projected
Hadamard Response (Algorithm 5 of Bassily, AISTATS 2019), on the same users, so a user
can see which is better for their J, n and ε (docs page Mechanisms › Linear queries).

With A = I_J the Gaussian protocol's report is ``e_v + N(0, σ² I_J)`` (Δ2 = √2 for J ≥ 2), so
the mean of n reports is exactly ``p̂ + N(0, σ²/n · I_J)`` in law (p̂ the users' histogram): it
is drawn at that level here (n · J reports would not fit in memory for large J), and projected
onto conv{e_v}, the probability simplex. Projected HR is ``HadamardResponse(J, ε, blocks=1)``
with ``decoder="project"``, aggregated by its exact ``simulate``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Optional

import numpy as np

from .._validation import float_vector, integer, one_of
from . import calibration as _cal

__all__ = ["distribution_sigma", "distribution_estimates", "compare_distribution_estimation",
           "DistributionComparison"]

#: The estimators compared, in the order of :class:`DistributionComparison`'s fields.
ESTIMATORS = ("hr_projected", "hr_raw", "gaussian_projected", "gaussian_raw")


def distribution_sigma(epsilon: float, delta: float, calibration: str = "analytic") -> float:
    """σ of the Gaussian protocol on A = I_J (J ≥ 2): its sensitivity is ‖e_v − e_v'‖ = √2
    whatever J. ``calibration`` as in :class:`~ldpdist.linear.GaussianLinearQueries`."""
    epsilon, delta = _cal.check_epsilon_delta(epsilon, delta)
    calibration = one_of(calibration, ("analytic", "classic"), "calibration")
    sigma = _cal.analytic_sigma if calibration == "analytic" else _cal.classic_sigma
    return sigma(epsilon, delta, math.sqrt(2.0))


def distribution_estimates(counts: Any, epsilon: float, delta: float, *,
                           seed: Optional[int] = None) -> Dict[str, np.ndarray]:
    """The four estimates of p from the same users (their histogram ``counts``, shape (J,),
    J ≥ 2): ``hr_raw`` / ``hr_projected`` (projected HR, pure ε) and ``gaussian_raw`` /
    ``gaussian_projected`` (the Gaussian protocol on A = I_J, (ε, δ), simplex projection).
    Each is exact in law (module docstring). ``seed`` (int) makes the draw reproducible."""
    from .. import HadamardResponse
    from ..kernels import project_simplex

    counts = np.asarray(counts)
    if counts.ndim != 1 or counts.size < 2 or counts.dtype.kind not in "iu":
        raise ValueError(f"counts must be a 1-D integer histogram over J ≥ 2 values, got "
                         f"shape {counts.shape} and dtype {counts.dtype}")
    if counts.min() < 0:
        raise ValueError(f"counts must be ≥ 0: counts[{int(np.argmin(counts))}] = "
                         f"{int(counts.min())}")
    n = int(counts.sum())
    if n < 1:
        raise ValueError("counts must hold at least one user")
    J = counts.size
    rng = np.random.default_rng(seed)
    sigma = distribution_sigma(epsilon, delta)
    aggregate = HadamardResponse(J, epsilon, blocks=1).simulate(
        counts.astype(np.uint64), seed=int(rng.integers(0, 2**63)))
    mean = counts / n + rng.normal(0.0, sigma / math.sqrt(n), size=J)
    return {"hr_projected": aggregate.estimate("project"), "hr_raw": aggregate.estimate("raw"),
            "gaussian_projected": project_simplex(mean), "gaussian_raw": mean}


class DistributionComparison(NamedTuple):
    """ℓ2 errors ‖p̂ − p‖ over the runs (each an array of shape (runs,)), and the inputs."""

    hr_projected: np.ndarray
    hr_raw: np.ndarray
    gaussian_projected: np.ndarray
    gaussian_raw: np.ndarray
    n: int
    epsilon: float
    delta: float

    def means(self) -> Dict[str, float]:
        """The mean ℓ2 error of each estimator."""
        return {name: float(np.mean(getattr(self, name))) for name in ESTIMATORS}

    @property
    def best(self) -> str:
        """The estimator with the smallest mean ℓ2 error."""
        means = self.means()
        return min(means, key=means.__getitem__)


def compare_distribution_estimation(p: Any, n: int, epsilon: float, delta: float = 1e-6, *,
                                    runs: int = 10,
                                    seed: Optional[int] = None) -> DistributionComparison:
    """Measure projected HR against the Gaussian protocol on A = I_J for a distribution ``p``
    (shape (J,), J ≥ 2, non-negative, summing to 1), ``n`` users, ``runs`` independent runs
    on the same users per run (:func:`distribution_estimates`).

    Example: ``compare_distribution_estimation(np.full(1000, 1e-3), 200_000, 1.0).means()``.
    """
    p = float_vector(p, "p")
    if p.size < 2 or p.min() < 0 or not math.isclose(float(p.sum()), 1.0, abs_tol=1e-9):
        raise ValueError("p must be a distribution over J ≥ 2 values (non-negative, summing "
                         "to 1)")
    n = integer(n, "n", minimum=1)
    runs = integer(runs, "runs", minimum=1)
    rng = np.random.default_rng(seed)
    errors: Dict[str, Any] = {name: [] for name in ESTIMATORS}
    for _ in range(runs):
        counts = rng.multinomial(n, p / p.sum())
        estimates = distribution_estimates(counts, epsilon, delta,
                                           seed=int(rng.integers(0, 2**63)))
        for name in ESTIMATORS:
            errors[name].append(float(np.linalg.norm(estimates[name] - p)))
    return DistributionComparison(*(np.asarray(errors[name]) for name in ESTIMATORS), n=n,
                                  epsilon=float(epsilon), delta=float(delta))
