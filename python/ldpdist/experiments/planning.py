"""Validation of the planner (:func:`ldpdist.plan`) against full simulations.

A *cell* is one setting (k, ε, n, distribution). :func:`validate_cell` plans it (with the
distribution known to the planner), then simulates every planned row exactly in law
(``mechanism.simulate`` on multinomial true counts, seeded repetitions until the mean is
known to 2%) and returns,
per row, the predicted and the simulated error. The docs page *Planning* shows a grid of cells
(``docs/generate.py --only planning``); ``tests/test_planner.py`` checks a smaller one.

The acceptance criteria of the validation:

* the chosen row's prediction is within 15% of its simulated error (5% when its decoder is
  the unbiased ``raw``);
* the chosen row's simulated error is within 1.3× of the best simulated row's.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .. import planner
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
#: The chosen row, whose prediction the criteria judge, gets a larger budget (its error can
#: vary widely between runs: Power on a flat distribution).
CHOSEN_MAX_REPETITIONS = 4096
MAX_SIMULATED_VALUES, CHOSEN_MAX_SIMULATED_VALUES = 2**22, 2**24


def enough_repetitions(values: Sequence[float], k: int, *, chosen: bool = False) -> bool:
    """Whether the simulated errors ``values`` of a row pin its mean down to
    :data:`SIMULATION_PRECISION` (or the repetitions reached their cap: at most
    :data:`MAX_REPETITIONS`, and about :data:`MAX_SIMULATED_VALUES` estimated values in all;
    for the chosen row :data:`CHOSEN_MAX_REPETITIONS` and
    :data:`CHOSEN_MAX_SIMULATED_VALUES`)."""
    count = len(values)
    if count < MIN_REPETITIONS:
        return False
    most, values_cap = ((CHOSEN_MAX_REPETITIONS, CHOSEN_MAX_SIMULATED_VALUES) if chosen
                        else (MAX_REPETITIONS, MAX_SIMULATED_VALUES))
    if count >= min(most, max(MIN_REPETITIONS, values_cap // k)):
        return True
    return planner.relative_standard_error(values) <= SIMULATION_PRECISION


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
    by_mechanism: Dict[tuple, List[planner.PlanRow]] = {}
    for row in result.rows:
        if row.rank == 1 or row.error <= cutoff:
            by_mechanism.setdefault(_instance(row), []).append(row)
    chosen = result.rows[0]
    for instance, rows in by_mechanism.items():
        if k > SIMULATION_LIMITS.get(rows[0].mechanism, math.inf):
            continue
        mechanism = planner.rebuild(dict(mechanism=rows[0].mechanism,
                                         parameters=rows[0].parameters), k, epsilon)
        best = (instance, min(rows, key=lambda row: row.error).decoder)
        rep = 0
        while reps is None or rep < reps:
            if reps is None and enough_repetitions(simulated.get(best, []), k):
                break
            _simulate_rows(mechanism, instance, rows, p, n, kind, top, seed, rep, simulated)
            rep += 1
        if reps is None and _instance(chosen) == instance:
            # the chosen row alone, on to its own (larger) budget
            while not enough_repetitions(simulated[(instance, chosen.decoder)], k,
                                         chosen=True):
                _simulate_rows(mechanism, instance, [chosen], p, n, kind, top, seed, rep,
                               simulated)
                rep += 1
    records = []
    for row in result.rows:
        values = simulated.get((_instance(row), row.decoder))
        records.append(dict(
            k=k, epsilon=epsilon, n=n, distribution=distribution, metric=metric,
            rank=row.rank, mechanism=row.mechanism, parameters=row.parameters,
            decoder=row.decoder, method=row.method,
            predicted=row.error,
            simulated=math.nan if values is None else planner.mean_error(np.array(values),
                                                                         kind),
            reps=0 if values is None else len(values)))
    return records


def _instance(row: planner.PlanRow) -> tuple:
    """The mechanism of a row and the parameters that make it (compressive privatization
    has a row per report size)."""
    return (row.mechanism, row.parameters.get("m"))


def _simulate_rows(mechanism: Any, instance: tuple, rows: Sequence[planner.PlanRow],
                   p: np.ndarray, n: int, kind: str, top: Optional[np.ndarray], seed: int,
                   rep: int, simulated: Dict[tuple, List[float]]) -> None:
    """One seeded repetition: n users drawn from p, their reports simulated exactly in law,
    every row's decoder applied; the errors appended to ``simulated``."""
    k = p.size
    counts = np.random.default_rng([seed, k, n, rep, 1]).multinomial(n, p)
    aggregate = mechanism.simulate(counts, seed=int(
        np.random.default_rng([seed, k, n, rep, 2]).integers(2**63)))
    for row in rows:
        estimate = aggregate.estimate(decoder=row.decoder,
                                      sparsity=row.parameters.get("sparsity"))
        simulated.setdefault((instance, row.decoder), []).append(
            float(planner.errors_of(estimate, p, kind, top)[0]))


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
