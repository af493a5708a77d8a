"""The ``heavy-hitters`` preset (ldpdist.experiments.heavy_hitters): its data generator, its
metrics on hand-made cases, the PEM sampler from hashed values, and the --tiny grid end to
end through the CLI."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from ldpdist import cli
from ldpdist.experiments import heavy_hitters as hh
from ldpdist.experiments.commands import STUDIES
from ldpdist.heavy_hitters import PEM


def test_registered_as_a_study():
    assert "heavy-hitters" in STUDIES
    assert [entry.name for entry in hh.PROTOCOLS][0] == "PEM"


def test_vocabulary_is_distinct_lowercase_and_seeded():
    words = hh.vocabulary(3000, np.random.default_rng(5))
    assert len(words) == len(set(words)) == 3000
    assert all(w.isascii() and w.isalpha() and w.islower() for w in words)
    lengths = np.array([len(w) for w in words])
    assert lengths.min() == hh.MIN_LENGTH and lengths.max() == hh.MAX_LENGTH
    # uniform lengths over 3..32: mean 17.5, sd of the mean 8.66 / sqrt(3000) = 0.16
    assert abs(lengths.mean() - 17.5) < 0.8
    assert words == hh.vocabulary(3000, np.random.default_rng(5))
    assert words != hh.vocabulary(3000, np.random.default_rng(6))


def test_zipf_and_users():
    p = hh.zipf(4, 1.0)
    np.testing.assert_allclose(p, np.array([1, 1 / 2, 1 / 3, 1 / 4]) / (25 / 12))
    users = hh.draw_users(200_000, p, np.random.default_rng(0))
    freq = np.bincount(users, minlength=4) / users.size
    # binomial sd <= 0.0012: 5 sd
    np.testing.assert_allclose(freq, p, atol=0.006)


def test_true_top_breaks_ties_by_rank():
    assert hh.true_top(np.array([5, 9, 5, 1, 9]), 3).tolist() == [1, 4, 0]


def test_scores_on_a_hand_made_case():
    truth = [10, 20, 30, 40]
    frequencies = {10: 0.4, 20: 0.3, 30: 0.2, 40: 0.1, 99: 0.0}
    found = [20, 10, 99]                  # 2 hits of 3 found, 2 of the 4 true
    estimates = [0.25, 0.5, 0.05]         # |.25-.3| + |.5-.4| + |.05-0| = 0.2
    s = hh.scores(found, estimates, truth, frequencies.__getitem__)
    assert s["precision"] == pytest.approx(2 / 3)
    assert s["recall"] == pytest.approx(1 / 2)
    assert s["f1"] == pytest.approx(2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2))
    assert s["l1"] == pytest.approx(0.2)
    perfect = hh.scores(truth, [0.4, 0.3, 0.2, 0.1], truth, frequencies.__getitem__)
    assert perfect == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "l1": 0.0}
    nothing = hh.scores([], [], truth, frequencies.__getitem__)
    assert nothing == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "l1": 0.0}


def test_privatize_hashed_is_privatize_of_the_items():
    """The reports drawn from hashed values are those of privatize on the words."""
    pem = PEM(2.0, top=8, bits=64)
    words = hh.vocabulary(50, np.random.default_rng(1))
    users = hh.draw_users(3000, hh.zipf(50, 1.1), np.random.default_rng(2))
    hashed = pem.hash(words)
    ours = hh.privatize_hashed(pem, hashed[users], seed=77)
    theirs = pem.privatize([words[i] for i in users], seed=77)
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))


def test_run_protocol_finds_a_dominant_item():
    """At ε = 4 with half the users on one word PEM finds it, with an estimate near 1/2:
    F1 and ℓ1 computed by run_protocol agree with a direct computation."""
    words = hh.vocabulary(200, np.random.default_rng(3))
    p = np.full(200, 0.5 / 199)
    p[0] = 0.5
    users = hh.draw_users(40_000, p, np.random.default_rng(4))
    counts = np.bincount(users, minlength=200)
    pem_entry = hh.PROTOCOLS[0]
    row = hh.run_protocol(pem_entry, 4.0, 1, words, users, counts, seed=9)
    assert row["found"] == 1
    assert (row["precision"], row["recall"], row["f1"]) == (1.0, 1.0, 1.0)
    # the estimate's sd is about sqrt(20 * 0.25 / 40000) / (p - q) < 0.02
    assert 0 < row["l1"] < 0.08
    assert row["seconds"] >= 0


def test_tiny_grid_end_to_end(tmp_path):
    status = cli.main(["reproduce", "heavy-hitters", "--tiny", "--out", str(tmp_path)])
    assert status == 0
    assert (tmp_path / "heavy-hitters.png").stat().st_size > 10_000
    rows = hh.read(str(tmp_path / "heavy-hitters.csv"))
    with open(tmp_path / "heavy-hitters.csv", newline="") as handle:
        assert tuple(csv.DictReader(handle).fieldnames) == hh.COLUMNS
    assert {row["protocol"] for row in rows} == {entry.name for entry in hh.PROTOCOLS}
    for row in rows:
        assert row["n"] == 20_000 and row["top"] == 8 and row["epsilon"] == 4.0
        assert 0 <= row["precision"] <= 1 and 0 <= row["recall"] <= 1
        p, r = row["precision"], row["recall"]
        assert math.isclose(row["f1"], 2 * p * r / (p + r) if p + r else 0.0)
        assert 0 <= row["found"] <= 8 and row["l1"] >= 0
    pem = next(row for row in rows if row["protocol"] == "PEM")
    # seeded: this exact run finds part of the top 8 (Zipf(1.1) over 500 words, n = 20000)
    assert pem["f1"] > 0
    # seeded: PEM's row again, from the study's functions
    again = list(hh.rows_for([20_000], [4.0], [1.1], 500, 8, 1, 0, protocols=hh.PROTOCOLS[:1]))
    assert [(r["f1"], r["l1"]) for r in again] == [(pem["f1"], pem["l1"])]
