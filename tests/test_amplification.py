"""Amplification by shuffling (ldpdist.privacy.shuffle_*): the clone bound of Feldman,
McMillan, Talwar (FOCS 2021), checked against brute force on tiny n, against real shuffled
mechanisms enumerated exactly, against the closed form evaluated by hand, and for its
monotonicity properties."""

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest

from ldpdist import privacy
import ldpdist
from ldpdist.privacy import (clone_parameters, closed_form_applies, shuffle_delta,
                             shuffle_delta_for_channel, shuffle_epsilon,
                             shuffle_epsilon_for_channel, shuffle_rr_delta, shuffle_rr_epsilon)


# ------------------------------------------------------------------------------------------
# brute force
# ------------------------------------------------------------------------------------------

def hockey(p, q, exp_eps):
    keys = set(p) | set(q)
    return sum(max(0.0, p.get(k, 0.0) - exp_eps * q.get(k, 0.0)) for k in keys)


def clone_pair(epsilon0, n):
    """The (A, B) pair of the clone reduction, by enumerating the n − 1 other users (each a
    clone of x⁰, a clone of x¹, or neither) and the differing user's coin."""
    clone = math.exp(-epsilon0)
    alpha = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    states = [(0, clone / 2), (1, clone / 2), (2, 1 - clone)]
    P, Q = defaultdict(float), defaultdict(float)
    for combo in itertools.product(states, repeat=n - 1):
        weight = math.prod(w for _, w in combo)
        a = sum(1 for s, _ in combo if s == 0)
        b = sum(1 for s, _ in combo if s == 1)
        P[(a + 1, b)] += weight * alpha
        P[(a, b + 1)] += weight * (1 - alpha)
        Q[(a + 1, b)] += weight * (1 - alpha)
        Q[(a, b + 1)] += weight * alpha
    return P, Q


def shuffled(channel, data):
    """Distribution of the multiset of outputs of ``channel`` (rows: inputs) on ``data``."""
    out = defaultdict(float)
    k_out = channel.shape[1]
    for ys in itertools.product(range(k_out), repeat=len(data)):
        weight = math.prod(channel[x, y] for x, y in zip(data, ys))
        out[tuple(sorted(ys))] += weight
    return out


def worst_shuffled_delta(channel, n, exp_eps):
    """max over neighbouring datasets (differing in the first user) of the hockey-stick
    divergence of the shuffled outputs, both directions."""
    k = channel.shape[0]
    worst = 0.0
    for rest in itertools.combinations_with_replacement(range(k), n - 1):
        for x0, x1 in itertools.permutations(range(k), 2):
            worst = max(worst, hockey(shuffled(channel, (x0,) + rest),
                                      shuffled(channel, (x1,) + rest), exp_eps))
    return worst


def realized_epsilon(channel):
    logs = np.log(channel)
    return float(max((logs[i] - logs[j]).max()
                     for i in range(channel.shape[0]) for j in range(channel.shape[0])))


def k_rr(k, epsilon0):
    e = math.exp(epsilon0)
    return (np.full((k, k), 1.0) + (e - 1) * np.eye(k)) / (e + k - 1)


EPS_GRID = [0.0, 0.05, 0.2, 0.5, 1.0, 1.5]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("epsilon0", [0.3, 1.0, 2.5])
def test_divergence_matches_brute_force_on_tiny_n(n, epsilon0):
    P, Q = clone_pair(epsilon0, n)
    assert math.isclose(sum(P.values()), 1.0) and math.isclose(sum(Q.values()), 1.0)
    for eps in EPS_GRID:
        exact = max(hockey(P, Q, math.exp(eps)), hockey(Q, P, math.exp(eps)))
        if eps >= epsilon0:
            exact = 0.0
        lower = shuffle_delta(epsilon0, n, eps, bound="lower")
        upper = shuffle_delta(epsilon0, n, eps)
        assert lower <= upper
        assert lower == pytest.approx(exact, rel=1e-12, abs=1e-15), (eps, lower, exact)
        assert upper == pytest.approx(exact, rel=1e-12, abs=1e-15), (eps, upper, exact)


