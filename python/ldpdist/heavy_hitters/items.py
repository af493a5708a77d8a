"""Items and their public hash: how a heavy-hitter protocol turns a string, a byte string or
a 64-bit integer into a point of its domain.

Every heavy-hitter protocol of :mod:`ldpdist.heavy_hitters` works over the domain of
``bits``-bit integers (``bits`` ≤ 64) into which items are mapped by one public, seeded hash,
specified here byte for byte so that a client written in any language reproduces it.

Items
-----
An item is one of:

* ``bytes`` (or ``bytearray`` / ``memoryview``): its bytes;
* ``str``: its UTF-8 encoding. A string that has no UTF-8 encoding (a lone surrogate such
  as ``"\\ud800"``, which Python allows in ``str``) is refused with a ``ValueError`` naming
  the item's position and the character's offset;
* an unsigned 64-bit integer (a Python ``int`` or a numpy integer in ``[0, 2**64)``): its 8
  little-endian bytes. Booleans are refused.

An item has at most :data:`~ldpdist.heavy_hitters.MAX_ITEM_BYTES` (1024) bytes once
encoded; a longer item is refused (``ValueError`` naming its position and length). The empty byte string and the empty string
are items (e.g. an empty search query): they hash like any other item.

Hash (version 1, normative)
---------------------------
With the protocol's public ``seed`` (an integer in ``[0, 2**256)``), an item's 64-bit hash is

.. code-block:: text

    message = tag || payload        tag: 0x01 bytes, 0x02 str, 0x03 integer
    digest  = BLAKE2b(message, digest_size=8, key=seed.to_bytes(32, "little"),
                      person=b"ldpdist.hh.v1")         (RFC 7693; person zero-padded to 16)
    h64     = int.from_bytes(digest, "big")

where ``payload`` is the bytes, the UTF-8 encoding, or ``value.to_bytes(8, "little")``. The
tag separates the three kinds: ``b"a"``, ``"a"`` and ``97`` hash differently. A protocol over
``bits`` bits uses the first ``bits`` bits of the digest, ``h64 >> (64 - bits)``, and a
prefix of length s of that value is its first s bits. In Python's standard library this is
``hashlib.blake2b(message, digest_size=8, key=..., person=b"ldpdist.hh.v1")``.

The hash is one-way: the server recovers hashed values, not items. To name the items found,
pass a dictionary of candidate items; their hashes are matched to the values found.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from .. import _core
from .._validation import integer, shown

__all__ = ["MAX_ITEM_BYTES", "HASH_VERSION", "PERSONALIZATION", "encode_item", "hash_item",
           "hash_items"]

#: The largest item accepted, in bytes once encoded (UTF-8 for ``str``).
MAX_ITEM_BYTES = 1024
#: Version of the hash specification (recorded in every protocol's spec).
HASH_VERSION = 1
#: BLAKE2b personalization string of version 1 (zero-padded to 16 bytes by BLAKE2b).
PERSONALIZATION = b"ldpdist.hh.v1"

_TAG_BYTES, _TAG_STR, _TAG_INT = b"\x01", b"\x02", b"\x03"
_U64_MAX = 2**64 - 1
_CACHEABLE = (str, bytes, int)
_EXACT = {str, bytes, int}  # types whose items are never equal to an item of another


def _key(seed: Any) -> bytes:
    return integer(seed, "seed", minimum=0, maximum=2**256 - 1).to_bytes(32, "little")


def _message(item: Any, position: Optional[int] = None) -> bytes:
    where = "item" if position is None else f"items[{position}]"
    if isinstance(item, str):
        try:
            payload = item.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{where} is a str with no UTF-8 encoding: character {exc.start} is "
                f"{item[exc.start]!r} (a lone surrogate); items that are str are hashed as "
                "UTF-8 (pass bytes for arbitrary binary data)") from None
        tag = _TAG_STR
    elif isinstance(item, (bytes, bytearray, memoryview)):
        payload, tag = bytes(item), _TAG_BYTES
    elif isinstance(item, (bool, np.bool_)):
        raise TypeError(f"{where} is a boolean ({item!r}); items are bytes, str or unsigned "
                        "64-bit integers")
    elif isinstance(item, (int, np.integer)):
        value = int(item)
        if not 0 <= value <= _U64_MAX:
            raise ValueError(f"{where} = {value} is outside [0, 2**64): integer items are "
                             "unsigned 64-bit")
        payload, tag = value.to_bytes(8, "little"), _TAG_INT
    else:
        raise TypeError(f"{where} is a {type(item).__name__} ({shown(item)}); items are bytes, "
                        "str or unsigned 64-bit integers")
    if len(payload) > MAX_ITEM_BYTES:
        raise ValueError(f"{where} has {len(payload)} bytes (encoded), more than the maximum "
                         f"MAX_ITEM_BYTES = {MAX_ITEM_BYTES}")
    return tag + payload


def encode_item(item: Any) -> bytes:
    """The message hashed for ``item``: its tag byte followed by its payload (see the module
    documentation). ``TypeError`` / ``ValueError`` for what is not an item."""
    return _message(item)


def hash_item(item: Any, seed: int = 0) -> int:
    """The 64-bit hash ``h64`` of one item under the public ``seed`` (module documentation).

    Examples
    --------
    >>> hash_item("hello") == hash_item("hello") != hash_item(b"hello")
    True
    """
    digest = hashlib.blake2b(_message(item), digest_size=8, key=_key(seed),
                             person=PERSONALIZATION).digest()
    return int.from_bytes(digest, "big")


def _item_list(items: Any) -> List[Any]:
    """``items`` as a list of Python items, refusing what is not a sequence of items."""
    if isinstance(items, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"items must be a sequence of items, got a single "
                        f"{type(items).__name__} ({shown(items)}); wrap it in a list")
    if isinstance(items, np.ndarray):
        if items.ndim != 1:
            raise ValueError(f"items must be one-dimensional, got shape {items.shape}")
        if items.dtype.kind == "S":
            raise TypeError("items of numpy dtype 'S' are refused: numpy drops their trailing "
                            "NUL bytes; pass a list of bytes (or an object array)")
        if items.dtype.kind == "i" and items.size and items.min() < 0:
            i = int(np.argmax(items < 0))
            raise ValueError(f"items[{i}] = {items[i]} is outside [0, 2**64): integer items "
                             "are unsigned 64-bit")
        if items.dtype.kind not in "iuUO":
            raise TypeError(f"items must be bytes, str or unsigned 64-bit integers, got an "
                            f"array of dtype {items.dtype}")
        return items.tolist()
    try:
        return list(items)
    except TypeError:
        raise TypeError(f"items must be a sequence of items (bytes, str or unsigned 64-bit "
                        f"integers), got {type(items).__name__}") from None


def _messages(strs: List[str], raw: List[bytes],
              ints: List[int]) -> Optional[Tuple[bytes, np.ndarray]]:
    """The concatenated messages of distinct items of the exact types str, bytes and int (in
    this order) and their lengths (uint64), or ``None`` when one of the items is refused."""
    buffers, lengths = [], []
    if strs:
        try:
            encoded = list(map(str.encode, strs))  # UTF-8, strict
        except UnicodeEncodeError:
            return None
        buffers.append(_TAG_STR + _TAG_STR.join(encoded))
        lengths.append(np.fromiter(map(len, encoded), dtype=np.uint64, count=len(encoded)))
    if raw:
        buffers.append(_TAG_BYTES + _TAG_BYTES.join(raw))
        lengths.append(np.fromiter(map(len, raw), dtype=np.uint64, count=len(raw)))
    if ints:
        try:
            payload = np.array(ints, dtype="<u8")
        except (OverflowError, ValueError, TypeError):  # outside [0, 2**64)
            return None
        rows = np.empty((len(ints), 9), dtype=np.uint8)
        rows[:, 0] = _TAG_INT[0]
        rows[:, 1:] = payload.view(np.uint8).reshape(-1, 8)
        buffers.append(rows.tobytes())
        lengths.append(np.full(len(ints), 8, dtype=np.uint64))
    if not lengths:
        return b"", np.zeros(0, dtype=np.uint64)
    sizes = np.concatenate(lengths) + 1  # the tag byte
    if sizes.max() > MAX_ITEM_BYTES + 1:
        return None
    return b"".join(buffers), sizes


def hash_items(items: Iterable[Any], seed: int = 0) -> np.ndarray:
    """The 64-bit hashes ``h64`` of a sequence of items, as a uint64 array.

    Repeated items are hashed once (a dictionary of the distinct items of the call); items of
    the exact types ``str``, ``bytes`` and ``int`` are hashed in parallel by the compiled
    kernel, with the same bits as :func:`hash_item`.

    Parameters
    ----------
    items : sequence of bytes, str or int, or a 1-D numpy array (integers, str or objects)
        The items (see the module documentation for what is accepted).
    seed : int, default 0
        The public hash seed, in ``[0, 2**256)``.

    Returns
    -------
    ndarray of uint64, shape (len(items),)
    """
    key = _key(seed)
    values = _item_list(items)
    types = set(map(type, values))
    if types <= _EXACT:
        # Only exact str, bytes and int: no two of them are equal across types, so the
        # distinct items are the keys of one dict (built at C speed); their messages are
        # built per kind at C speed and hashed in one call of the Rust kernel.
        table = dict.fromkeys(values)
        if len(types) == 1:
            distinct = list(table)
            kinds = [distinct if kind in types else [] for kind in (str, bytes, int)]
        else:
            kinds = [[item for item in table if type(item) is kind]
                     for kind in (str, bytes, int)]
        built = _messages(*kinds)
        if built is None:  # an item is refused: name the first one, as _message words it
            for i, item in enumerate(values):
                _message(item, i)
            raise AssertionError("an item was refused but _message accepts them all")
        messages, lengths = built
        offsets = np.zeros(len(lengths) + 1, dtype=np.uint64)
        np.cumsum(lengths, out=offsets[1:])
        hashes = _core.hash_item_messages(messages, offsets, key)
        if len(types) <= 1 and len(table) == len(values):
            return hashes  # all distinct: the dict's order is the items' order
        index = dict(zip(kinds[0] + kinds[1] + kinds[2], range(len(table))))
        return hashes[np.fromiter(map(index.__getitem__, values), dtype=np.intp,
                                  count=len(values))]
    blake2b = hashlib.blake2b
    out = np.empty(len(values), dtype=np.uint64)
    cache: Dict[Any, int] = {}
    for i, item in enumerate(values):
        # ``type`` is part of the key: b"a" and "a" hash differently, and bools are refused
        cacheable = type(item) in _CACHEABLE
        h = cache.get((type(item), item)) if cacheable else None
        if h is None:
            h = int.from_bytes(blake2b(_message(item, i), digest_size=8, key=key,
                                       person=PERSONALIZATION).digest(), "big")
            if cacheable:
                cache[(type(item), item)] = h
        out[i] = h
    return out
