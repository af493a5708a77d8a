//! Hadamard Response (Acharya, Sun & Zhang, "Hadamard Response: Estimating Distributions
//! Privately, Efficiently, and with Little Communication", AISTATS 2019, arXiv:1802.04705;
//! docs page Mechanisms › Classic mechanisms), the general (b, B) construction for every ε.
//!
//! * `B` = largest power of 2 with `B ≤ min(e^ε, 2k)`; `b` = smallest power of 2 with
//!   `b > ⌈k/B⌉`. Symbol x lives in block `j = ⌊x/(b−1)⌋` at row `r = (x mod (b−1)) + 1` of
//!   the Sylvester matrix `H_b`; its set is `C_x = {j·b + w : H_b(r, w) = +1}`, `h = b/2`
//!   outputs. Only the `⌈k/(b−1)⌉` blocks some symbol uses are kept: `K = blocks·b` outputs.
//!   With `B = 1` this is the paper's high-privacy HR: `K = 2^⌈log2(k+1)⌉`, row x+1.
//! * Channel: `Q(z|x) = e^ε/Z` for `z ∈ C_x`, `1/Z` otherwise, `Z = h·e^ε + K − h`.
//! * Estimator, with `T_j` the fraction of reports in block j and `S_x` the fraction in `C_x`
//!   (notes, re-derived: `S_x = (b/4Z)(2 + (P_j + p_x)(e^ε − 1))`):
//!   `P̂_j = (T_j Z − b)/((b/2)(e^ε − 1))`, `p̂_x = (4 S_x Z/b − 2)/(e^ε − 1) − P̂_j`.
//!   All `S_x` of a block come from one FWHT of its histogram: `#C_x = ((Hc)_0 + (Hc)_r)/2`,
//!   so decoding costs `O(n + K log b)`.
//! * Sampling is O(1): with probability `ρ = h e^ε / Z` a uniform element of `C_x`, else a
//!   uniform element of the other `K − h` outputs. Elements of `C_x` are the `w` with even
//!   `popcount(r & w)`: the v-th one is v with a bit inserted at the lowest set bit of r and
//!   set so the parity is even (odd for the complement) — a bijection, so uniform.
//!
//! Exact privacy: `ρ` is the float rounded down by 8 ulps (below the real value) and drawn
//! exactly; the uniform draws are exact. The realized ratio `ρ(K − h)/((1 − ρ)h)` is increasing
//! in ρ, so it never exceeds `e^ε`; the estimator uses the realized `Z' = h/ρ·…` probabilities.

use super::randomized_response::{epsilon_too_small, round_down, PRIVACY_MARGIN_ULPS};
use super::{
    add_uniform_reports, as_atomic, check_domain, check_epsilon, draw_own_counts,
    simulation_footprint, simulation_stream, simulation_users, spread_interruptible, FastDiv,
    IndexMechanism, Operation, SimulationPhase,
};
use crate::error::Result;
use crate::hadamard::{fwht_in_place, fwht_in_place_checked, Butterfly};
use crate::interrupt::{interruptible, Check};
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{binomial, uniform_below_u64, BernoulliThreshold, Key, StreamRng};
use rayon::prelude::*;
use std::sync::atomic::Ordering;

#[derive(Clone, Debug)]
pub struct HadamardResponse {
    k: u64,
    epsilon: f64,
    /// B of the construction (a power of two), outputs per block b (a power of two), and
    /// the number of blocks used.
    big_b: u64,
    b: u64,
    blocks: u64,
    /// Probability of reporting inside C_x, as realized.
    rho: f64,
    inside: BernoulliThreshold,
    /// Division by b − 1 (rows per block), without a hardware divide per report.
    rows_per_block: FastDiv,
}

