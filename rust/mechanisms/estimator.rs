//! The server-side interface every mechanism implements ([`Estimator`]): its guarantee, the
//! unbiased estimator, the channel products of the iterative Bayesian update, exact
//! simulation, and the memory footprint of each [`Operation`]. Also the algebra shared by
//! the symmetric mechanisms ([`SymmetricEstimator`]), the `impl_estimator!` macro that
//! implements the trait from a mechanism's inherent methods, and [`channel_matrix`].

use super::{
    asymmetric_binary, block_hadamard, compressive, hadamard_compressive, hadamard_response,
    high_low_hadamard, local_hashing, one_bit_hadamard, randomized_response, subset_selection,
    unary_encoding,
};
use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::Key;
use rayon::prelude::*;

/// The estimator algebra of a symmetric mechanism: coordinate j of the aggregate has
/// per-report mean `low + (high − low)·p_j` (randomized response's report histogram; the
/// per-bit counts of the unary encodings and of subset selection). The map is self-adjoint,
/// so it serves both `expected_frequencies` and `channel_apply`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SymmetricEstimator {
    pub high: f64,
    pub low: f64,
}

impl SymmetricEstimator {
    /// Unbiased estimate from the aggregate of `n > 0` reports: `(c_j/n − low)/(high − low)`.
    pub fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64> {
        let freq: Vec<f64> = counts.iter().map(|&c| c as f64 / n as f64).collect();
        self.estimate_from_frequencies(&freq)
    }

    /// Unbiased estimate from per-report frequencies.
    pub fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
        let gap = self.high - self.low;
        freq.iter().map(|&f| (f - self.low) / gap).collect()
    }

    /// `low·Σv + (high − low)·v_j`: expected frequencies for `v = p`, and the adjoint `Q w`.
    pub fn apply(&self, v: &[f64]) -> Vec<f64> {
        let total: f64 = v.iter().sum();
        v.iter()
            .map(|&x| self.low * total + (self.high - self.low) * x)
            .collect()
    }
}

/// Server-side operations whose buffers the memory guard checks before they run
/// ([`Estimator::footprint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// One unbiased estimate (`estimate_raw` or `estimate_from_frequencies`).
    Estimate,
    /// One channel product (`expected_frequencies` or `channel_apply`).
    ChannelProduct,
    /// `simulate_counts` for `users` users in all.
    Simulate { users: u64 },
}

impl Operation {
    /// A name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Estimate => "estimate",
            Operation::ChannelProduct => "channel product",
            Operation::Simulate { .. } => "simulate",
        }
    }
}

/// The footprint of a mechanism whose server-side operations use only vectors of its domain
/// size k and statistic size S (plus O(1)): each operation's input copy, output and
/// temporaries, as counted by `rust/tests/memory_footprint.rs` (which checks every
/// mechanism's declaration against the bytes actually allocated).
pub fn vector_footprint(name: &str, op: Operation, k: u64, statistic: u64) -> Footprint {
    let f = Footprint::new(format!("{name} {}", op.name()));
    match op {
        Operation::Estimate => f
            .add("report frequencies", statistic, 8)
            .add("the estimate", k, 8),
        Operation::ChannelProduct => {
            f.add("work vectors", 2 * statistic.max(k), 8)
                .add("the result", statistic.max(k), 8)
        }
        Operation::Simulate { .. } => f.add("the report counts", statistic, 8),
    }
}

