"""File-based deployment commands: ``spec``, ``privatize``, ``aggregate``, ``estimate``.

A deployment shares one JSON spec (``ldpdist spec``) between clients and server::

    ldpdist spec hr --k 1000 --epsilon 1 -o spec.json
    ldpdist privatize --spec spec.json values.csv -o reports.npy          # each client / batch
    ldpdist aggregate --spec spec.json shard1.npy shard2.npy -o a.bin    # per shard
    ldpdist aggregate --spec spec.json a.bin b.bin -o all.bin            # merge shard states
    ldpdist estimate --spec spec.json all.bin --decoder project -o estimate.csv

Files: values are ``.npy`` integer arrays or text (``.csv``/``.txt``: integers separated by
commas, whitespace or newlines); reports are ``.npy`` (``np.save`` of
:meth:`Mechanism.privatize` output: 1-D unsigned integers for index mechanisms, 2-D uint8
``np.packbits`` rows for bit-vector mechanisms); aggregator states are
:meth:`Aggregator.to_bytes`. Every user error is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import re
import sys
import tempfile
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .cli import CliError
from .decoders import DECODERS
from .mechanisms import SHORT_NAMES, Aggregator, CompressivePrivatization, from_dict
from .mechanisms.aggregator import _MAGIC as STATE_MAGIC
from .mechanisms.base import Mechanism
from .mechanisms.compressive import MATRIX_KINDS, MODELS, REGIMES

NPY_MAGIC = b"\x93NUMPY"

# Optional parameters of `ldpdist spec` -> mechanisms that take them.
_SPEC_OPTIONS = {
    "m": ("CompressivePrivatization",),
    "seed": ("CompressivePrivatization", "OptimizedLocalHashing"),
    "matrix": ("CompressivePrivatization",),
    "regime": ("CompressivePrivatization",),
    "blocks": ("HadamardResponse",),
    "d": ("SubsetSelection",),
}
_REQUIRED_OPTIONS = {"CompressivePrivatization": ("m", "seed")}


# -- helpers ---------------------------------------------------------------------------------


def _command(func: Callable[[argparse.Namespace], Optional[int]]) -> Callable[[argparse.Namespace], Optional[int]]:
    """Handler wrapper: warnings become one ``warning:`` line, core internal errors and
    unexpected low-level errors become :class:`CliError` (one line, never a traceback)."""

    @functools.wraps(func)
    def handler(args: argparse.Namespace) -> Optional[int]:
        def show(message, category, filename, lineno, file=None, line=None):
            text = " ".join(str(message).split())
            print(f"ldpdist {args.command}: warning: {text}", file=sys.stderr)

        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            try:
                return func(args)
            except (CliError, ValueError, TypeError, OSError, MemoryError, KeyError):
                raise
            except RuntimeError as exc:  # ldpdist.InternalError and friends
                raise CliError(f"{type(exc).__name__}: {exc}") from None

    return handler


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _read_bytes(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise CliError(f"{what} {path!r} does not exist") from None
    except IsADirectoryError:
        raise CliError(f"{what} {path!r} is a directory") from None
    except OSError as exc:
        raise CliError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None


def _write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file in the same folder, renamed)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(f"cannot write {path!r}: folder {folder!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ldpdist-", dir=folder)
    except OSError as exc:
        raise CliError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CliError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def _write_text(path: Optional[str], text: str) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _write_bytes(path, text.encode())


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _load_npy(data: bytes, path: str, what: str) -> np.ndarray:
    import io

    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError, pickle.UnpicklingError, TypeError, MemoryError) as exc:
        raise CliError(f"{what} {path!r} is not a readable .npy file: {_one_line(exc)}") from None
    if not isinstance(array, np.ndarray):  # pragma: no cover - np.load of a .npy is an array
        raise CliError(f"{what} {path!r} is not a .npy array")
    return array


def load_spec(path: str) -> Mechanism:
    """The mechanism of a JSON spec file (``ldpdist spec`` output)."""
    data = _read_bytes(path, "spec file")
    try:
        spec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CliError(f"spec file {path!r} is not valid JSON: {_one_line(exc)}") from None
    try:
        return from_dict(spec)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(f"invalid spec in {path!r}: {_one_line(exc)}") from None


def mechanism_class(name: str) -> str:
    """Class name of a mechanism given by short name or class name (case-insensitive)."""
    from .mechanisms.base import _REGISTRY

    lowered = name.lower()
    if lowered in SHORT_NAMES:
        return SHORT_NAMES[lowered]
    for cls_name in _REGISTRY:
        if cls_name.lower() == lowered:
            return cls_name
    known = ", ".join(f"{short} ({full})" for short, full in SHORT_NAMES.items())
    raise CliError(f"unknown mechanism {name!r}; known: {known}")


_TOKEN = re.compile(r"[+-]?[0-9]+\Z")
_SEPARATORS = re.compile(r"[,;\s]+")


def _parse_text_values(data: bytes, path: str) -> Tuple[np.ndarray, List[Tuple[int, int]]]:
    """Integers from text; returns the values and (line, position-in-line) of each."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CliError(f"values file {path!r} is not UTF-8 text: {_one_line(exc)}") from None
    values: List[int] = []
    where: List[Tuple[int, int]] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        tokens = [token for token in _SEPARATORS.split(stripped) if token]
        for position, token in enumerate(tokens, start=1):
            if not _TOKEN.match(token):
                shown = token if len(token) <= 40 else token[:37] + "..."
                raise CliError(
                    f"values file {path!r}, line {line_number}, item {position}: "
                    f"{shown!r} is not an integer")
            values.append(int(token))
            where.append((line_number, position))
    try:
        array = np.array(values, dtype=np.int64)
    except OverflowError:
        i = next(i for i, v in enumerate(values) if not -2**63 <= v < 2**63)
        line_number, position = where[i]
        raise CliError(f"values file {path!r}, line {line_number}, item {position}: "
                       f"{values[i]} is out of range") from None
    return array, where


