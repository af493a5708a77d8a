"""Independent pure-Python reference for ldpdist's seeded sign-matrix generator.

Written from the specification in the module documentation of ``rust/signs.rs`` (and the
sampler descriptions in ``rust/rng.rs``), *not* from the Rust code paths: nothing here
imports ldpdist. It is deliberately simple and slow; it is used

* by ``make_sign_test_vectors.py`` to produce the committed test vectors, and
* by ``test_signs.py`` to check the library column by column.

Contents
--------
ChaCha20 (Bernstein's original layout)
    State words 0–3 are the constants "expand 32-byte k", 4–11 the key as eight little-endian
    u32 words, 12–13 a 64-bit block counter (low word first) starting at 0, and 14–15 a 64-bit
    nonce (low word first). Each block yields 16 keystream words (state after 20 rounds plus
    the input state), consumed in order.
Sign-column generator
    ``column(seed, m, j, kind, p)``: the key is ``seed.to_bytes(32, "little")``, the nonce is
    the column index ``j``. A "64-bit draw" is ``lo + 2**32 * hi`` for two consecutive
    keystream words.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from typing import Iterable, List, Sequence

MASK32 = 0xFFFFFFFF
CONSTANTS = struct.unpack("<4I", b"expand 32-byte k")  # 0x61707865, 0x3320646e, ...

KINDS = ("rademacher", "bernoulli", "balanced")


# --------------------------------------------------------------------------------------
# ChaCha20


def _rotl(v: int, c: int) -> int:
    return ((v << c) & MASK32) | (v >> (32 - c))


def quarter_round(a: int, b: int, c: int, d: int):
    """The ChaCha quarter round on four u32 values (RFC 8439, section 2.1)."""
    a = (a + b) & MASK32
    d = _rotl(d ^ a, 16)
    c = (c + d) & MASK32
    b = _rotl(b ^ c, 12)
    a = (a + b) & MASK32
    d = _rotl(d ^ a, 8)
    c = (c + d) & MASK32
    b = _rotl(b ^ c, 7)
    return a, b, c, d


_ROUNDS = (
    (0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),  # columns
    (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14),  # diagonals
)


def block_from_state(state: Sequence[int], rounds: int = 20) -> List[int]:
    """The raw ChaCha block function: ``rounds`` rounds (20 for ChaCha20) plus feed-forward.

    ``state`` is any 16-word input state; this is the layout-independent core, so it can be
    checked against the RFC 8439 vectors (32-bit counter + 96-bit nonce) as well.
    """
    if len(state) != 16:
        raise ValueError("a ChaCha state has 16 words")
    if rounds % 2:
        raise ValueError("rounds come in double rounds")
    x = list(state)
    for _ in range(rounds // 2):
        for a, b, c, d in _ROUNDS:
            x[a], x[b], x[c], x[d] = quarter_round(x[a], x[b], x[c], x[d])
    return [(x[i] + state[i]) & MASK32 for i in range(16)]


def djb_state(key: bytes, counter: int, nonce: int) -> List[int]:
    """Input state of Bernstein's ChaCha20: 64-bit counter (words 12–13), 64-bit nonce
    (words 14–15), both little-endian."""
    if len(key) != 32:
        raise ValueError("a ChaCha20 key is 32 bytes")
    if not (0 <= counter < 2**64 and 0 <= nonce < 2**64):
        raise ValueError("counter and nonce are 64-bit")
    return (
        list(CONSTANTS)
        + list(struct.unpack("<8I", key))
        + [counter & MASK32, counter >> 32, nonce & MASK32, nonce >> 32]
    )


def djb_block(key: bytes, counter: int, nonce: int, rounds: int = 20) -> List[int]:
    """Keystream block ``counter`` of the stream ``(key, nonce)`` as 16 u32 words."""
    return block_from_state(djb_state(key, counter, nonce), rounds)


def words_to_bytes(words: Iterable[int]) -> bytes:
    words = list(words)
    return struct.pack(f"<{len(words)}I", *words)


def keystream_bytes(key: bytes, nonce: int, nbytes: int, counter: int = 0) -> bytes:
    """The first ``nbytes`` keystream bytes of stream ``nonce`` from block ``counter``."""
    out = bytearray()
    while len(out) < nbytes:
        out += words_to_bytes(djb_block(key, counter, nonce))
        counter += 1
    return bytes(out[:nbytes])


class WordStream:
    """The keystream of ``(key, nonce)`` as a sequence of u32 words (block counter from 0).

    ``rounds=12`` gives ChaCha12, which ldpdist uses for private sampling (rust/rng.rs).
    """

    def __init__(self, key: bytes, nonce: int, rounds: int = 20):
        self.key = key
        self.nonce = nonce
        self.rounds = rounds
        self.counter = 0
        self.buffer: List[int] = []
        self.position = 0
        self.consumed = 0  # words handed out so far

    def next_u32(self) -> int:
        if self.position == len(self.buffer):
            self.buffer = djb_block(self.key, self.counter, self.nonce, self.rounds)
            self.counter += 1
            self.position = 0
        word = self.buffer[self.position]
        self.position += 1
        self.consumed += 1
        return word

    def next_u64(self) -> int:
        """A 64-bit draw: two consecutive words ``lo, hi`` give ``lo + 2**32 * hi``."""
        lo = self.next_u32()
        hi = self.next_u32()
        return lo + (hi << 32)


class ReplayStream:
    """Replays fixed u32 words (to pin the samplers' arithmetic word by word)."""

    def __init__(self, words: Sequence[int]):
        self.words = list(words)
        self.consumed = 0

    def next_u32(self) -> int:
        word = self.words[self.consumed]
        self.consumed += 1
        return word

    next_u64 = WordStream.next_u64


# --------------------------------------------------------------------------------------
# Exact samplers (rust/rng.rs, described word by word there)


def uniform_below(rng, n: int) -> int:
    """Lemire's method on 32-bit words: uniform in [0, n) for 1 <= n <= 2**32.

    Draw x; product = x*n; reject while (product mod 2**32) < (2**32 - n) mod n; return
    product >> 32.
    """
    if not 1 <= n <= 2**32:
        raise ValueError("n must lie in [1, 2**32]")
    threshold = (2**32 - n) % n
    while True:
        product = rng.next_u32() * n
        if (product & MASK32) >= threshold:
            return product >> 32


def bernoulli(rng, p) -> bool:
    """Exact Bernoulli(p) of ``rng::BernoulliThreshold``.

    ``p * 2**64 = whole + rest``; draw a 64-bit w: true iff w < whole when w != whole; on the
    tie w == whole, recurse on ``rest`` (false at once when rest == 0).
    """
    scaled = Fraction(p) * 2**64
    if not 0 <= scaled <= 2**64:
        raise ValueError("p must lie in [0, 1]")
    while True:
        whole = math.floor(scaled)
        w = rng.next_u64()
        if w != whole:
            return w < whole
        rest = scaled - whole
        if rest == 0:
            return False
        scaled = rest * 2**64


def balanced_ones(m: int, p: float) -> int:
    """``floor(p*m + 1/2)`` evaluated in IEEE double arithmetic, as the spec states."""
    return math.floor(float(p) * float(m) + 0.5)


# --------------------------------------------------------------------------------------
# Sign columns


def seed_key(seed: int) -> bytes:
    return int(seed).to_bytes(32, "little")


def column_from_stream(rng, m: int, kind: str, p: float) -> List[int]:
    """Column of length m (list of ±1) drawn from a word stream, per the spec."""
    if m < 1:
        raise ValueError("m must be >= 1")
    if kind == "rademacher":
        out = []
        while len(out) < m:
            draw = rng.next_u64()
            for bit in range(64):
                out.append(1 if (draw >> bit) & 1 else -1)
        return out[:m]
    if kind == "bernoulli":
        return [1 if bernoulli(rng, p) else -1 for _ in range(m)]
    if kind == "balanced":
        ones = balanced_ones(m, p)
        perm = list(range(m))
        for t in range(ones):
            r = t + uniform_below(rng, m - t)
            perm[t], perm[r] = perm[r], perm[t]
        out = [-1] * m
        for row in perm[:ones]:
            out[row] = 1
        return out
    raise ValueError(f"unknown kind {kind!r}")


def column(seed: int, m: int, j: int, kind: str = "rademacher", p: float = 0.5) -> List[int]:
    """Column ``j`` of the m-row sign matrix with this seed, as a list of ±1."""
    return column_from_stream(WordStream(seed_key(seed), j), m, kind, p)


def rademacher_from_bytes(data: bytes, m: int) -> List[int]:
    """The spec's equivalent statement for rademacher: the first m keystream *bits*, least
    significant bit of each byte first (+1 for a 1 bit)."""
    return [1 if (data[i // 8] >> (i % 8)) & 1 else -1 for i in range(m)]

