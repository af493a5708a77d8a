"""The planner (ldpdist.plan, `ldpdist plan`): exact predictions, the surrogate's fit on a
validation grid (the chosen row predicted within 15%, 5% for the raw decoder, and within
1.3× of the best simulated row), the API and the command line."""

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ldpdist
from ldpdist import planner
from ldpdist.experiments import planning
from ldpdist.experiments.distributions import make_distribution

PLANNED = [getattr(ldpdist, name) for name in planner.PLANNED_MECHANISMS]
IDS = list(planner.PLANNED_MECHANISMS)


def simulated_errors(mechanism, p, n, decoder, metric, reps, seed=0):
    kind, t = planner.parse_metric(metric, mechanism.k)
    top = planner.top_values(p, t) if kind == "top" else None
    errors = []
    for rep in range(reps):
        counts = np.random.default_rng([seed, rep]).multinomial(n, p)
        estimate = mechanism.simulate(counts, seed=seed * 1000 + rep).estimate(decoder=decoder)
        errors.append(planner.errors_of(estimate, p, kind, top)[0])
    return planner.mean_error(np.array(errors), kind)


def test_binomial_mean_absolute_deviation_matches_the_sum_over_outcomes():
    for n, s in [(1, 0.3), (10, 0.3), (100, 0.01), (1000, 0.5), (7, 0.999), (50, 0.02),
                 (3, 0.0), (3, 1.0)]:
        x = np.arange(n + 1)
        law = np.array([math.comb(n, int(i)) * s**i * (1 - s) ** (n - i) for i in x])
        exact = float(np.sum(law * np.abs(x - n * s)))
        got = float(planner.binomial_mean_absolute_deviation(n, np.array([s]))[0])
        assert got == pytest.approx(exact, rel=1e-9, abs=1e-12)
    # the normal branch joins the exact one smoothly
    n = 10**9
    s = np.array([0.02, 0.03])  # n s (1 - s) above and around 1e7
    assert np.allclose(planner.binomial_mean_absolute_deviation(n, s),
                       np.sqrt(2 * n * s * (1 - s) / math.pi), rtol=1e-6)


def test_log_gamma_matches_math_lgamma():
    x = np.array([1.0, 1.5, 2.0, 7.3, 10.0, 100.5, 1e4, 1e8])
    expected = np.array([math.lgamma(v) for v in x])
    assert np.allclose(planner.log_gamma(x), expected, rtol=1e-13, atol=3e-12)


@pytest.mark.parametrize("cls", PLANNED, ids=IDS)
def test_raw_sums_to_one_exactly_for_the_listed_mechanisms_only(cls):
    k = 12
    mechanism = cls(k, 1.0)
    p = np.random.default_rng(1).dirichlet(np.ones(k))
    sums = [mechanism.simulate(np.random.default_rng(r).multinomial(5000, p), seed=r)
            .estimate(decoder="raw").sum() for r in range(3)]
    if cls.__name__ in planner.SUMS_TO_ONE:
        assert np.allclose(sums, 1.0, atol=1e-9)
    else:
        assert max(abs(s - 1.0) for s in sums) > 1e-6


# The raw decoder's predictions are exact: a simulation of many repetitions agrees within its
# own standard error (a few percent).
@pytest.mark.parametrize("cls", PLANNED, ids=IDS)
@pytest.mark.parametrize("metric", ["l1", "l2", "top-5"])
def test_raw_predictions_agree_with_simulation(cls, metric):
    k, epsilon, n = 64, 1.0, 20_000
    p = make_distribution("zipf:1.1", k, np.random.default_rng(2))
    mechanism = cls(k, epsilon)
    predicted, method = planner.predict_error(mechanism, "raw", p, n, metric)
    assert method in ("exact", "normal")
    simulated = simulated_errors(mechanism, p, n, "raw", metric, reps=120)
    assert predicted == pytest.approx(simulated, rel=0.05)


def test_exact_methods_are_the_pure_frequency_oracles():
    p = np.full(32, 1 / 32)
    for cls in PLANNED:
        mechanism = cls(32, 1.0)
        _, method = planner.predict_error(mechanism, "raw", p, 10_000, "l1")
        assert method == ("exact" if mechanism._frequency_oracle() is not None else "normal")
        _, method = planner.predict_error(mechanism, "raw", p, 10_000, "l2")
        assert method == "exact"


