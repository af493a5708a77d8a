"""PEM, the prefix extension method (Wang, Li, Lopuhaä-Zwakenberg, Chen & Jha, "Locally
Differentially Private Heavy Hitter Identification", IEEE TDSC 2021), over the hashed domain
of :mod:`ldpdist.heavy_hitters.items`, with an exact OLH frequency oracle per group."""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, Optional, Tuple

import numpy as np

from .. import _core
from .._validation import integer
from .items import _item_list
from .prefixes import MAX_CANDIDATES, PrefixProtocol  # noqa: F401 (re-exported)
from .protocol import ItemFrequencies, KeptReportsAggregator, nonempty_items, register_protocol

__all__ = ["PEM", "PEMAggregator"]

#: Largest prime modulus of the OLH hash: digits and hashed values are stored in one byte.
MAX_G = 251
_PRIMES = [p for p in range(2, MAX_G + 1) if all(p % d for d in range(2, int(p ** 0.5) + 1))]
_CHUNK = 1 << 16  # users per block of the sampler (the draws depend on it: fixed)


#: The Rust support kernel splits more than this many rows over its threads itself, and
#: work (rows · (1 + candidates · digits / 8)) below the second is not worth a thread.
_KERNEL_CHUNK_ROWS, _PARALLEL_WORK = 1 << 14, 1 << 18


def _threads() -> int:
    """Threads of the Rust kernels: ``RAYON_NUM_THREADS`` if set to a positive integer,
    else the number of CPUs (as rayon does)."""
    try:
        threads = int(os.environ.get("RAYON_NUM_THREADS", ""))
    except ValueError:
        threads = 0
    return threads if threads > 0 else (os.cpu_count() or 1)


def _digits_needed(bits: int, g: int) -> int:
    """The number t of base-g digits of every integer in ``[0, 2**bits)``: the least t >= 1
    with ``g**t >= 2**bits``."""
    t = 1
    while g**t < 2**bits:
        t += 1
    return t


