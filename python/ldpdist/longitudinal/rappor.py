"""RAPPOR with memoization (Erlingsson, Pihur & Korolova, "RAPPOR: Randomized Aggregatable
Privacy-Preserving Ordinal Response", ACM CCS 2014): permanent randomized response (PRR)
on the value's bits, memoized, then instantaneous randomized response (IRR) per report."""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any, Dict, Optional

import numpy as np

from .._validation import integer, real
from .base import (GRID, LongitudinalMechanism, binary_counts, grid_up, memo_words,
                   product_channel, register)

__all__ = ["MemoizedRAPPOR"]

_BLOOM_DOMAIN = b"ldpdist-rappor-bloom-v1\x00"
MAX_CHANNEL_BITS = 12
MAX_BLOOM_K = 4096


def _probability(value: Any, name: str) -> float:
    value = real(value, name)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return value


def _pair_epsilon(a1: float, a0: float, difference: np.ndarray) -> float:
    """Exact max log-ratio of a product channel whose bit is 1 w.p. ``a1`` when the value's
    Bloom bit is set and ``a0`` when not, over ordered pairs (x, y):
    ``|S_x minus S_y| A + |S_y minus S_x| B``, with ``difference[x, y] = |S_x minus S_y|``,
    A the best per-bit log-ratio for a bit of x only and B for a bit of y only."""
    if a1 == a0:
        return 0.0
    log = lambda v: math.log(v) if v > 0 else -math.inf  # noqa: E731
    up = log(a1) - log(a0)
    down = log(1 - a1) - log(1 - a0)
    A, B = max(up, down), max(-up, -down)
    total = difference * A + difference.T * B
    np.fill_diagonal(total, 0.0)
    return float(total.max())