def exact_clone_delta(epsilon0, n, eps):
    """The clone divergence summed over every c and every a, straight from the definition
    (binomial pmfs from math.comb in exact integers, then floats)."""
    clone = math.exp(-epsilon0)
    alpha = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    total = 0.0
    for c in range(n):
        w = math.comb(n - 1, c) * clone**c * (1 - clone) ** (n - 1 - c)
        b = [math.comb(c, a) / 2**c for a in range(c + 1)] + [0.0]
        inner = 0.0
        for a in range(c + 2):
            before = b[a - 1] if a > 0 else 0.0
            p = alpha * before + (1 - alpha) * b[a]
            q = (1 - alpha) * before + alpha * b[a]
            inner += max(0.0, p - math.exp(eps) * q)
        total += w * inner
    return total


@pytest.mark.parametrize("epsilon0, eps", [(0.5, 0.05), (1.0, 0.1), (2.0, 0.4), (2.0, 0.6)])
def test_blocks_converge_to_the_exact_sum(epsilon0, eps):
    # n = 300: the window of C is cut into blocks and refined; the bracket must contain the
    # sum over every (c, a) and be narrow
    n = 300
    exact = exact_clone_delta(epsilon0, n, eps)
    lower = shuffle_delta(epsilon0, n, eps, bound="lower")
    upper = shuffle_delta(epsilon0, n, eps)
    assert lower <= exact * (1 + 1e-9) and exact <= upper * (1 + 1e-9)
    assert upper - lower <= 2e-5 * upper
    assert exact > 1e-4  # a meaningful comparison


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("epsilon0", [0.5, 2.0])
def test_randomized_response_delta_matches_brute_force(n, epsilon0):
    channel = k_rr(2, epsilon0)
    for eps in EPS_GRID:
        exp_eps = math.exp(eps)
        rest = (0,) * (n - 1)
        a, b = shuffled(channel, (1,) + rest), shuffled(channel, (0,) + rest)
        exact = max(hockey(a, b, exp_eps), hockey(b, a, exp_eps))
        assert shuffle_rr_delta(epsilon0, n, eps) == pytest.approx(exact, rel=1e-12,
                                                                   abs=1e-15)


# ------------------------------------------------------------------------------------------
# the closed form (Theorem 3.1), evaluated by hand
# ------------------------------------------------------------------------------------------

def test_closed_form_by_hand():
    n, e0, delta = 10_000, 1.0, 1e-6
    # ε₀ = 1 ≤ log(10⁴ / (16 log(2·10⁶))) = log(43.0...) = 3.76...
    assert closed_form_applies(e0, n, delta)
    e = math.e
    by_hand = math.log(1 + (e - 1) / (e + 1)
                       * (8 * math.sqrt(e * math.log(4e6)) / 100 + 8 * e / 10_000))
    assert shuffle_epsilon(e0, n, delta, method="closed_form") == pytest.approx(
        by_hand, rel=1e-13)
    # the boundary of the condition, both sides
    limit = math.log(n / (16 * math.log(2 / delta)))
    assert closed_form_applies(limit * (1 - 1e-12), n, delta)
    assert not closed_form_applies(limit * (1 + 1e-12), n, delta)
    with pytest.raises(ValueError, match="numerical"):
        shuffle_epsilon(limit * 1.01, n, delta, method="closed_form")
    with pytest.raises(ValueError, match="upper bound only"):
        shuffle_epsilon(e0, n, delta, method="closed_form", bound="lower")
    # n too small for any ε₀
    assert not closed_form_applies(0.01, 100, 1e-6)


# ------------------------------------------------------------------------------------------
# properties of the numerical bound
# ------------------------------------------------------------------------------------------

NS = [1_000, 10_000, 100_000]
E0S = [0.5, 1.0, 2.0, 4.0, 6.0]


