//! The Gaussian protocol for linear queries (Bassily, "Linear Queries Estimation with Local
//! Differential Privacy", AISTATS 2019, Algorithms 1 and 2):
//! user i sends `a_{v_i} + z_i`, `z_i ~ N(0, σ² I_d)`; the server averages the reports.
//!
//! σ comes from the caller (`ldpdist.linear.calibration`: the analytic or classic Gaussian
//! mechanism at the exact sensitivity Δ2: the sensitivity erratum on the docs page
//! Mechanisms › Linear queries).
//!
//! # Randomness
//! Reports are cut into chunks of [`REPORT_CHUNK`] users; chunk `c` draws from
//! `rng::stream(key, c)`, user by user, coordinate by coordinate, one
//! `rand_distr::StandardNormal` (ziggurat) variate per coordinate. Chunk boundaries depend only
//! on n, so a seeded result is bit-identical on any number of threads.
//!
//! # The mean
//! [`mean`] sums fixed blocks of [`MEAN_BLOCK`] rows (one pass, d accumulators each, in
//! parallel) and adds the block sums in block order: the same bits on any number of threads,
//! and blocked summation keeps the rounding error at O((MEAN_BLOCK + n / MEAN_BLOCK)·2⁻⁵³)
//! relative rather than O(n·2⁻⁵³). Non-finite reports are refused by the same pass.

use super::{check_columns, check_sigma, check_values, fill_reports};
use crate::error::{Error, Result};
use crate::rng::Key;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

/// Users per random stream. Fixed: part of the reproducibility contract.
pub const REPORT_CHUNK: usize = 1 << 14;

/// Rows per block of the server's mean. Fixed: the summation order depends on it.
pub const MEAN_BLOCK: usize = 1 << 12;

/// Fill `out` (row-major n × d, n = `values.len()`) with `a_{v_i} + σ·z_i`.
pub fn privatize(
    columns: &[f64],
    j: usize,
    d: usize,
    sigma: f64,
    key: &Key,
    values: &[u32],
    out: &mut [f64],
) -> Result<()> {
    check_columns(columns, j, d)?;
    check_sigma(sigma)?;
    check_values(values, j)?;
    fill_reports(columns, d, key, values, out, |rng, _, column, row| {
        for (y, &a) in row.iter_mut().zip(column) {
            let z: f64 = StandardNormal.sample(rng);
            *y = a + sigma * z;
        }
    })
}

