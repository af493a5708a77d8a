"""Experiment commands: ``ldpdist reproduce PRESET`` and ``ldpdist simulate``.

Both run a grid of *points* — one (k, ε, distribution, n, run) each, at which every listed
mechanism estimates the distribution with every listed decoder — and write one CSV row per
(point, mechanism, decoder) plus a PNG of the error (or time) against n.

CSV columns: ``mechanism, decoder, distribution, k, m, sparsity, epsilon, n, run, l1, l2,
seconds, path``. ``m`` is CP's report count and ``sparsity`` the s given to CP's OMP or to the
``sparse_project`` decoder (both empty when unused). ``l1``/``l2`` are ‖p̂ − p‖ against the
true distribution p. ``epsilon`` is empty for public-coin hashing (``pch``, not private;
its message length is ``--bits``, in the title). ``path`` says how the aggregate was
produced (for ``pch``, ``simulate`` is exact under ideal, fully independent hash functions,
not for the pairwise-independent family that ``privatize`` uses):

* ``simulate`` — ``mechanism.simulate(true_counts, seed)``, the aggregate of privatizing the
  users, exact in distribution (no per-user report is stored). ``seconds`` is the wall time
  of ``simulate`` plus that decoder's ``estimate``.
* ``privatize`` — real per-user reports from ``privatize`` (in chunks, to bound memory),
  aggregated and decoded. ``seconds`` is the server's time only: ``Aggregator.add`` of all
  chunks plus ``estimate`` (privatization is not counted).

Distributions (``--dist``): ``geo:λ`` is p_i ∝ (1−λ)^i λ over i < k, ``zipf:a`` is
p_i ∝ (i+1)^(−a); both are placed on a random permutation of [0, k) drawn per run (the
papers do not say where the mass sits; a random placement favours no mechanism's structure).
``unif:s`` is uniform on a random support of size s drawn per run. ``path.npy`` is a fixed
1-D float array summing to 1 (it sets k). Within a run the placement is the same for every n
and ε, so the curves of one run are comparable.

Compressive privatization (CP) needs the sparsity s given to OMP: for ``unif:s`` it is s,
otherwise the smallest support holding ``mass`` of the probability (preset parameter, 0.99 by
default). The paper asks for top-s mass ≥ 0.9; s at 90% leaves a 4–10% tail that is an error
floor (CP lands near projected HR on Geo), while 99% also satisfies the paper's condition and
measured 2–3× below HR (README, "Compressive privatization"). The public matrix seed of CP
is drawn per run.

Reproducibility: point i of a grid draws its counts and mechanism seeds from
``SeedSequence([seed, i])``, and the distribution from (seed, run, distribution, k), so the
results do not depend on ``--jobs`` (nor on the thread count: seeded sampling is
bit-identical whatever the number of threads).

Python API: :data:`PRESETS`, :func:`preset_points`, :func:`make_points`, :func:`run_grid`,
:func:`write_csv`, :func:`read_csv`, :func:`plot` (:func:`figure` returns its Figure).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import textwrap
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .errors import CliError
from .decoders import DECODERS, SPARSE_DECODERS, TWO_STAGE_DECODERS
from .mechanisms import SHORT_NAMES

COLUMNS = ("mechanism", "decoder", "distribution", "k", "m", "sparsity", "epsilon", "n", "run",
           "l1", "l2", "seconds", "path")
ALL_DECODERS = DECODERS + TWO_STAGE_DECODERS

# short name -> class name; the CSV and the plots use the short (upper-case) names
_MECHANISMS = SHORT_NAMES
_LABELS = {"rr": "RR", "rappor": "RAPPOR", "ss": "SS", "hr": "HR", "oue": "OUE", "olh": "OLH",
           "cp": "CP", "pch": "PCH"}


def mechanism_key(name: str) -> str:
    """``"rr"`` for ``"RR"``, ``"rr"``, ``"RandomizedResponse"`` …; ValueError otherwise."""
    key = str(name).strip().lower()
    for short, cls in _MECHANISMS.items():
        if key in (short, cls.lower()):
            return short
    known = ", ".join(_MECHANISMS)
    raise ValueError(f"unknown mechanism {name!r} (known: {known}, or the class names)")


# -- distributions ----------------------------------------------------------------------


def _float_param(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"bad {what} parameter {text!r} (expected a number)") from None
    if not math.isfinite(value):
        raise ValueError(f"bad {what} parameter {text!r} (expected a finite number)")
    return value


def parse_distribution(spec: str) -> Tuple[str, Any]:
    """Validate a ``--dist`` spec; returns (kind, parameter). For a .npy file the parameter
    is the loaded, checked array."""
    spec = str(spec).strip()
    if spec.lower().endswith(".npy"):
        return "file", load_distribution(spec)
    kind, sep, param = spec.partition(":")
    kind = kind.lower()
    if not sep or kind not in ("geo", "unif", "zipf"):
        raise ValueError(f"unknown distribution {spec!r} (expected geo:LAMBDA, unif:S, "
                         "zipf:A or a path to a .npy file)")
    if kind == "geo":
        lam = _float_param(param, "geo")
        if not 0 < lam < 1:
            raise ValueError(f"geo:LAMBDA needs 0 < LAMBDA < 1, got {param}")
        return kind, lam
    if kind == "zipf":
        a = _float_param(param, "zipf")
        if a <= 0:
            raise ValueError(f"zipf:A needs A > 0, got {param}")
        return kind, a
    try:
        s = int(param)
    except ValueError:
        raise ValueError(f"unif:S needs an integer support size, got {param!r}") from None
    if s < 1:
        raise ValueError(f"unif:S needs S >= 1, got {s}")
    return kind, s


def load_distribution(path: str) -> np.ndarray:
    """A .npy distribution: 1-D, float, finite, nonnegative, summing to 1 within 1e-9."""
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"distribution file {path!r} not found") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read distribution file {path!r}: {exc}") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        raise ValueError(f"{path}: a distribution must be a float array, got dtype "
                         f"{getattr(array, 'dtype', type(array).__name__)}")
    if array.ndim != 1 or array.size < 2:
        raise ValueError(f"{path}: a distribution must be 1-D with at least 2 entries, got "
                         f"shape {array.shape}")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{path}: the distribution has non-finite entries")
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise ValueError(f"{path}: the distribution has negative entries (p[{i}] = {array[i]})")
    total = float(array.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"{path}: the distribution sums to {total!r}, not 1 (within 1e-9)")
    return array


def distribution_label(spec: str) -> str:
    kind, param = parse_distribution(spec)
    if kind == "file":
        return os.path.basename(spec)
    name = {"geo": "Geo", "unif": "Unif", "zipf": "Zipf"}[kind]
    return f"{name}({param:g})" if kind != "unif" else f"Unif({param})"


def make_distribution(spec: str, k: int, rng: np.random.Generator) -> np.ndarray:
    """The probability vector of ``spec`` over [0, k), placed with ``rng`` (see the module
    docstring)."""
    kind, param = parse_distribution(spec)
    if kind == "file":
        if param.size != k:
            raise ValueError(f"{spec} has {param.size} entries but k = {k}")
        return param
    if kind == "unif":
        if param > k:
            raise ValueError(f"unif:{param} needs a support of at most k = {k}")
        p = np.zeros(k)
        p[rng.choice(k, size=param, replace=False)] = 1.0 / param
        return p
    i = np.arange(k, dtype=np.float64)
    if kind == "geo":
        # (1-λ)^i λ, computed in logs so that large k does not underflow to NaN
        weights = np.exp(i * math.log1p(-param))
    else:
        weights = (i + 1.0) ** (-param)
    base = weights / weights.sum()
    p = np.empty(k)
    p[rng.permutation(k)] = base
    return p


def support_for_mass(p: np.ndarray, mass: float) -> int:
    """Smallest s such that the s largest entries of p hold at least ``mass``."""
    ordered = np.sort(p)[::-1]
    s = int(np.searchsorted(np.cumsum(ordered), mass - 1e-12) + 1)
    return max(1, min(s, int(np.count_nonzero(p))))


# -- grid points ------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One grid point: every mechanism/decoder pair estimates the same sampled users."""

    distribution: str
    k: int
    epsilon: Optional[float]         # None for a mechanism without ε (pch)
    n: int
    run: int
    mechanisms: Tuple[Tuple[str, Tuple[str, ...]], ...]  # (short name, decoders)
    m: Optional[int] = None          # CP's report count
    sparsity: Optional[int] = None   # CP's s; None: from the distribution and ``mass``
    mass: float = 0.99
    path: str = "simulate"           # or "privatize"
    bits: Optional[int] = None       # pch's message length ℓ


