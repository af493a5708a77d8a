"""The fuzz suite (tests/fuzz/fuzz_*.py), run by a plain ``pytest``.

Each fuzz module runs in a child ``python -m pytest`` under the guards of a crash test:
an address space of 4 GiB (``RLIMIT_AS``, so that an allocation the library does not
declare to its memory guard fails instead of swapping), a memory budget of 1 GiB
(``LDPDIST_MAX_MEMORY``) and a timeout. The test fails, with the child's output, when the
child fails an example (an undocumented or unclear exception, a malformed result), is
killed by a signal (a Rust abort is SIGABRT, a segfault SIGSEGV, the kernel's OOM killer
SIGKILL), or does not finish in time (a hang; the child is killed). The guard itself is
tested below on modules that abort and hang.

Examples per property: ``LDPDIST_FUZZ_EXAMPLES`` (default 25, derandomized: the same
examples on every run); ``LDPDIST_FUZZ_RANDOM=1`` draws new ones. The timeout grows with
the example count. By hand, with more examples::

    LDPDIST_FUZZ_EXAMPLES=1000 LDPDIST_FUZZ_RANDOM=1 python -m pytest tests/test_fuzz.py
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import signal
import sys
import textwrap
from typing import Dict, Tuple

import pytest
from conftest import in_background, run_child

TESTS = pathlib.Path(__file__).resolve().parent
FUZZ = TESTS / "fuzz"
MODULES = ["fuzz_reports", "fuzz_specs", "fuzz_states", "fuzz_values"]
ADDRESS_SPACE = 4 << 30
EXAMPLES = int(os.environ.get("LDPDIST_FUZZ_EXAMPLES", "25"))
TIMEOUT = 300.0 * max(1.0, EXAMPLES / 25)
INSTALL = "python3 -m pip install '.[test]'  (or just: python3 -m pip install hypothesis)"

try:
    import hypothesis  # noqa: F401
except ImportError:  # pragma: no cover - the test extra installs it
    HYPOTHESIS_MISSING = True
else:
    HYPOTHESIS_MISSING = False


# The child limits its own address space, then becomes the pytest run (exec): no
# preexec_fn, which is unsafe when the parent has threads (the background queue is one).
_LIMITED = ("import os, resource, sys; "
            "resource.setrlimit(resource.RLIMIT_AS, ({size}, {size})); "
            "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run_child(path: pathlib.Path, timeout: float) -> Tuple[str, int, str]:
    """Run the test module ``path`` in a guarded child pytest: (outcome, exit status,
    output), outcome "hang" when it was killed after ``timeout`` seconds, else "done"."""
    env = dict(os.environ, LDPDIST_MAX_MEMORY="1G", PYTHONUNBUFFERED="1")
    killed, status, output = run_child(
        [sys.executable, "-c", _LIMITED.format(size=ADDRESS_SPACE),
         "-m", "pytest", str(path), "-q", "-p", "no:cacheprovider"],
        timeout, cwd=str(TESTS.parent), env=env)
    return ("hang" if killed else "done"), status, output


def _judged(path: pathlib.Path, timeout: float, outcome: str, status: int, output: str) -> str:
    """The child's output when it passed, otherwise fail naming what happened (failure,
    signal, hang)."""
    if outcome == "hang":
        pytest.fail(f"{path.name}: hang: no result after {timeout:.0f} s (killed)\n"
                    f"{_tail(output)}", pytrace=False)
    if status < 0:
        name = signal.Signals(-status).name
        pytest.fail(f"{path.name}: crash: the child was killed by {name}\n{_tail(output)}",
                    pytrace=False)
    if status != 0:
        pytest.fail(f"{path.name}: failed (exit status {status})\n{output}", pytrace=False)
    return output


def run_guarded(path: pathlib.Path, timeout: float = TIMEOUT) -> str:
    """Run the test module ``path`` in a guarded child pytest; its output when it passes,
    otherwise fail naming what happened (failure, signal, hang)."""
    return _judged(path, timeout, *_run_child(path, timeout))


# The fuzz children of the selected tests, queued when collection ends (conftest.py): they
# run one after another beside the rest of the suite, each under the same guards and
# timeout as when run in the foreground.
_QUEUED: Dict[str, "concurrent.futures.Future[Tuple[str, int, str]]"] = {}


def start_in_background(items) -> None:
    if HYPOTHESIS_MISSING:
        return
    for item in items:
        module = getattr(item, "callspec", None) and item.callspec.params.get("module")
        if item.originalname == "test_fuzz_module" and module and module not in _QUEUED:
            _QUEUED[module] = in_background(_run_child, FUZZ / f"{module}.py", TIMEOUT)


@pytest.mark.parametrize("module", MODULES)
def test_fuzz_module(module):
    if HYPOTHESIS_MISSING:
        pytest.fail(f"the fuzz suite needs hypothesis, which is not installed; install the "
                    f"test extra: {INSTALL}", pytrace=False)
    path = FUZZ / f"{module}.py"
    queued = _QUEUED.pop(module, None)
    if queued is not None and not queued.cancelled():
        output = _judged(path, TIMEOUT, *queued.result())
    else:
        output = run_guarded(path)
    assert " passed" in output and " skipped" not in output, output


def test_every_fuzz_module_is_run():
    assert sorted(p.stem for p in FUZZ.glob("fuzz_*.py")) == MODULES


# -- the guard itself ---------------------------------------------------------------------------


def _module(tmp_path: pathlib.Path, body: str) -> pathlib.Path:
    path = tmp_path / "fuzz_guard_check.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_guard_reports_an_abort_by_its_signal(tmp_path):
    path = _module(tmp_path, """
        import os

        def test_abort():
            os.abort()
        """)
    with pytest.raises(pytest.fail.Exception, match="crash: .* killed by SIGABRT"):
        run_guarded(path)


def test_guard_reports_a_hang(tmp_path):
    path = _module(tmp_path, """
        import time

        def test_hang():
            time.sleep(3600)
        """)
    with pytest.raises(pytest.fail.Exception, match="hang: no result after 3 s"):
        run_guarded(path, timeout=3)


def test_guard_limits_the_address_space(tmp_path):
    path = _module(tmp_path, """
        import resource

        def test_limit():
            assert resource.getrlimit(resource.RLIMIT_AS)[0] == 4 << 30
            try:
                bytearray(5 << 30)
            except MemoryError:
                return
            raise AssertionError("5 GiB allocated under a 4 GiB address space")
        """)
    assert "1 passed" in run_guarded(path)


def test_guard_reports_a_failing_example(tmp_path):
    path = _module(tmp_path, """
        def test_fails():
            {}["missing"]
        """)
    with pytest.raises(pytest.fail.Exception, match="(?s)failed \\(exit status 1\\).*KeyError"):
        run_guarded(path)
