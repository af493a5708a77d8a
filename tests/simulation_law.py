"""The law of ``simulate`` for index mechanisms, checked against the exact channel.

``simulate(true_counts)`` must be distributed exactly as the aggregate of privatizing
``true_counts[x]`` users of each value x: a sum of independent multinomials, one per value,
with rows of the channel matrix Q. Its mean is ``E_z = Σ_x c_x Q[x, z]`` and its variance
``V_z = Σ_x c_x Q[x, z] (1 − Q[x, z])``, both computed exactly here from ``channel_matrix()``.

A mechanism whose users are not independent given their values declares the exact law of its
simulation instead: ``mech._simulation_moments(true_counts)`` returns the per-output mean and
variance (one-bit Hadamard Response: users in a uniformly random order fill the groups
round-robin, so group sizes are fixed and group contents hypergeometric), and the same
checks run against those.
"""

from __future__ import annotations

import numpy as np


def assert_simulate_is_exact_in_law(mech, true_counts, runs: int = 200, seed0: int = 0) -> None:
    """Fail unless ``runs`` simulations match the exact per-output mean and variance.

    Means: every output within 5 standard errors (``sqrt(V/runs)``). Variances: every output
    with ``V_z ≥ 1`` has a sample variance within [0.55, 1.6]·V_z; at 200 runs the ratio's
    standard deviation is about 0.1, so the band is 4.5 to 6 deviations wide on each side.
    Also checks the total, the seed's reproducibility, and that another seed changes counts.
    """
    true_counts = np.asarray(true_counts, dtype=np.uint64)
    moments = getattr(mech, "_simulation_moments", None)
    if moments is not None:
        mean, var = moments(true_counts)
    else:
        q = mech.channel_matrix()
        c = true_counts.astype(float)
        mean = c @ q
        var = c @ (q * (1 - q))
    draws = np.array([mech.simulate(true_counts, seed=seed0 + r).counts for r in range(runs)],
                     dtype=float)
    assert (draws.sum(axis=1) == true_counts.sum()).all()
    z = np.abs(draws.mean(axis=0) - mean) / np.sqrt(np.maximum(var, 1e-12) / runs)
    assert z.max() < 5, f"simulated means off by {z.max():.1f} standard errors"
    busy = var >= 1
    assert busy.any()
    ratio = draws.var(axis=0, ddof=1)[busy] / var[busy]
    assert ((ratio > 0.55) & (ratio < 1.6)).all(), f"variance ratios {np.round(ratio, 2)}"
    again = mech.simulate(true_counts, seed=seed0).counts
    np.testing.assert_array_equal(again, draws[0])
    assert not np.array_equal(mech.simulate(true_counts, seed=seed0 + runs).counts, again)
