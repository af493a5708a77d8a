"""Fuzz: aggregator states (``Aggregator.from_bytes``, ``ldpdist aggregate/estimate``).

Mutated valid states of every mechanism: byte edits with and without a resealed checksum
(a resealed state reaches the header and count checks), header fields edited to values of
every type (huge claimed sizes, n, k), spec edits with and without a recomputed
fingerprint, counts that break or keep the invariants, and the command line on those files.
See _fuzzing.py for the property.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ldpdist
from ldpdist.errors import IntegrityError
from ldpdist.specs import canonical_json

from _fuzzing import (FUZZ, privatize, mutate_header_spec, HUGE_INTS, MECHANISMS, attempt,
                      check_aggregator, cli_attempt, decoder_arguments, examples, json_text,
                      mutated_bytes, mutated_json_text, nasty_scalar, sha256, small_mechanism,
                      try_estimate, u32, u64_list)

MAGIC = b"LDPDAGG2"
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)


def valid_state(data, name):
    """A mechanism and an aggregator of it holding a few batches (deterministic ids)."""
    mech = data.draw(small_mechanism(name), label="mechanism")
    agg = mech.aggregator()
    for batch_id in data.draw(st.lists(HEX, max_size=2, unique=True), label="batches"):
        values = data.draw(st.lists(st.integers(0, mech.k - 1), min_size=1, max_size=12))
        agg.add(privatize(mech, values, data.draw(st.integers(0, 2**32))),
                batch_id=batch_id, label=data.draw(st.text(max_size=8)))
    return mech, agg


def split_state(blob):
    """(header dict, counts bytes) of an intact state."""
    (length,) = struct.unpack_from("<I", blob, 8)
    header = json.loads(blob[12:12 + length])
    offset = 12 + length + (-(12 + length) % 8)
    return header, blob[offset:-32]


def seal(header_text: bytes, counts: bytes, length=None, magic=MAGIC) -> bytes:
    """A state in the documented layout with a valid checksum (what a buggy writer or an
    attacker can produce)."""
    body = magic + u32(len(header_text) if length is None else length) + header_text
    body += b"\0" * (-len(body) % 8)
    body += counts
    return body + sha256(body)


def accepted_state_is_well_formed(agg, data):
    mech = agg.mechanism
    check_aggregator(agg, mech)
    again = ldpdist.Aggregator.from_bytes(agg.to_bytes())
    assert again.n == agg.n and again.dropped == agg.dropped
    assert np.array_equal(again.counts, agg.counts) and again.batches == agg.batches
    try_estimate(agg, mech, data.draw(decoder_arguments(), label="decoder"))


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_mutated_state_bytes(name, data):
    _mech, agg = valid_state(data, name)
    blob = agg.to_bytes()
    reseal = data.draw(st.booleans(), label="reseal")
    mutated = data.draw(mutated_bytes(blob, keep_tail=32 if reseal else 0), label="mutated")
    if reseal and len(mutated) >= 32:
        mutated = mutated[:-32] + sha256(mutated[:-32])
    as_type = data.draw(st.sampled_from([bytes, bytearray, memoryview]), label="type")
    ok, state = attempt(ldpdist.Aggregator.from_bytes, as_type(mutated))
    if not reseal and mutated != blob:  # the checksum covers every byte
        assert not ok and isinstance(state, IntegrityError), (
            f"a changed state was not refused as corrupt: {state!r}")
    if ok:
        accepted_state_is_well_formed(state, data)


def header_edit(data, header):
    """One edit of a header dict (returns a new dict)."""
    header = dict(header)  # shallow: values may nest too deeply for a JSON round trip
    kind = data.draw(st.sampled_from(["field", "field", "spec", "spec", "delete", "extra",
                                      "size", "batches"]), label="edit")
    if kind in ("field", "delete") and not header:
        kind = "extra"
    if kind == "spec" and not isinstance(header.get("spec"), dict):
        kind = "field"  # an earlier edit removed the spec or replaced it with a non-dict
    if kind == "field":
        key = data.draw(st.sampled_from(sorted(header)), label="field")
        header[key] = data.draw(nasty_scalar(numpy=False), label="value")
    elif kind == "spec":
        mutate_header_spec(data, header)
    elif kind == "delete":
        del header[data.draw(st.sampled_from(sorted(header)), label="deleted")]
    elif kind == "extra":
        header[data.draw(st.text(max_size=5), label="key")] = data.draw(nasty_scalar(False))
    elif kind == "size":
        header[data.draw(st.sampled_from(["n", "dropped", "size"]))] = data.draw(
            st.sampled_from(HUGE_INTS + [0, 1, 2]), label="claimed")
    else:
        entry = data.draw(st.one_of(
            st.lists(st.one_of(st.text(max_size=130), nasty_scalar(False)), max_size=3),
            nasty_scalar(False)), label="batch entry")
        if data.draw(st.booleans()) and isinstance(header.get("batches"), list):
            header["batches"] = header["batches"] + [entry]
        else:
            header["batches"] = entry
    return header


def counts_edit(data, counts, size):
    kind = data.draw(st.sampled_from(["keep", "keep", "values", "length"]), label="counts")
    if kind == "keep":
        return counts
    if kind == "values":
        values = data.draw(u64_list(size), label="count values")
        return np.array(values, dtype="<u8").tobytes()
    return counts[:data.draw(st.integers(0, len(counts)))] + bytes(8 * data.draw(
        st.integers(0, 3)))


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_edited_state_headers(name, data):
    _mech, agg = valid_state(data, name)
    header, counts = split_state(agg.to_bytes())
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        header = header_edit(data, header)
    text = json_text(header)
    if data.draw(st.integers(0, 4), label="text edit") == 0:
        text = data.draw(mutated_json_text(text), label="text")
    counts = counts_edit(data, counts, agg.counts.size)
    encoding = data.draw(st.sampled_from(["ascii", "utf-8", "utf-16", "latin-1"]),
                         label="encoding")
    try:
        header_bytes = text.encode(encoding)
    except UnicodeEncodeError:
        header_bytes = text.encode("utf-8", "surrogatepass")
    length = data.draw(st.one_of(st.none(), st.sampled_from([0, 1, 2**31, 2**32 - 1]),
                                 st.integers(0, len(header_bytes) + 16)), label="length")
    ok, state = attempt(ldpdist.Aggregator.from_bytes, seal(header_bytes, counts, length))
    if ok:
        accepted_state_is_well_formed(state, data)


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_forged_counts_and_n(name, data):
    """A valid header with a consistent fingerprint, any n/dropped and any counts: only
    states whose counts agree with n (the documented invariants) may be accepted."""
    mech = data.draw(small_mechanism(name), label="mechanism")
    size = mech.aggregator().counts.size
    counts = data.draw(u64_list(size), label="counts")
    n = data.draw(st.one_of(st.just(sum(counts)), st.sampled_from([0, 1, 2**63, 2**64 - 1]),
                            st.integers(0, 2**64 - 1)), label="n")
    spec = mech.to_dict()
    header = {"format": "ldpdist-state", "version": 2, "mechanism": spec["mechanism"],
              "spec": spec, "fingerprint": mech.fingerprint, "n": n,
              "dropped": data.draw(st.sampled_from([0, 2**64 - 1])), "size": size,
              "batches": []}
    blob = seal(canonical_json(header).encode(), np.array(counts, dtype="<u8").tobytes())
    ok, state = attempt(ldpdist.Aggregator.from_bytes, blob)
    if ok:
        accepted_state_is_well_formed(state, data)
        other = mech.aggregator().add(privatize(mech, [0, mech.k - 1], 1))
        ok, merged = attempt(state.merge, other)
        if ok:
            check_aggregator(merged, mech)


@FUZZ
@given(value=nasty_scalar())
def test_from_bytes_of_other_types(value):
    attempt(ldpdist.Aggregator.from_bytes, value)


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.5)
@given(data=st.data())
def test_cli_on_mutated_state_files(name, data):
    mech, agg = valid_state(data, name)
    blob = agg.to_bytes()
    if data.draw(st.booleans(), label="header edit"):
        header, counts = split_state(blob)
        blob = seal(json_text(header_edit(data, header)).encode("utf-8", "surrogatepass"),
                    counts)
    else:
        blob = data.draw(mutated_bytes(blob, keep_tail=32), label="mutated")
        if len(blob) >= 32 and data.draw(st.booleans(), label="reseal"):
            blob = blob[:-32] + sha256(blob[:-32])
    decoder = data.draw(st.sampled_from(["raw", "normalize", "project"]), label="decoder")
    with tempfile.TemporaryDirectory() as folder:
        spec = os.path.join(folder, "spec.json")
        state = os.path.join(folder, "in.ldps")
        with open(spec, "w") as handle:
            json.dump(mech.to_dict(), handle)
        with open(state, "wb") as handle:
            handle.write(blob)
        out = os.path.join(folder, "estimate.csv")
        ok, _ = cli_attempt(["estimate", "--spec", spec, state, "--decoder", decoder, "-o", out])
        if ok:
            with open(out) as handle:
                lines = handle.read().splitlines()
            assert lines[0] == "value,probability" and len(lines) == mech.k + 1
            values = np.array([float(line.split(",")[1]) for line in lines[1:]])
            assert np.isfinite(values).all()
        merged = os.path.join(folder, "out.ldps")
        ok, _ = cli_attempt(["aggregate", "--spec", spec, state, "-o", merged])
        if ok:
            with open(merged, "rb") as handle:
                check_aggregator(ldpdist.Aggregator.from_bytes(handle.read()), mech)
