"""The figure a newcomer looks at first: every preset's plot is readable on its own.

Each preset is reproduced once on its ``--tiny`` grid with 2 runs (about a second each), and
the matplotlib Figure that ``plot`` saves is captured and inspected: log n axis, y limits
shared by every panel, every curve distinguishable by marker and line style (not by colour
alone), the same look for a (mechanism, decoder) in every panel, ℓ1 = 2 marked as the largest
possible error, CP's sparsity shown, and a legend that says what the line and the band are
(checked against the CSV: the line is the mean over runs, the band their min and max).

One style for every preset, the special figures (context-aware, linear-queries) included:
panels lettered (a), (b), … once each in reading order, the same font sizes (legends at least
``FONT_SIZES["legend"]``), one legend below the panels with no repeated entry, distinguishable
curves in every panel, and the same colour for a mechanism in every figure.
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
from ldpdist.experiments import linear_queries as lq
from ldpdist.experiments.plotting import FONT_SIZES

RUNS = 2
# Presets drawn by the generic figure; a preset with a figure of its own (``Preset.figure``)
# is tested beside it (the context-aware one: tests/test_context_aware_experiment.py).
GENERIC = sorted(name for name, preset in PRESETS.items() if not preset.figure)
L1_PRESETS = [name for name in GENERIC if PRESETS[name].metric == "l1"]
# every figure ``ldpdist reproduce`` draws, for the style checks
EVERY_FIGURE = sorted([*PRESETS, "linear-queries"])


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
            rows = (lq.read(out / f"{name}.csv") if name == "linear-queries"
                    else read_csv(out / f"{name}.csv"))
            cache[name] = saved[0], rows
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


def title_text(ax) -> str:
    """A panel title without its letter: 'Geo(0.8): k = 1000 …' from '(a) Geo(0.8): …'."""
    return re.sub(r"^\([a-z]\) ", "", ax.get_title())


def panel_key(ax):
    """(distribution, ε, k) from a panel title '(a) Geo(0.8): k = 1000, ε = 0.5 …'."""
    match = re.match(r"(.+): k = (\d+), ε = ([^\s,]+)", title_text(ax))
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
        distribution = title_text(ax).split(":")[0]
        (s,) = sparsity[distribution]
        cp = [line for line in data_lines(ax) if line.get_label().startswith("CP ")
              and "/auto" not in line.get_label()]
        assert cp and all(f"s = {s}" in line.get_label() for line in cp)
        assert f"s = {s}" in ax.get_title()
    # s differs between panels: said once, in the figure's title, not in every legend entry
    cp_entries = [text for text in legend_texts(figure)
                  if text.startswith("CP ") and "/auto" not in text]
    assert cp_entries and not any("s " in text for text in cp_entries), cp_entries
    assert figure._suptitle.get_text().count("s (known): in the panel titles") == 1


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


# -- one style for every preset ---------------------------------------------------------------


def reading_order(figure):
    """The visible axes, top to bottom then left to right."""
    axes = [ax for ax in figure.axes if ax.get_visible()]
    return sorted(axes, key=lambda ax: (-round(ax.get_position().y1, 2),
                                        round(ax.get_position().x0, 2)))


def line_mechanism(label: str) -> str:
    """The mechanism of a data line: 'CP' from 'CP (project), s = 3', 'Gaussian' from
    'Gaussian, raw' and from 'Gaussian (A = I), raw' (the same protocol), 'HL-HR s=10' from
    itself; projected HR is HR."""
    name = label.split(" (")[0].split(",")[0]
    return "HR" if name == "projected HR" else name


def line_series(label: str) -> tuple:
    """(mechanism, decoder or estimator) of a data line's label."""
    head = label.split("\n")[0].split(", s = ")[0]
    if ", " in head:                      # 'Gaussian (A = I), raw' (linear queries)
        name, estimator = head.rsplit(", ", 1)
        return line_mechanism(name), estimator.rstrip(":")
    match = re.fullmatch(r"(.*) \(([^)]*)\)", head)   # 'CP (project)'
    return (line_mechanism(match[1]), match[2]) if match else (line_mechanism(head), "")


@pytest.mark.parametrize("name", EVERY_FIGURE)
def test_panels_are_lettered_once_in_reading_order(name, reproduced):
    figure, _ = reproduced(name)
    letters = [re.match(r"\(([a-z])\) \S", ax.get_title()) for ax in reading_order(figure)]
    assert all(letters), [ax.get_title() for ax in reading_order(figure)]
    assert [m[1] for m in letters] == [chr(ord("a") + i) for i in range(len(letters))]


@pytest.mark.parametrize("name", EVERY_FIGURE)
def test_one_legend_below_the_panels_in_the_common_fonts(name, reproduced):
    figure, _ = reproduced(name)
    assert len(figure.legends) == 1
    assert all(ax.get_legend() is None for ax in figure.axes)
    legend = figure.legends[0]
    assert legend.get_window_extent().y1 <= min(ax.get_window_extent().y0
                                                for ax in reading_order(figure))
    assert {text.get_fontsize() for text in legend.get_texts()} == {FONT_SIZES["legend"]}
    assert FONT_SIZES["legend"] >= 10
    assert figure._suptitle.get_fontsize() == FONT_SIZES["suptitle"]
    for ax in reading_order(figure):
        assert ax.title.get_fontsize() == FONT_SIZES["title"], ax.get_title()
        assert ax.xaxis.label.get_fontsize() == FONT_SIZES["label"]
        assert ax.get_xlabel() in ("n (users)", "support size s of p", "")
        sizes = {tick.get_fontsize() for tick in ax.get_xticklabels() + ax.get_yticklabels()}
        assert sizes <= {FONT_SIZES["tick"]}, sizes