@register_protocol
class PEM(PrefixProtocol):
    """Heavy hitters by prefix extension (PEM) over a hashed domain of ``bits``-bit values.

    Wang, Li, Lopuhaä-Zwakenberg, Chen & Jha, "Locally Differentially Private Heavy Hitter
    Identification", IEEE Transactions on Dependable and Secure Computing, 2021.

    Items (bytes, str or unsigned 64-bit integers) are mapped to ``[0, 2**bits)`` by the
    public, seeded hash of :mod:`ldpdist.heavy_hitters.items`. The users are split into G
    groups; group j reports the prefix of length ``s_j = min(start_bits + j * step_bits,
    bits)`` of its hashed item (the last group the whole value) through OLH at the full ε.
    Each user sends one report, so the protocol is ε-LDP per user however many rounds the
    server runs. The server enumerates every prefix of length ``s_0`` in the first round,
    keeps the ``top`` with the largest estimates, extends each by the next group's extra
    bits, estimates those candidates from that group, and so on to the full length.

    Client (one user holding an item whose hashed value is v):

    1. draw a group j uniformly in ``[0, G)`` (independently of the item, from the user's
       own randomness);
    2. x = the first ``s_j`` bits of v (``v >> (bits - s_j)``), written in base g with
       ``t_j`` digits ``x_0, ..., x_{t_j - 1}`` (least significant first), ``t_j`` the least
       t with ``g**t >= 2**s_j``;
    3. draw the OLH hash: digits ``a_i`` uniform in ``[0, g)``; ``h = sum(a_i x_i) mod g``;
    4. report ``y = h`` with probability ``p`` (a multiple of 2**-53, at least 4·2**-53 below
       ``e^ε / (e^ε + g - 1)``), else a uniform one of the g - 1 other values.

    This is the hash family of :class:`~ldpdist.OptimizedLocalHashing` on the domain
    ``[0, 2**s_j)``: two distinct prefixes collide under exactly one hash in g, so a report
    supports a prefix other than the user's with probability exactly ``q = 1/g`` and the
    frequency oracle ``(C/n_j - q) / (p - q)`` (C supporting reports among the n_j of group
    j) is exactly unbiased. The report ``(j, y, a)`` is OLH's ``(A, y)`` with A's base-g
    digits stored one per byte (``A * g + y`` does not fit in 64 bits for long prefixes).

    The modulus g is the prime at most ``MAX_G`` (251) minimizing OLH's variance factor
    ``q (1 - q) / (p - q)**2`` at the realized p (about ``e^ε + 1`` up to ε ≈ 5.5; 251
    above, which costs variance at very large ε).

    Parameters
    ----------
    epsilon : float
        The privacy guarantee per user (ε > 0).
    top : int, default 32
        Candidates kept at the end of each round, and the most :meth:`PEMAggregator.identify`
        returns; 1 <= top <= 4096.
    bits : int, default 64
        Width of the hashed domain, 1 <= bits <= 64. Fewer bits mean fewer groups (more
        users per group) but more hash collisions between items: two given items share a
        value with probability ``2**-bits``.
    start_bits : int, optional
        Prefix length of the first group, whose ``2**start_bits`` prefixes are all
        estimated; default ``ceil(log2(top)) + step_bits`` (the paper's choice), at most
        ``bits``; at most 20.
    step_bits : int, optional
        Bits added per round, default 4 (``top * 2**step_bits`` candidates per round, at
        most ``2**20``).
    seed : int, default 0
        The public seed of the item hash, in ``[0, 2**256)``; part of the spec.

    Examples
    --------
    >>> from ldpdist.heavy_hitters import PEM
    >>> pem = PEM(epsilon=4.0, top=8, bits=32)
    >>> pem.groups, pem.prefix_bits[:3], pem.g
    (8, (7, 11, 15), 53)
    """

    protocol_name = "PEM"
    _reports_noun = "pem"

    def __init__(self, epsilon: float, *, top: int = 32, bits: int = 64,
                 start_bits: Optional[int] = None, step_bits: Optional[int] = None,
                 seed: int = 0):
        self._init_prefixes(epsilon, top, bits, start_bits, step_bits, seed, _PRIMES)
        self._digits = tuple(_digits_needed(s, self._g) for s in self._prefix_bits)
        t_max = max(self._digits)
        self._dtype = np.dtype([("group", np.uint8), ("y", np.uint8), ("a", np.uint8, (t_max,))])

    # -- parameters --------------------------------------------------------------------

    @property
    def digits(self) -> Tuple[int, ...]:
        """Number ``t_j`` of base-g hash digits of each group's reports."""
        return self._digits

    @property
    def report_dtype(self) -> np.dtype:
        """The reports' numpy structured dtype: ``group`` (uint8), ``y`` (uint8) and ``a``
        (the hash's base-g digits, uint8, ``max(digits)`` of them; zero past ``t_j``)."""
        return self._dtype

    # -- spec ----------------------------------------------------------------------------

    def _params(self) -> Dict[str, Any]:
        return {"epsilon": self._epsilon, "top": self._top, "bits": self._bits,
                "start_bits": self._start, "step_bits": self._step, "seed": self._seed}

    # -- client side ---------------------------------------------------------------------

    def _hash_digits(self, x: np.ndarray, a: np.ndarray) -> np.ndarray:
        """``sum(a_i x_i) mod g`` per row, x's base-g digits least significant first."""
        g = np.uint64(self._g)
        x = x.copy()
        acc = np.zeros(x.size, dtype=np.uint64)
        for i in range(a.shape[1]):
            acc += a[:, i].astype(np.uint64) * (x % g)
            x //= g
        return acc % g

    def _privatize_hashed(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The sampler above, drawn in blocks of 65536 users (the draws depend on it)."""
        n = values.size
        out = np.zeros(n, dtype=self._dtype)
        shifts = np.array([self._bits - s for s in self._prefix_bits], dtype=np.uint64)
        digits = np.array(self._digits)
        t_max, G, g = self._dtype["a"].shape[0], self.groups, self._g
        for start in range(0, n, _CHUNK):
            v = values[start:start + _CHUNK]
            m = v.size
            group = rng.integers(0, G, size=m, dtype=np.uint8)
            a = rng.integers(0, g, size=(m, t_max), dtype=np.uint8)
            a[np.arange(t_max)[None, :] >= digits[group][:, None]] = 0
            h = self._hash_digits(v >> shifts[group], a)
            keep = self._keep(rng, m)
            other = rng.integers(1, g, size=m, dtype=np.uint64)
            y = np.where(keep, h, (h + other) % np.uint64(g))
            block = out[start:start + m]
            block["group"], block["y"], block["a"] = group, y.astype(np.uint8), a
        return out

    # -- server side ---------------------------------------------------------------------

    def prefix_digits(self, prefixes: np.ndarray, group: int) -> np.ndarray:
        """Base-g digits (least significant first) of prefixes of group ``group``, shape
        ``(len(prefixes), digits[group])``, uint8."""
        x = np.asarray(prefixes, dtype=np.uint64).copy()
        t = self._digits[group]
        out = np.empty((x.size, t), dtype=np.uint8)
        g = np.uint64(self._g)
        for i in range(t):
            out[:, i] = x % g
            x //= g
        return out

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        # One pass over the reports' bytes: a report is malformed when its group is not in
        # [0, G), or a byte exceeds its group's limit (y and the t_j digits: g - 1; the
        # digits past t_j: 0)
        size = self._dtype.itemsize
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(array.shape[0], size)
        group = raw[:, 0]
        bad = group >= self.groups
        limits = np.take(self._byte_limits(), np.minimum(group, self.groups - 1), axis=0)
        over = np.greater(raw, limits, out=limits.view(bool))
        return bad | over.any(axis=1) if over.any() else bad  # rows only if one is bad

    def _byte_limits(self) -> np.ndarray:
        """(G, itemsize) uint8: the largest value of each byte of a report of each group
        (the group byte itself is checked separately)."""
        limits = self.__dict__.get("_limits")
        if limits is None:
            t_max = self._dtype["a"].shape[0]
            limits = np.zeros((self.groups, 2 + t_max), dtype=np.uint8)
            limits[:, 0] = 255
            for j, t in enumerate(self._digits):
                limits[j, 1:2 + t] = self._g - 1
            self._limits = limits
        return limits

    def _describe_invalid(self, report: Any) -> str:
        group = int(report["group"])
        if group >= self.groups:
            return f"group {group} is not in [0, {self.groups})"
        if report["y"] >= self._g or (report["a"] >= self._g).any():
            return f"it holds a value >= g = {self._g}"
        return (f"it has a nonzero hash digit past the {self._digits[group]} of its group "
                f"{group}")

    def group_channel(self, group: int, max_entries: int = 2**22) -> np.ndarray:
        """The exact channel of group ``group``: rows the prefixes x in ``[0, 2**s_j)``,
        columns the reports ``(A, y)`` in the order ``A * g + y`` with
        ``A = sum(a_i g**i)``; ``Q[x, (A, y)] = g**-t_j * (p if y == h_A(x) else
        (1 - p)/(g - 1))``. (The group itself is drawn independently of the item, so the
        whole protocol's channel is the mixture of these with disjoint outputs and has the
        same ε.) Refused past ``max_entries`` entries."""
        group = integer(group, "group", minimum=0, maximum=self.groups - 1)
        s, t, g = self._prefix_bits[group], self._digits[group], self._g
        k, outputs = 2**s, g ** (t + 1)
        if k * outputs > max_entries:
            raise ValueError(f"the channel of group {group} has {k} × {outputs} entries, more "
                             f"than max_entries = {max_entries}")
        A = np.arange(g**t, dtype=np.uint64)
        a = self.prefix_digits(A, group) if t else np.zeros((A.size, 0), np.uint8)
        # digits of A (as a hash number) in base g: same routine, they are < g**t
        xd = self.prefix_digits(np.arange(k, dtype=np.uint64), group).astype(np.int64)
        h = (xd @ a.astype(np.int64).T) % g  # (k, g**t): h_A(x)
        p, other = self.p, (1.0 - self.p) / (g - 1)
        Q = np.full((k, g**t, g), other / g**t)
        rows, cols = np.indices(h.shape)
        Q[rows, cols, h] = p / g**t
        return Q.reshape(k, outputs)


class PEMAggregator(KeptReportsAggregator):
    """The reports of one :class:`PEM` spec: add batches, merge shards, identify.

    PEM's rounds are adaptive (the candidates of round j depend on round j - 1's
    estimates), so the aggregator keeps every report (``2 + max(digits)`` bytes each) until
    :meth:`identify`; merging concatenates. Thread-safe (one lock).

    The supports are counted by a Rust kernel (parallel over the reports, exact integer
    counts), so the results do not depend on the number of threads."""

    protocol: PEM

    @property
    def pem(self) -> PEM:
        """The protocol."""
        return self.protocol

    def group_sizes(self) -> np.ndarray:
        """Number of reports of each group."""
        return np.bincount(self.reports()["group"], minlength=self.pem.groups)

    def _support(self, group: int, candidates: np.ndarray, mine: Optional[np.ndarray] = None,
                 pool: Optional[ThreadPoolExecutor] = None) -> Tuple[np.ndarray, int]:
        """Supporting-report counts of each candidate prefix among group ``group``'s
        reports, and that group's size. ``mine`` is an array of reports (of any groups,
        default all those added): only its rows of group ``group`` are counted, by the Rust
        kernel, in place (no per-group copy of the reports). With a ``pool``, a block of
        rows too small for the kernel's own parallel split (one group's rows, already
        separated) is cut into one piece per thread, counted concurrently (the kernel
        releases the GIL) and summed: exact integer counts, the same whatever the split."""
        pem = self.pem
        reports = np.ascontiguousarray(self.reports() if mine is None else mine)
        rows = reports.view(np.uint8).reshape(reports.size, pem.report_dtype.itemsize)
        candidates = np.ascontiguousarray(candidates, dtype=np.uint64)
        t = pem.digits[group]
        pieces = 1 if pool is None else _threads()
        if pieces > 1 and rows.shape[0] <= _KERNEL_CHUNK_ROWS \
                and rows.shape[0] * (1 + candidates.size * t // 8) >= _PARALLEL_WORK:
            parts = list(pool.map(
                lambda piece: _core.pem_support(piece, group, t, pem.g, candidates),
                np.array_split(rows, pieces)))
            counts = np.sum([c for c, _ in parts], axis=0, dtype=np.uint64)
            n = sum(int(m) for _, m in parts)
        else:
            counts, n = _core.pem_support(rows, group, t, pem.g, candidates)
        if n == 0:
            raise ValueError(f"group {group} (prefixes of {pem.prefix_bits[group]} bits) has no "
                             f"reports: PEM needs users in each of its {pem.groups} groups")
        return counts.astype(np.int64), int(n)

    def _frequencies(self, group: int, candidates: np.ndarray, mine: Optional[np.ndarray] = None,
                     pool: Optional[ThreadPoolExecutor] = None
                     ) -> Tuple[np.ndarray, np.ndarray, int]:
        counts, n = self._support(group, candidates, mine, pool)
        pem = self.pem
        gap = pem.p - pem.q
        share = counts / n
        estimates = (share - pem.q) / gap
        errors = np.sqrt(share * (1.0 - share) / n) / gap
        return estimates, errors, n

    def identify(self, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None) -> ItemFrequencies:
        """The heavy hitters: the ``top`` hashed values with the largest estimated
        frequencies after PEM's last round, largest first.

        Parameters
        ----------
        top : int, optional
            How many to return, at most (and by default) the protocol's ``top``.
        candidates : sequence of items, optional
            A dictionary of possible items: each value found that one of them hashes to is
            named (``items``); the hash is one-way, so without a dictionary only the hashed
            values are known. Two candidates with the same hashed value raise
            ``ValueError`` (use more bits).

        Returns
        -------
        ItemFrequencies
            Estimates and standard errors from the last group (the one whose estimates also
            ranked them: values just above the cut are biased upward by the selection;
            :meth:`estimate` on a held-out set of reports avoids it).
        """
        pem = self.pem
        top = pem.top if top is None else integer(top, "top", minimum=1, maximum=pem.top)
        kept = np.arange(2**pem.prefix_bits[0], dtype=np.uint64)
        estimates = errors = None
        n = 0
        parts = self.group_rows()  # each round's kernel reads only its group's rows
        threads = _threads()
        with (ThreadPoolExecutor(threads, thread_name_prefix="ldpdist-pem") if threads > 1
              else contextlib.nullcontext()) as pool:
            for group in range(pem.groups):
                if group:
                    extra = pem.prefix_bits[group] - pem.prefix_bits[group - 1]
                    kept = ((kept[:, None] << np.uint64(extra))
                            | np.arange(2**extra, dtype=np.uint64)[None, :]).reshape(-1)
                estimates, errors, n = self._frequencies(group, kept, parts[group], pool)
                keep = min(pem.top if group < pem.groups - 1 else top, kept.size)
                order = np.lexsort((kept, -estimates))[:keep]  # largest first, ties by value
                kept, estimates, errors = kept[order], estimates[order], errors[order]
        items = None
        if candidates is not None:
            names = pem._name_items(candidates)
            items = [names.get(int(h)) for h in kept]
        return ItemFrequencies(kept, estimates, errors, items, n)

    def estimate(self, candidates: Iterable[Any]) -> ItemFrequencies:
        """Frequencies of known candidate items, in their order, from the last group's
        reports (the full hashed value): each estimate is exactly unbiased for the fraction
        of users whose item has that hashed value (the item's frequency, plus that of any
        other item colliding with it in ``bits`` bits)."""
        values = list(candidates) if not isinstance(candidates, np.ndarray) else candidates
        hashed = self.pem.hash(nonempty_items(values))
        estimates, errors, n = self._frequencies(self.pem.groups - 1, hashed)
        return ItemFrequencies(hashed, estimates, errors, _item_list(values), n)


PEM.aggregator_class = PEMAggregator
