//! LDP mechanisms: each module holds one mechanism's sampler (client side), aggregation and
//! unbiased estimator (server side), with the paper equations it implements.
//!
//! Shared machinery here:
//! * [`IndexMechanism`]: mechanisms whose report is one integer in `[0, output_size)`, with
//!   generic parallel [`privatize`], [`aggregate`] (histogram with validation) and
//!   [`simulate`] (the report histogram of given users, without storing their reports).
//! * validation of ε and k, and the report integer types.
//!
//! Reproducibility: user `u` (0-based position in the input) is privatized with the stream
//! of chunk `u / SAMPLE_CHUNK` (see `rng`). `simulate(true_counts)` enumerates users in value
//! order with the same chunking, so its histogram equals — exactly, for the same seed — the
//! histogram of `privatize` applied to the values sorted in increasing order.

pub mod compressive;
pub mod hadamard_response;
pub mod local_hashing;
pub mod randomized_response;
pub mod subset_selection;
pub mod unary_encoding;

use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{par_fill_chunks, stream, Key, StreamRng, SAMPLE_CHUNK};
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

/// Unsigned integer types reports are stored in (the smallest that holds `output_size − 1`).
pub trait ReportInt: Copy + Send + Sync + Default + 'static {
    fn from_u64(v: u64) -> Self;
    fn to_u64(self) -> u64;
}

macro_rules! report_int {
    ($($t:ty),*) => {$(
        impl ReportInt for $t {
            #[inline(always)]
            fn from_u64(v: u64) -> Self { v as $t }
            #[inline(always)]
            fn to_u64(self) -> u64 { self as u64 }
        }
    )*};
}
report_int!(u8, u16, u32, u64);

/// A mechanism whose report is one integer in `[0, output_size)`.
pub trait IndexMechanism: Sync {
    /// k: values are integers in `[0, k)`.
    fn domain(&self) -> u64;
    /// Number of distinct reports.
    fn output_size(&self) -> u64;
    /// One report for value `x < k`, drawing randomness from `rng` only.
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64;
    /// Called before a batch of `batch` reports (e.g. to build a cache worth its cost only
    /// for large batches; it allocates through the memory guard). Must not change the reports.
    fn prepare(&self, _batch: usize) -> Result<()> {
        Ok(())
    }
}

/// The first value `≥ k`, as an error naming its position.
fn check_values(values: &[u32], k: u64) -> Result<()> {
    if k >= MAX_DOMAIN {
        return Ok(());
    }
    if let Some(i) = values.par_iter().position_first(|&v| v as u64 >= k) {
        return Err(Error::Value(format!(
            "values must lie in [0, {k}): values[{i}] = {}",
            values[i]
        )));
    }
    Ok(())
}

/// Privatize every value into `out` (same length), in parallel and reproducibly.
pub fn privatize<M: IndexMechanism, R: ReportInt>(
    mechanism: &M,
    key: &Key,
    values: &[u32],
    out: &mut [R],
) -> Result<()> {
    assert_eq!(values.len(), out.len(), "one report per value");
    check_values(values, mechanism.domain())?;
    mechanism.prepare(values.len())?;
    par_fill_chunks(key, out, |rng, first, chunk| {
        for (o, &x) in chunk.iter_mut().zip(&values[first..]) {
            *o = R::from_u64(mechanism.sample(rng, x as u64));
        }
    })
}

/// What [`aggregate`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// Reports counted.
    pub valid: u64,
    /// Reports outside `[0, output_size)` (dropped).
    pub invalid: u64,
    /// Position of the first invalid report.
    pub first_invalid: Option<usize>,
}

/// Add the histogram of `reports` to `counts` (length `output_size`). Reports out of range
/// are counted in the tally; with `drop_invalid == false` any of them is an error and
/// `counts` is left untouched.
pub fn aggregate<R: ReportInt>(
    reports: &[R],
    counts: &mut [u64],
    drop_invalid: bool,
) -> Result<Tally> {
    let size = counts.len() as u64;
    // One histogram per worker thread (not per rayon split): for large output spaces the
    // histograms, not the reports, dominate the cost.
    let part = reports
        .len()
        .div_ceil(rayon::current_num_threads())
        .max(SAMPLE_CHUNK);
    let (histogram, invalid) = reports
        .par_chunks(part)
        .map(|chunk| {
            let mut h = vec![0u64; counts.len()];
            let mut bad = 0u64;
            for &r in chunk {
                let r = r.to_u64();
                if r < size {
                    h[r as usize] += 1;
                } else {
                    bad += 1;
                }
            }
            (h, bad)
        })
        .reduce(
            || (vec![0u64; counts.len()], 0u64),
            |(mut a, bad_a), (b, bad_b)| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                (a, bad_a + bad_b)
            },
        );
    let first_invalid = (invalid > 0)
        .then(|| reports.iter().position(|r| r.to_u64() >= size))
        .flatten();
    if invalid > 0 && !drop_invalid {
        let i = first_invalid.unwrap_or(0);
        return Err(Error::Value(format!(
            "{invalid} of {} reports lie outside [0, {size}); the first is reports[{i}] = {} \
             (pass on_invalid='drop' to drop and count them)",
            reports.len(),
            reports[i].to_u64()
        )));
    }
    counts.iter_mut().zip(&histogram).for_each(|(c, h)| *c += h);
    Ok(Tally {
        valid: reports.len() as u64 - invalid,
        invalid,
        first_invalid,
    })
}

