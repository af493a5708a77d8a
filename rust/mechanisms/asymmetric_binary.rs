//! The optimal binary mechanism under context-aware LDP (Acharya, Bonawitz, Kairouz, Ramage &
//! Sun, "Context-aware local differential privacy", ICML 2020, Section 4, Theorem 2), with
//! eq. (9) corrected as on the docs page Mechanisms › Context-aware LDP (the printed matrix has
//! its ε indices swapped).
//!
//! # Symbols and budgets
//! Inputs and reports are {0, 1}; the paper's symbols 1 and 2 are our 0 and 1. The budget
//! matrix is `E = [[0, ε01], [ε10, 0]]`: `ε01` (the paper's `ε_{1,2}`, entry `E[0, 1]`)
//! bounds `Q(y|0) ≤ e^{ε01} Q(y|1)` and `ε10` (`ε_{2,1}`, `E[1, 0]`) bounds
//! `Q(y|1) ≤ e^{ε10} Q(y|0)`, for both reports y. A smaller `ε01` protects "the input is 0"
//! more. Either budget may be `+∞` (no constraint on that ordered pair).
//!
//! # Channel (Theorem 2, corrected eq. (9))
//! With `a = e^{−ε01}` and `b = e^{−ε10}` (0 for an infinite budget):
//!
//! `Q(0|0) = (1−b)/(1−ab)`, `Q(1|0) = b(1−a)/(1−ab)`, `Q(0|1) = a(1−b)/(1−ab)`,
//! `Q(1|1) = (1−a)/(1−ab)`,
//!
//! so `Q(0|0)/Q(0|1) = e^{ε01}` and `Q(1|1)/Q(1|0) = e^{ε10}`: both budgets are tight (the
//! other two ratios are below 1). The matrix printed as eq. (9) realizes `e^{ε10}` and
//! `e^{ε01}` instead, violating the budgets whenever they differ. Special cases: equal
//! budgets give Warner's randomized response (truth with probability `e^ε/(e^ε + 1)`);
//! `ε01 = ∞` gives Mangat's improved randomized response `[[1 − b, b], [0, 1]]` (input 1
//! always reports 1; the paper's eq. (11) with `p = e^{−ε_{2,1}}`), `ε10 = ∞` its mirror
//! `[[1, 0], [a, 1 − a]]`; both infinite give the identity (nothing is constrained).
//!
//! A zero budget leaves nothing to estimate: `Q(y|0) ≤ Q(y|1)` for both y forces equal rows
//! (each sums to 1). The channel is then the formula's limit, a constant report: `ε01 = 0`
//! reports 0 (`a = 1`), otherwise `ε10 = 0` reports 1 (`b = 1`); both zero report 0. The
//! mechanism is *degenerate*: privatize, aggregate and simulate work, estimation is refused.
//!
//! # Realized channel (exact privacy)
//! The sampler reports `x XOR flip` with `flip ~ Bernoulli(f_x)` drawn exactly
//! (`rng::BernoulliThreshold`: the binary value of the float), from the flip probabilities
//! `f0 = Q(1|0)` and `f1 = Q(0|1)` as `f64`; the realized channel is exactly
//! `[[1 − f0, f0], [f1, 1 − f1]]`. Flips are the small probabilities when the budgets are
//! large, so they keep full relative precision (ε = 700 gives `f ≈ 1e−304`). They are
//! computed from the formula with `1 − a = −expm1(−ε01)`, `1 − b = −expm1(−ε10)`,
//! `1 − ab = −expm1(−(ε01 + ε10))`, then rounded **up** by [`FLIP_MARGIN_ULPS`] (flipping
//! more lowers every log-ratio), and raised further if needed until each realized log-ratio
//! plus a bound on its floating-point error ([`Realized`]) is at most its budget. The realized
//! budgets are computed in closed form from `f0, f1` (`ln(1 − f) = ln_1p(−f)`: `1 − f` is the
//! exact probability); the estimator uses the same `f0, f1`.
//!
//! # Estimator
//! With `f̂0 = c0/n`, `f̂1 = c1/n` and `gap = Q(0|0) − Q(0|1) = 1 − f0 − f1`:
//! `p̂0 = (f̂0 − Q(0|1))/gap = (f̂0 − f1)/gap` (this project's estimator), `p̂1 = (f̂1 − f0)/gap`
//! (`= 1 − p̂0` when `c0 + c1 = n`). Unbiased; `Var p̂0 = F0(1 − F0)/(n·gap²)` with
//! `F0 = (1 − f0) p0 + f1 p1` the probability of a 0 report.
//!
//! # Simulation
//! `n_x` users hold x: `c0 = (n0 − Bin(n0, f0)) + Bin(n1, f1)`, `c1 = n − c0`: two binomials
//! (`rng::binomial`) whatever n, exact in law up to their double-precision arithmetic.

