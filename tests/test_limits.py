"""Bounded memory, never an abort, and Ctrl-C within a second.

Each case runs in a fresh interpreter under an address-space limit (RLIMIT_AS = 3 GiB), so
that an unguarded allocation shows up as an abort or a crash of that child, never of the
test runner. A case passes when the child survives and the call either succeeded or raised
a clear MemoryError / ValueError (TypeError for a wrong argument type) before allocating.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from typing import Any, Dict

import pytest
from conftest import in_background

resource = pytest.importorskip("resource")  # POSIX only

LIMIT = 3 << 30

PRELUDE = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
import numpy as np
import ldpdist
def outcome(call):
    start = time.perf_counter()
    try:
        call()
        kind = "done"
    except (MemoryError, ValueError, TypeError) as exc:
        kind = next(t.__name__ for t in (MemoryError, ValueError, TypeError) if isinstance(exc, t))
        assert str(exc), "an exception without a message"
    print(f"outcome {{kind}} {{time.perf_counter() - start:.2f}}", flush=True)
"""

# Requests that once aborted, were OOM-killed, or allocated 16 GiB from a small spec or 10 GB
# in from_bytes.
CASES = {
    "rr-k2^28-estimate-one-report":
        "m = ldpdist.RandomizedResponse(2**28, 1.0); "
        "outcome(lambda: m.estimate(m.as_reports(np.array([5], np.uint32))))",
    "hr-k2^27-estimate-one-report":
        "m = ldpdist.HadamardResponse(2**27, 1.0); "
        "outcome(lambda: m.estimate(m.as_reports(np.array([5], np.uint32))))",
    "rappor-k2^24-estimate-one-report":
        "m = ldpdist.RAPPOR(2**24, 1.0); r = m.as_reports(np.zeros((1, 2**21), np.uint8)); "
        "outcome(lambda: m.estimate(r))",
    "rr-k10^9-simulate":
        "m = ldpdist.RandomizedResponse(10**9, 1.0); c = np.zeros(10**9, np.uint8); c[0] = 3; "
        "outcome(lambda: m.simulate(c, seed=1))",
    "rr-k10^8-estimate-two-reports":
        "m = ldpdist.RandomizedResponse(10**8, 1.0); "
        "outcome(lambda: m.estimate(m.as_reports(np.array([1, 2], np.uint32))))",
    "cp-rademacher-k2^28":
        "outcome(lambda: ldpdist.CompressivePrivatization(2**28, 0.5, m=500, seed=1, matrix='rademacher'))",
    "small-spec-16GiB":
        "outcome(lambda: ldpdist.from_dict({'mechanism': 'CompressivePrivatization', 'k': 2**28, "
        "'epsilon': 0.5, 'm': 500, 'seed': 1, 'matrix': 'rademacher'}))",
    "from-bytes-10^10":
        "outcome(lambda: ldpdist.Aggregator.from_bytes(10**10))",
    "ss-k2^32-aggregator":
        "m = ldpdist.SubsetSelection(2**32, 1.0); outcome(lambda: m.aggregator())",
    "obhr-k2^30-estimate-one-report":
        "m = ldpdist.OneBitHadamardResponse(2**30, 1.0); "
        "outcome(lambda: m.estimate(m.as_reports(np.array([5], np.uint32))))",
    "obhr-k2^30-privatize-groups":
        "m = ldpdist.OneBitHadamardResponse(2**30, 1.0); "
        "outcome(lambda: m.privatize([1, 2], groups=[2**31 - 1, 0], seed=1))",
    "pch-k2^32-aggregator":
        "m = ldpdist.PublicCoinHashing(2**32, 3, seed=1); outcome(lambda: m.aggregator())",
    "pch-k2^31-estimate-one-report":
        "m = ldpdist.PublicCoinHashing(2**31, 3, seed=1); "
        "outcome(lambda: m.estimate(m.privatize([5]), 'two_stage', sparsity=3))",
    "bhr-k2^32-sizes":
        "outcome(lambda: ldpdist.BlockHadamardResponse([2**31, 2**31], 1.0))",
    "bhr-k2^27-estimate-one-report":
        "m = ldpdist.BlockHadamardResponse([1, 2**26, 2**26 - 1], 1.0); "
        "outcome(lambda: m.estimate(m.as_reports(np.array([5], np.uint32))))",
    "hlhr-k2^32-aggregator":
        "m = ldpdist.HighLowHadamardResponse(2**32, 1.0, [1, 2**31]); "
        "outcome(lambda: m.aggregator())",
    "hlhr-k2^27-estimate-one-report":
        "m = ldpdist.HighLowHadamardResponse(2**27, 1.0, np.arange(0, 2**27, 2**10)); "
        "outcome(lambda: m.estimate(m.as_reports(np.array([5], np.uint32))))",
    "hlhr-k2^28-realized-budgets":
        "m = ldpdist.HighLowHadamardResponse(2**28, 1.0, [7]); "
        "outcome(lambda: m.realized_budgets())",
    "olh-channel-products-k2^23":
        "m = ldpdist.OptimizedLocalHashing(2**23, 1.0); "
        "outcome(lambda: m.estimate(m.privatize(np.arange(10), seed=1), 'ibu', max_iter=1))",
}


