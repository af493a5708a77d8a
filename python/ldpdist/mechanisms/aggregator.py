"""Server-side aggregation: mergeable, serializable, checked report counts.

An :class:`Aggregator` holds the counts of one mechanism's reports, the number of reports n,
and the identities of the report batches it has counted. Everything that reaches it is
checked: reports against the spec (:class:`~ldpdist.Reports` or a
:class:`~ldpdist.reports.ReportBatch` of another spec is refused, and a plain array is
counted only once declared with ``mechanism.as_reports``), batches against those already
counted (never twice), arithmetic against
overflow (counts and n are 64-bit and never wrap), and serialized states against their
checksum and their own consistency.

The state format (:meth:`Aggregator.to_bytes`, :meth:`Aggregator.from_bytes`: checksummed
bytes holding the spec, the counts, n and the batch ids) is
:mod:`ldpdist.mechanisms.state_format`'s; this module counts.

Batch ids: a reports file's id (:mod:`ldpdist.reports`), ``raw-…`` for raw report files, and
one random id per aggregator for the arrays added to it directly (``label`` says which).
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any, Dict, FrozenSet, Optional, Tuple, Union

import numpy as np

from .. import memory
from .._validation import U64_MAX, one_of
from ..decoders import check_options
from ..errors import DuplicateBatchError, IntegrityError, SpecMismatchError
from ..reports import ReportBatch, Reports, check_reports, read_chunks, read_reports_layout
from ..specs import spec_difference, spec_summary
# FORMAT_NAME and FORMAT_VERSION are re-exported (they were defined here).
from .state_format import (FORMAT_NAME, FORMAT_VERSION, MAX_BATCH_ID, MAX_LABEL,
                           decode_state, encode_state)

_ON_INVALID = ("raise", "drop")
# Default piece of a streamed file: large enough that the per-piece costs (a Rust call, a
# thread hand-off for the hash) vanish, small enough to stay far below any memory budget.
STREAM_CHUNK_BYTES = 64 << 20


def check_same_spec(mechanism: Any, other_fingerprint: str, other_spec: Dict[str, Any],
                    what: str) -> None:
    """Raise :class:`SpecMismatchError` unless ``other_fingerprint`` is ``mechanism``'s."""
    if other_fingerprint != mechanism.fingerprint:
        raise SpecMismatchError(
            f"{what} was made under {spec_summary(other_spec)}, not {mechanism!r} "
            f"({spec_difference(other_spec, mechanism.to_dict())})")


def _describe(batch_id: str, label: str) -> str:
    return f"{label!r} (batch id {batch_id[:16]}…)" if label else f"batch id {batch_id}"


