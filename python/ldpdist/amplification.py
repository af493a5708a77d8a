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
"Amplification by shuffling". :func:`clone_parameters_for` gives the same parameters in
closed form for the mechanisms of this library (any domain size, no channel), and the two
``*_for_channel`` functions use it whenever they are given a mechanism it covers.

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
    "clone_parameters_for",
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


# --------------------------------------------------------------------------------------
# channel-specific clones in closed form (any domain size, no channel)
# --------------------------------------------------------------------------------------

def _rr_clone(epsilon0: float) -> float:
    """2/(e^ε₀ + 1), written to stay finite for large ε₀."""
    return 2.0 * math.exp(-epsilon0) / (1.0 + math.exp(-epsilon0))


def _two_level(epsilon0: float, shared: bool) -> Tuple[float, float]:
    """Clone parameters of a two-level channel (Q(y|x) = w(y)·e^ε₀ when y ∈ C_x, w(y)
    otherwise): e^−ε₀ when some output is in C_x of at least two but not all inputs
    (``shared``), else 2/(e^ε₀ + 1)."""
    return epsilon0, (math.exp(-epsilon0) if shared else _rr_clone(epsilon0))


def _ratio_patterns(pairs) -> float:
    """min over the feasible patterns of min(r⁰, r¹, c) / ((r⁰ + r¹)/2): ``pairs`` lists the
    feasible (r⁰, r¹, c) with c the smallest factor another input can have (inf: none)."""
    return min(1.0, min(min(a, b, c) / (0.5 * (a + b)) for a, b, c in pairs))


def _unary(k: int, one: float, zero: float) -> Tuple[float, float]:
    """A unary (one-hot) product channel: bit x of the report is 1 w.p. ``one`` when the
    value is x and w.p. ``zero`` otherwise, independently. Q(y|x) = B(y)·r(y_x) with
    r(1) = one/zero, r(0) = (1 − one)/(1 − zero)."""
    if not (0.0 < zero < 1.0 and 0.0 < one < 1.0):
        raise ValueError(f"the unary channel is not LDP (bit probabilities {one!r}, "
                         f"{zero!r} must lie strictly between 0 and 1)")
    r1, r0 = one / zero, (1.0 - one) / (1.0 - zero)
    epsilon0 = abs(math.log(r1) - math.log(r0))
    c = min(r0, r1) if k >= 3 else math.inf
    pairs = [(a, b, c) for a in (r0, r1) for b in (r0, r1)]
    return epsilon0, _ratio_patterns(pairs)


