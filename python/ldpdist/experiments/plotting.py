"""The figures of the experiments: error (or time) against n, one panel per (ε, k,
distribution); see :func:`plot`. Also the style every ``ldpdist reproduce`` figure shares
(fonts, panel letters, legend, looks of mechanisms and decoders), used by the presets with a
figure of their own (:mod:`ldpdist.experiments.context_aware`,
:mod:`ldpdist.experiments.linear_queries`)."""

from __future__ import annotations

import math
import textwrap
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

_METRIC_LABEL = {"l1": "ℓ1 error", "l2": "ℓ2 error", "tv": "total variation distance",
                 "seconds": "decoding time (s)"}
_X_LABEL = {"n": "n (users)", "support": "support size s of p"}


def metric_value(row: Dict[str, Any], metric: str) -> float:
    """A plotted quantity of a CSV row: a column, or ``"tv"`` = d_TV = ℓ1 / 2."""
    return float(row["l1"]) / 2 if metric == "tv" else float(row[metric])

# The worst error between two distributions: ‖p̂ − p‖₁ ≤ 2 and ‖p̂ − p‖₂ ≤ √2, reached when
# p̂ and p have disjoint supports. A curve near it means the estimate is worthless.
_WORST_ERROR = {"l1": (2.0, "largest possible ℓ1 error (2)"),
                "tv": (1.0, "largest possible d_TV (1)"),
                "l2": (math.sqrt(2.0), "largest possible ℓ2 error (√2)")}

# -- One style for every figure of every preset ---------------------------------------------
# Every figure (the generic grid below, ``context_aware.figure``, ``linear_queries.figure``)
# uses these: the same font sizes, panels lettered (a), (b), … in reading order at the start
# of their titles, one legend for the whole figure below the panels, the same axis labels,
# the same n axis (log, ticks 10k / 1M), and the same look for a mechanism everywhere:
# colour and marker name the mechanism, line style and marker fill the decoder (estimator);
# lines without markers are references (theoretical bounds in the colour of their curve,
# the largest possible error in grey).

#: font sizes in points (tests/test_figure.py checks the legends against ``legend``)
FONT_SIZES = {"suptitle": 12, "title": 11, "label": 11, "tick": 10, "legend": 10}
#: inches per panel (width, height), plus room for the suptitle
PANEL_SIZE = (4.3, 3.6)

_MECHANISM_LOOK = {"RR": ("tab:blue", "o"), "RAPPOR": ("tab:orange", "s"),
                   "SS": ("tab:green", "^"), "HR": ("tab:red", "D"),
                   "OUE": ("tab:brown", "v"), "OLH": ("tab:pink", "P"),
                   "CP": ("tab:purple", "*"), "1-bit HR": ("tab:cyan", "p"),
                   "2-stage RAPPOR": ("tab:olive", "h"),
                   # linear queries (Bassily, AISTATS 2019); projected HR is HR
                   "Gaussian": ("black", "o"), "Gaussian (A = I)": ("black", "o"),
                   "rejection sampling": ("teal", "s"), "projected HR": ("tab:red", "D"),
                   "adaptive (Alg. 6)": ("darkgoldenrod", "<")}
# Families with a parameter (PCH ℓ=3, HL-HR s=100, Block HR m=10): one colour of a sequential
# map and one marker per value of the parameter, so that a member looks the same in every
# figure; the position in the map is log10 of the parameter (linear in ℓ for PCH).
_FAMILY_LOOK = {"PCH ℓ=": ("viridis", lambda v: min(v, 8) / 8.5,
                            ("o", "s", "^", "D", "v", "P", "X", "<", ">")),
                "HL-HR s=": ("viridis", lambda v: min(max(0.3 * math.log10(v) - 0.15, 0), 0.9),
                             ("X", "d", "H", ">", "<")),
                "Block HR m=": ("plasma", lambda v: min(0.15 + 0.3 * math.log10(v), 0.9),
                                ("X", "d", "H", ">", "<"))}
_SPARE_LOOKS = (("tab:gray", "X"), ("tab:olive", "h"), ("tab:cyan", "<"), ("black", ">"))
# line style and whether the marker is filled, per decoder / estimator: the projected (or
# otherwise final) estimate solid and filled, the normalized one dashed and hollow, the raw
# one dotted and hollow
_DECODER_LOOK = {"project": ("-", True), "normalize": ("--", False), "ibu": ("-.", True),
                 "sparse_project": (":", True), "raw": (":", False),
                 "two_stage": ("-.", False), "two_stage_project": ("-.", True),
                 # linear queries
                 "projected": ("-", True), "symmetric hull": ("-", True),
                 "convex hull": ("--", False), "round means": ("-", True)}
