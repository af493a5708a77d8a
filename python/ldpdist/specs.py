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
import inspect
import json
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar

from ._validation import shown

SPEC_FORMAT = 1
_REGISTRY: Dict[str, type] = {}
_SHORT_NAMES: Dict[str, str] = {}  # short name -> class name
_LABELS: Dict[str, str] = {}  # short name -> label of the experiments' curves
# Deeper JSON than this is refused before parsing (Python's parser would raise
# RecursionError); a spec is a flat dict.
MAX_JSON_DEPTH = 32

T = TypeVar("T", bound=type)


def register(short_name: str, label: Optional[str] = None) -> Callable[[T], T]:
    """Class decorator, the one registration line of a mechanism:
    ``@register("hr", "HR")`` makes the class known to :func:`from_dict` under its class
    name, to the command line and the experiments under ``short_name`` (lowercase), and
    names its curves ``label`` in the experiments' CSV and figures (default: the short name
    in upper case). Everything that lists the mechanisms (specs, the command line, the
    experiments, the shared test suites) reads this registry."""
    if not isinstance(short_name, str):
        raise TypeError("register takes the mechanism's short name: @register(\"hr\", \"HR\")")
    if not short_name or short_name != short_name.lower() or not short_name.isidentifier():
        raise ValueError(f"a short name is a lowercase identifier, got {short_name!r}")

    def decorate(cls: T) -> T:
        name = cls.__name__
        # the command line takes a short name or a class name, case-insensitive: all
        # distinct
        taken = ({short for short, other in _SHORT_NAMES.items() if other != name}
                 | {other.lower() for other in _REGISTRY if other != name})
        if short_name in taken or name.lower() in taken:
            raise ValueError(f"{name} ({short_name}): the name is already taken by another "
                             "mechanism")
        _REGISTRY[name] = cls
        _SHORT_NAMES[short_name] = name
        _LABELS[short_name] = label if label is not None else short_name.upper()
        return cls

    return decorate


def registered() -> Dict[str, type]:
    """Mechanism class name → class, for every registered mechanism (in registration
    order)."""
    return dict(_REGISTRY)


def registered_short_names() -> Dict[str, str]:
    """Short name → class name, for every registered mechanism (in registration order)."""
    return dict(_SHORT_NAMES)


