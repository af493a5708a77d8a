"""Empirical Bayes decoding: a prior fitted to the estimates themselves, then each value's
Bayes estimate.

An unbiased ("raw") estimate ``p̃_x = p_x + noise`` of a heavy-tailed distribution over a
large domain is mostly noise: at ε = 1 and n = 10⁶ the noise has a standard deviation near
2·10⁻³ on every coordinate, and a Zipf distribution over 2¹⁴ values holds half of its mass in
thousands of values far smaller than that. The projection onto the simplex sets those values
to 0 and hands their mass to noise; the raw estimate cannot tell them apart either. What can
be estimated is how the k frequencies are *distributed*: the histogram of the p̃_x is that
distribution blurred by a known noise. This module estimates it (the prior), then replaces
each p̃_x by what the prior and p̃_x say about p_x:

1. **Prior.** The frequencies are modelled as k draws from an unknown distribution G on
   [0, 1] and ``p̃_x ~ N(p_x, v_x)`` with the variance ``v_x`` of the mechanism's raw estimate
   (known). G is the nonparametric maximum-likelihood estimate (NPMLE; Kiefer & Wolfowitz
   1956) restricted to a fixed grid of support points and fitted by EM (Jiang & Zhang 2009;
   Koenker & Mizera 2014 for the grid discretization), accelerated by SQUAREM (Varadhan &
   Roland 2008) with a safeguard: a concave maximization whose iterations never decrease the
   likelihood. The grid is 0, a geometric grid (ratio 1.1) up to half the smallest noise
   standard deviation σ, and steps of σ/2 above it wherever an estimate lies within 5σ. The
   estimates are binned first (width σ/16, within groups of σ equal to 2%) so that an
   iteration costs O(bins × grid), not O(k × grid).
2. **Smoothing.** The NPMLE is discrete with few atoms: in the sparse upper tail of a power
   law it clusters the large frequencies and pulls each towards its cluster. With a
   bandwidth h > 0 the prior is instead the maximum-likelihood mixture of log-normal
   components: Gaussians of standard deviation h in ``log p`` centred on the grid points
   (plus the atom at 0), fitted by the same EM. ``smoothing="cv"`` (default) picks h among
   :data:`SMOOTHING_CANDIDATES` by two-fold cross-validation of the likelihood (fitted on the
   values of even index, scored on the odd ones, and back): the NPMLE (h = 0) on sparse
   distributions, whose atoms are the truth, and h > 0 on power laws, where the NPMLE fitted
   on half of the values gives the other half's isolated large values almost no likelihood.
3. **Decision.** With ``loss="l1"`` (default) each value gets the τ-quantile of its
   posterior (each atom's mass spread uniformly over its grid cell), with one τ for all
   values, chosen so that the estimate sums to 1: the estimate of least expected ℓ1 error
   among those summing to 1 (the Lagrange condition of ``min Σ E|p_x − a_x|`` subject to
   ``Σ a_x = 1`` is that every ``a_x`` sits at the same posterior quantile). With
   ``loss="l2"``, the posterior means projected onto the simplex (the estimate of least
   expected squared ℓ2 error among distributions). Within a bin, the decision is
   interpolated linearly in the estimate between neighbouring bins.

The result is a distribution (non-negative, summing to 1). It costs O(k log k) for the
binning plus O(bins × grid) per EM iteration, at most 200 iterations per fit and nine fits
with the cross-validation; the memory is O(k + bins × grid). It is deterministic.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import kernels, memory
from ._validation import float_vector, integer, one_of, real, shown

__all__ = ["SMOOTHING_CANDIDATES", "Prior", "decode", "empirical_bayes", "fit_prior",
           "from_noise_model"]

#: The bandwidths (in natural-log units of the frequency) that ``smoothing="cv"`` chooses
#: from; 0 is the plain nonparametric maximum-likelihood estimate.
SMOOTHING_CANDIDATES = (0.0, 0.5, 1.0, 2.0)
#: Bins per standard deviation of the noise when the estimates are binned.
BINS_PER_SIGMA = 16
#: Relative step of the rounding of the noise's standard deviation into levels.
LEVEL_STEP = 0.02
#: At most this many bins (coarser bins when the estimates spread wider).
MAX_BINS = 8192
_LOG_RATIO = math.log(1.1)       # spacing of the grid below half the smallest σ
_LINEAR_STEP = 0.5               # spacing of the grid above it, in units of the smallest σ
_REACH = 5.0                     # grid points within 5 σ of some estimate are kept
_FLOOR = -300.0                  # log-likelihood ratios below e^-300 are treated as 0


class Prior(NamedTuple):
    """The fitted prior of :func:`fit_prior`."""

    grid: np.ndarray
    """Support points, shape (G,), increasing, ``grid[0] = 0``."""
    weights: np.ndarray
    """Prior probability of each support point, shape (G,), summing to 1."""
    smoothing: float
    """The width h of the log-normal components (0: the nonparametric maximum-likelihood
    estimate, atoms on the grid)."""
    log_likelihood: List[float]
    """Log-likelihood of the binned estimates under the prior (up to a constant) at the start
    and after each iteration of the final fit: never decreasing."""
    iterations: int
    """Accelerated EM iterations of the final fit."""
    cv_scores: Dict[float, float]
    """Cross-validated log-likelihood of each candidate h (empty unless chosen by
    ``smoothing="cv"``)."""


class _Bins(NamedTuple):
    center: np.ndarray    # mean estimate of each bin, shape (U,)
    sigma: np.ndarray     # noise standard deviation of each bin, shape (U,)
    count: np.ndarray     # number of values in each bin (float), shape (U,)
    index: np.ndarray     # bin of each value, shape (k,)
    level: np.ndarray     # noise level of each bin, shape (U,) (bins of one level are
                          # consecutive, by increasing center)


def _check_inputs(raw: Any, variance: Any) -> Tuple[np.ndarray, np.ndarray]:
    raw = float_vector(raw, "raw")
    if raw.size == 0:
        raise ValueError("raw must be a non-empty estimate, got shape (0,)")
    if np.ndim(variance) == 0 and not isinstance(variance, np.ndarray):
        value = real(variance, "variance")
        variance = np.full(raw.size, value)
    else:
        variance = float_vector(variance, "variance")
        if variance.shape != raw.shape:
            raise ValueError(f"variance must be a number or have the shape of raw {raw.shape}, "
                             f"got shape {variance.shape}")
    if not np.all(np.isfinite(variance)) or not np.all(variance > 0):
        bad = int(np.flatnonzero(~(np.isfinite(variance) & (variance > 0)))[0])
        raise ValueError(f"variance must be finite and > 0: element {bad} is {variance[bad]}")
    return raw, variance


def _bin(raw: np.ndarray, sigma: np.ndarray) -> _Bins:
    """Group the estimates by noise level and by estimate (width σ/16), coarser until there
    are at most :data:`MAX_BINS` groups."""
    k = raw.size
    memory.check("empirical Bayes", [("the binning of the estimates", 64 * k)])
    per_sigma, step = float(BINS_PER_SIGMA), LEVEL_STEP
    while True:
        level = np.round(np.log(sigma) / step)
        width = np.exp(level * step) / per_sigma
        position = np.floor(raw / width)
        order = np.lexsort((position, level))
        lev, pos = level[order], position[order]
        new = np.empty(k, dtype=bool)
        new[0] = True
        new[1:] = (lev[1:] != lev[:-1]) | (pos[1:] != pos[:-1])
        bins = int(new.sum())
        if bins <= MAX_BINS or (per_sigma < 1e-6 and step > 10.0):
            break
        per_sigma, step = per_sigma / 2.0, step * 2.0
    sorted_index = np.cumsum(new) - 1
    index = np.empty(k, dtype=np.int64)
    index[order] = sorted_index
    count = np.bincount(index, minlength=bins).astype(np.float64)
    center = np.bincount(index, weights=raw, minlength=bins) / count
    variance = np.bincount(index, weights=sigma * sigma, minlength=bins) / count
    return _Bins(center, np.sqrt(variance), count, index, lev[new])


def _grid(bins: _Bins, k: int, grid_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """Support points and their widths in log p (for the smoothing): 0; a geometric grid
    (ratio 1.1) from ``min(σ_min, 1/k)/1000`` to ``σ_min/2``; above it, steps of ``σ_min/2``
    within 5 σ of some estimate, coarser if needed to stay within ``grid_size`` points."""
    s_min, s_max = float(bins.sigma.min()), float(bins.sigma.max())
    switch = _LINEAR_STEP * s_min
    low = min(s_min, 1.0 / k) * 1e-3
    count_log = max(1, int(math.ceil(math.log(switch / low) / _LOG_RATIO)))
    budget_log = max(8, grid_size // 3)
    ratio = _LOG_RATIO if count_log <= budget_log else math.log(switch / low) / budget_log
    count_log = min(count_log, budget_log)
    logs = low * np.exp(ratio * np.arange(count_log))
    # the intervals of estimates' reach, merged
    starts = np.maximum(bins.center - _REACH * bins.sigma, switch)
    ends = bins.center + _REACH * bins.sigma
    keep = ends >= starts
    starts, ends = starts[keep], ends[keep]
    linear = np.zeros(0)
    if starts.size:
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])
        boundary = np.empty(starts.size, dtype=bool)
        boundary[0] = True
        boundary[1:] = starts[1:] > ends[:-1]
        first = np.flatnonzero(boundary)
        merged_start = starts[first]
        merged_end = np.append(ends[first[1:] - 1], ends[-1])
        budget = max(grid_size - count_log - 1, 16)
        step = _LINEAR_STEP * s_min
        while True:
            lo = np.ceil((merged_start - switch) / step)
            hi = np.floor((merged_end - switch) / step)
            sizes = np.maximum(hi - lo + 1, 0)
            total = float(sizes.sum())
            if total <= budget:
                break
            step *= max(total / budget, 1.01)
        pieces = [switch + step * np.arange(a, b + 1) for a, b in zip(lo, hi) if b >= a]
        if pieces:
            linear = np.unique(np.concatenate(pieces))
            linear = linear[linear > logs[-1]]
    grid = np.concatenate([[0.0], logs, linear])
    # widths in log p: the geometric part's ratio, the linear part's step / p
    widths = np.concatenate([[0.0], np.full(logs.size, ratio),
                             (step / linear) if linear.size else np.zeros(0)])
    return grid, widths


def _likelihood(bins: _Bins, grid: np.ndarray) -> np.ndarray:
    """``L[u, j] ∝ φ((center_u − grid_j)/σ_u)``, each row scaled to a maximum of 1."""
    cells = bins.center.size * grid.size
    memory.check("empirical Bayes", [
        ("the likelihood of the bins at the grid points, its components and posteriors",
         5 * 8 * cells), ("the smoothing kernels on the grid", 3 * 8 * grid.size ** 2)])
    z = (bins.center[:, None] - grid[None, :]) / bins.sigma[:, None]
    log_l = -0.5 * z * z
    log_l -= log_l.max(axis=1, keepdims=True)
    return np.where(log_l > _FLOOR, np.exp(np.maximum(log_l, _FLOOR)), 0.0)


def _smoother(grid: np.ndarray, widths: np.ndarray, h: float) -> Optional[np.ndarray]:
    """Row i: the prior component centred at grid point i, a Gaussian of standard deviation
    h in log p discretized on the grid (each point weighted by its width in log p); the
    atom at 0 is a component of its own. ``None`` for h = 0 (every component an atom)."""
    if h == 0.0:
        return None
    u = np.log(grid[1:])
    kernel = np.exp(-0.5 * ((u[:, None] - u[None, :]) / h) ** 2) * widths[None, 1:]
    kernel /= kernel.sum(axis=1, keepdims=True)
    smoother = np.zeros((grid.size, grid.size))
    smoother[0, 0] = 1.0
    smoother[1:, 1:] = kernel
    return smoother


def _times(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` by numpy's own loop, not BLAS: the same bits whatever the number
    of threads and the arrays' alignment (and, at these sizes, no slower)."""
    return np.einsum("ij,j->i", matrix, vector)