# s chosen by the noise-level rule ("DECODER/auto"): dashed, hollow markers
_AUTO_LOOK = ("--", False)


def mechanism_look(mechanism: str, spare: Optional[Dict[str, Tuple[str, str]]] = None
                   ) -> Tuple[str, str]:
    """(colour, marker) of a mechanism, the same in every figure; ``spare`` hands out
    looks to names that have none (kept in the dict, so stable within a figure)."""
    for prefix, (cmap, position, markers) in _FAMILY_LOOK.items():
        value = mechanism[len(prefix):]
        if mechanism.startswith(prefix) and value.isdigit() and int(value) > 0:
            import matplotlib

            value = int(value)
            color = matplotlib.colors.to_hex(matplotlib.colormaps[cmap](position(value)))
            rank = value - 1 if prefix == "PCH ℓ=" else round(math.log10(value))
            return color, markers[rank % len(markers)]
    if mechanism in _MECHANISM_LOOK:
        return _MECHANISM_LOOK[mechanism]
    spare = {} if spare is None else spare
    if mechanism not in spare:
        spare[mechanism] = _SPARE_LOOKS[len(spare) % len(_SPARE_LOOKS)]
    return spare[mechanism]


def series_look(mechanism: str, decoder: str,
                spare: Optional[Dict[str, Tuple[str, str]]] = None) -> Dict[str, Any]:
    """Keyword arguments of ``Axes.plot`` for one (mechanism, decoder) series: colour and
    marker from the mechanism, line style and marker fill from the decoder."""
    color, marker = mechanism_look(mechanism, spare)
    if decoder.endswith("/auto"):
        linestyle, filled = _AUTO_LOOK
    else:
        linestyle, filled = _DECODER_LOOK.get(decoder, ("-.", False))
    size = 9 if marker == "*" else 6
    return dict(color=color, marker=marker, linestyle=linestyle, markersize=size,
                markerfacecolor=color if filled else "none", markeredgewidth=1.2,
                linewidth=1.4)


def bound_look(color: str, raw: bool = False) -> Dict[str, Any]:
    """A theoretical bound: thin, no marker, in its curve's colour; dashed, or dash-dot for
    the raw estimator's bound where it differs from the projected one's."""
    return dict(color=color, linestyle="-." if raw else "--", linewidth=1.0, alpha=0.85,
                marker="None")


#: the largest possible error: a grey dashed line without markers
WORST_LOOK = dict(linestyle="--", color="0.3", linewidth=1.0)


def panel_label(index: int) -> str:
    """'(a)', '(b)', … for the panel at ``index`` in reading order."""
    return f"({chr(ord('a') + index)})" if index < 26 else f"({index + 1})"


def subplots(count: int, ncols: int, sharey: bool = False, width: Optional[float] = None):
    """A figure of ``count`` panels on ``ncols`` columns (unused slots hidden); returns
    (fig, the ``count`` axes in reading order)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = max(1, min(ncols, count))
    nrows = -(-count // ncols)
    size = (max(PANEL_SIZE[0] * ncols, 9.0) if width is None else width,
            PANEL_SIZE[1] * nrows + 0.9)
    fig, grid = plt.subplots(nrows, ncols, figsize=size, squeeze=False, sharey=sharey)
    axes = [grid[i // ncols][i % ncols] for i in range(nrows * ncols)]
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def style_panel(ax, index: int, heading: str, xlabel: str, ylabel: Optional[str]) -> None:
    """Title '(letter) heading', axis labels, tick label size and grid of one panel."""
    ax.set_title(f"{panel_label(index)} {heading}", fontsize=FONT_SIZES["title"])
    ax.set_xlabel(xlabel, fontsize=FONT_SIZES["label"])
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=FONT_SIZES["label"])
    ax.tick_params(labelsize=FONT_SIZES["tick"])
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="y", alpha=0.12)


def format_n_axis(ax, ns: Sequence[float]) -> None:
    """The n axis of every figure: log, ticks at 1, 2, 5 per decade over ≤ 2.5 decades
    (else one per decade), labelled 10k, 1M, …"""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    positive = [n for n in ns if n > 0]
    decades = math.log10(max(positive) / min(positive)) if positive else 0
    subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=30))
    ax.xaxis.set_major_formatter(FuncFormatter(_count_label))
    ax.xaxis.set_minor_formatter(NullFormatter())


def statistics_handles(runs: str) -> Tuple[List[Any], List[str]]:
    """The legend entries that say what the line and the band are."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return ([Line2D([], [], color="0.45", linewidth=1.4),
             Patch(facecolor="0.45", alpha=0.3, linewidth=0)],
            [f"line: mean over {runs}", f"band: min–max over {runs}"])