/// The report histogram of `true_counts[x]` users holding each value x, without storing
/// any report (see the module documentation for its equality with `privatize`).
pub fn simulate<M: IndexMechanism>(
    mechanism: &M,
    key: &Key,
    true_counts: &[u64],
) -> Result<Vec<u64>> {
    if true_counts.len() as u64 != mechanism.domain() {
        return Err(Error::Value(format!(
            "true_counts must have length k = {}, got {}",
            mechanism.domain(),
            true_counts.len()
        )));
    }
    let size = mechanism.output_size() as usize;
    crate::memory::check_fits(size, 8, "the report histogram")?;
    mechanism.prepare(usize::MAX)?;
    // Cumulative user counts: user u holds the value x with starts[x] ≤ u < starts[x + 1].
    let mut starts = Vec::with_capacity(true_counts.len() + 1);
    let mut total = 0u64;
    starts.push(0);
    for &c in true_counts {
        total = total
            .checked_add(c)
            .ok_or_else(|| Error::Value("the total number of users overflows 2^64".into()))?;
        starts.push(total);
    }
    let chunks = total.div_ceil(SAMPLE_CHUNK as u64);
    let histogram = (0..chunks)
        .into_par_iter()
        .fold(
            || vec![0u64; size],
            |mut h, c| {
                let mut rng = stream(key, c);
                let first = c * SAMPLE_CHUNK as u64;
                let last = (first + SAMPLE_CHUNK as u64).min(total);
                // The value of user `first`: the last x whose start is ≤ first.
                let mut x = starts.partition_point(|&s| s <= first) - 1;
                for u in first..last {
                    while starts[x + 1] <= u {
                        x += 1;
                    }
                    h[mechanism.sample(&mut rng, x as u64) as usize] += 1;
                }
                h
            },
        )
        .reduce(
            || vec![0u64; size],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
    Ok(histogram)
}

/// A mechanism whose report is a vector of `bits()` bits, stored as a row of `⌈bits/8⌉`
/// bytes in `numpy.packbits` layout: bit j is `(row[j / 8] >> (7 − j % 8)) & 1`, and the
/// padding bits after the last one are 0. The aggregate is the vector of per-bit counts.
pub trait BitMechanism: Sync {
    /// k: values are integers in `[0, k)`.
    fn domain(&self) -> u64;
    /// Bits per report.
    fn bits(&self) -> u64;
    /// Write the report of `x < k` into `row` (`⌈bits/8⌉` bytes, zeroed by the caller),
    /// drawing randomness from `rng` only.
    fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]);
    /// Whether a row with padding bits already checked to be zero is a possible report
    /// (e.g. exactly d ones for subset selection). Default: every pattern is.
    fn valid_row(&self, _row: &[u8]) -> bool {
        true
    }
}

/// Bytes per packed report row.
pub fn row_bytes(bits: u64) -> usize {
    bits.div_ceil(8) as usize
}

/// Set bit j of a packed row.
#[inline(always)]
pub fn set_bit(row: &mut [u8], j: u64) {
    row[(j / 8) as usize] |= 0x80 >> (j % 8);
}

/// Bit j of a packed row.
#[inline(always)]
pub fn get_bit(row: &[u8], j: u64) -> bool {
    row[(j / 8) as usize] & (0x80 >> (j % 8)) != 0
}

