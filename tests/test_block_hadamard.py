"""BlockHadamardResponse (Acharya, Bonawitz, Kairouz, Ramage, Sun, "Context-Aware Local
Differential Privacy", ICML 2020, Section 6.1; docs page Mechanisms › Context-aware LDP,
docs/mechanisms/context-aware.md): exact block-structured privacy over a grid of partitions, the output layout, exact
unbiasedness, the variance formula, bound (24), specs, the command line and bad input.
The shared contract suite (tests/test_mechanisms.py) runs it too, on the partition
``suite_blocks(k)`` (sizes 1, 2, 3, …)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ldpdist
from conftest import run_python
from ldpdist import cli, privacy
from simulation_law import assert_simulate_is_exact_in_law

BHR = ldpdist.BlockHadamardResponse

# (name, blocks): sizes and label forms, singletons, one block, non-contiguous blocks.
PARTITIONS = [
    ("one block", [7]),
    ("one block of 16", [16]),
    ("sizes with singletons", [1, 2, 1, 3, 5]),
    ("equal sizes", [4, 4, 4]),
    ("labels, contiguous", [0, 0, 1, 1, 1, 2]),
    ("labels, interleaved", [0, 1, 0, 2, 1, 0, 3, 1]),
    ("labels, singleton inside", [1, 0, 1, 2, 1, 1]),
    ("two values", [2]),
]
PARTITION_IDS = [name for name, _ in PARTITIONS]
EPSILONS = [0.1, 0.5, 1.0, 2.0, 5.0, 20.0]


def exact_output_distribution(mech, p):
    """``p @ Q``: the law of one report of a user drawn from p."""
    return p @ mech.channel_matrix()


def estimator_weights(mech):
    """``W[x, y]``: the raw estimate is ``p̂_x = Σ_y W[x, y] N_y / n`` (from the channel
    layout alone, not from the mechanism's decoder): ``c·H(i + 1, y − offset_j)`` on the
    outputs of x's block, ``1`` on a singleton's output."""
    q = float(mech._core.probabilities()[1])
    c = 1.0 / (1.0 - 2.0 * q)
    W = np.zeros((mech.k, mech.output_size))
    offsets, outputs = mech.block_offsets.astype(int), mech.block_outputs.astype(int)
    index = np.zeros(mech.k, dtype=int)
    seen = np.zeros(mech.num_blocks, dtype=int)
    for x, j in enumerate(mech.labels):
        index[x] = seen[j]
        seen[j] += 1
    for x, j in enumerate(mech.labels):
        if outputs[j] == 1:
            W[x, offsets[j]] = 1.0
            continue
        cols = np.arange(outputs[j])
        signs = 1 - 2 * (np.array([bin((index[x] + 1) & c_).count("1") for c_ in cols]) % 2)
        W[x, offsets[j] + cols] = c * signs
    return W


# -- privacy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, blocks", PARTITIONS, ids=PARTITION_IDS)
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_channel_satisfies_the_block_budgets_exactly(name, blocks, epsilon):
    mech = BHR(blocks, epsilon)
    Q = mech.channel_matrix()
    assert Q.shape == (mech.k, mech.output_size)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    E = mech.budgets()
    np.testing.assert_array_equal(E, privacy.block_budgets(blocks, epsilon))
    violation = privacy.verify(Q, E)
    assert violation.satisfied(tolerance=1e-12), violation
    # Exactly ε' = ln((1 − q)/q) ≤ ε within a block, nothing shared across blocks.
    realized = mech.realized_budgets()
    np.testing.assert_allclose(realized, privacy.realized_budgets(Q), rtol=0, atol=1e-12)
    labels = privacy.block_labels(blocks)
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(mech.k, dtype=bool)
    assert np.isinf(realized[~same]).all()
    assert np.allclose(realized[same & off], mech.realized_epsilon, rtol=0, atol=0)
    # q is the float of 1/(e^ε' + 1) for ε' = ε − 2^-46·max(ε, 1), raised by 8 ulps
    assert epsilon - 2e-14 * max(epsilon, 1) <= mech.realized_epsilon <= epsilon
    # The block is in the clear: an output has positive probability under one block only.
    blocks_of_output = [set(labels[Q[:, y] > 0]) for y in range(mech.output_size)]
    assert all(len(b) == 1 for b in blocks_of_output)
    # Plain ε-LDP fails across blocks (unless there is one block).
    if mech.num_blocks > 1:
        assert not privacy.verify(Q, privacy.uniform_budgets(mech.k, epsilon)).satisfied()


@pytest.mark.parametrize("k", [2, 7, 16, 100])
@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_one_block_is_plain_high_privacy_hadamard_response(k, epsilon):
    """One block: the same layout as HR with B = 1 (K = 2^⌈log2(k+1)⌉, symbol x on row x + 1)
    and the same channel up to the rounding of the probabilities (HR rounds its inside
    probability down, BHR its flip probability up: both stay ≤ ε)."""
    mech, hr = BHR([k], epsilon), ldpdist.HadamardResponse(k, epsilon, blocks=1)
    assert mech.output_size == hr.output_size == hr.construction[2]
    np.testing.assert_allclose(mech.channel_matrix(), hr.channel_matrix(), rtol=1e-13, atol=0)
    np.testing.assert_array_equal(mech.budgets(), privacy.uniform_budgets(k, epsilon))
    assert mech.realized_epsilon == pytest.approx(hr.realized_epsilon, rel=1e-13)
    # HR's decoder on BHR's reports gives the same estimate (up to the rounding); they are
    # BHR's, so counting them as HR's is declared: the tag stripped, then HR's claimed.
    reports = mech.privatize(np.arange(k).repeat(50), seed=3)
    with pytest.raises(ldpdist.SpecMismatchError):
        hr.estimate(reports, "raw")
    np.testing.assert_allclose(mech.estimate(reports, "raw"),
                               hr.estimate(hr.as_reports(np.asarray(reports)), "raw"),
                               rtol=1e-12, atol=1e-12)


def test_realized_budgets_are_closed_form_and_guarded():
    mech = BHR([0, 1, 1, 0, 2, 2, 2], 1.0)
    E = mech.realized_budgets()
    assert E.shape == (7, 7) and (np.diag(E) == 0).all()
    assert E[0, 3] == E[1, 2] == mech.realized_epsilon and np.isinf(E[0, 1])
    big = BHR([2**15, 2**15], 1.0)
    ldpdist.set_memory_limit("64M")
    try:
        with pytest.raises(MemoryError, match="budget matrix"):
            big.realized_budgets()  # 2^32 entries: refused before allocating
    finally:
        ldpdist.set_memory_limit(None)


# -- layout ----------------------------------------------------------------------------------


def test_output_layout_and_split_reports():
    mech = BHR([3, 1, 5, 2], 1.0)
    assert mech.block_outputs.tolist() == [4, 1, 8, 4]
    assert mech.block_offsets.tolist() == [0, 4, 5, 13]
    assert mech.output_size == 17 <= 2 * mech.k
    assert mech.labels.tolist() == [0, 0, 0, 1, 2, 2, 2, 2, 2, 3, 3]
    assert mech.block_sizes.tolist() == [3, 1, 5, 2] and mech.num_blocks == 4
    values = np.arange(11).repeat(20)
    reports = mech.privatize(values, seed=1)
    assert reports.dtype == np.uint8
    block, position = mech.split_reports(reports)
    np.testing.assert_array_equal(block, mech.labels[values])  # the block is in the clear
    assert (position < mech.block_outputs[block]).all()
    assert (reports[values == 3] == 4).all()  # the singleton, without noise
    # Every possible report of a value is where its channel row is positive.
    Q = mech.channel_matrix()
    assert (Q[values, reports] > 0).all()
    with pytest.raises(ValueError, match=r"\[0, 17\)"):
        mech.split_reports(mech.as_reports([17]))


def test_every_value_uses_row_i_plus_1_of_its_block():
    mech = BHR([0, 1, 0, 1, 1, 0], 2.0)  # block 0 = {0, 2, 5}, block 1 = {1, 3, 4}
    Q = mech.channel_matrix()
    inside = Q.max()
    for x, (j, i) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2)]):
        offset = int(mech.block_offsets[j])
        row = Q[x, offset:offset + 4]
        plus = [bin((i + 1) & c).count("1") % 2 == 0 for c in range(4)]
        assert [v == inside for v in row] == plus


# -- estimation ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, blocks", PARTITIONS, ids=PARTITION_IDS)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_raw_estimate_is_exactly_unbiased(name, blocks, epsilon):
    mech = BHR(blocks, epsilon)
    p = np.random.default_rng(len(blocks)).dirichlet(np.ones(mech.k))
    freq = exact_output_distribution(mech, p)
    np.testing.assert_allclose(mech._expected_frequencies(p), freq, rtol=0, atol=1e-15)
    np.testing.assert_allclose(mech._core.estimate_from_frequencies(freq), p, rtol=0,
                               atol=1e-13)
    # The decoder is the linear map of eq. (23) (weights from the layout alone).
    W = estimator_weights(mech)
    np.testing.assert_allclose(W @ freq, p, rtol=0, atol=1e-12)
    counts = np.random.default_rng(1).integers(0, 1000, mech.output_size).astype(np.uint64)
    n = int(counts.sum())
    np.testing.assert_allclose(mech._core.estimate_raw(counts, n), W @ counts / n, rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("name, blocks", PARTITIONS, ids=PARTITION_IDS)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_variance_formula_is_the_exact_variance(name, blocks, epsilon):
    """``(c² p(block) − p_x²)/n`` (``p_x(1 − p_x)/n`` for a singleton) against the variance
    of the estimator's per-report weights under the exact output law."""
    mech = BHR(blocks, epsilon)
    p = np.random.default_rng(7).dirichlet(np.full(mech.k, 0.7))
    freq = exact_output_distribution(mech, p)
    W = estimator_weights(mech)
    exact = (W ** 2) @ freq - (W @ freq) ** 2
    np.testing.assert_allclose(mech.estimator_variance(p, 1), exact, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(mech.estimator_variance(p, 1000), exact / 1000, rtol=1e-12)


@pytest.mark.parametrize("blocks, epsilon, n", [
    ([1, 2, 3, 4, 10], 1.0, 20_000),
    ([0, 1, 2] * 6 + [1, 1], 0.5, 50_000),
    ([30, 30, 30], 2.0, 200_000),
])
def test_monte_carlo_variance_equals_the_formula(blocks, epsilon, n):
    """400 simulated aggregates (exact in law) of n users drawn from p; per value the sample
    variance of the raw estimate matches the formula within 5 standard errors of a sample
    variance (√(2/(R − 1))·σ², the estimates being near-normal at these n), and the mean
    ratio over the k values within 6 standard errors of a mean of k such ratios (the
    estimates of distinct values are nearly uncorrelated: Cov = −p_x p_x'/n)."""
    runs = 400
    mech = BHR(blocks, epsilon)
    p = np.random.default_rng(3).dirichlet(np.ones(mech.k))
    rng = np.random.default_rng(4)
    estimates = np.array([mech.simulate(rng.multinomial(n, p), seed=s).estimate("raw")
                          for s in range(runs)])
    formula = mech.estimator_variance(p, n)
    sample = estimates.var(axis=0, ddof=1)
    ratio = sample / formula
    se = math.sqrt(2 / (runs - 1))
    assert (np.abs(ratio - 1) < 5 * se).all(), np.round(ratio, 3)
    assert abs(ratio.mean() - 1) < 6 * se / math.sqrt(mech.k), ratio.mean()
    np.testing.assert_allclose(estimates.mean(axis=0), p, atol=5 * np.sqrt(formula / runs).max())


def test_monte_carlo_variance_of_privatized_reports_equals_the_formula():
    """The same through privatize (real reports, 200 runs of 20 000 users of fixed values:
    a fixed-composition sample, whose variance is Σ over users of each user's variance)."""
    mech = BHR([0, 1, 0, 1, 2, 2, 0, 3, 3, 3], 1.0)
    counts = np.array([3000, 1000, 2500, 500, 2000, 4000, 1000, 2000, 3000, 1000])
    n, runs = counts.sum(), 200
    values = np.repeat(np.arange(mech.k), counts)
    estimates = np.array([mech.estimate(mech.privatize(values, seed=s), "raw")
                          for s in range(runs)])
    # Per user holding v: Var(w_x(Y)) under Q(·|v); the estimate is the mean over users.
    Q, W = mech.channel_matrix(), estimator_weights(mech)
    per_value = (W ** 2) @ Q.T - (W @ Q.T) ** 2  # [x, v]
    exact = per_value @ counts / n**2
    ratio = estimates.var(axis=0, ddof=1) / exact
    assert (np.abs(ratio - 1) < 5 * math.sqrt(2 / (runs - 1))).all(), np.round(ratio, 3)
    np.testing.assert_allclose(estimates.mean(axis=0), counts / n,
                               atol=5 * np.sqrt(exact / runs).max())


@pytest.mark.parametrize("blocks, epsilon, n", [
    ([10] * 10, 1.0, 10_000),
    ([10] * 10, 1.0, 1_000_000),
    ([1, 2, 3, 4, 5, 6, 7, 8, 64], 0.5, 100_000),
    ([0, 1] * 50, 2.0, 50_000),
])
def test_mean_l1_error_is_below_bound_24(blocks, epsilon, n):
    mech = BHR(blocks, epsilon)
    rng = np.random.default_rng(n)
    errors = []
    for run in range(20):
        p = rng.dirichlet(np.ones(mech.k))
        agg = mech.simulate(rng.multinomial(n, p), seed=run)
        errors.append(np.abs(agg.estimate("raw") - p).sum())
    bound = mech.l1_bound(n)
    c = (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    assert bound == pytest.approx(2 * c * math.sqrt(3 * np.sum(mech.block_sizes**2) / n),
                                  rel=1e-12)
    assert np.mean(errors) < bound, (np.mean(errors), bound)


def test_equal_blocks_beat_plain_ldp_by_about_the_square_root_of_m():
    """Theorem 4: with m equal blocks the ℓ2 error is about √m below plain HR's at the same
    ε (one block of k) — here m = 16, k = 256, ε = 1: measured ratio ≈ 4."""
    k, m, n, epsilon = 256, 16, 200_000, 1.0
    blocks, plain = BHR([k // m] * m, epsilon), BHR([k], epsilon)
    rng = np.random.default_rng(5)
    ratios = []
    for run in range(10):
        p = rng.dirichlet(np.ones(k))
        counts = rng.multinomial(n, p)
        e_blocks = np.linalg.norm(blocks.simulate(counts, seed=run).estimate("raw") - p)
        e_plain = np.linalg.norm(plain.simulate(counts, seed=run).estimate("raw") - p)
        ratios.append(e_plain / e_blocks)
    assert 2.5 < np.mean(ratios) < 6.0, ratios


@pytest.mark.parametrize("blocks", [[0, 1, 0, 2, 1, 2, 2, 0, 1], [1, 3, 5]])
def test_simulate_is_exact_in_law_for_label_partitions(blocks):
    mech = BHR(blocks, 0.8)
    assert_simulate_is_exact_in_law(mech, [3, 0, 70_000, 5, 1, 0, 200, 9, 66_000])


def test_label_partitions_are_bit_identical_at_1_and_2_threads():
    code = """
        import ldpdist
        m = ldpdist.BlockHadamardResponse([x % 5 + (x % 7 == 0) for x in range(5000)], 1.0)
        v = np.arange(300_000) % 5000
        r = m.privatize(v, seed=4)
        agg = m.aggregator().add(r)
        sim = m.simulate(np.bincount(v, minlength=5000) * 1000, seed=5)
        print(digest(r), digest(agg.counts), digest(sim.counts), digest(agg.estimate("ibu", max_iter=30)))
    """
    outs = {run_python(code, env={"RAYON_NUM_THREADS": t}, timeout=300) for t in ("1", "2")}
    assert len(outs) == 1


# -- specs -----------------------------------------------------------------------------------


def test_one_partition_has_one_spec_and_fingerprint():
    sizes = BHR([2, 3], 1.0)
    labels = BHR([0, 0, 1, 1, 1], 1.0)
    assert sizes == labels and sizes.fingerprint == labels.fingerprint
    assert labels.to_dict() == {"mechanism": "BlockHadamardResponse", "format": 1,
                                "blocks": [2, 3], "epsilon": 1.0}
    assert labels.contiguous and hash(sizes) == hash(labels)
    interleaved = BHR(np.array([0, 1, 0, 1, 1]), 1.0)
    assert not interleaved.contiguous
    assert interleaved.to_dict()["blocks"] == [0, 1, 0, 1, 1]
    assert interleaved != sizes
    # Block numbering is part of the mechanism (it is the output layout).
    assert BHR([1, 1, 0, 0, 0], 1.0) != sizes
    for mech in (sizes, interleaved):
        again = ldpdist.from_dict(json.loads(json.dumps(mech.to_dict())))
        assert again == mech and again.fingerprint == mech.fingerprint
        np.testing.assert_array_equal(again.labels, mech.labels)
    assert ldpdist.from_dict({**sizes.to_dict(), "k": 5}) == sizes
    with pytest.raises(ValueError, match="add up to k = 6"):
        ldpdist.from_dict({**sizes.to_dict(), "k": 6})
    assert repr(sizes) == "BlockHadamardResponse(blocks=[2, 3], epsilon=1.0)"
    many = BHR([x % 40 for x in range(1000)], 1.0)
    assert "(1000 labels)" in repr(many) and len(repr(many)) < 120


def test_files_round_trip(tmp_path):
    mech = BHR([0, 1, 0, 1, 2, 2, 2], 1.5)
    reports = mech.privatize(np.arange(7).repeat(30), seed=2)
    path = tmp_path / "r.ldpr"
    ldpdist.write_reports(path, mech, reports)
    batch = ldpdist.read_reports(path, expect=mech)
    agg = mech.aggregator().add(batch)
    again = ldpdist.Aggregator.from_bytes(agg.to_bytes())
    assert again.mechanism == mech
    np.testing.assert_array_equal(again.estimate("raw"), mech.estimate(reports, "raw"))
    other = BHR([0, 1, 0, 1, 2, 2, 1], 1.5)
    with pytest.raises(ldpdist.SpecMismatchError):
        ldpdist.read_reports(path, expect=other)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("blocks, kwargs, error, match", [
    ([3, 4], {"k": 8}, ValueError, "add up to k = 8"),            # not covering [0, k)
    ([0, 1, 1], {"k": 4}, ValueError, "one entry per input"),      # labels of another k
    ([[0, 1], [1, 2]], {}, ValueError, "1-D"),                      # overlapping member lists
    ([[0, 1], [2]], {}, TypeError, "blocks"),                       # ragged member lists
    ([3, 0, 2], {}, ValueError, "label 1 is unused"),               # an empty block (a 0 …)
    ([3, -1], {}, ValueError, "no empty blocks"),                   # … or a size < 1
    ([0, 2, 2, 0], {}, ValueError, "label 1 is unused"),            # a label gap
    ([0, -1, 1], {}, ValueError, "≥ 0"),
    ([], {}, ValueError, "non-empty"),
    ([1.5, 2.5], {}, TypeError, "integers"),
    ("0,1", {}, TypeError, "integers"),
    ([True, False], {}, TypeError, "integers"),
    ([1], {}, ValueError, "at least 2 values"),
    ([0], {}, ValueError, "at least 2 values"),
    ([1, 1, 1], {}, ValueError, "every block is a singleton"),     # nothing to protect
    ([0, 1, 2, 3], {}, ValueError, "every block is a singleton"),
    ([2**31, 2**31, 1], {}, ValueError, "2\\^32"),
    ([3, 4], {"k": 7.0}, TypeError, "k"),
])
def test_bad_partitions_are_refused(blocks, kwargs, error, match):
    with pytest.raises(error, match=match):
        BHR(blocks, 1.0, **kwargs)


@pytest.mark.parametrize("epsilon", [0, -1.0, float("nan"), float("inf"), 1e-300])
def test_bad_epsilons_are_refused(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        BHR([3, 4], epsilon)


def test_large_partitions_ask_the_memory_guard_first():
    ldpdist.set_memory_limit("64M")
    try:
        with pytest.raises(MemoryError, match="budget"):
            BHR([2**31, 2**31], 1.0)  # 2^32 labels: refused before np.repeat
    finally:
        ldpdist.set_memory_limit(None)


# -- command line ----------------------------------------------------------------------------


def run_cli(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_spec_and_deployment(tmp_path, capsys):
    status, out, err = run_cli(capsys, "spec", "bhr", "--epsilon", 1, "--block-sizes",
                               "10,10,80")
    assert status == 0, err
    mech = ldpdist.from_dict(json.loads(out))
    assert mech == BHR([10, 10, 80], 1.0) and mech.k == 100
    status, out, _ = run_cli(capsys, "spec", "BlockHadamardResponse", "--epsilon", 1,
                             "--block-sizes", "10, 10, 80", "--k", 100)
    assert status == 0 and ldpdist.from_dict(json.loads(out)) == mech
    # Labels from a text file and from a .npy file.
    labels = np.array([0, 1, 0, 2, 1, 2, 2, 0])
    (tmp_path / "labels.txt").write_text("\n".join(map(str, labels)) + "\n")
    np.save(tmp_path / "labels.npy", labels)
    spec = tmp_path / "spec.json"
    for source in ("labels.txt", "labels.npy"):
        status, _, err = run_cli(capsys, "spec", "bhr", "--epsilon", 0.5, "--block-labels",
                                 tmp_path / source, "-o", spec, "--force")
        assert status == 0, err
        assert ldpdist.from_dict(json.loads(spec.read_text())) == BHR(labels, 0.5)
    # The file flow gives the API's estimate with the same seed.
    values = np.arange(8).repeat(40)
    (tmp_path / "values.txt").write_text("\n".join(map(str, values)) + "\n")
    assert run_cli(capsys, "privatize", "--spec", spec, tmp_path / "values.txt", "--seed", 3,
                   "-o", tmp_path / "r.ldpr")[0] == 0
    assert run_cli(capsys, "aggregate", "--spec", spec, tmp_path / "r.ldpr", "-o",
                   tmp_path / "a.ldps")[0] == 0
    status, out, _ = run_cli(capsys, "estimate", "--spec", spec, tmp_path / "a.ldps",
                             "--decoder", "raw")
    assert status == 0
    got = np.array([float(line.split(",")[1]) for line in out.splitlines()[1:]])
    mech = BHR(labels, 0.5)
    np.testing.assert_array_equal(got, mech.estimate(mech.privatize(values, seed=3), "raw"))


@pytest.mark.parametrize("argv, match", [
    (["bhr", "--epsilon", 1], "exactly one of --block-sizes"),
    (["bhr", "--epsilon", 1, "--block-sizes", "2,3", "--block-labels", "x"], "exactly one"),
    (["bhr", "--epsilon", 1, "--block-sizes", "2;3"], "comma-separated integers"),
    (["bhr", "--epsilon", 1, "--block-sizes", "2,x"], "comma-separated integers"),
    (["bhr", "--epsilon", 1, "--block-sizes", "2,3", "--k", 6], "add up to k = 6"),
    (["bhr", "--epsilon", 1, "--block-sizes", "1,1"], "every block is a singleton"),
    (["bhr", "--block-sizes", "2,3"], "needs --epsilon"),
    (["bhr", "--epsilon", 0, "--block-sizes", "2,3"], "epsilon"),
    (["bhr", "--epsilon", 1, "--block-labels", "/nonexistent/labels.txt"], "does not exist"),
    (["hr", "--k", 10, "--epsilon", 1, "--block-sizes", "5,5"], "--block-sizes does not apply"),
    (["hr", "--epsilon", 1], "needs --k"),
])
def test_cli_spec_errors(capsys, argv, match):
    status, _, err = run_cli(capsys, "spec", *argv)
    assert status == 2 and len(err.splitlines()) == 1 and match in err, err


def test_cli_bad_label_files(tmp_path, capsys):
    (tmp_path / "gap.txt").write_text("0\n2\n2\n")
    (tmp_path / "words.txt").write_text("0\ncity\n")
    (tmp_path / "empty.txt").write_text("\n")
    np.save(tmp_path / "floats.npy", np.array([0.0, 1.0]))
    for name, match in [("gap.txt", "label 1 is unused"), ("words.txt", "line 2"),
                        ("empty.txt", "holds no labels"), ("floats.npy", "integer array")]:
        status, _, err = run_cli(capsys, "spec", "bhr", "--epsilon", 1, "--block-labels",
                                 tmp_path / name)
        assert status == 2 and match in err, err


def test_the_hr_blocks_option_is_unchanged(capsys):
    status, out, _ = run_cli(capsys, "spec", "hr", "--k", 50, "--epsilon", 3, "--blocks", 2)
    assert status == 0
    assert ldpdist.from_dict(json.loads(out)) == ldpdist.HadamardResponse(50, 3.0, blocks=2)
