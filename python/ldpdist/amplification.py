"""Privacy amplification by shuffling: the central (ε, δ) of n shuffled ε₀-LDP reports.

When n users each send one report from the same ε₀-LDP randomizer and a shuffler hands the
server the reports in a uniformly random order (so the server cannot tell who sent what),
the multiset of reports is (ε, δ)-differentially private for an ε much smaller than ε₀.
This module computes that ε (or, for a given ε, that δ) for **any** ε₀-LDP randomizer with
the analysis of Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly
Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021:

* ``method="closed_form"``: their Theorem 3.1,

      ε = log(1 + (e^ε₀ − 1)/(e^ε₀ + 1) · (8 √(e^ε₀ log(4/δ)) / √n + 8 e^ε₀ / n)),

  valid only when ε₀ ≤ log(n / (16 log(2/δ))); outside that range it raises ``ValueError``
  (use the numerical bound, which has no such condition).

* ``method="numerical"``: the clone reduction computed exactly. For any ε₀-LDP randomizer
  the shuffled output on two neighbouring datasets is a post-processing of the pair

      P = (A + Δ, C − A + 1 − Δ),      Q = (A + 1 − Δ, C − A + Δ),

  with C ~ Bin(n − 1, e^−ε₀) (the other users that behave as "clones" of the differing
  user), A ~ Bin(C, 1/2), Δ ~ Bernoulli(e^ε₀/(e^ε₀ + 1)) under P and Bernoulli(1/(e^ε₀ + 1))
  under Q (the differing user's binary randomized response). So the shuffled reports are
  (ε, δ)-DP whenever the hockey-stick divergence D_{e^ε}(P‖Q) ≤ δ (the pair is symmetric:
  D(P‖Q) = D(Q‖P)). Given C = c the divergence D_c is a sum over the two-point mixtures of
  Bin(c, 1/2), which is computed here term by term; D_c decreases in c (one more clone is a
  post-processing), so the sum over c is bracketed block by block (a block's share lies
  between its mass times D_c at its last c and at its first c), blocks being split where
  the bracket is widest until it is narrow (relative width 10⁻⁵) or decides the comparison
  with the target δ; the ε for a target δ is found by bisection on ε (D decreases in ε).

Accuracy and cost (what "upper" and "lower" mean). Every probability is computed in log
space (``math.lgamma`` and sums of log ratios), so n up to 10⁸ and beyond is fine. Two
truncations keep the cost at O(√n) binomial terms per D_c (and a few hundred D_c at most per
divergence evaluation, typically):

* C is summed only within about 10 standard deviations of its mode; the mass outside is
  bounded by a geometric series from the window's end (the binomial's successive ratios
  decrease there) and **added to δ** in the upper bound (the divergence never exceeds 1);
* for each c, A is summed from the mode c/2 (below it every term of the divergence is ≤ 0)
  to about 10 standard deviations above it; twice the mass beyond is added to δ in the upper
  bound (it bounds every term that involves it).

``bound="upper"`` returns an ε at which the computed upper bound on δ (block maxima plus
the truncated masses) is ≤ δ: a valid (ε, δ)-DP guarantee, up to float64 rounding (relative
errors of order 10⁻¹² in δ). ``bound="lower"`` returns an ε at which the computed lower bound
on the same divergence (block minima, truncated masses dropped) still exceeds δ: the exact
ε of the clone analysis lies between the two, and the gap (the bisection's relative
``tolerance``, plus the blocks' bracket) is the numerical precision of the computation —
this is the "lower bound" of the paper's numerical procedure. It is **not** a lower bound on the
shuffled ε of a particular mechanism; for that see :func:`shuffle_rr_epsilon` (the exact ε
of shuffled binary randomized response, an ε₀-LDP randomizer, so no generic bound can be
smaller).

Mechanism-specific amplification (:func:`clone_parameters`,
:func:`shuffle_epsilon_for_channel`, :func:`shuffle_delta_for_channel`): the same reduction
with a channel's own parameters — for each pair of inputs its own ε₀ and the largest clone
probability p its rows allow (p ≥ e^−ε₀ always; 2/(e^ε₀ + 1) for k-ary randomized
response), the worst pair taken. The argument is written out on the docs page
"Amplification by shuffling".

Amplification never hurts: the shuffled reports are ε₀-DP anyway (changing one user's data
changes one ε₀-LDP report), so every ε returned is ``min(ε₀, bound)``.

Units: ε, ε₀ in nats (natural logarithm); δ a probability; n a count of reports.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Tuple

import numpy as np

from ._validation import integer, one_of, real, shown

__all__ = [
    "shuffle_epsilon",
    "shuffle_delta",
    "shuffle_rr_epsilon",
    "shuffle_rr_delta",
    "closed_form_applies",
    "clone_parameters",
    "shuffle_epsilon_for_channel",
    "shuffle_delta_for_channel",
]

#: Half-width of the summation windows, in standard deviations (the mass outside is bounded
#: and accounted for; 10 sd leaves ≲ 1e-22 of a normal's mass).
_SPREAD = 10.0
#: Blocks the window of C is first cut into (refined where needed, see _CloneDivergence).
_START_BLOCKS = 32
#: Relative width of the bracket on δ at which refinement stops.
_REL_GAP = 1e-5


# --------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------

def _check_epsilon0(epsilon0: Any) -> float:
    e0 = real(epsilon0, "epsilon0")
    if e0 <= 0:
        raise ValueError(f"epsilon0 must be > 0 (the local ε in nats), got {e0}")
    if e0 > 700:
        raise ValueError(f"epsilon0 must be ≤ 700 (e^ε₀ must be a finite float64), got {e0}")
    return e0


def _check_n(n: Any) -> int:
    return integer(n, "n", minimum=2)


def _check_delta(delta: Any) -> float:
    d = real(delta, "delta")
    if not 0 < d < 1:
        raise ValueError(f"delta must be in (0, 1), got {d}")
    return d


def _check_epsilon(epsilon: Any) -> float:
    e = real(epsilon, "epsilon")
    if e < 0:
        raise ValueError(f"epsilon must be ≥ 0, got {e}")
    return e


def _check_tolerance(tolerance: Any) -> float:
    t = real(tolerance, "tolerance")
    if not 0 < t <= 1:
        raise ValueError(f"tolerance must be in (0, 1] (relative), got {t}")
    return t


# --------------------------------------------------------------------------------------
# binomial pmfs in log space, on a window, with a bound on the mass outside it
# --------------------------------------------------------------------------------------

def _log_binom_window(m: int, log_p: float, log_q: float, p: float,
                      upper_half: bool = False) -> Tuple[int, np.ndarray, float]:
    """The pmf of Bin(m, p) on a window ``[lo, lo + len)`` around its mode, and an upper
    bound on the mass outside the window. ``log_q = log(1 − p)``. With ``upper_half`` the
    window starts at the mode and only the mass above it is bounded.

    Returns ``(lo, pmf, outside)``; ``pmf`` is float64 (entries below ~1e-308 flush to 0).
    """
    if m == 0:
        return 0, np.ones(1), 0.0
    if p >= 1.0:
        return m, np.ones(1), 0.0
    mode = min(m, int(math.floor((m + 1) * p)))
    sd = math.sqrt(m * p * (1.0 - p))
    half = int(math.ceil(_SPREAD * sd)) + 30
    lo, hi = (mode if upper_half else max(0, mode - half)), min(m, mode + half)
    ks = np.arange(lo, hi + 1, dtype=np.float64)
    log_mode = (math.lgamma(m + 1) - math.lgamma(mode + 1) - math.lgamma(m - mode + 1)
                + mode * log_p + (m - mode) * log_q)
    # log pmf(k+1) − log pmf(k) = log((m − k)/(k + 1)) + log p − log q, summed outward from
    # the mode (the rounding error grows like √(window) ulps: negligible).
    step = np.log((m - ks[:-1]) / (ks[:-1] + 1)) + (log_p - log_q)
    logpmf = np.empty_like(ks)
    i = mode - lo
    logpmf[i] = log_mode
    logpmf[i + 1:] = log_mode + np.cumsum(step[i:])
    logpmf[:i] = log_mode - np.cumsum(step[:i][::-1])[::-1]
    pmf = np.exp(logpmf)
    outside = 0.0
    if hi < m:  # ratios pmf(k+1)/pmf(k) decrease in k: a geometric series bounds the tail
        rho = (m - hi) / (hi + 1) * math.exp(log_p - log_q)
        outside += pmf[-1] * rho / (1.0 - rho) if rho < 1 else 1.0
    if lo > 0 and not upper_half:
        rho = lo / (m - lo + 1) * math.exp(log_q - log_p)
        outside += pmf[0] * rho / (1.0 - rho) if rho < 1 else 1.0
    return lo, pmf, outside


def _mixture_divergence(pmf: np.ndarray, outside: float, alpha: float, exp_eps: float,
                        starts_at_0: bool, ends_at_m: bool) -> Tuple[float, float]:
    """Bounds on Σ_k max(0, P(k) − e^ε Q(k)) for P(k) = α b(k−1) + (1−α) b(k) and
    Q(k) = (1−α) b(k−1) + α b(k), where ``b`` is known on a window (the array ``pmf``) and
    its mass outside the window is at most ``outside``.

    Lower: the terms whose two b values are both known (inside the window, or zero beyond
    the support's ends: ``starts_at_0``, ``ends_at_m``), so exact. Upper: every
    term computed with b = 0 outside the window, plus ``2 · outside`` (each of the two
    coefficients of b is below 1 where positive, so the terms that involve b outside the
    window add at most twice its mass).
    """
    shifted = np.concatenate(([0.0], pmf))   # b(k − 1) on k = lo .. hi + 1
    same = np.concatenate((pmf, [0.0]))      # b(k)
    gap = ((alpha - exp_eps * (1.0 - alpha)) * shifted
           + ((1.0 - alpha) - exp_eps * alpha) * same)
    gap = np.maximum(gap, 0.0)
    first, last = float(gap[0]), float(gap[-1])
    interior = float(gap[1:-1].sum()) + (first if starts_at_0 else 0.0) + (
        last if ends_at_m else 0.0)
    return interior, min(1.0, float(gap.sum()) + 2.0 * outside)


# --------------------------------------------------------------------------------------
# the clone reduction (Feldman, McMillan, Talwar, FOCS 2021)
# --------------------------------------------------------------------------------------

class _CloneDivergence:
    """D_{e^ε}(P‖Q) of the clone pair for fixed (ε₀, n), bracketed: ``(lower, upper)``.

    The window of C is cut into blocks; D_c decreases in c (one more clone is a
    post-processing), so a block's share lies between its mass times D at its last c and
    its mass times D at its first c. Blocks are split where the bracket is widest until it
    is narrow enough (or decides the comparison with a target δ), down to single values of
    c, where it is exact.
    """

    def __init__(self, epsilon0: float, n: int, clone: Optional[float] = None,
                 blocks: int = _START_BLOCKS):
        self.epsilon0 = epsilon0
        self.alpha = 1.0 / (1.0 + math.exp(-epsilon0))  # e^ε₀/(e^ε₀ + 1)
        if clone is None:                                # any ε₀-LDP randomizer: a user is
            clone = math.exp(-epsilon0)                  # a clone w.p. e^−ε₀
            log_p, log_q = -epsilon0, math.log(-math.expm1(-epsilon0))
        else:
            log_p = math.log(clone) if clone > 0 else -math.inf
            log_q = math.log1p(-clone) if clone < 1 else -math.inf
        if clone <= 0.0:
            self.lo, self.w, self.outside = 0, np.ones(1), 0.0
        elif clone >= 1.0:
            self.lo, self.w, self.outside = n - 1, np.ones(1), 0.0
        else:
            self.lo, self.w, self.outside = _log_binom_window(n - 1, log_p, log_q, clone)
        size = len(self.w)
        self.edges = np.unique(np.linspace(0, size, min(size, blocks) + 1).round()
                               .astype(np.int64))  # block j: window indices [e_j, e_{j+1})

    def _given_c(self, c: int, exp_eps: float, cache: dict) -> Tuple[float, float]:
        value = cache.get(c)
        if value is None:
            # α > 1/2 and ε ≥ 0: only terms above the mode c/2 can be positive (the
            # likelihood ratio increases in A), so the window starts at the mode
            lo, pmf, outside = _log_binom_window(c, -math.log(2.0), -math.log(2.0), 0.5,
                                                 upper_half=True)
            value = cache[c] = _mixture_divergence(pmf, outside, self.alpha, exp_eps,
                                                   True, lo + len(pmf) - 1 == c)
        return value

    def __call__(self, epsilon: float, target: Optional[float] = None,
                 rel: float = _REL_GAP) -> Tuple[float, float]:
        """``(lower, upper)`` on δ(ε), refined until ``upper − lower ≤ rel · upper`` or
        ``target`` lies outside ``[lower, upper)``."""
        if epsilon >= self.epsilon0:
            return 0.0, 0.0
        exp_eps = math.exp(epsilon)
        cache: dict = {}
        edges = self.edges
        while True:
            starts, stops = edges[:-1], edges[1:]
            mass = np.add.reduceat(self.w, starts)
            highs = np.array([self._given_c(self.lo + int(i), exp_eps, cache)[1]
                              for i in starts])
            lows = np.array([self._given_c(self.lo + int(i) - 1, exp_eps, cache)[0]
                             for i in stops])
            lower = min(1.0, float(np.dot(mass, lows)))
            upper = min(1.0, float(np.dot(mass, highs)) + self.outside)
            wide = stops - starts > 1
            decided = target is not None and not lower <= target < upper
            if decided or upper - lower <= rel * upper or not wide.any():
                return lower, upper
            # split (into 8) the blocks that make up most of the bracket's width
            share = np.where(wide, mass * (highs - lows), 0.0)
            order = np.argsort(share)[::-1]
            keep = order[: int(np.searchsorted(np.cumsum(share[order]),
                                               0.9 * share.sum())) + 1]
            keep = keep[wide[keep]]
            cuts = [np.linspace(starts[j], stops[j], 9).round().astype(np.int64)
                    for j in keep]
            edges = np.unique(np.concatenate([edges] + cuts))


# --------------------------------------------------------------------------------------
# shuffled binary randomized response (an exact, mechanism-specific computation)
# --------------------------------------------------------------------------------------

class _RRDivergence:
    """δ(ε) of n shuffled binary randomized responses (ε₀), for the neighbouring datasets
    "everyone else holds 0; the differing user holds 1 vs 0", both directions."""

    def __init__(self, epsilon0: float, n: int):
        self.epsilon0 = epsilon0
        q = 1.0 / (1.0 + math.exp(epsilon0))  # probability of reporting the other bit
        self.alpha = 1.0 - q
        lo, self.pmf, self.outside = _log_binom_window(
            n - 1, math.log(q), math.log1p(-q), q)
        self.ends = (lo == 0, lo + len(self.pmf) - 1 == n - 1)

    def __call__(self, epsilon: float, target: Optional[float] = None) -> Tuple[float, float]:
        if epsilon >= self.epsilon0:
            return 0.0, 0.0
        exp_eps = math.exp(epsilon)
        one = _mixture_divergence(self.pmf, self.outside, self.alpha, exp_eps, *self.ends)
        other = _mixture_divergence(self.pmf, self.outside, 1.0 - self.alpha, exp_eps,
                                    *self.ends)
        return max(one[0], other[0]), max(one[1], other[1])


def _bisect(divergence: Callable[[float], Tuple[float, float]], epsilon0: float,
            delta: float, bound: str, tolerance: float) -> float:
    """The ε in [0, ε₀] where the bracketed δ(ε) crosses ``delta``: for ``"upper"`` an ε
    with upper δ(ε) ≤ delta; for ``"lower"`` an ε with lower δ(ε) > delta (or 0)."""
    side = 1 if bound == "upper" else 0
    lo, hi = 0.0, epsilon0
    if divergence(0.0, delta)[side] <= delta:
        return 0.0
    for _ in range(200):  # the bracket halves each time: ~log2(ε₀ / (tolerance · ε)) rounds
        if hi - lo <= tolerance * hi:
            break
        mid = 0.5 * (lo + hi)
        if divergence(mid, delta)[side] <= delta:
            hi = mid
        else:
            lo = mid
    return hi if bound == "upper" else lo


# --------------------------------------------------------------------------------------
# channel-specific clones
# --------------------------------------------------------------------------------------

#: Largest k² · k · |Y| (float64 entries visited) :func:`clone_parameters` accepts.
_CHANNEL_WORK = 2**27


def _as_channel(channel: Any) -> np.ndarray:
    if hasattr(channel, "channel_matrix") and not isinstance(channel, np.ndarray):
        channel = channel.channel_matrix()
    if isinstance(channel, np.ndarray) and channel.dtype != np.float64:
        raise TypeError(f"channel must have dtype float64, got {channel.dtype}")
    try:
        Q = np.asarray(channel, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"channel must be a k × |Y| matrix of probabilities or a mechanism "
                        f"with channel_matrix(), got {shown(channel)}") from None
    if Q.ndim != 2 or Q.shape[0] < 2 or Q.shape[1] < 1:
        raise ValueError(f"channel must be a k × |Y| matrix with k ≥ 2, got shape {Q.shape}")
    if not np.all(np.isfinite(Q)) or np.any(Q < 0):
        raise ValueError("channel must have finite, non-negative entries")
    sums = Q.sum(axis=1)
    if np.any(np.abs(sums - 1.0) > 1e-9):
        i = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"the rows of channel must sum to 1: row {i} sums to {sums[i]!r}")
    k = Q.shape[0]
    if k * k * Q.size > _CHANNEL_WORK:
        raise ValueError(f"channel too large for the pairwise computation ({k} inputs × "
                         f"{Q.shape[1]} outputs: k² · k · |Y| > 2^27); use the generic bound "
                         "shuffle_epsilon(epsilon0, ...) instead")
    return Q


def clone_parameters(channel: Any) -> list:
    """The clone parameters of a channel: the pairs ``(ε₀, p)`` that bound the shuffled
    privacy of its reports (see :func:`shuffle_epsilon_for_channel`).

    For each pair of inputs ``x⁰ ≠ x¹``: ``ε₀ = max_y |ln Q(y|x⁰) − ln Q(y|x¹)|`` (the pair's
    own local ε) and ``p = min_{x, y} Q(y|x) / ((Q(y|x⁰) + Q(y|x¹)) / 2)``, the largest
    probability with which every user's report can be drawn as a "clone" (a fair mixture of
    the reports of x⁰ and x¹). For any ε₀-LDP channel ``p ≥ e^−ε₀`` (the generic analysis),
    and often more: ``2/(e^ε₀ + 1)`` for k-ary randomized response.

    Parameters
    ----------
    channel : array_like or mechanism
        ``Q[x, y] = Q(y | x)``, k × m (k ≥ 2 inputs, m outputs), rows summing to 1; or
        any object with a ``channel_matrix()`` method (every mechanism of this library).

    Returns
    -------
    list of (float, float)
        The pairs ``(ε₀, p)`` not dominated by another (larger ε₀ and smaller p are worse),
        sorted by ε₀; pairs of inputs with identical rows (ε₀ = 0) are left out.

    Raises
    ------
    ValueError
        When the channel is not LDP for some pair (an output possible under one input and
        impossible under the other: ε₀ infinite), or too large (k³ · m > 2^27 for k
        inputs and m outputs).
    """
    Q = _as_channel(channel)
    k = Q.shape[0]
    with np.errstate(divide="ignore"):
        logs = np.log(Q)
    found = []
    for x0 in range(k):
        for x1 in range(x0 + 1, k):
            a, b = Q[x0], Q[x1]
            if np.any((a > 0) != (b > 0)):
                raise ValueError(f"channel is not LDP: some output is possible under input "
                                 f"{x0} or {x1} and impossible under the other")
            support = a > 0
            epsilon0 = float(np.max(np.abs(logs[x0, support] - logs[x1, support])))
            if epsilon0 == 0.0:
                continue
            mix = 0.5 * (a[support] + b[support])
            clone = float(min(1.0, np.min(Q[:, support] / mix)))
            found.append((epsilon0, clone))
    front = []
    for e0, p in sorted(set(found), key=lambda t: (-t[0], t[1])):
        if not any(e >= e0 and q <= p for e, q in front):
            front.append((e0, p))
    return sorted(front)


class _ChannelDivergence:
    """The largest clone divergence over a channel's clone parameters."""

    def __init__(self, parameters: list, n: int):
        self.parts = [_CloneDivergence(e0, n, clone=p) for e0, p in parameters]

    def __call__(self, epsilon: float, target: Optional[float] = None) -> Tuple[float, float]:
        lower = upper = 0.0
        for part in self.parts:
            lo, hi = part(epsilon, target)
            lower, upper = max(lower, lo), max(upper, hi)
        return lower, upper


