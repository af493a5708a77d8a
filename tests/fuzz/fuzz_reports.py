"""Fuzz: reports (``Aggregator.add``, ``Mechanism.estimate``, reports files, raw ``.npy``
reports, ``ldpdist aggregate/estimate``).

Report arrays of every dtype, shape, layout and value (valid reports with entries out of
range, negative, huge, flipped bits and padding bits, broadcast views of more than 2^28
rows that cost no memory), reports files (``LDPDREP2`` containers, and the legacy
``LDPDREP1`` ones) with byte edits (any change to a version 2 file must be refused as
corruption: its checksums cover every byte) and with edited headers whose payload hash,
fingerprint and header checksum are recomputed (a forger's file reaches every check), raw
``.npy`` report files with edited headers and bytes, read with and without
``--raw-reports``, and the command line on all of them (a changed copy aggregated beside
its original is never counted). See _fuzzing.py for the property.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ldpdist
from ldpdist.reports import (REPORTS_MAGIC, decode_reports, encode_reports, provenance_from_json,
                             provenance_json, read_reports)

from ldpdist.errors import IntegrityError

from _fuzzing import (FUZZ, privatize, mutate_header_spec, HUGE_INTS, MECHANISMS, attempt,
                      check_aggregator, check_estimate, cli_attempt, decoder_arguments,
                      edited_array, examples, json_text, lazy_huge_array, mutated_bytes,
                      mutated_json_text, nasty_scalar, sha256, small_mechanism, try_estimate,
                      u32, write_spec)

LEGACY_MAGIC = b"LDPDREP1"

ON_INVALID = st.sampled_from(["raise", "raise", "drop", "drop", "Drop", None, 1])


def valid_reports(data, mech):
    values = data.draw(st.lists(st.integers(0, mech.k - 1), max_size=16), label="values")
    return privatize(mech, values, data.draw(st.integers(0, 2**32), label="seed"))


@st.composite
def bit_edits(draw, reports, mech):
    """Packed rows with bits flipped: in the k bits (a subset of the wrong size for SS) or
    in the padding after them."""
    reports = reports.copy()
    if reports.size == 0:
        return reports
    for _ in range(draw(st.integers(1, 4))):
        row = draw(st.integers(0, reports.shape[0] - 1))
        bit = draw(st.one_of(st.integers(0, 8 * reports.shape[1] - 1),
                             st.integers(mech.output_size, 8 * reports.shape[1] - 1)
                             if mech.output_size % 8 else st.just(0)))
        reports[row, bit // 8] ^= np.uint8(0x80 >> (bit % 8))
    return reports


def report_input(data, mech, reports):
    """An edited version of valid ``reports`` (an array of any kind, a list, a scalar)."""
    width = reports.shape[1] if reports.ndim == 2 else None
    kind = data.draw(st.sampled_from(["edited", "edited", "bits", "lazy", "keep"]), label="kind")
    if kind == "lazy":
        return data.draw(lazy_huge_array(width=width), label="reports")
    if kind == "bits" and width is not None:
        return data.draw(bit_edits(reports, mech), label="reports")
    if kind == "keep":
        return reports
    high = 256 if width is not None else mech.output_size
    return data.draw(edited_array(reports.astype(np.int64), high), label="reports")


def counted_well(agg, mech, reports, on_invalid):
    """An accepted add: invariants, and every report counted or (with drop) dropped."""
    check_aggregator(agg, mech)
    rows = int(np.shape(reports)[0])
    if on_invalid == "raise":
        assert agg.n == rows and agg.dropped == 0, (agg.n, agg.dropped, rows)
    else:
        assert agg.n + agg.dropped == rows, (agg.n, agg.dropped, rows)


def declared_or_not(data, mech, reports):
    """Edited reports are plain arrays, lists or scalars: most of the time declared with
    ``mech.as_reports`` (so that the edits reach the report checks), sometimes passed as
    they are (refused whatever they hold: an untagged array is never counted)."""
    if isinstance(reports, ldpdist.Reports) or not data.draw(
            st.sampled_from([True, True, True, False]), label="declared"):
        return reports
    ok, declared = attempt(mech.as_reports, reports)
    return declared if ok else reports


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_report_arrays(name, data):
    mech = data.draw(small_mechanism(name), label="mechanism")
    reports = declared_or_not(data, mech, report_input(data, mech, valid_reports(data, mech)))
    typed = isinstance(reports, ldpdist.Reports)
    on_invalid = data.draw(ON_INVALID, label="on_invalid")
    agg = mech.aggregator()
    ok, refused = attempt(agg.add, reports, on_invalid)
    if not typed:
        assert not ok, "an undeclared array was counted"
        if on_invalid in ("raise", "drop"):
            assert isinstance(refused, TypeError) and "as_reports" in str(refused), refused
    if ok:
        counted_well(agg, mech, reports, on_invalid)
        if agg.n:
            try_estimate(agg, mech, data.draw(decoder_arguments(), label="decoder"))
    else:
        # a refused add changes nothing
        assert agg.n == 0 and agg.dropped == 0 and not agg.counts.any() and not agg.batches
    decoder, options = data.draw(decoder_arguments(), label="estimate decoder")
    ok, estimate = attempt(mech.estimate, reports, decoder, on_invalid=on_invalid, **options)
    if not typed:
        assert not ok and isinstance(estimate, TypeError), estimate
    if ok:
        check_estimate(mech, estimate, decoder, options.get("sparsity"))


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.5)
@given(data=st.data())
def test_add_arguments(name, data):
    """batch_id, label and on_invalid of every type; the same batch twice."""
    mech = data.draw(small_mechanism(name), label="mechanism")
    reports = valid_reports(data, mech)
    agg = mech.aggregator()
    batch_id = data.draw(st.one_of(st.none(), st.text(max_size=70), nasty_scalar()),
                         label="batch_id")
    label = data.draw(st.one_of(st.text(max_size=300), nasty_scalar()), label="label")
    ok, _ = attempt(agg.add, reports, data.draw(ON_INVALID), batch_id=batch_id, label=label)
    if ok:
        check_aggregator(agg, mech)
        again = ldpdist.Aggregator.from_bytes(agg.to_bytes())
        assert again.batch_labels() == agg.batch_labels()
        ok, _ = attempt(agg.add, reports, batch_id=batch_id)
        assert not ok or batch_id is None, "the same batch id was counted twice"
    ok, _ = attempt(mech.decode_string, reports, data.draw(nasty_scalar(), label="normalization"))


# -- reports files ----------------------------------------------------------------------------


def split_reports(blob):
    """(header dict, payload bytes) of an intact reports file (version 2 or 1)."""
    (length,) = struct.unpack_from("<I", blob, 8)
    end = 12 + length + (32 if blob[:8] == REPORTS_MAGIC else 0)
    return json.loads(blob[12:12 + length]), blob[end + (-end % 64):]


def pack_reports(header_bytes, payload, length=None, magic=REPORTS_MAGIC, seal=True):
    """A reports file in the documented layout: version 2 (``magic`` = ``LDPDREP2``) with a
    header checksum (a valid one with ``seal``, what a forger computes, else zeros), or the
    legacy version 1 (``LDPDREP1``) without one."""
    prefix = magic + u32(len(header_bytes) if length is None else length) + header_bytes
    if magic == REPORTS_MAGIC:
        prefix += sha256(prefix) if seal else bytes(32)
    return prefix + b"\0" * (-len(prefix) % 64) + payload


def legacy_file(blob):
    """The version 1 file (ldpdist 0.1.0's layout) of the same batch as the version 2
    file ``blob``."""
    header, payload = split_reports(blob)
    header["version"] = 1
    return pack_reports(json_text(header).encode(), payload, magic=LEGACY_MAGIC)


def batch_well_formed(batch, mech, data):
    """A decoded batch: reports of the declared kind, counted (or refused) by an aggregator
    of its spec."""
    assert isinstance(batch, ldpdist.ReportBatch)
    assert batch.reports.ndim == (2 if mech.report_kind == "bits" else 1)
    agg = mech.aggregator()
    ok, _ = attempt(agg.add, batch, data.draw(ON_INVALID, label="on_invalid"))
    if ok:
        check_aggregator(agg, mech)
        if agg.n:
            try_estimate(agg, mech, data.draw(decoder_arguments(), label="decoder"))


def read_both_ways(blob, mech, data):
    """decode_reports (bytes, bytearray or memoryview) and read_reports (a file), with and
    without the expected mechanism: they agree, and accepted batches are well formed."""
    expect = mech if data.draw(st.booleans(), label="expect") else None
    as_type = data.draw(st.sampled_from([bytes, bytearray, memoryview]), label="type")
    ok, batch = attempt(decode_reports, as_type(blob), expect=expect)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r.ldpr")
        with open(path, "wb") as handle:
            handle.write(blob)
        ok_file, from_file = attempt(read_reports, path, expect=expect)
        assert ok == ok_file, (batch, from_file)
        if ok:
            assert from_file.batch_id == batch.batch_id
            assert np.array_equal(np.asarray(from_file.reports), batch.reports)
            used = expect if expect is not None else ldpdist.from_dict(batch.spec)
            batch_well_formed(from_file, used, data)
    return ok, batch


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_mutated_reports_file_bytes(name, data):
    """Byte edits: any change to a version 2 file is refused as corruption (every byte is
    covered by a checksum); a legacy version 1 file is refused or read as documented."""
    mech = data.draw(small_mechanism(name), label="mechanism")
    blob, _batch = encode_reports(mech, valid_reports(data, mech))
    legacy = data.draw(st.integers(0, 3), label="legacy") == 0
    if legacy:
        blob = legacy_file(blob)
    mutated = data.draw(mutated_bytes(blob), label="mutated")
    ok, refused = read_both_ways(mutated, mech, data)
    if not legacy and mutated != blob:
        assert not ok and isinstance(refused, IntegrityError), (
            f"a changed reports file was not refused as corrupt: {refused!r}")


def reports_header_edit(data, header):
    header = dict(header)
    kind = data.draw(st.sampled_from(["field", "dtype", "shape", "shape", "spec", "spec",
                                      "delete", "extra"]), label="edit")
    if kind in ("field", "delete") and not header:
        kind = "extra"
    if kind == "spec" and not isinstance(header.get("spec"), dict):
        kind = "field"
    if kind == "field":
        header[data.draw(st.sampled_from(sorted(header)), label="field")] = data.draw(
            nasty_scalar(numpy=False), label="value")
    elif kind == "dtype":
        header["dtype"] = data.draw(st.sampled_from(
            ["|u1", "<u2", "<u4", "<u8", ">u8", "|i1", "<i8", "|b1", "<f8", "|O", "|V8",
             "<U1", "u8", "", "<u16"]), label="dtype")
    elif kind == "shape":
        dims = st.one_of(st.sampled_from(HUGE_INTS + [0, 1, 2, 3]), nasty_scalar(numpy=False))
        header["shape"] = data.draw(st.one_of(st.lists(dims, max_size=3), nasty_scalar(False)),
                                    label="shape")
    elif kind == "spec":
        mutate_header_spec(data, header)
    elif kind == "delete":
        del header[data.draw(st.sampled_from(sorted(header)), label="deleted")]
    else:
        header[data.draw(st.text(max_size=5), label="key")] = data.draw(nasty_scalar(False))
    return header


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_edited_reports_headers(name, data):
    """Headers edited and resealed: payload hash recomputed over a payload that may be
    replaced (other values, other length), canonical JSON, length field as written or not."""
    mech = data.draw(small_mechanism(name), label="mechanism")
    blob, _batch = encode_reports(mech, valid_reports(data, mech))
    header, payload = split_reports(blob)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        header = reports_header_edit(data, header)
    payload_kind = data.draw(st.sampled_from(["keep", "keep", "random", "cut"]), label="payload")
    if payload_kind == "random":
        payload = data.draw(st.binary(max_size=200), label="new payload")
    elif payload_kind == "cut":
        payload = payload[:data.draw(st.integers(0, len(payload)))]
    if data.draw(st.integers(0, 3), label="rehash") > 0 and isinstance(header, dict):
        header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    text = json_text(header)
    if data.draw(st.integers(0, 4), label="text edit") == 0:
        text = data.draw(mutated_json_text(text), label="text")
    header_bytes = text.encode("utf-8", "surrogatepass")
    length = data.draw(st.one_of(st.none(), st.none(), st.sampled_from([0, 2**20 + 1, 2**32 - 1]),
                                 st.integers(0, len(header_bytes) + 70)), label="length")
    layout = data.draw(st.sampled_from(["sealed", "sealed", "sealed", "unsealed", "legacy"]),
                       label="layout")
    magic = LEGACY_MAGIC if layout == "legacy" else REPORTS_MAGIC
    if layout == "legacy" and isinstance(header, dict) and header.get("version") == 2:
        header_bytes = header_bytes.replace(b'"version":2', b'"version":1')
    read_both_ways(pack_reports(header_bytes, payload, length, magic, layout == "sealed"),
                   mech, data)


@FUZZ
@given(value=nasty_scalar())
def test_decode_reports_of_other_types(value):
    attempt(decode_reports, value)
    attempt(decode_reports, b"LDPDREP2", expect=value)


@examples(0.6)
@given(data=st.data())
def test_reports_provenance_text(data):
    """The provenance that travels beside a Reports array between processes (the header
    :mod:`ldpdist.dask` adds), edited: read back exactly, or refused; what is read back is
    counted only by an aggregator of that fingerprint."""
    name = data.draw(st.sampled_from(MECHANISMS), label="mechanism name")
    mech = data.draw(small_mechanism(name), label="mechanism")
    reports = valid_reports(data, mech)
    text = provenance_json(reports)
    kind = data.draw(st.sampled_from(["keep", "text", "field", "delete", "scalar"]),
                     label="edit")
    if kind == "text":
        text = data.draw(mutated_json_text(text), label="text")
    elif kind in ("field", "delete"):
        tag = json.loads(text)
        key = data.draw(st.sampled_from(sorted(tag) + ["bogus"]), label="field")
        if kind == "delete":
            tag.pop(key, None)
        else:
            tag[key] = data.draw(nasty_scalar(numpy=False), label="value")
        text = json_text(tag)
    elif kind == "scalar":
        text = data.draw(nasty_scalar(), label="value")
    ok, tag = attempt(provenance_from_json, text)
    if kind == "keep":
        assert ok and tag == (mech.fingerprint, name, mech.to_dict()), tag
    if ok and tag is not None:
        tagged = ldpdist.Reports._tagged(np.asarray(reports), *tag)
        ok, _ = attempt(mech.aggregator().add, tagged)
        assert not ok or tag[0] == mech.fingerprint, "reports of another spec were counted"


# -- raw .npy reports and the command line ----------------------------------------------------


@st.composite
def npy_file(draw, array):
    """``np.save`` bytes of ``array``, then edits of its header or bytes."""
    buffer = io.BytesIO()
    try:
        np.save(buffer, array, allow_pickle=draw(st.booleans()))
    except (ValueError, TypeError):
        np.save(buffer, np.zeros(3, np.uint8))
    data = buffer.getvalue()
    kind = draw(st.sampled_from(["keep", "keep", "header", "bytes", "fortran"]))
    if kind in ("header", "fortran"):
        end = 10 + int.from_bytes(data[8:10], "little")
        header = data[10:end].decode("latin-1")
        if kind == "fortran":
            edit = ("False", "True")
        else:
            edit = draw(st.sampled_from([
                ("'shape': (", "'shape': (" + str(draw(st.sampled_from(
                    [0, 2**31, 2**40, 2**62, 2**63, 2**64, -1, 10**30]))) + ", "),
                ("'descr': '", "'descr': '" + draw(st.sampled_from(
                    ["|O", "<f8", ">u8", "|b1", "<U2", "|V3", "<i8", "|u1"])) + "' #"),
                ("{", "{{"), ("{", "{" + "(" * 300), ("'shape'", "'shapes'"), (")", "))"),
                ("'descr': ", "'descr': [('a', '<u4', (99999999999,))] #")]))
        header = header.replace(*edit, 1)
        body = header.encode("latin-1")[:end - 10].ljust(end - 10, b" ")[:-1] + b"\n"
        data = data[:10] + body + data[end:]
    elif kind == "bytes":
        data = draw(mutated_bytes(data))
    return data


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.6)
@given(data=st.data())
def test_cli_on_reports_files(name, data):
    """``ldpdist estimate`` and ``aggregate`` on mutated reports files and on raw .npy
    arrays of any kind, with and without --raw-reports, --on-invalid drop; ``aggregate`` of
    a reports file beside a copy of it, changed or not, never counts both."""
    mech = data.draw(small_mechanism(name), label="mechanism")
    reports = valid_reports(data, mech)
    original = None
    if data.draw(st.booleans(), label="raw"):
        array = report_input(data, mech, reports)
        if not isinstance(array, np.ndarray) or array.nbytes > 2**24 or array.dtype.kind == "O":
            array = reports  # np.save takes arrays of reasonable size
        blob = data.draw(npy_file(array), label="npy")
    else:
        blob, _batch = encode_reports(mech, reports)
        original = blob
        if data.draw(st.booleans(), label="mutate"):
            blob = data.draw(mutated_bytes(blob), label="mutated")
    flags = []
    if data.draw(st.booleans(), label="--raw-reports"):
        flags.append("--raw-reports")
    if data.draw(st.booleans(), label="--on-invalid drop"):
        flags += ["--on-invalid", "drop"]
    decoder = data.draw(st.sampled_from(["raw", "normalize", "project", "ibu"]), label="decoder")
    with tempfile.TemporaryDirectory() as folder:
        spec = write_spec(folder, mech)
        path = os.path.join(folder, data.draw(st.sampled_from(["r.ldpr", "r.npy", "r"]),
                                              label="file name"))
        with open(path, "wb") as handle:
            handle.write(blob)
        out = os.path.join(folder, "estimate.csv")
        ok, _ = cli_attempt(["estimate", "--spec", spec, path, "--decoder", decoder, "-o", out]
                            + flags)
        if ok:
            with open(out) as handle:
                lines = handle.read().splitlines()
            assert lines[0] == "value,probability" and len(lines) == mech.k + 1
            assert np.isfinite([float(line.split(",")[1]) for line in lines[1:]]).all()
        else:
            assert not os.path.exists(out)
        state = os.path.join(folder, "out.ldps")
        inputs = [path] * data.draw(st.sampled_from([1, 1, 2]), label="copies")
        if original is not None and data.draw(st.booleans(), label="beside the original"):
            inputs = [os.path.join(folder, "original.ldpr"), path]
            with open(inputs[0], "wb") as handle:
                handle.write(original)
        ok, _ = cli_attempt(["aggregate", "--spec", spec, *inputs, "-o", state] + flags)
        if ok:
            assert len(inputs) == 1, "a batch was aggregated twice (a copy, changed or not)"
            with open(state, "rb") as handle:
                check_aggregator(ldpdist.Aggregator.from_bytes(handle.read()), mech)
        else:
            assert not os.path.exists(state)
