"""The ``context-aware`` preset: first measurements for J. Acharya, K. Bonawitz, P. Kairouz,
D. Ramage, Z. Sun, "Context-Aware Local Differential Privacy", ICML 2020, which has no
experiments of its own (the mechanisms, and the errata this project corrects, are on the docs
page Mechanisms › Context-aware LDP, docs/mechanisms/context-aware.md).

On the same users (k = 10^4, ε = 1, p uniform on [0, k), n = 10^5 … 10^11 by ``simulate``,
exact in law at a cost independent of n), raw estimates — the estimators the paper's bounds
are about:

* (a) High-Low: ``HighLowHadamardResponse`` with s ∈ {10, 100, 1000} sensitive symbols (the
  first s values) against ``HadamardResponse`` and ``RandomizedResponse``, with bound (19),
  E‖p̂ − p‖₁ ≤ √(3 s² c²/n) + √(c k/n), c = (e^ε + 1)/(e^ε − 1);
* (b) Block: ``BlockHadamardResponse`` with m ∈ {1, 10, 100} equal blocks against
  ``HadamardResponse``, with bound (24), E‖p̂ − p‖₁ ≤ 2c √(3 Σ k_j² / n);
* (c) the sample-size saving: the n a mechanism needs for a target ℓ1 error, relative to
  plain HR, measured against the theorems' predictions k²/(s² + k/ε) (Theorem 3, up to
  constants) and m (Theorem 4). The raw estimators are unbiased with a covariance ∝ 1/n, so
  their ℓ1 error is C/√n (checked: the spread of ℓ1·√n over the grid is in the CSV), and the
  n needed for a target α is (C/α)² whatever α: the measured saving is (C_HR / C_mech)², C
  the geometric mean of ℓ1·√n over the grid.

Outputs: ``context-aware.csv`` (the usual rows), ``context-aware-savings.csv`` (one row per
context-aware mechanism: structure, parameter, predicted and measured saving, the ℓ1·√n
constants and their spread) and ``context-aware.png`` (the three panels, in the style of
every ``ldpdist reproduce`` figure: :mod:`ldpdist.experiments.plotting`).
"""

from __future__ import annotations

import csv
import math
import os
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .grid import Preset, equal_blocks

K = 10_000
EPSILON = 1.0
SENSITIVE = (10, 100, 1000)
BLOCKS = (1, 10, 100)
_NS = tuple(int(round(10 ** (e / 2))) for e in range(10, 23))   # 10^5, 3.2·10^5, … 10^11

SAVINGS_COLUMNS = ("structure", "parameter", "mechanism", "k", "epsilon", "predicted",
                   "measured", "constant", "baseline_constant", "spread", "points")

PRESETS: Dict[str, Preset] = {
    "context-aware": Preset(
        description="Context-aware LDP (first measurements): l1 error (raw) vs n, k = 10^4, "
                    "eps = 1, uniform p; High-Low HR (s = 10, 100, 1000 sensitive) vs HR and "
                    "RR with bound (19); Block HR (m = 1, 10, 100 equal blocks) vs HR with "
                    "bound (24); sample-size savings measured vs predicted",
        mechanisms=(("hr", ("raw",)), ("rr", ("raw",)),
                    *(("hlhr", ("raw",), {"sensitive": s}) for s in SENSITIVE),
                    *(("bhr", ("raw",), {"blocks": m}) for m in BLOCKS)),
        distributions=(f"unif:{K}",), ks=(K,), epsilons=(EPSILON,), ns=_NS, runs=10,
        metric="l1", quick_ns=_NS[::3], quick_runs=2,
        tiny_ks=(1000,), tiny_ns=(10_000, 1_000_000), tiny_distributions=("unif:1000",),
        notes="p uniform on [0, k); s sensitive = the first s values; raw estimates",
        figure="context_aware"),
}


def c_factor(epsilon: float) -> float:
    """c = (e^ε + 1)/(e^ε − 1), the constant of the paper's Hadamard estimators."""
    return (math.exp(epsilon) + 1.0) / math.expm1(epsilon)


def high_low_bound(k: int, s: int, epsilon: float, n: float) -> float:
    """Bound (19) on E‖p̂ − p‖₁ for High-Low HR with s sensitive symbols."""
    c = c_factor(epsilon)
    return math.sqrt(3.0 * s * s * c * c / n) + math.sqrt(c * k / n)