def legend_columns(groups: Sequence[Sequence[Tuple[Any, str]]],
                   tail: Sequence[Tuple[Any, str]] = ()) -> Tuple[List[Any], List[str], int]:
    """Legend entries laid out one group (a mechanism's curves) per column, then ``tail``
    (the reference entries) filling the last columns: (handles, labels, rows per column).
    Groups are padded with blank entries; an entry whose label was already given is dropped
    (no repeated legend entries)."""
    from matplotlib.lines import Line2D

    seen = set()
    kept = []
    for group in [*groups, tail]:
        entries = []
        for handle, label in group:
            if label not in seen:
                seen.add(label)
                entries.append((handle, label))
        kept.append(entries)
    tail = kept.pop()
    kept = [group for group in kept if group]
    rows = max((len(group) for group in kept), default=len(tail) or 1)
    handles: List[Any] = []
    labels: List[str] = []
    for group in kept:
        for handle, label in group:
            handles.append(handle)
            labels.append(label)
        for _ in range(len(group), rows):
            handles.append(Line2D([], [], linestyle="none", marker="none"))
            labels.append("")
    for handle, label in tail:
        handles.append(handle)
        labels.append(label)
    while len(handles) % rows:  # full columns: matplotlib then keeps a group per column
        handles.append(Line2D([], [], linestyle="none", marker="none"))
        labels.append("")
    return handles, labels, rows


def finish(fig, handles: Sequence[Any], labels: Sequence[str], rows: int, heading: str,
           caption: str) -> None:
    """The figure legend below the panels (as many columns as fit the width), the title
    (``heading``, wrapped) with ``caption`` on a second line, and the layout."""
    columns = max(1, -(-len(handles) // max(rows, 1)))
    while True:
        legend = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.005),
                            ncol=columns, fontsize=FONT_SIZES["legend"], frameon=False)
        fig.canvas.draw()
        if columns == 1 or legend.get_window_extent().width <= 0.98 * fig.bbox.width:
            break
        legend.remove()  # too wide: fewer columns
        columns -= 1
    # the figure grows by the legend's height: the panels keep their size
    inches = legend.get_window_extent().height / fig.dpi
    fig.set_figheight(fig.get_figheight() + inches)
    width = int(fig.get_figwidth() * 11)  # characters of the title per line
    fig.suptitle(textwrap.fill(heading, width) + "\n" + textwrap.fill(caption, width),
                 fontsize=FONT_SIZES["suptitle"])
    fig.canvas.draw()
    legend_height = legend.get_window_extent().height / fig.bbox.height
    fig.tight_layout(rect=(0, legend_height + 0.01, 1, 1))


_DISTRIBUTION_ORDER = ("Geo", "Unif")


def _distribution_rank(label: str) -> int:
    """Panels in the same order in every preset: geometric, then uniform, then the rest (each
    in the preset's order)."""
    family = label.split("(")[0]
    return _DISTRIBUTION_ORDER.index(family) if family in _DISTRIBUTION_ORDER else 99


def _runs_text(counts: Iterable[int]) -> str:
    counts = sorted(set(counts)) or [0]
    low, high = counts[0], counts[-1]
    number = f"{low}" if low == high else f"{low}–{high}"
    return f"{number} run{'s' if high != 1 else ''}"


def _sparsity_text(values: Iterable[Any]) -> str:
    values = sorted({int(v) for v in values if v != ""})
    if not values:
        return ""
    return f"{values[0]}" if len(values) == 1 else f"{values[0]}–{values[-1]}"


def _count_label(value: float, _position: Any = None) -> str:
    """50000 -> '50k', 1000000 -> '1M' (tick labels of the n axis)."""
    for unit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= unit:
            return f"{value / unit:g}{suffix}"
    return f"{value:g}"


