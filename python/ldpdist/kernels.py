"""Numerical kernels of ldpdist, implemented in Rust (``ldpdist._core``).

All functions take and return numpy arrays, release the GIL while they compute, and run on
all cores (rayon; set ``RAYON_NUM_THREADS`` to limit them). Seeded results do not depend on
the number of threads. An input that must be copied first (not C-contiguous, e.g. a
``np.broadcast_to`` view, which owns no memory however large it looks) is copied only after
the memory guard accepted the copy and the result (``MemoryError`` naming both otherwise,
see :mod:`ldpdist.memory`). The functions, by family:

fwht, fwht_inplace, fwht_int
    Unnormalized Walsh–Hadamard transform ``H @ x`` in Sylvester order,
    ``H[r, c] = (-1)**popcount(r & c)``.
project_simplex, project_sparse_simplex
    Euclidean projections onto the probability simplex and its s-sparse subset.
SignMatrix, sign_column
    Seeded, bit-packed ±1 matrices whose column ``j`` is a pure function of ``(seed, j)``.
omp, omp_details
    Orthogonal matching pursuit on a dense float64 matrix or a ``SignMatrix``.
project_hull
    Euclidean projection onto the convex hull of a matrix's columns (optionally with their
    negatives), with a certified duality gap.
sample_uniform, sample_bernoulli
    Exact, reproducible parallel samplers (the building blocks of the mechanisms).
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from . import _core, memory
from ._validation import float64_array, float_vector, int64_vector, integer, real, seed_key

__all__ = [
    "SIGN_KINDS",
    "HullProjection",
    "OmpResult",
    "SignMatrix",
    "fwht",
    "fwht_inplace",
    "fwht_int",
    "omp",
    "omp_details",
    "project_hull",
    "project_simplex",
    "project_sparse_simplex",
    "sample_bernoulli",
    "sample_uniform",
    "sign_column",
]

SIGN_KINDS = ("rademacher", "bernoulli", "balanced")
# Gram entries m − 2·popcount(…) are exact int32, so matrices have at most 2**31 − 1 rows.
MAX_ROWS = 2**31 - 1


# --------------------------------------------------------------------------------------
# Walsh–Hadamard transform


def fwht(x: Any) -> np.ndarray:
    """Unnormalized fast Walsh–Hadamard transform ``H @ x``.

    Parameters
    ----------
    x : array_like of float64, shape (n,)
        ``n = 2**j`` for some ``j >= 0``. Arrays must be float64 (no silent casts);
        lists of numbers are converted.

    Returns
    -------
    ndarray of float64, shape (n,)
        A new array; ``fwht(fwht(x)) == n * x`` up to rounding.

    Raises
    ------
    TypeError
        ``x`` is an array of another dtype.
    ValueError
        ``x`` is not 1-D, its length is not a power of two, or it holds NaN/inf.
    """
    # Finiteness is checked in Rust (same message), saving a pass over x.
    return _core.fwht(float_vector(x, "x", finite=False, operation="fwht",
                                   result_itemsize=8))


def fwht_inplace(x: np.ndarray) -> None:
    """Transform a contiguous, writeable float64 array in place (``x[:] = H @ x``)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float64:
        raise TypeError("fwht_inplace needs a float64 numpy array")
    if x.ndim != 1 or not x.flags.c_contiguous or not x.flags.writeable:
        raise ValueError("fwht_inplace needs a 1-D, C-contiguous, writeable array")
    _core.fwht_inplace(x)  # checks finiteness before transforming


def fwht_int(x: Any) -> np.ndarray:
    """Exact Walsh–Hadamard transform of integer counts, as int64.

    Useful for decoding histograms of reports without rounding. Raises ``ValueError`` when
    ``sum(|x|) >= 2**63`` (the result could overflow).
    """
    return _core.fwht_int(int64_vector(x, "x", operation="fwht_int", result_itemsize=8))


