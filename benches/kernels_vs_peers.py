#!/usr/bin/env python
"""Time ldpdist's kernels against peers on identical inputs.

Kernels and peers (peers are optional; a missing one is reported as skipped):

* FWHT at n = 2^16 and 2^20, unnormalized Sylvester order. Like is compared with like:
  - returning a new array: ``ldpdist.kernels.fwht`` vs ``pyfwht.compute`` (C-level copy),
    ``pyfwht.fwht`` (Python-level copy, then in place) and a vectorized numpy butterfly;
  - in place: ``ldpdist.kernels.fwht_inplace`` vs ``pyfwht.transform``.
  Every pyfwht CPU backend is timed (cpu, openmp, auto). In-place calls get a fresh copy of
  the input before each call (not timed): the transform is unnormalized, so re-transforming
  the same buffer would grow it by n every two calls.
* Simplex projection at k = 10^6 and 10^7 on three input families (``simplex_input``:
  random, near-uniform with full support, a few large entries over noise) vs the sort-based
  rule in numpy (sort, cumsum, rho, theta), with the bound beside them: one read of the input
  (``np.add.reduce``) and one copy (``v.copy()``: read, write, page faults of a new array,
  as the projection must return one). These rows are timed interleaved.
* OMP at m = 500, k = 10^4, s = 25 with y = A x + N(0, 0.01^2) noise, x 25-sparse, A a
  Rademacher ``SignMatrix``: ldpdist on the SignMatrix and on ``A.to_dense()`` (C order, and a
  Fortran-ordered copy), vs ``sklearn.linear_model.orthogonal_mp`` on the C-ordered matrix
  with default arguments (as a user would call it: sklearn then makes a Fortran copy of X on
  every call) and on a Fortran-ordered copy with ``copy_X=False`` (its fastest configuration;
  sklearn then swaps columns of that array in place, so it is restored before each call,
  untimed).

Every implementation's output is checked against ldpdist (FWHT: exactly on an
integer-valued input, and to 1e-12 relative on the timed input; projection: to 1e-12;
OMP: same support). A failed check is printed and makes the exit status 1.

Timings are medians over ``--repeats`` consecutive calls (time.perf_counter), after one
warm-up call, one implementation at a time (see ``Group``; the simplex rows interleaved).
The ratio column is ``time / reference time`` within a group, where the reference is the
ldpdist row marked "(ref)": > 1 means the reference (ldpdist) is faster.

Usage::

    python benches/kernels_vs_peers.py               # full run
    python benches/kernels_vs_peers.py --quick       # fewer repeats, largest sizes only
    python benches/kernels_vs_peers.py --csv out.csv
    python benches/kernels_vs_peers.py --only simplex    # one kernel (repeatable)
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

import ldpdist
from ldpdist import kernels as K

try:
    import pyfwht
except ImportError:  # optional peer
    pyfwht = None

try:
    import sklearn
    from sklearn.linear_model import orthogonal_mp
except ImportError:  # optional peer
    sklearn = None
    orthogonal_mp = None


# --------------------------------------------------------------------------------------
# Timing and bookkeeping


@dataclass
class Row:
    kernel: str
    size: str
    implementation: str
    median_ms: Optional[float]  # None: skipped
    ratio: Optional[float] = None
    reference: bool = False
    note: str = ""


ROWS: List[Row] = []
FAILURES: List[str] = []
SUMMARY: List[str] = []  # extra comparisons printed under the table


@dataclass
class Candidate:
    implementation: str
    fn: Optional[Callable[[], object]]  # None: skipped
    setup: Optional[Callable[[], object]] = None
    note: str = ""


class Group:
    """Implementations of one kernel at one size; the first one added is the reference.

    ``run`` times each implementation in its own block: one warm-up call, then ``repeats``
    timed calls; ``setup()`` runs before every call and is not timed. Blocks rather than
    round-robin on purpose: OpenMP and OpenBLAS worker threads keep spinning for a while
    after a call, and on a machine with few cores they would steal the CPU from the next
    implementation's threads (rayon's, or each other's); interleaving also lets one
    implementation's large temporaries (sklearn's 40 MB copy of X) evict another's data.
    """

    def __init__(self, kernel: str, size: str):
        self.kernel, self.size = kernel, size
        self.candidates: List[Candidate] = []

    def add(self, implementation: str, fn: Callable[[], object],
            setup: Optional[Callable[[], object]] = None, note: str = "") -> None:
        self.candidates.append(Candidate(implementation, fn, setup, note))

    def skip(self, implementation: str, why: str = "skipped (not installed)") -> None:
        self.candidates.append(Candidate(implementation, None, note=why))

    def run(self, repeats: int, interleaved: bool = False) -> Dict[str, float]:
        """Time every candidate, append the rows, return median ms by implementation.

        ``interleaved``: round-robin (one call of each implementation per round) instead of
        blocks, for single-threaded peers on a shared machine, so that load changes hit all
        implementations alike."""
        timed = [c for c in self.candidates if c.fn is not None]
        times: Dict[str, List[float]] = {c.implementation: [] for c in timed}

        def call(c: Candidate, keep: bool) -> None:
            if c.setup is not None:
                c.setup()
            t0 = time.perf_counter()
            c.fn()
            if keep:
                times[c.implementation].append(time.perf_counter() - t0)

        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            # One warm-up call each: first-touch page faults, thread-pool start-up, caches.
            if interleaved:
                for i in range(repeats + 1):
                    for c in timed:
                        call(c, i > 0)
            else:
                for c in timed:
                    for i in range(repeats + 1):
                        call(c, i > 0)
        finally:
            if gc_was_enabled:
                gc.enable()
        medians = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        ref = medians[timed[0].implementation] if timed else None
        for c in self.candidates:
            if c.fn is None:
                ROWS.append(Row(self.kernel, self.size, c.implementation, None, note=c.note))
                continue
            ms = medians[c.implementation]
            ROWS.append(Row(self.kernel, self.size, c.implementation, ms, ms / ref,
                            c is timed[0], c.note))
        return medians


def check(ok: bool, what: str, detail: str) -> None:
    status = "ok  " if ok else "FAIL"
    print(f"  [{status}] {what}: {detail}")
    if not ok:
        FAILURES.append(f"{what}: {detail}")


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want))), 1e-300)
    return float(np.max(np.abs(got - want))) / scale


# --------------------------------------------------------------------------------------
# FWHT


def fwht_numpy(x: np.ndarray) -> np.ndarray:
    """Unnormalized Sylvester-order FWHT, vectorized: one pair of ufunc calls per stage.

    Stage h pairs entries i and i + h within blocks of 2h (``reshape(-1, 2, h)``) and writes
    ``(a + b, a - b)`` into a second buffer; the two buffers swap roles each stage.
    """
    n = x.size
    src = np.array(x, dtype=np.float64, copy=True)
    dst = np.empty_like(src)
    h = 1
    while h < n:
        s = src.reshape(-1, 2, h)
        d = dst.reshape(-1, 2, h)
        np.add(s[:, 0], s[:, 1], out=d[:, 0])
        np.subtract(s[:, 0], s[:, 1], out=d[:, 1])
        src, dst = dst, src
        h *= 2
    return src


PYFWHT_BACKENDS = ("cpu", "openmp", "auto")


def pyfwht_backend(name: str):
    """The ``pyfwht.Backend`` member (``compute`` takes only the enum, not a string), or
    None when pyfwht cannot run a small float64 transform on that backend."""
    backend = getattr(pyfwht.Backend, name.upper())
    try:
        pyfwht.transform(np.ones(8), backend=backend)
        pyfwht.compute(np.ones(8), backend=backend)
        return backend
    except (RuntimeError, ValueError, TypeError) as exc:
        print(f"  pyfwht backend {name!r} unusable: {exc}")
        return None


def bench_fwht(n: int, repeats: int) -> None:
    size = f"n=2^{n.bit_length() - 1}"
    print(f"\nFWHT, {size}")
    rng = np.random.default_rng(1)
    x = rng.uniform(-1.0, 1.0, n)
    # Integer-valued input: every partial sum is exact, so all correct implementations of
    # the same convention (order, normalization) must agree bit for bit.
    x_int = rng.integers(-1000, 1000, n).astype(np.float64)
    want = K.fwht(x)
    want_int = K.fwht(x_int)

    # Sanity of ldpdist's own convention on a tiny case: H = Sylvester, unnormalized.
    H4 = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], float)
    check(np.array_equal(K.fwht(np.array([1.0, 2.0, 3.0, 4.0])), H4 @ [1, 2, 3, 4]),
          "ldpdist.fwht convention", "H_4 @ [1,2,3,4] (Sylvester, unnormalized)")
    buf = x.copy()
    K.fwht_inplace(buf)
    check(np.array_equal(buf, want), f"ldpdist fwht_inplace == fwht ({size})", "bitwise")

    backends = []
    if pyfwht is not None:
        backends = [(b, e) for b in PYFWHT_BACKENDS if (e := pyfwht_backend(b)) is not None]
        for b, e in backends:
            got = pyfwht.compute(x_int, backend=e)
            check(np.array_equal(got, want_int), f"pyfwht.compute[{b}] vs ldpdist ({size})",
                  "exact on integer-valued input" if np.array_equal(got, want_int)
                  else f"max |diff| {np.max(np.abs(got - want_int))}")
            for api, fn in (("compute", pyfwht.compute), ("fwht", pyfwht.fwht)):
                err = relative_error(fn(x, backend=e), want)
                check(err <= 1e-12, f"pyfwht.{api}[{b}] vs ldpdist ({size})",
                      f"max rel. diff {err:.1e}")
            buf = x.copy()
            pyfwht.transform(buf, backend=e)
            err = relative_error(buf, want)
            check(err <= 1e-12, f"pyfwht.transform[{b}] vs ldpdist ({size})",
                  f"max rel. diff {err:.1e}")
    got = fwht_numpy(x_int)
    check(np.array_equal(got, want_int), f"numpy butterfly vs ldpdist ({size})",
          "exact on integer-valued input" if np.array_equal(got, want_int)
          else f"max |diff| {np.max(np.abs(got - want_int))}")
    err = relative_error(fwht_numpy(x), want)
    check(err <= 1e-12, f"numpy butterfly vs ldpdist ({size})", f"max rel. diff {err:.1e}")

    # Returning a new array (input untouched).
    g = Group("fwht, returns new array", size)
    g.add("ldpdist.kernels.fwht", lambda: K.fwht(x))
    if pyfwht is None:
        g.skip("pyfwht.compute / pyfwht.fwht")
    for b, e in backends:
        g.add(f"pyfwht.compute(backend={b})", lambda e=e: pyfwht.compute(x, backend=e))
    for b, e in backends:
        g.add(f"pyfwht.fwht(backend={b})", lambda e=e: pyfwht.fwht(x, backend=e),
              note="x.copy() in Python, then in place")
    g.add("numpy butterfly (reshape, 2 buffers)", lambda: fwht_numpy(x))
    g.run(repeats)

    # In place: the input is refreshed before every call, outside the timed region.
    g = Group("fwht, in place", size)
    work = np.empty_like(x)
    refresh = lambda: np.copyto(work, x)  # noqa: E731
    g.add("ldpdist.kernels.fwht_inplace", lambda: K.fwht_inplace(work), refresh)
    if pyfwht is None:
        g.skip("pyfwht.transform")
    for b, e in backends:
        g.add(f"pyfwht.transform(backend={b})",
              lambda e=e: pyfwht.transform(work, backend=e), refresh)
    g.run(repeats)


# --------------------------------------------------------------------------------------
# Simplex projection


def project_simplex_numpy(v: np.ndarray) -> np.ndarray:
    """Sort-based Euclidean projection onto the simplex (Held et al. 1974; Duchi et al. 2008)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    ind = np.arange(1, v.size + 1)
    rho = np.flatnonzero(u - css / ind > 0)[-1] + 1
    theta = css[rho - 1] / rho
    return np.maximum(v - theta, 0.0)


