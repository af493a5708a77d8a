"""Reports files: a batch of reports that says which spec made it.

A reports file holds the reports of one batch (one client, or one privatize run) together
with the spec they were made under, so that a server can never count them under another
spec, and a batch id, so that the same batch is never counted twice. Layout (all integers
little-endian):

========  ===========================================================================
bytes     content
========  ===========================================================================
0–7       magic ``LDPDREP1``
8–11      header length H (uint32)
12…       header: UTF-8 canonical JSON object (sorted keys, no whitespace) with
          ``format`` = ``"ldpdist-reports"``, ``version`` = 1, ``mechanism`` (class name),
          ``spec`` (the spec dict), ``fingerprint`` (the spec's, see
          :mod:`ldpdist.specs`), ``dtype`` (numpy type string: ``|u1``, ``<u2``, ``<u4``,
          ``<u8``), ``shape`` (``[n]`` for index reports, ``[n, width]`` for packed bit
          rows), ``nonce`` (32 hex digits from the OS at write time) and
          ``payload_sha256`` (hex SHA-256 of the payload bytes)
…         zero bytes up to the next multiple of 64
…         payload: the report array, C order, exactly ``prod(shape) · itemsize`` bytes
========  ===========================================================================

The *batch id* is the hex SHA-256 of the header bytes: it binds the payload (through its
hash) and the nonce, so a copy of the file has the same id and two privatize runs never do.
Readers check the magic, the header, the spec fingerprint, the payload length and hash;
:func:`read_reports` refuses a file of another spec when given the expected mechanism.

Raw report arrays from other systems (a plain ``.npy``) carry none of this; the command line
reads them only with ``--raw-reports``, and their batch id is then the SHA-256 of the file
(:func:`raw_batch_id`), so the same file is still never counted twice.

In memory, reports carry their provenance too: :class:`Reports` is the numpy array that
``privatize`` returns, tagged with the spec fingerprint of the mechanism that made it, and
everything that counts or writes reports (:meth:`Aggregator.add <ldpdist.Aggregator.add>`,
``estimate``, :func:`write_reports`, …) refuses a plain array unless the caller declares it
with ``mechanism.as_reports(array)`` (see :class:`Reports`).
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, Union

import numpy as np

from ._validation import as_array
from .errors import IntegrityError, SpecMismatchError
from .specs import (canonical_json, fingerprint, from_dict, parse_json, spec_difference,
                    spec_summary)

__all__ = ["Reports", "ReportBatch", "check_reports", "ReportsFileLayout", "encode_reports", "decode_reports",
           "read_reports", "read_reports_layout", "read_chunks", "write_reports", "write_reports_chunks",
           "raw_batch_id", "raw_file_batch_id", "REPORTS_MAGIC"]

REPORTS_MAGIC = b"LDPDREP1"
FORMAT_NAME = "ldpdist-reports"
FORMAT_VERSION = 1
_ALIGN = 64
_MAX_HEADER = 1 << 20
_DTYPES = {"|u1": np.uint8, "<u2": np.dtype("<u2"), "<u4": np.dtype("<u4"),
           "<u8": np.dtype("<u8")}
_HEADER_KEYS = {"format", "version", "mechanism", "spec", "fingerprint", "dtype", "shape",
                "nonce", "payload_sha256"}
_HASH_BLOCK = 1 << 24


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
    """

    reports: "Reports"
    spec: Dict[str, Any]
    fingerprint: str
    batch_id: str
    label: str = ""

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
            array, self.fingerprint, str(self.spec.get("mechanism")), self.spec))

    @property
    def mechanism_name(self) -> str:
        return str(self.spec.get("mechanism"))

    def __len__(self) -> int:
        return int(self.reports.shape[0])


def _hash_array(array: np.ndarray) -> str:
    digest = hashlib.sha256()
    flat = array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)
    for start in range(0, flat.size, _HASH_BLOCK):
        digest.update(memoryview(flat[start:start + _HASH_BLOCK]))
    return digest.hexdigest()


