"""ldpdist.linear.RejectionSamplingLinearQueries: Algorithms 3/4 of Bassily, "Linear Queries
Estimation with Local Differential Privacy" (AISTATS 2019), with the clipped acceptance
probability and the exact calibration of the rejection-sampling errata (docs page Mechanisms ›
Linear queries, docs/mechanisms/linear-queries.md): pure ε-LDP with a realized ε equal to the
request (up to MAX_EPSILON = 4, with the acceptance scale e^{−b}), and unbiased; the printed
version is neither."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from conftest import run_python
from ldpdist.linear import (MAX_EPSILON, RejectionSamplingLinearQueries, accepted_mean_factor,
                            acceptance_probability, good_set_tail, rejection_sigma)
from ldpdist.linear.calibration import normal_cdf
from ldpdist.linear.rejection import (_BAND_MAX, _HALF_BAND_MAX, PAPER_MAX_EPSILON, _excess,
                                      _output_loss_rank_one, _rejection_probability)

#: ε over the whole accepted range (the band reaches its widest, 2, at MAX_EPSILON = 4)
EPSILONS = (0.05, 0.25, 0.5, 1.0, 1.3, 2.0, 3.0, MAX_EPSILON)


def make(*args, **kwargs):
    return RejectionSamplingLinearQueries(*args, **kwargs)


def paper(*args, **kwargs):
    with pytest.warns(UserWarning, match="NOT epsilon-LDP"):
        return make(*args, paper_faithful=True, **kwargs)


def output_grid(mech, rng, m=4000):
    """Outputs where the clipping bites: Gaussian draws at the proposal's scale, draws far out
    (|t| ≫ ε/4 for every column) and points along each column at many multiples of σ."""
    d, sigma = mech.d, mech.sigma
    directions = mech.queries.T / np.maximum(np.linalg.norm(mech.queries, axis=0), 1e-300)[:, None]
    along = (np.linspace(-8, 8, 161)[:, None, None] * sigma * directions[None]).reshape(-1, d)
    return np.concatenate([rng.normal(size=(m, d)) * sigma,
                           rng.normal(size=(m, d)) * 6 * sigma, along])


def antipodal(seed, d=3, J=6):
    a = np.random.default_rng(seed).normal(size=(d, J))
    a[:, J - 1] = -a[:, 0]  # antipodal columns: the largest possible log ratios
    return a


@pytest.mark.parametrize("epsilon", [0.25, 1.0, 1.3, 2.0, 3.0, MAX_EPSILON])
def test_probability_ratios_never_exceed_e_epsilon(epsilon):
    rng = np.random.default_rng(int(epsilon * 100))
    mech = make(antipodal(int(epsilon * 100)), epsilon, 10_000)
    band = mech.band
    assert band == epsilon / 2 <= _BAND_MAX  # independent columns: the outputs spend 2b
    assert mech.acceptance_scale == math.exp(-band) and mech.acceptance_rule == "maximal"
    alpha = mech.acceptance(output_grid(mech, rng))
    # α = exp(clip(t, −b, b) − b) ∈ [e^{−2b}, 1], both ends reached by the grid
    assert alpha.min() == pytest.approx(math.exp(-2 * band), rel=1e-15)
    assert alpha.max() == 1.0
    # Output part (the kernel's own α): densities f_0(y) α_v(y) differ by ≤ e^{2b}, attained.
    ratio = np.log(alpha.max(axis=1) / alpha.min(axis=1)).max()
    assert ratio <= 2 * band + 1e-12
    assert ratio == pytest.approx(2 * band, rel=1e-12)
    # ⊥ part: the exact rejection probabilities, all within the excess of 1 − e^{−b}. Their
    # worst case over the band, [0, 1 − e^{−2b}], would NOT do (an infinite ratio): the
    # calibration rests on the exact ratio.
    rejected = 1 - mech.acceptance_probabilities
    assert np.allclose(rejected, -math.expm1(-band), rtol=0, atol=2 / 10_000**2)
    assert math.log(rejected.max() / rejected.min()) <= 1e-6
    assert mech.realized_epsilon == epsilon          # 2 · (ε/2), exactly


def test_bottom_probability_matches_the_kernel_by_quadrature():
    """P(⊥ | v) in closed form (the ⊥ ratio rests on it) against the kernel's own α_v(y)
    integrated along a_v (orthogonal directions do not enter), by Gauss–Legendre on pieces
    cut at the clipping points: the same number to ~1e-12, for both scales and several ε."""
    nodes, weights = np.polynomial.legendre.leggauss(24)
    a = np.array([[1.0, 0.6, 0.0, -0.3], [0.0, 0.8, 0.0, 0.4]])   # norms 1, 1, 0, 0.5
    for epsilon, acceptance, n in ((0.5, "maximal", 30), (2.0, "maximal", 10),
                                   (MAX_EPSILON, "maximal", 1000), (1.0, "half", 30)):
        mech = make(a, epsilon, n, acceptance=acceptance)
        sigma, band = mech.sigma, mech.band
        for v in range(a.shape[1]):
            norm = float(np.linalg.norm(a[:, v]))
            direction = a[:, v] / norm if norm else np.array([1.0, 0.0])
            u = norm / sigma
            cuts = [u / 2 - band / u, u / 2 + band / u] if u else []
            edges = np.unique(np.clip(np.concatenate([np.arange(-40.0, 41.0), cuts]), -40, 40))
            lo, hi = edges[:-1, None], edges[1:, None]
            z = (lo + (hi - lo) * (nodes[None, :] + 1) / 2).ravel()
            w = ((hi - lo) / 2 * weights[None, :]).ravel()
            alpha = mech.acceptance(sigma * z[:, None] * direction[None, :])[:, v]
            accepted = float(np.sum(w * alpha * np.exp(-z * z / 2)) / math.sqrt(2 * math.pi))
            exact = 1 - mech.acceptance_probabilities[v]
            assert 1 - accepted == pytest.approx(exact, rel=1e-11, abs=1e-14), (epsilon, v)
            if acceptance == "maximal":
                assert exact == pytest.approx(_rejection_probability(u, band, -band), rel=1e-14)


#: query shapes: name -> (matrix, band when it is not capped: None = found by bisection)
SHAPES = {
    "independent": (antipodal(0), lambda eps: eps / 2),
    "identity": (np.eye(4), lambda eps: eps / 2),
    "1-D, both signs": (np.array([[-1.0, 0.5, 1.0]]), lambda eps: eps / 2),
    "counting query": (np.array([[0.0, 1.0]]), lambda eps: eps),          # capped above ε = 2
    "mean of [0, 1]": (np.linspace(0, 1, 11)[None, :], lambda eps: eps),
    "parallel, d = 2": (np.array([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0]]), lambda eps: eps),
    "1-D, one sign": (np.array([[1.0, 0.5, 0.75]]), None),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_realized_epsilon_equals_the_request(shape):
    """Over a grid of ε up to MAX_EPSILON and of n: the calibrated band realizes exactly ε,
    unless the band it needs is wider than 2 (then it is capped and realizes less: only
    columns on one line, e.g. a counting query above ε = 2); never more than ε."""
    a, expected_band = SHAPES[shape]
    for epsilon in EPSILONS:
        for n in (2, 100, 10**4, 10**6):
            mech = make(a, epsilon, n)
            realized = mech.realized_epsilon
            assert 0 < mech.band <= _BAND_MAX and realized <= epsilon, (shape, epsilon, n)
            capped = mech.band == _BAND_MAX and (expected_band is None
                                                 or expected_band(epsilon) > _BAND_MAX)
            if not capped:
                assert realized == pytest.approx(epsilon, rel=1e-9), (shape, epsilon, n)
                if expected_band is not None:
                    assert mech.band == pytest.approx(expected_band(epsilon), rel=1e-12)
            else:
                assert realized < epsilon, (shape, epsilon, n)
                assert mech.sigma == rejection_sigma(_BAND_MAX, mech.r, n)
            if expected_band is not None and expected_band(epsilon) <= _BAND_MAX:
                assert not capped
    # one-sign columns on a line lose less than 2b and less than b: the band goes wider
    one_sign = make(SHAPES["1-D, one sign"][0], 0.25, 10**4)
    assert one_sign.band > 0.25 and one_sign.realized_epsilon == pytest.approx(0.25, rel=1e-9)


def test_half_scale_keeps_the_band_below_ln_2():
    """acceptance="half" (the paper's scale ½): the band stops below ln 2, so the realized ε
    of independent columns is the request only up to 2 ln 2 (the previous calibration)."""
    a = antipodal(5)
    for epsilon in EPSILONS:
        mech = make(a, epsilon, 10**4, acceptance="half")
        assert mech.acceptance_scale == 0.5
        assert mech.band == min(epsilon / 2, _HALF_BAND_MAX)
        assert np.allclose(mech.acceptance_probabilities, 0.5, rtol=0, atol=2e-8)
        assert mech.realized_epsilon == pytest.approx(min(epsilon, 2 * _HALF_BAND_MAX),
                                                      rel=1e-12)
        if epsilon <= 2 * math.log(2):
            assert mech.realized_epsilon == epsilon
            assert make(a, epsilon, 10**4).sigma == mech.sigma   # same band, same σ


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
@pytest.mark.parametrize("shape", ["1-D, both signs", "counting query", "1-D, one sign",
                                   "parallel, d = 2"])
def test_exact_check_of_the_kernels_acceptance_on_a_line(shape, epsilon):
    """Columns on one line: the kernel's α_v(y), on outputs along the line (dense, through
    every clipping point), never differ by more than realized_epsilon, and reach it."""
    a = SHAPES[shape][0]
    mech = make(a, epsilon, 1000)
    direction = a[:, np.argmax(np.linalg.norm(a, axis=0))]
    direction = direction / np.linalg.norm(direction)
    beta = direction @ a
    beta = beta[beta != 0]
    b, var = mech.band, mech.sigma ** 2
    kinks = np.concatenate([(b * var + beta**2 / 2) / beta, (-b * var + beta**2 / 2) / beta])
    x = np.concatenate([np.linspace(-6, 6, 20_001) * var / np.abs(a).max(), kinks])
    alpha = mech.acceptance(x[:, None] * direction[None, :])
    ratio = float(np.log(alpha.max(axis=1) / alpha.min(axis=1)).max())
    assert ratio <= mech.realized_epsilon + 1e-12
    assert ratio == pytest.approx(mech.realized_epsilon, abs=1e-9)


def test_near_parallel_columns_count_as_independent():
    """Columns parallel up to 2^-50 (numerically rank 1 for numpy) are independent: an
    output far along their difference gets the full ratio e^{2b}, so the calibration must
    not treat them as a line (as numpy's matrix_rank would)."""
    exact = make(np.array([[1.0, 2.0], [0.0, 0.0]]), 0.5, 1000)
    near = make(np.array([[1.0, 2.0], [0.0, 2.0**-50]]), 0.5, 1000)
    assert exact.band > 0.25 and near.band == 0.25
    assert np.linalg.matrix_rank(near.queries) == 1
    b, var = near.band, near.sigma ** 2
    x = 2 * b * var                     # t_0 = (x − 1/2)/σ² ≥ b
    y = -(2 * x + 3 * b * var) * 2.0**50  # t_1 = (2x + 2^-50·y − 2)/σ² ≤ −b
    alpha = near.acceptance(np.array([[x, y]]))
    assert math.log(alpha.max() / alpha.min()) == pytest.approx(2 * b, rel=1e-12)
    assert near.realized_epsilon == 0.5


def test_bottom_loss_is_at_most_its_bound():
    """P(accept | v) = κ(1 + ξ_v) with |ξ_v| ≤ Q(b/u − u/2) ≤ tail ≤ 2/n², so the ⊥ loss is
    at most ln((e^b − 1 + 2/n²)/(e^b − 1 − 2/n²)) with κ = e^{−b} (when e^b − 1 > 2/n²) and
    ln((1 + 2/n²)/(1 − 2/n²)) with κ = ½; in fact far below the realized ε (under 1% of it
    from n = 10 on)."""
    for shape, (a, _) in SHAPES.items():
        for n in (2, 3, 10, 1000):
            for epsilon in (0.05, 1.0, 2.0, MAX_EPSILON):
                for acceptance in ("maximal", "half"):
                    mech = make(a, epsilon, n, acceptance=acceptance)
                    b, tau = mech.band, 2 / n**2
                    for norm in np.linalg.norm(a, axis=0):
                        u = norm / mech.sigma
                        excess = _excess(u, b)
                        bound = normal_cdf(u / 2 - b / u) if u else 0.0   # Q(b/u − u/2)
                        assert abs(excess) <= bound * (1 + 1e-12), (shape, n, u, b)
                    rejected = 1 - mech.acceptance_probabilities
                    loss = math.log(rejected.max() / rejected.min())
                    if acceptance == "half":
                        assert loss <= math.log((1 + tau) / (1 - tau)), (shape, n, epsilon)
                    elif math.expm1(b) > tau:
                        bound = math.log((math.expm1(b) + tau) / (math.expm1(b) - tau))
                        assert loss <= bound, (shape, n, epsilon)
                    # far below the outputs' loss, except for a handful of users
                    share = 0.5 if n < 10 else 0.01
                    assert loss < share * mech.realized_epsilon, (shape, n, epsilon, acceptance)


def test_the_band_narrows_when_the_bottom_ratio_binds(monkeypatch):
    """The ⊥ ratio never binds in practice (above): force it to (3b) and the calibration
    bisects down to the band whose loss is ε, b = ε/3."""
    monkeypatch.setattr(RejectionSamplingLinearQueries, "_bottom_loss",
                        lambda self, band, sigma: 3 * band)
    mech = make(np.eye(3), 0.9, 1000)
    assert mech.band <= 0.3 and mech.band == pytest.approx(0.3, rel=1e-12)


def z_of(n):
    return -NormalDist().inv_cdf(1.0 / n**2)


def test_sigma_squared_falls_by_the_derived_factor():
    """σ² with the paper's band ε/4 over σ² with the calibrated band: the tail target
    2Q(b/u) + (u²/4)(b/u)φ(b/u) = 2/n² (second order in u) gives u ≈ (b/z)(1 − b²/(8z²)),
    z = Φ⁻¹(1 − 1/n²), so the ratio is (b/b')²(1 − (b² − b'²)/(4z²)): 4(1 − 3ε²/(64z²)) for
    b = ε/2 (independent columns), 16(1 − 15ε²/(64z²)) for b = ε (a counting query). What
    the second order leaves out grows as b⁴/z² (measured: about 0.014 b⁴/z² relative, with b
    the calibrated band, on this grid), which sets the tolerance: 0.02 b⁴/z² (a wrong
    second-order coefficient, or the band's factor, would fail it)."""
    for epsilon in (0.1, 0.5, 1.0, 1.3, 2.0, 3.0):
        for n in (100, 10**4, 10**6):
            z = z_of(n)
            for a, factor, loss in ((antipodal(1), 4 * (1 - 3 * epsilon**2 / (64 * z * z)), 2),
                                    (np.array([[0.0, 1.0]]),
                                     16 * (1 - 15 * epsilon**2 / (64 * z * z)), 1)):
                if epsilon / loss > _BAND_MAX:
                    continue  # the counting query's band is capped above ε = 2
                old = make(a, epsilon, n, band=epsilon / 4)
                new = make(a, epsilon, n)
                assert old.realized_epsilon == pytest.approx(loss * epsilon / 4, rel=1e-9)
                ratio = old.sigma ** 2 / new.sigma ** 2
                tolerance = 1e-5 + 0.02 * new.band**4 / z**2
                assert ratio == pytest.approx(factor, rel=tolerance), (epsilon, n, loss)
                assert ratio < (4 / loss) ** 2  # never quite the full (b/b')²


def test_paper_version_leaks_through_its_output():
    rng = np.random.default_rng(1)
    mech = paper(rng.normal(size=(3, 6)), 1.0, 10_000)
    alpha = mech.acceptance(output_grid(mech, rng))
    # Some output is possible under one input and impossible under another: infinite ratio.
    assert np.any((alpha.max(axis=1) > 0) & (alpha.min(axis=1) == 0))
    assert mech.realized_epsilon == math.inf


def test_acceptance_probability_is_exact():
    """The measured acceptance rate of each value against the closed form, within 5 binomial
    standard errors (about 0.002 here: a formula off by the scale ½ vs e^{−b}, or by the
    Good-set tail at n_users = 30, would fail)."""
    a = np.array([[1.0, 0.3, 0.0], [0.0, 0.4, 0.0]])  # norms 1, 0.5, 0
    n = 1_000_000
    for mech in (make(a, 1.0, 100), make(a, 3.0, 30), make(a, MAX_EPSILON, 100),
                 make(a, 1.0, 100, acceptance="half"), paper(a, 1.0, 100)):
        for v in range(3):
            accepted = mech.accepted(mech.privatize(np.full(n, v), seed=v)).mean()
            p = mech.acceptance_probabilities[v]
            assert abs(accepted - p) < 5 * math.sqrt(p * (1 - p) / n), (mech, v)
        if not mech.paper_faithful:
            # ≈ the scale κ: e^{−b} (e^{−ε/2} for these independent columns), or ½
            assert mech.acceptance_probabilities == pytest.approx(mech.acceptance_scale,
                                                                  rel=1e-3)
    assert make(a, 3.0, 30).acceptance_scale == math.exp(-1.5)


def test_fixed_version_is_unbiased_and_the_printed_one_is_not():
    """n = 10^4, ε = 1: the accepted mean is a for the fix, ≈ 0.78·a as printed."""
    a = np.array([[1.0, -1.0], [0.0, 0.0]])  # ‖a_0‖ = r = 1
    draws = 4_000_000
    values = np.zeros(draws, dtype=np.uint32)
    fixed = make(a, 1.0, 10_000)
    printed = paper(a, 1.0, 10_000)
    assert fixed.band == 0.5 and printed.band == 0.25
    assert fixed.good_set_tail <= 2 / 10_000 ** 2
    # σ² ≈ 13.7 r² ln n / ε² with the calibrated band ε/2 (4× less with ε/4: ≈ 55)
    assert 12 < fixed.sigma ** 2 / math.log(10_000) < 15
    assert printed.sigma ** 2 == pytest.approx(4 * math.log(10_000))
    exact_fixed = accepted_mean_factor(1 / fixed.sigma, fixed.band)
    exact_printed = accepted_mean_factor(1 / printed.sigma, printed.band, paper_faithful=True)
    assert abs(exact_fixed - 1) < 1e-7
    assert exact_printed == pytest.approx(0.78, abs=0.005)
    for mech, factor in ((fixed, exact_fixed), (printed, exact_printed)):
        mean, accepted = mech.estimate_with_count(mech.privatize(values, seed=7))
        standard_error = mech.sigma / math.sqrt(accepted)
        assert abs(mean[0] - factor) < 5 * standard_error  # the closed form, both versions
        assert abs(mean[1]) < 5 * standard_error
        unbiased = abs(mean[0] - 1.0) < 5 * standard_error
        assert unbiased == (mech is fixed)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, MAX_EPSILON])