# -- the validation grid (the docs page shows a larger one) ---------------------------------

GRID = [
    (100, 1.0, 10**4, "zipf:1.1"),
    (512, 0.25, 10**5, "geo:0.9"),
    (1024, 2.0, 10**6, "unif:10"),
    (2048, 2.0, 10**6, "zipf:1.5"),
]
# The docs grid plans every mechanism; here three, to keep the run short.
GRID_MECHANISMS = ["hr", "oue", "olh"]


@pytest.fixture(scope="module")
def judged():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [planning.judge_cell(planning.validate_cell(*cell,
                                                           mechanisms=GRID_MECHANISMS))
                for cell in GRID]


@pytest.mark.parametrize("index", range(len(GRID)), ids=[str(cell) for cell in GRID])
def test_chosen_row_is_predicted_within_tolerance_and_near_the_best(judged, index):
    verdict = judged[index]
    assert verdict["prediction_ok"], verdict
    assert verdict["choice_ok"], verdict


def test_ibu_is_predicted_on_request_from_exact_simulations():
    p = make_distribution("zipf:1.5", 128, np.random.default_rng(3))
    default = ldpdist.plan(128, 2.0, n=10**6, distribution=p, mechanisms=["rr", "hr", "olh"])
    assert "ibu" not in {row.decoder for row in default.rows}
    requested = ldpdist.plan(128, 2.0, n=10**6, distribution=p,
                             mechanisms=["rr", "hr", "oue", "olh"],
                             decoders=["ibu", "project"])
    ibu_rows = {row.mechanism: row for row in requested.rows if row.decoder == "ibu"}
    assert set(ibu_rows) == {"RandomizedResponse", "HadamardResponse",
                             "OptimizedUnaryEncoding"}
    assert {row.method for row in ibu_rows.values()} == {"simulation"}
    assert all(0 < row.error_precision < 0.2 for row in ibu_rows.values())
    with pytest.raises(ValueError, match="does not model decoder 'ibu'"):
        planner.predict_error(ldpdist.OptimizedLocalHashing(128, 2.0), "ibu", p, 10**6)
    with pytest.raises(ValueError, match="does not model decoder 'ibu'"):
        planner.predict_error(ldpdist.HadamardResponse(planner.IBU_MAX_K + 1, 1.0), "ibu",
                              np.full(planner.IBU_MAX_K + 1, 1.0 / (planner.IBU_MAX_K + 1)),
                              10**5)


def test_ibu_prediction_matches_full_simulations():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        records = planning.validate_cell(128, 2.0, 10**6, "zipf:1.5", mechanisms=["hr"],
                                         decoders=["ibu"])
    verdict = planning.judge_cell(records)
    assert verdict["chosen"] == "HadamardResponse/ibu"
    assert verdict["prediction_ok"], verdict


def test_the_first_row_is_refined_to_the_draw_precision_where_draws_vary_widely():
    # Power-NS on a flat distribution: the per-draw error has a standard deviation above
    # its mean, so the default budget leaves the mean imprecise
    k, n = 100, 10**5
    p = np.full(k, 1.0 / k)
    mechanism = ldpdist.RandomizedResponse(k, 1.0)
    plain = planner.predict_errors(mechanism, ["power_ns"], p, n)["power_ns"]
    refined = planner.predict_errors(mechanism, ["power_ns"], p, n, refined=True)["power_ns"]
    assert plain[2] > planner.DRAW_PRECISION
    assert refined[2] < plain[2]
    assert refined[2] <= 2 * planner.DRAW_PRECISION
    best = ldpdist.plan(k, 1.0, n=n, distribution=p, mechanisms=["rr"],
                        decoders=["power_ns", "project"]).best
    assert (best.decoder, best.method) == ("power_ns", "simulation")
    assert best.error == refined[0] and best.error_precision == refined[2]


# -- the API -------------------------------------------------------------------------------

