"""Longitudinal generalized randomized response, L-GRR (Arcolezi, Couchot, Al Bouna & Xiao,
"Improving the utility of locally differentially private protocols for longitudinal and
multidimensional frequency estimates", Digital Communications and Networks, 2022)."""

from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

from .._validation import integer
from .base import (GRID, LongitudinalMechanism, check_epsilon, grid_down, largest_below,
                   memo_words, register)

__all__ = ["LongitudinalGRR"]

_U64 = 1 << 64


@register
class LongitudinalGRR(LongitudinalMechanism):
    """L-GRR: k-ary randomized response memoized, then k-ary randomized response again for
    each report.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon_infinity : float
        ε of the memoized answer (what unboundedly many reports of one value reveal), > 0.
    epsilon_1 : float
        ε of one report, 0 < epsilon_1 < epsilon_infinity.

    Notes
    -----
    **Rounds.** The permanent round keeps the value with probability
    ``p1 = e^ε∞ / (e^ε∞ + k - 1)`` (rounded down to a multiple of 2^-53) and otherwise
    answers one of the k - 1 other values uniformly (``q1 = (1 - p1)/(k - 1)`` each). The
    instantaneous round does the same to the memoized answer with ``(p2, q2)``, ``p2`` the
    largest multiple of 2^-53 for which the chained channel is ε_1-LDP: a report equals
    the value with probability ``p_s = q2 + (p2 - q2) p1`` and any given other value with
    ``q_s = q2 + (p2 - q2) q1``, and ``p2`` solves ``p_s / q_s = e^ε_1`` (the paper's
    closed form, up to the grid).

    **Memoization words.** Word 0 of the stream of (secret, value) keeps the value when
    ``w0 >> 11 < p1 * 2^53``; otherwise the following words are taken in order, a word
    ``w`` is accepted when ``w < 2^64 - (2^64 mod (k - 1))`` and gives ``r = w mod (k - 1)``
    (exactly uniform), and the answer is ``r`` if ``r < value`` else ``r + 1``.

    **Per report.** With ``rng = numpy.random.Generator(PCG64(SeedSequence(seed)))``:
    ``keep = rng.random(n) < p2``, then ``other = rng.integers(0, k - 1, size=n)``; a report
    is the memoized answer where ``keep``, else ``other`` (+1 when ``other >= answer``).

    **Guarantees.** :attr:`epsilon_infinity` is ``ln(p1 / q1)`` and :attr:`epsilon_1` is
    ``ln(p_s / q_s)``, the exact max log-ratios of the memoized and chained channels
    (:meth:`memo_channel_matrix`, :meth:`channel_matrix`) as realized.

    **Estimation.** ``(c_v / n - q_s) / (p_s - q_s)`` from the count ``c_v`` of reports
    equal to v: unbiased for the distribution of the values.

    Examples
    --------
    >>> import numpy as np
    >>> from ldpdist.longitudinal import LongitudinalGRR, make_secrets
    >>> mech = LongitudinalGRR(k=4, epsilon_infinity=2.0, epsilon_1=1.0)
    >>> values = np.array([0, 1, 2, 3, 0])
    >>> reports = mech.privatize(values, make_secrets(5, seed=1), seed=2)
    >>> reports.shape, mech.estimate(reports).shape
    ((5,), (4,))
    >>> bool(mech.epsilon_1 <= 1.0 and mech.epsilon_infinity <= 2.0)
    True
    """

    _param_names = ("k", "epsilon_infinity", "epsilon_1")

    def __init__(self, k: int, epsilon_infinity: float, epsilon_1: float):
        self.k = integer(k, "k", minimum=2, maximum=2**32)
        self._k = self.k
        self._epsilon_infinity = check_epsilon(epsilon_infinity, "epsilon_infinity")
        self._epsilon_1 = check_epsilon(epsilon_1, "epsilon_1")
        if not self._epsilon_1 < self._epsilon_infinity:
            raise ValueError(
                f"epsilon_1 must be < epsilon_infinity (one report reveals less than the "
                f"memoized answer), got epsilon_1 = {self._epsilon_1!r}, epsilon_infinity = "
                f"{self._epsilon_infinity!r}")
        k1 = self.k - 1
        e = math.exp(self._epsilon_infinity)
        self._n1 = min(grid_down(e / (e + k1)), GRID - 1)
        lo = -(-GRID // self.k)
        while self._n1 > lo and self._eps_inf_at(self._n1) > self._epsilon_infinity:
            self._n1 -= 1  # float rounding: never above the ε asked for
        if self._n1 <= lo:
            raise ValueError(f"epsilon_infinity = {self._epsilon_infinity!r} is too small for "
                             "the 2^-53 probability grid")
        self._n2 = largest_below(self._eps1_at, lo, GRID, self._epsilon_1)

    # -- probabilities -----------------------------------------------------------------

    def _pq(self, n2: int):
        k1 = self.k - 1
        p1 = self._n1 / GRID
        q1 = (1.0 - p1) / k1
        p2 = n2 / GRID
        q2 = (1.0 - p2) / k1
        return p1, q1, p2, q2

    def _eps_inf_at(self, n1: int) -> float:
        p1 = n1 / GRID
        return math.log(p1) - math.log((1.0 - p1) / (self.k - 1))

    def _eps1_at(self, n2: int) -> float:
        p1, q1, p2, q2 = self._pq(n2)
        ps, qs = q2 + (p2 - q2) * p1, q2 + (p2 - q2) * q1
        return math.log(ps) - math.log(qs)

    def probabilities(self) -> Dict[str, float]:
        """The realized ``p1, q1`` (memoized round), ``p2, q2`` (per report) and
        ``p_s, q_s`` (one report: equal to the value / to a given other value)."""
        p1, q1, p2, q2 = self._pq(self._n2)
        return {"p1": p1, "q1": q1, "p2": p2, "q2": q2,
                "p_s": q2 + (p2 - q2) * p1, "q_s": q2 + (p2 - q2) * q1}

    @property
    def epsilon_infinity(self) -> float:
        """Realized ε of the memoized answer: ``ln(p1 / q1)``."""
        return self._eps_inf_at(self._n1)

    @property
    def epsilon_1(self) -> float:
        """Realized ε of one report: ``ln(p_s / q_s)``."""
        return self._eps1_at(self._n2)

    @property
    def output_size(self) -> int:
        return self.k

    # -- exact channels ----------------------------------------------------------------

    def memo_channel_matrix(self) -> np.ndarray:
        """The permanent round's channel (k × k)."""
        p1, q1, _, _ = self._pq(self._n2)
        return np.where(np.eye(self.k, dtype=bool), p1, q1)

    def instant_channel_matrix(self) -> np.ndarray:
        """The per-report round's channel (k × k), applied to the memoized answer."""
        _, _, p2, q2 = self._pq(self._n2)
        return np.where(np.eye(self.k, dtype=bool), p2, q2)

    def channel_matrix(self) -> np.ndarray:
        """The one-report (chained) channel: ``memo_channel_matrix() @
        instant_channel_matrix()``."""
        if self.k > 4096:
            raise ValueError("channel_matrix is for small k (at most 4096)")
        return self.memo_channel_matrix() @ self.instant_channel_matrix()

    def _support_of_outputs(self) -> np.ndarray:
        return np.eye(self.k)

    # -- rounds ------------------------------------------------------------------------

    def _memo_one(self, secret: bytes, value: int) -> int:
        count = 8
        while True:
            words = memo_words(secret, self._fp_bytes(), value, count)
            if int(words[0]) >> 11 < self._n1:
                return value
            k1 = self.k - 1
            limit = _U64 - (_U64 % k1)
            for w in words[1:]:
                if int(w) < limit:
                    r = int(w) % k1
                    return r if r < value else r + 1
            count *= 2  # every word rejected (probability < 2^-200): read further

    def _instant(self, memo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        keep = rng.random(memo.size) < self._n2 / GRID
        other = rng.integers(0, self.k - 1, size=memo.size)
        return np.where(keep, memo, other + (other >= memo))

    def _rr_counts(self, counts: np.ndarray, keep: float, other: float,
                   rng: np.random.Generator) -> np.ndarray:
        """The histogram of k-ary randomized response (keep w.p. ``keep``, else each other
        value w.p. ``other``) applied to ``counts[x]`` inputs x: keep w.p. ``keep - other``,
        else a uniform value among all k (the same law)."""
        kept = rng.binomial(counts, keep - other).astype(np.int64)
        rest = int(counts.sum()) - int(kept.sum())
        return kept + rng.multinomial(rest, np.full(self.k, 1.0 / self.k)).astype(np.int64)

    def _simulate_memo(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        pr = self.probabilities()
        return self._rr_counts(counts, pr["p1"], pr["q1"], rng)

    def _simulate_round(self, memo: np.ndarray, n: int, rng: np.random.Generator
                        ) -> np.ndarray:
        pr = self.probabilities()
        return self._rr_counts(memo, pr["p2"], pr["q2"], rng)

    def _support_counts(self, reports: np.ndarray) -> np.ndarray:
        return np.bincount(reports.astype(np.int64), minlength=self.k).astype(np.float64)

    def _standard_errors(self, sums: np.ndarray, n: int) -> np.ndarray:
        pr = self.probabilities()
        return self._binary_errors(sums, n, pr["p_s"] - pr["q_s"])

    def _raw_from_counts(self, counts: Any, n: int) -> np.ndarray:
        pr = self.probabilities()
        return (np.asarray(counts, dtype=np.float64) / n - pr["q_s"]) / (pr["p_s"] - pr["q_s"])
