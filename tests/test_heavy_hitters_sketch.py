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
    res = agg.estimate(words[:32], joint=False)
    # exact collision term of each word, from the true frequencies
    b = cms.buckets(cms.hash(words))
    coll = np.array([np.dot(f, (b == b[t]).mean(axis=1)) - f[t] for t in range(32)])
    target = f[:32] + m / (m - 1) * (coll - (1 - f[:32]) / m)
    z = (res.estimates - target) / res.standard_errors
    assert np.max(np.abs(z)) < 4.5
    assert np.sqrt(np.mean(z**2)) < 1.6
    # the joint estimate over the whole support is unbiased for the frequencies themselves
    joint = agg.estimate(words, joint=True)
    z = (joint.estimates - f) / joint.standard_errors
    assert np.max(np.abs(z)) < 4.5
    assert 0.8 < np.sqrt(np.mean(z**2)) < 1.2
    top = agg.identify(top=10, candidates=words)
    assert set(top.items) >= set(words[:6])
    assert list(top.estimates) == sorted(top.estimates, reverse=True)
    with pytest.raises(ValueError, match="dictionary"):
        agg.identify(top=10)


# -- the joint estimate (collisions between candidates removed) --------------------------------

def _collision_matrix(cms, items):
    """D[x, y] = (m pi(x, y) - 1) / (m - 1), pi the fraction of rows where x, y collide."""
    b = cms.buckets(cms.hash(items))
    pi = (b[:, None, :] == b[None, :, :]).mean(axis=2)
    return (cms.m * pi - 1) / (cms.m - 1)