def test_plan_ranks_by_error_and_reports_what_each_row_is():
    result = ldpdist.plan(1000, 1.0, n=100_000, decoders=["raw", "project", "base_cut"])
    errors = [row.error for row in result.rows]
    assert errors == sorted(errors)
    assert [row.rank for row in result.rows] == list(range(1, len(result.rows) + 1))
    assert result.best is result.rows[0]
    names = {row.mechanism for row in result.rows}
    assert names == set(planner.PLANNED_MECHANISMS) - {"OneBitHadamardResponse"} | (
        {"OneBitHadamardResponse"} if 100_000 >= 1024 else set())
    for row in result.rows:
        mechanism = getattr(ldpdist, row.mechanism)(1000, 1.0)
        assert row.report_bits == planner.report_bits(mechanism)
        assert row.realized_epsilon <= 1.0
        assert row.decoder in mechanism.decoders
        assert row.decoder in ("raw", "project", "base_cut")
    records = result.to_records()
    assert records[0]["mechanism"] == result.best.mechanism
    assert json.loads(result.to_json())["rows"][0]["rank"] == 1
    text = str(result)
    assert result.best.mechanism in text and "server ops" in text


def test_plan_is_deterministic_for_a_seed():
    a = ldpdist.plan(500, 2.0, n=10**5, distribution="zipf:1.2", mechanisms=["hr", "olh"])
    b = ldpdist.plan(500, 2.0, n=10**5, distribution="zipf:1.2", mechanisms=["hr", "olh"])
    a, b = a.to_records(), b.to_records()
    assert a == b


def test_max_report_bits_and_mechanism_filters():
    cheap = ["raw", "project"]
    result = ldpdist.plan(4096, 1.0, n=10**6, max_report_bits=1, decoders=cheap)
    assert {row.mechanism for row in result.rows} == {"OneBitHadamardResponse"}
    result = ldpdist.plan(4096, 1.0, n=10**6, max_report_bits=16, decoders=cheap)
    assert all(row.report_bits <= 16 for row in result.rows)
    result = ldpdist.plan(4096, 1.0, n=10**6, mechanisms=["hr", "OptimizedLocalHashing"],
                          decoders=cheap)
    assert {row.mechanism for row in result.rows} == {"HadamardResponse",
                                                      "OptimizedLocalHashing"}
    result = ldpdist.plan(4096, 1.0, n=10**6, decoders=["raw"])
    assert {row.decoder for row in result.rows} == {"raw"}


def test_one_bit_hadamard_is_left_out_when_some_group_would_be_empty():
    rows = ldpdist.plan(4096, 1.0, n=1000, decoders=["raw"]).rows
    assert "OneBitHadamardResponse" not in {row.mechanism for row in rows}


def test_users_needed_reaches_the_target_and_no_fewer_do():
    k, epsilon, target = 256, 1.0, 0.2
    result = ldpdist.plan(k, epsilon, target=target, mechanisms=["oue", "hr"],
                          decoders=["raw", "project"])
    p = np.full(k, 1 / k)
    for row in result.rows:
        mechanism = getattr(ldpdist, row.mechanism)(k, epsilon)
        at = planner.predict_error(mechanism, row.decoder, p, row.n_needed)[0]
        below = planner.predict_error(mechanism, row.decoder, p, int(row.n_needed / 1.1))[0]
        assert at <= target * 1.01 and below > target, (row, at, below)
    needed = [row.n_needed for row in result.rows]
    assert needed == sorted(needed)


def test_raw_l2_users_needed_is_the_closed_form():
    mechanism = ldpdist.HadamardResponse(100, 1.0)
    p = np.full(100, 0.01)
    needed = planner.users_needed(mechanism, "raw", p, 0.05, "l2")
    assert planner.predict_error(mechanism, "raw", p, needed, "l2")[0] <= 0.05
    assert planner.predict_error(mechanism, "raw", p, needed - 1, "l2")[0] > 0.05


def test_sparsity_sets_the_reference_distribution_and_the_sparse_decoder():
    result = ldpdist.plan(1000, 1.0, n=10**5, sparsity=10, mechanisms=["hr", "oue"],
                          decoders=["project", "sparse_project"])
    assert result.distribution == "Unif(10)"
    sparse_rows = [row for row in result.rows if row.decoder == "sparse_project"]
    assert sparse_rows and all(row.parameters["sparsity"] == 10 for row in sparse_rows)