def _inner(a: np.ndarray, b: np.ndarray) -> float:
    """``a · b`` by numpy's own loop (see :func:`_times`)."""
    return float(np.einsum("i,i->", a, b))


def _log_likelihood(A: np.ndarray, count: np.ndarray, weights: np.ndarray) -> float:
    density = _times(A, weights)
    return _inner(count, np.log(np.maximum(density, 1e-300)))


def _em(A: np.ndarray, count: np.ndarray, max_iter: int, tol: float,
        record: bool = False) -> Tuple[np.ndarray, int, List[float]]:
    """Maximum-likelihood mixing weights of the components (columns of ``A``) for the bins
    (rows, with multiplicities ``count``): EM, accelerated by SQUAREM (Varadhan & Roland
    2008) with a safeguard that keeps an extrapolation only when it does not lower the
    likelihood, so the likelihood never decreases. Stops when an iteration raises the
    log-likelihood by less than ``tol`` relative to its magnitude."""
    size = A.shape[1]
    total = float(count.sum())

    def step(weights: np.ndarray) -> np.ndarray:
        density = np.maximum(_times(A, weights), 1e-300)
        updated = weights * np.einsum("ij,i->j", A, count / density) / total
        return updated / updated.sum()

    weights = np.full(size, 1.0 / size)
    current = _log_likelihood(A, count, weights)
    history = [current] if record else []
    iterations = 0
    for iterations in range(1, max_iter + 1):
        first = step(weights)
        second = step(first)
        candidate, value = second, _log_likelihood(A, count, second)
        r, v = first - weights, second - 2.0 * first + weights
        v_norm = math.sqrt(_inner(v, v))
        if v_norm > 0:
            alpha = min(-math.sqrt(_inner(r, r)) / v_norm, -1.0)
            # clipped into the interior: a weight set to 0 would stay 0 under EM forever
            jump = np.maximum(weights - 2.0 * alpha * r + alpha * alpha * v, 1e-3 * second)
            if jump.sum() > 0:
                jump = step(jump / jump.sum())
                jump_value = _log_likelihood(A, count, jump)
                if jump_value >= value:
                    candidate, value = jump, jump_value
        gain = value - current
        if gain < 0:  # numerical safety net: never accept a worse point
            candidate, value = weights, current
        weights, current = candidate, max(value, current)
        if record:
            history.append(current)
        if gain <= tol * max(1.0, abs(current)):
            break
    return weights, iterations, history


