"""ldpdist.dask on a real dask.distributed LocalCluster (2 worker processes): distributed
aggregation equals in-memory aggregation bit for bit for every mechanism, privatize's seed
rule makes reports independent of the partitioning, and a worker killed mid-run changes
nothing (no partition is lost or counted twice)."""

from __future__ import annotations

import os
import pickle
import signal
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask", reason="ldpdist.dask needs the extra: pip install '.[dask]'")
distributed = pytest.importorskip("distributed",
                                  reason="ldpdist.dask tests need dask.distributed ('.[dask]')")
da = pytest.importorskip("dask.array", reason="the dask extra installs dask[array]")
dd = pytest.importorskip("dask.dataframe", reason="the dask extra installs dask[dataframe]")

import ldpdist
import ldpdist.dask as ldask
from ldpdist.errors import DuplicateBatchError
from test_mechanisms import IDS, MECHANISMS, k_for, make

# The structured compressive matrix is a parameter of the same class: named by its id.
HADAMARD_CP = "CompressivePrivatization-hadamard"
ALL = MECHANISMS + [ldpdist.CompressivePrivatization, HADAMARD_CP]
ALL_IDS = IDS + ["CompressivePrivatization", HADAMARD_CP]


def small(cls):
    if cls == HADAMARD_CP:
        return ldpdist.CompressivePrivatization(k=64, epsilon=0.7, m=16, seed=3,
                                                matrix="hadamard")
    if cls is ldpdist.CompressivePrivatization:
        return cls(k=64, epsilon=0.7, m=16, seed=3)
    return make(cls, k_for(cls, 16), 1.0)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                       dashboard_address=None)
    with distributed.Client(cluster) as client:
        yield client
    cluster.close()


def in_memory(mechanism, reports):
    return mechanism.aggregator().add(reports)


@pytest.mark.parametrize("cls", ALL, ids=ALL_IDS)
def test_distributed_aggregate_equals_in_memory(client, cls):
    mechanism = small(cls)
    values = np.random.default_rng(1).integers(0, mechanism.k, 5000)
    reports = mechanism.privatize(values, **({"seed": 7} if mechanism.randomized else {}))
    expected = in_memory(mechanism, reports)
    # Uneven partitions (700, …, 700, 100), and a fan-in smaller than their number, so the
    # merge tree has several levels.
    chunks = (700,) + reports.shape[1:]
    result = ldask.aggregate(mechanism, da.from_array(reports, chunks=chunks), split_every=3)
    assert isinstance(result, ldpdist.Aggregator)
    assert result.mechanism == mechanism
    assert result.n == expected.n == 5000
    assert result.counts.dtype == np.uint64
    np.testing.assert_array_equal(result.counts, expected.counts)
    assert len(result.batches) == 8 and all(b.startswith("dask:") for b in result.batches)
    np.testing.assert_array_equal(result.estimate(), expected.estimate())


@pytest.mark.parametrize("cls", ALL, ids=ALL_IDS)
def test_privatize_does_not_depend_on_the_partitioning(client, cls):
    mechanism = small(cls)
    values = np.random.default_rng(2).integers(0, mechanism.k, 5000)
    first = ldask.privatize(mechanism, da.from_array(values, chunks=1000), seed=11,
                            block_size=1024)
    second = ldask.privatize(mechanism, da.from_array(values, chunks=(333, 4000, 667)),
                             seed=11, block_size=1024)
    reports_first, reports_second = dask.compute(first, second)
    np.testing.assert_array_equal(reports_first, reports_second)
    assert first.chunks[0] == (1024,) * 4 + (904,)
    # The documented rule, block by block, in this process.
    key = (11).to_bytes(32, "little")
    for block, start in enumerate(range(0, 5000, 1024)):
        options = {}
        if mechanism.randomized:
            options["seed"] = ldask.block_seed(key, block)
        if "first_user" in mechanism.privatize.__code__.co_varnames:
            options["first_user"] = start
        np.testing.assert_array_equal(
            reports_first[start:start + 1024],
            mechanism.privatize(values[start:start + 1024], **options))
    result = ldask.aggregate(mechanism, second)
    np.testing.assert_array_equal(result.counts, in_memory(mechanism, reports_first).counts)
    if mechanism.randomized:
        other = ldask.privatize(mechanism, da.from_array(values, chunks=1000), seed=12,
                                block_size=1024).compute()
        assert not np.array_equal(other, reports_first)


