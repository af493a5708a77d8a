"""``ldpdist hh``: the heavy-hitter protocols on the command line — write a spec, privatize
a file of items into a reports file, aggregate reports and states, identify the frequent
items or estimate given ones. Files are the library's own (reports files of
:mod:`ldpdist.reports`, the aggregators' checksummed states), so a file of another spec,
a corrupt file or a batch counted twice is refused as for the mechanisms."""

from __future__ import annotations

import argparse
import csv
import io
import json
from typing import Any, Callable, Dict, List, Tuple

from .. import deploy
from ..errors import CliError, DuplicateBatchError, IntegrityError, SpecMismatchError
from ..reports import READ_MAGICS, read_reports
from ..specs import to_json
from .protocol import (_STATE_MAGIC, HeavyHitterProtocol, ItemFrequencies,
                       aggregator_from_bytes, protocols)

__all__ = ["register"]


def _protocol_class(name: str) -> type:
    known = protocols()
    for cls_name, cls in known.items():
        if cls_name.lower() == name.lower():
            return cls
    raise CliError(f"unknown heavy-hitter protocol {name!r}; known: {', '.join(sorted(known))}")


def _parameter(text: str) -> Tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise CliError(f"--set takes NAME=VALUE (e.g. --set top=16), got {text!r}")
    try:
        return name.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return name.replace("-", "_"), value


def load_protocol(path: str) -> HeavyHitterProtocol:
    """The heavy-hitter protocol of a spec file (``ldpdist hh spec`` output)."""
    protocol = deploy.load_spec(path)
    if not isinstance(protocol, HeavyHitterProtocol):
        raise CliError(f"spec file {path!r} describes {protocol!r}, not a heavy-hitter "
                       "protocol: use ldpdist privatize / aggregate / estimate")
    return protocol


def load_items(path: str, ints: bool) -> List[Any]:
    """One item per line of a UTF-8 text file (the line ending removed; a final newline
    does not make an empty item), or unsigned integers with ``ints``."""
    data = deploy._read_bytes(path, "items file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"items file {path!r} is not UTF-8 text: {exc.reason} at byte "
                       f"{exc.start}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if not ints:
        return lines
    values = []
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped.isdigit() or int(stripped) >= 2**64:
            raise CliError(f"items file {path!r}, line {number}: {stripped[:40]!r} is not an "
                           "unsigned 64-bit integer (--ints)")
        values.append(int(stripped))
    return values


def load_input(path: str, protocol: Any, on_invalid: str = "raise", *,
               from_state: Callable[[bytes, Any], Any] = aggregator_from_bytes,
               kind: str = "heavy-hitter") -> Any:
    """An aggregator from a state file (read by ``from_state(data, protocol)``) or a
    reports file of ``protocol``; ``kind`` names the state in errors. The memoized
    mechanisms' command line (:mod:`ldpdist.longitudinal.cli`) reads its files with it too."""
    head = deploy._read_head(path, "input file", 32)
    try:
        if head.startswith(_STATE_MAGIC):
            return from_state(deploy._read_bytes(path, "state file"), protocol)
        if head.startswith(READ_MAGICS):
            return protocol.aggregator().add(read_reports(path, protocol), on_invalid)
    except SpecMismatchError as exc:
        raise CliError(f"{path!r}: {deploy._one_line(exc)}") from None
    except IntegrityError as exc:
        raise CliError(f"{path!r} is corrupt: {deploy._one_line(exc)}") from None
    except (ValueError, TypeError) as exc:
        raise CliError(f"{path!r} does not fit {protocol!r}: {deploy._one_line(exc)}") from None
    raise CliError(f"{path!r} is neither an ldpdist reports file nor a {kind} state "
                   "file (bad magic bytes)")


def _csv(found: ItemFrequencies) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "item", "hash", "estimate", "standard_error"])
    for rank, (item, h, f, s) in enumerate(found.rows(), 1):
        shown = "" if item is None else item.hex() if isinstance(item, bytes) else item
        writer.writerow([rank, shown, h, repr(f), repr(s)])
    return out.getvalue()


@deploy._command
def cmd_spec(args: argparse.Namespace) -> int:
    deploy._check_output(args)
    cls = _protocol_class(args.protocol)
    kwargs: Dict[str, Any] = dict(_parameter(text) for text in args.set or [])
    if "epsilon" in kwargs:
        raise CliError("give the privacy parameter with --epsilon, not --set epsilon=…")
    try:
        protocol = cls(args.epsilon, **kwargs)
    except TypeError as exc:
        raise CliError(f"{cls.__name__}: {deploy._one_line(exc)}") from None
    except (ValueError, OverflowError) as exc:
        raise CliError(deploy._one_line(exc)) from None
    where = deploy._write_text(args.output, to_json(protocol), args.force)
    deploy._done("hh spec", f"wrote the spec of {protocol!r} to {where} (fingerprint "
                            f"{protocol.fingerprint[:16]}…)")
    return 0


@deploy._command
def cmd_privatize(args: argparse.Namespace) -> int:
    from ..reports import encode_reports

    output = deploy._binary_output(args.output, "hh privatize")
    deploy._check_output(args, args.spec, args.items)
    protocol = load_protocol(args.spec)
    items = load_items(args.items, args.ints)
    try:
        reports = protocol.privatize(items, seed=args.seed)
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(f"items file {args.items!r}: {deploy._one_line(exc)}") from None
    data, batch = encode_reports(protocol, reports, _where="hh privatize")
    deploy._write_file(output, data, args.force)
    deploy._done("hh privatize", f"wrote {len(batch)} reports of {protocol!r} to {output!r} "
                                 f"(batch {batch.batch_id[:16]}…)")
    return 0


