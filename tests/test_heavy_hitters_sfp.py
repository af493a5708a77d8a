"""Apple's sequence fragment puzzle (SFP): exact ε per group, exact unbiasedness of the
fragment oracle, sampler fidelity, recovery of unknown strings, round trips and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import chi_square as stats  # scipy.stats without scipy (not a dependency)

import ldpdist
from ldpdist.heavy_hitters import from_dict, hash_items
from ldpdist.heavy_hitters.sfp import SequenceFragmentPuzzle, SequenceFragmentPuzzleAggregator


def _row_index(buckets, m):
    d = buckets.shape[-1]
    return int((np.asarray(buckets) * m ** np.arange(d - 1, -1, -1)).sum())


@pytest.mark.parametrize("hadamard", [False, True])
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 6.0])
def test_exact_epsilon_every_group(hadamard, epsilon):
    sfp = SequenceFragmentPuzzle(epsilon, max_length=4, m=4, d=2, hadamard=hadamard)
    assert sfp.groups == 3
    for g in range(sfp.groups):
        Q = sfp.group_channel(g)
        worst = float(np.max(np.log(Q.max(axis=0) / Q.min(axis=0))))
        assert worst == pytest.approx(sfp.realized_epsilon, abs=1e-12)
        assert sfp.realized_epsilon <= epsilon


def _pair(sfp, string, p):
    data = string.encode() + b"\x00" * (sfp._max_length - len(string.encode()))
    tag = int(hash_items([data.rstrip(b"\x00")], sfp.seed)[0] >> np.uint64(56))
    return tag, data[2 * p] * 256 + data[2 * p + 1]


@pytest.mark.parametrize("hadamard", [False, True])
def test_sampler_fidelity_per_group(hadamard):
    m, d = 4, 2
    sfp = SequenceFragmentPuzzle(2.0, max_length=4, m=m, d=d, hadamard=hadamard, seed=2)
    n = 60000
    reports = np.asarray(sfp.privatize(["héy"] * n, seed=5))
    sizes = np.bincount(reports["group"], minlength=3)
    assert stats.chisquare(sizes).pvalue > 1e-4
    Q = sfp.group_channel(0)
    whole = sfp._salts
    from ldpdist.heavy_hitters.sketch import sketch_buckets
    value = sfp.hash(["héy"])
    rows = {0: _row_index(sketch_buckets(value[:, None], whole[None, :], m)[0], m)}
    for p in range(2):
        tag, frag = _pair(sfp, "héy", p)
        rows[1 + p] = _row_index(sfp.pair_buckets(np.array([tag] * d), np.array([frag] * d),
                                                  np.arange(d)), m)
    for g in range(3):
        mine = reports[reports["group"] == g]
        if hadamard:
            cols = (mine["row"].astype(int) * m + mine["col"]) * 2 + mine["bit"]
        else:
            cols = mine["row"].astype(int) * 2**m + mine["bits"][:, 0].astype(int)
        observed = np.bincount(cols, minlength=Q.shape[1])
        expected = mine.size * Q[rows[g]]
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert stats.chi2.sf(chi2, Q.shape[1] - 1) > 1e-4, g
    # the fragment groups do differ from the whole-string group (the test can fail)
    assert rows[1] != rows[0] or rows[2] != rows[0]


@pytest.mark.parametrize("hadamard", [False, True])
def test_exact_unbiasedness_of_the_fragment_oracle(hadamard):
    m, d = 4, 2
    sfp = SequenceFragmentPuzzle(3.0, max_length=4, m=m, d=d, hadamard=hadamard, seed=4)
    strings = ["ab", "abcd", "xy", "q", "abzz"]
    f = np.array([0.35, 0.25, 0.2, 0.15, 0.05])
    p = 0  # position 0: "ab", "abcd" and "abzz" share the fragment "ab" (different tags)
    pairs = [_pair(sfp, s, p) for s in strings]
    tags, frags = np.array([t for t, _ in pairs]), np.array([fr for _, fr in pairs])
    b = sfp.pair_buckets(tags[:, None], frags[:, None], np.arange(d)[None, :])  # (5, d)
    Q = sfp.group_channel(1)
    per_col = []
    for col in range(Q.shape[1]):
        rep = np.zeros(1, dtype=sfp.report_dtype)
        rep["group"] = 1
        if hadamard:
            (j, l), bit = divmod(col // 2, m), col % 2
            rep["row"], rep["col"], rep["bit"] = j, l, bit
        else:
            j, pattern = divmod(col, 2**m)
            rep["row"], rep["bits"][0, 0] = j, pattern
        agg = sfp.aggregator().add(sfp.as_reports(rep))
        per_col.append(agg._pair_estimates(p, tags, frags)[0])
    per_col = np.array(per_col)
    rows = [_row_index(b[i], m) for i in range(len(strings))]
    expected = np.einsum("x,xc,ct->t", f, Q[rows], per_col)
    for t in range(len(strings)):
        same = (tags == tags[t]) & (frags == frags[t])  # the same pair, whatever the string
        ft = f[same].sum()
        share = (b == b[t]).mean(axis=1)
        share[same] = 0.0
        documented = ft + m / (m - 1) * (np.dot(f, share) - (1 - ft) / m)
        assert expected[t] == pytest.approx(documented, abs=1e-12)


def _zipf_strings(n, seed, s=1.1, k=50, length=8):
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    words = list(dict.fromkeys("".join(rng.choice(letters, size=rng.integers(3, length + 1)))
                               for _ in range(k)))
    p = np.arange(1, len(words) + 1, dtype=float) ** -s
    p /= p.sum()
    items = [words[i] for i in rng.choice(len(words), size=n, p=p)]
    return words, p, items


@pytest.mark.parametrize("seed", [1, 2])
def test_recovers_the_top_strings(seed):
    words, p, items = _zipf_strings(100_000, seed=seed)
    sfp = SequenceFragmentPuzzle(4.0, top=10, max_length=8, m=1024, d=8,
                                 alphabet="abcdefghijklmnopqrstuvwxyz", seed=seed)
    agg = sfp.aggregator().add(sfp.privatize(items, seed=seed + 10))
    found = agg.identify()
    assert 8 <= len(found) <= 10
    recall = len(set(found.items) & set(words[:10])) / 10
    assert recall >= 0.8  # measured 0.9 at both seeds (0.8 to 1.0 over seeds 1-6)
    assert all(isinstance(item, str) for item in found.items)
    # the estimates are those of the whole-string records, within their errors
    truth = dict(zip(words, p))
    for item, _, est, se in found.rows():
        if item in truth:
            assert abs(est - truth[item]) < 5 * se + 0.01


def test_identify_leaves_out_assembled_strings_below_the_threshold():
    """The fragments of the strings found also assemble strings nobody holds: by default
    only those whose estimate is at least 2 standard errors are returned (the largest of
    threshold=0's; here 8 true strings of 8, against 8 of 9 without it); a dictionary of
    candidates is ranked whole."""
    words, p, items = _zipf_strings(60_000, seed=3)
    sfp = SequenceFragmentPuzzle(3.0, top=10, max_length=8, m=1024, d=8,
                                 alphabet="abcdefghijklmnopqrstuvwxyz", seed=3)
    agg = sfp.aggregator().add(sfp.privatize(items, seed=32))
    everything = agg.identify(threshold=0)
    found = agg.identify()
    assert len(everything) == 9 and 0 < len(found) < len(everything)
    assert found.hashes.tolist() == everything.hashes[:len(found)].tolist()
    assert np.all(found.estimates >= 2 * found.standard_errors)
    assert everything.estimates[len(found)] < 2 * everything.standard_errors[len(found)]
    assert np.array_equal(agg.identify(threshold=2.0).hashes, found.hashes)
    assert len(agg.identify(threshold=1e9)) == 0
    # the threshold keeps true strings and drops invented ones
    precision = len(set(found.items) & set(words)) / len(found)
    assert precision > len(set(everything.items) & set(words)) / len(everything)
    assert len(agg.identify(candidates=words[:10])) == 10  # a dictionary: no threshold
    with pytest.raises(ValueError, match="threshold"):
        agg.identify(threshold=-1.0)


def test_full_byte_alphabet_finds_non_ascii_strings():
    rng = np.random.default_rng(0)
    choices = ["é", "ab", "z", b"\xff\x01", "x"]
    p = [0.35, 0.3, 0.2, 0.1, 0.05]
    items = [choices[i] for i in rng.choice(5, size=40_000, p=p)]
    sfp = SequenceFragmentPuzzle(4.0, top=4, max_length=2, m=256, d=4, fragments=8, seed=1)
    found = sfp.aggregator().add(sfp.privatize(items, seed=2)).identify()
    assert set(found.items) == {"é", "ab", "z", b"\xff\x01"}


def test_str_and_bytes_are_one_item():
    sfp = SequenceFragmentPuzzle(1.0, max_length=8)
    assert np.array_equal(sfp.hash(["héllo"]), sfp.hash(["héllo".encode()]))


def test_round_trips_and_mixups():
    sfp = SequenceFragmentPuzzle(2.0, max_length=4, m=16, d=4, alphabet="abc", seed=3)
    spec = json.loads(json.dumps(sfp.to_dict()))
    assert from_dict(spec) == sfp and from_dict(spec).alphabet == (97, 98, 99)
    items = ["ab", "abc", "c", "cab"] * 500
    r = sfp.privatize(items, seed=1)
    assert np.array_equal(np.asarray(r), np.asarray(sfp.privatize(items, seed=1)))
    whole = sfp.aggregator().add(r)
    a = sfp.aggregator().add(r[:700])
    a.merge(sfp.aggregator().add(r[700:]))
    assert np.array_equal(a.sums, whole.sums)
    assert whole.group_sizes().sum() == 2000
    back = SequenceFragmentPuzzleAggregator.from_bytes(whole.to_bytes(), expect=sfp)
    assert np.array_equal(back.sums, whole.sums)
    state = bytearray(whole.to_bytes())
    state[-1] ^= 4
    with pytest.raises(ldpdist.IntegrityError):
        SequenceFragmentPuzzleAggregator.from_bytes(bytes(state))
    other = SequenceFragmentPuzzle(2.0, max_length=4, m=16, d=4, alphabet="abd", seed=3)
    with pytest.raises(ldpdist.SpecMismatchError):
        other.aggregator().add(r)
    est = whole.estimate(["ab", "c"])
    assert est.items == ["ab", "c"] and est.n == whole.group_sizes()[0]


def test_bad_input():
    sfp = SequenceFragmentPuzzle(2.0, max_length=4, alphabet="abc")
    with pytest.raises(ValueError, match="empty"):
        sfp.privatize([])
    with pytest.raises(ValueError, match="max_length"):
        sfp.privatize(["abcab"])
    with pytest.raises(ValueError, match="NUL"):
        sfp.privatize([b"ab\x00"])
    with pytest.raises(ValueError, match="surrogate"):
        sfp.privatize(["a\udc00"])
    with pytest.raises(ValueError, match="alphabet"):
        sfp.privatize(["abd"])
    with pytest.raises(TypeError, match="strings"):
        sfp.privatize([97])
    with pytest.raises(TypeError):
        sfp.privatize_hashed(np.array([1], dtype=np.uint64))
    for kwargs in ({"max_length": 5}, {"max_length": 0}, {"m": 1000}, {"alphabet": "a\x00"},
                   {"alphabet": []}, {"d": 0}, {"epsilon": 0.0}, {"epsilon": float("nan")}):
        args = {"epsilon": 1.0, **kwargs}
        with pytest.raises(ValueError):
            SequenceFragmentPuzzle(args.pop("epsilon"), **args)
    good = np.asarray(sfp.privatize(["ab", "c"], seed=1)).copy()
    good["group"][1] = 3
    with pytest.raises(ValueError, match=r"reports\[1\]"):
        sfp.aggregator().add(sfp.as_reports(good))