use super::{simulation_stream, simulation_users, IndexMechanism, Operation, SimulationPhase};
use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{binomial, BernoulliThreshold, Key, StreamRng};

/// Units in the last place by which the flip probabilities are first rounded up: the formula
/// is evaluated with a few roundings (expm1/exp ≤ 1 ulp each, ×, / ≤ ½ each).
pub const FLIP_MARGIN_ULPS: u64 = 4;

/// Ulps of the larger log magnitude allowed for the floating-point error of a computed
/// log-ratio `ln P − ln P'` (each logarithm within 1 ulp, the difference within ½ ulp of a
/// result at most twice that magnitude): a realized budget plus this bound must not exceed
/// the requested budget.
const LOG_RATIO_ERROR_ULPS: f64 = 8.0;

/// Rounds of raising the flips before the budgets are declared unrepresentable.
const CALIBRATION_ROUNDS: usize = 16;

#[derive(Clone, Debug)]
pub struct AsymmetricBinaryResponse {
    epsilon_01: f64,
    epsilon_10: f64,
    /// `f0 = Q(1|0)`, `f1 = Q(0|1)` as realized.
    flips: [f64; 2],
    thresholds: [BernoulliThreshold; 2],
    realized: Realized,
}

/// The realized budgets of a channel `[[1 − f0, f0], [f1, 1 − f1]]` and, for each, an upper
/// bound of its exact value (the computed value plus its floating-point error bound).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Realized {
    /// `E[0, 1] = max_y ln Q(y|0) − ln Q(y|1)` (0 at least; +∞ when a report possible under
    /// 0 is impossible under 1).
    pub e01: f64,
    /// `E[1, 0] = max_y ln Q(y|1) − ln Q(y|0)`.
    pub e10: f64,
    /// `e01` plus a bound on its rounding error: the exact value is at most this.
    pub e01_bound: f64,
    pub e10_bound: f64,
}

/// `(ln P, P == 0)` of a probability given as `1 − f` (`complement`) or `f`.
fn log_probability(f: f64, complement: bool) -> (f64, bool) {
    if complement {
        (f64::ln_1p(-f), f >= 1.0)
    } else {
        (f.ln(), f <= 0.0)
    }
}

/// `ln P − ln P'` with its error bound, or `None` when `P = 0` (no constraint from that
/// report); `+∞` when `P > 0 = P'`.
fn log_ratio(p: (f64, bool), q: (f64, bool)) -> Option<(f64, f64)> {
    let ((lp, p_zero), (lq, q_zero)) = (p, q);
    if p_zero {
        return None;
    }
    if q_zero {
        return Some((f64::INFINITY, f64::INFINITY));
    }
    let value = lp - lq;
    let error = LOG_RATIO_ERROR_ULPS * f64::EPSILON * lp.abs().max(lq.abs());
    Some((value, value + error))
}

impl Realized {
    /// The realized budgets of flips `f0 = Q(1|0)`, `f1 = Q(0|1)`.
    pub fn of(f0: f64, f1: f64) -> Self {
        let q00 = log_probability(f0, true);
        let q10 = log_probability(f0, false);
        let q01 = log_probability(f1, false);
        let q11 = log_probability(f1, true);
        let worst = |pairs: [Option<(f64, f64)>; 2]| {
            pairs
                .into_iter()
                .flatten()
                .fold((0.0f64, 0.0f64), |(v, b), (pv, pb)| (v.max(pv), b.max(pb)))
        };
        let (e01, e01_bound) = worst([log_ratio(q00, q01), log_ratio(q10, q11)]);
        let (e10, e10_bound) = worst([log_ratio(q01, q00), log_ratio(q11, q10)]);
        Self {
            e01,
            e10,
            e01_bound,
            e10_bound,
        }
    }
}

