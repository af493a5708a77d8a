"""Shared strategies and the property of the fuzz suite (tests/fuzz/fuzz_*.py).

The property every fuzz module checks: a call on untrusted input either succeeds with a
well-formed result, or raises one of the documented exceptions (README, "Reliability":
``ValueError`` and its subclasses, ``TypeError``, ``MemoryError``) with a message, raised by
ldpdist itself. Anything else is a failure: another exception type (``KeyError``,
``IndexError``, ``OverflowError``, ``RecursionError``, ``struct.error``, ``AttributeError``,
``SystemError``, ``ldpdist.InternalError``, a Rust panic), a raw parser error that happens to
be a ``ValueError`` (``UnicodeDecodeError``, ``json.JSONDecodeError``), or a ``ValueError``
raised inside numpy or the standard library rather than by ldpdist (its message names
nothing the caller gave), or a message of numpy or the interpreter passed on as is
(``RAW_MESSAGES``: "Unable to allocate", int()'s digit limit, ...). A ``TypeError`` of the
interpreter refusing a call's arguments (an unexpected keyword) is a clear refusal.
Crashes, aborts and hangs are caught by the runner (tests/test_fuzz.py), which runs each
module in a child process under an address-space limit and a timeout; a module run by
hand sets the same limits on itself (below).

The modules are not collected by a plain ``pytest`` run (their names do not match
``test_*.py``); tests/test_fuzz.py runs them. To run one by hand, with more examples and a
random seed::

    LDPDIST_FUZZ_EXAMPLES=2000 LDPDIST_FUZZ_RANDOM=1 python -m pytest tests/fuzz/fuzz_states.py -q

``LDPDIST_FUZZ_SHRINK=1`` also shrinks a failing example (slow on these inputs);
``LDPDIST_FUZZ_MESSAGES=FILE`` appends every refusal's message to FILE.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import re
import resource
import struct
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

# The guards of tests/test_fuzz.py, also when a module is run by hand: a memory budget of
# 1 GiB for the library, and an address space of 4 GiB for the process, so that an
# allocation the library makes without asking its memory guard fails (as a MemoryError the
# property reports) instead of filling the machine.
os.environ.setdefault("LDPDIST_MAX_MEMORY", "1G")
ADDRESS_SPACE = 4 << 30
_soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
if _soft == resource.RLIM_INFINITY or _soft > ADDRESS_SPACE:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, _hard))

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, assume, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ldpdist  # noqa: E402
from ldpdist.decoders import DECODERS  # noqa: E402
from ldpdist.errors import CliError  # noqa: E402
from ldpdist.specs import canonical_json, fingerprint, registered  # noqa: E402

LIBRARY = pathlib.Path(ldpdist.__file__).resolve().parent
MECHANISMS = sorted(registered())

# -- settings -----------------------------------------------------------------------------------

EXAMPLES = int(os.environ.get("LDPDIST_FUZZ_EXAMPLES", "25"))

FUZZ = settings(
    phases=(list(Phase) if os.environ.get("LDPDIST_FUZZ_SHRINK")
            else [Phase.explicit, Phase.reuse, Phase.generate]),
    max_examples=EXAMPLES,
    derandomize=not os.environ.get("LDPDIST_FUZZ_RANDOM"),
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.large_base_example],
)


def examples(fraction: float) -> settings:
    """:data:`FUZZ` with a fraction of the example count (for expensive properties)."""
    return settings(FUZZ, max_examples=max(1, int(round(EXAMPLES * fraction))))


# -- the property -------------------------------------------------------------------------------

DOCUMENTED = (ValueError, TypeError, MemoryError)
# ValueErrors by inheritance, but the raw output of a parser: they name nothing the caller gave.
RAW_PARSER_ERRORS = (UnicodeError, json.JSONDecodeError)
# Messages of numpy and the interpreter that can be raised from a frame of ldpdist (a ufunc or
# int() called there) yet name nothing the caller gave: an allocation that bypassed the memory
# guard, int()'s limit on digits, a ragged sequence, an array used as a bool.
RAW_MESSAGES = re.compile(r"Unable to allocate|set_int_max_str_digits|truth value of an array"
                          r"|^setting an array element with a sequence")


def _raised_in(exc: BaseException) -> Tuple[str, int]:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?", 0
    return frames[-1].filename, frames[-1].lineno or 0


def unclear(exc: BaseException) -> Optional[str]:
    """Why ``exc`` is not a clear, documented refusal (``None`` when it is one)."""
    if not isinstance(exc, DOCUMENTED):
        return f"{type(exc).__module__}.{type(exc).__qualname__} is not a documented exception"
    if isinstance(exc, RAW_PARSER_ERRORS):
        return f"a raw parser error ({type(exc).__name__}) escaped"
    if not str(exc).strip():
        return "an exception without a message"
    if RAW_MESSAGES.search(str(exc)):
        return "a raw numpy or interpreter message"
    filename, _line = _raised_in(exc)
    if not pathlib.Path(filename).resolve().is_relative_to(LIBRARY):
        if isinstance(exc, TypeError) and _call_error(exc):
            return None  # Python's own refusal of the call: "f() got an unexpected keyword"
        return f"raised inside {filename}, not by ldpdist (the message names nothing given)"
    return None


def _call_error(exc: BaseException) -> bool:
    """A ``TypeError`` raised by the interpreter when calling a function with arguments its
    signature refuses (no frame of the library ran)."""
    inside = any(pathlib.Path(frame.filename).resolve().is_relative_to(LIBRARY)
                 for frame in traceback.extract_tb(exc.__traceback__))
    return not inside and "argument" in str(exc)


# With LDPDIST_FUZZ_MESSAGES=FILE, every refusal is appended to FILE (type, message, where),
# for reading the messages themselves: whether they are clear is for a human to judge.
MESSAGES = os.environ.get("LDPDIST_FUZZ_MESSAGES")


def _log_message(exc: BaseException) -> None:
    if MESSAGES:
        filename, line = _raised_in(exc)
        text = " ".join(str(exc).split())
        with open(MESSAGES, "a", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(f"{type(exc).__name__}\t{text[:400]}\t"
                         f"{pathlib.Path(filename).name}:{line}\n")


def refusal(exc: BaseException) -> BaseException:
    """``exc`` when it is a documented refusal; otherwise fail the example, chaining it."""
    reason = unclear(exc)
    if reason is not None:
        filename, line = _raised_in(exc)
        raise AssertionError(f"{reason}: {type(exc).__name__}: {exc} "
                             f"(raised at {filename}:{line})") from exc
    _log_message(exc)
    return exc


def attempt(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Tuple[bool, Any]:
    """``(True, result)`` or ``(False, exception)`` for a documented refusal; any other
    outcome fails the example."""
    try:
        return True, call(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException is a BaseException
        return False, refusal(exc)


def cli_attempt(argv: list) -> Tuple[bool, Any]:
    """Run an ``ldpdist`` command in this process (its handler, so that the exception it
    would turn into one stderr line is seen): ``CliError`` is a documented refusal unless it
    wraps an internal error."""
    from ldpdist import cli

    try:
        args = cli.build_parser().parse_args([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage error (one line on stderr, exit status 2)
        assert exc.code == 2, exc.code
        return False, exc
    try:
        return True, args.handler(args)
    except CliError as exc:
        text = str(exc)
        assert text.strip(), "a CliError without a message"
        assert not any(name in text for name in ("InternalError", "PanicException",
                                                 "RuntimeError")), text
        assert "\n" not in text.strip(), f"a multi-line error: {text!r}"
        assert not RAW_MESSAGES.search(text), f"a raw numpy or interpreter message: {text}"
        _log_message(exc)
        return False, exc
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001
        return False, refusal(exc)


# -- well-formed results ------------------------------------------------------------------------


def check_estimate(mech: Any, estimate: Any, decoder: str, sparsity: Any = None) -> None:
    assert isinstance(estimate, np.ndarray), type(estimate)
    assert estimate.shape == (mech.k,) and estimate.dtype == np.float64, (estimate.shape,
                                                                          estimate.dtype)
    assert np.isfinite(estimate).all(), f"non-finite estimate from {decoder}: {estimate}"
    from ldpdist.decoders import SIGNED_DECODERS, UNNORMALIZED_DECODERS

    if decoder not in SIGNED_DECODERS:
        assert (estimate >= 0).all(), f"negative probability from {decoder}: {estimate}"
    if decoder not in UNNORMALIZED_DECODERS:
        assert abs(float(estimate.sum()) - 1.0) < 1e-6, f"{decoder} sums to {estimate.sum()}"
    if decoder == "sparse_project" and sparsity is not None:  # None: CP or the rule chose s
        assert np.count_nonzero(estimate) <= sparsity


def check_aggregator(agg: Any, mech: Any) -> None:
    """The invariants of an aggregator that the library accepted."""
    counts = agg.counts
    assert counts.dtype == np.uint64 and counts.ndim == 1, (counts.dtype, counts.shape)
    assert 0 <= agg.n < 2**64 and 0 <= agg.dropped < 2**64
    total = sum(int(c) for c in counts)
    # the statistic: a histogram of the outputs (index reports), or per-bit / per-stage
    # counts (bit vectors, the two-stage mechanisms, hashed reports), each at most n
    assert counts.size == mech._statistic_size, (counts.size, mech._statistic_size)
    if mech.report_kind == "index":
        assert total == agg.n, f"counts sum to {total}, n = {agg.n}"
    else:
        assert all(int(c) <= agg.n for c in counts), "a count above n"


def decoder_arguments() -> st.SearchStrategy:
    """``(decoder, options)`` pairs, mostly valid, sometimes not."""
    valid = st.sampled_from(DECODERS).flatmap(lambda d: st.tuples(
        st.just(d),
        st.fixed_dictionaries({"sparsity": st.integers(1, 6)}) if d == "sparse_project"
        else st.fixed_dictionaries({"max_iter": st.sampled_from([20, 200])}) if d == "ibu"
        else st.just({})))
    invalid = st.tuples(
        st.one_of(st.sampled_from(DECODERS), st.sampled_from(["", "RAW", "Project", "ibu "]),
                  st.none(), st.integers(-1, 3)),
        st.fixed_dictionaries({}, optional={
            "sparsity": st.one_of(st.none(), st.integers(-2, 10), st.just(2**64),
                                  st.booleans(), st.floats(allow_nan=True)),
            "max_iter": st.one_of(st.integers(-2, 30), st.just(True), st.floats(0, 30)),
            "tol": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none()),
            "bogus": st.integers(),
        }))
    return st.one_of(valid, valid, invalid)


def try_estimate(agg_or_mech: Any, mech: Any, decoder_and_options: Tuple[str, Dict[str, Any]],
                 reports: Any = None) -> None:
    """Estimate (from an aggregator, or from ``reports`` with a mechanism) and check the
    result when it succeeds."""
    decoder, options = decoder_and_options
    if reports is None:
        ok, estimate = attempt(agg_or_mech.estimate, decoder, **options)
    else:
        ok, estimate = attempt(agg_or_mech.estimate, reports, decoder, **options)
    if ok:
        check_estimate(mech, estimate, decoder, options.get("sparsity"))


# -- mechanisms ---------------------------------------------------------------------------------

EPSILON = st.floats(0.05, 8.0)
# A budget of a context-aware mechanism in a (JSON-safe) spec: ε, or the exact ends 0 (a
# constant report: a degenerate mechanism that refuses to estimate) and +inf (no constraint,
# the string "inf" in a spec; the float comes from the value edits, EDGE_FLOATS).
BUDGET = st.one_of(EPSILON, EPSILON, st.sampled_from([0.0, "inf", 700.0, 1e-9]))


@st.composite
def _small_params(draw: Any, name: str) -> Dict[str, Any]:
    if name == "CompressivePrivatization":
        k = draw(st.integers(16, 96))
        return {"k": k, "epsilon": draw(st.floats(0.05, 1.0)),
                "m": 2 * draw(st.integers(2, 8)), "seed": draw(st.integers(0, 2**64)),
                "matrix": draw(st.sampled_from(["balanced", "rademacher"])),
                "regime": draw(st.sampled_from(["auto", "high"]))}
    if name == "AsymmetricBinaryResponse":  # k = 2, not a parameter; two budgets
        return {"epsilon_01": draw(BUDGET), "epsilon_10": draw(BUDGET)}
    k = draw(st.integers(2, 48))
    if name == "BlockHadamardResponse":  # a partition of k values (not all singletons)
        return {"blocks": draw(partition(k)), "epsilon": draw(EPSILON),
                **({"k": k} if draw(st.booleans()) else {})}
    if name == "PublicCoinHashing":  # not private: no ε, a message length and a public seed
        return {"k": k, "bits": draw(st.integers(1, 31)), "seed": draw(st.integers(0, 2**63))}
    params: Dict[str, Any] = {"k": k, "epsilon": draw(EPSILON)}
    if name == "HadamardResponse":
        blocks = draw(st.one_of(st.none(), st.integers(0, 7).map(lambda j: 2**j)))
        if blocks is not None and blocks <= 2 * k:
            params["blocks"] = blocks
    elif name == "SubsetSelection":
        d = draw(st.one_of(st.none(), st.integers(1, k - 1)))
        if d is not None:
            params["d"] = d
    elif name == "OptimizedLocalHashing":
        params["seed"] = draw(st.integers(0, 2**256 - 1))
    elif name == "HighLowHadamardResponse":  # any subset, in any order (the spec sorts it)
        params["sensitive"] = draw(st.lists(st.integers(0, k - 1), unique=True, max_size=k))
    return params


@st.composite
def partition(draw: Any, k: int) -> List[int]:
    """A partition of k ≥ 2 values with a block of two values or more, as block sizes or as
    one label per value (labels 0..m−1 each used, in a random order)."""
    m = draw(st.integers(1, k - 1), label="blocks")
    labels = list(range(m)) + [draw(st.integers(0, m - 1)) for _ in range(k - m)]
    if draw(st.booleans(), label="as sizes"):
        return [labels.count(j) for j in range(m)]
    return draw(st.permutations(labels), label="labels")


def small_spec(name: str) -> st.SearchStrategy:
    """Valid spec dicts of a small ``name`` mechanism (a new mechanism gets k and ε only:
    give it a case in ``_small_params`` when it takes more)."""
    return _small_params(name).map(lambda p: {"mechanism": name, "format": 1, **p})


@st.composite
def small_mechanism(draw: Any, name: str) -> Any:
    spec = draw(small_spec(name))
    try:
        return ldpdist.from_dict(spec)
    except ValueError:
        assume(False)  # e.g. an ε the shared rule refuses for this k


# -- untrusted values ---------------------------------------------------------------------------

HUGE_INTS = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**33, 2**40, 2**53 + 1, 2**63 - 1,
             2**63, 2**64 - 1, 2**64, 2**128, 2**256 - 1, 2**256, 10**30, -1, -2**63, -2**64,
             -10**30]
EDGE_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 1e-300, 1e-15, 1e-14, 700.0,
               700.0000000001, 709.8, 743.0, 1e308, -1.0]


def nasty_scalar(numpy: bool = True) -> st.SearchStrategy:
    """Values a spec field, a size or a seed should refuse clearly (or accept)."""
    options = [
        st.none(), st.booleans(), st.integers(-3, 70), st.sampled_from(HUGE_INTS),
        st.integers(), st.floats(), st.sampled_from(EDGE_FLOATS),
        st.text(max_size=6),
        st.sampled_from(["1", "1.0", "nan", "inf", "balanced", "rademacher", "high", "medium",
                         "auto", "RandomizedResponse", ""]),
        st.lists(st.integers(0, 5), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.integers(1, 20_000).map(nested_list),
    ]
    if numpy:
        options.append(st.sampled_from([np.int64(5), np.uint64(2**64 - 1), np.int8(-1),
                                        np.float32(1.5), np.float64(np.nan), np.bool_(True),
                                        np.array(3), np.array([2, 3])]))
    return st.one_of(*options)


U64_SPECIALS = [0, 1, 2, 2**32, 2**63, 2**64 - 1]


@st.composite
def u64_list(draw: Any, size: int, specials: Any = U64_SPECIALS,
             elements: Optional[st.SearchStrategy] = None) -> list:
    """A list of exactly ``size`` integers (counts), element by element when short; when
    longer than Hypothesis draws lists, one fill value with up to 32 entries overwritten."""
    element = st.one_of(st.sampled_from(specials), elements if elements is not None
                        else st.integers(0, 2**64 - 1))
    if size <= 256:
        return draw(st.lists(element, min_size=size, max_size=size))
    values = [draw(element)] * size
    for position, value in draw(st.lists(st.tuples(st.integers(0, size - 1), element),
                                         max_size=32)):
        values[position] = value
    return values


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


# -- byte-level mutations -----------------------------------------------------------------------

_WORDS = [0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


@st.composite
def mutated_bytes(draw: Any, blob: bytes, *, keep_tail: int = 0) -> bytes:
    """``blob`` after one to four edits: bit flips, truncations, extensions, overwrites,
    insertions, deletions, and huge little-endian integers written over a field. With
    ``keep_tail``, edits avoid the last ``keep_tail`` bytes (a checksum resealed later)."""
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 4))):
        end = max(len(data) - keep_tail, 0)
        kind = draw(st.sampled_from(["flip", "flip", "truncate", "extend", "overwrite",
                                     "insert", "delete", "word"]))
        if kind in ("flip", "overwrite", "delete", "word") and end == 0:
            kind = "extend"
        if kind == "flip":
            position = draw(st.integers(0, end - 1))
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            data = data[:draw(st.integers(0, len(data)))]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=80))
        elif kind == "overwrite":
            position = draw(st.integers(0, end - 1))
            patch = draw(st.binary(min_size=1, max_size=8))
            data[position:position + len(patch)] = patch
        elif kind == "insert":
            position = draw(st.integers(0, end))
            data[position:position] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            position = draw(st.integers(0, end - 1))
            data[position:position + draw(st.integers(1, 16))] = b""
        else:
            position = draw(st.integers(0, end - 1))
            width = draw(st.sampled_from([4, 8]))
            value = draw(st.sampled_from(_WORDS + [2**63, 2**64 - 1] if width == 8 else _WORDS))
            data[position:position + width] = value.to_bytes(width, "little")
    return bytes(data)


def json_text(value: Any) -> str:
    """JSON text of ``value``: canonical when possible, else Python's (NaN, Infinity)."""
    try:
        return canonical_json(value)
    except (ValueError, RecursionError):
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        except (ValueError, RecursionError):
            return "[]"


