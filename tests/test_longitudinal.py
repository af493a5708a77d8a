"""Memoized (longitudinal) mechanisms, mechanism by mechanism: the realized probabilities
against the published closed forms, the documented HMAC stream, what a campaign repeats,
and each mechanism's own parameters. The checks every mechanism shares (exact ε from the
channels, unbiasedness, sampler fidelity, memoization, determinism, specs, the aggregator,
bad input, the command line) are in tests/test_longitudinal_contract.py."""

from __future__ import annotations

import hashlib
import hmac
import math
import struct

import numpy as np
import pytest
import chi_square as stats  # scipy.stats without scipy (not a dependency)

from ldpdist.longitudinal import (DBitFlipPM, LongitudinalGRR, LongitudinalOSUE, LongitudinalOUE,
                                  LongitudinalSOUE, LongitudinalSUE, MemoizedRAPPOR,
                                  make_secrets)
from ldpdist.longitudinal.base import max_log_ratio, memo_words

UNARY = [LongitudinalSUE, LongitudinalOUE, LongitudinalOSUE, LongitudinalSOUE]
EPSILONS = [(2.0, 1.0), (4.0, 0.5), (1.0, 0.5), (6.0, 2.0)]


# -- the realized probabilities against the closed forms -------------------------------------

def _reference_grr_p2(k, p1, q1, e1):
    """p2 of L-GRR in the closed form published with the authors' library: it solves
    (p1 p2 + q1 q2) / (p1 q2 + q1 p2) = e^ε1, which is the one-report ratio for k = 2 only."""
    E = math.exp(e1)
    return (q1 - E * p1) / (-p1 * E + k * q1 * E - q1 * E - p1 * (k - 1) + q1)


@pytest.mark.parametrize("ei,e1", EPSILONS)
def test_grr_second_round_against_the_closed_form(ei, e1):
    # k = 2: the exact solve is the published closed form
    mech = LongitudinalGRR(k=2, epsilon_infinity=ei, epsilon_1=e1)
    pr = mech.probabilities()
    assert pr["p2"] == pytest.approx(_reference_grr_p2(2, pr["p1"], pr["q1"], e1), abs=1e-12)
    assert mech.epsilon_1 == pytest.approx(math.log(pr["p_s"] / pr["q_s"]), abs=1e-15)
    # k > 2: the closed form leaves out the (k - 2) q1 q2 paths into a given other value,
    # so its exact one-report ε is below ε_1 (conservative); the exact solve reaches ε_1
    k = 5
    mech = LongitudinalGRR(k=k, epsilon_infinity=ei, epsilon_1=e1)
    pr = mech.probabilities()
    p2 = _reference_grr_p2(k, pr["p1"], pr["q1"], e1)
    q2 = (1 - p2) / (k - 1)
    ps, qs = q2 + (p2 - q2) * pr["p1"], q2 + (p2 - q2) * pr["q1"]
    assert math.log(ps / qs) < e1 - 1e-3
    assert pr["p2"] > p2
    assert mech.epsilon_1 == pytest.approx(e1, abs=1e-12)
    # a GRR chained with a GRR is a GRR: ε_1 = ln(p_s / q_s)
    assert mech.epsilon_1 == pytest.approx(math.log(pr["p_s"] / pr["q_s"]), abs=1e-15)


@pytest.mark.parametrize("ei,e1", EPSILONS)
def test_unary_second_rounds_match_closed_forms(ei, e1):
    # L-OSUE (OUE then SUE): p2 = (1 - e^(ε1+ε∞)) / (e^ε1 - e^ε∞ - e^(ε1+ε∞) + 1)
    osue = LongitudinalOSUE(k=4, epsilon_infinity=ei, epsilon_1=e1).probabilities()
    a, b = math.exp(e1), math.exp(ei)
    assert osue["p2"] == pytest.approx((1 - a * b) / (a - b - a * b + 1), abs=1e-12)
    assert osue["q2"] == 1 - osue["p2"]
    assert (osue["p1"], osue["q1"]) == (0.5, pytest.approx(1 / (b + 1), abs=1e-15))
    # L-SUE (SUE then SUE): the chain is SUE with p_s = e^(ε1/2) / (e^(ε1/2) + 1), so
    # p2 = (p_s - q1) / (p1 - q1)
    sue = LongitudinalSUE(k=4, epsilon_infinity=ei, epsilon_1=e1).probabilities()
    ps = math.exp(e1 / 2) / (math.exp(e1 / 2) + 1)
    assert sue["p1"] == pytest.approx(math.exp(ei / 2) / (math.exp(ei / 2) + 1), abs=1e-15)
    assert sue["p2"] == pytest.approx((ps - sue["q1"]) / (sue["p1"] - sue["q1"]), abs=1e-12)
    assert sue["p_s"] + sue["q_s"] == pytest.approx(1, abs=1e-15)


