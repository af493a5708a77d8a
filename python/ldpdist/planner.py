"""Which mechanism and decoder, and how many users: :func:`plan`.

Given the domain size k, the privacy budget ε and either the number of users n or a target
error, :func:`plan` ranks every (mechanism, decoder) pair the library offers for plain
frequency estimation by its *predicted* error at n (or by the n it needs to reach the
target), with each row's report size and a server cost estimate.

How the errors are predicted
----------------------------
Every mechanism's raw estimate is unbiased, and its exact per-value variance follows from
the mechanism's realized channel (``mechanism.estimator_variance(p, n)``). From there:

``exact``
    The raw decoder's ℓ2 error (root mean square, ``sqrt(Σ_x Var p̂_x)``), and, for the
    mechanisms that are *pure frequency oracles* (Wang, Blocki, Li & Jha, USENIX Security
    2017: a report supports value x with probability p* when the user holds x and q*
    otherwise, so the number of reports supporting x is Binomial(n, s_x),
    ``s_x = q* + (p* − q*) p_x``), its ℓ1 and top-t errors too, from the binomial's exact
    mean absolute deviation (de Moivre's formula).
``normal``
    The raw decoder's ℓ1 and top-t errors of the other mechanisms:
    ``Σ_x sqrt(2 Var p̂_x / π)``, the mean absolute value of a normal variable of that
    variance (one-bit HR's estimate averages the bits of K groups, so it is close to normal).
``simulation``
    Every other row of randomized response, Hadamard Response, RAPPOR and optimized unary
    encoding (and of subset selection up to k = 256 and n = 10^5): the decoder itself is
    applied to seeded *exact simulations* of n users drawn from p
    (``mechanism.simulate`` on multinomial counts, exact in law; for these mechanisms a
    simulation costs about as much as a surrogate draw whatever n), and the metric is
    averaged over the draws. The iterative Bayesian update is predicted this way on request.
``surrogate``
    Every other row of the other mechanisms (post-processing decoders: projections, sparse
    projection, the consistency family; and every ℓ∞ error): the decoder is applied to
    seeded draws of a *surrogate* raw estimate whose coordinates are independent with the
    exact marginal law (pure frequency oracles: the scaled binomial above; other mechanisms:
    normal with the exact variance). Where the raw estimate sums to exactly 1 (subset
    selection: every report supports the same number of values), each draw is conditioned
    on that sum as a normal vector would be (``p̃ ← p̃ − v (Σp̃ − 1)/Σv``, v the variances).
    The surrogate ignores the (weak) correlation between the coordinates of one estimate;
    the docs page *Planning* measures what that costs against full simulations on a
    validation grid, and ``tests/test_planner.py`` holds the tolerances.

Draws continue until the best decoder's mean has a relative standard error of
:data:`DRAW_PRECISION`, within a budget; the first row is then refined with a larger one
(some decoders' error varies widely between runs), and every row states its precision.

When the true distribution is unknown (``distribution=None``), the planner uses the uniform
distribution over the k values, or over ``sparsity`` values when it is given: for the
symmetric mechanisms here, the uniform distribution maximizes the raw estimate's ℓ2 error,
so the ``exact`` rows are worst-case. Pass a pilot estimate or a shape (``"zipf:1.1"``) to
plan for a skewed distribution, where the post-processing decoders gain the most.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import decoders as _decoders
from . import kernels, memory
from ._validation import integer, real
from . import mechanisms as _mechanisms
from .mechanisms import SHORT_NAMES
from .mechanisms.base import check_epsilon

#: The metrics :func:`plan` predicts ("top-T": the ℓ1 error on the T most frequent values).
METRICS = ("l1", "l2", "linf", "top-T")

#: Mechanisms the planner considers (frequency estimation with ε-LDP for every value).
PLANNED_MECHANISMS = ("RandomizedResponse", "HadamardResponse", "RAPPOR",
                      "OptimizedUnaryEncoding", "OptimizedLocalHashing", "SubsetSelection",
                      "OneBitHadamardResponse")

#: Planned when named in ``mechanisms`` (each of its rows costs seconds of simulation):
#: compressive privatization, one row per report size in :data:`COMPRESSIVE_REPORT_SIZES`
#: below k, with the public matrix seed :data:`COMPRESSIVE_SEED`, decoded by orthogonal
#: matching pursuit (``"raw"``) and its projections, up to :data:`COMPRESSIVE_MAX_K` values.
OPT_IN_MECHANISMS = ("CompressivePrivatization",)
COMPRESSIVE_REPORT_SIZES = (2**8, 2**10, 2**12)
COMPRESSIVE_SEED = 0
COMPRESSIVE_DECODERS = ("raw", "project", "sparse_project")
COMPRESSIVE_MAX_K = 2**16
#: Exact simulations per compressive row (its recovery runs OMP on every draw), and at
#: most this many for the first row when it is refined to :data:`DRAW_PRECISION` (OMP's
#: error has a heavy tail: a rare run whose support is wrong costs many ordinary ones, so a
#: mean over few runs is too low).
COMPRESSIVE_DRAWS = 16
REFINED_COMPRESSIVE_DRAWS = 1024

#: Mechanisms whose raw estimate sums to exactly 1 (``tests/test_planner.py`` checks it).
SUMS_TO_ONE = ("RandomizedResponse", "SubsetSelection")

#: Decoders the planner does not model (see the docs page *Planning*): those that are not a
#: post-processing of the raw estimate, and ``empirical_bayes``, whose surrogate prediction
#: was off by more than 30% on sparse distributions in the validation (its fitted prior
#: feels the correlations the surrogate leaves out) and whose fit costs about 0.2 s per draw.
UNMODELED_DECODERS = _decoders.TWO_STAGE_DECODERS + ("empirical_bayes",)

#: Mechanisms whose exact-in-law simulation (``mechanism.simulate``) costs about as much as
#: a surrogate draw (O(k) or O(K), whatever n): their draws are exact simulations of n users
#: drawn from p (module doc), which the iterative Bayesian update also needs.
EXACTLY_SIMULATED = ("RandomizedResponse", "HadamardResponse", "RAPPOR",
                     "OptimizedUnaryEncoding")

#: Subset selection's simulation costs O(n) with a large constant; its draws are exact
#: simulations up to these sizes.
SUBSET_SELECTION_SIMULATED = dict(k=2**8, n=10**5)

#: The iterative Bayesian update is predicted on request (``decoders=[..., "ibu"]``): each
#: of its draws runs the EM to convergence (hundreds to thousands of O(k) steps, seconds at
#: small n), so it is predicted from at most :data:`IBU_DRAWS` exact simulations, for the
#: mechanisms of :data:`EXACTLY_SIMULATED` up to :data:`IBU_MAX_K` values.
IBU_DRAWS = 16
IBU_MAX_K = 2**12
OPT_IN_DECODERS = ("ibu",)

#: The prediction methods that average over seeded draws (module doc).
DRAWN_METHODS = ("simulation", "surrogate")


def simulated_exactly(mechanism: Any, n: int) -> bool:
    """Whether the planner's draws for ``mechanism`` at n users are exact simulations."""
    name = type(mechanism).__name__
    if name == "CompressivePrivatization":
        return True
    if name == "SubsetSelection":
        return (mechanism.k <= SUBSET_SELECTION_SIMULATED["k"]
                and n <= SUBSET_SELECTION_SIMULATED["n"])
    return name in EXACTLY_SIMULATED