# --------------------------------------------------------------------------------------
# Simplex projections


def project_simplex(v: Any) -> np.ndarray:
    """Euclidean projection onto the probability simplex ``{p >= 0, sum(p) = 1}``.

    ``p = max(v - theta, 0)`` with the threshold found by the sort-based rule (Held et al.
    1974; Duchi et al. 2008) after discarding entries that provably fall outside the support,
    so typical inputs cost O(k) rather than a full sort.

    Parameters
    ----------
    v : array_like of float64, shape (k,)
        Finite values, k >= 1.

    Returns
    -------
    ndarray of float64, shape (k,)
    """
    # Finiteness is checked in Rust (same message), saving a pass over v.
    return _core.project_simplex(float_vector(v, "v", finite=False,
                                              operation="project_simplex",
                                              result_itemsize=8))


def project_sparse_simplex(v: Any, s: int) -> np.ndarray:
    """Exact Euclidean projection onto the s-sparse simplex.

    Keeps the ``s`` largest entries of ``v`` (signed; ties go to the lower index), projects
    them onto the simplex and zeros the rest (Kyrillidis et al. 2013, Theorem 1).

    Parameters
    ----------
    v : array_like of float64, shape (k,)
    s : int, 1 <= s <= k

    Returns
    -------
    ndarray of float64, shape (k,) with at most ``s`` non-zeros.
    """
    v = float_vector(v, "v", finite=False, operation="project_sparse_simplex",
                     result_itemsize=8)
    s = integer(s, "s", minimum=1, maximum=v.size)
    return _core.project_sparse_simplex(v, s)


# --------------------------------------------------------------------------------------
# Sign matrices


def _sign_kind(kind: Any, p: Any) -> tuple[str, float]:
    if kind not in SIGN_KINDS:
        raise ValueError(f"kind must be one of {SIGN_KINDS}, got {kind!r}")
    p = real(p, "p")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p (the probability of +1) must lie strictly between 0 and 1, got {p}")
    if kind == "rademacher" and p != 0.5:
        raise ValueError(f"kind='rademacher' has p = 0.5; use kind='bernoulli' for p = {p}")
    return kind, p


