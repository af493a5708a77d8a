"""Reports files: a batch of reports that says which spec made it.

A reports file holds the reports of one batch (one client, or one privatize run) together
with the spec they were made under, so that a server can never count them under another
spec, and a batch id, so that the same batch is never counted twice. Layout (format version
2; all integers little-endian):

========  ===========================================================================
bytes     content
========  ===========================================================================
0–7       magic ``LDPDREP2``
8–11      header length H (uint32)
12…       header: UTF-8 canonical JSON object (sorted keys, no whitespace) with
          ``format`` = ``"ldpdist-reports"``, ``version`` = 2, ``mechanism`` (class name),
          ``spec`` (the spec dict), ``fingerprint`` (the spec's, see
          :mod:`ldpdist.specs`), ``dtype`` (numpy type string: ``|u1``, ``<u2``, ``<u4``,
          ``<u8``), ``shape`` (``[n]`` for index reports, ``[n, width]`` for packed bit
          rows), ``nonce`` (32 lowercase hex digits from the OS at write time) and
          ``payload_sha256`` (hex SHA-256 of the payload bytes); optionally
          ``collection`` (an integer >= 0: the collection of a campaign the reports
          belong to, for the memoized mechanisms of :mod:`ldpdist.longitudinal`)
12+H…     header checksum: the SHA-256 (32 raw bytes) of bytes 0 to 12+H−1 (magic, length
          and header)
…         zero bytes up to the next multiple of 64
…         payload: the report array, C order, exactly ``prod(shape) · itemsize`` bytes
========  ===========================================================================

Every byte is checked: the header checksum covers the magic, the length and the header
(the nonce included), the header's ``payload_sha256`` covers the payload, the padding must
be zero and the file must end where the payload does. A changed bit anywhere is refused as
corruption (:class:`~ldpdist.IntegrityError`). The checksums carry no key: they catch
accidents and mix-ups, not a deliberate forgery (see the "File formats" page of the
documentation).

The *batch id* is the hex SHA-256 of the header bytes: it binds the payload (through its
hash) and the nonce, so a copy of the file has the same id and two privatize runs never do.
Readers check the magic, the header checksum, the header, the spec fingerprint, the padding,
the payload length and hash; :func:`read_reports` refuses a file of another spec when given
the expected mechanism.

Version 1 files (magic ``LDPDREP1``, written by ldpdist 0.1.0) are still read: the same
layout without the header checksum (``version`` = 1). Their spec fingerprint, payload hash,
padding and nonce format are checked, but nothing covers the nonce's value, so a copy whose
nonce was edited reads as another batch; only version 2 is written.

Raw report arrays from other systems (a plain ``.npy``) carry none of this; the command line
reads them only with ``--raw-reports``, and their batch id is then the SHA-256 of the file
(:func:`raw_batch_id`), so the same file is still never counted twice.

In memory, reports carry their provenance too: :class:`Reports` is the numpy array that
``privatize`` returns, tagged with the spec fingerprint of the mechanism that made it, and
everything that counts or writes reports (:meth:`Aggregator.add <ldpdist.Aggregator.add>`,
``estimate``, :func:`write_reports`, …) refuses a plain array unless the caller declares it
with ``mechanism.as_reports(array)`` (see :class:`Reports`). Those in-memory types
(:class:`Reports`, :class:`ReportBatch`, :func:`check_reports`, :func:`provenance_json`,
:func:`provenance_from_json`) are defined in ``ldpdist.typed_reports`` and importable from
here; this module is the file format.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple, Union

import numpy as np

from .errors import IntegrityError, SpecMismatchError
from .specs import (canonical_json, checked_fields, fingerprint, from_dict, parse_json,
                    spec_difference, spec_summary)
# The in-memory types, re-exported: ``from ldpdist.reports import Reports`` is the
# documented path.
from .typed_reports import (Provenance, ReportBatch, Reports, check_reports,
                            provenance_from_json, provenance_json)

__all__ = ["Reports", "ReportBatch", "check_reports", "ReportsFileLayout", "encode_reports", "decode_reports",
           "read_reports", "read_reports_layout", "read_chunks", "write_reports", "write_reports_chunks",
           "raw_batch_id", "raw_file_batch_id", "provenance_json", "provenance_from_json",
           "REPORTS_MAGIC"]

REPORTS_MAGIC = b"LDPDREP2"
FORMAT_NAME = "ldpdist-reports"
FORMAT_VERSION = 2
# Version 1 (ldpdist 0.1.0): no header checksum; still read, never written.
_LEGACY_MAGIC = b"LDPDREP1"
_MAGICS = {REPORTS_MAGIC: FORMAT_VERSION, _LEGACY_MAGIC: 1}
#: The magic bytes of every reports-file version this release reads.
READ_MAGICS = tuple(_MAGICS)
_CHECKSUM = 32
_ALIGN = 64
_MAX_HEADER = 1 << 20
_DTYPES = {"|u1": np.uint8, "<u2": np.dtype("<u2"), "<u4": np.dtype("<u4"),
           "<u8": np.dtype("<u8")}
_HEADER_KEYS = {"format", "version", "mechanism", "spec", "fingerprint", "dtype", "shape",
                "nonce", "payload_sha256"}
# Optional: ``collection`` (int >= 0), which collection of a campaign of repeated
# collections the reports belong to (written for the memoized mechanisms of
# ldpdist.longitudinal when given; their aggregator refuses to mix collections).
_OPTIONAL_KEYS = {"collection"}
_HASH_BLOCK = 1 << 24


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
                   collection: Optional[int] = None,
                   _where: str = "encode_reports") -> "tuple[bytes, ReportBatch]":
    """The file bytes of ``reports`` made by ``mechanism``, and the batch they hold.

    ``reports`` must be :class:`Reports` of ``mechanism``'s spec (the output of its
    ``privatize``, or an array declared with ``mechanism.as_reports``): a plain array raises
    ``TypeError`` and reports of another spec :class:`SpecMismatchError` (see
    :func:`check_reports`). Their dtype and shape are checked, not their values: the server
    validates every report when it aggregates. ``collection`` (an int >= 0, optional) records
    which collection of a campaign the reports belong to (header field ``collection``).
    """
    if collection is not None:
        collection = _checked_collection(collection, _where, ValueError)
    array = check_reports(mechanism, reports, _where).view(np.ndarray)
    if mechanism.report_kind == "bits":
        width = -(-mechanism.output_size // 8)
        if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != width:
            raise ValueError(f"bit-vector reports of {mechanism!r} are uint8 arrays of shape "
                             f"(n, {width}), got {array.dtype} {array.shape}")
    elif mechanism.report_kind == "records":
        if array.dtype != mechanism.report_dtype or array.ndim != 1:
            raise ValueError(f"reports of {mechanism!r} are 1-D arrays of dtype "
                             f"{mechanism.report_dtype}, got {array.dtype} {array.shape}")
    elif array.dtype.kind != "u" or array.ndim != 1:
        raise ValueError(f"reports of {mechanism!r} are 1-D unsigned integer arrays, got "
                         f"{array.dtype} {array.shape}")
    array = _little_endian(array)
    spec = mechanism.to_dict()
    header = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "mechanism": _kind_name(spec),
        "spec": spec,
        "fingerprint": fingerprint(spec),
        "dtype": _records_dtype(mechanism) if mechanism.report_kind == "records"
        else array.dtype.str,
        "shape": [int(v) for v in array.shape],
        "nonce": _new_nonce() if nonce is None else _checked_nonce(nonce, _where),
        "payload_sha256": _hash_array(array),
    }
    if collection is not None:
        header["collection"] = collection
    prefix, header_bytes = _prefix(header)
    batch = ReportBatch(array, spec, header["fingerprint"],
                        hashlib.sha256(header_bytes).hexdigest(), collection=collection)
    return prefix + array.tobytes(), batch


def _kind_name(spec: Dict[str, Any]) -> Any:
    """The header's ``mechanism`` field: a mechanism's class name, or a heavy-hitter
    protocol's name (its spec has ``protocol`` instead)."""
    return spec.get("mechanism", spec.get("protocol"))


