"""Wall and CPU time (CPU: process time, summed over threads) of BlockHadamardResponse at
k = 10^4 with 10 and 100 equal blocks, beside HadamardResponse(blocks=1): privatize of 10^7
values, decoding the counts, estimate of 10^7 reports, simulate. Best of 7 (21) calls.

    python benches/block_hadamard_timing.py
"""
import time

import numpy as np
import ldpdist

def timed(f, reps=7):
    best = None
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        f()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if best is None or w < best[0]:
            best = (w, c)
    return best

k, n = 10_000, 10_000_000
rng = np.random.default_rng(0)
values = rng.integers(0, k, n).astype(np.uint32)
values64 = values.astype(np.int64)
cases = {"bhr 10 blocks": ldpdist.BlockHadamardResponse([k // 10] * 10, 1.0),
         "bhr 100 blocks": ldpdist.BlockHadamardResponse([k // 100] * 100, 1.0),
         "hr (blocks=1)": ldpdist.HadamardResponse(k, 1.0, blocks=1)}
for name, mech in cases.items():
    w, c = timed(lambda: mech.privatize(values, seed=1))
    print(f"{name}: privatize 10^7 uint32 values: wall {w*1e3:.1f} ms ({n/w/1e6:.0f} M/s), CPU {c*1e3:.1f} ms ({n/c/1e6:.0f} M/s per CPU-second)")
    w, c = timed(lambda: mech.privatize(values64, seed=1))
    print(f"{name}: privatize 10^7 int64 values: wall {w*1e3:.1f} ms ({n/w/1e6:.0f} M/s), CPU {c*1e3:.1f} ms")
    reports = mech.privatize(values, seed=1)
    agg = mech.aggregator().add(reports)
    counts = agg.counts
    w, c = timed(lambda: mech._core.estimate_raw(counts, n), reps=21)
    print(f"{name}: decode counts (raw): wall {w*1e3:.3f} ms, CPU {c*1e3:.3f} ms")
    w, c = timed(lambda: agg.estimate("raw"), reps=21)
    print(f"{name}: Aggregator.estimate raw: wall {w*1e3:.3f} ms, CPU {c*1e3:.3f} ms")
    w, c = timed(lambda: agg.estimate("project"), reps=21)
    print(f"{name}: Aggregator.estimate project: wall {w*1e3:.3f} ms, CPU {c*1e3:.3f} ms")
    w, c = timed(lambda: mech.estimate(reports))
    print(f"{name}: estimate(10^7 reports) (aggregate+decode+project): wall {w*1e3:.1f} ms, CPU {c*1e3:.1f} ms")
    tc = np.full(k, 10**8, np.uint64)
    w, c = timed(lambda: mech.simulate(tc, seed=2))
    print(f"{name}: simulate n=10^12: wall {w*1e3:.1f} ms, CPU {c*1e3:.1f} ms")
    tc = np.full(k, 100, np.uint64)
    w, c = timed(lambda: mech.simulate(tc, seed=2))
    print(f"{name}: simulate n=10^6: wall {w*1e3:.1f} ms, CPU {c*1e3:.1f} ms")
