"""kernels.project_hull: Euclidean projection onto conv{±a_v} / conv{a_v}.

The reference is exact: for tiny d and J, every subset of at most d + 1 vertices is tried
(affine least squares on the subset, kept when its weights are ≥ 0 and it satisfies the
variational inequality over all vertices). scipy, when importable, is a second reference.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from conftest import run_python
from ldpdist import kernels as K


def vertices(A, symmetric):
    return np.concatenate([A, -A], axis=1) if symmetric else A


def exact_projection(A, y, symmetric):
    """The projection by enumeration of candidate faces (tiny d and J only)."""
    V = vertices(A, symmetric)
    d, n = V.shape
    best, best_dist = None, np.inf
    for size in range(1, min(d + 1, n) + 1):
        for subset in itertools.combinations(range(n), size):
            P = V[:, subset]
            # min ||P w - y|| subject to sum(w) = 1: parametrize w = e_0 + N t.
            base = P[:, 0]
            D = P[:, 1:] - base[:, None]
            if size > 1:
                t, *_ = np.linalg.lstsq(D, y - base, rcond=None)
                w = np.concatenate([[1 - t.sum()], t])
            else:
                w = np.ones(1)
            if (w < -1e-12).any():
                continue
            point = P @ w
            # Optimal over the whole hull: <y - point, s - point> <= 0 for every vertex s.
            if ((y - point) @ (V - point[:, None])).max() > 1e-9:
                continue
            dist = np.linalg.norm(point - y)
            if dist < best_dist:
                best, best_dist = point, dist
    assert best is not None
    return best


def random_case(rng, d, J, scale):
    A = rng.standard_normal((d, J))
    y = scale * rng.standard_normal(d)
    return A, y


SMALL = [(1, 3), (2, 4), (2, 6), (3, 5), (3, 7)]


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("d,J", SMALL)
def test_matches_the_exact_projection_and_the_gap_is_honest(d, J, symmetric):
    rng = np.random.default_rng(100 * d + J)
    for scale in (0.3, 1.0, 3.0):
        A, y = random_case(rng, d, J, scale)
        exact = exact_projection(A, y, symmetric)
        r = K.project_hull(A, y, symmetric=symmetric, tol=1e-12)
        assert r.converged and r.gap <= 1e-12
        assert np.linalg.norm(r.point - exact) <= 1e-6
        # The certificate: gap >= ||w - P(y)||^2, also for an early stop.
        early = K.project_hull(A, y, symmetric=symmetric, tol=1e-12, max_iter=1)
        assert early.gap >= np.sum((early.point - exact) ** 2) - 1e-12
        assert early.converged == (early.gap <= 1e-12)


def scipy_projection(optimize, V, y):
    """The projection as a QP over the weights, by SLSQP."""
    n = V.shape[1]
    res = optimize.minimize(
        lambda w: 0.5 * np.sum((V @ w - y) ** 2), np.full(n, 1 / n),
        jac=lambda w: V.T @ (V @ w - y), method="SLSQP", bounds=[(0, None)] * n,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1, "jac": lambda w: np.ones(n)}],
        options={"ftol": 1e-14, "maxiter": 1000})
    return V @ res.x


def test_matches_scipy_when_available():
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(5)
    for symmetric in (True, False):
        A, y = random_case(rng, 4, 12, 2.0)
        r = K.project_hull(A, y, symmetric=symmetric, tol=1e-12)
        reference = scipy_projection(optimize, vertices(A, symmetric), y)
        assert np.linalg.norm(r.point - reference) <= 1e-5
        assert np.linalg.norm(r.point - exact_projection(A, y, symmetric)) <= 1e-6


@pytest.mark.parametrize("symmetric", [True, False])
def test_variational_inequality_and_distances_on_larger_polytopes(symmetric):
    rng = np.random.default_rng(8)
    d, J = 30, 4000
    A = rng.standard_normal((d, J))
    A /= np.linalg.norm(A, axis=0)
    y = A[:, :5].mean(axis=1) + rng.normal(0, 0.3, d)
    tol = 1e-10
    r = K.project_hull(A, y, symmetric=symmetric, tol=tol)
    assert r.converged and r.gap <= tol
    V = vertices(A, symmetric)
    # <y - P, z - P> <= gap for every vertex z (the gap bounds the worst violation).
    assert ((y - r.point) @ (V - r.point[:, None])).max() <= tol
    # Projection never increases the distance to a point of the hull.
    weights = rng.dirichlet(np.full(V.shape[1], 0.05), size=200)
    Z = weights @ V.T
    assert (np.linalg.norm(r.point - Z, axis=1) <= np.linalg.norm(y - Z, axis=1) + 1e-9).all()
    # The point is in the hull (the symmetric hull is larger, so it is at least as close).
    if symmetric:
        r_plain = K.project_hull(A, y, symmetric=False, tol=tol)
        assert np.linalg.norm(r.point - y) <= np.linalg.norm(r_plain.point - y) + 1e-9


def test_inside_the_hull_returns_y():
    rng = np.random.default_rng(9)
    A = rng.standard_normal((6, 50))
    y = A @ rng.dirichlet(np.ones(50))
    for symmetric in (True, False):
        r = K.project_hull(A, y, symmetric=symmetric, tol=1e-12)
        assert r.converged
        assert np.linalg.norm(r.point - y) <= 1e-6
    # y = 0 lies in every symmetric hull.
    r = K.project_hull(A, np.zeros(6), symmetric=True, tol=1e-12)
    assert np.linalg.norm(r.point) <= 1e-6


def test_identity_without_negatives_is_the_simplex_projection():
    rng = np.random.default_rng(10)
    for k in (1, 2, 7, 40):
        v = rng.normal(0, 1, k)
        r = K.project_hull(np.eye(k), v, symmetric=False, tol=1e-14)
        assert np.allclose(r.point, K.project_simplex(v), atol=1e-7)


def test_symmetric_identity_is_the_l1_ball():
    r = K.project_hull(np.eye(2), np.array([1.0, 1.0]), symmetric=True, tol=1e-14)
    assert np.allclose(r.point, [0.5, 0.5], atol=1e-7)
    r = K.project_hull(np.eye(2), np.array([1.0, 1.0]), symmetric=False, tol=1e-14)
    assert np.allclose(r.point, [0.5, 0.5], atol=1e-7)
    r = K.project_hull(np.eye(2), np.array([-2.0, 0.5]), symmetric=True, tol=1e-14)
    assert np.allclose(r.point, [-1.0, 0.0], atol=1e-7)
    r = K.project_hull(np.eye(2), np.array([-2.0, 0.5]), symmetric=False, tol=1e-14)
    assert np.allclose(r.point, [0.0, 1.0], atol=1e-7)


def test_degenerate_inputs():
    # J = 1: the single vertex (or the segment [-a, a]).
    a = np.array([[1.0], [2.0]])
    r = K.project_hull(a, np.array([5.0, 5.0]), symmetric=False)
    assert np.allclose(r.point, [1.0, 2.0]) and r.converged
    r = K.project_hull(a, np.array([0.5, 1.0]), symmetric=True)
    assert np.allclose(r.point, [0.5, 1.0], atol=1e-6)
    # Duplicate and zero columns.
    A = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    r = K.project_hull(A, np.array([2.0, 2.0]), symmetric=False, tol=1e-14)
    assert np.allclose(r.point, exact_projection(A, np.array([2.0, 2.0]), False), atol=1e-7)
    # d = 1: an interval.
    r = K.project_hull(np.array([[-1.0, 3.0, 2.0]]), np.array([7.0]), symmetric=False)
    assert np.allclose(r.point, [3.0])
    r = K.project_hull(np.array([[-1.0, 0.5]]), np.array([-7.0]), symmetric=True)
    assert np.allclose(r.point, [-1.0])
    # Non-C-contiguous input is copied, with the same answer.
    rng = np.random.default_rng(11)
    B = rng.standard_normal((5, 30))
    y = 3 * rng.standard_normal(5)
    assert np.array_equal(K.project_hull(np.asfortranarray(B), y).point, K.project_hull(B, y).point)
    assert np.array_equal(K.project_hull(B.T.copy().T, y).point, K.project_hull(B, y).point)


def test_non_convergence_is_reported():
    rng = np.random.default_rng(3)
    d, J = 10, 200
    A = rng.standard_normal((d, J))
    A /= np.linalg.norm(A, axis=0)
    y = 0.5 * A[:, :d].mean(axis=1)  # inside: the corral needs d + 1 vertices
    r = K.project_hull(A, y, tol=1e-12, max_iter=1)
    assert not r.converged and r.iterations == 1 and r.gap > 1e-12
    full = K.project_hull(A, y, tol=1e-12)
    assert full.converged and full.iterations > 1
    assert r.gap >= np.sum((r.point - full.point) ** 2)


DETERMINISM = """
import json
from ldpdist import kernels as K
rng = np.random.default_rng(4)
A = rng.standard_normal((25, 30000)); A /= np.linalg.norm(A, axis=0)
out = []
for y in (A[:, :5].mean(axis=1) + rng.normal(0, 0.3, 25), 0.5 * A[:, :25].mean(axis=1)):
    for symmetric in (True, False):
        r = K.project_hull(A, y, symmetric=symmetric, tol=1e-11)
        out.append([digest(r.point), r.gap.hex(), r.iterations, r.converged])
