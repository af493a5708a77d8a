//! PyO3 bindings for `ldpdist._core`: type and error translation only.
//!
//! Every entry point releases the GIL for its work and runs it under `catch_unwind`, so a
//! Rust panic surfaces as `ldpdist.InternalError` (a `RuntimeError`) instead of aborting or
//! raising PyO3's `PanicException` (a `BaseException` that `except Exception` misses).
//! Argument validation with user-facing messages lives in the Python layer; the checks here
//! are the last line of defence and raise the same exception classes.

mod kernels;
mod mechanisms;

use crate::error::Error;
use crate::rng::{self, Key};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

create_exception!(
    _core,
    InternalError,
    PyRuntimeError,
    "An internal error of ldpdist (a bug: please report it with the message)."
);

pub(crate) fn to_py(err: Error) -> PyErr {
    match err {
        Error::Value(m) => PyValueError::new_err(m),
        Error::Type(m) => PyTypeError::new_err(m),
        Error::Memory(m) => PyMemoryError::new_err(m),
        Error::Runtime(m) => PyRuntimeError::new_err(m),
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Run `work` without the GIL; errors and panics become Python exceptions.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    py.detach(|| catch_unwind(AssertUnwindSafe(work)))
        .map_err(|p| {
            InternalError::new_err(format!(
                "internal error in ldpdist (please report): {}",
                panic_message(p)
            ))
        })?
        .map_err(to_py)
}

pub(crate) fn slice<'a, T: numpy::Element, D: numpy::ndarray::Dimension>(
    a: &'a numpy::PyReadonlyArray<'_, T, D>,
    what: &str,
) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{what} must be a contiguous array")))
}

/// A fresh numpy float64 array of length `n` (numpy's allocator, which asks the OS for huge
/// pages on large arrays), filled by `fill` without the GIL.
pub(crate) fn new_filled<'py>(
    py: Python<'py>,
    n: usize,
    fill: impl FnOnce(&mut [f64]) -> Result<(), Error> + Send,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    crate::memory::check_fits(n, 8, "the result").map_err(to_py)?;
    // SAFETY: the array is new and not shared yet; `fill` writes every element, and on error
    // the array is dropped without being exposed.
    let out = unsafe { PyArray1::<f64>::new(py, [n], false) };
    let slice = unsafe { out.as_slice_mut() }.map_err(|e| InternalError::new_err(e.to_string()))?;
    run(py, || fill(slice))?;
    Ok(out)
}

pub(crate) fn key_from(seed: Option<&[u8]>) -> Result<Key, Error> {
    match seed {
        None => rng::key_from_os(),
        Some(bytes) => bytes
            .try_into()
            .map_err(|_| Error::Value(format!("a key is 32 bytes, got {}", bytes.len()))),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InternalError", m.py().get_type::<InternalError>())?;
    m.add("SAMPLE_CHUNK", rng::SAMPLE_CHUNK)?;
    kernels::register(m)?;
    mechanisms::register(m)?;
    Ok(())
}
