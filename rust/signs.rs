//! Seeded ±1 matrices, bit-packed, whose every column is a pure function of (seed, column).
//!
//! # Generator (normative: clients in other languages re-implement exactly this)
//! Column `j` of an `m`-row matrix under a 256-bit key (the seed's 32 little-endian bytes)
//! reads the ChaCha20 keystream with that key, 64-bit block counter starting at 0 and 64-bit
//! nonce `j` (Bernstein's original layout: state words 12–13 counter, 14–15 nonce, both
//! little-endian). Keystream 32-bit words are consumed in order; a "64-bit draw" is two
//! consecutive words `lo, hi` forming `lo + 2^32·hi`.
//! * `rademacher`: entry `i` is +1 iff bit `i mod 64` of 64-bit draw `⌊i/64⌋` is 1 (so the
//!   column is the first `m` keystream bits, least significant bit of each byte first).
//! * `bernoulli(p)`: for `i = 0, 1, …, m−1` in order, entry `i` is +1 iff the exact
//!   Bernoulli(p) draw of `rng::BernoulliThreshold` is true: one 64-bit draw `w`, +1 iff
//!   `w < ⌊p·2^64⌋` (with the documented tie rule for `w = ⌊p·2^64⌋`, probability 2^-64).
//! * `balanced(p)`: `c = ⌊p·m + 1/2⌋` entries are +1, at uniformly random positions: a partial
//!   Fisher–Yates shuffle of `perm = [0, 1, …, m−1]`, for `t = 0 … c−1` swap `perm[t]` with
//!   `perm[t + u]`, `u = uniform_below(m − t)` (Lemire, one 32-bit word per try, see `rng`);
//!   rows `perm[0..c]` are +1.
//!
//! # Storage
//! Column-major, `⌈m/64⌉` u64 words per column, bit `i mod 64` of word `⌊i/64⌋` is 1 for +1;
//! bits at rows ≥ m are 0. An m×k matrix takes `k·⌈m/64⌉·8` bytes and is never expanded to
//! floats except by `to_dense` (tests and small sizes).

use crate::error::{Error, Result};
use crate::parallel::for_each_chunk_mut;
use crate::rng::{public_stream, uniform_below, BernoulliThreshold, Key};
use crate::simd::multiversion;
use rand_core::Rng;
use rayon::prelude::*;

/// How entries are drawn (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SignKind {
    /// i.i.d. ±1 with P(+1) = 1/2.
    Rademacher,
    /// i.i.d. with P(+1) = p.
    Bernoulli(f64),
    /// Exactly `⌊p·m + 1/2⌋` entries +1 per column, uniformly placed.
    Balanced(f64),
}

impl SignKind {
    /// Parse the Python-facing name and probability.
    pub fn parse(name: &str, p: f64) -> Result<Self> {
        if !(p.is_finite() && p > 0.0 && p < 1.0) {
            return Err(Error::Value(format!(
                "p (the probability of +1) must lie strictly between 0 and 1, got {p}"
            )));
        }
        match name {
            "rademacher" if p == 0.5 => Ok(SignKind::Rademacher),
            "rademacher" => Err(Error::Value(format!(
                "kind='rademacher' has p = 0.5; use kind='bernoulli' for p = {p}"
            ))),
            "bernoulli" => Ok(SignKind::Bernoulli(p)),
            "balanced" => Ok(SignKind::Balanced(p)),
            other => Err(Error::Value(format!(
                "kind must be 'rademacher', 'bernoulli' or 'balanced', got {other:?}"
            ))),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            SignKind::Rademacher => "rademacher",
            SignKind::Bernoulli(_) => "bernoulli",
            SignKind::Balanced(_) => "balanced",
        }
    }

    pub fn p(&self) -> f64 {
        match *self {
            SignKind::Rademacher => 0.5,
            SignKind::Bernoulli(p) | SignKind::Balanced(p) => p,
        }
    }
}

/// Largest supported number of rows: Gram entries `m − 2·popcount(…)` are exact in i32.
pub const MAX_ROWS: usize = i32::MAX as usize;

