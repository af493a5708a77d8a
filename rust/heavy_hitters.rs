//! Server-side kernels of heavy-hitter protocols.
//!
//! [`CollisionCells`] applies the collision operator of hashed candidates (the
//! conjugate-gradient step of the joint estimates of TreeHist and the count-mean sketches,
//! `ldpdist.heavy_hitters.decollide`): scatter a vector into the cells the candidates hash
//! to, gather it back (section below).
//!
//! [`cms_flip_words`] draws the flipped bits of count-mean-sketch reports (the client side
//! of the Apple Differential Privacy Team's CMS, "Learning with Privacy at Scale", 2017):
//! Bernoulli(F / 2^b) bits, 64 per word, by a bit-sliced comparison of b-bit uniforms with
//! F that stops as soon as every bit is decided (last section).
//!
//! [`pem_support`] counts the support of candidate prefixes among one group's reports of
//! PEM, the prefix extension method of Wang, Li, Lopuhaä-Zwakenberg, Chen & Jha, "Locally
//! Differentially Private Heavy Hitter Identification", IEEE Transactions on Dependable and
//! Secure Computing, 2021, over optimized local hashing (Wang, Blocki, Li & Jha, "Locally
//! Differentially Private Protocols for Frequency Estimation", USENIX Security 2017).
//!
//! A report is `(group, y, a_0, ..., a_{t_max - 1})`, one byte each: the user's group, the
//! reported hash value `y` in `[0, g)` and the base-g digits `a_i` of the hash function. A
//! candidate prefix `x` with base-g digits `d_0, ..., d_{t-1}` (least significant first) is
//! supported by the report iff `sum_i a_i d_i ≡ y (mod g)`.
//!
//! The counts are exact integers, so the result does not depend on the number of threads
//! or the order of the reports. The arithmetic runs in `f32` so that the inner loop over the
//! candidates vectorizes: every value `sum_i a_i d_i - y` is an integer of magnitude below
//! `t · 255 · (g − 1) + 255 < 2^24` (t ≤ 64, g ≤ 251, so every partial sum is exact) and
//! its quotient by g is below 2^14, so rounding `v · fl(1/g)` to the nearest integer gives
//! `v / g` exactly when g divides v, and `g · round(v · fl(1/g)) == v` holds iff g divides v.

use crate::error::{Error, Result};
use crate::interrupt;
use rayon::prelude::*;

/// Largest modulus g of the hash (digits and hash values are stored in one byte each).
pub const MAX_G: u32 = 251;
/// Largest number of base-g digits of a candidate (64 bits in base 2).
pub const MAX_DIGITS: usize = 64;
/// Reports per parallel task (its matching rows are gathered before the candidates loop).
const CHUNK_ROWS: usize = 1 << 14;
/// Candidates per block of the inner loop: the partial sums of two reports against one
/// block stay in vector registers.
const LANES: usize = 32;
/// Adding then subtracting 1.5 · 2^23 rounds an f32 of magnitude below 2^22 to the nearest
/// integer (ties to even) with plain arithmetic, which vectorizes on every target.
const ROUNDER: f32 = 12_582_912.0;

/// The result of [`pem_support`]: supporting-report counts per candidate, and the number of
/// reports of the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Support {
    /// `counts[c]`: reports of the group supporting candidate `c`.
    pub counts: Vec<u64>,
    /// Reports of the group.
    pub reports: u64,
}

/// Base-g digits of the candidates (least significant first), as `f32`, in blocks of
/// [`LANES`] candidates (the last one padded with zeros): block b holds `t` rows of
/// `LANES` digits, digit i of candidate `b · LANES + l` at `(b · t + i) · LANES + l`.
fn blocked_digits(candidates: &[u64], t: usize, g: u32) -> Vec<f32> {
    let blocks = candidates.len().div_ceil(LANES);
    let mut out = vec![0f32; blocks * t * LANES];
    let g = g as u64;
    for (j, &x) in candidates.iter().enumerate() {
        let (b, l) = (j / LANES, j % LANES);
        let mut x = x;
        for i in 0..t {
            out[(b * t + i) * LANES + l] = (x % g) as f32;
            x /= g;
        }
    }
    out
}

/// Supporting-report counts of PEM candidate prefixes among the reports of one group.
///
/// * `reports`: the reports' bytes, `stride` bytes per report: byte 0 the group, byte 1 the
///   reported value `y`, bytes `2..2 + t` the hash digits `a_i` (further bytes are ignored).
///   Reports of other groups are skipped, so the whole report array can be passed as is.
/// * `group`: the group counted; `t` its number of digits (`1 <= t <= 64`, `2 + t <=
///   stride`); `g` the modulus (`2 <= g <= 251`).
/// * `candidates`: the prefixes; candidate `x` contributes its `t` least significant base-g
///   digits.
///
/// Runs on rayon's pool when the work is large; checks for interruption between chunks.
pub fn pem_support(
    reports: &[u8],
    stride: usize,
    group: u8,
    t: usize,
    g: u32,
    candidates: &[u64],
) -> Result<Support> {
    if !(2..=MAX_G).contains(&g) {
        return Err(Error::Value(format!("g = {g} is not in [2, {MAX_G}]")));
    }
    if t == 0 || t > MAX_DIGITS {
        return Err(Error::Value(format!(
            "t = {t} digits is not in [1, {MAX_DIGITS}]"
        )));
    }
    if stride < 2 + t {
        return Err(Error::Value(format!(
            "a report of {stride} bytes cannot hold a group, a value and {t} digits"
        )));
    }
    if !reports.len().is_multiple_of(stride) {
        return Err(Error::Value(format!(
            "{} bytes of reports are not a whole number of {stride}-byte reports",
            reports.len()
        )));
    }
    let c = candidates.len();
    let rows = reports.len() / stride;
    let threads = rayon::current_num_threads().max(1);
    crate::memory::Footprint::new("PEM support counting")
        .add(
            "the candidates' digits",
            (t * c.div_ceil(LANES) * LANES) as u128,
            4,
        )
        .add(
            "the counts per task",
            (c as u128) * (2 * threads as u128 + 1),
            8,
        )
        .add(
            "the gathered reports per task",
            (threads as u128) * CHUNK_ROWS as u128,
            4 * (t + 1),
        )
        .check()?;
    let digits = blocked_digits(candidates, t, g);
    let work = rows.saturating_mul(1 + c.saturating_mul(t) / 8);
    let chunk_bytes = CHUNK_ROWS * stride;
    let one = |mut counts: Vec<u64>, chunk: &[u8]| -> Result<(Vec<u64>, u64)> {
        interrupt::check()?;
        let mut ys = Vec::with_capacity(CHUNK_ROWS);
        let mut a = Vec::with_capacity(CHUNK_ROWS * t);
        for row in chunk.chunks_exact(stride) {
            if row[0] == group {
                ys.push(row[1] as f32);
                a.extend(row[2..2 + t].iter().map(|&v| v as f32));
            }
        }
        count_chunk(&ys, &a, t, &digits, g as f32, &mut counts);
        Ok((counts, ys.len() as u64))
    };
    let add = |(mut x, n): (Vec<u64>, u64), (y, m): (Vec<u64>, u64)| {
        if x.is_empty() {
            return (y, n + m);
        }
        for (u, v) in x.iter_mut().zip(&y) {
            *u += v;
        }
        (x, n + m)
    };
    let (counts, n) = if work < crate::parallel::PARALLEL_WORK || rows <= CHUNK_ROWS {
        let mut total = (vec![0u64; c], 0u64);
        for chunk in reports.chunks(chunk_bytes) {
            let (counts, m) = one(std::mem::take(&mut total.0), chunk)?;
            total = (counts, total.1 + m);
        }
        total
    } else {
        reports
            .par_chunks(chunk_bytes)
            .try_fold(
                || (Vec::new(), 0u64),
                |(counts, n), chunk| {
                    let counts = if counts.is_empty() {
                        vec![0u64; c]
                    } else {
                        counts
                    };
                    let (counts, m) = one(counts, chunk)?;
                    Ok((counts, n + m))
                },
            )
            .try_reduce(|| (Vec::new(), 0u64), |x, y| Ok(add(x, y)))?
    };
    let counts = if counts.len() == c {
        counts
    } else {
        vec![0u64; c]
    };
    Ok(Support { counts, reports: n })
}

