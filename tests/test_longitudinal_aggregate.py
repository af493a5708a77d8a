"""The memoized mechanisms' artifacts: the aggregator (sums, batch ids, merge, checksummed
state), reports files, and the count-level campaign simulation (its law against the
per-user campaign, unbiasedness, determinism)."""

from __future__ import annotations

import numpy as np
import pytest
import chi_square as stats  # scipy.stats without scipy (not a dependency)

import ldpdist
from ldpdist import DuplicateBatchError, IntegrityError, SpecMismatchError
from ldpdist.heavy_hitters import aggregator_from_bytes
from ldpdist.longitudinal import (DBitFlipPM, LongitudinalAggregator, LongitudinalGRR,
                                  LongitudinalOSUE, LongitudinalOUE, LongitudinalSOUE,
                                  LongitudinalSUE, MemoizedRAPPOR, make_secrets,
                                  simulate_campaign)

MECHS = [LongitudinalGRR(k=5, epsilon_infinity=2.0, epsilon_1=1.0),
         LongitudinalSUE(k=6, epsilon_infinity=2.0, epsilon_1=1.0),
         LongitudinalOUE(k=6, epsilon_infinity=4.0, epsilon_1=1.0),
         LongitudinalOSUE(k=9, epsilon_infinity=2.0, epsilon_1=1.0),
         LongitudinalSOUE(k=6, epsilon_infinity=4.0, epsilon_1=1.0),
         MemoizedRAPPOR(k=5), MemoizedRAPPOR(k=4, num_bits=10, num_hashes=2),
         DBitFlipPM(k=8, epsilon=1.0, d=2), DBitFlipPM(k=5, epsilon=2.0, d=1)]
IDS = [repr(m) for m in MECHS]


def _reports(mech, n=400, secret_seed=1, seed=2):
    values = np.arange(n) % mech.k
    return mech.privatize(values, make_secrets(n, seed=secret_seed), seed=seed)


# -- the aggregator ---------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS, ids=IDS)
def test_other_kinds_of_state_are_refused(mech):
    """(Reports and states of another spec of the same kind: the contract suite.)"""
    state = mech.aggregator().add(_reports(mech)).to_bytes()
    with pytest.raises(TypeError):
        mech.aggregator().merge(object())
    # a main mechanism's aggregator does not read this state, nor this one a heavy hitter's
    with pytest.raises(IntegrityError):
        ldpdist.Aggregator.from_bytes(state)
    hh = ldpdist.heavy_hitters.CountMeanSketch(2.0, m=64, d=4)
    with pytest.raises(SpecMismatchError):
        LongitudinalAggregator.from_bytes(hh.aggregator().to_bytes())
    with pytest.raises(TypeError, match="longitudinal mechanism"):
        LongitudinalAggregator(hh)
    with pytest.raises(TypeError, match="heavy-hitter protocol"):
        type(hh.aggregator())(mech)


def test_a_state_holding_a_main_mechanism_spec_is_refused():
    agg = MECHS[0].aggregator().add(_reports(MECHS[0]))
    # a valid state of a spec that has no aggregator of this state format
    agg.protocol = ldpdist.RandomizedResponse(k=5, epsilon=1.0)  # forge: a main mechanism
    with pytest.raises(IntegrityError, match="no aggregator"):
        aggregator_from_bytes(agg.to_bytes())


def test_malformed_reports():
    grr = MECHS[0]
    agg = grr.aggregator()
    with pytest.raises(ValueError, match=r"reports\[1\] is malformed"):
        agg.add(grr.as_reports(np.array([0, 7, 1], dtype=np.uint8)))
    assert agg.n == 0
    agg.add(grr.as_reports(np.array([0, 7, 1, 9], dtype=np.uint8)), on_invalid="drop")
    assert agg.n == 2 and agg.dropped == 2
    osue = MECHS[3]  # k = 9: 2 bytes per report, 7 padding bits
    rows = np.packbits(np.eye(9, dtype=np.uint8)[:3], axis=1)
    rows[2, 1] |= 1
    with pytest.raises(ValueError, match="padding"):
        osue.aggregator().add(osue.as_reports(rows))
    assert osue.aggregator().add(osue.as_reports(rows), on_invalid="drop").n == 2
    with pytest.raises(TypeError):
        osue.aggregator().add(osue.as_reports(np.zeros((2, 3), dtype=np.uint8)))
    dbf = MECHS[7]
    good = _reports(dbf, n=3)
    bad = np.asarray(good).copy()
    bad["buckets"][1] = [3, 3]
    with pytest.raises(ValueError, match="malformed"):
        dbf.aggregator().add(dbf.as_reports(bad))
    bad["buckets"][1] = [3, 8]
    assert dbf.aggregator().add(dbf.as_reports(bad), on_invalid="drop").dropped == 1