/// Number of +1 entries in every column of a balanced matrix: `⌊p·m + 1/2⌋`.
pub fn balanced_ones(m: usize, p: f64) -> usize {
    (p * m as f64 + 0.5).floor() as usize
}

/// u64 words per packed column.
pub fn words_per_column(m: usize) -> usize {
    m.div_ceil(64)
}

/// Write column `j` into `out` (`words_per_column(m)` words); `scratch` holds `m` u32 for
/// the balanced kind and may be empty otherwise.
pub fn fill_column(
    key: &Key,
    m: usize,
    kind: SignKind,
    j: u64,
    out: &mut [u64],
    scratch: &mut Vec<u32>,
) {
    debug_assert_eq!(out.len(), words_per_column(m));
    let mut rng = public_stream(key, j);
    match kind {
        SignKind::Rademacher => out.iter_mut().for_each(|w| *w = rng.next_u64()),
        SignKind::Bernoulli(p) => {
            let threshold = BernoulliThreshold::new(p).expect("p was validated");
            out.fill(0);
            for i in 0..m {
                out[i / 64] |= (threshold.sample(&mut rng) as u64) << (i % 64);
            }
        }
        SignKind::Balanced(p) => {
            let ones = balanced_ones(m, p);
            scratch.clear();
            scratch.extend(0..m as u32);
            out.fill(0);
            for t in 0..ones {
                let r = t + uniform_below(&mut rng, (m - t) as u64) as usize;
                scratch.swap(t, r);
                let row = scratch[t] as usize;
                out[row / 64] |= 1 << (row % 64);
            }
        }
    }
    if m % 64 != 0 {
        *out.last_mut().unwrap() &= (1u64 << (m % 64)) - 1;
    }
}

/// Column `j` as ±1 values (what a client needs to privatize its own value).
pub fn column_signs(key: &Key, m: usize, kind: SignKind, j: u64) -> Result<Vec<i8>> {
    if m == 0 || m > MAX_ROWS {
        return Err(Error::Value(format!(
            "m must lie in [1, 2^31 − 1], got {m}"
        )));
    }
    crate::memory::check_fits(m, 5, "the column")?; // m signs + m/64 words + scratch
    let mut words = vec![0u64; words_per_column(m)];
    fill_column(key, m, kind, j, &mut words, &mut Vec::new());
    Ok((0..m).map(|i| sign_at(&words, i)).collect())
}

#[inline]
fn sign_at(words: &[u64], i: usize) -> i8 {
    ((words[i / 64] >> (i % 64)) & 1) as i8 * 2 - 1
}

/// A bit-packed m×k ±1 matrix generated from a key.
#[derive(Clone, Debug)]
pub struct SignMatrix {
    key: Key,
    rows: usize,
    cols: usize,
    kind: SignKind,
    words: usize,
    bits: Vec<u64>,
}

impl SignMatrix {
    /// Build all `k` columns in parallel. Errors on empty shapes or when the packed matrix
    /// would not fit in memory.
    pub fn new(key: Key, m: usize, k: usize, kind: SignKind) -> Result<Self> {
        if m == 0 || k == 0 {
            return Err(Error::Value(format!(
                "a sign matrix needs m ≥ 1 rows and k ≥ 1 columns, got m = {m}, k = {k}"
            )));
        }
        if m > MAX_ROWS {
            return Err(Error::Value(format!(
                "m must be at most 2^31 − 1 (Gram entries are exact int32), got {m}"
            )));
        }
        let words = words_per_column(m);
        let total = words.checked_mul(k).ok_or_else(|| {
            Error::Memory(format!("a {m}×{k} sign matrix is too large to address"))
        })?;
        Self::footprint(m, k).check()?;
        let mut bits = crate::memory::allocate_zeroed::<u64>(total, "the packed sign matrix")?;
        // Chunks of about 2^20 entries are the unit of interruption (about a millisecond).
        let per_chunk = ((1usize << 20) / m).max(1);
        bits.par_chunks_mut(words * per_chunk)
            .enumerate()
            .try_for_each_init(Vec::new, |scratch, (c, columns)| {
                crate::interrupt::check()?;
                for (i, column) in columns.chunks_exact_mut(words).enumerate() {
                    let j = (c * per_chunk + i) as u64;
                    fill_column(&key, m, kind, j, column, scratch);
                }
                Ok::<(), Error>(())
            })?;
        Ok(Self {
            key,
            rows: m,
            cols: k,
            kind,
            words,
            bits,
        })
    }

