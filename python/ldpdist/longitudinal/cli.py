"""``ldpdist longitudinal``: the memoized mechanisms on the command line — write a spec, make
per-user secrets, privatize one collection of values into a reports file, aggregate the
reports of a collection into a state, estimate the distribution with standard errors.

Files are the library's own: reports files of :mod:`ldpdist.reports` (they carry the spec's
fingerprint, a batch id and the collection index), the aggregators' checksummed states
(they record the collection too), so a file of another spec or of another collection, a
corrupt file or a batch counted twice is refused. A secrets file holds one 32-byte secret
per user, as 64 hexadecimal digits per line (or a ``(n, 32)`` uint8 ``.npy`` array); it is
for simulations and tests: in a deployment each client makes its own secret once and keeps
it on the device, and no secret ever leaves it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
from typing import Any, Dict, List, Optional

import numpy as np

from .. import deploy
from ..errors import CliError, DuplicateBatchError
from ..files import write_atomic_with
from ..heavy_hitters.cli import load_input as _load_input
from ..reports import encode_reports
from ..specs import to_json
from .aggregate import CollectionMismatchError, LongitudinalAggregator
from .base import _REGISTRY, SECRET_BYTES, LongitudinalMechanism, make_secrets

__all__ = ["register", "load_secrets", "SHORT_NAMES"]

#: Short names of the memoized mechanisms (the class names work too, case-insensitive).
SHORT_NAMES = {"lgrr": "LongitudinalGRR", "lsue": "LongitudinalSUE",
               "loue": "LongitudinalOUE", "losue": "LongitudinalOSUE",
               "lsoue": "LongitudinalSOUE", "rappor": "MemoizedRAPPOR",
               "dbitflip": "DBitFlipPM"}
#: The spec options of the command line (``--epsilon-infinity`` …) and their parameters.
_OPTIONS = {"epsilon_infinity": float, "epsilon_1": float, "epsilon": float, "d": int,
            "f": float, "p": float, "q": float, "num_bits": int, "num_hashes": int}


def _class(name: str) -> type:
    lowered = name.lower()
    if lowered in SHORT_NAMES:
        return _REGISTRY[SHORT_NAMES[lowered]]
    for cls_name, cls in _REGISTRY.items():
        if cls_name.lower() == lowered:
            return cls
    known = ", ".join(f"{short} ({full})" for short, full in SHORT_NAMES.items())
    raise CliError(f"unknown longitudinal mechanism {name!r}; known: {known}")


def load_mechanism(path: str) -> LongitudinalMechanism:
    """The memoized mechanism of a spec file (``ldpdist longitudinal spec`` output)."""
    mech = deploy.load_spec(path)
    if not isinstance(mech, LongitudinalMechanism):
        raise CliError(f"spec file {path!r} describes {mech!r}, not a longitudinal (memoized) "
                       "mechanism: use ldpdist privatize / aggregate / estimate")
    return mech


def load_secrets(path: str) -> np.ndarray:
    """Per-user secrets, ``(n, 32)`` uint8: a ``.npy`` array of that shape, or text with one
    secret of 64 hexadecimal digits per line (blank lines ignored)."""
    data = deploy._read_bytes(path, "secrets file")
    if data.startswith(deploy.NPY_MAGIC):
        array = deploy._load_npy(data, path, "secrets file")
        if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != SECRET_BYTES:
            raise CliError(f"secrets in {path!r} must be a (n, {SECRET_BYTES}) uint8 array, "
                           f"got {array.dtype} {array.shape}")
        secrets = np.ascontiguousarray(array)
    else:
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise CliError(f"secrets file {path!r} is neither a .npy array nor text of "
                           "hexadecimal secrets") from None
        rows: List[bytes] = []
        for number, line in enumerate(text.splitlines(), 1):
            token = line.strip()
            if not token:
                continue
            try:
                secret = bytes.fromhex(token)
            except ValueError:
                secret = b""
            if len(secret) != SECRET_BYTES or len(token) != 2 * SECRET_BYTES:
                raise CliError(f"secrets file {path!r}, line {number}: a secret is "
                               f"{2 * SECRET_BYTES} hexadecimal digits ({SECRET_BYTES} bytes)")
            rows.append(secret)
        secrets = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows),
                                                                         SECRET_BYTES)
    if secrets.shape[0] == 0:
        raise CliError(f"secrets file {path!r} holds no secrets")
    return secrets


def load_input(path: str, mech: LongitudinalMechanism,
               on_invalid: str = "raise") -> LongitudinalAggregator:
    """An aggregator from a state file or a reports file of ``mech``."""
    return _load_input(path, mech, on_invalid, from_state=LongitudinalAggregator.from_bytes,
                       kind="longitudinal")


@deploy._command
def cmd_spec(args: argparse.Namespace) -> int:
    deploy._check_output(args)
    cls = _class(args.mechanism)
    params = list(cls._param_names)
    kwargs: Dict[str, Any] = {"k": args.k}
    for option in _OPTIONS:
        value = getattr(args, option)
        if value is None:
            continue
        if option not in params:
            takes = ", ".join(f"--{p.replace('_', '-')}" for p in params if p != "k")
            raise CliError(f"--{option.replace('_', '-')} does not apply to {cls.__name__} "
                           f"(it takes {takes})")
        kwargs[option] = value
    try:
        mech = cls(**kwargs)
    except TypeError as exc:
        missing = [f"--{p.replace('_', '-')}" for p in params if p not in kwargs]
        raise CliError(f"{cls.__name__} needs {' and '.join(missing) or 'other options'}"
                       if missing else f"{cls.__name__}: {deploy._one_line(exc)}") from None
    except (ValueError, OverflowError) as exc:
        raise CliError(deploy._one_line(exc)) from None
    where = deploy._write_text(args.output, to_json(mech), args.force)
    deploy._done("longitudinal spec",
                 f"wrote the spec of {mech!r} to {where} (epsilon_1 = {mech.epsilon_1:.6g}, "
                 f"epsilon_infinity = {mech.epsilon_infinity:.6g}; fingerprint "
                 f"{mech.fingerprint[:16]}…)")
    return 0


@deploy._command
def cmd_secrets(args: argparse.Namespace) -> int:
    output = deploy._binary_output(args.output, "longitudinal secrets")
    deploy._check_output(args)
    if args.n < 1:
        raise CliError(f"the number of users must be >= 1, got {args.n}")
    secrets = make_secrets(args.n, args.seed)
    text = "".join(bytes(row).hex() + "\n" for row in secrets).encode("ascii")

    def fill(handle: Any) -> None:
        os.fchmod(handle.fileno(), 0o600)  # secrets: readable by their owner only
        handle.write(text)

    try:
        write_atomic_with(output, fill, overwrite=args.force)
    except OSError as exc:
        raise CliError(deploy._one_line(exc.strerror or exc)) from None
    how = (f"from seed {args.seed} (reproducible: for simulations and tests only)"
           if args.seed is not None else "from the operating system")
    deploy._done("longitudinal secrets", f"wrote {args.n} secrets {how} to {output!r}")
    return 0


@deploy._command
def cmd_privatize(args: argparse.Namespace) -> int:
    output = deploy._binary_output(args.output, "longitudinal privatize")
    deploy._check_output(args, args.spec, args.values, args.secrets)
    mech = load_mechanism(args.spec)
    if args.collection < 0:
        raise CliError(f"--collection must be >= 0, got {args.collection}")
    values = deploy.load_values(args.values, mech.k)
    secrets = load_secrets(args.secrets)
    if secrets.shape[0] != values.size:
        raise CliError(f"one secret per user: {args.secrets!r} holds {secrets.shape[0]} "
                       f"secrets, {args.values!r} {values.size} values")
    try:
        reports = mech.privatize(values, secrets, seed=args.seed)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(deploy._one_line(exc)) from None
    data, batch = encode_reports(mech, reports, collection=args.collection,
                                 _where="longitudinal privatize")
    deploy._write_file(output, data, args.force)
    deploy._done("longitudinal privatize",
                 f"wrote {len(batch)} reports of {mech!r}, collection {args.collection}, to "
                 f"{output!r} (batch {batch.batch_id[:16]}…)")
    return 0


@deploy._command
def cmd_aggregate(args: argparse.Namespace) -> int:
    output = deploy._binary_output(args.output, "longitudinal aggregate")
    deploy._check_output(args, args.spec, *args.inputs)
    mech = load_mechanism(args.spec)
    deploy._check_distinct(args.inputs)
    try:
        total = mech.aggregator(args.collection)
    except ValueError as exc:
        raise CliError(f"--collection: {deploy._one_line(exc)}") from None
    for path in args.inputs:
        part = load_input(path, mech, args.on_invalid)
        try:
            total.merge(part)
        except (DuplicateBatchError, CollectionMismatchError) as exc:
            raise CliError(f"{path!r}: {deploy._one_line(exc)}") from None
    deploy._write_file(output, total.to_bytes(), args.force)
    which = "" if total.collection is None else f" of collection {total.collection}"
    deploy._done("longitudinal aggregate",
                 f"wrote {output!r}: n = {total.n} reports{which} in {len(total.batches)} "
                 f"batch(es){deploy._dropped_note(total.dropped)}")
    return 0


def _number(value: float) -> Optional[float]:
    return float(value) if math.isfinite(value) else None


@deploy._command
def cmd_estimate(args: argparse.Namespace) -> int:
    deploy._check_output(args, args.spec, args.input)
    mech = load_mechanism(args.spec)
    aggregator = load_input(args.input, mech, args.on_invalid)
    try:
        estimate = aggregator.estimate(args.decoder)
        errors = aggregator.standard_errors()
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(deploy._one_line(exc)) from None
    if args.format == "json":
        text = json.dumps({
            "spec": mech.to_dict(), "fingerprint": mech.fingerprint,
            "collection": aggregator.collection, "n": aggregator.n, "decoder": args.decoder,
            "epsilon_1": mech.epsilon_1, "epsilon_infinity": mech.epsilon_infinity,
            "estimate": [float(v) for v in estimate],
            "standard_error": None if errors is None else [_number(v) for v in errors],
        }, indent=1) + "\n"
    else:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["value", "probability", "standard_error"])
        for value, p in enumerate(estimate):
            writer.writerow([value, repr(float(p)),
                             "" if errors is None else repr(float(errors[value]))])
        text = out.getvalue()
    where = deploy._write_text(args.output, text, args.force)
    which = "" if aggregator.collection is None else f" of collection {aggregator.collection}"
    deploy._done("longitudinal estimate",
                 f"estimated {mech.k} probabilities from n = {aggregator.n} reports{which} "
                 f"(decoder {args.decoder}); wrote them to {where}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``longitudinal`` (spec, secrets, privatize, aggregate, estimate) to the parser."""
    force_help = ("replace an existing output file (without it an existing output is "
                  "refused); an output that is one of the inputs is refused even so")
    names = ", ".join(f"{short}={full}" for short, full in SHORT_NAMES.items())
    group = subparsers.add_parser(
        "longitudinal", help="memoized mechanisms for repeated collection from the same users",
        description="Memoized (longitudinal) mechanisms (ldpdist.longitudinal): spec, "
                    "secrets, privatize, aggregate, estimate. Each user holds a permanent "
                    "secret; the memoized answer derives from it and the value, and every "
                    "collection re-randomizes it.")
    commands = group.add_subparsers(dest="longitudinal_command", metavar="COMMAND",
                                    required=True)

    p = commands.add_parser("spec", help="write a memoized mechanism's spec (JSON)",
                            description="Write the JSON spec of a memoized mechanism; the "
                                        "success line gives its realized epsilon_1 (one "
                                        "report) and epsilon_infinity (the memoized answer).")
    p.add_argument("mechanism", metavar="MECHANISM",
                   help=f"short name or class name, case-insensitive ({names})")
    p.add_argument("--k", type=int, required=True, help="number of possible values (>= 2)")
    p.add_argument("--epsilon-infinity", dest="epsilon_infinity", type=float,
                   help="lgrr, lsue, loue, losue, lsoue: epsilon of the memoized answer")
    p.add_argument("--epsilon-1", dest="epsilon_1", type=float,
                   help="lgrr, lsue, loue, losue, lsoue: epsilon of one report "
                        "(< --epsilon-infinity)")
    p.add_argument("--epsilon", type=float, help="dbitflip: epsilon of a report")
    p.add_argument("--d", type=int, help="dbitflip: buckets per user (1 <= d <= k)")
    p.add_argument("--f", type=float, help="rappor: permanent randomized response f (0.5)")
    p.add_argument("--p", type=float,
                   help="rappor: instantaneous P(report 1 | memoized 0) (0.5)")
    p.add_argument("--q", type=float,
                   help="rappor: instantaneous P(report 1 | memoized 1) (0.75)")
    p.add_argument("--num-bits", dest="num_bits", type=int,
                   help="rappor: Bloom filter bits (default: one-hot, k bits)")
    p.add_argument("--num-hashes", dest="num_hashes", type=int,
                   help="rappor: Bloom hash functions (1)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output file (default, or '-': standard output)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_spec)

    p = commands.add_parser(
        "secrets", help="make N per-user secrets into a file (simulations and tests)",
        description="Write N per-user secrets of 32 bytes, one per line as 64 hexadecimal "
                    "digits (file mode 0600). For simulations and tests: in a deployment "
                    "each client makes its own secret once, keeps it on the device, and "
                    "never sends it; whoever holds a secret can undo its user's memoized "
                    "randomization.")
    p.add_argument("n", type=int, metavar="N", help="number of users")
    p.add_argument("--seed", type=int, default=None,
                   help="reproducible secrets (anyone who knows the seed knows every "
                        "secret: simulations only; default: the operating system)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="secrets file to write")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_secrets)

    p = commands.add_parser(
        "privatize", help="privatize one collection of values into a reports file",
        description="Privatize one value per user for one collection: the user's memoized "
                    "answer (from its secret and value), re-randomized. VALUES: a .npy 1-D "
                    "integer array or one integer per line; SECRETS: one per user, in the "
                    "same order.")
    p.add_argument("--spec", required=True, metavar="SPEC",
                   help="spec JSON (ldpdist longitudinal spec)")
    p.add_argument("values", metavar="VALUES", help="values file (.npy, or one integer per line)")
    p.add_argument("--secrets", required=True, metavar="FILE",
                   help="secrets file (ldpdist longitudinal secrets), one per user")
    p.add_argument("--collection", type=int, required=True, metavar="T",
                   help="index of the collection (0, 1, …), recorded in the reports file")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the per-report randomness (default: OS entropy); give "
                        "each collection its own")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="reports file to write (it carries the spec's fingerprint and the "
                        "collection)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_privatize)

    p = commands.add_parser(
        "aggregate", help="aggregate the reports of one collection and/or merge states",
        description="Add reports files and merge state files of one collection into one "
                    "state. A file of another spec or another collection, a corrupt file, "
                    "or a batch already counted is refused.")
    p.add_argument("--spec", required=True, metavar="SPEC",
                   help="spec JSON (ldpdist longitudinal spec)")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="reports files or state files")
    p.add_argument("--collection", type=int, default=None, metavar="T",
                   help="the collection expected (default: the inputs')")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help="malformed reports: fail (default) or drop and count them")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="state file to write")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_aggregate)

    p = commands.add_parser(
        "estimate", help="estimate the distribution of one collection, with standard errors",
        description="Write the estimate of the distribution with the standard error of "
                    "each raw (unbiased) estimate: CSV (value, probability, "
                    "standard_error; k rows) or JSON. The standard errors are empty for "
                    "Bloom-encoded RAPPOR.")
    p.add_argument("--spec", required=True, metavar="SPEC",
                   help="spec JSON (ldpdist longitudinal spec)")
    p.add_argument("input", metavar="INPUT", help="state file or reports file")
    p.add_argument("--decoder", choices=("raw", "project"), default="raw",
                   help="raw (unbiased; default) or project (onto the simplex)")
    p.add_argument("--format", choices=("csv", "json"), default="csv", help="output format")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help="for a reports INPUT: malformed reports fail (default) or are "
                        "dropped")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output file (default, or '-': standard output)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_estimate)
