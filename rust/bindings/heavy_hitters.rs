//! Bindings of the heavy-hitter kernels (`ldpdist.heavy_hitters` wraps them).

use super::{run, run_long, slice};
use crate::heavy_hitters::{self, CollisionCells};
use crate::item_hash;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
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

/// The collision operator's cells (`crate::heavy_hitters::CollisionCells`):
/// `CollisionCells(flat, g)` with `flat` the C-contiguous `(R, C)` int64 array of cell
/// indices `r * g + h_r(x)`, or `CollisionCells.level_hash(prefixes, keys, g)` (TreeHist)
/// and `CollisionCells.sketch_hash(values, salts, m)` (count-mean sketch) computing them;
/// `shared_sums(v)` is `sum_r B[r, h_r(x)]` (`B` the cell sums of v) and `gather(table)`
/// is `sum_r table[r * g + h_r(x)]`, bit-identical to `np.bincount` then
/// `table.take(flat).sum(axis=0)`.
#[pyclass(module = "ldpdist._core", name = "CollisionCells", frozen)]
struct PyCollisionCells {
    inner: CollisionCells,
}

#[pymethods]
impl PyCollisionCells {
    #[new]
    fn new(py: Python<'_>, flat: PyReadonlyArray2<'_, i64>, g: usize) -> PyResult<Self> {
        if !flat.is_c_contiguous() {
            return Err(PyValueError::new_err("flat must be a C-contiguous array"));
        }
        let rows = flat.shape()[0];
        let cells = slice(&flat, "flat")?;
        let inner = run_long(py, cells.len() as u64, || {
            CollisionCells::new(cells, rows, g)
        })?;
        Ok(Self { inner })
    }

    #[staticmethod]
    fn level_hash(
        py: Python<'_>,
        prefixes: PyReadonlyArray1<'_, u64>,
        keys: PyReadonlyArray1<'_, u64>,
        g: usize,
    ) -> PyResult<Self> {
        let (prefixes, keys) = (slice(&prefixes, "prefixes")?, slice(&keys, "keys")?);
        let units = (prefixes.len() as u64).saturating_mul(keys.len() as u64);
        let inner = run_long(py, units, || {
            CollisionCells::from_level_hash(prefixes, keys, g)
        })?;
        Ok(Self { inner })
    }

    #[staticmethod]
    fn sketch_hash(
        py: Python<'_>,
        values: PyReadonlyArray1<'_, u64>,
        salts: PyReadonlyArray1<'_, u64>,
        m: usize,
    ) -> PyResult<Self> {
        let (values, salts) = (slice(&values, "values")?, slice(&salts, "salts")?);
        let units = (values.len() as u64).saturating_mul(salts.len() as u64);
        let inner = run_long(py, units, || {
            CollisionCells::from_sketch_hash(values, salts, m)
        })?;
        Ok(Self { inner })
    }

    #[getter]
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    #[getter]
    fn candidates(&self) -> usize {
        self.inner.candidates()
    }
    #[getter]
    fn g(&self) -> usize {
        self.inner.g()
    }
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }

    /// `(R, C)` int64: the cell indices `r * g + h_r(x)` (tests, diagnostics).
    fn flat<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<i64>>> {
        let (rows, c, g) = (self.inner.rows(), self.inner.candidates(), self.inner.g());
        crate::memory::check_fits(rows * c, 8, "the cell indices").map_err(super::to_py)?;
        let mut out = Vec::with_capacity(rows * c);
        for r in 0..rows {
            out.extend((0..c).map(|x| (r * g + self.inner.bucket(r, x)) as i64));
        }
        let array = numpy::ndarray::Array2::from_shape_vec((rows, c), out)
            .map_err(|e| super::InternalError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py))
    }

    fn shared_sums<'py>(
        &self,
        py: Python<'py>,
        v: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let v = slice(&v, "v")?;
        Ok(run(py, || self.inner.shared_sums(v))?.into_pyarray(py))
    }

    fn gather<'py>(
        &self,
        py: Python<'py>,
        table: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let table = slice(&table, "table")?;
        Ok(run(py, || self.inner.gather(table))?.into_pyarray(py))
    }
}

/// The flipped bits of `users` count-mean-sketch reports of m bits, `(users, ceil(m / 64))`
/// uint64 flattened, each bit 1 with probability `f / 2^bits`, from the 32-byte `key`;
/// `first_user` a multiple of `FLIP_BLOCK` (`crate::heavy_hitters::cms_flip_words`).
#[pyfunction]
fn cms_flip_words<'py>(
    py: Python<'py>,
    key: &[u8],
    first_user: u64,
    users: usize,
    m: usize,
    f: u64,
    bits: u32,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let key = super::key_from(Some(key)).map_err(super::to_py)?;
    let units = (users as u64).saturating_mul(m as u64);
    let words = run_long(py, units, || {
        heavy_hitters::cms_flip_words(&key, first_user, users, m, f, bits)
    })?;
    Ok(words.into_pyarray(py))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CMS_FLIP_BLOCK", heavy_hitters::FLIP_BLOCK)?;
    m.add_function(wrap_pyfunction!(cms_flip_words, m)?)?;
    m.add_class::<PyCollisionCells>()?;
    m.add_function(wrap_pyfunction!(pem_support, m)?)?;
    m.add_function(wrap_pyfunction!(hash_item_messages, m)?)?;
    Ok(())
}
