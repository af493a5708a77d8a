"""A privacy ledger for repeated collection from the same users: :class:`Campaign`.

Collecting from the same users again and again spends privacy each time. A
:class:`Campaign` records the collections of one campaign (``collect``) and reports what the
whole campaign costs each user (``report``): one total (ε, δ) under each composition rule,
the smaller of them, and why that one applies. See the docs page "A year of daily
collection".

What a collection costs (ε in nats, δ a probability):

* **fresh** reports (``memoized=False``, the default): every one of the ``times``
  collections privatizes the user's value afresh with independent randomness; each counts
  as one ε-DP mechanism, with ε the mechanism's *realized* ε (``realized_epsilon``, the
  exact max log-ratio of the channel actually used, never above the ε asked for).
* **memoized** reports (``memoized=True``): the user re-sends a permanent response (or a
  randomization of it) derived once from the value. Whatever is sent is a post-processing
  of that permanent response, so ``times`` collections together cost its long-run ε_∞
  **once** — the mechanism's ``epsilon_infinity`` when it has one (the memoized
  mechanisms of ``ldpdist.longitudinal``; they must be collected with ``memoized=True``),
  else its realized ε (a plain mechanism whose single report is re-sent), or
  the number given. A single memoized collection costs ``epsilon_1`` when the mechanism
  states it (never more than ε_∞).
* **shuffled** reports (``shuffled_among=n``, fresh reports only): each collection passes
  the reports of ``n`` users through a shuffler; it costs a central (ε_c, δ_c) from the
  clone analysis of Feldman, McMillan, Talwar ("Hiding Among the Clones", FOCS 2021; the
  numerical upper bound), the smaller of two valid bounds: the generic one,
  :func:`~ldpdist.privacy.shuffle_epsilon` at the report's realized ε₀, and, when the
  mechanism has closed-form clone parameters
  (:func:`~ldpdist.privacy.clone_parameters_for`), the channel-specific one,
  :func:`~ldpdist.privacy.shuffle_epsilon_for_channel`. The row states both and which is
  counted (``shuffle_bound``). A bare ε (no mechanism) gets the generic bound. Memoized
  reports get no amplification (the analysis needs one fresh, independent report per user
  in each shuffle): a memoized collection with ``shuffled_among`` costs ε_∞ once, as above.

Composition of the counted mechanisms, each (ε_i, δ_i)-DP:

* basic: ε = Σ ε_i, δ = Σ δ_i (0 when nothing is shuffled);
* advanced (Dwork, Rothblum, Vadhan, "Boosting and Differential Privacy", FOCS 2010; the
  heterogeneous form, which is their k ε-DP mechanisms case when every ε_i = ε):
  ε = √(2 ln(1/δ′) Σ ε_i²) + Σ ε_i (e^{ε_i} − 1), δ = δ′ + Σ δ_i.

* mixed: advanced composition for some ``collect`` rows, basic for the others, the two
  parts composed by basic composition (every split is tried for up to 12 rows).

The campaign's ``delta`` is split as follows: when it has shuffled collections (S of them
in all), each gets δ_c = δ/(2S) and the slack of advanced composition is δ′ = δ/2;
otherwise δ′ = δ. Every total therefore stays within ``delta``, and the report's ε is the
smallest, with the reason. Advanced composition never wins when every counted ε_i
is at least ln 2 (then ε_i (e^{ε_i} − 1) ≥ ε_i); for k equal ε < ln 2 it wins exactly when
k > 2 ln(1/δ′) / (2 − e^ε)².
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._validation import integer, real, shown
from .amplification import (_bisect, _ChannelDivergence, clone_parameters_for,
                            shuffle_epsilon)

__all__ = ["Campaign", "CampaignReport", "CollectionCost"]


# --------------------------------------------------------------------------------------
# reading a mechanism's ε
# --------------------------------------------------------------------------------------

def _positive(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} "
                        f"{shown(value)}")
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be > 0 (nats), got {value}")
    if math.isinf(value):
        raise ValueError(f"{name} is infinite: the reports are not locally differentially "
                         "private, so no finite ε can be accounted for them")
    return value


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name`` (called when it is a method), or None when absent."""
    value = getattr(obj, name, None)
    return value() if callable(value) else value


