"""Compressive privatization with the structured Hadamard matrix (``matrix="hadamard"``):
the normative structure against a pure-Python reimplementation, balance and exact privacy,
exact products, client/batch agreement, exact simulation, OMP on the operator against OMP on
the explicit matrix, memory and bad input. The shared compressive tests
(tests/test_compressive.py) run on this kind too."""

from __future__ import annotations

import math

import numpy as np
import pytest

import chacha_reference as ref
import ldpdist
from ldpdist import CompressivePrivatization as CP
from ldpdist import kernels
from simulation_law import assert_simulate_is_exact_in_law

STRUCTURE_STREAM = 2**64 - 1
MASK64 = 2**64 - 1


def reference_structure(seed, k, m):
    """Rows, slots and the balanced matrix as rust/mechanisms/hadamard_compressive.rs
    specifies them, from the ChaCha20 reference."""
    key = seed.to_bytes(32, "little")
    rng = ref.WordStream(key, STRUCTURE_STREAM)
    keys = [(rng.next_u64(), rng.next_u64()) for _ in range(4)]
    order = 1 << (k.bit_length())  # 2^ceil(log2(k + 1))
    pool = order - 1
    moved, rows = {}, []
    for t in range(m):
        j = t + ref.uniform_below(rng, pool - t)
        at_j, at_t = moved.get(j, j), moved.get(t, t)
        moved[j] = at_t
        rows.append(1 + at_j)
    bits = max(1, (k - 1).bit_length())
    mask, shift = (1 << bits) - 1, (bits + 1) // 2

    def mix(v):
        for add, mul in keys:
            v = (v + (add & mask)) & mask
            v = (v * ((mul | 1) & mask)) & mask
            v ^= v >> shift
        return v

    def slot(x):
        v = mix(x)
        while v >= k:
            v = mix(v)
        return v

    slots = np.array([slot(x) for x in range(k)])
    raw = np.array([[1 - 2 * (bin(r & (s + 1)).count("1") & 1) for s in slots] for r in rows])
    A = raw.copy()
    for x in range(k):
        column = A[:, x]
        excess = int((column == 1).sum()) - m // 2
        if excess:
            majority = 1 if excess > 0 else -1
            column[np.flatnonzero(column == majority)[:abs(excess)]] = -majority
    return np.array(rows, dtype=np.uint64), slots, order, A


@pytest.mark.parametrize("k,m,seed",
                         [(3, 2, 0), (40, 12, 3), (300, 40, 5), (1025, 64, 2**200 + 7)])
