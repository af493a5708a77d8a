"""The contract every heavy-hitter protocol keeps, parametrized over :data:`PROTOCOLS`:
adding a protocol there (a small instance with exact channels, and a larger one for the
end-to-end checks) runs all of these on it.

Exact ε of every group's channel; the two client entry points agree; seeded reports and
answers do not depend on the thread count; spec (dict, JSON), state and reports-file round
trips; mix-ups (another spec's reports, states, files), duplicate batches and corruption
refused; malformed reports raised or dropped; bad input with clear errors; the command line
and ldpdist.dask. Each protocol's own file tests its oracle's exact unbiasedness, its
sampler against its channel, and its recovery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ldpdist
from ldpdist import privacy
from ldpdist.errors import DuplicateBatchError, IntegrityError, SpecMismatchError
from ldpdist.heavy_hitters import aggregator_from_bytes, protocols
from ldpdist.reports import read_reports, write_reports

from conftest import run_python

#: name -> (small instance: every group's channel fits 2**22 entries; the instance the
#: end-to-end checks use). Expressions, so that a subprocess can build them too.
PROTOCOLS = {
    "PEM": ("PEM(epsilon=1.0, top=2, bits=5, start_bits=2, step_bits=2)",
            "PEM(epsilon=4.0, top=4, bits=24)"),
    "TreeHist": ("TreeHist(epsilon=1.0, top=2, bits=6, step_bits=2, hashes=3)",
                 "TreeHist(epsilon=4.0, top=4, bits=24)"),
    "CompressiveHH": ("CompressiveHeavyHitters(epsilon=1.0, top=2, bits=6, tag_bits=2, "
                      "chunk_bits=3)",
                      "CompressiveHeavyHitters(epsilon=4.0, top=4, bits=24)"),
    "CMS": ("CountMeanSketch(epsilon=1.0, m=4, d=2)",
            "CountMeanSketch(epsilon=4.0, m=128, d=8, hadamard=True)"),
    "SFP": ("SequenceFragmentPuzzle(epsilon=1.0, max_length=4, m=4, d=2)",
            "SequenceFragmentPuzzle(epsilon=4.0, top=4, max_length=16, m=256, d=2)"),
}
#: protocols that cannot enumerate their domain: identify needs a dictionary of candidates
NEEDS_CANDIDATES = {"CMS"}
#: protocols whose items are strings only (no integer items)
STRINGS_ONLY = {"SFP"}


def build(expression):
    namespace = dict(vars(ldpdist.heavy_hitters))
    return eval(expression, namespace)  # noqa: S307 - the fixed expressions above


def small(name):
    return build(PROTOCOLS[name][0])


def large(name):
    return build(PROTOCOLS[name][1])


NAMES = sorted(PROTOCOLS)


def candidates_for(protocol):
    """A dictionary for the protocols that need one to identify (else None)."""
    return VOCABULARY if protocol.protocol_name in NEEDS_CANDIDATES else None
VOCABULARY = [f"item-{i}" for i in range(40)] + ["ünïcode", "🙂", b"\x00\xffbytes", 2**64 - 1]


def zipf_items(n, seed=0, vocabulary=VOCABULARY):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1) ** 1.5
    picks = rng.choice(len(vocabulary), size=n, p=weights / weights.sum())
    return [vocabulary[i] for i in picks]


@pytest.fixture(scope="module", params=NAMES)
def name(request):
    return request.param


@pytest.fixture(scope="module")
def batch(name):
    """(protocol, items, reports) shared by the checks of one protocol."""
    protocol = large(name)
    vocabulary = ([v for v in VOCABULARY if not isinstance(v, int)] if name in STRINGS_ONLY
                  else VOCABULARY)
    items = zipf_items(3000, vocabulary=vocabulary)
    return protocol, items, protocol.privatize(items, seed=7)


def test_every_registered_protocol_is_in_the_contract():
    assert set(protocols()) <= set(PROTOCOLS), "add the new protocol to PROTOCOLS"


def test_every_group_channel_is_exactly_epsilon_ldp(name):
    protocol = small(name)
    assert 0 < protocol.realized_epsilon <= protocol.epsilon
    worst = []
    for group in range(protocol.groups):
        Q = protocol.group_channel(group)
        assert np.allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        budgets = privacy.realized_budgets(Q)
        worst.append(budgets[~np.eye(budgets.shape[0], dtype=bool)].max())
    # every group within ε, and the realized ε reported is the worst group's, exactly
    assert max(worst) <= protocol.epsilon
    assert max(worst) == pytest.approx(protocol.realized_epsilon, rel=1e-12, abs=1e-12)


def test_realized_epsilon_never_exceeds_the_request(name):
    for epsilon in (0.25, 1.0, 3.0, 6.0):
        spec = small(name).to_dict()
        spec["epsilon"] = epsilon
        protocol = ldpdist.heavy_hitters.from_dict(spec)
        assert 0 < protocol.realized_epsilon <= epsilon


def test_privatize_and_privatize_hashed_agree(batch):
    protocol, items, reports = batch
    try:
        hashed = protocol.privatize_hashed(protocol.hash(items), seed=7)
    except TypeError as error:  # protocols that report more than the hash say so
        assert "privatize the items themselves" in str(error)
        return
    assert np.asarray(hashed).tobytes() == np.asarray(reports).tobytes()


def test_seeded_reports_repeat_and_differ(batch):
    protocol, items, reports = batch
    again = protocol.privatize(items, seed=7)
    assert np.asarray(again).tobytes() == np.asarray(reports).tobytes()
    other = protocol.privatize(items, seed=8)
    assert np.asarray(other).tobytes() != np.asarray(reports).tobytes()
    fresh = protocol.privatize(items)  # OS entropy
    assert np.asarray(fresh).tobytes() != np.asarray(reports).tobytes()


def test_thread_count_does_not_change_anything(name):
    code = f"""
