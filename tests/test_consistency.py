"""The consistency post-processing family (ldpdist.consistency; Wang, Lopuhaä-Zwakenberg, Li,
Škorić & Li, NDSS 2020): each method's defining property, the two aliases of existing
decoders, bad input, and every mechanism accepting every new decoder name."""

from __future__ import annotations

import statistics
import warnings

import numpy as np
import pytest

import ldpdist
from ldpdist import cli, consistency as C, decoders, kernels
from ldpdist.specs import _REGISTRY


def random_raws(seed=0, count=300):
    """Raw-estimate-like vectors: noise around sparse and dense distributions, plus the
    edge cases (all negative, all zero, one entry, ties, huge values, sum below 1)."""
    rng = np.random.default_rng(seed)
    out = [np.array([0.3]), np.array([-0.2]), np.array([1.5]), np.zeros(5), -np.ones(4),
           np.array([0.4, 0.4, 0.4]), np.array([0.5, 0.5, -0.1]), np.array([0.2, 0.1, 0.0]),
           np.array([1e12, -1e12, 3.0]), np.array([0.25] * 4), np.array([2.0, 0.0, -0.0])]
    for _ in range(count):
        k = int(rng.integers(2, 200))
        p = rng.dirichlet(np.full(k, rng.choice([0.1, 1.0, 10.0])))
        noise = rng.normal(0, rng.choice([1e-4, 0.01, 0.1, 1.0]), k)
        raw = p + noise
        if rng.random() < 0.1:
            raw = np.round(raw, 2)          # ties, like the counts of small n
        out.append(raw)
    return out


def oracle_noise(k, n, p_star=0.5, q_star=0.1, bernoulli=False):
    """A fake mechanism's noise: the pure-frequency-oracle variance (i.i.d. users), or the
    per-user Bernoulli form (affine in p_x) of the consistency paper."""
    gap = p_star - q_star

    def variance(p):
        if bernoulli:
            return (q_star * (1 - q_star) + p * gap * (1 - p_star - q_star)) / (n * gap * gap)
        s = q_star + gap * p
        return s * (1 - s) / (n * gap * gap)

    return C.NoiseModel(k, n, variance, "fake oracle")


# -- Base-Pos, Post-Pos, Norm ------------------------------------------------------------------

def test_base_pos_clips_only_the_negatives():
    for raw in random_raws():
        out = C.base_pos(raw)
        assert (out >= 0).all()
        np.testing.assert_array_equal(out[raw >= 0], raw[raw >= 0])
        assert (out[raw < 0] == 0).all()


def test_post_pos_keeps_the_raw_estimate_and_clips_query_answers():
    rng = np.random.default_rng(1)
    raw = rng.normal(0, 0.05, 50)
    np.testing.assert_array_equal(C.post_pos(raw), raw)
    queries = [range(0, 10), range(5, 50), [1, 7, 9], np.arange(50) % 3 == 0]
    sums = np.array([raw[0:10].sum(), raw[5:50].sum(), raw[[1, 7, 9]].sum(),
                     raw[::3].sum()])
    np.testing.assert_allclose(C.answer(raw, "post_pos", queries), np.maximum(sums, 0))
    assert (sums < 0).any() and (sums > 0).any()      # both cases are exercised
    # the other methods answer from their own estimate, unclipped
    np.testing.assert_allclose(C.answer(raw, "norm", queries),
                               C.query_sums(C.norm(raw), queries))


def test_norm_adds_one_constant_and_sums_to_one():
    for raw in random_raws():
        out = C.norm(raw)
        shift = out - raw
        assert np.ptp(shift) <= 1e-12 * max(1.0, np.abs(raw).max())
        assert out.sum() == pytest.approx(1.0, abs=1e-9 * max(1.0, np.abs(raw).sum()))


# -- Base-Cut ----------------------------------------------------------------------------------

