"""Distributed vs single-process: N Hadamard Response reports at k = 2^16, generated and
aggregated on a Dask LocalCluster, against the same work in one process.

Both paths do the same work: values ``(i * 7919) mod k`` for users i = 0 … N − 1, cut into
blocks of ``--block`` users, each block privatized under its own seed (the rule of
:mod:`ldpdist.dask`) and counted. The single-process path runs the blocks one after another
in this process (the Rust kernels use every core of the rayon pool); the distributed path
runs them as tasks on ``--workers`` worker processes of ``--threads`` threads each, merged
by a tree reduction. The counts of the two paths are checked to be identical.

    python3 benches/dask_scale.py --n 1e8            # ~1 minute on 2 cores
    python3 benches/dask_scale.py --n 1e9            # a billion users
    python3 benches/dask_scale.py --n 1e8 --scheduler tcp://host:8786   # a real cluster
"""

from __future__ import annotations

import argparse
import time

import ldpdist
import ldpdist.dask as ldask
import numpy as np


def values_of(start: int, stop: int, k: int) -> np.ndarray:
    return ((np.arange(start, stop, dtype=np.uint64) * np.uint64(7919)) % np.uint64(k)).astype(
        np.uint32)


def single_process(mechanism, n: int, block: int, seed: int) -> "tuple[float, ldpdist.Aggregator]":
    key = seed.to_bytes(32, "little")
    start_time = time.perf_counter()
    aggregator = mechanism.aggregator()
    for b, start in enumerate(range(0, n, block)):
        values = values_of(start, min(start + block, n), mechanism.k)
        aggregator.add(mechanism.privatize(values, seed=ldask.block_seed(key, b)))
    return time.perf_counter() - start_time, aggregator


def distributed_run(client, mechanism, n: int, block: int, seed: int):
    import dask.array as da

    k = mechanism.k
    users = da.arange(n, chunks=block, dtype=np.uint64)
    values = users.map_blocks(lambda u: ((u * np.uint64(7919)) % np.uint64(k)).astype(np.uint32),
                              dtype=np.uint32)
    reports = ldask.privatize(mechanism, values, seed=seed, block_size=block)
    start_time = time.perf_counter()
    aggregator = ldask.aggregate(mechanism, reports)
    return time.perf_counter() - start_time, aggregator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=float, default=1e8, help="number of users (reports)")
    parser.add_argument("--k", type=int, default=1 << 16)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--block", type=int, default=1 << 22, help="users per task")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument("--scheduler", default=None,
                        help="address of a running scheduler instead of a LocalCluster")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--skip-single", action="store_true")
    args = parser.parse_args()
    n = int(args.n)
    from dask.distributed import Client, LocalCluster

    mechanism = ldpdist.HadamardResponse(k=args.k, epsilon=args.epsilon)
    print(f"HR k = {args.k}, epsilon = {args.epsilon}, N = {n:.3g} reports, blocks of "
          f"{args.block}")
    single = None
    if not args.skip_single:
        single, expected = single_process(mechanism, n, args.block, args.seed)
        print(f"single process: {single:.2f} s ({n / single / 1e6:.1f} M reports/s)")
    if args.scheduler:
        client, cluster = Client(args.scheduler), None
    else:
        # Each worker's Rust kernels get as many rayon threads as the worker has task
        # threads: more would oversubscribe the cores the workers already share.
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=args.threads,
                               processes=True, dashboard_address=None,
                               env={"RAYON_NUM_THREADS": str(args.threads)})
        client = Client(cluster)
    try:
        # Warm the workers (imports, the mechanism's construction) outside the timing.
        distributed_run(client, mechanism, args.block, args.block, args.seed)
        elapsed, result = distributed_run(client, mechanism, n, args.block, args.seed)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    print(f"dask ({args.scheduler or f'{args.workers} workers x {args.threads} threads'}): "
          f"{elapsed:.2f} s ({n / elapsed / 1e6:.1f} M reports/s)")
    assert result.n == n
    if single is not None:
        assert np.array_equal(result.counts, expected.counts), "the counts differ"
        print(f"identical counts; dask / single-process time = {elapsed / single:.2f}")


if __name__ == "__main__":
    main()