import numpy as np
import ldpdist
from ldpdist.heavy_hitters import *
from conftest import digest
protocol = {PROTOCOLS[name][1]}
rng = np.random.default_rng(3)
vocabulary = [f"w{{i}}" for i in range(300)]
weights = 1.0 / np.arange(1, 301) ** 1.3
items = [vocabulary[i] for i in rng.choice(300, size=60000, p=weights / weights.sum())]
reports = protocol.privatize(items, seed=11)
found = protocol.aggregator().add(reports).identify(candidates=vocabulary)
print(digest(np.asarray(reports).view(np.uint8)), digest(found.hashes),
      digest(found.estimates), digest(found.standard_errors))
"""
    outputs = {threads: run_python(code, env={"RAYON_NUM_THREADS": str(threads),
                                              "OMP_NUM_THREADS": str(threads),
                                              "OPENBLAS_NUM_THREADS": str(threads)},
                                   timeout=300)
               for threads in (1, 2, 3)}
    assert len(set(outputs.values())) == 1, outputs


def test_spec_round_trips(name):
    protocol = large(name)
    spec = protocol.to_dict()
    assert json.loads(json.dumps(spec)) == spec
    assert ldpdist.heavy_hitters.from_dict(spec) == protocol
    assert ldpdist.from_dict(spec) == protocol  # the library's one spec entry point
    text = ldpdist.specs.to_json(protocol)
    assert ldpdist.specs.from_json(text) == protocol
    edited = json.loads(text)
    edited["epsilon"] = edited["epsilon"] * 2
    with pytest.raises(ValueError, match="recorded fingerprint"):
        ldpdist.from_dict(edited)
    for broken in ({**spec, "extra": 1}, {k: v for k, v in spec.items() if k != "epsilon"},
                   {**spec, "format": 99}, {**spec, "hash": "blake2b-v0"}):
        with pytest.raises(ValueError):
            ldpdist.heavy_hitters.from_dict(broken)
    with pytest.raises(ValueError, match="unknown heavy-hitter protocol"):
        ldpdist.heavy_hitters.from_dict({**spec, "protocol": "Nope"})
    assert hash(protocol) == hash(ldpdist.heavy_hitters.from_dict(spec))


def test_state_round_trip_merge_and_duplicates(batch):
    protocol, items, reports = batch
    whole = protocol.aggregator().add(reports)
    first = protocol.aggregator().add(reports[:1000], batch_id="first")
    second = protocol.aggregator().add(reports[1000:], batch_id="second")
    merged = first.merge(second)
    assert merged.n == whole.n == len(items)
    expected = whole.identify(candidates=candidates_for(protocol))
    got = merged.identify(candidates=candidates_for(protocol))
    assert got.hashes.tolist() == expected.hashes.tolist()
    np.testing.assert_array_equal(got.estimates, expected.estimates)
    restored = aggregator_from_bytes(merged.to_bytes(), protocol)
    assert restored.n == merged.n and restored.batches == merged.batches
    assert restored.identify(candidates=candidates_for(protocol)).hashes.tolist() == expected.hashes.tolist()
    assert type(restored).from_bytes(merged.to_bytes()).n == merged.n
    import pickle
    assert pickle.loads(pickle.dumps(merged)).n == merged.n
    with pytest.raises(DuplicateBatchError):
        merged.add(reports[:10], batch_id="first")
    with pytest.raises(DuplicateBatchError):
        restored.merge(protocol.aggregator().add(reports[:5], batch_id="second"))
    with pytest.raises(ValueError, match="itself"):
        merged.merge(merged)


def test_corrupt_states_are_refused(batch):
    protocol, _items, reports = batch
    state = bytearray(protocol.aggregator().add(reports[:200]).to_bytes())
    header_end = len(b"LDPDIST-HH-STATE\n") + 8 + int.from_bytes(state[17:25], "little")
    # every byte of the magic, the length and the header (n, batch ids, spec: a change of
    # n alone once went unnoticed when the sums still fitted), the payload, the checksum
    for position in [*range(header_end), len(state) // 2, len(state) - 1]:
        bad = bytearray(state)
        bad[position] ^= 0x01
        with pytest.raises(IntegrityError):
            aggregator_from_bytes(bytes(bad))
    with pytest.raises(IntegrityError):
        aggregator_from_bytes(bytes(state[:-3]))
    with pytest.raises(IntegrityError):
        aggregator_from_bytes(b"not a state at all")


def test_mix_ups_are_refused(batch, name, tmp_path):
    protocol, items, reports = batch
    spec = protocol.to_dict()
    other = ldpdist.heavy_hitters.from_dict({**spec, "seed": spec["seed"] + 1})
    with pytest.raises(SpecMismatchError):
        other.aggregator().add(reports)
    with pytest.raises(SpecMismatchError):
        other.aggregator().merge(protocol.aggregator().add(reports[:10]))
    with pytest.raises(SpecMismatchError):
        aggregator_from_bytes(protocol.aggregator().add(reports[:10]).to_bytes(), other)
    with pytest.raises(TypeError, match="as_reports"):
        protocol.aggregator().add(np.asarray(reports))
    path = tmp_path / "r.ldpr"
    write_reports(path, protocol, reports)
    with pytest.raises(SpecMismatchError):
        read_reports(path, other)
    with pytest.raises(SpecMismatchError):
        other.aggregator().add(read_reports(path))
    file_batch = read_reports(path, protocol)
    aggregator = protocol.aggregator().add(file_batch)
    with pytest.raises(DuplicateBatchError):
        aggregator.add(read_reports(path))
    assert aggregator.identify(candidates=candidates_for(protocol)).hashes.tolist() == \
        protocol.aggregator().add(reports).identify(candidates=candidates_for(protocol)).hashes.tolist()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        read_reports(path, protocol)


def test_malformed_reports_raise_or_drop(batch):
    protocol, _items, reports = batch
    array = np.asarray(reports[:50]).copy()
    field = "group" if "group" in array.dtype.names else array.dtype.names[0]
    array[field][7] = np.iinfo(array.dtype[field].base).max  # no protocol uses the top value
    bad = protocol.as_reports(array)
    aggregator = protocol.aggregator()
    with pytest.raises(ValueError, match=r"reports\[7\]"):
        aggregator.add(bad)
    assert aggregator.n == 0
    aggregator.add(bad, on_invalid="drop")
    assert (aggregator.n, aggregator.dropped) == (49, 1)
    assert aggregator_from_bytes(aggregator.to_bytes()).dropped == 1
    with pytest.raises(TypeError):
        aggregator.add(protocol.as_reports(np.zeros(3, dtype=np.uint8)))
    with pytest.raises(ValueError, match="on_invalid"):
        aggregator.add(reports, on_invalid="ignore")


def test_bad_input_is_refused_clearly(name):
    protocol = large(name)
    with pytest.raises(ValueError, match="empty"):
        protocol.privatize([])
    with pytest.raises(ValueError, match=r"items\[1\]"):
        protocol.privatize(["fine", "lone \ud800 surrogate"])
    with pytest.raises(ValueError, match=r"items\[0\]"):
        protocol.privatize([b"x" * 5000])
    with pytest.raises(TypeError):
        protocol.privatize("a single string")
    with pytest.raises((TypeError, ValueError)):
        protocol.privatize([1.5])
    with pytest.raises(ValueError):
        protocol.privatize(["a"], seed=-1)
    spec = protocol.to_dict()
    for epsilon in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon"):
            ldpdist.heavy_hitters.from_dict({**spec, "epsilon": epsilon})
    with pytest.raises((TypeError, ValueError)):
        protocol.identify(protocol.privatize(["a"] * 10, seed=1), top=0)


def test_command_line_round_trip(batch, tmp_path):
    protocol, items, _reports = batch
    if any(not isinstance(item, str) or "\n" in item for item in items):
        items = [str(item) if not isinstance(item, bytes) else item.hex() for item in items]
    (tmp_path / "items.txt").write_text("".join(f"{item}\n" for item in items), "utf-8")
    (tmp_path / "spec.json").write_text(ldpdist.specs.to_json(protocol))

    def run(*args, check=True):
        result = subprocess.run([sys.executable, "-m", "ldpdist", "hh", *args], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    run("privatize", "--spec", "spec.json", "items.txt", "--seed", "3", "-o", "a.ldpr")
    run("aggregate", "--spec", "spec.json", "a.ldpr", "-o", "state.bin")
    again = run("aggregate", "--spec", "spec.json", "a.ldpr", "state.bin", "-o", "x.bin",
                check=False)
    assert again.returncode == 2 and "already counted" in again.stderr
    (tmp_path / "cands.txt").write_text("".join(f"{item}\n" for item in sorted(set(items))))
    out = run("identify", "--spec", "spec.json", "state.bin", "--candidates", "cands.txt").stdout
    lines = out.strip().split("\n")
    assert lines[0] == "rank,item,hash,estimate,standard_error"
    direct = protocol.aggregator().add(
        read_reports(tmp_path / "a.ldpr", protocol)).identify(candidates=sorted(set(items)))
    assert [line.split(",")[2] for line in lines[1:]] == [str(int(h)) for h in direct.hashes]
    refused = run("privatize", "--spec", "spec.json", "items.txt", "-o", "a.ldpr", check=False)
    assert refused.returncode == 2 and "exists" in refused.stderr


def test_dask_privatize_and_aggregate(name):
    pytest.importorskip("dask")
    import dask
    import dask.array as da

    import ldpdist.dask as ldask

    protocol = large(name)
    if type(protocol)._privatize_items is not ldpdist.heavy_hitters.HeavyHitterProtocol._privatize_items:
        pytest.skip("the protocol privatizes items, not hashed values")  # covered by its file
    values = da.from_array(protocol.hash(zipf_items(20000, seed=2)), chunks=6000)
    with dask.config.set(scheduler="threads"):
        reports = ldask.privatize(protocol, values, seed=5, block_size=4096)
        total = ldask.aggregate(protocol, reports)
        computed = reports.compute()
    assert total.n == 20000 and len(total.batches) == reports.numblocks[0]
    direct = protocol.aggregator().add(computed).identify(candidates=candidates_for(protocol))
    assert total.identify(candidates=candidates_for(protocol)).hashes.tolist() == direct.hashes.tolist()
    with dask.config.set(scheduler="threads"):
        again = ldask.privatize(protocol, values.rechunk(5000), seed=5, block_size=4096)
        assert np.asarray(again.compute()).tobytes() == np.asarray(computed).tobytes()
