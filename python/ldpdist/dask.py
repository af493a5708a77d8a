"""Distributed privatization and aggregation on Dask (optional extra ``ldpdist[dask]``).

Reports are counted where they live: every partition of a ``dask.array`` (or of a dask
DataFrame column) is counted into its own :class:`~ldpdist.Aggregator` on a worker, and
the partial aggregators are combined by a tree reduction of :meth:`Aggregator.merge`
(``split_every`` at a time, depth ⌈log_split_every(partitions)⌉). No report reaches the
driver; only aggregates travel, pickled through :meth:`Aggregator.to_bytes` /
:meth:`Aggregator.from_bytes`, i.e. as the same checked, fingerprinted state as a state file.
Mechanisms travel as their spec (:meth:`Mechanism.to_dict`) and are rebuilt on the workers.

Provenance (:class:`~ldpdist.Reports`): :func:`privatize` returns a dask array whose blocks
are ``Reports`` of the mechanism's spec and whose ``meta`` is too, so the tag travels with
the lazy array as it does with numpy (slicing, rechunking and ``da.concatenate`` of one
spec keep it; arithmetic drops it). :func:`aggregate` refuses, before computing anything, a
collection whose ``meta`` is ``Reports`` of another spec, and on the workers a partition
that is ``Reports`` of another spec (:class:`~ldpdist.SpecMismatchError`). A partition
without a tag (reports loaded from storage, a DataFrame column, a ``da.from_array`` of a
plain array) is declared as the mechanism's reports by :func:`aggregate` itself, with
``mechanism.as_reports``: the collection passed to it is by name the reports, as with
``ldpdist aggregate --raw-reports`` on the command line.

Idempotence: partition ``i`` of a dask collection named ``name`` is counted as the batch
``dask:<sha256(name, i)>``. A partition recomputed after a lost worker yields an aggregator
with the same batch id, and :meth:`Aggregator.merge` refuses to count a batch twice, so a
retry can never double-count.

Seed rule of :func:`privatize` (reproducible whatever the partitioning): users are numbered
0, 1, … along the array and cut into fixed blocks of ``block_size`` users (the output is
rechunked to those blocks; the input's partitioning plays no role). Block ``b`` (users
``b·block_size`` to ``(b+1)·block_size − 1``) is privatized with ``mechanism.privatize``
under the integer seed ``int.from_bytes(SHA-256(b"ldpdist.dask.privatize\\0" ‖ key ‖
b.to_bytes(8, "little")), "little")``, where ``key`` is the seed's 32-byte key
(``seed.to_bytes(32, "little")``; for ``seed=None``, 32 bytes of OS entropy drawn once on
the driver), and, for mechanisms that number their users (``first_user``: one-bit HR's
round-robin groups, two-stage RAPPOR's stages, public-coin hashing's hash functions), with
``first_user = b·block_size``. So a user's report depends only on (seed, block_size, its
global index, the values of its block), and a seeded result is the same on any cluster.
This module imports dask; ``import ldpdist`` does not.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from typing import Any, Dict, List, Optional

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("ldpdist.dask needs dask: pip install 'ldpdist[dask]'") from exc

from ._validation import integer, seed_key
from .mechanisms.aggregator import Aggregator
from .reports import Reports, check_reports, provenance_from_json, provenance_json
from .specs import from_dict

__all__ = ["DEFAULT_BLOCK_SIZE", "aggregate", "block_seed", "privatize"]

#: Users per privatization block (a multiple of the core's 2^16-user sampling chunk).
DEFAULT_BLOCK_SIZE = 1 << 20
_SEED_DOMAIN = b"ldpdist.dask.privatize\0"
_mechanisms: Dict[str, Any] = {}


_serialization_registered = False


def _keep_tags_across_processes() -> None:
    """Make dask.distributed move :class:`Reports` with their tag.

    distributed sends numpy arrays between processes as raw buffers with its own serializer
    for ``np.ndarray``, which subclasses inherit: a ``Reports`` would arrive as a plain
    array. This registers a serializer for ``Reports`` (distributed's documented extension
    point) that wraps the ndarray one and carries the provenance in the header. It is
    called by every function of this module, on the driver and on the workers; when
    distributed is not loaded there is no process boundary and nothing to do."""
    global _serialization_registered
    if _serialization_registered or "distributed" not in sys.modules:
        return
    from distributed.protocol import dask_deserialize, dask_serialize
    from distributed.protocol.numpy import deserialize_numpy_ndarray, serialize_numpy_ndarray

    @dask_serialize.register(Reports)
    def _serialize(x: Reports, context: Any = None) -> Any:
        header, frames = serialize_numpy_ndarray(x.view(np.ndarray), context)
        header["ldpdist-reports"] = provenance_json(x)
        return header, frames

    @dask_deserialize.register(Reports)
    def _deserialize(header: Dict[str, Any], frames: Any) -> Any:
        header = dict(header)
        tag = provenance_from_json(header.pop("ldpdist-reports", "null"))
        array = deserialize_numpy_ndarray(header, frames)
        return array if tag is None else Reports._tagged(array, *tag)

    _serialization_registered = True


def _mechanism(spec: Dict[str, Any]) -> Any:
    """The mechanism of a spec, built once per worker process (building may precompute)."""
    key = repr(sorted(spec.items()))
    if key not in _mechanisms:
        _mechanisms[key] = from_dict(spec)
    return _mechanisms[key]


def _check_mechanism(mechanism: Any) -> Dict[str, Any]:
    if not hasattr(mechanism, "to_dict") or not hasattr(mechanism, "aggregator"):
        raise TypeError(f"mechanism must be an ldpdist mechanism, got {type(mechanism).__name__}")
    return mechanism.to_dict()


def block_seed(key: bytes, block: int) -> int:
    """The integer seed of privatization block ``block`` under the 32-byte ``key``
    (the rule of the module documentation)."""
    digest = hashlib.sha256(_SEED_DOMAIN + bytes(key) + int(block).to_bytes(8, "little"))
    return int.from_bytes(digest.digest(), "little")


# -- aggregation -----------------------------------------------------------------------


def _count_partition(spec: Dict[str, Any], batch_id: str, on_invalid: str,
                     partition: Any) -> Aggregator:
    _keep_tags_across_processes()
    mechanism = _mechanism(spec)
    if hasattr(partition, "to_numpy"):  # a pandas Series partition
        partition = partition.to_numpy()
    if not (isinstance(partition, Reports) and partition.fingerprint is not None):
        # untagged reports: aggregate() was given them as reports (module documentation)
        partition = mechanism.as_reports(partition)
    return mechanism.aggregator().add(partition, on_invalid=on_invalid, batch_id=batch_id,
                                      label="dask partition")


def _merge_all(spec: Dict[str, Any], *parts: Aggregator) -> Aggregator:
    # Merge into a fresh aggregator: a task's inputs may be shared or reused on retry, so
    # they are never modified.
    merged = _mechanism(spec).aggregator()
    for part in parts:
        merged.merge(part)
    return merged


def _partitions(reports: Any, mechanism: Any) -> "tuple[List[Any], str]":
    """The partitions of ``reports`` as delayed objects, and the collection's name."""
    meta = getattr(reports, "_meta", None)
    if isinstance(meta, Reports) and meta.fingerprint is not None:
        check_reports(mechanism, meta, "ldpdist.dask.aggregate")  # SpecMismatchError
    if isinstance(reports, da.Array):
        if mechanism.report_kind == "bits":
            if reports.ndim != 2:
                raise ValueError("bit-vector reports must be a 2-D dask array of packed rows "
                                 f"(n, ceil(output_size / 8)), got {reports.ndim} dimensions")
            if reports.numblocks[1] != 1:  # whole rows in each partition
                reports = reports.rechunk({1: -1})
        elif reports.ndim != 1:
            raise ValueError(f"index reports must be a 1-D dask array, got {reports.ndim} "
                             "dimensions")
        return list(reports.to_delayed().ravel()), reports.name
    try:
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover - dask[dataframe] missing
        dd = None
    if dd is not None and isinstance(reports, dd.Series):
        if mechanism.report_kind == "bits":
            raise TypeError("bit-vector reports are 2-D packed rows: pass a dask array, not a "
                            "DataFrame column")
        return list(reports.to_delayed()), reports._name
    raise TypeError("reports must be a dask.array.Array or a dask DataFrame column "
                    f"(dask.dataframe.Series), got {type(reports).__name__}")


