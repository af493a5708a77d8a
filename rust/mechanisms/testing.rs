//! Helpers shared by the mechanisms' unit tests: empirical channel rows, the exact moments of
//! the report histogram, and chi-square checks of a simulation's law.

use super::{aggregate, privatize, Estimator, IndexMechanism};
use crate::rng::{key_from_u64, Key};

/// Max |log Q(y|x) − log Q(y|x')| over a row-major channel matrix, and the max row-sum error.
pub fn channel_stats(q: &[f64], rows: usize) -> (f64, f64) {
    let cols = q.len() / rows;
    let mut worst = 0.0f64;
    let mut sum_err = 0.0f64;
    for x in 0..rows {
        let s: f64 = q[x * cols..(x + 1) * cols].iter().sum();
        sum_err = sum_err.max((s - 1.0).abs());
    }
    for y in 0..cols {
        let column = (0..rows).map(|x| q[x * cols + y]);
        let (lo, hi) = column.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
        worst = worst.max((hi / lo).ln());
    }
    (worst, sum_err)
}

/// Empirical report frequencies of `draws` privatizations of `x`.
pub fn empirical_row<M: IndexMechanism>(m: &M, x: u32, draws: usize, seed: u64) -> Vec<f64> {
    let values = vec![x; draws];
    let mut reports = vec![0u64; draws];
    privatize(m, &key_from_u64(seed), &values, &mut reports).unwrap();
    let mut counts = vec![0u64; m.output_size() as usize];
    aggregate(&reports, &mut counts, false).unwrap();
    counts.iter().map(|&c| c as f64 / draws as f64).collect()
}

/// Exact mean and covariance (row-major, S × S) of the report histogram of
/// `true_counts[x]` independent users of each value x, from the channel rows: a sum of
/// independent multinomials, `Σ_x n_x Q_x` and `Σ_x n_x (diag Q_x − Q_x Q_xᵀ)`.
pub fn histogram_moments<E: Estimator>(m: &E, true_counts: &[u64]) -> (Vec<f64>, Vec<f64>) {
    let size = m.channel_outputs() as usize;
    let (mut mean, mut cov) = (vec![0.0; size], vec![0.0; size * size]);
    let mut row = vec![0.0; size];
    for (x, &n) in true_counts.iter().enumerate() {
        let n = n as f64;
        m.channel_row(x as u64, &mut row);
        for y in 0..size {
            mean[y] += n * row[y];
            cov[y * size + y] += n * row[y];
            for z in 0..size {
                cov[y * size + z] -= n * row[y] * row[z];
            }
        }
    }
    (mean, cov)
}

/// `dᵀ C⁻¹ d` over the first `S − 1` coordinates (the last is fixed by the total), by a
/// Cholesky factorization of that block of the covariance `cov` (S × S, row-major).
pub fn mahalanobis(d: &[f64], cov: &[f64]) -> f64 {
    let size = d.len();
    let n = size - 1;
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut v = cov[i * size + j];
            for t in 0..j {
                v -= l[i * n + t] * l[j * n + t];
            }
            if i == j {
                assert!(v > 0.0, "the covariance is not positive definite");
                l[i * n + i] = v.sqrt();
            } else {
                l[i * n + j] = v / l[j * n + j];
            }
        }
    }
    // Solve L z = d: the statistic is |z|².
    let mut z = vec![0.0; n];
    for i in 0..n {
        let mut v = d[i];
        for t in 0..i {
            v -= l[i * n + t] * z[t];
        }
        z[i] = v / l[i * n + i];
    }
    z.iter().map(|v| v * v).sum()
}

/// `ln Γ(a)` (Lanczos, g = 7, 9 terms; relative error below 1e−13 for a > 0).
fn ln_gamma(a: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let a = a - 1.0;
    let t = a + 7.5;
    let series = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |s, (i, c)| s + c / (a + 1.0 + i as f64));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (a + 0.5) * t.ln() - t + series.ln()
}

