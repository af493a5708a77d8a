"""``ldpdist longitudinal``: the files and errors of the command line beyond the contract
suite's end-to-end round trip (tests/test_longitudinal_contract.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import ldpdist
from ldpdist.cli import main
from ldpdist.longitudinal import LongitudinalGRR, make_secrets
from ldpdist.longitudinal.cli import load_secrets


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["longitudinal", "spec", "lgrr", "--k", "4", "--epsilon-infinity", "2",
                 "--epsilon-1", "1", "-o", "spec.json"]) == 0
    (tmp_path / "values.txt").write_text("0\n1\n2\n3\n1\n")
    assert main(["longitudinal", "secrets", "5", "--seed", "1", "-o", "secrets.txt"]) == 0
    return tmp_path


def _error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err, err
    return err


def test_secrets_files(folder):
    path = folder / "secrets.txt"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # secrets: owner only
    lines = path.read_text().split("\n")
    assert len(lines) == 6 and lines[-1] == "" and all(len(x) == 64 for x in lines[:-1])
    np.testing.assert_array_equal(load_secrets(str(path)), make_secrets(5, seed=1))
    np.save(folder / "secrets.npy", make_secrets(5, seed=1))
    np.testing.assert_array_equal(load_secrets(str(folder / "secrets.npy")),
                                  make_secrets(5, seed=1))
    # the same reports from either file
    for name in ("secrets.txt", "secrets.npy"):
        assert main(["longitudinal", "privatize", "--spec", "spec.json", "values.txt",
                     "--secrets", name, "--collection", "0", "--seed", "2",
                     "-o", f"r-{name}.ldpr"]) == 0
    a = np.asarray(ldpdist.read_reports(folder / "r-secrets.txt.ldpr").reports)
    b = np.asarray(ldpdist.read_reports(folder / "r-secrets.npy.ldpr").reports)
    assert a.tobytes() == b.tobytes()
    # without a seed: from the operating system, different every time
    assert main(["longitudinal", "secrets", "3", "-o", "a.txt"]) == 0
    assert main(["longitudinal", "secrets", "3", "-o", "b.txt"]) == 0
    assert (folder / "a.txt").read_text() != (folder / "b.txt").read_text()


def test_errors_are_one_line(folder, capsys):
    capsys.readouterr()
    privatize = ["longitudinal", "privatize", "--spec", "spec.json", "values.txt",
                 "--secrets", "secrets.txt", "--collection", "0", "-o", "r.ldpr"]
    assert "exists" in _error(capsys, ["longitudinal", "secrets", "5", "-o", "secrets.txt"])
    (folder / "short.txt").write_text((folder / "secrets.txt").read_text().split("\n", 1)[1])
    assert "one secret per user" in _error(capsys, [*privatize[:6], "short.txt",
                                                    *privatize[7:]])
    (folder / "bad.txt").write_text("00ff\n")
    assert "64 hexadecimal digits" in _error(capsys, [*privatize[:6], "bad.txt",
                                                      *privatize[7:]])
    (folder / "big.txt").write_text("0\n1\n2\n4\n1\n")
    assert "[0, 4)" in _error(capsys, [*privatize[:4], "big.txt", *privatize[5:]])
    assert "collection" in _error(capsys, [*privatize[:8], "-1", *privatize[9:]])
    assert main(privatize) == 0
    capsys.readouterr()
    assert "exists" in _error(capsys, privatize)
    assert "also an input" in _error(capsys, [*privatize[:-1], "values.txt", "--force"])
    # a spec of a one-shot mechanism, a spec option that does not apply
    assert main(["spec", "rr", "--k", "4", "--epsilon", "1", "-o", "rr.json"]) == 0
    capsys.readouterr()
    assert "not a longitudinal" in _error(capsys, ["longitudinal", "aggregate", "--spec",
                                                   "rr.json", "r.ldpr", "-o", "s.state"])
    assert "does not apply" in _error(capsys, ["longitudinal", "spec", "lgrr", "--k", "4",
                                               "--epsilon", "1"])
    assert "needs" in _error(capsys, ["longitudinal", "spec", "dbitflip", "--k", "4",
                                      "--epsilon", "1"])
    assert "epsilon_1 must be <" in _error(capsys, ["longitudinal", "spec", "lsue", "--k", "4",
                                                    "--epsilon-infinity", "1",
                                                    "--epsilon-1", "2"])
    # reports of another spec, a corrupt reports file, a file that is neither
    other = LongitudinalGRR(k=4, epsilon_infinity=2.0, epsilon_1=0.5)
    (folder / "other.json").write_text(ldpdist.specs.to_json(other))
    assert "not of" in _error(capsys, ["longitudinal", "aggregate", "--spec", "other.json",
                                       "r.ldpr", "-o", "s.state"])
    data = bytearray((folder / "r.ldpr").read_bytes())
    data[-1] ^= 1
    (folder / "corrupt.ldpr").write_bytes(bytes(data))
    assert "corrupt" in _error(capsys, ["longitudinal", "estimate", "--spec", "spec.json",
                                        "corrupt.ldpr"])
    assert "bad magic" in _error(capsys, ["longitudinal", "estimate", "--spec", "spec.json",
                                          "values.txt"])
    assert "given twice" in _error(capsys, ["longitudinal", "aggregate", "--spec", "spec.json",
                                            "r.ldpr", "./r.ldpr", "-o", "s.state"])
    assert "collection" in _error(capsys, ["longitudinal", "aggregate", "--spec", "spec.json",
                                           "r.ldpr", "--collection", "3", "-o", "s.state"])


def test_aggregate_into_an_existing_state(folder, capsys):
    for t, seed in ((0, "1"), (0, "2")):  # two batches of collection 0 (two client groups)
        assert main(["longitudinal", "privatize", "--spec", "spec.json", "values.txt",
                     "--secrets", "secrets.txt", "--collection", str(t), "--seed", seed,
                     "-o", f"c{t}-{seed}.ldpr"]) == 0
    assert main(["longitudinal", "aggregate", "--spec", "spec.json", "c0-1.ldpr",
                 "-o", "s1.state"]) == 0
    assert main(["longitudinal", "aggregate", "--spec", "spec.json", "s1.state", "c0-2.ldpr",
                 "--collection", "0", "-o", "s2.state"]) == 0
    state = ldpdist.longitudinal.LongitudinalAggregator.from_bytes(
        (folder / "s2.state").read_bytes())
    assert state.n == 10 and state.collection == 0 and len(state.batches) == 2


def test_no_traceback_in_a_real_process(folder):
    result = subprocess.run([sys.executable, "-m", "ldpdist", "longitudinal", "estimate",
                             "--spec", "spec.json", "missing.ldpr"], cwd=folder,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "does not exist" in result.stderr
    helped = subprocess.run([sys.executable, "-m", "ldpdist", "longitudinal", "secrets",
                             "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "keeps it on the device" in " ".join(helped.stdout.split())
