"""The ``consistency`` preset (ldpdist.experiments.frequency_consistency): its files, its
grid, and properties of its numbers that must hold whatever the seed, on the ``--tiny`` grid
(about a second)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from ldpdist import cli
from ldpdist.experiments import frequency_consistency as fc
from ldpdist.experiments.commands import STUDIES


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("consistency")
    assert cli.main(["reproduce", "consistency", "--tiny", "--runs", "2", "--out",
                     str(out)]) == 0
    assert (out / "consistency.png").stat().st_size > 10_000
    return fc.read(out / "consistency.csv")


def test_the_preset_is_listed():
    assert "consistency" in STUDIES


def test_the_tiny_grid_is_complete(tiny):
    keys = defaultdict(int)
    for row in tiny:
        keys[(row["query"], row["mechanism"], row["method"], row["distribution"],
              row["epsilon"])] += 1
        assert row["k"] == fc._K[2] and row["n"] == fc._N[2]
        assert row["error"] >= 0 and row["seconds"] >= 0
        assert (row["l1"] != "") == (row["query"] == "full")
    assert set(keys.values()) == {2}
    assert len(keys) == (len(fc.QUERIES) * len(fc.MECHANISMS) * len(fc.METHODS)
                         * len(fc.DISTRIBUTIONS) * len(fc._EPSILONS[2]))


def by_method(rows, query):
    data = defaultdict(dict)
    for row in rows:
        if row["query"] == query:
            data[(row["mechanism"], row["distribution"], row["epsilon"], row["run"])][
                row["method"]] = row
    return data


def test_numbers_that_hold_for_any_seed(tiny):
    for cell in by_method(tiny, "full").values():
        base = cell["base"]["error"]
        # the projection onto the simplex never moves away from a distribution
        assert cell["norm_sub"]["error"] <= base * (1 + 1e-12)
        # Post-Pos is the raw estimate for single values
        assert cell["post_pos"]["error"] == base
        # clipping negatives at 0 never moves an entry away from a non-negative truth
        assert cell["base_pos"]["error"] <= base
        assert cell["base_pos"]["l1"] <= cell["base"]["l1"]
    for cell in by_method(tiny, "sets").values():
        # a negative answer is farther from a non-negative truth than 0 is
        assert cell["post_pos"]["error"] <= cell["base"]["error"]


def test_summary_names_a_winner_per_query(tiny):
    text = fc.summary(tiny)
    for query in fc.QUERIES:
        assert f"{query} on Zipf(1.1)" in text
    best = fc.winners(tiny)
    assert len(best) == len(fc.QUERIES) * len(fc.MECHANISMS) * len(fc.DISTRIBUTIONS)
    for method, value, base in best.values():
        assert value <= base


def test_the_figure_follows_the_common_style():
    """Lettered panels, one legend below them in the common fonts, no repeated entries, and
    any two methods told apart by marker, line style or fill (grey-scale safe)."""
    import re

    from ldpdist.experiments.plotting import FONT_SIZES

    rows = list(fc.rows_for(64, 2000, (1.0, 2.0), 1, 0))
    figure = fc.figure(rows)
    axes = [ax for ax in figure.axes if ax.get_visible() and ax.get_lines()]
    assert len(axes) == len(fc.QUERIES) * len(fc.DISTRIBUTIONS)
    assert [re.match(r"\(([a-z])\) ", ax.get_title())[1] for ax in axes] == \
        [chr(ord("a") + i) for i in range(len(axes))]
    assert len(figure.legends) == 1
    legend = figure.legends[0]
    assert legend.get_window_extent().y1 <= min(ax.get_window_extent().y0 for ax in axes)
    assert {t.get_fontsize() for t in legend.get_texts()} == {FONT_SIZES["legend"]}
    texts = [t.get_text() for t in legend.get_texts() if t.get_text()]
    assert len(texts) == len(set(texts))
    assert set(fc.NAMES.values()) <= set(texts)
    for ax in axes:
        assert ax.title.get_fontsize() == FONT_SIZES["title"]
        lines = [line for line in ax.get_lines() if line.get_marker() not in ("None", "")]
        assert len(lines) == len(fc.METHODS)
        grey = {(line.get_marker(), line.get_linestyle(),
                 str(line.get_markerfacecolor()) == "none") for line in lines}
        assert len(grey) == len(lines)
