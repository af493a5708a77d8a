"""File-based deployment commands: ``spec``, ``privatize``, ``aggregate``, ``estimate``.

A deployment shares one JSON spec (``ldpdist spec``) between clients and server::

    ldpdist spec hr --k 1000 --epsilon 1 -o spec.json
    ldpdist spec hlhr --k 1000 --epsilon 1 --sensitive 3,17,99 -o spec.json   # or --sensitive-file
    ldpdist privatize --spec spec.json values.csv -o r1.ldpr             # each client / batch
    ldpdist aggregate --spec spec.json r1.ldpr r2.ldpr -o a.ldps         # per shard
    ldpdist aggregate --spec spec.json a.ldps b.ldps -o all.ldps         # merge shard states
    ldpdist estimate --spec spec.json all.ldps --decoder project -o estimate.csv

Files:

* values: a ``.npy`` 1-D integer array, or text with exactly one integer per line (one
  column; surrounding spaces and blank lines are ignored; no header, no separators);
* reports: the reports files of :mod:`ldpdist.reports` (they carry the spec's fingerprint
  and a batch id); plain ``.npy`` report arrays from other systems are read only with
  ``--raw-reports``;
* states: :meth:`Aggregator.to_bytes` (checksummed; they carry the spec and the ids of the
  batches they hold).

Every input is checked against the spec; a file made under another spec, a corrupt file and
a batch that would be counted twice are refused. Every command prints one line on stderr
when it succeeds and, on a user error, one ``error:`` line with exit status 2. ``-o -``
writes text outputs (spec, estimate) to standard output; binary outputs need a file.
"""

from __future__ import annotations

import argparse
import functools
import io
import inspect
import os
import pickle
import re
import sys
import tokenize
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import memory
from .decoders import ALL_DECODERS
from .errors import CliError, DuplicateBatchError, IntegrityError, SpecMismatchError
from .files import check_output, write_atomic
from .mechanisms import SHORT_NAMES, Aggregator, CompressivePrivatization
from .mechanisms.base import Mechanism
from .mechanisms.compressive import MATRIX_KINDS, MODELS, REGIMES
from .mechanisms.state_format import OLD_STATE_MAGICS, STATE_MAGIC
from .reports import READ_MAGICS as REPORTS_MAGICS, encode_reports
from .specs import from_dict, parse_json, registered, to_json

NPY_MAGIC = b"\x93NUMPY"
# What np.load raises on a corrupt .npy file: besides its own ValueErrors, numpy's header
# parser lets tokenize's and int()'s errors through (an unbalanced header dict, a dimension
# beyond a C long).
NPY_ERRORS = (ValueError, OSError, EOFError, pickle.UnpicklingError, TypeError,
              tokenize.TokenError, OverflowError, RecursionError)


def npy_error(exc: BaseException) -> str:
    """What is wrong with a .npy file, from the exception np.load raised (one line)."""
    if isinstance(exc, (tokenize.TokenError, RecursionError)):
        return "its header is not a well-formed dictionary"
    if isinstance(exc, OverflowError):
        return "its header announces a dimension too large for this platform"
    return _one_line(exc)

# Mechanisms whose k follows from another option (the partition of BlockHadamardResponse);
# --k is then optional and checked against it.
_K_FROM = {"BlockHadamardResponse": ("block_sizes", "block_labels")}
# The optional options of `ldpdist spec`, and the constructor parameter each one sets where
# it is not the parameter of the same name.
_OPTION_PARAMETERS = {"m": "m", "seed": "seed", "bits": "bits", "matrix": "matrix",
                      "regime": "regime", "blocks": "blocks", "d": "d",
                      "epsilon_01": "epsilon_01", "epsilon_10": "epsilon_10",
                      "block_sizes": "blocks", "block_labels": "blocks",
                      "sensitive": "sensitive", "sensitive_file": "sensitive"}


def _parameters(name: str) -> Dict[str, inspect.Parameter]:
    """The constructor parameters of the registered mechanism ``name``."""
    return dict(inspect.signature(registered()[name]).parameters)