def _expected_table(cms, items, f, n):
    """The support table (d, m) of the expected sums of n users with frequencies f over
    items, from the exact channel (no sampling)."""
    m, d = cms.m, cms.d
    b = cms.buckets(cms.hash(items))
    rows = (b * m ** np.arange(d - 1, -1, -1)).sum(axis=1)
    mass = n * (f @ cms.group_channel()[rows])  # expected number of each report
    if cms.hadamard:
        per = mass.reshape(d, m, 2)  # [j, l, bit]
        signed = per[..., 1] - per[..., 0]  # sum of the ±1 bits
        ls = np.arange(m)
        H = np.array([[(-1) ** bin(l & c).count("1") for c in ls] for l in ls], dtype=float)
        return signed @ H
    patterns = (np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1
    return mass.reshape(d, 2**m) @ patterns  # expected 1-bit count of each bucket


@pytest.mark.parametrize("hadamard", [False, True])
def test_joint_estimate_is_exactly_unbiased_when_the_candidates_cover_the_support(hadamard):
    from ldpdist.heavy_hitters.sketch import _estimate_from_table

    cms = CountMeanSketch(2.0, m=4, d=3, hadamard=hadamard, seed=2)
    # five items whose collision matrix is invertible (the joint estimate is identifiable)
    items = []
    for i in range(200):
        trial = items + [f"w{i}"]
        if np.linalg.matrix_rank(_collision_matrix(cms, trial)) == len(trial):
            items = trial
        if len(items) == 5:
            break
    assert len(items) == 5
    f = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
    n = 2.0**50  # expected sums of many users: the solve's stopping point is negligible
    table = _expected_table(cms, items, f, n)
    hashed = cms.hash(items)
    joint, se = _estimate_from_table(cms, table, n, hashed, True)
    np.testing.assert_allclose(joint, f, rtol=0, atol=1e-9)
    # the independent estimate carries the collision terms: the test can tell them apart
    independent, se0 = _estimate_from_table(cms, table, n, hashed, False)
    assert np.max(np.abs(independent - f)) > 1e-2
    np.testing.assert_allclose(independent, _collision_matrix(cms, items) @ f, atol=1e-9)
    lam = (5 - 1) / (cms.d * (cms.m - 1))
    np.testing.assert_allclose(se, se0 * math.sqrt((3 / (1 - lam) + 1) / 4), rtol=1e-12)


@pytest.mark.parametrize("hadamard", [False, True])
def test_joint_equals_independent_without_excess_collisions(hadamard):
    cms = CountMeanSketch(3.0, m=4, d=4, hadamard=hadamard, seed=1)
    # three items of which each pair shares exactly d/m = 1 row: D is the identity
    words = [f"w{i}" for i in range(300)]
    b = cms.buckets(cms.hash(words))
    shared = (b[:, None, :] == b[None, :, :]).sum(axis=2)
    chosen = next([x, y, z] for x in range(300) for y in range(x + 1, 300)
                  if shared[x, y] == 1 for z in range(y + 1, 300)
                  if shared[x, z] == 1 and shared[y, z] == 1)
    items = [words[i] for i in chosen]
    np.testing.assert_array_equal(_collision_matrix(cms, items), np.eye(3))
    rng = np.random.default_rng(5)
    agg = cms.aggregator().add(cms.privatize(list(rng.choice(words[:20], 3000)), seed=6))
    joint = agg.estimate(items, joint=True)
    independent = agg.estimate(items, joint=False)
    np.testing.assert_array_equal(joint.estimates, independent.estimates)
    # the joint standard errors are the independent ones times the average inflation
    lam = 2 / (4 * 3)
    np.testing.assert_allclose(joint.standard_errors,
                               independent.standard_errors * math.sqrt((3 / (1 - lam) + 1) / 4))
    # one candidate: nothing to remove, the same estimate and standard error
    one_joint, one = agg.estimate(items[:1], joint=True), agg.estimate(items[:1], joint=False)
    assert one_joint.estimates.tolist() == one.estimates.tolist()
    assert one_joint.standard_errors.tolist() == one.standard_errors.tolist()


@pytest.mark.parametrize("hadamard,margin", [(False, 0.3), (True, 0.15)])
def test_joint_ranking_beats_the_independent_one(hadamard, margin):
    # Zipf(1.5): the top items' collision mass on the tail decides the independent ranking
    top, gains = 16, []
    for seed in range(3):
        words, f, items = _zipf_words(1.5, 2000, 100_000, seed=seed)
        cms = CountMeanSketch(4.0, m=256, d=16, hadamard=hadamard, seed=seed)
        agg = cms.aggregator().add(cms.privatize(items, seed=100 + seed))
        truth = {words[i] for i in np.argsort(-f, kind="stable")[:top]}
        recall = [len(truth & set(agg.identify(top=top, candidates=words,
                                               joint=joint).items)) / top
                  for joint in (False, True)]
        assert recall[1] > recall[0]
        gains.append(recall[1] - recall[0])
    assert np.mean(gains) >= margin, gains


def test_joint_estimate_bad_input():
    cms = CountMeanSketch(2.0, m=8, d=2, seed=3)
    agg = cms.aggregator().add(cms.privatize([f"w{i % 5}" for i in range(500)], seed=1))
    for joint in (True, False, None):
        with pytest.raises(ValueError, match="empty"):
            agg.estimate([], joint=joint)
        with pytest.raises(ValueError, match="empty"):
            agg.identify(candidates=[], joint=joint)
    with pytest.raises(TypeError, match="joint"):
        agg.estimate(["w1"], joint="yes")
    # a repeated candidate is one unknown: the same estimate at each of its places
    once = agg.estimate(["w0", "w1", "w2"], joint=True)
    twice = agg.estimate(["w0", "w1", "w0", "w2", "w1"], joint=True)
    np.testing.assert_array_equal(twice.estimates, once.estimates[[0, 1, 0, 2, 1]])
    np.testing.assert_array_equal(twice.standard_errors, once.standard_errors[[0, 1, 0, 2, 1]])
    found = agg.identify(top=3, candidates=["w0", "w1", "w0", "w2", "w1"], joint=True)
    assert sorted(found.items) == ["w0", "w1", "w2"]
    # more distinct candidates than the d (m - 1) = 14 the sketch can tell apart
    many = [f"w{i}" for i in range(15)]
    with pytest.raises(ValueError, match="identifiable"):
        agg.estimate(many, joint=True)
    assert np.all(np.isfinite(agg.estimate(many[:14], joint=True).estimates))
    # the default: independent past λ = (C - 1) / (d (m - 1)) = 1/2 (C > 8); up to it, the
    # blend (1 - w) independent + w joint of decollide.blend
    for size in (9, 15):
        np.testing.assert_array_equal(agg.estimate(many[:size]).estimates,
                                      agg.estimate(many[:size], joint=False).estimates)
    for size in (3, 8):
        _check_blend(agg, many[:size])


def _check_blend(agg, candidates):
    """The default estimate is ``(1 - w) independent + w joint`` with w of decollide.blend
    (and its standard errors ``sqrt(1 + w^2 κ)`` times the independent ones); returns w."""
    from ldpdist.heavy_hitters import decollide

    cms = agg.protocol
    independent = agg.estimate(candidates, joint=False)
    joint = agg.estimate(candidates, joint=True)
    default = agg.estimate(candidates)
    lam = decollide.load(len(set(candidates)), cms.d, cms.m)
    blend = decollide.blend(independent.estimates, joint.estimates,
                            independent.standard_errors**2, lam, cms.m)
    w = blend.weight
    assert 0.0 <= w < 1.0
    assert w == (0.0 if blend.distance <= blend.excess_variance
                 else 1.0 - blend.excess_variance / blend.distance)
    if w == 0.0:  # exactly the independent estimates
        assert default.estimates.tolist() == independent.estimates.tolist()
        assert default.standard_errors.tolist() == independent.standard_errors.tolist()
    else:
        np.testing.assert_allclose(default.estimates, independent.estimates + w * (
            joint.estimates - independent.estimates), rtol=1e-12, atol=1e-15)
        kappa = (cms.m - 1) / cms.m * lam / (1 - lam)
        np.testing.assert_allclose(default.standard_errors, independent.standard_errors
                                   * math.sqrt(1 + w**2 * kappa), rtol=1e-12)
    return w


def test_excess_variance_is_the_noise_of_the_difference():
    # no collision bias to detect (uniform frequencies over the candidates: (D - I) f is
    # about 0): ||independent - joint||^2 is its noise part alone, whose expectation the
    # rule takes to be V = (m - 1) / m · λ / (1 - λ) · sum(σ^2)
    from ldpdist.heavy_hitters import decollide

    ratios = []
    for hadamard in (False, True):
        for seed in range(2):
            cms = CountMeanSketch(2.0, m=256, d=16, hadamard=hadamard, seed=seed)
            words = [f"w{i}" for i in range(2000)]
            hashed = cms.hash(words)
            users = np.random.default_rng(seed).integers(0, 2000, 50_000)
            agg = cms.aggregator().add(cms.privatize_hashed(hashed[users], seed=seed + 10))
            independent = agg.estimate(words, joint=False)
            joint = agg.estimate(words, joint=True)
            blend = decollide.blend(independent.estimates, joint.estimates,
                                    independent.standard_errors**2,
                                    decollide.load(2000, 16, 256), 256)
            ratios.append(blend.distance / blend.excess_variance)
    # 2000 candidates: each ratio is within a few percent of its mean
    assert 0.85 < np.mean(ratios) < 1.2, ratios
    assert decollide.excess_variance(np.ones(3), 1.0, 8) == math.inf


@pytest.mark.parametrize("hadamard", [False, True])
def test_default_blend_follows_the_collision_bias(hadamard):
    # Zipf(1.5) over 2000 candidates, m = 256, d = 16 (λ = 0.49): at ε = 4 and 10^5 users
    # the collision bias dominates (w > 3/4); at ε = 0.5 and 10^4 users the privacy noise
    # does (w near 0). The default's recall of the top 16 is not below the better of the
    # two estimates' by more than one item per run on average.
    top = 16
    for epsilon, n, low, high in ((4.0, 100_000, 0.75, 1.0), (0.5, 10_000, 0.0, 0.2)):
        recalls, weights = [], []
        for seed in range(3):
            words, f, items = _zipf_words(1.5, 2000, n, seed=seed)
            cms = CountMeanSketch(epsilon, m=256, d=16, hadamard=hadamard, seed=seed)
            agg = cms.aggregator().add(cms.privatize(items, seed=100 + seed))
            truth = {words[i] for i in np.argsort(-f, kind="stable")[:top]}
            recalls.append([len(truth & set(agg.identify(top=top, candidates=words,
                                                         joint=joint).items)) / top
                            for joint in (False, True, None)])
            weights.append(_check_blend(agg, words))
        assert low <= min(weights) and max(weights) <= high, (epsilon, weights)
        independent, joint, default = np.mean(recalls, axis=0)
        assert default >= max(independent, joint) - 1 / top, (epsilon, recalls)


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


def test_flip_kernel_bits_are_bernoulli_and_reproducible():
    """CMS clients' flips (the Rust kernel: a bit-sliced comparison of 16-bit uniforms with F,
    stopped once every bit of a 64-bit word is decided): each bit is 1 with probability
    F / 2**16 (chi-square over the bit positions, and over the number of ones per word:
    Binomial(64, q), which also tests the bits of a word jointly), padding bits zero; the
    bits of users from a block boundary on do not depend on where the call starts; seeded
    reports repeat, others differ."""
    from ldpdist import _core
    cms = CountMeanSketch(3.0, m=100, d=4, seed=2)
    sk = cms._sketch
    F, q, n = sk.F, sk.q, 30_000
    key = bytes(range(32))
    words = sk._flip_words(key, 0, n)
    assert words.shape == (n, 2) and not (words[:, 1] >> np.uint64(36)).any()
    ones = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little", count=100)
    per_bit = ones.sum(axis=0)
    chi2 = float(((per_bit - n * q) ** 2 / (n * q * (1 - q))).sum())
    assert stats.chi2.sf(chi2, 100) > 1e-4
    full = _core.cms_flip_words(key, 0, n, 1024, F, 16)
    popcount = np.bitwise_count(full).astype(np.int64)
    observed = np.bincount(popcount, minlength=65)
    pmf = np.array([math.comb(64, k) * q**k * (1 - q) ** (64 - k) for k in range(65)])
    keep = pmf * popcount.size > 5
    expected = pmf[keep] * popcount.size
    chi2 = float(((observed[keep] - expected) ** 2 / expected).sum())
    assert stats.chi2.sf(chi2, int(keep.sum()) - 1) > 1e-4
    # a wrong probability is rejected: (F + 300) / 2**16
    wrong = _core.cms_flip_words(key, 0, n, 100, F + 300, 16).reshape(n, 2)
    wrong_bits = np.unpackbits(wrong.view(np.uint8), axis=1, bitorder="little", count=100)
    chi2 = float(((wrong_bits.sum(axis=0) - n * q) ** 2 / (n * q * (1 - q))).sum())
    assert stats.chi2.sf(chi2, 100) < 1e-6
    block = _core.CMS_FLIP_BLOCK
    assert np.array_equal(sk._flip_words(key, block, n - block), words[block:])
    assert np.array_equal(sk._flip_words(key, 0, n), words)
    assert not np.array_equal(sk._flip_words(bytes(32), 0, n), words)
    with pytest.raises(ValueError, match="multiple"):
        sk._flip_words(key, 5, 10)
    items = [f"w{i % 50}" for i in range(3000)]
    r1, r2 = cms.privatize(items, seed=5), cms.privatize(items, seed=5)
    assert np.array_equal(np.asarray(r1), np.asarray(r2))
    assert not np.array_equal(np.asarray(cms.privatize(items, seed=6)), np.asarray(r1))
    assert not np.array_equal(np.asarray(cms.privatize(items)), np.asarray(cms.privatize(items)))
