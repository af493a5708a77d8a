"""ldpdist.linear.AdaptiveLinearQueries: adaptive sample splitting (Algorithm 6 of Bassily,
"Linear Queries Estimation with Local Differential Privacy", AISTATS 2019), pure ε-LDP with
one bit per user.

Exact checks (unbiasedness and the privacy ratio from the exact probabilities the sampler
uses; the round assignment and the replies recomputed from the specification alone),
statistical checks with fixed seeds (reply frequencies, assignment uniformity, an adaptive
bisection for a median against Theorem 5.2's bound), thread-count determinism, the order
rules of the interactive protocol, and bad parameters, queries, replies and user indices.
"""

from __future__ import annotations

import json
import math
import warnings
from decimal import Decimal, localcontext
from fractions import Fraction

import chacha_reference as ref
import numpy as np
import pytest
from conftest import run_python
from ldpdist import _core
from ldpdist.linear import AdaptiveLinearQueries, adaptive_error_bound

ASSIGNMENT_STREAM = 2**64 - 1


def reference_round(seed: int, user: int, rounds: int) -> int:
    """User ``user``'s round from the specification in rust/linear/adaptive.rs."""
    key = seed.to_bytes(32, "little")
    x = ref.djb_block(key, user // 16, ASSIGNMENT_STREAM)[user % 16]
    product = x * rounds
    if (product & ref.MASK32) >= (2**32 - rounds) % rounds:
        return product >> 32
    return ref.uniform_below(ref.WordStream(key, user), rounds)


def ln_ratio(a: Fraction, b: Fraction) -> Decimal:
    """ln(a/b) to 40 significant digits (the probabilities are exact binary fractions)."""
    with localcontext() as ctx:
        ctx.prec = 40
        return (Decimal(a.numerator) * b.denominator / (Decimal(a.denominator) * b.numerator)).ln()


def exact_loss(p: np.ndarray) -> Decimal:
    """max over v, v' and the reply of ln P(reply|v)/P(reply|v'), exactly from the floats."""
    lo, hi = Fraction(float(p.min())), Fraction(float(p.max()))
    return max(ln_ratio(hi, lo), ln_ratio(1 - lo, 1 - hi))


# -- the channel: exact unbiasedness and privacy --------------------------------------------


@pytest.mark.parametrize("epsilon, r", [(0.1, 1.0), (1.0, 1.0), (1.0, 0.37), (4.0, 2.5),
                                        (12.0, 1.0)])
def test_expected_reply_is_the_query_entry(epsilon, r):
    session = AdaptiveLinearQueries(10, 2, epsilon, r, seed=0)
    q = np.linspace(-r, r, 201)
    p = session.reply_probabilities(q)
    scale = Fraction(session.scale)
    for qv, pv in zip(q, p):
        # E[reply | v] = c r P(+) − c r (1 − P(+)), exactly for the float P(+) sampled
        mean = scale * (2 * Fraction(float(pv)) - 1)
        assert abs(mean - Fraction(float(qv))) <= scale * Fraction(1, 2**51)
    nominal = (math.exp(epsilon) + 1) / math.expm1(epsilon)
    assert session.c_epsilon == pytest.approx(nominal, rel=1e-12)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 2.0, 8.0, 25.0])
@pytest.mark.parametrize("r", [1.0, 3.0])
def test_privacy_ratio_reaches_e_epsilon_at_the_extremes_and_never_exceeds_it(epsilon, r):
    session = AdaptiveLinearQueries(10, 2, epsilon, r, seed=0)
    eps = Decimal(epsilon)
    grid = np.linspace(-r, r, 101)
    # every pair of values over the grid: the worst pair is the grid's extremes
    probabilities = session.reply_probabilities(grid)
    worst = exact_loss(probabilities)
    assert worst <= eps
    # tight up to the calibration: one step (2^-53) moves the loss by about 2^-53 / P_min
    slack = 1e-12 * epsilon + 4 * 2.0**-53 / probabilities.min()
    assert worst >= eps - Decimal(slack), (worst, eps)
    assert float(worst) == pytest.approx(session.realized_epsilon, rel=1e-14)
    # queries that do not reach both −r and +r lose strictly less, as realized_epsilon_of says
    for lo, hi in [(-r, 0.0), (0.0, r), (-r / 2, r / 2), (0.3 * r, 0.3 * r)]:
        q = np.linspace(lo, hi, 7)
        loss = exact_loss(session.reply_probabilities(q))
        assert loss < eps
        assert session.realized_epsilon_of(q) == pytest.approx(float(loss), rel=1e-13, abs=0)
    assert session.realized_epsilon <= epsilon


