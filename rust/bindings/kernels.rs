//! Bindings of the numerical kernels (`ldpdist.kernels` wraps them).

use super::{key_from, new_filled, run, run_long, slice, to_py, InternalError};
use crate::error::Error;
use crate::hadamard;
use crate::hull;
use crate::omp::{self, DenseMatrix, OmpResult, OmpStop};
use crate::rng;
use crate::signs::{self, SignKind};
use crate::simplex;
use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyReadwriteArray1,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

// ---------------------------------------------------------------------------------------
// Hadamard

#[pyfunction]
fn fwht<'py>(
    py: Python<'py>,
    x: PyReadonlyArray1<'py, f64>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let x = slice(&x, "x")?;
    if let Some(e) = hadamard::check_power_of_two(x.len()) {
        return Err(to_py(e));
    }
    new_filled(py, x.len(), |out| {
        crate::finite::copy_finite(x, out, "x")?;
        hadamard::fwht_in_place(out);
        Ok(())
    })
}

#[pyfunction]
fn fwht_inplace(py: Python<'_>, mut x: PyReadwriteArray1<'_, f64>) -> PyResult<()> {
    let x = x
        .as_slice_mut()
        .map_err(|_| PyValueError::new_err("x must be a contiguous, writeable array"))?;
    run(py, || match hadamard::check_power_of_two(x.len()) {
        Some(e) => Err(e),
        None => {
            crate::finite::check_finite(x, "x")?;
            hadamard::fwht_in_place(x);
            Ok(())
        }
    })
}

#[pyfunction]
fn fwht_int<'py>(
    py: Python<'py>,
    x: PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let x = slice(&x, "x")?;
    let out = run(py, || {
        if let Some(e) = hadamard::check_power_of_two(x.len()) {
            return Err(e);
        }
        // |(Hx)_r| ≤ Σ|x_i|: bounding the sum bounds every intermediate value too.
        let total: u128 = x.iter().map(|v| v.unsigned_abs() as u128).sum();
        if total > i64::MAX as u128 {
            return Err(Error::Value(format!(
                "Σ|x| = {total} exceeds 2^63 − 1: the integer transform could overflow; use fwht on float64"
            )));
        }
        let mut out = x.to_vec();
        hadamard::fwht_in_place(&mut out);
        Ok(out)
    })?;
    Ok(out.into_pyarray(py))
}

// ---------------------------------------------------------------------------------------
// Simplex

#[pyfunction]
fn project_simplex<'py>(
    py: Python<'py>,
    v: PyReadonlyArray1<'py, f64>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let v = slice(&v, "v")?;
    new_filled(py, v.len(), |out| simplex::project_simplex_into(v, out))
}

#[pyfunction]
fn project_sparse_simplex<'py>(
    py: Python<'py>,
    v: PyReadonlyArray1<'py, f64>,
    s: usize,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let v = slice(&v, "v")?;
    Ok(run(py, || simplex::project_sparse_simplex(v, s))?.into_pyarray(py))
}

// ---------------------------------------------------------------------------------------
// Sign matrices

/// Bit-packed seeded ±1 matrix (see the Python wrapper `ldpdist.kernels.SignMatrix`).
#[pyclass(module = "ldpdist._core", name = "SignMatrix", frozen)]
struct PySignMatrix {
    inner: signs::SignMatrix,
}

#[pymethods]
impl PySignMatrix {
    #[new]
    fn new(py: Python<'_>, key: &[u8], m: usize, k: usize, kind: &str, p: f64) -> PyResult<Self> {
        let kind = SignKind::parse(kind, p).map_err(to_py)?;
        let key = key_from(Some(key)).map_err(to_py)?;
        let units = (m as u64).saturating_mul(k as u64);
        let inner = run_long(py, units, || signs::SignMatrix::new(key, m, k, kind))?;
        Ok(Self { inner })
    }