def run_limited(code: str, timeout: float = 240.0) -> subprocess.CompletedProcess:
    script = PRELUDE.format(limit=LIMIT) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


# The cases of the selected tests, queued when collection ends (tests/conftest.py): they run
# one after another beside the rest of the suite, each in its own limited child as here.
_QUEUED: Dict[str, Any] = {}


def start_in_background(items) -> None:
    for item in items:
        if item.originalname == "test_oversized_requests_are_refused_and_the_process_survives":
            name = item.callspec.params["name"]
            _QUEUED.setdefault(name, in_background(run_limited, CASES[name]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_oversized_requests_are_refused_and_the_process_survives(name):
    queued = _QUEUED.pop(name, None)
    if queued is not None and not queued.cancelled():
        done = queued.result()
    else:
        done = run_limited(CASES[name])
    assert done.returncode == 0, (
        f"the child died (status {done.returncode}; negative = killed by that signal)\n"
        f"{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("outcome ")]
    assert len(lines) == 1, done.stdout + done.stderr
    _, kind, seconds = lines[0].split()
    # An int where bytes belong is a TypeError (it once allocated 10 GB of zero bytes).
    allowed = {"done", "MemoryError", "ValueError"} | ({"TypeError"} if "bytes" in name else set())
    assert kind in allowed, lines[0]
    assert float(seconds) < 60, f"{name}: {seconds} s"


def test_copies_of_user_arrays_ask_the_guard_first():
    """simulate and add copy their input (to uint64, to native byte order, contiguous): the
    guard is asked first. Found by tests/fuzz: broadcast views that cost nothing made numpy
    allocate GiBs outside the budget (a numpy MemoryError under RLIMIT_AS)."""
    done = run_limited("""
        ldpdist.set_memory_limit("64M")
        big = 2**24
        rr, hr, rappor = (ldpdist.RandomizedResponse(16, 1.0), ldpdist.HadamardResponse(16, 1.0),
                          ldpdist.RAPPOR(16, 1.0))
        cases = [
            ("true_counts as uint64", lambda: ldpdist.RandomizedResponse(big, 1.0).simulate(
                np.broadcast_to(np.uint8(0), (big,)))),
            ("the reports as uint64", lambda: rr.aggregator()
                .add(rr.as_reports(np.broadcast_to(np.int8(1), (big,))))),
            ("native byte order", lambda: hr.aggregator()
                .add(hr.as_reports(np.broadcast_to(np.array(1, ">u8"), (big,))))),
            ("contiguous copy", lambda: rappor.aggregator()
                .add(rappor.as_reports(np.broadcast_to(np.zeros(2, np.uint8), (4 * big, 2))))),
        ]
        for part, call in cases:
            try:
                call()
                print("accepted")
            except MemoryError as exc:
                print("refused" if part in str(exc) and "budget" in str(exc) else str(exc))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused"] * 4, done.stdout


def test_the_budget_follows_the_setter_and_the_environment():
    done = run_limited("""
        import os
        from ldpdist import memory
        ldpdist.set_memory_limit("1M")
        assert ldpdist.memory_limit() <= 1 << 20
        try:
            ldpdist.RandomizedResponse(10**6, 1.0).aggregator()
        except MemoryError as exc:
            assert "budget" in str(exc) and "set_memory_limit" in str(exc), exc
            print("refused")
        ldpdist.set_memory_limit(None)
        ldpdist.RandomizedResponse(10**6, 1.0).aggregator()
        print("accepted")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "accepted"]
    env_case = subprocess.run(
        [sys.executable, "-c", "import ldpdist\n"
                               "try:\n    ldpdist.RandomizedResponse(10**6, 1.0).aggregator()\n"
                               "except MemoryError as e:\n    print('refused', ldpdist.memory_limit())"],
        capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "LDPDIST_MAX_MEMORY": "512K"})
    assert env_case.stdout.split() == ["refused", str(512 << 10)], env_case.stderr


# -- Ctrl-C ---------------------------------------------------------------------------------

INTERRUPTIBLE = {
    "privatize": "m = ldpdist.SubsetSelection(10_000, 1.0); v = np.zeros(400_000, np.uint32); "
                 "go(lambda: m.privatize(v, seed=1))",
    "aggregate": "m = ldpdist.RAPPOR(16_384, 1.0); r = m.as_reports("
                 "np.random.default_rng(0).integers(0, 256, (600_000, 2048), dtype=np.uint8)); "
                 "go(lambda: [m.aggregator().add(r) for _ in range(20)])",
    "estimate": "m = ldpdist.RAPPOR(16_384, 1.0); r = m.as_reports("
                "np.random.default_rng(0).integers(0, 256, (600_000, 2048), dtype=np.uint8)); "
                "go(lambda: [m.estimate(r) for _ in range(20)])",
    "simulate": "m = ldpdist.SubsetSelection(10_000, 0.5); c = np.full(10_000, 10**8, np.uint64); "
                "go(lambda: [m.simulate(c, seed=s) for s in range(20)])",
    "simulate-one-bit-hadamard": "m = ldpdist.OneBitHadamardResponse(2**20, 0.5); "
                                 "c = np.zeros(2**20, np.uint64); c[:4096] = 10**9; "
                                 "go(lambda: [m.simulate(c, seed=s) for s in range(20)])",
    "simulate-block-hadamard": "m = ldpdist.BlockHadamardResponse([2**21] * 16, 0.5); "
                               "c = np.full(2**25, 10**6, np.uint64); "
                               "go(lambda: [m.simulate(c, seed=s) for s in range(20)])",
    "estimate-hadamard": "m = ldpdist.HadamardResponse(2**26, 1.0); "
                         "r = m.as_reports(np.array([5], np.uint32)); "
                         "go(lambda: [m.estimate(r) for _ in range(20)])",
    "estimate-high-low-hadamard": "m = ldpdist.HighLowHadamardResponse(2**26, 1.0, "
                                  "np.arange(0, 2**26, 3)); "
                                  "r = m.as_reports(np.array([5], np.uint32)); "
                                  "go(lambda: [m.estimate(r) for _ in range(20)])",
    "ibu-local-hashing": "m = ldpdist.OptimizedLocalHashing(2**22, 1.0); "
                         "r = m.privatize(np.arange(10), seed=1); go(lambda: m.estimate(r, 'ibu'))",
    "sign-matrix": "from ldpdist import kernels; go(lambda: kernels.SignMatrix(1, 4096, 2**22, 'balanced'))",
    "rust-loop": "go(lambda: ldpdist._core._interruptible_sleep_for_tests(60))",
    "linear-sensitivity-on-a-sphere": "from ldpdist.linear import l2_sensitivity; "
                                      "g = np.random.default_rng(0).standard_normal((8, 2**17)); "
                                      "q = g / np.linalg.norm(g, axis=0); "
                                      "go(lambda: l2_sensitivity(q, max_sensitivity_work=None))",
    "aggregate-public-coin-hashing": "m = ldpdist.PublicCoinHashing(100_000, 3, seed=1); "
                                     "r = m.privatize(np.zeros(2_000_000, np.uint32)); "
                                     "go(lambda: [m.aggregator().add(r) for _ in range(20)])",
}

# The child sets its own SIGINT disposition first: a shell that starts the test run in the
# background (job control off) makes SIGINT ignored, children inherit that, and Python then
# installs no KeyboardInterrupt handler, so the test would depend on how it was launched.
CTRL_C_PRELUDE = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import sys, time
import numpy as np
import ldpdist
def go(call):
    print("started", flush=True)
    start = time.perf_counter()
    try:
        call()
        print(f"finished {time.perf_counter() - start:.2f}", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted {time.time()!r}", flush=True)
"""


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("name", sorted(INTERRUPTIBLE))
def test_ctrl_c_interrupts_long_work_within_a_second(name, preexec_fn=None):
    child = subprocess.Popen([sys.executable, "-c", CTRL_C_PRELUDE + INTERRUPTIBLE[name]],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=preexec_fn)
    try:
        assert child.stdout.readline().strip() == "started", child.stderr.read()
        time.sleep(1.0)
        sent = time.time()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert "finished" not in out, f"{name} finished before the signal: make it longer ({out})"
    caught = [line for line in out.splitlines() if line.startswith("interrupted ")]
    assert caught, out + err
    assert child.returncode == 0, err
    latency = float(caught[0].split()[1]) - sent
    assert latency < 1.0, f"{name}: KeyboardInterrupt {latency:.2f} s after SIGINT"


def test_ctrl_c_does_not_depend_on_the_inherited_sigint_disposition():
    """A child started with SIGINT ignored (as under `pytest ... &` in a non-interactive
    shell) still gets KeyboardInterrupt: the prelude sets its own disposition."""
    test_ctrl_c_interrupts_long_work_within_a_second("rust-loop", preexec_fn=_ignore_sigint)


# -- minutes of work are refused up front ------------------------------------------------------

def test_subset_selection_simulate_refuses_hours_of_work_before_starting():
    import numpy as np

    import ldpdist

    mech = ldpdist.SubsetSelection(2**24, 1.0)
    counts = np.full(2**24, 2**16, np.uint64)    # 2^40 users: once ran for minutes
    start = time.perf_counter()
    with pytest.raises(ValueError, match="max_seconds=None"):
        mech.simulate(counts, seed=1)
    assert time.perf_counter() - start < 5
    assert mech.simulate_seconds(counts) > 3600
    small = ldpdist.SubsetSelection(64, 1.0)
    few = np.full(64, 10, np.uint64)
    assert small.simulate(few, seed=1, max_seconds=None).n == 640
    with pytest.raises(ValueError, match="max_seconds"):
        small.simulate(few, seed=1, max_seconds=0.0)


def test_the_linear_sensitivity_of_a_large_sphere_is_refused_up_front():
    import numpy as np

    from ldpdist.linear import GaussianLinearQueries

    g = np.random.default_rng(0).standard_normal((8, 2**18))
    sphere = g / np.linalg.norm(g, axis=0)
    start = time.perf_counter()
    with pytest.raises(ValueError, match="max_sensitivity_work=None"):
        GaussianLinearQueries(sphere, 1.0, 1e-6)
    assert time.perf_counter() - start < 10
