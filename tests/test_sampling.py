"""Exact, reproducible parallel samplers: sample_uniform and sample_bernoulli."""

from __future__ import annotations

import math

import numpy as np
import pytest

import chacha_reference as ref
from conftest import digest, run_python
from ldpdist import _core
from ldpdist import kernels as K

CHUNK = _core.SAMPLE_CHUNK

# Upper 0.001 quantiles of the chi-square distribution (scipy.stats.chi2.isf(0.001, df)).
CHI2_999 = {2: 13.815510557964274, 6: 22.457744484825323, 999: 1142.8479838910355}


def chi_square(counts: np.ndarray, expected: float) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def test_chunk_size_is_exposed():
    assert CHUNK == 1 << 16


def test_dtypes_and_ranges():
    u = K.sample_uniform(10, 1000, seed=1)
    assert u.dtype == np.uint64 and u.shape == (1000,)
    assert u.min() >= 0 and u.max() <= 9
    b = K.sample_bernoulli(0.5, 1000, seed=1)
    assert b.dtype == np.bool_ and b.shape == (1000,)
    assert K.sample_uniform(5, 0, seed=1).shape == (0,)
    assert K.sample_bernoulli(0.5, 0, seed=1).shape == (0,)
    np.testing.assert_array_equal(K.sample_uniform(1, 3 * CHUNK, seed=3), 0)
    top = K.sample_uniform(2**32, 100_000, seed=4)
    assert int(top.max()) < 2**32 and int(top.max()) > 2**32 - 2**20


# --------------------------------------------------------------------------------------
# Reproducibility


