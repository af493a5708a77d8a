//! The exact L2 sensitivity of a query matrix: Δ2 = max_{v, v'} ‖a_v − a_v'‖, the diameter of
//! its columns (Bassily, AISTATS 2019, Algorithm 1, and the sensitivity erratum on the docs
//! page Mechanisms › Linear queries: two inputs differ by up to 2r, not r, so the Gaussian
//! protocol must be calibrated to Δ2).
//!
//! # Accuracy
//! Every pair's squared distance is summed from its coordinate differences,
//! `Σ_k (a_v[k] − a_v'[k])²`, never through `‖a‖² + ‖b‖² − 2⟨a, b⟩`, whose cancellation loses
//! all relative accuracy for nearly equal columns. Each difference and square is one rounding
//! and the sum of d non-negative terms adds at most (d − 1) more, so the returned Δ2 is within
//! a relative `(d/2 + 2)·2⁻⁵³` of the exact diameter (and exact 0 when all columns are equal).
//!
//! # Cost and determinism
//! O(J² d) time, no allocation: the rows `v` of the upper triangle are spread over rayon's
//! pool and each checks [`crate::interrupt`]. The maximum is reduced with a total order (the
//! largest squared distance, then the lexicographically first pair), so the pair and the value
//! are the same on any number of threads.

use super::check_columns;
use crate::error::Result;
use rayon::prelude::*;

/// The diameter of the columns and a pair `(v, v')`, `v < v'`, that attains it (`(0, 0)` when
/// J = 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diameter {
    pub value: f64,
    pub pair: (usize, usize),
}

/// `Σ_k (a[k] − b[k])²` with four independent accumulators (vectorizable; a fixed order, so
/// the same bits on every run).
#[inline]
fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (a4.remainder(), b4.remainder());
    for (x, y) in a4.zip(b4) {
        for t in 0..4 {
            let diff = x[t] - y[t];
            lanes[t] += diff * diff;
        }
    }
    let mut total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (x, y) in ra.iter().zip(rb) {
        let diff = x - y;
        total += diff * diff;
    }
    total
}

/// The better of two candidates: larger squared distance, then the earlier pair.
fn better(a: (f64, usize, usize), b: (f64, usize, usize)) -> (f64, usize, usize) {
    if a.0 > b.0 || (a.0 == b.0 && (a.1, a.2) <= (b.1, b.2)) {
        a
    } else {
        b
    }
}

/// The exact diameter of the J columns (row-major J × d `columns`), see the module doc.
pub fn diameter(columns: &[f64], j: usize, d: usize) -> Result<Diameter> {
    check_columns(columns, j, d)?;
    let row = |v: usize| -> Result<(f64, usize, usize)> {
        crate::interrupt::check()?;
        let a = &columns[v * d..(v + 1) * d];
        let mut best = (0.0, v, v);
        for w in v + 1..j {
            let candidate = (squared_distance(a, &columns[w * d..(w + 1) * d]), v, w);
            best = better(best, candidate);
        }
        Ok(best)
    };
    let work = (j as u128)
        .saturating_mul(j as u128)
        .saturating_mul(d as u128);
    let (squared, v, w) = if work < crate::parallel::PARALLEL_WORK as u128 {
        (0..j)
            .map(row)
            .try_fold((0.0, 0, 0), |acc, r| r.map(|r| better(acc, r)))?
    } else {
        (0..j)
            .into_par_iter()
            .map(row)
            .try_reduce(|| (0.0, 0, 0), |a, b| Ok(better(a, b)))?
    };
    // A zero diameter is reported on the pair (0, 0), whatever the order of the reduction.
    let pair = if squared > 0.0 { (v, w) } else { (0, 0) };
    Ok(Diameter {
        value: squared.sqrt(),
        pair,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(columns: &[f64], j: usize, d: usize) -> f64 {
        let mut best = 0.0f64;
        for v in 0..j {
            for w in 0..j {
                let s: f64 = (0..d)
                    .map(|k| (columns[v * d + k] - columns[w * d + k]).powi(2))
                    .sum();
                best = best.max(s.sqrt());
            }
        }
        best
    }

    #[test]
    fn matches_brute_force_and_finds_antipodes() {
        let (j, d) = (37, 5);
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        };
        let mut columns: Vec<f64> = (0..j * d).map(|_| next()).collect();
        let got = diameter(&columns, j, d).unwrap();
        assert!((got.value - brute(&columns, j, d)).abs() <= 1e-15 * got.value);
        // Make columns 3 and 20 antipodal and the longest: Δ2 = 2r exactly.
        for k in 0..d {
            columns[3 * d + k] = if k == 0 { 10.0 } else { 0.0 };
            columns[20 * d + k] = if k == 0 { -10.0 } else { 0.0 };
        }
        let got = diameter(&columns, j, d).unwrap();
        assert_eq!(got.value, 20.0);
        assert_eq!(got.pair, (3, 20));
    }

    #[test]
    fn near_duplicates_and_single_column() {
        // Two columns 1e-12 apart at norm 1e6: the Gram form would return 0 or garbage.
        let columns = [1e6, 2e6, 1e6 + 1e-9 * 1e3, 2e6];
        let got = diameter(&columns, 2, 2).unwrap();
        let exact = (1e6 + 1e-9 * 1e3) - 1e6;
        assert_eq!(got.value, exact);
        let one = diameter(&[1.0, 2.0, 3.0], 1, 3).unwrap();
        assert_eq!(
            one,
            Diameter {
                value: 0.0,
                pair: (0, 0)
            }
        );
        assert!(diameter(&[], 0, 3).is_err());
        assert!(diameter(&[f64::NAN], 1, 1).is_err());
    }

    #[test]
    fn same_result_on_any_pool() {
        let (j, d) = (300, 8);
        let columns: Vec<f64> = (0..j * d)
            .map(|i| ((i * 7919) % 1000) as f64 / 1000.0)
            .collect();
        let reference = diameter(&columns, j, d).unwrap();
        for threads in [1, 2, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            assert_eq!(
                pool.install(|| diameter(&columns, j, d).unwrap()),
                reference
            );
        }
    }
}