def figure(rows: Sequence[Dict[str, Any]], metric: str = "l1", title: Optional[str] = None,
           log_x: Optional[bool] = True, x: str = "n"):
    """The matplotlib Figure that :func:`plot` saves (see there)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if metric not in _METRIC_LABEL:
        raise ValueError(f"metric must be one of {tuple(_METRIC_LABEL)}, got {metric!r}")
    if x not in _X_LABEL:
        raise ValueError(f"x must be one of {tuple(_X_LABEL)}, got {x!r}")
    log_x = True if log_x is None else bool(log_x)
    if not rows:
        raise ValueError("no rows to plot")
    dist_order = list(dict.fromkeys(row["distribution"] for row in rows))
    # the same panel order in every preset (a stable sort keeps the preset's order within a
    # family)
    dist_order.sort(key=_distribution_rank)
    panels: Dict[Tuple, List[Dict[str, Any]]] = {}
    for row in rows:
        # against n: a panel per distribution; against the support: the distribution is
        # the x axis, a panel per n. ε is empty for mechanisms without privacy.
        epsilon = -1.0 if row["epsilon"] == "" else row["epsilon"]
        third = dist_order.index(row["distribution"]) if x == "n" else row["n"]
        panels.setdefault((epsilon, row["k"], third), []).append(row)
    keys = sorted(panels)
    count = len(keys)
    columns = len(dist_order) if x == "n" else len({key[2] for key in keys})
    ncols = columns if columns > 1 else min(4, count)
    fig, axes = subplots(count, ncols, sharey=True)
    ncols = max(1, min(ncols, count))
    series_order = list(dict.fromkeys((row["mechanism"], row["decoder"]) for row in rows))
    spare: Dict[str, Tuple[str, str]] = {}
    looks = {series: series_look(*series, spare) for series in series_order}
    sparsity = {series: _sparsity_text(row.get("sparsity", "") for row in rows
                                       if (row["mechanism"], row["decoder"]) == series)
                for series in series_order}
    worst = _WORST_ERROR.get(metric)
    unbounded = ("raw", "two_stage")
    if worst is not None and any(row["decoder"].split("/")[0] in unbounded for row in rows):
        # raw and two-stage estimates are not distributions: their error is not bounded by
        # this
        worst = (worst[0], worst[1].replace("largest possible", "largest") +
                 " for a distribution; raw estimates can exceed it")
    run_counts: List[int] = []
    lows: List[float] = []
    highs: List[float] = []
    ns_all = sorted({row[x] for row in rows})
    for slot, key in enumerate(keys):
        ax = axes[slot]
        prow = panels[key]
        for series in series_order:
            data: Dict[int, List[float]] = {}
            for row in prow:
                if (row["mechanism"], row["decoder"]) == series:
                    # log axes: a zero error (or time) is drawn at the smallest positive float
                    data.setdefault(row[x], []).append(max(metric_value(row, metric), 1e-300))
            if not data:
                continue
            ns = sorted(data)
            mean = np.array([np.mean(data[n]) for n in ns])
            low = np.array([np.min(data[n]) for n in ns])
            high = np.array([np.max(data[n]) for n in ns])
            run_counts.extend(len(data[n]) for n in ns)
            lows.append(float(low.min()))
            highs.append(float(high.max()))
            label = f"{series[0]} ({series[1]})"
            s_text = _sparsity_text(row.get("sparsity", "") for row in prow
                                    if (row["mechanism"], row["decoder"]) == series)
            if s_text:
                label += f", s = {s_text}"
            look = looks[series]
            zorder = 3 if series[0] == "CP" else 2
            ax.plot(ns, mean, label=label, zorder=zorder, **look)
            ax.fill_between(ns, low, high, color=look["color"], alpha=0.15, linewidth=0,
                            label=f"band of {label}", zorder=1)
        if worst is not None:
            ax.axhline(worst[0], label=worst[1], zorder=1.5, **WORST_LOOK)
        sample = prow[0]
        where = (sample["distribution"] if x == "n" else f"n = {_count_label(sample['n'])}")
        heading = f"{where}: k = {sample['k']}"
        if sample["epsilon"] != "":
            heading += f", ε = {sample['epsilon']:g}"
        extra = []
        m_text = _sparsity_text(row["m"] for row in prow if row["mechanism"] == "CP")
        s_text = _sparsity_text(row.get("sparsity", "") for row in prow
                                if row["mechanism"] == "CP"
                                and not row["decoder"].endswith("/auto"))
        if m_text:
            extra.append(f"m = {m_text}")
        if s_text:
            extra.append(f"s = {s_text}")
        if extra:
            heading += "\nCP: " + ", ".join(extra)
        else:
            given = [row for row in prow if row.get("sparsity", "") != ""
                     and not row["decoder"].endswith("/auto")]
            s_text = _sparsity_text(row["sparsity"] for row in given)
            if s_text:
                used = sorted({row["decoder"] for row in given})
                # against the support, the s given is the x axis
                heading += (f"\n{', '.join(used)}: s known (the x axis)" if x == "support"
                            else f"\n{', '.join(used)}: s = {s_text}")
        style_panel(ax, slot, heading, _X_LABEL[x],
                    _METRIC_LABEL[metric] if slot % ncols == 0 else None)
        ax.set_yscale("log")
        if log_x and x == "support":
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif log_x:
            format_n_axis(ax, ns_all)
    # one y range for every panel (sharey), from the data and the worst-error line
    low = min(lows)
    high = max(highs + ([worst[0]] if worst is not None else []))
    axes[0].set_ylim(low / 1.6, high * 1.6)

    runs = _runs_text(run_counts)
    # the legend: one column per mechanism (its decoders one under the other), then the
    # reference entries. A series whose s differs between panels says so once, in the
    # caption, not in every entry.
    notes: List[str] = []
    groups: List[List[Tuple[Any, str]]] = []
    for mechanism in dict.fromkeys(mechanism for mechanism, _ in series_order):
        group = []
        for series in series_order:
            if series[0] != mechanism:
                continue
            label = f"{series[0]} ({series[1]})"
            if series[1].endswith("/auto"):
                note = "…/auto: s chosen by the noise-level rule"
                if note not in notes:
                    notes.append(note)
            elif sparsity[series] and x != "support":
                per_panel = {_sparsity_text(row.get("sparsity", "") for row in prow
                                            if (row["mechanism"], row["decoder"]) == series)
                             for prow in panels.values()} - {""}
                if len(per_panel) > 1:
                    note = "s (known): in the panel titles"
                    if note not in notes:
                        notes.insert(0, note)
                else:
                    label += f", s = {sparsity[series]}"
            group.append((Line2D([], [], **looks[series]), label))
        groups.append(group)
    reference: List[Tuple[Any, str]] = []
    if worst is not None:
        reference.append((Line2D([], [], **WORST_LOOK), worst[1]))
    handles, labels = statistics_handles(runs)
    reference.extend(zip(handles, labels))
    handles, labels, legend_rows = legend_columns(groups, reference)
    heading = title or f"{_METRIC_LABEL[metric]} vs {x}"
    caption = "; ".join([f"line: mean over {runs}; band: min–max over the runs", *notes])
    finish(fig, handles, labels, legend_rows, heading, caption)
    return fig


def plot(rows: Sequence[Dict[str, Any]], path: str, metric: str = "l1",
         title: Optional[str] = None, log_x: Optional[bool] = True, x: str = "n") -> None:
    """Save the error (or time) vs n (or vs the support size, ``x="support"``) of ``rows``
    as a PNG; ``metric`` is a CSV column or ``"tv"`` (d_TV = ℓ1/2).

    One panel per (ε, k, distribution) — per (ε, k, n) against the support — all with the
    same y range (log), lettered (a), (b), … in reading order, distributions in the same
    order in every preset (geometric, then uniform); one curve per (mechanism, decoder) with
    the same colour, marker and line style in every panel and every figure; the line is the
    mean over runs and the shaded band spans their minimum and maximum (the legend says so).
    n is on a log axis (``log_x=False`` for a linear one; None, the former "automatic"
    value, means log). For ℓ1 (ℓ2) a dashed line marks 2 (√2), the largest possible error
    of a distribution estimate. The s given to CP (or to sparse_project) is in the panel
    titles (and in the legend when it is the same in every panel). One legend for the
    figure, below the panels, in the style shared by every ``ldpdist reproduce`` figure (the
    module ``ldpdist.experiments.plotting``: ``FONT_SIZES``, ``series_look``).
    """
    import matplotlib.pyplot as plt

    fig = figure(rows, metric=metric, title=title, log_x=log_x, x=x)
    fig.savefig(path, dpi=100)
    plt.close(fig)
