"""Speed and memory of compressive privatization with the structured Hadamard matrix at large k:
construction, simulation of n users, decoding (OMP with s atoms + simplex
projection), privatization throughput, the peak resident memory of the decode alone (Linux:
the peak mark is reset before it), and the peak resident memory of the whole process.

Each size runs in a fresh process so that its peak memory is its own:

    python benches/structured_cp_scale.py                       # k = 2^20, 2^24, 2^26
    python benches/structured_cp_scale.py --sizes 24:4096       # one size (log2 k : m)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mib() -> float:
    """The peak RSS since the last reset (VmHWM), else since the process started."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_size(log2k: int, m: int, s: int, n: int, epsilon: float) -> dict:
    from ldpdist import CompressivePrivatization

    k = 1 << log2k
    rng = np.random.default_rng(1)
    p = np.zeros(k)
    support = rng.choice(k, s, replace=False)
    p[support] = rng.dirichlet(np.ones(s))
    true_counts = rng.multinomial(n, p).astype(np.uint64)
    p_support = p[support]
    del p  # the truth is s-sparse: keep its support only, not k floats
    t0 = time.perf_counter()
    mech = CompressivePrivatization(k, epsilon, m, seed=3, matrix="hadamard")
    t1 = time.perf_counter()
    aggregate = mech.simulate(true_counts, seed=1)
    t2 = time.perf_counter()
    del true_counts
    reset = _reset_peak()
    t_decode = time.perf_counter()
    estimate = aggregate.estimate("project", sparsity=s)
    t3 = time.perf_counter()
    decode_peak = _peak_mib() if reset else float("nan")
    # ||estimate - p||_1 with p zero off its support
    l1 = float(np.abs(estimate).sum() - np.abs(estimate[support]).sum()
               + np.abs(estimate[support] - p_support).sum())
    del estimate
    rates = {}
    for name, values in (("uniform values", rng.integers(0, k, 10**7)),
                         ("50 distinct values", rng.choice(rng.integers(0, k, 50), 10**7))):
        values = values.astype(np.uint32)
        mech.privatize(values[:1000], seed=2)
        mech.privatize(values, seed=2)  # the first large batch builds the balance table
        t = time.perf_counter()
        mech.privatize(values, seed=3)
        rates[name] = 1e7 / (time.perf_counter() - t) / 1e6
    return {"k": f"2^{log2k}", "m": m, "s": s, "n": n, "construct_s": t1 - t0,
            "simulate_s": t2 - t1, "decode_s": t3 - t_decode, "l1": l1,
            "privatize_M_per_s": rates, "decode_peak_MiB": decode_peak,
            "peak_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20:2048,24:4096,26:4096",
                        help="comma-separated log2(k):m pairs")
    parser.add_argument("--s", type=int, default=50)
    parser.add_argument("--n", type=float, default=1e7)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        log2k, m = map(int, args.one.split(":"))
        print(json.dumps(one_size(log2k, m, args.s, int(args.n), args.epsilon)))
        return
    print("| k | m | construct | simulate n users | decode (OMP + projection) | l1 | "
          "privatize (uniform / 50 values) | peak memory of the decode | peak memory |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", size, "--s", str(args.s),
                              "--n", str(args.n), "--epsilon", str(args.epsilon)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        rates = r["privatize_M_per_s"]
        print(f"| {r['k']} | {r['m']} | {r['construct_s'] * 1e3:.1f} ms | {r['simulate_s']:.2f} s "
              f"| {r['decode_s']:.2f} s | {r['l1']:.3f} | {rates['uniform values']:.1f} / "
              f"{rates['50 distinct values']:.1f} M/s | {r['decode_peak_MiB']:.0f} MiB "
              f"| {r['peak_MiB']:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