# -- the campaign simulation ------------------------------------------------------------


def test_simulated_batches_are_distinct_and_not_counted_twice():
    mech = MECHS[0]
    days = mech.simulate_campaign([10, 20, 30, 40, 50], T=3, seed=1)
    assert len({next(iter(d.batches)) for d in days}) == 3
    assert [next(iter(d.batches.values())) for d in days] == [
        f"simulate_campaign {t} of 3" for t in (1, 2, 3)]
    again = mech.simulate_campaign([10, 20, 30, 40, 50], T=3, seed=1)
    with pytest.raises(DuplicateBatchError):
        days[0].merge(again[0])  # the same simulated users
    days[0].merge(again[1])  # another collection: allowed
    assert days[0].n == 300
    assert mech.simulate([1, 2, 3, 4, 5], seed=1).n == 15


def _two_sample_p(a, b):
    """Chi-square p-value that two samples of hashable outcomes share one law (cells seen
    fewer than 10 times in both together are pooled)."""
    keys = sorted(set(a) | set(b))
    table = np.array([[a.count(k) for k in keys], [b.count(k) for k in keys]])
    rare = table.sum(axis=0) < 10
    table = np.column_stack([table[:, ~rare], table[:, rare].sum(axis=1)]) if rare.any() \
        else table
    table = table[:, table.sum(axis=0) > 0]
    return stats.chi2_contingency(table)[1]


LAW = [LongitudinalGRR(k=3, epsilon_infinity=1.0, epsilon_1=0.9),
       LongitudinalOSUE(k=3, epsilon_infinity=1.0, epsilon_1=0.9),
       LongitudinalSOUE(k=3, epsilon_infinity=3.0, epsilon_1=1.0),
       MemoizedRAPPOR(k=3, f=0.6, p=0.1, q=0.9),
       MemoizedRAPPOR(k=3, f=0.6, p=0.1, q=0.9, num_bits=4, num_hashes=2),
       DBitFlipPM(k=4, epsilon=1.0, d=2)]


@pytest.mark.parametrize("mech", LAW, ids=[repr(m) for m in LAW])
def test_simulate_campaign_has_the_law_of_campaign(mech):
    """Two-sample chi-square between the per-user campaign (HMAC memo, per-report rounds)
    and the count-level simulation, on the joint law of collection 1's first two sums (dBitFlipPM:
    also ones and sampled of bucket 0, and sampled of buckets 0 and 1) and of the first sum
    across collections 1 and 2 (the memo's correlation). 1500 campaigns of
    6 users each."""
    counts = np.array([3, 2, 1] + [0] * (mech.k - 3))
    values = np.repeat(np.arange(mech.k), counts)
    R = 1500
    reference, simulated = [], []
    for r in range(R):
        days = mech.campaign(values, T=2, secret_seed=10_000 + r, seed=r)
        reference.append([tuple(mech.aggregator().add(d).sums) for d in days])
        simulated.append([tuple(a.sums) for a in mech.simulate_campaign(counts, 2, seed=r)])
    keys = [lambda s: (s[0][0], s[0][1]), lambda s: (s[0][0], s[1][0])]
    if isinstance(mech, DBitFlipPM):  # (ones_0, sampled_0), (sampled_0, sampled_1)
        keys += [lambda s: (s[0][0], s[0][4]), lambda s: (s[0][4], s[0][5])]
    for key in keys:
        p = _two_sample_p([key(s) for s in reference], [key(s) for s in simulated])
        assert p > 1e-4, (mech, p)


def test_the_law_test_detects_a_fresh_memo_per_collection():
    """Power check: rounds drawn with independent memoized answers (what a wrong simulation
    would do) are told apart from the campaign."""
    mech = LAW[0]
    counts = np.array([3, 2, 1])
    values = np.repeat(np.arange(3), counts)
    reference, wrong = [], []
    for r in range(1500):
        days = mech.campaign(values, T=2, secret_seed=10_000 + r, seed=r)
        reference.append(tuple(mech.aggregator().add(d).sums[0] for d in days))
        wrong.append((mech.simulate(counts, seed=2 * r).sums[0],
                      mech.simulate(counts, seed=2 * r + 1).sums[0]))
    assert _two_sample_p(reference, wrong) < 1e-4


