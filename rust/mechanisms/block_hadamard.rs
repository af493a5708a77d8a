//! Block Hadamard Response (Acharya, Bonawitz, Kairouz, Ramage & Sun, "Context-aware local
//! differential privacy", ICML 2020, Section 6.1; docs page Mechanisms › Context-aware LDP):
//! distribution
//! estimation under (P, ε)-block-structured LDP (Definition 4: ε between two inputs of one
//! block of the partition P, no constraint across blocks; `ldpdist.privacy.block_budgets`).
//!
//! # Layout
//! Blocks `j = 0..m−1` of sizes `k_j ≥ 1`, `k = Σ k_j`; the i-th input of block j (in
//! increasing order of value) is the symbol `(j, i)`. Block j owns `K_j` consecutive outputs
//! starting at `offset_j = Σ_{l<j} K_l`:
//! * `k_j ≥ 2`: `K_j = 2^⌈log2(k_j + 1)⌉` (the paper's), symbol (j, i) on row `r = i + 1` of
//!   the Sylvester matrix `H_{K_j}` (`H(r, c) = (−1)^popcount(r & c)`, as in [`crate::hadamard`]);
//!   its own set `S_x = {c : H(r, c) = +1}` has `K_j/2` elements;
//! * `k_j = 1` (a singleton): `K_j = 1`, one output `offset_j`. BSLDP constrains nothing
//!   inside a singleton block, so its input is reported without noise (the paper's `K_j = 2`
//!   would add noise that protects nothing). So `S = Σ K_j ≤ 2k − (number of singletons)`.
//!
//! A report is the integer `offset_j + c` in `[0, S)`: the block is sent in the clear, c is
//! Hadamard Response inside the block.
//!
//! # Channel (eq. (20)) with the realized probabilities
//! The flip probability q is `one_bit_hadamard::flip_probability(ε)`: the float of
//! `1/(e^ε' + 1)` (`ε' = ε − 2^−46·max(ε, 1)`) raised by 8 ulps, so that `q > 1/(e^ε + 1)`
//! for the real numbers and `1 − q` is exact. For x = (j, i) with `k_j ≥ 2`, `h = K_j/2`:
//!
//! `Q(offset_j + c | x) = (1 − q)/h` for `c ∈ S_x`, `q/h` for `c ∉ S_x` (c < K_j),
//! and 0 outside block j; `Q(offset_j | x) = 1` for a singleton.
//!
//! (the paper's `2e^ε/(K_j(1 + e^ε))` and `2/(K_j(1 + e^ε))` for the exact q). Within a
//! block every ratio is 1 or `(1 − q)/q < e^ε`, and it is reached (two distinct rows of
//! `H_{K_j}` differ in K_j/2 columns), so the realized budgets are exactly
//! `ε_r = ln((1 − q)/q) = ln1p((1 − 2q)/q)` between distinct inputs of one block of size ≥ 2,
//! +∞ across blocks (an output of one block is impossible from another), 0 on the diagonal;
//! [`realized_epsilon`](BlockHadamardResponse::realized_epsilon) is `ε_r`, below ε by about
//! `2^−46·max(ε, 1)` (≈ 1.4e−14·max(ε, 1)). A partition whose blocks are all singletons is refused: no pair of inputs would be
//! constrained (there would be no realized ε) and the reports would be the values.
//!
//! Equivalently `Q(offset_j + c | x) = (1 + (1 − 2q)·H(r, c))/K_j`.
//!
//! # Estimator (eqs. (22)–(23))
//! With `N_j` the report counts of block j (length `K_j`) and n reports in all, one FWHT per
//! block: `p̂_(j,i) = (H_{K_j} N_j)_{i+1} / (n (1 − 2q))` (the paper's
//! `2c (p̂(S_x) − p̂(X_j)/2)` with `c = (e^ε + 1)/(e^ε − 1) = 1/(1 − 2q)` for the exact q, since
//! `(H N_j)_r = 2·#S_x − #block`); a singleton's `p̂_x = N_{offset_j}/n`. Exactly unbiased for
//! the realized channel: `E (H N_j)_r / n = (1 − 2q) p_x` (`H H = K I`). Variance
//! `(c² p(block j) − p_x²)/n` with `c = 1/(1 − 2q)` (`p_x(1 − p_x)/n` for a singleton);
//! eq. (24): `E‖p̂ − p‖₁ ≤ 2c √(3 Σ k_j² / n)`.
//!
//! Channel products for the iterative Bayesian update, one FWHT per block:
//! `(Qᵀd)_{offset_j + c} = (D_j + (1 − 2q)(H d_j)_c)/K_j` with `d_j` the block's values of d
//! placed at rows `i + 1` and `D_j` their sum; `(Q w)_x = (W_j + (1 − 2q)(H w_j)_{i+1})/K_j`,
//! `W_j = Σ w_j`. Blocks are transformed in place in one array of S entries: consecutive
//! blocks of one size are grouped into tasks of about 2^16 outputs (run in parallel, no
//! per-block allocation), blocks of 2^16 outputs or more by the parallel FWHT one at a time.
//!
//! # Sampling (exact)
//! A value → `(j, i)` table (8 bytes per value) is built once with the mechanism. A user of
//! a singleton block reports `offset_j` and draws nothing. Otherwise one 64-bit word w: its
//! high half decides "outside" exactly with probability q (`q·2^32 = t + f`, t an integer,
//! `0 ≤ f < 1`, both exact: outside iff `w_hi < t`, and on `w_hi = t` (probability 2^−32) an
//! exact Bernoulli(f) on further words, `rng::BernoulliThreshold`); its low half gives a
//! uniform `v < K_j/2` (K_j/2 ≤ 2^32 is a power of two); the report is `offset_j + c` with c
//! the v-th element of `S_x` (inside) or of its complement (outside),
//! `HadamardResponse::nth_with_parity` (a bijection, so c is uniform). User u draws from the
//! stream of chunk `u / SAMPLE_CHUNK`: reports do not depend on the thread count.
//!
//! # Simulation (exact in law, cost independent of n)
//! The channel of x = (j, i), `k_j ≥ 2`, is the mixture `2q·U(block j) + (1 − 2q)·U(S_x)`
//! (`mechanisms`, "Simulation", restricted to the block): `K_x ~ Bin(n_x, 1 − 2q)` users
//! report uniformly in `S_x`, the others uniformly in their block. Per block, the `S_x`
//! parts are drawn value by value (O(min(K_x, K_j/2)) draws each), or, when the block's
//! group of equal blocks expects at least `PASSES_ABOVE` own-set users per output, by HR's
//! Hadamard passes (`hadamard_response::hadamard_passes`, O(K log K) whatever n) on that
//! group's outputs, with stream ids starting at the group's first output so that groups never
//! share a stream. Each block's uniform users spread over its K_j outputs (recursive
//! halving; blocks of more than 2^16 outputs by `add_uniform_reports_at`, streams from the
//! block's first output). Singletons: every user reports the block. The binomials are
//! `rng::binomial`'s (exact up to its double-precision arithmetic).

