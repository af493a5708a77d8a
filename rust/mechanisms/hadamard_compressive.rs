//! Compressive privatization with a structured matrix (`matrix="hadamard"`): the rows of A
//! are rows of a Sylvester Hadamard matrix, so neither clients nor the server ever store an
//! m × k matrix, and the server's `Aᵀr` is one fast Walsh–Hadamard transform. The channel and
//! the estimator are those of [`compressive`](super::compressive) with balanced columns
//! (eq. 2 with `n_x = m/2` for every x, eq. 3 with the all-ones term fitted exactly).
//!
//! # The matrix (normative: clients in other languages re-implement exactly this)
//! `K = 2^⌈log2(k + 1)⌉`, `H(r, c) = (−1)^popcount(r & c)` (`hadamard::sylvester_entry`).
//! Everything public comes from the ChaCha20 stream `rng::public_stream(key, 2^64 − 1)`
//! (the sign matrices use the column index `< 2^32` as their stream, so the two never meet):
//! 1. Eight 64-bit draws `a_0, b_0, …, a_3, b_3`, the keys of the value permutation.
//! 2. The m rows `R_0, …, R_{m−1}`, distinct, uniform among the `K − 1` rows `[1, K)` (row 0
//!    is all ones: it would carry nothing): a partial Fisher–Yates shuffle of `[0, K − 1)`,
//!    for `t = 0 … m−1` swap positions t and `t + uniform_below_u64(K − 1 − t)`;
//!    `R_t = 1 + (the entry now at t)`.
//!
//! Value x is mapped to the slot `π(x) ∈ [0, k)` and the Hadamard column `c_x = 1 + π(x)`
//! (never column 0, the all-ones column). `π` is a seeded permutation of `[0, k)`: with
//! `L = max(1, ⌈log2 k⌉)` bits, `mask = 2^L − 1`, `h = ⌈L/2⌉`, the map
//! `f(v)`: for i = 0…3: `v = (v + a_i) & mask; v = (v · (b_i | 1)) & mask; v ^= v >> h`
//! is a bijection of `[0, 2^L)`, and `π(x)` is the first of `f(x), f(f(x)), …` below k
//! (cycle walking: a bijection of `[0, k)`, at most two steps on average). A permutation
//! that is not linear over GF(2) matters: Hadamard columns c, c' interact only through
//! `c ⊕ c'`, and values that arrive in runs (0, 1, 2, …) would otherwise share few
//! differences. (Signs of the columns would change nothing: OMP compares |correlations|.)
//!
//! Raw column `h_y = H(R_y, c_x)` has `n = #{y : h_y = +1}` ones, about m/2 but not exactly
//! (the column sums of any m rows of H have mean square ≈ m, by Parseval). Column x of A is
//! raw column `c_x` **balanced**: with `d = n − m/2`, the first `|d|` entries (in report
//! order y) of the majority sign are flipped; `boundary` is one past the last flipped row.
//! Every column then has exactly m/2 ones (m must be even), so `Z_x` is constant and the
//! channel is exactly ε-LDP (realized ε = ε up to the rounding toward privacy of
//! [`inside_probability`](super::compressive::inside_probability)) with no calibration, and `Aᵀ1 = 0`. The flips touch about
//! `0.4·√m` entries of a column (2 % at m = 500). A client computes its column, `n` and
//! `boundary` in O(m); the server keeps `(boundary, majority sign)` per slot (4 bytes) when
//! a batch is large enough to pay for it.
//!
//! # Sampling
//! One exact Bernoulli(ρ) draw (`ρ = inside_probability(m, m/2, ε)`, as for the balanced
//! matrix) says whether the report lies in `C_x = {y : A_yx = +1}`; then `y =
//! uniform_below(m)` is drawn until `A_yx` has the wanted sign (2 tries on average, each O(1)
//! from `(R_y, c_x, boundary)`). Clients and batches sample the same way: same stream, same
//! reports.
//!
//! # Server
//! * `Aᵀr`: scatter r onto the rows R of a length-K vector, one FWHT, read slots `1 … k`:
//!   this is the raw (unbalanced) matrix's product, O(K log K), computed in single precision
//!   (it only ranks). The flips change a column's product by a few terms, so OMP
//!   ([`omp`](crate::omp)) ranks the columns with it, rescores the
//!   [`omp::RESCORED`](crate::omp::RESCORED) best exactly (O(m) each) and picks the best of
//!   those; every least-squares refit uses exact columns. Without noise this is OMP on A
//!   exactly (tested); in the noise-level tail of a noisy run a near-tie (0.1 % apart in the
//!   test that found one) can rank beyond the 16 and OMP then takes the runner-up, with the
//!   same accuracy (measured). Exact correlations for all k columns would add the flips of
//!   every column each step, ~2·0.4√m terms per column (estimated at 3–4× the transform's
//!   cost at k = 2^24; not built).
//!   From K = 2^24 on, a ranking step never stores the transform: each super-block of its
//!   first pass is written from the rows (no zeroing pass, no buffer kept at zero), and
//!   each panel of its outer pass is ranked while in cache instead of being copied back
//!   ([`hadamard::fwht_visiting_panels`](crate::hadamard::fwht_visiting_panels)): the
//!   step writes the length-K vector once and reads it once, instead of reading and
//!   writing it twice, then scanning and zeroing it. Same bits.
//!   Nothing of size m × k exists.
//! * Exact products (channel products, expected frequencies) add each column's flips.
//! * Simulation is exact in law (the mixture form of `mechanisms`, "Simulation").

use super::compressive::{
    balanced_column_probabilities, sparse_estimate_forms, sparse_plan, spread_over_ones,
    LinearModel, SparseEstimate,
};
use super::randomized_response::epsilon_too_small;
use super::{
    add_uniform_reports, as_atomic, check_domain, check_epsilon, draw_own_counts, simulation_users,
    IndexMechanism,
};
use crate::error::{Error, Result};
use crate::omp::{merge_top_lists, omp_sparse, top_list, Dictionary};
use crate::rng::{
    public_stream, uniform_below, uniform_below_u64, BernoulliThreshold, Key, StreamRng,
};
use rand_core::Rng;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

/// The public stream of the structure (permutation keys, then rows).
pub const STRUCTURE_STREAM: u64 = u64::MAX;

/// Rounds of the value permutation's mixing function.
const ROUNDS: usize = 4;

/// Slots per task when the server tabulates balances.
const TABLE_CHUNK: usize = 1 << 14;

/// The seeded permutation `π` of `[0, k)` (module doc).
#[derive(Clone, Debug)]
pub struct ValuePermutation {
    k: u64,
    mask: u64,
    shift: u32,
    bits: u32,
    keys: [(u64, u64); ROUNDS],
}

/// Inverse of an odd number modulo 2^64 (Newton's iteration doubles the correct bits).
fn odd_inverse(b: u64) -> u64 {
    let mut inv = b;
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(b.wrapping_mul(inv)));
    }
    inv
}

