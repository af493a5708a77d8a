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

from ..decoders import SPARSE_DECODERS, chosen_sparsity
from ..mechanisms import SHORT_NAMES
from ..specs import registered, registered_labels
from .distributions import distribution_label, make_distribution, parse_distribution, support_for_mass

COLUMNS = ("mechanism", "decoder", "distribution", "k", "m", "sparsity", "support", "epsilon",
           "n", "run", "l1", "l2", "seconds", "path")
# short name -> class name; the CSV and the plots use the labels each mechanism registered
# (@register("obhr", "1-bit HR"); by default the short name in upper case)
_MECHANISMS = SHORT_NAMES
_LABELS = registered_labels()
# mechanisms without privacy (and without ε)
_NOT_PRIVATE = tuple(short for short, name in SHORT_NAMES.items()
                     if not registered()[name].private)
# the mechanism parameter shown in curve labels
_PARAMETER_LABELS = {"bits": "ℓ", "sensitive": "s", "blocks": "m"}


def mechanism_label(name: str, params: Tuple[Tuple[str, Any], ...] = ()) -> str:
    """The CSV/plot name of a mechanism with its preset parameters: ``"PCH ℓ=3"``."""
    label = _LABELS.get(name, name.upper())
    extra = " ".join(f"{_PARAMETER_LABELS.get(key, key)}={value}" for key, value in params)
    return f"{label} {extra}" if extra else label


def split_decoder(decoder: str) -> Tuple[str, bool]:
    """``"sparse_project/auto"`` -> ``("sparse_project", True)``: the decoder and whether s is
    left to the noise-level rule (:func:`ldpdist.decoders.noise_level_sparsity`)."""
    name, _, mode = decoder.partition("/")
    if mode not in ("", "auto"):
        raise ValueError(f"unknown decoder mode {decoder!r} (expected DECODER or DECODER/auto)")
    return name, mode == "auto"


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
    epsilon: Optional[float]         # None for a grid of non-private mechanisms only
    n: int
    run: int
    # (short name, decoders, parameters): decoders may be "DECODER/auto" (s by the
    # noise-level rule); parameters are extra constructor arguments, e.g. (("bits", 3),)
    mechanisms: Tuple[Tuple[str, Tuple[str, ...], Tuple[Tuple[str, Any], ...]], ...]
    m: Optional[int] = None          # CP's report count
    sparsity: Optional[int] = None   # CP's s; None: from the distribution and ``mass``
    mass: float = 0.99
    path: str = "simulate"           # or "privatize"


def _mechanism_entry(entry: Sequence[Any]):
    """(name, decoders) or (name, decoders, {parameters}) as a hashable triple."""
    name, decoders = entry[0], entry[1]
    params = entry[2] if len(entry) > 2 else {}
    for decoder in decoders:
        split_decoder(decoder)
    return mechanism_key(name), tuple(decoders), tuple(sorted(dict(params).items()))


def make_points(mechanisms: Sequence[Sequence[Any]], distributions: Sequence[str],
                ks: Sequence[int], epsilons: Sequence[Optional[float]], ns: Sequence[int],
                runs: int,
                m: Optional[int] = None, sparsity: Optional[int] = None, mass: float = 0.99,
                path: str = "simulate") -> List[Point]:
    """All points of a grid, run-major (an interrupted grid has whole runs first)."""
    mechs = tuple(_mechanism_entry(entry) for entry in mechanisms)
    points = []
    for run in range(runs):
        for k in ks:
            for epsilon in epsilons:
                for dist in distributions:
                    for n in ns:
                        points.append(Point(dist, int(k),
                                            None if epsilon is None else float(epsilon),
                                            int(n), run, mechs, m, sparsity, mass, path))
    return points


def _seed_int(*entropy: int) -> int:
    """A 128-bit integer seed from a SeedSequence."""
    words = np.random.SeedSequence(list(entropy)).generate_state(4, dtype=np.uint32)
    return sum(int(w) << (32 * j) for j, w in enumerate(words))


