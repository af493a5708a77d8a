"""ℓ-bit public-coin hashing with the two-stage estimator (communication-limited, not private)."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, NoReturn, Optional, Tuple

import numpy as np

from .. import _core, memory
from .._validation import integer, seed_key
from ..decoders import DECODERS, TWO_STAGE_DECODERS
from ..errors import IntegrityError
from ..reports import Reports
from ..specs import register
from .base import Mechanism, _native, values_array


@register("pch")
class PublicCoinHashing(Mechanism):
    """ℓ-bit public-coin hashing with the two-stage estimator (Acharya, Kairouz, Liu & Sun,
    "Estimating sparse discrete distributions under privacy and communication constraints",
    ALT 2021, Section 3.1, eqs. (13)–(14); see the docs page Mechanisms › Sparse estimation,
    docs/mechanisms/sparse.md).

    **These reports are NOT private.** This is a communication-limited scheme: each user
    sends ℓ bits that are a deterministic function of their value and public randomness;
    anyone holding the spec can test which values a report is consistent with. There is no
    ε: the class has no ``epsilon`` (nor ``realized_epsilon``) attribute or parameter, and
    :attr:`private` is False.

    Hash family (normative, test vectors in tests/test_public_coin_hashing.py): user i owns
    ``h_i(x) = ((a_i * x + b_i) mod 2**64) >> (64 - bits)``, where ``a_i`` and ``b_i`` are the
    first two 64-bit draws of the public ChaCha20 stream with key ``seed.to_bytes(32,
    "little")`` and nonce i — the stream of column i of a seeded sign matrix
    (:doc:`/reference/formats`, "Seeded sign matrices"): keystream words w0..w3 give
    ``a_i = w0 + 2**32 w1``, ``b_i = w2 + 2**32 w3``. This is Dietzfelbinger's
    multiply-add-shift scheme: for keys below 2**32 and bits <= 33 it is strongly universal
    (pairwise independent; ``(h(x), h(x'))`` uniform on ``[0, 2**bits)**2`` for ``x != x'``)
    when ``(a, b)`` are uniform. The paper's analysis
    (Lemma 7) assumes fully independent hash functions; this family guarantees pairwise
    independence, which is all unbiasedness needs.

    Client: user i with value x sends ``y = h_i(x)``, ``bits`` bits; there is no client
    randomness. The user's index i is public, assigned by the server (e.g. a round-robin
    position), and must be distinct across users. Reports carry it: one uint64 per user,
    ``r = (i << bits) | y``, so ``i < 2**(64 - bits)`` (:attr:`max_users`; larger indices are
    refused). Every uint64 is a well-formed report; the server cannot tell a forged one.

    Stages: stage 1 = even i, stage 2 = odd i (data-independent and balanced, which is all
    the paper's "first n/2 messages / the rest" needs).

    Aggregate (``Aggregator.counts``, length ``2k + 1``): ``M(x)`` (stage-1 users with
    ``h_i(x) = y_i``) at ``[0, k)``, ``N(x)`` (stage 2) at ``[k, 2k)``, and ``n2`` (stage-2
    users) last; the aggregator's ``n`` is every user. The server evaluates ``n * k`` hashes
    (a vectorized, multi-threaded kernel; k = 5000, n = 4e5 in about 0.3 s on 2 cores).

    Decoders (:attr:`decoders`):

    * ``"two_stage"`` (eq. (14)): T = the ``min(2s, k)`` values with the largest ``M`` (ties
      to the lower index); ``p̂(x) = (2**bits N(x)/n2 - 1)/(2**bits - 1)`` on T, 0 elsewhere.
      ``"two_stage_project"`` projects that onto the s-sparse simplex. Both need
      ``sparsity=s`` and users in both stages.
    * ``"raw"``, ``"normalize"``, ``"project"``, ``"sparse_project"``: from the pooled
      unbiased estimate ``p̃(x) = (2**bits (M + N)(x)/n - 1)/(2**bits - 1)``
      (``E[(M + N)(x)] = n((1 - 2**-bits) p_x + 2**-bits)`` exactly, eq. (13), for any
      distribution, by strong universality).
    * ``"ibu"``: EM of the model in which each pooled count ``(M + N)(x)`` is Poisson with
      mean ``n((1 - 2**-bits) p_x + 2**-bits)`` (the same surrogate as for the bit-vector
      mechanisms; the channel products are exact, but the pooled counts are not a
      sufficient statistic — the exact likelihood needs every user's (h_i, y_i)).

    Simulation (:meth:`simulate`) is exact in law under *ideal* (fully independent) hash
    functions, not for this pairwise family: users 0..n-1 in a uniformly random order,
    stage-1 counts per value multivariate hypergeometric, then ``M(x) = N1_x +
    Binomial(n1 - N1_x, 2**-bits)`` and ``N(x) = N2_x + Binomial(n2 - N2_x, 2**-bits)``
    (``n1 = ceil(n/2)``), independent across x. Cost O(k), whatever n. The means agree with
    privatize + aggregate exactly; the variances of the real family's counts differ (each
    user's ``(a_i, b_i)`` is shared by all x), a fact experiments should label.

    Parameters
    ----------
    k : int
        Number of possible values, ``2 <= k <= 2**32``.
    bits : int
        ℓ, bits per message, ``1 <= bits <= 31``.
    seed : int
        The public coin: an integer in ``[0, 2**256)`` (part of :meth:`to_dict`, shared by
        clients and server).

    Examples
    --------
    >>> mech = PublicCoinHashing(k=5000, bits=3, seed=7)
    >>> reports = mech.privatize([3, 1, 4, 1, 5], first_user=0)   # uint64, (i << 3) | y
    >>> p_hat = mech.estimate(reports, "two_stage", sparsity=2)
    """

    #: Not a locally private mechanism: no ε (the contract tests' privacy checks skip it).
    private: ClassVar[bool] = False
    #: Reports are a deterministic function of (value, public seed, user index): privatize
    #: takes no seed.
    randomized: ClassVar[bool] = False
    #: One uint64 per user, ``(user index << bits) | message``; aggregated into 2k + 1 counts.
    report_kind: ClassVar[str] = "hashed"
    decoders: ClassVar[Tuple[str, ...]] = DECODERS + TWO_STAGE_DECODERS

    def __init__(self, k: int, bits: int, seed: int):
        self._k = integer(k, "k", minimum=2, maximum=2**32)
        self._bits = integer(bits, "bits", minimum=1, maximum=31)
        self._seed = integer(seed, "seed", minimum=0, maximum=2**256 - 1)
        self._core = _core.PublicCoinHashing(self._k, self._bits, seed_key(self._seed))

    # -- parameters --------------------------------------------------------------------

    def _no_epsilon(self) -> NoReturn:
        """None: public-coin hashing is not private, so reading it raises ``AttributeError``."""
        raise AttributeError(
            "PublicCoinHashing has no epsilon: it is not a private mechanism (its reports are "
            "a deterministic function of the value and public randomness; it only limits "
            "communication to `bits` bits per user)")

    epsilon = property(_no_epsilon)  # type: ignore[assignment]
    realized_epsilon = property(_no_epsilon)  # type: ignore[assignment]

    @property
    def bits(self) -> int:
        """ℓ, bits per message."""
        return self._bits

    @property
    def seed(self) -> int:
        """The public coin."""
        return self._seed

    @property
    def output_size(self) -> int:
        """Number of distinct messages, ``2**bits`` (a report also carries the user index)."""
        return 1 << self._bits

    @property
    def max_users(self) -> int:
        """User indices lie in ``[0, max_users)``, ``max_users = 2**(64 - bits)``."""
        return 1 << (64 - self._bits)

    @property
    def _statistic_size(self) -> int:
        return 2 * self._k + 1

    def _params(self) -> Dict[str, Any]:
        return {"k": self._k, "bits": self._bits, "seed": self._seed}

    def _frequency_oracle(self) -> Tuple[float, float]:
        """``(1, 2**-bits)``: user i's report supports x when ``h_i(x) = y_i``, always for
        the user's own value and, over the public coin, with probability exactly
        ``2**-bits`` for any other (the family's collision probability). The pooled raw
        estimate is that oracle's, so :meth:`estimator_variance` is its variance over the
        users' values and the public coin together (independent across users)."""
        return 1.0, 2.0 ** -self._bits

    # -- the public hash functions -----------------------------------------------------

    def hash_parameters(self, users: Any) -> Tuple[np.ndarray, np.ndarray]:
        """``(a, b)`` (uint64 arrays) of the given user indices (see the class doc)."""
        users = self._users_array(users, "users")
        return self._core.hash_parameters(users)

    def hashes(self, user: int, values: Any) -> np.ndarray:
        """``h_user(x)`` for every x of ``values`` (uint64 array)."""
        user = integer(user, "user", minimum=0, maximum=2**64 - 1)
        return self._core.hashes(user, values_array(values, self._k))

    def channel_matrix(self, max_entries: int = 2**24, *, user: Optional[int] = None
                       ) -> np.ndarray:
        """The deterministic channel of one user: ``Q[x, y] = 1`` if ``h_user(x) = y``
        (k × 2**bits). There is no channel shared by all users; averaged over the public
        coin every message has probability ``2**-bits`` whatever x."""
        max_entries = integer(max_entries, "max_entries", minimum=1)
        entries = self._k * (1 << self._bits)
        if entries > max_entries:
            raise ValueError(f"the channel matrix has {self._k} × {1 << self._bits} = {entries} "
                             f"entries, more than max_entries = {max_entries}")
        if user is None:
            raise ValueError("PublicCoinHashing has no channel shared by all users (each "
                             "user's report is the deterministic h_i(x)): pass user=i for "
                             "the 0/1 channel of user i")
        memory.check("the channel matrix", [("its entries", 8 * entries)])
        q = np.zeros((self._k, 1 << self._bits))
        q[np.arange(self._k), self.hashes(user, np.arange(self._k)).astype(np.int64)] = 1.0
        return q

    # -- client side -------------------------------------------------------------------

    def _users_array(self, users: Any, name: str) -> np.ndarray:
        array = _native(users)
        if array.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integers, got dtype {array.dtype}")
        if array.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
        if array.dtype.kind == "i" and array.size and array.min() < 0:
            i = int(np.argmax(array < 0))
            raise ValueError(f"{name} must be >= 0: {name}[{i}] = {array[i]}")
        return np.ascontiguousarray(array, dtype=np.uint64)

    def privatize(self, values: Any, seed: Optional[int] = None, *, first_user: int = 0,
                  users: Any = None) -> Reports:
        """The reports of one value per user: ``(i << bits) | h_i(x)`` as uint64.

        Parameters
        ----------
        values : array_like of int, shape (n,)
            Integers in [0, k).
        seed : None
            Not accepted (must be None): the reports are a deterministic function of the
            values, the spec's public seed and the user indices; there is no client
            randomness.
        first_user : int, default 0
            User ``first_user + position`` hashes ``values[position]``. The server assigns
            indices; every user of a deployment needs a distinct one (two users with one index
            share a hash function: still unbiased, but not independent).
        users : array_like of int, shape (n,), optional
            Explicit user indices instead of ``first_user`` (distinct; checked).

        Returns
        -------
        Reports of uint64, shape (n,)
            Tagged with this spec's fingerprint (see :meth:`Mechanism.privatize`). Indices
            must be below :attr:`max_users`.
        """
        if seed is not None:
            raise TypeError(
                "PublicCoinHashing.privatize takes no seed: the reports are a deterministic "
                "function of the values, the spec's public seed and the user indices (pass "
                "first_user= or users=)")
        values = values_array(values, self._k)
        first_user = integer(first_user, "first_user", minimum=0, maximum=2**64 - 1)
        listed = None
        if users is not None:
            if first_user != 0:
                raise ValueError("pass either first_user or users, not both")
            listed = self._users_array(users, "users")
            if listed.size != values.size:
                raise ValueError(f"users must hold one index per value: {listed.size} indices "
                                 f"for {values.size} values")
            memory.check("checking that the user indices are distinct",
                         [("a sorted copy", 16 * listed.size)])
            order = np.argsort(listed, kind="stable")
            repeated = np.flatnonzero(listed[order][1:] == listed[order][:-1])
            if repeated.size:
                first, second = sorted(order[repeated[0]:repeated[0] + 2])
                raise ValueError(f"user indices must be distinct: users[{first}] = "
                                 f"users[{second}] = {listed[first]}")
        return self._reports(self._core.privatize(values, first_user, listed))

    def encode_string(self, values: Any, seed: Optional[int] = None) -> Reports:
        """Alias of :meth:`privatize` (users ``0 .. n-1``)."""
        return self.privatize(values, seed=seed)

    # -- server side -------------------------------------------------------------------

    def _prepare_reports(self, reports: Any, drop: bool) -> "tuple[np.ndarray, int]":
        """Reports as contiguous uint64 (any integer dtype; negative entries are malformed)."""
        array, negative = super()._prepare_reports(reports, drop)
        if array.dtype != np.uint64:
            memory.check("the reports as uint64", [("a copy", 8 * array.size)])
            array = np.ascontiguousarray(array, dtype=np.uint64)
        return array, negative

    def _check_counts(self, counts: np.ndarray, n: int) -> None:
        """A state's counts must be possible: ``n2 <= n``, ``M(x) <= n - n2``, ``N(x) <= n2``."""
        k = self._k
        n2 = int(counts[2 * k])
        if n2 > n:
            raise IntegrityError(f"corrupt aggregator: n2 = {n2} stage-2 users, more than "
                                 f"n = {n}")
        if k and int(counts[:k].max()) > n - n2:
            raise IntegrityError(f"corrupt aggregator: a stage-1 count exceeds n1 = {n - n2}")
        if k and int(counts[k:2 * k].max()) > n2:
            raise IntegrityError(f"corrupt aggregator: a stage-2 count exceeds n2 = {n2}")

    def _linear_statistic(self, counts: np.ndarray) -> np.ndarray:
        """The statistic :meth:`_expected_frequencies` and :meth:`_channel_apply` describe
        (and :func:`~ldpdist.decoders.iterative_bayesian_update` models): the pooled counts
        ``M + N`` of length k, as float64 (exact below 2**53)."""
        counts = np.asarray(counts)
        if counts.shape != (self._statistic_size,):
            raise ValueError(f"the aggregate of {self!r} has {self._statistic_size} counts, "
                             f"got shape {counts.shape}")
        k = self._k
        return counts[:k].astype(np.float64) + counts[k:2 * k].astype(np.float64)

    def _two_stage_estimate(self, counts: np.ndarray, n: int, sparsity: int) -> np.ndarray:
        """eq. (14) (see the class doc); ``sparsity`` is already checked to lie in [1, k]."""
        return self._core.two_stage_estimate(np.ascontiguousarray(counts, dtype=np.uint64),
                                             n, sparsity)

    def _first_stage_raw(self, counts: np.ndarray, n: int) -> np.ndarray:
        """The stage-1 users' unbiased estimate ``(2^ℓ M/n1 - 1)/(2^ℓ - 1)``: what the
        noise-level rule reads when the two-stage decoders get no sparsity."""
        first = int(n) - int(counts[2 * self._k])
        if first <= 0:
            raise ValueError("the two-stage decoders need stage-1 users (there are none)")
        scale = float(2 ** self._bits)
        matches = np.asarray(counts[:self._k], dtype=np.float64)
        return (scale * matches / first - 1.0) / (scale - 1.0)

    def stage_sizes(self, counts: Any, n: int) -> Tuple[int, int]:
        """``(n1, n2)`` of an aggregate (stage-1 and stage-2 users)."""
        n2 = int(np.asarray(counts)[2 * self._k])
        return n - n2, n2