@pytest.mark.parametrize("a, value", [(np.array([[0.0, 1.0]]), 1),      # band ε (≤ 2)
                                      (np.array([[1.0, 0.5, 0.75]]), 1),  # band by bisection
                                      (antipodal(3), 2)])                 # band ε/2
def test_calibrated_protocol_is_unbiased(a, value, epsilon):
    """The accepted mean of one value is a_v within 4 standard errors σ/√n̂ (a test with
    power: a bias of 6 standard errors fails it); the exact factor is 1 to within the
    Good-set tail; the number accepted is binomial with the closed-form probability."""
    mech = make(a, epsilon, 1000)
    u = np.linalg.norm(a[:, value]) / mech.sigma
    assert abs(accepted_mean_factor(u, mech.band) - 1) <= 2 * mech.good_set_tail
    draws = 1_000_000
    mean, accepted = mech.estimate_with_count(
        mech.privatize(np.full(draws, value), seed=11))
    standard_error = mech.sigma / math.sqrt(accepted)
    p = mech.acceptance_probabilities[value]
    assert abs(accepted - draws * p) < 5 * math.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(mean - a[:, value]) < 4 * standard_error), (mean, standard_error)


def test_the_widest_band_is_the_most_accurate_one():
    """Why the band stops at 2 (and ε at MAX_EPSILON = 4): the mean's MSE goes as
    σ²/P(accept), which falls with the band up to about 2 and rises after (to leading order
    e^b/b²); b = 2 is within 0.3% of the minimum for n ≥ 100."""
    for n in (100, 10**4, 10**6):
        def cost(band):
            sigma = rejection_sigma(band, 1.0, n)
            return sigma**2 / acceptance_probability(1.0 / sigma, band)
        bands = np.linspace(0.25, 3.5, 131)
        costs = [cost(b) for b in bands]
        best = float(bands[int(np.argmin(costs))])
        assert 1.8 <= best <= 2.0, (n, best)
        assert all(np.diff(costs[:int(np.argmin(costs))]) < 0)   # wider is better up to there
        assert cost(_BAND_MAX) <= 1.003 * min(costs), n
        assert cost(3.0) > 1.1 * cost(_BAND_MAX)


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_measured_variance_gain_over_the_paper_band(epsilon):
    """The accepted reports' variance (σ² per coordinate, measured) and acceptance rate
    (measured) of the paper's protocol made private (band ε/4, scale ½) and of the calibrated
    one (band ε/2, scale e^{−ε/2}): the error of the mean goes as σ²/P(accept), so its MSE
    ratio is the measured (σ² / rate) ratio. It matches the closed forms (≈ 4 × 2e^{−ε/2}:
    4.85 at ε = 1, 2.94 at ε = 2) to within 5 standard errors (≈ 0.5% each), which tells
    the scale e^{−ε/2} (a factor 1.21 at ε = 1) from ½."""
    a = antipodal(7, d=4, J=5)
    n_users, draws = 10_000, 300_000
    values = np.arange(draws) % a.shape[1]
    measured, predicted, rel_se = [], [], 0.0
    for mech in (make(a, epsilon, n_users, band=epsilon / 4, acceptance="half"),
                 make(a, epsilon, n_users)):
        reports = mech.privatize(values, seed=int(10 * epsilon))
        mask = mech.accepted(reports)
        centred = reports[mask] - a.T[values[mask]]
        variance = float(np.mean(centred**2))         # E: σ² per coordinate
        rate = float(mask.mean())
        p = float(np.mean(mech.acceptance_probabilities))
        assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / draws)
        assert variance == pytest.approx(mech.sigma**2, rel=5 * math.sqrt(2 / centred.size))
        measured.append(variance / rate)
        predicted.append(mech.sigma**2 / p)
        rel_se = math.hypot(rel_se, math.hypot(math.sqrt(2 / centred.size),
                                               math.sqrt((1 - p) / (p * draws))))
    gain, expected = measured[0] / measured[1], predicted[0] / predicted[1]
    assert gain == pytest.approx(expected, rel=5 * rel_se)
    assert expected == pytest.approx(8 * math.exp(-epsilon / 2), rel=0.01)
    # the scale alone: band ε/2 with ½ (possible below ε = 2 ln 2) would lose the factor
    if epsilon < 2 * math.log(2):
        assert gain > 1.15 * predicted[0] / (make(a, epsilon, n_users, acceptance="half")
                                             .sigma**2 / 0.5)


