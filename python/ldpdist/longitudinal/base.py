"""Shared machinery of the memoized (longitudinal) mechanisms: the per-client secrets, the
HMAC stream the permanent (memoized) round draws from, the 2^-53 probability grid, exact
channel helpers and the base class :class:`LongitudinalMechanism`.

Memoization stream (normative, so that another implementation reproduces the memoized
round bit for bit). For a client secret ``S`` (exactly 32 bytes), a mechanism spec of
fingerprint ``F`` (the 64 hex digits of :attr:`LongitudinalMechanism.fingerprint`, taken as
their 32 raw bytes) and a value ``x``, block ``b`` (b = 0, 1, …) of the stream is::

    HMAC-SHA256(key = S,
                message = b"ldpdist-memo-v1\\x00"      # 16 bytes
                          || F                         # 32 bytes
                          || x as 8-byte little-endian unsigned
                          || b as 8-byte little-endian unsigned)

Each 32-byte block gives four words ``w`` (bytes ``8i .. 8i+7`` of the block, little-endian
unsigned 64-bit, i = 0..3); word ``j`` of the stream is word ``j % 4`` of block ``j // 4``.
A word gives the 53-bit integer ``m = w >> 11``: an event of probability ``P`` (always a
multiple of 2^-53 here, see below) happens when ``m < P * 2^53``, which has probability
exactly ``P`` when ``w`` is uniform. How each mechanism spends the words is in its class
documentation. Including ``F`` separates the memoized answers of different specs made
with the same secret (changing a parameter re-draws them).

Probabilities. Every Bernoulli probability a mechanism uses is a multiple of 2^-53, so the
memoized round (above) and the per-report round (numpy's ``Generator.random``, which is
``(next_uint64 >> 11) * 2^-53`` for PCG64) realize it exactly; ε_1 and ε_∞ are computed
from those realized probabilities, and rounding is always toward less information (the
realized ε never exceeds the one asked for, as evaluated in double precision).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import struct
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Sequence

import numpy as np

from .. import kernels
from .._validation import integer, real
from ..reports import Reports
from ..specs import SPEC_FORMAT, checked_fields, fingerprint

if TYPE_CHECKING:  # the aggregator module imports this one
    from .aggregate import LongitudinalAggregator

__all__ = ["LongitudinalMechanism", "make_secrets", "memo_words", "GRID", "grid_down",
           "grid_up", "max_log_ratio", "product_channel", "binary_counts"]

#: 2^53: every probability is a multiple of 1/GRID.
GRID = 1 << 53
_DOMAIN = b"ldpdist-memo-v1\x00"
SECRET_BYTES = 32
_REGISTRY: Dict[str, type] = {}


def grid_down(p: float) -> int:
    """``floor(p * 2^53)`` (p in [0, 1]): the grid probability at or below p, as an integer
    numerator."""
    return int(math.floor(p * GRID))


def grid_up(p: float) -> int:
    """``ceil(p * 2^53)``: the grid probability at or above p, as an integer numerator."""
    return int(math.ceil(p * GRID))


def memo_words(secret: bytes, spec_fingerprint: bytes, value: int, count: int) -> np.ndarray:
    """The first ``count`` words (uint64) of the memoization stream of ``(secret, value)``
    (see the module documentation)."""
    blocks = -(-count // 4)
    prefix = _DOMAIN + spec_fingerprint + struct.pack("<Q", value)
    data = b"".join(hmac.new(secret, prefix + struct.pack("<Q", b), hashlib.sha256).digest()
                    for b in range(blocks))
    return np.frombuffer(data, dtype="<u8")[:count].astype(np.uint64)


def make_secrets(n: int, seed: Optional[int] = None) -> np.ndarray:
    """``n`` client secrets of 32 bytes, as a ``(n, 32)`` uint8 array.

    ``seed=None`` draws them from the operating system (``os.urandom``), as a real client
    does once, at enrolment, and keeps forever. An integer seed makes them reproducible
    (``numpy.random.Generator(PCG64(SeedSequence(seed))).bytes(32 * n)``): for simulations
    and tests only, since anyone who knows the seed knows every memoized answer.
    """
    n = integer(n, "n", minimum=0)
    if seed is None:
        data = os.urandom(SECRET_BYTES * n)
    else:
        seed = integer(seed, "secret seed", minimum=0, maximum=2**256 - 1)
        data = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed))).bytes(
            SECRET_BYTES * n)
    return np.frombuffer(data, dtype=np.uint8).reshape(n, SECRET_BYTES).copy()


def _secrets_list(secrets: Any, n: int) -> List[bytes]:
    """Client secrets as a list of n 32-byte strings (an (n, 32) uint8 array or a sequence
    of bytes)."""
    if isinstance(secrets, np.ndarray):
        if secrets.dtype != np.uint8 or secrets.ndim != 2 or secrets.shape[1] != SECRET_BYTES:
            raise ValueError(f"secrets must be a (n, {SECRET_BYTES}) uint8 array (one "
                             f"{SECRET_BYTES}-byte secret per user), got {secrets.dtype} "
                             f"{secrets.shape}")
        out = [bytes(row) for row in secrets]
    elif isinstance(secrets, (list, tuple)):
        out = []
        for i, secret in enumerate(secrets):
            if not isinstance(secret, (bytes, bytearray)) or len(secret) != SECRET_BYTES:
                raise ValueError(f"secrets[{i}] must be {SECRET_BYTES} bytes, got "
                                 f"{type(secret).__name__} of length "
                                 f"{len(secret) if hasattr(secret, '__len__') else '?'}")
            out.append(bytes(secret))
    else:
        raise TypeError("secrets must be a (n, 32) uint8 array (ldpdist.longitudinal."
                        f"make_secrets) or a list of 32-byte strings, got "
                        f"{type(secrets).__name__}")
    if len(out) != n:
        raise ValueError(f"one secret per user: got {len(out)} secrets for {n} values")
    return out


def _values(values: Any, k: int) -> np.ndarray:
    """Values as int64 in [0, k) (1-D integers; bools and floats refused)."""
    if isinstance(values, (list, tuple)) and any(isinstance(v, (bool, np.bool_))
                                                 for v in values):
        raise TypeError("values must be integers, not booleans")
    array = np.asarray(values)
    if array.size == 0 and array.dtype.kind == "f":
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise TypeError(f"values must be integers in [0, {k}), got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {array.shape}")
    if array.size and (array.min() < 0 or array.max() >= k):
        i = int(np.argmax((array < 0) | (array >= k)))
        raise ValueError(f"values must lie in [0, {k}): values[{i}] = {array[i]}")
    return array.astype(np.int64)


def _rng(seed: Any) -> np.random.Generator:
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
    return np.random.Generator(np.random.PCG64(
        seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)))


def check_epsilon(value: Any, name: str) -> float:
    """A finite ε > 0 (at most 700 so that e^ε stays finite)."""
    value = real(value, name)
    if not 0 < value <= 700:
        raise ValueError(f"{name} must be in (0, 700], got {value!r}")
    return value


def largest_below(f: Callable[[int], float], lo: int, hi: int, target: float) -> int:
    """The largest integer m in [lo, hi] with ``f(m) <= target`` for an increasing ``f``
    with ``f(lo) <= target``."""
    if f(hi) <= target:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if f(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def max_log_ratio(channel: np.ndarray) -> float:
    """``max over inputs x, y and outputs o of ln(Q[x, o] / Q[y, o])`` (0/0 skipped,
    ``inf`` when an output has probability 0 under one input and not another)."""
    with np.errstate(divide="ignore"):
        logs = np.log(channel)
    used = (channel > 0).any(axis=0)
    if not used.any():
        return 0.0
    spread = logs[:, used].max(axis=0) - logs[:, used].min(axis=0)
    return float(np.max(spread))


def product_channel(ones: np.ndarray) -> np.ndarray:
    """The channel of independent bits: ``ones[x, j]`` = P(bit j = 1 | x); output ``o``
    (0 <= o < 2^m) has bit j equal to ``(o >> j) & 1``. Shape (k, 2^m)."""
    k, m = ones.shape
    outputs = np.arange(1 << m)
    bits = ((outputs[None, :] >> np.arange(m)[:, None]) & 1).astype(bool)  # (m, 2^m)
    channel = np.ones((k, 1 << m))
    for j in range(m):
        channel *= np.where(bits[j][None, :], ones[:, j:j + 1], 1.0 - ones[:, j:j + 1])
    return channel


def binary_counts(ones: np.ndarray, n: int, p_one: float, p_zero: float,
                  rng: np.random.Generator) -> np.ndarray:
    """How many of ``n`` users per bit end with a 1 when ``ones[j]`` of them start with a 1
    and each bit independently becomes 1 with probability ``p_one`` (a 1) or ``p_zero``
    (a 0): ``Binomial(ones, p_one) + Binomial(n - ones, p_zero)`` (int64)."""
    ones = np.asarray(ones, dtype=np.int64)
    return (rng.binomial(ones, p_one) + rng.binomial(n - ones, p_zero)).astype(np.int64)


def register(cls: type) -> type:
    _REGISTRY[cls.__name__] = cls
    return cls


def from_dict(spec: Any) -> "LongitudinalMechanism":
    """Rebuild a longitudinal mechanism from its :meth:`LongitudinalMechanism.to_dict`
    (``ValueError`` for an unknown mechanism, format, or a missing or unknown field).

    As for :func:`ldpdist.from_dict` (which reads these specs too), a spec may carry the
    field ``"fingerprint"`` (spec files written by :func:`ldpdist.specs.to_json`): it must
    then be the rebuilt mechanism's fingerprint (an edited spec is refused)."""
    from ..specs import _check_recorded, _recorded_fingerprint

    if not isinstance(spec, dict):
        raise TypeError(f"a longitudinal mechanism spec is a dict, got {type(spec).__name__}")
    spec = dict(spec)
    recorded = _recorded_fingerprint(spec)
    built = _from_fields(spec)
    _check_recorded(recorded, built)
    return built