def _smoothing(smoothing: Any) -> Union[str, float]:
    if isinstance(smoothing, str):
        return one_of(smoothing, ("cv",), "smoothing")
    value = real(smoothing, "smoothing")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"smoothing must be 'cv' or a bandwidth >= 0, got {shown(smoothing)}")
    return value


def _prepare(raw: Any, variance: Any, grid_size: Any
             ) -> Tuple[np.ndarray, _Bins, np.ndarray, np.ndarray, np.ndarray]:
    raw, variance = _check_inputs(raw, variance)
    grid_size = integer(grid_size, "grid_size", minimum=32)
    bins = _bin(raw, np.sqrt(variance))
    grid, widths = _grid(bins, raw.size, grid_size)
    return raw, bins, grid, widths, _likelihood(bins, grid)


def _components(L: np.ndarray, smoother: Optional[np.ndarray]) -> np.ndarray:
    """The likelihood of each bin under each prior component."""
    return L if smoother is None else np.einsum("uj,ij->ui", L, smoother)


def _fit(bins: _Bins, grid: np.ndarray, widths: np.ndarray, L: np.ndarray,
         smoothing: Union[str, float], max_iter: int, tol: float) -> Prior:
    scores: Dict[float, float] = {}
    if smoothing == "cv":
        # two folds: the values of even and of odd index (an interleaving: values numbered
        # by frequency or by anything else fall evenly into both)
        folds = [np.bincount(bins.index[start::2], minlength=bins.count.size)
                 .astype(np.float64) for start in (0, 1)]
        for h in SMOOTHING_CANDIDATES:
            A = _components(L, _smoother(grid, widths, h))
            score = 0.0
            for train, test in ((0, 1), (1, 0)):
                if folds[train].sum() == 0 or folds[test].sum() == 0:
                    continue
                weights, _, _ = _em(A, folds[train], max_iter, tol)
                score += _log_likelihood(A, folds[test], weights)
            scores[h] = score
        best = max(scores.values())
        smoothing = min(h for h, score in scores.items() if score == best)
    smoother = _smoother(grid, widths, float(smoothing))
    weights, iterations, history = _em(_components(L, smoother), bins.count, max_iter, tol,
                                       record=True)
    prior = weights if smoother is None else np.einsum("ij,i->j", smoother, weights)
    return Prior(grid, prior / prior.sum(), float(smoothing), history, iterations, scores)


