"""PublicCoinHashing: the hash family (test vectors from the independent ChaCha reference,
exact strong universality on a scaled-down word size, chi-square uniformity and pairwise
independence of the real family), exact unbiasedness, the two-stage estimator, simulate vs
privatize + aggregate, determinism, integrity of reports and states, the CLI, and bad input.

Statistical tests use fixed seeds and tolerances sized by their power (z-scores against
exact means and variances; chi-square at the 0.1% level)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

import chacha_reference as ref
import ldpdist
from ldpdist import cli
from ldpdist.errors import IntegrityError, SpecMismatchError

PCH = ldpdist.PublicCoinHashing

# (seed, user i, value x, bits) -> h_i(x), computed with tests/chacha_reference.py (an
# implementation of ChaCha20 written from the specification, independent of ldpdist).
TEST_VECTORS = [
    (0, 0, 0, 1, 0),
    (0, 1, 1, 3, 3),
    (7, 0, 4999, 3, 4),
    (7, 12345, 17, 8, 35),
    (2024, 2**32, 2**32 - 1, 31, 1296202446),
    (2024, 2**33 - 1, 5, 31, 2042583276),
    (2**255 - 19, 3, 123456789, 16, 28691),
    (1, 2**60 - 1, 42, 4, 13),
]


def reference_hash(seed, user, x, bits):
    """h_i(x) from the normative description (class docstring), with the reference ChaCha20."""
    stream = ref.WordStream(ref.seed_key(seed), user)
    a, b = stream.next_u64(), stream.next_u64()
    return ((a * x + b) % 2**64) >> (64 - bits)


def chi2_critical_999(df):
    z = 3.090232  # Wilson–Hilferty, upper 0.1%
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def numpy_hashes(a, b, x, bits):
    """h for arrays of (a, b) at one value x (uint64 arithmetic wraps mod 2**64)."""
    with np.errstate(over="ignore"):
        return (a * np.uint64(x) + b) >> np.uint64(64 - bits)


# -- the hash family ------------------------------------------------------------------------


@pytest.mark.parametrize("seed, user, x, bits, expected", TEST_VECTORS)
def test_hashes_match_the_test_vectors_and_the_reference(seed, user, x, bits, expected):
    assert reference_hash(seed, user, x, bits) == expected
    mech = PCH(k=2**32, bits=bits, seed=seed)
    report = int(mech.privatize(np.array([x], dtype=np.uint64), users=[user])[0])
    assert report == (user << bits) | expected
    assert int(mech.hashes(user, [x])[0]) == expected
    a, b = mech.hash_parameters([user])
    assert int(numpy_hashes(a, b, x, bits)[0]) == expected


def test_hash_parameters_are_the_sign_matrix_stream():
    # The same public ChaCha20 stream as column i of a seeded sign matrix: a_i's bits are the
    # first 64 Rademacher signs of column i (README, "Seeded sign matrices").
    mech = PCH(k=100, bits=4, seed=99)
    users = np.array([0, 1, 5, 2**40])
    a, _ = mech.hash_parameters(users)
    for user, word in zip(users, a):
        signs = ldpdist.kernels.sign_column(seed=99, m=64, j=int(user), kind="rademacher")
        bits = [(int(word) >> t) & 1 for t in range(64)]
        assert [1 if s > 0 else 0 for s in signs] == bits


@pytest.mark.parametrize("key_bits, bits", [(4, 5), (4, 3), (3, 6), (5, 4)])
def test_multiply_add_shift_is_exactly_strongly_universal_on_small_words(key_bits, bits):
    """Dietzfelbinger's theorem on an 8-bit word (w̄ = 8 ≥ w + ℓ − 1): over all 2^16 pairs
    (a, b), every pair of distinct keys hashes to every pair of messages equally often — the
    64-bit family is the same construction with w̄ = 64, w = 32, ℓ ≤ 31 < 33."""
    word = 8
    assert word >= key_bits + bits - 1
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = a.ravel(), b.ravel()
    keys = np.arange(2**key_bits)
    h = ((a[:, None] * keys[None, :] + b[:, None]) % 256) >> (word - bits)  # (2^16, keys)
    cells = 2 ** (2 * bits)
    for x in keys:
        for x2 in keys[x + 1:]:
            pair = np.bincount(h[:, x] * 2**bits + h[:, x2], minlength=cells)
            assert (pair == 2**16 // cells).all(), (x, x2)


def test_real_family_is_uniform_and_pairwise_independent_across_users():
    """Chi-square of (h_i(x), h_i(x')) over 200 000 users, 64 cells, for near and far pairs,
    and of h_i(x) alone (8 cells)."""
    bits, users = 3, 200_000
    mech = PCH(k=2**32, bits=bits, seed=2024)
    a, b = mech.hash_parameters(np.arange(users, dtype=np.uint64))
    cells = 2 ** (2 * bits)
    for x, x2 in [(0, 1), (17, 18), (0, 2**32 - 1), (12345, 2**31)]:
        hx, hx2 = numpy_hashes(a, b, x, bits), numpy_hashes(a, b, x2, bits)
        for one in (hx, hx2):
            counts = np.bincount(one.astype(np.int64), minlength=2**bits)
            e = users / 2**bits
            assert ((counts - e) ** 2 / e).sum() < chi2_critical_999(2**bits - 1)
        pair = np.bincount((hx * np.uint64(2**bits) + hx2).astype(np.int64), minlength=cells)
        e = users / cells
        chi2 = ((pair - e) ** 2 / e).sum()
        assert chi2 < chi2_critical_999(cells - 1), (x, x2, chi2)


# -- privatize --------------------------------------------------------------------------------


def test_reports_are_user_index_and_message():
    mech = PCH(k=1000, bits=5, seed=3)
    values = np.random.default_rng(0).integers(0, 1000, size=10_000)
    reports = mech.privatize(values, first_user=500)
    assert reports.dtype == np.uint64 and reports.shape == (10_000,)
    users = reports >> np.uint64(5)
    assert np.array_equal(users, np.arange(500, 10_500, dtype=np.uint64))
    a, b = mech.hash_parameters(users)
    with np.errstate(over="ignore"):
        expected = (a * values.astype(np.uint64) + b) >> np.uint64(59)
    assert np.array_equal(reports & np.uint64(31), expected)
    listed = np.arange(10_000)[::-1] * 3
    again = mech.privatize(values, users=listed)
    assert np.array_equal(again >> np.uint64(5), listed.astype(np.uint64))
    assert np.array_equal(mech.privatize(values, first_user=500), reports)  # deterministic


def test_channel_of_one_user_is_its_hash():
    mech = PCH(k=40, bits=3, seed=5)
    q = mech.channel_matrix(user=11)
    assert q.shape == (40, 8) and (q.sum(axis=1) == 1).all()
    assert np.array_equal(q.argmax(axis=1), mech.hashes(11, np.arange(40)))
    with pytest.raises(ValueError, match="user=i"):
        mech.channel_matrix()
    with pytest.raises(ValueError, match="max_entries"):
        mech.channel_matrix(max_entries=100, user=0)


def test_not_private_and_no_seed():
    mech = PCH(k=10, bits=2, seed=1)
    assert mech.private is False and mech.randomized is False
    assert not hasattr(mech, "epsilon") and not hasattr(mech, "realized_epsilon")
    assert "epsilon" not in mech.to_dict()
    assert "NOT private" in PCH.__doc__
    with pytest.raises(TypeError, match="epsilon"):
        PCH(k=10, bits=2, seed=1, epsilon=1.0)
    with pytest.raises(TypeError, match="takes no seed"):
        mech.privatize([1, 2], seed=3)


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(k=10, bits=0, seed=1), ValueError, "bits"),
    (dict(k=10, bits=32, seed=1), ValueError, "bits"),
    (dict(k=10, bits=-1, seed=1), ValueError, "bits"),
    (dict(k=10, bits=2.0, seed=1), TypeError, "bits"),
    (dict(k=10, bits=True, seed=1), TypeError, "bits"),
    (dict(k=1, bits=3, seed=1), ValueError, "k"),
    (dict(k=2**32 + 1, bits=3, seed=1), ValueError, "k"),
    (dict(k=10, bits=3, seed=-1), ValueError, "seed"),
    (dict(k=10, bits=3, seed=2**256), ValueError, "seed"),
    (dict(k=10, bits=3, seed=None), TypeError, "seed"),
])
def test_bad_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        PCH(**kwargs)
    with pytest.raises(ValueError, match="invalid parameters|bits|k|seed"):
        ldpdist.from_dict({"mechanism": "PublicCoinHashing", **kwargs})


def test_user_indices_out_of_range_are_refused():
    mech = PCH(k=10, bits=31, seed=1)
    assert mech.max_users == 2**33
    assert mech.privatize([1, 2], first_user=2**33 - 2).size == 2
    with pytest.raises(ValueError, match="first_user"):
        mech.privatize([1, 2, 3], first_user=2**33 - 2)
    with pytest.raises(ValueError, match=r"users\[1\] = 8589934592"):
        mech.privatize([1, 2], users=[0, 2**33])
    with pytest.raises(ValueError, match=r"users\[0\] = -1"):
        mech.privatize([1, 2], users=[-1, 2])
    with pytest.raises(ValueError, match=r"distinct: users\[0\] = users\[2\] = 7"):
        mech.privatize([1, 2, 3], users=[7, 8, 7])
    with pytest.raises(ValueError, match="one index per value"):
        mech.privatize([1, 2, 3], users=[7, 8])
    with pytest.raises(ValueError, match="first_user"):
        mech.privatize([1, 2], first_user=-1)
    with pytest.raises(TypeError, match="users must be integers"):
        mech.privatize([1, 2], users=[1.0, 2.0])
    with pytest.raises(ValueError, match="either first_user or users"):
        mech.privatize([1, 2], first_user=5, users=[0, 1])
    with pytest.raises(ValueError, match=r"values\[1\] = 10"):
        mech.privatize([1, 10])


def test_malformed_reports_and_states_are_refused():
    mech = PCH(k=10, bits=3, seed=1)
    good = mech.privatize(np.arange(100) % 10)
    signed = good.astype(np.int64)
    signed[[4, 9]] = -5
    with pytest.raises(ValueError, match=r"reports\[4\] = -5"):
        mech.estimate(signed)
    agg = mech.aggregator().add(signed, on_invalid="drop")
    assert agg.n == 98 and agg.dropped == 2
    assert np.array_equal(agg.counts, mech.aggregator().add(np.delete(good, [4, 9])).counts)
    with pytest.raises(TypeError):
        mech.estimate(good.astype(np.float64))
    with pytest.raises(ValueError, match="one-dimensional"):
        mech.estimate(good.reshape(10, 10))
    # Smaller unsigned dtypes are reports too (user indices that fit).
    small = mech.privatize(np.arange(20) % 10).astype(np.uint16)
    assert np.array_equal(mech.aggregator().add(small).counts,
                          mech.aggregator().add(small.astype(np.uint64)).counts)
    # A forged state whose counts no aggregation can produce.
    state = mech.aggregator().add(good)
    for bad in ([1] * 20 + [200], [0] * 9 + [101] + [0] * 11, [0] * 19 + [60, 50]):
        forged = ldpdist.Aggregator._from_counts(mech, np.array(bad, np.uint64), 100)
        with pytest.raises(IntegrityError, match="corrupt aggregator"):
            ldpdist.Aggregator.from_bytes(forged.to_bytes())
    assert ldpdist.Aggregator.from_bytes(state.to_bytes()).n == 100


def test_reports_and_states_of_another_spec_are_refused(tmp_path):
    mech = PCH(k=30, bits=3, seed=1)
    values = np.arange(29).repeat(3)
    for other in (PCH(k=30, bits=3, seed=2), PCH(k=30, bits=4, seed=1), PCH(k=29, bits=3, seed=1)):
        path = tmp_path / "other.ldpr"
        ldpdist.write_reports(path, other, other.privatize(values))
        with pytest.raises(SpecMismatchError, match="holds reports of"):
            ldpdist.read_reports(path, expect=mech)
        with pytest.raises(SpecMismatchError, match="made under"):
            mech.aggregator().add(ldpdist.read_reports(path))
        with pytest.raises(SpecMismatchError, match="made under"):
            mech.aggregator().merge(other.aggregator().add(other.privatize(values)))


def test_two_stage_errors():
    mech = PCH(k=10, bits=3, seed=1)
    agg = mech.aggregator().add(mech.privatize(np.arange(100) % 10))
    for s in (0, 11, -1):
        with pytest.raises(ValueError, match="sparsity"):
            agg.estimate("two_stage", sparsity=s)
    assert agg.estimate("two_stage").shape == (10,)  # s from the noise-level rule
    only_even = mech.aggregator().add(mech.privatize([1, 2, 3], users=[0, 2, 4]))
    with pytest.raises(ValueError, match="stage 2 .odd user indices. has none"):
        only_even.estimate("two_stage", sparsity=2)
    only_odd = mech.aggregator().add(mech.privatize([1, 2, 3], users=[1, 3, 5]))
    with pytest.raises(ValueError, match="stage 1 .even user indices. has none"):
        only_odd.estimate("two_stage_project", sparsity=2)
    assert only_odd.estimate("project").shape == (10,)  # the pooled decoders need no stage


# -- estimators -------------------------------------------------------------------------------


def test_pooled_estimate_is_exactly_unbiased_over_the_family():
    """E[p̃] = the users' empirical distribution, exactly: on the 8-bit version of the
    family (all 2^16 (a, b)), the collision probability of two distinct keys is exactly
    2^-ℓ, so E[(M + N)(x)] = N_x + (n − N_x) 2^-ℓ; computed with fractions."""
    word, bits = 8, 3
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = a.ravel(), b.ravel()
    values = [0, 0, 3, 5, 5, 5, 9]
    k, n = 12, len(values)
    expected = [Fraction(0)] * k
    for v in values:
        hv = ((a * v + b) % 256) >> (word - bits)
        for x in range(k):
            hx = ((a * x + b) % 256) >> (word - bits)
            expected[x] += Fraction(int((hx == hv).sum()), 2**16)
    scale = 2**bits
    for x in range(k):
        estimate = (scale * expected[x] / n - 1) / (scale - 1)
        assert estimate == Fraction(values.count(x), n)
    # And the library's linear maps are the same algebra.
    mech = PCH(k=k, bits=bits, seed=0)
    p = np.bincount(values, minlength=k) / n
    freq = mech._expected_frequencies(p)
    np.testing.assert_allclose(freq * n, [float(e) for e in expected], rtol=1e-12)
    np.testing.assert_allclose(mech._core.estimate_from_frequencies(freq), p, atol=1e-12)


def test_pooled_and_two_stage_estimates_are_unbiased_with_the_exact_variance():
    """300 runs of n = 2000 users (disjoint user ranges): per value, the mean of the raw
    pooled estimate is within 5 standard errors of the users' frequencies, and its variance
    matches the exact (n − N_x)β(1 − β)/(n(1 − β))² (β = 2^-ℓ: per user and value, one
    collision indicator, independent across users) within the 200-run band."""
    k, bits, runs = 6, 2, 300
    mech = PCH(k=k, bits=bits, seed=11)
    true_counts = np.array([900, 500, 300, 200, 100, 0])
    values = np.repeat(np.arange(k), true_counts)
    n = values.size
    beta = 2.0 ** -bits
    raw, two = [], []
    for r in range(runs):
        agg = mech.aggregator().add(mech.privatize(values, first_user=r * n))
        raw.append(agg.estimate("raw"))
        two.append(agg.estimate("two_stage", sparsity=k // 2))  # T = everything: unbiased
    raw, two = np.array(raw), np.array(two)
    f = true_counts / n
    var = (n - true_counts) * beta * (1 - beta) / (n * (1 - beta)) ** 2
    z = np.abs(raw.mean(axis=0) - f) / np.sqrt(var / runs)
    assert z.max() < 5, z
    ratio = raw.var(axis=0, ddof=1) / var
    assert ((ratio > 0.55) & (ratio < 1.6)).all(), ratio
    # Two-stage with T = all values: stage 2 alone (the odd half, n2 = 1000 users, each value
    # sorted so that its users alternate stages), unbiased for the stage-2 frequencies.
    n2 = n // 2
    f2 = np.bincount(values[1::2], minlength=k) / n2
    var2 = (n2 - f2 * n2) * beta * (1 - beta) / (n2 * (1 - beta)) ** 2
    z2 = np.abs(two.mean(axis=0) - f2) / np.sqrt(var2 / runs)
    assert z2.max() < 5, z2


def test_two_stage_recovers_a_sparse_distribution():
    """k = 5000, s = 10, ℓ = 3, n = 4·10^5 (the paper's communication experiment): the
    two-stage estimate puts the support in T and beats the pooled projected estimate."""
    k, s, bits, n = 5000, 10, 3, 400_000
    rng = np.random.default_rng(5)
    support = rng.choice(k, size=s, replace=False)
    p = np.zeros(k)
    p[support] = 1 / s
    mech = PCH(k=k, bits=bits, seed=1)
    agg = mech.aggregator().add(mech.privatize(rng.choice(k, size=n, p=p)))
    two = agg.estimate("two_stage", sparsity=s)
    projected = agg.estimate("two_stage_project", sparsity=s)
    pooled = agg.estimate("project")
    assert set(support) <= set(np.flatnonzero(two))
    assert np.count_nonzero(two) <= 2 * s and np.count_nonzero(projected) <= s
    l1 = lambda q: np.abs(q - p).sum()  # noqa: E731
    assert l1(projected) < 0.15 and l1(two) < 0.2
    assert l1(projected) < l1(pooled)
    # Simulated at the same point: the same accuracy (ideal hashes).
    sim = mech.simulate(rng.multinomial(n, p), seed=3)
    assert l1(sim.estimate("two_stage_project", sparsity=s)) < 0.15


def test_two_stage_ties_go_to_the_lower_index():
    mech = PCH(k=6, bits=1, seed=1)
    counts = np.array([5, 9, 9, 1, 0, 9, 4, 4, 4, 4, 4, 2, 8], dtype=np.uint64)
    agg = ldpdist.Aggregator._from_counts(mech, counts, 20)
    # T = the top 2 by M = {1, 2} (5 ties with them and loses); p̂ = (2·4/8 − 1)/(2 − 1) = 0.
    est = agg.estimate("two_stage", sparsity=1)
    assert np.array_equal(est, np.zeros(6))
    est = agg.estimate("two_stage", sparsity=2)  # T = {0, 1, 2, 5}: x = 5 gets 2·2/8 − 1
    assert np.array_equal(est, [0, 0, 0, 0, 0, -0.5])


# -- simulate ---------------------------------------------------------------------------------


def test_simulate_agrees_with_privatize_in_mean_and_variance():
    """Per value, M(x) and N(x) from simulate (ideal hashes) and from privatize + aggregate
    (the multiply-add-shift family, users shuffled so that the stage split is random) both
    match the exact mean and variance of the ideal model: N1_x hypergeometric, then
    N1_x + Binomial(n1 − N1_x, β). Per value this marginal law is the same for a pairwise
    independent family (one collision indicator per user and value); only the joint law
    across values differs. 200 runs each; means within 5 standard errors, variances in the
    band of tests/simulation_law.py."""
    k, bits, runs = 5, 2, 200
    mech = PCH(k=k, bits=bits, seed=4)
    true_counts = np.array([400, 0, 250, 100, 51])
    n = int(true_counts.sum())
    n1, n2 = (n + 1) // 2, n // 2
    beta = 2.0 ** -bits
    rng = np.random.default_rng(0)
    values = np.repeat(np.arange(k), true_counts)
    sim = np.array([mech.simulate(true_counts, seed=r).counts for r in range(runs)], float)
    direct = np.array([mech.aggregator().add(mech.privatize(rng.permutation(values),
                                                            first_user=2 * r * n)).counts
                       for r in range(runs)], float)
    c = true_counts.astype(float)
    mean, var = [], []
    for stage, size in ((1, n1), (2, n2)):
        e_split = c * size / n
        v_split = c * (size / n) * ((n - size) / n) * (n - c) / (n - 1)
        mean.append(e_split + (size - e_split) * beta)
        var.append(v_split * (1 - beta) ** 2 + (size - e_split) * beta * (1 - beta))
    mean, var = np.concatenate(mean), np.concatenate(var)
    for label, sample in (("simulate", sim), ("privatize", direct)):
        assert (sample[:, -1] == n2).all()
        z = np.abs(sample[:, :-1].mean(axis=0) - mean) / np.sqrt(var / runs)
        assert z.max() < 5, (label, z)
        ratio = sample[:, :-1].var(axis=0, ddof=1) / var
        assert ((ratio > 0.55) & (ratio < 1.6)).all(), (label, ratio)


def test_simulate_costs_nothing_per_user_up_to_its_limit():
    mech = PCH(k=5000, bits=3, seed=1)
    counts = np.full(5000, 2**36 // 5000, dtype=np.uint64)
    agg = mech.simulate(counts, seed=1)
    n = int(counts.sum())
    assert agg.n == n and int(agg.counts[-1]) == n // 2
    assert np.isfinite(agg.estimate("two_stage", sparsity=10)).all()
    np.testing.assert_array_equal(mech.simulate(counts, seed=1).counts, agg.counts)
    counts[0] += 2**36 - n + 1
    with pytest.raises(ValueError, match="2\\^36"):
        mech.simulate(counts, seed=1)


# -- determinism, limits ----------------------------------------------------------------------


def test_aggregate_and_simulate_are_bit_identical_at_1_and_2_threads():
    from conftest import run_python

    code = """
import numpy as np, ldpdist
m = ldpdist.PublicCoinHashing(k=3000, bits=4, seed=5)
v = np.random.default_rng(0).integers(0, 3000, size=100_000)
a = m.aggregator().add(m.privatize(v, first_user=7))
print(digest(a.counts), digest(m.simulate(np.bincount(v, minlength=3000), seed=2).counts),
      digest(a.estimate("two_stage_project", sparsity=30)), digest(a.estimate("ibu", max_iter=30)))
"""
    runs = {t: run_python(code, env={"RAYON_NUM_THREADS": str(t)}, timeout=300) for t in (1, 2)}
    assert runs[1] == runs[2]


def test_oversized_statistic_is_refused_before_allocating():
    mech = PCH(k=2**32, bits=3, seed=1)  # 2k + 1 counts: 64 GiB
    with pytest.raises(MemoryError, match="budget"):
        mech.aggregator()
    with pytest.raises(ValueError, match="length"):
        mech._core.estimate_raw(np.zeros(5, dtype=np.uint64), 1)


# -- command line -----------------------------------------------------------------------------


def run_cli(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_flow_matches_the_api(tmp_path, capsys):
    status, _, err = run_cli(capsys, "spec", "pch", "--k", 50, "--bits", 3, "--seed", 9,
                             "-o", tmp_path / "spec.json")
    assert status == 0, err
    mech = ldpdist.from_dict(json.loads((tmp_path / "spec.json").read_text()))
    assert mech == PCH(k=50, bits=3, seed=9)
    rng = np.random.default_rng(1)
    v1, v2 = rng.integers(0, 5, 3000), rng.integers(0, 5, 2000)
    np.save(tmp_path / "v1.npy", v1)
    (tmp_path / "v2.txt").write_text("\n".join(map(str, v2)) + "\n")
    for name, first in (("v1.npy", 0), ("v2.txt", 3000)):
        status, _, err = run_cli(capsys, "privatize", "--spec", tmp_path / "spec.json",
                                 tmp_path / name, "--first-user", first,
                                 "-o", tmp_path / f"{name}.ldpr")
        assert status == 0, err
    status, _, err = run_cli(capsys, "aggregate", "--spec", tmp_path / "spec.json",
                             tmp_path / "v1.npy.ldpr", tmp_path / "v2.txt.ldpr",
                             "-o", tmp_path / "all.ldps")
    assert status == 0, err
    status, out, err = run_cli(capsys, "estimate", "--spec", tmp_path / "spec.json",
                               tmp_path / "all.ldps", "--decoder", "two_stage_project",
                               "--sparsity", 5)
    assert status == 0, err
    got = np.array([float(line.split(",")[1]) for line in out.splitlines()[1:]])
    api = mech.aggregator().add(mech.privatize(v1)).add(mech.privatize(v2, first_user=3000))
    assert np.array_equal(got, api.estimate("two_stage_project", sparsity=5))
    state = ldpdist.Aggregator.from_bytes((tmp_path / "all.ldps").read_bytes())
    assert np.array_equal(state.counts, api.counts)


@pytest.mark.parametrize("argv, match", [
    (["spec", "pch", "--k", 50, "--bits", 3, "--seed", 9, "--epsilon", 1],
     "--epsilon does not apply to PublicCoinHashing"),
    (["spec", "pch", "--k", 50, "--seed", 9], "needs --bits"),
    (["spec", "pch", "--k", 50, "--bits", 3], "needs --seed"),
    (["spec", "pch", "--k", 50, "--bits", 40, "--seed", 1], "bits"),
    (["spec", "hr", "--k", 50, "--epsilon", 1, "--bits", 3], "--bits does not apply"),
    (["spec", "hr", "--k", 50], "needs --epsilon"),
])
def test_cli_spec_errors(capsys, argv, match):
    status, _, err = run_cli(capsys, *argv)
    assert status == 2 and len(err.splitlines()) == 1 and match in err, err


def test_cli_privatize_refuses_a_private_seed_and_first_user_elsewhere(tmp_path, capsys):
    (tmp_path / "v.txt").write_text("1\n2\n")
    run_cli(capsys, "spec", "pch", "--k", 5, "--bits", 2, "--seed", 1, "-o", tmp_path / "p.json")
    run_cli(capsys, "spec", "rr", "--k", 5, "--epsilon", 1, "-o", tmp_path / "r.json")
    status, _, err = run_cli(capsys, "privatize", "--spec", tmp_path / "p.json", tmp_path / "v.txt",
                             "--seed", 3, "-o", tmp_path / "x.ldpr")
    assert status == 2 and "--seed does not apply" in err and "--first-user" in err, err
    status, _, err = run_cli(capsys, "privatize", "--spec", tmp_path / "r.json", tmp_path / "v.txt",
                             "--first-user", 3, "-o", tmp_path / "x.ldpr")
    assert status == 2 and "--first-user applies only" in err, err
    assert not (tmp_path / "x.ldpr").exists()


def test_cli_simulate(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    status, _, err = run_cli(capsys, "simulate", "--mechanism", "pch", "--bits", 3,
                             "--dist", "unif:4", "--k", 200, "--n", "2000,20000", "--runs", 1,
                             "--decoder", "two_stage,project", "--sparsity", 4,
                             "--out", tmp_path)
    assert status == 0, err
    rows = ldpdist.experiments.read_csv(str(tmp_path / "simulate.csv"))
    assert {r["decoder"] for r in rows} == {"two_stage", "project"}
    assert all(r["mechanism"].startswith("PCH ℓ=") and r["epsilon"] == "" for r in rows)
    status, _, err = run_cli(capsys, "simulate", "--mechanism", "pch", "--dist", "unif:4",
                             "--k", 200, "--n", 100, "--out", tmp_path)
    assert status == 2 and "--bits" in err, err
    status, _, err = run_cli(capsys, "simulate", "--mechanism", "pch", "--bits", 3,
                             "--epsilon", 1, "--dist", "unif:4", "--k", 200, "--n", 100,
                             "--out", tmp_path)
    assert status == 2 and "--epsilon" in err, err


def test_estimator_variance_is_the_oracle_variance_over_values_and_coins():
    """n users drawn i.i.d. from p, fresh user indices each run: the raw estimate's per-value
    variance over 400 runs matches ``estimator_variance`` (the frequency oracle
    (1, 2^-ℓ) over the values and the public coin) within ±30% per value (about 4 standard
    errors of a 400-run variance) and ±12% in total."""
    k, bits, n, runs = 6, 2, 1000, 400
    mech = PCH(k=k, bits=bits, seed=5)
    assert mech._frequency_oracle() == (1.0, 0.25)
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.1, 0.0])
    rng = np.random.default_rng(8)
    raw = np.array([mech.aggregator().add(mech.privatize(rng.choice(k, size=n, p=p),
                                                         first_user=r * n)).estimate("raw")
                    for r in range(runs)])
    expected = mech.estimator_variance(p, n)
    ratio = raw.var(axis=0, ddof=1) / expected
    assert ((ratio > 0.7) & (ratio < 1.3)).all(), ratio
    assert abs(raw.var(axis=0, ddof=1).sum() / expected.sum() - 1) < 0.12
    # Law of total variance: the fixed-count variance (previous test) averaged over the
    # multinomial counts, plus the variance of the empirical frequencies.
    beta = 2.0 ** -bits
    total = ((1 - p) * beta * (1 - beta) / (n * (1 - beta) ** 2) + p * (1 - p) / n)
    np.testing.assert_allclose(expected, total, rtol=1e-12)