/// The server-side interface every mechanism shares: its guarantee, the unbiased estimator,
/// the channel products used by the iterative Bayesian update, and exact simulation. The
/// aggregate ("statistic") is the report histogram for index mechanisms and the per-bit
/// counts for bit-vector mechanisms.
///
/// Memory: [`Estimator::footprint`] declares the bytes each operation allocates; callers
/// check it against the budget (`crate::memory`) before running the operation, and the
/// `checked_*` methods do exactly that.
pub trait Estimator: Sync {
    fn epsilon(&self) -> f64;
    /// Max log-ratio of the channel actually used (≤ ε).
    fn realized_epsilon(&self) -> f64;
    /// The two channel probabilities that define the mechanism (see each mechanism).
    fn probabilities(&self) -> (f64, f64);
    /// k.
    fn domain_size(&self) -> u64;
    /// Length of the aggregate.
    fn statistic_size(&self) -> u64;
    /// Python's `output_size`: the number of distinct reports (index mechanisms) or bits
    /// per report (bit vectors). The statistic's length unless a mechanism's aggregate is
    /// more than one count per output or bit (two-stage RAPPOR: per-stage bit counts).
    fn report_size(&self) -> u64 {
        self.statistic_size()
    }
    /// Number of distinct reports (`2^bits` for bit vectors, saturating).
    fn channel_outputs(&self) -> u64;
    /// Row x of the channel matrix.
    fn channel_row(&self, x: u64, row: &mut [f64]);
    /// Unbiased estimate from the aggregate of `n > 0` reports.
    fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64>;
    /// Unbiased estimate from per-report expected statistics (e.g. exact expectations).
    fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64>;
    /// Expected statistic per report for a distribution of the values.
    fn expected_frequencies(&self, dist: &[f64]) -> Vec<f64>;
    /// The adjoint of [`Estimator::expected_frequencies`].
    fn channel_apply(&self, w: &[f64]) -> Vec<f64>;
    /// The aggregate of privatizing `true_counts[x]` users of each value x, exact in law.
    fn simulate_counts(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>>;
    /// The buffers `op` allocates (outputs included), for the memory guard.
    fn footprint(&self, op: Operation) -> Footprint;
    /// Build, fallibly, what the infallible server methods need (compressive privatization's
    /// matrix); the `checked_*` methods call it after the memory guard.
    fn prepare_server(&self) -> Result<()> {
        Ok(())
    }

    /// [`Estimator::estimate_raw`], for estimators that can fail on their own (memory of an
    /// iterative solver, an interruption).
    fn try_estimate_raw(&self, counts: &[u64], n: u64) -> Result<Vec<f64>> {
        Ok(self.estimate_raw(counts, n))
    }
    /// [`Estimator::estimate_from_frequencies`], fallible (see `try_estimate_raw`).
    fn try_estimate_from_frequencies(&self, freq: &[f64]) -> Result<Vec<f64>> {
        Ok(self.estimate_from_frequencies(freq))
    }
    /// [`Estimator::expected_frequencies`], fallible (see `try_estimate_raw`).
    fn try_expected_frequencies(&self, dist: &[f64]) -> Result<Vec<f64>> {
        Ok(self.expected_frequencies(dist))
    }
    /// [`Estimator::channel_apply`], fallible (see `try_estimate_raw`).
    fn try_channel_apply(&self, w: &[f64]) -> Result<Vec<f64>> {
        Ok(self.channel_apply(w))
    }

    /// [`Estimator::estimate_raw`] after the memory guard.
    fn checked_estimate_raw(&self, counts: &[u64], n: u64) -> Result<Vec<f64>> {
        self.footprint(Operation::Estimate).check()?;
        self.prepare_server()?;
        self.try_estimate_raw(counts, n)
    }
    /// [`Estimator::estimate_from_frequencies`] after the memory guard.
    fn checked_estimate_from_frequencies(&self, freq: &[f64]) -> Result<Vec<f64>> {
        self.footprint(Operation::Estimate).check()?;
        self.prepare_server()?;
        self.try_estimate_from_frequencies(freq)
    }
    /// [`Estimator::expected_frequencies`] after the memory guard.
    fn checked_expected_frequencies(&self, dist: &[f64]) -> Result<Vec<f64>> {
        self.footprint(Operation::ChannelProduct).check()?;
        self.prepare_server()?;
        self.try_expected_frequencies(dist)
    }
    /// [`Estimator::channel_apply`] after the memory guard.
    fn checked_channel_apply(&self, w: &[f64]) -> Result<Vec<f64>> {
        self.footprint(Operation::ChannelProduct).check()?;
        self.prepare_server()?;
        self.try_channel_apply(w)
    }
    /// [`Estimator::simulate_counts`] after the memory guard; the total number of users
    /// must fit in u64.
    fn checked_simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let users = total_users(true_counts)?;
        self.footprint(Operation::Simulate { users }).check()?;
        self.simulate_counts(key, true_counts)
    }
}