/// A budget: a number ≥ 0, at most `MAX_EPSILON` when finite, or +∞.
fn check_budget(name: &str, budget: f64) -> Result<()> {
    if budget.is_nan() || budget < 0.0 {
        return Err(Error::Value(format!(
            "{name} must be a privacy budget ≥ 0 (natural log) or +inf for no constraint, got \
             {budget:?}"
        )));
    }
    if budget.is_finite() && budget > super::MAX_EPSILON {
        return Err(Error::Value(format!(
            "{name} = {budget:?} is too large: e^{name} overflows double precision; the \
             largest finite budget accepted is {:?} (pass inf for no constraint)",
            super::MAX_EPSILON
        )));
    }
    Ok(())
}

/// `f` raised by `ulps` units in the last place (0 stays 0), at most 1.
fn raised(f: f64, ulps: u64) -> f64 {
    if f <= 0.0 {
        f
    } else {
        f64::from_bits(f.to_bits() + ulps).min(1.0)
    }
}

/// The flip probabilities `(Q(1|0), Q(0|1))` of the corrected eq. (9) in floating point
/// (not yet rounded up); the exact constants of the degenerate channels.
fn formula_flips(epsilon_01: f64, epsilon_10: f64) -> [f64; 2] {
    if epsilon_01 == 0.0 {
        return [0.0, 1.0]; // a = 1: every user reports 0
    }
    if epsilon_10 == 0.0 {
        return [1.0, 0.0]; // b = 1: every user reports 1
    }
    let (a, b) = ((-epsilon_01).exp(), (-epsilon_10).exp());
    let one_minus_a = -(-epsilon_01).exp_m1();
    let one_minus_b = -(-epsilon_10).exp_m1();
    let one_minus_ab = -(-(epsilon_01 + epsilon_10)).exp_m1();
    [
        b * (one_minus_a / one_minus_ab),
        a * (one_minus_b / one_minus_ab),
    ]
}

fn unrepresentable(epsilon_01: f64, epsilon_10: f64) -> Error {
    Error::Value(format!(
        "budgets epsilon_01 = {epsilon_01:?}, epsilon_10 = {epsilon_10:?} cannot be \
         represented by AsymmetricBinaryResponse in double precision: a channel probability \
         underflows or the two rows round together (budgets too small, or of very different \
         sizes); use larger budgets or budgets of comparable sizes (0 and inf are exact)"
    ))
}

/// The realized flips: the formula's, rounded up, then raised until every realized log-ratio
/// is provably within its budget (module documentation, "Realized channel").
fn calibrate(epsilon_01: f64, epsilon_10: f64) -> Result<[f64; 2]> {
    let [mut f0, mut f1] = formula_flips(epsilon_01, epsilon_10);
    if epsilon_01 == 0.0 || epsilon_10 == 0.0 {
        return Ok([f0, f1]);
    }
    f0 = raised(f0, FLIP_MARGIN_ULPS);
    f1 = raised(f1, FLIP_MARGIN_ULPS);
    for _ in 0..CALIBRATION_ROUNDS {
        let r = Realized::of(f0, f1);
        let over_01 = r.e01_bound - epsilon_01;
        let over_10 = r.e10_bound - epsilon_10;
        let fits_01 = epsilon_01 == f64::INFINITY || over_01 <= 0.0;
        let fits_10 = epsilon_10 == f64::INFINITY || over_10 <= 0.0;
        if fits_01 && fits_10 {
            return Ok([f0, f1]);
        }
        // E[0, 1] is set by Q(0|0)/Q(0|1) = (1 − f0)/f1: raise f1 by the excess (or, from 0
        // after an underflow, to the value the budget asks for); likewise E[1, 0] and f0.
        if !fits_01 {
            f1 = if f1 > 0.0 {
                f1 * over_01.exp()
            } else {
                (f64::ln_1p(-f0) - epsilon_01).exp()
            };
            f1 = raised(f1, FLIP_MARGIN_ULPS);
        }
        if !fits_10 {
            f0 = if f0 > 0.0 {
                f0 * over_10.exp()
            } else {
                (f64::ln_1p(-f1) - epsilon_10).exp()
            };
            f0 = raised(f0, FLIP_MARGIN_ULPS);
        }
    }
    Err(unrepresentable(epsilon_01, epsilon_10))
}

