"""Error translation: Rust panics become InternalError, oversized requests MemoryError."""

from __future__ import annotations

import numpy as np
import pytest

import ldpdist
from ldpdist import _core
from ldpdist import kernels as K


def test_internal_error_class():
    assert ldpdist.InternalError is _core.InternalError
    assert issubclass(ldpdist.InternalError, RuntimeError)
    assert issubclass(ldpdist.InternalError, Exception)


@pytest.mark.parametrize("parallel", [False, True])
def test_panics_surface_as_internal_error(parallel):
    with pytest.raises(ldpdist.InternalError, match="deliberate test panic") as info:
        _core._panic_for_tests(parallel)
    assert "please report" in str(info.value)
    if parallel:
        assert "worker thread" in str(info.value)
    # `except Exception` catches it (PyO3's PanicException is a BaseException and would not).
    caught = None
    try:
        _core._panic_for_tests(parallel)
    except Exception as exc:  # noqa: BLE001 - this is the point of the test
        caught = exc
    assert isinstance(caught, ldpdist.InternalError)
    assert isinstance(caught, RuntimeError)


def test_interpreter_and_thread_pool_work_after_panics():
    for _ in range(3):
        for parallel in (False, True):
            with pytest.raises(ldpdist.InternalError):
                _core._panic_for_tests(parallel)
    # Parallel kernels (rayon pool) still give correct results.
    n = 1 << 17
    x = np.arange(n, dtype=np.float64) % 7 - 3
    np.testing.assert_array_equal(K.fwht(K.fwht(x)), n * x)
    s = K.sample_uniform(10, 4 * _core.SAMPLE_CHUNK, seed=1)
    np.testing.assert_array_equal(s, K.sample_uniform(10, 4 * _core.SAMPLE_CHUNK, seed=1))
    A = K.SignMatrix(1, 100, 5000)
    r = np.arange(100.0)
    np.testing.assert_array_equal(A.rmatvec(r), A.to_dense().T @ r)


def test_huge_sign_matrix_raises_memory_error_before_allocating():
    # (2^31 − 1) × 2^31 packed is 2^58 bytes: refused up front, naming the request.
    with pytest.raises(MemoryError, match="sign matrix"):
        K.SignMatrix(0, 2**31 - 1, 2**31)
    with pytest.raises(MemoryError, match="sign matrix"):
        K.SignMatrix(0, 64, 2**40)  # 8 TiB
    with pytest.raises(MemoryError, match="sign matrix"):
        K.SignMatrix(0, 2**31 - 1, 2**62)  # word count overflows usize
    # The process is fine afterwards.
    assert K.SignMatrix(0, 64, 2).nbytes == 16


def test_huge_samples_raise_memory_error():
    with pytest.raises(MemoryError, match="uniform sample"):
        K.sample_uniform(2, 2**62, seed=1)
    with pytest.raises(MemoryError, match="Bernoulli sample"):
        K.sample_bernoulli(0.5, 2**62, seed=1)


@pytest.mark.parametrize("call", [
    lambda: K.SignMatrix(0, 1, 2**64),
    lambda: K.sample_uniform(2, 2**64, seed=1),
    lambda: K.sample_bernoulli(0.5, 2**64, seed=1),
], ids=["SignMatrix-k", "sample_uniform-size", "sample_bernoulli-size"])
def test_sizes_beyond_the_address_space_are_value_or_memory_errors(call):
    # _validation.py: "Every check raises TypeError for a wrong type or dtype and ValueError
    # for a value out of range". A size of 2^64 is out of range; it must not leak PyO3's
    # OverflowError (which `except ValueError` / `except MemoryError` miss).
    with pytest.raises((ValueError, MemoryError)):
        call()


def test_core_names_misalignment_not_contiguity():
    # a numpy view of a foreign buffer at an odd address is C-contiguous but not aligned; the
    # Python layer copies such arrays (ldpdist.dask relies on it), the core says what is wrong
    from ldpdist import _core

    buffer = np.zeros(8 * 11 + 1, dtype=np.uint8)
    unaligned = np.frombuffer(buffer.data, dtype=np.float64, offset=1, count=10)
    assert unaligned.flags.c_contiguous and not unaligned.flags.aligned
    with pytest.raises(ValueError, match="aligned to its 8-byte elements"):
        _core.project_simplex(unaligned)
    with pytest.raises(ValueError, match="must be a contiguous array"):
        _core.project_simplex(np.zeros(20)[::2])
    np.testing.assert_array_equal(ldpdist.kernels.project_simplex(unaligned),
                                  ldpdist.kernels.project_simplex(np.zeros(10)))
