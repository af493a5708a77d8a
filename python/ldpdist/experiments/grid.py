"""Grid points, presets (named grids) and the runner: one CSV row per (point, mechanism,
decoder); see :mod:`ldpdist.experiments`."""

from __future__ import annotations

import os
import sys
import time
import zlib
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..mechanisms import SHORT_NAMES
from .distributions import distribution_label, make_distribution, parse_distribution, support_for_mass

COLUMNS = ("mechanism", "decoder", "distribution", "k", "m", "sparsity", "epsilon", "n", "run",
           "l1", "l2", "seconds", "path")
# short name -> class name; the CSV and the plots use the short (upper-case) names
_MECHANISMS = SHORT_NAMES
_LABELS = {"rr": "RR", "rappor": "RAPPOR", "ss": "SS", "hr": "HR", "oue": "OUE", "olh": "OLH",
           "cp": "CP"}


def mechanism_key(name: str) -> str:
    """``"rr"`` for ``"RR"``, ``"rr"``, ``"RandomizedResponse"`` …; ValueError otherwise."""
    key = str(name).strip().lower()
    for short, cls in _MECHANISMS.items():
        if key in (short, cls.lower()):
            return short
    known = ", ".join(_MECHANISMS)
    raise ValueError(f"unknown mechanism {name!r} (known: {known}, or the class names)")


@dataclass(frozen=True)
class Point:
    """One grid point: every mechanism/decoder pair estimates the same sampled users."""

    distribution: str
    k: int
    epsilon: float
    n: int
    run: int
    mechanisms: Tuple[Tuple[str, Tuple[str, ...]], ...]  # (short name, decoders)
    m: Optional[int] = None          # CP's report count
    sparsity: Optional[int] = None   # CP's s; None: from the distribution and ``mass``
    mass: float = 0.99
    path: str = "simulate"           # or "privatize"


def make_points(mechanisms: Sequence[Tuple[str, Sequence[str]]], distributions: Sequence[str],
                ks: Sequence[int], epsilons: Sequence[float], ns: Sequence[int], runs: int,
                m: Optional[int] = None, sparsity: Optional[int] = None, mass: float = 0.99,
                path: str = "simulate") -> List[Point]:
    """All points of a grid, run-major (an interrupted grid has whole runs first)."""
    mechs = tuple((mechanism_key(name), tuple(decoders)) for name, decoders in mechanisms)
    points = []
    for run in range(runs):
        for k in ks:
            for epsilon in epsilons:
                for dist in distributions:
                    for n in ns:
                        points.append(Point(dist, int(k), float(epsilon), int(n), run, mechs,
                                            m, sparsity, mass, path))
    return points


def _seed_int(*entropy: int) -> int:
    """A 128-bit integer seed from a SeedSequence."""
    words = np.random.SeedSequence(list(entropy)).generate_state(4, dtype=np.uint32)
    return sum(int(w) << (32 * j) for j, w in enumerate(words))


def build_mechanism(name: str, k: int, epsilon: float, m: Optional[int], seed: int):
    import ldpdist

    key = mechanism_key(name)
    cls = getattr(ldpdist, _MECHANISMS[key])
    if key == "cp":
        if m is None:
            raise ValueError("compressive privatization (cp) needs m (--m)")
        return cls(k, epsilon, m, seed)
    if key == "olh":
        return cls(k, epsilon, seed=seed % 2**63)
    return cls(k, epsilon)


