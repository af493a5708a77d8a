"""ldpdist.privacy: budget matrices and the exact E-LDP verifier.

The verifier (rust/privacy.rs) is held against a brute-force triple loop, the definition
itself: amount = (ln Q(y|x) − ln Q(y|x')) − E[x, x'] over the constrained triples, the
lexicographically first triple among exact ties. Its logarithm is the C library's (as
math.log), so the comparison is bit for bit.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ldpdist
from conftest import run_python
from ldpdist import privacy
from ldpdist.mechanisms.base import _REGISTRY

INF = math.inf

# -- the oracle -----------------------------------------------------------------------------


def log_channel(Q: np.ndarray) -> np.ndarray:
    """ln Q entry by entry with math.log (the verifier's logarithm), −inf for 0."""
    return np.array([[math.log(v) if v > 0 else -INF for v in row] for row in Q.tolist()],
                    dtype=np.float64).reshape(Q.shape)


def brute_force(Q, E):
    """(amount, pair, output) of the worst triple: every ordered pair, every output, the
    first maximum in lexicographic order (x, x', y)."""
    Q = np.asarray(Q, dtype=np.float64)
    E = np.asarray(E, dtype=np.float64)
    L = log_channel(Q)
    k = Q.shape[0]
    best, pair, output = -INF, None, None
    for x in range(k):
        possible = Q[x] > 0
        for x2 in range(k):
            if x == x2 or E[x, x2] == INF:
                continue
            with np.errstate(invalid="ignore"):
                amounts = (L[x] - L[x2]) - E[x, x2]  # float64, one rounding each, as a scalar
            amounts[~possible] = -INF
            y = int(np.argmax(amounts))  # the first maximal output
            if amounts[y] > best:
                best, pair, output = float(amounts[y]), (x, x2), y
    return best, pair, output


def brute_force_realized(Q):
    Q = np.asarray(Q, dtype=np.float64)
    L = log_channel(Q)
    k = Q.shape[0]
    R = np.zeros((k, k))
    for x in range(k):
        for x2 in range(k):
            if x != x2:
                with np.errstate(invalid="ignore"):
                    d = L[x] - L[x2]
                d[Q[x] == 0] = -INF
                R[x, x2] = max(d.max(), 0.0)
    return R


def same_bits(a: float, b: float) -> bool:
    return np.float64(a).tobytes() == np.float64(b).tobytes()


def assert_matches_oracle(Q, E):
    v = privacy.verify(Q, E)
    amount, pair, output = brute_force(Q, E)
    assert (v.pair, v.output) == (pair, output)
    assert same_bits(v.amount, amount), (v.amount, amount)
    R = privacy.realized_budgets(Q)
    want = brute_force_realized(Q)
    assert R.dtype == np.float64 and R.shape == want.shape
    assert R.tobytes() == want.tobytes()
    return v


# -- random channels ------------------------------------------------------------------------


def random_case(seed, k, n, zeros=0.1, infinite=0.2, duplicate_rows=0, duplicate_columns=0,
                levels=None):
    """A channel with some zero entries (rows normalized, some rows left unnormalized),
    duplicated rows/columns (exact ties), and an asymmetric budget matrix with +inf
    entries. ``levels`` draws entries from a few values (many exact ties)."""
    rng = np.random.default_rng(seed)
    if levels:
        Q = rng.choice(np.array(levels, dtype=np.float64), size=(k, n))
    else:
        Q = rng.random((k, n)) + 1e-3
    Q[rng.random((k, n)) < zeros] = 0.0
    Q /= np.maximum(Q.sum(axis=1, keepdims=True), 1e-300)
    for _ in range(duplicate_rows):
        a, b = rng.integers(0, k, 2)
        Q[a] = Q[b]
    for _ in range(duplicate_columns):
        a, b = rng.integers(0, n, 2)
        Q[:, a] = Q[:, b]
    E = rng.random((k, k)) * 2.0
    E[rng.random((k, k)) < infinite] = INF
    np.fill_diagonal(E, 0.0)
    return Q, E


@pytest.mark.parametrize("seed,k,n", [
    (1, 1, 1), (2, 2, 1), (3, 2, 3), (4, 3, 7), (5, 7, 9), (6, 16, 8), (7, 31, 17),
    (8, 33, 40), (9, 40, 1030), (10, 70, 65),
])
def test_verify_and_realized_budgets_equal_the_triple_loop_bit_for_bit(seed, k, n):
    """Sizes around the tile (32 rows), register block, vector (8) and chunk (1024)
    boundaries; the larger ones take the parallel path."""
    Q, E = random_case(seed, k, n)
    assert_matches_oracle(Q, E)


@pytest.mark.parametrize("seed", range(6))
def test_exact_ties_go_to_the_lexicographically_first_triple(seed):
    """Duplicated rows and columns and few distinct values: many triples share the worst
    amount exactly; the first one in (x, x', y) order is reported."""
    Q, E = random_case(seed, 45, 37, zeros=0.05, duplicate_rows=20, duplicate_columns=15,
                       levels=[0.1, 0.2, 0.4])
    E[np.isfinite(E)] = 0.5  # equal budgets: pairs tie too
    np.fill_diagonal(E, 0.0)
    assert_matches_oracle(Q, E)
    # all rows equal: every constrained triple has amount −E; the first is (0, 1, 0)
    Q = np.full((40, 12), 1 / 12)
    v = privacy.verify(Q, privacy.uniform_budgets(40, 0.25))
    assert (v.amount, v.pair, v.output) == (-0.25, (0, 1), 0)


def test_ties_are_decided_on_the_amount_not_on_the_difference():
    """Two outputs of one pair with different differences d_0 < d_1 whose amounts
    fl(d − E) round to the same value: both triples tie, so y = 0 is reported (the earlier
    numpy code took the argmax of d and reported y = 1)."""
    e = 100.0  # ulp(d − e) ≈ 1.4e-14, far coarser than the spacing of the d's
    for p in np.linspace(0.52, 0.53, 20001):
        q0, q1 = float(p), float(np.nextafter(p, 1.0))
        d0, d1 = math.log(q0) - math.log(0.5), math.log(q1) - math.log(0.5)
        if d0 < d1 and d0 - e == d1 - e:
            break
    else:
        pytest.fail("no rounding collision found")
    Q = np.array([[q0, q1, 0.0], [0.5, 0.5, 0.0]])
    E = np.array([[0.0, e], [INF, 0.0]])
    v = assert_matches_oracle(Q, E)
    assert (v.pair, v.output, v.amount) == ((0, 1), 0, d1 - e)


def test_agrees_with_numpy_logarithms_up_to_their_last_bits():
    """numpy.log may differ from the C library's log in the last bit (AVX-512 builds); the
    old numpy reference (np.log) therefore agrees to rounding, not bit for bit."""
    Q, E = random_case(11, 30, 200)
    v = privacy.verify(Q, E)
    with np.errstate(divide="ignore", invalid="ignore"):
        L = np.log(Q)
        excess = L[:, None, :] - L[None, :, :]
    excess[np.broadcast_to((Q == 0)[:, None, :], excess.shape)] = -INF
    with np.errstate(invalid="ignore"):
        worst = excess.max(axis=2) - E
    worst[~np.isfinite(E) | np.eye(30, dtype=bool)] = -INF
    assert v.amount == pytest.approx(worst.max(), rel=1e-13, abs=1e-13)


# -- what a violation looks like ------------------------------------------------------------


def rr_channel(k=5, epsilon=1.0):
    return ldpdist.RandomizedResponse(k, epsilon).channel_matrix()


def test_randomized_response_satisfies_its_budget_and_a_nudged_one_does_not():
    k, eps, delta = 5, 1.0, 1e-3
    Q = rr_channel(k, eps)
    ok = privacy.verify(Q, privacy.uniform_budgets(k, eps))
    assert ok.satisfied(tolerance=1e-12) and abs(ok.amount) < 1e-12
    # Q(2|2) up by a factor 1 + δ: every pair (2, x') is violated at y = 2 by ln(1 + δ)
    broken = Q.copy()
    broken[2, 2] *= 1 + delta
    v = privacy.verify(broken, privacy.uniform_budgets(k, eps))
    assert (v.pair, v.output) == ((2, 0), 2)
    assert v.amount == pytest.approx(math.log1p(delta), rel=1e-9)
    assert not v.satisfied(tolerance=1e-12)
    assert_matches_oracle(broken, privacy.uniform_budgets(k, eps))
    # Q(1|4) down by 1 − δ: only (1, 4) at y = 1, by −ln(1 − δ)
    broken = Q.copy()
    broken[4, 1] *= 1 - delta
    v = privacy.verify(broken, privacy.uniform_budgets(k, eps))
    assert (v.pair, v.output) == ((1, 4), 1)
    assert v.amount == pytest.approx(-math.log1p(-delta), rel=1e-9)
    # Q(1|4) = 0: every x ≠ 4 can output 1, input 4 cannot: +inf at (0, 4, 1)
    broken[4, 1] = 0.0
    v = privacy.verify(broken, privacy.uniform_budgets(k, eps))
    assert (v.amount, v.pair, v.output) == (INF, (0, 4), 1)
    # ... unless those pairs are unconstrained
    E = privacy.uniform_budgets(k, eps)
    E[:, 4] = INF
    E[4, 4] = 0.0
    assert privacy.verify(broken, E).pair != (0, 4)


def test_nothing_constrained_and_zero_rows():
    Q = rr_channel(3)
    v = privacy.verify(Q, np.where(np.eye(3, dtype=bool), 0.0, INF))
    assert (v.amount, v.pair, v.output) == (-INF, None, None)
    assert v.satisfied()
    # a row of zeros (rows need not be normalized) constrains nothing
    Q = np.array([[0.0, 0.0], [0.5, 0.5]])
    v = privacy.verify(Q, np.array([[0.0, 1.0], [INF, 0.0]]))
    assert (v.amount, v.pair, v.output) == (-INF, None, None)
    np.testing.assert_array_equal(privacy.realized_budgets(Q), [[0.0, 0.0], [INF, 0.0]])


def test_high_low_budgets_are_held_against_the_rows_of_sensitive_inputs_only():
    """A channel that protects only input 0: rows of the other inputs are free."""
    Q = np.array([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [0.25, 0.25, 0.5]])
    E = privacy.high_low_budgets(3, [0], math.log(2))
    v = privacy.verify(Q, E)
    assert v.satisfied(tolerance=1e-15) and abs(v.amount) < 1e-15
    assert (v.pair, v.output) == ((0, 1), 0)
    # the same channel under plain ε-LDP: input 1 outputs 2, input 0 never does
    v = privacy.verify(Q, privacy.uniform_budgets(3, math.log(2)))
    assert (v.amount, v.pair, v.output) == (INF, (1, 0), 2)
    R = privacy.realized_budgets(Q)
    assert R[0, 1] == pytest.approx(math.log(2)) and R[1, 0] == INF


# -- every mechanism --------------------------------------------------------------------


# Plain ε-LDP mechanisms; context-aware ones are held to their own budget matrices by
# test_mechanisms.py::test_channel_satisfies_the_budgets_it_promises (realized_budgets()
# equal to privacy.realized_budgets(channel): tight by construction).
PRIVATE = sorted(name for name, cls in _REGISTRY.items() if cls.private and not cls.context_aware)


def make_private(name, k, epsilon):
    if name == "CompressivePrivatization":  # m < k compressed reports; ε ≤ ln m
        return _REGISTRY[name](k=k, epsilon=epsilon, m=max(2, min(k - 1, 10)), seed=3,
                               regime="high" if epsilon > math.log(k - 1) else "auto")
    return _REGISTRY[name](k=k, epsilon=epsilon)


@pytest.mark.parametrize("name", PRIVATE)
@pytest.mark.parametrize("k,epsilon", [(3, 0.5), (12, 2.0)])
def test_every_private_mechanism_satisfies_its_realized_epsilon_and_no_less(name, k, epsilon):
    mech = make_private(name, k, epsilon)
    Q = mech.channel_matrix()
    eps = mech.realized_epsilon
    v = privacy.verify(Q, privacy.uniform_budgets(k, eps))
    assert v.satisfied(tolerance=1e-12), v
    assert abs(v.amount) < 1e-12, "the realized ε is attained"
    smaller = privacy.verify(Q, privacy.uniform_budgets(k, eps * (1 - 1e-9)))
    assert not smaller.satisfied(tolerance=1e-12), smaller
    assert smaller.amount == pytest.approx(eps * 1e-9, rel=1e-3)
    assert_matches_oracle(Q, privacy.uniform_budgets(k, eps * (1 - 1e-9)))


# -- budget matrices ------------------------------------------------------------------------


def test_uniform_budgets():
    E = privacy.uniform_budgets(4, 0.5)
    assert E.dtype == np.float64 and E.shape == (4, 4) and E.flags.c_contiguous
    np.testing.assert_array_equal(E, np.where(np.eye(4, dtype=bool), 0.0, 0.5))
    np.testing.assert_array_equal(privacy.uniform_budgets(1, 2.0), [[0.0]])
    np.testing.assert_array_equal(privacy.uniform_budgets(2, 0), [[0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(privacy.uniform_budgets(2, INF), [[0.0, INF], [INF, 0.0]])
    assert privacy.uniform_budgets(np.int64(3), np.float32(0.5))[0, 1] == 0.5


def test_high_low_budgets_are_asymmetric():
    E = privacy.high_low_budgets(5, [3, 1], 0.7)
    want = np.full((5, 5), INF)
    want[[1, 3], :] = 0.7
    np.fill_diagonal(want, 0.0)
    np.testing.assert_array_equal(E, want)
    assert E[1, 0] == 0.7 and E[0, 1] == INF  # protected x = 1 against 0, not the reverse
    assert not np.array_equal(E, E.T)
    np.testing.assert_array_equal(privacy.high_low_budgets(3, [], 1.0),
                                  np.where(np.eye(3, dtype=bool), 0.0, INF))
    np.testing.assert_array_equal(privacy.high_low_budgets(3, np.arange(3), 1.0),
                                  privacy.uniform_budgets(3, 1.0))
    privacy.check_budgets(E, 5)


def test_block_budgets_from_sizes_and_from_labels():
    by_sizes = privacy.block_budgets([2, 3], 0.4)
    by_labels = privacy.block_budgets([0, 0, 1, 1, 1], 0.4)
    want = np.full((5, 5), INF)
    want[:2, :2] = 0.4
    want[2:, 2:] = 0.4
    np.fill_diagonal(want, 0.0)
    np.testing.assert_array_equal(by_sizes, want)
    np.testing.assert_array_equal(by_labels, want)
    # labels need not be contiguous: blocks {0, 2} and {1, 3}
    E = privacy.block_budgets(np.array([0, 1, 0, 1], dtype=np.uint8), 1.5)
    assert (E[0, 2], E[1, 3], E[0, 1], E[3, 0]) == (1.5, 1.5, INF, INF)
    np.testing.assert_array_equal(E, E.T)
    # one block is plain ε-LDP; singletons constrain nothing
    np.testing.assert_array_equal(privacy.block_budgets([4], 0.3), privacy.uniform_budgets(4, 0.3))
    np.testing.assert_array_equal(privacy.block_budgets([1, 1, 1], 0.3),
                                  np.where(np.eye(3, dtype=bool), 0.0, INF))
    np.testing.assert_array_equal(privacy.block_labels([2, 1], k=3), [0, 0, 1])
    np.testing.assert_array_equal(privacy.block_labels([1, 0, 1], k=3), [1, 0, 1])


BAD_CONSTRUCTORS = [
    # (call, exception, message fragment)
    (lambda: privacy.uniform_budgets(0, 1.0), ValueError, "k"),
    (lambda: privacy.uniform_budgets(3, -0.1), ValueError, "epsilon must be ≥ 0 (or +inf), got -0.1"),
    (lambda: privacy.uniform_budgets(3, math.nan), ValueError, "epsilon must be ≥ 0 (or +inf), got nan"),
    (lambda: privacy.uniform_budgets(3, -INF), ValueError, "epsilon must be ≥ 0"),
    (lambda: privacy.uniform_budgets(3, "1"), TypeError, "epsilon must be a real number"),
    (lambda: privacy.uniform_budgets(3, True), TypeError, "epsilon must be a real number"),
    (lambda: privacy.high_low_budgets(4, [1, 4], 1.0), ValueError, "sensitive values must lie in [0, 4): sensitive[1] = 4"),
    (lambda: privacy.high_low_budgets(4, [-1], 1.0), ValueError, "sensitive[0] = -1"),
    (lambda: privacy.high_low_budgets(4, [2, 0, 2], 1.0), ValueError, "2 is repeated (positions 0 and 2)"),
    (lambda: privacy.high_low_budgets(4, [0.5], 1.0), TypeError, "sensitive must be integer values"),
    (lambda: privacy.high_low_budgets(4, "01", 1.0), TypeError, "sensitive must be integer values"),
    (lambda: privacy.high_low_budgets(4, [[0, 1]], 1.0), ValueError, "one-dimensional"),
    (lambda: privacy.high_low_budgets(4, [0], math.nan), ValueError, "epsilon must be ≥ 0"),
    (lambda: privacy.block_budgets([2, -1], 1.0), ValueError, "block sizes must be ≥ 1 (no empty blocks): blocks[1] = -1"),
    (lambda: privacy.block_budgets([], 1.0), ValueError, "non-empty 1-D list"),
    (lambda: privacy.block_budgets([0, 2, 2], 1.0), ValueError, "label 1 is unused (largest label 2)"),
    (lambda: privacy.block_budgets([1, 0, -1], 1.0), ValueError, "block labels must be ≥ 0: blocks[2] = -1"),
    (lambda: privacy.block_budgets([2.0, 3.0], 1.0), TypeError, "blocks must be integers"),
    (lambda: privacy.block_budgets([2, 3], -1.0), ValueError, "epsilon must be ≥ 0"),
    # explicit member lists (which could overlap or leave inputs out) are not a form
    (lambda: privacy.block_budgets([[0, 1], [1, 2]], 1.0), ValueError, "1-D list of block sizes or labels, got shape (2, 2)"),
    (lambda: privacy.block_budgets([[0, 1], [2]], 1.0), TypeError, "blocks"),
    # a partition of [0, k) exactly
    (lambda: privacy.block_labels([2, 2], k=5), ValueError, "block sizes must add up to k = 5, got 4"),
    (lambda: privacy.block_labels([2, 4], k=5), ValueError, "block sizes must add up to k = 5, got 6"),
    (lambda: privacy.block_labels([0, 1, 1], k=4), ValueError, "one entry per input (k = 4), got 3"),
]


@pytest.mark.parametrize("case", range(len(BAD_CONSTRUCTORS)))
def test_bad_budget_constructor_arguments_are_refused_clearly(case):
    call, exception, fragment = BAD_CONSTRUCTORS[case]
    with pytest.raises(exception) as info:
        call()
    assert fragment in str(info.value)


def E2(a, b, c, d):
    return np.array([[a, b], [c, d]], dtype=np.float64)


BAD_BUDGETS = [
    (np.zeros((2, 3)), ValueError, "budgets must be a square k × k matrix, got shape (2, 3)"),
    (np.zeros(4), ValueError, "square k × k matrix, got shape (4,)"),
    (np.zeros((0, 0)), ValueError, "square k × k matrix, got shape (0, 0)"),
    (E2(0, math.nan, 1, 0), ValueError, "budgets must be ≥ 0 or +inf: budgets[0, 1] = nan"),
    (E2(0, 1, -0.5, 0), ValueError, "budgets must be ≥ 0 or +inf: budgets[1, 0] = -0.5"),
    (E2(0, -INF, 1, 0), ValueError, "budgets[0, 1] = -inf"),
    (E2(0, 1, 1, 0.5), ValueError, "budgets must have a zero diagonal: budgets[1, 1] = 0.5"),
    (E2(INF, 1, 1, 0), ValueError, "zero diagonal: budgets[0, 0] = inf"),
    (E2(0, 1, 1, 0).astype(np.float32), TypeError, "budgets must have dtype float64, got float32"),
    (np.zeros((2, 2), dtype=bool), TypeError, "budgets must have dtype float64, got bool"),
    ([[0, 1], [1]], TypeError, "budgets"),
]


@pytest.mark.parametrize("case", range(len(BAD_BUDGETS)))
def test_bad_budget_matrices_are_refused_clearly(case):
    E, exception, fragment = BAD_BUDGETS[case]
    for call in (lambda: privacy.check_budgets(E), lambda: privacy.verify(np.eye(2), E)):
        with pytest.raises(exception) as info:
            call()
        assert fragment in str(info.value)


def test_budget_matrices_in_other_forms_are_accepted():
    np.testing.assert_array_equal(privacy.check_budgets([[0, 1], [2, 0]]), E2(0, 1, 2, 0))
    np.testing.assert_array_equal(privacy.check_budgets(np.array([[0, 3], [4, 0]])), E2(0, 3, 4, 0))
    F = np.asfortranarray(E2(0, 1, 2, 0))
    C = privacy.check_budgets(F)
    assert C.flags.c_contiguous
    np.testing.assert_array_equal(C, F)
    with pytest.raises(ValueError, match=r"budgets must be 3 × 3 \(one row per input\), got shape \(2, 2\)"):
        privacy.check_budgets(E2(0, 1, 1, 0), k=3)
    with pytest.raises(ValueError, match="3 × 3"):
        privacy.verify(np.eye(3), E2(0, 1, 1, 0))


BAD_CHANNELS = [
    (np.array([[0.5, 0.5], [0.5, -0.25]]), ValueError, "Q must hold probabilities (finite, ≥ 0): Q[1, 1] = -0.25"),
    (np.array([[0.5, math.nan], [0.5, -0.5]]), ValueError, "Q[0, 1] = nan"),
    (np.array([[0.5, 0.5], [INF, 0.5]]), ValueError, "Q[1, 0] = inf"),
    (np.array([0.5, 0.5]), ValueError, "Q must be a non-empty 2-D array (inputs × outputs), got shape (2,)"),
    (np.zeros((2, 0)), ValueError, "got shape (2, 0)"),
    (np.zeros((2, 2, 2)), ValueError, "got shape (2, 2, 2)"),
    (np.eye(2, dtype=np.float32), TypeError, "Q must have dtype float64, got float32"),
    (np.eye(2, dtype=complex), TypeError, "Q must have dtype float64, got complex128"),
    ([[0.5, 0.5], [1.0]], TypeError, "Q"),
    ("Q", TypeError, "Q must be real numbers (float64), got 'Q'"),
    ([["a", "b"]], TypeError, "Q must be real numbers"),
]


@pytest.mark.parametrize("case", range(len(BAD_CHANNELS)))
def test_bad_channels_are_refused_clearly(case):
    Q, exception, fragment = BAD_CHANNELS[case]
    for call in (lambda: privacy.verify(Q, np.zeros((2, 2))), lambda: privacy.realized_budgets(Q)):
        with pytest.raises(exception) as info:
            call()
        assert fragment in str(info.value)


def test_channels_in_other_forms_are_accepted():
    Q = rr_channel(4)
    E = privacy.uniform_budgets(4, 1.0)
    want = privacy.verify(Q, E)
    assert privacy.verify(Q.tolist(), E.tolist()) == want
    assert privacy.verify(np.asfortranarray(Q), E) == want
    assert privacy.verify(np.array([[3, 1], [1, 3]]), privacy.uniform_budgets(2, 1.0)).amount == \
        pytest.approx(math.log(3) - 1.0)
    # a strided view and a read-only array: no write, same answer
    wide = np.repeat(Q, 2, axis=1)
    assert privacy.verify(wide[:, ::2], E) == want
    Q.setflags(write=False)
    assert privacy.verify(Q, E) == want
    np.testing.assert_array_equal(privacy.realized_budgets(Q), brute_force_realized(Q))
    # −0 is a probability of 0
    assert privacy.verify(np.array([[-0.0, 1.0], [0.5, 0.5]]), E2(0, 1, 1, 0)).pair == (1, 0)


def test_the_rust_entry_points_check_their_input_too():
    """The Python layer checks first; the core must still never panic on bad input."""
    from ldpdist import _core
    good = np.ascontiguousarray(rr_channel(2))
    E = privacy.uniform_budgets(2, 1.0)
    cases = [
        (lambda: _core.privacy_verify(np.array([[0.5, -1.0], [0.5, 0.5]]), E), ValueError, "Q[0, 1] = -1"),
        (lambda: _core.privacy_verify(np.array([[0.5, math.nan], [0.5, 0.5]]), E), ValueError, "Q[0, 1] = NaN"),
        (lambda: _core.privacy_verify(good, np.array([[0.0, math.nan], [1.0, 0.0]])), ValueError, "budgets[0, 1] = NaN"),
        (lambda: _core.privacy_verify(good, np.array([[1.0, 1.0], [1.0, 0.0]])), ValueError, "zero diagonal"),
        (lambda: _core.privacy_verify(good, np.zeros((3, 3))), ValueError, "budgets must be 2 × 2"),
        (lambda: _core.privacy_verify(np.zeros((0, 3)), np.zeros((0, 0))), ValueError, "non-empty"),
        (lambda: _core.privacy_verify(np.asfortranarray(np.eye(3)), np.zeros((3, 3))), ValueError, "C-contiguous"),
        (lambda: _core.privacy_realized_budgets(np.eye(4)[:, ::2]), ValueError, "C-contiguous"),
        (lambda: _core.privacy_verify(good.astype(np.float32), E), TypeError, ""),
    ]
    for call, exception, fragment in cases:
        with pytest.raises(exception) as info:
            call()
        assert fragment in str(info.value)


# -- threads, memory, Ctrl-C --------------------------------------------------------------

DETERMINISM = """
import json
import numpy as np
from ldpdist import privacy
rng = np.random.default_rng(5)
out = {}
for case, (k, n) in enumerate([(200, 700), (97, 2100), (300, 64)]):
    Q = rng.choice(np.array([0.0, 0.1, 0.2, 0.4]), size=(k, n))
    Q[rng.integers(0, k, k // 2)] = Q[rng.integers(0, k, k // 2)]   # duplicated rows: ties
    Q[:, rng.integers(0, n, n // 3)] = Q[:, rng.integers(0, n, n // 3)]
    Q /= np.maximum(Q.sum(axis=1, keepdims=True), 1e-300)
    E = np.where(rng.random((k, k)) < 0.3, np.inf, 0.5)
    np.fill_diagonal(E, 0.0)
    v = privacy.verify(Q, E)
    out[case] = [v.amount.hex(), v.pair, v.output, digest(privacy.realized_budgets(Q))]
print(json.dumps(out))
"""


def test_results_are_identical_on_1_2_and_4_threads():
    runs = {threads: json.loads(run_python(DETERMINISM, env={"RAYON_NUM_THREADS": str(threads)},
                                           timeout=300))
            for threads in (1, 2, 4)}
    assert runs[1] == runs[2] == runs[4]
    assert all(case[1] is not None for case in runs[1].values())


LIMITED = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import numpy as np
import ldpdist
from ldpdist import privacy
ldpdist.set_memory_limit("64M")
def outcome(call, part):
    try:
        call()
        print("accepted")
    except MemoryError as exc:
        print("refused" if part in str(exc) and "budget" in str(exc) else "other: " + str(exc))
Q = np.full((1000, 20000), 1 / 20000)            # 160 MB, allocated by the test itself
E = np.zeros((1000, 1000))
outcome(lambda: privacy.verify(Q, E), "the log channel")
outcome(lambda: privacy.realized_budgets(Q), "the log channel")
tall = np.full((40_000, 1), 1.0)                  # 320 KB, but a 12.8 GB result
outcome(lambda: privacy.realized_budgets(tall), "the k × k budget matrix")
view = np.broadcast_to(np.float64(0.5), (20_000, 10_000))   # costs nothing; a 1.6 GB copy
outcome(lambda: privacy.realized_budgets(view), "contiguous copy of Q")
outcome(lambda: privacy.uniform_budgets(100_000, 1.0), "the k × k budget matrix")
outcome(lambda: privacy.block_budgets([50_000, 50_000], 1.0), "budget matrix")
ldpdist.set_memory_limit(None)
print("accepted" if privacy.verify(Q[:50], E[:50, :50]).satisfied() else "wrong")
"""


def test_the_memory_guard_refuses_before_allocating():
    """Oversized requests are MemoryErrors naming the part, before anything is allocated,
    in a child limited to 3 GiB of address space (an unguarded allocation would abort it)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(LIMITED)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["refused"] * 6 + ["accepted"], done.stdout + done.stderr


# The child sets its own SIGINT disposition first, so the test does not depend on how the
# run was launched (a background job of a non-interactive shell inherits SIGINT ignored).
CTRL_C = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import time
import numpy as np
from ldpdist import privacy
Q = np.random.default_rng(0).random((2500, 3000))
E = privacy.uniform_budgets(2500, 1.0)
print("started", flush=True)
start = time.perf_counter()
try:
    for _ in range(30):
        privacy.verify(Q, E)
    print(f"finished {time.perf_counter() - start:.2f}", flush=True)
except KeyboardInterrupt:
    print(f"interrupted {time.time()!r}", flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_ctrl_c_interrupts_verify_within_a_second():
    child = subprocess.Popen([sys.executable, "-c", CTRL_C], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "started", child.stderr.read()
        time.sleep(1.5)
        sent = time.time()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert "finished" not in out, out
    caught = [line for line in out.splitlines() if line.startswith("interrupted ")]
    assert caught, out + err
    latency = float(caught[0].split()[1]) - sent
    assert latency < 1.0, f"KeyboardInterrupt {latency:.2f} s after SIGINT"