    /// The bytes [`new`](Self::new) allocates for an m × k matrix (packed bits, one column
    /// of scratch per thread is negligible).
    pub fn footprint(m: usize, k: usize) -> crate::memory::Footprint {
        crate::memory::Footprint::new(format!("the packed {m}×{k} sign matrix"))
            .add(
                "packed columns",
                (words_per_column(m) as u64).saturating_mul(k as u64),
                8,
            )
            .hint("lower k or m (the matrix has k·m bits)")
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn kind(&self) -> SignKind {
        self.kind
    }
    pub fn key(&self) -> &Key {
        &self.key
    }
    /// Bytes of the lookup tables of one [`rmatvec`](Self::rmatvec): 256 sums per byte of
    /// a column.
    pub fn rmatvec_scratch_bytes(&self) -> u64 {
        self.words as u64 * 8 * 256 * 8
    }
    /// Bytes of packed storage.
    pub fn nbytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// Packed words of column `j`.
    #[inline]
    pub fn column_bits(&self, j: usize) -> &[u64] {
        &self.bits[j * self.words..(j + 1) * self.words]
    }

    /// Column `j` as ±1.
    pub fn column(&self, j: usize) -> Vec<i8> {
        let words = self.column_bits(j);
        (0..self.rows).map(|i| sign_at(words, i)).collect()
    }

    /// Column `j` as ±1.0 into `out` (length m).
    pub fn column_f64(&self, j: usize, out: &mut [f64]) {
        let words = self.column_bits(j);
        for (i, o) in out.iter_mut().enumerate() {
            *o = sign_at(words, i) as f64;
        }
    }

    /// Number of +1 entries in column `j`.
    pub fn column_ones(&self, j: usize) -> u32 {
        self.column_bits(j).iter().map(|w| w.count_ones()).sum()
    }

    /// Row-major dense ±1.0 copy (m·k floats; for tests and small sizes).
    pub fn to_dense(&self) -> Result<Vec<f64>> {
        let mut dense = crate::memory::zeroed_vec::<f64>(
            self.rows * self.cols,
            "the dense copy of the sign matrix",
        )?;
        dense
            .par_chunks_mut(self.cols)
            .enumerate()
            .for_each(|(i, row)| {
                for (j, x) in row.iter_mut().enumerate() {
                    *x = sign_at(self.column_bits(j), i) as f64;
                }
            });
        Ok(dense)
    }

    /// `Aᵀ r` for real `r` of length m.
    ///
    /// Read from signed lookup tables: for every byte position b of a column, `table[b][v]`
    /// is `Σ_t ±r[8b + t]` over the 8 rows of that byte, with the sign given by bit t of v.
    /// A column then costs `⌈m/8⌉` lookups and additions, and every partial sum is a true
    /// partial sum of the result (no `2·S − Σr` rewriting that could overflow or cancel).
    pub fn rmatvec(&self, r: &[f64]) -> Result<Vec<f64>> {
        crate::memory::Footprint::new("Aᵀr")
            .add("lookup tables", self.rmatvec_scratch_bytes(), 1)
            .add("the product", self.cols as u64, 8)
            .check()?;
        assert_eq!(r.len(), self.rows, "rmatvec needs a vector of length m");
        let tables = signed_byte_tables(r, self.words * 8)?;
        let mut out = crate::memory::allocate_zeroed::<f64>(self.cols, "the product Aᵀr")?;
        for_each_chunk_mut(&mut out, 1024, self.cols * self.words * 8, |chunk, out| {
            let first = chunk * 1024;
            let bits = &self.bits[first * self.words..(first + out.len()) * self.words];
            table_sums(bits, self.words, &tables, out);
        });
        Ok(out)
    }

    /// `A x` for real `x` of length k; zero entries of x cost nothing.
    pub fn matvec(&self, x: &[f64]) -> Result<Vec<f64>> {
        assert_eq!(x.len(), self.cols, "matvec needs a vector of length k");
        let nonzero: Vec<(usize, f64)> = x
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, v)| v != 0.0)
            .collect();
        // Row blocks of 64 (one packed word) in parallel.
        let mut out = crate::memory::zeroed_vec::<f64>(self.words * 64, "the product Ax")?;
        for_each_chunk_mut(&mut out, 64, nonzero.len() * self.rows, |w, block| {
            for &(j, v) in &nonzero {
                add_signed(self.bits[j * self.words + w], v, block);
            }
        });
        out.truncate(self.rows);
        Ok(out)
    }

    /// Column `j` of the Gram matrix AᵀA, exactly: `m − 2·popcount(col_i XOR col_j)`.
    pub fn gram_column(&self, j: usize) -> Vec<i32> {
        let mut out = vec![0i32; self.cols];
        self.gram_column_into(j, &mut out);
        out
    }

    /// [`gram_column`](Self::gram_column) into a buffer of length k.
    pub fn gram_column_into(&self, j: usize, out: &mut [i32]) {
        let target = self.column_bits(j);
        let m = self.rows as i32;
        let words = self.words;
        for_each_chunk_mut(out, 4096, self.cols * words, |chunk, out| {
            let first = chunk * 4096;
            let bits = &self.bits[first * words..(first + out.len()) * words];
            hamming_distances(bits, target, out);
            out.iter_mut().for_each(|d| *d = m - 2 * *d);
        });
    }
}