def _privatized_aggregate(mech, counts: np.ndarray, seed: int) -> Tuple[Any, float]:
    """Privatize the users value by value in chunks; returns the aggregator and the time
    spent aggregating (``Aggregator.add``), privatization excluded."""
    values = np.repeat(np.arange(mech.k, dtype=np.uint32), counts.astype(np.int64))
    per_report = max(1, -(-mech.output_size // 8)) if mech.report_kind == "bits" else 4
    chunk = max(1 << 12, (1 << 26) // per_report)
    aggregator = mech.aggregator()
    spent = 0.0
    for c, start in enumerate(range(0, values.size, chunk)):
        reports = mech.privatize(values[start:start + chunk], seed=_seed_int(seed, c))
        t0 = time.perf_counter()
        aggregator.add(reports)
        spent += time.perf_counter() - t0
    return aggregator, spent


def run_point(point: Point, seed: int, index: int) -> List[Dict[str, Any]]:
    """The CSV rows of one point (seeded from (seed, index); see the module docstring)."""
    place_rng = np.random.default_rng(
        [seed, point.run, zlib.crc32(point.distribution.encode()), point.k])
    p = make_distribution(point.distribution, point.k, place_rng)
    rng = np.random.default_rng([seed, index])
    counts = rng.multinomial(point.n, p).astype(np.uint64)
    label = distribution_label(point.distribution)
    rows = []
    for j, (name, decoders) in enumerate(point.mechanisms):
        options: Dict[str, Any] = {}
        m = point.m if name == "cp" else None
        if name == "cp" or any(d == "sparse_project" for d in decoders):
            kind, param = parse_distribution(point.distribution)
            s = point.sparsity
            if s is None:
                s = param if kind == "unif" else support_for_mass(p, point.mass)
            if name == "cp" and m is not None:
                s = min(s, m - 1)
            options["sparsity"] = int(min(s, point.k))
        mech = build_mechanism(name, point.k, point.epsilon, m, _seed_int(seed, point.run, 1))
        mech_seed = _seed_int(seed, index, 2, j)
        t0 = time.perf_counter()
        if point.path == "privatize":
            aggregator, shared = _privatized_aggregate(mech, counts, mech_seed)
        else:
            aggregator = mech.simulate(counts, seed=mech_seed)
            shared = time.perf_counter() - t0
        for decoder in decoders:
            # CP's OMP uses s whatever the decoder; other mechanisms only in sparse_project
            uses_sparsity = name == "cp" or decoder == "sparse_project"
            decoder_options = options if uses_sparsity else {}
            t1 = time.perf_counter()
            estimate = aggregator.estimate(decoder, **decoder_options)
            seconds = shared + time.perf_counter() - t1
            error = estimate - p
            rows.append({
                "mechanism": _LABELS[name], "decoder": decoder, "distribution": label,
                "k": point.k, "m": m if m is not None else "",
                "sparsity": options["sparsity"] if uses_sparsity else "",
                "epsilon": point.epsilon,
                "n": point.n, "run": point.run, "l1": float(np.abs(error).sum()),
                "l2": float(np.sqrt(np.dot(error, error))), "seconds": seconds,
                "path": point.path,
            })
    return rows


def _run_indexed(args: Tuple[Point, int, int]) -> Tuple[int, List[Dict[str, Any]]]:
    point, seed, index = args
    return index, run_point(point, seed, index)


def _init_worker(threads: int) -> None:
    # the Rust thread pool starts lazily, at the first parallel call: this is in time
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


class Interrupted(Exception):
    """Raised by :func:`run_grid` on KeyboardInterrupt; ``rows`` holds the finished points."""

    def __init__(self, rows: List[Dict[str, Any]], done: int, total: int):
        super().__init__(f"interrupted after {done} of {total} points")
        self.rows, self.done, self.total = rows, done, total


def run_grid(points: Sequence[Point], seed: int = 0, jobs: int = 1, progress: bool = False,
             description: str = "points") -> List[Dict[str, Any]]:
    """Run every point; rows in point order whatever ``jobs``.

    ``jobs > 1`` uses a process pool (spawned workers, each with ``cpu_count // jobs`` Rust
    threads). On KeyboardInterrupt raises :class:`Interrupted` carrying the finished rows.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    results: Dict[int, List[Dict[str, Any]]] = {}
    bar = _progress(len(points), progress, description)
    tasks = [(point, seed, i) for i, point in enumerate(points)]
    try:
        if jobs == 1:
            for task in tasks:
                index, rows = _run_indexed(task)
                results[index] = rows
                bar.update(1)
        else:
            import concurrent.futures as cf
            import multiprocessing

            threads = max(1, (os.cpu_count() or 1) // jobs)
            pool = cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                          initializer=_init_worker, initargs=(threads,))
            try:
                futures = [pool.submit(_run_indexed, task) for task in tasks]
                for future in cf.as_completed(futures):
                    index, rows = future.result()
                    results[index] = rows
                    bar.update(1)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
    except KeyboardInterrupt:
        bar.close()
        raise Interrupted(_ordered(results), len(results), len(points)) from None
    bar.close()
    return _ordered(results)


def _ordered(results: Dict[int, List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    return [row for index in sorted(results) for row in results[index]]


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool, description: str):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return _NoBar()
    return tqdm(total=total, desc=description, unit="pt", disable=not sys.stderr.isatty())





@dataclass(frozen=True)
class Preset:
    """A named grid. ``quick_*`` / ``tiny_*`` shrink it (``--quick``; ``--tiny`` is a testing
    aid finishing in seconds, not a meaningful experiment)."""

    description: str
    mechanisms: Tuple[Tuple[str, Tuple[str, ...]], ...]
    distributions: Tuple[str, ...]
    ks: Tuple[int, ...]
    epsilons: Tuple[float, ...]
    ns: Tuple[int, ...]
    runs: int
    metric: str                      # "l1", "l2" or "seconds"
    m: Optional[int] = None
    mass: float = 0.99               # CP's s on non-uniform distributions (module docstring)
    path: str = "simulate"
    quick_ns: Tuple[int, ...] = ()
    quick_runs: int = 3
    tiny_ks: Tuple[int, ...] = (1000,)
    tiny_ns: Tuple[int, ...] = (2000, 20000)
    tiny_m: Optional[int] = None
    notes: str = ""
    log_x: bool = True               # n on a log axis

    def grid(self, quick: bool = False, tiny: bool = False,
             runs: Optional[int] = None) -> "Preset":
        """This preset shrunk by ``--quick`` / ``--tiny``, with ``runs`` if given."""
        preset = self
        if quick or tiny:
            preset = replace(preset, ns=self.quick_ns or self.ns, runs=self.quick_runs)
        if tiny:
            preset = replace(preset, ks=self.tiny_ks, ns=self.tiny_ns, runs=1,
                             m=self.tiny_m if self.tiny_m is not None else self.m)
        if runs is not None:
            preset = replace(preset, runs=runs)
        return preset

    def points(self) -> List[Point]:
        return make_points(self.mechanisms, self.distributions, self.ks, self.epsilons,
                           self.ns, self.runs, m=self.m, mass=self.mass, path=self.path)
