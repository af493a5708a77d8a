"""Calibrations of the Gaussian mechanism and its exact privacy profile.

For two inputs whose answer vectors are Δ apart (Δ = the L2 sensitivity), releasing
``a + N(0, σ² I)`` is (ε, δ)-DP exactly for δ ≥ δ(ε; σ, Δ), the privacy profile of Balle &
Wang (2018, "Improving the Gaussian mechanism for differential privacy", Theorem 8):

    δ(ε; σ, Δ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε · Φ(−Δ/(2σ) − εσ/Δ).

* :func:`analytic_sigma`: the smallest σ with δ(ε; σ, Δ) ≤ δ (the analytic Gaussian
  mechanism), by bisection on log σ to the last bits (δ is decreasing in σ).
* :func:`classic_sigma`: ``Δ √(2 ln(1.25/δ)) / ε`` (Dwork & Roth 2014, Theorem A.1), whose
  proof needs ε < 1: it is refused for ε ≥ 1 (and for ε < 1 it is never smaller than the
  analytic σ).
* :func:`paper_sigma`: ``r √(2 ln(2/δ)) / ε``, Algorithm 1 of Bassily, "Linear Queries
  Estimation with Local Differential Privacy" (AISTATS 2019) as printed. It uses the
  column-norm bound r where the sensitivity is up to 2r, so it is NOT (ε, δ)-LDP in general
  (the sensitivity erratum on the docs page Mechanisms › Linear queries,
  docs/mechanisms/linear-queries.md): :func:`gaussian_delta` of it measures by how much.

Φ is computed from ``math.erfc`` (accurate in both tails), and the second term as
``exp(ε + ln Φ(·))`` so that e^ε never overflows alone. Δ = 0 (all columns equal: the report
carries no information about the user) gives σ = 0 and δ = 0 exactly.
"""

from __future__ import annotations

import math

from .. import _core
from .._validation import real

__all__ = [
    "MIN_EPSILON",
    "MAX_EPSILON",
    "check_epsilon",
    "check_sigma",
    "gaussian_delta",
    "analytic_sigma",
    "classic_sigma",
    "paper_sigma",
    "check_epsilon_delta",
]

_SQRT2 = math.sqrt(2.0)

#: The largest ε the linear protocols accept: the distribution mechanisms' limit
#: (``e^ε`` must stay finite in double precision). The rejection-sampling protocol stops at
#: its own, smaller, maximum.
MAX_EPSILON = float(_core.MAX_EPSILON)

#: The smallest ε the linear protocols accept. The distribution mechanisms cannot represent
#: an ε much below 10⁻¹¹ (their realized-ε rule refuses it: the channel's probabilities round
#: to equal values); the linear protocols share their floor, with a margin. At ε = 10⁻¹⁰ the
#: noise is already about 10¹⁰ times the sensitivity.
MIN_EPSILON = 1e-10


def check_epsilon(epsilon: float, maximum: float = MAX_EPSILON) -> float:
    """ε as a float, checked to lie in [``MIN_EPSILON``, ``maximum``] (``ValueError``
    naming the range otherwise)."""
    epsilon = real(epsilon, "epsilon")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    if epsilon < MIN_EPSILON:
        raise ValueError(f"epsilon = {epsilon!r} is too small: the smallest accepted is "
                         f"{MIN_EPSILON!r} (the noise would be more than 10^10 times the "
                         "sensitivity, and the distribution mechanisms cannot represent it)")
    if epsilon > maximum:
        raise ValueError(f"epsilon = {epsilon!r} is too large: the largest accepted is "
                         f"{maximum!r}")
    return epsilon


def check_sigma(sigma: float, what: str) -> float:
    """``sigma`` when it is finite, else ``ValueError``: the noise scale overflows double
    precision (``what`` says from what)."""
    if not math.isfinite(sigma):
        raise ValueError(f"the noise scale sigma = {sigma!r} overflows double precision ({what}): "
                         "rescale the queries (and r) so that the sensitivity is moderate")
    return sigma


