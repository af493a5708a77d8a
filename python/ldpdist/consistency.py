"""The consistency post-processing family: ten ways to make a raw estimate consistent.

T. Wang, M. Lopuhaä-Zwakenberg, Z. Li, B. Škorić and N. Li, "Locally Differentially Private
Frequency Estimation with Consistency", NDSS 2020, compare ten post-processing methods of an
unbiased frequency estimate p̃ (the ``"raw"`` decoder): they use what is known about the true
frequencies (non-negative, summing to 1) in different ways, and which one is best depends on
the query. Every mechanism offers them as decoders under these names (``mech.estimate(reports,
decoder="base_cut")``; see :mod:`ldpdist.decoders`):

``base_pos`` (Base-Pos)
    Negative entries set to 0; the others kept.
``post_pos`` (Post-Pos)
    The raw estimate is kept; the answer to a query (a sum of frequencies over a set of
    values, :func:`answer`) is set to 0 when it is negative.
``base_cut`` (Base-Cut)
    Entries not above the significance threshold ``T_x = σ_x Φ⁻¹(1 − α/k)`` set to 0, the
    others kept (``σ_x``: standard deviation of the raw estimate of x when x has frequency
    0; ``α = 0.05``: a Bonferroni-corrected test of "frequency 0" at level α).
``norm`` (Norm)
    The same δ added to every entry so that they sum to 1 (the least-squares estimate
    under the sum constraint alone); entries may stay negative.
``norm_mul`` (Norm-Mul)
    Negative entries set to 0, then all multiplied by one factor so that they sum to 1
    (the uniform distribution when no entry is positive). The same operation as the
    ``"normalize"`` decoder.
``norm_cut`` (Norm-Cut)
    Negative entries set to 0; when the rest sums to more than 1, the smallest entries are
    set to 0 too: the entries kept are those at or above the smallest threshold θ at which
    they sum to at most 1 (the largest set of top entries, never splitting equal ones, whose
    total is ≤ 1). When the positive entries sum to at most 1 they are all kept.
``norm_sub`` (Norm-Sub)
    ``max(p̃_x + δ, 0)`` with the δ that makes the entries sum to 1: the Euclidean
    projection onto the probability simplex, the same operation as the ``"project"``
    decoder.
``mle_apx`` (MLE-Apx)
    Approximate maximum likelihood under a Gaussian model of the raw estimate whose variance
    depends on the frequencies (:func:`mle_apx`): ``max(p̃_x − λ σ_x²(p̂), 0)`` with
    ``σ_x²(p̂)`` the variance of the raw estimate of x evaluated at the result p̂ itself
    and λ such that the entries sum to 1. With equal variances it is Norm-Sub.
``power`` (Power)
    A power law ``π(c) ∝ c^(−a)`` over the counts ``c = 1, …, n`` fitted to the estimates,
    then each entry replaced by its posterior mean under that prior and the Gaussian noise
    of the raw estimate (:func:`power`). Non-negative, but it need not sum to 1.
``power_ns`` (PowerNS)
    Power followed by Norm-Sub.

The methods that need the noise of the raw estimate (``base_cut``, ``mle_apx``, ``power``,
``power_ns``) take a :class:`NoiseModel`; the decoders build it from the mechanism's exact
variance (``mechanism.estimator_variance(p, n)``), or, for a mechanism without one,
estimate a constant noise level from the raw estimate (:meth:`NoiseModel.robust`).
"""

from __future__ import annotations

import math
import statistics
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import kernels, memory
from ._validation import float_vector, integer, one_of, real, shown

__all__ = [
    "METHODS",
    "NOISE_METHODS",
    "PAPER_NAMES",
    "NoiseModel",
    "PowerFit",
    "answer",
    "apply",
    "base_cut",
    "base_cut_threshold",
    "base_pos",
    "fit_power",
    "mle_apx",
    "noise_model",
    "norm",
    "norm_cut",
    "norm_mul",
    "norm_sub",
    "post_pos",
    "power",
    "power_ns",
    "project_simplex_weighted",
    "query_sums",
]

#: The ten methods, under the names the decoders use.
METHODS = ("base_pos", "post_pos", "base_cut", "norm", "norm_mul", "norm_cut", "norm_sub",
           "mle_apx", "power", "power_ns")
#: The methods that need a :class:`NoiseModel`.
NOISE_METHODS = ("base_cut", "mle_apx", "power", "power_ns")
#: The paper's name of each method.
PAPER_NAMES = {"base_pos": "Base-Pos", "post_pos": "Post-Pos", "base_cut": "Base-Cut",
               "norm": "Norm", "norm_mul": "Norm-Mul", "norm_cut": "Norm-Cut",
               "norm_sub": "Norm-Sub", "mle_apx": "MLE-Apx", "power": "Power",
               "power_ns": "PowerNS"}
