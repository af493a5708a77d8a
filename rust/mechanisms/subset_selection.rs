//! Subset Selection (Ye & Barg 2018, "Optimal schemes for discrete distribution estimation
//! under locally differential privacy"; Wang, Wu, Hu et al. 2016, "Mutual information
//! optimally local private discrete distribution estimation").
//!
//! * Report: a subset `S ⊆ [k]` of exactly `d` items, as a packed k-bit row (bit j set ⇔
//!   j ∈ S). Channel (Ye & Barg, eq. (6)):
//!   `Q(S | x) = e^ε / Z` if `x ∈ S`, `1 / Z` otherwise, `Z = C(k−1, d−1) e^ε + C(k−1, d)`.
//! * Subset size: `d = ⌈k/(e^ε + 1)⌉` by default (Ye & Barg; Wang et al.). Choosing `d` to
//!   minimize the estimator's variance at the uniform distribution gives the same value up
//!   to rounding: the total variance `Σ_j Var(p̂_j) = (k−1)²(d(e^ε−1) + k)² / (n k d (k−d)
//!   (e^ε−1)²)` (see [`variance_at_uniform`]) has `d/dd ln V ∝ d(e^ε + 1) − k`, so it is
//!   unimodal with its real minimum at exactly `k/(e^ε + 1)`, and the best integer is
//!   `⌊k/(e^ε+1)⌋` or `⌈k/(e^ε+1)⌉` ([`variance_optimal_subset_size`]). The ceiling rule stays
//!   the default (it is the published one, and its excess variance over the optimum is
//!   O(1/d²) relative); any `d ∈ [1, k−1]` can be asked for with
//!   [`SubsetSelection::with_subset_size`].
//! * Sampling (Ye & Barg, Section III): with probability `ρ = d e^ε/(d e^ε + k − d)` the report
//!   contains x plus `d − 1` uniform distinct items of `[k]∖{x}`; otherwise `d` uniform distinct
//!   items of `[k]∖{x}`. Then `Q(S|x) = ρ/C(k−1, d−1)` for `x ∈ S` and `(1−ρ)/C(k−1, d)` for
//!   `x ∉ S`, which is the channel above. The subsets are drawn exactly: with Floyd's
//!   algorithm for small d, and for d ≥ k/16 by filling the row with i.i.d. Bernoulli(d/k)
//!   bits and then removing or adding uniformly chosen items until exactly m are left
//!   (`SubsetSelection::sample_with`; 2.2× faster than Floyd at k = 10⁴, ε = 1).
//! * Estimator (Wang et al. 2016, eq. (10)): per-bit counts `c_j`; with `a = P(j ∈ S | x = j)
//!   = ρ` and `b = P(j ∈ S | x ≠ j) = (d − ρ)/(k − 1)`, `p̂_j = (c_j/n − b)/(a − b)` is
//!   unbiased.
//!
//! Exact privacy: ρ is the float value of `1/(1 + (k − d)/(d e^ε))` rounded down by
//! `PRIVACY_MARGIN_ULPS` ulps (below the real value), lowered further ulp by ulp in the
//! unlikely case the computed realized ε still exceeds ε, and drawn exactly (`BernoulliThreshold`). The realized
//! guarantee of the float ρ, `ln(ρ/C(k−1,d−1)) − ln((1−ρ)/C(k−1,d)) = ln ρ − ln(1−ρ) +
//! ln((k−d)/d)`, is increasing in ρ and so never exceeds ε; the estimator uses this ρ.
//!
//! # Simulating the aggregate
//! [`SubsetSelection::simulate`] draws the per-bit counts of `true_counts[x]` users holding
//! each x with exactly the joint law of privatizing them one by one (the counts are *not*
//! independent: every report has d ones), in `O(k · #states)` work instead of `O(n d)`:
//!
//! 1. Mixture: the report of a user holding x is, with probability
//!    `t = (ρk − d)/(k − d)`, a *pure in* report (x plus `d − 1` uniform items of
//!    `[k]∖{x}`), and otherwise a uniform d-subset of `[k]`, which does not depend on x
//!    (*value-free*). Check: for `x ∈ S`, `t/C(k−1, d−1) + (1 − t)/C(k, d) =
//!    (t + (1 − t)d/k)/C(k−1, d−1) = ρ/C(k−1, d−1)`; for `x ∉ S`, `(1 − t)/C(k, d) =
//!    (1 − t)(k − d)/k · 1/C(k−1, d) = (1 − ρ)/C(k−1, d)`. `t ∈ (0, 1)` because the realized
//!    ε is positive (ρ > d/k). With the float ρ = m/2^e, t is the rational
//!    `(mk − d·2^e)/((k − d)2^e)` (below 2^118: k ≤ 2^32 and e ≤ 86), drawn exactly one
//!    user at a time for ≤ 8 users, else by `rand_distr`'s binomial with the nearest double.
//!    At ε = 0.5, k = 10^4, t ≈ 0.2: four users in five are value-free.
//! 2. Scan: choosing an `r`-subset of an ordered set item by item, the next item is taken
//!    with probability `r/M` (`M` = items left to choose from), and then `r` drops by one.
//!    Any fixed order of the items will do; the items holding pure in users come first. A
//!    pure in user is *pending* while its own value is ahead (`M` = items left − 1, its own
//!    value excluded); value-free users, and pure in users whose value has passed, have
//!    `M` = items left: one *free* pool. Users are kept only as counts per r-state.
//! 3. At item x, the pure in users holding x leave the pending pool. A pending user's
//!    history does not depend on which value ahead it holds, so they are a uniformly random
//!    subset of the pending pool: their split over the r-states is multivariate
//!    hypergeometric. They report x and join the free pool after this item.
//! 4. Every other user takes item x with probability r/M: for `N` users in a state,
//!    `Binomial(N, r/M)` of them do, and move to `r − 1`. `c_x` = the pure in users holding x
//!    + these binomials.
//! 5. Blocks: once the pending pool is empty (after the items holding pure in users), the
//!    remaining items are cut into blocks of `BLOCK_ITEMS` = 256 (in scan order). Block by
//!    block, a user with r picks left among M items has `Hypergeometric(M, L, r)` of them in
//!    the next L items; per r-state the split of its users over these outcomes is
//!    multinomial, drawn as a chain of conditional binomials from the mode outwards (it stops
//!    once every user is placed). Given how many picks each user has in a block, those picks
//!    are a uniform subset of the block's items, so each block is an independent scan (step
//!    4, one pool of at most 257 states), run in parallel.
//!
//! Cost model (k = 10^4, ε = 0.5, d = 3775, n = 10^6): the r-states in use spread like a
//! random walk, ±5 standard deviations of `Hypergeometric(k, i, d)` — about 190 states on
//! average over the scan. One scan of a pool costs `k × #states` binomial draws (1.9·10^6
//! draws, ≈ 60 ns each, mostly `rand_distr`'s BTPE: 0.11–0.13 s measured on an idle core);
//! the old three pools (pending in, pending out, done) cost that two to three times over
//! unless the values were few and early. The mixture (step 1) leaves one pending pool of
//! pure in users, and the scan order (step 2) limits it to the occupied items (10 for
//! `unif:10`), so the cost is one pool. Step 5 replaces the per-item draws of the 190 wide
//! states by one multinomial per state and block (≈ 40 outcomes drawn per state at
//! L = 256) plus a scan of narrow states (picks within a block: ≈ 50 states): about
//! `(k/L)·190·40 + k·50 ≈ 8·10^5` draws (an estimate), and the block scans parallel.
//! Measured per call, n = 10^6 (`cargo bench --bench mechanisms -- ss/simulate`, old and new
//! interleaved on a loaded 2-core machine): geometric(0.8) 182–212 → 134–138 ms, 10 values
//! 531–579 → 136–142 ms, 25 values 535–574 → 142–158 ms, all k values 586–667 → 465–510 ms;
//! on one thread, block splitting alone took unif:10 from 247 to 125–134 ms. A dense
//! distribution (every value held) keeps the pending pool to the end and costs two scans. One simulation is bounded below by the draws: an exact
//! sampler must at least resolve every user's state at the ±5σ resolution, and no closed
//! form for the joint law of the count vector of N uniform d-subsets is known to us.
//!
//! Streams: the mixture, the pending phase and the block split use `stream(key, 0)`; block
//! b's scan uses `stream(key, 1 + b)`. Block boundaries depend only on k and the data, so a
//! seeded result does not depend on the thread count; it is a different draw from
//! `privatize` on the same seed (and from this module's simulation before the mixture and
//! the blocks). Binomial variates come from `rand_distr` (BTPE / inversion) except for counts
//! ≤ 8, which are drawn one Bernoulli at a time (exact integer samplers for `r/M` and `t`, a
//! uniform 53-bit double against the conditional probability in the block split). A
//! multivariate hypergeometric split draws a uniform random set of positions (Floyd) when it
//! moves (or leaves) at most 4096 users; larger ones first chain univariate hypergeometric
//! variates over the states, largest first (`rand_distr`'s H2PE when the mode is ≥ 16, else
//! an exact one-marked-item-at-a-time draw), until the rest is small enough for Floyd. The
//! law is exact up to double-precision arithmetic: `rand_distr`'s rejection / inversion
//! samplers, the rounding of `r/M` and t to doubles, and, in the block split, the
//! hypergeometric weights (a product of ratios from the mode, relative error ~10^-14) with
//! the outcomes whose weight is below 10^-30 of the mode's left out (their total
//! probability is below 10^-27, far under the resolution of the doubles that carry the
//! rest). That arithmetic limits one simulation to 2^40 users
//! (`MAX_HYPERGEOMETRIC_USERS`; more users: simulate them in parts, whose aggregates add up).

