"""Argument checks shared by the public API.

Every check raises ``TypeError`` for a wrong type or dtype and ``ValueError`` for a value out
of range, with a message that names the argument and, for arrays, the first offending
position. Nothing is silently cast, wrapped or clipped.
"""

from __future__ import annotations

import numbers
import operator
import reprlib
from typing import Any, Optional, Sequence

import numpy as np

_KEY_BYTES = 32

_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 2, 60, 60, 40


def shown_duration(seconds: float) -> str:
    """A rough duration for a message: seconds below two minutes, minutes below two hours,
    hours beyond."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.0f} hours"


def shown(value: Any) -> str:
    """``repr(value)`` for a message about an untrusted value: shortened (about 80
    characters at most), and never an error itself (containers nested thousands deep, a
    ``__repr__`` that raises)."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # noqa: BLE001 - any object can be passed; the message must not fail
        return f"<{type(value).__name__} object>"


def one_of(value: Any, options: Sequence[str], name: str) -> str:
    """``value`` when it is one of the strings ``options``, else ``ValueError`` naming
    them (compared only as a string: an array or an object with an odd ``__eq__`` is just
    not one of them)."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {tuple(options)}, got {shown(value)}")
    return value


def float64_array(x: Any, name: str, what: str = "a sequence of real numbers") -> np.ndarray:
    """``x`` as a float64 ndarray: ndarrays must already be float64 (``TypeError``
    otherwise: a silent cast could change values); anything else is converted (``TypeError``
    naming ``what`` it should be when it cannot be)."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float64:
            raise TypeError(
                f"{name} must have dtype float64, got {x.dtype}; convert explicitly with "
                f"{name}.astype(np.float64) if that is what you mean"
            )
        return x
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be {what}: {exc}") from None


def float_vector(x: Any, name: str, *, finite: bool = True, operation: Optional[str] = None,
                 result_itemsize: int = 0) -> np.ndarray:
    """A 1-D, C-contiguous, aligned float64 view of ``x`` (copied only when not already so:
    a view of a foreign buffer at an odd address is copied, the core refuses it; a copy is
    declared to the memory guard first, see :func:`contiguous`).

    ndarrays must already be float64; other sequences of real numbers are converted
    (:func:`float64_array`).
    """
    array = float64_array(x, name)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if finite:
        check_finite(array, name)
    return contiguous(array, name, operation=operation, result_itemsize=result_itemsize)


def contiguous(array: np.ndarray, name: str, dtype: Any = None, *,
               operation: Optional[str] = None, result_itemsize: int = 0) -> np.ndarray:
    """``array`` as a C-contiguous, aligned array of ``dtype`` (default: its own): itself
    when it already is one, else a copy, which is first declared to the memory guard (a
    broadcast view such as ``np.broadcast_to(1.0, 2**31)`` owns no memory, but its copy
    does), together with the result of ``operation`` (``result_itemsize`` bytes per entry)
    when given, so that the guard's ``MemoryError`` comes before numpy's allocation."""
    target = array.dtype if dtype is None else np.dtype(dtype)
    if (array.dtype == target and array.flags.c_contiguous and array.flags.aligned):
        return array
    if array.size:
        from . import _core  # here: ldpdist.memory imports this module

        what = operation or f"a contiguous {target} copy of {name}"
        parts = [(f"a contiguous {target} copy of {name}", target.itemsize * array.size)]
        if result_itemsize:
            parts.append(("the result", result_itemsize * array.size))
        _core.check_memory(what, parts, None)
    return np.require(array, dtype=target, requirements=["C", "A"])


def check_finite(array: np.ndarray, name: str) -> None:
    """Raise ``ValueError`` naming the first NaN or infinite entry of ``array``."""
    bad = ~np.isfinite(array)
    if bad.any():
        position = tuple(int(i) for i in np.argwhere(bad)[0])
        where = position[0] if len(position) == 1 else position
        raise ValueError(f"{name} must be finite: element {where} is {array[position]}")


def as_array(x: Any, name: str) -> np.ndarray:
    """``x`` itself when it is an ndarray, else ``np.asarray(x)``; a sequence numpy cannot
    turn into an array (ragged, nested too deeply, …) raises ``TypeError`` naming ``name``."""
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(x)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        why = " ".join(str(exc).split())
        raise TypeError(f"{name} must be a 1-D array or a flat sequence of integers; this "
                        f"{type(x).__name__} is not one ({why})") from None


def int64_vector(x: Any, name: str, *, operation: Optional[str] = None,
                 result_itemsize: int = 0) -> np.ndarray:
    """A 1-D, C-contiguous, aligned int64 view of an integer array (any integer dtype that
    fits; a copy is declared to the memory guard first, see :func:`contiguous`)."""
    array = np.asarray(x)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        position = int(np.argmax(array > np.iinfo(np.int64).max))
        raise ValueError(f"{name}[{position}] = {array[position]} does not fit in int64")
    return contiguous(array, name, np.int64, operation=operation,
                      result_itemsize=result_itemsize)


def integer(value: Any, name: str, *, minimum: Optional[int] = None,
            maximum: Optional[int] = None) -> int:
    """A Python int from an integral value (bool refused), checked against the bounds."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {shown(value)}")
    value = operator.index(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be ≤ {maximum}, got {value}")
    return value


def real(value: Any, name: str) -> float:
    """A finite Python float from a real number (bool refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} "
                        f"{shown(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def seed_key(seed: Any, name: str = "seed") -> Optional[bytes]:
    """The 32-byte generator key of an integer seed, or ``None`` for OS entropy.

    The key is ``seed.to_bytes(32, "little")``, so seeds are integers in [0, 2**256).
    """
    if seed is None:
        return None
    seed = integer(seed, name, minimum=0, maximum=2 ** (8 * _KEY_BYTES) - 1)
    return seed.to_bytes(_KEY_BYTES, "little")


U64_MAX = 2**64 - 1
_SUM_BLOCK = 1 << 20


def exact_sum_u64(array: np.ndarray) -> int:
    """The exact sum of a uint64 array as a Python int (numpy's uint64 sum wraps).

    Sums the high and low 32-bit halves separately, in blocks of 2**20 entries: each partial
    sum fits in uint64, and the temporaries stay small whatever the array's size.
    """
    array = np.asarray(array, dtype=np.uint64).reshape(-1)
    total = 0
    for start in range(0, array.size, _SUM_BLOCK):
        block = array[start:start + _SUM_BLOCK]
        high = int((block >> np.uint64(32)).sum(dtype=np.uint64))
        low = int((block & np.uint64(0xFFFFFFFF)).sum(dtype=np.uint64))
        total += (high << 32) + low
    return total


def probability_vector(p: Any, k: int, name: str = "p", *, tol: float = 1e-9) -> np.ndarray:
    """A distribution over [0, k): a 1-D float64 vector of shape (k,), finite, non-negative,
    summing to 1 within ``tol`` (``TypeError`` / ``ValueError`` naming the first offending
    entry otherwise). Returned as given (no renormalization)."""
    array = float_vector(p, name)
    if array.shape != (k,):
        raise ValueError(f"{name} must have shape ({k},), got {array.shape}")
    negative = array < 0
    if negative.any():
        i = int(np.argmax(negative))
        raise ValueError(f"{name} must be non-negative: {name}[{i}] = {array[i]}")
    total = float(np.sum(array))
    if abs(total - 1.0) > tol:
        raise ValueError(f"{name} must sum to 1 (within {tol:g}), got a sum of {total!r}")
    return array