SIMPLEX_FAMILIES = ("random", "near-uniform", "few large")


def simplex_input(family: str, k: int) -> np.ndarray:
    """The three input families of the performance table: uniform [0, 1) entries; near-uniform with full
    support, 1/k + N(0, (1/k)^2) (about 82 % of the entries in the support); ten entries in
    [1, 2) over N(0, 1e-3^2) noise."""
    rng = np.random.default_rng(3)
    if family == "random":
        return rng.uniform(0.0, 1.0, k)
    if family == "near-uniform":
        return 1.0 / k + rng.normal(0.0, 1.0 / k, k)
    v = rng.normal(0.0, 1e-3, k)
    v[rng.choice(k, 10, replace=False)] = rng.uniform(1.0, 2.0, 10)
    return v


def bench_simplex(family: str, k: int, repeats: int) -> None:
    size = f"{family}, k={k:.0e}".replace("e+0", "e")
    print(f"\nSimplex projection, {size}")
    v = simplex_input(family, k)
    p = K.project_simplex(v)
    q = project_simplex_numpy(v)
    err = float(np.max(np.abs(p - q)))
    check(err <= 1e-12, f"numpy sort-based vs ldpdist ({size})",
          f"max |diff| {err:.1e}, support {np.count_nonzero(p)} / {k}, sum {p.sum():.15f}")

    # numpy's sort is single-threaded: calls are interleaved (see Group.run).
    g = Group("project_simplex", size)
    g.add("ldpdist.kernels.project_simplex", lambda: K.project_simplex(v))
    g.add("numpy sort-based (sort, cumsum)", lambda: project_simplex_numpy(v))
    g.add("bound: one read (np.add.reduce)", lambda: np.add.reduce(v))
    g.add("bound: one copy (v.copy())", lambda: v.copy(),
          note="a new array: read, write and first-touch page faults")
    ms = g.run(repeats, interleaved=True)
    SUMMARY.append(
        f"project_simplex ({size}): numpy / ldpdist = "
        f"{ms['numpy sort-based (sort, cumsum)'] / ms['ldpdist.kernels.project_simplex']:.1f}x; "
        f"ldpdist / one read = "
        f"{ms['ldpdist.kernels.project_simplex'] / ms['bound: one read (np.add.reduce)']:.1f}x; "
        f"ldpdist / one copy = "
        f"{ms['ldpdist.kernels.project_simplex'] / ms['bound: one copy (v.copy())']:.1f}x")