impl ValuePermutation {
    fn new(k: u64, keys: [(u64, u64); ROUNDS]) -> Self {
        let bits = (64 - (k - 1).leading_zeros()).max(1);
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        let keys = keys.map(|(a, b)| (a & mask, (b | 1) & mask));
        Self {
            k,
            mask,
            shift: bits.div_ceil(2),
            bits,
            keys,
        }
    }

    #[inline]
    fn mix(&self, mut v: u64) -> u64 {
        for &(add, mul) in &self.keys {
            v = v.wrapping_add(add) & self.mask;
            v = v.wrapping_mul(mul) & self.mask;
            v ^= v >> self.shift;
        }
        v
    }

    #[inline]
    fn unmix(&self, mut v: u64) -> u64 {
        for &(add, mul) in self.keys.iter().rev() {
            // v = u ^ (u >> h): the top h bits of u are those of v, then h more per pass.
            let mut u = v;
            for _ in 0..self.bits.div_ceil(self.shift) {
                u = v ^ (u >> self.shift);
            }
            v = u.wrapping_mul(odd_inverse(mul)) & self.mask;
            v = v.wrapping_sub(add) & self.mask;
        }
        v
    }

    /// `π(x)` for `x < k`.
    #[inline]
    pub fn slot(&self, x: u64) -> u64 {
        let mut v = self.mix(x);
        while v >= self.k {
            v = self.mix(v);
        }
        v
    }

    /// `π⁻¹(slot)` for `slot < k`.
    pub fn value(&self, slot: u64) -> u64 {
        let mut v = self.unmix(slot);
        while v >= self.k {
            v = self.unmix(v);
        }
        v
    }
}

/// The balance of one column: the majority-sign entries at rows `< boundary` are flipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Balance {
    pub boundary: u32,
    /// The majority sign is +1.
    pub majority_plus: bool,
}

impl Balance {
    fn pack(self) -> u32 {
        self.boundary | (self.majority_plus as u32) << 31
    }
    fn unpack(word: u32) -> Self {
        Self {
            boundary: word & !(1 << 31),
            majority_plus: word >> 31 == 1,
        }
    }
}

/// Whether the raw entry `H(row, c)` is +1.
#[inline(always)]
fn raw_plus(row: u64, c: u64) -> bool {
    (row & c).count_ones() & 1 == 0
}

/// The public rows and permutation, and the balancing rule of every column.
#[derive(Clone, Debug)]
pub struct HadamardStructure {
    rows: Vec<u64>,
    order: u32,
    permutation: ValuePermutation,
}

impl HadamardStructure {
    /// The structure of `(key, k, m)` (module doc), in O(m) time and memory.
    pub fn new(key: &Key, k: u64, m: usize) -> Result<Self> {
        let order = 64 - k.leading_zeros(); // 2^order ≥ k + 1
        let pool = (1u64 << order) - 1;
        crate::memory::check_fits(m, 40, "the Hadamard rows")?; // rows + the shuffle's map
        let mut rng = public_stream(key, STRUCTURE_STREAM);
        let mut keys = [(0u64, 0u64); ROUNDS];
        for key in keys.iter_mut() {
            *key = (rng.next_u64(), rng.next_u64());
        }
        let mut moved: HashMap<u64, u64> = HashMap::with_capacity(m);
        let mut rows = Vec::with_capacity(m);
        for t in 0..m as u64 {
            let j = t + uniform_below_u64(&mut rng, pool - t);
            let at_j = moved.get(&j).copied().unwrap_or(j);
            let at_t = moved.get(&t).copied().unwrap_or(t);
            moved.insert(j, at_t);
            rows.push(1 + at_j);
        }
        Ok(Self {
            rows,
            order,
            permutation: ValuePermutation::new(k, keys),
        })
    }

    /// K, the order of the Hadamard matrix.
    pub fn order(&self) -> u64 {
        1 << self.order
    }
    pub fn rows(&self) -> &[u64] {
        &self.rows
    }
    pub fn permutation(&self) -> &ValuePermutation {
        &self.permutation
    }

    /// The balance of the column of `slot`, from its raw column in O(m).
    pub fn balance(&self, slot: u64) -> Balance {
        let ones = self.rows.iter().filter(|&&r| raw_plus(r, slot + 1)).count();
        self.balance_with_ones(slot, ones)
    }

    /// The balance of the column of `slot` whose raw column has `ones` +1 entries: a walk
    /// of its first rows, about `2·|ones − m/2|` of them.
    fn balance_with_ones(&self, slot: u64, ones: usize) -> Balance {
        let c = slot + 1;
        let half = self.rows.len() / 2;
        let (majority_plus, excess) = if ones >= half {
            (true, ones - half)
        } else {
            (false, half - ones)
        };
        let mut boundary = 0;
        if excess > 0 {
            let mut seen = 0;
            for (y, &r) in self.rows.iter().enumerate() {
                if raw_plus(r, c) == majority_plus {
                    seen += 1;
                    if seen == excess {
                        boundary = y as u32 + 1;
                        break;
                    }
                }
            }
        }
        Balance {
            boundary,
            majority_plus,
        }
    }

    /// Whether `A[y, column of slot]` is +1, given the column's balance.
    #[inline(always)]
    pub fn plus(&self, y: usize, slot: u64, balance: Balance) -> bool {
        let h = raw_plus(self.rows[y], slot + 1);
        if (y as u32) < balance.boundary && h == balance.majority_plus {
            !h
        } else {
            h
        }
    }

    /// The column of `slot` into `out` (m entries, ±1).
    pub fn column_f64(&self, slot: u64, balance: Balance, out: &mut [f64]) {
        for (y, o) in out.iter_mut().enumerate() {
            *o = if self.plus(y, slot, balance) {
                1.0
            } else {
                -1.0
            };
        }
    }

    /// The column of `slot` packed as in `signs` (bit y of word y/64 set for +1).
    pub fn column_bits(&self, slot: u64, balance: Balance) -> Vec<u64> {
        let mut words = vec![0u64; self.rows.len().div_ceil(64)];
        for y in 0..self.rows.len() {
            words[y / 64] |= (self.plus(y, slot, balance) as u64) << (y % 64);
        }
        words
    }

    /// `Σ_y r_y · (A_{y,slot} − H(R_y, c_slot))`: what the flips add to the raw product.
    fn flip_correction(&self, slot: u64, balance: Balance, r: &[f64]) -> f64 {
        let c = slot + 1;
        let flipped: f64 = (0..balance.boundary as usize)
            .filter(|&y| raw_plus(self.rows[y], c) == balance.majority_plus)
            .map(|y| r[y])
            .sum();
        // A flipped +1 becomes −1 (a change of −2), a flipped −1 becomes +1 (+2).
        if balance.majority_plus {
            -2.0 * flipped
        } else {
            2.0 * flipped
        }
    }

