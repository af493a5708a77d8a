"""Seeded results and every decoder are bit-identical whatever the thread count (OLH's
IBU once differed between runs with 2 threads, from a parallel float sum).

One interpreter per thread count (RAYON_NUM_THREADS fixes rayon's pool at start-up) computes
digests of every mechanism's seeded reports, aggregate, simulate and every decoder's
estimate, at sizes that take the parallel paths; the digests must agree.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from conftest import in_background, run_python

CODE = """
import json, warnings
import numpy as np
import ldpdist
from ldpdist.decoders import SPARSE_DECODERS

warnings.simplefilter("ignore")  # IBU's max_iter warning is not what is compared here
CASES = {
    "RandomizedResponse": dict(k=3000, epsilon=1.0),
    "HadamardResponse": dict(k=3000, epsilon=2.0),
    "HighLowHadamardResponse": dict(k=3000, epsilon=1.0, sensitive=list(range(0, 3000, 3))),
    "RAPPOR": dict(k=300, epsilon=1.0),
    "OptimizedUnaryEncoding": dict(k=300, epsilon=1.0),
    "SubsetSelection": dict(k=300, epsilon=1.0),
    "OptimizedLocalHashing": dict(k=3000, epsilon=1.0),
    "CompressivePrivatization": dict(k=3000, epsilon=0.5, m=64, seed=5),
    "TwoStageRAPPOR": dict(k=300, epsilon=1.0),
    "OneBitHadamardResponse": dict(k=3000, epsilon=1.0),
    "PublicCoinHashing": dict(k=3000, bits=3, seed=5),
    "AsymmetricBinaryResponse": dict(epsilon_01=0.5, epsilon_10=2.0),  # k = 2
    # singletons, blocks of 4, 1024 and 4096 outputs (the last transformed by the parallel
    # FWHT), contiguous; tests/test_block_hadamard.py covers label partitions
    "BlockHadamardResponse": dict(blocks=[1, 2, 3, 994, 1, 1999], epsilon=1.0),
}
# a registered mechanism built from (k, ε) alone needs no entry; one with other parameters
# fails below (from_dict names the missing parameter) until it has one
for name in ldpdist.specs.registered():
    CASES.setdefault(name, dict(k=3000, epsilon=1.0))
rng = np.random.default_rng(0)
out = {}
for name, params in sorted(CASES.items()):
    mech = ldpdist.from_dict({"mechanism": name, **params})
    k = mech.k
    p = rng.dirichlet(np.full(k, 0.3))
    n = 150_000 if mech.report_kind == "bits" else 400_000
    values = rng.choice(k, size=n, p=p)
    # (a mechanism without client randomness takes public user indices instead of a seed)
    reports = mech.privatize(values, seed=1) if mech.randomized else mech.privatize(values, first_user=1)
    agg = mech.aggregator().add(reports)
    out[name + "/reports"] = digest(reports)
    out[name + "/counts"] = digest(agg.counts)
    out[name + "/simulate"] = digest(mech.simulate(np.bincount(values, minlength=k), seed=2).counts)
    for decoder in mech.decoders:
        kwargs = {"sparsity": min(20, k)} if decoder in SPARSE_DECODERS else {}
        if decoder == "ibu":
            kwargs = {"max_iter": 40}
        out[name + "/" + decoder] = digest(agg.estimate(decoder, **kwargs))
print(json.dumps(out))
"""


def _run_at(threads: int) -> str:
    return run_python(CODE, env={"RAYON_NUM_THREADS": str(threads)}, timeout=600)


# The three runs, queued when collection ends (tests/conftest.py) to run beside the suite.
_QUEUED: Dict[int, Any] = {}


def start_in_background(items) -> None:
    test = test_every_mechanism_and_decoder_is_bit_identical_at_1_2_and_4_threads.__name__
    if any(item.originalname == test for item in items):
        for threads in (1, 2, 4):
            _QUEUED.setdefault(threads, in_background(_run_at, threads))


def test_every_mechanism_and_decoder_is_bit_identical_at_1_2_and_4_threads():
    queued = {threads: _QUEUED.pop(threads, None) for threads in (1, 2, 4)}
    runs = {threads: json.loads(future.result() if future is not None and not future.cancelled()
                                else _run_at(threads))
            for threads, future in queued.items()}
    # reports, counts, simulate and one entry per decoder: the DECODERS (5 of our own and the
    # 10 of the consistency family) for the classic six, one-bit HR, high-low HR, block HR
    # and the asymmetric binary mechanism, all but IBU for CP, and the two two-stage
    # decoders too for two-stage RAPPOR and public-coin hashing
    from ldpdist.decoders import DECODERS

    d = len(DECODERS)
    assert len(runs[1]) == 10 * (3 + d) + (3 + d - 1) + 2 * (3 + d + 2)
    for threads in (2, 4):
        differ = sorted(key for key in runs[1] if runs[1][key] != runs[threads][key])
        assert not differ, f"{threads} threads differ from 1 thread on {differ}"
