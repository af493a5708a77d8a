//! Bindings of the linear-query kernels (`ldpdist.linear` wraps them).

use super::{c_order, key_from, run_long, slice, to_py, InternalError};
use crate::linear::{gaussian, rejection, sensitivity};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// `(Δ2, (v, v'))`: the exact diameter of the columns (J × d, one column per row), by the
/// certified search (`linear::sensitivity`), without a limit on its work.
#[pyfunction]
fn linear_sensitivity(
    py: Python<'_>,
    columns: PyReadonlyArray2<'_, f64>,
) -> PyResult<(f64, (usize, usize))> {
    let (columns, j, d) = c_order(&columns, "the columns")?;
    let units = (j as u64).saturating_mul(d as u64).saturating_mul(64);
    let diameter = run_long(py, units, || sensitivity::diameter(columns, j, d))?;
    Ok((diameter.value, diameter.pair))
}

/// `(Δ2, (v, v'))` by the O(J² d) scan of every pair (the reference the search reproduces;
/// for tests and benchmarks).
#[pyfunction]
fn linear_sensitivity_scan(
    py: Python<'_>,
    columns: PyReadonlyArray2<'_, f64>,
) -> PyResult<(f64, (usize, usize))> {
    let (columns, j, d) = c_order(&columns, "the columns")?;
    let units = (j as u64).saturating_mul(j as u64).saturating_mul(d as u64) / 2;
    let diameter = run_long(py, units, || sensitivity::scan(columns, j, d))?;
    Ok((diameter.value, diameter.pair))
}

/// A prepared diameter search (`linear::sensitivity::Search`), run in parts from Python so
/// that it can show progress and be refused on its estimate before it starts.
#[pyclass(module = "ldpdist._core", name = "LinearDiameterSearch", frozen)]
struct PyDiameterSearch {
    inner: sensitivity::Search,
}

#[pymethods]
impl PyDiameterSearch {
    /// Prepare the search of the columns (J × d): O(J log J · d).
    #[new]
    fn new(py: Python<'_>, columns: PyReadonlyArray2<'_, f64>) -> PyResult<Self> {
        let (columns, j, d) = c_order(&columns, "the columns")?;
        let units = (j as u64).saturating_mul(d as u64).saturating_mul(64);
        let inner = run_long(py, units, || sensitivity::Search::new(columns, j, d))?;
        Ok(Self { inner })
    }

    /// Query points: `run(start, stop)` covers `0..len`.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Distance evaluations the whole search will make (module documentation of
    /// `linear::sensitivity`); with `limit`, at least `limit` once it is known to exceed it.
    #[pyo3(signature = (limit=None))]
    fn estimate(&self, py: Python<'_>, limit: Option<u64>) -> PyResult<u64> {
        let units = (self.inner.len() as u64).saturating_mul(64);
        run_long(py, units, || self.inner.estimate(limit))
    }

    /// Search from the query points `start..stop`; `max_work` stops the search with a
    /// `ValueError` once its total work passes it.
    #[pyo3(signature = (start, stop, max_work=None))]
    fn run(
        &self,
        py: Python<'_>,
        start: usize,
        stop: usize,
        max_work: Option<u64>,
    ) -> PyResult<()> {
        run_long(py, u64::MAX, || self.inner.run(start, stop, max_work))
    }

    /// Distance evaluations made so far.
    #[getter]
    fn work(&self) -> u64 {
        self.inner.work()
    }

    /// `(Δ2, (v, v'))` once every query point has been searched.
    fn result(&self) -> PyResult<(f64, (usize, usize))> {
        let diameter = self.inner.result().map_err(to_py)?;
        Ok((diameter.value, diameter.pair))
    }
}

/// An n × d float64 array filled by `fill` without the GIL (memory guard first).
fn new_reports<'py>(
    py: Python<'py>,
    n: usize,
    d: usize,
    fill: impl FnOnce(&mut [f64]) -> Result<(), crate::error::Error> + Send,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let total = n
        .checked_mul(d)
        .ok_or_else(|| pyo3::exceptions::PyMemoryError::new_err("n·d overflows"))?;
    crate::memory::check_fits(total, 8, "the reports").map_err(to_py)?;
    // SAFETY: the array is new and not shared; `fill` writes every element, and on error
    // the array is dropped without being exposed.
    let out = unsafe { PyArray2::<f64>::new(py, [n, d], false) };
    let buffer =
        unsafe { out.as_slice_mut() }.map_err(|e| InternalError::new_err(e.to_string()))?;
    run_long(py, total as u64, || fill(buffer))?;
    Ok(out)
}