def test_rejection_sigma_meets_the_tail_target_and_is_smallest():
    for band, n in ((0.5, 10_000), (0.075, 1000), (0.5, 10 ** 6), (_HALF_BAND_MAX, 100),
                    (1.5, 30), (_BAND_MAX, 10 ** 4)):
        sigma = rejection_sigma(band, 2.0, n)
        assert good_set_tail(2.0 / sigma, band) <= 2 / n ** 2
        assert good_set_tail(2.0 / (sigma * (1 - 1e-9)), band) > 2 / n ** 2


def test_rank_one_realized_epsilon_is_exact():
    a = np.array([[1.0, 0.5, -0.3, 0.0]])
    mech = make(a, 1.0, 1000)
    sigma, band = mech.sigma, mech.band
    assert band == 0.5  # both signs: the outputs spend 2b, as with independent columns
    x = np.linspace(-200, 200, 400_001) * sigma
    t = np.clip((a[0][None, :] * x[:, None] - a[0] ** 2 / 2) / sigma ** 2, -band, band)
    brute = float((t.max(axis=1) - t.min(axis=1)).max())
    output = mech.realized_epsilon
    assert brute <= output + 1e-12 and output == 1.0
    assert output == pytest.approx(brute, abs=1e-6)
    # Two parallel columns of the same sign (1-D, both norms ≠ 0): strictly less than 2b,
    # so the band is as wide as it can be (2) and still realizes less than ε = 3.
    same_sign = make(np.array([[1.0, 0.5]]), 3.0, 1000)
    assert same_sign.band == _BAND_MAX and same_sign.realized_epsilon < 3.0


