"""Joint estimation of hashed candidates: removing the collisions between the candidates.

TreeHist and the count-mean sketches (CMS, HCMS) estimate a candidate x from the R cells
(one per public hash function r) that x hashes to: cell ``r * g + h_r(x)`` of R blocks of g
buckets. The independent estimate of x is exactly unbiased for

.. math::

    \\sum_{x'} D[x, x'] f(x'), \\qquad D[x, x'] = \\frac{g\\,\\pi(x, x') - 1}{g - 1},

where ``pi(x, x')`` is the fraction of the R hash functions under which x and x' share a
bucket (``D[x, x] = 1``) and the sum runs over every value of the domain; the values
outside the candidates are assumed to collide with each candidate at the rate of a random
hash (``pi = 1/g``, so ``D = 0``: the assumption of the independent estimator). Over the
candidates, ``D`` is the operator of the least-squares fit of the expected cells to the
observed ones (``D = (g A A^T / R - 1 1^T) / (g - 1)`` with A the candidates' 0/1 cell
incidence), symmetric positive semi-definite and close to the identity; solving
``D f = raw`` (conjugate gradients, each step one pass over the R × C cells) removes the
collisions between the candidates: the solution is exactly unbiased whenever the users'
values lie among the candidates.

Over random hash functions the mean of ``diag(D^-1)`` is ``1 / (1 - λ)``,
``λ = (C - 1) / (R (g - 1))`` for C candidates (a Marchenko–Pastur law: C vectors in the
``R (g - 1)`` dimensions the cells leave free), the variance inflation of the joint
estimate; past ``λ = 1`` the candidates cannot be told apart (D is singular).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from .. import _core

__all__ = ["Cells", "cells_of", "collision_operator", "decollide", "solve", "Solution", "load",
           "MAX_ITERATIONS", "Blend", "blend", "excess_variance"]

#: Conjugate-gradient steps at most (about 10 to 30 are needed for λ up to 1/2).
MAX_ITERATIONS = 200


class Solution(NamedTuple):
    """The result of :func:`solve`: the estimates, the number of steps taken, and whether
    the residual reached the tolerance."""

    x: np.ndarray
    iterations: int
    converged: bool


def load(candidates: int, R: int, g: int) -> float:
    """``λ = (C - 1) / (R (g - 1))``: the candidates' share of the degrees of freedom of
    R blocks of g cells (module documentation)."""
    return (candidates - 1) / (R * (g - 1))


#: The candidates' cells in the Rust kernel: ``Cells(flat, g)`` from an ``(R, C)`` int64
#: array of cell indices ``r * g + h_r(x)``; ``Cells.level_hash(prefixes, keys, g)``
#: (TreeHist's level hash) and ``Cells.sketch_hash(values, salts, m)`` (the count-mean
#: sketch's row hash) compute them. ``cells.gather(table)`` is ``sum_r table[r * g + h_r(x)]``
#: (float64, added in increasing r, as ``table.take(flat).sum(axis=0)``).
Cells = _core.CollisionCells


def cells_of(flat: "np.ndarray | Cells", R: int, g: int) -> Cells:
    """The :data:`Cells` of ``flat`` (shape (R, C), entries ``r * g + h_r(x)``; ``Cells``
    are passed through after a check of R and g)."""
    if isinstance(flat, Cells):
        if flat.rows != R or flat.g != g:
            raise ValueError(f"the cells have R = {flat.rows}, g = {flat.g}; expected {R}, {g}")
        return flat
    flat = np.asarray(flat)
    if flat.ndim != 2 or flat.shape[0] != R:
        raise ValueError(f"flat must have shape (R, C) = ({R}, C), got {flat.shape}")
    return Cells(np.ascontiguousarray(flat, dtype=np.int64), int(g))


def collision_operator(flat: "np.ndarray | Cells", R: int,
                       g: int) -> Callable[[np.ndarray], np.ndarray]:
    """``v -> D v`` for the candidates whose cells are ``flat`` (shape (R, C), entries
    ``r * g + h_r(x)``, or their :data:`Cells`): ``D[x, x'] = (g * pi(x, x') - 1) / (g - 1)``,
    ``pi(x, x')`` the fraction of the R hash functions under which x and x' share a bucket
    (D[x, x] = 1).

    The scatter into the ``R * g`` cells and the gather back (``R * C`` additions each) run
    in the Rust kernel (:data:`Cells`: parallel, the GIL released), in a fixed order whatever
    the number of threads: each cell adds its candidates in increasing x, each candidate
    adds its R cells in increasing r. That is numpy's order for
    ``np.bincount(flat.ravel(), weights)`` then ``take(flat).sum(axis=0)``, so the results
    are bit-identical to that numpy formulation (used before the kernel). ``MemoryError``
    when the cells (1 to 4 bytes per candidate and hash, ``8 R g`` bytes of cell sums)
    exceed the memory budget."""
    cells = cells_of(flat, R, g)

    def apply(v: np.ndarray) -> np.ndarray:
        shared = cells.shared_sums(np.ascontiguousarray(v, dtype=np.float64)) / R  # (pi v)(x)
        return (g * shared - v.sum()) / (g - 1)

    return apply


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a * b))  # numpy's own summation: no BLAS, no thread dependence


def solve(raw: np.ndarray, flat: "np.ndarray | Cells", R: int, g: int, *, atol: float = 0.0,
          max_iterations: int = MAX_ITERATIONS) -> Solution:
    """The solution f of ``D f = raw`` by conjugate gradients from ``f = raw`` (D of
    :func:`collision_operator`), at most ``min(2 C + 10, max_iterations)`` steps. It stops
    when the residual's Euclidean norm is at most ``max(1e-13 ||raw||, atol)``, or when a
    search direction has no positive curvature (D singular along it: converged if the
    residual is then within the tolerance). Deterministic: no BLAS, numpy's summation."""
    if raw.size <= 1:
        return Solution(raw.copy(), 0, True)
    apply = collision_operator(flat, R, g)
    x = raw.copy()
    r = raw - apply(x)
    p = r.copy()
    rs = _dot(r, r)
    scale = max(_dot(raw, raw), 1e-300)
    tolerance = max(1e-26 * scale, float(atol) ** 2)
    steps = 0
    for _ in range(min(2 * raw.size + 10, max_iterations)):
        if rs <= tolerance:  # relative residual 1e-13, or the absolute tolerance
            break
        Ap = apply(p)
        curvature = _dot(p, Ap)
        if curvature <= 0:
            break
        steps += 1
        alpha = rs / curvature
        x += alpha * p
        r -= alpha * Ap
        rs, previous = _dot(r, r), rs
        p = r + (rs / previous) * p
    return Solution(x, steps, rs <= tolerance)


def decollide(raw: np.ndarray, flat: "np.ndarray | Cells", R: int, g: int) -> np.ndarray:
    """The solution f of ``D f = raw`` (:func:`solve` to a relative residual of 1e-13): the
    estimates with the collisions between the candidates themselves removed."""
    return solve(raw, flat, R, g).x


class Blend(NamedTuple):
    """The result of :func:`blend`: the weight w of the joint estimate in
    ``(1 - w) raw + w joint``, the squared distance ``||raw - joint||^2`` of the two
    estimates, and the joint estimate's excess variance V (summed over the candidates)."""

    weight: float
    distance: float
    excess_variance: float


def excess_variance(variances: np.ndarray, lam: float, g: int) -> float:
    """``V = (g - 1) / g · λ / (1 - λ) · sum(variances)``: the joint estimate's variance
    minus the independent one's, summed over the candidates (``variances`` the independent
    estimates' variances, λ of :func:`load`; :func:`blend`). Infinite for λ >= 1."""
    if lam >= 1.0:
        return math.inf
    return (g - 1) / g * lam / (1.0 - lam) * float(np.sum(variances))


def blend(raw: np.ndarray, joint: np.ndarray, variances: np.ndarray, lam: float,
          g: int) -> Blend:
    """The weight ``w = max(0, 1 - V / ||raw - joint||^2)`` (V of :func:`excess_variance`)
    of the estimate ``(1 - w) raw + w joint`` of the smallest estimated mean squared error,
    summed over the candidates, among the combinations of the independent estimate ``raw``
    (whose variances are ``variances``) and the joint one ``joint`` (the solution of
    ``D f = raw``).

    Why: write ``Σ`` for the covariance of ``raw``. Two candidates share the noise of the
    cells they share, so ``Σ ≈ S Π S`` (S the diagonal of the standard errors,
    ``Π = (1 1^T + (g - 1) D) / g`` the fraction of the hash functions under which two
    candidates share a bucket). Then ``Cov(raw, joint) = Σ D^-1`` has the diagonal of
    ``Σ`` (up to its ``1 1^T / g`` part) and ``Var(joint) ≈ Σ (1 + κ)`` with
    ``κ = (g - 1) / g · λ / (1 - λ)`` (over random hash functions the mean of the diagonal
    of ``D^-1`` is ``1 / (1 - λ)``, module documentation), so with
    ``β = (D - I) f`` the independent estimate's bias, summed over the candidates,

    * MSE(w) = ``tr Σ + w^2 V + (1 - w)^2 ||β||^2``, V = κ tr Σ (w = 0: the independent
      estimate; w = 1: the joint one, exactly unbiased), smallest at
      ``w = ||β||^2 / (||β||^2 + V)``;
    * ``b = raw - joint = (I - D^-1) raw`` is an unbiased estimate of β, and its noise part
      has the expected squared norm ``tr((I - D^-1) Σ (I - D^-1)) ≈ V``, so
      ``E||b||^2 ≈ ||β||^2 + V`` and the plug-in weight is ``1 - V / ||b||^2`` (zero when
      ``||b||^2 <= V``: no detectable bias).

    Its MSE, ``tr Σ + V ||β||^2 / (||β||^2 + V)``, is at most that of either estimate. Both
    sides come from the data: nothing beyond the solve. w = 0 when λ >= 1 (the joint
    estimate is not identifiable)."""
    difference = raw - joint
    distance = _dot(difference, difference)
    excess = excess_variance(variances, lam, g)
    weight = 1.0 - excess / distance if distance > excess else 0.0
    return Blend(weight, distance, excess)