    #[getter]
    fn m(&self) -> usize {
        self.inner.rows()
    }
    #[getter]
    fn k(&self) -> usize {
        self.inner.cols()
    }
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind().name()
    }
    #[getter]
    fn p(&self) -> f64 {
        self.inner.kind().p()
    }
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }

    fn column<'py>(&self, py: Python<'py>, j: usize) -> PyResult<Bound<'py, PyArray1<i8>>> {
        self.check_column(j)?;
        Ok(self.inner.column(j).into_pyarray(py))
    }

    fn column_ones(&self, j: usize) -> PyResult<u32> {
        self.check_column(j)?;
        Ok(self.inner.column_ones(j))
    }

    fn to_dense<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (m, k) = (self.inner.rows(), self.inner.cols());
        let dense = run(py, || self.inner.to_dense())?;
        let array = Array2::from_shape_vec((m, k), dense)
            .map_err(|e| InternalError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py))
    }

    fn rmatvec<'py>(
        &self,
        py: Python<'py>,
        r: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let r = slice(&r, "r")?;
        self.check_length(r.len(), self.inner.rows(), "r", "m")?;
        Ok(run(py, || self.inner.rmatvec(r))?.into_pyarray(py))
    }

    fn matvec<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let x = slice(&x, "x")?;
        self.check_length(x.len(), self.inner.cols(), "x", "k")?;
        Ok(run(py, || self.inner.matvec(x))?.into_pyarray(py))
    }

    fn gram_column<'py>(&self, py: Python<'py>, j: usize) -> PyResult<Bound<'py, PyArray1<i32>>> {
        self.check_column(j)?;
        Ok(run(py, || Ok(self.inner.gram_column(j)))?.into_pyarray(py))
    }
}

impl PySignMatrix {
    fn check_column(&self, j: usize) -> PyResult<()> {
        if j >= self.inner.cols() {
            return Err(PyValueError::new_err(format!(
                "column index {j} is out of range for k = {}",
                self.inner.cols()
            )));
        }
        Ok(())
    }
    fn check_length(&self, got: usize, want: usize, what: &str, dim: &str) -> PyResult<()> {
        if got != want {
            return Err(PyValueError::new_err(format!(
                "{what} must have length {dim} = {want}, got {got}"
            )));
        }
        Ok(())
    }
}

#[pyfunction]
fn column_signs<'py>(
    py: Python<'py>,
    key: &[u8],
    m: usize,
    kind: &str,
    p: f64,
    j: u64,
) -> PyResult<Bound<'py, PyArray1<i8>>> {
    let kind = SignKind::parse(kind, p).map_err(to_py)?;
    let key = key_from(Some(key)).map_err(to_py)?;
    Ok(run(py, || signs::column_signs(&key, m, kind, j))?.into_pyarray(py))
}

// ---------------------------------------------------------------------------------------
// OMP

type OmpTuple<'py> = (
    Bound<'py, PyArray1<f64>>,
    Vec<usize>,
    f64,
    &'static str,
    f64,
);

/// The Python name of a stopping reason.
pub(super) fn stop_name(stop: OmpStop) -> &'static str {
    match stop {
        OmpStop::Sparsity => "sparsity",
        OmpStop::Tolerance => "tolerance",
        OmpStop::ExactFit => "exact_fit",
        OmpStop::Dependent => "dependent",
        OmpStop::Orthogonal => "orthogonal",
    }
}

fn omp_tuple(py: Python<'_>, result: OmpResult) -> OmpTuple<'_> {
    (
        result.coef.into_pyarray(py),
        result.support,
        result.residual_norm,
        stop_name(result.stop),
        result.intercept,
    )
}

#[pyfunction]
#[pyo3(signature = (a, y, s, tol=None, intercept=false))]
fn omp_dense<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, f64>,
    y: PyReadonlyArray1<'py, f64>,
    s: usize,
    tol: Option<f64>,
    intercept: bool,
) -> PyResult<OmpTuple<'py>> {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let row_major = a.is_c_contiguous();
    let data = slice(&a, "A")?;
    let y = slice(&y, "y")?;
    let units = (m as u64).saturating_mul(k as u64);
    let result = run_long(py, units, || {
        let dense = DenseMatrix::new(data, m, k, row_major)?;
        omp::omp_with_intercept(&dense, y, s, tol, intercept)
    })?;
    Ok(omp_tuple(py, result))
}