/// `tables[b·256 + v] = Σ_{t < 8} (bit t of v ? +1 : −1)·r[8b + t]` (rows past r's end
/// count 0), built from two 16-entry nibble tables per byte.
fn signed_byte_tables(r: &[f64], nbytes: usize) -> Result<Vec<f64>> {
    let mut tables =
        crate::memory::allocate_zeroed::<f64>(nbytes * 256, "the rmatvec lookup tables")?;
    let value = |row: usize| r.get(row).copied().unwrap_or(0.0);
    for (b, table) in tables.chunks_exact_mut(256).enumerate() {
        let nibble = |base: usize, bits: usize| -> f64 {
            (0..4)
                .map(|t| {
                    if bits >> t & 1 == 1 {
                        value(base + t)
                    } else {
                        -value(base + t)
                    }
                })
                .sum()
        };
        let low: Vec<f64> = (0..16).map(|v| nibble(8 * b, v)).collect();
        let high: Vec<f64> = (0..16).map(|v| nibble(8 * b + 4, v)).collect();
        for (v, entry) in table.iter_mut().enumerate() {
            *entry = low[v & 15] + high[v >> 4];
        }
    }
    Ok(tables)
}

multiversion! {
    fn table_sums(bits: &[u64], words: usize, tables: &[f64], out: &mut [f64]) {
        for (column, o) in bits.chunks_exact(words).zip(out.iter_mut()) {
            // Four partial sums break the dependency chain of the additions.
            let mut acc = [0.0f64; 4];
            for (w, &word) in column.iter().enumerate() {
                let t = &tables[w * 2048..(w + 1) * 2048];
                for b in 0..8 {
                    let v = ((word >> (8 * b)) & 0xFF) as usize;
                    acc[b & 3] += t[b * 256 + v];
                }
            }
            *o = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
    }
}

multiversion! {
    /// `block[t] += ±v` with the sign of bit t of `word` (multiplying by ±1 is exact).
    fn add_signed(word: u64, v: f64, block: &mut [f64]) {
        for (t, o) in block.iter_mut().enumerate() {
            *o += v * ((((word >> t) & 1) as i64 * 2 - 1) as f64);
        }
    }
}

multiversion! {
    fn hamming_distances(bits: &[u64], target: &[u64], out: &mut [i32]) {
        for (column, o) in bits.chunks_exact(target.len()).zip(out.iter_mut()) {
            *o = column
                .iter()
                .zip(target)
                .map(|(a, b)| (a ^ b).count_ones() as i32)
                .sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::key_from_u64;

    fn dense(a: &SignMatrix) -> Vec<f64> {
        a.to_dense().unwrap()
    }

    #[test]
    fn columns_are_pure_functions_of_seed_and_index() {
        let key = key_from_u64(42);
        for kind in [
            SignKind::Rademacher,
            SignKind::Bernoulli(0.3),
            SignKind::Balanced(0.5),
        ] {
            let a = SignMatrix::new(key, 77, 50, kind).unwrap();
            for j in [0usize, 1, 49] {
                assert_eq!(a.column(j), column_signs(&key, 77, kind, j as u64).unwrap());
            }
            let again = SignMatrix::new(key, 77, 50, kind).unwrap();
            assert_eq!(a.bits, again.bits);
            let other = SignMatrix::new(key_from_u64(43), 77, 50, kind).unwrap();
            assert_ne!(a.bits, other.bits);
        }
    }

    #[test]
    fn balanced_columns_have_exactly_the_requested_ones() {
        for (m, p) in [(100, 0.5), (101, 0.5), (500, 0.6065), (64, 0.25), (3, 0.9)] {
            let a = SignMatrix::new(key_from_u64(1), m, 300, SignKind::Balanced(p)).unwrap();
            let want = balanced_ones(m, p) as u32;
            assert!(
                (0..300).all(|j| a.column_ones(j) == want),
                "m = {m}, p = {p}"
            );
        }
    }

    #[test]
    fn rademacher_column_is_the_keystream_bits() {
        let key = key_from_u64(9);
        let mut rng = public_stream(&key, 5);
        let first = rng.next_u64();
        let col = column_signs(&key, 64, SignKind::Rademacher, 5).unwrap();
        for (i, &s) in col.iter().enumerate() {
            assert_eq!(s == 1, (first >> i) & 1 == 1);
        }
    }

    #[test]
    fn products_match_the_dense_matrix() {
        let (m, k) = (130, 257);
        for kind in [
            SignKind::Rademacher,
            SignKind::Bernoulli(0.2),
            SignKind::Balanced(0.5),
        ] {
            let a = SignMatrix::new(key_from_u64(3), m, k, kind).unwrap();
            let d = dense(&a);
            let r: Vec<f64> = (0..m).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
            let x: Vec<f64> = (0..k)
                .map(|j| {
                    if j % 3 == 0 {
                        ((j * 13) % 7) as f64 - 3.0
                    } else {
                        0.0
                    }
                })
                .collect();
            let at_r = a.rmatvec(&r).unwrap();
            let a_x = a.matvec(&x).unwrap();
            for j in 0..k {
                let direct: f64 = (0..m).map(|i| d[i * k + j] * r[i]).sum();
                assert_eq!(at_r[j], direct);
            }
            for i in 0..m {
                let direct: f64 = (0..k).map(|j| d[i * k + j] * x[j]).sum();
                assert_eq!(a_x[i], direct);
            }
            let g = a.gram_column(17);
            for i in 0..k {
                let direct: f64 = (0..m).map(|r| d[r * k + i] * d[r * k + 17]).sum();
                assert_eq!(g[i] as f64, direct);
            }
        }
    }

    #[test]
    fn parse_rejects_bad_kinds_and_probabilities() {
        assert!(SignKind::parse("gaussian", 0.5).is_err());
        assert!(SignKind::parse("bernoulli", 0.0).is_err());
        assert!(SignKind::parse("bernoulli", f64::NAN).is_err());
        assert!(SignKind::parse("rademacher", 0.3).is_err());
        assert_eq!(
            SignKind::parse("balanced", 0.25),
            Ok(SignKind::Balanced(0.25))
        );
        assert!(SignMatrix::new(key_from_u64(0), 0, 5, SignKind::Rademacher).is_err());
    }
}
