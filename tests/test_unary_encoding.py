"""RAPPOR and Optimized Unary Encoding: report layout, estimation accuracy with every decoder,
simulate vs privatize, malformed reports, specs, aggregators and the channel matrix."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ldpdist
from ldpdist import OptimizedUnaryEncoding, RAPPOR

CLASSES = [RAPPOR, OptimizedUnaryEncoding]
IDS = ["RAPPOR", "OUE"]


def ab(mech):
    """(a, b): P(bit x = 1 | x) and P(bit j = 1 | x), j != x, as used."""
    return mech._core.probabilities()


def test_exported_and_registered():
    assert ldpdist.RAPPOR is ldpdist.mechanisms.RAPPOR
    assert ldpdist.OptimizedUnaryEncoding is ldpdist.mechanisms.OptimizedUnaryEncoding
    assert {"RAPPOR", "OptimizedUnaryEncoding"} <= set(ldpdist.__all__)
    assert "RAPPOR" in ldpdist.__doc__ and "OptimizedUnaryEncoding" in ldpdist.__doc__
    assert ldpdist.RAPPOR(k=5, epsilon=1.0).report_kind == "bits"


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_probabilities_follow_the_papers(epsilon):
    a, b = ab(RAPPOR(k=4, epsilon=epsilon))
    f = 1 / (math.exp(epsilon / 2) + 1)
    assert a == 1 - b and b == pytest.approx(f, rel=1e-13)
    a, b = ab(OptimizedUnaryEncoding(k=4, epsilon=epsilon))
    assert a == 0.5 and b == pytest.approx(1 / (math.exp(epsilon) + 1), rel=1e-13)


# ------------------------------------------------------------------------------------------
# Report layout


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
@pytest.mark.parametrize("k", [2, 8, 13, 64, 70])
def test_privatize_returns_packbits_rows(cls, k):
    mech = cls(k=k, epsilon=1.0)
    values = np.arange(3000) % k
    reports = mech.privatize(values, seed=5)
    width = -(-k // 8)
    assert reports.dtype == np.uint8 and reports.shape == (values.size, width)
    assert mech.output_size == k
    unpacked = np.unpackbits(reports, axis=1)
    assert not unpacked[:, k:].any(), "padding bits must be 0"
    # Round trip through np.packbits, and the aggregate is the per-bit column sums.
    bits = unpacked[:, :k]
    np.testing.assert_array_equal(np.packbits(bits, axis=1), reports)
    agg = mech.aggregator().add(reports)
    np.testing.assert_array_equal(agg.counts, bits.sum(axis=0))
    assert agg.n == values.size
    # Seeds: reproducible, and different seeds give different reports.
    np.testing.assert_array_equal(mech.privatize(values, seed=5), reports)
    assert not np.array_equal(mech.privatize(values, seed=6), reports)


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_the_true_value_is_at_bit_x_in_numpy_order(cls):
    # At ε = 8, bit x is 1 with probability a >= 1/2 and other bits rarely: the position of
    # the frequent bit in np.unpackbits order must be x (this pins the layout).
    k, draws = 19, 20_000
    mech = cls(k=k, epsilon=8.0)
    a, b = ab(mech)
    for x in (0, 7, 8, 18):
        bits = np.unpackbits(mech.privatize(np.full(draws, x), seed=x), axis=1)[:, :k]
        freq = bits.mean(axis=0)
        expected = np.full(k, b)
        expected[x] = a
        sd = np.sqrt(expected * (1 - expected) / draws)
        assert (np.abs(freq - expected) <= 5 * sd + 1e-12).all(), (x, freq)


# ------------------------------------------------------------------------------------------
# Estimation with every decoder


def error_bounds(mech, p, n):
    """High-probability l1 error bounds (6 sd) derived from the variance of the raw estimator,
    Var(p_j) = (b(1-b) + p_j (a-b)(1-a-b)) / (n (a-b)^2), independent across j."""
    a, b = ab(mech)
    var = (b * (1 - b) + p * (a - b) * (1 - a - b)) / (n * (a - b) ** 2)
    sd = np.sqrt(var)
    # l1 of the raw estimate: E|e_j| = sqrt(2/pi) sd_j; the sum of independent |e_j| has
    # variance (1 - 2/pi) sum var_j.
    raw_l1 = math.sqrt(2 / math.pi) * sd.sum() + 6 * math.sqrt((1 - 2 / math.pi) * var.sum())
    # Squared l2 of the raw estimate: mean sum var_j, variance ~ 2 sum var_j^2.
    raw_l2 = math.sqrt(var.sum() + 6 * math.sqrt(2 * (var ** 2).sum()))
    return raw_l1, raw_l2


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
@pytest.mark.parametrize("epsilon", [1.0, 3.0])
def test_every_decoder_is_accurate_on_a_known_distribution(cls, epsilon):
    k, n, s = 20, 200_000, 8
    weights = np.zeros(k)
    weights[:s] = 0.7 ** np.arange(s)
    true_counts = np.round(weights / weights.sum() * n).astype(np.int64)
    true_counts[0] += n - true_counts.sum()
    p = true_counts / n  # the users' empirical distribution: the raw estimate is unbiased for it
    values = np.random.default_rng(1).permutation(np.repeat(np.arange(k), true_counts))
    mech = cls(k=k, epsilon=epsilon)
    agg = mech.aggregator().add(mech.privatize(values, seed=11))
    raw_l1, raw_l2 = error_bounds(mech, p, n)
    bounds = {
        "raw": raw_l1,
        # Clipping moves each entry towards p (p >= 0), and renormalizing adds at most the
        # l1 error again: ||normalize(x) - p||_1 <= 2 ||x - p||_1.
        "normalize": 2 * raw_l1,
        # Projection onto the simplex is l2 non-expansive towards p; l1 <= sqrt(k) l2.
        "project": math.sqrt(k) * raw_l2,
        # The s-sparse projection is within 2 ||x - p||_2 of the s-sparse p and the difference
        # has at most 2s non-zeros.
        "sparse_project": math.sqrt(2 * s) * 2 * raw_l2,
        # IBU (Poisson EM for bit counts) has no closed-form bound; it is asymptotically at
        # least as efficient as the projected estimate, allowed twice its bound.
        "ibu": 2 * math.sqrt(k) * raw_l2,
    }
    for decoder, bound in bounds.items():
        options = {"sparsity": s} if decoder == "sparse_project" else {}
        estimate = agg.estimate(decoder, **options)
        assert estimate.shape == (k,) and estimate.dtype == np.float64
        error = np.abs(estimate - p).sum()
        assert error < bound, f"{decoder}: l1 error {error:.4f} >= bound {bound:.4f}"
        if decoder != "raw":
            assert estimate.min() >= 0 and estimate.sum() == pytest.approx(1.0, abs=1e-9)
        if decoder == "sparse_project":
            assert np.count_nonzero(estimate) <= s
    # The raw estimate is the documented formula.
    a, b = ab(mech)
    expected_raw = (agg.counts / n - b) / (a - b)
    np.testing.assert_allclose(agg.estimate("raw"), expected_raw, rtol=0, atol=1e-12)
    # mech.estimate is the same pipeline.
    np.testing.assert_array_equal(mech.estimate(mech.privatize(values, seed=11), decoder="raw"),
                                  agg.estimate("raw"))


# ------------------------------------------------------------------------------------------
# simulate vs privatize


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_simulate_agrees_with_privatize_in_mean_and_variance(cls):
    k, runs = 6, 600
    true_counts = np.array([300, 0, 100, 50, 25, 525])
    n = int(true_counts.sum())
    values = np.repeat(np.arange(k), true_counts)
    mech = cls(k=k, epsilon=1.0)
    a, b = ab(mech)
    mean = true_counts * a + (n - true_counts) * b
    var = true_counts * a * (1 - a) + (n - true_counts) * b * (1 - b)
    simulated = np.array([mech.simulate(true_counts, seed=s).counts for s in range(runs)], float)
    direct = np.array([mech.aggregator().add(mech.privatize(values, seed=10_000 + s)).counts
                       for s in range(runs)], float)
    for name, sample in (("simulate", simulated), ("privatize", direct)):
        z = (sample.mean(axis=0) - mean) / np.sqrt(var / runs)
        assert (np.abs(z) < 4.5).all(), (name, z)
        # Sample variance of ~normal counts: relative sd sqrt(2/(runs-1)) = 0.058; 5 of them.
        ratio = sample.var(axis=0, ddof=1) / var
        assert (np.abs(ratio - 1) < 5 * math.sqrt(2 / (runs - 1))).all(), (name, ratio)
    agg = mech.simulate(true_counts, seed=1)
    assert agg.n == n and agg.counts.dtype == np.uint64 and agg.counts.shape == (k,)
    np.testing.assert_array_equal(agg.counts, mech.simulate(true_counts, seed=1).counts)


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_simulate_rejects_bad_true_counts(cls):
    mech = cls(k=4, epsilon=1.0)
    with pytest.raises(ValueError, match="shape"):
        mech.simulate(np.array([1, 2, 3]))
    with pytest.raises(TypeError):
        mech.simulate(np.array([1.0, 2, 3, 4]))
    with pytest.raises(ValueError, match=">= 0"):
        mech.simulate(np.array([1, -2, 3, 4]))


# ------------------------------------------------------------------------------------------
# Malformed reports


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_rows_with_padding_bits_set_are_rejected_or_dropped(cls):
    k = 13  # 2 bytes per row, 3 padding bits
    mech = cls(k=k, epsilon=1.0)
    reports = mech.privatize(np.arange(1000) % k, seed=3)
    bad = reports.copy()
    bad[3, 1] |= 0x01
    bad[7, 1] |= 0x04
    agg = mech.aggregator()
    with pytest.raises(ValueError, match="row 3"):
        agg.add(bad)
    assert agg.n == 0 and agg.dropped == 0 and not agg.counts.any()
    with pytest.raises(ValueError, match="malformed"):
        mech.estimate(bad)
    agg.add(bad, on_invalid="drop")
    assert (agg.n, agg.dropped) == (998, 2)
    good = np.delete(reports, [3, 7], axis=0)
    np.testing.assert_array_equal(agg.counts, mech.aggregator().add(good).counts)
    np.testing.assert_array_equal(mech.estimate(bad, on_invalid="drop"), mech.estimate(good))


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_wrong_dtype_or_shape_is_refused(cls):
    mech = cls(k=13, epsilon=1.0)
    reports = mech.privatize(np.arange(10) % 13, seed=1)
    with pytest.raises(TypeError, match="uint8"):
        mech.estimate(reports.astype(np.int64))
    with pytest.raises(TypeError, match="uint8"):
        mech.estimate(reports.astype(np.float64))
    with pytest.raises(ValueError, match="shape"):
        mech.estimate(reports.ravel())
    with pytest.raises(ValueError, match="shape"):
        mech.estimate(mech.as_reports(np.zeros((10, 3), dtype=np.uint8)))
    with pytest.raises(ValueError, match="shape"):
        mech.estimate(mech.as_reports(np.zeros((10, 2, 1), dtype=np.uint8)))
    # Non-contiguous rows are accepted (copied).
    wide = np.zeros((10, 4), dtype=np.uint8)
    wide[:, :2] = reports
    np.testing.assert_array_equal(mech.aggregator().add(mech.as_reports(wide[:, :2])).counts,
                                  mech.aggregator().add(reports).counts)
    # Values.
    with pytest.raises(ValueError, match=r"values\[2\] = 13"):
        mech.privatize([0, 1, 13])
    with pytest.raises(ValueError, match=r"values\[1\] = -1"):
        mech.privatize([0, -1])
    with pytest.raises(TypeError):
        mech.privatize([0.0, 1.0])
    with pytest.raises(ValueError, match="on_invalid"):
        mech.estimate(reports, on_invalid="ignore")


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_bad_parameters(cls):
    for k in (0, 1, 2**32 + 1):
        with pytest.raises(ValueError):
            cls(k=k, epsilon=1.0)
    for epsilon in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            cls(k=4, epsilon=epsilon)
    with pytest.raises(TypeError):
        cls(k=4.5, epsilon=1.0)


# ------------------------------------------------------------------------------------------
# Specs and aggregators


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_to_dict_from_dict_round_trip(cls):
    mech = cls(k=37, epsilon=0.75)
    spec = mech.to_dict()
    assert spec == {"mechanism": cls.__name__, "format": 1, "k": 37, "epsilon": 0.75}
    again = ldpdist.from_dict(json.loads(json.dumps(spec)))
    assert type(again) is cls and again == mech and hash(again) == hash(mech)
    assert again.realized_epsilon == mech.realized_epsilon
    assert again != cls(k=37, epsilon=0.76)
    other = OptimizedUnaryEncoding if cls is RAPPOR else RAPPOR
    assert mech != other(k=37, epsilon=0.75)
    assert repr(mech) == f"{cls.__name__}(k=37, epsilon=0.75)"


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_aggregator_merge_and_bytes_round_trip(cls):
    k = 21
    mech = cls(k=k, epsilon=2.0)
    values = np.random.default_rng(0).integers(0, k, 5000)
    reports = mech.privatize(values, seed=9)
    whole = mech.aggregator().add(reports)
    left = mech.aggregator().add(reports[:1234])
    right = mech.aggregator().add(reports[1234:])
    merged = left.merge(right)
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert merged.n == whole.n == 5000
    restored = ldpdist.Aggregator.from_bytes(merged.to_bytes())
    assert restored.mechanism == mech and restored.n == 5000 and restored.dropped == 0
    np.testing.assert_array_equal(restored.counts, whole.counts)
    np.testing.assert_array_equal(restored.estimate(), whole.estimate())
    # A bit count above n is a corrupt aggregate.
    data = bytearray(merged.to_bytes())
    data[-8:] = (10**6).to_bytes(8, "little")
    with pytest.raises(ValueError, match="corrupt"):
        ldpdist.Aggregator.from_bytes(bytes(data))
    with pytest.raises(ValueError, match="made under"):
        whole.merge(cls(k=k, epsilon=1.0).aggregator())


# ------------------------------------------------------------------------------------------
# Channel matrix


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_channel_matrix_for_k_3(cls, epsilon):
    mech = cls(k=3, epsilon=epsilon)
    Q = mech.channel_matrix()
    assert Q.shape == (3, 8)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    a, b = ab(mech)
    for x in range(3):
        for o in range(8):
            expected = 1.0
            for j in range(3):
                on = (o >> j) & 1
                q = a if j == x else b
                expected *= q if on else 1 - q
            assert Q[x, o] == pytest.approx(expected, rel=1e-14)
    ratio = np.log(Q.max(axis=0) / Q.min(axis=0)).max()
    assert ratio == pytest.approx(mech.realized_epsilon, abs=1e-12)
    assert mech.realized_epsilon <= epsilon
    assert epsilon - mech.realized_epsilon < 1e-12


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_channel_matrix_refuses_large_outputs(cls):
    with pytest.raises(ValueError, match="max_entries"):
        cls(k=30, epsilon=1.0).channel_matrix()
    assert cls(k=10, epsilon=1.0).channel_matrix(max_entries=10 * 1024).shape == (10, 1024)


@pytest.mark.parametrize("k,n", [(13, 1000), (10_003, 3_001), (40_000, 1_100), (70_001, 300)])
def test_bit_plane_aggregation_equals_unpackbits(k, n):
    """The vertical (bit-plane) counters against numpy: padding bits (k not a multiple of 8),
    more than 255 rows per task (u8 counters flushed), several tiles per row (k > 32768) and
    a final partial block; with and without dropped rows."""
    rng = np.random.default_rng(k)
    width = (k + 7) // 8
    rows = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
    pad = 8 * width - k
    if pad:
        rows[:, -1] &= np.uint8((0xFF << pad) & 0xFF)
    for mech in (ldpdist.RAPPOR(k, 1.0), ldpdist.OptimizedUnaryEncoding(k, 1.0)):
        expected = np.unpackbits(rows, axis=1)[:, :k].sum(axis=0)
        np.testing.assert_array_equal(mech.aggregator().add(mech.as_reports(rows)).counts,
                                      expected)
        if pad:
            bad = rows.copy()
            bad[::7, -1] |= 1  # a padding bit set: malformed, dropped
            agg = mech.aggregator().add(mech.as_reports(bad), on_invalid="drop")
            kept = np.ones(n, bool)
            kept[::7] = False
            np.testing.assert_array_equal(
                agg.counts, np.unpackbits(rows[kept], axis=1)[:, :k].sum(axis=0))
            assert agg.n == kept.sum()
