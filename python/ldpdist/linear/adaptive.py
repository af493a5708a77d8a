"""Adaptive sample splitting (R. Bassily, "Linear Queries Estimation with Local Differential
Privacy", AISTATS 2019, Algorithm 6 and Theorem 5.2).

The n users are split into d rounds up front, from a public seed and independently of their
data. In round t the analyst publishes a query ``q_t`` (a vector over the J possible values
with ``|q_t[v]| ≤ r``) and each user of round t sends one bit: the sign of a reply
``±c_ε r``, unbiased for ``q_t[v]``. The answer of round t is the mean reply
``ȳ_t ≈ ⟨q_t, p⟩``. The analyst may choose ``q_{t+1}`` from all earlier answers (a bisection
for a median, say): each user answers a single query, so every user's report is ε-LDP
whatever the analyst does. :class:`AdaptiveLinearQueries` is the interactive session;
the Rust core (``rust/linear/adaptive.rs``) assigns rounds and draws the replies.
"""

from __future__ import annotations

import math
import secrets
import warnings
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from .. import _core, memory
from .._validation import (
    as_array,
    check_finite,
    float_vector,
    integer,
    real,
    seed_key,
    shown,
)
from ..mechanisms.base import check_epsilon, values_array
from ..specs import checked_fields

__all__ = ["AdaptiveLinearQueries", "Round", "adaptive_error_bound"]


class Round(NamedTuple):
    """One closed round of an :class:`AdaptiveLinearQueries` session."""

    #: The query ``q_t``, shape (J,), float64 (a read-only copy).
    query: np.ndarray
    #: The answer ``ȳ_t``, an unbiased estimate of ``⟨q_t, p⟩``; NaN for a round without users.
    answer: float
    #: ``n_t``, the number of users of the round.
    n_users: int


def _c_epsilon(epsilon: float) -> float:
    """``(e^ε + 1)/(e^ε − 1) = 1/tanh(ε/2)``, without cancellation for small ε."""
    return 1.0 / math.tanh(epsilon / 2.0)


def theorem_condition_holds(n_users: int, rounds: int) -> bool:
    """Whether Theorem 5.2's condition ``n ≥ 8 d ln n`` holds."""
    return n_users >= 8 * rounds * math.log(n_users)


def adaptive_error_bound(n_users: int, rounds: int, epsilon: float, r: float = 1.0) -> float:
    """Theorem 5.2's bound on the expected largest error over the rounds.

    ``E max_t |ȳ_t − ⟨q_t, p⟩| ≤ 2 c_ε r √(2 d ln(2d) / n) + r d e^{−n/(8d)}``, with
    ``c_ε = (e^ε + 1)/(e^ε − 1)``, n users and d rounds. The theorem assumes
    ``n ≥ 8 d ln n`` (each round then holds at least n/(2d) users with high probability);
    when it does not hold the value is still returned, with a ``RuntimeWarning``: it is then
    not a proven bound. Same units as the queries (r bounds ``|q_t[v]|``).
    """
    n_users = integer(n_users, "n_users", minimum=1)
    rounds = integer(rounds, "rounds", minimum=1)
    epsilon = check_epsilon(epsilon)
    r = _bound_r(r)
    if not theorem_condition_holds(n_users, rounds):
        warnings.warn(
            f"Theorem 5.2 assumes n ≥ 8 d ln n; with n = {n_users} users and d = {rounds} "
            f"rounds, 8 d ln n = {8 * rounds * math.log(n_users):.4g} > n, so the value "
            f"returned is not a proven bound",
            RuntimeWarning, stacklevel=2)
    d, n = float(rounds), float(n_users)
    return (2.0 * _c_epsilon(epsilon) * r * math.sqrt(2.0 * d * math.log(2.0 * d) / n)
            + r * d * math.exp(-n / (8.0 * d)))


