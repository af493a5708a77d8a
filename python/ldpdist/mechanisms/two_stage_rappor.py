"""Two-stage RAPPOR: sparse estimation with RAPPOR reports (Acharya, Kairouz, Liu & Sun
2021, Appendix C, Algorithm 2)."""

from __future__ import annotations

from typing import Any, ClassVar, Optional, Tuple

import numpy as np

from .. import _core, memory
from .._validation import integer, seed_key
from ..decoders import DECODERS, TWO_STAGE_DECODERS
from ..errors import IntegrityError
from ..reports import Reports
from ..specs import register
from .base import BitVectorMechanism, values_array


@register("tsrappor", "2-stage RAPPOR")
class TwoStageRAPPOR(BitVectorMechanism):
    """Two-stage RAPPOR for s-sparse distributions (Acharya, Kairouz, Liu & Sun 2021,
    "Estimating sparse discrete distributions under privacy and communication constraints",
    ALT 2021, Appendix C, Algorithm 2; see the docs page Mechanisms › Sparse estimation,
    docs/mechanisms/sparse.md).

    Every user sends basic one-time RAPPOR's message (:class:`RAPPOR`: the one-hot vector of
    x with each bit flipped w.p. ``f = 1 / (e^(ε/2) + 1)``). The users are split into two
    public *stages* by the server, independently of their values: stage 1 (selection) picks
    the ``2s`` values with the largest bit counts, stage 2 (estimation) estimates p on them.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0 (RAPPOR's accounting: the same f, the same
        :attr:`realized_epsilon`).

    Notes
    -----
    **Stages.**
    By default the user at position i of a :meth:`privatize` batch is in stage 1 if
    ``first_user + i`` is even and in stage 2 if it is odd (``first_user=0``: users 0, 2, 4,
    … select, 1, 3, 5, … estimate). Clients privatizing their own values pass their global
    position as ``first_user``; a server may assign stages explicitly with ``stages`` (an
    integer array of 1s and 2s, one per value). Either way the assignment must not depend on
    the users' values: the stage is public and not privatized.

    **Reports.**
    One row of ``ceil((k + 1) / 8)`` uint8 per user in ``numpy.packbits`` layout:
    ``np.unpackbits(reports, axis=1, count=k + 1)`` gives bits 0..k-1, the RAPPOR bits (equal
    to what :class:`RAPPOR` reports for the same seed and position), and bit k, the stage
    (0 = stage 1, 1 = stage 2). Padding bits are 0; rows with a padding bit set are
    malformed. :attr:`output_size` is k + 1 (bits per report), so reports files are
    self-describing and shards of any mix of stages aggregate and merge freely.

    **Aggregate.**
    ``aggregator().counts`` has ``2k + 1`` entries: the stage-1 bit counts ``M`` (k), the
    stage-2 bit counts ``N`` (k) and the number ``n2`` of stage-2 reports (``n1 = n - n2``).

    **Guarantee.**
    ε-LDP exactly as RAPPOR: the stage bit does not depend on x, so the channel of
    ``(bits, stage)`` has RAPPOR's likelihood ratios. :meth:`channel_matrix` (k × 2^(k+1),
    output o has bit j equal to ``(o >> j) & 1``, bit k the stage) shows a fair stage,
    ``Q(y, s | x) = Q_RAPPOR(y | x) / 2``.

    **Estimation.**
    ``decoder="two_stage"`` is Algorithm 2 (``sparsity=None`` chooses s by the noise-level
    rule on the stage-1 estimate, :func:`ldpdist.decoders.noise_level_sparsity`): T = the
    ``min(2s, k)`` values with the largest ``M(x)`` (ties broken towards the lowest index),
    then ``p(x) = (N(x)/n2 - β) / γ`` on T and 0 elsewhere, with ``β = f`` and
    ``γ = 1 - 2f = (e^(ε/2) - 1)/(e^(ε/2) + 1)`` for the realized f: unbiased given T. (The
    paper prints β = 1/(e^ε + 1), γ = (e^ε - 1)/(e^ε + 1), inconsistent with the ε/2 flip;
    those constants bias the estimate, see tests/test_two_stage_rappor.py.)
    ``"two_stage_project"`` projects it onto the s-sparse simplex. Both refuse an aggregate
    without stage-1 or stage-2 reports. The other decoders (``"raw"``, ``"normalize"``,
    ``"project"``, ``"sparse_project"``, ``"ibu"``) pool both stages exactly like RAPPOR
    (``M + N`` as RAPPOR's bit counts of n reports).

    :meth:`simulate` draws the aggregate of privatizing the users in a uniformly random order
    with alternating stages (stage 1 gets ``ceil(n/2)`` users), exactly in law: a
    hypergeometric split of each value's users between the stages, then RAPPOR's per-bit
    binomials per stage. O(k) draws whatever n.

    Examples
    --------
    >>> mech = TwoStageRAPPOR(k=10, epsilon=1.0)
    >>> reports = mech.privatize([3, 1, 4, 1, 5], seed=7)
    >>> reports.shape, (np.unpackbits(reports, axis=1)[:, 10]).tolist()
    ((5, 2), [0, 1, 0, 1, 0])
    >>> mech.estimate(reports, decoder="two_stage", sparsity=2).shape
    (10,)
    """

    _core_class = _core.TwoStageRappor
    decoders: ClassVar[Tuple[str, ...]] = DECODERS + TWO_STAGE_DECODERS

    @property
    def flip_probability(self) -> float:
        """f, the probability that each private bit is flipped (β of the two-stage
        estimate; γ = 1 - 2f)."""
        return float(self._core.flip_probability)

    def _frequency_oracle(self) -> Tuple[float, float]:
        """The raw estimate pools both stages as RAPPOR's (bit x of ``M + N`` counts the
        reports supporting x): ``(a, b) = (1 - f, f)`` as realized. The stage bit does not
        depend on the value, so the oracle is RAPPOR's whatever the stage split."""
        a, b = self._core.probabilities()
        return float(a), float(b)

    def privatize(self, values: Any, seed: Optional[int] = None, *, first_user: int = 0,
                  stages: Any = None) -> Reports:
        """Privatize one value per user (see the class documentation for the stages).

        Parameters
        ----------
        values : array_like of int, shape (n,)
            Integers in [0, k).
        seed : int, optional
            ``None`` (default) draws fresh OS entropy; an integer gives reproducible reports,
            bit-identical whatever the thread count.
        first_user : int, >= 0
            Global position of ``values[0]``: user i is in stage 2 iff ``first_user + i`` is
            odd.
        stages : array_like of int, shape (n,), optional
            Explicit stages, 1 (selection) or 2 (estimation) per value; replaces the
            alternation (passing both ``stages`` and a nonzero ``first_user`` is an error).

        Returns
        -------
        Reports of uint8, shape (n, ceil((k + 1) / 8))
            Packed bit rows tagged with this spec's fingerprint (see
            :meth:`Mechanism.privatize`).
        """
        values = values_array(values, self._k)
        first_user = integer(first_user, "first_user", minimum=0)
        explicit = None
        if stages is not None:
            if first_user != 0:
                raise ValueError("pass either first_user (alternating stages) or stages "
                                 "(explicit), not both")
            explicit = _stages_array(stages, values.size)
        return self._reports(self._core.privatize_stages(values, seed_key(seed),
                                                         first_user % 2, explicit))

    def _two_stage_estimate(self, counts: np.ndarray, n: int, sparsity: int) -> np.ndarray:
        """Algorithm 2's estimate from the aggregate (``decoders.py`` calls it)."""
        counts = np.ascontiguousarray(counts, dtype=np.uint64)
        return self._core.two_stage_estimate(counts, int(n), int(sparsity))

    def _first_stage_raw(self, counts: np.ndarray, n: int) -> np.ndarray:
        """The stage-1 users' unbiased estimate ``(M/n1 - f)/(1 - 2f)``: what the
        noise-level rule reads when the two-stage decoders get no sparsity."""
        first = int(n) - int(counts[2 * self._k])
        if first <= 0:
            raise ValueError("the two-stage decoders need stage-1 reports (there are none)")
        f = self.flip_probability
        return (np.asarray(counts[:self._k], dtype=np.float64) / first - f) / (1.0 - 2.0 * f)

    def _check_counts(self, counts: np.ndarray, n: int) -> None:
        k = self._k
        second = int(counts[2 * k])
        if second > n:
            raise IntegrityError(f"corrupt aggregator: {second} stage-2 reports of n = {n}")
        for name, part, bound in (("stage-1", counts[:k], n - second),
                                  ("stage-2", counts[k:2 * k], second)):
            if part.size and int(part.max()) > bound:
                raise IntegrityError(f"corrupt aggregator: a {name} bit count exceeds the "
                                     f"{bound} {name} reports")


def _stages_array(stages: Any, size: int) -> np.ndarray:
    """Explicit stages: 1-D integers, one per value, each 1 or 2; returned as uint8."""
    if isinstance(stages, (list, tuple)):
        for i, stage in enumerate(stages):
            if isinstance(stage, (bool, np.bool_)):
                raise TypeError(f"stages must be integers (1 or 2), not booleans: "
                                f"stages[{i}] = {stage!r}")
    array = stages if isinstance(stages, np.ndarray) else np.asarray(stages)
    if array.dtype.kind not in "iu":
        if not (array.size == 0 and array.dtype == np.float64
                and not isinstance(stages, np.ndarray)):
            raise TypeError(f"stages must be integers (1 or 2), got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"stages must be one-dimensional, got shape {array.shape}")
    if array.size != size:
        raise ValueError(f"stages must have one entry per value: got {array.size} for "
                         f"{size} values")
    bad = (array != 1) & (array != 2)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"stages must be 1 (selection) or 2 (estimation): "
                         f"stages[{i}] = {array[i]}")
    if array.dtype != np.uint8 or not array.flags.c_contiguous:
        memory.check("privatize", [("the stages as uint8", array.size)])
    return np.ascontiguousarray(array, dtype=np.uint8)