@pytest.mark.parametrize("name", EVERY_FIGURE)
def test_no_repeated_legend_entries(name, reproduced):
    figure, _ = reproduced(name)
    texts = [text for text in legend_texts(figure) if text]
    assert len(texts) == len(set(texts)), sorted(t for t in texts if texts.count(t) > 1)
    assert not any("panel titles" in text for text in texts)


def look(line):
    return (line.get_color(), line.get_marker(), line.get_linestyle(),
            str(line.get_markerfacecolor()), line.get_markersize(), line.get_linewidth())


@pytest.mark.parametrize("name", EVERY_FIGURE)
def test_series_have_distinguishable_styles(name, reproduced):
    """In every panel and in the legend, two data series never look alike, and not even
    alike in grey scale (marker, line style, fill and size)."""
    figure, _ = reproduced(name)
    for ax in reading_order(figure):
        lines = data_lines(ax)
        grey = [look(line)[1:] for line in lines]
        assert len(set(grey)) == len(grey), (ax.get_title(), [l.get_label() for l in lines])
    # legend entries that look alike are one series (the Gaussian protocol's raw estimate
    # in two experiments)
    series = defaultdict(set)
    for handle, text in zip(figure.legends[0].legend_handles, legend_texts(figure)):
        if text and getattr(handle, "get_marker", lambda: "None")() not in (None, "", "None",
                                                                             "none"):
            series[look(handle)].add(line_series(text))
    assert all(len(names) == 1 for names in series.values()), series


def test_a_mechanism_has_one_colour_in_every_figure(reproduced):
    colours = defaultdict(set)
    for name in EVERY_FIGURE:
        figure, _ = reproduced(name)
        for ax in reading_order(figure):
            for line in data_lines(ax):
                if not line.get_label().startswith("_"):
                    colours[line_mechanism(line.get_label())].add(
                        matplotlib.colors.to_hex(line.get_color()))
    assert {"HR", "RR", "CP", "Gaussian"} <= set(colours)
    assert {name: c for name, c in colours.items() if len(c) > 1} == {}
    # and different mechanisms do not share a colour (families share their map's hues)
    owners = defaultdict(set)
    for name, (colour,) in colours.items():
        owners[colour].add(name.split(" ")[0] if "=" in name else name)
    shared = {c: n for c, n in owners.items() if len(n) > 1}
    assert all(n <= {"Gaussian", "Gaussian (A = I)"} for n in shared.values()), shared


def test_distribution_panels_have_one_order_in_every_preset(reproduced):
    orders = {}
    for name in L1_PRESETS:
        figure, _ = reproduced(name)
        orders[name] = list(dict.fromkeys(panel_key(ax)[0] for ax in reading_order(figure)))
    assert len({tuple(order) for order in orders.values()}) == 1, orders


def hull_rows(convex_factor):
    rows = []
    for estimator, factor in (("raw", 2.0), ("symmetric hull", 1.0),
                              ("convex hull", convex_factor)):
        for n in (1000, 10_000):
            for run in range(2):
                rows.append({"panel": "a", "method": "Gaussian", "estimator": estimator,
                             "J": 50, "d": 4, "epsilon": 1.0, "delta": 1e-6, "n": n,
                             "run": run, "error": factor / n ** 0.5, "l2": 0.0, "linf": 0.0,
                             "bound": 10 / n ** 0.5, "seconds": 0.0, "path": "privatize"})
    return rows


@pytest.mark.parametrize("factor, note", [(1.0, "coincides with symmetric hull"),
                                          (1.004, "within 1% of symmetric hull"),
                                          (0.5, None)])
def test_coinciding_hull_curves_stay_visible_and_the_legend_says_so(factor, note):
    import matplotlib.pyplot as plt

    fig = lq.figure(hull_rows(factor))
    try:
        (ax,) = reading_order(fig)
        lines = {line.get_label().split("\n")[0]: line for line in data_lines(ax)}
        symmetric, convex = lines["Gaussian, symmetric hull"], lines["Gaussian, convex hull"]
        # the convex one on top, thinner, smaller, white-filled, dashed: both stay visible
        assert convex.get_zorder() > symmetric.get_zorder()
        assert convex.get_markersize() < symmetric.get_markersize()
        assert convex.get_linewidth() < symmetric.get_linewidth()
        assert convex.get_linestyle() != symmetric.get_linestyle()
        assert symmetric.get_alpha() < 1
        texts = [t for t in legend_texts(fig) if t.startswith("Gaussian, convex hull")]
        assert len(texts) == 1
        assert (note in texts[0]) if note else ("symmetric" not in texts[0]), texts
    finally:
        plt.close(fig)
