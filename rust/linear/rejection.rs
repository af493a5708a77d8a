//! The rejection-sampling protocol for linear queries (Bassily, "Linear Queries Estimation with
//! Local Differential Privacy", AISTATS 2019, Algorithms 3 and 4), with the clipped acceptance
//! probability of the rejection-sampling erratum (docs page Mechanisms › Linear queries).
//!
//! A user holding v draws `y ~ N(0, σ² I_d)` and computes the log density ratio
//! `t = ln(f_{a_v}(y) / f_0(y)) = (⟨a_v, y⟩ − ‖a_v‖²/2) / σ²` (so the paper's η is `½ e^t`).
//! A [`Rule`] holds the clipping band `b` and the log acceptance scale `ln κ`:
//!
//! * [`Acceptance::Clipped`] (the fix, pure LDP): accept with probability
//!   `κ exp(clip(t, −b, b))`. Any κ ≤ e^{−b} keeps it a probability; the output densities
//!   `f_0(y) α_v(y)` of two users differ by at most e^{2b} whatever κ is. The paper's κ is ½
//!   (so `b < ln 2`); `ldpdist.linear.RejectionSamplingLinearQueries` uses κ = e^{−b}, the
//!   largest, which accepts with probability about e^{−b} and lets the band grow past ln 2.
//! * [`Acceptance::PaperFaithful`] (Algorithm 3 as printed, with κ = ½: NOT private, an
//!   output outside one input's Good set has probability 0 under it): accept with
//!   probability `κ e^t` when `|t| ≤ b`, never otherwise.
//!
//! An accepted user sends y; a rejected one sends ⊥, written here as a row of NaN.
//!
//! The band and the scale are given, not derived from ε: the Python layer calibrates them to
//! the exact privacy loss (`RejectionSamplingLinearQueries.realized_epsilon`).
//!
//! # Randomness
//! Users are cut into chunks of [`super::gaussian::REPORT_CHUNK`]; chunk `c` draws from
//! `rng::stream(key, c)`, per user: d `StandardNormal` variates (y = σ·z), then one 64-bit
//! word `w`, accepted when `(w >> 11)·2⁻⁵³ < α` (a uniform on the 2⁵³ dyadic points of [0, 1),
//! so P(accept) = α up to 2⁻⁵³; α = 1 always accepts). Bit-identical on any number of threads.

use super::{check_columns, check_sigma, check_values, fill_reports};
use crate::error::{Error, Result};
use crate::rng::Key;
use rand_core::Rng;
use rand_distr::{Distribution, StandardNormal};

/// The form of Algorithm 3's acceptance probability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acceptance {
    /// `κ exp(clip(t, −b, b))`: pure LDP, the output loss at most 2b (this project's fix).
    Clipped,
    /// `κ e^t` inside the Good set `|t| ≤ b`, 0 outside: the paper as printed (κ = ½, b = ε/4;
    /// not private, biased).
    PaperFaithful,
}

/// An acceptance rule: the clipping band `b`, the log scale `ln κ` and the form.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    band: f64,
    log_scale: f64,
    acceptance: Acceptance,
}

impl Rule {
    /// A rule with band `b > 0` and log scale `ln κ`, both finite, and `ln κ + b ≤ 0` so that
    /// the acceptance probability never exceeds 1 (κ = e^{−b}: `log_scale = -band`).
    pub fn new(band: f64, log_scale: f64, acceptance: Acceptance) -> Result<Rule> {
        if !(band.is_finite() && band > 0.0) {
            return Err(Error::Value(format!(
                "the clipping band must be finite and > 0, got {band}"
            )));
        }
        if !(log_scale.is_finite() && log_scale + band <= 0.0) {
            return Err(Error::Value(format!(
                "the acceptance scale must satisfy ln(scale) + band ≤ 0 (a probability ≤ 1), \
                 got ln(scale) = {log_scale}, band = {band}"
            )));
        }
        Ok(Rule {
            band,
            log_scale,
            acceptance,
        })
    }

    /// The paper's rule for the privacy parameter ε: band ε/4, κ = ½ (`ε < 4 ln 2`).
    pub fn paper(epsilon: f64, acceptance: Acceptance) -> Result<Rule> {
        Rule::new(epsilon / 4.0, -std::f64::consts::LN_2, acceptance)
    }

    /// The clipping band b.
    pub fn band(&self) -> f64 {
        self.band
    }

    /// ln κ.
    pub fn log_scale(&self) -> f64 {
        self.log_scale
    }