def _takes(name: str, option: str) -> bool:
    """Whether the mechanism ``name`` takes ``--option``: it has the constructor parameter
    the option sets; the options of a partition that gives k (_K_FROM) are that
    mechanism's only."""
    own = _K_FROM.get(name, ())
    if option in own:
        return True
    if any(option in options for options in _K_FROM.values()):
        return False  # another mechanism's partition
    parameter = _OPTION_PARAMETERS[option]
    return (parameter in _parameters(name)
            and parameter not in {_OPTION_PARAMETERS[given] for given in own})


# Read from the registered mechanisms' constructors, so that a new mechanism whose
# parameters have options here needs no entry:
# option -> the mechanisms that take it
_SPEC_OPTIONS = {option: tuple(name for name in registered() if _takes(name, option))
                 for option in _OPTION_PARAMETERS}
# mechanism -> the options it requires (its parameters without a default, k and ε aside)
_REQUIRED_OPTIONS = {
    name: tuple(option for option, parameter in _parameters(name).items()
                if parameter.default is inspect.Parameter.empty
                and option not in ("k", "epsilon") and option in _OPTION_PARAMETERS
                and name not in _K_FROM)
    for name in registered()}
# Mechanisms whose k is fixed (not a parameter): --k may be omitted, or must be that k.
_FIXED_K = {"AsymmetricBinaryResponse": 2}
# Private mechanisms with a budget matrix instead of one ε (no epsilon parameter: their
# required options give the budgets).
_BUDGET_OPTIONS = {name: " and ".join(f"--{option.replace('_', '-')}"
                                      for option in _REQUIRED_OPTIONS[name])
                   for name, cls in registered().items()
                   if cls.private and "epsilon" not in _parameters(name)}


def _budget_option(text: str, option: str) -> Any:
    """A budget on the command line: a number ≥ 0, or "inf" (no constraint); passed to the
    mechanism as a float or the spec's string "inf" (the mechanism checks the value)."""
    if text.strip().lower() in ("inf", "+inf", "infinity", "+infinity"):
        return "inf"
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"{option}: a budget is a number ≥ 0 or 'inf', got {text!r}") from None
    if value == float("inf"):  # e.g. 1e400: say inf if that is what is meant
        raise CliError(f"{option}: budget {text!r} overflows double precision; write 'inf' "
                       "for no constraint")
    return value
_STDOUT = "-"


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


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _done(command: str, message: str) -> None:
    """The one stderr line a successful command prints."""
    print(f"ldpdist {command}: {message}", file=sys.stderr)


def _read_bytes(path: str, what: str) -> bytes:
    """The whole file, after checking that its size fits the memory budget."""
    try:
        memory.check(f"reading {what} {path!r}", [("its bytes", os.path.getsize(path))])
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise CliError(f"{what} {path!r} does not exist") from None
    except IsADirectoryError:
        raise CliError(f"{what} {path!r} is a directory") from None
    except OSError as exc:
        raise CliError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None


def _read_head(path: str, what: str, size: int = 16) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except FileNotFoundError:
        raise CliError(f"{what} {path!r} does not exist") from None
    except IsADirectoryError:
        raise CliError(f"{what} {path!r} is a directory") from None
    except OSError as exc:
        raise CliError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None


def _check_output(args: argparse.Namespace, *inputs: Optional[str]) -> None:
    """Refuse ``args.output`` before any work when it is one of ``inputs`` (the same file,
    however spelled; even with --force), a directory or not a regular file, or when it
    exists and --force is not given (:func:`ldpdist.files.check_output`)."""
    try:
        check_output(args.output, inputs, force=args.force)
    except (OSError, ValueError) as exc:
        raise CliError(_one_line(exc.strerror if isinstance(exc, OSError) and exc.strerror
                                 else exc)) from None


def _write_file(path: str, data: bytes, force: bool = False) -> None:
    """Write atomically; without ``force`` a file that appeared since :func:`_check_output`
    is not replaced either."""
    try:
        write_atomic(path, data, overwrite=force)
    except OSError as exc:
        raise CliError(_one_line(exc.strerror or exc)) from None


def _binary_output(path: str, command: str) -> str:
    if path == _STDOUT:
        raise CliError(f"{command} writes a binary file; '-o -' (standard output) is for text "
                       "outputs only: give a file name")
    return path


