"""Every artifact knows what it is: the mix-ups that once gave silently wrong estimates are
refused, through the Python API and through the command line.

Once accepted silently: reports made under another spec (other ε, seed, k or mechanism) or a
file of raw values were accepted whenever their integers fit; the same shard under a copied
name was counted twice; a state with a sum-preserving edit was accepted; counts
[2^63, 2^63, 1] with n = 1 were accepted; merges wrapped silently.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import pickle
import shutil
import struct
import threading

import numpy as np
import pytest

import ldpdist
from ldpdist import cli
from ldpdist.errors import DuplicateBatchError, IntegrityError, SpecMismatchError
from ldpdist.specs import canonical_json

U64 = 2**64 - 1

# (name, the deployment's mechanism, a mechanism of another spec whose reports have the same
# dtype and range, so that only the fingerprint can tell them apart)
MIXUPS = [
    ("other epsilon", ldpdist.HadamardResponse(20, 1.0), ldpdist.HadamardResponse(20, 2.0)),
    ("other k", ldpdist.HadamardResponse(20, 1.0), ldpdist.HadamardResponse(17, 1.0)),
    ("other blocks", ldpdist.HadamardResponse(20, 2.0), ldpdist.HadamardResponse(20, 2.0, blocks=1)),
    ("other mechanism", ldpdist.RandomizedResponse(32, 1.0), ldpdist.HadamardResponse(20, 1.0)),
    ("other cp seed", ldpdist.CompressivePrivatization(64, 1.0, 16, seed=1),
     ldpdist.CompressivePrivatization(64, 1.0, 16, seed=2)),
    ("other olh seed", ldpdist.OptimizedLocalHashing(30, 1.0, seed=1),
     ldpdist.OptimizedLocalHashing(30, 1.0, seed=2)),
    ("other bit mechanism", ldpdist.RAPPOR(20, 1.0), ldpdist.OptimizedUnaryEncoding(20, 1.0)),
    ("exchanged budgets", ldpdist.AsymmetricBinaryResponse(0.5, 2.0),
     ldpdist.AsymmetricBinaryResponse(2.0, 0.5)),
    ("infinite vs finite budget", ldpdist.AsymmetricBinaryResponse(float("inf"), 1.0),
     ldpdist.AsymmetricBinaryResponse(700.0, 1.0)),
    ("binary vs randomized response", ldpdist.AsymmetricBinaryResponse(1.0, 1.0),
     ldpdist.RandomizedResponse(2, 1.0)),
    ("other blocks (bhr)", ldpdist.BlockHadamardResponse([4, 6, 6], 1.0),
     ldpdist.BlockHadamardResponse([6, 4, 6], 1.0)),
    ("other labels (bhr)", ldpdist.BlockHadamardResponse([0, 1] * 8, 1.0),
     ldpdist.BlockHadamardResponse([0] * 8 + [1] * 8, 1.0)),
    ("bhr vs hr", ldpdist.BlockHadamardResponse([20], 1.0), ldpdist.HadamardResponse(20, 1.0,
                                                                                      blocks=1)),
]
MIXUP_IDS = [name for name, _, _ in MIXUPS]


def run_cli(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys, *argv, match):
    status, _out, err = run_cli(capsys, *argv)
    assert status == 2 and len(err.splitlines()) == 1 and match in err, err
    return err


def write_spec(path, mech):
    path.write_text(json.dumps(mech.to_dict()))
    return path


def forge_state(mech, counts, n, dropped=0, batches=()):
    """A state in the documented format (aggregator module docstring) with a valid checksum:
    what an attacker or a buggy writer could produce."""
    spec = mech.to_dict()
    header = {"format": "ldpdist-state", "version": 2, "mechanism": spec["mechanism"],
              "spec": spec, "fingerprint": mech.fingerprint, "n": n, "dropped": dropped,
              "size": len(counts), "batches": [list(b) for b in batches]}
    text = canonical_json(header).encode()
    body = b"LDPDAGG2" + struct.pack("<I", len(text)) + text
    body += b"\0" * (-len(body) % 8)
    body += np.asarray(counts, dtype="<u8").tobytes()
    return body + hashlib.sha256(body).digest()


# -- reports made under another spec ------------------------------------------------------------


@pytest.mark.parametrize("name, mech, other", MIXUPS, ids=MIXUP_IDS)
def test_reports_of_another_spec_are_refused(tmp_path, capsys, name, mech, other):
    values = np.arange(min(mech.k, other.k)).repeat(3)
    path = tmp_path / "other.ldpr"
    ldpdist.write_reports(path, other, other.privatize(values, seed=1))
    # API
    with pytest.raises(SpecMismatchError, match="holds reports of"):
        ldpdist.read_reports(path, expect=mech)
    batch = ldpdist.read_reports(path)
    assert batch.fingerprint == other.fingerprint != mech.fingerprint
    aggregator = mech.aggregator()
    with pytest.raises(SpecMismatchError, match="made under"):
        aggregator.add(batch)
    assert aggregator.n == 0 and not aggregator.counts.any()
    with pytest.raises(SpecMismatchError):
        mech.estimate(batch)
    # CLI
    spec = write_spec(tmp_path / "spec.json", mech)
    refused(capsys, "aggregate", "--spec", spec, path, "-o", tmp_path / "x.ldps",
            match="holds reports of")
    refused(capsys, "estimate", "--spec", spec, path, match="holds reports of")
    assert not (tmp_path / "x.ldps").exists()


@pytest.mark.parametrize("name, mech, other", MIXUPS, ids=MIXUP_IDS)
def test_states_of_another_spec_are_refused(tmp_path, capsys, name, mech, other):
    values = np.arange(min(mech.k, other.k))
    theirs = other.aggregator().add(other.privatize(values, seed=2))
    ours = mech.aggregator().add(mech.privatize(values, seed=2))
    before = ours.counts.copy()
    with pytest.raises(SpecMismatchError, match="made under"):
        ours.merge(theirs)
    assert np.array_equal(ours.counts, before) and ours.n == values.size
    spec = write_spec(tmp_path / "spec.json", mech)
    (tmp_path / "theirs.ldps").write_bytes(theirs.to_bytes())
    refused(capsys, "estimate", "--spec", spec, tmp_path / "theirs.ldps", match="was aggregated for")


def test_plain_arrays_of_values_are_not_reports_without_raw_reports(tmp_path, capsys):
    mech = ldpdist.HadamardResponse(20, 1.0)
    spec = write_spec(tmp_path / "spec.json", mech)
    values = np.random.default_rng(0).integers(0, 20, size=500).astype(np.uint8)
    np.save(tmp_path / "values.npy", values)  # integers in range: would have been "reports"
    refused(capsys, "aggregate", "--spec", spec, tmp_path / "values.npy", "-o", tmp_path / "x.ldps",
            match="pass --raw-reports")
    refused(capsys, "estimate", "--spec", spec, tmp_path / "values.npy", match="pass --raw-reports")
    with pytest.raises(IntegrityError, match="not an ldpdist reports file"):
        ldpdist.read_reports(tmp_path / "values.npy")
    # Explicitly raw: accepted (interop with other systems' reports).
    status, _, _ = run_cli(capsys, "aggregate", "--spec", spec, tmp_path / "values.npy",
                           "--raw-reports", "-o", tmp_path / "x.ldps")
    assert status == 0


# -- the same batch twice -------------------------------------------------------------------------


def test_a_copied_reports_file_is_counted_once(tmp_path, capsys):
    mech = ldpdist.HadamardResponse(20, 1.0)
    spec = write_spec(tmp_path / "spec.json", mech)
    batch = ldpdist.write_reports(tmp_path / "shard.ldpr", mech,
                                  mech.privatize(np.arange(20).repeat(5), seed=4))
    shutil.copy(tmp_path / "shard.ldpr", tmp_path / "copy-of-shard.ldpr")
    # one command, both names
    err = refused(capsys, "aggregate", "--spec", spec, tmp_path / "shard.ldpr",
                  tmp_path / "copy-of-shard.ldpr", "-o", tmp_path / "x.ldps",
                  match="would count those reports twice")
    assert "shard.ldpr" in err
    # two states, then a merge
    for name in ("shard", "copy-of-shard"):
        assert run_cli(capsys, "aggregate", "--spec", spec, tmp_path / f"{name}.ldpr",
                       "-o", tmp_path / f"{name}.ldps")[0] == 0
    refused(capsys, "aggregate", "--spec", spec, tmp_path / "shard.ldps",
            tmp_path / "copy-of-shard.ldps", "-o", tmp_path / "x.ldps", match=batch.batch_id[:16])
    # a state and a file it already holds
    refused(capsys, "aggregate", "--spec", spec, tmp_path / "shard.ldps",
            tmp_path / "copy-of-shard.ldpr", "-o", tmp_path / "x.ldps", match="twice")
    assert not (tmp_path / "x.ldps").exists()
    # API
    aggregator = mech.aggregator().add(ldpdist.read_reports(tmp_path / "shard.ldpr"))
    with pytest.raises(DuplicateBatchError, match="already counted"):
        aggregator.add(ldpdist.read_reports(tmp_path / "copy-of-shard.ldpr"))
    other = mech.aggregator().add(ldpdist.read_reports(tmp_path / "copy-of-shard.ldpr"))
    with pytest.raises(DuplicateBatchError, match="shard.ldpr"):
        aggregator.merge(other)
    assert aggregator.n == 100


def test_a_state_is_never_merged_with_a_copy_of_itself():
    mech = ldpdist.RandomizedResponse(10, 1.0)
    shard = mech.aggregator().add(mech.privatize(np.arange(10), seed=1))
    copy = ldpdist.Aggregator.from_bytes(shard.to_bytes())
    with pytest.raises(DuplicateBatchError):
        shard.merge(copy)
    with pytest.raises(DuplicateBatchError, match="itself"):
        shard.merge(shard)
    pickled = pickle.loads(pickle.dumps(shard))
    assert pickled.batches == shard.batches and np.array_equal(pickled.counts, shard.counts)
    with pytest.raises(DuplicateBatchError):
        pickled.merge(shard)
    # independent shards merge, and their union then refuses either of them again
    other = mech.aggregator().add(mech.privatize(np.arange(10), seed=2))
    total = mech.aggregator().merge(shard).merge(other)
    assert total.n == 20 and total.batches == shard.batches | other.batches
    with pytest.raises(DuplicateBatchError):
        total.merge(ldpdist.Aggregator.from_bytes(other.to_bytes()))
    # simulated aggregates are batches too
    simulated = mech.simulate(np.full(10, 5), seed=3)
    total.merge(simulated)
    with pytest.raises(DuplicateBatchError):
        total.merge(pickle.loads(pickle.dumps(simulated)))


# -- corrupt and forged states --------------------------------------------------------------------


def test_a_sum_preserving_edit_is_refused(tmp_path, capsys):
    mech = ldpdist.RandomizedResponse(4, 1.0)
    state = mech.aggregator().add(mech.privatize(np.arange(4).repeat(50), seed=1)).to_bytes()
    counts_at = len(state) - 32 - 4 * 8
    first, second = struct.unpack_from("<QQ", state, counts_at)
    edited = bytearray(state)
    struct.pack_into("<QQ", edited, counts_at, first + 1, second - 1)
    with pytest.raises(IntegrityError, match="checksum"):
        ldpdist.Aggregator.from_bytes(bytes(edited))
    spec = write_spec(tmp_path / "spec.json", mech)
    (tmp_path / "edited.ldps").write_bytes(bytes(edited))
    refused(capsys, "estimate", "--spec", spec, tmp_path / "edited.ldps", match="checksum")


def test_forged_counts_that_wrap_are_refused():
    mech = ldpdist.RandomizedResponse(3, 1.0)
    forged = forge_state(mech, [2**63, 2**63, 1], n=1)
    with pytest.raises(IntegrityError, match="sum to 18446744073709551617, not n = 1"):
        ldpdist.Aggregator.from_bytes(forged)
    # the format itself is what the docstring says: a consistent forgery is read back
    good = ldpdist.Aggregator.from_bytes(forge_state(mech, [1, 2, 3], n=6, batches=[("ab", "x")]))
    assert good.n == 6 and list(good.counts) == [1, 2, 3] and good.batches == {"ab"}
    bits = ldpdist.RAPPOR(3, 1.0)
    with pytest.raises(IntegrityError, match="exceeds n"):
        ldpdist.Aggregator.from_bytes(forge_state(bits, [5, 0, 0], n=4))
    ss = ldpdist.SubsetSelection(4, 1.0, d=2)
    with pytest.raises(IntegrityError, match="n \\* d"):
        ldpdist.Aggregator.from_bytes(forge_state(ss, [1, 1, 1, 0], n=2))
    with pytest.raises(IntegrityError, match="not an integer in"):
        ldpdist.Aggregator.from_bytes(forge_state(mech, [0, 0, 0], n=2**64))
    with pytest.raises(IntegrityError, match="size"):
        ldpdist.Aggregator.from_bytes(forge_state(mech, [0, 0, 0, 0], n=0))
    with pytest.raises(IntegrityError, match="listed twice"):
        ldpdist.Aggregator.from_bytes(forge_state(mech, [0, 0, 0], n=0,
                                                  batches=[("a", ""), ("a", "")]))


def test_merge_and_add_never_wrap():
    mech = ldpdist.RandomizedResponse(3, 1.0)
    big = ldpdist.Aggregator.from_bytes(forge_state(mech, [2**63, 0, 0], n=2**63, batches=[("a", "")]))
    also = ldpdist.Aggregator.from_bytes(forge_state(mech, [2**63, 0, 0], n=2**63, batches=[("b", "")]))
    with pytest.raises(ValueError, match="2\\^64"):
        big.merge(also)
    assert big.n == 2**63 and int(big.counts[0]) == 2**63 and big.batches == {"a"}
    ldpdist.Aggregator.from_bytes(big.to_bytes())  # still serializable (was struct.error)
    full = ldpdist.Aggregator.from_bytes(forge_state(mech, [U64, 0, 0], n=U64))
    with pytest.raises(ValueError, match="2\\^64"):
        full.add(mech.as_reports(np.array([0], dtype=np.uint8)))
    assert full.n == U64 and int(full.counts[0]) == U64
    with pytest.raises(ValueError, match="2\\^64"):
        mech.simulate(np.array([2**63, 2**63, 0], dtype=np.uint64))


def test_every_batch_id_add_accepts_is_one_a_state_can_hold():
    """add once took "" (and ids over 128 characters) as a batch id: the state it wrote was
    then refused by from_bytes as corrupt (found by tests/fuzz)."""
    mech = ldpdist.RandomizedResponse(4, 1.0)
    reports = mech.privatize([0, 1], seed=1)
    for batch_id in ("", "x" * 129):
        agg = mech.aggregator()
        with pytest.raises(ValueError, match="batch_id must have 1 to 128 characters"):
            agg.add(reports, batch_id=batch_id)
        assert agg.n == 0 and not agg.batches
    agg = mech.aggregator().add(reports, batch_id="x" * 128, label="l" * 500)
    again = ldpdist.Aggregator.from_bytes(agg.to_bytes())
    assert again.batch_labels() == {"x" * 128: "l" * 200}


def test_bad_state_inputs_are_clear_errors():
    with pytest.raises(TypeError, match="takes bytes"):
        ldpdist.Aggregator.from_bytes(10**10)  # once: 10 GB of zero bytes
    with pytest.raises(TypeError):
        ldpdist.Aggregator.from_bytes("LDPDAGG2")
    with pytest.raises(IntegrityError, match="older ldpdist"):
        ldpdist.Aggregator.from_bytes(b"LDPDAGG1" + bytes(100))
    with pytest.raises(IntegrityError, match="bad magic"):
        ldpdist.Aggregator.from_bytes(b"hello")
    state = ldpdist.HadamardResponse(8, 1.0).aggregator().to_bytes()
    for cut in (12, 40, len(state) - 1):
        with pytest.raises(IntegrityError):
            ldpdist.Aggregator.from_bytes(state[:cut])
    with pytest.raises(IntegrityError):
        ldpdist.Aggregator.from_bytes(state + b"\0")


# -- corrupt reports files --------------------------------------------------------------------


def test_corrupt_reports_files_are_refused(tmp_path):
    mech = ldpdist.HadamardResponse(20, 1.0)
    path = tmp_path / "r.ldpr"
    ldpdist.write_reports(path, mech, mech.privatize(np.arange(20), seed=1))
    data = path.read_bytes()
    (length,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12:12 + length])
    cases = {
        "flipped payload byte": data[:-1] + bytes([data[-1] ^ 1]),
        "truncated": data[:-1],
        "trailing bytes": data + b"\0",
        "bad magic": b"X" + data[1:],
    }
    edited_spec = dict(header, spec=dict(header["spec"], epsilon=2.0))
    text = canonical_json(edited_spec).encode()
    cases["spec edited, fingerprint kept"] = (
        data[:8] + struct.pack("<I", len(text)) + text + b"\0" * (-(12 + len(text)) % 64)
        + data[-20:])
    for name, blob in cases.items():
        (tmp_path / "bad.ldpr").write_bytes(blob)
        with pytest.raises(IntegrityError):
            ldpdist.read_reports(tmp_path / "bad.ldpr")
        with pytest.raises(IntegrityError):
            ldpdist.reports.decode_reports(blob)
    assert ldpdist.read_reports(path).batch_id == hashlib.sha256(data[12:12 + length]).hexdigest()


# -- concurrency ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ldpdist.HadamardResponse, ldpdist.RAPPOR])
def test_one_aggregator_shared_by_four_threads_counts_every_batch(cls):
    """Once: 'array is already borrowed' in 25-75% of concurrent add calls."""
    mech = cls(64, 1.0)
    rng = np.random.default_rng(5)
    batches = [mech.privatize(rng.integers(0, 64, size=int(rng.integers(1, 3000))), seed=i)
               for i in range(200)]
    shared = mech.aggregator()
    errors = []

    def work(part):
        try:
            for reports in part:
                shared.add(reports)
                if len(part) % 7 == 0:
                    shared.estimate("raw")
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(batches[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    sequential = mech.aggregator()
    for reports in batches:
        sequential.add(reports)
    assert shared.n == sequential.n and np.array_equal(shared.counts, sequential.counts)


# -- every byte of an artifact is covered by its checksum ----------------------------------------


def _flips(data, positions, bits=range(8)):
    """``data`` with one bit flipped, for each position and bit."""
    for position in positions:
        for bit in bits:
            edited = bytearray(data)
            edited[position] ^= 1 << bit
            yield position, bit, bytes(edited)


def test_a_flipped_bit_anywhere_in_a_reports_file_is_refused(tmp_path):
    """Once: the nonce (which makes the batch id) and the padding were covered by no
    checksum, so a file with a flipped nonce bit read as another, valid batch."""
    mech = ldpdist.HadamardResponse(8, 1.0)
    data, _ = ldpdist.reports.encode_reports(mech, mech.privatize([0, 1, 2, 3, 3, 7], seed=1))
    for position, bit, edited in _flips(data, range(len(data))):
        with pytest.raises(IntegrityError):
            ldpdist.reports.decode_reports(edited)
            pytest.fail(f"a flip of bit {bit} of byte {position} was accepted")
    # files: the header-only reader (what add_file and the command line use) and read_reports
    path = tmp_path / "r.ldpr"
    header_end = 12 + struct.unpack_from("<I", data, 8)[0]
    for position, bit, edited in _flips(data, range(0, len(data), 7), bits=(0, 5)):
        path.write_bytes(edited)
        with pytest.raises(IntegrityError):
            ldpdist.read_reports(path)
        if position < header_end + 32:  # the header and its checksum
            with pytest.raises(IntegrityError):
                ldpdist.reports.read_reports_layout(path)
        agg = mech.aggregator()
        with pytest.raises(IntegrityError):
            agg.add_file(path)
        assert agg.n == 0


def test_a_nonce_edited_copy_of_a_reports_file_is_not_counted_twice(tmp_path, capsys):
    """Once: ``aggregate r1.ldpr r1b.ldpr`` (r1b a copy of r1 with one hex digit of its nonce
    edited) exited 0 with n doubled: the edited nonce made a new batch id."""
    mech = ldpdist.HadamardResponse(16, 1.0)
    spec = write_spec(tmp_path / "spec.json", mech)
    ldpdist.write_reports(tmp_path / "r1.ldpr", mech, mech.privatize(np.arange(16), seed=3))
    data = (tmp_path / "r1.ldpr").read_bytes()
    at = data.index(b'"nonce":"') + len(b'"nonce":"')
    digit = data[at:at + 1]
    edited = data[:at] + (b"1" if digit != b"1" else b"2") + data[at + 1:]
    (tmp_path / "r1b.ldpr").write_bytes(edited)
    refused(capsys, "aggregate", "--spec", spec, tmp_path / "r1.ldpr", tmp_path / "r1b.ldpr",
            "-o", tmp_path / "all.ldps", match="checksum")
    assert not (tmp_path / "all.ldps").exists()
    with pytest.raises(IntegrityError, match="checksum"):
        ldpdist.read_reports(tmp_path / "r1b.ldpr")
    assert run_cli(capsys, "aggregate", "--spec", spec, tmp_path / "r1.ldpr",
                   "-o", tmp_path / "one.ldps")[0] == 0
    assert ldpdist.Aggregator.from_bytes((tmp_path / "one.ldps").read_bytes()).n == 16


def test_a_flipped_bit_anywhere_in_a_state_is_refused():
    mech = ldpdist.RandomizedResponse(4, 1.0)
    agg = mech.aggregator().add(mech.privatize([0, 1, 2, 3, 3], seed=1), batch_id="b1",
                                label="r1.ldpr")
    data = agg.to_bytes()
    for position, bit, edited in _flips(data, range(len(data))):
        with pytest.raises(IntegrityError):
            ldpdist.Aggregator.from_bytes(edited)
            pytest.fail(f"a flip of bit {bit} of byte {position} was accepted")


def test_state_padding_must_be_zero():
    """The padding before the counts is covered by the checksum; a resealed state (a buggy
    writer's) with a padding byte set is refused too."""
    mech = ldpdist.RandomizedResponse(3, 1.0)
    good = forge_state(mech, [1, 2, 3], n=6)
    (length,) = struct.unpack_from("<I", good, 8)
    if (12 + length) % 8 == 0:
        good = forge_state(mech, [1, 2, 3], n=6, batches=[("a", "")])
        (length,) = struct.unpack_from("<I", good, 8)
    assert (12 + length) % 8, "the example needs padding"
    body = bytearray(good[:-32])
    body[12 + length] = 1
    with pytest.raises(IntegrityError, match="padding"):
        ldpdist.Aggregator.from_bytes(bytes(body) + hashlib.sha256(body).digest())
    assert ldpdist.Aggregator.from_bytes(good).n == 6


LEGACY_REPORTS = pathlib.Path(__file__).parent / "data" / "reports-v1.ldpr"


def test_reports_files_of_the_previous_format_are_still_read(tmp_path):
    """Version 1 reports files (``LDPDREP1``, written by ldpdist 0.1.0) are read with the
    checks that format allows (spec fingerprint, payload checksum, zero padding, a nonce of
    32 hex digits) and the batch id they always had; only version 2 is written."""
    data = LEGACY_REPORTS.read_bytes()
    assert data[:8] == b"LDPDREP1"
    mech = ldpdist.HadamardResponse(8, 1.0)
    batch = ldpdist.read_reports(LEGACY_REPORTS, expect=mech)
    (length,) = struct.unpack_from("<I", data, 8)
    assert batch.batch_id == hashlib.sha256(data[12:12 + length]).hexdigest() == (
        "b895bd4c236e0ffad670751bfe0798572146e8f4c204e0d892d18b42af851cdc")
    assert list(np.asarray(batch.reports)) == [15, 0, 0, 15, 13, 11]
    agg = mech.aggregator().add_file(LEGACY_REPORTS)
    assert agg.n == 6 and agg.batches == {batch.batch_id}
    nonce = data.index(b'"nonce":"') + 9
    for name, edited in {"payload": data[:-1] + bytes([data[-1] ^ 1]),
                         "padding": data[:12 + length] + b"\1" + data[13 + length:],
                         "nonce not hex": data[:nonce] + b"g" + data[nonce + 1:]}.items():
        with pytest.raises(IntegrityError):
            ldpdist.reports.decode_reports(edited)
    # what is written is version 2
    ldpdist.write_reports(tmp_path / "new.ldpr", mech, mech.privatize([1, 2], seed=1))
    assert (tmp_path / "new.ldpr").read_bytes()[:8] == b"LDPDREP2"