use super::randomized_response::{epsilon_too_small, round_down, PRIVACY_MARGIN_ULPS};
use super::unary_encoding::BernoulliLanes;
use super::{
    check_domain, check_epsilon, clear_bit, clear_padding, get_bit, ones, set_bit, BitMechanism,
    SymmetricEstimator,
};
use crate::error::{Error, Result};
use crate::rng::{hypergeometric, stream, uniform_below_u64, BernoulliThreshold, Key, StreamRng};
use rand_core::Rng;
use rand_distr::{Binomial, Distribution};
use std::collections::HashSet;

/// The default subset size `⌈k/(e^ε + 1)⌉`, clamped to `[1, k − 1]` (computed in f64).
pub fn default_subset_size(k: u64, epsilon: f64) -> Result<u64> {
    check_domain(k)?;
    check_epsilon(epsilon)?;
    let d = (k as f64 / (epsilon.exp() + 1.0)).ceil() as u64;
    Ok(d.clamp(1, k - 1))
}

/// `n · Σ_j Var(p̂_j)` at the uniform distribution for subset size d, for the ideal channel
/// (users drawn i.i.d. from the uniform distribution): `(k−1)²(d(e^ε−1)+k)² / (k d (k−d)
/// (e^ε−1)²)`. With `f = d/k` (the average bit frequency), `Var(p̂_j) = f(1−f)/(n(a−b)²)` and
/// `a − b = d(k−d)(e^ε−1)/((k−1)(d e^ε + k − d))`.
pub fn variance_at_uniform(k: u64, epsilon: f64, d: u64) -> f64 {
    let (k, d) = (k as f64, d as f64);
    let c = epsilon.exp_m1();
    let top = (k - 1.0) * (d * c + k);
    top * top / (k * d * (k - d) * c * c)
}

/// The integer d in `[1, k − 1]` minimizing [`variance_at_uniform`]: `⌊k/(e^ε+1)⌋` or
/// `⌈k/(e^ε+1)⌉` (the variance is unimodal in d with its real minimum at `k/(e^ε+1)`; see
/// the module documentation). Ties go to the larger d.
pub fn variance_optimal_subset_size(k: u64, epsilon: f64) -> Result<u64> {
    let up = default_subset_size(k, epsilon)?;
    let down = (k as f64 / (epsilon.exp() + 1.0)).floor() as u64;
    let mut best = up;
    for d in [down, up + 1, up.saturating_sub(1)] {
        if (1..k).contains(&d)
            && variance_at_uniform(k, epsilon, d) < variance_at_uniform(k, epsilon, best)
        {
            best = d;
        }
    }
    Ok(best)
}

#[derive(Clone, Debug)]
pub struct SubsetSelection {
    k: u64,
    epsilon: f64,
    d: u64,
    /// P(x ∈ S | x), as realized.
    rho: f64,
    inside: BernoulliThreshold,
    /// i.i.d. Bernoulli(d/k) bits: the first draw of the dense sampler (see `sample_into`).
    lanes: BernoulliLanes,
}

/// `ln ρ − ln(1 − ρ) + ln((k − d)/d)`: the log-ratio `ln(Q(S|x)/Q(S|x'))` for `x ∈ S ∌ x'`.
fn log_ratio(k: u64, d: u64, rho: f64) -> f64 {
    rho.ln() - (-rho).ln_1p() + ((k - d) as f64 / d as f64).ln()
}

impl SubsetSelection {
    /// Subset Selection with the default subset size `⌈k/(e^ε + 1)⌉`.
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        Self::with_subset_size(k, epsilon, default_subset_size(k, epsilon)?)
    }

    /// Subset Selection reporting subsets of size `d ∈ [1, k − 1]`.
    pub fn with_subset_size(k: u64, epsilon: f64, d: u64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        if !(1..k).contains(&d) {
            return Err(Error::Value(format!(
                "the subset size d must lie in [1, k − 1] = [1, {}], got {d}",
                k - 1
            )));
        }
        // ρ = d e^ε/(d e^ε + k − d), written so that e^ε = inf gives 1 instead of NaN.
        let ideal = 1.0 / (1.0 + (k - d) as f64 / (d as f64 * epsilon.exp()));
        let mut rho = round_down(ideal, PRIVACY_MARGIN_ULPS);
        let mut steps = 0;
        while log_ratio(k, d, rho) > epsilon && steps < 64 {
            rho = round_down(rho, 1);
            steps += 1;
        }
        let realized = log_ratio(k, d, rho);
        if !(realized > 0.0) {
            return Err(epsilon_too_small(epsilon));
        }
        if realized > epsilon {
            return Err(Error::Value(format!(
                "epsilon = {epsilon:?} cannot be realized in double precision with k = {k}, d = {d}"
            )));
        }
        let inside = BernoulliThreshold::new(rho)?;
        Ok(Self {
            k,
            epsilon,
            d,
            rho,
            inside,
            lanes: BernoulliLanes::new(d as f64 / k as f64)?,
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`).
    ///
    /// A simulation holds two arrays of k counts (the pure in users per value, the result);
    /// per r-state (d + 1 of them) the two pools and the next states of the block split, the
    /// states being split and the two splits; Floyd's set of at most `FLOYD_MAX` positions;
    /// for the free phase its items (u32) and counts, the blocks' histograms of picks, and per
    /// thread one block's pool and the weights of a split.
    pub fn footprint(&self, op: super::Operation) -> crate::memory::Footprint {
        let f = super::vector_footprint("SubsetSelection", op, self.k, self.k);
        match op {
            super::Operation::Simulate { .. } => {
                let blocks = self.k.div_ceil(BLOCK_ITEMS as u64);
                let threads = rayon::current_num_threads() as u64;
                f.add("pure in users per value", self.k, 8)
                    .add("pools of r-states", 3 * (self.d + 1), 8)
                    .add("splits of r-states", 3 * (self.d + 1), 16)
                    .add("Floyd positions", FLOYD_MAX, 48)
                    .add("free-phase items and counts", self.k, 12)
                    .add("block histograms", blocks * (BLOCK_ITEMS as u64 + 1), 8)
                    .add(
                        "block pools and split weights",
                        (threads + 1) * 6 * (BLOCK_ITEMS as u64 + 1),
                        8,
                    )
            }
            _ => f,
        }
    }

    /// d: the number of items in every report.
    pub fn subset_size(&self) -> u64 {
        self.d
    }

    /// `(a, b)`: the probability that bit j is set when `x = j`, and when `x ≠ j`
    /// (`a = ρ`, `b = (d − ρ)/(k − 1)`).
    pub fn probabilities(&self) -> (f64, f64) {
        (self.rho, (self.d as f64 - self.rho) / (self.k - 1) as f64)
    }

    /// `(Q(S|x) for x ∈ S, for x ∉ S)` as realized: `ρ/C(k−1, d−1)`, `(1−ρ)/C(k−1, d)`
    /// (they underflow to 0 for large k; use [`realized_epsilon`](Self::realized_epsilon)).
    pub fn subset_probabilities(&self) -> (f64, f64) {
        let (k1, d) = (self.k - 1, self.d);
        (
            self.rho / binomial_coefficient(k1, d - 1),
            (1.0 - self.rho) / binomial_coefficient(k1, d),
        )
    }

    /// The exact guarantee of the channel used (≤ ε): `ln ρ − ln(1 − ρ) + ln((k − d)/d)`.
    pub fn realized_epsilon(&self) -> f64 {
        log_ratio(self.k, self.d, self.rho)
    }

    /// Row x of the channel matrix over the `2^k` outputs (output o ↔ bit j = `(o >> j) & 1`;
    /// nonzero only on the outputs with d bits set). Needs `row.len() == 2^k`.
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (with_x, without_x) = self.subset_probabilities();
        for (o, q) in row.iter_mut().enumerate() {
            let o = o as u64;
            *q = if o.count_ones() as u64 != self.d {
                0.0
            } else if (o >> x) & 1 == 1 {
                with_x
            } else {
                without_x
            };
        }
    }

    /// The estimator algebra (`mechanisms::SymmetricEstimator`): estimate, expected
    /// frequencies and channel products of the `Estimator` trait all come from it.
    pub(crate) fn symmetric(&self) -> SymmetricEstimator {
        let (high, low) = self.probabilities();
        SymmetricEstimator { high, low }
    }

    /// Per-bit counts of privatizing `true_counts[x]` users holding each value x (see the
    /// module documentation: exact joint law, `O(k × #states)` work).
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        self.simulate_with(key, true_counts, FLOYD_MAX, BLOCK_ITEMS)
    }

    /// [`simulate`](Self::simulate) with the threshold between the two hypergeometric
    /// split methods as a parameter (tests force each method with it).
    fn simulate_with(
        &self,
        key: &Key,
        true_counts: &[u64],
        floyd_max: u64,
        block: usize,
    ) -> Result<Vec<u64>> {
        if true_counts.len() as u64 != self.k {
            return Err(Error::Value(format!(
                "true_counts must have length k = {}, got {}",
                self.k,
                true_counts.len()
            )));
        }
        super::split_simulation_users("SubsetSelection", self.k, true_counts)?;
        let k = self.k as usize;
        self.footprint(super::Operation::Simulate { users: 0 })
            .check()?;
        let mut rng = stream(key, 0);
        // 1. Pure in users per value (the rest are value-free).
        let pure_in = self.pure_in_fraction();
        let mut pure = crate::memory::allocate_zeroed::<u64>(k, "pure in users per value")?;
        for (chunk, counts) in pure
            .chunks_mut(SCAN_CHECK_ITEMS)
            .zip(true_counts.chunks(SCAN_CHECK_ITEMS))
        {
            crate::interrupt::check()?;
            for (p, &n) in chunk.iter_mut().zip(counts) {
                *p = pure_in.count(&mut rng, n);
            }
        }
        let d = self.d as usize;
        let users: u64 = true_counts.iter().sum();
        let pure_total: u64 = pure.iter().sum();
        let mut pending = Pool::new(d);
        let mut free = Pool::new(d);
        pending.add(d - 1, pure_total);
        free.add(d, users - pure_total);
        let mut counts = crate::memory::allocate_zeroed::<u64>(k, "the per-bit counts")?;
        let mut taken = Vec::new();
        let mut scratch = Scratch::default();
        // 2. The items holding pure in users first (any fixed order of the items is a valid
        //    scan order): the pending pool empties after them.
        let occupied = (0..k).filter(|&x| pure[x] > 0);
        for (step, x) in occupied.enumerate() {
            crate::interrupt::check()?;
            let left = (k - step) as u64; // items not scanned yet, x included
                                          // 3. The users holding x leave the pending pool.
            pending.take(&mut rng, pure[x], &mut taken, &mut scratch, floyd_max);
            // 4. Everyone else takes item x with probability r/M.
            let c =
                pure[x] + pending.pick_item(&mut rng, left - 1) + free.pick_item(&mut rng, left);
            for &(r, h) in &taken {
                free.add(r, h);
            }
            counts[x] = c;
        }
        debug_assert!(pending.total == 0);
        // 5. The other items: only value-free users are left, split over blocks of items.
        let rest: Vec<u32> = (0..k).filter(|&x| pure[x] == 0).map(|x| x as u32).collect();
        let rest_counts = simulate_free_blocks(key, &mut rng, free, &rest, block)?;
        for (&x, c) in rest.iter().zip(rest_counts) {
            counts[x as usize] = c;
        }
        Ok(counts)
    }

    /// The probability `t = (ρk − d)/(k − d)` that a user is a *pure in* user in the mixture
    /// decomposition of the channel (module documentation), as an exact rational of the float ρ.
    fn pure_in_fraction(&self) -> Rational {
        let (mantissa, exponent) = dyadic(self.rho);
        let (k, d) = (self.k as u128, self.d as u128);
        // ρ = mantissa/2^exponent with exponent ≤ 53 + 33 (ρ > d/k ≥ 2^-32): the numerator
        // is below 2^85 and the denominator below 2^118.
        let scale = 1u128 << exponent;
        Rational::new(mantissa as u128 * k - d * scale, (k - d) * scale)
    }
}

/// `(m, e)` with `x = m/2^e` exactly and m odd (or x = 0), for a finite `x ≥ 0`.
fn dyadic(x: f64) -> (u64, u32) {
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as u32;
    let fraction = bits & ((1 << 52) - 1);
    let (mut m, mut e) = if biased == 0 {
        (fraction, 1074)
    } else {
        (fraction | 1 << 52, 1075 - biased)
    };
    if m == 0 {
        return (0, 0);
    }
    let zeros = m.trailing_zeros().min(e);
    m >>= zeros;
    e -= zeros;
    (m, e)
}

/// A probability `num/den` (`0 ≤ num ≤ den`, `den ≥ 1`), drawn exactly one user at a time
/// and through `rand_distr`'s binomial (with the nearest double) for many users.
#[derive(Clone, Copy, Debug)]
struct Rational {
    num: u128,
    den: u128,
    value: f64,
}

impl Rational {
    fn new(num: u128, den: u128) -> Self {
        assert!(num <= den && den >= 1);
        // Both conversions are correctly rounded; the quotient is within 1.5 ulp of num/den.
        Self {
            num,
            den,
            value: num as f64 / den as f64,
        }
    }

    /// Bernoulli(num/den) exactly: a uniform integer below den by rejection on
    /// `⌈log2 den⌉`-bit words (each accepted with probability > 1/2).
    fn bernoulli(&self, rng: &mut StreamRng) -> bool {
        let bits = 128 - (self.den - 1).leading_zeros().min(127);
        loop {
            let word = (rng.next_u64() as u128) << 64 | rng.next_u64() as u128;
            let u = word >> (128 - bits);
            if u < self.den {
                return u < self.num;
            }
        }
    }

    /// Binomial(n, num/den): exact for `n ≤ SMALL_BINOMIAL`, else `rand_distr` with the
    /// nearest double (the same standard as the scan's `Binomial(c, r/M)`).
    fn count(&self, rng: &mut StreamRng, n: u64) -> u64 {
        if n <= SMALL_BINOMIAL {
            (0..n).filter(|_| self.bernoulli(rng)).count() as u64
        } else {
            Binomial::new(n, self.value).expect("0 ≤ t ≤ 1").sample(rng)
        }
    }
}

impl BitMechanism for SubsetSelection {
    fn domain(&self) -> u64 {
        self.k
    }
    fn bits(&self) -> u64 {
        self.k
    }
    #[inline]
    fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]) {
        self.sample_with(rng, x, row, DENSE_SAMPLER_MIN_FRACTION)
    }
    fn valid_row(&self, row: &[u8]) -> bool {
        ones(row) == self.d
    }
}

