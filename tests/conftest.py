"""Shared helpers for the ldpdist test suite."""

from __future__ import annotations

import hashlib
import inspect
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Dict, Optional

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
