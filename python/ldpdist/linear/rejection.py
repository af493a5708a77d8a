"""The rejection-sampling protocol for linear queries, pure ε-LDP: Algorithms 3 and 4 of
R. Bassily, "Linear Queries Estimation with Local Differential Privacy", AISTATS 2019, with
the clipped acceptance probability and the exact calibration this project derived (the
rejection-sampling errata on the docs page Mechanisms › Linear queries,
docs/mechanisms/linear-queries.md).

Notation: a user holding v draws ``y ~ N(0, σ² I_d)``; ``t = (⟨a_v, y⟩ − ‖a_v‖²/2)/σ²`` is the
log ratio ``ln f_{a_v}(y)/f_0(y)`` (the paper's η is ``½ e^t``); ``u = ‖a_v‖/σ``. Along the unit
vector ``a_v/‖a_v‖``, ``y = σZ`` with Z standard normal and ``t = uZ − u²/2``; orthogonal
directions do not enter. Every closed form below is a one-dimensional normal integral in Z.

The *band* b is the half-width of the clipping and κ the acceptance *scale*: y is accepted
with probability ``κ exp(clip(t, −b, b))``, a probability as long as ``κ ≤ e^{−b}``. The paper
takes κ = ½ (its η; then ``b < ln 2``) and the Good set ``|t| ≤ ε/4`` (b = ε/4); the
calibrated protocol takes the largest scale, κ = e^{−b} (``α = exp(clip(t, −b, b) − b)``), and
the widest b whose exact privacy loss is ε (class docstring). Good set ``|t| ≤ b`` ⟺
``z_lo ≤ Z ≤ z_hi`` with ``z_lo = u/2 − b/u``, ``z_hi = u/2 + b/u``. Its tail (mass outside
it) is the same under N(0, σ²I) and under N(a_v, σ²I) (the law of t under the latter is the
mirror image, ``uZ + u²/2``):

    tail(u) = Q(b/u + u/2) + Q(b/u − u/2),   Q = 1 − Φ,

increasing in u on (0, √(2b)], so the worst column is the longest (‖a_v‖ = r).

``P(accept | v) = κ (1 + ξ(u))`` with the *excess* ``ξ = E_0[e^{clip(t)}] − E_0[e^{t}]``
(E_0[e^t] = 1): a difference of the two clipped tails, ``|ξ| ≤ Q(b/u − u/2) ≤ tail(u)``, in
practice far smaller (the two tails nearly cancel).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .. import _core, memory
from .._validation import integer, real, seed_key
from .calibration import MIN_EPSILON, check_sigma
from .calibration import normal_cdf as _Phi
from .calibration import normal_pdf as _phi
from ..reports import Reports
from ._queries import QueryMatrix, QueryProtocol

__all__ = [
    "RejectionSamplingLinearQueries",
    "good_set_tail",
    "rejection_sigma",
    "paper_max_epsilon",
    "acceptance_probability",
    "accepted_mean_factor",
    "MAX_EPSILON",
    "PAPER_MAX_EPSILON",
    "ACCEPTANCE_RULES",
]

PAPER_FAITHFUL_WARNING = (
    "RejectionSamplingLinearQueries(paper_faithful=True) runs Algorithm 3 as printed: it "
    "accepts only inside each input's own Good set, so an output can have probability 0 under "
    "one input and positive probability under another: it is NOT epsilon-LDP "
    "(realized_epsilon = inf), and its accepted reports are biased (about 0.78 a at n = 10^4, "
    "epsilon = 1). Use it only to reproduce the paper."
)

_LN2 = math.log(2.0)

#: The acceptance rules: ``"maximal"`` (scale κ = e^{−b}, the default) and ``"half"``
#: (κ = ½, the paper's η).
ACCEPTANCE_RULES = ("maximal", "half")

#: The widest band of the default rule (κ = e^{−b}): the MSE of the mean goes as
#: ``σ²/P(accept) ∝ e^{b}/b²`` to leading order (σ ∝ 1/b, P(accept) ≈ e^{−b}), smallest at
#: b = 2; a wider band would spend more ε and lose accuracy. (The exact minimum, with the
#: exact σ, lies slightly below 2: within 0.3% of the MSE at b = 2 for n ≥ 100.)
_BAND_MAX = 2.0

#: The widest band of the rule κ = ½: the largest double below ln 2, so that the acceptance
#: probability ``½ e^b`` stays ≤ 1 (the kernel refuses more).
_HALF_BAND_MAX = math.nextafter(_LN2, 0.0)

#: The largest ε accepted: twice the widest band (independent columns spend 2b). A budget
#: above it would buy only a worse estimate.
MAX_EPSILON = 2 * _BAND_MAX


def _q(x: float) -> float:
    return _Phi(-x)


def good_set_tail(u: float, band: float) -> float:
    """Probability that ``|t| > band`` for a column of norm ``u·σ`` (module docstring; the
    paper's Good set is ``band = ε/4``)."""
    if u == 0:
        return 0.0
    half = band / u
    return _q(half + u / 2) + _q(half - u / 2)


def paper_max_epsilon() -> float:
    """The largest ε of the paper's own privacy argument (≈ 2.5319; the paper assumes
    ε ≤ 1): where the worst-case ⊥ ratio of its band ε/4 and scale ½,
    ``(1 − e^{−ε/4}/2)/(1 − e^{ε/4}/2)``, reaches e^ε. The range of ``paper_faithful=True``.

    The calibrated protocol does not rely on that worst case (it computes the exact ⊥
    ratio): its range is :data:`MAX_EPSILON`."""
    def overshoot(e: float) -> float:
        return (math.log(2 - math.exp(-e / 4)) - math.log(2 - math.exp(e / 4))) - e

    lo, hi = 1.0, 4 * math.log(2) * (1 - 1e-12)  # overshoot(lo) < 0 < overshoot(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if overshoot(mid) <= 0 else (lo, mid)
    return lo


#: The range of ``paper_faithful=True`` (:func:`paper_max_epsilon`).
PAPER_MAX_EPSILON = paper_max_epsilon()


def rejection_sigma(band: float, r: float, n_users: int) -> float:
    """The smallest σ with ``good_set_tail(r/σ, band) ≤ 2/n²``: the accepted reports are
    ``N(a_v, σ²I)`` up to that mass. Bisection on u = r/σ to the last bits; the returned σ
    meets the tail target as computed.

    To leading order ``σ ≈ r (z + √(z² + 2b))/(2b)`` with ``z = Φ⁻¹(1 − 1/n²)``: σ is about
    inversely proportional to the band. The calibrated band b = ε/2 gives
    ``σ² ≈ 12–15 r² ln n/ε²`` for n from 10² to 10⁸ (and ε up to 4);
    the paper's Good set b = ε/4 gives four times that (≈ 48–59), against the paper's
    4 r² ln n/ε², which leaves most of the Gaussian outside the Good set."""
    target = 2.0 / (n_users * n_users)
    lo, hi = 0.0, math.sqrt(2 * band)  # tail(0) = 0 ≤ target; tail increasing up to hi
    if good_set_tail(hi, band) <= target:
        return r / hi
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if good_set_tail(mid, band) <= target else (lo, mid)
    return r / lo


# Elementwise forms of the closed forms above, for one value per distinct column norm: the
# same operations in the same order, with the scalar ``math`` functions applied to each
# element, so that each element has the bits of the scalar function (the calibrated band,
# found by bisection on these numbers, must not depend on which form computed them).
_erfc_each = np.frompyfunc(math.erfc, 1, 1)
_exp_each = np.frompyfunc(math.exp, 1, 1)
_SQRT2 = math.sqrt(2.0)


def _Phi_each(x: np.ndarray) -> np.ndarray:
    return 0.5 * _erfc_each(-x / _SQRT2).astype(np.float64)


def _excess_each(u: np.ndarray, band: float) -> np.ndarray:
    """:func:`_excess` of each element of ``u`` (0 where u = 0)."""
    safe = np.where(u == 0, 1.0, u)
    z_lo, z_hi = safe / 2 - band / safe, safe / 2 + band / safe
    out = ((math.exp(-band) * _Phi_each(z_lo) - _Phi_each(z_lo - safe))
           + (math.exp(band) * _Phi_each(-z_hi) - _Phi_each(-(z_hi - safe))))
    return np.where(u == 0, 0.0, out)


def _acceptance_each(u: np.ndarray, band: float, scale: float,
                     paper_faithful: bool) -> np.ndarray:
    """:func:`acceptance_probability` of each element of ``u``."""
    if paper_faithful:
        safe = np.where(u == 0, 1.0, u)
        z_lo, z_hi = safe / 2 - band / safe, safe / 2 + band / safe
        out = scale * (_Phi_each(z_hi - safe) - _Phi_each(z_lo - safe))
        return np.where(u == 0, scale, out)
    return scale * (1.0 + _excess_each(u, band))


def _rejection_each(u: np.ndarray, band: float, log_scale: float) -> np.ndarray:
    """:func:`_rejection_probability` of each element of ``u``."""
    return -math.expm1(log_scale) - math.exp(log_scale) * _excess_each(u, band)


def _bounds(u: float, band: float):
    return u / 2 - band / u, u / 2 + band / u


def _excess(u: float, band: float) -> float:
    """``ξ = E_0[e^{clip(t, −b, b)}] − 1`` for a column of norm ``u·σ``, as a sum of tail terms
    (accurate where ``1 + ξ`` computed directly would cancel):
    ``e^{−b} Φ(z_lo) − Φ(z_lo − u) + e^{b} Q(z_hi) − Q(z_hi − u)``."""
    if u == 0:
        return 0.0  # t ≡ 0
    z_lo, z_hi = _bounds(u, band)
    return ((math.exp(-band) * _Phi(z_lo) - _Phi(z_lo - u))
            + (math.exp(band) * _q(z_hi) - _q(z_hi - u)))


def _rejection_probability(u: float, band: float, log_scale: float) -> float:
    """P(⊥ | v) of the clipped rule with scale ``κ = e^{log_scale}``:
    ``1 − κ(1 + ξ) = −expm1(ln κ) − κ ξ`` (no cancellation when κ is close to 1)."""
    return -math.expm1(log_scale) - math.exp(log_scale) * _excess(u, band)


def acceptance_probability(u: float, band: float, *, scale: Optional[float] = None,
                           paper_faithful: bool = False) -> float:
    """Exact P(accept) for a column of norm ``u·σ``, clipping band b and acceptance scale κ
    (``scale``; default e^{−b}, the calibrated protocol's, or ½ with ``paper_faithful``):

    clipped: ``κ [e^{−b} Φ(z_lo) + Φ(z_hi − u) − Φ(z_lo − u) + e^{b} Q(z_hi)] = κ (1 + ξ)``;
    paper (``band = ε/4``, κ = ½): ``κ [Φ(z_hi − u) − Φ(z_lo − u)]``
    (``e^{uz − u²/2} φ(z) = φ(z − u)``)."""
    if scale is None:
        scale = 0.5 if paper_faithful else math.exp(-band)
    if paper_faithful:
        if u == 0:
            return scale  # t ≡ 0: inside the Good set
        z_lo, z_hi = _bounds(u, band)
        return scale * (_Phi(z_hi - u) - _Phi(z_lo - u))
    return scale * (1.0 + _excess(u, band))


def accepted_mean_factor(u: float, band: float, *, paper_faithful: bool = False) -> float:
    """c such that the exact mean of an accepted report is ``c · a_v`` (for ``‖a_v‖ = uσ`` and
    clipping band b; the acceptance scale cancels): ``c = E[Z α(Z)] / (u E[α(Z)])``, from
    ``∫ z φ(z − u) = u Φ(z − u) − φ(z − u)`` and ``∫ z φ(z) = −φ(z)``. 1 means unbiased; the
    printed algorithm gives ≈ 0.78 at n = 10⁴, ε = 1, ‖a_v‖ = r."""
    if u == 0:
        return 1.0
    z_lo, z_hi = _bounds(u, band)
    inside = _Phi(z_hi - u) - _Phi(z_lo - u)
    first_moment = u * inside + _phi(z_lo - u) - _phi(z_hi - u)
    if paper_faithful:
        return first_moment / (u * inside)
    moment = (-math.exp(-band) * _phi(z_lo) + first_moment + math.exp(band) * _phi(z_hi))
    return moment / (u * (1.0 + _excess(u, band)))


def _output_loss_rank_one(beta: np.ndarray, sigma: float, band: float) -> float:
    """sup_y max_{v,v'} clip(t_v) − clip(t_v') when every column is ``β_v·e`` (one unit
    direction e), exactly, in O(J log J).

    With x = ⟨e, y⟩, ``t_v(x) = (β_v x − β_v²/2)/σ² = (x² − (x − β_v)²)/(2σ²)``: the largest
    t_v is that of the β nearest x, the smallest that of the β farthest from x (β_min or
    β_max), and clip is monotone, so ``f(x) = clip(max_v t_v) − clip(min_v t_v)`` is piecewise
    linear with its kinks among: the midpoints of consecutive distinct β (nearest switches),
    (β_min + β_max)/2 (farthest switches) and the points where some t_v = ±b (clip bites).
    Its sup is at one of those kinks or in the limits x → ±∞ (where it is
    ``b (sign β_max − sign β_min)``)."""
    s = np.unique(beta)                      # sorted distinct coordinates
    lo, hi = float(s[0]), float(s[-1])
    best = band * (np.sign(hi) - np.sign(lo))
    if s.size == 1:
        return float(best)                   # all columns equal: no loss
    var = sigma * sigma
    nonzero = s[s != 0]
    points = np.concatenate([(band * var + nonzero**2 / 2) / nonzero,
                             (-band * var + nonzero**2 / 2) / nonzero,
                             (s[1:] + s[:-1]) / 2, [(lo + hi) / 2]])
    index = np.clip(np.searchsorted(s, points), 1, s.size - 1)

    def t(b: Any, x: np.ndarray) -> np.ndarray:
        return np.clip((b * x - b * b / 2) / var, -band, band)

    nearest = np.maximum(t(s[index - 1], points), t(s[index], points))
    farthest = np.minimum(t(lo, points), t(hi, points))
    return float(min(max(best, float((nearest - farthest).max())), 2 * band))


def _two_product(x: np.ndarray, y: Any) -> Tuple[np.ndarray, np.ndarray]:
    """``(p, e)`` with ``p + e = x·y`` exactly (Dekker's product; exact when no entry
    overflows or underflows: the caller keeps |x|, |y| within 2^±400)."""
    p = x * y
    split = 134217729.0  # 2^27 + 1

    def halves(a: Any) -> Tuple[Any, Any]:
        c = split * a
        high = c - (c - a)
        return high, a - high

    xh, xl = halves(x)
    yh, yl = halves(y)
    return p, ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def _line_coordinates(matrix: np.ndarray) -> Optional[np.ndarray]:
    """β (shape (J,)) with every column ``a_v = β_v e`` for one unit vector e, when the columns
    lie on one line through 0 EXACTLY (in real arithmetic on the float64 entries; checked with
    exact products), else None. Only then can the outputs' privacy loss be below 2b: two
    columns that are independent by however little give 2b (an output far along the
    difference), so near-parallel columns count as independent."""
    norms = np.sqrt(np.einsum("kv,kv->v", matrix, matrix))
    k = int(np.argmax(norms))
    reference = matrix[:, k]
    if matrix.shape[0] > 1:
        magnitudes = np.abs(matrix[matrix != 0])
        if magnitudes.min() < 2.0**-400 or magnitudes.max() > 2.0**400:
            return None  # outside the range where the product test is exact: be conservative
        i0 = int(np.argmax(np.abs(reference)))
        # a_v ∥ a_k ⟺ a_v[i]·a_k[i0] = a_v[i0]·a_k[i] for every i (a_k[i0] ≠ 0); by blocks
        # of columns (small temporaries; independent columns stop it at the first block)
        for start in range(0, matrix.shape[1], 4096):
            block = matrix[:, start:start + 4096]
            p1, e1 = _two_product(block, reference[i0])
            p2, e2 = _two_product(block[i0][None, :], reference[:, None])
            if not (np.array_equal(p1, p2) and np.array_equal(e1, e2)):
                return None
    return (reference / norms[k]) @ matrix


def _largest_band(feasible: Callable[[float], bool], lo: float, hi: float) -> float:
    """The largest band in (lo, hi] found feasible by bisection to the last bits, ``lo`` being
    feasible (or 0); ``hi`` itself when it is feasible. The invariant keeps ``lo`` feasible,
    so the result is feasible whatever the shape of the function."""
    if feasible(hi):
        return hi
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    if lo <= 0:
        raise RuntimeError("no clipping band meets the privacy budget")  # pragma: no cover
    return lo


class RejectionSamplingLinearQueries(QueryProtocol):
    """Pure ε-LDP answers to d linear queries by rejection sampling (Algorithms 3 and 4 of
    Bassily, AISTATS 2019, corrected and calibrated as on the docs page Mechanisms › Linear
    queries).

    A user holding v draws ``y ~ N(0, σ² I_d)`` and sends y with probability
    ``α_v(y) = κ exp(clip(t, −b, b))``, else ⊥ (t the log density ratio
    ``ln f_{a_v}(y)/f_0(y)``, b the clipping :attr:`band`, κ the :attr:`acceptance_scale`).
    By default κ = e^{−b}, the largest scale that keeps α ≤ 1:
    ``α_v(y) = exp(clip(t, −b, b) − b) ∈ [e^{−2b}, 1]``. The paper's scale is ½ (its
    ``η = ½ f_{a_v}/f_0``; ``acceptance="half"``). The server averages the accepted reports
    (n̂ of them).

    Privacy (pure ε-LDP), exactly:

    1. the released y has density ``f_0(y) α_v(y)``, so for any v, v', y the densities differ
       by the factor ``α_v(y)/α_v'(y) ≤ e^{2b}`` (κ cancels), attained as soon as two columns
       are linearly independent (less when all columns lie on one line: computed exactly);
    2. ``P(⊥|v) = 1 − κ(1 + ξ_v)`` is a closed form in ‖a_v‖/σ (:func:`acceptance_probability`;
       ξ_v is the excess of the module docstring, ``|ξ_v| ≤`` the Good-set tail ≤ 2/n²), so
       the ⊥ ratio is computed exactly; with κ = e^{−b} it is at most
       ``ln((e^b − 1 + 2/n²)/(e^b − 1 − 2/n²))`` (when ``e^b − 1 > 2/n²``), in practice far
       below 2b (under 1% of it from n = 10 users on);
    3. an event is a set of outputs, perhaps with ⊥: its ratio is at most the larger of the
       two.

    :attr:`realized_epsilon` is that maximum. By default the band is the widest whose
    realized ε is the request: b = ε/2 when two columns are independent (the ⊥ loss is far
    below ε), found by bisection when the columns lie on one line (the loss is then below 2b:
    b = ε for one counting query, columns 0 and 1) or when, for very few users, the ⊥ ratio
    binds. The band never exceeds 2: the mean's MSE goes as ``σ²/P(accept) ∝ e^b/b²`` (to
    leading order), smallest at b = 2, so a wider band would spend more ε for a worse
    estimate. Hence ε ≤ :data:`MAX_EPSILON` = 4, where independent columns reach b = 2 and
    the realized ε is the request on the whole range; columns on one line whose band would
    need to pass 2 (a counting query above ε = 2) realize less. With ``acceptance="half"``
    the band stays below ln 2 (``½ e^b ≤ 1``) and the realized ε below 2 ln 2.

    Gain over the paper's band, ``b = ε/4`` with κ = ½ (whose worst-case ⊥ bound,
    ``(1 − e^{−b}/2)/(1 − e^{b}/2) ≤ e^ε``, leaves the outputs only ε/2): doubling the band
    divides σ² by ``4 (1 − 3ε²/(64 z²))``, ``z = Φ⁻¹(1 − 1/n²)`` (to second order in b/z),
    about 4, and the scale e^{−ε/2} instead of ½ multiplies the accepted reports by
    ``2 e^{−ε/2}`` (1.21 at ε = 1, 1 at ε = 2 ln 2, 0.74 at ε = 2): the mean's MSE falls by
    about ``8 e^{−ε/2}`` (4.85 at ε = 1, 2.94 at ε = 2; the paper's band needs ε < 4 ln 2).

    σ: the smallest σ whose Good-set tail (``|t| > b``, module docstring) at the longest
    column is ≤ 2/n² (:func:`rejection_sigma`), so that accepted reports are
    ``N(a_v, σ²I)`` restricted to the Good set up to that mass and their mean is unbiased to
    within it (:func:`accepted_mean_factor` gives the exact bias; it does not depend on κ).

    Parameters
    ----------
    queries : array_like, shape (d, J)
        The query matrix A (finite; d ≥ 1, J ≥ 1; not all zero).
    epsilon : float
        0 < ε ≤ 4 (:data:`MAX_EPSILON`); ε ≤ ``rejection.PAPER_MAX_EPSILON`` ≈ 2.53 with
        ``paper_faithful=True``.
    n_users : int
        The number of users n the protocol is calibrated for (≥ 2): σ depends on it.
    r : float, optional
        The column-norm bound (default: the largest column norm); σ is calibrated to it.
    band : float, optional
        The clipping half-width b (default: calibrated as above; at most 2, below ln 2 with
        ``acceptance="half"``). A narrower band is private too, at a larger σ (``ValueError``
        when the given band's realized ε exceeds ε); ``band=epsilon / 4`` clips at the paper's
        Good set (realized ε = ε/2 for independent columns, σ² about 4× the calibrated one).
    acceptance : {"maximal", "half"}, optional
        The acceptance scale κ: ``"maximal"`` (default), κ = e^{−b}; ``"half"``, κ = ½, the
        paper's (with ``band=epsilon / 4``: the paper's protocol, clipped). The printed
        algorithm (``paper_faithful=True``) uses ½.
    paper_faithful : bool, default False
        **Not private.** Algorithm 3 as printed: band ε/4, scale ½, σ² = 4 r² ln n/ε² and
        acceptance only inside the user's own Good set (probability 0 outside), which leaks
        through the output and biases the accepted mean (≈ 0.78·a at n = 10⁴, ε = 1). Emits a
        ``UserWarning``; :attr:`realized_epsilon` is then ``inf``; ``band`` must be left out
        and ``acceptance`` left out or ``"half"``.

    Notes
    -----
    **Reports.**
    :meth:`privatize` returns one row per user, float64 (n × d): the accepted y, or a row of
    NaN for ⊥ (each user's single message, "y or ⊥"). :meth:`accepted` gives the mask.
    """

    def __init__(self, queries: Any, epsilon: float, n_users: int, *,
                 r: Optional[float] = None, band: Optional[float] = None,
                 acceptance: Optional[str] = None, paper_faithful: bool = False):
        self._queries = QueryMatrix.of(queries, r)
        epsilon = real(epsilon, "epsilon")
        if not isinstance(paper_faithful, (bool, np.bool_)):
            raise TypeError(f"paper_faithful must be a bool, got {paper_faithful!r}")
        self._paper_faithful = bool(paper_faithful)
        if acceptance is None:
            acceptance = "half" if self._paper_faithful else "maximal"
        if acceptance not in ACCEPTANCE_RULES:
            raise ValueError(f"acceptance must be one of {ACCEPTANCE_RULES}, got "
                             f"{acceptance!r}")
        if self._paper_faithful and acceptance != "half":
            raise ValueError("paper_faithful=True accepts with the paper's scale 1/2: leave "
                             "acceptance out")
        self._acceptance_rule = acceptance
        top = PAPER_MAX_EPSILON if self._paper_faithful else MAX_EPSILON
        if not 0 < epsilon <= top:
            reason = ("the paper's privacy argument holds up to there" if self._paper_faithful
                      else "above it a wider clipping band only loses accuracy")
            raise ValueError(f"epsilon must lie in [{MIN_EPSILON!r}, {top:.6g}], got "
                             f"{epsilon!r} ({reason})")
        if epsilon < MIN_EPSILON:
            raise ValueError(f"epsilon must lie in [{MIN_EPSILON!r}, {top:.6g}], got "
                             f"{epsilon!r}: too small (sigma would be more than 10^10 times "
                             "r, and the distribution mechanisms cannot represent it)")
        self._epsilon = epsilon
        self._n_users = integer(n_users, "n_users", minimum=2)
        if self._queries.r == 0:
            raise ValueError("every column of queries is zero (r = 0): the answers are known "
                             "without asking anyone")
        r = self._queries.r
        norms = np.sqrt(np.einsum("kv,kv->v", self._queries.matrix, self._queries.matrix))
        # P(accept | v) depends on ‖a_v‖ only: one closed form per distinct norm.
        self._norms, inverse = np.unique(norms, return_inverse=True)
        self._inverse = inverse.reshape(-1)
        self._line = None if self._paper_faithful else _line_coordinates(self._queries.matrix)
        if self._paper_faithful:
            if band is not None:
                raise ValueError("band must be left out with paper_faithful=True (the paper's "
                                 "Good set is epsilon/4)")
            warnings.warn(PAPER_FAITHFUL_WARNING, UserWarning, stacklevel=2)
            self._band = epsilon / 4
            delta = 2.0 / self._n_users**2
            self._sigma = r * math.sqrt(2 * math.log(2 / delta)) / epsilon
        else:
            if band is None:
                self._band = self._calibrated_band()
            else:
                band = real(band, "band")
                if not 0 < band <= self._band_max:
                    why = ("the acceptance probability e^band/2 must stay below 1"
                           if acceptance == "half" else
                           "a wider band only loses accuracy")
                    raise ValueError(f"band must lie in (0, {self._band_max:.6g}] with "
                                     f"acceptance={acceptance!r}, got {band!r}: {why}")
                loss = self._loss(band)
                if loss > epsilon:
                    raise ValueError(f"band {band!r} realizes epsilon = {loss!r} > {epsilon!r} "
                                     "for these queries: leave band out to calibrate it")
                self._band = band
            self._sigma = rejection_sigma(self._band, r, self._n_users)
        check_sigma(self._sigma, f"epsilon = {epsilon!r}, n_users = {self._n_users}, r = {r!r}")
        self._log_scale = self._log_scale_of(self._band)
        self._acceptance = self._per_norm_acceptance(self._sigma, self._band)[self._inverse]
        self._rejected = self._per_norm_rejection(self._sigma, self._band)

    # -- calibration ------------------------------------------------------------------------
    @property
    def _band_max(self) -> float:
        return _HALF_BAND_MAX if self._acceptance_rule == "half" else _BAND_MAX

    def _log_scale_of(self, band: float) -> float:
        """ln κ for this band: −b (``"maximal"``) or −ln 2 (``"half"``, the paper's)."""
        return -_LN2 if self._acceptance_rule == "half" else -band

    def _per_norm_acceptance(self, sigma: float, band: float) -> np.ndarray:
        scale = math.exp(self._log_scale_of(band))
        return _acceptance_each(self._norms / sigma, band, scale, self._paper_faithful)

    def _per_norm_rejection(self, sigma: float, band: float) -> np.ndarray:
        """P(⊥ | v) for each distinct norm, without cancellation (clipped rule)."""
        if self._paper_faithful:
            return 1 - self._per_norm_acceptance(sigma, band)
        log_scale = self._log_scale_of(band)
        return _rejection_each(self._norms / sigma, band, log_scale)

    def _output_loss(self, band: float, sigma: float) -> float:
        if self._line is None:
            return 2 * band
        return _output_loss_rank_one(self._line, sigma, band)

    def _bottom_loss(self, band: float, sigma: float) -> float:
        rejected = self._per_norm_rejection(sigma, band)
        return math.log(rejected.max()) - math.log(rejected.min())

    def _loss(self, band: float) -> float:
        """The exact realized ε of the protocol with this band (and its σ)."""
        sigma = rejection_sigma(band, self._queries.r, self._n_users)
        return max(self._output_loss(band, sigma), self._bottom_loss(band, sigma))

    def _calibrated_band(self) -> float:
        """The widest band (up to the rule's widest) whose exact realized ε is at most ε
        (class docstring)."""
        epsilon, r, n, widest = self._epsilon, self._queries.r, self._n_users, self._band_max
        if self._line is None:           # two independent columns: the outputs spend 2b
            band = min(epsilon / 2, widest)
        else:                            # one line: the outputs' loss, bisected
            band = _largest_band(
                lambda b: self._output_loss(b, rejection_sigma(b, r, n)) <= epsilon,
                0.0, widest)
        if self._loss(band) > epsilon:   # the ⊥ ratio binds (a handful of users)
            band = _largest_band(lambda b: self._loss(b) <= epsilon, 0.0, band)
        return band

    # -- description ------------------------------------------------------------------------
    @property
    def n_users(self) -> int:
        return self._n_users

    @property
    def band(self) -> float:
        """The clipping half-width b: ``α_v(y) = κ exp(clip(t, −b, b))``; the Good set is
        ``|t| ≤ b`` (ε/4 for ``paper_faithful=True``)."""
        return self._band

    @property
    def acceptance_rule(self) -> str:
        """``"maximal"`` (κ = e^{−b}) or ``"half"`` (κ = ½, the paper's)."""
        return self._acceptance_rule

    @property
    def acceptance_scale(self) -> float:
        """κ, the factor of the acceptance probability ``κ exp(clip(t, −b, b))``."""
        return math.exp(self._log_scale)

    @property
    def acceptance_probabilities(self) -> np.ndarray:
        """Exact P(accept | v) for each value v, shape (J,) (depends only on ‖a_v‖)."""
        return self._acceptance.copy()

    @property
    def good_set_tail(self) -> float:
        """Mass outside the Good set at the longest allowed column (‖a‖ = r)."""
        return good_set_tail(self.r / self._sigma, self._band)

    @property
    def realized_epsilon(self) -> float:
        """The exact max over v, v' and outputs of the log probability ratio (class doc):
        the larger of the outputs' loss and the ⊥ ratio's."""
        if self._paper_faithful:
            return 0.0 if self._queries.all_equal else math.inf
        rejected = self._rejected
        bottom = math.log(rejected.max()) - math.log(rejected.min())
        return max(self._output_loss(self._band, self._sigma), bottom)

    def __repr__(self) -> str:
        flag = ", paper_faithful=True" if self._paper_faithful else ""
        rule = ", acceptance='half'" if self._acceptance_rule == "half" and not flag else ""
        return (f"RejectionSamplingLinearQueries(d={self.d}, J={self.domain_size}, "
                f"epsilon={self._epsilon!r}, n_users={self._n_users}{rule}{flag}; "
                f"band={self._band:.6g}, sigma={self._sigma:.6g})")

    # -- client -----------------------------------------------------------------------------
    def privatize(self, values: Any, *, seed: Optional[int] = None) -> Reports:
        """Each user's message: y (accepted) or a row of NaN (⊥).

        Parameters
        ----------
        values : array_like of int, shape (n,)
            User values in [0, J).
        seed : int, optional
            None draws from the OS; an integer gives the same reports on any number of
            threads.

        Returns
        -------
        Reports, shape (n, d), float64
            A numpy array tagged with this protocol's :attr:`fingerprint` (see
            :class:`~ldpdist.Reports`), which :meth:`estimate` checks.
        """
        values = self._queries.values(values)
        key = seed_key(seed)
        memory.check("privatize", [("the reports", 8 * values.size * self.d)])
        return self._reports(_core.linear_rejection_privatize(
            self._queries.columns, values, self._sigma, self._band, self._log_scale,
            self._paper_faithful, key))

    def acceptance(self, outputs: Any) -> np.ndarray:
        """α_v(y): the probability that a user holding v releases y, for each output row y.

        Parameters
        ----------
        outputs : ndarray, shape (m, d), float64

        Returns
        -------
        ndarray, shape (m, J): computed by the same Rust code as :meth:`privatize` uses.
        """
        outputs = self._queries.reports(outputs, "outputs")
        memory.check("acceptance", [("the acceptance matrix",
                                     8 * outputs.shape[0] * self.domain_size)])
        return _core.linear_acceptance(self._queries.columns, outputs, self._sigma,
                                       self._band, self._log_scale, self._paper_faithful)

    @staticmethod
    def accepted(reports: Any) -> np.ndarray:
        """Boolean mask (n,) of the accepted reports (rows that are not ⊥)."""
        return ~np.isnan(np.asarray(reports)[:, 0])

    # -- server -----------------------------------------------------------------------------
    def estimate(self, reports: Reports, *, projection: str = "none",
                 tol: float = 1e-12) -> np.ndarray:
        """Mean of the accepted reports, shape (d,) (Algorithm 4, step 5), optionally
        projected (step 7; ``projection`` and ``tol`` as in
        :meth:`GaussianLinearQueries.estimate`).

        ⊥ rows (all NaN) are left out; a row with some NaN or any infinite entry is refused.
        ``ValueError`` when no report was accepted (n̂ = 0). ``reports`` are
        :meth:`privatize` output or declared with :meth:`as_reports`; reports of another
        protocol spec raise :class:`~ldpdist.SpecMismatchError`, a plain array
        ``TypeError`` (as for :meth:`GaussianLinearQueries.estimate`)."""
        return self._queries.project(self.estimate_with_count(reports)[0], projection, tol)

    def estimate_with_count(self, reports: Reports) -> Tuple[np.ndarray, int]:
        """``(mean, n̂)``: :meth:`estimate` and the number of accepted reports it averages."""
        reports = self._checked_reports(reports, "estimate_with_count")
        mean, count = _core.linear_mean(reports, True)
        return mean, int(count)

    def bound(self, n: int, *, projected: bool = False) -> float:
        """Theorem 3.4's bound on E‖ŷ − A p̂‖₂ at n users, for the σ actually used.

        The accepted reports are N(a_v, σ² I) conditioned on the Good set (a tail of
        :attr:`good_set_tail` ≤ 2/n_users² is cut), and a user is accepted with probability at
        least ``a = min(acceptance_probabilities)`` (≈ κ: e^{−b}, or ½ with
        ``acceptance="half"``), so with n̂ ≈ a·n accepted reports
        the raw bound is ``σ √(d/(a n))`` (the paper's (280 …)^{1/4} / √(10 d ln n …) form
        assumes its own σ² = 4 r² ln n/ε², which is not private: see the class notes).
        Projected: the minimum of that and ``2 (σ r √(2 ln(2J)/(a n)))^{1/2}``, as for
        :meth:`GaussianLinearQueries.bound`.
        """
        n = integer(n, "n", minimum=1)
        effective = n * float(np.min(self.acceptance_probabilities))
        raw = self._sigma * math.sqrt(self.d / effective)
        if not projected:
            return raw
        spread = self._sigma * self.r * math.sqrt(2 * math.log(2 * self.domain_size) / effective)
        return min(raw, 2 * math.sqrt(spread))

    # -- spec -------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """A JSON-safe spec (parameters, query matrix, its SHA-256 fingerprint, band,
        acceptance rule, σ)."""
        return {
            "protocol": "RejectionSamplingLinearQueries",
            "queries": self._queries.matrix.tolist(),
            "queries_sha256": self._queries.fingerprint(),
            "epsilon": self._epsilon,
            "n_users": self._n_users,
            "r": self._queries.r,
            "paper_faithful": self._paper_faithful,
            "band": self._band,
            "acceptance": self._acceptance_rule,
            "sigma": self._sigma,
        }

    @classmethod
    def from_dict(cls, spec: Dict[str, Any]) -> "RejectionSamplingLinearQueries":
        """Rebuild from :meth:`to_dict`; the fingerprint and σ are checked against the
        rebuilt protocol (``ValueError`` on a mismatch)."""
        return cls._rebuilt(spec, lambda queries: cls(
            queries, spec["epsilon"], spec["n_users"], r=spec["r"],
            band=None if spec["paper_faithful"] else spec.get("band"),
            # a spec without the key predates the option: its protocol accepted with 1/2
            acceptance=spec.get("acceptance", "half"),
            paper_faithful=spec["paper_faithful"]),
            fields=("queries", "queries_sha256", "epsilon", "n_users", "r", "paper_faithful",
                    "sigma"), optional=("band", "acceptance"))