@register
class MemoizedRAPPOR(LongitudinalMechanism):
    """RAPPOR with its permanent (memoized) and instantaneous randomized responses.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**20.
    f : float
        PRR parameter in (0, 1]: each memoized bit is 1 with probability f/2, 0 with
        probability f/2, and the value's bit otherwise.
    p, q : float
        IRR: a reported bit is 1 with probability q when the memoized bit is 1 and p when it
        is 0 (p != q). RAPPOR's defaults: f = 0.5, p = 0.5, q = 0.75.
    num_bits : int, optional
        Bloom filter size m; ``None`` (default) one-hot encodes the value into k bits.
    num_hashes : int
        Bloom hash functions h (1 for one-hot).

    Notes
    -----
    **Encoding.** One-hot: bit x for value x. Bloom: the bits
    ``int.from_bytes(SHA-256(b"ldpdist-rappor-bloom-v1\\x00" || x || i)[:8], "little") % m``
    for i = 0..h-1 (x and i as 8-byte little-endian unsigned): public, as in RAPPOR (one
    cohort). The estimate needs the k × m incidence of the values' bits to have rank k.

    **Probabilities.** f/2 is rounded up to a multiple of 2^-53 (more noise), p and q to
    the nearest multiple; :meth:`probabilities` gives the realized ones.

    **Memoization words.** Bit j of the memoized vector of (secret, value) reads word
    ``w_j`` of the stream (module ``ldpdist.longitudinal.base``): with
    ``u = w_j >> 11`` and ``g = (f/2) 2^53``, the bit is 1 if ``u < g``, 0 if
    ``g <= u < 2g``, else the value's bit.

    **Per report.** ``u = rng.random((n, m))`` from
    ``numpy.random.Generator(PCG64(SeedSequence(seed)))``; a reported bit is
    ``u < (q if memoized bit else p)``.

    **Guarantees.** :attr:`epsilon_infinity` is the exact max log-ratio of the PRR channel,
    ``2h ln((1 - f/2)/(f/2))`` when the values' h bits never collide (always for one-hot,
    h = 1), less otherwise; :attr:`epsilon_1` is the exact max log-ratio of one report,
    whose bit is 1 w.p. ``q* = (1 - f/2) q + (f/2) p`` when the value's bit is set and
    ``p* = (f/2) q + (1 - f/2) p`` when not (one-hot: ``ln(q* (1 - p*) / (p* (1 - q*)))``).
    Both are computed over every pair of values (Bloom: k <= 4096).

    **Estimation.** Per bit, ``t_j = (c_j / n - p*) / (q* - p*)`` is unbiased for the
    fraction of users whose value sets bit j; one-hot, it is the distribution; Bloom, the
    distribution is the least-squares solution of ``M^T p = t`` (M the k × m incidence),
    unbiased when M has rank k.

    Examples
    --------
    >>> import math
    >>> import numpy as np
    >>> from ldpdist.longitudinal import MemoizedRAPPOR, make_secrets
    >>> mech = MemoizedRAPPOR(k=8, f=0.5, p=0.5, q=0.75)
    >>> reports = mech.privatize(np.array([1, 2, 3]), make_secrets(3, seed=1), seed=2)
    >>> reports.shape
    (3, 1)
    >>> abs(mech.epsilon_infinity - 2 * math.log(0.75 / 0.25)) < 1e-12
    True
    """

    report_kind = "bits"
    _param_names = ("k", "f", "p", "q", "num_bits", "num_hashes")

    def __init__(self, k: int, f: float = 0.5, p: float = 0.5, q: float = 0.75,
                 num_bits: Optional[int] = None, num_hashes: int = 1):
        self.k = integer(k, "k", minimum=2, maximum=2**20)
        self._k = self.k
        self._f = _probability(f, "f")
        if self._f == 0:
            raise ValueError("f must be > 0 (f = 0 memoizes the value itself: ε_∞ infinite)")
        self._p = _probability(p, "p")
        self._q = _probability(q, "q")
        if self._p == self._q:
            raise ValueError(f"p and q must differ (p = q = {self._p!r} reports pure noise)")
        self._num_hashes = integer(num_hashes, "num_hashes", minimum=1, maximum=64)
        if num_bits is None:
            if self._num_hashes != 1:
                raise ValueError("one-hot encoding (num_bits=None) has num_hashes = 1")
            self._num_bits = None
            self._m = self.k
            self._incidence = np.eye(self.k, dtype=bool)
        else:
            self._num_bits = integer(num_bits, "num_bits", minimum=1, maximum=2**20)
            if self.k > MAX_BLOOM_K:
                raise ValueError(f"Bloom-encoded MemoizedRAPPOR computes its exact ε over all "
                                 f"pairs of values: k <= {MAX_BLOOM_K}, got {self.k}")
            self._m = self._num_bits
            self._incidence = self._bloom_incidence()
        self._g = min(grid_up(self._f / 2), GRID // 2)
        self._np = int(round(self._p * GRID))
        self._nq = int(round(self._q * GRID))

    def _bloom_incidence(self) -> np.ndarray:
        incidence = np.zeros((self.k, self._m), dtype=bool)
        for x in range(self.k):
            for i in range(self._num_hashes):
                digest = hashlib.sha256(_BLOOM_DOMAIN + struct.pack("<QQ", x, i)).digest()
                incidence[x, int.from_bytes(digest[:8], "little") % self._m] = True
        return incidence

    @property
    def bloom_bits(self) -> np.ndarray:
        """The k × m incidence of the values' bits (bool; the identity for one-hot)."""
        return self._incidence.copy()

    # -- probabilities -----------------------------------------------------------------

    def probabilities(self) -> Dict[str, float]:
        """Realized ``f``, ``p``, ``q``, and the per-bit one-report probabilities
        ``q_star`` (the value's bit set) and ``p_star`` (not set)."""
        half = self._g / GRID
        p, q = self._np / GRID, self._nq / GRID
        return {"f": 2 * half, "p": p, "q": q, "q_star": (1 - half) * q + half * p,
                "p_star": half * q + (1 - half) * p}

    def _difference(self) -> np.ndarray:
        if self._num_bits is None:
            return 1.0 - np.eye(self.k)
        inc = self._incidence.astype(np.float64)
        return inc @ (1.0 - inc).T

    @property
    def epsilon_infinity(self) -> float:
        """Realized ε of the memoized bits (exact, over every pair of values)."""
        half = self._g / GRID
        if self._num_bits is None:
            return 2 * (math.log1p(-half) - math.log(half))
        return _pair_epsilon(1 - half, half, self._difference())

    @property
    def epsilon_1(self) -> float:
        """Realized ε of one report (exact, over every pair of values)."""
        pr = self.probabilities()
        a1, a0 = pr["q_star"], pr["p_star"]
        if self._num_bits is None:
            return abs(math.log(a1) + math.log1p(-a0) - math.log1p(-a1) - math.log(a0))
        return _pair_epsilon(a1, a0, self._difference())

    @property
    def output_size(self) -> int:
        return self._m

    # -- exact channels ----------------------------------------------------------------

    def _check_small(self) -> None:
        if self._m > MAX_CHANNEL_BITS:
            raise ValueError(f"the exact channel has 2^m outputs: only for m <= "
                             f"{MAX_CHANNEL_BITS} bits, got {self._m}")

    def memo_channel_matrix(self) -> np.ndarray:
        """The PRR channel, k × 2^m (output o has bit j = ``(o >> j) & 1``)."""
        self._check_small()
        half = self._g / GRID
        return product_channel(np.where(self._incidence, 1 - half, half))

    def channel_matrix(self) -> np.ndarray:
        """The one-report (PRR then IRR) channel, k × 2^m."""
        self._check_small()
        pr = self.probabilities()
        return product_channel(np.where(self._incidence, pr["q_star"], pr["p_star"]))

    def _support_of_outputs(self) -> np.ndarray:
        outputs = np.arange(1 << self._m)
        return ((outputs[:, None] >> np.arange(self._m)[None, :]) & 1).astype(np.float64)

    # -- rounds ------------------------------------------------------------------------

    def _memo_one(self, secret: bytes, value: int) -> np.ndarray:
        u = memo_words(secret, self._fp_bytes(), value, self._m) >> np.uint64(11)
        g = np.uint64(self._g)
        return np.where(u < g, True, np.where(u < 2 * g, False, self._incidence[value]))

    def _instant(self, memo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        u = rng.random(memo.shape)
        return u < np.where(memo, self._nq / GRID, self._np / GRID)

    def _simulate_memo(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # s_j users have bit j set by their value's encoding; PRR makes a memoized bit 1
        # w.p. 1 - f/2 when set and f/2 when not
        n = int(counts.sum())
        half = self._g / GRID
        if self._num_bits is None:
            set_bits = counts
        else:  # k <= 4096 values, each count < 2^62 and the total too: exact in int64
            set_bits = counts @ self._incidence.astype(np.int64)
        return binary_counts(set_bits, n, 1.0 - half, half, rng)

    def _simulate_round(self, memo: np.ndarray, n: int, rng: np.random.Generator
                        ) -> np.ndarray:
        return binary_counts(memo, n, self._nq / GRID, self._np / GRID, rng)

    def _support_counts(self, bits: np.ndarray) -> np.ndarray:
        return bits.sum(axis=0, dtype=np.int64).astype(np.float64)

    def _standard_errors(self, sums: np.ndarray, n: int) -> Optional[np.ndarray]:
        if self._num_bits is not None:
            return None  # the least-squares solve mixes correlated bits: no plug-in formula
        pr = self.probabilities()
        return self._binary_errors(sums, n, pr["q_star"] - pr["p_star"])

    def _raw_from_counts(self, counts: Any, n: int) -> np.ndarray:
        pr = self.probabilities()
        t = (np.asarray(counts, dtype=np.float64) / n - pr["p_star"]) / (
            pr["q_star"] - pr["p_star"])
        if self._num_bits is None:
            return t
        design = self._incidence.T.astype(np.float64)  # m × k: t = design @ p
        if np.linalg.matrix_rank(design) < self.k:
            raise ValueError(
                f"the Bloom filter's k × m incidence has rank < k = {self.k}: the values' "
                "bit patterns are not linearly independent, so no unbiased estimate of the "
                "distribution exists (use more bits, or one-hot: num_bits=None)")
        return np.linalg.lstsq(design, t, rcond=None)[0]
