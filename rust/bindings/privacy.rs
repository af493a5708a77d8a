//! Bindings of the exact privacy verifier (`ldpdist.privacy` wraps them).

use super::{c_order, run_long, InternalError};
use crate::privacy;
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// `(amount, (x, x', y) or None)`: the worst violation of E-LDP (`privacy::verify`).
#[pyfunction]
fn privacy_verify(
    py: Python<'_>,
    q: PyReadonlyArray2<'_, f64>,
    budgets: PyReadonlyArray2<'_, f64>,
) -> PyResult<(f64, Option<(usize, usize, usize)>)> {
    let (q, k, outputs) = c_order(&q, "Q")?;
    let (e, rows, cols) = c_order(&budgets, "budgets")?;
    if rows != k || cols != k {
        return Err(PyValueError::new_err(format!(
            "budgets must be {k} × {k} (one row per input), got shape ({rows}, {cols})"
        )));
    }
    let units = (k as u64)
        .saturating_mul(k as u64)
        .saturating_mul(outputs as u64);
    let v = run_long(py, units, || privacy::verify(q, k, outputs, e))?;
    Ok((v.amount, v.triple))
}

/// The k × k realized budget matrix of a channel (`privacy::realized_budgets`).
#[pyfunction]
fn privacy_realized_budgets<'py>(
    py: Python<'py>,
    q: PyReadonlyArray2<'py, f64>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (q, k, outputs) = c_order(&q, "Q")?;
    let units = (k as u64)
        .saturating_mul(k as u64)
        .saturating_mul(outputs as u64);
    let out = run_long(py, units, || privacy::realized_budgets(q, k, outputs))?;
    // The vector becomes the array's buffer (no copy).
    let array =
        Array2::from_shape_vec((k, k), out).map_err(|e| InternalError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(privacy_verify, m)?)?;
    m.add_function(wrap_pyfunction!(privacy_realized_budgets, m)?)?;
    Ok(())
}