def test_reply_frequencies_match_the_probabilities():
    # Binomial z-score per value and a chi-square over values (df 5) on fixed seeds.
    session = AdaptiveLinearQueries(10, 2, 1.0, seed=0)
    q = np.array([-1.0, -0.5, 0.0, 0.2, 0.9, 1.0])
    p = session.reply_probabilities(q)
    per_value = 200_000
    values = np.repeat(np.arange(6), per_value)
    replies = session.respond(q, values, seed=11)
    assert replies.dtype == np.int8 and set(np.unique(replies)) == {-1, 1}
    plus = (replies.reshape(6, per_value) == 1).sum(axis=1)
    z = (plus - per_value * p) / np.sqrt(per_value * p * (1 - p))
    assert np.abs(z).max() < 4.5, z
    assert (z**2).sum() < 20.5  # chi-square, df 6, p = 0.002
    # the mean reply estimates q[v]
    means = session.scale * replies.reshape(6, per_value).mean(axis=1)
    sd = session.scale / math.sqrt(per_value)
    assert np.abs(means - q).max() < 4.5 * sd


def test_replies_follow_the_specification_word_by_word():
    # chunk 0 uses ChaCha12 stream 0 of the private key; one exact Bernoulli per user, in order
    session = AdaptiveLinearQueries(10, 2, 0.8, seed=0)
    q = np.array([-1.0, 0.3, 1.0, -0.25])
    values = np.array([0, 1, 2, 3, 1, 0, 2, 2, 3, 1])
    p = session.reply_probabilities(q)
    stream = ref.WordStream((5).to_bytes(32, "little"), 0, rounds=12)
    expected = [1 if ref.bernoulli(stream, float(p[v])) else -1 for v in values]
    assert session.respond(q, values, seed=5).tolist() == expected


def test_answer_equals_submitting_the_responses():
    values = np.random.default_rng(1).integers(0, 20, size=50_000)
    q = np.linspace(-1, 1, 20)
    one = AdaptiveLinearQueries(50_000, 3, 1.5, seed=9)
    two = AdaptiveLinearQueries(50_000, 3, 1.5, seed=9)
    for t in range(3):
        users = one.round_users(t)
        simulated = one.answer(q, values[users], seed=100 + t)
        assert two.pose(q) == t
        replies = two.respond(q, values[users], seed=100 + t)
        assert two.submit(t, replies) == simulated
        assert simulated == two.scale * replies.astype(np.int64).sum() / users.size


# -- round assignment --------------------------------------------------------------------


