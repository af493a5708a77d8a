"""The rejection-sampling protocol for linear queries, pure ε-LDP: Algorithms 3 and 4 of
R. Bassily, "Linear Queries Estimation with Local Differential Privacy", AISTATS 2019, with
the clipped acceptance probability this project derived (the rejection-sampling erratum on
the docs page Mechanisms › Linear queries, docs/mechanisms/linear-queries.md).

Notation: a user holding v draws ``y ~ N(0, σ² I_d)``; ``t = (⟨a_v, y⟩ − ‖a_v‖²/2)/σ²`` is the
log ratio ``ln f_{a_v}(y)/f_0(y)`` (the paper's η is ``½ e^t``); ``u = ‖a_v‖/σ``. Along the unit
vector ``a_v/‖a_v‖``, ``y = σZ`` with Z standard normal and ``t = uZ − u²/2``; orthogonal
directions do not enter. Every closed form below is a one-dimensional normal integral in Z.

Good set: ``|t| ≤ ε/4`` ⟺ ``z_lo ≤ Z ≤ z_hi`` with ``z_lo = u/2 − ε/(4u)``,
``z_hi = u/2 + ε/(4u)``. Its tail (mass outside it) is the same under N(0, σ²I) and under
N(a_v, σ²I) (the law of t under the latter is the mirror image, ``uZ + u²/2``):

    tail(u) = Q(ε/(4u) + u/2) + Q(ε/(4u) − u/2),   Q = 1 − Φ,

increasing in u on (0, √(ε/2)], so the worst column is the longest (‖a_v‖ = r).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .. import _core, memory
from .._validation import integer, real, seed_key
from .calibration import normal_cdf as _Phi
from .calibration import normal_pdf as _phi
from ..reports import Reports
from ._queries import QueryMatrix, QueryProtocol

__all__ = [
    "RejectionSamplingLinearQueries",
    "good_set_tail",
    "rejection_sigma",
    "max_rejection_epsilon",
    "acceptance_probability",
    "accepted_mean_factor",
]

PAPER_FAITHFUL_WARNING = (
    "RejectionSamplingLinearQueries(paper_faithful=True) runs Algorithm 3 as printed: it "
    "accepts only inside each input's own Good set, so an output can have probability 0 under "
    "one input and positive probability under another: it is NOT epsilon-LDP "
    "(realized_epsilon = inf), and its accepted reports are biased (about 0.78 a at n = 10^4, "
    "epsilon = 1). Use it only to reproduce the paper."
)


def _q(x: float) -> float:
    return _Phi(-x)


def good_set_tail(u: float, epsilon: float) -> float:
    """Probability that ``|t| > ε/4`` for a column of norm ``u·σ`` (module docstring)."""
    if u == 0:
        return 0.0
    half = epsilon / (4 * u)
    return _q(half + u / 2) + _q(half - u / 2)


def max_rejection_epsilon() -> float:
    """The largest ε for which the clipped protocol's ⊥ ratio bound
    ``(1 − e^{−ε/4}/2)/(1 − e^{ε/4}/2) ≤ e^ε`` holds (≈ 2.5319; the paper assumes ε ≤ 1)."""
    def excess(e: float) -> float:
        return (math.log(2 - math.exp(-e / 4)) - math.log(2 - math.exp(e / 4))) - e

    lo, hi = 1.0, 4 * math.log(2) * (1 - 1e-12)  # excess(lo) < 0 < excess(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if excess(mid) <= 0 else (lo, mid)
    return lo


MAX_EPSILON = max_rejection_epsilon()


def rejection_sigma(epsilon: float, r: float, n_users: int) -> float:
    """The smallest σ with ``good_set_tail(r/σ, ε) ≤ 2/n²`` (this project's fix; ≈ 55–64
    r² ln n/ε² in σ², against the paper's 4 r² ln n/ε²). Bisection on u = r/σ to the last
    bits; the returned σ meets the tail target as computed."""
    target = 2.0 / (n_users * n_users)
    lo, hi = 0.0, math.sqrt(epsilon / 2)  # tail(0) = 0 ≤ target; tail increasing up to hi
    if good_set_tail(hi, epsilon) <= target:
        return r / hi
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if good_set_tail(mid, epsilon) <= target else (lo, mid)
    return r / lo


def _bounds(u: float, epsilon: float):
    quarter = epsilon / 4
    return u / 2 - quarter / u, u / 2 + quarter / u, quarter


def acceptance_probability(u: float, epsilon: float, *, paper_faithful: bool = False) -> float:
    """Exact P(accept) for a column of norm ``u·σ``:

    clipped: ``½[e^{−ε/4} Φ(z_lo) + Φ(z_hi − u) − Φ(z_lo − u) + e^{ε/4} Q(z_hi)]``;
    paper: ``½[Φ(z_hi − u) − Φ(z_lo − u)]`` (``e^{uz − u²/2} φ(z) = φ(z − u)``)."""
    if u == 0:
        return 0.5  # t ≡ 0: inside the Good set, accepted with probability 1/2
    z_lo, z_hi, quarter = _bounds(u, epsilon)
    inside = _Phi(z_hi - u) - _Phi(z_lo - u)
    if paper_faithful:
        return 0.5 * inside
    return 0.5 * (math.exp(-quarter) * _Phi(z_lo) + inside + math.exp(quarter) * _q(z_hi))


def accepted_mean_factor(u: float, epsilon: float, *, paper_faithful: bool = False) -> float:
    """c such that the exact mean of an accepted report is ``c · a_v`` (for ``‖a_v‖ = uσ``):
    ``c = E[Z α(Z)] / (u E[α(Z)])``, from ``∫ z φ(z − u) = u Φ(z − u) − φ(z − u)`` and
    ``∫ z φ(z) = −φ(z)``. 1 means unbiased; the printed algorithm gives ≈ 0.78 at n = 10⁴,
    ε = 1, ‖a_v‖ = r."""
    if u == 0:
        return 1.0
    z_lo, z_hi, quarter = _bounds(u, epsilon)
    inside = _Phi(z_hi - u) - _Phi(z_lo - u)
    first_moment = u * inside + _phi(z_lo - u) - _phi(z_hi - u)
    if paper_faithful:
        return first_moment / (u * inside)
    moment = (-math.exp(-quarter) * _phi(z_lo) + first_moment
              + math.exp(quarter) * _phi(z_hi))
    return moment / (u * acceptance_probability(u, epsilon) * 2)


def _output_loss_rank_one(b: np.ndarray, sigma: float, epsilon: float) -> float:
    """sup_y max_{v,v'} clip(t_v) − clip(t_v') when every column is ``b_v·e`` (one direction):
    with x = ⟨e, y⟩, ``t_v = (b_v x − b_v²/2)/σ²`` is affine in x, so the sup of each pair's
    piecewise-linear difference is at a breakpoint of one of them or at x → ±∞; evaluating
    max − min over all columns at every breakpoint (and the limits) is therefore exact."""
    quarter = epsilon / 4
    nonzero = b[b != 0]
    points = np.concatenate([(quarter * sigma**2 + nonzero**2 / 2) / nonzero,
                             (-quarter * sigma**2 + nonzero**2 / 2) / nonzero])
    best = 0.0
    for sign in (1.0, -1.0):  # the limits x → ±∞
        limit = quarter * np.sign(b) * sign
        best = max(best, float(limit.max() - limit.min()))
    for start in range(0, points.size, 256):
        x = points[start:start + 256, None]
        t = np.clip((b[None, :] * x - b[None, :] ** 2 / 2) / sigma**2, -quarter, quarter)
        best = max(best, float((t.max(axis=1) - t.min(axis=1)).max()))
    return min(best, 2 * quarter)


class RejectionSamplingLinearQueries(QueryProtocol):
    """Pure ε-LDP answers to d linear queries by rejection sampling (Algorithms 3 and 4 of
    Bassily, AISTATS 2019, corrected as on the docs page Mechanisms › Linear queries).

    A user holding v draws ``y ~ N(0, σ² I_d)`` and sends y with probability
    ``α_v(y) = clip(½ f_{a_v}(y)/f_0(y), e^{−ε/4}/2, e^{ε/4}/2)``, else ⊥. The server
    averages the accepted reports (n̂ of them).

    Privacy (pure ε-LDP), in three lines:

    1. the released y has density ``f_0(y) α_v(y)`` with ``α_v(y) ∈ [e^{−ε/4}/2, e^{ε/4}/2]``,
       so for any v, v', y the densities differ by a factor ≤ e^{ε/2};
    2. ``P(⊥|v) = 1 − E_{f_0}[α_v] ∈ [1 − e^{ε/4}/2, 1 − e^{−ε/4}/2]``, so the ⊥ ratio is
       ≤ (2 − e^{−ε/4})/(2 − e^{ε/4}), which is ≤ e^ε for ε ≤ ε_max ≈ 2.53;
    3. hence every event's probability changes by ≤ e^ε between any two inputs.

    :attr:`realized_epsilon` is the exact max log-ratio: ε/2 from the outputs as soon as two
    columns are linearly independent (less when all columns are parallel), or the exact ⊥
    ratio if larger (it rarely is: P(accept) ≈ ½ for every column); so it is ≤ ε, typically
    ε/2.

    σ (the fix): the smallest σ whose Good-set tail (module docstring) at the longest column
    is ≤ 2/n², so that accepted reports are ``N(a_v, σ²I)`` restricted to the Good set up to
    that mass and their mean is unbiased to within it (:func:`accepted_mean_factor` gives the
    exact bias).

    Parameters
    ----------
    queries : array_like, shape (d, J)
        The query matrix A (finite; d ≥ 1, J ≥ 1; not all zero).
    epsilon : float
        0 < ε ≤ ε_max ≈ 2.53 (:data:`MAX_EPSILON`).
    n_users : int
        The number of users n the protocol is calibrated for (≥ 2): σ depends on it.
    r : float, optional
        The column-norm bound (default: the largest column norm); σ is calibrated to it.
    paper_faithful : bool, default False
        **Not private.** Algorithm 3 as printed: σ² = 4 r² ln n/ε² and acceptance only
        inside the user's own Good set (probability 0 outside), which leaks through the
        output and biases the accepted mean (≈ 0.78·a at n = 10⁴, ε = 1). Emits a
        ``UserWarning``; :attr:`realized_epsilon` is then ``inf``.

    Notes
    -----
    **Reports.**
    :meth:`privatize` returns one row per user, float64 (n × d): the accepted y, or a row of
    NaN for ⊥ (each user's single message, "y or ⊥"). :meth:`accepted` gives the mask.
    """

    def __init__(self, queries: Any, epsilon: float, n_users: int, *,
                 r: Optional[float] = None, paper_faithful: bool = False):
        self._queries = QueryMatrix.of(queries, r)
        epsilon = real(epsilon, "epsilon")
        if not 0 < epsilon <= MAX_EPSILON:
            raise ValueError(
                f"epsilon must lie in (0, {MAX_EPSILON:.6f}], got {epsilon!r}: beyond it the "
                "probability of ⊥ under two inputs can differ by more than e^epsilon (the paper "
                "assumes epsilon ≤ 1)")
        self._epsilon = epsilon
        self._n_users = integer(n_users, "n_users", minimum=2)
        if not isinstance(paper_faithful, (bool, np.bool_)):
            raise TypeError(f"paper_faithful must be a bool, got {paper_faithful!r}")
        self._paper_faithful = bool(paper_faithful)
        if self._queries.r == 0:
            raise ValueError("every column of queries is zero (r = 0): the answers are known "
                             "without asking anyone")
        r = self._queries.r
        if self._paper_faithful:
            warnings.warn(PAPER_FAITHFUL_WARNING, UserWarning, stacklevel=2)
            delta = 2.0 / self._n_users**2
            self._sigma = r * math.sqrt(2 * math.log(2 / delta)) / epsilon
        else:
            self._sigma = rejection_sigma(epsilon, r, self._n_users)
        norms = np.sqrt(np.einsum("kv,kv->v", self._queries.matrix, self._queries.matrix))
        # P(accept | v) depends on ‖a_v‖ only: one closed form per distinct norm.
        distinct, inverse = np.unique(norms, return_inverse=True)
        per_norm = np.array([acceptance_probability(float(s) / self._sigma, epsilon,
                                                    paper_faithful=self._paper_faithful)
                             for s in distinct])
        self._acceptance = per_norm[inverse.reshape(-1)]

    # -- description ------------------------------------------------------------------------
    @property
    def n_users(self) -> int:
        return self._n_users

    @property
    def acceptance_probabilities(self) -> np.ndarray:
        """Exact P(accept | v) for each value v, shape (J,) (depends only on ‖a_v‖)."""
        return self._acceptance.copy()

    @property
    def good_set_tail(self) -> float:
        """Mass outside the Good set at the longest allowed column (‖a‖ = r)."""
        return good_set_tail(self.r / self._sigma, self._epsilon)

    @property
    def realized_epsilon(self) -> float:
        """The exact max over v, v' and outputs of the log probability ratio (class doc)."""
        if self._paper_faithful:
            return math.inf if self._queries.sensitivity > 0 else 0.0
        rejected = 1 - self._acceptance
        bottom = math.log(rejected.max()) - math.log(rejected.min())
        if self._queries.rank >= 2:
            output = self._epsilon / 2
        else:
            matrix = self._queries.matrix
            direction = np.linalg.svd(matrix, full_matrices=False)[0][:, 0]
            output = _output_loss_rank_one(direction @ matrix, self._sigma, self._epsilon)
        return max(output, bottom)

    def __repr__(self) -> str:
        flag = ", paper_faithful=True" if self._paper_faithful else ""
        return (f"RejectionSamplingLinearQueries(d={self.d}, J={self.domain_size}, "
                f"epsilon={self._epsilon!r}, n_users={self._n_users}{flag}; "
                f"sigma={self._sigma:.6g})")

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
            self._queries.columns, values, self._sigma, self._epsilon, self._paper_faithful,
            key))

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
                                       self._epsilon, self._paper_faithful)

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
        least ``a = min(acceptance_probabilities)`` (≈ 1/2), so with n̂ ≈ a·n accepted reports
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
        """A JSON-safe spec (parameters, query matrix, its SHA-256 fingerprint, σ)."""
        return {
            "protocol": "RejectionSamplingLinearQueries",
            "queries": self._queries.matrix.tolist(),
            "queries_sha256": self._queries.fingerprint(),
            "epsilon": self._epsilon,
            "n_users": self._n_users,
            "r": self._queries.r,
            "paper_faithful": self._paper_faithful,
            "sigma": self._sigma,
        }

    @classmethod
    def from_dict(cls, spec: Dict[str, Any]) -> "RejectionSamplingLinearQueries":
        """Rebuild from :meth:`to_dict`; the fingerprint and σ are checked against the
        rebuilt protocol (``ValueError`` on a mismatch)."""
        return cls._rebuilt(spec, lambda queries: cls(
            queries, spec["epsilon"], spec["n_users"], r=spec["r"],
            paper_faithful=spec["paper_faithful"]))
