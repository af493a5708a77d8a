//! Bindings of the mechanisms: one Python class per Rust mechanism. `mechanism_class!`
//! generates the methods they share (through the core's `Estimator` trait); index-valued
//! and bit-vector mechanisms differ only in how reports are privatized and aggregated.

use super::{key_from, run, run_long, slice, to_py};
use crate::mechanisms::asymmetric_binary::AsymmetricBinaryResponse;
use crate::mechanisms::block_hadamard::BlockHadamardResponse;
use crate::mechanisms::compressive::{
    CompressivePrivatization, LinearModel, MatrixKind, Regime, SparseEstimate,
};
use crate::mechanisms::hadamard_compressive::HadamardCompressivePrivatization;
use crate::mechanisms::hadamard_response::HadamardResponse;
use crate::mechanisms::high_low_hadamard::HighLowHadamardResponse;
use crate::mechanisms::local_hashing::OptimizedLocalHashing;
use crate::mechanisms::one_bit_hadamard::{Groups, OneBitHadamardResponse};
use crate::mechanisms::public_coin_hashing::{PublicCoinHashing, Users};
use crate::mechanisms::randomized_response::RandomizedResponse;
use crate::mechanisms::subset_selection::{self, SubsetSelection};
use crate::mechanisms::two_stage_rappor::{Stages, TwoStageRappor};
use crate::mechanisms::unary_encoding::{OptimizedUnaryEncoding, Rappor};
use crate::mechanisms::{
    self, BitMechanism, Estimator, IndexMechanism, Operation, ReportInt, Tally,
};
use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyReadwriteArray1,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use rayon::prelude::*;

/// Default bound on channel-matrix entries (2^24 floats = 128 MiB).
const MAX_CHANNEL_ENTRIES: u64 = 1 << 24;

type TallyTuple = (u64, u64, Option<usize>);

fn tally_tuple(t: Tally) -> TallyTuple {
    (t.valid, t.invalid, t.first_invalid)
}

fn counts_slice<'a>(counts: &'a mut PyReadwriteArray1<'_, u64>) -> PyResult<&'a mut [u64]> {
    counts
        .as_slice_mut()
        .map_err(|_| PyTypeError::new_err("counts must be a contiguous uint64 array"))
}

fn check_length(got: usize, want: u64) -> PyResult<()> {
    if got as u64 != want {
        return Err(PyValueError::new_err(format!(
            "expected a vector of length {want}, got {got}"
        )));
    }
    Ok(())
}

// -- index-valued reports: one unsigned integer per user --------------------------------

fn privatize_as<'py, M: IndexMechanism, R: ReportInt + numpy::Element>(
    py: Python<'py>,
    mechanism: &M,
    key: &crate::rng::Key,
    values: &[u32],
) -> PyResult<Bound<'py, PyAny>> {
    let reports = run_long(py, values.len() as u64, || {
        let mut out = crate::memory::zeroed_vec::<R>(values.len(), "the reports")?;
        mechanisms::privatize(mechanism, key, values, &mut out)?;
        Ok(out)
    })?;
    Ok(reports.into_pyarray(py).into_any())
}

/// Privatize into the smallest unsigned dtype that holds every report.
fn privatize_index<'py, M: IndexMechanism>(
    py: Python<'py>,
    mechanism: &M,
    key: &crate::rng::Key,
    values: &[u32],
) -> PyResult<Bound<'py, PyAny>> {
    match mechanism.output_size() - 1 {
        0..=0xFF => privatize_as::<M, u8>(py, mechanism, key, values),
        0x100..=0xFFFF => privatize_as::<M, u16>(py, mechanism, key, values),
        0x1_0000..=0xFFFF_FFFF => privatize_as::<M, u32>(py, mechanism, key, values),
        _ => privatize_as::<M, u64>(py, mechanism, key, values),
    }
}

fn aggregate_typed<R: ReportInt + numpy::Element>(
    py: Python<'_>,
    reports: &Bound<'_, PyAny>,
    counts: &mut [u64],
    drop_invalid: bool,
) -> Option<PyResult<Tally>> {
    let array = reports.cast::<PyArray1<R>>().ok()?;
    let readonly = match array.try_readonly() {
        Ok(r) => r,
        Err(e) => return Some(Err(PyTypeError::new_err(e.to_string()))),
    };
    Some(slice(&readonly, "reports").and_then(|r| {
        run_long(py, r.len() as u64, || {
            mechanisms::aggregate(r, counts, drop_invalid)
        })
    }))
}

/// Histogram of reports (any unsigned dtype) added to `counts`.
fn aggregate_index<M: IndexMechanism>(
    py: Python<'_>,
    _mechanism: &M,
    reports: &Bound<'_, PyAny>,
    counts: &mut [u64],
    drop_invalid: bool,
) -> PyResult<Tally> {
    aggregate_typed::<u8>(py, reports, counts, drop_invalid)
        .or_else(|| aggregate_typed::<u16>(py, reports, counts, drop_invalid))
        .or_else(|| aggregate_typed::<u32>(py, reports, counts, drop_invalid))
        .or_else(|| aggregate_typed::<u64>(py, reports, counts, drop_invalid))
        .unwrap_or_else(|| {
            Err(PyTypeError::new_err(
                "reports must be a 1-D array of unsigned integers (uint8/16/32/64)",
            ))
        })
}

// -- one-bit Hadamard Response: index reports 2j + y with server-assigned groups ----------

fn one_bit_privatize_as<'py, R: ReportInt + numpy::Element, G: ReportInt>(
    py: Python<'py>,
    mechanism: &OneBitHadamardResponse,
    key: &crate::rng::Key,
    values: &[u32],
    groups: Groups<'_, G>,
) -> PyResult<Bound<'py, PyAny>> {
    let reports = run_long(py, values.len() as u64, || {
        let mut out = crate::memory::zeroed_vec::<R>(values.len(), "the reports")?;
        mechanism.privatize(key, values, groups, &mut out)?;
        Ok(out)
    })?;
    Ok(reports.into_pyarray(py).into_any())
}