def registered_labels() -> Dict[str, str]:
    """Short name → the label of the mechanism's curves in the experiments."""
    return dict(_LABELS)


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


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    """``object_pairs_hook`` of :func:`parse_json`: a dict, or :class:`_DuplicateKey`."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return result


def parse_json(text: str, what: str) -> Any:
    """``json.loads`` for untrusted text: every failure is a ``ValueError`` naming ``what``
    (nesting deeper than :data:`MAX_JSON_DEPTH` included, which Python's parser would turn
    into a ``RecursionError``). An object that names a key twice is refused (Python's
    parser would keep the last value, other parsers the first): the message names the
    key. Every JSON ldpdist reads goes through here (spec files, file headers, …)."""
    if _json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise ValueError(f"{what} nests JSON deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ValueError(f"{what} holds the duplicate key {exc.args[0]!r:.80} (an object "
                         "must name each key once: parsers disagree on which value counts)"
                         ) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{what} is not valid JSON: {' '.join(str(exc).split())}") from None
    except ValueError:  # int()'s limit on the digits of a number (Python ≥ 3.11, 3.10.7, …)
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise ValueError(f"{what} holds an integer of more than {limit} digits") from None


def from_dict(spec: Dict[str, Any]) -> Any:
    """Rebuild a mechanism (a :class:`ldpdist.Mechanism`) from :meth:`Mechanism.to_dict`
    output (e.g. parsed JSON).

    A spec may carry the field ``"fingerprint"`` (the spec files that
    :func:`~ldpdist.specs.to_json` and ``ldpdist spec`` write record it): it must then be
    the rebuilt mechanism's fingerprint, so that a generated spec edited afterwards (``1.0``
    turned into ``10``) is refused instead of used. A spec without it (written by hand) is
    taken as it is.

    Raises ``TypeError`` when ``spec`` is not a dict and ``ValueError`` for an unknown
    mechanism, an unsupported format, a missing, unknown or invalid field (naming it), or a
    recorded fingerprint that does not match.
    """
    if not isinstance(spec, dict):
        raise TypeError(f"a mechanism spec is a dict, got {type(spec).__name__}")
    spec = dict(spec)
    if "protocol" in spec and "mechanism" not in spec:
        return _heavy_hitter_protocol(spec)
    if "mechanism" not in spec:
        raise ValueError(f"the spec is missing the field 'mechanism' (one of "
                         f"{sorted(_REGISTRY)})")
    if isinstance(spec["mechanism"], str) and spec["mechanism"] not in _REGISTRY:
        built = _longitudinal_mechanism(spec)
        if built is not None:
            return built
    name = spec.pop("mechanism")
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown mechanism {shown(name)}; known: {sorted(_REGISTRY)}")
    fmt = spec.pop("format", SPEC_FORMAT)
    if type(fmt) is not int or fmt != SPEC_FORMAT:
        raise ValueError(f"unsupported spec format {shown(fmt)} (this version reads "
                         f"{SPEC_FORMAT})")
    recorded = _recorded_fingerprint(spec)
    if not all(isinstance(key, str) for key in spec):
        raise ValueError("spec keys must be strings")
    cls: Callable[..., Any] = _REGISTRY[name]
    _check_fields(name, cls, spec)
    try:
        mechanism = cls(**spec)
    except TypeError as exc:
        raise ValueError(f"invalid parameters for {name}: {exc}") from None
    except OverflowError as exc:  # a value too large for the core's integer types
        raise ValueError(f"invalid parameters for {name}: {exc}") from None
    _check_recorded(recorded, mechanism)
    return mechanism


_ABSENT = object()


def _recorded_fingerprint(spec: Dict[str, Any]) -> Any:
    recorded = spec.pop("fingerprint", _ABSENT)
    if recorded is not _ABSENT and (not isinstance(recorded, str) or len(recorded) != 64
                                    or any(c not in "0123456789abcdef" for c in recorded)):
        raise ValueError(f"the spec's field 'fingerprint' must be 64 lowercase hex digits, "
                         f"got {shown(recorded)}")
    return recorded


def _check_recorded(recorded: Any, built: Any) -> None:
    if recorded is not _ABSENT and recorded != built.fingerprint:
        raise ValueError(
            f"the spec's fields do not match its recorded fingerprint {recorded[:16]}…: the "
            f"spec was edited after it was written (it now describes {built!r}, "
            f"fingerprint {built.fingerprint[:16]}…); write it again (ldpdist spec, "
            "ldpdist.specs.to_json), or delete the 'fingerprint' field if the edit is meant")


def _heavy_hitter_protocol(spec: Dict[str, Any]) -> Any:
    """A heavy-hitter protocol's spec (``"protocol"`` instead of ``"mechanism"``), with the
    same recorded-fingerprint check."""
    from .heavy_hitters import protocol as heavy_hitters  # they import this module

    recorded = _recorded_fingerprint(spec)
    built = heavy_hitters.from_dict(spec)
    _check_recorded(recorded, built)
    return built


def _longitudinal_mechanism(spec: Dict[str, Any]) -> Any:
    """A memoized mechanism's spec (:mod:`ldpdist.longitudinal`, a registry of its own),
    with the same recorded-fingerprint check; ``None`` when the name is not one of them."""
    from .longitudinal import base as longitudinal  # it imports this module

    if spec["mechanism"] not in longitudinal._REGISTRY:
        return None
    return longitudinal.from_dict(spec)


def checked_fields(spec: Any, what: str, required: Iterable[str],
                   optional: Iterable[str] = ()) -> Dict[str, Any]:
    """``spec`` as a dict once it holds every ``required`` field and no field besides
    ``optional`` ones: ``TypeError`` when it is not a dict, ``ValueError`` naming the first
    missing or unknown field otherwise (the check of every ``from_dict``)."""
    if not isinstance(spec, Mapping):
        raise TypeError(f"{what} is a dict, got {type(spec).__name__}")
    required = list(required)
    optional = [field for field in optional if field not in required]
    shape = f"exactly the keys {sorted(required)}" + (
        f" and optionally {sorted(optional)}" if optional else "")
    missing = [field for field in required if field not in spec]
    if missing:
        raise ValueError(f"{what} is missing the field {missing[0]!r} (it must have {shape})")
    unknown = sorted((key for key in spec if key not in required and key not in optional),
                     key=str)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r:.80} in {what} (it must have {shape})")
    return dict(spec)


def _check_fields(name: str, cls: Any, spec: Dict[str, Any]) -> None:
    """``ValueError`` naming the first required parameter of ``cls`` that ``spec`` lacks,
    or the first field that is not a parameter."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - every mechanism has a signature
        return
    accepted = {p.name for p in parameters
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return
    required = [p.name for p in parameters if p.default is p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    missing = [field for field in required if field not in spec]
    if missing:
        raise ValueError(f"invalid parameters for {name}: the spec is missing the field "
                         f"{missing[0]!r} (its fields: {sorted(accepted)})")
    unknown = sorted(set(spec) - accepted)
    if unknown:
        raise ValueError(f"invalid parameters for {name}: unknown field {unknown[0]!r:.80} "
                         f"(its fields: {sorted(accepted)})")


def to_json(mechanism: Any) -> str:
    """The text of a spec file: the mechanism's spec (:meth:`Mechanism.to_dict
    <ldpdist.Mechanism.to_dict>`) as indented JSON, with the field ``"fingerprint"`` added,
    which :func:`~ldpdist.from_dict` and :func:`~ldpdist.from_json` check (an edited copy
    is refused). What ``ldpdist spec`` writes."""
    spec = mechanism.to_dict()
    return json.dumps({**spec, "fingerprint": fingerprint(spec)}, indent=2) + "\n"


def from_json(text: Any, what: str = "the spec") -> Any:
    """The mechanism of a spec's JSON text (:func:`~ldpdist.specs.to_json` or
    ``ldpdist spec`` output, or written by hand): :func:`~ldpdist.specs.parse_json`, which
    refuses a key given twice, then :func:`~ldpdist.from_dict`, which checks a recorded
    fingerprint. ``ValueError`` otherwise (a ``TypeError`` when ``text`` is not text)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} is not UTF-8 text: {exc.reason} at byte "
                             f"{exc.start}") from None
    if not isinstance(text, str):
        raise TypeError(f"from_json takes the JSON text of a spec, got {type(text).__name__}")
    return from_dict(_as_spec_dict(parse_json(text, what), what))


def _as_spec_dict(value: Any, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object (a spec is {{\"mechanism\": …}})")
    return value


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
