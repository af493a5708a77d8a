"""Orthogonal matching pursuit on dense matrices and on packed SignMatrix."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_python
from ldpdist import kernels as K

M, KCOLS, S = 200, 2000, 10


def sparse_vector(seed: int, k: int, s: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(k)
    support = rng.choice(k, size=s, replace=False)
    x[support] = rng.uniform(0.5, 1.5, size=s) * rng.choice([-1.0, 1.0], size=s)
    return x


def lstsq_refit(D: np.ndarray, y: np.ndarray, support) -> np.ndarray:
    coef = np.zeros(D.shape[1])
    if len(support):
        sol, *_ = np.linalg.lstsq(D[:, support], y, rcond=None)
        coef[list(support)] = sol
    return coef


@pytest.fixture(scope="module")
def problems():
    """(A, D, x, y_clean, y_noisy) for 20 seeds."""
    out = []
    for seed in range(20):
        A = K.SignMatrix(seed, M, KCOLS)
        D = A.to_dense()
        x = sparse_vector(1000 + seed, KCOLS, S)
        y = A.matvec(x)
        noise = np.random.default_rng(5000 + seed).standard_normal(M) * 0.05
        out.append((A, D, x, y, y + noise))
    return out


def test_noiseless_recovery_on_both_paths(problems):
    for seed, (A, D, x, y, _) in enumerate(problems):
        want_support = set(np.nonzero(x)[0].tolist())
        packed = K.omp_details(A, y, S)
        dense = K.omp_details(D, y, S)
        for result in (packed, dense):
            assert set(result.support) == want_support, seed
            assert len(result.support) == S
            np.testing.assert_allclose(result.coef, x, rtol=0, atol=1e-9)
            assert result.coef.dtype == np.float64 and result.coef.shape == (KCOLS,)
            assert result.residual_norm <= 1e-9
            assert result.stop in ("sparsity", "exact_fit")
        assert packed.support == dense.support  # same greedy order
        np.testing.assert_allclose(packed.coef, dense.coef, rtol=0, atol=1e-9)
        np.testing.assert_array_equal(K.omp(A, y, S), packed.coef)
        np.testing.assert_array_equal(K.omp(D, y, S), dense.coef)


def test_result_is_the_least_squares_refit_on_its_support(problems):
    for A, D, x, y, y_noisy in problems[:8]:
        for target in (y, y_noisy):
            for matrix in (A, D):
                result = K.omp_details(matrix, target, S)
                refit = lstsq_refit(D, target, result.support)
                np.testing.assert_allclose(result.coef, refit, rtol=0, atol=1e-9)
                assert np.count_nonzero(result.coef) <= len(result.support)
                off = np.ones(KCOLS, bool)
                off[result.support] = False
                assert (result.coef[off] == 0).all()
                resid = np.linalg.norm(target - D @ result.coef)
                assert abs(result.residual_norm - resid) <= 1e-9 * max(1.0, resid)


def test_first_atom_is_the_most_correlated_column(problems):
    for A, D, x, y, y_noisy in problems[:5]:
        for target in (y, y_noisy):
            corr = np.abs(D.T @ target)
            assert K.omp_details(A, target, S).support[0] == int(np.argmax(corr))
            assert K.omp_details(D, target, 1).support == [int(np.argmax(corr))]


def test_noisy_dense_and_sign_paths_agree(problems):
    for seed, (A, D, x, _, y_noisy) in enumerate(problems):
        packed = K.omp_details(A, y_noisy, S)
        dense = K.omp_details(D, y_noisy, S)
        assert packed.support == dense.support, seed
        np.testing.assert_allclose(packed.coef, dense.coef, rtol=0, atol=1e-9)
        assert abs(packed.residual_norm - dense.residual_norm) <= 1e-9
        assert packed.stop == dense.stop == "sparsity"
        assert len(packed.support) == S
        # Noise this small still lets OMP find the true support.
        assert set(packed.support) == set(np.nonzero(x)[0].tolist())


@pytest.mark.parametrize("kind, p", [("bernoulli", 0.3), ("balanced", 0.5), ("balanced", 0.2)])
def test_other_sign_kinds_agree_with_the_dense_path(kind, p):
    for seed in range(4):
        A = K.SignMatrix(seed, 150, 1200, kind, p)
        D = A.to_dense()
        x = sparse_vector(seed, 1200, 6)
        y = D @ x + 0.01 * np.random.default_rng(seed).standard_normal(150)
        packed = K.omp_details(A, y, 8)
        dense = K.omp_details(D, y, 8)
        assert packed.support == dense.support
        np.testing.assert_allclose(packed.coef, dense.coef, rtol=0, atol=1e-9)
        np.testing.assert_allclose(packed.coef, lstsq_refit(D, y, packed.support),
                                   rtol=0, atol=1e-9)


def test_tolerance_stops_early(problems):
    A, D, x, _, _ = problems[0]
    noise = np.random.default_rng(77).standard_normal(M) * 0.01
    y = A.matvec(x) + noise
    tol = 1.5 * float(np.linalg.norm(noise))
    full = K.omp_details(A, y, 50)
    for matrix in (A, D):
        early = K.omp_details(matrix, y, 50, tol=tol)
        assert early.stop == "tolerance"
        assert early.residual_norm <= tol
        assert len(early.support) < 50
        assert set(early.support) == set(np.nonzero(x)[0].tolist())
        assert early.support == full.support[:len(early.support)]  # same greedy path
    # A tolerance above ||y|| stops before the first atom.
    loose = K.omp_details(A, y, 50, tol=float(np.linalg.norm(y)) + 1.0)
    assert loose.stop == "tolerance" and loose.support == []
    assert (loose.coef == 0).all()
    assert loose.residual_norm == pytest.approx(np.linalg.norm(y), rel=1e-12)
    # tol = 0 is allowed and behaves like no tolerance on noisy data.
    zero = K.omp_details(A, y, 12, tol=0.0)
    assert zero.support == full.support[:12] and zero.stop == "sparsity"


def test_exact_fit_stops_with_fewer_atoms_than_s():
    A = K.SignMatrix(5, 64, 300)
    D = A.to_dense()
    x = sparse_vector(6, 300, 3)
    y = A.matvec(x)
    for matrix in (A, D, np.asfortranarray(D)):
        run = K.omp_details(matrix, y, 20)
        assert run.stop == "exact_fit"
        assert len(run.support) == 3
        assert set(run.support) == set(np.nonzero(x)[0].tolist())
        np.testing.assert_allclose(run.coef, x, rtol=0, atol=1e-12)
        assert run.residual_norm <= 1e-12 * np.linalg.norm(y)
    # y = 0: nothing to explain.
    for matrix in (A, D):
        zero = K.omp_details(matrix, np.zeros(64), 5)
        assert zero.support == [] and zero.stop == "exact_fit" and (zero.coef == 0).all()


def test_stop_reasons_match_their_documentation():
    # "exact_fit" means the residual is at rounding level (<= 1e-12 * ||y||). When y is
    # orthogonal to every column, OMP cannot pick any atom, but the residual is ||y||, so
    # the run must not claim an exact fit.
    D = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    y = np.array([0.0, 0.0, 5.0])
    run = K.omp_details(D, y, 2)
    assert run.support == [] and run.residual_norm == pytest.approx(5.0)
    assert run.stop == "orthogonal", (
        f"stop={run.stop!r} with residual_norm={run.residual_norm} (||y|| = 5)")
    # Same on the packed path: a 2-row sign matrix and y orthogonal to its only column.
    A = K.SignMatrix(0, 2, 1)
    col = A.column(0).astype(np.float64)
    y2 = np.array([col[1], -col[0]])
    run = K.omp_details(A, y2, 1)
    assert run.support == []
    assert run.stop == "orthogonal", (
        f"stop={run.stop!r} with residual_norm={run.residual_norm} (||y|| = {np.sqrt(2)})")


def test_dependent_atoms_stop_the_run():
    # Column 2 duplicates column 0 up to scale; once column 0 is in, column 2 adds nothing.
    rng = np.random.default_rng(3)
    D = rng.standard_normal((10, 4))
    D[:, 2] = 2.0 * D[:, 0]
    y = 3 * D[:, 0] + 0.001 * rng.standard_normal(10)
    run = K.omp_details(D, y, 4)
    assert run.support[0] == 2  # largest |correlation| (twice the norm of column 0)
    # With s = 4 the run wants all columns; after 1, 2, 3 only column 0 is left, and it lies
    # in the span of column 2.
    assert sorted(run.support) == [1, 2, 3]
    assert run.stop == "dependent"
    assert run.coef[0] == 0.0
    refit = lstsq_refit(D, y, run.support)
    np.testing.assert_allclose(D @ run.coef, D @ refit, rtol=0, atol=1e-9)


def test_fortran_and_c_order_agree():
    A = K.SignMatrix(8, 30, 50, "bernoulli", 0.3)
    D = A.to_dense()
    y = np.sin(np.arange(30.0))
    rng = np.random.default_rng(4)
    G = rng.standard_normal((40, 120)) * rng.uniform(0.5, 3.0, size=120)  # unequal norms
    yg = rng.standard_normal(40)
    for C, target, s in [(D, y, 5), (G, yg, 15)]:
        F = np.asfortranarray(C)
        assert F.flags.f_contiguous and not F.flags.c_contiguous
        rc = K.omp_details(np.ascontiguousarray(C), target, s)
        rf = K.omp_details(F, target, s)
        assert rc.support == rf.support
        np.testing.assert_allclose(rc.coef, rf.coef, rtol=0, atol=1e-12)
        assert rc.stop == rf.stop
        np.testing.assert_allclose(rc.coef, lstsq_refit(C, target, rc.support),
                                   rtol=0, atol=1e-10)
    # Non-contiguous views are accepted too.
    big = np.random.default_rng(5).standard_normal((40, 240))
    view = big[:, ::2]
    assert not (view.flags.c_contiguous or view.flags.f_contiguous)
    a = K.omp_details(view, yg, 10)
    b = K.omp_details(np.ascontiguousarray(view), yg, 10)
    assert a.support == b.support
    np.testing.assert_allclose(a.coef, b.coef, rtol=0, atol=1e-12)


def test_agrees_with_scikit_learn(problems):
    linear_model = pytest.importorskip("sklearn.linear_model")
    for A, D, x, _, y_noisy in problems[:10]:
        ours = K.omp_details(D, y_noisy, S)
        theirs = linear_model.orthogonal_mp(D, y_noisy, n_nonzero_coefs=S)
        assert set(ours.support) == set(np.nonzero(theirs)[0].tolist())
        np.testing.assert_allclose(ours.coef, theirs, rtol=0, atol=1e-9)
        np.testing.assert_allclose(K.omp(A, y_noisy, S), theirs, rtol=0, atol=1e-9)
    # A Gaussian matrix with unequal column norms (columns are not renormalized, as in
    # scikit-learn), larger noise.
    rng = np.random.default_rng(11)
    G = rng.standard_normal((100, 400)) * rng.uniform(0.2, 5.0, size=400)
    for trial in range(5):
        y = G @ sparse_vector(trial, 400, 8) + 0.5 * rng.standard_normal(100)
        ours = K.omp(G, y, 12)
        theirs = linear_model.orthogonal_mp(G, y, n_nonzero_coefs=12)
        np.testing.assert_array_equal(np.nonzero(ours)[0], np.nonzero(theirs)[0])
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
        with_tol = linear_model.orthogonal_mp(G, y, tol=float(np.linalg.norm(y)) ** 2 / 4)
        ours_tol = K.omp(G, y, 100, tol=float(np.linalg.norm(y)) / 2)
        # scikit-learn's tol is on the squared residual norm.
        np.testing.assert_allclose(ours_tol, with_tol, rtol=0, atol=1e-9)


_THREADS_SNIPPET = """
from ldpdist import kernels as K
A = K.SignMatrix(12, 200, 3000)
D = A.to_dense()
y = np.cos(np.arange(200.0)) * 3.0
for matrix in (A, D, np.asfortranarray(D)):
    r = K.omp_details(matrix, y, 25)
    print(digest(r.coef), r.support, r.stop, repr(r.residual_norm))
