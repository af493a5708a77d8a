"""The measured numbers the docs and the README show are what the code produces now.

``python docs/generate.py`` writes every table (``docs/generated/*.md``), the data of every
figure (``docs/generated/*.csv``) and the figures (``docs/figures/*.png``). Here every
deterministic generator runs again, on its fixed seeds, into a temporary directory (tables
and data only, no figures) and the result is compared with the committed files: the tables
exactly (their numbers are rounded to what is shown), the CSVs value by value (integers and
strings exactly, floats to 1e-9 relative: seeded results are bit-identical whatever the
number of threads, and the tolerance only leaves room for last-bit differences of floating
point sums between CPUs or numpy builds; any change of a seed, a sampler or an estimator
moves an error by far more). The timing generators (``performance``, ``simulate-speed``)
are not compared, nor is the planner's validation grid (``planning``: minutes of
simulations; tests/test_planner.py applies its criteria to a smaller grid).

A failure means a shown number is stale: run ``python docs/generate.py --only NAME`` (or
the whole script) and commit the result, after checking that the change is intended.

Also checked: every ``generated/...`` fragment and ``figures/...`` image that README.md and
docs/**/*.md refer to exists, every generated file is referred to somewhere, and the files in
docs/generated and docs/figures are exactly the generators' outputs.
"""

from __future__ import annotations

import csv
import difflib
import importlib.util
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest
from conftest import in_background, run_child

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GENERATE = DOCS / "generate.py"

if not GENERATE.exists():  # an installed package without the repository
    pytest.skip("docs/generate.py is not here (not a repository checkout)",
                allow_module_level=True)


