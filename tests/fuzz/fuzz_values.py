"""Fuzz: user values (``privatize``, ``simulate``, ``ldpdist privatize``).

Values of every dtype, shape and container (bools, huge ints, NaN, negative, out of range,
strided and big-endian arrays, nested lists, broadcast views of 2^27 to 2^33 entries that
cost no memory), seeds of every type, ``true_counts`` that overflow 64 bits or do not fit
any integer dtype, mechanisms of large k under a 1 GiB memory budget, and the values files
of ``ldpdist privatize`` (text with one integer per line, edited; ``.npy`` files, edited).
See _fuzzing.py for the property.
"""

from __future__ import annotations

import io
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ldpdist
from ldpdist.reports import read_reports

from _fuzzing import (FUZZ, privatize, INTEGER_DTYPES, MECHANISMS, attempt, cast,
                      check_aggregator, check_reports, cli_attempt, decoder_arguments,
                      edited_array, examples, large_spec, lazy_huge_array, mutated_bytes,
                      nasty_scalar, slow_bit_rows, small_mechanism, try_estimate, u64_list,
                      write_spec)

SEEDS = st.one_of(st.none(), st.integers(0, 2**64), st.sampled_from([2**256 - 1, 2**256, -1]),
                  nasty_scalar())


def rows_of(values):
    """How many users an accepted ``values`` holds (1-D: its length)."""
    return int(np.shape(values)[0])


def privatized_well(mech, values, reports, seed, data):
    """An accepted privatize: well-formed reports that the aggregator counts in full,
    reproducible for an integer seed."""
    n = rows_of(values)
    check_reports(mech, reports, n)
    agg = mech.aggregator().add(reports)
    assert agg.n == n and agg.dropped == 0
    check_aggregator(agg, mech)
    if n:
        try_estimate(agg, mech, data.draw(decoder_arguments(), label="decoder"))
    if isinstance(seed, int) and not isinstance(seed, bool) and n <= 64:
        assert np.array_equal(privatize(mech, values, seed), reports)


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_privatize_values(name, data):
    mech = data.draw(small_mechanism(name), label="mechanism")
    base = np.array(data.draw(st.lists(st.integers(0, mech.k - 1), max_size=16), label="base"),
                    dtype=np.int64)
    if data.draw(st.integers(0, 9), label="lazy") == 0:
        values = data.draw(lazy_huge_array(), label="values")
    else:
        values = data.draw(edited_array(base, mech.k), label="values")
    seed = data.draw(SEEDS, label="seed")
    ok, reports = attempt(mech.privatize, values, seed=seed)
    if ok:
        privatized_well(mech, values, reports, seed, data)


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_simulate_true_counts(name, data):
    mech = data.draw(small_mechanism(name), label="mechanism")
    size = data.draw(st.sampled_from([mech.k, mech.k, mech.k, mech.k - 1, mech.k + 1, 0]),
                     label="length")
    base = data.draw(u64_list(size, specials=[0, 1, 2, 2**32, 2**40, 2**62, 2**63, 2**64 - 1],
                              elements=st.integers(0, 10**6)), label="counts")
    if data.draw(st.integers(0, 9), label="lazy") == 0:
        counts = data.draw(lazy_huge_array(), label="true_counts")
    else:
        counts = data.draw(edited_array(np.array(base, dtype=np.uint64), 2**64),
                           label="true_counts")
    seed = data.draw(SEEDS, label="seed")
    ok, agg = attempt(mech.simulate, counts, seed=seed)
    if ok:
        total = sum(int(c) for c in np.asarray(counts).reshape(-1))
        assert agg.n == total and agg.dropped == 0, (agg.n, total)
        check_aggregator(agg, mech)
        if total:
            try_estimate(agg, mech, data.draw(decoder_arguments(), label="decoder"))


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.5)
@given(data=st.data())
def test_large_mechanisms_under_the_memory_guard(name, data):
    """Large k (and m): construction, an aggregator, privatize and simulate are refused by
    the memory guard (MemoryError, before allocating) or succeed; never an abort."""
    ok, mech = attempt(ldpdist.from_dict, data.draw(large_spec(name), label="spec"))
    if not ok:
        return
    attempt(mech.aggregator)
    rows = data.draw(st.sampled_from([0, 1, 3, 100, 2**20]), label="rows")
    if not slow_bit_rows(mech, rows):
        values = np.full(rows, data.draw(st.sampled_from([0, mech.k - 1])), dtype=np.int64)
        ok, reports = attempt(mech.privatize, values, seed=data.draw(st.integers(0, 9)))
        if ok:
            check_reports(mech, reports[:1000], min(rows, 1000))
    if mech.k > 2**20:
        # k entries: a broadcast view (no memory); only a refusal is quick
        counts = np.broadcast_to(np.uint64(data.draw(st.sampled_from([0, 1]))), (mech.k,))
        ok, agg = attempt(mech.simulate, counts, seed=1)
        if ok:
            check_aggregator(agg, mech)


