"""What is read as JSON or rebuilt from a dict says exactly one thing, or is refused.

Once accepted silently: a spec with a duplicated key (``"epsilon":1.0,"epsilon":9.0``)
privatized with the last value (ε = 9) while a reviewer, or another JSON parser, read the
first; a generated spec edited by hand (``1.0`` → ``10``) privatized with the edited value.
Once unclear: a linear-query spec without ``queries`` raised ``KeyError: 'queries'``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import struct

import numpy as np
import pytest

import ldpdist
from ldpdist import cli, linear
from ldpdist.errors import IntegrityError
from ldpdist.specs import canonical_json, parse_json, registered

DUPLICATED = '{"mechanism":"HadamardResponse","format":1,"k":16,"epsilon":1.0,"epsilon":9.0}'


def run_cli(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def privatize_with(tmp_path, capsys, spec_text):
    (tmp_path / "spec.json").write_text(spec_text)
    (tmp_path / "values.txt").write_text("0\n1\n2\n3\n")
    out = tmp_path / "r.ldpr"
    if out.exists():
        out.unlink()
    status, _, err = run_cli(capsys, "privatize", "--spec", tmp_path / "spec.json",
                             tmp_path / "values.txt", "--seed", 1, "-o", out)
    return status, err, out


# -- duplicate keys ------------------------------------------------------------------------------


def test_a_spec_with_a_duplicated_key_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="duplicate key 'epsilon'"):
        ldpdist.from_json(DUPLICATED)
    with pytest.raises(ValueError, match="duplicate key 'epsilon'"):
        parse_json(DUPLICATED, "the spec")
    status, err, out = privatize_with(tmp_path, capsys, DUPLICATED)
    assert status == 2 and "duplicate key 'epsilon'" in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    # nested objects too, and keys that differ only by escapes are the same key
    with pytest.raises(ValueError, match="duplicate key 'a'"):
        parse_json('{"x":[{"a":1,"b":2,"a":3}]}', "the text")
    with pytest.raises(ValueError, match="duplicate key 'k'"):
        parse_json('{"k":1,"\\u006b":2}', "the text")
    assert parse_json('{"a":{"a":1},"b":[{"a":2},{"a":3}]}', "the text")["b"][1] == {"a": 3}


def test_duplicated_keys_in_file_headers_are_refused():
    """A state header with a duplicated key, resealed (a buggy writer's): refused."""
    mech = ldpdist.RandomizedResponse(3, 1.0)
    spec = mech.to_dict()
    header = canonical_json({"format": "ldpdist-state", "version": 2,
                             "mechanism": spec["mechanism"], "spec": spec,
                             "fingerprint": mech.fingerprint, "n": 0, "dropped": 0, "size": 3,
                             "batches": []})
    text = header.replace('"n":0', '"n":0,"n":0').encode()
    body = b"LDPDAGG2" + struct.pack("<I", len(text)) + text
    body += b"\0" * (-len(body) % 8) + bytes(24)
    with pytest.raises(IntegrityError, match="duplicate key 'n'"):
        ldpdist.Aggregator.from_bytes(body + hashlib.sha256(body).digest())


# -- spec fingerprints ---------------------------------------------------------------------------


def test_a_generated_spec_records_its_fingerprint(tmp_path, capsys):
    mech = ldpdist.HadamardResponse(16, 1.0)
    status, out, _ = run_cli(capsys, "spec", "hr", "--k", 16, "--epsilon", 1.0)
    assert status == 0
    assert json.loads(out)["fingerprint"] == mech.fingerprint
    assert out == ldpdist.specs.to_json(mech)
    assert ldpdist.from_json(out) == mech == ldpdist.from_dict(json.loads(out))
    assert privatize_with(tmp_path, capsys, out)[0] == 0


def test_an_edited_generated_spec_is_refused(tmp_path, capsys):
    text = ldpdist.specs.to_json(ldpdist.HadamardResponse(16, 1.0))
    assert '"epsilon": 1.0' in text
    edited = text.replace('"epsilon": 1.0', '"epsilon": 10')  # the "." deleted: ε = 10
    with pytest.raises(ValueError, match="fingerprint"):
        ldpdist.from_json(edited)
    with pytest.raises(ValueError, match="fingerprint"):
        ldpdist.from_dict(json.loads(edited))
    status, err, out = privatize_with(tmp_path, capsys, edited)
    assert status == 2 and "fingerprint" in err and "edited" in err, err
    assert not out.exists()
    for bad in ("abc", 5, None):
        with pytest.raises(ValueError, match="fingerprint"):
            ldpdist.from_dict(dict(json.loads(text), fingerprint=bad))


def test_a_hand_written_spec_without_a_fingerprint_still_loads(tmp_path, capsys):
    text = '{"mechanism": "HadamardResponse", "k": 16, "epsilon": 1.0}'
    assert ldpdist.from_json(text) == ldpdist.HadamardResponse(16, 1.0)
    status, _err, out = privatize_with(tmp_path, capsys, text)
    assert status == 0 and ldpdist.read_reports(out).fingerprint == \
        ldpdist.HadamardResponse(16, 1.0).fingerprint


# -- missing fields: ValueError naming the field -------------------------------------------------


SMALL = {
    "AsymmetricBinaryResponse": {"epsilon_01": 1.0, "epsilon_10": 2.0},
    "BlockHadamardResponse": {"blocks": [2, 3], "epsilon": 1.0},
    "CompressivePrivatization": {"k": 32, "epsilon": 1.0, "m": 8, "seed": 1},
    "PublicCoinHashing": {"k": 16, "bits": 3, "seed": 1},
    "HighLowHadamardResponse": {"k": 16, "epsilon": 1.0, "sensitive": [1, 2]},
}


def small_spec(name):
    params = SMALL.get(name, {"k": 16, "epsilon": 1.0})
    return ldpdist.from_dict({"mechanism": name, **params}).to_dict()


def required_fields(name):
    cls = registered()[name]
    return ["mechanism"] + [
        p.name for p in inspect.signature(cls).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def assert_names_missing(exc_info, field):
    text = str(exc_info.value)
    assert "missing" in text and f"'{field}'" in text, text


@pytest.mark.parametrize("name", sorted(registered()))
def test_a_mechanism_spec_without_a_required_field_names_it(name):
    spec = small_spec(name)
    fields = required_fields(name)
    assert len(fields) >= 2
    for field in fields:
        partial = {key: value for key, value in spec.items() if key != field}
        with pytest.raises(ValueError) as exc_info:
            ldpdist.from_dict(partial)
        assert_names_missing(exc_info, field)
    with pytest.raises(ValueError, match="unknown field 'bogus'"):
        ldpdist.from_dict(dict(spec, bogus=1))


QUERIES = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]])
PROTOCOLS = {
    "GaussianLinearQueries": lambda: linear.GaussianLinearQueries(QUERIES, 1.0, 1e-6),
    "RejectionSamplingLinearQueries":
        lambda: linear.RejectionSamplingLinearQueries(QUERIES, 1.0, 1000),
    "AdaptiveLinearQueries": lambda: linear.AdaptiveLinearQueries(100, 2, 1.0, 1.0, seed=1),
}
# fields a spec of an older release may lack (the default it had is used)
OPTIONAL = {"RejectionSamplingLinearQueries": {"band", "acceptance"}}


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_a_linear_query_spec_without_a_field_names_it(name):
    protocol = PROTOCOLS[name]()
    cls = type(protocol)
    spec = protocol.to_dict()
    assert cls.from_dict(spec).to_dict() == spec
    for field in sorted(set(spec) - OPTIONAL.get(name, set())):
        partial = {key: value for key, value in spec.items() if key != field}
        with pytest.raises(ValueError) as exc_info:
            cls.from_dict(partial)
        assert_names_missing(exc_info, field)
    with pytest.raises(ValueError, match="unknown field 'bogus'"):
        cls.from_dict(dict(spec, bogus=1))
    with pytest.raises(TypeError, match="dict"):
        cls.from_dict([("protocol", name)])
    for field in ("queries", "epsilon"):
        if field in spec:
            with pytest.raises(ValueError, match=field):
                cls.from_dict(dict(spec, **{field: "x"}))


