//! k-ary randomized response (Warner 1965; Kairouz, Oh & Viswanath 2014).
//!
//! Channel: `Q(x | x) = p = e^ε/(e^ε + k − 1)`, `Q(y | x) = q = (1 − p)/(k − 1)` for `y ≠ x`;
//! the report is one integer in `[0, k)`. Unbiased estimator from the report frequencies
//! `f_y = c_y / n`: `p̂_x = (f_x − q)/(p − q)`.
//!
//! Exact privacy: the sampler keeps x with probability exactly `p` (the binary value of the
//! float, `rng::BernoulliThreshold`) and otherwise draws uniformly among the k − 1 other
//! values (exact, `uniform_below`). `p` is the float value of `e^ε/(e^ε + k − 1)` rounded down
//! by 8 ulps, below the real number, so the realized ratio `p(k − 1)/(1 − p)` never exceeds
//! `e^ε` (p ↦ p/(1 − p) is increasing). The estimator uses the same `p`, `q`, so it is exactly
//! unbiased for the channel actually used.

use super::{check_domain, check_epsilon, IndexMechanism, SymmetricEstimator};
use crate::error::Result;
use crate::rng::{uniform_below, BernoulliThreshold, StreamRng};

/// Largest k: the "other value" draw uses `uniform_below(k − 1)` on 32-bit words.
const MAX_K: u64 = 1 << 32;

#[derive(Clone, Debug)]
pub struct RandomizedResponse {
    k: u64,
    epsilon: f64,
    keep: BernoulliThreshold,
    p: f64,
    q: f64,
}

/// `x` lowered by `ulps` units in the last place (for positive finite x).
pub(crate) fn round_down(x: f64, ulps: u64) -> f64 {
    f64::from_bits(x.to_bits() - ulps)
}

/// Units in the last place by which channel probabilities are rounded down: computing
/// `e^ε/(e^ε + c)` in floating point is off by at most ~3 ulps (exp ≤ 1, + and / ≤ ½ each),
/// so 8 keeps the float strictly below the real value with a margin.
pub(crate) const PRIVACY_MARGIN_ULPS: u64 = 8;

/// The error for an ε so small that the rounded probabilities no longer favour the truth.
pub(crate) fn epsilon_too_small(epsilon: f64) -> crate::error::Error {
    crate::error::Error::Value(format!(
        "epsilon = {epsilon} is too small to be represented by this mechanism's \
         double-precision probabilities (they would no longer favour the true value)"
    ))
}

impl RandomizedResponse {
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        debug_assert!(k <= MAX_K);
        let e = epsilon.exp();
        let p = round_down(e / (e + (k - 1) as f64), PRIVACY_MARGIN_ULPS);
        let q = (1.0 - p) / (k - 1) as f64;
        if !(p > q) {
            return Err(epsilon_too_small(epsilon));
        }
        let keep = BernoulliThreshold::new(p)?;
        Ok(Self {
            k,
            epsilon,
            keep,
            p,
            q,
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`).
    pub fn footprint(&self, op: super::Operation) -> crate::memory::Footprint {
        super::vector_footprint("RandomizedResponse", op, self.k, self.k)
    }

    /// `(p, q)`: probability of reporting the true value, and of each other value.
    pub fn probabilities(&self) -> (f64, f64) {
        (self.p, self.q)
    }

    /// `ln(p/q)`: the exact guarantee of the channel used (≤ ε).
    pub fn realized_epsilon(&self) -> f64 {
        self.p.ln() - ((1.0 - self.p) / (self.k - 1) as f64).ln()
    }

    /// Row x of the channel matrix.
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        row.fill(self.q);
        row[x as usize] = self.p;
    }

    /// The estimator algebra (`mechanisms::SymmetricEstimator`): estimate, expected
    /// frequencies and channel products of the `Estimator` trait all come from it.
    pub(crate) fn symmetric(&self) -> SymmetricEstimator {
        SymmetricEstimator {
            high: self.p,
            low: self.q,
        }
    }
}

impl IndexMechanism for RandomizedResponse {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.k
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        if self.keep.sample(rng) {
            x
        } else {
            let other = uniform_below(rng, self.k - 1);
            other + (other >= x) as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_matrix;
    use super::super::testing::{
        assert_simulate_matches_privatize, channel_stats, chi_square, empirical_row,
    };
    use super::*;
    use crate::mechanisms::Estimator;
    use crate::rng::key_from_u64;

    #[test]
    fn channel_is_exactly_epsilon_ldp() {
        for k in [2u64, 3, 7, 16, 100] {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0] {
                let m = RandomizedResponse::new(k, eps).unwrap();
                let q = channel_matrix(k, k, 1 << 20, |x, r| m.channel_row(x, r)).unwrap();
                let (ratio, sum_err) = channel_stats(&q, k as usize);
                assert!(sum_err < 1e-12);
                assert!(ratio <= eps + 1e-12, "k {k} eps {eps}: {ratio}");
                assert!((ratio - m.realized_epsilon()).abs() < 1e-12);
                let r = m.realized_epsilon();
                assert!(r <= eps && eps - r < 1e-12, "k {k} eps {eps}: realized {r}");
            }
        }
    }

    #[test]
    fn sampler_matches_the_channel() {
        let m = RandomizedResponse::new(5, 1.0).unwrap();
        let mut row = vec![0.0; 5];
        for x in [0u32, 2, 4] {
            m.channel_row(x as u64, &mut row);
            let freq = empirical_row(&m, x, 200_000, 10 + x as u64);
            // df = 4: P(chi2 > 18.47) = 0.001.
            assert!(chi_square(&freq, &row, 200_000) < 18.47);
        }
    }

    #[test]
    fn estimator_is_unbiased_on_expected_counts() {
        let m = RandomizedResponse::new(6, 0.7).unwrap();
        let p = [0.5, 0.2, 0.1, 0.1, 0.1, 0.0];
        let est = m.estimate_from_frequencies(&m.expected_frequencies(&p));
        for (a, b) in est.iter().zip(p) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn simulate_equals_privatizing_sorted_values() {
        let m = RandomizedResponse::new(4, 0.5).unwrap();
        let true_counts = [70_000u64, 0, 100_000, 5];
        assert_simulate_matches_privatize(&m, &true_counts, 99);
    }

    #[test]
    fn rejects_bad_parameters_and_values() {
        assert!(RandomizedResponse::new(1, 1.0).is_err());
        assert!(RandomizedResponse::new(5, 0.0).is_err());
        assert!(RandomizedResponse::new(5, f64::NAN).is_err());
        assert!(RandomizedResponse::new(5, f64::INFINITY).is_err());
        assert!(RandomizedResponse::new(5, 1e-17).is_err());
        let m = RandomizedResponse::new(5, 1.0).unwrap();
        let mut out = vec![0u8; 3];
        let err = super::super::privatize(&m, &key_from_u64(0), &[1, 5, 2], &mut out).unwrap_err();
        assert!(err.to_string().contains("values[1] = 5"));
        let mut counts = vec![0u64; 5];
        assert!(super::super::aggregate(&[1u8, 7, 9], &mut counts, false).is_err());
        assert_eq!(counts, vec![0; 5]);
        let t = super::super::aggregate(&[1u8, 7, 9], &mut counts, true).unwrap();
        assert_eq!((t.valid, t.invalid, t.first_invalid), (1, 2, Some(1)));
        assert_eq!(counts, vec![0, 1, 0, 0, 0]);
    }
}