/// Privatize every value into `out` (`values.len()` rows of `row_bytes(bits)` bytes), in
/// parallel; user u draws from the stream of chunk `u / SAMPLE_CHUNK`, as for index
/// mechanisms.
pub fn privatize_bits<M: BitMechanism>(
    mechanism: &M,
    key: &Key,
    values: &[u32],
    out: &mut [u8],
) -> Result<()> {
    let width = row_bytes(mechanism.bits());
    assert_eq!(values.len() * width, out.len(), "one row per value");
    check_values(values, mechanism.domain())?;
    if width == 0 {
        return Ok(());
    }
    out.par_chunks_mut(SAMPLE_CHUNK * width)
        .enumerate()
        .for_each(|(c, rows)| {
            let mut rng = stream(key, c as u64);
            let first = c * SAMPLE_CHUNK;
            for (row, &x) in rows.chunks_exact_mut(width).zip(&values[first..]) {
                mechanism.sample_into(&mut rng, x as u64, row);
            }
        });
    Ok(())
}

/// Whether a row's padding bits are zero and the mechanism accepts it.
fn row_is_valid<M: BitMechanism>(mechanism: &M, row: &[u8]) -> bool {
    let pad = (8 * row.len() as u64 - mechanism.bits()) as u32;
    let padding_clear = pad == 0
        || row
            .last()
            .is_none_or(|&b| b & ((1u16 << pad) - 1) as u8 == 0);
    padding_clear && mechanism.valid_row(row)
}