@st.composite
def mutated_json_text(draw: Any, text: str) -> str:
    """Text-level edits of a JSON document: tokens that Python's parser treats specially
    (NaN, Infinity, huge integers, deep nesting), deleted or duplicated characters."""
    tokens = ["NaN", "Infinity", "-Infinity", "1e400", "-0", "0.0", "true", "null", "\"\"",
              "1" * 5000, "9" * 25, "[" * 100_000, "{" * 5000, "\"\\ud800\"", "\"\\u0000\"",
              "{\"a\":1,\"a\":2}"]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["token", "token", "delete", "duplicate", "char"]))
        position = draw(st.integers(0, len(text)))
        if kind == "token":
            text = text[:position] + draw(st.sampled_from(tokens)) + text[position:]
        elif kind == "delete":
            text = text[:position] + text[position + draw(st.integers(1, 8)):]
        elif kind == "duplicate":
            text = text[:position] + text[position:position + 20] * 2 + text[position + 20:]
        else:
            text = text[:position] + draw(st.characters()) + text[position:]
    return text


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def u32(value: int) -> bytes:
    return struct.pack("<I", value & 0xFFFFFFFF)


# -- untrusted arrays ---------------------------------------------------------------------------

# Every kind of numpy dtype, both byte orders where it has one.
DTYPES = ["?", "i1", "u1", "<i2", ">i2", "<u2", ">u2", "<i4", ">i4", "<u4", ">u4", "<i8", ">i8",
          "<u8", ">u8", "<f2", "<f4", ">f4", "<f8", ">f8", "<c16", "O", "<U3", "S3", "<M8[s]",
          "<m8[ns]", "V4", [("a", "<u4")], [("a", "u1"), ("b", "<i4")]]