#: Base-Cut's default significance level (the paper's).
ALPHA = 0.05
#: The range of power-law exponents :func:`fit_power` searches.
POWER_EXPONENTS = (1.01, 6.0)
#: The smallest noise (a standard deviation, in counts) :func:`power` works with: the
#: frequencies are counts / n, and a smaller noise is treated as half a count.
POWER_MIN_NOISE = 0.5


def _raw(raw: Any, name: str = "raw") -> np.ndarray:
    array = float_vector(raw, name)
    if array.size == 0:
        raise ValueError(f"{name} must be a non-empty estimate, got shape {array.shape}")
    return array


# -- the noise of the raw estimate ----------------------------------------------------------

class NoiseModel:
    """The Gaussian model of a raw estimate's noise that Base-Cut, MLE-Apx and Power use.

    ``variance(p)`` is the variance of each coordinate of the raw estimate from ``n`` reports
    when the users' values follow the distribution ``p``, shape (k,). Build one with
    :meth:`exact` (a mechanism's ``estimator_variance``), :meth:`constant`, or
    :meth:`robust` (a constant estimated from the raw estimate itself);
    :func:`noise_model` picks the first that applies to a mechanism.

    Parameters
    ----------
    k : int
        Number of values.
    n : int
        Number of reports the raw estimate was made from (Power's counts go up to n).
    variance : callable
        ``variance(p) -> ndarray`` of shape (k,), finite and non-negative, for a
        distribution ``p`` of shape (k,).
    description : str
        Where the variances come from (shown in messages).
    """

    def __init__(self, k: int, n: int, variance: Callable[[np.ndarray], Any],
                 description: str = "") -> None:
        self.k = integer(k, "k", minimum=1)
        self.n = integer(n, "n", minimum=1)
        if not callable(variance):
            raise TypeError(f"variance must be callable (p -> variances), got "
                            f"{shown(variance)}")
        self._variance = variance
        self.description = str(description)

    def __repr__(self) -> str:
        return f"NoiseModel(k={self.k}, n={self.n}, {self.description or 'custom'})"

    @classmethod
    def exact(cls, mechanism: Any, n: int) -> "NoiseModel":
        """The exact variances of ``mechanism.estimator_variance(p, n)``."""
        return cls(mechanism.k, n, lambda p: mechanism.estimator_variance(p, n),
                   f"exact variance of {type(mechanism).__name__}")

    @classmethod
    def constant(cls, k: int, n: int, variance: float) -> "NoiseModel":
        """The same variance for every value and every distribution."""
        variance = real(variance, "variance")
        if variance < 0:
            raise ValueError(f"variance must be >= 0, got {variance}")
        k = integer(k, "k", minimum=1)
        return cls(k, n, lambda p: np.full(k, variance), f"constant variance {variance:.3g}")

    @classmethod
    def robust(cls, raw: Any, n: int) -> "NoiseModel":
        """A constant variance ``σ̂²`` read from the raw estimate:
        ``σ̂ = median|p̃| / 0.6745`` (the normal MAD, as in
        :func:`ldpdist.decoders.noise_level_sparsity`). Right when most values have a
        frequency near 0; an overestimate when the distribution is spread over most values.
        The fallback for mechanisms without ``estimator_variance``."""
        raw = _raw(raw)
        sigma = float(np.median(np.abs(raw))) / 0.6745
        model = cls.constant(raw.size, n, sigma * sigma)
        model.description = f"constant variance {sigma * sigma:.3g} (median |raw| / 0.6745)²"
        return model

    def variance(self, p: Any) -> np.ndarray:
        """Variance of each coordinate of the raw estimate when the values follow ``p``
        (renormalized to sum 1 exactly: rounding in long sums must not make it invalid)."""
        p = np.maximum(np.asarray(p, dtype=np.float64), 0.0)
        total = float(p.sum())
        if not total > 0:
            raise ValueError("the distribution p of a noise model must have positive mass")
        values = np.asarray(self._variance(p / total), dtype=np.float64)
        if values.shape != (self.k,):
            raise ValueError(f"the noise model ({self.description or 'custom'}) returned "
                             f"shape {values.shape}, expected ({self.k},)")
        if not np.all(np.isfinite(values)) or (values < 0).any():
            raise ValueError(f"the noise model ({self.description or 'custom'}) returned "
                             "negative or non-finite variances")
        return values

    def null_variance(self, reference: Any) -> np.ndarray:
        """``σ_x²``: the variance of the raw estimate of each x when x has frequency 0, the
        other values following ``reference`` (a distribution, e.g. the Norm-Sub estimate).

        For the values with ``reference[x] = 0`` that is ``variance(reference)[x]``; for the
        others, the support of ``reference`` is split into two halves (alternate values) and
        each half is read from ``reference`` with that half set to 0 and renormalized. Exact
        whenever the variance of x depends only on the frequency of x (every pure frequency
        oracle: RR, RAPPOR, OUE, OLH, SS, Hadamard Response with one block); otherwise the
        other values' frequencies are those of a close distribution.
        """
        p = np.asarray(reference, dtype=np.float64)
        out = self.variance(p).copy()
        support = np.flatnonzero(p > 0)
        for half in (support[0::2], support[1::2]):
            if half.size == 0:
                continue
            q = p.copy()
            q[half] = 0.0
            total = float(q.sum())
            if total <= 0.0:  # the half held all the mass: the others, uniform
                q = np.ones(self.k)
                q[half] = 0.0
                total = float(q.sum())
            out[half] = self.variance(q / total)[half]
        return out


