//! Bindings of adaptive sample splitting (`ldpdist.linear.AdaptiveLinearQueries` wraps
//! them; `linear::adaptive` documents the protocol).

use super::{key_from, run, run_long, slice, to_py};
use crate::linear::adaptive::{self, ReplyChannel};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

/// The one-bit reply channel of ε and r (`linear::adaptive::ReplyChannel`).
#[pyclass(module = "ldpdist._core", name = "AdaptiveReplyChannel", frozen)]
struct PyReplyChannel {
    inner: ReplyChannel,
}

#[pymethods]
impl PyReplyChannel {
    #[new]
    fn new(epsilon: f64, r: f64) -> PyResult<Self> {
        let inner = ReplyChannel::new(epsilon, r).map_err(to_py)?;
        Ok(Self { inner })
    }

    #[getter]
    fn epsilon(&self) -> f64 {
        self.inner.epsilon()
    }
    #[getter]
    fn r(&self) -> f64 {
        self.inner.r()
    }
    #[getter]
    fn half_gap(&self) -> f64 {
        self.inner.half_gap()
    }
    #[getter]
    fn c_epsilon(&self) -> f64 {
        self.inner.c_epsilon()
    }
    #[getter]
    fn scale(&self) -> f64 {
        self.inner.scale()
    }
    #[getter]
    fn realized_epsilon(&self) -> f64 {
        self.inner.realized_epsilon()
    }

    fn plus_probabilities<'py>(
        &self,
        py: Python<'py>,
        query: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let query = slice(&query, "query")?;
        Ok(run(py, || self.inner.plus_probabilities(query))?.into_pyarray(py))
    }

    fn realized_epsilon_of(
        &self,
        py: Python<'_>,
        query: PyReadonlyArray1<'_, f64>,
    ) -> PyResult<f64> {
        let query = slice(&query, "query")?;
        run(py, || self.inner.realized_epsilon_of(query))
    }

    /// The ±1 replies (int8) of the users holding `values` (uint32) to `query`.
    #[pyo3(signature = (key, query, values))]
    fn respond<'py>(
        &self,
        py: Python<'py>,
        key: Option<&[u8]>,
        query: PyReadonlyArray1<'py, f64>,
        values: PyReadonlyArray1<'py, u32>,
    ) -> PyResult<Bound<'py, PyArray1<i8>>> {
        let key = key_from(key).map_err(to_py)?;
        let (query, values) = (slice(&query, "query")?, slice(&values, "values")?);
        let replies = run_long(py, values.len() as u64, || {
            let mut out = crate::memory::zeroed_vec::<i8>(values.len(), "the replies")?;
            adaptive::respond(&self.inner, &key, query, values, &mut out)?;
            Ok(out)
        })?;
        Ok(replies.into_pyarray(py))
    }

    /// The number of `+` replies `respond` would give with the same key.
    #[pyo3(signature = (key, query, values))]
    fn simulate_plus_count(
        &self,
        py: Python<'_>,
        key: Option<&[u8]>,
        query: PyReadonlyArray1<'_, f64>,
        values: PyReadonlyArray1<'_, u32>,
    ) -> PyResult<u64> {
        let key = key_from(key).map_err(to_py)?;
        let (query, values) = (slice(&query, "query")?, slice(&values, "values")?);
        run_long(py, values.len() as u64, || {
            adaptive::simulate_plus_count(&self.inner, &key, query, values)
        })
    }
}

/// The rounds (uint32) of the users `users` among `rounds` under the public key.
#[pyfunction]
fn adaptive_round_of<'py>(
    py: Python<'py>,
    key: &[u8],
    users: PyReadonlyArray1<'py, u64>,
    rounds: u64,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let key = key_from(Some(key)).map_err(to_py)?;
    let users = slice(&users, "users")?;
    let out = run_long(py, users.len() as u64, || {
        let mut out = crate::memory::zeroed_vec::<u32>(users.len(), "the users' rounds")?;
        adaptive::rounds_of(&key, users, rounds, &mut out)?;
        Ok(out)
    })?;
    Ok(out.into_pyarray(py))
}

/// `(order, offsets)`: the users of round t are `order[offsets[t]:offsets[t + 1]]`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn adaptive_group_users<'py>(
    py: Python<'py>,
    key: &[u8],
    n_users: u64,
    rounds: u64,
) -> PyResult<(Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u64>>)> {
    let key = key_from(Some(key)).map_err(to_py)?;
    let (order, offsets) = run_long(py, n_users, || adaptive::group_users(&key, n_users, rounds))?;
    Ok((order.into_pyarray(py), offsets.into_pyarray(py)))
}

/// The number of +1 among replies that must each be ±1 (int8).
#[pyfunction]
fn adaptive_count_plus(py: Python<'_>, replies: PyReadonlyArray1<'_, i8>) -> PyResult<u64> {
    let replies = slice(&replies, "replies")?;
    run(py, || adaptive::count_plus(replies))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyReplyChannel>()?;
    m.add_function(wrap_pyfunction!(adaptive_round_of, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_group_users, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_count_plus, m)?)?;
    Ok(())
}
