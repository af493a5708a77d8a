"""k-ary randomized response."""

from __future__ import annotations

from typing import Tuple

from .. import _core
from ..specs import register
from .base import Mechanism


@register("rr")
class RandomizedResponse(Mechanism):
    """k-ary randomized response (Kairouz, Oh & Viswanath 2014).

    Reports the true value with probability ``p = e^ε / (e^ε + k - 1)`` and each other value
    with probability ``(1 - p) / (k - 1)``. Reports: one integer in [0, k) per user.
    ``p`` is rounded down (by 8 ulps) so the realized guarantee never exceeds ε.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0.

    Examples
    --------
    >>> mech = RandomizedResponse(k=10, epsilon=1.0)
    >>> reports = mech.privatize([3, 1, 4, 1, 5], seed=7)
    >>> mech.estimate(reports).shape
    (10,)
    """

    _core_class = _core.RandomizedResponse

    def _frequency_oracle(self) -> Tuple[float, float]:
        """A report supports x when it equals x: ``(p, (1 - p)/(k - 1))`` as realized."""
        p, q = self._core.probabilities()
        return float(p), float(q)