def noise_model(mechanism: Any, n: int, raw: Any = None) -> NoiseModel:
    """The :class:`NoiseModel` of a mechanism's raw estimate from ``n`` reports: exact
    (:meth:`NoiseModel.exact`) when the mechanism has ``estimator_variance``, else the
    robust constant of ``raw`` (:meth:`NoiseModel.robust`)."""
    n = integer(n, "n", minimum=1)
    variance = getattr(mechanism, "estimator_variance", None)
    if variance is not None:
        try:
            variance(np.full(mechanism.k, 1.0 / mechanism.k), n)
        except NotImplementedError:
            pass
        else:
            return NoiseModel.exact(mechanism, n)
    if raw is None:
        raise ValueError(f"{type(mechanism).__name__} has no estimator_variance: pass the raw "
                         "estimate to estimate the noise from it")
    return NoiseModel.robust(raw, n)


def _noise(noise: Optional[NoiseModel], k: int, method: str) -> NoiseModel:
    if noise is None:
        raise ValueError(f"{method} needs the noise of the raw estimate: pass "
                         "noise=NoiseModel(...) (or use the decoder, which builds it from "
                         "the mechanism)")
    if not isinstance(noise, NoiseModel):
        raise TypeError(f"noise must be a NoiseModel, got {shown(noise)}")
    if noise.k != k:
        raise ValueError(f"the noise model is for k = {noise.k} values, the estimate has {k}")
    return noise


# -- the methods ------------------------------------------------------------------------------

def base_pos(raw: Any) -> np.ndarray:
    """Base-Pos: negative entries set to 0, the others kept."""
    raw = _raw(raw)
    return np.where(raw > 0, raw, 0.0)


def post_pos(raw: Any) -> np.ndarray:
    """Post-Pos: the raw estimate itself (a copy); the method acts on query answers
    (:func:`answer` sets a negative answer to 0)."""
    return _raw(raw).copy()


def base_cut_threshold(k: int, null_variance: Any, alpha: float = ALPHA) -> np.ndarray:
    """Base-Cut's thresholds ``σ_x Φ⁻¹(1 − α/k)``, shape (k,) (``null_variance``: ``σ_x²``,
    a scalar or one per value)."""
    k = integer(k, "k", minimum=1)
    alpha = real(alpha, "alpha")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    variance = np.broadcast_to(np.asarray(null_variance, dtype=np.float64), (k,))
    if not np.all(np.isfinite(variance)) or (variance < 0).any():
        raise ValueError("the null variances must be finite and non-negative")
    z = -statistics.NormalDist().inv_cdf(alpha / k)
    return np.sqrt(variance) * z


def base_cut(raw: Any, noise: Optional[NoiseModel] = None, *, alpha: float = ALPHA,
             null_variance: Any = None) -> np.ndarray:
    """Base-Cut: entries not above ``T_x = σ_x Φ⁻¹(1 − α/k)`` set to 0, the others kept.

    ``σ_x²`` is ``null_variance`` when given, else ``noise.null_variance`` at the Norm-Sub
    estimate (:meth:`NoiseModel.null_variance`). Under the Gaussian model, a value of
    frequency 0 survives with probability α/k, so all of them are cut with probability at
    least 1 − α (Bonferroni).
    """
    raw = _raw(raw)
    if null_variance is None:
        noise = _noise(noise, raw.size, "base_cut")
        null_variance = noise.null_variance(kernels.project_simplex(raw))
    threshold = base_cut_threshold(raw.size, null_variance, alpha)
    return np.where(raw > threshold, raw, 0.0)