/// `(s, e)` with `s = fl(x + y)` and `x + y = s + e` exactly (Knuth's two-sum).
fn two_sum(x: f64, y: f64) -> (f64, f64) {
    let s = x + y;
    let z = s - x;
    (s, (x - (s - z)) + (y - z))
}

impl AsymmetricBinaryResponse {
    /// The mechanism for the budgets `E[0, 1] = epsilon_01` and `E[1, 0] = epsilon_10`: each
    /// ≥ 0 and at most `MAX_EPSILON` (700), or +∞. Refused when double precision cannot keep
    /// the channel within the budgets (a probability underflows); the shared rule on how far
    /// below the budgets the realized channel may lie is applied by the caller (Python:
    /// every finite positive budget of a non-degenerate channel, `check_realized`).
    pub fn new(epsilon_01: f64, epsilon_10: f64) -> Result<Self> {
        check_budget("epsilon_01", epsilon_01)?;
        check_budget("epsilon_10", epsilon_10)?;
        let flips = calibrate(epsilon_01, epsilon_10)?;
        let degenerate = epsilon_01 == 0.0 || epsilon_10 == 0.0;
        let (s, e) = two_sum(flips[0], flips[1]);
        if !degenerate && !((1.0 - s) - e > 0.0) {
            // Positive budgets so small that the rows round together: no estimator.
            return Err(unrepresentable(epsilon_01, epsilon_10));
        }
        Ok(Self {
            epsilon_01,
            epsilon_10,
            flips,
            thresholds: [
                BernoulliThreshold::new(flips[0])?,
                BernoulliThreshold::new(flips[1])?,
            ],
            realized: Realized::of(flips[0], flips[1]),
        })
    }

    /// `E[0, 1]` as requested.
    pub fn epsilon_01(&self) -> f64 {
        self.epsilon_01
    }

    /// `E[1, 0]` as requested.
    pub fn epsilon_10(&self) -> f64 {
        self.epsilon_10
    }

    /// The largest budget, `max(ε01, ε10)` (possibly +∞): the plain ε-LDP guarantee implied.
    pub fn epsilon(&self) -> f64 {
        self.epsilon_01.max(self.epsilon_10)
    }

    /// `(E[0, 1], E[1, 0])` of the channel used, exact in closed form (each at most its
    /// budget).
    pub fn realized_budgets(&self) -> (f64, f64) {
        (self.realized.e01, self.realized.e10)
    }

    /// The largest realized budget (plain ε-LDP of the channel used).
    pub fn realized_epsilon(&self) -> f64 {
        self.realized.e01.max(self.realized.e10)
    }

    /// Whether a budget is 0: every user reports the same constant, nothing can be estimated.
    pub fn degenerate(&self) -> bool {
        self.epsilon_01 == 0.0 || self.epsilon_10 == 0.0
    }

    /// `(Q(1|0), Q(0|1))`: the flip probabilities as realized.
    pub fn probabilities(&self) -> (f64, f64) {
        (self.flips[0], self.flips[1])
    }

    /// `Q(0|0) − Q(0|1) = 1 − f0 − f1` (two-sum: exact but for one rounding).
    fn gap(&self) -> f64 {
        let (s, e) = two_sum(self.flips[0], self.flips[1]);
        (1.0 - s) - e
    }

