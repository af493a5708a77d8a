"""Apple's count-mean sketch (CMS) and its Hadamard variant (HCMS) over the hashed domain of
:mod:`ldpdist.heavy_hitters.items` (Apple Differential Privacy Team, "Learning with Privacy
at Scale", Apple Machine Learning Journal, 2017).

One class, :class:`~ldpdist.heavy_hitters.CountMeanSketch`, with a ``hadamard`` flag: the two
variants share the
public row hashes, the server's sums and the debiased estimator, and differ only in what a
user sends (a whole m-bit vector, or one Hadamard coefficient bit).

Row hashes (version 1, normative)
---------------------------------
The sketch has d rows of m buckets. Row j's hash maps a 64-bit input value v (the item's
hashed value, or for SFP's fragment records the fragment value) to a bucket in ``[0, m)``:

.. code-block:: text

    salt_j = int.from_bytes(BLAKE2b(label || j.to_bytes(4, "little"), digest_size=8,
                                    key=seed.to_bytes(32, "little"),
                                    person=b"ldpdist.cms.v1"), "little")
    z      = fmix64(v XOR salt_j)        (MurmurHash3's 64-bit finalizer, below)
    h_j(v) = (z * m) >> 64               (the high 64 bits of the 128-bit product)

    fmix64(z): z ^= z >> 33; z *= 0xff51afd7ed558ccd (mod 2**64); z ^= z >> 33;
               z *= 0xc4ceb9fe1a85ec53 (mod 2**64); z ^= z >> 33

``label`` is ``b"item"`` for the sketch of items (CMS/HCMS, and SFP's whole-string records)
and ``b"fragment"`` for SFP's fragment records. For m a power of two, ``h_j(v)`` is the top
``log2(m)`` bits of z. Test vectors: ``tests/data/heavy_hitters_sketch_v1.json``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import warnings
from fractions import Fraction
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np

from .. import _core
from .._validation import integer
from ..mechanisms.base import check_epsilon
from . import decollide
from .items import _item_list
from .protocol import (HeavyHitterProtocol, ItemFrequencies, SketchAggregator,
                       register_protocol)

__all__ = ["CountMeanSketch", "CountMeanSketchAggregator", "sketch_salts", "sketch_buckets",
           "fmix64"]

SKETCH_PERSONALIZATION = b"ldpdist.cms.v1"
#: CMS flips each bit with probability a multiple of 2**-16 (a 16-bit uniform per coordinate,
#: compared with F most significant bit first: ``Sketch._flip_words``).
CMS_UNIT_BITS = 16
#: HCMS flips its one bit with probability a multiple of 2**-53.
HCMS_UNIT_BITS = 53
#: The sketch's largest width m and number of rows d, and the largest d * m.
MAX_M, MAX_D, MAX_CELLS = 2**16, 2**16, 2**24
_CHUNK = 8192  # users per block of the sampler (the draws depend on it: fixed)
assert _CHUNK % _core.CMS_FLIP_BLOCK == 0  # the flips' streams are aligned to the blocks
_C1, _C2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_S33, _S32, _LO32 = np.uint64(33), np.uint64(32), np.uint64(0xFFFFFFFF)
_FMIX_BLOCK = 1 << 15  # elements per block of the in-place fmix64 (256 KiB, cache-sized)


def fmix64(z: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (a bijection of uint64), elementwise."""
    return _fmix64_inplace(np.array(z, dtype=np.uint64))


def _fmix64_inplace(z: np.ndarray, shift: Optional[np.uint64] = None) -> np.ndarray:
    """:func:`fmix64` of a writeable uint64 array, in place, then ``>> shift`` if given;
    returns z. A C-contiguous z is done in cache-sized blocks with one small scratch."""
    flat = z.reshape(-1) if z.flags.c_contiguous else None
    if flat is None or flat.size <= _FMIX_BLOCK:
        blocks = [z]
    else:
        blocks = [flat[i:i + _FMIX_BLOCK] for i in range(0, flat.size, _FMIX_BLOCK)]
    scratch = np.empty(min(z.size, _FMIX_BLOCK) if flat is not None else z.shape, np.uint64)
    for block in blocks:
        tmp = scratch[:block.size] if flat is not None else scratch
        tmp = tmp.reshape(block.shape)
        for c in (_C1, _C2, None):
            np.right_shift(block, _S33, out=tmp)
            np.bitwise_xor(block, tmp, out=block)
            if c is not None:
                np.multiply(block, c, out=block)
        if shift is not None:
            np.right_shift(block, shift, out=block)
    return z