def test_assignment_test_vectors_from_the_specification():
    session = AdaptiveLinearQueries(2**40, 100, 1.0, seed=12345)
    users = [0, 1, 2, 3, 16, 1000, 123_456_789]
    expected = [94, 83, 70, 4, 22, 58, 4]  # also pinned in rust/linear/adaptive.rs
    assert [reference_round(12345, u, 100) for u in users] == expected
    assert session.round_of(users).tolist() == expected
    # d = 2^31 + 1 rejects about half of the first words: the users' own streams decide
    d = 2**31 + 1
    big = AdaptiveLinearQueries(2**40, d, 1.0, seed=2**200 + 7)
    users = list(range(24)) + [2**39 + 5]
    key = (2**200 + 7).to_bytes(32, "little")
    rejected = [u for u in users
                if (ref.djb_block(key, u // 16, ASSIGNMENT_STREAM)[u % 16] * d & ref.MASK32)
                < (2**32 - d) % d]
    assert 4 <= len(rejected) <= 20  # both branches are exercised
    assert big.round_of(users).tolist() == [reference_round(2**200 + 7, u, d) for u in users]


def test_assignment_is_uniform_and_consistent():
    n, d = 200_000, 10
    session = AdaptiveLinearQueries(n, d, 1.0, seed=77)
    sizes = session.round_sizes()
    assert sizes.sum() == n
    chi2 = ((sizes - n / d) ** 2 / (n / d)).sum()
    assert chi2 < 27.88  # df 9, p = 0.001
    rounds = session.round_of(np.arange(n))
    for t in (0, 4, 9):
        users = session.round_users(t)
        assert np.array_equal(users, np.flatnonzero(rounds == t))
    assert np.array_equal(np.bincount(rounds, minlength=d), sizes)


def test_assignment_does_not_depend_on_the_data():
    # Same seed, different data and queries: the same users in every round, before and after
    # rounds are answered; a different seed gives a different assignment.
    rng = np.random.default_rng(3)
    a = AdaptiveLinearQueries(30_000, 6, 1.0, seed=21)
    b = AdaptiveLinearQueries(30_000, 6, 1.0, seed=21)
    before = [a.round_users(t) for t in range(6)]
    a.answer(np.ones(4), rng.integers(0, 4, size=a.round_sizes()[0]), seed=1)
    b.answer(-np.ones(9), np.zeros(b.round_sizes()[0], dtype=int), seed=2)
    for t in range(6):
        assert np.array_equal(a.round_users(t), before[t])
        assert np.array_equal(b.round_users(t), before[t])
    other = AdaptiveLinearQueries(30_000, 6, 1.0, seed=22)
    assert not np.array_equal(other.round_users(0), before[0])


def test_seed_none_draws_a_public_seed_that_reproduces_the_assignment():
    session = AdaptiveLinearQueries(1000, 4, 1.0)
    again = AdaptiveLinearQueries(1000, 4, 1.0, seed=session.seed)
    assert 0 <= session.seed < 2**256
    assert np.array_equal(session.round_sizes(), again.round_sizes())


DETERMINISM = """
import json
import numpy as np
from ldpdist import _core
from ldpdist.linear import AdaptiveLinearQueries
n = 3 * _core.SAMPLE_CHUNK + 5
session = AdaptiveLinearQueries(2 * n, 2, 0.7, seed=4)
values = np.random.default_rng(0).integers(0, 300, size=n)
q = np.cos(np.arange(300.0))
out = {
    "replies": digest(session.respond(q, values, seed=8)),
    "sizes": digest(session.round_sizes()),
    "users": digest(session.round_users(1)),
    "rounds": digest(session.round_of(np.arange(2 * n))),
    "answer": session.answer(q, np.resize(values, session.round_sizes()[0]), seed=9),
}
print(json.dumps(out))
"""


def test_seeded_results_do_not_depend_on_the_thread_count():
    runs = {threads: json.loads(run_python(DETERMINISM, env={"RAYON_NUM_THREADS": str(threads)}))
            for threads in (1, 2, 4)}
    assert runs[1] == runs[2] == runs[4]


# -- the interactive flow ------------------------------------------------------------------


def test_adaptive_bisection_finds_the_median_within_the_bound():
    """100 rounds, n = 10^6 users, J = 1000: a bisection for the median chosen from earlier
    answers, 10 steps of 10 pooled rounds each (⌈log2 1000⌉ = 10).

    Tolerance: a step compares the mean answer of its rounds (about 10^5 users, standard
    deviation σ ≤ c_ε r / √N) with ½; it can go the wrong way only where |F(mid) − ½| < 5σ
    (otherwise with probability < 6e-7 per step). So the final m̂ satisfies
    F(m̂) ≥ ½ − 5σ and F(m̂ − 1) < ½ + 5σ, with F the true CDF."""
    J, rounds, n, epsilon = 1000, 100, 10**6, 1.0
    grid = np.arange(J)
    p = np.exp(-0.5 * ((grid - 400.0) / 120.0) ** 2)
    p /= p.sum()
    cdf = np.cumsum(p)
    values = np.random.default_rng(2026).choice(J, size=n, p=p)
    session = AdaptiveLinearQueries(n, rounds, epsilon, seed=5)
    assert session.bound_applies
    lo, hi, t = 0, J - 1, 0
    worst_sigma = 0.0
    while lo < hi:
        mid = (lo + hi) // 2
        q = (grid <= mid).astype(np.float64)  # ⟨q, p⟩ = F(mid)
        step = [session.answer(q, values[session.round_users(t + i)], seed=1000 + t + i)
                for i in range(10)]
        users = session.round_sizes()[t:t + 10].sum()
        worst_sigma = max(worst_sigma, session.scale / math.sqrt(users))
        t += 10
        if np.mean(step) >= 0.5:
            hi = mid
        else:
            lo = mid + 1
    assert t == rounds and session.next_round == rounds
    median = int(np.searchsorted(cdf, 0.5))
    assert cdf[lo] >= 0.5 - 5 * worst_sigma
    assert cdf[lo - 1] < 0.5 + 5 * worst_sigma
    assert abs(lo - median) <= 12  # the density near the median is ≥ 0.003 per value
    # Theorem 5.2: the largest error over the rounds against ⟨q_t, p⟩
    errors = [abs(h.answer - float(h.query @ p)) for h in session.history]
    bound = session.bound()
    assert bound == pytest.approx(2 * session.c_epsilon * math.sqrt(200 * math.log(200) / n),
                                  rel=1e-9)
    assert max(errors) < bound, (max(errors), bound)
    # and the errors are those of ~10^4 users per round, not smaller: σ ≈ c_ε/100 each
    assert np.sqrt(np.mean(np.square(errors))) > 0.5 * session.scale / 100


def test_history_records_queries_answers_and_sizes():
    session = AdaptiveLinearQueries(5000, 3, 1.0, seed=1)
    values = np.zeros(5000, dtype=np.int64)
    q = np.array([0.5, -0.5])
    session.answer(q, values[session.round_users(0)], seed=0)
    q[0] = 0.0  # the recorded query is a copy
    (query, answer, size), = session.history
    assert query.tolist() == [0.5, -0.5] and not query.flags.writeable
    assert size == session.round_sizes()[0]
    assert session.answers.tolist() == [answer]
    assert session.domain_size == 2 and session.next_round == 1 and session.pending_query is None
    assert "1 rounds closed" in repr(session)


def test_rounds_without_users_answer_nan_with_a_warning():
    session = AdaptiveLinearQueries(3, 40, 1.0, seed=0)
    sizes = session.round_sizes()
    empty = np.flatnonzero(sizes == 0)
    assert empty.size >= 37
    q = np.array([1.0, -1.0])
    for t in range(40):
        values = np.zeros(sizes[t], dtype=np.int64)
        if sizes[t]:
            assert not math.isnan(session.answer(q, values, seed=t))
        elif t % 2:
            with pytest.warns(RuntimeWarning, match=f"round {t} has no users"):
                assert math.isnan(session.answer(q, values, seed=t))
        else:
            session.pose(q)
            with pytest.warns(RuntimeWarning, match="NaN"):
                assert math.isnan(session.submit(t, np.array([], dtype=np.int8)))
    assert np.isnan(session.answers).sum() == empty.size


def test_bound_warns_when_the_theorem_does_not_apply():
    with pytest.warns(RuntimeWarning, match="8 d ln n"):
        value = adaptive_error_bound(1000, 100, 1.0)
    assert value > 1.0
    session = AdaptiveLinearQueries(1000, 100, 1.0, seed=0)
    assert not session.bound_applies
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adaptive_error_bound(10**6, 100, 1.0, r=2.0)


# -- order of the protocol -----------------------------------------------------------------


def test_rounds_close_in_order_exactly_once():
    session = AdaptiveLinearQueries(100, 2, 1.0, seed=0)
    q = np.array([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="no round is open"):
        session.submit(0, np.ones(session.round_sizes()[0], dtype=np.int8))
    assert session.pose(q) == 0
    with pytest.raises(ValueError, match="round 0 is open"):
        session.pose(q)
    with pytest.raises(ValueError, match="round 0 is open"):
        session.answer(q, [0])
    with pytest.raises(ValueError, match="round 1 is not open"):
        session.submit(1, np.ones(session.round_sizes()[1], dtype=np.int8))
    with pytest.raises(ValueError, match="does not exist"):
        session.submit(2, [])
    with pytest.raises(ValueError, match=r"round 0 has \d+ users, got 1 replies"):
        session.submit(0, [1])
    session.submit(0, np.ones(session.round_sizes()[0], dtype=np.int8))
    assert session.answers[0] == pytest.approx(session.scale)
    with pytest.raises(ValueError, match="round 0 is already closed"):
        session.submit(0, np.ones(session.round_sizes()[0], dtype=np.int8))
    with pytest.raises(ValueError, match=r"round 1 has \d+ users, got 1 values"):
        session.answer(q, [0])
    assert session.next_round == 1 and session.pending_query is None  # refused calls change nothing
    session.answer(q, np.zeros(session.round_sizes()[1], dtype=int), seed=0)
    with pytest.raises(ValueError, match="all 2 rounds are closed"):
        session.pose(q)
    with pytest.raises(ValueError, match="all 2 rounds are closed"):
        session.answer(q, [])


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(epsilon=0.0), ValueError, "epsilon must be > 0"),
    (dict(epsilon=-1.0), ValueError, "epsilon must be > 0"),
    (dict(epsilon=math.nan), ValueError, "epsilon must be finite"),
    (dict(epsilon=math.inf), ValueError, "epsilon must be finite"),
    (dict(epsilon=701.0), ValueError, "too large"),
    (dict(epsilon=60.0), ValueError, "cannot be"),
    (dict(epsilon=1e-18), ValueError, "cannot be represented"),
    (dict(epsilon="1"), TypeError, "epsilon must be a real number"),
    (dict(r=0.0), ValueError, "r .* must be > 0"),
    (dict(r=-2.0), ValueError, "r .* must be > 0"),
    (dict(r=math.inf), ValueError, "r must be finite"),
    (dict(n_users=0), ValueError, "n_users must be ≥ 1"),
    (dict(n_users=2.5), TypeError, "n_users must be an integer"),
    (dict(rounds=0), ValueError, "rounds must be ≥ 1"),
    (dict(rounds=2**32 + 1), ValueError, "rounds must be ≤"),
    (dict(seed=-1), ValueError, "seed must be ≥ 0"),
    (dict(domain_size=0), ValueError, "domain_size must be ≥ 1"),
])
def test_bad_parameters_are_refused(kwargs, error, match):
    params = dict(n_users=100, rounds=4, epsilon=1.0, r=1.0, seed=0)
    params.update(kwargs)
    with pytest.raises(error, match=match):
        AdaptiveLinearQueries(**params)