@pytest.mark.parametrize("k, d", [(5, 2), (6, 3), (4, 4), (7, 1)])
def test_simulated_bucket_subsets_are_uniform(k, d):
    """dBitFlipPM's simulation draws each user's buckets with Floyd's algorithm: every
    d-subset equally likely (chi-square over the C(k, d) subsets)."""
    from itertools import combinations

    from ldpdist.longitudinal.dbitflip import uniform_subsets

    chosen = uniform_subsets(np.random.default_rng(11), 30_000, k, d)
    assert (np.sort(chosen, axis=1)[:, 1:] != np.sort(chosen, axis=1)[:, :-1]).all()
    index = {c: i for i, c in enumerate(combinations(range(k), d))}
    observed = np.bincount([index[tuple(row)] for row in np.sort(chosen, axis=1).tolist()],
                           minlength=len(index))
    if len(index) > 1:
        assert stats.chisquare(observed).pvalue > 1e-4


SIM = [LongitudinalGRR(k=6, epsilon_infinity=2.0, epsilon_1=0.5),
       LongitudinalOUE(k=6, epsilon_infinity=4.0, epsilon_1=1.0),
       LongitudinalOSUE(k=6, epsilon_infinity=2.0, epsilon_1=0.5),
       MemoizedRAPPOR(k=6), MemoizedRAPPOR(k=4, num_bits=10, num_hashes=2),
       DBitFlipPM(k=6, epsilon=1.0, d=2)]


@pytest.mark.parametrize("mech", SIM, ids=[repr(m) for m in SIM])
def test_simulated_estimates_are_unbiased(mech):
    """Mean of the raw estimates over 400 simulated campaigns (T = 2) within 4.5 standard
    errors of the truth, coordinate by coordinate."""
    counts = np.array([400, 100, 0, 250, 50, 200][:mech.k])
    counts[-1] += 1000 - counts.sum()
    truth = counts / counts.sum()
    estimates = np.array([[a.estimate() for a in mech.simulate_campaign(counts, 2, seed=s)]
                          for s in range(400)])  # (seeds, T, k)
    for t in range(2):
        sample = estimates[:, t, :]
        se = sample.std(axis=0, ddof=1) / np.sqrt(sample.shape[0])
        assert np.all(np.abs(sample.mean(axis=0) - truth) < 4.5 * se), (mech, t)


def test_simulate_campaign_at_scale():
    """Ten million users in a blink, with the error of ten million users."""
    rng = np.random.default_rng(3)
    k = 256
    p = rng.dirichlet(np.ones(k))
    counts = rng.multinomial(10_000_000, p)
    for mech in (LongitudinalGRR(k=k, epsilon_infinity=4.0, epsilon_1=2.0),
                 LongitudinalOSUE(k=k, epsilon_infinity=4.0, epsilon_1=2.0),
                 MemoizedRAPPOR(k=k)):
        days = mech.simulate_campaign(counts, T=5, seed=1)
        assert all(d.n == 10_000_000 for d in days)
        errors = [np.abs(d.estimate() - counts / counts.sum()).max() for d in days]
        assert max(errors) < 0.01, (mech, errors)
        # the memoized answers are shared: collections agree more with each other than
        # with the truth would allow if they were independent draws is not asserted here;
        # the law test above covers it


def test_simulate_campaign_bad_input():
    mech = MECHS[0]
    with pytest.raises(ValueError, match="shape"):
        mech.simulate_campaign([1, 2, 3], T=2)
    with pytest.raises(ValueError, match=">= 0"):
        mech.simulate_campaign([1, -2, 3, 0, 0], T=2)
    with pytest.raises(TypeError):
        mech.simulate_campaign([1.0, 2.0, 3.0, 0.0, 0.0], T=2)
    with pytest.raises(ValueError, match="no users"):
        mech.simulate_campaign([0] * 5, T=2)
    with pytest.raises(ValueError):
        mech.simulate_campaign([1] * 5, T=0)
    with pytest.raises(TypeError):
        simulate_campaign(object(), [1] * 5, 2)
