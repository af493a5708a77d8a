"""ldpdist.heavy_hitters.treehist: TreeHist's level hash (spec), exact ε of every level's
channel, exact unbiasedness of the (de-collided) frequency oracle, sampler fidelity,
determinism, spec/state round trips and mix-ups, bad input, and an end-to-end recovery."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

import ldpdist
from ldpdist.heavy_hitters import protocol as hh_protocol
from ldpdist.heavy_hitters.treehist import (DESCENT_PRECISION, TreeHist, TreeHistAggregator,
                                            level_hash, level_keys)

MASK = 2**64 - 1


def _level_hash_spec(x: int, key: int, g: int) -> int:
    """The level hash of the docs, in Python integers (written independently)."""
    z = (x + key) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return ((z >> 32) * g) >> 32


def _expected_sums(th: TreeHist, group: int, support: np.ndarray, f: np.ndarray,
                   n: float = 2.0**20) -> np.ndarray:
    """Expected sums S[j, r, y] of n users at level ``group`` whose prefixes are ``support``
    with frequencies ``f``, computed from the channel's formula."""
    R, g, p = th.hashes, th.g, th.p
    u = th.buckets(support, group).astype(np.int64)  # (R, |support|)
    rows = np.full((support.size, R, g), (1 - p) / (g - 1) / R)
    idx = np.arange(support.size)[:, None], np.arange(R)[None, :]
    rows[idx[0], idx[1], u.T] = p / R
    sums = np.zeros((th.groups, R, g))
    sums[group] = n * np.tensordot(f, rows, axes=1)
    return sums


# -- the level hash ---------------------------------------------------------------------

def test_level_keys_and_hash_follow_the_spec():
    seed = 2**130 + 7
    keys = level_keys(seed, 3, 5)
    for j, r in [(0, 0), (2, 4), (1, 3)]:
        digest = hashlib.blake2b(bytes([j]) + r.to_bytes(4, "little"), digest_size=8,
                                 key=seed.to_bytes(32, "little"),
                                 person=b"ldpdist.hh.th1").digest()
        assert int(keys[j, r]) == int.from_bytes(digest, "little")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**63, size=50, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    for g in (2, 56, 256):
        got = level_hash(x, keys[1, 2], g)
        assert got.tolist() == [_level_hash_spec(int(v), int(keys[1, 2]), g) for v in x]
    th = TreeHist(4.0, bits=20, hashes=7, seed=seed)
    assert th.keys.shape == (th.groups, 7) and int(th.keys[0, 3]) == \
        int(level_keys(seed, 1, 4)[0, 3])


def test_level_hash_collisions_are_near_one_in_g():
    """Over the R = 1024 default hash functions, two sibling prefixes share a bucket a
    fraction ~1/g of the time (binomial spread)."""
    th = TreeHist(4.0, bits=32)
    x = np.arange(2**12, 2**12 + 64, dtype=np.uint64)
    u = th.buckets(x, 3)
    pi = (u[:, :, None] == u[:, None, :]).mean(axis=0)[np.triu_indices(64, 1)]
    sd = math.sqrt((1 / th.g) * (1 - 1 / th.g) / th.hashes)
    assert abs(pi.mean() - 1 / th.g) < sd
    assert np.abs(pi - 1 / th.g).max() < 6 * sd


# -- the channel ------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0, 9.0])
def test_exact_epsilon_of_every_level(epsilon):
    th = TreeHist(epsilon, bits=6, top=2, step_bits=2, hashes=3)
    assert th.groups == 3
    assert th.realized_epsilon <= epsilon
    assert th.realized_epsilon == pytest.approx(epsilon, abs=1e-9)
    for group in range(th.groups):
        Q = th.group_channel(group)
        assert Q.shape == (2**th.prefix_bits[group], th.hashes * th.g)
        np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        ratio = float(np.max(Q.max(axis=0) / Q.min(axis=0)))
        assert math.log(ratio) == pytest.approx(th.realized_epsilon, rel=1e-12)
        assert math.log(ratio) <= epsilon + 1e-12
    with pytest.raises(ValueError, match="max_entries"):
        TreeHist(1.0, bits=30).group_channel(1)