def _little_endian(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and
                                        np.little_endian is False):  # pragma: no cover
        array = array.astype(array.dtype.newbyteorder("<"))
    return array


def encode_reports(mechanism: Any, reports: Any, nonce: Optional[str] = None, *,
                   _where: str = "encode_reports") -> "tuple[bytes, ReportBatch]":
    """The file bytes of ``reports`` made by ``mechanism``, and the batch they hold.

    ``reports`` must be :class:`Reports` of ``mechanism``'s spec (the output of its
    ``privatize``, or an array declared with ``mechanism.as_reports``): a plain array raises
    ``TypeError`` and reports of another spec :class:`SpecMismatchError` (see
    :func:`check_reports`). Their dtype and shape are checked, not their values: the server
    validates every report when it aggregates.
    """
    array = check_reports(mechanism, reports, _where).view(np.ndarray)
    if mechanism.report_kind == "bits":
        width = -(-mechanism.output_size // 8)
        if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != width:
            raise ValueError(f"bit-vector reports of {mechanism!r} are uint8 arrays of shape "
                             f"(n, {width}), got {array.dtype} {array.shape}")
    elif array.dtype.kind != "u" or array.ndim != 1:
        raise ValueError(f"reports of {mechanism!r} are 1-D unsigned integer arrays, got "
                         f"{array.dtype} {array.shape}")
    array = _little_endian(array)
    spec = mechanism.to_dict()
    header = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "mechanism": spec["mechanism"],
        "spec": spec,
        "fingerprint": fingerprint(spec),
        "dtype": array.dtype.str,
        "shape": [int(v) for v in array.shape],
        "nonce": nonce if nonce is not None else os.urandom(16).hex(),
        "payload_sha256": _hash_array(array),
    }
    header_bytes = canonical_json(header).encode("ascii")
    prefix = REPORTS_MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes
    prefix += b"\0" * (-len(prefix) % _ALIGN)
    batch = ReportBatch(array, spec, header["fingerprint"],
                        hashlib.sha256(header_bytes).hexdigest())
    return prefix + array.tobytes(), batch


def _parse_header(data: bytes, size: int, where: str) -> "tuple[Dict[str, Any], bytes, int]":
    """The header dict, its bytes, and the payload offset, checked against the file size."""
    if len(data) < 12 or bytes(data[:8]) != REPORTS_MAGIC:
        raise IntegrityError(f"{where} is not an ldpdist reports file (bad magic bytes)")
    (length,) = struct.unpack_from("<I", data, 8)
    if length > _MAX_HEADER or 12 + length > size:
        raise IntegrityError(f"{where}: the header length {length} does not fit the file "
                             f"({size} bytes)")
    header_bytes = bytes(data[12:12 + length])
    try:
        text = header_bytes.decode("ascii")
    except UnicodeDecodeError:
        raise IntegrityError(f"{where}: the header is not ASCII JSON") from None
    try:
        header = parse_json(text, f"the header of {where}")
    except ValueError as exc:
        raise IntegrityError(str(exc)) from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        raise IntegrityError(f"{where}: the header must hold exactly the keys "
                             f"{sorted(_HEADER_KEYS)}")
    if header["format"] != FORMAT_NAME or header["version"] != FORMAT_VERSION:
        raise IntegrityError(f"{where}: unsupported format {header['format']!r} version "
                             f"{header['version']!r} (this version reads {FORMAT_NAME} "
                             f"{FORMAT_VERSION})")
    if canonical_json(header).encode("ascii") != header_bytes:
        raise IntegrityError(f"{where}: the header is not in canonical form (edited?)")
    offset = 12 + length
    return header, header_bytes, offset + (-offset % _ALIGN)