@pytest.fixture(scope="module")
def table():
    delta = 1e-6
    tol = 1e-3
    return {(n, e0): (shuffle_epsilon(e0, n, delta, bound="lower", tolerance=tol),
                      shuffle_epsilon(e0, n, delta, tolerance=tol),
                      shuffle_rr_epsilon(e0, n, delta, tolerance=tol),
                      shuffle_epsilon(e0, n, delta, method="closed_form")
                      if closed_form_applies(e0, n, delta) else None)
            for n in NS for e0 in E0S}


def test_brackets_and_orderings(table):
    closed_forms = 0
    for (n, e0), (lower, upper, rr, closed) in table.items():
        assert 0 <= lower <= upper <= e0
        assert upper - lower <= 0.005 * upper + 1e-9       # a tight bracket
        assert rr <= upper                                  # RR is an ε₀-LDP randomizer
        if closed is not None:
            closed_forms += 1
            assert upper <= closed, (n, e0, upper, closed)
    assert closed_forms >= 5  # the comparison really happened


def test_monotone_in_n_and_epsilon0(table):
    for e0 in E0S:
        uppers = [table[n, e0][1] for n in NS]
        assert all(b < a or a == b == e0 for a, b in zip(uppers, uppers[1:])), uppers
    for n in NS:
        uppers = [table[n, e0][1] for e0 in E0S]
        assert all(b > a for a, b in zip(uppers, uppers[1:])), uppers
    # exact monotonicity of δ at fixed ε, n = 2 .. 40 (adding a user is a post-processing)
    deltas = [shuffle_delta(1.0, n, 0.3) for n in range(2, 41)]
    assert all(b <= a for a, b in zip(deltas, deltas[1:]))
    assert deltas[-1] < deltas[0]


def test_amplification_is_real_and_never_hurts():
    # a large crowd amplifies a lot; two users almost nothing; never above ε₀
    assert shuffle_epsilon(2.0, 1_000_000, 1e-8) < 0.1
    assert shuffle_epsilon(2.0, 2, 1e-8) == pytest.approx(2.0, rel=1e-3)
    assert shuffle_epsilon(2.0, 2, 1e-8) <= 2.0
    assert shuffle_delta(2.0, 100, 2.0) == 0.0 and shuffle_delta(2.0, 100, 5.0) == 0.0


def test_delta_and_epsilon_agree():
    e0, n, delta = 3.0, 50_000, 1e-7
    eps = shuffle_epsilon(e0, n, delta)
    assert shuffle_delta(e0, n, eps) <= delta
    assert shuffle_delta(e0, n, shuffle_epsilon(e0, n, delta, bound="lower"),
                         bound="lower") > delta


def test_large_n_runs():
    # n = 10⁸ in log space (the pmfs' peaks are ~1e-4 and would be fine, but the binomial
    # coefficients are not): finite, amplified, consistent with the closed form.
    eps = shuffle_epsilon(8.0, 10**8, 1e-8, tolerance=1e-3)
    assert 0 < eps < shuffle_epsilon(8.0, 10**8, 1e-8, method="closed_form")


@pytest.mark.parametrize("call, error", [
    (lambda: shuffle_epsilon(0.0, 100, 1e-6), ValueError),
    (lambda: shuffle_epsilon(-1.0, 100, 1e-6), ValueError),
    (lambda: shuffle_epsilon(float("inf"), 100, 1e-6), ValueError),
    (lambda: shuffle_epsilon(float("nan"), 100, 1e-6), ValueError),
    (lambda: shuffle_epsilon(1.0, 1, 1e-6), ValueError),
    (lambda: shuffle_epsilon(1.0, 100.0, 1e-6), TypeError),
    (lambda: shuffle_epsilon(1.0, True, 1e-6), TypeError),
    (lambda: shuffle_epsilon(1.0, 100, 0.0), ValueError),
    (lambda: shuffle_epsilon(1.0, 100, 1.0), ValueError),
    (lambda: shuffle_epsilon(1.0, 100, 1e-6, method="exact"), ValueError),
    (lambda: shuffle_epsilon(1.0, 100, 1e-6, bound="middle"), ValueError),
    (lambda: shuffle_epsilon(1.0, 100, 1e-6, tolerance=0), ValueError),
    (lambda: shuffle_delta(1.0, 100, -0.1), ValueError),
    (lambda: shuffle_delta(1.0, 100, float("nan")), ValueError),
    (lambda: shuffle_rr_epsilon(1.0, 100, 2.0), ValueError),
    (lambda: closed_form_applies("1", 100, 1e-6), TypeError),
])
def test_bad_input(call, error):
    with pytest.raises(error):
        call()