    /// One report for the column of `slot` (module doc, "Sampling").
    #[inline]
    pub fn sample<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        slot: u64,
        balance: Balance,
        inside: &BernoulliThreshold,
    ) -> u64 {
        let want = inside.sample(rng);
        let m = self.rows.len() as u64;
        loop {
            let y = uniform_below(rng, m) as usize;
            if self.plus(y, slot, balance) == want {
                return y as u64;
            }
        }
    }

    /// The raw products `Σ_y r_y H(R_y, c)` for `c = 1 … k` (slot order) into `out`, in
    /// single precision (for ranking only): one FWHT of `scratch` (length K, reused, so
    /// that no step pays for fresh pages). Half the memory traffic of the exact product.
    fn rank_products(&self, r: &[f64], scratch: &mut [f32], out: &mut [f64]) -> Result<()> {
        scratch
            .par_chunks_mut(TABLE_CHUNK)
            .for_each(|c| c.fill(0.0));
        for (&row, &v) in self.rows.iter().zip(r) {
            scratch[row as usize] += v as f32;
        }
        crate::hadamard::fwht_in_place_checked(scratch, &crate::interrupt::check)?;
        let k = out.len();
        out.par_chunks_mut(TABLE_CHUNK)
            .zip(scratch[1..=k].par_chunks(TABLE_CHUNK))
            .for_each(|(o, s)| o.iter_mut().zip(s).for_each(|(o, &s)| *o = s as f64));
        Ok(())
    }

    /// `scratch` (length K, all `+0.0`) ← the raw products `Σ_y r_y H(R_y, c)` for every
    /// `c < K`, in single precision: r scattered onto the rows, one FWHT whose in-cache pass
    /// skips the blocks without rows (`blocks[b]`: block b holds a row). The same bits as
    /// [`rank_products`](Self::rank_products).
    fn transform_rows(&self, r: &[f64], scratch: &mut [f32], blocks: &[bool]) -> Result<()> {
        for (&row, &v) in self.rows.iter().zip(r) {
            scratch[row as usize] += v as f32;
        }
        crate::hadamard::fwht_skipping_zero_blocks(scratch, &crate::interrupt::check, &|b| {
            blocks[b]
        })
    }

    /// Which blocks of [`hadamard::cache_block_len`](crate::hadamard::cache_block_len) f32
    /// entries of a length-K vector hold a row.
    fn row_blocks(&self) -> Vec<bool> {
        let block = crate::hadamard::cache_block_len::<f32>() as u64;
        let count = (self.order() / block).max(1) as usize;
        let mut blocks = vec![false; count];
        for &row in &self.rows {
            blocks[((row / block) as usize).min(count - 1)] = true;
        }
        blocks
    }

    /// The raw products `Σ_y r_y H(R_y, c)` for `c = 1 … k` (slot order): one FWHT.
    fn raw_rmatvec(&self, r: &[f64], k: usize) -> Result<Vec<f64>> {
        let mut buffer =
            crate::memory::zeroed_vec::<f64>(self.order() as usize, "the FWHT buffer")?;
        for (&row, &v) in self.rows.iter().zip(r) {
            buffer[row as usize] += v;
        }
        crate::hadamard::fwht_in_place_checked(&mut buffer, &crate::interrupt::check)?;
        buffer.copy_within(1..=k, 0);
        buffer.truncate(k);
        Ok(buffer)
    }
}

/// Structured compressive privatization (module doc).
#[derive(Debug)]
pub struct HadamardCompressivePrivatization {
    k: u64,
    m: usize,
    epsilon: f64,
    realized_epsilon: f64,
    key: Key,
    structure: HadamardStructure,
    inside: BernoulliThreshold,
    /// `(a, b)`: Q(y|x) inside / outside `C_x`, the same for every column.
    probs: (f64, f64),
    /// Packed [`Balance`] per slot, built when a batch or a server product pays for it.
    table: OnceLock<Vec<u32>>,
}