def shuffle_epsilon_for_channel(channel: Any, n: int, delta: float, *, bound: str = "upper",
                                tolerance: float = 1e-4) -> float:
    """The central ε at ``delta`` of ``n`` shuffled reports of one specific channel.

    The clone reduction of Feldman, McMillan, Talwar (FOCS 2021) applied with the channel's
    own clone parameters (:func:`clone_parameters`): for each pair of inputs, the pair's own
    ε₀ and the largest clone probability p the channel allows, instead of the worst case
    p = e^−ε₀ of a generic ε₀-LDP randomizer. The result is the largest over the pairs, never
    above :func:`shuffle_epsilon` at the channel's ε₀. See the docs page "Amplification by
    shuffling" for the argument.

    Parameters
    ----------
    channel : array_like or mechanism
        ``Q[x, y] = Q(y | x)`` (k inputs × m outputs, rows summing to 1), or a mechanism
        (anything with ``channel_matrix()``).
    n : int
        Number of reports shuffled together (≥ 2).
    delta : float
        Central δ in (0, 1).
    bound : {"upper", "lower"}
        As in :func:`shuffle_epsilon`.
    tolerance : float
        Relative width of the bisection bracket on ε.

    Returns
    -------
    float
        ε in nats, in [0, ε₀] with ε₀ the channel's realized local ε.
    """
    n, d = _check_n(n), _check_delta(delta)
    bound = one_of(bound, ("upper", "lower"), "bound")
    tol = _check_tolerance(tolerance)
    parameters = clone_parameters(channel)
    if not parameters:
        return 0.0  # every input gives the same output distribution
    top = max(e0 for e0, _ in parameters)
    return min(top, _bisect(_ChannelDivergence(parameters, n), top, d, bound, tol))


