"""Apple's sequence fragment puzzle (SFP): frequent unknown strings from one report per user
(Apple Differential Privacy Team, "Learning with Privacy at Scale", Apple Machine Learning
Journal, 2017), over the count-mean sketches of ``ldpdist.heavy_hitters.sketch``."""

from __future__ import annotations

import itertools
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from .._validation import integer, real, shown
from ..mechanisms.base import check_epsilon
from .items import _item_list, hash_items
from .protocol import (HeavyHitterProtocol, ItemFrequencies, SketchAggregator,
                       register_protocol)
from .sketch import Sketch, _check_shape, sketch_buckets, sketch_salts

__all__ = ["SequenceFragmentPuzzle", "SequenceFragmentPuzzleAggregator"]


def _item_bytes(item: Any, position: int, max_length: int) -> bytes:
    where = f"items[{position}]"
    if isinstance(item, str):
        try:
            data = item.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where} is a str with no UTF-8 encoding: character {exc.start} "
                             f"is {item[exc.start]!r} (a lone surrogate)") from None
    elif isinstance(item, (bytes, bytearray, memoryview)):
        data = bytes(item)
    else:
        raise TypeError(f"{where} is a {type(item).__name__} ({shown(item)}); SFP items are "
                        "strings (bytes or str)")
    if len(data) > max_length:
        raise ValueError(f"{where} has {len(data)} bytes, more than max_length = {max_length}")
    if data.endswith(b"\x00"):
        raise ValueError(f"{where} ends with a NUL byte, SFP's padding symbol: it could not be "
                         "told apart from the shorter string")
    return data


def _check_alphabet(alphabet: Any) -> Optional[Tuple[int, ...]]:
    if alphabet is None:
        return None
    if isinstance(alphabet, str):
        try:
            alphabet = alphabet.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("alphabet is a str with no UTF-8 encoding") from None
    if isinstance(alphabet, (bytes, bytearray)):
        values = list(alphabet)
    elif isinstance(alphabet, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in alphabet):
        values = list(alphabet)
    else:
        raise TypeError(f"alphabet must be None, a str, bytes or a list of byte values, got "
                        f"{type(alphabet).__name__}")
    if not values or any(not 1 <= v <= 255 for v in values):
        raise ValueError("alphabet must hold byte values in [1, 255] (0x00 is the padding), "
                         "at least one")
    return tuple(sorted(set(values)))


def _as_item(data: bytes) -> Any:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