/// `Σ true_counts`, refused when it does not fit in u64 (the aggregate's counts are u64).
pub fn total_users(true_counts: &[u64]) -> Result<u64> {
    true_counts
        .iter()
        .try_fold(0u64, |total, &c| total.checked_add(c))
        .ok_or_else(|| {
            Error::Value(
                "true_counts sum to 2^64 users or more; the aggregate counts are 64-bit".into(),
            )
        })
}

/// Implement [`Estimator`] by delegating to a mechanism's inherent methods; `$inner`
/// reaches the object that has them (`self` itself, or a wrapped core). With `symmetric`,
/// the four linear maps come from the mechanism's `symmetric()` [`SymmetricEstimator`].
macro_rules! impl_estimator {
    (@linear delegate $this:ident => $inner:expr) => {
        fn estimate_raw(&$this, counts: &[u64], n: u64) -> Vec<f64> {
            $inner.estimate_raw(counts, n)
        }
        fn estimate_from_frequencies(&$this, freq: &[f64]) -> Vec<f64> {
            $inner.estimate_from_frequencies(freq)
        }
        fn expected_frequencies(&$this, dist: &[f64]) -> Vec<f64> {
            $inner.expected_frequencies(dist)
        }
        fn channel_apply(&$this, w: &[f64]) -> Vec<f64> { $inner.channel_apply(w) }
    };
    (@linear fallible $this:ident => $inner:expr) => {
        $crate::mechanisms::estimator::impl_estimator!(@linear delegate $this => $inner);
        fn try_estimate_raw(&$this, counts: &[u64], n: u64) -> $crate::error::Result<Vec<f64>> {
            $inner.try_estimate_raw(counts, n)
        }
        fn try_estimate_from_frequencies(&$this, freq: &[f64]) -> $crate::error::Result<Vec<f64>> {
            $inner.try_estimate_from_frequencies(freq)
        }
        fn try_expected_frequencies(&$this, dist: &[f64]) -> $crate::error::Result<Vec<f64>> {
            $inner.try_expected_frequencies(dist)
        }
        fn try_channel_apply(&$this, w: &[f64]) -> $crate::error::Result<Vec<f64>> {
            $inner.try_channel_apply(w)
        }
    };
    (@linear symmetric $this:ident => $inner:expr) => {
        fn estimate_raw(&$this, counts: &[u64], n: u64) -> Vec<f64> {
            $inner.symmetric().estimate_raw(counts, n)
        }
        fn estimate_from_frequencies(&$this, freq: &[f64]) -> Vec<f64> {
            $inner.symmetric().estimate_from_frequencies(freq)
        }
        fn expected_frequencies(&$this, dist: &[f64]) -> Vec<f64> {
            $inner.symmetric().apply(dist)
        }
        fn channel_apply(&$this, w: &[f64]) -> Vec<f64> { $inner.symmetric().apply(w) }
    };
    (@common $linear:ident $this:ident => $inner:expr) => {
        fn epsilon(&$this) -> f64 { $inner.epsilon() }
        fn realized_epsilon(&$this) -> f64 { $inner.realized_epsilon() }
        fn probabilities(&$this) -> (f64, f64) { $inner.probabilities() }
        fn channel_row(&$this, x: u64, row: &mut [f64]) { $inner.channel_row(x, row) }
        fn footprint(&$this, op: $crate::mechanisms::Operation) -> $crate::memory::Footprint {
            $inner.footprint(op)
        }
        $crate::mechanisms::estimator::impl_estimator!(@linear $linear $this => $inner);
    };
    (index $t:ty) => {
        $crate::mechanisms::estimator::impl_estimator!(index $t, delegate);
    };
    (index $t:ty, $linear:ident) => {
        impl $crate::mechanisms::Estimator for $t {
            $crate::mechanisms::estimator::impl_estimator!(@common $linear self => self);
            fn prepare_server(&self) -> $crate::error::Result<()> {
                $crate::mechanisms::IndexMechanism::prepare_server(self)
            }
            fn domain_size(&self) -> u64 {
                $crate::mechanisms::IndexMechanism::domain(self)
            }
            fn statistic_size(&self) -> u64 {
                $crate::mechanisms::IndexMechanism::output_size(self)
            }
            fn channel_outputs(&self) -> u64 {
                $crate::mechanisms::IndexMechanism::output_size(self)
            }
            fn simulate_counts(
                &self,
                key: &$crate::rng::Key,
                true_counts: &[u64],
            ) -> $crate::error::Result<Vec<u64>> {
                self.simulate(key, true_counts)
            }
        }
    };
    (bits $t:ty, $this:ident => $inner:expr, $linear:ident) => {
        impl $crate::mechanisms::Estimator for $t {
            $crate::mechanisms::estimator::impl_estimator!(@common $linear $this => $inner);
            fn domain_size(&self) -> u64 {
                $crate::mechanisms::BitMechanism::domain(self)
            }
            fn statistic_size(&self) -> u64 {
                $crate::mechanisms::BitMechanism::bits(self)
            }
            fn channel_outputs(&self) -> u64 {
                let bits = $crate::mechanisms::BitMechanism::bits(self);
                if bits < 64 { 1 << bits } else { u64::MAX }
            }
            fn simulate_counts(
                &$this,
                key: &$crate::rng::Key,
                true_counts: &[u64],
            ) -> $crate::error::Result<Vec<u64>> {
                $inner.simulate(key, true_counts)
            }
        }
    };
}
pub(crate) use impl_estimator;