def test_loue_matches_the_reference_closed_form():
    # q2 of L-OUE (OUE then OUE, p2 = 1/2) in closed form, as published with the
    # authors' library (a root of the quadratic of ε_1)
    for ei, e1 in [(2.0, 1.0), (4.0, 0.5), (6.0, 2.0)]:
        x, y = e1, ei
        E = math.exp
        q2 = ((-1.11803398874989 * math.sqrt(
            0.1 * E(x) + 0.05 * E(2 * x) + 0.3 * E(y) + 0.45 * E(2 * y) - E(x + y)
            - 0.7 * E(x + 2 * y) + 0.3 * E(2 * x + y) + 0.45 * E(2 * x + 2 * y) + 0.05)
            - 0.25 * E(x) - 0.25 * E(y) + 0.75 * E(x + y) - 0.25) * E(-y)) / (E(x) - 1.0)
        pr = LongitudinalOUE(k=4, epsilon_infinity=ei, epsilon_1=e1).probabilities()
        assert pr["p2"] == 0.5
        assert pr["q2"] == pytest.approx(q2, abs=1e-9)  # the published constants have 15 digits


def test_rappor_closed_forms():
    for f, p, q in [(0.5, 0.5, 0.75), (0.2, 0.25, 0.9), (1.0, 0.1, 0.6)]:
        mech = MemoizedRAPPOR(k=6, f=f, p=p, q=q)
        assert mech.epsilon_infinity == pytest.approx(2 * math.log((1 - f / 2) / (f / 2)),
                                                      abs=1e-12)
        qs = 0.5 * f * (p + q) + (1 - f) * q
        ps = 0.5 * f * (p + q) + (1 - f) * p
        assert mech.epsilon_1 == pytest.approx(
            abs(math.log(qs * (1 - ps) / (ps * (1 - qs)))), abs=1e-12)
    # Bloom with h hashes: ε_∞ = 2h ln((1 - f/2)/(f/2)) when the bits of two values never
    # collide; in general max over pairs of |S_x Δ S_y| ln((1 - f/2)/(f/2))
    bloom = MemoizedRAPPOR(k=4, num_bits=10, num_hashes=2)
    sets = [set(np.flatnonzero(row)) for row in bloom.bloom_bits]
    largest = max(len(a ^ b) for a in sets for b in sets)
    assert largest <= 4
    assert bloom.epsilon_infinity == pytest.approx(largest * math.log(0.75 / 0.25), abs=1e-12)
    assert bloom.epsilon_infinity == pytest.approx(max_log_ratio(bloom.memo_channel_matrix()),
                                                   abs=1e-12)


def test_expected_estimate_detects_a_wrong_estimator():
    mech = LongitudinalOSUE(k=4, epsilon_infinity=2.0, epsilon_1=1.0)
    p = np.array([0.1, 0.2, 0.3, 0.4])
    # the one-round OUE estimator applied to the chained reports is biased: the check sees it
    pr = mech.probabilities()
    expected_bits = (p @ mech.channel_matrix()) @ mech._support_of_outputs()
    wrong = (expected_bits - pr["q1"]) / (pr["p1"] - pr["q1"])
    assert np.abs(wrong - p).max() > 1e-3


# -- memoization ------------------------------------------------------------------------------

def test_memo_stream_is_the_documented_hmac():
    mech = LongitudinalGRR(k=5, epsilon_infinity=2.0, epsilon_1=1.0)
    secret = bytes(range(32))
    fp = bytes.fromhex(mech.fingerprint)
    words = memo_words(secret, fp, 3, 6)
    expected = []
    for block in range(2):
        msg = b"ldpdist-memo-v1\x00" + fp + struct.pack("<Q", 3) + struct.pack("<Q", block)
        digest = hmac.new(secret, msg, hashlib.sha256).digest()
        expected += [int.from_bytes(digest[8 * i:8 * i + 8], "little") for i in range(4)]
    assert [int(w) for w in words] == expected[:6]
    # the memoized GRR answer follows the documented use of the words
    p1_threshold = mech._n1
    answer = mech.memo([3], [secret])[0]
    if expected[0] >> 11 < p1_threshold:
        assert answer == 3
    else:
        assert answer != 3


