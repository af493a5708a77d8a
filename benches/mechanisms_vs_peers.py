"""Time ldpdist's mechanisms against the Python LDP libraries users compare with.

Peers (optional installs; a missing one is reported as skipped):
* ``pure-ldp`` — ships the Hadamard Response authors' reference code
  (``k2k_hadamard.Hadamard_Rand_high_priv``: ``encode_string`` / ``decode_string``) and
  client/server classes for direct encoding (k-RR) and others;
* ``multi-freq-ldpy`` — numba-compiled per-user clients (``GRR_Client``, ``UE_Client``,
  ``LH_Client``) and aggregators.

The peers privatize one user per Python call, so they are timed on ``--n`` users
(default 10^5) and everything is reported as reports per second; ldpdist is also timed at
10^7 users. Every estimate uses the clip-and-normalize decoder (the reference code's and
multi-freq-ldpy's default) and its l1 error against the users' empirical distribution is
printed next to its time, so a fast but wrong result would show.

Usage: ``python benches/mechanisms_vs_peers.py [--k 10000] [--epsilon 0.5] [--n 100000]``
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable, List, Optional, Tuple

import numpy as np

import ldpdist


def timed(fn: Callable[[], object], repeats: int) -> Tuple[float, object]:
    """Median seconds of ``repeats`` calls (after one warm-up call) and the last result."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10_000)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--n", type=int, default=100_000, help="users for the peers")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    k, eps, n = args.k, args.epsilon, args.n

    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(k))
    values = rng.choice(k, size=n, p=p)
    big = rng.choice(k, size=10_000_000, p=p)
    print(f"cores: {os.cpu_count()}, numpy {np.__version__}, ldpdist {ldpdist.__version__}")
    print(f"k = {k}, epsilon = {eps}, peers on n = {n} users, ldpdist also on 10^7\n")

    rows: List[Tuple[str, str, int, float, float]] = []  # task, impl, n, seconds, l1

    def add(task: str, impl: str, users: int, seconds: float, estimate: Optional[np.ndarray]):
        truth = np.bincount(big if users == big.size else values, minlength=k) / users
        l1 = float(np.abs(np.asarray(estimate) - truth).sum()) if estimate is not None else float("nan")
        rows.append((task, impl, users, seconds, l1))

    # --- ldpdist -------------------------------------------------------------------------
    for name, mech in [("RR", ldpdist.RandomizedResponse(k, eps)),
                       ("HR", ldpdist.HadamardResponse(k, eps))]:
        for data in (values, big):
            t, reports = timed(lambda: mech.privatize(data), args.repeats)
            add(f"{name} privatize", "ldpdist", data.size, t, None)
            t, est = timed(lambda: mech.estimate(reports, decoder="normalize"), args.repeats)
            add(f"{name} aggregate+estimate", "ldpdist", data.size, t, est)

    # --- pure-ldp: the HR authors' reference code ------------------------------------------
    try:
        from pure_ldp.frequency_oracles.hadamard_response.internal import k2k_hadamard
    except ImportError:
        print("pure-ldp: skipped (not installed, or its undeclared dependency statsmodels is missing)")
    else:
        ref = k2k_hadamard.Hadamard_Rand_high_priv(k, eps)
        t, reports = timed(lambda: ref.encode_string(values), 1)
        add("HR privatize", "pure-ldp reference", n, t, None)
        t, est = timed(lambda: ref.decode_string(reports, normalization=0), args.repeats)
        add("HR aggregate+estimate", "pure-ldp reference", n, t, est)
        # Same reports decoded by ldpdist: the conventions agree (row x+1, K = 2^ceil(log2(k+1))).
        if eps < np.log(2):
            ours = ldpdist.HadamardResponse(k, eps)
            # reports made by another implementation: declared with as_reports
            t, est = timed(lambda: ours.estimate(
                ours.as_reports(np.asarray(reports, dtype=np.uint64)), decoder="normalize"),
                args.repeats)
            add("HR aggregate+estimate", "ldpdist on reference reports", n, t, est)

    # --- multi-freq-ldpy ------------------------------------------------------------------
    try:
        from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI, GRR_Client
        from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Aggregator_MI, UE_Client
    except ImportError:
        print("multi-freq-ldpy: skipped (not installed)")
    else:
        GRR_Client(0, k, eps)  # compile
        t, reports = timed(lambda: np.array([GRR_Client(int(v), k, eps) for v in values]), 1)
        add("RR privatize", "multi-freq-ldpy", n, t, None)
        t, est = timed(lambda: GRR_Aggregator_MI(reports, k, eps), args.repeats)
        add("RR aggregate+estimate", "multi-freq-ldpy", n, t, est)
        if k <= 2_000:  # UE reports are k floats per user
            sub = values[: min(n, 20_000)]
            t, _ = timed(lambda: [UE_Client(int(v), k, eps, True) for v in sub], 1)
            add("OUE privatize", "multi-freq-ldpy", sub.size, t, None)

    print("| task | implementation | users | median s | reports/s | l1 error |")
    print("|---|---|---:|---:|---:|---:|")
    for task, impl, users, seconds, l1 in rows:
        print(f"| {task} | {impl} | {users:,} | {seconds:.4f} | {users / seconds:,.0f} | "
              f"{'' if np.isnan(l1) else f'{l1:.3f}'} |")
    print()
    for task in dict.fromkeys(r[0] for r in rows):
        ours = [r for r in rows if r[0] == task and r[1] == "ldpdist" and r[2] == n]
        for r in rows:
            if r[0] == task and r[1] != "ldpdist" and ours:
                ratio = (r[3] / r[2]) / (ours[0][3] / ours[0][2])
                print(f"{task}: {r[1]} takes {ratio:,.0f}x ldpdist's time per report (same n)")


if __name__ == "__main__":
    main()
