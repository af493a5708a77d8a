"""Server side of the memoized mechanisms: the aggregator (mergeable, checksummed sums with
batch ids) and the count-level simulation of a campaign of collections.

The aggregator is the heavy-hitter protocols' :class:`~ldpdist.heavy_hitters.SketchAggregator`
(the same typed-reports checks, batch ids, merging and checksummed state, read back by
:meth:`LongitudinalAggregator.from_bytes` or
:func:`ldpdist.heavy_hitters.aggregator_from_bytes`) holding each mechanism's sufficient
statistic as exact int64 sums:

================================  ===========================================================
mechanism                         sums
================================  ===========================================================
:class:`LongitudinalGRR`          the histogram of the reports (k)
unary encodings, RAPPOR           the number of reports with bit j set, per bit (k or m)
:class:`DBitFlipPM`               ``ones_v`` then ``sampled_v`` per bucket (2k)
================================  ===========================================================

:func:`simulate_campaign` draws the sums of T collections from the same users from their
exact joint law, without drawing per-user reports (except dBitFlipPM, whose buckets are
drawn per user, vectorized).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from .. import kernels
from .._validation import integer
from ..errors import IntegrityError
from ..heavy_hitters.protocol import SketchAggregator
from ..typed_reports import ReportBatch, Reports
from ..specs import canonical_json
from .base import LongitudinalMechanism

__all__ = ["LongitudinalAggregator", "CollectionMismatchError", "simulate_campaign"]


class CollectionMismatchError(ValueError):
    """Reports or a state of one collection would be counted into an aggregator of another
    collection of the same campaign (each collection is aggregated on its own)."""


def _collection(value: Any, what: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not 0 <= int(value) < 2**63:
        raise ValueError(f"{what} must be an integer in [0, 2^63), got {value!r:.80}")
    return int(value)


class LongitudinalAggregator(SketchAggregator):
    """Mergeable, serializable sums of a memoized mechanism's reports (one collection).

    Made by ``mechanism.aggregator()`` (or returned by
    :meth:`LongitudinalMechanism.simulate_campaign`). ``add(reports, *, batch_id=None,
    label="")`` counts :class:`~ldpdist.Reports` of the mechanism (or a
    :class:`~ldpdist.reports.ReportBatch` read from a reports file, which carries its own
    batch id); reports of another spec raise :class:`~ldpdist.SpecMismatchError`, a batch
    already counted :class:`~ldpdist.DuplicateBatchError`, a malformed report
    ``ValueError`` (or, with ``on_invalid="drop"``, is skipped and counted in
    :attr:`dropped`). :meth:`merge` adds another aggregator of the same spec (exactly the
    sums of one aggregator over both); :meth:`to_bytes` / :meth:`from_bytes` are the
    checksummed state (a corrupt state raises :class:`~ldpdist.IntegrityError`).

    Aggregate each collection separately: the estimator is that of one collection, whose
    users each send one report (merging two collections of the same users counts every
    user twice: the estimate is still unbiased, but the memoized answers are counted twice,
    so its error is not that of 2n users). An aggregator therefore takes the
    :attr:`collection` of the first batch that names one (``add(..., collection=t)``, or a
    reports file written with a collection, as ``ldpdist longitudinal privatize
    --collection`` does) and refuses reports or states of another collection
    (:class:`CollectionMismatchError`); the state records it.
    """

    _protocol_class = LongitudinalMechanism
    _protocol_noun = "longitudinal mechanism"
    _extra_fields = frozenset({"collection"})

    def __init__(self, mechanism: LongitudinalMechanism, collection: Optional[int] = None):
        super().__init__(mechanism)
        self._collection = _collection(collection, "collection")

    @property
    def collection(self) -> Optional[int]:
        """The collection counted (``None`` while no batch named one)."""
        return self._collection

    def _check_collection(self, collection: Optional[int], what: str) -> None:
        if collection is not None and self._collection is not None \
                and collection != self._collection:
            raise CollectionMismatchError(
                f"{what} belongs to collection {collection}, this aggregator counts collection "
                f"{self._collection}: aggregate each collection on its own (its users would "
                "otherwise be counted once per collection)")

    def add(self, reports: Union[Reports, ReportBatch], on_invalid: str = "raise", *,
            batch_id: Optional[str] = None, label: str = "",
            collection: Optional[int] = None) -> "LongitudinalAggregator":
        """Count a batch of reports (see the heavy-hitter aggregators' ``add``); returns
        ``self``. ``collection`` names the collection they belong to (a
        :class:`~ldpdist.reports.ReportBatch` read from a file may carry its own): one of
        another collection than :attr:`collection` raises :class:`CollectionMismatchError`
        and nothing is counted."""
        collection = _collection(collection, "collection")
        if isinstance(reports, ReportBatch) and reports.collection is not None:
            if collection is not None and collection != reports.collection:
                raise CollectionMismatchError(
                    f"the report batch {reports.label!r} belongs to collection "
                    f"{reports.collection}, not {collection}")
            collection = reports.collection
        if collection is None:
            super().add(reports, on_invalid, batch_id=batch_id, label=label)
            return self
        with self._lock:
            self._check_collection(collection, "the batch")
            super().add(reports, on_invalid, batch_id=batch_id, label=label)
            self._collection = collection
        return self

    def merge(self, other: "LongitudinalAggregator") -> "LongitudinalAggregator":  # type: ignore[override]
        """Add another aggregator's sums (same spec and, when both name one, same
        collection; see the heavy-hitter aggregators' ``merge``). Returns self."""
        theirs = getattr(other, "_collection", None)
        if theirs is None:
            super().merge(other)
            return self
        with self._lock:
            self._check_collection(theirs, "what is merged")
            super().merge(other)
            self._collection = theirs
        return self

    def _header_extra(self) -> Dict[str, Any]:
        return {} if self._collection is None else {"collection": self._collection}

    def _load_extra(self, header: Dict[str, Any]) -> None:
        try:
            self._collection = _collection(header.get("collection"), "the state's collection")
        except ValueError as error:
            raise IntegrityError(f"corrupt longitudinal aggregator state: {error}") from None

    def standard_errors(self) -> Optional[np.ndarray]:
        """Standard errors of the raw estimate (:meth:`estimate`), one per value: the
        plug-in standard deviation of the estimator for users drawn from the population
        (the reports of one collection are independent across users, whose secrets are);
        for a fixed set of users it is conservative. ``None`` when the mechanism has no
        such formula (Bloom-encoded :class:`MemoizedRAPPOR`)."""
        with self._lock:
            sums, n = self._sums.astype(np.float64), self._n
        if n == 0:
            raise ValueError("no reports to estimate from (the aggregator is empty)")
        return self.protocol._standard_errors(sums, n)

    @property
    def mechanism(self) -> LongitudinalMechanism:
        """The mechanism whose reports are counted (also ``protocol``)."""
        return self.protocol

    def __repr__(self) -> str:
        return (f"LongitudinalAggregator({self.protocol!r}, n={self._n}, "
                f"batches={len(self._batches)})")

    def _state_shape(self) -> Tuple[int, ...]:
        return (self.protocol._sums_size(),)

    def _checked_layout(self, array: np.ndarray) -> None:
        self.protocol._check_layout(array)

    def _checked(self, array: np.ndarray) -> np.ndarray:
        self._checked_layout(array)
        bad = self.protocol._invalid_mask(array)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"reports[{i}] is malformed ({int(np.count_nonzero(bad))} "
                             f"malformed in all): {self.protocol._describe_invalid(array[i])}")
        return array

    def _absorb(self, sums: np.ndarray, reports: np.ndarray) -> None:
        sums += self.protocol._report_sums(reports)

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        self.protocol._check_sums(sums, n)

    def estimate(self, decoder: str = "raw") -> np.ndarray:  # type: ignore[override]
        """The distribution estimate from the sums: ``"raw"`` (default) is the unbiased
        estimator of the mechanism (exactly ``mechanism.estimate(reports)`` for the same
        reports), ``"project"`` its projection onto the probability simplex."""
        if decoder not in ("raw", "project"):
            raise ValueError(f"decoder must be 'raw' or 'project', got {decoder!r}")
        with self._lock:
            sums, n = self._sums.astype(np.float64), self._n
        if n == 0:
            raise ValueError("no reports to estimate from (the aggregator is empty)")
        raw = self.protocol._raw_from_counts(sums, n)
        return raw if decoder == "raw" else kernels.project_simplex(raw)

    def identify(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a longitudinal aggregator estimates a distribution over [0, k): "
                        "use estimate()")

    @classmethod
    def _from_sums(cls, mechanism: LongitudinalMechanism, sums: np.ndarray, n: int,
                   batch_id: str, label: str) -> "LongitudinalAggregator":
        aggregator = cls(mechanism)
        sums = np.asarray(sums, dtype=np.int64).reshape(aggregator._sums.shape)
        try:
            mechanism._check_sums(sums, n)
        except ValueError as error:  # pragma: no cover - a bug of the simulation
            raise IntegrityError(f"simulated sums are inconsistent: {error}") from None
        aggregator._sums = sums.copy()
        aggregator._n = int(n)
        aggregator._batches = {batch_id: label}
        return aggregator