@deploy._command
def cmd_aggregate(args: argparse.Namespace) -> int:
    output = deploy._binary_output(args.output, "hh aggregate")
    deploy._check_output(args, args.spec, *args.inputs)
    protocol = load_protocol(args.spec)
    deploy._check_distinct(args.inputs)
    total = protocol.aggregator()
    for path in args.inputs:
        part = load_input(path, protocol, args.on_invalid)
        try:
            total.merge(part)
        except DuplicateBatchError as exc:
            raise CliError(f"{path!r}: {deploy._one_line(exc)}") from None
    deploy._write_file(output, total.to_bytes(), args.force)
    deploy._done("hh aggregate", f"wrote {output!r}: n = {total.n} reports in "
                                 f"{len(total.batches)} batch(es)"
                                 f"{deploy._dropped_note(total.dropped)}")
    return 0


def _answer(args: argparse.Namespace, command: str, identify: bool) -> int:
    deploy._check_output(args, args.spec, args.input, args.candidates)
    protocol = load_protocol(args.spec)
    aggregator = load_input(args.input, protocol, args.on_invalid)
    candidates = (load_items(args.candidates, args.ints) if args.candidates is not None
                  else None)
    try:
        found = (aggregator.identify(args.top, candidates) if identify
                 else aggregator.estimate(candidates))
    except (ValueError, TypeError, OverflowError) as exc:
        raise CliError(deploy._one_line(exc)) from None
    where = deploy._write_text(args.output, _csv(found), args.force)
    deploy._done(command, f"{len(found)} item(s) from n = {aggregator.n} reports; wrote them "
                          f"to {where}")
    return 0


@deploy._command
def cmd_identify(args: argparse.Namespace) -> int:
    return _answer(args, "hh identify", identify=True)


@deploy._command
def cmd_estimate(args: argparse.Namespace) -> int:
    return _answer(args, "hh estimate", identify=False)


def register(subparsers: Any) -> None:
    """Add ``hh`` (with spec, privatize, aggregate, identify, estimate) to the parser."""
    force_help = ("replace an existing output file (without it an existing output is "
                  "refused); an output that is one of the inputs is refused even so")
    ints_help = "items are unsigned 64-bit integers, one per line (default: UTF-8 strings)"
    hh = subparsers.add_parser(
        "hh", help="heavy hitters: frequent items out of a huge domain (strings)",
        description="Heavy-hitter protocols (ldpdist.heavy_hitters): spec, privatize, "
                    "aggregate, identify, estimate.")
    commands = hh.add_subparsers(dest="hh_command", metavar="COMMAND", required=True)

    p = commands.add_parser("spec", help="write a heavy-hitter protocol's spec (JSON)",
                            description="Write the JSON spec of a heavy-hitter protocol.")
    p.add_argument("protocol", metavar="PROTOCOL",
                   help=f"protocol name, case-insensitive ({', '.join(sorted(protocols()))})")
    p.add_argument("--epsilon", type=float, required=True, help="privacy parameter (> 0)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="another parameter of the protocol (e.g. --set top=16 --set bits=48); "
                        "repeatable; values are JSON (numbers) or text")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output file (default, or '-': standard output)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_spec)

    p = commands.add_parser(
        "privatize", help="privatize items into a reports file",
        description="Privatize one item per user. ITEMS: UTF-8 text, one item per line.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist hh spec)")
    p.add_argument("items", metavar="ITEMS", help="items file, one item per line")
    p.add_argument("--ints", action="store_true", help=ints_help)
    p.add_argument("--seed", type=int, default=None,
                   help="seed for reproducible reports (default: OS entropy)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="reports file to write")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_privatize)

    p = commands.add_parser(
        "aggregate", help="aggregate reports files and/or merge state files",
        description="Add reports files and merge state files into one state. A file of "
                    "another spec, a corrupt file, or a batch already counted is refused.")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec JSON (ldpdist hh spec)")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="reports files or state files")
    p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                   help="malformed reports: fail (default) or drop and count them")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="state file to write")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(handler=cmd_aggregate)

    for name, handler, text in (
            ("identify", cmd_identify, "the frequent items, largest first (CSV: rank, item, "
                                       "hash, estimate, standard_error)"),
            ("estimate", cmd_estimate, "the frequencies of given candidate items, in their "
                                       "order (same CSV)")):
        p = commands.add_parser(name, help=text, description=f"Write {text}.")
        p.add_argument("--spec", required=True, metavar="SPEC",
                       help="spec JSON (ldpdist hh spec)")
        p.add_argument("input", metavar="INPUT", help="state file or reports file")
        if name == "identify":
            p.add_argument("--top", type=int, default=None,
                           help="how many items (default: the protocol's top)")
            p.add_argument("--candidates", metavar="FILE", default=None,
                           help="a dictionary of possible items, one per line: the items found "
                                "are named (needed by the sketch protocols)")
        else:
            p.add_argument("--candidates", metavar="FILE", required=True,
                           help="the items to estimate, one per line")
        p.add_argument("--ints", action="store_true", help=ints_help)
        p.add_argument("--on-invalid", choices=("raise", "drop"), default="raise",
                       help="for a reports INPUT: malformed reports fail (default) or are "
                            "dropped")
        p.add_argument("-o", "--output", metavar="FILE",
                       help="output CSV (default, or '-': standard output)")
        p.add_argument("--force", action="store_true", help=force_help)
        p.set_defaults(handler=handler)