def aggregate(mechanism: Any, reports: Any, *, on_invalid: str = "raise",
              split_every: int = 8, compute: bool = True) -> Any:
    """Count distributed reports: one aggregator per partition, merged by a tree reduction.

    Parameters
    ----------
    mechanism : Mechanism
        The spec the reports were made under (a mechanism, or a heavy-hitter protocol of
        :mod:`ldpdist.heavy_hitters`, whose records are 1-D structured arrays).
    reports : dask.array.Array or dask.dataframe.Series
        Index reports, shape (n,), or bit-vector reports, shape (n, ceil(output_size / 8))
        of packed uint8 rows (a dask array; chunks along the rows only, otherwise they are
        rechunked to whole rows). Each partition is checked like :meth:`Aggregator.add`.
        Provenance: :func:`privatize` output carries the spec fingerprint (its ``meta``
        and its blocks are :class:`~ldpdist.Reports`) and is checked, before computing
        and on the workers; reports of another spec raise
        :class:`~ldpdist.SpecMismatchError`. Partitions without a tag (e.g. reports read
        from storage) are taken as ``mechanism``'s reports, as if declared with
        ``mechanism.as_reports``: passing this function a collection is the declaration.
    on_invalid : {"raise", "drop"}
        As in :meth:`Aggregator.add`, per partition.
    split_every : int, >= 2
        Fan-in of the merge tree.
    compute : bool
        ``True`` computes on the current Dask scheduler (a ``distributed.Client`` if one
        is active) and returns the :class:`Aggregator`; ``False`` returns a
        ``dask.delayed`` object.

    Returns
    -------
    Aggregator
        Counts and n equal to those of one aggregator fed every report; its batches are
        ``dask:…`` ids, one per partition (see the module documentation).
    """
    spec = _check_mechanism(mechanism)
    _keep_tags_across_processes()
    split_every = integer(split_every, "split_every", minimum=2)
    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    parts, name = _partitions(reports, mechanism)
    count = dask.delayed(_count_partition, pure=True)
    merge = dask.delayed(_merge_all, pure=True)
    level = [count(spec, _batch_id(name, i), on_invalid, part) for i, part in enumerate(parts)]
    if not level:
        level = [merge(spec)]
    while len(level) > 1:
        level = [merge(spec, *level[i:i + split_every])
                 for i in range(0, len(level), split_every)]
    return level[0].compute() if compute else level[0]