def fit_prior(raw: Any, variance: Any, *, smoothing: Union[str, float] = "cv",
              grid_size: int = 400, max_iter: int = 200, tol: float = 1e-9) -> Prior:
    """The prior of the frequencies that :func:`empirical_bayes` uses (steps 1 and 2 of the
    module description).

    Parameters
    ----------
    raw, variance, smoothing, grid_size, max_iter, tol
        As for :func:`empirical_bayes`.

    Returns
    -------
    Prior
        The support points, their weights, the bandwidth used, the log-likelihood history of
        the final fit and the cross-validation scores.
    """
    smoothing = _smoothing(smoothing)
    max_iter = integer(max_iter, "max_iter", minimum=1)
    tol = real(tol, "tol")
    _, bins, grid, widths, L = _prepare(raw, variance, grid_size)
    return _fit(bins, grid, widths, L, smoothing, max_iter, tol)


def _posterior(L: np.ndarray, weights: np.ndarray) -> np.ndarray:
    posterior = L * weights[None, :]
    total = posterior.sum(axis=1, keepdims=True)
    # a bin whose likely values all have prior weight 0 (underflow): its likelihood alone
    empty = total[:, 0] <= 0
    if empty.any():
        posterior[empty] = L[empty]
        total[empty] = L[empty].sum(axis=1, keepdims=True)
    return posterior / total


