"""Shared helpers for the ldpdist test suite."""

from __future__ import annotations

import concurrent.futures
import hashlib
import inspect
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any, Callable, Dict, Optional, Set, Tuple

import numpy as np

TESTS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # chacha_reference


def digest(array: np.ndarray) -> str:
    """A hash of an array's dtype, shape and bytes (to compare results across processes)."""
    array = np.ascontiguousarray(array)
    h = hashlib.sha256()
    h.update(str(array.dtype).encode())
    h.update(str(array.shape).encode())
    h.update(array.tobytes())
    return h.hexdigest()


def run_python(code: str, env: Optional[Dict[str, str]] = None, timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter (``sys.executable``) and return its stdout.

    ``env`` entries are added to (or, with value None, removed from) a copy of the current
    environment. The snippet can use ``digest`` (defined here) to print comparable hashes.
    """
    full_env = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    # The subprocess gets the same `digest` as this module, from its source.
    prelude = "import hashlib, sys\nimport numpy as np\n" + inspect.getsource(digest) + "\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=full_env,
        cwd=str(TESTS),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"subprocess failed with code {done.returncode}\n--- stderr ---\n{done.stderr}"
        )
    return done.stdout


# -- long subprocess checks, started when collection ends -------------------------------------
#
# A few checks run minutes of work in child processes (the fuzz modules, the regeneration of
# the docs' numbers) while the test process mostly runs one thread. A test module that
# defines ``start_in_background(items)`` gets called once collection has ended, with its
# selected items, and may queue such children with :func:`in_background`; they then run,
# one after another, beside the rest of the suite, and the tests wait for their results.
# Same checks, same guards; only the waiting overlaps.

_BACKGROUND: Optional[concurrent.futures.ThreadPoolExecutor] = None
_CHILDREN: Set[subprocess.Popen] = set()
_CHILDREN_LOCK = threading.Lock()


def in_background(run: Callable[..., Any], *args: Any) -> "concurrent.futures.Future[Any]":
    """Queue ``run(*args)`` on the suite's one background thread; its future."""
    global _BACKGROUND
    if _BACKGROUND is None:
        _BACKGROUND = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ldpdist-tests-background")
    return _BACKGROUND.submit(run, *args)


def track_child(child: subprocess.Popen) -> None:
    """Have ``child`` (started with ``start_new_session=True``) killed, with its process
    group, if the session ends before it does."""
    with _CHILDREN_LOCK:
        _CHILDREN.add(child)


def untrack_child(child: subprocess.Popen) -> None:
    with _CHILDREN_LOCK:
        _CHILDREN.discard(child)


def run_child(argv: list, timeout: float, **popen: Any) -> Tuple[bool, int, str]:
    """Run ``argv`` in its own session (stdout and stderr together, text): (killed after
    ``timeout`` seconds, exit status, output). The child and its process group are killed
    on a timeout, or if the test session ends first. Raises nothing, so that it can run on
    the background thread (:func:`in_background`)."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace", start_new_session=True, **popen)
    track_child(child)
    try:
        try:
            output, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            output, _ = child.communicate()
            return True, child.returncode, output
        return False, child.returncode, output
    finally:
        untrack_child(child)


def pytest_collection_finish(session) -> None:
    by_module: Dict[Any, list] = {}
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None:
            by_module.setdefault(module, []).append(item)
    for module, items in by_module.items():
        start = getattr(module, "start_in_background", None)
        if callable(start):
            start(items)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _BACKGROUND is not None:
        _BACKGROUND.shutdown(wait=False, cancel_futures=True)
    with _CHILDREN_LOCK:
        children = list(_CHILDREN)
    for child in children:
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
