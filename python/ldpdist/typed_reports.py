"""Reports in memory: arrays of reports that say which spec made them.

A report array is only meaningful under the spec that made it, and nothing in a plain array
says which spec that was (or that it holds reports at all rather than the users' values).
This module gives reports their provenance in memory:

* :class:`Reports` is the numpy array that ``privatize`` returns, tagged with the spec
  fingerprint, class name and spec of the mechanism that made it (the tag follows the data
  through views, slices and joins, not through arithmetic);
* :class:`ReportBatch` is one batch of reports with its spec, fingerprint and batch id (what
  :func:`~ldpdist.read_reports` returns and an aggregator counts at most once);
* :func:`check_reports` is the check everything that counts or writes reports applies
  (:meth:`Aggregator.add <ldpdist.Aggregator.add>`, ``estimate``, :func:`write_reports
  <ldpdist.write_reports>`, :func:`ldpdist.dask.aggregate`, …): a plain array is refused
  unless the caller declares it with ``mechanism.as_reports(array)``, and reports of another
  spec raise :class:`~ldpdist.SpecMismatchError`;
* :func:`provenance_json` / :func:`provenance_from_json` carry the tag beside a raw array
  between processes (:mod:`ldpdist.dask`).

Nothing here reads or writes files: the reports file format, which carries the same
provenance on disk, is :mod:`ldpdist.reports`. Every name here is also importable from
:mod:`ldpdist.reports` (and ``Reports`` and ``ReportBatch`` from :mod:`ldpdist`), the
documented paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from ._validation import as_array
from .errors import SpecMismatchError
from .specs import canonical_json, checked_fields, parse_json, spec_difference, spec_summary

__all__ = ["Reports", "ReportBatch", "Provenance", "check_reports", "provenance_json",
           "provenance_from_json"]


#: What a mechanism (or a linear-query protocol) gives :class:`Reports`: its spec
#: fingerprint, its class name and its spec dict (``Mechanism._report_provenance``).
Provenance = Tuple[str, str, Dict[str, Any]]


def _provenance_of(owner: Any) -> Provenance:
    try:
        provenance = owner._report_provenance
    except AttributeError:
        raise TypeError("reports are declared for an ldpdist mechanism (or a linear-query "
                        f"protocol), got {type(owner).__name__}") from None
    return provenance()


def _plain(value: Any) -> Any:
    """``value`` without the Reports tag (a zero-copy ndarray view); anything else as is,
    tuples and lists element by element (ufunc ``out=`` tuples, concatenate's sequence)."""
    if isinstance(value, Reports):
        return value.view(np.ndarray)
    if isinstance(value, (tuple, list)) and any(isinstance(v, Reports) for v in value):
        return type(value)(_plain(v) for v in value)
    return value


class Reports(np.ndarray):
    """A numpy array of reports that knows which spec made it.

    :meth:`Mechanism.privatize <ldpdist.Mechanism.privatize>` returns ``Reports``: the
    reports array itself (no copy) tagged with the spec fingerprint of the mechanism that
    made it. Everything that counts reports (:meth:`Aggregator.add
    <ldpdist.Aggregator.add>`, ``estimate``, ``split_reports``, :func:`write_reports`,
    :func:`ldpdist.dask.aggregate`) checks that tag: reports of another spec raise
    :class:`~ldpdist.SpecMismatchError`, and a plain array raises ``TypeError`` (passing the
    users' *values* instead of their reports is the mistake this catches: for many
    mechanisms values are valid report indices and would be counted without any error).
    Reports made elsewhere (another implementation, a database, a hand-written test case)
    are declared with ``mechanism.as_reports(array)``, which is ``Reports(array,
    mechanism)``. Two entry points take untagged arrays by design, as declarations:
    ``decode_string`` (the name of the HR authors' reference code, for its plain arrays) and
    :func:`ldpdist.dask.aggregate` for untagged partitions (reports read from storage);
    both still refuse ``Reports`` of another spec.

    A ``Reports`` is an ``ndarray`` subclass and behaves as one everywhere (indexing,
    ``len``, ``dtype``, ``shape``, ``np.save``, comparisons, passing it to numpy or to
    other libraries). The tag follows the data, not the arithmetic:

    * kept by views, slices, fancy and boolean indexing, ``copy()``, ``astype`` (a subset
      or a copy of reports is still reports of that spec), reordering functions such as
      ``np.sort`` and ``np.delete``, pickling and ``copy.deepcopy``;
    * kept by ``np.concatenate`` / ``np.stack`` / ``np.vstack`` / ``np.hstack`` when every
      input is ``Reports`` of one fingerprint (batches of one spec joined); any other mix
      gives a plain ndarray;
    * dropped by every ufunc and arithmetic result (``reports + 1``, ``reports == x``,
      ``reports.sum()``), by functions that make new values (``np.zeros_like``,
      ``np.insert``, ``np.where``, ``np.unpackbits``), by ``.view(dtype)`` to another dtype
      (a reinterpretation of the bytes), and by ``np.asarray(reports)`` /
      ``np.array(reports)``, which give the plain array (zero-copy for ``np.asarray``).

    The tag records where the data came from; it is not a seal: writing into a ``Reports``
    (``reports[0] = 5``) keeps it. Reports files (:mod:`ldpdist.reports`) carry a checksum
    as well.

    Parameters
    ----------
    array : array_like
        The reports (not copied when it is already an ndarray). A ``Reports`` or a
        :class:`ReportBatch` of another spec raises :class:`~ldpdist.SpecMismatchError`.
    mechanism : Mechanism or linear-query protocol
        The mechanism whose reports they are.

    Attributes
    ----------
    fingerprint : str
        The spec fingerprint of the mechanism that made the reports (:mod:`ldpdist.specs`).
    mechanism : str
        Its class name (``"HadamardResponse"``, …).
    spec : dict
        Its spec (:meth:`Mechanism.to_dict <ldpdist.Mechanism.to_dict>`; for a linear-query
        protocol its ``to_dict()`` without the query matrix, which ``queries_sha256``
        identifies).

    Examples
    --------
    >>> import numpy as np, ldpdist
    >>> mech = ldpdist.HadamardResponse(k=8, epsilon=1.0)
    >>> reports = mech.privatize([1, 2, 3, 3], seed=7)
    >>> reports.mechanism, len(reports), isinstance(reports, np.ndarray)
    ('HadamardResponse', 4, True)
    >>> type(reports[1:]).__name__, type(reports + 1).__name__
    ('Reports', 'ndarray')
    >>> mech.aggregator().add(np.array([1, 2, 3, 3]))   # the values, not reports
    Traceback (most recent call last):
    ...
    TypeError: Aggregator.add takes reports, got a plain ndarray (dtype int64, shape (4,))...
    >>> mech.aggregator().add(mech.as_reports(np.array([1, 2, 3, 3]))).n   # declared
    4
    """

    _fingerprint: Optional[str]
    _mechanism: Optional[str]
    _spec: Optional[Dict[str, Any]]

    def __new__(cls, array: Any, mechanism: Any) -> "Reports":
        fp, name, spec = _provenance_of(mechanism)
        if isinstance(array, ReportBatch):
            if array.fingerprint != fp:
                raise _mismatch(mechanism, array.reports, "the report batch")
            array = array.reports
        if isinstance(array, Reports) and array._fingerprint is not None:
            if array._fingerprint != fp:
                raise _mismatch(mechanism, array, "these reports")
            return array
        if not isinstance(array, np.ndarray) and hasattr(array, "__dask_graph__"):
            raise TypeError("a dask collection of reports is counted by "
                            "ldpdist.dask.aggregate(mechanism, collection), which declares "
                            "each partition; as_reports takes an in-memory array")
        if isinstance(array, (list, tuple)):
            for i, value in enumerate(array):
                if isinstance(value, (bool, np.bool_)):
                    raise TypeError(f"reports must be integers, not booleans: "
                                    f"reports[{i}] = {value!r}")
        return cls._tagged(as_array(array, "reports"), fp, name, spec)

    @classmethod
    def _tagged(cls, array: np.ndarray, fp: str, name: str,
                spec: Dict[str, Any]) -> "Reports":
        """``array`` (an ndarray) as Reports of the given provenance: a view, never a copy."""
        out = array.view(cls)
        out._fingerprint, out._mechanism, out._spec = fp, name, spec
        return out

    def __array_finalize__(self, obj: Any) -> None:
        # Views, slices, indexing, copies and astype: the new array is made from `obj`.
        self._fingerprint = getattr(obj, "_fingerprint", None)
        self._mechanism = getattr(obj, "_mechanism", None)
        self._spec = getattr(obj, "_spec", None)

    # -- provenance ----------------------------------------------------------------------

    @property
    def fingerprint(self) -> Optional[str]:
        """Spec fingerprint of the mechanism that made these reports (``None`` only for an
        array viewed as ``Reports`` without a mechanism, which nothing accepts)."""
        return self._fingerprint

    @property
    def mechanism(self) -> Optional[str]:
        """Class name of the mechanism that made these reports."""
        return self._mechanism

    @property
    def spec(self) -> Optional[Dict[str, Any]]:
        """The spec of the mechanism that made these reports (a copy)."""
        return None if self._spec is None else dict(self._spec)

    def _describe(self) -> str:
        """The spec for messages: the mechanism's repr, or its fields."""
        spec = self._spec or {}
        if "mechanism" in spec:
            return spec_summary(spec)
        from ._validation import shown

        fields = ", ".join(f"{key}={shown(value)}" for key, value in sorted(spec.items())
                           if key not in ("protocol", "format"))
        return f"{self._mechanism}({fields})"

    # -- numpy protocol: the tag follows the data, not the arithmetic ---------------------

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        # Every ufunc result (arithmetic, comparisons, reductions) is a plain ndarray.
        inputs = tuple(_plain(x) for x in inputs)
        for key in ("out", "where"):
            if key in kwargs:
                kwargs[key] = _plain(kwargs[key])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_wrap__(self, array: Any, context: Any = None,
                       return_scalar: bool = False) -> Any:
        # Functions that build new values and wrap them in the input's type (np.insert, …).
        if return_scalar and isinstance(array, np.ndarray) and array.ndim == 0:
            return array[()]
        return array.view(np.ndarray) if isinstance(array, np.ndarray) else array

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        handler = _FUNCTIONS.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
        return super().__array_function__(func, types, args, kwargs)

    def view(self, *args: Any, **kwargs: Any) -> Any:
        """``ndarray.view``; a view as another dtype (a reinterpretation of the bytes) is a
        plain ndarray."""
        result = super().view(*args, **kwargs)
        if isinstance(result, Reports) and result.dtype != self.dtype:
            return result.view(np.ndarray)
        return result

    # -- pickling, repr ------------------------------------------------------------------

    def __reduce__(self) -> Tuple[Any, ...]:
        constructor, arguments, state = super().__reduce__()[:3]
        return constructor, arguments, (state, self._fingerprint, self._mechanism, self._spec)

    def __setstate__(self, state: Any) -> None:
        array_state, self._fingerprint, self._mechanism, self._spec = state
        super().__setstate__(array_state)

    def __repr__(self) -> str:
        text = super().__repr__()
        fp = "None" if self._fingerprint is None else repr(self._fingerprint[:16] + "…")
        return f"{text[:-1]}, mechanism={self._mechanism!r}, fingerprint={fp})"


def _join(func: Callable[..., Any], args: Any, kwargs: Dict[str, Any]) -> Any:
    """np.concatenate (and through it np.stack, np.vstack, np.hstack, np.append): Reports
    of one fingerprint give Reports of it, anything else a plain ndarray."""
    arrays = args[0] if args else kwargs.get("arrays", ())
    if not isinstance(arrays, (list, tuple)):
        arrays = list(arrays)
    result = func(_plain(list(arrays)), *_plain(tuple(args[1:])),
                  **{key: _plain(value) for key, value in kwargs.items() if key != "arrays"})
    tags = {a._fingerprint if isinstance(a, Reports) else None for a in arrays}
    out = kwargs.get("out", args[2] if len(args) > 2 else None)
    if (len(tags) == 1 and None not in tags and out is None
            and isinstance(result, np.ndarray)):
        first = arrays[0]
        return Reports._tagged(result, first._fingerprint, first._mechanism, first._spec)
    return result


def _untagged(func: Callable[..., Any], args: Any, kwargs: Dict[str, Any]) -> Any:
    """Functions that make new values shaped like the input (np.zeros_like, …): plain."""
    return func(*_plain(tuple(args)), **{key: _plain(value) for key, value in kwargs.items()})


def _kept(func: Callable[..., Any], args: Any, kwargs: Dict[str, Any]) -> Any:
    """Functions that select reports (np.delete): Reports of the input's spec."""
    source = args[0] if args else kwargs["arr"]
    result = func(*_plain(tuple(args)), **{key: _plain(value) for key, value in kwargs.items()})
    if isinstance(result, np.ndarray) and source._fingerprint is not None:
        return Reports._tagged(result, source._fingerprint, source._mechanism, source._spec)
    return result


_FUNCTIONS: Dict[Any, Callable[..., Any]] = {
    np.concatenate: _join,
    np.empty_like: _untagged,
    np.zeros_like: _untagged,
    np.ones_like: _untagged,
    np.full_like: _untagged,
    np.delete: _kept,
}


def _mismatch(owner: Any, reports: "Reports", what: str) -> SpecMismatchError:
    spec = _provenance_of(owner)[2]
    return SpecMismatchError(
        f"{what} are reports of {reports._describe()}, not of {owner!r} "
        f"({spec_difference(reports._spec or {}, spec)}); reports made under another spec "
        "cannot be counted")


def _passed(value: Any) -> str:
    """What was passed instead of reports, for the message."""
    if isinstance(value, Reports):
        return "an ndarray viewed as Reports without a mechanism"
    if isinstance(value, np.ndarray):
        return f"a plain {type(value).__name__} (dtype {value.dtype}, shape {value.shape})"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def provenance_json(reports: "Reports") -> str:
    """The provenance of ``reports`` (fingerprint, mechanism name, spec) as canonical JSON
    text, for carrying it beside the raw array (:mod:`ldpdist.dask` puts it in the header
    of a Reports sent between processes); :func:`provenance_from_json` reads it back."""
    return canonical_json({"fingerprint": reports._fingerprint,
                           "mechanism": reports._mechanism, "spec": reports._spec})


def provenance_from_json(text: Any) -> Optional[Provenance]:
    """``(fingerprint, mechanism name, spec)`` from :func:`provenance_json` text, ``None``
    for an untagged array (``"null"``, or no fingerprint); anything malformed raises
    ``ValueError`` naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"the provenance of reports is JSON text, got {type(text).__name__}")
    tag = parse_json(text, "the provenance of reports")
    if not isinstance(tag, dict) or tag.get("fingerprint") is None:
        return None
    checked_fields(tag, "the provenance of reports", ("fingerprint", "mechanism", "spec"))
    if not (isinstance(tag["fingerprint"], str) and isinstance(tag["mechanism"], str)
            and isinstance(tag["spec"], dict)):
        raise ValueError("the provenance of reports holds a fingerprint and a mechanism name "
                         "(strings) and a spec (an object)")
    return tag["fingerprint"], tag["mechanism"], tag["spec"]


def check_reports(owner: Any, reports: Any, where: str) -> "Reports":
    """``reports`` once they are known to be ``owner``'s: :class:`Reports` of its spec (a
    :class:`ReportBatch` gives its ``reports``, checked the same way).

    Raises :class:`SpecMismatchError` for reports of another spec and ``TypeError`` for a
    plain array or list (the message says what was passed and how to declare reports made
    elsewhere: ``owner.as_reports(array)``)."""
    fp = _provenance_of(owner)[0]
    if isinstance(reports, ReportBatch):
        if reports.fingerprint != fp:
            raise _mismatch(owner, reports.reports, f"the report batch given to {where}")
        return reports.reports
    if isinstance(reports, Reports) and reports._fingerprint is not None:
        if reports._fingerprint != fp:
            raise _mismatch(owner, reports, f"the reports given to {where}")
        return reports
    name = type(owner).__name__
    noun = getattr(owner, "_reports_noun", "mech")
    raise TypeError(
        f"{where} takes reports, got {_passed(reports)}. {name}.privatize returns "
        "ldpdist.Reports, which carry the fingerprint of the spec that made them; a plain "
        "array does not say where it came from. Passing the users' values instead of their "
        "reports is the usual mistake (values can look like valid reports and would be "
        "counted without an error). For reports made elsewhere (another system, a "
        f"database, a hand-written test case), declare them: {noun}.as_reports(array).")


@dataclass(frozen=True)
class ReportBatch:
    """One batch of reports with its provenance.

    Attributes
    ----------
    reports : Reports
        The reports (1-D unsigned integers, or 2-D uint8 packed rows), read-only, tagged
        with ``fingerprint`` (a :class:`Reports` view of the array given, never a copy), so
        ``add(batch.reports)`` is checked like ``add(batch)`` (without the batch id).
    spec : dict
        The spec they were made under.
    fingerprint : str
        The spec's fingerprint.
    batch_id : str
        Identity of this batch (see the module documentation).
    label : str
        Where it came from (the file name for :func:`read_reports`), for messages; an
        aggregator records it beside the batch id.
    collection : int or None
        Which collection of a campaign the reports belong to, when the file records it
        (reports of the memoized mechanisms of :mod:`ldpdist.longitudinal`).
    """

    reports: "Reports"
    spec: Dict[str, Any]
    fingerprint: str
    batch_id: str
    label: str = ""
    collection: Optional[int] = None

    def __post_init__(self) -> None:
        reports = self.reports
        if isinstance(reports, Reports) and reports._fingerprint is not None:
            if reports._fingerprint != self.fingerprint:
                raise SpecMismatchError(
                    f"a ReportBatch of {spec_summary(self.spec)} cannot hold reports of "
                    f"{reports._describe()}")
            return
        array = reports.view(np.ndarray) if isinstance(reports, np.ndarray) else \
            np.asarray(reports)
        object.__setattr__(self, "reports", Reports._tagged(
            array, self.fingerprint, self.mechanism_name, self.spec))

    @property
    def mechanism_name(self) -> str:
        """The class name of the mechanism (or the heavy-hitter protocol) of the spec."""
        return str(self.spec.get("mechanism", self.spec.get("protocol")))

    def __len__(self) -> int:
        return int(self.reports.shape[0])
