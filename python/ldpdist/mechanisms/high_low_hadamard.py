"""High-Low Hadamard Response (context-aware LDP: only the sensitive values are protected)."""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import numpy as np

from .. import _core, privacy
from .._validation import integer
from ..specs import register
from .base import Mechanism


@register("hlhr", "HL-HR")
class HighLowHadamardResponse(Mechanism):
    """High-Low Hadamard Response (Acharya, Bonawitz, Kairouz, Ramage & Sun, "Context-aware
    local differential privacy", ICML 2020, Section 5.1, eqs. (13)–(19), with the corrections
    on the docs page Mechanisms › Context-aware LDP, docs/mechanisms/context-aware.md): frequency
    estimation under **(A, ε)-High-Low LDP**, where only the *sensitive* values A are
    protected. For x in A, ``Q(y|x) <= e^ε Q(y|x')`` for every other value x' and every report
    y; a non-sensitive value has no protection at all (:meth:`budgets` is
    ``ldpdist.privacy.high_low_budgets(k, sensitive, epsilon)``: ε on the rows of A, +inf on
    the others). The error grows like ``s²/ε² + k/ε`` users (Theorem 3) instead of ``k²/ε²``
    under plain ε-LDP: a few sensitive values among many cost little.

    Layout. ``s = len(sensitive)``, ``t = k - s``, ``S = 2**ceil(log2(s + 1))``
    (:attr:`hadamard_size`; 1 when s = 0). The sensitive values are relabelled
    ``a = 0 … s-1`` in increasing order of value (``sensitive[a]`` after sorting; the spec
    stores them sorted), the other values ``u = 0 … t-1`` likewise. Reports are integers in
    ``[0, S + t)`` (:attr:`output_size`, ``S + t <= 2k``), as the smallest unsigned dtype:

    * ``[0, S)``: the *Hadamard part*, shared by every value;
    * ``S + u``: the *dedicated slot* of the u-th non-sensitive value (reported only by it).

    Channel (:meth:`channel_matrix`, shape ``(k, S + t)``). Sensitive a: with probability
    ``ρ ≈ e^ε/(e^ε + 1)`` a uniform element of ``C_a = {y < S : H_S(a + 1, y) = +1}`` (row
    a + 1 of the Sylvester matrix, ``H(r, c) = (-1)**popcount(r & c)``; the paper's eq. (13)
    prints row x, which this project corrects), else a uniform element of the rest of the
    Hadamard part. Non-sensitive u: its slot ``S + u`` with probability
    ``q ≈ (e^ε - 1)/(e^ε + 1)``, else a uniform element of the Hadamard part. ``ρ`` and ``q``
    are the doubles rounded *down* (8 ulps) and drawn exactly (``_core`` ``probabilities()``
    gives them as realized), so the realized budgets never exceed ε:
    ``ln(ρ/(1 - ρ))`` between two sensitive values, ``ln(2ρ/(1 - q))`` from a sensitive to a
    non-sensitive value, +inf elsewhere (:meth:`realized_budgets`, in closed form, without
    the channel); :attr:`realized_epsilon` is the largest finite one.

    Estimator (``decoder="raw"``; every decoder of :mod:`ldpdist.decoders` applies), from the
    histogram N of n reports with the realized probabilities:
    ``p̂_a = (H_S N[:S])[a + 1] / (n (2ρ - 1))`` (one fast Walsh–Hadamard transform of length
    S) and ``p̂_u = N[S + u] / (n q)``; both exactly unbiased, with variances
    ``(c_A² p([S]) - p_a²)/n`` and ``(c_N p_u - p_u²)/n``, ``c_A = 1/(2ρ - 1)``,
    ``c_N = 1/q`` (the paper's ``c = (e^ε + 1)/(e^ε - 1)`` before rounding) and
    ``p([S]) = P(A) + (1 - q)(1 - P(A))`` the probability of a report in the Hadamard part
    (:meth:`estimator_variance`). So ``E||p̂ - p||_1 <= s c_A/sqrt(n) + sqrt(c_N t/n)``
    (:meth:`l1_bound`), within the paper's ``sqrt(3 s² c²/n) + sqrt(c k/n)`` (bound (19)). Decoding costs
    ``O(n + S log S + k)``; :meth:`simulate` is exact in law and costs no work per user.

    Edge cases: with every value sensitive (``t = 0``) this is the high-privacy Hadamard
    Response (``HadamardResponse(k, epsilon, blocks=1)``: the same reports and channel). With
    no sensitive value (``sensitive=[]``) High-Low LDP constrains nothing; the construction is
    kept as for every A (S = 1: a user reports ``1 + u`` with probability q, else 0), so
    nothing about the non-sensitive values changes in kind when A becomes empty, and
    :attr:`realized_epsilon` is then ``ln(2ρ/(1 - q))``, what a sensitive value would get.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy budget ε > 0 of the sensitive values (natural log).
    sensitive : array_like of int
        The sensitive values A: distinct integers in [0, k), in any order (a list, a tuple
        or a 1-D integer array; empty for none).

    Examples
    --------
    Geolocation: 10 000 map cells, of which the cells of clinics and shelters are sensitive.

    >>> cells = np.arange(0, 10_000, 50)                       # 200 sensitive cells
    >>> mech = HighLowHadamardResponse(k=10_000, epsilon=1.0, sensitive=cells)
    >>> mech.hadamard_size, mech.output_size                   # S = 256, S + t
    (256, 10056)
    >>> reports = mech.privatize(np.random.default_rng(1).integers(0, 10_000, 50_000), seed=7)
    >>> mech.estimate(reports, "project").shape
    (10000,)

    Search queries: of the k most frequent queries, the medical ones are sensitive;
    ``mech.budgets()`` is the promise and ``ldpdist.privacy.verify(mech.channel_matrix(),
    mech.budgets())`` checks it exactly on small k.
    """

    _core_class = _core.HighLowHadamardResponse
    context_aware = True

    def __init__(self, k: int, epsilon: float, sensitive: Any):
        k = integer(k, "k", minimum=2, maximum=2**32)
        values = np.sort(privacy._sensitive_set(k, sensitive))
        values.flags.writeable = False
        self._sensitive = values
        super().__init__(k, epsilon)

    def _make_core(self) -> Any:
        return self._core_class(self._k, self._epsilon, self._sensitive.astype(np.uint64))

    def _params(self) -> Dict[str, Any]:
        return {**super()._params(), "sensitive": self._sensitive.tolist()}

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._k, self._epsilon, self._sensitive.tobytes()))

    def __repr__(self) -> str:
        values = self._sensitive.tolist()
        if len(values) > 8:
            shown = (", ".join(map(str, values[:3])) + ", …, " + str(values[-1])
                     + f"] ({len(values)} values")
            return (f"{type(self).__name__}(k={self._k!r}, epsilon={self._epsilon!r}, "
                    f"sensitive=[{shown})")
        return f"{type(self).__name__}(k={self._k!r}, epsilon={self._epsilon!r}, sensitive={values!r})"

    # -- parameters --------------------------------------------------------------------

    @property
    def sensitive(self) -> np.ndarray:
        """The sensitive values, sorted (read-only int64 array); the a-th is relabelled a."""
        return self._sensitive

    @property
    def hadamard_size(self) -> int:
        """S = 2**ceil(log2(s + 1)): reports in [0, S) form the Hadamard part."""
        return int(self._core.shape[2])

    @property
    def layout(self) -> Tuple[int, int, int]:
        """``(s, t, S)``: sensitive values, other values, size of the Hadamard part; reports
        lie in ``[0, S + t)``."""
        return tuple(int(v) for v in self._core.shape)  # type: ignore[return-value]

    # -- accuracy --------------------------------------------------------------------------

    def _scales(self) -> Tuple[float, float]:
        """``(c_A, c_N) = (1/(2ρ - 1), 1/q)`` for the realized ρ and q."""
        rho, q = (float(v) for v in self._core.probabilities())
        return 1.0 / (2.0 * rho - 1.0), 1.0 / q

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Exact variance of each coordinate of the raw (unbiased) estimate, for n users
        drawn i.i.d. from ``p`` (see :meth:`Mechanism.estimator_variance` for the
        parameters and errors).

        A report in the Hadamard part contributes ``±c_A`` to the estimate of every
        sensitive value (the sign of its Hadamard row) and any other report 0; the dedicated
        slot of a non-sensitive value u contributes ``c_N`` to ``p̂_u`` and is reported with
        probability ``q p_u``. Hence ``Var(p̂_a) = (c_A² p([S]) - p_a²)/n`` and
        ``Var(p̂_u) = (c_N p_u - p_u²)/n``, with ``c_A = 1/(2ρ - 1)``, ``c_N = 1/q``
        (realized) and ``p([S]) = P(A) + (1 - q)(1 - P(A))``.

        Returns
        -------
        ndarray of float64, shape (k,)
        """
        p, n = self._variance_arguments(p, n)
        c_a, c_n = self._scales()
        _, q = (float(v) for v in self._core.probabilities())
        sensitive = np.zeros(self._k, dtype=bool)
        sensitive[self._sensitive] = True
        mass = float(np.sum(p[sensitive]))
        hadamard = mass + (1.0 - q) * float(np.sum(p[~sensitive]))
        return (np.where(sensitive, c_a * c_a * hadamard, c_n * p) - p * p) / n

    def l1_bound(self, n: int) -> float:
        """A bound on the expected ℓ1 error of the raw estimate from n reports, for every
        distribution: ``s c_A / sqrt(n) + sqrt(c_N t / n)`` (realized ``c_A``, ``c_N``, see
        :meth:`estimator_variance`).

        Derivation (as for the Block HR bound, eq. (24) of the paper): by Jensen,
        ``E|p̂_x - p_x| <= sqrt(Var(p̂_x))``. Each of the s sensitive values has
        ``Var <= c_A²/n`` (a probability ``p([S]) <= 1``), so they add at most
        ``s c_A / sqrt(n)``. The t others have ``Var(p̂_u) <= c_N p_u / n``, and by
        Cauchy–Schwarz ``Σ_u sqrt(p_u) <= sqrt(t Σ_u p_u) <= sqrt(t)``, so they add at most
        ``sqrt(c_N t / n)``. It is never above the paper's bound (19),
        ``sqrt(3 s² c²/n) + sqrt(c k/n)`` (with ``c_A``, ``c_N`` for c), whose first term
        allows for the paper's two-part estimator of the sensitive values; this estimator
        computes them with one transform.

        Parameters
        ----------
        n : int
            Number of reports, at least 1.

        Returns
        -------
        float
        """
        n = integer(n, "n", minimum=1)
        s, t, _ = self.layout
        c_a, c_n = self._scales()
        return s * c_a / math.sqrt(n) + math.sqrt(c_n * t / n)

    # -- context-aware privacy -----------------------------------------------------------

    def budgets(self) -> np.ndarray:
        """The promise, ``privacy.high_low_budgets(k, sensitive, epsilon)``: ε on the rows of
        the sensitive values, +inf on the others, 0 on the diagonal. (k, k) float64."""
        return privacy.high_low_budgets(self._k, self._sensitive, self._epsilon)

    def realized_budgets(self, max_entries: int = 2**24) -> np.ndarray:
        """The exact budget matrix of the channel used, in closed form (never builds the
        channel, so it works for any k the memory guard allows for a k × k matrix;
        ``max_entries`` is accepted for the interface and not needed): row x in A holds
        ``ln(ρ/(1 - ρ))`` against the other sensitive values and ``ln(2ρ/(1 - q))`` against
        the non-sensitive ones; the rows of the other values are +inf off the diagonal.
        Equal to ``privacy.realized_budgets(self.channel_matrix())``."""
        integer(max_entries, "max_entries", minimum=1)
        both, cross = (float(v) for v in self._core.pair_budgets())
        E = privacy._budget_matrix(self._k, "HighLowHadamardResponse.realized_budgets")
        E.fill(math.inf)
        A = self._sensitive
        E[A, :] = cross
        E[np.ix_(A, A)] = both
        np.fill_diagonal(E, 0.0)
        return E