def test_oracle_expectation_matches_the_documented_collision_formula():
    """E[raw estimate of x] = sum_x' D[x, x'] f(x'), D = (g pi - 1)/(g - 1), from the exact
    channel (every input of a small level)."""
    th = TreeHist(2.0, bits=5, top=2, step_bits=3, hashes=4)
    group = th.groups - 1
    k = 2**th.prefix_bits[group]
    f = np.random.default_rng(1).dirichlet(np.ones(k))
    Q = th.group_channel(group)
    u = th.buckets(np.arange(k, dtype=np.uint64), group).astype(np.int64)  # (R, k)
    cols = (np.arange(th.hashes)[:, None] * th.g + u)  # (R, k): the reports supporting x
    support = np.zeros((Q.shape[1], k))
    support[cols, np.arange(k)[None, :]] = 1.0
    share = f @ Q @ support  # E[C(x) / n]
    raw = (share - th.q) / (th.p - th.q)
    pi = (u[:, :, None] == u[:, None, :]).mean(axis=0)
    D = (th.g * pi - 1) / (th.g - 1)
    np.testing.assert_allclose(raw, D @ f, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bits,hashes", [(5, 4), (6, 16), (64, 1024)])
def test_exact_unbiasedness_when_the_support_is_among_the_candidates(bits, hashes):
    """The server's estimate, applied to the exact expected sums, is the true frequency
    (to 1e-12) whenever the users' values lie among the candidates: the collisions between
    candidates are removed exactly."""
    th = TreeHist(3.0, bits=bits, top=2, step_bits=3, hashes=hashes)
    group = th.groups - 1
    rng = np.random.default_rng(bits)
    if bits <= 6:
        candidates = np.arange(2**bits, dtype=np.uint64)
    else:
        candidates = np.unique(rng.integers(0, 2**63, size=40, dtype=np.uint64))
    f = rng.dirichlet(np.ones(candidates.size) * 0.5)
    f[::3] = 0.0  # some candidates hold nobody
    f /= f.sum()
    sums = _expected_sums(th, group, candidates, f)
    aggregator = th.aggregator()
    estimates, errors, n = aggregator._frequencies(group, candidates, sums)
    np.testing.assert_allclose(estimates, f, rtol=0, atol=1e-12)
    assert n == 2**20 and np.all(errors > 0)
    # the raw (not de-collided) estimates are not exact: the correction does something
    flat = th.buckets(candidates, group).astype(np.int64) + \
        (np.arange(th.hashes) * th.g)[:, None]
    share = sums[group].reshape(-1)[flat].sum(axis=0) / sums[group].sum()
    raw = (share - th.q) / (th.p - th.q)
    assert np.abs(raw - f).max() > 1e-6


def test_estimate_is_unbiased_on_the_full_value_level():
    """`estimate(candidates)` on the last level: exact on expected sums (through the public
    method, with the sums swapped in)."""
    th = TreeHist(4.0, bits=64, hashes=256)
    words = [f"word{i}" for i in range(12)]
    hashed = th.hash(words)
    f = np.linspace(1, 12, 12)[::-1]
    f /= f.sum()
    aggregator = th.aggregator()
    aggregator._sums = _expected_sums(th, th.groups - 1, hashed, f)
    result = aggregator.estimate(words)
    assert result.items == words and result.hashes.tolist() == hashed.tolist()
    np.testing.assert_allclose(result.estimates, f, rtol=0, atol=1e-12)
    # a candidate given twice (or two items with one hashed value) is one value
    twice = aggregator.estimate(words + words[:1])
    np.testing.assert_allclose(twice.estimates, f[list(range(12)) + [0]], rtol=0, atol=1e-12)
    # a support not among the candidates leaves collision terms (not exact any more)
    assert np.abs(aggregator.estimate(words[:3]).estimates - f[:3]).max() > 1e-6


# -- the sampler ------------------------------------------------------------------------

def test_sampler_matches_the_channel():
    """Reports of a seeded privatize on a tiny domain: chi-square against the exact
    distribution (level uniform, then that level's channel)."""
    th = TreeHist(1.0, bits=3, top=1, step_bits=1, start_bits=1, hashes=2)
    L, R, g = th.groups, th.hashes, th.g
    f = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02])
    n = 120_000
    values = np.repeat(np.arange(8, dtype=np.uint64), np.round(f * n).astype(int))
    reports = np.asarray(th.privatize_hashed(values, seed=11))
    observed = np.bincount((reports["group"].astype(int) * R + reports["hash"]) * g
                           + reports["y"], minlength=L * R * g)
    expected = []
    for j in range(L):
        shift = th.bits - th.prefix_bits[j]
        prefix_f = np.bincount(np.arange(8) >> shift, weights=f,
                               minlength=2**th.prefix_bits[j])
        expected.append(prefix_f @ th.group_channel(j) / L)
    expected = np.concatenate(expected) * values.size
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    df = observed.size - 1
    assert chi2 < df + 6 * math.sqrt(2 * df), (chi2, df)  # p ~ 1e-6 under the null
    # and the test can fail: the same reports against a wrong keep probability
    wrong = expected * (1 + 0.05 * (np.arange(observed.size) % g == 0))
    wrong *= values.size / wrong.sum()
    assert float(((observed - wrong) ** 2 / wrong).sum()) > df + 6 * math.sqrt(2 * df)


