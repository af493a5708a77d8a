"""The noise-level rule that chooses s for the sparse decoders when it is not given
(``decoders.noise_level_sparsity``)."""

from __future__ import annotations

import numpy as np
import pytest

import ldpdist
from ldpdist import kernels
from ldpdist.decoders import chosen_sparsity, noise_level_sparsity


def brute_force_rule(raw: np.ndarray) -> int:
    """The documented criterion, scored candidate by candidate with the projection kernel."""
    k = raw.size
    sigma = np.median(np.abs(raw)) / 0.6745
    scores = []
    for s in range(1, k + 1):
        residual = raw - kernels.project_sparse_simplex(raw, s)
        scores.append(residual @ residual + 2 * sigma**2 * s * np.log(np.e * k / s))
    return int(np.argmin(scores)) + 1


@pytest.mark.parametrize("seed", range(12))
def test_vectorized_rule_equals_the_criterion(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 300))
    raw = rng.normal(scale=10.0 ** rng.uniform(-4, -1), size=k)
    support = rng.choice(k, size=int(rng.integers(1, k + 1)), replace=False)
    raw[support] += rng.dirichlet(np.ones(support.size))
    assert noise_level_sparsity(raw) == brute_force_rule(raw)


def test_rule_finds_a_support_that_stands_out_and_refuses_bad_input():
    rng = np.random.default_rng(5)
    raw = rng.normal(scale=1e-3, size=5000)
    raw[[3, 70, 900, 4000]] += 0.25
    assert noise_level_sparsity(raw) == 4
    for bad in (np.zeros((2, 2)), np.array([]), np.array([0.5, np.nan])):
        with pytest.raises(ValueError, match="raw estimate"):
            noise_level_sparsity(bad)


def _sparse_case(s, n, seed=3, k=10_000):
    rng = np.random.default_rng(seed)
    p = np.zeros(k)
    p[rng.choice(k, s, replace=False)] = 1 / s
    mech = ldpdist.HadamardResponse(k, 0.5)
    return mech, p, mech.simulate(rng.multinomial(n, p), seed=seed)


def test_sparse_project_without_s_matches_the_known_s_at_high_snr():
    # Unif(10) at n = 10^6, eps = 0.5: the support stands far out of the noise; the rule
    # may add a noise atom or two (small: the projection gives it little mass)
    mech, p, agg = _sparse_case(10, 10**6)
    assert 10 <= chosen_sparsity(mech, agg.counts, agg.n, "sparse_project") <= 12
    auto = np.abs(agg.estimate("sparse_project") - p).sum()
    known = np.abs(agg.estimate("sparse_project", sparsity=10) - p).sum()
    projected = np.abs(agg.estimate("project") - p).sum()
    assert auto <= 1.5 * known and auto < projected / 3, (auto, known, projected)


def test_sparse_project_without_s_beats_plain_projection_at_low_snr():
    # Unif(100) at n = 10^6, eps = 0.5: the support is mostly below the noise; the rule
    # then picks fewer atoms than s (measured 60-70) and lands between the known-s decoder
    # and the plain projection, never at the ℓ1 ≈ 1.9 a tiny s would give
    mech, p, agg = _sparse_case(100, 10**6)
    s = chosen_sparsity(mech, agg.counts, agg.n, "sparse_project")
    auto = np.abs(agg.estimate("sparse_project") - p).sum()
    projected = np.abs(agg.estimate("project") - p).sum()
    known = np.abs(agg.estimate("sparse_project", sparsity=100) - p).sum()
    assert 20 <= s <= 100, s
    assert known - 0.05 <= auto < projected, (known, auto, projected)


def test_two_stage_decoders_without_s_read_the_first_stage():
    rng = np.random.default_rng(1)
    k, s = 5000, 4
    p = np.zeros(k)
    p[rng.choice(k, s, replace=False)] = 1 / s
    mech = ldpdist.TwoStageRAPPOR(k, 0.9)
    agg = mech.simulate(rng.multinomial(10**6, p), seed=2)
    first = mech._first_stage_raw(agg.counts, agg.n)
    assert chosen_sparsity(mech, agg.counts, agg.n, "two_stage") == noise_level_sparsity(first)
    assert noise_level_sparsity(first) == s
    for decoder in ("two_stage", "two_stage_project"):
        np.testing.assert_array_equal(agg.estimate(decoder), agg.estimate(decoder, sparsity=s))
    with pytest.raises(ValueError, match="takes no sparsity"):
        chosen_sparsity(mech, agg.counts, agg.n, "project")