impl HadamardCompressivePrivatization {
    /// Errors: k ∉ [2, 2^32], ε not finite and > 0, m ∉ [2, k − 1] or odd.
    pub fn new(k: u64, epsilon: f64, m: usize, key: Key) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        if m < 2 || m as u64 >= k {
            return Err(Error::Value(format!(
                "m (the number of possible reports) must lie in [2, k − 1] = [2, {}], got {m}",
                k - 1
            )));
        }
        if m % 2 != 0 {
            return Err(Error::Value(format!(
                "matrix='hadamard' balances every column to exactly m/2 ones, so m must be \
                 even, got m = {m} (use m = {})",
                m + 1
            )));
        }
        if m > crate::signs::MAX_ROWS {
            return Err(Error::Value(format!("m must be at most 2^31 − 1, got {m}")));
        }
        let structure = HadamardStructure::new(&key, k, m)?;
        let (rho, (a, b)) = balanced_column_probabilities(m, epsilon);
        if !(a > b) {
            return Err(epsilon_too_small(epsilon));
        }
        Ok(Self {
            k,
            m,
            epsilon,
            realized_epsilon: a.ln() - b.ln(),
            key,
            structure,
            inside: BernoulliThreshold::new(rho)?,
            probs: (a, b),
            table: OnceLock::new(),
        })
    }

    pub fn k(&self) -> u64 {
        self.k
    }
    pub fn m(&self) -> usize {
        self.m
    }
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }
    /// ln(a/b) of the channel actually used (every column has m/2 ones).
    pub fn realized_epsilon(&self) -> f64 {
        self.realized_epsilon
    }
    pub fn key(&self) -> &Key {
        &self.key
    }
    pub fn structure(&self) -> &HadamardStructure {
        &self.structure
    }
    /// `(a, b)`: the channel's probabilities inside and outside a column.
    pub fn probabilities(&self) -> (f64, f64) {
        self.probs
    }
    /// Whether the per-slot balance table has been built.
    pub fn table_built(&self) -> bool {
        self.table.get().is_some()
    }

    /// Bytes of the balance table and of the transform that builds it.
    fn table_footprint(&self) -> crate::memory::Footprint {
        let f = crate::memory::Footprint::new("the Hadamard balance table");
        if self.table_built() {
            return f;
        }
        f.add("balance per slot", self.k, 4).add(
            "column sums (FWHT)",
            self.structure.order(),
            self.sum_bytes(),
        )
    }

    /// Bytes per column sum when the table is built: the sums are integers of magnitude at
    /// most m, exact in single precision (and at every stage of their transform) up to 2^24.
    fn sum_bytes(&self) -> usize {
        if self.m <= 1 << 24 {
            4
        } else {
            8
        }
    }

    /// The balance table (built once: one FWHT of the row indicator gives every raw column
    /// sum, then a walk of each unbalanced column's first rows).
    pub fn try_table(&self) -> Result<&[u32]> {
        if let Some(t) = self.table.get() {
            return Ok(t);
        }
        self.table_footprint().check()?;
        let table = if self.sum_bytes() == 4 {
            self.build_table::<f32>()?
        } else {
            self.build_table::<f64>()?
        };
        Ok(self.table.get_or_init(|| table))
    }

    /// The table from the column sums, one FWHT of the row indicator in `T` (exact: see
    /// [`sum_bytes`](Self::sum_bytes)).
    fn build_table<T>(&self) -> Result<Vec<u32>>
    where
        T: crate::hadamard::Butterfly + crate::memory::Zeroable + Into<f64> + From<u8>,
    {
        let s = &self.structure;
        let mut sums = crate::memory::zeroed_vec::<T>(s.order() as usize, "column sums")?;
        for &r in &s.rows {
            sums[r as usize] = T::from(1);
        }
        crate::hadamard::fwht_in_place_checked(&mut sums, &crate::interrupt::check)?;
        let mut table = crate::memory::zeroed_vec::<u32>(self.k as usize, "the balance table")?;
        table
            .par_chunks_mut(TABLE_CHUNK)
            .enumerate()
            .try_for_each(|(chunk, out)| {
                crate::interrupt::check()?;
                for (i, word) in out.iter_mut().enumerate() {
                    let slot = (chunk * TABLE_CHUNK + i) as u64;
                    let sum: f64 = sums[slot as usize + 1].into();
                    let ones = (self.m as i64 + sum as i64) / 2;
                    *word = s.balance_with_ones(slot, ones as usize).pack();
                }
                Ok::<(), Error>(())
            })?;
        Ok(table)
    }

    /// The balance of `slot`: from the table when built, else computed (O(m)).
    #[inline]
    fn balance(&self, slot: u64) -> Balance {
        match self.table.get() {
            Some(t) => Balance::unpack(t[slot as usize]),
            None => self.structure.balance(slot),
        }
    }

    /// Column x of A as ±1 values (what a client computes).
    pub fn column(&self, x: u64) -> Vec<i8> {
        let slot = self.structure.permutation.slot(x);
        let balance = self.balance(slot);
        (0..self.m)
            .map(|y| {
                if self.structure.plus(y, slot, balance) {
                    1
                } else {
                    -1
                }
            })
            .collect()
    }

    /// Row x of the channel matrix (length m).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (a, b) = self.probs;
        let slot = self.structure.permutation.slot(x);
        let balance = self.balance(slot);
        for (y, q) in row.iter_mut().enumerate() {
            *q = if self.structure.plus(y, slot, balance) {
                a
            } else {
                b
            };
        }
    }

    /// One report for `x`, as a client computes it (its own column only, O(m)).
    pub fn privatize_one<R: Rng + ?Sized>(&self, rng: &mut R, x: u64) -> Result<u64> {
        if x >= self.k {
            return Err(Error::Value(format!(
                "values must lie in [0, {}), got {x}",
                self.k
            )));
        }
        let slot = self.structure.permutation.slot(x);
        let balance = self.structure.balance(slot);
        Ok(self.structure.sample(rng, slot, balance, &self.inside))
    }

    /// Whether a batch of `batch` reports is worth the balance table (an O(m) balance per
    /// report against one FWHT of K and a walk of every column).
    fn batch_wants_table(&self, batch: u64) -> bool {
        let order = self.structure.order() as u128;
        (batch as u128) * (self.m as u128) >= 4 * order * (self.structure.order as u128 + 16)
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`).
    pub fn footprint(&self, op: super::Operation) -> crate::memory::Footprint {
        let name = "CompressivePrivatization(matrix='hadamard')";
        let f = super::vector_footprint(name, op, self.k, self.m as u64);
        let transform = self.structure.order();
        match op {
            super::Operation::Estimate => f.include(&crate::omp::ranked_footprint_for(
                self.m,
                self.k as usize,
                self.m - 1,
                ranking_bytes(self.k, transform),
                false,
            )),
            super::Operation::ChannelProduct => f
                .add("FWHT buffer", transform, 8)
                .include(&self.table_footprint()),
            // The table is built for as many values with users as would pay for it: at
            // most `users` of them.
            super::Operation::Simulate { users } if self.batch_wants_table(users) => {
                f.include(&self.table_footprint())
            }
            super::Operation::Simulate { .. } => f,
        }
    }

    // -- exact linear maps ---------------------------------------------------------------

    /// `A w` (length m) exactly: the raw product by one FWHT plus every column's flips.
    fn matvec(&self, w: &[f64]) -> Result<Vec<f64>> {
        let s = &self.structure;
        let table = self.try_table()?;
        let mut buffer = crate::memory::zeroed_vec::<f64>(s.order() as usize, "the FWHT buffer")?;
        for (x, &v) in w.iter().enumerate() {
            if v != 0.0 {
                buffer[s.permutation.slot(x as u64) as usize + 1] += v;
            }
        }
        crate::hadamard::fwht_in_place_checked(&mut buffer, &crate::interrupt::check)?;
        let mut out: Vec<f64> = s.rows.iter().map(|&r| buffer[r as usize]).collect();
        drop(buffer);
        for (x, &v) in w.iter().enumerate() {
            if v == 0.0 {
                continue;
            }
            let slot = s.permutation.slot(x as u64);
            let balance = Balance::unpack(table[slot as usize]);
            let change = if balance.majority_plus {
                -2.0 * v
            } else {
                2.0 * v
            };
            for (y, o) in out.iter_mut().enumerate().take(balance.boundary as usize) {
                if raw_plus(s.rows[y], slot + 1) == balance.majority_plus {
                    *o += change;
                }
            }
        }
        Ok(out)
    }

    /// `Aᵀ r` (length k, value order) exactly.
    fn rmatvec(&self, r: &[f64]) -> Result<Vec<f64>> {
        let s = &self.structure;
        let table = self.try_table()?;
        let raw = s.raw_rmatvec(r, self.k as usize)?;
        let mut out = crate::memory::zeroed_vec::<f64>(self.k as usize, "the product Aᵀr")?;
        out.par_chunks_mut(TABLE_CHUNK)
            .enumerate()
            .for_each(|(chunk, block)| {
                for (i, o) in block.iter_mut().enumerate() {
                    let slot = s.permutation.slot((chunk * TABLE_CHUNK + i) as u64);
                    let balance = Balance::unpack(table[slot as usize]);
                    *o = raw[slot as usize] + s.flip_correction(slot, balance, r);
                }
            });
        Ok(out)
    }

    /// Expected report frequencies `Qᵀp = ((a+b)/2)·Σp·1 + A((a−b)/2·p)` (eq. 3).
    pub fn try_expected_frequencies(&self, p: &[f64]) -> Result<Vec<f64>> {
        self.check_length(p.len(), self.k as usize, "p")?;
        let (a, b) = self.probs;
        let w: Vec<f64> = p.iter().map(|v| v * (a - b) / 2.0).collect();
        let constant = p.iter().sum::<f64>() * (a + b) / 2.0;
        let mut q = self.matvec(&w)?;
        q.iter_mut().for_each(|v| *v += constant);
        Ok(q)
    }

    /// `Q w` (length k): `(a+b)/2·Σw + (a−b)/2·(Aᵀw)_x`.
    pub fn try_channel_apply(&self, w: &[f64]) -> Result<Vec<f64>> {
        self.check_length(w.len(), self.m, "w")?;
        let (a, b) = self.probs;
        let total: f64 = w.iter().sum();
        let mut out = self.rmatvec(w)?;
        out.iter_mut()
            .for_each(|v| *v = (a + b) / 2.0 * total + (a - b) / 2.0 * *v);
        Ok(out)
    }

    fn check_length(&self, got: usize, want: usize, what: &str) -> Result<()> {
        if got != want {
            return Err(Error::Value(format!(
                "{what} must have length {want}, got {got}"
            )));
        }
        Ok(())
    }

    pub fn expected_frequencies(&self, p: &[f64]) -> Vec<f64> {
        self.try_expected_frequencies(p)
            .unwrap_or_else(|e| panic!("expected_frequencies failed: {e}"))
    }
    pub fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        self.try_channel_apply(w)
            .unwrap_or_else(|e| panic!("channel_apply failed: {e}"))
    }

    // -- estimation ----------------------------------------------------------------------

    /// Sparse recovery with the exact model (see
    /// [`CompressivePrivatization::estimate_sparse`](super::compressive::CompressivePrivatization::estimate_sparse)):
    /// OMP with an intercept on the slot-ordered dictionary, then `p̂_x = 2 w_x/(a − b)`.
    /// `model="paper"` is refused (Algorithm 1 is stated for i.i.d. matrices).
    pub fn estimate_sparse(
        &self,
        freq: &[f64],
        n: Option<u64>,
        sparsity: Option<usize>,
        model: LinearModel,
    ) -> Result<SparseEstimate> {
        let (m, k) = (self.m, self.k as usize);
        if model == LinearModel::Paper {
            return Err(Error::Value(
                "model='paper' is Algorithm 1 as printed for i.i.d. matrices; matrix='hadamard' \
                 uses model='exact'"
                    .into(),
            ));
        }
        let (atoms, noise_level) = sparse_plan(freq, m, k, n, sparsity)?;
        let tol = sparsity.is_none().then_some(noise_level);
        // The dictionary (and its transform buffer) is dropped before the estimate exists.
        let run = omp_sparse(&SlotDictionary::new(self), freq, atoms, tol, true)?;
        let (a, b) = self.probs;
        let mut estimate = crate::memory::zeroed_vec::<f64>(k, "the estimate")?;
        let perm = &self.structure.permutation;
        let support: Vec<usize> = run
            .support
            .iter()
            .zip(&run.coef)
            .map(|(&slot, &coef)| {
                let x = perm.value(slot as u64) as usize;
                estimate[x] = 2.0 * coef / (a - b);
                x
            })
            .collect();
        Ok(SparseEstimate {
            estimate,
            support,
            residual_norm: run.residual_norm,
            noise_level,
            stop: run.stop,
        })
    }

    sparse_estimate_forms!();

    // -- simulation ----------------------------------------------------------------------

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law:
    /// each user reports uniformly in `C_x` with probability `(m·ρ − m/2)/(m/2)`, else
    /// uniformly over all m reports (the mixture form). The `K_x` users in `C_x` are placed
    /// by rejection (few users) or by halving over the packed column (many).
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let values = true_counts.iter().filter(|&&c| c > 0).count() as u64;
        if self.batch_wants_table(values) {
            self.try_table()?;
        }
        let half = (self.m / 2) as f64;
        let rho = self.inside.probability();
        let own = ((self.m as f64 * rho - half) / half).clamp(0.0, 1.0);
        let mut counts = crate::memory::allocate_zeroed::<u64>(self.m, "the report counts")?;
        let cells = as_atomic(&mut counts);
        let s = &self.structure;
        let uniform = draw_own_counts(
            key,
            true_counts,
            |_| own,
            |rng, x, kept| {
                if kept == 0 {
                    return Ok(());
                }
                let slot = s.permutation.slot(x);
                let balance = self.balance(slot);
                let mut emit = |y: u64, n: u64| {
                    cells[y as usize].fetch_add(n, Ordering::Relaxed);
                };
                if kept.saturating_mul(8) < self.m as u64 {
                    for _ in 0..kept {
                        loop {
                            let y = uniform_below(rng, self.m as u64);
                            if s.plus(y as usize, slot, balance) {
                                emit(y, 1);
                                break;
                            }
                        }
                    }
                    Ok(())
                } else {
                    let column = s.column_bits(slot, balance);
                    let bits = 64 * column.len();
                    spread_over_ones(rng, &column, 0, bits, (self.m / 2) as u64, kept, &mut emit)
                }
            },
        )?;
        add_uniform_reports(key, &mut counts, uniform)?;
        Ok(counts)
    }
}

impl IndexMechanism for HadamardCompressivePrivatization {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.m as u64
    }
    fn prepare(&self, batch: usize) -> Result<()> {
        if self.batch_wants_table(batch as u64) {
            self.try_table()?;
        }
        Ok(())
    }
    /// Estimates need no table (OMP computes the few columns it looks at).
    fn prepare_server(&self) -> Result<()> {
        Ok(())
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let slot = self.structure.permutation.slot(x);
        self.structure
            .sample(rng, slot, self.balance(slot), &self.inside)
    }
    /// With the table, the slots and balances of 64 values are looked up before any of them
    /// is sampled: the lookups (a cache miss each for values spread over a large k) are
    /// independent, so the processor overlaps them. Same draws in the same order.
    fn sample_into<R: super::ReportInt>(&self, rng: &mut StreamRng, values: &[u32], out: &mut [R]) {
        let Some(table) = self.table.get() else {
            for (o, &x) in out.iter_mut().zip(values) {
                *o = R::from_u64(self.sample(rng, x as u64));
            }
            return;
        };
        let mut looked_up = [(0u64, 0u32); 64];
        for (values, out) in values.chunks(64).zip(out.chunks_mut(64)) {
            for (l, &x) in looked_up.iter_mut().zip(values) {
                let slot = self.structure.permutation.slot(x as u64);
                *l = (slot, table[slot as usize]);
            }
            for (o, &(slot, balance)) in out.iter_mut().zip(&looked_up) {
                let balance = Balance::unpack(balance);
                *o = R::from_u64(self.structure.sample(rng, slot, balance, &self.inside));
            }
        }
    }
}

/// Bytes of one ranking step of OMP on the dictionary of order `transform` (K) with k
/// columns: the transform buffer (f32, kept for the run), the first step's `Aᵀ1` (f32 per
/// slot), and the best columns of every scanned chunk.
fn ranking_bytes(k: u64, transform: u64) -> u64 {
    let chunks = k.div_ceil(TABLE_CHUNK as u64);
    transform
        .saturating_mul(4)
        .saturating_add(k.saturating_mul(4))
        .saturating_add(
            chunks
                .saturating_mul(crate::omp::RESCORED as u64 + 1)
                .saturating_mul(16),
        )
}

/// [`top_list`](crate::omp::top_list)'s step: `(|value|, j)` joins the sorted list `top`
/// of at most `count` entries unless it is no better than the last of a full list or `j`
/// is taken. Fed in increasing `j`, the list keeps the best `count` (ties to the lowest j).
#[inline(always)]
fn push_top(
    top: &mut Vec<(f64, usize)>,
    value: f64,
    j: usize,
    taken: &dyn Fn(usize) -> bool,
    count: usize,
) {
    let c = value.abs();
    if count == 0 || (top.len() == count && c <= top[count - 1].0) || taken(j) {
        return;
    }
    let at = top.partition_point(|&(v, _)| v >= c);
    top.insert(at, (c, j));
    top.truncate(count);
}

/// The largest f32 `t` with `t as f64 <= threshold` (NaN for NaN): `|v| <= t` exactly when
/// `|v| as f64 <= threshold`.
#[inline(always)]
fn f32_at_most(threshold: f64) -> f32 {
    let t = threshold as f32;
    if t as f64 > threshold {
        t.next_down()
    } else {
        t
    }
}

crate::simd::multiversion! {
    /// [`push_top`] for `values[i]` (as f64) and `j = first + i` in turn; once the list is
    /// full, runs of 64 values all at most its last entry (a vector test) are skipped
    /// whole, as `push_top` would skip each of them.
    fn scan_top(top: &mut Vec<(f64, usize)>, values: &[f32], first: usize, taken: &dyn Fn(usize) -> bool, count: usize) {
        for (run, chunk) in values.chunks(64).enumerate() {
            if count > 0 && top.len() == count {
                let t = f32_at_most(top[count - 1].0);
                let above: u32 = chunk.iter().map(|&v| (!(v.abs() <= t)) as u32).sum();
                if above == 0 {
                    continue;
                }
            }
            for (i, &v) in chunk.iter().enumerate() {
                push_top(top, v as f64, first + 64 * run + i, taken, count);
            }
        }
    }
}

/// Ask Linux for transparent huge pages on the (untouched) buffer `v`: the outer pass of
/// the transform reads rows megabytes apart, a TLB miss each on 4 KiB pages. Advice only.
fn advise_huge_pages<T>(v: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        unsafe extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        let start = v.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(v);
        let aligned = start.div_ceil(4096) * 4096;
        if end > aligned {
            // SAFETY: the range lies inside the allocation of `v`; the advice changes no
            // contents.
            unsafe {
                madvise(
                    aligned as *mut std::ffi::c_void,
                    end - aligned,
                    MADV_HUGEPAGE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// A in slot order for OMP: `rmatvec` is the raw product (one single-precision FWHT),
/// which ranks the columns; `column` is exact. OMP ranks through
/// [`top_ranked`](Dictionary::top_ranked), which scans the transform buffer in place (and
/// zeroes it for the next step) instead of copying k products out.
struct SlotDictionary<'a> {
    mech: &'a HadamardCompressivePrivatization,
    /// The transform's buffer (length K), allocated on first use and reused by every step;
    /// all zeros between steps of [`rank_top`](Self::rank_top), garbage between those of
    /// [`rank_top_visiting`](Self::rank_top_visiting) (the larger K, which never needs
    /// zeros).
    scratch: Mutex<Vec<f32>>,
    /// Which blocks of the buffer hold a row (`HadamardStructure::row_blocks`).
    blocks: Vec<bool>,
    /// `(R_y, y)` sorted by row: the rows of each super-block of
    /// [`fwht_visiting_panels`](crate::hadamard::fwht_visiting_panels) by a binary search.
    sorted_rows: Vec<(u64, usize)>,
}

impl<'a> SlotDictionary<'a> {
    fn new(mech: &'a HadamardCompressivePrivatization) -> Self {
        Self {
            mech,
            scratch: Mutex::new(Vec::new()),
            blocks: mech.structure.row_blocks(),
            sorted_rows: {
                let mut rows: Vec<(u64, usize)> = mech
                    .structure
                    .rows
                    .iter()
                    .enumerate()
                    .map(|(y, &row)| (row, y))
                    .collect();
                rows.sort_unstable();
                rows
            },
        }
    }

    /// The raw products of `r` (the transform of r scattered onto the rows, as in
    /// [`HadamardStructure::transform_rows`]), handed panel by panel to `visit` (see
    /// [`fwht_visiting_panels`](crate::hadamard::fwht_visiting_panels): transform index i
    /// is column i, slot i − 1). `scratch` is a work buffer of length K.
    fn visit_products<R: Send>(
        &self,
        scratch: &mut [f32],
        r: &[f64],
        visit: &(dyn Fn(&[f32], usize, usize, usize) -> R + Sync),
    ) -> Result<Vec<R>> {
        let rows = &self.sorted_rows;
        let fill = |first: usize, chunk: &mut [f32]| {
            chunk.fill(0.0);
            let end = (first + chunk.len()) as u64;
            let lo = rows.partition_point(|&(row, _)| row < first as u64);
            for &(row, y) in rows[lo..].iter().take_while(|&&(row, _)| row < end) {
                chunk[row as usize - first] += r[y] as f32;
            }
        };
        crate::hadamard::fwht_visiting_panels(
            scratch,
            &fill,
            &|b| self.blocks[b],
            &crate::interrupt::check,
            visit,
        )
    }

    /// [`Dictionary::top_ranked`] for the sizes the transform takes in three passes: the
    /// transform is never stored; each panel of its outer pass is ranked while in cache
    /// (the same ranking, so the same columns, as [`rank_top`](Self::rank_top)). `scratch`
    /// is left with garbage.
    fn rank_top_visiting(
        &self,
        scratch: &mut Vec<f32>,
        r: &[f64],
        minus_ones: Option<f64>,
        chosen: &[usize],
        count: usize,
    ) -> Result<Vec<usize>> {
        let s = &self.mech.structure;
        let k = self.mech.k as usize;
        let order = s.order() as usize;
        if scratch.is_empty() {
            *scratch = crate::memory::zeroed_vec::<f32>(order, "the FWHT buffer")?;
            advise_huge_pages(scratch);
        }
        // Each panel row: the transform indices first … first + width, of which 1 … k are
        // the columns of slots index − 1.
        let span = |rows: usize, width: usize, column: usize, row: usize| {
            let first = row * (order / rows) + column;
            let lo = first.max(1);
            let hi = (first + width).min(k + 1);
            (lo - first, hi.saturating_sub(first), lo - 1)
        };
        let ones = match minus_ones {
            None => None,
            Some(shift) => {
                let mut copy = crate::memory::zeroed_vec::<f32>(k, "Aᵀ1 (first OMP step)")?;
                let out = crate::hadamard::SendPtr::new(copy.as_mut_ptr());
                self.visit_products(
                    scratch,
                    &vec![1.0; self.mech.m],
                    &|panel, rows, width, column| {
                        for row in 0..rows {
                            let (lo, hi, slot) = span(rows, width, column, row);
                            if lo < hi {
                                let values = &panel[row * width + lo..row * width + hi];
                                // SAFETY: panels cover disjoint slots; slot + len ≤ k.
                                unsafe {
                                    std::slice::from_raw_parts_mut(out.get().add(slot), hi - lo)
                                }
                                .copy_from_slice(values);
                            }
                        }
                    },
                )?;
                Some((copy, shift))
            }
        };
        let mut sorted = chosen.to_vec();
        sorted.sort_unstable();
        let taken = |j: usize| sorted.binary_search(&j).is_ok();
        let lists = self.visit_products(scratch, r, &|panel, rows, width, column| {
            let mut top: Vec<(f64, usize)> = Vec::with_capacity(count + 1);
            for row in 0..rows {
                let (lo, hi, slot) = span(rows, width, column, row);
                if lo >= hi {
                    continue;
                }
                let values = &panel[row * width + lo..row * width + hi];
                match &ones {
                    None => scan_top(&mut top, values, slot, &taken, count),
                    Some((o, shift)) => {
                        for (i, (&v, &w)) in values.iter().zip(&o[slot..]).enumerate() {
                            push_top(
                                &mut top,
                                v as f64 - shift * w as f64,
                                slot + i,
                                &taken,
                                count,
                            );
                        }
                    }
                }
            }
            top
        })?;
        Ok(merge_top_lists(lists, count)
            .into_iter()
            .map(|(_, j)| j)
            .collect())
    }

    /// [`Dictionary::top_ranked`] with the buffer `scratch`: panel by panel from K = 2^24
    /// on ([`rank_top_visiting`](Self::rank_top_visiting)), else in place.
    fn rank_top(
        &self,
        scratch: &mut Vec<f32>,
        r: &[f64],
        minus_ones: Option<f64>,
        chosen: &[usize],
        count: usize,
    ) -> Result<Vec<usize>> {
        if crate::hadamard::visits_panels::<f32>(self.mech.structure.order() as usize) {
            return self.rank_top_visiting(scratch, r, minus_ones, chosen, count);
        }
        self.rank_top_in_place(scratch, r, minus_ones, chosen, count)
    }

    /// [`rank_top`](Self::rank_top) through the in-place transform of the zeroed buffer
    /// `scratch`, left zeroed.
    fn rank_top_in_place(
        &self,
        scratch: &mut Vec<f32>,
        r: &[f64],
        minus_ones: Option<f64>,
        chosen: &[usize],
        count: usize,
    ) -> Result<Vec<usize>> {
        let s = &self.mech.structure;
        let k = self.mech.k as usize;
        if scratch.is_empty() {
            *scratch = crate::memory::zeroed_vec::<f32>(s.order() as usize, "the FWHT buffer")?;
        }
        // The first step with an intercept ranks by Aᵀy − shift·Aᵀ1, both as single-precision
        // transforms widened to f64 (what the full path computes).
        let ones = match minus_ones {
            None => None,
            Some(shift) => {
                s.transform_rows(&vec![1.0; self.mech.m], scratch, &self.blocks)?;
                let mut copy = crate::memory::zeroed_vec::<f32>(k, "Aᵀ1 (first OMP step)")?;
                copy.par_chunks_mut(TABLE_CHUNK)
                    .zip(scratch[1..=k].par_chunks(TABLE_CHUNK))
                    .for_each(|(c, t)| c.copy_from_slice(t));
                scratch
                    .par_chunks_mut(TABLE_CHUNK)
                    .for_each(|c| c.fill(0.0));
                Some((copy, shift))
            }
        };
        s.transform_rows(r, scratch, &self.blocks)?;
        let mut sorted = chosen.to_vec();
        sorted.sort_unstable();
        let taken = |j: usize| sorted.binary_search(&j).is_ok();
        let (head, rest) = scratch.split_at_mut(1);
        head[0] = 0.0;
        let (slots, tail) = rest.split_at_mut(k);
        // Each chunk's best columns, then the chunk is zeroed while in cache.
        let lists: Vec<Vec<(f64, usize)>> = match &ones {
            None => slots
                .par_chunks_mut(TABLE_CHUNK)
                .enumerate()
                .map(|(c, block)| {
                    let values = block.iter().map(|&v| v as f64);
                    let top = top_list(values, c * TABLE_CHUNK, &taken, count);
                    block.fill(0.0);
                    top
                })
                .collect(),
            Some((ones, shift)) => slots
                .par_chunks_mut(TABLE_CHUNK)
                .zip(ones.par_chunks(TABLE_CHUNK))
                .enumerate()
                .map(|(c, (block, o))| {
                    let values = block
                        .iter()
                        .zip(o)
                        .map(|(&v, &w)| v as f64 - shift * w as f64);
                    let top = top_list(values, c * TABLE_CHUNK, &taken, count);
                    block.fill(0.0);
                    top
                })
                .collect(),
        };
        tail.par_chunks_mut(TABLE_CHUNK).for_each(|c| c.fill(0.0));
        Ok(merge_top_lists(lists, count)
            .into_iter()
            .map(|(_, j)| j)
            .collect())
    }
}

impl Dictionary for SlotDictionary<'_> {
    fn rows(&self) -> usize {
        self.mech.m
    }
    fn cols(&self) -> usize {
        self.mech.k as usize
    }
    fn rmatvec(&self, r: &[f64]) -> Result<Vec<f64>> {
        let mut out = crate::memory::zeroed_vec::<f64>(self.mech.k as usize, "the product Aᵀr")?;
        self.rmatvec_into(r, &mut out)?;
        Ok(out)
    }
    fn rmatvec_into(&self, r: &[f64], out: &mut [f64]) -> Result<()> {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if scratch.is_empty() {
            *scratch = crate::memory::zeroed_vec::<f32>(
                self.mech.structure.order() as usize,
                "the FWHT buffer",
            )?;
        }
        self.mech.structure.rank_products(r, &mut scratch, out)
    }
    fn column(&self, j: usize, out: &mut [f64]) {
        let slot = j as u64;
        self.mech
            .structure
            .column_f64(slot, self.mech.balance(slot), out)
    }
    fn rmatvec_scratch_bytes(&self) -> u64 {
        self.mech.structure.order() * 4
    }
    fn ranks_approximately(&self) -> bool {
        true
    }
    fn top_ranked(
        &self,
        r: &[f64],
        minus_ones: Option<f64>,
        chosen: &[usize],
        count: usize,
    ) -> Result<Vec<usize>> {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let ranked = self.rank_top(&mut scratch, r, minus_ones, chosen, count);
        if ranked.is_err() {
            // A stopped transform leaves the buffer dirty: start the next call afresh.
            *scratch = Vec::new();
        }
        ranked
    }
    fn top_ranked_bytes(&self) -> u64 {
        ranking_bytes(self.mech.k, self.mech.structure.order())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{key_from_u64, stream};

    fn mechanism(k: u64, m: usize, seed: u64) -> HadamardCompressivePrivatization {
        HadamardCompressivePrivatization::new(k, 0.7, m, key_from_u64(seed)).unwrap()
    }

    #[test]
    fn the_permutation_is_a_bijection_with_its_inverse() {
        for k in [2u64, 3, 5, 64, 65, 1000, 4097] {
            let s = HadamardStructure::new(&key_from_u64(k), k, 2).unwrap();
            let p = s.permutation();
            let mut seen = vec![false; k as usize];
            for x in 0..k {
                let slot = p.slot(x);
                assert!(slot < k && !seen[slot as usize], "k = {k}, x = {x}");
                seen[slot as usize] = true;
                assert_eq!(p.value(slot), x);
            }
        }
        // Not the identity, and not linear over GF(2) on a run of values.
        let p = HadamardStructure::new(&key_from_u64(1), 1 << 20, 2)
            .unwrap()
            .permutation;
        assert!((0..16).any(|x| p.slot(x) != x));
        assert_ne!(p.slot(1) ^ p.slot(2), p.slot(3) ^ p.slot(0));
    }

    #[test]
    fn rows_are_distinct_and_never_row_zero() {
        let s = HadamardStructure::new(&key_from_u64(9), 1000, 500).unwrap();
        assert_eq!(s.order(), 1024);
        let mut rows = s.rows().to_vec();
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows.len(), 500);
        assert!(rows[0] >= 1 && *rows.last().unwrap() < 1024);
    }

    #[test]
    fn every_column_is_balanced_and_the_table_agrees() {
        let cp = mechanism(3000, 64, 2);
        let direct: Vec<Balance> = (0..3000).map(|s| cp.structure.balance(s)).collect();
        let table = cp.try_table().unwrap();
        for (slot, &b) in direct.iter().enumerate() {
            assert_eq!(Balance::unpack(table[slot]), b);
            let ones = (0..64)
                .filter(|&y| cp.structure.plus(y, slot as u64, b))
                .count();
            assert_eq!(ones, 32);
        }
    }

    #[test]
    fn ranking_and_exact_products_match_the_explicit_matrix() {
        let cp = mechanism(700, 40, 5);
        let r: Vec<f64> = (0..40)
            .map(|y| ((y * 37 % 11) as f64 - 5.0) / 7.0)
            .collect();
        let exact = cp.rmatvec(&r).unwrap();
        let raw = cp.structure.raw_rmatvec(&r, 700).unwrap();
        let mut ranked = vec![0.0; 700];
        let mut scratch = vec![0.0f32; cp.structure.order() as usize];
        cp.structure
            .rank_products(&r, &mut scratch, &mut ranked)
            .unwrap();
        let mut column = vec![0.0; 40];
        for x in 0..700u64 {
            let slot = cp.structure.permutation.slot(x);
            let balance = cp.structure.balance(slot);
            cp.structure.column_f64(slot, balance, &mut column);
            let dot: f64 = column.iter().zip(&r).map(|(a, b)| a * b).sum();
            assert!((exact[x as usize] - dot).abs() < 1e-12);
            let unbalanced: f64 = (0..40)
                .map(|y| {
                    let plus = raw_plus(cp.structure.rows[y], slot + 1);
                    if plus {
                        r[y]
                    } else {
                        -r[y]
                    }
                })
                .sum();
            assert!((raw[slot as usize] - unbalanced).abs() < 1e-12);
            assert!((ranked[slot as usize] - unbalanced).abs() < 1e-5);
        }
    }

    #[test]
    fn ranking_by_visited_panels_equals_the_in_place_ranking() {
        // K = 2^24: the smallest order ranked panel by panel; both rankings of the same
        // residual (with and without the first step's intercept term, some columns taken)
        // name the same columns in the same order, and the visited path needs no zeroed
        // buffer (its second call starts from the first one's garbage).
        let k = 1u64 << 23;
        let cp = mechanism(k, 256, 6);
        assert!(crate::hadamard::visits_panels::<f32>(
            cp.structure.order() as usize
        ));
        let dict = SlotDictionary::new(&cp);
        let r: Vec<f64> = (0..256)
            .map(|y| ((y * 37 % 101) as f64 - 50.0) / 9.0)
            .collect();
        let chosen = [cp.structure.permutation.slot(5) as usize, 17, 4_000_000];
        let mut visited = Vec::new();
        for (ones, taken) in [
            (None, &chosen[..0]),
            (Some(0.37), &chosen[..]),
            (None, &chosen[..]),
        ] {
            let mut zeros = vec![0.0f32; cp.structure.order() as usize];
            let in_place = dict
                .rank_top_in_place(&mut zeros, &r, ones, taken, 16)
                .unwrap();
            assert!(zeros.iter().all(|&v| v.to_bits() == 0));
            let ranked = dict
                .rank_top_visiting(&mut visited, &r, ones, taken, 16)
                .unwrap();
            assert_eq!(ranked.len(), 16);
            assert_eq!(ranked, in_place, "ones = {ones:?}");
        }
    }

    #[test]
    fn client_reports_equal_batch_reports() {
        let cp = mechanism(500, 20, 4);
        let key = key_from_u64(8);
        for x in [0u64, 1, 499] {
            let mut a = stream(&key, 0);
            let mut b = stream(&key, 0);
            let client = cp.privatize_one(&mut a, x).unwrap();
            assert_eq!(client, IndexMechanism::sample(&cp, &mut b, x));
        }
        assert!(cp.privatize_one(&mut stream(&key, 0), 500).is_err());
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(HadamardCompressivePrivatization::new(100, 0.5, 11, key_from_u64(1)).is_err());
        assert!(HadamardCompressivePrivatization::new(100, 0.5, 100, key_from_u64(1)).is_err());
        assert!(HadamardCompressivePrivatization::new(100, 0.0, 10, key_from_u64(1)).is_err());
        let cp = mechanism(100, 10, 1);
        assert!(cp
            .estimate_sparse(&[0.1; 10], Some(10), Some(2), LinearModel::Paper)
            .is_err());
        assert!(cp
            .estimate_sparse(&[0.1; 9], Some(10), Some(2), LinearModel::Exact)
            .is_err());
    }
}