# --------------------------------------------------------------------------------------
# OMP


def bench_omp(m: int, k: int, s: int, repeats: int) -> None:
    size = f"m={m}, k={k}, s={s}"
    print(f"\nOMP, {size}")
    rng = np.random.default_rng(11)
    A = K.SignMatrix(seed=11, m=m, k=k)
    x = np.zeros(k)
    support = rng.choice(k, size=s, replace=False)
    x[support] = rng.uniform(0.5, 1.5, s) * rng.choice([-1.0, 1.0], s)
    y = A.matvec(x) + rng.normal(0.0, 0.01, m)
    dense_c = A.to_dense()
    assert dense_c.flags.c_contiguous and dense_c.dtype == np.float64
    dense_f = np.asfortranarray(dense_c)
    truth = set(support.tolist())

    def support_of(coef: np.ndarray) -> set:
        return set(np.flatnonzero(coef).tolist())

    runs = {
        "ldpdist SignMatrix": K.omp_details(A, y, s),
        "ldpdist dense C": K.omp_details(dense_c, y, s),
        "ldpdist dense F": K.omp_details(dense_f, y, s),
    }
    for name, r in runs.items():
        check(set(r.support) == truth and support_of(r.coef) == truth,
              f"{name} recovers the planted support",
              f"{len(set(r.support) & truth)}/{s} atoms, stop={r.stop}")
    ref = runs["ldpdist SignMatrix"]
    for name in ("ldpdist dense C", "ldpdist dense F"):
        diff = float(np.max(np.abs(runs[name].coef - ref.coef)))
        check(runs[name].support == ref.support and diff <= 1e-9,
              f"{name} vs ldpdist SignMatrix", f"same atom order, max |coef diff| {diff:.1e}")

    fortran_work = np.empty_like(dense_f, order="F")
    restore = lambda: np.copyto(fortran_work, dense_f)  # noqa: E731
    if orthogonal_mp is not None:
        coef = orthogonal_mp(dense_c, y, n_nonzero_coefs=s)
        diff = float(np.max(np.abs(coef - ref.coef)))
        check(support_of(coef) == set(ref.support) and diff <= 1e-8,
              "sklearn orthogonal_mp (defaults, C input) vs ldpdist",
              f"same support, max |coef diff| {diff:.1e}")
        restore()
        coef = orthogonal_mp(fortran_work, y, n_nonzero_coefs=s, copy_X=False)
        diff = float(np.max(np.abs(coef - ref.coef)))
        check(support_of(coef) == set(ref.support) and diff <= 1e-8,
              "sklearn orthogonal_mp (F copy, copy_X=False) vs ldpdist",
              f"same support, max |coef diff| {diff:.1e}")

    # The reference for the ratio is ldpdist on the same input sklearn gets by default
    # (a C-ordered float64 matrix); the SignMatrix row's ratio < 1 says how much faster the
    # packed path is.
    g = Group("omp", size)
    sign = "ldpdist omp, SignMatrix (bit-packed)"
    default = "sklearn orthogonal_mp (C input, defaults)"
    fastest = "sklearn orthogonal_mp (F copy, copy_X=False)"
    g.add("ldpdist omp, dense float64 (C order)", lambda: K.omp(dense_c, y, s))
    g.add("ldpdist omp, dense float64 (F order)", lambda: K.omp(dense_f, y, s))
    g.add(sign, lambda: K.omp(A, y, s))
    if orthogonal_mp is None:
        g.skip("sklearn.linear_model.orthogonal_mp")
        g.run(repeats)
        return
    g.add(default, lambda: orthogonal_mp(dense_c, y, n_nonzero_coefs=s),
          note="copies X to Fortran order per call")
    g.add(fastest, lambda: orthogonal_mp(fortran_work, y, n_nonzero_coefs=s, copy_X=False),
          restore, note="no copy; X restored before each call, untimed")
    ms = g.run(repeats)
    SUMMARY.append(f"omp ({size}): sklearn defaults / ldpdist SignMatrix = "
                   f"{ms[default] / ms[sign]:.1f}x; sklearn fastest (F, copy_X=False) / "
                   f"ldpdist SignMatrix = {ms[fastest] / ms[sign]:.1f}x")


