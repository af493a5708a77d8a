"""The sparse-estimation presets: the paper's qualitative findings hold on quick grids."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from ldpdist.experiments import PRESETS, run_grid


def _mean_tv(rows):
    """Mean d_TV per (mechanism, decoder, ε, support)."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row["mechanism"], row["decoder"], row["epsilon"], row["support"])].append(
            row["l1"] / 2)
    return {key: float(np.mean(values)) for key, values in groups.items()}


@pytest.fixture(scope="module")
def sparse_ldp_rows():
    # the quick grid of sparse-ldp, s <= 64 (where the paper's curves separate), one run
    preset = PRESETS["sparse-ldp"].grid(quick=True, runs=1)
    points = [p for p in preset.points() if int(p.distribution.split(":")[1]) <= 64]
    assert {int(p.distribution.split(":")[1]) for p in points} == {2, 8, 32}
    return run_grid(points, seed=0)


def test_sparse_projection_beats_plain_projection_for_small_supports(sparse_ldp_rows):
    tv = _mean_tv(sparse_ldp_rows)
    for epsilon in (0.5, 0.9):
        for support in (2, 8, 32):
            sparse = tv[("1-bit HR", "sparse_project", epsilon, support)]
            plain = tv[("1-bit HR", "project", epsilon, support)]
            assert sparse < plain, (epsilon, support, sparse, plain)


def test_error_falls_as_the_support_shrinks_and_as_epsilon_grows(sparse_ldp_rows):
    tv = _mean_tv(sparse_ldp_rows)
    for epsilon in (0.5, 0.9):
        curve = [tv[("1-bit HR", "sparse_project", epsilon, s)] for s in (2, 8, 32)]
        assert curve == sorted(curve), (epsilon, curve)
    for s in (8, 32):
        assert (tv[("1-bit HR", "sparse_project", 0.9, s)]
                < tv[("1-bit HR", "sparse_project", 0.5, s)])


def test_sparse_comm_more_bits_lower_error():
    preset = PRESETS["sparse-comm"].grid(quick=True, runs=1)
    points = [p for p in preset.points() if p.distribution in ("unif:8", "unif:32")]
    rows = run_grid(points, seed=0)
    assert {row["path"] for row in rows} == {"simulate-ideal-hash"}
    assert {row["epsilon"] for row in rows} == {""}
    tv = _mean_tv(rows)
    for s in (8, 32):
        one, seven = tv[("PCH ℓ=1", "two_stage", "", s)], tv[("PCH ℓ=7", "two_stage", "", s)]
        assert seven < one, (s, one, seven)