def test_metrics():
    for metric in ("l1", "l2", "linf", "top-3", "top3"):
        assert ldpdist.plan(50, 1.0, n=10**4, metric=metric, mechanisms=["rr"],
                            decoders=["raw", "project"]).rows


@pytest.mark.parametrize("kwargs, message", [
    (dict(), "give n"),
    (dict(n=0), "n"),
    (dict(n=100, metric="l3"), "unknown metric"),
    (dict(n=100, metric="top-0"), "top-T"),
    (dict(n=100, metric="top-101"), "top-T"),
    (dict(target=0.0), "target"),
    (dict(target=-1.0), "target"),
    (dict(n=100, sparsity=0), "sparsity"),
    (dict(n=100, mechanisms=["pch"]), "not planned"),
    (dict(n=100, mechanisms=[]), "empty"),
    (dict(n=100, max_report_bits=0), "max_report_bits"),
    (dict(n=100, distribution=np.ones(3) / 3), "shape"),
    (dict(n=100, distribution=np.r_[np.ones(99), -98.0]), "non-negative"),
    (dict(n=100, distribution="pareto:2"), "unknown distribution"),
])
def test_bad_input_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ldpdist.plan(100, 1.0, **kwargs)


def test_bad_epsilon():
    for epsilon in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            ldpdist.plan(100, epsilon, n=100)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ldpdist", "plan", *args],
                          capture_output=True, text=True)


def test_command_line_table_and_json():
    out = run_cli("--k", "1000", "--epsilon", "1", "--n", "1e5", "--limit", "3",
                  "--decoders", "raw,project")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("k = 1000") and len(lines) == 2 + 1 + 3
    out = run_cli("--k", "1000", "--epsilon", "1", "--n", "1e5", "--json",
                  "--max-report-bits", "1", "--decoders", "project")
    data = json.loads(out.stdout)
    assert data["n"] == 100_000 and data["rows"][0]["report_bits"] == 1
    out = run_cli("--k", "1000", "--epsilon", "1", "--target", "0.5", "--mechanisms", "hr",
                  "--decoders", "raw")
    assert out.returncode == 0 and "users needed" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--k", "1000", "--epsilon", "1", "--n", "1.5"], "whole number"),
    (["--k", "1000", "--epsilon", "1", "--n", "10", "--metric", "l7"], "unknown metric"),
    (["--k", "1000", "--epsilon", "1", "--n", "many"], "number of users"),
    (["--k", "1000", "--epsilon", "0", "--n", "10"], "epsilon"),
    (["--k", "1000", "--epsilon", "1"], "give n"),
])
def test_command_line_errors_are_one_line(args, message):
    out = run_cli(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_compressive_privatization_is_planned_on_request_one_row_per_report_size():
    assert "CompressivePrivatization" not in {
        row.mechanism for row in ldpdist.plan(4096, 1.0, n=10**5, sparsity=10,
                                              mechanisms=["hr"]).rows}
    result = ldpdist.plan(4096, 1.0, n=10**5, sparsity=10, mechanisms=["cp", "hr"])
    rows = [row for row in result.rows if row.mechanism == "CompressivePrivatization"]
    sizes = sorted({row.parameters["m"] for row in rows})
    assert sizes == [m for m in planner.COMPRESSIVE_REPORT_SIZES if m < 4096]
    assert {row.decoder for row in rows} == set(planner.COMPRESSIVE_DECODERS)
    for row in rows:
        assert row.method == "simulation" and row.parameters["sparsity"] == 10
        assert row.parameters["seed"] == planner.COMPRESSIVE_SEED
        assert row.report_bits == int(math.log2(row.parameters["m"]))
    assert planner.planned_instances("cp", planner.COMPRESSIVE_MAX_K * 2, 1.0) == []
    assert planner.planned_instances("cp", 200, 1.0) == []   # every report size >= k


def test_compressive_prediction_matches_full_simulations():
    records = planning.validate_cell(4096, 1.0, 10**5, "unif:10", mechanisms=["cp"])
    verdict = planning.judge_cell(records)
    assert verdict["chosen"].startswith("CompressivePrivatization/")
    assert verdict["prediction_ok"], verdict
    assert verdict["choice_ok"], verdict