def block_bound(k: int, m: int, epsilon: float, n: float) -> float:
    """Bound (24) on E‖p̂ − p‖₁ for Block HR with m equal blocks."""
    squares = sum(size * size for size in equal_blocks(k, m))
    return 2.0 * c_factor(epsilon) * math.sqrt(3.0 * squares / n)


def predicted_saving(structure: str, k: int, parameter: int, epsilon: float) -> float:
    """The theorems' sample-size ratio to plain LDP, constants dropped: k²/(s² + kε) for
    High-Low (plain LDP's k²/ε² over Theorem 3's s²/ε² + k/ε), m for Block (Theorem 4)."""
    if structure == "high-low":
        return k * k / (parameter * parameter + k * epsilon)
    return float(parameter)


def _parameter(mechanism: str) -> Tuple[str, int]:
    """("high-low", s) / ("block", m) from a curve label such as ``"HL-HR s=10"``."""
    label, _, value = mechanism.rpartition("=")
    return ("high-low" if label.startswith("HL-HR") else "block"), int(value)


def _constants(rows: Sequence[Dict[str, Any]]) -> Dict[Tuple[str, int, float], List[float]]:
    """ℓ1·√n per (mechanism, k, ε) and n, averaged over the runs, in n order."""
    by_n: Dict[Tuple[str, int, float], Dict[int, List[float]]] = {}
    for row in rows:
        if row["decoder"] != "raw":
            continue
        key = (row["mechanism"], int(row["k"]), float(row["epsilon"]))
        by_n.setdefault(key, {}).setdefault(int(row["n"]), []).append(float(row["l1"]))
    return {key: [float(np.mean(values)) * math.sqrt(n) for n, values in sorted(data.items())]
            for key, data in by_n.items()}


