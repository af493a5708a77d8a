"""Interoperability with the Hadamard Response authors' reference code (shipped in pure-ldp).

Skipped when pure-ldp (and its undeclared dependency statsmodels) is not installed.
"""

import random

import numpy as np
import pytest

import ldpdist

k2k_hadamard = pytest.importorskip(
    "pure_ldp.frequency_oracles.hadamard_response.internal.k2k_hadamard")


# The reference code calls random.randrange with float arguments (deprecated in 3.10).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("k,epsilon", [(10, 0.5), (100, 0.3), (1000, 0.6)])
def test_reference_reports_decode_to_the_reference_estimate(k, epsilon):
    # High-privacy HR (eps < ln 2): same K = 2^ceil(log2(k+1)), symbol x on row x+1.
    ref = k2k_hadamard.Hadamard_Rand_high_priv(k, epsilon)
    ours = ldpdist.HadamardResponse(k, epsilon)
    assert ours.output_size == ref.outsz
    rng = np.random.default_rng(k)
    values = rng.choice(k, size=20_000, p=rng.dirichlet(np.ones(k)))
    random.seed(k)  # the reference code samples with Python's global generator
    plain = np.asarray(ref.encode_string(values), dtype=np.uint64)
    reports = ours.as_reports(plain)  # made by another implementation: declared
    for normalization, decoder in ((0, "normalize"), (1, "project")):
        expected = ref.decode_string(list(plain), normalization=normalization)
        np.testing.assert_allclose(ours.estimate(reports, decoder=decoder), expected,
                                   rtol=0, atol=1e-9)
        # the reference-code alias takes the reference code's plain arrays as they are
        np.testing.assert_allclose(ours.decode_string(plain, normalization=normalization),
                                   expected, rtol=0, atol=1e-9)


def test_our_reports_follow_the_reference_channel():
    # Every report of symbol x lands in C_x = {z : H(x+1, z) = +1} with probability
    # e^eps / (e^eps + 1); the reference code's parity_check says which side z is on.
    k, epsilon, n = 20, 0.4, 40_000
    ref = k2k_hadamard.Hadamard_Rand_high_priv(k, epsilon)
    ours = ldpdist.HadamardResponse(k, epsilon)
    for x in (0, 7, 19):
        reports = ours.privatize(np.full(n, x), seed=x)
        inside = np.mean([ref.parity_check(x + 1, int(z)) == 0 for z in reports[:n]])
        expected = np.exp(epsilon) / (np.exp(epsilon) + 1)
        assert abs(inside - expected) < 5 * np.sqrt(expected * (1 - expected) / n)
