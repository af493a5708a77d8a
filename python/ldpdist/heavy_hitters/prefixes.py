"""What the prefix-tree protocols (PEM, TreeHist) share: users split into groups, group j
reporting the first ``s_j`` bits of its hashed item (``s_j`` growing by ``step_bits`` up to
``bits``), each through a g-ary "keep or move to a uniform other bucket" randomizer whose
keep probability is an exact multiple of 2**-53 (so the channel sampled is the channel whose
ε is reported), and the server extending the ``top`` best prefixes of one group by the next
group's extra bits."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable, Optional, Tuple

import numpy as np

from .._validation import integer
from ..mechanisms.base import check_epsilon
from .protocol import HeavyHitterProtocol

__all__ = ["PrefixProtocol", "keep_threshold", "variance_factor", "UNIT", "MAX_CANDIDATES"]

#: The keep probability is a multiple of 2**-53 (a 53-bit uniform draw decides).
UNIT = 2**53
#: At most this many candidates are estimated per group (the first enumerates all
#: ``2**start_bits`` prefixes, the others ``top * 2**step_bits``).
MAX_CANDIDATES = 2**20
#: A report's group is one byte.
MAX_GROUPS = 255


def keep_threshold(epsilon: float, g: int) -> int:
    """M such that a user reports its true bucket with probability exactly ``M / 2**53``:
    the largest multiple of 2**-53 at least 4 units below ``e^ε / (e^ε + g - 1)``, so that
    the realized ε never exceeds ε (the rounding of the float formula is at most 1 unit)."""
    e = math.exp(epsilon)
    p = e / (e + g - 1) if math.isfinite(e) else 1.0
    return max(0, math.floor(p * UNIT) - 4)


def variance_factor(M: int, g: int) -> float:
    """``q (1 - q) / (p - q)**2`` (q = 1/g) at the realized p = M / 2**53: n times the
    variance of the estimate of a prefix of frequency 0 from n reports."""
    p, q = M / UNIT, 1.0 / g
    return math.inf if p <= q else q * (1 - q) / (p - q) ** 2


class PrefixProtocol(HeavyHitterProtocol):
    """Base of the prefix-tree protocols: the group schedule and the g-ary randomizer.
    Subclasses call ``_init_prefixes`` first in ``__init__``."""

    _epsilon: float
    _top: int
    _start: int
    _step: int
    _prefix_bits: Tuple[int, ...]
    _g: int
    _M: int

    def _init_prefixes(self, epsilon: float, top: int, bits: int, start_bits: Optional[int],
                       step_bits: Optional[int], seed: int, moduli: Iterable[int],
                       default_step: int = 4) -> None:
        """Check and set ε, top, bits, the prefix schedule and the seed; pick g among
        ``moduli`` (the one with the smallest variance factor at the realized keep
        probability, the smallest on ties) and its keep threshold M."""
        self._epsilon = check_epsilon(epsilon)
        self._top = integer(top, "top", minimum=1, maximum=4096)
        self._bits = integer(bits, "bits", minimum=1, maximum=64)
        step = default_step if step_bits is None else step_bits
        self._step = integer(step, "step_bits", minimum=1, maximum=self._bits)
        if self._top * 2**self._step > MAX_CANDIDATES:
            raise ValueError(f"top * 2**step_bits = {self._top * 2**self._step} candidates per "
                             f"round is more than {MAX_CANDIDATES}: lower top or step_bits")
        if start_bits is None:
            start_bits = min(self._bits, (self._top - 1).bit_length() + self._step)
        self._start = integer(start_bits, "start_bits", minimum=1, maximum=min(self._bits, 20))
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        prefixes = [self._start]
        while prefixes[-1] < self._bits:
            prefixes.append(min(prefixes[-1] + self._step, self._bits))
        if len(prefixes) > MAX_GROUPS:
            raise ValueError(f"{len(prefixes)} groups: at most {MAX_GROUPS} (raise step_bits)")
        self._prefix_bits = tuple(prefixes)
        self._g = min(moduli, key=lambda g: (variance_factor(keep_threshold(self._epsilon, g),
                                                              g), g))
        self._M = keep_threshold(self._epsilon, self._g)
        if self._M / UNIT <= 1.0 / self._g:
            raise ValueError(f"epsilon = {self._epsilon!r} is too small: the keep probability "
                             "cannot be realized above 1/g")

    def _keep(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draws of "report the true bucket": True with probability exactly p."""
        return rng.integers(0, UNIT, size=size, dtype=np.uint64) < np.uint64(self._M)

    @property
    def top(self) -> int:
        """Candidates kept per round, and the most ``identify`` returns."""
        return self._top

    @property
    def start_bits(self) -> int:
        """Prefix length of the first group."""
        return self._start

    @property
    def step_bits(self) -> int:
        """Bits added per round."""
        return self._step

    @property
    def groups(self) -> int:
        """The number of groups (and rounds)."""
        return len(self._prefix_bits)

    @property
    def prefix_bits(self) -> Tuple[int, ...]:
        """Prefix length ``s_j`` reported by each group j."""
        return self._prefix_bits

    @property
    def g(self) -> int:
        """The number of buckets: reported values lie in ``[0, g)``."""
        return self._g

    @property
    def p(self) -> float:
        """Probability (exact, a multiple of 2**-53) of reporting the true bucket."""
        return self._M / UNIT

    @property
    def q(self) -> float:
        """``1/g``: the probability that a report supports a given prefix other than its
        user's (over the choice of hash)."""
        return 1.0 / self._g

    @property
    def variance_factor(self) -> float:
        """``q (1 - q) / (p - q)**2``: n_j times the variance of the estimate of a prefix of
        frequency 0 from a group of n_j reports."""
        return variance_factor(self._M, self._g)

    @property
    def realized_epsilon(self) -> float:
        """Exact ε of every group's channel, ``ln(p (g - 1) / (1 - p))`` (at most epsilon)."""
        # the ratio exactly, rounded once: the logarithm of sums would lose 1e-14
        return math.log(float(Fraction(self._M * (self._g - 1), UNIT - self._M)))
