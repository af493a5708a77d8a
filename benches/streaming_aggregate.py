"""Throughput of aggregating a reports file larger than one wants in memory.

Generates (if missing) a reports file of Hadamard Response with k = 2^16 — uint32 reports,
by default 10^9 of them (4 GB) — with :func:`ldpdist.reports.write_reports_chunks`, one
``privatize`` of 16·10^6 uniform values at a time (bounded memory; seed = the piece's
index). Then times, each on the warm page cache:

* ``cat file > /dev/null`` — the rate at which the file can be read at all;
* ``ldpdist aggregate --spec spec.json file -o state`` (a subprocess: the whole command);
* ``Aggregator.add_file(file)`` in this process,

checks that both give the same state, and prints GB/s (10^9 bytes per second) and the ratio
to ``cat``. The file is deleted at the end unless ``--keep``.

Usage: ``python benches/streaming_aggregate.py [--reports 1000000000] [--dir /tmp] [--keep]``
(check ``df -h`` first: the file needs 4 bytes per report).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import ldpdist
from ldpdist.reports import read_reports_layout, write_reports_chunks

PIECE = 16_000_000


def generate(path: str, mech: ldpdist.Mechanism, n: int) -> None:
    rng = np.random.default_rng(0)

    def pieces():
        for index, start in enumerate(range(0, n, PIECE)):
            values = rng.integers(0, mech.k, min(PIECE, n - start))
            yield mech.privatize(values, seed=index)

    write_reports_chunks(path, mech, pieces(), n=n, dtype=np.uint32)


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=10**9)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    args = parser.parse_args()

    mech = ldpdist.HadamardResponse(k=2**16, epsilon=1.0)
    folder = os.path.join(args.dir, "ldpdist-streaming-bench")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"hr-k65536-n{args.reports}.ldpr")
    spec = os.path.join(folder, "spec.json")
    state = os.path.join(folder, "state.ldps")
    with open(spec, "w") as handle:
        json.dump(mech.to_dict(), handle)
    try:
        if not os.path.exists(path):
            need = 4 * args.reports
            free = shutil.disk_usage(folder).free
            if need > free - (1 << 30):
                sys.exit(f"{need / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free in {folder}")
            seconds = timed(lambda: generate(path, mech, args.reports))
            print(f"generated {path} in {seconds:.1f} s")
        size = os.path.getsize(path)
        payload = read_reports_layout(path, mech).payload_bytes
        print(f"file: {size / 1e9:.2f} GB, {args.reports} uint32 reports, "
              f"{os.cpu_count()} cores")

        def cat() -> None:
            with open(path, "rb") as source, open(os.devnull, "wb") as sink:
                subprocess.run(["cat"], stdin=source, stdout=sink, check=True)

        cat()  # warm the page cache
        t_cat = min(timed(cat) for _ in range(2))
        t_cli = timed(lambda: subprocess.run(
            [sys.executable, "-m", "ldpdist", "aggregate", "--spec", spec, path, "-o", state],
            check=True, stderr=subprocess.DEVNULL))
        aggregator = mech.aggregator()
        t_api = timed(lambda: aggregator.add_file(path, progress=False))
        with open(state, "rb") as handle:
            assert ldpdist.Aggregator.from_bytes(handle.read()).to_bytes() == \
                aggregator.to_bytes()
        assert aggregator.n == args.reports

        print(f"{'':36}{'s':>8}{'GB/s':>8}{'vs cat':>8}")
        for name, seconds in (("cat file > /dev/null (page cache)", t_cat),
                              ("ldpdist aggregate (whole command)", t_cli),
                              ("Aggregator.add_file", t_api)):
            print(f"{name:36}{seconds:8.2f}{size / seconds / 1e9:8.2f}"
                  f"{t_cat / seconds:8.2f}")
        print(f"(payload {payload / 1e9:.2f} GB; the checksum is SHA-256 of all of it)")
    finally:
        for leftover in (state, spec) if args.keep else (state, spec, path):
            if os.path.exists(leftover):
                os.unlink(leftover)
        if not args.keep:
            try:
                os.rmdir(folder)
            except OSError:
                pass


if __name__ == "__main__":
    main()
