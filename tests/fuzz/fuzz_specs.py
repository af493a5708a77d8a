"""Fuzz: mechanism specs (``from_dict``, the constructors, ``fingerprint``, spec JSON files of
the command line, ``ldpdist spec``).

Valid specs of every mechanism with fields edited to values of every type (huge and
negative sizes, NaN and infinite ε, seeds beyond 2^256, strings, containers nested
thousands deep, numpy scalars and arrays), fields deleted or added, other mechanism names
and formats; the JSON text of specs edited (NaN, huge numbers, deep nesting, invalid UTF-8,
byte edits) and read by the commands' ``--spec``; ``ldpdist spec`` with edited options; and
large sizes under the 1 GiB memory budget. An accepted spec must give a well-formed
mechanism that round-trips through ``to_dict``. Generated spec files (``to_json``, with the
fingerprint they record) edited by hand: an accepted one is the mechanism that wrote it, and
a key given twice is always refused. The linear-query protocols' specs (``from_dict`` of
each protocol) with fields edited, deleted or added. See _fuzzing.py for the property.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ldpdist
from ldpdist import privacy
from ldpdist.reports import read_reports
from ldpdist import linear
from ldpdist.specs import canonical_json, fingerprint, from_json, parse_json, registered, to_json

from _fuzzing import (FUZZ, privatize, HUGE_INTS, MECHANISMS, attempt, check_reports,
                      cli_attempt, examples, json_text, large_spec, mutated_bytes,
                      mutated_json_text, nasty_scalar, slow_bit_rows, small_spec)

NAMES = st.one_of(st.sampled_from(MECHANISMS), st.sampled_from(
    ["rr", "hr", "RANDOMIZEDRESPONSE", "Mechanism", "BitVectorMechanism", "", "Aggregator",
     "randomizedresponse", "RandomizedResponse ", "__class__"]), nasty_scalar())


def mechanism_well_formed(mech, spec=None):
    """What every accepted spec must give."""
    assert isinstance(mech, ldpdist.Mechanism)
    again = ldpdist.from_dict(mech.to_dict())
    assert again == mech and again.fingerprint == mech.fingerprint
    text = canonical_json(mech.to_dict())
    assert ldpdist.from_dict(json.loads(text)) == mech
    assert re.fullmatch("[0-9a-f]{64}", mech.fingerprint)
    assert isinstance(mech.k, int) and 2 <= mech.k <= 2**32
    assert isinstance(mech.output_size, int) and mech.output_size >= 2
    private = getattr(mech, "private", True)
    if private and mech.context_aware:
        budgets_well_formed(mech)
    else:
        realized = mech.realized_epsilon if private else None
        assert not private or (np.isfinite(realized) and realized > 0)
        opted_out = getattr(mech, "_calibrate", True) is False
        if private and not opted_out:
            assert mech.epsilon * (1 - 1.01e-3) <= realized <= mech.epsilon * (1 + 1e-12), (
                realized, mech.epsilon)
    repr(mech)
    if spec is not None:
        for key, value in spec.items():
            if key == "blocks" and mech.context_aware:
                # the partition is kept as the same partition (its spec: the sizes when the
                # blocks are contiguous, canonical for a stable fingerprint)
                assert np.array_equal(privacy.block_labels(value), mech.labels), (key, value)
                continue
            if key not in ("format",) and key in mech.to_dict() and value is not None:
                # accepted values are kept as given (no silent cast or clip); an infinite
                # budget is written "inf" (JSON has no infinity); a set (the sensitive values
                # of High-Low HR) is kept sorted, its canonical order
                kept = mech.to_dict()[key]
                if key == "sensitive":
                    assert kept == sorted(int(v) for v in np.asarray(value).reshape(-1)), (
                        key, value, kept)
                else:
                    assert kept == value or (kept == "inf" and value == math.inf), (
                        key, value, kept)
    if mech.k <= 2**16:
        reports = privatize(mech, [0, mech.k - 1], 1)
        check_reports(mech, reports, 2)
        if getattr(mech, "degenerate", False):  # a zero budget: a constant report
            ok, refusal = attempt(mech.estimate, reports, "project")
            assert not ok and "nothing can be estimated" in str(refusal), refusal
            return
        estimate = mech.estimate(reports, "project")
        assert estimate.shape == (mech.k,) and abs(estimate.sum() - 1) < 1e-6


def budgets_well_formed(mech):
    """A context-aware mechanism: its realized budget matrix never exceeds the promise. The
    asymmetric binary mechanism is tight on both budgets: each finite positive one of a
    non-degenerate mechanism is realized within the shared rule's tolerance, and
    ``epsilon`` / ``realized_epsilon`` are the largest entries."""
    promised, realized = mech.budgets(), mech.realized_budgets()
    assert promised.shape == realized.shape == (mech.k, mech.k)
    assert (realized <= promised).all(), (realized, promised)
    if type(mech).__name__ != "AsymmetricBinaryResponse":
        return
    assert mech.epsilon == promised.max() and mech.realized_epsilon == realized.max()
    if mech.degenerate:
        return
    tight = np.isfinite(promised) & (promised > 0)
    assert (realized[tight] >= promised[tight] * (1 - 1.01e-3)).all(), (realized, promised)


def spec_edit(data, spec):
    spec = dict(spec)
    kind = data.draw(st.sampled_from(["field", "field", "field", "delete", "extra", "name",
                                      "format", "huge"]), label="edit")
    if kind in ("field", "delete") and not spec:
        kind = "extra"
    if kind == "field":
        key = data.draw(st.sampled_from(sorted(spec, key=str)), label="field")
        spec[key] = data.draw(nasty_scalar(), label="value")
    elif kind == "delete":
        del spec[data.draw(st.sampled_from(sorted(spec, key=str)), label="deleted")]
    elif kind == "extra":
        key = data.draw(st.one_of(st.sampled_from(["seed", "m", "d", "blocks", "matrix",
                                                   "regime", "calibrate", "model", "n"]),
                                  st.text(max_size=5), st.integers(), st.none(),
                                  st.tuples(st.integers())), label="key")
        spec[key] = data.draw(nasty_scalar(), label="value")
    elif kind == "name":
        spec["mechanism"] = data.draw(NAMES, label="name")
    elif kind == "format":
        spec["format"] = data.draw(st.one_of(st.sampled_from([0, 1, 2, 1.0, True, "1"]),
                                             nasty_scalar()), label="format")
    else:
        key = data.draw(st.sampled_from(["k", "m", "d", "blocks", "seed"]), label="size")
        spec[key] = data.draw(st.sampled_from(HUGE_INTS + [0, 1, 2, 3]), label="claimed")
    return spec


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_edited_spec_dicts(name, data):
    spec = data.draw(small_spec(name), label="spec")
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        spec = spec_edit(data, spec)
    ok, mech = attempt(ldpdist.from_dict, spec)
    if ok:
        mechanism_well_formed(mech, spec)
    # the fingerprint of any dict: a hex digest or a ValueError
    ok, digest = attempt(fingerprint, spec)
    if ok:
        assert re.fullmatch("[0-9a-f]{64}", digest)


@pytest.mark.parametrize("name", MECHANISMS)
@FUZZ
@given(data=st.data())
def test_constructors(name, data):
    """The classes themselves, with keyword and positional arguments of every type."""
    spec = data.draw(small_spec(name), label="spec")
    spec.pop("mechanism")
    spec.pop("format")
    for _ in range(data.draw(st.integers(0, 2), label="edits")):
        key = data.draw(st.sampled_from(sorted(spec) + ["bogus"]), label="field")
        spec[key] = data.draw(nasty_scalar(), label="value")
    cls = registered()[name]
    if data.draw(st.booleans(), label="positional"):
        ok, mech = attempt(cls, *spec.values())
    else:
        ok, mech = attempt(cls, **spec)
    if ok:
        mechanism_well_formed(mech)


@FUZZ
@given(value=st.one_of(nasty_scalar(), st.dictionaries(nasty_scalar(numpy=False).filter(
    lambda v: isinstance(v, (str, int, float, type(None)))), nasty_scalar(), max_size=4)))
def test_from_dict_of_anything(value):
    ok, mech = attempt(ldpdist.from_dict, value)
    if ok:
        mechanism_well_formed(mech)


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.5)
@given(data=st.data())
def test_large_specs(name, data):
    """Large k (and m, d, blocks) under a 1 GiB budget: refused (CP's matrix by the memory
    guard) or well formed, within milliseconds."""
    ok, mech = attempt(ldpdist.from_dict, data.draw(large_spec(name), label="spec"))
    if ok:
        assert mech == ldpdist.from_dict(mech.to_dict())
        ok, agg = attempt(mech.aggregator)
        if not slow_bit_rows(mech, 2):
            ok, reports = attempt(mech.privatize, [0, mech.k - 1], seed=1)
            if ok:
                check_reports(mech, reports, 2)


# -- spec files and the command line ----------------------------------------------------------


@st.composite
def spec_file(draw, name):
    """Bytes of a spec file: the JSON of a (possibly edited) spec, then text or byte edits."""
    spec = draw(small_spec(name))
    text = draw(st.sampled_from([canonical_json(spec), json.dumps(spec, indent=2)]))
    kind = draw(st.sampled_from(["keep", "text", "text", "bytes", "value", "generated",
                                 "duplicate"]))
    if kind == "duplicate":  # a key given twice: refused by the API and the command
        text = draw(duplicated_key(text))
    elif kind == "generated":  # ldpdist spec's output, maybe edited (the fingerprint stays)
        try:
            text = to_json(ldpdist.from_dict(spec))
        except ValueError:
            pass
        else:
            edited = json.loads(text)
            if draw(st.booleans()):
                edited[draw(st.sampled_from(sorted(edited)))] = draw(nasty_scalar(numpy=False))
                text = json_text(edited)
    elif kind == "text":
        text = draw(mutated_json_text(text))
    elif kind == "value":
        spec[draw(st.sampled_from(sorted(spec)))] = draw(nasty_scalar(numpy=False))
        text = json_text(spec)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    try:
        blob = text.encode(encoding)
    except UnicodeEncodeError:
        blob = text.encode("utf-8", "surrogatepass")
    if kind == "bytes":
        blob = draw(mutated_bytes(blob))
    return blob


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.6)
@given(data=st.data())
def test_cli_spec_files(name, data):
    """``--spec FILE`` of ``ldpdist privatize`` (the loader all commands share): accepted
    exactly when the API accepts the parsed JSON, and then for that mechanism."""
    blob = data.draw(spec_file(name), label="spec file")
    ok_api, mech = False, None
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        ok, parsed = attempt(parse_json, text, "the spec")
        if ok:
            ok_api, mech = attempt(ldpdist.from_dict, parsed)
    if ok_api and slow_bit_rows(mech, 2):
        return  # a valid spec of a huge bit-vector mechanism: privatizing is slow, not wrong
    with tempfile.TemporaryDirectory() as folder:
        spec = os.path.join(folder, "spec.json")
        with open(spec, "wb") as handle:
            handle.write(blob)
        values = os.path.join(folder, "values.txt")
        with open(values, "w") as handle:
            handle.write("0\n1\n")
        out = os.path.join(folder, "r.ldpr")
        seeded = not ok_api or getattr(mech, "randomized", True)  # pch takes no --seed
        ok, refusal = cli_attempt(["privatize", "--spec", spec, values, "-o", out]
                                  + (["--seed", "3"] if seeded else []))
        if ok:
            assert ok_api, "the command accepted a spec that from_dict refuses"
            assert read_reports(out).fingerprint == mech.fingerprint
        else:
            assert not os.path.exists(out)
            assert not ok_api or isinstance(refusal, MemoryError) or mech.k > 2**20, \
                f"the command refused a spec that from_dict accepts: {refusal}"


SPEC_COMMAND_NAMES = ["rr", "hr", "rappor", "oue", "olh", "ss", "cp", "abr", "bhr", "hlhr",
                      "RandomizedResponse", "Hadamardresponse", "AsymmetricBinaryResponse", "xx",
                      ""]
BLOCK_SIZES = ["2,3", "1,1", "3", "1,1,2", "0,1", "2,-1", "2;3", "2,,3", " 2, 3 ", "4294967296,1",
               "9" * 30]
SENSITIVE_LISTS = ["1,5,9", "", "0", "3,3", "1,,2", "-1", "a", "9" * 30, "0, 2 ,4", "+1"]
NUMBERS = ["0", "1", "2", "-1", "3", "16", "1e400", "nan", "inf", "-inf", "0.5", "700",
           "700.1", "1e-320", "4294967296", "4294967297", "18446744073709551616", "1_0", "٣",
           "0x10", "", " 5", "9" * 5000]


@FUZZ
@given(data=st.data())
def test_cli_spec_command(data):
    """``ldpdist spec`` with options of every kind: a spec file that loads back to the same
    mechanism, or one error line."""
    argv = ["spec", data.draw(st.sampled_from(SPEC_COMMAND_NAMES), label="name")]
    for option in ("--k", "--epsilon", "--m", "--seed", "--blocks", "--d", "--matrix",
                   "--regime", "--epsilon-01", "--epsilon-10", "--block-sizes"):
        required = ("--k", "--epsilon") if argv[1] not in ("abr", "AsymmetricBinaryResponse") \
            else ("--epsilon-01", "--epsilon-10")
        if option in required or data.draw(st.integers(0, 3)) == 0:
            value = data.draw(st.one_of(st.sampled_from(NUMBERS), st.integers().map(str),
                                        st.sampled_from(BLOCK_SIZES),
                                        st.sampled_from(["balanced", "rademacher", "high",
                                                         "medium", "auto", "x"])),
                              label=option)
            argv += [option, value]
    if data.draw(st.integers(0, 2)) == 0:
        argv += ["--sensitive", data.draw(st.one_of(st.sampled_from(SENSITIVE_LISTS),
                                                    st.text(max_size=8)), label="--sensitive")]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "spec.json")
        ok, _ = cli_attempt(argv + ["-o", out])
        if ok:
            with open(out) as handle:
                spec = json.load(handle)
            mech = ldpdist.from_dict(spec)
            mechanism_well_formed(mech)
        else:
            assert not os.path.exists(out)


# -- generated spec files edited by hand ---------------------------------------------------------


@st.composite
def duplicated_key(draw, text):
    """``text`` (a JSON object) with one of its keys given a second time, before or after
    the first, with another value."""
    spec = json.loads(text)
    key = draw(st.sampled_from(sorted(spec)))
    value = json_text(draw(st.one_of(nasty_scalar(numpy=False), st.sampled_from(HUGE_INTS))))
    pair = json.dumps(key) + ":" + value
    if draw(st.booleans()):
        return "{" + pair + "," + text.lstrip()[1:]
    return text.rstrip()[:-1] + "," + pair + "}"


@pytest.mark.parametrize("name", MECHANISMS)
@examples(0.4)
@given(data=st.data())
def test_generated_spec_files_edited_by_hand(name, data):
    """``to_json`` text (what ``ldpdist spec`` writes) after hand edits: a value changed,
    a character deleted (``1.0`` → ``10``), a key given twice, JSON-level edits. Accepted
    only as the mechanism that wrote it while the recorded fingerprint is there; a key given
    twice is always refused."""
    try:
        mech = ldpdist.from_dict(data.draw(small_spec(name), label="spec"))
    except ValueError:
        return  # e.g. an ε the shared rule refuses for this k
    text = to_json(mech)
    kind = data.draw(st.sampled_from(["value", "char", "duplicate", "text"]), label="edit")
    if kind == "value":
        spec = json.loads(text)
        spec[data.draw(st.sampled_from(sorted(spec)), label="field")] = data.draw(
            st.one_of(nasty_scalar(numpy=False), st.sampled_from(HUGE_INTS)), label="value")
        text = json_text(spec)
    elif kind == "char":
        position = data.draw(st.integers(0, len(text) - 1), label="position")
        text = text[:position] + text[position + 1:]
    elif kind == "duplicate":
        text = data.draw(duplicated_key(text), label="text")
    else:
        text = data.draw(mutated_json_text(text), label="text")
    ok, got = attempt(from_json, text)
    if kind == "duplicate":
        # refused: for the duplicate, or first for nesting too deep to parse (the value the
        # duplicate carries may be any JSON)
        assert not ok and ("duplicate key" in str(got) or "nests JSON deeper" in str(got)), got
    if ok:
        parsed = parse_json(text, "the spec")
        if "fingerprint" in parsed:
            assert got.fingerprint == parsed["fingerprint"] == mech.fingerprint, (
                f"an edited generated spec was accepted as {got!r}, not {mech!r}")
        mechanism_well_formed(got)


# -- linear-query specs -----------------------------------------------------------------------

QUERIES = [[1.0, 0.0, 0.5, -0.25], [0.0, 1.0, 0.5, 0.75]]
PROTOCOLS = {
    "GaussianLinearQueries": lambda: linear.GaussianLinearQueries(QUERIES, 1.0, 1e-6),
    "RejectionSamplingLinearQueries":
        lambda: linear.RejectionSamplingLinearQueries(QUERIES, 1.0, 1000),
    "AdaptiveLinearQueries": lambda: linear.AdaptiveLinearQueries(100, 2, 1.0, 1.0, seed=1),
}
QUERY_EDITS = [[], [[]], [[1.0]], [[1.0, 2.0], [3.0]], [[math.nan, 1.0]], [[1e308, 1e308]],
               [["a", 1.0]], [[True, False]], [[1.0, 0.0, 0.5, -0.25]]]


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@examples(0.4)
@given(data=st.data())
def test_linear_query_spec_dicts(name, data):
    """A protocol's ``to_dict`` with fields edited to values of every type, deleted or
    added: ``from_dict`` gives an equal protocol, or refuses with a ``ValueError`` naming
    the field (a ``TypeError`` only when the spec is not a dict)."""
    protocol = PROTOCOLS[name]()
    cls = type(protocol)
    spec = protocol.to_dict()
    for _ in range(data.draw(st.integers(1, 2), label="edits")):
        kind = data.draw(st.sampled_from(["field", "field", "delete", "extra", "queries"]),
                         label="edit")
        if kind == "field" or (kind == "delete" and not spec):
            spec[data.draw(st.sampled_from(sorted(spec) or ["x"]), label="field")] = data.draw(
                st.one_of(nasty_scalar(), st.sampled_from(HUGE_INTS)), label="value")
        elif kind == "delete":
            del spec[data.draw(st.sampled_from(sorted(spec)), label="deleted")]
        elif kind == "extra":
            spec[data.draw(st.text(max_size=5), label="key")] = data.draw(nasty_scalar(False))
        else:
            spec["queries"] = data.draw(st.sampled_from(QUERY_EDITS), label="queries")
    ok, got = attempt(cls.from_dict, spec)
    if ok:
        assert isinstance(got, cls)
        assert cls.from_dict(got.to_dict()).to_dict() == got.to_dict()
    else:
        assert isinstance(got, ValueError), f"{type(got).__name__} for a dict spec: {got}"
    ok, got = attempt(cls.from_dict, data.draw(
        nasty_scalar().filter(lambda v: not isinstance(v, dict)), label="not a dict"))
    assert not ok and isinstance(got, TypeError), got
