"""The figure a newcomer looks at first (issue 8, item 6).

Each preset is reproduced once on its ``--tiny`` grid with 2 runs (about a second each), and
the matplotlib Figure that ``plot`` saves is captured and inspected: log n axis, y limits
shared by every panel, every curve distinguishable by marker and line style (not by colour
alone), the same look for a (mechanism, decoder) in every panel, ℓ1 = 2 marked as the largest
possible error, CP's sparsity shown, and a legend that says what the line and the band are
(checked against the CSV: the line is the mean over runs, the band their min and max).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.figure import Figure

from ldpdist import cli
from ldpdist.experiments import COLUMNS, PRESETS, read_csv

RUNS = 2
# Presets drawn by the generic figure; a preset with a figure of its own (``Preset.figure``)
# is tested beside it (the context-aware one: tests/test_context_aware_experiment.py).
GENERIC = sorted(name for name, preset in PRESETS.items() if not preset.figure)
L1_PRESETS = [name for name in GENERIC if PRESETS[name].metric == "l1"]


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """preset name -> (figure saved by ``ldpdist reproduce NAME --tiny``, CSV rows)."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            saved = []
            original = Figure.savefig

            def savefig(self, *args, **kwargs):
                saved.append(self)
                return original(self, *args, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(Figure, "savefig", savefig)
                status = cli.main(["reproduce", name, "--tiny", "--runs", str(RUNS),
                                   "--out", str(out)])
            assert status == 0 and len(saved) == 1
            cache[name] = saved[0], read_csv(out / f"{name}.csv")
        return cache[name]

    return get


def panels(figure):
    """The visible axes that hold data (the ones with lines)."""
    return [ax for ax in figure.axes if ax.get_visible() and ax.get_lines()]


def data_lines(ax):
    """Lines with markers: one per (mechanism, decoder); reference lines have none."""
    return [line for line in ax.get_lines() if line.get_marker() not in (None, "", "None")]


def series_key(line) -> str:
    """'CP (project)' from a label such as 'CP (project), s = 10'."""
    return line.get_label().split(",")[0]


def panel_key(ax):
    """(distribution, ε, k) from a panel title 'Geo(0.8): k = 1000, ε = 0.5 …'."""
    match = re.match(r"(.+): k = (\d+), ε = ([^\s,]+)", ax.get_title())
    assert match, ax.get_title()
    return match[1], float(match[3]), int(match[2])


def legend_texts(figure):
    return [text.get_text() for legend in figure.legends for text in legend.get_texts()]


@pytest.mark.parametrize("name", GENERIC)
def test_n_axis_is_logarithmic(name, reproduced):
    figure, _ = reproduced(name)
    assert panels(figure)
    for ax in panels(figure):
        assert ax.get_xscale() == "log", ax.get_title()


@pytest.mark.parametrize("name", GENERIC)
def test_panels_share_the_y_limits(name, reproduced):
    figure, _ = reproduced(name)
    axes = panels(figure)
    limits = {ax.get_ylim() for ax in axes}
    assert len(limits) == 1, limits
    for ax in axes[1:]:
        assert axes[0].get_shared_y_axes().joined(axes[0], ax)


@pytest.mark.parametrize("name", GENERIC)
def test_every_curve_is_distinguishable(name, reproduced):
    figure, rows = reproduced(name)
    series = {(r["mechanism"], r["decoder"]) for r in rows}
    styles = {}
    for ax in panels(figure):
        lines = data_lines(ax)
        assert {series_key(line) for line in lines} == {f"{m} ({d})" for m, d in series}
        triples = [(line.get_marker(), line.get_linestyle(), line.get_color())
                   for line in lines]
        assert len(set(triples)) == len(triples), triples
        # without colour too (curves that coincide, grey-scale prints, colour blindness)
        pairs = [(line.get_marker(), line.get_linestyle()) for line in lines]
        assert len(set(pairs)) == len(pairs), pairs
        for line, triple in zip(lines, triples):
            # one look per (mechanism, decoder) across panels
            assert styles.setdefault(series_key(line), triple) == triple


@pytest.mark.parametrize("name", L1_PRESETS)
def test_largest_possible_l1_error_is_marked(name, reproduced):
    figure, _ = reproduced(name)
    label = "largest possible ℓ1 error (2)"
    assert label in legend_texts(figure)
    for ax in panels(figure):
        bounds = [line for line in ax.get_lines() if line.get_label() == label]
        assert len(bounds) == 1, ax.get_title()
        assert bounds[0].get_linestyle() == "--"
        assert np.all(np.asarray(bounds[0].get_ydata(), dtype=float) == 2.0)
        low, high = ax.get_ylim()
        assert low < 2.0 < high


@pytest.mark.parametrize("name", L1_PRESETS)
def test_cp_sparsity_is_shown(name, reproduced):
    figure, rows = reproduced(name)
    sparsity = {}
    for r in rows:
        if r["mechanism"] == "CP" and not r["decoder"].endswith("/auto"):
            sparsity.setdefault(r["distribution"], set()).add(r["sparsity"])
    assert sparsity["Unif(10)"] == {10} and sparsity["Unif(25)"] == {25}
    for ax in panels(figure):
        distribution = ax.get_title().split(":")[0]
        (s,) = sparsity[distribution]
        cp = [line for line in data_lines(ax) if line.get_label().startswith("CP ")
              and "/auto" not in line.get_label()]
        assert cp and all(f"s = {s}" in line.get_label() for line in cp)
        assert f"s = {s}" in ax.get_title()
    cp_entries = [text for text in legend_texts(figure)
                  if text.startswith("CP ") and "/auto" not in text]
    assert cp_entries and all("s " in text or "s = " in text for text in cp_entries)


@pytest.mark.parametrize("name", [n for n in GENERIC if PRESETS[n].x == "n"])
def test_line_and_band_are_what_the_legend_says(name, reproduced):
    figure, rows = reproduced(name)
    texts = legend_texts(figure)
    assert f"line: mean over {RUNS} runs" in texts
    assert f"band: min–max over {RUNS} runs" in texts
    metric = PRESETS[name].metric
    values = defaultdict(list)
    for r in rows:
        values[(r["distribution"], r["epsilon"], r["k"], f"{r['mechanism']} ({r['decoder']})",
                r["n"])].append(r[metric])
    checked = 0
    for ax in panels(figure):
        bands = [c for c in ax.collections if c.get_label() and not c.get_label().startswith("_")]
        by_label = {c.get_label(): c for c in bands}
        for line in data_lines(ax):
            key = panel_key(ax) + (series_key(line),)
            xs = np.asarray(line.get_xdata(), dtype=float)
            ys = np.asarray(line.get_ydata(), dtype=float)
            band = by_label[f"band of {line.get_label()}"].get_paths()[0].vertices
            for x, y in zip(xs, ys):
                runs = values[key + (int(x),)]
                assert len(runs) == RUNS
                assert y == pytest.approx(np.mean(runs), rel=1e-12)
                at_x = band[np.isclose(band[:, 0], x), 1]
                assert min(runs) == pytest.approx(at_x.min(), rel=1e-12)
                assert max(runs) == pytest.approx(at_x.max(), rel=1e-12)
                checked += 1
    assert checked == len(values)


def synthetic_rows(decoders, l1=1.0):
    return [{"mechanism": "HR", "decoder": decoder, "distribution": "Geo(0.8)", "k": 10,
             "m": "", "sparsity": "", "epsilon": 1.0, "n": n, "run": run, "l1": l1 + run,
             "l2": 0.5, "seconds": 0.1, "path": "simulate"}
            for decoder in decoders for n in (100, 1000) for run in range(2)]


def test_raw_estimates_are_not_claimed_bounded_by_2():
    """A raw estimate is not a distribution: its ℓ1 error can exceed 2 (here 2.5)."""
    import matplotlib.pyplot as plt
    from ldpdist.experiments import figure

    fig = figure(synthetic_rows(("raw", "project"), l1=1.5), metric="l1")
    try:
        texts = legend_texts(fig)
        assert "largest possible ℓ1 error (2)" not in texts
        assert any("raw estimates can exceed it" in text for text in texts)
        assert fig.axes[0].get_ylim()[1] > 2.5
    finally:
        plt.close(fig)


def test_csv_without_sparsity_column_still_reads(tmp_path):
    columns = [c for c in COLUMNS if c != "sparsity"]
    path = tmp_path / "old.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerow({key: value for key, value in synthetic_rows(("project",))[0].items()
                         if key in columns})
    (row,) = read_csv(path)
    assert row["sparsity"] == "" and row["l1"] == 1.0


@pytest.mark.parametrize("name", sorted(n for n, p in PRESETS.items() if p.x == "support"))
def test_support_presets_plot_mean_tv_against_the_support(name, reproduced):
    figure, rows = reproduced(name)
    values = defaultdict(list)
    for r in rows:
        values[(r["epsilon"], f"{r['mechanism']} ({r['decoder']})", r["support"])].append(
            r["l1"] / 2)
    epsilons = sorted({r["epsilon"] for r in rows}, key=str)
    axes = panels(figure)
    assert len(axes) == len(epsilons)
    checked = 0
    for ax in axes:
        assert ax.get_xlabel() == "support size s of p"
        assert ax is not axes[0] or ax.get_ylabel() == "total variation distance"
        title = ax.get_title()
        epsilon = next((e for e in epsilons if e != "" and f"ε = {e:g}" in title), "")
        for line in data_lines(ax):
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                runs = values[(epsilon, series_key(line), int(x))]
                assert len(runs) == RUNS and y == pytest.approx(np.mean(runs), rel=1e-12)
                checked += 1
    assert checked == len(values)
