"""Query matrices: validation, the exact L2 sensitivity Δ2, reports checks (shared by the
protocols of :mod:`ldpdist.linear`)."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .. import _core, memory
from .._validation import as_array, integer, one_of, real, shown, shown_duration
from ..mechanisms.base import values_array
from ..reports import Reports, check_reports
from ..specs import checked_fields, fingerprint as spec_fingerprint

__all__ = ["QueryMatrix", "QueryProtocol", "l2_sensitivity", "PROJECTIONS",
           "SENSITIVITY_WORK_LIMIT"]

#: Server-side projections of a mean: none, onto conv{±a_v} (the paper's A·B_1^J), onto
#: conv{a_v} (tighter: A·p lies in it for every distribution p).
PROJECTIONS = ("none", "symmetric", "convex")

#: Relative slack on ``‖a_v‖ ≤ r``: a bound computed in floating point (e.g. ``r = 1`` for
#: unit columns normalised with ``/ np.linalg.norm``) may sit a few ulps below the norms.
NORM_SLACK = 1e-12

#: The default limit of the exact sensitivity search, in distance evaluations (a pair of
#: columns, or a column against a node of the search tree): about a minute of both cores of
#: a small machine. A search estimated above it is refused before it starts, naming the
#: estimate; pass ``max_sensitivity_work=None`` (or a larger number) to run it anyway.
SENSITIVITY_WORK_LIMIT = 4 * 10**9

#: Distance evaluations per second per core assumed by the time in the refusal message (a
#: rough figure, for the order of magnitude only).
_EVALUATIONS_PER_SECOND = 5 * 10**7


def _sensitivity(columns: np.ndarray, limit: Optional[int]) -> Tuple[float, Tuple[int, int]]:
    """(Δ2, pair) of the J × d ``columns`` by the certified search of the Rust core: refused
    before it starts when its estimate exceeds ``limit`` distance evaluations, shown with a
    progress bar (stderr is a terminal) when it runs for more than a few seconds, stopped by
    Ctrl-C, and stopped with a ``ValueError`` if it passes 4 × ``limit`` after all."""
    search = _core.LinearDiameterSearch(columns)
    n = len(search)
    if n == 0:
        value, pair = search.result()
        return float(value), (int(pair[0]), int(pair[1]))
    estimate = search.estimate(limit)
    j, d = columns.shape
    if limit is not None and estimate > limit:
        threads = max(1, os.cpu_count() or 1)
        seconds = estimate * max(d, 2) / 2 / (_EVALUATIONS_PER_SECOND * threads)
        raise ValueError(
            f"the exact L2 sensitivity of this {d} × {j} query matrix needs about "
            f"{estimate:.2g} distance evaluations (over {limit:.2g}, the limit; roughly "
            f"{shown_duration(seconds)} on {threads} core(s)): its columns lie close to a sphere, "
            "where the search can rule out few pairs. Pass max_sensitivity_work=None (or a "
            "larger number) to compute it anyway: it shows progress and stops on Ctrl-C")
    max_work = None if limit is None else 4 * limit
    seconds = estimate * max(d, 2) / 2 / (_EVALUATIONS_PER_SECOND * max(1, os.cpu_count() or 1))
    if seconds < 2.0:
        search.run(0, n, max_work)
    else:
        bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(total=n, desc="exact L2 sensitivity", unit=" columns", file=sys.stderr,
                       leave=False)
        step = max(1, -(-n // 200))
        try:
            for start in range(0, n, step):
                search.run(start, min(n, start + step), max_work)
                if bar is not None:
                    bar.update(min(n, start + step) - start)
        finally:
            if bar is not None:
                bar.close()
    value, pair = search.result()
    return float(value), (int(pair[0]), int(pair[1]))


@dataclass(frozen=True)
class QueryMatrix:
    """A validated query matrix ``A`` (d × J): column ``a_v`` is the answer vector of a user
    holding ``v``.

    Attributes
    ----------
    matrix : ndarray, shape (d, J), float64, read-only
        ``A`` (a C-contiguous copy of the caller's array).
    columns : ndarray, shape (J, d), float64, read-only
        ``A.T`` in C order (what the Rust kernels take: a user's column is contiguous).
    r : float
        The column-norm bound: the caller's ``r``, else ``max_v ‖a_v‖``.
    max_norm : float
        ``max_v ‖a_v‖``.
    sensitivity : float
        ``Δ2 = max_{v, v'} ‖a_v − a_v'‖`` (exact, see :func:`l2_sensitivity`), computed when
        first asked for.
    sensitivity_pair : (int, int)
        The lexicographically first pair of columns at distance Δ2.
    """

    matrix: np.ndarray
    columns: np.ndarray
    r: float
    max_norm: float
    max_sensitivity_work: Optional[int] = SENSITIVITY_WORK_LIMIT

    def _diameter(self) -> Tuple[float, Tuple[int, int]]:
        cached = self.__dict__.get("_diameter_cache")
        if cached is None:
            cached = _sensitivity(self.columns, self.max_sensitivity_work)
            self.__dict__["_diameter_cache"] = cached
        return cached

    @property
    def sensitivity(self) -> float:
        """Δ2 (computed on first use; see :func:`l2_sensitivity`)."""
        return self._diameter()[0]

    @property
    def sensitivity_pair(self) -> Tuple[int, int]:
        """The lexicographically first pair of columns at distance Δ2."""
        return self._diameter()[1]

    @property
    def all_equal(self) -> bool:
        """Whether every column equals the first (Δ2 = 0), without the search."""
        return not bool((self.matrix != self.matrix[:, :1]).any())

    @property
    def d(self) -> int:
        """Number of queries (rows of ``A``)."""
        return int(self.matrix.shape[0])

    @property
    def domain_size(self) -> int:
        """J, the number of possible user values (columns of ``A``)."""
        return int(self.matrix.shape[1])

    @property
    def rank(self) -> int:
        """``numpy.linalg.matrix_rank(A)`` (numpy's default tolerance)."""
        return int(np.linalg.matrix_rank(self.matrix))

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the shape (two little-endian uint64) and the float64 bytes of ``A``
        in C order: two parties holding the same matrix get the same fingerprint."""
        digest = hashlib.sha256(np.asarray(self.matrix.shape, dtype="<u8").tobytes())
        digest.update(np.ascontiguousarray(self.matrix, dtype="<f8").tobytes())
        return digest.hexdigest()

    @classmethod
    def of(cls, queries: Any, r: Optional[float] = None, *,
           max_sensitivity_work: Optional[int] = SENSITIVITY_WORK_LIMIT) -> "QueryMatrix":
        """Validate ``queries`` (d × J, finite float64; d ≥ 1, J ≥ 1) and the bound ``r``
        (every column norm must be ≤ r·(1 + 1e-12)); ``TypeError``/``ValueError`` naming the
        first offending entry or column. Columns whose squared norms overflow double
        precision (entries beyond about 1.3e154) are refused: rescale them.
        ``max_sensitivity_work`` limits the search of :attr:`sensitivity` (distance
        evaluations; None: no limit)."""
        if max_sensitivity_work is not None:
            max_sensitivity_work = integer(max_sensitivity_work, "max_sensitivity_work",
                                           minimum=1)
        array = as_array(queries, "queries")
        if isinstance(queries, np.ndarray) and array.dtype != np.float64:
            if array.dtype.kind not in "iu":
                raise TypeError(f"queries must have dtype float64, got {array.dtype}")
        elif not isinstance(queries, np.ndarray) and array.dtype.kind not in "biuf":
            raise TypeError(f"queries must be real numbers (float64), got {shown(queries)}")
        if array.dtype.kind == "b":
            raise TypeError("queries must be real numbers, not booleans")
        if array.ndim != 2:
            raise ValueError(f"queries must be a 2-D array (d queries × J values), got shape "
                             f"{array.shape}")
        d, j = array.shape
        if d < 1 or j < 1:
            raise ValueError(f"queries must have d ≥ 1 rows (queries) and J ≥ 1 columns "
                             f"(values), got shape {array.shape}")
        if j > 2**32:
            raise ValueError(f"at most 2**32 values (columns), got J = {j}")
        memory.check("the query matrix", [("a copy of the queries and its transpose",
                                           16 * array.size)])
        matrix = np.array(array, dtype=np.float64, order="C", copy=True)
        bad = ~np.isfinite(matrix)
        if bad.any():
            k, v = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"queries must be finite: queries[{k}, {v}] (query {k}, column "
                             f"{v}) is {matrix[k, v]}")
        with np.errstate(over="ignore"):
            norms = np.sqrt(np.einsum("kv,kv->v", matrix, matrix))
        if not np.isfinite(norms).all():
            v = int(np.argmax(~np.isfinite(norms)))
            raise ValueError(f"column {v} of queries is too large for double precision (its "
                             "squared norm overflows; the largest entry is "
                             f"{float(np.abs(matrix[:, v]).max())!r}): rescale the queries, for "
                             "example divide them by a power of 2")
        max_norm = float(norms.max())
        if r is None:
            bound = max_norm
        else:
            bound = real(r, "r")
            if bound < 0:
                raise ValueError(f"r must be ≥ 0, got {bound}")
            over = norms > bound * (1 + NORM_SLACK)
            if over.any():
                v = int(np.argmax(over))
                raise ValueError(f"column {v} of queries has norm {float(norms[v])!r} > r = {bound!r}; "
                                 "every column norm must be ≤ r")
        columns = np.ascontiguousarray(matrix.T)
        matrix.setflags(write=False)
        columns.setflags(write=False)
        return cls(matrix, columns, bound, max_norm, max_sensitivity_work)

    def values(self, values: Any) -> np.ndarray:
        """User values as a uint32 array, checked to lie in [0, J) (naming the first that
        does not)."""
        return values_array(values, self.domain_size)

    def project(self, mean: np.ndarray, projection: str, tol: float) -> np.ndarray:
        """``mean`` projected as ``projection`` says (``"none"``, ``"symmetric"`` or ``"convex"``), by
        :func:`ldpdist.kernels.project_hull` to a duality gap ≤ ``tol``; a projection stopped
        before that gap is returned with a ``RuntimeWarning`` giving its certified gap."""
        projection = one_of(projection, PROJECTIONS, "projection")
        if projection == "none":
            return mean
        from ..kernels import project_hull

        result = project_hull(self.matrix, mean, symmetric=projection == "symmetric", tol=tol)
        if not result.converged:
            import warnings

            warnings.warn(f"the {projection} projection stopped after {result.iterations} "
                          f"iterations at duality gap {result.gap:.3g} > tol = {tol:g}; the "
                          "point returned is within sqrt(gap) of the exact projection",
                          RuntimeWarning, stacklevel=3)
        return result.point

    def reports(self, reports: Any, name: str = "reports") -> np.ndarray:
        """Reports as a C-contiguous float64 (n × d) array; wrong type, dimension or width is
        refused here (non-finite entries are refused by the Rust mean, in the same pass)."""
        array = as_array(reports, name)
        if array.dtype != np.float64:
            raise TypeError(f"{name} must be a float64 array of shape (n, {self.d}), got dtype "
                            f"{array.dtype}")
        if array.ndim != 2 or array.shape[1] != self.d:
            raise ValueError(f"{name} must have shape (n, d) = (n, {self.d}), got "
                             f"{array.shape}")
        if not array.flags.c_contiguous:
            memory.check("estimate", [(f"a contiguous copy of {name}", 8 * array.size)])
            array = np.ascontiguousarray(array)
        return array


def l2_sensitivity(queries: Any, *,
                   max_sensitivity_work: Optional[int] = SENSITIVITY_WORK_LIMIT) -> float:
    """The exact L2 sensitivity ``Δ2 = max_{v, v'} ‖a_v − a_v'‖`` of a query matrix
    (d × J): the diameter of its columns, between 0 (all columns equal) and ``2·max‖a_v‖``
    (antipodal columns).

    Computed in Rust from coordinate differences (never the cancelling
    ``‖a‖² + ‖b‖² − 2⟨a, b⟩``), within a relative ``(d/2 + 2)·2⁻⁵³`` of the exact value: the
    same bits as the scan of every pair, but by a search that skips, on certified bounds, the
    pairs that cannot reach the maximum (merged duplicate columns, angular windows for d = 2,
    a ball tree otherwise). Gaussian-like columns take about O(J log J); columns on a sphere
    in d ≥ 3 are the hard case. The search estimates its work first and refuses (``ValueError``
    naming the estimate) when it exceeds ``max_sensitivity_work`` distance evaluations
    (default ``SENSITIVITY_WORK_LIMIT``, about a minute; None: no limit); a long search
    shows a progress bar on a terminal and stops on Ctrl-C. The same result on any number of
    threads.
    """
    return QueryMatrix.of(queries, max_sensitivity_work=max_sensitivity_work).sensitivity


class QueryProtocol:
    """What the offline protocols share: a validated :class:`QueryMatrix`, ε, σ and the
    paper-faithful flag (set by the subclass's ``__init__``), their description, the
    check of a spec they are rebuilt from, and the provenance of their reports.

    Reports: ``privatize`` returns :class:`~ldpdist.Reports` tagged with
    :attr:`fingerprint`, and ``estimate`` accepts only reports of this protocol's spec (the
    same rule as the distribution-estimation mechanisms: another protocol's reports raise
    :class:`~ldpdist.SpecMismatchError`, a plain array ``TypeError`` unless declared with
    :meth:`as_reports`)."""

    _queries: QueryMatrix
    _epsilon: float
    _sigma: float
    _paper_faithful: bool
    _reports_noun = "protocol"

    def to_dict(self) -> Dict[str, Any]:  # pragma: no cover - every protocol defines it
        raise NotImplementedError

    def _report_provenance(self) -> Tuple[str, str, Dict[str, Any]]:
        """(fingerprint, class name, spec) that this protocol's :class:`~ldpdist.Reports`
        carry: the spec is :meth:`to_dict` without the query matrix (``queries_sha256``
        identifies it); computed once."""
        cached = self.__dict__.get("_provenance")
        if cached is None:
            spec = {key: value for key, value in self.to_dict().items() if key != "queries"}
            cached = (spec_fingerprint(spec), type(self).__name__, spec)
            self.__dict__["_provenance"] = cached
        return cached

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict` without the query matrix
        (whose SHA-256 it holds): the spec fingerprint this protocol's reports carry."""
        return self._report_provenance()[0]

    def as_reports(self, reports: Any) -> Reports:
        """Declare an array made elsewhere as this protocol's reports.

        ``privatize`` output is already :class:`~ldpdist.Reports`; ``estimate`` refuses a
        plain array. ``as_reports`` is the explicit opt-in for reports from another system
        or a hand-written test case: it only makes the provenance claim (the usual checks
        of dtype, shape and finiteness happen in ``estimate``).

        Parameters
        ----------
        reports : array_like, shape (n, d)

        Returns
        -------
        Reports
            A view of ``reports`` (no copy for an ndarray) tagged with :attr:`fingerprint`.
            Reports of another spec raise :class:`~ldpdist.SpecMismatchError`.
        """
        return Reports(reports, self)

    def _reports(self, array: np.ndarray) -> Reports:
        return Reports._tagged(array, *self._report_provenance())

    def _checked_reports(self, reports: Any, where: str) -> np.ndarray:
        """The plain float64 (n × d) array of this protocol's reports (see the class
        documentation for the provenance rule)."""
        typed = check_reports(self, reports, f"{type(self).__name__}.{where}")
        return self._queries.reports(typed.view(np.ndarray))

    @property
    def queries(self) -> np.ndarray:
        """The query matrix A (d × J, read-only float64)."""
        return self._queries.matrix

    @property
    def d(self) -> int:
        """Number of queries (report width)."""
        return self._queries.d

    @property
    def domain_size(self) -> int:
        """J, the number of user values (columns of A)."""
        return self._queries.domain_size

    @property
    def r(self) -> float:
        """The column-norm bound (given, or the largest column norm)."""
        return self._queries.r

    @property
    def epsilon(self) -> float:
        """The privacy parameter ε asked for."""
        return self._epsilon

    @property
    def paper_faithful(self) -> bool:
        """Whether the paper's formulas are used as printed (warned; NOT private)."""
        return self._paper_faithful

    @property
    def sigma(self) -> float:
        """The standard deviation per coordinate of the noise (Gaussian) or of the proposal
        (rejection sampling)."""
        return self._sigma

    @classmethod
    def _rebuilt(cls, spec: Dict[str, Any], build: Callable[[np.ndarray], Any],
                 fields: Tuple[str, ...], optional: Tuple[str, ...] = ()) -> Any:
        """``build(queries)`` from a ``to_dict`` spec, refused (``ValueError``) when the spec
        lacks one of ``fields`` or holds another field than ``fields`` and ``optional``
        (naming it), is another protocol's, or its fingerprint or σ disagree with the
        rebuilt protocol."""
        name = cls.__name__
        checked_fields(spec, f"the spec of {name}", ("protocol",) + fields, optional)
        if spec["protocol"] != name:
            raise ValueError(f"not a {name} spec: protocol = {shown(spec['protocol'])}")
        try:
            queries = np.asarray(spec["queries"], dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"the spec's field 'queries' is not a matrix of numbers: "
                             f"{' '.join(str(exc).split())[:200]}") from None
        try:
            made = build(queries)
        except TypeError as exc:  # a field of the wrong type: the spec is invalid
            raise ValueError(f"invalid parameters for {name}: {exc}") from None
        if made._queries.fingerprint() != spec.get("queries_sha256"):
            raise ValueError("the spec's query matrix does not match its fingerprint")
        if made.sigma != spec.get("sigma"):
            raise ValueError(f"the spec's sigma {spec.get('sigma')!r} differs from the one "
                             f"recomputed, {made.sigma!r}")
        return made
