"""Accuracy of compressive privatization with the structured Hadamard matrix against the
balanced dense matrix: mean l1 error of the projected estimate, same users for both.

Each run draws one matrix seed (shared by the two mechanisms of that run), and for every
distribution and n one set of true counts, which both mechanisms privatize with the exact-in-law
``simulate`` and estimate with OMP given s (the paper's setting) and the simplex projection.
s is the support of Unif(s), and the smallest s holding 99 % of the mass for Geo(λ) (the
``cp-figure2`` rule). Prints one table row per (distribution, n) and the mean over the grid.

    python benches/structured_cp_accuracy.py                       # k = 10^4, m = 500
    python benches/structured_cp_accuracy.py --k 1048576 --m 2048 \
        --ns 200000,500000,1000000,2000000,4000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpdist import CompressivePrivatization
from ldpdist.experiments.distributions import make_distribution, support_for_mass


def sparsity_of(dist: str, p: np.ndarray) -> int:
    return int(dist.split(":")[1]) if dist.startswith("unif") else support_for_mass(p, 0.99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10_000)
    parser.add_argument("--m", type=int, default=500)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--ns", default="50000,100000,200000,500000,1000000")
    parser.add_argument("--dists", default="unif:10,unif:25,geo:0.8")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    dists = args.dists.split(",")
    errors = {(d, n, kind): [] for d in dists for n in ns for kind in ("balanced", "hadamard")}
    started = time.perf_counter()
    for run in range(args.runs):
        mechs = {kind: CompressivePrivatization(args.k, args.epsilon, args.m, seed=args.seed + run,
                                                matrix=kind)
                 for kind in ("balanced", "hadamard")}
        for d in dists:
            rng = np.random.default_rng([args.seed, run, dists.index(d)])
            p = make_distribution(d, args.k, rng)
            s = sparsity_of(d, p)
            for n in ns:
                counts = rng.multinomial(n, p)
                for kind, mech in mechs.items():
                    agg = mech.simulate(counts, seed=int(rng.integers(2**63)))
                    est = agg.estimate("project", sparsity=s)
                    errors[d, n, kind].append(float(np.abs(est - p).sum()))
        print(f"# run {run + 1}/{args.runs} done ({time.perf_counter() - started:.0f} s)",
              flush=True)
    print(f"\nk = {args.k}, m = {args.m}, epsilon = {args.epsilon}, {args.runs} runs "
          "(mean l1 error of the projected estimate)\n")
    print("| distribution | n | balanced dense | hadamard | ratio |")
    print("|---|---:|---:|---:|---:|")
    for d in dists:
        both = {kind: [] for kind in ("balanced", "hadamard")}
        for n in ns:
            b = np.mean(errors[d, n, "balanced"])
            h = np.mean(errors[d, n, "hadamard"])
            both["balanced"].append(b)
            both["hadamard"].append(h)
            print(f"| {d} | {n:,} | {b:.4f} | {h:.4f} | {h / b:.3f} |")
        b, h = np.mean(both["balanced"]), np.mean(both["hadamard"])
        print(f"| {d} | mean over n | {b:.4f} | {h:.4f} | **{h / b:.3f}** |")


if __name__ == "__main__":
    main()