/// Privatize with the given groups into the smallest unsigned dtype that holds `2K − 1`.
fn one_bit_privatize<'py, G: ReportInt>(
    py: Python<'py>,
    mechanism: &OneBitHadamardResponse,
    key: &crate::rng::Key,
    values: &[u32],
    groups: Groups<'_, G>,
) -> PyResult<Bound<'py, PyAny>> {
    match mechanism.output_size() - 1 {
        0..=0xFF => one_bit_privatize_as::<u8, G>(py, mechanism, key, values, groups),
        0x100..=0xFFFF => one_bit_privatize_as::<u16, G>(py, mechanism, key, values, groups),
        0x1_0000..=0xFFFF_FFFF => {
            one_bit_privatize_as::<u32, G>(py, mechanism, key, values, groups)
        }
        _ => one_bit_privatize_as::<u64, G>(py, mechanism, key, values, groups),
    }
}

/// The shared `privatize(values, key)`: the paper's round-robin groups from user 0.
fn one_bit_privatize_round_robin<'py>(
    py: Python<'py>,
    mechanism: &OneBitHadamardResponse,
    key: &crate::rng::Key,
    values: &[u32],
) -> PyResult<Bound<'py, PyAny>> {
    let groups: Groups<'_, u32> = Groups::RoundRobin { first_user: 0 };
    one_bit_privatize(py, mechanism, key, values, groups)
}

/// Explicit groups of one unsigned dtype, or `None` when `groups` is not such an array.
fn one_bit_privatize_explicit<'py, G: ReportInt + numpy::Element>(
    py: Python<'py>,
    mechanism: &OneBitHadamardResponse,
    key: &crate::rng::Key,
    values: &[u32],
    groups: &Bound<'py, PyAny>,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    let array = groups.cast::<PyArray1<G>>().ok()?;
    let readonly = match array.try_readonly() {
        Ok(r) => r,
        Err(e) => return Some(Err(PyTypeError::new_err(e.to_string()))),
    };
    Some(
        slice(&readonly, "groups")
            .and_then(|g| one_bit_privatize(py, mechanism, key, values, Groups::Explicit(g))),
    )
}

// -- bit-vector reports: rows of ⌈bits/8⌉ bytes in numpy.packbits layout -------------------

fn privatize_bits<'py, M: BitMechanism>(
    py: Python<'py>,
    mechanism: &M,
    key: &crate::rng::Key,
    values: &[u32],
) -> PyResult<Bound<'py, PyAny>> {
    let width = mechanisms::row_bytes(mechanism.bits());
    let units = (values.len() as u64).saturating_mul(8 * width as u64);
    let rows = run_long(py, units, || {
        let total = values.len().checked_mul(width).ok_or_else(|| {
            crate::error::Error::Memory("the reports do not fit in memory".into())
        })?;
        let mut out = crate::memory::zeroed_vec::<u8>(total, "the reports")?;
        mechanisms::privatize_bits(mechanism, key, values, &mut out)?;
        Ok(out)
    })?;
    let array = Array2::from_shape_vec((values.len(), width), rows)
        .map_err(|e| super::InternalError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py).into_any())
}

fn aggregate_bits<M: BitMechanism>(
    py: Python<'_>,
    mechanism: &M,
    reports: &Bound<'_, PyAny>,
    counts: &mut [u64],
    drop_invalid: bool,
) -> PyResult<Tally> {
    let width = mechanisms::row_bytes(mechanism.bits());
    let reports: PyReadonlyArray2<'_, u8> = reports.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "packed reports must be a uint8 array of shape (n, {width})"
        ))
    })?;
    let shape = reports.as_array().shape().to_vec();
    if shape[1] != width {
        return Err(PyValueError::new_err(format!(
            "packed reports must have shape (n, {width}), got {shape:?}"
        )));
    }
    let reports = slice(&reports, "reports")?;
    run_long(py, reports.len() as u64, || {
        mechanisms::aggregate_bits(mechanism, reports, counts, drop_invalid)
    })
}

// -- two-stage RAPPOR: (k + 1)-bit rows, the last bit the public stage --------------------

/// Privatize with the default stages (alternating from position 0).
fn privatize_two_stage<'py>(
    py: Python<'py>,
    mechanism: &TwoStageRappor,
    key: &crate::rng::Key,
    values: &[u32],
) -> PyResult<Bound<'py, PyAny>> {
    privatize_bits(py, mechanism, key, values)
}

/// The per-stage statistic `[M (k), N (k), n₂]` of packed rows, added to `counts`.
fn aggregate_two_stage(
    py: Python<'_>,
    mechanism: &TwoStageRappor,
    reports: &Bound<'_, PyAny>,
    counts: &mut [u64],
    drop_invalid: bool,
) -> PyResult<Tally> {
    let width = mechanisms::row_bytes(mechanism.report_bits());
    let reports: PyReadonlyArray2<'_, u8> = reports.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "packed reports must be a uint8 array of shape (n, {width})"
        ))
    })?;
    let shape = reports.as_array().shape().to_vec();
    if shape[1] != width {
        return Err(PyValueError::new_err(format!(
            "packed reports must have shape (n, {width}), got {shape:?}"
        )));
    }
    let reports = slice(&reports, "reports")?;
    run_long(py, reports.len() as u64, || {
        mechanism.aggregate(reports, counts, drop_invalid)
    })
}

// -- compressive privatization: the sparse estimate's diagnostics ------------------------

type SparseTuple<'py> = (
    Bound<'py, PyArray1<f64>>,
    Vec<usize>,
    f64,
    f64,
    &'static str,
);