    /// Row x of the channel: `[Q(0|x), Q(1|x)]`.
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let f = self.flips[x as usize];
        row[x as usize] = 1.0 - f;
        row[1 - x as usize] = f;
    }

    /// The buffers of a server-side operation: vectors of 2 (`Estimator::footprint`).
    pub fn footprint(&self, op: Operation) -> Footprint {
        super::vector_footprint("AsymmetricBinaryResponse", op, 2, 2)
    }

    fn refuse_degenerate(&self) -> Result<()> {
        if self.degenerate() {
            return Err(Error::Value(format!(
                "AsymmetricBinaryResponse with epsilon_01 = {:?}, epsilon_10 = {:?} reports a \
                 constant: a zero budget forces Q(·|0) = Q(·|1), so the reports carry no \
                 information about the values and nothing can be estimated",
                self.epsilon_01, self.epsilon_10
            )));
        }
        Ok(())
    }

    /// The unbiased estimate from the report histogram `[c0, c1]` of `n > 0` reports; NaN
    /// for a degenerate mechanism (see [`try_estimate_raw`](Self::try_estimate_raw)).
    pub fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64> {
        let freq: Vec<f64> = counts.iter().map(|&c| c as f64 / n as f64).collect();
        self.estimate_from_frequencies(&freq)
    }

    /// [`estimate_raw`](Self::estimate_raw), refused for a degenerate mechanism.
    pub fn try_estimate_raw(&self, counts: &[u64], n: u64) -> Result<Vec<f64>> {
        self.refuse_degenerate()?;
        Ok(self.estimate_raw(counts, n))
    }

    /// `p̂0 = (F0 − f1)/gap`, `p̂1 = (F1 − f0)/gap` (module documentation, "Estimator").
    pub fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
        let gap = if self.degenerate() {
            f64::NAN
        } else {
            self.gap()
        };
        let [f0, f1] = self.flips;
        vec![(freq[0] - f1) / gap, (freq[1] - f0) / gap]
    }

    /// [`estimate_from_frequencies`](Self::estimate_from_frequencies), refused for a
    /// degenerate mechanism.
    pub fn try_estimate_from_frequencies(&self, freq: &[f64]) -> Result<Vec<f64>> {
        self.refuse_degenerate()?;
        Ok(self.estimate_from_frequencies(freq))
    }

    /// `[Σ_x p_x Q(0|x), Σ_x p_x Q(1|x)]`.
    pub fn expected_frequencies(&self, dist: &[f64]) -> Vec<f64> {
        let [f0, f1] = self.flips;
        vec![
            dist[0] - f0 * dist[0] + f1 * dist[1],
            dist[1] - f1 * dist[1] + f0 * dist[0],
        ]
    }

    pub fn try_expected_frequencies(&self, dist: &[f64]) -> Result<Vec<f64>> {
        Ok(self.expected_frequencies(dist))
    }

    /// The adjoint `Q w`: `[Σ_y Q(y|0) w_y, Σ_y Q(y|1) w_y]`.
    pub fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        let [f0, f1] = self.flips;
        vec![w[0] + f0 * (w[1] - w[0]), w[1] + f1 * (w[0] - w[1])]
    }

    pub fn try_channel_apply(&self, w: &[f64]) -> Result<Vec<f64>> {
        Ok(self.channel_apply(w))
    }

    /// The report histogram of `true_counts = [n0, n1]` users, exact in law: two binomials
    /// (module documentation, "Simulation").
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let n = simulation_users(2, true_counts)?;
        let mut rng = simulation_stream(key, SimulationPhase::OwnCounts, 0);
        let flipped_0 = binomial(&mut rng, true_counts[0], self.flips[0]);
        let flipped_1 = binomial(&mut rng, true_counts[1], self.flips[1]);
        let zeros = (true_counts[0] - flipped_0) + flipped_1;
        Ok(vec![zeros, n - zeros])
    }
}