def _bound_r(r: Any) -> float:
    r = real(r, "r")
    if r <= 0:
        raise ValueError(f"r (the bound on |q[v]|) must be > 0, got {r!r}")
    return r


class AdaptiveLinearQueries:
    """An interactive session of adaptive sample splitting (Algorithm 6): pure ε-LDP, one
    bit per user, queries chosen one round at a time from the answers so far.

    Parameters
    ----------
    n_users : int
        Number of users n ≥ 1, indexed 0 … n−1.
    rounds : int
        Number of rounds d, 1 ≤ d ≤ 2**32 (one query per round).
    epsilon : float
        Privacy parameter ε > 0 (natural log), finite: ``inf`` is refused (no noise cannot be
        expressed as a finite reply scale ``c_ε r``; use the exact query instead). Double
        precision realizes ε up to about 35 (and down to about 1e-15); beyond that it is
        refused (``realized_epsilon`` below).
    r : float, default 1.0
        Bound on the queries' entries, ``|q_t[v]| ≤ r``; finite, > 0.
    seed : int or None
        The **public** seed of the round assignment (an integer in [0, 2**256); None draws
        one from the OS, readable afterwards as :attr:`seed`). Clients recompute their own
        round from it (:meth:`round_of`); it is not the randomness of the replies, which is
        each call's own ``seed`` (:meth:`respond`, :meth:`answer`).
    domain_size : int or None
        J, the number of possible values (queries have length J, values lie in [0, J)).
        None fixes it from the first query posed.

    Notes
    -----
    **The protocol.**
    User i is assigned round ``j_i`` uniformly at random from the public seed, independently
    of every value (``rust/linear/adaptive.rs`` documents the derivation word by word so that
    a client can recompute it). In round t the analyst poses ``q_t`` (:meth:`pose`); each user
    of round t (:meth:`round_users`) holding v replies ``+c_ε r`` with probability
    ``½(1 + q_t[v]/(c_ε r))``, else ``−c_ε r``, where ``c_ε = (e^ε + 1)/(e^ε − 1)``: only the
    sign travels (one bit, :meth:`respond`); the server records ``ȳ_t = c_ε r · mean(signs)``
    (:meth:`submit`). :meth:`answer` runs a whole round in simulation. Rounds run in order
    0, 1, …, d−1, each exactly once; posing a query while one is open, submitting another
    round than the open one, or going past d rounds raises ``ValueError``. A round without
    users answers NaN with a ``RuntimeWarning`` (the paper's notes answer 0, which would be a
    silently wrong number; NaN makes the missing answer visible).

    **Privacy (pure ε-LDP).**
    With ``s = q[v]/r ∈ [−1, 1]`` and ``h = 1/(2 c_ε) = ½ tanh(ε/2)``, ``P(+|v) = ½ + h s``
    lies in ``[½ − h, ½ + h]`` and so does ``P(−|v) = ½ − h s``. Hence for any values v, v'
    and either reply, ``P(reply|v)/P(reply|v') ≤ (½ + h)/(½ − h) = (1 + tanh(ε/2))/(1 −
    tanh(ε/2)) = e^ε``, with equality only when ``q[v] = ±r`` and ``q[v'] = ∓r``. A user
    answers one query only, so adaptively chosen queries do not add up. In double precision
    ``h`` is calibrated (rounded down by a few units in the last place) so that the realized
    loss of the worst admissible query, :attr:`realized_epsilon`, is at most ε, and
    :attr:`c_epsilon` is ``1/(2h)`` for that ``h`` (the formula's value within a few ulps);
    replies are sampled exactly from the computed probabilities, so the reply is unbiased up
    to ``c_ε r · 2^-51``. :meth:`realized_epsilon_of` gives the loss of a given query, below
    ε when its entries do not reach both ``−r`` and ``+r``.

    **Accuracy (Theorem 5.2).**
    With ``n ≥ 8 d ln n``: ``E max_t |ȳ_t − ⟨q_t, p⟩| ≤ 2 c_ε r √(2 d ln(2d)/n) +
    r d e^{−n/(8d)}`` (:meth:`bound`, :func:`adaptive_error_bound`).

    Examples
    --------
    >>> session = AdaptiveLinearQueries(n_users=10_000, rounds=5, epsilon=1.0, seed=7)
    >>> values = np.random.default_rng(0).integers(0, 100, size=10_000)
    >>> lo, hi = 0, 99                              # bisection for the median, 5 rounds
    >>> for t in range(5):
    ...     mid = (lo + hi) // 2
    ...     q = (np.arange(100) <= mid).astype(float)
    ...     if session.answer(q, values[session.round_users(t)], seed=t) >= 0.5:
    ...         hi = mid
    ...     else:
    ...         lo = mid + 1
    """

    def __init__(self, n_users: int, rounds: int, epsilon: float, r: float = 1.0,
                 seed: Optional[int] = None, *, domain_size: Optional[int] = None):
        self._n_users = integer(n_users, "n_users", minimum=1, maximum=2**63 - 1)
        self._rounds = integer(rounds, "rounds", minimum=1, maximum=2**32)
        self._epsilon = check_epsilon(epsilon)
        self._r = _bound_r(r)
        if seed is None:
            seed = secrets.randbits(256)
        self._key = seed_key(seed)
        self._seed = int(seed)
        self._domain_size = (None if domain_size is None
                             else integer(domain_size, "domain_size", minimum=1,
                                          maximum=2**32))
        self._channel = _core.AdaptiveReplyChannel(self._epsilon, self._r)
        self._history: List[Round] = []
        self._pending: Optional[np.ndarray] = None
        self._grouping: Optional[Tuple[np.ndarray, np.ndarray]] = None

    # -- parameters ------------------------------------------------------------------

    @property
    def n_users(self) -> int:
        """n, the number of users."""
        return self._n_users

    @property
    def rounds(self) -> int:
        """d, the number of rounds (queries)."""
        return self._rounds

    @property
    def epsilon(self) -> float:
        """The privacy guarantee asked for (natural log)."""
        return self._epsilon

    @property
    def r(self) -> float:
        """The bound on the queries' entries, ``|q[v]| ≤ r``."""
        return self._r

    @property
    def seed(self) -> int:
        """The public seed of the round assignment (drawn from the OS when None was given)."""
        return self._seed

    @property
    def domain_size(self) -> Optional[int]:
        """J (the length of every query), or None until the first query is posed."""
        return self._domain_size

    @property
    def c_epsilon(self) -> float:
        """``c_ε = (e^ε + 1)/(e^ε − 1)`` as realized in double precision (see the class
        documentation): a reply is ``±c_ε r``."""
        return float(self._channel.c_epsilon)

    @property
    def scale(self) -> float:
        """``c_ε r``, the public magnitude of a reply (a user sends only its sign)."""
        return float(self._channel.scale)

    @property
    def realized_epsilon(self) -> float:
        """The exact privacy loss of the worst admissible query (entries ±r): at most
        :attr:`epsilon`, and equal to it up to a few units in the last place."""
        return float(self._channel.realized_epsilon)

    # -- round assignment (public) ---------------------------------------------------

    def round_of(self, users: Any) -> np.ndarray:
        """The rounds of the given users (int64, same shape as ``users``, a 1-D array of
        user indices in [0, n_users)). Each is a pure function of (seed, user index, rounds):
        a client computes its own without the others'."""
        array = self._user_indices(users)
        return _core.adaptive_round_of(self._key, array, self._rounds).astype(np.int64)

    def round_sizes(self) -> np.ndarray:
        """``n_t`` for every round, int64 array of shape (rounds,), summing to n_users."""
        return np.diff(self._groups()[1]).astype(np.int64)

    def round_users(self, t: int) -> np.ndarray:
        """The users of round t, ascending (int64 array of shape (n_t,)). Their values, in
        this order, are what :meth:`answer` takes for round t."""
        t = integer(t, "t", minimum=0, maximum=self._rounds - 1)
        order, offsets = self._groups()
        users = order[offsets[t]:offsets[t + 1]]
        memory.check("round_users", [("the users of the round as int64", 8 * users.size)])
        return users.astype(np.int64)

    # -- the interactive protocol ----------------------------------------------------

    @property
    def next_round(self) -> int:
        """The round the next query goes to (the open round while a query is posed); equals
        ``rounds`` once every round is closed."""
        return len(self._history)

    @property
    def pending_query(self) -> Optional[np.ndarray]:
        """The query of the open round (posed, replies not submitted yet), or None."""
        return self._pending

    @property
    def history(self) -> Tuple[Round, ...]:
        """The closed rounds, in order: ``(query, answer, n_users)`` each (:class:`Round`).
        The analyst may choose the next query from all of it."""
        return tuple(self._history)

    @property
    def answers(self) -> np.ndarray:
        """The answers ``ȳ_t`` of the closed rounds, float64 array of shape (rounds closed,)."""
        return np.array([h.answer for h in self._history], dtype=np.float64)

    def pose(self, query: Any) -> int:
        """Open the next round with ``query`` (shape (J,), float64, finite, ``|q[v]| ≤ r``)
        and return its index t. Its users (:meth:`round_users`) reply with :meth:`respond`;
        the server closes it with :meth:`submit`."""
        t = self._open_round()
        q = self._query(query)
        self._fix_domain(q)
        self._pending = q.copy()  # the caller's array may change before the round closes
        return t

    def respond(self, query: Any, values: Any, *, seed: Optional[int] = None) -> np.ndarray:
        """Client side: the replies of users holding ``values`` to ``query``.

        Parameters
        ----------
        query : array_like, shape (J,)
            The round's query (float64, finite, ``|q[v]| ≤ r``).
        values : array_like of int, shape (m,)
            The users' values, in [0, J).
        seed : int or None
            The replies' private randomness (None: the OS). With an integer seed the result
            is the same on any number of threads.

        Returns
        -------
        numpy.ndarray of int8, shape (m,)
            +1 or −1 per user: the sign of the reply ``±c_ε r`` (the one bit a user sends).
        """
        q = self._query(query)
        v = values_array(values, q.size)
        return self._channel.respond(seed_key(seed), q, v)

    def submit(self, t: int, replies: Any) -> float:
        """Server side: close round t (the open round) with its users' replies.

        ``replies``: integers +1 or −1 (e.g. int8 from :meth:`respond`), one per user of
        round t (length ``n_t``; booleans are refused as ambiguous). Returns and records
        ``ȳ_t = c_ε r · mean(replies)`` (NaN with a ``RuntimeWarning`` when round t has no
        users).
        """
        t = integer(t, "t", minimum=0)
        self._check_open(t)
        signs = self._replies(replies)
        n_t = int(self.round_sizes()[t])
        if signs.size != n_t:
            raise ValueError(f"round {t} has {n_t} users, got {signs.size} replies")
        plus = int(_core.adaptive_count_plus(signs)) if n_t else 0
        return self._close(t, plus, n_t)

    def answer(self, query: Any, values: Any, *, seed: Optional[int] = None) -> float:
        """Simulation: pose ``query``, draw the replies of the round's users and submit them,
        in one call (the replies are not stored; the result equals ``submit(t,
        respond(query, values, seed=seed))``).

        ``values``: the values of the users of the next round, in the order of
        :meth:`round_users` (length ``n_t``). Returns ``ȳ_t``; NaN with a ``RuntimeWarning``
        for a round without users.
        """
        t = self._open_round()
        q = self._query(query)
        v = values_array(values, q.size)
        n_t = int(self.round_sizes()[t])
        if v.size != n_t:
            raise ValueError(f"round {t} has {n_t} users, got {v.size} values")
        plus = int(self._channel.simulate_plus_count(seed_key(seed), q, v)) if n_t else 0
        self._fix_domain(q)
        self._pending = q
        return self._close(t, plus, n_t)

    # -- privacy and accuracy --------------------------------------------------------

    def reply_probabilities(self, query: Any) -> np.ndarray:
        """``P(reply = +1 | v)`` for every value (float64, shape (J,)): exactly the
        probabilities the sampler uses."""
        return self._channel.plus_probabilities(self._query(query))

    def realized_epsilon_of(self, query: Any) -> float:
        """The exact privacy loss of ``query``'s replies, ``max over v, v' and the reply of
        ln P(reply|v)/P(reply|v')``: at most :attr:`realized_epsilon`, below it when the
        query's entries do not span ``[−r, r]``."""
        return float(self._channel.realized_epsilon_of(self._query(query)))

    def bound(self) -> float:
        """Theorem 5.2's bound for this session (:func:`adaptive_error_bound`; warns when
        ``n ≥ 8 d ln n`` does not hold)."""
        return adaptive_error_bound(self._n_users, self._rounds, self._epsilon, self._r)

    @property
    def bound_applies(self) -> bool:
        """Whether Theorem 5.2's condition ``n ≥ 8 d ln n`` holds for this session."""
        return theorem_condition_holds(self._n_users, self._rounds)

    # -- spec ------------------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        """The session's public parameters, JSON-safe: what clients need to recompute their
        rounds and replies (not the history). ``from_dict(to_dict())`` is an equal, fresh
        session; ``domain_size`` is None until fixed."""
        return {"protocol": "AdaptiveLinearQueries", "n_users": self._n_users,
                "rounds": self._rounds, "epsilon": self._epsilon, "r": self._r,
                "seed": self._seed, "domain_size": self._domain_size}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "AdaptiveLinearQueries":
        """A fresh session from :meth:`to_dict`'s output: ``ValueError`` naming a missing,
        unknown or invalid field (``TypeError`` when ``spec`` is not a dict)."""
        checked_fields(spec, "the spec of AdaptiveLinearQueries",
                       ("protocol", "n_users", "rounds", "epsilon", "r", "seed", "domain_size"))
        if spec["protocol"] != "AdaptiveLinearQueries":
            raise ValueError(f"spec is not an AdaptiveLinearQueries spec: protocol = "
                             f"{shown(spec['protocol'])}")
        try:
            return cls(spec["n_users"], spec["rounds"], spec["epsilon"], spec["r"],
                       spec["seed"], domain_size=spec["domain_size"])
        except TypeError as exc:  # a field of the wrong type: the spec is invalid
            raise ValueError(f"invalid parameters for AdaptiveLinearQueries: {exc}") from None

    def __repr__(self) -> str:
        return (f"AdaptiveLinearQueries(n_users={self._n_users}, rounds={self._rounds}, "
                f"epsilon={self._epsilon!r}, r={self._r!r}, seed={self._seed}"
                + ("" if self._domain_size is None else f", domain_size={self._domain_size}")
                + f"; {len(self._history)} rounds closed)")

    # -- internals -------------------------------------------------------------------

    def _groups(self) -> Tuple[np.ndarray, np.ndarray]:
        if self._grouping is None:
            self._grouping = _core.adaptive_group_users(self._key, self._n_users, self._rounds)
        return self._grouping

    def _user_indices(self, users: Any) -> np.ndarray:
        array = as_array(users, "users")
        if array.size == 0 and array.dtype == np.float64 and not isinstance(users, np.ndarray):
            array = array.astype(np.int64)
        if array.dtype.kind not in "iu" or isinstance(users, (str, bytes)):
            raise TypeError(f"users must be integer user indices, got {shown(users)}")
        if array.ndim != 1:
            raise ValueError(f"users must be one-dimensional, got shape {array.shape}")
        bad = (array < 0) | (array >= self._n_users)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"users must lie in [0, {self._n_users}): users[{i}] = {array[i]}")
        memory.check("round_of", [("the users as uint64", 8 * array.size),
                                  ("their rounds as uint32 and int64", 12 * array.size)])
        return np.ascontiguousarray(array, dtype=np.uint64)

    def _query(self, query: Any) -> np.ndarray:
        q = float_vector(query, "query", finite=False)
        if q.size == 0:
            raise ValueError("query must have at least one entry (one per possible value, "
                             "J ≥ 1)")
        if self._domain_size is not None and q.size != self._domain_size:
            raise ValueError(f"query has length {q.size}, but this session's queries have "
                             f"length J = {self._domain_size}")
        check_finite(q, "query")
        above = np.abs(q) > self._r
        if above.any():
            j = int(np.argmax(above))
            raise ValueError(f"query entries must satisfy |q[v]| ≤ r = {self._r!r}: "
                             f"query[{j}] = {float(q[j])!r}")
        return q

    def _fix_domain(self, q: np.ndarray) -> None:
        if self._domain_size is None:
            self._domain_size = int(q.size)

    def _open_round(self) -> int:
        """The index of the round a new query would open, or ValueError."""
        if self._pending is not None:
            raise ValueError(f"round {len(self._history)} is open (its query is posed): "
                             f"submit its replies before posing another query")
        if len(self._history) >= self._rounds:
            raise ValueError(f"all {self._rounds} rounds are closed: this session has no "
                             f"users left to ask")
        return len(self._history)

    def _check_open(self, t: int) -> None:
        current = len(self._history)
        if t < current:
            raise ValueError(f"round {t} is already closed (answer {self._history[t].answer!r})")
        if t >= self._rounds:
            raise ValueError(f"round {t} does not exist: rounds are 0 … {self._rounds - 1}")
        if self._pending is None:
            raise ValueError(f"no round is open: pose round {current}'s query first "
                             f"(pose(query))")
        if t != current:
            raise ValueError(f"round {t} is not open: rounds close in order and round "
                             f"{current} is open")

    def _replies(self, replies: Any) -> np.ndarray:
        array = as_array(replies, "replies")
        if array.size == 0 and array.dtype == np.float64 and not isinstance(replies, np.ndarray):
            array = array.astype(np.int8)
        if array.dtype == np.bool_:
            raise TypeError("replies must be +1 or −1 integers, not booleans (which would "
                            "be ambiguous); convert with np.where(bits, 1, -1)")
        if array.dtype.kind not in "iu" or isinstance(replies, (str, bytes)):
            raise TypeError(f"replies must be +1 or −1 integers (int8), got "
                            f"{shown(replies)}")
        if array.ndim != 1:
            raise ValueError(f"replies must be one-dimensional, got shape {array.shape}")
        if array.dtype != np.int8:
            bad = (array != 1) & (array != -1) if array.dtype.kind == "i" else array != 1
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"replies must be +1 or −1: replies[{i}] = {array[i]}")
            memory.check("submit", [("the replies as int8", array.size)])
        return np.ascontiguousarray(array, dtype=np.int8)

    def _close(self, t: int, plus: int, n_t: int) -> float:
        if n_t == 0:
            warnings.warn(f"round {t} has no users: its answer is NaN (with n = "
                          f"{self._n_users} users over {self._rounds} rounds some rounds "
                          f"can be empty)", RuntimeWarning, stacklevel=3)
            answer = math.nan
        else:
            answer = self.scale * (2 * plus - n_t) / n_t
        query = self._pending
        assert query is not None
        query = query.copy()
        query.setflags(write=False)
        self._history.append(Round(query, answer, n_t))
        self._pending = None
        return answer
