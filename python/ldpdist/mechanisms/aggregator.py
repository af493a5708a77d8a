"""Server-side aggregation: mergeable, serializable report counts."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .base import Mechanism

_MAGIC = b"LDPDAGG1"
_ON_INVALID = ("raise", "drop")


class Aggregator:
    """Counts of a mechanism's reports: add batches, merge shards, estimate.

    The aggregate is the sufficient statistic: the histogram of reports for index-valued
    mechanisms, per-bit counts for bit-vector mechanisms. Shards aggregated separately and
    merged give exactly the counts of one aggregator over all reports.
    """

    def __init__(self, mechanism: "Mechanism"):
        self.mechanism = mechanism
        self._counts = np.zeros(mechanism._statistic_size, dtype=np.uint64)
        self._n = 0
        self._dropped = 0

    @classmethod
    def _from_counts(cls, mechanism: "Mechanism", counts: np.ndarray, n: int,
                     dropped: int = 0) -> "Aggregator":
        aggregator = cls(mechanism)
        aggregator._counts = np.ascontiguousarray(counts, dtype=np.uint64)
        aggregator._n = int(n)
        aggregator._dropped = int(dropped)
        return aggregator

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

    def __repr__(self) -> str:
        return f"Aggregator({self.mechanism!r}, n={self._n}, dropped={self._dropped})"

    def add(self, reports: Any, on_invalid: str = "raise") -> "Aggregator":
        """Count a batch of reports; returns ``self``.

        Malformed reports (out of range, negative, wrong shape for bit vectors) raise a
        ``ValueError`` that says how many there are and where the first is, and leave the
        aggregator unchanged; with ``on_invalid="drop"`` they are skipped and counted in
        :attr:`dropped`.
        """
        if on_invalid not in _ON_INVALID:
            raise ValueError(f"on_invalid must be one of {_ON_INVALID}, got {on_invalid!r}")
        drop = on_invalid == "drop"
        reports, negative = self.mechanism._prepare_reports(reports, drop)
        valid, invalid, _first = self.mechanism._core.aggregate(reports, self._counts, drop)
        self._n += int(valid)
        self._dropped += int(invalid) + negative
        return self

    def merge(self, other: "Aggregator") -> "Aggregator":
        """Add another aggregator's counts (same mechanism spec); returns ``self``."""
        if not isinstance(other, Aggregator):
            raise TypeError(f"can only merge an Aggregator, got {type(other).__name__}")
        if other.mechanism != self.mechanism:
            raise ValueError(
                f"cannot merge aggregators of different mechanisms: {self.mechanism!r} and "
                f"{other.mechanism!r}")
        self._counts += other._counts
        self._n += other._n
        self._dropped += other._dropped
        return self

    def estimate(self, decoder: str = "project", *, sparsity: Optional[int] = None,
                 **options: Any) -> np.ndarray:
        """Distribution estimate of shape (k,); see :meth:`Mechanism.estimate`."""
        return self.mechanism._decode(self._counts, self._n, decoder, sparsity=sparsity, **options)

    def to_bytes(self) -> bytes:
        """Serialize (spec, n, dropped, counts); read back with :meth:`from_bytes`."""
        spec = json.dumps(self.mechanism.to_dict(), sort_keys=True).encode()
        header = _MAGIC + struct.pack("<I", len(spec)) + spec
        header += struct.pack("<QQQ", self._n, self._dropped, self._counts.size)
        return header + self._counts.astype("<u8", copy=False).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Aggregator":
        """Inverse of :meth:`to_bytes`; raises ``ValueError`` on malformed input."""
        from .base import from_dict

        data = bytes(data)
        if not data.startswith(_MAGIC):
            raise ValueError("not an ldpdist aggregator (bad magic bytes)")
        try:
            (spec_len,) = struct.unpack_from("<I", data, len(_MAGIC))
            start = len(_MAGIC) + 4
            spec = json.loads(data[start:start + spec_len].decode())
            n, dropped, size = struct.unpack_from("<QQQ", data, start + spec_len)
        except (struct.error, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"corrupt aggregator header: {exc}") from None
        mechanism = from_dict(spec)
        body = data[start + spec_len + 24:]
        if size != mechanism._statistic_size or len(body) != 8 * size:
            raise ValueError(
                f"corrupt aggregator: expected {mechanism._statistic_size} counts, "
                f"found {len(body) // 8} (header says {size})")
        counts = np.frombuffer(body, dtype="<u8").astype(np.uint64)
        mechanism._check_counts(counts, n)
        return cls._from_counts(mechanism, counts, n, dropped)
