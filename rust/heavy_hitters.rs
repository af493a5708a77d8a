//! Server-side kernels of heavy-hitter protocols.
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