def test_base_cut_zeroes_exactly_the_entries_not_above_the_threshold():
    rng = np.random.default_rng(2)
    k, alpha = 500, 0.05
    sigma2 = rng.uniform(1e-6, 1e-4, k)
    raw = rng.normal(0, np.sqrt(sigma2)) + np.where(rng.random(k) < 0.05, 0.05, 0.0)
    z = statistics.NormalDist().inv_cdf(1 - alpha / k)
    threshold = np.sqrt(sigma2) * z
    np.testing.assert_allclose(C.base_cut_threshold(k, sigma2, alpha), threshold, rtol=1e-12)
    out = C.base_cut(raw, null_variance=sigma2, alpha=alpha)
    above = raw > threshold
    assert 0 < above.sum() < k
    np.testing.assert_array_equal(out[above], raw[above])
    assert (out[~above] == 0).all()
    # the threshold grows with k (Bonferroni) and falls with α
    assert C.base_cut_threshold(10 * k, 1.0)[0] > C.base_cut_threshold(k, 1.0)[0]
    assert C.base_cut_threshold(k, 1.0, 0.2)[0] < C.base_cut_threshold(k, 1.0)[0]


def test_base_cut_controls_the_family_wise_error():
    # 1000 values of frequency 0 and 5 heavy ones, Gaussian noise of the model: at most one
    # zero-frequency value survives with probability ≈ 1 − (1 − α/k)^k ≈ α
    rng = np.random.default_rng(3)
    k, n, trials, alpha = 1005, 10_000, 400, 0.05
    sigma = 0.002
    noise = C.NoiseModel.constant(k, n, sigma * sigma)
    truth = np.zeros(k)
    truth[:5] = 0.2
    false_alarms = 0
    for _ in range(trials):
        out = C.base_cut(truth + rng.normal(0, sigma, k), noise, alpha=alpha)
        assert (out[:5] > 0).all()                      # the heavy values are kept
        false_alarms += bool((out[5:] > 0).any())
    rate = false_alarms / trials
    expected = 1 - (1 - alpha / k) ** (k - 5)
    se = np.sqrt(expected * (1 - expected) / trials)
    assert abs(rate - expected) <= 4 * se, (rate, expected)


def test_base_cut_uses_the_variance_of_a_zero_frequency():
    k, n = 40, 5000
    noise = oracle_noise(k, n)
    p = np.random.default_rng(4).dirichlet(np.full(k, 0.5))
    null = noise.null_variance(p)
    # an oracle's variance depends on p_x alone: at p_x = 0 it is q(1 − q)/(n (p − q)²)
    np.testing.assert_allclose(null, 0.1 * 0.9 / (n * 0.4 ** 2), rtol=1e-12)
    raw = p + np.random.default_rng(5).normal(0, 0.01, k)
    np.testing.assert_array_equal(C.base_cut(raw, noise),
                                  C.base_cut(raw, null_variance=null))


# -- Norm-Mul = normalize, Norm-Sub = project --------------------------------------------------

def test_norm_mul_is_the_normalize_decoder():
    assert decoders.ALIASES["norm_mul"] == "normalize"
    for raw in random_raws():
        expected = C.norm_mul(raw)
        for out in (decoders.normalize(raw), decoders.finish(raw, "norm_mul"),
                    decoders.finish(raw, "normalize")):
            np.testing.assert_array_equal(out, expected)
        if (raw > 0).any():      # the definition: clip, then one factor to sum 1
            positive = np.maximum(raw, 0)
            np.testing.assert_allclose(expected, positive / positive.sum(), rtol=1e-14)
        else:                    # nothing positive: uniform (the decoders' rule)
            np.testing.assert_array_equal(expected, np.full(raw.size, 1 / raw.size))


