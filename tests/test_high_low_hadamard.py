"""High-Low Hadamard Response (context-aware LDP paper, Section 5.1):
the exact (A, ε)-High-Low privacy of the channel over a grid of k, ε and sensitive sets, the
printed eq. (13) and why the note corrects it, exact unbiasedness, the variance formulas by
Monte Carlo, bound (19), the edge cases s = 0 and s = k, specs, the command line and bad
input. The shared contract suite (tests/test_mechanisms.py) covers the rest."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ldpdist
from ldpdist import cli, privacy

HLHR = ldpdist.HighLowHadamardResponse


def hadamard(size):
    rows = np.arange(size)[:, None] & np.arange(size)[None, :]
    parity = np.vectorize(lambda v: bin(v).count("1") & 1)(rows)
    return 1 - 2 * parity


def sensitive_sets(k):
    """Sensitive sets of every kind for domain k: none, one (first, middle, last), all but
    one, all, every third, and a non-contiguous random subset (fixed seed)."""
    rng = np.random.default_rng(k)
    sets = {
        "none": [],
        "first": [0],
        "middle": [k // 2],
        "last": [k - 1],
        "all but one": [x for x in range(k) if x != k // 3],
        "all": list(range(k)),
        "every third": list(range(0, k, 3)),
        "random": sorted(rng.choice(k, size=max(1, k // 4), replace=False).tolist()),
    }
    return sets


GRID = [(k, epsilon, name, values) for k in (2, 3, 7, 16, 33, 100)
        for epsilon in (0.1, 0.5, 1.0, 2.0, 5.0)
        for name, values in sensitive_sets(k).items()]


# -- privacy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k,epsilon,name,sensitive", GRID,
                         ids=[f"k{k}-eps{e}-{n}" for k, e, n, _ in GRID])
def test_channel_is_exactly_high_low_ldp(k, epsilon, name, sensitive):
    mech = HLHR(k, epsilon, sensitive)
    s, t, S = mech.layout
    assert (s, t) == (len(set(sensitive)), k - len(set(sensitive)))
    assert S == 2 ** math.ceil(math.log2(s + 1)) and mech.output_size == S + t <= 2 * k
    Q = mech.channel_matrix()
    assert Q.shape == (k, S + t)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    # The promise holds exactly (up to the rounding of the probabilities in double precision).
    E = mech.budgets()
    np.testing.assert_array_equal(E, privacy.high_low_budgets(k, sensitive, epsilon))
    assert privacy.verify(Q, E).satisfied(tolerance=1e-12)
    # The closed form is the exact realized budget matrix, and realized_epsilon its largest
    # finite entry; both never above the promise.
    realized = mech.realized_budgets()
    exact = privacy.realized_budgets(Q)
    assert np.array_equal(np.isinf(realized), np.isinf(exact))
    finite = np.isfinite(exact)
    np.testing.assert_allclose(realized[finite], exact[finite], rtol=0, atol=1e-12)
    assert (realized <= E + 1e-15).all()
    assert mech.realized_epsilon <= epsilon
    if s >= 1:
        off = finite & ~np.eye(k, dtype=bool)
        assert mech.realized_epsilon == pytest.approx(exact[off].max(), abs=1e-12)
        # Tight: a budget a hair below ε on the sensitive rows is violated.
        assert not privacy.verify(Q, privacy.high_low_budgets(k, sensitive, epsilon * 0.999)
                                  ).satisfied()
    if t >= 1:
        # Not plain ε-LDP: a non-sensitive value's slot is impossible under any other value.
        violation = privacy.verify(Q, privacy.uniform_budgets(k, epsilon))
        assert violation.amount == math.inf and violation.pair[0] not in set(sensitive)


def test_the_channel_is_eq_13_with_row_a_plus_1_and_eq_14():
    k, epsilon, sensitive = 10, 1.0, [8, 1, 4]
    mech = HLHR(k, epsilon, sensitive)
    s, t, S = mech.layout
    rho, q = mech._core.probabilities()
    assert rho == pytest.approx(math.e / (math.e + 1), rel=1e-14) and rho < math.e / (math.e + 1)
    assert q == pytest.approx((math.e - 1) / (math.e + 1), rel=1e-14)
    assert q < (math.e - 1) / (math.e + 1)
    Q = mech.channel_matrix()
    H = hadamard(S)
    others = [x for x in range(k) if x not in sensitive]
    for a, x in enumerate(sorted(sensitive)):       # relabelled in increasing order
        np.testing.assert_array_equal(Q[x, :S], np.where(H[a + 1] == 1, 2 * rho / S,
                                                         2 * (1 - rho) / S))
        assert (Q[x, S:] == 0).all()
    for u, x in enumerate(others):
        np.testing.assert_array_equal(Q[x, :S], np.full(S, (1 - q) / S))
        assert Q[x, S + u] == q and np.count_nonzero(Q[x, S:]) == 1


def printed_channel(k, epsilon, sensitive):
    """Eqs. (13)–(14) as printed: sensitive a (0-based, relabelled) on row a of H_S."""
    s, t = len(sensitive), k - len(sensitive)
    S = 2 ** math.ceil(math.log2(s + 1))
    e = math.exp(epsilon)
    H = hadamard(S)
    Q = np.zeros((k, S + t))
    others = [x for x in range(k) if x not in sensitive]
    for a, x in enumerate(sorted(sensitive)):
        Q[x, :S] = np.where(H[a] == 1, 2 * e / (S * (e + 1)), 2 / (S * (e + 1)))
    for u, x in enumerate(others):
        Q[x, :S] = 2 / (S * (e + 1))
        Q[x, S + u] = (e - 1) / (e + 1)
    return Q


def test_the_printed_eq_13_row_x_fails_and_row_x_plus_1_does_not():
    """The note's correction: with row x, the first sensitive value gets the all-ones row 0
    of H_S. Its 'probabilities' sum to 2e^ε/(e^ε + 1) (1.46 at ε = 1): eq. (13) as printed is
    not a channel. Normalized, it is one, but not the one the paper's estimator inverts
    (eqs. (15) and (17) use the sets of row i + 1): the estimate of the exact output law is
    then far from p. With row a + 1 both hold: a channel, within its budgets, and the exact
    output law estimates p exactly."""
    k, epsilon, sensitive = 9, 1.0, [0, 3, 6]
    printed = printed_channel(k, epsilon, sensitive)
    sums = printed.sum(axis=1)
    assert sums[0] == pytest.approx(2 * math.e / (math.e + 1))
    assert sums[0] == pytest.approx(1.462, abs=1e-3)
    assert not np.allclose(sums, 1.0)
    normalized = printed / sums[:, None]
    mech = HLHR(k, epsilon, sensitive)
    p = np.random.default_rng(2).dirichlet(np.ones(k))
    biased = mech._core.estimate_from_frequencies(p @ normalized)
    assert np.abs(biased - p).max() > 0.05
    corrected = mech.channel_matrix()
    np.testing.assert_allclose(corrected.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    assert privacy.verify(corrected, privacy.high_low_budgets(k, sensitive, epsilon)).satisfied(
        tolerance=1e-12)
    np.testing.assert_allclose(mech._core.estimate_from_frequencies(p @ corrected), p, rtol=0,
                               atol=1e-14)


# -- estimation -------------------------------------------------------------------------------


@pytest.mark.parametrize("k,epsilon,name,sensitive", [g for g in GRID if g[0] in (7, 33, 100)],
                         ids=[f"k{k}-eps{e}-{n}" for k, e, n, _ in GRID if k in (7, 33, 100)])
def test_raw_estimate_of_the_exact_output_distribution_is_p(k, epsilon, name, sensitive):
    mech = HLHR(k, epsilon, sensitive)
    p = np.random.default_rng(k + len(sensitive)).dirichlet(np.full(k, 0.5))
    exact = p @ mech.channel_matrix()
    np.testing.assert_allclose(mech._expected_frequencies(p), exact, rtol=0, atol=1e-15)
    np.testing.assert_allclose(mech._core.estimate_from_frequencies(exact), p, rtol=0, atol=1e-12)
    # The same through integer counts: n times the exact law, when it is integral.
    n = 2**40
    counts = np.round(exact * n).astype(np.uint64)
    estimate = mech._core.estimate_raw(counts, int(counts.sum()))
    np.testing.assert_allclose(estimate, p, rtol=0, atol=1e-9)


def variances(mech, p, n):
    """The note's variances with the realized probabilities (module documentation):
    sensitive (c_A² p([S]) − p_a²)/n, other (c_N p_u − p_u²)/n."""
    rho, q = mech._core.probabilities()
    c_a, c_n = 1 / (2 * rho - 1), 1 / q
    A = np.zeros(mech.k, bool)
    A[mech.sensitive] = True
    p_hadamard = p[A].sum() + (1 - q) * p[~A].sum()
    return np.where(A, (c_a**2 * p_hadamard - p**2) / n, (c_n * p - p**2) / n)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_monte_carlo_variance_equals_the_formulas(epsilon):
    """n = 5000 users with i.i.d. values from p (k = 12, every third value sensitive), drawn
    afresh in every run: 10 000 runs through simulate (exact in law), 300 through privatize.
    Each coordinate's sample variance lies within 5 standard errors of the formula (the
    standard error of the sample variance of R near-normal draws is σ²·sqrt(2/(R − 1)); each
    estimate is a sum of 5000 reports, so its excess kurtosis is below 1e-2); the mean ratio
    over coordinates within 4 of those standard errors (the coordinates are correlated, so
    no smaller band is honest; 30 000 runs measured 1.0004 at both ε); the means within 5
    standard errors of p."""
    k, n = 12, 5000
    mech = HLHR(k, epsilon, list(range(0, k, 3)))
    p = np.random.default_rng(3).dirichlet(np.full(k, 1.0))
    want = variances(mech, p, n)
    np.testing.assert_allclose(mech.estimator_variance(p, n), want, rtol=1e-12)

    def simulated(r):
        counts = np.random.default_rng([4, r]).multinomial(n, p)
        return mech.simulate(counts, seed=r).estimate("raw")

    def privatized(r):
        values = np.random.default_rng([5, r]).choice(k, size=n, p=p)
        return mech.estimate(mech.privatize(values, seed=10_000 + r), "raw")

    for runs, draw in ((10_000, simulated), (300, privatized)):
        estimates = np.array([draw(r) for r in range(runs)])
        got = estimates.var(axis=0, ddof=1)
        z = np.abs(got - want) / (want * math.sqrt(2 / (runs - 1)))
        assert z.max() < 5, (runs, np.round(got / want, 3))
        assert abs((got / want).mean() - 1) < 4 * math.sqrt(2 / (runs - 1))
        mean_z = np.abs(estimates.mean(axis=0) - p) / np.sqrt(want / runs)
        assert mean_z.max() < 5, (runs, mean_z)


@pytest.mark.parametrize("k,s,epsilon,n", [(1000, 10, 0.5, 100_000), (1000, 50, 1.0, 20_000),
                                           (2000, 200, 2.0, 200_000), (500, 0, 1.0, 10_000),
                                           (300, 300, 1.0, 50_000)])
def test_mean_l1_error_is_below_bound_19(k, s, epsilon, n):
    """E||p̂ − p||_1 ≤ sqrt(3 s² c²/n) + sqrt(c k/n), c = (e^ε+1)/(e^ε−1), on fixed seeds
    (20 runs; Dirichlet(1) p; a random sensitive set)."""
    rng = np.random.default_rng(k + s)
    sensitive = rng.choice(k, size=s, replace=False)
    mech = HLHR(k, epsilon, sensitive)
    c = (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    bound = math.sqrt(3 * s * s * c * c / n) + math.sqrt(c * k / n)
    errors = []
    for r in range(20):
        p = rng.dirichlet(np.ones(k))
        agg = mech.simulate(rng.multinomial(n, p), seed=r)
        errors.append(np.abs(agg.estimate("raw") - p).sum())
    assert np.mean(errors) <= bound, (np.mean(errors), bound)


@pytest.mark.parametrize("k,s,epsilon,n", [(1000, 10, 0.5, 100_000), (1000, 50, 1.0, 20_000),
                                           (2000, 200, 2.0, 200_000), (500, 0, 1.0, 10_000),
                                           (300, 300, 1.0, 50_000)])
def test_l1_bound_holds_is_within_bound_19_and_scales_like_one_over_root_n(k, s, epsilon, n):
    """``l1_bound(n) = s c_A/sqrt(n) + sqrt(c_N t/n)`` (realized constants): the mean ℓ1
    error of 20 seeded runs (Dirichlet(1) p, a random sensitive set) lies below it, and
    above 0.35 of it (measured 0.48 to 0.80 on these cells: the bound is close to the truth;
    (19) allows for the paper's two-part estimator); never above (19); exactly 1/sqrt(n)
    scaling."""
    rng = np.random.default_rng(7 * k + s)
    mech = HLHR(k, epsilon, rng.choice(k, size=s, replace=False))
    rho, q = mech._core.probabilities()
    c_a, c_n = 1 / (2 * rho - 1), 1 / q
    bound = mech.l1_bound(n)
    assert bound == pytest.approx(s * c_a / math.sqrt(n) + math.sqrt(c_n * (k - s) / n),
                                  rel=1e-12)
    assert bound <= math.sqrt(3 * s * s * c_a * c_a / n) + math.sqrt(c_n * k / n)
    assert mech.l1_bound(4 * n) == pytest.approx(bound / 2, rel=1e-12)
    assert mech.l1_bound(100 * n) == pytest.approx(bound / 10, rel=1e-12)
    errors = []
    for r in range(20):
        p = rng.dirichlet(np.ones(k))
        agg = mech.simulate(rng.multinomial(n, p), seed=r)
        errors.append(np.abs(agg.estimate("raw") - p).sum())
    assert 0.35 * bound < np.mean(errors) <= bound, (np.mean(errors), bound)
    # And through the exact variances: Jensen's bound Σ sqrt(Var) for this p is below it.
    assert np.sqrt(mech.estimator_variance(p, n)).sum() <= bound


def test_l1_bound_refuses_bad_n():
    mech = HLHR(10, 1.0, [1, 2])
    for n, error in [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)]:
        with pytest.raises(error, match="n"):
            mech.l1_bound(n)


def test_few_sensitive_values_cost_far_less_than_plain_ldp():
    """Theorem 3 in one comparison: 10 sensitive values of k = 2000 at ε = 1, n = 10^5: the
    ℓ1 error of HLHR's raw estimate is several times below plain HR's (protecting all)."""
    k, n, epsilon = 2000, 100_000, 1.0
    rng = np.random.default_rng(7)
    high_low = HLHR(k, epsilon, rng.choice(k, 10, replace=False))
    plain = ldpdist.HadamardResponse(k, epsilon, blocks=1)
    err_hl, err_plain = [], []
    for r in range(5):
        p = rng.dirichlet(np.ones(k))
        counts = rng.multinomial(n, p)
        err_hl.append(np.abs(high_low.simulate(counts, seed=r).estimate("raw") - p).sum())
        err_plain.append(np.abs(plain.simulate(counts, seed=r).estimate("raw") - p).sum())
    assert np.mean(err_plain) > 4 * np.mean(err_hl), (np.mean(err_plain), np.mean(err_hl))


# -- edge cases -------------------------------------------------------------------------------


def test_every_value_sensitive_is_hadamard_response_with_one_block():
    for k, epsilon in [(5, 0.5), (16, 2.0), (100, 1.0)]:
        mech = HLHR(k, epsilon, np.arange(k)[::-1])
        hr = ldpdist.HadamardResponse(k, epsilon, blocks=1)
        assert mech.output_size == hr.output_size and mech.layout == (k, 0, hr.output_size)
        np.testing.assert_allclose(mech.channel_matrix(), hr.channel_matrix(), rtol=1e-15,
                                   atol=0)
        counts = np.random.default_rng(k).integers(0, 100, mech.output_size).astype(np.uint64)
        n = int(counts.sum())
        np.testing.assert_allclose(mech._core.estimate_raw(counts, n),
                                   hr._core.estimate_raw(counts, n), rtol=0, atol=1e-14)
        assert mech.realized_epsilon == pytest.approx(hr.realized_epsilon, abs=1e-14)
        np.testing.assert_array_equal(mech.budgets(), privacy.uniform_budgets(k, epsilon))


def test_no_sensitive_value_keeps_the_construction_and_constrains_nothing():
    k, epsilon = 6, 1.0
    mech = HLHR(k, epsilon, [])
    assert mech.layout == (0, k, 1) and mech.output_size == k + 1
    rho, q = mech._core.probabilities()
    Q = mech.channel_matrix()
    np.testing.assert_array_equal(Q[:, 0], np.full(k, 1 - q))
    np.testing.assert_array_equal(Q[:, 1:], q * np.eye(k))
    E = mech.budgets()
    assert np.isinf(E[~np.eye(k, dtype=bool)]).all()
    assert privacy.verify(Q, E).amount == -math.inf
    assert np.isinf(mech.realized_budgets()[~np.eye(k, dtype=bool)]).all()
    # realized_epsilon: what a sensitive value would get against the others with this q.
    assert mech.realized_epsilon == pytest.approx(math.log(2 * rho / (1 - q)), abs=1e-15)
    assert epsilon * (1 - 1e-12) < mech.realized_epsilon <= epsilon
    values = np.repeat(np.arange(k), 2000)
    reports = mech.privatize(values, seed=1)
    assert reports.max() <= k
    p_hat = mech.estimate(reports, "raw")
    assert np.abs(p_hat - 1 / k).max() < 0.05
    np.testing.assert_allclose(p_hat, np.bincount(reports, minlength=k + 1)[1:] / q / len(values))


def test_k_2_to_the_32_needs_no_k_sized_table_and_reports_follow_the_layout():
    """k > 2^26 with few sensitive values: the value lookup binary-searches the sorted list
    (no k-sized table; the Rust tests compare both lookups report for report)."""
    k = 2**32
    mech = HLHR(k, 1.0, [5, 2**31, 2**32 - 1])
    assert mech.layout == (3, k - 3, 4)
    values = np.array([5, 2**31, 2**32 - 1, 0, 6, 2**32 - 2] * 2000, dtype=np.uint32)
    reports = mech.privatize(values, seed=3).reshape(-1, 6)
    assert reports.dtype == np.uint64 and (reports[:, :3] < 4).all()
    # a non-sensitive value x reports its slot S + u, u = x minus the sensitive values below
    # it, or an element of [0, S)
    for column, u in ((3, 0), (4, 5), (5, 2**32 - 4)):
        slot = reports[:, column] >= 4
        assert (reports[slot, column] == 4 + u).all() and 0.4 < slot.mean() < 0.53


def test_realized_budgets_in_closed_form_need_no_channel():
    k = 5000
    mech = HLHR(k, 0.5, np.arange(0, k, 7))
    with pytest.raises(ValueError, match="max_entries"):
        mech.channel_matrix()
    E = mech.realized_budgets()
    both, cross = mech._core.pair_budgets()
    A = np.zeros(k, bool)
    A[mech.sensitive] = True
    off = ~np.eye(k, dtype=bool)
    assert E.shape == (k, k) and (np.diag(E) == 0).all()
    assert (E[np.ix_(A, A)][off[np.ix_(A, A)]] == both).all()
    assert (E[np.ix_(A, ~A)] == cross).all()
    assert np.isinf(E[~A][off[~A]]).all()
    assert mech.realized_epsilon == max(both, cross) <= 0.5


def test_simulate_of_10_to_the_12_users_is_fast_and_accurate():
    import time

    k = 10_000
    mech = HLHR(k, 1.0, np.arange(0, k, 3))
    p = np.random.default_rng(1).dirichlet(np.ones(k))
    counts = np.floor(p * 1e12).astype(np.uint64)
    start = time.perf_counter()
    agg = mech.simulate(counts, seed=2)
    elapsed = time.perf_counter() - start
    assert agg.n == int(counts.sum()) and elapsed < 5
    sd = np.sqrt(variances(mech, counts / counts.sum(), agg.n))
    assert (np.abs(agg.estimate("raw") - counts / counts.sum()) < 6 * sd).all()


# -- specs, fingerprints, files ---------------------------------------------------------------


def test_spec_carries_the_sorted_set_and_the_fingerprint_does_not_depend_on_its_order():
    a = HLHR(20, 1.0, [9, 3, 14])
    b = HLHR(20, 1.0, (14, 9, 3))
    c = HLHR(20, 1.0, np.array([3, 9, 14], dtype=np.uint8))
    assert a.to_dict() == {"mechanism": "HighLowHadamardResponse", "format": 1, "k": 20,
                           "epsilon": 1.0, "sensitive": [3, 9, 14]}
    assert a == b == c and hash(a) == hash(b) == hash(c)
    assert a.fingerprint == b.fingerprint == c.fingerprint
    assert ldpdist.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    other = HLHR(20, 1.0, [3, 9, 15])
    assert other != a and other.fingerprint != a.fingerprint
    np.testing.assert_array_equal(a.sensitive, [3, 9, 14])
    with pytest.raises(ValueError):
        a.sensitive[0] = 1  # read-only
    reports = a.privatize(np.arange(20), seed=1)
    with pytest.raises(ValueError, match="made under"):
        a.aggregator().merge(other.aggregator().add(other.privatize(np.arange(20), seed=1)))
    assert "sensitive=[3, 9, 14]" in repr(a)
    assert "(200 values)" in repr(HLHR(1000, 1.0, np.arange(0, 1000, 5)))
    assert reports.dtype == np.uint8


def test_reports_files_round_trip(tmp_path):
    mech = HLHR(50, 1.0, [1, 2, 40])
    reports = mech.privatize(np.arange(50).repeat(10), seed=4)
    ldpdist.write_reports(tmp_path / "r.ldpr", mech, reports)
    batch = ldpdist.read_reports(tmp_path / "r.ldpr", expect=mech)
    np.testing.assert_array_equal(batch.reports, reports)
    with pytest.raises(ldpdist.SpecMismatchError):
        ldpdist.read_reports(tmp_path / "r.ldpr", expect=HLHR(50, 1.0, [1, 2, 41]))


# -- the command line -------------------------------------------------------------------------


def run(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_spec_with_a_list_a_file_or_both_and_the_flow_matches_the_api(tmp_path, capsys):
    (tmp_path / "sensitive.txt").write_text("9\n\n  5\n")
    np.save(tmp_path / "sensitive.npy", np.array([5, 9], dtype=np.int32))
    specs = []
    for options in (["--sensitive", "9,1,5"], ["--sensitive", "1", "--sensitive-file",
                                                 tmp_path / "sensitive.txt"],
                    ["--sensitive-file", tmp_path / "sensitive.npy", "--sensitive", " 1 "]):
        status, out, err = run(capsys, "spec", "hlhr", "--k", 12, "--epsilon", 1.0, *options)
        assert status == 0, err
        specs.append(json.loads(out))
    expected = HLHR(12, 1.0, [1, 5, 9])
    # a written spec records its fingerprint (checked when it is loaded)
    assert specs[0] == specs[1] == specs[2] == dict(expected.to_dict(),
                                                    fingerprint=expected.fingerprint)
    status, _, err = run(capsys, "spec", "HighLowHadamardResponse", "--k", 12, "--epsilon", 1,
                         "--sensitive", "", "-o", tmp_path / "none.json")
    assert status == 0, err
    assert ldpdist.from_dict(json.loads((tmp_path / "none.json").read_text())) == HLHR(12, 1.0, [])
    # the deployment flow equals the API
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(specs[0]))
    mech = ldpdist.from_dict(specs[0])
    values = np.random.default_rng(0).integers(0, 12, 3000)
    (tmp_path / "v.txt").write_text("\n".join(map(str, values)) + "\n")
    for argv in (["privatize", "--spec", spec, tmp_path / "v.txt", "--seed", 5, "-o",
                  tmp_path / "r.ldpr"],
                 ["aggregate", "--spec", spec, tmp_path / "r.ldpr", "-o", tmp_path / "a.ldps"],
                 ["estimate", "--spec", spec, tmp_path / "a.ldps", "--decoder", "project", "-o",
                  tmp_path / "e.csv"]):
        status, _, err = run(capsys, *argv)
        assert status == 0, err
    lines = (tmp_path / "e.csv").read_text().splitlines()[1:]
    got = np.array([float(line.split(",")[1]) for line in lines])
    np.testing.assert_array_equal(got, mech.estimate(mech.privatize(values, seed=5), "project"))


@pytest.mark.parametrize("argv, match", [
    (["hlhr", "--k", 12, "--epsilon", 1], "needs --sensitive (or --sensitive-file)"),
    (["hlhr", "--k", 12, "--epsilon", 1, "--sensitive", "1,x"], "item 2, 'x', is not an integer"),
    (["hlhr", "--k", 12, "--epsilon", 1, "--sensitive", "1,12"],
     "must lie in [0, 12): 12 at --sensitive item 2"),
    (["hlhr", "--k", 12, "--epsilon", 1, "--sensitive", "3,1,3"],
     "sensitive value 3 is listed twice: at --sensitive item 1 and at --sensitive item 3"),
    (["hlhr", "--k", 12, "--epsilon", 0, "--sensitive", "1"], "epsilon"),
    (["hr", "--k", 12, "--epsilon", 1, "--sensitive", "1"], "--sensitive does not apply"),
    (["hr", "--k", 12, "--epsilon", 1, "--sensitive-file", "x"], "--sensitive-file does not apply"),
])
def test_cli_spec_errors(capsys, argv, match):
    status, _, err = run(capsys, "spec", *argv)
    assert status == 2 and len(err.splitlines()) == 1 and match in err, err


def test_cli_sensitive_file_errors_name_the_line(tmp_path, capsys):
    base = ["spec", "hlhr", "--k", 12, "--epsilon", 1, "--sensitive-file"]
    cases = {"bad.txt": ("1\n2\nthree\n", "line 3: 'three' is not an integer"),
             "range.txt": ("1\n\n30\n", "30 at"),
             "twice.txt": ("4\n7\n4\n", "listed twice"),
             "empty.txt": ("\n\n", "holds no values")}
    for name, (text, match) in cases.items():
        (tmp_path / name).write_text(text)
        status, _, err = run(capsys, *base, tmp_path / name)
        assert status == 2 and match in err and len(err.splitlines()) == 1, err
    status, _, err = run(capsys, *base, tmp_path / "range.txt")
    assert "line 3" in err
    status, _, err = run(capsys, *base, tmp_path / "missing.txt")
    assert status == 2 and "does not exist" in err
    status, _, err = run(capsys, *base, tmp_path / "twice.txt", "--sensitive", "7")
    assert status == 2 and "line 2" in err and "--sensitive item 1" in err


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("sensitive, error, match", [
    ([1, 10], ValueError, r"sensitive\[1\] = 10"),
    ([-1], ValueError, r"sensitive\[0\] = -1"),
    ([4, 2, 4], ValueError, "4 is repeated"),
    ([1.0, 2.0], TypeError, "integer"),
    ([True, False], TypeError, "integer"),
    (["1"], TypeError, "integer"),
    ("12", TypeError, "integer"),
    (None, TypeError, "integer"),
    (3, ValueError, "one-dimensional"),
    ([[1, 2]], ValueError, "one-dimensional"),
    ([2**64], TypeError, "integer"),
])
def test_bad_sensitive_sets(sensitive, error, match):
    with pytest.raises(error, match=match):
        HLHR(10, 1.0, sensitive)
    with pytest.raises(ValueError, match="invalid parameters|sensitive|integer"):
        ldpdist.from_dict({"mechanism": "HighLowHadamardResponse", "k": 10, "epsilon": 1.0,
                           "sensitive": sensitive})


@pytest.mark.parametrize("epsilon", [0, -1.0, float("nan"), float("inf"), 1e-300, 800])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        HLHR(10, epsilon, [1, 2])


def test_sensitive_is_required_and_k_is_checked_first():
    with pytest.raises(TypeError):
        HLHR(10, 1.0)  # noqa
    with pytest.raises(ValueError, match="invalid parameters"):
        ldpdist.from_dict({"mechanism": "HighLowHadamardResponse", "k": 10, "epsilon": 1.0})
    with pytest.raises(ValueError, match="k must be"):
        HLHR(1, 1.0, [0])
    with pytest.raises(TypeError):
        HLHR(10.0, 1.0, [0])