def load_values(path: str, k: int) -> np.ndarray:
    """User values from a .npy, .csv or .txt file, checked to be integers in [0, k)."""
    data = _read_bytes(path, "values file")
    where: Optional[List[Tuple[int, int]]] = None
    if data.startswith(NPY_MAGIC):
        array = _load_npy(data, path, "values file")
        if array.dtype.kind not in "iu":
            raise CliError(f"values in {path!r} must be integers, got dtype {array.dtype}"
                           + (" (convert explicitly, e.g. values.astype(int))"
                              if array.dtype.kind == "f" else ""))
        if array.ndim != 1:
            raise CliError(f"values in {path!r} must be a 1-D array, got shape {array.shape}")
    elif path.lower().endswith(".npy"):
        raise CliError(f"values file {path!r} is not a readable .npy file (bad magic bytes)")
    else:
        array, where = _parse_text_values(data, path)
    if array.size:
        bad = (array < 0) | (array >= k) if array.dtype.kind == "i" else array >= k
        if bad.any():
            i = int(np.argmax(bad))
            count = int(bad.sum())
            location = (f"line {where[i][0]}, item {where[i][1]}" if where is not None
                        else f"values[{i}]")
            raise CliError(f"values must lie in [0, {k}): {count} in {path!r} do not; the first "
                           f"is {array[i]} at {location}")
    return array