# --------------------------------------------------------------------------------------
# Output


def print_table() -> None:
    print("\n| kernel | size | implementation | median ms | ratio vs ldpdist |")
    print("|---|---|---|---:|---:|")
    for r in ROWS:
        if r.median_ms is None:
            print(f"| {r.kernel} | {r.size} | {r.implementation} | {r.note} | |")
            continue
        ratio = "1.00 (ref)" if r.reference else f"{r.ratio:.2f}"
        print(f"| {r.kernel} | {r.size} | {r.implementation} | {r.median_ms:.3f} | {ratio} |")
    print("\nratio = median time / median time of the group's (ref) ldpdist row; "
          "> 1 means ldpdist (ref) is faster.")
    if pyfwht is not None:
        print("pyfwht.compute ignores its backend argument (a single-threaded C copy + "
              "transform, as of pyfwht 2.0.1).")
    for line in SUMMARY:
        print(line)
    notes = [(r.implementation, r.note) for r in ROWS if r.note and r.median_ms is not None]
    for impl, note in dict(notes).items():
        print(f"  {impl}: {note}")


def write_csv(path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "size", "implementation", "median_ms", "ratio_vs_ldpdist", "note"])
        for r in ROWS:
            w.writerow([r.kernel, r.size, r.implementation,
                        "" if r.median_ms is None else f"{r.median_ms:.6f}",
                        "" if r.ratio is None else f"{r.ratio:.4f}", r.note])
    print(f"\nwrote {path}")


