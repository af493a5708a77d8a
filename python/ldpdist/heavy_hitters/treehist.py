"""TreeHist (Bassily, Nissim, Stemmer & Thakurta, "Practical Locally Private Heavy Hitters",
NeurIPS 2017) over the hashed domain of :mod:`ldpdist.heavy_hitters.items`: a prefix tree
descended level by level with a thresholded, sketch-aggregated frequency oracle per level."""

from __future__ import annotations

import hashlib
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from .._validation import integer, real
from .decollide import Cells, decollide, load, solve
from .items import _item_list
from .prefixes import PrefixProtocol
from .protocol import ItemFrequencies, SketchAggregator, nonempty_items, register_protocol

__all__ = ["TreeHist", "TreeHistAggregator", "level_hash"]

#: Largest number of buckets g of a level's oracle (a report's bucket is one byte).
MAX_G = 256
#: Largest number R of public hash functions per level (a report's index is two bytes).
MAX_HASHES = 2**16
#: BLAKE2b personalization of the level-hash keys.
KEY_PERSONALIZATION = b"ldpdist.hh.th1"
_CHUNK = 1 << 16  # users per block of the sampler (the draws depend on it: fixed)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31, _S32 = (np.uint64(k) for k in (27, 30, 31, 32))
_HASH_BLOCK = 1 << 15  # elements per in-place block of level_hash (fits the L2 cache)
#: The descent's levels before the last (which only prune) solve the de-collision to about
#: this fraction of a zero-frequency prefix's standard error; the last level, whose
#: estimates are returned, and ``estimate`` solve it exactly.
DESCENT_PRECISION = 0.01


def level_keys(seed: int, levels: int, hashes: int) -> np.ndarray:
    """The keys ``K[j, r]`` (uint64, shape (levels, hashes)) of the level hashes:
    ``int.from_bytes(BLAKE2b(j.to_bytes(1, "little") + r.to_bytes(4, "little"),
    digest_size=8, key=seed.to_bytes(32, "little"), person=b"ldpdist.hh.th1"), "little")``."""
    keyed = hashlib.blake2b(digest_size=8, key=seed.to_bytes(32, "little"),
                            person=KEY_PERSONALIZATION)  # copied per message: keyed once
    out = np.empty((levels, hashes), dtype=np.uint64)
    for j in range(levels):
        level = j.to_bytes(1, "little")
        digests = []
        for r in range(hashes):
            h = keyed.copy()
            h.update(level + r.to_bytes(4, "little"))
            digests.append(h.digest())
        out[j] = np.frombuffer(b"".join(digests), dtype="<u8")
    return out


def level_hash(x: np.ndarray, keys: np.ndarray, g: int) -> np.ndarray:
    """The bucket in ``[0, g)`` of prefixes ``x`` under keys ``keys`` (uint64 arrays, broadcast):
    z = x + key (mod 2**64); z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) *
    0x94D049BB133111EB; z = z ^ z >> 31 (SplitMix64's finalizer, all mod 2**64); bucket =
    ((z >> 32) * g) >> 32."""
    z = np.add(np.asarray(x, dtype=np.uint64), np.asarray(keys, dtype=np.uint64))
    if not isinstance(z, np.ndarray) or z.ndim == 0:  # one value: numpy scalars
        z = np.uint64(z)
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        z ^= z >> _S31
        return ((z >> _S32) * np.uint64(g)) >> _S32
    flat = z.reshape(-1)  # z is a fresh C-contiguous array: a view
    step = max(1, min(flat.size, _HASH_BLOCK))
    tmp = np.empty(step, dtype=np.uint64)
    g64 = np.uint64(g)
    for start in range(0, flat.size, step):  # in place, by cache-sized blocks
        b = flat[start:start + step]
        t = tmp[:b.size]
        np.right_shift(b, _S30, out=t)
        b ^= t
        b *= _M1
        np.right_shift(b, _S27, out=t)
        b ^= t
        b *= _M2
        np.right_shift(b, _S31, out=t)
        b ^= t
        b >>= _S32
        b *= g64
        b >>= _S32
    return z