def test_dataframe_column(client):
    pandas = pytest.importorskip("pandas")
    mechanism = ldpdist.HadamardResponse(k=100, epsilon=1.0)
    reports = mechanism.privatize(np.random.default_rng(3).integers(0, 100, 3000), seed=5)
    frame = dd.from_pandas(pandas.DataFrame({"report": reports, "other": 1.0}), npartitions=4)
    result = ldask.aggregate(mechanism, frame["report"])
    np.testing.assert_array_equal(result.counts, in_memory(mechanism, reports).counts)
    assert result.n == 3000 and len(result.batches) == 4
    from_column = ldask.privatize(mechanism, dd.from_pandas(
        pandas.Series(np.arange(3000) % 100), npartitions=3), seed=5, block_size=1000)
    from_array = ldask.privatize(mechanism, da.arange(3000, chunks=700) % 100, seed=5,
                                 block_size=1000)
    np.testing.assert_array_equal(from_column.compute(), from_array.compute())


def test_provenance_travels_with_the_collection(client):
    """ldask.privatize's blocks and meta are Reports of the spec, also across worker
    processes (a serializer for Reports is registered with distributed); aggregate refuses
    another spec before computing (meta) or on the workers (partitions), and takes untagged
    partitions as the mechanism's reports (the documented declaration)."""
    mechanism = ldpdist.HadamardResponse(k=64, epsilon=1.0)
    other = ldpdist.HadamardResponse(k=64, epsilon=2.0)
    values = np.random.default_rng(4).integers(0, 64, 3000)
    # chunks of block_size: no rechunk tasks, whose keys dask's scheduler can keep after
    # a graph is submitted twice (a known dask scheduler bug), which client.restart() then
    # refuses
    lazy = ldask.privatize(mechanism, da.from_array(values, chunks=1000), seed=3,
                           block_size=1000)
    assert isinstance(lazy._meta, ldpdist.Reports)
    assert lazy._meta.fingerprint == mechanism.fingerprint
    assert isinstance(lazy[100:2000].rechunk(300)._meta, ldpdist.Reports)
    assert not isinstance((lazy + 0)._meta, ldpdist.Reports)  # arithmetic drops the tag
    computed = lazy.compute()  # blocks computed in worker processes, joined here
    assert type(computed) is ldpdist.Reports and computed.fingerprint == mechanism.fingerprint
    block = lazy.blocks[1].compute()
    assert type(block) is ldpdist.Reports and block.fingerprint == mechanism.fingerprint
    with pytest.raises(ldpdist.SpecMismatchError, match="reports of HadamardResponse"):
        ldask.aggregate(other, lazy, compute=False)  # nothing computed
    with pytest.raises(ldpdist.SpecMismatchError):
        ldask.aggregate(other, da.from_array(computed, chunks=1000))
    # meta untagged, partitions tagged: checked where each partition is counted (in this
    # process: a failed distributed run would leave its tasks on the shared scheduler)
    untagged_meta = lazy.map_blocks(lambda b: b, meta=np.empty(0, dtype=computed.dtype))
    assert not isinstance(untagged_meta._meta, ldpdist.Reports)
    with pytest.raises(ldpdist.SpecMismatchError):
        ldask.aggregate(other, untagged_meta, compute=False).compute(scheduler="synchronous")
    expected = in_memory(mechanism, computed)
    for collection in (lazy, untagged_meta, da.from_array(np.asarray(computed), chunks=800)):
        np.testing.assert_array_equal(ldask.aggregate(mechanism, collection).counts,
                                      expected.counts)


def test_partitions_are_counted_once(client):
    mechanism = ldpdist.HadamardResponse(k=64, epsilon=1.0)
    reports = da.from_array(mechanism.privatize(np.arange(2000) % 64, seed=1), chunks=500)
    once = ldask.aggregate(mechanism, reports)
    again = ldask.aggregate(mechanism, reports)
    assert once.batches == again.batches  # the same partitions, the same batch ids
    with pytest.raises(DuplicateBatchError, match="twice"):
        once.merge(again)
    other = ldask.aggregate(mechanism, reports[:1000])  # another collection: other ids
    assert not other.batches & once.batches


def test_aggregator_pickles_as_its_checked_state():
    mechanism = ldpdist.SubsetSelection(k=20, epsilon=1.0)
    aggregator = mechanism.aggregator().add(mechanism.privatize(np.arange(100) % 20, seed=2))
    payload = pickle.dumps(aggregator)
    assert aggregator.to_bytes() in payload
    copy = pickle.loads(payload)
    np.testing.assert_array_equal(copy.counts, aggregator.counts)
    assert copy.n == aggregator.n and copy.batches == aggregator.batches
    corrupted = bytearray(payload)
    corrupted[payload.index(aggregator.to_bytes()) + 200] ^= 1
    with pytest.raises(ldpdist.IntegrityError):
        pickle.loads(bytes(corrupted))


