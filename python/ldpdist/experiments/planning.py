"""Validation of the planner (:func:`ldpdist.plan`) against full simulations.

A *cell* is one setting (k, ε, n, distribution). :func:`validate_cell` plans it (with the
distribution known to the planner), then simulates every planned row exactly in law
(``mechanism.simulate`` on multinomial true counts, seeded repetitions until the mean is
known to 2%) and returns,
per row, the predicted and the simulated error. The docs page *Planning* shows a grid of cells
(``docs/generate.py --only planning``); ``tests/test_planner.py`` checks a smaller one.

The acceptance criteria (issue 22):

* the chosen row's prediction is within 15% of its simulated error (5% when its decoder is
  the unbiased ``raw``);
* the chosen row's simulated error is within 1.3× of the best simulated row's.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .. import mechanisms as mechanism_classes, planner
from .distributions import make_distribution

#: Tolerances of the criteria (module doc).
PREDICTION_TOLERANCE = 0.15
RAW_PREDICTION_TOLERANCE = 0.05
CHOICE_TOLERANCE = 1.3

#: Simulating subset selection costs O(n + k d) per repetition with large constants; above
#: this k its rows are predicted but not simulated (the docs page says so).
SIMULATION_LIMITS = {"SubsetSelection": 2**14}


#: Rows whose predicted error is above this multiple of the chosen row's are not simulated
#: (they cannot be the best row unless their prediction is off by more than that factor).
SIMULATED_SPAN = 1.25


#: Relative standard error of the simulated mean the repetitions aim at (per mechanism, for
#: its best simulated row), and their bounds.
SIMULATION_PRECISION = 0.02
MIN_REPETITIONS, MAX_REPETITIONS = 4, 100


def enough_repetitions(values: Sequence[float], k: int) -> bool:
    """Whether the simulated errors ``values`` of a row pin its mean down to
    :data:`SIMULATION_PRECISION` (or the repetitions reached their cap: at most
    :data:`MAX_REPETITIONS`, and about 2^22 estimated values in all)."""
    count = len(values)
    if count < MIN_REPETITIONS:
        return False
    if count >= min(MAX_REPETITIONS, max(MIN_REPETITIONS, 2**22 // k)):
        return True
    mean = float(np.mean(values))
    return mean <= 0 or float(np.std(values, ddof=1)) / mean / math.sqrt(count) \
        <= SIMULATION_PRECISION


def validate_cell(k: int, epsilon: float, n: int, distribution: str, *,
                  metric: str = "l1", seed: int = 0, reps: Optional[int] = None,
                  mechanisms: Optional[Sequence[str]] = None,
                  decoders: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """Plan one cell and simulate its rows; one record per planned row (rank order) with
    ``predicted``, ``simulated`` (NaN when not simulated), ``method`` and the cell."""
    rng = np.random.default_rng([seed, k, n, int(epsilon * 1000)])
    p = make_distribution(distribution, k, rng)
    result = planner.plan(k, epsilon, n=n, metric=metric, distribution=p,
                          mechanisms=mechanisms, decoders=decoders, seed=seed)
    kind, t = planner.parse_metric(metric, k)
    top = planner.top_values(p, t) if kind == "top" else None
    cutoff = SIMULATED_SPAN * result.rows[0].error
    simulated: Dict[tuple, List[float]] = {}
    by_mechanism: Dict[str, List[planner.PlanRow]] = {}
    for row in result.rows:
        if row.rank == 1 or row.error <= cutoff:
            by_mechanism.setdefault(row.mechanism, []).append(row)
    for name, rows in by_mechanism.items():
        if k > SIMULATION_LIMITS.get(name, math.inf):
            continue
        mechanism = getattr(mechanism_classes, name)(k, epsilon)
        best = (name, min(rows, key=lambda row: row.error).decoder)
        for rep in range(MAX_REPETITIONS if reps is None else reps):
            if reps is None and enough_repetitions(simulated.get(best, []), k):
                break
            counts = np.random.default_rng([seed, k, n, rep, 1]).multinomial(n, p)
            aggregate = mechanism.simulate(counts, seed=int(
                np.random.default_rng([seed, k, n, rep, 2]).integers(2**63)))
            for row in rows:
                sparsity = row.parameters.get("sparsity")
                estimate = aggregate.estimate(decoder=row.decoder, sparsity=sparsity)
                simulated.setdefault((name, row.decoder), []).append(
                    float(planner.errors_of(estimate, p, kind, top)[0]))
    records = []
    for row in result.rows:
        values = simulated.get((row.mechanism, row.decoder))
        records.append(dict(
            k=k, epsilon=epsilon, n=n, distribution=distribution, metric=metric,
            rank=row.rank, mechanism=row.mechanism, decoder=row.decoder, method=row.method,
            predicted=row.error,
            simulated=math.nan if values is None else planner.mean_error(np.array(values),
                                                                         kind),
            reps=0 if values is None else len(values)))
    return records


def judge_cell(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The criteria on one cell's records: the chosen (rank 1) row's prediction error and
    its simulated error against the best simulated row's."""
    chosen = records[0]
    simulated = [r for r in records if not math.isnan(r["simulated"])]
    best = min(simulated, key=lambda r: r["simulated"])
    relative = abs(chosen["predicted"] / chosen["simulated"] - 1.0)
    tolerance = (RAW_PREDICTION_TOLERANCE if chosen["decoder"] == "raw"
                 else PREDICTION_TOLERANCE)
    ratio = chosen["simulated"] / best["simulated"]
    return dict(k=chosen["k"], epsilon=chosen["epsilon"], n=chosen["n"],
                distribution=chosen["distribution"], metric=chosen["metric"],
                chosen=f"{chosen['mechanism']}/{chosen['decoder']}",
                best=f"{best['mechanism']}/{best['decoder']}",
                predicted=chosen["predicted"], simulated=chosen["simulated"],
                prediction_error=relative, prediction_ok=relative <= tolerance,
                choice_ratio=ratio, choice_ok=ratio <= CHOICE_TOLERANCE)
