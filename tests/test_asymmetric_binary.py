"""AsymmetricBinaryResponse: Theorem 2 of the context-aware LDP paper (Acharya, Bonawitz,
Kairouz, Ramage, Sun, ICML 2020) with the corrected eq. (9) (docs page Mechanisms ›
Context-aware LDP, docs/mechanisms/context-aware.md), its special cases, exactness, the optimality vertices of
the proof (eqs. (27), (28) with the note's erratum), the spec of infinite budgets and bad input.
The shared contract (tests/test_mechanisms.py) covers the rest."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

import ldpdist
from ldpdist import privacy
from ldpdist.specs import canonical_json

ABR = ldpdist.AsymmetricBinaryResponse
INF = math.inf
# Budgets of the grids: the exact ends 0 and inf included.
GRID = [0.0, 0.05, 0.3, 1.0, 2.5, 10.0, 30.0, INF]


def corrected(e01, e10):
    """The corrected eq. (9) in our symbols (paper 1, 2 = our 0, 1), with its limits:
    a = e^-ε01, b = e^-ε10; rows Q(·|0) = [(1-b), b(1-a)]/(1-ab), Q(·|1) = [a(1-b), (1-a)]/(1-ab).
    """
    if e01 == 0:
        return np.array([[1.0, 0.0], [1.0, 0.0]])
    if e10 == 0:
        return np.array([[0.0, 1.0], [0.0, 1.0]])
    a, b = math.exp(-e01), math.exp(-e10)
    d = -math.expm1(-(e01 + e10))
    one_a, one_b = -math.expm1(-e01), -math.expm1(-e10)
    return np.array([[one_b / d, b * one_a / d], [a * one_b / d, one_a / d]])


def printed(e12, e21):
    """Eq. (9) exactly as printed (paper symbols 1, 2 = rows 0, 1), finite budgets."""
    scale = 1.0 / (math.exp(e21) - math.exp(-e12))
    return scale * np.array([
        [math.exp(e21) * (1 - math.exp(-e12)), math.exp(-e12) * (math.exp(e21) - 1)],
        [1 - math.exp(-e12), math.exp(e21) - 1]])


def budgets(e01, e10):
    return np.array([[0.0, e01], [e10, 0.0]])


def rule_errors(Q):
    """(P_FA, P_MD) of the four deterministic tests X̂: {0, 1} -> {0, 1} on the report, in
    the paper's convention for symbols (1, 2) = our (0, 1): P_FA = Pr(X̂ = 0 | X = 1),
    P_MD = Pr(X̂ = 1 | X = 0)."""
    points = []
    for rule in ((0, 0), (1, 1), (0, 1), (1, 0)):  # X̂(0), X̂(1)
        p_fa = sum(Q[1, y] for y in (0, 1) if rule[y] == 0)
        p_md = sum(Q[0, y] for y in (0, 1) if rule[y] == 1)
        points.append((p_fa, p_md))
    return points


def vertex_28(e01, e10):
    """Vertex (28) with the note's erratum, (expm1(ε10), expm1(ε01)) / expm1(ε01 + ε10) (paper
    ε_{1,2} = ε01, ε_{2,1} = ε10), and its limits at 0 and inf; None when both are 0 (every
    point of P_FA + P_MD = 1 is then a vertex)."""
    if e01 == 0 and e10 == 0:
        return None
    if e01 == INF and e10 == INF:
        return (0.0, 0.0)
    if e01 == INF:
        return (0.0, math.exp(-e10))
    if e10 == INF:
        return (math.exp(-e01), 0.0)
    d = math.expm1(e01 + e10)
    return (math.expm1(e10) / d, math.expm1(e01) / d)


# -- Theorem 2 and eq. (9) ------------------------------------------------------------------


@pytest.mark.parametrize("e01", GRID)
@pytest.mark.parametrize("e10", GRID)
def test_the_channel_is_the_corrected_equation_9(e01, e10):
    mech = ABR(e01, e10)
    Q = mech.channel_matrix()
    np.testing.assert_allclose(Q, corrected(e01, e10), rtol=1e-12, atol=1e-15)
    f0, f1 = mech._core.probabilities()  # the flips relatively: they may be 1e-13
    want = corrected(e01, e10)
    assert f0 == pytest.approx(want[0, 1], rel=1e-12, abs=0)
    assert f1 == pytest.approx(want[1, 0], rel=1e-12, abs=0)
    # E-LDP exactly (verify), with the realized budget matrix never above the promise.
    assert privacy.verify(Q, mech.budgets()).satisfied(tolerance=1e-12)
    realized = mech.realized_budgets()
    assert (realized <= mech.budgets()).all()
    np.testing.assert_allclose(realized, privacy.realized_budgets(Q), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("e01", GRID[1:])
@pytest.mark.parametrize("e10", GRID[1:])
def test_both_budgets_are_tight(e01, e10):
    """Q(0|0)/Q(0|1) = e^ε01 and Q(1|1)/Q(1|0) = e^ε10: the realized budgets are the promised
    ones (up to the few-ulp margin the rounding keeps), and any smaller budget is violated."""
    mech = ABR(e01, e10)
    realized, promised = mech.realized_budgets(), mech.budgets()
    for x, xp in ((0, 1), (1, 0)):
        if promised[x, xp] == INF:
            assert realized[x, xp] == INF  # a report impossible under the other value
        else:
            assert realized[x, xp] == pytest.approx(promised[x, xp], rel=1e-12, abs=1e-14)
            tighter = promised.copy()
            tighter[x, xp] -= 1e-9 * max(1.0, promised[x, xp])
            violation = privacy.verify(mech.channel_matrix(), tighter)
            assert not violation.satisfied() and violation.pair == (x, xp)


@pytest.mark.parametrize("e01, e10", [(0.5, 2.0), (1.0, 3.0), (2.0, 0.1), (0.05, 10.0)])
def test_the_printed_equation_9_swaps_the_budgets_and_violates_them(e01, e10):
    Q_printed = printed(e01, e10)  # ε_{1,2} = ε01, ε_{2,1} = ε10
    # It is the corrected channel of the exchanged budgets ...
    np.testing.assert_allclose(Q_printed, corrected(e10, e01), rtol=1e-12)
    # ... so it realizes ε10 where ε01 is promised and vice versa.
    np.testing.assert_allclose(privacy.realized_budgets(Q_printed), budgets(e10, e01),
                               rtol=1e-12)
    violation = privacy.verify(Q_printed, budgets(e01, e10))
    assert violation.amount == pytest.approx(abs(e10 - e01), rel=1e-9)
    assert violation.pair == ((0, 1) if e10 > e01 else (1, 0))
    assert privacy.verify(ABR(e01, e10).channel_matrix(),
                          budgets(e01, e10)).satisfied(tolerance=1e-12)


def test_equal_budgets_give_warners_randomized_response():
    for eps in (0.1, 1.0, 4.0, 15.0):
        Q = ABR(eps, eps).channel_matrix()
        truth, lie = math.exp(eps) / (math.exp(eps) + 1), 1 / (math.exp(eps) + 1)  # eq. (10)
        np.testing.assert_allclose(Q, [[truth, lie], [lie, truth]], rtol=1e-13)
        # RR rounds its keep probability near 1 (by 8 ulps of 1): equal to 1e-15 absolute
        np.testing.assert_allclose(Q, ldpdist.RandomizedResponse(2, eps).channel_matrix(),
                                   rtol=0, atol=1e-15)


def test_an_infinite_budget_gives_mangats_improved_randomized_response():
    for eps in (0.2, 1.0, 5.0):
        p = math.exp(-eps)
        # ε01 = inf: eq. (11), [[1 - p, p], [0, 1]] with p = e^-ε10 (the paper's text says
        # ε_{2,1} = inf and p = e^-ε_{1,2}, inheriting the index swap of its eq. (9)).
        Q = ABR(INF, eps).channel_matrix()
        np.testing.assert_allclose(Q, [[1 - p, p], [0.0, 1.0]], rtol=1e-14, atol=0)
        assert Q[1, 0] == 0.0 and Q[1, 1] == 1.0
        # ε10 = inf: the mirror (value 0 always reports 0).
        Q = ABR(eps, INF).channel_matrix()
        np.testing.assert_allclose(Q, [[1.0, 0.0], [p, 1 - p]], rtol=1e-14, atol=0)
    # Both infinite: nothing is constrained, the report is the value; the estimate is exact.
    mech = ABR(INF, INF)
    np.testing.assert_array_equal(mech.channel_matrix(), np.eye(2))
    values = np.array([0] * 30 + [1] * 70)
    np.testing.assert_array_equal(mech.privatize(values, seed=1), values)
    np.testing.assert_allclose(mech.estimate(mech.privatize(values), "raw"), [0.3, 0.7],
                               rtol=0, atol=1e-15)
    assert mech.epsilon == INF and mech.realized_epsilon == INF


# -- the optimality vertices (proof of Theorem 2, eqs. (27), (28)) ---------------------------


@pytest.mark.parametrize("e01", GRID)
@pytest.mark.parametrize("e10", GRID)
def test_the_error_region_is_the_budget_region(e01, e10):
    """The tests' error points (P_FA, P_MD) of the realized channel: the two trivial vertices
    (27) exactly, the vertex (28) (with the note's erratum) to 1e-12 by the test X̂ = Y, every
    point inside the budget region (Theorem 1's inequalities (7), (8) for both orders of the
    pair), and the vertex tight on both constraints. So the channel's error region, the
    convex hull of these points, equals the budget region."""
    Q = ABR(e01, e10).channel_matrix()
    points = rule_errors(Q)
    assert (1.0, 0.0) in points and (0.0, 1.0) in points  # (27): X̂ = 0 and X̂ = 1
    p_fa, p_md = points[2]  # X̂ = Y
    assert (p_fa, p_md) == (Q[1, 0], Q[0, 1])
    target = vertex_28(e01, e10)
    if target is None:  # both budgets 0: the region is the segment P_FA + P_MD = 1
        assert p_fa + p_md == pytest.approx(1.0, abs=1e-12)
    else:
        assert p_fa == pytest.approx(target[0], rel=0, abs=1e-12)
        assert p_md == pytest.approx(target[1], rel=0, abs=1e-12)
    g01, g10 = math.exp(min(e01, 700)), math.exp(min(e10, 700))
    # Every test's errors lie in the budget region, within 1e-12: (7) and (8) for the pair
    # (0, 1); those of the pair (1, 0) are the same inequalities for the complementary test
    # (1 - P_FA, 1 - P_MD), which is among the four.
    for fa, md in points:
        if e10 < INF:
            assert fa + g10 * md >= 1 - 1e-12
        if e01 < INF:
            assert g01 * fa + md >= 1 - 1e-12
    # Tight: the vertex is on both boundary lines (an infinite budget instead leaves its
    # probability at exactly 0).
    if e10 < INF:
        assert p_fa + g10 * p_md == pytest.approx(1.0, rel=0, abs=1e-12)
    else:
        assert p_md == 0.0
    if e01 < INF:
        assert g01 * p_fa + p_md == pytest.approx(1.0, rel=0, abs=1e-12)
    else:
        assert p_fa == 0.0


def test_no_binary_channel_within_the_budgets_does_better_than_the_vertex():
    """Data processing: random E-LDP binary channels (found by rejection) never reach below
    the line through the vertex, i.e. their error points lie in the region the mechanism
    attains."""
    rng = np.random.default_rng(3)
    for e01, e10 in [(0.5, 2.0), (1.5, 0.2), (1.0, 1.0)]:
        target = vertex_28(e01, e10)
        g01, g10 = math.exp(e01), math.exp(e10)
        found = 0
        while found < 200:
            q = rng.random(2)
            Q = np.array([[q[0], 1 - q[0]], [q[1], 1 - q[1]]])
            if not privacy.verify(Q, budgets(e01, e10)).satisfied():
                continue
            found += 1
            for a, b in rule_errors(Q):
                assert a + g10 * b >= 1 - 1e-12 and g01 * a + b >= 1 - 1e-12
                # below the diagonal, nothing beats the vertex in both errors
                assert not (a < target[0] - 1e-12 and b < target[1] - 1e-12)


# -- the estimator ----------------------------------------------------------------------------


@pytest.mark.parametrize("e01, e10", [(0.5, 2.0), (2.0, 0.5), (INF, 1.0), (0.3, INF),
                                      (INF, INF), (1e-3, 5.0), (30.0, 30.0), (700.0, 650.0)])
def test_the_estimator_is_exactly_unbiased_on_the_exact_output_distribution(e01, e10):
    mech = ABR(e01, e10)
    Q = mech.channel_matrix()
    for p in ([0.3, 0.7], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]):
        p = np.array(p)
        exact = p @ Q  # the exact distribution of one report
        np.testing.assert_allclose(mech._core.estimate_from_frequencies(exact), p, rtol=0,
                                   atol=1e-12)
        np.testing.assert_allclose(mech._expected_frequencies(p), exact, rtol=0, atol=1e-15)
        # the note's form p̂0 = (f̂ − Q(0|1)) / (Q(0|0) − Q(0|1)), from counts
        n = 10**6
        counts = np.array([round(exact[0] * n), n - round(exact[0] * n)], dtype=np.uint64)
        f = counts[0] / n
        want = (f - Q[1, 0]) / (Q[0, 0] - Q[1, 0])
        raw = mech._core.estimate_raw(counts, n)
        assert raw[0] == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert raw.sum() == pytest.approx(1.0, abs=1e-12)


def exact_variance(mech, true_counts):
    """Var p̂0 for fixed numbers of users of each value: c0 = Bin(n0, Q(0|0)) + Bin(n1, Q(0|1))."""
    Q = mech.channel_matrix()
    n0, n1 = true_counts
    n = n0 + n1
    gap = Q[0, 0] - Q[1, 0]
    var_c0 = n0 * Q[0, 0] * Q[0, 1] + n1 * Q[1, 0] * Q[1, 1]
    return var_c0 / (n * gap) ** 2


@pytest.mark.parametrize("e01, e10", [(0.5, 2.0), (INF, 0.7), (1.0, 1.0)])
def test_monte_carlo_variance_equals_the_exact_binomial_variance(e01, e10):
    mech = ABR(e01, e10)
    runs = 4000
    # Fixed users (simulate): the exact variance of a sum of two binomials.
    true_counts = [3000, 7000]
    estimates = np.array([mech.simulate(true_counts, seed=s).estimate("raw")[0]
                          for s in range(runs)])
    var = exact_variance(mech, true_counts)
    band = 5 * math.sqrt(2 / (runs - 1))  # 5 standard deviations of a sample variance
    assert abs(estimates.var(ddof=1) / var - 1) < band
    assert abs(estimates.mean() - 0.3) < 5 * math.sqrt(var / runs)
    # i.i.d. values from p through privatize: the note's F0 (1 − F0) / (n gap²).
    Q = mech.channel_matrix()
    p, n, runs = np.array([0.3, 0.7]), 500, 2000
    F0 = (p @ Q)[0]
    var = F0 * (1 - F0) / (n * (Q[0, 0] - Q[1, 0]) ** 2)
    rng = np.random.default_rng(5)
    estimates = np.array([mech.estimate(mech.privatize(rng.choice(2, size=n, p=p), seed=s),
                                        "raw")[0] for s in range(runs)])
    band = 5 * math.sqrt(2 / (runs - 1))
    assert abs(estimates.var(ddof=1) / var - 1) < band
    assert abs(estimates.mean() - 0.3) < 5 * math.sqrt(var / runs)


def test_decoders_project_and_ibu_agree_on_two_values():
    """For k = 2 the maximum-likelihood estimate (IBU) is the raw estimate clipped to [0, 1],
    which is also its projection onto the simplex."""
    mech = ABR(0.4, 1.5)
    for true_counts in ([50, 950], [0, 1000], [600, 400]):
        agg = mech.simulate(true_counts, seed=2)
        raw = agg.estimate("raw")
        clipped = np.clip(raw, 0, 1) / np.clip(raw, 0, 1).sum()
        np.testing.assert_allclose(agg.estimate("project"), clipped, atol=1e-15)
        np.testing.assert_allclose(agg.estimate("ibu"), clipped, atol=1e-6)
        np.testing.assert_allclose(agg.estimate("normalize"), clipped, atol=1e-15)


def test_simulate_costs_nothing_per_user_and_is_exact_in_total():
    mech = ABR(0.5, 2.0)
    agg = mech.simulate([10**18, 3 * 10**18], seed=1)
    assert agg.n == 4 * 10**18 and int(agg.counts.sum()) == 4 * 10**18
    assert agg.estimate("raw")[0] == pytest.approx(0.25, abs=1e-6)


# -- zero budgets -----------------------------------------------------------------------------


@pytest.mark.parametrize("e01, e10, constant", [(0.0, 1.0, 0), (0.0, INF, 0), (0.0, 0.0, 0),
                                                (2.0, 0.0, 1), (INF, 0.0, 1)])
def test_a_zero_budget_is_a_constant_report_and_estimation_is_refused(e01, e10, constant):
    mech = ABR(e01, e10)
    assert mech.degenerate
    Q = mech.channel_matrix()
    np.testing.assert_array_equal(Q[0], Q[1])  # Q(y|1) <= e^0 Q(y|0) and vice versa
    assert Q[0, constant] == 1.0
    np.testing.assert_array_equal(mech.realized_budgets(), np.zeros((2, 2)))
    reports = mech.privatize(np.arange(100) % 2, seed=1)
    assert (reports == constant).all()
    agg = mech.aggregator().add(reports)
    assert agg.counts[constant] == 100
    assert mech.simulate([40, 60], seed=1).counts[constant] == 100
    for decoder in mech.decoders:
        with pytest.raises(ValueError, match="nothing can be estimated"):
            agg.estimate(decoder)
    with pytest.raises(ValueError, match="decoder must be one of"):
        agg.estimate("mle")
    with pytest.raises(ValueError, match="nothing can be estimated"):
        mech._core.estimate_raw(agg.counts, agg.n)
    # the state round-trips like any other
    assert ldpdist.Aggregator.from_bytes(agg.to_bytes()).counts[constant] == 100


# -- parameters, specs, budgets ---------------------------------------------------------------


def test_budgets_epsilon_and_the_shared_realized_rule():
    mech = ABR(0.5, 2.0)
    assert mech.context_aware and mech.private and mech.k == 2 and mech.output_size == 2
    np.testing.assert_array_equal(mech.budgets(), [[0.0, 0.5], [2.0, 0.0]])
    assert (mech.epsilon_01, mech.epsilon_10, mech.epsilon) == (0.5, 2.0, 2.0)
    assert mech.realized_epsilon == mech.realized_budgets().max() <= 2.0
    assert ABR(INF, 0.3).epsilon == INF
    # The rule (realized within [ε(1 − 1e-3), ε]) on every finite positive budget.
    with pytest.raises(ValueError, match=r"cannot be represented.*budget epsilon_01"):
        ABR(1e-14, 1.0)
    with pytest.raises(ValueError, match=r"cannot be represented.*budget epsilon_10"):
        ABR(INF, 1e-14)
    with pytest.raises(ValueError, match="cannot be represented"):
        ABR(700.0, 1e-30)  # a probability of 1e-334 underflows
    for e01, e10 in [(700.0, 700.0), (1e-9, 1e-9), (700.0, 1e-6), (INF, 700.0)]:
        mech = ABR(e01, e10)
        realized = mech.realized_budgets()
        for budget, got in ((e01, realized[0, 1]), (e10, realized[1, 0])):
            assert got <= budget and (budget == INF or got >= budget * (1 - 1e-3))


@pytest.mark.parametrize("bad, error, match", [
    (-1.0, ValueError, "≥ 0"), (-1e-300, ValueError, "≥ 0"), (float("nan"), ValueError, "nan"),
    (-INF, ValueError, "≥ 0"), (700.5, ValueError, "too large"), (1e300, ValueError, "too large"),
    ("1.0", TypeError, "real number"), ("Infinity", TypeError, "real number"),
    (None, TypeError, "real number"), (True, TypeError, "real number"),
    ([1.0], TypeError, "real number"), (np.array(1.0), TypeError, "real number")])
def test_bad_budgets_are_refused_naming_the_budget(bad, error, match):
    for args, name in (((bad, 1.0), "epsilon_01"), ((1.0, bad), "epsilon_10")):
        with pytest.raises(error, match=match) as info:
            ABR(*args)
        assert name in str(info.value)
    with pytest.raises(ValueError, match="epsilon_01"):  # TypeErrors: "invalid parameters"
        ldpdist.from_dict({"mechanism": "AsymmetricBinaryResponse", "epsilon_01": bad,
                           "epsilon_10": 1.0})


def test_bad_arguments_values_and_reports():
    with pytest.raises(TypeError):
        ABR(k=2, epsilon_01=1.0, epsilon_10=1.0)  # k = 2 always: not a parameter
    with pytest.raises(TypeError):
        ABR(epsilon=1.0)
    with pytest.raises(TypeError):
        ABR(1.0)
    mech = ABR(1.0, 0.5)
    with pytest.raises(ValueError, match=r"values\[1\] = 2"):
        mech.privatize([0, 2, 1])
    with pytest.raises(ValueError, match=r"values\[0\] = -1"):
        mech.privatize(np.array([-1, 0]))
    reports = mech.privatize([0, 1, 1], seed=1)
    assert reports.dtype == np.uint8 and set(reports.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match=r"reports\[1\] = 2"):
        mech.estimate(mech.as_reports(np.array([0, 2, 1], dtype=np.uint8)))
    agg = mech.aggregator().add(mech.as_reports(np.array([0, 2, 1, 7], dtype=np.uint8)),
                                on_invalid="drop")
    assert (agg.n, agg.dropped) == (2, 2)
    with pytest.raises(ValueError, match="true_counts must have shape"):
        mech.simulate([1, 2, 3])
    with pytest.raises(ValueError, match="sparsity"):
        agg.estimate("sparse_project", sparsity=3)


def test_infinite_budgets_are_the_string_inf_in_specs_and_fingerprints_are_stable():
    same = [ABR(INF, 1.0), ABR("inf", 1), ABR(np.inf, np.float64(1.0)), ABR(float("inf"), 1.0)]
    spec = same[0].to_dict()
    assert spec == {"mechanism": "AsymmetricBinaryResponse", "format": 1, "epsilon_01": "inf",
                    "epsilon_10": 1.0}
    text = '{"epsilon_01":"inf","epsilon_10":1.0,"format":1,"mechanism":"AsymmetricBinaryResponse"}'
    assert canonical_json(spec) == text  # plain JSON: no Infinity token
    assert same[0].fingerprint == hashlib.sha256(text.encode()).hexdigest()
    for mech in same:
        assert mech == same[0] and mech.fingerprint == same[0].fingerprint
        assert mech.to_dict() == spec and hash(mech) == hash(same[0])
        assert ldpdist.from_dict(json.loads(json.dumps(mech.to_dict()))) == mech
    assert ABR(-0.0, 1.0).fingerprint == ABR(0.0, 1.0).fingerprint  # -0.0 is 0.0
    assert ABR(INF, 1.0) != ABR(700.0, 1.0) and ABR(0.5, 2.0) != ABR(2.0, 0.5)
    assert repr(ABR(INF, 1.0)) == "AsymmetricBinaryResponse(epsilon_01='inf', epsilon_10=1.0)"
    assert eval(repr(ABR(INF, 1.0)), {"AsymmetricBinaryResponse": ABR}) == ABR(INF, 1.0)
    # reports files and states carry the spec with "inf"
    agg = ABR(INF, 1.0).aggregator().add(ABR(INF, 1.0).privatize([0, 1], seed=1))
    again = ldpdist.Aggregator.from_bytes(agg.to_bytes())
    assert again.mechanism == ABR(INF, 1.0)


def test_exported_registered_and_short_name():
    from ldpdist.mechanisms import SHORT_NAMES
    from ldpdist.specs import registered

    assert registered()["AsymmetricBinaryResponse"] is ABR
    assert SHORT_NAMES["abr"] == "AsymmetricBinaryResponse"
    assert "AsymmetricBinaryResponse" in ldpdist.__all__
    assert "Theorem 2" in ABR.__doc__ and "eq. (9)" in ABR.__doc__