def savings(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The measured and predicted sample-size savings of every context-aware curve against
    HR at the same (k, ε) (module docstring, (c))."""
    constants = _constants(rows)
    out = []
    for (mechanism, k, epsilon), values in constants.items():
        if not (mechanism.startswith("HL-HR") or mechanism.startswith("Block HR")):
            continue
        baseline = constants.get(("HR", k, epsilon))
        if baseline is None:
            continue
        structure, parameter = _parameter(mechanism)
        constant = math.exp(np.mean(np.log(values)))
        reference = math.exp(np.mean(np.log(baseline)))
        out.append({
            "structure": structure, "parameter": parameter, "mechanism": mechanism, "k": k,
            "epsilon": epsilon, "predicted": predicted_saving(structure, k, parameter, epsilon),
            "measured": (reference / constant) ** 2, "constant": constant,
            "baseline_constant": reference, "spread": max(values) / min(values),
            "points": len(values),
        })
    return out


def write_savings(rows: Sequence[Dict[str, Any]], path: str) -> List[Dict[str, Any]]:
    """Write :func:`savings` of ``rows`` as a CSV; returns them."""
    table = savings(rows)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SAVINGS_COLUMNS)
        writer.writeheader()
        for row in table:
            writer.writerow({key: (repr(value) if isinstance(value, float) else value)
                             for key, value in row.items()})
    return table


def savings_text(table: Sequence[Dict[str, Any]]) -> str:
    """The savings as lines for the terminal."""
    lines = ["sample-size saving against HR (n_HR / n_mechanism at equal l1 error):"]
    for row in table:
        lines.append(f"  {row['mechanism']:<16} predicted {row['predicted']:>9.1f}   "
                     f"measured {row['measured']:>9.1f}   (l1*sqrt(n) spread "
                     f"{row['spread']:.2f}x over {row['points']} n)")
    return "\n".join(lines)


def figure(rows: Sequence[Dict[str, Any]], title: str = "context-aware"):
    """The three panels: (a) High-Low, (b) Block, each ℓ1 (raw, mean over runs, min–max
    band) vs n with the paper's bounds dashed in the curve's colour; (c) the savings. In
    the style of every ``ldpdist reproduce`` figure (:mod:`ldpdist.experiments.plotting`):
    a mechanism has the same colour and marker as in the other figures, raw estimates are
    dotted with hollow markers, one legend below the panels."""
    from matplotlib.lines import Line2D

    from .plotting import (FONT_SIZES, _METRIC_LABEL, bound_look, finish, format_n_axis,
                           legend_columns, mechanism_look, series_look, statistics_handles,
                           style_panel, subplots, _runs_text)

    raw = [row for row in rows if row["decoder"] == "raw"]
    if not raw:
        raise ValueError("no raw-decoder rows to plot")
    k, epsilon = int(raw[0]["k"]), float(raw[0]["epsilon"])
    fig, axes = subplots(3, 3)
    ns_all = sorted({int(row["n"]) for row in raw})
    grid_n = np.array(ns_all, dtype=float)
    panels = (("HL-HR", ("HR", "RR"), "High-Low HR: s sensitive symbols", "19"),
              ("Block HR", ("HR",), "Block HR: m equal blocks", "24"))
    # legend columns: the baselines, then each family's curves with their bounds
    groups: List[List[Tuple[Any, str]]] = [[]]
    run_counts: List[int] = []
    for index, (ax, (family, baselines, heading, equation)) in enumerate(zip(axes, panels)):
        members = sorted({row["mechanism"] for row in raw
                          if row["mechanism"].startswith(family)},
                         key=lambda name: _parameter(name)[1])
        groups.append([])
        for mechanism in [*baselines, *members]:
            data: Dict[int, List[float]] = {}
            for row in raw:
                if row["mechanism"] == mechanism:
                    data.setdefault(int(row["n"]), []).append(float(row["l1"]))
            if not data:
                continue
            ns = sorted(data)
            run_counts.extend(len(data[n]) for n in ns)
            look = series_look(mechanism, "raw")
            ax.plot(ns, [np.mean(data[n]) for n in ns], label=mechanism, **look)
            ax.fill_between(ns, [min(data[n]) for n in ns], [max(data[n]) for n in ns],
                            color=look["color"], alpha=0.15, linewidth=0)
            group = groups[-1] if mechanism in members else groups[0]
            group.append((Line2D([], [], **look), mechanism))
            if mechanism in members:
                _, parameter = _parameter(mechanism)
                bound = (high_low_bound if family == "HL-HR" else block_bound)
                label = f"bound ({equation}), {mechanism.split()[-1]}"
                ax.plot(grid_n, [bound(k, parameter, epsilon, n) for n in grid_n],
                        label=label, **bound_look(look["color"]))
                group.append((Line2D([], [], **bound_look(look["color"])), label))
        format_n_axis(ax, ns_all)
        ax.set_yscale("log")
        style_panel(ax, index, f"{heading}\nk = {k}, ε = {epsilon:g}, p uniform",
                    "n (users)", _METRIC_LABEL["l1"])
    ax = axes[2]
    table = savings(rows)
    labels = [row["mechanism"] for row in table]
    x = np.arange(len(table))
    predicted_look = dict(marker="o", markersize=9, linestyle="none", color="black",
                          markerfacecolor="none", markeredgewidth=1.2)
    ax.plot(x - 0.1, [row["predicted"] for row in table], **predicted_look)
    for xi, row in zip(x, table):
        color, marker = mechanism_look(row["mechanism"])
        ax.plot([xi + 0.1], [row["measured"]], marker=marker, markersize=8, linestyle="none",
                color=color)
        measured = row["measured"]
        text = f"{measured / 1000:.3g}k" if measured >= 1000 else f"{measured:.3g}"
        ax.annotate(text, (xi + 0.1, measured), fontsize=FONT_SIZES["tick"], xytext=(5, -4),
                    textcoords="offset points", va="top")
    ax.set_yscale("log")
    values = [row[key] for row in table for key in ("predicted", "measured")]
    if values:
        ax.set_ylim(min(values) / 3, max(values) * 3)
    ax.set_xlim(-0.6, len(table) - 0.2)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right")
    style_panel(ax, 2, "sample-size saving against HR\nn_HR / n at equal ℓ1 error", "",
                "n_HR / n")
    runs = _runs_text(run_counts)
    handles, texts = statistics_handles(runs)
    reference = [(Line2D([], [], **predicted_look), "(c) predicted: k²/(s² + k/ε) or m"),
                 (Line2D([], [], marker="s", markersize=8, linestyle="none", color="0.45"),
                  "(c) measured (C_HR / C)², ℓ1 = C/√n: filled, in the mechanism's colour"),
                 *zip(handles, texts)]
    handles, texts, legend_rows = legend_columns(groups, reference)
    finish(fig, handles, texts, legend_rows, title,
           f"raw estimates; line: mean over {runs}; band: min–max over the runs; "
           "dashed: the paper's bounds")
    return fig


def plot(rows: Sequence[Dict[str, Any]], path: str, title: str = "context-aware") -> str:
    """Save :func:`figure` as ``path`` (PNG) and the savings beside it
    (``<stem>-savings.csv``); returns :func:`savings_text`."""
    import matplotlib.pyplot as plt

    fig = figure(rows, title=title)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    stem, _ = os.path.splitext(path)
    return savings_text(write_savings(rows, f"{stem}-savings.csv"))
