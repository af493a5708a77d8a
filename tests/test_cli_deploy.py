"""The file-based deployment commands: ldpdist spec / privatize / aggregate / estimate.

Every user error is one stderr line and exit status 2; every success prints one stderr line.
The mix-ups the integrity rules exist for are in tests/test_integrity.py."""

from __future__ import annotations

import importlib
import json
import os
import stat
import subprocess
import sys
import types

import numpy as np
import pytest

import ldpdist
from ldpdist import cli


def _experiments_available() -> bool:
    try:
        importlib.import_module("ldpdist.experiments")
        return True
    except ModuleNotFoundError as exc:
        if exc.name != "ldpdist.experiments":
            raise
        return False


HAVE_EXPERIMENTS = _experiments_available()


@pytest.fixture(autouse=True)
def _experiments_stub(monkeypatch):
    """cli.build_parser also registers ldpdist.experiments (written separately); stand in
    for it when it does not exist yet, so these tests depend only on ldpdist.deploy."""
    if not HAVE_EXPERIMENTS:
        stub = types.ModuleType("ldpdist.experiments")
        stub.register = lambda subparsers: None
        monkeypatch.setitem(sys.modules, "ldpdist.experiments", stub)
        monkeypatch.setattr(ldpdist, "experiments", stub, raising=False)


def run(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def ok(capsys, *argv):
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    return out, err


def fails(capsys, command, *argv, match=None):
    """The command exits with 2 and exactly one stderr line ``ldpdist <command>: error: ...``."""
    status, out, err = run(capsys, command, *argv)
    assert status == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ldpdist {command}: error: "), err
    assert "Traceback" not in err
    if match is not None:
        assert match in lines[0], lines[0]
    return lines[0]


def read_estimate(path_or_text, k):
    text = path_or_text.read_text() if hasattr(path_or_text, "read_text") else path_or_text
    lines = text.splitlines()
    assert lines[0] == "value,probability"
    assert len(lines) == k + 1
    values = [int(line.split(",")[0]) for line in lines[1:]]
    assert values == list(range(k))
    return np.array([float(line.split(",")[1]) for line in lines[1:]])


def make_spec(tmp_path, capsys, *argv, name="spec.json"):
    path = tmp_path / name
    ok(capsys, "spec", *argv, "-o", path)
    return path


# -- spec -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, cls", [
    ("rr", ldpdist.RandomizedResponse), ("RAPPOR", ldpdist.RAPPOR),
    ("ss", ldpdist.SubsetSelection), ("Hr", ldpdist.HadamardResponse),
    ("oue", ldpdist.OptimizedUnaryEncoding), ("olh", ldpdist.OptimizedLocalHashing),
    ("HadamardResponse", ldpdist.HadamardResponse), ("randomizedresponse", ldpdist.RandomizedResponse),
    ("tsrappor", ldpdist.TwoStageRAPPOR),
])
def test_spec_names(capsys, name, cls):
    out, _ = ok(capsys, "spec", name, "--k", 12, "--epsilon", 1.5)
    assert ldpdist.from_dict(json.loads(out)) == cls(12, 1.5)


def test_spec_parameters(tmp_path, capsys):
    path = make_spec(tmp_path, capsys, "cp", "--k", 100, "--epsilon", 2, "--m", 20, "--seed", 7,
                     "--matrix", "rademacher", "--regime", "medium")
    mech = ldpdist.from_dict(json.loads(path.read_text()))
    assert mech == ldpdist.CompressivePrivatization(100, 2.0, 20, 7, matrix="rademacher",
                                                    regime="medium")
    out, _ = ok(capsys, "spec", "hr", "--k", 50, "--epsilon", 3, "--blocks", 2)
    assert ldpdist.from_dict(json.loads(out)) == ldpdist.HadamardResponse(50, 3.0, blocks=2)
    out, _ = ok(capsys, "spec", "ss", "--k", 50, "--epsilon", 1, "--d", 5)
    assert ldpdist.from_dict(json.loads(out)) == ldpdist.SubsetSelection(50, 1.0, d=5)
    out, _ = ok(capsys, "spec", "olh", "--k", 50, "--epsilon", 1, "--seed", 9)
    assert ldpdist.from_dict(json.loads(out)) == ldpdist.OptimizedLocalHashing(50, 1.0, seed=9)