/// Run `estimate(freq, model)` without the GIL and return `(p̂', support, residual_norm,
/// noise_level, stop)`.
fn sparse_estimate<'py, F>(
    py: Python<'py>,
    freq: &PyReadonlyArray1<'py, f64>,
    model: &str,
    k: u64,
    estimate: F,
) -> PyResult<SparseTuple<'py>>
where
    F: FnOnce(&[f64], LinearModel) -> crate::error::Result<SparseEstimate> + Send,
{
    let freq = slice(freq, "freq")?;
    let model = match model {
        "exact" => LinearModel::Exact,
        "paper" => LinearModel::Paper,
        other => {
            return Err(PyValueError::new_err(format!(
                "model must be 'exact' or 'paper', got {other:?}"
            )))
        }
    };
    let units = k.saturating_mul(freq.len() as u64);
    let r = run_long(py, units, || estimate(freq, model))?;
    Ok((
        r.estimate.into_pyarray(py),
        r.support,
        r.residual_norm,
        r.noise_level,
        super::kernels::stop_name(r.stop),
    ))
}

// -- the shared class -----------------------------------------------------------------

/// A size for [`run_long`] of the server-side linear maps (estimates, channel products): at
/// least linear in the values and the outputs, several passes over them for the transforms.
fn server_work(estimator: &impl Estimator) -> u64 {
    estimator
        .domain_size()
        .saturating_add(estimator.statistic_size())
        .saturating_mul(64)
}

/// A Python class wrapping `$rust_type`; `$privatize`/`$aggregate` are the report-format
/// functions above (`privatize_index`/`aggregate_index` or `privatize_bits`/`aggregate_bits`);
/// `{ ... }` adds the constructor and any class-specific methods.
macro_rules! mechanism_class {
    ($py_type:ident, $rust_type:ty, $name:literal, $privatize:ident, $aggregate:ident, { $($extra:tt)* }) => {
        #[pyclass(module = "ldpdist._core", name = $name, frozen)]
        pub struct $py_type {
            inner: $rust_type,
        }

        #[pymethods]
        impl $py_type {
            $($extra)*

            #[getter]
            fn k(&self) -> u64 {
                self.inner.domain_size()
            }
            #[getter]
            fn epsilon(&self) -> f64 {
                Estimator::epsilon(&self.inner)
            }
            /// Distinct reports (index mechanisms) or bits per report (bit vectors).
            #[getter]
            fn output_size(&self) -> u64 {
                self.inner.report_size()
            }
            /// Length of the aggregate (`output_size` unless the mechanism says otherwise).
            #[getter]
            fn statistic_size(&self) -> u64 {
                self.inner.statistic_size()
            }
            #[getter]
            fn realized_epsilon(&self) -> f64 {
                Estimator::realized_epsilon(&self.inner)
            }
            fn probabilities(&self) -> (f64, f64) {
                Estimator::probabilities(&self.inner)
            }

            #[pyo3(signature = (values, key))]
            fn privatize<'py>(
                &self,
                py: Python<'py>,
                values: PyReadonlyArray1<'py, u32>,
                key: Option<&[u8]>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let values = slice(&values, "values")?;
                let key = key_from(key).map_err(to_py)?;
                $privatize(py, &self.inner, &key, values)
            }

            fn aggregate(
                &self,
                py: Python<'_>,
                reports: &Bound<'_, PyAny>,
                mut counts: PyReadwriteArray1<'_, u64>,
                drop_invalid: bool,
            ) -> PyResult<TallyTuple> {
                let counts = counts_slice(&mut counts)?;
                check_length(counts.len(), self.inner.statistic_size())?;
                $aggregate(py, &self.inner, reports, counts, drop_invalid).map(tally_tuple)
            }

            #[pyo3(signature = (true_counts, key))]
            fn simulate<'py>(
                &self,
                py: Python<'py>,
                true_counts: PyReadonlyArray1<'py, u64>,
                key: Option<&[u8]>,
            ) -> PyResult<Bound<'py, PyArray1<u64>>> {
                let true_counts = slice(&true_counts, "true_counts")?;
                let key = key_from(key).map_err(to_py)?;
                // Always watched for Ctrl-C: the cost is not a function of the sizes alone
                // (subset selection's exact joint draw is O(k·d) with large counts).
                Ok(run_long(py, u64::MAX, || self.inner.checked_simulate(&key, true_counts))?
                    .into_pyarray(py))
            }

            fn estimate_raw<'py>(
                &self,
                py: Python<'py>,
                counts: PyReadonlyArray1<'py, u64>,
                n: u64,
            ) -> PyResult<Bound<'py, PyArray1<f64>>> {
                let counts = slice(&counts, "counts")?;
                check_length(counts.len(), self.inner.statistic_size())?;
                Ok(run_long(py, server_work(&self.inner), || self.inner.checked_estimate_raw(counts, n))?.into_pyarray(py))
            }

            fn estimate_from_frequencies<'py>(
                &self,
                py: Python<'py>,
                freq: PyReadonlyArray1<'py, f64>,
            ) -> PyResult<Bound<'py, PyArray1<f64>>> {
                let freq = slice(&freq, "freq")?;
                check_length(freq.len(), self.inner.statistic_size())?;
                Ok(run_long(py, server_work(&self.inner), || self.inner.checked_estimate_from_frequencies(freq))?
                    .into_pyarray(py))
            }

            fn expected_frequencies<'py>(
                &self,
                py: Python<'py>,
                dist: PyReadonlyArray1<'py, f64>,
            ) -> PyResult<Bound<'py, PyArray1<f64>>> {
                let dist = slice(&dist, "dist")?;
                check_length(dist.len(), self.inner.domain_size())?;
                Ok(run_long(py, server_work(&self.inner), || self.inner.checked_expected_frequencies(dist))?
                    .into_pyarray(py))
            }

            fn channel_apply<'py>(
                &self,
                py: Python<'py>,
                w: PyReadonlyArray1<'py, f64>,
            ) -> PyResult<Bound<'py, PyArray1<f64>>> {
                let w = slice(&w, "w")?;
                check_length(w.len(), self.inner.statistic_size())?;
                Ok(run_long(py, server_work(&self.inner), || self.inner.checked_channel_apply(w))?.into_pyarray(py))
            }

            #[pyo3(signature = (max_entries=None))]
            fn channel_matrix<'py>(
                &self,
                py: Python<'py>,
                max_entries: Option<u64>,
            ) -> PyResult<Bound<'py, PyArray2<f64>>> {
                let inner = &self.inner;
                let (rows, cols) = (inner.domain_size(), inner.channel_outputs());
                let limit = max_entries.unwrap_or(MAX_CHANNEL_ENTRIES);
                let q = run(py, || {
                    mechanisms::channel_matrix(rows, cols, limit, |x, r| {
                        Estimator::channel_row(inner, x, r)
                    })
                })?;
                let array = Array2::from_shape_vec((rows as usize, cols as usize), q)
                    .map_err(|e| super::InternalError::new_err(e.to_string()))?;
                Ok(array.into_pyarray(py))
            }
        }
    };
}