impl IndexMechanism for AsymmetricBinaryResponse {
    fn domain(&self) -> u64 {
        2
    }
    fn output_size(&self) -> u64 {
        2
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        x ^ self.thresholds[x as usize].sample(rng) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{
        assert_simulate_matches_privatize_in_law, assert_simulation_law, chi_square, empirical_row,
    };
    use super::super::{aggregate, channel_matrix, privatize, Estimator};
    use super::*;
    use crate::mechanisms::randomized_response::RandomizedResponse;
    use crate::rng::key_from_u64;

    const INF: f64 = f64::INFINITY;
    const GRID: [f64; 9] = [0.0, 1e-6, 0.1, 0.5, 1.0, 2.0, 5.0, 30.0, INF];
    const LARGE: [f64; 3] = [100.0, 699.0, 700.0];

    /// The corrected eq. (9) in exact-as-possible arithmetic (limits for 0 and ∞).
    fn corrected(e01: f64, e10: f64) -> [[f64; 2]; 2] {
        let [f0, f1] = formula_flips(e01, e10);
        [[1.0 - f0, f0], [f1, 1.0 - f1]]
    }

    fn matrix(m: &AsymmetricBinaryResponse) -> [[f64; 2]; 2] {
        let mut q = [[0.0; 2]; 2];
        for (x, row) in q.iter_mut().enumerate() {
            m.channel_row(x as u64, row);
        }
        q
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        a == b || (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-300)
    }

    #[test]
    fn the_channel_is_the_corrected_equation_9_and_tight_on_both_budgets() {
        for e01 in GRID.iter().chain(&LARGE).copied() {
            for e10 in GRID.iter().chain(&LARGE).copied() {
                let m = match AsymmetricBinaryResponse::new(e01, e10) {
                    Ok(m) => m,
                    // Only budgets far apart in size can underflow a probability.
                    Err(e) => {
                        assert!(e.to_string().contains("cannot be represented"), "{e}");
                        assert!(e01.min(e10) <= 1e-6 && e01.max(e10) >= 100.0);
                        continue;
                    }
                };
                // The flips relatively (they may be 1e−304; raised by at most the error
                // bound of a log-ratio, 8 ulps of |ln f| ≤ 745), every entry absolutely.
                let (f0, f1) = m.probabilities();
                let want_flips = formula_flips(e01, e10);
                assert!(
                    close(f0, want_flips[0], 2e-12) && close(f1, want_flips[1], 2e-12),
                    "{e01} {e10}: flips {f0:e} {f1:e} vs {want_flips:?}"
                );
                let (q, want) = (matrix(&m), corrected(e01, e10));
                for x in 0..2 {
                    assert!((q[x][0] + q[x][1] - 1.0).abs() < 1e-15);
                    for y in 0..2 {
                        assert!(
                            (q[x][y] - want[x][y]).abs() < 2e-15,
                            "{e01} {e10}: Q({y}|{x}) = {} vs {}",
                            q[x][y],
                            want[x][y]
                        );
                    }
                }
                let (r01, r10) = m.realized_budgets();
                assert!(r01 <= e01 && r10 <= e10, "{e01} {e10}: {r01} {r10}");
                if !m.degenerate() {
                    // Tight: the realized budgets are the requested ones, up to 1e−12
                    // relative, the margin of a few ulps the rounding keeps (1e−14), and the
                    // spacing of floats near 1 (a keep probability 1 − f is known to ~1e−16
                    // absolute: ln Q(x|x) to 1e−16/Q(x|x)).
                    let floor = 1e-14 + 2e-15 / q[0][0].min(q[1][1]);
                    for (r, e) in [(r01, e01), (r10, e10)] {
                        assert!(
                            r == e || e - r <= 1e-12 * e + floor,
                            "{e01} {e10}: realized {r} for {e}"
                        );
                    }
                } else {
                    assert_eq!((r01, r10), (0.0, 0.0));
                }
            }
        }
    }

    #[test]
    fn realized_budgets_match_the_channel_matrix() {
        for (e01, e10) in [(0.5, 2.0), (3.0, 0.2), (1.0, 1.0), (INF, 1.5), (0.7, INF)] {
            let m = AsymmetricBinaryResponse::new(e01, e10).unwrap();
            let q = channel_matrix(2, 2, 4, |x, r| m.channel_row(x, r)).unwrap();
            let ratio = |x: usize, xp: usize| {
                (0..2)
                    .filter(|&y| q[2 * x + y] > 0.0)
                    .map(|y| (q[2 * x + y] / q[2 * xp + y]).ln())
                    .fold(0.0f64, f64::max)
            };
            let (r01, r10) = m.realized_budgets();
            for (got, want) in [(ratio(0, 1), r01), (ratio(1, 0), r10)] {
                assert!(got == want || (got - want).abs() < 1e-12, "{got} vs {want}");
            }
            assert_eq!(m.realized_epsilon(), r01.max(r10));
            assert_eq!(m.epsilon(), e01.max(e10));
        }
    }

    #[test]
    fn the_printed_equation_9_violates_the_budgets() {
        // The printed matrix is the corrected one with the budgets exchanged.
        for (e01, e10) in [(0.5, 2.0), (1.0, 3.0), (2.0, 0.1)] {
            let printed = corrected(e10, e01);
            let ratio_0 = (printed[0][0] / printed[1][0]).ln(); // bounded by ε01
            let ratio_1 = (printed[1][1] / printed[0][1]).ln(); // bounded by ε10
            assert!(close(ratio_0, e10, 1e-12) && close(ratio_1, e01, 1e-12));
            assert!(ratio_0 > e01 || ratio_1 > e10);
        }
    }

    #[test]
    fn equal_budgets_give_warners_randomized_response_and_infinite_ones_mangats() {
        for eps in [0.1, 1.0, 4.0] {
            let m = AsymmetricBinaryResponse::new(eps, eps).unwrap();
            let rr = RandomizedResponse::new(2, eps).unwrap();
            let (keep, _) = rr.probabilities();
            let q = matrix(&m);
            assert!(close(q[0][0], keep, 1e-14) && close(q[1][1], keep, 1e-14));
            assert!(close(q[0][1], 1.0 - keep, 1e-13) && close(q[1][0], 1.0 - keep, 1e-13));
        }
        let p = (-0.8f64).exp();
        let q = matrix(&AsymmetricBinaryResponse::new(INF, 0.8).unwrap());
        assert!(close(q[0][0], 1.0 - p, 1e-14) && close(q[0][1], p, 1e-14));
        assert_eq!(q[1], [0.0, 1.0]);
        let q = matrix(&AsymmetricBinaryResponse::new(0.8, INF).unwrap());
        assert_eq!(q[0], [1.0, 0.0]);
        assert!(close(q[1][0], p, 1e-14) && close(q[1][1], 1.0 - p, 1e-14));
        let q = matrix(&AsymmetricBinaryResponse::new(INF, INF).unwrap());
        assert_eq!(q, [[1.0, 0.0], [0.0, 1.0]]);
    }

    #[test]
    fn a_zero_budget_gives_a_constant_report_and_no_estimate() {
        for (e01, e10, constant) in [(0.0, 1.0, 0u8), (0.0, INF, 0), (0.0, 0.0, 0), (2.0, 0.0, 1)] {
            let m = AsymmetricBinaryResponse::new(e01, e10).unwrap();
            assert!(m.degenerate());
            let mut out = vec![0u8; 1000];
            let values: Vec<u32> = (0..1000).map(|i| i % 2).collect();
            privatize(&m, &key_from_u64(1), &values, &mut out).unwrap();
            assert!(out.iter().all(|&r| r == constant));
            let counts = m.simulate(&key_from_u64(2), &[40, 60]).unwrap();
            assert_eq!(counts[constant as usize], 100);
            let err = m.try_estimate_raw(&counts, 100).unwrap_err().to_string();
            assert!(err.contains("nothing can be estimated"), "{err}");
            assert!(m.checked_estimate_from_frequencies(&[1.0, 0.0]).is_err());
            assert_eq!(m.realized_budgets(), (0.0, 0.0));
        }
    }

    #[test]
    fn sampler_matches_the_channel() {
        for (e01, e10) in [(0.5, 2.0), (INF, 1.0), (1.5, 0.3)] {
            let m = AsymmetricBinaryResponse::new(e01, e10).unwrap();
            let mut row = [0.0; 2];
            for x in [0u32, 1] {
                m.channel_row(x as u64, &mut row);
                let freq = empirical_row(&m, x, 200_000, 20 + x as u64);
                // df = 1: P(chi2 > 10.83) = 0.001.
                assert!(
                    chi_square(&freq, &row, 200_000) < 10.83,
                    "{e01} {e10} x {x}"
                );
                if row[1 - x as usize] == 0.0 {
                    assert_eq!(freq[1 - x as usize], 0.0);
                }
            }
        }
    }

    #[test]
    fn estimator_is_unbiased_on_expected_counts() {
        for (e01, e10) in [(0.5, 2.0), (INF, 1.0), (3.0, INF), (INF, INF), (1e-3, 1.0)] {
            let m = AsymmetricBinaryResponse::new(e01, e10).unwrap();
            for p in [[0.3, 0.7], [1.0, 0.0], [0.0, 1.0]] {
                let est = m.estimate_from_frequencies(&m.expected_frequencies(&p));
                for (a, b) in est.iter().zip(p) {
                    assert!((a - b).abs() < 1e-12, "{e01} {e10}: {est:?} vs {p:?}");
                }
            }
            // Adjoint of the expected frequencies.
            let (p, w) = ([0.2, 0.8], [1.5, -0.7]);
            let lhs: f64 = m
                .expected_frequencies(&p)
                .iter()
                .zip(w)
                .map(|(a, b)| a * b)
                .sum();
            let rhs: f64 = m.channel_apply(&w).iter().zip(p).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-15);
        }
    }

