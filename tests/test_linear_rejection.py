"""ldpdist.linear.RejectionSamplingLinearQueries: Algorithms 3/4 of Bassily, "Linear Queries
Estimation with Local Differential Privacy" (AISTATS 2019), with the clipped acceptance
probability of the rejection-sampling erratum (docs page Mechanisms › Linear queries,
docs/mechanisms/linear-queries.md): pure ε-LDP and unbiased; the printed version is
neither."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import run_python
from ldpdist.linear import (MAX_EPSILON, RejectionSamplingLinearQueries, accepted_mean_factor,
                            acceptance_probability, good_set_tail, rejection_sigma)


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


@pytest.mark.parametrize("epsilon", [0.25, 1.0, 2.0, MAX_EPSILON])
def test_probability_ratios_never_exceed_e_epsilon(epsilon):
    rng = np.random.default_rng(int(epsilon * 100))
    a = rng.normal(size=(3, 6))
    a[:, 5] = -a[:, 0]  # antipodal columns: the largest possible log ratios
    mech = make(a, epsilon, 10_000)
    alpha = mech.acceptance(output_grid(mech, rng))
    lo, hi = math.exp(-epsilon / 4) / 2, math.exp(epsilon / 4) / 2
    assert alpha.min() >= lo * (1 - 1e-15) and alpha.max() <= hi * (1 + 1e-15)
    # Output part: densities f_0(y) α_v(y) differ by α_v/α_v' ≤ e^{ε/2} ≤ e^ε, attained.
    ratio = np.log(alpha.max(axis=1) / alpha.min(axis=1)).max()
    assert ratio <= epsilon / 2 + 1e-12
    assert ratio == pytest.approx(epsilon / 2, rel=1e-12)
    # ⊥ part: exact acceptance probabilities, and the worst case over all possible ones.
    rejected = 1 - mech.acceptance_probabilities
    assert math.log(rejected.max() / rejected.min()) <= epsilon
    assert math.log((1 - lo) / (1 - hi)) <= epsilon + 1e-12
    assert mech.realized_epsilon == pytest.approx(epsilon / 2) and mech.realized_epsilon <= epsilon


def test_paper_version_leaks_through_its_output():
    rng = np.random.default_rng(1)
    mech = paper(rng.normal(size=(3, 6)), 1.0, 10_000)
    alpha = mech.acceptance(output_grid(mech, rng))
    # Some output is possible under one input and impossible under another: infinite ratio.
    assert np.any((alpha.max(axis=1) > 0) & (alpha.min(axis=1) == 0))
    assert mech.realized_epsilon == math.inf


def test_acceptance_probability_is_exact():
    a = np.array([[1.0, 0.3, 0.0], [0.0, 0.4, 0.0]])  # norms 1, 0.5, 0
    n = 1_000_000
    for mech in (make(a, 1.0, 100), paper(a, 1.0, 100)):
        for v in range(3):
            accepted = mech.accepted(mech.privatize(np.full(n, v), seed=v)).mean()
            p = mech.acceptance_probabilities[v]
            assert abs(accepted - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_fixed_version_is_unbiased_and_the_printed_one_is_not():
    """n = 10^4, ε = 1: the accepted mean is a for the fix, ≈ 0.78·a as printed."""
    a = np.array([[1.0, -1.0], [0.0, 0.0]])  # ‖a_0‖ = r = 1
    draws = 4_000_000
    values = np.zeros(draws, dtype=np.uint32)
    fixed = make(a, 1.0, 10_000)
    printed = paper(a, 1.0, 10_000)
    assert fixed.good_set_tail <= 2 / 10_000 ** 2
    assert 50 < fixed.sigma ** 2 / math.log(10_000) < 65  # σ² ≈ 55 r² ln n / ε²
    assert printed.sigma ** 2 == pytest.approx(4 * math.log(10_000))
    exact_fixed = accepted_mean_factor(1 / fixed.sigma, 1.0)
    exact_printed = accepted_mean_factor(1 / printed.sigma, 1.0, paper_faithful=True)
    assert abs(exact_fixed - 1) < 1e-7
    assert exact_printed == pytest.approx(0.78, abs=0.005)
    for mech, factor in ((fixed, exact_fixed), (printed, exact_printed)):
        mean, accepted = mech.estimate_with_count(mech.privatize(values, seed=7))
        standard_error = mech.sigma / math.sqrt(accepted)
        assert abs(mean[0] - factor) < 5 * standard_error  # the closed form, both versions
        assert abs(mean[1]) < 5 * standard_error
        unbiased = abs(mean[0] - 1.0) < 5 * standard_error
        assert unbiased == (mech is fixed)


def test_rejection_sigma_meets_the_tail_target_and_is_smallest():
    for epsilon, n in ((1.0, 10_000), (0.3, 1000), (2.0, 10 ** 6)):
        sigma = rejection_sigma(epsilon, 2.0, n)
        assert good_set_tail(2.0 / sigma, epsilon) <= 2 / n ** 2
        assert good_set_tail(2.0 / (sigma * (1 - 1e-9)), epsilon) > 2 / n ** 2


def test_rank_one_realized_epsilon_is_exact():
    a = np.array([[1.0, 0.5, -0.3, 0.0]])
    mech = make(a, 1.0, 1000)
    sigma, quarter = mech.sigma, 0.25
    x = np.linspace(-200, 200, 400_001) * sigma
    t = np.clip((a[0][None, :] * x[:, None] - a[0] ** 2 / 2) / sigma ** 2, -quarter, quarter)
    brute = float((t.max(axis=1) - t.min(axis=1)).max())
    output = mech.realized_epsilon
    assert brute <= output + 1e-12 and output <= 0.5
    assert output == pytest.approx(brute, abs=1e-6)
    # Two parallel columns of the same sign (1-D, both norms ≠ 0): strictly less than ε/2.
    same_sign = make(np.array([[1.0, 0.5]]), 1.0, 1000)
    assert same_sign.realized_epsilon < 0.5


def test_seeded_reports_do_not_depend_on_threads():
    code = """
        import numpy as np, ldpdist
        a = np.arange(12.0).reshape(3, 4) / 10
        n = 3 * ldpdist._core.LINEAR_REPORT_CHUNK + 5
        mech = ldpdist.linear.RejectionSamplingLinearQueries(a, 1.0, 1000)
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
    ((np.eye(2), 3.0, 100), {}, ValueError, "epsilon must lie"),
    ((np.eye(2), 0.0, 100), {}, ValueError, "epsilon must lie"),
    ((np.eye(2), math.nan, 100), {}, ValueError, "finite"),
    ((np.eye(2), 1.0, 1), {}, ValueError, "n_users"),
    ((np.eye(2), 1.0, 10.5), {}, TypeError, "n_users"),
    ((np.zeros((2, 3)), 1.0, 100), {}, ValueError, "zero"),
    (([[1.0, np.nan]], 1.0, 100), {}, ValueError, "finite"),
    ((np.eye(2), 1.0, 100), {"r": 0.5}, ValueError, "column 0"),
])
def test_bad_input(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        make(*args, **kwargs)
    mech = make(np.eye(2), 1.0, 100)
    with pytest.raises(ValueError, match=r"values\[1\] = 2"):
        mech.privatize([0, 2])


def test_max_epsilon_is_where_the_bottom_bound_binds():
    e = MAX_EPSILON
    ratio = (1 - math.exp(-e / 4) / 2) / (1 - math.exp(e / 4) / 2)
    assert ratio == pytest.approx(math.exp(e), rel=1e-9)
    assert 2.5 < e < 2.6
    assert acceptance_probability(0.0, 1.0) == 0.5


def test_spec_round_trip():
    mech = make(np.array([[1.0, 0.2], [0.0, -0.5]]), 0.9, 5000, r=1.2)
    again = RejectionSamplingLinearQueries.from_dict(json.loads(json.dumps(mech.to_dict())))
    assert again.sigma == mech.sigma and again.n_users == 5000 and again.r == 1.2
    assert np.array_equal(again.queries, mech.queries)


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
