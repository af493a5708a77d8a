"""The memory budget shared by the whole library.

Every buffer whose size depends on k, m, n or the number of threads is declared to one guard
(in the Rust core) *before* it is allocated, with the total of the operation, and refused
with a ``MemoryError`` naming the parts when it exceeds the budget. The budget is the
smallest of:

* the explicit limit (:func:`set_memory_limit`, or the environment variable
  ``LDPDIST_MAX_MEMORY`` read at first use: bytes, with an optional K/M/G/T suffix in powers
  of 1024), else 75% of the memory the operating system reports available;
* the address space left under the process's ``RLIMIT_AS``;
* the memory left under the container's cgroup limit.

The last two are hard limits: an explicit limit does not lift them.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple, Union

from . import _core
from ._validation import integer

__all__ = ["set_memory_limit", "memory_limit", "check"]

_U64_MAX = 2**64 - 1


def set_memory_limit(limit: Union[int, str, None]) -> None:
    """Set the explicit memory budget in bytes (an int, or a string such as ``"2G"``);
    ``None`` returns to the default (75% of the available memory)."""
    if limit is None:
        _core.set_memory_limit(None)
        return
    if isinstance(limit, str):
        value = _core.parse_byte_count(limit)
        if value is None:
            raise ValueError(f"limit {limit!r} is not a byte count (examples: 3000000000, "
                             "'512M', '2G')")
    else:
        value = integer(limit, "limit", minimum=0)
    _core.set_memory_limit(min(value, _U64_MAX))


def memory_limit() -> int:
    """The budget, in bytes, that a large request gets now."""
    return int(_core.memory_budget()[0])


def check(what: str, parts: Iterable[Tuple[str, int]], hint: Optional[str] = None) -> None:
    """Raise ``MemoryError`` when the buffers ``parts`` (name, bytes) of the operation
    ``what`` do not fit the budget; do nothing otherwise."""
    _core.check_memory(what, [(name, min(max(int(b), 0), _U64_MAX)) for name, b in parts], hint)