_LARGEST_N = 10**15


@dataclass(frozen=True)
class PlanRow:
    """One ranked (mechanism, decoder) pair of a :class:`Plan`.

    Attributes
    ----------
    rank : int
        1 for the best row.
    mechanism : str
        Class name (``ldpdist.<mechanism>(k, epsilon, **construct)`` builds it).
    decoder : str
        Decoder name for ``estimate(..., decoder=...)``.
    parameters : dict
        The mechanism's derived parameters (e.g. ``K`` for Hadamard Response, ``g`` for OLH,
        ``d`` for subset selection) and the decoder's ``sparsity`` when it uses one.
    report_bits : int
        Bits each user sends.
    error : float or None
        Predicted error at ``n`` (None when :func:`plan` had no n).
    n_needed : int or None
        Users needed to reach the target (None without a target; ``-1`` when the target is
        out of reach below 10^15 users).
    method : str
        How ``error`` was predicted: ``exact``, ``normal``, ``simulation`` or ``surrogate``
        (module doc).
    server_ops : float
        Order-of-magnitude count of the server's elementary operations to aggregate n
        reports (or n_needed) and decode.
    realized_epsilon : float
        The mechanism's realized ε (never above the request).
    error_precision : float
        Relative standard error of ``error`` from the finite number of draws (0 for the
        ``exact`` and ``normal`` methods). The first row's is refined to at most
        :data:`DRAW_PRECISION` where the draw budget allows.
    """

    rank: int
    mechanism: str
    decoder: str
    parameters: Dict[str, Any]
    report_bits: int
    error: Optional[float]
    n_needed: Optional[int]
    method: str
    server_ops: float
    realized_epsilon: float
    error_precision: float = 0.0


@dataclass
class Plan:
    """The ranked rows of :func:`plan` and the settings they were predicted for.

    ``plan.rows[0]`` (also ``plan.best``) is the recommendation. ``str(plan)`` is a text
    table; :meth:`to_records` gives plain dicts (for json or a DataFrame).
    """

    k: int
    epsilon: float
    n: Optional[int]
    target: Optional[float]
    metric: str
    distribution: str
    rows: List[PlanRow] = field(default_factory=list)

    @property
    def best(self) -> PlanRow:
        """The recommended row (rank 1)."""
        return self.rows[0]

    def to_records(self) -> List[Dict[str, Any]]:
        """One dict per row, in rank order."""
        return [asdict(row) for row in self.rows]

    def to_json(self) -> str:
        """The settings and the rows as JSON."""
        head = {key: getattr(self, key)
                for key in ("k", "epsilon", "n", "target", "metric", "distribution")}
        return json.dumps({**head, "rows": self.to_records()}, indent=2)

    def __str__(self) -> str:
        return format_plan(self)