/// Add to `counts` the support of the candidates (digits `digits`, [`blocked_digits`])
/// among the gathered reports (`ys`, and `a`: t digits per report), with the widest vector
/// instructions the CPU has (the sums are exact integers, so fused and separate
/// multiply-adds give the same results).
fn count_chunk(ys: &[f32], a: &[f32], t: usize, digits: &[f32], g: f32, counts: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
        unsafe fn with_avx512(ys: &[f32], a: &[f32], t: usize, d: &[f32], g: f32, c: &mut [u64]) {
            count_chunk_inline::<true>(ys, a, t, d, g, c)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn with_avx2(ys: &[f32], a: &[f32], t: usize, d: &[f32], g: f32, c: &mut [u64]) {
            count_chunk_inline::<true>(ys, a, t, d, g, c)
        }
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512bw")
        {
            // SAFETY: the CPU supports the features the function was compiled for.
            return unsafe { with_avx512(ys, a, t, digits, g, counts) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function was compiled for.
            return unsafe { with_avx2(ys, a, t, digits, g, counts) };
        }
    }
    count_chunk_inline::<false>(ys, a, t, digits, g, counts)
}

/// `s + x · d`, fused when the target has FMA (exact either way: integers below 2^24).
#[inline(always)]
fn multiply_add<const FUSED: bool>(s: f32, x: f32, d: f32) -> f32 {
    if FUSED {
        x.mul_add(d, s)
    } else {
        s + x * d
    }
}

/// 1 when g divides the integer `v` (|v| < 2^24, |v / g| < 2^14), else 0.
#[inline(always)]
fn divides(v: f32, g: f32, inverse: f32) -> u32 {
    let q = (v * inverse + ROUNDER) - ROUNDER;
    (q * g == v) as u32
}

#[inline(always)]
fn count_chunk_inline<const FUSED: bool>(
    ys: &[f32],
    a: &[f32],
    t: usize,
    digits: &[f32],
    g: f32,
    counts: &mut [u64],
) {
    let inverse = 1.0f32 / g;
    let rows = ys.len();
    for (b, block) in digits.chunks_exact(t * LANES).enumerate() {
        let mut hits = [0u32; LANES];
        let mut r = 0;
        while r + 2 <= rows {
            let (a0, a1) = (&a[r * t..(r + 1) * t], &a[(r + 1) * t..(r + 2) * t]);
            let mut s0 = [-ys[r]; LANES];
            let mut s1 = [-ys[r + 1]; LANES];
            for (i, d) in block.chunks_exact(LANES).enumerate() {
                let d: &[f32; LANES] = d.try_into().unwrap();
                let (x0, x1) = (a0[i], a1[i]);
                for l in 0..LANES {
                    s0[l] = multiply_add::<FUSED>(s0[l], x0, d[l]);
                    s1[l] = multiply_add::<FUSED>(s1[l], x1, d[l]);
                }
            }
            for l in 0..LANES {
                hits[l] += divides(s0[l], g, inverse) + divides(s1[l], g, inverse);
            }
            r += 2;
        }
        if r < rows {
            let a0 = &a[r * t..(r + 1) * t];
            let mut s0 = [-ys[r]; LANES];
            for (i, d) in block.chunks_exact(LANES).enumerate() {
                let d: &[f32; LANES] = d.try_into().unwrap();
                for l in 0..LANES {
                    s0[l] = multiply_add::<FUSED>(s0[l], a0[i], d[l]);
                }
            }
            for l in 0..LANES {
                hits[l] += divides(s0[l], g, inverse);
            }
        }
        let start = b * LANES;
        let end = counts.len().min(start + LANES);
        for (total, &h) in counts[start..end].iter_mut().zip(hits.iter()) {
            *total += h as u64;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The collision operator of hashed candidates

/// Candidates per parallel task of the gather at most (their running sums stay in L1).
const GATHER_CHUNK: usize = 1 << 10;

/// Rows scattered together: their cell sums are independent, so the additions of
/// different rows overlap in the pipeline (each row's own order is unchanged).
const SCATTER_ROWS: usize = 4;

/// TreeHist's level hash: the bucket in `[0, g)` of the prefix `x` under the key `key`
/// (`ldpdist.heavy_hitters.treehist.level_hash`): `z = x + key`, SplitMix64's finalizer,
/// `((z >> 32) * g) >> 32`. `g <= 2^32`.
#[inline]
pub fn level_hash(x: u64, key: u64, g: u64) -> u64 {
    let mut z = x.wrapping_add(key);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 32) * g) >> 32
}

/// The count-mean sketch's row hash: the bucket in `[0, m)` of the value `v` under the row
/// salt `salt` (`ldpdist.heavy_hitters.sketch.sketch_buckets`):
/// `(fmix64(v ^ salt) * m) >> 64`, fmix64 MurmurHash3's 64-bit finalizer.
#[inline]
pub fn sketch_hash(v: u64, salt: u64, m: u64) -> u64 {
    let mut z = v ^ salt;
    z ^= z >> 33;
    z = z.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    z ^= z >> 33;
    z = z.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    z ^= z >> 33;
    ((z as u128 * m as u128) >> 64) as u64
}

/// A bucket index stored in the narrowest type that holds `g - 1`.
trait Bucket: crate::memory::Zeroable + Send + Sync {
    fn index(self) -> usize;
    fn from_u64(value: u64) -> Self;
}
macro_rules! bucket {
    ($($t:ty),*) => {$(
        impl Bucket for $t {
            #[inline(always)]
            fn index(self) -> usize {
                self as usize
            }
            #[inline(always)]
            fn from_u64(value: u64) -> Self {
                value as $t
            }
        }
    )*};
}
bucket!(u8, u16, u32);

/// `h_r(x)` for every row r and candidate x, row-major (`[r * C + x]`).
#[derive(Debug)]
enum Buckets {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

macro_rules! with_buckets {
    ($buckets:expr, $b:ident => $body:expr) => {
        match $buckets {
            Buckets::U8($b) => $body,
            Buckets::U16($b) => $body,
            Buckets::U32($b) => $body,
        }
    };
}

/// The cells of C candidates under R hash functions into g buckets each: candidate `x`
/// hashes to bucket `h_r(x)` of row `r`, cell `r * g + h_r(x)` of the `R * g` cells.
///
/// [`CollisionCells::shared_sums`] computes, for a vector `v` over the candidates,
///
/// ```text
/// out[x] = sum_{r = 0}^{R - 1} B[r, h_r(x)],    B[r, b] = sum_{x' : h_r(x') = b} v[x']
/// ```
///
/// (`out / R` is `(pi v)(x)`, `pi(x, x')` the fraction of the hash functions under which x
/// and x' share a bucket), the inner step of the collision solve of TreeHist (Bassily,
/// Nissim, Stemmer & Thakurta, "Practical Locally Private Heavy Hitters", NeurIPS 2017) and
/// of the count-mean sketches with a candidate dictionary (Apple Differential Privacy Team,
/// "Learning with Privacy at Scale", 2017); [`CollisionCells::gather`] is its second half,
/// `sum_r T[r, h_r(x)]` for a given table T (the candidates' supports).
///
/// # Summation order (bit-exact, whatever the number of threads)
/// Each cell sum `B[r, b]` starts at `0.0` and adds `v[x']` in increasing `x'`; each
/// `out[x]` starts at `T[0, h_0(x)]` and adds `T[r, h_r(x)]` for `r = 1, 2, ...` in order.
/// The rows are scattered in parallel (each row owns its g cells) and the candidates are
/// gathered in parallel (each owns its sum), so the order never depends on the threads. It
/// is also the order of numpy's `np.bincount(flat.ravel(), weights=...)` followed by
/// `table.take(flat).sum(axis=0)` on the `(R, C)` cell array `flat`, whose results this
/// reproduces bit for bit.
#[derive(Debug)]
pub struct CollisionCells {
    rows: usize,
    candidates: usize,
    g: usize,
    buckets: Buckets,
    /// The cell sums of [`Self::shared_sums`], kept between calls (a concurrent call
    /// allocates its own).
    scratch: std::sync::Mutex<Vec<f64>>,
}

impl CollisionCells {
    /// The cells from `flat`, the row-major `(rows, C)` array of cell indices
    /// `flat[r * C + x] = r * g + h_r(x)` (`0 <= h_r(x) < g`; C = `flat.len() / rows`).
    pub fn new(flat: &[i64], rows: usize, g: usize) -> Result<Self> {
        if rows > 0 && !flat.len().is_multiple_of(rows) {
            return Err(Error::Value(format!(
                "{} cell indices are not {rows} rows of candidates",
                flat.len()
            )));
        }
        let candidates = flat.len().checked_div(rows).unwrap_or(0);
        Self::check_shape(rows, candidates, g)?;
        for (r, row) in flat.chunks_exact(candidates.max(1)).enumerate() {
            let start = (r * g) as i64;
            if let Some(x) = row
                .iter()
                .position(|&cell| !(0..g as i64).contains(&cell.wrapping_sub(start)))
            {
                return Err(Error::Value(format!(
                    "cell index {} of candidate {x} under hash {r} is not in row {r}'s cells \
                     [{start}, {})",
                    row[x],
                    start + g as i64
                )));
            }
        }
        let c = candidates;
        Self::build(rows, c, g, |r, x| (flat[r * c + x] - (r * g) as i64) as u64)
    }

    /// The cells of TreeHist's level hash ([`level_hash`]): row r is the key `keys[r]`,
    /// `h_r(x) = level_hash(prefixes[x], keys[r], g)`; `1 <= g <= 2^32`.
    pub fn from_level_hash(prefixes: &[u64], keys: &[u64], g: usize) -> Result<Self> {
        Self::check_shape(keys.len(), prefixes.len(), g)?;
        Self::build(keys.len(), prefixes.len(), g, |r, x| {
            level_hash(prefixes[x], keys[r], g as u64)
        })
    }

    /// The cells of the count-mean sketch's row hashes ([`sketch_hash`]): row j is the
    /// salt `salts[j]`, `h_j(v) = sketch_hash(values[v], salts[j], m)`; `1 <= m <= 2^32`.
    pub fn from_sketch_hash(values: &[u64], salts: &[u64], m: usize) -> Result<Self> {
        Self::check_shape(salts.len(), values.len(), m)?;
        Self::build(salts.len(), values.len(), m, |j, x| {
            sketch_hash(values[x], salts[j], m as u64)
        })
    }

    fn check_shape(rows: usize, candidates: usize, g: usize) -> Result<()> {
        if rows == 0 || g == 0 {
            return Err(Error::Value(format!(
                "the collision operator needs at least one row and one bucket, got R = \
                 {rows}, g = {g}"
            )));
        }
        if g as u64 > 1 << 32 {
            return Err(Error::Value(format!("g = {g} buckets is above 2^32")));
        }
        if (rows as u128) * (g as u128) > i64::MAX as u128 {
            return Err(Error::Value(format!(
                "R = {rows} rows of g = {g} buckets are too many cells"
            )));
        }
        let width = if g <= 1 << 8 {
            1
        } else if g <= 1 << 16 {
            2
        } else {
            4
        };
        crate::memory::Footprint::new("the collision operator")
            .add(
                "the candidates' buckets",
                (rows as u128) * (candidates as u128),
                width,
            )
            .add("the cell sums", (rows as u128) * (g as u128), 8)
            .add("the result", candidates as u128, 8)
            .hint("fewer hash functions or candidates")
            .check()
    }

    /// The buckets `bucket(r, x)` (each below g, which the callers guarantee), in the
    /// narrowest type, computed in parallel by rows.
    fn build(
        rows: usize,
        c: usize,
        g: usize,
        bucket: impl Fn(usize, usize) -> u64 + Sync,
    ) -> Result<Self> {
        fn fill<T: Bucket>(
            rows: usize,
            c: usize,
            bucket: &(impl Fn(usize, usize) -> u64 + Sync),
        ) -> Result<Vec<T>> {
            let mut out = crate::memory::allocate_zeroed::<T>(rows * c, "the buckets")?;
            if c > 0 {
                let rows_per_task = (crate::parallel::PARALLEL_WORK / 8 / c).clamp(1, rows);
                crate::parallel::for_each_chunk_mut(
                    &mut out,
                    rows_per_task * c,
                    rows.saturating_mul(c).saturating_mul(8),
                    |t, block| {
                        for (i, row) in block.chunks_exact_mut(c).enumerate() {
                            let r = t * rows_per_task + i;
                            for (x, b) in row.iter_mut().enumerate() {
                                *b = T::from_u64(bucket(r, x));
                            }
                        }
                    },
                );
            }
            Ok(out)
        }
        let buckets = if g <= 1 << 8 {
            Buckets::U8(fill(rows, c, &bucket)?)
        } else if g <= 1 << 16 {
            Buckets::U16(fill(rows, c, &bucket)?)
        } else {
            Buckets::U32(fill(rows, c, &bucket)?)
        };
        Ok(Self {
            rows,
            candidates: c,
            g,
            buckets,
            scratch: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Number R of hash functions (rows).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Number C of candidates.
    pub fn candidates(&self) -> usize {
        self.candidates
    }
    /// Buckets g per row.
    pub fn g(&self) -> usize {
        self.g
    }
    /// `h_r(x)` (`r < R`, `x < C`).
    pub fn bucket(&self, r: usize, x: usize) -> usize {
        with_buckets!(&self.buckets, b => b[r * self.candidates + x].index())
    }
    /// Bytes held by the buckets.
    pub fn nbytes(&self) -> usize {
        with_buckets!(&self.buckets, b => std::mem::size_of_val(b.as_slice()))
    }

    /// `out[x] = sum_r B[r, h_r(x)]`, `B` the cell sums of `v` (type documentation, which
    /// gives the summation order). Values are not checked: a NaN propagates.
    pub fn shared_sums(&self, v: &[f64]) -> Result<Vec<f64>> {
        let (rows, c, g) = (self.rows, self.candidates, self.g);
        if v.len() != c {
            return Err(Error::Value(format!(
                "the vector has {} entries, the operator {c} candidates",
                v.len()
            )));
        }
        if c == 0 {
            return Ok(Vec::new());
        }
        let mut own = Vec::new();
        let mut held = self.scratch.try_lock();
        let sums: &mut Vec<f64> = match held.as_deref_mut() {
            Ok(kept) => kept,
            Err(_) => &mut own, // another thread's call holds the kept buffer
        };
        if sums.len() != rows * g {
            *sums = crate::memory::allocate_zeroed::<f64>(rows * g, "the cell sums")?;
        }
        with_buckets!(&self.buckets, b => scatter(b, rows, c, g, v, sums));
        self.gather_unchecked(sums)
    }

    /// `out[x] = sum_r table[r * g + h_r(x)]`, added in increasing r (type
    /// documentation): e.g. the candidates' supports from a table of counts.
    pub fn gather(&self, table: &[f64]) -> Result<Vec<f64>> {
        if table.len() as u128 != (self.rows as u128) * (self.g as u128) {
            return Err(Error::Value(format!(
                "the table has {} cells, the operator R g = {} x {}",
                table.len(),
                self.rows,
                self.g
            )));
        }
        self.gather_unchecked(table)
    }

    fn gather_unchecked(&self, table: &[f64]) -> Result<Vec<f64>> {
        let mut out = crate::memory::allocate_zeroed::<f64>(self.candidates, "the result")?;
        with_buckets!(&self.buckets, b => {
            gather(b, self.rows, self.candidates, self.g, table, &mut out)
        });
        Ok(out)
    }
}

/// `sums[r * g + b] = sum of v[x] over h_r(x) = b`, added in increasing x (rows in
/// parallel, [`SCATTER_ROWS`] at a time). Every bucket is below g.
fn scatter<T: Bucket>(buckets: &[T], rows: usize, c: usize, g: usize, v: &[f64], sums: &mut [f64]) {
    let v = &v[..c];
    let work = rows.saturating_mul(c);
    let rows_per_task = (crate::parallel::PARALLEL_WORK / 4 / c)
        .next_multiple_of(SCATTER_ROWS)
        .clamp(1, rows);
    crate::parallel::for_each_chunk_mut(sums, rows_per_task * g, work, |t, block| {
        block.fill(0.0);
        let first = t * rows_per_task;
        let mut groups = block.chunks_exact_mut(SCATTER_ROWS * g);
        let mut r = first;
        for group in &mut groups {
            let (s0, rest) = group.split_at_mut(g);
            let (s1, rest) = rest.split_at_mut(g);
            let (s2, s3) = rest.split_at_mut(g);
            let h0 = &buckets[r * c..][..c];
            let h1 = &buckets[(r + 1) * c..][..c];
            let h2 = &buckets[(r + 2) * c..][..c];
            let h3 = &buckets[(r + 3) * c..][..c];
            for x in 0..c {
                let value = v[x];
                // SAFETY: every bucket is below g (checked or computed so at construction),
                // and each s_i holds g cells.
                unsafe {
                    *s0.get_unchecked_mut(h0[x].index()) += value;
                    *s1.get_unchecked_mut(h1[x].index()) += value;
                    *s2.get_unchecked_mut(h2[x].index()) += value;
                    *s3.get_unchecked_mut(h3[x].index()) += value;
                }
            }
            r += SCATTER_ROWS;
        }
        for cells in groups.into_remainder().chunks_exact_mut(g) {
            let h = &buckets[r * c..][..c];
            for x in 0..c {
                // SAFETY: as above.
                unsafe { *cells.get_unchecked_mut(h[x].index()) += v[x] };
            }
            r += 1;
        }
    });
}

/// `out[x] = sum_r table[r * g + h_r(x)]` in increasing r (candidates in parallel).
/// `table` holds `rows * g` cells; every bucket is below g.
fn gather<T: Bucket>(
    buckets: &[T],
    rows: usize,
    c: usize,
    g: usize,
    table: &[f64],
    out: &mut [f64],
) {
    assert!(table.len() == rows * g && out.len() == c && buckets.len() == rows * c);
    if c == 0 {
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    let chunk = c
        .div_ceil(4 * threads)
        .next_multiple_of(16)
        .clamp(16, GATHER_CHUNK);
    crate::parallel::for_each_chunk_mut(out, chunk, rows.saturating_mul(c), |t, acc| {
        let x0 = t * chunk;
        let width = acc.len();
        let cells = &table[..g];
        for (a, &b) in acc.iter_mut().zip(&buckets[x0..x0 + width]) {
            // SAFETY: every bucket is below g = cells.len().
            *a = unsafe { *cells.get_unchecked(b.index()) };
        }
        // four rows per pass: each sum still adds its rows one by one, in increasing r
        let row = |r: usize| (&table[r * g..(r + 1) * g], &buckets[r * c + x0..][..width]);
        let mut r = 1;
        while r + 4 <= rows {
            let ((t0, h0), (t1, h1)) = (row(r), row(r + 1));
            let ((t2, h2), (t3, h3)) = (row(r + 2), row(r + 3));
            for (x, a) in acc.iter_mut().enumerate() {
                // SAFETY: every bucket is below g = the length of each t_i.
                unsafe {
                    let mut s = *a + *t0.get_unchecked(h0[x].index());
                    s += *t1.get_unchecked(h1[x].index());
                    s += *t2.get_unchecked(h2[x].index());
                    *a = s + *t3.get_unchecked(h3[x].index());
                }
            }
            r += 4;
        }
        for r in r..rows {
            let (cells, h) = row(r);
            for (a, &b) in acc.iter_mut().zip(h) {
                // SAFETY: as above.
                *a += unsafe { *cells.get_unchecked(b.index()) };
            }
        }
    });
}

// ---------------------------------------------------------------------------------------
// The flips of count-mean-sketch reports

/// Users per ChaCha stream of [`cms_flip_words`]: user `u` draws from the stream
/// `u / FLIP_BLOCK` of the key. Fixed: part of the reproducibility contract.
pub const FLIP_BLOCK: usize = 1024;

/// 64 independent Bernoulli(`f / 2^bits`) bits (the lanes of `lanes`; the other bits are
/// 0) from the 64-bit words `next()`: lane l compares the b-bit uniform U_l whose bit
/// `bits - 1 - i` (most significant first) is bit l of the i-th word with f, and is 1 iff
/// `U_l < f`. A lane is decided at its first bit that differs from f's, so the words stop
/// when every lane is decided (about `log2(64) + 1.3` words instead of `bits`). Exact: the
/// decided lanes do not depend on the bits not drawn, and the words after the last one
/// drawn are fresh. `f <= 2^bits`, `bits <= 32`.
#[inline]
pub fn bernoulli_word(mut next: impl FnMut() -> u64, f: u64, bits: u32, lanes: u64) -> u64 {
    if f >> bits != 0 {
        return lanes; // f = 2^bits: probability 1
    }
    let mut less = 0u64;
    let mut equal = lanes;
    let mut i = bits;
    while equal != 0 && i > 0 {
        i -= 1;
        let word = next();
        if (f >> i) & 1 == 1 {
            less |= equal & !word; // U's bit 0 where f's is 1: U < f
            equal &= word;
        } else {
            equal &= !word; // U's bit 1 where f's is 0: U > f
        }
    }
    less
}

/// The flipped bits of `users` count-mean-sketch reports of m bits: `users * ceil(m / 64)`
/// words (user-major, bit b of the report in word `b / 64`, bit `b % 64`), each bit 1 with
/// probability exactly `f / 2^bits` independently, bits past m zero. User `first_user + i`
/// draws from `rng::stream(key, (first_user + i) / FLIP_BLOCK)` (its users in order, each
/// its words in order, [`bernoulli_word`]), so the result does not depend on the number of
/// threads, and calls on consecutive ranges of users aligned to [`FLIP_BLOCK`] give the
/// words of one call on their union. `first_user` is a multiple of [`FLIP_BLOCK`].
pub fn cms_flip_words(
    key: &crate::rng::Key,
    first_user: u64,
    users: usize,
    m: usize,
    f: u64,
    bits: u32,
) -> Result<Vec<u64>> {
    if !(1..=32).contains(&bits) || f > 1u64 << bits {
        return Err(Error::Value(format!(
            "the flip probability {f} / 2^{bits} is not in [0, 1] with 1 <= bits <= 32"
        )));
    }
    if m == 0 {
        return Err(Error::Value(
            "a report needs at least one bit (m >= 1)".into(),
        ));
    }
    if !first_user.is_multiple_of(FLIP_BLOCK as u64) {
        return Err(Error::Value(format!(
            "the first user {first_user} is not a multiple of {FLIP_BLOCK}"
        )));
    }
    let words = m.div_ceil(64);
    let total = users
        .checked_mul(words)
        .ok_or_else(|| Error::Memory(format!("{users} reports of {m} bits are too many words")))?;
    let mut out = crate::memory::zeroed_vec::<u64>(total, "the flipped bits")?;
    let last = if m % 64 == 0 {
        u64::MAX
    } else {
        (1u64 << (m % 64)) - 1
    };
    let first_block = first_user / FLIP_BLOCK as u64;
    out.par_chunks_mut(FLIP_BLOCK * words)
        .enumerate()
        .try_for_each(|(b, chunk)| {
            interrupt::check()?;
            let mut rng = crate::rng::stream(key, first_block + b as u64);
            let mut next = || rand_core::Rng::next_u64(&mut rng);
            for report in chunk.chunks_exact_mut(words) {
                let (tail, body) = report.split_last_mut().expect("words >= 1");
                for w in body {
                    *w = bernoulli_word(&mut next, f, bits, u64::MAX);
                }
                *tail = bernoulli_word(&mut next, f, bits, last);
            }
            Ok(())
        })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::in_pool;

    /// A small deterministic generator (splitmix64) for test data.
    struct Mix(u64);
    impl Mix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, k: u64) -> u64 {
            self.next() % k
        }
    }

    /// Reports of `groups` groups with digits below g (or any byte when `wild`).
    fn reports(mix: &mut Mix, n: usize, groups: u8, t_max: usize, g: u32, wild: bool) -> Vec<u8> {
        let stride = 2 + t_max;
        let mut out = vec![0u8; n * stride];
        for row in out.chunks_exact_mut(stride) {
            row[0] = mix.below(groups as u64) as u8;
            let bound = if wild { 256 } else { g as u64 };
            for v in row[1..].iter_mut() {
                *v = mix.below(bound) as u8;
            }
        }
        out
    }

    fn brute(reports: &[u8], stride: usize, group: u8, t: usize, g: u32, cands: &[u64]) -> Support {
        let mut counts = vec![0u64; cands.len()];
        let mut n = 0;
        for row in reports.chunks_exact(stride) {
            if row[0] != group {
                continue;
            }
            n += 1;
            for (k, &x) in cands.iter().enumerate() {
                let mut x = x;
                let mut h: i64 = -(row[1] as i64);
                for i in 0..t {
                    h += row[2 + i] as i64 * (x % g as u64) as i64;
                    x /= g as u64;
                }
                counts[k] += (h.rem_euclid(g as i64) == 0) as u64;
            }
        }
        Support { counts, reports: n }
    }

    #[test]
    fn matches_brute_force_counts() {
        let mut mix = Mix(7);
        for &(g, t_max, n, c) in &[
            (2u32, 8usize, 3000usize, 37usize),
            (3, 5, 1000, 600),
            (53, 12, 40_000, 256),
            (59, 11, 2000, 1100),
            (251, 9, 5000, 300),
            (251, 64, 300, 20),
        ] {
            for wild in [false, true] {
                let data = reports(&mut mix, n, 4, t_max, g, wild);
                let cands: Vec<u64> = (0..c).map(|_| mix.next()).collect();
                for t in [1, t_max / 2 + 1, t_max] {
                    for group in 0..5u8 {
                        let got = pem_support(&data, 2 + t_max, group, t, g, &cands).unwrap();
                        let want = brute(&data, 2 + t_max, group, t, g, &cands);
                        assert_eq!(got, want, "g {g} t {t} group {group} wild {wild}");
                    }
                }
            }
        }
    }

    #[test]
    fn baseline_and_fused_paths_agree() {
        // the dispatch picks one path on this CPU: run both inner loops directly
        let mut mix = Mix(5);
        let (g, t) = (251u32, 9usize);
        let rows = 301;
        let ys: Vec<f32> = (0..rows).map(|_| mix.below(256) as f32).collect();
        let a: Vec<f32> = (0..rows * t).map(|_| mix.below(256) as f32).collect();
        let cands: Vec<u64> = (0..70).map(|_| mix.next()).collect();
        let digits = blocked_digits(&cands, t, g);
        let mut plain = vec![0u64; cands.len()];
        let mut fused = vec![0u64; cands.len()];
        count_chunk_inline::<false>(&ys, &a, t, &digits, g as f32, &mut plain);
        count_chunk_inline::<true>(&ys, &a, t, &digits, g as f32, &mut fused);
        assert_eq!(plain, fused);
        let mut bytes = Vec::new();
        for r in 0..rows {
            bytes.push(0u8);
            bytes.push(ys[r] as u8);
            bytes.extend(a[r * t..(r + 1) * t].iter().map(|&v| v as u8));
        }
        assert_eq!(plain, brute(&bytes, 2 + t, 0, t, g, &cands).counts);
    }

    #[test]
    fn true_prefix_is_supported_by_its_noiseless_report() {
        // a report with y = h_a(x) supports x
        let (g, t) = (53u32, 12usize);
        let mut mix = Mix(3);
        let x = mix.next();
        let mut row = vec![1u8, 0];
        let mut h = 0u64;
        let mut rest = x;
        for _ in 0..t {
            let a = mix.below(g as u64);
            row.push(a as u8);
            h += a * (rest % g as u64);
            rest /= g as u64;
        }
        row[1] = (h % g as u64) as u8;
        let got = pem_support(&row, 2 + t, 1, t, g, &[x, x ^ 1]).unwrap();
        assert_eq!(got.reports, 1);
        assert_eq!(got.counts[0], 1);
    }

    #[test]
    fn thread_count_does_not_change_the_counts() {
        let mut mix = Mix(11);
        let (g, t_max) = (53u32, 12usize);
        let data = reports(&mut mix, 200_000, 3, t_max, g, false);
        let cands: Vec<u64> = (0..300).map(|_| mix.next()).collect();
        let one = in_pool(1, || {
            pem_support(&data, 2 + t_max, 2, t_max, g, &cands).unwrap()
        });
        let three = in_pool(3, || {
            pem_support(&data, 2 + t_max, 2, t_max, g, &cands).unwrap()
        });
        assert_eq!(one, three);
        assert_eq!(one, brute(&data, 2 + t_max, 2, t_max, g, &cands));
    }

    /// Cell indices `r * g + h_r(x)` of c candidates under `rows` random hashes.
    fn random_flat(mix: &mut Mix, rows: usize, c: usize, g: usize) -> Vec<i64> {
        let mut flat = Vec::with_capacity(rows * c);
        for r in 0..rows {
            for _ in 0..c {
                flat.push((r * g) as i64 + mix.below(g as u64) as i64);
            }
        }
        flat
    }

    /// The operator in numpy's order, written out: bincount, then take and sum over rows.
    fn numpy_order(flat: &[i64], rows: usize, g: usize, v: &[f64]) -> Vec<f64> {
        let c = v.len();
        let mut cells = vec![0.0f64; rows * g];
        for (i, &cell) in flat.iter().enumerate() {
            cells[cell as usize] += v[i % c];
        }
        let mut out: Vec<f64> = (0..c).map(|x| cells[flat[x] as usize]).collect();
        for r in 1..rows {
            for x in 0..c {
                out[x] += cells[flat[r * c + x] as usize];
            }
        }
        out
    }

    #[test]
    fn collision_sums_match_numpy_order_bit_for_bit() {
        let mut mix = Mix(13);
        for &(rows, c, g) in &[
            (1usize, 1usize, 1usize),
            (1, 5, 2),
            (3, 17, 4),
            (64, 1000, 1024),
            (1024, 512, 56),
            (7, 3000, 3),
        ] {
            let flat = random_flat(&mut mix, rows, c, g);
            let v: Vec<f64> = (0..c)
                .map(|_| (mix.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.3)
                .collect();
            let cells = CollisionCells::new(&flat, rows, g).unwrap();
            assert_eq!((cells.rows(), cells.candidates(), cells.g()), (rows, c, g));
            let got = cells.shared_sums(&v).unwrap();
            let want = numpy_order(&flat, rows, g, &v);
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "R {rows} C {c} g {g}"
            );
        }
    }

    #[test]
    fn collision_sums_count_shared_buckets() {
        // v = e_y: out[x] = the number of hashes under which x and y share a bucket
        let (rows, c, g) = (5usize, 6usize, 3usize);
        let mut mix = Mix(2);
        let flat = random_flat(&mut mix, rows, c, g);
        let cells = CollisionCells::new(&flat, rows, g).unwrap();
        for y in 0..c {
            let mut v = vec![0.0; c];
            v[y] = 1.0;
            let got = cells.shared_sums(&v).unwrap();
            for x in 0..c {
                let shared = (0..rows)
                    .filter(|&r| flat[r * c + x] == flat[r * c + y])
                    .count();
                assert_eq!(got[x], shared as f64, "x {x} y {y}");
            }
            assert_eq!(got[y], rows as f64);
        }
    }

    #[test]
    fn collision_sums_do_not_depend_on_the_thread_count() {
        let mut mix = Mix(17);
        for &(rows, c, g) in &[
            (64usize, 10_000usize, 1024usize),
            (1024, 512, 56),
            (2, 70_000, 9),
        ] {
            let flat = random_flat(&mut mix, rows, c, g);
            let v: Vec<f64> = (0..c).map(|_| mix.next() as f64 / 3e18 - 1.1).collect();
            let cells = CollisionCells::new(&flat, rows, g).unwrap();
            let runs: Vec<Vec<u64>> = [1, 2, 3, 8]
                .iter()
                .map(|&threads| {
                    in_pool(threads, || cells.shared_sums(&v).unwrap())
                        .iter()
                        .map(|x| x.to_bits())
                        .collect()
                })
                .collect();
            for other in &runs[1..] {
                assert_eq!(&runs[0], other, "R {rows} C {c} g {g}");
            }
            let want: Vec<u64> = numpy_order(&flat, rows, g, &v)
                .iter()
                .map(|x| x.to_bits())
                .collect();
            assert_eq!(runs[0], want);
        }
    }

    #[test]
    fn hashed_cells_are_the_hashes_and_gather_sums_in_row_order() {
        let mut mix = Mix(21);
        for &(rows, c, g) in &[
            (1024usize, 300usize, 56usize),
            (16, 100, 4),
            (8, 50, 70_000),
        ] {
            let keys: Vec<u64> = (0..rows).map(|_| mix.next()).collect();
            let xs: Vec<u64> = (0..c)
                .map(|_| mix.next() >> (mix.below(64) as u32))
                .collect();
            let level = CollisionCells::from_level_hash(&xs, &keys, g).unwrap();
            let sketch = CollisionCells::from_sketch_hash(&xs, &keys, g).unwrap();
            let mut level_flat = Vec::new();
            let mut sketch_flat = Vec::new();
            for r in 0..rows {
                for x in 0..c {
                    let (a, b) = (level.bucket(r, x), sketch.bucket(r, x));
                    assert_eq!(a as u64, level_hash(xs[x], keys[r], g as u64));
                    assert_eq!(b as u64, sketch_hash(xs[x], keys[r], g as u64));
                    assert!(a < g && b < g);
                    level_flat.push((r * g + a) as i64);
                    sketch_flat.push((r * g + b) as i64);
                }
            }
            let table: Vec<f64> = (0..rows * g)
                .map(|_| mix.below(1000) as f64 - 3.5)
                .collect();
            let v: Vec<f64> = (0..c).map(|_| mix.next() as f64 / 7e18).collect();
            for (cells, flat) in [(&level, &level_flat), (&sketch, &sketch_flat)] {
                let got = cells.gather(&table).unwrap();
                for x in 0..c {
                    let mut want = table[flat[x] as usize];
                    for r in 1..rows {
                        want += table[flat[r * c + x] as usize];
                    }
                    assert_eq!(got[x].to_bits(), want.to_bits());
                }
                let from_flat = CollisionCells::new(flat, rows, g).unwrap();
                assert_eq!(
                    cells.shared_sums(&v).unwrap(),
                    from_flat.shared_sums(&v).unwrap()
                );
                assert_eq!(
                    cells.shared_sums(&v).unwrap(),
                    numpy_order(flat, rows, g, &v)
                );
            }
            assert!(level.gather(&table[1..]).is_err());
        }
        // the spec's values (SplitMix64 / MurmurHash3 finalizers)
        assert_eq!(level_hash(0, 0, 1 << 32), 0);
        assert_eq!(sketch_hash(0, 0, 1 << 32), 0);
        assert!(CollisionCells::from_level_hash(&[1], &[2], (1 << 32) + 1).is_err());
        assert!(CollisionCells::from_sketch_hash(&[1], &[], 4).is_err());
    }

    #[test]
    fn bernoulli_word_compares_exhaustively() {
        // lane l holds U = l mod 2^bits (all values when bits <= 6): bit l of the result is
        // [U < f] for every f, and the words stop once all lanes are decided
        for bits in 1..=6u32 {
            let values = 1u64 << bits;
            for f in 0..=values {
                for lanes in [u64::MAX, 0x0000_FFFF_0F0F_00FF, 1, 0] {
                    let mut level = 0u32;
                    let mut drawn = 0u32;
                    let next = || {
                        let i = level; // bit bits - 1 - i of U, most significant first
                        level += 1;
                        drawn += 1;
                        (0..64u64).fold(0u64, |w, l| {
                            w | ((((l % values) >> (bits - 1 - i)) & 1) << l)
                        })
                    };
                    let got = bernoulli_word(next, f, bits, lanes);
                    let want = (0..64u64).fold(0u64, |w, l| w | (((l % values < f) as u64) << l));
                    assert_eq!(got, want & lanes, "bits {bits} f {f} lanes {lanes:x}");
                    assert!(drawn <= bits);
                    // the stop: the shortest prefix of f's bits that decides every lane
                    let decided = |depth: u32| {
                        (0..64u64).filter(|l| lanes >> l & 1 == 1).all(|l| {
                            let u = l % values;
                            (u >> (bits - depth)) != (f >> (bits - depth)) || depth == bits
                        })
                    };
                    let need = if f == values {
                        0
                    } else {
                        (0..=bits).find(|&d| decided(d)).unwrap()
                    };
                    assert_eq!(drawn, need, "bits {bits} f {f} lanes {lanes:x}");
                }
            }
        }
    }

    #[test]
    fn cms_flips_have_the_exact_bit_frequency() {
        // chi-square of the per-position frequency of the bits over 20 000 reports of 100
        // bits (padding past m zero), and the overall frequency within 5 standard errors
        let (users, m, f, bits) = (20_000usize, 100usize, 7_817u64, 16u32);
        let key = crate::rng::key_from_u64(42);
        let words = cms_flip_words(&key, 0, users, m, f, bits).unwrap();
        assert_eq!(words.len(), users * 2);
        let q = f as f64 / 65536.0;
        let mut counts = vec![0u64; m];
        for report in words.chunks_exact(2) {
            assert_eq!(report[1] >> (m - 64), 0, "a padding bit is set");
            for (b, count) in counts.iter_mut().enumerate() {
                *count += report[b / 64] >> (b % 64) & 1;
            }
        }
        let expected = users as f64 * q;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / (expected * (1.0 - q)))
            .sum();
        // chi-square with 100 degrees of freedom: mean 100, sd 14.1
        assert!(chi2 < 100.0 + 5.0 * 14.15, "chi2 {chi2}");
        let total: u64 = counts.iter().sum();
        let trials = (users * m) as f64;
        let z = (total as f64 - trials * q) / (trials * q * (1.0 - q)).sqrt();
        assert!(z.abs() < 5.0, "z {z}");
        // the extremes
        let none = cms_flip_words(&key, 0, 50, 70, 0, 16).unwrap();
        assert!(none.iter().all(|&w| w == 0));
        let all = cms_flip_words(&key, 0, 50, 70, 1 << 16, 16).unwrap();
        assert!(all
            .chunks_exact(2)
            .all(|r| r[0] == u64::MAX && r[1] == 0x3F));
    }

    #[test]
    fn cms_flips_are_reproducible_and_thread_count_free() {
        let key = crate::rng::key_from_u64(7);
        let (users, m) = (5 * FLIP_BLOCK + 17, 1024usize);
        let one = in_pool(1, || cms_flip_words(&key, 0, users, m, 4000, 16).unwrap());
        let three = in_pool(3, || cms_flip_words(&key, 0, users, m, 4000, 16).unwrap());
        assert_eq!(one, three);
        assert_eq!(one, cms_flip_words(&key, 0, users, m, 4000, 16).unwrap());
        // a call on the users from the second block on gives the same words
        let words = m / 64;
        let later = cms_flip_words(&key, FLIP_BLOCK as u64, users - FLIP_BLOCK, m, 4000, 16);
        assert_eq!(later.unwrap(), one[FLIP_BLOCK * words..]);
        let other = cms_flip_words(&crate::rng::key_from_u64(8), 0, users, m, 4000, 16).unwrap();
        assert_ne!(one, other);
        assert!(cms_flip_words(&key, 3, 10, m, 4000, 16).is_err());
        assert!(cms_flip_words(&key, 0, 10, 0, 4000, 16).is_err());
        assert!(cms_flip_words(&key, 0, 10, m, (1 << 16) + 1, 16).is_err());
        assert!(cms_flip_words(&key, 0, 10, m, 1, 33).is_err());
        assert!(cms_flip_words(&key, 0, 0, m, 1, 16).unwrap().is_empty());
    }

    #[test]
    fn collision_cells_refuse_bad_input() {
        assert!(CollisionCells::new(&[0, 1], 0, 2).is_err());
        assert!(CollisionCells::new(&[0, 1], 1, 0).is_err());
        assert!(CollisionCells::new(&[0, 1, 2], 2, 2).is_err()); // not whole rows
        let message = CollisionCells::new(&[0, 1], 2, 2).unwrap_err().to_string();
        assert!(message.contains("not in row 1"), "{message}"); // cell 1 is row 0's
        assert!(CollisionCells::new(&[-1], 1, 2).is_err());
        assert!(CollisionCells::new(&[2], 1, 2).is_err());
        let cells = CollisionCells::new(&[1, 2], 2, 2).unwrap();
        assert!(cells.shared_sums(&[1.0, 2.0]).is_err()); // one candidate
        assert_eq!(cells.shared_sums(&[2.5]).unwrap(), vec![5.0]);
        let empty = CollisionCells::new(&[], 3, 4).unwrap();
        assert_eq!(empty.candidates(), 0);
        assert!(empty.shared_sums(&[]).unwrap().is_empty());
        let huge = CollisionCells::new(&[], 1 << 20, 1 << 30).unwrap_err();
        assert!(matches!(huge, Error::Memory(_)), "{huge}");
    }

    #[test]
    fn empty_inputs_and_bad_arguments() {
        let got = pem_support(&[], 14, 0, 12, 53, &[1, 2]).unwrap();
        assert_eq!(
            got,
            Support {
                counts: vec![0, 0],
                reports: 0
            }
        );
        let got = pem_support(&[0, 0, 0], 3, 0, 1, 53, &[]).unwrap();
        assert_eq!(
            got,
            Support {
                counts: vec![],
                reports: 1
            }
        );
        assert!(pem_support(&[], 14, 0, 12, 252, &[1]).is_err());
        assert!(pem_support(&[], 14, 0, 12, 1, &[1]).is_err());
        assert!(pem_support(&[], 14, 0, 0, 53, &[1]).is_err());
        assert!(pem_support(&[], 14, 0, 13, 53, &[1]).is_err());
        assert!(pem_support(&[0; 15], 14, 0, 12, 53, &[1]).is_err());
    }
}