def _checked_batch(header: Dict[str, Any], header_bytes: bytes, payload_size: int,
                   where: str, expect: Any) -> "tuple[Dict[str, Any], np.dtype, tuple]":
    spec = header["spec"]
    if not isinstance(spec, dict) or canonical_json(spec) == "":
        raise IntegrityError(f"{where}: the header's spec is not a dict")
    if fingerprint(spec) != header["fingerprint"] or spec.get("mechanism") != header["mechanism"]:
        raise IntegrityError(f"{where}: the spec does not match its fingerprint (edited?)")
    if expect is not None and header["fingerprint"] != expect.fingerprint:
        raise SpecMismatchError(
            f"{where} holds reports of {spec_summary(spec)}, not of {expect!r} "
            f"({spec_difference(spec, expect.to_dict())}); reports made under another spec "
            "cannot be counted")
    try:
        mechanism = expect if expect is not None else from_dict(spec)
    except (ValueError, TypeError) as exc:
        raise IntegrityError(f"{where}: invalid spec: {exc}") from None
    dtype = _DTYPES.get(header["dtype"]) if isinstance(header["dtype"], str) else None
    shape = header["shape"]
    if dtype is None:
        raise IntegrityError(f"{where}: unsupported report dtype {header['dtype']!r}")
    if (not isinstance(shape, list) or not all(type(v) is int and 0 <= v < 2**63 for v in shape)
            or len(shape) != (2 if mechanism.report_kind == "bits" else 1)):
        raise IntegrityError(f"{where}: invalid report shape {shape!r}")
    if mechanism.report_kind == "bits" and (dtype != np.uint8 or
                                            shape[1] != -(-mechanism.output_size // 8)):
        raise IntegrityError(f"{where}: packed rows of {shape!r} {header['dtype']} do not fit "
                             f"{mechanism!r}")
    expected = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    if payload_size != expected:
        raise IntegrityError(
            f"{where}: the payload has {payload_size} bytes, the header announces {expected} "
            f"({'truncated' if payload_size < expected else 'trailing bytes'})")
    return spec, np.dtype(dtype), tuple(shape)


def decode_reports(data: Union[bytes, bytearray, memoryview], expect: Any = None,
                   where: str = "the reports") -> ReportBatch:
    """The batch in reports-file bytes; with ``expect`` (a mechanism), refuse other specs
    (:class:`SpecMismatchError`). Corruption raises :class:`IntegrityError`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"reports-file data must be bytes, got {type(data).__name__}")
    data = memoryview(data).cast("B")
    header, header_bytes, offset = _parse_header(data, len(data), where)
    spec, dtype, shape = _checked_batch(header, header_bytes, max(len(data) - offset, 0),
                                        where, expect)
    array = np.frombuffer(data, dtype=dtype, offset=min(offset, len(data))).reshape(shape)
    if _hash_array(array) != header["payload_sha256"]:
        raise IntegrityError(f"{where}: the payload does not match its checksum (corrupt)")
    return ReportBatch(array, spec, header["fingerprint"],
                       hashlib.sha256(header_bytes).hexdigest())


@dataclass(frozen=True)
class ReportsFileLayout:
    """What a reports file's header says, checked (:func:`read_reports_layout`); the payload
    is not read.

    Attributes
    ----------
    spec, fingerprint, batch_id, label
        As in :class:`ReportBatch`.
    dtype : numpy.dtype
        Report dtype as stored (little-endian).
    shape : tuple of int
        ``(n,)`` or ``(n, width)``.
    offset : int
        Byte offset of the payload in the file.
    payload_sha256 : str
        Hex SHA-256 the payload must have.
    """

    spec: Dict[str, Any]
    fingerprint: str
    batch_id: str
    label: str
    dtype: np.dtype
    shape: Tuple[int, ...]
    offset: int
    payload_sha256: str

    @property
    def row_bytes(self) -> int:
        """Bytes of one report."""
        return int(np.prod(self.shape[1:], dtype=object)) * self.dtype.itemsize

    @property
    def payload_bytes(self) -> int:
        return int(self.shape[0]) * self.row_bytes


def read_reports_layout(path: Union[str, "os.PathLike[str]"],
                        expect: Any = None) -> ReportsFileLayout:
    """The checked header of a reports file (magic, header, spec fingerprint, payload
    length); with ``expect`` (a mechanism), refuse other specs (:class:`SpecMismatchError`).
    Reads only the header: the payload's checksum is for the reader of the payload to check
    (:func:`read_reports`, :meth:`Aggregator.add_file`)."""
    where = f"reports file {os.fspath(path)!r}"
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(12 + _MAX_HEADER)
    header, header_bytes, offset = _parse_header(head, size, where)
    spec, dtype, shape = _checked_batch(header, header_bytes, max(size - offset, 0), where,
                                        expect)
    return ReportsFileLayout(spec, header["fingerprint"],
                             hashlib.sha256(header_bytes).hexdigest(), os.path.basename(path),
                             dtype, shape, offset, header["payload_sha256"])


def read_reports(path: Union[str, "os.PathLike[str]"], expect: Any = None) -> ReportBatch:
    """Read a reports file (memory-mapped: nothing is copied), checking everything the
    module documentation lists; with ``expect`` (a mechanism), refuse other specs.
    For files larger than memory see :meth:`Aggregator.add_file`, which streams them."""
    where = f"reports file {os.fspath(path)!r}"
    layout = read_reports_layout(path, expect)
    dtype, shape = layout.dtype, layout.shape
    if int(np.prod(shape, dtype=object)) == 0:
        array = np.zeros(shape, dtype=dtype)
    else:
        array = np.memmap(path, dtype=dtype, mode="r", offset=layout.offset, shape=shape)
    if _hash_array(array) != layout.payload_sha256:
        raise IntegrityError(f"{where}: the payload does not match its checksum (corrupt)")
    return ReportBatch(array, layout.spec, layout.fingerprint, layout.batch_id, layout.label)


def read_chunks(handle: Any, nbytes: int, buffer: bytearray, where: str,
                digest: Any = None) -> Iterator[memoryview]:
    """The next ``nbytes`` of an open binary file, in pieces of at most ``len(buffer)``
    bytes read into ``buffer`` (reused: each piece is valid until the next is requested).
    With ``digest`` (a hashlib object) every piece is also hashed, in a second thread while
    the caller works on it (hashlib releases the GIL), and the hash is complete when the
    caller asks for the next piece. A file shorter than announced raises
    :class:`IntegrityError`."""
    from concurrent.futures import ThreadPoolExecutor

    view = memoryview(buffer)
    remaining = nbytes
    with ThreadPoolExecutor(1, thread_name_prefix="ldpdist-hash") as hasher:
        while remaining > 0:
            want = min(len(buffer), remaining)
            got = 0
            while got < want:
                read = handle.readinto(view[got:want])
                if not read:
                    raise IntegrityError(f"{where}: the file ends {remaining - got} bytes "
                                         "early (truncated while being read?)")
                got += read
            piece = view[:want]
            pending = hasher.submit(digest.update, piece) if digest is not None else None
            try:
                yield piece
            finally:
                if pending is not None:
                    pending.result()
            remaining -= want


def write_reports(path: Union[str, "os.PathLike[str]"], mechanism: Any,
                  reports: Any) -> ReportBatch:
    """Write ``reports`` of ``mechanism`` to ``path`` (atomically: a temporary file in the
    same folder, renamed); returns the batch written.

    ``reports`` are :class:`Reports` of ``mechanism``'s spec (``mechanism.privatize``
    output, or declared with ``mechanism.as_reports``): the file stamps that spec on them,
    so a plain array is refused (``TypeError``) and reports of another spec raise
    :class:`SpecMismatchError`."""
    from .files import write_atomic

    data, batch = encode_reports(mechanism, reports, _where="write_reports")
    write_atomic(path, data)
    return ReportBatch(batch.reports, batch.spec, batch.fingerprint, batch.batch_id,
                       os.path.basename(path))


def write_reports_chunks(path: Union[str, "os.PathLike[str]"], mechanism: Any,
                         chunks: Iterable[np.ndarray], *, n: int,
                         dtype: Any = None) -> ReportsFileLayout:
    """Write a reports file of ``n`` reports given in pieces (:class:`Reports` of
    ``mechanism``'s spec, e.g. ``privatize`` of successive slices of users; plain arrays
    are refused as by :func:`write_reports`), so that a file larger than
    memory can be made: memory is that of one piece. ``dtype`` is the index reports' dtype
    (every piece is converted to it; by default the first piece's); bit-vector rows are
    uint8. The header is written with ``n`` and rewritten with the payload's hash at the
    end, in a temporary file renamed into place (atomic). Returns the file's layout.
    ``ValueError`` when the pieces do not hold exactly ``n`` reports or do not fit."""
    from .files import write_atomic_with

    if type(n) is not int and not isinstance(n, np.integer) or int(n) < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    bits = mechanism.report_kind == "bits"
    width = -(-mechanism.output_size // 8) if bits else 0
    chunks = iter(chunks)
    first = next(chunks, None)
    if bits:
        stored = np.dtype(np.uint8)
    else:
        stored = np.dtype(dtype if dtype is not None else
                          (first.dtype if first is not None else np.uint64))
        if stored.kind != "u":
            raise ValueError(f"index reports are stored as unsigned integers, not {stored}")
        stored = stored.newbyteorder("<")
    spec = mechanism.to_dict()
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "mechanism": spec["mechanism"],
              "spec": spec, "fingerprint": fingerprint(spec), "dtype": stored.str,
              "shape": [n, width] if bits else [n], "nonce": os.urandom(16).hex(),
              "payload_sha256": "0" * 64}

    def prefix() -> bytes:
        header_bytes = canonical_json(header).encode("ascii")
        data = REPORTS_MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes
        return data + b"\0" * (-len(data) % _ALIGN)

    digest = hashlib.sha256()

    def fill(handle: Any) -> None:
        placeholder = prefix()
        handle.write(placeholder)
        written = 0
        piece = first
        while piece is not None:
            array = check_reports(mechanism, piece, "write_reports_chunks").view(np.ndarray)
            if bits:
                if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != width:
                    raise ValueError(f"bit-vector reports of {mechanism!r} are uint8 arrays "
                                     f"of shape (rows, {width}), got {array.dtype} "
                                     f"{array.shape}")
            elif array.ndim != 1 or array.dtype.kind not in "iu":
                raise ValueError(f"reports of {mechanism!r} are 1-D integer arrays, got "
                                 f"{array.dtype} {array.shape}")
            elif array.size and (int(array.min()) < 0 or
                                 int(array.max()) > np.iinfo(stored).max):
                raise ValueError(f"reports do not fit the file's dtype {stored}")
            if written + array.shape[0] > n:
                raise ValueError(f"the pieces hold more than n = {n} reports")
            data = np.ascontiguousarray(array, dtype=stored)
            digest.update(memoryview(data).cast("B"))
            handle.write(memoryview(data).cast("B"))
            written += int(array.shape[0])
            piece = next(chunks, None)
        if written != n:
            raise ValueError(f"the pieces hold {written} reports, not n = {n}")
        header["payload_sha256"] = digest.hexdigest()
        final = prefix()
        assert len(final) == len(placeholder)  # the hash has a fixed length
        handle.seek(0)
        handle.write(final)

    write_atomic_with(path, fill)
    return read_reports_layout(path, mechanism)


def raw_batch_id(data: Union[bytes, bytearray, memoryview]) -> str:
    """Batch id of a raw report file (no ldpdist header): ``"raw-"`` + SHA-256 of its bytes."""
    return "raw-" + hashlib.sha256(data).hexdigest()


def raw_file_batch_id(path: Union[str, "os.PathLike[str]"]) -> str:
    """:func:`raw_batch_id` of a file, read in blocks (nothing file-sized is allocated)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
            digest.update(block)
    return "raw-" + digest.hexdigest()