"""


def test_results_do_not_depend_on_the_thread_count():
    outs = [run_python(_THREADS_SNIPPET, env={"RAYON_NUM_THREADS": t}) for t in ("1", "2")]
    assert outs[0] == outs[1]
    assert len(outs[0].strip().splitlines()) == 3


def test_bad_inputs():
    A = K.SignMatrix(1, 10, 20)
    D = A.to_dense()
    y = np.ones(10)
    for matrix in (A, D):
        with pytest.raises(ValueError, match="y has length 9"):
            K.omp(matrix, np.ones(9), 2)
        with pytest.raises(ValueError, match="s must be"):
            K.omp(matrix, y, 0)
        with pytest.raises(ValueError, match="s must be"):
            K.omp(matrix, y, 11)  # > min(m, k) = 10
        with pytest.raises(ValueError, match="s must be"):
            K.omp(matrix, y, -1)
        with pytest.raises(TypeError, match="s must be an integer"):
            K.omp(matrix, y, 2.0)
        with pytest.raises(ValueError, match="tol"):
            K.omp(matrix, y, 2, tol=-1.0)
        with pytest.raises(ValueError, match="tol"):
            K.omp(matrix, y, 2, tol=float("nan"))
        with pytest.raises(TypeError, match="tol"):
            K.omp(matrix, y, 2, tol="1")
        bad = y.copy()
        bad[3] = np.nan
        with pytest.raises(ValueError, match="element 3"):
            K.omp(matrix, bad, 2)
        bad[3] = np.inf
        with pytest.raises(ValueError, match="element 3"):
            K.omp(matrix, bad, 2)
        with pytest.raises(TypeError, match="float64"):
            K.omp(matrix, np.ones(10, dtype=np.int64), 2)
        with pytest.raises(ValueError, match="one-dimensional"):
            K.omp(matrix, np.ones((10, 1)), 2)
    # s may reach min(m, k) from both sides.
    K.omp(D[:, :5], y, 5)
    with pytest.raises(ValueError, match="s must be"):
        K.omp(D[:, :5], y, 6)
    with pytest.raises(TypeError, match="float64"):
        K.omp(D.astype(np.int64), y, 2)
    with pytest.raises(TypeError, match="float64"):
        K.omp(D.astype(np.float32), y, 2)
    with pytest.raises(ValueError, match="two-dimensional"):
        K.omp(D[:, 0].copy(), y, 1)
    with pytest.raises(ValueError, match="two-dimensional"):
        K.omp(D[None], y, 1)
    with pytest.raises(TypeError):
        K.omp(D.tolist(), y, 2)
    with pytest.raises(TypeError):
        K.omp(None, y, 2)
    bad_a = D.copy()
    bad_a[4, 7] = np.nan
    with pytest.raises(ValueError, match=r"A must be finite: element \(4, 7\)"):
        K.omp(bad_a, y, 2)
    bad_a[4, 7] = -np.inf
    with pytest.raises(ValueError, match="finite"):
        K.omp(np.asfortranarray(bad_a), y, 2)


def test_intercept_recovers_a_sparse_vector_plus_a_constant():
    # Bernoulli(0.3) columns are far from orthogonal to the all-ones vector, so a constant
    # offset biases plain OMP; with intercept=True it is fitted exactly.
    m, k, s = 150, 1000, 8
    for seed in range(5):
        A = K.SignMatrix(seed, m, k, "bernoulli", 0.3)
        rng = np.random.default_rng(seed)
        x = np.zeros(k)
        x[rng.choice(k, s, replace=False)] = rng.uniform(0.5, 1.5, s)
        y = A.matvec(x) + 0.4
        for matrix in (A, A.to_dense()):
            run = K.omp_details(matrix, y, s, intercept=True)
            np.testing.assert_allclose(run.coef, x, atol=1e-10)
            assert run.intercept == pytest.approx(0.4, abs=1e-10)
            assert run.residual_norm < 1e-9
        np.testing.assert_allclose(K.omp(A, y, s, intercept=True), run.coef, atol=1e-12)
        assert np.abs(K.omp(A, y, s) - x).max() > 1e-3
        assert K.omp_details(A, y, s).intercept == 0.0