def normal_cdf(x: float) -> float:
    """Φ(x), accurate to a few ulps relative in both tails (``erfc`` form)."""
    return 0.5 * math.erfc(-x / _SQRT2)


def normal_pdf(x: float) -> float:
    """φ(x)."""
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def check_epsilon_delta(epsilon: float, delta: float) -> tuple:
    """``(epsilon, delta)`` as floats after checking ε in [``MIN_EPSILON``,
    ``MAX_EPSILON``] (:func:`check_epsilon`) and 0 < δ < 1."""
    epsilon = check_epsilon(epsilon)
    delta = real(delta, "delta")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    return epsilon, delta


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact δ at ``epsilon`` of the Gaussian mechanism with noise ``sigma`` (standard
    deviation per coordinate) and L2 ``sensitivity`` (Balle & Wang 2018, Theorem 8).

    0 when ``sensitivity`` is 0; 1 when ``sigma`` is 0 and ``sensitivity`` > 0."""
    epsilon = real(epsilon, "epsilon")
    sigma, sensitivity = real(sigma, "sigma"), real(sensitivity, "sensitivity")
    if epsilon < 0 or sigma < 0 or sensitivity < 0:
        raise ValueError("epsilon, sigma and sensitivity must be ≥ 0")
    if sensitivity == 0:
        return 0.0
    if sigma == 0:
        return 1.0
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    first = normal_cdf(a - b)
    tail = normal_cdf(-a - b)
    second = math.exp(epsilon + math.log(tail)) if tail > 0 else 0.0
    return max(first - second, 0.0)


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ (to the last bits) with ``gaussian_delta(epsilon, σ, sensitivity) ≤
    delta``: the analytic Gaussian mechanism (Balle & Wang 2018), any ε > 0."""
    epsilon, delta = check_epsilon_delta(epsilon, delta)
    sensitivity = real(sensitivity, "sensitivity")
    if sensitivity < 0:
        raise ValueError(f"sensitivity must be ≥ 0, got {sensitivity}")
    if sensitivity == 0:
        return 0.0
    # Bisect σ itself (not σ/Δ, then scaled: the product's rounding could move δ above the
    # target by an ulp), so the σ returned meets δ as computed.
    def too_small(sigma: float) -> bool:
        return gaussian_delta(epsilon, sigma, sensitivity) > delta

    hi = sensitivity
    while too_small(hi):
        hi *= 2.0
    lo = hi / 2.0
    while not too_small(lo) and lo > 1e-300:
        lo /= 2.0
    # Invariant: δ(lo) > δ ≥ δ(hi). Bisect in the geometric mean until adjacent.
    for _ in range(2000):
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        if too_small(mid):
            lo = mid
        else:
            hi = mid
    return hi


def classic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """``Δ √(2 ln(1.25/δ)) / ε``, the classic Gaussian mechanism (Dwork & Roth 2014,
    Theorem A.1). Its proof holds only for ε < 1: larger ε is refused (use
    ``calibration="analytic"``, valid for every ε)."""
    epsilon, delta = check_epsilon_delta(epsilon, delta)
    if epsilon >= 1:
        raise ValueError(f"the classic Gaussian calibration is proved only for epsilon < 1, "
                         f"got {epsilon!r}; use calibration='analytic' (any epsilon)")
    return real(sensitivity, "sensitivity") * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def paper_sigma(epsilon: float, delta: float, r: float) -> float:
    """``r √(2 ln(2/δ)) / ε``: Algorithm 1 as printed. NOT (ε, δ)-LDP in general — it is
    calibrated to the column-norm bound r, but two users' vectors can be up to 2r apart."""
    epsilon, delta = check_epsilon_delta(epsilon, delta)
    return real(r, "r") * math.sqrt(2 * math.log(2 / delta)) / epsilon
