"""Privacy budgets as data: context-aware LDP (Acharya, Bonawitz, Kairouz, Ramage, Sun,
"Context-Aware Local Differential Privacy", ICML 2020, Section 2; see the docs page
Mechanisms › Context-aware LDP, docs/mechanisms/context-aware.md).

A *budget matrix* ``E`` (k × k, float64) gives one budget per ordered pair of inputs: a
channel ``Q`` (k × ``|Y|``, ``Q[x, y] = Q(y | x)``, rows summing to 1) is **E-LDP** when

    Q(y | x) ≤ e^{E[x, x']} · Q(y | x')      for all x, x', y.

``E[x, x] = 0``; ``E[x, x'] ≥ 0``; ``+inf`` means "no constraint" for that ordered pair.
Plain ε-LDP is :func:`uniform_budgets`; High-Low LDP (only a sensitive set is protected) is
:func:`high_low_budgets`; block-structured LDP (ε inside a block, nothing across blocks) is
:func:`block_budgets`. :func:`verify` finds the exact worst violation of a channel against a
budget matrix; :func:`realized_budgets` is the smallest budget matrix a channel satisfies.

Conventions: budgets are natural-log ε, rows of ``E`` index the *protected* input ``x`` of
the inequality above (so ``E`` need not be symmetric: High-Low budgets are not).

The verifier (``rust/privacy.rs``). :func:`verify` and :func:`realized_budgets` run in the
Rust core, without the GIL, on every core (``RAYON_NUM_THREADS`` limits them), in
O(k² · ``|Y|``) time and O(k · ``|Y|``) memory (the log channel ``ln Q``, plus the k × k result of
:func:`realized_budgets`), which the memory guard checks before anything is allocated
(``MemoryError`` otherwise); Ctrl-C interrupts them. Results are exact and reproducible:

* every amount is the float64 value of ``(ln Q(y|x) − ln Q(y|x')) − E[x, x']`` with ``ln``
  the C library's ``log`` (the one ``math.log`` uses), bit for bit, whatever the number of
  threads. (``numpy.log`` may differ from it in the last bit: on AVX-512 builds of numpy it
  uses its own vectorized logarithm.)
* ties go to the lexicographically first triple ``(x, x', y)`` among those of the maximal
  amount, again on any number of threads.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import numpy as np

from . import _core, memory
from ._validation import as_array, integer, shown
from .accounting import Campaign, CampaignReport, CollectionCost
from .amplification import (clone_parameters, clone_parameters_for, closed_form_applies,
                            shuffle_delta, shuffle_delta_for_channel, shuffle_epsilon,
                            shuffle_epsilon_for_channel, shuffle_rr_delta, shuffle_rr_epsilon)

__all__ = [
    "Violation",
    "verify",
    "realized_budgets",
    "check_budgets",
    "uniform_budgets",
    "high_low_budgets",
    "block_budgets",
    "block_labels",
    "shuffle_epsilon",
    "shuffle_delta",
    "shuffle_rr_epsilon",
    "shuffle_rr_delta",
    "closed_form_applies",
    "clone_parameters",
    "clone_parameters_for",
    "shuffle_epsilon_for_channel",
    "shuffle_delta_for_channel",
    "Campaign",
    "CampaignReport",
    "CollectionCost",
]


@dataclass(frozen=True)
class Violation:
    """The worst violation of ``Q(y|x) ≤ e^{E[x, x']} Q(y|x')`` found by :func:`verify`.

    Attributes
    ----------
    amount : float
        ``max ln Q(y|x) − ln Q(y|x') − E[x, x']`` over the constrained triples (``E`` finite,
        ``Q(y|x) > 0``), in nats: ``≤ 0`` means the channel is E-LDP; ``+inf`` means an
        output possible under ``x`` is impossible under ``x'`` although ``E[x, x']`` is finite;
        ``-inf`` means nothing is constrained (every off-diagonal budget infinite).
    pair : (int, int) or None
        ``(x, x')`` of the worst triple (the lexicographically first among exact ties), None
        when nothing is constrained.
    output : int or None
        ``y`` of the worst triple.
    """

    amount: float
    pair: Optional[Tuple[int, int]]
    output: Optional[int]

    def satisfied(self, tolerance: float = 0.0) -> bool:
        """Whether the channel is E-LDP up to ``tolerance`` nats (``amount ≤ tolerance``).
        A tolerance absorbs the rounding of probabilities computed in double precision
        (about 1e-15 relative); it is never applied silently."""
        return self.amount <= tolerance


def _as_float64(x: Any, array: np.ndarray, name: str, what: str) -> np.ndarray:
    """``array`` as float64: integer arrays and non-array sequences are converted (after
    asking the memory guard), other ndarray dtypes are a ``TypeError``."""
    if array.dtype == np.float64:
        return array
    if not isinstance(x, np.ndarray) and array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers (float64), got {shown(x)}")
    if array.dtype.kind in "iu" or not isinstance(x, np.ndarray):
        memory.check(what, [(f"{name} as float64", 8 * array.size)])
        return array.astype(np.float64)
    raise TypeError(f"{name} must have dtype float64, got {array.dtype}")


def _first_bad(array: np.ndarray, bad: Callable[[np.ndarray], np.ndarray]) -> Tuple[int, int]:
    """The first (row-major) position of a 2-D array where ``bad`` holds, searched by blocks
    of rows so that the boolean masks stay small."""
    rows = max(1, (1 << 20) // max(array.shape[1], 1))
    for start in range(0, array.shape[0], rows):
        hits = np.argwhere(bad(array[start:start + rows]))
        if hits.size:
            return start + int(hits[0, 0]), int(hits[0, 1])
    raise AssertionError("no offending entry found")  # pragma: no cover - callers checked


def _contiguous(array: np.ndarray, name: str, what: str) -> np.ndarray:
    """``array`` itself when C-contiguous, else a C-contiguous copy (memory guard first)."""
    if not array.flags.c_contiguous:
        memory.check(what, [(f"a contiguous copy of {name}", 8 * array.size)])
    return np.ascontiguousarray(array)


def _channel(Q: Any, what: str, copy: bool = True) -> np.ndarray:
    """``Q`` checked to be a channel: C-contiguous (a copy, declared to the memory guard,
    when it is not), or with ``copy=False`` as it is (the caller declares and makes the
    copy)."""
    array = _as_float64(Q, as_array(Q, "Q"), "Q", what)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"Q must be a non-empty 2-D array (inputs × outputs), got shape "
                         f"{array.shape}")
    # min and max allocate nothing and propagate NaN: one pass each over Q.
    if not (array.min() >= 0 and array.max() < math.inf):
        x, y = _first_bad(array, lambda a: ~np.isfinite(a) | (a < 0))
        raise ValueError(f"Q must hold probabilities (finite, ≥ 0): Q[{x}, {y}] = {array[x, y]}")
    return _contiguous(array, "Q", what) if copy else array


def check_budgets(E: Any, k: Optional[int] = None) -> np.ndarray:
    """``E`` as a C-contiguous float64 (k × k) array after checking that it is a budget
    matrix: square (of size ``k`` when given), entries ≥ 0 or +inf (no NaN), zero diagonal.
    Raises ``TypeError``/``ValueError`` naming the first offending entry."""
    return _contiguous(_budgets(E, k, "check_budgets"), "budgets", "check_budgets")


def _budgets(E: Any, k: Optional[int], what: str) -> np.ndarray:
    """The checks of :func:`check_budgets`, on ``E`` as it is (no copy of an ndarray)."""
    array = _as_float64(E, as_array(E, "budgets"), "budgets", what)
    if array.ndim != 2 or array.shape[0] != array.shape[1] or array.shape[0] < 1:
        raise ValueError(f"budgets must be a square k × k matrix, got shape {array.shape}")
    if k is not None and array.shape[0] != k:
        raise ValueError(f"budgets must be {k} × {k} (one row per input), got shape "
                         f"{array.shape}")
    if not array.min() >= 0:  # NaN propagates through min
        x, y = _first_bad(array, lambda a: np.isnan(a) | (a < 0))
        raise ValueError(f"budgets must be ≥ 0 or +inf: budgets[{x}, {y}] = {array[x, y]}")
    diagonal = np.diagonal(array)
    if (diagonal != 0).any():
        x = int(np.argmax(diagonal != 0))
        raise ValueError(f"budgets must have a zero diagonal: budgets[{x}, {x}] = "
                         f"{diagonal[x]}")
    return array


def verify(Q: Any, E: Any) -> Violation:
    """The exact worst violation of E-LDP by the channel ``Q``.

    Parameters
    ----------
    Q : array_like, shape (k, ``|Y|``)
        The channel, ``Q[x, y] = Q(y | x)`` (probabilities; rows need not be normalized).
    E : array_like, shape (k, k)
        A budget matrix (:func:`check_budgets`).

    Returns
    -------
    Violation
        ``amount ≤ 0`` iff ``Q`` is E-LDP (see :class:`Violation`): the float64 value of
        ``(ln Q(y|x) − ln Q(y|x')) − E[x, x']`` at the worst triple, the lexicographically
        first among exact ties.

    Cost O(k² · ``|Y|``) in the Rust core (all cores, no GIL), O(k · ``|Y|``) memory; see the
    module documentation. Both arguments are checked before anything proportional to them
    is allocated, and the whole allocation (contiguous copies of views, the log channel) is
    declared to the memory guard first.
    """
    what = "privacy.verify"
    Q = _channel(Q, what, copy=False)
    E = _budgets(E, Q.shape[0], what)
    k, outputs = Q.shape
    parts = [("the log channel ln Q", 8 * k * (-(-outputs // 8) * 8))]  # rows padded to 8
    if not Q.flags.c_contiguous:
        parts.append(("a contiguous copy of Q", 8 * Q.size))
    if not E.flags.c_contiguous:
        parts.append(("a contiguous copy of the budgets", 8 * E.size))
    memory.check(what, parts)
    Q, E = np.ascontiguousarray(Q), np.ascontiguousarray(E)
    amount, worst = _core.privacy_verify(Q, E)
    if worst is None:
        return Violation(-math.inf, None, None)
    x, x2, y = worst
    return Violation(float(amount), (int(x), int(x2)), int(y))


def realized_budgets(Q: Any) -> np.ndarray:
    """The smallest budget matrix ``Q`` satisfies: ``E[x, x'] = max_y ln Q(y|x) − ln Q(y|x')``
    over the outputs with ``Q(y|x) > 0``, floored at 0 (``+inf`` when one of them has
    ``Q(y|x') = 0``; ``0`` on the diagonal). Shape (k, k), float64; same cost and exactness
    as :func:`verify`."""
    what = "privacy.realized_budgets"
    Q = _channel(Q, what, copy=False)
    k, outputs = Q.shape
    parts = [("the log channel ln Q", 8 * k * (-(-outputs // 8) * 8)),
             ("the k × k budget matrix", 8 * k * k)]
    if not Q.flags.c_contiguous:
        parts.append(("a contiguous copy of Q", 8 * Q.size))
    memory.check(what, parts)
    return _core.privacy_realized_budgets(np.ascontiguousarray(Q))


def _epsilon(epsilon: Any) -> float:
    """A budget: a real number ≥ 0, or +inf (no constraint)."""
    if isinstance(epsilon, (bool, np.bool_)) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"epsilon must be a real number, got {type(epsilon).__name__} "
                        f"{shown(epsilon)}")
    value = float(epsilon)
    if math.isnan(value) or value < 0:
        raise ValueError(f"epsilon must be ≥ 0 (or +inf), got {epsilon!r}")
    return value


def _budget_matrix(k: int, what: str, extra: Tuple[Tuple[str, int], ...] = ()) -> np.ndarray:
    memory.check(what, [("the k × k budget matrix", 8 * k * k), *extra])
    return np.empty((k, k))


def uniform_budgets(k: int, epsilon: float) -> np.ndarray:
    """Plain ε-LDP: ``ε`` for every pair of distinct inputs, 0 on the diagonal. (k, k)."""
    k = integer(k, "k", minimum=1)
    epsilon = _epsilon(epsilon)
    E = _budget_matrix(k, "uniform_budgets")
    E.fill(epsilon)
    np.fill_diagonal(E, 0.0)
    return E


def _sensitive_set(k: int, sensitive: Any) -> np.ndarray:
    array = as_array(sensitive, "sensitive")
    if array.size == 0:
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu" or isinstance(sensitive, (str, bytes)):
        raise TypeError(f"sensitive must be integer values in [0, {k}), got "
                        f"{shown(sensitive)}")
    if array.ndim != 1:
        raise ValueError(f"sensitive must be one-dimensional, got shape {array.shape}")
    out = (array < 0) | (array >= k)
    if out.any():
        i = int(np.argmax(out))
        raise ValueError(f"sensitive values must lie in [0, {k}): sensitive[{i}] = {array[i]}")
    values, first, counts = np.unique(array, return_index=True, return_counts=True)
    if (counts > 1).any():
        value = values[np.argmax(counts > 1)]
        positions = np.flatnonzero(array == value)[:2].tolist()
        raise ValueError(f"sensitive values must be distinct: {value} is repeated "
                         f"(positions {positions[0]} and {positions[1]})")
    return array.astype(np.int64)


def high_low_budgets(k: int, sensitive: Any, epsilon: float) -> np.ndarray:
    """(A, ε)-High-Low LDP (Section 5): only the sensitive inputs ``A`` are protected.
    ``E[x, x'] = ε`` for ``x ∈ A`` and every ``x' ≠ x``; ``+inf`` on the rows of the other
    inputs; 0 on the diagonal. ``sensitive``: distinct values in [0, k)."""
    k = integer(k, "k", minimum=1)
    A = _sensitive_set(k, sensitive)
    epsilon = _epsilon(epsilon)
    E = _budget_matrix(k, "high_low_budgets")
    E.fill(math.inf)
    E[A, :] = epsilon
    np.fill_diagonal(E, 0.0)
    return E


def block_labels(blocks: Any, k: Optional[int] = None) -> np.ndarray:
    """A partition of the inputs as one block label per input (int64, labels 0..m−1).

    ``blocks`` is either a list of block sizes (each ≥ 1; block j holds the next ``k_j``
    inputs, in order) or a label array (``blocks[x]`` = the block of input x, labels
    0..m−1, each used). The two cannot be confused: sizes are all ≥ 1, while labels always
    contain 0. With ``k`` given, the partition must cover exactly [0, k).
    """
    sizes, labels = _partition(blocks, k)
    if labels is not None:
        return labels
    memory.check("block_labels", [("one label per input", 8 * int(sizes.sum()))])
    return np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)


def _partition(blocks: Any, k: Optional[int] = None) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """The checks of :func:`block_labels`, without materializing labels that were not given:
    ``(sizes, labels)``, the block sizes (int64, shape (m,)) and, when ``blocks`` is a label
    array, the labels (int64, shape (k,); else None)."""
    array = as_array(blocks, "blocks")
    if array.size and (array.dtype.kind not in "iu" or isinstance(blocks, (str, bytes))):
        raise TypeError(f"blocks must be integers (block sizes or labels), got "
                        f"{shown(blocks)}")
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"blocks must be a non-empty 1-D list of block sizes or labels, "
                         f"got shape {array.shape}")
    if (array == 0).any():
        labels = _labels(array, k)
        return np.bincount(labels), labels
    return _sizes(array, k), None


def _sizes(array: np.ndarray, k: Optional[int]) -> np.ndarray:
    if (array < 1).any():
        j = int(np.argmax(array < 1))
        raise ValueError(f"block sizes must be ≥ 1 (no empty blocks): blocks[{j}] = "
                         f"{array[j]}")
    total = int(array.astype(object).sum())
    if k is not None and total != k:
        raise ValueError(f"block sizes must add up to k = {k}, got {total}")
    if total > 2**32:
        raise ValueError(f"block sizes add up to {total}: more than 2^32 inputs")
    return array.astype(np.int64)


def _labels(array: np.ndarray, k: Optional[int]) -> np.ndarray:
    if k is not None and array.size != k:
        raise ValueError(f"block labels must have one entry per input (k = {k}), got "
                         f"{array.size}")
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise ValueError(f"block labels must be ≥ 0: blocks[{i}] = {array[i]}")
    memory.check("block_labels", [("sorted and int64 copies of the labels", 24 * array.size)])
    used = np.unique(array)
    if used[-1] != used.size - 1:
        # the smallest unused label: the first place where the sorted labels skip one
        missing = int(np.argmax(used != np.arange(used.size)))
        raise ValueError(f"block labels must be 0..m−1 with no empty block: label {missing} "
                         f"is unused (largest label {used[-1]})")
    return array.astype(np.int64)


def block_budgets(blocks: Any, epsilon: float) -> np.ndarray:
    """(P, ε)-block-structured LDP (Section 6): ``ε`` between distinct inputs of one block,
    ``+inf`` across blocks, 0 on the diagonal. ``blocks``: block sizes or one label per
    input (:func:`block_labels`)."""
    labels = block_labels(blocks)
    epsilon = _epsilon(epsilon)
    k = labels.size
    E = _budget_matrix(k, "block_budgets", (("the cross-block mask", k * k),))
    E.fill(epsilon)
    np.copyto(E, math.inf, where=labels[:, None] != labels[None, :])
    np.fill_diagonal(E, 0.0)
    return E
