//! Fast Walsh–Hadamard transform in Sylvester order, and Sylvester matrix entries.
//!
//! Convention (DESIGN.md): `H(r, c) = (−1)^popcount(r & c)`, 0-based, unnormalized, so
//! `H·H = n·I`. [`fwht_in_place`] computes `x ← H·x` for `x.len() = n = 2^j` in
//! `n·log2(n)` additions.
//!
//! Layout of the computation: the vector is viewed as an `R × C` row-major matrix with
//! `C = BLOCK` (fits in L1). `H_n = H_R ⊗ H_C`, so the transform is (1) an in-cache transform
//! of every row, then (2) a length-`R` transform down every column, done on panels of
//! `PANEL` adjacent columns so each butterfly works on contiguous, vectorizable runs. The data
//! crosses memory twice instead of `log2 n` times; rows, then panels, run in parallel.
//! Panels are copied to a contiguous scratch buffer first: walking a column with a stride of
//! 32 KiB would map every row to the same cache sets.
//! Butterflies are radix-4 (two stages per pass over the data).

use crate::simd::multiversion;
use rayon::prelude::*;
use std::ops::{Add, Sub};

/// Elements the transform works on: floats, and exact integers for count decoding.
pub trait Butterfly: Copy + Send + Sync + Add<Output = Self> + Sub<Output = Self> {}
impl Butterfly for f64 {}
impl Butterfly for f32 {}
impl Butterfly for i64 {}

/// Row length of the two-pass decomposition: 2^12 f64 = 32 KiB (L1-resident).
const BLOCK: usize = 1 << 12;
/// Columns transformed together in the second pass (two cache lines of f64).
const PANEL: usize = 16;
/// Below this size the transform runs on the calling thread only.
const PARALLEL_MIN: usize = 1 << 16;

/// Entry `(r, c)` of the Sylvester Hadamard matrix: `(−1)^popcount(r & c)`.
#[inline]
pub fn sylvester_entry(r: u64, c: u64) -> i8 {
    1 - 2 * ((r & c).count_ones() & 1) as i8
}

#[inline(always)]
fn butterfly4<T: Butterfly>(a: T, b: T, c: T, d: T) -> (T, T, T, T) {
    let (s0, d0, s1, d1) = (a + b, a - b, c + d, c - d);
    (s0 + s1, d0 + d1, s0 - s1, d0 - d1)
}

/// Stages `h = first, 2·first, …, n/2` of the transform of a contiguous block whose length
/// `n` is a power of two (`first` a power of two). With `first = 1` this is the whole
/// transform; a buffer of `R` rows of width `W` gets its length-`R` column transforms from
/// `first = W`, each butterfly acting on `W` contiguous entries.
#[inline(always)]
fn transform_stages<T: Butterfly>(x: &mut [T], first: usize) {
    let n = x.len();
    let mut h = first;
    if h == 1 && n >= 8 {
        // The first three stages inside each group of 8, written out: the generic loops
        // below would run with inner lengths 1 and 4, which do not vectorize.
        for g in x.chunks_exact_mut(8) {
            let [a0, a1, a2, a3, a4, a5, a6, a7] = [g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]];
            let (b0, b1, b2, b3) = (a0 + a1, a0 - a1, a2 + a3, a2 - a3);
            let (b4, b5, b6, b7) = (a4 + a5, a4 - a5, a6 + a7, a6 - a7);
            let (c0, c1, c2, c3) = (b0 + b2, b1 + b3, b0 - b2, b1 - b3);
            let (c4, c5, c6, c7) = (b4 + b6, b5 + b7, b4 - b6, b5 - b7);
            g[0] = c0 + c4;
            g[1] = c1 + c5;
            g[2] = c2 + c6;
            g[3] = c3 + c7;
            g[4] = c0 - c4;
            g[5] = c1 - c5;
            g[6] = c2 - c6;
            g[7] = c3 - c7;
        }
        h = 8;
    }
    while 4 * h <= n {
        for quad in x.chunks_exact_mut(4 * h) {
            let (a, rest) = quad.split_at_mut(h);
            let (b, rest) = rest.split_at_mut(h);
            let (c, d) = rest.split_at_mut(h);
            for i in 0..h {
                (a[i], b[i], c[i], d[i]) = butterfly4(a[i], b[i], c[i], d[i]);
            }
        }
        h *= 4;
    }
    if 2 * h <= n {
        let (a, b) = x.split_at_mut(h);
        for i in 0..h {
            (a[i], b[i]) = (a[i] + b[i], a[i] - b[i]);
        }
    }
}

multiversion! {
    fn transform_rows<T: Butterfly>(x: &mut [T], row_len: usize) {
        for row in x.chunks_exact_mut(row_len) {
            transform_stages(row, 1);
        }
    }
}

