"""The figures of the experiments: error (or time) against n, one panel per (ε, k,
distribution); see :func:`plot`."""

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

# One look per mechanism (colour, marker) and per decoder (line style, filled marker) in
# every figure, so that a curve is recognised across panels and presets. Markers differ per
# mechanism and line styles per decoder: curves that coincide (the normalized decoders all
# sit near ℓ1 = 1.9 on the CP grid) stay distinguishable without colour, and hollow markers
# let coinciding ones show through each other.
_MECHANISM_LOOK = {"RR": ("tab:blue", "o"), "RAPPOR": ("tab:orange", "s"),
                   "SS": ("tab:green", "^"), "HR": ("tab:red", "D"),
                   "OUE": ("tab:brown", "v"), "OLH": ("tab:pink", "P"),
                   "CP": ("tab:purple", "*"), "1-bit HR": ("tab:cyan", "p"),
                   "2-stage RAPPOR": ("tab:olive", "h")}
# PCH ℓ=1..7: one colour of a sequential map and one marker per ℓ
_PCH_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
_SPARE_LOOKS = (("tab:gray", "X"), ("tab:olive", "h"), ("tab:cyan", "<"), ("black", ">"))
_DECODER_LOOK = {"project": ("-", True), "normalize": ("--", False), "ibu": ("-.", True),
                 "sparse_project": (":", True), "raw": (":", False),
                 "two_stage": ("-.", False), "two_stage_project": ("-.", True)}
# s chosen by the noise-level rule ("DECODER/auto"): dashed, hollow markers
_AUTO_LOOK = ("--", False)