def _from_fields(spec: Dict[str, Any]) -> "LongitudinalMechanism":
    name = spec.get("mechanism")
    if name not in _REGISTRY:
        raise ValueError(f"unknown longitudinal mechanism {name!r}; known: {sorted(_REGISTRY)}")
    cls = _REGISTRY[name]
    params = list(cls._param_names)
    fields = checked_fields(spec, f"the {name} spec", ["mechanism", "format", *params])
    if type(fields["format"]) is not int or fields["format"] != SPEC_FORMAT:
        raise ValueError(f"unsupported spec format {fields['format']!r} (this version reads "
                         f"{SPEC_FORMAT})")
    return cls(**{p: fields[p] for p in params})


class LongitudinalMechanism:
    """Base class of the memoized mechanisms: a permanent round (the memoized answer, drawn
    from the client's secret and the value) followed by an instantaneous round per report.

    Subclasses set ``_param_names`` and implement the two rounds, the per-report support
    probabilities and the exact channels.

    Every subclass provides two floats: ``epsilon_1``, the realized ε of one report (the
    exact max log-ratio of the chained, one-report channel), and ``epsilon_infinity``, the
    realized ε of the memoized answer (the exact max log-ratio of the permanent round's
    channel), which bounds what any number of reports reveal about a fixed value.
    """

    _param_names: ClassVar[Sequence[str]] = ()
    report_kind: ClassVar[str] = "index"
    _reports_noun = "mech"

    k: int

    # -- spec --------------------------------------------------------------------------

    def _params(self) -> Dict[str, Any]:
        return {name: getattr(self, "_" + name) for name in self._param_names}

    def to_dict(self) -> Dict[str, Any]:
        """JSON-safe spec; ``ldpdist.longitudinal.from_dict(m.to_dict()) == m``."""
        return {"mechanism": type(self).__name__, "format": SPEC_FORMAT, **self._params()}

    def _report_provenance(self):
        cached = self.__dict__.get("_provenance")
        if cached is None:
            spec = self.to_dict()
            cached = (fingerprint(spec), type(self).__name__, spec)
            self.__dict__["_provenance"] = cached
        return cached

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict` (as for every ldpdist
        spec); its raw bytes enter the memoization stream."""
        return self._report_provenance()[0]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(fingerprint(self.to_dict()))

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self._params().items())
        return f"{type(self).__name__}({args})"

    def as_reports(self, reports: Any) -> Reports:
        """Declare an array made elsewhere as this mechanism's reports."""
        return Reports(reports, self)

    # -- to implement ------------------------------------------------------------------

    @property
    def epsilon_1(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def epsilon_infinity(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def output_size(self) -> int:
        """Number of distinct reports (index reports) or bits per report (bit vectors)."""
        raise NotImplementedError  # pragma: no cover

    def _memo_one(self, secret: bytes, value: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _instant(self, memo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover

    def _support_counts(self, reports: np.ndarray) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover

    def _raw_from_counts(self, counts: np.ndarray, n: int) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover

    # -- client side -------------------------------------------------------------------

    def _fp_bytes(self) -> bytes:
        return bytes.fromhex(self.fingerprint)

    def memo(self, values: Any, secrets: Any) -> np.ndarray:
        """The permanent (memoized) answers of the users: a deterministic function of each
        user's secret and value (see the module documentation for the derivation), the same
        in every collection. Index mechanisms: int64 array (n,); bit-vector mechanisms:
        bool array (n, output_size). Never sent as such: every report re-randomizes it."""
        values = _values(values, self.k)
        secrets = _secrets_list(secrets, values.size)
        rows = [self._memo_one(secret, int(v)) for secret, v in zip(secrets, values)]
        if self.report_kind == "bits":
            return (np.array(rows, dtype=bool).reshape(len(rows), self.output_size))
        return np.array(rows, dtype=np.int64)

    def _tag(self, array: np.ndarray) -> Reports:
        return Reports._tagged(array, *self._report_provenance())

    def _pack(self, out: np.ndarray) -> np.ndarray:
        if self.report_kind == "bits":
            return np.packbits(out.astype(np.uint8), axis=1)
        dtype = np.min_scalar_type(self.output_size - 1)
        return out.astype(dtype)

    def privatize(self, values: Any, secrets: Any, seed: Optional[int] = None) -> Reports:
        """One report per user: the memoized answer of (secret, value), re-randomized by the
        instantaneous round with fresh randomness.

        Parameters
        ----------
        values : array_like of int, shape (n,)
            Integers in [0, k).
        secrets : ndarray of uint8, shape (n, 32), or list of n 32-byte strings
            Each user's permanent secret (:func:`make_secrets`).
        seed : int, optional
            Seed of the instantaneous round (``None``: OS entropy). Same seeds, values and
            secrets give the same bytes.

        Returns
        -------
        Reports
            Index mechanisms: 1-D of the smallest unsigned dtype holding ``output_size - 1``;
            bit-vector mechanisms: uint8 rows in ``numpy.packbits`` layout.
        """
        memo = self.memo(values, secrets)
        return self._tag(self._pack(self._instant(memo, _rng(seed))))

    def campaign(self, values: Any, T: int, secret_seed: Optional[int] = None,
                 seed: Optional[int] = None) -> List[Reports]:
        """``T`` collections from the same users holding the same values (a simulation).

        The users' secrets are :func:`make_secrets` ``(n, secret_seed)``, so the memoized
        answers are computed once and are identical in every collection; collection ``t``
        re-randomizes them with the ``t``-th child of ``numpy.random.SeedSequence(seed)``.
        """
        T = integer(T, "T", minimum=1)
        values = _values(values, self.k)
        memo = self.memo(values, make_secrets(values.size, secret_seed))
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(
            None if seed is None else integer(seed, "seed", minimum=0, maximum=2**256 - 1))
        return [self._tag(self._pack(self._instant(memo, _rng(child))))
                for child in seq.spawn(T)]

    # -- server side -------------------------------------------------------------------

    def _checked_reports(self, reports: Any) -> np.ndarray:
        from ..typed_reports import check_reports

        array = np.asarray(check_reports(self, reports, f"{type(self).__name__}.estimate"))
        if self.report_kind == "bits":
            width = -(-self.output_size // 8)
            if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != width:
                raise ValueError(f"reports of {self!r} are uint8 rows of shape (n, {width}), "
                                 f"got {array.dtype} {array.shape}")
            bits = np.unpackbits(array, axis=1)
            if bits[:, self.output_size:].any():
                raise ValueError("malformed reports: a padding bit is set")
            return bits[:, :self.output_size]
        if array.dtype.kind not in "iu" or array.ndim != 1:
            raise ValueError(f"reports of {self!r} are 1-D unsigned integers, got "
                             f"{array.dtype} {array.shape}")
        if array.size and (array.min() < 0 or array.max() >= self.output_size):
            raise ValueError(f"reports lie in [0, {self.output_size})")
        return array

    def estimate(self, reports: Any, decoder: str = "raw") -> np.ndarray:
        """Estimate the distribution of the values from one collection's reports.

        ``decoder="raw"`` is the unbiased estimator of the chained channel (its expectation
        is exactly the distribution); ``"project"`` projects it onto the probability
        simplex (biased, smaller error). A plain array raises ``TypeError`` (declare reports
        made elsewhere with :meth:`as_reports`).
        """
        if decoder not in ("raw", "project"):
            raise ValueError(f"decoder must be 'raw' or 'project', got {decoder!r}")
        array = self._checked_reports(reports)
        n = array.shape[0]
        if n == 0:
            raise ValueError("no reports to estimate from")
        raw = self._raw_from_counts(self._support_counts(array), n)
        return raw if decoder == "raw" else kernels.project_simplex(raw)

    # -- aggregation (the sums of :class:`~ldpdist.longitudinal.LongitudinalAggregator`) --

    def aggregator(self, collection: Optional[int] = None) -> "LongitudinalAggregator":
        """An empty, mergeable aggregator of this mechanism's reports (one collection;
        ``collection`` names it, else the first batch that names one does)."""
        from .aggregate import LongitudinalAggregator

        return LongitudinalAggregator(self, collection)

    def _standard_errors(self, sums: np.ndarray, n: int) -> Optional[np.ndarray]:
        """Plug-in standard errors of the raw estimate from the sums (``None``: no formula)."""
        return None

    @staticmethod
    def _binary_errors(counts: np.ndarray, n: int, gap: float) -> np.ndarray:
        """``sqrt(s (1 - s) / n) / |gap|`` with ``s = counts / n`` (clipped to [0, 1]): the
        standard error of ``(s - q) / gap`` when each user sets the counted bit
        independently."""
        s = np.clip(np.asarray(counts, dtype=np.float64) / n, 0.0, 1.0)
        return np.sqrt(s * (1.0 - s) / n) / abs(gap)

    def simulate_campaign(self, true_counts: Any, T: int,
                          seed: Optional[int] = None) -> List["LongitudinalAggregator"]:
        """``T`` collections from the same ``true_counts[x]`` users of each value x, drawn
        at the level of counts from their exact joint law: one aggregator per collection
        (see :func:`ldpdist.longitudinal.simulate_campaign`)."""
        from .aggregate import simulate_campaign

        return simulate_campaign(self, true_counts, T, seed)

    def simulate(self, true_counts: Any, seed: Optional[int] = None
                 ) -> "LongitudinalAggregator":
        """One collection: ``simulate_campaign(true_counts, 1, seed)[0]``."""
        return self.simulate_campaign(true_counts, 1, seed)[0]

    def _sums_size(self) -> int:
        return self.output_size

    def _check_layout(self, array: np.ndarray) -> None:
        """``TypeError`` / ``ValueError`` unless ``array`` has this mechanism's report
        layout (dtype and shape; the values are checked by :meth:`_invalid_mask`)."""
        if self.report_kind == "bits":
            width = -(-self.output_size // 8)
            if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != width:
                raise TypeError(f"reports of {self!r} are uint8 rows of shape (n, {width}), "
                                f"got {array.dtype} {array.shape}")
        elif array.dtype.kind not in "iu" or array.ndim != 1:
            raise TypeError(f"reports of {self!r} are 1-D unsigned integers, got "
                            f"{array.dtype} {array.shape}")

    def _invalid_mask(self, array: np.ndarray) -> np.ndarray:
        """Malformed reports: a padding bit set (bit vectors), outside [0, output_size)
        (index reports)."""
        if self.report_kind == "bits":
            pad = 8 * array.shape[1] - self.output_size
            if pad == 0:
                return np.zeros(array.shape[0], dtype=bool)
            return (array[:, -1] & np.uint8((1 << pad) - 1)) != 0
        if array.dtype.kind == "i":
            return (array < 0) | (array >= self.output_size)
        return array >= np.uint64(self.output_size)

    def _describe_invalid(self, report: Any) -> str:
        if self.report_kind == "bits":
            return "a padding bit is set"
        return f"{report!r} is outside [0, {self.output_size})"

    def _report_sums(self, array: np.ndarray) -> np.ndarray:
        """The int64 sums of well-formed reports."""
        if self.report_kind == "bits":
            sums = np.zeros(self.output_size, dtype=np.int64)
            for start in range(0, array.shape[0], 1 << 16):
                bits = np.unpackbits(array[start:start + (1 << 16)], axis=1)
                sums += bits[:, :self.output_size].sum(axis=0, dtype=np.int64)
            return sums
        return np.bincount(array.astype(np.int64), minlength=self.output_size).astype(np.int64)

    def _check_sums(self, sums: np.ndarray, n: int) -> None:
        """``ValueError`` unless ``sums`` can be the sums of ``n`` reports."""
        if sums.size and (sums.min() < 0 or sums.max() > n):
            raise ValueError(f"every sum lies in [0, n = {n}]")
        if self.report_kind == "index" and int(sums.sum(dtype=object)) != n:
            raise ValueError(f"the histogram sums to {int(sums.sum(dtype=object))}, not n = {n}")

    def _simulate_memo(self, counts: np.ndarray, rng: np.random.Generator) -> Any:
        raise NotImplementedError  # pragma: no cover

    def _simulate_round(self, memo: Any, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover

    def expected_estimate(self, p: Any) -> np.ndarray:
        """The exact expectation of the raw estimate for users drawn from ``p``, computed
        from the chained channel (``channel_matrix()``): equals ``p`` (unbiasedness)."""
        p = np.asarray(p, dtype=np.float64)
        channel = self.channel_matrix()
        expected_counts = (p @ channel) @ self._support_of_outputs()
        return self._raw_from_counts(expected_counts, 1)