def test_structure_matches_the_normative_reference(k, m, seed):
    mech = CP(k, 0.7, m, seed=seed, matrix="hadamard")
    rows, slots, order, A = reference_structure(seed, k, m)
    assert mech._core.order == order
    np.testing.assert_array_equal(mech._core.hadamard_rows(), rows)
    np.testing.assert_array_equal(mech._core.slots(), slots)
    assert len(set(rows.tolist())) == m and rows.min() >= 1 and rows.max() < order
    assert sorted(slots.tolist()) == list(range(k))
    for x in range(k):
        np.testing.assert_array_equal(mech.column(x), A[:, x])
    assert ((A == 1).sum(axis=0) == m // 2).all()


def test_reports_match_the_reference_sampler():
    """privatize's reports word by word: Bernoulli(ρ) on the ChaCha12 stream of chunk 0, then
    uniform rows until the column has the wanted sign."""
    k, m, seed = 300, 40, 5
    mech = CP(k, 0.9, m, seed=seed, matrix="hadamard")
    _, _, _, A = reference_structure(seed, k, m)
    a, _ = mech._core.probabilities()
    rho = a * (m // 2)
    values = np.arange(200, dtype=np.uint32) * 7 % k
    reports = mech.privatize(values, seed=11)
    rng = ref.WordStream((11).to_bytes(32, "little"), 0, rounds=12)
    for x, report in zip(values, reports):
        inside = ref.bernoulli(rng, rho)
        while True:
            y = ref.uniform_below(rng, m)
            if (A[y, x] == 1) == inside:
                break
        assert y == report


def test_channel_is_exactly_epsilon_and_the_products_are_exact():
    mech = CP(k=300, epsilon=0.9, m=40, seed=5, matrix="hadamard")
    Q = mech.channel_matrix()
    assert mech.realized_epsilon == pytest.approx(0.9, abs=1e-12)
    assert mech.realized_epsilon <= 0.9
    assert np.log(Q.max(axis=0) / Q.min(axis=0)).max() == pytest.approx(mech.realized_epsilon,
                                                                     abs=1e-12)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, atol=1e-12)
    assert mech.internal_epsilon == 0.9 and mech.regime_used == "high"
    p = np.random.default_rng(0).dirichlet(np.ones(300))
    w = np.random.default_rng(1).normal(size=40)
    np.testing.assert_allclose(mech._expected_frequencies(p), Q.T @ p, atol=1e-15)
    np.testing.assert_allclose(mech._core.channel_apply(w), Q @ w, atol=1e-14)


def test_client_batch_and_table_paths_agree():
    """A client's report (its own column, O(m)) equals the batch's for the same stream, and a
    batch's reports do not depend on whether the server's balance table was built."""
    k, m = 5000, 200
    values = (np.arange(3000, dtype=np.uint32) * 37) % k
    fresh = CP(k, 0.5, m, seed=9, matrix="hadamard")
    before = fresh.privatize(values[:50], seed=4)
    assert not fresh._core.table_built
    fresh.privatize(np.zeros(200_000, dtype=np.uint32), seed=1)  # large: builds the table
    assert fresh._core.table_built
    np.testing.assert_array_equal(fresh.privatize(values[:50], seed=4), before)
    key = (4).to_bytes(32, "little")
    assert fresh._core.privatize_one(int(values[0]), key) == before[0]
    other = CP(k, 0.5, m, seed=9, matrix="hadamard")
    counts = np.bincount(values, minlength=k)
    np.testing.assert_array_equal(other.simulate(counts, seed=3).counts,
                                  fresh.simulate(counts, seed=3).counts)
    Q = other.channel_matrix()  # without the table (k·m small: columns computed)
    np.testing.assert_array_equal(Q, fresh.channel_matrix())


def test_sampler_matches_the_channel():
    mech = CP(k=300, epsilon=0.8, m=10, seed=5, matrix="hadamard")
    Q = mech.channel_matrix()
    draws = 200_000
    for x in (0, 299):
        observed = np.bincount(mech.privatize(np.full(draws, x), seed=x), minlength=10)
        chi2 = ((observed - draws * Q[x]) ** 2 / (draws * Q[x])).sum()
        assert chi2 < 27.88  # df 9, p = 0.001


def test_simulate_is_exact_in_law():
    mech = CP(k=12, epsilon=0.8, m=6, seed=3, matrix="hadamard")
    assert_simulate_is_exact_in_law(mech, [5, 0, 40_000, 7, 1, 0, 300, 9, 50_000, 2, 0, 1])


def test_omp_on_the_operator_against_omp_on_the_explicit_matrix():
    """The FWHT ranks the columns of the unbalanced matrix and the 16 best are rescored
    exactly. Without noise (and with a clear margin) OMP picks exactly the atoms it picks on
    the explicit balanced matrix; in the noise-level tail of a noisy run the flips (about
    0.4·√m entries per column) can hide the exact best of a near-tie from the 16: the runs
    then differ in one atom and not in accuracy."""
    k, m = 4000, 300
    same, errors = 0, {"operator": [], "explicit": []}
    for run in range(6):
        mech = CP(k, 0.5, m, seed=100 + run, matrix="hadamard")
        A = np.stack([mech.column(x) for x in range(k)], axis=1).astype(np.float64)
        a, b = mech._core.probabilities()
        rng = np.random.default_rng(run)
        p = np.zeros(k)
        p[rng.choice(k, 8, replace=False)] = rng.dirichlet(np.ones(8))
        freq = mech._expected_frequencies(p)
        exact = mech.recover(freq * 1e15, 10**15, sparsity=8)
        explicit = kernels.omp_details(A, freq, 8, intercept=True)
        assert exact.support == explicit.support
        np.testing.assert_allclose(exact.raw, 2 * explicit.coef / (a - b), atol=1e-9)
        np.testing.assert_allclose(exact.raw, p, atol=1e-9)
        aggregate = mech.simulate(rng.multinomial(50_000 * (run + 1), p), seed=run)
        rec = mech.recover(aggregate.counts, aggregate.n, sparsity=8)
        explicit = kernels.omp_details(A, aggregate.counts / aggregate.n, 8, intercept=True)
        same += rec.support == explicit.support
        errors["operator"].append(np.abs(kernels.project_simplex(rec.raw) - p).sum())
        errors["explicit"].append(np.abs(kernels.project_simplex(
            2 * explicit.coef / (a - b)) - p).sum())
    assert same >= 5
    assert np.mean(errors["operator"]) <= 1.1 * np.mean(errors["explicit"])


def test_large_domains_need_no_matrix():
    """k = 2^32: construction and a client's report are O(m); the server's estimate needs a
    transform of length 2^33 and is refused by the memory guard, not attempted."""
    mech = CP(2**32, 1.0, 1000, seed=1, matrix="hadamard")
    assert mech._core.order == 2**33
    reports = mech.privatize(np.array([0, 2**32 - 1, 12345], dtype=np.uint32), seed=2)
    assert reports.max() < 1000
    assert len(mech.column(2**32 - 1)) == 1000
    ldpdist.set_memory_limit("1G")
    try:
        with pytest.raises(MemoryError, match="budget"):
            mech.aggregator().add(reports).estimate("raw", sparsity=3)
    finally:
        ldpdist.set_memory_limit(None)


def test_recovers_a_sparse_distribution_at_a_large_k():
    k, m = 2**20, 1024
    mech = CP(k, 1.0, m, seed=4, matrix="hadamard")
    p = np.zeros(k)
    p[[3, 77_777, 2**20 - 1, 500_000]] = [0.4, 0.3, 0.2, 0.1]
    est = mech.simulate(np.random.default_rng(0).multinomial(2_000_000, p),
                        seed=5).estimate("project", sparsity=4)
    assert np.abs(est - p).sum() < 0.05


def test_bad_parameters():
    with pytest.raises(ValueError, match="m must be even"):
        CP(100, 0.5, 11, seed=1, matrix="hadamard")
    with pytest.raises(ValueError, match="high-privacy construction only"):
        CP(100, 0.5, 10, seed=1, matrix="hadamard", regime="medium")
    with pytest.raises(ValueError, match=r"\[2, k − 1\]|m = 100 ≥ k|m ="):
        CP(100, 0.5, 100, seed=1, matrix="hadamard")
    mech = CP(100, 2.0, 10, seed=1, matrix="hadamard")  # any ε: high privacy
    assert mech.regime_used == "high" and math.isclose(mech.realized_epsilon, 2.0)
    with pytest.raises(ValueError, match="never stored"):
        mech.sign_matrix()
    with pytest.raises(ValueError, match="model='exact'"):
        mech.recover(np.ones(10), 10, sparsity=2, model="paper")
    with pytest.raises(ValueError):
        mech.column(100)
    spec = mech.to_dict()
    assert spec["matrix"] == "hadamard"
    again = ldpdist.from_dict(spec)
    np.testing.assert_array_equal(again.privatize(np.arange(100) % 100, seed=3),
                                  mech.privatize(np.arange(100) % 100, seed=3))


@pytest.mark.parametrize("dist", ["unif:10", "geo:0.8"])
def test_accuracy_within_1_2x_of_the_balanced_dense_matrix(dist):
    """The same users through both matrices at the paper's setting (k = 10^4, m = 500,
    ε = 0.5, n = 10^6): mean l1 error within 1.2× (measured 1.00 and 1.01 over 100 runs:
    benches/structured_cp_accuracy.py)."""
    from ldpdist.experiments.distributions import make_distribution, support_for_mass

    k, m, n = 10_000, 500, 1_000_000
    errors = {"balanced": [], "hadamard": []}
    for run in range(8):
        rng = np.random.default_rng([42, run])
        p = make_distribution(dist, k, rng)
        s = 10 if dist == "unif:10" else support_for_mass(p, 0.99)
        counts = rng.multinomial(n, p)
        for matrix in errors:
            mech = CP(k, 0.5, m, seed=1000 + run, matrix=matrix)
            est = mech.simulate(counts, seed=run).estimate("project", sparsity=s)
            errors[matrix].append(np.abs(est - p).sum())
    assert np.mean(errors["hadamard"]) <= 1.2 * np.mean(errors["balanced"])