def test_determinism_and_hashed_entry_point():
    th = TreeHist(2.0, bits=24, top=4)
    items = [f"w{i % 37}" for i in range(70_000)]  # more than one sampler block
    a, b = th.privatize(items, seed=9), th.privatize(items, seed=9)
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert np.asarray(th.privatize(items, seed=10)).tobytes() != np.asarray(a).tobytes()
    c = th.privatize_hashed(th.hash(items), seed=9)
    assert np.asarray(c).tobytes() == np.asarray(a).tobytes()
    first, second = th.identify(a), th.identify(b)
    assert first.hashes.tolist() == second.hashes.tolist()
    assert first.estimates.tolist() == second.estimates.tolist()


# -- artifacts --------------------------------------------------------------------------

def test_spec_round_trip_and_registry():
    th = TreeHist(1.5, top=16, bits=40, start_bits=7, step_bits=5, hashes=300,
                  threshold=1.5, seed=2**200)
    spec = json.loads(json.dumps(th.to_dict()))
    assert spec["protocol"] == "TreeHist"
    assert TreeHist.from_dict(spec) == th == hh_protocol.from_dict(spec)
    assert TreeHist.from_dict(spec).fingerprint == th.fingerprint
    assert hash(TreeHist.from_dict(spec)) == hash(th)
    assert TreeHist(1.5) != TreeHist(1.5, hashes=512) != TreeHist(1.5, threshold=1.0)
    assert "TreeHist" in hh_protocol.protocols()
    with pytest.raises(ValueError, match="unknown fields"):
        TreeHist.from_dict({**spec, "extra": 1})
    with pytest.raises(ValueError, match=r"missing fields \['hashes'\]"):
        TreeHist.from_dict({k: v for k, v in spec.items() if k != "hashes"})
    with pytest.raises(ValueError, match="unsupported"):
        TreeHist.from_dict({**spec, "hash": "blake2b-v2"})


