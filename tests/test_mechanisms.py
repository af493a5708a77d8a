"""Acceptance tests shared by every mechanism: exact privacy of the channel, sampler
fidelity, unbiasedness, simulate vs privatize, error rates, decoders, aggregators, specs and
bad input. Parametrized over every registered mechanism class."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ldpdist
from ldpdist import privacy
from ldpdist.decoders import iterative_bayesian_update
from ldpdist.mechanisms.base import _REGISTRY
from simulation_law import assert_simulate_is_exact_in_law

# The classic mechanisms, built from (k, epsilon). Compressive privatization (a sparse-recovery
# estimator with its own parameters) has its own suite: tests/test_compressive.py.
MECHANISMS = [_REGISTRY[name] for name in sorted(_REGISTRY) if name != "CompressivePrivatization"]
IDS = [cls.__name__ for cls in MECHANISMS]
# Mechanisms without an ε (``cls.private`` is False: public-coin hashing, communication-limited
# only) opt out of the privacy checks explicitly; everything else applies to them.
PRIVATE = [cls for cls in MECHANISMS if cls.private]
NOT_PRIVATE = [cls for cls in MECHANISMS if not cls.private]
KS = [2, 3, 7, 16, 100]
EPSILONS = [0.1, 0.5, 1.0, 2.0, 5.0]

# Mechanisms that promise a plain ε (uniform budgets), and context-aware ones (a budget per
# ordered pair of values: ``cls.context_aware``, ldpdist.privacy), checked against the
# budget matrix they promise instead.
PLAIN = [cls for cls in PRIVATE if not cls.context_aware]
CONTEXT_AWARE = [cls for cls in PRIVATE if cls.context_aware]

# A non-private mechanism has no ε: the suite's ε picks its message length instead, so that
# different ε still give different specs (and ε = 1 at k = 2^20 a channel too large to write).
NOT_PRIVATE_BITS = {0.1: 1, 0.5: 2, 0.7: 3, 0.8: 3, 1.0: 5, 1.5: 4, 2.0: 3, 5.0: 8}


def suite_blocks(k):
    """A fixed partition of k values for the block-structured mechanisms: blocks of sizes
    1, 2, 3, … while they fit, the rest added to the last block (k = 2: one block of 2;
    k = 7: [1, 2, 4]; k = 100: [1, …, 12, 22]), so that singletons and larger blocks of
    several sizes are exercised."""
    sizes, total = [], 0
    while total + len(sizes) + 1 <= k:
        sizes.append(len(sizes) + 1)
        total += sizes[-1]
    sizes[-1] += k - total
    return sizes


def _times(epsilon, factor):
    """``factor * epsilon`` for a number; anything else as given (so that the class, not this
    table, refuses a string or None)."""
    if isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool):
        return factor * epsilon
    return epsilon


# The per-class constructor table: how the suite builds a class from its (k, ε) when not
# ``cls(k=k, epsilon=ε)``. The asymmetric binary mechanism takes the suite's ε as epsilon_01
# and 0.75 ε as epsilon_10 (asymmetric budgets; 0.75 so that no positive ε rounds to a zero
# budget, which ε/2 of the smallest subnormal would). High-Low Hadamard Response protects
# every third value (0, 3, 6, …), so that both its Hadamard part and its dedicated slots are
# exercised at every k; Block HR takes the partition of ``suite_blocks``.
CONSTRUCTORS = {
    "PublicCoinHashing": lambda cls, k, epsilon: cls(k=k, bits=NOT_PRIVATE_BITS[epsilon],
                                                     seed=17),
    "AsymmetricBinaryResponse": lambda cls, k, epsilon: cls(epsilon_01=epsilon,
                                                            epsilon_10=_times(epsilon, 0.75)),
    "BlockHadamardResponse": lambda cls, k, epsilon: cls(suite_blocks(k), epsilon, k=k),
    "HighLowHadamardResponse": lambda cls, k, epsilon: cls(
        k=k, epsilon=epsilon, sensitive=list(range(0, int(k), 3))),
}
# The k a class supports, where it is not every k in [2, 2^32] (k is then not a parameter).
SUPPORTED_K = {"AsymmetricBinaryResponse": (2,)}


def supports(cls, k):
    ks = SUPPORTED_K.get(cls.__name__)
    return ks is None or k in ks


def k_for(cls, k):
    """The k a test that wants k uses for ``cls``: k itself when supported, else the nearest
    supported k (so every class runs every test, at a k it has)."""
    if supports(cls, k):
        return k
    return min(SUPPORTED_K[cls.__name__], key=lambda s: (abs(s - k), s))


def cases(classes, ks):
    """``(cls, k)`` parameters: each class paired with the k of ``ks`` it supports, or, when
    it supports none of them, with its k nearest ``ks[0]`` (no class drops out)."""
    params = []
    for cls in classes:
        mine = [k for k in ks if supports(cls, k)] or [k_for(cls, ks[0])]
        params += [pytest.param(cls, k, id=f"{cls.__name__}-k{k}") for k in mine]
    return params


def make(cls, k, epsilon):
    assert supports(cls, k), f"the suite asked {cls.__name__} for k = {k}: use k_for(cls, k)"
    constructor = CONSTRUCTORS.get(cls.__name__)
    if constructor is not None:
        return constructor(cls, k, epsilon)
    return cls(k=k, epsilon=epsilon)


def privatize(mech, values, seed):
    """``mech.privatize`` with a seed; a mechanism without client randomness
    (``randomized`` False: reports are a function of the value and a public user index) takes
    none, and its independent runs use disjoint user indices instead."""
    if mech.randomized:
        return mech.privatize(values, seed=seed)
    return mech.privatize(values, first_user=seed * 2**32)


def statistic(mech, counts):
    """The aggregate as the linear maps (``_expected_frequencies``) describe it: the
    aggregate itself, or (public-coin hashing) its pooled stages."""
    pooled = getattr(mech, "_linear_statistic", None)
    return pooled(counts) if pooled is not None else counts


def dirichlet(k, seed, alpha=1.0):
    return np.random.default_rng(seed).dirichlet(np.full(k, alpha))


def sample_values(p, n, seed):
    return np.random.default_rng(seed).choice(p.size, size=n, p=p)


# ------------------------------------------------------------------------------------------
# Privacy: the channel actually used


@pytest.mark.parametrize("cls, k", cases(PLAIN, KS))
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_channel_is_epsilon_ldp_and_realized_epsilon_is_exact(cls, k, epsilon):
    """Plain ε-LDP mechanisms; the context-aware ones are held to their budget matrices in
    the next test."""
    mech = make(cls, k, epsilon)
    realized = mech.realized_epsilon
    assert realized <= epsilon + 1e-12
    try:
        Q = mech.channel_matrix(max_entries=2**24)
    except ValueError as exc:
        # Only refused when the output space really is too large to write down.
        assert "max_entries" in str(exc)
        return
    assert Q.shape[0] == k
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (Q >= 0).all()
    used = Q.max(axis=0) > 0
    ratio = np.log(Q[:, used].max(axis=0) / Q[:, used].min(axis=0)).max()
    assert ratio <= epsilon + 1e-12
    assert ratio == pytest.approx(realized, abs=1e-9)


@pytest.mark.parametrize("cls, k", cases(PRIVATE, [2, 7, 16]))
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_channel_satisfies_the_budgets_it_promises(cls, k, epsilon):
    """Every private mechanism, plain or context-aware: ``verify(channel, budgets())`` holds
    (up to double-precision rounding), and ``realized_budgets()`` is the exact budget matrix
    of the channel, never above the promise."""
    mech = make(cls, k, epsilon)
    Q = mech.channel_matrix()
    promised = mech.budgets()
    assert promised.shape == (k, k)
    assert privacy.verify(Q, promised).satisfied(tolerance=1e-12)
    realized = mech.realized_budgets()
    np.testing.assert_allclose(realized, privacy.realized_budgets(Q), rtol=0, atol=1e-9)
    assert (realized <= promised + 1e-12).all()
    if not cls.context_aware:
        np.testing.assert_allclose(promised, privacy.uniform_budgets(k, epsilon))


@pytest.mark.parametrize("cls", NOT_PRIVATE, ids=[cls.__name__ for cls in NOT_PRIVATE])
def test_a_mechanism_that_is_not_private_has_no_epsilon(cls):
    """The explicit opt-out of the privacy checks above: no ε anywhere, and a docstring that
    says the reports are not private."""
    mech = make(cls, 10, 1.0)
    assert not hasattr(mech, "epsilon") and not hasattr(mech, "realized_epsilon")
    assert "epsilon" not in mech.to_dict()
    assert "NOT private" in cls.__doc__
    params = {key: value for key, value in mech.to_dict().items()
              if key not in ("mechanism", "format")}
    with pytest.raises(TypeError):
        cls(**params, epsilon=1.0)
    with pytest.raises(ValueError, match="invalid parameters"):
        ldpdist.from_dict({**mech.to_dict(), "epsilon": 1.0})


# ------------------------------------------------------------------------------------------
# Sampler fidelity

CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12,
            9: 27.88, 10: 29.59, 11: 31.26, 12: 32.91, 13: 34.53, 14: 36.12, 15: 37.70}


def chi2_critical_999(df):
    """Upper 0.1% point of chi-square: the table, then Wilson–Hilferty (error < 0.5%)."""
    if df in CHI2_999:
        return CHI2_999[df]
    z = 3.090232
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_empirical_reports_follow_the_channel(cls):
    k, epsilon, draws = k_for(cls, 4), 1.0, 60_000
    mech = make(cls, k, epsilon)
    for x in (0, k - 1):
        reports = privatize(mech, np.full(draws, x), seed=100 + x)
        if mech.report_kind == "hashed":
            # Public-coin hashing: report = (user << bits) | h_user(x). Averaged over the
            # public coin every message has probability 2^-bits (the family is strongly
            # universal), and the message is the user's hash of x.
            bits = mech.bits
            users = reports >> np.uint64(bits)
            assert np.array_equal(users, np.arange(draws, dtype=np.uint64) + np.uint64(
                (100 + x) * 2**32))
            messages = (reports & np.uint64(2**bits - 1)).astype(np.int64)
            observed = np.bincount(messages, minlength=2**bits)
            expected = draws / 2**bits
            chi2 = ((observed - expected) ** 2 / expected).sum()
            assert chi2 < chi2_critical_999(2**bits - 1), f"x = {x}: chi2 = {chi2:.1f}"
            for user in users[:20]:
                assert mech.hashes(int(user), [x])[0] == messages[int(user - users[0])]
        elif mech.report_kind == "index":
            Q = mech.channel_matrix()
            observed = np.bincount(reports.astype(np.int64), minlength=Q.shape[1])
            expected = draws * Q[x]
            keep = expected > 0
            assert observed[~keep].sum() == 0
            if keep.sum() == 1:
                continue  # a deterministic row (a singleton block): checked just above
            chi2 = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
            df = int(keep.sum()) - 1
            assert expected[keep].min() >= 5, "too few draws per cell for chi-square"
            assert chi2 < chi2_critical_999(df), f"x = {x}: chi2 = {chi2:.1f} (df {df})"
        else:
            bits = np.unpackbits(reports, axis=1)[:, : mech.output_size]
            # Per-bit probabilities from the exact channel (output o has bit j equal to
            # (o >> j) & 1), not from the estimator's linear maps: the aggregate is not the
            # per-bit counts for every bit mechanism (two-stage RAPPOR counts per stage).
            Q = mech.channel_matrix()
            outputs = np.arange(Q.shape[1])
            p_bits = np.array([Q[x] @ ((outputs >> j) & 1) for j in range(mech.output_size)])
            freq = bits.mean(axis=0)
            sd = np.sqrt(p_bits * (1 - p_bits) / draws)
            assert (np.abs(freq - p_bits) <= 4.5 * sd + 1e-12).all(), (freq, p_bits)


# ------------------------------------------------------------------------------------------
# Unbiasedness


UNBIASED_CASES = [(2, 0.1), (7, 1.0), (16, 2.0), (100, 0.5), (100, 5.0)]


@pytest.mark.parametrize("cls, k, epsilon", [
    pytest.param(cls, k, epsilon, id=f"{cls.__name__}-k{k}-eps{epsilon}")
    for cls in MECHANISMS for k, epsilon in UNBIASED_CASES if supports(cls, k)])
def test_raw_estimator_is_unbiased_on_exact_expectations(cls, k, epsilon):
    mech = make(cls, k, epsilon)
    p = dirichlet(k, seed=k)
    expected = mech._expected_frequencies(p)
    estimate = mech._core.estimate_from_frequencies(expected)
    np.testing.assert_allclose(estimate, p, rtol=0, atol=1e-9)


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_expected_frequencies_and_channel_apply_are_adjoint(cls):
    k = k_for(cls, 7)
    mech = make(cls, k, 1.5)
    p = dirichlet(k, seed=3)
    w = np.random.default_rng(4).standard_normal(mech._expected_frequencies(p).size)
    lhs = mech._expected_frequencies(p) @ w
    rhs = p @ mech._channel_apply(w)
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)


# ------------------------------------------------------------------------------------------
# simulate vs privatize


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_simulate_matches_privatize_in_mean_and_variance(cls):
    k, epsilon, runs = k_for(cls, 5), 1.0, 60
    mech = make(cls, k, epsilon)
    true_counts = np.array({5: [400, 0, 250, 100, 50], 2: [400, 250]}[k])
    values = np.repeat(np.arange(k), true_counts)
    simulated = np.array([statistic(mech, mech.simulate(true_counts, seed=s).counts)
                          for s in range(runs)], float)
    direct = np.array([statistic(mech, mech.aggregator().add(privatize(mech, values,
                                                                         seed=1000 + s)).counts)
                       for s in range(runs)], float)
    expected_mean = true_counts.sum() * mech._expected_frequencies(true_counts / true_counts.sum())
    for sample in (simulated, direct):
        mean, var = sample.mean(axis=0), sample.var(axis=0, ddof=1)
        se = np.sqrt(np.maximum(var, 1.0) / runs)
        assert (np.abs(mean - expected_mean) <= 5 * se).all()
    # Variances agree: ratio of sample variances within the F(59, 59) 0.1% band, on the
    # coordinates with enough variance to compare.
    v_sim, v_dir = simulated.var(axis=0, ddof=1), direct.var(axis=0, ddof=1)
    busy = (v_sim > 1) & (v_dir > 1)
    assert busy.any()
    assert ((v_sim[busy] / v_dir[busy] > 0.40) & (v_sim[busy] / v_dir[busy] < 2.5)).all()


@pytest.mark.parametrize("cls", [c for c in MECHANISMS if c.report_kind == "index"],
                         ids=[c.__name__ for c in MECHANISMS if c.report_kind == "index"])
def test_index_simulate_is_exact_in_law(cls):
    # Exact in law, not equal to privatize on sorted values: the simulation draws the
    # aggregate directly (a uniform multinomial plus per-value own sets, README "simulate").
    k = k_for(cls, 9)
    mech = make(cls, k, 0.8)
    assert_simulate_is_exact_in_law(mech, {9: [3, 0, 70_000, 5, 1, 0, 200, 9, 66_000],
                                           2: [200, 66_000]}[k])


# ------------------------------------------------------------------------------------------
# Error rates


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_error_falls_like_one_over_root_n(cls):
    k, epsilon, runs = k_for(cls, 20), 1.0, 12
    mech = make(cls, k, epsilon)
    p = dirichlet(k, seed=11)
    ns = np.array([2_000, 8_000, 32_000, 128_000, 512_000])
    rng = np.random.default_rng(12)
    errors = []
    for n in ns:
        err = [np.linalg.norm(mech.simulate(rng.multinomial(n, p), seed=int(n) + r)
                              .estimate("raw") - p) for r in range(runs)]
        errors.append(np.mean(err))
    slope = np.polyfit(np.log(ns), np.log(errors), 1)[0]
    assert -0.6 < slope < -0.4, f"slope {slope:.3f}, errors {errors}"


# ------------------------------------------------------------------------------------------
# Exact variance of the raw estimate (estimator_variance) and the frequency-oracle parameters

# Public-coin hashing's reports are a deterministic function of the value and the user's
# public hash: its channel matrix is one user's, and the variance is over the hash family
# (checked statistically in tests/test_public_coin_hashing.py).
VARIANCE = [cls for cls in MECHANISMS if cls.__name__ != "PublicCoinHashing"]
# The raw estimates that are pure frequency oracles (``_frequency_oracle`` not None), at the
# ε of the tests below: Hadamard Response only with one block (ε < ln 2 here).
ORACLES = {"RandomizedResponse", "RAPPOR", "OptimizedUnaryEncoding", "OptimizedLocalHashing",
           "SubsetSelection", "TwoStageRAPPOR"}


def single_report_estimates(mech, channel):
    """``(outputs, G)``: every output y the channel can produce, and G[i] the raw estimate
    from the single report ``outputs[i]`` (the per-report term of the affine raw estimate:
    the estimate of n reports is the mean of their rows). Bit-vector outputs are numbered as
    in ``channel_matrix`` (bit j of o is ``(o >> j) & 1``)."""
    outputs = np.flatnonzero(channel.sum(axis=0) > 0)
    rows = []
    for y in outputs:
        if mech.report_kind == "index":
            report = np.array([y], dtype=np.uint64)
        else:
            bits = (int(y) >> np.arange(mech.output_size)) & 1
            report = np.packbits(bits.astype(np.uint8))[None, :]
        aggregator = mech.aggregator().add(mech.as_reports(report))
        with warnings.catch_warnings():  # one-bit HR: the other groups are empty
            warnings.simplefilter("ignore", RuntimeWarning)
            rows.append(aggregator.estimate("raw"))
    return outputs, np.array(rows)


def brute_force_variance(mech, p, n):
    """Var of each coordinate of the raw estimate of n users drawn i.i.d. from p, from the
    channel and the per-report terms: ``(Σ_y q_y G[y]² - p²)/n`` with ``q = p Q``. One-bit
    HR's server assigns the groups round-robin (group j gets ``n_j`` users, fixed), and
    decodes each group's mean: the variance is the sum over groups of the within-group
    variance of the per-report term over ``n_j``."""
    channel = mech.channel_matrix()
    q = p @ channel
    outputs, G = single_report_estimates(mech, channel)
    q = q[outputs]
    if isinstance(mech, ldpdist.OneBitHadamardResponse):
        K = mech.num_groups
        sizes = n // K + (np.arange(K) < n % K)
        groups = outputs // 2
        var = np.zeros(mech.k)
        for j in np.flatnonzero(sizes):
            mine = groups == j
            w = K * q[mine]  # the law of a report of group j
            mean = w @ G[mine]
            var += (w @ G[mine] ** 2 - mean ** 2) / sizes[j]
        return var
    np.testing.assert_allclose(q @ G, p, rtol=0, atol=1e-12)  # unbiased
    return (q @ G ** 2 - p ** 2) / n


@pytest.mark.parametrize("cls, k", cases(VARIANCE, [5, 8]))
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_estimator_variance_is_exact(cls, k, epsilon):
    mech = make(cls, k, epsilon)
    sparse = np.zeros(k)
    sparse[[0, k - 1]] = [0.75, 0.25]
    for p in (dirichlet(k, seed=1), dirichlet(k, seed=2, alpha=0.3), sparse):
        for n in (1, 37, 1000):
            got = mech.estimator_variance(p, n)
            assert got.shape == (k,) and got.dtype == np.float64
            np.testing.assert_allclose(got, brute_force_variance(mech, p, n), rtol=1e-10,
                                       atol=1e-15)


@pytest.mark.parametrize("cls, k", cases(VARIANCE, [5, 8]))
def test_frequency_oracle_agrees_with_the_channel(cls, k):
    """p* = P(a report supports x | x) and q* = P(it supports x | x') for every x' != x, where
    "supports" is read off the raw estimate's per-report term ``(1[y supports x] - q*)/(p* -
    q*)``, which must take only the values 0 and 1 once mapped back."""
    mech = make(cls, k, 0.5)
    oracle = mech._frequency_oracle()
    assert (oracle is not None) == (cls.__name__ in ORACLES | {"HadamardResponse"})
    if cls is ldpdist.HadamardResponse:
        assert make(cls, k, 2.0)._frequency_oracle() is None  # several blocks
    if oracle is None:
        return
    p_star, q_star = oracle
    assert 0 <= q_star < p_star <= 1
    channel = mech.channel_matrix()
    outputs, G = single_report_estimates(mech, channel)
    support = G * (p_star - q_star) + q_star
    np.testing.assert_allclose(support, np.round(support), rtol=0, atol=1e-9)
    assert set(np.unique(np.round(support))) <= {0.0, 1.0}
    rates = channel[:, outputs] @ np.round(support)  # rates[x', x] = P(supports x | x')
    off = ~np.eye(k, dtype=bool)
    np.testing.assert_allclose(np.diag(rates), p_star, rtol=1e-12)
    np.testing.assert_allclose(rates[off], q_star, rtol=1e-12)


@pytest.mark.parametrize("cls", VARIANCE, ids=[cls.__name__ for cls in VARIANCE])
def test_estimator_variance_refuses_bad_input(cls):
    k = k_for(cls, 5)
    mech = make(cls, k, 1.0)
    p = np.full(k, 1.0 / k)
    negative = p.copy()
    negative[:2] += [-1.0, 1.0]  # sums to 1
    nan = p.copy()
    nan[1] = np.nan
    for bad, error, match in [(p[:-1], ValueError, "shape"), (np.append(p, 0.0), ValueError,
                               "shape"), (p * 1.01, ValueError, "sum to 1"),
                              (nan, ValueError, "finite"), (negative, ValueError, "negative"),
                              (p.astype(np.float32), TypeError, "float64"),
                              (p[None, :], ValueError, "one-dimensional")]:
        with pytest.raises(error, match=match):
            mech.estimator_variance(bad, 10)
    mech.estimator_variance(p + 1e-11, 10)  # within the 1e-9 tolerance
    for n, error in [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)]:
        with pytest.raises(error, match="n"):
            mech.estimator_variance(p, n)


def bassily_bound(k, n, epsilon):
    c = (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    return min((256 * c * c * math.log(k) / n) ** 0.25, math.sqrt(4 * c * c * k / n))


@pytest.mark.parametrize("k,n", [(1000, 2_000), (1000, 200_000), (16, 5_000)])
def test_projected_hadamard_response_is_within_bassily_theorem_4_2(k, n):
    # Bassily (AISTATS 2019), Theorem 4.2: E||p_hat - p||_2 <= min((256 c^2 ln J / n)^(1/4),
    # sqrt(4 c^2 J / n)), c = (e^eps + 1)/(e^eps - 1); Dirichlet(0.5) p, 20 runs, eps = 1.
    # Algorithm 5 is the high-privacy HR (blocks=1) at every epsilon.
    epsilon, runs = 1.0, 20
    mech = ldpdist.HadamardResponse(k, epsilon, blocks=1)
    rng = np.random.default_rng(k + n)
    raw_errors, projected_errors = [], []
    for r in range(runs):
        p = rng.dirichlet(np.full(k, 0.5))
        agg = mech.simulate(rng.multinomial(n, p), seed=r)
        raw, projected = agg.estimate("raw"), agg.estimate("project")
        raw_errors.append(np.linalg.norm(raw - p))
        projected_errors.append(np.linalg.norm(projected - p))
        # Projection onto a convex set containing p never increases the l2 error.
        assert projected_errors[-1] <= raw_errors[-1] + 1e-12
    bound = bassily_bound(k, n, epsilon)
    assert np.mean(projected_errors) <= bound, (np.mean(projected_errors), bound)
    # The note's measurements (raw ≈ 1.53 / 0.152 / 0.124, projected ≈ 0.19 / 0.068 / 0.101).
    note = {(1000, 2_000): (1.53, 0.19), (1000, 200_000): (0.152, 0.068), (16, 5_000): (0.124, 0.101)}
    raw_note, projected_note = note[(k, n)]
    assert np.mean(raw_errors) == pytest.approx(raw_note, rel=0.1)
    assert np.mean(projected_errors) == pytest.approx(projected_note, rel=0.1)
    # The general (b, B) construction (B = 2 at eps = 1) is within the bound too.
    general = ldpdist.HadamardResponse(k, epsilon)
    assert general.construction[0] == 2
    errors = [np.linalg.norm(general.simulate(rng.multinomial(n, p), seed=100 + r)
                             .estimate("project") - p) for r, p in
              enumerate(rng.dirichlet(np.full(k, 0.5), size=runs))]
    assert np.mean(errors) <= bound


# ------------------------------------------------------------------------------------------
# Decoders


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_decoders(cls):
    k = k_for(cls, 12)
    s = min(3, k - 1)
    mech = make(cls, k, 1.0)
    p = dirichlet(k, seed=5, alpha=0.3)
    agg = mech.simulate(np.random.default_rng(6).multinomial(20_000, p), seed=7)
    raw = agg.estimate("raw")
    projected = agg.estimate("project")
    normalized = agg.estimate("normalize")
    sparse = agg.estimate("sparse_project", sparsity=s)
    ibu = agg.estimate("ibu")
    for est in (projected, normalized, sparse, ibu):
        assert est.shape == (k,) and (est >= 0).all() and est.sum() == pytest.approx(1, abs=1e-9)
    np.testing.assert_allclose(projected, ldpdist.kernels.project_simplex(raw))
    np.testing.assert_allclose(normalized, np.maximum(raw, 0) / np.maximum(raw, 0).sum())
    assert np.count_nonzero(sparse) <= s
    # no sparsity: the noise-level rule chooses s (tests/test_sparsity_rule.py)
    assert np.all(agg.estimate("sparse_project") >= 0)
    with pytest.raises(ValueError, match="sparsity"):
        agg.estimate("project", sparsity=3)
    with pytest.raises(ValueError, match="decoder"):
        agg.estimate("mle")


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_ibu_increases_the_likelihood_monotonically_and_converges(cls):
    k = k_for(cls, 10)
    mech = make(cls, k, 2.0)
    p = dirichlet(k, seed=8, alpha=0.5)
    agg = mech.simulate(np.random.default_rng(9).multinomial(50_000, p), seed=10)
    result = iterative_bayesian_update(mech, agg.counts, agg.n, record_likelihood=True)
    plain = iterative_bayesian_update(mech, agg.counts, agg.n, max_iter=200, tol=0.0,
                                      record_likelihood=True, accelerate=False)
    assert (np.diff(plain.log_likelihood) >= -1e-9 * np.abs(plain.log_likelihood[:-1])).all()
    ll = np.array(result.log_likelihood)
    assert (np.diff(ll) >= -1e-7 * np.abs(ll[:-1])).all()
    assert ll[-1] > ll[0]
    assert result.converged
    # At the optimum, IBU is at least as likely as the projected estimate.
    projected = agg.estimate("project")
    ll_projected = iterative_bayesian_update(mech, agg.counts, agg.n, max_iter=1,
                                             start=np.maximum(projected, 1e-300),
                                             record_likelihood=True).log_likelihood[0]
    assert ll[-1] >= ll_projected - 1e-6 * abs(ll_projected)


# ------------------------------------------------------------------------------------------
# Aggregators


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_merged_shards_equal_one_aggregator_and_bytes_round_trip(cls):
    k = k_for(cls, 30)
    mech = make(cls, k, 1.0)
    values = sample_values(dirichlet(k, seed=1), 9_000, seed=2)
    reports = privatize(mech, values, seed=3)
    whole = mech.aggregator().add(reports)
    shards = [mech.aggregator().add(part) for part in np.array_split(reports, 4)]
    merged = shards[0]
    for shard in shards[1:]:
        merged.merge(shard)
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert merged.n == whole.n == 9_000
    np.testing.assert_array_equal(merged.estimate(), whole.estimate())
    again = ldpdist.Aggregator.from_bytes(whole.to_bytes())
    assert again.mechanism == mech and again.n == whole.n
    np.testing.assert_array_equal(again.counts, whole.counts)
    with pytest.raises(ValueError, match="made under"):
        whole.merge(make(cls, k, 2.0).aggregator())
    blob = whole.to_bytes()
    for corrupt in (b"XXXX" + blob[4:], blob[:-8], blob[:20]):
        with pytest.raises(ValueError):
            ldpdist.Aggregator.from_bytes(corrupt)


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_spec_round_trips_through_json(cls):
    mech = make(cls, k_for(cls, 50), 0.7)
    spec = json.loads(json.dumps(mech.to_dict()))
    assert ldpdist.from_dict(spec) == mech
    assert spec["mechanism"] == cls.__name__
    with pytest.raises(ValueError, match="unknown mechanism"):
        ldpdist.from_dict({**spec, "mechanism": "Nope"})
    with pytest.raises(ValueError, match="invalid parameters"):
        ldpdist.from_dict({**spec, "bogus": 1})


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_reference_code_aliases(cls):
    k = k_for(cls, 8)
    mech = make(cls, k, 1.0)
    values = sample_values(dirichlet(k, seed=1), 2_000, seed=2)
    if mech.randomized:
        reports = mech.encode_string(values, seed=5)
        np.testing.assert_array_equal(reports, mech.privatize(values, seed=5))
    else:
        reports = mech.encode_string(values)
        np.testing.assert_array_equal(reports, mech.privatize(values))
    np.testing.assert_allclose(mech.decode_string(reports, normalization=0),
                               mech.estimate(reports, decoder="normalize"))
    np.testing.assert_allclose(mech.decode_string(reports, normalization=1),
                               mech.estimate(reports, decoder="project"))
    with pytest.raises(ValueError, match="normalization"):
        mech.decode_string(reports, normalization=2)


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_seeded_privatize_is_thread_count_independent(cls):
    k = k_for(cls, 300)
    mech = make(cls, k, 1.0)
    call = "m.privatize(v, seed=77)" if mech.randomized else "m.privatize(v, first_user=77)"
    code = (
        "import hashlib, numpy as np, ldpdist\n"
        f"m = ldpdist.from_dict({mech.to_dict()!r})\n"
        f"v = np.arange(200_000) % {k}\n"
        f"print(hashlib.sha256({call}.tobytes()).hexdigest())\n"
    )
    digests = set()
    for threads in ("1", "2"):
        env = {**os.environ, "RAYON_NUM_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    v = np.arange(1000) % k
    if mech.randomized:
        assert not np.array_equal(mech.privatize(v), mech.privatize(v))  # OS entropy by default
    else:  # no client randomness: the same users give the same reports
        assert np.array_equal(mech.privatize(v), mech.privatize(v))


# ------------------------------------------------------------------------------------------
# Bad input


# The suite's ε values each class must refuse (the asymmetric binary mechanism accepts 0
# and inf as budgets: a zero budget is a constant report, inf no constraint).
BAD_EPSILONS = {"AsymmetricBinaryResponse": (-1, float("nan"), -float("inf"), 700.5)}


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_bad_parameters(cls):
    k = k_for(cls, 10)
    if cls.private:  # (a mechanism without ε: tests/test_<its module>.py)
        for epsilon in BAD_EPSILONS.get(cls.__name__, (0, -1, float("nan"), float("inf"))):
            with pytest.raises(ValueError, match="epsilon"):
                make(cls, k, epsilon)
        with pytest.raises(TypeError):
            make(cls, k, "1.0")
    if cls.__name__ in SUPPORTED_K:
        # k is not a parameter of a class with fixed k: passing one is refused.
        params = {key: value for key, value in make(cls, k, 1.0).to_dict().items()
                  if key not in ("mechanism", "format")}
        for bad in (1, 10, 10.0, k):
            with pytest.raises(TypeError):
                cls(k=bad, **params)
        return
    with pytest.raises(ValueError, match="k"):
        make(cls, 1, 1.0)
    with pytest.raises(TypeError):
        make(cls, 10.0, 1.0)


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_bad_values(cls):
    k = k_for(cls, 10)
    mech = make(cls, k, 1.0)
    with pytest.raises(ValueError, match=rf"values\[2\] = {k}"):
        mech.privatize([1, min(2, k - 1), k, min(3, k - 1)])
    with pytest.raises(ValueError, match=r"values\[1\] = -1"):
        mech.privatize(np.array([1, -1, 3]))
    with pytest.raises(TypeError, match="integers"):
        mech.privatize(np.array([1.0, 2.5]))
    with pytest.raises(TypeError, match="integers"):
        mech.privatize(np.array([1.0, 2.0]))
    with pytest.raises(TypeError):
        mech.privatize(np.array([True, False]))
    with pytest.raises(ValueError, match="one-dimensional"):
        mech.privatize(np.zeros((2, 2), dtype=int))
    empty = mech.privatize([])
    assert len(empty) == 0
    with pytest.raises(ValueError, match="no reports"):
        mech.estimate(empty)
    with pytest.raises(ValueError, match="no reports"):
        mech.aggregator().estimate()


@pytest.mark.parametrize("cls", [c for c in MECHANISMS if c.report_kind == "index"],
                         ids=[c.__name__ for c in MECHANISMS if c.report_kind == "index"])
def test_malformed_index_reports_are_rejected_or_dropped(cls):
    k = k_for(cls, 10)
    mech = make(cls, k, 1.0)
    good = mech.privatize(np.arange(100) % k, seed=1).astype(np.int64)
    bad = good.copy()
    bad[[5, 17, 60]] = [mech.output_size, -3, mech.output_size + 7]
    with pytest.raises(ValueError, match=r"reports\[17\] = -3"):
        mech.estimate(bad)
    bad[17] = min(2, mech.output_size - 1)
    with pytest.raises(ValueError, match=r"2 of 100 reports.*reports\[5\]"):
        mech.estimate(bad)
    bad[17] = -3
    agg = mech.aggregator().add(bad, on_invalid="drop")
    assert agg.n == 97 and agg.dropped == 3
    clean = mech.aggregator().add(np.delete(good, [5, 17, 60]))
    np.testing.assert_array_equal(agg.counts, clean.counts)
    with pytest.raises(TypeError, match="reports must be integers, got dtype float64"):
        mech.estimate(mech.as_reports(np.array([1.0, 2.0])))
    with pytest.raises(ValueError, match="on_invalid"):
        mech.aggregator().add(good, on_invalid="ignore")


@pytest.mark.parametrize("cls", MECHANISMS, ids=IDS)
def test_requests_too_large_for_memory_fail_before_allocating(cls):
    k = k_for(cls, 2**20)
    mech = make(cls, k, 1.0)
    with pytest.raises(ValueError, match="max_entries"):
        if k == 2**20:
            mech.channel_matrix(**({} if mech.private else {"user": 0}))
        else:  # a class with small fixed k: the bound itself is what refuses
            mech.channel_matrix(max_entries=k * mech.output_size - 1)
    if cls.report_kind == "bits":
        # Packed reports take k/8 bytes per user: 10^6 users at k = 2^40 need 1.4 * 10^17
        # bytes; refused before anything is allocated.
        wide = make(cls, 2**32, 1.0)
        with pytest.raises(MemoryError, match="needs .* more than the memory budget"):
            wide.privatize(np.zeros(1_000_000, dtype=np.uint32))
    if cls.report_kind == "hashed":
        # 2k + 1 counts: 64 GiB at k = 2^32, refused before anything is allocated.
        with pytest.raises(MemoryError, match="needs .* more than the memory budget"):
            make(cls, 2**32, 1.0).aggregator()


# -- typed reports: privatize returns ldpdist.Reports, a plain array is never counted ---------

# Every mechanism, compressive privatization included (its own suite builds it otherwise).
TYPED = MECHANISMS + [ldpdist.CompressivePrivatization]
TYPED_IDS = IDS + ["CompressivePrivatization"]


def typed_mechanism(cls, epsilon=1.0):
    if cls is ldpdist.CompressivePrivatization:
        return cls(k=64, epsilon=epsilon, m=16, seed=3)
    return make(cls, k_for(cls, 16), epsilon)


def typed_reports(mech, n=500, seed=1):
    values = np.random.default_rng(seed).integers(0, mech.k, n)
    return values, privatize(mech, values, seed)


def assert_unchanged(agg):
    assert agg.n == 0 and agg.dropped == 0 and not agg.counts.any() and not agg.batches


@pytest.mark.parametrize("cls", TYPED, ids=TYPED_IDS)
def test_values_passed_for_reports_are_refused_with_a_clear_message(cls):
    """The mix-up once accepted silently: the users' values given where reports belong. For most index
    mechanisms values in [0, k) are valid reports, so without the type check they would be
    counted silently; the message says what was passed and how to declare real reports."""
    mech = typed_mechanism(cls)
    values, reports = typed_reports(mech)
    name = type(mech).__name__
    agg = mech.aggregator()
    for where, call in (("Aggregator.add", agg.add), (f"{name}.estimate", mech.estimate)):
        with pytest.raises(TypeError) as refused:
            call(values)
        message = str(refused.value)
        assert message.startswith(f"{where} takes reports, got a plain ndarray (dtype "
                                  f"{values.dtype}, shape ({values.size},))"), message
        for part in (f"{name}.privatize returns ldpdist.Reports",
                     "users' values instead of their reports",
                     "declare them: mech.as_reports(array)"):
            assert part in message, message
        with pytest.raises(TypeError, match=rf"got a list of {values.size} items"):
            call(values.tolist())
        with pytest.raises(TypeError, match="as_reports"):
            call(np.asarray(reports))  # real reports with the tag stripped: still undeclared
    assert_unchanged(agg)
    if hasattr(mech, "split_reports"):
        with pytest.raises(TypeError, match=f"{name}.split_reports takes reports"):
            mech.split_reports(values)
    with pytest.raises(TypeError, match="encode_reports takes reports"):
        ldpdist.reports.encode_reports(mech, values)  # a file would stamp the spec on them
    # the same data declared is counted (the opt-in), and the refusal was only the type
    assert mech.aggregator().add(mech.as_reports(np.asarray(reports))).n == values.size


@pytest.mark.parametrize("cls", TYPED, ids=TYPED_IDS)
def test_reports_of_another_spec_are_refused(cls):
    mech, other = typed_mechanism(cls, 1.0), typed_mechanism(cls, 2.0)
    assert mech.fingerprint != other.fingerprint
    _, reports = typed_reports(mech)
    assert reports.fingerprint == mech.fingerprint and reports.mechanism == type(mech).__name__
    agg = other.aggregator()
    for call in (agg.add, other.estimate, other.as_reports):
        with pytest.raises(ldpdist.SpecMismatchError) as refused:
            call(reports)
        message = str(refused.value)  # names both specs, as the file flow does
        assert f"reports of {mech!r}, not of {other!r}" in message, message
    assert_unchanged(agg)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().add(reports[:10])  # a slice is still the first spec's
    with pytest.raises(ldpdist.SpecMismatchError):
        ldpdist.reports.encode_reports(other, reports)
    if hasattr(mech, "split_reports"):
        with pytest.raises(ldpdist.SpecMismatchError):
            other.split_reports(reports)


@pytest.mark.parametrize("cls", TYPED, ids=TYPED_IDS)
def test_declared_reports_count_exactly_like_privatized_ones(cls):
    mech = typed_mechanism(cls)
    _, reports = typed_reports(mech)
    assert type(reports) is ldpdist.Reports and isinstance(reports, np.ndarray)
    # privatize wraps the core's array without copying it: a view of a plain ndarray
    assert not reports.flags.owndata and type(reports.base) is np.ndarray
    assert reports.base.shape == reports.shape and np.shares_memory(reports, reports.base)
    assert reports.ctypes.data == reports.base.ctypes.data
    plain = np.array(reports)  # a copy without the tag, as read from another system
    assert type(plain) is np.ndarray and not hasattr(plain, "fingerprint")
    declared = mech.as_reports(plain)
    assert type(declared) is ldpdist.Reports and declared.fingerprint == mech.fingerprint
    assert np.shares_memory(declared, plain) and declared.base is plain  # no copy either
    assert mech.as_reports(reports) is reports  # already this spec's
    counted = mech.aggregator().add(reports)
    again = mech.aggregator().add(declared)
    np.testing.assert_array_equal(counted.counts, again.counts)
    assert counted.n == again.n == len(reports)
    np.testing.assert_array_equal(mech.estimate(declared, "raw"), mech.estimate(reports, "raw"))
    if mech.report_kind != "bits":  # a hand-written case: a list declared
        listed = mech.as_reports(reports.tolist())
        np.testing.assert_array_equal(mech.aggregator().add(listed).counts, counted.counts)
    # the reference-code decoder is the interoperability entry point: plain arrays as they are
    np.testing.assert_allclose(mech.decode_string(plain, normalization=1),
                               mech.estimate(reports, "project"), rtol=0, atol=1e-12)
    with pytest.raises(ldpdist.SpecMismatchError):
        typed_mechanism(cls, 2.0).decode_string(reports)


@pytest.mark.parametrize("cls", [ldpdist.HadamardResponse, ldpdist.RAPPOR],
                         ids=["index", "bits"])
def test_reports_keep_their_tag_where_the_data_is_still_reports(cls):
    """Views, slices, subsets, copies, astype, joins of one spec, pickling keep the tag;
    arithmetic, other specs and plain arrays drop it."""
    import copy
    import io
    import pickle

    mech = make(cls, 16, 1.0)
    _, reports = typed_reports(mech, n=100)
    fp = mech.fingerprint

    def tagged(x):
        return type(x) is ldpdist.Reports and x.fingerprint == fp and x.mechanism == cls.__name__

    kept = {
        "slice": reports[10:50], "step": reports[::3], "fancy": reports[[3, 1, 4, 1, 5]],
        "boolean": reports[np.arange(100) % 2 == 0], "view": reports.view(),
        "copy": reports.copy(), "copy.copy": copy.copy(reports),
        "deepcopy": copy.deepcopy(reports), "astype": reports.astype(np.int64),
        "pickle": pickle.loads(pickle.dumps(reports)),
        "pickle 5": pickle.loads(pickle.dumps(reports, protocol=5)),
        "concatenate": np.concatenate([reports[:40], reports[40:]]),
        "vstack": np.vstack([reports, reports]), "hstack": np.hstack([reports, reports]),
        "stack": np.stack([reports, reports]), "delete": np.delete(reports, [0, 5], axis=0),
    }
    for what, x in kept.items():
        assert tagged(x), what
    for what in ("slice", "view", "step"):
        assert np.shares_memory(kept[what], reports), what  # views stay views
    for what in ("copy", "deepcopy", "pickle", "pickle 5", "concatenate"):
        np.testing.assert_array_equal(np.asarray(kept[what]).reshape(-1)[:reports.size],
                                      np.asarray(reports).reshape(-1), err_msg=what)
    np.testing.assert_array_equal(kept["concatenate"], reports)
    joined = mech.aggregator().add(kept["concatenate"])
    np.testing.assert_array_equal(joined.counts, mech.aggregator().add(reports).counts)
    other = make(cls, 16, 2.0).privatize(np.arange(10), seed=1)
    dropped = {
        "add": reports + 1, "equal": reports == reports, "sum": reports.sum(),
        "max": reports.max(), "asarray": np.asarray(reports), "array": np.array(reports),
        "zeros_like": np.zeros_like(reports), "full_like": np.full_like(reports, 3),
        "where": np.where(reports > 0, reports, 0), "insert": np.insert(reports, 0, 1, axis=0),
        "other spec": np.concatenate([reports, other]),
        "plain": np.concatenate([reports, np.asarray(reports)]),
        "view as another dtype": reports.view(np.int8),
    }
    for what, x in dropped.items():
        assert not isinstance(x, ldpdist.Reports), what
    iadd = reports.copy()
    iadd += 1  # in-place arithmetic: the name now holds a plain array
    assert not isinstance(iadd, ldpdist.Reports)
    # an ndarray everywhere: len, shape, dtype, equality, np.save
    assert len(reports) == 100 and reports.shape == np.asarray(reports).shape
    assert reports.dtype == np.asarray(reports).dtype
    assert (reports == np.asarray(reports)).all() and np.array_equal(reports, kept["copy"])
    buffer = io.BytesIO()
    np.save(buffer, reports)
    buffer.seek(0)
    np.testing.assert_array_equal(np.load(buffer), reports)
    text = repr(reports)
    assert text.startswith("Reports(") and f"mechanism={cls.__name__!r}" in text
    assert fp[:16] in text
    assert str(reports) == str(np.asarray(reports))


def test_report_batches_and_files_carry_reports(tmp_path):
    mech = ldpdist.HadamardResponse(16, 1.0)
    values, reports = typed_reports(mech)
    batch = ldpdist.write_reports(tmp_path / "r.ldpr", mech, reports)
    read = ldpdist.read_reports(tmp_path / "r.ldpr", expect=mech)
    for b in (batch, read):
        assert type(b.reports) is ldpdist.Reports and b.reports.fingerprint == mech.fingerprint
    assert not read.reports.flags.writeable  # still the read-only memory map, not a copy
    np.testing.assert_array_equal(mech.aggregator().add(read.reports).counts,
                                  mech.aggregator().add(read).counts)
    with pytest.raises(TypeError, match="write_reports takes reports"):
        ldpdist.write_reports(tmp_path / "values.ldpr", mech, values)
    assert not (tmp_path / "values.ldpr").exists()
    with pytest.raises(ldpdist.SpecMismatchError):
        ldpdist.write_reports(tmp_path / "other.ldpr", ldpdist.HadamardResponse(16, 2.0),
                              reports)
    with pytest.raises(ldpdist.SpecMismatchError):
        ldpdist.HadamardResponse(16, 2.0).as_reports(read)