def _records_dtype(protocol: Any) -> str:
    """The header's ``dtype`` of a heavy-hitter protocol's records: ``|V<bytes per
    report>``; the fields are the protocol's (little-endian), known from its spec."""
    return f"|V{protocol.report_dtype.itemsize}"


def _checked_collection(value: Any, where: str, error: type) -> int:
    if type(value) is not int or not 0 <= value < 2**63:
        raise error(f"{where}: the collection must be an integer in [0, 2^63), got "
                    f"{value!r:.80}")
    return value


def _new_nonce() -> str:
    return os.urandom(16).hex()


def _checked_nonce(nonce: Any, where: str) -> str:
    if (not isinstance(nonce, str) or len(nonce) != 32
            or any(char not in "0123456789abcdef" for char in nonce)):
        raise ValueError(f"{where}: the nonce must be 32 lowercase hex digits, got "
                         f"{nonce!r:.80}")
    return nonce


def _prefix(header: Dict[str, Any]) -> "tuple[bytes, bytes]":
    """Everything before the payload (magic, length, header, header checksum, zero padding)
    and the header bytes."""
    header_bytes = canonical_json(header).encode("ascii")
    head = REPORTS_MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes
    prefix = head + hashlib.sha256(head).digest()
    return prefix + b"\0" * (-len(prefix) % _ALIGN), header_bytes