def format_plan(plan: Plan, limit: Optional[int] = None) -> str:
    """A text table of the (first ``limit``) rows of ``plan``."""
    head = [f"k = {plan.k}, ε = {plan.epsilon:g}, metric = {plan.metric}, "
            f"distribution = {plan.distribution}"
            + (f", n = {plan.n:,}" if plan.n is not None else "")
            + (f", target = {plan.target:g}" if plan.target is not None else "")]
    columns = ["rank", "mechanism", "decoder", "parameters", "bits"]
    if plan.n is not None:
        columns.append("error")
    if plan.target is not None:
        columns.append("users needed")
    columns += ["method", "server ops"]
    table = [columns]
    for row in plan.rows[:limit]:
        cells = [str(row.rank), row.mechanism, row.decoder,
                 " ".join(f"{key}={value}" for key, value in row.parameters.items()) or "-",
                 str(row.report_bits)]
        if plan.n is not None:
            cells.append(f"{row.error:.4g}")
        if plan.target is not None:
            cells.append("unreachable" if row.n_needed == -1 else f"{row.n_needed:,}")
        cells += [row.method, f"{row.server_ops:.1e}"]
        table.append(cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
             for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(head + lines)


# -- metrics -----------------------------------------------------------------------------------

def parse_metric(metric: str, k: int) -> Tuple[str, int]:
    """``"l1"``, ``"l2"``, ``"linf"`` or ``"top-T"`` → (kind, T) (T = 0 unless top-T)."""
    text = str(metric).strip().lower()
    if text in ("l1", "l2", "linf"):
        return text, 0
    if text.startswith("top-") or text.startswith("top"):
        digits = text[4:] if text.startswith("top-") else text[3:]
        try:
            t = int(digits)
        except ValueError:
            t = 0
        if 1 <= t <= k:
            return "top", t
        raise ValueError(f"metric {metric!r}: top-T needs an integer 1 <= T <= k = {k}")
    raise ValueError(f"unknown metric {metric!r} (expected 'l1', 'l2', 'linf' or 'top-T', "
                     "e.g. 'top-10')")


def top_values(p: np.ndarray, t: int) -> np.ndarray:
    """Indices of the t largest entries of p (ties: the smaller index first)."""
    order = np.argsort(-p, kind="stable")
    return order[:t]


def errors_of(estimates: np.ndarray, p: np.ndarray, kind: str,
              top: Optional[np.ndarray] = None) -> np.ndarray:
    """Per-row error of ``estimates`` (shape (R, k)) against p for a metric kind."""
    diff = np.abs(np.atleast_2d(estimates) - p)
    if kind == "l1":
        return diff.sum(axis=1)
    if kind == "l2":
        return np.sqrt((diff * diff).sum(axis=1))
    if kind == "linf":
        return diff.max(axis=1)
    return diff[:, top].sum(axis=1)


def mean_error(per_draw: np.ndarray, kind: str) -> float:
    """How draws are averaged: root mean square for ℓ2, the mean otherwise."""
    per_draw = np.asarray(per_draw, dtype=np.float64)
    if kind == "l2":
        return float(np.sqrt(np.mean(per_draw * per_draw)))
    return float(np.mean(per_draw))


# -- the mechanisms ---------------------------------------------------------------------------

def _mechanism_class(name: str) -> type:
    full = SHORT_NAMES.get(name.lower(), name)
    if full not in PLANNED_MECHANISMS + OPT_IN_MECHANISMS:
        raise ValueError(f"mechanism {name!r} is not planned (choose from "
                         f"{', '.join(PLANNED_MECHANISMS + OPT_IN_MECHANISMS)} or their short "
                         f"names)")
    return getattr(_mechanisms, full)


def _is_compressive(mechanism: Any) -> bool:
    return type(mechanism).__name__ == "CompressivePrivatization"


def planned_instances(name: str, k: int, epsilon: float) -> List[Any]:
    """The mechanisms a name stands for in a plan at (k, ε): one, or one per report size for
    compressive privatization; none where the mechanism does not take this k."""
    cls = _mechanism_class(name)
    try:
        if cls.__name__ != "CompressivePrivatization":
            return [cls(k, epsilon)]
        if k > COMPRESSIVE_MAX_K:
            return []
        return [cls(k, epsilon, m, COMPRESSIVE_SEED) for m in COMPRESSIVE_REPORT_SIZES
                if m < k]
    except ValueError:
        return []  # outside this mechanism's range (e.g. OLH above 2^23 values)


def rebuild(row: Dict[str, Any], k: int, epsilon: float) -> Any:
    """The mechanism of a plan row."""
    cls = _mechanism_class(row["mechanism"])
    if cls.__name__ == "CompressivePrivatization":
        return cls(k, epsilon, row["parameters"]["m"], COMPRESSIVE_SEED)
    return cls(k, epsilon)


def report_bits(mechanism: Any) -> int:
    """Bits one user sends: k for the bit-vector mechanisms, 1 for one-bit HR (its group is
    assigned by the server), otherwise ``ceil(log2(output_size))``."""
    if mechanism.report_kind == "bits":
        return int(mechanism.output_size)
    if type(mechanism).__name__ == "OneBitHadamardResponse":
        return 1
    return max(1, int(math.ceil(math.log2(mechanism.output_size))))


def mechanism_parameters(mechanism: Any) -> Dict[str, Any]:
    """The derived parameters a row shows."""
    name = type(mechanism).__name__
    if name == "HadamardResponse":
        return {"K": int(mechanism.output_size)}
    if name == "OneBitHadamardResponse":
        return {"K": int(mechanism.num_groups)}
    if name == "OptimizedLocalHashing":
        return {"g": int(mechanism.g)}
    if name == "SubsetSelection":
        return {"d": int(mechanism.d)}
    if name == "CompressivePrivatization":
        return {"m": int(mechanism.m), "seed": int(mechanism.seed)}
    return {}


def server_ops(mechanism: Any, decoder: str, n: int) -> float:
    """Order of magnitude of the server's work: aggregating n reports (a counter increment per
    index report, a pass over k bits per bit-vector report) plus decoding (the raw estimate's
    transform, then O(k log k) for a sorting post-processing)."""
    k = mechanism.k
    size = float(mechanism.output_size)
    aggregate = n * (k / 64.0 if mechanism.report_kind == "bits" else 1.0)
    name = type(mechanism).__name__
    if name in ("HadamardResponse", "OneBitHadamardResponse"):
        raw = size * math.log2(max(size, 2.0))
    elif name == "OptimizedLocalHashing":
        g, t = int(mechanism.g), int(mechanism.t)
        raw = min(t * float(g) ** (t + 2), float(g) ** t * k)
    elif name == "CompressivePrivatization":
        raw = size * k * math.log2(max(size, 2.0))   # OMP: about log m atoms, m k each
    else:
        raw = float(k)
    post = 0.0 if decoder == "raw" else k * math.log2(max(k, 2))
    return float(aggregate + raw + post)


def frequency_oracle(mechanism: Any) -> Optional[Tuple[float, float]]:
    """(p*, q*) of a pure frequency oracle, or None (module doc)."""
    oracle = getattr(mechanism, "_frequency_oracle", None)
    return None if oracle is None else oracle()


# -- exact raw errors -------------------------------------------------------------------------

def log_gamma(x: np.ndarray) -> np.ndarray:
    """ln Γ(x) elementwise for x >= 1 (numpy has none): Stirling's series at x + 8 (four terms:
    within about 3e-12 absolute), shifted back by the recurrence."""
    x = np.asarray(x, dtype=np.float64)
    z = x + 8.0
    shift = np.zeros_like(x)
    for i in range(8):
        shift += np.log(x + i)
    inverse = 1.0 / z
    series = inverse * (1.0 / 12 - inverse * inverse * (1.0 / 360 - inverse * inverse
                                                        * (1.0 / 1260 - inverse * inverse
                                                           / 1680)))
    return (z - 0.5) * np.log(z) - z + 0.5 * math.log(2 * math.pi) + series - shift


def binomial_mean_absolute_deviation(n: int, s: np.ndarray) -> np.ndarray:
    """``E|X − n s|`` for X ~ Binomial(n, s), elementwise (de Moivre):
    ``2 (m + 1) C(n, m + 1) s^(m+1) (1 − s)^(n−m)`` with ``m = floor(n s)``. Where
    ``n s (1 − s) > 10^7`` the normal value ``sqrt(2 n s (1 − s) / π)`` is used instead: it
    is then exact to about 1e-7, while the log-gamma differences lose digits."""
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
    m = np.floor(n * s)
    spread = n * s * (1.0 - s)
    large = spread > 1e7
    inside = (s > 0) & (s < 1) & (m + 1 <= n) & ~large
    out = np.sqrt(2.0 * np.where(large, spread, 0.0) / math.pi)
    mi, si = m[inside], s[inside]
    log_choose = log_gamma(np.array([n + 1.0]))[0] - log_gamma(mi + 2) - log_gamma(n - mi)
    out[inside] = 2.0 * (mi + 1) * np.exp(log_choose + (mi + 1) * np.log(si)
                                          + (n - mi) * np.log1p(-si))
    return out


def raw_absolute_errors(mechanism: Any, p: np.ndarray, n: int) -> Tuple[np.ndarray, str]:
    """``E|p̂_x − p_x|`` per value for the raw decoder, and the method (``exact`` or
    ``normal``)."""
    oracle = frequency_oracle(mechanism)
    if oracle is not None:
        p_star, q_star = oracle
        s = q_star + (p_star - q_star) * p
        return binomial_mean_absolute_deviation(n, s) / (n * abs(p_star - q_star)), "exact"
    variance = mechanism.estimator_variance(p, n)
    return np.sqrt(2.0 * np.maximum(variance, 0.0) / math.pi), "normal"


# -- the surrogate ----------------------------------------------------------------------------

def surrogate_raw(mechanism: Any, p: np.ndarray, n: int, draws: int,
                  rng: np.random.Generator) -> np.ndarray:
    """``draws`` surrogate raw estimates, shape (draws, k): independent coordinates with the
    raw estimate's exact marginal law (module doc)."""
    k = p.size
    memory.check("the planner's surrogate draws", [("surrogate estimates", 16 * draws * k)])
    oracle = frequency_oracle(mechanism)
    if oracle is not None:
        p_star, q_star = oracle
        s = np.clip(q_star + (p_star - q_star) * p, 0.0, 1.0)
        counts = rng.binomial(n, s, size=(draws, k))
        raw = (counts / n - q_star) / (p_star - q_star)
    else:
        sigma = np.sqrt(np.maximum(mechanism.estimator_variance(p, n), 0.0))
        raw = p + sigma * rng.standard_normal((draws, k))
    if type(mechanism).__name__ in SUMS_TO_ONE:
        variance = mechanism.estimator_variance(p, n)
        total = float(variance.sum())
        if total > 0:
            raw -= np.outer(raw.sum(axis=1) - 1.0, variance / total)
    return raw


def surrogate_draws(mechanism: Any, p: np.ndarray, n: int, draws: int,
                    rng: np.random.Generator) -> Iterator[Tuple[np.ndarray, Any]]:
    """``draws`` pairs (raw estimate, aggregate): exact simulations of n users drawn from p
    where :func:`simulated_exactly` (the aggregate is the simulation's),
    :func:`surrogate_raw` draws otherwise (aggregate None)."""
    if not simulated_exactly(mechanism, n):
        for raw in surrogate_raw(mechanism, p, n, draws, rng):
            yield raw, None
        return
    for _ in range(draws):
        aggregate = mechanism.simulate(rng.multinomial(n, p),
                                       seed=int(rng.integers(2**63)))
        # compressive privatization's raw estimate is its OMP recovery: decoded per decoder
        raw = (None if _is_compressive(mechanism)
               else mechanism._core.estimate_raw(aggregate.counts, aggregate.n))
        yield raw, aggregate


def post_process(mechanism: Any, raw: np.ndarray, n: int, decoder: str,
                 sparsity: Optional[int] = None) -> np.ndarray:
    """Apply a post-processing decoder to one raw estimate, as ``estimate`` would."""
    return _decoders.post_process(mechanism, raw, n, decoder, sparsity=sparsity)


def default_draws(k: int) -> int:
    """Surrogate draws: enough that the average covers about 2^15 coordinates (4 to 32)."""
    return int(min(32, max(4, 2**15 // max(k, 1))))


#: Decoders defined as another decoder's output post-processed: the planner computes the
#: first once per draw (``power_ns`` is Norm-Sub of ``power``, :func:`ldpdist.consistency.power_ns`).
_COMPOSED = {"power_ns": ("power", kernels.project_simplex)}


#: Relative standard error the surrogate's mean aims at for the best decoder, and the most
#: draws it takes for it (the error of a sparse distribution sits on a few values and varies
#: more from draw to draw; a noisy prediction would favour rows by luck).
DRAW_PRECISION = 0.03
MAX_DRAWS = 128
MAX_DRAWN_VALUES = 2**19

#: The recommended row's prediction is refined to :data:`DRAW_PRECISION` with a larger
#: budget: some decoders' error varies widely from draw to draw (Power on a flat
#: distribution: a standard deviation above the mean), and the first row is the one a user
#: acts on.
REFINED_MAX_DRAWS = 1024
REFINED_MAX_DRAWN_VALUES = 2**20


def relative_standard_error(values: Sequence[float], kind: str = "l1") -> float:
    """Standard error of :func:`mean_error` of the per-draw errors ``values``, relative to
    it (0 for one value or a zero mean); for ℓ2, half that of the mean square (delta
    method)."""
    values = np.asarray(values, dtype=np.float64)
    if kind == "l2":
        return 0.5 * relative_standard_error(values * values)
    mean = float(values.mean()) if values.size else 0.0
    if values.size < 2 or mean <= 0:
        return 0.0
    return float(np.std(values, ddof=1)) / mean / math.sqrt(values.size)


def _draws_for_precision(per_draw: Dict[str, List[float]], k: int, max_draws: int,
                         max_values: int) -> int:
    """Draws that bring the best decoder's mean to :data:`DRAW_PRECISION` relative standard
    error, at most ``max_draws`` (fewer for large k: at most about ``max_values``
    coordinates in all)."""
    best = min(per_draw.values(), key=lambda values: float(np.mean(values)))
    mean = float(np.mean(best))
    if mean <= 0 or len(best) < 2:
        return len(best)
    variation = float(np.std(best, ddof=1)) / mean
    wanted = int(math.ceil((variation / DRAW_PRECISION) ** 2))
    return int(min(wanted, max_draws, max(len(best), max_values // max(k, 1))))


def predict_errors(mechanism: Any, decoders: Sequence[str], p: Any, n: int,
                   metric: str = "l1", *, sparsity: Optional[int] = None,
                   draws: Optional[int] = None, seed: int = 0,
                   refined: bool = False) -> Dict[str, Tuple[float, str, float]]:
    """Predicted error of ``mechanism`` with each of ``decoders`` from n users drawn from p.

    Returns ``{decoder: (error, method, relative standard error)}`` (method: ``exact``,
    ``normal``, ``simulation`` or ``surrogate``, module doc; the standard error is 0 for
    the first two).
    ``metric`` as in :func:`plan`. The surrogate decoders share ``draws`` draws from
    ``numpy.random.default_rng(seed)``, so their differences are not blurred by different
    noise. By default, :func:`default_draws` first, then more until the best decoder's mean
    has :data:`DRAW_PRECISION` relative standard error (at most :data:`MAX_DRAWS` draws and
    :data:`MAX_DRAWN_VALUES` values; with ``refined``, :data:`REFINED_MAX_DRAWS` and
    :data:`REFINED_MAX_DRAWN_VALUES`).
    """
    p = _distribution_array(p, mechanism.k)
    n = integer(n, "n", minimum=1)
    kind, t = parse_metric(metric, mechanism.k)
    top = top_values(p, t) if kind == "top" else None
    results: Dict[str, Tuple[float, str, float]] = {}
    surrogate = []
    for decoder in decoders:
        if not modeled(mechanism, decoder):
            raise ValueError(f"the planner does not model decoder {decoder!r} for "
                             f"{type(mechanism).__name__} at k = {mechanism.k}")
        if _is_compressive(mechanism):
            surrogate.append(decoder)   # no variance formula: every decoder from draws
        elif decoder == "raw" and kind == "l2":
            results[decoder] = (float(math.sqrt(float(np.sum(
                mechanism.estimator_variance(p, n))))), "exact", 0.0)
        elif decoder == "raw" and kind != "linf":
            absolute, method = raw_absolute_errors(mechanism, p, n)
            results[decoder] = (float(absolute.sum() if kind == "l1" else absolute[top].sum()),
                                method, 0.0)
        else:
            surrogate.append(decoder)
    if not surrogate:
        return results
    adaptive = draws is None and (refined or not _is_compressive(mechanism))
    draws = ((COMPRESSIVE_DRAWS if _is_compressive(mechanism) else default_draws(mechanism.k))
             if draws is None else integer(draws, "draws", minimum=1))
    rng = np.random.default_rng(seed)
    per_draw: Dict[str, List[float]] = {decoder: [] for decoder in surrogate}
    # a few draws at a time: bounded memory whatever k
    chunk = max(1, min(draws, 2**22 // max(mechanism.k, 1)))
    done = 0
    while True:
        if done >= draws:
            if not adaptive:
                break
            adaptive = False
            budget = ((REFINED_COMPRESSIVE_DRAWS, REFINED_COMPRESSIVE_DRAWS * mechanism.k)
                      if refined and _is_compressive(mechanism)
                      else (REFINED_MAX_DRAWS, REFINED_MAX_DRAWN_VALUES) if refined
                      else (MAX_DRAWS, MAX_DRAWN_VALUES))
            tracked = {name: values for name, values in per_draw.items()
                       if name not in OPT_IN_DECODERS} or per_draw
            draws = max(draws, _draws_for_precision(tracked, mechanism.k, *budget))
            if done >= draws:
                break
        batch = list(surrogate_draws(mechanism, p, n, min(chunk, draws - done), rng))
        for raw, aggregate in batch:
            outputs: Dict[str, np.ndarray] = {}
            for decoder in surrogate:
                base, then = _COMPOSED.get(decoder, (None, None))
                if base is not None and base in surrogate:
                    continue  # from its base's output, below
                if _is_compressive(mechanism):
                    outputs[decoder] = mechanism._decode(aggregate.counts, n, decoder,
                                                         sparsity=sparsity)
                    continue
                if decoder == "ibu":
                    if len(per_draw[decoder]) >= IBU_DRAWS:
                        continue
                    outputs[decoder] = _decoders.iterative_bayesian_update(
                        mechanism, aggregate.counts, n).estimate
                    continue
                used = sparsity if decoder in _decoders.SPARSE_DECODERS else None
                outputs[decoder] = post_process(mechanism, raw, n, decoder, used)
            for decoder in surrogate:
                base, then = _COMPOSED.get(decoder, (None, None))
                if decoder == "ibu" and decoder not in outputs:
                    continue
                if decoder not in outputs:
                    outputs[decoder] = then(outputs[base])
                per_draw[decoder].append(float(errors_of(outputs[decoder], p, kind, top)[0]))
        done += len(batch)
    method = "simulation" if simulated_exactly(mechanism, n) else "surrogate"
    for decoder in surrogate:
        values = np.array(per_draw[decoder])
        results[decoder] = (mean_error(values, kind), method,
                            relative_standard_error(values, kind))
    return results


def predict_error(mechanism: Any, decoder: str, p: Any, n: int, metric: str = "l1", *,
                  sparsity: Optional[int] = None, draws: Optional[int] = None,
                  seed: int = 0) -> Tuple[float, str]:
    """:func:`predict_errors` for one decoder: ``(error, method)``."""
    return predict_errors(mechanism, [decoder], p, n, metric, sparsity=sparsity,
                          draws=draws, seed=seed)[decoder][:2]


def users_needed(mechanism: Any, decoder: str, p: np.ndarray, target: float, metric: str,
                 *, sparsity: Optional[int] = None, seed: int = 0,
                 start: Optional[int] = None) -> int:
    """Smallest n (to about 2%) whose predicted error is at most ``target``; -1 when more than
    10^15 users would be needed. The raw decoder's ℓ2 error is exactly ``sqrt(v/n)`` (v the
    variance sum at n = 1); otherwise a secant search on log error against log n."""
    kind, _ = parse_metric(metric, mechanism.k)
    if decoder == "raw" and kind == "l2":
        total = float(np.sum(mechanism.estimator_variance(p, 1)))
        needed = math.ceil(total / (target * target))
        return needed if needed <= _LARGEST_N else -1

    def log_error(log_n: float) -> float:
        value, _ = predict_error(mechanism, decoder, p, int(round(math.exp(log_n))), metric,
                                 sparsity=sparsity, seed=seed)
        return math.log(max(value, 1e-300))

    log_target = math.log(target)
    lo_n = math.log(start or 10**6)
    hi_n = lo_n + math.log(4.0)
    f_lo, f_hi = log_error(lo_n), log_error(hi_n)
    # bracket: the error falls with n (about like n^(-1/2) once n is large)
    for _ in range(40):
        if f_lo >= log_target >= f_hi:
            break
        if f_hi > log_target:
            lo_n, f_lo = hi_n, f_hi
            hi_n = min(hi_n + 2.0 * max(f_hi - log_target, 0.35), math.log(_LARGEST_N) + 1)
            f_hi = log_error(hi_n)
            if hi_n > math.log(_LARGEST_N) and f_hi > log_target:
                return -1
        else:
            hi_n, f_hi = lo_n, f_lo
            lo_n = max(0.0, lo_n - 2.0 * max(log_target - f_lo, 0.35))
            f_lo = log_error(lo_n)
            if lo_n == 0.0 and f_lo <= log_target:
                return 1
    for _ in range(30):  # regula falsi in log-log, with bisection as the safeguard
        if hi_n - lo_n < 0.02:
            break
        if f_lo != f_hi:
            middle = lo_n + (f_lo - log_target) * (hi_n - lo_n) / (f_lo - f_hi)
            middle = min(max(middle, lo_n + 0.1 * (hi_n - lo_n)), hi_n - 0.1 * (hi_n - lo_n))
        else:
            middle = 0.5 * (lo_n + hi_n)
        f_middle = log_error(middle)
        if f_middle > log_target:
            lo_n, f_lo = middle, f_middle
        else:
            hi_n, f_hi = middle, f_middle
    needed = int(math.ceil(math.exp(hi_n)))
    return needed if needed <= _LARGEST_N else -1


# -- plan -------------------------------------------------------------------------------------

def _distribution_array(distribution: Any, k: int) -> np.ndarray:
    p = np.asarray(distribution, dtype=np.float64)
    if p.shape != (k,):
        raise ValueError(f"the distribution must have shape ({k},), got {p.shape}")
    if not np.all(np.isfinite(p)) or (p < 0).any() or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError("the distribution must be finite, non-negative and sum to 1")
    return p


def reference_distribution(k: int, distribution: Any = None,
                           sparsity: Optional[int] = None) -> Tuple[np.ndarray, str]:
    """The distribution the planner predicts for, and its label: the given array, a shape
    spec (``"zipf:1.1"``, ``"geo:0.9"``, ``"unif:20"``; placed with a fixed seed), or the
    uniform distribution over k values (over ``sparsity`` values when given)."""
    if distribution is None:
        if sparsity is None:
            return np.full(k, 1.0 / k), "uniform"
        distribution = f"unif:{sparsity}"
    if isinstance(distribution, str):
        from .experiments.distributions import (distribution_label, make_distribution,
                                                parse_distribution)
        kind, _ = parse_distribution(distribution)
        if kind == "file":
            from .experiments.distributions import load_distribution
            return _distribution_array(load_distribution(distribution), k), distribution
        memory.check("the planner's distribution", [("the distribution", 24 * k)])
        p = make_distribution(distribution, k, np.random.default_rng(0))
        return p, distribution_label(distribution)
    return _distribution_array(distribution, k), "given"


#: Decoders the planner leaves out of its table: the aliases (``norm_sub`` is ``project``,
#: ``norm_mul`` is ``normalize``) and ``post_pos``, which is ``raw`` for the distribution
#: (it clips query answers, not values).
SKIPPED_DECODERS = tuple(_decoders.ALIASES) + ("post_pos",)


def modeled(mechanism: Any, decoder: str) -> bool:
    """Whether the planner predicts ``decoder``'s error for ``mechanism``."""
    if _is_compressive(mechanism):
        return decoder in COMPRESSIVE_DECODERS
    if decoder == "ibu":
        return type(mechanism).__name__ in EXACTLY_SIMULATED and mechanism.k <= IBU_MAX_K
    return decoder not in UNMODELED_DECODERS


def candidate_decoders(mechanism: Any, sparsity: Optional[int],
                       requested: Optional[Sequence[str]] = None) -> List[str]:
    """The decoders the planner ranks for ``mechanism``: every decoder it accepts and
    models (:func:`modeled`) except those in :data:`SKIPPED_DECODERS`, and except those of
    :data:`OPT_IN_DECODERS` unless ``requested``; restricted to ``requested`` when given."""
    return [name for name in getattr(mechanism, "decoders", _decoders.DECODERS)
            if modeled(mechanism, name) and name not in SKIPPED_DECODERS
            and (name in requested if requested is not None
                 else name not in OPT_IN_DECODERS)]


def plan(k: int, epsilon: float, *, n: Optional[int] = None, target: Optional[float] = None,
         metric: str = "l1", sparsity: Optional[int] = None,
         max_report_bits: Optional[int] = None, mechanisms: Optional[Sequence[str]] = None,
         distribution: Any = None, decoders: Optional[Sequence[str]] = None,
         seed: int = 0) -> Plan:
    """Rank (mechanism, decoder) pairs by predicted error at n, or by users needed.

    Parameters
    ----------
    k : int
        Number of possible values (2 <= k).
    epsilon : float
        Privacy budget ε > 0 (every row's mechanism is ε-LDP for every pair of values; the
        row states its realized ε).
    n : int, optional
        Number of users: rows are ranked by predicted error at n.
    target : float, optional
        Target error in ``metric``: rows get the users needed to reach it (and are ranked by
        it when ``n`` is not given). At least one of ``n`` and ``target`` is required.
    metric : {"l1", "l2", "linf", "top-T"}
        ℓ1 (= 2 × total variation), ℓ2 (root mean square), ℓ∞, or the ℓ1 error on the T most
        frequent values (e.g. ``"top-10"``).
    sparsity : int, optional
        The number of values with positive probability, when known: the reference
        distribution becomes uniform on that many values, and ``sparse_project`` uses it.
    max_report_bits : int, optional
        Drop mechanisms whose reports are longer.
    mechanisms : sequence of str, optional
        Restrict to these (class or short names, e.g. ``["hr", "olh"]``); default
        :data:`PLANNED_MECHANISMS`. Name ``"cp"`` to add compressive privatization
        (:data:`OPT_IN_MECHANISMS`: one row per report size in
        :data:`COMPRESSIVE_REPORT_SIZES`).
    distribution : array of shape (k,) or str, optional
        The distribution to plan for (a pilot estimate, or a shape ``"zipf:1.1"``,
        ``"geo:0.9"``, ``"unif:20"``); default: uniform (see ``sparsity``).
    decoders : sequence of str, optional
        Restrict to these decoders. ``"ibu"`` is ranked only when named here (for randomized
        response, Hadamard Response, RAPPOR and OUE, k <= 4096: :data:`IBU_MAX_K`).
    seed : int
        Seed of the surrogate draws (the plan is deterministic for a seed).

    Returns
    -------
    Plan
        Rows ranked best first (ties: fewer report bits first).

    Examples
    --------
    >>> best = plan(1000, 1.0, n=100_000, distribution="zipf:1.1",
    ...             decoders=["raw", "project"]).best
    >>> best.mechanism in PLANNED_MECHANISMS
    True
    """
    k = integer(k, "k", minimum=2)
    epsilon = check_epsilon(epsilon)
    if n is None and target is None:
        raise ValueError("give n (to predict the error) or target (to get the users needed)")
    if n is not None:
        n = integer(n, "n", minimum=1)
    if target is not None:
        target = real(target, "target")
        if not target > 0:
            raise ValueError(f"target must be a positive error, got {target}")
    kind, _ = parse_metric(metric, k)
    if sparsity is not None:
        sparsity = integer(sparsity, "sparsity", minimum=1, maximum=k)
    if max_report_bits is not None:
        max_report_bits = integer(max_report_bits, "max_report_bits", minimum=1)
    p, label = reference_distribution(k, distribution, sparsity)
    names = PLANNED_MECHANISMS if mechanisms is None else list(mechanisms)
    if not names:
        raise ValueError("mechanisms is empty")
    rows: List[Dict[str, Any]] = []
    for mechanism in [m for name in names for m in planned_instances(name, k, epsilon)]:
        bits = report_bits(mechanism)
        if max_report_bits is not None and bits > max_report_bits:
            continue
        groups = getattr(mechanism, "num_groups", None)
        if groups is not None and n is not None and n < groups:
            continue  # one-bit HR is biased unless every one of its K groups has a user
        chosen = candidate_decoders(mechanism, sparsity, decoders)
        predicted = ({} if n is None else
                     predict_errors(mechanism, chosen, p, n, metric, sparsity=sparsity,
                                    seed=seed))
        for decoder in chosen:
            used_sparsity = (sparsity if decoder in _decoders.SPARSE_DECODERS
                             or _is_compressive(mechanism) else None)
            parameters = dict(mechanism_parameters(mechanism))
            if used_sparsity is not None:
                parameters["sparsity"] = used_sparsity
            error, method, precision = predicted.get(decoder, (None, None, 0.0))
            needed = None
            if target is not None:
                needed = users_needed(mechanism, decoder, p, target, metric,
                                      sparsity=used_sparsity, seed=seed, start=n)
                if groups is not None and needed != -1:
                    needed = max(needed, int(groups))
                if method is None:
                    _, method = predict_error(mechanism, decoder, p, 1000, metric,
                                              sparsity=used_sparsity, seed=seed, draws=1)
            users = n if n is not None else (needed if needed and needed > 0 else 1)
            rows.append(dict(mechanism=type(mechanism).__name__, decoder=decoder,
                             parameters=parameters, report_bits=bits, error=error,
                             n_needed=needed, method=method,
                             server_ops=server_ops(mechanism, decoder, users),
                             realized_epsilon=float(mechanism.realized_epsilon),
                             error_precision=precision))
    if not rows:
        raise ValueError("no mechanism fits the constraints (max_report_bits, mechanisms, "
                         "decoders)")

    def key(row: Dict[str, Any]) -> Tuple[float, int]:
        if n is not None:
            return (row["error"], row["report_bits"])
        needed = row["n_needed"]
        return (math.inf if needed == -1 else needed, row["report_bits"])

    rows.sort(key=key)
    if n is not None:
        rows = _refine_first(rows, key, p, n, epsilon, metric, seed)
    ranked = [PlanRow(rank=i + 1, **row) for i, row in enumerate(rows)]
    return Plan(k=k, epsilon=epsilon, n=n, target=target, metric=metric, distribution=label,
                rows=ranked)


def _refine_first(rows: List[Dict[str, Any]], key: Callable[[Dict[str, Any]], Any],
                  p: np.ndarray, n: int, epsilon: float, metric: str,
                  seed: int) -> List[Dict[str, Any]]:
    """Re-predict the first row with the refined draw budget until the first row is one
    already refined (a refined prediction can move a row down; at most a few rounds)."""
    refined = set()
    for _ in range(4):
        first = rows[0]
        name = (first["mechanism"], first["decoder"], first["parameters"].get("m"))
        if first["method"] not in DRAWN_METHODS or name in refined or name[1] == "ibu" \
                or first["error_precision"] <= DRAW_PRECISION:
            break
        mechanism = rebuild(first, len(p), epsilon)
        sparsity = first["parameters"].get("sparsity")
        error, _, precision = predict_errors(mechanism, [first["decoder"]], p, n, metric,
                                             sparsity=sparsity, seed=seed,
                                             refined=True)[first["decoder"]]
        first.update(error=error, error_precision=precision)
        refined.add(name)
        rows.sort(key=key)
    return rows


# -- command line -----------------------------------------------------------------------------

def _count(text: str) -> int:
    """A user count written as an integer or in float notation (``1e6``)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of users, got {text!r}") from None
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"expected a whole number of users >= 1, got {text!r}")
    return int(value)


def _names(text: Optional[str]) -> Optional[List[str]]:
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def cmd_plan(args: Any) -> int:
    result = plan(args.k, args.epsilon, n=None if args.n is None else _count(args.n),
                  target=args.target, metric=args.metric, sparsity=args.sparsity,
                  max_report_bits=args.max_report_bits, mechanisms=_names(args.mechanisms),
                  distribution=args.distribution, decoders=_names(args.decoders),
                  seed=args.seed)
    print(result.to_json() if args.json else format_plan(result, args.limit))
    return 0


def register(subparsers: Any) -> None:
    """Add ``plan`` to the ``ldpdist`` parser."""
    p = subparsers.add_parser(
        "plan", help="rank mechanisms and decoders by predicted error or users needed",
        description="Rank every (mechanism, decoder) pair by its predicted error at N users "
                    "(or by the users it needs to reach --target), with report size and "
                    "server cost. See the docs page 'Planning' for how errors are predicted.")
    p.add_argument("--k", type=int, required=True, help="number of possible values (>= 2)")
    p.add_argument("--epsilon", type=float, required=True, help="privacy budget ε (> 0)")
    p.add_argument("--n", metavar="N", help="number of users (e.g. 1e6)")
    p.add_argument("--target", type=float, metavar="ERROR",
                   help="target error in --metric: report the users each row needs")
    p.add_argument("--metric", default="l1",
                   help="l1 (default), l2, linf, or top-T (ℓ1 on the T most frequent values)")
    p.add_argument("--sparsity", type=int, metavar="S",
                   help="number of values with positive probability, when known")
    p.add_argument("--max-report-bits", dest="max_report_bits", type=int, metavar="BITS",
                   help="drop mechanisms whose reports are longer")
    p.add_argument("--mechanisms", metavar="LIST",
                   help="comma-separated short or class names (default: all planned but "
                        "compressive privatization, cp, which is planned when named)")
    p.add_argument("--decoders", metavar="LIST",
                   help="comma-separated decoder names (ibu is ranked only when named)")
    p.add_argument("--distribution", metavar="DIST",
                   help="plan for this distribution: geo:λ, zipf:a, unif:s or a .npy file "
                        "(default: uniform)")
    p.add_argument("--limit", type=int, default=None, metavar="ROWS",
                   help="print only the best ROWS rows")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the simulated and surrogate draws")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_plan)