def _series_look(mechanism: str, decoder: str, spare: Dict[str, Tuple[str, str]]
                 ) -> Dict[str, Any]:
    """Keyword arguments of ``Axes.plot`` for one (mechanism, decoder) series."""
    if mechanism.startswith("PCH ℓ=") and mechanism[6:].isdigit():
        import matplotlib

        bits = int(mechanism[6:])
        color = matplotlib.colors.to_hex(matplotlib.colormaps["viridis"](min(bits, 8) / 8.5))
        marker = _PCH_MARKERS[(bits - 1) % len(_PCH_MARKERS)]
    else:
        if mechanism not in _MECHANISM_LOOK and mechanism not in spare:
            spare[mechanism] = _SPARE_LOOKS[len(spare) % len(_SPARE_LOOKS)]
        color, marker = _MECHANISM_LOOK.get(mechanism) or spare[mechanism]
    if decoder.endswith("/auto"):
        linestyle, filled = _AUTO_LOOK
    else:
        linestyle, filled = _DECODER_LOOK.get(decoder, ("-.", False))
    size = 9 if marker == "*" else 6
    return dict(color=color, marker=marker, linestyle=linestyle, markersize=size,
                markerfacecolor=color if filled else "none", markeredgewidth=1.2,
                linewidth=1.4)


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
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if metric not in _METRIC_LABEL:
        raise ValueError(f"metric must be one of {tuple(_METRIC_LABEL)}, got {metric!r}")
    if x not in _X_LABEL:
        raise ValueError(f"x must be one of {tuple(_X_LABEL)}, got {x!r}")
    log_x = True if log_x is None else bool(log_x)
    if not rows:
        raise ValueError("no rows to plot")
    dist_order = list(dict.fromkeys(row["distribution"] for row in rows))
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
    ncols = max(1, min(ncols, count))
    nrows = -(-count // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(4.2 * ncols, 7.5), 3.5 * nrows + 1.3),
                             squeeze=False, sharey=True)
    series_order = list(dict.fromkeys((row["mechanism"], row["decoder"]) for row in rows))
    spare: Dict[str, Tuple[str, str]] = {}
    looks = {series: _series_look(*series, spare) for series in series_order}
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
        ax = axes[slot // ncols][slot % ncols]
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
            ax.axhline(worst[0], linestyle="--", color="0.3", linewidth=1.0, label=worst[1],
                       zorder=1.5)
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
                heading += f"\n{', '.join(used)}: s = {s_text}"
        ax.set_title(heading, fontsize=10)
        ax.set_yscale("log")
        if log_x and x == "support":
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif log_x:
            ax.set_xscale("log")
            decades = math.log10(max(ns_all) / min(ns_all)) if min(ns_all) > 0 else 0
            subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
            ax.xaxis.set_major_formatter(FuncFormatter(_count_label))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(_X_LABEL[x])
        if slot % ncols == 0:
            ax.set_ylabel(_METRIC_LABEL[metric])
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
    for slot in range(count, nrows * ncols):
        axes[slot // ncols][slot % ncols].set_visible(False)
    # one y range for every panel (sharey), from the data and the worst-error line
    low = min(lows)
    high = max(highs + ([worst[0]] if worst is not None else []))
    axes[0][0].set_ylim(low / 1.6, high * 1.6)

    runs = _runs_text(run_counts)
    # the legend is filled column by column: one column per mechanism (its decoders one
    # under the other), then the reference entries
    mechanisms = list(dict.fromkeys(mechanism for mechanism, _ in series_order))
    legend_rows = max(sum(1 for series in series_order if series[0] == mechanism)
                      for mechanism in mechanisms)
    handles: List[Any] = []
    labels: List[str] = []
    for mechanism in mechanisms:
        column = 0
        for series in series_order:
            if series[0] != mechanism:
                continue
            label = f"{series[0]} ({series[1]})"
            if sparsity[series]:
                per_panel = {_sparsity_text(row.get("sparsity", "") for row in prow
                                            if (row["mechanism"], row["decoder"]) == series)
                             for prow in panels.values()} - {""}
                label += (", s as in panel titles" if len(per_panel) > 1
                          else f", s = {sparsity[series]}")
            handles.append(Line2D([], [], **looks[series]))
            labels.append(label)
            column += 1
        for _ in range(column, legend_rows):
            handles.append(Line2D([], [], linestyle="none", marker="none"))
            labels.append("")
    if worst is not None:
        handles.append(Line2D([], [], linestyle="--", color="0.3", linewidth=1.0))
        labels.append(worst[1])
    handles.append(Line2D([], [], color="0.45", linewidth=1.4))
    labels.append(f"line: mean over {runs}")
    handles.append(Patch(facecolor="0.45", alpha=0.3, linewidth=0))
    labels.append(f"band: min–max over {runs}")
    legend_cols = -(-len(handles) // legend_rows)
    while True:
        legend = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.005),
                            ncol=legend_cols, fontsize=9, frameon=False)
        fig.canvas.draw()
        if legend_cols == 1 or legend.get_window_extent().width <= 0.98 * fig.bbox.width:
            break
        legend.remove()  # too wide for a narrow figure: fewer columns
        legend_cols -= 1
    heading = title or f"{_METRIC_LABEL[metric]} vs {x}"
    caption = f"line: mean over {runs}; band: min–max over the runs"
    width = int(fig.get_figwidth() * 12)  # characters of the 11-point title per line
    fig.suptitle(textwrap.fill(heading, width) + "\n" + caption, fontsize=11)
    fig.canvas.draw()
    legend_height = legend.get_window_extent().height / fig.bbox.height
    fig.tight_layout(rect=(0, legend_height + 0.01, 1, 1))
    return fig


def plot(rows: Sequence[Dict[str, Any]], path: str, metric: str = "l1",
         title: Optional[str] = None, log_x: Optional[bool] = True, x: str = "n") -> None:
    """Save the error (or time) vs n (or vs the support size, ``x="support"``) of ``rows``
    as a PNG; ``metric`` is a CSV column or ``"tv"`` (d_TV = ℓ1/2).

    One panel per (ε, k, distribution) — per (ε, k, n) against the support — all with the same y range (log); one curve per
    (mechanism, decoder) with the same colour, marker and line style in every panel; the
    line is the mean over runs and the shaded band spans their minimum and maximum (the
    legend says so). n is on a log axis (``log_x=False`` for a linear one; None, the
    former "automatic" value, means log). For ℓ1 (ℓ2) a
    dashed line marks 2 (√2), the largest possible error of a distribution estimate. The s
    given to CP (or to sparse_project) is in the curve's label and the panel title.
    """
    import matplotlib.pyplot as plt

    fig = figure(rows, metric=metric, title=title, log_x=log_x, x=x)
    fig.savefig(path, dpi=100)
    plt.close(fig)
