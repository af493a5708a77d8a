"""Misuse gets a clear error from ldpdist, not from numpy or from Python's argument binding.

* Kernels given a huge broadcast view (stride 0: no memory of its own) ask the memory guard
  for the contiguous copy they need, before numpy tries to allocate it.
* ``privacy.verify`` validates both of its arguments before it copies anything, and declares
  its whole allocation (copies and the core's log channel) to the memory guard first.
* A decoder option that the decoder does not take is refused naming the mechanism, the
  decoder and the options it does take (for every mechanism and decoder: one check, in
  ``ldpdist.decoders.check_options``)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import ldpdist
from ldpdist import decoders, kernels, memory, privacy
from ldpdist.specs import from_dict, registered

HUGE = 2**31  # a 16 GiB float64 copy


@pytest.fixture
def small_budget():
    memory.set_memory_limit("1G")
    try:
        yield
    finally:
        memory.set_memory_limit(None)


@pytest.fixture
def peak():
    """The peak of the Python-visible allocations (numpy reports its buffers to
    tracemalloc) during the test, in bytes."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- kernels on broadcast views ---------------------------------------------------------------


@pytest.mark.parametrize("call", [
    kernels.fwht, kernels.project_simplex, lambda v: kernels.project_sparse_simplex(v, 3),
], ids=["fwht", "project_simplex", "project_sparse_simplex"])
@pytest.mark.parametrize("size, budget, shown", [
    (HUGE, "1G", "16.00 GiB"),     # a 2^31-element view, under a budget every machine has
    (2**40, None, "8.00 TiB"),    # the default budget: more than any machine has
], ids=["2^31-small-budget", "2^40-default-budget"])
def test_kernels_on_a_huge_broadcast_view_ask_the_memory_guard(call, size, budget, shown,
                                                                peak):
    view = np.broadcast_to(np.float64(0.5), size)
    memory.set_memory_limit(budget)
    try:
        with pytest.raises(MemoryError, match="memory budget") as info:
            call(view)
    finally:
        memory.set_memory_limit(None)
    message = str(info.value)
    assert "Unable to allocate" not in message
    assert "copy" in message and shown in message, message
    assert peak() < 2**20


def test_fwht_int_on_a_huge_broadcast_view(small_budget, peak):
    with pytest.raises(MemoryError, match="memory budget") as info:
        kernels.fwht_int(np.broadcast_to(np.int64(1), HUGE))
    assert "copy" in str(info.value) and "Unable to allocate" not in str(info.value)
    assert peak() < 2**20


