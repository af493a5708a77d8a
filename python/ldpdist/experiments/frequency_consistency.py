"""The ``consistency`` preset: the comparison of T. Wang, M. Lopuhaä-Zwakenberg, Z. Li,
B. Škorić and N. Li, "Locally Differentially Private Frequency Estimation with Consistency",
NDSS 2020, rerun on our mechanisms: the ten post-processing methods of
:mod:`ldpdist.consistency` (and the raw estimate, the paper's Base) on three queries.

Setting: k = 1024 values, n = 10^5 users; OLH, OUE and HR (``simulate``: exact in law);
ε ∈ {0.5, 1, 2, 4}; two distributions placed on a random permutation of the values, drawn per
run: Zipf(1.1) (``p_i ∝ (i+1)^-1.1``, a heavy tail: most values hold a little mass) and
Zipf–Mandelbrot(2, 20) (``p_i ∝ (i+20)^-2``, the rank-frequency shape Mandelbrot fitted to
word counts: a flat head of about 20 values, then a power-law tail). Within a run the same
users (one histogram) serve every mechanism and ε. Errors are measured against the users'
own frequencies (counts / n), as in the paper, where the dataset is fixed.

Queries (column ``query``), each scored by its mean squared error (column ``error``):

* ``full``: the whole distribution, ``(1/k) Σ_x (p̂_x − f_x)²``; column ``l1`` also has
  ``Σ_x |p̂_x − f_x|``.
* ``top``: the frequencies of the t = 32 most frequent values, ``(1/t) Σ (p̂_x − f_x)²``.
* ``sets``: 200 random sets of values per run (each of a size drawn uniformly from 1 to k/2,
  values without replacement), ``(1/200) Σ_S (Σ_{x∈S} p̂_x − Σ_{x∈S} f_x)²``; Post-Pos
  answers them from the raw estimate and sets negative answers to 0
  (:func:`ldpdist.consistency.answer`). With the values placed at random, a range of values
  is such a random set: head and tail values mixed.
* ``ranges``: the same for 200 random ranges of values when the values are numbered by
  decreasing probability (ordinal data whose frequency falls with the value, e.g. a number of
  purchases): ranks a to b, the two drawn uniformly and ordered. A range lies mostly in the head
  or mostly in the tail, where the methods' biases (shrinking the large entries, keeping
  positive noise on the small ones) do not cancel.

Outputs: ``consistency.csv`` (one row per query, mechanism, method, distribution, ε and run;
columns :data:`COLUMNS`; ``seconds`` is the method's time on the raw estimate) and
``consistency.png``: one panel per (query, distribution), MSE against ε for OLH, one curve
per method (the tables of the docs give OUE and HR too). ``--quick``: 3 runs;
``--tiny``: a test grid (k = 128, n = 5000, one run).
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import consistency
from .results import read_typed_csv, write_csv

DESCRIPTION = ("The consistency post-processing family (Wang et al., NDSS 2020): Base and the "
               "ten methods on OLH, OUE and HR, k = 1024, n = 10^5, Zipf(1.1) and "
               "Zipf-Mandelbrot(2, 20), MSE of the full distribution, of the top 32 values, "
               "of random set sums and of range sums vs eps (runs inline: --jobs has no "
               "effect)")

COLUMNS = ("query", "mechanism", "method", "distribution", "k", "epsilon", "n", "run",
           "error", "l1", "seconds")
#: the methods, Base (the raw estimate) first
METHODS = ("base",) + consistency.METHODS
NAMES = {"base": "Base", **consistency.PAPER_NAMES}
MECHANISMS = (("OLH", "OptimizedLocalHashing"), ("OUE", "OptimizedUnaryEncoding"),
              ("HR", "HadamardResponse"))
QUERIES = ("full", "top", "sets", "ranges")
TOP = 32
SETS = 200
#: distribution label -> p over ranks 0..k-1 (before the random placement)
DISTRIBUTIONS = {"Zipf(1.1)": lambda k: (np.arange(k) + 1.0) ** -1.1,
                 "ZM(2, 20)": lambda k: (np.arange(k) + 20.0) ** -2.0}
# full / quick / tiny
_K = (1024, 1024, 128)
_N = (100_000, 100_000, 5_000)
_EPSILONS = ((0.5, 1.0, 2.0, 4.0), (0.5, 1.0, 2.0, 4.0), (1.0,))
_RUNS = (20, 3, 1)


def _rng(seed: int, *parts: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *parts]))


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**63))


def random_ranges(order: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` ranges of ranks a to b (two uniform ranks, ordered) of the values listed in
    ``order`` (most probable first), as a boolean matrix of shape (count, k)."""
    k = order.size
    ends = np.sort(rng.integers(0, k, size=(count, 2)), axis=1)
    ranges = np.zeros((count, k), dtype=bool)
    for row, (a, b) in zip(ranges, ends):
        row[order[a:b + 1]] = True
    return ranges