def bisection_norm_sub(raw):
    """The paper's definition, independently: max(raw + δ, 0) with δ making the sum 1."""
    low, high = -raw.max() - 1.0, -raw.max() + 1.0 + (1.0 - raw.sum()) / raw.size + 1.0
    low, high = min(low, high), max(low, high, -raw.min() + 1.0)
    for _ in range(200):
        mid = (low + high) / 2
        if np.maximum(raw + mid, 0).sum() > 1:
            high = mid
        else:
            low = mid
    return np.maximum(raw + (low + high) / 2, 0)


def test_norm_sub_is_the_project_decoder():
    assert decoders.ALIASES["norm_sub"] == "project"
    for raw in random_raws():
        expected = kernels.project_simplex(raw)
        for out in (C.norm_sub(raw), decoders.finish(raw, "norm_sub"),
                    decoders.finish(raw, "project")):
            np.testing.assert_array_equal(out, expected)
        if np.abs(raw).max() < 1e6:
            np.testing.assert_allclose(expected, bisection_norm_sub(raw), atol=1e-12)


# -- Norm-Cut ----------------------------------------------------------------------------------

def test_norm_cut_keeps_the_largest_top_set_with_total_at_most_one():
    for raw in random_raws():
        out = C.norm_cut(raw)
        positive = raw > 0
        kept = out > 0
        assert set(np.flatnonzero(kept)) <= set(np.flatnonzero(positive))
        np.testing.assert_array_equal(out[kept], raw[kept])      # not rescaled
        if raw[positive].sum() <= 1:
            np.testing.assert_array_equal(out, C.base_pos(raw))
            continue
        assert out.sum() <= 1 + 1e-12
        cut = positive & ~kept
        assert cut.any()
        if kept.any():
            assert raw[kept].min() > raw[cut].max()             # a threshold: the top ones
        # maximal: the next tier (every entry equal to the largest one cut) does not fit
        tier = raw[cut].max()
        assert out.sum() + raw[raw == tier].sum() > 1 - 1e-12