def test_spec_of_the_asymmetric_binary_mechanism(capsys):
    """Two budgets instead of --epsilon; k is 2 (--k 2 allowed); "inf" is no constraint and is
    written as the string "inf" in the JSON spec."""
    for extra in ([], ["--k", 2]):
        out, err = ok(capsys, "spec", "abr", "--epsilon-01", 0.5, "--epsilon-10", "inf", *extra)
        spec = json.loads(out)
        assert spec["epsilon_10"] == "inf" and spec["epsilon_01"] == 0.5
        mech = ldpdist.from_dict(spec)
        assert mech == ldpdist.AsymmetricBinaryResponse(0.5, float("inf"))
        assert mech.fingerprint[:16] in err
    out, _ = ok(capsys, "spec", "AsymmetricBinaryResponse", "--epsilon-01", "INF",
                "--epsilon-10", 0)
    assert ldpdist.from_dict(json.loads(out)) == ldpdist.AsymmetricBinaryResponse("inf", 0.0)


@pytest.mark.parametrize("argv, match", [
    (["cp", "--k", 100, "--epsilon", 1], "needs --m and --seed"),
    (["cp", "--k", 100, "--epsilon", 1, "--m", 10], "needs --seed"),
    (["hr", "--k", 100, "--epsilon", 1, "--m", 10], "--m does not apply"),
    (["hr", "--k", 100, "--epsilon", -1], "epsilon"),
    (["hr", "--k", 100, "--epsilon", 0], "epsilon"),
    (["rr", "--k", 1, "--epsilon", 1], "k must be"),
    (["nosuch", "--k", 10, "--epsilon", 1], "unknown mechanism"),
    (["cp", "--k", 100, "--epsilon", 1, "--m", 1, "--seed", 1], "m must be"),
    (["hr", "--epsilon", 1], "needs --k"),
    (["abr", "--epsilon-01", 1], "needs --epsilon-10"),
    (["abr"], "needs --epsilon-01 and --epsilon-10"),
    (["abr", "--epsilon-01", 1, "--epsilon-10", 1, "--k", 3], "k = 2 (fixed)"),
    (["abr", "--epsilon", 1, "--epsilon-01", 1, "--epsilon-10", 1], "--epsilon does not apply"),
    (["abr", "--epsilon-01", -1, "--epsilon-10", 1], "epsilon_01 must be"),
    (["abr", "--epsilon-01", 1, "--epsilon-10", "nan"], "epsilon_10 must be"),
    (["abr", "--epsilon-01", 1, "--epsilon-10", 701], "too large"),
    (["abr", "--epsilon-01", 1, "--epsilon-10", 1, "--m", 3], "--m does not apply"),
    (["rr", "--k", 5, "--epsilon", 1, "--epsilon-01", 1], "--epsilon-01 does not apply"),
    (["abr", "--epsilon-01", "1e400", "--epsilon-10", 1], "write 'inf'"),
    (["abr", "--epsilon-01", "x", "--epsilon-10", 1], "a budget is a number"),
])
def test_spec_errors(capsys, argv, match):
    fails(capsys, "spec", *argv, match=match)