def make_points(mechanisms: Sequence[Tuple[str, Sequence[str]]], distributions: Sequence[str],
                ks: Sequence[int], epsilons: Sequence[float], ns: Sequence[int], runs: int,
                m: Optional[int] = None, sparsity: Optional[int] = None, mass: float = 0.99,
                path: str = "simulate", bits: Optional[int] = None) -> List[Point]:
    """All points of a grid, run-major (an interrupted grid has whole runs first)."""
    mechs = tuple((mechanism_key(name), tuple(decoders)) for name, decoders in mechanisms)
    points = []
    for run in range(runs):
        for k in ks:
            for epsilon in epsilons:
                for dist in distributions:
                    for n in ns:
                        eps = None if epsilon is None else float(epsilon)
                        points.append(Point(dist, int(k), eps, int(n), run, mechs,
                                            m, sparsity, mass, path, bits))
    return points


def _seed_int(*entropy: int) -> int:
    """A 128-bit integer seed from a SeedSequence."""
    words = np.random.SeedSequence(list(entropy)).generate_state(4, dtype=np.uint32)
    return sum(int(w) << (32 * j) for j, w in enumerate(words))


def build_mechanism(name: str, k: int, epsilon: Optional[float], m: Optional[int], seed: int,
                    bits: Optional[int] = None):
    import ldpdist

    key = mechanism_key(name)
    cls = getattr(ldpdist, _MECHANISMS[key])
    if key == "pch":
        if bits is None:
            raise ValueError("public-coin hashing (pch) needs bits (--bits)")
        return cls(k, bits, seed)
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
    for j, (name, decoders) in enumerate(point.mechanisms):
        options: Dict[str, Any] = {}
        m = point.m if name == "cp" else None
        if name == "cp" or any(d in SPARSE_DECODERS for d in decoders):
            kind, param = parse_distribution(point.distribution)
            s = point.sparsity
            if s is None:
                s = param if kind == "unif" else support_for_mass(p, point.mass)
            if name == "cp" and m is not None:
                s = min(s, m - 1)
            options["sparsity"] = int(min(s, point.k))
        mech = build_mechanism(name, point.k, point.epsilon, m, _seed_int(seed, point.run, 1),
                               point.bits)
        mech_seed = _seed_int(seed, index, 2, j)
        t0 = time.perf_counter()
        if point.path == "privatize":
            aggregator, shared = _privatized_aggregate(mech, counts, mech_seed)
        else:
            aggregator = mech.simulate(counts, seed=mech_seed)
            shared = time.perf_counter() - t0
        for decoder in decoders:
            # CP's OMP uses s whatever the decoder; other mechanisms only in the sparse decoders
            uses_sparsity = name == "cp" or decoder in SPARSE_DECODERS
            decoder_options = options if uses_sparsity else {}
            t1 = time.perf_counter()
            estimate = aggregator.estimate(decoder, **decoder_options)
            seconds = shared + time.perf_counter() - t1
            error = estimate - p
            rows.append({
                "mechanism": _LABELS[name], "decoder": decoder, "distribution": label,
                "k": point.k, "m": m if m is not None else "",
                "sparsity": options["sparsity"] if uses_sparsity else "",
                "epsilon": point.epsilon if point.epsilon is not None else "",
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


# -- presets ----------------------------------------------------------------------------

_BASELINES = ("rr", "rappor", "ss", "hr")
_BOTH = ("normalize", "project")


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


_CP_NS = tuple(range(50_000, 1_000_001, 50_000))
_CP_QUICK_NS = (50_000, 350_000, 650_000, 1_000_000)
_CP_DISTS = ("geo:0.8", "geo:0.6", "unif:10", "unif:25")

PRESETS: Dict[str, Preset] = {
    "cp-figure2": Preset(
        description="Compressive privatization, Figure 2: l1 error vs n; CP (projected) "
                    "against RR, RAPPOR, SS, HR with the normalized and projected decoders",
        mechanisms=tuple((b, _BOTH) for b in _BASELINES) + (("cp", ("project",)),),
        distributions=_CP_DISTS, ks=(10_000,), epsilons=(0.5,), ns=_CP_NS, runs=10,
        metric="l1", m=500, quick_ns=_CP_QUICK_NS, tiny_m=100),
    "cp-figure3": Preset(
        description="Compressive privatization, Figure 3: as Figure 2 with CP's normalized "
                    "decoder, for eps in {0.25, 0.5, 1.0} (our choice: the paper's values are "
                    "not in its text)",
        mechanisms=tuple((b, _BOTH) for b in _BASELINES) + (("cp", ("normalize",)),),
        distributions=_CP_DISTS, ks=(10_000,), epsilons=(0.25, 0.5, 1.0), ns=_CP_NS,
        runs=10, metric="l1", m=500, quick_ns=(50_000, 500_000, 1_000_000), quick_runs=2,
        tiny_m=100, notes="ε values are ours: not in the paper's text"),
    "hr-l2": Preset(
        description="Hadamard response slides: l2 error vs n, k = 1000, Geo(0.8), projected "
                    "decoder, eps in {0.5, 2, 5, 7}",
        mechanisms=tuple((b, ("project",)) for b in _BASELINES), distributions=("geo:0.8",),
        ks=(1000,), epsilons=(0.5, 2.0, 5.0, 7.0),
        ns=(1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000),
        runs=10, metric="l2", quick_ns=(1000, 10_000, 100_000, 1_000_000),
        tiny_ns=(1000, 20_000)),
    "hr-time": Preset(
        description="Hadamard response slides: decoding time (aggregation of real reports + "
                    "projected estimate) vs n, Geo(0.8), eps = 1",
        mechanisms=tuple((b, ("project",)) for b in _BASELINES), distributions=("geo:0.8",),
        ks=(100, 1000, 5000, 10_000), epsilons=(1.0,),
        ns=(10_000, 30_000, 100_000, 300_000, 1_000_000), runs=3, metric="seconds",
        path="privatize", quick_ns=(10_000, 30_000, 100_000, 300_000), quick_runs=2,
        tiny_ks=(100, 1000), tiny_ns=(2000, 20000),
        notes="eps = 1 is our choice (the slides' value is not in the notes)"),
}


# -- output -----------------------------------------------------------------------------


def write_csv(rows: Iterable[Dict[str, Any]], path: str) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: (repr(value) if isinstance(value, float) else value)
                             for key, value in row.items()})