mechanism_class!(
    PyRandomizedResponse,
    RandomizedResponse,
    "RandomizedResponse",
    privatize_index,
    aggregate_index,
    {
        #[new]
        fn new(k: u64, epsilon: f64) -> PyResult<Self> {
            Ok(Self {
                inner: RandomizedResponse::new(k, epsilon).map_err(to_py)?,
            })
        }
    }
);

mechanism_class!(
    PyAsymmetricBinaryResponse,
    AsymmetricBinaryResponse,
    "AsymmetricBinaryResponse",
    privatize_index,
    aggregate_index,
    {
        #[new]
        fn new(epsilon_01: f64, epsilon_10: f64) -> PyResult<Self> {
            Ok(Self {
                inner: AsymmetricBinaryResponse::new(epsilon_01, epsilon_10).map_err(to_py)?,
            })
        }

        /// `E[0, 1]` as requested (+inf allowed).
        #[getter]
        fn epsilon_01(&self) -> f64 {
            self.inner.epsilon_01()
        }

        /// `E[1, 0]` as requested (+inf allowed).
        #[getter]
        fn epsilon_10(&self) -> f64 {
            self.inner.epsilon_10()
        }

        /// `(E[0, 1], E[1, 0])` of the channel used, in closed form.
        fn realized_budgets(&self) -> (f64, f64) {
            self.inner.realized_budgets()
        }

        /// Whether a budget is 0 (a constant report: nothing can be estimated).
        #[getter]
        fn degenerate(&self) -> bool {
            self.inner.degenerate()
        }
    }
);

mechanism_class!(
    PyHadamardResponse,
    HadamardResponse,
    "HadamardResponse",
    privatize_index,
    aggregate_index,
    {
        #[new]
        #[pyo3(signature = (k, epsilon, blocks=None))]
        fn new(k: u64, epsilon: f64, blocks: Option<u64>) -> PyResult<Self> {
            Ok(Self {
                inner: HadamardResponse::with_blocks(k, epsilon, blocks).map_err(to_py)?,
            })
        }

        /// `(B, b, K)` of the (b, B) construction.
        #[getter]
        fn shape(&self) -> (u64, u64, u64) {
            self.inner.shape()
        }
    }
);

mechanism_class!(
    PyBlockHadamardResponse,
    BlockHadamardResponse,
    "BlockHadamardResponse",
    privatize_index,
    aggregate_index,
    {
        /// The partition as block sizes (contiguous blocks, in order) or as one label per
        /// value; exactly one of them.
        #[new]
        #[pyo3(signature = (epsilon, sizes=None, labels=None))]
        fn new(
            py: Python<'_>,
            epsilon: f64,
            sizes: Option<PyReadonlyArray1<'_, u64>>,
            labels: Option<PyReadonlyArray1<'_, u32>>,
        ) -> PyResult<Self> {
            let inner = match (sizes, labels) {
                (Some(sizes), None) => {
                    let sizes = slice(&sizes, "sizes")?;
                    let units = sizes.iter().fold(0u64, |t, &s| t.saturating_add(s));
                    run_long(py, units, || {
                        BlockHadamardResponse::from_sizes(sizes, epsilon)
                    })?
                }
                (None, Some(labels)) => {
                    let labels = slice(&labels, "labels")?;
                    run_long(py, labels.len() as u64, || {
                        BlockHadamardResponse::from_labels(labels, epsilon)
                    })?
                }
                _ => {
                    return Err(PyValueError::new_err(
                        "give the blocks as sizes or as labels (exactly one)",
                    ))
                }
            };
            Ok(Self { inner })
        }

        /// `(offsets, outputs, values)` of the blocks (uint64 arrays of length m): the first
        /// output of each block, its number of outputs K_j and of values k_j.
        #[allow(clippy::type_complexity)]
        fn layout<'py>(
            &self,
            py: Python<'py>,
        ) -> (
            Bound<'py, PyArray1<u64>>,
            Bound<'py, PyArray1<u64>>,
            Bound<'py, PyArray1<u64>>,
        ) {
            let blocks = self.inner.blocks();
            let column = |f: fn(&crate::mechanisms::block_hadamard::Block) -> u64| {
                blocks.iter().map(f).collect::<Vec<u64>>().into_pyarray(py)
            };
            (
                column(|b| b.offset),
                column(|b| b.outputs),
                column(|b| b.values),
            )
        }
    }
);