@pytest.mark.parametrize("query, error, match", [
    ([0.0, math.nan, 0.5], ValueError, r"query must be finite: element 1 is nan"),
    ([0.0, 0.5, -math.inf], ValueError, r"query must be finite: element 2"),
    ([0.0, 0.5, 1.25, 3.0], ValueError, r"\|q\[v\]\| ≤ r = 1.0: query\[2\] = 1.25"),
    ([-1.0000000000000002], ValueError, r"query\[0\]"),
    ([], ValueError, "at least one entry"),
    (np.zeros((2, 2)), ValueError, "one-dimensional"),
    (np.arange(3), TypeError, "float64"),
    (["a"], TypeError, "real numbers"),
])
def test_bad_queries_are_refused_everywhere(query, error, match):
    session = AdaptiveLinearQueries(100, 4, 1.0, seed=0)
    for call in (lambda: session.pose(query), lambda: session.answer(query, []),
                 lambda: session.respond(query, [0]), lambda: session.realized_epsilon_of(query)):
        with pytest.raises(error, match=match):
            call()
    assert session.next_round == 0 and session.domain_size is None


def test_domain_size_mismatches_are_refused():
    session = AdaptiveLinearQueries(100, 4, 1.0, seed=0)
    session.answer(np.zeros(5), np.zeros(session.round_sizes()[0], dtype=int), seed=0)
    with pytest.raises(ValueError, match="length 4, but this session's queries have length J = 5"):
        session.pose(np.zeros(4))
    with pytest.raises(ValueError, match=r"values must lie in \[0, 5\): values\[1\] = 5"):
        session.respond(np.zeros(5), [0, 5])
    with pytest.raises(ValueError, match=r"values must lie in \[0, 5\): values\[0\] = -1"):
        session.answer(np.zeros(5), [-1] + [0] * (session.round_sizes()[1] - 1))
    fixed = AdaptiveLinearQueries(100, 4, 1.0, seed=0, domain_size=3)
    with pytest.raises(ValueError, match="length J = 3"):
        fixed.answer(np.zeros(2), [])
    with pytest.raises(TypeError, match="values must be integers"):
        fixed.respond(np.zeros(3), [0.5])