def test_campaign_reuses_the_memo_across_collections():
    mech = LongitudinalGRR(k=4, epsilon_infinity=3.0, epsilon_1=1.0)
    values = np.array([2] * 40)
    T = 300
    collections = mech.campaign(values, T, secret_seed=5, seed=6)
    assert len(collections) == T and all(c.shape == (40,) for c in collections)
    memo = mech.memo(values, make_secrets(40, seed=5))
    reports = np.stack([np.asarray(c) for c in collections])  # (T, n)
    # each user's T reports follow the per-report row of their memoized answer (not the
    # chained row of their value): memoization is what a campaign repeats
    q2 = mech.instant_channel_matrix()
    chi2, df = 0.0, 0
    for user in range(40):
        counts = np.bincount(reports[:, user], minlength=4)
        expected = T * q2[memo[user]]
        chi2 += float(((counts - expected) ** 2 / expected).sum())
        df += 3
    assert stats.chi2.sf(chi2, df) > 1e-3
    # the chained row would be rejected for users whose memo differs from their value
    moved = np.flatnonzero(memo != 2)
    assert moved.size > 0
    chained = mech.channel_matrix()[2]
    chi2 = sum(float(((np.bincount(reports[:, u], minlength=4) - T * chained) ** 2
                      / (T * chained)).sum()) for u in moved)
    assert stats.chi2.sf(chi2, 3 * moved.size) < 1e-6


def test_campaign_unary_memo_is_fixed():
    mech = LongitudinalSUE(k=3, epsilon_infinity=3.0, epsilon_1=2.9)  # p2 close to 1
    values = np.array([0, 1, 2, 0])
    collections = mech.campaign(values, 50, secret_seed=1, seed=2)
    memo = mech.memo(values, make_secrets(4, seed=1))
    bits = np.stack([np.unpackbits(np.asarray(c), axis=1, count=3) for c in collections])
    agree = (bits == memo[None]).mean()
    assert agree == pytest.approx(mech.probabilities()["p2"], abs=0.03)


def test_estimates_concentrate():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    values = rng.choice(4, size=8000, p=p)
    for mech in [LongitudinalGRR(k=4, epsilon_infinity=4.0, epsilon_1=2.0),
                 LongitudinalOSUE(k=4, epsilon_infinity=4.0, epsilon_1=2.0),
                 MemoizedRAPPOR(k=4, f=0.25, p=0.25, q=0.75)]:
        reports = mech.privatize(values, make_secrets(values.size, seed=3), seed=4)
        est = mech.estimate(reports)
        # a few standard deviations (each below 0.03 at this n and ε)
        assert np.abs(est - np.bincount(values, minlength=4) / values.size).max() < 0.1
        projected = mech.estimate(reports, decoder="project")
        assert projected.min() >= 0 and projected.sum() == pytest.approx(1)


# -- each mechanism's own parameters -----------------------------------------------------------

@pytest.mark.parametrize("cls", [LongitudinalGRR, *UNARY])
def test_epsilon_1_below_epsilon_infinity(cls):
    # (ε <= 0, not finite, not a number: the contract's bad-input check)
    with pytest.raises(ValueError, match="epsilon_1 must be < epsilon_infinity"):
        cls(k=4, epsilon_infinity=1.0, epsilon_1=1.0)
    with pytest.raises(ValueError, match="epsilon_1 must be < epsilon_infinity"):
        cls(k=4, epsilon_infinity=1.0, epsilon_1=2.0)


def test_oue_second_round_reach():
    with pytest.raises(ValueError, match="reaches at most epsilon_1"):
        LongitudinalOUE(k=4, epsilon_infinity=1.0, epsilon_1=0.9)