mechanism_class!(
    PyHighLowHadamardResponse,
    HighLowHadamardResponse,
    "HighLowHadamardResponse",
    privatize_index,
    aggregate_index,
    {
        /// `sensitive`: the protected values (distinct, each < k, any order).
        #[new]
        fn new(
            py: Python<'_>,
            k: u64,
            epsilon: f64,
            sensitive: PyReadonlyArray1<'_, u64>,
        ) -> PyResult<Self> {
            let sensitive = slice(&sensitive, "sensitive")?;
            // Sorting the set and building the rank table: without the GIL for large sets.
            let units = (sensitive.len() as u64).saturating_add(k / 64);
            let inner = run_long(py, units, || {
                HighLowHadamardResponse::new(k, epsilon, sensitive)
            })?;
            Ok(Self { inner })
        }

        /// `(s, t, S)`: sensitive values, other values, outputs of the Hadamard part.
        #[getter]
        fn shape(&self) -> (u64, u64, u64) {
            self.inner.shape()
        }

        /// `(ε_AA, ε_AN)`: the realized budgets between two sensitive values and from a
        /// sensitive value to a non-sensitive one.
        fn pair_budgets(&self) -> (f64, f64) {
            self.inner.pair_budgets()
        }
    }
);

mechanism_class!(
    PyRappor,
    Rappor,
    "Rappor",
    privatize_bits,
    aggregate_bits,
    {
        #[new]
        fn new(k: u64, epsilon: f64) -> PyResult<Self> {
            Ok(Self {
                inner: Rappor::new(k, epsilon).map_err(to_py)?,
            })
        }
    }
);

mechanism_class!(
    PyOptimizedUnaryEncoding,
    OptimizedUnaryEncoding,
    "OptimizedUnaryEncoding",
    privatize_bits,
    aggregate_bits,
    {
        #[new]
        fn new(k: u64, epsilon: f64) -> PyResult<Self> {
            Ok(Self {
                inner: OptimizedUnaryEncoding::new(k, epsilon).map_err(to_py)?,
            })
        }
    }
);

mechanism_class!(
    PyTwoStageRappor,
    TwoStageRappor,
    "TwoStageRappor",
    privatize_two_stage,
    aggregate_two_stage,
    {
        #[new]
        fn new(k: u64, epsilon: f64) -> PyResult<Self> {
            Ok(Self {
                inner: TwoStageRappor::new(k, epsilon).map_err(to_py)?,
            })
        }

        /// Privatize with stages alternating from `first_user` (stage 2 at odd
        /// `first_user + i`) or, when given, the explicit `stages` (uint8, 1 or 2 per value).
        #[pyo3(signature = (values, key, first_user, stages))]
        fn privatize_stages<'py>(
            &self,
            py: Python<'py>,
            values: PyReadonlyArray1<'py, u32>,
            key: Option<&[u8]>,
            first_user: u64,
            stages: Option<PyReadonlyArray1<'py, u8>>,
        ) -> PyResult<Bound<'py, PyAny>> {
            let values = slice(&values, "values")?;
            let key = key_from(key).map_err(to_py)?;
            let explicit = match &stages {
                Some(s) => Some(slice(s, "stages")?),
                None => None,
            };
            let assignment = match explicit {
                Some(s) => Stages::Explicit(s),
                None => Stages::Alternating { first_user },
            };
            let staged = self.inner.staged(assignment, values.len()).map_err(to_py)?;
            privatize_bits(py, &staged, &key, values)
        }

        /// Algorithm 2's estimate (top `min(2s, k)` stage-1 counts, then stage 2 on them).
        fn two_stage_estimate<'py>(
            &self,
            py: Python<'py>,
            counts: PyReadonlyArray1<'py, u64>,
            n: u64,
            sparsity: u64,
        ) -> PyResult<Bound<'py, PyArray1<f64>>> {
            let counts = slice(&counts, "counts")?;
            check_length(counts.len(), self.inner.statistic_size())?;
            Ok(
                run_long(py, server_work(&self.inner).saturating_mul(8), || {
                    self.inner.two_stage_estimate(counts, n, sparsity)
                })?
                .into_pyarray(py),
            )
        }

        /// The flip probability f of every private bit (β of the two-stage estimate).
        #[getter]
        fn flip_probability(&self) -> f64 {
            self.inner.flip_probability()
        }
    }
);

mechanism_class!(
    PyOptimizedLocalHashing,
    OptimizedLocalHashing,
    "OptimizedLocalHashing",
    privatize_index,
    aggregate_index,
    {
        /// The public `seed` of the Python spec is not needed here: the hash is drawn from
        /// each user's private stream (see `mechanisms::local_hashing`).
        #[new]
        fn new(k: u64, epsilon: f64) -> PyResult<Self> {
            Ok(Self {
                inner: OptimizedLocalHashing::new(k, epsilon).map_err(to_py)?,
            })
        }

        /// The prime modulus g.
        #[getter]
        fn g(&self) -> u64 {
            self.inner.g()
        }

        /// Number of base-g digits t (there are g^t hashes).
        #[getter]
        fn t(&self) -> u32 {
            self.inner.t()
        }
    }
);

mechanism_class!(
    PySubsetSelection,
    SubsetSelection,
    "SubsetSelection",
    privatize_bits,
    aggregate_bits,
    {
        /// Subset Selection; `d = None` uses the default subset size `⌈k/(e^ε + 1)⌉`.
        #[new]
        #[pyo3(signature = (k, epsilon, d=None))]
        fn new(k: u64, epsilon: f64, d: Option<u64>) -> PyResult<Self> {
            let inner = match d {
                None => SubsetSelection::new(k, epsilon),
                Some(d) => SubsetSelection::with_subset_size(k, epsilon, d),
            };
            Ok(Self {
                inner: inner.map_err(to_py)?,
            })
        }

        /// Number of items in every report.
        #[getter]
        fn d(&self) -> u64 {
            self.inner.subset_size()
        }

        /// `(ρ/C(k−1, d−1), (1−ρ)/C(k−1, d))`: the probability of one subset containing x, and
        /// of one not containing it.
        fn subset_probabilities(&self) -> (f64, f64) {
            self.inner.subset_probabilities()
        }

        /// `⌈k/(e^ε + 1)⌉`, clamped to `[1, k − 1]`.
        #[staticmethod]
        fn default_d(k: u64, epsilon: f64) -> PyResult<u64> {
            subset_selection::default_subset_size(k, epsilon).map_err(to_py)
        }

        /// The d minimizing the estimator variance at the uniform distribution.
        #[staticmethod]
        fn variance_optimal_d(k: u64, epsilon: f64) -> PyResult<u64> {
            subset_selection::variance_optimal_subset_size(k, epsilon).map_err(to_py)
        }

        /// `n · Σ_j Var(p̂_j)` at the uniform distribution.
        #[staticmethod]
        fn variance_at_uniform(k: u64, epsilon: f64, d: u64) -> f64 {
            subset_selection::variance_at_uniform(k, epsilon, d)
        }
    }
);

