"""The experiment commands: ``ldpdist reproduce PRESET`` and ``ldpdist simulate``."""

from __future__ import annotations

import csv
import itertools
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from ldpdist import cli, experiments
from ldpdist.experiments import COLUMNS, PRESETS, distribution_label, read_csv

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png(path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path, "rb") as handle:
        assert handle.read(8) == PNG_SIGNATURE
    image = plt.imread(str(path))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def check_csv_header(path) -> None:
    with open(path, newline="") as handle:
        assert tuple(next(csv.reader(handle))) == COLUMNS


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_tiny(name, tmp_path, capsys):
    assert cli.main(["reproduce", name, "--quick", "--tiny", "--out", str(tmp_path)]) == 0
    assert str(tmp_path / f"{name}.csv") in capsys.readouterr().out
    check_csv_header(tmp_path / f"{name}.csv")
    rows = read_csv(tmp_path / f"{name}.csv")
    preset = PRESETS[name].grid(quick=True, tiny=True)
    expected = set()
    for entry, dist, k, eps, n, run in itertools.product(
            preset.mechanisms, preset.distributions, preset.ks, preset.epsilons, preset.ns,
            range(preset.runs)):
        mech, decoders = entry[0], entry[1]
        params = tuple(sorted(entry[2].items())) if len(entry) > 2 else ()
        for decoder in decoders:
            expected.add((experiments.grid.mechanism_label(mech, params), decoder,
                          distribution_label(dist), k, "" if eps is None else eps, n, run))
    got = [(r["mechanism"], r["decoder"], r["distribution"], r["k"], r["epsilon"], r["n"],
            r["run"]) for r in rows]
    assert len(got) == len(set(got)) and set(got) == expected
    for row in rows:
        assert row["path"] == preset.path + ("-ideal-hash" if row["mechanism"].startswith("PCH")
                                             and preset.path == "simulate" else "")
        assert 0 <= row["l2"] <= row["l1"] + 1e-12
        if row["decoder"].split("/")[0] not in ("raw", "two_stage"):  # distributions
            assert row["l1"] <= 2 + 1e-9
        assert row["seconds"] > 0
        assert (row["m"] == preset.m) if row["mechanism"] == "CP" else row["m"] == ""
    check_png(tmp_path / f"{name}.png")