    #[test]
    fn simulate_follows_the_exact_law_at_every_scale() {
        let m = AsymmetricBinaryResponse::new(0.5, 2.0).unwrap();
        assert_simulation_law("few users", &m, &[7, 3], 400, 1);
        assert_simulation_law("many users", &m, &[70_000, 100_000], 400, 1_000);
        let huge = [1_000_000_000_000u64, 3_000_000_000_000];
        assert_simulation_law("10^12 users", &m, &huge, 300, 2_000);
        let m = AsymmetricBinaryResponse::new(INF, 0.7).unwrap();
        assert_simulation_law("Mangat", &m, &[500, 900], 400, 3_000);
        assert_simulate_matches_privatize_in_law("Mangat", &m, &[500, 900], 300, 4_000);
        let m = AsymmetricBinaryResponse::new(1.2, 0.4).unwrap();
        assert_simulate_matches_privatize_in_law("asymmetric", &m, &[300, 1200], 300, 5_000);
    }

    #[test]
    fn simulate_is_reproducible_and_checks_its_input() {
        let m = AsymmetricBinaryResponse::new(1.0, 0.5).unwrap();
        let key = key_from_u64(3);
        let once = m.simulate(&key, &[1000, 5000]).unwrap();
        assert_eq!(once, m.simulate(&key, &[1000, 5000]).unwrap());
        assert_ne!(once, m.simulate(&key_from_u64(4), &[1000, 5000]).unwrap());
        assert!(m.simulate(&key, &[1, 2, 3]).is_err());
        assert!(m.simulate(&key, &[u64::MAX, 1]).is_err());
        let all = m.simulate(&key, &[u64::MAX - 1, 1]).unwrap();
        assert_eq!(all[0].checked_add(all[1]), Some(u64::MAX));
    }

