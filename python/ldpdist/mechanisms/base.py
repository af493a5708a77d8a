"""The mechanism/estimator interface shared by every mechanism: :class:`Mechanism`, and
:class:`BitVectorMechanism` for the mechanisms whose reports are packed bit vectors.

A mechanism object holds public parameters only; it is cheap, immutable, comparable, and
serializable with :meth:`Mechanism.to_dict` / :func:`from_dict` so that clients and server
share one spec. Subclasses name their Rust class and, if they have parameters beyond
``k`` and ``epsilon``, extend ``_params``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Optional, Tuple, Union

import numpy as np

from .. import _core, memory, privacy
from .._validation import (U64_MAX, as_array, exact_sum_u64, integer, probability_vector,
                           real, seed_key, shown)
from ..decoders import DECODERS, decode
from ..errors import IntegrityError
from ..reports import ReportBatch, Reports, check_reports
from ..specs import SPEC_FORMAT, _REGISTRY, fingerprint, from_dict, register
from .aggregator import Aggregator

__all__ = ["Mechanism", "BitVectorMechanism", "from_dict", "register", "check_epsilon",
           "values_array", "SPEC_FORMAT", "_REGISTRY"]


def check_epsilon(epsilon: Any) -> float:
    """ε as a float: finite, > 0 and at most ``MAX_EPSILON`` (700: e^ε must stay finite).
    Whether the mechanism can represent it is checked after construction
    (``_core.check_realized``, the shared rule)."""
    epsilon = real(epsilon, "epsilon")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    if epsilon > _core.MAX_EPSILON:
        raise ValueError(f"epsilon = {epsilon!r} is too large: e^epsilon overflows double "
                         f"precision; the largest accepted is {_core.MAX_EPSILON!r}")
    return epsilon


def _refuse_bools(values: Any) -> None:
    """Sequences of Python/numpy bools convert silently to integers: refuse them by position."""
    if isinstance(values, (list, tuple)):
        for i, value in enumerate(values):
            if isinstance(value, (bool, np.bool_)):
                raise TypeError(f"values must be integers, not booleans: values[{i}] = {value!r}")


def values_array(values: Any, k: int) -> np.ndarray:
    """Validate user values: 1-D integers in [0, k); returned as uint32 (copied if needed)."""
    _refuse_bools(values)
    array = as_array(values, "values")
    if array.dtype.kind not in "iu":
        if array.size == 0 and array.dtype == np.float64 and not isinstance(values, np.ndarray):
            array = array.astype(np.int64)  # an empty list
        else:
            raise TypeError(
                f"values must be integers in [0, {k}), got dtype {array.dtype}"
                + ("" if array.dtype.kind != "f" else " (convert explicitly, e.g. values.astype(int))"))
    if array.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {array.shape}")
    if array.size:
        if array.dtype.kind == "i" and array.min() < 0:
            i = int(np.argmax(array < 0))
            raise ValueError(f"values must lie in [0, {k}): values[{i}] = {array[i]}")
        if array.max() >= k:
            i = int(np.argmax(array >= k))
            raise ValueError(f"values must lie in [0, {k}): values[{i}] = {array[i]}")
    if array.dtype != np.uint32 or not array.flags.c_contiguous or not array.flags.aligned:
        memory.check("privatize", [("the values as uint32", 4 * array.size)])
    if not array.flags.aligned:  # e.g. a buffer received from Dask; the core reads typed slices
        return np.array(array, dtype=np.uint32, order="C", copy=True)
    return np.ascontiguousarray(array, dtype=np.uint32)



def _python_int_counts(values: Any) -> np.ndarray:
    """A list of Python ints as uint64 counts: numpy turns ints past 2^63 mixed with small
    ones into float64 (rounding them), so they are converted one by one, exactly."""
    for i, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return np.asarray(values)  # refused by the dtype check with the usual message
        if not 0 <= value <= U64_MAX:
            raise ValueError(f"true_counts must be integers in [0, 2^64): true_counts[{i}] = {value}")
    return np.array([int(v) for v in values], dtype=np.uint64)

class Mechanism:
    """Base class: an ε-LDP mechanism for values in [0, k) and its estimators.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0 (natural log).
    """

    _core_class: ClassVar[Any]
    report_kind: ClassVar[str] = "index"
    #: Whether the mechanism is locally differentially private (has ``epsilon``). False for
    #: communication-limited schemes such as :class:`PublicCoinHashing`.
    private: ClassVar[bool] = True
    #: Whether reports use the client's own randomness (``privatize(values, seed=...)``).
    #: False when they are a deterministic function of the value and public randomness.
    randomized: ClassVar[bool] = True
    #: Whether the promised budgets differ between pairs of inputs (context-aware LDP,
    #: :mod:`ldpdist.privacy`); plain ε-LDP mechanisms promise ``uniform_budgets(k, ε)``.
    context_aware: ClassVar[bool] = False
    #: The decoder names :meth:`estimate` accepts (see :mod:`ldpdist.decoders`).
    decoders: ClassVar[Tuple[str, ...]] = DECODERS

    def __init__(self, k: int, epsilon: float):
        self._k = integer(k, "k", minimum=2, maximum=2**32)
        self._epsilon = check_epsilon(epsilon)
        self._core = self._make_core()
        if self._checks_realized_epsilon():
            _core.check_realized(type(self).__name__, self._epsilon, self.realized_epsilon)

    def _checks_realized_epsilon(self) -> bool:
        """Whether the shared rule on the realized ε applies (only an explicit, warned
        opt-out such as an uncalibrated i.i.d. matrix may return False)."""
        return True

    def _make_core(self) -> Any:
        return self._core_class(self._k, self._epsilon)

    # -- parameters --------------------------------------------------------------------

    @property
    def k(self) -> int:
        """Number of possible values."""
        return self._k

    @property
    def epsilon(self) -> float:
        """The privacy guarantee asked for."""
        return self._epsilon

    @property
    def realized_epsilon(self) -> float:
        """Exact max log-ratio of the channel actually used (never above ``epsilon``)."""
        return float(self._core.realized_epsilon)

    @property
    def output_size(self) -> int:
        """Number of distinct reports (index mechanisms) or bits per report (bit vectors)."""
        return int(self._core.output_size)

    @property
    def _statistic_size(self) -> int:
        """Length of the aggregated count vector (``output_size`` except for two-stage
        RAPPOR, whose aggregate has per-stage counts)."""
        return int(self._core.statistic_size)

    def _params(self) -> Dict[str, Any]:
        return {"k": self._k, "epsilon": self._epsilon}

    def to_dict(self) -> Dict[str, Any]:
        """JSON-safe spec; ``ldpdist.from_dict(m.to_dict()) == m``."""
        return {"mechanism": type(self).__name__, "format": SPEC_FORMAT, **self._params()}

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict` (see :mod:`ldpdist.specs`):
        the identity every reports file, :class:`~ldpdist.Reports` array and aggregator
        state made under this spec carries."""
        return self._report_provenance()[0]

    def _report_provenance(self) -> Tuple[str, str, Dict[str, Any]]:
        """(fingerprint, class name, spec) that :class:`~ldpdist.Reports` carry; computed
        once (a mechanism is immutable; the spec of a large partition is long)."""
        cached = self.__dict__.get("_provenance")
        if cached is None:
            spec = self.to_dict()
            cached = (fingerprint(spec), type(self).__name__, spec)
            self.__dict__["_provenance"] = cached
        return cached

    def _reports(self, array: np.ndarray) -> Reports:
        """The core's output tagged as this mechanism's reports (a view: nothing copied)."""
        return Reports._tagged(array, *self._report_provenance())

    def as_reports(self, reports: Any) -> Reports:
        """Declare an array made elsewhere as this mechanism's reports.

        :meth:`privatize` output is already :class:`~ldpdist.Reports`; everything that
        counts reports (:meth:`Aggregator.add`, :meth:`estimate`, ``split_reports``,
        :func:`~ldpdist.write_reports`) refuses a plain array, so that the users' values
        can never be counted as reports by mistake. ``as_reports`` is the explicit opt-in
        for reports that come from somewhere else: another implementation (e.g. the HR
        authors' reference code), a database, a hand-written test case.

        Parameters
        ----------
        reports : array_like
            The reports. Only the provenance claim is made here: their dtype, shape and
            values are validated where they are counted, as for any reports.

        Returns
        -------
        Reports
            A view of ``reports`` (no copy when it is already an ndarray) tagged with this
            mechanism's spec fingerprint; ``Reports`` of this spec are returned as they are.

        Raises
        ------
        SpecMismatchError
            When ``reports`` are :class:`~ldpdist.Reports` (or a
            :class:`~ldpdist.ReportBatch`) of another spec: re-labelling them would count
            them under the wrong spec (to do it on purpose, e.g. reports of a mechanism
            whose reports another one shares, strip the tag first:
            ``as_reports(np.asarray(reports))``).
        TypeError
            For a dask collection (use :func:`ldpdist.dask.aggregate`, which declares each
            partition) or a list holding booleans.

        Examples
        --------
        >>> import numpy as np, ldpdist
        >>> mech = ldpdist.HadamardResponse(k=4, epsilon=1.0)
        >>> external = np.array([1, 5, 2, 7], dtype=np.uint8)  # e.g. from the reference code
        >>> reports = mech.as_reports(external)
        >>> reports.mechanism, np.shares_memory(reports, external)
        ('HadamardResponse', True)
        >>> mech.estimate(reports).shape
        (4,)
        """
        return Reports(reports, self)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.to_dict().items())))

    def __repr__(self) -> str:
        params = ", ".join(f"{key}={value!r}" for key, value in self._params().items())
        return f"{type(self).__name__}({params})"

    # -- client side -------------------------------------------------------------------

    def privatize(self, values: Any, seed: Optional[int] = None) -> Reports:
        """Privatize one value per user.

        Parameters
        ----------
        values : array_like of int, shape (n,)
            Integers in [0, k). Floats, bools and out-of-range values raise.
        seed : int, optional
            ``None`` (default) draws fresh OS entropy; an integer gives reproducible reports,
            bit-identical whatever the thread count.

        Returns
        -------
        Reports, shape (n,), of the smallest unsigned dtype holding ``output_size - 1``
            (bit-vector mechanisms: uint8, shape ``(n, ceil(output_size / 8))``). A numpy
            array (:class:`~ldpdist.Reports` is an ndarray subclass, returned without a
            copy) tagged with this mechanism's spec fingerprint, which :meth:`Aggregator.add`
            and :meth:`estimate` check: slices, subsets and concatenations of them stay
            tagged, arithmetic on them does not.
        """
        return self._reports(self._core.privatize(values_array(values, self._k),
                                                  seed_key(seed)))

    def encode_string(self, values: Any, seed: Optional[int] = None) -> Reports:
        """Alias of :meth:`privatize`, named as in the HR authors' reference code."""
        return self.privatize(values, seed=seed)

    # -- server side -------------------------------------------------------------------

    def aggregator(self) -> Aggregator:
        """An empty, mergeable aggregator of this mechanism's reports."""
        return Aggregator(self)

    def estimate(self, reports: Union[Reports, ReportBatch], decoder: str = "project", *,
                 sparsity: Optional[int] = None, on_invalid: str = "raise",
                 **options: Any) -> np.ndarray:
        """Estimate the distribution from reports.

        Parameters
        ----------
        reports : Reports or ReportBatch
            Output of :meth:`privatize` (possibly sliced or concatenated from many
            clients), a batch read with :func:`ldpdist.read_reports`, or reports made
            elsewhere declared with :meth:`as_reports`. Reports of another spec raise
            :class:`~ldpdist.SpecMismatchError`; a plain array or list raises
            ``TypeError`` (passing the users' values instead of their reports is the
            mistake this catches).
        decoder : str, one of :attr:`decoders`
            ``"raw"``, ``"normalize"``, ``"project"``, ``"sparse_project"``, ``"ibu"``
            (and for the two-stage mechanisms ``"two_stage"``, ``"two_stage_project"``);
            see :mod:`ldpdist.decoders`.
        sparsity : int, optional
            Support size for ``decoder="sparse_project"`` and the two-stage decoders.
        on_invalid : {"raise", "drop"}
            Malformed reports raise ``ValueError`` (default), or are dropped and counted
            (see :attr:`Aggregator.dropped`).
        **options
            ``max_iter`` and ``tol`` for ``decoder="ibu"``.

        Returns
        -------
        ndarray of float64, shape (k,)
        """
        reports = self._typed_reports(reports, f"{type(self).__name__}.estimate")
        aggregator = self.aggregator().add(reports, on_invalid=on_invalid)
        return aggregator.estimate(decoder, sparsity=sparsity, **options)

    def _typed_reports(self, reports: Any, where: str) -> Union[Reports, ReportBatch]:
        """``reports`` once checked to be this mechanism's; ``TypeError`` /
        ``SpecMismatchError`` otherwise (see :func:`ldpdist.reports.check_reports`). A
        ReportBatch is returned as it is, for :meth:`Aggregator.add` to check with its
        batch id."""
        if isinstance(reports, ReportBatch):
            return reports
        return check_reports(self, reports, where)

    def decode_string(self, reports: Any, normalization: int = 0) -> np.ndarray:
        """Alias of :meth:`estimate` named as in the HR authors' reference code:
        ``normalization=0`` clips and normalizes, ``1`` projects onto the simplex.

        This is the interoperability entry point for the reference code's output, so a
        plain array (or list) is accepted and taken as this mechanism's reports (as if
        declared with :meth:`as_reports`); :class:`~ldpdist.Reports` and
        :class:`~ldpdist.ReportBatch` of another spec are still refused
        (:class:`~ldpdist.SpecMismatchError`). Use :meth:`estimate` to have plain arrays
        refused.
        """
        if not isinstance(normalization, (int, np.integer)) or normalization not in (0, 1):
            raise ValueError("normalization must be 0 (clip and normalize) or 1 (project), got "
                             f"{shown(normalization)}")
        if not isinstance(reports, ReportBatch):
            reports = self.as_reports(reports)
        return self.estimate(reports, decoder="normalize" if normalization == 0 else "project")

    def _decode(self, counts: np.ndarray, n: int, decoder: str, **options: Any) -> np.ndarray:
        return decode(self, counts, n, decoder, **options)

    def simulate(self, true_counts: Any, seed: Optional[int] = None) -> Aggregator:
        """Aggregate of privatizing ``true_counts[x]`` users holding each value x.

        The counts have exactly the distribution of privatizing those users one by one, but
        no per-user report is stored (see each mechanism for the cost). The total number of
        users must be below 2**64 (the counts are 64-bit).
        """
        counts = as_array(true_counts, "true_counts")
        if counts.dtype.kind in "fO" and isinstance(true_counts, (list, tuple)):
            counts = _python_int_counts(true_counts)
        if counts.dtype.kind not in "iu":
            raise TypeError(f"true_counts must be integers in [0, 2^64), got dtype {counts.dtype}")
        if counts.shape != (self._k,):
            raise ValueError(f"true_counts must have shape ({self._k},), got {counts.shape}")
        if counts.dtype.kind == "i" and counts.size and counts.min() < 0:
            i = int(np.argmax(counts < 0))
            raise ValueError(f"true_counts must be >= 0: true_counts[{i}] = {counts[i]}")
        if counts.dtype != np.uint64 or not counts.flags.c_contiguous:
            memory.check("simulate", [("true_counts as uint64", 8 * counts.size)])
        counts = np.ascontiguousarray(counts, dtype=np.uint64)
        n = exact_sum_u64(counts)
        if n > U64_MAX:
            raise ValueError(f"true_counts sum to {n} users, more than 2^64 − 1 (the counts "
                             "are 64-bit)")
        stats = self._core.simulate(counts, seed_key(seed))
        return Aggregator._from_counts(self, stats, n, batches={_random_id(): "simulate"})

    def channel_matrix(self, max_entries: int = 2**24) -> np.ndarray:
        """The exact channel Q (k × output_size, rows sum to 1) for verification.

        Raises ``ValueError`` when it has more than ``max_entries`` entries.
        """
        max_entries = integer(max_entries, "max_entries", minimum=1)
        return self._core.channel_matrix(max_entries)

    def budgets(self) -> np.ndarray:
        """The privacy budgets this mechanism promises, as a k × k budget matrix
        (:mod:`ldpdist.privacy`): ``uniform_budgets(k, epsilon)`` for plain ε-LDP;
        context-aware mechanisms override it."""
        return privacy.uniform_budgets(self._k, self._epsilon)

    def realized_budgets(self, max_entries: int = 2**24) -> np.ndarray:
        """The exact budget matrix of the channel actually used
        (``privacy.realized_budgets(channel_matrix())``), never above :meth:`budgets`
        entrywise. Context-aware mechanisms compute it in closed form; here it needs the
        channel, so it is refused past ``max_entries`` entries like :meth:`channel_matrix`."""
        return privacy.realized_budgets(self.channel_matrix(max_entries=max_entries))

    def _prepare_reports(self, reports: Any, drop: bool) -> "tuple[np.ndarray, int]":
        """Reports as a contiguous unsigned array for the core, and how many negative
        entries were dropped here (the core counts the rest of the invalid ones)."""
        array = _native(reports)
        if array.dtype.kind not in "iu":
            raise TypeError(f"reports must be integers, got dtype {array.dtype}")
        if array.ndim != 1:
            raise ValueError(f"reports must be one-dimensional, got shape {array.shape}")
        negative = 0
        if array.dtype.kind == "i":
            memory.check("aggregate", [("masks of the negative reports", 2 * array.size),
                                       ("the valid reports", array.nbytes),
                                       ("the reports as uint64", 8 * array.size)])
            bad = array < 0
            if bad.any():
                negative = int(bad.sum())
                if not drop:
                    i = int(np.argmax(bad))
                    raise ValueError(
                        f"{negative} of {array.size} reports are negative; the first is "
                        f"reports[{i}] = {array[i]} (reports lie in [0, {self._statistic_size}); "
                        "pass on_invalid='drop' to drop and count them)")
                array = array[~bad]
            array = array.astype(np.uint64)
        elif not array.flags.c_contiguous:
            memory.check("aggregate", [("a contiguous copy of the reports", array.nbytes)])
        return np.ascontiguousarray(array), negative

    def _check_counts(self, counts: np.ndarray, n: int) -> None:
        """Consistency of deserialized counts with the number of reports (exact: a uint64
        sum would wrap)."""
        total = exact_sum_u64(counts)
        if total != n:
            raise IntegrityError(f"corrupt aggregator: counts sum to {total}, not n = {n}")

    # -- accuracy of the raw estimate ----------------------------------------------------

    def _frequency_oracle(self) -> Optional[Tuple[float, float]]:
        """``(p_star, q_star)`` when the raw estimate is a *pure frequency oracle* (Wang,
        Blocki, Li & Jha, USENIX Security 2017): every report either supports a value x or
        not, a user holding x supports it with probability ``p_star`` and a user holding any
        other value with probability ``q_star``, and the raw estimate is
        ``(S_x/n - q_star)/(p_star - q_star)`` with ``S_x`` the supporting reports. The two
        numbers are those of the channel actually used (realized, after rounding). ``None``
        (the default) when the raw estimate is not of that form."""
        return None

    def _variance_arguments(self, p: Any, n: Any) -> Tuple[np.ndarray, int]:
        """``p`` checked as a distribution over [0, k) and ``n`` as an integer >= 1."""
        return probability_vector(p, self._k, "p"), integer(n, "n", minimum=1)

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Exact variance of each coordinate of the raw (unbiased) estimate.

        For n users whose values are drawn i.i.d. from ``p`` (not for fixed true counts:
        the multinomial spread of the values is included), each privatized once, and the
        estimate of ``decoder="raw"`` on their reports. Computed in closed form from the
        channel actually used (the realized probabilities), without the channel matrix.

        Here, for a pure frequency oracle (see the mechanism's estimation notes): a report
        supports x with probability ``s_x = q* + (p* - q*) p_x``, so
        ``Var = s_x (1 - s_x) / (n (p* - q*)^2)``. Mechanisms whose raw estimate has another
        form override this method.

        Parameters
        ----------
        p : array_like of float, shape (k,)
            The distribution of the users' values: finite, non-negative, summing to 1
            (within 1e-9). An ndarray must have dtype float64.
        n : int
            Number of users (reports), at least 1.

        Returns
        -------
        ndarray of float64, shape (k,)
            ``Var(p̂_x)`` for every value x. Its sum is the expected squared ℓ2 error of the
            raw estimate; ``sqrt(2/π) Σ sqrt(Var)`` approximates its expected ℓ1 error for
            large n.

        Raises
        ------
        TypeError, ValueError
            For a ``p`` that is not a distribution over [0, k) or an ``n`` that is not an
            integer >= 1.
        NotImplementedError
            For a mechanism without an unbiased raw estimate of closed-form variance.

        Examples
        --------
        >>> import numpy as np, ldpdist
        >>> mech = ldpdist.RandomizedResponse(k=4, epsilon=1.0)
        >>> var = mech.estimator_variance(np.full(4, 0.25), n=10_000)
        >>> var.shape, bool(np.all(var > 0))
        ((4,), True)
        """
        oracle = self._frequency_oracle()
        if oracle is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no closed-form variance of its raw estimate")
        p, n = self._variance_arguments(p, n)
        return _oracle_variance(oracle, p, n)

    # -- channel products for the iterative Bayesian update -------------------------------

    def _expected_frequencies(self, p: np.ndarray) -> np.ndarray:
        """Per-user expected value of the aggregated statistic under distribution p."""
        return self._core.expected_frequencies(np.ascontiguousarray(p, dtype=np.float64))

    def _channel_apply(self, w: np.ndarray) -> np.ndarray:
        """Adjoint of :meth:`_expected_frequencies`."""
        return self._core.channel_apply(np.ascontiguousarray(w, dtype=np.float64))



class BitVectorMechanism(Mechanism):
    """Base of mechanisms whose report is a bit vector (RAPPOR, unary encodings, subset
    selection).

    Reports are uint8 arrays of shape ``(n, ceil(output_size / 8))`` in ``numpy.packbits``
    layout (bit j of a report is ``np.unpackbits(row)[j]``; padding bits are 0); the
    aggregate is the vector of per-bit counts (length ``output_size``).
    """

    report_kind: ClassVar[str] = "bits"

    def _prepare_reports(self, reports: Any, drop: bool) -> "tuple[np.ndarray, int]":
        array = _native(reports)
        width = -(-self.output_size // 8)
        if array.dtype != np.uint8:
            raise TypeError(
                f"bit-vector reports must be uint8 rows from np.packbits, got dtype {array.dtype}")
        if array.ndim != 2 or array.shape[1] != width:
            raise ValueError(
                f"bit-vector reports must have shape (n, {width}), got {array.shape}")
        if not array.flags.c_contiguous:
            memory.check("aggregate", [("a contiguous copy of the reports", array.nbytes)])
        return np.ascontiguousarray(array), 0

    def _check_counts(self, counts: np.ndarray, n: int) -> None:
        if counts.size and int(counts.max()) > n:
            raise IntegrityError(f"corrupt aggregator: a bit count exceeds n = {n}")


def _native(reports: Any) -> np.ndarray:
    """Reports as an array in native byte order (a value-preserving copy when not)."""
    _refuse_bools(reports)
    array = as_array(reports, "reports")
    if array.dtype.kind in "iu" and not array.dtype.isnative:
        memory.check("aggregate", [("the reports in native byte order", array.nbytes)])
        array = array.astype(array.dtype.newbyteorder("="))
    elif not array.flags.aligned:
        # e.g. a buffer received from Dask at an odd offset: the core reads typed slices
        memory.check("aggregate", [("an aligned copy of the reports", array.nbytes)])
        array = np.array(array, order="C", copy=True)
    return array


def _oracle_variance(oracle: Tuple[float, float], p: np.ndarray, n: int) -> np.ndarray:
    """``s (1 - s) / (n (p* - q*)^2)`` with ``s = q* + (p* - q*) p``: the variance of a pure
    frequency oracle's estimate for n i.i.d. users (Wang, Blocki, Li & Jha 2017)."""
    p_star, q_star = oracle
    gap = p_star - q_star
    s = q_star + gap * p
    return s * (1.0 - s) / (n * gap * gap)


def _random_id() -> str:
    import os

    return os.urandom(32).hex()