class SignMatrix:
    """A seeded m×k matrix of ±1 entries, stored bit-packed (``k * ceil(m/64) * 8`` bytes).

    Column ``j`` is a pure function of ``(seed, j)``: a client computes its own column with
    :func:`sign_column` in O(m) without the rest of the matrix. The generator is specified in
    the documentation (:doc:`/reference/formats`, "Seeded sign matrices") and pinned by test
    vectors.

    Parameters
    ----------
    seed : int in [0, 2**256)
        Public seed (the ChaCha20 key is ``seed.to_bytes(32, "little")``).
    m, k : int
        Rows (1 <= m <= 2**31 - 1) and columns (k >= 1).
    kind : {"rademacher", "bernoulli", "balanced"}
        i.i.d. fair signs; i.i.d. with ``P(+1) = p``; or exactly ``floor(p*m + 1/2)``
        entries +1 per column at uniformly random rows.
    p : float in (0, 1)
        Probability (or fraction) of +1; must be 0.5 for "rademacher".
    """

    def __init__(self, seed: int, m: int, k: int, kind: str = "rademacher", p: float = 0.5):
        key = seed_key(seed)
        if key is None:
            raise TypeError("a SignMatrix needs an integer seed (it is public randomness)")
        self.seed: int = int(seed)
        kind, p = _sign_kind(kind, p)
        m = integer(m, "m", minimum=1, maximum=MAX_ROWS)
        k = integer(k, "k", minimum=1, maximum=sys.maxsize)
        self._inner = _core.SignMatrix(key, m, k, kind, p)

    @property
    def m(self) -> int:
        """Number of rows."""
        return self._inner.m

    @property
    def k(self) -> int:
        """Number of columns."""
        return self._inner.k

    @property
    def shape(self) -> tuple[int, int]:
        return (self._inner.m, self._inner.k)

    @property
    def kind(self) -> str:
        return self._inner.kind

    @property
    def p(self) -> float:
        return self._inner.p

    @property
    def nbytes(self) -> int:
        """Bytes of packed storage."""
        return self._inner.nbytes

    def __repr__(self) -> str:
        extra = "" if self.kind == "rademacher" else f", p={self.p}"
        return f"SignMatrix(seed={self.seed}, m={self.m}, k={self.k}, kind={self.kind!r}{extra})"

    def _column_index(self, j: Any) -> int:
        return integer(j, "j", minimum=0, maximum=self.k - 1)

    def column(self, j: int) -> np.ndarray:
        """Column ``j`` as an int8 array of ±1, shape (m,)."""
        return self._inner.column(self._column_index(j))

    def column_ones(self, j: int) -> int:
        """Number of +1 entries in column ``j``."""
        return self._inner.column_ones(self._column_index(j))

    def to_dense(self) -> np.ndarray:
        """The matrix as float64 ±1, shape (m, k). For tests and small sizes only."""
        return self._inner.to_dense()

    def rmatvec(self, r: Any) -> np.ndarray:
        """``A.T @ r`` for real ``r`` of shape (m,); returns shape (k,)."""
        return self._inner.rmatvec(float_vector(r, "r"))

    def matvec(self, x: Any) -> np.ndarray:
        """``A @ x`` for real ``x`` of shape (k,) (zeros in ``x`` cost nothing); shape (m,)."""
        return self._inner.matvec(float_vector(x, "x"))

    def gram_column(self, j: int) -> np.ndarray:
        """Column ``j`` of ``A.T @ A``, exactly, as int32 of shape (k,)."""
        return self._inner.gram_column(self._column_index(j))


def sign_column(seed: int, m: int, j: int, kind: str = "rademacher", p: float = 0.5) -> np.ndarray:
    """Column ``j`` of ``SignMatrix(seed, m, k, kind, p)`` (for any k > j), computed alone.

    This is what a client runs: O(m) time and memory. Returns int8 ±1 of shape (m,).
    """
    key = seed_key(seed)
    if key is None:
        raise TypeError("sign_column needs an integer seed")
    kind, p = _sign_kind(kind, p)
    m = integer(m, "m", minimum=1, maximum=MAX_ROWS)
    j = integer(j, "j", minimum=0, maximum=2**64 - 1)
    return _core.column_signs(key, m, kind, p, j)


# --------------------------------------------------------------------------------------
# Orthogonal matching pursuit


class OmpResult(NamedTuple):
    """Outcome of :func:`omp_details`."""

    coef: np.ndarray
    """float64 (k,): the solution, zero off the support."""
    support: list[int]
    """Chosen columns, in the order they were chosen."""
    residual_norm: float
    """``||y - A @ coef - intercept||_2``."""
    stop: str
    """Why it stopped: "sparsity" (s atoms), "tolerance" (residual <= tol), "exact_fit"
    (residual <= 1e-12 * ||y||), "dependent" (the next atom was in the span of the chosen
    ones) or "orthogonal" (the residual is orthogonal to every remaining column)."""
    intercept: float = 0.0
    """Coefficient of the all-ones atom (``intercept=True``), else 0."""