INTEGER_DTYPES = ["i1", "u1", "<i2", ">i2", "<u2", ">u2", "<i4", ">i4", "<u4", ">u4", "<i8",
                  ">i8", "<u8", ">u8"]


def cast(values: Any, dtype: Any) -> np.ndarray:
    """``values`` (Python ints) as an array of ``dtype``, wrapping and truncating like C
    (what a foreign writer does); any value numpy will not convert becomes 0."""
    dtype = np.dtype(dtype)
    flat = np.asarray(values, dtype=object).reshape(-1)
    out = np.zeros(flat.shape, dtype=dtype)
    for i, value in enumerate(flat):
        try:
            if dtype.kind in "iu":
                bits = 8 * dtype.itemsize
                value = int(value) % (1 << bits)
                if dtype.kind == "i" and value >= 1 << (bits - 1):
                    value -= 1 << bits
            elif dtype.kind == "b":
                value = bool(value)
            elif dtype.kind == "f":
                value = float(value)
            out[i] = value
        except (TypeError, ValueError, OverflowError):
            pass
    return out.reshape(np.shape(values))


@st.composite
def lazy_huge_array(draw: Any, width: Optional[int] = None) -> np.ndarray:
    """A read-only broadcast view of more than 2^28 rows that costs no memory: any copy or
    cast of it to 4 or 8 bytes per entry exceeds a 1 GiB budget, and when the library makes
    it without asking its memory guard, the address-space limit turns it into a MemoryError
    raised inside numpy (which the property reports). Not more than 2^30 rows: checking
    every entry is legitimate work and must stay quick."""
    rows = draw(st.sampled_from([2**28 + 1, 2**29, 2**30]))
    dtype = np.dtype(draw(st.sampled_from(INTEGER_DTYPES + ["?", "<f8"])))
    value = draw(st.sampled_from([0, 1, 2, 255, -1]))
    scalar = cast([value], dtype)[0]
    shape = (rows,) if width is None else (rows, width)
    return np.broadcast_to(scalar, shape)