def _load_generate():
    spec = importlib.util.spec_from_file_location("ldpdist_docs_generate", GENERATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


generate = _load_generate()
# ``planning`` (compared=False) takes minutes; tests/test_planner.py checks its criteria.
DETERMINISTIC = [name for name, gen in generate.GENERATORS.items()
                 if not gen.timing and gen.compared]
OUTPUTS = [(name, output) for name in DETERMINISTIC
           for output in generate.GENERATORS[name].outputs
           if not output.startswith("figures/")]


def _regenerate(out: Path) -> Tuple[int, str]:
    """Run docs/generate.py into ``out``: (exit status, output); -9 after 900 s."""
    _killed, status, output = run_child(
        [sys.executable, str(GENERATE), "--deterministic", "--no-figures", "--jobs", "2",
         "--out", str(out)], 900, cwd=str(ROOT))
    return status, output


# Started when collection ends (conftest.py), so that it runs beside the tests before it.
_QUEUED: Dict[str, Any] = {}


def start_in_background(items) -> None:
    if any("regenerated" in getattr(item, "fixturenames", ()) for item in items):
        out = Path(tempfile.mkdtemp(prefix="ldpdist-docs-regenerated-"))
        _QUEUED["run"] = (out, in_background(_regenerate, out))


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    """Every deterministic table and CSV, regenerated once for the module (two processes)."""
    queued = _QUEUED.pop("run", None)
    if queued is not None and not queued[1].cancelled():
        out, future = queued
        status, output = future.result()
    else:
        out = tmp_path_factory.mktemp("docs-regenerated")
        status, output = _regenerate(out)
    assert status == 0, f"docs/generate.py failed (exit status {status}):\n{output}"
    yield out
    shutil.rmtree(out, ignore_errors=True)


# -- comparisons (written here, not taken from generate.py, so that they are checked) ---

def _value(cell: str) -> Any:
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell


def csv_differences(fresh: List[List[str]], committed: List[List[str]],
                    rel: float = 1e-9) -> List[str]:
    """Cells that differ: integers and strings exactly, floats within ``rel`` relative."""
    if fresh[:1] != committed[:1]:
        return [f"columns: regenerated {fresh[:1]}, committed {committed[:1]}"]
    problems = []
    if len(fresh) != len(committed):
        problems.append(f"{len(fresh) - 1} rows regenerated, {len(committed) - 1} committed")
    header = fresh[0]
    for line, (a, b) in enumerate(zip(fresh[1:], committed[1:]), start=2):
        if len(a) != len(b):
            problems.append(f"line {line}: {len(a)} cells regenerated, {len(b)} committed")
            continue
        for column, x, y in zip(header, a, b):
            u, v = _value(x), _value(y)
            if isinstance(u, float) or isinstance(v, float):
                numbers = all(isinstance(w, (int, float)) for w in (u, v))
                same = numbers and math.isclose(u, v, rel_tol=rel, abs_tol=0.0)
            else:
                same = type(u) is type(v) and u == v
            if not same:
                problems.append(f"line {line}, column {column}: regenerated {x!r}, "
                                f"committed {y!r}")
    return problems


def _read_csv(path: Path) -> List[List[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _stale(name: str) -> str:
    return (f"a number shown by the docs is stale: run `python docs/generate.py --only {name}` "
            "and commit the result (after checking the change is intended)")


@pytest.mark.parametrize("name,output", OUTPUTS, ids=[output for _, output in OUTPUTS])
def test_committed_output_matches_the_code(regenerated, name, output):
    committed = DOCS / output
    assert committed.exists(), f"{output} is not committed: {_stale(name)}"
    fresh = regenerated / output
    assert fresh.exists(), f"generator {name} did not write {output}"
    if output.endswith(".csv"):
        problems = csv_differences(_read_csv(fresh), _read_csv(committed))
        assert not problems, f"{output}: {_stale(name)}\n" + "\n".join(problems[:20])
    else:
        old = committed.read_text(encoding="utf-8")
        new = fresh.read_text(encoding="utf-8")
        diff = "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(),
                                              f"committed {output}", f"regenerated {output}",
                                              lineterm=""))
        assert old == new, f"{output}: {_stale(name)}\n{diff}"


def test_the_csv_comparison_catches_an_edited_value():
    """The CSV check can fail: a float moved by 1e-6 relative, an integer or a string
    changed, a row missing are all found."""
    output = next(o for _, o in OUTPUTS if o.endswith(".csv"))
    rows = _read_csv(DOCS / output)
    assert not csv_differences(rows, [list(row) for row in rows])
    column = rows[0].index("l1")
    line = next(i for i, row in enumerate(rows) if i and float(row[column]) != 0)

    def edited(column_name: str, value: str) -> List[List[str]]:
        changed = [list(row) for row in rows]
        changed[line][rows[0].index(column_name)] = value
        return changed

    for factor in (1 + 1e-6, 1.5):
        assert csv_differences(rows, edited("l1", repr(float(rows[line][column]) * factor)))
    assert csv_differences(rows, edited("n", str(int(rows[line][rows[0].index("n")]) + 1)))
    assert csv_differences(rows, edited("mechanism", "XX"))
    assert csv_differences(rows, rows[:-1])


# -- references: pages <-> generated files ----------------------------------------------

# generated/NAME.md, ../figures/NAME.png, docs/generated/NAME.csv ...; names are lower case
# (placeholders such as generated/NAME.md or figures/<preset>.png are not references)
_REFERENCE = re.compile(r"[\w./-]*(?:generated|figures)/[a-z0-9][a-z0-9.-]*\.(?:md|csv|png)")


def _pages() -> List[Path]:
    pages = [ROOT / "README.md"]
    for page in sorted(DOCS.rglob("*.md")):
        relative = page.relative_to(DOCS).parts
        if relative[0] in ("generated", "_build") or relative[0].startswith("."):
            continue
        pages.append(page)
    return pages


def _references() -> Dict[Path, Set[Path]]:
    """page -> the files under docs/generated or docs/figures it refers to (resolved from
    the page's directory, or from the repository root for ``docs/...``)."""
    found: Dict[Path, Set[Path]] = {}
    for page in _pages():
        for token in _REFERENCE.findall(page.read_text(encoding="utf-8")):
            base = ROOT if token.startswith("docs/") else page.parent
            found.setdefault(page, set()).add((base / token).resolve())
    return found


def _generated_files() -> Set[Path]:
    files = set()
    for folder in ("generated", "figures"):
        if (DOCS / folder).is_dir():
            files |= {path.resolve() for path in (DOCS / folder).iterdir() if path.is_file()}
    return files


def test_every_referenced_table_and_figure_exists():
    missing = [f"{page.relative_to(ROOT)} -> {os.path.relpath(target, ROOT)}"
               for page, targets in _references().items() for target in sorted(targets)
               if not target.exists()]
    assert not missing, ("pages refer to generated files that do not exist (run "
                         "python docs/generate.py):\n" + "\n".join(missing))


def test_every_generated_file_is_referenced():
    referenced = set().union(*_references().values())
    orphans = sorted(str(path.relative_to(DOCS)) for path in _generated_files() - referenced)
    assert not orphans, ("generated files that no page (README.md, docs/**/*.md) refers to: "
                         + ", ".join(orphans))


def test_generated_files_are_the_generators_outputs():
    expected = {(DOCS / output).resolve() for gen in generate.GENERATORS.values()
                for output in gen.outputs}
    missing = sorted(str(path.relative_to(DOCS)) for path in expected - _generated_files())
    extra = sorted(str(path.relative_to(DOCS)) for path in _generated_files() - expected)
    assert not missing, f"outputs not committed (run python docs/generate.py): {missing}"
    assert not extra, f"files no generator writes (stale; remove them): {extra}"


def test_the_generators_cover_every_reproduce_preset():
    """Every ``ldpdist reproduce`` preset but the timing one (hr-time, whose metric is
    seconds) has its figure, table and data."""
    from ldpdist.experiments import PRESETS
    from ldpdist.experiments.commands import STUDIES

    presets = {name for name, preset in PRESETS.items() if preset.metric != "seconds"}
    assert presets | set(STUDIES) == set(generate.PRESET_NAMES)
    for preset in generate.PRESET_NAMES:
        outputs = set(generate.GENERATORS[preset].outputs)
        assert {f"generated/{preset}.md", f"generated/{preset}.csv",
                f"figures/{preset}.png"} <= outputs
