//! LDP mechanisms: each module holds one mechanism's sampler (client side), aggregation and
//! unbiased estimator (server side), with the paper equations it implements.
//!
//! Shared machinery here:
//! * [`IndexMechanism`]: mechanisms whose report is one integer in `[0, output_size)`, with
//!   generic parallel [`privatize`] and [`aggregate`] (histogram with validation, all or
//!   nothing, in O(output_size) memory), and the helpers of their simulations (below).
//! * validation of ε and k, and the report integer types.
//!
//! Reproducibility: user `u` (0-based position in the input) is privatized with the stream
//! of chunk `u / SAMPLE_CHUNK` (see `rng`). A simulation draws from streams of its own, one
//! per fixed chunk of values or of outputs, so a seeded simulation is bit-identical whatever
//! the thread count; it has the law of privatizing the users, but is not the histogram of
//! privatizing them in any particular order with the same key.
//!
//! # Simulation
//! `simulate(true_counts)` draws the report histogram of `n_x = true_counts[x]` independent
//! users holding each value x, exactly in law, at a cost that does not grow with the number
//! of users. Every index mechanism's realized channel takes one value `a_x` on a set
//! `C_x` of `h_x` outputs (the value's *own set*) and another, `c_x < a_x`, on the other
//! `S − h_x` outputs, so that `h_x a_x + (S − h_x) c_x = 1`. It is therefore the mixture
//!
//! `Q(·|x) = α_x·U(all S outputs) + (1 − α_x)·U(C_x)`,  `α_x = S·c_x`,
//!
//! with `U(A)` the uniform distribution on A: off `C_x` the mixture gives `α_x/S = c_x`; on
//! `C_x`, `c_x + (1 − S c_x)/h_x = a_x` by the normalization. Per mechanism (with the
//! probabilities the sampler actually uses, not the unrounded formulas):
//! * randomized response: `C_x = {x}`, `1 − α = (k·p − 1)/(k − 1)` (keep probability p);
//! * Hadamard response: `C_x` of the (b, B) construction, `h = b/2`,
//!   `1 − α = (K·ρ − h)/(K − h)` (ρ the probability of reporting inside `C_x`);
//! * High-Low Hadamard response: the uniform part covers only the Hadamard part `[0, S)`;
//!   a sensitive value's own set is its Hadamard set (`1 − α = 2ρ − 1`), a non-sensitive
//!   value's is its dedicated slot (`1 − α = q`);
//! * local hashing: `C_x = {A·g + h_A(x) : A < g^t}`, `h = g^t`,
//!   `1 − α = (g·p − 1)/(g − 1)` (p the keep probability of g-ary randomized response);
//! * compressive privatization: `C_x` the +1 rows of column x, `h = n_x`,
//!   `1 − α = (m·ρ(n_x) − n_x)/(m − n_x)` (0 for a column with no −1 or no +1 entries).
//!
//! (The asymmetric binary mechanism has two outputs and needs none of this: two binomials.)
//!
//! These weights are computed in double precision from the realized probabilities (an error
//! of a few 1e−16, below the accuracy of the floating-point binomial sampler that uses them).
//! Users being independent, the histogram is then
//!
//! `counts = Mult(U; U(all)) + Σ_x Mult(K_x; U(C_x))`, `K_x ~ Binomial(n_x, 1 − α_x)`,
//! `U = Σ_x (n_x − K_x)`
//!
//! (a sum of independent multinomials with the same cell probabilities is one multinomial of
//! the summed count). `draw_own_counts` draws the `K_x` (one binomial per value);
//! `add_uniform_reports` draws the uniform part by recursive halving
//! (`rng::spread_uniform`: the users of a range split between its halves by a binomial,
//! stopping where the count is 0), O(min(U, S)) draws; each mechanism draws its own sets
//! (see its module), in O(S) memory with no per-thread histogram. The binomials are
//! `rand_distr`'s (see `rng::binomial`): exact in law up to their double-precision
//! arithmetic. The cost is independent of n once n exceeds the output size (n = 10^12 users of
//! k = 10^4 values take milliseconds); a simulation's memory is a few arrays of S counts
//! (`Estimator::footprint`).

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