def shuffle_delta_for_channel(channel: Any, n: int, epsilon: float, *,
                              bound: str = "upper") -> float:
    """The central δ at ``epsilon`` of ``n`` shuffled reports of one specific channel (see
    :func:`shuffle_epsilon_for_channel`).

    Parameters
    ----------
    channel : array_like or mechanism
        ``Q[x, y] = Q(y | x)`` (k inputs × m outputs, rows summing to 1), or a mechanism.
    n : int
        Number of reports shuffled together (≥ 2).
    epsilon : float
        Central ε in nats (≥ 0).
    bound : {"upper", "lower"}
        As in :func:`shuffle_delta`.

    Returns
    -------
    float
        δ in [0, 1].
    """
    n, e = _check_n(n), _check_epsilon(epsilon)
    bound = one_of(bound, ("upper", "lower"), "bound")
    parameters = clone_parameters(channel)
    if not parameters:
        return 0.0
    return _ChannelDivergence(parameters, n)(e)[1 if bound == "upper" else 0]


# --------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------

def closed_form_applies(epsilon0: float, n: int, delta: float) -> bool:
    """Whether Theorem 3.1 of Feldman, McMillan, Talwar (FOCS 2021) applies:
    ``ε₀ ≤ log(n / (16 log(2/δ)))``.

    Parameters
    ----------
    epsilon0 : float
        The local ε₀ of each report, in nats (> 0).
    n : int
        The number of shuffled reports (≥ 2).
    delta : float
        The target δ, in (0, 1).
    """
    e0, n, d = _check_epsilon0(epsilon0), _check_n(n), _check_delta(delta)
    limit = n / (16.0 * math.log(2.0 / d))
    return limit > 1.0 and e0 <= math.log(limit)


