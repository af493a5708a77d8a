//! The rejection-sampling protocol for linear queries (Bassily, "Linear Queries Estimation with
//! Local Differential Privacy", AISTATS 2019, Algorithms 3 and 4), with the clipped acceptance
//! probability of the rejection-sampling erratum (docs page Mechanisms › Linear queries).
//!
//! A user holding v draws `y ~ N(0, σ² I_d)` and computes the log density ratio
//! `t = ln(f_{a_v}(y) / f_0(y)) = (⟨a_v, y⟩ − ‖a_v‖²/2) / σ²` (so the paper's η is `½ e^t`).
//!
//! * [`Acceptance::Clipped`] (the fix, pure ε-LDP): accept with probability
//!   `½ exp(clip(t, −ε/4, ε/4))`, i.e. `clip(η, e^{−ε/4}/2, e^{ε/4}/2)`.
//! * [`Acceptance::PaperFaithful`] (Algorithm 3 as printed, NOT private: an output outside
//!   one input's Good set has probability 0 under it): accept with probability `η` when
//!   `|t| ≤ ε/4`, never otherwise.
//!
//! An accepted user sends y; a rejected one sends ⊥, written here as a row of NaN.
//!
//! # Randomness
//! Users are cut into chunks of [`super::gaussian::REPORT_CHUNK`]; chunk `c` draws from
//! `rng::stream(key, c)`, per user: d `StandardNormal` variates (y = σ·z), then one 64-bit
//! word `w`, accepted when `(w >> 11)·2⁻⁵³ < α` (a uniform on the 2⁵³ dyadic points of [0, 1),
//! so P(accept) = α up to 2⁻⁵³). Bit-identical on any number of threads.

use super::{check_columns, check_sigma, check_values, fill_reports};
use crate::error::{Error, Result};
use crate::rng::Key;
use rand_core::Rng;
use rand_distr::{Distribution, StandardNormal};

/// The acceptance rule of Algorithm 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acceptance {
    /// `clip(η, e^{−ε/4}/2, e^{ε/4}/2)`: pure ε-LDP (this project's fix).
    Clipped,
    /// `η` inside the Good set, 0 outside: the paper as printed (not private, biased).
    PaperFaithful,
}

/// The acceptance probability for a log density ratio `t` at privacy `epsilon`.
#[inline]
pub fn acceptance_probability(t: f64, epsilon: f64, rule: Acceptance) -> f64 {
    let bound = epsilon / 4.0;
    match rule {
        Acceptance::Clipped => 0.5 * t.clamp(-bound, bound).exp(),
        Acceptance::PaperFaithful => {
            if (-bound..=bound).contains(&t) {
                0.5 * t.exp()
            } else {
                0.0
            }
        }
    }
}

/// `α_v(y)` for every output `y` (row-major m × d `outputs`) and value v: row-major m × J.
/// The same arithmetic as [`privatize`] (its acceptance test compares a uniform with these
/// numbers), for exact privacy checks on a grid of outputs.
pub fn acceptance_matrix(
    columns: &[f64],
    j: usize,
    d: usize,
    sigma: f64,
    epsilon: f64,
    rule: Acceptance,
    outputs: &[f64],
) -> Result<Vec<f64>> {
    check_columns(columns, j, d)?;
    check_parameters(sigma, epsilon)?;
    if !outputs.len().is_multiple_of(d) {
        return Err(Error::Value(format!(
            "outputs must be rows of d = {d} numbers"
        )));
    }
    let m = outputs.len() / d;
    let half_norms = half_squared_norms(columns, j, d)?;
    let mut out = crate::memory::zeroed_vec::<f64>(m.saturating_mul(j), "the acceptance matrix")?;
    let inv_var = 1.0 / (sigma * sigma);
    for (row, y) in out.chunks_exact_mut(j.max(1)).zip(outputs.chunks_exact(d)) {
        crate::interrupt::check()?;
        for (v, alpha) in row.iter_mut().enumerate() {
            let t = log_ratio(&columns[v * d..(v + 1) * d], half_norms[v], y, inv_var);
            *alpha = acceptance_probability(t, epsilon, rule);
        }
    }
    Ok(out)
}

/// `t = (⟨a, y⟩ − ‖a‖²/2)/σ²` given `‖a‖²/2` and `1/σ²`.
#[inline]
fn log_ratio(column: &[f64], half_norm: f64, y: &[f64], inv_var: f64) -> f64 {
    let dot: f64 = column.iter().zip(y).map(|(a, y)| a * y).sum();
    (dot - half_norm) * inv_var
}

/// `‖a_v‖²/2` for every column (J floats, memory guard first).
fn half_squared_norms(columns: &[f64], j: usize, d: usize) -> Result<Vec<f64>> {
    let mut half_norms = crate::memory::zeroed_vec::<f64>(j, "the column norms")?;
    for (h, column) in half_norms.iter_mut().zip(columns.chunks_exact(d)) {
        *h = 0.5 * column.iter().map(|x| x * x).sum::<f64>();
    }
    Ok(half_norms)
}