use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{binomial, par_fill_chunks, spread_uniform, stream, Key, StreamRng, SAMPLE_CHUNK};
use crate::simd::multiversion;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

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
pub trait ReportInt: crate::memory::Zeroable + Send + Sync + Default + 'static {
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
    /// The reports of consecutive `values` (`out.len() == values.len()`) from one stream:
    /// `sample` for each in order, unless a mechanism can overlap work across them (it must
    /// draw the same words in the same order).
    fn sample_into<R: ReportInt>(&self, rng: &mut StreamRng, values: &[u32], out: &mut [R])
    where
        Self: Sized,
    {
        for (o, &x) in out.iter_mut().zip(values) {
            *o = R::from_u64(self.sample(rng, x as u64));
        }
    }
    /// What the server-side operations need built first (`Estimator::prepare_server`): by
    /// default what the largest batch would.
    fn prepare_server(&self) -> Result<()> {
        self.prepare(usize::MAX)
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
        mechanism.sample_into(rng, &values[first..first + chunk.len()], chunk)
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

/// Output sizes up to this many counts (1 MiB of u64) are histogrammed in private tables, at
/// most one per worker thread: cache-sized, so the increments stay in cache and need no
/// atomics. Larger outputs are counted in place ([`aggregate`]).
pub const PRIVATE_HISTOGRAM_MAX: usize = 1 << 17;

/// Reports per chunk of aggregation (the unit of interruption and of roll-back).
pub const AGGREGATE_CHUNK: usize = 1 << 16;

/// How [`aggregate`] counts `reports` reports into `size` counts: private tables (how many),
/// or in place.
fn private_tables(size: usize, reports: usize) -> Option<usize> {
    (size <= PRIVATE_HISTOGRAM_MAX).then(|| {
        rayon::current_num_threads()
            .min(reports.div_ceil(AGGREGATE_CHUNK))
            .max(1)
    })
}

/// The buffers [`aggregate`] allocates to count `reports` reports into `size` counts (checked
/// by [`aggregate`] itself before it allocates): for small outputs one private table of
/// `size` counts per part (at most one per worker thread, so at most threads × 1 MiB); for
/// large outputs one roll-back flag per chunk of [`AGGREGATE_CHUNK`] reports. Never
/// O(threads × size) for a large output.
pub fn aggregation_footprint(size: u64, reports: u64) -> Footprint {
    let f = Footprint::new(format!("aggregating {reports} reports into {size} counts"));
    match private_tables(size.min(usize::MAX as u64) as usize, reports as usize) {
        Some(parts) => f.add("per-thread tables", (parts as u64).saturating_mul(size), 8),
        None => f.add(
            "roll-back flags",
            reports.div_ceil(AGGREGATE_CHUNK as u64),
            1,
        ),
    }
}

/// Add the histogram of `reports` to `counts` (length `output_size`); see
/// [`aggregate_with_total`], which this is with the total of `counts` computed here.
pub fn aggregate<R: ReportInt>(
    reports: &[R],
    counts: &mut [u64],
    drop_invalid: bool,
) -> Result<Tally> {
    aggregate_with_total(reports, counts, drop_invalid, None)
}

/// Add the histogram of `reports` to `counts` (length `output_size`). Reports out of range
/// are counted in the tally; with `drop_invalid == false` any of them is an error.
///
/// All or nothing: on an error (invalid reports without `drop_invalid`, an interruption, a
/// count that would pass 2^64 − 1, memory) `counts` is left as it was.
///
/// Memory is O(size) at most ([`aggregation_footprint`]): outputs of at most
/// [`PRIVATE_HISTOGRAM_MAX`] counts are histogrammed in cache-sized private tables (one per
/// part of the reports, at most one per worker thread), summed and added with checked
/// additions. Larger outputs are counted in place with atomic increments (exact integer
/// additions, so the result does not depend on their order or on the thread count); each
/// chunk of [`AGGREGATE_CHUNK`] reports is flagged once applied, so that an interruption or
/// invalid reports roll back exactly the applied chunks. In place, no count can wrap: with
/// `T = Σ counts` (`total`, when the caller knows it — an aggregator's n; otherwise summed
/// here with overflow detection) every count is at most T, so `T + reports.len() ≤ 2^64 − 1`
/// (checked first) bounds every count after the batch. `total` must be `Σ counts` exactly.
pub fn aggregate_with_total<R: ReportInt>(
    reports: &[R],
    counts: &mut [u64],
    drop_invalid: bool,
    total: Option<u64>,
) -> Result<Tally> {
    let size = counts.len();
    let footprint = aggregation_footprint(size as u64, reports.len() as u64);
    footprint.check()?;
    let outcome = match private_tables(size, reports.len()) {
        Some(parts) => aggregate_private(reports, counts, parts, drop_invalid),
        None => aggregate_in_place(reports, counts, total, crate::interrupt::check),
    };
    let (invalid, rollback) = outcome?;
    let first_invalid = (invalid > 0)
        .then(|| {
            reports
                .par_iter()
                .position_first(|r| r.to_u64() >= size as u64)
        })
        .flatten();
    if invalid > 0 && !drop_invalid {
        if let Some(undo) = rollback {
            undo(counts);
        }
        let i = first_invalid.unwrap_or(0);
        return Err(Error::Value(format!(
            "{invalid} of {} reports lie outside [0, {size}); the first is reports[{i}] = {} \
             (pass on_invalid='drop' to drop and count them)",
            reports.len(),
            reports[i].to_u64()
        )));
    }
    Ok(Tally {
        valid: reports.len() as u64 - invalid,
        invalid,
        first_invalid,
    })
}

/// What an aggregation strategy returns: the number of invalid reports, and (when the
/// counts were already changed) how to undo it.
type Counted<'a> = (u64, Option<Box<dyn FnOnce(&mut [u64]) + 'a>>);

/// Private tables: `parts` tables of `counts.len()`, one per contiguous part of the reports,
/// summed, then added to `counts` only if no sum wraps and no invalid report is refused
/// (nothing to undo).
fn aggregate_private<'a, R: ReportInt>(
    reports: &'a [R],
    counts: &mut [u64],
    parts: usize,
    drop_invalid: bool,
) -> Result<Counted<'a>> {
    let size = counts.len();
    let mut tables = crate::memory::allocate_zeroed::<u64>(parts * size, "per-thread tables")?;
    let part_len = reports
        .len()
        .div_ceil(AGGREGATE_CHUNK)
        .div_ceil(parts)
        .max(1)
        * AGGREGATE_CHUNK;
    let invalid = tables
        .par_chunks_mut(size.max(1))
        .zip(reports.par_chunks(part_len))
        .map(|(table, part)| -> Result<u64> {
            let mut bad = 0u64;
            for chunk in part.chunks(AGGREGATE_CHUNK) {
                crate::interrupt::check()?;
                for &r in chunk {
                    let r = r.to_u64();
                    if r < size as u64 {
                        table[r as usize] += 1;
                    } else {
                        bad += 1;
                    }
                }
            }
            Ok(bad)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))?;
    if invalid > 0 && !drop_invalid {
        return Ok((invalid, None));
    }
    let (sum, rest) = tables.split_at_mut(size);
    for table in rest.chunks_exact(size.max(1)) {
        sum.iter_mut().zip(table).for_each(|(s, t)| *s += t);
    }
    if let Some(y) = (0..size).find(|&y| counts[y].checked_add(sum[y]).is_none()) {
        return Err(count_overflow(y));
    }
    counts.iter_mut().zip(sum.iter()).for_each(|(c, s)| *c += s);
    Ok((invalid, None))
}

fn count_overflow(y: usize) -> Error {
    Error::Value(format!(
        "count {y} would exceed 2^64 − 1 reports; refused (the counts were left unchanged)"
    ))
}

/// In place: atomic increments into `counts`, chunk by chunk, after proving that no count
/// can wrap ([`aggregate_with_total`]); interrupted (`check` fails before a chunk), the
/// applied chunks are rolled back.
fn aggregate_in_place<'a, R: ReportInt>(
    reports: &'a [R],
    counts: &mut [u64],
    total: Option<u64>,
    check: impl Fn() -> Result<()> + Sync,
) -> Result<Counted<'a>> {
    let size = counts.len() as u64;
    let total = match total {
        Some(t) => t,
        None => sum_counts(counts)?,
    };
    if total.checked_add(reports.len() as u64).is_none() {
        return Err(Error::Value(format!(
            "adding {} reports to counts of {total} reports would pass 2^64 − 1 in all; refused",
            reports.len()
        )));
    }
    let chunks = reports.len().div_ceil(AGGREGATE_CHUNK);
    let mut applied = crate::memory::allocate_zeroed::<bool>(chunks, "roll-back flags")?;
    let cells = as_atomic(counts);
    let outcome = reports
        .par_chunks(AGGREGATE_CHUNK)
        .zip(applied.par_iter_mut())
        .map(|(chunk, flag)| -> Result<u64> {
            check()?;
            let mut bad = 0u64;
            for &r in chunk {
                let r = r.to_u64();
                if r < size {
                    cells[r as usize].fetch_add(1, Ordering::Relaxed);
                } else {
                    bad += 1;
                }
            }
            *flag = true;
            Ok(bad)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b));
    let undo = move |counts: &mut [u64]| {
        let cells = as_atomic(counts);
        reports
            .par_chunks(AGGREGATE_CHUNK)
            .zip(applied.par_iter())
            .filter(|(_, &done)| done)
            .for_each(|(chunk, _)| {
                for &r in chunk {
                    let r = r.to_u64();
                    if r < size {
                        cells[r as usize].fetch_sub(1, Ordering::Relaxed);
                    }
                }
            });
    };
    match outcome {
        Ok(invalid) => Ok((invalid, Some(Box::new(undo)))),
        Err(e) => {
            undo(counts);
            Err(e)
        }
    }
}

