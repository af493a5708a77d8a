"""Hadamard Response."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from .. import _core
from .._validation import integer
from ..specs import register
from .base import Mechanism


@register("hr")
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

    Estimation: symbol x of block j owns the ``h = b/2`` outputs ``C_x`` of its row; a
    report lands on each of them with probability ``in`` from x and ``out`` otherwise
    (``in / out <= e^ε``, as realized). The raw estimate
    ``p̂_x = (2 S_x - T_j) / (n h (in - out))`` (``S_x`` reports in ``C_x``, ``T_j`` in
    block j) is unbiased: every report of block j contributes ``±1/(h (in - out))``, so
    its variance for n i.i.d. users is ``(P(block j)/(h (in - out))² - p_x²)/n``
    (:meth:`estimator_variance`). With one block (``K = b``: ``B = 1``, e.g. ε < ln 2, or
    a small k) this is a pure frequency oracle: a report supports x with probability ρ
    from x and exactly 1/2 from any other value, and ``p̂_x = (S_x/n - 1/2)/(ρ - 1/2)``.

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

    def _frequency_oracle(self) -> Optional[Tuple[float, float]]:
        """``(ρ, 1/2)`` when the outputs form one block (``K = b``): a report supports x when
        it lies in ``C_x``; ρ is the realized probability of that from x, and a holder of any
        other value lands in ``C_x`` with probability exactly 1/2 (its own set meets ``C_x``
        in ``b/4`` outputs). ``None`` with several blocks, where the estimate also subtracts
        the block's estimated mass (see :meth:`estimator_variance`)."""
        _, b, outputs = self.construction
        if outputs != b:
            return None
        inside, _ = self._core.probabilities()
        return float(inside) * (b // 2), 0.5

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Exact variance of each coordinate of the raw (unbiased) estimate, for n users
        drawn i.i.d. from ``p`` (see :meth:`Mechanism.estimator_variance` for the
        parameters and errors).

        Every report in the block j of x contributes ``±1/(h (in - out))`` to ``p̂_x`` (the
        sign of the Hadamard row of x) and any other report 0, so
        ``Var(p̂_x) = (P_j / (h (in - out))² - p_x²)/n`` with
        ``P_j = b·out + h (in - out) Σ_{x' in block j} p_x'`` the probability that a report
        lands in block j (``in``, ``out`` the realized per-output probabilities,
        ``h = b/2``). With one block ``P_j = 1`` and this is the frequency-oracle variance
        with ``(ρ, 1/2)``.

        Returns
        -------
        ndarray of float64, shape (k,)
        """
        p, n = self._variance_arguments(p, n)
        _, b, outputs = self.construction
        inside, outside = (float(v) for v in self._core.probabilities())
        h = b // 2
        scale = 1.0 / (h * (inside - outside))
        block = np.arange(self._k) // (b - 1)
        mass = np.bincount(block, weights=p, minlength=outputs // b)[block]
        in_block = b * outside + h * (inside - outside) * mass
        return (scale * scale * in_block - p * p) / n