/// The dense sampler is used when `d ≥ k / DENSE_SAMPLER_MIN_FRACTION` (see
/// [`SubsetSelection::sample_with`]); below it Floyd's d draws cost less than filling k bits.
const DENSE_SAMPLER_MIN_FRACTION: u64 = 16;

impl SubsetSelection {
    /// One report (Ye & Barg, Section III): with probability ρ, x plus a uniform
    /// (d − 1)-subset of `[k]∖{x}`, else a uniform d-subset of `[k]∖{x}`. The uniform
    /// m-subset of `[k]∖{x}` is drawn exactly by one of two samplers:
    ///
    /// * Floyd's algorithm (small d): m uniform draws, the row itself as the set; a uniform
    ///   m-subset of `[0, k − 1)` mapped onto `[k]∖{x}` by `t ↦ t + (t ≥ x)`.
    /// * Fill and adjust (d ≥ k/16): every bit i.i.d. Bernoulli(d/k) with
    ///   [`BernoulliLanes::fill`] (≈ 2.7 random words per 64 bits), bit x cleared; given
    ///   their number c, the set bits are a uniform c-subset of `[k]∖{x}`. Then uniformly
    ///   chosen set bits are cleared while c > m (a uniform position, redrawn until it is a
    ///   set bit), or uniformly chosen clear bits other than x are set while c < m. Removing
    ///   (adding) uniform elements one at a time from (to) a uniform c-subset leaves a
    ///   uniform m-subset, whatever c was, so the law is exact; only |c − m| ≈ √(k·d/k)
    ///   positions are adjusted. It replaces d scattered draws and bit updates (≈ 2700 at
    ///   k = 10⁴, ε = 1) with a sequential fill.
    fn sample_with(&self, rng: &mut StreamRng, x: u64, row: &mut [u8], dense_fraction: u64) {
        let inside = self.inside.sample(rng);
        let m = self.d - inside as u64;
        if self.d.saturating_mul(dense_fraction) < self.k {
            let n = self.k - 1;
            for j in (n - m)..n {
                let t = uniform_below_u64(rng, j + 1);
                let t = t + (t >= x) as u64;
                if get_bit(row, t) {
                    set_bit(row, j + (j >= x) as u64);
                } else {
                    set_bit(row, t);
                }
            }
        } else {
            self.lanes.fill(rng, row);
            clear_padding(row, self.k);
            clear_bit(row, x);
            let mut c = ones(row);
            while c > m {
                let t = uniform_below_u64(rng, self.k);
                if get_bit(row, t) {
                    clear_bit(row, t);
                    c -= 1;
                }
            }
            while c < m {
                let t = uniform_below_u64(rng, self.k);
                if t != x && !get_bit(row, t) {
                    set_bit(row, t);
                    c += 1;
                }
            }
        }
        if inside {
            set_bit(row, x);
        }
    }
}