def test_entry_point(tmp_path):
    """``python -m ldpdist spec ...`` runs the command line (the package's __main__)."""
    if HAVE_EXPERIMENTS:
        argv = [sys.executable, "-m", "ldpdist"]
    else:  # stand in for the experiments module, then run ldpdist/__main__.py as -m does
        argv = [sys.executable, "-c",
                "import sys, types, runpy; m = types.ModuleType('ldpdist.experiments'); "
                "m.register = lambda s: None; sys.modules['ldpdist.experiments'] = m; "
                "sys.argv[0] = 'ldpdist'; runpy.run_module('ldpdist', run_name='__main__')"]
    done = subprocess.run(argv + ["spec", "hr", "--k", "16", "--epsilon", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ldpdist.from_dict(json.loads(done.stdout)) == ldpdist.HadamardResponse(16, 1.0)
    done = subprocess.run(argv + ["spec", "cp", "--k", "16", "--epsilon", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["ldpdist spec: error: CompressivePrivatization needs "
                                        "--m and --seed"]


# -- the full flow against the Python API -----------------------------------------------------


FLOWS = [
    # (spec argv, estimate argv, API estimate kwargs)
    (["hr", "--k", 40, "--epsilon", 1.0], ["--decoder", "project"], {"decoder": "project"}),
    (["rappor", "--k", 30, "--epsilon", 2.0], ["--decoder", "ibu"], {"decoder": "ibu"}),
    (["cp", "--k", 128, "--epsilon", 2.0, "--m", 32, "--seed", 5],
     ["--decoder", "project", "--sparsity", 3], {"decoder": "project", "sparsity": 3}),
    (["cp", "--k", 128, "--epsilon", 0.5, "--m", 32, "--seed", 5],
     ["--decoder", "raw", "--sparsity", 2, "--model", "paper"],
     {"decoder": "raw", "sparsity": 2, "model": "paper"}),
    (["ss", "--k", 25, "--epsilon", 1.0], ["--decoder", "normalize"], {"decoder": "normalize"}),
    (["olh", "--k", 25, "--epsilon", 1.0, "--seed", 3], ["--decoder", "project"], {"decoder": "project"}),
    (["tsrappor", "--k", 40, "--epsilon", 2.0], ["--decoder", "two_stage_project", "--sparsity", 3],
     {"decoder": "two_stage_project", "sparsity": 3}),
    (["abr", "--epsilon-01", 0.5, "--epsilon-10", "inf"], ["--decoder", "ibu"], {"decoder": "ibu"}),
]


@pytest.mark.parametrize("spec_argv, estimate_argv, api_kwargs", FLOWS,
                         ids=["hr", "rappor", "cp", "cp-paper", "ss", "olh", "tsrappor", "abr"])
def test_flow_matches_api(tmp_path, capsys, spec_argv, estimate_argv, api_kwargs):
    spec = make_spec(tmp_path, capsys, *spec_argv)
    mech = ldpdist.from_dict(json.loads(spec.read_text()))
    k = mech.k
    rng = np.random.default_rng(0)
    support = np.array([1, k // 3, k - 2])
    values1 = rng.choice(support, size=3000, p=[0.5, 0.3, 0.2])
    values2 = rng.choice(support, size=2000, p=[0.5, 0.3, 0.2])
    np.save(tmp_path / "v1.npy", values1)
    (tmp_path / "v2.csv").write_text("\n".join(map(str, values2)) + "\n")

    ok(capsys, "privatize", "--spec", spec, tmp_path / "v1.npy", "--seed", 11, "-o", tmp_path / "r1.ldpr")
    ok(capsys, "privatize", "--spec", spec, tmp_path / "v2.csv", "--seed", 12, "-o", tmp_path / "r2.ldpr")
    reports1 = mech.privatize(values1, seed=11)
    reports2 = mech.privatize(values2, seed=12)
    batches = []
    for path, expected in ((tmp_path / "r1.ldpr", reports1), (tmp_path / "r2.ldpr", reports2)):
        batch = ldpdist.read_reports(path, expect=mech)
        assert batch.fingerprint == mech.fingerprint and batch.spec == mech.to_dict()
        got = batch.reports
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got, expected)
        batches.append(batch)
    if mech.report_kind == "bits":
        assert reports1.ndim == 2 and reports1.dtype == np.uint8
    else:
        assert reports1.ndim == 1

    ok(capsys, "aggregate", "--spec", spec, tmp_path / "r1.ldpr", "-o", tmp_path / "a.ldps")
    ok(capsys, "aggregate", "--spec", spec, tmp_path / "r2.ldpr", "-o", tmp_path / "b.ldps")
    ok(capsys, "aggregate", "--spec", spec, tmp_path / "a.ldps", tmp_path / "b.ldps",
       "-o", tmp_path / "all.ldps")
    ok(capsys, "estimate", "--spec", spec, tmp_path / "all.ldps", *estimate_argv,
       "-o", tmp_path / "estimate.csv")

    api = mech.aggregator().add(batches[0])
    api.merge(mech.aggregator().add(batches[1]))
    state = ldpdist.Aggregator.from_bytes((tmp_path / "all.ldps").read_bytes())
    assert np.array_equal(state.counts, api.counts) and state.n == api.n == 5000
    assert state.batches == api.batches == {b.batch_id for b in batches}
    expected = api.estimate(**api_kwargs)
    got = read_estimate(tmp_path / "estimate.csv", k)
    assert np.array_equal(got, expected)
    assert np.array_equal(expected, mech.aggregator().add(reports1).add(reports2).estimate(**api_kwargs))

    # Same answer from one aggregate of both report files, and from stdout.
    ok(capsys, "aggregate", "--spec", spec, tmp_path / "r1.ldpr", tmp_path / "r2.ldpr",
       "-o", tmp_path / "one.ldps")
    assert (tmp_path / "one.ldps").read_bytes() == api.to_bytes()
    out, _ = ok(capsys, "estimate", "--spec", spec, tmp_path / "one.ldps", *estimate_argv)
    assert np.array_equal(read_estimate(out, k), expected)

    # Estimating straight from a reports file equals the API's estimate of those reports.
    out, _ = ok(capsys, "estimate", "--spec", spec, tmp_path / "r1.ldpr", *estimate_argv)
    assert np.array_equal(read_estimate(out, k), mech.estimate(reports1, **api_kwargs))


def test_values_formats_give_identical_reports(tmp_path, capsys):
    spec = make_spec(tmp_path, capsys, "hr", "--k", 20, "--epsilon", 1)
    values = np.random.default_rng(1).integers(0, 20, size=101)
    np.save(tmp_path / "v.npy", values.astype(np.uint16))
    # One integer per line; blank lines and surrounding spaces are ignored; CRLF and a BOM too.
    (tmp_path / "v.txt").write_text("\n\n".join(map(str, values)) + "\n\n   \n")
    (tmp_path / "v.csv").write_bytes(
        ("\ufeff" + "\r\n".join(f"  {v} " for v in values) + "\r\n").encode())
    outputs = []
    for name in ("v.npy", "v.txt", "v.csv"):
        out = tmp_path / (name + ".ldpr")
        ok(capsys, "privatize", "--spec", spec, tmp_path / name, "--seed", 99, "-o", out)
        outputs.append(ldpdist.read_reports(out).reports)
    assert np.array_equal(outputs[0], outputs[1]) and np.array_equal(outputs[0], outputs[2])
    mech = ldpdist.from_dict(json.loads(spec.read_text()))
    assert np.array_equal(outputs[0], mech.privatize(values, seed=99))


def test_privatize_without_seed(tmp_path, capsys):
    spec = make_spec(tmp_path, capsys, "rappor", "--k", 10, "--epsilon", 1)
    (tmp_path / "v.txt").write_text("1\n2\n3\n4\n")
    ok(capsys, "privatize", "--spec", spec, tmp_path / "v.txt", "-o", tmp_path / "r.ldpr")
    ok(capsys, "privatize", "--spec", spec, tmp_path / "v.txt", "-o", tmp_path / "s.ldpr")
    first, second = (ldpdist.read_reports(tmp_path / n) for n in ("r.ldpr", "s.ldpr"))
    assert first.reports.shape == (4, 2) and first.reports.dtype == np.uint8
    assert first.batch_id != second.batch_id  # two runs are two batches, never duplicates


# -- --on-invalid drop and --raw-reports ------------------------------------------------------


def test_on_invalid_drop_with_raw_reports(tmp_path, capsys):
    spec = make_spec(tmp_path, capsys, "hr", "--k", 10, "--epsilon", 1)
    mech = ldpdist.from_dict(json.loads(spec.read_text()))
    reports = mech.privatize(np.arange(10).repeat(10), seed=1).astype(np.int64)
    reports[[3, 50, 77]] = [-1, mech.output_size, 10**9]
    np.save(tmp_path / "r.npy", reports)

    fails(capsys, "aggregate", "--spec", spec, tmp_path / "r.npy", "-o", tmp_path / "a.ldps",
          match="pass --raw-reports")
    fails(capsys, "aggregate", "--spec", spec, tmp_path / "r.npy", "--raw-reports",
          "-o", tmp_path / "a.ldps", match="--on-invalid drop")
    assert not (tmp_path / "a.ldps").exists()

    out, err = ok(capsys, "aggregate", "--spec", spec, tmp_path / "r.npy", "--raw-reports",
                  "--on-invalid", "drop", "-o", tmp_path / "a.ldps")
    assert len(err.splitlines()) == 1 and "n = 97 reports" in err and "3 invalid" in err
    state = ldpdist.Aggregator.from_bytes((tmp_path / "a.ldps").read_bytes())
    assert state.n == 97 and state.dropped == 3
    assert state.batch_labels() == {ldpdist.reports.raw_batch_id((tmp_path / "r.npy").read_bytes()): "r.npy"}
    expected = mech.aggregator().add(np.delete(reports, [3, 50, 77]).astype(np.uint32))
    assert np.array_equal(state.counts, expected.counts)

    out, err = ok(capsys, "estimate", "--spec", spec, tmp_path / "r.npy", "--raw-reports",
                  "--on-invalid", "drop")
    assert "3 invalid" in err and len(err.splitlines()) == 1
    assert np.array_equal(read_estimate(out, 10), expected.estimate())


# -- what a careless operator does ------------------------------------------------------------


def test_values_files_hold_one_integer_per_line(tmp_path, capsys):
    spec = make_spec(tmp_path, capsys, "hr", "--k", 20, "--epsilon", 1)
    cases = {
        "two.csv": ("1,2\n3,4\n", "line 1: '1,2' holds 2 fields"),
        "semi.csv": ("1;2\n", "line 1: '1;2' holds 2 fields"),
        "spaces.txt": ("1 2 3\n4\n", "line 1: '1 2 3' holds 3 fields"),
        "tabs.tsv": ("1\t2\n", "holds 2 fields"),
        "trailing.csv": ("1,\n", "line 1: '1,' is not an integer"),
        "header.csv": ("value\n1\n", "line 1: 'value' is not an integer"),
        "float.csv": ("1\n2.5\n", "line 2: '2.5' is not an integer"),
        "empty.txt": ("", "holds no values"),
        "blank.txt": ("\n  \n\n", "holds no values"),
    }
    for name, (text, match) in cases.items():
        (tmp_path / name).write_text(text)
        fails(capsys, "privatize", "--spec", spec, tmp_path / name, "-o", tmp_path / "r.ldpr",
              match=match)
    np.save(tmp_path / "empty.npy", np.array([], dtype=np.int64))
    fails(capsys, "privatize", "--spec", spec, tmp_path / "empty.npy", "-o", tmp_path / "r.ldpr",
          match="holds no values")
    assert not (tmp_path / "r.ldpr").exists()


def test_dash_is_standard_output_for_text_and_refused_for_binary(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out, err = ok(capsys, "spec", "hr", "--k", 8, "--epsilon", 1, "-o", "-")
    assert json.loads(out)["k"] == 8 and "standard output" in err
    (tmp_path / "spec.json").write_text(out)
    (tmp_path / "v.txt").write_text("1\n2\n")
    fails(capsys, "privatize", "--spec", "spec.json", "v.txt", "-o", "-", match="standard output")
    ok(capsys, "privatize", "--spec", "spec.json", "v.txt", "-o", "r.ldpr")
    fails(capsys, "aggregate", "--spec", "spec.json", "r.ldpr", "-o", "-", match="standard output")
    out, err = ok(capsys, "estimate", "--spec", "spec.json", "r.ldpr", "-o", "-")
    assert read_estimate(out, 8).shape == (8,)
    assert not (tmp_path / "-").exists()


def test_outputs_have_ordinary_permissions(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        spec = make_spec(tmp_path, capsys, "hr", "--k", 8, "--epsilon", 1)
        (tmp_path / "v.txt").write_text("1\n")
        ok(capsys, "privatize", "--spec", spec, tmp_path / "v.txt", "-o", tmp_path / "r.ldpr")
        ok(capsys, "aggregate", "--spec", spec, tmp_path / "r.ldpr", "-o", tmp_path / "a.ldps")
        ok(capsys, "estimate", "--spec", spec, tmp_path / "a.ldps", "-o", tmp_path / "e.csv")
        for name in ("spec.json", "r.ldpr", "a.ldps", "e.csv"):
            assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644, name
        os.umask(0o077)
        make_spec(tmp_path, capsys, "hr", "--k", 8, "--epsilon", 1, name="private.json")
        assert stat.S_IMODE(os.stat(tmp_path / "private.json").st_mode) == 0o600
    finally:
        os.umask(old)


def test_every_success_prints_one_line(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    _, err = ok(capsys, "spec", "ss", "--k", 10, "--epsilon", 1, "-o", spec)
    assert err.count("\n") == 1 and "SubsetSelection" in err and "fingerprint" in err
    (tmp_path / "v.txt").write_text("1\n2\n3\n")
    _, err = ok(capsys, "privatize", "--spec", spec, tmp_path / "v.txt", "-o", tmp_path / "r.ldpr")
    assert err.count("\n") == 1 and "wrote 3 reports" in err and "r.ldpr" in err
    _, err = ok(capsys, "aggregate", "--spec", spec, tmp_path / "r.ldpr", "-o", tmp_path / "a.ldps")
    assert err.count("\n") == 1 and "n = 3 reports in 1 batch" in err
    _, err = ok(capsys, "estimate", "--spec", spec, tmp_path / "a.ldps", "-o", tmp_path / "e.csv")
    assert err.count("\n") == 1 and "n = 3 reports" in err and "e.csv" in err


def test_help_texts(capsys):
    parser = cli.build_parser()
    for command, option, needle in (("estimate", "--decoder", "simplex"),
                                     ("simulate", "--out", "default ldpdist-results"),
                                     ("aggregate", "--raw-reports", "another system")):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert option in text and needle in text, (command, text)


def test_simulate_refuses_options_of_other_mechanisms(tmp_path, capsys):
    if not HAVE_EXPERIMENTS:
        pytest.skip("ldpdist.experiments is not available")
    common = ["--dist", "unif:3", "--k", 16, "--epsilon", 1, "--n", 100, "--runs", 1,
              "--out", tmp_path]
    fails(capsys, "simulate", "--mechanism", "hr", "--m", 50, *common, match="--m applies only to cp")
    fails(capsys, "simulate", "--mechanism", "rr", "--sparsity", 2, *common,
          match="--sparsity applies only to cp")


# -- errors: exit 2 and one line --------------------------------------------------------------


@pytest.fixture
def setup(tmp_path, capsys):
    """Specs, values, reports and states of an HR, a RAPPOR and a second HR deployment."""
    d = types.SimpleNamespace(path=tmp_path)
    d.hr = make_spec(tmp_path, capsys, "hr", "--k", 20, "--epsilon", 1, name="hr.json")
    d.hr2 = make_spec(tmp_path, capsys, "hr", "--k", 20, "--epsilon", 2, name="hr2.json")
    d.rappor = make_spec(tmp_path, capsys, "rappor", "--k", 20, "--epsilon", 1, name="rappor.json")
    (tmp_path / "v.txt").write_text("1\n2\n3\n19\n")
    for name in ("hr", "hr2", "rappor"):
        ok(capsys, "privatize", "--spec", getattr(d, name), tmp_path / "v.txt", "--seed", 1,
           "-o", tmp_path / f"{name}.ldpr")
        ok(capsys, "aggregate", "--spec", getattr(d, name), tmp_path / f"{name}.ldpr",
           "-o", tmp_path / f"{name}.ldps")
    return d


def test_error_missing_files(setup, capsys):
    d = setup
    fails(capsys, "privatize", "--spec", d.hr, d.path / "nope.csv", "-o", d.path / "r.ldpr",
          match="does not exist")
    fails(capsys, "privatize", "--spec", d.path / "nope.json", d.path / "v.txt", "-o", d.path / "r.ldpr",
          match="does not exist")
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "hr.ldpr", d.path / "nope.ldpr",
          "-o", d.path / "x.ldps", match="does not exist")
    fails(capsys, "estimate", "--spec", d.hr, d.path / "nope.ldps", match="does not exist")
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "hr.ldpr", "-o", d.path / "no" / "x.ldps",
          match="does not exist")
    assert not (d.path / "r.ldpr").exists() and not (d.path / "x.ldps").exists()


def test_error_bad_values(setup, capsys):
    d = setup
    np.save(d.path / "f.npy", np.array([1.0, 2.0]))
    fails(capsys, "privatize", "--spec", d.hr, d.path / "f.npy", "-o", d.path / "r.ldpr",
          match="dtype float64")
    np.save(d.path / "o.npy", np.array([1, 20, 3]))
    fails(capsys, "privatize", "--spec", d.hr, d.path / "o.npy", "-o", d.path / "r.ldpr",
          match="values[1]")
    (d.path / "o.txt").write_text("1\n\n2\n-1\n")
    fails(capsys, "privatize", "--spec", d.hr, d.path / "o.txt", "-o", d.path / "r.ldpr",
          match="the first is -1 at line 4")
    (d.path / "big.txt").write_text("1\n" + "9" * 30 + "\n")
    fails(capsys, "privatize", "--spec", d.hr, d.path / "big.txt", "-o", d.path / "r.ldpr",
          match="line 2")
    # once: int()'s "Exceeds the limit (4300 digits) for integer string conversion" (fuzz)
    (d.path / "huge.txt").write_text("1\n" + "9" * 5000 + "\n")
    line = fails(capsys, "privatize", "--spec", d.hr, d.path / "huge.txt", "-o",
                 d.path / "r.ldpr", match="line 2: 9999")
    assert "out of range" in line and len(line) < 200, line
    (d.path / "zeros.txt").write_text("0" * 30 + "7\n")
    ok(capsys, "privatize", "--spec", d.hr, d.path / "zeros.txt", "-o", d.path / "z.ldpr")
    np.save(d.path / "2d.npy", np.array([[1, 2]]))
    fails(capsys, "privatize", "--spec", d.hr, d.path / "2d.npy", "-o", d.path / "r.ldpr",
          match="1-D")
    (d.path / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    fails(capsys, "privatize", "--spec", d.hr, d.path / "bad.npy", "-o", d.path / "r.ldpr",
          match="not a readable .npy")
    np.save(d.path / "obj.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    fails(capsys, "privatize", "--spec", d.hr, d.path / "obj.npy", "-o", d.path / "r.ldpr",
          match="not a readable .npy")
    (d.path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    fails(capsys, "privatize", "--spec", d.hr, d.path / "bin.txt", "-o", d.path / "r.ldpr")
    fails(capsys, "privatize", "--spec", d.hr, d.path / "v.txt", "--seed", -1, "-o", d.path / "r.ldpr")
    assert not (d.path / "r.ldpr").exists()


def _edit_npy_header(data, old, new):
    """A .npy file with its header dict edited (the header length kept)."""
    end = 10 + int.from_bytes(data[8:10], "little")
    header = data[10:end].replace(old, new, 1).rstrip(b" \n")
    assert len(header) < end - 10
    return data[:10] + header.ljust(end - 11) + b"\n" + data[end:]


@pytest.mark.parametrize("old, new, values_error, raw_error", [
    # np.load raised tokenize.TokenError: a traceback
    (b"{", b"{{", "not a readable .npy file: its header is not a well-formed dictionary",
     "its header is not a well-formed dictionary"),
    # np.load raised OverflowError: "Python int too large to convert to C long"
    (b"'shape': (", b"'shape': (99999999999999999999, ", "is truncated: its .npy header",
     "its header announces a dimension too large"),
    # np.load allocated what the header announces before reading the data: numpy's
    # "Unable to allocate 128. GiB" for values (raw reports are memory-mapped)
    (b"'shape': (3,)", b"'shape': (17179869184,)",
     "is truncated: its .npy header announces 137438953472 bytes of data, the file holds 24",
     "not a readable .npy file"),
])
def test_error_npy_files_with_corrupt_headers(setup, capsys, old, new, values_error,
                                              raw_error):
    """Found by tests/fuzz: numpy's header parser lets these through np.load."""
    d = setup
    np.save(d.path / "v.npy", np.array([1, 2, 3]))
    (d.path / "v.npy").write_bytes(_edit_npy_header((d.path / "v.npy").read_bytes(), old, new))
    fails(capsys, "privatize", "--spec", d.hr, d.path / "v.npy", "-o", d.path / "r.ldpr",
          match=values_error)
    np.save(d.path / "raw.npy", np.array([1, 2, 3], np.uint8))
    (d.path / "raw.npy").write_bytes(_edit_npy_header((d.path / "raw.npy").read_bytes(), old,
                                                      new))
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "raw.npy", "--raw-reports", "-o",
          d.path / "x.ldps", match=raw_error)
    if HAVE_EXPERIMENTS and old == b"{":
        from ldpdist.experiments import load_distribution

        with pytest.raises(ValueError, match="cannot read distribution file .* well-formed"):
            load_distribution(str(d.path / "v.npy"))


def test_error_bad_specs(setup, capsys):
    d = setup
    spec = json.loads(d.hr.read_text())
    (d.path / "neg.json").write_text(json.dumps({**spec, "epsilon": -1.0}))
    for command, argv in (("privatize", [d.path / "v.txt", "-o", d.path / "r.ldpr"]),
                          ("aggregate", [d.path / "hr.ldpr", "-o", d.path / "x.ldps"]),
                          ("estimate", [d.path / "hr.ldps"])):
        fails(capsys, command, "--spec", d.path / "neg.json", *argv, match="epsilon must be > 0")
    (d.path / "broken.json").write_text("{\"mechanism\": ")
    fails(capsys, "estimate", "--spec", d.path / "broken.json", d.path / "hr.ldps",
          match="not valid JSON")
    (d.path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    fails(capsys, "estimate", "--spec", d.path / "deep.json", d.path / "hr.ldps",
          match="nests JSON deeper")
    (d.path / "unknown.json").write_text(json.dumps({**spec, "mechanism": "Nope"}))
    fails(capsys, "estimate", "--spec", d.path / "unknown.json", d.path / "hr.ldps",
          match="unknown mechanism")
    (d.path / "list.json").write_text("[1, 2]")
    fails(capsys, "estimate", "--spec", d.path / "list.json", d.path / "hr.ldps")
    (d.path / "extra.json").write_text(json.dumps({**spec, "bogus": 1}))
    fails(capsys, "estimate", "--spec", d.path / "extra.json", d.path / "hr.ldps", match="bogus")
    (d.path / "huge.json").write_text(json.dumps({**spec, "blocks": 2**64}))
    fails(capsys, "estimate", "--spec", d.path / "huge.json", d.path / "hr.ldps", match="blocks")


def test_error_states(setup, capsys):
    d = setup
    blob = (d.path / "hr.ldps").read_bytes()
    corrupt = {"truncated.ldps": blob[:-5], "header.ldps": blob[:20],
               "counts.ldps": blob[:-40] + (10**6).to_bytes(8, "little") + blob[-32:]}
    for name, data in corrupt.items():
        (d.path / name).write_bytes(data)
        fails(capsys, "estimate", "--spec", d.hr, d.path / name, match="is corrupt")
        fails(capsys, "aggregate", "--spec", d.hr, d.path / name, "-o", d.path / "x.ldps",
              match="is corrupt")
    (d.path / "junk.bin").write_bytes(b"hello world")
    fails(capsys, "estimate", "--spec", d.hr, d.path / "junk.bin", match="neither")
    fails(capsys, "estimate", "--spec", d.hr, d.path / "hr2.ldps",
          match="was aggregated for HadamardResponse(k=20, epsilon=2.0), "
                "not HadamardResponse(k=20, epsilon=1.0)")
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "hr.ldps", d.path / "rappor.ldps",
          "-o", d.path / "x.ldps", match="was aggregated for RAPPOR")
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "hr.ldps", d.path / "hr.ldps",
          "-o", d.path / "x.ldps", match="given twice")
    assert not (d.path / "x.ldps").exists()


def test_error_reports(setup, capsys):
    d = setup
    # Reports files of another spec, every way round.
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "rappor.ldpr", "-o", d.path / "x.ldps",
          match="holds reports of RAPPOR")
    fails(capsys, "aggregate", "--spec", d.rappor, d.path / "hr.ldpr", "-o", d.path / "x.ldps",
          match="holds reports of HadamardResponse")
    fails(capsys, "estimate", "--spec", d.hr2, d.path / "hr.ldpr", match="epsilon: 1.0 vs 2.0")
    # Raw arrays that do not fit (with --raw-reports).
    for name, array, match in (
            ("2d.npy", np.zeros((4, 2), dtype=np.uint32), "shape (4, 2)"),
            ("f.npy", np.zeros(4), "dtype float64"),
            ("big.npy", np.array([1, 2, 10**6]), "reports[2] = 1000000")):
        np.save(d.path / name, array)
        fails(capsys, "aggregate", "--spec", d.hr, d.path / name, "--raw-reports",
              "-o", d.path / "x.ldps", match=match)
    np.save(d.path / "wide.npy", np.zeros((4, 5), dtype=np.uint8))
    fails(capsys, "aggregate", "--spec", d.rappor, d.path / "wide.npy", "--raw-reports",
          "-o", d.path / "x.ldps", match="shape (4, 5)")
    (d.path / "cut.ldpr").write_bytes((d.path / "hr.ldpr").read_bytes()[:-3])
    fails(capsys, "aggregate", "--spec", d.hr, d.path / "cut.ldpr", "-o", d.path / "x.ldps",
          match="truncated")
    assert not (d.path / "x.ldps").exists()


def test_error_estimate_options(setup, capsys):
    d = setup
    fails(capsys, "estimate", "--spec", d.hr, d.path / "hr.ldps", "--model", "paper",
          match="--model applies only")
    fails(capsys, "estimate", "--spec", d.hr, d.path / "hr.ldps", "--decoder", "two_stage",
          match="decoder must be one of")
    fails(capsys, "estimate", "--spec", d.hr, d.path / "hr.ldps", "--decoder", "sparse_project",
          "--sparsity", 0)
    empty = ldpdist.from_dict(json.loads(d.hr.read_text())).aggregator().to_bytes()
    (d.path / "empty.ldps").write_bytes(empty)
    fails(capsys, "estimate", "--spec", d.hr, d.path / "empty.ldps", match="no reports")