@register_protocol
class SequenceFragmentPuzzle(HeavyHitterProtocol):
    """Apple's sequence fragment puzzle (SFP): finds frequent strings that nobody listed,
    from one ε-LDP report per user.

    Apple Differential Privacy Team, "Learning with Privacy at Scale", Apple Machine
    Learning Journal, 2017.

    A string is its UTF-8 bytes (a ``str`` and its encoding are the same item), at most
    ``max_length`` bytes, padded with 0x00 to ``max_length`` (so a string may not end with
    0x00). Its 8-bit tag is the first byte of its item hash, ``h64 >> 56`` (the hash of
    :mod:`ldpdist.heavy_hitters.items` of the bytes). Each user draws a group g uniformly
    in ``[0, max_length/2 + 1)``, from their own randomness, and sends ONE report, at the
    full ε:

    * g = 0 (whole-string record): a CMS (or HCMS) report of the string's hashed value
      ``v = h64 >> (64 - bits)``, through the row hashes of label ``b"item"``;
    * g = 1 + p (fragment record at byte position l = 2p): a CMS/HCMS report of the pair
      (tag, fragment), fragment ``f = s[l] * 256 + s[l+1]`` of the padded string, at row j
      in bucket ``A_j(f) XOR B_j(tag)``, with ``A_j`` the row hashes of label
      ``b"fragment"`` applied to the value f and ``B_j`` those of label ``b"tag"`` applied
      to the tag (m must be a power of two).

    The server finds, at every position, the ``fragments`` (tag, fragment) pairs with the
    largest ranking score (the smallest of the estimates of ``min(4, d)`` disjoint groups of
    rows, robust to bucket collisions; see
    :meth:`~ldpdist.heavy_hitters.SequenceFragmentPuzzleAggregator.fragment_pairs`) among all
    ``2**24`` (or those
    over ``alphabet``); for every tag found at positions 0 to e_max (up to the first
    position where it has none) and every e <= e_max, it assembles the strings of the
    cartesian product of its fragments at positions 0 to e (later positions are padding;
    at most ``max_candidates`` strings per tag, dropping the weakest fragments first), keeps
    those whose own tag is that tag, and estimates them with the whole-string records;
    ``identify`` returns the ``top`` largest of those whose estimate is at least
    ``threshold`` (default 2) standard errors.

    Parameters
    ----------
    epsilon : float
        Privacy per user (ε > 0); every report is ε-LDP (users are split, not ε).
    top : int, default 32
        Default number of strings identify returns.
    max_length : int, default 32
        Longest string in bytes, even, 2 to 64: ``max_length/2`` fragment positions.
    m : int, default 1024
        Sketch width (a power of two), for both kinds of records.
    d : int, default 16
        Sketch rows; the fragment search costs ``positions * 2**24 * d`` lookups (fewer
        with an ``alphabet``).
    hadamard : bool, default False
        HCMS reports instead of CMS.
    fragments : int, optional
        Pairs kept per position, default ``4 * top``.
    max_candidates : int, default 4096
        Largest cartesian product per tag.
    alphabet : str, bytes or list of int, optional
        The byte values strings may hold (besides the padding 0x00, which they may not end
        with); a string with another byte is refused. The server searches only the
        fragments over it: ``256 * (|alphabet| + 1)**2`` pairs per position instead of
        ``2**24`` (e.g. 186,624 for the 26 lowercase letters). Default: every byte.
    bits : int, default 64
        Width of the whole-string hashed values.
    seed : int, default 0
        Public seed of the item hash and the row hashes.
    """

    protocol_name = "SFP"
    _reports_noun = "sfp"

    def __init__(self, epsilon: float, *, top: int = 32, max_length: int = 32, m: int = 1024,
                 d: int = 16, hadamard: bool = False, fragments: Optional[int] = None,
                 max_candidates: int = 4096, alphabet: Any = None, bits: int = 64,
                 seed: int = 0):
        self._epsilon = check_epsilon(epsilon)
        self._alphabet = _check_alphabet(alphabet)
        symbols = np.array([0] + list(self._alphabet if self._alphabet is not None
                                      else range(1, 256)), dtype=np.int64)
        self._fragment_values = np.sort((symbols[:, None] * 256 + symbols[None, :]).ravel())
        self._top = integer(top, "top", minimum=1, maximum=4096)
        self._max_length = integer(max_length, "max_length", minimum=2, maximum=64)
        if self._max_length % 2:
            raise ValueError(f"max_length = {self._max_length} is odd: fragments are 2 bytes")
        self._m, self._d, self._hadamard = _check_shape(m, d, hadamard)
        if self._m & (self._m - 1):
            raise ValueError(f"m = {self._m} is not a power of two: SFP's fragment buckets are "
                             "XORs of two row hashes")
        self._fragments = integer(4 * self._top if fragments is None else fragments,
                                  "fragments", minimum=1, maximum=2**16)
        self._max_candidates = integer(max_candidates, "max_candidates", minimum=1,
                                       maximum=2**20)
        self._bits = integer(bits, "bits", minimum=1, maximum=64)
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        self._sketch = Sketch(self._epsilon, self._m, self._d, self._hadamard)
        self._salts = sketch_salts(self._seed, self._d, b"item")
        self._A = sketch_buckets(np.arange(2**16, dtype=np.uint64)[None, :],
                                 sketch_salts(self._seed, self._d, b"fragment")[:, None],
                                 self._m).astype(np.int32)
        self._B = sketch_buckets(np.arange(256, dtype=np.uint64)[None, :],
                                 sketch_salts(self._seed, self._d, b"tag")[:, None],
                                 self._m).astype(np.int32)
        self._dtype = np.dtype([("group", "u1")] + self._sketch.fields())

    def _params(self) -> Dict[str, Any]:
        return {"epsilon": self._epsilon, "top": self._top, "max_length": self._max_length,
                "m": self._m, "d": self._d, "hadamard": self._hadamard,
                "fragments": self._fragments, "max_candidates": self._max_candidates,
                "alphabet": None if self._alphabet is None else list(self._alphabet),
                "bits": self._bits, "seed": self._seed}

    @property
    def alphabet(self) -> Optional[Tuple[int, ...]]:
        """The byte values strings may hold besides the padding 0x00 (None: all 255)."""
        return self._alphabet

    @property
    def fragment_values(self) -> np.ndarray:
        """The fragments the server searches, ``s[l] * 256 + s[l+1]`` over the alphabet and
        0x00 (``65536`` without an alphabet)."""
        return self._fragment_values.copy()

    @property
    def positions(self) -> int:
        """Fragment positions, ``max_length / 2``."""
        return self._max_length // 2

    @property
    def groups(self) -> int:
        """``positions + 1``: group 0 the whole-string records, 1 + p the fragments at 2p."""
        return self.positions + 1

    @property
    def q(self) -> float:
        """The flip probability (exact)."""
        return self._sketch.q

    @property
    def realized_epsilon(self) -> float:
        """Exact ε of every group's channel (the sketch's)."""
        return self._sketch.realized_epsilon

    @property
    def report_dtype(self) -> np.dtype:
        """``group`` (uint8) then the sketch's fields
        (:class:`~ldpdist.heavy_hitters.CountMeanSketch`)."""
        return self._dtype

    def group_channel(self, group: int, max_entries: int = 2**22) -> np.ndarray:
        """The exact channel of a group: the sketch's, rows the tuples of buckets of the
        group's input (the whole string's, or the pair's) as in
        :meth:`~ldpdist.heavy_hitters.CountMeanSketch.group_channel`."""
        integer(group, "group", minimum=0, maximum=self.groups - 1)
        return self._sketch.channel(max_entries)

    # -- items -------------------------------------------------------------------------

    def _encode(self, items: Iterable[Any]) -> List[bytes]:
        data = [_item_bytes(item, i, self._max_length) for i, item in
                enumerate(_item_list(items))]
        if self._alphabet is not None:
            allowed = set(self._alphabet) | {0}
            for i, s in enumerate(data):
                outside = set(s) - allowed
                if outside:
                    raise ValueError(f"items[{i}] holds the byte 0x{min(outside):02x}, outside "
                                     "the protocol's alphabet")
        return data

    def hash(self, items: Iterable[Any]) -> np.ndarray:
        """Hashed values of strings (``str`` hashed as its UTF-8 bytes)."""
        return hash_items(self._encode(items), self._seed) >> np.uint64(64 - self._bits)

    def _name_items(self, candidates: Iterable[Any]) -> Dict[int, Any]:
        values = _item_list(candidates)
        return {int(h): item for item, h in zip(values, self.hash(values).tolist())}

    def pair_buckets(self, tags: np.ndarray, fragments: np.ndarray,
                     rows: np.ndarray) -> np.ndarray:
        """Bucket of fragment records ``A_rows(f) XOR B_rows(tag)``."""
        return (self._A[rows, fragments] ^ self._B[rows, tags]).astype(np.int64)

    # -- client ------------------------------------------------------------------------

    def _privatize_items(self, items: List[Any], rng: np.random.Generator) -> np.ndarray:
        data = self._encode(items)
        n, L = len(data), self._max_length
        padded = np.frombuffer(b"".join(s.ljust(L, b"\x00") for s in data),
                               dtype=np.uint8).reshape(n, L)
        h64 = hash_items(data, self._seed)
        value = h64 >> np.uint64(64 - self._bits)
        tag = (h64 >> np.uint64(56)).astype(np.int64)
        group = rng.integers(0, self.groups, size=n, dtype=np.uint8)
        p = np.maximum(group.astype(np.int64) - 1, 0)
        frag = padded[np.arange(n), 2 * p].astype(np.int64) * 256 + padded[np.arange(n), 2 * p + 1]
        out = np.zeros(n, dtype=self._dtype)
        out["group"] = group
        salts, m = self._salts, self._m

        def buckets(sl: slice, rows: np.ndarray) -> np.ndarray:
            whole = sketch_buckets(value[sl], salts[rows], m)
            return np.where(group[sl] == 0, whole, self.pair_buckets(tag[sl], frag[sl], rows))

        self._sketch.sample(n, rng, buckets, out)
        return out

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        return (array["group"] >= self.groups) | self._sketch.invalid_mask(array)

    def _describe_invalid(self, report: Any) -> str:
        if int(report["group"]) >= self.groups:
            return f"group {int(report['group'])} is not in [0, {self.groups})"
        return self._sketch.describe(report)


