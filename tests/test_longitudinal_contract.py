"""The contract every memoized (longitudinal) mechanism meets, checked over ONE list of
small instances (``FACTORIES``; a registered mechanism missing from it fails
``test_every_registered_mechanism_is_in_the_contract``):

- exact ε: ε_∞ and ε_1 recomputed from the realized channels (the permanent round's, the
  instantaneous round's and their composition, which must be the stated one-report channel)
  equal the stated ones and never exceed the requested ones;
- exact unbiasedness from the exact expected report distribution (no sampling);
- sampler fidelity: chi-square of the memoized answers and of the reports against the exact
  channel rows (fixed seeds), with a power check against wrong rows;
- memoization: same secret and value, same memoized answer in every collection, a report is
  the instantaneous round applied to it; different secrets give independent answers;
- determinism (same seeds, same bytes), spec round trips and edited specs refused;
- the aggregator: state round trip (with the collection), merge = one aggregator, duplicate
  batches, corrupt states, reports or states of another spec or another collection refused,
  standard errors against the spread of simulated estimates;
- bad input with clear errors, and the command line (``ldpdist longitudinal``) end to end.

Nothing here is threaded (the HMAC stream and numpy's generators run in the calling
thread), so there is no thread-count check.
"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import chi_square as stats  # scipy.stats without scipy (not a dependency)

import ldpdist
from ldpdist import DuplicateBatchError, IntegrityError, SpecMismatchError
from ldpdist.heavy_hitters import aggregator_from_bytes
from ldpdist.longitudinal import (CollectionMismatchError, DBitFlipPM, LongitudinalAggregator,
                                  LongitudinalGRR, LongitudinalOSUE, LongitudinalOUE,
                                  LongitudinalSOUE, LongitudinalSUE, MemoizedRAPPOR,
                                  from_dict, make_secrets)
from ldpdist.longitudinal.base import _REGISTRY, max_log_ratio, product_channel

FACTORIES = [
    lambda: LongitudinalGRR(k=4, epsilon_infinity=2.0, epsilon_1=1.0),
    lambda: LongitudinalGRR(k=5, epsilon_infinity=4.0, epsilon_1=0.5),
    lambda: LongitudinalSUE(k=4, epsilon_infinity=2.0, epsilon_1=1.0),
    lambda: LongitudinalOUE(k=4, epsilon_infinity=4.0, epsilon_1=1.0),
    lambda: LongitudinalOSUE(k=4, epsilon_infinity=1.0, epsilon_1=0.5),
    lambda: LongitudinalSOUE(k=4, epsilon_infinity=4.0, epsilon_1=1.0),
    lambda: MemoizedRAPPOR(k=4),
    lambda: MemoizedRAPPOR(k=3, f=0.5, p=0.75, q=0.25),
    lambda: MemoizedRAPPOR(k=4, num_bits=10, num_hashes=2),
    lambda: DBitFlipPM(k=4, epsilon=1.5, d=1),
    lambda: DBitFlipPM(k=4, epsilon=2.0, d=2),
    lambda: DBitFlipPM(k=5, epsilon=3.0, d=3),
]
MECHS = [make() for make in FACTORIES]
IDS = [repr(m) for m in MECHS]
EPSILON_FIELDS = ("epsilon_infinity", "epsilon_1", "epsilon")


def test_every_registered_mechanism_is_in_the_contract():
    assert set(_REGISTRY) <= {type(m).__name__ for m in MECHS}, \
        "add the new longitudinal mechanism to FACTORIES"


@pytest.fixture(params=range(len(MECHS)), ids=IDS)
def mech(request):
    return FACTORIES[request.param]()


def _perturbed(mech, scale=1.15):
    """The same mechanism with every ε 15 % larger (RAPPOR: f 15 % smaller)."""
    spec = mech.to_dict()
    for key in EPSILON_FIELDS:
        if key in spec:
            spec[key] *= scale
    if "f" in spec:
        spec["f"] /= scale
    return from_dict(spec)


def _reports(mech, n=300, secret_seed=1, seed=2):
    return mech.privatize(np.arange(n) % mech.k, make_secrets(n, seed=secret_seed), seed=seed)


# -- exact ε from the realized channels ----------------------------------------------------


def _irr_channel(mech):
    """The instantaneous round's channel, from memoized answers to reports, built from the
    realized probabilities (rows and columns indexed as in ``memo_channel_matrix``)."""
    if isinstance(mech, LongitudinalGRR):
        return mech.instant_channel_matrix()
    if isinstance(mech, DBitFlipPM):  # the report is the memoized answer
        return np.eye(mech.channel_matrix().shape[1])
    pr = mech.probabilities()
    one_if_1, one_if_0 = (pr["q"], pr["p"]) if isinstance(mech, MemoizedRAPPOR) else \
        (pr["p2"], pr["q2"])
    m = mech.output_size
    memo_bits = (np.arange(1 << m)[:, None] >> np.arange(m)[None, :]) & 1
    return product_channel(np.where(memo_bits == 1, one_if_1, one_if_0))


def _requested(mech):
    """(ε_1, ε_∞) asked for; RAPPOR's follow from f, p, q and the hashes h (every value's h
    bits distinct): ε_∞ = 2h ln((1 - f/2)/(f/2)), ε_1 = h ln(q*(1 - p*)/(p*(1 - q*)))."""
    spec = mech.to_dict()
    if "epsilon_1" in spec:
        return spec["epsilon_1"], spec["epsilon_infinity"]
    if "epsilon" in spec:
        return spec["epsilon"], spec["epsilon"]
    half, p, q, h = spec["f"] / 2, spec["p"], spec["q"], spec["num_hashes"]
    q_star, p_star = (1 - half) * q + half * p, half * q + (1 - half) * p
    return (h * abs(math.log(q_star * (1 - p_star) / (p_star * (1 - q_star)))),
            2 * h * math.log((1 - half) / half))


def test_epsilons_are_the_realized_channels_max_log_ratios(mech):
    prr, irr, chained = mech.memo_channel_matrix(), _irr_channel(mech), mech.channel_matrix()
    for channel in (prr, irr, chained):
        assert np.allclose(channel.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert channel.min() >= 0
    composed = prr @ irr
    np.testing.assert_allclose(composed, chained, rtol=0, atol=1e-13)  # one report = PRR then IRR
    assert isinstance(mech.epsilon_1, float) and isinstance(mech.epsilon_infinity, float)
    assert mech.epsilon_infinity == pytest.approx(max_log_ratio(prr), rel=0, abs=1e-12)
    assert mech.epsilon_1 == pytest.approx(max_log_ratio(composed), rel=0, abs=1e-12)
    # post-processing: one report reveals at most what either round does
    assert 0 < mech.epsilon_1 <= min(mech.epsilon_infinity, max_log_ratio(irr)) + 1e-12


def _epsilon_grid(mech):
    """The factory's mechanism at other budgets (specs that cannot be built are skipped:
    an OUE per-report round does not reach every ε_1)."""
    spec = mech.to_dict()
    if "epsilon_1" in spec:
        changes = [{"epsilon_infinity": a, "epsilon_1": b}
                   for a, b in [(2.0, 1.0), (4.0, 0.5), (1.0, 0.5), (6.0, 2.0), (0.3, 0.1)]]
    elif "epsilon" in spec:
        changes = [{"epsilon": e} for e in (0.25, 1.0, 3.0, 6.0)]
    else:
        changes = [{"f": f, "p": p, "q": q}
                   for f, p, q in [(0.5, 0.5, 0.75), (0.2, 0.25, 0.9), (1.0, 0.1, 0.6)]]
    for change in changes:
        try:
            yield from_dict({**spec, **change})
        except ValueError as error:
            assert "reaches at most epsilon_1" in str(error)


def test_realized_epsilons_never_exceed_the_requested(mech):
    built = list(_epsilon_grid(mech))
    assert len(built) >= 3
    for m in built:
        asked_1, asked_inf = _requested(m)
        slack = 1e-12 if isinstance(m, MemoizedRAPPOR) else 0.0  # p, q: nearest grid point
        assert m.epsilon_1 <= asked_1 + slack and m.epsilon_infinity <= asked_inf + slack
        if isinstance(m, DBitFlipPM):  # d = 1: two values are never both among the buckets
            assert m.epsilon_1 == pytest.approx(asked_1 / (2 if m.d == 1 else 1), abs=1e-12)
        else:  # the grid rounding costs at most 1e-12 of the budget
            assert m.epsilon_1 == pytest.approx(asked_1, abs=1e-12)
            if not (isinstance(m, MemoizedRAPPOR) and m.to_dict()["num_bits"] is not None):
                assert m.epsilon_infinity == pytest.approx(asked_inf, abs=1e-12)


# -- exact unbiasedness ---------------------------------------------------------------------


def test_estimator_is_exactly_unbiased(mech):
    """The raw estimator applied to the exact expected sums (from the one-report channel)
    returns the distribution, for random and point-mass distributions."""
    rng = np.random.default_rng(3)
    for p in [*rng.dirichlet(np.ones(mech.k), size=3), np.eye(mech.k)[1]]:
        assert np.abs(mech.expected_estimate(p) - p).max() < 1e-12
    # and through an aggregator's sums: n p @ channel @ support, read by estimate()
    p = rng.dirichlet(np.ones(mech.k))
    expected_sums = 1000 * (p @ mech.channel_matrix()) @ mech._support_of_outputs()
    np.testing.assert_allclose(mech._raw_from_counts(expected_sums, 1000), p, rtol=0,
                               atol=1e-12)


# -- sampler fidelity -------------------------------------------------------------------------


def _output_index(mech, outputs):
    """Column of ``channel_matrix()`` of each memoized answer or report."""
    if isinstance(mech, DBitFlipPM):  # columns: bucket subsets in order, then 2^d bits
        powers = mech.k ** np.arange(mech.d)
        subsets = sorted({subset for subset, _ in mech._outputs()})
        lookup = {int(np.array(subset) @ powers): i for i, subset in enumerate(subsets)}
        keys = outputs["buckets"].astype(np.int64) @ powers
        subset = np.array([lookup[key] for key in keys.tolist()])
        return (subset << mech.d) + outputs["bits"].astype(np.int64) @ (1 << np.arange(mech.d))
    if mech.report_kind == "bits":
        if outputs.dtype == np.uint8:  # packed reports
            outputs = np.unpackbits(outputs, axis=1, count=mech.output_size)
        return outputs.astype(np.int64) @ (1 << np.arange(mech.output_size))
    return np.asarray(outputs, dtype=np.int64)


def _chi_square_p(observed, row):
    """Goodness of fit of outputs to a channel row, cells expected fewer than 5 times
    pooled; also the noncentrality n Σ (row - other)² / other is returned by _power."""
    n = observed.size
    counts = np.bincount(observed, minlength=row.size)
    keep = row * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(n * row[keep], n * row[~keep].sum())
    if (exp == 0).any() and obs[exp == 0].sum() > 0:
        return 0.0
    obs, exp = obs[exp > 0], exp[exp > 0]
    return stats.chi2.sf(float(((obs - exp) ** 2 / exp).sum()), obs.size - 1)


def _critical(df, alpha=1e-3):
    """The chi-square value of tail ``alpha`` (bisection on the tail)."""
    lo, hi = 0.0, 10.0 * df + 100.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stats.chi2.sf(mid, df) > alpha else (lo, mid)
    return hi


def _powerful(n, truth, wrong):
    """Whether the goodness-of-fit test of ``n`` draws from ``truth`` against ``wrong``
    rejects at 1e-3 with probability about 0.99 or more: the noncentral chi-square's mean
    df + λ (λ = n Σ (truth - wrong)² / wrong) at least three standard deviations
    sqrt(2 (df + 2λ)) above the critical value."""
    used = wrong > 0
    lam = n * float(((truth[used] - wrong[used]) ** 2 / wrong[used]).sum())
    df = int((n * wrong >= 5).sum())  # the cells kept, plus the pooled one, minus one
    return df + lam - 3 * math.sqrt(2 * (df + 2 * lam)) >= _critical(df)


N_SAMPLER = 3000


def test_sampler_follows_the_exact_channels(mech):
    """The memoized answers of 3000 users holding value 1 against the permanent round's row,
    their reports against the one-report row (p > 1e-3). Power: the same samples are
    rejected (p < 1e-3) against the row of another value, and against the rows of the
    mechanism with every ε 30 % larger (RAPPOR: f 30 % smaller) wherever this n gives that
    test a power of about 0.99 (:func:`_powerful`: the permanent round's rows of every
    mechanism here but dBitFlipPM with d = 1, the one-report rows of about half of them)."""
    value = 1
    values = np.full(N_SAMPLER, value)
    answers = mech.memo(values, make_secrets(N_SAMPLER, seed=21))
    memo = _output_index(mech, answers)
    # privatize is exactly this (test_memo_is_a_function_of_the_secret_and_the_value)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(22)))
    reports = _output_index(mech, mech._pack(mech._instant(answers, rng)))
    other = _perturbed(mech, 1.3)
    powered = []
    for observed, channel, wrong_channel in [
            (memo, mech.memo_channel_matrix(), other.memo_channel_matrix()),
            (reports, mech.channel_matrix(), other.channel_matrix())]:
        row = channel[value]
        assert _chi_square_p(observed, row) > 1e-3
        assert _chi_square_p(observed, channel[0]) < 1e-3  # another value's row
        wrong = wrong_channel[value]
        if _powerful(N_SAMPLER, row, wrong):
            powered.append(channel.shape == mech.memo_channel_matrix().shape
                           and np.array_equal(channel, mech.memo_channel_matrix()))
            assert _chi_square_p(observed, wrong) < 1e-3
    # the permanent round's check has that power for every mechanism here but one
    assert any(powered) or (isinstance(mech, DBitFlipPM) and mech.d == 1)


# -- memoization ------------------------------------------------------------------------------


def test_memo_is_a_function_of_the_secret_and_the_value(mech):
    values = np.arange(200) % mech.k
    secrets = make_secrets(200, seed=11)
    first = mech.memo(values, secrets)
    assert first.tobytes() == mech.memo(values, secrets).tobytes()
    assert first.tobytes() == mech.memo(values, [bytes(s) for s in secrets]).tobytes()
    # a user's memoized answer does not depend on the other users of the batch
    order = np.random.default_rng(0).permutation(200)
    assert mech.memo(values[order], secrets[order]).tobytes() == first[order].tobytes()
    # a report is the instantaneous round applied to it: every collection re-randomizes
    # the same memoized answers
    for seed in (5, 6):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
        expected = mech._pack(mech._instant(first, rng))
        assert mech.privatize(values, secrets, seed=seed).tobytes() == expected.tobytes()
    collections = mech.campaign(values, 3, secret_seed=11, seed=7)
    for t, child in enumerate(np.random.SeedSequence(7).spawn(3)):
        rng = np.random.Generator(np.random.PCG64(child))
        assert collections[t].tobytes() == mech._pack(mech._instant(first, rng)).tobytes()
    # another spec re-draws them (its fingerprint enters the HMAC stream)
    assert _perturbed(mech).memo(values, secrets).tobytes() != first.tobytes()


def _feature(mech, memo):
    """A small discrete summary of each memoized answer (for contingency tables), and the
    number of its values."""
    if isinstance(mech, DBitFlipPM):
        return memo["buckets"][:, 0].astype(np.int64) * 2 + memo["bits"][:, 0], 2 * mech.k
    if mech.report_kind == "bits":
        bits = min(3, mech.output_size)
        return memo[:, :bits].astype(np.int64) @ (1 << np.arange(bits)), 1 << bits
    return memo.astype(np.int64), mech.k


def test_different_secrets_give_independent_memos(mech):
    """Two independent sets of secrets, every user holding value 1: the joint table of the
    two memoized answers (a summary of them) fits the product of its margins (p > 1e-3);
    the same secrets twice are rejected (power)."""
    n = 1000
    values = np.full(n, 1)
    a, cells = _feature(mech, mech.memo(values, make_secrets(n, seed=1)))
    b, _ = _feature(mech, mech.memo(values, make_secrets(n, seed=2)))

    def independence_p(x, y):
        table = np.zeros((cells, cells))
        np.add.at(table, (x, y), 1)
        table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
        return stats.chi2_contingency(table)[1]

    assert independence_p(a, b) > 1e-3
    assert independence_p(a, a) < 1e-3


# -- determinism ------------------------------------------------------------------------------


def test_same_seeds_same_bytes(mech):
    values = np.arange(60) % mech.k
    secrets = make_secrets(60, seed=9)
    first = mech.privatize(values, secrets, seed=10)
    again = mech.privatize(values, secrets, seed=10)
    assert first.tobytes() == again.tobytes() and first.dtype == again.dtype
    fresh = mech.privatize(values, secrets, seed=11)
    if isinstance(mech, DBitFlipPM):  # no per-report randomness: the seed is unused
        assert fresh.tobytes() == first.tobytes()
    else:
        assert fresh.tobytes() != first.tobytes()
    assert mech.privatize(values, make_secrets(60, seed=8), seed=10).tobytes() != first.tobytes()
    days = [c.tobytes() for c in mech.campaign(values, 3, secret_seed=1, seed=2)]
    assert days == [c.tobytes() for c in mech.campaign(values, 3, secret_seed=1, seed=2)]
    assert len(set(days)) == (1 if isinstance(mech, DBitFlipPM) else 3)
    assert np.array_equal(make_secrets(5, seed=3), make_secrets(5, seed=3))
    assert not np.array_equal(make_secrets(5), make_secrets(5))
    counts = np.bincount(values, minlength=mech.k)
    simulated = [a.to_bytes() for a in mech.simulate_campaign(counts, 2, seed=5)]
    assert simulated == [a.to_bytes() for a in mech.simulate_campaign(counts, 2, seed=5)]
    assert simulated != [a.to_bytes() for a in mech.simulate_campaign(counts, 2, seed=6)]
    unseeded = mech.simulate(counts).batches.keys()  # random batch ids without a seed
    assert unseeded != mech.simulate(counts).batches.keys()


# -- specs ------------------------------------------------------------------------------------


def test_spec_round_trips_and_edited_specs_are_refused(mech):
    spec = mech.to_dict()
    assert json.loads(json.dumps(spec)) == spec
    for again in (from_dict(spec), ldpdist.from_dict(spec),
                  from_dict(json.loads(json.dumps(spec)))):
        assert again == mech and hash(again) == hash(mech)
        assert again.fingerprint == mech.fingerprint
        assert (again.epsilon_1, again.epsilon_infinity) == (mech.epsilon_1,
                                                             mech.epsilon_infinity)
    text = ldpdist.specs.to_json(mech)  # with the recorded fingerprint
    assert ldpdist.from_json(text) == mech
    edited = json.loads(text)
    key = next(k for k in (*EPSILON_FIELDS, "f") if k in edited)
    edited[key] = edited[key] * 0.9
    with pytest.raises(ValueError, match="recorded fingerprint"):
        ldpdist.from_dict(edited)
    with pytest.raises(ValueError, match="recorded fingerprint"):
        from_dict(edited)
    with pytest.raises(ValueError, match="unknown field"):
        from_dict({**spec, "extra": 1})
    with pytest.raises(ValueError, match="missing the field"):
        from_dict({k: v for k, v in spec.items() if k != "k"})
    with pytest.raises(ValueError, match="format"):
        from_dict({**spec, "format": 99})
    with pytest.raises(ValueError, match="unknown longitudinal mechanism"):
        from_dict({**spec, "mechanism": "LongitudinalNothing"})
    with pytest.raises(ValueError, match="unknown mechanism"):
        ldpdist.from_dict({**spec, "mechanism": "LongitudinalNothing"})
    with pytest.raises(ValueError, match="unknown longitudinal mechanism"):
        from_dict({"mechanism": "RandomizedResponse", "format": 1, "k": 3, "epsilon": 1.0})


# -- the aggregator ---------------------------------------------------------------------------


def test_aggregator_matches_the_one_shot_estimate(mech):
    reports = _reports(mech)
    agg = mech.aggregator().add(reports)
    assert isinstance(agg, LongitudinalAggregator) and agg.mechanism is mech
    assert agg.n == 300 and agg.sums.dtype == np.int64 and agg.collection is None
    np.testing.assert_allclose(agg.estimate(), mech.estimate(reports), rtol=0, atol=1e-12)
    np.testing.assert_allclose(agg.estimate("project"), mech.estimate(reports, "project"),
                               rtol=0, atol=1e-12)
    assert np.isclose(agg.estimate("project").sum(), 1.0)
    with pytest.raises(ValueError, match="decoder"):
        agg.estimate("nope")
    with pytest.raises(ValueError, match="empty"):
        mech.aggregator().estimate()


def test_state_round_trip(mech):
    agg = mech.aggregator().add(_reports(mech), batch_id="day-1", label="monday",
                                collection=4)
    state = agg.to_bytes()
    for back in (LongitudinalAggregator.from_bytes(state),
                 LongitudinalAggregator.from_bytes(state, expect=mech),
                 aggregator_from_bytes(state), pickle.loads(pickle.dumps(agg))):
        assert type(back) is LongitudinalAggregator and back.mechanism == mech
        np.testing.assert_array_equal(back.sums, agg.sums)
        assert back.n == agg.n and back.batches == {"day-1": "monday"}
        assert back.collection == 4
        np.testing.assert_array_equal(back.estimate(), agg.estimate())
        assert back.to_bytes() == state
    # a state without a collection stays without one
    plain = mech.aggregator().add(_reports(mech), batch_id="x")
    assert LongitudinalAggregator.from_bytes(plain.to_bytes()).collection is None


def test_merge_equals_one_aggregator(mech):
    reports = _reports(mech, n=600)
    whole = mech.aggregator().add(reports, batch_id="all")
    shards = [mech.aggregator().add(reports[i::3], batch_id=f"shard-{i}") for i in range(3)]
    merged = shards[0].merge(shards[1]).merge(shards[2])
    np.testing.assert_array_equal(merged.sums, whole.sums)
    assert merged.n == whole.n == 600
    np.testing.assert_allclose(merged.estimate(), whole.estimate(), rtol=0, atol=1e-12)
    restored = LongitudinalAggregator.from_bytes(
        mech.aggregator().add(reports[0::3], batch_id="a").to_bytes())
    restored.merge(LongitudinalAggregator.from_bytes(
        mech.aggregator().add(reports[1::3], batch_id="b").to_bytes()))
    restored.add(reports[2::3], batch_id="c")
    np.testing.assert_array_equal(restored.sums, whole.sums)


def test_duplicate_batches_are_refused(mech):
    reports = _reports(mech)
    agg = mech.aggregator().add(reports[:100], batch_id="day-1")
    before = agg.to_bytes()
    with pytest.raises(DuplicateBatchError):
        agg.add(reports[100:], batch_id="day-1")
    with pytest.raises(DuplicateBatchError):
        agg.merge(mech.aggregator().add(reports[100:], batch_id="day-1"))
    with pytest.raises(ValueError, match="itself"):
        agg.merge(agg)
    assert agg.to_bytes() == before  # nothing counted


def test_corrupt_states_are_refused(mech):
    agg = mech.aggregator().add(_reports(mech), collection=2)
    state = bytearray(agg.to_bytes())
    # the magic, the header's first byte, its fingerprint, n, the spec, the payload (sums)
    fingerprint = state.index(b'"fingerprint":"') + 20
    n = state.index(b'"n":') + 4
    spec = state.index(b'"spec":{') + 9
    for position in (3, 25, fingerprint, n, spec, len(state) // 2, len(state) - 1):
        bad = bytearray(state)
        bad[position] ^= 0x01
        with pytest.raises(IntegrityError):
            LongitudinalAggregator.from_bytes(bytes(bad))
    with pytest.raises(IntegrityError):
        LongitudinalAggregator.from_bytes(bytes(state[:-3]))
    with pytest.raises(IntegrityError):
        LongitudinalAggregator.from_bytes(b"not a state")
    # sums that n reports cannot have, behind a right checksum
    forged = mech.aggregator().add(_reports(mech))
    forged._sums = forged._sums.copy()
    forged._sums[0] += forged.n + 1
    with pytest.raises(IntegrityError):
        LongitudinalAggregator.from_bytes(forged.to_bytes())
    # a collection that is not one
    forged = mech.aggregator().add(_reports(mech))
    forged._collection = -1
    with pytest.raises(IntegrityError, match="collection"):
        LongitudinalAggregator.from_bytes(forged.to_bytes())


def test_reports_and_states_of_another_spec_are_refused(mech, tmp_path):
    reports = _reports(mech)
    assert isinstance(reports, ldpdist.Reports) and reports.fingerprint == mech.fingerprint
    np.testing.assert_array_equal(mech.estimate(mech.as_reports(np.asarray(reports))),
                                  mech.estimate(reports))
    other = _perturbed(mech)
    assert other.fingerprint != mech.fingerprint
    with pytest.raises(SpecMismatchError):
        other.aggregator().add(reports)
    with pytest.raises(SpecMismatchError):
        other.estimate(reports)
    with pytest.raises(SpecMismatchError):
        other.aggregator().merge(mech.aggregator().add(reports))
    state = mech.aggregator().add(reports).to_bytes()
    with pytest.raises(SpecMismatchError):
        LongitudinalAggregator.from_bytes(state, expect=other)
    with pytest.raises(TypeError, match="as_reports"):
        mech.aggregator().add(np.asarray(reports))
    with pytest.raises(TypeError, match="takes reports"):
        mech.estimate(np.asarray(reports))
    path = tmp_path / "day.ldpr"
    ldpdist.write_reports(path, mech, reports)
    with pytest.raises(SpecMismatchError):
        other.aggregator().add(ldpdist.read_reports(path))
    with pytest.raises(SpecMismatchError):
        ldpdist.read_reports(path, other)


def test_reports_files_carry_the_collection(mech, tmp_path):
    reports = _reports(mech)
    path = tmp_path / "day-3.ldpr"
    written = ldpdist.write_reports(path, mech, reports, collection=3)
    batch = ldpdist.read_reports(path, mech)
    assert (batch.batch_id, batch.collection) == (written.batch_id, 3)
    assert batch.fingerprint == mech.fingerprint
    np.testing.assert_array_equal(np.asarray(batch.reports), np.asarray(reports))
    agg = mech.aggregator().add(batch)
    assert agg.collection == 3 and agg.batches == {written.batch_id: "day-3.ldpr"}
    np.testing.assert_allclose(agg.estimate(), mech.estimate(reports), rtol=0, atol=1e-12)
    with pytest.raises(DuplicateBatchError):
        agg.add(ldpdist.read_reports(path))
    # another collection of the same users is refused, as a file, reports or a state
    ldpdist.write_reports(tmp_path / "day-4.ldpr", mech, reports, collection=4)
    with pytest.raises(CollectionMismatchError):
        agg.add(ldpdist.read_reports(tmp_path / "day-4.ldpr"))
    with pytest.raises(CollectionMismatchError):
        agg.add(reports, collection=4)
    with pytest.raises(CollectionMismatchError):
        agg.merge(mech.aggregator(collection=4))
    with pytest.raises(CollectionMismatchError):
        mech.aggregator(collection=4).merge(agg)
    with pytest.raises(CollectionMismatchError):
        mech.aggregator().add(batch, collection=4)
    assert agg.n == 300  # nothing counted
    with pytest.raises(ValueError, match="collection"):
        ldpdist.write_reports(tmp_path / "x.ldpr", mech, reports, collection=-1)
    with pytest.raises(ValueError, match="collection"):
        mech.aggregator(collection=True)
    # untagged reports join a tagged aggregator (the in-memory API decides)
    agg.add(_reports(mech, secret_seed=5))
    assert agg.collection == 3 and agg.n == 600
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        ldpdist.read_reports(path)


def test_standard_errors_match_the_spread_of_the_estimates(mech):
    """200 collections of 1000 users drawn from p (count-level simulation): the variance of
    each raw estimate across them against the mean squared standard error (ratio within
    [0.6, 1.45]: the sample variance of 200 draws has a relative spread of about 0.1, so
    a missing or extra factor of the gap p_s - q_s, or of sqrt(n), fails)."""
    rng = np.random.default_rng(4)
    p = np.linspace(1.0, 2.0, mech.k)
    p /= p.sum()
    estimates, squared = [], []
    for r in range(200):
        agg = mech.simulate(rng.multinomial(1000, p), seed=r)
        errors = agg.standard_errors()
        if errors is None:
            assert isinstance(mech, MemoizedRAPPOR) and mech.to_dict()["num_bits"] is not None
            return
        estimates.append(agg.estimate())
        squared.append(errors ** 2)
    ratio = np.var(estimates, axis=0, ddof=1) / np.mean(squared, axis=0)
    assert ratio.min() > 0.6 and ratio.max() < 1.45, ratio


# -- bad input --------------------------------------------------------------------------------


def test_bad_input_is_refused_clearly(mech):
    secrets = make_secrets(2, seed=0)
    with pytest.raises(ValueError, match="values must lie in"):
        mech.privatize([0, mech.k], secrets)
    with pytest.raises(ValueError, match="values must lie in"):
        mech.privatize([-1, 0], secrets)
    with pytest.raises(TypeError, match="integers"):
        mech.privatize([0.0, 1.0], secrets)
    with pytest.raises(TypeError, match="booleans"):
        mech.privatize([True, False], secrets)
    with pytest.raises(ValueError, match="one-dimensional"):
        mech.privatize([[0, 1]], secrets)
    with pytest.raises(ValueError, match="one secret per user"):
        mech.privatize([0, 1, 1], secrets)
    with pytest.raises(ValueError, match="32"):
        mech.privatize([0, 1], secrets[:, :16])
    with pytest.raises(ValueError, match="uint8"):
        mech.privatize([0, 1], secrets.astype(np.int64))
    with pytest.raises(ValueError, match="32 bytes"):
        mech.privatize([0, 1], [b"short", b"x" * 32])
    with pytest.raises(TypeError, match="secrets"):
        mech.privatize([0, 1], "two secrets")
    with pytest.raises(ValueError, match="seed"):
        mech.privatize([0, 1], secrets, seed=-1)
    with pytest.raises(ValueError, match="T"):
        mech.campaign([0, 1], 0)
    spec = mech.to_dict()
    fields = [key for key in EPSILON_FIELDS if key in spec] or ["f", "p", "q"]
    for key in fields:
        for bad in (0.0, -1.0, float("nan"), float("inf"), -float("inf")):
            if key in ("p", "q") and bad == 0.0:
                continue  # p = 0 or q = 0 is a valid RAPPOR parameter
            with pytest.raises(ValueError, match=key):
                from_dict({**spec, key: bad})
        with pytest.raises(TypeError):
            from_dict({**spec, key: "1.0"})
    with pytest.raises(ValueError, match="k"):
        from_dict({**spec, "k": 1})


# -- the command line -------------------------------------------------------------------------


def _spec_options(mech):
    options = []
    for key, value in mech.to_dict().items():
        if key in ("mechanism", "format") or value is None:
            continue
        options += [f"--{key.replace('_', '-')}", repr(value)]
    return options


_PARSER = []


def test_command_line_round_trip(mech, tmp_path, monkeypatch, capsys):
    import ldpdist.cli
    from ldpdist.cli import main

    if not _PARSER:
        _PARSER.append(ldpdist.cli.build_parser())
    monkeypatch.setattr(ldpdist.cli, "build_parser", lambda: _PARSER[0])  # built once
    monkeypatch.chdir(tmp_path)
    name = type(mech).__name__
    assert main(["longitudinal", "spec", name, *_spec_options(mech), "-o", "spec.json"]) == 0
    assert ldpdist.from_json((tmp_path / "spec.json").read_text()) == mech
    values = np.random.default_rng(0).integers(0, mech.k, size=200)
    (tmp_path / "values.txt").write_text("".join(f"{v}\n" for v in values))
    assert main(["longitudinal", "secrets", "200", "--seed", "3", "-o", "secrets.txt"]) == 0
    secrets = make_secrets(200, seed=3)
    for t in (0, 1):
        assert main(["longitudinal", "privatize", "--spec", "spec.json", "values.txt",
                     "--secrets", "secrets.txt", "--collection", str(t), "--seed", str(10 + t),
                     "-o", f"day{t}.ldpr"]) == 0
        batch = ldpdist.read_reports(tmp_path / f"day{t}.ldpr", mech)
        assert batch.collection == t
        assert np.asarray(batch.reports).tobytes() == \
            mech.privatize(values, secrets, seed=10 + t).tobytes()
    assert main(["longitudinal", "aggregate", "--spec", "spec.json", "day0.ldpr",
                 "-o", "day0.state"]) == 0
    capsys.readouterr()
    # another collection, the same batch again, another spec's state: refused, one line
    for inputs in (["day0.state", "day1.ldpr"], ["day0.state", "day0.ldpr"]):
        assert main(["longitudinal", "aggregate", "--spec", "spec.json", *inputs,
                     "-o", "bad.state"]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "error:" in error
        assert ("collection" in error) if "day1.ldpr" in inputs else ("already counted" in error)
    assert not (tmp_path / "bad.state").exists()
    assert main(["longitudinal", "estimate", "--spec", "spec.json", "day0.state"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert lines[0] == "value,probability,standard_error" and len(lines) == mech.k + 1
    direct = mech.aggregator().add(ldpdist.read_reports(tmp_path / "day0.ldpr"))
    np.testing.assert_array_equal([float(line.split(",")[1]) for line in lines[1:]],
                                  direct.estimate())
    assert main(["longitudinal", "estimate", "--spec", "spec.json", "day1.ldpr", "--format",
                 "json", "--decoder", "project"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["collection"] == 1 and answer["n"] == 200
    assert answer["fingerprint"] == mech.fingerprint
    assert answer["epsilon_1"] == mech.epsilon_1
    assert np.isclose(sum(answer["estimate"]), 1.0)
    assert (answer["standard_error"] is None) == (direct.standard_errors() is None)
