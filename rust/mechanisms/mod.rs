//! LDP mechanisms: each mechanism module holds one mechanism's sampler (client side),
//! aggregation and unbiased estimator (server side), with the paper equations it implements.
//!
//! # Architecture
//! The machinery the mechanisms share has one module per role; their public items are
//! re-exported here, so that `mechanisms::privatize` or `mechanisms::Estimator` is the path
//! to use:
//! * [`index_reports`]: mechanisms whose report is one integer in `[0, output_size)`
//!   ([`IndexMechanism`]), with the generic parallel [`privatize`] and [`aggregate`]
//!   (histogram with validation, all or nothing, in O(output_size) memory) and its [`Tally`];
//! * [`bit_reports`]: mechanisms whose report is a packed bit vector ([`BitMechanism`]): the
//!   row layout, [`privatize_bits`], and the per-bit counting of [`aggregate_bits`];
//! * [`estimator`]: the server-side interface of every mechanism ([`Estimator`]: guarantee,
//!   unbiased estimator, channel products, exact simulation, and the memory footprint of each
//!   [`Operation`]) and the algebra of the symmetric mechanisms ([`SymmetricEstimator`]);
//! * [`simulation`]: the helpers of the index mechanisms' exact simulations of the report
//!   histogram, at a cost that does not grow with the number of users (the module explains
//!   the decomposition every mechanism's `simulate` uses).
//!
//! This module holds what they all share: the validation of ε ([`check_epsilon`], and the
//! rule on the realized ε, [`check_realized`]), of k ([`check_domain`]), of the input values
//! and of counts vectors, and the fast division of 32-bit values ([`FastDiv`]).
//!
//! Reproducibility: user `u` (0-based position in the input) is privatized with the stream
//! of chunk `u / SAMPLE_CHUNK` (see `rng`). A simulation draws from streams of its own, one
//! per fixed chunk of values or of outputs, so a seeded simulation is bit-identical whatever
//! the thread count; it has the law of privatizing the users, but is not the histogram of
//! privatizing them in any particular order with the same key.

// One module per mechanism.
pub mod asymmetric_binary;
pub mod block_hadamard;
pub mod compressive;
pub mod hadamard_compressive;
pub mod hadamard_response;
pub mod high_low_hadamard;
pub mod local_hashing;
pub mod one_bit_hadamard;
pub mod public_coin_hashing;
pub mod randomized_response;
pub mod subset_selection;
pub mod two_stage_rappor;
pub mod unary_encoding;

// The shared machinery, one module per role (see "Architecture" above).
pub mod bit_reports;
pub mod estimator;
pub mod index_reports;
pub mod simulation;
#[cfg(test)]
pub(crate) mod testing;

// The short paths (`mechanisms::privatize`, `mechanisms::Estimator`, ...).
pub use bit_reports::{
    aggregate_bit_groups, aggregate_bits, bit_aggregation_footprint,
    bit_groups_aggregation_footprint, clear_bit, clear_padding, get_bit, ones, privatize_bits,
    row_bytes, set_bit, BitMechanism, BIT_TILE_BYTES,
};
pub use estimator::{
    channel_matrix, total_users, vector_footprint, Estimator, Operation, SymmetricEstimator,
};
pub(crate) use index_reports::as_atomic;
pub use index_reports::{
    aggregate, aggregate_with_total, aggregation_footprint, privatize, IndexMechanism, ReportInt,
    Tally, AGGREGATE_CHUNK, PRIVATE_HISTOGRAM_MAX,
};
pub use simulation::MAX_HYPERGEOMETRIC_USERS;
pub(crate) use simulation::{
    add_uniform_reports, add_uniform_reports_at, draw_own_counts, simulation_footprint,
    simulation_stream, simulation_users, split_simulation_users, spread_interruptible,
    SimulationPhase, SIMULATION_VALUES,
};

use crate::error::{Error, Result};
use rayon::prelude::*;

/// Largest supported domain: values travel as u32.
pub const MAX_DOMAIN: u64 = 1 << 32;

/// Largest ε accepted: `e^ε` must stay finite with room for the channels' arithmetic
/// (`e^700` ≈ 1e304; `e^709.8` overflows double precision).
pub const MAX_EPSILON: f64 = 700.0;

/// Largest relative shortfall of the realized ε below the requested one
/// ([`check_realized`]): beyond it, double precision cannot represent the channel asked for.
pub const REALIZED_TOLERANCE: f64 = 1e-3;

/// ε must be a finite number in `(0, MAX_EPSILON]`.
pub fn check_epsilon(epsilon: f64) -> Result<()> {
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(Error::Value(format!(
            "epsilon must be a finite number > 0, got {epsilon:?}"
        )));
    }
    if epsilon > MAX_EPSILON {
        return Err(Error::Value(format!(
            "epsilon = {epsilon:?} is too large: e^epsilon overflows double precision; the \
             largest accepted is {MAX_EPSILON:?} (and above about 30 most mechanisms add no \
             noise that double precision can represent)"
        )));
    }
    Ok(())
}