def test_aggregator_merge_state_and_mixups():
    th = TreeHist(3.0, bits=20, top=8, hashes=64)
    items = [f"w{int(i)}" for i in np.random.default_rng(0).zipf(1.6, 8000) % 300]
    reports = th.privatize(items, seed=1)
    whole = th.aggregator().add(reports)
    left = th.aggregator().add(reports[:3000])
    right = th.aggregator().add(reports[3000:])
    merged = left.merge(right)
    assert merged.n == whole.n == 8000
    assert np.array_equal(merged.sums, whole.sums)
    assert merged.identify().hashes.tolist() == whole.identify().hashes.tolist()
    assert int(whole.group_sizes().sum()) == 8000
    state = whole.to_bytes()
    back = TreeHistAggregator.from_bytes(state, expect=th)
    assert back.n == 8000 and np.array_equal(back.sums, whole.sums)
    assert back.identify().estimates.tolist() == whole.identify().estimates.tolist()
    corrupt = bytearray(state)
    corrupt[-1] ^= 1
    with pytest.raises(ldpdist.IntegrityError, match="checksum"):
        TreeHistAggregator.from_bytes(bytes(corrupt))
    other = TreeHist(3.0, bits=20, top=8, hashes=64, seed=1)
    with pytest.raises(ldpdist.SpecMismatchError):
        TreeHistAggregator.from_bytes(state, expect=other)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().add(reports)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().merge(whole)
    with pytest.raises(TypeError, match="takes reports"):
        th.aggregator().add(np.asarray(reports))
    for field, bound in [("y", th.g), ("hash", th.hashes), ("group", th.groups)]:
        bad = np.asarray(reports).copy()
        bad[field][7] = bound
        with pytest.raises(ValueError, match=rf"reports\[7\] is malformed: {field} = {bound}"):
            th.aggregator().add(th.as_reports(bad))
    with pytest.raises(ValueError, match="level 0 .* has no reports"):
        th.aggregator().identify()
    with pytest.raises(ValueError, match="top"):
        whole.identify(top=9)


# -- bad input --------------------------------------------------------------------------

def test_bad_input():
    th = TreeHist(2.0, bits=32)
    with pytest.raises(ValueError, match="items is empty"):
        th.privatize([])
    with pytest.raises(ValueError, match=r"items\[1\] is a str with no UTF-8 encoding"):
        th.privatize(["ok", "a\ud800"])
    with pytest.raises(ValueError, match=r"items\[0\] has 1025 bytes"):
        th.privatize([b"x" * 1025])
    with pytest.raises(ValueError, match="32-bit hashed value"):
        th.privatize_hashed(np.array([2**32], dtype=np.uint64))
    for epsilon in (0.0, -1.0):
        with pytest.raises(ValueError, match="epsilon must be > 0"):
            TreeHist(epsilon)
    with pytest.raises(ValueError, match="finite"):
        TreeHist(float("nan"))
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        TreeHist(1.0, threshold=-1)
    with pytest.raises(ValueError, match="hashes"):
        TreeHist(1.0, hashes=0)
    with pytest.raises(ValueError, match="candidates per round"):
        TreeHist(1.0, top=4096, step_bits=9)
    with pytest.raises(ValueError, match="items is empty"):
        th.aggregator().estimate([])


# -- end to end -------------------------------------------------------------------------

def test_recovers_zipf_heavy_hitters():
    """Zipf(1.5) over 1000 random words, n = 2·10^5, ε = 4: the top 10 are found (measured
    recall 0.9 to 1.0 over seeds 0..5; the bar is 0.9 at seed 0)."""
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    words = sorted({letters[rng.integers(0, 26, size=int(rng.integers(4, 12)))].tobytes()
                    .decode() for _ in range(1100)})[:1000]
    rng.shuffle(words)
    p = 1.0 / np.arange(1, 1001) ** 1.5
    users = rng.choice(1000, size=200_000, p=p / p.sum())
    counts = np.bincount(users, minlength=1000)
    th = TreeHist(4.0, top=16)
    reports = th.privatize([words[i] for i in users], seed=0)
    result = th.identify(reports, top=10, candidates=words)
    truth = {words[i] for i in np.argsort(-counts, kind="stable")[:10]}
    recall = len(truth & set(result.items)) / 10
    assert recall >= 0.9, (recall, result.items)
    # the estimates are within 4 standard errors of the true frequencies
    for item, estimate, error in zip(result.items, result.estimates, result.standard_errors):
        if item is not None:
            assert abs(estimate - counts[words.index(item)] / 200_000) < 4 * error


