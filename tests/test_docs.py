"""The documentation works as written.

* Every code block of README.md and of every page under docs/ (but docs/_build and the
  generated fragments in docs/generated) runs: a page's ```python blocks in order in one
  fresh namespace, its ```bash blocks through ``bash -euo pipefail`` with this interpreter's
  bin directory (the venv's ``ldpdist`` and ``python``) first on PATH, all in one temporary
  working directory per page and with matplotlib's Agg backend. A bash block whose first
  line is ``# not run: <reason>`` is shown but not run (installation commands, things that
  need infrastructure the tests cannot have); a python block can never be exempt. Output and
  other non-runnable text belongs in ```text blocks.
* README.md stays a landing page: at most 10240 bytes.
* Nothing shipped or shown points into the development-only ``shared/`` folder (papers and
  notes): no such path in README.md, docs/, python/, rust/, benches/ or examples/.
* The docstring examples (``>>>``) of every ldpdist module run (doctest).
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import os
import pkgutil
import re
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_BYTES = 10240
# Folders of docs/ that hold no pages: the build output and the Markdown fragments that
# docs/generate.py writes (they are included into pages, and hold no code).
SKIPPED_DOCS = ("_build", "generated")
EXEMPT = "# not run:"
# Languages that look runnable but would not be run: say python or bash (run) or text.
UNRUN_LANGUAGES = {"py", "python3", "pycon", "ipython", "sh", "shell", "console", "zsh"}
BASH_TIMEOUT = 120


def _pages() -> List[Path]:
    pages = [README]
    for path in sorted(DOCS.rglob("*.md")):
        if path.relative_to(DOCS).parts[0] not in SKIPPED_DOCS:
            pages.append(path)
    return pages


PAGES = _pages()


@dataclass
class Block:
    language: str  # "python" or "bash"
    code: str
    line: int  # 1-based line of the opening fence in the page
    number: int  # 1-based among the page's runnable blocks

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")


_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def _language(info: str) -> str:
    """The language of a fence's info string: ``python``, ``{code-block} python`` → python."""
    words = info.strip().split()
    if not words:
        return ""
    if words[0] in ("{code-block}", "{code}", "{sourcecode}") and len(words) > 1:
        return words[1].lower()
    return words[0].lower()


