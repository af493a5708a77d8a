"""ldpdist.linear: the exact L2 sensitivity, the Gaussian calibrations and the Gaussian
protocol (Algorithms 1/2 of Bassily, "Linear Queries Estimation with Local Differential
Privacy", AISTATS 2019, corrected by the sensitivity erratum on the docs page Mechanisms ›
Linear queries, docs/mechanisms/linear-queries.md)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import ldpdist
from conftest import run_python
from ldpdist.linear import GaussianLinearQueries, calibration, l2_sensitivity


def unit_columns(rng, d, j):
    a = rng.normal(size=(d, j))
    return a / np.linalg.norm(a, axis=0)


def brute_diameter(a):
    diff = a[:, :, None] - a[:, None, :]
    return float(np.sqrt((diff ** 2).sum(axis=0)).max())


def make(*args, **kwargs):
    return GaussianLinearQueries(*args, **kwargs)


# -- sensitivity -------------------------------------------------------------------------------

@pytest.mark.parametrize("d, j, seed", [(1, 7, 0), (3, 40, 1), (16, 120, 2), (33, 65, 3)])
def test_sensitivity_matches_brute_force(d, j, seed):
    a = np.random.default_rng(seed).normal(size=(d, j)) * 3
    assert l2_sensitivity(a) == pytest.approx(brute_diameter(a), rel=1e-13)


def test_sensitivity_of_antipodal_columns_is_2r():
    rng = np.random.default_rng(4)
    a = unit_columns(rng, 8, 30) * 0.5
    a[:, 11] = -a[:, 5]  # antipodal pair at norm r = 0.5
    assert l2_sensitivity(a) == pytest.approx(1.0, rel=1e-15)
    mech = make(a, 1.0, 1e-6)
    assert mech.sensitivity == pytest.approx(2 * mech.r, rel=1e-15)


def test_sensitivity_of_near_duplicates_is_exact():
    # Columns 1e-9 apart at norm 1e3: ‖a‖² + ‖b‖² − 2⟨a, b⟩ would lose every digit.
    base = np.array([1e3, -2e3, 5e2])
    a = np.stack([base, base + np.array([1e-9, 0, 0])], axis=1)
    exact = float((base[0] + 1e-9) - base[0])
    assert l2_sensitivity(a) == exact
    assert l2_sensitivity(np.ones((4, 1))) == 0.0
    assert l2_sensitivity(np.ones((4, 5))) == 0.0


# -- calibration -------------------------------------------------------------------------------

def pld_delta(epsilon, sigma, sensitivity):
    """δ(ε) = E_P[(1 − e^{ε − L})_+] for P = N(0, σ²), Q = N(Δ, σ²), L = ln p/q, by composite
    Simpson quadrature over {L > ε} = {y < y*} (the integrand vanishes at y*)."""
    y_star = (sensitivity ** 2 / 2 - epsilon * sigma ** 2) / sensitivity
    y = np.linspace(y_star - 40 * sigma, y_star, 400_001)
    loss = (sensitivity ** 2 - 2 * sensitivity * y) / (2 * sigma ** 2)
    density = np.exp(-0.5 * (y / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    f = density * -np.expm1(epsilon - loss)
    h = y[1] - y[0]
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


@pytest.mark.parametrize("epsilon, delta, sensitivity",
                         [(1.0, 1e-5, 2.0), (0.3, 1e-6, 1.0), (2.5, 1e-9, 0.7), (0.05, 1e-3, 3.0)])
def test_analytic_delta_agrees_with_the_privacy_loss_distribution(epsilon, delta, sensitivity):
    sigma = calibration.analytic_sigma(epsilon, delta, sensitivity)
    numeric = pld_delta(epsilon, sigma, sensitivity)
    closed = calibration.gaussian_delta(epsilon, sigma, sensitivity)
    assert numeric == pytest.approx(closed, rel=1e-9)
    assert numeric <= delta * (1 + 1e-9)
    # Smallest: 1e-9 less noise already exceeds δ.
    assert calibration.gaussian_delta(epsilon, sigma * (1 - 1e-9), sensitivity) > delta


def test_classic_is_refused_from_epsilon_one_and_never_below_analytic():
    for epsilon in (0.1, 0.5, 0.99):
        classic = calibration.classic_sigma(epsilon, 1e-5, 1.0)
        assert classic >= calibration.analytic_sigma(epsilon, 1e-5, 1.0)
        assert calibration.gaussian_delta(epsilon, classic, 1.0) <= 1e-5
    with pytest.raises(ValueError, match="epsilon < 1"):
        make(np.eye(3), 1.0, 1e-5, calibration="classic")
    mech = make(np.eye(3), 0.5, 1e-5, calibration="classic")
    assert mech.sigma == pytest.approx(math.sqrt(2) * math.sqrt(2 * math.log(1.25e5)) / 0.5)


@pytest.mark.parametrize("seed", range(4))
def test_paper_sigma_is_too_small_on_random_and_antipodal_queries(seed):
    rng = np.random.default_rng(seed)
    a = unit_columns(rng, 12, 40)
    if seed % 2:
        a[:, 1] = -a[:, 0]  # antipodal: Δ2 = 2r exactly
    epsilon, delta = 0.8, 1e-6
    with pytest.warns(UserWarning, match="NOT"):
        paper = make(a, epsilon, delta, paper_faithful=True)
    fixed = make(a, epsilon, delta)
    assert paper.sigma < fixed.sigma
    assert paper.realized_delta > 10 * delta
    assert fixed.realized_delta <= delta
    assert fixed.sensitivity > 1.5 * fixed.r  # the paper assumes Δ2 ≤ r


# -- the protocol ------------------------------------------------------------------------------

def test_reports_have_the_law_of_the_column_plus_noise():
    a = np.array([[1.0, -2.0], [0.5, 3.0], [0.0, 1.0], [2.0, 2.0]])
    mech = make(a, 1.0, 1e-5)
    n = 200_000
    reports = mech.privatize(np.ones(n, dtype=np.int64), seed=11)
    assert reports.shape == (n, 4) and reports.dtype == np.float64
    noise = (reports - a[:, 1]) / mech.sigma
    # Mean 0 and variance 1 per coordinate, 5 standard errors.
    assert np.all(np.abs(noise.mean(axis=0)) < 5 / math.sqrt(n))
    assert np.all(np.abs(noise.var(axis=0) - 1) < 5 * math.sqrt(2 / n))
    # Normality: Kolmogorov–Smirnov distance of each coordinate below the 0.1% critical value.
    for k in range(4):
        z = np.sort(noise[:, k])
        cdf = np.array([calibration.normal_cdf(x) for x in z[::50]])
        empirical = np.arange(0, n, 50) / n
        assert np.abs(cdf - empirical).max() < 1.95 / math.sqrt(n) + 1 / n * 50
    # Coordinates are uncorrelated.
    corr = np.corrcoef(noise.T)
    assert np.all(np.abs(corr - np.eye(4)) < 5 / math.sqrt(n))


def test_seeded_reports_repeat_and_do_not_depend_on_threads():
    code = """
        import numpy as np, ldpdist
        a = np.arange(12.0).reshape(3, 4) / 10
        n = 3 * ldpdist._core.LINEAR_REPORT_CHUNK + 5
        mech = ldpdist.linear.GaussianLinearQueries(a, 1.0, 1e-5)
        reports = mech.privatize(np.arange(n) % 4, seed=2024)
        print(digest(reports), mech.estimate(reports).tobytes().hex())
    """
    runs = {run_python(code, env={"RAYON_NUM_THREADS": t}) for t in ("1", "2")}
    assert len(runs) == 1
    mech = make(np.eye(2), 1.0, 1e-5)
    assert np.array_equal(mech.privatize([0, 1, 1], seed=5), mech.privatize([0, 1, 1], seed=5))
    assert not np.array_equal(mech.privatize([0, 1, 1], seed=5), mech.privatize([0, 1, 1], seed=6))


def test_estimate_is_the_mean():
    rng = np.random.default_rng(3)
    mech = make(unit_columns(rng, 7, 9), 1.0, 1e-5)
    for n in (1, 4095, 4097, 50_000):
        reports = mech.privatize(rng.integers(0, 9, size=n), seed=n)
        np.testing.assert_allclose(mech.estimate(reports), reports.mean(axis=0), rtol=1e-12,
                                   atol=1e-12 * mech.sigma)
    # A non-contiguous view is accepted (copied).
    np.testing.assert_allclose(mech.estimate(reports[::2]), reports[::2].mean(axis=0),
                               rtol=1e-12, atol=1e-12 * mech.sigma)


def test_error_matches_theorem_3_2_raw_branch():
    rng = np.random.default_rng(5)
    d, j, n, runs = 16, 20, 2000, 100
    a = unit_columns(rng, d, j)
    mech = make(a, 1.0, 1e-5)
    values = rng.integers(0, j, size=n)
    target = a[:, values].mean(axis=1)  # A p̂, p̂ the users' histogram
    errors = np.array([np.linalg.norm(mech.estimate(mech.privatize(values, seed=s)) - target)
                       for s in range(runs)])
    bound = mech.bound(n)
    assert bound == pytest.approx(mech.sigma * math.sqrt(d / n))
    # The theorem bounds E‖·‖; the runs estimate it within Monte-Carlo error (4 of them).
    assert errors.mean() <= bound + 4 * errors.std() / math.sqrt(runs)
    # E‖·‖² = σ² d / n exactly; the runs' mean of ‖·‖²/(σ²d/n) has sd √(2/(d·runs)) ≈ 0.035.
    ratio = (errors ** 2).mean() / bound ** 2
    assert abs(ratio - 1) < 5 * math.sqrt(2 / (d * runs))
    # The paper's σ reproduces the theorem's formula; the corrected one scales it.
    with pytest.warns(UserWarning):
        paper = make(a, 1.0, 1e-5, paper_faithful=True)
    printed = mech.r * math.sqrt(2 * d * math.log(2 / 1e-5) / n)
    assert paper.bound(n) == pytest.approx(printed, rel=1e-12)
    assert mech.bound(n) == pytest.approx(printed * mech.sigma / paper.sigma, rel=1e-12)
    assert mech.bound(n, projected=True) <= mech.bound(n)


def test_single_column_needs_no_noise():
    mech = make([[1.0], [2.0]], 0.5, 1e-6)
    assert mech.sensitivity == 0 and mech.sigma == 0 and mech.realized_delta == 0
    reports = mech.privatize([0, 0, 0], seed=1)
    assert np.array_equal(reports, [[1.0, 2.0]] * 3)


def test_spec_round_trip():
    mech = make(unit_columns(np.random.default_rng(1), 3, 5), 0.7, 1e-7, r=1.5)
    spec = json.loads(json.dumps(mech.to_dict()))
    again = GaussianLinearQueries.from_dict(spec)
    assert again.sigma == mech.sigma and np.array_equal(again.queries, mech.queries)
    assert again.r == 1.5
    spec["queries"][0][0] += 1e-3
    with pytest.raises(ValueError, match="fingerprint"):
        GaussianLinearQueries.from_dict(spec)


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("queries, kwargs, error, match", [
    ([[1.0, np.nan]], {}, ValueError, r"queries\[0, 1\]"),
    ([[1.0, np.inf]], {}, ValueError, "finite"),
    ([[3.0, 4.0], [4.0, 0.0]], {"r": 4.5}, ValueError, "column 0 .* norm 5"),
    (np.zeros((0, 3)), {}, ValueError, "d ≥ 1"),
    (np.zeros((3, 0)), {}, ValueError, "J ≥ 1"),
    (np.zeros(3), {}, ValueError, "2-D"),
    ([["a"]], {}, TypeError, "real numbers"),
    (np.zeros((2, 2), dtype=np.complex128), {}, TypeError, "float64"),
    ([[1.0]], {"r": -1.0}, ValueError, "r must be"),
])
def test_bad_queries(queries, kwargs, error, match):
    with pytest.raises(error, match=match):
        make(queries, 1.0, 1e-5, **kwargs)


@pytest.mark.parametrize("epsilon, delta", [(0, 1e-5), (-1, 1e-5), (math.nan, 1e-5),
                                            (math.inf, 1e-5), (1.0, 0.0), (1.0, 1.0),
                                            (1.0, math.nan), (1.0, -0.1)])
def test_bad_privacy_parameters(epsilon, delta):
    with pytest.raises(ValueError):
        make(np.eye(2), epsilon, delta)


def test_bad_values_reports_and_options():
    mech = make(np.eye(3), 1.0, 1e-5)
    with pytest.raises(ValueError, match=r"values\[2\] = 3"):
        mech.privatize([0, 1, 3])
    with pytest.raises(ValueError, match=r"values\[0\] = -1"):
        mech.privatize([-1])
    with pytest.raises(TypeError):
        mech.privatize([0.5])
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        mech.estimate(mech.as_reports(np.zeros((4, 2))))
    with pytest.raises(TypeError, match="float64"):
        mech.estimate(mech.as_reports(np.zeros((4, 3), dtype=np.float32)))
    bad = np.zeros((5, 3))
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"reports\[3, 2\]"):
        mech.estimate(mech.as_reports(bad))
    with pytest.raises(ValueError, match="zero reports"):
        mech.estimate(mech.as_reports(np.zeros((0, 3))))
    with pytest.raises(ValueError, match="calibration"):
        make(np.eye(3), 1.0, 1e-5, calibration="fast")
    with pytest.raises(TypeError):
        make(np.eye(3), 1.0, 1e-5, paper_faithful="yes")


def test_memory_guard_refuses_absurd_report_counts():
    mech = make(np.eye(16), 1.0, 1e-5)
    ldpdist.set_memory_limit("64M")
    try:
        with pytest.raises(MemoryError, match="reports"):
            mech.privatize(np.zeros(1_000_000, dtype=np.uint32))
    finally:
        ldpdist.set_memory_limit(None)


def test_paper_faithful_warns_loudly():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(np.eye(2), 1.0, 1e-5, paper_faithful=True)
    assert any("NOT (epsilon, delta)-LDP" in str(w.message) for w in caught)


# -- projection of the server's mean ----------------------------------------------------------

@pytest.mark.parametrize("protocol", ["gaussian", "rejection"])
def test_projection_is_project_hull_and_never_moves_away_from_the_target(protocol):
    rng = np.random.default_rng(21)
    a = np.sign(rng.normal(size=(16, 300))) / 4.0        # ±1/√d queries, r = 1
    p = rng.dirichlet(np.full(300, 0.5))
    target = a @ p                                          # in conv{a_v} ⊂ conv{±a_v}
    n = 400                                                 # few users: a far-off mean
    values = rng.choice(300, size=n, p=p)
    mech = (make(a, 1.0, 1e-6) if protocol == "gaussian"
            else ldpdist.linear.RejectionSamplingLinearQueries(a, 1.0, n_users=n))
    reports = mech.privatize(values, seed=3)
    raw = mech.estimate(reports)
    for projection, symmetric in (("symmetric", True), ("convex", False)):
        projected = mech.estimate(reports, projection=projection)
        expected = ldpdist.kernels.project_hull(a, raw, symmetric=symmetric, tol=1e-12).point
        np.testing.assert_array_equal(projected, expected)
        assert np.linalg.norm(projected - target) <= np.linalg.norm(raw - target)
    # at n = 400 the raw mean is far outside the hull: projecting helps a lot
    assert (np.linalg.norm(mech.estimate(reports, projection="convex") - target)
            < 0.5 * np.linalg.norm(raw - target))
    np.testing.assert_array_equal(mech.estimate(reports, projection="none"), raw)
    with pytest.raises(ValueError, match="projection"):
        mech.estimate(reports, projection="simplex")


def test_unconverged_projection_warns_with_its_gap(monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(8, 50))
    mech = make(a, 1.0, 1e-6)
    reports = mech.privatize(rng.integers(0, 50, size=20), seed=1)
    real_project = ldpdist.kernels.project_hull

    def one_iteration(*args, **kwargs):
        return real_project(*args, **{**kwargs, "max_iter": 1})

    monkeypatch.setattr(ldpdist.kernels, "project_hull", one_iteration)
    with pytest.warns(RuntimeWarning, match="duality gap"):
        mech.estimate(reports, projection="symmetric", tol=1e-300)


def test_reports_carry_the_protocol_spec():
    """privatize returns ldpdist.Reports of the protocol's spec; estimate refuses a plain
    array (unless declared with as_reports) and another protocol's reports (another σ or
    query matrix with the same report width would give a wrong mean without an error)."""
    mech = make(np.eye(3), 1.0, 1e-5)
    reports = mech.privatize([0, 1, 2] * 50, seed=2)
    assert type(reports) is ldpdist.Reports and reports.fingerprint == mech.fingerprint
    assert reports.mechanism == "GaussianLinearQueries" and "queries" not in reports.spec
    assert reports.spec["queries_sha256"] == mech.to_dict()["queries_sha256"]
    with pytest.raises(TypeError, match=r"GaussianLinearQueries.estimate takes reports, got a "
                                        r"plain ndarray \(dtype float64, shape \(150, 3\)\).*"
                                        r"protocol.as_reports\(array\)"):
        mech.estimate(np.asarray(reports))
    declared = mech.as_reports(np.asarray(reports))
    assert np.shares_memory(declared, reports)
    np.testing.assert_array_equal(mech.estimate(declared), mech.estimate(reports))
    np.testing.assert_array_equal(mech.estimate(reports[:75]),
                                  mech.estimate(declared[:75]))  # slices keep the tag
    for other in (make(np.eye(3), 2.0, 1e-5), make(np.eye(3)[::-1], 1.0, 1e-5),
                  ldpdist.linear.RejectionSamplingLinearQueries(np.eye(3), 1.0, 150)):
        assert other.fingerprint != mech.fingerprint
        with pytest.raises(ldpdist.SpecMismatchError, match="reports of GaussianLinearQueries"):
            other.estimate(reports)
    assert make(np.eye(3), 1.0, 1e-5).fingerprint == mech.fingerprint  # the same spec
