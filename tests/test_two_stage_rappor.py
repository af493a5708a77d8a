"""Two-stage RAPPOR: Algorithm 2 of the sparse-estimation paper with the
note's corrected ε/2 constants. Exact ε, exact (conditional) unbiasedness and the printed
constants' bias, sampler fidelity, simulate's law and its agreement with privatize,
determinism across thread counts, accuracy at the paper's setting, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ldpdist
from conftest import run_python
from ldpdist.errors import IntegrityError, SpecMismatchError

TSR = ldpdist.TwoStageRAPPOR


def stage_bits(reports, k):
    """(private bits (n, k), stage bit (n,)) of packed two-stage reports."""
    bits = np.unpackbits(reports, axis=1, count=k + 1)
    return bits[:, :k], bits[:, k]


def top_2s(m_counts, s):
    """T of Algorithm 2, by a plain sort: the min(2s, k) largest stage-1 counts, ties to the
    lowest index."""
    k = m_counts.size
    order = np.lexsort((np.arange(k), -m_counts.astype(np.float64)))
    return np.sort(order[: min(2 * s, k)])


# -- privacy: RAPPOR's channel with a public stage ---------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_channel_is_rappors_with_a_fair_public_stage_and_exactly_epsilon_ldp(k, epsilon):
    mech = TSR(k, epsilon)
    rappor = ldpdist.RAPPOR(k, epsilon)
    q = mech.channel_matrix()
    assert q.shape == (k, 2 ** (k + 1)) and mech.output_size == k + 1
    half = 2 ** k
    np.testing.assert_array_equal(q[:, :half], rappor.channel_matrix() / 2)
    np.testing.assert_array_equal(q[:, half:], rappor.channel_matrix() / 2)
    ratio = np.log(q.max(axis=0) / q.min(axis=0)).max()
    assert mech.realized_epsilon == rappor.realized_epsilon <= epsilon
    assert ratio == pytest.approx(mech.realized_epsilon, abs=1e-12)
    assert mech.flip_probability == rappor._core.probabilities()[1]
    assert mech.flip_probability == pytest.approx(1 / (math.exp(epsilon / 2) + 1), abs=1e-14)


# -- the estimator: exact unbiasedness with ε/2, the bias of the printed e^ε ----------------------


def stage2_bit_means(mech, p):
    """E[N(x)/n2] for i.i.d. users from p, from the exact channel: P(bit x = 1 | y, stage 2)
    is the mass of the outputs with bit x and the stage bit set, over that of the stage."""
    k = mech.k
    q = mech.channel_matrix()
    outputs = np.arange(q.shape[1])
    second = (outputs >> k) & 1 == 1
    given_y = np.array([[q[y, second & ((outputs >> x) & 1 == 1)].sum() / q[y, second].sum()
                         for x in range(k)] for y in range(k)])
    return p @ given_y


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_corrected_constants_are_unbiased_and_the_printed_ones_biased_as_predicted(epsilon):
    k = 6
    mech = TSR(k, epsilon)
    p = np.array([0.4, 0.25, 0.2, 0.1, 0.05, 0.0])
    means = stage2_bit_means(mech, p)
    f = mech.flip_probability
    beta, gamma = f, 1 - 2 * f
    assert gamma == pytest.approx((math.exp(epsilon / 2) - 1) / (math.exp(epsilon / 2) + 1), abs=1e-14)
    np.testing.assert_allclose((means - beta) / gamma, p, rtol=0, atol=1e-13)
    # The paper's printed constants: E[p_hat] = (f − β' + (1 − 2f) p)/γ', off by this much.
    beta_p = 1 / (math.exp(epsilon) + 1)
    gamma_p = (math.exp(epsilon) - 1) / (math.exp(epsilon) + 1)
    bias = (means - beta_p) / gamma_p - p
    predicted = (f - beta_p + (1 - 2 * f) * p) / gamma_p - p
    np.testing.assert_allclose(bias, predicted, rtol=0, atol=1e-13)
    assert np.abs(bias).min() > 0.01, bias  # every value is off, by 1% of mass or more

    # The decoder itself, on integer counts proportional to the exact means (n2 = 2^40): the
    # estimate on T (here every value: 2s >= k) is p to 1e-11.
    n2 = 2**40
    counts = np.zeros(2 * k + 1, dtype=np.uint64)
    counts[:k] = 1  # stage 1: all tied, T = [0, k) anyway
    counts[k:2 * k] = np.round(means * n2).astype(np.uint64)
    counts[2 * k] = n2
    estimate = mech._two_stage_estimate(counts, n2 + 10, sparsity=3)
    np.testing.assert_allclose(estimate, p, rtol=0, atol=1e-11)


def test_two_stage_estimate_is_unbiased_given_t_by_simulation():
    """Monte Carlo over i.i.d. users (multinomial counts, then the random-order split):
    Σ (p_hat(x) − p(x)) over x in T and runs, against its exact standard deviation
    Σ Var = Σ q(1 − q)/(n2 γ²), q = f + γ p(x)."""
    k, s, epsilon, n, runs = 40, 3, 1.0, 4001, 300
    mech = TSR(k, epsilon)
    f = mech.flip_probability
    gamma = 1 - 2 * f
    p = np.zeros(k)
    p[[3, 17, 30]] = [0.5, 0.3, 0.2]
    rng = np.random.default_rng(5)
    total = variance = 0.0
    selected = 0
    for r in range(runs):
        agg = mech.simulate(rng.multinomial(n, p), seed=r)
        estimate = agg.estimate("two_stage", sparsity=s)
        t = top_2s(agg.counts[:k], s)
        assert np.count_nonzero(estimate[np.setdiff1d(np.arange(k), t)]) == 0
        n2 = int(agg.counts[-1])
        q = f + gamma * p[t]
        total += (estimate[t] - p[t]).sum()
        variance += (q * (1 - q)).sum() / (n2 * gamma**2)
        selected += t.size
    assert selected == runs * 2 * s
    z = total / math.sqrt(variance)
    assert abs(z) < 4.5, f"two-stage estimate biased given T: z = {z:.2f}"


# -- sampler fidelity ------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_each_stage_follows_the_channel_by_chi_square(epsilon):
    k, draws = 3, 120_000
    mech = TSR(k, epsilon)
    q = mech.channel_matrix()
    weights = 1 << np.arange(k)
    for x in range(k):
        reports = mech.privatize(np.full(draws, x), seed=20 + x)
        private, stage = stage_bits(reports, k)
        np.testing.assert_array_equal(stage, np.arange(draws) % 2)
        for s in (0, 1):
            pattern = private[stage == s] @ weights
            observed = np.bincount(pattern, minlength=2**k)
            expected = draws / 2 * 2 * q[x, s * 2**k:(s + 1) * 2**k]
            chi2 = ((observed - expected) ** 2 / expected).sum()
            assert chi2 < 24.32, f"x {x} stage {s + 1}: chi2 {chi2:.1f} (df 7, 0.1%)"


def test_private_bits_are_rappors_and_stages_are_as_assigned():
    k, n = 30, 70_001  # past one sampling chunk (2^16 users)
    mech, rappor = TSR(k, 1.0), ldpdist.RAPPOR(k, 1.0)
    values = np.random.default_rng(1).integers(0, k, size=n)
    plain = np.unpackbits(rappor.privatize(values, seed=4), axis=1, count=k)
    explicit = np.where(np.arange(n) % 3 == 0, 2, 1)
    for kwargs, want in [({}, np.arange(n) % 2),
                         ({"first_user": 7}, (np.arange(n) + 1) % 2),
                         ({"first_user": 2**70}, np.arange(n) % 2),
                         ({"stages": explicit}, (explicit == 2).astype(int)),
                         ({"stages": list(explicit)}, (explicit == 2).astype(int))]:
        reports = mech.privatize(values, seed=4, **kwargs)
        assert reports.shape == (n, 4) and reports.dtype == np.uint8
        private, stage = stage_bits(reports, k)
        np.testing.assert_array_equal(private, plain)
        np.testing.assert_array_equal(stage, want)
        assert not np.unpackbits(reports, axis=1)[:, k + 1:].any()  # zero padding


# -- aggregation -----------------------------------------------------------------------------------


def test_aggregate_counts_each_stage_and_shards_merge():
    k = 16  # the stage bit opens a third byte
    mech = TSR(k, 2.0)
    values = np.random.default_rng(2).integers(0, k, size=9_999)
    reports = mech.privatize(values, seed=3)
    private, stage = stage_bits(reports, k)
    agg = mech.aggregator().add(reports)
    assert agg.counts.size == 2 * k + 1 and agg.n == 9_999
    np.testing.assert_array_equal(agg.counts[:k], private[stage == 0].sum(axis=0))
    np.testing.assert_array_equal(agg.counts[k:2 * k], private[stage == 1].sum(axis=0))
    assert agg.counts[-1] == 4_999
    # Shards of any mix of stages (cut at odd positions) merge to the same statistic.
    merged = mech.aggregator()
    for part in np.array_split(reports, 5):
        merged.merge(mech.aggregator().add(part))
    np.testing.assert_array_equal(merged.counts, agg.counts)
    again = ldpdist.Aggregator.from_bytes(agg.to_bytes())
    np.testing.assert_array_equal(again.counts, agg.counts)
    # Pooled decoders are RAPPOR's on M + N.
    pooled = ldpdist.Aggregator._from_counts(ldpdist.RAPPOR(k, 2.0),
                                             agg.counts[:k] + agg.counts[k:2 * k], agg.n)
    for decoder in ("raw", "normalize", "project"):
        np.testing.assert_array_equal(agg.estimate(decoder), pooled.estimate(decoder))
    np.testing.assert_array_equal(agg.estimate("sparse_project", sparsity=3),
                                  pooled.estimate("sparse_project", sparsity=3))
    np.testing.assert_allclose(agg.estimate("ibu"), pooled.estimate("ibu"), atol=1e-5)


# -- simulate: its law, and agreement with privatize ------------------------------------------------


def exact_moments(mech, true_counts):
    """Mean and variance of M_j and N_j and Cov(M_j, N_j) for a uniformly random order with
    alternating stages: the stage-1 users of value j are hypergeometric (variance V_j),
    then per-bit binomials; the split adds (a − b)² V_j to each variance and −(a − b)² V_j to
    the covariance."""
    a, b = mech._core.probabilities()
    c = np.asarray(true_counts, float)
    n = c.sum()
    n1, n2 = n - n // 2, n // 2
    mean1 = c * n1 / n
    split = c * (n1 / n) * (1 - n1 / n) * (n - c) / (n - 1)
    g2 = (a - b) ** 2
    m_mean = n1 * b + (a - b) * mean1
    n_mean = n2 * b + (a - b) * (c - mean1)
    m_var = mean1 * a * (1 - a) + (n1 - mean1) * b * (1 - b) + g2 * split
    n_var = (c - mean1) * a * (1 - a) + (n2 - c + mean1) * b * (1 - b) + g2 * split
    return m_mean, n_mean, m_var, n_var, -g2 * split


def test_simulate_is_exact_in_law_and_agrees_with_privatize_in_a_random_order():
    k, epsilon, runs = 5, 5.0, 400
    mech = TSR(k, epsilon)
    true_counts = np.array([700, 0, 150, 51, 300])
    n = int(true_counts.sum())
    m_mean, n_mean, m_var, n_var, cov = exact_moments(mech, true_counts)
    rng = np.random.default_rng(8)
    values = np.repeat(np.arange(k), true_counts)
    simulated = np.array([mech.simulate(true_counts, seed=s).counts for s in range(runs)], float)
    direct = np.array([mech.aggregator().add(mech.privatize(rng.permutation(values), seed=10**6 + s))
                       .counts for s in range(runs)], float)
    for name, sample in (("simulate", simulated), ("privatize", direct)):
        assert (sample[:, -1] == n // 2).all()
        for part, mean, var in ((sample[:, :k], m_mean, m_var), (sample[:, k:2 * k], n_mean, n_var)):
            z = (part.mean(axis=0) - mean) / np.sqrt(np.maximum(var, 1e-12) / runs)
            assert np.abs(z).max() < 5, (name, z)
            busy = var >= 1
            ratio = part.var(axis=0, ddof=1)[busy] / var[busy]
            # relative sd of a sample variance at 400 runs ≈ 0.07 (more for binomial tails)
            assert ((ratio > 0.6) & (ratio < 1.45)).all(), (name, ratio)
        sample_cov = np.array([np.cov(sample[:, j], sample[:, k + j])[0, 1] for j in range(k)])
        sd = np.sqrt((m_var * n_var + cov**2) / runs)
        assert (np.abs(sample_cov - cov) <= 5 * sd + 1e-9).all(), (name, sample_cov, cov)
    # At ε = 5 the split dominates the covariance: −(a − b)² V_0 ≈ −52 (sd ≈ 4.5).
    assert cov[0] < -40
    np.testing.assert_array_equal(mech.simulate(true_counts, seed=3).counts, simulated[3])


# -- determinism ------------------------------------------------------------------------------------

CODE = """
import json
import numpy as np
import ldpdist
mech = ldpdist.TwoStageRAPPOR(1000, 0.9)
rng = np.random.default_rng(0)
values = rng.integers(0, 1000, size=150_000)
stages = rng.integers(1, 3, size=150_000)
out = {}
for name, kwargs in (("default", {}), ("first_user", {"first_user": 5}), ("stages", {"stages": stages})):
    reports = mech.privatize(values, seed=1, **kwargs)
    agg = mech.aggregator().add(reports)
    out[name] = [digest(reports), digest(agg.counts),
                 digest(agg.estimate("two_stage", sparsity=30)),
                 digest(agg.estimate("two_stage_project", sparsity=30))]
