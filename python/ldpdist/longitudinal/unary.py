"""Longitudinal unary encodings, L-SUE, L-OUE, L-OSUE and L-SOUE (Arcolezi, Couchot,
Al Bouna & Xiao, "Improving the utility of locally differentially private protocols for
longitudinal and multidimensional frequency estimates", Digital Communications and
Networks, 2022): a unary encoding (SUE or OUE) memoized, then a unary encoding of the
memoized bits (SUE or OUE) for each report."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Dict

import numpy as np

from .._validation import integer
from .base import (GRID, LongitudinalMechanism, binary_counts, check_epsilon, grid_down,
                   grid_up, largest_below, memo_words, product_channel, register)

__all__ = ["LongitudinalUnary", "LongitudinalSUE", "LongitudinalOUE", "LongitudinalOSUE", "LongitudinalSOUE"]

_HALF = GRID // 2
MAX_CHANNEL_K = 12


def _ue_epsilon(p: float, q: float) -> float:
    """``ln(p (1 - q) / ((1 - p) q))``: the max log-ratio of a unary encoding whose bit of
    the value is 1 w.p. p and every other bit w.p. q."""
    return math.log(p) + math.log1p(-q) - math.log1p(-p) - math.log(q)


class LongitudinalUnary(LongitudinalMechanism):
    """Common code of the four longitudinal unary encodings (see the subclasses)."""

    report_kind = "bits"
    _param_names = ("k", "epsilon_infinity", "epsilon_1")
    _first: ClassVar[str]
    _second: ClassVar[str]

    def __init__(self, k: int, epsilon_infinity: float, epsilon_1: float):
        self.k = integer(k, "k", minimum=2, maximum=2**20)
        self._k = self.k
        self._epsilon_infinity = check_epsilon(epsilon_infinity, "epsilon_infinity")
        self._epsilon_1 = check_epsilon(epsilon_1, "epsilon_1")
        name = type(self).__name__
        if not self._epsilon_1 < self._epsilon_infinity:
            raise ValueError(
                f"epsilon_1 must be < epsilon_infinity (one report reveals less than the "
                f"memoized answer), got epsilon_1 = {self._epsilon_1!r}, epsilon_infinity = "
                f"{self._epsilon_infinity!r}")
        eps = self._epsilon_infinity
        if self._first == "sue":
            h = math.exp(eps / 2)
            self._p1 = min(grid_down(h / (h + 1)), GRID - 1)
            self._q1 = GRID - self._p1
        else:
            self._p1 = _HALF
            self._q1 = max(grid_up(1 / (math.exp(eps) + 1)), 1)
        while (self._p1 > self._q1
               and _ue_epsilon(self._p1 / GRID, self._q1 / GRID) > eps):  # float rounding
            self._q1 += 1
            if self._first == "sue":
                self._p1 -= 1
        if self._p1 <= self._q1:
            raise ValueError(f"epsilon_infinity = {eps!r} is too small for the 2^-53 grid")
        hi = _HALF
        if self._epsilon_1 > self._eps1_at(hi):
            if self._second == "sue" and self._epsilon_1 < eps:
                pass  # the realized ε∞ is a rounding below the one asked for: identity round
            else:
                raise ValueError(
                    f"{name} reaches at most epsilon_1 = {self._eps1_at(hi)!r} (its "
                    f"per-report round is OUE) for epsilon_infinity = {eps!r}; asked for "
                    f"{self._epsilon_1!r}")
        self._m2 = largest_below(self._eps1_at, 0, hi, self._epsilon_1)

    # -- probabilities -----------------------------------------------------------------

    def _second_round(self, m: int):
        """(p2, q2) numerators for the parameter m in [0, 2^52] (more informative as m
        grows)."""
        if self._second == "sue":
            return _HALF + m, _HALF - m
        return _HALF, _HALF - m

    def _chained(self, m: int):
        p1, q1 = self._p1 / GRID, self._q1 / GRID
        n2, m2 = self._second_round(m)
        p2, q2 = n2 / GRID, m2 / GRID
        return q2 + (p2 - q2) * p1, q2 + (p2 - q2) * q1

    def _eps1_at(self, m: int) -> float:
        ps, qs = self._chained(m)
        return _ue_epsilon(ps, qs)

    def probabilities(self) -> Dict[str, float]:
        """The realized per-bit probabilities: ``p1, q1`` (memoized bit of the value / of
        another value is 1), ``p2, q2`` (reported bit is 1 when the memoized bit is 1 / 0)
        and ``p_s, q_s`` (a report's bit of the value / of another value is 1)."""
        n2, m2 = self._second_round(self._m2)
        ps, qs = self._chained(self._m2)
        return {"p1": self._p1 / GRID, "q1": self._q1 / GRID, "p2": n2 / GRID,
                "q2": m2 / GRID, "p_s": ps, "q_s": qs}

    @property
    def epsilon_infinity(self) -> float:
        """Realized ε of the memoized bit vector: ``ln(p1 (1 - q1) / ((1 - p1) q1))``."""
        return _ue_epsilon(self._p1 / GRID, self._q1 / GRID)

    @property
    def epsilon_1(self) -> float:
        """Realized ε of one report: ``ln(p_s (1 - q_s) / ((1 - p_s) q_s))``."""
        return self._eps1_at(self._m2)

    @property
    def output_size(self) -> int:
        return self.k

    # -- exact channels ----------------------------------------------------------------

    def _check_small(self) -> None:
        if self.k > MAX_CHANNEL_K:
            raise ValueError(f"the exact channel has 2^k outputs: only for k <= "
                             f"{MAX_CHANNEL_K}, got k = {self.k}")

    def memo_channel_matrix(self) -> np.ndarray:
        """The permanent round's channel, k × 2^k (output o has bit j = ``(o >> j) & 1``)."""
        self._check_small()
        pr = self.probabilities()
        return product_channel(np.where(np.eye(self.k, dtype=bool), pr["p1"], pr["q1"]))

    def channel_matrix(self) -> np.ndarray:
        """The one-report (chained) channel, k × 2^k (bits independent given the value)."""
        self._check_small()
        pr = self.probabilities()
        return product_channel(np.where(np.eye(self.k, dtype=bool), pr["p_s"], pr["q_s"]))

    def _support_of_outputs(self) -> np.ndarray:
        outputs = np.arange(1 << self.k)
        return ((outputs[:, None] >> np.arange(self.k)[None, :]) & 1).astype(np.float64)

    # -- rounds ------------------------------------------------------------------------

    def _memo_one(self, secret: bytes, value: int) -> np.ndarray:
        words = memo_words(secret, self._fp_bytes(), value, self.k) >> np.uint64(11)
        thresholds = np.full(self.k, self._q1, dtype=np.uint64)
        thresholds[value] = self._p1
        return words < thresholds

    def _instant(self, memo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n2, m2 = self._second_round(self._m2)
        u = rng.random(memo.shape)
        return u < np.where(memo, n2 / GRID, m2 / GRID)

    def _simulate_memo(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # bit j of the one-hot encoding is set for the counts[j] users of value j
        n = int(counts.sum())
        diagonal = rng.binomial(counts, self._p1 / GRID)
        return (diagonal + rng.binomial(n - counts, self._q1 / GRID)).astype(np.int64)

    def _simulate_round(self, memo: np.ndarray, n: int, rng: np.random.Generator
                        ) -> np.ndarray:
        n2, m2 = self._second_round(self._m2)
        return binary_counts(memo, n, n2 / GRID, m2 / GRID, rng)

    def _support_counts(self, bits: np.ndarray) -> np.ndarray:
        return bits.sum(axis=0, dtype=np.int64).astype(np.float64)

    def _standard_errors(self, sums: np.ndarray, n: int) -> np.ndarray:
        ps, qs = self._chained(self._m2)
        return self._binary_errors(sums, n, ps - qs)

    def _raw_from_counts(self, counts: Any, n: int) -> np.ndarray:
        ps, qs = self._chained(self._m2)
        return (np.asarray(counts, dtype=np.float64) / n - qs) / (ps - qs)


_DOC = """{title}.

The value is one-hot encoded into k bits. The permanent round is {first}: the memoized bit
of the value is 1 with probability ``p1`` and every other memoized bit with probability
``q1`` ({first_pq}). Each report re-randomizes every memoized bit independently with
{second}: a reported bit is 1 with probability ``p2`` when the memoized bit is 1 and ``q2``
when it is 0 ({second_pq}), ``{free}`` the largest multiple of 2^-53 for which one report
is ε_1-LDP.

Parameters
----------
k : int
    Number of possible values, 2 <= k <= 2**20 (the memoized round reads k words of the
    HMAC stream per user).
epsilon_infinity : float
    ε of the memoized bit vector, > 0.
epsilon_1 : float
    ε of one report, 0 < epsilon_1 < epsilon_infinity.{extra}

Notes
-----
**Chained channel.** A report's bit of the value is 1 with probability
``p_s = q2 + (p2 - q2) p1`` and a bit of another value with ``q_s = q2 + (p2 - q2) q1``:
:attr:`epsilon_1` is ``ln(p_s (1 - q_s) / ((1 - p_s) q_s))`` and :attr:`epsilon_infinity`
is ``ln(p1 (1 - q1) / ((1 - p1) q1))``, the exact max log-ratios of the realized channels
(:meth:`channel_matrix`, :meth:`memo_channel_matrix`).

**Memoization words.** Bit j of the memoized vector of (secret, value) is
``(w_j >> 11) < P * 2^53`` for word ``w_j`` of the stream, with ``P = p1`` for j = value
and ``q1`` otherwise (module ``ldpdist.longitudinal.base``).

**Per report.** ``u = rng.random((n, k))`` from
``numpy.random.Generator(PCG64(SeedSequence(seed)))``; a reported bit is
``u < (p2 if memoized bit else q2)``. Reports are uint8 rows in ``numpy.packbits``
layout.

**Estimation.** ``(c_j / n - q_s) / (p_s - q_s)`` from the count ``c_j`` of reports with bit
j set: unbiased for the distribution.

Examples
--------
>>> import numpy as np
>>> from ldpdist.longitudinal import {name}, make_secrets
>>> mech = {name}(k=4, epsilon_infinity=2.0, epsilon_1=1.0)
>>> reports = mech.privatize(np.array([0, 1, 2, 3]), make_secrets(4, seed=1), seed=2)
>>> reports.shape, mech.estimate(reports).shape
((4, 1), (4,))
"""

_SUE = ("symmetric unary encoding (SUE, basic RAPPOR)",
        "``p1 = e^(ε∞/2) / (e^(ε∞/2) + 1)`` rounded down, ``q1 = 1 - p1``")
_OUE = ("optimized unary encoding (OUE)", "``p1 = 1/2``, ``q1 = 1 / (e^ε∞ + 1)`` rounded up")


def _doc(name: str, title: str, first: tuple, second: str) -> str:
    sue2 = second == "sue"
    return _DOC.format(
        name=name, title=title, first=first[0], first_pq=first[1],
        second=("SUE" if sue2 else "OUE"),
        second_pq="``q2 = 1 - p2``" if sue2 else "``p2 = 1/2``",
        free="p2" if sue2 else "q2",
        extra="" if sue2 else (" The per-report round being OUE, epsilon_1 cannot come\n"
                               "    arbitrarily close to epsilon_infinity: a larger one "
                               "raises ValueError\n    naming the largest reachable."))


@register
class LongitudinalSUE(LongitudinalUnary):
    _first, _second = "sue", "sue"
    __doc__ = _doc("LongitudinalSUE", "L-SUE: SUE memoized, SUE per report (RAPPOR's "
                   "permanent and instantaneous randomized response on one-hot bits)", _SUE,
                   "sue")


@register
class LongitudinalOUE(LongitudinalUnary):
    _first, _second = "oue", "oue"
    __doc__ = _doc("LongitudinalOUE", "L-OUE: OUE memoized, OUE per report", _OUE, "oue")


@register
class LongitudinalOSUE(LongitudinalUnary):
    _first, _second = "oue", "sue"
    __doc__ = _doc("LongitudinalOSUE", "L-OSUE: OUE memoized, SUE per report", _OUE, "sue")


@register
class LongitudinalSOUE(LongitudinalUnary):
    _first, _second = "sue", "oue"
    __doc__ = _doc("LongitudinalSOUE", "L-SOUE: SUE memoized, OUE per report", _SUE, "oue")
