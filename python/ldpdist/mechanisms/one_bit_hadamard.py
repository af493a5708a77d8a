"""One-bit Hadamard Response (Algorithm 1 of the sparse-estimation paper)."""

from __future__ import annotations

import warnings
from typing import Any, Optional, Tuple, Union

import numpy as np

from .. import _core, kernels, memory
from .._validation import integer, seed_key
from ..reports import ReportBatch, Reports, check_reports
from ..specs import register
from .aggregator import Aggregator
from .base import Mechanism, values_array


@register("obhr", "1-bit HR")
class OneBitHadamardResponse(Mechanism):
    """One-bit Hadamard Response (Acharya, Kairouz, Liu & Sun 2021, Algorithm 1; after
    Acharya & Sun 2019): every user sends ONE bit, and the server decodes with one fast
    Walsh–Hadamard transform; with ``decoder="sparse_project"`` (``sparsity=s``) this is the
    paper's estimator for s-sparse distributions, with ``"project"`` its baseline.

    Groups: ``K = 2**ceil(log2(k + 1))`` (:attr:`num_groups`). The *server* assigns every
    user a group j in [0, K) — never from the user's data: by default user number i is in
    group ``i mod K`` (the paper's round-robin; ``privatize(..., first_user=u)`` continues it
    from user u over several batches), or explicitly (``privatize(..., groups=g)``).

    Client: a user of group j holding x sends one bit y with ``P(y = 1) = a = e^ε/(e^ε + 1)``
    when ``H(x, j) = +1`` and ``b = 1/(e^ε + 1)`` otherwise, H the Sylvester matrix
    (``H(x, j) = (-1)**popcount(x & j)``, symbol x on row x). The bit is
    ``[H(x, j) = +1] XOR flip`` with ``flip ~ Bernoulli(b)``, b rounded up (8 ulps, for
    ``ε - 2**-46 max(ε, 1)``) so the channel is exactly ε'-LDP with ε' = ln((1 - b)/b) ≤ ε
    (:attr:`realized_epsilon`).

    Reports: the integer ``r = 2 j + y`` in ``[0, 2K)`` (:attr:`output_size` is 2K, smallest
    unsigned dtype). The user's own message is the bit y = r % 2; j = r // 2 is the group the
    server assigned, carried beside it so that reports files, aggregators, fingerprints and
    merges work as for every index mechanism. A deployment whose clients send only the bit
    forms reports with :meth:`reports_from_bits` (and :meth:`split_reports` undoes it).

    Channel (:meth:`channel_matrix`, the law of one report of a user at a uniformly random
    position): ``Q[x, 2j + y] = P(y | x, j) / K``; its largest log-ratio is ε' exactly.

    Estimation: with ``n_j`` reports and ``t_j`` ones in group j,
    ``z_j = (t_j/n_j - b)/(a - b)·2 - 1`` (the paper's ``(e^ε+1)/(e^ε-1)(2 t̂_j - 1)``),
    ``p̃ = (1/K) H z`` (one FWHT), first k coordinates. It is unbiased when every group has
    reports (so **n ≥ K users are needed**) and the users' values are i.i.d. (or their order
    uniformly random); an empty group contributes 0 (``z_j = 0``, the paper's ``t̂_j = 1/2``),
    which biases the estimate, and :meth:`estimate` warns. Every decoder applies: ``"raw"``,
    ``"normalize"``, ``"project"``, ``"sparse_project"`` (the exact projection onto the
    s-sparse simplex, ``kernels.project_sparse_simplex``) and ``"ibu"`` (exact maximum
    likelihood: the multinomial likelihood under Q is, up to a constant, that of the bits
    given the group sizes; channel products by one FWHT each). The paper's guarantee
    (Acharya, Kairouz, Liu & Sun, ALT 2021; docs page Mechanisms › Sparse estimation,
    docs/mechanisms/sparse.md): with probability ≥ 0.9,
    ``||p̂ - p||_2 ≤ 50 (e^ε+1)/(e^ε-1) sqrt(s log(2k/s)/n)`` for ``"sparse_project"``.

    Parameters
    ----------
    k : int
        Number of possible values, 2 <= k <= 2**32.
    epsilon : float
        Privacy parameter ε > 0.

    Examples
    --------
    >>> mech = OneBitHadamardResponse(k=1000, epsilon=1.0)
    >>> mech.num_groups, mech.output_size
    (1024, 2048)
    >>> reports = mech.privatize(np.arange(5000) % 7, seed=7)
    >>> mech.estimate(reports, "sparse_project", sparsity=7).shape
    (1000,)
    """

    _core_class = _core.OneBitHadamardResponse

    @property
    def num_groups(self) -> int:
        """K = 2**ceil(log2(k + 1)), the number of groups (k < K <= 2k)."""
        return int(self._core.groups)

    # -- client side -------------------------------------------------------------------

    def privatize(self, values: Any, seed: Optional[int] = None, *, groups: Any = None,
                  first_user: Optional[int] = None) -> Reports:
        """Privatize one value per user, in the groups the server assigned.

        Parameters
        ----------
        values : array_like of int, shape (n,)
            Integers in [0, k).
        seed : int, optional
            ``None`` (default) draws fresh OS entropy; an integer gives reproducible reports,
            bit-identical whatever the thread count.
        groups : array_like of int, shape (n,), optional
            Explicit groups, integers in [0, K) of any integer dtype, one per value.
        first_user : int, optional
            Round-robin groups (the default): value i is user number ``first_user + i`` and
            in group ``(first_user + i) mod K``; ``first_user`` defaults to 0. Pass the number
            of users already privatized to continue the round-robin over several batches.
            Not together with ``groups``.

        Returns
        -------
        Reports, shape (n,), of the smallest unsigned dtype holding ``2K - 1``
            The reports ``2 j + y`` (group j, bit y), tagged with this spec's fingerprint
            (see :meth:`Mechanism.privatize`).
        """
        if groups is not None and first_user is not None:
            raise ValueError("pass either groups= (explicit groups) or first_user= (where the "
                             "round-robin starts), not both")
        array = values_array(values, self._k)
        key = seed_key(seed)
        if groups is None:
            first = 0 if first_user is None else integer(first_user, "first_user", minimum=0)
            return self._reports(self._core.privatize_grouped(array, key, None,
                                                              first % self.num_groups))
        return self._reports(self._core.privatize_grouped(
            array, key, self._groups_array(groups, array.size), 0))

    def _groups_array(self, groups: Any, n: int) -> np.ndarray:
        """Validated explicit groups as a contiguous native unsigned array."""
        count = self.num_groups
        if isinstance(groups, (list, tuple)):
            for i, g in enumerate(groups):
                if isinstance(g, (bool, np.bool_)):
                    raise TypeError(f"groups must be integers, not booleans: groups[{i}] = {g!r}")
        array = groups if isinstance(groups, np.ndarray) else np.asarray(groups)
        if array.dtype.kind not in "iu":
            if array.size == 0 and not isinstance(groups, np.ndarray):
                array = array.astype(np.int64)  # an empty list
            else:
                raise TypeError(f"groups must be integers in [0, {count}), got dtype "
                                f"{array.dtype}")
        if array.ndim != 1:
            raise ValueError(f"groups must be one-dimensional, got shape {array.shape}")
        if array.size != n:
            raise ValueError(f"groups must have one entry per value: got {array.size} groups "
                             f"for {n} values")
        if array.size:
            bad = (array < 0) | (array >= count) if array.dtype.kind == "i" else array >= count
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"groups must lie in [0, K) = [0, {count}): "
                                 f"groups[{i}] = {array[i]}")
        if array.dtype.kind == "u" and array.dtype.isnative and array.flags.c_contiguous:
            return array
        target = np.uint32 if count <= 2**32 else np.uint64
        memory.check("privatize", [("the groups as unsigned integers",
                                    np.dtype(target).itemsize * array.size)])
        return np.ascontiguousarray(array, dtype=target)

    def reports_from_bits(self, bits: Any, groups: Any) -> Reports:
        """Reports ``2 j + y`` from one-bit messages ``bits`` (0/1 or bools) and the groups
        the server assigned to their senders (integers in [0, K)), both of shape (n,).

        This is how a server forms reports from the bits it received: the result is
        :class:`~ldpdist.Reports` of this spec, ready for :meth:`Aggregator.add`."""
        is_array = isinstance(bits, np.ndarray)
        bits = np.asarray(bits)
        if bits.size == 0 and not is_array:
            bits = bits.astype(np.uint8)  # an empty list
        if bits.dtype == np.bool_:
            bits = bits.astype(np.uint8)
        if bits.dtype.kind not in "iu":
            raise TypeError(f"bits must be 0/1 integers or booleans, got dtype {bits.dtype}")
        if bits.ndim != 1:
            raise ValueError(f"bits must be one-dimensional, got shape {bits.shape}")
        if bits.size and ((bits < 0) | (bits > 1)).any():
            i = int(np.argmax((bits < 0) | (bits > 1)))
            raise ValueError(f"bits must be 0 or 1: bits[{i}] = {bits[i]}")
        groups = self._groups_array(groups, bits.size).astype(np.uint64)
        out = 2 * groups + bits.astype(np.uint64)
        return self._reports(out.astype(np.min_scalar_type(self.output_size - 1)))

    def split_reports(self, reports: Union[Reports, ReportBatch]
                      ) -> Tuple[np.ndarray, np.ndarray]:
        """``(groups, bits)`` of reports: ``reports // 2`` and ``reports % 2`` (uint8 bits).
        Reports outside [0, 2K) raise ``ValueError``. ``reports`` are
        :class:`~ldpdist.Reports` of this spec (:meth:`privatize` or
        :meth:`reports_from_bits` output, a :class:`~ldpdist.ReportBatch`, or declared with
        :meth:`as_reports`), as for :meth:`estimate`."""
        reports = check_reports(self, reports, "OneBitHadamardResponse.split_reports")
        array, _ = self._prepare_reports(reports.view(np.ndarray), drop=False)
        if array.size and int(array.max()) >= self.output_size:
            i = int(np.argmax(array >= self.output_size))
            raise ValueError(f"reports lie in [0, {self.output_size}): reports[{i}] = {array[i]}")
        return array // 2, (array % 2).astype(np.uint8)

    # -- server side -------------------------------------------------------------------

    def _decode(self, counts: np.ndarray, n: int, decoder: str, **options: Any) -> np.ndarray:
        if n > 0:
            empty = int(self._core.empty_groups(np.ascontiguousarray(counts, dtype=np.uint64)))
            if empty:
                warnings.warn(
                    f"{empty} of the K = {self.num_groups} groups received no reports: they "
                    "contribute 0 to the estimate, which is then biased (one-bit Hadamard "
                    f"Response needs every group non-empty, i.e. n ≥ K = {self.num_groups} "
                    "users in round-robin groups)", RuntimeWarning, stacklevel=3)
        return super()._decode(counts, n, decoder, **options)

    def simulate(self, true_counts: Any, seed: Optional[int] = None) -> Aggregator:
        """Aggregate of privatizing ``true_counts[x]`` users holding each value x, in a
        uniformly random order with round-robin groups (group j gets ``ceil((n - j)/K)``
        users), exactly in law.

        Small n: an exact shuffle, then every user privatized (O(n)). Large n: Hadamard
        passes over the groups (a multivariate hypergeometric split of the users between the
        two halves of every dyadic range of groups, users merged into classes that behave
        alike below it), O(K log K) whatever n; the cheaper is chosen by a cost
        rule fitted to timings of both paths.
        """
        return super().simulate(true_counts, seed=seed)

    def estimator_variance(self, p: Any, n: int) -> np.ndarray:
        """Exact variance of each coordinate of the raw estimate, for n users drawn i.i.d.
        from ``p`` in the server's round-robin groups (group j holds
        ``n_j = ceil((n - j)/K)`` users; see :meth:`Mechanism.estimator_variance` for the
        parameters and errors).

        Within group j the bits are i.i.d.: a report's term ``(2y - 1)/(1 - 2b)`` has mean
        ``(H p)_j`` and variance ``1/(1 - 2b)^2 - (H p)_j^2`` (p padded to K), and
        ``p̃ = (1/K) H z`` with ``z_j`` the mean of group j's terms, so every coordinate has
        the same variance ``(1/K²) Σ_j (1/(1 - 2b)² - (H p)_j²) / n_j`` (b realized; one
        FWHT). For n a multiple of K it is ``(1/(1 - 2b)² - ||p||²)/n``: the estimate has the
        form of a frequency oracle with ``(a, 1/2)``, but the fixed group sizes remove the
        spread of the users between groups, so its variance is below that oracle's
        ``(1/(1 - 2b)² - p_x²)/n``. With ``n < K`` the empty groups contribute 0 and the
        estimate is biased; this is then its variance, not its mean squared error.

        Returns
        -------
        ndarray of float64, shape (k,)
        """
        p, n = self._variance_arguments(p, n)
        size = self.num_groups
        gap = 1.0 - 2.0 * float(self._core.probabilities()[1])
        padded = np.zeros(size)
        padded[: self._k] = p
        transform = kernels.fwht(padded)
        groups = n // size + (np.arange(size) < n % size)
        full = groups > 0
        total = float(np.sum((1.0 / (gap * gap) - transform[full] ** 2) / groups[full]))
        return np.full(self._k, total / (size * size))

    def _simulation_moments(self, true_counts: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Exact per-output mean and variance of :meth:`simulate`'s counts (for tests).

        Group j has ``n_j`` users drawn without replacement from the n (a uniformly random
        order), of whom ``S⁺_j ~ Hypergeometric(n, m⁺_j, n_j)`` hold a value with
        ``H(x, j) = +1`` (``m⁺ = (n + H c)/2``); its ones are
        ``S⁺ - Bin(S⁺, b) + Bin(n_j - S⁺, b)``: mean ``n_j b + (1 - 2b) n_j m⁺_j/n``, variance
        ``n_j b(1 - b) + (1 - 2b)² Var S⁺_j``. Zeros are ``n_j`` minus ones.
        """
        counts = np.asarray(true_counts, dtype=np.float64)
        size, n = self.num_groups, float(counts.sum())
        padded = np.zeros(size)
        padded[: self._k] = counts
        plus = (n + kernels.fwht(padded)) / 2
        j = np.arange(size)
        group = np.floor(n / size) + (j < n % size)
        b = float(self._core.probabilities()[1])
        f = plus / n if n > 0 else np.zeros(size)
        hyper = group * f * (1 - f) * (n - group) / (n - 1) if n > 1 else np.zeros(size)
        ones_mean = group * b + (1 - 2 * b) * group * f
        ones_var = group * b * (1 - b) + (1 - 2 * b) ** 2 * hyper
        mean = np.empty(2 * size)
        var = np.empty(2 * size)
        mean[1::2], mean[0::2] = ones_mean, group - ones_mean
        var[1::2] = var[0::2] = ones_var
        return mean, var
