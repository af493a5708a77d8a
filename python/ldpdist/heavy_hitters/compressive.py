"""Compressive heavy hitters: one round, one report per user, every group decoded on its own.

The hashed value v (``bits`` bits, see :mod:`ldpdist.heavy_hitters.items`) is cut into J
chunks; a user of group j < J reports the pair ``(tag(v), chunk_j(v))`` (``tag`` a short
public hash of the whole v) and a user of the last group a public ``score_bits``-bit hash of
v, each through Hadamard Response (:class:`ldpdist.HadamardResponse`) at the full ε. The
server decodes each group's distribution over its cells with one fast Walsh–Hadamard
transform, keeps the largest pairs, joins the chunks that share a tag into whole values and
ranks them. See :class:`CompressiveHeavyHitters` and the user guide's page *Compressive heavy
hitters* (docs/guide/hh-compressive.md).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from .._validation import integer
from ..mechanisms.base import check_epsilon
from ..mechanisms.hadamard_response import HadamardResponse
from .protocol import (HeavyHitterProtocol, ItemFrequencies, SketchAggregator,
                       register_protocol)

__all__ = ["CompressiveHeavyHitters", "CompressiveAggregator", "mix64", "TAG_KEY", "SCORE_KEY"]

#: Key of the tag hash: ``tag(v) = mix64(v, TAG_KEY) >> (64 - tag_bits)``.
TAG_KEY = 0x9E3779B97F4A7C15
#: Key of the score cell: ``cell(v) = mix64(v, SCORE_KEY) >> (64 - score_bits)``.
SCORE_KEY = 0x3C6EF372FE94F82A
#: Most pair bits (``tag_bits + chunk_bits``): a group's state has about ``2**pair_bits``
#: 64-bit counts.
MAX_PAIR_BITS = 24
#: At most this many candidates are assembled by the join (and scored).
MAX_CANDIDATES = 2**16
#: z of the score filter of ambiguous candidates (see :class:`CompressiveHeavyHitters`).
SCORE_Z = 3.0


def mix64(values: np.ndarray, key: int) -> np.ndarray:
    """The public mixing function of the tags and score cells (uint64 in, uint64 out):
    SplitMix64's finalizer of ``v + key`` (mod 2**64)::

        z = (v + key) mod 2**64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 mod 2**64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB mod 2**64
        z = z ^ (z >> 31)
    """
    z = np.asarray(values, dtype=np.uint64) + np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def chunk_widths(bits: int, chunk_bits: int) -> Tuple[int, ...]:
    """Widths of the J = ceil(bits / chunk_bits) chunks, most significant first: as equal as
    possible (the first ``bits mod J`` one bit wider)."""
    J = -(-bits // chunk_bits)
    base, extra = divmod(bits, J)
    return tuple(base + 1 if j < extra else base for j in range(J))


def _hadamard_response(k: int, epsilon: float) -> HadamardResponse:
    """Hadamard Response on ``[0, k)`` with the number of blocks B (a power of 2, at most
    ``2k``) that minimizes the variance of one cell's estimate at the uniform distribution
    (ties: the smaller B; the search stops at the first increase past B = 4, the variance
    being unimodal there). The paper's default B is not always the best (at ε = 1 it is 2,
    whose variance is above that of B = 1)."""
    return HadamardResponse(k, epsilon, blocks=_best_blocks(k, epsilon))


@functools.lru_cache(maxsize=64)
def _best_blocks(k: int, epsilon: float) -> int:
    best_variance, best = math.inf, 1
    blocks = 1
    while blocks <= 2 * k:
        # HadamardResponse.estimator_variance of value 0 at the uniform distribution, n = 1,
        # without its O(k) arrays: P_0 / (h (in - out))**2 - p_0**2, with P_0 the probability
        # of block 0 (b - 1 values, or k if fewer)
        mech = HadamardResponse(k, epsilon, blocks=blocks)
        _, b, _ = mech.construction
        inside, outside = (float(v) for v in mech._core.probabilities())
        h = b // 2
        scale = 1.0 / (h * (inside - outside))
        in_block = b * outside + h * (inside - outside) * min(b - 1, k) / k
        variance = scale * scale * in_block - 1.0 / (k * k)
        if variance < best_variance:
            best_variance, best = variance, blocks
        elif blocks >= 4:
            break
        blocks *= 2
    return best


@register_protocol
class CompressiveHeavyHitters(HeavyHitterProtocol):
    """Heavy hitters in ONE round: chunk pairs tagged by a public hash, each group decoded
    independently by Hadamard Response, chunks joined by tag.

    This is ``ldpdist``'s own protocol (no paper prescribes it); it combines Hadamard
    Response (Acharya, Sun & Zhang, "Hadamard Response: Estimating Distributions Privately,
    Efficiently, and with Little Communication", AISTATS 2019) with a sparse read-out of each
    group's decoded distribution, in the spirit of compressive privatization (Xiong, Huang,
    Mao, Wang & Ying, "Compressive Privatization: Sparse Distribution Estimation under Locally
    Differential Privacy", arXiv 2020) and of sparse estimation (Acharya, Kairouz, Liu & Sun,
    ALT 2021): of 2**pair_bits cells only the few heavy ones matter.

    Layout: v (``bits`` bits) is cut into J = ceil(bits / chunk_bits) chunks of widths
    ``w_j`` (``chunk_widths``, most significant first; chunk j is
    ``(v >> shift_j) mod 2**w_j``); ``tag(v) = mix64(v, TAG_KEY) >> (64 - tag_bits)``
    (``mix64``, a public function of the whole v). There are G groups, G = J + 1 with
    the score group (default), else G = J:

    * pair group j < J: the cell ``x = tag(v) * 2**w_j + chunk_j(v)`` in
      ``[0, 2**(tag_bits + w_j))``;
    * score group J: the cell ``x = mix64(v, SCORE_KEY) >> (64 - tag_bits - w_0)``.

    Client (one user, hashed value v): draw a group j uniformly in ``[0, G)`` from the
    user's own randomness (independently of the item), compute j's cell x and report
    ``(j, y)``, y Hadamard Response's report of x at ε (:class:`ldpdist.HadamardResponse`
    with ``k = 2**cell_bits[j]`` and B blocks, B the power of 2 minimizing the variance of
    a cell's estimate at the uniform distribution: 1 at ε = 1, 64 at ε = 4). One report
    per user.

    Privacy: the report's law given v is ``P(j, y | v) = Q_j[x_j(v), y] / G``; the factor
    1/G does not depend on v, so the largest ratio between two users' probabilities of a
    report is the largest over j of the ratios of HR's channel ``Q_j``: ε-LDP per user, with
    :attr:`realized_epsilon` (at most ε) exactly (:meth:`group_channel` gives ``Q_j``).

    Server (every group decoded on its own, no adaptivity, no second round):

    1. group j's raw HR estimate of its cell distribution (one FWHT per block): for users
       drawn i.i.d., unbiased for the fraction of the users whose cell is x;
    2. in each pair group, keep the ``width`` cells with the largest estimates (the support
       of the best ``width``-sparse approximation of the estimate);
    3. join: for each tag kept in all J pair groups, the assemblies (one kept chunk with
       that tag per group) whose smallest chunk estimate is the largest: every chunk at or
       above a threshold, lowered while there are at most ``max_combos`` assemblies; an
       assembled value whose own tag differs from the tag it was joined under is dropped (it
       mixes chunks of different values, or noise: a mix passes with probability
       ``2**-tag_bits``); at most ``MAX_CANDIDATES`` in all, the tags taken strongest first
       (by the smallest over the groups of their largest chunk estimate);
    4. score each candidate v by the mean of the G groups' estimates at v's cells: unbiased
       for ``f(v) + c(v)``, f(v) the frequency of v and c(v) the mean over the groups of the
       frequency of the other values sharing v's cell (a given other value shares pair cell
       j with probability ``2**-(tag_bits + w_j)``); with the score group, a candidate of a
       tag with several kept chunks in some group is kept only if the score group's own
       estimate is at least ``SCORE_Z`` (3) standard errors above 0;
    5. return the ``top`` candidates with the largest scores.

    A value is found only if its cell is among the ``width`` largest in every pair group,
    i.e. if it stands out of the noise of n/G users over ``2**(tag_bits + w_j)`` cells.

    Parameters
    ----------
    epsilon : float
        Privacy guarantee per user (ε > 0).
    top : int, default 32
        Most values :meth:`CompressiveAggregator.identify` returns, 1 <= top <= 4096.
    bits : int, default 64
        Width of the hashed domain, 1 <= bits <= 64.
    tag_bits : int, default 6
        Bits of the tag (0 <= tag_bits <= 16). More bits: fewer heavy hitters share a tag
        (ambiguous joins), but more cells per group.
    chunk_bits : int, default 14
        Largest chunk width (1 <= chunk_bits, ``tag_bits + chunk_bits <= 24``). Wider
        chunks: fewer groups (more users each) but more cells per group.
    width : int, optional
        Cells kept per pair group, default ``64 * top`` (at most 2**16). Wider: a heavy
        hitter whose pair barely stands out of the noise is kept, at the cost of more
        candidates to join (more time).
    max_combos : int, default 256
        Candidates assembled per tag, at most (1 <= max_combos <= 4096).
    score_group : bool, default True
        Add the score group (one more group, whose estimates are not used for the
        selection): it filters ambiguous assemblies and adds an unselected estimate to
        every score.
    seed : int, default 0
        The public seed of the item hash (part of the spec).

    Examples
    --------
    >>> from ldpdist.heavy_hitters import CompressiveHeavyHitters
    >>> ch = CompressiveHeavyHitters(epsilon=4.0)
    >>> ch.groups, ch.chunk_widths, ch.cell_bits
    (6, (13, 13, 13, 13, 12), (19, 19, 19, 19, 18, 19))
    """

    protocol_name = "CompressiveHH"

    def __init__(self, epsilon: float, *, top: int = 32, bits: int = 64, tag_bits: int = 6,
                 chunk_bits: int = 14, width: Optional[int] = None, max_combos: int = 256,
                 score_group: bool = True, seed: int = 0):
        self._epsilon = check_epsilon(epsilon)
        self._top = integer(top, "top", minimum=1, maximum=4096)
        self._bits = integer(bits, "bits", minimum=1, maximum=64)
        self._tag_bits = integer(tag_bits, "tag_bits", minimum=0, maximum=16)
        self._chunk_bits = integer(chunk_bits, "chunk_bits", minimum=1,
                                   maximum=MAX_PAIR_BITS - self._tag_bits)
        if width is None:
            width = min(64 * self._top, 2**16)
        self._width = integer(width, "width", minimum=1, maximum=2**16)
        self._max_combos = integer(max_combos, "max_combos", minimum=1, maximum=4096)
        if not isinstance(score_group, (bool, np.bool_)):
            raise TypeError(f"score_group must be a bool, got {type(score_group).__name__}")
        self._score_group = bool(score_group)
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        self._widths = chunk_widths(self._bits, self._chunk_bits)
        shifts, used = [], 0
        for w in self._widths:
            used += w
            shifts.append(self._bits - used)
        self._shifts = tuple(shifts)
        cell_bits = [self._tag_bits + w for w in self._widths]
        if self._score_group:
            cell_bits.append(self._tag_bits + self._widths[0])
        self._cell_bits = tuple(max(1, b) for b in cell_bits)
        self._mechs = tuple(_hadamard_response(2**b, self._epsilon) for b in self._cell_bits)
        sizes = [m.output_size for m in self._mechs]
        self._offsets = tuple(int(v) for v in np.concatenate([[0], np.cumsum(sizes)]))
        self._dtype = np.dtype([("group", np.uint8), ("y", np.uint32)])

    # -- parameters ------------------------------------------------------------------------

    def _params(self) -> Dict[str, Any]:
        return {"epsilon": self._epsilon, "top": self._top, "bits": self._bits,
                "tag_bits": self._tag_bits, "chunk_bits": self._chunk_bits,
                "width": self._width, "max_combos": self._max_combos,
                "score_group": self._score_group, "seed": self._seed}

    @property
    def top(self) -> int:
        """Most values :meth:`CompressiveAggregator.identify` returns."""
        return self._top

    @property
    def tag_bits(self) -> int:
        """Bits of the public tag joining the chunks."""
        return self._tag_bits

    @property
    def chunk_widths(self) -> Tuple[int, ...]:
        """Width of each chunk, most significant first (one pair group per chunk)."""
        return self._widths

    @property
    def cell_bits(self) -> Tuple[int, ...]:
        """Bits of each group's cell (its HR domain is ``2**cell_bits[j]``)."""
        return self._cell_bits

    @property
    def width(self) -> int:
        """Cells kept per pair group."""
        return self._width

    @property
    def max_combos(self) -> int:
        """Candidates assembled per tag, at most."""
        return self._max_combos

    @property
    def groups(self) -> int:
        """G = J + 1: the J pair groups and the score group."""
        return len(self._mechs)

    @property
    def mechanisms(self) -> Tuple[HadamardResponse, ...]:
        """Each group's Hadamard Response (group j's reports are its reports)."""
        return self._mechs

    @property
    def report_dtype(self) -> np.dtype:
        """``group`` (uint8) and ``y`` (uint32, the group's HR report)."""
        return self._dtype

    @property
    def realized_epsilon(self) -> float:
        """The exact ε of the protocol: the largest realized ε of the groups' HR channels."""
        return max(m.realized_epsilon for m in self._mechs)

    def group_channel(self, group: int, max_entries: int = 2**22) -> np.ndarray:
        """Group ``group``'s exact channel: rows its cells, columns its HR reports (a user of
        that group holding a value of cell x reports y with probability ``Q[x, y]``)."""
        group = integer(group, "group", minimum=0, maximum=self.groups - 1)
        return self._mechs[group].channel_matrix(max_entries)

    # -- cells ------------------------------------------------------------------------------

    def tags(self, values: np.ndarray) -> np.ndarray:
        """The tag of each hashed value (uint64 in ``[0, 2**tag_bits)``)."""
        if self._tag_bits == 0:
            return np.zeros(np.shape(values), dtype=np.uint64)
        return mix64(values, TAG_KEY) >> np.uint64(64 - self._tag_bits)

    def cells(self, values: np.ndarray, group: int) -> np.ndarray:
        """Group ``group``'s cell of each hashed value (uint64 in ``[0, 2**cell_bits)``)."""
        v = np.asarray(values, dtype=np.uint64)
        if group == len(self._widths):
            return mix64(v, SCORE_KEY) >> np.uint64(64 - self._cell_bits[group])
        w = self._widths[group]
        chunk = (v >> np.uint64(self._shifts[group])) & np.uint64((1 << w) - 1)
        return (self.tags(v) << np.uint64(w)) | chunk

    # -- client side ------------------------------------------------------------------------

    def _privatize_hashed(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        values = np.asarray(values, dtype=np.uint64)
        G = self.groups
        group = rng.integers(0, G, size=values.size, dtype=np.uint8)
        seeds = rng.integers(0, 2**63, size=G, dtype=np.int64)  # always G draws
        out = np.zeros(values.size, dtype=self._dtype)
        out["group"] = group
        for j in range(G):
            sel = np.flatnonzero(group == j)
            if sel.size:
                reports = self._mechs[j].privatize(self.cells(values[sel], j),
                                                   seed=int(seeds[j]))
                out["y"][sel] = np.asarray(reports)
        return out

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        group, y = array["group"], array["y"]
        sizes = np.array([m.output_size for m in self._mechs], dtype=np.int64)
        bad = group >= self.groups
        return bad | (y.astype(np.int64) >= sizes[np.minimum(group, self.groups - 1)])

    def _describe_invalid(self, report: Any) -> str:
        group = int(report["group"])
        if group >= self.groups:
            return f"group {group} is not in [0, {self.groups})"
        return (f"y = {int(report['y'])} is not in [0, {self._mechs[group].output_size}) "
                f"(group {group})")


class CompressiveAggregator(SketchAggregator):
    """The state of :class:`CompressiveHeavyHitters`: every group's HR report counts (one
    int64 vector, the groups' counts end to end) and each group's number of reports.
    Merging adds the counts."""

    def _state_shape(self) -> Tuple[int, ...]:
        return (self.protocol._offsets[-1] + self.protocol.groups,)

    def _absorb(self, sums: np.ndarray, reports: np.ndarray) -> None:
        ch = self.protocol
        off, G = ch._offsets, ch.groups
        group = reports["group"].astype(np.int64)
        flat = np.asarray(off[:-1], dtype=np.int64)[group] + reports["y"].astype(np.int64)
        sums[:off[-1]] += np.bincount(flat, minlength=off[-1])
        sums[off[-1]:] += np.bincount(group, minlength=G)

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        ch = self.protocol
        off = ch._offsets
        if (sums < 0).any():
            raise ValueError("a count is negative")
        sizes = sums[off[-1]:]
        if int(sizes.sum()) != n:
            raise ValueError(f"the group sizes add up to {int(sizes.sum())}, not n = {n}")
        for j in range(ch.groups):
            if int(sums[off[j]:off[j + 1]].sum()) != int(sizes[j]):
                raise ValueError(f"group {j}'s report counts do not add up to its size")

    # -- decoding ---------------------------------------------------------------------------

    def group_sizes(self) -> np.ndarray:
        """Number of reports of each group."""
        ch = self.protocol
        return np.asarray(self.sums[ch._offsets[-1]:], dtype=np.int64)

    def group_estimate(self, group: int) -> np.ndarray:
        """Group ``group``'s raw HR estimate of its cell distribution (shape
        ``(2**cell_bits[group],)``): for users drawn i.i.d., exactly unbiased for the
        fraction of the users whose cell is each cell."""
        ch = self.protocol
        n = int(self.group_sizes()[group])
        if n == 0:
            raise ValueError(f"group {group} has no reports: compressive heavy hitters need "
                             f"users in each of its {ch.groups} groups")
        counts = np.ascontiguousarray(self.sums[ch._offsets[group]:ch._offsets[group + 1]],
                                      dtype=np.uint64)
        return np.asarray(ch._mechs[group]._core.estimate_raw(counts, n), dtype=np.float64)

    def group_variance(self, group: int, raw: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """The plug-in variance of group ``group``'s estimate at ``cells``: HR's exact
        variance (:meth:`ldpdist.HadamardResponse.estimator_variance`) at the clipped,
        normalized estimate ``raw``, computed at those cells only."""
        ch = self.protocol
        n = int(self.group_sizes()[group])
        mech = ch._mechs[group]
        _, b, _ = mech.construction
        inside, outside = (float(v) for v in mech._core.probabilities())
        p = np.clip(raw, 0.0, None)
        total = float(p.sum())
        if total <= 0:
            p, total = np.ones_like(raw), float(raw.size)
        # the mass of every block of b - 1 values (the last one may be shorter)
        mass = np.add.reduceat(p, np.arange(0, raw.size, b - 1)) / total
        h = b // 2
        scale = 1.0 / (h * (inside - outside))
        cells = np.asarray(cells, dtype=np.int64)
        in_block = b * outside + h * (inside - outside) * mass[cells // (b - 1)]
        return np.maximum((scale * scale * in_block - (p[cells] / total) ** 2) / n, 0.0)

    def _decoded(self) -> List[np.ndarray]:
        return [self.group_estimate(j) for j in range(self.protocol.groups)]

    def _score(self, decoded, hashes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        ch = self.protocol
        G = ch.groups
        est = np.zeros(hashes.size)
        var = np.zeros(hashes.size)
        for j, raw in enumerate(decoded):
            cells = ch.cells(hashes, j).astype(np.int64)
            est += raw[cells]
            var += self.group_variance(j, raw, cells)
        return est / G, np.sqrt(var) / G

    def candidates(self, decoded=None) -> Tuple[np.ndarray, np.ndarray]:
        """The values assembled by the join (uint64) and whether each comes from an
        ambiguous tag (bool)."""
        ch = self.protocol
        decoded = self._decoded() if decoded is None else decoded
        J = len(ch._widths)
        kept: List[Dict[int, List[Tuple[float, int]]]] = []
        for j in range(J):
            raw = decoded[j]
            width = min(ch.width, raw.size)
            part = np.argpartition(-raw, width - 1)[:width] if width < raw.size \
                else np.arange(raw.size)
            order = part[np.lexsort((part, -raw[part]))]
            by_tag: Dict[int, List[Tuple[float, int]]] = {}
            w = ch._widths[j]
            for cell in order.tolist():
                by_tag.setdefault(cell >> w, []).append((float(raw[cell]), cell & ((1 << w) - 1)))
            kept.append(by_tag)
        common = set(kept[0])
        for by_tag in kept[1:]:
            common &= set(by_tag)
        values: List[int] = []
        joined: List[int] = []
        ambiguous: List[bool] = []
        # strongest tags first (largest smallest-over-groups best estimate), so that the cap
        # on candidates drops the weakest
        order = sorted(common, key=lambda t: (-min(kept[j][t][0][0] for j in range(J)), t))
        for tag in order:
            # the assemblies whose SMALLEST chunk estimate is the largest: a threshold τ
            # lowered through the kept estimates while the product of the numbers of chunks
            # at or above τ stays <= max_combos (a sum would favour mixtures of one very
            # frequent value's chunks with noise over a second frequent value)
            lists = [kept[j][tag] for j in range(J)]  # each largest first
            merged = sorted(((est, j) for j, chunks in enumerate(lists) for est, _ in chunks),
                            reverse=True)
            take, counts = [1] * J, [0] * J
            for i, (est, j) in enumerate(merged):
                counts[j] += 1
                if i + 1 < len(merged) and merged[i + 1][0] == est:
                    continue  # every chunk at or above the threshold: ties together
                if min(counts) == 0:
                    continue
                if math.prod(counts) > ch.max_combos:
                    break
                take = list(counts)
            combos = math.prod(take)
            if len(values) + combos > MAX_CANDIDATES:
                break
            assembled = [0]
            for j in range(J):
                shift = ch._shifts[j]
                assembled = [v | (chunk << shift) for v in assembled
                             for _, chunk in lists[j][:take[j]]]
            several = any(len(chunks) > 1 for chunks in lists)
            values.extend(assembled)
            joined.extend([tag] * combos)
            ambiguous.extend([several] * combos)
        hashes = np.array(values, dtype=np.uint64)
        # the tag is a hash of the whole value: an assembled value whose own tag is not the
        # one it was joined under mixes the chunks of several values (or of noise): dropped
        match = ch.tags(hashes) == np.array(joined, dtype=np.uint64)
        return hashes[match], np.array(ambiguous, dtype=bool)[match]

    def identify(self, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None) -> ItemFrequencies:
        """The heavy hitters: the ``top`` assembled values with the largest scores (mean of
        the groups' estimates at the value's cells), largest first.

        Parameters
        ----------
        top : int, optional
            How many to return, at most (and by default) the protocol's ``top``.
        candidates : sequence of items, optional
            A dictionary of possible items, used only to name the values found.

        Returns
        -------
        ItemFrequencies
            Scores and their plug-in standard errors; ``n`` is the number of reports (all
            groups contribute to every score). The scores of the values found are biased
            upward by the selection (they are the largest); :meth:`estimate` on held-out
            reports avoids it.
        """
        ch = self.protocol
        top = ch.top if top is None else integer(top, "top", minimum=1, maximum=ch.top)
        decoded = self._decoded()
        hashes, ambiguous = self.candidates(decoded)
        est, se = self._score(decoded, hashes)
        if hashes.size and ch._score_group:
            raw = decoded[-1]
            cells = ch.cells(hashes, ch.groups - 1).astype(np.int64)
            variance = self.group_variance(ch.groups - 1, raw, cells)
            scored = raw[cells] >= SCORE_Z * np.sqrt(variance)
            keep = ~ambiguous | scored
            hashes, est, se = hashes[keep], est[keep], se[keep]
        order = np.lexsort((hashes, -est))[:top]
        hashes, est, se = hashes[order], est[order], se[order]
        items = None
        if candidates is not None:
            names = ch._name_items(candidates)
            items = [names.get(int(h)) for h in hashes]
        return ItemFrequencies(hashes, est, se, items, self.n)

    def estimate(self, candidates: Iterable[Any]) -> ItemFrequencies:
        """Frequencies of known candidate items, in their order: the mean over the G groups
        of the estimate at the item's cell, exactly unbiased (users i.i.d.) for the item's
        frequency plus the mean mass of the other values sharing its cells."""
        from .items import _item_list

        ch = self.protocol
        values = _item_list(candidates)
        if not values:
            raise ValueError("candidates is empty: give at least one item")
        hashes = ch.hash(values)
        est, se = self._score(self._decoded(), hashes)
        return ItemFrequencies(hashes, est, se, values, self.n)



CompressiveHeavyHitters.aggregator_class = CompressiveAggregator