mechanism_class!(
    PyCompressivePrivatization,
    CompressivePrivatization,
    "CompressivePrivatization",
    privatize_index,
    aggregate_index,
    {
        #[new]
        #[allow(clippy::too_many_arguments)]
        fn new(
            py: Python<'_>,
            k: u64,
            epsilon: f64,
            m: usize,
            key: &[u8],
            matrix: &str,
            regime: &str,
            calibrate: bool,
        ) -> PyResult<Self> {
            let key = key_from(Some(key)).map_err(to_py)?;
            let matrix = match matrix {
                "balanced" => MatrixKind::Balanced,
                "rademacher" => MatrixKind::Rademacher,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "matrix must be 'balanced' or 'rademacher', got {other:?}"
                    )))
                }
            };
            let regime = match regime {
                "auto" => Regime::Auto,
                "high" => Regime::High,
                "medium" => Regime::Medium,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "regime must be 'auto', 'high' or 'medium', got {other:?}"
                    )))
                }
            };
            // Building a Rademacher matrix takes seconds for large k·m: without the GIL and
            // interruptible.
            let units = k.saturating_mul(m as u64);
            let inner = run_long(py, units, || {
                CompressivePrivatization::new(k, epsilon, m, key, matrix, regime, calibrate)
            })?;
            Ok(Self { inner })
        }

        #[getter]
        fn m(&self) -> usize {
            self.inner.m()
        }

        #[getter]
        fn internal_epsilon(&self) -> f64 {
            self.inner.internal_epsilon()
        }

        /// The regime used: "high" or "medium".
        #[getter]
        fn regime(&self) -> &'static str {
            match self.inner.regime() {
                Regime::Medium => "medium",
                _ => "high",
            }
        }

        /// `(kind, p)` of the public sign matrix (`ldpdist.kernels.SignMatrix` arguments).
        #[getter]
        fn sign_kind(&self) -> (&'static str, f64) {
            let kind = self.inner.sign_kind();
            (kind.name(), kind.p())
        }

        /// n_x, the number of +1 entries of every column.
        fn column_ones<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
            self.inner.column_ones().to_vec().into_pyarray(py)
        }

        /// `(p̂', support, residual_norm, noise_level, stop)` (see `estimate_sparse`).
        #[pyo3(signature = (freq, n, sparsity, model))]
        fn estimate_sparse<'py>(
            &self,
            py: Python<'py>,
            freq: PyReadonlyArray1<'py, f64>,
            n: Option<u64>,
            sparsity: Option<usize>,
            model: &str,
        ) -> PyResult<SparseTuple<'py>> {
            let inner = &self.inner;
            sparse_estimate(py, &freq, model, inner.k(), |freq, model| {
                inner.estimate_sparse(freq, n, sparsity, model)
            })
        }
    }
);

mechanism_class!(
    PyHadamardCompressivePrivatization,
    HadamardCompressivePrivatization,
    "HadamardCompressivePrivatization",
    privatize_index,
    aggregate_index,
    {
        #[new]
        fn new(k: u64, epsilon: f64, m: usize, key: &[u8]) -> PyResult<Self> {
            let key = key_from(Some(key)).map_err(to_py)?;
            Ok(Self {
                inner: HadamardCompressivePrivatization::new(k, epsilon, m, key).map_err(to_py)?,
            })
        }

        #[getter]
        fn m(&self) -> usize {
            self.inner.m()
        }

        /// The ε of the channel formula: ε itself (the columns are balanced).
        #[getter]
        fn internal_epsilon(&self) -> f64 {
            self.inner.epsilon()
        }

        #[getter]
        fn regime(&self) -> &'static str {
            "high"
        }

        /// K, the order of the Sylvester matrix whose rows A uses.
        #[getter]
        fn order(&self) -> u64 {
            self.inner.structure().order()
        }

        /// The m Hadamard rows `R_y` (report y is row `R_y`).
        fn hadamard_rows<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
            self.inner.structure().rows().to_vec().into_pyarray(py)
        }

        /// The slot `π(x)` of every value (its Hadamard column is `1 + π(x)`).
        fn slots<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
            let k = self.inner.k();
            let permutation = self.inner.structure().permutation();
            let slots = run(py, || {
                crate::memory::check_fits(k as usize, 8, "the slots")?;
                Ok((0..k)
                    .into_par_iter()
                    .map(|x| permutation.slot(x))
                    .collect::<Vec<u64>>())
            })?;
            Ok(slots.into_pyarray(py))
        }

        /// Column x of A (±1, int8, length m), as a client computes it in O(m).
        fn column<'py>(&self, py: Python<'py>, x: u64) -> PyResult<Bound<'py, PyArray1<i8>>> {
            if x >= self.inner.k() {
                return Err(PyValueError::new_err(format!(
                    "x must lie in [0, {}), got {x}",
                    self.inner.k()
                )));
            }
            Ok(self.inner.column(x).into_pyarray(py))
        }

        /// One report for x computed as a client does (its own column only).
        fn privatize_one(&self, x: u64, key: &[u8]) -> PyResult<u64> {
            let key = key_from(Some(key)).map_err(to_py)?;
            let mut rng = crate::rng::stream(&key, 0);
            self.inner.privatize_one(&mut rng, x).map_err(to_py)
        }

        /// Whether the server's balance table is built.
        #[getter]
        fn table_built(&self) -> bool {
            self.inner.table_built()
        }

        /// `(p̂', support, residual_norm, noise_level, stop)` (see `estimate_sparse`).
        #[pyo3(signature = (freq, n, sparsity, model))]
        fn estimate_sparse<'py>(
            &self,
            py: Python<'py>,
            freq: PyReadonlyArray1<'py, f64>,
            n: Option<u64>,
            sparsity: Option<usize>,
            model: &str,
        ) -> PyResult<SparseTuple<'py>> {
            let inner = &self.inner;
            sparse_estimate(py, &freq, model, inner.k(), |freq, model| {
                inner.estimate_sparse(freq, n, sparsity, model)
            })
        }
    }
);