def test_descent_shortcuts_keep_the_results():
    """identify's levels tell `_frequencies` that their candidates are distinct (no
    `np.unique` pass: bit for bit the checked path's results, which still folds a repeated
    candidate), and its levels before the last solve the de-collision only to
    DESCENT_PRECISION of a zero-frequency standard error (within it of the exact solve, and
    here the same survivors); the last level is solved exactly."""
    rng = np.random.default_rng(3)
    th = TreeHist(4.0, top=8, bits=24, hashes=128)
    values = rng.choice(rng.integers(0, 2**24, size=40, dtype=np.uint64), size=20_000,
                        p=np.r_[np.full(8, 0.1), np.full(32, 0.2 / 32)])
    aggregator = th.aggregator()
    aggregator.add(th.privatize_hashed(values, seed=1))
    sums = aggregator._sums.copy()
    found = aggregator.identify()
    assert found.hashes.size > 0
    # the reference descent, through the checked path
    kept = np.arange(2**th.prefix_bits[0], dtype=np.uint64)
    for group in range(th.groups):
        if group:
            extra = th.prefix_bits[group] - th.prefix_bits[group - 1]
            kept = ((kept[:, None] << np.uint64(extra))
                    | np.arange(2**extra, dtype=np.uint64)[None, :]).reshape(-1)
        fast = aggregator._frequencies(group, kept, sums, distinct=True)
        estimates, errors, n = aggregator._frequencies(group, kept, sums)
        assert np.array_equal(fast[0], estimates) and np.array_equal(fast[1], errors)
        assert fast[2] == n
        if group < th.groups - 1:
            rough = aggregator._frequencies(group, kept, sums, True, DESCENT_PRECISION)[0]
            sigma0 = math.sqrt(th.variance_factor / n)
            gap = np.abs(rough - estimates).max()
            assert gap <= DESCENT_PRECISION * sigma0, (group, gap / sigma0)
            estimates = rough  # what identify ranks
        eta = th.threshold * math.sqrt(th.variance_factor / n)
        order = np.lexsort((kept, -estimates))[:min(th.top, kept.size)]
        order = order[estimates[order] >= eta]
        kept, estimates, errors = kept[order], estimates[order], errors[order]
    assert found.hashes.tolist() == kept.tolist()
    assert np.array_equal(found.estimates, estimates)  # the last level: the exact solve
    # a repeated candidate: one value, one solve (the checked path folds it)
    alone = aggregator._frequencies(th.groups - 1, kept, sums, distinct=True)[0]
    again = aggregator._frequencies(th.groups - 1, np.r_[kept, kept[:1]], sums)[0]
    np.testing.assert_allclose(np.sort(again[:-1]), np.sort(alone), rtol=0, atol=1e-12)
    assert again[-1] == again[0]


def _numpy_operator(flat: np.ndarray, R: int, g: int, v: np.ndarray) -> np.ndarray:
    """The collision operator as numpy computed it before the Rust kernel (bincount, take,
    sum over the rows)."""
    weights = np.broadcast_to(v, flat.shape).reshape(-1)
    buckets = np.bincount(flat.reshape(-1), weights=weights, minlength=R * g)
    shared = buckets.take(flat).sum(axis=0) / R
    return (g * shared - v.sum()) / (g - 1)


