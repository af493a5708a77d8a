"""What every heavy-hitter protocol shares: the spec (to_dict/from_dict, fingerprint), the
client entry points (privatize items or already-hashed values), the aggregators with their
checksummed states and batch ids, the result type, and the registry of protocols.

A protocol subclasses :class:`HeavyHitterProtocol` and provides its parameters
(``_params``), its report dtype, its sampler on hashed values (``_privatize_hashed``), its
report check (``_check_reports``), its exact channels (``group_channel``) and an aggregator:
:class:`KeptReportsAggregator` when the server needs every report at the end (adaptive
rounds, as PEM), :class:`SketchAggregator` when a report only adds to fixed integer sums.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import struct
import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Tuple, Type, Union

import numpy as np

from .. import memory
from .._validation import integer, shown
from ..errors import DuplicateBatchError, IntegrityError, SpecMismatchError
from ..specs import (canonical_json, fingerprint as spec_fingerprint, from_dict as _any_spec,
                     parse_json)
from ..typed_reports import ReportBatch, Reports, check_reports
from .items import HASH_VERSION, _item_list, hash_items

__all__ = ["HeavyHitterProtocol", "HeavyHitterAggregator", "KeptReportsAggregator", "SketchAggregator",
           "ItemFrequencies", "register_protocol", "from_dict", "protocols",
           "aggregator_from_bytes"]

_STATE_MAGIC = b"LDPDIST-HH-STATE\n"
# 1 was PEM's own state (no batch ids) and 2 had no checksum over its header, neither released
_STATE_FORMAT = 3
_DIGEST = 32  # the trailing SHA-256 of every byte before it
_HEADER_FIELDS = {"state_format", "spec", "fingerprint", "n", "dropped", "batches", "payload",
                  "sha256"}
#: Longest batch id and label a state keeps (as the mechanisms' aggregators).
MAX_BATCH_ID, MAX_LABEL = 128, 256

_REGISTRY: Dict[str, Type["HeavyHitterProtocol"]] = {}


def register_protocol(cls: Type["HeavyHitterProtocol"]) -> Type["HeavyHitterProtocol"]:
    """Class decorator: make ``cls`` known to :func:`from_dict` (and the file flow) under
    its ``protocol_name``; a second class with the same name is refused."""
    name = cls.__dict__.get("protocol_name")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} must set protocol_name (a non-empty str)")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"heavy-hitter protocol name {name!r} is already taken by "
                         f"{_REGISTRY[name].__name__}")
    _REGISTRY[name] = cls
    return cls


def protocols() -> Dict[str, Type["HeavyHitterProtocol"]]:
    """The registered protocols, by spec name."""
    return dict(_REGISTRY)


def from_dict(spec: Dict[str, Any]) -> "HeavyHitterProtocol":
    """The heavy-hitter protocol of a spec made by ``to_dict`` (``spec["protocol"]`` names
    its class); an unknown protocol raises ``ValueError`` listing the known ones."""
    protocol = spec.get("protocol") if isinstance(spec, dict) else None
    if not isinstance(spec, dict):
        raise TypeError(f"a heavy-hitter spec is a dict, got {type(spec).__name__}")
    cls = _REGISTRY.get(protocol) if isinstance(protocol, str) else None
    if cls is None:
        raise ValueError(f"unknown heavy-hitter protocol {shown(protocol)} (known: "
                         f"{', '.join(repr(k) for k in sorted(_REGISTRY))})")
    return cls.from_dict(spec)


@dataclass(frozen=True)
class ItemFrequencies:
    """Estimated frequencies of hashed items (largest first when returned by ``identify``).

    Attributes
    ----------
    hashes : ndarray of uint64
        The hashed values, in ``[0, 2**bits)`` (``h64 >> (64 - bits)``, see
        :mod:`ldpdist.heavy_hitters.items`).
    estimates : ndarray of float64
        Estimated frequency (fraction of the users) of each hashed value.
    standard_errors : ndarray of float64
        The plug-in standard error of each estimate.
    items : list or None
        The item of each hashed value when it is known (a dictionary of candidates was
        given, or the protocol recovers items itself), else None per entry; None when
        no item is known at all.
    n : int
        The number of reports the estimates come from.
    """

    hashes: np.ndarray
    estimates: np.ndarray
    standard_errors: np.ndarray
    items: Optional[List[Any]]
    n: int

    def __len__(self) -> int:
        return int(self.hashes.size)

    def rows(self) -> List[Tuple[Any, int, float, float]]:
        """``(item, hash, estimate, standard error)`` per entry (item None when unknown)."""
        items = self.items if self.items is not None else [None] * len(self)
        return [(item, int(h), float(f), float(s)) for item, h, f, s in
                zip(items, self.hashes, self.estimates, self.standard_errors)]


def nonempty_items(items: Any) -> List[Any]:
    """``items`` as a list, refusing an empty sequence (one item per user, at least one)."""
    values = _item_list(items)
    if not values:
        raise ValueError("items is empty: privatize takes one item per user, at least one")
    return values


class HeavyHitterProtocol:
    """Base of the heavy-hitter protocols: the spec, the fingerprint, the client entry
    points and the server shortcuts. Subclasses set ``protocol_name`` and
    ``aggregator_class``, store ``_epsilon``, ``_bits`` and ``_seed``, and implement
    ``_params``, ``report_dtype``, ``realized_epsilon``, ``groups``, ``group_channel``,
    ``_privatize_hashed`` and ``_check_reports``."""

    protocol_name: ClassVar[str] = ""
    spec_format: ClassVar[int] = 1
    aggregator_class: ClassVar[Type["HeavyHitterAggregator"]]
    #: What the reports files record: one structured record per user (see
    #: :mod:`ldpdist.reports`).
    report_kind: ClassVar[str] = "records"
    #: Reports are random given the item (``privatize`` takes a seed).
    randomized: ClassVar[bool] = True
    _reports_noun = "protocol"
    _epsilon: float
    _bits: int
    _seed: int

    # -- what subclasses provide ---------------------------------------------------------

    def _params(self) -> Dict[str, Any]:
        """The spec's parameters (JSON-safe; ``cls(**params)`` rebuilds the protocol)."""
        raise NotImplementedError

    @property
    def report_dtype(self) -> np.dtype:
        """The numpy dtype of one report."""
        raise NotImplementedError

    def _privatize_hashed(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _privatize_items(self, items: List[Any], rng: np.random.Generator) -> np.ndarray:
        """Reports of a list of items; protocols that need more than the hashed value (the
        characters of a string) override this."""
        return self._privatize_hashed(self.hash(items), rng)

    def _check_reports(self, array: np.ndarray) -> np.ndarray:
        """``array`` if every report is well formed, else ``ValueError`` naming the first
        malformed one (by default from ``_invalid_mask``)."""
        bad = self._invalid_mask(array)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"reports[{i}] is malformed: {self._describe_invalid(array[i])}")
        return array

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        """Boolean mask of the malformed reports (what ``on_invalid="drop"`` drops)."""
        raise NotImplementedError

    def _describe_invalid(self, report: Any) -> str:
        """What is wrong with one malformed report, for messages."""
        return f"{report!r} is not a report of {self!r}"

    # -- parameters ----------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        """The privacy guarantee asked for (per user)."""
        return self._epsilon

    @property
    def bits(self) -> int:
        """Width of the hashed domain: items are mapped to ``[0, 2**bits)``."""
        return self._bits

    @property
    def seed(self) -> int:
        """The public seed of the item hash (part of the spec)."""
        return self._seed

    # -- spec ----------------------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        """JSON-safe spec; ``from_dict(protocol.to_dict()) == protocol``."""
        return {"protocol": self.protocol_name, "format": self.spec_format,
                "hash": f"blake2b-v{HASH_VERSION}", **self._params()}

    @classmethod
    def from_dict(cls, spec: Dict[str, Any]) -> "HeavyHitterProtocol":
        """The protocol of a spec made by :meth:`to_dict` (missing or unknown fields and
        another protocol, format or hash version raise ``ValueError``)."""
        name = cls.protocol_name
        if not isinstance(spec, dict):
            raise TypeError(f"a {name} spec is a dict, got {type(spec).__name__}")
        params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        expected = {"protocol", "format", "hash", *params}
        if set(spec) != expected:
            missing, extra = sorted(expected - set(spec)), sorted(set(spec) - expected)
            raise ValueError(f"not a {name} spec: missing fields {missing}, unknown fields "
                             f"{extra}")
        if spec["protocol"] != name:
            raise ValueError(f"not a {name} spec: protocol = {shown(spec['protocol'])}")
        if spec["format"] != cls.spec_format or spec["hash"] != f"blake2b-v{HASH_VERSION}":
            raise ValueError(f"unsupported {name} spec: format {shown(spec['format'])}, hash "
                             f"{shown(spec['hash'])} (this version reads format "
                             f"{cls.spec_format}, hash blake2b-v{HASH_VERSION})")
        return cls(**{p: spec[p] for p in params})

    def _report_provenance(self) -> Tuple[str, str, Dict[str, Any]]:
        cached = self.__dict__.get("_provenance")
        if cached is None:
            spec = self.to_dict()
            cached = (spec_fingerprint(spec), type(self).__name__, spec)
            self.__dict__["_provenance"] = cached
        return cached

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict` (:mod:`ldpdist.specs`):
        the tag of this protocol's reports and aggregator states."""
        return self._report_provenance()[0]

    def as_reports(self, reports: Any) -> Reports:
        """Declare an array made elsewhere (of :attr:`report_dtype`) as this protocol's
        reports; checked when added to an aggregator."""
        return Reports(reports, self)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(canonical_json(self.to_dict()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    # -- client side ---------------------------------------------------------------------

    def hash(self, items: Iterable[Any]) -> np.ndarray:
        """The hashed values of items in ``[0, 2**bits)`` (uint64): ``h64 >> (64 - bits)``."""
        return hash_items(items, self._seed) >> np.uint64(64 - self._bits)

    def _rng(self, seed: Optional[int]) -> np.random.Generator:
        if seed is not None:
            seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))

    def _tag(self, where: str, n: int, sample: Any) -> Reports:
        memory.check(where, [("the reports", n * self.report_dtype.itemsize),
                             ("the sampler's work space", n * 64)])
        return Reports._tagged(sample(), *self._report_provenance())

    def privatize(self, items: Any, seed: Optional[int] = None) -> Reports:
        """Privatize one item per user (client side).

        Parameters
        ----------
        items : sequence of bytes, str or int
            One item per user (see :mod:`ldpdist.heavy_hitters.items`); an empty sequence
            is refused.
        seed : int, optional
            ``None`` (default) draws fresh OS entropy; an integer in ``[0, 2**256)`` gives
            reproducible reports (numpy's PCG64 seeded through ``SeedSequence(seed)``).

        Returns
        -------
        Reports, shape (n,), of :attr:`report_dtype`, tagged with :attr:`fingerprint`.
        """
        values = nonempty_items(items)
        rng = self._rng(seed)
        name = f"{type(self).__name__}.privatize"
        return self._tag(name, len(values), lambda: self._privatize_items(values, rng))

    def privatize_hashed(self, values: Any, seed: Optional[int] = None) -> Reports:
        """Privatize users whose items are already hashed (client side): ``values`` are
        :meth:`hash` of the items (unsigned integers in ``[0, 2**bits)``, shape (n,)).

        The reports are exactly those of :meth:`privatize` on the items with the same seed
        (for protocols that use only the hashed value; a protocol that needs the items
        themselves refuses)."""
        if type(self)._privatize_items is not HeavyHitterProtocol._privatize_items:
            raise TypeError(f"{type(self).__name__} reports more than the item's hash: "
                            "privatize the items themselves")
        array = np.asarray(values)
        if array.dtype.kind not in "ui" or array.ndim != 1:
            raise TypeError(f"values must be a one-dimensional array of unsigned integers, "
                            f"got dtype {array.dtype}, shape {array.shape}")
        if array.size == 0:
            raise ValueError("values is empty: one hashed item per user, at least one")
        if array.dtype.kind == "i" and (array < 0).any():
            i = int(np.argmax(array < 0))
            raise ValueError(f"values[{i}] = {array[i]} is negative")
        array = array.astype(np.uint64)
        if self._bits < 64:
            bad = array >= np.uint64(2**self._bits)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"values[{i}] = {array[i]} is not a {self._bits}-bit hashed "
                                 f"value (it is >= 2**{self._bits})")
        rng = self._rng(seed)
        name = f"{type(self).__name__}.privatize_hashed"
        return self._tag(name, array.size, lambda: self._privatize_hashed(array, rng))

    # -- server side ---------------------------------------------------------------------

    def aggregator(self) -> "HeavyHitterAggregator":
        """An empty, mergeable aggregator of this protocol's reports."""
        return self.aggregator_class(self)

    def identify(self, reports: Any, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None) -> ItemFrequencies:
        """``aggregator().add(reports).identify(top, candidates)``."""
        return self.aggregator().add(reports).identify(top, candidates)

    def estimate(self, reports: Any, candidates: Iterable[Any]) -> ItemFrequencies:
        """``aggregator().add(reports).estimate(candidates)``."""
        return self.aggregator().add(reports).estimate(candidates)

    def _name_items(self, candidates: Iterable[Any]) -> Dict[int, Any]:
        """``{hashed value: item}`` of a dictionary of candidate items; two candidates with
        the same hashed value raise ``ValueError`` (they cannot be told apart)."""
        values = _item_list(candidates)
        names: Dict[int, Any] = {}
        for item, h in zip(values, self.hash(values).tolist() if values else []):
            if h in names and names[h] != item:
                raise ValueError(f"candidates {shown(names[h])} and {shown(item)} have the "
                                 f"same {self._bits}-bit hash: they cannot be told apart (use "
                                 "more bits)")
            names[h] = item
        return names


class HeavyHitterAggregator:
    """Counting shared by both aggregators: typed reports in, batch ids, merging, and the
    checksummed state. Subclasses keep their own payload (``_take``, ``_join``,
    ``_payload``, ``_load``). Thread-safe (one lock)."""

    _payload_kind: ClassVar[str] = ""
    #: What the aggregator counts the reports of. The longitudinal mechanisms' aggregators
    #: (:mod:`ldpdist.longitudinal.aggregate`) reuse this machinery with their own class;
    #: it needs ``to_dict``, ``fingerprint``, ``aggregator()`` and ``_invalid_mask``.
    _protocol_class: ClassVar[type] = HeavyHitterProtocol
    _protocol_noun: ClassVar[str] = "heavy-hitter protocol"

    def __init__(self, protocol: HeavyHitterProtocol):
        if not isinstance(protocol, self._protocol_class):
            raise TypeError(f"{type(self).__name__} takes a {self._protocol_noun}, got "
                            f"{type(protocol).__name__}")
        self.protocol = protocol
        self._n = 0
        self._dropped = 0
        self._batches: Dict[str, str] = {}
        self._own_batch: Optional[str] = None
        self._lock = threading.RLock()

    @property
    def n(self) -> int:
        """Number of reports counted."""
        return self._n

    @property
    def dropped(self) -> int:
        """Number of malformed reports skipped by ``add(..., on_invalid="drop")``."""
        return self._dropped

    @property
    def batches(self) -> Dict[str, str]:
        """The batch ids counted, with their labels."""
        return dict(self._batches)

    def _refuse_duplicate(self, batch_id: str, label: str) -> None:
        if batch_id in self._batches:
            shown_label = label or self._batches[batch_id]
            raise DuplicateBatchError(
                f"the batch {batch_id!r}" + (f" ({shown_label})" if shown_label else "")
                + " is already counted in this aggregator; counting it again would count "
                "its users twice")

    def add(self, reports: Union[Reports, ReportBatch], on_invalid: str = "raise", *,
            batch_id: Optional[str] = None, label: str = "") -> "HeavyHitterAggregator":
        """Count a batch of reports; returns ``self``.

        Parameters
        ----------
        reports : Reports or ReportBatch
            Output of ``privatize`` (or slices and concatenations of it), a batch read
            from a reports file, or reports made elsewhere declared with ``as_reports``.
            Reports of another spec raise :class:`~ldpdist.SpecMismatchError`; a plain
            array ``TypeError``; a malformed report ``ValueError`` naming its position
            (the aggregator is left unchanged).
        on_invalid : {"raise", "drop"}
            Malformed reports raise (default), or are skipped and counted in
            :attr:`dropped`.
        batch_id : str, optional
            Identity of this batch (1 to 128 characters); a batch already counted raises
            :class:`~ldpdist.DuplicateBatchError`. A ReportBatch carries its own; arrays
            without one count as this aggregator's own batch.
        label : str
            What the batch is (e.g. its file name), for messages.
        """
        name = type(self).__name__
        if on_invalid not in ("raise", "drop"):
            raise ValueError(f"on_invalid must be 'raise' or 'drop', got {shown(on_invalid)}")
        if not isinstance(label, str):
            raise TypeError(f"label must be a string, got {type(label).__name__}")
        if isinstance(reports, ReportBatch):
            if batch_id is not None:
                raise TypeError("a ReportBatch carries its own batch id; do not pass batch_id")
            if reports.fingerprint != self.protocol.fingerprint:
                raise SpecMismatchError(
                    f"the report batch {reports.label!r} was made under another spec "
                    f"({reports.spec}), not {self.protocol!r}")
            batch_id, label = reports.batch_id, label or reports.label
            typed = np.asarray(reports.reports)
        else:
            typed = np.asarray(check_reports(self.protocol, reports, f"{name}.add"))
            if batch_id is not None and not isinstance(batch_id, str):
                raise TypeError(f"batch_id must be a string, got {type(batch_id).__name__}")
            if batch_id is not None and not 0 < len(batch_id) <= MAX_BATCH_ID:
                raise ValueError(f"batch_id must have 1 to {MAX_BATCH_ID} characters, got "
                                 f"{len(batch_id)}")
        dropped = 0
        if on_invalid == "drop":
            self._checked_layout(typed)
            bad = self.protocol._invalid_mask(typed)
            dropped = int(np.count_nonzero(bad))
            typed = typed[~bad] if dropped else typed
        array = self._checked(typed)
        taken = self._take(array)
        with self._lock:
            if batch_id is not None:
                self._refuse_duplicate(batch_id, label)
            self._join(taken)
            self._n += int(array.shape[0])  # one report per row (also 2-D bit rows)
            self._dropped += dropped
            if batch_id is None:
                if self._own_batch is None:
                    self._own_batch = os.urandom(32).hex()
                    self._batches[self._own_batch] = "in-memory reports"
            else:
                self._batches[batch_id] = label[:MAX_LABEL]
        return self

    def _checked_layout(self, array: np.ndarray) -> None:
        dtype = self.protocol.report_dtype
        if array.dtype != dtype:
            raise TypeError(f"{type(self.protocol).__name__} reports have dtype {dtype}, got "
                            f"{array.dtype}")
        if array.ndim != 1:
            raise ValueError(f"reports must be one-dimensional, got shape {array.shape}")

    def _checked(self, array: np.ndarray) -> np.ndarray:
        self._checked_layout(array)
        return self.protocol._check_reports(array)

    def merge(self, other: "HeavyHitterAggregator") -> "HeavyHitterAggregator":
        """Add another aggregator's counts (same spec, else
        :class:`~ldpdist.SpecMismatchError`; a batch counted in both raises
        :class:`~ldpdist.DuplicateBatchError`). Returns self."""
        if not isinstance(other, type(self)):
            raise TypeError(f"merge takes a {type(self).__name__}, got {type(other).__name__}")
        if other.protocol.fingerprint != self.protocol.fingerprint:
            raise SpecMismatchError(f"cannot merge the reports of {other.protocol!r} into an "
                                    f"aggregator of {self.protocol!r}")
        if other is self:
            raise ValueError("an aggregator cannot be merged into itself")
        with other._lock:
            theirs, their_batches, their_n = other._snapshot(), dict(other._batches), other._n
            their_dropped = other._dropped
        with self._lock:
            for batch_id, label in their_batches.items():
                self._refuse_duplicate(batch_id, label)
            self._join(theirs)
            self._n += their_n
            self._dropped += their_dropped
            self._batches.update(their_batches)
        return self

    # -- state ---------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The state: a magic line, a canonical-JSON header (state format, spec,
        fingerprint, n, batch ids, payload kind, SHA-256 of the payload) of 8-byte
        little-endian length, the payload (little-endian), and the SHA-256 (32 raw bytes) of
        everything before it, so that no byte of the header (n, the batch ids) can change
        unnoticed."""
        with self._lock:
            data = self._payload()
            header = {"state_format": _STATE_FORMAT, "spec": self.protocol.to_dict(),
                      "fingerprint": self.protocol.fingerprint, "n": self._n,
                      "dropped": self._dropped,
                      "batches": sorted([k, v] for k, v in self._batches.items()),
                      "payload": self._payload_kind, "sha256": hashlib.sha256(data).hexdigest()}
            header.update(self._header_extra())
        head = canonical_json(header).encode("ascii")
        body = _STATE_MAGIC + struct.pack("<Q", len(head)) + head + data
        return body + hashlib.sha256(body).digest()

    @classmethod
    def from_bytes(cls, data: bytes, expect: Optional[HeavyHitterProtocol] = None
                   ) -> "HeavyHitterAggregator":
        """The aggregator of :meth:`to_bytes`; a corrupt state raises
        :class:`~ldpdist.IntegrityError`, one of another spec than ``expect``
        :class:`~ldpdist.SpecMismatchError`."""
        aggregator = aggregator_from_bytes(data, expect)
        if not isinstance(aggregator, cls):
            raise SpecMismatchError(f"the state holds a {type(aggregator).__name__}, not a "
                                    f"{cls.__name__}")
        return aggregator

    def __reduce__(self) -> Tuple[Any, ...]:
        return aggregator_from_bytes, (self.to_bytes(),)

    #: Optional state-header fields of a subclass (:meth:`_header_extra`, :meth:`_load_extra`).
    _extra_fields: ClassVar[frozenset] = frozenset()

    def _header_extra(self) -> Dict[str, Any]:
        """Extra state-header fields (subclasses; among ``_extra_fields``)."""
        return {}

    def _load_extra(self, header: Dict[str, Any]) -> None:
        """Read the extra fields back (``IntegrityError`` when invalid)."""

    # -- payload (subclasses) --------------------------------------------------------------

    def _take(self, array: np.ndarray) -> Any:
        raise NotImplementedError

    def _join(self, taken: Any) -> None:
        raise NotImplementedError

    def _snapshot(self) -> Any:
        raise NotImplementedError

    def _payload(self) -> bytes:
        raise NotImplementedError

    def _load(self, payload: bytes, n: int) -> None:
        raise NotImplementedError

    def identify(self, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None) -> ItemFrequencies:
        raise NotImplementedError

    def estimate(self, candidates: Iterable[Any]) -> ItemFrequencies:
        raise NotImplementedError


def aggregator_from_bytes(data: bytes, expect: Optional[HeavyHitterProtocol] = None
                          ) -> HeavyHitterAggregator:
    """The aggregator of any heavy-hitter protocol from its state (``to_bytes``)."""
    data = bytes(data)
    m = len(_STATE_MAGIC)
    if data[:m] != _STATE_MAGIC or len(data) < m + 8:
        raise IntegrityError("not a heavy-hitter aggregator state (bad magic)")
    (size,) = struct.unpack("<Q", data[m:m + 8])
    if size > len(data) - m - 8:
        raise IntegrityError("corrupt heavy-hitter aggregator state: truncated header")
    end = len(data) - _DIGEST
    try:
        header = parse_json(data[m + 8:m + 8 + size].decode("ascii"),
                            "the heavy-hitter aggregator state header")
    except (UnicodeDecodeError, ValueError) as error:
        raise IntegrityError(f"corrupt heavy-hitter aggregator state: {error}") from None
    if not isinstance(header, dict) or not _HEADER_FIELDS <= set(header):
        raise IntegrityError("corrupt heavy-hitter aggregator state: bad header")
    if header["state_format"] != _STATE_FORMAT:
        raise IntegrityError(f"unsupported heavy-hitter state format "
                             f"{shown(header['state_format'])} (this version reads "
                             f"{_STATE_FORMAT})")
    if end < m + 8 + size or hashlib.sha256(data[:end]).digest() != data[end:]:
        raise IntegrityError("corrupt heavy-hitter aggregator state: checksum mismatch "
                             "(the state was changed or truncated)")
    payload = data[m + 8 + size:end]
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise IntegrityError("corrupt heavy-hitter aggregator state: checksum mismatch")
    try:
        # ldpdist.from_dict reads every spec (heavy-hitter protocols, and the longitudinal
        # mechanisms whose aggregators share this state format)
        protocol = _any_spec(header["spec"])
    except (TypeError, ValueError) as error:
        raise IntegrityError(f"corrupt heavy-hitter aggregator state: {error}") from None
    make = getattr(protocol, "aggregator", None)
    aggregator = make() if callable(make) else None
    if not isinstance(aggregator, HeavyHitterAggregator):
        raise IntegrityError(f"corrupt heavy-hitter aggregator state: {protocol!r} has no "
                             "aggregator of this state format")
    if not set(header) - _HEADER_FIELDS <= aggregator._extra_fields:
        raise IntegrityError("corrupt heavy-hitter aggregator state: bad header")
    if protocol.fingerprint != header["fingerprint"]:
        raise IntegrityError("corrupt heavy-hitter aggregator state: fingerprint mismatch")
    if expect is not None and expect.fingerprint != protocol.fingerprint:
        raise SpecMismatchError(f"the state was made under {protocol!r}, not {expect!r}")
    n, batches, dropped = header["n"], header["batches"], header["dropped"]
    if header["payload"] != aggregator._payload_kind or not isinstance(n, int) or n < 0 \
            or type(dropped) is not int or dropped < 0 \
            or not isinstance(batches, list) or not all(
                isinstance(b, list) and len(b) == 2 and all(isinstance(s, str) for s in b)
                for b in batches):
        raise IntegrityError("corrupt heavy-hitter aggregator state: bad header")
    aggregator._load(payload, n)
    aggregator._load_extra(header)
    aggregator._n = n
    aggregator._dropped = dropped
    aggregator._batches = {k: v for k, v in batches}
    return aggregator


class KeptReportsAggregator(HeavyHitterAggregator):
    """Keeps every report until the end (protocols whose rounds are adaptive, so that the
    candidates of a round depend on the estimates of the one before); merging
    concatenates. The state's payload is the reports' bytes."""

    _payload_kind = "reports"

    def __init__(self, protocol: HeavyHitterProtocol):
        super().__init__(protocol)
        self._parts: List[np.ndarray] = []

    def _take(self, array: np.ndarray) -> np.ndarray:
        return array.copy()

    def _join(self, taken: np.ndarray) -> None:
        if taken.size:
            self._parts.append(taken)

    def _snapshot(self) -> np.ndarray:
        return self.reports().copy()

    def reports(self) -> np.ndarray:
        """All the reports added, as one plain array of the protocol's report dtype."""
        with self._lock:
            if len(self._parts) != 1:
                joined = (np.concatenate(self._parts) if self._parts
                          else np.zeros(0, dtype=self.protocol.report_dtype))
                self._parts = [joined]
            return self._parts[0]

    def group_rows(self, field: str = "group") -> List[np.ndarray]:
        """The reports of each group (field ``field``), each contiguous: one stable argsort
        of the groups and one gather of whole reports (as raw records)."""
        reports = np.ascontiguousarray(self.reports())
        groups = reports[field]
        sizes = np.bincount(groups, minlength=self.protocol.groups)
        order = np.argsort(groups, kind="stable")
        records = np.take(reports.view(np.dtype((np.void, reports.dtype.itemsize))), order)
        ordered = records.view(reports.dtype)
        ends = np.cumsum(sizes)
        return [ordered[end - size:end] for end, size in zip(ends.tolist(), sizes.tolist())]

    def _payload(self) -> bytes:
        return self.reports().tobytes()

    def _load(self, payload: bytes, n: int) -> None:
        dtype = self.protocol.report_dtype
        if len(payload) % dtype.itemsize or len(payload) // dtype.itemsize != n:
            raise IntegrityError("corrupt heavy-hitter aggregator state: n does not match "
                                 "the reports")
        array = np.frombuffer(payload, dtype=dtype).copy()
        try:
            self._parts = [self._checked(array)] if array.size else []
        except ValueError as error:
            raise IntegrityError(f"corrupt heavy-hitter aggregator state: {error}") from None


class SketchAggregator(HeavyHitterAggregator):
    """Keeps fixed-size exact integer sums (int64) instead of the reports: a report only
    adds to them. Subclasses implement ``_state_shape()`` and ``_absorb(sums, reports)``
    (add the batch's contribution in place); merging adds the sums. The state's payload is
    the sums (little-endian int64)."""

    _payload_kind = "sums"

    def __init__(self, protocol: HeavyHitterProtocol):
        super().__init__(protocol)
        shape = tuple(self._state_shape())
        memory.check(f"{type(self).__name__}", [("the sums", 8 * int(np.prod(shape)))])
        self._sums = np.zeros(shape, dtype=np.int64)

    def _state_shape(self) -> Tuple[int, ...]:
        raise NotImplementedError

    def _absorb(self, sums: np.ndarray, reports: np.ndarray) -> None:
        raise NotImplementedError

    @property
    def sums(self) -> np.ndarray:
        """The integer sums (read-only view)."""
        view = self._sums.view()
        view.flags.writeable = False
        return view

    def _take(self, array: np.ndarray) -> np.ndarray:
        delta = np.zeros_like(self._sums)
        self._absorb(delta, array)
        return delta

    def _join(self, taken: np.ndarray) -> None:
        self._sums += taken

    def _snapshot(self) -> np.ndarray:
        return self._sums.copy()

    def _payload(self) -> bytes:
        return self._sums.astype("<i8").tobytes()

    def _load(self, payload: bytes, n: int) -> None:
        if len(payload) != self._sums.nbytes:
            raise IntegrityError("corrupt heavy-hitter aggregator state: the sums have "
                                 f"{len(payload)} bytes, the spec makes {self._sums.nbytes}")
        sums = np.frombuffer(payload, dtype="<i8").astype(np.int64).reshape(self._sums.shape)
        try:
            self._check_sums(sums, n)
        except ValueError as error:
            raise IntegrityError(f"corrupt heavy-hitter aggregator state: {error}") from None
        self._sums = sums

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        """Raise ``ValueError`` if sums read from a state cannot come from n reports
        (subclasses check what their sums allow)."""