multiversion! {
    /// Length-`rows` transforms down columns `first..last` of the `rows × BLOCK` matrix at
    /// `base`, a panel of `PANEL` columns at a time: the panel is copied into `scratch`
    /// (contiguous, so in L1 and free of the cache-set conflicts of a power-of-two stride),
    /// transformed there, and copied back.
    fn transform_columns<T: Butterfly>(base: SendPtr<T>, rows: usize, first: usize, last: usize, scratch: &mut Vec<T>) {
        let mut col = first;
        while col < last {
            let width = PANEL.min(last - col);
            scratch.clear();
            for r in 0..rows {
                // SAFETY: the caller owns columns first..last of every row exclusively.
                let row = unsafe { std::slice::from_raw_parts(base.0.add(r * BLOCK + col), width) };
                scratch.extend_from_slice(row);
            }
            transform_stages(scratch, width);
            for (r, chunk) in scratch.chunks_exact(width).enumerate() {
                let row = unsafe { std::slice::from_raw_parts_mut(base.0.add(r * BLOCK + col), width) };
                row.copy_from_slice(chunk);
            }
            col += width;
        }
    }
}

/// A raw pointer that may cross threads; each task touches a disjoint set of elements.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// `x ← H·x` (unnormalized, Sylvester order). Panics unless `x.len()` is a power of two;
/// callers validate lengths first (see [`check_power_of_two`]).
pub fn fwht_in_place<T: Butterfly>(x: &mut [T]) {
    crate::interrupt::uninterrupted(fwht_in_place_checked(x, &crate::interrupt::never));
}

/// [`fwht_in_place`], calling `check` between parallel tasks (each a few milliseconds of
/// work at most) and stopping with its error; `x` is then left partly transformed.
pub fn fwht_in_place_checked<T, C>(x: &mut [T], check: &C) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    let n = x.len();
    assert!(n.is_power_of_two(), "fwht length {n} is not a power of two");
    if n <= BLOCK {
        transform_rows(x, n);
        return Ok(());
    }
    let rows = n / BLOCK;
    let parallel = n >= PARALLEL_MIN;
    if parallel {
        let rows_per_task = 2;
        x.par_chunks_mut(rows_per_task * BLOCK)
            .try_for_each(|chunk| {
                check()?;
                transform_rows(chunk, BLOCK);
                Ok(())
            })?;
    } else {
        transform_rows(x, BLOCK);
    }
    let base = SendPtr(x.as_mut_ptr());
    if parallel {
        // A task's columns hold 4·PANEL·n/BLOCK entries: 2^22 (32 MiB of f64) at n = 2^28.
        let cols_per_task = 4 * PANEL;
        (0..BLOCK / cols_per_task)
            .into_par_iter()
            .try_for_each_init(Vec::new, |scratch, t| {
                check()?;
                let first = t * cols_per_task;
                transform_columns(base, rows, first, first + cols_per_task, scratch);
                Ok(())
            })
    } else {
        transform_columns(base, rows, 0, BLOCK, &mut Vec::new());
        Ok(())
    }
}

/// The error for a length that is not `2^j`, or `None`.
pub fn check_power_of_two(n: usize) -> Option<crate::error::Error> {
    (!n.is_power_of_two()).then(|| {
        crate::error::Error::Value(format!(
            "the Walsh–Hadamard transform needs a length 2^j (j ≥ 0), got {n}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense_product(x: &[f64]) -> Vec<f64> {
        let n = x.len() as u64;
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|c| sylvester_entry(r, c) as f64 * x[c as usize])
                    .sum()
            })
            .collect()
    }

    fn test_vector(n: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 7919) % 113) as f64 - 56.0).collect()
    }

    #[test]
    fn matches_the_sylvester_matrix_up_to_4096() {
        for j in 0..=12 {
            let n = 1usize << j;
            let x = test_vector(n);
            let mut y = x.clone();
            fwht_in_place(&mut y);
            // Integer-valued inputs: every partial sum is exact in f64.
            assert_eq!(y, dense_product(&x), "n = {n}");
        }
    }

    #[test]
    fn two_pass_layout_matches_the_integer_transform_at_large_sizes() {
        for j in [13, 16, 17, 20] {
            let n = 1usize << j;
            let x = test_vector(n);
            let mut ints: Vec<i64> = x.iter().map(|&v| v as i64).collect();
            let mut floats = x.clone();
            fwht_in_place(&mut floats);
            fwht_in_place(&mut ints);
            assert!(
                floats.iter().zip(&ints).all(|(&f, &i)| f == i as f64),
                "n = {n}"
            );
            // H·H = n·I.
            fwht_in_place(&mut ints);
            assert!(ints.iter().zip(&x).all(|(&i, &v)| i == v as i64 * n as i64));
            // Spot-check entries against the definition.
            for r in [0usize, 1, n / 2 + 3, n - 1] {
                let direct: f64 = (0..n)
                    .map(|c| sylvester_entry(r as u64, c as u64) as f64 * x[c])
                    .sum();
                assert_eq!(floats[r], direct);
            }
        }
    }

    #[test]
    fn sylvester_entries_follow_the_convention() {
        assert_eq!(sylvester_entry(0, 12345), 1);
        assert_eq!(sylvester_entry(3, 1), -1);
        assert_eq!(sylvester_entry(3, 3), 1);
        assert_eq!(sylvester_entry(5, 7), 1);
        assert_eq!(sylvester_entry(5, 4), -1);
    }

    #[test]
    fn rejects_lengths_that_are_not_powers_of_two() {
        assert!(check_power_of_two(0).is_some());
        assert!(check_power_of_two(12).is_some());
        assert!(check_power_of_two(1).is_none());
    }
}