/// `Σ counts`, refused when it passes 2^64 − 1 (counts that no aggregation can have made).
fn sum_counts(counts: &[u64]) -> Result<u64> {
    counts
        .par_chunks(1 << 16)
        .map(|chunk| {
            crate::interrupt::check()?;
            chunk
                .iter()
                .try_fold(0u64, |s, &c| s.checked_add(c))
                .ok_or_else(counts_overflowed)
        })
        .try_reduce(|| 0, |a, b| a.checked_add(b).ok_or_else(counts_overflowed))
}

fn counts_overflowed() -> Error {
    Error::Value("the counts sum to 2^64 or more reports: they cannot come from aggregation".into())
}

/// `counts` viewed as atomic cells, for increments from several threads. Sound: `AtomicU64`
/// has the size and bit validity of `u64` and, on the targets where their alignments agree
/// (asserted at compile time), its layout; the exclusive borrow guarantees that no
/// non-atomic access overlaps the returned view.
pub(crate) fn as_atomic(counts: &mut [u64]) -> &[AtomicU64] {
    const _: () = assert!(
        std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>()
            && std::mem::size_of::<AtomicU64>() == std::mem::size_of::<u64>()
    );
    // SAFETY: see above; the lifetime of the view is that of the exclusive borrow.
    unsafe { &*(counts as *mut [u64] as *const [AtomicU64]) }
}

// -- simulation (module documentation, "Simulation") ------------------------------------

/// Stream ids of simulations: bit 63 set (privatization uses the chunk numbers, far below),
/// the phase in bits 56–62 and a phase-specific index below 2^56.
const SIMULATION_STREAMS: u64 = 1 << 63;

/// The phases of a simulation, each with its own streams.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SimulationPhase {
    /// Per chunk of values: the own-set counts `K_x` (and, for some mechanisms, their reports).
    OwnCounts = 0,
    /// One stream: the uniform users' split over chunks of outputs.
    UniformChunks = 1,
    /// Per chunk of outputs: the uniform users inside it.
    Uniform = 2,
    /// Mechanism-specific own-set passes (index: pass and chunk).
    OwnSets = 3,
}

/// The stream of `index` in a phase of a simulation under `key`.
pub(crate) fn simulation_stream(key: &Key, phase: SimulationPhase, index: u64) -> StreamRng {
    debug_assert!(index < 1 << 56);
    stream(key, SIMULATION_STREAMS | (phase as u64) << 56 | index)
}

/// Values per chunk of the per-value phases of a simulation.
pub(crate) const SIMULATION_VALUES: usize = 1 << 12;

/// Outputs per chunk of the uniform phase.
const UNIFORM_OUTPUTS: usize = 1 << 16;

/// The total number of users of `true_counts` (length k), refused when the length is not k
/// or the total does not fit in u64.
pub(crate) fn simulation_users(k: u64, true_counts: &[u64]) -> Result<u64> {
    if true_counts.len() as u64 != k {
        return Err(Error::Value(format!(
            "true_counts must have length k = {k}, got {}",
            true_counts.len()
        )));
    }
    total_users(true_counts)
}

/// The most users one simulation that splits users by hypergeometric draws accepts:
/// `rand_distr`'s H2PE sampler computes in `f64` and, past about 2^40 users, no longer follows
/// the law (it was measured to hang near 5.5·10^15 and to fail on a non-finite value near
/// 2^63). More users are simulated in parts whose aggregates are merged.
pub const MAX_HYPERGEOMETRIC_USERS: u64 = 1 << 40;

/// [`simulation_users`] for the simulations that split users by hypergeometric draws
/// per value (subset selection, two-stage RAPPOR; one-bit HR's passes split merged classes and
/// are tested exact up to 2^64 − 1 users): also refuses more than
/// [`MAX_HYPERGEOMETRIC_USERS`] users with a clear error.
pub(crate) fn split_simulation_users(name: &str, k: u64, true_counts: &[u64]) -> Result<u64> {
    let users = simulation_users(k, true_counts)?;
    if users > MAX_HYPERGEOMETRIC_USERS {
        return Err(Error::Value(format!(
            "{name} simulates at most 2^40 = {MAX_HYPERGEOMETRIC_USERS} users at once, got \
             {users}: beyond that the hypergeometric sampler's floating-point arithmetic no \
             longer follows the law; simulate the users in parts and merge the aggregators"
        )));
    }
    Ok(users)
}

/// The footprint of a simulation into `outputs` counts with `arrays` arrays of that size (the
/// result included), plus the uniform phase's per-chunk counts.
pub(crate) fn simulation_footprint(name: &str, outputs: u64, arrays: u64) -> Footprint {
    Footprint::new(format!("{name} simulate"))
        .add("the report counts and work arrays", arrays.saturating_mul(outputs), 8)
        .add(
            "uniform users per chunk of outputs",
            outputs.div_ceil(UNIFORM_OUTPUTS as u64),
            8,
        )
        .hint("lower k (the simulation's memory is proportional to the number of outputs, not to the number of users)")
}

/// Outputs per interruption check of [`spread_interruptible`].
const SPREAD_CHECK_OUTPUTS: u64 = 1 << 16;

/// `rng::spread_uniform` over `[start, start + len)`, halving first down to ranges of at most
/// [`SPREAD_CHECK_OUTPUTS`] outputs and checking for interruption before each (the same law:
/// halving is how `spread_uniform` splits too).
pub(crate) fn spread_interruptible(
    rng: &mut StreamRng,
    start: u64,
    len: u64,
    count: u64,
    emit: &mut impl FnMut(u64, u64),
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    if len <= SPREAD_CHECK_OUTPUTS {
        crate::interrupt::check()?;
        spread_uniform(rng, start, len, count, emit);
        return Ok(());
    }
    let left = len / 2;
    let to_left = binomial(rng, count, left as f64 / len as f64);
    spread_interruptible(rng, start, left, to_left, emit)?;
    spread_interruptible(rng, start + left, len - left, count - to_left, emit)
}

