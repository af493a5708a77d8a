"""The context-aware preset (``ldpdist reproduce context-aware --quick``): its outputs, its
figure, and the findings it reports — each context-aware curve under the paper's bound, the
n^(-1/2) law its savings rest on, and savings that order as the theorems say."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from ldpdist import cli
from ldpdist.experiments import PRESETS, read_csv
from ldpdist.experiments import context_aware as ca


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """(figure, rows, savings rows, printed text) of one quick run (k = 10^4, 2 runs)."""
    out = tmp_path_factory.mktemp("context-aware")
    saved = []
    original = Figure.savefig

    def savefig(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", savefig)
        status = cli.main(["reproduce", "context-aware", "--quick", "--out", str(out)])
    assert status == 0 and len(saved) == 1
    assert (out / "context-aware.png").stat().st_size > 0
    with open(out / "context-aware-savings.csv", newline="") as handle:
        savings = list(csv.DictReader(handle))
    return saved[0], read_csv(out / "context-aware.csv"), savings


def mean_l1(rows):
    """(mechanism, n) -> mean raw ℓ1 over the runs."""
    values = {}
    for row in rows:
        assert row["decoder"] == "raw"
        values.setdefault((row["mechanism"], row["n"]), []).append(row["l1"])
    return {key: float(np.mean(v)) for key, v in values.items()}


def test_the_grid_is_hr_and_rr_against_high_low_and_block_hr_at_k_10000_eps_1(quick):
    _, rows, _ = quick
    preset = PRESETS["context-aware"]
    assert preset.ks == (10_000,) and preset.epsilons == (1.0,)
    mechanisms = {row["mechanism"] for row in rows}
    assert mechanisms == {"HR", "RR", "HL-HR s=10", "HL-HR s=100", "HL-HR s=1000",
                          "Block HR m=1", "Block HR m=10", "Block HR m=100"}
    assert {row["path"] for row in rows} == {"simulate"}
    assert min(row["n"] for row in rows) == 10**5 and max(row["n"] for row in rows) == 10**11


def test_every_context_aware_curve_is_under_its_bound(quick):
    """Bounds (19) and (24) hold for the expected ℓ1; the mean of the runs is far below them
    (measured 0.23–0.72 of the bound), so a curve above one is a defect, not noise."""
    _, rows, _ = quick
    for (mechanism, n), l1 in mean_l1(rows).items():
        if mechanism.startswith("HL-HR"):
            bound = ca.high_low_bound(10_000, int(mechanism.split("=")[1]), 1.0, n)
        elif mechanism.startswith("Block HR"):
            bound = ca.block_bound(10_000, int(mechanism.split("=")[1]), 1.0, n)
        else:
            continue
        assert l1 < 0.9 * bound, (mechanism, n, l1, bound)


def test_the_raw_errors_follow_the_inverse_square_root_law(quick):
    """The savings assume ℓ1 = C/√n: ℓ1·√n varies by under 15% across 10^5 … 10^11."""
    _, _, savings = quick
    assert len(savings) == 6
    for row in savings:
        assert float(row["spread"]) < 1.15, row


def test_savings_order_as_the_theorems_say(quick):
    _, _, savings = quick
    measured = {row["mechanism"]: float(row["measured"]) for row in savings}
    predicted = {row["mechanism"]: float(row["predicted"]) for row in savings}
    # High-Low: fewer sensitive values, larger saving; all of them large at k = 10^4
    assert measured["HL-HR s=10"] > measured["HL-HR s=100"] > measured["HL-HR s=1000"] > 50
    # Block: the saving grows like m (variance c² p(block)/n with p(block) = 1/m)
    base = measured["Block HR m=1"]
    for m in (10, 100):
        assert measured[f"Block HR m={m}"] / base == pytest.approx(m, rel=0.2)
    assert predicted["Block HR m=10"] == 10 and predicted["HL-HR s=10"] == pytest.approx(
        10_000**2 / (100 + 10_000))
    # the constants the theorems drop stay within a factor of 4 here
    for name in measured:
        assert 0.25 < measured[name] / predicted[name] < 4, (name, measured[name],
                                                             predicted[name])


def test_figure_has_the_three_panels_and_the_bounds(quick):
    figure, rows, _ = quick
    axes = [ax for ax in figure.axes if ax.get_visible()]
    assert len(axes) == 3
    high_low, block, saving = axes
    for ax, family, bound in ((high_low, "HL-HR", "bound (19)"), (block, "Block HR",
                                                                 "bound (24)")):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        labels = [line.get_label() for line in ax.get_lines()]
        members = sorted({row["mechanism"] for row in rows if row["mechanism"].startswith(family)})
        assert set(members) <= set(labels) and "HR" in labels
        assert sum(label.startswith(bound) for label in labels) == len(members)
        for line in ax.get_lines():
            if line.get_label().startswith(bound):
                assert line.get_linestyle() == "--"
    assert "RR" in [line.get_label() for line in high_low.get_lines()]
    assert saving.get_yscale() == "log"
    assert [t.get_text() for t in saving.get_xticklabels()] == [
        "HL-HR s=10", "HL-HR s=100", "HL-HR s=1000", "Block HR m=1", "Block HR m=10",
        "Block HR m=100"]


def test_bounds_are_the_papers():
    c = (math.e + 1) / (math.e - 1)
    assert ca.c_factor(1.0) == pytest.approx(c)
    assert ca.high_low_bound(10_000, 10, 1.0, 1e6) == pytest.approx(
        math.sqrt(3 * 100 * c * c / 1e6) + math.sqrt(c * 10_000 / 1e6))
    assert ca.block_bound(10, 3, 1.0, 4.0) == pytest.approx(
        2 * c * math.sqrt(3 * (16 + 9 + 9) / 4.0))


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_predicted_saving_is_the_ratio_of_the_sample_complexities(epsilon):
    # plain LDP's k²/ε² over Theorem 3's s²/ε² + k/ε, at any ε (not only the preset's ε = 1)
    k, s = 1000, 10
    plain, high_low = k * k / epsilon**2, s * s / epsilon**2 + k / epsilon
    assert ca.predicted_saving("high-low", k, s, epsilon) == pytest.approx(plain / high_low)
    assert ca.predicted_saving("block", k, 7, epsilon) == 7.0