    #[test]
    fn rejects_bad_budgets_and_values() {
        for bad in [-1.0, -0.0 - 1e-300, f64::NAN, -INF, 700.5, 1e300] {
            assert!(AsymmetricBinaryResponse::new(bad, 1.0).is_err(), "{bad}");
            assert!(AsymmetricBinaryResponse::new(1.0, bad).is_err(), "{bad}");
        }
        let err = AsymmetricBinaryResponse::new(709.9, 1.0).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
        // Budgets 1e−300 apart in size: a probability underflows; refused, never exceeded.
        assert!(AsymmetricBinaryResponse::new(700.0, 1e-30).is_err());
        let m = AsymmetricBinaryResponse::new(1.0, 1.0).unwrap();
        let mut out = vec![0u8; 3];
        let err = privatize(&m, &key_from_u64(0), &[1, 2, 0], &mut out).unwrap_err();
        assert!(err.to_string().contains("values[1] = 2"), "{err}");
        let mut counts = vec![0u64; 2];
        let t = aggregate(&[1u8, 2, 0], &mut counts, true).unwrap();
        assert_eq!((t.valid, t.invalid, counts), (2, 1, vec![1, 1]));
    }

    #[test]
    fn estimator_trait_reports_both_budgets() {
        let m = AsymmetricBinaryResponse::new(0.3, INF).unwrap();
        assert_eq!(Estimator::epsilon(&m), INF);
        assert_eq!(Estimator::realized_epsilon(&m), INF);
        assert_eq!(m.domain_size(), 2);
        assert_eq!(m.statistic_size(), 2);
        let est = m.checked_estimate_raw(&[30, 70], 100).unwrap();
        assert!((est[0] + est[1] - 1.0).abs() < 1e-12);
    }
}