# -- simulation -------------------------------------------------------------------------


def _true_counts(mechanism: LongitudinalMechanism, true_counts: Any) -> np.ndarray:
    counts = np.asarray(true_counts)
    if counts.dtype == bool or counts.dtype.kind not in "iu":
        raise TypeError(f"true_counts must be integers (users per value), got dtype "
                        f"{counts.dtype}")
    if counts.shape != (mechanism.k,):
        raise ValueError(f"true_counts must have shape ({mechanism.k},), got {counts.shape}")
    if counts.size and counts.min() < 0:
        i = int(np.argmax(counts < 0))
        raise ValueError(f"true_counts must be >= 0: true_counts[{i}] = {counts[i]}")
    if counts.dtype.kind == "u" and counts.size and int(counts.max()) >= 2**62:
        raise ValueError("true_counts too large (the sums are int64)")
    counts = counts.astype(np.int64)
    total = int(counts.sum(dtype=object))
    if total == 0:
        raise ValueError("true_counts has no users")
    if total >= 2**62:
        raise ValueError(f"true_counts sum to {total} users: at most 2^62 (the sums are "
                         "int64)")
    return counts


def _batch_ids(mechanism: LongitudinalMechanism, counts: np.ndarray, T: int,
               seed: Any) -> List[str]:
    """One batch id per simulated collection: random without a seed; with a seed, the
    SHA-256 of (spec, true counts, seed, T, collection), so that the same simulation made
    twice is recognised as the same batches (merging it twice is refused)."""
    if seed is None:
        return [os.urandom(32).hex() for _ in range(T)]
    if isinstance(seed, np.random.SeedSequence):
        key = [str(seed.entropy), list(seed.spawn_key)]
    else:
        key = [str(seed), []]
    base = canonical_json({"simulate_campaign": 1, "fingerprint": mechanism.fingerprint,
                           "counts": hashlib.sha256(counts.astype("<i8").tobytes()).hexdigest(),
                           "seed": key, "T": T}).encode("ascii")
    return [hashlib.sha256(base + b"\x00" + str(t).encode("ascii")).hexdigest()
            for t in range(T)]