def random_sets(k: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` sets of distinct values, each of a size drawn uniformly from 1 to k/2, as
    a boolean matrix of shape (count, k) (:func:`ldpdist.consistency.query_sums`)."""
    sizes = rng.integers(1, k // 2 + 1, size=count)
    sets = np.zeros((count, k), dtype=bool)
    for row, size in zip(sets, sizes):
        row[rng.choice(k, size=int(size), replace=False)] = True
    return sets


def estimates(raw: np.ndarray, noise: consistency.NoiseModel
              ) -> Iterator[Tuple[str, np.ndarray, float]]:
    """(method, estimate, seconds) for Base and every method (PowerNS reuses Power's
    estimate: it is Norm-Sub of it, as :func:`ldpdist.consistency.power_ns` computes)."""
    power = None
    for method in METHODS:
        start = time.perf_counter()
        if method == "base":
            estimate = raw
        elif method == "power_ns":
            estimate = consistency.norm_sub(power)
        else:
            estimate = consistency.apply(raw, method, noise)
        seconds = time.perf_counter() - start
        if method == "power":
            power, power_seconds = estimate, seconds
        elif method == "power_ns":
            seconds += power_seconds
        yield method, estimate, seconds


def rows_for(k: int, n: int, epsilons: Sequence[float], runs: int,
             seed: int) -> Iterator[Dict[str, Any]]:
    """Every row of the study (see the module docstring)."""
    import ldpdist

    for run in range(runs):
        for d, (label, shape) in enumerate(DISTRIBUTIONS.items()):
            rng = _rng(seed, run, d)
            weights = shape(k)
            p = np.empty(k)
            order = rng.permutation(k)           # order[i]: the value of rank i
            p[order] = weights / weights.sum()
            counts = rng.multinomial(n, p)
            truth = counts / n
            top = np.argsort(-truth, kind="stable")[:TOP]
            sets = {"sets": random_sets(k, SETS, rng), "ranges": random_ranges(order, SETS, rng)}
            true_sums = {q: consistency.query_sums(truth, s) for q, s in sets.items()}
            for eps in epsilons:
                for m, (name, cls) in enumerate(MECHANISMS):
                    mech = getattr(ldpdist, cls)(k, eps)
                    agg = mech.simulate(counts, seed=_seed(_rng(seed, run, d, m,
                                                                int(eps * 1000))))
                    raw = agg.estimate("raw")
                    noise = consistency.noise_model(mech, n, raw)
                    for method, estimate, seconds in estimates(raw, noise):
                        error = estimate - truth
                        values = {"full": float(np.mean(error * error)),
                                  "top": float(np.mean(error[top] ** 2))}
                        for query, matrix in sets.items():
                            sums = consistency.query_sums(estimate, matrix)
                            if method == "post_pos":
                                sums = np.maximum(sums, 0.0)
                            values[query] = float(np.mean((sums - true_sums[query]) ** 2))
                        for query in QUERIES:
                            yield {"query": query, "mechanism": name, "method": method,
                                   "distribution": label, "k": k, "epsilon": eps, "n": n,
                                   "run": run, "error": values[query],
                                   "l1": float(np.abs(error).sum()) if query == "full" else "",
                                   "seconds": seconds}


def write(rows: Sequence[Dict[str, Any]], path: str) -> None:
    write_csv(rows, path, columns=COLUMNS)


def read(path: str) -> List[Dict[str, Any]]:
    """Rows of :func:`write` with the numbers converted back."""
    return read_typed_csv(path, ("k", "n", "run"), ("epsilon", "error", "seconds"), ("l1",))


def mean_errors(rows: Sequence[Dict[str, Any]]) -> Dict[Tuple[str, str, str, float, str],
                                                        float]:
    """Mean error over the runs per (query, mechanism, distribution, ε, method)."""
    data: Dict[Tuple[str, str, str, float, str], List[float]] = {}
    for row in rows:
        key = (row["query"], row["mechanism"], row["distribution"], float(row["epsilon"]),
               row["method"])
        data.setdefault(key, []).append(float(row["error"]))
    return {key: float(np.mean(values)) for key, values in data.items()}


def winners(rows: Sequence[Dict[str, Any]]) -> Dict[Tuple[str, str, str, float],
                                                    Tuple[str, float, float]]:
    """Per (query, mechanism, distribution, ε): the method of least mean error, its error
    and Base's."""
    means = mean_errors(rows)
    best: Dict[Tuple[str, str, str, float], Tuple[str, float, float]] = {}
    for (query, mechanism, dist, eps, method), value in means.items():
        key = (query, mechanism, dist, eps)
        if key not in best or value < best[key][1]:
            best[key] = (method, value, means[(query, mechanism, dist, eps, "base")])
    return best


def summary(rows: Sequence[Dict[str, Any]]) -> str:
    """The winning method per query and distribution, over the mechanisms and ε."""
    lines = []
    best = winners(rows)
    for query in QUERIES:
        for dist in DISTRIBUTIONS:
            won = [best[key][0] for key in best if key[0] == query and key[2] == dist]
            if won:
                counts = {m: won.count(m) for m in dict.fromkeys(won)}
                text = ", ".join(f"{NAMES[m]} {c}" for m, c in
                                 sorted(counts.items(), key=lambda item: -item[1]))
                lines.append(f"  {query:>6} on {dist}: best method (cells won of {len(won)}): "
                             f"{text}")
    return "least mean squared error per (mechanism, eps):\n" + "\n".join(lines)


# the look of each method: colour, marker, line style; solid and filled: the result is a
# distribution. Marker, style and fill differ between any two methods (grey-scale safe).
_LOOKS = {"base": ("black", "o", ":"), "base_pos": ("tab:blue", "v", "--"),
          "post_pos": ("tab:cyan", "^", "--"), "base_cut": ("tab:olive", "<", "--"),
          "norm": ("tab:orange", "s", "--"), "norm_mul": ("tab:brown", "s", "-"),
          "norm_cut": ("tab:pink", "P", "--"), "norm_sub": ("tab:red", "D", "-"),
          "mle_apx": ("tab:green", "^", "-"), "power": ("tab:purple", "X", "--"),
          "power_ns": ("tab:gray", "X", "-")}
_HEADINGS = {"full": "full distribution", "top": f"top {TOP} values",
             "sets": f"{SETS} random set sums", "ranges": f"{SETS} range sums (by rank)"}


def method_look(method: str) -> Dict[str, Any]:
    """Keyword arguments of ``Axes.plot`` for a method's curve."""
    color, marker, style = _LOOKS[method]
    return dict(color=color, marker=marker, linestyle=style, markersize=6,
                markerfacecolor=color if style == "-" else "none", markeredgewidth=1.2,
                linewidth=1.4)


def figure(rows: Sequence[Dict[str, Any]], mechanism: str = "OLH",
           title: str = "consistency"):
    """One panel per (query, distribution): mean MSE over the runs against ε for
    ``mechanism``, one curve per method, the min–max band over the runs; in the style of
    every ``ldpdist reproduce`` figure (:mod:`ldpdist.experiments.plotting`)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    from .plotting import (_runs_text, finish, legend_columns, statistics_handles,
                           style_panel, subplots)

    mine = [row for row in rows if row["mechanism"] == mechanism]
    dists = [d for d in DISTRIBUTIONS if any(row["distribution"] == d for row in mine)]
    queries = [q for q in QUERIES if any(row["query"] == q for row in mine)]
    panels = [(q, d) for q in queries for d in dists]
    fig, axes = subplots(len(panels), max(1, len(dists)))
    run_counts: List[int] = []
    for index, (ax, (query, dist)) in enumerate(zip(axes, panels)):
        here = [row for row in mine if row["query"] == query and row["distribution"] == dist]
        for method in METHODS:
            data: Dict[float, List[float]] = {}
            for row in here:
                if row["method"] == method:
                    data.setdefault(float(row["epsilon"]), []).append(
                        max(float(row["error"]), 1e-300))
            if not data:
                continue
            eps = sorted(data)
            run_counts.extend(len(data[e]) for e in eps)
            look = method_look(method)
            color = look["color"]
            # Base on top: Post-Pos is Base except on the sums, Norm nearly so
            ax.plot(eps, [np.mean(data[e]) for e in eps], zorder=4 if method == "base" else 2,
                    **look)
            if len(eps) > 1:
                ax.fill_between(eps, [min(data[e]) for e in eps], [max(data[e]) for e in eps],
                                color=color, alpha=0.08, linewidth=0)
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ticks = sorted({float(row["epsilon"]) for row in here})
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        users = f"{here[0]['n']:,}".replace(",", " ")
        style_panel(ax, index, f"{_HEADINGS[query]}, {dist}\n{mechanism}, k = "
                    f"{here[0]['k']}, n = {users}",
                    "ε", "mean squared error" if index % max(1, len(dists)) == 0 else None)
    groups = []
    for family in (("base", "base_pos", "post_pos", "base_cut"),
                   ("norm", "norm_mul", "norm_cut", "norm_sub"),
                   ("mle_apx", "power", "power_ns")):
        groups.append([(Line2D([], [], **method_look(method)), NAMES[method])
                       for method in family])
    runs = _runs_text(run_counts)
    handles, labels = statistics_handles(runs)
    handles, labels, legend_rows = legend_columns(groups, list(zip(handles, labels)))
    finish(fig, handles, labels, legend_rows, title,
           f"line: mean over {runs}; band: min–max over the runs; solid, filled: the result "
           "is a distribution; dashed, hollow: it need not be; Base = the raw estimate")
    return fig


def run(out: str, *, quick: bool = False, tiny: bool = False, runs: Optional[int] = None,
        seed: int = 0) -> Tuple[str, str, List[Dict[str, Any]], str]:
    """Run the study; write ``<out>/consistency.csv`` and ``.png``; returns the paths, the
    rows and a summary for the terminal."""
    import matplotlib.pyplot as plt

    size = 2 if tiny else 1 if quick else 0
    count = runs if runs is not None else _RUNS[size]
    rows = list(rows_for(_K[size], _N[size], _EPSILONS[size], count, seed))
    csv_path = os.path.join(out, "consistency.csv")
    png_path = os.path.join(out, "consistency.png")
    write(rows, csv_path)
    fig = figure(rows, title="consistency" + (" [tiny: test grid]" if tiny else
                                              " [quick]" if quick else ""))
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return csv_path, png_path, rows, summary(rows)
