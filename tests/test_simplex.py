"""Euclidean projections onto the probability simplex and the s-sparse simplex."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ldpdist import kernels as K


def reference_projection(v) -> np.ndarray:
    """Plain sort-based rule (Held et al. 1974; Duchi et al. 2008), on values shifted by the
    maximum so that huge magnitudes cannot overflow the cumulative sums."""
    v = np.asarray(v, dtype=np.float64)
    u = v - v.max()
    s = np.sort(u)[::-1]
    css = np.cumsum(s)
    rho = np.nonzero(s * np.arange(1, s.size + 1) > css - 1.0)[0][-1]
    theta = (css[rho] - 1.0) / (rho + 1)
    return np.maximum(u - theta, 0.0)


def assert_kkt(v, p, atol=1e-12):
    """sum 1, p >= 0, and p = max(v - θ, 0) for one θ (in coordinates shifted by max v)."""
    v = np.asarray(v, dtype=np.float64)
    assert p.shape == v.shape and p.dtype == np.float64
    assert np.all(np.isfinite(p))
    assert (p >= 0).all()
    assert abs(p.sum() - 1.0) <= 1e-9, p.sum()
    u = v - v.max()
    support = p > 0
    assert support.any()
    theta = u[support] - p[support]
    # p_i > 0 ⇒ u_i − p_i = θ (one common value); p_i = 0 ⇒ u_i ≤ θ. In shifted coordinates
    # θ lies in (−1, 0], so an absolute tolerance is the right one.
    t = float(np.median(theta))
    assert -1.0 - atol < t <= atol, t
    assert np.all(np.abs(theta - t) <= atol), np.abs(theta - t).max()
    assert np.all(u[~support] <= t + atol)


def check(v, atol=1e-12):
    v = np.asarray(v, dtype=np.float64)
    p = K.project_simplex(v)
    assert_kkt(v, p)
    np.testing.assert_allclose(p, reference_projection(v), rtol=0, atol=atol)
    return p


# --------------------------------------------------------------------------------------
# project_simplex


@pytest.mark.parametrize("k, scale", [(1, 1.0), (2, 0.1), (3, 1.0), (10, 3.0), (100, 0.01),
                                      (1000, 100.0), (1000, 1e-3), (5000, 1.0),
                                      (70_000, 1e-3), (200_000, 10.0)])
def test_random_inputs(k, scale):
    rng = np.random.default_rng(k)
    check(rng.standard_normal(k) * scale)
    check(rng.uniform(-1, 1, k) * scale + 1e6)  # large common offset


def test_special_values():
    np.testing.assert_array_equal(K.project_simplex([5.0]), [1.0])
    np.testing.assert_array_equal(K.project_simplex([-1e300]), [1.0])
    np.testing.assert_array_equal(K.project_simplex([-3.0, -5.0]), [1.0, 0.0])
    np.testing.assert_array_equal(K.project_simplex([0.25] * 4), [0.25] * 4)
    np.testing.assert_array_equal(K.project_simplex([2.0, 2.0]), [0.5, 0.5])
    np.testing.assert_array_equal(K.project_simplex([0.0, 0.0, 0.0, 0.0]), [0.25] * 4)
    # Already on the simplex: unchanged.
    q = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(K.project_simplex(q), q, rtol=0, atol=1e-15)
    # A lone maximum more than 1 above the rest takes everything.
    np.testing.assert_array_equal(K.project_simplex([0.0, 3.0, 1.9, -2.0]), [0, 1, 0, 0])


def test_ties():
    check([1.0, 1.0, 1.0, 0.0])
    check([3.0, 3.0, 3.0, 3.0, 2.5, 2.5])
    check(np.repeat(np.random.default_rng(1).standard_normal(50), 20))
    # A value exactly at the threshold: v = [1, 1, 0] → θ = 0.5 ... and [1, 0.5, 0.5]:
    p = check([1.0, 0.5, 0.5])
    np.testing.assert_allclose(p, [2 / 3, 1 / 6, 1 / 6], rtol=0, atol=1e-15)
    p = check([2.0, 1.0, 1.0])  # θ = 1 exactly: the ties sit on the boundary
    np.testing.assert_allclose(p, [1.0, 0.0, 0.0], rtol=0, atol=1e-15)


def test_all_negative():
    rng = np.random.default_rng(2)
    for _ in range(5):
        check(-np.abs(rng.standard_normal(100)) - 50.0)
    check(np.full(10, -7.0))


def test_huge_magnitudes():
    np.testing.assert_array_equal(K.project_simplex([1e300, -1e300, 1e300 - 1e285]), [1, 0, 0])
    np.testing.assert_array_equal(K.project_simplex([1e300, 1e300]), [0.5, 0.5])
    np.testing.assert_array_equal(K.project_simplex([-1e300, 1e300, 1e300, -1e300]),
                                  [0, 0.5, 0.5, 0])
    np.testing.assert_array_equal(K.project_simplex([1.7e308, -1.7e308]), [1.0, 0.0])
    np.testing.assert_array_equal(K.project_simplex(np.full(7, 1e300)), np.full(7, 1 / 7))
    rng = np.random.default_rng(3)
    for k in (10, 1000, 100_000):
        v = rng.standard_normal(k) * 1e300
        p = check(v)
        assert p[np.argmax(v)] == 1.0
    # Huge common offset, small spread that is still representable (ulp(1e15) = 0.125).
    v = 1e15 + np.arange(8) * 0.25
    check(v)


def test_tiny_magnitudes():
    rng = np.random.default_rng(4)
    v = rng.standard_normal(1000) * 1e-300
    p = check(v)
    np.testing.assert_allclose(p, np.full(1000, 1e-3), rtol=1e-12)


def test_large_noisy_near_uniform():
    rng = np.random.default_rng(5)
    k = 10**6
    for noise in (1e-9, 1e-7, 1e-6):
        v = 5.0 + rng.standard_normal(k) * noise
        p = check(v, atol=1e-13)
        support = int((p > 0).sum())
        assert 0 < support <= k


def test_large_geometric_sequences():
    k = 10**6
    # Ratio close to 1: the support (~1400 entries) shrinks slowly under Michelot passes.
    v = (1 - 1e-6) ** np.arange(k, dtype=np.float64)
    p = check(v)
    assert 1000 < int((p > 0).sum()) < 2000
    # Shuffled, and a fast-decaying one.
    perm = np.random.default_rng(6).permutation(k)
    check(v[perm])
    check(0.9 ** np.arange(k, dtype=np.float64))
    check(-(0.999 ** np.arange(k, dtype=np.float64)))


def family_input(family: str, k: int) -> np.ndarray:
    """The input families the performance table times (benches/kernels_vs_peers.py) and the
    hard cases."""
    rng = np.random.default_rng(k)
    n = rng.standard_normal(k)
    if family == "uniform":
        return rng.uniform(0.0, 1.0, k)
    if family == "gaussian":
        return n
    if family == "near-uniform":  # full support: about 82 % of the entries
        return 1.0 / k + n / k
    if family == "few large":
        v = 1e-3 * n
        v[rng.choice(k, min(k, 10), replace=False)] = rng.uniform(1.0, 2.0, min(k, 10))
        return v
    if family == "all equal":
        return np.full(k, 0.3)
    if family == "exact ties":
        return (np.arange(k) * 7919 % 13) / 13.0
    if family == "counts / n":  # quantized: many ties at the threshold
        return np.maximum(np.round(3.0 * n + 20.0), 0.0) / (20.0 * k)
    if family == "huge":
        return n * 1e300
    if family == "negative":
        return -50.0 - np.abs(n)
    if family == "subnormal":
        return n * 1e-310
    raise ValueError(family)


FAMILIES = ("uniform", "gaussian", "near-uniform", "few large", "all equal", "exact ties",
            "counts / n", "huge", "negative", "subnormal")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("k", [1, 2, 7, 1000, 16_387, 50_000, 300_001])
def test_input_families(family, k):
    # 16_387 and 50_000: several chunks on one thread; 300_001: the parallel path.
    check(family_input(family, k))


def test_output_is_a_new_array_and_input_untouched():
    v = np.array([0.3, 0.9, -0.2])
    before = v.copy()
    p = K.project_simplex(v)
    np.testing.assert_array_equal(v, before)
    assert p is not v
    # Lists and strided views are accepted.
    np.testing.assert_array_equal(K.project_simplex([0.3, 0.9, -0.2]), p)
    np.testing.assert_array_equal(K.project_simplex(np.repeat(v, 2)[::2]), p)


@pytest.mark.parametrize("k", [1, 5, 100_000])
def test_non_finite_and_empty_inputs(k):
    for bad in (np.nan, np.inf, -np.inf):
        v = np.zeros(k)
        v[k // 2] = bad
        with pytest.raises(ValueError, match=f"finite.*element {k // 2}"):
            K.project_simplex(v)
        with pytest.raises(ValueError, match="finite"):
            K.project_sparse_simplex(v, 1)


def test_bad_inputs():
    with pytest.raises(ValueError, match="empty"):
        K.project_simplex(np.array([]))
    with pytest.raises(ValueError, match="empty"):
        K.project_simplex([])
    with pytest.raises(ValueError, match="one-dimensional"):
        K.project_simplex(np.ones((2, 2)))
    with pytest.raises(TypeError, match="float64"):
        K.project_simplex(np.arange(3))
    with pytest.raises(TypeError, match="float64"):
        K.project_simplex(np.ones(3, dtype=np.float32))
    with pytest.raises(TypeError):
        K.project_simplex(["a", "b"])


# --------------------------------------------------------------------------------------
# project_sparse_simplex


def exhaustive_sparse(v: np.ndarray, s: int):
    """Best distance and minimizer over every support of size s (smaller supports are
    faces of these)."""
    best, best_q = np.inf, None
    for support in itertools.combinations(range(v.size), s):
        idx = list(support)
        q = np.zeros(v.size)
        q[idx] = reference_projection(v[idx])
        d = float(((v - q) ** 2).sum())
        if d < best - 1e-15:
            best, best_q = d, q
    return best, best_q


@pytest.mark.parametrize("k", range(1, 9))
def test_sparse_projection_equals_exhaustive_search(k):
    rng = np.random.default_rng(1000 + k)
    for trial in range(6):
        v = rng.standard_normal(k) * (0.2 if trial % 2 else 2.0)
        for s in range(1, k + 1):
            p = K.project_sparse_simplex(v, s)
            assert p.shape == (k,) and p.dtype == np.float64
            assert int((p > 0).sum()) <= s
            assert abs(p.sum() - 1.0) < 1e-12 and (p >= 0).all()
            best, q = exhaustive_sparse(v, s)
            d = float(((v - p) ** 2).sum())
            assert d <= best + 1e-12, (v, s, d, best)
            np.testing.assert_allclose(p, q, rtol=0, atol=1e-12)


def test_sparse_with_s_equal_k_is_the_full_projection():
    v = np.random.default_rng(8).standard_normal(300)
    np.testing.assert_allclose(K.project_sparse_simplex(v, 300), K.project_simplex(v),
                               rtol=0, atol=1e-15)


def test_sparse_ties_go_to_the_lowest_index():
    np.testing.assert_allclose(K.project_sparse_simplex([1.0, 3.0, 3.0, 3.0, 0.0], 2),
                               [0, 0.5, 0.5, 0, 0], atol=1e-15)
    np.testing.assert_allclose(K.project_sparse_simplex([0.0] * 5, 2), [0.5, 0.5, 0, 0, 0],
                               atol=1e-15)
    np.testing.assert_allclose(K.project_sparse_simplex([1.0, 1.0, 1.0], 2), [0.5, 0.5, 0],
                               atol=1e-15)
    np.testing.assert_allclose(K.project_sparse_simplex([-2.0, 5.0, -2.0, -2.0], 3),
                               [0, 1, 0, 0], atol=1e-15)
    np.testing.assert_allclose(K.project_sparse_simplex([0.2, 0.7, 0.7, 0.1], 1),
                               [0, 1, 0, 0], atol=1e-15)
    # Large input with many ties: keeps the lowest indices among equal values.
    v = np.full(10_000, 0.5)
    v[[5000, 7000]] = 0.6
    p = K.project_sparse_simplex(v, 4)
    assert np.nonzero(p)[0].tolist() == [0, 1, 5000, 7000]
    np.testing.assert_allclose(p[[0, 1, 5000, 7000]], [0.2, 0.2, 0.3, 0.3], atol=1e-15)
    p = K.project_sparse_simplex(np.full(100_000, -3.0), 5)
    assert np.nonzero(p)[0].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(p[:5], 0.2, atol=1e-15)


def test_sparse_large_input_keeps_the_s_largest():
    rng = np.random.default_rng(12)
    v = rng.standard_normal(200_000)
    s = 50
    p = K.project_sparse_simplex(v, s)
    top = np.sort(np.argsort(-v, kind="stable")[:s])
    assert set(np.nonzero(p)[0]) <= set(top.tolist())
    q = np.zeros_like(v)
    q[top] = reference_projection(v[top])
    np.testing.assert_allclose(p, q, rtol=0, atol=1e-12)


def test_sparse_bad_s():
    v = np.array([0.5, 0.2, 0.1])
    for s in (0, 4, -1, 10**20):
        with pytest.raises(ValueError, match="s must be"):
            K.project_sparse_simplex(v, s)
    for s in (1.0, True, None, "2"):
        with pytest.raises(TypeError, match="s must be an integer"):
            K.project_sparse_simplex(v, s)
    with pytest.raises(ValueError):
        K.project_sparse_simplex(np.array([]), 1)
    with pytest.raises(TypeError):
        K.project_sparse_simplex(np.arange(3), 1)
    np.testing.assert_allclose(K.project_sparse_simplex(v, np.int64(1)), [1, 0, 0])