#: Pairs per block of the fragment search (its (block, positions) lookups stay in cache).
_PAIR_BLOCK = 4096
#: identify keeps an assembled string only when its whole-string estimate is at least this
#: many of its standard errors.
DISCOVERY_THRESHOLD = 2.0


class SequenceFragmentPuzzleAggregator(SketchAggregator):
    """Integer sums of SFP reports: one sketch's sums per group (whole strings, then each
    fragment position)."""

    def _state_shape(self) -> Tuple[int, ...]:
        return (self.protocol.groups,) + self.protocol._sketch.state_shape()

    def _absorb(self, sums: np.ndarray, reports: np.ndarray) -> None:
        sketch = self.protocol._sketch
        group = reports["group"]
        order = np.argsort(group, kind="stable")  # each group's reports, in their order
        ordered = reports[order]
        bounds = np.searchsorted(group[order], np.arange(sums.shape[0] + 1))
        for g in range(sums.shape[0]):
            if bounds[g + 1] > bounds[g]:
                sketch.absorb(sums[g], ordered[bounds[g]:bounds[g + 1]])

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        sketch = self.protocol._sketch
        sizes = [self._group_size(sums[g]) for g in range(sums.shape[0])]
        for g in range(sums.shape[0]):
            sketch.check_sums(sums[g], sizes[g])
        if sum(sizes) != n:
            raise ValueError("the group sums are not those of n reports")

    def _group_size(self, sums: np.ndarray) -> int:
        sketch = self.protocol._sketch
        return int(sums[0].sum()) if sketch.hadamard else int(sums[:, sketch.m].sum())

    def group_sizes(self) -> np.ndarray:
        """Number of reports of each group."""
        return np.array([self._group_size(s) for s in self._sums])

    def _whole(self, values: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int]:
        protocol = self.protocol
        n0 = self._group_size(self._sums[0])
        if n0 == 0:
            raise ValueError("no whole-string reports (group 0): add more reports")
        table = protocol._sketch.support_table(self._sums[0])
        b = sketch_buckets(np.asarray(values, dtype=np.uint64)[:, None],
                           protocol._salts[None, :], protocol._m)
        total = table[np.arange(protocol._d)[None, :], b].sum(axis=1)
        est, se = protocol._sketch.frequencies(total, n0)
        return est, se, n0

    def estimate(self, candidates: Iterable[Any]) -> ItemFrequencies:
        """Frequencies of candidate strings from the whole-string records (group 0),
        exactly unbiased for the frequency plus the collision term of
        :class:`~ldpdist.heavy_hitters.CountMeanSketch`."""
        values = _item_list(candidates)
        if not values:
            raise ValueError("candidates is empty")
        hashed = self.protocol.hash(values)
        est, se, n0 = self._whole(hashed)
        return ItemFrequencies(hashed, est, se, values, n0)

    def _pair_estimates(self, p: int, tags: np.ndarray, frags: np.ndarray,
                        table: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """The paper's estimates (and standard errors) of (tag, fragment) pairs at position
        index p, from that position's records."""
        protocol = self.protocol
        sketch = protocol._sketch
        if table is None:
            table = sketch.support_table(self._sums[1 + p])
        rows = np.arange(protocol._d)[None, :]
        b = protocol.pair_buckets(tags[:, None], frags[:, None], rows)
        total = table[rows, b].sum(axis=1)
        return sketch.frequencies(total, self._group_size(self._sums[1 + p]))

    def fragment_pairs(self) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per position, the kept (tag, fragment) pairs and their estimates (largest first):
        the ``fragments`` pairs, of the 256 tags ×
        :attr:`~ldpdist.heavy_hitters.SequenceFragmentPuzzle.fragment_values`
        (``2**24`` without an alphabet), with the largest ranking score.

        The score of a pair is the smallest of the estimates made from ``min(4, d)``
        disjoint groups of rows (rows j with the same ``j % groups``): a pair that merely
        shares a bucket with a frequent pair in a few rows does not reach it (the mean over
        all rows, the paper's estimator, would rise by that pair's frequency times the
        fraction of rows shared, and with ``2**24`` pairs for ``d * m`` buckets many do).
        The estimates returned are the paper's, over all rows."""
        protocol = self.protocol
        sketch, P, d, T = protocol._sketch, protocol.positions, protocol._d, protocol._fragments
        m, c = protocol._m, sketch.c
        sizes = self.group_sizes()
        if (sizes[1:] == 0).any():
            p = int(np.argmax(sizes[1:] == 0))
            raise ValueError(f"no fragment reports at position {2 * p}: add more reports")
        G = min(4, d)
        frag_values = protocol.fragment_values
        F = frag_values.size
        A = protocol._A[:, frag_values].astype(np.intp)  # (d, F)
        B = protocol._B.astype(np.intp)
        tables = [sketch.support_table(self._sums[1 + p]) for p in range(P)]
        # float32 lookups (exact below 2**24 reports per position; used to rank only)
        tables32 = [t.astype(np.float32) for t in tables]
        if sketch.hadamard:
            row_n = np.stack([self._sums[1 + p][0].sum(axis=1) for p in range(P)])
        else:
            row_n = np.stack([self._sums[1 + p][:, m] for p in range(P)])
        group_n = np.maximum(np.stack([row_n[:, g::G].sum(axis=1) for g in range(G)], axis=1), 1)
        kept_score = [np.zeros(0, np.float32) for _ in range(P)]
        kept_pair = [np.zeros(0, np.int64) for _ in range(P)]
        # row j's lookups of every position side by side: one gather fetches a bucket's P
        # values (the same float32 operations, in the same order, as position by position)
        by_row = [np.ascontiguousarray(np.stack([tables32[p][j] for p in range(P)], axis=1))
                  for j in range(d)]
        scales = [np.array([c / group_n[p, g] for p in range(P)], dtype=np.float32)
                  for g in range(G)]
        offset = np.float32((1.0 - c) / 2)
        block = _PAIR_BLOCK
        part_buf = np.empty((block, P), dtype=np.float32)
        acc = np.empty((block, P), dtype=np.float32)
        step = max(1, (1 << 20) // F)  # tags per pass
        for t0 in range(0, 256, step):
            tags = np.arange(t0, min(256, t0 + step))
            idx = [(B[j, tags][:, None] ^ A[j][None, :]).ravel() for j in range(d)]
            pairs = (tags[:, None] * 2**16 + frag_values[None, :]).ravel()
            keep = min(T, pairs.size)
            scores = np.empty((P, pairs.size), dtype=np.float32)
            for s0 in range(0, pairs.size, block):
                s1 = min(pairs.size, s0 + block)
                a, buf = acc[:s1 - s0], part_buf[:s1 - s0]
                for g in range(G):
                    np.take(by_row[g], idx[g][s0:s1], axis=0, out=a)
                    for j in range(g + G, d, G):
                        np.take(by_row[j], idx[j][s0:s1], axis=0, out=buf)
                        a += buf
                    # the group's estimate, up to the common factor m/(m-1) (monotone)
                    a *= scales[g]
                    if not sketch.hadamard:
                        a += offset
                    if g == 0:
                        scores[:, s0:s1] = a.T
                    else:
                        np.minimum(scores[:, s0:s1], a.T, out=scores[:, s0:s1])
            for p in range(P):
                score = scores[p]
                part = np.argpartition(-score, keep - 1)[:keep]
                both_s = np.concatenate([kept_score[p], score[part]])
                both_p = np.concatenate([kept_pair[p], pairs[part]])
                if both_s.size > T:
                    part = np.argpartition(-both_s, T - 1)[:T]
                    both_s, both_p = both_s[part], both_p[part]
                kept_score[p], kept_pair[p] = both_s, both_p
        out = []
        for p in range(P):
            pair = kept_pair[p]
            est, _ = self._pair_estimates(p, pair >> 16, pair & 0xFFFF, tables[p])
            order = np.lexsort((pair, -kept_score[p]))
            out.append((pair[order] >> 16, pair[order] & 0xFFFF, est[order]))
        return out

    def candidates(self) -> List[bytes]:
        """The strings assembled from the kept fragment pairs (see the protocol)."""
        protocol = self.protocol
        P, cap = protocol.positions, protocol._max_candidates
        by_tag: Dict[int, List[List[Tuple[float, int]]]] = {}
        for p, (tags, frags, est) in enumerate(self.fragment_pairs()):
            for t, f, e in zip(tags.tolist(), frags.tolist(), est.tolist()):
                by_tag.setdefault(t, [[] for _ in range(P)])[p].append((e, f))
        found: List[Tuple[int, bytes]] = []
        seen = set()
        for tag, lists in sorted(by_tag.items()):
            # a string ending before position e + 1 has only padding after it: positions
            # 0..e are enough, for every e up to the first position with no fragment
            last = next((p for p in range(P) if not lists[p]), P) - 1
            if last < 0:
                continue
            lists = [sorted(options, reverse=True) for options in lists[:last + 1]]

            def size(lists: List[List[Tuple[float, int]]] = lists) -> float:
                return float(sum(np.prod([len(o) for o in lists[:e + 1]], dtype=float)
                                 for e in range(len(lists))))

            while size() > cap:
                # drop the weakest fragment of the positions with more than one
                several = [i for i in range(last + 1) if len(lists[i]) > 1]
                if not several:
                    break
                p = min(several, key=lambda i: lists[i][-1][0])
                lists[p].pop()
            pieces = [[f.to_bytes(2, "big") for _, f in o] for o in lists]
            for e in range(last + 1):
                for combo in itertools.product(*pieces[:e + 1]):
                    data = b"".join(combo).rstrip(b"\x00")
                    if (tag, data) not in seen:
                        seen.add((tag, data))
                        found.append((tag, data))
        if not found:
            return []
        datas = [data for _, data in found]
        tags = hash_items(datas, protocol._seed) >> np.uint64(56)
        # keep a string only if its own tag is the one its fragments carry
        return [data for (tag, data), own in zip(found, tags.tolist()) if own == tag]

    def identify(self, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None,
                 threshold: float = DISCOVERY_THRESHOLD) -> ItemFrequencies:
        """The ``top`` strings with the largest whole-string estimates among those
        assembled from the fragments whose estimate is at least ``threshold`` times its
        standard error (``candidates`` given: those instead, as ``estimate``, ranked, with
        no threshold). Items are ``str`` when their bytes are UTF-8, else ``bytes``.

        The fragments of a few frequent strings combine into many strings nobody holds;
        the threshold (default 2; 0 keeps the ``top`` largest whatever their estimates)
        leaves those out, so that fewer than ``top`` strings may be returned."""
        protocol = self.protocol
        top = protocol._top if top is None else integer(top, "top", minimum=1, maximum=2**20)
        threshold = real(threshold, "threshold")
        if not threshold >= 0:
            raise ValueError(f"threshold must be >= 0, got {threshold!r}")
        if candidates is not None:
            values = _item_list(candidates)
        else:
            values = [_as_item(data) for data in self.candidates()]
        if not values:
            return ItemFrequencies(np.zeros(0, np.uint64), np.zeros(0), np.zeros(0), [],
                                   self._group_size(self._sums[0]))
        hashed = protocol.hash(values)
        est, se, n0 = self._whole(hashed)
        order = np.lexsort((hashed, -est))
        if candidates is None and threshold > 0:
            order = order[est[order] >= threshold * se[order]]
        order = order[:top]
        return ItemFrequencies(hashed[order], est[order], se[order],
                               [values[i] for i in order], n0)


SequenceFragmentPuzzle.aggregator_class = SequenceFragmentPuzzleAggregator