def norm(raw: Any) -> np.ndarray:
    """Norm: ``p̃ + δ`` with ``δ = (1 − Σ p̃)/k`` (sums to 1; may stay negative)."""
    raw = _raw(raw)
    return raw + (1.0 - float(np.sum(raw))) / raw.size


def norm_mul(raw: Any) -> np.ndarray:
    """Norm-Mul: negative entries set to 0, then the rest scaled to sum 1; the uniform
    distribution when no entry is positive. The ``"normalize"`` decoder."""
    raw = _raw(raw)
    clipped = np.maximum(raw, 0.0)
    total = clipped.sum()
    if total <= 0.0:
        return np.full(raw.shape, 1.0 / raw.size)
    return clipped / total


def norm_cut(raw: Any) -> np.ndarray:
    """Norm-Cut: negative entries set to 0; if the rest sums to more than 1, only the
    entries ``>= θ`` are kept, θ the smallest threshold at which they sum to at most 1
    (equal entries are kept or cut together). The kept entries are not rescaled."""
    raw = _raw(raw)
    positive = np.where(raw > 0, raw, 0.0)
    if float(positive.sum()) <= 1.0:
        return positive
    values = np.sort(positive[positive > 0])[::-1]
    totals = np.cumsum(values)
    # a cut after the j largest entries is allowed where the next one is strictly smaller
    cuts = np.flatnonzero((totals <= 1.0) & np.append(values[1:] < values[:-1], True))
    if cuts.size == 0:
        return np.zeros_like(raw)
    theta = values[cuts[-1]]
    return np.where(positive >= theta, positive, 0.0)


def norm_sub(raw: Any) -> np.ndarray:
    """Norm-Sub: ``max(p̃ + δ, 0)`` with δ such that the result sums to 1, i.e. the
    Euclidean projection onto the simplex (:func:`ldpdist.kernels.project_simplex`; the
    ``"project"`` decoder)."""
    return kernels.project_simplex(_raw(raw))


def project_simplex_weighted(v: Any, weights: Any) -> np.ndarray:
    """``argmin_p Σ (v_x − p_x)² / w_x`` over the probability simplex:
    ``p_x = max(v_x − λ w_x, 0)`` with λ such that ``Σ p = 1`` (found exactly by one sort
    of the breakpoints ``v_x / w_x``). ``weights`` must be positive; equal weights give
    :func:`ldpdist.kernels.project_simplex`."""
    v = _raw(v, "v")
    w = float_vector(weights, "weights")
    if w.shape != v.shape:
        raise ValueError(f"weights must have the shape of v {v.shape}, got {w.shape}")
    if not (w > 0).all():
        raise ValueError("weights must be positive")
    order = np.argsort(-(v / w), kind="stable")
    sv, sw = v[order], w[order]
    lam = (np.cumsum(sv) - 1.0) / np.cumsum(sw)
    # entries of the support: breakpoint above the λ of the prefix that ends with them
    inside = np.flatnonzero(sv - lam * sw > 0)
    rho = int(inside[-1]) if inside.size else 0
    return np.maximum(v - lam[rho] * w, 0.0)


