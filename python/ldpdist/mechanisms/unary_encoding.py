"""Symmetric unary encodings: basic one-time RAPPOR and Optimized Unary Encoding (OUE)."""

from __future__ import annotations

from typing import Tuple

from .. import _core
from ..specs import register
from .base import BitVectorMechanism


@register("rappor")
class RAPPOR(BitVectorMechanism):
    """Basic one-time RAPPOR (Erlingsson, Pihur & Korolova 2014), as used as a baseline by
    Acharya, Sun & Zhang 2018.

    The value x is one-hot encoded into k bits and every bit is flipped independently with
    probability ``f = 1 / (e^(ε/2) + 1)``: bit x of the report is 1 with probability
    ``a = 1 - f`` and every other bit with probability ``b = f``.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0.

    Notes
    -----
    **Reports.**
    One row of ``ceil(k / 8)`` uint8 per user in ``numpy.packbits`` layout: bit j of a report
    is ``np.unpackbits(row)[j]`` (``np.unpackbits(reports, axis=1, count=k)`` recovers the
    k-bit vectors); the padding bits after bit k - 1 are 0, and rows with a padding bit set
    are malformed. :attr:`output_size` is k (bits per report).

    **Probabilities.**
    ``probabilities()`` returns ``(a, b)`` as used. ``f`` is rounded up (by 4 ulps, then to a
    multiple of 2**-53 so that ``1 - f`` is exact) after being computed for ε shaded by
    ``2**-46 * max(ε, 1)``.

    **Guarantee.**
    ε-LDP: the largest likelihood ratio between two values is
    ``(a / b) * ((1 - b) / (1 - a)) = ((1 - f) / f)**2``; :attr:`realized_epsilon` is its
    logarithm, never above ε (within 1e-12 of it for ε <= 16; capped at ≈ 73.4).

    **Estimation.**
    From per-bit counts ``c_j`` of n reports, ``p_j = (c_j / n - b) / (a - b)`` is unbiased,
    with variance ``(b(1-b) + p_j (a-b)(1-a-b)) / (n (a-b)^2)``. Every decoder applies
    (``"ibu"`` treats the bit counts as Poisson, see :mod:`ldpdist.decoders`).
    :meth:`simulate` draws the per-bit counts as independent binomials; they have the
    distribution of privatizing the users (up to the floating-point binomial sampler) but do
    not equal the counts of any particular :meth:`privatize` call for the same seed.

    Examples
    --------
    >>> mech = RAPPOR(k=10, epsilon=1.0)
    >>> reports = mech.privatize([3, 1, 4, 1, 5], seed=7)
    >>> reports.shape, reports.dtype
    ((5, 2), dtype('uint8'))
    >>> mech.estimate(reports).shape
    (10,)
    """

    _core_class = _core.Rappor

    def _frequency_oracle(self) -> Tuple[float, float]:
        """A report supports x when bit x is set: ``(a, b) = (1 - f, f)`` as realized."""
        a, b = self._core.probabilities()
        return float(a), float(b)


@register("oue")
class OptimizedUnaryEncoding(BitVectorMechanism):
    """Optimized Unary Encoding, OUE (Wang, Blocki, Li & Jha 2017, "Locally differentially
    private protocols for frequency estimation").

    The value x is one-hot encoded into k bits; bit x of the report is 1 with probability
    ``a = 1/2`` and every other bit with probability ``b = 1 / (e^ε + 1)``, independently.
    This choice of (a, b) minimizes the estimator's variance among unary encodings.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0.

    Notes
    -----
    **Reports.**
    One row of ``ceil(k / 8)`` uint8 per user in ``numpy.packbits`` layout (as for
    :class:`RAPPOR`); padding bits are 0. :attr:`output_size` is k (bits per report).

    **Probabilities.**
    ``probabilities()`` returns ``(a, b) = (0.5, b)``; ``b`` is computed for ε shaded by
    ``2**-46 * max(ε, 1)`` and rounded up by 4 ulps.

    **Guarantee.**
    ε-LDP: the largest likelihood ratio between two values is
    ``(a / b) * ((1 - b) / (1 - a)) = (1 - b) / b``; :attr:`realized_epsilon` is its
    logarithm, never above ε (within 1e-12 of it for ε <= 60).

    **Estimation.**
    ``p_j = (c_j / n - b) / (1/2 - b)`` from per-bit counts, unbiased, with variance
    ``(b(1-b) + p_j (a-b)(1-a-b)) / (n (a-b)^2)``; see :class:`RAPPOR` for the decoders and
    :meth:`simulate`.

    Examples
    --------
    >>> mech = OptimizedUnaryEncoding(k=10, epsilon=1.0)
    >>> mech.privatize([3, 1, 4], seed=7).shape
    (3, 2)
    """

    _core_class = _core.OptimizedUnaryEncoding

    def _frequency_oracle(self) -> Tuple[float, float]:
        """A report supports x when bit x is set: ``(a, b) = (1/2, b)`` as realized."""
        a, b = self._core.probabilities()
        return float(a), float(b)