#[pyfunction]
#[pyo3(signature = (a, y, s, tol=None, intercept=false))]
fn omp_sign<'py>(
    py: Python<'py>,
    a: &PySignMatrix,
    y: PyReadonlyArray1<'py, f64>,
    s: usize,
    tol: Option<f64>,
    intercept: bool,
) -> PyResult<OmpTuple<'py>> {
    let y = slice(&y, "y")?;
    let units = (a.inner.rows() as u64).saturating_mul(a.inner.cols() as u64);
    let result = run_long(py, units, || {
        omp::omp_with_intercept(&a.inner, y, s, tol, intercept)
    })?;
    Ok(omp_tuple(py, result))
}

// ---------------------------------------------------------------------------------------
// Hull projection

#[pyfunction]
#[pyo3(signature = (points, y, symmetric, tol, max_iter))]
fn project_hull<'py>(
    py: Python<'py>,
    points: PyReadonlyArray2<'py, f64>,
    y: PyReadonlyArray1<'py, f64>,
    symmetric: bool,
    tol: f64,
    max_iter: usize,
) -> PyResult<(Bound<'py, PyArray1<f64>>, f64, usize, bool)> {
    let (d, j) = (points.shape()[0], points.shape()[1]);
    if !points.is_c_contiguous() {
        return Err(PyValueError::new_err("points must be a C-contiguous array"));
    }
    let data = slice(&points, "points")?;
    let y = slice(&y, "y")?;
    let units = (d as u64).saturating_mul(j as u64).saturating_mul(4);
    let result = run_long(py, units, || {
        hull::project_hull(data, d, j, y, symmetric, tol, max_iter)
    })?;
    Ok((
        result.point.into_pyarray(py),
        result.gap,
        result.iterations,
        result.converged,
    ))
}

// ---------------------------------------------------------------------------------------
// Sampling

#[pyfunction]
#[pyo3(signature = (key, n, size))]
fn sample_uniform<'py>(
    py: Python<'py>,
    key: Option<&[u8]>,
    n: u64,
    size: usize,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let key = key_from(key).map_err(to_py)?;
    Ok(run(py, || rng::sample_uniform(&key, n, size))?.into_pyarray(py))
}

#[pyfunction]
#[pyo3(signature = (key, p, size))]
fn sample_bernoulli<'py>(
    py: Python<'py>,
    key: Option<&[u8]>,
    p: f64,
    size: usize,
) -> PyResult<Bound<'py, PyArray1<bool>>> {
    let key = key_from(key).map_err(to_py)?;
    Ok(run(py, || rng::sample_bernoulli(&key, p, size))?.into_pyarray(py))
}

/// Deliberately panic inside Rust (on a worker thread when `parallel`), to test that panics
/// surface as `InternalError`.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>, parallel: bool) -> PyResult<()> {
    run(py, || -> Result<(), Error> {
        if parallel {
            use rayon::prelude::*;
            (0..1000).into_par_iter().for_each(|i| {
                if i == 999 {
                    panic!("deliberate test panic on a worker thread")
                }
            });
        }
        panic!("deliberate test panic")
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySignMatrix>()?;
    m.add_function(wrap_pyfunction!(fwht, m)?)?;
    m.add_function(wrap_pyfunction!(fwht_inplace, m)?)?;
    m.add_function(wrap_pyfunction!(fwht_int, m)?)?;
    m.add_function(wrap_pyfunction!(project_simplex, m)?)?;
    m.add_function(wrap_pyfunction!(project_sparse_simplex, m)?)?;
    m.add_function(wrap_pyfunction!(column_signs, m)?)?;
    m.add_function(wrap_pyfunction!(omp_dense, m)?)?;
    m.add_function(wrap_pyfunction!(omp_sign, m)?)?;
    m.add_function(wrap_pyfunction!(project_hull, m)?)?;
    m.add_function(wrap_pyfunction!(sample_uniform, m)?)?;
    m.add_function(wrap_pyfunction!(sample_bernoulli, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    Ok(())
}
