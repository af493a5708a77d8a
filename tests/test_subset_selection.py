"""Subset Selection: reports, estimation, simulation, malformed input, serialization, privacy.

Statistical thresholds are derived from exact variances (fixed seeds; a correct
implementation fails each with probability well below 1e-4).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ldpdist
from ldpdist import SubsetSelection


def bit_probabilities(mech: SubsetSelection) -> "tuple[float, float]":
    return mech.probabilities()


def exact_moments(mech: SubsetSelection, true_counts: np.ndarray):
    """Exact mean vector and covariance matrix of the per-bit counts of users holding
    ``true_counts[x]`` copies of each x."""
    k, d = mech.k, mech.d
    a, b = mech.probabilities()
    rho = a
    pair_with_x = rho * (d - 1) / (k - 1)
    pair_without_x = (rho * (d - 1) * (d - 2) + (1 - rho) * d * (d - 1)) / ((k - 1) * (k - 2))
    mean = np.zeros(k)
    cov = np.zeros((k, k))
    for x, n in enumerate(true_counts):
        p = np.full(k, b)
        p[x] = a
        both = np.full((k, k), pair_without_x)
        both[x, :] = both[:, x] = pair_with_x
        np.fill_diagonal(both, p)
        mean += n * p
        cov += n * (both - np.outer(p, p))
    return mean, cov


def assert_moments(what: str, runs: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> None:
    """Sample means and covariances within 5 standard errors (normal approximation)."""
    r = runs.shape[0]
    sample_mean = runs.mean(axis=0)
    sample_cov = np.cov(runs, rowvar=False)
    se_mean = np.sqrt(np.diag(cov) / r)
    assert np.all(np.abs(sample_mean - mean) < 5 * se_mean), (what, sample_mean, mean)
    var = np.diag(cov)
    se_cov = np.sqrt((np.outer(var, var) + cov**2) / (r - 1))
    assert np.all(np.abs(sample_cov - cov) < 5 * se_cov), (what, sample_cov, cov)


def popcounts(reports: np.ndarray) -> np.ndarray:
    return np.unpackbits(reports, axis=1).sum(axis=1)


# -- parameters ----------------------------------------------------------------------------

def test_default_and_explicit_subset_size():
    assert SubsetSelection(10, 1.0).d == 3  # ceil(10 / (e + 1)) = ceil(2.69)
    assert SubsetSelection(1000, 0.5).d == 378
    assert SubsetSelection(10_000, 0.5).d == math.ceil(10_000 / (math.exp(0.5) + 1))
    assert SubsetSelection(10, 1.0, d=7).d == 7
    assert SubsetSelection.default_d(10, 1.0) == 3
    for bad in (0, 10, -1):
        with pytest.raises(ValueError, match="d must be"):
            SubsetSelection(10, 1.0, d=bad)
    with pytest.raises(TypeError):
        SubsetSelection(10, 1.0, d=2.0)
    with pytest.raises(ValueError):
        SubsetSelection(1, 1.0)
    with pytest.raises(ValueError):
        SubsetSelection(10, 0.0)


def test_variance_optimal_d_is_the_brute_force_minimum_and_near_the_default():
    differ = 0
    for k in (2, 3, 10, 37, 100, 257):
        for eps in (0.1, 0.5, 1.0, 2.0, 5.0):
            variances = [SubsetSelection.variance_at_uniform(k, eps, d) for d in range(1, k)]
            best = 1 + int(np.argmin(variances))
            optimal = SubsetSelection.variance_optimal_d(k, eps)
            assert variances[optimal - 1] == pytest.approx(variances[best - 1], rel=1e-12)
            default = SubsetSelection.default_d(k, eps)
            assert default - optimal in (0, 1)
            differ += default != optimal
            # The formula is the estimator's variance: k f(1-f)/(a-b)^2 with f = d/k.
            mech = SubsetSelection(k, eps, d=optimal)
            a, b = mech.probabilities()
            f = optimal / k
            assert k * f * (1 - f) / (a - b) ** 2 == pytest.approx(variances[optimal - 1], rel=1e-9)
    assert differ > 0  # the floor sometimes wins, so both rules are offered


@pytest.mark.parametrize("k", [2, 3, 7, 50, 100])
@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 5.0])
def test_realized_epsilon_never_exceeds_epsilon(k, eps):
    mech = SubsetSelection(k, eps)
    assert mech.realized_epsilon <= eps
    assert eps - mech.realized_epsilon < 1e-12


# -- reports ---------------------------------------------------------------------------------

@pytest.mark.parametrize("k,eps", [(5, 0.5), (8, 1.0), (13, 2.0), (100, 0.5), (1000, 5.0)])
def test_reports_are_packed_rows_with_exactly_d_ones(k, eps):
    mech = SubsetSelection(k, eps)
    values = np.arange(5000) % k
    reports = mech.privatize(values, seed=1)
    assert reports.dtype == np.uint8
    assert reports.shape == (5000, -(-k // 8))
    bits = np.unpackbits(reports, axis=1)
    assert np.all(bits.sum(axis=1) == mech.d)
    assert not bits[:, k:].any()  # padding bits are zero
    # The user's own bit is set with probability a = rho: 5 sigma over 5000 users.
    a, _ = mech.probabilities()
    own = bits[np.arange(5000), values].mean()
    assert abs(own - a) < 5 * math.sqrt(a * (1 - a) / 5000)
    # Seeded privatization is reproducible.
    assert np.array_equal(reports, mech.privatize(values, seed=1))
    assert not np.array_equal(reports, mech.privatize(values, seed=2))


# -- estimation --------------------------------------------------------------------------------

def test_every_decoder_estimates_well_at_n_200k():
    k, eps, n = 16, 2.0, 200_000
    mech = SubsetSelection(k, eps)
    p = np.zeros(k)
    p[[1, 4, 5, 9, 12, 15]] = 0.7 ** np.arange(6)
    p /= p.sum()
    values = np.random.default_rng(5).choice(k, size=n, p=p)
    truth = np.bincount(values, minlength=k) / n  # the estimator is unbiased for these
    a, b = mech.probabilities()
    counts = np.bincount(values, minlength=k)
    # Exact variance of the raw estimate for these users.
    var_bits = counts * a * (1 - a) + (n - counts) * b * (1 - b)
    sigma_total = math.sqrt(np.sum(var_bits) / (n * (a - b)) ** 2)
    far = np.linalg.norm(np.full(k, 1 / k) - truth)
    assert 6 * sigma_total < far / 4  # the bounds below are tight enough to catch a broken decoder

    reports = mech.privatize(values, seed=11)
    raw = mech.estimate(reports, decoder="raw")
    raw_err = np.linalg.norm(raw - truth)
    # ||e||^2 has mean sigma_total^2 and is a sum of 16 nearly independent terms.
    assert raw_err < 3 * sigma_total
    # Projections: onto the simplex never increases the error; onto the s-sparse simplex
    # at most doubles it (the true distribution lies in both sets).
    project = mech.estimate(reports)
    assert np.linalg.norm(project - truth) <= raw_err + 1e-12
    sparse = mech.estimate(reports, decoder="sparse_project", sparsity=6)
    assert np.count_nonzero(sparse) <= 6
    assert np.linalg.norm(sparse - truth) <= 2 * raw_err + 1e-12
    for decoder in ("normalize", "ibu"):
        est = mech.estimate(reports, decoder=decoder)
        assert est.shape == (k,) and np.all(est >= 0) and est.sum() == pytest.approx(1.0)
        assert np.linalg.norm(est - truth) < 6 * sigma_total, decoder
    for est in (project, sparse):
        assert np.all(est >= 0) and est.sum() == pytest.approx(1.0)


def test_estimator_is_unbiased_on_expected_frequencies():
    mech = SubsetSelection(11, 0.8, d=4)
    p = np.random.default_rng(0).dirichlet(np.ones(11))
    freq = mech._expected_frequencies(p)
    assert np.allclose(mech._core.estimate_from_frequencies(freq), p, atol=1e-12)
    # Expected frequencies agree with the per-bit marginals of the channel (k = 5).
    small = SubsetSelection(5, 1.0)
    q = small.channel_matrix()
    outputs = np.arange(32)
    bit = (outputs[:, None] >> np.arange(5)) & 1  # (32, 5)
    p5 = np.array([0.1, 0.4, 0.2, 0.2, 0.1])
    assert np.allclose(p5 @ q @ bit, small._expected_frequencies(p5), atol=1e-14)
    # channel_apply is the adjoint.
    w = np.sin(np.arange(5.0))
    assert np.dot(small._expected_frequencies(p5), w) == pytest.approx(
        np.dot(p5, small._channel_apply(w)), abs=1e-14)


# -- simulation --------------------------------------------------------------------------------

def test_simulate_matches_privatize_in_mean_variance_and_covariance():
    mech = SubsetSelection(5, 0.7)
    assert mech.d == 2
    true_counts = np.array([1500, 700, 0, 500, 300])
    n = int(true_counts.sum())
    mean, cov = exact_moments(mech, true_counts)
    reps = 1000
    var = np.diag(cov)
    se_cov = np.sqrt((np.outer(var, var) + cov**2) / (reps - 1))
    # The bits are clearly dependent, so independent per-bit binomials would fail.
    assert cov[1, 2] < -6 * se_cov[1, 2]

    simulated = np.array([mech.simulate(true_counts, seed=s).counts for s in range(reps)],
                         dtype=np.int64)
    assert np.all(simulated.sum(axis=1) == n * mech.d)
    assert_moments("simulate", simulated, mean, cov)

    values = np.repeat(np.arange(5), true_counts)
    reports = mech.privatize(np.tile(values, reps), seed=3)
    bits = np.unpackbits(reports, axis=1)[:, :5].reshape(reps, n, 5)
    privatized = bits.sum(axis=1, dtype=np.int64)
    assert_moments("privatize", privatized, mean, cov)

    # And the two agree with each other (difference of means within 5 combined SEs).
    se = np.sqrt(2 * var / reps)
    assert np.all(np.abs(simulated.mean(axis=0) - privatized.mean(axis=0)) < 5 * se)


def test_simulate_large_k_means_and_variances():
    k = 10_000
    mech = SubsetSelection(k, 0.5)
    true_counts = 40 + (np.arange(k) * 7919) % 121
    n = int(true_counts.sum())
    agg = mech.simulate(true_counts, seed=4)
    assert agg.n == n
    counts = agg.counts.astype(np.float64)
    assert counts.sum() == n * mech.d
    a, b = mech.probabilities()
    mean = true_counts * a + (n - true_counts) * b
    var = true_counts * a * (1 - a) + (n - true_counts) * b * (1 - b)
    z = (counts - mean) / np.sqrt(var)
    # Nearly independent standard normals: mean ~ N(0, 1/k), mean square ~ 1 +- sqrt(2/k).
    assert abs(z.mean()) < 5 / math.sqrt(k)
    assert abs((z**2).mean() - 1) < 5 * math.sqrt(2 / k)
    # Reproducible under a seed.
    assert np.array_equal(agg.counts, mech.simulate(true_counts, seed=4).counts)


def test_simulate_validates_true_counts():
    mech = SubsetSelection(6, 1.0)
    with pytest.raises(ValueError):
        mech.simulate([1, 2, 3])
    with pytest.raises(ValueError):
        mech.simulate([1, 2, 3, -1, 0, 0])
    with pytest.raises(TypeError):
        mech.simulate([1.0] * 6)
    assert np.all(mech.simulate([0] * 6, seed=0).counts == 0)


def test_simulate_takes_at_most_2_pow_40_users():
    """Beyond, rand_distr's hypergeometric sampler loses the law in f64: from about 2^51
    users it never returned (an uninterruptible hang), from about 2^60 it panicked (found
    by tests/fuzz)."""
    mech = SubsetSelection(16, 1.0, d=1)
    counts = np.full(16, 2**36, dtype=np.uint64)  # 2^40 users
    agg = mech.simulate(counts, seed=1)
    assert agg.n == 2**40 and int(agg.counts.sum()) == 2**40
    counts[0] += 1
    with pytest.raises(ValueError, match="at most 2\\^40"):
        mech.simulate(counts, seed=1)
    with pytest.raises(ValueError, match="simulate the users in parts"):
        mech.simulate(np.full(16, 2**59, dtype=np.uint64), seed=1)


# -- malformed reports ---------------------------------------------------------------------------

def test_malformed_rows_raise_or_are_dropped_and_counted():
    mech = SubsetSelection(10, 1.0)  # d = 3, rows of 2 bytes, bits 10..15 are padding
    assert mech.d == 3
    good = mech.privatize([0, 1, 2, 3], seed=0)
    assert np.all(popcounts(good) == 3)
    bad = np.array([
        [0b11100000, 0b10000000],  # 4 ones
        [0b10000000, 0b00000000],  # 1 one
        [0b10100000, 0b00100000],  # 3 ones, one of them a padding bit
        [0b00000000, 0b00000000],  # empty
    ], dtype=np.uint8)
    reports = mech.as_reports(np.concatenate([good[:2], bad, good[2:]]))
    with pytest.raises(ValueError, match="malformed"):
        mech.estimate(reports)
    agg = mech.aggregator()
    with pytest.raises(ValueError):
        agg.add(reports)
    assert agg.n == 0 and agg.counts.sum() == 0  # unchanged after the error
    agg.add(reports, on_invalid="drop")
    assert (agg.n, agg.dropped) == (4, 4)
    assert np.array_equal(agg.counts, mech.aggregator().add(good).counts)
    # Wrong dtype or shape.
    with pytest.raises(TypeError, match="uint8"):
        mech.estimate(reports.astype(np.int64))
    with pytest.raises(ValueError, match="shape"):
        mech.estimate(mech.as_reports(np.zeros((3, 3), dtype=np.uint8)))


# -- serialization and merging --------------------------------------------------------------------

def test_spec_round_trip_merge_and_bytes():
    mech = SubsetSelection(20, 1.5, d=6)
    spec = json.loads(json.dumps(mech.to_dict()))
    assert spec == {"mechanism": "SubsetSelection", "format": 1, "k": 20, "epsilon": 1.5, "d": 6}
    assert ldpdist.from_dict(spec) == mech
    assert ldpdist.from_dict(SubsetSelection(20, 1.5).to_dict()) == SubsetSelection(20, 1.5)
    assert SubsetSelection(20, 1.5) != mech
    default = SubsetSelection.default_d(20, 1.5)
    assert SubsetSelection(20, 1.5, d=default) == SubsetSelection(20, 1.5)

    values = np.random.default_rng(1).integers(0, 20, 3000)
    reports = mech.privatize(values, seed=9)
    whole = mech.aggregator().add(reports)
    left = mech.aggregator().add(reports[:1234])
    right = mech.aggregator().add(reports[1234:])
    left.merge(right)
    assert np.array_equal(left.counts, whole.counts) and left.n == whole.n == 3000
    with pytest.raises(ValueError):
        left.merge(SubsetSelection(20, 1.5, d=5).aggregator())

    data = whole.to_bytes()
    back = ldpdist.Aggregator.from_bytes(data)
    assert back.mechanism == mech and back.n == 3000
    assert np.array_equal(back.counts, whole.counts)
    assert np.array_equal(back.estimate("raw"), whole.estimate("raw"))
    # Counts that cannot come from n reports of d ones each are rejected.
    tampered = bytearray(data)
    tampered[-8] ^= 1  # the last count changes by one
    with pytest.raises(ValueError, match="corrupt"):
        ldpdist.Aggregator.from_bytes(bytes(tampered))


# -- privacy ------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_channel_matrix_k4_is_exactly_epsilon_ldp(eps):
    mech = SubsetSelection(4, eps)
    q = mech.channel_matrix()
    assert q.shape == (4, 16)
    assert np.allclose(q.sum(axis=1), 1.0, atol=1e-14)
    weight = np.array([bin(o).count("1") for o in range(16)])
    assert np.all((q > 0) == (weight == mech.d)[None, :])
    live = q[:, weight == mech.d]
    ratio = np.log(live.max(axis=0) / live.min(axis=0)).max()
    assert ratio == pytest.approx(mech.realized_epsilon, abs=1e-12)
    assert mech.realized_epsilon <= eps
    # Entries are the documented subset probabilities.
    with_x, without_x = mech._core.subset_probabilities()
    assert np.allclose(np.unique(live), sorted([with_x, without_x]), rtol=1e-14)


def test_channel_matrix_refuses_large_k():
    with pytest.raises(ValueError, match="max_entries"):
        SubsetSelection(40, 1.0).channel_matrix()