@st.composite
def edited_array(draw: Any, base: np.ndarray, high: int) -> Any:
    """``base`` (valid integers) after edits of dtype, shape, layout and values: any dtype,
    0-D to 3-D, reversed or strided views, big-endian, lists and nested lists; values
    around 0 and ``high`` (the exclusive bound), and huge."""
    array = np.array(base, dtype=object)
    specials = [0, 1, high - 1, high, high + 1, -1, 2**8, 2**16, 2**31, 2**32, 2**63, 2**64 - 1,
                2**64, -2**63]
    if array.size and draw(st.booleans()):
        flat = array.reshape(-1)
        for position, value in draw(st.lists(st.tuples(st.integers(0, flat.size - 1),
                                                       st.sampled_from(specials)), max_size=4)):
            flat[position] = value
    container = draw(st.sampled_from(["array", "array", "array", "list", "tuple", "scalar",
                                      "nested"]))
    if container == "scalar":
        return draw(st.one_of(st.sampled_from(specials), nasty_scalar()))
    if container in ("list", "tuple"):
        items = array.tolist()
        if items and not isinstance(items, list):
            items = [items]
        if draw(st.booleans()) and isinstance(items, list) and items:
            position = draw(st.integers(0, len(items) - 1))
            items[position] = draw(st.one_of(nasty_scalar(), st.sampled_from(specials)))
        return items if container == "list" else tuple(items)
    if container == "nested":
        return [array.tolist()] * draw(st.integers(0, 3))
    dtype = draw(st.one_of(st.just(None), st.sampled_from(DTYPES)), label="dtype")
    if dtype is None:
        dtype = base.dtype
    result = cast(array, dtype) if np.dtype(dtype).fields is None else np.zeros(array.shape, dtype)
    layout = draw(st.sampled_from(["keep", "keep", "reshape", "reverse", "stride", "transpose",
                                   "expand", "empty", "fortran", "readonly"]))
    if layout == "reshape" and result.size:
        result = result.reshape((-1, 1) if result.ndim == 1 else (-1,))
    elif layout == "reverse":
        result = result[::-1]
    elif layout == "stride":
        result = np.repeat(result, 2, axis=0)[::2]
    elif layout == "transpose":
        result = result.T
    elif layout == "expand":
        result = result[np.newaxis]
    elif layout == "empty":
        result = result[:0]
    elif layout == "fortran":
        result = np.asfortranarray(result)
    elif layout == "readonly":
        result = result.copy()
        result.flags.writeable = False
    return result