def mle_apx(raw: Any, noise: Optional[NoiseModel] = None, *, max_iter: int = 200,
            tol: float = 1e-12) -> np.ndarray:
    """MLE-Apx: approximate maximum likelihood of a distribution under a Gaussian model of
    the raw estimate whose variance depends on the frequencies.

    Model: ``p̃_x ~ N(p_x, σ_x²(p))`` independently, ``σ_x²(p) = noise.variance(p)[x]``.
    Maximizing ``−Σ (p̃_x − p_x)² / (2 σ_x²)`` over the simplex with the variances taken at
    the solution (the approximation: their dependence on p is not differentiated) gives the
    conditions

        p_x = max(p̃_x − λ σ_x²(p), 0),  Σ p_x = 1,

    i.e. p is the weighted projection (:func:`project_simplex_weighted`) of p̃ with the
    weights ``σ²(p)``. They are solved by fixed-point iteration from the Norm-Sub estimate
    (a step: the variances at the current p, then the weighted projection), accelerated by
    SQUAREM, until a step moves no entry by more than ``tol`` (a ``RuntimeWarning`` after
    ``max_iter`` cycles of at most three steps). For a pure frequency oracle
    the variance is affine-quadratic in p_x alone and the result is the paper's closed form
    (subtract a constant from the kept entries, then scale them); with equal variances it is
    Norm-Sub.
    """
    raw = _raw(raw)
    noise = _noise(noise, raw.size, "mle_apx")
    max_iter = integer(max_iter, "max_iter", minimum=1)
    tol = real(tol, "tol")
    memory.check("MLE-Apx", [("work vectors over the values", 96 * raw.size)])

    def plain(p: np.ndarray) -> np.ndarray:
        w = noise.variance(p)
        positive = w > 0
        if not positive.all():
            if not positive.any():       # no noise at all: every weighting is equal
                return kernels.project_simplex(raw)
            w = np.where(positive, w, w[positive].min() * 1e-12)
        return project_simplex_weighted(raw, w)

    # Fixed-point iteration p <- p + β (F(p) − p), F = the weighted projection with the
    # variances at p, accelerated by SQUAREM (Varadhan & Roland 2008): from p, two steps p1,
    # p2, the extrapolation p − 2a r + a² v (r = p1 − p, v = p2 − 2 p1 + p, a = −|r|/|v|)
    # put back on the simplex and one step from it, kept when its residual is the smaller.
    # β starts at 1 and is halved whenever a cycle does not reduce the residual (the plain
    # steps can cycle when the variances change much with p, e.g. at very small n). The
    # fixed points are those of F for every β.
    beta = 1.0
    best = math.inf
    stalled = 0
    p = kernels.project_simplex(raw)
    f = plain(p)
    for _ in range(max_iter):
        residual = float(np.max(np.abs(f - p)))
        if residual <= tol:
            return f
        if residual < 0.9 * best:
            best, stalled = residual, 0
        else:
            stalled += 1
            if stalled >= 2:
                beta, stalled, best = max(beta / 2.0, 2.0 ** -20), 0, residual
        p1 = p + beta * (f - p)
        f1 = plain(p1)
        p2 = p1 + beta * (f1 - p1)
        f2 = plain(p2)
        r, v = p1 - p, p2 - 2.0 * p1 + p
        norm_v = float(np.linalg.norm(v))
        following, following_f = p2, f2
        if norm_v > 0:
            a = -float(np.linalg.norm(r)) / norm_v
            jump = kernels.project_simplex(p - 2.0 * a * r + a * a * v)
            jump_f = plain(jump)
            if np.max(np.abs(jump_f - jump)) < np.max(np.abs(f2 - p2)):
                following, following_f = jump, jump_f
        p, f = following, following_f
    warnings.warn(f"MLE-Apx did not converge to tol={tol} in max_iter={max_iter} "
                  "iterations; the estimate is the last iterate", RuntimeWarning, stacklevel=2)
    return p


# -- Power: a fitted power-law prior and the posterior mean ------------------------------------

class PowerFit(NamedTuple):
    """Outcome of :func:`fit_power`."""

    alpha: float
    """The fitted exponent a of ``π(c) ∝ c^(−a)``, c = 1, …, n."""
    log_likelihood: float
    """The log-likelihood of the estimates (in counts) at ``alpha``."""