def _report_format(mech: Mechanism) -> str:
    if mech.report_kind == "bits":
        width = -(-mech.output_size // 8)
        return f"2-D uint8 arrays of shape (n, {width}) (np.packbits rows)"
    return "1-D unsigned integer arrays"


def check_reports(array: np.ndarray, mech: Mechanism, path: str) -> None:
    """Shape and dtype of a reports array against the spec's mechanism."""
    expected = _report_format(mech)
    if mech.report_kind == "bits":
        width = -(-mech.output_size // 8)
        ok = array.dtype == np.uint8 and array.ndim == 2 and array.shape[1] == width
    else:
        ok = array.dtype.kind in "iu" and array.ndim == 1
    if not ok:
        raise CliError(f"reports in {path!r} (dtype {array.dtype}, shape {array.shape}) do not "
                       f"fit {mech!r}, whose reports are {expected}; were they produced under "
                       "another spec?")


def _cli_message(exc: Exception) -> str:
    return _one_line(exc).replace("pass on_invalid='drop'", "pass --on-invalid drop")


def load_input(path: str, mech: Mechanism, on_invalid: str = "raise") -> Tuple[Aggregator, str, int]:
    """An aggregator from a state file or a reports .npy; also its kind ("state" or
    "reports") and how many reports were dropped while adding."""
    data = _read_bytes(path, "input file")
    if data.startswith(STATE_MAGIC):
        try:
            state = Aggregator.from_bytes(data)
        except (ValueError, TypeError, OverflowError) as exc:
            raise CliError(f"state file {path!r} is corrupt: {_one_line(exc)}") from None
        if state.mechanism != mech:
            raise CliError(f"state file {path!r} was aggregated for {state.mechanism!r}, "
                           f"not {mech!r}")
        return state, "state", 0
    if data.startswith(NPY_MAGIC):
        reports = _load_npy(data, path, "reports file")
        check_reports(reports, mech, path)
        aggregator = mech.aggregator()
        try:
            aggregator.add(reports, on_invalid=on_invalid)
        except (ValueError, TypeError) as exc:
            raise CliError(f"reports in {path!r} do not fit {mech!r}: {_cli_message(exc)}") from None
        return aggregator, "reports", aggregator.dropped
    raise CliError(f"{path!r} is neither a reports .npy file nor an ldpdist state file "
                   "(bad magic bytes)")


def _check_distinct(paths: List[str]) -> None:
    seen: Dict[str, str] = {}
    for path in paths:
        key = os.path.realpath(path)
        if key in seen:
            raise CliError(f"{path!r} is given twice (as {seen[key]!r}); it would be counted twice")
        seen[key] = path


# -- commands --------------------------------------------------------------------------------


@_command
def cmd_spec(args: argparse.Namespace) -> int:
    name = mechanism_class(args.mechanism)
    kwargs: Dict[str, Any] = {"k": args.k, "epsilon": args.epsilon}
    for option, takers in _SPEC_OPTIONS.items():
        value = getattr(args, option)
        if value is None:
            continue
        if name not in takers:
            raise CliError(f"--{option} does not apply to {name} (it applies to "
                           f"{', '.join(takers)})")
        kwargs[option] = value
    missing = [f"--{option}" for option in _REQUIRED_OPTIONS.get(name, ()) if option not in kwargs]
    if missing:
        raise CliError(f"{name} needs {' and '.join(missing)}")
    try:
        mech = from_dict({"mechanism": name, **kwargs})
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(_one_line(exc)) from None
    _write_text(args.output, json.dumps(mech.to_dict(), indent=2) + "\n")
    return 0


@_command
def cmd_privatize(args: argparse.Namespace) -> int:
    mech = load_spec(args.spec)
    values = load_values(args.values, mech.k)
    try:
        reports = mech.privatize(values, seed=args.seed)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(_one_line(exc)) from None
    _write_bytes(args.output, _npy_bytes(reports))
    return 0


@_command
def cmd_aggregate(args: argparse.Namespace) -> int:
    mech = load_spec(args.spec)
    _check_distinct(args.inputs)
    total = mech.aggregator()
    dropped = 0
    for path in args.inputs:
        part, _kind, part_dropped = load_input(path, mech, args.on_invalid)
        total.merge(part)
        dropped += part_dropped
    _write_bytes(args.output, total.to_bytes())
    if args.on_invalid == "drop":
        print(f"ldpdist aggregate: dropped {dropped} invalid report(s); "
              f"{total.n} report(s) aggregated", file=sys.stderr)
    return 0


@_command
def cmd_estimate(args: argparse.Namespace) -> int:
    mech = load_spec(args.spec)
    options: Dict[str, Any] = {}
    if args.model is not None:
        if not isinstance(mech, CompressivePrivatization):
            raise CliError(f"--model applies only to CompressivePrivatization, not {mech!r}")
        options["model"] = args.model
    aggregator, _kind, dropped = load_input(args.input, mech, args.on_invalid)
    if args.on_invalid == "drop" and _kind == "reports":
        print(f"ldpdist estimate: dropped {dropped} invalid report(s)", file=sys.stderr)
    try:
        estimate = aggregator.estimate(args.decoder, sparsity=args.sparsity, **options)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(_one_line(exc)) from None
    lines = ["value,probability"]
    lines.extend(f"{value},{float(p)!r}" for value, p in enumerate(estimate))
    _write_text(args.output, "\n".join(lines) + "\n")
    return 0


# -- registration ----------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``spec``, ``privatize``, ``aggregate`` and ``estimate`` to the ``ldpdist`` parser."""
    names = ", ".join(f"{short}={full}" for short, full in SHORT_NAMES.items())

    p = subparsers.add_parser(
        "spec", help="write a mechanism spec (JSON) shared by clients and server",
        description="Write the JSON spec of a mechanism (Mechanism.to_dict()).")
    p.add_argument("mechanism", metavar="MECHANISM",
                   help=f"short name or class name, case-insensitive ({names})")
    p.add_argument("--k", type=int, required=True, help="number of possible values (>= 2)")
    p.add_argument("--epsilon", type=float, required=True, help="privacy parameter (> 0)")
    p.add_argument("--m", type=int, help="cp: number of possible reports (required)")
    p.add_argument("--seed", type=int, help="cp (required) / olh: public seed of the mechanism")
    p.add_argument("--matrix", choices=MATRIX_KINDS, help="cp: sign matrix kind")
    p.add_argument("--regime", choices=REGIMES, help="cp: privacy regime")
    p.add_argument("--blocks", type=int, help="hr: number of blocks B")
    p.add_argument("--d", type=int, help="ss: subset size")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.set_defaults(handler=cmd_spec)

    p = subparsers.add_parser(
        "privatize", help="privatize values into reports (.npy)",
        description="Privatize one value per user. VALUES: .npy integer array, or .csv/.txt "
                    "with integers separated by commas, whitespace or newlines.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist spec)")
    p.add_argument("values", metavar="VALUES", help="values file (.npy, .csv, .txt)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for reproducible reports (default: OS entropy)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="reports .npy")
    p.set_defaults(handler=cmd_privatize)

    p = subparsers.add_parser(
        "aggregate", help="aggregate reports and/or merge state files",
        description="Add report files (.npy) and merge state files into one aggregator state.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist spec)")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="reports .npy or state files")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help="malformed reports: fail (default) or drop and count them")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="state file to write")
    p.set_defaults(handler=cmd_aggregate)

    p = subparsers.add_parser(
        "estimate", help="estimate the distribution from a state or reports file",
        description="Write the estimate as CSV (value,probability), k rows.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist spec)")
    p.add_argument("input", metavar="INPUT", help="state file or reports .npy")
    p.add_argument("--decoder", choices=DECODERS, default="project")
    p.add_argument("--sparsity", type=int, default=None,
                   help="support size (sparse_project; OMP atoms for cp)")
    p.add_argument("--model", choices=MODELS, default=None, help="cp: estimation model")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help="for a reports INPUT: fail on malformed reports (default) or drop them")
    p.add_argument("-o", "--output", metavar="FILE", help="output CSV (default: stdout)")
    p.set_defaults(handler=cmd_estimate)