# -- ldpdist privatize ------------------------------------------------------------------------

TOKENS = ["0", "1", "+1", "-0", "-1", " 3 ", "\t2", "3.0", "1e3", "0x1", "1_0", "٣", "３",
          "9" * 25, "9" * 5000, "1" * 4301, "-" + "9" * 19, "", "   ", "a", "1,2", "1;2", "1 2",
          "nan", "\x00", "\ufeff1", "1\x0b2", "1\u20282", "\r", "２", "¹", "1\u00a0"]


@st.composite
def values_text(draw, k):
    lines = [str(v) for v in draw(st.lists(st.integers(0, k - 1), max_size=12))]
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(0, len(lines)))
        lines.insert(position, draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=4),
                                              st.integers().map(str))))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r", "\n\n"]))
    text = newline.join(lines) + draw(st.sampled_from(["", newline]))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    try:
        return text.encode(encoding)
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


@st.composite
def values_npy(draw, k):
    base = np.array(draw(st.lists(st.integers(0, k - 1), max_size=12)), dtype=np.int64)
    array = draw(edited_array(base, k))
    buffer = io.BytesIO()
    try:
        np.save(buffer, np.asarray(array), allow_pickle=draw(st.booleans()))
    except (ValueError, TypeError):
        np.save(buffer, base)
    data = buffer.getvalue()
    kind = draw(st.sampled_from(["keep", "keep", "header", "bytes"]))
    if kind == "header":
        # edit the header dict of the .npy (shape, dtype, order), keeping its length field
        end = 10 + int.from_bytes(data[8:10], "little")
        header = data[10:end].decode("latin-1")
        edit = draw(st.sampled_from([
            ("'shape': (", "'shape': (" + str(draw(st.sampled_from([0, 2**31, 2**40, 2**62,
                                                                    -1]))) + ", "),
            ("'descr': '", "'descr': '" + draw(st.sampled_from(["|O", "<f8", ">u8", "|b1",
                                                               "<U2", "|V3"])) + "' #"),
            ("False", "True"), ("{", "{{"), ("'shape'", "'shapes'"), (")", "))")]))
        header = header.replace(*edit, 1)
        body = header.encode("latin-1")
        body = body[:end - 10].ljust(end - 10, b" ")[:-1] + b"\n"
        data = data[:10] + body + data[end:]
    elif kind == "bytes":
        data = draw(mutated_bytes(data))
    return data


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.6)
@given(data=st.data())
def test_cli_privatize_values_files(name, data):
    mech = data.draw(small_mechanism(name), label="mechanism")
    npy = data.draw(st.booleans(), label="npy")
    blob = data.draw(values_npy(mech.k) if npy else values_text(mech.k), label="file")
    suffix = data.draw(st.sampled_from([".npy", ".txt", ".csv", ""]) if npy
                       else st.sampled_from([".txt", ".csv", "", ".npy"]), label="suffix")
    seed = data.draw(st.one_of(st.none(), st.integers(0, 2**256 + 1), st.just(-1)), label="seed")
    with tempfile.TemporaryDirectory() as folder:
        spec = write_spec(folder, mech)
        path = os.path.join(folder, "values" + suffix)
        with open(path, "wb") as handle:
            handle.write(blob)
        out = os.path.join(folder, "out.ldpr")
        argv = ["privatize", "--spec", spec, path, "-o", out]
        if seed is not None:
            argv += ["--seed", seed]
        ok, _ = cli_attempt(argv)
        if ok:
            batch = read_reports(out, expect=mech)
            check_reports(mech, np.asarray(batch.reports), len(batch))
            assert len(batch) >= 1
            agg = mech.aggregator().add(batch)
            assert agg.n == len(batch)
        else:
            assert not os.path.exists(out)


@FUZZ
@given(dtype=st.sampled_from(INTEGER_DTYPES), data=st.data())
def test_values_of_every_integer_dtype_near_k(dtype, data):
    """Integer values of every dtype around the bounds of every k (2^8, 2^16, 2^32)."""
    k = data.draw(st.sampled_from([2, 255, 256, 257, 2**16, 2**16 + 1, 2**32 - 1, 2**32]))
    ok, mech = attempt(ldpdist.RandomizedResponse, k, 1.0)
    if not ok:
        return
    values = [0, k - 1, k, k + 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1, -1, -2**63]
    chosen = data.draw(st.lists(st.sampled_from(values), min_size=1, max_size=4))
    array = cast(chosen, dtype)
    ok, reports = attempt(mech.privatize, array, seed=1)
    if ok:
        assert all(0 <= int(v) < k for v in array), f"{array} accepted for k = {k}"
        check_reports(mech, reports, array.size)