def test_rank_one_loss_against_brute_force():
    """The O(J log J) sup (kinks: midpoints, clip points, ±∞) against a dense grid."""
    rng = np.random.default_rng(4)
    for trial in range(120):
        beta = rng.normal(size=int(rng.integers(1, 7)))
        if trial % 3 == 1:
            beta = np.abs(beta)
        elif trial % 3 == 2:
            beta = np.append(np.abs(beta), 0.0)
        sigma, band = 10 ** rng.uniform(-0.5, 1), rng.uniform(0.05, _BAND_MAX)
        exact = _output_loss_rank_one(beta, sigma, band)
        reach = np.abs(beta).max() + 2 * band * sigma**2 / np.abs(beta[beta != 0]).min() + 1
        x = np.linspace(-reach, reach, 40_001)
        t = np.clip((beta * x[:, None] - beta**2 / 2) / sigma**2, -band, band)
        brute = float((t.max(axis=1) - t.min(axis=1)).max())
        assert brute <= exact + 1e-12
        assert exact == pytest.approx(brute, abs=5e-3 * band)


def test_seeded_reports_do_not_depend_on_threads():
    code = """
        import numpy as np, ldpdist
        a = np.arange(12.0).reshape(3, 4) / 10
        n = 3 * ldpdist._core.LINEAR_REPORT_CHUNK + 5
        for epsilon in (1.0, 3.0):
            mech = ldpdist.linear.RejectionSamplingLinearQueries(a, epsilon, 1000)
            reports = mech.privatize(np.arange(n) % 4, seed=99)
            print(digest(reports), mech.estimate(reports).tobytes().hex())
    """
    runs = {run_python(code, env={"RAYON_NUM_THREADS": t}) for t in ("1", "2")}
    assert len(runs) == 1