    /// The acceptance probability for a log density ratio `t`: `exp(clip(t, −b, b) + ln κ)`
    /// (clipped; with κ = e^{−b} it is exactly 1 for `t ≥ b`), or `exp(t + ln κ)` inside the
    /// Good set and 0 outside (paper-faithful).
    #[inline]
    pub fn probability(&self, t: f64) -> f64 {
        let b = self.band;
        match self.acceptance {
            Acceptance::Clipped => (t.clamp(-b, b) + self.log_scale).exp(),
            Acceptance::PaperFaithful => {
                if (-b..=b).contains(&t) {
                    (t + self.log_scale).exp()
                } else {
                    0.0
                }
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
    rule: &Rule,
    outputs: &[f64],
) -> Result<Vec<f64>> {
    check_columns(columns, j, d)?;
    check_positive_sigma(sigma)?;
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
            *alpha = rule.probability(t);
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

/// σ finite and > 0.
fn check_positive_sigma(sigma: f64) -> Result<()> {
    check_sigma(sigma)?;
    if sigma == 0.0 {
        return Err(Error::Value(
            "sigma must be > 0 for rejection sampling".into(),
        ));
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
    rule: &Rule,
    key: &Key,
    values: &[u32],
    out: &mut [f64],
) -> Result<()> {
    check_columns(columns, j, d)?;
    check_positive_sigma(sigma)?;
    check_values(values, j)?;
    let half_norms = half_squared_norms(columns, j, d)?;
    let inv_var = 1.0 / (sigma * sigma);
    fill_reports(columns, d, key, values, out, |rng, v, column, row| {
        for y in row.iter_mut() {
            let z: f64 = StandardNormal.sample(rng);
            *y = sigma * z;
        }
        let t = log_ratio(column, half_norms[v], row, inv_var);
        let alpha = rule.probability(t);
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
        let paper = Rule::paper(eps, Acceptance::Clipped).unwrap();
        let printed = Rule::paper(eps, Acceptance::PaperFaithful).unwrap();
        for i in -400..=400 {
            let t = i as f64 / 100.0;
            let a = paper.probability(t);
            assert!(
                (lo * (1.0 - 1e-15)..=hi * (1.0 + 1e-15)).contains(&a),
                "{t} {a}"
            );
            let p = printed.probability(t);
            assert!(p == 0.0 || (lo * (1.0 - 1e-15)..=hi * (1.0 + 1e-15)).contains(&p));
        }
    }

    #[test]
    fn the_largest_scale_accepts_with_probability_exp_of_clip_minus_band() {
        // κ = e^{−b}: α = exp(clip(t, −b, b) − b), in [e^{−2b}, 1], exactly 1 from t = b on
        // and e^{−2b} up to t = −b, for bands on both sides of ln 2 (the paper's ½ needs b < ln 2).
        for band in [0.1, 0.5, std::f64::consts::LN_2, 1.5, 2.0] {
            let rule = Rule::new(band, -band, Acceptance::Clipped).unwrap();
            let floor = (-2.0 * band).exp();
            let mut previous = 0.0;
            for i in -2000..=2000 {
                let t = i as f64 / 250.0;
                let alpha = rule.probability(t);
                let expected = (t.clamp(-band, band) - band).exp();
                assert!((alpha - expected).abs() <= 1e-15 * expected, "{band} {t}");
                assert!(
                    (floor * (1.0 - 1e-15)..=1.0).contains(&alpha),
                    "{band} {t} {alpha}"
                );
                assert!(alpha >= previous);
                previous = alpha;
                if t >= band {
                    assert_eq!(alpha, 1.0);
                }
                if t <= -band {
                    assert_eq!(alpha, (-band - band).exp());
                }
            }
        }
        // a scale above e^{−b} would exceed 1: refused, as are bad bands
        assert!(Rule::new(0.5, -0.49, Acceptance::Clipped).is_err());
        assert!(Rule::new(1.0, -std::f64::consts::LN_2, Acceptance::Clipped).is_err());
        for (band, log_scale) in [
            (0.0, -1.0),
            (-1.0, 0.0),
            (f64::NAN, -1.0),
            (1.0, f64::NAN),
            (f64::INFINITY, f64::NEG_INFINITY),
        ] {
            assert!(Rule::new(band, log_scale, Acceptance::Clipped).is_err());
        }
        assert!(Rule::paper(3.0, Acceptance::Clipped).is_err()); // ½ e^{3/4} > 1
    }

    #[test]
    fn accepted_mean_is_the_column_and_pool_independent() {
        // σ/‖a‖ = 20 makes the Good-set tail negligible (≈ 1e-8 at b = 0.5), so the accepted
        // mean is a, and with κ = e^{−b} the acceptance rate is e^{−b} to within that tail.
        let (d, n) = (2, 400_000);
        let columns = [1.0, 0.0, 0.0, -1.0];
        let values: Vec<u32> = vec![0; n];
        let band = 0.5f64;
        let rule = Rule::new(band, -band, Acceptance::Clipped).unwrap();
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
                    &rule,
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
        let p = (-band).exp();
        // binomial standard error √(p(1 − p)/n) ≈ 7.7e-4; 5 of them
        assert!(
            (rate - p).abs() < 5.0 * (p * (1.0 - p) / n as f64).sqrt(),
            "rate {rate}"
        );
        // Standard error of the accepted mean: σ/√n̂ ≈ 0.04; 5 of them.
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
        let rule = Rule::new(0.25, -0.25, Acceptance::Clipped).unwrap();
        for sigma in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(privatize(&[1.0, 2.0], 2, 1, sigma, &rule, &key, &[0, 1], &mut out).is_err());
            assert!(acceptance_matrix(&[1.0, 2.0], 2, 1, sigma, &rule, &[0.0]).is_err());
        }
        assert!(privatize(&[1.0, 2.0], 2, 1, 1.0, &rule, &key, &[0, 2], &mut out).is_err());
    }
}
