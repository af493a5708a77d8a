"""PEM at scale: identify the top 32 of 10^7 users' strings over the 2^64 hashed domain.

The target: n = 10^7 users, items strings of up to 32 bytes hashed to 64 bits, ε = 4, top
32 identified in at most 10 s on 2 cores and 2 GiB.

Data: the generator of the ``heavy-hitters`` preset (:mod:`ldpdist.experiments.heavy_hitters`:
random lowercase words of 3 to 32 bytes), Zipf(s) frequencies over it
(s = 1.1 by default), n users sampled from it. The vocabulary is hashed ONCE
(``ldpdist.heavy_hitters.hash_items``) and the users' hashed values are the sampled rows of
it; the reports come from ``PEM.privatize_hashed`` (client side, timed separately).

Timed: ``aggregator.identify()`` (server side: the rounds of PEM, each a pass of the Rust
support kernel over the reports), the median of ``--runs`` wall times (and of the
process's CPU time, all threads: on a busy machine the wall time includes waiting for a
core); ``add`` (the report
checks) is timed separately. Memory: the process's peak RSS over the identify runs (the
kernel's allocations included; the peak is reset before them through
``/proc/self/clear_refs`` when the kernel allows it) and the process's max RSS overall.
Accuracy: precision and recall of the identified hashed values against the true top 32 of
the sampled users.

    python benches/heavy_hitters_scale.py                      # n = 10^7, defaults
    python benches/heavy_hitters_scale.py --n 1000000 --step-bits 4 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import numpy as np

from ldpdist.experiments import heavy_hitters as hh
from ldpdist.heavy_hitters import PEM, hash_items


def peak_rss_reset() -> bool:
    """Reset the process's peak RSS (VmHWM); False when the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def vm_hwm() -> int:
    """The process's peak RSS (bytes) since the start or the last reset."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10**7, help="users (default 10^7)")
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--top", type=int, default=32)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--step-bits", type=int, default=None, help="PEM default if omitted")
    parser.add_argument("--start-bits", type=int, default=None, help="PEM default if omitted")
    parser.add_argument("--s", type=float, default=1.1, help="Zipf exponent")
    parser.add_argument("--vocabulary", type=int, default=100_000, help="distinct words")
    parser.add_argument("--runs", type=int, default=3, help="identify runs (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    pem = PEM(args.epsilon, top=args.top, bits=args.bits, step_bits=args.step_bits,
              start_bits=args.start_bits, seed=args.seed)

    t0 = time.perf_counter()
    words = hh.vocabulary(args.vocabulary, rng)
    hashed_words = hash_items(words, pem.seed) >> np.uint64(64 - pem.bits)
    users = hh.draw_users(args.n, hh.zipf(len(words), args.s), rng)
    values = hashed_words[users]
    setup = time.perf_counter() - t0

    t0 = time.perf_counter()
    reports = pem.privatize_hashed(values, seed=args.seed)
    privatize = time.perf_counter() - t0

    t0 = time.perf_counter()
    aggregator = pem.aggregator().add(reports)
    add = time.perf_counter() - t0
    del reports

    reset = peak_rss_reset()
    times, cpu, found = [], [], None
    for _ in range(args.runs):
        t0, c0 = time.perf_counter(), time.process_time()
        found = aggregator.identify()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    identify_peak = vm_hwm() if reset else None
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # the truth: the top distinct hashed values of the sampled users
    counts = np.bincount(users, minlength=len(words))
    true_top = set(hashed_words[np.argsort(-counts, kind="stable")[:args.top]].tolist())
    got = set(found.hashes.tolist())
    hits = len(got & true_top)
    result = {
        "n": args.n, "epsilon": args.epsilon, "bits": pem.bits, "top": args.top,
        "s": args.s, "vocabulary": args.vocabulary, "g": pem.g, "groups": pem.groups,
        "start_bits": pem.start_bits, "step_bits": pem.step_bits,
        "threads": os.environ.get("RAYON_NUM_THREADS", str(os.cpu_count())),
        "setup_s": round(setup, 3), "privatize_s": round(privatize, 3),
        "add_s": round(add, 3), "identify_s": [round(t, 3) for t in times],
        "identify_median_s": round(statistics.median(times), 3),
        "identify_cpu_median_s": round(statistics.median(cpu), 3),
        "identify_peak_rss_mib": None if identify_peak is None else
        round(identify_peak / 2**20, 1),
        "reports_mib": round(aggregator.reports().nbytes / 2**20, 1),
        "max_rss_mib": round(max_rss / 2**20, 1),
        "precision": hits / max(1, len(got)), "recall": hits / args.top,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"PEM n={args.n} ε={args.epsilon} bits={pem.bits} top={args.top} g={pem.g} "
          f"groups={pem.groups} start_bits={pem.start_bits} step_bits={pem.step_bits} "
          f"(Zipf s={args.s} over {args.vocabulary} words; threads {result['threads']})")
    print(f"  setup (vocabulary, hash once, sample)  {setup:8.2f} s")
    print(f"  privatize_hashed (client side)         {privatize:8.2f} s")
    print(f"  aggregator.add (report checks)         {add:8.2f} s")
    print(f"  identify, median of {args.runs}                {result['identify_median_s']:8.2f} s"
          f"   runs {result['identify_s']}; CPU time (all threads) "
          f"{result['identify_cpu_median_s']:.2f} s")
    print(f"  reports {result['reports_mib']} MiB; peak RSS during identify "
          f"{result['identify_peak_rss_mib']} MiB; process max RSS {result['max_rss_mib']} MiB")
    print(f"  top-{args.top}: precision {result['precision']:.3f}, recall {result['recall']:.3f}")


if __name__ == "__main__":
    main()
