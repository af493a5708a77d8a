//! Bindings of the heavy-hitter kernels (`ldpdist.heavy_hitters` wraps them).

use super::{run_long, slice};
use crate::heavy_hitters;
use crate::item_hash;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// `(counts, n)`: reports of group `group` supporting each candidate prefix, and the
/// group's size (`crate::heavy_hitters::pem_support`); `reports` is the byte view
/// `(n, itemsize)` of PEM's structured reports, C-contiguous.
#[pyfunction]
fn pem_support<'py>(
    py: Python<'py>,
    reports: PyReadonlyArray2<'py, u8>,
    group: u8,
    t: usize,
    g: u32,
    candidates: PyReadonlyArray1<'py, u64>,
) -> PyResult<(Bound<'py, PyArray1<u64>>, u64)> {
    if !reports.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "reports must be a C-contiguous array",
        ));
    }
    let (rows, stride) = (reports.shape()[0], reports.shape()[1]);
    let bytes = slice(&reports, "reports")?;
    let candidates = slice(&candidates, "candidates")?;
    let units = (rows as u64)
        .saturating_mul(candidates.len() as u64)
        .saturating_mul(t as u64);
    let support = run_long(py, units, || {
        heavy_hitters::pem_support(bytes, stride, group, t, g, candidates)
    })?;
    Ok((support.counts.into_pyarray(py), support.reports))
}

/// The 64-bit item hashes (version 1) of the messages `messages[offsets[i]..offsets[i + 1]]`
/// under the 32-byte `key` (`crate::item_hash::hash_messages`).
#[pyfunction]
fn hash_item_messages<'py>(
    py: Python<'py>,
    messages: &[u8],
    offsets: PyReadonlyArray1<'py, u64>,
    key: &[u8],
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let offsets = slice(&offsets, "offsets")?;
    let units = (offsets.len() as u64)
        .saturating_mul(128)
        .saturating_add(messages.len() as u64);
    let hashes = run_long(py, units, || {
        item_hash::hash_messages(messages, offsets, key)
    })?;
    Ok(hashes.into_pyarray(py))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pem_support, m)?)?;
    m.add_function(wrap_pyfunction!(hash_item_messages, m)?)?;
    Ok(())
}