def _slowly(block):
    time.sleep(0.1)
    return block


def test_a_worker_killed_mid_run_changes_nothing(client):
    mechanism = ldpdist.HadamardResponse(k=1024, epsilon=1.0)
    n = 40 * 4096
    values = (da.arange(n, chunks=4096) * 7919) % 1024
    reports = ldask.privatize(mechanism, values.map_blocks(_slowly, dtype=values.dtype),
                              seed=3, block_size=4096)
    expected = in_memory(mechanism, reports.compute(scheduler="synchronous"))
    future = client.compute(ldask.aggregate(mechanism, reports, compute=False))
    deadline = time.monotonic() + 20
    while not any(client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert not future.done(), "the run ended before a worker could be killed"
    pids = client.run(os.getpid)
    os.kill(next(iter(pids.values())), signal.SIGKILL)  # the nanny starts a new worker
    result = future.result(timeout=60)
    assert result.n == expected.n == n  # nothing lost, nothing counted twice
    np.testing.assert_array_equal(result.counts, expected.counts)
    assert len(result.batches) == 40
    # A retry after a full restart gives the same counts again.
    client.restart()
    retried = ldask.aggregate(mechanism, reports)
    np.testing.assert_array_equal(retried.counts, expected.counts)
    assert retried.batches == result.batches


def test_bad_input(client):
    mechanism = ldpdist.HadamardResponse(k=16, epsilon=1.0)
    with pytest.raises(TypeError, match="dask.array.Array"):
        ldask.aggregate(mechanism, np.zeros(10, dtype=np.uint8))
    with pytest.raises(ValueError, match="1-D"):
        ldask.aggregate(mechanism, da.zeros((4, 4), dtype=np.uint8, chunks=2))
    with pytest.raises(ValueError, match="split_every"):
        ldask.aggregate(mechanism, da.zeros(4, dtype=np.uint8, chunks=2), split_every=1)
    with pytest.raises(TypeError, match="mechanism"):
        ldask.aggregate("HR", da.zeros(4, dtype=np.uint8, chunks=2))
    with pytest.raises(ValueError, match="reports must lie|out of range|\\[0, 32\\)|reports"):
        ldask.aggregate(mechanism, da.from_array(np.array([1, 2, 999]), chunks=2))
    dropped = ldask.aggregate(mechanism, da.from_array(np.array([1, 2, 999]), chunks=2),
                              on_invalid="drop")
    assert dropped.n == 2 and dropped.dropped == 1
    with pytest.raises(ValueError, match="one-dimensional"):
        ldask.privatize(mechanism, da.zeros((4, 4), dtype=int, chunks=2))
    with pytest.raises(ValueError, match="values must lie"):
        ldask.privatize(mechanism, da.from_array(np.array([1, 16]), chunks=1)).compute()
    with pytest.raises(ValueError, match="seed"):
        ldask.privatize(mechanism, da.zeros(4, dtype=int, chunks=2), seed=-1)
    empty = ldask.aggregate(mechanism, da.zeros(0, dtype=np.uint8, chunks=2))
    assert empty.n == 0 and not empty.counts.any()


@pytest.mark.parametrize("cls", ALL, ids=ALL_IDS)
def test_unaligned_buffers_are_accepted(cls):
    # Dask hands partitions over in buffers at any offset: values and reports that are not
    # aligned for their dtype are copied, not refused.
    mechanism = small(cls)
    values = np.arange(300, dtype=np.uint32) % mechanism.k
    odd = np.zeros(values.nbytes + 1, dtype=np.uint8)[1:].view(np.uint32)
    odd[:] = values
    assert not odd.flags.aligned
    seed = {"seed": 4} if mechanism.randomized else {}
    reports = mechanism.privatize(values, **seed)
    np.testing.assert_array_equal(mechanism.privatize(odd, **seed), reports)
    if reports.itemsize > 1:
        shifted = np.zeros(reports.nbytes + 1, dtype=np.uint8)[1:].view(reports.dtype)
        shifted = shifted.reshape(reports.shape)
        shifted[...] = reports
        assert not shifted.flags.aligned
        declared = mechanism.as_reports(shifted)  # a buffer made here: declared
        np.testing.assert_array_equal(in_memory(mechanism, declared).counts,
                                      in_memory(mechanism, reports).counts)