/// σ > 0 finite, and 0 < ε < 4 ln 2 (so that e^{ε/4}/2 is a probability).
fn check_parameters(sigma: f64, epsilon: f64) -> Result<()> {
    check_sigma(sigma)?;
    if sigma == 0.0 {
        return Err(Error::Value(
            "sigma must be > 0 for rejection sampling".into(),
        ));
    }
    if !(epsilon > 0.0 && epsilon < 4.0 * std::f64::consts::LN_2) {
        return Err(Error::Value(format!(
            "epsilon must lie in (0, 4 ln 2) for rejection sampling, got {epsilon}"
        )));
    }
    Ok(())
}

/// Fill `out` (row-major n × d) with each user's message: y when accepted, NaN when ⊥.
#[allow(clippy::too_many_arguments)]
pub fn privatize(
    columns: &[f64],
    j: usize,
    d: usize,
    sigma: f64,
    epsilon: f64,
    rule: Acceptance,
    key: &Key,
    values: &[u32],
    out: &mut [f64],
) -> Result<()> {
    check_columns(columns, j, d)?;
    check_sigma(sigma)?;
    if sigma == 0.0 {
        return Err(Error::Value(
            "sigma must be > 0 for rejection sampling".into(),
        ));
    }
    // e^{ε/4}/2 must be a probability.
    if !(epsilon > 0.0 && epsilon < 4.0 * std::f64::consts::LN_2) {
        return Err(Error::Value(format!(
            "epsilon must lie in (0, 4 ln 2) for rejection sampling, got {epsilon}"
        )));
    }
    check_values(values, j)?;
    let half_norms = half_squared_norms(columns, j, d)?;
    let inv_var = 1.0 / (sigma * sigma);
    fill_reports(columns, d, key, values, out, |rng, v, column, row| {
        for y in row.iter_mut() {
            let z: f64 = StandardNormal.sample(rng);
            *y = sigma * z;
        }
        let t = log_ratio(column, half_norms[v], row, inv_var);
        let alpha = acceptance_probability(t, epsilon, rule);
        let uniform = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        if uniform >= alpha {
            row.fill(f64::NAN);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::gaussian::mean;
    use crate::rng::key_from_u64;

    #[test]
    fn acceptance_stays_within_its_bounds() {
        let eps = 1.0f64;
        let (lo, hi) = (0.5 * (-eps / 4.0).exp(), 0.5 * (eps / 4.0).exp());
        for i in -400..=400 {
            let t = i as f64 / 100.0;
            let a = acceptance_probability(t, eps, Acceptance::Clipped);
            assert!((lo..=hi).contains(&a));
            let p = acceptance_probability(t, eps, Acceptance::PaperFaithful);
            assert!(p == 0.0 || (lo..=hi).contains(&p));
        }
    }

    #[test]
    fn accepted_mean_is_the_column_and_pool_independent() {
        // σ small relative to ‖a‖ would be biased; this σ/‖a‖ = 20 makes the Good-set tail
        // negligible (≈ 1e-8 at ε = 1), so the accepted mean is a.
        let (d, n) = (2, 400_000);
        let columns = [1.0, 0.0, 0.0, -1.0];
        let values: Vec<u32> = vec![0; n];
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut out = vec![0.0; n * d];
                privatize(
                    &columns,
                    2,
                    d,
                    20.0,
                    1.0,
                    Acceptance::Clipped,
                    &key_from_u64(9),
                    &values,
                    &mut out,
                )
                .unwrap();
                out
            })
        };
        let out = run(1);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&run(2)), bits(&out));
        let (m, accepted) = mean(&out, d, true).unwrap();
        let rate = accepted as f64 / n as f64;
        assert!((rate - 0.5).abs() < 0.01, "acceptance rate {rate}");
        // Standard error of the accepted mean: σ/√n̂ ≈ 0.045; 5 of them.
        let se = 20.0 / (accepted as f64).sqrt();
        assert!(
            (m[0] - 1.0).abs() < 5.0 * se && m[1].abs() < 5.0 * se,
            "{m:?}"
        );
    }

    #[test]
    fn refuses_bad_parameters() {
        let mut out = vec![0.0; 2];
        let key = key_from_u64(1);
        for (sigma, eps) in [(0.0, 1.0), (1.0, 0.0), (1.0, 3.0), (f64::NAN, 1.0)] {
            assert!(privatize(
                &[1.0, 2.0],
                2,
                1,
                sigma,
                eps,
                Acceptance::Clipped,
                &key,
                &[0, 1],
                &mut out
            )
            .is_err());
        }
    }
}