/// The mean of reports (row-major n × d) and the number of rows it averages.
///
/// With `skip_bottom`, rows whose entries are all NaN are the ⊥ message of the
/// rejection-sampling protocol and are left out (the count is n̂); a row with some but not all
/// entries NaN is malformed. Any other non-finite entry is refused, naming its row. The mean of
/// zero rows is an error (nothing to estimate from).
pub fn mean(reports: &[f64], d: usize, skip_bottom: bool) -> Result<(Vec<f64>, u64)> {
    if d == 0 || !reports.len().is_multiple_of(d) {
        return Err(Error::Value(format!(
            "reports must be rows of d = {d} numbers; got {} numbers",
            reports.len()
        )));
    }
    let block_sum = |(b, block): (usize, &[f64])| -> Result<(Vec<f64>, u64)> {
        crate::interrupt::check()?;
        let mut sums = vec![0.0f64; d];
        let mut count = 0u64;
        for row in block.chunks_exact(d) {
            // A ⊥ row is all NaN; testing its first entry keeps the common case to one compare.
            if skip_bottom && row[0].is_nan() && row.iter().all(|x| x.is_nan()) {
                continue;
            }
            for (s, &x) in sums.iter_mut().zip(row) {
                *s += x;
            }
            count += 1;
        }
        if sums.iter().all(|s| s.is_finite()) {
            return Ok((sums, count));
        }
        // Locate the offending row for the message (the slow path runs only on bad input).
        let first = b * MEAN_BLOCK;
        for (i, row) in block.chunks_exact(d).enumerate() {
            let all_nan = row.iter().all(|x| x.is_nan());
            if skip_bottom && all_nan {
                continue;
            }
            if let Some(k) = row.iter().position(|x| !x.is_finite()) {
                let why = if skip_bottom && row.iter().any(|x| x.is_nan()) {
                    " (a ⊥ report is a row of NaN only)"
                } else {
                    ""
                };
                return Err(Error::Value(format!(
                    "reports must be finite: reports[{}, {k}] is {}{why}",
                    first + i,
                    row[k]
                )));
            }
        }
        Err(Error::Value(format!(
            "the sum of reports {first}..{} overflows double precision",
            first + block.len() / d
        )))
    };
    // Block sums: n/MEAN_BLOCK · d floats, a 1/MEAN_BLOCK fraction of the input.
    let blocks = reports.len() / d / MEAN_BLOCK + 1;
    crate::memory::check_fits(blocks.saturating_mul(d), 8, "the block sums of the mean")?;
    let partial: Vec<(Vec<f64>, u64)> = reports
        .par_chunks(MEAN_BLOCK * d)
        .enumerate()
        .map(block_sum)
        .collect::<Result<_>>()?;
    let mut total = vec![0.0f64; d];
    let mut count = 0u64;
    for (sums, c) in &partial {
        for (t, s) in total.iter_mut().zip(sums) {
            *t += s;
        }
        count += c;
    }
    if count == 0 {
        return Err(Error::Value(if skip_bottom {
            "no accepted report (every row is ⊥): nothing to estimate from".into()
        } else {
            "no reports: the mean of zero reports is undefined".into()
        }));
    }
    if let Some(k) = total.iter().position(|t| !t.is_finite()) {
        return Err(Error::Value(format!(
            "the sum of the reports overflows double precision in coordinate {k}"
        )));
    }
    let scale = count as f64;
    Ok((total.into_iter().map(|t| t / scale).collect(), count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::key_from_u64;

    #[test]
    fn reports_have_the_law_of_a_plus_noise() {
        let (j, d, n, sigma) = (3, 4, 200_000, 2.5);
        let columns: Vec<f64> = (0..j * d).map(|i| i as f64 - 5.0).collect();
        let values = vec![2u32; n];
        let mut out = vec![0.0; n * d];
        privatize(&columns, j, d, sigma, &key_from_u64(7), &values, &mut out).unwrap();
        let (m, count) = mean(&out, d, false).unwrap();
        assert_eq!(count, n as u64);
        for k in 0..d {
            // Standard error σ/√n ≈ 0.0056: 5 standard errors.
            assert!((m[k] - columns[2 * d + k]).abs() < 5.0 * sigma / (n as f64).sqrt());
            let var: f64 = out
                .chunks_exact(d)
                .map(|r| (r[k] - columns[2 * d + k]).powi(2))
                .sum::<f64>()
                / n as f64;
            // Var of the sample variance ≈ 2σ⁴/n: 5 standard errors.
            assert!((var - sigma * sigma).abs() < 5.0 * sigma * sigma * (2.0 / n as f64).sqrt());
        }
    }

    #[test]
    fn same_bits_on_any_pool() {
        let (j, d, n) = (5, 3, 3 * REPORT_CHUNK + 17);
        let columns: Vec<f64> = (0..j * d).map(|i| i as f64).collect();
        let values: Vec<u32> = (0..n).map(|i| (i % j) as u32).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut out = vec![0.0; n * d];
                privatize(&columns, j, d, 1.5, &key_from_u64(3), &values, &mut out).unwrap();
                let m = mean(&out, d, false).unwrap();
                (out, m)
            })
        };
        let reference = run(1);
        for threads in [2, 4] {
            assert!(run(threads) == reference);
        }
    }

    #[test]
    fn refuses_bad_input() {
        let columns = [1.0, 2.0];
        let mut out = vec![0.0; 2];
        let err = privatize(&columns, 2, 1, 1.0, &key_from_u64(1), &[0, 2], &mut out);
        assert!(matches!(err, Err(Error::Value(m)) if m.contains("values[1] = 2")));
        assert!(privatize(
            &columns,
            2,
            1,
            f64::NAN,
            &key_from_u64(1),
            &[0, 1],
            &mut out
        )
        .is_err());
        let err = mean(&[1.0, 2.0, f64::INFINITY, 4.0], 2, false);
        assert!(matches!(err, Err(Error::Value(m)) if m.contains("reports[1, 0]")));
        let err = mean(&[1.0, f64::NAN, 3.0, 4.0], 2, true);
        assert!(matches!(err, Err(Error::Value(m)) if m.contains("reports[0, 1]")));
        assert_eq!(
            mean(&[f64::NAN, f64::NAN, 3.0, 4.0], 2, true).unwrap(),
            (vec![3.0, 4.0], 1)
        );
        assert!(mean(&[f64::NAN, f64::NAN], 2, true).is_err());
        assert!(mean(&[], 2, false).is_err());
    }
}