use super::hadamard_response::{hadamard_passes, HadamardResponse, PASSES_ABOVE, PASS_CHUNK};
use super::one_bit_hadamard::flip_probability;
use super::{
    add_uniform_reports_at, as_atomic, check_domain, check_epsilon, draw_own_counts,
    simulation_stream, simulation_users, spread_interruptible, IndexMechanism, Operation,
    SimulationPhase, MAX_DOMAIN,
};
use crate::error::{Error, Result};
use crate::hadamard::{fwht_in_place, fwht_in_place_checked, Butterfly};
use crate::interrupt::{interruptible, Check};
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{BernoulliThreshold, Key, StreamRng};
use rand_core::Rng;
use rayon::prelude::*;
use std::sync::atomic::Ordering;

/// Outputs per task of the batched block transforms; blocks of at least this many outputs
/// are transformed one at a time by the parallel FWHT.
const TASK_OUTPUTS: u64 = 1 << 16;

/// Bytes per value of the `(block, index)` table.
const PLACE_BYTES: usize = 8;
/// Bytes per block of the block table and of the region table (an upper bound: at most one
/// region per block).
const BLOCK_BYTES: usize = std::mem::size_of::<Block>() + std::mem::size_of::<Region>();
/// Bytes of one (region, slice) pair of `region_slices`.
const SLICE_BYTES: usize = std::mem::size_of::<(Region, &mut [u64])>();

/// One block of the partition and its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Its first output.
    pub offset: u64,
    /// `K_j`: 1 for a singleton, else `2^⌈log2(k_j + 1)⌉`.
    pub outputs: u64,
    /// `k_j`, the number of its inputs.
    pub values: u64,
}

/// Consecutive non-singleton blocks of one size, at most [`TASK_OUTPUTS`] outputs in all
/// unless it is one larger block: the unit of the batched transforms and of the passes.
#[derive(Clone, Copy, Debug)]
struct Region {
    /// First output (`offset` of its first block).
    start: u64,
    /// Outputs (`blocks · outputs`).
    len: u64,
    /// `K` of its blocks.
    outputs: u64,
    /// Its first block and the number of blocks.
    first_block: u64,
    blocks: u64,
}

#[derive(Clone, Debug)]
pub struct BlockHadamardResponse {
    k: u64,
    epsilon: f64,
    /// Per value x: `(j << 32) | i`.
    places: Vec<u64>,
    blocks: Vec<Block>,
    regions: Vec<Region>,
    /// `S = Σ K_j`.
    outputs: u64,
    /// q, the probability of reporting outside the own set (`1 − q` exact).
    flip: f64,
    /// `⌊q·2^32⌋` and a Bernoulli of `q·2^32 − ⌊q·2^32⌋` (module documentation, "Sampling").
    flip_top: u64,
    flip_rest: BernoulliThreshold,
}

/// `K_j` for a block of `values` inputs.
fn block_outputs(values: u64) -> u64 {
    if values == 1 {
        1
    } else {
        (values + 1).next_power_of_two()
    }
}

impl BlockHadamardResponse {
    /// Blocks of the given sizes (each ≥ 1): block j holds the next `sizes[j]` values in
    /// increasing order. `k = Σ sizes` must lie in `[2, 2^32]`.
    pub fn from_sizes(sizes: &[u64], epsilon: f64) -> Result<Self> {
        if sizes.is_empty() {
            return Err(Error::Value("blocks: at least one block is needed".into()));
        }
        if let Some(j) = sizes.iter().position(|&s| s == 0) {
            return Err(Error::Value(format!(
                "block sizes must be ≥ 1 (no empty blocks): blocks[{j}] = 0"
            )));
        }
        let k = sizes
            .iter()
            .try_fold(0u64, |t, &s| t.checked_add(s))
            .filter(|&t| t <= MAX_DOMAIN)
            .ok_or_else(|| Error::Value("block sizes add up to more than 2^32 inputs".into()))?;
        check_domain(k)?;
        check_epsilon(epsilon)?;
        Self::construction_footprint(k, sizes.len() as u64).check()?;
        let mut places = allocate_zeroed::<u64>(k as usize, "the value table")?;
        let mut x = 0usize;
        for (j, &size) in sizes.iter().enumerate() {
            for (i, place) in places[x..x + size as usize].iter_mut().enumerate() {
                *place = (j as u64) << 32 | i as u64;
            }
            x += size as usize;
        }
        Self::build(k, epsilon, sizes, places)
    }

    /// Blocks given as one label per value (`labels[x]` = the block of x): labels `0..m−1`,
    /// each used; inputs of a block are numbered in increasing order of value.
    pub fn from_labels(labels: &[u32], epsilon: f64) -> Result<Self> {
        let k = labels.len() as u64;
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let m = labels.par_iter().copied().max().unwrap_or(0) as u64 + 1;
        if m > k {
            return Err(Error::Value(format!(
                "block labels must be 0..m−1 with no empty block: the largest label, {}, leaves                  some of 0..{} unused among k = {k} values",
                m - 1,
                m - 1
            )));
        }
        Self::construction_footprint(k, m).check()?;
        let mut sizes = allocate_zeroed::<u64>(m as usize, "block sizes")?;
        for &l in labels {
            sizes[l as usize] += 1;
        }
        if let Some(j) = sizes.iter().position(|&s| s == 0) {
            return Err(Error::Value(format!(
                "block labels must be 0..m−1 with no empty block: label {j} is unused (largest \
                 label {})",
                m - 1
            )));
        }
        let mut places = allocate_zeroed::<u64>(k as usize, "the value table")?;
        // `sizes` counts again as the running index of each block, then is restored.
        let mut next = allocate_zeroed::<u64>(m as usize, "block counters")?;
        for (place, &l) in places.iter_mut().zip(labels) {
            let j = l as usize;
            *place = (j as u64) << 32 | next[j];
            next[j] += 1;
        }
        drop(next);
        Self::build(k, epsilon, &sizes, places)
    }