@pytest.mark.parametrize("replies, error, match", [
    ([1, 0, -1], ValueError, r"replies must be \+1 or −1: replies\[1\] = 0"),
    (np.array([1, -1, 2], dtype=np.int8), ValueError, r"replies\[2\] = 2"),
    (np.array([1, 1, 3], dtype=np.uint8), ValueError, r"replies\[2\] = 3"),
    (np.array([True, False, True]), TypeError, "not booleans"),
    ([1.0, -1.0, 1.0], TypeError, r"\+1 or −1 integers"),
    (np.ones((3, 1), dtype=np.int8), ValueError, "one-dimensional"),
])
def test_bad_replies_are_refused(replies, error, match):
    n = 3
    for seed in range(200):  # a session whose first round has exactly 3 users
        session = AdaptiveLinearQueries(6, 2, 1.0, seed=seed)
        if session.round_sizes()[0] == n:
            break
    session.pose(np.zeros(2))
    with pytest.raises(error, match=match):
        session.submit(0, replies)
    assert session.next_round == 0 and session.pending_query is not None


def test_bad_user_indices_are_refused():
    session = AdaptiveLinearQueries(10, 4, 1.0, seed=0)
    with pytest.raises(ValueError, match=r"users must lie in \[0, 10\): users\[1\] = 10"):
        session.round_of([0, 10])
    with pytest.raises(TypeError, match="integer user indices"):
        session.round_of([0.5])
    with pytest.raises(ValueError, match="t must be ≤ 3"):
        session.round_users(4)
    assert session.round_of([]).size == 0