def test_exported_from_privacy():
    for name in ("shuffle_epsilon", "shuffle_delta", "shuffle_rr_epsilon",
                 "shuffle_rr_delta", "closed_form_applies", "clone_parameters",
                 "shuffle_epsilon_for_channel", "shuffle_delta_for_channel"):
        assert name in privacy.__all__


# ------------------------------------------------------------------------------------------
# channel-specific clones
# ------------------------------------------------------------------------------------------

CHANNELS = {
    "rr2": k_rr(2, 1.0),
    "rr3": k_rr(3, 2.0),
    "rr3-small": k_rr(3, 0.5),
    # a random channel (3 inputs, 4 outputs): its own realized ε₀ is what the bounds use
    "random": np.random.default_rng(7).uniform(0.2, 1.0, size=(3, 4)),
    "random-sparse": np.array([[0.5, 0.3, 0.2, 0.0], [0.2, 0.3, 0.5, 0.0],
                               [0.1, 0.1, 0.1, 0.7]]),
}


@pytest.mark.parametrize("name", list(CHANNELS))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_bounds_dominate_real_shuffled_mechanisms(name, n):
    """Every pair of neighbouring datasets enumerated, the shuffled outputs' exact δ(ε):
    never above the channel-specific bound, itself never above the generic bound."""
    channel = CHANNELS[name] / CHANNELS[name].sum(axis=1, keepdims=True)
    if name == "random-sparse":  # an output impossible for some inputs: not LDP
        with pytest.raises(ValueError, match="not LDP"):
            clone_parameters(channel)
        return
    epsilon0 = realized_epsilon(channel)
    for eps in EPS_GRID:
        actual = worst_shuffled_delta(channel, n, math.exp(eps))
        specific = shuffle_delta_for_channel(channel, n, eps)
        assert actual <= specific + 1e-12, (eps, actual, specific)
        assert specific <= shuffle_delta(epsilon0, n, eps) + 1e-12


def test_binary_randomized_response_is_tight_at_n_2():
    # two users, binary RR: the channel's clone pair is exactly the shuffled output
    channel = k_rr(2, 1.0)
    for eps in EPS_GRID:
        actual = worst_shuffled_delta(channel, 2, math.exp(eps))
        assert shuffle_delta_for_channel(channel, 2, eps) == pytest.approx(actual, rel=1e-9,
                                                                          abs=1e-12)


@pytest.mark.parametrize("k", [2, 3, 10])
@pytest.mark.parametrize("epsilon0", [0.5, 2.0, 5.0])
def test_randomized_response_clone_probability(k, epsilon0):
    (e0, p), = clone_parameters(ldpdist.RandomizedResponse(k=k, epsilon=epsilon0))
    assert e0 == pytest.approx(epsilon0, rel=1e-12)
    assert p == pytest.approx(2 / (math.exp(epsilon0) + 1), rel=1e-12)
    assert p > math.exp(-epsilon0)


def test_channel_gain_for_mechanisms():
    n, delta = 100_000, 1e-8
    rr = ldpdist.RandomizedResponse(k=8, epsilon=4.0)
    oue = ldpdist.OptimizedUnaryEncoding(k=5, epsilon=4.0)
    generic = shuffle_epsilon(4.0, n, delta)
    assert shuffle_epsilon_for_channel(rr, n, delta) < 0.9 * generic
    # unary encoding: a report can always be e^ε₀ times less likely under another input, so
    # the channel allows no more clones than the generic bound
    (e0, p), = clone_parameters(oue)
    assert p == pytest.approx(math.exp(-4.0), rel=1e-9)
    assert shuffle_epsilon_for_channel(oue, n, delta) == pytest.approx(generic, rel=1e-3)


