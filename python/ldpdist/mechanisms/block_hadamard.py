"""Block Hadamard Response: block-structured LDP (context-aware LDP paper, Section 6.1)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Union

import numpy as np

from .. import _core, memory, privacy
from .._validation import integer
from ..reports import ReportBatch, Reports, check_reports
from ..specs import register
from .base import Mechanism

# Entries of a partition shown in a repr before it is abbreviated.
_SHOWN_BLOCKS = 12


@register("bhr", "Block HR")
class BlockHadamardResponse(Mechanism):
    """Block Hadamard Response (Acharya, Kairouz, Liu & Sun 2020, "Context-aware local
    differential privacy", Section 6.1): distribution estimation under (P, ε)-block-structured
    LDP. The values are partitioned into blocks (e.g. locations into cities); two values of
    one block are ε-indistinguishable, while the block itself is **not protected**: it is sent
    in the clear. With m equal blocks the error is about √m times below plain ε-LDP
    (Theorem 4: n = Θ(Σ k_j² / (α² ε²)) users instead of k²/(α² ε²)).

    Parameters
    ----------
    blocks : sequence of int
        The partition P, either as **block sizes** ``[k_0, k_1, …]`` (each ≥ 1: block j holds
        the next ``k_j`` values, in order) or as **labels**, one per value (``blocks[x]`` =
        the block of x, labels 0..m−1 each used; blocks need not be contiguous). The two
        cannot be confused: labels always contain a 0, sizes never do
        (:func:`ldpdist.privacy.block_labels`). ``k = Σ k_j`` (or the number of labels) must
        be at least 2.
    epsilon : float
        The budget between two values of one block (ε > 0, natural log).
    k : int, optional
        If given, checked against the partition (it must cover exactly [0, k)).

    Notes
    -----
    **Output layout.**
    Block j of ``k_j`` values owns ``K_j`` consecutive outputs starting at
    ``block_offsets[j] = Σ_{l<j} K_l``: ``K_j = 2**ceil(log2(k_j + 1))`` when ``k_j ≥ 2``,
    and ``K_j = 1`` for a singleton block. A report is one integer ``offset_j + c`` in
    ``[0, output_size)``, ``output_size = Σ K_j ≤ 2k`` (smallest unsigned dtype): the block
    in the clear, then Hadamard Response inside it. The i-th value of block j (in increasing
    order) uses row i + 1 of the Sylvester matrix ``H_{K_j}``
    (``H(r, c) = (-1)**popcount(r & c)``); its own set is ``S_x = {c : H(i+1, c) = +1}``.

    Channel (eq. (20)), with the realized flip probability ``q`` (the float of
    ``1/(e^ε + 1)``, rounded *up* by 8 ulps so that ``(1 - q)/q < e^ε``; ``1 - q`` is exact):

    * ``k_j ≥ 2``: ``Q(offset_j + c | x) = (1 - q)/(K_j/2)`` for c in S_x, ``q/(K_j/2)`` for
      the other c < K_j, 0 outside block j;
    * singleton block: ``Q(offset_j | x) = 1``. BSLDP constrains nothing inside a singleton,
      so its value is reported without noise (the paper's ``K_j = 2`` would add noise that
      protects nothing): a value alone in its block is **disclosed**.

    Sampling is exact (one 64-bit word per report; a value → (block, index) table built
    once, 8 bytes per value), parallel and reproducible: an integer seed gives bit-identical
    reports whatever the thread count.

    Privacy accounting (context-aware, :mod:`ldpdist.privacy`): :meth:`budgets` is
    ``block_budgets(blocks, epsilon)`` (ε inside a block, +inf across blocks);
    :attr:`realized_epsilon` is ``ln((1 - q)/q) ≤ ε``, the exact budget the channel realizes
    between two values of one block (below ε by about ``2**-46 * max(ε, 1)``), and :meth:`realized_budgets` the
    exact budget matrix, in closed form. A partition whose blocks are *all* singletons is
    refused (``ValueError``): no pair of values would be constrained, there would be no
    realized ε, and the reports would be the values themselves.

    Estimation (eqs. (22)–(23)): with ``N_j`` the report counts of block j,
    ``p̂_(j,i) = c (H_{K_j} N_j)_{i+1} / n`` with ``c = 1/(1 - 2q)``
    (= (e^ε + 1)/(e^ε - 1)), one FWHT per block (equal-sized blocks batched), and
    ``N_{offset_j}/n`` for a singleton: exactly unbiased for the realized channel. Variance
    ``(c² p(block j) - p_x²)/n`` (:meth:`estimator_variance`); eq. (24):
    ``E‖p̂ - p‖₁ ≤ 2c √(3 Σ k_j² / n)`` (:meth:`l1_bound`). Every decoder applies
    (``"raw"``, ``"normalize"``, ``"project"`` (default), ``"sparse_project"``, ``"ibu"``:
    exact maximum likelihood, channel products by one FWHT per block).

    ``simulate`` draws the aggregate exactly in law at a cost independent of n (per block:
    own sets value by value or by HR's Hadamard passes, uniform users by recursive halving).

    Spec: ``{"mechanism": "BlockHadamardResponse", "blocks": …, "epsilon": …}`` with
    ``blocks`` the sizes when the blocks are contiguous and in order (any label array of
    such a partition gives the same spec and fingerprint), else the labels.

    Examples
    --------
    Geolocation: the city is not secret, the place inside the city is. Three cities with 3, 5
    and 2 places; place ids 0–2 are in city 0, 3–7 in city 1, 8–9 in city 2:

    >>> mech = BlockHadamardResponse([3, 5, 2], epsilon=1.0)
    >>> mech.k, mech.output_size, mech.block_offsets.tolist()
    (10, 16, [0, 4, 12])
    >>> reports = mech.privatize([0, 4, 4, 9], seed=7)
    >>> mech.split_reports(reports)[0].tolist()          # the cities travel in the clear
    [0, 1, 1, 2]
    >>> p_hat = mech.estimate(mech.privatize(np.arange(10).repeat(100), seed=1))
    >>> p_hat.shape
    (10,)
    """

    _core_class = _core.BlockHadamardResponse
    context_aware = True

    def __init__(self, blocks: Any, epsilon: float, *, k: Optional[int] = None):
        if k is not None:
            k = integer(k, "k", minimum=2, maximum=2**32)
        # The checks of privacy.block_labels; labels are kept only for a partition that is
        # not contiguous (a contiguous one is its sizes: no array of k labels is held).
        sizes, labels = privacy._partition(blocks, k)
        total = int(sizes.sum())
        if total < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 values (k = the number "
                             f"of values of the partition), got k = {total}")
        if labels is not None:
            memory.check(type(self).__name__, [("the labels as uint32 and a contiguity mask",
                                                5 * labels.size)])
            if (labels[1:] >= labels[:-1]).all():
                labels = None
            else:
                labels.setflags(write=False)
        self._labels = labels
        self._contiguous = labels is None
        self._sizes = sizes
        self._sizes.setflags(write=False)
        self._spec_blocks: List[int] = (sizes if labels is None else labels).tolist()
        super().__init__(total, epsilon)

    def _make_core(self) -> Any:
        if self._labels is None:
            return self._core_class(self._epsilon, sizes=self._sizes.astype(np.uint64))
        return self._core_class(self._epsilon, labels=self._labels.astype(np.uint32))

    def _params(self) -> Dict[str, Any]:
        return {"blocks": self._spec_blocks, "epsilon": self._epsilon}

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._epsilon, tuple(self._spec_blocks)))

    def __repr__(self) -> str:
        blocks = self._spec_blocks
        if len(blocks) > _SHOWN_BLOCKS:
            kind = "sizes" if self._contiguous else "labels"
            head = ", ".join(str(v) for v in blocks[:_SHOWN_BLOCKS - 2])
            shown = f"[{head}, …, {blocks[-1]}] ({len(blocks)} {kind})"
        else:
            shown = repr(blocks)
        return f"{type(self).__name__}(blocks={shown}, epsilon={self._epsilon!r})"

    # -- the partition and the layout ------------------------------------------------------

    @property
    def labels(self) -> np.ndarray:
        """The block of every value: int64 array of shape (k,), labels 0..m−1 (read-only;
        built on each call for a contiguous partition, which holds only its sizes)."""
        if self._labels is not None:
            return self._labels
        memory.check("BlockHadamardResponse.labels", [("one label per value", 8 * self._k)])
        labels = np.repeat(np.arange(self._sizes.size, dtype=np.int64), self._sizes)
        labels.setflags(write=False)
        return labels

    @property
    def block_sizes(self) -> np.ndarray:
        """``k_j``, the number of values of each block: int64 array of shape (m,)."""
        return self._sizes

    @property
    def num_blocks(self) -> int:
        """m, the number of blocks."""
        return int(self._sizes.size)

    @property
    def contiguous(self) -> bool:
        """Whether every block is a run of consecutive values, in block order (the spec then
        holds the sizes)."""
        return self._contiguous

    @property
    def block_offsets(self) -> np.ndarray:
        """The first output of each block: uint64 array of shape (m,)."""
        return self._core.layout()[0]

    @property
    def block_outputs(self) -> np.ndarray:
        """``K_j``, the outputs of each block (1 for a singleton): uint64 array (m,)."""
        return self._core.layout()[1]

    def split_reports(self, reports: Union[Reports, ReportBatch]
                      ) -> "tuple[np.ndarray, np.ndarray]":
        """``(block, c)`` of every report: the block sent in the clear (int64) and the
        position in the block (``report - block_offsets[block]``, uint64).

        ``reports`` are :class:`~ldpdist.Reports` of this spec (:meth:`privatize` output, a
        :class:`~ldpdist.ReportBatch`, or declared with :meth:`as_reports`), as for
        :meth:`estimate`."""
        array = check_reports(self, reports, "BlockHadamardResponse.split_reports"
                              ).view(np.ndarray)
        if array.dtype.kind not in "iu" or array.ndim != 1:
            raise TypeError("reports must be a 1-D integer array")
        offsets = self.block_offsets
        if array.size and (array.min() < 0 or array.max() >= self.output_size):
            raise ValueError(f"reports must lie in [0, {self.output_size})")
        block = np.searchsorted(offsets, array.astype(np.uint64), side="right") - 1
        return block.astype(np.int64), array.astype(np.uint64) - offsets[block]

    # -- privacy ---------------------------------------------------------------------------

    def budgets(self) -> np.ndarray:
        """``privacy.block_budgets(labels, epsilon)``: ε between distinct values of one
        block, +inf across blocks, 0 on the diagonal. Shape (k, k)."""
        return privacy.block_budgets(self.labels, self._epsilon)

    def realized_budgets(self, max_entries: Optional[int] = None) -> np.ndarray:
        """The exact budget matrix of the channel used, in closed form (no channel matrix):
        :attr:`realized_epsilon` between distinct values of one block, +inf across blocks
        (an output of one block is impossible from another), 0 on the diagonal. Shape (k, k),
        checked against the memory budget; ``max_entries`` (the channel's limit in the base
        class) is not used."""
        k = self._k
        memory.check("BlockHadamardResponse.realized_budgets",
                     [("the k × k budget matrix and a comparison mask", 9 * k * k)])
        realized = self.realized_epsilon
        labels = self.labels
        E = np.where(labels[:, None] == labels[None, :], realized, math.inf)
        np.fill_diagonal(E, 0.0)
        return E

    # -- accuracy --------------------------------------------------------------------------

    @property
    def _c(self) -> float:
        """``1/(1 - 2q)``, (e^ε + 1)/(e^ε − 1) for the realized q."""
        q = float(self._core.probabilities()[1])
        return 1.0 / (1.0 - 2.0 * q)

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Exact variance of each coordinate of the raw (unbiased) estimate, for n users
        drawn i.i.d. from ``p`` (see :meth:`Mechanism.estimator_variance` for the
        parameters and errors): ``(c² p(block j) − p_x²)/n``, ``p_x (1 − p_x)/n`` in a
        singleton block (every report of block j contributes ``±c`` to ``p̂_x``, c for the
        realized q).

        Returns
        -------
        ndarray of float64, shape (k,)
        """
        p, n = self._variance_arguments(p, n)
        labels = self.labels
        mass = np.bincount(labels, weights=p, minlength=self.num_blocks)[labels]
        singleton = self._sizes[labels] == 1
        second = np.where(singleton, p, self._c ** 2 * mass)
        return (second - p * p) / n

    def l1_bound(self, n: int) -> float:
        """Eq. (24): ``2c √(3 Σ k_j² / n)``, a bound on the expected ℓ1 error of the raw
        estimate from n reports (c for the realized q)."""
        n = integer(n, "n", minimum=1)
        squares = float(np.sum(self._sizes.astype(np.float64) ** 2))
        return 2.0 * self._c * math.sqrt(3.0 * squares / n)
