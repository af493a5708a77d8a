//! One-bit Hadamard Response (Acharya, Kairouz, Liu & Sun 2021, "Estimating sparse discrete
//! distributions under privacy and communication constraints", Algorithm 1; after Acharya &
//! Sun 2019; ALT 2021; docs page Mechanisms › Sparse estimation).
//!
//! * `K = 2^⌈log2(k+1)⌉` groups; the Sylvester matrix `H_K`, 0-based,
//!   `H(a, b) = (−1)^popcount(a & b)`; symbol x is row x (no +1 offset).
//! * The server assigns every user a group j (the paper's round-robin: user i is in group
//!   `i mod K`, step 3). A user of group j holding x sends ONE bit y (eq. (3)):
//!   `P(y = 1) = a = e^ε/(e^ε + 1)` if `H(x, j) = +1`, else `b = 1/(e^ε + 1)`.
//! * Report (the framework's index report): `r = 2j + y ∈ [0, 2K)`. The user's own message is
//!   the bit y; j is the group the server assigned, carried beside it so that the report
//!   histogram is the sufficient statistic (ones and zeros per group).
//! * Channel (the law of one report of a user at a uniformly random position, whose group
//!   is uniform and independent of x): `Q(2j + y | x) = P(y | x, j)/K`. Its largest
//!   log-ratio is `ln(a/b)` (column `2j + 1`, j = 1 separates x = 0 from x = 1).
//! * Estimator (steps 5–7, eq. (4)): `n_j = c_{2j} + c_{2j+1}`, `t̂_j = c_{2j+1}/n_j`,
//!   `z_j = (t̂_j − b)/(a − b)·2 − 1 = (c_{2j+1} − c_{2j})/(n_j (1 − 2b))`
//!   (`= (e^ε+1)/(e^ε−1)(2t̂_j − 1)` for the exact probabilities), `z_j = 0` for an empty
//!   group (`t̂_j = 1/2`, no contribution); `p̃ = (1/K)·H_K z`, one FWHT, first k
//!   coordinates. `E z_j = (H p)_j` for every group with users, so `p̃` is unbiased when no
//!   group is empty (n ≥ K) and the users' values are i.i.d. or in uniformly random order;
//!   an empty group j loses `(H p)_j` (the estimate is then biased).
//! * Channel products (for IBU), by one FWHT each:
//!   `(Qᵀd)_{2j+y} = (T/2 ± (1/2 − b)(H d)_j)/K` (`+` for y = 1, `T = Σ d`) and
//!   `(Q w)_x = (S/2 + (1/2 − b)(H u)_x)/K` with `u_j = w_{2j+1} − w_{2j}`, `S = Σ w`.
//!   The multinomial likelihood of the report histogram under Q is, up to a constant, the
//!   likelihood of the bits given the group sizes, so IBU is exact maximum likelihood.
//!
//! # Exact privacy
//! The flip probability b is the float of `1/(e^{ε'} + 1)` for `ε' = ε − 2^-46·max(ε, 1)`,
//! raised by 8 ulps (above the real value, which the float approximates to ~3 ulps); `a` is
//! exactly `1 − b` because the sampler reports `[H(x, j) = +1] XOR flip` with
//! `flip ~ Bernoulli(b)` drawn exactly. Both ratios `a/b` and `(1 − b)/(1 − a)` equal
//! `(1 − b)/b < e^ε`; `realized_epsilon = ln(1 + (1 − 2b)/b)`, within ~1e-14·ε of ε.
//!
//! # Sampling (exact, one random byte per user)
//! Bernoulli(b) compares a uniform real `U` with b, one byte first: with `256·b = t + f`
//! (`t` an integer, `0 ≤ f < 1`, both exact), the flip is `B < t` for the first byte B of U,
//! and on `B = t` (probability 1/256) an exact Bernoulli(f) on a fresh 64-bit word
//! ([`BernoulliThreshold`]). User u draws from the stream of chunk `u / SAMPLE_CHUNK`; the
//! users of a chunk take the bytes of its words in order (most significant first), a tie
//! consuming the next word. Reports do not depend on the thread count.
//!
//! # Simulation
//! `simulate(true_counts)` is exact in law of privatizing the users in a uniformly random
//! order with round-robin groups: group j gets `n_j = ⌈(n − j)/K⌉` users. Given the group
//! contents (a multivariate hypergeometric table with margins `c_x` and `n_j`), group j's
//! count of ones is `S⁺_j − Bin(S⁺_j, b) + Bin(S⁻_j, b)`, `S^±_j` its users with
//! `H(x, j) = ±1`. Two exact algorithms, the cheaper chosen by
//! [`OneBitHadamardResponse::simulation_uses_passes`]:
//! * **Shuffle** (small n): an exact Fisher–Yates shuffle of the n values, then every user
//!   privatized with the round-robin groups: O(n) time, 4n bytes.
//! * **Hadamard passes** (large n, cost independent of n): the group range is halved level by
//!   level (bit `L − 1 − d` of j at depth d, `L = log2 K`). A node at depth d (groups with a
//!   fixed top-d-bit prefix P) holds its users in *classes* `(x_low, σ)`: `x_low` the low
//!   `L − d` bits of x and `σ = (−1)^popcount(x_high & P)`, since then
//!   `H(x, j) = σ·H(x_low, j_low)` for every group of the node — users of one class are
//!   interchangeable below it. A node's users split between its halves (sizes known) by a
//!   multivariate hypergeometric draw, a chain of univariate ones over its classes (exact: the
//!   restriction of a uniformly random arrangement). Class `(x_low, σ)` goes to
//!   `(x_low mod 2^{L−d−1}, σ)` in the lower half and to `(x_low mod 2^{L−d−1}, σ·s)` in the
//!   upper, `s = −1` when the top bit of x_low is set: classes merge as they go down, and at a
//!   leaf (a group) only `σ = ±1` remain, i.e. `S^±_j`. A node of width w occupies w pairs of
//!   (plus, minus) counts, its halves the same positions: the passes run in place in one
//!   array of 2K counts, which finally holds the report counts. Cost: L passes over K pairs
//!   plus one hypergeometric draw per nonzero count, at most `Σ_d min(2^{d+1}·nnz, 2K)`;
//!   memory: the 2K counts. Draws come from a stream per task (a node, or a fixed chunk of
//!   positions of small nodes) of each level, so the result does not depend on the thread
//!   count. The hypergeometric and binomial draws are `rng`'s: exact in law up to
//!   rand_distr's double-precision arithmetic for large parameters.