#: The attributes a mechanism may state its ε in (see :func:`_local_epsilon`).
_EPSILON_NAMES = ("realized_epsilon", "epsilon", "epsilon_infinity", "epsilon_1")


def _local_epsilon(source: Any, memoized: bool, times: int) -> Tuple[float, str]:
    """The ε one counted collection costs before shuffling, and the attribute it came from."""
    if isinstance(source, numbers.Real) and not isinstance(source, (bool, np.bool_)):
        return _positive(source, "epsilon"), "given"
    if isinstance(source, (bool, np.bool_)) or not any(
            hasattr(source, name) for name in _EPSILON_NAMES):
        raise TypeError(f"collect() takes a mechanism (an object with an epsilon, "
                        f"realized_epsilon or epsilon_infinity) or an ε in nats, got "
                        f"{type(source).__name__} {shown(source)}")
    if getattr(source, "private", True) is False:
        raise ValueError(f"{type(source).__name__} is not locally differentially private: "
                         "there is no ε to account for")
    names = ["realized_epsilon", "epsilon"]
    has_infinity = _attribute(source, "epsilon_infinity") is not None
    if memoized and has_infinity:
        einf = _positive(_attribute(source, "epsilon_infinity"),
                         f"{type(source).__name__}.epsilon_infinity")
        e1 = _attribute(source, "epsilon_1") if times == 1 else None
        if e1 is not None:
            e1 = _positive(e1, f"{type(source).__name__}.epsilon_1")
            if e1 < einf:
                return e1, "epsilon_1"
        return einf, "epsilon_infinity"
    if has_infinity:
        raise ValueError(f"{type(source).__name__} memoizes its reports (it states an "
                         "epsilon_infinity): collect it with memoized=True")
    for name in names:
        value = _attribute(source, name)
        if value is not None:
            return _positive(value, f"{type(source).__name__}.{name}"), name
    raise TypeError(f"{type(source).__name__} states no ε (epsilon, realized_epsilon or "
                    "epsilon_infinity)")


# --------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollectionCost:
    """One ``collect`` call of a :class:`Campaign`, as the ledger counts it.

    Attributes
    ----------
    label : str
        The label given to ``collect`` (or the mechanism's class name, or ``"ε = …"``).
    kind : {"fresh", "memoized", "shuffled"}
        How the collection is counted (see the module documentation).
    times : int
        Number of collections (reports per user).
    source : str
        Where the local ε came from: ``"realized_epsilon"``, ``"epsilon"``,
        ``"epsilon_1"``, ``"epsilon_infinity"`` (attributes of the mechanism) or
        ``"given"`` (a number passed to ``collect``).
    local_epsilon : float
        ε₀ of one report, in nats (for memoized collections, the ε_∞ or ε_1 counted).
    users : int or None
        Number of users shuffled together (shuffled collections only).
    epsilon : float
        ε of each counted mechanism, in nats: ``local_epsilon``, or the central ε of one
        shuffled collection.
    delta : float
        δ of each counted mechanism (0 unless shuffled).
    counted : int
        How many mechanisms enter the composition: ``times``, or 1 when memoized.
    note : str
        One sentence on how it is counted.
    composition : {"basic", "advanced"}
        The rule this row is composed under in the campaign's best total.
    shuffle_bound : {"", "generic", "channel"}
        Shuffled rows: which amplification bound gives ``epsilon`` — ``"channel"`` (the
        mechanism's own clone parameters) when it is smaller than the generic one, else
        ``"generic"``; ``""`` for rows that are not shuffled.
    generic_epsilon : float or None
        Shuffled rows: the generic bound (any ε₀-LDP randomizer at ``local_epsilon``).
    channel_epsilon : float or None
        Shuffled rows: the channel-specific bound, or None when the mechanism has no
        closed-form clone parameters (or a bare ε was collected).
    """

    label: str
    kind: str
    times: int
    source: str
    local_epsilon: float
    users: Optional[int]
    epsilon: float
    delta: float
    counted: int
    note: str
    composition: str = "basic"
    shuffle_bound: str = ""
    generic_epsilon: Optional[float] = None
    channel_epsilon: Optional[float] = None

    @property
    def total_epsilon(self) -> float:
        """``counted · epsilon``: this group's share of basic composition, in nats."""
        return self.counted * self.epsilon


