"""Time compressive privatization end to end, and the same pipeline with scikit-learn's OMP.

Pipeline (the paper's setting by default: k = 10^4, m = 500, eps = 0.5, n = 10^6, s = 25):
histogram of the reports, sparse recovery, projection onto the simplex.
* ldpdist: ``CompressivePrivatization.estimate(reports, sparsity=s)`` (bit-packed matrix,
  OMP with exact Gram updates, sort-free projection);
* peer: ``np.bincount`` + the paper's transform + ``sklearn.linear_model.orthogonal_mp`` on
  the same matrix as dense float64 + a numpy sort-based projection. For the balanced
  matrix the columns are orthogonal to the all-ones vector, so this plain OMP is the same
  estimator; both results are checked to agree.

Also prints ``privatize`` throughput and the large-universe decode (k = 10^6, m = 2000,
s = 50) with its peak memory.

Usage: ``python benches/compressive_vs_peers.py [--large]``
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

import ldpdist
from kernels_vs_peers import project_simplex_numpy
from mechanisms_vs_peers import timed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10_000)
    parser.add_argument("--m", type=int, default=500)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--s", type=int, default=25)
    parser.add_argument("--large", action="store_true", help="also k = 10^6, m = 2000, s = 50")
    args = parser.parse_args(argv)
    k, m, eps, n, s = args.k, args.m, args.epsilon, args.n, args.s

    rng = np.random.default_rng(0)
    p = np.zeros(k)
    p[rng.choice(k, s, replace=False)] = 1.0 / s
    values = rng.choice(k, size=n, p=p)
    cp = ldpdist.CompressivePrivatization(k, eps, m, seed=1)
    t, reports = timed(lambda: cp.privatize(values, seed=2), 3)
    print(f"privatize: {n / t / 1e6:.1f} M reports/s (k={k}, m={m}, from int64 values)")

    t_ours, ours = timed(lambda: cp.estimate(reports, sparsity=s), 7)
    print(f"ldpdist estimate (histogram + OMP + projection): {t_ours * 1e3:.2f} ms, "
          f"l1 error {np.abs(ours - p).sum():.4f}")
    try:
        from sklearn.linear_model import orthogonal_mp
    except ImportError:
        print("scikit-learn: skipped (not installed)")
    else:
        A = cp.sign_matrix().to_dense()
        e = np.exp(cp.internal_epsilon)

        def sklearn_pipeline():
            q = np.bincount(reports, minlength=m) / reports.size
            y = (e + 1) / (e - 1) * (m * q - 1)   # A p = y for the balanced matrix
            return project_simplex_numpy(orthogonal_mp(A, y, n_nonzero_coefs=s))

        t_peer, peer = timed(sklearn_pipeline, 7)
        print(f"numpy + scikit-learn orthogonal_mp (dense float64): {t_peer * 1e3:.2f} ms, "
              f"l1 error {np.abs(peer - p).sum():.4f}")
        print(f"speed-up {t_peer / t_ours:.1f}x; max |difference| {np.abs(peer - ours).max():.2e}")

    if args.large:
        k, m, s = 10**6, 2000, 50
        p = np.zeros(k)
        p[rng.choice(k, s, replace=False)] = rng.dirichlet(np.ones(s))
        start = time.perf_counter()
        big = ldpdist.CompressivePrivatization(k, eps, m, seed=3)
        build = time.perf_counter() - start
        agg = big.simulate(rng.multinomial(10**7, p), seed=4)
        start = time.perf_counter()
        est = agg.estimate("project", sparsity=s)
        decode = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"large universe k=1e6, m=2000, s=50, n=1e7: build {build:.2f} s, decode "
              f"{decode:.2f} s, l1 {np.abs(est - p).sum():.4f}, peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