def test_norm_cut_keeps_or_cuts_equal_entries_together():
    np.testing.assert_array_equal(C.norm_cut(np.array([0.4, 0.4, 0.4, -1.0])), np.zeros(4))
    np.testing.assert_array_equal(C.norm_cut(np.array([0.5, 0.3, 0.3, 0.2])),
                                  [0.5, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(C.norm_cut(np.array([0.5, 0.3, 0.2, 0.2])),
                                  [0.5, 0.3, 0.0, 0.0])
    np.testing.assert_array_equal(C.norm_cut(np.array([0.6, -0.2, 0.3])), [0.6, 0.0, 0.3])


# -- MLE-Apx -----------------------------------------------------------------------------------

def test_weighted_projection_solves_its_problem():
    rng = np.random.default_rng(6)
    for _ in range(300):
        k = int(rng.integers(1, 60))
        v = rng.normal(0, rng.choice([0.01, 1.0, 10.0]), k)
        w = rng.uniform(0.05, 5.0, k)
        p = C.project_simplex_weighted(v, w)
        assert (p >= 0).all() and p.sum() == pytest.approx(1.0, abs=1e-12)
        # KKT: (v − p)/w = λ on the support, v/w <= λ off it
        support = p > 0
        lam = (v - p)[support] / w[support]
        assert np.ptp(lam) <= 1e-9 * max(1.0, np.abs(lam).max())
        assert (v[~support] / w[~support] <= lam.mean() + 1e-9).all()
        np.testing.assert_allclose(C.project_simplex_weighted(v, np.full(k, 2.5)),
                                   kernels.project_simplex(v), atol=1e-14)


def test_mle_apx_satisfies_its_optimality_conditions():
    rng = np.random.default_rng(7)
    for trial in range(40):
        k, n = int(rng.integers(5, 300)), int(rng.integers(1_000, 1_000_000))
        noise = oracle_noise(k, n, p_star=0.5, q_star=float(rng.uniform(0.01, 0.4)))
        p = rng.dirichlet(np.full(k, 0.3))
        raw = p + rng.normal(0, np.sqrt(noise.variance(p)))
        out = C.mle_apx(raw, noise)
        assert (out >= 0).all() and out.sum() == pytest.approx(1.0, abs=1e-12)
        var = noise.variance(out)           # the variances at the solution itself
        support = out > 0
        lam = (raw - out)[support] / var[support]
        assert np.ptp(lam) <= 1e-7 * max(1.0, np.abs(lam).max()), trial
        assert (raw[~support] / var[~support] <= lam.mean() * (1 + 1e-9) + 1e-9).all()


def test_mle_apx_converges_where_plain_iteration_cycles():
    # randomized response with k = 1000 and 500 users: the plain fixed-point steps alternate
    # between two supports forever (the variance grows fast with the frequency)
    k, n = 1000, 500
    p = (np.arange(k) + 1.0) ** -1.1
    p /= p.sum()
    mech = ldpdist.RandomizedResponse(k, 2.0)
    raw = mech.simulate(np.random.default_rng(0).multinomial(n, p), seed=1).estimate("raw")
    noise = C.noise_model(mech, n, raw)
    step = kernels.project_simplex(raw)
    for _ in range(3):
        step = C.project_simplex_weighted(raw, noise.variance(step))
    assert np.abs(C.project_simplex_weighted(raw, noise.variance(step)) - step).max() > 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = C.mle_apx(raw, noise)
    np.testing.assert_allclose(C.project_simplex_weighted(raw, noise.variance(out)), out,
                               atol=1e-12)


def paper_mle_apx(raw, a, b):
    """The closed form for the per-user Bernoulli variance a + b·f (Wang et al.): on the
    kept set f = (raw − λa)/(1 + λb) with Σ f = 1; entries that go negative are dropped and
    the set solved again, starting from the positive raw entries."""
    keep = raw > 0
    while True:
        lam = (raw[keep].sum() - 1.0) / (a * keep.sum() + b)
        f = np.where(keep, (raw - lam * a) / (1 + lam * b), 0.0)
        if (f >= 0).all():
            return f
        keep &= f > 0


def test_mle_apx_is_the_paper_closed_form_for_the_bernoulli_variance():
    rng = np.random.default_rng(8)
    n, p_star, q_star = 20_000, 0.5, 0.12
    gap = p_star - q_star
    a = q_star * (1 - q_star) / (n * gap * gap)
    b = (1 - p_star - q_star) / (n * gap)
    for _ in range(30):
        k = int(rng.integers(5, 200))
        noise = oracle_noise(k, n, p_star, q_star, bernoulli=True)
        p = rng.dirichlet(np.full(k, 0.5))
        raw = p + rng.normal(0, np.sqrt(noise.variance(p)))
        np.testing.assert_allclose(C.mle_apx(raw, noise), paper_mle_apx(raw, a, b),
                                   atol=1e-12)


def test_mle_apx_with_equal_variances_is_norm_sub():
    for raw in random_raws(count=50):
        noise = C.NoiseModel.constant(raw.size, 1000, 0.01)
        np.testing.assert_allclose(C.mle_apx(raw, noise), C.norm_sub(raw), atol=1e-14)


# -- Power and PowerNS -------------------------------------------------------------------------

def power_law_counts(rng, k, n, alpha):
    counts = np.arange(1, n + 1, dtype=np.float64)
    cdf = np.cumsum(counts ** -alpha)
    return np.searchsorted(cdf / cdf[-1], rng.random(k)) + 1.0


@pytest.mark.parametrize("alpha", [1.3, 1.8, 2.5])
def test_power_fit_recovers_a_known_power_law_on_noiseless_input(alpha):
    rng = np.random.default_rng(int(alpha * 10))
    k, n = 20_000, 100_000
    counts = power_law_counts(rng, k, n, alpha)
    fit = C.fit_power(counts / n, C.NoiseModel.constant(k, n, 0.0))
    # the maximum-likelihood exponent's standard error is about (α − 1)/√k
    assert abs(fit.alpha - alpha) <= 5 * (alpha - 1) / np.sqrt(k), fit


def test_power_fit_sees_through_gaussian_noise():
    rng = np.random.default_rng(9)
    k, n, s = 20_000, 1_000_000, 100.0
    counts = power_law_counts(rng, k, n, 1.5)
    noisy = counts + rng.normal(0, s, k)
    fit = C.fit_power(noisy / n, C.NoiseModel.constant(k, n, (s / n) ** 2))
    assert abs(fit.alpha - 1.5) <= 0.02, fit


def brute_posterior_mean(e, s, n, alpha):
    """Σ x π(x) φ(e − x) / Σ π(x) φ(e − x) over the counts within 12 s of e (further ones
    weigh less than e^-72 relative to the nearest count)."""
    out = []
    for value in e:
        x = np.arange(max(1, int(value - 12 * s)), int(min(n, max(1, value + 12 * s))) + 1,
                      dtype=np.float64)
        log_w = -alpha * np.log(x) - 0.5 * ((value - x) / s) ** 2
        w = np.exp(log_w - log_w.max())
        out.append(np.dot(w, x) / w.sum())
    return np.array(out)


@pytest.mark.parametrize("n, s, alpha", [(3_000, 30.0, 1.8), (100_000, 400.0, 2.2),
                                         (20_000, 3.0, 1.5), (1_000_000, 2_000.0, 1.3)])
def test_power_is_the_posterior_mean_under_the_prior(n, s, alpha):
    rng = np.random.default_rng(10)
    e = np.concatenate([rng.normal(0, s, 60), rng.uniform(-3 * s, min(n, 80 * s), 60)])
    noise = C.NoiseModel.constant(e.size, n, (s / n) ** 2)
    got = C.power(e / n, noise, alpha=alpha) * n
    np.testing.assert_allclose(got, brute_posterior_mean(e, s, n, alpha), rtol=0,
                               atol=2e-3 * s)


def test_power_shrinks_monotonically_and_power_ns_projects_it():
    rng = np.random.default_rng(11)
    k, n = 2000, 100_000
    raw = np.sort(rng.normal(0, 0.003, k) + rng.dirichlet(np.full(k, 0.1)))
    noise = C.NoiseModel.constant(k, n, 0.003 ** 2)
    out = C.power(raw, noise)
    assert (out >= 1 / n - 1e-15).all() and (out <= 1).all()
    assert (np.diff(out) >= -1e-12).all()              # a larger estimate, a larger mean
    assert (out[raw > 0.05] < raw[raw > 0.05]).all()   # large estimates shrink toward 0
    np.testing.assert_array_equal(C.power_ns(raw, noise), kernels.project_simplex(out))
    fit = C.fit_power(raw, noise)
    np.testing.assert_array_equal(out, C.power(raw, noise, alpha=fit.alpha))


# -- queries -----------------------------------------------------------------------------------

def test_query_sums_by_range_set_mask_and_matrix():
    rng = np.random.default_rng(12)
    est = rng.normal(0, 1, 30)
    masks = rng.random((5, 30)) < 0.4
    got = C.query_sums(est, [range(3, 17), range(0, 0), [4, 2, 29], np.array([], dtype=int),
                             masks[0]])
    np.testing.assert_allclose(got, [est[3:17].sum(), 0.0, est[[4, 2, 29]].sum(), 0.0,
                                     est[masks[0]].sum()])
    np.testing.assert_allclose(C.query_sums(est, masks), [est[m].sum() for m in masks])
    np.testing.assert_allclose(C.query_sums(est, range(0, 30)), [est.sum()])


@pytest.mark.parametrize("queries, error, match", [
    ([range(0, 40)], ValueError, "within"), ([range(0, 10, 2)], ValueError, "step 1"),
    ([[1, 1, 2]], ValueError, "more than once"), ([[30]], ValueError, r"\[0, 30\)"),
    ([[-1]], ValueError, r"\[0, 30\)"), ([[0.5]], TypeError, "integer"),
    ([np.ones(29, dtype=bool)], ValueError, "shape"),
    (np.ones((2, 29), dtype=bool), ValueError, "boolean of shape"),
    (np.ones((2, 30)), ValueError, "boolean of shape")])
def test_bad_queries(queries, error, match):
    with pytest.raises(error, match=match):
        C.query_sums(np.zeros(30), queries)


# -- bad input ---------------------------------------------------------------------------------

def test_bad_input_is_refused_clearly():
    raw = np.array([0.5, 0.2, 0.3])
    with pytest.raises(ValueError, match="finite"):
        C.norm(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="non-empty"):
        C.base_pos(np.array([]))
    with pytest.raises(ValueError, match="one-dimensional"):
        C.norm_cut(np.ones((2, 2)))
    with pytest.raises(TypeError, match="float64"):
        C.norm_mul(np.array([1, 2]))
    for method in C.NOISE_METHODS:
        with pytest.raises(ValueError, match="needs the noise"):
            C.apply(raw, method)
    with pytest.raises(ValueError, match="k = 4 values"):
        C.mle_apx(raw, C.NoiseModel.constant(4, 10, 0.1))
    with pytest.raises(TypeError, match="NoiseModel"):
        C.power(raw, 0.1)
    with pytest.raises(ValueError, match="alpha must be in"):
        C.base_cut(raw, null_variance=0.01, alpha=1.5)
    with pytest.raises(ValueError, match="method must be one of"):
        C.apply(raw, "norm_add")
    with pytest.raises(TypeError, match="no options"):
        C.apply(raw, "norm", alpha=0.1)
    with pytest.raises(ValueError, match="variance must be >= 0"):
        C.NoiseModel.constant(3, 10, -1.0)
    bad = C.NoiseModel(3, 10, lambda p: np.full(2, 0.1))
    with pytest.raises(ValueError, match=r"returned shape \(2,\)"):
        C.mle_apx(raw, bad)
    negative = C.NoiseModel(3, 10, lambda p: np.full(3, -0.1))
    with pytest.raises(ValueError, match="negative or non-finite"):
        C.base_cut(raw, negative)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        C.power(raw, C.NoiseModel.constant(3, 10, 0.01), alpha=-1.0)
    with pytest.raises(ValueError, match="weights must be positive"):
        C.project_simplex_weighted(raw, np.array([1.0, 0.0, 1.0]))


def test_mle_apx_warns_when_it_stops_early():
    rng = np.random.default_rng(13)
    noise = oracle_noise(50, 1000)
    raw = rng.dirichlet(np.ones(50)) + rng.normal(0, 0.05, 50)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        C.mle_apx(raw, noise, max_iter=1, tol=0.0)


# -- the decoders, for every mechanism --------------------------------------------------------

CASES = {
    "RandomizedResponse": dict(k=12, epsilon=1.0),
    "RAPPOR": dict(k=12, epsilon=1.0),
    "OptimizedUnaryEncoding": dict(k=12, epsilon=1.0),
    "OptimizedLocalHashing": dict(k=12, epsilon=1.0),
    "SubsetSelection": dict(k=12, epsilon=1.0),
    "HadamardResponse": dict(k=12, epsilon=1.0),
    "CompressivePrivatization": dict(k=40, epsilon=1.0, m=16, seed=3),
    "TwoStageRAPPOR": dict(k=12, epsilon=1.0),
    "OneBitHadamardResponse": dict(k=12, epsilon=1.0),
    "PublicCoinHashing": dict(k=12, bits=3, seed=5),
    "AsymmetricBinaryResponse": dict(epsilon_01=0.5, epsilon_10=2.0),
    "BlockHadamardResponse": dict(blocks=[1, 2, 3, 6], epsilon=1.0),
    "HighLowHadamardResponse": dict(k=12, epsilon=1.0, sensitive=[0, 1, 2]),
}
# a registered mechanism built from (k, ε) alone needs no entry
CASES.update({name: dict(k=12, epsilon=1.0) for name in _REGISTRY if name not in CASES})


def test_noise_model_from_a_mechanism_or_from_the_estimate():
    class Exact:
        k = 4

        def estimator_variance(self, p, n):
            return (0.5 + p) / n

    class Closed(Exact):
        def estimator_variance(self, p, n):
            raise NotImplementedError

    raw = np.array([0.5, 0.3, -0.1, 0.02])
    exact = C.noise_model(Exact(), 100, raw)
    np.testing.assert_allclose(exact.variance(np.full(4, 0.25)), np.full(4, 0.0075))
    # the null variance of an oracle-like model: at frequency 0
    np.testing.assert_allclose(exact.null_variance(C.norm_sub(raw)), np.full(4, 0.005))
    robust = C.noise_model(Closed(), 100, raw)
    sigma = np.median(np.abs(raw)) / 0.6745
    np.testing.assert_allclose(robust.variance(np.full(4, 0.25)), np.full(4, sigma ** 2))
    assert C.noise_model(object.__new__(type("Plain", (), {"k": 4})), 100, raw).description \
        == robust.description
    with pytest.raises(ValueError, match="pass the raw estimate"):
        C.noise_model(Closed(), 100)


def test_the_cases_cover_every_mechanism():
    assert set(CASES) == set(_REGISTRY)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_mechanism_accepts_every_consistency_decoder(name):
    mech = ldpdist.from_dict({"mechanism": name, **CASES[name]})
    k = mech.k
    assert set(C.METHODS) <= set(mech.decoders)
    p = np.random.default_rng(14).dirichlet(np.full(k, 0.5))
    agg = mech.simulate(np.random.default_rng(15).multinomial(20_000, p), seed=16)
    raw = agg.estimate("raw")
    noise = C.noise_model(mech, agg.n, raw)
    assert ("exact" in noise.description) == (name != "CompressivePrivatization")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = {d: agg.estimate(d) for d in C.METHODS}
    for d, est in got.items():
        assert est.shape == (k,) and np.isfinite(est).all(), d
        np.testing.assert_array_equal(est, C.apply(raw, d, noise))
    np.testing.assert_array_equal(got["post_pos"], raw)
    np.testing.assert_array_equal(got["norm_sub"], agg.estimate("project"))
    np.testing.assert_array_equal(got["norm_mul"], agg.estimate("normalize"))
    for d in ("norm", "norm_mul", "norm_sub", "mle_apx", "power_ns"):
        assert got[d].sum() == pytest.approx(1.0, abs=1e-9), d
    for d in ("base_pos", "base_cut", "norm_mul", "norm_cut", "norm_sub", "mle_apx",
              "power", "power_ns"):
        assert (got[d] >= 0).all(), d
    assert got["norm_cut"].sum() <= 1 + 1e-12
    # through the reports too
    reports = mech.privatize(np.random.default_rng(17).choice(k, 500, p=p), seed=1) \
        if mech.randomized else mech.privatize(np.random.default_rng(17).choice(k, 500, p=p))
    assert mech.estimate(reports, decoder="base_cut").shape == (k,)


def test_the_command_line_accepts_the_new_decoders(tmp_path, capsys):
    assert cli.main(["simulate", "--mechanism", "olh,hr", "--dist", "zipf:1.1", "--k", "64",
                     "--epsilon", "1", "--n", "2000", "--runs", "1",
                     "--decoder", "base_cut,norm_cut,power_ns", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "simulate.csv").read_text()
    assert all(f",{d}," in text for d in ("base_cut", "norm_cut", "power_ns"))
    parser = cli.build_parser()
    estimate = parser._subparsers._group_actions[0].choices["estimate"]
    decoder = next(a for a in estimate._actions if a.dest == "decoder")
    assert set(C.METHODS) <= set(decoder.choices)
