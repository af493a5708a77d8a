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
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

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


def hash_items(items: Iterable[Any], seed: int = 0) -> np.ndarray:
    """The 64-bit hashes ``h64`` of a sequence of items, as a uint64 array.

    Repeated items are hashed once (a dictionary of the distinct items of the call).

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
    blake2b = hashlib.blake2b
    if set(map(type, values)) <= _EXACT:
        # Only exact str, bytes and int: no two of them are equal across types, so the
        # distinct items are the keys of one dict (built at C speed) and each is hashed once.
        # The keyed state is set up once and copied per item (keying hashes a whole block).
        keyed = blake2b(digest_size=8, key=key, person=PERSONALIZATION)
        table = dict.fromkeys(values)
        for item in table:
            try:
                message = (_TAG_STR + item.encode("utf-8") if type(item) is str
                           else _message(item))
            except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
                message = b""
            if not message or len(message) > MAX_ITEM_BYTES + 1:
                _message(item, values.index(item))  # raises, naming the item's position
            state = keyed.copy()
            state.update(message)
            table[item] = int.from_bytes(state.digest(), "big")
        return np.fromiter(map(table.__getitem__, values), dtype=np.uint64, count=len(values))
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