use super::randomized_response::epsilon_too_small;
use super::{
    check_domain, check_epsilon, check_values, simulation_stream, simulation_users, IndexMechanism,
    Operation, ReportInt, SimulationPhase,
};
use crate::error::{Error, Result};
use crate::hadamard::fwht_in_place_checked;
use crate::interrupt::{self, interruptible, Check};
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{
    binomial, hypergeometric, par_fill_chunks, uniform_below_u64, BernoulliThreshold, Key,
    StreamRng,
};
use rand_core::Rng;
use rayon::prelude::*;

/// Units in the last place by which the flip probability is raised (see the module doc).
const FLIP_MARGIN_ULPS: u64 = 8;

/// Positions (class pairs) per task of a Hadamard pass, and per interruption check inside a
/// large node.
const PASS_CHUNK: usize = 1 << 12;

/// Groups per task of the final per-group binomial draws.
const GROUP_CHUNK: usize = 1 << 12;

/// Stream-index tags of the simulation (phase `OwnSets`): pass d uses `d << 40 | task`
/// (d < 34), the final draws `LEAF_TAG << 40 | chunk`, the shuffle `SHUFFLE_TAG << 40`.
const LEAF_TAG: u64 = 0xFE;
const SHUFFLE_TAG: u64 = 0xFD;

/// Largest number of users simulated by shuffling (the shuffle holds 4 bytes per user).
pub const SHUFFLE_MAX_USERS: u64 = 1 << 24;

/// Cost model of the two simulation algorithms, in nanoseconds, measured on the project's
/// 2-core VM (k = 5000 and 2^20): per user shuffled and privatized (20–55, the shuffle's
/// random accesses miss the cache for large n); per class pair scanned by a pass (2.7–3.9);
/// per hypergeometric draw (70 for small counts, drawn item by item, to 450 for large ones,
/// rand_distr's H2PE with its set-up).
const SHUFFLE_NS_PER_USER: f64 = 40.0;
const PASS_NS_PER_PAIR: f64 = 3.0;
const PASS_NS_PER_DRAW: f64 = 250.0;

/// The flip probability b of a binary choice made with odds `e^ε : 1` (module documentation,
/// "Exact privacy"): the float of `1/(e^{ε'} + 1)`, `ε' = ε − 2^-46·max(ε, 1)`, raised by
/// [`FLIP_MARGIN_ULPS`], so that `(1 − b)/b < e^ε` for the real numbers; `1 − b` is exact in
/// floating point. Refused (ε too small) unless `b < 1/2`. Shared with Block Hadamard
/// Response, whose report is inside or outside the user's own set with these odds.
pub(crate) fn flip_probability(epsilon: f64) -> Result<f64> {
    let shaded = epsilon - epsilon.max(1.0) * (-46f64).exp2();
    let exact = 1.0 / (shaded.exp() + 1.0);
    let flip = f64::from_bits(exact.to_bits() + FLIP_MARGIN_ULPS);
    // The favoured outcome must stay more likely than the other.
    if !(flip < 0.5) {
        return Err(epsilon_too_small(epsilon));
    }
    Ok(flip)
}

#[derive(Clone, Debug)]
pub struct OneBitHadamardResponse {
    k: u64,
    epsilon: f64,
    /// `L = log2 K`.
    log_groups: u32,
    /// The flip probability b as realized (`a = 1 − b` exactly).
    flip: f64,
    flip_threshold: BernoulliThreshold,
    flip_bytes: ByteBernoulli,
}

/// Where a batch's groups come from.
#[derive(Clone, Copy, Debug)]
pub enum Groups<'a, G> {
    /// User at position i of the batch is in group `(first_user + i) mod K` (the paper's
    /// round-robin, continued from user number `first_user`).
    RoundRobin { first_user: u64 },
    /// Explicit groups, one per user, each in `[0, K)`.
    Explicit(&'a [G]),
}

