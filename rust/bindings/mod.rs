//! PyO3 bindings for `ldpdist._core`: type and error translation only.
//!
//! Every entry point releases the GIL for its work and runs it under `catch_unwind`, so a
//! Rust panic surfaces as `ldpdist.InternalError` (a `RuntimeError`) instead of aborting or
//! raising PyO3's `PanicException` (a `BaseException` that `except Exception` misses).
//! Argument validation with user-facing messages lives in the Python layer; the checks here
//! are the last line of defence and raise the same exception classes.

mod adaptive;
mod heavy_hitters;
mod kernels;
mod linear;
mod mechanisms;
mod privacy;

use crate::error::Error;
use crate::interrupt;
use crate::rng::{self, Key};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{
    PyKeyboardInterrupt, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

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
        Error::Interrupted => PyKeyboardInterrupt::new_err("interrupted"),
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

type Caught<T> = std::thread::Result<Result<T, Error>>;

/// The Python result of a computation; `pending` is the exception a signal handler raised
/// meanwhile (Ctrl-C's `KeyboardInterrupt`): it wins even when the work completed, because
/// the handler has consumed the signal and dropping its exception would lose the Ctrl-C.
fn finish<T>(outcome: Caught<T>, pending: Option<PyErr>) -> PyResult<T> {
    match (outcome, pending) {
        (Err(payload), _) => Err(InternalError::new_err(format!(
            "internal error in ldpdist (please report): {}",
            panic_message(payload)
        ))),
        (Ok(_), Some(err)) => Err(err),
        (Ok(Err(e)), None) => Err(to_py(e)),
        (Ok(Ok(value)), None) => Ok(value),
    }
}

/// Run short `work` without the GIL; errors and panics become Python exceptions.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    finish(py.detach(|| catch_unwind(AssertUnwindSafe(work))), None)
}

/// Elementary operations above which [`run_long`] watches for Ctrl-C (a few milliseconds of
/// work; below it the helper thread would cost more than it could save).
const LONG_WORK: u64 = 1 << 22;

/// Long calls running now; the interruption flag is cleared when the last one ends.
static LONG_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Run `work` (about `units` elementary operations) without the GIL on a helper thread while
/// this thread checks for signals every 50 ms: a signal handler that raises (Ctrl-C's
/// `KeyboardInterrupt`) requests an interruption (`crate::interrupt`), the work stops at its
/// next check, and the handler's exception is raised here. Signals reach Python only on the
/// main thread, so this is what makes Ctrl-C work while Rust computes.
pub(crate) fn run_long<T: Send>(
    py: Python<'_>,
    units: u64,
    work: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    if units < LONG_WORK {
        return run(py, work);
    }
    let mut pending: Option<PyErr> = None;
    let outcome = py.detach(|| {
        LONG_CALLS.fetch_add(1, Ordering::SeqCst);
        let waiter = std::thread::current();
        // Set by the worker before it wakes the waiter: `is_finished` turns true only once the
        // thread has exited, later than the wake-up, and waiting on it would cost a full period.
        let done = AtomicBool::new(false);
        let outcome = std::thread::scope(|scope| {
            let worker = scope.spawn(|| {
                let outcome = catch_unwind(AssertUnwindSafe(work));
                done.store(true, Ordering::Release);
                waiter.unpark();
                outcome
            });
            while !done.load(Ordering::Acquire) {
                std::thread::park_timeout(Duration::from_millis(50));
                if pending.is_none() && !done.load(Ordering::Acquire) {
                    if let Err(err) = Python::attach(|py| py.check_signals()) {
                        pending = Some(err);
                        interrupt::request();
                    }
                }
            }
            worker.join().unwrap_or_else(Err)
        });
        if LONG_CALLS.fetch_sub(1, Ordering::SeqCst) == 1 {
            interrupt::clear();
        }
        outcome
    });
    finish(outcome, pending)
}

/// A 2-D float64 array as its row-major data and shape, without a copy (C order only: the
/// Python layer makes a contiguous copy first when it needs one).
pub(crate) fn c_order<'a>(
    a: &'a numpy::PyReadonlyArray2<'_, f64>,
    what: &str,
) -> PyResult<(&'a [f64], usize, usize)> {
    use numpy::PyUntypedArrayMethods;
    if !a.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} must be a C-contiguous array"
        )));
    }
    Ok((slice(a, what)?, a.shape()[0], a.shape()[1]))
}

