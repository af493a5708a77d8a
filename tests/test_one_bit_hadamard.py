"""One-bit Hadamard Response (the sparse-estimation paper's Algorithm 1):
the channel, exact unbiasedness with equal, unequal and empty groups, the sampler group by
group, the groups (round-robin, continued, explicit), simulate's law, the paper's error bound
at its experimental setting, determinism and bad input. The shared contract suite
(tests/test_mechanisms.py) covers the rest."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import ldpdist
from conftest import run_python
from simulation_law import assert_simulate_is_exact_in_law
from test_mechanisms import chi2_critical_999

OBHR = ldpdist.OneBitHadamardResponse


def hadamard(size):
    rows = np.arange(size)[:, None] & np.arange(size)[None, :]
    parity = np.vectorize(lambda v: bin(v).count("1") & 1)(rows)
    return 1 - 2 * parity


# -- channel and privacy ------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 5, 8, 100, 1000])
@pytest.mark.parametrize("epsilon", [0.01, 0.5, 2.0, 10.0])
def test_channel_is_eq_3_and_exactly_epsilon_ldp(k, epsilon):
    mech = OBHR(k, epsilon)
    size = mech.num_groups
    assert size == 2 ** math.ceil(math.log2(k + 1)) and mech.output_size == 2 * size
    q = mech.channel_matrix()
    a, b = mech._core.probabilities()
    assert a == 1 - b and b < 0.5
    h = hadamard(size)[:k]
    np.testing.assert_array_equal(q[:, 1::2] * size, np.where(h == 1, a, b))
    np.testing.assert_array_equal(q[:, 0::2] * size, np.where(h == 1, b, a))
    ratio = np.log(q.max(axis=0) / q.min(axis=0)).max()
    assert ratio == pytest.approx(mech.realized_epsilon, abs=1e-12 * max(epsilon, 1))
    assert mech.realized_epsilon <= epsilon
    assert epsilon - mech.realized_epsilon < 1e-12 * max(epsilon, 1)
    # The realized ratio as a real number: (1 − b)/b ≤ e^ε, i.e. b (e^ε + 1) ≥ 1, checked
    # with exact rational arithmetic on the float b and e^ε rounded down.
    from fractions import Fraction

    e_low = Fraction(np.nextafter(math.exp(epsilon), 0.0))
    assert Fraction(b) * (e_low + 1) > 1


# -- unbiasedness -------------------------------------------------------------------------


def group_frequencies(mech, p, sizes):
    """Exact expected report frequencies when group j holds sizes[j] of the users, whose
    values are i.i.d. from p: (n_j/n)·P(y | j)."""
    size = mech.num_groups
    a, b = mech._core.probabilities()
    plus = (1 + hadamard(size)[: mech.k].T @ p) / 2  # P(H(X, j) = +1)
    ones = b + (a - b) * plus
    share = np.asarray(sizes, float) / np.sum(sizes)
    freq = np.empty(2 * size)
    freq[1::2], freq[0::2] = share * ones, share * (1 - ones)
    return freq


@pytest.mark.parametrize("k,epsilon", [(2, 0.1), (7, 1.0), (16, 2.0), (100, 0.5), (1000, 5.0)])
def test_raw_estimate_of_exact_expectations_is_p(k, epsilon):
    mech = OBHR(k, epsilon)
    p = np.random.default_rng(k).dirichlet(np.full(k, 0.3))
    expected = p @ mech.channel_matrix()
    np.testing.assert_allclose(mech._expected_frequencies(p), expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(mech._core.estimate_from_frequencies(expected), p, rtol=0,
                               atol=1e-12)
    # Unequal group sizes (n not a multiple of K, or any other assignment): still p.
    sizes = 1 + np.arange(mech.num_groups) % 5
    np.testing.assert_allclose(
        mech._core.estimate_from_frequencies(group_frequencies(mech, p, sizes)), p, rtol=0,
        atol=1e-12)


def test_empty_groups_contribute_zero_and_bias_the_estimate():
    mech = OBHR(10, 1.0)
    size = mech.num_groups
    p = np.random.default_rng(3).dirichlet(np.ones(10))
    sizes = np.full(size, 7)
    empty = [0, 3, 12]
    sizes[empty] = 0
    estimate = mech._core.estimate_from_frequencies(group_frequencies(mech, p, sizes))
    h = hadamard(size)
    # p̃ = (1/K) Σ_{j non-empty} (H p)_j H(·, j): the empty groups' terms are missing.
    missing = sum((h[j, :10] @ p) * h[:10, j] for j in empty) / size
    np.testing.assert_allclose(estimate, p - missing, rtol=0, atol=1e-12)
    assert np.abs(estimate - p).max() > 0.01  # biased
    # Through the API: fewer users than groups warns.
    reports = mech.privatize([1, 2, 3], seed=1)
    with pytest.warns(RuntimeWarning, match="13 of the K = 16 groups received no reports"):
        mech.estimate(reports, "raw")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mech.estimate(mech.privatize(np.arange(16) % 10, seed=1), "raw")


def test_estimator_variance_is_the_round_robin_variance_not_the_oracle_one():
    """n = 160 users drawn i.i.d. from p in round-robin groups (K = 16, ten users each):
    over 1500 privatize runs each coordinate's variance is within ±15% (about 4.5 standard
    errors) of ``estimator_variance``, ``(1/(1 - 2b)² - ||p||²)/n`` for equal groups, and
    the coordinates where p is small are far from the pure-oracle variance
    ``(1/(1 - 2b)² - p_x²)/n`` (ratio about 1.5 here)."""
    k, epsilon, n, runs = 8, 2.0, 160, 1500
    mech = OBHR(k=k, epsilon=epsilon)
    assert mech.num_groups == 16 and mech._frequency_oracle() is None
    p = np.array([0.7, 0.3, 0, 0, 0, 0, 0, 0])
    want = mech.estimator_variance(p, n)
    gap = 1 - 2 * mech._core.probabilities()[1]
    np.testing.assert_allclose(want, (1 / gap**2 - p @ p) / n, rtol=1e-12)
    rng = np.random.default_rng(21)
    estimates = np.array([mech.estimate(mech.privatize(rng.choice(k, size=n, p=p), seed=r),
                                        "raw") for r in range(runs)])
    ratio = estimates.var(axis=0, ddof=1) / want
    assert ((ratio > 0.85) & (ratio < 1.15)).all(), ratio
    oracle = (1 / gap**2 - p * p) / n
    assert (oracle[2:] / want[2:] > 1.4).all()


# -- the sampler ----------------------------------------------------------------------------


@pytest.mark.parametrize("k,epsilon", [(5, 0.5), (12, 3.0), (100, 1.0)])
def test_each_group_sends_ones_at_the_rate_of_eq_3(k, epsilon):
    mech = OBHR(k, epsilon)
    size = mech.num_groups
    a, b = mech._core.probabilities()
    h = hadamard(size)
    per_group = 3000
    for x in (0, k - 1, k // 2):
        reports = mech.privatize(np.full(per_group * size, x), seed=10 + x, first_user=5)
        counts = np.bincount(reports.astype(np.int64), minlength=2 * size)
        ones, total = counts[1::2], counts[0::2] + counts[1::2]
        assert (total == per_group).all()
        rate = np.where(h[x] == 1, a, b)
        z = (ones - per_group * rate) / np.sqrt(per_group * rate * (1 - rate))
        assert (z ** 2).sum() < chi2_critical_999(size), f"x = {x}"
    # Mixed values with explicit groups: the ones of group j follow its values' rates.
    rng = np.random.default_rng(4)
    values = rng.integers(0, k, 200_000)
    groups = rng.integers(0, size, 200_000)
    reports = mech.privatize(values, seed=3, groups=groups)
    got_groups, bits = mech.split_reports(reports)
    np.testing.assert_array_equal(got_groups, groups)
    rate = np.where(h[values, groups] == 1, a, b)
    mean = np.bincount(groups, weights=rate, minlength=size)
    var = np.bincount(groups, weights=rate * (1 - rate), minlength=size)
    ones = np.bincount(groups, weights=bits, minlength=size)
    assert (((ones - mean) ** 2 / var).sum()) < chi2_critical_999(size)


def test_groups_are_round_robin_continued_or_explicit():
    mech = OBHR(10, 1.0)  # K = 16
    values = np.arange(100) % 10
    reports = mech.privatize(values, seed=1)
    np.testing.assert_array_equal(reports // 2, np.arange(100) % 16)
    assert reports.dtype == np.uint8
    shifted = mech.privatize(values, seed=1, first_user=37)
    np.testing.assert_array_equal(shifted // 2, (37 + np.arange(100)) % 16)
    # first_user is the round-robin: identical to the explicit groups it implies, any dtype.
    for dtype in (np.uint8, np.int16, np.int64, np.uint64):
        explicit = mech.privatize(values, seed=1, groups=((37 + np.arange(100)) % 16).astype(dtype))
        np.testing.assert_array_equal(explicit, shifted)
    assert np.array_equal(mech.privatize(values, seed=1, first_user=37 + 16 * 10**30), shifted)
    # Reports from one-bit messages and the server's groups, and back.
    groups, bits = mech.split_reports(shifted)
    np.testing.assert_array_equal(mech.reports_from_bits(bits.astype(bool), groups), shifted)
    assert mech.reports_from_bits([], []).size == 0
    big = OBHR(2**20, 1.0)
    assert big.num_groups == 2**21 and big.privatize([5], seed=1).dtype == np.uint32


# -- simulate -------------------------------------------------------------------------------


@pytest.mark.parametrize("counts", [[3, 0, 70, 5, 1, 0, 20, 9, 66],
                                    [3 * 10**11, 0, 7 * 10**11, 5, 1, 0, 2, 9, 10**9]],
                         ids=["shuffle", "passes"])
def test_simulate_is_exact_in_law_by_both_algorithms(counts):
    mech = OBHR(9, 0.8)
    assert_simulate_is_exact_in_law(mech, counts, runs=300, seed0=7)


def test_simulate_has_the_law_of_privatizing_the_users_in_a_random_order():
    mech = OBHR(12, 1.0)  # K = 16
    counts = np.array([40, 0, 300, 5, 0, 0, 120, 9, 0, 1, 0, 70])
    values = np.repeat(np.arange(12), counts)
    mean, var = mech._simulation_moments(counts)
    runs = 300
    rng = np.random.default_rng(8)
    direct = np.array([mech.aggregator().add(mech.privatize(rng.permutation(values), seed=s))
                       .counts for s in range(runs)], float)
    simulated = np.array([mech.simulate(counts, seed=s).counts for s in range(runs)], float)
    for sample in (direct, simulated):
        z = np.abs(sample.mean(axis=0) - mean) / np.sqrt(var / runs)
        assert z.max() < 5
        ratio = sample.var(axis=0, ddof=1)[var >= 1] / var[var >= 1]
        assert ((ratio > 0.6) & (ratio < 1.5)).all(), ratio


def test_simulate_at_10_to_the_12_users_is_fast_and_exact_in_total():
    mech = OBHR(5000, 0.5)
    counts = np.zeros(5000, np.uint64)
    counts[:16] = 10**12 // 16
    agg = mech.simulate(counts, seed=1)
    n = int(counts.sum())
    sizes = agg.counts.reshape(-1, 2).sum(axis=1)
    np.testing.assert_array_equal(sizes, n // 8192 + (np.arange(8192) < n % 8192))
    assert np.abs(agg.estimate("raw") - counts / n).max() < 1e-4


# -- the paper's bound at its experimental setting ------------------------------------------

N_PAPER = 366 * 8192  # ≈ 3·10^6 users, a multiple of K = 8192: equal groups


@pytest.mark.parametrize("s", [4, 64])
@pytest.mark.parametrize("epsilon", [0.5, 0.9])
def test_sparse_projection_is_within_the_papers_bound(s, epsilon):
    """k = 5000, p uniform on s values, n ≈ 3·10^6 (Section 4). The raw estimate's error
    matches its exact standard error; the sparse projection is far below the note's bound
    ℓ2 ≤ 50 (e^ε+1)/(e^ε−1) √(s log(2k/s)/n) and below the plain projection (the paper's
    finding)."""
    k, n = 5000, N_PAPER
    mech = OBHR(k, epsilon)
    rng = np.random.default_rng(100 * s + int(10 * epsilon))
    support = rng.choice(k, size=s, replace=False)
    counts = np.zeros(k, np.int64)
    counts[support] = n // s
    p = counts / n
    agg = mech.simulate(counts, seed=s)
    raw = agg.estimate("raw")
    sparse = agg.estimate("sparse_project", sparsity=s)
    plain = agg.estimate("project")
    c = (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    bound = 50 * c * math.sqrt(s * math.log(2 * k / s) / n)
    # Exact E||p̃ − p||² for users in a random order with equal groups: the bits' binomial
    # noise plus the hypergeometric group contents (checked by Monte Carlo to 0.5%).
    b = mech._core.probabilities()[1]
    expected = 4 * k * b * (1 - b) / ((1 - 2 * b) ** 2 * n) + (k - 1) * (1 - p @ p) / (n - 1)
    assert 0.9 < np.linalg.norm(raw - p) / math.sqrt(expected) < 1.1
    sparse_error = np.linalg.norm(sparse - p)
    assert sparse_error < bound / 10, (sparse_error, bound)
    # Given the right support, the projection's error is about √((s − 1)·σ²), σ² the
    # per-coordinate variance.
    assert sparse_error < 3 * math.sqrt((s - 1) * expected / k)
    assert np.count_nonzero(sparse) <= s
    assert sparse_error < np.linalg.norm(plain - p)


# -- determinism and bad input --------------------------------------------------------------


def test_reports_and_simulations_are_bit_identical_at_1_and_3_threads():
    code = """
        import json, numpy as np, ldpdist
        m = ldpdist.OneBitHadamardResponse(3000, 1.0)
        v = np.arange(300_000) % 3000
        g = (np.arange(300_000) * 7) % m.num_groups
        c = np.bincount(v[:4000], minlength=3000)
        print(json.dumps([digest(m.privatize(v, seed=3, first_user=11)),
                          digest(m.privatize(v, seed=3, groups=g)),
                          digest(m.simulate(c, seed=4).counts),
                          digest(m.simulate(c * 10**6, seed=4).counts)]))
    """
    runs = [json.loads(run_python(code, env={"RAYON_NUM_THREADS": t})) for t in ("1", "3")]
    assert runs[0] == runs[1]


def test_bad_input_is_refused_clearly():
    mech = OBHR(10, 1.0)  # K = 16
    values = np.arange(6)
    with pytest.raises(ValueError, match=r"groups\[2\] = 16"):
        mech.privatize(values, groups=[0, 1, 16, 3, 4, 5])
    with pytest.raises(ValueError, match=r"groups\[1\] = -1"):
        mech.privatize(values, groups=np.array([0, -1, 2, 3, 4, 5]))
    with pytest.raises(ValueError, match="5 groups for 6 values"):
        mech.privatize(values, groups=np.arange(5))
    with pytest.raises(TypeError, match="dtype float64"):
        mech.privatize(values, groups=np.arange(6.0))
    with pytest.raises(TypeError, match="booleans"):
        mech.privatize(values[:2], groups=[True, False])
    with pytest.raises(TypeError, match="dtype bool"):
        mech.privatize(values[:2], groups=np.array([True, False]))
    with pytest.raises(ValueError, match="one-dimensional"):
        mech.privatize(values, groups=np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="not both"):
        mech.privatize(values, groups=np.arange(6), first_user=3)
    with pytest.raises(ValueError, match="first_user"):
        mech.privatize(values, first_user=-1)
    with pytest.raises(TypeError, match="first_user"):
        mech.privatize(values, first_user=1.5)
    with pytest.raises(ValueError, match=r"bits\[1\] = 2"):
        mech.reports_from_bits([1, 2], [0, 1])
    with pytest.raises(ValueError, match=r"reports\[0\] = 32"):
        mech.split_reports(mech.as_reports(np.array([32], np.uint8)))
    # Sparsity outside [1, k].
    agg = mech.simulate(np.full(10, 100), seed=1)
    for s in (0, 11):
        with pytest.raises(ValueError, match="sparsity"):
            agg.estimate("sparse_project", sparsity=s)
    # Reports made under another spec (another ε, or another mechanism with the same output
    # size: HadamardResponse(31, ·) has 32 outputs too).
    reports = mech.privatize(np.arange(100) % 10, seed=2)
    for other in (OBHR(10, 2.0), ldpdist.HadamardResponse(31, 1.0, blocks=1)):
        with pytest.raises(ldpdist.SpecMismatchError):
            ldpdist.reports.encode_reports(other, reports)  # a file cannot relabel them
        # a batch forged under the other spec (the tag stripped, the other's declared)
        batch = ldpdist.reports.encode_reports(other, other.as_reports(np.asarray(reports)))[1]
        with pytest.raises(ldpdist.SpecMismatchError):
            mech.aggregator().add(batch)
        with pytest.raises(ldpdist.SpecMismatchError):
            mech.estimate(batch)
    with pytest.raises(ValueError, match="made under"):
        mech.aggregator().merge(OBHR(10, 2.0).aggregator())


def test_the_command_line_knows_obhr(tmp_path, capsys):
    from ldpdist import cli

    spec = tmp_path / "spec.json"
    assert cli.main(["spec", "obhr", "--k", "50", "--epsilon", "1", "-o", str(spec)]) == 0
    assert json.loads(spec.read_text())["mechanism"] == "OneBitHadamardResponse"
    values = tmp_path / "values.txt"
    values.write_text("\n".join(str(v % 50) for v in range(500)))
    out = tmp_path / "r.ldpr"
    assert cli.main(["privatize", "--spec", str(spec), str(values), "--seed", "3", "-o",
                     str(out)]) == 0
    # A second batch continues the round-robin; --first-user is for obhr only.
    second = tmp_path / "r2.ldpr"
    assert cli.main(["privatize", "--spec", str(spec), str(values), "--seed", "4",
                     "--first-user", "500", "-o", str(second)]) == 0
    groups, _ = ldpdist.OneBitHadamardResponse(50, 1.0).split_reports(
        ldpdist.read_reports(second).reports)
    np.testing.assert_array_equal(groups, (500 + np.arange(500)) % 64)
    hr_spec = tmp_path / "hr.json"
    assert cli.main(["spec", "hr", "--k", "50", "--epsilon", "1", "-o", str(hr_spec)]) == 0
    assert cli.main(["privatize", "--spec", str(hr_spec), str(values), "--first-user", "5",
                     "-o", str(tmp_path / "x.ldpr")]) == 2
    assert "applies only to mechanisms that number their users" in capsys.readouterr().err
    estimate = tmp_path / "e.csv"
    assert cli.main(["estimate", "--spec", str(spec), str(out), "--decoder",
                     "sparse_project", "--sparsity", "5", "-o", str(estimate)]) == 0
    capsys.readouterr()
    mech = ldpdist.from_dict(json.loads(spec.read_text()))
    direct = mech.estimate(mech.privatize(np.arange(500) % 50, seed=3), "sparse_project",
                           sparsity=5)
    lines = estimate.read_text().splitlines()[1:]
    np.testing.assert_array_equal([float(line.split(",")[1]) for line in lines], direct)