impl_estimator!(index randomized_response::RandomizedResponse, symmetric);
impl_estimator!(index asymmetric_binary::AsymmetricBinaryResponse, fallible);
impl_estimator!(index hadamard_response::HadamardResponse, fallible);
impl_estimator!(index block_hadamard::BlockHadamardResponse, fallible);
impl_estimator!(index high_low_hadamard::HighLowHadamardResponse, fallible);
impl_estimator!(index local_hashing::OptimizedLocalHashing, fallible);
impl_estimator!(index compressive::CompressivePrivatization, fallible);
impl_estimator!(index hadamard_compressive::HadamardCompressivePrivatization, fallible);
impl_estimator!(index one_bit_hadamard::OneBitHadamardResponse, fallible);
impl_estimator!(bits unary_encoding::Rappor, self => (**self), symmetric);
impl_estimator!(bits unary_encoding::OptimizedUnaryEncoding, self => (**self), symmetric);
impl_estimator!(bits subset_selection::SubsetSelection, self => self, symmetric);

/// Build an `rows × cols` channel matrix from a row function, refusing sizes above
/// `max_entries`.
pub fn channel_matrix(
    rows: u64,
    cols: u64,
    max_entries: u64,
    row: impl Fn(u64, &mut [f64]) + Sync,
) -> Result<Vec<f64>> {
    let entries = rows.checked_mul(cols).unwrap_or(u64::MAX);
    if entries > max_entries {
        return Err(Error::Value(format!(
            "the channel matrix has {rows} × {cols} = {entries} entries, more than \
             max_entries = {max_entries}"
        )));
    }
    let mut q = crate::memory::zeroed_vec::<f64>(entries as usize, "the channel matrix")?;
    q.par_chunks_mut(cols as usize)
        .enumerate()
        .for_each(|(x, r)| row(x as u64, r));
    Ok(q)
}