def print_environment() -> None:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(f"cores: {os.cpu_count()} (usable by this process: {affinity})")
    print(f"numpy {np.__version__}")
    print(f"python {platform.python_version()} on {platform.machine()}, ldpdist {ldpdist.__version__}")
    print(f"pyfwht: {pyfwht.__version__ + (' (openmp)' if pyfwht.has_openmp() else '') if pyfwht else 'skipped (not installed)'}")
    print(f"scikit-learn: {sklearn.__version__ if sklearn else 'skipped (not installed)'}")
    for var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if var in os.environ:
            print(f"{var}={os.environ[var]}")
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            print(f"thread pool: {info.get('internal_api')} {info.get('version', '')} "
                  f"{info.get('num_threads')} threads ({info.get('architecture', '')})")
    except ImportError:
        pass


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed calls per implementation (default 21, 5 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats and only the largest FWHT size")
    parser.add_argument("--csv", metavar="PATH", help="also write the table as CSV")
    parser.add_argument("--only", choices=("fwht", "simplex", "omp"), action="append",
                        help="run only these kernels (repeatable; default: all)")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (5 if args.quick else 21)
    if repeats < 1:
        parser.error("--repeats must be at least 1")

    print_environment()
    print(f"repeats: {repeats} (median), warm-up: 1 call\n\nChecks:", end="")
    only = set(args.only or ("fwht", "simplex", "omp"))
    if "fwht" in only:
        for n in ([1 << 20] if args.quick else [1 << 16, 1 << 20]):
            bench_fwht(n, repeats)
    if "simplex" in only:
        for k in (10**6, 10**7):
            for family in SIMPLEX_FAMILIES:
                bench_simplex(family, k, repeats)
    if "omp" in only:
        bench_omp(500, 10_000, 25, repeats)

    print_table()
    if args.csv:
        write_csv(args.csv)
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED:")
        for f in FAILURES:
            print(f"  {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
