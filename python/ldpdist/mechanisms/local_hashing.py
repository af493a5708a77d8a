"""Optimized Local Hashing (OLH)."""

from __future__ import annotations

from typing import Any, Dict, Tuple

from .. import _core
from .._validation import integer
from ..specs import register
from .base import Mechanism


@register("olh")
class OptimizedLocalHashing(Mechanism):
    """Optimized Local Hashing (Wang, Blocki, Li & Jha 2017), with an exact hash family.

    Each user hashes their value into ``[0, g)`` with a hash function drawn at random, and
    reports the hash function together with the hashed value passed through g-ary randomized
    response.

    Hash family: ``g`` is a prime and ``t = ceil(log_g(k))``; a value x is written in base g
    with t digits ``x_0, ..., x_{t-1}`` (``x_0`` least significant); hash number
    ``A = sum(a_i * g**i)`` with digits ``a_i`` in ``[0, g)`` maps x to
    ``h_A(x) = sum(a_i * x_i) mod g``. For two different values exactly one hash in g
    collides (``x - x'`` is a nonzero vector over the field GF(g)), so the collision
    probability is exactly ``1/g`` and the estimator below is exactly unbiased.

    Client: draw A uniformly from the user's private randomness (digit by digit), keep
    ``v = h_A(x)`` with probability ``p = e^ε / (e^ε + g - 1)`` (rounded down by 4 ulps, so
    the realized guarantee never exceeds ε) or else report a uniform value among the ``g - 1``
    others. Report: the single integer ``A * g + y`` in ``[0, g**(t+1))``, so
    :attr:`output_size` is ``g**(t+1)`` and reports aggregate into a histogram like any
    index-valued mechanism (:meth:`simulate` equals privatizing the sorted values).

    Estimation: a report ``(A, y)`` supports x when ``h_A(x) = y``. A holder of x supports it
    with probability p and a holder of any other value with probability exactly ``1/g``, so
    with ``C(x)`` supporting reports out of n, ``(C(x)/n - 1/g) / (p - 1/g)`` is unbiased,
    with variance ``(f_x p(1-p) + (1-f_x)(1/g)(1-1/g)) / (n (p - 1/g)**2)``. All decoders
    apply (``"ibu"`` is exact maximum likelihood over the report histogram). ``C`` is computed
    from the histogram in ``O(t g**(t+2))`` (a pass per digit) or ``O(g**t k)`` (hash by
    hash), whichever is cheaper.

    Choice of g: the prime minimizing OLH's variance factor ``(1/g)(1-1/g)/(p-1/g)**2``
    (realized p), among the admissible primes: g at most the smallest prime ``>= k``, and
    ``g**(t+1) <= 2**24`` report values. The unconstrained optimum is OLH's ``g = e^ε + 1``.
    The first bound only binds when ``e^ε + 1 > k``, where k-ary :class:`RandomizedResponse`
    has lower variance than OLH with any g. The second bounds the server's memory: the report
    histogram has ``g**(t+1)`` entries, at most 2**24 (128 MiB of counts); uncapped, the
    outputs grow like ``g**2 k`` (k = 10**4: 7.9e6 report values at ε = 4, 6.4e7 at ε = 6,
    2.6e10 at ε = 8). With the cap, k = 10**4 gets g = 3 (59049 report values) at ε = 1,
    g = 53 (7.9e6) at ε = 4, and g = 251 (251**3 ≈ 1.58e7) at every ε above about 5.55.
    Since ``g**(t+1) >= 2k``, k above 2**23 = 8388608 is refused (ValueError).

    Where the cap binds it costs variance: numerically (mean squared error at the uniform
    distribution, k <= 2**23, ε <= 40), wherever the capped OLH still beats both
    :class:`RandomizedResponse` and :class:`HadamardResponse` its variance is at most 2.15
    times that of the uncapped g; above a k-dependent ε, one of those two has lower variance
    than the capped OLH (not always than the uncapped one). For k = 10**4 the cost is 5% at ε = 6 and 62% at ε = 7, and
    :class:`HadamardResponse` is better from ε ≈ 7.3.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**23 (the output cap above).
    epsilon : float
        Privacy parameter ε > 0 (refused when so small, below about 1e-15, that p cannot be
        realized above 1/g in floating point).
    seed : int, default 0
        Public seed, kept in the spec (:meth:`to_dict`) for compatibility with the shared
        mechanism interface (``OptimizedLocalHashing(k, epsilon, seed=...)``). It does not
        change the mechanism: the hash family above is exact, and every user draws their hash
        from their own private randomness, so no public randomness is needed for privacy or
        for unbiasedness. Two mechanisms with different seeds have identical channels (but
        different specs, so their aggregators do not merge). An integer in ``[0, 2**256)``.

    Examples
    --------
    >>> mech = OptimizedLocalHashing(k=1000, epsilon=1.0)
    >>> mech.g, mech.t, mech.output_size
    (3, 7, 6561)
    >>> reports = mech.privatize([3, 1, 4, 1, 5], seed=7)
    >>> mech.estimate(reports).shape
    (1000,)
    """

    _core_class = _core.OptimizedLocalHashing

    def __init__(self, k: int, epsilon: float, seed: int = 0):
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        super().__init__(k, epsilon)

    def _params(self) -> Dict[str, Any]:
        return {**super()._params(), "seed": self._seed}

    @property
    def seed(self) -> int:
        """The public seed of the spec (it does not affect the channel; see the class doc)."""
        return self._seed

    @property
    def g(self) -> int:
        """The prime modulus: hashed values lie in ``[0, g)``."""
        return int(self._core.g)

    @property
    def t(self) -> int:
        """Number of base-g digits, ``ceil(log_g(k))``; there are ``g**t`` hash functions."""
        return int(self._core.t)

    def _frequency_oracle(self) -> Tuple[float, float]:
        """A report ``(A, y)`` supports x when ``h_A(x) = y``: ``(p, 1/g)`` with the
        realized p (exact collision probability 1/g of the hash family)."""
        p, _ = self._core.probabilities()
        return float(p), 1.0 / self.g