mechanism_class!(
    PyOneBitHadamardResponse,
    OneBitHadamardResponse,
    "OneBitHadamardResponse",
    one_bit_privatize_round_robin,
    aggregate_index,
    {
        #[new]
        fn new(k: u64, epsilon: f64) -> PyResult<Self> {
            Ok(Self {
                inner: OneBitHadamardResponse::new(k, epsilon).map_err(to_py)?,
            })
        }

        /// K, the number of groups.
        #[getter]
        fn groups(&self) -> u64 {
            self.inner.groups()
        }

        /// The number of groups without reports in `counts` (length 2K).
        fn empty_groups(&self, counts: PyReadonlyArray1<'_, u64>) -> PyResult<u64> {
            let counts = slice(&counts, "counts")?;
            check_length(counts.len(), self.inner.statistic_size())?;
            Ok(self.inner.empty_groups(counts))
        }

        /// Reports of `values` with explicit `groups` (a 1-D unsigned array, one per value),
        /// or with the round-robin groups of users `first_user, first_user + 1, …`.
        #[pyo3(signature = (values, key, groups=None, first_user=0))]
        fn privatize_grouped<'py>(
            &self,
            py: Python<'py>,
            values: PyReadonlyArray1<'py, u32>,
            key: Option<&[u8]>,
            groups: Option<&Bound<'py, PyAny>>,
            first_user: u64,
        ) -> PyResult<Bound<'py, PyAny>> {
            let values = slice(&values, "values")?;
            let key = key_from(key).map_err(to_py)?;
            let inner = &self.inner;
            match groups {
                None => {
                    let groups: Groups<'_, u32> = Groups::RoundRobin { first_user };
                    one_bit_privatize(py, inner, &key, values, groups)
                }
                Some(groups) => one_bit_privatize_explicit::<u8>(py, inner, &key, values, groups)
                    .or_else(|| one_bit_privatize_explicit::<u16>(py, inner, &key, values, groups))
                    .or_else(|| one_bit_privatize_explicit::<u32>(py, inner, &key, values, groups))
                    .or_else(|| one_bit_privatize_explicit::<u64>(py, inner, &key, values, groups))
                    .unwrap_or_else(|| {
                        Err(PyTypeError::new_err(
                            "groups must be a 1-D array of unsigned integers (uint8/16/32/64)",
                        ))
                    }),
            }
        }
    }
);

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompressivePrivatization>()?;
    m.add_class::<PyHadamardCompressivePrivatization>()?;
    m.add_class::<PySubsetSelection>()?;
    m.add_class::<PyRandomizedResponse>()?;
    m.add_class::<PyAsymmetricBinaryResponse>()?;
    m.add_class::<PyHadamardResponse>()?;
    m.add_class::<PyBlockHadamardResponse>()?;
    m.add_class::<PyHighLowHadamardResponse>()?;
    m.add_class::<PyOptimizedLocalHashing>()?;
    m.add_class::<PyOneBitHadamardResponse>()?;
    m.add_class::<PyRappor>()?;
    m.add_class::<PyTwoStageRappor>()?;
    m.add_class::<PyOptimizedUnaryEncoding>()?;
    m.add_class::<PyPublicCoinHashing>()?;
    Ok(())
}

// -- public-coin hashing: not an ε-LDP channel, so not through `mechanism_class!` ------------

/// ℓ-bit public-coin hashing (`mechanisms::public_coin_hashing`): no ε, no channel matrix;
/// reports are u64 `(i << ℓ) | h_i(x)` and the aggregate has `2k + 1` counts.
#[pyclass(module = "ldpdist._core", name = "PublicCoinHashing", frozen)]
pub struct PyPublicCoinHashing {
    inner: PublicCoinHashing,
}

impl PyPublicCoinHashing {
    fn work(&self, items: usize) -> u64 {
        (items as u64).saturating_mul(self.inner.k())
    }
}

#[pymethods]
impl PyPublicCoinHashing {
    #[new]
    fn new(k: u64, bits: u32, key: &[u8]) -> PyResult<Self> {
        let key = key_from(Some(key)).map_err(to_py)?;
        Ok(Self {
            inner: PublicCoinHashing::new(k, bits, key).map_err(to_py)?,
        })
    }

    #[getter]
    fn k(&self) -> u64 {
        self.inner.k()
    }
    #[getter]
    fn bits(&self) -> u32 {
        self.inner.bits()
    }
    /// Distinct messages, `2^bits`.
    #[getter]
    fn output_size(&self) -> u64 {
        self.inner.messages()
    }
    /// Length of the aggregate, `2k + 1`.
    #[getter]
    fn statistic_size(&self) -> u64 {
        self.inner.statistic_size()
    }
    /// User indices lie in `[0, max_users)`, `max_users = 2^(64 − bits)`.
    #[getter]
    fn max_users(&self) -> u64 {
        self.inner.max_users()
    }

