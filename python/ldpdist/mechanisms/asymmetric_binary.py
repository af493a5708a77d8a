"""The optimal binary mechanism for two asymmetric privacy budgets (context-aware LDP)."""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar, Dict, Union

import numpy as np

from .. import _core
from .._validation import integer, one_of, shown
from ..specs import register
from .base import Mechanism

#: How an infinite budget is written in a spec (JSON has no infinity).
INFINITE_BUDGET = "inf"


def check_budget(value: Any, name: str) -> float:
    """A budget as a float: a real number ≥ 0 (at most ``MAX_EPSILON`` when finite) or +inf,
    given as a number or as the string ``"inf"`` (the spec's representation). ``-0.0`` is
    0.0, so that equal mechanisms have equal specs."""
    if isinstance(value, str):
        if value == INFINITE_BUDGET:
            return math.inf
        raise TypeError(f"{name} must be a real number ≥ 0 or +inf (written 'inf' in a "
                        f"spec), got str {shown(value)}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number ≥ 0 or +inf, got "
                        f"{type(value).__name__} {shown(value)}")
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be a privacy budget ≥ 0 (natural log) or +inf for no "
                         f"constraint, got {value!r}")
    if math.isfinite(value) and value > _core.MAX_EPSILON:
        raise ValueError(f"{name} = {value!r} is too large: e^{name} overflows double "
                         f"precision; the largest finite budget accepted is "
                         f"{_core.MAX_EPSILON!r} (pass inf for no constraint)")
    return value + 0.0


def _spec_budget(value: float) -> Union[float, str]:
    return INFINITE_BUDGET if value == math.inf else value