def test_reports_and_estimate():
    mech = make(np.eye(3), 1.0, 1000)
    reports = mech.privatize([0, 1, 2] * 1000, seed=3)
    mask = mech.accepted(reports)
    assert reports.shape == (3000, 3)
    assert np.all(np.isnan(reports[~mask])) and np.all(np.isfinite(reports[mask]))
    mean, count = mech.estimate_with_count(reports)
    assert count == mask.sum()
    np.testing.assert_allclose(mean, reports[mask].mean(axis=0), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="no accepted report"):
        mech.estimate(mech.as_reports(np.full((4, 3), np.nan)))
    partial = reports.copy()
    partial[np.argmax(mask), 1] = np.nan
    with pytest.raises(ValueError, match="NaN only"):
        mech.estimate(partial)
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        mech.estimate(mech.as_reports(np.zeros((2, 4))))


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((np.eye(2), 4.5, 100), {}, ValueError, "epsilon must lie"),
    ((np.eye(2), 3.0, 100), {"paper_faithful": True}, ValueError, "epsilon must lie"),
    ((np.eye(2), 1.0, 100), {"acceptance": "full"}, ValueError, "acceptance must be"),
    ((np.eye(2), 1.0, 100), {"paper_faithful": True, "acceptance": "maximal"}, ValueError,
     "leave acceptance out"),
    ((np.eye(2), 0.0, 100), {}, ValueError, "epsilon must lie"),
    ((np.eye(2), math.nan, 100), {}, ValueError, "finite"),
    ((np.eye(2), 1.0, 1), {}, ValueError, "n_users"),
    ((np.eye(2), 1.0, 10.5), {}, TypeError, "n_users"),
    ((np.zeros((2, 3)), 1.0, 100), {}, ValueError, "zero"),
    (([[1.0, np.nan]], 1.0, 100), {}, ValueError, "finite"),
    ((np.eye(2), 1.0, 100), {"r": 0.5}, ValueError, "column 0"),
    ((np.eye(2), 1.0, 100), {"band": 0.51}, ValueError, "realizes epsilon"),
    ((np.eye(2), 4.0, 100), {"band": 2.5}, ValueError, "band must lie"),
    ((np.eye(2), 2.0, 100), {"band": math.log(2), "acceptance": "half"}, ValueError,
     "band must lie"),
    ((np.eye(2), 1.0, 100), {"band": 0.0}, ValueError, "band must lie"),
])
def test_bad_input(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        make(*args, **kwargs)
    mech = make(np.eye(2), 1.0, 100)
    with pytest.raises(ValueError, match=r"values\[1\] = 2"):
        mech.privatize([0, 2])


def test_epsilon_ranges():
    """MAX_EPSILON: twice the widest band; the paper's range (paper_faithful) ends where the
    worst-case ⊥ ratio of its band ε/4 and scale ½ reaches e^ε."""
    assert MAX_EPSILON == 2 * _BAND_MAX == 4.0
    e = PAPER_MAX_EPSILON
    ratio = (1 - math.exp(-e / 4) / 2) / (1 - math.exp(e / 4) / 2)
    assert ratio == pytest.approx(math.exp(e), rel=1e-9)
    assert 2.5 < e < 2.6
    assert acceptance_probability(0.0, 1.0) == math.exp(-1.0)   # t ≡ 0: the scale e^{−b}
    assert acceptance_probability(0.0, 1.0, scale=0.5) == 0.5
    assert acceptance_probability(0.0, 0.25, paper_faithful=True) == 0.5
    assert paper(np.eye(2), e, 100).band == e / 4


def test_spec_round_trip():
    mech = make(np.array([[1.0, 0.2], [0.0, -0.5]]), 0.9, 5000, r=1.2)
    again = RejectionSamplingLinearQueries.from_dict(json.loads(json.dumps(mech.to_dict())))
    assert again.sigma == mech.sigma and again.n_users == 5000 and again.r == 1.2
    assert again.band == mech.band == 0.45
    assert np.array_equal(again.queries, mech.queries)
    narrow = make(np.eye(2), 1.0, 100, band=0.25)     # the paper's Good set, clipped
    assert narrow.realized_epsilon == 0.5
    assert RejectionSamplingLinearQueries.from_dict(narrow.to_dict()).sigma == narrow.sigma
    assert narrow.fingerprint != make(np.eye(2), 1.0, 100).fingerprint
    spec = make(np.eye(2), 1.0, 100).to_dict()
    spec["band"] = 0.6                                 # too wide for ε = 1
    with pytest.raises(ValueError, match="realizes epsilon"):
        RejectionSamplingLinearQueries.from_dict(spec)
    printed = paper(np.eye(2), 1.0, 100)
    with pytest.warns(UserWarning, match="NOT epsilon-LDP"):
        assert RejectionSamplingLinearQueries.from_dict(printed.to_dict()).band == 0.25
    with pytest.raises(ValueError, match="band must be left out"):
        make(np.eye(2), 1.0, 100, band=0.25, paper_faithful=True)
    # the scale is part of the spec: ½ and e^{−b} give different protocols (and fingerprints)
    half = make(np.eye(2), 1.0, 100, band=0.25, acceptance="half")
    assert half.to_dict()["acceptance"] == "half" and narrow.to_dict()["acceptance"] == "maximal"
    assert half.fingerprint != narrow.fingerprint and half.sigma == narrow.sigma
    again = RejectionSamplingLinearQueries.from_dict(half.to_dict())
    assert again.acceptance_scale == 0.5 and again.fingerprint == half.fingerprint
    older = half.to_dict()
    del older["acceptance"]            # written before the option: the scale was ½
    assert RejectionSamplingLinearQueries.from_dict(older).acceptance_rule == "half"


def test_widest_bands_run_in_the_kernel():
    """The widest bands reach the kernel: 2 at ε = 4 (scale e^{−2}, acceptance ≈ 0.135) and,
    with the scale ½, the largest double below ln 2 (acceptance ≈ ½); α reaches 1 exactly
    in the first case, within an ulp in the second."""
    for mech, rate in ((make(np.eye(3), MAX_EPSILON, 1000), math.exp(-2.0)),
                       (make(np.eye(3), 2.5, 1000, acceptance="half"), 0.5)):
        assert mech.band == (_BAND_MAX if rate < 0.5 else _HALF_BAND_MAX)
        reports = mech.privatize(np.arange(30_000) % 3, seed=1)
        assert abs(mech.accepted(reports).mean() - rate) < 5 * math.sqrt(rate / 30_000)
        alpha = mech.acceptance(np.array([[1e3 * mech.sigma ** 2, 0.0, 0.0]]))
        assert alpha.max() <= 1.0 and alpha.max() == pytest.approx(1.0, abs=1e-15)


def test_reports_carry_the_protocol_spec():
    import ldpdist

    mech = make(np.eye(3), 1.0, 1000)
    reports = mech.privatize([0, 1, 2] * 50, seed=2)
    assert type(reports) is ldpdist.Reports and reports.fingerprint == mech.fingerprint
    with pytest.raises(TypeError, match="estimate_with_count takes reports.*as_reports"):
        mech.estimate_with_count(np.asarray(reports))
    with pytest.raises(TypeError, match="as_reports"):
        mech.estimate(np.asarray(reports))
    declared = mech.as_reports(np.asarray(reports))
    assert mech.estimate_with_count(declared)[1] == mech.estimate_with_count(reports)[1]
    np.testing.assert_array_equal(mech.estimate(declared), mech.estimate(reports))
    with pytest.raises(ldpdist.SpecMismatchError):
        make(np.eye(3), 1.0, 2000).estimate(reports)  # σ depends on n_users
    assert mech.accepted(np.asarray(reports)).sum() == mech.estimate_with_count(reports)[1]
