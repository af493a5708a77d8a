"""The ``linear-queries`` preset: first measurements for the linear-queries paper
(shared/papers/linear-queries-ldp.txt; notes: shared/notes/linear-queries.md), which has no
experiments of its own. Three panels, all with ε = 1:

* (a) offline queries: d = 16 random ±1/√d queries over J = 1000 values (column norms r = 1),
  p ~ Dirichlet(0.5) drawn once per run; error max_j |ŷ_j − ⟨q_j, p⟩| against the *true*
  distribution vs n for the Gaussian protocol (δ = 1e-6, analytic calibration) with and
  without the projection onto conv{±a_v}, and for the rejection-sampling protocol (pure ε,
  calibrated for the n it runs at) with and without it; the bounds of Theorems 3.2 and 3.4
  with the corrected σ are drawn (they bound the ℓ2 error, hence also the max error).
  Reports go through the protocols' ``privatize`` one user at a time (path ``privatize``).
* (b) distribution estimation, J ∈ {16, 1000}, p ~ Dirichlet(0.5), the SAME users (one
  histogram per run): projected Hadamard Response (the paper's Algorithm 5,
  ``HadamardResponse(J, ε, blocks=1)``, through ``simulate``, exact in law) against the
  Gaussian protocol on A = I_J (δ = 1e-6) + the projection onto conv{e_v} (the simplex); the
  mean of n Gaussian reports is the users' histogram / n + N(0, σ²/n · I) exactly in law, so it
  is drawn at that level (path ``aggregate``: n · J reports would not fit in memory at
  J = 1000, n = 10^6). ℓ2 error against p, raw and projected; the note's reference figures
  are printed beside the measured ones.
* (c) adaptive queries (Algorithm 6): J = 1000, p a discretized normal, 100 rounds; the
  analyst runs 10 noisy bisection searches (the 0.1, 0.2, …, 0.9 quantiles and the median
  again), 10 rounds each, every query q_t = 1[v ≤ m_t] chosen from the answers so far; error
  max_t |ȳ_t − ⟨q_t, p⟩| vs n with the Theorem 5.2 bound.

Outputs: ``linear-queries.csv`` (one row per panel, method, estimator, J, n and run; columns
:data:`COLUMNS`), ``linear-queries.png`` (the three panels).
"""

from __future__ import annotations

import csv
import math
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .results import write_csv

DESCRIPTION = ("Linear queries under LDP (first measurements): (a) 16 random queries over "
               "J = 1000, max error vs n for the Gaussian and rejection-sampling protocols "
               "with and without projection, with Theorems 3.2/3.4; (b) distribution "
               "estimation J = 16, 1000: projected HR vs Gaussian on A = I + projection; "
               "(c) 100 adaptive bisection rounds vs Theorem 5.2; eps = 1 (runs inline: "
               "--jobs has no effect)")

EPSILON = 1.0
DELTA = 1e-6
QUERIES = 16            # d of panel (a)
DOMAIN = 1000           # J of panels (a) and (c)
DIRICHLET = 0.5
ROUNDS = 100
#: panel (a)'s estimators: (label, ``projection=`` of the protocols' ``estimate``)
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

#: the note's reference figures (ε = 1, Dirichlet(0.5), 20 runs): (J, n) -> (raw, projected)
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
    """Panel (a). Bounds: the protocol's ``bound(n)`` (raw) or ``bound(n, projected=True)``,
    about the users' histogram p̂, plus r/√n for the distance from A·p̂ to A·p (the paper's
    eq. (3)): the error here is measured against the true p."""
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
    """Panel (b), by :func:`ldpdist.linear.distribution_estimates` (``seconds``: the four
    estimates together). Bounds: Theorem 4.2 for projected HR (its √(4c²J/n) branch for the
    raw estimate, Fact 4.1); for the Gaussian protocol on A = I its ``bound`` plus 1/√n (the
    histogram's distance to p)."""
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
    """Panel (c)'s p: a normal with mean 0.4 J and standard deviation J/8, discretized."""
    v = np.arange(J)
    w = np.exp(-0.5 * ((v - 0.4 * J) / (J / 8)) ** 2)
    return w / w.sum()


def adaptive_rows(ns: Sequence[int], runs: int, seed: int) -> Iterator[Dict[str, Any]]:
    """Panel (c): noisy bisection searches, every query chosen from the answers so far."""
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
    out = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            for key in ("J", "d", "n", "run"):
                row[key] = int(row[key])
            for key in ("epsilon", "error", "l2", "linf", "bound", "seconds"):
                row[key] = float(row[key])
            row["delta"] = float(row["delta"]) if row["delta"] else ""
            out.append(row)
    return out


def _mean(rows: Sequence[Dict[str, Any]], **match: Any) -> Dict[int, List[float]]:
    data: Dict[int, List[float]] = {}
    for row in rows:
        if all(row[key] == value for key, value in match.items()):
            data.setdefault(int(row["n"]), []).append(float(row["error"]))
    return data