@register("abr")
class AsymmetricBinaryResponse(Mechanism):
    """The optimal mechanism for binary values under two asymmetric budgets (Acharya,
    Bonawitz, Kairouz, Ramage & Sun, "Context-aware local differential privacy", ICML 2020,
    Section 4, Theorem 2, with eq. (9) corrected as on the docs page Mechanisms ›
    Context-aware LDP, docs/mechanisms/context-aware.md).

    Values and reports are 0 or 1 (``k = 2``); the paper's symbols 1 and 2 are our 0 and 1.
    The promised budget matrix (:meth:`budgets`, :mod:`ldpdist.privacy`) is
    ``E = [[0, epsilon_01], [epsilon_10, 0]]``:

    * ``epsilon_01`` (the paper's ε_{1,2}, entry ``E[0, 1]``) bounds
      ``Q(y|0) ≤ e^epsilon_01 · Q(y|1)`` for both reports y;
    * ``epsilon_10`` (ε_{2,1}, ``E[1, 0]``) bounds ``Q(y|1) ≤ e^epsilon_10 · Q(y|0)``.

    A smaller ``epsilon_01`` protects "my value is 0" more (the paper: symbol x is more
    private than x' when ε_{x,x'} < ε_{x',x}). Either budget may be ``math.inf`` (no
    constraint on that ordered pair).

    Channel, with ``a = e^-epsilon_01`` and ``b = e^-epsilon_10``::

        Q(0|0) = (1 - b)/(1 - ab)      Q(1|0) = b(1 - a)/(1 - ab)
        Q(0|1) = a(1 - b)/(1 - ab)     Q(1|1) = (1 - a)/(1 - ab)

    Both budgets are tight: ``Q(0|0)/Q(0|1) = e^epsilon_01`` and ``Q(1|1)/Q(1|0) =
    e^epsilon_10``. (The matrix printed as eq. (9) has the indices swapped and violates the
    budgets whenever they differ.) It is optimal for every utility that obeys the data
    processing inequality. Special cases: equal budgets ε give Warner's randomized response
    (truth with probability e^ε/(e^ε + 1)); ``epsilon_01 = inf`` gives Mangat's improved
    randomized response (value 1 always reports 1; value 0 reports 1 with probability
    e^-epsilon_10; the paper's eq. (11)), ``epsilon_10 = inf`` its mirror; both infinite
    report the value itself.

    **A zero budget** forces ``Q(·|0) = Q(·|1)``: the reports carry no information. The
    channel is then a constant report (``epsilon_01 = 0``: every user reports 0; else
    ``epsilon_10 = 0``: every user reports 1), :attr:`degenerate` is True, and
    :meth:`estimate` refuses with a ``ValueError`` (privatize, aggregate and simulate work).

    Exactness: a user reports ``x XOR flip``, ``flip ~ Bernoulli(f_x)`` drawn exactly, with the
    flip probabilities ``f0 = Q(1|0)``, ``f1 = Q(0|1)`` rounded up in double precision until
    every realized log-ratio, with a bound on its rounding error, is within its budget.
    :meth:`realized_budgets` is the exact budget matrix of that channel (closed form, never
    above :meth:`budgets`); the estimator uses the same probabilities. The shared rule on
    realized privacy (``_core.check_realized``: realized within [ε(1 − 1e-3), ε]) applies to
    each finite budget of a non-degenerate mechanism; budgets double precision cannot
    represent are refused.

    Estimator (unbiased; decoders ``raw``, ``normalize``, ``project``, ``sparse_project``,
    ``ibu``): with ``f̂ = c0/n`` the fraction of 0 reports,
    ``p̂_0 = (f̂ - Q(0|1)) / (Q(0|0) - Q(0|1))`` and ``p̂_1 = 1 - p̂_0``; its variance is
    ``F0 (1 - F0) / (n (Q(0|0) - Q(0|1))^2)`` with ``F0 = Q(0|0) p_0 + Q(0|1) p_1``.
    :meth:`simulate` draws the two counts with two binomials, whatever n.

    Parameters
    ----------
    epsilon_01 : float or "inf"
        Budget ``E[0, 1]`` in nats: ≥ 0 and at most 700, or ``math.inf`` (also the string
        ``"inf"``, how specs write it).
    epsilon_10 : float or "inf"
        Budget ``E[1, 0]``, likewise.

    Attributes
    ----------
    k : int
        Always 2.
    epsilon : float
        ``max(epsilon_01, epsilon_10)`` (possibly inf): the plain ε-LDP guarantee implied.
    realized_epsilon : float
        The largest realized budget (possibly inf).
    output_size : int
        2: reports are uint8 arrays of shape (n,) with values in {0, 1}.

    Spec: ``{"mechanism": "AsymmetricBinaryResponse", "format": 1, "epsilon_01": …,
    "epsilon_10": …}``; an infinite budget is the string ``"inf"`` (JSON has no infinity), so
    specs and fingerprints are plain JSON and stable.

    Examples
    --------
    >>> mech = AsymmetricBinaryResponse(epsilon_01=0.5, epsilon_10=2.0)
    >>> reports = mech.privatize([0, 1, 1, 0, 1], seed=7)   # uint8, shape (5,)
    >>> mech.estimate(reports, "project").shape
    (2,)
    >>> mech.budgets()
    array([[0. , 0.5],
           [2. , 0. ]])
    """

    _core_class = _core.AsymmetricBinaryResponse
    context_aware: ClassVar[bool] = True

    def __init__(self, epsilon_01: Union[float, str], epsilon_10: Union[float, str]):
        self._k = 2
        self._epsilon_01 = check_budget(epsilon_01, "epsilon_01")
        self._epsilon_10 = check_budget(epsilon_10, "epsilon_10")
        self._epsilon = max(self._epsilon_01, self._epsilon_10)
        self._core = _core.AsymmetricBinaryResponse(self._epsilon_01, self._epsilon_10)
        if not self.degenerate:
            realized = self._core.realized_budgets()
            for name, budget, got in zip(("epsilon_01", "epsilon_10"),
                                         (self._epsilon_01, self._epsilon_10), realized):
                if math.isfinite(budget):
                    _core.check_realized(f"AsymmetricBinaryResponse (budget {name})", budget,
                                         float(got))

    # -- parameters --------------------------------------------------------------------

    @property
    def epsilon_01(self) -> float:
        """Budget ``E[0, 1]``: ``Q(y|0) ≤ e^epsilon_01 Q(y|1)`` (possibly inf)."""
        return self._epsilon_01

    @property
    def epsilon_10(self) -> float:
        """Budget ``E[1, 0]``: ``Q(y|1) ≤ e^epsilon_10 Q(y|0)`` (possibly inf)."""
        return self._epsilon_10

    @property
    def epsilon(self) -> float:
        """``max(epsilon_01, epsilon_10)`` (possibly inf): the plain ε-LDP guarantee implied
        by the budgets; :meth:`budgets` is the guarantee itself."""
        return self._epsilon

    @property
    def degenerate(self) -> bool:
        """Whether a budget is 0: every user reports the same constant and nothing can be
        estimated."""
        return bool(self._core.degenerate)

    def _params(self) -> Dict[str, Any]:
        return {"epsilon_01": _spec_budget(self._epsilon_01),
                "epsilon_10": _spec_budget(self._epsilon_10)}

    def budgets(self) -> np.ndarray:
        """The promised budget matrix ``[[0, epsilon_01], [epsilon_10, 0]]``, shape (2, 2)."""
        return np.array([[0.0, self._epsilon_01], [self._epsilon_10, 0.0]])

    def realized_budgets(self, max_entries: int = 2**24) -> np.ndarray:
        """The exact budget matrix of the channel used, in closed form, shape (2, 2); never
        above :meth:`budgets` entrywise (``max_entries`` is accepted for the common
        signature; the channel has 4 entries)."""
        integer(max_entries, "max_entries", minimum=1)
        e01, e10 = self._core.realized_budgets()
        return np.array([[0.0, e01], [e10, 0.0]])

    # -- server side -------------------------------------------------------------------

    def _refuse_degenerate(self) -> None:
        if self.degenerate:
            raise ValueError(
                f"{self!r} reports a constant: a zero budget forces Q(·|0) = Q(·|1), so the "
                "reports carry no information about the values and nothing can be estimated")

    def _decode(self, counts: np.ndarray, n: int, decoder: str, **options: Any) -> np.ndarray:
        if self.degenerate:
            one_of(decoder, self.decoders, "decoder")
            self._refuse_degenerate()
        return super()._decode(counts, n, decoder, **options)

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Exact variance of each coordinate of the raw (unbiased) estimate, for n users
        drawn i.i.d. from ``p`` (see :meth:`Mechanism.estimator_variance` for the
        parameters and errors).

        A report is 0 with probability ``F0 = Q(0|0) p_0 + Q(0|1) p_1``; ``p̂_0`` is affine
        in the fraction of 0 reports and ``p̂_1 = 1 - p̂_0``, so both coordinates have the
        variance ``F0 (1 - F0) / (n (Q(0|0) - Q(0|1))^2)`` (realized probabilities). This is
        not a single frequency oracle: value 0 is supported by a 0 report
        (``(1 - f0, f1)``), value 1 by a 1 report (``(1 - f1, f0)``). A degenerate
        mechanism (a zero budget) has no estimate: ``ValueError``.

        Returns
        -------
        ndarray of float64, shape (2,)
        """
        p, n = self._variance_arguments(p, n)
        self._refuse_degenerate()
        f0, f1 = (float(v) for v in self._core.probabilities())
        gap = (1.0 - f0) - f1
        zero = (1.0 - f0) * p[0] + f1 * p[1]
        return np.full(2, zero * (1.0 - zero) / (n * gap * gap))