def equal_blocks(k: int, m: int) -> List[int]:
    """m block sizes ⌊k/m⌋ or ⌈k/m⌉ (the larger first) adding up to k."""
    base, extra = divmod(k, m)
    return [base + 1] * extra + [base] * (m - extra)


def build_mechanism(name: str, k: int, epsilon: Optional[float], m: Optional[int], seed: int,
                    params: Tuple[Tuple[str, Any], ...] = ()):
    """The mechanism a grid point runs: ``name`` (a short name such as ``"hr"``, or a class
    name) at ``k`` and ``epsilon``, with CP's ``m``, the public ``seed`` of the mechanisms
    that have one, and a preset's extra ``params``."""
    import ldpdist

    key = mechanism_key(name)
    cls = getattr(ldpdist, _MECHANISMS[key])
    if key == "pch":
        if "bits" not in dict(params):
            raise ValueError("public-coin hashing (pch) needs bits (--bits)")
        return cls(k, seed=seed % 2**63, **dict(params))
    if epsilon is None:
        raise ValueError(f"{key} needs an epsilon")
    if key == "cp":
        if m is None:
            raise ValueError("compressive privatization (cp) needs m (--m)")
        return cls(k, epsilon, m, seed)
    if key == "olh":
        return cls(k, epsilon, seed=seed % 2**63, **dict(params))
    if key in ("hlhr", "bhr"):
        # The structure is part of the mechanism: a preset gives it as a parameter, an int
        # (hlhr: the first s values are sensitive; bhr: m nearly equal blocks) or the list
        # itself (sensitive values; block sizes or labels). Generic grids have none.
        option = {"hlhr": "sensitive", "bhr": "blocks"}[key]
        if option not in dict(params):
            raise ValueError(f"{_MECHANISMS[key]} ({key}) needs its {option} (a preset "
                             "parameter): not available in a grid without them")
        value = dict(params)[option]
        if key == "hlhr":
            sensitive = np.arange(value) if isinstance(value, int) else value
            return cls(k, epsilon, sensitive=sensitive)
        blocks = equal_blocks(k, value) if isinstance(value, int) else value
        return cls(blocks, epsilon, k=k)
    return cls(k, epsilon, **dict(params))