/// Gaussian protocol reports `a_{v_i} + N(0, σ² I)` (n × d).
#[pyfunction]
fn linear_gaussian_privatize<'py>(
    py: Python<'py>,
    columns: PyReadonlyArray2<'py, f64>,
    values: PyReadonlyArray1<'py, u32>,
    sigma: f64,
    key: Option<&[u8]>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (columns, j, d) = c_order(&columns, "the columns")?;
    let values = slice(&values, "values")?;
    let key = key_from(key).map_err(to_py)?;
    new_reports(py, values.len(), d, |out| {
        gaussian::privatize(columns, j, d, sigma, &key, values, out)
    })
}

/// The rejection protocol's acceptance rule: band b, log scale ln κ, clipped or as printed.
fn rejection_rule(band: f64, log_scale: f64, paper_faithful: bool) -> PyResult<rejection::Rule> {
    let form = if paper_faithful {
        rejection::Acceptance::PaperFaithful
    } else {
        rejection::Acceptance::Clipped
    };
    rejection::Rule::new(band, log_scale, form).map_err(to_py)
}

/// Rejection-sampling reports (n × d; ⊥ rows are NaN): accepted with probability
/// `exp(clip(t, −band, band) + log_scale)` (as printed: `exp(t + log_scale)` inside the band,
/// 0 outside).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn linear_rejection_privatize<'py>(
    py: Python<'py>,
    columns: PyReadonlyArray2<'py, f64>,
    values: PyReadonlyArray1<'py, u32>,
    sigma: f64,
    band: f64,
    log_scale: f64,
    paper_faithful: bool,
    key: Option<&[u8]>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (columns, j, d) = c_order(&columns, "the columns")?;
    let values = slice(&values, "values")?;
    let key = key_from(key).map_err(to_py)?;
    let rule = rejection_rule(band, log_scale, paper_faithful)?;
    new_reports(py, values.len(), d, |out| {
        rejection::privatize(columns, j, d, sigma, &rule, &key, values, out)
    })
}

/// `α_v(y)` of the rejection protocol for each output row y (m × d): an m × J array.
#[pyfunction]
fn linear_acceptance<'py>(
    py: Python<'py>,
    columns: PyReadonlyArray2<'py, f64>,
    outputs: PyReadonlyArray2<'py, f64>,
    sigma: f64,
    band: f64,
    log_scale: f64,
    paper_faithful: bool,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (columns, j, d) = c_order(&columns, "the columns")?;
    let (outputs, m, width) = c_order(&outputs, "outputs")?;
    if width != d {
        return Err(PyValueError::new_err(format!(
            "outputs must have d = {d} columns"
        )));
    }
    let rule = rejection_rule(band, log_scale, paper_faithful)?;
    let units = (m as u64).saturating_mul(j as u64).saturating_mul(d as u64);
    let out = run_long(py, units, || {
        rejection::acceptance_matrix(columns, j, d, sigma, &rule, outputs)
    })?;
    let array = numpy::ndarray::Array2::from_shape_vec((m, j), out)
        .map_err(|e| InternalError::new_err(e.to_string()))?;
    Ok(numpy::IntoPyArray::into_pyarray(array, py))
}

/// `(mean, rows averaged)` of reports (n × d); `skip_bottom` leaves out all-NaN (⊥) rows.
#[pyfunction]
fn linear_mean<'py>(
    py: Python<'py>,
    reports: PyReadonlyArray2<'py, f64>,
    skip_bottom: bool,
) -> PyResult<(Bound<'py, PyArray1<f64>>, u64)> {
    let (reports, _, d) = c_order(&reports, "reports")?;
    let (mean, count) = run_long(py, reports.len() as u64, || {
        gaussian::mean(reports, d, skip_bottom)
    })?;
    Ok((PyArray1::from_vec(py, mean), count))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("LINEAR_REPORT_CHUNK", gaussian::REPORT_CHUNK)?;
    m.add_function(wrap_pyfunction!(linear_sensitivity, m)?)?;
    m.add_function(wrap_pyfunction!(linear_sensitivity_scan, m)?)?;
    m.add_class::<PyDiameterSearch>()?;
    m.add_function(wrap_pyfunction!(linear_gaussian_privatize, m)?)?;
    m.add_function(wrap_pyfunction!(linear_rejection_privatize, m)?)?;
    m.add_function(wrap_pyfunction!(linear_mean, m)?)?;
    m.add_function(wrap_pyfunction!(linear_acceptance, m)?)?;
    Ok(())
}