/// Add a Multinomial(`users`; uniform over all `out.len()` outputs) draw to `out`, in
/// O(min(users, outputs)) binomial draws: one stream splits the users over chunks of
/// [`UNIFORM_OUTPUTS`] outputs (halving, with probabilities proportional to the chunk
/// lengths), then every chunk spreads its users with its own stream, in parallel.
pub(crate) fn add_uniform_reports(key: &Key, out: &mut [u64], users: u64) -> Result<()> {
    add_uniform_reports_at(key, out, users, 0)
}

/// [`add_uniform_reports`] with the streams shifted by `first_stream`: the split over chunks
/// uses the `UniformChunks` stream `first_stream`, chunk c the `Uniform` stream
/// `first_stream + c`. A mechanism that draws several disjoint ranges of outputs under one
/// key gives each range streams of its own (e.g. its first output: a range of L outputs
/// uses fewer than L chunk streams).
pub(crate) fn add_uniform_reports_at(
    key: &Key,
    out: &mut [u64],
    users: u64,
    first_stream: u64,
) -> Result<()> {
    let size = out.len() as u64;
    if users == 0 || size == 0 {
        return Ok(());
    }
    let chunks = out.len().div_ceil(UNIFORM_OUTPUTS);
    let mut per_chunk = crate::memory::allocate_zeroed::<u64>(chunks, "uniform users per chunk")?;
    let mut rng = simulation_stream(key, SimulationPhase::UniformChunks, first_stream);
    // Halving over whole chunks: [first, first + n) of `chunks` covers the outputs
    // [first·C, min((first + n)·C, size)).
    fn split(
        rng: &mut StreamRng,
        first: usize,
        n: usize,
        users: u64,
        size: u64,
        per_chunk: &mut [u64],
    ) {
        if users == 0 {
            return;
        }
        if n == 1 {
            per_chunk[first] = users;
            return;
        }
        let c = UNIFORM_OUTPUTS as u64;
        let end = |i: usize| (i as u64 * c).min(size);
        let left = n / 2;
        let (lo, mid, hi) = (end(first), end(first + left), end(first + n));
        let to_left = binomial(rng, users, (mid - lo) as f64 / (hi - lo) as f64);
        split(rng, first, left, to_left, size, per_chunk);
        split(
            rng,
            first + left,
            n - left,
            users - to_left,
            size,
            per_chunk,
        );
    }
    split(&mut rng, 0, chunks, users, size, &mut per_chunk);
    out.par_chunks_mut(UNIFORM_OUTPUTS)
        .zip(per_chunk.par_iter())
        .enumerate()
        .try_for_each(|(c, (piece, &users))| {
            crate::interrupt::check()?;
            let mut rng = simulation_stream(key, SimulationPhase::Uniform, first_stream + c as u64);
            spread_uniform(&mut rng, 0, piece.len() as u64, users, &mut |y, n| {
                piece[y as usize] += n
            });
            Ok(())
        })
}

