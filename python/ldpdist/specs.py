"""Mechanism specs: the registry of mechanism classes, ``from_dict``, and spec fingerprints.

A *spec* is the JSON-safe dict of :meth:`Mechanism.to_dict` (``{"mechanism": name,
"format": 1, ...parameters}``): everything a client and the server must share. Its
*fingerprint* identifies it in every artifact made under it (reports files, aggregator
states), so that nothing made under one spec is ever counted under another.

Fingerprint (normative, so that other implementations can reproduce it): the SHA-256, as 64
lowercase hex digits, of the spec's *canonical JSON* encoded as UTF-8, where the canonical
JSON is ``json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
allow_nan=False)``: keys sorted, no whitespace, non-ASCII escaped as ``\\uXXXX``, integers in
decimal, floats as Python's ``repr`` (the shortest decimal that rounds back to the same
double, e.g. ``0.5``, ``1e-05``). Example: ``RandomizedResponse(k=10, epsilon=1.0)`` has the
canonical JSON ``{"epsilon":1.0,"format":1,"k":10,"mechanism":"RandomizedResponse"}``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, Callable, Dict, TypeVar

from ._validation import shown

SPEC_FORMAT = 1
_REGISTRY: Dict[str, type] = {}
# Deeper JSON than this is refused before parsing (Python's parser would raise
# RecursionError); a spec is a flat dict.
MAX_JSON_DEPTH = 32

T = TypeVar("T", bound=type)


def register(cls: T) -> T:
    """Class decorator: make ``cls`` known to :func:`from_dict` under its class name."""
    _REGISTRY[cls.__name__] = cls
    return cls


def registered() -> Dict[str, type]:
    """Mechanism class name → class, for every registered mechanism."""
    return dict(_REGISTRY)


def canonical_json(spec: Dict[str, Any]) -> str:
    """The canonical JSON text of a spec (see the module documentation)."""
    try:
        return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a spec must be JSON-safe: {exc}") from None
    except RecursionError:
        raise ValueError("a spec must be JSON-safe: it nests too deeply") from None


def fingerprint(spec: Dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``spec``."""
    return hashlib.sha256(canonical_json(spec).encode("ascii")).hexdigest()


def _json_depth_exceeds(text: str, limit: int) -> bool:
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def parse_json(text: str, what: str) -> Any:
    """``json.loads`` for untrusted text: every failure is a ``ValueError`` naming ``what``
    (nesting deeper than :data:`MAX_JSON_DEPTH` included, which Python's parser would turn
    into a ``RecursionError``)."""
    if _json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise ValueError(f"{what} nests JSON deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{what} is not valid JSON: {' '.join(str(exc).split())}") from None
    except ValueError:  # int()'s limit on the digits of a number (Python ≥ 3.11, 3.10.7, …)
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise ValueError(f"{what} holds an integer of more than {limit} digits") from None


def from_dict(spec: Dict[str, Any]) -> Any:
    """Rebuild a mechanism (a :class:`ldpdist.Mechanism`) from :meth:`Mechanism.to_dict`
    output (e.g. parsed JSON).

    Raises ``TypeError`` when ``spec`` is not a dict and ``ValueError`` for an unknown
    mechanism, an unsupported format, unknown or invalid parameters.
    """
    if not isinstance(spec, dict):
        raise TypeError(f"a mechanism spec is a dict, got {type(spec).__name__}")
    spec = dict(spec)
    name = spec.pop("mechanism", None)
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown mechanism {shown(name)}; known: {sorted(_REGISTRY)}")
    fmt = spec.pop("format", SPEC_FORMAT)
    if type(fmt) is not int or fmt != SPEC_FORMAT:
        raise ValueError(f"unsupported spec format {shown(fmt)} (this version reads "
                         f"{SPEC_FORMAT})")
    if not all(isinstance(key, str) for key in spec):
        raise ValueError("spec keys must be strings")
    cls: Callable[..., Any] = _REGISTRY[name]
    try:
        return cls(**spec)
    except TypeError as exc:
        raise ValueError(f"invalid parameters for {name}: {exc}") from None
    except OverflowError as exc:  # a value too large for the core's integer types
        raise ValueError(f"invalid parameters for {name}: {exc}") from None


def spec_summary(spec: Dict[str, Any]) -> str:
    """The mechanism's repr (``Name(k=…, epsilon=…)``) for messages, or the raw fields when
    the spec is not valid."""
    try:
        return repr(from_dict(spec))
    except Exception:  # noqa: BLE001 - any invalid spec is shown field by field
        params = ", ".join(f"{key}={shown(value)}"
                           for key, value in sorted(spec.items(), key=str)
                           if key not in ("mechanism", "format"))
        return f"{shown(spec.get('mechanism'))}({params})"


def spec_difference(got: Dict[str, Any], want: Dict[str, Any]) -> str:
    """Which fields of two specs differ, for messages."""
    keys = sorted(set(got) | set(want), key=str)
    diffs = [f"{key}: {shown(got.get(key, '(absent)'))} vs {shown(want.get(key, '(absent)'))}"
             for key in keys if got.get(key) != want.get(key)]
    return "; ".join(diffs) if diffs else "same fields, different fingerprints"
