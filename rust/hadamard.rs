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
//! Butterflies are radix-4 (two stages per pass over the data).

use crate::simd::multiversion;
use rayon::prelude::*;
use std::ops::{Add, Sub};

/// Elements the transform works on: floats, and exact integers for count decoding.
pub trait Butterfly: Copy + Send + Sync + Add<Output = Self> + Sub<Output = Self> {}
impl Butterfly for f64 {}
impl Butterfly for i64 {}

/// Row length of the two-pass decomposition: 2^11 f64 = 16 KiB.
const BLOCK: usize = 1 << 11;
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

/// In-place transform of a contiguous block whose length is a power of two.
#[inline(always)]
fn transform_contiguous<T: Butterfly>(x: &mut [T]) {
    let n = x.len();
    let mut h = 1;
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

/// Length-`rows` transform down `width` adjacent columns starting at `base`, rows `stride`
/// apart.
///
/// # Safety
/// `base + r·stride + w` must be valid and exclusively ours for `r < rows`, `w < width`.
#[inline(always)]
unsafe fn transform_panel<T: Butterfly>(base: *mut T, rows: usize, stride: usize, width: usize) {
    let row = |r: usize| unsafe { std::slice::from_raw_parts_mut(base.add(r * stride), width) };
    let mut h = 1;
    while 4 * h <= rows {
        for first in (0..rows).step_by(4 * h) {
            for i in first..first + h {
                let (a, b, c, d) = (row(i), row(i + h), row(i + 2 * h), row(i + 3 * h));
                for w in 0..width {
                    (a[w], b[w], c[w], d[w]) = butterfly4(a[w], b[w], c[w], d[w]);
                }
            }
        }
        h *= 4;
    }
    if 2 * h <= rows {
        for i in 0..h {
            let (a, b) = (row(i), row(i + h));
            for w in 0..width {
                (a[w], b[w]) = (a[w] + b[w], a[w] - b[w]);
            }
        }
    }
}

multiversion! {
    fn transform_rows<T: Butterfly>(x: &mut [T], row_len: usize) {
        for row in x.chunks_exact_mut(row_len) {
            transform_contiguous(row);
        }
    }
}

multiversion! {
    fn transform_panels<T: Butterfly>(base: SendPtr<T>, rows: usize, stride: usize, first: usize, last: usize) {
        let mut col = first;
        while col < last {
            let width = PANEL.min(last - col);
            // SAFETY: the caller hands each call a disjoint column range of a live buffer.
            unsafe { transform_panel(base.0.add(col), rows, stride, width) };
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
    let n = x.len();
    assert!(n.is_power_of_two(), "fwht length {n} is not a power of two");
    if n <= BLOCK {
        transform_rows(x, n);
        return;
    }
    let rows = n / BLOCK;
    let parallel = n >= PARALLEL_MIN;
    if parallel {
        let rows_per_task = (PARALLEL_MIN / BLOCK).max(1);
        x.par_chunks_mut(rows_per_task * BLOCK)
            .for_each(|chunk| transform_rows(chunk, BLOCK));
    } else {
        transform_rows(x, BLOCK);
    }
    let base = SendPtr(x.as_mut_ptr());
    if parallel {
        let cols_per_task = 4 * PANEL;
        (0..BLOCK / cols_per_task).into_par_iter().for_each(|t| {
            let first = t * cols_per_task;
            transform_panels(base, rows, BLOCK, first, first + cols_per_task);
        });
    } else {
        transform_panels(base, rows, BLOCK, 0, BLOCK);
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
