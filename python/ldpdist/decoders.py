"""Decoders: from aggregated reports to a distribution estimate.

Every mechanism's unbiased ("raw") estimate comes from Rust; the decoders post-process it:

``"raw"``
    The unbiased estimate itself: may be negative and need not sum to 1.
``"normalize"``
    Clip negative entries to 0 and divide by the sum (the HR reference code's default);
    when no entry is positive the result is the uniform distribution. Also named
    ``"norm_mul"`` (the consistency paper's Norm-Mul).
``"project"`` (default)
    Euclidean projection onto the probability simplex (Kairouz, Bonawitz & Ramage 2016;
    never increases the l2 error, Bassily 2019). Also named ``"norm_sub"`` (the consistency
    paper's Norm-Sub).
``"sparse_project"``
    Euclidean projection onto the s-sparse simplex (Kyrillidis et al. 2013), with
    ``sparsity=s``; ``sparsity=None`` chooses s by :func:`noise_level_sparsity`.
``"two_stage"``, ``"two_stage_project"``
    Only for the two-stage mechanisms (``mechanism.decoders`` lists them): the top 2s values
    of the first stage's statistic, then the unbiased estimate from the second stage's users
    on those values, 0 elsewhere (the sparse-estimation paper's eq. (14) and Algorithm 2);
    ``_project`` projects that onto the s-sparse simplex. ``sparsity=None`` chooses s by
    :func:`noise_level_sparsity` on the first stage's unbiased estimate.
``"ibu"``
    Iterative Bayesian update (Agrawal & Aggarwal 2001), i.e. EM for the maximum-likelihood
    distribution. For index-valued mechanisms the reports are multinomial and this is exact
    maximum likelihood. For bit-vector mechanisms the aggregate is a vector of per-bit counts;
    the update is the EM of the model in which each bit count is Poisson with mean
    ``n * P(bit = 1 | p)`` (Richardson–Lucy), normalized at the end; public-coin hashing
    uses the same model for its pooled counts ``M + N`` (``mechanism._linear_statistic``).
The consistency family (:data:`CONSISTENCY_DECODERS`)
    ``"base_pos"``, ``"post_pos"``, ``"base_cut"``, ``"norm"``, ``"norm_mul"``,
    ``"norm_cut"``, ``"norm_sub"``, ``"mle_apx"``, ``"power"``, ``"power_ns"``: the methods of
    Wang, Lopuhaä-Zwakenberg, Li, Škorić & Li (NDSS 2020), applied to the raw estimate;
    :mod:`ldpdist.consistency` defines each. Two are existing decoders
    under the paper's name (:data:`ALIASES`): ``"norm_sub"`` is ``"project"`` and
    ``"norm_mul"`` is ``"normalize"`` (identical results, edge cases included).
    ``"post_pos"`` returns the raw estimate (it clips query answers instead:
    :func:`ldpdist.consistency.answer`). ``"base_cut"``, ``"mle_apx"``, ``"power"`` and
    ``"power_ns"`` use the noise of the raw estimate: the mechanism's exact
    ``estimator_variance``, or, for a mechanism without one (compressive privatization), a
    constant read from the raw estimate (:func:`ldpdist.consistency.noise_model`).
``"empirical_bayes"``
    For heavy-tailed (and sparse) distributions: a nonparametric prior of the values'
    frequencies fitted to the raw estimate (Kiefer–Wolfowitz NPMLE), then every value's
    posterior at a common quantile so that the estimate sums to 1
    (:func:`ldpdist.empirical_bayes.from_noise_model`; the noise as for ``"base_cut"``).

Options. ``estimate`` passes keyword options to the decoder: ``max_iter`` and ``tol`` to
``"ibu"``, ``sparsity`` to the sparse decoders (:data:`DECODER_OPTIONS`); compressive
privatization takes ``sparsity`` (OMP's atoms) and ``model`` with every decoder, and no
``max_iter``. :func:`check_options` checks them once for every mechanism and decoder, before
anything is decoded: an option of another decoder is a ``ValueError`` that says which
decoder takes it, an option no decoder takes a ``TypeError``; both name the mechanism, the
decoder and the options it takes (:func:`decoder_options`), e.g. ::

    TypeError: HadamardResponse: decoder 'ibu' takes no option 'iterations' (its options:
    max_iter, tol); ...
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from . import consistency, empirical_bayes, kernels, memory
from ._validation import integer, one_of, real

try:  # typing.Protocol is 3.8+; the annotations below are informative only
    from typing import Protocol
except ImportError:  # pragma: no cover
    Protocol = object  # type: ignore


class Decodable(Protocol):
    """What a decoder needs of a mechanism (every :class:`ldpdist.Mechanism` has it)."""

    k: int
    report_kind: str
    _core: Any

    def _expected_frequencies(self, p: np.ndarray) -> np.ndarray: ...

    def _channel_apply(self, w: np.ndarray) -> np.ndarray: ...


Mechanism = Decodable

#: The consistency family (Wang et al., NDSS 2020), :mod:`ldpdist.consistency`.
CONSISTENCY_DECODERS = consistency.METHODS
#: Decoders that are another decoder under the consistency paper's name.
ALIASES = {"norm_sub": "project", "norm_mul": "normalize"}
#: Decoders of every mechanism (compressive privatization has all but ``"ibu"``).
DECODERS = (("raw", "normalize", "project", "sparse_project", "ibu") + CONSISTENCY_DECODERS
            + ("empirical_bayes",))
#: Decoders whose output may have negative entries (unbiased or shifted estimates).
SIGNED_DECODERS = ("raw", "post_pos", "norm")
#: Decoders whose output need not sum to 1 (non-negative, but cut or shrunk, not rescaled).
UNNORMALIZED_DECODERS = SIGNED_DECODERS[:2] + ("base_pos", "base_cut", "norm_cut", "power")
#: Decoders that use the noise of the raw estimate (:func:`ldpdist.consistency.noise_model`).
NOISE_DECODERS = consistency.NOISE_METHODS + ("empirical_bayes",)
#: Decoders of the two-stage mechanisms, on top of :data:`DECODERS`.
TWO_STAGE_DECODERS = ("two_stage", "two_stage_project")
#: Every decoder name some mechanism accepts (``mechanism.decoders`` says which it has).
ALL_DECODERS = DECODERS + TWO_STAGE_DECODERS
#: Decoders that take ``sparsity=s``.
SPARSE_DECODERS = ("sparse_project",) + TWO_STAGE_DECODERS
#: The keyword options each decoder takes in ``estimate`` (a decoder not listed takes none).
#: A mechanism whose estimation has options of its own says so in ``_decoder_options``
#: (compressive privatization: ``sparsity`` and ``model`` with every decoder).
DECODER_OPTIONS: Dict[str, Tuple[str, ...]] = {
    "ibu": ("max_iter", "tol"),
    **{decoder: ("sparsity",) for decoder in SPARSE_DECODERS},
}


def decoder_options(mechanism: Any, decoder: str) -> Tuple[str, ...]:
    """The keyword options that ``mechanism.estimate`` (and ``Aggregator.estimate``) take
    with ``decoder``: :data:`DECODER_OPTIONS`, or the mechanism's own
    ``_decoder_options(decoder)`` when it defines one."""
    own = getattr(mechanism, "_decoder_options", None)
    if own is not None:
        return tuple(own(decoder))
    return DECODER_OPTIONS.get(ALIASES.get(decoder, decoder), ())


def check_options(mechanism: Any, decoder: str, options: Mapping[str, Any]) -> None:
    """The one check of the decoder and its options, before any decoding: ``decoder`` must
    be one of ``mechanism.decoders`` (``ValueError``), and every name in ``options`` one it
    takes (:func:`decoder_options`). An option of another decoder is a ``ValueError``
    saying which decoders take it; a name no decoder of the mechanism takes is a
    ``TypeError`` (as Python's for an unexpected keyword argument), both naming the
    mechanism, the decoder and the options it takes."""
    accepted = getattr(mechanism, "decoders", DECODERS)
    one_of(decoder, accepted, "decoder")
    takes = decoder_options(mechanism, decoder)
    for name in options:
        if name in takes:
            continue
        listing = ("its options: " + ", ".join(takes)) if takes else "it takes no options"
        where = f"{type(mechanism).__name__}: decoder {decoder!r} takes no option {name!r}"
        others = tuple(d for d in accepted if name in decoder_options(mechanism, d))
        if others:
            raise ValueError(f"{where} ({listing}); {name!r} is an option of the "
                             f"decoder{'s' if len(others) > 1 else ''} "
                             f"{', '.join(map(repr, others))}")
        raise TypeError(f"{where} ({listing}); the options of its decoders: "
                        f"{_options_listing(mechanism, accepted)}")


def _options_listing(mechanism: Any, accepted: Tuple[str, ...]) -> str:
    """Which decoders of ``mechanism`` take which options, in one line."""
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for d in accepted:
        groups.setdefault(decoder_options(mechanism, d), []).append(d)
    if len(groups) == 1:
        (options,) = groups
        return (", ".join(options) + " with every decoder") if options else "none"
    parts = [f"{', '.join(options)} ({', '.join(names)})"
             for options, names in groups.items() if options]
    return "; ".join(parts) + ("; none for the others" if () in groups else "")


def noise_level_sparsity(raw: np.ndarray) -> int:
    """The support size s to assume when it is not known, from an unbiased estimate alone.

    The rule (ours; none of the papers offers one) is a complexity-penalized fit: with P_s
    the Euclidean projection onto the s-sparse simplex,

        s = argmin_s ‖p̃ − P_s(p̃)‖² + 2 σ̂² s ln(e k / s),

    the penalty of Birgé and Massart (2001) for choosing s of k coordinates. The noise level
    σ̂ = median|p̃| / 0.6745 (the normal MAD) is estimated from the data: when p is sparse
    most entries of p̃ are pure noise, so no mechanism-specific variance formula is needed.
    All k candidates are scored in O(k log k) (one sort): for sorted v, the projection of
    the top s keeps the first r_s + 1 entries minus θ_s, where r_s = min(s − 1, ρ) and ρ is
    the last index of the (prefix-only) simplex condition. Against the known s (the
    ``sparse-shootout`` preset, docs: Accuracy): equal where the support stands out of the
    noise, between the known-s and the plain projection where it does not.
    """
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim != 1 or raw.size == 0:
        raise ValueError(f"the raw estimate must be a non-empty 1-D array, got shape {raw.shape}")
    if not np.all(np.isfinite(raw)):
        raise ValueError("the raw estimate has non-finite entries")
    k = raw.size
    memory.check("the noise-level sparsity rule", [("sorted copies of the estimate", 48 * k)])
    sigma = float(np.median(np.abs(raw))) / 0.6745
    v = np.sort(raw)[::-1]
    prefix = np.cumsum(v)
    ranks = np.arange(1, k + 1)
    # the simplex projection condition holds on a prefix 0..rho of the sorted values
    rho = int(np.nonzero(v - (prefix - 1.0) / ranks > 0)[0][-1])
    r = np.minimum(ranks - 1, rho)
    theta = (prefix[r] - 1.0) / (r + 1)
    squares = np.cumsum(v * v)
    residual = (r + 1) * theta * theta + (squares[-1] - squares[r])
    penalty = 2.0 * sigma * sigma * ranks * np.log(np.e * k / ranks)
    return int(np.argmin(residual + penalty)) + 1


def normalize(raw: np.ndarray) -> np.ndarray:
    """Clip to non-negative and rescale to sum 1 (uniform when nothing is positive): the
    consistency paper's Norm-Mul, :func:`ldpdist.consistency.norm_mul`."""
    return consistency.norm_mul(raw)


class IbuResult(NamedTuple):
    """Outcome of :func:`iterative_bayesian_update`."""

    estimate: np.ndarray
    iterations: int
    converged: bool
    log_likelihood: List[float]
    """Log-likelihood after each iteration (index 0: the uniform start)."""


def iterative_bayesian_update(mechanism: "Mechanism", counts: np.ndarray, n: int, *,
                              max_iter: int = 10_000, tol: float = 1e-12,
                              start: Optional[np.ndarray] = None,
                              record_likelihood: bool = False,
                              accelerate: bool = True) -> IbuResult:
    """EM for the distribution of the users' values given the aggregated counts.

    The EM step is ``p <- p * Q(f / (Q^T p)) / Q(1)`` with ``f = counts / n``, the channel
    products computed by the mechanism (one FWHT per block for Hadamard Response). Plain EM
    needs tens of thousands of steps when the maximum-likelihood estimate lies on the boundary
    of the simplex (typical for sparse distributions), so by default the steps are accelerated
    with SQUAREM (Varadhan & Roland 2008: one extrapolation from two EM steps, clipped to the
    simplex's interior, then an EM step), and an extrapolation is kept only when it does not lower the
    likelihood, so the likelihood never decreases. It stops when an iteration raises the
    log-likelihood by less than ``tol`` relative to its magnitude, or after ``max_iter``
    iterations. (At small n the maximum-likelihood estimate can be further from p than an
    early EM iterate: it fits the noise. That is the estimator, not a convergence problem.)
    """
    max_iter = integer(max_iter, "max_iter", minimum=1)
    tol = real(tol, "tol")
    # A mechanism whose aggregate is not the statistic its channel products describe maps it
    # first (public-coin hashing pools its two stages' counts).
    linear_statistic = getattr(mechanism, "_linear_statistic", None)
    if linear_statistic is not None:
        counts = linear_statistic(counts)
    k = mechanism.k
    size = np.asarray(counts).size
    # About ten work vectors of each size live at once (iterates, expectations, ratios).
    memory.check("the iterative Bayesian update",
                 [("work vectors over the values", 80 * k), ("work vectors over the reports",
                                                             80 * size)])
    freq = np.asarray(counts, dtype=np.float64) / float(n)
    p = np.full(k, 1.0 / k) if start is None else np.array(start, dtype=np.float64)
    if not (freq > 0).any():
        # Nothing observed (e.g. bit-vector reports with every bit 0): the likelihood does
        # not depend on p (the expected total of a symmetric mechanism is constant), so every
        # distribution is a maximizer; return the starting point, a valid distribution.
        return IbuResult(p / p.sum(), 0, True, [])
    column_mass = mechanism._channel_apply(np.ones(freq.size))
    observed = freq > 0
    multinomial = mechanism.report_kind == "index"

    def log_likelihood(expected: np.ndarray) -> float:
        if multinomial:
            return float(n * np.sum(freq[observed] * np.log(expected[observed])))
        return float(n * (np.sum(freq[observed] * np.log(expected[observed])) - expected.sum()))

    def em_step(current: np.ndarray, expected: np.ndarray) -> np.ndarray:
        ratio = np.zeros_like(freq)
        ratio[observed] = freq[observed] / expected[observed]
        return current * mechanism._channel_apply(ratio) / column_mass

    expected = mechanism._expected_frequencies(p)
    current_ll = log_likelihood(expected)
    history: List[float] = [current_ll] if record_likelihood else []
    converged = False
    iterations = 0
    for iterations in range(1, max_iter + 1):
        p1 = em_step(p, expected)
        candidate = p1
        if accelerate:
            e1 = mechanism._expected_frequencies(p1)
            p2 = em_step(p1, e1)
            r, v = p1 - p, p2 - 2 * p1 + p
            v_norm = np.linalg.norm(v)
            candidate = p2
            if v_norm > 0:
                alpha = -np.linalg.norm(r) / v_norm
                # Clip into the interior: a coordinate set to 0 would stay 0 under EM forever.
                jump = np.maximum(p - 2 * alpha * r + alpha * alpha * v, 1e-3 * p2)
                total = jump.sum()
                if total > 0:
                    jump *= p2.sum() / total
                    jump = em_step(jump, mechanism._expected_frequencies(jump))
                    e_jump = mechanism._expected_frequencies(jump)
                    if log_likelihood(e_jump) >= log_likelihood(mechanism._expected_frequencies(p2)):
                        candidate = jump
        new_expected = mechanism._expected_frequencies(candidate)
        new_ll = log_likelihood(new_expected)
        if new_ll < current_ll:  # numerical safety net: never accept a worse point
            candidate, new_expected = p1, mechanism._expected_frequencies(p1)
            new_ll = log_likelihood(new_expected)
        gain = new_ll - current_ll
        p, expected, current_ll = candidate, new_expected, max(new_ll, current_ll)
        if record_likelihood:
            history.append(new_ll)
        if gain <= tol * max(1.0, abs(current_ll)):
            converged = True
            break
    total = p.sum()
    if not (np.isfinite(total) and total > 0):
        raise ValueError("the iterative Bayesian update lost all probability mass (the counts "
                         "are inconsistent with the mechanism's channel)")
    return IbuResult(p / total, iterations, converged, history)


def decode(mechanism: "Mechanism", counts: np.ndarray, n: int, decoder: str = "project", *,
           sparsity: Optional[int] = None, max_iter: int = 10_000,
           tol: float = 1e-12) -> np.ndarray:
    """Estimate of shape (k,) from aggregated ``counts`` of ``n`` reports (see module doc)."""
    one_of(decoder, getattr(mechanism, "decoders", DECODERS), "decoder")
    if decoder in SPARSE_DECODERS:
        if sparsity is not None:  # None: the noise-level rule, below
            sparsity = integer(sparsity, "sparsity", minimum=1, maximum=mechanism.k)
    elif sparsity is not None:
        raise ValueError(f"sparsity is only used by the decoders {SPARSE_DECODERS}, "
                         f"not {decoder!r}")
    if n <= 0:
        raise ValueError("there are no reports to estimate from (n = 0)")
    memory.check(f"decoder {decoder!r}", [("the estimate and its post-processing",
                                           24 * mechanism.k)])
    if decoder == "ibu":
        result = iterative_bayesian_update(mechanism, counts, n, max_iter=max_iter, tol=tol)
        if not result.converged:
            warnings.warn(
                f"the iterative Bayesian update did not reach tol={tol} in max_iter={max_iter} "
                "iterations; the estimate is the last iterate (raise max_iter or tol)",
                RuntimeWarning, stacklevel=3)
        return result.estimate
    if decoder in TWO_STAGE_DECODERS:
        if sparsity is None:
            sparsity = chosen_sparsity(mechanism, counts, n, decoder)
        estimate = mechanism._two_stage_estimate(counts, n, sparsity)
        return (kernels.project_sparse_simplex(estimate, sparsity)
                if decoder == "two_stage_project" else estimate)
    return post_process(mechanism, mechanism._core.estimate_raw(counts, n), n, decoder,
                        sparsity=sparsity)


def post_process(mechanism: "Mechanism", raw: np.ndarray, n: int, decoder: str, *,
                 sparsity: Optional[int] = None) -> np.ndarray:
    """Apply a post-processing decoder to the raw estimate ``raw`` of ``mechanism`` from n
    reports: what :func:`decode` does after the raw estimate (the planner applies it to
    surrogate raw estimates)."""
    if decoder == "sparse_project" and sparsity is None:
        sparsity = noise_level_sparsity(raw)
    noise = consistency.noise_model(mechanism, n, raw) if decoder in NOISE_DECODERS else None
    return finish(raw, decoder, sparsity, noise=noise)


def chosen_sparsity(mechanism: "Mechanism", counts: np.ndarray, n: int, decoder: str) -> int:
    """The s that ``decoder`` (one of :data:`SPARSE_DECODERS`) uses when ``sparsity=None``:
    :func:`noise_level_sparsity` of the raw estimate (of the first stage's for the two-stage
    decoders)."""
    if decoder in TWO_STAGE_DECODERS:
        return noise_level_sparsity(mechanism._first_stage_raw(counts, n))
    if decoder == "sparse_project":
        return noise_level_sparsity(mechanism._core.estimate_raw(counts, n))
    raise ValueError(f"decoder {decoder!r} takes no sparsity")


def finish(raw: np.ndarray, decoder: str, sparsity: Optional[int] = None, *,
           noise: Optional["consistency.NoiseModel"] = None) -> np.ndarray:
    """Apply a post-processing decoder (``raw``, ``normalize``, ``project``,
    ``sparse_project`` or one of :data:`CONSISTENCY_DECODERS`) to a raw estimate. ``noise``:
    the :class:`ldpdist.consistency.NoiseModel` of the raw estimate, for ``base_cut``,
    ``mle_apx``, ``power``, ``power_ns`` and ``empirical_bayes``."""
    decoder = ALIASES.get(decoder, decoder)
    if decoder == "raw":
        return raw
    if decoder == "normalize":
        return normalize(raw)
    if decoder == "project":
        return kernels.project_simplex(raw)
    if decoder == "sparse_project":
        return kernels.project_sparse_simplex(raw, sparsity)
    if decoder in CONSISTENCY_DECODERS:
        return consistency.apply(raw, decoder, noise)
    if decoder == "empirical_bayes":
        if noise is None:
            raise ValueError("empirical_bayes needs the noise of the raw estimate: pass "
                             "noise=NoiseModel(...) (or use the decoder, which builds it "
                             "from the mechanism)")
        return empirical_bayes.from_noise_model(raw, noise)
    raise ValueError(f"decoder {decoder!r} is not a post-processing decoder")