@pytest.mark.parametrize("R, C, g", [(1, 1, 2), (3, 40, 4), (64, 3000, 1024), (1024, 512, 56)])
def test_collision_operator_is_numpys_bit_for_bit(R, C, g):
    """The Rust kernel sums in numpy's order: the same bits as the numpy formulation."""
    from ldpdist.heavy_hitters.decollide import collision_operator
    rng = np.random.default_rng(R * 7 + C)
    flat = rng.integers(0, g, size=(R, C)) + (np.arange(R, dtype=np.int64) * g)[:, None]
    apply = collision_operator(flat, R, g)
    for _ in range(3):
        v = rng.normal(size=C) * rng.exponential(size=C)
        assert np.array_equal(apply(v), _numpy_operator(flat, R, g, v))


def test_collision_operator_is_the_collision_matrix():
    """D[x, x'] = (g pi(x, x') - 1) / (g - 1), pi the fraction of shared buckets (dense)."""
    from ldpdist.heavy_hitters.decollide import collision_operator
    R, C, g = 5, 30, 3
    rng = np.random.default_rng(3)
    h = rng.integers(0, g, size=(R, C))
    flat = h + (np.arange(R) * g)[:, None]
    pi = (h[:, :, None] == h[:, None, :]).mean(axis=0)
    D = (g * pi - 1) / (g - 1)
    apply = collision_operator(flat, R, g)
    for v in np.eye(C)[:4].tolist() + [rng.normal(size=C).tolist()]:
        np.testing.assert_allclose(apply(np.array(v)), D @ np.array(v), rtol=0, atol=1e-12)


def test_collision_operator_refuses_bad_cells_and_oversized_requests():
    from ldpdist.heavy_hitters.decollide import collision_operator
    with pytest.raises(ValueError, match="not in row 1"):
        collision_operator(np.array([[0, 1], [1, 2]]), 2, 2)  # cell 1 is row 0's
    with pytest.raises(ValueError, match="shape"):
        collision_operator(np.zeros((3, 2), dtype=np.int64), 2, 2)
    apply = collision_operator(np.array([[0, 1]]), 1, 2)
    with pytest.raises(ValueError, match="candidates"):
        apply(np.ones(3))
    ldpdist.set_memory_limit("1M")
    try:
        with pytest.raises(MemoryError, match="collision operator"):
            collision_operator(np.zeros((512, 1), dtype=np.int64)
                               + (np.arange(512) * 4096)[:, None], 512, 4096)
    finally:
        ldpdist.set_memory_limit(None)


def test_kernel_cells_are_the_public_hashes():
    """The Rust constructors of the cells compute TreeHist's level hash and the count-mean
    sketch's row hash exactly as the Python spec functions; gather sums in row order."""
    from ldpdist.heavy_hitters.decollide import Cells
    from ldpdist.heavy_hitters.sketch import sketch_buckets, sketch_salts
    rng = np.random.default_rng(8)
    x = rng.integers(0, 2**64, size=300, dtype=np.uint64) >> rng.integers(0, 64, size=300,
                                                                          dtype=np.uint64)
    th = TreeHist(epsilon=2.0, top=8, bits=64, hashes=50)
    for group in (0, th.groups - 1):
        cells = Cells.level_hash(x, np.ascontiguousarray(th.keys[group]), th.g)
        want = th.buckets(x, group).astype(np.int64) + (np.arange(50) * th.g)[:, None]
        assert np.array_equal(cells.flat(), want)
    for m in (1, 2, 1000, 1024, 2**16):
        salts = sketch_salts(3, 7)
        cells = Cells.sketch_hash(x, salts, m)
        want = sketch_buckets(x[None, :], salts[:, None], m) + (np.arange(7) * m)[:, None]
        assert np.array_equal(cells.flat(), want), m
        table = rng.normal(size=7 * m)
        assert np.array_equal(cells.gather(table), table.take(want).sum(axis=0))
    with pytest.raises(ValueError, match="cells"):
        cells.gather(np.ones(3))