def code_blocks(text: str, where: str) -> List[Block]:
    """The fenced python and bash blocks of a Markdown page, in order (CommonMark fences:
    a block closes at a fence of the same character at least as long; nested fences inside
    a longer one are content)."""
    blocks: List[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match or (match["fence"][0] == "`" and "`" in match["info"]):
            i += 1  # not a fence (CommonMark: a backtick fence's info has no backtick)
            continue
        indent, fence, info = len(match["indent"]), match["fence"], match["info"]
        start = i
        body: List[str] = []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if (close and close["fence"][0] == fence[0] and len(close["fence"]) >= len(fence)
                    and not close["info"].strip()):
                break
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        else:
            raise AssertionError(f"{where}:{start + 1}: unclosed code fence {fence}{info}")
        i += 1
        language = _language(info)
        if language in UNRUN_LANGUAGES:
            raise AssertionError(
                f"{where}:{start + 1}: a ```{language} block would not be run: write "
                "```python or ```bash (run by tests/test_docs.py), or ```text for output")
        if language in ("python", "bash"):
            blocks.append(Block(language, "\n".join(body) + "\n", start + 1, len(blocks) + 1))
    return blocks


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _failure(page: str, block: Block, error: str) -> str:
    return (f"{page}, code block {block.number} ({block.language}, line {block.line}), "
            f"starting {block.first_line!r}:\n{error}")


def _python_error(exc: BaseException, filename: str) -> str:
    """The traceback from the block's own frame on (the test's frames are noise)."""
    frames = traceback.extract_tb(exc.__traceback__)
    while frames and frames[0].filename != filename:
        frames.pop(0)
    text = "".join(traceback.format_list(frames)) if frames else ""
    return text + "".join(traceback.format_exception_only(type(exc), exc))


def _bash_env() -> dict:
    env = dict(os.environ)
    # The interpreter running the tests (not resolved: a venv's python is a symlink), so
    # that `ldpdist` and `python` are the venv's.
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


@contextlib.contextmanager
def _isolated_globals():
    """Undo what a page may change in this process: memory budget, warnings filters,
    matplotlib figures."""
    import ldpdist

    limit = os.environ.get("LDPDIST_MAX_MEMORY")
    try:
        with warnings.catch_warnings():
            yield
    finally:
        ldpdist.set_memory_limit(limit)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


def run_page(path: Path, workdir: Path) -> None:
    page = _page_id(path)
    blocks = code_blocks(path.read_text(encoding="utf-8"), page)
    namespace = {"__name__": "__main__"}
    env = _bash_env()
    for block in blocks:
        exempt = block.code.lstrip().startswith(EXEMPT)
        if block.language == "python":
            if exempt:
                pytest.fail(_failure(page, block, "a python block cannot be exempt from "
                                     f"running ('{EXEMPT} ...' is for bash blocks only)"),
                            pytrace=False)
            filename = f"<{page}, code block {block.number}>"
            try:
                exec(compile(block.code, filename, "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - reported with the page's context
                if isinstance(exc, KeyboardInterrupt):
                    raise
                pytest.fail(_failure(page, block, _python_error(exc, filename)),
                            pytrace=False)
        else:
            if exempt:
                reason = block.code.lstrip()[len(EXEMPT):].splitlines()[0].strip()
                if not reason:
                    pytest.fail(_failure(page, block, f"'{EXEMPT}' needs a reason"),
                                pytrace=False)
                continue
            try:
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code],
                                      cwd=workdir, env=env, capture_output=True, text=True,
                                      timeout=BASH_TIMEOUT, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                pytest.fail(_failure(page, block, f"timed out after {BASH_TIMEOUT} s"),
                            pytrace=False)
            if done.returncode != 0:
                output = (done.stdout[-3000:] + done.stderr[-3000:]).rstrip()
                pytest.fail(_failure(page, block, f"exit status {done.returncode}\n{output}"),
                            pytrace=False)


@pytest.mark.parametrize("path", PAGES, ids=[_page_id(p) for p in PAGES])
def test_page_code_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("Agg")
    monkeypatch.chdir(tmp_path)
    with _isolated_globals(), contextlib.redirect_stdout(io.StringIO()):
        run_page(path, tmp_path)


# -- the parser and the runner themselves ------------------------------------------------


def test_code_blocks_parser() -> None:
    text = "\n".join([
        "# Page", "```python", "x = 1", "```", "````markdown", "```python", "not code",
        "```", "````", "1. item", "", "   ```bash", "   echo hi", "   ```", "```text",
        "out", "```", "```{code-block} python", "y = 2", "```",
        "```` ```{include} inline code ```` is no fence",
    ])
    blocks = code_blocks(text, "page.md")
    assert [(b.language, b.code, b.line, b.number) for b in blocks] == [
        ("python", "x = 1\n", 2, 1), ("bash", "echo hi\n", 12, 2),
        ("python", "y = 2\n", 18, 3)]
    with pytest.raises(AssertionError, match="would not be run"):
        code_blocks("```sh\nls\n```\n", "page.md")
    with pytest.raises(AssertionError, match="unclosed"):
        code_blocks("```python\nx = 1\n", "page.md")


@pytest.mark.parametrize("source, message", [
    ("```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is not 2'\n```\n",
     "code block 2 (python, line 5), starting \"assert x == 2, 'x is not 2'\""),
    ("```bash\ntrue\nfalse\necho never\n```\n", "exit status 1"),
    ("```bash\ntrue\n```\n```bash\nfalse | true\necho after\n```\n", "code block 2"),
    ("```bash\necho \"$NO_SUCH_VARIABLE_IN_DOCS\"\n```\n", "unbound variable"),
    ("```python\n# not run: it is slow\nx = 1\n```\n", "python block cannot be exempt"),
    ("```bash\n# not run:\nfalse\n```\n", "needs a reason"),
])
def test_runner_reports_failures(tmp_path: Path, source: str, message: str) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(source)
    with pytest.raises(pytest.fail.Exception, match=re.escape(message)), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules[__name__], "ROOT", tmp_path)
        run_page(page, tmp_path)


def test_runner_shares_namespace_and_workdir(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nopen('a.txt', 'w').write('hi')\nx = 41\n```\n"
                    "```bash\ntest \"$(cat a.txt)\" = hi\ncommand -v ldpdist\n```\n"
                    "```bash\n# not run: needs a cluster\nexit 1\n```\n"
                    "```python\nassert x + 1 == 42\n```\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules[__name__], "ROOT", tmp_path)
        mp.chdir(tmp_path)
        run_page(page, tmp_path)


# -- README size, paths into shared/ ---------------------------------------------------


def test_readme_is_a_landing_page() -> None:
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes; the landing page must stay within {README_MAX_BYTES} "
        "(move the details into a docs page and link it)")


# The project's rule: no path into the development-only papers/notes folders, and no
# "shared/" at all, in anything shipped or shown.
SHARED_PATH = re.compile(r"(^|[^.A-Za-z0-9_])(shared/)?(papers|notes)/[A-Za-z0-9_.-]+\.(txt|md)"
                         r"|shared/")
SCANNED = ("README.md", "docs", "python", "rust", "benches", "examples")
SKIPPED_DIRS = {"_build", "__pycache__", ".pytest_cache"}


def _scanned_files() -> List[Path]:
    files: List[Path] = []
    for name in SCANNED:
        top = ROOT / name
        if top.is_file():
            files.append(top)
            continue
        for path in sorted(top.rglob("*")):
            parts = set(path.relative_to(ROOT).parts)
            if path.is_file() and not parts & SKIPPED_DIRS:
                files.append(path)
    return files


def test_no_paths_into_shared() -> None:
    hits = []
    for path in _scanned_files():
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: images, the compiled extension
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if SHARED_PATH.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not hits, ("paths into shared/ (cite the paper by authors, title, venue and year, "
                      "and link a docs page instead):\n" + "\n".join(hits))


def test_shared_path_pattern() -> None:
    for bad in ["see shared/papers/hr.txt", "(notes/sparse-estimation.md)",
                "papers/linear-queries-ldp.txt", "shared/DESIGN.md"]:
        assert SHARED_PATH.search(bad), bad
    for good in ["docs/notes.md", "the notes/ folder", "my.papers/x.txt", "footnotes/a.md"]:
        assert not SHARED_PATH.search(good), good


# -- docstring examples ------------------------------------------------------------------


def _modules() -> List[str]:
    import ldpdist

    names = ["ldpdist"]
    for info in pkgutil.walk_packages(ldpdist.__path__, "ldpdist."):
        if not info.name.endswith("__main__"):  # importing it runs the command
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    if name == "ldpdist.dask":
        pytest.importorskip("dask")
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    output = io.StringIO()
    tests = [t for t in finder.find(module, name) if t.examples]
    for test in tests:
        runner.run(test, out=output.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"docstring examples of {name} failed:\n{output.getvalue()}"
