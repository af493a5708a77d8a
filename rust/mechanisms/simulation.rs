//! Exact simulation of the report histogram of index mechanisms.
//!
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

use super::estimator::total_users;
use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{binomial, spread_uniform, stream, Key, StreamRng};
use rayon::prelude::*;

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