def _parse_header(data: bytes, size: int, where: str) -> "tuple[Dict[str, Any], bytes, int]":
    """The header dict, its bytes, and the payload offset, checked against the file size.
    ``data`` holds the file's first bytes (the header, its checksum and the padding at
    least, when the file has them)."""
    version = _MAGICS.get(bytes(data[:8])) if len(data) >= 12 else None
    if version is None:
        raise IntegrityError(f"{where} is not an ldpdist reports file (bad magic bytes)")
    (length,) = struct.unpack_from("<I", data, 8)
    checksum = _CHECKSUM if version >= 2 else 0
    end = 12 + length + checksum
    offset = end + (-end % _ALIGN)
    if length > _MAX_HEADER or offset > size or offset > len(data):
        raise IntegrityError(f"{where}: the header length {length} does not fit the file "
                             f"({size} bytes)")
    header_bytes = bytes(data[12:12 + length])
    if checksum and hashlib.sha256(data[:12 + length]).digest() != bytes(data[12 + length:end]):
        raise IntegrityError(f"{where}: the header does not match its checksum (corrupt, "
                             "truncated or edited)")
    if any(data[end:offset]):
        raise IntegrityError(f"{where}: the padding after the header is not zero (corrupt)")
    try:
        text = header_bytes.decode("ascii")
    except UnicodeDecodeError:
        raise IntegrityError(f"{where}: the header is not ASCII JSON") from None
    try:
        header = parse_json(text, f"the header of {where}")
    except ValueError as exc:
        raise IntegrityError(str(exc)) from None
    if not isinstance(header, dict):
        raise IntegrityError(f"{where}: the header is not a JSON object")
    try:
        checked_fields(header, "the header", sorted(_HEADER_KEYS), sorted(_OPTIONAL_KEYS))
    except ValueError as exc:
        raise IntegrityError(f"{where}: {exc}") from None
    if (header["format"] != FORMAT_NAME or type(header["version"]) is not int
            or header["version"] != version):
        raise IntegrityError(f"{where}: unsupported format {header['format']!r} version "
                             f"{header['version']!r} (its magic bytes say {FORMAT_NAME} "
                             f"version {version})")
    if canonical_json(header).encode("ascii") != header_bytes:
        raise IntegrityError(f"{where}: the header is not in canonical form (edited?)")
    try:
        _checked_nonce(header["nonce"], where)
    except ValueError as exc:
        raise IntegrityError(str(exc)) from None
    if "collection" in header:
        _checked_collection(header["collection"], where, IntegrityError)
    return header, header_bytes, offset