def reference_text(rows: Sequence[Dict[str, Any]]) -> str:
    """Panel (b)'s projected-HR means at the note's reference points, beside the note's."""
    lines = []
    for (J, n), (raw, projected) in NOTE_REFERENCE.items():
        got = {}
        for estimator in ("raw", "projected"):
            data = _mean(rows, panel="b", method="projected HR", estimator=estimator, J=J)
            if n in data:
                got[estimator] = float(np.mean(data[n]))
        if len(got) == 2:
            lines.append(f"  projected HR, J = {J}, n = {n}: l2 raw {got['raw']:.3f} "
                         f"(note {raw}), projected {got['projected']:.3f} (note {projected})")
    return ("note's reference figures (eps = 1, Dirichlet(0.5)):\n" + "\n".join(lines)
            if lines else "")


_COLORS = {"Gaussian": "tab:blue", "rejection sampling": "tab:orange",
           "projected HR": "tab:red", "Gaussian (A = I)": "tab:blue",
           "adaptive (Alg. 6)": "tab:green"}
_MARKERS = {"Gaussian": "o", "rejection sampling": "s", "projected HR": "D",
            "Gaussian (A = I)": "o", "adaptive (Alg. 6)": "^"}
_STYLES = {"raw": ":", "symmetric hull": "-", "convex hull": "-", "projected": "-",
           "round means": "-"}


def _look(method: str, estimator: str) -> Tuple[str, str, str]:
    marker = _MARKERS.get(method, "x")
    if estimator == "convex hull":
        marker = {"o": "P", "s": "X"}.get(marker, marker)
    return _COLORS.get(method, "black"), marker, _STYLES.get(estimator, "-")


def figure(rows: Sequence[Dict[str, Any]], title: str = "linear-queries"):
    """(a) offline max error vs n with the bounds; (b) distribution estimation ℓ2 vs n, one
    panel per J; (c) adaptive max error vs n with the Theorem 5.2 bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains_b = sorted({int(row["J"]) for row in rows if row["panel"] == "b"})
    panels = [("a", None), *(("b", J) for J in domains_b), ("c", None)]
    columns = 2
    lines = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(14, 5.2 * lines), squeeze=False)
    headings = {"a": f"(a) d = {QUERIES} random ±1/√d queries, J = {DOMAIN}, δ = {DELTA:g}",
                "b": "(b) distribution estimation, same users, J = {J}",
                "c": f"(c) adaptive: {ROUNDS} bisection rounds, J = {DOMAIN}"}
    ylabels = {"a": "max_j |ŷ_j − ⟨q_j, p⟩|", "b": "ℓ2 error ‖p̂ − p‖",
               "c": "max_t |ȳ_t − ⟨q_t, p⟩|"}
    for ax, (panel, J) in zip(axes.flat, panels):
        mine = [row for row in rows if row["panel"] == panel and (J is None or row["J"] == J)]
        curves = sorted({(row["method"], row["estimator"]) for row in mine})
        bounds: Dict[Tuple[str, str], Dict[int, float]] = {}
        for row in mine:
            bounds.setdefault((row["method"], row["estimator"]), {})[int(row["n"])] = \
                float(row["bound"])
        drawn: Dict[Tuple[str, Tuple[float, ...]], bool] = {}
        for method, estimator in curves:
            data = _mean(mine, method=method, estimator=estimator)
            ns = sorted(data)
            color, marker, style = _look(method, estimator)
            ax.plot(ns, [np.mean(data[n]) for n in ns], color=color, marker=marker,
                    linestyle=style, markersize=5, linewidth=1.4,
                    label=f"{method}, {estimator}")
            bound = bounds[(method, estimator)]
            bn = sorted(bound)
            values = tuple(round(bound[n], 12) for n in bn)
            if (method, values) in drawn:        # the same bound as another estimator's
                continue
            drawn[(method, values)] = True
            distinct = {tuple(round(b[n], 12) for n in sorted(b))
                        for (m, _), b in bounds.items() if m == method}
            ax.plot(bn, [bound[n] for n in bn], color=color,
                    linestyle="-." if estimator == "raw" else "--", linewidth=1.0, alpha=0.8,
                    label=f"bound, {method}" + (f", {estimator}" if len(distinct) > 1 else ""))
        if panel == "b":
            points = [(n, projected) for (ref_J, n), (_, projected) in NOTE_REFERENCE.items()
                      if ref_J == J]
            if points:
                ax.scatter(*zip(*points), marker="*", s=90, color="black", zorder=5,
                           label="the note's projected HR")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (users)")
        ax.set_ylabel(ylabels[panel])
        ax.set_title(headings[panel].format(J=J) + f", ε = {EPSILON:g}", fontsize=10)
        ax.grid(True, which="major", alpha=0.35)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    runs = sorted({int(row["run"]) for row in rows})
    fig.suptitle(f"{title}\nmean over {len(runs)} run{'s' if len(runs) != 1 else ''}; "
                 "dashed: the theorems' bounds (with the corrected σ; raw: dash-dot)",
                 fontsize=11)
    fig.tight_layout()
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
