"""Compressive privatization: sparse distribution estimation through a seeded ±1 matrix."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from .. import _core
from .._validation import integer, one_of, seed_key, shown
from ..consistency import noise_model
from ..decoders import DECODERS, NOISE_DECODERS, finish
from ..reports import ReportBatch, Reports
from ..specs import register
from .base import Mechanism

MATRIX_KINDS = ("balanced", "rademacher", "hadamard")
REGIMES = ("auto", "high", "medium")
MODELS = ("exact", "paper")


class SparseRecovery(NamedTuple):
    """Diagnostics of one compressive estimate (:meth:`CompressivePrivatization.recover`)."""

    raw: np.ndarray
    """The recovered p̂' of shape (k,), before any simplex decoder."""
    support: List[int]
    """Values chosen by OMP, in order."""
    residual_norm: float
    """Final OMP residual, in the units of the model's target."""
    noise_level: float
    """Noise level the sample size implies, in the same units (the stopping rule)."""
    stop: str
    """Why OMP stopped (see :class:`ldpdist.kernels.OmpResult`)."""


@register("cp")
class CompressivePrivatization(Mechanism):
    """Compressive privatization (Xiong, Huang, Mao, Wang & Ying, "Compressive Privatization:
    Sparse Distribution Estimation under Locally Differential Privacy", arXiv:2012.02081,
    2020; see the docs page Mechanisms › Compressive privatization,
    docs/mechanisms/compressive.md).

    Users privatize into ``[0, m)`` with ``m << k`` through a public ±1 matrix A (m × k)
    generated from ``seed``: with ``C_x = {y : A[y, x] = +1}``, ``n_x = |C_x|`` and
    ``Z_x = n_x e^ε + m - n_x``, a user holding x reports ``y`` with probability ``e^ε/Z_x``
    if ``y ∈ C_x`` and ``1/Z_x`` otherwise (eq. 2). A client needs only its own column of A
    (``ldpdist.kernels.sign_column``), never the matrix. The server estimates the report
    distribution q̂ and recovers the sparse p with orthogonal matching pursuit.

    Parameters
    ----------
    k : int
        Number of possible values.
    epsilon : float
        Privacy parameter ε > 0.
    m : int
        Number of possible reports, ``2 <= m < k``.
    seed : int
        Public seed of A (part of :meth:`to_dict`, so clients and server share A).
    matrix : {"balanced", "rademacher", "hadamard"}
        ``"balanced"`` (default): every column has exactly ``m/2`` ones (high privacy; m must
        be even) or ``round(m e^{-ε})`` ones (medium privacy), so every ``Z_x`` is equal and
        the channel is exactly ε-LDP. ``"rademacher"``: the paper's i.i.d. matrix, whose
        realized guarantee is ``ε' + ln(max Z / min Z)``. ``"hadamard"``: the structured
        matrix for large k (see below): nothing of size m × k is ever stored, columns are
        balanced to exactly ``m/2`` ones (exact ε; m even; high-privacy construction only).
    regime : {"auto", "high", "medium"}
        High privacy uses P(+1) = 1/2; medium privacy (Section 4; ``1 < ε <= ln m``)
        P(+1) = e^{-ε}. ``"auto"`` picks by ε (always high for ``matrix="hadamard"``,
        which has no medium-privacy form: ``regime="medium"`` is refused there).
    calibrate : bool, default True
        For the i.i.d. matrix, lower the internal ε (bisection) so that ``realized_epsilon <=
        epsilon``. With ``False`` the internal ε is ε, the realized value is reported, and a
        warning says when it exceeds the request. No effect on ``"balanced"`` and
        ``"hadamard"``, whose channels are exactly ε-LDP as they are.

    Notes
    -----
    Estimation (:meth:`estimate`, ``model="exact"``, default): eq. (3) holds for every ±1
    matrix, ``q = c·1 + A w`` with ``w_x = p_x (a_x - b_x)/2`` for the realized
    probabilities ``a_x = e^ε/Z_x``, ``b_x = 1/Z_x``; OMP fits w with the all-ones vector
    as a free atom (``kernels.omp(..., intercept=True)``), so no approximation is made in
    either regime. ``model="paper"`` is Algorithm 1 as printed (high privacy only). With
    ``sparsity=None`` OMP stops when the residual reaches the noise level of n reports.
    """

    #: IBU is not offered: OMP's recovery replaces it.
    decoders: ClassVar[Tuple[str, ...]] = tuple(d for d in DECODERS if d != "ibu")

    def __init__(self, k: int, epsilon: float, m: int, seed: int, matrix: str = "balanced",
                 regime: str = "auto", calibrate: bool = True):
        self._m = integer(m, "m", minimum=2, maximum=2**31 - 1)
        if seed is None:
            raise TypeError("seed is the public seed of the matrix and must be an integer")
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        one_of(matrix, MATRIX_KINDS, "matrix")
        one_of(regime, REGIMES, "regime")
        if not isinstance(calibrate, (bool, np.bool_)):
            raise TypeError(f"calibrate must be a bool, got {shown(calibrate)}")
        if matrix == "hadamard" and regime == "medium":
            raise ValueError("matrix='hadamard' has the high-privacy construction only (columns "
                             "of m/2 ones); use regime='auto' or 'high', or matrix='balanced' "
                             "for the medium-privacy regime")
        self._matrix, self._regime, self._calibrate = matrix, regime, bool(calibrate)
        super().__init__(k, epsilon)
        if self.realized_epsilon > self.epsilon:
            warnings.warn(
                f"the i.i.d. matrix makes this channel {self.realized_epsilon:.6g}-LDP, above "
                f"the requested epsilon = {self.epsilon:g} (calibrate=False); use "
                "calibrate=True or matrix='balanced' for an exact guarantee",
                UserWarning, stacklevel=2)

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Not available: the raw estimate is orthogonal matching pursuit's recovery from
        ``m < k`` report frequencies, neither linear in the reports nor unbiased, so it has
        no closed-form variance. Always raises ``NotImplementedError``."""
        raise NotImplementedError(
            "CompressivePrivatization has no estimator_variance: its raw estimate (sparse "
            "recovery by orthogonal matching pursuit) is neither linear nor unbiased")

    def _checks_realized_epsilon(self) -> bool:
        # calibrate=False with the i.i.d. matrix is the one explicit opt-out: its realized ε
        # may exceed the request, and __init__ warns with the value.
        return self._calibrate or self._matrix != "rademacher"

    def _make_core(self) -> Any:
        if self._matrix == "hadamard":
            return _core.HadamardCompressivePrivatization(self._k, self._epsilon, self._m,
                                                          seed_key(self._seed))
        return _core.CompressivePrivatization(self._k, self._epsilon, self._m,
                                              seed_key(self._seed), self._matrix,
                                              self._regime, self._calibrate)

    def _params(self) -> Dict[str, Any]:
        return {"k": self._k, "epsilon": self._epsilon, "m": self._m, "seed": self._seed,
                "matrix": self._matrix, "regime": self._regime, "calibrate": self._calibrate}

    @property
    def m(self) -> int:
        """Number of possible reports."""
        return self._m

    @property
    def seed(self) -> int:
        """Public seed of the matrix A."""
        return self._seed

    @property
    def internal_epsilon(self) -> float:
        """The ε used inside the channel (below ``epsilon`` when calibrated)."""
        return float(self._core.internal_epsilon)

    @property
    def regime_used(self) -> str:
        """``"high"`` or ``"medium"`` (resolves ``regime="auto"``)."""
        return str(self._core.regime)

    def sign_matrix(self):
        """The public matrix as a :class:`ldpdist.kernels.SignMatrix` (bit-packed): what a
        client's :func:`ldpdist.kernels.sign_column` reproduces column by column. Not for
        ``matrix="hadamard"``, which is never stored: use :meth:`column`."""
        from ..kernels import SignMatrix

        if self._matrix == "hadamard":
            raise ValueError("matrix='hadamard' is never stored as a sign matrix; use "
                             "column(x) for one column")
        kind, p = self._core.sign_kind
        return SignMatrix(self._seed, self._m, self._k, kind, p)

    def column(self, x: int) -> np.ndarray:
        """Column x of A as ±1 (int8, shape (m,)): all a client holding x needs (O(m))."""
        x = integer(x, "x", minimum=0, maximum=self._k - 1)
        if self._matrix == "hadamard":
            return self._core.column(x)
        from ..kernels import sign_column

        kind, p = self._core.sign_kind
        return sign_column(self._seed, self._m, x, kind=kind, p=p)

    def recover(self, counts: np.ndarray, n: int, sparsity: Optional[int] = None,
                model: str = "exact") -> SparseRecovery:
        """Sparse recovery from aggregated counts, with diagnostics."""
        one_of(model, MODELS, "model")
        if n <= 0:
            raise ValueError("there are no reports to estimate from (n = 0)")
        if sparsity is not None:
            sparsity = integer(sparsity, "sparsity", minimum=1, maximum=min(self._m - 1, self._k))
        freq = np.asarray(counts, dtype=np.float64) / float(n)
        raw, support, residual, noise, stop = self._core.estimate_sparse(freq, n, sparsity, model)
        return SparseRecovery(raw, list(support), float(residual), float(noise), str(stop))

    def estimate(self, reports: Union[Reports, ReportBatch], decoder: str = "project", *,
                 sparsity: Optional[int] = None, on_invalid: str = "raise",
                 model: str = "exact", **options: Any) -> np.ndarray:
        """Estimate p from reports (Algorithm 1).

        Parameters
        ----------
        reports : Reports or ReportBatch, shape (n,)
            Integers in [0, m): :meth:`privatize` output, a batch read with
            :func:`ldpdist.read_reports`, or reports made elsewhere declared with
            :meth:`as_reports`; a plain array raises ``TypeError`` and reports of another
            spec :class:`~ldpdist.SpecMismatchError` (see :meth:`Mechanism.estimate`).
        decoder : str, one of :attr:`decoders`
            Applied to the recovered p̂' (``"raw"`` returns it as is): ``"normalize"``,
            ``"project"``, ``"sparse_project"`` or the consistency family
            (:mod:`ldpdist.consistency`; the methods that need the noise read a constant
            level from p̂').
        sparsity : int, optional
            OMP atoms (the paper's s). ``None``: stop at the noise level of n reports.
        model : {"exact", "paper"}
            See the class notes.
        **options
            None: another keyword (e.g. ``max_iter``, an option of ``"ibu"``, which
            compressive privatization does not have) raises ``TypeError`` naming the
            options above (:func:`ldpdist.decoders.check_options`).

        Returns
        -------
        ndarray of float64, shape (k,)
        """
        reports = self._typed_reports(reports, f"{type(self).__name__}.estimate")
        aggregator = self.aggregator().add(reports, on_invalid=on_invalid)
        return aggregator.estimate(decoder, sparsity=sparsity, model=model, **options)

    def _decoder_options(self, decoder: str) -> Tuple[str, ...]:
        """OMP's sparsity and the estimation model, with every decoder."""
        return ("sparsity", "model")

    def _decode(self, counts: np.ndarray, n: int, decoder: str, *,
                sparsity: Optional[int] = None, model: str = "exact") -> np.ndarray:
        one_of(decoder, self.decoders, "decoder (compressive privatization)")
        recovery = self.recover(counts, n, sparsity, model)
        # no closed-form variance: the consistency decoders that need one read it from raw
        noise = (noise_model(self, n, recovery.raw) if decoder in NOISE_DECODERS else None)
        return finish(recovery.raw, decoder, sparsity or max(1, len(recovery.support)),
                      noise=noise)