def _checked_batch(header: Dict[str, Any], header_bytes: bytes, payload_size: int,
                   where: str, expect: Any) -> "tuple[Dict[str, Any], np.dtype, tuple]":
    spec = header["spec"]
    if not isinstance(spec, dict) or canonical_json(spec) == "":
        raise IntegrityError(f"{where}: the header's spec is not a dict")
    if fingerprint(spec) != header["fingerprint"] or _kind_name(spec) != header["mechanism"]:
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
    records = getattr(mechanism, "report_kind", None) == "records"
    if records:
        dtype = mechanism.report_dtype if header["dtype"] == _records_dtype(mechanism) else None
    else:
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
                       hashlib.sha256(header_bytes).hexdigest(),
                       collection=header.get("collection"))


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
    collection : int or None
        The header's optional ``collection`` (see :func:`encode_reports`).
    """

    spec: Dict[str, Any]
    fingerprint: str
    batch_id: str
    label: str
    dtype: np.dtype
    shape: Tuple[int, ...]
    offset: int
    payload_sha256: str
    collection: Optional[int] = None

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
        head = handle.read(12 + _MAX_HEADER + _CHECKSUM + _ALIGN)
    header, header_bytes, offset = _parse_header(head, size, where)
    spec, dtype, shape = _checked_batch(header, header_bytes, max(size - offset, 0), where,
                                        expect)
    return ReportsFileLayout(spec, header["fingerprint"],
                             hashlib.sha256(header_bytes).hexdigest(), os.path.basename(path),
                             dtype, shape, offset, header["payload_sha256"],
                             header.get("collection"))


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
    return ReportBatch(array, layout.spec, layout.fingerprint, layout.batch_id, layout.label,
                       layout.collection)


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
                  reports: Any, *, collection: Optional[int] = None) -> ReportBatch:
    """Write ``reports`` of ``mechanism`` to ``path`` (atomically: a temporary file in the
    same folder, renamed); returns the batch written.

    ``reports`` are :class:`Reports` of ``mechanism``'s spec (``mechanism.privatize``
    output, or declared with ``mechanism.as_reports``): the file stamps that spec on them,
    so a plain array is refused (``TypeError``) and reports of another spec raise
    :class:`SpecMismatchError`. ``collection`` (optional) records which collection of a
    campaign they belong to (the header's ``collection`` field)."""
    from .files import write_atomic

    data, batch = encode_reports(mechanism, reports, collection=collection,
                                 _where="write_reports")
    write_atomic(path, data)
    return ReportBatch(batch.reports, batch.spec, batch.fingerprint, batch.batch_id,
                       os.path.basename(path), batch.collection)


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
    records = mechanism.report_kind == "records"
    width = -(-mechanism.output_size // 8) if bits else 0
    chunks = iter(chunks)
    first = next(chunks, None)
    if bits:
        stored = np.dtype(np.uint8)
    elif records:
        stored = mechanism.report_dtype
    else:
        stored = np.dtype(dtype if dtype is not None else
                          (first.dtype if first is not None else np.uint64))
        if stored.kind != "u":
            raise ValueError(f"index reports are stored as unsigned integers, not {stored}")
        stored = stored.newbyteorder("<")
    spec = mechanism.to_dict()
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "mechanism": _kind_name(spec),
              "spec": spec, "fingerprint": fingerprint(spec),
              "dtype": _records_dtype(mechanism) if records else stored.str,
              "shape": [n, width] if bits else [n], "nonce": _new_nonce(),
              "payload_sha256": "0" * 64}

    def prefix() -> bytes:
        return _prefix(header)[0]

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
            elif records:
                if array.dtype != stored or array.ndim != 1:
                    raise ValueError(f"reports of {mechanism!r} are 1-D arrays of dtype "
                                     f"{stored}, got {array.dtype} {array.shape}")
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
