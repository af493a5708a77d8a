"""The ``ldpdist`` commands never overwrite a file silently.

An output that is one of the command's inputs (whatever the spelling of its path: ``./x``,
``a/../x``, a symbolic or hard link) is refused, even with ``--force``; an existing output is
refused unless ``--force`` is given (as gzip and zstd do). A refused command exits 2 and
leaves every file byte for byte as it was. Writes stay atomic (temporary file + rename)."""

from __future__ import annotations

import os

import pytest

from ldpdist import cli, files


def run(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def ok(capsys, *argv):
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    return out, err


def refused(capsys, *argv, match):
    """The command exits 2 with one ``error:`` line containing ``match``."""
    status, out, err = run(capsys, *argv)
    assert status == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ldpdist {argv[0]}: error: "), err
    assert match in lines[0], lines[0]
    return lines[0]


def snapshot(folder):
    """Every file of ``folder`` (names and bytes): what a refused command must not change."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                out[name] = handle.read()
    return out


@pytest.fixture
def deployment(tmp_path, capsys, monkeypatch):
    """In tmp_path: spec.json, values.txt, r1.ldpr, r2.ldpr, a.ldps."""
    monkeypatch.chdir(tmp_path)
    ok(capsys, "spec", "hr", "--k", 16, "--epsilon", 1, "-o", "spec.json")
    (tmp_path / "values.txt").write_text("1\n2\n3\n15\n")
    ok(capsys, "privatize", "--spec", "spec.json", "values.txt", "--seed", 1, "-o", "r1.ldpr")
    ok(capsys, "privatize", "--spec", "spec.json", "values.txt", "--seed", 2, "-o", "r2.ldpr")
    ok(capsys, "aggregate", "--spec", "spec.json", "r1.ldpr", "-o", "a.ldps")
    return tmp_path


# -- an input as the output is refused, even with --force -----------------------------------


@pytest.mark.parametrize("force", [[], ["--force"]])
@pytest.mark.parametrize("argv, victim", [
    (["aggregate", "--spec", "spec.json", "r2.ldpr", "-o", "r2.ldpr"], "r2.ldpr"),
    (["aggregate", "--spec", "spec.json", "r1.ldpr", "r2.ldpr", "-o", "r1.ldpr"], "r1.ldpr"),
    (["aggregate", "--spec", "spec.json", "a.ldps", "r2.ldpr", "-o", "a.ldps"], "a.ldps"),
    (["aggregate", "--spec", "a.ldps", "r2.ldpr", "-o", "a.ldps"], "a.ldps"),
    (["estimate", "--spec", "spec.json", "a.ldps", "-o", "spec.json"], "spec.json"),
    (["estimate", "--spec", "spec.json", "a.ldps", "-o", "a.ldps"], "a.ldps"),
    (["privatize", "--spec", "spec.json", "values.txt", "-o", "values.txt"], "values.txt"),
    (["privatize", "--spec", "spec.json", "values.txt", "-o", "spec.json"], "spec.json"),
])
def test_an_input_is_never_the_output(deployment, capsys, argv, victim, force):
    before = snapshot(deployment)
    line = refused(capsys, *argv, *force, match="is also an input")
    assert repr(victim) in line
    assert snapshot(deployment) == before


def test_spec_refuses_its_input_files_as_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sensitive.txt").write_text("1\n5\n")
    (tmp_path / "labels.txt").write_text("0\n0\n1\n1\n")
    before = snapshot(tmp_path)
    for force in ([], ["--force"]):
        refused(capsys, "spec", "hlhr", "--k", 8, "--epsilon", 1, "--sensitive-file",
                "sensitive.txt", "-o", "sensitive.txt", *force, match="is also an input")
        refused(capsys, "spec", "bhr", "--epsilon", 1, "--block-labels", "labels.txt",
                "-o", "./labels.txt", *force, match="is also an input")
    assert snapshot(tmp_path) == before


# -- other spellings of the same file ---------------------------------------------------------


def test_same_file_under_another_spelling(deployment, capsys):
    (deployment / "sub").mkdir()
    os.symlink("r2.ldpr", deployment / "link.ldpr")
    os.link(deployment / "r2.ldpr", deployment / "hard.ldpr")
    before = snapshot(deployment)
    absolute = str(deployment / "r2.ldpr")
    for output in ("./r2.ldpr", "sub/../r2.ldpr", absolute, "link.ldpr", "hard.ldpr",
                   str(deployment / "sub" / ".." / "link.ldpr")):
        for force in ([], ["--force"]):
            refused(capsys, "aggregate", "--spec", "spec.json", "r2.ldpr", "-o", output, *force,
                    match="is also an input")
    # the input given through the link, the output by its name
    refused(capsys, "aggregate", "--spec", "spec.json", "link.ldpr", "-o", "r2.ldpr", "--force",
            match="is also an input")
    assert snapshot(deployment) == before
    assert os.path.islink(deployment / "link.ldpr")


# -- an existing output needs --force ---------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["spec", "rr", "--k", 4, "--epsilon", 1],
    ["privatize", "--spec", "spec.json", "values.txt"],
    ["aggregate", "--spec", "spec.json", "r1.ldpr", "r2.ldpr"],
    ["estimate", "--spec", "spec.json", "a.ldps"],
])
def test_an_existing_output_needs_force(deployment, capsys, argv):
    precious = deployment / "precious.csv"
    precious.write_bytes(b"name,value\nmine,1\n")
    before = snapshot(deployment)
    line = refused(capsys, *argv, "-o", "precious.csv", match="output exists: 'precious.csv'")
    assert "--force" in line
    assert snapshot(deployment) == before
    _, err = ok(capsys, *argv, "-o", "precious.csv", "--force")
    assert precious.read_bytes() != b"name,value\nmine,1\n"
    assert "precious.csv" in err
    # a new name needs no --force; and nothing is left behind by the atomic write
    ok(capsys, *argv, "-o", "fresh.out")
    assert not [name for name in os.listdir(deployment) if name.startswith(".ldpdist-")]


def test_force_writes_through_the_same_atomic_rename(deployment, capsys):
    """--force replaces the file by a new one (a new inode): a reader holding the old file
    open keeps reading the old contents, never a half-written file."""
    old = (deployment / "e.csv")
    old.write_text("old\n")
    inode = os.stat(old).st_ino
    with open(old) as handle:
        ok(capsys, "estimate", "--spec", "spec.json", "a.ldps", "-o", "e.csv", "--force")
        assert handle.read() == "old\n"
    assert os.stat(old).st_ino != inode
    assert old.read_text().startswith("value,probability\n")


def test_standard_output_and_dangling_names(deployment, capsys):
    # '-' is standard output: never a file, never "existing"
    (deployment / "-").write_text("keep\n")
    out, _ = ok(capsys, "estimate", "--spec", "spec.json", "a.ldps", "-o", "-")
    assert out.startswith("value,probability")
    assert (deployment / "-").read_text() == "keep\n"
    # a dangling symbolic link is an existing name: refused without --force
    os.symlink("nowhere.csv", deployment / "dangling.csv")
    refused(capsys, "estimate", "--spec", "spec.json", "a.ldps", "-o", "dangling.csv",
            match="output exists")
    assert os.path.islink(deployment / "dangling.csv")


def test_outputs_that_are_not_regular_files(deployment, capsys):
    (deployment / "folder").mkdir()
    os.mkfifo(deployment / "pipe")
    for force in ([], ["--force"]):
        refused(capsys, "estimate", "--spec", "spec.json", "a.ldps", "-o", "folder", *force,
                match="is a directory")
        refused(capsys, "aggregate", "--spec", "spec.json", "r1.ldpr", "-o", "pipe", *force,
                match="not a regular file")
    assert (deployment / "folder").is_dir() and not os.listdir(deployment / "folder")
    assert os.path.exists(deployment / "pipe") and not os.path.isfile(deployment / "pipe")


def test_refusal_comes_before_the_work(deployment, capsys):
    """The output is checked before any input is read: a refused command does not first
    spend the time of the aggregation (here an unreadable input would otherwise be named)."""
    (deployment / "out.ldps").write_bytes(b"x")
    refused(capsys, "aggregate", "--spec", "spec.json", "missing.ldpr", "-o", "out.ldps",
            match="output exists")


def test_the_writer_does_not_clobber_a_file_that_appears_meanwhile(tmp_path):
    """Without overwrite the final rename cannot replace a file created after the check
    (the file is linked into place, which fails on an existing name)."""
    path = tmp_path / "out.bin"
    files.write_atomic(path, b"first", overwrite=False)
    assert path.read_bytes() == b"first"
    with pytest.raises(FileExistsError, match="output exists"):
        files.write_atomic(path, b"second", overwrite=False)
    assert path.read_bytes() == b"first"
    files.write_atomic(path, b"third")  # the library default replaces (atomically)
    assert path.read_bytes() == b"third"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_check_output_directly(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("a")
    files.check_output(tmp_path / "new.txt", [a])  # fine
    files.check_output("-", [a])  # standard output
    with pytest.raises(FileExistsError, match="use --force to overwrite"):
        files.check_output(a, [])
    files.check_output(a, [], force=True)
    with pytest.raises(ValueError, match="is also an input"):
        files.check_output(tmp_path / "." / "a.txt", [a], force=True)
    with pytest.raises(ValueError, match="is also an input"):
        files.check_output(a, [tmp_path / "missing", str(a)], force=True)


def test_a_results_directory_is_reused(tmp_path, capsys):
    """``reproduce`` and ``simulate`` write into a results directory (``--out``), which is
    reused: running twice into it replaces that run's own files (``<name>.csv`` and
    ``<name>.png``, no --force needed, as the README's ``ldpdist reproduce cp-figure2 --quick
    --out results`` run twice) and leaves other files alone; an --out that is a file is
    refused."""
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    argv = ["simulate", "--mechanism", "rr", "--dist", "unif:3", "--k", 16, "--epsilon", 1,
            "--n", 100, "--runs", 1]
    for _ in range(2):
        status, _, err = run(capsys, *argv, "--out", out)
        assert status == 0, err
    assert (out / "notes.txt").read_text() == "mine\n"
    assert sorted(os.listdir(out)) == ["notes.txt", "simulate.csv", "simulate.png"]
    (tmp_path / "file").write_text("x")
    status, _, err = run(capsys, *argv, "--out", tmp_path / "file")
    assert status == 2 and "error" in err
    assert (tmp_path / "file").read_text() == "x"
