"""Walsh–Hadamard transform: fwht, fwht_inplace, fwht_int against the Sylvester matrix."""

from __future__ import annotations

import numpy as np
import pytest

from ldpdist import kernels as K


def sylvester(n: int) -> np.ndarray:
    """H_n by Kronecker products, int8: H_{2n} = [[H, H], [H, -H]]."""
    h = np.ones((1, 1), dtype=np.int8)
    h2 = np.array([[1, 1], [1, -1]], dtype=np.int8)
    while h.shape[0] < n:
        h = np.kron(h2, h)
    return h


def test_kronecker_matrix_follows_the_popcount_convention():
    # H[r, c] = (-1)**popcount(r & c), checked entry by entry up to n = 1024, so that the
    # Kronecker construction used below is itself pinned to the documented convention.
    for j in range(11):
        n = 1 << j
        idx = np.arange(n, dtype=np.uint64)
        parity = np.bitwise_count(idx[:, None] & idx[None, :]) & 1
        want = (1 - 2 * parity.astype(np.int64)).astype(np.int8)
        np.testing.assert_array_equal(sylvester(n), want)


def dense_product(x: np.ndarray) -> np.ndarray:
    """H @ x in row blocks (float64; exact on small-integer inputs)."""
    n = x.size
    h = sylvester(n)
    out = np.empty(n)
    for start in range(0, n, 512):
        out[start:start + 512] = h[start:start + 512].astype(np.float64) @ x
    return out


@pytest.mark.parametrize("j", range(13))
def test_fwht_equals_the_sylvester_product(j):
    n = 1 << j
    rng = np.random.default_rng(j)
    x = rng.integers(-1000, 1001, size=n).astype(np.float64)
    want = dense_product(x)
    got = K.fwht(x)
    assert got.dtype == np.float64 and got.shape == (n,)
    np.testing.assert_array_equal(got, want)  # integer inputs: every partial sum is exact
    assert got is not x
    # Real inputs: agreement to rounding.
    y = rng.standard_normal(n)
    np.testing.assert_allclose(K.fwht(y), dense_product(y), rtol=0,
                               atol=1e-12 * max(1.0, np.abs(y).sum()))
    # The integer transform is the same matrix.
    np.testing.assert_array_equal(K.fwht_int(x.astype(np.int64)), want.astype(np.int64))


def test_fwht_does_not_modify_its_input():
    x = np.arange(64.0)
    before = x.copy()
    K.fwht(x)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("j", [0, 1, 5, 11, 12, 13, 16])
def test_transform_twice_is_n_times_identity(j):
    n = 1 << j
    rng = np.random.default_rng(100 + j)
    x = rng.standard_normal(n)
    np.testing.assert_allclose(K.fwht(K.fwht(x)), n * x, rtol=0, atol=1e-9 * n)
    xi = rng.integers(-50, 51, size=n)
    np.testing.assert_array_equal(K.fwht_int(K.fwht_int(xi)), n * xi)
    np.testing.assert_array_equal(K.fwht(K.fwht(xi.astype(np.float64))), n * xi)


