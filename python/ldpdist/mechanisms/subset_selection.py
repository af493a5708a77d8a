"""Subset Selection."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .. import _core
from .._validation import exact_sum_u64, integer, real, shown_duration
from ..errors import IntegrityError
from ..specs import register
from .base import BitVectorMechanism, check_epsilon


#: The default ``max_seconds`` of :meth:`SubsetSelection.simulate`: calls estimated to take
#: minutes are refused unless asked for.
SIMULATE_SECONDS_LIMIT = 60.0


@register("ss")
class SubsetSelection(BitVectorMechanism):
    """Subset Selection (Ye & Barg 2018; Wang et al. 2016).

    Each report is a set ``S`` of exactly ``d`` of the k values, sent as a packed k-bit row
    (bit j set iff j is in S). The channel is ``Q(S | x) = e^ε / Z`` if ``x ∈ S`` and ``1 / Z``
    otherwise, ``Z = C(k-1, d-1) e^ε + C(k-1, d)``: with probability
    ``ρ = d e^ε / (d e^ε + k - d)`` the report holds x and ``d - 1`` uniformly random other
    values, otherwise ``d`` uniformly random other values. ``ρ`` is rounded down so the
    realized guarantee (``realized_epsilon = ln ρ - ln(1-ρ) + ln((k-d)/d)``) never exceeds ε.

    The unbiased estimate from per-bit counts ``c_j`` of n reports is
    ``p̂_j = (c_j/n - b) / (a - b)`` with ``a = ρ`` and ``b = (d - ρ)/(k - 1)`` (see
    :meth:`probabilities`).

    Choice of d: the default is the published ``d = ceil(k / (e^ε + 1))``. The estimator's
    total variance at the uniform distribution,
    ``n Σ_j Var(p̂_j) = (k-1)² (d(e^ε-1) + k)² / (k d (k-d) (e^ε-1)²)``, is unimodal in d
    with its real minimum at exactly ``k / (e^ε + 1)``, so the variance-optimal integer d
    (:meth:`variance_optimal_d`) is the floor or the ceiling of that value. The two rules
    sometimes differ (the floor wins) by a variance difference of order ``1/d²``; the
    ceiling stays the default and ``d=SubsetSelection.variance_optimal_d(k, epsilon)`` (or
    any ``d`` in ``[1, k-1]``) can be passed explicitly. ``d`` is part of :meth:`to_dict`.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0.
    d : int, optional
        Subset size in ``[1, k - 1]``; default ``ceil(k / (e^ε + 1))``.

    Notes
    -----
    Reports are uint8 arrays of shape ``(n, ceil(k / 8))`` in ``numpy.packbits`` layout
    with zero padding bits; a row whose number of ones is not ``d`` is malformed (rejected,
    or dropped and counted with ``on_invalid="drop"``). :meth:`simulate` draws the per-bit
    counts of given users with the exact joint law of privatizing them one by one (the bits
    are dependent: every report has d ones) in ``O(k × #states)`` time, without per-user
    work; with an integer seed it is reproducible, but it is a different draw from
    ``privatize`` with the same seed (unlike the index-valued mechanisms, whose simulated
    histogram equals that of privatizing the sorted values). One call simulates at most
    2^40 users (``ValueError`` beyond: the hypergeometric sampler's floating-point
    arithmetic would no longer follow the law); simulate more in parts and merge the
    aggregators. ``channel_matrix`` has
    ``2**k`` columns (output o has bit j = ``(o >> j) & 1``), so it is only for small k.

    Examples
    --------
    >>> mech = SubsetSelection(k=10, epsilon=1.0)
    >>> mech.d
    3
    >>> reports = mech.privatize([3, 1, 4, 1, 5], seed=7)
    >>> reports.shape, int(np.unpackbits(reports, axis=1).sum(axis=1).max())
    ((5, 2), 3)
    >>> mech.estimate(reports).shape
    (10,)
    """

    _core_class = _core.SubsetSelection

    def __init__(self, k: int, epsilon: float, d: Optional[int] = None):
        self._d_requested = d
        super().__init__(k, epsilon)

    def _make_core(self) -> Any:
        d = self._d_requested
        if d is not None:
            d = integer(d, "d", minimum=1, maximum=self._k - 1)
        return self._core_class(self._k, self._epsilon, d)

    @property
    def d(self) -> int:
        """Number of values in every report."""
        return int(self._core.d)

    def probabilities(self) -> "tuple[float, float]":
        """``(a, b)``: probability that bit j is set when the user's value is j (``a = ρ``),
        and when it is not (``b = (d - ρ)/(k - 1)``), as realized."""
        a, b = self._core.probabilities()
        return float(a), float(b)

    def _params(self) -> Dict[str, Any]:
        return {"k": self._k, "epsilon": self._epsilon, "d": self.d}

    def simulate(self, true_counts: Any, seed: Optional[int] = None, *,
                 max_seconds: Optional[float] = SIMULATE_SECONDS_LIMIT) -> Any:
        """Aggregate of privatizing ``true_counts[x]`` users holding each value x (see
        :meth:`Mechanism.simulate <ldpdist.mechanisms.base.Mechanism.simulate>`), with the
        exact joint law of the per-bit counts (class documentation).

        Its cost grows with k, with the spread of the users' subset draws and with the
        number of users per occupied value: a call estimated (roughly, from those three; see
        :meth:`simulate_seconds`) above ``max_seconds`` seconds is refused before it starts
        (``ValueError`` with the estimate). Pass ``max_seconds=None`` to run it anyway (it
        stops on Ctrl-C), or simulate the users in parts and merge the aggregators.
        """
        if max_seconds is not None:
            max_seconds = real(max_seconds, "max_seconds")
            estimate = self.simulate_seconds(true_counts)
            if estimate is not None and estimate > max_seconds:
                raise ValueError(
                    f"SubsetSelection(k={self._k}).simulate of these counts would take about "
                    f"{shown_duration(estimate)} (a rough estimate for a small two-core machine), "
                    f"over max_seconds = {max_seconds:g}; pass max_seconds=None to run it "
                    "anyway (Ctrl-C stops it), or fewer values or users per call")
        return super().simulate(true_counts, seed)

    def simulate_seconds(self, true_counts: Any) -> Optional[float]:
        """A rough estimate of the seconds :meth:`simulate` takes on ``true_counts`` on a
        small two-core machine (within a factor of a few), None when ``true_counts`` is not
        a valid count vector (``simulate`` then says why). The simulation scans every value
        with per-state binomial draws over about ``σ = √(d(k − d)/(4k))`` states, one scan
        per occupied value and a blocked scan of the rest, each draw costing more as the
        counts grow: ``1e-6 σ·m·log2(n/m + 2) + 2e-8 σ·k·log2(n + 2)`` seconds for n users on
        m occupied values."""
        try:
            counts = np.asarray(true_counts)
        except (TypeError, ValueError, OverflowError):
            return None
        if counts.dtype.kind not in "iu" or counts.shape != (self._k,):
            return None
        n = float(counts.sum(dtype=np.float64))
        occupied = int(np.count_nonzero(counts))
        if occupied == 0:
            return 0.0
        k, d = self._k, self.d
        sigma = math.sqrt(d * (k - d) / (4 * k)) + 1
        return (1e-6 * sigma * occupied * math.log2(n / occupied + 2)
                + 2e-8 * sigma * k * math.log2(n + 2))

    def _frequency_oracle(self) -> Tuple[float, float]:
        """A report supports x when x is in the subset: :meth:`probabilities`,
        ``(ρ, (d - ρ)/(k - 1))`` as realized."""
        return self.probabilities()

    def _check_counts(self, counts: np.ndarray, n: int) -> None:
        super()._check_counts(counts, n)
        total = exact_sum_u64(counts)
        if total != n * self.d:
            raise IntegrityError(
                f"corrupt aggregator: the bit counts sum to {total}, not n * d = {n * self.d}")

    @staticmethod
    def default_d(k: int, epsilon: float) -> int:
        """The default subset size ``ceil(k / (e^ε + 1))``, clamped to ``[1, k - 1]``."""
        k = integer(k, "k", minimum=2, maximum=2**32)
        return int(_core.SubsetSelection.default_d(k, check_epsilon(real(epsilon, "epsilon"))))

    @staticmethod
    def variance_optimal_d(k: int, epsilon: float) -> int:
        """The integer d in ``[1, k - 1]`` minimizing :meth:`variance_at_uniform`
        (``floor`` or ``ceil`` of ``k / (e^ε + 1)``; ties go to the larger)."""
        k = integer(k, "k", minimum=2, maximum=2**32)
        return int(_core.SubsetSelection.variance_optimal_d(
            k, check_epsilon(real(epsilon, "epsilon"))))

    @staticmethod
    def variance_at_uniform(k: int, epsilon: float, d: int) -> float:
        """``n · Σ_j Var(p̂_j)`` of the unbiased estimate for n users drawn from the uniform
        distribution: ``(k-1)² (d(e^ε-1) + k)² / (k d (k-d) (e^ε-1)²)``."""
        k = integer(k, "k", minimum=2, maximum=2**32)
        d = integer(d, "d", minimum=1, maximum=k - 1)
        return float(_core.SubsetSelection.variance_at_uniform(
            k, check_epsilon(real(epsilon, "epsilon")), d))