def test_clone_parameters_front_and_errors():
    channel = CHANNELS["random"] / CHANNELS["random"].sum(axis=1, keepdims=True)
    front = clone_parameters(channel)
    assert len(front) >= 1
    for e0, p in front:
        assert 0 < p <= 1 and 0 < e0 <= realized_epsilon(channel) + 1e-12
        assert p >= math.exp(-realized_epsilon(channel)) - 1e-12
        assert not any(e >= e0 and q <= p and (e, q) != (e0, p) for e, q in front)
    assert clone_parameters(np.full((3, 2), 0.5)) == []
    assert shuffle_epsilon_for_channel(np.full((3, 2), 0.5), 10, 1e-6) == 0.0
    with pytest.raises(ValueError, match="sum to 1"):
        clone_parameters(np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="k ≥ 2"):
        clone_parameters(np.array([[0.5, 0.5]]))
    with pytest.raises(TypeError):
        clone_parameters(np.array([[1, 0], [0, 1]], dtype=np.int64))


# ------------------------------------------------------------------------------------------
# closed-form clone parameters (clone_parameters_for) against the exact channel
# ------------------------------------------------------------------------------------------

def _small_instances():
    """Small instances of every mechanism family clone_parameters_for covers (the registered
    mechanisms and the memoized ones), over the parameters that switch between its cases."""
    from ldpdist import longitudinal as lg

    out = []
    for eps in (0.5, 2.0, 5.0):
        for k in (2, 3, 4, 5, 7):
            out += [ldpdist.RandomizedResponse(k, eps), ldpdist.RAPPOR(k, eps),
                    ldpdist.OptimizedUnaryEncoding(k, eps), ldpdist.TwoStageRAPPOR(k, eps),
                    ldpdist.OneBitHadamardResponse(k, eps), ldpdist.HadamardResponse(k, eps),
                    ldpdist.OptimizedLocalHashing(k, eps)]
            out += [ldpdist.HadamardResponse(k, eps, blocks=b) for b in (1, 2, 4, 8)
                    if b <= 2 * k]
            out += [ldpdist.SubsetSelection(k, eps, d=d) for d in range(1, k)]
            out += [lg.DBitFlipPM(k, eps, d) for d in range(1, k + 1)]
            out += [lg.LongitudinalGRR(k, 2 * eps, eps), lg.LongitudinalSUE(k, 2 * eps, eps),
                    lg.LongitudinalOUE(k, 2 * eps, eps / 3),
                    lg.LongitudinalOSUE(k, 2 * eps, eps / 3),
                    lg.LongitudinalSOUE(k, 2 * eps, eps / 3), lg.MemoizedRAPPOR(k)]
        out.append(ldpdist.AsymmetricBinaryResponse(eps, eps / 3))
        for k, m in ((3, 2), (9, 4), (16, 6), (33, 2), (33, 8)):
            for matrix in ("balanced", "hadamard"):
                for regime in ("high", "medium"):
                    try:
                        out.append(ldpdist.CompressivePrivatization(
                            k, eps, m=m, seed=3, matrix=matrix, regime=regime))
                    except ValueError:   # the regime or the matrix does not exist there
                        pass
    out += [ldpdist.OptimizedLocalHashing(k, 1.0) for k in (10, 40)]
    out += [ldpdist.HadamardResponse(k, eps) for k in (20, 40) for eps in (1.0, 4.0)]
    return out


def _agrees(exact, closed, tol=1e-12):
    """The closed form's single (ε₀, p) equals every point of the exact front (which may
    hold a few copies of it that differ by rounding), or both are empty."""
    if not exact or not closed:
        return exact == closed
    (e0, p), = closed
    return all(abs(e - e0) <= tol and abs(q - p) <= tol for e, q in exact)


SMALL = _small_instances()