print(json.dumps(out))
"""


def test_bit_identical_on_1_2_4_threads():
    runs = {t: json.loads(run_python(DETERMINISM, env={"RAYON_NUM_THREADS": str(t)}))
            for t in (1, 2, 4)}
    assert runs[1] == runs[2] == runs[4]
    assert all(converged for *_, converged in runs[1])


def test_bad_input_messages():
    A = np.ones((2, 3))
    y = np.zeros(2)
    cases = [
        ({"points": A.astype(np.float32), "y": y}, TypeError, "float64"),
        ({"points": np.ones(3), "y": y}, ValueError, "two-dimensional"),
        ({"points": np.ones((0, 3)), "y": np.zeros(0)}, ValueError, "at least one row"),
        ({"points": np.ones((2, 0)), "y": y}, ValueError, "at least one row"),
        ({"points": A, "y": np.zeros(3)}, ValueError, "length 3"),
        ({"points": A, "y": np.array([0.0, np.nan])}, ValueError, "y must be finite"),
        ({"points": A, "y": y, "tol": 0.0}, ValueError, "tol"),
        ({"points": A, "y": y, "tol": float("inf")}, ValueError, "tol"),
        ({"points": A, "y": y, "max_iter": 0}, ValueError, "max_iter"),
        ({"points": A, "y": y, "max_iter": 1.5}, TypeError, "max_iter"),
        ({"points": A, "y": y, "symmetric": "yes"}, TypeError, "symmetric"),
    ]
    for kwargs, error, words in cases:
        with pytest.raises(error, match=words):
            K.project_hull(**kwargs)
    bad = A.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"points must be finite: element \(1, 2\) is inf"):
        K.project_hull(bad, y)
    # Lists are converted.
    r = K.project_hull([[1.0, 0.0], [0.0, 1.0]], [2.0, 2.0], symmetric=False)
    assert np.allclose(r.point, [0.5, 0.5], atol=1e-4)


def test_buffers_go_through_the_memory_guard():
    import ldpdist

    rng = np.random.default_rng(12)
    A = rng.standard_normal((50, 400))
    y = rng.standard_normal(50)
    ldpdist.set_memory_limit(10_000)
    try:
        with pytest.raises(MemoryError, match="projection onto the hull"):
            K.project_hull(A, y)  # the working set and Cholesky factor (Rust)
        with pytest.raises(MemoryError, match="C-order copy"):
            K.project_hull(np.asfortranarray(A), y)
    finally:
        ldpdist.set_memory_limit(None)
    assert K.project_hull(A, y).converged