def _closed_form(e0: float, n: int, d: float) -> float:
    if not closed_form_applies(e0, n, d):
        limit = n / (16.0 * math.log(2.0 / d))
        shown_limit = f"{math.log(limit):.6g}" if limit > 0 else "-inf"
        raise ValueError(
            f"the closed form needs epsilon0 ≤ log(n / (16 log(2/delta))) = {shown_limit} "
            f"for n={n}, delta={d:g}; got epsilon0={e0:g}. Use method='numerical', which has "
            "no such condition")
    ee = math.exp(e0)
    a = 8.0 * math.sqrt(ee * math.log(4.0 / d) / n) + 8.0 * ee / n
    return min(e0, math.log1p((ee - 1.0) / (ee + 1.0) * a))


def shuffle_epsilon(epsilon0: float, n: int, delta: float, *, method: str = "numerical",
                    bound: str = "upper", tolerance: float = 1e-4) -> float:
    """The central ε of ``n`` shuffled reports of any ε₀-LDP randomizer, at ``delta``.

    Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal
    Analysis of Privacy Amplification by Shuffling", FOCS 2021: the closed form of their
    Theorem 3.1 or their numerical bound (the clone reduction computed exactly). See the
    module docstring for the method and its accuracy.

    Parameters
    ----------
    epsilon0 : float
        The local ε₀ of every report, in nats (> 0, finite).
    n : int
        The number of reports shuffled together (≥ 2), one per user.
    delta : float
        The central δ, in (0, 1).
    method : {"numerical", "closed_form"}
        ``"numerical"`` (default) is the tighter bound, valid for every (ε₀, n, δ);
        ``"closed_form"`` raises ``ValueError`` unless ε₀ ≤ log(n / (16 log(2/δ)))
        (see :func:`closed_form_applies`).
    bound : {"upper", "lower"}
        ``"upper"``: an ε for which the shuffled reports are certainly (ε, δ)-DP.
        ``"lower"`` (numerical method only): an ε below the exact ε of the clone analysis
        (the bracket's other end: the two differ by the computation's precision). It is a
        statement about the analysis, not about a particular mechanism.
    tolerance : float
        Relative width of the bisection bracket on ε (numerical method): the search stops
        when ``(hi − lo) ≤ tolerance · hi``.

    Returns
    -------
    float
        ε in nats, in [0, ε₀] (shuffling never makes the guarantee worse: the result is
        ``min(ε₀, bound)``).
    """
    e0, n, d = _check_epsilon0(epsilon0), _check_n(n), _check_delta(delta)
    method = one_of(method, ("numerical", "closed_form"), "method")
    bound = one_of(bound, ("upper", "lower"), "bound")
    tol = _check_tolerance(tolerance)
    if method == "closed_form":
        if bound != "upper":
            raise ValueError("the closed form is an upper bound only; use "
                             "method='numerical' for bound='lower'")
        return _closed_form(e0, n, d)
    return min(e0, _bisect(_CloneDivergence(e0, n), e0, d, bound, tol))


