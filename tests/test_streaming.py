"""Streaming report files larger than memory: ``Aggregator.add_file`` and ``ldpdist aggregate``.

The streamed path must give exactly the state of the in-memory path
(``add(read_reports(path))``), refuse what it refuses (before reading where it can), leave the
aggregator unchanged on any refusal, and hold only one piece of the file in memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ldpdist
from ldpdist import cli
from ldpdist.mechanisms import aggregator as aggregator_module
from ldpdist.reports import (raw_file_batch_id, read_reports, read_reports_layout,
                             write_reports, write_reports_chunks)

N = 5000
CHUNK = 397  # not a divisor of N: the last piece is short


def _mechanisms():
    return [
        ldpdist.RAPPOR(k=37, epsilon=1.0),                  # packed bit rows (width 5)
        ldpdist.OptimizedUnaryEncoding(k=20, epsilon=2.0),  # packed bit rows (width 3)
        ldpdist.HadamardResponse(k=300, epsilon=1.0),       # index reports (uint16)
        ldpdist.CompressivePrivatization(k=200, epsilon=1.0, m=20, seed=3),  # CP
    ]


def _reports(mech, n=N, seed=1):
    values = np.random.default_rng(seed).integers(0, mech.k, n)
    return mech.privatize(values, seed=seed)


@pytest.mark.parametrize("mech", _mechanisms(), ids=lambda m: type(m).__name__)
def test_streamed_state_is_bit_identical_to_the_in_memory_path(tmp_path, mech):
    path = tmp_path / "r.ldpr"
    write_reports(path, mech, _reports(mech))
    assert read_reports_layout(path).payload_bytes > 10 * CHUNK  # several pieces
    in_memory = mech.aggregator().add(read_reports(path))
    streamed = mech.aggregator().add_file(path, chunk_reports=CHUNK)
    assert streamed.to_bytes() == in_memory.to_bytes()
    assert streamed.batch_labels() == in_memory.batch_labels() == {
        read_reports_layout(path).batch_id: "r.ldpr"}
    # and the default (one piece) too
    assert mech.aggregator().add_file(path).to_bytes() == in_memory.to_bytes()


def test_public_coin_hashing_streams_identically(tmp_path):
    mech = ldpdist.PublicCoinHashing(k=100, bits=3, seed=1)
    reports = mech.privatize(np.random.default_rng(0).integers(0, 100, 2000))
    write_reports(tmp_path / "r.ldpr", mech, reports)
    expected = mech.aggregator().add(read_reports(tmp_path / "r.ldpr")).to_bytes()
    assert mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=101).to_bytes() == expected


def test_chunked_writer_makes_the_file_write_reports_makes(tmp_path):
    mech = ldpdist.RAPPOR(k=37, epsilon=1.0)
    reports = _reports(mech)
    pieces = (reports[i:i + 700] for i in range(0, N, 700))
    layout = write_reports_chunks(tmp_path / "c.ldpr", mech, pieces, n=N)
    batch = read_reports(tmp_path / "c.ldpr", expect=mech)  # checksum verified
    assert np.array_equal(batch.reports, reports) and layout.batch_id == batch.batch_id
    with pytest.raises(ValueError, match="not n = 5001"):
        write_reports_chunks(tmp_path / "d.ldpr", mech, [reports], n=N + 1)
    assert not (tmp_path / "d.ldpr").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["c.ldpr"]  # no temporary left behind


def _corrupt_last_piece(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("on_invalid", ["raise", "drop"])
def test_corruption_in_the_last_piece_is_refused_and_changes_nothing(tmp_path, on_invalid):
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    write_reports(tmp_path / "good.ldpr", mech, _reports(mech, seed=2))
    write_reports(tmp_path / "bad.ldpr", mech, _reports(mech))
    _corrupt_last_piece(tmp_path / "bad.ldpr")
    aggregator = mech.aggregator().add_file(tmp_path / "good.ldpr", chunk_reports=CHUNK)
    before = aggregator.to_bytes()
    with pytest.raises(ldpdist.IntegrityError, match="does not match its checksum"):
        aggregator.add_file(tmp_path / "bad.ldpr", chunk_reports=CHUNK, on_invalid=on_invalid)
    assert aggregator.to_bytes() == before


def test_corruption_that_makes_invalid_reports_is_reported_as_corruption(tmp_path):
    # A flipped high bit makes an out-of-range report in the first piece: the in-memory path
    # says "corrupt" (the checksum is checked on reading), so the streamed one must too.
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    path = tmp_path / "r.ldpr"
    layout = write_reports_chunks(path, mech, [_reports(mech)], n=N, dtype=np.uint16)
    data = bytearray(path.read_bytes())
    data[layout.offset + 1] |= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(ldpdist.IntegrityError):
        read_reports(path)
    aggregator = mech.aggregator()
    with pytest.raises(ldpdist.IntegrityError, match="checksum"):
        aggregator.add_file(path, chunk_reports=CHUNK)
    assert aggregator.n == 0 and not aggregator.batches


def test_truncated_file_is_refused_before_reading(tmp_path):
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    write_reports(tmp_path / "r.ldpr", mech, _reports(mech))
    data = (tmp_path / "r.ldpr").read_bytes()
    (tmp_path / "r.ldpr").write_bytes(data[:-10])
    with pytest.raises(ldpdist.IntegrityError, match="truncated"):
        mech.aggregator().add_file(tmp_path / "r.ldpr")


def test_spec_mismatch_is_refused_before_the_payload_is_read(tmp_path, monkeypatch):
    made = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    write_reports(tmp_path / "r.ldpr", made, _reports(made))
    read = []
    monkeypatch.setattr(aggregator_module, "read_chunks",
                        lambda *a, **kw: read.append(1) or iter(()))
    other = ldpdist.HadamardResponse(k=300, epsilon=2.0)
    aggregator = other.aggregator()
    with pytest.raises(ldpdist.SpecMismatchError, match="epsilon"):
        aggregator.add_file(tmp_path / "r.ldpr")
    assert read == [] and aggregator.n == 0


def test_duplicate_batch_is_refused_across_both_paths(tmp_path, monkeypatch):
    mech = ldpdist.RAPPOR(k=37, epsilon=1.0)
    write_reports(tmp_path / "r.ldpr", mech, _reports(mech))
    (tmp_path / "copy.ldpr").write_bytes((tmp_path / "r.ldpr").read_bytes())
    streamed_first = mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=CHUNK)
    with pytest.raises(ldpdist.DuplicateBatchError, match="already counted"):
        streamed_first.add(read_reports(tmp_path / "copy.ldpr"))
    read = []
    monkeypatch.setattr(aggregator_module, "read_chunks",
                        lambda *a, **kw: read.append(1) or iter(()))
    in_memory_first = mech.aggregator().add(read_reports(tmp_path / "r.ldpr"))
    with pytest.raises(ldpdist.DuplicateBatchError, match="already counted"):
        in_memory_first.add_file(tmp_path / "copy.ldpr")
    assert read == []  # refused from the header alone


def test_on_invalid_drop_and_raise_match_the_in_memory_path(tmp_path):
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)  # reports lie in [0, 512)
    reports = _reports(mech).astype(np.uint16)
    bad = [5, 1200, 4999]  # first, a middle and the last piece
    reports[bad] = [600, 513, 65535]
    path = tmp_path / "r.ldpr"
    write_reports(path, mech, reports)
    in_memory = mech.aggregator().add(read_reports(path), on_invalid="drop")
    streamed = mech.aggregator().add_file(path, on_invalid="drop", chunk_reports=CHUNK)
    assert streamed.dropped == in_memory.dropped == 3 and streamed.n == N - 3
    assert streamed.to_bytes() == in_memory.to_bytes()
    aggregator = mech.aggregator()
    with pytest.raises(ValueError, match=r"reports\[5\] = 600.*in reports 0 to 396 of") as info:
        aggregator.add_file(path, chunk_reports=CHUNK)
    assert not isinstance(info.value, ldpdist.IntegrityError)
    assert aggregator.n == 0 and not aggregator.batches


def test_raw_npy_streams_with_the_raw_batch_id(tmp_path):
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    reports = _reports(mech).astype(">i4")  # another system's dtype: signed, big-endian
    reports[7] = -1
    np.save(tmp_path / "r.npy", reports)
    expected = mech.aggregator().add(mech.as_reports(np.load(tmp_path / "r.npy")),
                                     on_invalid="drop",
                                     batch_id=raw_file_batch_id(tmp_path / "r.npy"),
                                     label="r.npy")
    streamed = mech.aggregator().add_file(tmp_path / "r.npy", raw=True, on_invalid="drop",
                                          chunk_reports=CHUNK)
    assert streamed.to_bytes() == expected.to_bytes() and streamed.dropped == 1
    with pytest.raises(ValueError, match="do not fit"):
        ldpdist.RAPPOR(k=37, epsilon=1.0).aggregator().add_file(tmp_path / "r.npy", raw=True)
    # Fortran-ordered rows cannot be streamed row by row; they take the in-memory path
    rappor = ldpdist.RAPPOR(k=37, epsilon=1.0)
    rows = _reports(rappor)
    np.save(tmp_path / "f.npy", np.asfortranarray(rows))
    fortran = rappor.aggregator().add_file(tmp_path / "f.npy", raw=True, chunk_reports=CHUNK)
    expected = rappor.aggregator().add(rows, batch_id=raw_file_batch_id(tmp_path / "f.npy"),
                                       label="f.npy")
    assert fortran.to_bytes() == expected.to_bytes()


def test_chunk_and_progress_arguments(tmp_path, capsys):
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    write_reports(tmp_path / "r.ldpr", mech, _reports(mech))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunk_reports"):
            mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=bad)
    mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=CHUNK, progress=True)
    assert "100%" in capsys.readouterr().err
    mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=CHUNK)  # stderr not a tty
    assert capsys.readouterr().err == ""


def test_the_read_buffer_is_declared_to_the_memory_guard(tmp_path):
    mech = ldpdist.HadamardResponse(k=300, epsilon=1.0)
    write_reports(tmp_path / "r.ldpr", mech, _reports(mech))
    ldpdist.memory.set_memory_limit(8192)  # the counts take 4096
    try:
        with pytest.raises(MemoryError, match="read buffer"):
            mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=4000)
        # a piece that fits goes through
        assert mech.aggregator().add_file(tmp_path / "r.ldpr", chunk_reports=200).n == N
    finally:
        ldpdist.memory.set_memory_limit(None)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_peak_memory_stays_a_piece_for_a_large_file(tmp_path):
    # ~200 MB of HR reports (k = 2^16, uint32); the resident-set peak of a fresh process
    # grows by about one 4 MiB piece when streaming, by the file size when memory-mapped
    # (the control, so that the measurement can fail).
    mech = ldpdist.HadamardResponse(k=2**16, epsilon=1.0)
    n, piece = 50_000_000, 5_000_000
    rng = np.random.default_rng(0)
    write_reports_chunks(tmp_path / "big.ldpr", mech,
                         (mech.as_reports(rng.integers(0, 2**16, piece, dtype=np.uint32))
                          for _ in range(n // piece)), n=n)
    # Peak RSS from /proc (VmHWM, reset through clear_refs): ru_maxrss of a child starts at
    # its parent's peak (Linux carries it over exec), which hides everything below it.
    script = textwrap.dedent("""
        import sys
        import ldpdist
        from ldpdist.reports import read_reports

        def status(key):
            with open("/proc/self/status") as handle:
                line = next(l for l in handle if l.startswith(key + ":"))
            return int(line.split()[1]) * 1024

        mech = ldpdist.HadamardResponse(k=2**16, epsilon=1.0)
        aggregator = mech.aggregator()
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # reset the peak to the current resident set
        before = status("VmRSS")
        if sys.argv[2] == "stream":
            aggregator.add_file(sys.argv[1], chunk_reports=1 << 20)
        else:
            aggregator.add(read_reports(sys.argv[1]))
        after = status("VmHWM")
        assert aggregator.n == 50_000_000
        print(after - before)
    """)
    growth = {}
    for how in ("stream", "mmap"):
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "big.ldpr"), how],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "LDPDIST_MAX_MEMORY": "64M"})
        growth[how] = int(done.stdout)
    size = os.path.getsize(tmp_path / "big.ldpr")
    assert growth["stream"] < 32 << 20, growth
    assert growth["mmap"] > size // 2, growth  # the control measures what it should


# -- the command line ----------------------------------------------------------------------


def _cli(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    _out, err = capsys.readouterr()
    return status, err


def test_cli_aggregate_streams_in_pieces(tmp_path, capsys, monkeypatch):
    mech = ldpdist.RAPPOR(k=37, epsilon=1.0)
    (tmp_path / "spec.json").write_text(json.dumps(mech.to_dict()))
    write_reports(tmp_path / "r.ldpr", mech, _reports(mech))
    reports = _reports(mech, seed=5)
    np.save(tmp_path / "raw.npy", reports)
    pieces = []
    real = aggregator_module.read_chunks

    def counting(handle, nbytes, buffer, where, digest=None):
        for piece in real(handle, nbytes, buffer, where, digest):
            pieces.append(len(piece))
            yield piece

    monkeypatch.setattr(aggregator_module, "read_chunks", counting)
    monkeypatch.setattr(aggregator_module, "STREAM_CHUNK_BYTES", 1000)  # 200 rows of 5 bytes
    status, err = _cli(capsys, "aggregate", "--spec", tmp_path / "spec.json",
                       tmp_path / "r.ldpr", tmp_path / "raw.npy", "--raw-reports",
                       "-o", tmp_path / "a.ldps")
    assert status == 0, err
    assert err.startswith("ldpdist aggregate: wrote") and len(err.splitlines()) == 1
    assert len(pieces) == 2 * 25 and max(pieces) == 1000
    state = ldpdist.Aggregator.from_bytes((tmp_path / "a.ldps").read_bytes())
    expected = mech.aggregator().add(read_reports(tmp_path / "r.ldpr"))
    expected.add(reports, batch_id=raw_file_batch_id(tmp_path / "raw.npy"), label="raw.npy")
    assert state.to_bytes() == expected.to_bytes()

    _corrupt_last_piece(tmp_path / "r.ldpr")
    status, err = _cli(capsys, "aggregate", "--spec", tmp_path / "spec.json",
                       tmp_path / "r.ldpr", "-o", tmp_path / "b.ldps")
    assert status == 2 and "is corrupt" in err and "checksum" in err
    assert not (tmp_path / "b.ldps").exists()
