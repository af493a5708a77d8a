"""The aggregator state format: an aggregator's counts, n and batch ids as checked bytes.

:meth:`Aggregator.to_bytes <ldpdist.Aggregator.to_bytes>` writes this format and
:meth:`Aggregator.from_bytes <ldpdist.Aggregator.from_bytes>` reads it (pickling an
aggregator, ``ldpdist aggregate -o state.ldps`` and the merging of shard states all travel
through it). Integers are little-endian:

========  =================================================================================
bytes     content
========  =================================================================================
0–7       magic ``LDPDAGG2``
8–11      header length H (uint32)
12…       header: canonical JSON object with ``format`` = ``"ldpdist-state"``,
          ``version`` = 2, ``mechanism``, ``spec``, ``fingerprint`` (of the spec), ``n``,
          ``dropped``, ``size`` (number of counts) and ``batches`` (list of
          ``[batch id, label]`` pairs, sorted by id)
…         zero bytes up to the next multiple of 8
…         ``size`` counts (uint64)
last 32   SHA-256 of every byte before it
========  =================================================================================

The checksum covers every byte, so a changed bit anywhere is refused as corruption; the
padding must moreover be zero. It carries no key: it catches accidents, not a forgery.

This module knows the bytes only; what the counts mean, and how batches are added and merged,
is the :class:`~ldpdist.Aggregator`'s (``ldpdist.mechanisms.aggregator``).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from .. import memory
from .._validation import U64_MAX
from ..errors import IntegrityError
from ..specs import canonical_json, checked_fields, fingerprint, from_dict, parse_json

__all__ = ["STATE_MAGIC", "OLD_STATE_MAGICS", "FORMAT_NAME", "FORMAT_VERSION", "MAX_LABEL",
           "MAX_BATCH_ID", "encode_state", "decode_state"]

STATE_MAGIC = b"LDPDAGG2"
#: Magic bytes of the states of older releases (no checksum, no batch ids): recognised, to
#: say so, and refused.
OLD_STATE_MAGICS = (b"LDPDAGG1",)
FORMAT_NAME = "ldpdist-state"
FORMAT_VERSION = 2
_HEADER_KEYS = {"format", "version", "mechanism", "spec", "fingerprint", "n", "dropped",
                "size", "batches"}
_MAX_HEADER = 1 << 30
#: The longest batch label a state holds (longer labels are cut when a batch is counted).
MAX_LABEL = 200
#: The longest batch id a state holds (longer ids are refused when a batch is counted).
MAX_BATCH_ID = 128


def encode_state(mechanism: Any, counts: np.ndarray, n: int, dropped: int,
                 batches: Mapping[str, str]) -> bytes:
    """The state bytes of an aggregator of ``mechanism`` holding ``counts`` (uint64), ``n``
    reports, ``dropped`` dropped ones and ``batches`` (batch id → label)."""
    spec = mechanism.to_dict()
    header = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "mechanism": spec["mechanism"],
        "spec": spec,
        "fingerprint": fingerprint(spec),
        "n": n,
        "dropped": dropped,
        "size": int(counts.size),
        "batches": [[batch, label] for batch, label in sorted(batches.items())],
    }
    header_bytes = canonical_json(header).encode("ascii")
    prefix = STATE_MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes
    prefix += b"\0" * (-len(prefix) % 8)
    body = prefix + counts.astype("<u8", copy=False).tobytes()
    return body + hashlib.sha256(body).digest()


def decode_state(data: memoryview) -> Tuple[Any, np.ndarray, int, int, Dict[str, str]]:
    """``(mechanism, counts, n, dropped, batches)`` from state bytes (a byte memoryview).
    Refuses (:class:`IntegrityError`, a ``ValueError``) anything that is not an intact
    state: wrong magic, checksum mismatch, a header that does not match its spec or sizes
    (or names a key twice, or misses one: the message names it), non-zero padding, counts
    inconsistent with n."""
    if any(bytes(data[:8]) == magic for magic in OLD_STATE_MAGICS):
        raise IntegrityError("this state was written by an older ldpdist without a "
                             "checksum or batch ids; aggregate its reports again")
    if len(data) < 12 + 32 or bytes(data[:8]) != STATE_MAGIC:
        raise IntegrityError("not an ldpdist aggregator state (bad magic bytes)")
    (length,) = struct.unpack_from("<I", data, 8)
    if length > min(_MAX_HEADER, len(data) - 12 - 32):
        raise IntegrityError(f"corrupt state: header length {length} does not fit in "
                             f"{len(data)} bytes")
    body, digest = data[:-32], bytes(data[-32:])
    if hashlib.sha256(body).digest() != digest:
        raise IntegrityError("corrupt state: the checksum does not match its contents "
                             "(truncated, edited, or damaged)")
    header_bytes = bytes(data[12:12 + length])
    try:
        header = parse_json(header_bytes.decode("ascii"), "the state header")
    except (UnicodeDecodeError, ValueError) as exc:
        raise IntegrityError(f"corrupt state header: {exc}") from None
    mechanism, n, dropped, batches = _checked_header(header, header_bytes)
    offset = 12 + length + (-(12 + length) % 8)
    if any(body[12 + length:offset]):
        raise IntegrityError("corrupt state: the padding after the header is not zero")
    size = mechanism._statistic_size
    if len(body) - offset != 8 * size:
        raise IntegrityError(f"corrupt state: {len(body) - offset} bytes of counts, the "
                             f"spec needs {8 * size} ({size} counts)")
    memory.check("reading an aggregator state", [("its counts", 8 * size)])
    counts = np.frombuffer(body, dtype="<u8", count=size, offset=offset).astype(np.uint64)
    mechanism._check_counts(counts, n)
    return mechanism, counts, n, dropped, batches


def _checked_header(header: Any, header_bytes: bytes) -> Tuple[Any, int, int, Dict[str, str]]:
    if not isinstance(header, dict):
        raise IntegrityError("corrupt state header: not a JSON object")
    try:
        checked_fields(header, "the state header", sorted(_HEADER_KEYS))
    except ValueError as exc:
        raise IntegrityError(f"corrupt state header: {exc}") from None
    if header["format"] != FORMAT_NAME or header["version"] != FORMAT_VERSION:
        raise IntegrityError(f"unsupported state format {header['format']!r} version "
                             f"{header['version']!r}")
    if canonical_json(header).encode("ascii") != header_bytes:
        raise IntegrityError("corrupt state header: not in canonical form")
    spec = header["spec"]
    if not isinstance(spec, dict) or fingerprint(spec) != header["fingerprint"] \
            or spec.get("mechanism") != header["mechanism"]:
        raise IntegrityError("corrupt state header: the spec does not match its fingerprint")
    try:
        mechanism = from_dict(spec)
    except (ValueError, TypeError) as exc:
        raise IntegrityError(f"corrupt state header: invalid spec: {exc}") from None
    n, dropped, size = header["n"], header["dropped"], header["size"]
    for name, value in (("n", n), ("dropped", dropped), ("size", size)):
        if type(value) is not int or not 0 <= value <= U64_MAX:
            raise IntegrityError(f"corrupt state header: {name} = {value!r} is not an "
                                 "integer in [0, 2^64)")
    if size != mechanism._statistic_size:
        raise IntegrityError(f"corrupt state header: size {size} does not match the spec "
                             f"({mechanism._statistic_size} counts)")
    batches = _checked_batches(header["batches"])
    return mechanism, n, dropped, batches


def _checked_batches(entries: Any) -> Dict[str, str]:
    if not isinstance(entries, list):
        raise IntegrityError("corrupt state header: batches must be a list")
    batches: Dict[str, str] = {}
    for entry in entries:
        if (not isinstance(entry, list) or len(entry) != 2
                or not all(isinstance(v, str) for v in entry)
                or not 0 < len(entry[0]) <= MAX_BATCH_ID or len(entry[1]) > MAX_LABEL):
            raise IntegrityError(f"corrupt state header: bad batch entry {entry!r:.80}")
        if entry[0] in batches:
            raise IntegrityError(f"corrupt state header: batch {entry[0]} listed twice")
        batches[entry[0]] = entry[1]
    return batches