def shuffle_delta(epsilon0: float, n: int, epsilon: float, *, bound: str = "upper") -> float:
    """The central δ at ``epsilon`` of ``n`` shuffled reports of any ε₀-LDP randomizer.

    The hockey-stick divergence D_{e^ε}(P‖Q) of the clone pair of Feldman, McMillan, Talwar
    (FOCS 2021), computed exactly up to the truncations described in the module docstring.

    Parameters
    ----------
    epsilon0 : float
        The local ε₀ of every report, in nats (> 0, finite).
    n : int
        The number of reports shuffled together (≥ 2).
    epsilon : float
        The central ε, in nats (≥ 0). For ε ≥ ε₀ the result is 0 (the reports are ε₀-DP).
    bound : {"upper", "lower"}
        ``"upper"``: the shuffled reports are (ε, δ)-DP for this δ (truncated masses
        added). ``"lower"``: a lower bound on the same divergence.

    Returns
    -------
    float
        δ, a probability in [0, 1].
    """
    e0, n, e = _check_epsilon0(epsilon0), _check_n(n), _check_epsilon(epsilon)
    bound = one_of(bound, ("upper", "lower"), "bound")
    return _CloneDivergence(e0, n)(e)[1 if bound == "upper" else 0]


def shuffle_rr_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """δ at ``epsilon`` of ``n`` shuffled binary randomized responses with local ε₀, for the
    neighbouring datasets "the n − 1 others hold 0; the differing user holds 1 vs 0".

    Binary randomized response (Warner, JASA 1965) is an ε₀-LDP randomizer, so this δ is a
    **lower bound** on what any generic (mechanism-independent) analysis must allow; it is
    computed exactly (largest of the two directions), the binomial truncated at about 10
    standard deviations with the truncated mass dropped (so it stays a lower bound).

    Parameters
    ----------
    epsilon0 : float
        Local ε₀ in nats (> 0).
    n : int
        Number of shuffled reports (≥ 2).
    epsilon : float
        Central ε in nats (≥ 0).

    Returns
    -------
    float
        δ in [0, 1].
    """
    e0, n, e = _check_epsilon0(epsilon0), _check_n(n), _check_epsilon(epsilon)
    return _RRDivergence(e0, n)(e)[0]


def shuffle_rr_epsilon(epsilon0: float, n: int, delta: float, *,
                       tolerance: float = 1e-4) -> float:
    """The ε at ``delta`` of ``n`` shuffled binary randomized responses (see
    :func:`shuffle_rr_delta`): an ε that shuffled randomized response does **not** achieve
    at ``delta`` (bisection's lower end), hence a lower bound on any generic bound.

    Parameters
    ----------
    epsilon0 : float
        Local ε₀ in nats (> 0).
    n : int
        Number of shuffled reports (≥ 2).
    delta : float
        Central δ in (0, 1).
    tolerance : float
        Relative width of the bisection bracket on ε (as in :func:`shuffle_epsilon`).

    Returns
    -------
    float
        ε in nats, in [0, ε₀].
    """
    e0, n, d = _check_epsilon0(epsilon0), _check_n(n), _check_delta(delta)
    tol = _check_tolerance(tolerance)
    return min(e0, _bisect(_RRDivergence(e0, n), e0, d, "lower", tol))