def _state_header_without(field):
    mech = ldpdist.RandomizedResponse(3, 1.0)
    blob = mech.aggregator().add(mech.privatize([0, 1], seed=1)).to_bytes()
    (length,) = struct.unpack_from("<I", blob, 8)
    header = json.loads(blob[12:12 + length])
    counts = blob[12 + length + (-(12 + length) % 8):-32]
    del header[field]
    text = canonical_json(header).encode()
    body = b"LDPDAGG2" + struct.pack("<I", len(text)) + text
    body += b"\0" * (-len(body) % 8) + counts
    return header, body + hashlib.sha256(body).digest()


def test_a_state_or_reports_header_without_a_field_names_it():
    header, _ = _state_header_without("n")
    for field in sorted(header) + ["n"]:
        _, blob = _state_header_without(field)
        with pytest.raises(IntegrityError) as exc_info:
            ldpdist.Aggregator.from_bytes(blob)
        assert_names_missing(exc_info, field)
    mech = ldpdist.RandomizedResponse(3, 1.0)
    data, _ = ldpdist.reports.encode_reports(mech, mech.privatize([0, 1], seed=1))
    (length,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12:12 + length])
    payload = data[-2:]
    for field in sorted(header):
        text = canonical_json({k: v for k, v in header.items() if k != field}).encode()
        head = data[:8] + struct.pack("<I", len(text)) + text
        head += hashlib.sha256(head).digest()
        blob = head + b"\0" * (-len(head) % 64) + payload
        with pytest.raises(IntegrityError) as exc_info:
            ldpdist.reports.decode_reports(blob)
        assert_names_missing(exc_info, field)