def _batch_id(name: str, partition: int) -> str:
    return "dask:" + hashlib.sha256(f"{name}\0{partition}".encode()).hexdigest()


# -- privatization ---------------------------------------------------------------------


def _privatize_block(values: np.ndarray, spec: Dict[str, Any], key: bytes, block_size: int,
                     block_info: Optional[Dict[Any, Any]] = None) -> np.ndarray:
    _keep_tags_across_processes()
    mechanism = _mechanism(spec)
    block = block_info[0]["chunk-location"][0] if block_info else 0
    options: Dict[str, Any] = {}
    if "first_user" in inspect.signature(mechanism.privatize).parameters:
        options["first_user"] = block * block_size
    if mechanism.randomized:
        options["seed"] = block_seed(key, block)
    if mechanism.report_kind == "records":  # a heavy-hitter protocol: hashed items
        return mechanism.privatize_hashed(values, **options)
    return mechanism.privatize(values, **options)


def privatize(mechanism: Any, values: Any, seed: Optional[int] = None, *,
              block_size: int = DEFAULT_BLOCK_SIZE) -> Any:
    """Privatize one value per user on the workers (simulating a large client population).

    Parameters
    ----------
    mechanism : Mechanism
    values : dask.array.Array (1-D) or dask.dataframe.Series of int
        Values in [0, k), one per user (for a heavy-hitter protocol of
        :mod:`ldpdist.heavy_hitters`: the users' hashed items, ``protocol.hash(items)``,
        privatized with ``privatize_hashed``). A Series is converted with known partition
        lengths.
    seed : int, optional
        ``None`` draws one 32-byte key from the OS; an integer gives reports that depend only
        on (seed, block_size) and the values, not on the partitioning or the cluster (the
        rule is in the module documentation).
    block_size : int
        Users per block: the output's chunks, and the unit of the seed rule (a multiple of
        65536 keeps the core's parallel chunks whole).

    Returns
    -------
    dask.array.Array
        Lazy reports, shape (n,) (index mechanisms, the dtype of ``mechanism.privatize``) or
        (n, ceil(output_size / 8)) uint8 (bit vectors), chunked in blocks of ``block_size``.
        Its blocks and its ``meta`` are :class:`~ldpdist.Reports` of ``mechanism``'s spec,
        so computed results (``.compute()`` concatenates the blocks) are too, and
        :func:`aggregate` checks the spec.
    """
    spec = _check_mechanism(mechanism)
    _keep_tags_across_processes()
    block_size = integer(block_size, "block_size", minimum=1)
    key = seed_key(seed)
    if key is None:
        key = os.urandom(32)
    try:
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover
        dd = None
    if dd is not None and isinstance(values, dd.Series):
        values = values.to_dask_array(lengths=True)
    if not isinstance(values, da.Array):
        raise TypeError("values must be a dask.array.Array or a dask DataFrame column, got "
                        f"{type(values).__name__}")
    if values.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got {values.ndim} dimensions")
    if any(np.isnan(c) for c in values.chunks[0]):
        raise ValueError("values must have known chunk sizes (compute_chunk_sizes() first)")
    values = values.rechunk(block_size)
    # The output dtype and row width, from a one-user sample (a public, fixed value).
    if mechanism.report_kind == "records":
        sample = mechanism.privatize_hashed(np.zeros(1, dtype=np.uint64), seed=0)
    else:
        sample = mechanism.privatize(np.zeros(1, dtype=np.uint32),
                                     **({"seed": 0} if mechanism.randomized else {}))
    if sample.ndim == 1:
        return values.map_blocks(_privatize_block, spec, key, block_size, dtype=sample.dtype,
                                 meta=sample[:0])
    width = sample.shape[1]
    return values.map_blocks(_privatize_block, spec, key, block_size, dtype=sample.dtype,
                             new_axis=1, chunks=(values.chunks[0], (width,)),
                             meta=sample[:0])