def omp_details(A: np.ndarray | SignMatrix, y: Any, s: int,
                tol: float | None = None, *, intercept: bool = False) -> OmpResult:
    """Orthogonal matching pursuit, with the support and the stopping reason.

    See :func:`omp` for the parameters.
    """
    y = float_vector(y, "y", finite=False)
    if isinstance(A, SignMatrix):
        m, k = A.shape
    elif isinstance(A, np.ndarray):
        if A.dtype != np.float64:
            raise TypeError(f"A must be float64 or a SignMatrix, got dtype {A.dtype}")
        if A.ndim != 2:
            raise ValueError(f"A must be two-dimensional, got shape {A.shape}")
        m, k = A.shape
    else:
        raise TypeError(f"A must be a float64 ndarray or a SignMatrix, got {type(A).__name__}")
    if y.size != m:
        raise ValueError(f"y has length {y.size} but A has {m} rows")
    s = integer(s, "s", minimum=1, maximum=min(m, k))
    if tol is not None:
        tol = real(tol, "tol")
        if tol < 0:
            raise ValueError(f"tol must be ≥ 0, got {tol}")
    if isinstance(A, SignMatrix):
        result = _core.omp_sign(A._inner, y, s, tol, bool(intercept))
    else:
        if not (A.flags.c_contiguous or A.flags.f_contiguous):
            memory.check("omp", [("a contiguous copy of A", 8 * A.size)])
            A = np.ascontiguousarray(A)
        result = _core.omp_dense(A, y, s, tol, bool(intercept))  # checks NaN/inf in Rust
    return OmpResult(*result)


def omp(A: np.ndarray | SignMatrix, y: Any, s: int, tol: float | None = None, *,
        intercept: bool = False) -> np.ndarray:
    """Orthogonal matching pursuit: a sparse ``x`` with ``A @ x ≈ y``.

    Each step adds the column with the largest ``|A[:, j] @ r|`` (ties to the lower index;
    columns are used as given, not renormalized, as in scikit-learn's ``orthogonal_mp``) and
    refits least squares on the support through an incrementally updated Cholesky factor.
    On a :class:`SignMatrix` the ±1 entries are used as they are (callers rescale), never
    expanded to floats: correlations are updated with exact Gram columns
    ``m - 2*popcount(col_i ^ col_j)``.

    Parameters
    ----------
    A : ndarray of float64, shape (m, k), or SignMatrix
    y : array_like of float64, shape (m,)
    s : int
        Maximum number of atoms, ``1 <= s <= min(m, k)``.
    tol : float, optional
        Also stop once ``||y - A @ x||_2 <= tol``.
    intercept : bool, default False
        Fit ``y ≈ A @ x + beta`` with the all-ones vector as an extra atom that is always in
        the support and does not count towards ``s`` (``beta`` is in
        :func:`omp_details`'s result). This is the exact linear model of compressive
        privatization, where the channel adds an unknown constant to ``A @ x``.

    Returns
    -------
    ndarray of float64, shape (k,)

    Notes
    -----
    The run also stops early when the residual is explained to rounding precision
    (``<= 1e-12 * ||y||``), when the next atom is numerically dependent on the chosen ones, or
    when the residual is orthogonal to every remaining column; :func:`omp_details` says which.
    """
    return omp_details(A, y, s, tol, intercept=intercept).coef


# --------------------------------------------------------------------------------------
# Projection onto a convex hull


class HullProjection(NamedTuple):
    """Outcome of :func:`project_hull`."""

    point: np.ndarray
    """float64 (d,): the projected point, a convex combination of the vertices."""
    gap: float
    """The Frank–Wolfe duality gap at ``point`` (squared units of the points): an upper
    bound on ``||point - P(y)||**2`` and on ``(||point - y||**2 - ||P(y) - y||**2) / 2``."""
    iterations: int
    """Full scans of the columns (one ``A.T @ g`` each), after the initial one."""
    converged: bool
    """Whether ``gap <= tol``. False when ``max_iter`` scans were not enough, or when
    ``tol`` is below what double precision can certify; ``point`` is then the best point
    found, with its own gap."""