/// `P(χ²_df > x)`: the regularized upper incomplete gamma `Q(df/2, x/2)` (series below
/// `a + 1`, continued fraction above; Numerical Recipes §6.2).
pub fn chi_square_tail(df: usize, x: f64) -> f64 {
    let (a, x) = (df as f64 / 2.0, x / 2.0);
    if x <= 0.0 {
        return 1.0;
    }
    let prefix = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term < sum * 1e-16 {
                break;
            }
        }
        1.0 - sum * prefix
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let (mut c, mut d) = (1.0 / tiny, 1.0 / b);
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            d = if d.abs() < tiny { tiny } else { d };
            c = b + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        prefix * h
    }
}

/// The critical value of χ²_df at level 0.1% (bisection on [`chi_square_tail`]).
pub fn chi_square_critical(df: usize) -> f64 {
    let (mut lo, mut hi) = (0.0, 10.0 * df as f64 + 100.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if chi_square_tail(df, mid) > 1e-3 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// `reps` simulations with keys `seed..seed + reps` follow the exact law of the report
/// histogram ([`histogram_moments`]): every total is n; per output, the mean within 5
/// standard errors and (where the variance is at least 10, so the sample variance is
/// near-normal) the sample variance within 6 of its standard errors `σ²·√(2/(reps − 1))`;
/// and the pooled deviation `Σ_r (counts_r − mean)`, of covariance `reps·C`, has a
/// Mahalanobis statistic below the 0.1% critical value of χ²_{S−1}.
pub fn assert_simulation_law<E: Estimator>(
    label: &str,
    m: &E,
    true_counts: &[u64],
    reps: u64,
    seed: u64,
) {
    let simulate = |key: &Key, c: &[u64]| m.simulate_counts(key, c).unwrap();
    assert_law_of(label, m, simulate, true_counts, reps, seed);
}

/// Each output's sample mean over `runs` histograms within 5 standard errors of `mean`,
/// and (when its variance is at least 10) its sample variance within 6 standard errors
/// of the exact one, the diagonal of `cov` (size × size).
pub fn assert_output_moments(label: &str, runs: &[Vec<u64>], mean: &[f64], cov: &[f64]) {
    let size = mean.len();
    let r = runs.len() as f64;
    for y in 0..size {
        let sample: Vec<f64> = runs.iter().map(|c| c[y] as f64).collect();
        let avg = sample.iter().sum::<f64>() / r;
        let var = sample.iter().map(|v| (v - avg) * (v - avg)).sum::<f64>() / (r - 1.0);
        let sigma2 = cov[y * size + y];
        let se = (sigma2 / r).sqrt();
        assert!(
            (avg - mean[y]).abs() <= 5.0 * se + 1e-9 * mean[y],
            "{label}: output {y} mean {avg} expected {} (se {se})",
            mean[y]
        );
        if sigma2 >= 10.0 {
            let tolerance = 6.0 * sigma2 * (2.0 / (r - 1.0)).sqrt();
            assert!(
                (var - sigma2).abs() <= tolerance,
                "{label}: output {y} variance {var} expected {sigma2}"
            );
        }
    }
}

/// [`assert_simulation_law`] for the simulation function `simulate` (e.g. one of a
/// mechanism's algorithms forced) of the channel of `m`.
pub fn assert_law_of<E: Estimator>(
    label: &str,
    m: &E,
    simulate: impl Fn(&Key, &[u64]) -> Vec<u64>,
    true_counts: &[u64],
    reps: u64,
    seed: u64,
) {
    let (mean, cov) = histogram_moments(m, true_counts);
    let size = mean.len();
    let n: u64 = true_counts.iter().sum();
    let runs: Vec<Vec<u64>> = (seed..seed + reps)
        .map(|s| simulate(&key_from_u64(s), true_counts))
        .collect();
    for run in &runs {
        assert_eq!(run.iter().sum::<u64>(), n, "{label}: total");
    }
    let r = reps as f64;
    assert_output_moments(label, &runs, &mean, &cov);
    let pooled: Vec<f64> = (0..size)
        .map(|y| runs.iter().map(|c| c[y] as f64 - mean[y]).sum())
        .collect();
    let scaled: Vec<f64> = cov.iter().map(|v| v * r).collect();
    let statistic = mahalanobis(&pooled, &scaled);
    let critical = chi_square_critical(size - 1);
    assert!(
        statistic < critical,
        "{label}: pooled chi-square {statistic} ≥ {critical} (df {})",
        size - 1
    );
}

/// Simulation against privatization in law: `reps` simulations and `reps` privatizations
/// (then aggregations) of the same users; the difference of the pooled histograms has
/// covariance `2·reps·C` ([`histogram_moments`]), and its Mahalanobis statistic must lie
/// below the 0.1% critical value of χ²_{S−1} (a two-sample chi-square with the exact
/// covariance of a sum of multinomials).
pub fn assert_simulate_matches_privatize_in_law<M: IndexMechanism + Estimator>(
    label: &str,
    m: &M,
    true_counts: &[u64],
    reps: u64,
    seed: u64,
) {
    let (_, cov) = histogram_moments(m, true_counts);
    let size = IndexMechanism::output_size(m) as usize;
    let values: Vec<u32> = true_counts
        .iter()
        .enumerate()
        .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
        .collect();
    let mut diff = vec![0.0; size];
    let mut reports = vec![0u64; values.len()];
    for s in seed..seed + reps {
        let simulated = m.simulate_counts(&key_from_u64(s), true_counts).unwrap();
        privatize(m, &key_from_u64(s + reps), &values, &mut reports).unwrap();
        let mut counts = vec![0u64; size];
        aggregate(&reports, &mut counts, false).unwrap();
        for y in 0..size {
            diff[y] += simulated[y] as f64 - counts[y] as f64;
        }
    }
    let scaled: Vec<f64> = cov.iter().map(|v| v * 2.0 * reps as f64).collect();
    let statistic = mahalanobis(&diff, &scaled);
    let critical = chi_square_critical(size - 1);
    assert!(
        statistic < critical,
        "{label}: simulate vs privatize chi-square {statistic} ≥ {critical} (df {})",
        size - 1
    );
}

#[test]
fn chi_square_critical_values_match_the_tables() {
    // P(χ²_df > c) = 0.001 (standard tables).
    for (df, c) in [
        (1usize, 10.828),
        (4, 18.467),
        (15, 37.697),
        (26, 54.052),
        (100, 149.449),
    ] {
        let got = chi_square_critical(df);
        assert!((got - c).abs() < 2e-3, "df {df}: {got} vs {c}");
    }
    assert!((chi_square_tail(2, 2.0 * 3.0) - (-3.0f64).exp()).abs() < 1e-12);
}

/// `Σ_x dist_x · Q(·|x)` from the channel rows one by one: the definition that
/// `expected_frequencies` must match.
pub fn expected_from_rows<E: Estimator>(m: &E, dist: &[f64]) -> Vec<f64> {
    let size = m.channel_outputs() as usize;
    let (mut row, mut total) = (vec![0.0; size], vec![0.0; size]);
    for (x, &p) in dist.iter().enumerate() {
        m.channel_row(x as u64, &mut row);
        total.iter_mut().zip(&row).for_each(|(t, q)| *t += p * q);
    }
    total
}

/// Pearson chi-square of observed frequencies against probabilities, for `draws` draws.
pub fn chi_square(freq: &[f64], probs: &[f64], draws: usize) -> f64 {
    freq.iter()
        .zip(probs)
        .filter(|(_, &p)| p > 0.0)
        .map(|(&f, &p)| {
            let (o, e) = (f * draws as f64, p * draws as f64);
            (o - e) * (o - e) / e
        })
        .sum()
}