def _quantiles(cdf: np.ndarray, edges: np.ndarray, tau: float) -> np.ndarray:
    """The τ-quantile of each row's posterior, each atom's mass spread uniformly over its
    cell ``[edges[j], edges[j+1]]`` (the atom at 0 is a point)."""
    j = np.minimum((cdf < tau).sum(axis=1), cdf.shape[1] - 1)
    rows = np.arange(cdf.shape[0])
    below = np.where(j > 0, cdf[rows, j - 1], 0.0)
    mass = cdf[rows, j] - below
    fraction = np.clip((tau - below) / np.maximum(mass, 1e-300), 0.0, 1.0)
    return edges[j] + fraction * (edges[j + 1] - edges[j])


def _per_value(bins: _Bins, raw: np.ndarray, per_bin: np.ndarray) -> np.ndarray:
    """A per-bin quantity at every value: linear in the estimate between the centers of
    neighbouring bins of the same noise level."""
    u = bins.index
    center = bins.center[u]
    last = bins.center.size - 1
    up = raw >= center
    other = np.where(up, np.minimum(u + 1, last), np.maximum(u - 1, 0))
    same = (other != u) & (bins.level[other] == bins.level[u])
    other = np.where(same, other, u)
    gap = bins.center[other] - center
    t = np.where(gap != 0, (raw - center) / np.where(gap != 0, gap, 1.0), 0.0)
    return per_bin[u] + np.clip(t, 0.0, 1.0) * (per_bin[other] - per_bin[u])


def _l1_decision(bins: _Bins, raw: np.ndarray, grid: np.ndarray, posterior: np.ndarray
                 ) -> np.ndarray:
    cdf = np.cumsum(posterior, axis=1)
    cdf /= cdf[:, -1:]  # exactly 1 at the end: a rounded 1 - 1e-16 would send τ = 1 to the top
    # cell edges: the atom at 0 is the point [0, 0]; atom j >= 1 covers the midpoints
    # between its neighbours (the last one reaches as far above it as below)
    middles = (grid[1:] + grid[:-1]) / 2.0
    edges = np.concatenate([[0.0, 0.0], middles[1:],
                            [grid[-1] + (grid[-1] - middles[-1])]]) if grid.size > 1 \
        else np.array([0.0, 0.0])

    def total(tau: float) -> float:
        return _inner(bins.count, _quantiles(cdf, edges, tau))

    low, high = 0.0, 1.0
    if total(high) <= 1.0:
        low = high
    elif total(low) < 1.0:
        for _ in range(60):
            middle = (low + high) / 2.0
            if total(middle) < 1.0:
                low = middle
            else:
                high = middle
    estimate = _per_value(bins, raw, _quantiles(cdf, edges, low if low == high else high))
    # the bisection's and the interpolation's last rounding: a rescaling by ~1 + 1e-9; when
    # even the top quantiles sum to less than 1 (an estimate far below 1 in total), by more
    return _normalized(estimate)


