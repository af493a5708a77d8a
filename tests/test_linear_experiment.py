"""The ``linear-queries`` preset (ldpdist.experiments.linear_queries): its files, and the
findings it reports, checked on the ``--quick`` grid (3 runs; about 2 s)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from ldpdist import cli
from ldpdist.experiments import linear_queries as lq


@pytest.fixture(scope="module")
def quick_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("linear-queries")
    assert cli.main(["reproduce", "linear-queries", "--quick", "--out", str(out)]) == 0
    assert (out / "linear-queries.png").stat().st_size > 10_000
    return lq.read(out / "linear-queries.csv")


def means(rows):
    """Mean error per (panel, method, estimator, J, n)."""
    data = defaultdict(list)
    for row in rows:
        data[(row["panel"], row["method"], row["estimator"], row["J"], row["n"])].append(
            row["error"])
    return {key: float(np.mean(values)) for key, values in data.items()}


def test_the_quick_grid_is_complete(quick_rows):
    runs = lq._RUNS[1]
    keys = defaultdict(int)
    for row in quick_rows:
        keys[(row["panel"], row["method"], row["estimator"], row["J"], row["n"])] += 1
        assert row["path"] in ("privatize", "simulate", "aggregate")
        assert row["seconds"] >= 0 and row["bound"] > 0
        assert row["error"] == (row["l2"] if row["panel"] == "b" else row["linf"])
        assert 0 <= row["linf"] <= row["l2"] + 1e-15
    assert set(keys.values()) == {runs}
    panel_a = {k for k in keys if k[0] == "a"}
    assert len(panel_a) == 2 * len(lq.ESTIMATORS) * len(lq._NS["a"][1])
    assert {k[3] for k in keys if k[0] == "b"} == set(lq._DOMAINS_B[1])
    assert len({k for k in keys if k[0] == "c"}) == len(lq._NS["c"][1])


def test_errors_are_within_the_bounds(quick_rows):
    # The bounds bound EXPECTED errors, and some are nearly equalities (the Gaussian raw
    # branch is √E‖·‖²), so a curve passes when the mean of error/bound over its rows is ≤ 1
    # up to 3 standard errors of that mean (one-sided).
    ratios = defaultdict(list)
    for r in quick_rows:
        ratios[(r["panel"], r["method"], r["estimator"], r["J"])].append(r["error"] / r["bound"])
    assert len(ratios) == 2 * len(lq.ESTIMATORS) + 4 * len(lq._DOMAINS_B[1]) + 1
    for key, values in ratios.items():
        values = np.asarray(values)
        slack = 3 * values.std(ddof=1) / math.sqrt(values.size)
        assert values.mean() <= 1 + slack, (key, values.mean(), slack)


def test_projection_never_moves_away_from_the_truth(quick_rows):
    raw = {(r["panel"], r["method"], r["J"], r["n"], r["run"]): r["l2"] for r in quick_rows
           if r["estimator"] == "raw"}
    checked = 0
    for row in quick_rows:
        if row["panel"] in ("a", "b") and row["estimator"] != "raw":
            key = (row["panel"], row["method"], row["J"], row["n"], row["run"])
            assert row["l2"] <= raw[key] + 1e-12
            checked += 1
    assert checked > 0


def test_errors_fall_as_one_over_root_n_without_projection(quick_rows):
    m = means(quick_rows)
    for method in ("Gaussian", "rejection sampling"):
        ns = lq._NS["a"][1]
        slope = np.polyfit(np.log(ns), np.log([m[("a", method, "raw", lq.DOMAIN, n)]
                                              for n in ns]), 1)[0]
        assert -0.62 < slope < -0.38, (method, slope)
    ns = lq._NS["c"][1]
    slope = np.polyfit(np.log(ns), np.log([m[("c", "adaptive (Alg. 6)", "round means",
                                              lq.DOMAIN, n)] for n in ns]), 1)[0]
    assert -0.62 < slope < -0.38


def test_projected_hr_matches_the_notes_reference_figures(quick_rows):
    m = means(quick_rows)
    for (J, n), (raw, projected) in lq.NOTE_REFERENCE.items():
        if ("b", "projected HR", "raw", J, n) not in m:
            continue
        assert m[("b", "projected HR", "raw", J, n)] == pytest.approx(raw, rel=0.12)
        assert m[("b", "projected HR", "projected", J, n)] == pytest.approx(projected, rel=0.15)


def test_projected_hr_beats_the_gaussian_protocol_for_distributions(quick_rows):
    # The finding the README reports: at ε = 1 projected HR (pure ε) has a smaller ℓ2 error
    # than the Gaussian protocol on A = I ((ε, 1e-6)) + simplex projection at every J and n.
    m = means(quick_rows)
    compared = 0
    for (panel, method, estimator, J, n), value in m.items():
        if (panel, method, estimator) == ("b", "projected HR", "projected"):
            assert value < m[("b", "Gaussian (A = I)", "projected", J, n)]
            compared += 1
    assert compared == len(lq._DOMAINS_B[1]) * len(lq._NS["b"][1])


def test_tiny_runs_from_the_command_line(tmp_path, capsys):
    assert cli.main(["reproduce", "linear-queries", "--tiny", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "linear-queries.csv" in out and "independent reference check" in out
    rows = lq.read(tmp_path / "linear-queries.csv")
    assert len(rows) == (2 * len(lq.ESTIMATORS) * 2 + 4 * 2 + 2)
    assert math.isfinite(sum(r["error"] for r in rows))