impl HadamardResponse {
    /// The construction of the paper: `B` = largest power of 2 with `B ≤ min(e^ε, 2k)`.
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        Self::with_blocks(k, epsilon, None)
    }

    /// With `big_b = Some(B)` (a power of two, `1 ≤ B ≤ 2k`) instead of the paper's rule;
    /// `Some(1)` is the high-privacy HR for every ε. Every B gives an exactly ε-LDP channel.
    pub fn with_blocks(k: u64, epsilon: f64, big_b: Option<u64>) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let e = epsilon.exp();
        let big_b = match big_b {
            Some(v) if v.is_power_of_two() && v <= 2 * k => v,
            Some(v) => {
                return Err(crate::error::Error::Value(format!(
                    "blocks (B) must be a power of two in [1, 2k] = [1, {}], got {v}",
                    2 * k
                )))
            }
            None => {
                let cap = e.min(2.0 * k as f64);
                let mut v = 1u64;
                while (2 * v) as f64 <= cap {
                    v *= 2;
                }
                v
            }
        };
        let per_block = k.div_ceil(big_b); // ⌈k/B⌉
        let b = (per_block + 1).next_power_of_two(); // smallest power of 2 > ⌈k/B⌉
        let blocks = k.div_ceil(b - 1);
        let (h, outputs) = ((b / 2) as f64, (blocks * b) as f64);
        let rho = round_down(h * e / (h * e + outputs - h), PRIVACY_MARGIN_ULPS);
        // Inside must stay strictly more likely per output than outside.
        if !(rho * (outputs - h) > (1.0 - rho) * h) {
            return Err(epsilon_too_small(epsilon));
        }
        let inside = BernoulliThreshold::new(rho)?;
        Ok(Self {
            k,
            epsilon,
            big_b,
            b,
            blocks,
            rho,
            inside,
            rows_per_block: FastDiv::new(b - 1),
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`): the
    /// estimate and `channel_apply` hold the block transforms (K), the block masses and the
    /// result (k); `expected_frequencies` its result (K); a simulation one or two arrays of K
    /// counts (two when it uses the Hadamard passes, [`Self::simulation_uses_passes`]).
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "HadamardResponse";
        let outputs = self.blocks * self.b;
        let transforms = |f: Footprint| {
            f.add("block transforms", outputs, 8)
                .add("block masses", self.blocks, 8)
                .add("the result", self.k, 8)
        };
        match op {
            Operation::Estimate => transforms(Footprint::new(format!("{name} estimate"))),
            Operation::ChannelProduct => {
                transforms(Footprint::new(format!("{name} channel product")))
            }
            Operation::Simulate { users } => simulation_footprint(
                name,
                outputs,
                if self.simulation_uses_passes(users) {
                    2
                } else {
                    1
                },
            ),
        }
    }

    /// `(B, b, K)`: the block count of the construction (a power of two), outputs per block,
    /// and outputs kept (`⌈k/(b−1)⌉·b`).
    pub fn shape(&self) -> (u64, u64, u64) {
        (self.big_b, self.b, self.blocks * self.b)
    }

    /// Number of outputs, as a length.
    pub fn output_size_usize(&self) -> usize {
        (self.blocks * self.b) as usize
    }

    fn h(&self) -> f64 {
        (self.b / 2) as f64
    }

    fn outputs(&self) -> f64 {
        (self.blocks * self.b) as f64
    }

    /// `(Q(z|x) for z ∈ C_x, for z ∉ C_x)` as realized.
    pub fn probabilities(&self) -> (f64, f64) {
        (
            self.rho / self.h(),
            (1.0 - self.rho) / (self.outputs() - self.h()),
        )
    }

    /// The exact guarantee of the channel used (≤ ε).
    pub fn realized_epsilon(&self) -> f64 {
        let (inside, outside) = self.probabilities();
        inside.ln() - outside.ln()
    }

    /// The realized `e^ε` and normalizer Z (Q(z|x) = e^ε/Z inside, 1/Z outside).
    fn realized_ez(&self) -> (f64, f64) {
        let (inside, outside) = self.probabilities();
        (inside / outside, 1.0 / outside)
    }

    /// Block and row of symbol x.
    #[inline]
    fn place(&self, x: u64) -> (u64, u64) {
        let (j, r) = self.rows_per_block.div_rem(x);
        (j, r + 1)
    }

    /// Row x of the channel matrix (length K).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (inside, outside) = self.probabilities();
        row.fill(outside);
        let (j, r) = self.place(x);
        for w in 0..self.b {
            if (r & w).count_ones() % 2 == 0 {
                row[(j * self.b + w) as usize] = inside;
            }
        }
    }

    /// `H_b` applied to every block of `t` (length K), calling `check` between tasks: one
    /// parallel transform per block when blocks are large, many small blocks per task
    /// otherwise.
    fn transform_blocks<T: Butterfly, C: Check>(&self, t: &mut [T], check: &C) -> Result<()> {
        let b = self.b as usize;
        if b >= 1 << 16 {
            for block in t.chunks_exact_mut(b) {
                fwht_in_place_checked(block, check)?;
            }
            Ok(())
        } else {
            let per_task = ((1usize << 16) / b).max(1);
            t.par_chunks_mut(b * per_task).try_for_each(|blocks| {
                check()?;
                blocks.chunks_exact_mut(b).for_each(fwht_in_place);
                Ok(())
            })
        }
    }

    interruptible! {
        /// Unbiased estimate from the report histogram (length K, `n > 0`).
        pub fn estimate_raw / try_estimate_raw
            = try_estimate_raw_with(counts: &[u64], n: u64) -> Vec<f64>;
    }

    /// Every |entry| of the block transforms is at most the number of reports: exact in i64.
    fn try_estimate_raw_with<C: Check>(
        &self,
        counts: &[u64],
        n: u64,
        check: &C,
    ) -> Result<Vec<f64>> {
        let mut t: Vec<i64> = counts.par_iter().map(|&c| c as i64).collect();
        self.transform_blocks(&mut t, check)?;
        let n = n as f64;
        Ok(self.estimate_from_transforms(|j, r| t[(j * self.b + r) as usize] as f64 / n))
    }

    interruptible! {
        /// Unbiased estimate from report frequencies (length K), e.g. exact expectations.
        pub fn estimate_from_frequencies / try_estimate_from_frequencies
            = try_estimate_from_frequencies_with(freq: &[f64]) -> Vec<f64>;
    }

    fn try_estimate_from_frequencies_with<C: Check>(
        &self,
        freq: &[f64],
        check: &C,
    ) -> Result<Vec<f64>> {
        let mut t = freq.to_vec();
        self.transform_blocks(&mut t, check)?;
        Ok(self.estimate_from_transforms(|j, r| t[(j * self.b + r) as usize]))
    }

    /// The estimator, given `transformed(j, r) = (H_b f_j)_r` for the block frequencies f_j.
    fn estimate_from_transforms(&self, transformed: impl Fn(u64, u64) -> f64 + Sync) -> Vec<f64> {
        let (e, z) = self.realized_ez();
        let b = self.b as f64;
        let block_mass: Vec<f64> = (0..self.blocks)
            .map(|j| (transformed(j, 0) * z - b) / ((b / 2.0) * (e - 1.0)))
            .collect();
        (0..self.k as usize)
            .into_par_iter()
            .with_min_len(1 << 14)
            .map(|x| {
                let (j, r) = self.place(x as u64);
                let s = (transformed(j, 0) + transformed(j, r)) / 2.0;
                (4.0 * s * z / b - 2.0) / (e - 1.0) - block_mass[j as usize]
            })
            .collect()
    }

    interruptible! {
        /// Expected report frequencies `Qᵀ dist` (length K), one FWHT per block.
        pub fn expected_frequencies / try_expected_frequencies
            = try_expected_frequencies_with(dist: &[f64]) -> Vec<f64>;
    }

    fn try_expected_frequencies_with<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        let (e, z) = self.realized_ez();
        // In index order (a parallel float sum would depend on the thread count).
        let total: f64 = dist.iter().sum();
        let mut out = vec![0.0; (self.blocks * self.b) as usize];
        // Σ_{x in block j, z ∈ C_x} p_x = (P_j + (H p_j)_z)/2 with p_j placed at rows 1..b−1.
        for (x, &v) in dist.iter().enumerate() {
            let (j, r) = self.place(x as u64);
            out[(j * self.b + r) as usize] = v;
        }
        let mass = self.block_sums(&out);
        self.transform_blocks(&mut out, check)?;
        out.par_chunks_mut(self.b as usize)
            .zip(&mass)
            .for_each(|(block, &mass)| {
                block
                    .iter_mut()
                    .for_each(|v| *v = (total + (e - 1.0) * (mass + *v) / 2.0) / z)
            });
        Ok(out)
    }

    /// The sum of each block of `t`, each in index order.
    fn block_sums(&self, t: &[f64]) -> Vec<f64> {
        t.par_chunks(self.b as usize)
            .map(|block| block.iter().sum())
            .collect()
    }

    interruptible! {
        /// `Q w` (length k): `(Q w)_x = Σ_z Q(z|x) w_z`, the adjoint of `expected_frequencies`.
        pub fn channel_apply / try_channel_apply
            = try_channel_apply_with(w: &[f64]) -> Vec<f64>;
    }

    fn try_channel_apply_with<C: Check>(&self, w: &[f64], check: &C) -> Result<Vec<f64>> {
        let (e, z) = self.realized_ez();
        let total: f64 = w.iter().sum();
        let mut t = w.to_vec();
        let mass = self.block_sums(&t);
        self.transform_blocks(&mut t, check)?;
        Ok((0..self.k as usize)
            .into_par_iter()
            .with_min_len(1 << 14)
            .map(|x| {
                let (j, r) = self.place(x as u64);
                let inside = (mass[j as usize] + t[(j * self.b + r) as usize]) / 2.0;
                (total + (e - 1.0) * inside) / z
            })
            .collect())
    }

    /// The probability `1 − α = (K·ρ − h)/(K − h)` that a user reports uniformly inside its
    /// own set `C_x` in the mixture form of the channel (`mechanisms`, "Simulation").
    fn own_set_weight(&self) -> f64 {
        let (h, outputs) = (self.h(), self.outputs());
        (outputs * self.rho - h) / (outputs - h)
    }

    /// Whether a simulation of `users` users draws the own sets by the Hadamard passes (when
    /// the expected own-set users number at least `PASSES_ABOVE` per output) rather than
    /// value by value.
    pub fn simulation_uses_passes(&self, users: u64) -> bool {
        users as f64 * self.own_set_weight() >= PASSES_ABOVE * self.outputs()
    }

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law
    /// (module documentation, "Simulation").
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let users = simulation_users(self.k, true_counts)?;
        self.simulate_with(key, true_counts, self.simulation_uses_passes(users))
    }

    fn simulate_with(&self, key: &Key, true_counts: &[u64], passes: bool) -> Result<Vec<u64>> {
        self.simulate_with_chunk(key, true_counts, passes, PASS_CHUNK)
    }

    /// With `chunk` positions per task of the passes (a power of two; tests use small ones).
    fn simulate_with_chunk(
        &self,
        key: &Key,
        true_counts: &[u64],
        passes: bool,
        chunk: usize,
    ) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let size = self.output_size_usize();
        let own = self.own_set_weight();
        let b = self.b;
        let half = b / 2;
        let mut counts = allocate_zeroed::<u64>(size, "the report counts")?;
        let uniform = if passes {
            // K_x goes to its state (block j, row r, even): the passes spread it.
            let mut odd = allocate_zeroed::<u64>(size, "the odd-parity states")?;
            let cells = as_atomic(&mut counts);
            let uniform = draw_own_counts(
                key,
                true_counts,
                |_| own,
                |_, x, kept| {
                    let (j, r) = self.place(x);
                    cells[(j * b + r) as usize].store(kept, Ordering::Relaxed);
                    Ok(())
                },
            )?;
            hadamard_passes(key, &mut counts, &mut odd, self.b, chunk, 0)?;
            uniform
        } else {
            let cells = as_atomic(&mut counts);
            draw_own_counts(
                key,
                true_counts,
                |_| own,
                |rng, x, kept| {
                    let (j, r) = self.place(x);
                    spread_interruptible(rng, 0, half, kept, &mut |v, n| {
                        let w = Self::nth_with_parity(r, v, false);
                        cells[(j * b + w) as usize].fetch_add(n, Ordering::Relaxed);
                    })
                },
            )?
        };
        add_uniform_reports(key, &mut counts, uniform)?;
        Ok(counts)
    }

    /// The v-th (0-based) w in `[0, b)` with `popcount(r & w)` of the given parity (`r ≥ 1`;
    /// `v < b/2`): v with a bit inserted at the lowest set bit of r, set so that the parity
    /// is the one asked for. A bijection from `[0, b/2)`, so a uniform v gives a uniform w.
    #[inline(always)]
    pub(crate) fn nth_with_parity(r: u64, v: u64, odd: bool) -> u64 {
        let t = r.trailing_zeros();
        let low = v & ((1 << t) - 1);
        let w = ((v >> t) << (t + 1)) | low;
        let parity = (r & w).count_ones() & 1 == 1;
        w | (((parity != odd) as u64) << t)
    }
}

impl IndexMechanism for HadamardResponse {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.blocks * self.b
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let (j, r) = self.place(x);
        let half = self.b / 2;
        // With k near 2^32 the outputs number up to 2^33 (`uniform_below` takes n ≤ 2^32;
        // the `_u64` draw is the same below that).
        if self.inside.sample(rng) {
            return j * self.b + Self::nth_with_parity(r, uniform_below_u64(rng, half), false);
        }
        let u = uniform_below_u64(rng, self.blocks * self.b - half);
        if u < half {
            j * self.b + Self::nth_with_parity(r, u, true)
        } else {
            let u = u - half;
            let other = u / self.b;
            let block = other + (other >= j) as u64;
            block * self.b + u % self.b
        }
    }
}

/// Expected own-set users per output from which a simulation uses the Hadamard passes
/// (O(K log b) work whatever the counts) rather than drawing value by value (O(users)).
pub(crate) const PASSES_ABOVE: f64 = 4.0;

/// Positions per task of the Hadamard passes.
pub(crate) const PASS_CHUNK: usize = 1 << 12;

/// Stream-index tag of the passes over the bits below `log2 PASS_CHUNK` (the other passes
/// use their bit number, below 64).
const LOW_PASSES: u64 = 0xFF;

/// The own-set reports of users who report uniformly inside their own set `C = {w ∈ [0, b) :
/// popcount(r & w) even}` of a block of `b` outputs (`b` a power of two), by the *Hadamard
/// passes*: on entry `even[j·b + r]` holds the number of such users of row `r ≥ 1` of block
/// j (`odd` all zero); on return `even` holds their reports and `odd` is zero again.
///
/// The passes place the report bits from the highest, β = log2(b) − 1, down to 0. Before
/// the pass over bit β, `even[z]` / `odd[z]` count the users whose report agrees with z
/// above bit β and whose low bits w (bits ≤ β) are still uniform over
/// `{w : popcount(r' & w) = 0 / 1 mod 2}`, r' = the low β + 1 bits of z (what remains of
/// their row). The pass splits every position pair `(z, z + 2^β)` by [`butterfly`]
/// (Binomial(c, 1/2) halves, or a deterministic move for row `2^β`); after bit 0 every
/// user sits at its report. O(b log b) binomial draws per block whatever the number of
/// users (zero states are skipped); the streams are `OwnSets` ones indexed by pass and task,
/// so the result does not depend on the thread count. `chunk` (a power of two) is the
/// number of positions per task.
///
/// Task t of a pass draws from the `OwnSets` stream `pass << 40 | (first_task + t)`:
/// callers that run the passes on several disjoint regions under one key give each region a
/// `first_task` range of its own (Block Hadamard Response: the region's first output, which
/// exceeds every task number of the regions before it); HR and High-Low HR use 0.
pub(crate) fn hadamard_passes(
    key: &Key,
    even: &mut [u64],
    odd: &mut [u64],
    b: u64,
    chunk: usize,
    first_task: u64,
) -> Result<()> {
    // b = 1 (High-Low HR without sensitive values: S = 1) has no pass: nothing to place.
    debug_assert!(chunk.is_power_of_two() && b.is_power_of_two());
    debug_assert!(even.len() == odd.len() && even.len() as u64 % b == 0);
    let bits = b.trailing_zeros();
    let low = bits.min(chunk.trailing_zeros());
    for beta in (low..bits).rev() {
        let half = 1usize << beta;
        let tasks_per_group = half / chunk;
        even.par_chunks_mut(2 * half)
            .zip(odd.par_chunks_mut(2 * half))
            .enumerate()
            .flat_map(|(group, (e, o))| {
                let (e0, e1) = e.split_at_mut(half);
                let (o0, o1) = o.split_at_mut(half);
                e0.par_chunks_mut(chunk)
                    .zip(e1.par_chunks_mut(chunk))
                    .zip(o0.par_chunks_mut(chunk).zip(o1.par_chunks_mut(chunk)))
                    .enumerate()
                    .map(move |(t, lanes)| (group * tasks_per_group + t, t * chunk, lanes))
            })
            .try_for_each(|(task, offset, ((e0, e1), (o0, o1)))| {
                crate::interrupt::check()?;
                let id = (beta as u64) << 40 | (first_task + task as u64);
                let mut rng = simulation_stream(key, SimulationPhase::OwnSets, id);
                for i in 0..e0.len() {
                    butterfly(
                        &mut rng,
                        offset + i,
                        &mut e0[i],
                        &mut o0[i],
                        &mut e1[i],
                        &mut o1[i],
                    );
                }
                Ok(())
            })?;
    }
    // The bits below `low`: every chunk of `chunk` positions (or of whole blocks, when
    // b is smaller) holds complete butterflies.
    even.par_chunks_mut(chunk)
        .zip(odd.par_chunks_mut(chunk))
        .enumerate()
        .try_for_each(|(task, (e, o))| {
            crate::interrupt::check()?;
            let id = LOW_PASSES << 40 | (first_task + task as u64);
            let mut rng = simulation_stream(key, SimulationPhase::OwnSets, id);
            for beta in (0..low).rev() {
                let half = 1usize << beta;
                for group in (0..e.len()).step_by(2 * half) {
                    for i in 0..half {
                        let (lo, hi) = (group + i, group + half + i);
                        let (e0, e1) = pair(e, lo, hi);
                        let (o0, o1) = pair(o, lo, hi);
                        butterfly(&mut rng, i, e0, o0, e1, o1);
                    }
                }
            }
            debug_assert!(o.iter().all(|&v| v == 0));
            Ok(())
        })
}

/// Two distinct elements of a slice, mutably (`lo < hi`).
fn pair(s: &mut [u64], lo: usize, hi: usize) -> (&mut u64, &mut u64) {
    let (a, b) = s.split_at_mut(hi);
    (&mut a[lo], &mut b[0])
}

/// One step of the Hadamard passes (module documentation, "Simulation") on the states of a
/// position pair `(z, z + 2^β)` of a sub-block of size `2^(β+1)`: `(e0, o0)` are the even/odd
/// counts of row `r'` (`= r_low`, the low β bits), `(e1, o1)` those of row `2^β + r'`. Each
/// count is the number of users still uniform over `{w : parity(row & w) = p}`; splitting
/// `w` on bit β sends row `r'` (bit β clear) to both halves with parity p, and row
/// `2^β + r'` to the lower half with p and to the upper half with `1 − p`. Both halves hold
/// equally many such w when `r' ≠ 0` (Binomial(c, 1/2) each); when `r' = 0` the even set
/// of row 0 is the whole range (halves equal) and row `2^β` puts its even users all in the
/// lower half, its odd users all in the upper half (where they become even for row 0).
#[inline]
fn butterfly(
    rng: &mut StreamRng,
    r_low: usize,
    e0: &mut u64,
    o0: &mut u64,
    e1: &mut u64,
    o1: &mut u64,
) {
    let (a0, a1, b0, b1) = (*e0, *o0, *e1, *o1);
    if a0 | a1 | b0 | b1 == 0 {
        return;
    }
    let (l0, l1) = (binomial(rng, a0, 0.5), binomial(rng, a1, 0.5));
    let (m0, m1) = if r_low != 0 {
        (binomial(rng, b0, 0.5), binomial(rng, b1, 0.5))
    } else {
        (b0, 0)
    };
    *e0 = l0 + m0;
    *o0 = l1 + m1;
    *e1 = (a0 - l0) + (b1 - m1);
    *o1 = (a1 - l1) + (b0 - m0);
}

#[cfg(test)]
mod tests {
    use super::super::channel_matrix;
    use super::super::testing::{
        assert_law_of, assert_simulate_matches_privatize_in_law, assert_simulation_law,
        channel_stats, chi_square, empirical_row, expected_from_rows,
    };
    use super::*;
    use crate::hadamard::sylvester_entry;

    #[test]
    fn high_privacy_layout_follows_the_convention() {
        let m = HadamardResponse::new(10, 0.5).unwrap();
        assert_eq!(m.shape(), (1, 16, 16));
        let mut row = vec![0.0; 16];
        for x in 0..10u64 {
            m.channel_row(x, &mut row);
            let (inside, _) = m.probabilities();
            for z in 0..16u64 {
                assert_eq!(row[z as usize] == inside, sylvester_entry(x + 1, z) == 1);
            }
        }
        assert_eq!(HadamardResponse::new(16, 0.1).unwrap().shape(), (1, 32, 32));
    }

    #[test]
    fn channel_is_exactly_epsilon_ldp() {
        for k in [2u64, 3, 7, 16, 100] {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0] {
                let m = HadamardResponse::new(k, eps).unwrap();
                let size = m.output_size();
                let q = channel_matrix(k, size, 1 << 22, |x, r| m.channel_row(x, r)).unwrap();
                let (ratio, sum_err) = channel_stats(&q, k as usize);
                assert!(
                    sum_err < 1e-12,
                    "k {k} eps {eps}: rows sum off by {sum_err}"
                );
                assert!(ratio <= eps + 1e-12, "k {k} eps {eps}: {ratio}");
                assert!((ratio - m.realized_epsilon()).abs() < 1e-12);
                assert!(eps - m.realized_epsilon() < 1e-12, "k {k} eps {eps}");
                assert!(size <= 4 * k, "K = {size} > 4k");
            }
        }
    }

    #[test]
    fn estimator_is_unbiased_and_fwht_decoding_equals_the_direct_formula() {
        for (k, eps) in [(10u64, 0.5), (7, 2.0), (100, 3.0), (100, 5.0), (33, 1.5)] {
            let m = HadamardResponse::new(k, eps).unwrap();
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let freq = m.expected_frequencies(&p);
            let size = m.output_size() as usize;
            for (a, b) in freq.iter().zip(&expected_from_rows(&m, &p)) {
                assert!((a - b).abs() < 1e-14);
            }
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-9, "k {k} eps {eps}: {a} vs {b}");
            }
            // FWHT decoding against S_x computed by summing over C_x directly.
            let counts: Vec<u64> = (0..size as u64).map(|z| (z * 31 + 7) % 50).collect();
            let n: u64 = counts.iter().sum();
            let fast = m.estimate_raw(&counts, n);
            let (e, zz) = m.realized_ez();
            let b = m.b as f64;
            for x in 0..k {
                let (j, r) = m.place(x);
                let block = &counts[(j * m.b) as usize..((j + 1) * m.b) as usize];
                let t: f64 = block.iter().sum::<u64>() as f64 / n as f64;
                let s: f64 = (0..m.b)
                    .filter(|&w| sylvester_entry(r, w) == 1)
                    .map(|w| block[w as usize] as f64)
                    .sum::<f64>()
                    / n as f64;
                let mass = (t * zz - b) / ((b / 2.0) * (e - 1.0));
                let direct = (4.0 * s * zz / b - 2.0) / (e - 1.0) - mass;
                assert!((fast[x as usize] - direct).abs() < 1e-9);
            }
            // Adjoint identity: <Qᵀp, w> = <p, Q w>.
            let w: Vec<f64> = (0..size).map(|z| (z as f64 * 0.37).sin()).collect();
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
        }
    }

    #[test]
    fn sampler_matches_the_channel() {
        for (k, eps) in [(6u64, 0.5), (5, 3.0)] {
            let m = HadamardResponse::new(k, eps).unwrap();
            let size = m.output_size() as usize;
            let mut row = vec![0.0; size];
            for x in [0u32, (k - 1) as u32] {
                m.channel_row(x as u64, &mut row);
                let draws = 400_000;
                let freq = empirical_row(&m, x, draws, 5 + x as u64);
                // Critical value of chi-square at p = 0.001 for df = size − 1 ≤ 15: < 37.7.
                assert!(
                    chi_square(&freq, &row, draws) < 37.7,
                    "k {k} eps {eps} x {x}"
                );
            }
        }
    }

    #[test]
    fn sampler_draws_among_more_than_2_pow_32_outputs() {
        // k = 2^32: 2^33 outputs, beyond one 32-bit draw. B = 2^33 (b = 2) once never
        // returned (the draw below 2^34 − 1 rejected every word), B = 2 drew the other
        // block with the wrong probability.
        let key = crate::rng::key_from_u64(3);
        let m = HadamardResponse::with_blocks(1 << 32, 1.0, Some(1 << 33)).unwrap();
        let mut rng = crate::rng::stream(&key, 0);
        for x in [0, (1u64 << 32) - 1] {
            for _ in 0..100 {
                assert!(m.sample(&mut rng, x) < m.output_size());
            }
        }
        let m = HadamardResponse::with_blocks(1 << 32, 1.0, Some(2)).unwrap();
        let (big_b, b, outputs) = m.shape();
        assert_eq!((big_b, b, outputs), (2, 1 << 32, 1 << 33));
        // P(report in the other block) = (1 − q)(K − b)/(K − b/2), q = (b/2)e^ε/Z, Z =
        // (b/2)e^ε + K − b/2: here 2/(e^ε + 3).
        let draws = 20_000;
        let other = (0..draws).filter(|_| m.sample(&mut rng, 0) >= b).count() as f64;
        let expected = 2.0 / (1f64.exp() + 3.0);
        let sigma = (expected * (1.0 - expected) / draws as f64).sqrt();
        assert!(
            (other / draws as f64 - expected).abs() < 5.0 * sigma,
            "{other}"
        );
    }

    /// Instances of every shape: B = 1 with b = 16, B = 2, many blocks of b = 4, and b = 2
    /// (one output per own set).
    fn simulation_instances() -> Vec<(HadamardResponse, Vec<u64>)> {
        let counts = |k: u64| {
            (0..k)
                .map(|x| (x * 997 % 130) + (x % 3 == 0) as u64 * 500)
                .collect()
        };
        let mut out = vec![];
        for (k, eps, blocks, shape) in [
            (9u64, 0.5, None, (1u64, 16u64, 16u64)),
            (10, 1.0, Some(2), (2, 8, 16)),
            (10, 2.0, Some(4), (4, 4, 16)),
            (6, 3.0, Some(8), (8, 2, 12)),
        ] {
            let m = HadamardResponse::with_blocks(k, eps, blocks).unwrap();
            assert_eq!(m.shape(), shape, "k {k} eps {eps}");
            out.push((m, counts(k)));
        }
        out
    }

    #[test]
    fn simulate_follows_the_exact_law_by_both_own_set_algorithms() {
        for (i, (m, counts)) in simulation_instances().into_iter().enumerate() {
            let label = format!("shape {:?}", m.shape());
            let seed = 100 * i as u64;
            // Value by value, with few and with many users per value.
            let few: Vec<u64> = counts.iter().map(|c| c % 7).collect();
            let m = &m;
            let by = |passes: bool, chunk: usize| {
                move |key: &Key, c: &[u64]| m.simulate_with_chunk(key, c, passes, chunk).unwrap()
            };
            let what = format!("{label} by value, few users");
            assert_law_of(&what, m, by(false, 1), &few, 300, seed);
            let what = format!("{label} by value");
            assert_law_of(&what, m, by(false, 1), &counts, 300, seed + 1);
            // Hadamard passes with chunks of 2 and 4 positions, so that bits are transformed
            // both in their own passes and inside a chunk.
            for chunk in [2usize, 4, PASS_CHUNK] {
                let what = format!("{label} passes, chunk {chunk}");
                assert_law_of(&what, m, by(true, chunk), &counts, 300, seed + 2);
            }
            assert_simulate_matches_privatize_in_law(&label, m, &counts, 200, seed + 3);
        }
    }

    #[test]
    fn simulate_chooses_the_passes_for_many_users_and_is_exact_at_10_to_the_12() {
        let m = HadamardResponse::new(9, 0.5).unwrap();
        assert!(!m.simulation_uses_passes(10));
        assert!(m.simulation_uses_passes(1_000_000));
        let huge: Vec<u64> = (0..9).map(|x| (x + 1) * 100_000_000_000).collect();
        assert_simulation_law("10^12 users", &m, &huge, 300, 77);
        let few = [0u64, 3, 0, 0, 1, 0, 0, 0, 2];
        assert_simulation_law("6 users", &m, &few, 400, 78);
    }
}