def _normalized(estimate: np.ndarray) -> np.ndarray:
    total = float(estimate.sum())
    if not (total > 0 and math.isfinite(total)):
        return np.full(estimate.size, 1.0 / estimate.size)
    return estimate / total


def empirical_bayes(raw: Any, variance: Any, *, smoothing: Union[str, float] = "cv",
                    loss: str = "l1", grid_size: int = 400, max_iter: int = 200,
                    tol: float = 1e-9) -> np.ndarray:
    """Empirical Bayes estimate of a distribution from an unbiased estimate and its noise.

    The frequencies are treated as draws from a prior fitted to the estimates themselves by
    nonparametric maximum likelihood on a grid (Kiefer & Wolfowitz, "Consistency of the
    maximum likelihood estimator in the presence of infinitely many incidental parameters",
    Ann. Math. Statist. 1956; the grid EM of Jiang & Zhang, "General maximum likelihood
    empirical Bayes estimation of normal means", Ann. Statist. 2009, and Koenker & Mizera,
    "Convex optimization, shape constraints, compound decisions, and empirical Bayes
    rules", JASA 2014; SQUAREM of Varadhan & Roland, Scand. J. Statist. 2008), or as a
    maximum-likelihood mixture of log-normal components of width ``smoothing`` chosen by
    cross-validation; each frequency is then its Bayes estimate under that prior and the
    Gaussian noise ``N(p_x, variance_x)``, made a distribution (the three steps are in the
    module description).

    Parameters
    ----------
    raw : array_like of float, shape (k,)
        Unbiased estimate of the distribution (the ``"raw"`` decoder's output): finite; may
        be negative and need not sum to 1. An ndarray must have dtype float64.
    variance : float or array_like of float, shape (k,)
        Variance of each coordinate of ``raw`` (``mechanism.estimator_variance(p, n)`` at a
        pilot estimate p, or :func:`from_noise_model`): finite and > 0.
    smoothing : "cv" or float, default "cv"
        Width h >= 0 of the prior's log-normal components, in natural-log units of p (0:
        the plain nonparametric maximum-likelihood prior), or ``"cv"`` to choose it among
        :data:`SMOOTHING_CANDIDATES` by two-fold cross-validation.
    loss : {"l1", "l2"}, default "l1"
        ``"l1"``: every value at one common posterior quantile, the one at which the
        estimate sums to 1 (least expected ℓ1 error under the sum constraint). ``"l2"``: the
        posterior means projected onto the probability simplex (least expected squared ℓ2
        error among distributions).
    grid_size : int, default 400
        At most this many support points for the prior (at least 32).
    max_iter : int, default 200
        Accelerated EM iterations per fit, at most (each is three EM steps).
    tol : float, default 1e-9
        A fit stops when an iteration raises the log-likelihood by less than ``tol``
        relative to its magnitude.

    Returns
    -------
    ndarray of float64, shape (k,)
        A distribution: non-negative, summing to 1.

    Raises
    ------
    TypeError, ValueError
        For a ``raw`` that is not a finite 1-D float array, a ``variance`` that is not
        finite and positive with the shape of ``raw``, or an unknown option.
    MemoryError
        When the binning or the likelihood matrix does not fit the memory budget
        (:mod:`ldpdist.memory`).

    Notes
    -----
    The noise is modelled as Gaussian and independent across values: right for the
    frequency oracles at moderate n (their coordinates are binomial counts), an
    approximation for mechanisms whose coordinates are correlated. The estimate is
    deterministic: the cross-validation folds are the even and the odd values.

    Examples
    --------
    >>> import numpy as np
    >>> from ldpdist.empirical_bayes import empirical_bayes
    >>> rng = np.random.default_rng(0)
    >>> p = 1.0 / np.arange(1, 1001) ** 1.1
    >>> p /= p.sum()
    >>> raw = p + rng.normal(0.0, 2e-3, p.size)
    >>> estimate = empirical_bayes(raw, 4e-6)
    >>> bool(estimate.min() >= 0), round(float(estimate.sum()), 9)
    (True, 1.0)
    """
    smoothing = _smoothing(smoothing)
    one_of(loss, ("l1", "l2"), "loss")
    max_iter = integer(max_iter, "max_iter", minimum=1)
    tol = real(tol, "tol")
    raw, bins, grid, widths, L = _prepare(raw, variance, grid_size)
    prior = _fit(bins, grid, widths, L, smoothing, max_iter, tol)
    posterior = _posterior(L, prior.weights)
    if loss == "l1":
        return _l1_decision(bins, raw, grid, posterior)
    mean = _per_value(bins, raw, _times(posterior, grid))
    return kernels.project_simplex(mean)


