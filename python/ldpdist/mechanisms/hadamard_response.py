"""Hadamard Response."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .. import _core
from .._validation import integer
from ..specs import register
from .base import Mechanism


@register
class HadamardResponse(Mechanism):
    """Hadamard Response (Acharya, Sun & Zhang 2018), the general (b, B) construction.

    ``B`` is the largest power of 2 with ``B <= min(e^ε, 2k)``, ``b`` the smallest power of 2
    above ``ceil(k / B)``; symbol x owns half of one block of ``b`` outputs (a row of the
    Sylvester matrix ``H_b``, first row deleted) and is reported inside it with probability
    ``(b/2) e^ε / Z``. With ``B = 1`` (ε < ln 2) this is the high-privacy HR of the reference
    code: ``K = 2**ceil(log2(k+1))`` outputs, symbol x uses row x+1, reports in [0, K), so
    reports are interchangeable with other HR implementations (another implementation's
    reports are declared with :meth:`as_reports`, or decoded as they are by
    :meth:`decode_string`, the reference code's name). Sampling is O(1) per report
    and decoding one fast Walsh–Hadamard transform per block (``O(n + K log b)``).

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0.
    blocks : int, optional
        ``B`` of the construction, a power of two in [1, 2k]. ``None`` (default) follows the
        paper's rule; ``blocks=1`` is the high-privacy HR for every ε, as in the
        projected-HR estimator of Bassily's linear-queries paper (Algorithm 5) and the
        reference code's reports. Every choice is exactly ε-LDP; they differ in error
        (measure: ``benches`` / tests compare them).
    """

    _core_class = _core.HadamardResponse

    def __init__(self, k: int, epsilon: float, blocks: Optional[int] = None):
        self._blocks = None if blocks is None else integer(blocks, "blocks", minimum=1,
                                                           maximum=2**33)
        super().__init__(k, epsilon)

    def _make_core(self) -> Any:
        return self._core_class(self._k, self._epsilon, self._blocks)

    def _params(self) -> Dict[str, Any]:
        params = super()._params()
        if self._blocks is not None:
            params["blocks"] = self._blocks
        return params

    @property
    def construction(self) -> Tuple[int, int, int]:
        """``(B, b, K)``: blocks of the construction, outputs per block, outputs kept
        (``ceil(k / (b - 1)) * b`` — blocks no symbol uses are dropped)."""
        return tuple(int(v) for v in self._core.shape)  # type: ignore[return-value]