def test_kernels_still_take_small_broadcast_views():
    view = np.broadcast_to(np.float64(1.0), 8)
    np.testing.assert_array_equal(kernels.fwht(view), [8, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(kernels.project_simplex(view), np.full(8, 1 / 8))


# -- privacy.verify -----------------------------------------------------------------------


def _broadcast_channel(k, outputs):
    return np.broadcast_to(np.full(outputs, 1.0 / outputs), (k, outputs))


@pytest.mark.parametrize("budgets, match", [
    (np.broadcast_to(1.0, (2**14, 2**14)), "zero diagonal"),
    (np.broadcast_to(-1.0, (2**14, 2**14)), "≥ 0"),
    (np.broadcast_to(0.0, (2**14, 2**13)), "square"),
    (np.broadcast_to(0.0, (2**13, 2**13)), "one row per input"),
    (np.broadcast_to(np.nan, (2**14, 2**14)), "≥ 0"),
])
def test_verify_validates_its_budgets_before_allocating(budgets, match, peak):
    Q = _broadcast_channel(2**14, 2**14)  # a 2 GiB float64 channel, as a view
    with pytest.raises(ValueError, match=match):
        privacy.verify(Q, budgets)
    assert peak() < 64 * 2**20, f"{peak() / 2**20:.0f} MiB allocated before the refusal"


def test_verify_validates_the_channel_before_allocating(peak):
    Q = np.broadcast_to(-0.5, (2**14, 2**14))
    with pytest.raises(ValueError, match="probabilities"):
        privacy.verify(Q, np.broadcast_to(0.0, (2**14, 2**14)))
    assert peak() < 64 * 2**20


def test_verify_declares_its_allocation_first(small_budget, peak):
    Q = _broadcast_channel(2**14, 2**14)
    with pytest.raises(MemoryError, match="privacy.verify") as info:
        privacy.verify(Q, np.broadcast_to(0.0, (2**14, 2**14)))
    message = str(info.value)
    assert "copy of Q" in message and "copy of the budgets" in message and "log" in message
    assert peak() < 64 * 2**20


def test_verify_results_unchanged_on_views():
    k = 6
    Q = np.broadcast_to(np.full(4, 0.25), (k, 4))
    E = privacy.uniform_budgets(k, 0.0)
    assert privacy.verify(Q, E).satisfied()
    assert privacy.verify(np.asfortranarray(np.eye(3) * 0.5 + 0.25),
                          np.asfortranarray(privacy.uniform_budgets(3, np.log(3)))).satisfied()


# -- decoder options ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hr_reports():
    mech = ldpdist.HadamardResponse(16, 1.0)
    return mech, mech.privatize(np.arange(200) % 16, seed=1)


def test_ibu_with_an_unknown_option_names_the_decoder_and_its_options(hr_reports):
    mech, reports = hr_reports
    for call in (lambda: mech.estimate(reports, "ibu", iterations=50),
                 lambda: mech.aggregator().add(reports).estimate("ibu", iterations=50)):
        with pytest.raises(TypeError) as info:
            call()
        message = str(info.value)
        assert "unexpected keyword" not in message
        assert "'ibu'" in message and "HadamardResponse" in message
        assert "iterations" in message and "max_iter" in message and "tol" in message
    # the options it does take still work
    estimate = mech.estimate(reports, "ibu", max_iter=20_000, tol=1e-10)
    assert estimate.shape == (16,) and abs(estimate.sum() - 1) < 1e-9


def test_an_option_of_another_decoder_is_refused(hr_reports):
    mech, reports = hr_reports
    with pytest.raises(ValueError, match=r"decoder 'project' .*takes no option 'max_iter'.*ibu"):
        mech.estimate(reports, "project", max_iter=10)
    with pytest.raises(ValueError, match="sparsity"):
        mech.estimate(reports, "project", sparsity=3)
    with pytest.raises(TypeError, match=r"'raw' .*takes no option 'model'"):
        mech.estimate(reports, "raw", model="exact")


def test_compressive_privatization_names_its_options():
    cp = ldpdist.CompressivePrivatization(64, 2.0, m=32, seed=1)
    reports = cp.privatize(np.arange(300) % 4, seed=2)
    for call in (lambda: cp.estimate(reports, max_iter=5),
                 lambda: cp.estimate(reports, "project", max_iter=5),
                 lambda: cp.aggregator().add(reports).estimate("normalize", max_iter=5)):
        with pytest.raises(TypeError) as info:
            call()
        message = str(info.value)
        assert "unexpected keyword" not in message
        assert "CompressivePrivatization" in message and "max_iter" in message
        assert "model" in message and "sparsity" in message
    assert cp.estimate(reports, "project", sparsity=4, model="exact").shape == (64,)


@pytest.mark.parametrize("name", sorted(registered()))
def test_every_decoder_of_every_mechanism_refuses_an_unknown_option(name):
    mech = _small(name)
    aggregator = mech.aggregator()
    for decoder in mech.decoders:
        options = decoders.decoder_options(mech, decoder)
        with pytest.raises(TypeError, match=rf"decoder {decoder!r}.*takes no option 'bogus'") \
                as info:
            aggregator.estimate(decoder, bogus=1)
        assert type(mech).__name__ in str(info.value)
        for option in options:
            assert option in str(info.value)


def _small(name):
    special = {
        "CompressivePrivatization": {"k": 16, "epsilon": 1.0, "m": 8, "seed": 1},
        "PublicCoinHashing": {"k": 16, "bits": 2, "seed": 1},
        "AsymmetricBinaryResponse": {"epsilon_01": 1.0, "epsilon_10": 2.0},
        "BlockHadamardResponse": {"epsilon": 1.0, "blocks": [4, 4]},
        "HighLowHadamardResponse": {"k": 16, "epsilon": 1.0, "sensitive": [1, 2]},
    }
    return from_dict({"mechanism": name, **special.get(name, {"k": 16, "epsilon": 1.0})})
