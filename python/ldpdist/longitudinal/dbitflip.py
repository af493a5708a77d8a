"""dBitFlipPM (Ding, Kulkarni & Yekhanin, "Collecting Telemetry Data Privately", NeurIPS
2017): d randomized bits per user about d of the k buckets, with permanent memoization."""

from __future__ import annotations

import math
from typing import Any, Dict, List

import numpy as np

from .._validation import integer
from .base import (GRID, LongitudinalMechanism, check_epsilon, grid_down, memo_words,
                   register)

__all__ = ["DBitFlipPM", "uniform_subsets"]

_U64 = 1 << 64
#: The stream "value" from which a user's buckets are drawn (never a value: k <= 2^32).
BUCKETS_STREAM = _U64 - 1
MAX_CHANNEL_OUTPUTS = 1 << 16


def uniform_subsets(rng: np.random.Generator, rows: int, k: int, d: int) -> np.ndarray:
    """``rows`` independent, exactly uniform d-subsets of [0, k) (int64, shape (rows, d),
    unsorted): Floyd's algorithm, vectorized over the rows (for j = k - d .. k - 1, draw t
    uniform in [0, j] and take t, or j when t is already taken)."""
    chosen = np.empty((rows, d), dtype=np.int64)
    for i, j in enumerate(range(k - d, k)):
        t = rng.integers(0, j + 1, size=rows)
        taken = (chosen[:, :i] == t[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, j, t)
    return chosen


@register
class DBitFlipPM(LongitudinalMechanism):
    """dBitFlip with permanent memoization.

    Values are buckets in [0, k) (bucketize a continuous or large-domain value first). Each
    user holds d distinct buckets ``j_1 < … < j_d``, drawn once, uniformly, independently of
    the value; a report is the d buckets and one bit per bucket, 1 with probability
    ``p = e^(ε/2) / (e^(ε/2) + 1)`` (rounded down to a multiple of 2^-53) when the bucket is
    the user's value and ``q = 1 - p`` otherwise. With permanent memoization the bits for a
    given value are drawn once: a user reports the same bits every time they hold that
    value, so reporting one value forever costs ε once.

    Parameters
    ----------
    k : int
        Number of buckets, 2 <= k <= 2**32.
    epsilon : float
        ε > 0 of a report.
    d : int
        Buckets per user, 1 <= d <= k (the paper's d; d = k is memoized SUE/RAPPOR).

    Notes
    -----
    **Memoization words.** The buckets come from the stream of (secret, 2^64 - 1) (module
    ``ldpdist.longitudinal.base``): successive words ``w`` below
    ``2^64 - (2^64 mod k)`` give ``w mod k``, repeats skipped, until d distinct buckets
    (an exactly uniform d-subset), sorted. The bits for value x come from the stream of
    (secret, x): bit i (of bucket ``j_i``) is ``(w_i >> 11) < P * 2^53``, ``P = p`` if
    ``j_i = x`` else ``q``.

    **Reports.** Records of dtype ``[("buckets", "<u4", (d,)), ("bits", "u1", (d,))]``. No
    per-report randomness: ``privatize``'s seed is accepted and unused.

    **Guarantees.** The report is the memoized answer, so :attr:`epsilon_1` and
    :attr:`epsilon_infinity` are equal: ``ln(p (1 - q) / ((1 - p) q))`` (= ε) for d >= 2,
    where two values can both be among the buckets, and ``ln(p / q)`` (= ε/2) for d = 1;
    exact max log-ratios of the channel (:meth:`channel_matrix`). They bound what any
    number of reports reveal about one fixed value; a value that changes reveals its
    change (the reports change), and each distinct value held costs up to ε.

    **Estimation.** ``(k / (n d)) (ones_v - q sampled_v) / (p - q)``, ``sampled_v`` the
    number of users holding bucket v and ``ones_v`` those of them reporting 1 for it:
    unbiased.

    Examples
    --------
    >>> import numpy as np
    >>> from ldpdist.longitudinal import DBitFlipPM, make_secrets
    >>> mech = DBitFlipPM(k=16, epsilon=1.0, d=4)
    >>> reports = mech.privatize(np.array([0, 5, 9]), make_secrets(3, seed=1))
    >>> reports["buckets"].shape, mech.estimate(reports).shape
    ((3, 4), (16,))
    """

    report_kind = "records"
    _param_names = ("k", "epsilon", "d")

    def __init__(self, k: int, epsilon: float, d: int):
        self.k = integer(k, "k", minimum=2, maximum=2**32)
        self._k = self.k
        self._epsilon = check_epsilon(epsilon, "epsilon")
        self._d = integer(d, "d", minimum=1, maximum=self.k)
        h = math.exp(self._epsilon / 2)
        self._p = min(grid_down(h / (h + 1)), GRID - 1)
        while self._p > GRID // 2 and self._eps_at(self._p) > self._epsilon:
            self._p -= 1  # float rounding: never above the ε asked for
        if self._p <= GRID // 2:
            raise ValueError(f"epsilon = {self._epsilon!r} is too small for the 2^-53 grid")
        self.report_dtype = np.dtype([("buckets", "<u4", (self._d,)),
                                      ("bits", "u1", (self._d,))])

    def _eps_at(self, p_num: int) -> float:
        p = p_num / GRID
        half = math.log(p) - math.log1p(-p)
        return 2 * half if self._d >= 2 else half

    @property
    def d(self) -> int:
        return self._d

    def probabilities(self) -> Dict[str, float]:
        """Realized ``p`` (bit of the user's own bucket is 1) and ``q = 1 - p``."""
        return {"p": self._p / GRID, "q": (GRID - self._p) / GRID}

    @property
    def epsilon_1(self) -> float:
        """Realized ε of a report (exact)."""
        return self._eps_at(self._p)

    @property
    def epsilon_infinity(self) -> float:
        """Realized ε of the memoized answer: the report itself, so ``epsilon_1``."""
        return self._eps_at(self._p)

    @property
    def output_size(self) -> int:
        return math.comb(self.k, self._d) * (1 << self._d)

    # -- exact channel -----------------------------------------------------------------

    def _outputs(self) -> List[tuple]:
        from itertools import combinations

        if self.output_size > MAX_CHANNEL_OUTPUTS:
            raise ValueError(f"the exact channel has C(k, d) 2^d = {self.output_size} "
                             f"outputs: only for at most {MAX_CHANNEL_OUTPUTS}")
        return [(subset, bits) for subset in combinations(range(self.k), self._d)
                for bits in range(1 << self._d)]

    def channel_matrix(self) -> np.ndarray:
        """The report's channel: k × (C(k, d) 2^d), outputs ordered by bucket subset
        (lexicographic), then bits (bit i of the index is the bit of the i-th bucket)."""
        pr = self.probabilities()
        outputs = self._outputs()
        channel = np.empty((self.k, len(outputs)))
        share = 1.0 / math.comb(self.k, self._d)
        for o, (subset, bits) in enumerate(outputs):
            for x in range(self.k):
                prob = share
                for i, j in enumerate(subset):
                    one = pr["p"] if j == x else pr["q"]
                    prob *= one if (bits >> i) & 1 else 1 - one
                channel[x, o] = prob
        return channel

    def memo_channel_matrix(self) -> np.ndarray:
        """The memoized answer's channel: the report's (there is no per-report round)."""
        return self.channel_matrix()

    def _support_of_outputs(self) -> np.ndarray:
        outputs = self._outputs()
        stats = np.zeros((len(outputs), 2 * self.k))
        for o, (subset, bits) in enumerate(outputs):
            for i, j in enumerate(subset):
                stats[o, j] += (bits >> i) & 1
                stats[o, self.k + j] += 1
        return stats

    # -- rounds ------------------------------------------------------------------------

    def _buckets(self, secret: bytes) -> List[int]:
        limit = _U64 - (_U64 % self.k)
        count = 2 * self._d + 8
        while True:
            chosen: List[int] = []
            for w in memo_words(secret, self._fp_bytes(), BUCKETS_STREAM, count):
                if int(w) < limit:
                    r = int(w) % self.k
                    if r not in chosen:
                        chosen.append(r)
                        if len(chosen) == self._d:
                            return sorted(chosen)
            count *= 2

    def _memo_one(self, secret: bytes, value: int) -> tuple:
        buckets = self._buckets(secret)
        words = memo_words(secret, self._fp_bytes(), value, self._d) >> np.uint64(11)
        thresholds = np.array([self._p if j == value else GRID - self._p for j in buckets],
                              dtype=np.uint64)
        return buckets, (words < thresholds).astype(np.uint8)

    def memo(self, values: Any, secrets: Any) -> np.ndarray:
        """The memoized reports (records, see the class notes): buckets from the secret
        alone, bits from the secret and the value."""
        from .base import _secrets_list, _values

        values = _values(values, self.k)
        secrets = _secrets_list(secrets, values.size)
        out = np.zeros(values.size, dtype=self.report_dtype)
        for i, (secret, v) in enumerate(zip(secrets, values)):
            out["buckets"][i], out["bits"][i] = self._memo_one(secret, int(v))
        return out

    def _instant(self, memo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return memo.copy()

    def _pack(self, out: np.ndarray) -> np.ndarray:
        return out

    def _checked_reports(self, reports: Any) -> np.ndarray:
        from ..typed_reports import check_reports

        array = np.asarray(check_reports(self, reports, f"{type(self).__name__}.estimate"))
        if array.dtype != self.report_dtype or array.ndim != 1:
            raise ValueError(f"reports of {self!r} are 1-D records of dtype "
                             f"{self.report_dtype}, got {array.dtype} {array.shape}")
        buckets, bits = array["buckets"], array["bits"]
        if buckets.size and (buckets.max() >= self.k or bits.max() > 1):
            raise ValueError(f"malformed reports: buckets lie in [0, {self.k}), bits in {{0, 1}}")
        if self._d > 1 and (np.diff(buckets.astype(np.int64), axis=1) <= 0).any():
            raise ValueError("malformed reports: a report's buckets must be distinct and "
                             "increasing")
        return array

    # -- aggregation and simulation ----------------------------------------------------

    def _sums_size(self) -> int:
        return 2 * self.k

    def _check_layout(self, array: np.ndarray) -> None:
        if array.dtype != self.report_dtype or array.ndim != 1:
            raise TypeError(f"reports of {self!r} are 1-D records of dtype "
                            f"{self.report_dtype}, got {array.dtype} {array.shape}")

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        buckets, bits = array["buckets"].astype(np.int64), array["bits"]
        bad = (buckets >= self.k).any(axis=1) | (bits > 1).any(axis=1)
        if self._d > 1:
            bad |= (np.diff(buckets, axis=1) <= 0).any(axis=1)
        return bad

    def _describe_invalid(self, report: Any) -> str:
        return (f"{report!r}: buckets must be distinct, increasing and in [0, {self.k}), "
                "bits in {0, 1}")

    def _report_sums(self, array: np.ndarray) -> np.ndarray:
        buckets = array["buckets"].astype(np.int64)
        ones = np.bincount(buckets[array["bits"] == 1], minlength=self.k)
        sampled = np.bincount(buckets.ravel(), minlength=self.k)
        return np.concatenate([ones, sampled]).astype(np.int64)

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        ones, sampled = sums[:self.k], sums[self.k:]
        if sums.size and (ones.min() < 0 or (ones > sampled).any() or sampled.max() > n):
            raise ValueError(f"0 <= ones_v <= sampled_v <= n = {n} for every bucket")
        if int(sampled.sum(dtype=object)) != n * self._d:
            raise ValueError(f"the buckets sampled sum to {int(sampled.sum(dtype=object))}, "
                             f"not n d = {n * self._d}")

    def _simulate_memo(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The sums of the memoized reports (= every collection's): each user's d buckets
        by Floyd's algorithm (an exactly uniform d-subset), then its bits, vectorized over
        chunks of users (the values in increasing order, which does not change the law)."""
        n = int(counts.sum())
        ends = np.cumsum(counts)
        pr = self.probabilities()
        ones = np.zeros(self.k, dtype=np.int64)
        sampled = np.zeros(self.k, dtype=np.int64)
        chunk = max(1, (1 << 20) // self._d)
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            values = np.searchsorted(ends, np.arange(start, start + rows), side="right")
            chosen = uniform_subsets(rng, rows, self.k, self._d)
            bits = rng.random((rows, self._d)) < np.where(chosen == values[:, None],
                                                          pr["p"], pr["q"])
            ones += np.bincount(chosen[bits], minlength=self.k)
            sampled += np.bincount(chosen.ravel(), minlength=self.k)
        return np.concatenate([ones, sampled])

    def _simulate_round(self, memo: np.ndarray, n: int, rng: np.random.Generator
                        ) -> np.ndarray:
        return memo.copy()  # no per-report round: every collection repeats the memo

    def _support_counts(self, array: np.ndarray) -> np.ndarray:
        buckets = array["buckets"].astype(np.int64).ravel()
        bits = array["bits"].astype(np.float64).ravel()
        ones = np.bincount(buckets, weights=bits, minlength=self.k)
        sampled = np.bincount(buckets, minlength=self.k).astype(np.float64)
        return np.concatenate([ones, sampled])

    def _standard_errors(self, sums: np.ndarray, n: int) -> np.ndarray:
        """Each user adds ``Z = [v among its buckets] (bit - q)``: the plug-in variance of Z
        from the sums (``ones_v`` users add 1 - q, ``sampled_v - ones_v`` add -q)."""
        q = self.probabilities()["q"]
        p = self.probabilities()["p"]
        sums = np.asarray(sums, dtype=np.float64)
        ones, sampled = sums[:self.k], sums[self.k:]
        mean = (ones - q * sampled) / n
        square = (ones * (1 - q) ** 2 + (sampled - ones) * q ** 2) / n
        variance = np.maximum(square - mean ** 2, 0.0)
        return self.k / (self._d * (p - q)) * np.sqrt(variance / n)

    def _raw_from_counts(self, counts: Any, n: int) -> np.ndarray:
        pr = self.probabilities()
        counts = np.asarray(counts, dtype=np.float64)
        ones, sampled = counts[:self.k], counts[self.k:]
        return self.k / (n * self._d) * (ones - pr["q"] * sampled) / (pr["p"] - pr["q"])
