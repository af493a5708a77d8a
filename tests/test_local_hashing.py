"""Optimized Local Hashing: estimation accuracy, simulate/privatize agreement, spec round trip,
malformed reports, and the exact channel."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ldpdist
from simulation_law import assert_simulate_is_exact_in_law
from ldpdist import OptimizedLocalHashing

K, N, EPSILON = 1000, 200_000, 1.0


@pytest.fixture(scope="module")
def workload():
    """A 20-sparse geometric distribution over k = 1000, n = 2·10^5 users, their reports."""
    rng = np.random.default_rng(20170816)
    p = np.zeros(K)
    support = rng.choice(K, 20, replace=False)
    p[support] = 0.8 ** np.arange(20)
    p /= p.sum()
    values = rng.choice(K, N, p=p)
    mech = OptimizedLocalHashing(K, EPSILON)
    reports = mech.privatize(values, seed=12345)
    return mech, p, values, reports


def raw_variance(mech: OptimizedLocalHashing, p: np.ndarray, n: int) -> np.ndarray:
    """Exact variance of each raw estimate: (f p(1-p) + (1-f)(1/g)(1-1/g)) / (n (p-1/g)^2)."""
    keep, _ = mech._core.probabilities()
    g = mech.g
    return (p * keep * (1 - keep) + (1 - p) * (1 / g) * (1 - 1 / g)) / (n * (keep - 1 / g) ** 2)


def test_shape_of_the_construction():
    mech = OptimizedLocalHashing(K, EPSILON)
    assert (mech.g, mech.t, mech.output_size) == (3, 7, 3**8)
    big = OptimizedLocalHashing(10_000, 1.0)
    assert (big.g, big.t, big.output_size) == (3, 9, 3**10)
    assert big.privatize([0, 9999], seed=1).dtype == np.uint16
    # e^ε + 1 ≈ 8.39 → g = 7 (the variance factor is lower at 7 than at 11).
    assert OptimizedLocalHashing(10_000, 2.0).g == 7
    # The cap: for k = 10, ε = 5 the optimum e^5 + 1 ≈ 149 is out of reach; g = 11.
    assert OptimizedLocalHashing(10, 5.0).g == 11
    assert 0 < mech.realized_epsilon <= mech.epsilon
    assert mech.epsilon - mech.realized_epsilon < 1e-12


def test_output_size_is_capped_at_large_epsilon():
    # Uncapped, e^8 + 1 ≈ 2982 would give g = 2971 and 2971**3 ≈ 2.6e10 report values (a
    # MemoryError when aggregating); capped, g^(t+1) <= 2**24.
    k, n = 10_000, 100_000
    mech = OptimizedLocalHashing(k, 8.0)
    assert (mech.g, mech.t, mech.output_size) == (251, 2, 251**3)
    assert mech.output_size <= 2**24
    assert 0 < mech.realized_epsilon <= 8.0
    for eps, g in [(1.0, 3), (4.0, 53), (6.0, 251), (20.0, 251), (30.0, 251)]:
        assert OptimizedLocalHashing(k, eps).g == g
        assert OptimizedLocalHashing(k, eps).output_size <= 2**24
    # Beyond about 35, g-ary randomized response saturates in double precision: refused by
    # the shared rule on the realized epsilon instead of silently realizing ~40.
    with pytest.raises(ValueError, match="cannot be represented"):
        OptimizedLocalHashing(k, 100.0)
    rng = np.random.default_rng(8)
    p = np.zeros(k)
    p[rng.choice(k, 50, replace=False)] = 0.9 ** np.arange(50)
    p /= p.sum()
    values = rng.choice(k, n, p=p)
    reports = mech.privatize(values, seed=8)
    agg = mech.aggregator().add(reports)
    assert agg.n == n and agg.counts.size == 251**3 and agg.counts.sum() == n
    raw = agg.estimate("raw")
    assert raw.shape == (k,) and np.isfinite(raw).all()
    expected_l2sq = raw_variance(mech, p, n).sum()
    l2sq = np.sum((raw - p) ** 2)
    assert 0.8 * expected_l2sq < l2sq < 1.25 * expected_l2sq, (l2sq, expected_l2sq)
    project = mech.estimate(reports)  # the default decoder
    np.testing.assert_array_equal(project, agg.estimate("project"))
    assert np.allclose(project.sum(), 1) and project.min() >= 0
    assert np.sum((project - p) ** 2) <= l2sq
    assert set(np.argsort(project)[-5:]) == set(np.argsort(p)[-5:])
    # simulate aggregates the same way (histogram of 251**3 counts).
    true_counts = np.bincount(values, minlength=k)
    assert mech.simulate(true_counts, seed=9).counts.sum() == n


def test_domains_above_the_output_cap_are_refused():
    # Every prime g gives g^(t+1) >= 2k report values, so k <= 2**23.
    mech = OptimizedLocalHashing(2**23, 8.0)
    assert (mech.g, mech.t, mech.output_size) == (2, 23, 2**24)
    for k in (2**23 + 1, 2**32):
        with pytest.raises(ValueError, match=r"too large.*2\^24"):
            OptimizedLocalHashing(k, 1.0)


def test_every_decoder_is_accurate(workload):
    mech, p, _values, reports = workload
    agg = mech.aggregator().add(reports)
    assert agg.n == N
    var = raw_variance(mech, p, N)
    expected_l2sq = var.sum()
    expected_l1 = np.sqrt(2 / np.pi) * np.sqrt(var).sum()  # raw estimates ≈ normal

    raw = agg.estimate("raw")
    l2sq = np.sum((raw - p) ** 2)
    l1 = np.abs(raw - p).sum()
    # Sums over 1000 nearly independent coordinates: relative spread of a few percent
    # (observed 0.96–1.05 over seeds); the bounds are ≥ 5 of those spreads away.
    assert 0.8 * expected_l2sq < l2sq < 1.25 * expected_l2sq, (l2sq, expected_l2sq)
    assert 0.85 * expected_l1 < l1 < 1.15 * expected_l1, (l1, expected_l1)

    # Projection onto the simplex (which contains p) is non-expansive.
    project = agg.estimate("project")
    assert np.sum((project - p) ** 2) <= l2sq
    assert np.allclose(project.sum(), 1) and project.min() >= 0
    # Clip and normalize: ||c/S - p||_1 <= |1 - S| + ||c - p||_1 <= 2 ||raw - p||_1.
    normalize = agg.estimate("normalize")
    assert np.abs(normalize - p).sum() <= 2 * l1
    assert np.allclose(normalize.sum(), 1) and normalize.min() >= 0
    # p is 20-sparse, so the nearest 20-sparse distribution is within 2 ||raw - p||_2.
    sparse = agg.estimate("sparse_project", sparsity=20)
    assert np.sqrt(np.sum((sparse - p) ** 2)) <= 2 * np.sqrt(l2sq)
    assert np.count_nonzero(sparse) <= 20
    # Maximum likelihood: a distribution whose likelihood is at least that of the truth, and
    # (not a theorem; observed ≈ 0.08 of it) no farther from p than the raw estimate's
    # expected squared error.
    ibu = agg.estimate("ibu", max_iter=1000, tol=1e-9)
    assert np.allclose(ibu.sum(), 1) and ibu.min() >= 0
    counts = agg.counts.astype(np.float64)
    observed = counts > 0

    def loglik(dist):
        return float(np.sum(counts[observed] * np.log(mech._expected_frequencies(dist)[observed])))

    assert loglik(ibu) >= loglik(p) - 1e-6 * abs(loglik(p))
    assert np.sum((ibu - p) ** 2) < expected_l2sq
    # The largest values are found by every decoder.
    top = set(np.argsort(p)[-5:])
    for estimate in (raw, project, normalize, sparse, ibu):
        assert set(np.argsort(estimate)[-5:]) == top


def test_simulate_is_exact_in_law_with_several_digits():
    # k = 50 at ε = 2 has t > 1 hash digits: the own sets go through the digit passes.
    mech = OptimizedLocalHashing(50, 2.0)
    assert mech.t > 1
    assert_simulate_is_exact_in_law(mech, (np.arange(50) * 7919) % 3001, runs=150, seed0=99)


def test_spec_round_trip_keeps_the_seed():
    mech = OptimizedLocalHashing(300, 0.7, seed=2**200 + 5)
    spec = mech.to_dict()
    assert spec == {"mechanism": "OptimizedLocalHashing", "format": 1, "k": 300,
                    "epsilon": 0.7, "seed": 2**200 + 5}
    again = ldpdist.from_dict(json.loads(json.dumps(spec)))
    assert isinstance(again, OptimizedLocalHashing)
    assert again == mech and again.seed == mech.seed
    assert (again.g, again.t, again.output_size) == (mech.g, mech.t, mech.output_size)
    assert OptimizedLocalHashing(300, 0.7).seed == 0
    other = OptimizedLocalHashing(300, 0.7, seed=1)
    assert other != mech
    # The seed does not change the channel.
    np.testing.assert_array_equal(other.privatize(np.arange(300), seed=3),
                                  mech.privatize(np.arange(300), seed=3))
    # Aggregators serialize with the seed, and refuse to merge across specs.
    agg = mech.aggregator().add(mech.privatize(np.arange(300), seed=4))
    back = ldpdist.Aggregator.from_bytes(agg.to_bytes())
    assert back.mechanism == mech and back.n == 300
    np.testing.assert_array_equal(back.counts, agg.counts)
    with pytest.raises(ValueError, match="made under"):
        other.aggregator().merge(agg)


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError),
                                         (None, TypeError), (2**256, ValueError)])
def test_bad_seed(seed, error):
    with pytest.raises(error, match="seed"):
        OptimizedLocalHashing(10, 1.0, seed=seed)


def test_bad_parameters():
    with pytest.raises(ValueError):
        OptimizedLocalHashing(1, 1.0)
    with pytest.raises(ValueError):
        OptimizedLocalHashing(10, 0.0)
    with pytest.raises(ValueError, match="too small"):
        OptimizedLocalHashing(10, 1e-17)
    with pytest.raises(ValueError, match=r"values\[1\] = 10"):
        OptimizedLocalHashing(10, 1.0).privatize([3, 10])


def test_malformed_reports_are_rejected_or_dropped():
    mech = OptimizedLocalHashing(20, 1.0)
    size = mech.output_size
    good = mech.privatize(np.arange(20), seed=1)
    bad = mech.as_reports(
        np.concatenate([good[:5], [size, size + 7], good[5:]]).astype(np.uint64))
    agg = mech.aggregator()
    with pytest.raises(ValueError, match=rf"reports\[5\] = {size}"):
        agg.add(bad)
    assert agg.n == 0 and agg.counts.sum() == 0
    agg.add(bad, on_invalid="drop")
    assert (agg.n, agg.dropped) == (20, 2)
    np.testing.assert_array_equal(agg.counts, mech.aggregator().add(good).counts)
    with pytest.raises(ValueError, match="negative"):
        mech.aggregator().add(mech.as_reports(np.array([0, -1, 2])))
    # Every privatized report is in range.
    assert int(mech.privatize(np.full(10_000, 19), seed=2).max()) < size


@pytest.mark.parametrize("k, epsilon", [(2, 0.5), (5, 1.0), (7, 2.0), (16, 0.1), (30, 5.0)])
def test_channel_matrix(k, epsilon):
    mech = OptimizedLocalHashing(k, epsilon)
    g, t = mech.g, mech.t
    q = mech.channel_matrix()
    assert q.shape == (k, g ** (t + 1))
    np.testing.assert_allclose(q.sum(axis=1), 1, atol=1e-12)
    keep, other = mech._core.probabilities()
    assert np.isclose(keep + (g - 1) * other, 1)
    # Each row: exactly one supported value per hash (g^t entries p/g^t), others q/g^t.
    high = keep / g**t
    assert all(np.count_nonzero(row == high) == g**t for row in q)
    assert set(np.unique(q)) == {high, other / g**t}
    ratio = np.log(q.max(axis=0) / q.min(axis=0)).max()
    assert ratio <= epsilon + 1e-12
    assert abs(ratio - mech.realized_epsilon) < 1e-12
    # Reports: hash A, value y = report mod g, supported iff y = h_A(x).
    digits = lambda z: [(z // g**i) % g for i in range(t)]
    for x in range(k):
        for a in range(g**t):
            h = sum(ai * xi for ai, xi in zip(digits(a), digits(x))) % g
            assert q[x, a * g + h] == high
    # The fast products agree with the matrix, and the estimator inverts it.
    dist = np.random.default_rng(k).dirichlet(np.ones(k))
    np.testing.assert_allclose(mech._expected_frequencies(dist), dist @ q, atol=1e-15)
    w = np.random.default_rng(k + 1).normal(size=q.shape[1])
    np.testing.assert_allclose(mech._channel_apply(w), q @ w, atol=1e-12)
    np.testing.assert_allclose(mech._core.estimate_from_frequencies(dist @ q), dist, atol=1e-9)