def sketch_salts(seed: int, d: int, label: bytes = b"item") -> np.ndarray:
    """The d row salts ``salt_j`` (uint64) of the public row hashes (module documentation)."""
    key = integer(seed, "seed", minimum=0, maximum=2**256 - 1).to_bytes(32, "little")
    return np.array([int.from_bytes(hashlib.blake2b(
        label + j.to_bytes(4, "little"), digest_size=8, key=key,
        person=SKETCH_PERSONALIZATION).digest(), "little") for j in range(d)], dtype=np.uint64)


def sketch_buckets(values: np.ndarray, salts: np.ndarray, m: int) -> np.ndarray:
    """``h_j(v) = (fmix64(v ^ salt_j) * m) >> 64`` with broadcasting of ``values`` against
    ``salts`` (int64 result, in ``[0, m)``)."""
    m = int(m)
    z = np.asarray(np.bitwise_xor(np.asarray(values, dtype=np.uint64),
                                  np.asarray(salts, dtype=np.uint64)))
    if m >= 2 and not m & (m - 1):  # m = 2**k: (z * m) >> 64 is the top k bits of z
        return _fmix64_inplace(z, np.uint64(65 - m.bit_length())).view(np.int64)
    z = _fmix64_inplace(z)
    mm = np.uint64(m)
    # (z * m) >> 64 exactly for m < 2**32: z = hi * 2**32 + lo
    return (((z >> _S32) * mm + (((z & _LO32) * mm) >> _S32)) >> _S32).astype(np.int64)