/// Draw `K_x ~ Binomial(n_x, w_x)` for every value, in parallel over chunks of
/// [`SIMULATION_VALUES`] values (chunk c uses the `OwnCounts` stream c): `place(rng, x, K_x)`
/// is called for each value with users, in increasing x within a chunk, with the chunk's
/// stream for any further draws (e.g. the value's own-set reports). Returns the number of
/// users left for the uniform part, `Σ (n_x − K_x)`. `weight(x)` is the own-set probability
/// `1 − α_x`. Checks for interruption before every value with users.
pub(crate) fn draw_own_counts<F>(
    key: &Key,
    true_counts: &[u64],
    weight: impl Fn(u64) -> f64 + Sync,
    place: F,
) -> Result<u64>
where
    F: Fn(&mut StreamRng, u64, u64) -> Result<()> + Sync,
{
    true_counts
        .par_chunks(SIMULATION_VALUES)
        .enumerate()
        .map(|(c, chunk)| -> Result<u64> {
            let mut rng = simulation_stream(key, SimulationPhase::OwnCounts, c as u64);
            let first = (c * SIMULATION_VALUES) as u64;
            let mut uniform = 0u64;
            for (i, &n) in chunk.iter().enumerate() {
                if n == 0 {
                    continue;
                }
                crate::interrupt::check()?;
                let x = first + i as u64;
                let kept = binomial(&mut rng, n, weight(x));
                uniform += n - kept;
                place(&mut rng, x, kept)?;
            }
            Ok(uniform)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))
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
    /// Write the report of the user at position `user` of the batch (0-based) holding
    /// `x`, drawing randomness from `rng` only. By default [`BitMechanism::sample_into`]: the
    /// report does not depend on the position. A mechanism whose public, data-independent
    /// part is assigned by position (two-stage RAPPOR's stage bit) overrides it.
    #[inline]
    fn sample_user(&self, rng: &mut StreamRng, user: usize, x: u64, row: &mut [u8]) {
        let _ = user;
        self.sample_into(rng, x, row)
    }
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

/// Clear bit j of a packed row.
#[inline(always)]
pub fn clear_bit(row: &mut [u8], j: u64) {
    row[(j / 8) as usize] &= !(0x80u8 >> (j % 8));
}

/// Clear the padding bits after the first `bits` bits of a packed row.
#[inline(always)]
pub fn clear_padding(row: &mut [u8], bits: u64) {
    let used = (bits % 8) as u32;
    if used != 0 {
        if let Some(last) = row.last_mut() {
            *last &= !(0xFFu8 >> used);
        }
    }
}

/// The number of set bits of a packed row.
#[inline]
pub fn ones(row: &[u8]) -> u64 {
    row.iter().map(|b| b.count_ones() as u64).sum()
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
    // Interruption is checked before every 2^20 bytes of rows.
    let rows_per_check = ((1usize << 20) / width).clamp(1, SAMPLE_CHUNK);
    out.par_chunks_mut(SAMPLE_CHUNK * width)
        .enumerate()
        .try_for_each(|(c, rows)| {
            let mut rng = stream(key, c as u64);
            let first = c * SAMPLE_CHUNK;
            for (i, (row, &x)) in rows
                .chunks_exact_mut(width)
                .zip(&values[first..])
                .enumerate()
            {
                if i % rows_per_check == 0 {
                    crate::interrupt::check()?;
                }
                mechanism.sample_user(&mut rng, first + i, x as u64, row);
            }
            Ok(())
        })
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

/// Bytes of a row counted by one task's bit-plane counters in [`aggregate_bits`]: 8 u8
/// counters per byte (32 KiB, L1-sized) and their u32 totals (128 KiB).
pub const BIT_TILE_BYTES: usize = 1 << 12;

multiversion! {
    /// `planes[t·span + b] += bit t of row[b]` (t = 0 … 7 from the least significant bit):
    /// vertical counters, one u8 lane per byte of the row, so one row costs 8 shift/mask/add
    /// passes over its bytes whatever bits are set (vectorized: 32 or 64 bytes per
    /// instruction). The caller flushes before a counter can pass 255.
    fn add_bit_planes(row: &[u8], planes: &mut [u8]) {
        let span = row.len();
        for (t, plane) in planes.chunks_exact_mut(span).enumerate() {
            for (p, &byte) in plane.iter_mut().zip(row) {
                *p = p.wrapping_add((byte >> t) & 1);
            }
        }
    }
}

multiversion! {
    /// [`add_bit_planes`] for four rows at once: each counter is loaded and stored once per
    /// four rows (adds up to 4).
    fn add_bit_planes4(r0: &[u8], r1: &[u8], r2: &[u8], r3: &[u8], planes: &mut [u8]) {
        let span = r0.len();
        let (r1, r2, r3) = (&r1[..span], &r2[..span], &r3[..span]);
        for (t, plane) in planes.chunks_exact_mut(span).enumerate() {
            for b in 0..span {
                let sum = ((r0[b] >> t) & 1) + ((r1[b] >> t) & 1) + ((r2[b] >> t) & 1)
                    + ((r3[b] >> t) & 1);
                plane[b] = plane[b].wrapping_add(sum);
            }
        }
    }
}

multiversion! {
    /// Add the u8 counters to their u32 totals and clear them.
    fn flush_bit_planes(planes: &mut [u8], wide: &mut [u32]) {
        for (w, p) in wide.iter_mut().zip(planes.iter_mut()) {
            *w += *p as u32;
            *p = 0;
        }
    }
}

/// Bytes of reports one task of [`aggregate_bits`] reads (the unit of interruption).
const BIT_TASK_BYTES: usize = 1 << 22;

/// The buffers [`aggregate_bits`] allocates for `n` rows of `bits` bits: the per-bit
/// histogram, the bit-plane counters of a tile of [`BIT_TILE_BYTES`] per worker thread (5
/// bytes per bit: 160 KiB), and, when invalid rows are dropped, one validity bit per row.
/// O(bits + n/8 + threads · 160 KiB).
pub fn bit_aggregation_footprint(bits: u64, rows: u64) -> Footprint {
    bit_groups_aggregation_footprint(bits, rows, 1)
}

/// The buffers [`aggregate_bit_groups`] allocates for `rows` rows of `bits` bits counted in
/// `groups` groups: [`bit_aggregation_footprint`] with a histogram per group (the groups
/// share the bit-plane counters): O(groups · bits + threads · 160 KiB + n/8).
pub fn bit_groups_aggregation_footprint(bits: u64, rows: u64, groups: u64) -> Footprint {
    let tile = row_bytes(bits).min(BIT_TILE_BYTES) as u64;
    Footprint::new(format!("aggregating {rows} reports of {bits} bits"))
        .add("the per-bit histogram", groups.saturating_mul(bits), 8)
        .add(
            "bit-plane counters (one set per thread)",
            (rayon::current_num_threads() as u64).saturating_mul(tile * 8),
            5,
        )
        .add("row validity bits", rows.div_ceil(64), 8)
}

/// Add the per-bit counts of packed `reports` (`n · row_bytes` bytes) to `counts` (length
/// `bits`). Malformed rows are tallied; with `drop_invalid == false` any of them is an error.
/// All or nothing: on an error (malformed rows without `drop_invalid`, an interruption, a
/// count that would pass 2^64 − 1, memory) `counts` is left as it was.
///
/// Rows are cut into tiles of at most [`BIT_TILE_BYTES`] bytes; a task counts one tile over
/// a block of rows in vertical (bit-plane) counters: 8 u8 counters per byte of the tile, one
/// per bit position, each row added with 8 vectorized shift/mask/add passes over its bytes
/// (`add_bit_planes`), flushed into u32 totals every 255 rows. The totals go to a shared
/// histogram with atomic integer additions (exact, so the result does not depend on the
/// thread count). The bytes are read once, sequentially: this counts at memory bandwidth
/// (the previous byte-value tables, 256 counts per byte, did one random increment per byte
/// into 2 MiB). Memory: [`bit_aggregation_footprint`].
pub fn aggregate_bits<M: BitMechanism>(
    mechanism: &M,
    reports: &[u8],
    counts: &mut [u64],
    drop_invalid: bool,
) -> Result<Tally> {
    aggregate_bit_groups(mechanism, reports, counts, 1, |_| 0, drop_invalid)
}

/// [`aggregate_bits`] with the rows split into `groups` groups: row r's bits are added to
/// `counts[g·bits .. (g + 1)·bits]` with `g = group(r)` (a function of the row, e.g. a
/// public bit of it; values ≥ `groups` count in the last group). `counts` has length
/// `groups · bits`. The same validation, all-or-nothing update, overflow checks and
/// thread-count independence; memory [`bit_groups_aggregation_footprint`]. Each task makes
/// one pass per group over its block of rows (4 MiB), counting that group's rows in the
/// one set of cache-sized counters (with the previous byte-value tables, two alternating
/// groups measured 1.2–1.5× the time of one group, against 1.6–2× for one pass into a
/// table per group).
pub fn aggregate_bit_groups<M: BitMechanism>(
    mechanism: &M,
    reports: &[u8],
    counts: &mut [u64],
    groups: usize,
    group: impl Fn(&[u8]) -> usize + Sync,
    drop_invalid: bool,
) -> Result<Tally> {
    let bits = mechanism.bits();
    let width = row_bytes(bits);
    let groups = groups.max(1);
    let size = (bits as usize).checked_mul(groups).ok_or_else(|| {
        Error::Memory(format!(
            "{groups} groups of {bits} counts do not fit in memory"
        ))
    })?;
    if counts.len() != size {
        return Err(Error::Value(format!(
            "counts must have length {size}, got {}",
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
    bit_groups_aggregation_footprint(bits, n as u64, groups as u64).check()?;
    // Rows per block: about BIT_TASK_BYTES of reports per task (validation reads whole rows).
    let block_rows = (BIT_TASK_BYTES / width).max(1);
    let invalid = reports
        .par_chunks(block_rows * width)
        .map(|rows| -> Result<u64> {
            crate::interrupt::check()?;
            Ok(rows
                .chunks_exact(width)
                .filter(|row| !row_is_valid(mechanism, row))
                .count() as u64)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))?;
    let first_invalid = (invalid > 0)
        .then(|| {
            reports
                .par_chunks_exact(width)
                .position_first(|row| !row_is_valid(mechanism, row))
        })
        .flatten();
    if invalid > 0 && !drop_invalid {
        return Err(Error::Value(format!(
            "{invalid} of {n} reports are malformed (padding bits set, or not a possible report \
             of this mechanism); the first is row {} (pass on_invalid='drop' to drop and count them)",
            first_invalid.unwrap_or(0)
        )));
    }
    // Which rows to count, when some are dropped: one bit per row.
    let valid_rows = if invalid > 0 {
        let mut words = crate::memory::allocate_zeroed::<u64>(n.div_ceil(64), "row validity bits")?;
        words
            .par_chunks_mut(block_rows.div_ceil(64).max(1))
            .enumerate()
            .try_for_each(|(c, chunk)| {
                crate::interrupt::check()?;
                let first = c * block_rows.div_ceil(64).max(1) * 64;
                for (w, word) in chunk.iter_mut().enumerate() {
                    for t in 0..64 {
                        let i = first + 64 * w + t;
                        if i < n && row_is_valid(mechanism, &reports[i * width..(i + 1) * width]) {
                            *word |= 1 << t;
                        }
                    }
                }
                Ok::<(), Error>(())
            })?;
        Some(words)
    } else {
        None
    };
    let mut histogram = crate::memory::allocate_zeroed::<u64>(size, "the per-bit histogram")?;
    let cells = as_atomic(&mut histogram);
    let tile = width.min(BIT_TILE_BYTES);
    let tiles = width.div_ceil(tile);
    let tile_rows = (BIT_TASK_BYTES / tile).max(1);
    let blocks = n.div_ceil(tile_rows);
    (0..blocks * tiles).into_par_iter().try_for_each_init(
        || {
            let planes = crate::memory::allocate_zeroed::<u8>(8 * tile, "bit-plane counters");
            let wide = crate::memory::allocate_zeroed::<u32>(8 * tile, "bit-plane totals");
            planes.and_then(|p| wide.map(|w| (p, w)))
        },
        |buffers, task| -> Result<()> {
            crate::interrupt::check()?;
            let (planes, wide) = match buffers {
                Ok(b) => (&mut b.0, &mut b.1),
                Err(e) => return Err(Error::Memory(e.to_string())),
            };
            let (block, t) = (task / tiles, task % tiles);
            let (first_byte, last_byte) = (t * tile, ((t + 1) * tile).min(width));
            let span = last_byte - first_byte;
            let first_row = block * tile_rows;
            let last_row = (first_row + tile_rows).min(n);
            // One pass over the block per group (the counters stay cache-sized).
            for g in 0..groups {
                wide[..8 * span].fill(0);
                let mut pending = 0u32; // rows in the u8 counters since the last flush
                let mut counted = false;
                let mut batch: [usize; 4] = [0; 4]; // rows waiting to be added, four at a time
                let mut batched = 0;
                let row = |i: usize| &reports[i * width + first_byte..i * width + last_byte];
                for i in first_row..last_row {
                    if let Some(valid) = &valid_rows {
                        if valid[i / 64] >> (i % 64) & 1 == 0 {
                            continue;
                        }
                    }
                    if groups > 1
                        && group(&reports[i * width..(i + 1) * width]).min(groups - 1) != g
                    {
                        continue;
                    }
                    counted = true;
                    batch[batched] = i;
                    batched += 1;
                    if batched == 4 {
                        let [a, b, c, d] = batch;
                        add_bit_planes4(row(a), row(b), row(c), row(d), &mut planes[..8 * span]);
                        batched = 0;
                        pending += 4;
                        if pending + 4 > u8::MAX as u32 {
                            flush_bit_planes(&mut planes[..8 * span], &mut wide[..8 * span]);
                            pending = 0;
                        }
                    }
                }
                for &i in &batch[..batched] {
                    add_bit_planes(row(i), &mut planes[..8 * span]);
                }
                if !counted {
                    continue;
                }
                flush_bit_planes(&mut planes[..8 * span], &mut wide[..8 * span]);
                for (t, plane) in wide[..8 * span].chunks_exact(span).enumerate() {
                    for (b, &c) in plane.iter().enumerate() {
                        // Plane t counts bit t (from the least significant) of each byte:
                        // bit j = 8·byte + 7 − t of the row in numpy.packbits order.
                        let j = 8 * (first_byte + b) + 7 - t;
                        if c > 0 && j < bits as usize {
                            cells[g * bits as usize + j].fetch_add(c as u64, Ordering::Relaxed);
                        }
                    }
                }
            }
            Ok(())
        },
    )?;
    if let Some(j) = (0..size).find(|&j| counts[j].checked_add(histogram[j]).is_none()) {
        return Err(count_overflow(j));
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
        $crate::mechanisms::impl_estimator!(@linear delegate $this => $inner);
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
        $crate::mechanisms::impl_estimator!(@linear $linear $this => $inner);
    };
    (index $t:ty) => {
        $crate::mechanisms::impl_estimator!(index $t, delegate);
    };
    (index $t:ty, $linear:ident) => {
        impl $crate::mechanisms::Estimator for $t {
            $crate::mechanisms::impl_estimator!(@common $linear self => self);
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

    /// Exact mean and covariance (row-major, S × S) of the report histogram of
    /// `true_counts[x]` independent users of each value x, from the channel rows: a sum of
    /// independent multinomials, `Σ_x n_x Q_x` and `Σ_x n_x (diag Q_x − Q_x Q_xᵀ)`.
    pub fn histogram_moments<E: Estimator>(m: &E, true_counts: &[u64]) -> (Vec<f64>, Vec<f64>) {
        let size = m.channel_outputs() as usize;
        let (mut mean, mut cov) = (vec![0.0; size], vec![0.0; size * size]);
        let mut row = vec![0.0; size];
        for (x, &n) in true_counts.iter().enumerate() {
            let n = n as f64;
            m.channel_row(x as u64, &mut row);
            for y in 0..size {
                mean[y] += n * row[y];
                cov[y * size + y] += n * row[y];
                for z in 0..size {
                    cov[y * size + z] -= n * row[y] * row[z];
                }
            }
        }
        (mean, cov)
    }

    /// `dᵀ C⁻¹ d` over the first `S − 1` coordinates (the last is fixed by the total), by a
    /// Cholesky factorization of that block of the covariance `cov` (S × S, row-major).
    pub fn mahalanobis(d: &[f64], cov: &[f64]) -> f64 {
        let size = d.len();
        let n = size - 1;
        let mut l = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let mut v = cov[i * size + j];
                for t in 0..j {
                    v -= l[i * n + t] * l[j * n + t];
                }
                if i == j {
                    assert!(v > 0.0, "the covariance is not positive definite");
                    l[i * n + i] = v.sqrt();
                } else {
                    l[i * n + j] = v / l[j * n + j];
                }
            }
        }
        // Solve L z = d: the statistic is |z|².
        let mut z = vec![0.0; n];
        for i in 0..n {
            let mut v = d[i];
            for t in 0..i {
                v -= l[i * n + t] * z[t];
            }
            z[i] = v / l[i * n + i];
        }
        z.iter().map(|v| v * v).sum()
    }

    /// `ln Γ(a)` (Lanczos, g = 7, 9 terms; relative error below 1e−13 for a > 0).
    fn ln_gamma(a: f64) -> f64 {
        const C: [f64; 9] = [
            0.999_999_999_999_809_9,
            676.520_368_121_885_1,
            -1_259.139_216_722_402_8,
            771.323_428_777_653_1,
            -176.615_029_162_140_6,
            12.507_343_278_686_905,
            -0.138_571_095_265_720_12,
            9.984_369_578_019_572e-6,
            1.505_632_735_149_311_6e-7,
        ];
        let a = a - 1.0;
        let t = a + 7.5;
        let series = C[1..]
            .iter()
            .enumerate()
            .fold(C[0], |s, (i, c)| s + c / (a + 1.0 + i as f64));
        0.5 * (2.0 * std::f64::consts::PI).ln() + (a + 0.5) * t.ln() - t + series.ln()
    }

    /// `P(χ²_df > x)`: the regularized upper incomplete gamma `Q(df/2, x/2)` (series below
    /// `a + 1`, continued fraction above; Numerical Recipes §6.2).
    pub fn chi_square_tail(df: usize, x: f64) -> f64 {
        let (a, x) = (df as f64 / 2.0, x / 2.0);
        if x <= 0.0 {
            return 1.0;
        }
        let prefix = (-x + a * x.ln() - ln_gamma(a)).exp();
        if x < a + 1.0 {
            let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
            for _ in 0..10_000 {
                ap += 1.0;
                term *= x / ap;
                sum += term;
                if term < sum * 1e-16 {
                    break;
                }
            }
            1.0 - sum * prefix
        } else {
            let tiny = 1e-300;
            let mut b = x + 1.0 - a;
            let (mut c, mut d) = (1.0 / tiny, 1.0 / b);
            let mut h = d;
            for i in 1..10_000 {
                let an = -(i as f64) * (i as f64 - a);
                b += 2.0;
                d = an * d + b;
                d = if d.abs() < tiny { tiny } else { d };
                c = b + an / c;
                c = if c.abs() < tiny { tiny } else { c };
                d = 1.0 / d;
                let delta = d * c;
                h *= delta;
                if (delta - 1.0).abs() < 1e-16 {
                    break;
                }
            }
            prefix * h
        }
    }

    /// The critical value of χ²_df at level 0.1% (bisection on [`chi_square_tail`]).
    pub fn chi_square_critical(df: usize) -> f64 {
        let (mut lo, mut hi) = (0.0, 10.0 * df as f64 + 100.0);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if chi_square_tail(df, mid) > 1e-3 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    }

    /// `reps` simulations with keys `seed..seed + reps` follow the exact law of the report
    /// histogram ([`histogram_moments`]): every total is n; per output, the mean within 5
    /// standard errors and (where the variance is at least 10, so the sample variance is
    /// near-normal) the sample variance within 6 of its standard errors `σ²·√(2/(reps − 1))`;
    /// and the pooled deviation `Σ_r (counts_r − mean)`, of covariance `reps·C`, has a
    /// Mahalanobis statistic below the 0.1% critical value of χ²_{S−1}.
    pub fn assert_simulation_law<E: Estimator>(
        label: &str,
        m: &E,
        true_counts: &[u64],
        reps: u64,
        seed: u64,
    ) {
        let simulate = |key: &Key, c: &[u64]| m.simulate_counts(key, c).unwrap();
        assert_law_of(label, m, simulate, true_counts, reps, seed);
    }

    /// Each output's sample mean over `runs` histograms within 5 standard errors of `mean`,
    /// and (when its variance is at least 10) its sample variance within 6 standard errors
    /// of the exact one, the diagonal of `cov` (size × size).
    pub fn assert_output_moments(label: &str, runs: &[Vec<u64>], mean: &[f64], cov: &[f64]) {
        let size = mean.len();
        let r = runs.len() as f64;
        for y in 0..size {
            let sample: Vec<f64> = runs.iter().map(|c| c[y] as f64).collect();
            let avg = sample.iter().sum::<f64>() / r;
            let var = sample.iter().map(|v| (v - avg) * (v - avg)).sum::<f64>() / (r - 1.0);
            let sigma2 = cov[y * size + y];
            let se = (sigma2 / r).sqrt();
            assert!(
                (avg - mean[y]).abs() <= 5.0 * se + 1e-9 * mean[y],
                "{label}: output {y} mean {avg} expected {} (se {se})",
                mean[y]
            );
            if sigma2 >= 10.0 {
                let tolerance = 6.0 * sigma2 * (2.0 / (r - 1.0)).sqrt();
                assert!(
                    (var - sigma2).abs() <= tolerance,
                    "{label}: output {y} variance {var} expected {sigma2}"
                );
            }
        }
    }

    /// [`assert_simulation_law`] for the simulation function `simulate` (e.g. one of a
    /// mechanism's algorithms forced) of the channel of `m`.
    pub fn assert_law_of<E: Estimator>(
        label: &str,
        m: &E,
        simulate: impl Fn(&Key, &[u64]) -> Vec<u64>,
        true_counts: &[u64],
        reps: u64,
        seed: u64,
    ) {
        let (mean, cov) = histogram_moments(m, true_counts);
        let size = mean.len();
        let n: u64 = true_counts.iter().sum();
        let runs: Vec<Vec<u64>> = (seed..seed + reps)
            .map(|s| simulate(&key_from_u64(s), true_counts))
            .collect();
        for run in &runs {
            assert_eq!(run.iter().sum::<u64>(), n, "{label}: total");
        }
        let r = reps as f64;
        assert_output_moments(label, &runs, &mean, &cov);
        let pooled: Vec<f64> = (0..size)
            .map(|y| runs.iter().map(|c| c[y] as f64 - mean[y]).sum())
            .collect();
        let scaled: Vec<f64> = cov.iter().map(|v| v * r).collect();
        let statistic = mahalanobis(&pooled, &scaled);
        let critical = chi_square_critical(size - 1);
        assert!(
            statistic < critical,
            "{label}: pooled chi-square {statistic} ≥ {critical} (df {})",
            size - 1
        );
    }

    /// Simulation against privatization in law: `reps` simulations and `reps` privatizations
    /// (then aggregations) of the same users; the difference of the pooled histograms has
    /// covariance `2·reps·C` ([`histogram_moments`]), and its Mahalanobis statistic must lie
    /// below the 0.1% critical value of χ²_{S−1} (a two-sample chi-square with the exact
    /// covariance of a sum of multinomials).
    pub fn assert_simulate_matches_privatize_in_law<M: IndexMechanism + Estimator>(
        label: &str,
        m: &M,
        true_counts: &[u64],
        reps: u64,
        seed: u64,
    ) {
        let (_, cov) = histogram_moments(m, true_counts);
        let size = IndexMechanism::output_size(m) as usize;
        let values: Vec<u32> = true_counts
            .iter()
            .enumerate()
            .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
            .collect();
        let mut diff = vec![0.0; size];
        let mut reports = vec![0u64; values.len()];
        for s in seed..seed + reps {
            let simulated = m.simulate_counts(&key_from_u64(s), true_counts).unwrap();
            privatize(m, &key_from_u64(s + reps), &values, &mut reports).unwrap();
            let mut counts = vec![0u64; size];
            aggregate(&reports, &mut counts, false).unwrap();
            for y in 0..size {
                diff[y] += simulated[y] as f64 - counts[y] as f64;
            }
        }
        let scaled: Vec<f64> = cov.iter().map(|v| v * 2.0 * reps as f64).collect();
        let statistic = mahalanobis(&diff, &scaled);
        let critical = chi_square_critical(size - 1);
        assert!(
            statistic < critical,
            "{label}: simulate vs privatize chi-square {statistic} ≥ {critical} (df {})",
            size - 1
        );
    }

    #[test]
    fn chi_square_critical_values_match_the_tables() {
        // P(χ²_df > c) = 0.001 (standard tables).
        for (df, c) in [
            (1usize, 10.828),
            (4, 18.467),
            (15, 37.697),
            (26, 54.052),
            (100, 149.449),
        ] {
            let got = chi_square_critical(df);
            assert!((got - c).abs() < 2e-3, "df {df}: {got} vs {c}");
        }
        assert!((chi_square_tail(2, 2.0 * 3.0) - (-3.0f64).exp()).abs() < 1e-12);
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

#[cfg(test)]
mod aggregation_tests {
    use super::unary_encoding::Rappor;
    use super::*;

    /// Reports with a few malformed entries, deterministic.
    fn words(n: usize, salt: u32) -> impl Iterator<Item = u32> {
        (0..n as u32).map(move |i| (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(7))
    }

    use crate::parallel::in_pool;

    #[test]
    fn index_aggregation_matches_a_plain_count_in_both_strategies_and_rolls_back() {
        // 1000 outputs: private tables; 2^18 > PRIVATE_HISTOGRAM_MAX: in place (atomics).
        for size in [1000usize, 1 << 18] {
            let mut reports: Vec<u32> = words(300_000, 5).map(|w| w % size as u32).collect();
            let mut want = vec![3u64; size];
            for &r in &reports {
                want[r as usize] += 1;
            }
            for threads in [1, 3] {
                let mut counts = vec![3u64; size];
                in_pool(threads, || aggregate(&reports, &mut counts, false)).unwrap();
                assert_eq!(counts, want, "size {size}, {threads} threads");
            }
            // An invalid report late in the batch: refused, counts untouched.
            reports[250_000] = size as u32;
            let mut counts = vec![3u64; size];
            let e = aggregate(&reports, &mut counts, false).unwrap_err();
            assert!(e.to_string().contains("reports[250000]"), "{e}");
            assert!(
                counts.iter().all(|&c| c == 3),
                "size {size}: not rolled back"
            );
            // Dropped instead: counted without it.
            let t = aggregate(&reports, &mut counts, true).unwrap();
            assert_eq!((t.invalid, t.first_invalid), (1, Some(250_000)));
            // A count that would wrap: refused, untouched.
            let mut full = vec![0u64; size];
            full[reports[0] as usize] = u64::MAX;
            let before = full.clone();
            assert!(aggregate(&reports[..10], &mut full, false).is_err());
            assert_eq!(full, before, "size {size}: overflow not rolled back");
        }
    }

    #[test]
    fn bit_aggregation_over_several_tiles_matches_a_plain_count() {
        // 3·BIT_TILE_BYTES·8 + 1 bits: four tiles, 7 padding bits in the last byte.
        let bits = (3 * BIT_TILE_BYTES * 8 + 1) as u64;
        let m = Rappor::new(bits, 1.0).unwrap();
        let width = row_bytes(bits);
        let rows = 700;
        let mut reports: Vec<u8> = words(rows * width, 9).map(|w| w as u8).collect();
        // Clear the padding of every row but rows 100 and 650 (malformed).
        for i in 0..rows {
            if i != 100 && i != 650 {
                reports[i * width + width - 1] &= 0x80;
            } else {
                reports[i * width + width - 1] |= 0x01;
            }
        }
        let mut want = vec![0u64; bits as usize];
        for i in (0..rows).filter(|&i| i != 100 && i != 650) {
            for (j, w) in want.iter_mut().enumerate() {
                *w += get_bit(&reports[i * width..(i + 1) * width], j as u64) as u64;
            }
        }
        let mut counts = vec![1u64; bits as usize];
        let e = aggregate_bits(&m, &reports, &mut counts, false).unwrap_err();
        assert!(e.to_string().contains("row 100"), "{e}");
        assert!(
            counts.iter().all(|&c| c == 1),
            "refused batch changed the counts"
        );
        for threads in [1, 4] {
            let mut counts = vec![0u64; bits as usize];
            let t = in_pool(threads, || aggregate_bits(&m, &reports, &mut counts, true)).unwrap();
            assert_eq!((t.valid, t.invalid, t.first_invalid), (698, 2, Some(100)));
            assert_eq!(counts, want, "{threads} threads");
        }
        let mut full = vec![u64::MAX; bits as usize];
        assert!(aggregate_bits(&m, &reports, &mut full, true).is_err());
        assert!(
            full.iter().all(|&c| c == u64::MAX),
            "overflow changed the counts"
        );
    }
}