/// The shared rule on the guarantee a mechanism's channel realizes in double precision:
/// never above ε, and not below it by more than [`REALIZED_TOLERANCE`] (relative). A very
/// small ε rounds the channel's probabilities to equal values (no information, an estimator
/// that divides by zero); a very large one saturates them (no noise left to represent). Both
/// are refused here with the realized value, instead of silently estimating from a channel
/// other than the one asked for.
pub fn check_realized(name: &str, epsilon: f64, realized: f64) -> Result<()> {
    if !(realized <= epsilon) {
        return Err(Error::Value(format!(
            "{name} with epsilon = {epsilon:?} would realize epsilon' = {realized:?}, above the \
             request; refused"
        )));
    }
    let shortfall = (epsilon - realized) / epsilon;
    if !(realized > 0.0 && shortfall <= REALIZED_TOLERANCE) {
        let advice = if epsilon < 1.0 {
            "too small: the channel's probabilities round to (nearly) equal values; use a \
             larger epsilon"
        } else {
            "too large: the channel's probabilities saturate; use a smaller epsilon"
        };
        return Err(Error::Value(format!(
            "epsilon = {epsilon:?} cannot be represented by {name} in double precision: its \
             channel would realize only epsilon' = {realized:?} (more than {:?}% below the \
             request); epsilon is {advice}",
            REALIZED_TOLERANCE * 100.0
        )));
    }
    Ok(())
}

/// k must lie in [2, 2^32].
pub fn check_domain(k: u64) -> Result<()> {
    if !(2..=MAX_DOMAIN).contains(&k) {
        return Err(Error::Value(format!(
            "k (the number of possible values) must lie in [2, 2^32], got {k}"
        )));
    }
    Ok(())
}

/// Division of 32-bit values by a fixed divisor with one 128-bit multiply (Lemire, Kaser &
/// Kurz 2019, "Faster remainder by direct computation"): exact for every `x < 2^32`.
#[derive(Clone, Copy, Debug)]
pub struct FastDiv {
    divisor: u64,
    inverse: u64,
}

impl FastDiv {
    pub fn new(divisor: u64) -> Self {
        assert!(divisor >= 1, "FastDiv divides by a positive number");
        // ⌈2^64 / d⌉ (wrapping to 0 for d = 1, handled in div_rem).
        Self {
            divisor,
            inverse: (u64::MAX / divisor).wrapping_add(1),
        }
    }

    /// `(x / d, x % d)` for `x < 2^32`.
    #[inline(always)]
    pub fn div_rem(&self, x: u64) -> (u64, u64) {
        debug_assert!(x < 1 << 32);
        if self.divisor == 1 {
            return (x, 0);
        }
        if self.divisor > 1 << 32 {
            return (0, x);
        }
        let q = ((self.inverse as u128 * x as u128) >> 64) as u64;
        (q, x - q * self.divisor)
    }
}

/// Items per task of [`first_at_least`].
const SCAN_CHUNK: usize = 1 << 14;

/// The position of the first item `≥ bound`. Chunks are scanned with a plain maximum (which
/// vectorizes, ~0.3 ns per item) and only the first offending chunk item by item: rayon's
/// per-item `position_first` costs ~20 ns per item, more than privatizing it.
pub(crate) fn first_at_least<T: Copy + Into<u64> + Sync + Ord + Default>(
    items: &[T],
    bound: u64,
) -> Option<usize> {
    let chunk = items
        .par_chunks(SCAN_CHUNK)
        .position_first(|c| c.iter().copied().max().unwrap_or_default().into() >= bound)?;
    let first = chunk * SCAN_CHUNK;
    items[first..]
        .iter()
        .position(|&v| v.into() >= bound)
        .map(|i| first + i)
}

/// The first value `≥ k`, as an error naming its position.
pub(crate) fn check_values(values: &[u32], k: u64) -> Result<()> {
    if k >= MAX_DOMAIN {
        return Ok(());
    }
    if let Some(i) = first_at_least(values, k) {
        return Err(Error::Value(format!(
            "values must lie in [0, {k}): values[{i}] = {}",
            values[i]
        )));
    }
    Ok(())
}

/// Check that a counts vector has the expected length.
pub fn check_counts(counts: &[u64], expected: usize, what: &str) -> Result<u64> {
    if counts.len() != expected {
        return Err(Error::Value(format!(
            "{what} must have length {expected}, got {}",
            counts.len()
        )));
    }
    Ok(counts.iter().sum())
}

#[cfg(test)]
mod fast_div_tests {
    use super::FastDiv;

    #[test]
    fn matches_hardware_division() {
        let xs = [
            0u64,
            1,
            2,
            3,
            7,
            1000,
            65535,
            65536,
            (1 << 31) + 5,
            (1 << 32) - 1,
        ];
        for d in [
            1u64,
            2,
            3,
            7,
            15,
            255,
            1023,
            65535,
            1 << 20,
            (1 << 32) - 1,
            1 << 32,
            (1 << 33) - 1,
        ] {
            let f = FastDiv::new(d);
            for &x in &xs {
                assert_eq!(f.div_rem(x), (x / d, x % d), "x {x} d {d}");
            }
            for x in (0..1u64 << 32).step_by(104_729) {
                assert_eq!(f.div_rem(x), (x / d, x % d), "x {x} d {d}");
            }
        }
    }
}