@dataclass(frozen=True)
class CampaignReport:
    """The cost of a :class:`Campaign` to each user (from :meth:`Campaign.report`).

    Attributes
    ----------
    collections : tuple of CollectionCost
        One row per ``collect`` call.
    delta : float
        The campaign's δ budget.
    delta_slack : float
        δ′ of advanced composition (``delta``, or ``delta / 2`` when something is shuffled).
    delta_per_shuffle : float
        δ_c given to each shuffled collection (0 when nothing is shuffled).
    basic_epsilon, basic_delta : float
        Basic composition: Σ ε_i and Σ δ_i.
    advanced_epsilon, advanced_delta : float
        Advanced composition (heterogeneous Dwork–Rothblum–Vadhan):
        √(2 ln(1/δ′) Σ ε_i²) + Σ ε_i (e^{ε_i} − 1) and δ′ + Σ δ_i.
    method : {"basic", "advanced", "mixed"}
        The rule that gives the smallest ε (the simplest on ties): ``"mixed"`` composes
        some rows by advanced composition and the others by basic composition (each row's
        ``composition`` says which), the two parts by basic composition.
    epsilon, delta_used : float
        The campaign's guarantee: (ε, δ) of ``method`` (δ is ``basic_delta``, plus δ′
        when some row is composed by advanced composition).
    reason : str
        Why ``method`` applies, in one or two sentences.
    """

    collections: Tuple[CollectionCost, ...]
    delta: float
    delta_slack: float
    delta_per_shuffle: float
    basic_epsilon: float
    basic_delta: float
    advanced_epsilon: float
    advanced_delta: float
    method: str
    epsilon: float
    delta_used: float
    reason: str

    @property
    def counted(self) -> int:
        """Number of mechanisms composed (memoized groups count once)."""
        return sum(c.counted for c in self.collections)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dictionary of every field (``collections`` as a list of dicts)."""
        data = asdict(self)
        data["collections"] = [dict(asdict(c), total_epsilon=c.total_epsilon)
                               for c in self.collections]
        data["counted"] = self.counted
        return data

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def __str__(self) -> str:
        header = ["collection", "kind", "times", "ε source", "local ε", "users",
                  "ε counted", "δ counted", "counted", "Σ ε", "composed by"]
        rows = [[c.label, c.kind, str(c.times), c.source, f"{c.local_epsilon:.6g}",
                 "" if c.users is None else str(c.users), f"{c.epsilon:.6g}",
                 f"{c.delta:.3g}", str(c.counted), f"{c.total_epsilon:.6g}", c.composition]
                for c in self.collections]
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) if i < 2 or i == 10 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
                 for row in [header] + rows]
        lines += [f"{c.label}: {c.note}" for c in self.collections]
        lines += [
            f"basic composition:    ε = {self.basic_epsilon:.6g}, δ = {self.basic_delta:.3g}",
            f"advanced composition: ε = {self.advanced_epsilon:.6g}, "
            f"δ = {self.advanced_delta:.3g} (δ′ = {self.delta_slack:.3g})",
            f"applies: {self.method} composition, ε = {self.epsilon:.6g}, "
            f"δ = {self.delta_used:.3g}: {self.reason}",
        ]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------
# the ledger
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Entry:
    label: str
    local_epsilon: float
    source: str
    times: int
    memoized: bool
    users: Optional[int]
    #: closed-form clone parameters ((ε₀, p), ...) of the mechanism, or None (shuffled
    #: fresh rows only; see _clone_parameters)
    clone: Optional[Tuple[Tuple[float, float], ...]] = None


def _clone_parameters(source: Any, local_epsilon: float
                      ) -> Optional[Tuple[Tuple[float, float], ...]]:
    """The mechanism's clone parameters in closed form (any domain size), or None when it
    has none here (a bare ε, a mechanism clone_parameters_for does not cover) or when they
    do not describe the ε counted (their ε₀ above the local ε: never for the covered
    mechanisms, whose ε₀ is their realized ε; checked so that the ledger can only use a
    bound for the channel it counts)."""
    if isinstance(source, numbers.Real):
        return None
    try:
        parameters = clone_parameters_for(source)
    except ValueError:
        return None
    if not parameters or any(e0 > local_epsilon * (1 + 1e-12) for e0, _ in parameters):
        return None
    return tuple((float(e0), float(p)) for e0, p in parameters)


def _advanced(rows: List["CollectionCost"], slack: float) -> float:
    """Advanced composition (heterogeneous Dwork–Rothblum–Vadhan) of the rows' counted
    mechanisms: √(2 ln(1/δ′) Σ ε_i²) + Σ ε_i (e^{ε_i} − 1); 0 for no rows."""
    squares = math.fsum(r.counted * r.epsilon ** 2 for r in rows)
    drift = math.fsum(r.counted * r.epsilon * math.expm1(r.epsilon) for r in rows)
    return math.sqrt(2.0 * math.log(1.0 / slack) * squares) + drift


#: Up to this many collect() calls every split between basic and advanced composition is
#: tried; above it, only "all basic", "all advanced" and "advanced for the rows of ε < ln 2".
_EXHAUSTIVE = 12


def _clones(clone: Tuple[Tuple[float, float], ...]) -> str:
    """The clone probabilities p of the parameters, with e^−ε₀ for comparison."""
    return ", ".join(f"p = {p:.4g} vs e^−ε₀ = {math.exp(-e0):.4g}" for e0, p in clone)


def _subsets(rows: List["CollectionCost"]) -> List[frozenset]:
    g = len(rows)
    if g <= _EXHAUSTIVE:
        return [frozenset(i for i in range(g) if mask >> i & 1) for mask in range(1 << g)]
    small = frozenset(i for i, r in enumerate(rows) if r.epsilon < math.log(2.0))
    return [frozenset(), frozenset(range(g)), small]


def _users(value: Any) -> int:
    """A user count ≥ 2: an integer, or a float with an integral value (``1e6``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return integer(value, "shuffled_among", minimum=2)


class Campaign:
    """A ledger of the collections made from the same users, and what they cost together.

    Parameters
    ----------
    delta : float, default 1e-9
        The campaign's δ budget, a probability in (0, 1): the slack δ′ of advanced
        composition and, when some collections are shuffled, their central δ (half each;
        see the module documentation).

    Examples
    --------
    >>> from ldpdist.privacy import Campaign
    >>> daily = Campaign(delta=1e-9).collect(0.5, times=365, label="daily")
    >>> round(daily.epsilon(method="basic"), 6)
    182.5
    >>> daily.report().method
    'advanced'
    >>> Campaign().collect(0.5, times=365, memoized=True).epsilon()
    0.5
    """

    def __init__(self, *, delta: float = 1e-9):
        d = real(delta, "delta")
        if not 0 < d < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        self._delta = d
        self._entries: List[_Entry] = []
        self._cache: Dict[Tuple[float, int, float], float] = {}

    @property
    def delta(self) -> float:
        """The campaign's δ budget."""
        return self._delta

    def __len__(self) -> int:
        """Number of ``collect`` calls."""
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Campaign(delta={self._delta!r}, collect calls={len(self._entries)})"

    def collect(self, mechanism_or_epsilon: Any, *, times: int = 1, memoized: bool = False,
                shuffled_among: Optional[int] = None, label: str = "") -> "Campaign":
        """Add ``times`` collections of one report per user.

        Parameters
        ----------
        mechanism_or_epsilon : mechanism or float
            A mechanism (its realized ε is counted: ``realized_epsilon`` when it has one,
            else ``epsilon``; with ``memoized=True`` its ``epsilon_infinity`` first, when it
            has one) or the local ε of one report in nats (> 0, finite; with
            ``memoized=True``, the ε_∞ of the permanent response).
        times : int, default 1
            Number of collections (≥ 1), e.g. 365 for a year of daily reports.
        memoized : bool, default False
            The reports are memoized (a permanent response re-sent, or randomized afresh
            from it): all ``times`` of them together cost ε_∞ once.
        shuffled_among : int, optional
            Each collection's reports are shuffled among this many users (≥ 2) before the
            server sees them: each fresh collection costs the central (ε, δ) of
            :func:`~ldpdist.privacy.shuffle_epsilon`, or of
            :func:`~ldpdist.privacy.shuffle_epsilon_for_channel` when the mechanism has
            closed-form clone parameters and that bound is smaller (the report's row says
            which, and gives both).
        label : str, default ""
            A name for this row of the report.

        Returns
        -------
        Campaign
            ``self``, so calls chain.

        Raises
        ------
        ValueError
            ε ≤ 0, NaN or infinite (also a mechanism's realized ε: not LDP); ``times < 1``;
            ``shuffled_among < 2``; a non-private mechanism; a mechanism that states
            ``epsilon_infinity`` collected without ``memoized=True``.
        TypeError
            Anything but a mechanism or a real number; a non-integer ``times``.
        """
        times = integer(times, "times", minimum=1)
        if not isinstance(memoized, (bool, np.bool_)):
            raise TypeError(f"memoized must be True or False, got {shown(memoized)}")
        users = None if shuffled_among is None else _users(shuffled_among)
        if not isinstance(label, str):
            raise TypeError(f"label must be a string, got {shown(label)}")
        epsilon, source = _local_epsilon(mechanism_or_epsilon, bool(memoized), times)
        if not label:
            label = (f"ε = {epsilon:.6g}" if source == "given"
                     else type(mechanism_or_epsilon).__name__)
        clone = (_clone_parameters(mechanism_or_epsilon, epsilon)
                 if users is not None and not memoized else None)
        self._entries.append(_Entry(label, epsilon, source, times, bool(memoized), users,
                                    clone))
        return self

    def _shuffled(self, epsilon0: float, n: int, delta: float) -> float:
        key = (epsilon0, n, delta)
        if key not in self._cache:
            self._cache[key] = shuffle_epsilon(epsilon0, n, delta)
        return self._cache[key]

    def _shuffled_channel(self, clone: Tuple[Tuple[float, float], ...], n: int,
                          delta: float) -> float:
        """:func:`shuffle_epsilon_for_channel` (upper bound, default tolerance) from the
        clone parameters stored at ``collect`` time."""
        key = ("channel", clone, n, delta)
        if key not in self._cache:
            top = max(e0 for e0, _ in clone)
            self._cache[key] = min(top, _bisect(_ChannelDivergence(list(clone), n), top,
                                                delta, "upper", 1e-4))
        return self._cache[key]

    def report(self) -> CampaignReport:
        """What the campaign costs each user: a :class:`CampaignReport` (one row per
        ``collect`` call, the totals under basic and advanced composition, the smallest of
        basic, advanced and mixed composition, and why). Shuffled collections are computed here (a fraction of a second each)."""
        if not self._entries:
            raise ValueError("the campaign has no collections: call collect() first")
        shuffles = sum(e.times for e in self._entries if e.users is not None and not e.memoized)
        delta_c = self._delta / (2 * shuffles) if shuffles else 0.0
        slack = self._delta / 2 if shuffles else self._delta
        rows = []
        for e in self._entries:
            if e.memoized:
                what = {"epsilon_infinity": "the long-run bound ε_∞",
                        "epsilon_1": "ε_1 (a single report)",
                        "given": "the ε given (as ε_∞)"}.get(
                            e.source, "the realized ε of the one report re-sent")
                note = (f"memoized: {e.times} collection(s) cost {what} once")
                if e.users is not None:
                    note += "; no amplification by shuffling is counted for memoized reports"
                rows.append(CollectionCost(e.label, "memoized", e.times, e.source,
                                           e.local_epsilon, e.users, e.local_epsilon, 0.0, 1,
                                           note))
            elif e.users is not None:
                generic = self._shuffled(e.local_epsilon, e.users, delta_c)
                channel = (None if e.clone is None
                           else self._shuffled_channel(e.clone, e.users, delta_c))
                note = (f"shuffled among {e.users} users: central ε of each collection at "
                        f"δ = {delta_c:.3g} (Feldman–McMillan–Talwar clone analysis, "
                        "numerical upper bound): ")
                if channel is not None and channel < generic:
                    bound, central = "channel", channel
                    note += (f"the channel-specific bound {channel:.6g} (clone probability "
                             f"{_clones(e.clone)}) is counted; the generic bound at ε₀ = "
                             f"{e.local_epsilon:.6g} gives {generic:.6g}")
                elif channel is not None:
                    bound, central = "generic", generic
                    note += (f"the generic bound {generic:.6g} is counted; the "
                             f"channel-specific bound (clone probability {_clones(e.clone)}) "
                             f"gives {channel:.6g}, no gain for this mechanism")
                else:
                    bound, central = "generic", generic
                    note += (f"the generic bound {generic:.6g} is counted (no closed-form "
                             "channel-specific bound for "
                             f"{'a bare ε' if e.source == 'given' else 'this mechanism'})")
                rows.append(CollectionCost(e.label, "shuffled", e.times, e.source,
                                           e.local_epsilon, e.users, central, delta_c,
                                           e.times, note, shuffle_bound=bound,
                                           generic_epsilon=generic,
                                           channel_epsilon=channel))
            else:
                rows.append(CollectionCost(e.label, "fresh", e.times, e.source,
                                           e.local_epsilon, None, e.local_epsilon, 0.0,
                                           e.times, f"fresh: each of {e.times} collection(s) "
                                                    "costs the local ε"))
        basic = math.fsum(r.counted * r.epsilon for r in rows)
        basic_delta = math.fsum(r.counted * r.delta for r in rows)
        advanced = _advanced(rows, slack)
        counted = sum(r.counted for r in rows)
        # the best split: the groups in `chosen` by advanced composition, the others by basic
        # composition, the two parts composed by basic composition (empty: basic; all:
        # advanced)
        chosen, best = frozenset(), basic
        for subset in _subsets(rows):
            value = (math.fsum(r.counted * r.epsilon for i, r in enumerate(rows)
                               if i not in subset) + _advanced([rows[i] for i in subset], slack))
            if value < best and not math.isclose(value, best, rel_tol=1e-12):
                chosen, best = subset, value
        if not chosen:
            method = "basic"
        elif len(chosen) == len(rows):
            method = "advanced"
        else:
            method = "mixed"
        rows = [replace(r, composition="advanced" if i in chosen else "basic")
                for i, r in enumerate(rows)]
        drift = math.fsum(r.counted * r.epsilon * math.expm1(r.epsilon) for r in rows)
        if counted == 1:
            reason = ("a single mechanism is counted, for which basic composition is exact; "
                      "advanced composition only helps when many are composed")
        elif method == "advanced":
            reason = (f"advanced composition of the {counted} counted mechanisms gives a "
                      f"smaller ε ({advanced:.6g} < {basic:.6g}) for an extra δ′ = "
                      f"{slack:.3g}")
        elif method == "mixed":
            names = ", ".join(repr(rows[i].label) for i in sorted(chosen))
            reason = (f"advanced composition for {names} and basic composition for the "
                      f"other rows, composed by basic composition, gives a smaller ε "
                      f"({best:.6g}) than basic ({basic:.6g}) or advanced ({advanced:.6g}) "
                      "composition of everything")
        elif drift >= basic:
            reason = ("the counted ε are too large for advanced composition: its term "
                      f"Σ ε_i (e^ε_i − 1) = {drift:.6g} alone is ≥ Σ ε_i (always so when "
                      "every ε_i ≥ ln 2)")
        else:
            reason = (f"too few counted mechanisms ({counted}) for advanced composition to "
                      f"pay off at δ′ = {slack:.3g} (it gives {advanced:.6g} ≥ {basic:.6g})")
        if method == "basic":
            used = basic_delta
        else:
            used = basic_delta + slack
        return CampaignReport(tuple(rows), self._delta, slack, delta_c, basic, basic_delta,
                              advanced, basic_delta + slack, method, best, used, reason)

    def epsilon(self, *, method: str = "best") -> float:
        """The campaign's total ε in nats.

        Parameters
        ----------
        method : {"best", "basic", "advanced"}, default "best"
            ``"best"``: the smaller of the two (see :meth:`report` for which and why).
        """
        if method not in ("best", "basic", "advanced"):
            raise ValueError(f"method must be 'best', 'basic' or 'advanced', got {method!r}")
        r = self.report()
        return {"best": r.epsilon, "basic": r.basic_epsilon,
                "advanced": r.advanced_epsilon}[method]


# --------------------------------------------------------------------------------------
# command line: ldpdist privacy
# --------------------------------------------------------------------------------------

def _count(text: str, option: str, minimum: int) -> int:
    """A count written as an integer or in float notation (``1e6``)."""
    from .errors import CliError

    try:
        value = float(text)
    except ValueError:
        raise CliError(f"{option}: expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= minimum and value == int(value)):
        raise CliError(f"{option}: expected a whole number ≥ {minimum}, got {text!r}")
    return int(value)


def _delta_option(text: str) -> float:
    from .errors import CliError

    try:
        value = float(text)
    except ValueError:
        raise CliError(f"--delta: expected a probability in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise CliError(f"--delta: expected a probability in (0, 1), got {text!r}")
    return value


def cmd_privacy(args: argparse.Namespace) -> int:
    from .deploy import load_spec

    mechanism = _load(args.spec, load_spec)
    memoized = bool(args.memoized) or getattr(mechanism, "epsilon_infinity", None) is not None
    collections = _count(args.collections, "--collections", 1)
    users = None if args.users is None else _count(args.users, "--users", 2)
    delta = _delta_option(args.delta)
    name = type(mechanism).__name__
    local = Campaign(delta=delta).collect(mechanism, times=collections,
                                          memoized=memoized, label=name).report()
    shuffled = None
    if users is not None:
        shuffled = Campaign(delta=delta).collect(
            mechanism, times=collections, memoized=memoized, shuffled_among=users,
            label=name).report()
    row = local.collections[0]
    if args.json:
        print(json.dumps({
            "mechanism": name, "k": getattr(mechanism, "k", None),
            "epsilon_requested": _requested(mechanism),
            "epsilon_realized": row.local_epsilon, "epsilon_source": row.source,
            "collections": collections, "memoized": memoized, "users": users,
            "delta": delta, "local": local.to_dict(),
            "shuffled": None if shuffled is None else shuffled.to_dict()},
            indent=2, ensure_ascii=False))
        return 0
    k = getattr(mechanism, "k", None)
    requested = _requested(mechanism)
    asked = "" if requested is None else f"ε requested {requested:.6g}, "
    print(f"{name}{'' if k is None else f' (k = {k})'}: {asked}counted "
          f"{row.local_epsilon!r} ({row.source})")
    how = "memoized (the same permanent response)" if memoized else "fresh"
    print(f"{collections} collection(s) from the same users, {how} reports; δ = {delta:.3g}")
    print()
    print("without a shuffler (local reports):")
    print(_indent(str(local)))
    if shuffled is not None:
        print()
        print(f"shuffled among {users} users in each collection:")
        print(_indent(str(shuffled)))
    return 0


def _load(path: str, load_spec: Any) -> Any:
    """The mechanism of a spec file: a mechanism of the main registry, or a longitudinal
    (memoized) mechanism of :mod:`ldpdist.longitudinal`."""
    from .errors import CliError

    try:
        from . import longitudinal
    except ImportError:  # pragma: no cover - the package always has it
        return load_spec(path)
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return load_spec(path)  # its one-line error
    name = data.get("mechanism") if isinstance(data, dict) else None
    if isinstance(name, str) and name in longitudinal.__all__ and name[0].isupper():
        try:
            return longitudinal.from_dict(data)
        except (ValueError, TypeError, KeyError) as exc:
            raise CliError(f"invalid spec in {path!r}: {' '.join(str(exc).split())}") from None
    return load_spec(path)


def _requested(mechanism: Any) -> Optional[float]:
    value = getattr(mechanism, "epsilon", None)
    return None if value is None else float(value)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def register(subparsers: Any) -> None:
    """Add ``privacy`` to the ``ldpdist`` parser."""
    from .deploy import _command

    p = subparsers.add_parser(
        "privacy", help="what repeated collections cost each user (a privacy ledger)",
        description="The total (ε, δ) of N collections from the same users with the "
                    "mechanism of a spec: the realized ε of one report, the total under "
                    "basic and advanced composition and which applies, memoized reports, "
                    "and with --users the central ε after shuffling. See the docs page "
                    "'A year of daily collection'.")
    p.add_argument("--spec", required=True, metavar="FILE",
                   help="the mechanism's JSON spec (ldpdist spec, or the to_dict() of a "
                        "memoized mechanism of ldpdist.longitudinal, which is counted as "
                        "memoized)")
    p.add_argument("--collections", default="1", metavar="N",
                   help="number of collections (reports per user), e.g. 365 (default 1)")
    p.add_argument("--users", metavar="N",
                   help="also count each collection shuffled among N users (e.g. 1e6)")
    p.add_argument("--delta", default="1e-9",
                   help="the campaign's δ budget in (0, 1) (default 1e-9)")
    p.add_argument("--memoized", action="store_true",
                   help="the reports are memoized: the N collections cost ε_∞ once (the "
                        "realized ε of the one report re-sent, for a plain mechanism)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(handler=_command(cmd_privacy))