def read_csv(path: str) -> List[Dict[str, Any]]:
    """Rows of :func:`write_csv`, with numbers converted back (a CSV written before the
    ``sparsity`` column existed reads with an empty one)."""
    out = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            for key in ("k", "n", "run"):
                row[key] = int(row[key])
            row["m"] = int(row["m"]) if row["m"] else ""
            row["sparsity"] = int(row["sparsity"]) if row.get("sparsity") else ""
            row["epsilon"] = float(row["epsilon"]) if row["epsilon"] else ""
            for key in ("l1", "l2", "seconds"):
                row[key] = float(row[key])
            out.append(row)
    return out


_METRIC_LABEL = {"l1": "ℓ1 error", "l2": "ℓ2 error", "seconds": "decoding time (s)"}

# The worst error between two distributions: ‖p̂ − p‖₁ ≤ 2 and ‖p̂ − p‖₂ ≤ √2, reached when
# p̂ and p have disjoint supports. A curve near it means the estimate is worthless.
_WORST_ERROR = {"l1": (2.0, "largest possible ℓ1 error (2)"),
                "l2": (math.sqrt(2.0), "largest possible ℓ2 error (√2)")}

# One look per mechanism (colour, marker) and per decoder (line style, filled marker) in
# every figure, so that a curve is recognised across panels and presets. Markers differ per
# mechanism and line styles per decoder: curves that coincide (the normalized decoders all
# sit near ℓ1 = 1.9 on the CP grid) stay distinguishable without colour, and hollow markers
# let coinciding ones show through each other.
_MECHANISM_LOOK = {"RR": ("tab:blue", "o"), "RAPPOR": ("tab:orange", "s"),
                   "SS": ("tab:green", "^"), "HR": ("tab:red", "D"),
                   "OUE": ("tab:brown", "v"), "OLH": ("tab:pink", "P"),
                   "CP": ("tab:purple", "*")}
