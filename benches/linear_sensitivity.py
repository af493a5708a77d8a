"""Time of the exact L2 sensitivity (the diameter of the query matrix's columns) and of the
linear-query constructors, by shape of the columns: Gaussian clouds (the search prunes almost
every pair), points on a circle (d = 2: every column is on the convex hull) and on a sphere
(d ≥ 3: the hard case, where the search is estimated first and refused above its limit).
Prints one line per case: shape, d, J, the search's estimate (distance evaluations), the
outcome (done or refused) and the wall time of the whole call. The scan of every pair is
timed on a smaller J for comparison (it is O(J² d)).

    python benches/linear_sensitivity.py          # J = 2**20 (about a minute in all)
    python benches/linear_sensitivity.py --quick  # J = 2**16
"""
import argparse
import time

import numpy as np

from ldpdist import _core
from ldpdist.linear import (SENSITIVITY_WORK_LIMIT, GaussianLinearQueries,
                            RejectionSamplingLinearQueries, l2_sensitivity)


def shape(name, d, j, rng):
    g = rng.standard_normal((d, j))
    if name == "gaussian":
        return g
    if name == "circle":
        t = 2 * np.pi * (np.arange(j) + 0.5) / j
        return np.vstack([np.cos(t), np.sin(t)])
    return g / np.linalg.norm(g, axis=0)   # sphere


def timed(call):
    start = time.perf_counter()
    try:
        call()
        outcome = "done"
    except ValueError as err:
        outcome = "refused" if "max_sensitivity_work" in str(err) else f"error: {err}"
    return outcome, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    j = 2 ** 16 if args.quick else 2 ** 20
    rng = np.random.default_rng(0)
    print(f"default limit: {SENSITIVITY_WORK_LIMIT:.3g} distance evaluations")
    print(f"{'case':34s} {'estimate':>10s} {'outcome':>8s} {'seconds':>8s}")
    cases = [("gaussian", d) for d in (1, 2, 3, 4, 8)] + [("circle", 2)] + \
        [("sphere", d) for d in (3, 8)]
    for name, d in cases:
        q = shape(name, d, j, rng)
        columns = np.ascontiguousarray(q.T)
        estimate = _core.LinearDiameterSearch(columns).estimate(SENSITIVITY_WORK_LIMIT)
        outcome, seconds = timed(lambda: l2_sensitivity(q))
        print(f"l2_sensitivity {name:8s} d={d} J=2^{j.bit_length() - 1:<3d} "
              f"{estimate:10.3g} {outcome:>8s} {seconds:8.2f}")
    q = shape("gaussian", 2, j, rng)
    outcome, seconds = timed(lambda: GaussianLinearQueries(q, 1.0, 1e-6))
    print(f"GaussianLinearQueries gaussian d=2 J=2^{j.bit_length() - 1:<3d} {'':10s} "
          f"{outcome:>8s} {seconds:8.2f}")
    jr = j // 4
    q = shape("gaussian", 2, jr, rng)
    outcome, seconds = timed(lambda: RejectionSamplingLinearQueries(q, 1.0, 10 ** 6))
    print(f"RejectionSampling gaussian d=2 J=2^{jr.bit_length() - 1:<3d}     {'':10s} "
          f"{outcome:>8s} {seconds:8.2f}")
    js = 2 ** 14
    for d in (2, 8):
        q = shape("gaussian", d, js, rng)
        columns = np.ascontiguousarray(q.T)
        outcome, seconds = timed(lambda: _core.linear_sensitivity_scan(columns))
        print(f"scan of every pair  gaussian d={d} J=2^14 {'':10s} {outcome:>8s} "
              f"{seconds:8.2f}")


if __name__ == "__main__":
    main()