sim = mech.simulate(np.bincount(values, minlength=1000), seed=2)
out["simulate"] = [digest(sim.counts), digest(sim.estimate("two_stage", sparsity=30))]
print(json.dumps(out))
"""


def test_seeded_results_are_bit_identical_at_1_2_and_4_threads():
    runs = [json.loads(run_python(CODE, env={"RAYON_NUM_THREADS": str(t)})) for t in (1, 2, 4)]
    assert runs[0] == runs[1] == runs[2]


# -- accuracy at the paper's setting ---------------------------------------------------------------


@pytest.mark.parametrize("s", [4, 64])
def test_two_stage_recovers_the_support_and_beats_projected_rappor(s):
    """k = 5000, ε = 0.9, n = 10^6 via simulate, p uniform on s random values, 3 fixed seeds.
    Measured (mean ℓ1 over 5 runs): s = 4: two_stage 0.020, two_stage_project 0.007, pooled
    RAPPOR projected 0.046; s = 64: 0.318, 0.178, 0.474. The two-stage ℓ1 error is a sum of
    min(2s, k) independent errors of sd σ = √(q(1 − q)/n2)/γ, so its mean is predicted:
    Σ_T σ_x √(2/π) (errors ≈ normal)."""
    k, epsilon, n, runs = 5000, 0.9, 10**6, 3
    mech = TSR(k, epsilon)
    f = mech.flip_probability
    gamma = 1 - 2 * f
    two_stage, projected, pooled = [], [], []
    predicted = []
    for run in range(runs):
        rng = np.random.default_rng([s, run])
        support = rng.choice(k, size=s, replace=False)
        p = np.zeros(k)
        p[support] = 1 / s
        agg = mech.simulate(rng.multinomial(n, p), seed=100 * s + run)
        t = top_2s(agg.counts[:k], s)
        assert set(support) <= set(t), f"run {run}: support not recovered"
        estimate = agg.estimate("two_stage", sparsity=s)
        assert set(np.flatnonzero(estimate)) <= set(t)
        two_stage.append(np.abs(estimate - p).sum())
        projected.append(np.abs(agg.estimate("two_stage_project", sparsity=s) - p).sum())
        pooled.append(np.abs(agg.estimate("project") - p).sum())  # RAPPOR's projected estimate
        q = f + gamma * p[t]
        sigma = np.sqrt(q * (1 - q) / int(agg.counts[-1])) / gamma
        predicted.append(sigma.sum() * math.sqrt(2 / math.pi))
    two_stage, projected, pooled = map(np.mean, (two_stage, projected, pooled))
    # The sd of the mean ℓ1 error is about √(1 − 2/π)/√(2s·runs) of it: 10% at s = 4.
    assert two_stage == pytest.approx(np.mean(predicted), rel=0.3 if s == 4 else 0.1)
    assert projected < two_stage < pooled, (projected, two_stage, pooled)
    assert two_stage < 0.75 * pooled


# -- bad input -------------------------------------------------------------------------------------


def test_bad_sparsity_stages_and_first_user():
    k = 12
    mech = TSR(k, 1.0)
    agg = mech.simulate(np.full(k, 50), seed=1)
    for s in (0, k + 1, -1):
        with pytest.raises(ValueError, match="sparsity"):
            agg.estimate("two_stage", sparsity=s)
    with pytest.raises(TypeError, match="sparsity"):
        agg.estimate("two_stage_project", sparsity=2.5)
    assert agg.estimate("two_stage").shape == (k,)  # s from the noise-level rule
    assert agg.estimate("two_stage", sparsity=k).shape == (k,)  # 2s ≥ k: T is every value
    with pytest.raises(ValueError, match="two_stage"):
        ldpdist.RAPPOR(k, 1.0).simulate(np.full(k, 50), seed=1).estimate("two_stage", sparsity=2)
    values = np.arange(6) % k
    for stages, error, match in [
        ([1, 2, 0, 1, 2, 1], ValueError, r"stages\[2\] = 0"),
        ([1, 2, 1, 3, 2, 1], ValueError, r"stages\[3\] = 3"),
        (np.array([1, 2, 1, 2, -1, 1]), ValueError, r"stages\[4\] = -1"),
        ([1, 2, 1], ValueError, "one entry per value"),
        ([[1, 2, 1], [2, 1, 2]], ValueError, "one-dimensional"),
        ([1.0, 2.0, 1.0, 2.0, 1.0, 2.0], TypeError, "integers"),
        ([1, 2, True, 1, 2, 1], TypeError, "booleans"),
    ]:
        with pytest.raises(error, match=match):
            mech.privatize(values, stages=stages)
    with pytest.raises(ValueError, match="not both"):
        mech.privatize(values, first_user=1, stages=[1, 2, 1, 2, 1, 2])
    with pytest.raises(ValueError, match="first_user"):
        mech.privatize(values, first_user=-1)
    with pytest.raises(TypeError, match="first_user"):
        mech.privatize(values, first_user=1.0)
    with pytest.raises(ValueError, match=r"values\[1\] = 12"):
        mech.privatize([1, 12], stages=[1, 2])


def test_a_missing_stage_is_a_clear_error():
    k = 8
    mech = TSR(k, 1.0)
    values = np.arange(40) % k
    only_first = mech.aggregator().add(mech.privatize(values, stages=np.ones(40, int)))
    only_second = mech.aggregator().add(mech.privatize(values, stages=np.full(40, 2)))
    for decoder in ("two_stage", "two_stage_project"):
        with pytest.raises(ValueError, match=r"no stage-2 reports \(n2 = 0\)"):
            only_first.estimate(decoder, sparsity=2)
        with pytest.raises(ValueError, match=r"no stage-1 reports \(n1 = 0\)"):
            only_second.estimate(decoder, sparsity=2)
    # The pooled decoders still apply.
    assert only_first.estimate("project").sum() == pytest.approx(1)
    single = mech.simulate(np.eye(k, dtype=int)[3], seed=1)  # one user: stage 1 only
    with pytest.raises(ValueError, match="n2 = 0"):
        single.estimate("two_stage", sparsity=1)


def test_reports_of_another_spec_or_shape_are_refused(tmp_path):
    k = 20  # RAPPOR's rows and two-stage rows are both 3 bytes: only the spec tells them apart
    mech = TSR(k, 1.0)
    values = np.arange(100) % k
    for other in (ldpdist.RAPPOR(k, 1.0), TSR(k, 2.0), TSR(k + 1, 1.0)):
        path = tmp_path / f"{type(other).__name__}-{other.k}-{other.epsilon}.ldpr"
        ldpdist.write_reports(path, other, other.privatize(values, seed=1))
        batch = ldpdist.read_reports(path)
        with pytest.raises(SpecMismatchError, match="made under"):
            mech.aggregator().add(batch)
        with pytest.raises(SpecMismatchError):
            ldpdist.read_reports(path, expect=mech)
    with pytest.raises(SpecMismatchError):
        mech.aggregator().merge(ldpdist.RAPPOR(k, 1.0).aggregator())
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        mech.aggregator().add(mech.as_reports(np.zeros((5, 4), np.uint8)))
    with pytest.raises(TypeError, match="uint8"):
        mech.aggregator().add(mech.as_reports(np.zeros((5, 3), np.int64)))
    # Padding bits set (k + 1 = 21 bits: the low 3 bits of the third byte).
    reports = mech.privatize(values, seed=2)
    bad = reports.copy()
    bad[[7, 40], 2] |= 0x01
    with pytest.raises(ValueError, match="2 of 100 reports are malformed.*row 7"):
        mech.aggregator().add(bad)
    dropped = mech.aggregator().add(bad, on_invalid="drop")
    clean = mech.aggregator().add(np.delete(reports, [7, 40], axis=0))
    assert dropped.n == 98 and dropped.dropped == 2
    np.testing.assert_array_equal(dropped.counts, clean.counts)


def test_forged_states_with_impossible_stage_counts_are_refused():
    from test_integrity import forge_state

    k = 4
    mech = TSR(k, 1.0)
    good = [3, 0, 1, 2, 1, 1, 0, 2, 2]  # n = 5: n2 = 2, n1 = 3
    assert ldpdist.Aggregator.from_bytes(forge_state(mech, good, 5)).counts.tolist() == good
    for counts, match in [([3, 0, 1, 2, 1, 1, 0, 2, 6], "stage-2 reports"),
                          ([4, 0, 1, 2, 1, 1, 0, 2, 2], "stage-1 bit count"),
                          ([3, 0, 1, 2, 1, 3, 0, 2, 2], "stage-2 bit count")]:
        with pytest.raises(IntegrityError, match=match):
            ldpdist.Aggregator.from_bytes(forge_state(mech, counts, 5))