def from_noise_model(raw: Any, noise: Any, **options: Any) -> np.ndarray:
    """:func:`empirical_bayes` with the variances of a
    :class:`ldpdist.consistency.NoiseModel`, evaluated at the projection of ``raw`` onto the
    simplex (the pilot estimate of the frequencies the variances depend on).

    Parameters
    ----------
    raw : array_like of float, shape (k,)
        The unbiased estimate.
    noise : ldpdist.consistency.NoiseModel
        The noise of ``raw`` (:func:`ldpdist.consistency.noise_model`). Values of variance
        0 among noisy ones get a variance 10⁻¹² times the largest; when no value has any
        noise, the result is the projection of ``raw`` onto the simplex.
    **options
        Passed to :func:`empirical_bayes` (``smoothing``, ``loss``, ``grid_size``,
        ``max_iter``, ``tol``).

    Returns
    -------
    ndarray of float64, shape (k,)
        A distribution.
    """
    raw = float_vector(raw, "raw")
    pilot = kernels.project_simplex(raw)
    variance = noise.variance(pilot)
    if not (variance > 0).any():
        # no noise at all (e.g. the robust constant of an estimate that is 0 on most
        # values): the estimate is taken as exact, and only made a distribution
        unknown = set(options) - {"smoothing", "loss", "grid_size", "max_iter", "tol"}
        if unknown:
            raise TypeError(f"unexpected options {sorted(unknown)}")
        _smoothing(options.get("smoothing", "cv"))
        one_of(options.get("loss", "l1"), ("l1", "l2"), "loss")
        return pilot
    # a value of zero variance among noisy ones: floor it far below the others
    return empirical_bayes(raw, np.maximum(variance, float(variance.max()) * 1e-12), **options)


def decode(mechanism: Any, counts: Any, n: int, **options: Any) -> np.ndarray:
    """The empirical Bayes estimate from a mechanism's aggregated ``counts`` of ``n``
    reports: its raw estimate, the variance of its raw estimate
    (:func:`ldpdist.consistency.noise_model`: exact when the mechanism has
    ``estimator_variance``, else a constant read from the raw estimate), then
    :func:`empirical_bayes` with ``options``.

    Parameters
    ----------
    mechanism : ldpdist.Mechanism
        The mechanism the reports come from.
    counts : ndarray
        Its aggregate (``Aggregator.counts``).
    n : int
        Number of reports (``Aggregator.n``), at least 1.
    **options
        Passed to :func:`empirical_bayes`.

    Returns
    -------
    ndarray of float64, shape (k,)
        A distribution.

    Examples
    --------
    >>> import numpy as np, ldpdist
    >>> from ldpdist import empirical_bayes
    >>> mech = ldpdist.OptimizedUnaryEncoding(k=1000, epsilon=1.0)
    >>> agg = mech.simulate(np.full(1000, 100, dtype=np.uint64), seed=1)
    >>> estimate = empirical_bayes.decode(mech, agg.counts, agg.n)
    >>> estimate.shape
    (1000,)
    """
    from . import consistency

    n = integer(n, "n", minimum=1)
    raw = mechanism._decode(counts, n, "raw")
    return from_noise_model(raw, consistency.noise_model(mechanism, n, raw), **options)
