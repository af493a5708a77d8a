"""The ``linear-queries`` preset: first measurements for R. Bassily, "Linear Queries
Estimation with Local Differential Privacy", AISTATS 2019, which has no experiments of its
own (the protocols, and the errata this project corrects, are on the docs page Mechanisms ›
Linear queries, docs/mechanisms/linear-queries.md). Three experiments, all with ε = 1
(column ``panel`` of the CSV: ``a``, ``b``, ``c``), drawn as four panels lettered in reading
order: (a) offline queries, (b) and (c) distribution estimation at J = 16 and J = 1000,
(d) adaptive queries.

* offline queries (``a``): d = 16 random ±1/√d queries over J = 1000 values (column norms
  r = 1), p ~ Dirichlet(0.5) drawn once per run; error max_j |ŷ_j − ⟨q_j, p⟩| against the *true*
  distribution vs n for the Gaussian protocol (δ = 1e-6, analytic calibration) with and
  without the projection onto conv{±a_v}, and for the rejection-sampling protocol (pure ε,
  calibrated for the n it runs at) with and without it; the bounds of Theorems 3.2 and 3.4
  with the corrected σ are drawn (they bound the ℓ2 error, hence also the max error).
  Reports go through the protocols' ``privatize`` one user at a time (path ``privatize``).
* distribution estimation (``b``), J ∈ {16, 1000}, p ~ Dirichlet(0.5), the SAME users (one
  histogram per run): projected Hadamard Response (the paper's Algorithm 5,
  ``HadamardResponse(J, ε, blocks=1)``, through ``simulate``, exact in law) against the
  Gaussian protocol on A = I_J (δ = 1e-6) + the projection onto conv{e_v} (the simplex); the
  mean of n Gaussian reports is the users' histogram / n + N(0, σ²/n · I) exactly in law, so it
  is drawn at that level (path ``aggregate``: n · J reports would not fit in memory at
  J = 1000, n = 10^6). ℓ2 error against p, raw and projected; the figures of an
  independent reference check (:data:`NOTE_REFERENCE`) are printed beside the measured ones
  and drawn as stars.
* adaptive queries (``c``, Algorithm 6): J = 1000, p a discretized normal, 100 rounds; the
  analyst runs 10 noisy bisection searches (the 0.1, 0.2, …, 0.9 quantiles and the median
  again), 10 rounds each, every query q_t = 1[v ≤ m_t] chosen from the answers so far; error
  max_t |ȳ_t − ⟨q_t, p⟩| vs n with the Theorem 5.2 bound.

Outputs: ``linear-queries.csv`` (one row per experiment, method, estimator, J, n and run;
columns :data:`COLUMNS`), ``linear-queries.png`` (the four panels, in the style of every
``ldpdist reproduce`` figure: :mod:`ldpdist.experiments.plotting`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .results import read_typed_csv, write_csv

DESCRIPTION = ("Linear queries under LDP (first measurements): (a) 16 random queries over "
               "J = 1000, max error vs n for the Gaussian and rejection-sampling protocols "
               "with and without projection, with Theorems 3.2/3.4; (b), (c) distribution "
               "estimation at J = 16 and J = 1000: projected HR vs Gaussian on A = I + "
               "projection; (d) 100 adaptive bisection rounds vs Theorem 5.2; eps = 1 "
               "(runs inline: --jobs has no effect)")

EPSILON = 1.0
DELTA = 1e-6
QUERIES = 16            # d of experiment a
DOMAIN = 1000           # J of experiments a and c
DIRICHLET = 0.5
ROUNDS = 100
#: experiment a's estimators: (label, ``projection=`` of the protocols' ``estimate``)
ESTIMATORS = (("raw", "none"), ("symmetric hull", "symmetric"), ("convex hull", "convex"))
SEARCHES = (0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 0.5)   # 10 searches × 10 rounds

COLUMNS = ("panel", "method", "estimator", "J", "d", "epsilon", "delta", "n", "run",
           "error", "l2", "linf", "bound", "seconds", "path")

# n grids: full / quick / tiny (a testing aid)
_NS = {
    "a": ((1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000),
          (1_000, 10_000, 100_000), (1_000, 5_000)),
    "b": ((1_000, 2_000, 5_000, 20_000, 50_000, 200_000, 1_000_000),
          (2_000, 5_000, 200_000), (2_000, 5_000)),
    "c": ((10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000),
          (10_000, 100_000, 1_000_000), (10_000, 30_000)),
}
_RUNS = (10, 3, 1)
_DOMAINS_B = ((16, 1000), (16, 1000), (16,))

#: an independent reference check of projected HR made during development (ε = 1,
#: Dirichlet(0.5), 20 runs): (J, n) -> mean ℓ2 error (raw, projected)
NOTE_REFERENCE = {(1000, 2000): (1.53, 0.19), (1000, 200_000): (0.152, 0.068),
                  (16, 5000): (0.124, 0.101)}


def _rng(seed: int, *parts: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *parts]))


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**63))


def random_sign_queries(d: int, J: int, seed: int) -> np.ndarray:
    """d × J matrix of independent ±1/√d entries (every column has norm 1)."""
    signs = _rng(seed, 0xA).integers(0, 2, size=(d, J)) * 2 - 1
    return signs / math.sqrt(d)


def _row(panel: str, method: str, estimator: str, J: int, d: int, n: int, run: int,
         error_vector: np.ndarray, bound: float, seconds: float, path: str,
         metric: str) -> Dict[str, Any]:
    l2 = float(np.linalg.norm(error_vector))
    linf = float(np.max(np.abs(error_vector)))
    return {"panel": panel, "method": method, "estimator": estimator, "J": J, "d": d,
            "epsilon": EPSILON, "delta": DELTA if "Gaussian" in method else "", "n": n,
            "run": run, "error": l2 if metric == "l2" else linf, "l2": l2, "linf": linf,
            "bound": bound, "seconds": seconds, "path": path}


def offline_rows(ns: Sequence[int], runs: int, seed: int) -> Iterator[Dict[str, Any]]:
    """Experiment ``a`` (panel (a)). Bounds: the protocol's ``bound(n)`` (raw) or
    ``bound(n, projected=True)``, about the users' histogram p̂, plus r/√n for the distance
    from A·p̂ to A·p (the paper's eq. (3)): the error here is measured against the true p."""
    from .. import linear

    A = random_sign_queries(QUERIES, DOMAIN, seed)
    gaussian = linear.GaussianLinearQueries(A, EPSILON, DELTA)
    for run in range(runs):
        p = _rng(seed, 1, run).dirichlet(np.full(DOMAIN, DIRICHLET))
        target = A @ p
        for n in ns:
            rng = _rng(seed, 2, run, n)
            values = rng.choice(DOMAIN, size=n, p=p)
            rejection = linear.RejectionSamplingLinearQueries(A, EPSILON, n_users=n)
            sampling = 1.0 / math.sqrt(n)                     # r/√n with r = 1
            for method, protocol in (("Gaussian", gaussian), ("rejection sampling", rejection)):
                reports = protocol.privatize(values, seed=_seed(rng))
                for estimator, projection in ESTIMATORS:
                    start = time.perf_counter()
                    estimate = protocol.estimate(reports, projection=projection)
                    seconds = time.perf_counter() - start
                    bound = protocol.bound(n, projected=projection != "none") + sampling
                    yield _row("a", method, estimator, DOMAIN, QUERIES, n, run,
                               estimate - target, bound, seconds, "privatize", "linf")


def distribution_rows(domains: Sequence[int], ns: Sequence[int], runs: int,
                      seed: int) -> Iterator[Dict[str, Any]]:
    """Experiment ``b`` (panels (b), (c)), by :func:`ldpdist.linear.distribution_estimates`
    (``seconds``: the four estimates together). Bounds: Theorem 4.2 for projected HR (its
    √(4c²J/n) branch for the raw estimate, Fact 4.1); for the Gaussian protocol on A = I its
    ``bound`` plus 1/√n (the histogram's distance to p)."""
    from .. import linear

    c = (math.exp(EPSILON) + 1.0) / math.expm1(EPSILON)
    for J in domains:
        sigma = linear.distribution_sigma(EPSILON, DELTA)
        for run in range(runs):
            p = _rng(seed, 3, J, run).dirichlet(np.full(J, DIRICHLET))
            for n in ns:
                rng = _rng(seed, 4, J, run, n)
                counts = rng.multinomial(n, p)
                start = time.perf_counter()
                estimates = linear.distribution_estimates(counts, EPSILON, DELTA,
                                                          seed=_seed(rng))
                seconds = time.perf_counter() - start
                hr_raw = math.sqrt(4 * c * c * J / n)
                gaussian_raw = sigma * math.sqrt(J / n) + 1.0 / math.sqrt(n)
                # the projected branch of GaussianLinearQueries.bound with r = 1
                spread = sigma * math.sqrt(2 * math.log(2 * J) / n)
                bounds = {"hr_raw": hr_raw,
                          "hr_projected": min((256 * c * c * math.log(J) / n) ** 0.25, hr_raw),
                          "gaussian_raw": gaussian_raw,
                          "gaussian_projected": min(sigma * math.sqrt(J / n),
                                                    2 * math.sqrt(spread)) + 1 / math.sqrt(n)}
                for name, estimate in estimates.items():
                    method = "projected HR" if name.startswith("hr") else "Gaussian (A = I)"
                    estimator = "raw" if name.endswith("raw") else "projected"
                    yield _row("b", method, estimator, J, J, n, run, estimate - p,
                               bounds[name], seconds,
                               "simulate" if name.startswith("hr") else "aggregate", "l2")


def quantile_cdf_distribution(J: int) -> np.ndarray:
    """Experiment ``c``'s p: a normal with mean 0.4 J and standard deviation J/8, discretized."""
    v = np.arange(J)
    w = np.exp(-0.5 * ((v - 0.4 * J) / (J / 8)) ** 2)
    return w / w.sum()


def adaptive_rows(ns: Sequence[int], runs: int, seed: int) -> Iterator[Dict[str, Any]]:
    """Experiment ``c`` (panel (d)): noisy bisection searches, every query chosen from the
    answers so far."""
    from .. import linear

    p = quantile_cdf_distribution(DOMAIN)
    cdf = np.cumsum(p)
    for run in range(runs):
        for n in ns:
            rng = _rng(seed, 5, run, n)
            values = rng.choice(DOMAIN, size=n, p=p)
            session = linear.AdaptiveLinearQueries(n, ROUNDS, EPSILON, r=1.0, seed=_seed(rng))
            errors = []
            start = time.perf_counter()
            rounds_per_search = ROUNDS // len(SEARCHES)
            for level in SEARCHES:
                low, high = 0, DOMAIN - 1
                for _ in range(rounds_per_search):
                    middle = (low + high) // 2
                    query = (np.arange(DOMAIN) <= middle).astype(np.float64)
                    t = session.next_round
                    answer = session.answer(query, values[session.round_users(t)],
                                            seed=_seed(rng))
                    errors.append(answer - cdf[middle])
                    if answer < level:
                        low = min(middle + 1, high)
                    else:
                        high = middle
            seconds = time.perf_counter() - start
            yield _row("c", "adaptive (Alg. 6)", "round means", DOMAIN, ROUNDS, n, run,
                       np.asarray(errors), session.bound(), seconds, "privatize", "linf")


def write(rows: Sequence[Dict[str, Any]], path: str) -> None:
    write_csv(rows, path, columns=COLUMNS)


def read(path: str) -> List[Dict[str, Any]]:
    """Rows of :func:`write` with the numbers converted back."""
    return read_typed_csv(path, ("J", "d", "n", "run"), ("epsilon", "error", "l2", "linf", "bound", "seconds"), ("delta",))


def _mean(rows: Sequence[Dict[str, Any]], **match: Any) -> Dict[int, List[float]]:
    data: Dict[int, List[float]] = {}
    for row in rows:
        if all(row[key] == value for key, value in match.items()):
            data.setdefault(int(row["n"]), []).append(float(row["error"]))
    return data


def reference_text(rows: Sequence[Dict[str, Any]]) -> str:
    """The projected-HR means of experiment ``b`` at the points of :data:`NOTE_REFERENCE`,
    beside the reference check's."""
    lines = []
    for (J, n), (raw, projected) in NOTE_REFERENCE.items():
        got = {}
        for estimator in ("raw", "projected"):
            data = _mean(rows, panel="b", method="projected HR", estimator=estimator, J=J)
            if n in data:
                got[estimator] = float(np.mean(data[n]))
        if len(got) == 2:
            lines.append(f"  projected HR, J = {J}, n = {n}: l2 raw {got['raw']:.3f} "
                         f"(check {raw}), projected {got['projected']:.3f} (check {projected})")
    return ("independent reference check (eps = 1, Dirichlet(0.5), 20 runs):\n"
            + "\n".join(lines)
            if lines else "")


# the order of the curves and of the legend's columns
_METHODS = ("Gaussian", "rejection sampling", "Gaussian (A = I)", "projected HR",
            "adaptive (Alg. 6)")
_ESTIMATOR_ORDER = ("raw", "symmetric hull", "convex hull", "projected", "round means")


def _coincidence(mine: Sequence[Dict[str, Any]], method: str) -> str:
    """' (identical to …)' / ' (within 1% of …)' when the convex-hull curve of ``method``
    coincides with its symmetric-hull curve (said in the legend: one hides the other)."""
    convex = _mean(mine, method=method, estimator="convex hull")
    symmetric = _mean(mine, method=method, estimator="symmetric hull")
    if not convex or sorted(convex) != sorted(symmetric):
        return ""
    gaps = [abs(np.mean(convex[n]) - np.mean(symmetric[n])) / max(np.mean(symmetric[n]), 1e-300)
            for n in convex]
    if max(gaps) == 0:
        return "\n(coincides with symmetric hull)"
    return "\n(within 1% of symmetric hull)" if max(gaps) < 0.01 else ""


def figure(rows: Sequence[Dict[str, Any]], title: str = "linear-queries"):
    """Four panels, lettered in reading order: (a) offline max error vs n with the bounds;
    (b), (c) distribution estimation ℓ2 vs n at J = 16 and J = 1000; (d) adaptive max error
    vs n with the Theorem 5.2 bound. In the style of every ``ldpdist reproduce`` figure
    (:mod:`ldpdist.experiments.plotting`): projected HR has HR's colour and marker, raw
    estimates are dotted with hollow markers, one legend below the panels. The symmetric-
    and convex-hull curves often coincide: the symmetric one is drawn wide and pale, the
    convex one dashed with small white-filled markers on top of it, and the legend says when
    they coincide."""
    from matplotlib.lines import Line2D

    from .plotting import (_METRIC_LABEL, _runs_text, bound_look, finish, format_n_axis,
                           legend_columns, series_look, statistics_handles, style_panel,
                           subplots)

    domains_b = sorted({int(row["J"]) for row in rows if row["panel"] == "b"})
    present = {row["panel"] for row in rows}
    panels = [panel for panel in [("a", None), *(("b", J) for J in domains_b), ("c", None)]
              if panel[0] in present]
    fig, axes = subplots(len(panels), 4)
    headings = {"a": f"offline: d = {QUERIES} random ±1/√d queries\n"
                     f"J = {DOMAIN}, ε = {EPSILON:g}, δ = {DELTA:g}",
                "b": "distribution estimation, J = {J}\n"
                     f"same users, ε = {EPSILON:g}, δ = {DELTA:g}",
                "c": f"adaptive: {ROUNDS} bisection rounds\nJ = {DOMAIN}, ε = {EPSILON:g}"}
    ylabels = {"a": "max_j |ŷ_j − ⟨q_j, p⟩|", "b": _METRIC_LABEL["l2"],
               "c": "max_t |ȳ_t − ⟨q_t, p⟩|"}
    groups: Dict[str, List[Tuple[Any, str]]] = {method: [] for method in _METHODS}
    reference: List[Tuple[Any, str]] = []
    run_counts: List[int] = []
    for index, (ax, (panel, J)) in enumerate(zip(axes, panels)):
        mine = [row for row in rows if row["panel"] == panel and (J is None or row["J"] == J)]
        order = {name: i for i, name in enumerate(_METHODS + _ESTIMATOR_ORDER)}
        curves = sorted({(row["method"], row["estimator"]) for row in mine},
                        key=lambda c: (order.get(c[0], 99), order.get(c[1], 99), c))
        bounds: Dict[Tuple[str, str], Dict[int, float]] = {}
        for row in mine:
            bounds.setdefault((row["method"], row["estimator"]), {})[int(row["n"])] = \
                float(row["bound"])
        drawn: Dict[Tuple[str, Tuple[float, ...]], bool] = {}
        for method, estimator in curves:
            data = _mean(mine, method=method, estimator=estimator)
            ns = sorted(data)
            run_counts.extend(len(data[n]) for n in ns)
            look = series_look(method, estimator)
            label = f"{method}, {estimator}"
            if estimator == "symmetric hull":     # wide and pale, under the convex hull
                look.update(linewidth=3.5, alpha=0.45, markersize=10)
            elif estimator == "convex hull":      # dashed, small white-filled markers, on top
                look.update(markersize=4.5, markerfacecolor="white", zorder=3)
                label += _coincidence(mine, method)
            ax.plot(ns, [np.mean(data[n]) for n in ns], label=label, **look)
            ax.fill_between(ns, [min(data[n]) for n in ns], [max(data[n]) for n in ns],
                            color=look["color"], alpha=0.12, linewidth=0, zorder=1)
            groups.setdefault(method, []).append((Line2D([], [], **look), label))
            bound = bounds[(method, estimator)]
            bn = sorted(bound)
            values = tuple(round(bound[n], 12) for n in bn)
            if (method, values) in drawn:        # the same bound as another estimator's
                continue
            drawn[(method, values)] = True
            distinct = {tuple(round(b[n], 12) for n in sorted(b))
                        for (m, _), b in bounds.items() if m == method}
            raw = estimator == "raw" and len(distinct) > 1   # the raw estimator's own bound
            bound_label = f"bound, {method}" + (", raw" if raw else "")
            line = bound_look(look["color"], raw=raw)
            ax.plot(bn, [bound[n] for n in bn], label=bound_label, **line)
            groups[method].append((Line2D([], [], **line), bound_label))
        if panel == "b":
            points = [(n, projected) for (ref_J, n), (_, projected) in NOTE_REFERENCE.items()
                      if ref_J == J]
            if points:
                label = "projected HR, projected:\nindependent check (20 runs)"
                ax.scatter(*zip(*points), marker="*", s=110, color="black", zorder=5,
                           label=label)
                reference.append((Line2D([], [], marker="*", markersize=11, color="black",
                                         linestyle="none"), label))
        format_n_axis(ax, sorted({int(row["n"]) for row in mine}))
        ax.set_yscale("log")
        style_panel(ax, index, headings[panel].format(J=J), "n (users)", ylabels[panel])
    runs = _runs_text(run_counts)
    handles, labels = statistics_handles(runs)
    reference.extend(zip(handles, labels))
    handles, labels, legend_rows = legend_columns(list(groups.values()), reference)
    finish(fig, handles, labels, legend_rows, title,
           f"line: mean over {runs}; band: min–max over the runs; dashed: the theorems' "
           "bounds with the corrected σ (dash-dot: the raw estimator's, where it differs)")
    return fig


def run(out: str, *, quick: bool = False, tiny: bool = False, runs: Optional[int] = None,
        seed: int = 0) -> Tuple[str, str, List[Dict[str, Any]], str]:
    """Run the three panels; write ``<out>/linear-queries.csv`` and ``.png``; returns the
    paths, the rows and a summary for the terminal."""
    import matplotlib.pyplot as plt

    size = 2 if tiny else 1 if quick else 0
    count = runs if runs is not None else _RUNS[size]
    rows: List[Dict[str, Any]] = []
    rows.extend(offline_rows(_NS["a"][size], count, seed))
    rows.extend(distribution_rows(_DOMAINS_B[size], _NS["b"][size], count, seed))
    rows.extend(adaptive_rows(_NS["c"][size], count, seed))
    csv_path = os.path.join(out, "linear-queries.csv")
    png_path = os.path.join(out, "linear-queries.png")
    write(rows, csv_path)
    fig = figure(rows, title="linear-queries" + (" [tiny: test grid]" if tiny else
                                                 " [quick]" if quick else ""))
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return csv_path, png_path, rows, reference_text(rows)