def _times(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` in one thread (numpy's loop, not BLAS: small products, and a
    BLAS thread pool that waits on busy cores costs far more than it saves)."""
    return np.einsum("ij,j->i", matrix, vector)


def _integral(a: np.ndarray, b: np.ndarray, beta: float) -> np.ndarray:
    """``∫_a^b x^(−β) dx`` for 0 < a <= b, stable near β = 1."""
    a = np.asarray(a, dtype=np.float64)
    length = np.log(np.asarray(b, dtype=np.float64) / a)
    t = (1.0 - beta) * length
    small = np.abs(t) < 1e-12
    ratio = np.where(small, 1.0, np.expm1(np.where(small, 1.0, t)) / np.where(small, 1.0, t))
    return np.exp((1.0 - beta) * np.log(a)) * length * ratio


_EXACT_COUNTS = 4096   # counts summed term by term; above, the midpoint integral


def _bin_starts(top: int, widest: int) -> np.ndarray:
    """First counts of the prior's bins over 1..top: width ``⌊x/20⌋`` (at least 1) from
    count x, at most ``widest``, so that the prior varies by a few percent within a bin."""
    starts = []
    x = 1
    while x <= top:
        width = max(1, min(widest, x // 20))
        if width == widest:
            starts.extend(range(x, top + 1, widest))
            break
        starts.append(x)
        x += width
    return np.asarray(starts, dtype=np.float64)


class _PowerGroup:
    """The estimates (in counts) of the values with one noise level s: a grid of estimates
    on which the marginal density and the posterior mean are computed, the prior's mass in
    bins of counts, and the estimates far in the tail where the posterior mean is Tweedie's
    ``e − a s²/e``."""

    MAX_GRID = 2000

    def __init__(self, e: np.ndarray, s: float, n: int) -> None:
        self.e, self.s, self.n = e, s, n
        big = max(50.0 * s, 200.0)
        self.tail = (e > big) if big < n else np.zeros(e.shape, dtype=bool)
        # estimates more than 40 noise deviations outside the counts (probability e^-800
        # under the model) are read at that distance: the grid stays fine
        body = np.clip(e[~self.tail], -40.0 * s, n + 40.0 * s)
        self.tail_log = float(np.sum(np.log(e[self.tail])))
        self.tail_count = int(self.tail.sum())
        if body.size == 0:
            self.grid = None
            return
        lo, hi = float(body.min()), float(body.max())
        span = max(hi - lo, 1e-9)
        step = max(s / 20.0, span / self.MAX_GRID)
        size = int(math.ceil(span / step)) + 2
        self.grid = lo + step * np.arange(size)
        position = (body - lo) / step
        index = np.minimum(np.floor(position).astype(np.int64), size - 2)
        frac = position - index
        self.index, self.frac = index, frac
        self.weights = (np.bincount(index, weights=1.0 - frac, minlength=size)
                        + np.bincount(index + 1, weights=frac, minlength=size))
        top = int(min(n, math.ceil(max(hi, 1.0) + 10.0 * s)))
        lows = _bin_starts(top, max(1, int(s // 10)))
        highs = np.append(lows[1:] - 1, top)
        self.lows, self.highs = lows, highs
        self.exact = highs <= _EXACT_COUNTS
        self.counts = np.arange(1, int(highs[self.exact][-1]) + 1 if self.exact.any() else 1,
                                dtype=np.float64)
        self.starts = ((lows[self.exact] - 1).astype(np.int64) if self.exact.any()
                       else np.zeros(0, dtype=np.int64))
        centers = (lows + highs) / 2.0
        memory.check("Power", [("the kernel between the grid and the prior's bins",
                                8 * size * lows.size)])
        d = (self.grid[:, None] - centers[None, :]) / s
        logk = -0.5 * d * d
        self.offset = logk.max(axis=1)
        logk -= self.offset[:, None]
        # below e^-300 a term is negligible against the row's largest (the prior's mass
        # varies by far less), and subnormal products would slow the products down 100-fold
        self.kernel = np.where(logk > -300.0, np.exp(np.maximum(logk, -300.0)), 0.0)

    def bins(self, alpha: float) -> Tuple[np.ndarray, np.ndarray]:
        """Prior mass (unnormalized) and first moment of each bin."""
        mass = np.empty(self.lows.size)
        moment = np.empty(self.lows.size)
        if self.exact.any():
            terms = np.exp(-alpha * np.log(self.counts))
            mass[self.exact] = np.add.reduceat(terms, self.starts)
            moment[self.exact] = np.add.reduceat(terms * self.counts, self.starts)
        wide = ~self.exact
        if wide.any():
            a, b = self.lows[wide] - 0.5, self.highs[wide] + 0.5
            mass[wide] = _integral(a, b, alpha)
            moment[wide] = _integral(a, b, alpha - 1.0)
        return mass, moment

    def log_likelihood(self, alpha: float, log_z: float) -> float:
        total = -alpha * self.tail_log - self.tail_count * log_z
        if self.grid is not None:
            mass, _ = self.bins(alpha)
            density = _times(self.kernel, mass)
            log_m = (np.log(density) + self.offset - log_z
                     - math.log(self.s * math.sqrt(2.0 * math.pi)))
            total += float(np.dot(self.weights, log_m))
        return total

    def posterior_mean(self, alpha: float) -> np.ndarray:
        out = np.empty(self.e.size)
        if self.grid is not None:
            mass, moment = self.bins(alpha)
            mean = _times(self.kernel, moment) / _times(self.kernel, mass)
            out[~self.tail] = (mean[self.index] * (1.0 - self.frac)
                               + mean[self.index + 1] * self.frac)
        e = self.e[self.tail]
        out[self.tail] = e - alpha * self.s * self.s / e
        return np.clip(out, 1.0, self.n)


def _log_normalizer(alpha: float, n: int) -> float:
    """``log Σ_{c=1}^{n} c^(−a)``: exact to 4096, the midpoint integral beyond."""
    top = min(n, _EXACT_COUNTS)
    counts = np.arange(1, top + 1, dtype=np.float64)
    total = float(np.sum(np.exp(-alpha * np.log(counts))))
    if n > top:
        total += float(_integral(np.array(top + 0.5), np.array(n + 0.5), alpha))
    return math.log(total)


def _power_groups(raw: np.ndarray, noise: NoiseModel) -> Tuple[List[Tuple[np.ndarray,
                                                                          _PowerGroup]],
                                                               np.ndarray]:
    """The values grouped by their noise level (in counts, in steps of 2%; a group uses the
    geometric mean of its levels), and the values whose noise is 0 (kept as they are)."""
    n = noise.n
    e = raw * n
    sd = np.sqrt(noise.null_variance(kernels.project_simplex(raw))) * n
    noiseless = sd == 0
    sd = np.maximum(sd, POWER_MIN_NOISE)
    level = np.round(np.log(sd) / math.log(1.02)).astype(np.int64)
    groups = []
    for value in np.unique(level[~noiseless]):
        members = np.flatnonzero((level == value) & ~noiseless)
        level_sd = float(np.exp(np.mean(np.log(sd[members]))))   # their geometric mean
        groups.append((members, _PowerGroup(e[members], level_sd, n)))
    return groups, np.flatnonzero(noiseless)


def _golden_max(function: Callable[[float], float], low: float, high: float,
                tol: float = 1e-4) -> float:
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = function(c), function(d)
    while b - a > tol:
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = function(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = function(d)
    best = [(function(x), x) for x in (low, (a + b) / 2.0, high)]
    return max(best)[1]


def fit_power(raw: Any, noise: Optional[NoiseModel] = None) -> PowerFit:
    """The power law ``π(c) ∝ c^(−a)`` over the counts c = 1, …, n that best explains the
    estimates: the maximum-likelihood exponent a in :data:`POWER_EXPONENTS` when each count
    ``n p̃_x`` is a count drawn from π plus Gaussian noise of standard deviation ``n σ_x``
    (σ_x² the null variance of :meth:`NoiseModel.null_variance` at the Norm-Sub estimate;
    at least :data:`POWER_MIN_NOISE` counts). Values of zero noise enter with their count
    (rounded, at least 1) as an exact draw from π.

    The values are grouped by noise level s (in steps of 2%). For each group the marginal
    density of an estimate is computed on a grid of estimates (spacing s/20, or finer
    than 1/2000 of their range) against the prior's mass in bins of counts (bins of width
    ``⌊c/20⌋`` from count c, at most ``⌊s/10⌋``, at least 1; summed term by term up to 4096,
    by the midpoint integral beyond), and, for estimates beyond ``max(50 s, 200)`` counts,
    as the prior itself. The exponent is found by golden-section search.
    """
    raw = _raw(raw)
    noise = _noise(noise, raw.size, "power")
    return _fit(raw, noise.n, *_power_groups(raw, noise))


def _fit(raw: np.ndarray, n: int, groups: List[Tuple[np.ndarray, _PowerGroup]],
         noiseless: np.ndarray) -> PowerFit:
    exact_counts = np.clip(np.round(raw[noiseless] * n), 1, n)
    exact_log = float(np.sum(np.log(exact_counts)))

    def log_likelihood(alpha: float) -> float:
        log_z = _log_normalizer(alpha, n)
        total = -alpha * exact_log - noiseless.size * log_z
        return total + sum(group.log_likelihood(alpha, log_z) for _, group in groups)

    alpha = _golden_max(log_likelihood, *POWER_EXPONENTS)
    return PowerFit(float(alpha), float(log_likelihood(alpha)))


def power(raw: Any, noise: Optional[NoiseModel] = None, *,
          alpha: Optional[float] = None) -> np.ndarray:
    """Power: each entry replaced by its posterior mean under a power-law prior.

    The counts ``c_x = n p_x`` are modelled as independent draws from ``π(c) ∝ c^(−a)``,
    c = 1, …, n, and the raw estimate as ``n p̃_x = c_x + N(0, (n σ_x)²)``; the exponent a
    is :func:`fit_power`'s (or ``alpha``). The result is ``E[c_x | p̃_x] / n`` (the estimate
    of least expected squared error under the model), computed on the grid of
    :func:`fit_power`, by Tweedie's formula ``e − a s²/e`` far in the tail; a value of zero
    noise keeps its estimate (clipped to [1/n, 1]). Every entry is at least 1/n (the
    prior's smallest count); the entries need not sum to 1 (PowerNS projects them).
    """
    raw = _raw(raw)
    noise = _noise(noise, raw.size, "power")
    if alpha is not None:
        alpha = real(alpha, "alpha")
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
    groups, noiseless = _power_groups(raw, noise)
    if alpha is None:
        alpha = _fit(raw, noise.n, groups, noiseless).alpha
    out = np.empty(raw.size)
    for members, group in groups:
        out[members] = group.posterior_mean(alpha)
    out[noiseless] = np.clip(raw[noiseless] * noise.n, 1.0, noise.n)
    return out / noise.n


def power_ns(raw: Any, noise: Optional[NoiseModel] = None, *,
             alpha: Optional[float] = None) -> np.ndarray:
    """PowerNS: :func:`power`, then Norm-Sub (:func:`norm_sub`)."""
    return kernels.project_simplex(power(raw, noise, alpha=alpha))


# -- dispatch and queries ---------------------------------------------------------------------

_FUNCTIONS: Dict[str, Callable[..., np.ndarray]] = {
    "base_pos": base_pos, "post_pos": post_pos, "base_cut": base_cut, "norm": norm,
    "norm_mul": norm_mul, "norm_cut": norm_cut, "norm_sub": norm_sub, "mle_apx": mle_apx,
    "power": power, "power_ns": power_ns}


def apply(raw: Any, method: str, noise: Optional[NoiseModel] = None,
          **options: Any) -> np.ndarray:
    """The estimate of ``method`` (one of :data:`METHODS`) from a raw estimate; ``noise``
    for the methods of :data:`NOISE_METHODS`, ``options`` passed on (``alpha`` for Base-Cut
    and Power, ``max_iter`` / ``tol`` for MLE-Apx)."""
    one_of(method, METHODS, "method")
    function = _FUNCTIONS[method]
    if method in NOISE_METHODS:
        return function(raw, noise, **options)
    if options:
        raise TypeError(f"{method} takes no options, got {sorted(options)}")
    return function(raw)


def _query_index(query: Any, k: int, i: int) -> Any:
    if isinstance(query, range):
        if query.step != 1:
            raise ValueError(f"query {i}: a range must have step 1, got {query}")
        if not 0 <= query.start <= query.stop <= k:
            raise ValueError(f"query {i}: range {query} must lie within [0, {k}]")
        return query
    array = np.asarray(query)
    if array.dtype == np.bool_:
        if array.shape != (k,):
            raise ValueError(f"query {i}: a boolean mask must have shape ({k},), got "
                             f"{array.shape}")
        return np.flatnonzero(array)
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise TypeError(f"query {i} must be a range, a boolean mask or integer values, got "
                        f"dtype {array.dtype}")
    array = array.astype(np.int64).ravel()
    if array.size and (array.min() < 0 or array.max() >= k):
        raise ValueError(f"query {i}: values must lie in [0, {k})")
    if np.unique(array).size != array.size:
        raise ValueError(f"query {i} lists a value more than once (a query is a set)")
    return array


def query_sums(estimate: Any, queries: Any) -> np.ndarray:
    """``Σ_{x in S} estimate[x]`` for each query S: a ``range(a, b)`` of values, a boolean
    mask of shape (k,), or a sequence of distinct values in [0, k); or all the queries at
    once as a boolean matrix of shape (number of queries, k). Shape (number of queries,)."""
    estimate = _raw(estimate, "estimate")
    k = estimate.size
    if isinstance(queries, np.ndarray) and queries.ndim == 2:
        if queries.dtype != np.bool_ or queries.shape[1] != k:
            raise ValueError(f"a matrix of queries must be boolean of shape (q, {k}), got "
                             f"{queries.dtype} {queries.shape}")
        return _times(queries, estimate)
    if isinstance(queries, (range, np.ndarray)) and np.asarray(queries).ndim == 1:
        queries = [queries]
    prefix = None
    out = np.empty(len(queries))
    for i, query in enumerate(queries):
        index = _query_index(query, k, i)
        if isinstance(index, range):
            if prefix is None:
                prefix = np.concatenate(([0.0], np.cumsum(estimate)))
            out[i] = prefix[index.stop] - prefix[index.start]
        else:
            out[i] = float(np.sum(estimate[index]))
    return out


def answer(raw: Any, method: str, queries: Any,
           noise: Optional[NoiseModel] = None, **options: Any) -> np.ndarray:
    """Answers to set/range-sum queries (``query_sums``) from a raw estimate with one of the
    :data:`METHODS`: the sums over the method's estimate, except Post-Pos, which sums the raw
    estimate and sets a negative answer to 0."""
    estimate = apply(raw, method, noise, **options)
    sums = query_sums(estimate, queries)
    return np.maximum(sums, 0.0) if method == "post_pos" else sums