@pytest.mark.parametrize("size", [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_seeded_results_repeat(size):
    a = K.sample_uniform(1000, size, seed=11)
    np.testing.assert_array_equal(a, K.sample_uniform(1000, size, seed=11))
    b = K.sample_bernoulli(0.3, size, seed=11)
    np.testing.assert_array_equal(b, K.sample_bernoulli(0.3, size, seed=11))
    if size > 64:
        assert not np.array_equal(a, K.sample_uniform(1000, size, seed=12))
        assert not np.array_equal(b, K.sample_bernoulli(0.3, size, seed=12))


_SAMPLING_SNIPPET = f"""
from ldpdist import kernels as K
size = 5 * {CHUNK} + 1234
print(digest(K.sample_uniform(1000, size, seed=2024)))
print(digest(K.sample_uniform(2**32, size, seed=2**255 + 3)))
print(digest(K.sample_bernoulli(0.3, size, seed=2024)))
print(digest(K.sample_bernoulli(1e-3, size, seed=7)))
"""


def test_seeded_results_do_not_depend_on_the_thread_count():
    size = 5 * CHUNK + 1234
    local = "\n".join([
        digest(K.sample_uniform(1000, size, seed=2024)),
        digest(K.sample_uniform(2**32, size, seed=2**255 + 3)),
        digest(K.sample_bernoulli(0.3, size, seed=2024)),
        digest(K.sample_bernoulli(1e-3, size, seed=7)),
    ]) + "\n"
    for threads in ("1", "2", "4"):
        out = run_python(_SAMPLING_SNIPPET, env={"RAYON_NUM_THREADS": threads})
        assert out == local, f"RAYON_NUM_THREADS={threads}"


def test_chunks_use_distinct_streams():
    s = K.sample_uniform(2**32, 3 * CHUNK, seed=5)
    assert not np.array_equal(s[:64], s[CHUNK:CHUNK + 64])
    assert not np.array_equal(s[CHUNK:CHUNK + 64], s[2 * CHUNK:2 * CHUNK + 64])


@pytest.mark.parametrize("n", [1, 7, 1000, 3 * 2**30, 2**32])
def test_uniform_matches_the_documented_stream(n):
    # rust/rng.rs: chunk c reads the ChaCha12 stream (key = seed bytes, stream id = c,
    # counter 0) and each draw is Lemire's uniform_below on 32-bit words.
    size = 2 * CHUNK + 40
    got = K.sample_uniform(n, size, seed=12345)
    for c in range(3):
        rng = ref.WordStream(ref.seed_key(12345), c, rounds=12)
        want = [ref.uniform_below(rng, n) for _ in range(40)]
        assert got[c * CHUNK:c * CHUNK + 40].tolist() == want, f"chunk {c}"


@pytest.mark.parametrize("p", [0.3, 1e-3, 0.5, 1 - 2**-40])
def test_bernoulli_matches_the_documented_stream(p):
    size = CHUNK + 200
    got = K.sample_bernoulli(p, size, seed=9)
    for c in range(2):
        rng = ref.WordStream(ref.seed_key(9), c, rounds=12)
        want = [ref.bernoulli(rng, p) for _ in range(200)]
        assert got[c * CHUNK:c * CHUNK + 200].tolist() == want, f"chunk {c}"


def test_unseeded_calls_differ():
    a = K.sample_uniform(2**32, 100)
    b = K.sample_uniform(2**32, 100)
    assert not np.array_equal(a, b)
    c = K.sample_bernoulli(0.5, 1000, seed=None)
    d = K.sample_bernoulli(0.5, 1000, seed=None)
    assert not np.array_equal(c, d)


# --------------------------------------------------------------------------------------
# Distributions (fixed seeds; thresholds are the upper 0.001 quantiles)


def test_uniform_chi_square_small_n():
    n, size = 7, 700_000
    counts = np.bincount(K.sample_uniform(n, size, seed=101).astype(np.int64), minlength=n)
    assert counts.size == n
    assert chi_square(counts, size / n) < CHI2_999[6], counts


def test_uniform_chi_square_n_1000():
    n, size = 1000, 1_000_000
    counts = np.bincount(K.sample_uniform(n, size, seed=202).astype(np.int64), minlength=n)
    assert counts.size == n
    assert chi_square(counts, size / n) < CHI2_999[999]


def test_uniform_is_unbiased_for_large_n():
    # n = 3·2^30: a modulo reduction of 32-bit words would put probability 1/2 on the first
    # third of the range instead of 1/3. Lemire with rejection is exact.
    n, size = 3 * 2**30, 600_000
    draws = K.sample_uniform(n, size, seed=303)
    assert int(draws.max()) < n
    thirds = np.bincount((draws // 2**30).astype(np.int64), minlength=3)
    assert thirds.size == 3
    assert chi_square(thirds, size / 3) < CHI2_999[2], thirds
    # Parity is fair too (a multiply-shift without rejection would still pass this; it
    # catches a broken low bit).
    odd = int((draws & 1).sum())
    assert abs(odd - size / 2) < 5 * math.sqrt(size / 4)


@pytest.mark.parametrize("p", [0.3, 1e-3, 0.5, 0.999])
def test_bernoulli_rate(p):
    size = 1_000_000
    ones = int(K.sample_bernoulli(p, size, seed=404).sum())
    assert abs(ones - size * p) < 5 * math.sqrt(size * p * (1 - p)), ones


def test_bernoulli_extremes_are_exact():
    size = 3 * CHUNK + 5
    assert not K.sample_bernoulli(0.0, size, seed=1).any()
    assert K.sample_bernoulli(1.0, size, seed=1).all()
    assert not K.sample_bernoulli(0, size).any()
    assert K.sample_bernoulli(1, size).all()
    # The smallest positive double is not zero, but practically never fires.
    assert not K.sample_bernoulli(5e-324, 100_000, seed=2).any()


# --------------------------------------------------------------------------------------
# Bad inputs


def test_bad_uniform_arguments():
    for n in (0, -1, 2**32 + 1):
        with pytest.raises(ValueError, match="n must be"):
            K.sample_uniform(n, 10, seed=1)
    for n in (5.0, "5", None, True):
        with pytest.raises(TypeError, match="n must be an integer"):
            K.sample_uniform(n, 10, seed=1)
    with pytest.raises(ValueError, match="size"):
        K.sample_uniform(5, -1, seed=1)
    with pytest.raises(TypeError, match="size"):
        K.sample_uniform(5, 10.0, seed=1)
    for seed in (-1, 2**256):
        with pytest.raises(ValueError, match="seed"):
            K.sample_uniform(5, 10, seed=seed)
    for seed in (1.0, "1", True):
        with pytest.raises(TypeError, match="seed"):
            K.sample_uniform(5, 10, seed=seed)


def test_bad_bernoulli_arguments():
    for p in (-0.1, 1.1, -1e-300, 1 + 2**-52):
        with pytest.raises(ValueError, match="p must lie in"):
            K.sample_bernoulli(p, 10, seed=1)
    for p in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="finite"):
            K.sample_bernoulli(p, 10, seed=1)
    for p in ("0.5", None, True, np.bool_(False)):
        with pytest.raises(TypeError, match="p must be a real number"):
            K.sample_bernoulli(p, 10, seed=1)
    with pytest.raises(ValueError, match="size"):
        K.sample_bernoulli(0.5, -3, seed=1)
    with pytest.raises(ValueError, match="seed"):
        K.sample_bernoulli(0.5, 10, seed=-5)
    with pytest.raises(TypeError, match="seed"):
        K.sample_bernoulli(0.5, 10, seed=0.5)
