"""The exact L2 sensitivity of a query matrix (the diameter of its columns) and the edges of
the linear-query protocols' parameters.

The search must give the same value and pair as the scan of every pair, bit for bit; a search
that would take minutes is refused before it starts; values that double precision cannot
carry (overflowing norms, squared distances that underflow, ε outside the mechanisms' range,
a non-finite σ) are refused with a ValueError.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from ldpdist import _core
from ldpdist.linear import (GaussianLinearQueries, QueryMatrix, RejectionSamplingLinearQueries,
                            l2_sensitivity)
from ldpdist.linear.calibration import MAX_EPSILON, MIN_EPSILON


def scan(queries: np.ndarray):
    columns = np.ascontiguousarray(np.asarray(queries, dtype=np.float64).T)
    value, pair = _core.linear_sensitivity_scan(columns)
    return value, tuple(pair)


def search(queries: np.ndarray, limit=None):
    q = QueryMatrix.of(queries, max_sensitivity_work=limit)
    return q.sensitivity, q.sensitivity_pair


def shapes(rng: np.random.Generator, d: int, j: int):
    """Query matrices (d × J) of several shapes, degenerate ones included."""
    g = rng.standard_normal((d, j))
    yield "gaussian", g
    yield "sphere", g / np.linalg.norm(g, axis=0)
    yield "duplicates", np.clip(np.round(g), -1, 1)
    yield "collinear", np.outer(rng.standard_normal(d), rng.standard_normal(j)) + 0.5
    yield "all equal", np.repeat(rng.standard_normal((d, 1)), j, axis=1)
    yield "0/1 counting queries", (rng.random((d, j)) < 0.3).astype(np.float64)
    cube = np.where(rng.random((d, j)) < 0.5, -1.0, 1.0)
    yield "cube corners", cube
    yield "tight clusters", np.where(np.arange(j) % 2, 1e3, -1e3) + 1e-9 * g


@pytest.mark.parametrize("d", range(1, 9))
def test_the_search_equals_the_scan_of_every_pair(d):
    rng = np.random.default_rng(100 + d)
    for trial in range(6):
        j = int(rng.integers(1, 200 if trial % 2 else 40))
        for name, queries in shapes(rng, d, j):
            assert search(queries) == scan(queries), (name, d, j)
            # through the public helper too, and under a permutation of the columns
            perm = rng.permutation(j)
            value, (v, w) = scan(queries[:, perm])
            assert l2_sensitivity(queries[:, perm]) == value, (name, d, j)


def test_the_pair_is_the_first_of_the_tied_pairs():
    # A square: both diagonals have length 2√2 (bit for bit); the first pair is (0, 2).
    square = np.array([[1.0, 0.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, -1.0, 0.0]]) * 2 ** 0.5
    assert search(square) == scan(square) == (2 * 2 ** 0.5, (0, 2))
    # Duplicated extreme columns: the first index of each copy.
    line = np.array([[5.0, -3.0, 5.0, 0.0, -3.0]])
    assert search(line) == scan(line) == (8.0, (0, 1))


def test_a_large_cloud_and_a_large_circle_finish():
    # J = 2**20 columns in d = 2 (the scan takes minutes): a Gaussian cloud and points on a
    # circle, where every column is on the convex hull.
    rng = np.random.default_rng(7)
    j = 2 ** 20
    cloud = rng.standard_normal((2, j))
    value, (v, w) = search(cloud, limit=QueryMatrix.__dataclass_fields__[
        "max_sensitivity_work"].default)
    assert value == math.sqrt(((cloud[:, v] - cloud[:, w]) ** 2).sum()) or \
        value == pytest.approx(np.linalg.norm(cloud[:, v] - cloud[:, w]), rel=1e-15)
    # no column is farther than Δ2 from the pair's midpoint by more than Δ2 (a sanity bound)
    assert value >= np.ptp(cloud, axis=1).max()
    t = 2 * np.pi * (np.arange(j) + 0.5) / j
    circle = np.vstack([np.cos(t), np.sin(t)])
    value, pair = search(circle, limit=10 ** 9)
    assert value == pytest.approx(2.0, abs=1e-9)
    assert abs(pair[1] - pair[0]) == j // 2


def test_a_search_that_would_take_long_is_refused_before_it_starts():
    rng = np.random.default_rng(3)
    g = rng.standard_normal((6, 2 ** 15))
    sphere = g / np.linalg.norm(g, axis=0)       # the hard case: pruning is weak
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"max_sensitivity_work=None") as caught:
        GaussianLinearQueries(sphere, 1.0, 1e-6, max_sensitivity_work=10 ** 6)
    elapsed = time.perf_counter() - start
    assert "distance evaluations" in str(caught.value)
    assert elapsed < 5, elapsed  # refused from the estimate, not after the work
    with pytest.raises(ValueError, match="max_sensitivity_work"):
        l2_sensitivity(sphere, max_sensitivity_work=10 ** 6)
    # the same matrix with a large enough limit, or no limit, is computed exactly
    small = sphere[:, :3000]
    assert search(small, limit=None) == scan(small)
    with pytest.raises((TypeError, ValueError)):
        QueryMatrix.of(sphere, max_sensitivity_work=0)


def test_the_rejection_protocol_does_not_need_the_sensitivity(monkeypatch):
    # Its calibration uses r and the column norms only: no diameter search at all, so a
    # large matrix on a sphere (the search's hard case) is calibrated at once.
    def refused(*args, **kwargs):
        raise AssertionError("the rejection protocol computed the sensitivity")

    monkeypatch.setattr(_core, "linear_sensitivity", refused)
    monkeypatch.setattr(_core, "LinearDiameterSearch", refused)
    rng = np.random.default_rng(5)
    g = rng.standard_normal((4, 2 ** 16))
    mech = RejectionSamplingLinearQueries(g / np.linalg.norm(g, axis=0), 1.0, 10 ** 6)
    assert "_diameter_cache" not in mech._queries.__dict__
    assert 0 < mech.realized_epsilon <= 1.0


def test_the_vectorized_calibration_matches_the_scalar_closed_forms():
    from ldpdist.linear import rejection as rj

    u = np.array([0.0, 1e-3, 0.05, 0.3, 0.9, 1.4])
    for band in (0.01, 0.5, 2.0):
        for paper in (False, True):
            scale = 0.5 if paper else math.exp(-band)
            each = rj._acceptance_each(u, band, scale, paper)
            one = [rj.acceptance_probability(float(x), band, scale=scale, paper_faithful=paper)
                   for x in u]
            assert each.tolist() == one
        each = rj._rejection_each(u, band, -band)
        assert each.tolist() == [rj._rejection_probability(float(x), band, -band) for x in u]


# -- edges of the parameters ----------------------------------------------------------------

def test_columns_whose_squares_overflow_are_refused():
    huge = np.array([[1e308, -1e308], [0.0, 1.0]])   # once: sigma = inf
    for make in (lambda q: GaussianLinearQueries(q, 1.0, 1e-6),
                 lambda q: RejectionSamplingLinearQueries(q, 1.0, 1000),
                 l2_sensitivity):
        with pytest.raises(ValueError, match="too large for double precision"):
            make(huge)
    with pytest.raises(ValueError, match="too large for double precision"):
        GaussianLinearQueries(np.array([[1e200, -1e200]]), 1.0, 1e-6)
    # large but representable: accepted, finite sigma
    mech = GaussianLinearQueries(np.array([[1e150, -1e150]]), 1.0, 1e-6)
    assert math.isfinite(mech.sigma) and mech.sensitivity == 2e150


def test_columns_too_close_to_tell_apart_are_refused_not_given_sigma_zero():
    # 1e-170 apart: the squared distance underflows to 0, so the old scan gave Δ2 = 0 and
    # sigma = 0, and every report revealed its user's column exactly.
    tiny = np.array([[0.0, 1e-170]])
    assert scan(tiny)[0] == 0.0
    with pytest.raises(ValueError, match="underflow"):
        GaussianLinearQueries(tiny, 1.0, 1e-6)
    # identical columns are exactly Δ2 = 0 (nothing to hide), however small
    same = np.full((2, 3), 1e-170)
    assert GaussianLinearQueries(same, 1.0, 1e-6).sigma == 0.0


@pytest.mark.parametrize("epsilon", [1e6, 701.0, 1e-12, MIN_EPSILON / 2, 0.0, -1.0])
def test_gaussian_epsilon_outside_the_mechanisms_range_is_refused(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        GaussianLinearQueries(np.eye(2), epsilon, 1e-6)


def test_gaussian_epsilon_at_the_ends_of_the_range_is_accepted():
    for epsilon in (MIN_EPSILON, MAX_EPSILON):
        mech = GaussianLinearQueries(np.eye(2), epsilon, 1e-6)
        assert math.isfinite(mech.sigma) and mech.sigma > 0


@pytest.mark.parametrize("epsilon", [1e-12, MIN_EPSILON / 2])
def test_rejection_epsilon_below_the_range_is_refused(epsilon):
    # once accepted with sigma = 1.9e13
    with pytest.raises(ValueError, match="too small"):
        RejectionSamplingLinearQueries(np.eye(2), epsilon, 1000)
    assert math.isfinite(RejectionSamplingLinearQueries(np.eye(2), MIN_EPSILON, 1000).sigma)


def test_a_sigma_that_overflows_is_refused():
    # the paper's sigma = r sqrt(2 ln(2/δ))/ε with a huge declared r and a tiny ε
    with pytest.warns(UserWarning):
        with pytest.raises(ValueError, match="overflows double precision"):
            GaussianLinearQueries(np.eye(2), MIN_EPSILON, 1e-6, r=1e305, paper_faithful=True)
    with pytest.raises(ValueError, match="overflows double precision"):
        RejectionSamplingLinearQueries(np.eye(2), MIN_EPSILON, 1000, r=1e305)


def test_a_spec_whose_sensitivity_needed_the_opt_in_is_rebuilt_with_it():
    g = np.random.default_rng(5).standard_normal((6, 3000))
    sphere = g / np.linalg.norm(g, axis=0)
    with pytest.raises(ValueError, match="max_sensitivity_work"):
        GaussianLinearQueries(sphere, 1.0, 1e-6, max_sensitivity_work=10)
    protocol = GaussianLinearQueries(sphere, 1.0, 1e-6, max_sensitivity_work=None)
    spec = protocol.to_dict()
    with pytest.raises(ValueError, match="max_sensitivity_work"):
        GaussianLinearQueries.from_dict(spec, max_sensitivity_work=10)
    rebuilt = GaussianLinearQueries.from_dict(spec, max_sensitivity_work=None)
    assert rebuilt.sigma == protocol.sigma and rebuilt.to_dict() == spec