def _dbitflip(k: int, d: int, p: float) -> Tuple[float, float]:
    """dBitFlipPM: d distinct buckets J (uniform), one bit per bucket, 1 w.p. p for the
    value's bucket and 1 − p for the others. Q(y|x) = w(y)·r_x with r_x = 1 when x ∉ J,
    e^s (bit 1) or e^−s (bit 0) when x ∈ J, s = ln(p/(1 − p))."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"dBitFlipPM needs 1/2 < p < 1 for an LDP channel, got {p!r}")
    s = math.log(p) - math.log1p(-p)
    up, down = math.exp(s), math.exp(-s)
    pairs = []
    for inside in range(0, min(d, 2) + 1):       # how many of x⁰, x¹ are in J
        free = d - inside                         # slots of J left for the other inputs
        if free > k - 2:
            continue
        c = down if free >= 1 else (1.0 if k - 2 > free else math.inf)
        values = {0: [(1.0, 1.0)],
                  1: [(v, 1.0) for v in (up, down)] + [(1.0, v) for v in (up, down)],
                  2: [(a, b) for a in (up, down) for b in (up, down)]}[inside]
        pairs += [(a, b, c) for a, b in values]
    epsilon0 = 2.0 * s if d >= 2 else s
    return epsilon0, _ratio_patterns(pairs)


def _hr_shared(mech: Any) -> bool:
    blocks_used_outputs, b = int(mech.construction[2]), int(mech.construction[1])
    used = blocks_used_outputs // b
    return (used >= 2 and b >= 4) or (used == 1 and mech.k >= 4)


#: Largest k · m sign-matrix entries :func:`clone_parameters_for` reads for compressive
#: privatization.
_SIGN_WORK = 2**26


def _compressive(mech: Any) -> Tuple[float, float]:
    """Compressive privatization with equal normalizers Z_x (``matrix="balanced"`` or
    ``"hadamard"``): two-level with C_x = {y : A[y, x] = +1}; e^−ε₀ when some row y of A
    is +1 on two *different* columns and −1 on some column, else 2/(e^ε₀ + 1)."""
    if mech._matrix == "rademacher":
        raise ValueError("CompressivePrivatization with matrix='rademacher' has no closed "
                         "form here (its normalizers Z_x differ between inputs, so the "
                         "channel is not two-level); use clone_parameters(mech) on a small "
                         "instance")
    k, m = mech.k, mech.m
    if k * m > _SIGN_WORK:
        raise ValueError(f"CompressivePrivatization: reading the m × k sign matrix "
                         f"({m} × {k} > 2^26 entries) is too large here")
    if mech._matrix == "hadamard":
        A = np.stack([mech.column(x) for x in range(k)], axis=1)
    else:
        A = mech.sign_matrix().to_dense()
    distinct = np.unique(A > 0, axis=1)            # the distinct columns (sets C_x)
    if distinct.shape[1] < 2:
        return 0.0, 1.0                            # every input has the same channel row
    high = distinct.sum(axis=1)                    # distinct columns with +1 in row y
    shared = bool(np.any((high >= 2) & (high < distinct.shape[1])))
    return _two_level(mech.realized_epsilon, shared)


def _closed_form_rules() -> dict:
    from . import longitudinal as lg
    from . import mechanisms as m

    def unary_core(mech):
        one, zero = mech._core.probabilities()
        return _unary(mech.k, float(one), float(zero))

    def unary_longitudinal(mech):
        pr = mech.probabilities()
        return _unary(mech.k, pr["p_s"], pr["q_s"])

    def memoized_rappor(mech):
        if mech._num_bits is not None:
            raise ValueError("MemoizedRAPPOR with a Bloom filter (num_bits set) has no "
                             "closed form here: its clone parameters depend on the hashed "
                             "bit sets; use clone_parameters(mech) on a small instance")
        pr = mech.probabilities()
        return _unary(mech.k, pr["q_star"], pr["p_star"])

    def asymmetric(mech):
        Q = mech.channel_matrix()
        e0 = max(abs(math.log(Q[0, y]) - math.log(Q[1, y])) for y in range(Q.shape[1]))
        return e0, min(1.0, min(2.0 * min(Q[0, y], Q[1, y]) / (Q[0, y] + Q[1, y])
                                for y in range(Q.shape[1])))

    return {
        m.RandomizedResponse: (
            lambda mech: _two_level(mech.realized_epsilon, False),
            "k-RR: two-level, every output is high for one input: 2/(e^ε₀ + 1)"),
        m.SubsetSelection: (
            lambda mech: _two_level(mech.realized_epsilon, 2 <= mech.d <= mech.k - 1),
            "subset selection: two-level, e^−ε₀ when 2 ≤ d < k, 2/(e^ε₀ + 1) when d = 1"),
        m.HadamardResponse: (
            lambda mech: _two_level(mech.realized_epsilon, _hr_shared(mech)),
            "HR: two-level, e^−ε₀ with two used blocks of b ≥ 4 outputs or one block and "
            "k ≥ 4, else 2/(e^ε₀ + 1)"),
        m.OneBitHadamardResponse: (
            lambda mech: _two_level(mech.realized_epsilon, mech.k >= 3),
            "one-bit HR: two-level, e^−ε₀ when k ≥ 3, 2/(e^ε₀ + 1) when k = 2"),
        m.OptimizedLocalHashing: (
            lambda mech: _two_level(mech.realized_epsilon, mech.t >= 2),
            "OLH: two-level, e^−ε₀ when t ≥ 2 digits (k > g), 2/(e^ε₀ + 1) when t = 1"),
        m.RAPPOR: (unary_core, "unary (product form): e^−ε₀ when k ≥ 3"),
        m.OptimizedUnaryEncoding: (unary_core, "unary (product form): e^−ε₀ when k ≥ 3"),
        m.TwoStageRAPPOR: (unary_core, "unary (product form, fair stage bit): e^−ε₀ when "
                                       "k ≥ 3"),
        m.AsymmetricBinaryResponse: (asymmetric, "k = 2: min over the two outputs"),
        m.CompressivePrivatization: (
            _compressive, "compressive privatization (balanced or Hadamard matrix): "
                          "two-level, e^−ε₀ when a row of A is +1 on two distinct columns and −1 "
                          "on one"),
        lg.LongitudinalGRR: (
            lambda mech: _two_level(mech.epsilon_1, False),
            "longitudinal GRR (one report: k-RR): 2/(e^ε₁ + 1)"),
        lg.LongitudinalSUE: (unary_longitudinal, "unary (one report): e^−ε₁ when k ≥ 3"),
        lg.LongitudinalOUE: (unary_longitudinal, "unary (one report): e^−ε₁ when k ≥ 3"),
        lg.LongitudinalOSUE: (unary_longitudinal, "unary (one report): e^−ε₁ when k ≥ 3"),
        lg.LongitudinalSOUE: (unary_longitudinal, "unary (one report): e^−ε₁ when k ≥ 3"),
        lg.MemoizedRAPPOR: (memoized_rappor, "unary (one report, one-hot): e^−ε₁ when "
                                             "k ≥ 3"),
        lg.DBitFlipPM: (
            lambda mech: _dbitflip(mech.k, mech.d, mech.probabilities()["p"]),
            "dBitFlipPM (product form over the d buckets)"),
    }


def _rule_for(mechanism: Any):
    for cls, rule in _closed_form_rules().items():
        if type(mechanism) is cls:
            return rule
    return None


def clone_parameters_for(mechanism: Any) -> list:
    """The clone parameters of a mechanism **in closed form**, at any domain size: the same
    ``[(ε₀, p)]`` as :func:`clone_parameters` on the mechanism's exact channel (to rounding),
    without writing the channel out.

    Every covered mechanism has the same clone parameters for all pairs of inputs, so the
    result has one pair: ``ε₀`` the mechanism's realized local ε (``realized_epsilon``;
    ``epsilon_1``, the ε of one report, for the memoized mechanisms of
    ``ldpdist.longitudinal``) and ``p`` one of ``e^−ε₀`` (no gain over the generic
    bound) and ``2/(e^ε₀ + 1)`` (as k-ary randomized response), or, for dBitFlipPM, its own
    value. The rules and their proofs are on the docs page "Amplification by shuffling"
    (section "Closed forms per mechanism"):

    * two-level channels (``Q(y|x) = w(y) e^ε₀`` when ``y ∈ C_x``, ``w(y)`` otherwise):
      ``p = e^−ε₀`` when some output is high for at least two but not all inputs, else
      ``2/(e^ε₀ + 1)`` — :class:`~ldpdist.RandomizedResponse` (never),
      :class:`~ldpdist.SubsetSelection` (``2 ≤ d < k``),
      :class:`~ldpdist.HadamardResponse` (two or more used blocks of ``b ≥ 4`` outputs,
      or one block and ``k ≥ 4``), :class:`~ldpdist.OneBitHadamardResponse` (``k ≥ 3``),
      :class:`~ldpdist.OptimizedLocalHashing` (``t ≥ 2`` digits, i.e. ``k > g``),
      ``LongitudinalGRR`` (never),
      :class:`~ldpdist.CompressivePrivatization` with a balanced or Hadamard matrix (some
      row of A is +1 on two different columns and −1 on one: read from the matrix, k · m ≤
      2^26);
    * unary product channels (:class:`~ldpdist.RAPPOR`,
      :class:`~ldpdist.OptimizedUnaryEncoding`, :class:`~ldpdist.TwoStageRAPPOR`, the
      longitudinal unary encodings, one-hot ``MemoizedRAPPOR``):
      ``p = e^−ε₀`` when ``k ≥ 3``, ``2/(e^ε₀ + 1)`` when ``k = 2``;
    * ``DBitFlipPM`` (per-bit log-ratio s):
      ``e^−2s`` when ``d ≥ 3``; ``2e^−s/(e^s + 1)`` when ``d = 2 < k``;
      ``2/(e^2s + 1)`` when ``d = k = 2``; ``e^−s`` when ``d = 1`` and ``k ≥ 3``;
      ``2/(e^s + 1)`` when ``d = 1`` and ``k = 2``;
    * :class:`~ldpdist.AsymmetricBinaryResponse` (k = 2): the minimum over its two outputs.

    Parameters
    ----------
    mechanism : mechanism
        An instance of one of the classes above.

    Returns
    -------
    list of (float, float)
        ``[(ε₀, p)]``, or ``[]`` when every input gives the same output distribution.

    Raises
    ------
    ValueError
        For a mechanism without a closed form here (compressive privatization with the
        i.i.d. matrix, the context-aware Hadamard responses, which are not ε₀-LDP across
        all pairs, public-coin hashing, MemoizedRAPPOR with a Bloom filter, or anything
        else): use :func:`clone_parameters` on its channel where that fits.
    """
    rule = _rule_for(mechanism)
    if rule is None:
        covered = ", ".join(sorted(cls.__name__ for cls in _closed_form_rules()))
        raise ValueError(f"no closed-form clone parameters for {type(mechanism).__name__}; "
                         f"they exist for {covered}. Use clone_parameters(channel) on the "
                         "exact channel (small domains) or the generic bound "
                         "shuffle_epsilon(epsilon0, ...)")
    epsilon0, clone = rule[0](mechanism)
    epsilon0, clone = float(epsilon0), float(clone)
    return [(epsilon0, clone)] if epsilon0 > 0.0 else []


def _parameters(channel: Any) -> list:
    """Closed-form clone parameters for a covered mechanism, else the exact channel's (also
    for the instances a covered class has no closed form for: a Bloom-filter
    MemoizedRAPPOR, an i.i.d. compressive matrix)."""
    if not isinstance(channel, np.ndarray) and _rule_for(channel) is not None:
        try:
            return clone_parameters_for(channel)
        except ValueError:
            pass
    return clone_parameters(channel)


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
    p = e^−ε₀ of a generic ε₀-LDP randomizer. Given a mechanism that
    :func:`clone_parameters_for` covers, its closed form is used (any k); otherwise the
    channel is written out (small domains only). The result is the largest over the pairs, never
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
    parameters = _parameters(channel)
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
    parameters = _parameters(channel)
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
