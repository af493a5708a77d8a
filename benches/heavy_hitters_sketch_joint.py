"""CMS/HCMS with the vocabulary as candidates: the joint estimate (collisions between the
candidates removed, ``joint=True``) against the paper's independent estimate
(``joint=False``) and the default (``joint=None``: their combination ``(1 - w) independent +
w joint`` of the smallest estimated mean squared error), on the data of the ``heavy-hitters`` preset.

Data: :mod:`ldpdist.experiments.heavy_hitters` (a vocabulary of ``--vocabulary`` random
words, Zipf(s) frequencies, n users drawing a word each; seeds as the preset's). Each
setting privatizes once, aggregates once, then identifies the top ``--top`` both ways from
the same aggregator. Reported: F1 of the top t and the ℓ1 error of the frequencies found
(means over ``--runs`` runs), the default's weight w of the joint estimate (mean), and
the CPU time of each ``identify`` (``time.process_time``, median over the runs: the hashing
of the candidates, the estimates, and for the joint one and the default the solve;
single-threaded numpy, so CPU time is the work even on a busy machine).

    python benches/heavy_hitters_sketch_joint.py --ns 100000 1000000 --runs 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpdist.experiments import heavy_hitters as hh
from ldpdist.heavy_hitters import CountMeanSketch, decollide


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--exponents", type=float, nargs="+", default=[1.1, 1.5])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--vocabulary", type=int, default=10_000)
    parser.add_argument("--top", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print("| protocol | s | n | ε | F1 independent | F1 joint | F1 default | default joint "
          "weight w | ℓ1 independent | ℓ1 joint | ℓ1 default | identify independent (CPU ms) "
          "| identify joint (CPU ms) | identify default (CPU ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    # CPU ms: the median over the runs of each identify with the 10^4-word vocabulary (by
    # default) as candidates; their difference is the joint solve
    for hadamard in (False, True):
        name = "HCMS" if hadamard else "CMS"
        for si, s in enumerate(args.exponents):
            p = hh.zipf(args.vocabulary, s)
            for ni, n in enumerate(args.ns):
                for eps in args.epsilons:
                    acc = {f"{k}_{j}": [] for k in ("f1", "l1", "t") for j in range(3)}
                    weights = []
                    for run in range(args.runs):
                        words = hh.vocabulary(args.vocabulary, hh._rng(args.seed, run))
                        users = hh.draw_users(n, p, hh._rng(args.seed, run, si, ni, 1))
                        counts = np.bincount(users, minlength=args.vocabulary)
                        protocol = CountMeanSketch(eps, hadamard=hadamard, top=args.top)
                        hashed = np.asarray(protocol.hash(words), dtype=np.uint64)
                        freq = dict(zip(hashed.tolist(), (counts / n).tolist()))
                        seed = hh._seed(hh._rng(args.seed, run, si, ni, 2, int(hadamard),
                                                int(eps * 1000)))
                        reports = protocol.privatize_hashed(hashed[users], seed=seed)
                        aggregator = protocol.aggregator().add(reports)
                        truth = hashed[hh.true_top(counts, args.top)].tolist()
                        for j, joint in enumerate((False, True, None)):
                            start = time.process_time()
                            found = aggregator.identify(top=args.top, candidates=words,
                                                        joint=joint)
                            seconds = time.process_time() - start
                            row = hh.scores(found.hashes.tolist(), found.estimates.tolist(),
                                            truth, lambda v: freq.get(int(v), 0.0))
                            acc[f"f1_{j}"].append(row["f1"])
                            acc[f"l1_{j}"].append(row["l1"])
                            acc[f"t_{j}"].append(seconds * 1e3)
                        # the default's weight of the joint estimate (untimed, from both)
                        both = [aggregator.estimate(words, joint=j) for j in (False, True)]
                        weights.append(decollide.blend(
                            both[0].estimates, both[1].estimates, both[0].standard_errors**2,
                            decollide.load(len(words), protocol.d, protocol.m),
                            protocol.m).weight)
                    mean = {k: (np.median(v) if k.startswith("t") else np.mean(v))
                            for k, v in acc.items()}
                    print(f"| {name} | {s:g} | {n} | {eps:g} | {mean['f1_0']:.3f} | "
                          f"{mean['f1_1']:.3f} | {mean['f1_2']:.3f} | {np.mean(weights):.2f} "
                          f"| {mean['l1_0']:.4f} | {mean['l1_1']:.4f} | {mean['l1_2']:.4f} | "
                          f"{mean['t_0']:.0f} | {mean['t_1']:.0f} | {mean['t_2']:.0f} |",
                          flush=True)


if __name__ == "__main__":
    main()