def test_the_core_refuses_what_python_would():
    # the last line of defence: the same checks without the Python layer
    channel = _core.AdaptiveReplyChannel(1.0, 1.0)
    with pytest.raises(ValueError, match=r"q\[1\]"):
        channel.plus_probabilities(np.array([0.0, 2.0]))
    with pytest.raises(ValueError, match=r"values\[0\] = 7"):
        channel.respond(None, np.zeros(3), np.array([7], dtype=np.uint32))
    with pytest.raises(ValueError, match=r"replies\[0\] = 0"):
        _core.adaptive_count_plus(np.zeros(1, dtype=np.int8))
    with pytest.raises(ValueError, match="rounds must lie in"):
        _core.adaptive_group_users(bytes(32), 10, 0)
    with pytest.raises(ValueError, match="finite"):
        _core.AdaptiveReplyChannel(math.inf, 1.0)


def test_huge_sessions_are_refused_by_the_memory_guard():
    from ldpdist import memory_limit, set_memory_limit
    previous = memory_limit()
    set_memory_limit("64M")
    try:
        session = AdaptiveLinearQueries(10**9, 4, 1.0, seed=0)
        assert session.round_of([10**9 - 1]).shape == (1,)  # a client needs no grouping
        with pytest.raises(MemoryError, match="round assignment"):
            session.round_sizes()
    finally:
        set_memory_limit(previous if previous < 2**63 else None)


def test_spec_round_trips_through_json():
    session = AdaptiveLinearQueries(5000, 7, 0.9, 2.0, seed=2**255 + 3, domain_size=12)
    spec = json.loads(json.dumps(session.to_dict()))
    again = AdaptiveLinearQueries.from_dict(spec)
    assert again.to_dict() == session.to_dict()
    assert np.array_equal(again.round_sizes(), session.round_sizes())
    assert again.realized_epsilon == session.realized_epsilon
    lazy = AdaptiveLinearQueries(10, 2, 1.0, seed=1)
    assert AdaptiveLinearQueries.from_dict(lazy.to_dict()).domain_size is None
    with pytest.raises(ValueError, match="exactly the keys"):
        AdaptiveLinearQueries.from_dict({**spec, "extra": 1})
    with pytest.raises(ValueError, match="not an AdaptiveLinearQueries spec"):
        AdaptiveLinearQueries.from_dict({**spec, "protocol": "Gaussian"})
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        AdaptiveLinearQueries.from_dict({**spec, "epsilon": -1.0})