def test_jobs_do_not_change_results(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli.main(["reproduce", "cp-figure2", "--tiny", "--seed", "5", "--out", str(one)]) == 0
    assert cli.main(["reproduce", "cp-figure2", "--tiny", "--seed", "5", "--jobs", "2",
                     "--out", str(two)]) == 0
    a, b = read_csv(one / "cp-figure2.csv"), read_csv(two / "cp-figure2.csv")
    assert len(a) == len(b) > 0
    for ra, rb in zip(a, b):
        ra.pop("seconds"), rb.pop("seconds")
        assert ra == rb
    # and a different seed gives different numbers
    assert cli.main(["reproduce", "cp-figure2", "--tiny", "--seed", "6", "--out",
                     str(tmp_path / "three")]) == 0
    c = read_csv(tmp_path / "three" / "cp-figure2.csv")
    assert [r["l1"] for r in c] != [r["l1"] for r in a]


def test_simulate_npy(tmp_path, capsys):
    p = np.random.default_rng(3).dirichlet(np.full(50, 0.3))
    p /= p.sum()
    np.save(tmp_path / "p.npy", p)
    status = cli.main(["simulate", "--mechanism", "RR,hr,CompressivePrivatization",
                       "--dist", str(tmp_path / "p.npy"), "--epsilon", "1", "--n", "1000,5000",
                       "--runs", "2", "--m", "20", "--decoder", "normalize,project",
                       "--out", str(tmp_path / "out")])
    assert status == 0, capsys.readouterr().err
    rows = read_csv(tmp_path / "out" / "simulate.csv")
    assert len(rows) == 3 * 2 * 2 * 2
    assert {r["mechanism"] for r in rows} == {"RR", "HR", "CP"}
    assert {r["distribution"] for r in rows} == {"p.npy"} and {r["k"] for r in rows} == {50}
    assert all(r["path"] == "simulate" for r in rows)
    check_png(tmp_path / "out" / "simulate.png")


@pytest.mark.filterwarnings("ignore:the iterative Bayesian update did not reach")
def test_simulate_builtin_distributions(tmp_path):
    assert cli.main(["simulate", "--mechanism", "oue,olh,ss,rappor", "--dist",
                     "zipf:1.1,unif:5,geo:0.5", "--k", "200", "--epsilon", "0.5,2",
                     "--n", "3000", "--runs", "1", "--decoder", "project,ibu",
                     "--out", str(tmp_path)]) == 0
    rows = read_csv(tmp_path / "simulate.csv")
    assert len(rows) == 4 * 3 * 2 * 2


@pytest.mark.parametrize("array", [
    np.array([0.5, 0.7, -0.2]),          # negative entry
    np.array([0.3, 0.3, 0.3]),           # does not sum to 1
    np.array([0.5, 0.5 + 1e-8]),         # off by more than 1e-9
    np.array([[0.5, 0.5]]),              # not 1-D
    np.array([1, 0]),                    # not float
])
def test_simulate_bad_npy(array, tmp_path, capsys):
    np.save(tmp_path / "bad.npy", array)
    status = cli.main(["simulate", "--mechanism", "rr", "--dist", str(tmp_path / "bad.npy"),
                       "--epsilon", "1", "--n", "100", "--out", str(tmp_path / "out")])
    assert status == 2
    assert "bad.npy" in one_error_line(capsys)
    assert not (tmp_path / "out" / "simulate.csv").exists()


@pytest.mark.parametrize("argv, needle", [
    (["reproduce", "no-such-preset"], "unknown preset"),
    (["reproduce", "hr-l2", "--runs", "0"], "--runs"),
    (["reproduce", "hr-l2", "--jobs", "two"], "--jobs"),
    (["simulate", "--mechanism", "foo", "--dist", "geo:0.8", "--k", "10", "--epsilon", "1",
      "--n", "10"], "unknown mechanism"),
    (["simulate", "--mechanism", "rr", "--dist", "pareto:2", "--k", "10", "--epsilon", "1",
      "--n", "10"], "unknown distribution"),
    (["simulate", "--mechanism", "rr", "--dist", "geo:1.5", "--k", "10", "--epsilon", "1",
      "--n", "10"], "geo"),
    (["simulate", "--mechanism", "rr", "--dist", "unif:20", "--k", "10", "--epsilon", "1",
      "--n", "10"], "k = 10"),
    (["simulate", "--mechanism", "rr", "--dist", "geo:0.8", "--k", "10", "--epsilon", "-1",
      "--n", "10"], "--epsilon"),
    (["simulate", "--mechanism", "rr", "--dist", "geo:0.8", "--k", "10", "--epsilon", "1",
      "--n", "ten"], "--n"),
    (["simulate", "--mechanism", "cp", "--dist", "geo:0.8", "--k", "100", "--epsilon", "1",
      "--n", "10"], "--m"),
    (["simulate", "--mechanism", "rr", "--dist", "geo:0.8", "--epsilon", "1", "--n", "10"],
     "--k"),
    (["simulate", "--mechanism", "rr", "--dist", "geo:0.8", "--k", "10", "--epsilon", "1",
      "--n", "10", "--decoder", "magic"], "unknown decoder"),
    (["simulate", "--mechanism", "rr", "--dist", "missing.npy", "--epsilon", "1",
      "--n", "10"], "not found"),
])
def test_user_errors(argv, needle, tmp_path, capsys):
    assert cli.main(argv + ["--out", str(tmp_path)]) == 2
    assert needle in one_error_line(capsys)


def test_unwritable_out(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert cli.main(["reproduce", "hr-l2", "--tiny", "--out", str(tmp_path / "file" / "d")]) == 2
    assert "output directory" in one_error_line(capsys)


def test_interrupt_keeps_finished_points(tmp_path, monkeypatch, capsys):
    real = experiments.grid.run_point
    calls = []

    def run_point(point, seed, index):
        calls.append(index)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(point, seed, index)

    monkeypatch.setattr(experiments.grid, "run_point", run_point)
    assert cli.main(["reproduce", "hr-l2", "--tiny", "--out", str(tmp_path)]) == 130
    assert "interrupted after 2 of" in one_error_line(capsys)
    rows = read_csv(tmp_path / "hr-l2.csv")
    assert len(rows) == 2 * 4 and {r["n"] for r in rows} == {1000, 20000}
    check_png(tmp_path / "hr-l2.png")


def test_console_entry(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "ldpdist", "reproduce", "hr-l2", "--tiny",
                         "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "hr-l2.csv" in ok.stdout
    check_png(tmp_path / "hr-l2.png")
    bad = subprocess.run([sys.executable, "-m", "ldpdist", "reproduce", "bogus"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "unknown preset" in bad.stderr


def test_cp_beats_every_baseline_on_sparse_uniform(tmp_path):
    """The paper's claim (Figure 2), at n = 10^6 over the --quick runs (3).

    README (5 runs): CP 0.036 / 0.081 on Unif(10) / Unif(25) against at best 0.18 / 0.42 for
    a projected baseline and >= 1.88 normalized; a 2x margin on the means and "CP's worst run
    below every baseline's best run" are far outside the run-to-run spread (about ±25% for
    CP, ±10% for the baselines at this n).
    """
    assert cli.main(["reproduce", "cp-figure2", "--quick", "--out", str(tmp_path)]) == 0
    rows = read_csv(tmp_path / "cp-figure2.csv")
    n_max = max(r["n"] for r in rows)
    assert n_max == 1_000_000
    errors = defaultdict(list)
    for r in rows:
        if r["n"] == n_max:
            errors[(r["distribution"], r["mechanism"], r["decoder"])].append(r["l1"])
    for dist in ("Unif(10)", "Unif(25)"):
        cp = errors[(dist, "CP", "project")]
        assert len(cp) == 3
        baselines = {key: v for key, v in errors.items() if key[0] == dist and key[1] != "CP"}
        assert len(baselines) == 8
        for key, values in baselines.items():
            assert np.mean(cp) < 0.5 * np.mean(values), (key, cp, values)
            assert max(cp) < min(values), (key, cp, values)


def test_sparsity_reaches_only_the_decoders_that_use_it(tmp_path, capsys):
    """s is CP's OMP sparsity for every CP decoder, but for other mechanisms only
    sparse_project takes it (project refuses a sparsity)."""
    status = cli.main(["simulate", "--mechanism", "hr,cp", "--dist", "unif:5", "--k", "100",
                       "--epsilon", "1", "--n", "2000", "--runs", "1", "--m", "40",
                       "--decoder", "project,sparse_project", "--out", str(tmp_path)])
    assert status == 0, capsys.readouterr().err
    rows = read_csv(tmp_path / "simulate.csv")
    assert {(r["mechanism"], r["decoder"]) for r in rows} == {
        ("HR", "project"), ("HR", "sparse_project"), ("CP", "project"),
        ("CP", "sparse_project")}