def _privatized_aggregate(mech, counts: np.ndarray, seed: int) -> Tuple[Any, float]:
    """Privatize the users value by value in chunks; returns the aggregator and the time
    spent aggregating (``Aggregator.add``), privatization excluded."""
    values = np.repeat(np.arange(mech.k, dtype=np.uint32), counts.astype(np.int64))
    per_report = {"bits": max(1, -(-mech.output_size // 8)), "hashed": 8}.get(mech.report_kind, 4)
    chunk = max(1 << 12, (1 << 26) // per_report)
    aggregator = mech.aggregator()
    spent = 0.0
    for c, start in enumerate(range(0, values.size, chunk)):
        if mech.randomized:
            reports = mech.privatize(values[start:start + chunk], seed=_seed_int(seed, c))
        else:  # public-coin hashing: deterministic, users start, start + 1, ...
            reports = mech.privatize(values[start:start + chunk], first_user=start)
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
    support = int(np.count_nonzero(p))
    for j, (name, decoders, params) in enumerate(point.mechanisms):
        options: Dict[str, Any] = {}
        m = point.m if name == "cp" else None
        if name == "cp" or any(split_decoder(d)[0] in SPARSE_DECODERS for d in decoders):
            kind, param = parse_distribution(point.distribution)
            s = point.sparsity
            if s is None:
                s = param if kind == "unif" else support_for_mass(p, point.mass)
            if name == "cp" and m is not None:
                s = min(s, m - 1)
            options["sparsity"] = int(min(s, point.k))
        epsilon = None if name in _NOT_PRIVATE else point.epsilon
        mech = build_mechanism(name, point.k, epsilon, m, _seed_int(seed, point.run, 1), params)
        mech_seed = _seed_int(seed, index, 2, j)
        t0 = time.perf_counter()
        if point.path == "privatize":
            aggregator, shared = _privatized_aggregate(mech, counts, mech_seed)
            path = "privatize"
        else:
            aggregator = mech.simulate(counts, seed=mech_seed)
            shared = time.perf_counter() - t0
            # PCH's simulate is exact for ideal (fully independent) hashes only
            path = "simulate-ideal-hash" if name == "pch" else "simulate"
        for decoder_spec in decoders:
            decoder, auto = split_decoder(decoder_spec)
            # CP's OMP uses s whatever the decoder; other mechanisms only in the sparse ones
            uses_sparsity = name == "cp" or decoder in SPARSE_DECODERS
            kwargs = {"sparsity": options["sparsity"]} if uses_sparsity and not auto else {}
            t1 = time.perf_counter()
            estimate = aggregator.estimate(decoder, **kwargs)
            seconds = shared + time.perf_counter() - t1
            if not uses_sparsity:
                s_used: Any = ""
            elif not auto:
                s_used = options["sparsity"]
            elif name == "cp":
                s_used = len(mech.recover(aggregator.counts, aggregator.n).support)
            else:
                s_used = chosen_sparsity(mech, aggregator.counts, aggregator.n, decoder)
            error = estimate - p
            rows.append({
                "mechanism": mechanism_label(name, params), "decoder": decoder_spec,
                "distribution": label, "k": point.k, "m": m if m is not None else "",
                "sparsity": s_used, "support": support,
                "epsilon": "" if epsilon is None else epsilon,
                "n": point.n, "run": point.run, "l1": float(np.abs(error).sum()),
                "l2": float(np.sqrt(np.dot(error, error))), "seconds": seconds,
                "path": path,
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
    mechanisms: Tuple[Tuple[Any, ...], ...]  # (name, decoders[, {parameters}]), see Point
    distributions: Tuple[str, ...]
    ks: Tuple[int, ...]
    epsilons: Tuple[Optional[float], ...]   # (None,) for non-private mechanisms only
    ns: Tuple[int, ...]
    runs: int
    metric: str                      # "l1", "l2" or "seconds"
    m: Optional[int] = None
    mass: float = 0.99               # CP's s on non-uniform distributions (module docstring)
    path: str = "simulate"
    quick_ns: Tuple[int, ...] = ()
    quick_runs: int = 3
    quick_distributions: Tuple[str, ...] = ()   # default: all of them
    tiny_ks: Tuple[int, ...] = (1000,)
    tiny_ns: Tuple[int, ...] = (2000, 20000)
    tiny_m: Optional[int] = None
    tiny_distributions: Tuple[str, ...] = ()    # default: the quick ones
    notes: str = ""
    #: a figure of its own instead of the generic one ("context_aware": commands._FIGURES)
    figure: str = ""
    log_x: bool = True               # the x axis is logarithmic
    x: str = "n"                     # x axis: "n" (users) or "support" (size of p's support)

    def grid(self, quick: bool = False, tiny: bool = False,
             runs: Optional[int] = None) -> "Preset":
        """This preset shrunk by ``--quick`` / ``--tiny``, with ``runs`` if given."""
        preset = self
        if quick or tiny:
            preset = replace(preset, ns=self.quick_ns or self.ns, runs=self.quick_runs,
                             distributions=self.quick_distributions or self.distributions)
        if tiny:
            preset = replace(preset, ks=self.tiny_ks, ns=self.tiny_ns, runs=1,
                             m=self.tiny_m if self.tiny_m is not None else self.m,
                             distributions=self.tiny_distributions or preset.distributions)
        if runs is not None:
            preset = replace(preset, runs=runs)
        return preset

    def points(self) -> List[Point]:
        return make_points(self.mechanisms, self.distributions, self.ks, self.epsilons,
                           self.ns, self.runs, m=self.m, mass=self.mass, path=self.path)