    /// The memory a mechanism of k values in m blocks holds (and its construction uses).
    pub fn construction_footprint(k: u64, m: u64) -> Footprint {
        Footprint::new("BlockHadamardResponse")
            .add("the value table", k, PLACE_BYTES)
            .add("the block and region tables", m, BLOCK_BYTES)
            .add("block sizes and counters", m, 16)
            .hint("use fewer values (the mechanism holds 8 bytes per value)")
    }

    fn build(k: u64, epsilon: f64, sizes: &[u64], places: Vec<u64>) -> Result<Self> {
        let mut blocks = Vec::new();
        blocks
            .try_reserve_exact(sizes.len())
            .map_err(|_| Error::Memory("the block table: the allocator refused".into()))?;
        let mut offset = 0u64;
        for &values in sizes {
            let outputs = block_outputs(values);
            blocks.push(Block {
                offset,
                outputs,
                values,
            });
            offset += outputs;
        }
        let regions = Self::regions_of(&blocks)?;
        if regions.is_empty() {
            return Err(Error::Value(format!(
                "every block is a singleton ({k} blocks of one value): block-structured LDP \
                 would constrain no pair of values and the reports would be the values \
                 themselves; refused (give at least one block of two values or more)"
            )));
        }
        let flip = flip_probability(epsilon)?;
        let scaled = flip * 4_294_967_296.0; // exact: a power of two
        let top = scaled.floor();
        Ok(Self {
            k,
            epsilon,
            places,
            blocks,
            regions,
            outputs: offset,
            flip,
            flip_top: top as u64,
            flip_rest: BernoulliThreshold::new(scaled - top)?,
        })
    }

    /// Consecutive non-singleton blocks of one size, grouped up to [`TASK_OUTPUTS`] outputs.
    fn regions_of(blocks: &[Block]) -> Result<Vec<Region>> {
        let mut regions: Vec<Region> = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            if b.outputs == 1 {
                continue;
            }
            if let Some(last) = regions.last_mut() {
                let adjacent = last.first_block + last.blocks == j as u64;
                if adjacent && last.outputs == b.outputs && last.len + b.outputs <= TASK_OUTPUTS {
                    last.len += b.outputs;
                    last.blocks += 1;
                    continue;
                }
            }
            if regions.len() == regions.capacity() {
                regions
                    .try_reserve(regions.len().max(16))
                    .map_err(|_| Error::Memory("the region table: the allocator refused".into()))?;
            }
            regions.push(Region {
                start: b.offset,
                len: b.outputs,
                outputs: b.outputs,
                first_block: j as u64,
                blocks: 1,
            });
        }
        Ok(regions)
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    pub fn k(&self) -> u64 {
        self.k
    }

    /// The blocks, in order (offsets, output counts `K_j`, sizes `k_j`).
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// `(j, i)`: the block of x and its index in the block.
    #[inline(always)]
    pub fn place(&self, x: u64) -> (u64, u64) {
        let p = self.places[x as usize];
        (p >> 32, p & 0xFFFF_FFFF)
    }

    /// Number of outputs S, as a length.
    pub fn output_size_usize(&self) -> usize {
        self.outputs as usize
    }

    /// `(1 − q, q)`: the probabilities of reporting inside and outside the own set, as
    /// realized (`1 − q` exact); per output of a block of `K_j` outputs, `(1 − q)/(K_j/2)` and
    /// `q/(K_j/2)`.
    pub fn probabilities(&self) -> (f64, f64) {
        (1.0 - self.flip, self.flip)
    }

    /// `ln((1 − q)/q)`: the exact budget the channel realizes between two inputs of one
    /// block (≤ ε; some block has two inputs or more, construction makes sure).
    pub fn realized_epsilon(&self) -> f64 {
        ((1.0 - 2.0 * self.flip) / self.flip).ln_1p()
    }

    /// `1 − 2q`, the factor between the block transforms and the probabilities.
    fn gap(&self) -> f64 {
        1.0 - 2.0 * self.flip
    }