impl OneBitHadamardResponse {
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let log_groups = 64 - k.leading_zeros(); // K = 2^⌈log2(k+1)⌉ = 2^bits(k)
        let flip = flip_probability(epsilon)?;
        Ok(Self {
            k,
            epsilon,
            log_groups,
            flip,
            flip_threshold: BernoulliThreshold::new(flip)?,
            flip_bytes: ByteBernoulli::new(flip)?,
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    pub fn k(&self) -> u64 {
        self.k
    }

    /// K, the number of groups (a power of two, `k < K ≤ 2k`).
    pub fn groups(&self) -> u64 {
        1 << self.log_groups
    }

    fn groups_usize(&self) -> usize {
        1usize << self.log_groups
    }

    /// `(a, b)`: the probability of sending 1 when `H(x, j) = +1` and when it is −1, as
    /// realized (`a = 1 − b` exactly; the float of a is rounded).
    pub fn probabilities(&self) -> (f64, f64) {
        (1.0 - self.flip, self.flip)
    }

    /// `ln(a/b) = ln((1 − b)/b)`: the exact guarantee of the channel used (≤ ε).
    pub fn realized_epsilon(&self) -> f64 {
        ((1.0 - 2.0 * self.flip) / self.flip).ln_1p()
    }

    /// `(1 − 2b)/2 = (a − b)/2`.
    fn half_gap(&self) -> f64 {
        0.5 - self.flip
    }

    /// Whether `H(x, j) = +1`, as 1 or 0.
    #[inline(always)]
    fn plus(x: u64, j: u64) -> u64 {
        ((x & j).count_ones() as u64 & 1) ^ 1
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`): an
    /// estimate holds the group statistics (K, transformed in place) and the result (k); a
    /// channel product its transform (K) and its result (at most 2K); a simulation its 2K
    /// counts (the passes' work array) and, when it may shuffle, 4 bytes per user.
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "OneBitHadamardResponse";
        let groups = self.groups();
        match op {
            Operation::Estimate => Footprint::new(format!("{name} estimate"))
                .add("the group statistics and their transform", groups, 8)
                .add("the estimate", self.k, 8),
            Operation::ChannelProduct => Footprint::new(format!("{name} channel product"))
                .add("the transform", groups, 8)
                .add("the result", 2 * groups, 8),
            Operation::Simulate { users } => {
                let shuffled = if users <= SHUFFLE_MAX_USERS { users } else { 0 };
                Footprint::new(format!("{name} simulate"))
                    .add("the report counts (the passes' work array)", 2 * groups, 8)
                    .add("the shuffled values", shuffled, 4)
                    .hint("lower k (the simulation's memory is 16·K bytes, K = 2^⌈log2(k+1)⌉)")
            }
        }
    }

    /// Row x of the channel matrix (length 2K): `Q(2j + y | x) = P(y | x, j)/K`.
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (a, b) = self.probabilities();
        let scale = 1.0 / self.groups() as f64;
        let (high, low) = (a * scale, b * scale);
        for (j, pair) in row.chunks_exact_mut(2).enumerate() {
            let plus = Self::plus(x, j as u64) == 1;
            pair[1] = if plus { high } else { low };
            pair[0] = if plus { low } else { high };
        }
    }

    /// One report of a user of group j holding x: `2j + y`.
    #[inline(always)]
    fn report(&self, x: u64, j: u64, flip: bool) -> u64 {
        2 * j + (Self::plus(x, j) ^ flip as u64)
    }

    /// Privatize `values` (one per user) into `out` with the round-robin groups of users
    /// `first_user, first_user + 1, …` (module documentation, "Sampling").
    pub fn privatize_round_robin<R: ReportInt>(
        &self,
        key: &Key,
        values: &[u32],
        first_user: u64,
        out: &mut [R],
    ) -> Result<()> {
        let groups: Groups<'_, u32> = Groups::RoundRobin { first_user };
        self.privatize(key, values, groups, out)
    }

    /// Privatize `values` into `out` (same length), user i in the group `groups` gives it.
    /// Refused (nothing written) when a value is not in `[0, k)`, or explicit groups do not
    /// have one entry per value in `[0, K)`.
    pub fn privatize<R: ReportInt, G: ReportInt>(
        &self,
        key: &Key,
        values: &[u32],
        groups: Groups<'_, G>,
        out: &mut [R],
    ) -> Result<()> {
        assert_eq!(values.len(), out.len(), "one report per value");
        check_values(values, self.k)?;
        let mask = self.groups() - 1;
        match groups {
            Groups::RoundRobin { first_user } => {
                let first = first_user & mask;
                self.fill(key, values, out, |i| (first + i as u64) & mask)
            }
            Groups::Explicit(groups) => {
                self.check_groups(groups, values.len())?;
                self.fill(key, values, out, |i| groups[i].to_u64())
            }
        }
    }

    /// Explicit groups: one per value, each in `[0, K)`.
    pub fn check_groups<G: ReportInt>(&self, groups: &[G], users: usize) -> Result<()> {
        if groups.len() != users {
            return Err(Error::Value(format!(
                "groups must have one entry per value: got {} groups for {users} values",
                groups.len()
            )));
        }
        let count = self.groups();
        // Chunk maxima first (they vectorize); rayon's per-item search is ~20 ns per item.
        let bad = groups
            .par_chunks(1 << 14)
            .position_first(|c| c.iter().fold(0, |m, g| m.max(g.to_u64())) >= count)
            .and_then(|c| {
                let first = c << 14;
                groups[first..]
                    .iter()
                    .position(|g| g.to_u64() >= count)
                    .map(|i| first + i)
            });
        if let Some(i) = bad {
            return Err(Error::Value(format!(
                "groups must lie in [0, K) = [0, {count}): groups[{i}] = {}",
                groups[i].to_u64()
            )));
        }
        Ok(())
    }

    fn fill<R: ReportInt>(
        &self,
        key: &Key,
        values: &[u32],
        out: &mut [R],
        group_of: impl Fn(usize) -> u64 + Sync,
    ) -> Result<()> {
        let flip = self.flip_bytes;
        par_fill_chunks(key, out, |rng, first, chunk| {
            let mut bytes = RandomBytes::default();
            for (i, (o, &x)) in chunk.iter_mut().zip(&values[first..]).enumerate() {
                let j = group_of(first + i);
                *o = R::from_u64(self.report(x as u64, j, flip.sample(rng, &mut bytes)));
            }
        })
    }

    /// The number of groups without reports in a report histogram (length 2K).
    pub fn empty_groups(&self, counts: &[u64]) -> u64 {
        counts
            .par_chunks(1 << 14)
            .map(|c| c.chunks_exact(2).filter(|p| p[0] | p[1] == 0).count() as u64)
            .sum()
    }

    interruptible! {
        /// Unbiased estimate from the report histogram (length 2K, module documentation).
        pub fn estimate_raw / try_estimate_raw
            = try_estimate_raw_with(counts: &[u64], n: u64) -> Vec<f64>;
    }

    fn try_estimate_raw_with<C: Check>(
        &self,
        counts: &[u64],
        _n: u64,
        check: &C,
    ) -> Result<Vec<f64>> {
        let gap = 1.0 - 2.0 * self.flip;
        let scale = 1.0 / self.groups() as f64;
        // `(ones − zeros)/(size·(1 − 2b))` without branches (on real counts, branches on the
        // sign or on emptiness mispredict and cost more than the transform): exact for counts
        // below 2^53, and correctly rounded within a few ulps beyond.
        let statistic = |j: usize| {
            let (zeros, ones) = (counts[2 * j] as f64, counts[2 * j + 1] as f64);
            let size = zeros + ones;
            let z = (ones - zeros) / (size * gap);
            if size > 0.0 {
                z
            } else {
                0.0
            }
        };
        self.transform_statistics(statistic, |h| h * scale, check)
    }

    interruptible! {
        /// Unbiased estimate from report frequencies (length 2K), e.g. exact expectations.
        pub fn estimate_from_frequencies / try_estimate_from_frequencies
            = try_estimate_from_frequencies_with(freq: &[f64]) -> Vec<f64>;
    }

    fn try_estimate_from_frequencies_with<C: Check>(
        &self,
        freq: &[f64],
        check: &C,
    ) -> Result<Vec<f64>> {
        let gap = 1.0 - 2.0 * self.flip;
        let scale = 1.0 / self.groups() as f64;
        let statistic = |j: usize| {
            let size = freq[2 * j] + freq[2 * j + 1];
            let z = (freq[2 * j + 1] - freq[2 * j]) / (size * gap);
            if size != 0.0 {
                z
            } else {
                0.0
            }
        };
        self.transform_statistics(statistic, |h| h * scale, check)
    }

    /// `finish((H_K s)_x)` for x < k, with `s_j = statistic(j)`, j < K. When `k = K/2` (k a
    /// power of two) only the first half of `H_K s` is needed: rows `[0, K/2)` of `H_K` are
    /// `[H_{K/2}, H_{K/2}]`, so the halves of s are added and half as long a transform
    /// suffices (its buffer is the result).
    fn transform_statistics<C: Check>(
        &self,
        statistic: impl Fn(usize) -> f64 + Sync,
        finish: impl Fn(f64) -> f64 + Sync,
        check: &C,
    ) -> Result<Vec<f64>> {
        let (groups, k) = (self.groups_usize(), self.k as usize);
        if 2 * k == groups {
            let mut t: Vec<f64> = (0..k)
                .into_par_iter()
                .with_min_len(1 << 12)
                .map(|j| statistic(j) + statistic(j + k))
                .collect();
            fwht_in_place_checked(&mut t, check)?;
            t.par_iter_mut()
                .with_min_len(1 << 14)
                .for_each(|v| *v = finish(*v));
            return Ok(t);
        }
        let mut t: Vec<f64> = (0..groups)
            .into_par_iter()
            .with_min_len(1 << 12)
            .map(&statistic)
            .collect();
        fwht_in_place_checked(&mut t, check)?;
        Ok(t[..k]
            .par_iter()
            .with_min_len(1 << 14)
            .map(|&v| finish(v))
            .collect())
    }

    interruptible! {
        /// Expected report frequencies `Qᵀ dist` (length 2K), one FWHT.
        pub fn expected_frequencies / try_expected_frequencies
            = try_expected_frequencies_with(dist: &[f64]) -> Vec<f64>;
    }

    fn try_expected_frequencies_with<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        // In index order (a parallel float sum would depend on the thread count).
        let total: f64 = dist.iter().sum();
        let groups = self.groups_usize();
        // dist padded with zeros to K; when k = K/2 its upper half is zero, and H_K of it is
        // H_{K/2} of the lower half, twice.
        let length = if 2 * dist.len() == groups {
            dist.len()
        } else {
            groups
        };
        let mut t = allocate_zeroed::<f64>(length, "the transform")?;
        t[..dist.len()].copy_from_slice(dist);
        fwht_in_place_checked(&mut t, check)?;
        let (half, gap, scale) = (total / 2.0, self.half_gap(), 1.0 / self.groups() as f64);
        let mut out = allocate_zeroed::<f64>(2 * groups, "the result")?;
        out.par_chunks_exact_mut(2)
            .enumerate()
            .with_min_len(1 << 12)
            .for_each(|(j, pair)| {
                let h = t[j % length];
                pair[1] = (half + gap * h) * scale;
                pair[0] = (half - gap * h) * scale;
            });
        Ok(out)
    }

    interruptible! {
        /// `Q w` (length k): `(Q w)_x = Σ_r Q(r|x) w_r`, the adjoint of `expected_frequencies`.
        pub fn channel_apply / try_channel_apply
            = try_channel_apply_with(w: &[f64]) -> Vec<f64>;
    }

    fn try_channel_apply_with<C: Check>(&self, w: &[f64], check: &C) -> Result<Vec<f64>> {
        let total: f64 = w.iter().sum();
        let (half, gap, scale) = (total / 2.0, self.half_gap(), 1.0 / self.groups() as f64);
        self.transform_statistics(
            |j| w[2 * j + 1] - w[2 * j],
            |h| (half + gap * h) * scale,
            check,
        )
    }

    // -- simulation (module documentation, "Simulation") ---------------------------------

    /// Users in groups `[first, first + count)` when n users fill the groups round-robin.
    fn users_in(&self, n: u64, first: u64, count: u64) -> u64 {
        let (per, extra) = (n >> self.log_groups, n & (self.groups() - 1));
        per * count + extra.clamp(first, first + count) - first
    }

    /// Whether a simulation of `true_counts` (n users, nnz values with users) uses the
    /// Hadamard passes rather than the shuffle: the passes cost `L·K` scanned pairs plus at
    /// most `Σ_{d<L} min(2^{d+1}·nnz, 2K, n)` draws, the shuffle n users (at most
    /// [`SHUFFLE_MAX_USERS`]); the cheaper by the measured unit costs.
    pub fn simulation_uses_passes(&self, true_counts: &[u64], n: u64) -> bool {
        if n > SHUFFLE_MAX_USERS {
            return true;
        }
        let nnz = true_counts.iter().filter(|&&c| c > 0).count() as f64;
        let (groups, n) = (self.groups() as f64, n as f64);
        let draws: f64 = (0..self.log_groups)
            .map(|d| (2f64.powi(d as i32 + 1) * nnz).min(2.0 * groups).min(n))
            .sum();
        let passes = PASS_NS_PER_PAIR * self.log_groups as f64 * groups + PASS_NS_PER_DRAW * draws;
        passes < SHUFFLE_NS_PER_USER * n
    }

    /// The report histogram (length 2K) of `true_counts[x]` users holding each value x,
    /// privatized in a uniformly random order with round-robin groups, exact in law.
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let n = simulation_users(self.k, true_counts)?;
        let passes = self.simulation_uses_passes(true_counts, n);
        self.simulate_with(key, true_counts, passes)
    }

    /// [`simulate`](Self::simulate) by the passes (`true`) or the shuffle (`false`).
    pub fn simulate_with(&self, key: &Key, true_counts: &[u64], passes: bool) -> Result<Vec<u64>> {
        let n = simulation_users(self.k, true_counts)?;
        if passes {
            self.simulate_by_passes(key, true_counts, n, PASS_CHUNK)
        } else {
            self.simulate_by_shuffle(key, true_counts, n)
        }
    }

    fn simulate_by_shuffle(&self, key: &Key, true_counts: &[u64], n: u64) -> Result<Vec<u64>> {
        if n > SHUFFLE_MAX_USERS {
            return Err(Error::Value(format!(
                "the shuffle simulates at most {SHUFFLE_MAX_USERS} users, got {n}"
            )));
        }
        let mut values = allocate_zeroed::<u32>(n as usize, "the shuffled values")?;
        let mut at = 0usize;
        for (x, &c) in true_counts.iter().enumerate() {
            values[at..at + c as usize].fill(x as u32);
            at += c as usize;
        }
        let mut rng = simulation_stream(key, SimulationPhase::OwnSets, SHUFFLE_TAG << 40);
        for i in (1..values.len()).rev() {
            if i % (1 << 16) == 0 {
                interrupt::check()?;
            }
            let j = uniform_below_u64(&mut rng, i as u64 + 1) as usize;
            values.swap(i, j);
        }
        let mut counts = allocate_zeroed::<u64>(2 * self.groups_usize(), "the report counts")?;
        let mask = self.groups() - 1;
        let mut bytes = RandomBytes::default();
        for (i, &x) in values.iter().enumerate() {
            if i % (1 << 16) == 0 {
                interrupt::check()?;
            }
            let flip = self.flip_bytes.sample(&mut rng, &mut bytes);
            counts[self.report(x as u64, i as u64 & mask, flip) as usize] += 1;
        }
        Ok(counts)
    }

    /// The Hadamard passes with `chunk` positions per task (a power of two; tests use small
    /// ones so that nodes both span several tasks' worth of positions and share a task).
    fn simulate_by_passes(
        &self,
        key: &Key,
        true_counts: &[u64],
        n: u64,
        chunk: usize,
    ) -> Result<Vec<u64>> {
        debug_assert!(chunk.is_power_of_two());
        let levels = self.log_groups;
        let groups = self.groups_usize();
        // cells[2·pos] = plus, cells[2·pos + 1] = minus; at depth 0 position x holds value x.
        let mut cells = allocate_zeroed::<u64>(2 * groups, "the report counts")?;
        for (x, &c) in true_counts.iter().enumerate() {
            cells[2 * x] = c;
        }
        for d in 0..levels {
            let width = groups >> d; // positions per node
            let span = width.max(chunk); // positions per task
            cells
                .par_chunks_mut(2 * span)
                .enumerate()
                .try_for_each(|(task, cells)| {
                    interrupt::check()?;
                    let id = (d as u64) << 40 | task as u64;
                    let mut rng = simulation_stream(key, SimulationPhase::OwnSets, id);
                    for (i, node) in cells.chunks_mut(2 * width).enumerate() {
                        let first = (task * span + i * width) as u64;
                        let size = self.users_in(n, first, width as u64);
                        let left = self.users_in(n, first, width as u64 / 2);
                        split_node(&mut rng, node, size, left)?;
                    }
                    Ok::<(), Error>(())
                })?;
        }
        // Leaves: cells[2j], cells[2j + 1] = S⁺_j, S⁻_j; now the ones and zeros of group j.
        let b = self.flip;
        cells
            .par_chunks_mut(2 * GROUP_CHUNK)
            .enumerate()
            .try_for_each(|(c, cells)| {
                interrupt::check()?;
                let id = LEAF_TAG << 40 | c as u64;
                let mut rng = simulation_stream(key, SimulationPhase::OwnSets, id);
                for pair in cells.chunks_exact_mut(2) {
                    let (plus, minus) = (pair[0], pair[1]);
                    if plus | minus == 0 {
                        continue;
                    }
                    let ones = plus - binomial(&mut rng, plus, b) + binomial(&mut rng, minus, b);
                    pair[1] = ones;
                    pair[0] = plus + minus - ones;
                }
                Ok::<(), Error>(())
            })?;
        Ok(cells)
    }
}

/// One node of a Hadamard pass (module documentation, "Simulation"): `node` holds the
/// (plus, minus) counts of its `w` classes, `size` users in all, `left` of whom go to its
/// lower half. Class pairs `(x, x + w/2)` split by a chain of hypergeometric draws (in
/// increasing x, plus before minus, lower class before upper); the lower half's classes are
/// written at positions `[0, w/2)`, the upper half's at `[w/2, w)`.
fn split_node(rng: &mut StreamRng, node: &mut [u64], size: u64, left: u64) -> Result<()> {
    let half = node.len() / 4;
    let (lower, upper) = node.split_at_mut(2 * half);
    let (mut population, mut draws) = (size, left);
    for (i, (lo, hi)) in lower
        .chunks_exact_mut(2)
        .zip(upper.chunks_exact_mut(2))
        .enumerate()
    {
        if i % PASS_CHUNK == PASS_CHUNK - 1 {
            interrupt::check()?;
        }
        let (lp, lm, up, um) = (lo[0], lo[1], hi[0], hi[1]);
        if lp | lm | up | um == 0 {
            continue;
        }
        let mut take = |count: u64| {
            let to_left = hypergeometric(rng, population, count, draws);
            population -= count;
            draws -= to_left;
            to_left
        };
        let (lp_left, lm_left, up_left, um_left) = (take(lp), take(lm), take(up), take(um));
        // Lower half (bit clear): signs unchanged. Upper half: the top bit of x_low flips
        // the sign of the upper classes.
        lo[0] = lp_left + up_left;
        lo[1] = lm_left + um_left;
        hi[0] = (lp - lp_left) + (um - um_left);
        hi[1] = (lm - lm_left) + (up - up_left);
    }
    debug_assert_eq!(
        (population, draws),
        (0, 0),
        "a node's classes hold its users"
    );
    Ok(())
}

impl IndexMechanism for OneBitHadamardResponse {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        2 * self.groups()
    }
    /// A report of the channel Q: a user at a uniformly random position (uniform group).
    /// Deployments privatize with the server's groups instead ([`Self::privatize`]).
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let j = uniform_below_u64(rng, self.groups());
        self.report(x, j, self.flip_threshold.sample(rng))
    }
}

/// Bernoulli(p) for `0 ≤ p < 1`, exact, reading one random byte in most draws (module
/// documentation, "Sampling").
#[derive(Clone, Copy, Debug)]
struct ByteBernoulli {
    /// `⌊256 p⌋`.
    top: u8,
    /// Bernoulli of `256 p − ⌊256 p⌋` (exact in floating point), for a tie on the first byte.
    rest: BernoulliThreshold,
}

impl ByteBernoulli {
    fn new(p: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Value(format!(
                "a byte Bernoulli needs 0 ≤ p < 1, got {p}"
            )));
        }
        let scaled = p * 256.0;
        let top = scaled.floor();
        Ok(Self {
            top: top as u8,
            rest: BernoulliThreshold::new(scaled - top)?,
        })
    }

    #[inline(always)]
    fn sample(&self, rng: &mut StreamRng, bytes: &mut RandomBytes) -> bool {
        let byte = bytes.next(rng);
        if byte != self.top {
            byte < self.top
        } else {
            self.rest.sample(rng)
        }
    }
}

/// The bytes of a stream's 64-bit words, most significant first.
#[derive(Default)]
struct RandomBytes {
    word: u64,
    left: u32,
}

impl RandomBytes {
    #[inline(always)]
    fn next(&mut self, rng: &mut StreamRng) -> u8 {
        if self.left == 0 {
            self.word = rng.next_u64();
            self.left = 8;
        }
        let byte = (self.word >> 56) as u8;
        self.word <<= 8;
        self.left -= 1;
        byte
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{channel_stats, chi_square_critical, expected_from_rows};
    use super::super::{aggregate, channel_matrix};
    use super::*;
    use crate::hadamard::sylvester_entry;
    use crate::rng::{key_from_u64, stream};

    use crate::parallel::in_pool;

    #[test]
    fn groups_follow_the_paper() {
        for (k, groups) in [(2u64, 4u64), (3, 4), (4, 8), (7, 8), (8, 16), (5000, 8192)] {
            let m = OneBitHadamardResponse::new(k, 1.0).unwrap();
            assert_eq!(m.groups(), groups, "k {k}");
            assert_eq!(IndexMechanism::output_size(&m), 2 * groups);
        }
        let m = OneBitHadamardResponse::new(1 << 20, 1.0).unwrap();
        assert_eq!(m.groups(), 1 << 21);
        let m = OneBitHadamardResponse::new(1 << 32, 1.0).unwrap();
        assert_eq!(m.groups(), 1 << 33);
    }

    #[test]
    fn channel_is_exactly_epsilon_ldp_and_rows_follow_the_sylvester_matrix() {
        for k in [2u64, 3, 7, 16, 100] {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0, 30.0] {
                let m = OneBitHadamardResponse::new(k, eps).unwrap();
                let size = IndexMechanism::output_size(&m);
                let q = channel_matrix(k, size, 1 << 22, |x, r| m.channel_row(x, r)).unwrap();
                let (ratio, sum_err) = channel_stats(&q, k as usize);
                assert!(
                    sum_err < 1e-12,
                    "k {k} eps {eps}: rows sum off by {sum_err}"
                );
                assert!(ratio <= eps + 1e-12, "k {k} eps {eps}: {ratio}");
                assert!((ratio - m.realized_epsilon()).abs() < 1e-9 * eps.max(1.0));
                let r = m.realized_epsilon();
                assert!(
                    r <= eps && eps - r < 1e-12 * eps.max(1.0),
                    "k {k} eps {eps}: {r}"
                );
                let (a, b) = m.probabilities();
                let groups = m.groups() as f64;
                for x in 0..k {
                    for j in 0..m.groups() {
                        let one = q[(x * size + 2 * j + 1) as usize] * groups;
                        let want = if sylvester_entry(x, j) == 1 { a } else { b };
                        assert_eq!(one, want, "k {k} x {x} j {j}");
                    }
                }
            }
        }
        // The realized ratio as a real number: (1 − b)/b < e^ε, checked in exact arithmetic
        // on the float b (b·e^ε > 1 − b, with e^ε rounded down to be safe).
        for eps in [1e-6, 0.1, 1.0, 10.0, 300.0, 700.0] {
            let m = OneBitHadamardResponse::new(2, eps).unwrap();
            let b = m.flip;
            let e = f64::from_bits(eps.exp().to_bits() - 4);
            assert!(b * e + b > 1.0, "eps {eps}: (1 − b)/b ≥ e^ε");
        }
    }

    #[test]
    fn too_small_or_bad_parameters_are_refused() {
        assert!(OneBitHadamardResponse::new(1, 1.0).is_err());
        assert!(OneBitHadamardResponse::new(10, 0.0).is_err());
        assert!(OneBitHadamardResponse::new(10, f64::NAN).is_err());
        assert!(OneBitHadamardResponse::new(10, 1e-300).is_err());
        assert!(OneBitHadamardResponse::new(10, 701.0).is_err());
        assert!(OneBitHadamardResponse::new(10, 700.0).is_ok());
    }

    #[test]
    fn estimator_is_unbiased_and_fwht_decoding_equals_the_direct_formula() {
        for (k, eps) in [
            (10u64, 0.5),
            (7, 2.0),
            (100, 3.0),
            (33, 1.5),
            (2, 0.1),
            (16, 1.0),
            (64, 0.3),
        ] {
            let m = OneBitHadamardResponse::new(k, eps).unwrap();
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let freq = m.expected_frequencies(&p);
            for (a, b) in freq.iter().zip(&expected_from_rows(&m, &p)) {
                assert!((a - b).abs() < 1e-15, "{a} vs {b}");
            }
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-12, "k {k} eps {eps}: {a} vs {b}");
            }
            // FWHT decoding against the direct sum, with an empty group.
            let size = IndexMechanism::output_size(&m) as usize;
            let mut counts: Vec<u64> = (0..size as u64).map(|z| (z * 31 + 7) % 50).collect();
            counts[2] = 0;
            counts[3] = 0;
            let n: u64 = counts.iter().sum();
            let empty = counts.chunks(2).filter(|p| p[0] + p[1] == 0).count() as u64;
            assert!(empty >= 1);
            assert_eq!(m.empty_groups(&counts), empty);
            let fast = m.estimate_raw(&counts, n);
            let (a, b) = m.probabilities();
            let groups = m.groups();
            for x in 0..k {
                let direct: f64 = (0..groups)
                    .map(|j| {
                        let (c0, c1) = (counts[2 * j as usize], counts[2 * j as usize + 1]);
                        if c0 + c1 == 0 {
                            return 0.0;
                        }
                        let t = c1 as f64 / (c0 + c1) as f64;
                        sylvester_entry(x, j) as f64 * ((t - b) / (a - b) * 2.0 - 1.0)
                    })
                    .sum::<f64>()
                    / groups as f64;
                assert!((fast[x as usize] - direct).abs() < 1e-9, "{x}");
            }
            // Adjoint identity: <Qᵀp, w> = <p, Q w>.
            let w: Vec<f64> = (0..size).map(|z| (z as f64 * 0.37).sin()).collect();
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
        }
    }

    #[test]
    fn the_byte_bernoulli_is_exact_on_every_first_byte() {
        // P(flip) = #{bytes < top}/256 + P(tie)·P(rest): the decomposition is exact.
        for p in [0.0, 1.0 / 3.0, 0.25, 0.4999, 1e-300, 0.0390625] {
            let s = ByteBernoulli::new(p).unwrap();
            let rest = p * 256.0 - s.top as f64;
            assert!((0.0..1.0).contains(&rest));
            assert_eq!((s.top as f64 + rest) / 256.0, p);
        }
        assert!(ByteBernoulli::new(1.0).is_err());
        // Empirical rate, and a tie that consumes the next word.
        let s = ByteBernoulli::new(0.3).unwrap();
        let mut rng = stream(&key_from_u64(9), 0);
        let mut bytes = RandomBytes::default();
        let draws = 2_000_000;
        let ones = (0..draws)
            .filter(|_| s.sample(&mut rng, &mut bytes))
            .count() as f64;
        let sd = (draws as f64 * 0.3 * 0.7).sqrt();
        assert!((ones - 0.3 * draws as f64).abs() < 5.0 * sd, "{ones}");
    }

    /// Per group, the number of ones among the group's users of one value against
    /// Binomial(n_j, P(1 | x, j)): `Σ_j z_j²` is chi-square with K degrees of freedom.
    #[test]
    fn privatize_follows_the_channel_group_by_group() {
        for (k, eps) in [(6u64, 0.5), (5, 3.0), (100, 1.0)] {
            let m = OneBitHadamardResponse::new(k, eps).unwrap();
            let groups = m.groups();
            let (a, b) = m.probabilities();
            for x in [0u32, (k - 1) as u32] {
                let users = 4000 * groups as usize;
                let values = vec![x; users];
                let mut reports = vec![0u32; users];
                m.privatize_round_robin(&key_from_u64(5 + x as u64), &values, 3, &mut reports)
                    .unwrap();
                let mut counts = vec![0u64; 2 * groups as usize];
                aggregate(&reports, &mut counts, false).unwrap();
                let statistic: f64 = (0..groups)
                    .map(|j| {
                        let (c0, c1) = (counts[2 * j as usize], counts[2 * j as usize + 1]);
                        assert_eq!(c0 + c1, 4000, "group sizes are fixed");
                        let q = if sylvester_entry(x as u64, j) == 1 {
                            a
                        } else {
                            b
                        };
                        let (mean, var) = (4000.0 * q, 4000.0 * q * (1.0 - q));
                        (c1 as f64 - mean).powi(2) / var
                    })
                    .sum();
                let critical = chi_square_critical(groups as usize);
                assert!(
                    statistic < critical,
                    "k {k} x {x}: {statistic} ≥ {critical}"
                );
            }
        }
    }

    #[test]
    fn groups_round_robin_continue_and_explicit_groups_are_checked() {
        let m = OneBitHadamardResponse::new(10, 1.0).unwrap(); // K = 16
        let key = key_from_u64(1);
        let values: Vec<u32> = (0..1000).map(|i| i % 10).collect();
        let mut rr = vec![0u16; 1000];
        m.privatize_round_robin(&key, &values, 21, &mut rr).unwrap();
        for (i, &r) in rr.iter().enumerate() {
            assert_eq!(r as usize / 2, (21 + i) % 16);
        }
        // Round-robin from user 21 is the explicit groups (21 + i) mod 16: same reports.
        let groups: Vec<u8> = (0..1000).map(|i| ((21 + i) % 16) as u8).collect();
        let mut explicit = vec![0u16; 1000];
        m.privatize(&key, &values, Groups::Explicit(&groups), &mut explicit)
            .unwrap();
        assert_eq!(rr, explicit);
        // first_user past 2^64 − K wraps the same way as the modulus.
        let mut far = vec![0u16; 1000];
        m.privatize_round_robin(&key, &values, u64::MAX - 10, &mut far)
            .unwrap();
        assert_eq!(far[0] as usize / 2, ((u64::MAX - 10) % 16) as usize);
        assert_eq!(far[11] as usize / 2, 0);
        let mut bad = groups.clone();
        bad[7] = 16;
        let e = m
            .privatize(&key, &values, Groups::Explicit(&bad), &mut explicit)
            .unwrap_err();
        assert!(e.to_string().contains("groups[7] = 16"), "{e}");
        let e = m
            .privatize(&key, &values, Groups::Explicit(&groups[1..]), &mut explicit)
            .unwrap_err();
        assert!(e.to_string().contains("999 groups for 1000 values"), "{e}");
        let e = m
            .privatize_round_robin(&key, &[3, 10], 0, &mut [0u16; 2])
            .unwrap_err();
        assert!(e.to_string().contains("values[1] = 10"), "{e}");
    }

    #[test]
    fn privatize_and_simulate_do_not_depend_on_the_thread_count() {
        let m = OneBitHadamardResponse::new(3000, 1.0).unwrap();
        let values: Vec<u32> = (0..300_000u32).map(|i| (i * 7919) % 3000).collect();
        let counts: Vec<u64> = (0..3000u64).map(|x| (x * 13) % 101).collect();
        let run = |threads| {
            in_pool(threads, || {
                let mut reports = vec![0u16; values.len()];
                m.privatize_round_robin(&key_from_u64(4), &values, 0, &mut reports)
                    .unwrap();
                let passes = m.simulate_with(&key_from_u64(5), &counts, true).unwrap();
                let shuffle = m.simulate_with(&key_from_u64(5), &counts, false).unwrap();
                (reports, passes, shuffle)
            })
        };
        assert_eq!(run(1), run(3));
    }

    /// Exact per-output mean and variance of the simulation's law: group j has `n_j` users
    /// drawn without replacement from the n (a uniformly random order), `m⁺_j` of the n hold
    /// a value with `H(x, j) = +1`; `S⁺_j ~ Hypergeometric(n, m⁺_j, n_j)` and
    /// `ones = S⁺ − Bin(S⁺, b) + Bin(n_j − S⁺, b)`.
    fn simulation_moments(m: &OneBitHadamardResponse, true_counts: &[u64]) -> (Vec<f64>, Vec<f64>) {
        let n: u64 = true_counts.iter().sum();
        let groups = m.groups();
        let b = m.flip;
        let (mut mean, mut var) = (
            vec![0.0; 2 * groups as usize],
            vec![0.0; 2 * groups as usize],
        );
        for j in 0..groups {
            let size = m.users_in(n, j, 1) as f64;
            let plus: u64 = (0..m.k)
                .filter(|&x| sylvester_entry(x, j) == 1)
                .map(|x| true_counts[x as usize])
                .sum();
            let (nf, f) = (n as f64, plus as f64 / n as f64);
            let hyper = if n > 1 {
                size * f * (1.0 - f) * (nf - size) / (nf - 1.0)
            } else {
                0.0
            };
            let ones_mean = size * b + (1.0 - 2.0 * b) * size * f;
            let ones_var = size * b * (1.0 - b) + (1.0 - 2.0 * b).powi(2) * hyper;
            mean[2 * j as usize + 1] = ones_mean;
            mean[2 * j as usize] = size - ones_mean;
            var[2 * j as usize + 1] = ones_var;
            var[2 * j as usize] = ones_var;
        }
        (mean, var)
    }

    /// `reps` draws of `simulate` (seeds `seed..`) have the exact per-output means (within 5
    /// standard errors) and, where the variance is at least 10, variances (within 6 standard
    /// errors of the sample variance); every group total is `n_j`.
    fn assert_law(
        label: &str,
        m: &OneBitHadamardResponse,
        true_counts: &[u64],
        reps: u64,
        seed: u64,
        mut draw: impl FnMut(&Key) -> Vec<u64>,
    ) {
        let (mean, var) = simulation_moments(m, true_counts);
        let n: u64 = true_counts.iter().sum();
        let runs: Vec<Vec<u64>> = (seed..seed + reps)
            .map(|s| draw(&key_from_u64(s)))
            .collect();
        for run in &runs {
            for j in 0..m.groups() as usize {
                assert_eq!(
                    run[2 * j] + run[2 * j + 1],
                    m.users_in(n, j as u64, 1),
                    "{label}: group {j} size"
                );
            }
        }
        let r = reps as f64;
        let mut busy = 0;
        for y in 0..mean.len() {
            let sample: Vec<f64> = runs.iter().map(|c| c[y] as f64).collect();
            let avg = sample.iter().sum::<f64>() / r;
            let v = sample.iter().map(|s| (s - avg).powi(2)).sum::<f64>() / (r - 1.0);
            let se = (var[y] / r).sqrt();
            assert!(
                (avg - mean[y]).abs() <= 5.0 * se + 1e-9 * mean[y].abs(),
                "{label}: output {y} mean {avg}, expected {} (se {se})",
                mean[y]
            );
            if var[y] >= 10.0 {
                busy += 1;
                let tolerance = 6.0 * var[y] * (2.0 / (r - 1.0)).sqrt();
                assert!(
                    (v - var[y]).abs() <= tolerance,
                    "{label}: output {y} variance {v}, expected {}",
                    var[y]
                );
            }
        }
        assert!(
            busy > 0 || n < 100,
            "{label}: no output to check variances on"
        );
    }

    #[test]
    fn simulate_follows_the_exact_law_by_both_algorithms() {
        let m = OneBitHadamardResponse::new(9, 0.8).unwrap(); // K = 16
        let counts = [3u64, 0, 7000, 5, 1, 0, 200, 9, 6600];
        for chunk in [1usize, 2, 4, PASS_CHUNK] {
            let what = format!("passes, chunk {chunk}");
            assert_law(&what, &m, &counts, 300, 10, |key| {
                let n = counts.iter().sum();
                m.simulate_by_passes(key, &counts, n, chunk).unwrap()
            });
        }
        assert_law("shuffle", &m, &counts, 300, 20, |key| {
            m.simulate_with(key, &counts, false).unwrap()
        });
        // Fewer users than groups (empty groups), and a sparse distribution with few users.
        let few = [0u64, 3, 0, 0, 2, 0, 0, 0, 4];
        for passes in [true, false] {
            assert_law("few users", &m, &few, 400, 30, |key| {
                m.simulate_with(key, &few, passes).unwrap()
            });
        }
        // 10^12 users: the passes only.
        let huge: Vec<u64> = (0..9).map(|x| (x % 4) * 300_000_000_000).collect();
        assert!(m.simulation_uses_passes(&huge, huge.iter().sum()));
        assert_law("10^12 users", &m, &huge, 300, 40, |key| {
            m.simulate(key, &huge).unwrap()
        });
        // A larger K, dense counts: every level with many classes per node.
        let m = OneBitHadamardResponse::new(100, 1.5).unwrap(); // K = 128
        let dense: Vec<u64> = (0..100u64).map(|x| ((x * 37) % 61 + 1) * 20).collect();
        assert_law("dense, passes", &m, &dense, 300, 50, |key| {
            m.simulate_with(key, &dense, true).unwrap()
        });
    }

    /// Privatizing the users after an exact uniform shuffle has the simulation's law.
    #[test]
    fn shuffled_privatization_has_the_simulated_law() {
        let m = OneBitHadamardResponse::new(9, 0.8).unwrap();
        let counts = [3u64, 0, 700, 5, 1, 0, 200, 9, 660];
        let mut values: Vec<u32> = counts
            .iter()
            .enumerate()
            .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
            .collect();
        assert_law("shuffled privatize", &m, &counts, 300, 60, |key| {
            let mut rng = stream(key, 1 << 40);
            for i in (1..values.len()).rev() {
                let j = uniform_below_u64(&mut rng, i as u64 + 1) as usize;
                values.swap(i, j);
            }
            let mut reports = vec![0u8; values.len()];
            m.privatize_round_robin(key, &values, 0, &mut reports)
                .unwrap();
            let mut out = vec![0u64; 32];
            aggregate(&reports, &mut out, false).unwrap();
            out
        });
    }

    #[test]
    fn simulate_chooses_by_cost_and_handles_the_edges() {
        let m = OneBitHadamardResponse::new(5000, 0.5).unwrap();
        let sparse: Vec<u64> = (0..5000u64).map(|x| (x < 16) as u64 * 187_500).collect();
        let dense: Vec<u64> = (0..5000u64).map(|x| (x < 4096) as u64 * 732).collect();
        assert!(!m.simulation_uses_passes(&[1; 5000], 5000));
        assert!(m.simulation_uses_passes(&sparse, 3_000_000));
        assert!(m.simulation_uses_passes(&[0; 5000], u64::MAX));
        let _ = m.simulation_uses_passes(&dense, 4096 * 732);
        let key = key_from_u64(3);
        assert_eq!(m.simulate(&key, &[0; 5000]).unwrap(), vec![0; 16384]);
        assert!(m.simulate(&key, &[1; 10]).is_err());
        // The largest total: no overflow, no panic.
        let mut all = vec![0u64; 5000];
        all[0] = u64::MAX - 1;
        all[4999] = 1;
        let counts = m.simulate(&key, &all).unwrap();
        assert_eq!(
            counts.iter().fold(0u64, |s, &c| s.checked_add(c).unwrap()),
            u64::MAX
        );
        // The footprint covers the shuffle below its cap only.
        let small = m.footprint(Operation::Simulate { users: 1000 }).bytes();
        let large = m.footprint(Operation::Simulate { users: 1 << 40 }).bytes();
        assert_eq!(small, 16 * 8192 + 4000);
        assert_eq!(large, 16 * 8192);
    }
}
