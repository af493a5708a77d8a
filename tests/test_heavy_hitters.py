"""ldpdist.heavy_hitters: the item hash (spec and test vectors), PEM's channels (exact ε,
exact unbiasedness of the frequency oracle), its sampler, an end-to-end run, determinism,
round trips and bad input."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

import ldpdist
from ldpdist import privacy
from ldpdist.heavy_hitters import (MAX_ITEM_BYTES, PEM, PEMAggregator, encode_item, from_dict,
                                   hash_item, hash_items)

VECTORS = Path(__file__).parent / "data" / "heavy_hitters_hash_v1.json"
TAGS = {"bytes": b"\x01", "str": b"\x02", "int": b"\x03"}


def _vector_item(vector):
    kind, item = vector["kind"], vector["item"]
    return bytes.fromhex(item) if kind == "bytes" else int(item) if kind == "int" else item


# -- the hash ---------------------------------------------------------------------------------

def test_hash_test_vectors():
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert len(vectors) >= 30
    for vector in vectors:
        item, seed = _vector_item(vector), int(vector["seed"])
        kind = vector["kind"]
        payload = (item if kind == "bytes" else item.encode("utf-8") if kind == "str"
                   else item.to_bytes(8, "little"))
        # the specification, written independently of the implementation
        message = TAGS[kind] + payload
        digest = hashlib.blake2b(message, digest_size=8, key=seed.to_bytes(32, "little"),
                                 person=b"ldpdist.hh.v1").hexdigest()
        assert message.hex() == vector["message_hex"] == encode_item(item).hex()
        assert digest == vector["h64_hex"]
        assert hash_item(item, seed) == int(digest, 16)
        assert int(hash_items([item], seed)[0]) == int(digest, 16)


def test_hash_separates_kinds_and_seeds():
    assert len({hash_item(b"a"), hash_item("a"), hash_item(97)}) == 3
    assert hash_item("a", seed=0) != hash_item("a", seed=1)
    items = ["x", b"x", 5, np.uint64(5), "x", b"", "", 2**64 - 1]
    expected = [hash_item(item) for item in items]
    assert hash_items(items).tolist() == expected
    assert expected[2] == expected[3]  # an integer is its value, whatever its Python type
    as_array = hash_items(np.array([5, 7, 2**63], dtype=np.uint64))
    assert as_array.tolist() == [hash_item(5), hash_item(7), hash_item(2**63)]
    assert hash_items(np.array(["x", "é"])).tolist() == [hash_item("x"), hash_item("é")]
    # the protocol's values are the first `bits` bits
    pem = PEM(2.0, bits=20)
    assert pem.hash(["x"])[0] == hash_item("x") >> 44


def test_item_bad_input():
    with pytest.raises(ValueError, match=r"items\[1\] is a str with no UTF-8 encoding: "
                                         r"character 2 is '\\ud800'"):
        hash_items(["ok", "ab\ud800c"])
    with pytest.raises(ValueError, match=rf"items\[0\] has {MAX_ITEM_BYTES + 1} bytes"):
        hash_items([b"x" * (MAX_ITEM_BYTES + 1)])
    with pytest.raises(ValueError, match=rf"has {MAX_ITEM_BYTES + 2} bytes"):
        hash_items(["é" * (MAX_ITEM_BYTES // 2 + 1)])  # counted once encoded
    hash_items([b"x" * MAX_ITEM_BYTES, b"", ""])  # the maximum and empty items are accepted
    for bad, kind in [(1.5, TypeError), (None, TypeError), (True, TypeError), (-1, ValueError),
                      (2**64, ValueError), ([1], TypeError)]:
        with pytest.raises(kind, match=r"items\[0\]"):
            hash_items([bad])
    with pytest.raises(TypeError, match="single str"):
        hash_items("abc")
    with pytest.raises(TypeError, match="dtype 'S'"):
        hash_items(np.array([b"a\x00"]))
    with pytest.raises(TypeError, match="dtype float64"):
        hash_items(np.array([1.0]))
    with pytest.raises(ValueError, match=r"items\[1\] = -3"):
        hash_items(np.array([1, -3]))
    with pytest.raises(ValueError, match="seed"):
        hash_item("a", seed=-1)


def _blake2b(item, seed):
    """The specification with hashlib, independently of the package (and its kernel)."""
    message = (b"\x01" + item if type(item) is bytes else b"\x02" + item.encode("utf-8")
               if type(item) is str else b"\x03" + item.to_bytes(8, "little"))
    return int.from_bytes(hashlib.blake2b(message, digest_size=8, key=seed.to_bytes(
        32, "little"), person=b"ldpdist.hh.v1").digest(), "big")


def test_hash_kernel_matches_hashlib():
    """The Rust kernel of hash_items gives hashlib's bits on 10^4 random items of every kind,
    mixed or of one kind, distinct or repeated, including the extreme sizes and values."""
    rng = np.random.default_rng(23)
    alphabet = "az09 é日🙂\x00"
    sizes = [0, 1, 2, 7, 63, 64, 127, 128, 129, 500, MAX_ITEM_BYTES]
    items = ["", b"", 0, 2**64 - 1, 2**63, b"\xff" * MAX_ITEM_BYTES, "é" * (MAX_ITEM_BYTES // 2),
             "a" * MAX_ITEM_BYTES, "🙂" * (MAX_ITEM_BYTES // 4)]
    for i in range(10_000 - len(items)):
        size = int(rng.choice(sizes))
        if i % 3 == 0:
            items.append(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        elif i % 3 == 1:
            text = "".join(rng.choice(list(alphabet), size))
            while len(text.encode("utf-8")) > MAX_ITEM_BYTES:
                text = text[:-1]
            items.append(text)
        else:
            items.append(int(rng.integers(0, 2**64, dtype=np.uint64)))
    for seed in (0, 2**256 - 1):
        expected = np.array([_blake2b(item, seed) for item in items], dtype=np.uint64)
        assert np.array_equal(hash_items(items, seed), expected)  # distinct, mixed kinds
        order = rng.integers(0, len(items), 3 * len(items))  # repeated, mixed kinds
        assert np.array_equal(hash_items([items[j] for j in order], seed), expected[order])
        for kind in (str, bytes, int):
            chosen = [j for j, item in enumerate(items) if type(item) is kind]
            assert np.array_equal(hash_items([items[j] for j in chosen], seed),
                                  expected[chosen])
            twice = chosen[::-1] + chosen
            assert np.array_equal(hash_items([items[j] for j in twice], seed),
                                  expected[twice])
    assert hash_items([]).dtype == np.uint64 and hash_items([]).shape == (0,)


def test_hash_items_names_the_first_bad_item():
    """With several kinds and repeats, the first refused item (in the items' order) is named."""
    with pytest.raises(ValueError, match=r"items\[3\] = -1 is outside"):
        hash_items(["a", 5, "a", -1, "b" * 2000, "\ud800"])
    with pytest.raises(ValueError, match=r"items\[2\] has 2000 bytes"):
        hash_items([b"x", 5, "b" * 2000, 2**64, "\ud800"])
    with pytest.raises(ValueError, match=r"items\[4\] is a str with no UTF-8 encoding"):
        hash_items([b"x", 5, b"x", 5, "a\ud800", 2**64])
    with pytest.raises(ValueError, match=r"items\[1\] = 18446744073709551616 is outside"):
        hash_items([7, 2**64, 7])


def test_privatize_bad_input():
    pem = PEM(1.0, bits=16)
    with pytest.raises(ValueError, match="items is empty"):
        pem.privatize([])
    with pytest.raises(ValueError, match=r"items\[0\] is a str with no UTF-8"):
        pem.privatize(["\udfff"])
    with pytest.raises(ValueError, match="MAX_ITEM_BYTES"):
        pem.privatize(["a", "b" * 2000])
    with pytest.raises(TypeError, match=r"items\[2\] is a float"):
        pem.privatize(["a", 3, 4.0])


def test_bad_parameters():
    with pytest.raises(ValueError, match="epsilon"):
        PEM(0.0)
    with pytest.raises(ValueError, match="top"):
        PEM(1.0, top=0)
    with pytest.raises(ValueError, match="bits"):
        PEM(1.0, bits=65)
    with pytest.raises(ValueError, match="start_bits"):
        PEM(1.0, bits=64, start_bits=21)
    with pytest.raises(ValueError, match="candidates per round"):
        PEM(1.0, top=4096, step_bits=9)
    with pytest.raises(ValueError, match="too small"):
        PEM(1e-17)


# -- the channels -----------------------------------------------------------------------------

SMALL = [dict(epsilon=e, top=2, bits=5, start_bits=2, step_bits=s)
         for e in (0.3, 1.0, 2.0, 4.0) for s in (1, 3)]


def _support(pem, group):
    """S[(A, y), c] = 1 when the report (A, y) supports prefix c (h_A(c) == y)."""
    t, g = pem.digits[group], pem.g
    k = 2**pem.prefix_bits[group]
    a = pem.prefix_digits(np.arange(g**t, dtype=np.uint64), group).astype(np.int64)
    c = pem.prefix_digits(np.arange(k, dtype=np.uint64), group).astype(np.int64)
    h = (a @ c.T) % g  # (g**t, k)
    S = np.zeros((g**t, g, k))
    A, C = np.indices(h.shape)
    S[A, h, C] = 1.0
    return S.reshape(g**t * g, k)


@pytest.mark.parametrize("params", SMALL, ids=lambda p: f"eps{p['epsilon']}-step{p['step_bits']}")
def test_each_group_channel_is_exactly_epsilon_ldp(params):
    pem = PEM(**params)
    assert pem.realized_epsilon <= pem.epsilon
    assert pem.realized_epsilon == pytest.approx(pem.epsilon, rel=1e-12)
    for group in range(pem.groups):
        Q = pem.group_channel(group)
        assert np.allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        budgets = privacy.realized_budgets(Q)
        off = budgets[~np.eye(budgets.shape[0], dtype=bool)]
        assert off.max() <= pem.epsilon
        assert abs(off.max() - pem.realized_epsilon) < 1e-12
        assert privacy.verify(Q, privacy.uniform_budgets(Q.shape[0], pem.epsilon)).amount <= 0


@pytest.mark.parametrize("params", SMALL, ids=lambda p: f"eps{p['epsilon']}-step{p['step_bits']}")
def test_frequency_oracle_is_exactly_unbiased(params):
    """P(a report supports c | prefix x) = p if x == c else exactly 1/g, so (C/n - q)/(p - q)
    is exactly unbiased (the expectation of a linear function of the supports)."""
    pem = PEM(**params)
    for group in range(pem.groups):
        P = pem.group_channel(group) @ _support(pem, group)
        k = P.shape[0]
        expected = np.where(np.eye(k, dtype=bool), pem.p, pem.q)
        assert np.abs(P - expected).max() < 1e-12
        # and an unbiased estimate of any distribution over the prefixes
        f = np.random.default_rng(group).dirichlet(np.ones(k))
        assert np.allclose(((f @ P) - pem.q) / (pem.p - pem.q), f, rtol=0, atol=1e-12)


def test_sampler_follows_the_channel():
    """One item privatized 120000 times: groups uniform, and in every group the fraction of
    reports supporting the user's prefix is p and another prefix's is 1/g (5 standard
    errors)."""
    pem = PEM(2.0, top=2, bits=6, start_bits=2, step_bits=2)
    n = 120_000
    reports = np.asarray(pem.privatize([b"item"] * n, seed=3))
    sizes = np.bincount(reports["group"], minlength=pem.groups)
    assert sizes.sum() == n
    assert np.abs(sizes - n / pem.groups).max() < 5 * math.sqrt(n / pem.groups)
    value = int(pem.hash([b"item"])[0])
    aggregator = pem.aggregator().add(pem.as_reports(reports))
    for group, s in enumerate(pem.prefix_bits):
        own = value >> (pem.bits - s)
        other = own ^ 1
        counts, m = aggregator._support(group, np.array([own, other], dtype=np.uint64))
        for count, prob in zip(counts, (pem.p, pem.q)):
            assert abs(count / m - prob) < 5 * math.sqrt(prob * (1 - prob) / m)
    # digits past each group's t_j are zero, all values below g
    assert (reports["y"] < pem.g).all() and (reports["a"] < pem.g).all()


# -- end to end ---------------------------------------------------------------------------------

def _zipf_words(n, seed, vocabulary=1000, s=1.5):
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < vocabulary:
        words.add("".join(rng.choice(letters, rng.integers(3, 11))))
    vocab = sorted(words)
    rng.shuffle(vocab)
    weights = np.arange(1, vocabulary + 1, dtype=float) ** -s
    weights /= weights.sum()
    index = rng.choice(vocabulary, size=n, p=weights)
    return vocab, [vocab[i] for i in index], np.bincount(index, minlength=vocabulary) / n


def test_end_to_end_zipf_recall():
    """Zipf(1.5) over 1000 random words, n = 200000, ε = 4: the top 10 are found (measured
    recall 0.9-1.0 over seeds; the bar is 0.8), named through the dictionary, and their
    frequency estimates are within 4 standard errors of the truth for most."""
    vocab, items, truth = _zipf_words(200_000, seed=11)
    pem = PEM(4.0)
    reports = pem.privatize(items, seed=12)
    found = pem.aggregator().add(reports).identify(top=10, candidates=vocab)
    assert len(found) == 10 and found.n > 0
    names = [item for item in found.items if item is not None]
    recall = len(set(names) & set(vocab[:10])) / 10
    assert recall >= 0.8, (recall, found.rows())
    assert np.all(np.diff(found.estimates) <= 0)
    # estimate() on the dictionary's first items
    estimated = pem.estimate(reports, vocab[:5])
    assert estimated.items == vocab[:5]
    z = (estimated.estimates - truth[:5]) / estimated.standard_errors
    assert np.abs(z).max() < 4, z


def test_estimate_is_unbiased_by_simulation():
    """A seeded large-n check of the last group's oracle: mean of the estimates over 3
    independent runs within 4 standard errors of the true frequencies."""
    rng = np.random.default_rng(5)
    n = 60_000
    items = rng.choice(np.arange(20), size=n, p=np.r_[0.3, 0.2, np.full(18, 0.5 / 18)])
    truth = np.bincount(items, minlength=20) / n
    pem = PEM(1.0, bits=12, top=4, step_bits=4)
    result = pem.estimate(pem.privatize(items, seed=6), list(range(20)))
    z = (result.estimates - truth) / result.standard_errors
    assert np.abs(z).max() < 4.5, z
    assert abs(z.mean()) < 4 / math.sqrt(20)


# -- determinism, round trips, mix-ups ------------------------------------------------------

def test_determinism():
    pem = PEM(2.0, bits=24, top=4)
    items = [f"w{i % 37}" for i in range(5000)]
    a, b = pem.privatize(items, seed=9), pem.privatize(items, seed=9)
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert np.asarray(pem.privatize(items, seed=10)).tobytes() != np.asarray(a).tobytes()
    first, second = pem.identify(a), pem.identify(b)
    assert first.hashes.tolist() == second.hashes.tolist()
    assert first.estimates.tolist() == second.estimates.tolist()


def test_spec_round_trip():
    pem = PEM(1.5, top=16, bits=40, start_bits=7, step_bits=5, seed=2**200)
    spec = json.loads(json.dumps(pem.to_dict()))
    assert PEM.from_dict(spec) == pem == from_dict(spec)
    assert PEM.from_dict(spec).fingerprint == pem.fingerprint
    assert hash(PEM.from_dict(spec)) == hash(pem)
    assert PEM(1.5) != PEM(1.5, seed=1)
    with pytest.raises(ValueError, match="unknown fields"):
        PEM.from_dict({**spec, "extra": 1})
    with pytest.raises(ValueError, match="unsupported"):
        PEM.from_dict({**spec, "hash": "blake2b-v2"})
    with pytest.raises(ValueError, match="unknown heavy-hitter protocol"):
        from_dict({"protocol": "NoSuchProtocol"})


def test_aggregator_merge_state_and_mixups():
    pem = PEM(3.0, bits=20, top=8)
    items = [f"w{int(i)}" for i in np.random.default_rng(0).zipf(1.6, 8000) % 300]
    reports = pem.privatize(items, seed=1)
    whole = pem.aggregator().add(reports)
    left = pem.aggregator().add(reports[:3000])
    right = pem.aggregator().add(reports[3000:])
    merged = left.merge(right)
    assert merged.n == whole.n == 8000
    assert merged.identify().hashes.tolist() == whole.identify().hashes.tolist()
    state = whole.to_bytes()
    back = PEMAggregator.from_bytes(state, expect=pem)
    assert back.n == 8000 and back.reports().tobytes() == whole.reports().tobytes()
    corrupt = bytearray(state)
    corrupt[-1] ^= 1
    with pytest.raises(ldpdist.IntegrityError, match="checksum"):
        PEMAggregator.from_bytes(bytes(corrupt))
    other = PEM(3.0, bits=20, top=8, seed=1)
    with pytest.raises(ldpdist.SpecMismatchError):
        PEMAggregator.from_bytes(state, expect=other)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().add(reports)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().merge(whole)
    with pytest.raises(TypeError, match="takes reports"):
        pem.aggregator().add(np.asarray(reports))
    bad = np.asarray(reports).copy()
    bad["y"][7] = pem.g
    with pytest.raises(ValueError, match=r"reports\[7\]"):
        pem.aggregator().add(pem.as_reports(bad))
    with pytest.raises(ValueError, match="group 0 .* has no reports"):
        pem.aggregator().identify()
    with pytest.raises(ValueError, match="same 20-bit hash|top"):
        whole.identify(top=9)


def test_docs_page_vectors_match():
    """The test vectors printed in the docs page are those of the JSON file."""
    page = (Path(__file__).parent.parent / "docs" / "guide" / "heavy-hitters.md").read_text(
        encoding="utf-8")
    vectors = {v["message_hex"]: v["h64_hex"] for v in json.loads(
        VECTORS.read_text(encoding="utf-8"))["vectors"] if v["seed"] == "0"}
    rows = [line for line in page.splitlines()
            if line.split("|")[1:2] in ([" bytes "], [" str "], [" int "])]
    assert len(rows) >= 8
    for row in rows:
        message, digest = [cell.strip().strip("`") for cell in row.strip("|").split("|")][2:4]
        assert vectors[message] == digest, row


def _peers_bench():
    """benches/heavy_hitters_peers.py as a module (it imports pure-LDP only when run)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benches" / "heavy_hitters_peers.py"
    spec = importlib.util.spec_from_file_location("heavy_hitters_peers_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_peers_bench_compares_on_the_peers_hashed_domain_with_standard_errors():
    """The side-by-side bench runs our PEM and TreeHist on pure-LDP's 32-bit hashed values
    (the first 32 bits of the same item hash), leaves the other protocols alone, and reports
    means with their standard errors."""
    bench = _peers_bench()
    from ldpdist.experiments import heavy_hitters as preset
    from ldpdist.heavy_hitters import hash_items

    words = ["alpha", "beta", "gamma"]
    entries = {entry.name: entry for entry in preset.PROTOCOLS}
    pem = bench.with_bits(entries["PEM"], 32).factory(1.0, 32, 0)
    assert pem.bits == 32 and pem.top == 32
    assert pem.hash(words).tolist() == (hash_items(words, 0) >> np.uint64(32)).tolist()
    assert bench.with_bits(entries["TreeHist"], 32).factory(1.0, 8, 0).bits == 32
    assert bench.with_bits(entries["CMS"], 32) is entries["CMS"]
    rows = [{"f1": 0.25}, {"f1": 0.5}, {"f1": 0.75}]
    mean = bench._mean(rows)
    assert mean["f1"] == 0.5 and mean["runs"] == 3
    assert math.isclose(mean["f1_se"], 0.25 / math.sqrt(3))
    assert bench._with_se(0.5, mean["f1_se"]) == "0.500 ± 0.144"
    assert bench._with_se(0.5, float("nan")) == "0.500"
    theirs = bench._mean([{"f1": 0.5}, {"f1": 0.5}])
    assert bench._difference(mean, theirs) == "+0.000 ± 0.144"
    assert bench._difference(theirs, mean).startswith("+")
    lower = bench._mean([{"f1": 0.1}, {"f1": 0.3}])
    assert bench._difference(lower, theirs) == "−0.300 ± 0.100"