_SPARE_LOOKS = (("tab:gray", "X"), ("tab:olive", "h"), ("tab:cyan", "<"), ("black", ">"))
_DECODER_LOOK = {"project": ("-", True), "normalize": ("--", False), "ibu": ("-.", True),
                 "sparse_project": (":", True), "raw": (":", False)}


def _series_look(mechanism: str, decoder: str, spare: Dict[str, Tuple[str, str]]
                 ) -> Dict[str, Any]:
    """Keyword arguments of ``Axes.plot`` for one (mechanism, decoder) series."""
    if mechanism not in _MECHANISM_LOOK and mechanism not in spare:
        spare[mechanism] = _SPARE_LOOKS[len(spare) % len(_SPARE_LOOKS)]
    color, marker = _MECHANISM_LOOK.get(mechanism) or spare[mechanism]
    linestyle, filled = _DECODER_LOOK.get(decoder, ("-.", False))
    size = 9 if marker == "*" else 6
    return dict(color=color, marker=marker, linestyle=linestyle, markersize=size,
                markerfacecolor=color if filled else "none", markeredgewidth=1.2,
                linewidth=1.4)


def _runs_text(counts: Iterable[int]) -> str:
    counts = sorted(set(counts)) or [0]
    low, high = counts[0], counts[-1]
    number = f"{low}" if low == high else f"{low}–{high}"
    return f"{number} run{'s' if high != 1 else ''}"