def test_closed_form_clone_parameters_match_the_exact_channel():
    families, gains = set(), 0
    for mech in SMALL:
        exact = clone_parameters(mech.channel_matrix())
        closed = privacy.clone_parameters_for(mech)
        assert _agrees(exact, closed), (mech, exact, closed)
        families.add(type(mech).__name__)
        (e0, p), = closed
        gains += p > math.exp(-e0) * (1 + 1e-9)
    from ldpdist import amplification

    assert gains > 0
    assert families == {cls.__name__ for cls in amplification._closed_form_rules()}
    # every registered mechanism is either covered or refused with a clear error
    covered = set(families)
    for name in ldpdist.specs.registered():
        assert name in covered or name in {"PublicCoinHashing", "BlockHadamardResponse",
                                           "HighLowHadamardResponse"}


def test_closed_form_check_catches_a_wrong_closed_form(monkeypatch):
    # the comparison has the power to fail: 1% off in p or in ε₀ is caught on every case
    for mech in SMALL[:60]:
        exact = clone_parameters(mech.channel_matrix())
        (e0, p), = privacy.clone_parameters_for(mech)
        assert not _agrees(exact, [(e0, p * 1.01)])
        assert not _agrees(exact, [(e0 * 1.01, p)])
    # and a wrong formula inside the module (k-RR's 2/(e^ε₀ + 1) off by 1%) is caught
    from ldpdist import amplification

    right = amplification._rr_clone
    monkeypatch.setattr(amplification, "_rr_clone", lambda e0: 1.01 * right(e0))
    rr = ldpdist.RandomizedResponse(5, 2.0)
    assert not _agrees(clone_parameters(rr.channel_matrix()), privacy.clone_parameters_for(rr))


def test_channel_specific_bound_at_large_k_never_above_the_generic_one():
    from ldpdist import longitudinal as lg

    n, delta, k = 10_000, 1e-6, 4096
    mechs = [ldpdist.RandomizedResponse(k, 4.0), ldpdist.HadamardResponse(k, 4.0),
             ldpdist.HadamardResponse(k, 9.0), ldpdist.OptimizedUnaryEncoding(k, 2.0),
             ldpdist.OptimizedLocalHashing(k, 4.0), ldpdist.SubsetSelection(k, 2.0),
             lg.DBitFlipPM(k, 3.0, 2), lg.LongitudinalGRR(k, 4.0, 2.0)]
    ratios = []
    for mech in mechs:
        (e0, p), = privacy.clone_parameters_for(mech)   # k³·|Y| > 2^27: no channel here
        assert p >= math.exp(-e0) * (1 - 1e-12)
        specific = shuffle_epsilon_for_channel(mech, n, delta, tolerance=1e-3)
        generic = shuffle_epsilon(e0, n, delta, tolerance=1e-3)
        assert specific <= generic * (1 + 2e-3)
        ratios.append(generic / specific)
    assert max(ratios) > 1.2    # k-RR, HR with one symbol per block, dBitFlipPM (d = 2) gain
    # the δ side uses the same parameters
    rr = mechs[0]
    assert shuffle_delta_for_channel(rr, n, 0.2) <= shuffle_delta(rr.realized_epsilon, n, 0.2)


def test_clone_parameters_for_refuses_what_it_does_not_cover():
    from ldpdist import longitudinal as lg

    refused = [ldpdist.PublicCoinHashing(64, 4, seed=0),
               ldpdist.BlockHadamardResponse([4, 4], 1.0),
               ldpdist.HighLowHadamardResponse(8, 1.0, sensitive=[0, 1]),
               ldpdist.CompressivePrivatization(16, 1.0, m=4, seed=0, matrix="rademacher"),
               lg.MemoizedRAPPOR(16, num_bits=8, num_hashes=2), "rr"]
    for mech in refused:
        with pytest.raises(ValueError, match="closed.form"):
            privacy.clone_parameters_for(mech)
    # the *_for_channel functions fall back to the exact channel for a small instance
    bloom = refused[4]
    assert shuffle_epsilon_for_channel(bloom, 1000, 1e-6) == shuffle_epsilon_for_channel(
        bloom.channel_matrix(), 1000, 1e-6)
