"""The performance table (docs/generated/performance.md) in one run: each path timed in ldpdist, in a numpy (or named)
peer doing the same job, and against a hardware bound on the same bytes (a single read, or
a write/copy of the output).

    python3 benches/performance_table.py            # every row (~3 min on 2 cores)
    python3 benches/performance_table.py --quick    # fewer repeats, smaller sizes
    python3 benches/performance_table.py --figure   # also time `ldpdist reproduce cp-figure2`
                                                    # (--quick, then the full preset, --jobs 2)
    python3 benches/performance_table.py --markdown docs/generated/performance.md
                                                    # also write the table as a Markdown
                                                    # fragment, with the machine facts
                                                    # (python docs/generate.py does this)

Sizes are stated per row; rates (reports/s, GB/s) make rows comparable with larger
sizes that would not fit in memory alongside a peer. Times are medians of
``--repeats`` calls (the first call of each path is a warm-up and not counted). Every peer's
result is checked against ldpdist's where they compute the same thing (counts, projection,
transform). Run on an idle machine: everything here is bandwidth- or core-bound.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Optional, Tuple

import numpy as np

import ldpdist
from ldpdist import kernels
from ldpdist.mechanisms import (CompressivePrivatization, HadamardResponse, OptimizedLocalHashing,
                                OptimizedUnaryEncoding, RAPPOR, RandomizedResponse,
                                SubsetSelection)

try:
    import pyfwht
except ImportError:  # optional peer
    pyfwht = None

Row = Tuple[str, str, float, str, Optional[float], str, Optional[float]]


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: page faults, thread-pool start, caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def read_bound(data: np.ndarray, repeats: int) -> float:
    """One sequential read of every byte: numpy's max over a uint64 view (one core)."""
    flat = data.reshape(-1)
    view = flat[: flat.size // 8 * 8].view(np.uint64)
    return median_time(lambda: view.max(), repeats)


def write_bound(nbytes: int, repeats: int) -> float:
    """Writing ``nbytes`` of output into an allocated buffer (one core)."""
    out = np.empty(nbytes, dtype=np.uint8)
    return median_time(lambda: out.fill(1), repeats)


def fmt(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def in_one_thread(code: str) -> float:
    """Seconds printed by ``code`` run in a fresh interpreter with one rayon thread."""
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def bit_vector_rows(args: argparse.Namespace) -> List[Row]:
    rows: List[Row] = []
    k, eps = 10_000, 1.0
    rng = np.random.default_rng(1)
    n_priv = 20_000 if args.quick else 200_000
    values = rng.integers(0, k, n_priv)
    peer_n = 5_000 if args.quick else 20_000
    # The noise probability b of a bit j ≠ x (the peer does not round it toward privacy).
    for cls, b in ((RAPPOR, 1.0 / (np.exp(eps / 2) + 1.0)),
                   (OptimizedUnaryEncoding, 1.0 / (np.exp(eps) + 1.0))):
        mech = cls(k=k, epsilon=eps)
        t = median_time(lambda: mech.privatize(values, seed=3), args.repeats)

        def numpy_unary(v=values[:peer_n], b=b):
            bits = rng.random((v.size, k)) < b
            bits[np.arange(v.size), v] = rng.random(v.size) < 0.5
            return np.packbits(bits, axis=1)

        t_peer = median_time(numpy_unary, max(1, args.repeats // 2)) * n_priv / peer_n
        t_bound = write_bound(n_priv * ((k + 7) // 8), args.repeats)
        rows.append((f"{cls.__name__} privatize, k = 10^4", f"{n_priv:,} users "
                     f"({n_priv / t / 1e6:.2f} M users/s)", t,
                     "numpy `random < b`, packbits (scaled from fewer users)", t_peer,
                     "writing the output bytes", t_bound))
    ss = SubsetSelection(k=k, epsilon=eps)
    n_ss = n_priv // 2
    t = median_time(lambda: ss.privatize(values[:n_ss], seed=3), args.repeats)

    def numpy_subsets(v=values[:peer_n // 4], d=ss.to_dict()['d']):
        keys = rng.random((v.size, k))
        chosen = np.argpartition(keys, d, axis=1)[:, :d]
        bits = np.zeros((v.size, k), dtype=bool)
        np.put_along_axis(bits, chosen, True, axis=1)
        return np.packbits(bits, axis=1)

    t_peer = median_time(numpy_subsets, max(1, args.repeats // 2)) * n_ss / (peer_n // 4)
    rows.append(("SubsetSelection privatize, k = 10^4", f"{n_ss:,} users "
                 f"({n_ss / t / 1e6:.3f} M users/s)", t,
                 "numpy argpartition of random keys (scaled; ignores x)", t_peer,
                 "writing the output bytes", write_bound(n_ss * ((k + 7) // 8), args.repeats)))

    # Aggregation: counts of packed rows, against np.unpackbits(...).sum(0) and one read.
    n_agg = 200_000 if args.quick else 2_000_000
    rappor = RAPPOR(k=k, epsilon=eps)
    reports = np.empty((n_agg, (k + 7) // 8), dtype=np.uint8)
    step = 200_000
    for start in range(0, n_agg, step):
        stop = min(n_agg, start + step)
        reports[start:stop] = rappor.privatize(rng.integers(0, k, stop - start), seed=start)

    declared = rappor.as_reports(reports)  # a view: reports made here, declared as RAPPOR's

    def aggregate():
        agg = rappor.aggregator()
        agg.add(declared)
        return agg

    t = median_time(aggregate, args.repeats)
    sub = reports[: n_agg // 20]
    t_peer = median_time(lambda: np.unpackbits(sub, axis=1, count=k).sum(0, dtype=np.int64),
                         max(1, args.repeats // 2)) * 20
    check = reports[:50_000]
    assert np.array_equal(aggregate_counts(rappor, check),
                          np.unpackbits(check, axis=1, count=k).sum(0)), "counts differ"
    gb = reports.nbytes / 1e9
    rows.append(("RAPPOR aggregate, k = 10^4", f"{n_agg:,} reports, {gb:.2f} GB "
                 f"({gb / t:.1f} GB/s)", t, "numpy unpackbits + sum (scaled)", t_peer,
                 "one read of the bytes (numpy max)", read_bound(reports, args.repeats)))

    # Simulation: SS's exact scan against RAPPOR's per-bit binomials, n = 10^6.
    counts = rng.multinomial(1_000_000, np.full(k, 1.0 / k)).astype(np.uint64)
    ss_half = SubsetSelection(k=k, epsilon=0.5)
    t = median_time(lambda: ss_half.simulate(counts, seed=1), args.repeats)
    t_rappor = median_time(lambda: RAPPOR(k=k, epsilon=0.5).simulate(counts, seed=1),
                           args.repeats)
    rows.append(("SubsetSelection exact simulate, k = 10^4, ε = 0.5", "n = 10^6, uniform", t,
                 "RAPPOR simulate (independent per-bit binomials)", t_rappor, "—", None))
    return rows


def aggregate_counts(mech, reports: np.ndarray) -> np.ndarray:
    agg = mech.aggregator()
    agg.add(mech.as_reports(reports))
    return agg.counts


def kernel_rows(args: argparse.Namespace) -> List[Row]:
    rows: List[Row] = []
    rng = np.random.default_rng(2)
    for k in ((10**6,) if args.quick else (10**6, 10**7)):
        families = {
            "random": rng.random(k),
            "near-uniform": 1.0 / k + rng.normal(0.0, 1.0 / k, k),
            "few large": np.concatenate([rng.random(10) * 10, rng.normal(0.0, 1e-3, k - 10)]),
        }
        for family, v in families.items():
            t = median_time(lambda: kernels.project_simplex(v), args.repeats)

            def numpy_projection(v=v):
                u = np.sort(v)[::-1]
                css = np.cumsum(u) - 1.0
                rho = np.nonzero(u * np.arange(1, v.size + 1) > css)[0][-1]
                return np.maximum(v - css[rho] / (rho + 1.0), 0.0)

            t_peer = median_time(numpy_projection, max(1, args.repeats // 2))
            assert np.allclose(kernels.project_simplex(v), numpy_projection(), atol=1e-12)
            rows.append((f"project_simplex, {family}", f"k = 10^{len(str(k)) - 1}", t,
                         "numpy sort-based (sort, cumsum)", t_peer, "one read (numpy max)",
                         read_bound(v, args.repeats)))
    for j in (16, 20):
        n = 1 << j
        x = rng.random(n)
        buf = x.copy()

        def ours():
            buf[:] = x
            kernels.fwht_inplace(buf)

        t = median_time(ours, args.repeats * 3) - median_time(lambda: buf.__setitem__(
            slice(None), x), args.repeats * 3)
        peer_name, t_peer = "pyfwht not installed", None
        if pyfwht is not None:
            best = None
            for backend in ("cpu", "openmp", "auto"):
                member = getattr(pyfwht.Backend, backend.upper(), None)
                if member is None:
                    continue
                try:
                    def theirs(member=member):
                        buf[:] = x
                        pyfwht.transform(buf, backend=member)
                    tb = median_time(theirs, args.repeats * 3) - median_time(
                        lambda: buf.__setitem__(slice(None), x), args.repeats * 3)
                except Exception:  # a backend that cannot run here
                    continue
                if best is None or tb < best[1]:
                    best = (backend, tb)
            if best is not None:
                peer_name, t_peer = f"pyfwht transform, best backend ({best[0]})", best[1]
        rows.append(("fwht (in place, f64)", f"n = 2^{j}", t, peer_name, t_peer,
                     "one copy of the array", median_time(lambda: buf.__setitem__(
                         slice(None), x), args.repeats * 3)))
    return rows


def index_mechanism_rows(args: argparse.Namespace) -> List[Row]:
    rows: List[Row] = []
    k, n = 10_000, (10**6 if args.quick else 10**7)
    values = np.random.default_rng(3).integers(0, k, n).astype(np.uint32)
    hr = HadamardResponse(k=k, epsilon=1.0)
    t_hr = median_time(lambda: hr.privatize(values, seed=1), args.repeats)
    rr = RandomizedResponse(k=k, epsilon=1.0)
    t_rr = median_time(lambda: rr.privatize(values, seed=1), args.repeats)
    olh = OptimizedLocalHashing(k=k, epsilon=1.0)
    t = median_time(lambda: olh.privatize(values, seed=1), args.repeats)
    rows.append(("OLH privatize, k = 10^4, ε = 1", f"{n:,} ({n / t / 1e6:.1f} M/s)", t,
                 f"HR privatize, same values ({n / t_hr / 1e6:.1f} M/s)", t_hr,
                 "—", None))
    cp = CompressivePrivatization(k=k, epsilon=0.5, m=500, seed=1)
    cp.privatize(values[:k], seed=0)
    t = median_time(lambda: cp.privatize(values, seed=1), args.repeats)
    rows.append(("CP privatize, k = 10^4, m = 500", f"{n:,} ({n / t / 1e6:.1f} M/s)", t,
                 f"RR privatize, same values ({n / t_rr / 1e6:.1f} M/s)", t_rr, "—", None))
    # simulate at large k: two threads (this process) against one (a fresh process).
    big = 1 << 22
    code_counts = ("import numpy as np; c = np.random.default_rng(4).multinomial(10**6, "
                   f"np.full({big}, 1.0 / {big})).astype(np.uint64)")
    counts = np.random.default_rng(4).multinomial(10**6, np.full(big, 1.0 / big)).astype(
        np.uint64)
    for name, ctor in (("HR", "HadamardResponse"), ("RR", "RandomizedResponse"),
                       ("OLH", "OptimizedLocalHashing")):
        mech = getattr(ldpdist.mechanisms, ctor)(k=big, epsilon=1.0)
        t = median_time(lambda: mech.simulate(counts, seed=1), args.repeats)
        code = (f"{code_counts}; import time, statistics, ldpdist.mechanisms as M; "
                f"m = M.{ctor}(k={big}, epsilon=1.0); m.simulate(c, seed=1); ts = []\n"
                f"for _ in range({args.repeats}):\n"
                f"    t0 = time.perf_counter(); m.simulate(c, seed=1); "
                f"ts.append(time.perf_counter() - t0)\n"
                f"print(statistics.median(ts))")
        rows.append((f"{name} simulate, k = 2^22, 2 threads", "n = 10^6", t,
                     "the same on 1 thread", in_one_thread(code), "—", None))
    hr24 = HadamardResponse(k=1 << 24, epsilon=1.0)
    counts24 = np.random.default_rng(5).multinomial(10**6, np.full(1 << 24, 2.0**-24)).astype(
        np.uint64)
    agg = hr24.simulate(counts24, seed=1)
    t = median_time(lambda: agg.estimate("raw"), args.repeats)
    rows.append(("HR raw estimate from counts, k = 2^24", "two FWHTs + the loop over k", t,
                 "—", None, "—", None))
    return rows


def figure_rows(args: argparse.Namespace) -> List[Row]:
    rows: List[Row] = []
    with tempfile.TemporaryDirectory() as out:
        for label, extra in (("--quick", ["--quick"]), ("full, --jobs 2", ["--jobs", "2"])):
            t0 = time.perf_counter()
            subprocess.run(["ldpdist", "reproduce", "cp-figure2", *extra, "--out", out],
                           check=True, capture_output=True)
            rows.append((f"cp-figure2 {label}", "wall time, CSV + PNG",
                         time.perf_counter() - t0, "—", None, "—", None))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls (default 5, "
                        "3 with --quick)")
    parser.add_argument("--figure", action="store_true",
                        help="also time `ldpdist reproduce cp-figure2` (quick and full)")
    parser.add_argument("--markdown", metavar="PATH",
                        help="also write the table to PATH as a Markdown fragment, with an "
                             "italic line saying how and where it was measured")
    args = parser.parse_args()
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    rows = bit_vector_rows(args) + kernel_rows(args) + index_mechanism_rows(args)
    if args.figure:
        rows += figure_rows(args)
    print(f"ldpdist {ldpdist.__version__}, numpy {np.__version__}, {os.cpu_count()} cores; "
          f"medians of {args.repeats}")
    lines = ["| path | size | ldpdist | peer | peer time | bound | bound time |",
             "| --- | --- | ---: | --- | ---: | --- | ---: |"]
    for path, size, t, peer, t_peer, bound, t_bound in rows:
        lines.append(f"| {path} | {size} | {fmt(t)} | {peer} | {fmt(t_peer)} | {bound} | "
                     f"{fmt(t_bound)} |")
    print("\n".join(lines))
    if args.markdown:
        write_markdown(args, lines)


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform reports."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_markdown(args: argparse.Namespace, lines: List[str]) -> None:
    """The table and one italic line: the command, the repeats, the machine, the date."""
    import datetime
    import platform

    options = " --quick" * args.quick + " --figure" * args.figure
    peer = f", pyfwht {pyfwht.__version__}" if getattr(pyfwht, "__version__", None) else ""
    caption = (f"*`python3 benches/performance_table.py{options}`: medians of {args.repeats} "
               f"timed calls after a warm-up; {cpu_model()}, {os.cpu_count()} cores, "
               f"{datetime.date.today().isoformat()}; ldpdist {ldpdist.__version__}, numpy "
               f"{np.__version__}{peer}, Python {platform.python_version()}.*")
    with open(args.markdown, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n\n" + caption + "\n")


if __name__ == "__main__":
    main()
