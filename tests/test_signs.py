"""Seeded sign matrices: the generator is pinned by an independent ChaCha20 reference and by
committed test vectors; columns are pure functions of (seed, j); packed products are exact."""

from __future__ import annotations

import json
import math
import pathlib
import struct

import numpy as np
import pytest

import chacha_reference as ref
from conftest import digest, run_python
from ldpdist import kernels as K

DATA = pathlib.Path(__file__).resolve().parent / "data" / "sign_test_vectors.json"

KIND_CONFIGS = [("rademacher", 0.5), ("bernoulli", 0.3), ("bernoulli", 0.9), ("balanced", 0.5),
                ("balanced", 0.25)]


# --------------------------------------------------------------------------------------
# The reference ChaCha20 against published vectors (validates the reference itself)


def test_reference_quarter_round_rfc8439_2_1_1():
    assert ref.quarter_round(0x11111111, 0x01020304, 0x9B8D6F43, 0x01234567) == (
        0xEA2A92F4, 0xCB1CF8CE, 0x4581472E, 0x5881C4BB)


def test_reference_block_function_rfc8439_2_3_2():
    # RFC 8439 uses a 32-bit counter + 96-bit nonce in the same 16-word state: word 12 is the
    # counter (1), words 13–15 the nonce 00:00:00:09 00:00:00:4a 00:00:00:00.
    key = bytes(range(32))
    state = list(ref.CONSTANTS) + list(struct.unpack("<8I", key)) + [
        1, 0x09000000, 0x4A000000, 0x00000000]
    out = ref.block_from_state(state)
    assert out[:4] == [0xE4E7F110, 0x15593BD1, 0x1FDD0F50, 0xC47120A3]
    assert ref.words_to_bytes(out).hex() == (
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")
    # The same state in Bernstein's layout: 64-bit counter = words 12–13, nonce = 14–15.
    djb = ref.djb_block(key, counter=1 | (0x09000000 << 32), nonce=0x4A000000)
    assert djb == out


# draft-agl-tls-chacha20poly1305-04, section 7 (Bernstein layout, 64-bit nonce, counter 0):
# (key, 8 nonce bytes, keystream).
DJB_VECTORS = [
    (bytes(32), bytes(8),
     "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
     "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"),
    (bytes(31) + b"\x01", bytes(8),
     "4540f05a9f1fb296d7736e7b208e3c96eb4fe1834688d2604f450952ed432d41"
     "bbe2a0b6ea7566d2a5d1e7e20d42af2c53d792b1c43fea817e9ad275ae546963"),
    (bytes(32), bytes(7) + b"\x01",
     "de9cba7bf3d69ef5e786dc63973f653a0b49e015adbff7134fcb7df137821031"
     "e85a050278a7084527214f73efc7fa5b5277062eb7a0433e445f41e31afab757"),
    (bytes(32), b"\x01" + bytes(7),
     "ef3fdfd6c61578fbf5cf35bd3dd33b8009631634d21e42ac33960bd138e50d32"
     "111e4caf237ee53ca8ad6426194a88545ddc497a0b466e7d6bbdb0041b2f586b"),
    (bytes(range(32)), bytes(range(8)),  # four blocks: exercises the counter
     "f798a189f195e66982105ffb640bb7757f579da31602fc93ec01ac56f85ac3c1"
     "34a4547b733b46413042c9440049176905d3be59ea1c53f15916155c2be8241a"
     "38008b9a26bc35941e2444177c8ade6689de95264986d95889fb60e84629c9bd"
     "9a5acb1cc118be563eb9b3a4a472f82e09a7e778492b562ef7130e88dfe031c7"
     "9db9d4f7c7a899151b9a475032b63fc385245fe054e3dd5a97a5f576fe064025"
     "d3ce042c566ab2c507b138db853e3d6959660996546cc9c4a6eafdc777c040d7"
     "0eaf46f76dad3979e5c5360c3317166a1c894c94a371876a94df7628fe4eaaf2"
     "ccb27d5aaae0ad7ad0f9d4b6ad3b54098746d4524d38407a6deb3ab78fab78c9"),
]


@pytest.mark.parametrize("key, nonce, stream", DJB_VECTORS)
def test_reference_keystream_matches_djb_vectors(key, nonce, stream):
    expected = bytes.fromhex(stream)
    got = ref.keystream_bytes(key, int.from_bytes(nonce, "little"), len(expected))
    assert got == expected


@pytest.mark.parametrize("key, nonce, stream", DJB_VECTORS)
def test_library_rademacher_column_is_the_published_keystream(key, nonce, stream):
    # The spec: a rademacher column is the first m keystream bits, LSB of each byte first,
    # with seed = key as a little-endian integer and j = nonce as a little-endian u64.
    expected_bytes = bytes.fromhex(stream)
    m = 8 * len(expected_bytes)
    seed = int.from_bytes(key, "little")
    j = int.from_bytes(nonce, "little")
    want = np.array(ref.rademacher_from_bytes(expected_bytes, m), dtype=np.int8)
    np.testing.assert_array_equal(K.sign_column(seed, m, j), want)
    if j < 64:
        np.testing.assert_array_equal(K.SignMatrix(seed, m, j + 1).column(j), want)


def test_reference_samplers_word_by_word():
    # Lemire, n = 3: 2^32 mod 3 = 1, so the word 0 (low product 0) is rejected.
    rng = ref.ReplayStream([0, 0x80000000])
    assert ref.uniform_below(rng, 3) == 1 and rng.consumed == 2
    rng = ref.ReplayStream([0xFFFFFFFF])
    assert ref.uniform_below(rng, 10) == 9 and rng.consumed == 1
    rng = ref.ReplayStream([0x12345678])
    assert ref.uniform_below(rng, 1) == 0 and rng.consumed == 1  # n = 1 still uses a word
    # Bernoulli threshold, p = 0.5: whole = 2^63. A tie has remainder 0 → false, one draw.
    rng = ref.ReplayStream([0, 0x80000000])
    assert ref.bernoulli(rng, 0.5) is False and rng.consumed == 2
    rng = ref.ReplayStream([0xFFFFFFFF, 0x7FFFFFFF])
    assert ref.bernoulli(rng, 0.5) is True
    # p = 2^-64 + 2^-65 → whole = 1, rest = 1/2: w = 0 → true; w = 1 ties → second draw
    # decides against 2^63.
    p = 2.0**-64 + 2.0**-65
    assert ref.bernoulli(ref.ReplayStream([0, 0]), p) is True
    assert ref.bernoulli(ref.ReplayStream([1, 0, 0xFFFFFFFF, 0x7FFFFFFF]), p) is True
    assert ref.bernoulli(ref.ReplayStream([1, 0, 0, 0x80000000]), p) is False
    assert ref.bernoulli(ref.ReplayStream([2, 0]), p) is False


def test_reference_balanced_column_follows_the_shuffle_by_hand():
    # m = 4, p = 0.5 → c = 2. Words: u = uniform_below(4) from 0xC0000000 → 3 (swap 0,3),
    # then uniform_below(3) from 0x00000001 → 0 → t + 0 = 1 (no swap). perm = [3, 1, 2, 0].
    rng = ref.ReplayStream([0xC0000000, 0x00000001])
    assert ref.column_from_stream(rng, 4, "balanced", 0.5) == [-1, 1, -1, 1]
    assert rng.consumed == 2


# --------------------------------------------------------------------------------------
# The committed vectors


def load_vectors():
    with open(DATA) as f:
        doc = json.load(f)
    return doc["records"]


VECTORS = load_vectors()


def test_vector_file_covers_the_required_cases():
    kinds = {r["kind"] for r in VECTORS}
    assert kinds == set(K.SIGN_KINDS)
    seeds = {int(r["seed"]) for r in VECTORS}
    assert 0 in seeds and any(s > 2**200 for s in seeds)
    assert {1, 63, 64, 65, 500} <= {r["m"] for r in VECTORS}
    assert {0, 1, 12345, 2**40} <= {r["j"] for r in VECTORS}
    for r in VECTORS:
        assert len(r["first_64_signs"]) == min(r["m"], 64)
        assert set(r["first_64_signs"]) <= {-1, 1}


def test_vector_file_is_what_the_reference_generates():
    import make_sign_test_vectors

    assert DATA.read_text() == make_sign_test_vectors.render(), (
        "tests/data/sign_test_vectors.json is stale: run tests/make_sign_test_vectors.py")


def test_library_columns_equal_the_committed_vectors():
    mismatches = []
    for r in VECTORS:
        seed, m, j, kind, p = int(r["seed"]), r["m"], r["j"], r["kind"], r["p"]
        want = r["first_64_signs"]
        got = K.sign_column(seed, m, j, kind, p)
        assert got.dtype == np.int8 and got.shape == (m,)
        if got[:64].tolist() != want:
            mismatches.append((seed, m, j, kind, p))
    assert not mismatches, f"{len(mismatches)} columns differ, e.g. {mismatches[:3]}"


@pytest.mark.parametrize("kind, p", [("rademacher", 0.5), ("bernoulli", 0.3), ("balanced", 0.25)])
def test_sign_matrix_columns_equal_the_committed_vectors(kind, p):
    records = [r for r in VECTORS if r["kind"] == kind and r["p"] == p and r["j"] <= 12345]
    assert records
    cache = {}
    for r in records:
        seed, m, j = int(r["seed"]), r["m"], r["j"]
        if (seed, m) not in cache:
            cache[(seed, m)] = K.SignMatrix(seed, m, 12346, kind, p)
        assert cache[(seed, m)].column(j)[:64].tolist() == r["first_64_signs"], (seed, m, j)


# --------------------------------------------------------------------------------------
# Whole columns against the live reference


@pytest.mark.parametrize("kind, p", KIND_CONFIGS + [
    ("bernoulli", 0.001), ("bernoulli", 0.999), ("bernoulli", 1 / 3),
    ("balanced", 0.999), ("balanced", 0.001), ("balanced", 0.6065)])
def test_full_columns_equal_the_reference(kind, p):
    for seed, m, j in [(7, 1000, 0), (2**255 + 12345, 129, 3), (3, 500, 2**64 - 1), (1, 1, 5)]:
        want = ref.column(seed, m, j, kind, p)
        assert K.sign_column(seed, m, j, kind, p).tolist() == want, (seed, m, j)


def test_sign_matrix_columns_equal_the_reference_and_sign_column():
    for kind, p in KIND_CONFIGS:
        A = K.SignMatrix(99, 130, 40, kind, p)
        dense = A.to_dense()
        for j in range(40):
            col = A.column(j)
            assert col.dtype == np.int8
            np.testing.assert_array_equal(col, K.sign_column(99, 130, j, kind, p))
            np.testing.assert_array_equal(dense[:, j], col.astype(np.float64))
        for j in (0, 17, 39):
            assert A.column(j).tolist() == ref.column(99, 130, j, kind, p)


def test_column_does_not_depend_on_k():
    for kind, p in KIND_CONFIGS:
        small = K.SignMatrix(5, 70, 3, kind, p)
        large = K.SignMatrix(5, 70, 300, kind, p)
        for j in range(3):
            np.testing.assert_array_equal(small.column(j), large.column(j))


def test_seeds_and_columns_differ():
    a = K.sign_column(1, 256, 0)
    assert not np.array_equal(a, K.sign_column(2, 256, 0))
    assert not np.array_equal(a, K.sign_column(1, 256, 1))
    assert not np.array_equal(a, K.sign_column(1 + 2**200, 256, 0))  # high key bytes matter
    A = K.SignMatrix(3, 128, 200)
    D = A.to_dense()
    assert len({D[:, j].tobytes() for j in range(200)}) == 200


# --------------------------------------------------------------------------------------
# Determinism: across calls, processes and thread counts


def test_same_seed_same_column_across_calls():
    for kind, p in KIND_CONFIGS:
        first = K.sign_column(2024, 333, 77, kind, p)
        for _ in range(3):
            np.testing.assert_array_equal(K.sign_column(2024, 333, 77, kind, p), first)
        A1 = K.SignMatrix(2024, 333, 100, kind, p)
        A2 = K.SignMatrix(2024, 333, 100, kind, p)
        np.testing.assert_array_equal(A1.to_dense(), A2.to_dense())
        np.testing.assert_array_equal(A1.column(77), first)


_DETERMINISM_SNIPPET = """
from ldpdist import kernels as K
for kind, p in [("rademacher", 0.5), ("bernoulli", 0.3), ("balanced", 0.25)]:
    A = K.SignMatrix(31337, 300, 3000, kind, p)
    print(kind, digest(A.to_dense()), digest(K.sign_column(31337, 300, 2**40, kind, p)),
          digest(A.rmatvec(np.arange(300.0) - 150.0)), digest(A.gram_column(5)))
"""


def _local_determinism_lines():
    lines = []
    for kind, p in [("rademacher", 0.5), ("bernoulli", 0.3), ("balanced", 0.25)]:
        A = K.SignMatrix(31337, 300, 3000, kind, p)
        lines.append(" ".join([kind, digest(A.to_dense()),
                               digest(K.sign_column(31337, 300, 2**40, kind, p)),
                               digest(A.rmatvec(np.arange(300.0) - 150.0)),
                               digest(A.gram_column(5))]))
    return lines


def test_same_columns_in_other_processes_and_thread_counts():
    local = _local_determinism_lines()
    outputs = {}
    for threads in ("1", "2", "3", None):  # None: the default pool
        outputs[threads] = run_python(_DETERMINISM_SNIPPET,
                                      env={"RAYON_NUM_THREADS": threads}).split("\n")[:3]
    for threads, lines in outputs.items():
        assert lines == local, f"RAYON_NUM_THREADS={threads} gives different matrices"


# --------------------------------------------------------------------------------------
# Balanced columns


@pytest.mark.parametrize("m, p", [(100, 0.5), (101, 0.5), (500, 0.6065), (64, 0.25), (3, 0.9),
                                  (1, 0.4), (1, 0.6), (65, 0.999), (1000, 0.001), (7, 0.5)])
def test_balanced_columns_have_exactly_the_requested_ones(m, p):
    want = math.floor(p * m + 0.5)
    A = K.SignMatrix(11, m, 200, "balanced", p)
    dense = A.to_dense()
    assert [A.column_ones(j) for j in range(200)] == [want] * 200
    assert ((dense == 1).sum(axis=0) == want).all()
    assert ((dense == -1).sum(axis=0) == m - want).all()
    assert int((K.sign_column(11, m, 10**9, "balanced", p) == 1).sum()) == want


def test_balanced_rows_are_uniformly_covered():
    # Each column puts c ones at uniformly random rows, so every row is +1 with probability
    # c/m in each column: row counts ≈ Binomial(k, c/m). Chi-square with m - 1 degrees of
    # freedom (the total is fixed); 6-sigma band of the chi-square.
    m, k, p = 50, 4000, 0.3
    c = math.floor(p * m + 0.5)
    rows = (K.SignMatrix(8, m, k, "balanced", p).to_dense() == 1).sum(axis=1)
    assert rows.sum() == c * k
    q = c / m
    stat = float((((rows - k * q) ** 2) / (k * q * (1 - q))).sum())
    df = m - 1
    assert df - 6 * math.sqrt(2 * df) < stat < df + 6 * math.sqrt(2 * df), stat


def test_column_ones_counts_plus_ones_for_every_kind():
    for kind, p in KIND_CONFIGS:
        A = K.SignMatrix(4, 129, 60, kind, p)
        D = A.to_dense()
        assert [A.column_ones(j) for j in range(60)] == (D == 1).sum(axis=0).tolist()


# --------------------------------------------------------------------------------------
# Statistics of the random kinds


def test_rademacher_counts_are_binomial():
    m, k = 500, 2000
    D = K.SignMatrix(123456789, m, k).to_dense()
    assert set(np.unique(D).tolist()) == {-1.0, 1.0}
    plus = D == 1
    n = m * k
    total = int(plus.sum())
    assert abs(total - n / 2) < 4 * math.sqrt(n / 4), total
    # Per row (k entries each) and per column (m entries each): chi-square statistics
    # against Binomial(·, 1/2), accepted within 6 sigma of their mean (both tails, so a
    # too-regular generator fails as well as a biased one).
    for counts, size in [(plus.sum(axis=1), k), (plus.sum(axis=0), m)]:
        df = counts.size
        stat = float((((counts - size / 2) ** 2) / (size / 4)).sum())
        assert df - 6 * math.sqrt(2 * df) < stat < df + 6 * math.sqrt(2 * df), (size, stat)
    # Neighbouring rows and neighbouring columns are uncorrelated.
    for lagged in [(D[1:, :] * D[:-1, :]).mean(), (D[:, 1:] * D[:, :-1]).mean()]:
        assert abs(lagged) < 5 / math.sqrt(n), lagged


def test_bernoulli_rate_matches_p():
    m, k = 400, 2500
    for p in (0.3, 0.9, 0.05):
        D = K.SignMatrix(77, m, k, "bernoulli", p).to_dense()
        n = m * k
        ones = int((D == 1).sum())
        assert abs(ones - n * p) < 5 * math.sqrt(n * p * (1 - p)), (p, ones)


# --------------------------------------------------------------------------------------
# Products


@pytest.mark.parametrize("m, k", [(1, 1), (1, 7), (63, 5), (64, 64), (65, 130), (130, 257),
                                  (200, 1500)])
@pytest.mark.parametrize("kind, p", [("rademacher", 0.5), ("bernoulli", 0.2), ("balanced", 0.5)])
def test_products_equal_the_dense_matrix_exactly_on_integers(m, k, kind, p):
    rng = np.random.default_rng(m * 1000 + k)
    A = K.SignMatrix(m + k, m, k, kind, p)
    D = A.to_dense()
    assert D.shape == (m, k) and D.dtype == np.float64
    r = rng.integers(-1000, 1001, size=m).astype(np.float64)
    x = rng.integers(-1000, 1001, size=k).astype(np.float64)
    x[rng.random(k) < 0.5] = 0.0  # sparse x
    np.testing.assert_array_equal(A.rmatvec(r), D.T @ r)
    np.testing.assert_array_equal(A.matvec(x), D @ x)
    assert A.rmatvec(r).shape == (k,) and A.matvec(x).shape == (m,)
    for j in sorted({0, k // 2, k - 1}):
        g = A.gram_column(j)
        assert g.dtype == np.int32 and g.shape == (k,)
        np.testing.assert_array_equal(g, (D.T @ D[:, j]).astype(np.int64))
        assert g[j] == m


def test_products_on_real_vectors_match_to_rounding():
    m, k = 300, 1000
    rng = np.random.default_rng(5)
    A = K.SignMatrix(17, m, k)
    D = A.to_dense()
    r = rng.standard_normal(m)
    x = rng.standard_normal(k)
    np.testing.assert_allclose(A.rmatvec(r), D.T @ r, rtol=0, atol=1e-11 * np.abs(r).sum())
    np.testing.assert_allclose(A.matvec(x), D @ x, rtol=0, atol=1e-11 * np.abs(x).sum())
    # Lists are accepted for real vectors; zero vectors give zeros.
    np.testing.assert_array_equal(A.rmatvec(list(r)), A.rmatvec(r))
    np.testing.assert_array_equal(A.matvec(np.zeros(k)), np.zeros(m))
    np.testing.assert_array_equal(A.rmatvec(np.zeros(m)), np.zeros(k))
    # A non-contiguous view is accepted.
    r2 = np.repeat(r, 2)[::2]
    np.testing.assert_array_equal(A.rmatvec(r2), A.rmatvec(r))


def test_products_do_not_overflow_when_the_result_is_finite():
    # One non-zero input entry of magnitude 1e308 (finite, below the float64 maximum
    # 1.797e308): every product entry is exactly ±1e308, with no rounding and no overflow in
    # the dense computation. The packed products must return the same finite values.
    A = K.SignMatrix(0, 4, 1)
    D = A.to_dense()
    x = np.array([1e308])
    np.testing.assert_array_equal(D @ x, 1e308 * D[:, 0])
    assert np.isfinite(A.matvec(x)).all(), f"matvec([1e308]) = {A.matvec(x)}, want {D @ x}"
    np.testing.assert_array_equal(A.matvec(x), D @ x)
    for i in range(4):
        r = np.zeros(4)
        r[i] = 1e308
        got = A.rmatvec(r)
        assert np.isfinite(got).all(), f"rmatvec(1e308 * e_{i}) = {got}, want {D.T @ r}"
        np.testing.assert_array_equal(got, D.T @ r)


def test_gram_column_is_exact_at_the_largest_supported_height():
    # Gram entries are int32, so m is capped at 2^31 − 1 (refused beyond, never wrapped);
    # at the cap the diagonal entry m is exact. (One such column is 256 MiB packed.)
    with pytest.raises(ValueError, match="2147483647"):
        K.SignMatrix(0, 2**31 + 1, 1)
    m = 2**31 - 1
    assert int(K.SignMatrix(0, m, 1).gram_column(0)[0]) == m


def test_properties_and_repr():
    A = K.SignMatrix(42, 130, 9, "bernoulli", 0.25)
    assert A.shape == (130, 9) and A.m == 130 and A.k == 9
    assert A.kind == "bernoulli" and A.p == 0.25 and A.seed == 42
    assert A.nbytes == 9 * math.ceil(130 / 64) * 8
    assert "seed=42" in repr(A) and "bernoulli" in repr(A)
    assert K.SignMatrix(1, 64, 3).nbytes == 3 * 8
    assert K.SignMatrix(1, 65, 3).p == 0.5
    # numpy integers are accepted as seeds and indices.
    np.testing.assert_array_equal(K.sign_column(np.int64(42), np.int32(130), np.uint8(3)),
                                  K.sign_column(42, 130, 3))


# --------------------------------------------------------------------------------------
# Bad inputs


@pytest.mark.parametrize("make", [
    lambda **kw: K.sign_column(m=10, j=0, **kw),
    lambda **kw: K.SignMatrix(m=10, k=5, **kw),
], ids=["sign_column", "SignMatrix"])
class TestBadArguments:
    def test_bad_kind(self, make):
        for kind in ("gaussian", "Rademacher", "", None, 3):
            with pytest.raises(ValueError, match="kind"):
                make(seed=0, kind=kind)

    def test_p_out_of_range(self, make):
        for kind in ("bernoulli", "balanced"):
            for p in (0.0, 1.0, -0.1, 1.5, 2.0):
                with pytest.raises(ValueError, match="p"):
                    make(seed=0, kind=kind, p=p)
            for p in (float("nan"), float("inf")):
                with pytest.raises(ValueError, match="finite"):
                    make(seed=0, kind=kind, p=p)
            for p in ("0.5", None, True):
                with pytest.raises(TypeError, match="p"):
                    make(seed=0, kind=kind, p=p)

    def test_rademacher_needs_p_one_half(self, make):
        for p in (0.3, 0.5000001):
            with pytest.raises(ValueError, match="bernoulli"):
                make(seed=0, kind="rademacher", p=p)

    def test_bad_seeds(self, make):
        with pytest.raises(TypeError, match="seed"):
            make(seed=None)
        with pytest.raises(TypeError, match="seed"):
            make(seed=1.0)
        with pytest.raises(TypeError, match="seed"):
            make(seed=True)
        with pytest.raises(TypeError, match="seed"):
            make(seed="7")
        with pytest.raises(ValueError, match="seed"):
            make(seed=-1)
        with pytest.raises(ValueError, match="seed"):
            make(seed=2**256)
        make(seed=2**256 - 1)  # the largest seed is fine


def test_bad_shapes_and_indices():
    with pytest.raises(ValueError, match="m"):
        K.sign_column(0, 0, 0)
    with pytest.raises(ValueError, match="m"):
        K.SignMatrix(0, 0, 5)
    with pytest.raises(ValueError, match="k"):
        K.SignMatrix(0, 5, 0)
    with pytest.raises(ValueError, match="m"):
        K.SignMatrix(0, 2**32, 1)
    with pytest.raises(TypeError, match="m"):
        K.SignMatrix(0, 5.0, 1)
    with pytest.raises(ValueError, match="j"):
        K.sign_column(0, 5, -1)
    with pytest.raises(ValueError, match="j"):
        K.sign_column(0, 5, 2**64)
    K.sign_column(0, 5, 2**64 - 1)
    with pytest.raises(TypeError, match="j"):
        K.sign_column(0, 5, 1.0)
    A = K.SignMatrix(0, 10, 5)
    for method in (A.column, A.column_ones, A.gram_column):
        with pytest.raises(ValueError, match="j"):
            method(5)
        with pytest.raises(ValueError, match="j"):
            method(-1)
        with pytest.raises(TypeError, match="j"):
            method(1.5)


def test_wrong_length_and_bad_vectors():
    A = K.SignMatrix(0, 10, 5)
    with pytest.raises(ValueError, match=r"r must have length m = 10, got 9"):
        A.rmatvec(np.zeros(9))
    with pytest.raises(ValueError, match=r"x must have length k = 5, got 6"):
        A.matvec(np.zeros(6))
    with pytest.raises(ValueError, match="one-dimensional"):
        A.rmatvec(np.zeros((10, 1)))
    with pytest.raises(TypeError, match="float64"):
        A.rmatvec(np.zeros(10, dtype=np.int64))
    with pytest.raises(TypeError, match="float64"):
        A.matvec(np.zeros(5, dtype=np.float32))
    bad = np.zeros(10)
    bad[4] = np.nan
    with pytest.raises(ValueError, match="element 4"):
        A.rmatvec(bad)
    bad = np.zeros(5)
    bad[2] = -np.inf
    with pytest.raises(ValueError, match="element 2"):
        A.matvec(bad)