def _sparsity_text(values: Iterable[Any]) -> str:
    values = sorted({int(v) for v in values if v != ""})
    if not values:
        return ""
    return f"{values[0]}" if len(values) == 1 else f"{values[0]}–{values[-1]}"


def _count_label(value: float, _position: Any = None) -> str:
    """50000 -> '50k', 1000000 -> '1M' (tick labels of the n axis)."""
    for unit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= unit:
            return f"{value / unit:g}{suffix}"
    return f"{value:g}"


def figure(rows: Sequence[Dict[str, Any]], metric: str = "l1", title: Optional[str] = None,
           log_x: Optional[bool] = True):
    """The matplotlib Figure that :func:`plot` saves (see there)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if metric not in _METRIC_LABEL:
        raise ValueError(f"metric must be one of {tuple(_METRIC_LABEL)}, got {metric!r}")
    log_x = True if log_x is None else bool(log_x)
    if not rows:
        raise ValueError("no rows to plot")
    dist_order = list(dict.fromkeys(row["distribution"] for row in rows))
    panels: Dict[Tuple, List[Dict[str, Any]]] = {}
    for row in rows:
        key = (row["epsilon"], row["k"], dist_order.index(row["distribution"]))
        panels.setdefault(key, []).append(row)
    keys = sorted(panels)
    count = len(keys)
    ncols = len(dist_order) if len(dist_order) > 1 else min(4, count)
    ncols = max(1, min(ncols, count))
    nrows = -(-count // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.5 * nrows + 1.3),
                             squeeze=False, sharey=True)
    series_order = list(dict.fromkeys((row["mechanism"], row["decoder"]) for row in rows))
    spare: Dict[str, Tuple[str, str]] = {}
    looks = {series: _series_look(*series, spare) for series in series_order}
    sparsity = {series: _sparsity_text(row.get("sparsity", "") for row in rows
                                       if (row["mechanism"], row["decoder"]) == series)
                for series in series_order}
    worst = _WORST_ERROR.get(metric)
    if worst is not None and any(row["decoder"] == "raw" for row in rows):
        # raw estimates are not distributions: their error is not bounded by this
        worst = (worst[0], worst[1].replace("largest possible", "largest") +
                 " for a distribution; raw estimates can exceed it")
    run_counts: List[int] = []
    lows: List[float] = []
    highs: List[float] = []
    ns_all = sorted({row["n"] for row in rows})
    for slot, key in enumerate(keys):
        ax = axes[slot // ncols][slot % ncols]
        prow = panels[key]
        for series in series_order:
            data: Dict[int, List[float]] = {}
            for row in prow:
                if (row["mechanism"], row["decoder"]) == series:
                    # log axes: a zero error (or time) is drawn at the smallest positive float
                    data.setdefault(row["n"], []).append(max(float(row[metric]), 1e-300))
            if not data:
                continue
            ns = sorted(data)
            mean = np.array([np.mean(data[n]) for n in ns])
            low = np.array([np.min(data[n]) for n in ns])
            high = np.array([np.max(data[n]) for n in ns])
            run_counts.extend(len(data[n]) for n in ns)
            lows.append(float(low.min()))
            highs.append(float(high.max()))
            label = f"{series[0]} ({series[1]})"
            s_text = _sparsity_text(row.get("sparsity", "") for row in prow
                                    if (row["mechanism"], row["decoder"]) == series)
            if s_text:
                label += f", s = {s_text}"
            look = looks[series]
            zorder = 3 if series[0] == "CP" else 2
            ax.plot(ns, mean, label=label, zorder=zorder, **look)
            ax.fill_between(ns, low, high, color=look["color"], alpha=0.15, linewidth=0,
                            label=f"band of {label}", zorder=1)
        if worst is not None:
            ax.axhline(worst[0], linestyle="--", color="0.3", linewidth=1.0, label=worst[1],
                       zorder=1.5)
        sample = prow[0]
        heading = f"{sample['distribution']}: k = {sample['k']}"
        if sample["epsilon"] != "":
            heading += f", ε = {sample['epsilon']:g}"
        extra = []
        m_text = _sparsity_text(row["m"] for row in prow if row["mechanism"] == "CP")
        s_text = _sparsity_text(row.get("sparsity", "") for row in prow
                                if row["mechanism"] == "CP")
        if m_text:
            extra.append(f"m = {m_text}")
        if s_text:
            extra.append(f"s = {s_text}")
        if extra:
            heading += "\nCP: " + ", ".join(extra)
        else:
            s_text = _sparsity_text(row.get("sparsity", "") for row in prow)
            if s_text:
                used = sorted({row["decoder"] for row in prow if row.get("sparsity", "") != ""})
                heading += f"\n{', '.join(used)}: s = {s_text}"
        ax.set_title(heading, fontsize=10)
        ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log")
            decades = math.log10(max(ns_all) / min(ns_all)) if min(ns_all) > 0 else 0
            subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
            ax.xaxis.set_major_formatter(FuncFormatter(_count_label))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("n (users)")
        if slot % ncols == 0:
            ax.set_ylabel(_METRIC_LABEL[metric])
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
    for slot in range(count, nrows * ncols):
        axes[slot // ncols][slot % ncols].set_visible(False)
    # one y range for every panel (sharey), from the data and the worst-error line
    low = min(lows)
    high = max(highs + ([worst[0]] if worst is not None else []))
    axes[0][0].set_ylim(low / 1.6, high * 1.6)

    runs = _runs_text(run_counts)
    # the legend is filled column by column: one column per mechanism (its decoders one
    # under the other), then the reference entries
    mechanisms = list(dict.fromkeys(mechanism for mechanism, _ in series_order))
    legend_rows = max(sum(1 for series in series_order if series[0] == mechanism)
                      for mechanism in mechanisms)
    handles: List[Any] = []
    labels: List[str] = []
    for mechanism in mechanisms:
        column = 0
        for series in series_order:
            if series[0] != mechanism:
                continue
            label = f"{series[0]} ({series[1]})"
            if sparsity[series]:
                per_panel = {_sparsity_text(row.get("sparsity", "") for row in prow
                                            if (row["mechanism"], row["decoder"]) == series)
                             for prow in panels.values()} - {""}
                label += (", s as in panel titles" if len(per_panel) > 1
                          else f", s = {sparsity[series]}")
            handles.append(Line2D([], [], **looks[series]))
            labels.append(label)
            column += 1
        for _ in range(column, legend_rows):
            handles.append(Line2D([], [], linestyle="none", marker="none"))
            labels.append("")
    if worst is not None:
        handles.append(Line2D([], [], linestyle="--", color="0.3", linewidth=1.0))
        labels.append(worst[1])
    handles.append(Line2D([], [], color="0.45", linewidth=1.4))
    labels.append(f"line: mean over {runs}")
    handles.append(Patch(facecolor="0.45", alpha=0.3, linewidth=0))
    labels.append(f"band: min–max over {runs}")
    legend_cols = -(-len(handles) // legend_rows)
    while True:
        legend = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.005),
                            ncol=legend_cols, fontsize=9, frameon=False)
        fig.canvas.draw()
        if legend_cols == 1 or legend.get_window_extent().width <= 0.98 * fig.bbox.width:
            break
        legend.remove()  # too wide for a narrow figure: fewer columns
        legend_cols -= 1
    heading = title or f"{_METRIC_LABEL[metric]} vs n"
    caption = f"line: mean over {runs}; band: min–max over the runs"
    width = int(fig.get_figwidth() * 12)  # characters of the 11-point title per line
    fig.suptitle(textwrap.fill(heading, width) + "\n" + caption, fontsize=11)
    fig.canvas.draw()
    legend_height = legend.get_window_extent().height / fig.bbox.height
    fig.tight_layout(rect=(0, legend_height + 0.01, 1, 1))
    return fig


def plot(rows: Sequence[Dict[str, Any]], path: str, metric: str = "l1",
         title: Optional[str] = None, log_x: Optional[bool] = True) -> None:
    """Save the error (or time) vs n of ``rows`` as a PNG.

    One panel per (ε, k, distribution), all with the same y range (log); one curve per
    (mechanism, decoder) with the same colour, marker and line style in every panel; the
    line is the mean over runs and the shaded band spans their minimum and maximum (the
    legend says so). n is on a log axis (``log_x=False`` for a linear one; None, the
    former "automatic" value, means log). For ℓ1 (ℓ2) a
    dashed line marks 2 (√2), the largest possible error of a distribution estimate. The s
    given to CP (or to sparse_project) is in the curve's label and the panel title.
    """
    import matplotlib.pyplot as plt

    fig = figure(rows, metric=metric, title=title, log_x=log_x)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- the commands -----------------------------------------------------------------------


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


def _execute(points: List[Point], name: str, out: str, seed: int, jobs: int, metric: str,
             title: str, log_x: bool = True) -> int:
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
    if rows:
        plot(rows, png_path, metric=metric, title=title, log_x=log_x)
    elapsed = time.perf_counter() - start
    if interrupted is not None:
        saved = f"partial results in {csv_path}" + (f" and {png_path}" if rows else "")
        print(f"ldpdist {name}: interrupted after {interrupted.done} of {interrupted.total} "
              f"points; {saved}", file=sys.stderr)
        return 130
    print(f"wrote {csv_path} ({len(rows)} rows) and {png_path} in {elapsed:.1f} s")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    if args.preset not in PRESETS:
        raise CliError(f"unknown preset {args.preset!r} (known: {', '.join(PRESETS)})")
    runs = _int(args.runs, "--runs") if args.runs is not None else None
    jobs = _int(args.jobs, "--jobs")
    seed = _int(args.seed, "--seed", minimum=0)
    preset = PRESETS[args.preset].grid(quick=args.quick, tiny=args.tiny, runs=runs)
    eps = ", ".join(f"{e:g}" for e in preset.epsilons)
    ks = ", ".join(str(k) for k in preset.ks)
    title = (f"{args.preset}: {_METRIC_LABEL[preset.metric]} vs n — k = {ks}"
             + (f", m = {preset.m}" if preset.m else "") + f", ε = {eps}"
             + (f" ({preset.notes})" if preset.notes else "")
             + (" [tiny: test grid]" if args.tiny else " [quick]" if args.quick else ""))
    return _execute(preset.points(), args.preset, args.out, seed, jobs, preset.metric, title,
                    preset.log_x)


def _simulate(args: argparse.Namespace) -> int:
    mechanisms = [mechanism_key(name) for name in _split(args.mechanism)]
    decoders = _split(args.decoder)
    for decoder in decoders:
        if decoder not in ALL_DECODERS:
            raise CliError(f"unknown decoder {decoder!r} (known: {', '.join(ALL_DECODERS)})")
    import ldpdist

    classes = {name: getattr(ldpdist, _MECHANISMS[name]) for name in mechanisms}
    for name, cls in classes.items():
        missing = [d for d in decoders if d not in cls.decoders]
        if missing:
            raise CliError(f"decoder {missing[0]!r} is not available for {name} (it has: "
                           f"{', '.join(cls.decoders)})")
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
    if "cp" not in mechanisms and "pch" not in mechanisms and args.sparsity is not None:
        raise CliError("--sparsity applies only to cp (CompressivePrivatization) and pch "
                       "(PublicCoinHashing), which are not among --mechanism")
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
    points = make_points([(name, decoders) for name in mechanisms], dists, [k], epsilons, ns,
                         runs, m=m, sparsity=sparsity, mass=mass, path="simulate", bits=bits)
    title = (f"simulate: {_METRIC_LABEL[args.metric]} vs n — k = {k}"
             + (f", m = {m}" if m else "")
             + (", ε = " + ", ".join(f"{e:g}" for e in epsilons) if private
                else f", ℓ = {bits} bits (not private)"))
    return _execute(points, args.name, args.out, seed, jobs, args.metric, title)


def register(subparsers: Any) -> None:
    """Add ``reproduce`` and ``simulate`` to the ``ldpdist`` command."""
    listing = "; ".join(f"{name}: {preset.description}" for name, preset in PRESETS.items())
    rep = subparsers.add_parser(
        "reproduce", help="rerun a paper's experiment (CSV + PNG)",
        description=f"Rerun a preset experiment. Presets — {listing}.")
    rep.add_argument("preset", help=f"one of: {', '.join(PRESETS)}")
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
                     help="comma-separated: rr, rappor, ss, hr, oue, olh, cp, pch (or class "
                          "names)")
    sim.add_argument("--dist", required=True,
                     help="geo:LAMBDA, unif:S, zipf:A (comma-separated) or a .npy file")
    sim.add_argument("--k", help="number of values (set by a .npy distribution)")
    sim.add_argument("--epsilon", help="comma-separated ε values (required, except for pch)")
    sim.add_argument("--bits", help="pch: bits per message ℓ (required for pch)")
    sim.add_argument("--n", required=True, help="comma-separated numbers of users")
    sim.add_argument("--runs", default="5", help="runs per point (default 5)")
    sim.add_argument("--m", help="reports of cp (required for cp)")
    sim.add_argument("--sparsity", help="cp's / pch's s (default: S of unif:S, else the support "
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
