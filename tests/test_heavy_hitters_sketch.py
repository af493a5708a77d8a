"""Apple's count-mean sketch (CMS) and its Hadamard variant (HCMS): the row-hash spec and
its test vectors, exact ε on the exact channels, exact unbiasedness of the estimator (with
its collision term), sampler fidelity, an end-to-end run, round trips and bad input."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import chi_square as stats  # scipy.stats without scipy (not a dependency)

import ldpdist
from ldpdist.heavy_hitters import MAX_ITEM_BYTES, from_dict
from ldpdist.heavy_hitters.sketch import (CountMeanSketch, CountMeanSketchAggregator,
                                          sketch_buckets, sketch_salts)

VECTORS = Path(__file__).parent / "data" / "heavy_hitters_sketch_v1.json"
M64 = 2**64 - 1


def _fmix(z):
    z ^= z >> 33
    z = (z * 0xFF51AFD7ED558CCD) & M64
    z ^= z >> 33
    z = (z * 0xC4CEB9FE1A85EC53) & M64
    return z ^ (z >> 33)


def test_row_hash_test_vectors():
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert len(vectors) >= 100
    for v in vectors:
        seed, label, j, m, value = (int(v["seed"]), v["label"].encode(), v["row"], v["m"],
                                    int(v["value"]))
        # the specification, written independently of the implementation
        salt = int.from_bytes(hashlib.blake2b(label + j.to_bytes(4, "little"), digest_size=8,
                                              key=seed.to_bytes(32, "little"),
                                              person=b"ldpdist.cms.v1").digest(), "little")
        assert salt == int(v["salt"]) == int(sketch_salts(seed, j + 1, label)[j])
        bucket = (_fmix(value ^ salt) * m) >> 64
        assert bucket == v["bucket"]
        got = sketch_buckets(np.array([value], dtype=np.uint64), np.uint64(salt), m)[0]
        assert got == bucket


def test_protocol_buckets_use_the_item_hash():
    cms = CountMeanSketch(2.0, m=1000, d=5, seed=7)
    items = ["a", b"a", 97, "héllo"]
    hashed = cms.hash(items)
    b = cms.buckets(hashed)
    for i in range(len(items)):
        for j in range(5):
            assert b[i, j] == (_fmix(int(hashed[i]) ^ int(cms.salts[j])) * 1000) >> 64


# -- exact channels ---------------------------------------------------------------------------

@pytest.mark.parametrize("hadamard,m,d", [(False, 4, 2), (False, 3, 2), (True, 4, 2),
                                          (True, 8, 1), (False, 2, 3)])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 9.0])
def test_exact_epsilon_on_the_channel(hadamard, m, d, epsilon):
    cms = CountMeanSketch(epsilon, m=m, d=d, hadamard=hadamard)
    Q = cms.group_channel(0)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, atol=1e-12)
    worst = float(np.max(np.log(Q.max(axis=0) / Q.min(axis=0))))
    assert worst == pytest.approx(cms.realized_epsilon, abs=1e-12)
    assert cms.realized_epsilon <= epsilon
    assert cms.realized_epsilon > epsilon - (0.01 if not hadamard else 1e-9)
    unit = 2**16 if not hadamard else 2**53
    assert (cms.q * unit) == int(cms.q * unit)  # exactly representable


def _single_report(cms, col):
    """The report of column ``col`` of the exact channel."""
    out = np.zeros(1, dtype=cms.report_dtype)
    if cms.hadamard:
        (j, l), bit = divmod(col // 2, cms.m), col % 2
        out["row"], out["col"], out["bit"] = j, l, bit
    else:
        j, pattern = divmod(col, 2**cms.m)
        out["row"], out["bits"][0, 0] = j, pattern
    return cms.as_reports(out)


@pytest.mark.parametrize("hadamard", [False, True])
def test_exact_unbiasedness_with_the_collision_term(hadamard):
    m, d = 4, 2
    cms = CountMeanSketch(3.0, m=m, d=d, hadamard=hadamard, seed=3)
    items = [f"w{i}" for i in range(7)]
    f = np.array([0.3, 0.2, 0.15, 0.15, 0.1, 0.06, 0.04])
    b = cms.buckets(cms.hash(items))  # (7, d)
    row = (b * m ** np.arange(d - 1, -1, -1)).sum(axis=1)
    Q = cms.group_channel()
    per_col = np.array([cms.estimate(_single_report(cms, c), items).estimates
                        for c in range(Q.shape[1])])  # (cols, items)
    expected = np.einsum("x,xc,ct->t", f, Q[row], per_col)  # E over users of the estimator
    for t in range(len(items)):
        share = (b == b[t]).mean(axis=1)  # fraction of rows where item y collides with t
        share[t] = 0.0
        collision = np.dot(f, share)
        documented = f[t] + m / (m - 1) * (collision - (1 - f[t]) / m)
        assert expected[t] == pytest.approx(documented, abs=1e-12)
    # the term is not zero here: the test can tell a wrong estimator from a right one
    assert np.max(np.abs(expected - f)) > 1e-3


@pytest.mark.parametrize("hadamard", [False, True])
def test_sampler_fidelity(hadamard):
    m, d = 4, 2
    cms = CountMeanSketch(2.0, m=m, d=d, hadamard=hadamard, seed=1)
    n = 40000
    reports = np.asarray(cms.privatize(["x"] * n, seed=11))
    b = cms.buckets(cms.hash(["x"]))[0]
    Q = cms.group_channel()[int((b * m ** np.arange(d - 1, -1, -1)).sum())]
    if hadamard:
        cols = (reports["row"].astype(int) * m + reports["col"]) * 2 + reports["bit"]
    else:
        cols = reports["row"].astype(int) * 2**m + reports["bits"][:, 0].astype(int)
    observed = np.bincount(cols, minlength=Q.size)
    expected = n * Q
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert stats.chi2.sf(chi2, Q.size - 1) > 1e-4
    # and it rejects the wrong channel (ε = 1.5 instead of 2)
    wrong = n * CountMeanSketch(1.5, m=m, d=d, hadamard=hadamard, seed=1).group_channel()[
        int((b * m ** np.arange(d - 1, -1, -1)).sum())]
    assert stats.chi2.sf(float(((observed - wrong) ** 2 / wrong).sum()), Q.size - 1) < 1e-6


def test_sampler_padding_and_many_words():
    cms = CountMeanSketch(1.0, m=100, d=3)
    reports = np.asarray(cms.privatize([str(i) for i in range(3000)], seed=2))
    assert reports["bits"].shape == (3000, 2)
    assert not (reports["bits"][:, 1] >> np.uint64(36)).any()  # bits past m = 100 are zero
    ones = np.unpackbits(reports["bits"].view(np.uint8), axis=1, bitorder="little", count=100)
    # every bit is 1 with probability q, except the user's bucket (1 - q): mean ~ q + (1-2q)/m
    mean = ones.mean()
    expected = cms.q + (1 - 2 * cms.q) / 100
    assert abs(mean - expected) < 5 * math.sqrt(expected / ones.size)


@pytest.mark.parametrize("m,d,n", [(100, 3, 5001), (1024, 2, 777), (7, 1, 64), (64, 5, 3)])
def test_cms_sums_are_the_exact_bit_counts(m, d, n):
    cms = CountMeanSketch(1.0, m=m, d=d)
    reports = cms.privatize([f"u{i % 50}" for i in range(n)], seed=4)
    array = np.asarray(reports)
    bits = np.unpackbits(array["bits"].astype("<u8").view(np.uint8).reshape(n, -1), axis=1,
                         bitorder="little", count=m).astype(np.int64)
    expected = np.zeros((d, m + 1), dtype=np.int64)
    for j in range(d):
        expected[j, :m] = bits[array["row"] == j].sum(axis=0)
        expected[j, m] = np.count_nonzero(array["row"] == j)
    assert np.array_equal(cms.aggregator().add(reports).sums, expected)


# -- end to end -------------------------------------------------------------------------------

def _zipf_words(s, k, n, seed):
    rng = np.random.default_rng(seed)
    words = [f"word{i:04d}" for i in range(k)]
    p = np.arange(1, k + 1, dtype=float) ** -s
    p /= p.sum()
    counts = rng.multinomial(n, p)
    items = np.repeat(np.array(words, dtype=object), counts)
    rng.shuffle(items)
    return words, counts / n, list(items)


@pytest.mark.parametrize("hadamard,m,d", [(False, 256, 32), (True, 1024, 64)])
def test_end_to_end_top_words(hadamard, m, d):
    words, f, items = _zipf_words(1.5, 1000, 200_000, seed=4)
    cms = CountMeanSketch(4.0, m=m, d=d, hadamard=hadamard, top=10, seed=5)
    agg = cms.aggregator().add(cms.privatize(items, seed=6))
    res = agg.estimate(words[:32])
    # exact collision term of each word, from the true frequencies
    b = cms.buckets(cms.hash(words))
    coll = np.array([np.dot(f, (b == b[t]).mean(axis=1)) - f[t] for t in range(32)])
    target = f[:32] + m / (m - 1) * (coll - (1 - f[:32]) / m)
    z = (res.estimates - target) / res.standard_errors
    assert np.max(np.abs(z)) < 4.5
    assert np.sqrt(np.mean(z**2)) < 1.6
    top = agg.identify(top=10, candidates=words)
    assert set(top.items) >= set(words[:6])
    assert list(top.estimates) == sorted(top.estimates, reverse=True)
    with pytest.raises(ValueError, match="dictionary"):
        agg.identify(top=10)


# -- determinism, round trips -----------------------------------------------------------------

@pytest.mark.parametrize("hadamard", [False, True])
def test_determinism_and_round_trips(hadamard):
    cms = CountMeanSketch(2.0, m=64, d=8, hadamard=hadamard, seed=9)
    items = [f"i{i % 37}" for i in range(5000)]
    r1, r2 = cms.privatize(items, seed=3), cms.privatize(items, seed=3)
    assert np.array_equal(np.asarray(r1), np.asarray(r2))
    assert np.array_equal(np.asarray(cms.privatize_hashed(cms.hash(items), seed=3)),
                          np.asarray(r1))
    assert from_dict(cms.to_dict()) == cms
    assert from_dict(json.loads(json.dumps(cms.to_dict()))).fingerprint == cms.fingerprint
    whole = cms.aggregator().add(r1)
    a, b = cms.aggregator().add(r1[:2000]), cms.aggregator().add(r1[2000:])
    a.merge(b)
    assert np.array_equal(a.sums, whole.sums) and a.n == whole.n == 5000
    state = whole.to_bytes()
    back = CountMeanSketchAggregator.from_bytes(state, expect=cms)
    assert np.array_equal(back.sums, whole.sums) and back.n == 5000
    np.testing.assert_array_equal(back.estimate(["i1", "i2"]).estimates,
                                  whole.estimate(["i1", "i2"]).estimates)
    corrupt = bytearray(state)
    corrupt[-3] ^= 1
    with pytest.raises(ldpdist.IntegrityError):
        CountMeanSketchAggregator.from_bytes(bytes(corrupt))
    other = CountMeanSketch(2.0, m=64, d=8, hadamard=hadamard, seed=10)
    with pytest.raises(ldpdist.SpecMismatchError):
        CountMeanSketchAggregator.from_bytes(state, expect=other)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().add(r1)


def test_state_with_impossible_sums_is_refused():
    cms = CountMeanSketch(2.0, m=8, d=2)
    agg = cms.aggregator().add(cms.privatize(["a"] * 50, seed=1))
    state = agg.to_bytes()
    # rebuild a state whose checksum is right but whose sums exceed the row's reports
    m = len(b"LDPDIST-HH-STATE\n")
    (size,) = struct.unpack("<Q", state[m:m + 8])
    header = json.loads(state[m + 8:m + 8 + size])
    sums = np.frombuffer(state[m + 8 + size:-32], dtype="<i8").copy().reshape(2, 9)
    sums[0, 0] = sums[0, 8] + 1
    payload = sums.tobytes()
    header["sha256"] = hashlib.sha256(payload).hexdigest()
    head = ldpdist.specs.canonical_json(header).encode("ascii")
    body = state[:m] + struct.pack("<Q", len(head)) + head + payload
    forged = body + hashlib.sha256(body).digest()
    with pytest.raises(ldpdist.IntegrityError, match="sums"):
        CountMeanSketchAggregator.from_bytes(forged)


# -- bad input --------------------------------------------------------------------------------

def test_bad_parameters():
    for eps in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            CountMeanSketch(eps)
    with pytest.raises(ValueError, match="power of two"):
        CountMeanSketch(1.0, m=1000, hadamard=True)
    CountMeanSketch(1.0, m=1000)  # CMS takes any m
    with pytest.raises(ValueError):
        CountMeanSketch(1.0, m=1)
    with pytest.raises(ValueError):
        CountMeanSketch(1.0, d=0)
    with pytest.raises(ValueError, match="cells"):
        CountMeanSketch(1.0, m=2**16, d=2**9)
    with pytest.raises(TypeError):
        CountMeanSketch(1.0, hadamard=1)
    with pytest.raises(ValueError, match="too small"):
        CountMeanSketch(1e-6)


def test_bad_items_and_reports():
    cms = CountMeanSketch(2.0, m=100, d=4)
    with pytest.raises(ValueError, match="empty"):
        cms.privatize([])
    with pytest.raises(ValueError, match="surrogate"):
        cms.privatize(["ok", "\ud800"])
    with pytest.raises(ValueError, match="bytes"):
        cms.privatize([b"x" * (MAX_ITEM_BYTES + 1)])
    with pytest.raises(TypeError):
        cms.privatize([1.5])
    good = np.asarray(cms.privatize(["a", "b"], seed=1)).copy()
    bad = good.copy()
    bad["row"][1] = 4
    with pytest.raises(ValueError, match=r"reports\[1\]"):
        cms.aggregator().add(cms.as_reports(bad))
    bad = good.copy()
    bad["bits"][0, 1] |= np.uint64(1) << np.uint64(40)  # bucket 104 >= m
    with pytest.raises(ValueError, match=r"reports\[0\]"):
        cms.aggregator().add(cms.as_reports(bad))
    with pytest.raises(TypeError):
        cms.aggregator().add(good)  # a plain array is not declared reports
    h = CountMeanSketch(2.0, m=64, d=4, hadamard=True)
    good = np.asarray(h.privatize(["a", "b"], seed=1)).copy()
    for field, value in (("col", 64), ("bit", 2), ("row", 9)):
        bad = good.copy()
        bad[field][0] = value
        with pytest.raises(ValueError, match=r"reports\[0\]"):
            h.aggregator().add(h.as_reports(bad))
    with pytest.raises(ValueError, match="no reports"):
        h.aggregator().estimate(["a"])