def _write_text(path: Optional[str], text: str, force: bool = False) -> str:
    """Write text to ``path`` (``None`` or ``-``: standard output); returns where it went."""
    if path is None or path == _STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return "standard output"
    _write_file(path, text.encode(), force)
    return repr(path)


def _load_npy(data: bytes, path: str, what: str) -> np.ndarray:
    try:
        # The header first: np.load allocates what it announces before reading the data.
        stream = io.BytesIO(data)
        major, _minor = np.lib.format.read_magic(stream)
        read_header = (np.lib.format.read_array_header_1_0 if major == 1
                       else np.lib.format.read_array_header_2_0)
        shape, _fortran, dtype = read_header(stream)
        announced = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if not dtype.hasobject and announced > len(data) - stream.tell():
            raise CliError(f"{what} {path!r} is truncated: its .npy header announces "
                           f"{announced} bytes of data, the file holds "
                           f"{len(data) - stream.tell()}")
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except NPY_ERRORS + (MemoryError,) as exc:
        raise CliError(f"{what} {path!r} is not a readable .npy file: {npy_error(exc)}") from None
    if not isinstance(array, np.ndarray):  # pragma: no cover - np.load of a .npy is an array
        raise CliError(f"{what} {path!r} is not a .npy array")
    return array


def _map_npy(path: str) -> np.ndarray:
    """A raw reports .npy, memory-mapped (nothing proportional to the file is allocated)."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except NPY_ERRORS as exc:
        raise CliError(f"reports file {path!r} is not a readable .npy file: "
                       f"{npy_error(exc)}") from None
    if not isinstance(array, np.ndarray):  # pragma: no cover - np.load of a .npy is an array
        raise CliError(f"reports file {path!r} is not a .npy array")
    return array


def load_spec(path: str) -> Mechanism:
    """The mechanism of a JSON spec file (``ldpdist spec`` output)."""
    data = _read_bytes(path, "spec file")
    try:
        spec = parse_json(data.decode("utf-8"), f"spec file {path!r}")
    except UnicodeDecodeError as exc:
        raise CliError(f"spec file {path!r} is not UTF-8 text: {_one_line(exc)}") from None
    except ValueError as exc:
        raise CliError(_one_line(exc)) from None
    try:
        return from_dict(spec)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(f"invalid spec in {path!r}: {_one_line(exc)}") from None


def mechanism_class(name: str) -> str:
    """Class name of a mechanism given by short name or class name (case-insensitive)."""
    lowered = name.lower()
    if lowered in SHORT_NAMES:
        return SHORT_NAMES[lowered]
    for cls_name in registered():
        if cls_name.lower() == lowered:
            return cls_name
    known = ", ".join(f"{short} ({full})" for short, full in SHORT_NAMES.items())
    raise CliError(f"unknown mechanism {name!r}; known: {known}")


_INTEGER = re.compile(r"[+-]?[0-9]+\Z")


def _bad_line(path: str, line_number: int, line: str, what: str = "values file") -> CliError:
    stripped = line.strip()
    shown = stripped if len(stripped) <= 40 else stripped[:37] + "..."
    fields = [f for f in re.split(r"[,;\t ]+", stripped) if f]
    if len(fields) > 1:
        why = (f"holds {len(fields)} fields; a {what} holds one integer per line (one "
               "column, no separators)")
    else:
        why = "is not an integer"
    return CliError(f"{what} {path!r}, line {line_number}: {shown!r} {why}")


def _parse_text_values(data: bytes, path: str,
                       what: str = "values file") -> Tuple[np.ndarray, List[int]]:
    """One integer per non-blank line; returns the values and the line number of each."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CliError(f"{what} {path!r} is not UTF-8 text: {_one_line(exc)}") from None
    values: List[int] = []
    lines: List[int] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        token = line.strip()
        if not token:
            continue
        if not _INTEGER.match(token):
            raise _bad_line(path, line_number, line, what)
        # more than 19 significant digits is out of range (and int() refuses 4300)
        value = int(token) if len(token.lstrip("+-").lstrip("0")) <= 19 else None
        if value is None or not -2**63 <= value < 2**63:
            shown = token if len(token) <= 40 else token[:37] + "..."
            raise CliError(f"{what} {path!r}, line {line_number}: {shown} is out of range")
        values.append(value)
        lines.append(line_number)
    return np.array(values, dtype=np.int64), lines