/// `C(n, r)` as f64 (exact while it fits in 53 bits).
fn binomial_coefficient(n: u64, r: u64) -> f64 {
    let r = r.min(n - r);
    (0..r).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// Counts at most this large are drawn one Bernoulli at a time (exact, cheap).
const SMALL_BINOMIAL: u64 = 8;
/// Hypergeometric splits moving at most this many users draw a uniform set of positions.
const FLOYD_MAX: u64 = 1 << 12;

/// Items of the simulation scan between two interruption checks.
const SCAN_CHECK_ITEMS: usize = 256;

/// Binomial(n, r/m) for `0 ≤ r ≤ m`, `m ≥ 1`.
fn binomial(rng: &mut StreamRng, n: u64, r: u64, m: u64) -> u64 {
    debug_assert!(r <= m && m >= 1);
    if n == 0 || r == 0 {
        0
    } else if r >= m {
        n
    } else if n <= SMALL_BINOMIAL {
        (0..n).filter(|_| uniform_below_u64(rng, m) < r).count() as u64
    } else {
        Binomial::new(n, r as f64 / m as f64)
            .expect("0 < r/m < 1")
            .sample(rng)
    }
}

/// Reusable buffers of the hypergeometric splits.
#[derive(Default)]
struct Scratch {
    set: HashSet<u64>,
    positions: Vec<u64>,
}

/// Users grouped by how many items they still have to pick (r ∈ [0, d]).
struct Pool {
    count: Vec<u64>,
    /// Nonzero counts lie in `lo..hi` (empty when `lo == hi`).
    lo: usize,
    hi: usize,
    total: u64,
}

impl Pool {
    fn new(d: usize) -> Self {
        Self {
            count: vec![0; d + 1],
            lo: 0,
            hi: 0,
            total: 0,
        }
    }

    fn add(&mut self, r: usize, c: u64) {
        if c == 0 {
            return;
        }
        self.count[r] += c;
        self.total += c;
        if self.lo == self.hi {
            (self.lo, self.hi) = (r, r + 1);
        } else {
            self.lo = self.lo.min(r);
            self.hi = self.hi.max(r + 1);
        }
    }

    fn trim(&mut self) {
        while self.lo < self.hi && self.count[self.lo] == 0 {
            self.lo += 1;
        }
        while self.hi > self.lo && self.count[self.hi - 1] == 0 {
            self.hi -= 1;
        }
    }

    /// Each user takes the current item with probability r/m (`m` items left to choose
    /// from) and moves to r − 1. Returns how many took it.
    fn pick_item(&mut self, rng: &mut StreamRng, m: u64) -> u64 {
        let mut picked = 0;
        // Ascending r: state r receives the movers of r + 1 only after it was processed.
        for r in self.lo.max(1)..self.hi {
            let c = self.count[r];
            if c == 0 {
                continue;
            }
            let moved = binomial(rng, c, r as u64, m);
            self.count[r] -= moved;
            self.count[r - 1] += moved;
            picked += moved;
        }
        if self.lo > 0 && self.count[self.lo - 1] > 0 {
            self.lo -= 1;
        }
        self.trim();
        picked
    }

    /// Remove a uniformly random set of `m ≤ total` users; `taken` receives how many came
    /// from each state, as `(r, count)` pairs (a multivariate hypergeometric split).
    ///
    /// While both the users still to draw and the users to leave number more than
    /// `floyd_max`, the states are visited largest first and each gets a univariate
    /// hypergeometric draw conditional on the previous ones (a valid chain in any order
    /// fixed by the known counts). The rest — a split moving, or leaving, at most
    /// `floyd_max` users — draws the positions of the moved users directly (Floyd). Largest
    /// first means the chain mostly meets large modes (H2PE, O(1)) and hands the thin tail
    /// states to Floyd.
    fn take(
        &mut self,
        rng: &mut StreamRng,
        m: u64,
        taken: &mut Vec<(usize, u64)>,
        scratch: &mut Scratch,
        floyd_max: u64,
    ) {
        taken.clear();
        debug_assert!(m <= self.total);
        if m == 0 {
            return;
        }
        let mut states: Vec<(usize, u64)> = (self.lo..self.hi)
            .map(|r| (r, self.count[r]))
            .filter(|&(_, c)| c > 0)
            .collect();
        let (mut population, mut need) = (self.total, m);
        let mut next = 0;
        if need.min(population - need) > floyd_max {
            states.sort_by(|a, b| b.1.cmp(&a.1)); // stable: ties stay in r order
            while need.min(population - need) > floyd_max {
                let (r, c) = states[next];
                let h = hypergeometric(rng, population, c, need);
                population -= c;
                need -= h;
                if h > 0 {
                    taken.push((r, h));
                }
                next += 1;
            }
        }
        // The remaining states' users are laid out state by state at positions
        // [0, population); a uniform set of positions is a uniform set of users.
        let rest = &states[next..];
        let (size, complement) = if need <= population - need {
            (need, false)
        } else {
            (population - need, true)
        };
        floyd_positions(rng, population, size, scratch);
        let positions = &scratch.positions;
        let (mut seen, mut end) = (0, 0u64);
        for &(r, c) in rest {
            end += c;
            let start = seen;
            while seen < positions.len() && positions[seen] < end {
                seen += 1;
            }
            let chosen = (seen - start) as u64;
            let h = if complement { c - chosen } else { chosen };
            if h > 0 {
                taken.push((r, h));
            }
        }
        for &(r, h) in taken.iter() {
            self.count[r] -= h;
        }
        self.total -= m;
        self.trim();
    }
}

/// A uniform random `size`-subset of `[0, n)` (Floyd's algorithm), sorted, into
/// `scratch.positions`.
fn floyd_positions(rng: &mut StreamRng, n: u64, size: u64, scratch: &mut Scratch) {
    scratch.set.clear();
    for j in (n - size)..n {
        let t = uniform_below_u64(rng, j + 1);
        if !scratch.set.insert(t) {
            scratch.set.insert(j);
        }
    }
    scratch.positions.clear();
    scratch.positions.extend(scratch.set.iter().copied());
    scratch.positions.sort_unstable();
}

/// Items per block of the free phase (part of the reproducibility contract: block b draws
/// from `stream(key, 1 + b)`).
const BLOCK_ITEMS: usize = 256;

/// Relative weight below which a cell of a block split's hypergeometric law is left out
/// (module documentation: far below the resolution of double precision).
const NEGLIGIBLE_WEIGHT: f64 = 1e-30;

/// The per-item counts of the value-free users of `free` over the items `rest` (in that
/// order; the pool's states count items left = `rest.len()`).
///
/// Sequential split (stream `rng`): block b of `rest` (`block` items, the last one shorter)
/// receives from each user with r picks left among M items `Hypergeometric(M, L_b, r)` of
/// them; per state, the users' split over the outcomes is multinomial. Given its histogram
/// of picks, each block is an independent scan (stream `1 + b`), in parallel.
fn simulate_free_blocks(
    key: &Key,
    rng: &mut StreamRng,
    mut free: Pool,
    rest: &[u32],
    block: usize,
) -> Result<Vec<u64>> {
    let n = rest.len();
    let mut result = crate::memory::allocate_zeroed::<u64>(n, "the counts of the free phase")?;
    if n == 0 {
        return Ok(result);
    }
    let blocks = n.div_ceil(block);
    let width = block + 1;
    let mut histograms =
        crate::memory::allocate_zeroed::<u64>(blocks * width, "block histograms of picks")?;
    let mut next = vec![0u64; free.count.len()];
    let mut weights = Weights::default();
    for (b, histogram) in histograms.chunks_mut(width).enumerate() {
        crate::interrupt::check()?;
        let left = (n - b * block) as u64;
        let size = block.min(n - b * block) as u64;
        if size == left {
            // The last block: every pick left falls in it.
            for r in free.lo..free.hi {
                histogram[r] += free.count[r];
            }
            break;
        }
        for r in free.lo..free.hi {
            let c = free.count[r];
            if c == 0 {
                continue;
            }
            weights.hypergeometric(left, size, r as u64);
            weights.split(rng, c, |j, h| {
                histogram[j as usize] += h;
                next[r - j as usize] += h;
            });
        }
        std::mem::swap(&mut free.count, &mut next);
        next[free.lo..free.hi].fill(0);
        free.lo = 0;
        free.hi = free.count.len();
        free.trim();
    }
    let scan = |b: usize, out: &mut [u64]| -> Result<()> {
        crate::interrupt::check()?;
        let histogram = &histograms[b * width..(b + 1) * width];
        let mut pool = Pool::new(block);
        for (j, &c) in histogram.iter().enumerate() {
            pool.add(j, c);
        }
        let mut rng = stream(key, 1 + b as u64);
        let size = out.len() as u64;
        for (t, c) in out.iter_mut().enumerate() {
            *c = pool.pick_item(&mut rng, size - t as u64);
        }
        Ok(())
    };
    if blocks == 1 {
        scan(0, &mut result)?;
    } else {
        use rayon::prelude::*;
        result
            .par_chunks_mut(block)
            .enumerate()
            .try_for_each(|(b, out)| scan(b, out))?;
    }
    Ok(result)
}

/// The weights of one hypergeometric law on the outcomes `lo..lo + w.len()` (relative to
/// the mode, tails below `NEGLIGIBLE_WEIGHT` left out), with prefix and suffix sums (each
/// accumulated from its outer end, so a tail's mass keeps its relative precision).
#[derive(Default)]
struct Weights {
    lo: u64,
    mode: usize,
    w: Vec<f64>,
    below: Vec<f64>,
    prefix: Vec<f64>,
    suffix: Vec<f64>,
}

impl Weights {
    /// Hypergeometric(population, draws, marked): picks among `draws` items of a user with
    /// `marked` picks left among `population` items.
    fn hypergeometric(&mut self, population: u64, draws: u64, marked: u64) {
        let (m, l, r) = (population as f64, draws as f64, marked as f64);
        let lo = (marked + draws).saturating_sub(population);
        let hi = marked.min(draws);
        let mode = ((marked as u128 + 1) * (draws as u128 + 1) / (population as u128 + 2)) as u64;
        let mode = mode.clamp(lo, hi);
        // Down from the mode: P(j − 1)/P(j) = j(M − r − L + j)/((r − j + 1)(L − j + 1)).
        self.below.clear();
        let (mut j, mut v) = (mode, 1.0f64);
        while j > lo {
            let jf = j as f64;
            v *= jf * (m - r - l + jf) / ((r - jf + 1.0) * (l - jf + 1.0));
            if v < NEGLIGIBLE_WEIGHT {
                break;
            }
            self.below.push(v);
            j -= 1;
        }
        self.lo = j;
        self.w.clear();
        self.w.extend(self.below.iter().rev());
        self.mode = self.w.len();
        self.w.push(1.0);
        // Up: P(j + 1)/P(j) = (r − j)(L − j)/((j + 1)(M − r − L + j + 1)).
        let (mut j, mut v) = (mode, 1.0f64);
        while j < hi {
            let jf = j as f64;
            v *= (r - jf) * (l - jf) / ((jf + 1.0) * (m - r - l + jf + 1.0));
            if v < NEGLIGIBLE_WEIGHT {
                break;
            }
            self.w.push(v);
            j += 1;
        }
        let n = self.w.len();
        self.prefix.clear();
        let mut acc = 0.0;
        for &v in &self.w {
            acc += v;
            self.prefix.push(acc);
        }
        self.suffix.clear();
        self.suffix.resize(n, 0.0);
        let mut acc = 0.0;
        for i in (0..n).rev() {
            acc += self.w[i];
            self.suffix[i] = acc;
        }
    }

    /// Split `c` users multinomially over the outcomes: `f(outcome, users)` for each outcome
    /// that gets users. A chain of conditional binomials from the mode outwards (mode,
    /// mode + 1, mode − 1, mode + 2, …), so that it stops as soon as every user is placed;
    /// each conditional probability is the cell's weight over the mass not yet visited
    /// (one prefix plus one suffix sum).
    fn split(&self, rng: &mut StreamRng, c: u64, mut f: impl FnMut(u64, u64)) {
        let n = self.w.len();
        let (mut a, mut b) = (self.mode, self.mode); // visited: a..=b (none yet)
        let mut left = c;
        let mut first = true;
        while left > 0 {
            let (cell, rest_mass) = if first {
                first = false;
                (self.mode, self.mass_outside(self.mode, self.mode))
            } else {
                let up = b + 1 < n;
                let down = a > 0;
                // Alternate, preferring the side with more mass next.
                let go_up = up && (!down || self.w[b + 1] >= self.w[a - 1]);
                if go_up {
                    b += 1;
                    (b, self.mass_outside(a, b))
                } else if down {
                    a -= 1;
                    (a, self.mass_outside(a, b))
                } else {
                    unreachable!("users left after every outcome")
                }
            };
            let h = if rest_mass <= 0.0 {
                left
            } else {
                let p = self.w[cell] / (self.w[cell] + rest_mass);
                binomial_f64(rng, left, p)
            };
            if h > 0 {
                f(self.lo + cell as u64, h);
                left -= h;
            }
        }
    }

    /// The weight outside `a..=b`.
    fn mass_outside(&self, a: usize, b: usize) -> f64 {
        let below = if a > 0 { self.prefix[a - 1] } else { 0.0 };
        let above = if b + 1 < self.w.len() {
            self.suffix[b + 1]
        } else {
            0.0
        };
        below + above
    }
}

/// Binomial(n, p) for a double p: one uniform double per user for `n ≤ SMALL_BINOMIAL`,
/// else `rand_distr`.
fn binomial_f64(rng: &mut StreamRng, n: u64, p: f64) -> u64 {
    if n <= SMALL_BINOMIAL {
        (0..n)
            .filter(|_| ((rng.next_u64() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p)
            .count() as u64
    } else {
        Binomial::new(n, p).expect("0 ≤ p ≤ 1").sample(rng)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{channel_stats, chi_square};
    use super::super::{aggregate_bits, channel_matrix, privatize_bits, row_bytes};
    use super::*;
    use crate::mechanisms::Estimator;
    use crate::rng::key_from_u64;
    use std::collections::HashMap;

    const EPSILONS: [f64; 5] = [0.1, 0.5, 1.0, 2.0, 5.0];

    /// Upper chi-square quantile at p ≈ 5·10⁻⁴ (z = 3.29, Wilson–Hilferty; accurate to a few
    /// percent for df ≥ 3, conservative enough with this z).
    fn chi2_critical(df: usize) -> f64 {
        let df = df as f64;
        let h = 2.0 / (9.0 * df);
        df * (1.0 - h + 3.29 * h.sqrt()).powi(3)
    }

    /// Pearson chi-square of observed counts (keyed by outcome) against exact probabilities,
    /// pooling the outcomes with expected count < 5 into one cell. Returns (chi2, df).
    fn pooled_chi_square<K: std::hash::Hash + Eq>(
        observed: &HashMap<K, u64>,
        pmf: &[(K, f64)],
        draws: u64,
    ) -> (f64, usize) {
        let n = draws as f64;
        let mass: f64 = pmf.iter().map(|(_, p)| p).sum();
        assert!((mass - 1.0).abs() < 1e-9, "the pmf sums to {mass}");
        let (mut chi2, mut cells) = (0.0, 0usize);
        let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
        let mut seen = 0u64;
        for (key, p) in pmf {
            let o = *observed.get(key).unwrap_or(&0) as f64;
            seen += o as u64;
            let e = p * n;
            if e >= 5.0 {
                chi2 += (o - e) * (o - e) / e;
                cells += 1;
            } else {
                pooled_obs += o;
                pooled_exp += e;
            }
        }
        assert_eq!(seen, draws, "an outcome outside the support was drawn");
        if pooled_exp > 0.0 {
            chi2 += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1e-300);
            cells += 1;
        }
        if pmf.len() == 1 {
            return (0.0, 1); // a point mass: every draw was checked to be that outcome
        }
        assert!(cells >= 2, "too few cells for a chi-square test");
        (chi2, cells - 1)
    }

    fn values_of(true_counts: &[u64]) -> Vec<u32> {
        true_counts
            .iter()
            .enumerate()
            .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
            .collect()
    }

    /// Per-bit counts of privatizing `values` one by one.
    fn privatize_counts(m: &SubsetSelection, seed: u64, values: &[u32]) -> Vec<u64> {
        let width = row_bytes(m.k);
        let mut rows = vec![0u8; values.len() * width];
        privatize_bits(m, &key_from_u64(seed), values, &mut rows).unwrap();
        let mut counts = vec![0u64; m.k as usize];
        aggregate_bits(m, &rows, &mut counts, false).unwrap();
        counts
    }

    /// Exact mean vector and covariance matrix of the per-bit counts.
    fn exact_moments(m: &SubsetSelection, true_counts: &[u64]) -> (Vec<f64>, Vec<Vec<f64>>) {
        let k = m.k as usize;
        let (kf, d, rho) = (m.k as f64, m.d as f64, m.rho);
        let (a, b) = m.probabilities();
        let pair_with_x = rho * (d - 1.0) / (kf - 1.0);
        let pair_without_x = if k > 2 {
            (rho * (d - 1.0) * (d - 2.0) + (1.0 - rho) * d * (d - 1.0)) / ((kf - 1.0) * (kf - 2.0))
        } else {
            0.0
        };
        let mut mean = vec![0.0; k];
        let mut cov = vec![vec![0.0; k]; k];
        for (x, &n) in true_counts.iter().enumerate() {
            let n = n as f64;
            let p = |j: usize| if j == x { a } else { b };
            for i in 0..k {
                mean[i] += n * p(i);
                for j in 0..k {
                    let both = if i == j {
                        p(i)
                    } else if i == x || j == x {
                        pair_with_x
                    } else {
                        pair_without_x
                    };
                    cov[i][j] += n * (both - p(i) * p(j));
                }
            }
        }
        (mean, cov)
    }

    /// Sample means and covariances of repeated count vectors.
    fn sample_moments(runs: &[Vec<u64>]) -> (Vec<f64>, Vec<Vec<f64>>) {
        let (r, k) = (runs.len() as f64, runs[0].len());
        let mut mean = vec![0.0; k];
        for run in runs {
            for (m, &c) in mean.iter_mut().zip(run) {
                *m += c as f64 / r;
            }
        }
        let mut cov = vec![vec![0.0; k]; k];
        for run in runs {
            for i in 0..k {
                for j in 0..k {
                    cov[i][j] += (run[i] as f64 - mean[i]) * (run[j] as f64 - mean[j]) / (r - 1.0);
                }
            }
        }
        (mean, cov)
    }

    /// Means, variances and covariances of `runs` within 5 standard errors of the exact ones
    /// (normal approximation: SE(cov_ij) = √((σ_ii σ_jj + σ_ij²)/R)).
    fn assert_moments_match(what: &str, runs: &[Vec<u64>], mean: &[f64], cov: &[Vec<f64>]) {
        let r = runs.len() as f64;
        let (m, c) = sample_moments(runs);
        let k = mean.len();
        for i in 0..k {
            let se = (cov[i][i] / r).sqrt();
            assert!(
                (m[i] - mean[i]).abs() < 5.0 * se,
                "{what}: mean of bit {i}: {} vs {}",
                m[i],
                mean[i]
            );
            for j in 0..k {
                let se = ((cov[i][i] * cov[j][j] + cov[i][j] * cov[i][j]) / (r - 1.0)).sqrt();
                assert!(
                    (c[i][j] - cov[i][j]).abs() < 5.0 * se,
                    "{what}: cov({i}, {j}): {} vs {} (se {se})",
                    c[i][j],
                    cov[i][j]
                );
            }
        }
    }

    #[test]
    fn default_subset_size_follows_the_rule() {
        assert_eq!(SubsetSelection::new(10, 1.0).unwrap().subset_size(), 3); // 10/3.718 = 2.69
        assert_eq!(SubsetSelection::new(1000, 0.5).unwrap().subset_size(), 378); // 377.5
        assert_eq!(SubsetSelection::new(2, 0.1).unwrap().subset_size(), 1);
        assert_eq!(SubsetSelection::new(100, 30.0).unwrap().subset_size(), 1);
        assert_eq!(SubsetSelection::new(100, 700.0).unwrap().subset_size(), 1);
        assert!(SubsetSelection::new(100, 700.0).unwrap().realized_epsilon() <= 700.0);
        assert!(SubsetSelection::new(100, 800.0).is_err());
    }

    #[test]
    fn channel_is_exactly_epsilon_ldp() {
        for k in [2u64, 3, 7] {
            for eps in EPSILONS {
                for d in 1..k {
                    let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
                    let q = channel_matrix(k, 1 << k, 1 << 20, |x, r| m.channel_row(x, r)).unwrap();
                    let (ratio, sum_err) = channel_stats(&q, k as usize);
                    assert!(
                        sum_err < 1e-12,
                        "k {k} eps {eps} d {d}: rows off by {sum_err}"
                    );
                    assert!(ratio <= eps + 1e-12, "k {k} eps {eps} d {d}: {ratio}");
                    assert!((ratio - m.realized_epsilon()).abs() < 1e-12);
                    // Only outputs with d ones are possible.
                    for (o, &v) in q[..1 << k].iter().enumerate() {
                        assert_eq!(v > 0.0, (o as u64).count_ones() as u64 == d);
                    }
                }
            }
        }
        for k in 2u64..=100 {
            for eps in EPSILONS {
                let default = SubsetSelection::new(k, eps).unwrap();
                let optimal = SubsetSelection::with_subset_size(
                    k,
                    eps,
                    variance_optimal_subset_size(k, eps).unwrap(),
                )
                .unwrap();
                for m in [default, optimal] {
                    let r = m.realized_epsilon();
                    assert!(
                        r <= eps && eps - r < 1e-12,
                        "k {k} eps {eps} d {}: {r}",
                        m.d
                    );
                }
            }
        }
    }

    #[test]
    fn realized_epsilon_is_the_log_ratio_of_the_subset_probabilities() {
        for (k, eps, d) in [(30u64, 0.7, 9u64), (50, 3.0, 2), (12, 0.05, 6)] {
            let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
            let (with_x, without_x) = m.subset_probabilities();
            assert!(((with_x / without_x).ln() - m.realized_epsilon()).abs() < 1e-12);
            // Z normalizes: C(k−1, d−1) Q(with) + C(k−1, d) Q(without) = 1.
            let total = binomial_coefficient(k - 1, d - 1) * with_x
                + binomial_coefficient(k - 1, d) * without_x;
            assert!((total - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn variance_optimal_size_is_the_brute_force_minimum() {
        let mut differ = 0;
        for k in 2u64..=300 {
            for eps in [0.05, 0.1, 0.5, 1.0, 1.7, 2.0, 3.0, 5.0] {
                let brute = (1..k)
                    .min_by(|&x, &y| {
                        variance_at_uniform(k, eps, x)
                            .partial_cmp(&variance_at_uniform(k, eps, y))
                            .unwrap()
                            .then(y.cmp(&x)) // ties to the larger d
                    })
                    .unwrap();
                let optimal = variance_optimal_subset_size(k, eps).unwrap();
                assert_eq!(optimal, brute, "k {k} eps {eps}");
                let default = default_subset_size(k, eps).unwrap();
                assert!(
                    default == optimal || default == optimal + 1,
                    "k {k} eps {eps}"
                );
                if default != optimal {
                    differ += 1;
                    let excess = variance_at_uniform(k, eps, default)
                        / variance_at_uniform(k, eps, optimal)
                        - 1.0;
                    assert!(excess < 0.5, "k {k} eps {eps}: excess {excess}");
                }
            }
        }
        // The two rules do differ (the floor is sometimes better), so both are offered.
        assert!(differ > 0);
    }

    #[test]
    fn variance_formula_matches_the_estimator() {
        // n·Σ Var(p̂_j) at the uniform distribution, from the bit probabilities directly.
        for (k, eps, d) in [(10u64, 1.0, 3u64), (64, 0.5, 20), (7, 2.0, 1)] {
            let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
            let (a, b) = m.probabilities();
            let f = b + (a - b) / k as f64;
            let direct = k as f64 * f * (1.0 - f) / ((a - b) * (a - b));
            let formula = variance_at_uniform(k, eps, d);
            assert!(
                (direct / formula - 1.0).abs() < 1e-9,
                "{direct} vs {formula}"
            );
        }
    }

    #[test]
    fn reports_have_exactly_d_ones_and_the_right_bit_frequencies() {
        for (k, eps) in [(10u64, 1.0), (37, 0.5), (100, 2.0), (9, 0.1)] {
            let m = SubsetSelection::new(k, eps).unwrap();
            let (a, b) = m.probabilities();
            let draws = 100_000usize;
            let x = (k / 3) as u32;
            let width = row_bytes(k);
            let mut rows = vec![0u8; draws * width];
            privatize_bits(&m, &key_from_u64(k), &vec![x; draws], &mut rows).unwrap();
            assert!(rows.chunks_exact(width).all(|row| m.valid_row(row)));
            let mut counts = vec![0u64; k as usize];
            let tally = aggregate_bits(&m, &rows, &mut counts, false).unwrap();
            assert_eq!(tally.invalid, 0);
            for (j, &c) in counts.iter().enumerate() {
                let p = if j as u32 == x { a } else { b };
                let sd = (draws as f64 * p * (1.0 - p)).sqrt();
                assert!(
                    (c as f64 - draws as f64 * p).abs() < 5.0 * sd,
                    "k {k} eps {eps} bit {j}: {c} vs {}",
                    draws as f64 * p
                );
            }
        }
    }

    #[test]
    fn sampler_matches_the_channel_over_all_subsets() {
        for (eps, d) in [(0.5, 2u64), (1.0, 3), (3.0, 1)] {
            let k = 5u64;
            let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
            for x in [0u32, 2, 4] {
                let draws = 200_000usize;
                let mut rows = vec![0u8; draws];
                privatize_bits(
                    &m,
                    &key_from_u64(100 + x as u64),
                    &vec![x; draws],
                    &mut rows,
                )
                .unwrap();
                let mut freq = vec![0.0; 1 << k];
                for &row in &rows {
                    // Output index o has bit j = (o >> j) & 1; the row holds bit j at 0x80 >> j.
                    let o: usize = (0..k).filter(|&j| get_bit(&[row], j)).map(|j| 1 << j).sum();
                    freq[o] += 1.0 / draws as f64;
                }
                let mut probs = vec![0.0; 1 << k];
                m.channel_row(x as u64, &mut probs);
                let cells = probs.iter().filter(|&&p| p > 0.0).count();
                let chi2 = chi_square(&freq, &probs, draws);
                assert!(
                    chi2 < chi2_critical(cells - 1),
                    "eps {eps} d {d} x {x}: {chi2}"
                );
                // No mass outside the weight-d outputs.
                assert!(freq.iter().zip(&probs).all(|(f, p)| *p > 0.0 || *f == 0.0));
            }
        }
    }

    #[test]
    fn both_samplers_match_the_channel_over_all_subsets() {
        // Floyd (fraction 0) and fill-and-adjust (fraction u64::MAX), forced on the same
        // cases, k = 9 (a partial last byte: padding must stay clear), every d.
        let k = 9u64;
        for (fraction, name) in [(0u64, "floyd"), (u64::MAX, "fill")] {
            for (eps, d) in [(0.5, 1u64), (1.0, 3), (2.0, 4), (0.7, 8)] {
                let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
                let x = (d * 2) % k;
                let draws = 150_000usize;
                let mut rng = stream(&key_from_u64(7 + d), fraction % 3);
                let mut freq = vec![0.0; 1 << k];
                for _ in 0..draws {
                    let mut row = [0u8; 2];
                    m.sample_with(&mut rng, x, &mut row, fraction);
                    assert_eq!(row[1] & 0x7F, 0, "{name}: padding bits set");
                    let o: usize = (0..k).filter(|&j| get_bit(&row, j)).map(|j| 1 << j).sum();
                    freq[o] += 1.0 / draws as f64;
                }
                let mut probs = vec![0.0; 1 << k];
                m.channel_row(x, &mut probs);
                assert!(freq.iter().zip(&probs).all(|(f, p)| *p > 0.0 || *f == 0.0));
                let cells = probs.iter().filter(|&&p| p > 0.0).count();
                let chi2 = chi_square(&freq, &probs, draws);
                assert!(
                    chi2 < chi2_critical(cells - 1),
                    "{name} eps {eps} d {d}: {chi2}"
                );
            }
        }
    }

    #[test]
    fn estimator_is_unbiased_and_consistent_with_the_channel() {
        for (k, eps, d) in [(5u64, 0.7, 2u64), (8, 2.0, 1), (6, 0.3, 3), (11, 1.0, 5)] {
            let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let freq = m.expected_frequencies(&p);
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-12, "k {k}: {a} vs {b}");
            }
            // Expected bit frequencies against the channel matrix over all 2^k outputs.
            let mut row = vec![0.0; 1 << k];
            let mut direct = vec![0.0; k as usize];
            for x in 0..k {
                m.channel_row(x, &mut row);
                for (o, &q) in row.iter().enumerate() {
                    for j in 0..k as usize {
                        if (o >> j) & 1 == 1 {
                            direct[j] += p[x as usize] * q;
                        }
                    }
                }
            }
            for (a, b) in freq.iter().zip(&direct) {
                assert!((a - b).abs() < 1e-12, "k {k}: {a} vs {b}");
            }
            // Adjoint identity: <expected_frequencies(p), w> = <p, channel_apply(w)>.
            let w: Vec<f64> = (0..k).map(|j| (j as f64 * 0.37).sin()).collect();
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
        }
    }

    /// Exact pmf of Hypergeometric(population, marked, draws) by the ratio recurrence.
    fn hypergeometric_pmf(population: u64, marked: u64, draws: u64) -> Vec<(u64, f64)> {
        let lo = draws.saturating_sub(population - marked);
        let hi = draws.min(marked);
        // Log-weights: ln P(x+1) − ln P(x) = ln((K − x)(n − x)/((x + 1)(N − K − n + x + 1))).
        let mut log_w = vec![0.0f64];
        for x in lo..hi {
            let ratio = (marked - x) as f64 * (draws - x) as f64
                / ((x + 1) as f64 * ((population - marked + x + 1) - draws) as f64);
            let last = *log_w.last().unwrap();
            log_w.push(last + ratio.ln());
        }
        let top = log_w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = log_w.iter().map(|v| (v - top).exp()).collect();
        let total: f64 = w.iter().sum();
        (lo..=hi).zip(w).map(|(x, v)| (x, v / total)).collect()
    }

    #[test]
    fn hypergeometric_sampler_matches_the_pmf_on_every_branch() {
        let cases = [
            (1000u64, 100u64, 50u64), // direct (a ≤ 64)
            (10_000, 3000, 2000),     // H2PE (mode ≥ 16)
            (1000, 900, 700),         // both reductions, then H2PE
            (1_000_000, 100, 5000),   // a > 64 but mode < 16: direct
            (50, 20, 30),             // draws > population/2
            (7, 3, 4),
        ];
        for (i, &(population, marked, draws)) in cases.iter().enumerate() {
            let mut rng = stream(&key_from_u64(7), i as u64);
            let reps = 40_000u64;
            let mut observed = HashMap::new();
            for _ in 0..reps {
                *observed
                    .entry(hypergeometric(&mut rng, population, marked, draws))
                    .or_insert(0) += 1;
            }
            let pmf = hypergeometric_pmf(population, marked, draws);
            let (chi2, df) = pooled_chi_square(&observed, &pmf, reps);
            assert!(
                chi2 < chi2_critical(df.max(1)),
                "case {i}: chi2 {chi2} df {df}"
            );
        }
    }

    #[test]
    fn pool_take_is_multivariate_hypergeometric_with_both_methods() {
        // Pool with 3 users at r = 0, 5 at r = 2, 2 at r = 3; remove m of them.
        let state = [(0usize, 3u64), (2, 5), (3, 2)];
        let choose = |n: u64, r: u64| binomial_coefficient(n, r);
        for m in [1u64, 4, 8, 10] {
            let mut pmf = Vec::new();
            for h0 in 0..=3u64 {
                for h2 in 0..=5u64 {
                    for h3 in 0..=2u64 {
                        if h0 + h2 + h3 == m {
                            let p = choose(3, h0) * choose(5, h2) * choose(2, h3) / choose(10, m);
                            pmf.push(([h0, h2, h3], p));
                        }
                    }
                }
            }
            for floyd_max in [0u64, 1, u64::MAX] {
                let mut rng = stream(&key_from_u64(m), floyd_max % 7);
                let mut scratch = Scratch::default();
                let mut taken = Vec::new();
                let reps = 30_000u64;
                let mut observed = HashMap::new();
                for _ in 0..reps {
                    let mut pool = Pool::new(3);
                    for &(r, c) in &state {
                        pool.add(r, c);
                    }
                    pool.take(&mut rng, m, &mut taken, &mut scratch, floyd_max);
                    assert_eq!(pool.total, 10 - m);
                    let mut h = [0u64; 3];
                    for &(r, c) in &taken {
                        h[[0usize, 0, 1, 2][r]] += c;
                        assert_eq!(
                            pool.count[r] + c,
                            state.iter().find(|s| s.0 == r).unwrap().1
                        );
                    }
                    *observed.entry(h).or_insert(0) += 1;
                }
                let (chi2, df) = pooled_chi_square(&observed, &pmf, reps);
                assert!(
                    chi2 < chi2_critical(df.max(1)),
                    "m {m} floyd_max {floyd_max}: chi2 {chi2} df {df}"
                );
            }
        }
    }

    #[test]
    fn simulate_has_the_exact_joint_law_on_a_tiny_case() {
        // k = 4, d = 2, users holding 0, 1 and 3 (true counts [1, 1, 0, 1]).
        let m = SubsetSelection::with_subset_size(4, 1.0, 2).unwrap();
        let true_counts = [1u64, 1, 0, 1];
        // Exact law of the count vector by enumerating each user's 6 subsets.
        let mut row = vec![0.0; 16];
        let rows: Vec<Vec<f64>> = [0u64, 1, 3]
            .iter()
            .map(|&x| {
                m.channel_row(x, &mut row);
                row.clone()
            })
            .collect();
        let mut exact: HashMap<[u64; 4], f64> = HashMap::new();
        for o0 in 0..16usize {
            for o1 in 0..16usize {
                for o2 in 0..16usize {
                    let p = rows[0][o0] * rows[1][o1] * rows[2][o2];
                    if p > 0.0 {
                        let c = [0, 1, 2, 3].map(|j| {
                            ((o0 >> j) & 1) as u64 + ((o1 >> j) & 1) as u64 + ((o2 >> j) & 1) as u64
                        });
                        *exact.entry(c).or_insert(0.0) += p;
                    }
                }
            }
        }
        let pmf: Vec<([u64; 4], f64)> = exact.into_iter().collect();
        let reps = 60_000u64;
        for (floyd_max, block) in [(0u64, 1usize), (FLOYD_MAX, 2), (FLOYD_MAX, BLOCK_ITEMS)] {
            let mut observed = HashMap::new();
            for seed in 0..reps {
                let c = m
                    .simulate_with(&key_from_u64(seed), &true_counts, floyd_max, block)
                    .unwrap();
                *observed.entry([c[0], c[1], c[2], c[3]]).or_insert(0) += 1;
            }
            let (chi2, df) = pooled_chi_square(&observed, &pmf, reps);
            assert!(
                chi2 < chi2_critical(df),
                "simulate (floyd_max {floyd_max}, block {block}): {chi2} df {df}"
            );
        }
        // privatize + aggregate: consecutive triples of users are independent runs.
        let values: Vec<u32> = (0..reps).flat_map(|_| [0u32, 1, 3]).collect();
        let mut reports = vec![0u8; values.len()];
        privatize_bits(&m, &key_from_u64(1), &values, &mut reports).unwrap();
        let mut observed = HashMap::new();
        for triple in reports.chunks_exact(3) {
            let c = [0u64, 1, 2, 3]
                .map(|j| triple.iter().filter(|&&r| get_bit(&[r], j)).count() as u64);
            *observed.entry(c).or_insert(0) += 1;
        }
        let (chi2, df) = pooled_chi_square(&observed, &pmf, reps);
        assert!(chi2 < chi2_critical(df), "privatize: {chi2} df {df}");
    }

    #[test]
    fn simulate_matches_privatize_in_means_variances_and_covariances() {
        let m = SubsetSelection::new(5, 0.7).unwrap();
        assert_eq!(m.subset_size(), 2);
        let true_counts = [1500u64, 700, 0, 500, 300];
        let n: u64 = true_counts.iter().sum();
        let (mean, cov) = exact_moments(&m, &true_counts);
        // The bits are negatively correlated: independent binomials would fail this test.
        assert!(cov[1][2] < -50.0 && cov[0][3] < -50.0, "{cov:?}");
        let reps = 2000u64;
        let values = values_of(&true_counts);
        let privatized: Vec<Vec<u64>> = (0..reps)
            .map(|s| privatize_counts(&m, s, &values))
            .collect();
        assert_moments_match("privatize", &privatized, &mean, &cov);
        for (floyd_max, block) in [(0u64, 1usize), (FLOYD_MAX, 2), (FLOYD_MAX, BLOCK_ITEMS)] {
            let simulated: Vec<Vec<u64>> = (0..reps)
                .map(|s| {
                    m.simulate_with(&key_from_u64(s), &true_counts, floyd_max, block)
                        .unwrap()
                })
                .collect();
            for c in &simulated {
                assert_eq!(c.iter().sum::<u64>(), n * m.subset_size());
            }
            assert_moments_match(
                &format!("simulate ({floyd_max}, {block})"),
                &simulated,
                &mean,
                &cov,
            );
        }
    }

    #[test]
    fn simulate_large_groups_use_the_chained_hypergeometric_and_stay_exact() {
        // 10^5 users per value: every split moves > FLOYD_MAX users.
        let m = SubsetSelection::new(6, 0.3).unwrap();
        let true_counts = [100_000u64, 40_000, 250_000, 0, 9_000, 60_000];
        let n: u64 = true_counts.iter().sum();
        let (mean, cov) = exact_moments(&m, &true_counts);
        let runs: Vec<Vec<u64>> = (0..1500u64)
            .map(|s| m.simulate(&key_from_u64(s), &true_counts).unwrap())
            .collect();
        for c in &runs {
            assert_eq!(c.iter().sum::<u64>(), n * m.subset_size());
        }
        assert_moments_match("simulate, large groups", &runs, &mean, &cov);
    }

    #[test]
    fn simulate_large_k_has_the_right_means_and_variances() {
        // k = 10^4, n = 10^6, ε = 0.5 (d = 3775): one run, standardized per-bit residuals.
        let k = 10_000u64;
        let m = SubsetSelection::new(k, 0.5).unwrap();
        let true_counts: Vec<u64> = (0..k).map(|x| 40 + (x * 7919) % 121).collect();
        let n: u64 = true_counts.iter().sum();
        let counts = m.simulate(&key_from_u64(3), &true_counts).unwrap();
        assert_eq!(counts.iter().sum::<u64>(), n * m.subset_size());
        let (a, b) = m.probabilities();
        let z: Vec<f64> = (0..k as usize)
            .map(|j| {
                let (nj, rest) = (true_counts[j] as f64, (n - true_counts[j]) as f64);
                let mean = nj * a + rest * b;
                let var = nj * a * (1.0 - a) + rest * b * (1.0 - b);
                (counts[j] as f64 - mean) / var.sqrt()
            })
            .collect();
        let kf = k as f64;
        let mean_z = z.iter().sum::<f64>() / kf;
        let mean_z2 = z.iter().map(|v| v * v).sum::<f64>() / kf;
        // The z_j are nearly independent N(0, 1): mean ~ N(0, 1/k), mean square ~ 1 ± √(2/k).
        assert!(mean_z.abs() < 5.0 / kf.sqrt(), "mean z {mean_z}");
        assert!(
            (mean_z2 - 1.0).abs() < 5.0 * (2.0 / kf).sqrt(),
            "mean z² {mean_z2}"
        );
        // A value's own bit is a-biased: the estimate recovers the counts' shape.
        let est = m.estimate_raw(&counts, n);
        let truth: Vec<f64> = true_counts.iter().map(|&c| c as f64 / n as f64).collect();
        let err2: f64 = est.iter().zip(&truth).map(|(e, t)| (e - t) * (e - t)).sum();
        let expected = variance_at_uniform(k, 0.5, m.subset_size()) / n as f64;
        assert!(err2 < 1.5 * expected, "{err2} vs {expected}");
    }

    #[test]
    fn simulate_repeated_seeds_large_k_means_and_variances() {
        let k = 300u64;
        let m = SubsetSelection::new(k, 1.0).unwrap();
        let true_counts: Vec<u64> = (0..k).map(|x| if x < 10 { 3000 } else { 50 }).collect();
        let n: u64 = true_counts.iter().sum();
        let (a, b) = m.probabilities();
        let reps = 400usize;
        let runs: Vec<Vec<u64>> = (0..reps as u64)
            .map(|s| m.simulate(&key_from_u64(s), &true_counts).unwrap())
            .collect();
        let (mut ratio_sum, mut z_sum) = (0.0, 0.0);
        for j in 0..k as usize {
            let (nj, rest) = (true_counts[j] as f64, (n - true_counts[j]) as f64);
            let mean = nj * a + rest * b;
            let var = nj * a * (1.0 - a) + rest * b * (1.0 - b);
            let sample_mean = runs.iter().map(|r| r[j] as f64).sum::<f64>() / reps as f64;
            let sample_var = runs
                .iter()
                .map(|r| (r[j] as f64 - sample_mean).powi(2))
                .sum::<f64>()
                / (reps - 1) as f64;
            z_sum += (sample_mean - mean) / (var / reps as f64).sqrt();
            ratio_sum += sample_var / var;
        }
        let kf = k as f64;
        // Average of k nearly independent N(0,1) z-scores; of k variance ratios, each with
        // standard deviation √(2/(R−1)).
        assert!(
            (z_sum / kf).abs() < 5.0 / kf.sqrt(),
            "mean z {}",
            z_sum / kf
        );
        let ratio_se = (2.0 / (reps - 1) as f64).sqrt() / kf.sqrt();
        assert!(
            (ratio_sum / kf - 1.0).abs() < 5.0 * ratio_se,
            "variance ratio {}",
            ratio_sum / kf
        );
    }

    #[test]
    fn the_mixture_of_pure_in_and_value_free_users_is_the_channel() {
        // t·(x plus a uniform (d−1)-subset of the rest) + (1 − t)·(a uniform d-subset of
        // [k]) has the channel's row, for every x, with t the exact rational of the float ρ.
        for k in [2u64, 3, 5, 7] {
            for eps in EPSILONS {
                for d in 1..k {
                    let m = SubsetSelection::with_subset_size(k, eps, d).unwrap();
                    let t = m.pure_in_fraction();
                    let (mantissa, exponent) = dyadic(m.rho);
                    assert_eq!(mantissa as f64 / 2f64.powi(exponent as i32), m.rho);
                    assert_eq!(
                        t.num + ((d as u128) << exponent),
                        (mantissa as u128 * k as u128)
                    );
                    assert_eq!(t.den, ((k - d) as u128) << exponent);
                    let tv = t.num as f64 / t.den as f64;
                    assert!(tv > 0.0 && tv < 1.0);
                    let (with_x, _) = m.subset_probabilities();
                    let pure = with_x / m.rho; // 1/C(k−1, d−1)
                    let free = 1.0 / binomial_coefficient(k, d);
                    let mut row = vec![0.0; 1 << k];
                    for x in 0..k {
                        m.channel_row(x, &mut row);
                        for (o, &q) in row.iter().enumerate() {
                            let size = (o as u64).count_ones() as u64;
                            let mixture = if size != d {
                                0.0
                            } else if (o >> x) & 1 == 1 {
                                tv * pure + (1.0 - tv) * free
                            } else {
                                (1.0 - tv) * free
                            };
                            assert!(
                                (mixture - q).abs() <= 1e-14 * q.max(1e-300),
                                "k {k} eps {eps} d {d} x {x} o {o}: {mixture} vs {q}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pure_in_counts_are_binomial_on_both_paths() {
        let m = SubsetSelection::with_subset_size(9, 0.8, 3).unwrap();
        let t = m.pure_in_fraction();
        let p = t.num as f64 / t.den as f64;
        for (i, n) in [1u64, SMALL_BINOMIAL, 40].into_iter().enumerate() {
            let mut rng = stream(&key_from_u64(21), i as u64);
            let reps = 40_000u64;
            let mut observed = HashMap::new();
            for _ in 0..reps {
                *observed.entry(t.count(&mut rng, n)).or_insert(0) += 1;
            }
            let pmf: Vec<(u64, f64)> = (0..=n)
                .map(|j| {
                    let c = binomial_coefficient(n, j);
                    (j, c * p.powi(j as i32) * (1.0 - p).powi((n - j) as i32))
                })
                .collect();
            let (chi2, df) = pooled_chi_square(&observed, &pmf, reps);
            assert!(chi2 < chi2_critical(df.max(1)), "n {n}: {chi2} df {df}");
        }
    }

    #[test]
    fn block_split_is_multinomial_over_the_hypergeometric_law() {
        // c users with r picks left among M items: their picks among the next L items.
        for (population, draws, marked, c) in [(12u64, 5u64, 4u64, 3u64), (30, 7, 20, 2)] {
            let pmf_one = hypergeometric_pmf(population, marked, draws);
            let lo = pmf_one[0].0;
            let cells = pmf_one.len();
            // The law of the histogram of c users over the outcomes, by enumeration.
            let mut exact: HashMap<Vec<u64>, f64> = HashMap::new();
            for users in 0..cells.pow(c as u32) {
                let (mut h, mut p, mut u) = (vec![0u64; cells], 1.0, users);
                for _ in 0..c {
                    h[u % cells] += 1;
                    p *= pmf_one[u % cells].1;
                    u /= cells;
                }
                *exact.entry(h).or_insert(0.0) += p;
            }
            let pmf: Vec<(Vec<u64>, f64)> = exact.into_iter().collect();
            let mut weights = Weights::default();
            weights.hypergeometric(population, draws, marked);
            let mut rng = stream(&key_from_u64(population), c);
            let reps = 40_000u64;
            let mut observed = HashMap::new();
            for _ in 0..reps {
                let mut h = vec![0u64; cells];
                weights.split(&mut rng, c, |j, n| h[(j - lo) as usize] += n);
                assert_eq!(h.iter().sum::<u64>(), c);
                *observed.entry(h).or_insert(0) += 1;
            }
            let (chi2, df) = pooled_chi_square(&observed, &pmf, reps);
            assert!(
                chi2 < chi2_critical(df.max(1)),
                "{population}: {chi2} df {df}"
            );
        }
        // Many users: the multinomial's means and variances per outcome.
        let (population, draws, marked, c) = (10_000u64, 256u64, 3775u64, 100_000u64);
        let pmf_one = hypergeometric_pmf(population, marked, draws);
        let mut weights = Weights::default();
        weights.hypergeometric(population, draws, marked);
        let reps = 400;
        let mut rng = stream(&key_from_u64(5), 0);
        let mut sums = vec![0.0f64; draws as usize + 1];
        for _ in 0..reps {
            weights.split(&mut rng, c, |j, n| sums[j as usize] += n as f64);
        }
        for &(j, p) in &pmf_one {
            let mean = c as f64 * p;
            let se = (mean * (1.0 - p) / reps as f64).sqrt();
            let got = sums[j as usize] / reps as f64;
            assert!(
                (got - mean).abs() < 5.0 * se + 1e-9,
                "outcome {j}: {got} vs {mean}"
            );
        }
    }

    #[test]
    fn simulate_does_not_depend_on_the_thread_count() {
        let k = 3000u64;
        let m = SubsetSelection::new(k, 0.5).unwrap();
        let true_counts: Vec<u64> = (0..k).map(|x| if x % 97 == 5 { 4000 } else { 0 }).collect();
        let key = key_from_u64(77);
        let one = crate::parallel::in_pool(1, || m.simulate(&key, &true_counts).unwrap());
        let n: u64 = true_counts.iter().sum();
        assert_eq!(one.iter().sum::<u64>(), n * m.subset_size());
        for threads in [2, 3] {
            let many =
                crate::parallel::in_pool(threads, || m.simulate(&key, &true_counts).unwrap());
            assert_eq!(one, many, "{threads} threads");
        }
    }

    #[test]
    fn simulate_is_reproducible_and_checks_its_input() {
        let m = SubsetSelection::new(50, 1.0).unwrap();
        let true_counts: Vec<u64> = (0..50).map(|x| x * 3).collect();
        let key = key_from_u64(8);
        assert_eq!(
            m.simulate(&key, &true_counts).unwrap(),
            m.simulate(&key, &true_counts).unwrap()
        );
        assert_ne!(
            m.simulate(&key, &true_counts).unwrap(),
            m.simulate(&key_from_u64(9), &true_counts).unwrap()
        );
        assert_eq!(m.simulate(&key, &[0; 50]).unwrap(), vec![0; 50]);
        assert!(m.simulate(&key, &[1; 49]).is_err());
        let mut huge = vec![0u64; 50];
        huge[0] = u64::MAX;
        huge[1] = 1;
        assert!(m.simulate(&key, &huge).is_err());
        // At most 2^40 users (beyond, H2PE's f64 set-up loses the law, then hangs or panics).
        let mut many = vec![(1u64 << 40) / 50; 50];
        many[0] += (1 << 40) % 50;
        assert_eq!(m.simulate(&key, &many).unwrap().len(), 50);
        many[0] += 1;
        assert!(matches!(m.simulate(&key, &many), Err(Error::Value(_))));
    }

    #[test]
    fn rejects_bad_parameters_and_malformed_rows() {
        assert!(SubsetSelection::new(1, 1.0).is_err());
        assert!(SubsetSelection::new(5, 0.0).is_err());
        assert!(SubsetSelection::new(5, f64::NAN).is_err());
        assert!(SubsetSelection::with_subset_size(5, 1.0, 0).is_err());
        assert!(SubsetSelection::with_subset_size(5, 1.0, 5).is_err());
        assert!(SubsetSelection::with_subset_size(5, 1.0, 4).is_ok());
        assert!(SubsetSelection::new(5, 1e-300).is_err()); // too small to favour the truth
        let m = SubsetSelection::with_subset_size(10, 1.0, 3).unwrap();
        // Rows of 2 bytes: bits 0..9, padding bits 10..15.
        let good = [0b1010_0000u8, 0b1000_0000];
        let too_many = [0b1110_0000u8, 0b1000_0000];
        let too_few = [0b1000_0000u8, 0b0000_0000];
        let padding = [0b1010_0000u8, 0b0010_0000]; // 3 ones, one of them in the padding
        let reports: Vec<u8> = [good, too_many, too_few, padding, good].concat();
        let mut counts = vec![0u64; 10];
        assert!(aggregate_bits(&m, &reports, &mut counts, false).is_err());
        assert_eq!(counts, vec![0; 10]);
        let t = aggregate_bits(&m, &reports, &mut counts, true).unwrap();
        assert_eq!((t.valid, t.invalid, t.first_invalid), (2, 3, Some(1)));
        assert_eq!(counts, vec![2, 0, 2, 0, 0, 0, 0, 0, 2, 0]);
        let mut out = vec![0u8; 4];
        assert!(privatize_bits(&m, &key_from_u64(0), &[1, 10], &mut out).is_err());
    }
}