    /// Row x of the channel matrix (length S).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        row.fill(0.0);
        let (j, i) = self.place(x);
        let b = self.blocks[j as usize];
        let block = &mut row[b.offset as usize..(b.offset + b.outputs) as usize];
        if b.outputs == 1 {
            block[0] = 1.0;
            return;
        }
        let h = (b.outputs / 2) as f64;
        let (inside, outside) = ((1.0 - self.flip) / h, self.flip / h);
        let r = i + 1;
        for (c, q) in block.iter_mut().enumerate() {
            *q = if (r & c as u64).count_ones() % 2 == 0 {
                inside
            } else {
                outside
            };
        }
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`).
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "BlockHadamardResponse";
        let (k, s, m) = (self.k, self.outputs, self.blocks.len() as u64);
        // `region_slices` and the split of `transform_blocks`: at most three lists of
        // (region, slice) pairs at once.
        let slice_lists = |lists: u64| lists.saturating_mul(self.regions.len() as u64);
        let slices = |f: Footprint| f.add("the block slices", slice_lists(3), SLICE_BYTES);
        match op {
            Operation::Estimate => slices(
                Footprint::new(format!("{name} estimate"))
                    .add("block transforms", s, 8)
                    .add("the result", k, 8),
            ),
            Operation::ChannelProduct => slices(
                Footprint::new(format!("{name} channel product"))
                    .add("block transforms", s, 8)
                    .add("the result", s.max(k), 8),
            ),
            Operation::Simulate { .. } => Footprint::new(format!("{name} simulate"))
                .add("the report counts and the passes' work array", 2 * s, 8)
                .add("users and algorithm per block", m, 9)
                .add("the block slices", slice_lists(2), SLICE_BYTES)
                .add(
                    "uniform users per chunk of a large block",
                    s.div_ceil(1 << 16),
                    8,
                )
                .hint("lower k (the simulation's memory is proportional to the number of outputs, not to the number of users)"),
        }
    }

    /// `t[region]` for every region, mutably and disjointly, with the region.
    fn region_slices<'a, T>(&self, t: &'a mut [T]) -> Vec<(Region, &'a mut [T])> {
        let mut out = Vec::with_capacity(self.regions.len());
        let mut rest = t;
        let mut at = 0u64;
        for region in &self.regions {
            let (_, tail) = rest.split_at_mut((region.start - at) as usize);
            let (mine, tail) = tail.split_at_mut(region.len as usize);
            out.push((*region, mine));
            rest = tail;
            at = region.start + region.len;
        }
        out
    }

    /// `H_{K_j}` applied to every block of `t` (length S) in place (singletons are their own
    /// transform), calling `check` between tasks.
    fn transform_blocks<T: Butterfly, C: Check>(&self, t: &mut [T], check: &C) -> Result<()> {
        let slices = self.region_slices(t);
        let (large, small): (Vec<_>, Vec<_>) = slices
            .into_iter()
            .partition(|(r, _)| r.outputs >= TASK_OUTPUTS);
        small.into_par_iter().try_for_each(|(r, region)| {
            check()?;
            region
                .chunks_exact_mut(r.outputs as usize)
                .for_each(fwht_in_place);
            Ok(())
        })?;
        for (_, region) in large {
            fwht_in_place_checked(region, check)?;
        }
        Ok(())
    }

    interruptible! {
        /// Unbiased estimate from the report histogram (length S, `n > 0`).
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
        let mut t: Vec<i64> = counts
            .par_iter()
            .with_min_len(1 << 14)
            .map(|&c| c as i64)
            .collect();
        self.transform_blocks(&mut t, check)?;
        let n = n as f64;
        Ok(self.estimate_from_transforms(|y| t[y] as f64 / n))
    }

    interruptible! {
        /// Unbiased estimate from report frequencies (length S), e.g. exact expectations.
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
        Ok(self.estimate_from_transforms(|y| t[y]))
    }

    /// The estimator, given `transformed(y)` = entry y of the block transforms of the
    /// frequencies.
    fn estimate_from_transforms(&self, transformed: impl Fn(usize) -> f64 + Sync) -> Vec<f64> {
        let scale = 1.0 / self.gap();
        (0..self.k as usize)
            .into_par_iter()
            .with_min_len(1 << 14)
            .map(|x| {
                let (j, i) = self.place(x as u64);
                let b = &self.blocks[j as usize];
                if b.outputs == 1 {
                    transformed(b.offset as usize)
                } else {
                    transformed((b.offset + i + 1) as usize) * scale
                }
            })
            .collect()
    }

    interruptible! {
        /// Expected report frequencies `Qᵀ dist` (length S), one FWHT per block.
        pub fn expected_frequencies / try_expected_frequencies
            = try_expected_frequencies_with(dist: &[f64]) -> Vec<f64>;
    }

    fn try_expected_frequencies_with<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        let mut out = allocate_zeroed::<f64>(self.output_size_usize(), "block transforms")?;
        for (x, &v) in dist.iter().enumerate() {
            out[self.row_position(x as u64)] = v;
        }
        self.transform_blocks(&mut out, check)?;
        // Entry 0 of a block's transform is its sum D_j (row 0 holds no value).
        let gap = self.gap();
        self.finish_blocks(&mut out, |mass, v, k| (mass + gap * v) / k);
        Ok(out)
    }

    /// Where value x sits before the transforms: `offset_j + i + 1` (its row), or the
    /// singleton's output.
    #[inline]
    fn row_position(&self, x: u64) -> usize {
        let (j, i) = self.place(x);
        let b = &self.blocks[j as usize];
        if b.outputs == 1 {
            b.offset as usize
        } else {
            (b.offset + i + 1) as usize
        }
    }

    /// `v ← f(block sum, v, K)` for every entry of every non-singleton block of the
    /// transforms `t` (length S), the sum being entry 0 of the block's transform.
    fn finish_blocks(&self, t: &mut [f64], f: impl Fn(f64, f64, f64) -> f64 + Sync) {
        self.region_slices(t)
            .into_par_iter()
            .for_each(|(r, region)| {
                let size = r.outputs as usize;
                for block in region.chunks_exact_mut(size) {
                    let mass = block[0];
                    block.iter_mut().for_each(|v| *v = f(mass, *v, size as f64));
                }
            });
    }

    interruptible! {
        /// `Q w` (length k): `(Q w)_x = Σ_y Q(y|x) w_y`, the adjoint of `expected_frequencies`.
        pub fn channel_apply / try_channel_apply
            = try_channel_apply_with(w: &[f64]) -> Vec<f64>;
    }

    fn try_channel_apply_with<C: Check>(&self, w: &[f64], check: &C) -> Result<Vec<f64>> {
        let mut t = w.to_vec();
        self.transform_blocks(&mut t, check)?;
        let gap = self.gap();
        Ok((0..self.k as usize)
            .into_par_iter()
            .with_min_len(1 << 14)
            .map(|x| {
                let (j, i) = self.place(x as u64);
                let b = &self.blocks[j as usize];
                let at = b.offset as usize;
                if b.outputs == 1 {
                    t[at]
                } else {
                    (t[at] + gap * t[at + i as usize + 1]) / b.outputs as f64
                }
            })
            .collect())
    }

    // -- simulation (module documentation, "Simulation") ---------------------------------

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law.
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        self.simulate_with(key, true_counts, None, PASS_CHUNK)
    }

    /// With the own-set algorithm forced (`Some(true)`: passes everywhere, `Some(false)`:
    /// value by value) or chosen per region (`None`), and `chunk` positions per task of the
    /// passes (tests use small ones).
    fn simulate_with(
        &self,
        key: &Key,
        true_counts: &[u64],
        passes: Option<bool>,
        chunk: usize,
    ) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let (size, m) = (self.output_size_usize(), self.blocks.len());
        let own = self.gap();
        // Users per block, then the own-set algorithm of every block (by its region).
        let mut users = allocate_zeroed::<u64>(m, "users per block")?;
        {
            let cells = as_atomic(&mut users);
            true_counts
                .par_chunks(1 << 14)
                .enumerate()
                .for_each(|(c, chunk)| {
                    for (i, &n) in chunk.iter().enumerate().filter(|(_, &n)| n > 0) {
                        let (j, _) = self.place((c << 14 | i) as u64);
                        cells[j as usize].fetch_add(n, Ordering::Relaxed);
                    }
                });
        }
        let mut by_passes = allocate_zeroed::<bool>(m, "algorithm per block")?;
        for r in &self.regions {
            let blocks = r.first_block as usize..(r.first_block + r.blocks) as usize;
            let region_users: f64 = users[blocks.clone()].iter().map(|&u| u as f64).sum();
            let chosen = passes.unwrap_or(region_users * own >= PASSES_ABOVE * r.len as f64);
            by_passes[blocks].fill(chosen);
        }
        let mut counts = allocate_zeroed::<u64>(size, "the report counts")?;
        // The users of each block left for its uniform part (reusing `users`).
        users.fill(0);
        {
            let cells = as_atomic(&mut counts);
            let uniform = as_atomic(&mut users);
            draw_own_counts(
                key,
                true_counts,
                |x| {
                    let (j, _) = self.place(x);
                    if self.blocks[j as usize].outputs == 1 {
                        1.0
                    } else {
                        own
                    }
                },
                |rng, x, kept| {
                    let (j, i) = self.place(x);
                    let b = &self.blocks[j as usize];
                    let left = true_counts[x as usize] - kept;
                    if left > 0 {
                        uniform[j as usize].fetch_add(left, Ordering::Relaxed);
                    }
                    if b.outputs == 1 || by_passes[j as usize] {
                        // Its state for the passes (row i + 1), or the singleton's reports.
                        let at = if b.outputs == 1 { 0 } else { i + 1 };
                        cells[(b.offset + at) as usize].store(kept, Ordering::Relaxed);
                        return Ok(());
                    }
                    let r = i + 1;
                    spread_interruptible(rng, 0, b.outputs / 2, kept, &mut |v, n| {
                        let c = HadamardResponse::nth_with_parity(r, v, false);
                        cells[(b.offset + c) as usize].fetch_add(n, Ordering::Relaxed);
                    })
                },
            )?;
        }
        // The own sets of the regions drawn by the passes.
        if self
            .regions
            .iter()
            .any(|r| by_passes[r.first_block as usize])
        {
            let mut odd = allocate_zeroed::<u64>(size, "the odd-parity states")?;
            let evens = self.region_slices(&mut counts);
            let odds = self.region_slices(&mut odd);
            evens
                .into_par_iter()
                .zip(odds)
                .filter(|((r, _), _)| by_passes[r.first_block as usize])
                .try_for_each(|((r, even), (_, odd))| {
                    hadamard_passes(key, even, odd, r.outputs, chunk, r.start)
                })?;
        }
        // Uniform users, block by block: small blocks in parallel (atomic counts, the stream
        // of the block's first output), large ones by chunks of outputs.
        {
            let cells = as_atomic(&mut counts);
            (0..m)
                .into_par_iter()
                .with_min_len(64)
                .try_for_each(|j| -> Result<()> {
                    let b = &self.blocks[j];
                    let left = users[j];
                    if left == 0 || b.outputs > TASK_OUTPUTS {
                        return Ok(());
                    }
                    let mut rng = simulation_stream(key, SimulationPhase::Uniform, b.offset);
                    spread_interruptible(&mut rng, 0, b.outputs, left, &mut |y, n| {
                        cells[(b.offset + y) as usize].fetch_add(n, Ordering::Relaxed);
                    })
                })?;
        }
        for (j, b) in self.blocks.iter().enumerate() {
            if b.outputs > TASK_OUTPUTS && users[j] > 0 {
                let block = &mut counts[b.offset as usize..(b.offset + b.outputs) as usize];
                add_uniform_reports_at(key, block, users[j], b.offset)?;
            }
        }
        Ok(counts)
    }
}

impl IndexMechanism for BlockHadamardResponse {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.outputs
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let (j, i) = self.place(x);
        let b = &self.blocks[j as usize];
        if b.outputs == 1 {
            return b.offset;
        }
        let w = rng.next_u64();
        let high = w >> 32;
        let outside = if high != self.flip_top {
            high < self.flip_top
        } else {
            self.flip_rest.sample(rng)
        };
        let v = w & (b.outputs / 2 - 1);
        b.offset + HadamardResponse::nth_with_parity(i + 1, v, outside)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{
        channel_stats, chi_square, chi_square_critical, empirical_row, expected_from_rows,
    };
    use super::super::{aggregate, channel_matrix, privatize, Estimator};
    use super::*;
    use crate::hadamard::sylvester_entry;
    use crate::rng::key_from_u64;

    use crate::parallel::in_pool;

    /// Labels of a non-contiguous partition: value x in block `pattern[x % len]`.
    fn interleaved(k: usize, pattern: &[u32]) -> Vec<u32> {
        (0..k).map(|x| pattern[x % pattern.len()]).collect()
    }

    fn channel(m: &BlockHadamardResponse) -> Vec<f64> {
        let size = m.output_size();
        channel_matrix(m.k(), size, 1 << 22, |x, r| m.channel_row(x, r)).unwrap()
    }

    #[test]
    fn layout_follows_the_paper_with_singletons_in_one_output() {
        let m = BlockHadamardResponse::from_sizes(&[1, 2, 3, 5, 1], 1.0).unwrap();
        let got: Vec<(u64, u64, u64)> = m
            .blocks()
            .iter()
            .map(|b| (b.offset, b.outputs, b.values))
            .collect();
        assert_eq!(
            got,
            [(0, 1, 1), (1, 4, 2), (5, 4, 3), (9, 8, 5), (17, 1, 1)]
        );
        assert_eq!(m.output_size(), 18);
        assert_eq!(m.place(0), (0, 0));
        assert_eq!(m.place(3), (2, 0));
        assert_eq!(m.place(10), (3, 4));
        assert_eq!(m.place(11), (4, 0));
        // The same partition as labels gives the same mechanism.
        let labels = [0u32, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 4];
        let l = BlockHadamardResponse::from_labels(&labels, 1.0).unwrap();
        assert_eq!(l.blocks(), m.blocks());
        assert_eq!(l.places, m.places);
        // Rows i + 1 of H_{K_j}: value 10 = (3, 4) is on row 5 of H_8 at outputs 9..17.
        let mut row = vec![0.0; 18];
        m.channel_row(10, &mut row);
        let (inside, outside) = ((1.0 - m.flip) / 4.0, m.flip / 4.0);
        for c in 0..8u64 {
            let want = if sylvester_entry(5, c) == 1 {
                inside
            } else {
                outside
            };
            assert_eq!(row[9 + c as usize], want);
        }
        assert_eq!(row[..9].iter().chain(&row[17..]).sum::<f64>(), 0.0);
        m.channel_row(11, &mut row);
        assert_eq!(row[17], 1.0);
    }

    #[test]
    fn channel_satisfies_block_structured_ldp_exactly() {
        let partitions: Vec<Vec<u32>> = vec![
            interleaved(7, &[0, 1, 0, 2, 1, 0, 3]),
            interleaved(16, &[0, 1]),
            interleaved(12, &[2, 0, 1, 0, 2, 3]),
            vec![0; 5],
        ];
        for labels in &partitions {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0, 30.0] {
                let m = BlockHadamardResponse::from_labels(labels, eps).unwrap();
                let k = m.k() as usize;
                let size = m.output_size() as usize;
                let q = channel(&m);
                let realized = m.realized_epsilon();
                assert!(realized <= eps && eps - realized < 1e-12 * eps.max(1.0));
                for x in 0..k {
                    let row = &q[x * size..(x + 1) * size];
                    assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
                    for x2 in 0..k {
                        let same = labels[x] == labels[x2];
                        let mut worst = 0.0f64;
                        for y in 0..size {
                            let (a, b) = (row[y], q[x2 * size + y]);
                            if a > 0.0 {
                                if !same {
                                    assert_eq!(b, 0.0, "outputs shared across blocks");
                                    continue;
                                }
                                worst = worst.max(a.ln() - b.ln());
                            }
                        }
                        if same && x != x2 {
                            assert!((worst - realized).abs() < 1e-12, "{labels:?} {eps}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn one_block_is_high_privacy_hadamard_response() {
        for (k, eps) in [(10u64, 0.5), (7, 2.0), (16, 1.0)] {
            let m = BlockHadamardResponse::from_sizes(&[k], eps).unwrap();
            let hr = HadamardResponse::with_blocks(k, eps, Some(1)).unwrap();
            assert_eq!(m.output_size(), IndexMechanism::output_size(&hr));
            let size = m.output_size() as usize;
            let (mut a, mut b) = (vec![0.0; size], vec![0.0; size]);
            for x in 0..k {
                m.channel_row(x, &mut a);
                hr.channel_row(x, &mut b);
                for (u, v) in a.iter().zip(&b) {
                    assert!((u - v).abs() <= 1e-13 * v, "k {k} eps {eps} x {x}");
                }
            }
            let (ratio, _) = channel_stats(&channel(&m), k as usize);
            assert!((ratio - m.realized_epsilon()).abs() < 1e-12);
        }
    }

    #[test]
    fn estimator_is_unbiased_and_channel_products_are_adjoint() {
        for (labels, eps) in [
            (interleaved(11, &[0, 1, 2, 1, 3, 0]), 0.5),
            (interleaved(40, &[0, 1, 1, 2, 2, 2, 3]), 2.0),
            (vec![1, 0, 1], 1.0),
        ] {
            let m = BlockHadamardResponse::from_labels(&labels, eps).unwrap();
            let k = m.k() as usize;
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64 + 0.5).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let freq = m.expected_frequencies(&p);
            for (a, b) in freq.iter().zip(&expected_from_rows(&m, &p)) {
                assert!((a - b).abs() < 1e-15, "{a} vs {b}");
            }
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-13, "{a} vs {b}");
            }
            // Integer decoding against the paper's eq. (23) computed by summing over S_x.
            let size = m.output_size() as usize;
            let counts: Vec<u64> = (0..size as u64).map(|z| (z * 31 + 7) % 50).collect();
            let n: u64 = counts.iter().sum();
            let fast = m.estimate_raw(&counts, n);
            let c = 1.0 / (1.0 - 2.0 * m.flip);
            for x in 0..k as u64 {
                let (j, i) = m.place(x);
                let b = m.blocks()[j as usize];
                let block = &counts[b.offset as usize..(b.offset + b.outputs) as usize];
                let all = block.iter().sum::<u64>() as f64 / n as f64;
                let direct = if b.outputs == 1 {
                    all
                } else {
                    let own: f64 = (0..b.outputs)
                        .filter(|&w| sylvester_entry(i + 1, w) == 1)
                        .map(|w| block[w as usize] as f64)
                        .sum::<f64>()
                        / n as f64;
                    2.0 * c * (own - all / 2.0)
                };
                assert!((fast[x as usize] - direct).abs() < 1e-12);
            }
            let w: Vec<f64> = (0..size).map(|z| (z as f64 * 0.37).sin()).collect();
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-13);
        }
    }

    #[test]
    fn large_blocks_are_transformed_like_small_ones() {
        // A block of 2^16 outputs (the parallel FWHT) beside small ones of two sizes.
        let sizes = [40_000u64, 3, 3, 1, 5, 5, 5];
        let m = BlockHadamardResponse::from_sizes(&sizes, 1.0).unwrap();
        assert_eq!(m.blocks()[0].outputs, 1 << 16);
        let size = m.output_size_usize();
        let counts: Vec<u64> = (0..size as u64).map(|z| (z * 2_654_435_761) % 97).collect();
        let n: u64 = counts.iter().sum();
        let mut t: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
        m.transform_blocks(&mut t, &crate::interrupt::never)
            .unwrap();
        for b in m.blocks() {
            let block = &counts[b.offset as usize..(b.offset + b.outputs) as usize];
            for r in [0u64, 1, b.outputs - 1]
                .into_iter()
                .filter(|&r| r < b.outputs)
            {
                let direct: i64 = (0..b.outputs)
                    .map(|c| sylvester_entry(r, c) as i64 * block[c as usize] as i64)
                    .sum();
                assert_eq!(t[(b.offset + r) as usize], direct, "block {b:?} row {r}");
            }
        }
        let est = m.estimate_raw(&counts, n);
        assert_eq!(est.len(), m.k() as usize);
    }

    #[test]
    fn sampler_matches_the_channel() {
        let labels = interleaved(9, &[0, 1, 0, 2, 1, 0, 1, 0, 1]);
        for eps in [0.5, 3.0] {
            let m = BlockHadamardResponse::from_labels(&labels, eps).unwrap();
            let size = m.output_size() as usize;
            let mut row = vec![0.0; size];
            for x in [0u32, 1, 3, 8] {
                m.channel_row(x as u64, &mut row);
                let draws = 400_000;
                let freq = empirical_row(&m, x, draws, 5 + x as u64);
                for (f, q) in freq.iter().zip(&row) {
                    assert!(*q > 0.0 || *f == 0.0, "a report outside the block");
                }
                let df = row.iter().filter(|&&q| q > 0.0).count().max(2) - 1;
                let stat = chi_square(&freq, &row, draws);
                assert!(stat < chi_square_critical(df), "eps {eps} x {x}: {stat}");
            }
        }
    }

    #[test]
    fn the_outside_probability_is_exactly_the_realized_q() {
        // P(outside) = t/2^32 + f/2^32 (the tie on the high half, probability 2^-32, draws
        // Bernoulli(f)): exactly q when q·2^32 = t + f holds exactly, at every ε.
        for eps in [1e-9, 0.1, 1.0, 5.0, 30.0, 300.0, 700.0] {
            let m = BlockHadamardResponse::from_sizes(&[3], eps).unwrap();
            let f = m.flip * 4_294_967_296.0 - m.flip_top as f64;
            assert!((0.0..1.0).contains(&f) && m.flip_top < 1 << 32, "eps {eps}");
            assert_eq!(
                (m.flip_top as f64 + f) / 4_294_967_296.0,
                m.flip,
                "eps {eps}"
            );
            // The realized ratio never exceeds e^ε, and 1 − q is exact.
            assert!(m.realized_epsilon() <= eps);
            assert_eq!((1.0 - m.flip) + m.flip, 1.0);
        }
    }

    #[test]
    fn privatize_and_simulate_do_not_depend_on_the_thread_count() {
        let labels = interleaved(3000, &[0, 1, 2, 1, 3, 4, 4, 5]);
        let m = BlockHadamardResponse::from_labels(&labels, 1.0).unwrap();
        let values: Vec<u32> = (0..300_000u32).map(|i| (i * 7919) % 3000).collect();
        let key = key_from_u64(9);
        let counts: Vec<u64> = (0..3000u64).map(|x| x % 13 * 1000).collect();
        let run = |threads| {
            in_pool(threads, || {
                let mut out = vec![0u16; values.len()];
                privatize(&m, &key, &values, &mut out).unwrap();
                let sim = m.simulate(&key, &counts).unwrap();
                let mut agg = vec![0u64; m.output_size_usize()];
                aggregate(&out, &mut agg, false).unwrap();
                (out, sim, m.estimate_raw(&agg, values.len() as u64))
            })
        };
        let one = run(1);
        assert_eq!(one, run(3));
        assert_eq!(one, run(2));
    }

    /// [`assert_law_of`] block by block: a block's total is its users' count (fixed), so the
    /// histogram's covariance is singular over all S outputs; per block (K_j − 1 free
    /// coordinates) it is not. Checks every total, each output's mean (5 s.e.) and, where
    /// the variance is at least 10, its sample variance (6 s.e.), and the sum over blocks of
    /// the pooled Mahalanobis statistics against the 0.1% critical value of χ² with
    /// Σ (K_j − 1) degrees of freedom (independent blocks).
    fn assert_block_law(
        label: &str,
        m: &BlockHadamardResponse,
        simulate: impl Fn(&Key, &[u64]) -> Vec<u64>,
        true_counts: &[u64],
        reps: u64,
        seed: u64,
    ) {
        let runs: Vec<Vec<u64>> = (seed..seed + reps)
            .map(|s| simulate(&key_from_u64(s), true_counts))
            .collect();
        assert_pooled_law(label, m, &runs, true_counts, 1.0, |_| 0.0);
    }

    /// The checks of [`assert_block_law`] on `runs` histograms: the pooled deviation from
    /// `centre(y)` (the exact mean when 0), whose covariance is `scale·reps·C`.
    fn assert_pooled_law(
        label: &str,
        m: &BlockHadamardResponse,
        runs: &[Vec<u64>],
        true_counts: &[u64],
        scale: f64,
        centre: impl Fn(usize) -> f64,
    ) {
        use super::super::testing::{assert_output_moments, histogram_moments, mahalanobis};
        let (mean, cov) = histogram_moments(m, true_counts);
        let size = mean.len();
        let r = runs.len() as f64;
        let mut users = vec![0u64; m.blocks().len()];
        for (x, &c) in true_counts.iter().enumerate() {
            users[m.place(x as u64).0 as usize] += c;
        }
        for run in runs {
            for (j, b) in m.blocks().iter().enumerate() {
                let total: u64 = run[b.offset as usize..(b.offset + b.outputs) as usize]
                    .iter()
                    .sum();
                assert_eq!(total, users[j], "{label}: block {j} total");
            }
        }
        if scale == 1.0 {
            assert_output_moments(label, runs, &mean, &cov);
        }
        let (mut statistic, mut df) = (0.0, 0usize);
        for (j, b) in m.blocks().iter().enumerate() {
            if b.outputs == 1 || users[j] == 0 {
                continue;
            }
            let range = b.offset as usize..(b.offset + b.outputs) as usize;
            let pooled: Vec<f64> = range
                .clone()
                .map(|y| {
                    let expected = if scale == 1.0 { mean[y] } else { centre(y) };
                    runs.iter().map(|c| c[y] as f64 - expected).sum()
                })
                .collect();
            let width = range.len();
            let mut block_cov = vec![0.0; width * width];
            for (a, ya) in range.clone().enumerate() {
                for (c, yc) in range.clone().enumerate() {
                    block_cov[a * width + c] = cov[ya * size + yc] * scale * r;
                }
            }
            statistic += mahalanobis(&pooled, &block_cov);
            df += width - 1;
        }
        if df > 0 {
            let critical = chi_square_critical(df);
            assert!(
                statistic < critical,
                "{label}: pooled chi-square {statistic} ≥ {critical} (df {df})"
            );
        }
    }

    /// Simulation against privatization in law, block by block: the difference of `reps`
    /// pooled simulated and privatized histograms has covariance `2·reps·C`.
    fn assert_block_simulate_matches_privatize(
        label: &str,
        m: &BlockHadamardResponse,
        true_counts: &[u64],
        reps: u64,
        seed: u64,
    ) {
        let values: Vec<u32> = true_counts
            .iter()
            .enumerate()
            .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
            .collect();
        let mut diffs = Vec::new();
        let mut reports = vec![0u64; values.len()];
        let mut privatized = vec![0.0; m.output_size_usize()];
        for s in seed..seed + reps {
            diffs.push(m.simulate(&key_from_u64(s), true_counts).unwrap());
            privatize(m, &key_from_u64(s + reps), &values, &mut reports).unwrap();
            let mut counts = vec![0u64; m.output_size_usize()];
            aggregate(&reports, &mut counts, false).unwrap();
            privatized
                .iter_mut()
                .zip(&counts)
                .for_each(|(p, &c)| *p += c as f64);
        }
        // Σ simulated − Σ privatized = Σ_runs (simulated − privatized/reps).
        let per_run: Vec<f64> = privatized.iter().map(|p| p / reps as f64).collect();
        assert_pooled_law(label, m, &diffs, true_counts, 2.0, |y| per_run[y]);
    }

    /// Instances of every shape: singletons beside HR blocks, a non-contiguous partition,
    /// blocks of several sizes (regions of several blocks and of one), one block.
    fn simulation_instances() -> Vec<BlockHadamardResponse> {
        vec![
            BlockHadamardResponse::from_sizes(&[1, 2, 3, 1, 5], 0.5).unwrap(),
            BlockHadamardResponse::from_labels(&interleaved(10, &[1, 0, 2, 0, 1, 0]), 1.0).unwrap(),
            BlockHadamardResponse::from_sizes(&[9], 2.0).unwrap(),
        ]
    }

    #[test]
    fn simulate_follows_the_exact_law_by_both_own_set_algorithms() {
        for (t, m) in simulation_instances().iter().enumerate() {
            let k = m.k();
            let counts: Vec<u64> = (0..k)
                .map(|x| (x * 997 % 130) + (x % 3 == 0) as u64 * 500)
                .collect();
            let label = format!("instance {t}");
            let seed = 100 * t as u64;
            let few: Vec<u64> = counts.iter().map(|c| c % 7).collect();
            let by = |passes: Option<bool>, chunk: usize| {
                move |key: &Key, c: &[u64]| m.simulate_with(key, c, passes, chunk).unwrap()
            };
            let what = format!("{label} by value, few");
            assert_block_law(&what, m, by(Some(false), 1), &few, 300, seed);
            let what = format!("{label} by value");
            assert_block_law(&what, m, by(Some(false), 1), &counts, 300, seed + 1);
            for chunk in [2usize, 4, PASS_CHUNK] {
                let what = format!("{label} passes, chunk {chunk}");
                assert_block_law(&what, m, by(Some(true), chunk), &counts, 300, seed + 2);
            }
            let what = format!("{label} chosen");
            assert_block_law(&what, m, by(None, PASS_CHUNK), &counts, 300, seed + 3);
            assert_block_simulate_matches_privatize(&label, m, &counts, 200, seed + 4);
        }
    }

    #[test]
    fn simulate_is_exact_at_10_to_the_12_users_and_for_large_blocks() {
        let m = BlockHadamardResponse::from_sizes(&[1, 4, 3], 0.5).unwrap();
        let huge: Vec<u64> = (0..8).map(|x| (x + 1) * 100_000_000_000).collect();
        let simulate = |key: &Key, c: &[u64]| m.simulate(key, c).unwrap();
        assert_block_law("10^12 users", &m, simulate, &huge, 300, 77);
        // A block of more than 2^16 outputs: its uniform users by chunks of outputs. The
        // law per output is checked on the totals of two halves and of the own sets.
        let big = BlockHadamardResponse::from_sizes(&[70_000, 2], 1.0).unwrap();
        assert_eq!(big.blocks()[0].outputs, 1 << 17);
        let mut counts = vec![0u64; 70_002];
        counts[5] = 3_000_000;
        counts[70_001] = 1000;
        let q = big.flip;
        let sim = big.simulate(&key_from_u64(5), &counts).unwrap();
        assert_eq!(sim.iter().sum::<u64>(), 3_001_000);
        let (_, i) = big.place(5);
        let inside: u64 = (0..1u64 << 17)
            .filter(|&c| sylvester_entry(i + 1, c) == 1)
            .map(|c| sim[c as usize])
            .sum();
        let expected = 3e6 * (1.0 - q);
        let sd = (3e6 * q * (1.0 - q)).sqrt();
        assert!(
            (inside as f64 - expected).abs() < 5.0 * sd,
            "{inside} vs {expected}"
        );
        let block2: u64 = sim[(1 << 17)..].iter().sum();
        assert_eq!(block2, 1000);
    }

    #[test]
    fn bad_partitions_and_epsilons_are_refused() {
        let message = |r: Result<BlockHadamardResponse>| r.unwrap_err().to_string();
        assert!(message(BlockHadamardResponse::from_sizes(&[], 1.0)).contains("at least one"));
        assert!(message(BlockHadamardResponse::from_sizes(&[3, 0], 1.0)).contains("blocks[1]"));
        assert!(message(BlockHadamardResponse::from_sizes(&[1], 1.0)).contains("k"));
        assert!(message(BlockHadamardResponse::from_sizes(
            &[1 << 31, 1 << 31, 1],
            1.0
        ))
        .contains("2^32"));
        assert!(message(BlockHadamardResponse::from_labels(&[0, 2, 2], 1.0)).contains("label 1"));
        assert!(message(BlockHadamardResponse::from_labels(&[0], 1.0)).contains("k"));
        for eps in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
            assert!(
                BlockHadamardResponse::from_sizes(&[2, 3], eps).is_err(),
                "{eps}"
            );
        }
        // Every block a singleton: no pair would be constrained; refused.
        let e = message(BlockHadamardResponse::from_sizes(&[1, 1, 1], 1.0));
        assert!(e.contains("every block is a singleton"), "{e}");
        let e = message(BlockHadamardResponse::from_labels(&[1, 0], 1.0));
        assert!(e.contains("every block is a singleton"), "{e}");
        // Singletons beside a private block report their block, without noise.
        let m = BlockHadamardResponse::from_sizes(&[1, 2, 1], 1.0).unwrap();
        let values = [3u32, 0, 3, 0];
        let mut out = [0u8; 4];
        privatize(&m, &key_from_u64(1), &values, &mut out).unwrap();
        assert_eq!(out, [5, 0, 5, 0]);
        assert_eq!(
            m.simulate(&key_from_u64(1), &[3, 0, 0, 5]).unwrap(),
            [3, 0, 0, 0, 0, 5]
        );
        assert!(Estimator::realized_epsilon(&m) > 0.99);
    }
}
