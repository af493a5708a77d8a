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

use super::{
    add_uniform_reports, as_atomic, check_domain, check_epsilon, draw_own_counts,
    simulation_footprint, simulation_users, IndexMechanism, Operation, SymmetricEstimator,
};
use crate::error::Result;
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{uniform_below, BernoulliThreshold, Key, StreamRng};
use std::sync::atomic::Ordering;

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
        "epsilon = {epsilon:?} is too small to be represented by this mechanism's \
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

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`): the
    /// estimate holds the frequencies and the result (k each), a channel product its result,
    /// a simulation its counts.
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "RandomizedResponse";
        match op {
            Operation::Estimate => Footprint::new(format!("{name} estimate"))
                .add("report frequencies", self.k, 8)
                .add("the estimate", self.k, 8),
            Operation::ChannelProduct => {
                Footprint::new(format!("{name} channel product")).add("the result", self.k, 8)
            }
            Operation::Simulate { .. } => simulation_footprint(name, self.k, 1),
        }
    }

    /// The probability `1 − α = (k·p − 1)/(k − 1)` that a user reports from its own set {x}
    /// in the mixture form of the channel (`mechanisms`, "Simulation"): keeping x
    /// (probability p) is the own set plus the uniform component's share `α/k`.
    fn own_set_weight(&self) -> f64 {
        let k = self.k as f64;
        (k * self.p - 1.0) / (k - 1.0)
    }

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law
    /// (`mechanisms`, "Simulation"): the own set of x is {x}, so `counts_x = K_x` plus the
    /// uniform multinomial of the other users. O(k) draws whatever the number of users, one
    /// array of k counts.
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let mut out = allocate_zeroed::<u64>(self.k as usize, "the report counts")?;
        let own = self.own_set_weight();
        let cells = as_atomic(&mut out);
        let uniform = draw_own_counts(
            key,
            true_counts,
            |_| own,
            |_, x, kept| {
                cells[x as usize].store(kept, Ordering::Relaxed);
                Ok(())
            },
        )?;
        add_uniform_reports(key, &mut out, uniform)?;
        Ok(out)
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
        assert_simulate_matches_privatize_in_law, assert_simulation_law, channel_stats, chi_square,
        empirical_row,
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
    fn simulate_follows_the_exact_law_at_every_scale() {
        let m = RandomizedResponse::new(4, 0.5).unwrap();
        assert_simulation_law("few users", &m, &[7, 0, 10, 1], 400, 1);
        assert_simulation_law("many users", &m, &[70_000, 0, 100_000, 5], 400, 1_000);
        // 4·10^12 users: the binomials far beyond any privatization.
        let huge = [1_000_000_000_000u64, 3_000_000_000_000, 7, 0];
        assert_simulation_law("10^12 users", &m, &huge, 300, 2_000);
        let m = RandomizedResponse::new(9, 2.0).unwrap();
        let counts = [3u64, 0, 900, 50, 1, 0, 20, 9, 400];
        assert_simulation_law("k = 9", &m, &counts, 400, 3_000);
        assert_simulate_matches_privatize_in_law("k = 9", &m, &counts, 300, 4_000);
    }

    #[test]
    fn simulate_is_reproducible_and_checks_its_input() {
        let m = RandomizedResponse::new(5, 1.0).unwrap();
        let key = key_from_u64(3);
        let counts = [10u64, 20, 0, 5, 1_000_000];
        let once = m.simulate(&key, &counts).unwrap();
        assert_eq!(once, m.simulate(&key, &counts).unwrap());
        assert_ne!(once, m.simulate(&key_from_u64(4), &counts).unwrap());
        assert!(m.simulate(&key, &counts[1..]).is_err());
        let err = m.simulate(&key, &[u64::MAX, 1, 0, 0, 0]).unwrap_err();
        assert!(err.to_string().contains("2^64"), "{err}");
        assert_eq!(m.simulate(&key, &[0; 5]).unwrap(), vec![0; 5]);
        // The largest total: no overflow, no panic.
        let all = m.simulate(&key, &[u64::MAX - 4, 1, 1, 1, 1]).unwrap();
        assert_eq!(
            all.iter().fold(0u64, |s, &c| s.checked_add(c).unwrap()),
            u64::MAX
        );
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