def test_bad_rappor_parameters():
    with pytest.raises(ValueError, match="f must be > 0"):
        MemoizedRAPPOR(k=4, f=0.0)
    with pytest.raises(ValueError, match="probability"):
        MemoizedRAPPOR(k=4, f=1.5)
    with pytest.raises(ValueError, match="must differ"):
        MemoizedRAPPOR(k=4, p=0.5, q=0.5)
    with pytest.raises(ValueError):
        MemoizedRAPPOR(k=4, q=float("nan"))
    with pytest.raises(ValueError, match="num_hashes = 1"):
        MemoizedRAPPOR(k=4, num_hashes=2)
    collide = MemoizedRAPPOR(k=4, num_bits=8, num_hashes=2)  # two values share their bits
    assert np.linalg.matrix_rank(collide.bloom_bits.astype(float)) < 4  # (this spec's hash)
    reports = collide.privatize([0, 1], make_secrets(2, seed=0), seed=0)
    with pytest.raises(ValueError, match="rank"):
        collide.estimate(reports)


# -- dBitFlipPM --------------------------------------------------------------------------------

def test_dbitflip_closed_forms():
    for eps in (0.5, 1.0, 3.0):
        p = math.exp(eps / 2) / (math.exp(eps / 2) + 1)
        for d in (1, 2, 3):
            mech = DBitFlipPM(k=4, epsilon=eps, d=d)
            assert mech.probabilities()["p"] == pytest.approx(p, abs=1e-15)
            # two values can both be among the buckets only when d >= 2
            expected = eps if d >= 2 else eps / 2
            assert mech.epsilon_1 == pytest.approx(expected, abs=1e-12)
            assert mech.epsilon_1 <= expected + 1e-15
            assert mech.epsilon_infinity == mech.epsilon_1


def test_dbitflip_memoization():
    mech = DBitFlipPM(k=16, epsilon=1.0, d=4)
    secrets = make_secrets(200, seed=3)
    a = mech.memo(np.zeros(200, dtype=int), secrets)
    b = mech.memo(np.full(200, 7), secrets)
    # the buckets depend on the secret only; the bits on the secret and the value
    assert np.array_equal(a["buckets"], b["buckets"])
    assert not np.array_equal(a["bits"], b["bits"])
    assert (np.diff(a["buckets"].astype(int), axis=1) > 0).all()
    assert not np.array_equal(a["buckets"], mech.memo(np.zeros(200, dtype=int),
                                                      make_secrets(200, seed=4))["buckets"])
    # a campaign reports the memoized answer every time (no per-report round)
    days = mech.campaign(np.arange(200) % 16, 3, secret_seed=3, seed=1)
    assert days[0].tobytes() == days[1].tobytes() == days[2].tobytes()
    assert days[0].tobytes() == mech.memo(np.arange(200) % 16, secrets).tobytes()


def test_dbitflip_buckets_are_uniform_subsets():
    mech = DBitFlipPM(k=5, epsilon=1.0, d=2)
    n = 5000
    buckets = mech.memo(np.zeros(n, dtype=int), make_secrets(n, seed=8))["buckets"]
    pair = buckets[:, 0] * 5 + buckets[:, 1]
    counts = np.bincount(pair, minlength=25)
    subsets = [a * 5 + b for a in range(5) for b in range(a + 1, 5)]
    assert counts.sum() == counts[subsets].sum()
    chi2 = float(((counts[subsets] - n / 10) ** 2 / (n / 10)).sum())
    assert stats.chi2.sf(chi2, 9) > 1e-3


def test_dbitflip_estimate_and_bad_input():
    rng = np.random.default_rng(1)
    p = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0, 0.0])
    values = rng.choice(8, size=6000, p=p)
    mech = DBitFlipPM(k=8, epsilon=3.0, d=4)
    est = mech.estimate(mech.privatize(values, make_secrets(values.size, seed=2)))
    assert np.abs(est - np.bincount(values, minlength=8) / values.size).max() < 0.08
    with pytest.raises(ValueError):
        DBitFlipPM(k=4, epsilon=1.0, d=5)
    with pytest.raises(ValueError):
        DBitFlipPM(k=4, epsilon=1.0, d=0)
    with pytest.raises(ValueError):
        DBitFlipPM(k=4, epsilon=float("nan"), d=2)
    with pytest.raises(ValueError, match="values must lie in"):
        mech.privatize([8], make_secrets(1, seed=0))
    reports = mech.privatize([1, 2], make_secrets(2, seed=0))
    broken = np.asarray(reports).copy()
    broken["buckets"][0] = [3, 2, 1, 0]
    with pytest.raises(ValueError, match="increasing"):
        mech.estimate(mech.as_reports(broken))
    broken = np.asarray(reports).copy()
    broken["bits"][0, 0] = 2
    with pytest.raises(ValueError, match="malformed"):
        mech.estimate(mech.as_reports(broken))
