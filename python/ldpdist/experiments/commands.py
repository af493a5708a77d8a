"""The commands ``ldpdist reproduce PRESET`` and ``ldpdist simulate``."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any, List

from ..decoders import ALL_DECODERS, SPARSE_DECODERS
from ..mechanisms import SHORT_NAMES
from ..errors import CliError
from ..specs import registered
from . import context_aware, frequency_consistency, heavy_hitters, linear_queries
from .distributions import parse_distribution
from .grid import Interrupted, Point, make_points, mechanism_key, run_grid, split_decoder
from .plotting import _METRIC_LABEL, plot
from .presets import PRESETS
from .results import write_csv

def _int(text: Any, what: str, minimum: int = 1) -> int:
    try:
        value = int(str(text).replace("_", ""))
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            raise CliError(f"{what} must be an integer, got {text!r}") from None
        if not as_float.is_integer():
            raise CliError(f"{what} must be an integer, got {text!r}") from None
        value = int(as_float)
    if value < minimum:
        raise CliError(f"{what} must be >= {minimum}, got {value}")
    return value


def _float(text: Any, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise CliError(f"{what} must be a finite number > 0, got {text!r}")
    return value


def _split(text: str) -> List[str]:
    items = [item.strip() for item in str(text).split(",")]
    if not all(items):
        raise CliError(f"empty item in the list {text!r}")
    return items


def _prepare_out(out: str) -> str:
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create output directory {out!r}: "
                       f"{exc.strerror or exc}") from None
    probe = os.path.join(out, f".ldpdist-write-test-{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise CliError(f"output directory {out!r} is not writable: "
                       f"{exc.strerror or exc}") from None
    return out


# Presets with a figure of their own (``Preset.figure``): (rows, png path, title) -> text
# printed after the paths (the extra files it wrote, a summary)
_FIGURES = {"context_aware": context_aware.plot}


def _execute(points: List[Point], name: str, out: str, seed: int, jobs: int, metric: str,
             title: str, log_x: bool = True, x: str = "n", custom: str = "") -> int:
    out = _prepare_out(out)
    csv_path = os.path.join(out, f"{name}.csv")
    png_path = os.path.join(out, f"{name}.png")
    start = time.perf_counter()
    interrupted = None
    try:
        rows = run_grid(points, seed=seed, jobs=jobs, progress=True, description=name)
    except Interrupted as exc:
        rows, interrupted = exc.rows, exc
    write_csv(rows, csv_path)
    summary = ""
    if rows and custom:
        summary = _FIGURES[custom](rows, png_path, title=title)
    elif rows:
        plot(rows, png_path, metric=metric, title=title, log_x=log_x, x=x)
    elapsed = time.perf_counter() - start
    if interrupted is not None:
        saved = f"partial results in {csv_path}" + (f" and {png_path}" if rows else "")
        print(f"ldpdist {name}: interrupted after {interrupted.done} of {interrupted.total} "
              f"points; {saved}", file=sys.stderr)
        return 130
    print(f"wrote {csv_path} ({len(rows)} rows) and {png_path} in {elapsed:.1f} s")
    if summary:
        print(summary)
    return 0


# Presets that are not a grid of distribution-estimation points: name -> (description, runner)
STUDIES = {"linear-queries": (linear_queries.DESCRIPTION, linear_queries.run),
           "consistency": (frequency_consistency.DESCRIPTION, frequency_consistency.run),
           "heavy-hitters": (heavy_hitters.DESCRIPTION, heavy_hitters.run)}


def _run_study(name: str, args: argparse.Namespace, runs: Any, seed: int) -> int:
    _, runner = STUDIES[name]
    out = _prepare_out(args.out)
    start = time.perf_counter()
    try:
        csv_path, png_path, rows, summary = runner(out, quick=args.quick, tiny=args.tiny,
                                                   runs=runs, seed=seed)
    except KeyboardInterrupt:
        print(f"ldpdist {name}: interrupted; nothing written", file=sys.stderr)
        return 130
    print(f"wrote {csv_path} ({len(rows)} rows) and {png_path} in "
          f"{time.perf_counter() - start:.1f} s")
    if summary:
        print(summary)
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    if args.preset not in PRESETS and args.preset not in STUDIES:
        raise CliError(f"unknown preset {args.preset!r} (known: "
                       f"{', '.join([*PRESETS, *STUDIES])})")
    runs = _int(args.runs, "--runs") if args.runs is not None else None
    jobs = _int(args.jobs, "--jobs")
    seed = _int(args.seed, "--seed", minimum=0)
    if args.preset in STUDIES:
        return _run_study(args.preset, args, runs, seed)
    preset = PRESETS[args.preset].grid(quick=args.quick, tiny=args.tiny, runs=runs)
    eps = ", ".join(f"{e:g}" for e in preset.epsilons if e is not None)
    ks = ", ".join(str(k) for k in preset.ks)
    title = (f"{args.preset}: {_METRIC_LABEL[preset.metric]} vs {preset.x} — k = {ks}"
             + (f", m = {preset.m}" if preset.m else "") + (f", ε = {eps}" if eps else "")
             + (f" ({preset.notes})" if preset.notes else "")
             + (" [tiny: test grid]" if args.tiny else " [quick]" if args.quick else ""))
    return _execute(preset.points(), args.preset, args.out, seed, jobs, preset.metric, title,
                    preset.log_x, preset.x, preset.figure)


def _simulate(args: argparse.Namespace) -> int:
    mechanisms = [mechanism_key(name) for name in _split(args.mechanism)]
    decoders = _split(args.decoder)
    for decoder in decoders:
        if split_decoder(decoder)[0] not in ALL_DECODERS:
            raise CliError(f"unknown decoder {decoder!r} (known: {', '.join(ALL_DECODERS)})")
    import ldpdist

    classes = {name: getattr(ldpdist, SHORT_NAMES[name]) for name in mechanisms}
    for name, cls in classes.items():
        missing = [d for d in decoders if split_decoder(d)[0] not in cls.decoders]
        if missing:
            raise CliError(f"decoder {missing[0]!r} is not available for {name} (it has: "
                           f"{', '.join(cls.decoders)})")
    budgeted = [name for name, cls in classes.items() if cls.context_aware]
    if budgeted:
        raise CliError(f"{', '.join(budgeted)} takes a budget matrix (context-aware LDP), not "
                       "one epsilon: simulate it with the Python API (mech.simulate)")
    private = [name for name, cls in classes.items() if cls.private]
    public = [name for name, cls in classes.items() if not cls.private]
    if private and public:
        raise CliError(f"{', '.join(public)} has no epsilon (it is not private): simulate it "
                       f"in a separate run from {', '.join(private)}")
    dists = [args.dist] if os.path.isfile(args.dist) else _split(args.dist)
    k = _int(args.k, "--k", minimum=2) if args.k is not None else None
    for dist in dists:
        kind, param = parse_distribution(dist)
        if kind == "file":
            if k is not None and k != param.size:
                raise CliError(f"--k {k} disagrees with {dist} ({param.size} entries)")
            k = param.size
    if k is None:
        raise CliError("--k is required unless --dist is a .npy file")
    for dist in dists:
        kind, param = parse_distribution(dist)
        if kind == "file" and param.size != k:
            raise CliError(f"{dist} has {param.size} entries but k = {k}")
        if kind == "unif" and param > k:
            raise CliError(f"{dist} needs a support of at most k = {k}")
    if private and args.epsilon is None:
        raise CliError("--epsilon is required (comma-separated ε values)")
    if public and args.epsilon is not None:
        raise CliError(f"--epsilon does not apply to {', '.join(public)}: it is not a private "
                       "mechanism (communication-limited only)")
    if public and args.bits is None:
        raise CliError("pch needs --bits (the message length ℓ, 1 to 31)")
    if not public and args.bits is not None:
        raise CliError("--bits applies only to pch (PublicCoinHashing), which is not among "
                       "--mechanism")
    bits = _int(args.bits, "--bits") if args.bits is not None else None
    epsilons = ([_float(e, "--epsilon") for e in _split(args.epsilon)] if private
                else [None])
    ns = [_int(n, "--n") for n in _split(args.n)]
    runs = _int(args.runs, "--runs")
    jobs = _int(args.jobs, "--jobs")
    seed = _int(args.seed, "--seed", minimum=0)
    m = _int(args.m, "--m", minimum=2) if args.m is not None else None
    if "cp" not in mechanisms and args.m is not None:
        raise CliError("--m applies only to cp (CompressivePrivatization), which is not among "
                       "--mechanism")
    uses_sparsity = "cp" in mechanisms or any(
        split_decoder(d)[0] in SPARSE_DECODERS for d in decoders)
    if not uses_sparsity and args.sparsity is not None:
        raise CliError("--sparsity applies only to cp and to the sparse decoders "
                       f"({', '.join(SPARSE_DECODERS)}), none of which is requested")
    if "cp" in mechanisms:
        if m is None:
            raise CliError("cp needs --m (the number of reports, 2 <= m < k)")
        if m >= k:
            raise CliError(f"--m must be < k = {k}, got {m}")
    sparsity = _int(args.sparsity, "--sparsity") if args.sparsity is not None else None
    mass = _float(args.mass, "--mass")
    if mass > 1:
        raise CliError(f"--mass must be in (0, 1], got {args.mass}")
    if not args.name or os.sep in args.name:
        raise CliError(f"--name must be a plain file name, got {args.name!r}")
    entries = [(name, decoders, {"bits": bits} if name == "pch" else {}) for name in mechanisms]
    points = make_points(entries, dists, [k], epsilons, ns, runs, m=m, sparsity=sparsity,
                         mass=mass, path="simulate")
    title = (f"simulate: {_METRIC_LABEL[args.metric]} vs n — k = {k}"
             + (f", m = {m}" if m else "")
             + (", ε = " + ", ".join(f"{e:g}" for e in epsilons) if private
                else f", ℓ = {bits} bits (not private)"))
    return _execute(points, args.name, args.out, seed, jobs, args.metric, title)


def register(subparsers: Any) -> None:
    """Add ``reproduce`` and ``simulate`` to the ``ldpdist`` command."""
    listing = "; ".join([*(f"{name}: {preset.description}" for name, preset in PRESETS.items()),
                         *(f"{name}: {description}"
                           for name, (description, _) in STUDIES.items())])
    rep = subparsers.add_parser(
        "reproduce", help="rerun a paper's experiment (CSV + PNG)",
        description=f"Rerun a preset experiment. Presets — {listing}.")
    rep.add_argument("preset", help=f"one of: {', '.join([*PRESETS, *STUDIES])}")
    rep.add_argument("--runs", help="runs per point (default: the preset's)")
    rep.add_argument("--seed", default="0", help="master seed (default 0)")
    rep.add_argument("--out", default="ldpdist-results",
                     help="output directory (default ldpdist-results)")
    rep.add_argument("--quick", action="store_true",
                     help="fewer runs and n values (each preset in under 2 minutes)")
    rep.add_argument("--tiny", action="store_true",
                     help="testing aid: a tiny grid (small k and n, 1 run) that runs in seconds")
    rep.add_argument("--jobs", default="1", help="worker processes (default 1: inline)")
    rep.set_defaults(handler=_reproduce)

    sim = subparsers.add_parser(
        "simulate", help="error vs n for any mechanisms/distribution grid (CSV + PNG)",
        description="Simulate mechanisms on a grid (exact in distribution, via simulate).")
    sim.add_argument("--mechanism", required=True,
                     help="comma-separated short names or class names: "
                          + ", ".join(short for short, name in SHORT_NAMES.items()
                                      if not registered()[name].context_aware)
                          + " (context-aware mechanisms: the Python API)")
    sim.add_argument("--dist", required=True,
                     help="geo:LAMBDA, unif:S, zipf:A (comma-separated) or a .npy file")
    sim.add_argument("--k", help="number of values (set by a .npy distribution)")
    sim.add_argument("--epsilon", help="comma-separated ε values (required, except for pch)")
    sim.add_argument("--bits", help="pch: bits per message ℓ (required for pch)")
    sim.add_argument("--n", required=True, help="comma-separated numbers of users")
    sim.add_argument("--runs", default="5", help="runs per point (default 5)")
    sim.add_argument("--m", help="reports of cp (required for cp)")
    sim.add_argument("--sparsity", help="cp's s (default: S of unif:S, else the support "
                     "holding --mass of the probability)")
    sim.add_argument("--mass", default="0.99", type=str,
                     help="cp: see --sparsity (default 0.99)")
    sim.add_argument("--decoder", default="project",
                     help=f"comma-separated, of {', '.join(ALL_DECODERS)} (default project)")
    sim.add_argument("--metric", default="l1", choices=("l1", "l2", "seconds"),
                     help="plotted quantity (default l1; the CSV has all)")
    sim.add_argument("--seed", default="0", help="master seed (default 0)")
    sim.add_argument("--jobs", default="1", help="worker processes (default 1)")
    sim.add_argument("--out", default="ldpdist-results",
                     help="output directory (default ldpdist-results)")
    sim.add_argument("--name", default="simulate", help="file name stem (default simulate)")
    sim.set_defaults(handler=_simulate)