pub(crate) fn slice<'a, T: numpy::Element, D: numpy::ndarray::Dimension>(
    a: &'a numpy::PyReadonlyArray<'_, T, D>,
    what: &str,
) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        let aligned = (a.data() as usize) % std::mem::align_of::<T>() == 0;
        PyValueError::new_err(if aligned {
            format!("{what} must be a contiguous array")
        } else {
            // numpy arrays viewing a foreign buffer (e.g. handed over by Dask) can start at
            // an address that is not a multiple of the element size
            format!(
                "{what} must be aligned to its {}-byte elements (copy it first, e.g. with \
                 numpy.require(a, requirements='A'))",
                std::mem::align_of::<T>()
            )
        })
    })
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
    run_long(py, n as u64, || fill(slice))?;
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

/// Set (`limit` bytes) or remove (`None`) the explicit memory limit (`crate::memory`).
#[pyfunction]
#[pyo3(signature = (limit))]
fn set_memory_limit(limit: Option<u64>) {
    crate::memory::set_limit(limit);
}

/// Bytes in a text such as `"2G"` (the grammar of `LDPDIST_MAX_MEMORY`), or `None`.
#[pyfunction]
fn parse_byte_count(text: &str) -> Option<u64> {
    crate::memory::parse_bytes(text)
}

/// `(bytes, source)`: the budget a large request gets now, and where it comes from.
#[pyfunction]
fn memory_budget() -> PyResult<(u64, String)> {
    let budget = crate::memory::current_budget().map_err(to_py)?;
    Ok((budget.bytes, budget.source))
}

/// Check an operation's buffers (`[(part, bytes)]`) against the budget: `MemoryError` when
/// they do not fit. The Python layer declares its own large arrays through this.
#[pyfunction]
#[pyo3(signature = (what, parts, hint=None))]
fn check_memory(what: &str, parts: Vec<(String, u64)>, hint: Option<String>) -> PyResult<()> {
    let mut footprint = crate::memory::Footprint::new(what);
    for (part, bytes) in parts {
        footprint = footprint.add(part, bytes, 1);
    }
    if let Some(hint) = hint {
        footprint = footprint.hint(hint);
    }
    footprint.check().map_err(to_py)
}

/// The shared rule on realized privacy (`mechanisms::check_realized`).
#[pyfunction]
fn check_realized(name: &str, epsilon: f64, realized: f64) -> PyResult<()> {
    crate::mechanisms::check_realized(name, epsilon, realized).map_err(to_py)
}

/// Sleep in interruptible slices for `seconds` (tests of Ctrl-C handling).
#[pyfunction]
fn _interruptible_sleep_for_tests(py: Python<'_>, seconds: f64) -> PyResult<()> {
    run_long(py, u64::MAX, || {
        let end = std::time::Instant::now() + Duration::from_secs_f64(seconds.max(0.0));
        while std::time::Instant::now() < end {
            interrupt::check()?;
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    })
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InternalError", m.py().get_type::<InternalError>())?;
    m.add("SAMPLE_CHUNK", rng::SAMPLE_CHUNK)?;
    m.add("MAX_EPSILON", crate::mechanisms::MAX_EPSILON)?;
    m.add("REALIZED_TOLERANCE", crate::mechanisms::REALIZED_TOLERANCE)?;
    m.add_function(wrap_pyfunction!(set_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory_budget, m)?)?;
    m.add_function(wrap_pyfunction!(parse_byte_count, m)?)?;
    m.add_function(wrap_pyfunction!(check_memory, m)?)?;
    m.add_function(wrap_pyfunction!(check_realized, m)?)?;
    m.add_function(wrap_pyfunction!(_interruptible_sleep_for_tests, m)?)?;
    kernels::register(m)?;
    mechanisms::register(m)?;
    privacy::register(m)?;
    linear::register(m)?;
    adaptive::register(m)?;
    heavy_hitters::register(m)?;
    Ok(())
}