def load_values(path: str, k: int) -> np.ndarray:
    """User values from a .npy or text file, checked to be integers in [0, k); at least one."""
    data = _read_bytes(path, "values file")
    lines: Optional[List[int]] = None
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
        array, lines = _parse_text_values(data, path)
    if array.size == 0:
        raise CliError(f"values file {path!r} holds no values")
    bad = (array < 0) | (array >= k) if array.dtype.kind == "i" else array >= k
    if bad.any():
        i = int(np.argmax(bad))
        count = int(bad.sum())
        location = f"line {lines[i]}" if lines is not None else f"values[{i}]"
        raise CliError(f"values must lie in [0, {k}): {count} in {path!r} do not; the first "
                       f"is {array[i]} at {location}")
    return array


def _report_format(mech: Mechanism) -> str:
    if mech.report_kind == "bits":
        width = -(-mech.output_size // 8)
        return f"2-D uint8 arrays of shape (n, {width}) (np.packbits rows)"
    return "1-D unsigned integer arrays"


def check_raw_reports(array: np.ndarray, mech: Mechanism, path: str) -> None:
    """Shape and dtype of a raw reports array against the spec's mechanism."""
    if mech.report_kind == "bits":
        width = -(-mech.output_size // 8)
        ok = array.dtype == np.uint8 and array.ndim == 2 and array.shape[1] == width
    else:
        ok = array.dtype.kind in "iu" and array.ndim == 1
    if not ok:
        raise CliError(f"raw reports in {path!r} (dtype {array.dtype}, shape {array.shape}) do "
                       f"not fit {mech!r}, whose reports are {_report_format(mech)}")


def _cli_message(exc: Exception) -> str:
    return _one_line(exc).replace("pass on_invalid='drop'", "pass --on-invalid drop")


def _add_file(aggregator: Aggregator, path: str, mech: Mechanism, on_invalid: str,
              raw: bool = False) -> None:
    """Stream a reports file into ``aggregator`` (bounded memory whatever its size; a
    progress bar when stderr is a terminal)."""
    try:
        aggregator.add_file(path, on_invalid=on_invalid, raw=raw)
    except SpecMismatchError as exc:
        raise CliError(_one_line(exc)) from None
    except IntegrityError as exc:
        raise CliError(f"reports file {path!r} is corrupt: {_one_line(exc)}") from None
    except (ValueError, TypeError) as exc:
        raise CliError(f"reports in {path!r} do not fit {mech!r}: {_cli_message(exc)}") from None
    except OSError as exc:
        raise CliError(f"cannot read reports file {path!r}: {exc.strerror or exc}") from None


def load_input(path: str, mech: Mechanism, on_invalid: str = "raise",
               raw_reports: bool = False) -> Tuple[Aggregator, str]:
    """An aggregator from a state file, a reports file or (with ``raw_reports``) a raw
    reports .npy; also its kind ("state" or "reports")."""
    head = _read_head(path, "input file")
    if head.startswith(STATE_MAGIC) or any(head.startswith(m) for m in OLD_STATE_MAGICS):
        try:
            state = Aggregator.from_bytes(_read_bytes(path, "state file"))
        except IntegrityError as exc:
            raise CliError(f"state file {path!r} is corrupt: {_one_line(exc)}") from None
        except (ValueError, TypeError) as exc:
            raise CliError(f"state file {path!r}: {_one_line(exc)}") from None
        if state.mechanism.fingerprint != mech.fingerprint:
            raise CliError(f"state file {path!r} was aggregated for {state.mechanism!r}, "
                           f"not {mech!r}")
        return state, "state"
    aggregator = mech.aggregator()
    if head.startswith(REPORTS_MAGICS):
        _add_file(aggregator, path, mech, on_invalid)
        return aggregator, "reports"
    if head.startswith(NPY_MAGIC):
        if not raw_reports:
            raise CliError(
                f"{path!r} is a plain .npy array: nothing in it says which spec made it. "
                "Reports written by 'ldpdist privatize' carry their spec; for reports of this "
                "spec from another system (e.g. the HR reference code) pass --raw-reports")
        reports = _map_npy(path)  # the header only: checks and messages of np.load
        check_raw_reports(reports, mech, path)
        del reports
        _add_file(aggregator, path, mech, on_invalid, raw=True)
        return aggregator, "reports"
    raise CliError(f"{path!r} is neither an ldpdist reports file nor a state file "
                   f"{'nor a .npy array ' if raw_reports else ''}(bad magic bytes)")


def _check_distinct(paths: List[str]) -> None:
    seen: Dict[str, str] = {}
    for path in paths:
        key = os.path.realpath(path)
        if key in seen:
            raise CliError(f"{path!r} is given twice (as {seen[key]!r}); it would be counted twice")
        seen[key] = path


def _dropped_note(dropped: int) -> str:
    return f", {dropped} invalid report(s) dropped" if dropped else ""


def sensitive_values(text: Optional[str], path: Optional[str], k: Any) -> List[int]:
    """The sensitive values of ``ldpdist spec hlhr``: ``--sensitive 1,5,9`` (comma-separated;
    ``''`` for none) and/or ``--sensitive-file PATH`` (a ``.npy`` 1-D integer array, or text
    with one integer per line). Both may be given; a value listed twice (in one or across
    both) is refused with where it appears, as is a value outside [0, k)."""
    values: List[int] = []
    where: List[str] = []
    if text is not None:
        tokens = [token.strip() for token in text.split(",")]
        if text.strip() == "":
            tokens = []
        for i, token in enumerate(tokens, start=1):
            digits = token.lstrip("+-").lstrip("0")
            if not _INTEGER.match(token) or len(digits) > 19:
                shown = token if len(token) <= 40 else token[:37] + "..."
                raise CliError(f"--sensitive: item {i}, {shown!r}, is not an integer of at most "
                               "19 digits (give comma-separated values, e.g. --sensitive "
                               "1,5,9, or '' for none)")
            values.append(int(token))
            where.append(f"--sensitive item {i}")
    if path is not None:
        data = _read_bytes(path, "sensitive file")
        if data.startswith(NPY_MAGIC):
            array = _load_npy(data, path, "sensitive file")
            if array.dtype.kind not in "iu" or array.ndim != 1:
                raise CliError(f"sensitive file {path!r} must hold a 1-D integer array, got "
                               f"dtype {array.dtype} and shape {array.shape}")
            lines = None
        else:
            array, lines = _parse_text_values(data, path, "sensitive file")
        if array.size == 0:
            raise CliError(f"sensitive file {path!r} holds no values (for no sensitive value "
                           "pass --sensitive '')")
        memory.check("reading the sensitive values", [("the values as Python integers",
                                                      64 * array.size)])
        for i, value in enumerate(array.tolist()):
            values.append(int(value))
            where.append(f"{path!r} line {lines[i]}" if lines is not None
                         else f"{path!r} entry {i}")
    first: Dict[int, str] = {}
    bound = k if isinstance(k, int) and k >= 2 else None
    for value, origin in zip(values, where):
        if bound is not None and not 0 <= value < bound:
            raise CliError(f"sensitive values must lie in [0, {bound}): {value} at {origin}")
        if value in first:
            raise CliError(f"sensitive value {value} is listed twice: at {first[value]} and at "
                           f"{origin}")
        first[value] = origin
    return values


# -- commands --------------------------------------------------------------------------------


def parse_block_sizes(text: str) -> List[int]:
    """``--block-sizes 10,10,80`` as a list of integers (their checks are the mechanism's)."""
    fields = [field.strip() for field in str(text).split(",")]
    if not all(_INTEGER.match(field) and len(field) <= 20 for field in fields):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise CliError(f"--block-sizes must be comma-separated integers (e.g. 10,10,80), got "
                       f"{shown!r}")
    return [int(field) for field in fields]


def load_block_labels(path: str) -> np.ndarray:
    """``--block-labels FILE``: one block label per value, as a values file (a .npy 1-D
    integer array, or one integer per line); the labels' checks are the mechanism's."""
    data = _read_bytes(path, "block labels file")
    if data.startswith(NPY_MAGIC):
        array = _load_npy(data, path, "block labels file")
        if array.dtype.kind not in "iu" or array.ndim != 1:
            raise CliError(f"block labels in {path!r} must be a 1-D integer array, got dtype "
                           f"{array.dtype}, shape {array.shape}")
    elif path.lower().endswith(".npy"):
        raise CliError(f"block labels file {path!r} is not a readable .npy file (bad magic "
                       "bytes)")
    else:
        array, _ = _parse_text_values(data, path, "block labels file")
    if array.size == 0:
        raise CliError(f"block labels file {path!r} holds no labels")
    return array


def _block_options(name: str, args: argparse.Namespace, kwargs: Dict[str, Any]) -> None:
    """The partition of a mechanism whose k follows from it: exactly one of --block-sizes
    and --block-labels, into ``kwargs["blocks"]``; --k, when given, is checked by the
    mechanism (``k=``)."""
    given = [option for option in _K_FROM[name] if getattr(args, option) is not None]
    if len(given) != 1:
        raise CliError(f"{name} needs its blocks: exactly one of --block-sizes (e.g. 10,10,80) "
                       "and --block-labels FILE (one block label per value)")
    option = given[0]
    value = getattr(args, option)
    kwargs["blocks"] = (parse_block_sizes(value) if option == "block_sizes"
                        else load_block_labels(value))
    if args.k is not None:
        kwargs["k"] = args.k


@_command
def cmd_spec(args: argparse.Namespace) -> int:
    _check_output(args, args.block_labels, args.sensitive_file)
    name = mechanism_class(args.mechanism)
    kwargs: Dict[str, Any] = {}
    if name in _K_FROM:
        _block_options(name, args, kwargs)
    elif name in _FIXED_K:
        if args.k is not None and args.k != _FIXED_K[name]:
            raise CliError(f"{name} has k = {_FIXED_K[name]} (fixed), got --k {args.k}")
    elif args.k is None:
        raise CliError(f"{name} needs --k (the number of possible values)")
    else:
        kwargs["k"] = args.k
    if name in _BUDGET_OPTIONS:
        if args.epsilon is not None:
            raise CliError(f"--epsilon does not apply to {name}: give its budgets with "
                           f"{_BUDGET_OPTIONS[name]}")
    elif registered()[name].private:
        if args.epsilon is None:
            raise CliError(f"{name} needs --epsilon")
        kwargs["epsilon"] = args.epsilon
    elif args.epsilon is not None:
        raise CliError(f"--epsilon does not apply to {name}: it is not a private mechanism "
                       "(its reports are not randomized; it only limits communication)")
    for option, takers in _SPEC_OPTIONS.items():
        value = getattr(args, option)
        if value is None:
            continue
        if option in ("epsilon_01", "epsilon_10"):
            value = _budget_option(value, f"--{option.replace('_', '-')}")
        if name not in takers:
            raise CliError(f"--{option.replace('_', '-')} does not apply to {name} (it "
                           f"applies to {', '.join(takers)})")
        if name not in _K_FROM:
            kwargs[option] = value
    if "sensitive" in kwargs or "sensitive_file" in kwargs:
        kwargs["sensitive"] = sensitive_values(kwargs.pop("sensitive", None),
                                               kwargs.pop("sensitive_file", None), args.k)
    missing = [f"--{option.replace('_', '-')}" for option in _REQUIRED_OPTIONS.get(name, ())
               if option not in kwargs]
    if missing:
        also = " (or --sensitive-file)" if missing == ["--sensitive"] else ""
        raise CliError(f"{name} needs {' and '.join(missing)}{also}")
    try:
        mech = from_dict({"mechanism": name, **kwargs})
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(_one_line(exc)) from None
    where = _write_text(args.output, to_json(mech), args.force)
    _done("spec", f"wrote the spec of {mech!r} to {where} (fingerprint {mech.fingerprint[:16]}…)")
    return 0


@_command
def cmd_privatize(args: argparse.Namespace) -> int:
    output = _binary_output(args.output, "privatize")
    _check_output(args, args.spec, args.values)
    mech = load_spec(args.spec)
    numbered = "first_user" in inspect.signature(mech.privatize).parameters
    if args.first_user is not None and not numbered:
        raise CliError("--first-user applies only to mechanisms that number their users "
                       f"(obhr, tsrappor, pch), not {mech!r}")
    if not mech.randomized and args.seed is not None:
        raise CliError(f"--seed does not apply to {type(mech).__name__}: its reports are "
                       "deterministic given the spec's public seed and the user indices; "
                       "assign the indices with --first-user")
    values = load_values(args.values, mech.k)
    options: Dict[str, Any] = {}
    if args.first_user is not None:
        options["first_user"] = args.first_user
    try:
        if mech.randomized:
            reports = mech.privatize(values, seed=args.seed, **options)
        else:
            reports = mech.privatize(values, **options)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(_one_line(exc)) from None
    data, batch = encode_reports(mech, reports, _where="privatize")
    _write_file(output, data, args.force)
    _done("privatize", f"wrote {len(batch)} reports of {mech!r} to {output!r} "
                       f"(batch {batch.batch_id[:16]}…)")
    return 0


@_command
def cmd_aggregate(args: argparse.Namespace) -> int:
    output = _binary_output(args.output, "aggregate")
    _check_output(args, args.spec, *args.inputs)
    mech = load_spec(args.spec)
    _check_distinct(args.inputs)
    total = mech.aggregator()
    for path in args.inputs:
        part, _kind = load_input(path, mech, args.on_invalid, args.raw_reports)
        try:
            total.merge(part)
        except DuplicateBatchError as exc:
            raise CliError(f"{path!r}: {_one_line(exc)}") from None
    _write_file(output, total.to_bytes(), args.force)
    _done("aggregate", f"wrote {output!r}: n = {total.n} reports in {len(total.batches)} "
                       f"batch(es){_dropped_note(total.dropped)}")
    return 0


@_command
def cmd_estimate(args: argparse.Namespace) -> int:
    _check_output(args, args.spec, args.input)
    mech = load_spec(args.spec)
    options: Dict[str, Any] = {}
    if args.model is not None:
        if not isinstance(mech, CompressivePrivatization):
            raise CliError(f"--model applies only to CompressivePrivatization, not {mech!r}")
        options["model"] = args.model
    aggregator, kind = load_input(args.input, mech, args.on_invalid, args.raw_reports)
    try:
        estimate = aggregator.estimate(args.decoder, sparsity=args.sparsity, **options)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(_one_line(exc)) from None
    lines = ["value,probability"]
    lines.extend(f"{value},{float(p)!r}" for value, p in enumerate(estimate))
    where = _write_text(args.output, "\n".join(lines) + "\n", args.force)
    dropped = _dropped_note(aggregator.dropped) if kind == "reports" else ""
    _done("estimate", f"estimated {mech.k} probabilities from n = {aggregator.n} reports "
                      f"(decoder {args.decoder}{dropped}); wrote them to {where}")
    return 0


# -- registration ----------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``spec``, ``privatize``, ``aggregate`` and ``estimate`` to the ``ldpdist`` parser."""
    names = ", ".join(f"{short}={full}" for short, full in SHORT_NAMES.items())
    raw_help = ("also accept plain .npy report arrays without an ldpdist header (reports of "
                "this spec from another system, e.g. the HR reference code); nothing checks "
                "which spec made them")
    on_invalid_help = "malformed reports: fail (default) or drop and count them"
    force_help = ("replace an existing output file (without it an existing output is "
                  "refused); an output that is one of the inputs is refused even so")

    p = subparsers.add_parser(
        "spec", help="write a mechanism spec (JSON) shared by clients and server",
        description="Write the JSON spec of a mechanism (Mechanism.to_dict()).")
    p.add_argument("mechanism", metavar="MECHANISM",
                   help=f"short name or class name, case-insensitive ({names})")
    p.add_argument("--k", type=int,
                   help="number of possible values (>= 2); required, except for abr (k = 2) "
                        "and bhr (k follows from its blocks, checked when given)")
    p.add_argument("--epsilon", type=float,
                   help="privacy parameter (> 0); required, except for pch (not private) and "
                        "abr (two budgets)")
    p.add_argument("--epsilon-01", dest="epsilon_01", metavar="E01",
                   help="abr (required): budget E[0,1], Q(y|0) <= e^E01 Q(y|1); a number >= 0 "
                        "or 'inf' (no constraint)")
    p.add_argument("--epsilon-10", dest="epsilon_10", metavar="E10",
                   help="abr (required): budget E[1,0], Q(y|1) <= e^E10 Q(y|0); a number >= 0 "
                        "or 'inf'")
    p.add_argument("--m", type=int, help="cp: number of possible reports (required)")
    p.add_argument("--seed", type=int,
                   help="cp, pch (required) / olh: public seed of the mechanism")
    p.add_argument("--bits", type=int, help="pch: bits per message ℓ, 1 to 31 (required)")
    p.add_argument("--matrix", choices=MATRIX_KINDS, help="cp: sign matrix kind")
    p.add_argument("--regime", choices=REGIMES, help="cp: privacy regime")
    p.add_argument("--blocks", type=int, help="hr: number of blocks B")
    p.add_argument("--d", type=int, help="ss: subset size")
    p.add_argument("--block-sizes", dest="block_sizes", metavar="K0,K1,...",
                   help="bhr: sizes of the blocks, contiguous and in order (e.g. 10,10,80)")
    p.add_argument("--block-labels", dest="block_labels", metavar="FILE",
                   help="bhr: one block label per value (labels 0..m-1), a .npy 1-D integer "
                        "array or one integer per line")
    p.add_argument("--sensitive", metavar="LIST",
                   help="hlhr: the sensitive values, comma-separated (e.g. 1,5,9; '' for "
                        "none); with or instead of --sensitive-file")
    p.add_argument("--sensitive-file", dest="sensitive_file", metavar="FILE",
                   help="hlhr: a file of sensitive values (one integer per line, or a .npy "
                        "1-D integer array)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output file (default, or '-': standard output)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_spec)

    p = subparsers.add_parser(
        "privatize", help="privatize values into a reports file",
        description="Privatize one value per user. VALUES: a .npy 1-D integer array, or text "
                    "with exactly one integer per line (blank lines ignored).")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist spec)")
    p.add_argument("values", metavar="VALUES", help="values file (.npy, or one integer per line)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for reproducible reports (default: OS entropy); not for pch, "
                        "whose reports are deterministic")
    p.add_argument("--first-user", type=int, default=None, metavar="N",
                   help="user number of the first value (default 0), for the mechanisms that "
                        "assign users by number: obhr (group (N + i) mod K), tsrappor (stage by "
                        "parity), pch (public index N + i: every user of a deployment needs a "
                        "distinct one); continues the assignment across batch files")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="reports file to write (it carries the spec's fingerprint)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_privatize)

    p = subparsers.add_parser(
        "aggregate", help="aggregate reports and/or merge state files",
        description="Add reports files and merge state files into one aggregator state. A "
                    "file of another spec, a corrupt file, or a batch already counted is "
                    "refused.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist spec)")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="reports files or state files")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help=on_invalid_help)
    p.add_argument("--raw-reports", action="store_true", help=raw_help)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="state file to write")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_aggregate)

    p = subparsers.add_parser(
        "estimate", help="estimate the distribution from a state or reports file",
        description="Write the estimate as CSV (value,probability), k rows.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist spec)")
    p.add_argument("input", metavar="INPUT", help="state file or reports file")
    p.add_argument("--decoder", choices=ALL_DECODERS, default="project",
                   help="raw (unbiased), normalize (clip and rescale), project (onto the "
                        "simplex; default), sparse_project (onto the s-sparse simplex), "
                        "ibu (maximum likelihood; not for cp), two_stage and "
                        "two_stage_project (two-stage mechanisms only)")
    p.add_argument("--sparsity", type=int, default=None,
                   help="support size s for sparse_project and the two-stage decoders, OMP "
                        "atoms for cp (default: chosen from the noise level)")
    p.add_argument("--model", choices=MODELS, default=None, help="cp: estimation model")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help="for a reports INPUT: " + on_invalid_help)
    p.add_argument("--raw-reports", action="store_true", help=raw_help)
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output CSV (default, or '-': standard output)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_estimate)