def _bucket_totals(values: np.ndarray, salts: np.ndarray, m: int,
                   table: np.ndarray) -> np.ndarray:
    """``sum_j table[j * m + h_j(v)]`` for each value v (int64, exact): the buckets of
    :func:`sketch_buckets`, computed and gathered in cache-sized blocks of values."""
    values = np.asarray(values, dtype=np.uint64).reshape(-1)
    d = salts.size
    offsets = np.arange(0, d * m, m, dtype=np.int64)
    total = np.empty(values.size, dtype=np.int64)
    step = max(1, _FMIX_BLOCK // max(d, 1))
    for start in range(0, values.size, step):
        block = values[start:start + step, None]
        cells = sketch_buckets(block, salts[None, :], m)  # (c, d)
        cells += offsets
        np.take(table, cells, mode="clip").sum(axis=1, out=total[start:start + step])
    return total


@functools.lru_cache(maxsize=16)
def _bit_counter(size: int) -> Any:
    """The packed-bit column counter of :meth:`Sketch.absorb` for records of ``size`` bytes:
    OUE's aggregation (its ε is irrelevant to counting), built once per size and kept out of
    the protocol objects (which stay picklable)."""
    return _core.OptimizedUnaryEncoding(8 * size, 1.0)


def _parity(x: np.ndarray) -> np.ndarray:
    return (np.bitwise_count(x) & 1).astype(np.uint8)


class Sketch:
    """The shared machinery of a (H)CMS: parameters, the exact flip probability, the
    sampler given per-user buckets, the sums and the debiased counts. Used by
    :class:`~ldpdist.heavy_hitters.CountMeanSketch` and by SFP (two sketches of the same
    parameters)."""

    def __init__(self, epsilon: float, m: int, d: int, hadamard: bool):
        self.epsilon, self.m, self.d, self.hadamard = epsilon, m, d, hadamard
        self.unit_bits = HCMS_UNIT_BITS if hadamard else CMS_UNIT_BITS
        unit = 2**self.unit_bits
        # flip probability q = F / 2**unit_bits: the smallest such multiple above
        # 1 / (1 + e^(ε/2)) (CMS: two coordinates change) or 1 / (1 + e^ε) (HCMS), so
        # that the realized ε never exceeds ε
        half = epsilon if hadamard else epsilon / 2
        q = 1.0 / (1.0 + math.exp(half))
        F = math.floor(q * unit) + (4 if hadamard else 1)
        while F < unit // 2 and self._realized(F) > epsilon:
            F += 1
        if F >= unit // 2:
            raise ValueError(f"epsilon = {epsilon!r} is too small: the flip probability rounds "
                             f"to 1/2 at the resolution 2**-{self.unit_bits}")
        self.F = F
        self.words = -(-m // 64)

    def _realized(self, F: int) -> float:
        unit = 2**self.unit_bits
        ratio = math.log(float(Fraction(unit - F, F)))
        return ratio if self.hadamard else 2 * ratio

    @property
    def q(self) -> float:
        """The flip probability (exact)."""
        return self.F / 2**self.unit_bits

    @property
    def realized_epsilon(self) -> float:
        return self._realized(self.F)

    @property
    def c(self) -> float:
        """``1 / (1 - 2q)``: the paper's ``c_ε`` at the realized q."""
        return 1.0 / (1.0 - 2.0 * self.q)

    def fields(self) -> list:
        """The report fields of the sketch (after any protocol fields)."""
        if self.hadamard:
            return [("row", "<u2"), ("col", "<u2"), ("bit", "u1")]
        return [("row", "<u2"), ("bits", "<u8", (self.words,))]

    def state_shape(self) -> Tuple[int, ...]:
        # CMS: per row j, the count of 1-bits in each column, and (column m) the reports of
        # row j; HCMS: per (j, l), [0] the reports and [1] their 1-bits
        return (2, self.d, self.m) if self.hadamard else (self.d, self.m + 1)

    # -- sampler ---------------------------------------------------------------------------

    def _flip_words(self, key: bytes, start: int, c: int) -> np.ndarray:
        """(c, words) uint64 whose bits are independent Bernoulli(F / 2**16), padding bits
        zero, for the users ``start .. start + c`` (``start`` a multiple of 1024,
        ``_core.CMS_FLIP_BLOCK``): the Rust kernel ``_core.cms_flip_words`` (a bit-sliced
        comparison of 16-bit uniforms with F, most significant bit first, stopped once all
        64 bits of a word are decided: about 7 random words per 64 bits instead of 16),
        user u drawing from the ChaCha12 stream ``u // 1024`` of ``key`` (32 bytes that
        :meth:`sample` draws from its generator), so the bits do not depend on the number
        of threads. Before this kernel the 16 words per 64 bits came from the generator
        itself: the distribution is the same, the reports of a given seed differ."""
        words = _core.cms_flip_words(key, start, c, self.m, self.F, self.unit_bits)
        return words.reshape(c, self.words)

    def sample(self, n: int, rng: np.random.Generator,
               buckets: Callable[[slice, np.ndarray], np.ndarray], out: np.ndarray) -> None:
        """Fill ``out`` (structured, with the ``fields()``) for n users; ``buckets(sl,
        rows)`` gives the bucket ``h_row(v)`` of the users ``sl`` at their drawn rows."""
        unit = np.uint64(self.F)
        if not self.hadamard:  # the key of the flips' ChaCha streams, from the generator
            key = rng.bit_generator.random_raw(4).astype("<u8").tobytes()
        for start in range(0, n, _CHUNK):
            sl = slice(start, min(n, start + _CHUNK))
            c = sl.stop - sl.start
            rows = rng.integers(0, self.d, size=c, dtype=np.uint16)
            h = buckets(sl, rows.astype(np.int64))
            block = out[sl]
            block["row"] = rows
            if self.hadamard:
                col = rng.integers(0, self.m, size=c, dtype=np.uint16)
                flip = (rng.bit_generator.random_raw(c) >> np.uint64(11)) < unit
                plus = 1 - _parity(col.astype(np.uint64) & h.astype(np.uint64))  # H[l,h]=+1
                block["col"] = col
                block["bit"] = plus ^ flip.astype(np.uint8)
            else:
                words = self._flip_words(key, start, c)
                words[np.arange(c), h >> 6] ^= np.uint64(1) << (h & 63).astype(np.uint64)
                block["bits"] = words

    # -- checks and sums --------------------------------------------------------------------

    def invalid_mask(self, array: np.ndarray) -> np.ndarray:
        """Boolean mask of the malformed reports (row >= d; HCMS column >= m or bit > 1;
        CMS a bit set past m)."""
        bad = array["row"] >= self.d
        if self.hadamard:
            bad |= (array["col"] >= self.m) | (array["bit"] > 1)
        elif self.m % 64:
            pad = ~np.uint64((1 << (self.m % 64)) - 1)
            bad |= (array["bits"][:, -1] & pad) != 0
        return bad

    def describe(self, report: Any) -> str:
        if int(report["row"]) >= self.d:
            return f"row {int(report['row'])} is not in [0, d = {self.d})"
        if self.hadamard:
            return (f"column {int(report['col'])} (must be < m = {self.m}) or bit "
                    f"{int(report['bit'])} (must be 0 or 1)")
        return f"a bit is set past the m = {self.m} buckets of the sketch"

    def absorb(self, sums: np.ndarray, array: np.ndarray) -> None:
        """Add the reports' contribution to the integer sums (in place)."""
        d, m = self.d, self.m
        rows = array["row"].astype(np.int64)
        if self.hadamard:
            # one count per (row, column, bit): [..., 0] bit 0, [..., 1] bit 1
            cell = rows * (2 * m) + array["col"].astype(np.int64) * 2 + array["bit"]
            both = np.bincount(cell, minlength=2 * d * m).reshape(d, m, 2)
            sums[0] += both[..., 0] + both[..., 1]
            sums[1] += both[..., 1]
            return
        sizes = np.bincount(rows, minlength=d)
        sums[:, m] += sizes
        # the whole reports (bytes, as stored) grouped by row (a radix argsort of the uint16
        # rows, one gather of whole records), then each row's column counts by the library's
        # packed-bit counter: OUE's exact Rust aggregation over the records' bits, most
        # significant bit of each byte first, so that bucket b (byte b // 8 of the
        # little-endian words, bit b % 8) is bit 8 * (offset + b // 8) + 7 - b % 8
        size, offset = array.dtype.itemsize, array.dtype.fields["bits"][1]
        order = np.argsort(array["row"], kind="stable")
        records = np.take(array.view(np.dtype((np.void, size))), order)
        packed = records.view(np.uint8).reshape(records.shape[0], size)
        counter = _bit_counter(size)
        counts = np.zeros(8 * size, dtype=np.uint64)
        ends = np.cumsum(sizes)
        for j in np.flatnonzero(sizes):
            counts[:] = 0
            counter.aggregate(packed[ends[j] - sizes[j]:ends[j]], counts, False)
            sums[j, :m] += counts.reshape(-1, 8)[offset:, ::-1].reshape(-1)[:m].astype(np.int64)

    def check_sums(self, sums: np.ndarray, n: int) -> None:
        if self.hadamard:
            if (sums < 0).any() or (sums[1] > sums[0]).any() or int(sums[0].sum()) != n:
                raise ValueError("the sums are not those of n reports")
        else:
            per_row = sums[:, self.m]
            if (sums < 0).any() or (sums[:, :self.m] > per_row[:, None]).any() \
                    or int(per_row.sum()) != n:
                raise ValueError("the sums are not those of n reports")

    def support_table(self, sums: np.ndarray) -> np.ndarray:
        """(d, m) int64: for CMS the 1-bit counts; for HCMS the inverse-transformed signed
        sums ``(T_j H)[b]`` (T_j[l] = sum of the ±1 bits of row j, column l; exact)."""
        if not self.hadamard:
            return np.ascontiguousarray(sums[:, :self.m])
        # T_j H by the exact int64 transform (|values| <= n: the same integers as the
        # float64 transform, which is exact below 2**53)
        signed = 2 * sums[1] - sums[0]
        return np.stack([_core.fwht_int(row) for row in signed])

    def frequencies(self, total: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """Estimates and standard errors from ``total = sum_j table[j, h_j(t)]`` of n reports.

        CMS: total = B, the reports whose bit at their row's bucket of t is 1;
        f = m/(m-1) (c B/n + (1-c)/2 - 1/m). HCMS: total = U, the sum of the reports' ±1
        bits times ``H[l, h_j(t)]``; f = m/(m-1) (c U/n - 1/m)."""
        m, c = self.m, self.c
        a = m / (m - 1)
        mean = total / n
        if self.hadamard:
            est = a * (c * mean - 1.0 / m)
            se = a * c * np.sqrt(np.maximum(1.0 - mean**2, 0.0) / n)
        else:
            est = a * (c * mean + (1.0 - c) / 2 - 1.0 / m)
            se = a * c * np.sqrt(mean * (1.0 - mean) / n)
        return est, se

    def channel(self, max_entries: int = 2**22) -> np.ndarray:
        """The exact channel: rows every tuple ``(h_0, ..., h_{d-1})`` of buckets (row index
        ``sum_j h_j m**(d-1-j)``); columns CMS ``j * 2**m + sum_l b_l 2**l`` (b the bits),
        HCMS ``(j * m + l) * 2 + bit``."""
        d, m, q = self.d, self.m, self.q
        rows = m**d
        cols = d * (2 * m if self.hadamard else 2**m)
        if rows * cols > max_entries:
            raise ValueError(f"the channel has {rows} × {cols} entries, more than max_entries "
                             f"= {max_entries}")
        tuples = np.array(np.unravel_index(np.arange(rows), (m,) * d)).T  # (rows, d)
        Q = np.zeros((rows, d, cols // d))
        if self.hadamard:
            ls = np.arange(m)
            for j in range(d):
                plus = 1 - _parity((ls[None, :] & tuples[:, j:j + 1]).astype(np.uint64))
                for bit in (0, 1):
                    Q[:, j, bit::2] = np.where(plus == bit, 1 - q, q) / (d * m)
        else:
            patterns = (np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1  # (2**m, m)
            for j in range(d):
                truth = (np.arange(m)[None, :] == tuples[:, j:j + 1]).astype(int)  # (rows, m)
                differ = (patterns[None, :, :] != truth[:, None, :]).sum(axis=2)
                Q[:, j, :] = q**differ * (1 - q)**(m - differ) / d
        return Q.reshape(rows, cols)


def _check_shape(m: Any, d: Any, hadamard: Any) -> Tuple[int, int, bool]:
    if not isinstance(hadamard, (bool, np.bool_)):
        raise TypeError(f"hadamard must be a bool, got {type(hadamard).__name__}")
    m = integer(m, "m", minimum=2, maximum=MAX_M)
    d = integer(d, "d", minimum=1, maximum=MAX_D)
    if hadamard and m & (m - 1):
        raise ValueError(f"m = {m} is not a power of two: HCMS needs m = 2**j (the Hadamard "
                         "transform)")
    if d * m > MAX_CELLS:
        raise ValueError(f"d * m = {d * m} sketch cells is more than {MAX_CELLS}")
    return m, d, bool(hadamard)


@register_protocol
class CountMeanSketch(HeavyHitterProtocol):
    """Apple's count-mean sketch (CMS), or its Hadamard variant (HCMS) with
    ``hadamard=True``: a frequency oracle over items, from one report per user.

    Apple Differential Privacy Team, "Learning with Privacy at Scale", Apple Machine
    Learning Journal, 2017.

    Items are hashed to ``v = h64 >> (64 - bits)`` (:mod:`ldpdist.heavy_hitters.items`);
    the sketch's d public row hashes ``h_j`` map v into ``[0, m)`` (module documentation).
    A user draws a row j uniformly, then

    * CMS: sends j and the m-bit vector that is 1 at ``h_j(v)`` and 0 elsewhere, every bit
      flipped independently with probability ``q ≈ 1/(1 + e^(ε/2))``;
    * HCMS (m a power of two): draws a column l uniformly and sends (j, l) and the bit
      ``[H[l, h_j(v)] = +1]`` (H the m × m Sylvester–Hadamard matrix,
      ``H[l, b] = (-1)^popcount(l & b)``), flipped with probability ``q ≈ 1/(1 + e^ε)``.

    q is the smallest multiple of 2**-16 (CMS) or 2**-53 (HCMS) at least the formula, so
    ``realized_epsilon`` (``2 ln((1-q)/q)``, resp. ``ln((1-q)/q)``) is at most ε.

    The server keeps integer sums
    (:class:`~ldpdist.heavy_hitters.CountMeanSketchAggregator`) and estimates a
    candidate t by the paper's debiased estimator
    ``m/(m-1) (mean_j M[j, h_j(t)] / n - 1/m)``. With these fixed hashes it is exactly
    unbiased for ``f(t) + m/(m-1) (C(t) - (1 - f(t))/m)``, where
    ``C(t) = sum over items y != t of f(y) · (fraction of rows j with h_j(y) = h_j(t))``:
    the frequency plus the mass of the items colliding with t beyond its expected value
    (zero on average over random hash functions, which is the paper's m/(m-1) correction).
    Given a dictionary of candidates, the aggregator can estimate them jointly, removing
    the collisions between the candidates, and by default combines the two estimates by
    their estimated mean squared errors
    (:meth:`~ldpdist.heavy_hitters.CountMeanSketchAggregator.estimate`, ``joint``).

    Parameters
    ----------
    epsilon : float
        Privacy per user (ε > 0).
    m : int, default 1024
        Sketch width (buckets per row), 2 ≤ m ≤ 2**16; a power of two for HCMS. A CMS
        report carries m bits.
    d : int, default 64
        Number of rows (hash functions), d * m ≤ 2**24.
    hadamard : bool, default False
        HCMS instead of CMS.
    top : int, default 32
        Default number of items
        :meth:`~ldpdist.heavy_hitters.CountMeanSketchAggregator.identify` returns.
    bits : int, default 64
        Width of the hashed item domain.
    seed : int, default 0
        Public seed of the item hash and of the row hashes.

    Examples
    --------
    >>> from ldpdist.heavy_hitters import CountMeanSketch
    >>> cms = CountMeanSketch(epsilon=4.0, m=256, d=16)
    >>> round(cms.q * 2**16), cms.realized_epsilon <= 4.0
    (7813, True)
    """

    protocol_name = "CMS"
    _reports_noun = "cms"

    def __init__(self, epsilon: float, *, m: int = 1024, d: int = 64, hadamard: bool = False,
                 top: int = 32, bits: int = 64, seed: int = 0):
        self._epsilon = check_epsilon(epsilon)
        self._m, self._d, self._hadamard = _check_shape(m, d, hadamard)
        self._top = integer(top, "top", minimum=1, maximum=2**20)
        self._bits = integer(bits, "bits", minimum=1, maximum=64)
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        self._sketch = Sketch(self._epsilon, self._m, self._d, self._hadamard)
        self._salts = sketch_salts(self._seed, self._d, b"item")
        self._dtype = np.dtype(self._sketch.fields())

    def _params(self) -> Dict[str, Any]:
        return {"epsilon": self._epsilon, "m": self._m, "d": self._d,
                "hadamard": self._hadamard, "top": self._top, "bits": self._bits,
                "seed": self._seed}

    # -- parameters --------------------------------------------------------------------

    @property
    def m(self) -> int:
        """Sketch width."""
        return self._m

    @property
    def d(self) -> int:
        """Number of rows (hash functions)."""
        return self._d

    @property
    def hadamard(self) -> bool:
        """True for HCMS."""
        return self._hadamard

    @property
    def top(self) -> int:
        """Default number of items identify returns."""
        return self._top

    @property
    def q(self) -> float:
        """The flip probability (exact: a multiple of 2**-16 for CMS, 2**-53 for HCMS)."""
        return self._sketch.q

    @property
    def realized_epsilon(self) -> float:
        """Exact ε of the channel: ``2 ln((1-q)/q)`` (CMS) or ``ln((1-q)/q)`` (HCMS)."""
        return self._sketch.realized_epsilon

    @property
    def groups(self) -> int:
        """One group: every user runs the same channel."""
        return 1

    @property
    def report_dtype(self) -> np.dtype:
        """CMS: ``row`` (uint16) and ``bits`` (ceil(m/64) little-endian uint64 words, bucket
        b at bit ``b % 64`` of word ``b // 64``, padding bits zero); HCMS: ``row``,
        ``col`` (uint16) and ``bit`` (uint8, 1 for +1)."""
        return self._dtype

    @property
    def salts(self) -> np.ndarray:
        """The row salts (uint64), public."""
        return self._salts.copy()

    def buckets(self, values: Any) -> np.ndarray:
        """``h_j(v)`` of hashed values, shape (len(values), d), int64."""
        v = np.asarray(values, dtype=np.uint64).reshape(-1, 1)
        return sketch_buckets(v, self._salts[None, :], self._m)

    def group_channel(self, group: int = 0, max_entries: int = 2**22) -> np.ndarray:
        """The exact channel (rows and columns as below): rows are the tuples of buckets
        ``(h_0(v), ..., h_{d-1}(v))`` in lexicographic order, i.e. row
        ``sum_j h_j(v) m**(d-1-j)`` is the channel of every item with those buckets."""
        integer(group, "group", minimum=0, maximum=0)
        return self._sketch.channel(max_entries)

    # -- client ------------------------------------------------------------------------

    def _privatize_hashed(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(values.size, dtype=self._dtype)
        salts, m = self._salts, self._m
        self._sketch.sample(values.size, rng,
                            lambda sl, rows: sketch_buckets(values[sl], salts[rows], m), out)
        return out

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        return self._sketch.invalid_mask(array)

    def _describe_invalid(self, report: Any) -> str:
        return self._sketch.describe(report)


class CountMeanSketchAggregator(SketchAggregator):
    """Integer sums of CMS/HCMS reports: CMS ``(d, m + 1)`` (per row the count of 1-bits of
    each column, then the row's number of reports); HCMS ``(2, d, m)`` (per row and column
    the number of reports, and of those with bit 1). Merging adds them."""

    def _state_shape(self) -> Tuple[int, ...]:
        return self.protocol._sketch.state_shape()

    def _absorb(self, sums: np.ndarray, reports: np.ndarray) -> None:
        self.protocol._sketch.absorb(sums, reports)

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        self.protocol._sketch.check_sums(sums, n)

    def _estimate_values(self, values: np.ndarray, joint: Optional[bool] = None
                         ) -> Tuple[np.ndarray, np.ndarray]:
        if self.n == 0:
            raise ValueError("no reports: add reports before estimating")
        with self._lock:
            table = self.protocol._sketch.support_table(self._sums)  # a fresh array
            n = self.n
        return _estimate_from_table(self.protocol, table, n, values, joint)

    def estimate(self, candidates: Iterable[Any], joint: Optional[bool] = None
                 ) -> ItemFrequencies:
        """Frequencies of candidate items, in their order, with standard errors.

        Parameters
        ----------
        candidates : sequence of items
            The items to estimate (not empty); a repeated item gets the same estimate at
            each of its places.
        joint : bool, optional
            ``True``: the joint estimate, which removes the collisions between the
            candidates (user guide, "Count-mean sketch", the joint estimate): exactly
            unbiased when the users' items are all among the candidates; items outside
            them are assumed to collide with each candidate at the rate of a random hash
            (as the independent estimator assumes for every item). Refused when the C
            distinct candidates exceed the ``d (m - 1)`` degrees of freedom of the
            sketch. ``False``: each
            candidate independently, by the paper's estimator, exactly unbiased for the
            item's frequency plus its collision term (see
            :class:`~ldpdist.heavy_hitters.CountMeanSketch`). Default (``None``): while
            ``λ = (C - 1) / (d (m - 1)) <= 1/2``, the combination
            ``(1 - w) independent + w joint`` of the smallest estimated mean squared error
            summed over the candidates, ``w = max(0, 1 - V / ||independent - joint||^2)``
            with ``V = (m - 1) / m · λ / (1 - λ) · sum(σ^2)`` the joint estimate's excess
            variance (σ the independent standard errors): ``||independent - joint||^2 - V``
            estimates the squared collision bias that the joint estimate removes (user
            guide, the joint estimate; ``decollide.blend``). w is near 1 where the
            collisions dominate the privacy noise and 0 (exactly the independent estimates)
            where no bias is detected; the result does not record w. Past ``λ = 1/2``:
            the independent estimates.

        Returns
        -------
        ItemFrequencies
            Estimates and standard errors. The joint estimate's standard errors are
            approximate: the independent estimator's, times
            ``sqrt(((m - 1) / (1 - λ) + 1) / m)``, the average variance inflation of the
            solve over random hash functions (per candidate it varies by a few percent);
            the default's, times ``sqrt(1 + w^2 (m - 1) / m · λ / (1 - λ))``. Neither
            covers the bias left (that of items outside the candidates, and for the
            default the ``1 - w`` share of the collisions between candidates).
        """
        values = _item_list(candidates)
        if not values:
            raise ValueError("candidates is empty")
        hashed = self.protocol.hash(values)
        est, se = self._estimate_values(hashed, joint)
        return ItemFrequencies(hashed, est, se, values, self.n)

    def identify(self, top: Optional[int] = None,
                 candidates: Optional[Iterable[Any]] = None,
                 joint: Optional[bool] = None) -> ItemFrequencies:
        """The ``top`` candidates with the largest estimates, largest first. A sketch
        cannot enumerate the hashed domain: a dictionary of candidates is required.
        ``joint`` as in :meth:`estimate` (by default the combination of the independent
        and joint estimates of the smallest estimated mean squared error, when the
        candidates are at most half the sketch's ``d (m - 1)`` degrees of freedom)."""
        if candidates is None:
            raise ValueError("CMS/HCMS cannot enumerate the 2**bits hashed values: identify "
                             "needs a dictionary of candidate items (candidates=...); SFP finds "
                             "unknown strings")
        protocol = self.protocol
        top = protocol.top if top is None else integer(top, "top", minimum=1, maximum=2**20)
        values = _item_list(candidates)
        if not values:
            raise ValueError("candidates is empty")
        hashed = protocol.hash(values)
        if np.unique(hashed).size == hashed.size:  # distinct hashes: the items are named
            named = values
        else:  # repeated items or colliding hashes: one per hash, or the collision error
            names = protocol._name_items(values)
            hashed = np.array(list(names), dtype=np.uint64)
            named = list(names.values())
        est, se = self._estimate_values(hashed, joint)
        order = np.lexsort((hashed, -est))[:top]
        return ItemFrequencies(hashed[order], est[order], se[order],
                               [named[i] for i in order.tolist()], self.n)


#: The default weighs in the joint estimate while λ = (C - 1) / (d (m - 1)) is at most this
#: (beyond, the independent estimates: the solve slows and the variance inflates).
JOINT_LOAD = 0.5
#: The joint solve stops within this fraction of the smallest standard error of the exact
#: solution (root mean square over the candidates).
SOLVE_PRECISION = 0.01


def _estimate_from_table(protocol: CountMeanSketch, table: np.ndarray, n: Any,
                         values: np.ndarray, joint: Optional[bool]
                         ) -> Tuple[np.ndarray, np.ndarray]:
    """Estimates and standard errors of the hashed ``values`` from the support table
    (``Sketch.support_table``, shape (d, m)) of n reports (integers; floats of expected
    sums in tests): independent, or jointly (the
    de-collision solve of :mod:`ldpdist.heavy_hitters.decollide` over the distinct
    values, R = d rows of g = m buckets)."""
    if joint is not None and not isinstance(joint, (bool, np.bool_)):
        raise TypeError(f"joint must be a bool or None, got {type(joint).__name__}")
    sketch, salts, m, d = protocol._sketch, protocol._salts, protocol.m, protocol.d
    table = table.reshape(-1)
    unique, inverse = np.unique(values, return_inverse=True)
    lam = decollide.load(unique.size, d, m)
    choose = joint is None
    if choose:  # the joint solve, then the blend of the smallest estimated MSE
        joint = lam <= JOINT_LOAD
    if not joint:
        return sketch.frequencies(_bucket_totals(values, salts, m, table), n)
    if lam >= 1.0:
        raise ValueError(f"{unique.size} distinct candidates are more than the d (m - 1) = "
                         f"{d * (m - 1)} the sketch can tell apart: the joint estimate is not "
                         "identifiable (joint=False gives the independent estimates)")
    # the cells j * m + h_j(x) that support x (the row hashes computed in Rust); the
    # supports summed in increasing j, exact (integers below 2**53)
    cells = decollide.Cells.sketch_hash(np.ascontiguousarray(unique, dtype=np.uint64),
                                        np.ascontiguousarray(salts, dtype=np.uint64), m)
    est, se = sketch.frequencies(cells.gather(np.asarray(table, dtype=np.float64)), n)
    # stop when the root-mean-square distance to the exact solution is at most 1% of the
    # smallest standard error: ||x - x*|| <= ||residual|| / (the smallest eigenvalue of D,
    # about (1 - sqrt(λ))**2)
    atol = (SOLVE_PRECISION * float(se.min()) * (1.0 - math.sqrt(lam))**2
            * math.sqrt(unique.size))
    solution = decollide.solve(est, cells, d, m, atol=atol)
    weight = decollide.blend(est, solution.x, se**2, lam, m).weight if choose else 1.0
    if weight == 0.0:  # no detectable collision bias: the independent estimates
        return est[inverse], se[inverse]
    if not solution.converged:
        warnings.warn(f"the joint estimate did not converge in {solution.iterations} "
                      "conjugate-gradient steps: its estimates may be off (joint=False gives "
                      "the independent estimates)", RuntimeWarning, stacklevel=4)
    if not choose:  # joint=True
        se = se * math.sqrt(((m - 1) / (1.0 - lam) + 1.0) / m)
        return solution.x[inverse], se[inverse]
    # the default: (1 - w) independent + w joint, variance (1 + w^2 κ) σ^2
    mixed = est + weight * (solution.x - est)
    se = se * math.sqrt(1.0 + weight**2 * (m - 1) / m * lam / (1.0 - lam))
    return mixed[inverse], se[inverse]


CountMeanSketch.aggregator_class = CountMeanSketchAggregator