    /// Reports of `values` for users `first_user + position`, or `users[position]`.
    #[pyo3(signature = (values, first_user, users=None))]
    fn privatize<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, u32>,
        first_user: u64,
        users: Option<PyReadonlyArray1<'py, u64>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let values = slice(&values, "values")?;
        let listed = match &users {
            Some(u) => Some(slice(u, "users")?),
            None => None,
        };
        let who = match listed {
            Some(list) => Users::Listed(list),
            None => Users::From(first_user),
        };
        let units = (values.len() as u64).saturating_mul(256);
        let reports = run_long(py, units, || {
            let mut out = crate::memory::zeroed_vec::<u64>(values.len(), "the reports")?;
            self.inner.privatize(values, who, &mut out)?;
            Ok(out)
        })?;
        Ok(reports.into_pyarray(py))
    }

    /// `h_user(x)` for every x of `values`.
    fn hashes<'py>(
        &self,
        py: Python<'py>,
        user: u64,
        values: PyReadonlyArray1<'py, u32>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let values = slice(&values, "values")?;
        let out = run(py, || {
            let mut out = crate::memory::zeroed_vec::<u64>(values.len(), "the hashes")?;
            self.inner.hashes(user, values, &mut out)?;
            Ok(out)
        })?;
        Ok(out.into_pyarray(py))
    }

    /// `(a, b)` of each user (the hash `((a·x + b) mod 2^64) >> (64 − bits)`).
    #[allow(clippy::type_complexity)]
    fn hash_parameters<'py>(
        &self,
        py: Python<'py>,
        users: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<(Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u64>>)> {
        let users = slice(&users, "users")?;
        let units = (users.len() as u64).saturating_mul(256);
        let (a, b) = run_long(py, units, || {
            let mut a = crate::memory::zeroed_vec::<u64>(users.len(), "the multipliers")?;
            let mut b = crate::memory::zeroed_vec::<u64>(users.len(), "the offsets")?;
            a.par_chunks_mut(1 << 12)
                .zip(b.par_chunks_mut(1 << 12))
                .zip(users.par_chunks(1 << 12))
                .try_for_each(|((a, b), users)| {
                    crate::interrupt::check()?;
                    self.inner.hash_parameters_into(users, a, b);
                    Ok::<(), crate::error::Error>(())
                })?;
            Ok((a, b))
        })?;
        Ok((a.into_pyarray(py), b.into_pyarray(py)))
    }

    /// Add the statistic of `reports` (uint64) to `counts`; every u64 is a report, so
    /// `(n, 0, None)` (the signature of the other mechanisms' `aggregate`).
    fn aggregate(
        &self,
        py: Python<'_>,
        reports: PyReadonlyArray1<'_, u64>,
        mut counts: PyReadwriteArray1<'_, u64>,
        drop_invalid: bool,
    ) -> PyResult<TallyTuple> {
        let _ = drop_invalid;
        let counts = counts_slice(&mut counts)?;
        check_length(counts.len(), self.inner.statistic_size())?;
        let reports = slice(&reports, "reports")?;
        run_long(py, self.work(reports.len()), || {
            self.inner.aggregate(reports, counts)
        })?;
        Ok((reports.len() as u64, 0, None))
    }

    #[pyo3(signature = (true_counts, key))]
    fn simulate<'py>(
        &self,
        py: Python<'py>,
        true_counts: PyReadonlyArray1<'py, u64>,
        key: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let true_counts = slice(&true_counts, "true_counts")?;
        let key = key_from(key).map_err(to_py)?;
        Ok(run_long(py, u64::MAX, || self.inner.simulate(&key, true_counts))?.into_pyarray(py))
    }

    fn estimate_raw<'py>(
        &self,
        py: Python<'py>,
        counts: PyReadonlyArray1<'py, u64>,
        n: u64,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let counts = slice(&counts, "counts")?;
        check_length(counts.len(), self.inner.statistic_size())?;
        let inner = &self.inner;
        Ok(run_long(py, inner.k().saturating_mul(16), || {
            inner.footprint(Operation::Estimate).check()?;
            inner.estimate_raw(counts, n)
        })?
        .into_pyarray(py))
    }

    /// The two-stage estimate of eq. (14) (`sparsity` = s; the top `min(2s, k)` values).
    fn two_stage_estimate<'py>(
        &self,
        py: Python<'py>,
        counts: PyReadonlyArray1<'py, u64>,
        n: u64,
        sparsity: u64,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let counts = slice(&counts, "counts")?;
        check_length(counts.len(), self.inner.statistic_size())?;
        let inner = &self.inner;
        Ok(run_long(py, inner.k().saturating_mul(64), || {
            inner.two_stage_estimate(counts, n, sparsity)
        })?
        .into_pyarray(py))
    }

    /// The unbiased estimate from expected pooled frequencies (length k).
    fn estimate_from_frequencies<'py>(
        &self,
        py: Python<'py>,
        freq: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let freq = slice(&freq, "freq")?;
        check_length(freq.len(), self.inner.k())?;
        self.linear(py, |m| m.estimate_from_frequencies(freq))
    }

    /// Expected pooled frequencies `E[(M + N)(x)]/n` of a distribution (length k).
    fn expected_frequencies<'py>(
        &self,
        py: Python<'py>,
        dist: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let dist = slice(&dist, "dist")?;
        check_length(dist.len(), self.inner.k())?;
        self.linear(py, |m| m.expected_frequencies(dist))
    }

    /// The adjoint of `expected_frequencies` (length k).
    fn channel_apply<'py>(
        &self,
        py: Python<'py>,
        w: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let w = slice(&w, "w")?;
        check_length(w.len(), self.inner.k())?;
        self.linear(py, |m| m.channel_apply(w))
    }
}

impl PyPublicCoinHashing {
    /// A k-vector map after the memory guard, without the GIL.
    fn linear<'py>(
        &self,
        py: Python<'py>,
        map: impl FnOnce(&PublicCoinHashing) -> Vec<f64> + Send,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let inner = &self.inner;
        Ok(run(py, || {
            inner.footprint(Operation::ChannelProduct).check()?;
            Ok(map(inner))
        })?
        .into_pyarray(py))
    }
}