def simulate_campaign(mechanism: LongitudinalMechanism, true_counts: Any, T: int,
                      seed: Optional[int] = None) -> List[LongitudinalAggregator]:
    """``T`` collections from the same users, as aggregators, drawn at the level of counts.

    ``true_counts[x]`` users hold value x for the whole campaign. The result has exactly
    the joint law of the sums of ``mechanism.campaign(values, T, ...)`` for those users
    with fresh secrets (same memoized answers in every collection, a fresh per-report
    round in each), at a cost independent of the number of users (dBitFlipPM: linear in
    it, vectorized).

    How (the first round drawn once, then T per-report rounds given it):

    - L-GRR: randomized response keeps its input with probability ``p`` and otherwise
      answers a uniform *other* value, which is the same as keeping it with probability
      ``p - q`` and otherwise answering a uniform value among all k. So the memoized
      answers' histogram is ``Binomial(c_x, p1 - q1)`` kept per value plus a
      ``Multinomial(rest, uniform)``, and each collection's histogram is drawn the same
      way from the memoized histogram with ``(p2, q2)`` (the per-report round depends on
      the memoized answer only).
    - Unary encodings and RAPPOR: every bit of every user is randomized independently, so
      the number of memoized ones of bit j is ``Binomial(s_j, P1) + Binomial(n - s_j, Q1)``
      (``s_j`` the users whose encoded value sets bit j; ``P1``, ``Q1`` the probabilities
      that the memoized bit is 1 when the encoded bit is 1 or 0), and each collection's
      count is ``Binomial(B_j, P2) + Binomial(n - B_j, Q2)`` given the memoized count
      ``B_j``.
    - dBitFlipPM: each user's d buckets are drawn (Floyd's algorithm, vectorized) with its
      bits; the report is the memoized answer, so every collection has the same sums.

    Parameters
    ----------
    mechanism : LongitudinalMechanism
    true_counts : array_like of int, shape (k,)
        Users holding each value (at least one user in all).
    T : int
        Number of collections, >= 1.
    seed : int, optional
        ``numpy.random.SeedSequence(seed)``: its first child draws the memoized round, child
        t + 1 collection t. ``None``: OS entropy. Same seed, same sums and the same state
        bytes (the batch ids derive from the seed; without a seed they are random).

    Returns
    -------
    list of LongitudinalAggregator
        One per collection, each with one batch labelled ``"simulate_campaign t of T"``.
    """
    if not isinstance(mechanism, LongitudinalMechanism):
        raise TypeError(f"simulate_campaign takes a longitudinal mechanism, got "
                        f"{type(mechanism).__name__}")
    T = integer(T, "T", minimum=1)
    counts = _true_counts(mechanism, true_counts)
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
    sequence = seed if isinstance(seed, np.random.SeedSequence) else \
        np.random.SeedSequence(seed)
    children = sequence.spawn(T + 1)
    ids = _batch_ids(mechanism, counts, T, seed)
    n = int(counts.sum())
    memo = mechanism._simulate_memo(counts, _generator(children[0]))
    out = []
    for t in range(T):
        sums = mechanism._simulate_round(memo, n, _generator(children[t + 1]))
        out.append(LongitudinalAggregator._from_sums(
            mechanism, sums, n, ids[t], f"simulate_campaign {t + 1} of {T}"))
    return out


def _generator(child: np.random.SeedSequence) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(child))