def project_hull(points: Any, y: Any, *, symmetric: bool = True, tol: float = 1e-9,
                 max_iter: int = 10_000) -> HullProjection:
    """Euclidean projection of ``y`` onto the convex hull of the columns of ``points``.

    With ``symmetric=True`` the hull is ``conv{±a_v}`` (the linear-queries paper's
    ``L = A·B_1^J``, the set of ``A @ x`` with ``||x||_1 <= 1``); with ``symmetric=False`` it
    is ``conv{a_v}`` (the set of ``A @ p`` for ``p`` in the probability simplex). Solved by
    Wolfe's minimum-norm-point algorithm (a Frank–Wolfe method with an active set of at most
    ``d + 1`` vertices that terminates on polytopes), whose linear minimizations run first on
    a small working set of vertices and then, to certify, over all columns: each iteration is
    one scan ``A.T @ g`` (O(dJ), parallel over column blocks). Results are bit-identical on any
    number of threads.

    Parameters
    ----------
    points : ndarray of float64, shape (d, J)
        The vertices ``a_v`` as columns, ``d >= 1``, ``J >= 1``, finite. C order is read in
        place; other layouts are copied once.
    y : array_like of float64, shape (d,)
        The point to project (finite).
    symmetric : bool, default True
        Project onto ``conv{±a_v}`` (True) or ``conv{a_v}`` (False).
    tol : float, default 1e-9
        Stop when the duality gap ``<(w - y), (w - s)>`` (``s`` the vertex minimizing
        ``<w - y, s>``) is ``<= tol``. Absolute, in squared units of the points: it bounds
        ``||w - P(y)||**2``, so the returned point is within ``sqrt(tol)`` of the projection.
    max_iter : int, default 10000
        Maximum number of full scans; when reached, ``converged`` is False.

    Returns
    -------
    HullProjection
        ``(point, gap, iterations, converged)``.

    Raises
    ------
    TypeError
        ``points`` or ``y`` is an array of another dtype, or an argument has a wrong type.
    ValueError
        Wrong shapes, an empty matrix, NaN/inf entries (named by position), ``tol <= 0`` or
        ``max_iter < 1``.
    MemoryError
        The working buffers (about ``12 * d**2`` bytes for large d) exceed the memory budget.
    """
    points = float64_array(points, "points", "a 2-D array of real numbers")
    if points.ndim != 2:
        raise ValueError(f"points must be two-dimensional (d, J), got shape {points.shape}")
    d, j = points.shape
    if d < 1 or j < 1:
        raise ValueError(f"points must have at least one row and one column, got shape "
                         f"{points.shape}")
    y = float_vector(y, "y")
    if y.size != d:
        raise ValueError(f"y has length {y.size} but the points have dimension d = {d}")
    if not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    tol = real(tol, "tol")
    if tol <= 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    max_iter = integer(max_iter, "max_iter", minimum=1, maximum=2**63 - 1)
    if not points.flags.c_contiguous:
        memory.check("project_hull's C-order copy of points", [("points", 8 * points.size)],
                     hint="pass points in C order (numpy's default) to avoid the copy")
        points = np.ascontiguousarray(points)
    # NaN/inf in points are reported by Rust (element (i, j)), saving a pass over the matrix.
    result = _core.project_hull(points, y, bool(symmetric), tol, max_iter)
    return HullProjection(*result)


# --------------------------------------------------------------------------------------
# Sampling


def sample_uniform(n: int, size: int, seed: int | None = None) -> np.ndarray:
    """``size`` independent exact draws from ``{0, …, n-1}``, as uint64.

    Parallel and reproducible: with an integer ``seed`` the result is bit-identical whatever
    the thread count; ``seed=None`` uses OS entropy.
    """
    n = integer(n, "n", minimum=1, maximum=2**32)
    size = integer(size, "size", minimum=0, maximum=sys.maxsize)
    return _core.sample_uniform(seed_key(seed), n, size)


def sample_bernoulli(p: float, size: int, seed: int | None = None) -> np.ndarray:
    """``size`` independent Bernoulli(p) draws, exact for the binary value of ``p``; bool."""
    p = real(p, "p")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    size = integer(size, "size", minimum=0, maximum=sys.maxsize)
    return _core.sample_bernoulli(seed_key(seed), p, size)