@pytest.mark.parametrize("j", [14, 16, 17, 20])
def test_large_sizes_agree_with_the_integer_transform(j):
    n = 1 << j
    rng = np.random.default_rng(j)
    xi = rng.integers(-100, 101, size=n)
    floats = K.fwht(xi.astype(np.float64))
    ints = K.fwht_int(xi)
    assert ints.dtype == np.int64
    np.testing.assert_array_equal(floats, ints.astype(np.float64))
    # Spot-check rows against the definition.
    idx = np.arange(n, dtype=np.uint64)
    for r in [0, 1, 2, n // 2 + 3, n - 1]:
        signs = 1 - 2 * (np.bitwise_count(idx & np.uint64(r)) & 1).astype(np.int64)
        assert int(ints[r]) == int(signs @ xi)
    assert int(ints[0]) == int(xi.sum())


@pytest.mark.parametrize("j", [0, 3, 11, 12, 16, 18])
def test_fwht_inplace_matches_fwht(j):
    n = 1 << j
    x = np.random.default_rng(j).standard_normal(n)
    want = K.fwht(x)
    y = x.copy()
    assert K.fwht_inplace(y) is None
    np.testing.assert_array_equal(y, want)


def test_fwht_int_is_exact_beyond_float_precision():
    # Values near 2^60: float64 would round, the integer transform must not.
    rng = np.random.default_rng(9)
    n = 8
    x = rng.integers(2**59, 2**59 + 2**40, size=n, dtype=np.int64)
    x[::2] *= -1
    h = sylvester(n).astype(object)
    want = [sum(int(h[r, c]) * int(x[c]) for c in range(n)) for r in range(n)]
    assert K.fwht_int(x).tolist() == want
    # Any integer dtype that fits int64 is accepted.
    small = np.array([1, 2, 3, 4], dtype=np.uint8)
    assert K.fwht_int(small).tolist() == [10, -2, -4, 0]
    assert K.fwht_int([1, 2, 3, 4]).tolist() == [10, -2, -4, 0]
    assert K.fwht_int(np.array([5], dtype=np.int16)).tolist() == [5]


def test_fwht_int_overflow_guard():
    # sum |x| = 2^63 - 1 is the largest allowed total; the result is exact there.
    ok = np.array([2**62, 2**62 - 1], dtype=np.int64)
    assert K.fwht_int(ok).tolist() == [2**63 - 1, 1]
    for bad in ([2**62, 2**62], [-(2**63), 0], [2**61] * 4, [2**62, -(2**62)]):
        with pytest.raises(ValueError, match="overflow"):
            K.fwht_int(np.array(bad, dtype=np.int64))
    with pytest.raises(ValueError, match="int64"):
        K.fwht_int(np.array([2**63, 0], dtype=np.uint64))


@pytest.mark.parametrize("n", [0, 3, 12, 6, 1000])
def test_lengths_that_are_not_powers_of_two(n):
    with pytest.raises(ValueError, match=f"2\\^j.*got {n}"):
        K.fwht(np.ones(n))
    with pytest.raises(ValueError, match=f"got {n}"):
        K.fwht_int(np.ones(n, dtype=np.int64))
    with pytest.raises(ValueError, match=f"got {n}"):
        K.fwht_inplace(np.ones(n))


def test_wrong_dtypes_are_refused_without_casting():
    with pytest.raises(TypeError, match="float64"):
        K.fwht(np.arange(4))
    with pytest.raises(TypeError, match="float64"):
        K.fwht(np.ones(4, dtype=np.float32))
    with pytest.raises(TypeError, match="float64"):
        K.fwht(np.ones(4, dtype=np.complex128))
    with pytest.raises(TypeError):
        K.fwht(np.array([1.0, None, 2.0, 3.0], dtype=object))
    with pytest.raises(TypeError):
        K.fwht(np.array(["a", "b"]))
    with pytest.raises(TypeError):
        K.fwht(["a", "b"])
    with pytest.raises(TypeError):
        K.fwht_int(np.ones(4))
    with pytest.raises(TypeError):
        K.fwht_int(np.array(["1", "2"]))
    with pytest.raises(TypeError):
        K.fwht_inplace(np.arange(4))
    with pytest.raises(TypeError):
        K.fwht_inplace(np.ones(4, dtype=np.float32))
    with pytest.raises(TypeError):
        K.fwht_inplace([1.0, 2.0])
    # Lists of numbers are converted.
    np.testing.assert_array_equal(K.fwht([1, 2, 3, 4]), [10.0, -2.0, -4.0, 0.0])


def test_two_dimensional_input_is_refused():
    with pytest.raises(ValueError, match="one-dimensional"):
        K.fwht(np.ones((4, 4)))
    with pytest.raises(ValueError, match="one-dimensional"):
        K.fwht(np.float64(3.0))
    with pytest.raises(ValueError, match="one-dimensional"):
        K.fwht_int(np.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError):
        K.fwht_inplace(np.ones((4, 4)))


def test_fwht_inplace_needs_a_contiguous_writeable_array():
    x = np.ones(16)
    with pytest.raises(ValueError, match="contiguous"):
        K.fwht_inplace(x[::2])
    ro = np.ones(8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        K.fwht_inplace(ro)
    np.testing.assert_array_equal(ro, np.ones(8))
    # fwht itself accepts strided views.
    np.testing.assert_array_equal(K.fwht(x[::2]), K.fwht(np.ones(8)))


@pytest.mark.parametrize("position, value", [(0, np.nan), (5, np.inf), (7, -np.inf)])
def test_non_finite_values_name_their_position(position, value):
    x = np.ones(8)
    x[position] = value
    with pytest.raises(ValueError, match=f"element {position} is"):
        K.fwht(x)
    y = x.copy()
    with pytest.raises(ValueError, match=f"element {position} is"):
        K.fwht_inplace(y)
    np.testing.assert_array_equal(y, x)  # untouched on error