def check_reports(mech: Any, reports: Any, n: int) -> None:
    """The invariants of privatize output for ``n`` users."""
    assert isinstance(reports, np.ndarray), type(reports)
    if mech.report_kind == "bits":
        width = -(-mech.output_size // 8)
        assert reports.dtype == np.uint8 and reports.shape == (n, width), (reports.dtype,
                                                                           reports.shape)
        bits = np.unpackbits(reports, axis=1)
        assert not bits[:, mech.output_size:].any(), "a padding bit is set"
        if hasattr(mech, "d"):
            assert (bits.sum(axis=1) == mech.d).all(), "a subset of the wrong size"
    else:
        assert reports.dtype.kind == "u" and reports.shape == (n,), (reports.dtype,
                                                                     reports.shape)
        if mech.report_kind == "hashed":  # (user index << ℓ) | message, in uint64
            assert reports.dtype == np.uint64
        else:
            assert reports.size == 0 or int(reports.max()) < mech.output_size


# -- sizes for the memory guard -----------------------------------------------------------------

# k from which every mechanism's aggregate (8 bytes per count) exceeds a 1 GiB budget, so
# that an operation on a large mechanism is refused within milliseconds; below it (a medium
# k) operations are allowed and take at most about a second.
LARGE_K = [2**28, 2**30, 2**32 - 1, 2**32]
MEDIUM_K = [1000, 2**16 + 1, 2**20]


@st.composite
def large_spec(draw: Any, name: str) -> Dict[str, Any]:
    """Spec dicts of ``name`` with a large or medium k (and m, blocks, d), valid or not."""
    if name == "AsymmetricBinaryResponse":  # no size to make large: its budgets at the ends
        return {"mechanism": name, "format": 1,
                "epsilon_01": draw(st.sampled_from([0.0, 1e-9, 700.0, "inf"])),
                "epsilon_10": draw(st.sampled_from([0.0, 0.5, 700.0, "inf", 1e300]))}
    large = draw(st.booleans(), label="large")
    k = draw(st.sampled_from(LARGE_K if large else MEDIUM_K), label="k")
    spec: Dict[str, Any] = {"mechanism": name, "format": 1, "k": k,
                            "epsilon": draw(st.sampled_from([0.5, 1.0, 4.0, 8.0]))}
    if name == "CompressivePrivatization":
        # the packed matrix costs k·⌈m/64⌉·8 bytes and its construction k·m work: a medium k
        # takes a small m (a large one is refused by the guard before any work).
        m_choices = [2, 16, 2**10, 2**20, 2**31 - 1] if large else [2, 4, 16]
        spec.update(m=draw(st.sampled_from(m_choices)), seed=draw(st.integers(0, 2**64)),
                    matrix=draw(st.sampled_from(["balanced", "rademacher"])))
    elif name == "HadamardResponse":
        spec["blocks"] = draw(st.sampled_from([None, 1, 2, 64, 2 * k, 2**33]))
        if spec["blocks"] is None:
            del spec["blocks"]
    elif name == "SubsetSelection":
        d = draw(st.sampled_from([None, 1, 2, k // 2, k - 1]))
        if d is not None:
            spec["d"] = d
    elif name == "OptimizedLocalHashing":
        spec["seed"] = draw(st.integers(0, 2**256 - 1))
    elif name == "BlockHadamardResponse":
        # k follows from the partition: a few sizes adding up to k (a list of k labels
        # would be the large object itself), and sometimes a k that disagrees
        m = draw(st.sampled_from([1, 2, 7]), label="blocks")
        sizes = [k // m] * (m - 1) + [k - (k // m) * (m - 1)]
        spec["blocks"] = sizes
        if draw(st.booleans(), label="claimed k"):
            spec["k"] = draw(st.sampled_from([k, k + 1]))
        else:
            del spec["k"]
    elif name == "HighLowHadamardResponse":
        spec["sensitive"] = draw(st.sampled_from([[], [0], [0, k - 1], [k - 1, 2, 1]]))
    return spec


def slow_bit_rows(mech: Any, rows: int) -> bool:
    """Whether privatizing ``rows`` users of a bit-vector mechanism is allowed by a 1 GiB
    budget yet slow (one random bit or one subset draw per bit: legitimate work, too slow
    for a fuzz example)."""
    if mech.report_kind != "bits":
        return False
    size = rows * mech.output_size
    return 2**26 < size <= 2**33 + 2**30


def write_spec(folder: str, mech: Any) -> str:
    path = os.path.join(folder, "spec.json")
    with open(path, "w") as handle:
        json.dump(mech.to_dict(), handle)
    return path


def privatize(mech: Any, values: Any, seed: Any = None) -> Any:
    """``mech.privatize(values, seed=seed)``, without the seed for a mechanism whose reports
    are deterministic (public-coin hashing takes none)."""
    if getattr(mech, "randomized", True):
        return mech.privatize(values, seed=seed)
    return mech.privatize(values)


def mutate_header_spec(data: Any, header: Dict[str, Any]) -> None:
    """Edit one field of the spec embedded in a file header (states and reports files share
    it): delete it, or set it to a nasty scalar or a huge integer; sometimes recompute the
    fingerprint and mechanism so that only the deeper checks can catch the edit."""
    spec = header["spec"] = dict(header["spec"])
    key = data.draw(st.sampled_from(sorted(spec) + ["bogus"]), label="spec field")
    if data.draw(st.booleans(), label="delete spec field") and key in spec:
        del spec[key]
    else:
        spec[key] = data.draw(st.one_of(nasty_scalar(numpy=False),
                                        st.sampled_from(HUGE_INTS)), label="spec value")
    if data.draw(st.booleans(), label="recompute fingerprint"):
        try:
            header["fingerprint"] = fingerprint(spec)
        except ValueError:
            pass
        header["mechanism"] = spec.get("mechanism")