@register_protocol
class TreeHist(PrefixProtocol):
    """Heavy hitters by a prefix tree (TreeHist) over a hashed domain of ``bits``-bit values.

    Bassily, Nissim, Stemmer & Thakurta, "Practical Locally Private Heavy Hitters", NeurIPS
    2017 (the TreeHist protocol), with a hashed local-hashing frequency oracle aggregated in
    fixed integer sums.

    Items are mapped to ``[0, 2**bits)`` by the public seeded hash of
    :mod:`ldpdist.heavy_hitters.items`. The tree's levels j = 0..L-1 are the prefix lengths
    ``s_j = min(start_bits + j * step_bits, bits)`` (the last is the whole value). Each user
    joins one level and sends ONE report at the full ε.

    Client (one user holding a hashed value v):

    1. draw a level j uniformly in ``[0, L)`` and a hash index r uniformly in ``[0, R)``
       (independently of the item);
    2. x = the first ``s_j`` bits of v; its bucket ``u = level_hash(x, K[j, r], g)`` in
       ``[0, g)`` (the public keys K of ``level_keys``);
    3. report ``(j, r, y)`` with ``y = u`` with probability p (a multiple of 2**-53, at most
       ``e^ε / (e^ε + g - 1)``), else one of the g - 1 other buckets uniformly.

    Server: the sums ``S[j, r, y]`` (reports per level, hash index and bucket). At level j
    the support of a prefix x is ``C(x) = sum_r S[j, r, h_{j,r}(x)]``, its raw estimate
    ``(C(x) / n_j - 1/g) / (p - 1/g)``, whose expectation is ``sum_x' D[x, x'] f(x')`` with
    ``D[x, x'] = (g pi(x, x') - 1) / (g - 1)``, ``pi(x, x')`` the fraction of the R hashes
    under which x and x' share a bucket. The server solves ``D f = raw`` over the level's
    candidates (conjugate gradients), which removes the collisions between candidates: the
    estimates are exactly unbiased whenever the users' prefixes lie among the candidates
    (the user guide's TreeHist page details it; the levels before the last, which only
    prune, solve it to about ``DESCENT_PRECISION`` = 1 % of a zero-frequency prefix's
    standard error, the last level exactly). The descent enumerates the ``2**start_bits``
    prefixes of level 0, keeps those whose estimate is at least ``threshold`` standard
    errors of a zero-frequency prefix (the largest ``top`` of them at most), extends each by
    the next level's bits, and so on; the last level's survivors are the heavy hitters.

    Parameters
    ----------
    epsilon : float
        The privacy guarantee per user (ε > 0).
    top : int, default 32
        Prefixes kept per level at most, and the most :meth:`TreeHistAggregator.identify`
        returns; 1 <= top <= 4096.
    bits : int, default 64
        Width of the hashed domain, 1 <= bits <= 64.
    start_bits : int, optional
        Prefix length of level 0 (all its prefixes are estimated); default
        ``ceil(log2(top)) + step_bits``, at most ``bits`` and 20.
    step_bits : int, optional
        Bits added per level, default 4 (``top * 2**step_bits`` candidates per level).
    hashes : int, default 1024
        Number R of public hash functions per level (1 <= R <= 65536): the server keeps
        ``L * R * g`` integer sums, and its work per level grows as R; more hash functions
        make the collision structure closer to a random hash's (deviations about
        ``1/sqrt(g R)``).
    threshold : float, default 2.0
        A prefix survives a level when its estimate is at least ``threshold`` times the
        standard error of a zero-frequency prefix at that level (0 keeps the ``top``
        largest whatever their estimates).
    seed : int, default 0
        The public seed of the item hash and of the level-hash keys, in ``[0, 2**256)``.

    Examples
    --------
    >>> from ldpdist.heavy_hitters.treehist import TreeHist
    >>> th = TreeHist(epsilon=4.0, top=8, bits=32)
    >>> th.groups, th.prefix_bits[:3], th.g
    (8, (7, 11, 15), 56)
    """

    protocol_name = "TreeHist"
    _reports_noun = "treehist"

    def __init__(self, epsilon: float, *, top: int = 32, bits: int = 64,
                 start_bits: Optional[int] = None, step_bits: Optional[int] = None,
                 hashes: int = 1024, threshold: float = 2.0, seed: int = 0):
        self._init_prefixes(epsilon, top, bits, start_bits, step_bits, seed,
                            range(2, MAX_G + 1))
        self._threshold = real(threshold, "threshold")
        if self._threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {self._threshold!r}")
        self._hashes = integer(hashes, "hashes", minimum=1, maximum=MAX_HASHES)
        self._dtype = np.dtype([("group", np.uint8), ("hash", "<u2"), ("y", np.uint8)])

    def _params(self) -> Dict[str, Any]:
        return {"epsilon": self._epsilon, "top": self._top, "bits": self._bits,
                "start_bits": self._start, "step_bits": self._step, "hashes": self._hashes,
                "threshold": self._threshold, "seed": self._seed}

    # -- parameters --------------------------------------------------------------------

    @property
    def hashes(self) -> int:
        """Number R of public hash functions per level."""
        return self._hashes

    @property
    def threshold(self) -> float:
        """Survival threshold, in standard errors of a zero-frequency prefix."""
        return self._threshold

    @property
    def report_dtype(self) -> np.dtype:
        """``group`` (the level, uint8), ``hash`` (the index r, little-endian uint16) and
        ``y`` (the bucket, uint8): 4 bytes."""
        return self._dtype

    @property
    def keys(self) -> np.ndarray:
        """The level-hash keys ``K[j, r]`` (``level_keys``), shape (L, R)."""
        keys = self.__dict__.get("_keys")
        if keys is None:
            keys = level_keys(self._seed, self.groups, self._hashes)
            keys.flags.writeable = False
            self.__dict__["_keys"] = keys
        return keys

    def buckets(self, prefixes: Any, group: int) -> np.ndarray:
        """Buckets ``h_{j,r}(x)`` of prefixes x of level ``group`` under every hash index r,
        shape ``(R, len(prefixes))``, uint64."""
        x = np.asarray(prefixes, dtype=np.uint64).reshape(1, -1)
        return level_hash(x, self.keys[group][:, None], self._g)

    # -- client side ---------------------------------------------------------------------

    def _privatize_hashed(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = values.size
        out = np.zeros(n, dtype=self._dtype)
        shifts = np.array([self._bits - s for s in self._prefix_bits], dtype=np.uint64)
        keys = self.keys
        L, R, g = self.groups, self._hashes, self._g
        for start in range(0, n, _CHUNK):
            v = values[start:start + _CHUNK]
            m = v.size
            group = rng.integers(0, L, size=m, dtype=np.uint8)
            r = rng.integers(0, R, size=m, dtype=np.uint16)
            u = level_hash(v >> shifts[group], keys[group, r], g)
            keep = self._keep(rng, m)
            other = rng.integers(1, g, size=m, dtype=np.uint64)
            y = np.where(keep, u, (u + other) % np.uint64(g))
            block = out[start:start + m]
            block["group"], block["hash"], block["y"] = group, r, y.astype(np.uint8)
        return out

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        return ((array["group"] >= self.groups) | (array["hash"] >= self._hashes)
                | (array["y"] >= self._g))

    def _describe_invalid(self, report: Any) -> str:
        for field, bound in (("group", self.groups), ("hash", self._hashes), ("y", self._g)):
            if report[field] >= bound:
                return f"{field} = {report[field]} is not in [0, {bound})"
        return super()._describe_invalid(report)

    # -- exact channel -------------------------------------------------------------------

    def group_channel(self, group: int, max_entries: int = 2**22) -> np.ndarray:
        """The exact channel of level ``group``: rows the prefixes x in ``[0, 2**s_j)``,
        columns the reports ``(r, y)`` in the order ``r * g + y``;
        ``Q[x, (r, y)] = (p if y == h_{j,r}(x) else (1 - p)/(g - 1)) / R``. (The level is
        drawn independently of the item: the whole protocol's channel is the mixture of
        these with disjoint outputs and has the same ε.) Refused past ``max_entries``."""
        group = integer(group, "group", minimum=0, maximum=self.groups - 1)
        k, R, g = 2**self._prefix_bits[group], self._hashes, self._g
        if k * R * g > max_entries:
            raise ValueError(f"the channel of level {group} has {k} × {R * g} entries, more "
                             f"than max_entries = {max_entries}")
        u = self.buckets(np.arange(k, dtype=np.uint64), group).T.astype(np.int64)  # (k, R)
        p = self.p
        Q = np.full((k, R, g), (1.0 - p) / (g - 1) / R)
        rows, cols = np.indices(u.shape)
        Q[rows, cols, u] = p / R
        return Q.reshape(k, R * g)

    # -- server side ---------------------------------------------------------------------

    def aggregator(self) -> "TreeHistAggregator":
        """An empty, mergeable aggregator (fixed integer sums) of this protocol's reports."""
        return TreeHistAggregator(self)


class TreeHistAggregator(SketchAggregator):
    """The sums ``S[j, r, y]`` of one :class:`TreeHist` spec (int64, shape ``(L, R, g)``):
    add batches, merge shards (the sums add), identify, estimate."""

    def _state_shape(self) -> Tuple[int, ...]:
        th = self.protocol
        return (th.groups, th.hashes, th.g)

    def _absorb(self, sums: np.ndarray, reports: np.ndarray) -> None:
        th = self.protocol
        index = ((reports["group"].astype(np.int64) * th.hashes + reports["hash"]) * th.g
                 + reports["y"])
        sums += np.bincount(index, minlength=sums.size).reshape(sums.shape)

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        if (sums < 0).any():
            raise ValueError("a sum is negative")
        if int(sums.sum()) != n:
            raise ValueError(f"the sums count {int(sums.sum())} reports, the header {n}")

    def group_sizes(self) -> np.ndarray:
        """Number of reports of each level."""
        return self._sums.sum(axis=(1, 2))

    def _frequencies(self, group: int, candidates: np.ndarray, sums: np.ndarray,
                     distinct: bool = False, precision: float = 0.0
                     ) -> Tuple[np.ndarray, np.ndarray, int]:
        """Estimates, standard errors and the level's size; ``distinct``: the caller
        guarantees that the candidates are distinct (the descent's are: level 0's are a
        range, and each level extends distinct survivors by distinct suffixes), so no
        repeated one needs folding. ``precision`` > 0 stops the de-collision solve once
        its residual is at most ``precision * sigma0 * (1 - sqrt(lam))**2`` (sigma0 the
        standard error of a zero-frequency prefix, lam the load of ``decollide.load``,
        ``(1 - sqrt(lam))**2`` about the smallest eigenvalue of D): the estimates are
        then about ``precision * sigma0`` from the exact solution at most (Euclidean norm
        over the candidates); 0 solves to a relative residual of 1e-13."""
        th = self.protocol
        level = sums[group]
        n = level.sum()  # exact for the integer sums (a float for expected sums in tests)
        if n <= 0:
            raise ValueError(f"level {group} (prefixes of {th.prefix_bits[group]} bits) has no "
                             f"reports: TreeHist needs users at each of its {th.groups} levels")
        R, g = th.hashes, th.g
        if not distinct:
            unique, inverse = np.unique(candidates, return_inverse=True)
            if unique.size < candidates.size:  # a repeated candidate is one value: solve once
                estimates, errors, n_out = self._frequencies(group, unique, sums, True)
                return estimates[inverse], errors[inverse], n_out
        # the cells r * g + h_{j,r}(x): the sum S[j, r, .] that supports x under hash r
        # (the level hash computed in Rust); the supports summed in increasing r, exact
        # (integer sums below 2**53), as numpy's take(flat).sum(axis=0)
        cells = Cells.level_hash(np.ascontiguousarray(candidates, dtype=np.uint64).reshape(-1),
                                 np.ascontiguousarray(th.keys[group]), g)
        counts = cells.gather(np.ascontiguousarray(level, dtype=np.float64).reshape(-1))
        gap = th.p - th.q
        share = counts / n
        raw = (share - th.q) / gap
        errors = np.sqrt(np.maximum(share * (1.0 - share), 0.0) / n) / gap
        lam = load(candidates.size, R, g)
        if precision > 0 and lam < 1:
            sigma0 = math.sqrt(th.variance_factor / n)
            atol = precision * sigma0 * (1.0 - math.sqrt(lam)) ** 2
            estimates = solve(raw, cells, R, g, atol=atol).x
        else:
            estimates = decollide(raw, cells, R, g)
        return estimates, errors, int(round(float(n)))

    def identify(self, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None) -> ItemFrequencies:
        """The heavy hitters: the hashed values surviving TreeHist's last level, at most
        ``top``, largest estimate first.

        Parameters
        ----------
        top : int, optional
            How many to return, at most (and by default) the protocol's ``top``.
        candidates : sequence of items, optional
            A dictionary of possible items naming the values found (the hash is one-way);
            two candidates with the same hashed value raise ``ValueError``.

        Returns
        -------
        ItemFrequencies
            Estimates and standard errors from the last level (the one that also selected
            them: values just above the threshold are biased upward by the selection).
        """
        th = self.protocol
        top = th.top if top is None else integer(top, "top", minimum=1, maximum=th.top)
        with self._lock:
            sums = self._sums.copy()
        kept = np.arange(2**th.prefix_bits[0], dtype=np.uint64)
        estimates = errors = np.zeros(0)
        n = 0
        for group in range(th.groups):
            if group:
                extra = th.prefix_bits[group] - th.prefix_bits[group - 1]
                kept = ((kept[:, None] << np.uint64(extra))
                        | np.arange(2**extra, dtype=np.uint64)[None, :]).reshape(-1)
            last = group == th.groups - 1
            estimates, errors, n = self._frequencies(
                group, kept, sums, distinct=True, precision=0.0 if last else DESCENT_PRECISION)
            eta = th.threshold * math.sqrt(th.variance_factor / n)
            keep = min(th.top if group < th.groups - 1 else top, kept.size)
            order = np.lexsort((kept, -estimates))[:keep]  # largest first, ties by value
            order = order[estimates[order] >= eta]
            kept, estimates, errors = kept[order], estimates[order], errors[order]
            if kept.size == 0:
                break
        items = None
        if candidates is not None:
            names = th._name_items(candidates)
            items = [names.get(int(h)) for h in kept]
        return ItemFrequencies(kept, estimates, errors, items, n)

    def estimate(self, candidates: Iterable[Any]) -> ItemFrequencies:
        """Frequencies of known candidate items, in their order, from the last level's
        reports (the whole hashed value). Each estimate is exactly unbiased for the
        fraction of that level's users whose bucket it counts, that is for the item's
        frequency plus ``g/(g-1)`` times the collision excess of the other values (see the
        user guide's TreeHist page), zero on average over the hash keys."""
        th = self.protocol
        values = list(candidates) if not isinstance(candidates, np.ndarray) else candidates
        hashed = th.hash(nonempty_items(values))
        with self._lock:
            sums = self._sums.copy()
        estimates, errors, n = self._frequencies(th.groups - 1, hashed, sums)
        return ItemFrequencies(hashed, estimates, errors, _item_list(values), n)


TreeHist.aggregator_class = TreeHistAggregator