/// Add the per-bit counts of packed `reports` (`n · row_bytes` bytes) to `counts` (length
/// `bits`). Malformed rows are tallied; with `drop_invalid == false` any of them is an error
/// and `counts` is left untouched.
pub fn aggregate_bits<M: BitMechanism>(
    mechanism: &M,
    reports: &[u8],
    counts: &mut [u64],
    drop_invalid: bool,
) -> Result<Tally> {
    let bits = mechanism.bits();
    let width = row_bytes(bits);
    if counts.len() as u64 != bits {
        return Err(Error::Value(format!(
            "counts must have length {bits}, got {}",
            counts.len()
        )));
    }
    if width == 0 || reports.len() % width != 0 {
        return Err(Error::Value(format!(
            "packed reports must have {width} bytes per row, got {} bytes in all",
            reports.len()
        )));
    }
    let n = reports.len() / width;
    // Count byte values per byte position (one increment per byte, however many bits are
    // set), then expand: bit t of position b was set in Σ_{v: bit t of v} count[b][v] rows.
    let (byte_counts, invalid) = reports
        .par_chunks(SAMPLE_CHUNK * width)
        .fold(
            || (vec![0u64; width * 256], 0u64),
            |(mut h, mut bad), rows| {
                for row in rows.chunks_exact(width) {
                    if !row_is_valid(mechanism, row) {
                        bad += 1;
                        continue;
                    }
                    for (b, &byte) in row.iter().enumerate() {
                        h[b * 256 + byte as usize] += 1;
                    }
                }
                (h, bad)
            },
        )
        .reduce(
            || (vec![0u64; width * 256], 0u64),
            |(mut a, bad_a), (b, bad_b)| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                (a, bad_a + bad_b)
            },
        );
    let mut histogram = vec![0u64; bits as usize];
    for (b, values) in byte_counts.chunks_exact(256).enumerate() {
        for (v, &c) in values.iter().enumerate().filter(|&(_, &c)| c > 0) {
            for t in 0..8 {
                if v & (0x80 >> t) != 0 {
                    histogram[8 * b + t] += c;
                }
            }
        }
    }
    let first_invalid = (invalid > 0)
        .then(|| {
            reports
                .chunks_exact(width)
                .position(|row| !row_is_valid(mechanism, row))
        })
        .flatten();
    if invalid > 0 && !drop_invalid {
        return Err(Error::Value(format!(
            "{invalid} of {n} reports are malformed (padding bits set, or not a possible report \
             of this mechanism); the first is row {} (pass on_invalid='drop' to drop and count them)",
            first_invalid.unwrap_or(0)
        )));
    }
    counts.iter_mut().zip(&histogram).for_each(|(c, h)| *c += h);
    Ok(Tally {
        valid: (n as u64) - invalid,
        invalid,
        first_invalid,
    })
}

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

    /// [`Estimator::estimate_raw`] after the memory guard.
    fn checked_estimate_raw(&self, counts: &[u64], n: u64) -> Result<Vec<f64>> {
        self.footprint(Operation::Estimate).check()?;
        Ok(self.estimate_raw(counts, n))
    }
    /// [`Estimator::estimate_from_frequencies`] after the memory guard.
    fn checked_estimate_from_frequencies(&self, freq: &[f64]) -> Result<Vec<f64>> {
        self.footprint(Operation::Estimate).check()?;
        Ok(self.estimate_from_frequencies(freq))
    }
    /// [`Estimator::expected_frequencies`] after the memory guard.
    fn checked_expected_frequencies(&self, dist: &[f64]) -> Result<Vec<f64>> {
        self.footprint(Operation::ChannelProduct).check()?;
        Ok(self.expected_frequencies(dist))
    }
    /// [`Estimator::channel_apply`] after the memory guard.
    fn checked_channel_apply(&self, w: &[f64]) -> Result<Vec<f64>> {
        self.footprint(Operation::ChannelProduct).check()?;
        Ok(self.channel_apply(w))
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
        $crate::mechanisms::impl_estimator!(@linear $linear $this => $inner);
    };
    (index $t:ty) => {
        $crate::mechanisms::impl_estimator!(index $t, delegate);
    };
    (index $t:ty, $linear:ident) => {
        impl $crate::mechanisms::Estimator for $t {
            $crate::mechanisms::impl_estimator!(@common $linear self => self);
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
                $crate::mechanisms::simulate(self, key, true_counts)
            }
        }
    };
    (bits $t:ty, $this:ident => $inner:expr, $linear:ident) => {
        impl $crate::mechanisms::Estimator for $t {
            $crate::mechanisms::impl_estimator!(@common $linear $this => $inner);
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
impl_estimator!(index hadamard_response::HadamardResponse);
impl_estimator!(index local_hashing::OptimizedLocalHashing);
impl_estimator!(index compressive::CompressivePrivatization);
impl_estimator!(bits unary_encoding::Rappor, self => (**self), symmetric);
impl_estimator!(bits unary_encoding::OptimizedUnaryEncoding, self => (**self), symmetric);
impl_estimator!(bits subset_selection::SubsetSelection, self => self, symmetric);

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

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers shared by the mechanisms' unit tests.
    use super::*;
    use crate::rng::key_from_u64;

    /// Max |log Q(y|x) − log Q(y|x')| over a row-major channel matrix, and the max row-sum error.
    pub fn channel_stats(q: &[f64], rows: usize) -> (f64, f64) {
        let cols = q.len() / rows;
        let mut worst = 0.0f64;
        let mut sum_err = 0.0f64;
        for x in 0..rows {
            let s: f64 = q[x * cols..(x + 1) * cols].iter().sum();
            sum_err = sum_err.max((s - 1.0).abs());
        }
        for y in 0..cols {
            let column = (0..rows).map(|x| q[x * cols + y]);
            let (lo, hi) = column.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
            worst = worst.max((hi / lo).ln());
        }
        (worst, sum_err)
    }

    /// Empirical report frequencies of `draws` privatizations of `x`.
    pub fn empirical_row<M: IndexMechanism>(m: &M, x: u32, draws: usize, seed: u64) -> Vec<f64> {
        let values = vec![x; draws];
        let mut reports = vec![0u64; draws];
        privatize(m, &key_from_u64(seed), &values, &mut reports).unwrap();
        let mut counts = vec![0u64; m.output_size() as usize];
        aggregate(&reports, &mut counts, false).unwrap();
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    /// `simulate(true_counts)` equals the histogram of privatizing the sorted values with the
    /// same key (the reproducibility contract of the module documentation).
    pub fn assert_simulate_matches_privatize<M: IndexMechanism>(
        m: &M,
        true_counts: &[u64],
        seed: u64,
    ) {
        let key = key_from_u64(seed);
        let simulated = simulate(m, &key, true_counts).unwrap();
        let values: Vec<u32> = true_counts
            .iter()
            .enumerate()
            .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
            .collect();
        let mut reports = vec![0u64; values.len()];
        privatize(m, &key, &values, &mut reports).unwrap();
        let mut counts = vec![0u64; m.output_size() as usize];
        aggregate(&reports, &mut counts, false).unwrap();
        assert_eq!(simulated, counts);
    }

    /// `Σ_x dist_x · Q(·|x)` from the channel rows one by one: the definition that
    /// `expected_frequencies` must match.
    pub fn expected_from_rows<E: Estimator>(m: &E, dist: &[f64]) -> Vec<f64> {
        let size = m.channel_outputs() as usize;
        let (mut row, mut total) = (vec![0.0; size], vec![0.0; size]);
        for (x, &p) in dist.iter().enumerate() {
            m.channel_row(x as u64, &mut row);
            total.iter_mut().zip(&row).for_each(|(t, q)| *t += p * q);
        }
        total
    }

    /// Pearson chi-square of observed frequencies against probabilities, for `draws` draws.
    pub fn chi_square(freq: &[f64], probs: &[f64], draws: usize) -> f64 {
        freq.iter()
            .zip(probs)
            .filter(|(_, &p)| p > 0.0)
            .map(|(&f, &p)| {
                let (o, e) = (f * draws as f64, p * draws as f64);
                (o - e) * (o - e) / e
            })
            .sum()
    }
}
