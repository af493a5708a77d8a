"""The Gaussian protocol for linear queries: Algorithms 1 and 2 of R. Bassily, "Linear Queries
Estimation with Local Differential Privacy", AISTATS 2019, calibrated to the exact
sensitivity (the sensitivity erratum on the docs page Mechanisms › Linear queries,
docs/mechanisms/linear-queries.md)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Dict, Optional

import numpy as np

from .. import _core, memory
from .._validation import integer, one_of, seed_key
from . import calibration as _cal
from ..reports import Reports
from ._queries import SENSITIVITY_WORK_LIMIT, QueryMatrix, QueryProtocol

__all__ = ["GaussianLinearQueries"]

CALIBRATIONS = ("analytic", "classic")

PAPER_FAITHFUL_WARNING = (
    "GaussianLinearQueries(paper_faithful=True) uses the paper's sigma = r*sqrt(2 ln(2/delta))"
    "/epsilon, calibrated to the column-norm bound r although two users' answer vectors can be "
    "up to 2r apart: it is NOT (epsilon, delta)-LDP in general (see .realized_delta for the "
    "delta it actually has). Use it only to reproduce the paper."
)


class GaussianLinearQueries(QueryProtocol):
    """(ε, δ)-LDP answers to d linear queries: user i sends ``a_{v_i} + N(0, σ² I_d)``; the
    server averages (Algorithms 1 and 2 of Bassily, AISTATS 2019).

    Parameters
    ----------
    queries : array_like, shape (d, J)
        The query matrix A: column ``a_v`` holds the d answers for a user with value v.
        Finite reals; d ≥ 1, J ≥ 1.
    epsilon : float
        ε in [1e-10, 700] (natural log; ``calibration.MIN_EPSILON`` and
        ``calibration.MAX_EPSILON``; the distribution mechanisms' range).
    delta : float
        0 < δ < 1.
    calibration : {"analytic", "classic"}, default "analytic"
        How σ is derived from (ε, δ) and the exact L2 sensitivity Δ2 = max ‖a_v − a_v'‖
        (computed, not assumed): ``"analytic"`` is the smallest σ whose exact privacy
        profile (Balle & Wang 2018) meets δ, for any ε; ``"classic"`` is
        ``Δ2 √(2 ln(1.25/δ))/ε``, ε < 1 only. See :mod:`ldpdist.linear.calibration`.
    r : float, optional
        A bound on the column norms (default: the largest column norm). Every column must
        satisfy ``‖a_v‖ ≤ r`` (up to a relative 1e-12); r enters only :meth:`bound` and the
        paper-faithful σ, never the private σ (which uses Δ2).
    paper_faithful : bool, default False
        **Not private in general.** Use the paper's σ = r √(2 ln(2/δ))/ε, which assumes
        sensitivity r where it can be 2r. Emits a ``UserWarning``; :attr:`realized_delta`
        then shows the δ actually achieved at ε (larger than ``delta`` whenever Δ2 is large
        enough relative to r).
    max_sensitivity_work : int or None, default ``ldpdist.linear.SENSITIVITY_WORK_LIMIT``
        The limit of the exact sensitivity search, in distance evaluations (see
        :func:`ldpdist.linear.l2_sensitivity`): a matrix whose search is estimated above it
        (many columns close to a sphere in d ≥ 3) is refused before the search starts, with
        the estimate. None: no limit (a long search shows progress and stops on Ctrl-C).

    Notes
    -----
    J = 1, or all columns equal, gives Δ2 = 0: the report carries no information about the
    user, so σ = 0 is exact and private (δ = 0). Reports are float64 rows (n × d).
    :meth:`estimate` returns the raw (unbiased) mean by default, or its projection onto
    conv{±a_v} (Algorithm 2, step 6) or conv{a_v} with ``projection=``.
    """

    def __init__(self, queries: Any, epsilon: float, delta: float, *,
                 calibration: str = "analytic", r: Optional[float] = None,
                 paper_faithful: bool = False,
                 max_sensitivity_work: Optional[int] = SENSITIVITY_WORK_LIMIT):
        self._epsilon, self._delta = _cal.check_epsilon_delta(epsilon, delta)
        self._queries = QueryMatrix.of(queries, r, max_sensitivity_work=max_sensitivity_work)
        self._calibration = one_of(calibration, CALIBRATIONS, "calibration")
        if not isinstance(paper_faithful, (bool, np.bool_)):
            raise TypeError(f"paper_faithful must be a bool, got {paper_faithful!r}")
        self._paper_faithful = bool(paper_faithful)
        sens = self._queries.sensitivity
        if self._paper_faithful:
            warnings.warn(PAPER_FAITHFUL_WARNING, UserWarning, stacklevel=2)
            self._sigma = _cal.paper_sigma(self._epsilon, self._delta, self._queries.r)
        elif self._calibration == "classic":
            self._sigma = _cal.classic_sigma(self._epsilon, self._delta, sens)
        else:
            self._sigma = _cal.analytic_sigma(self._epsilon, self._delta, sens)
        _cal.check_sigma(self._sigma, f"epsilon = {self._epsilon!r}, delta = {self._delta!r}, "
                                      f"sensitivity = {sens!r}, r = {self._queries.r!r}")

    # -- description ------------------------------------------------------------------------
    @property
    def sensitivity(self) -> float:
        """The exact L2 sensitivity Δ2 = max_{v,v'} ‖a_v − a_v'‖ (≤ 2r)."""
        return self._queries.sensitivity

    @property
    def delta(self) -> float:
        """The δ asked for (see :attr:`realized_delta` for the δ achieved)."""
        return self._delta

    @property
    def calibration(self) -> str:
        return self._calibration

    @property
    def realized_delta(self) -> float:
        """The exact δ at :attr:`epsilon` of the noise in use (Balle & Wang's profile at
        Δ2): ≤ :attr:`delta` unless ``paper_faithful``."""
        return _cal.gaussian_delta(self._epsilon, self._sigma, self.sensitivity)

    def __repr__(self) -> str:
        flag = ", paper_faithful=True" if self._paper_faithful else ""
        return (f"GaussianLinearQueries(d={self.d}, J={self.domain_size}, "
                f"epsilon={self._epsilon!r}, delta={self._delta!r}, "
                f"calibration={self._calibration!r}{flag}; sigma={self._sigma:.6g})")

    # -- client -----------------------------------------------------------------------------
    def privatize(self, values: Any, *, seed: Optional[int] = None) -> Reports:
        """Reports ``a_{v_i} + N(0, σ² I_d)``, one row per user.

        Parameters
        ----------
        values : array_like of int, shape (n,)
            User values in [0, J).
        seed : int, optional
            None draws from the OS; an integer in [0, 2**256) gives the same reports on any
            number of threads.

        Returns
        -------
        Reports, shape (n, d), float64
            A numpy array tagged with this protocol's :attr:`fingerprint` (see
            :class:`~ldpdist.Reports`), which :meth:`estimate` checks.
        """
        values = self._queries.values(values)
        key = seed_key(seed)
        memory.check("privatize", [("the reports", 8 * values.size * self.d)])
        return self._reports(_core.linear_gaussian_privatize(self._queries.columns, values,
                                                             self._sigma, key))

    # -- server -----------------------------------------------------------------------------
    def estimate(self, reports: Reports, *, projection: str = "none",
                 tol: float = 1e-12) -> np.ndarray:
        """The mean of the reports, ȳ = (1/n) Σ ỹ_i (an unbiased estimate of A·p̂, p̂ the users'
        histogram), optionally projected (Algorithm 2, step 6), shape (d,).

        Parameters
        ----------
        reports : Reports, shape (n, d), float64
            Finite reports (n ≥ 1): :meth:`privatize` output (or slices and concatenations
            of it), or reports made elsewhere declared with :meth:`as_reports`. Reports of
            another protocol spec raise :class:`~ldpdist.SpecMismatchError`, a plain array
            ``TypeError``. Summed in fixed blocks in Rust, the same bits on any number of
            threads, at memory bandwidth.
        projection : {"none", "symmetric", "convex"}, default "none"
            ``"symmetric"``: the Euclidean projection onto conv{±a_v} = A·B_1^J (the paper's);
            ``"convex"``: onto conv{a_v}, which holds A·p for every distribution p and is
            tighter. Projecting onto a convex set holding the target never increases the
            distance to it (the estimate is then biased, but never worse); the paper applies
            it only for n below a threshold to save compute. ``"none"``: the raw mean.
        tol : float, default 1e-12
            Duality-gap stop of the projection (squared units; see
            :func:`ldpdist.kernels.project_hull`).
        """
        reports = self._checked_reports(reports, "estimate")
        mean, _ = _core.linear_mean(reports, False)
        return self._queries.project(mean, projection, tol)

    def bound(self, n: int, *, projected: bool = False) -> float:
        """Theorem 3.2's bound on E‖ŷ − A p̂‖₂ at n users, for the σ actually used.

        Raw mean (``projected=False``): ``σ √(d/n)`` (ȳ − A p̂ ~ N(0, σ²/n I_d), so this is
        √E‖·‖², an upper bound on E‖·‖). With the paper's σ it is the theorem's
        ``r √(2 d ln(2/δ)/(nε²))``; with the corrected σ it scales by σ_used/σ_paper.

        Projected (``projected=True``, for an estimate projected onto conv{±a_v}): the
        minimum of the raw bound and ``2 (σ r √(2 ln(2J)/n))^{1/2}`` (Corollary 2.3 of the
        paper and ``E max_j |g_j|`` ≤ s √(2 ln(2J)) for J centred Gaussians of deviation ≤ s;
        the paper writes √(ln J) there, which is not a valid bound for small J). This
        branch scales by √(σ_used/σ_paper).
        """
        n = integer(n, "n", minimum=1)
        raw = self._sigma * math.sqrt(self.d / n)
        if not projected:
            return raw
        spread = self._sigma * self.r * math.sqrt(2 * math.log(2 * self.domain_size) / n)
        return min(raw, 2 * math.sqrt(spread))

    # -- spec -------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """A JSON-safe spec: the parameters, the query matrix (as nested lists, exactly:
        float64 values survive JSON round trips) and its SHA-256 fingerprint, and σ."""
        return {
            "protocol": "GaussianLinearQueries",
            "queries": self._queries.matrix.tolist(),
            "queries_sha256": self._queries.fingerprint(),
            "epsilon": self._epsilon,
            "delta": self._delta,
            "calibration": self._calibration,
            "r": self._queries.r,
            "paper_faithful": self._paper_faithful,
            "sigma": self._sigma,
        }

    @classmethod
    def from_dict(cls, spec: Dict[str, Any], *,
                  max_sensitivity_work: Optional[int] = SENSITIVITY_WORK_LIMIT
                  ) -> "GaussianLinearQueries":
        """Rebuild from :meth:`to_dict`; the fingerprint and σ are checked against the
        rebuilt protocol (``ValueError`` on a mismatch). The sensitivity is computed again
        (a spec's σ is never trusted): ``max_sensitivity_work`` as in the constructor, for a
        query matrix whose exact sensitivity needed the opt-in."""
        return cls._rebuilt(spec, lambda queries: cls(
            queries, spec["epsilon"], spec["delta"], calibration=spec["calibration"],
            r=spec["r"], paper_faithful=spec["paper_faithful"],
            max_sensitivity_work=max_sensitivity_work),
            fields=("queries", "queries_sha256", "epsilon", "delta", "calibration", "r",
                    "paper_faithful", "sigma"))