class Aggregator:
    """Counts of a mechanism's reports: add batches, merge shards, estimate.

    The aggregate is what the decoders use: the histogram of reports for index-valued
    mechanisms (a sufficient statistic), per-bit counts for bit-vector mechanisms, the two
    stages' match counts and n2 for public-coin hashing. Shards aggregated separately and
    merged give exactly the counts of one aggregator over all reports. Every method is
    thread-safe (one lock per aggregator; the counting itself runs in parallel in Rust).
    """

    def __init__(self, mechanism: Any):
        size = mechanism._statistic_size
        memory.check(f"the aggregator of {type(mechanism).__name__}",
                     [("its counts", 8 * size)],
                     hint="a smaller k (or m) has a smaller aggregate")
        self.mechanism = mechanism
        self._counts = np.zeros(size, dtype=np.uint64)
        self._n = 0
        self._dropped = 0
        self._batches: Dict[str, str] = {}
        self._own_batch: Optional[str] = None
        self._lock = threading.RLock()

    @classmethod
    def _from_counts(cls, mechanism: Any, counts: np.ndarray, n: int, dropped: int = 0,
                     batches: Optional[Dict[str, str]] = None) -> "Aggregator":
        aggregator = cls.__new__(cls)
        aggregator.mechanism = mechanism
        aggregator._counts = np.ascontiguousarray(counts, dtype=np.uint64)
        aggregator._n = int(n)
        aggregator._dropped = int(dropped)
        aggregator._batches = dict(batches or {})
        aggregator._own_batch = None
        aggregator._lock = threading.RLock()
        return aggregator

    # -- state -------------------------------------------------------------------------

    @property
    def counts(self) -> np.ndarray:
        """The aggregated counts (a read-only view), uint64."""
        view = self._counts.view()
        view.flags.writeable = False
        return view

    @property
    def n(self) -> int:
        """Number of reports counted."""
        return self._n

    @property
    def dropped(self) -> int:
        """Number of malformed reports dropped (``on_invalid="drop"``)."""
        return self._dropped

    @property
    def batches(self) -> FrozenSet[str]:
        """Ids of the report batches counted here (see the module documentation)."""
        with self._lock:
            return frozenset(self._batches)

    def batch_labels(self) -> Dict[str, str]:
        """Batch id → label (a file name, ``"in-memory reports"``, ``"simulate"``)."""
        with self._lock:
            return dict(self._batches)

    def __repr__(self) -> str:
        return (f"Aggregator({self.mechanism!r}, n={self._n}, dropped={self._dropped}, "
                f"batches={len(self._batches)})")

    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]:
        # Pickling travels through the checked, fingerprinted state format.
        return (Aggregator.from_bytes, (self.to_bytes(),))

    # -- counting --------------------------------------------------------------------

    def _record_batch(self, batch_id: Optional[str], label: str) -> None:
        if batch_id is None:
            if self._own_batch is None:
                self._own_batch = os.urandom(32).hex()
                self._batches[self._own_batch] = "in-memory reports"
            return
        self._batches[batch_id] = label

    def _refuse_duplicate(self, batch_id: str, label: str) -> None:
        if batch_id in self._batches:
            raise DuplicateBatchError(
                f"{_describe(batch_id, label or self._batches[batch_id])} is already counted "
                "in this aggregator; counting it again would count its users twice")

    def add(self, reports: Union[Reports, ReportBatch], on_invalid: str = "raise", *,
            batch_id: Optional[str] = None, label: str = "") -> "Aggregator":
        """Count a batch of reports; returns ``self``.

        Parameters
        ----------
        reports : Reports or ReportBatch
            Output of :meth:`Mechanism.privatize` (or slices and concatenations of it), a
            batch read with :func:`ldpdist.read_reports`, or reports made elsewhere
            declared with :meth:`Mechanism.as_reports`. Their spec fingerprint must be this
            aggregator's (:class:`SpecMismatchError` otherwise, naming both specs). A
            plain ndarray or list raises ``TypeError``: it does not say which spec made
            it, and passing the users' values instead of their reports is the usual
            mistake (for many mechanisms values are valid report indices).
        on_invalid : {"raise", "drop"}
            Malformed reports (out of range, negative, wrong shape for bit vectors) raise a
            ``ValueError`` that says how many there are and where the first is, and leave
            the aggregator unchanged; with ``"drop"`` they are skipped and counted in
            :attr:`dropped`.
        batch_id : str, optional
            Identity of this batch (1 to 128 characters), refused if already counted (a
            :class:`ReportBatch` carries its own). Arrays without one count as this
            aggregator's own batch.
        label : str
            What the batch is (e.g. its file name), for messages; a ReportBatch's own
            label by default.
        """
        one_of(on_invalid, _ON_INVALID, "on_invalid")
        if not isinstance(label, str):
            raise TypeError(f"label must be a string, got {type(label).__name__}")
        if isinstance(reports, ReportBatch):
            if batch_id is not None:
                raise TypeError("a ReportBatch carries its own batch id; do not pass batch_id")
            check_same_spec(self.mechanism, reports.fingerprint, reports.spec,
                            f"the report batch {label!r}" if label else "the report batch")
            batch_id, array = reports.batch_id, reports.reports
            label = label or reports.label
        else:
            array = check_reports(self.mechanism, reports, "Aggregator.add")
            if batch_id is not None and not isinstance(batch_id, str):
                raise TypeError(f"batch_id must be a string, got {type(batch_id).__name__}")
            if batch_id is not None and not 0 < len(batch_id) <= MAX_BATCH_ID:
                # what a state can hold (from_bytes refuses other ids)
                raise ValueError(f"batch_id must have 1 to {MAX_BATCH_ID} characters, got "
                                 f"{len(batch_id)}")
        label = str(label)[:MAX_LABEL]
        drop = on_invalid == "drop"
        prepared, negative = self.mechanism._prepare_reports(array.view(np.ndarray), drop)
        rows = int(prepared.shape[0])
        with self._lock:
            if batch_id is not None:
                self._refuse_duplicate(batch_id, label)
            if self._n + rows > U64_MAX:
                raise ValueError(f"counting {rows} more reports would take n past 2^64 − 1 "
                                 f"(n = {self._n}); split the aggregation")
            valid, invalid, _first = self.mechanism._core.aggregate(prepared, self._counts, drop)
            self._n += int(valid)
            self._dropped = min(self._dropped + int(invalid) + negative, U64_MAX)
            self._record_batch(batch_id, label)
        return self

    def add_file(self, path: Union[str, "os.PathLike[str]"], *, on_invalid: str = "raise",
                 chunk_reports: Optional[int] = None, progress: Optional[bool] = None,
                 raw: bool = False) -> "Aggregator":
        """Count the reports of a file too large for memory, streaming it; returns ``self``.

        The result (counts, n, :attr:`dropped`, the batch id and label) is exactly that of
        ``add(read_reports(path))``, and the same errors are raised, but memory is one
        piece of ``chunk_reports`` reports plus one scratch count vector, whatever the file
        size (both declared to the memory guard, :mod:`ldpdist.memory`): the file is read
        with ``readinto`` into one reusable buffer, never memory-mapped.

        The spec fingerprint (:class:`SpecMismatchError`), the header and the payload length
        (:class:`IntegrityError`) and the batch id (:class:`DuplicateBatchError`) are checked
        before the payload is read. The payload's SHA-256 is checked in the same pass as the
        counting; the pieces are counted into a scratch count vector, merged into this
        aggregator only after the checksum matched, so a corrupt file (or malformed
        reports with ``on_invalid="raise"``) leaves it unchanged.

        Parameters
        ----------
        path : str or path-like
            A reports file (:mod:`ldpdist.reports`), or with ``raw=True`` a plain ``.npy``
            report array (batch id :func:`ldpdist.reports.raw_file_batch_id`; the checksum
            check does not apply, the whole file is hashed for the id in the same pass).
        on_invalid : {"raise", "drop"}
            As in :meth:`add`. With ``"raise"`` the message locates the first malformed
            report within its piece and says which reports the piece holds.
        chunk_reports : int, optional
            Reports per piece; by default as many as fit in 64 MiB (throughput is flat
            above a few MiB). Small values are for tests.
        progress : bool, optional
            A tqdm progress bar on stderr (bytes read): ``True`` always (it stays when
            done), ``False`` never, ``None`` (default) when stderr is a terminal (it is
            erased when done).
        raw : bool
            Read a plain ``.npy`` array of reports (from another system) instead. A
            Fortran-ordered 2-D array cannot be read a row at a time: it goes through
            :meth:`add` on a memory map (the only case that does).
        """
        one_of(on_invalid, _ON_INVALID, "on_invalid")
        if chunk_reports is not None and (isinstance(chunk_reports, bool) or
                                          not isinstance(chunk_reports, (int, np.integer))
                                          or chunk_reports < 1):
            raise ValueError(f"chunk_reports must be a positive integer, got {chunk_reports!r}")
        path = os.fspath(path)
        if raw:
            opened = _open_raw(path, self.mechanism)
            if opened is None:  # Fortran-ordered rows: only the in-memory path reads them
                from ..reports import raw_file_batch_id

                # a raw file's reports are declared by raw=True
                return self.add(self.mechanism.as_reports(
                                    np.load(path, mmap_mode="r", allow_pickle=False)),
                                on_invalid, batch_id=raw_file_batch_id(path),
                                label=os.path.basename(path))
            dtype, shape, offset = opened
            expected_hash, batch_id, digest = None, None, hashlib.sha256()
        else:
            layout = read_reports_layout(path, expect=self.mechanism)
            dtype, shape, offset = layout.dtype, layout.shape, layout.offset
            expected_hash, batch_id, digest = layout.payload_sha256, layout.batch_id, \
                hashlib.sha256()
            with self._lock:
                self._refuse_duplicate(batch_id, layout.label)
        label = os.path.basename(path)[:MAX_LABEL]
        where = f"reports file {path!r}"
        row_bytes = int(np.prod(shape[1:], dtype=object)) * dtype.itemsize
        rows_total = int(shape[0])
        rows = int(chunk_reports) if chunk_reports is not None else \
            max(1, STREAM_CHUNK_BYTES // max(row_bytes, 1))
        rows = max(1, min(rows, rows_total))
        size = int(self._counts.size)
        memory.check(f"streaming {where}", [("a read buffer", rows * row_bytes),
                                            ("scratch counts", 8 * size)],
                     hint="a smaller chunk_reports uses less")
        buffer = bytearray(rows * row_bytes)
        scratch = np.zeros(size, dtype=np.uint64)
        drop = on_invalid == "drop"
        valid_total = dropped = 0
        failure: Optional[Exception] = None
        bar = _progress_bar(progress, rows_total * row_bytes, label)
        try:
            with open(path, "rb") as handle:
                if raw:
                    digest.update(handle.read(offset))  # the raw id hashes the whole file
                else:
                    handle.seek(offset)
                start = 0
                for piece in read_chunks(handle, rows_total * row_bytes, buffer, where, digest):
                    count = len(piece) // row_bytes
                    if failure is None:
                        chunk = np.frombuffer(piece, dtype=dtype).reshape((count,) + shape[1:])
                        try:
                            prepared, negative = self.mechanism._prepare_reports(chunk, drop)
                            valid, invalid, _first = self.mechanism._core.aggregate(
                                prepared, scratch, drop)
                        except ValueError as exc:
                            # Keep reading: a corrupt file must say so rather than blame
                            # the reports that corruption made.
                            failure = type(exc)(f"{exc} [in reports {start} to "
                                                f"{start + count - 1} of {where}]")
                        else:
                            valid_total += int(valid)
                            dropped += int(invalid) + negative
                    start += count
                    bar.update(len(piece))
                if raw:
                    # trailing bytes after the announced array are part of the file's id
                    for block in iter(lambda: handle.read(1 << 24), b""):
                        digest.update(block)
        finally:
            bar.close()
        if expected_hash is not None and digest.hexdigest() != expected_hash:
            raise IntegrityError(f"{where}: the payload does not match its checksum (corrupt)")
        if failure is not None:
            raise failure
        if raw:
            batch_id = "raw-" + digest.hexdigest()
        with self._lock:
            self._refuse_duplicate(batch_id, label)
            if self._n + valid_total > U64_MAX:
                raise ValueError(f"counting {valid_total} more reports would take n past "
                                 f"2^64 − 1 (n = {self._n}); split the aggregation")
            if np.any(scratch > np.uint64(U64_MAX) - self._counts):
                raise ValueError("counting these reports would overflow a 64-bit count")
            self._counts += scratch
            self._n += valid_total
            self._dropped = min(self._dropped + dropped, U64_MAX)
            self._record_batch(batch_id, label)
        return self

    def merge(self, other: "Aggregator") -> "Aggregator":
        """Add another aggregator's counts; returns ``self``.

        Refused (and nothing changes) when the specs differ (:class:`SpecMismatchError`),
        when both hold a common batch — the same reports would be counted twice
        (:class:`DuplicateBatchError`, naming it) — or when a count or n would pass 2^64 − 1.
        """
        if not isinstance(other, Aggregator):
            raise TypeError(f"can only merge an Aggregator, got {type(other).__name__}")
        if other is self:
            raise DuplicateBatchError("cannot merge an aggregator into itself: every batch "
                                      "would be counted twice")
        check_same_spec(self.mechanism, other.mechanism.fingerprint, other.mechanism.to_dict(),
                        "the aggregator to merge")  # SpecMismatchError names the fields
        first, second = sorted((self, other), key=id)
        with first._lock, second._lock:
            common = sorted(set(self._batches) & set(other._batches))
            if common:
                batch = common[0]
                here, there = self._batches[batch], other._batches[batch]
                also = f" (there as {there!r})" if there and there != here else ""
                more = f" and {len(common) - 1} more" if len(common) > 1 else ""
                raise DuplicateBatchError(
                    f"both aggregators hold {_describe(batch, here)}{also}{more}; merging "
                    "them would count those reports twice")
            if self._n + other._n > U64_MAX:
                raise ValueError(f"merging would take n past 2^64 − 1 ({self._n} + {other._n})")
            if np.any(other._counts > np.uint64(U64_MAX) - self._counts):
                raise ValueError("merging would overflow a 64-bit count")
            self._counts += other._counts
            self._n += other._n
            self._dropped = min(self._dropped + other._dropped, U64_MAX)
            self._batches.update(other._batches)
        return self

    def estimate(self, decoder: str = "project", *, sparsity: Optional[int] = None,
                 **options: Any) -> np.ndarray:
        """Distribution estimate of shape (k,); see :meth:`Mechanism.estimate`. The decoder
        and its options are checked first (:func:`ldpdist.decoders.check_options`)."""
        check_options(self.mechanism, decoder,
                      {**options, **({} if sparsity is None else {"sparsity": sparsity})})
        with self._lock:
            return self.mechanism._decode(self._counts, self._n, decoder, sparsity=sparsity,
                                          **options)

    # -- serialization ---------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The state in the checked format of :mod:`ldpdist.mechanisms.state_format`."""
        with self._lock:
            return encode_state(self.mechanism, self._counts, self._n, self._dropped,
                                self._batches)

    @classmethod
    def from_bytes(cls, data: Any) -> "Aggregator":
        """Inverse of :meth:`to_bytes`. Refuses (:class:`IntegrityError`, a ``ValueError``)
        anything that is not an intact state: wrong magic, checksum mismatch, a header
        that does not match its spec or sizes (or names a key twice, or misses one: the
        message names it), non-zero padding, counts inconsistent with n."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"Aggregator.from_bytes takes bytes, got {type(data).__name__}")
        return cls._from_counts(*decode_state(memoryview(data).cast("B")))


def _open_raw(path: str, mechanism: Any) -> "Optional[Tuple[np.dtype, tuple, int]]":
    """dtype, shape and data offset of a raw ``.npy`` report array (``ValueError`` when it
    is not one or does not fit ``mechanism``'s reports); ``None`` for Fortran-ordered rows,
    which cannot be read a row at a time."""
    with open(path, "rb") as handle:
        try:
            major, _minor = np.lib.format.read_magic(handle)
            read_header = (np.lib.format.read_array_header_1_0 if major == 1
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(handle)
        except Exception as exc:  # numpy lets several kinds through (see deploy.NPY_ERRORS)
            raise ValueError(f"{path!r} is not a readable .npy file: {exc}") from None
        offset = handle.tell()
    if mechanism.report_kind == "bits":
        width = -(-mechanism.output_size // 8)
        fits = dtype == np.uint8 and len(shape) == 2 and shape[1] == width
    else:
        fits = dtype.kind in "iu" and len(shape) == 1
    if not fits:
        raise ValueError(f"raw reports in {path!r} (dtype {dtype}, shape {shape}) do not fit "
                         f"{mechanism!r}")
    if fortran and len(shape) == 2 and shape[0] > 1:
        return None
    announced = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if os.path.getsize(path) - offset < announced:
        raise IntegrityError(f"{path!r} is truncated: its .npy header announces {announced} "
                             f"bytes of data, the file holds {os.path.getsize(path) - offset}")
    return dtype, tuple(int(v) for v in shape), offset


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(progress: Optional[bool], total: int, label: str) -> Any:
    import sys

    # The automatic bar (a terminal) vanishes when done, leaving the commands' one-line
    # summary alone; a bar asked for stays.
    leave = progress is True
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _NoBar()
    return tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024,
                file=sys.stderr, leave=leave)
