"""PEM's Rust support-counting kernel (ldpdist._core.pem_support) against the reference
numpy computation: identical counts, identical identify results."""

import numpy as np
import pytest

from ldpdist import _core
from ldpdist.heavy_hitters import PEM


def numpy_support(pem, reports, group, candidates):
    """The reference: every (report, candidate) pair's ``a . digits(x) - y`` in int64,
    supported iff it is a multiple of g."""
    mine = reports[reports["group"] == group]
    t = pem.digits[group]
    digits = pem.prefix_digits(candidates, group).astype(np.int64)
    h = mine["a"][:, :t].astype(np.int64) @ digits.T - mine["y"].astype(np.int64)[:, None]
    return (h % pem.g == 0).sum(axis=0), mine.size


def random_reports(pem, n, rng):
    """Uniformly random valid reports (every value, not only privatized ones)."""
    out = np.zeros(n, dtype=pem.report_dtype)
    out["group"] = rng.integers(0, pem.groups, n)
    out["y"] = rng.integers(0, pem.g, n)
    a = rng.integers(0, pem.g, (n, out["a"].shape[1]))
    t = np.array(pem.digits)[out["group"]]
    a[np.arange(a.shape[1])[None, :] >= t[:, None]] = 0
    out["a"] = a
    return out


@pytest.mark.parametrize("epsilon, bits, n", [(4.0, 64, 3000), (12.0, 64, 2000),
                                              (1.0, 20, 500), (8.0, 7, 40)])
def test_kernel_counts_equal_the_reference(epsilon, bits, n):
    pem = PEM(epsilon, top=8, bits=bits)
    if epsilon == 12.0:
        assert pem.g == 251  # the largest modulus: the largest sums
    rng = np.random.default_rng(5)
    reports = random_reports(pem, n, rng)
    aggregator = pem.aggregator().add(pem.as_reports(reports))
    for group in range(pem.groups):
        s = pem.prefix_bits[group]
        candidates = rng.integers(0, 2**s, 300, dtype=np.uint64, endpoint=False) \
            if s < 64 else rng.integers(0, 2**64 - 1, 300, dtype=np.uint64, endpoint=True)
        want, size = numpy_support(pem, reports, group, candidates)
        if size == 0:
            with pytest.raises(ValueError, match="has no reports"):
                aggregator._support(group, candidates)
            continue
        counts, m = aggregator._support(group, candidates)
        assert m == size
        np.testing.assert_array_equal(counts, want)


def test_tiny_groups_and_true_prefixes_are_supported():
    pem = PEM(20.0, top=4, bits=16)  # p ~ 1: each report supports its user's prefix
    values = np.arange(1, 13, dtype=np.uint64) * 4099
    reports = np.asarray(pem.privatize_hashed(values, seed=3))
    for group in range(pem.groups):
        mine = reports["group"] == group
        if not mine.any():
            continue
        own = values[mine] >> np.uint64(pem.bits - pem.prefix_bits[group])
        counts, m = pem.aggregator().add(pem.as_reports(reports))._support(group, own)
        assert m == mine.sum()
        want, _ = numpy_support(pem, reports, group, own)
        np.testing.assert_array_equal(counts, want)
        assert (counts >= 1).all()  # every user's report supports the user's own prefix


def test_identify_is_unchanged_and_kernel_refuses_bad_layouts():
    pem = PEM(4.0, top=8, bits=32)
    rng = np.random.default_rng(2)
    values = (rng.zipf(1.3, 20000) % 50).astype(np.uint64) * np.uint64(85_000_007)
    reports = pem.privatize_hashed(values, seed=1)
    found = pem.identify(reports)
    # the same rounds with the reference counts
    array = np.asarray(reports)
    kept = np.arange(2**pem.prefix_bits[0], dtype=np.uint64)
    for group in range(pem.groups):
        if group:
            extra = pem.prefix_bits[group] - pem.prefix_bits[group - 1]
            kept = ((kept[:, None] << np.uint64(extra))
                    | np.arange(2**extra, dtype=np.uint64)[None, :]).reshape(-1)
        counts, n = numpy_support(pem, array, group, kept)
        share = counts / n
        estimates = (share - pem.q) / (pem.p - pem.q)
        order = np.lexsort((kept, -estimates))[:min(pem.top, kept.size)]
        kept, estimates = kept[order], estimates[order]
    np.testing.assert_array_equal(found.hashes, kept)
    np.testing.assert_array_equal(found.estimates, estimates)
    rows = array.view(np.uint8).reshape(array.size, -1)
    with pytest.raises(ValueError, match="digits"):
        _core.pem_support(rows, 0, 40, pem.g, kept)
    with pytest.raises(ValueError, match="g = 252"):
        _core.pem_support(rows, 0, 2, 252, kept)
    with pytest.raises(ValueError, match="contiguous"):
        _core.pem_support(rows[:, ::2], 0, 2, pem.g, kept)
