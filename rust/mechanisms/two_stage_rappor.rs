//! Two-stage RAPPOR: sparse estimation with RAPPOR reports (Acharya, Kairouz, Liu & Sun
//! 2021, "Estimating sparse discrete distributions under privacy and communication
//! constraints", ALT 2021, Appendix C, Algorithm 2; docs page Mechanisms › Sparse estimation).
//!
//! # Client
//! Exactly [`Rappor`]'s message: the one-hot vector of x with every bit flipped
//! independently with probability `f = 1/(e^{ε/2} + 1)` (Algorithm 2, line 8; the same
//! rounding, so the same realized ε). The report is a row of k + 1 bits in `numpy.packbits`
//! layout (`⌈(k + 1)/8⌉` bytes, zero padding): bits `0..k` are the RAPPOR bits, drawn with
//! RAPPOR's sampler from the same streams (the k bits of a user equal those RAPPOR would
//! report for the same key and position), and bit k is the user's *stage*: 0 for stage 1
//! (selection), 1 for stage 2 (estimation).
//!
//! # Stages
//! Stages are public and assigned by the server independently of the data: by default the
//! user at position i of a batch is in stage 1 if `first_user + i` is even and in stage 2 if
//! it is odd ([`Stages::Alternating`]); a server may also assign them explicitly
//! ([`Stages::Explicit`]). The stage bit carries no information about x, so the channel of
//! `(bits, stage)` has RAPPOR's likelihood ratios: `Q(y, s | x) = P(s)·Q_RAPPOR(y | x)`.
//! [`TwoStageRappor::channel_row`] writes it with `P(s) = 1/2` (the stage of a user at a
//! uniformly random position): output `o < 2^{k+1}` has bit j equal to `(o >> j) & 1`, bit
//! k being the stage; its max log-ratio is RAPPOR's `realized_epsilon`.
//!
//! # Aggregate
//! The statistic has `2k + 1` counts: the stage-1 bit counts `M(0..k)`, the stage-2 bit
//! counts `N(0..k)`, and the number `n₂` of stage-2 rows (`n₁ = n − n₂`). Aggregation is
//! RAPPOR's kernel keyed by the stage bit ([`super::aggregate_bit_groups`]: one pass per stage
//! over each cache-sized block of rows, every row's bytes counted once): the same validation,
//! all-or-nothing update, overflow checks and thread-count independence as RAPPOR's, in
//! O(k + cache tiles) memory, in 1.2–1.5× RAPPOR's time for the same rows (measured).
//!
//! # Estimators
//! * Two-stage (Algorithm 2, lines 9–11; [`TwoStageRappor::two_stage_estimate`]): T = the
//!   `min(2s, k)` values with the largest `M(x)` (ties broken towards the lowest index),
//!   then `p̂(x) = (N(x)/n₂ − β)/γ` for `x ∈ T` and 0 elsewhere, with `β = f` and
//!   `γ = 1 − 2f = (e^{ε/2} − 1)/(e^{ε/2} + 1)` for the realized f. These are this project's
//!   corrected constants: a stage-2 bit x is 1 with probability `f + (1 − 2f)·p(x)`, so the
//!   estimate is unbiased given T. The paper prints `β = 1/(e^ε + 1)` and
//!   `γ = (e^ε − 1)/(e^ε + 1)`, which do not match the ε/2 flip (tests/test_two_stage_rappor.py
//!   measures the bias they would cause).
//! * The generic linear maps pool both stages like RAPPOR: `p̂_j = ((M_j + N_j)/n − f)/(1 − 2f)`.
//!   `expected_frequencies` gives the per-report expectation of the statistic with a fair
//!   stage (`[q/2, q/2, 1/2]`, q RAPPOR's per-bit probabilities) and `channel_apply` its
//!   adjoint; the iterative Bayesian update then reduces to RAPPOR's on the pooled counts (the
//!   stage weights cancel, the `n₂` coordinate only fixes the scale, which the final
//!   normalization removes).
//!
//! # Simulation
//! [`TwoStageRappor::simulate`] draws the statistic of privatizing the users in a uniformly
//! random order with alternating stages (stage 1 gets `⌈n/2⌉` users), exactly in law: the
//! stage-1 users of each value follow a multivariate hypergeometric law, drawn as a chain of
//! univariate ones ([`crate::rng::hypergeometric`]: value x gets
//! `H(users left, stage-1 places left, n_x)`), then each stage's bit counts are RAPPOR's
//! simulation of that stage's users (independent binomials per bit) under a key of its own.
//! O(k) draws whatever n; memory a few vectors of k counts.

use super::unary_encoding::Rappor;
use super::{
    aggregate_bit_groups, bit_groups_aggregation_footprint, get_bit, row_bytes, set_bit,
    simulation_stream, BitMechanism, Estimator, Operation, SimulationPhase, SymmetricEstimator,
    Tally,
};
use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{hypergeometric, Key, StreamRng};
use rand_core::Rng;
use rayon::prelude::*;

/// Counts per chunk of the server's passes over k values (the unit of interruption).
const VALUE_CHUNK: usize = 1 << 16;

/// How users are assigned to the two stages (public, independent of their values).
#[derive(Clone, Copy, Debug)]
pub enum Stages<'a> {
    /// The user at position i of the batch is in stage 2 iff `first_user + i` is odd.
    Alternating { first_user: u64 },
    /// `stages[i]` ∈ {1, 2} is the stage of the user at position i.
    Explicit(&'a [u8]),
}

/// Two-stage RAPPOR (see the module documentation).
#[derive(Clone, Debug)]
pub struct TwoStageRappor {
    rappor: Rappor,
}

impl TwoStageRappor {
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        Ok(Self {
            rappor: Rappor::new(k, epsilon)?,
        })
    }

    fn k(&self) -> u64 {
        BitMechanism::domain(&self.rappor)
    }

    /// The RAPPOR channel of the private bits.
    pub fn rappor(&self) -> &Rappor {
        &self.rappor
    }

    pub fn epsilon(&self) -> f64 {
        self.rappor.epsilon()
    }

    /// RAPPOR's realized guarantee (the stage bit does not depend on x).
    pub fn realized_epsilon(&self) -> f64 {
        self.rappor.realized_epsilon()
    }

    /// `(a, b) = (1 − f, f)`, as realized.
    pub fn probabilities(&self) -> (f64, f64) {
        self.rappor.probabilities()
    }

    /// The flip probability f, which is β of the two-stage estimate (`γ = 1 − 2f`).
    pub fn flip_probability(&self) -> f64 {
        self.rappor.flip_probability()
    }

    /// Bits per report: k RAPPOR bits and the stage bit.
    pub fn report_bits(&self) -> u64 {
        self.k() + 1
    }

    /// Length of the aggregate: `[M (k), N (k), n₂]`.
    pub fn statistic_size(&self) -> u64 {
        2 * self.k() + 1
    }

    fn symmetric(&self) -> SymmetricEstimator {
        let (high, low) = self.probabilities();
        SymmetricEstimator { high, low }
    }

    /// The report of x in `row` (zeroed, `⌈(k + 1)/8⌉` bytes): RAPPOR's k bits, then the
    /// stage bit. No randomness is drawn for the stage.
    #[inline]
    fn fill(&self, rng: &mut StreamRng, x: u64, second: bool, row: &mut [u8]) {
        let k = self.k();
        // RAPPOR clears the padding after bit k − 1 of its ⌈k/8⌉ bytes; a (k + 1)-th byte,
        // when k is a multiple of 8, is still zero.
        self.rappor.sample_into(rng, x, &mut row[..row_bytes(k)]);
        if second {
            set_bit(row, k);
        }
    }

    /// A view of the mechanism that privatizes with the given stage assignment, for
    /// `users` users; explicit stages must have one entry per user, each 1 or 2.
    pub fn staged<'a>(&'a self, stages: Stages<'a>, users: usize) -> Result<Staged<'a>> {
        if let Stages::Explicit(s) = stages {
            if s.len() != users {
                return Err(Error::Value(format!(
                    "stages must have one entry per value: got {} for {users} values",
                    s.len()
                )));
            }
            if let Some(i) = s.par_iter().position_first(|&v| v != 1 && v != 2) {
                return Err(Error::Value(format!(
                    "stages must be 1 (selection) or 2 (estimation): stages[{i}] = {}",
                    s[i]
                )));
            }
        }
        Ok(Staged {
            mechanism: self,
            stages,
        })
    }

    /// Privatize `values` into `out` (`values.len()` rows of `⌈(k + 1)/8⌉` bytes) with the
    /// given stages; user u draws from the stream of chunk `u / SAMPLE_CHUNK`, as every bit
    /// mechanism (`super::privatize_bits`).
    pub fn privatize(
        &self,
        key: &Key,
        values: &[u32],
        stages: Stages<'_>,
        out: &mut [u8],
    ) -> Result<()> {
        super::privatize_bits(&self.staged(stages, values.len())?, key, values, out)
    }

    /// The buffers [`TwoStageRappor::aggregate`] allocates for `rows` rows: the grouped
    /// bit aggregation (two groups of k + 1 counts) and the per-stage counts it fills.
    pub fn aggregation_footprint(&self, rows: u64) -> Footprint {
        let bits = self.report_bits();
        bit_groups_aggregation_footprint(bits, rows, 2).add("the per-stage counts", 2 * bits, 8)
    }

    /// Add the statistic of packed `reports` to `counts` (length `2k + 1`, see the module
    /// documentation). Malformed rows (padding bits set) are tallied; with
    /// `drop_invalid == false` any of them is an error. All or nothing: on an error `counts`
    /// is left as it was.
    pub fn aggregate(
        &self,
        reports: &[u8],
        counts: &mut [u64],
        drop_invalid: bool,
    ) -> Result<Tally> {
        let k = self.k() as usize;
        if counts.len() != 2 * k + 1 {
            return Err(Error::Value(format!(
                "counts must have length 2k + 1 = {}, got {}",
                2 * k + 1,
                counts.len()
            )));
        }
        let width = row_bytes(self.report_bits());
        self.aggregation_footprint((reports.len() / width.max(1)) as u64)
            .check()?;
        // [M (k), stage bits of stage-1 rows (0), N (k), n₂].
        let mut grouped =
            crate::memory::allocate_zeroed::<u64>(2 * (k + 1), "the per-stage counts")?;
        let stage = self.k();
        let tally = aggregate_bit_groups(
            self,
            reports,
            &mut grouped,
            2,
            |row| get_bit(row, stage) as usize,
            drop_invalid,
        )?;
        debug_assert_eq!(grouped[k], 0);
        let source = |j: usize| if j < k { grouped[j] } else { grouped[j + 1] };
        if let Some(j) = (0..=2 * k).find(|&j| counts[j].checked_add(source(j)).is_none()) {
            return Err(Error::Value(format!(
                "count {j} would exceed 2^64 − 1 reports; refused (the counts were left \
                 unchanged)"
            )));
        }
        for (j, c) in counts.iter_mut().enumerate() {
            *c += source(j);
        }
        Ok(tally)
    }

    /// Algorithm 2's estimate from the statistic of `n` reports for sparsity s (see the
    /// module documentation): T = the `min(2s, k)` values with the largest stage-1 counts
    /// (ties towards the lowest index), `p̂(x) = (N(x)/n₂ − f)/(1 − 2f)` on T, 0 elsewhere.
    /// Refused when s is outside `[1, k]` or a stage has no reports. O(k) time (a radix
    /// selection: at most 8 passes over the stage-1 counts, interruptible), memory the estimate.
    pub fn two_stage_estimate(&self, counts: &[u64], n: u64, sparsity: u64) -> Result<Vec<f64>> {
        let k = self.k() as usize;
        if counts.len() != 2 * k + 1 {
            return Err(Error::Value(format!(
                "counts must have length 2k + 1 = {}, got {}",
                2 * k + 1,
                counts.len()
            )));
        }
        if !(1..=k as u64).contains(&sparsity) {
            return Err(Error::Value(format!(
                "sparsity must lie in [1, k] = [1, {k}], got {sparsity}"
            )));
        }
        let second = counts[2 * k];
        if second > n {
            return Err(Error::Value(format!(
                "the statistic counts {second} stage-2 reports, more than n = {n}"
            )));
        }
        if second == 0 {
            return Err(Error::Value(
                "there are no stage-2 reports (n2 = 0): the two-stage decoders estimate from \
                 the second stage's users (odd positions by default); use a decoder that pools \
                 both stages, or collect stage-2 reports"
                    .into(),
            ));
        }
        if second == n {
            return Err(Error::Value(
                "there are no stage-1 reports (n1 = 0): the two-stage decoders select the \
                 support from the first stage's users (even positions by default); use a \
                 decoder that pools both stages, or collect stage-1 reports"
                    .into(),
            ));
        }
        Footprint::new("two-stage RAPPOR two-stage estimate")
            .add("the estimate", k as u64, 8)
            .check()?;
        let (stage1, stage2) = (&counts[..k], &counts[k..2 * k]);
        let size = (2 * sparsity).min(k as u64) as usize;
        let (threshold, ties) = nth_largest(stage1, size)?;
        let cutoff = nth_equal(stage1, threshold, ties)?;
        let f = self.flip_probability();
        let gamma = 1.0 - 2.0 * f;
        let n2 = second as f64;
        let mut estimate = crate::memory::allocate_zeroed::<f64>(k, "the estimate")?;
        estimate
            .par_chunks_mut(VALUE_CHUNK)
            .enumerate()
            .try_for_each(|(c, chunk)| {
                crate::interrupt::check()?;
                let first = c * VALUE_CHUNK;
                for (i, e) in chunk.iter_mut().enumerate() {
                    let x = first + i;
                    let m = stage1[x];
                    if m > threshold || (m == threshold && x <= cutoff) {
                        *e = (stage2[x] as f64 / n2 - f) / gamma;
                    }
                }
                Ok::<(), Error>(())
            })?;
        Ok(estimate)
    }

    /// The statistic of privatizing `true_counts[x]` users of each value x in a uniformly
    /// random order with alternating stages, exactly in law (module documentation).
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let k = self.k();
        let n = super::split_simulation_users("TwoStageRAPPOR", k, true_counts)?;
        let (mut first, mut second) = (
            crate::memory::zeroed_vec::<u64>(k as usize, "stage-1 users per value")?,
            crate::memory::zeroed_vec::<u64>(k as usize, "stage-2 users per value")?,
        );
        let mut rng = simulation_stream(key, SimulationPhase::OwnCounts, 0);
        let (mut users_left, mut places_left) = (n, n - n / 2);
        for (x, &users) in true_counts.iter().enumerate() {
            if x % VALUE_CHUNK == 0 {
                crate::interrupt::check()?;
            }
            if users == 0 {
                continue;
            }
            let selected = hypergeometric(&mut rng, users_left, places_left, users);
            first[x] = selected;
            second[x] = users - selected;
            users_left -= users;
            places_left -= selected;
        }
        let stage1 = self.rappor.simulate(&stage_key(key, 1), &first)?;
        drop(first);
        let stage2 = self.rappor.simulate(&stage_key(key, 2), &second)?;
        drop(second);
        let mut out =
            crate::memory::zeroed_vec::<u64>(2 * k as usize + 1, "the two-stage statistic")?;
        out[..k as usize].copy_from_slice(&stage1);
        out[k as usize..2 * k as usize].copy_from_slice(&stage2);
        out[2 * k as usize] = n / 2;
        Ok(out)
    }

    /// Row x of the channel over `(bits, stage)` with a fair stage: `2^{k+1}` outputs,
    /// output o having bit j equal to `(o >> j) & 1` (bit k the stage); only for k < 63.
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let half = row.len() / 2;
        debug_assert!(self.k() < 63 && row.len() == 2 << self.k());
        let (low, high) = row.split_at_mut(half);
        self.rappor.channel_row(x, low);
        for (l, h) in low.iter_mut().zip(high.iter_mut()) {
            *l *= 0.5; // exact: the ratios are RAPPOR's
            *h = *l;
        }
    }

    /// The buffers of a server-side operation (the statistic has 2k + 1 counts).
    pub fn footprint(&self, op: Operation) -> Footprint {
        let k = self.k();
        let statistic = self.statistic_size();
        match op {
            Operation::Simulate { .. } => Footprint::new("two-stage RAPPOR simulate")
                .add("per-stage users and bit counts", 4 * k, 8)
                .add("the statistic", statistic, 8)
                .hint("lower k (the simulation's memory is proportional to k, not to the number of users)"),
            _ => super::vector_footprint("two-stage RAPPOR", op, k, statistic)
                .add("pooled per-bit values", k, 8),
        }
    }

    /// Pooled per-bit frequencies of both stages: `(M_j + N_j)/n` from counts.
    fn pooled_counts(&self, counts: &[u64], n: u64) -> Vec<f64> {
        let k = self.k() as usize;
        counts[..k]
            .iter()
            .zip(&counts[k..2 * k])
            .map(|(&m, &c)| (m as u128 + c as u128) as f64 / n as f64)
            .collect()
    }

    /// Unbiased estimate pooling both stages: RAPPOR's on `M + N`.
    pub fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64> {
        self.symmetric()
            .estimate_from_frequencies(&self.pooled_counts(counts, n))
    }

    /// Unbiased estimate from per-report expectations of the statistic (pooled).
    pub fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
        let k = self.k() as usize;
        let pooled: Vec<f64> = freq[..k]
            .iter()
            .zip(&freq[k..2 * k])
            .map(|(a, b)| a + b)
            .collect();
        self.symmetric().estimate_from_frequencies(&pooled)
    }

    /// Per-report expectation of the statistic with a fair stage: `[q/2, q/2, Σdist/2]`.
    pub fn expected_frequencies(&self, dist: &[f64]) -> Vec<f64> {
        let q = self.symmetric().apply(dist);
        let total: f64 = dist.iter().sum();
        let mut out = Vec::with_capacity(2 * q.len() + 1);
        out.extend(q.iter().map(|v| 0.5 * v));
        out.extend(q.iter().map(|v| 0.5 * v));
        out.push(0.5 * total);
        out
    }

    /// The adjoint of [`TwoStageRappor::expected_frequencies`]:
    /// `(A(w_M + w_N) + w_{n₂})/2` with A RAPPOR's self-adjoint map.
    pub fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        let k = self.k() as usize;
        let pooled: Vec<f64> = w[..k]
            .iter()
            .zip(&w[k..2 * k])
            .map(|(a, b)| a + b)
            .collect();
        let last = w[2 * k];
        let mut out = self.symmetric().apply(&pooled);
        out.iter_mut().for_each(|v| *v = 0.5 * (*v + last));
        out
    }
}

/// The key of stage `stage`'s bit-count simulation: the first 32 bytes of a simulation
/// stream of `key` that no other part of this simulation uses.
fn stage_key(key: &Key, stage: u64) -> Key {
    let mut rng = simulation_stream(key, SimulationPhase::OwnSets, stage);
    let mut out = [0u8; 32];
    for bytes in out.chunks_exact_mut(8) {
        bytes.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    out
}

/// `(v, r)`: the `m`-th largest of `values` (`1 ≤ m ≤ len`) and its rank among the values
/// equal to it (`1 ≤ r`): exactly `m − r` values are larger than v. Radix selection on bytes,
/// most significant first, from the highest nonzero byte of the maximum: each pass
/// histograms the next byte of the values that share the digits fixed so far (parallel
/// over chunks, integer sums, interruptible).
fn nth_largest(values: &[u64], m: usize) -> Result<(u64, u64)> {
    debug_assert!(1 <= m && m <= values.len());
    let max = values
        .par_chunks(VALUE_CHUNK)
        .map(|c| -> Result<u64> {
            crate::interrupt::check()?;
            Ok(c.iter().copied().max().unwrap_or(0))
        })
        .try_reduce(|| 0, |a, b| Ok(a.max(b)))?;
    let top = if max == 0 {
        0
    } else {
        (63 - max.leading_zeros()) / 8 * 8
    };
    let (mut prefix, mut need) = (0u64, m as u64);
    for shift in (0..=top).rev().step_by(8) {
        // The digits above `shift` are fixed (all zero above the top byte).
        let above = if shift + 8 >= 64 {
            0
        } else {
            !0u64 << (shift + 8)
        };
        let histogram = values
            .par_chunks(VALUE_CHUNK)
            .map(|c| -> Result<[u64; 256]> {
                crate::interrupt::check()?;
                let mut h = [0u64; 256];
                for &v in c.iter().filter(|&&v| v & above == prefix) {
                    h[(v >> shift & 0xFF) as usize] += 1;
                }
                Ok(h)
            })
            .try_reduce(
                || [0u64; 256],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                    Ok(a)
                },
            )?;
        let mut digit = 0u64;
        for d in (0..256).rev() {
            if histogram[d] >= need {
                digit = d as u64;
                break;
            }
            need -= histogram[d];
        }
        prefix |= digit << shift;
    }
    Ok((prefix, need))
}

/// The index of the `r`-th (1-based) value equal to `v` (which occurs at least r times).
fn nth_equal(values: &[u64], v: u64, r: u64) -> Result<usize> {
    let per_chunk: Vec<u64> = values
        .par_chunks(VALUE_CHUNK)
        .map(|c| -> Result<u64> {
            crate::interrupt::check()?;
            Ok(c.iter().filter(|&&x| x == v).count() as u64)
        })
        .collect::<Result<_>>()?;
    let mut left = r;
    for (c, &count) in per_chunk.iter().enumerate() {
        if count < left {
            left -= count;
            continue;
        }
        let first = c * VALUE_CHUNK;
        for (i, &x) in values[first..].iter().enumerate() {
            if x == v {
                left -= 1;
                if left == 0 {
                    return Ok(first + i);
                }
            }
        }
    }
    Err(Error::Runtime(
        "internal error: the selected count does not occur often enough".into(),
    ))
}

/// The mechanism with a stage assignment, for privatization ([`TwoStageRappor::staged`]).
#[derive(Clone, Copy, Debug)]
pub struct Staged<'a> {
    mechanism: &'a TwoStageRappor,
    stages: Stages<'a>,
}

impl Staged<'_> {
    #[inline]
    fn second(&self, user: usize) -> bool {
        match self.stages {
            Stages::Alternating { first_user } => (first_user ^ user as u64) & 1 == 1,
            Stages::Explicit(s) => s[user] == 2,
        }
    }
}

impl BitMechanism for Staged<'_> {
    fn domain(&self) -> u64 {
        self.mechanism.k()
    }
    fn bits(&self) -> u64 {
        self.mechanism.report_bits()
    }
    /// The report of a stage-1 user (privatization calls [`BitMechanism::sample_user`]).
    fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]) {
        self.mechanism.fill(rng, x, false, row)
    }
    #[inline]
    fn sample_user(&self, rng: &mut StreamRng, user: usize, x: u64, row: &mut [u8]) {
        self.mechanism.fill(rng, x, self.second(user), row)
    }
}

/// The default assignment (alternating from position 0); every row with zero padding is a
/// possible report.
impl BitMechanism for TwoStageRappor {
    fn domain(&self) -> u64 {
        self.k()
    }
    fn bits(&self) -> u64 {
        self.report_bits()
    }
    fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]) {
        self.fill(rng, x, false, row)
    }
    #[inline]
    fn sample_user(&self, rng: &mut StreamRng, user: usize, x: u64, row: &mut [u8]) {
        self.fill(rng, x, user & 1 == 1, row)
    }
}

impl Estimator for TwoStageRappor {
    fn epsilon(&self) -> f64 {
        TwoStageRappor::epsilon(self)
    }
    fn realized_epsilon(&self) -> f64 {
        TwoStageRappor::realized_epsilon(self)
    }
    fn probabilities(&self) -> (f64, f64) {
        TwoStageRappor::probabilities(self)
    }
    fn domain_size(&self) -> u64 {
        self.k()
    }
    fn statistic_size(&self) -> u64 {
        TwoStageRappor::statistic_size(self)
    }
    fn report_size(&self) -> u64 {
        self.report_bits()
    }
    fn channel_outputs(&self) -> u64 {
        let bits = self.report_bits();
        if bits < 64 {
            1 << bits
        } else {
            u64::MAX
        }
    }
    fn channel_row(&self, x: u64, row: &mut [f64]) {
        TwoStageRappor::channel_row(self, x, row)
    }
    fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64> {
        TwoStageRappor::estimate_raw(self, counts, n)
    }
    fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
        TwoStageRappor::estimate_from_frequencies(self, freq)
    }
    fn expected_frequencies(&self, dist: &[f64]) -> Vec<f64> {
        TwoStageRappor::expected_frequencies(self, dist)
    }
    fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        TwoStageRappor::channel_apply(self, w)
    }
    fn simulate_counts(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        self.simulate(key, true_counts)
    }
    fn footprint(&self, op: Operation) -> Footprint {
        TwoStageRappor::footprint(self, op)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{channel_stats, chi_square, expected_from_rows};
    use super::super::{channel_matrix, privatize_bits, BIT_TILE_BYTES};
    use super::*;
    use crate::rng::key_from_u64;

    use crate::parallel::in_pool;

    fn privatized(m: &TwoStageRappor, values: &[u32], stages: Stages<'_>, seed: u64) -> Vec<u8> {
        let mut out = vec![0u8; values.len() * row_bytes(m.report_bits())];
        m.privatize(&key_from_u64(seed), values, stages, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn the_channel_is_rappors_with_a_public_fair_stage() {
        for k in [2u64, 3, 5, 8] {
            for eps in [0.1, 0.5, 1.0, 3.0] {
                let m = TwoStageRappor::new(k, eps).unwrap();
                let cols = 2u64 << k;
                let q = channel_matrix(k, cols, 1 << 24, |x, r| m.channel_row(x, r)).unwrap();
                let (ratio, sum_err) = channel_stats(&q, k as usize);
                assert!(
                    sum_err < 1e-12,
                    "k {k} eps {eps}: rows sum off by {sum_err}"
                );
                assert!(ratio <= eps + 1e-12 && m.realized_epsilon() <= eps);
                assert!(
                    (ratio - m.realized_epsilon()).abs() < 1e-12,
                    "k {k} eps {eps}"
                );
                assert_eq!(m.realized_epsilon(), m.rappor().realized_epsilon());
                let mut rappor_row = vec![0.0; 1 << k];
                for x in 0..k {
                    m.rappor().channel_row(x, &mut rappor_row);
                    let row = &q[(x * cols) as usize..((x + 1) * cols) as usize];
                    for (o, &r) in rappor_row.iter().enumerate() {
                        assert_eq!(row[o], 0.5 * r);
                        assert_eq!(row[o + (1 << k)], 0.5 * r);
                    }
                }
            }
        }
    }

    #[test]
    fn private_bits_are_rappors_and_the_stage_bit_is_the_assigned_stage() {
        for k in [5u64, 8, 16, 70] {
            let m = TwoStageRappor::new(k, 1.0).unwrap();
            let values: Vec<u32> = (0..150_001u32).map(|i| i % k as u32).collect();
            let (wr, wt) = (row_bytes(k), row_bytes(k + 1));
            let mut plain = vec![0u8; values.len() * wr];
            privatize_bits(m.rappor(), &key_from_u64(9), &values, &mut plain).unwrap();
            let explicit: Vec<u8> = (0..values.len()).map(|i| 1 + (i % 3 == 0) as u8).collect();
            for (stages, stage_of) in [
                (
                    Stages::Alternating { first_user: 0 },
                    Box::new(|i: usize| i % 2 == 1) as Box<dyn Fn(usize) -> bool>,
                ),
                (
                    Stages::Alternating {
                        first_user: u64::MAX,
                    },
                    Box::new(|i: usize| i % 2 == 0),
                ),
                (Stages::Explicit(&explicit), Box::new(|i: usize| i % 3 == 0)),
            ] {
                let rows = privatized(&m, &values, stages, 9);
                for i in 0..values.len() {
                    let (r, t) = (&plain[i * wr..(i + 1) * wr], &rows[i * wt..(i + 1) * wt]);
                    for j in 0..k {
                        assert_eq!(get_bit(r, j), get_bit(t, j), "k {k} row {i} bit {j}");
                    }
                    assert_eq!(get_bit(t, k), stage_of(i), "k {k} row {i}: stage");
                    for j in k + 1..8 * wt as u64 {
                        assert!(!get_bit(t, j), "k {k} row {i}: padding bit {j}");
                    }
                }
            }
            // The default mechanism privatizes with the default stages.
            let mut default = vec![0u8; values.len() * wt];
            privatize_bits(&m, &key_from_u64(9), &values, &mut default).unwrap();
            assert_eq!(
                default,
                privatized(&m, &values, Stages::Alternating { first_user: 0 }, 9)
            );
        }
    }

    #[test]
    fn each_stage_follows_rappors_channel() {
        let k = 3u64;
        for eps in [0.5, 3.0] {
            let m = TwoStageRappor::new(k, eps).unwrap();
            let mut row = vec![0.0; 8];
            for x in 0..3u32 {
                m.rappor().channel_row(x as u64, &mut row);
                let draws = 200_000;
                let rows = privatized(
                    &m,
                    &vec![x; draws],
                    Stages::Alternating { first_user: 0 },
                    50 + x as u64,
                );
                for stage in [false, true] {
                    let mut freq = vec![0.0; 8];
                    for (i, &r) in rows.iter().enumerate() {
                        assert_eq!(get_bit(&[r], 3), i % 2 == 1);
                        assert_eq!(r & 0x0F, 0, "padding bits set");
                        if (i % 2 == 1) == stage {
                            let o =
                                (0..3).fold(0usize, |o, j| o | (get_bit(&[r], j) as usize) << j);
                            freq[o] += 2.0 / draws as f64;
                        }
                    }
                    let chi2 = chi_square(&freq, &row, draws / 2);
                    // df = 7: P(chi2 > 24.32) = 0.001.
                    assert!(chi2 < 24.32, "eps {eps} x {x} stage {stage}: chi2 {chi2}");
                }
            }
        }
    }

    /// The statistic of packed rows counted one bit at a time.
    fn plain_statistic(k: u64, rows: &[u8], skip: &[usize]) -> Vec<u64> {
        let width = row_bytes(k + 1);
        let mut want = vec![0u64; 2 * k as usize + 1];
        for (i, row) in rows.chunks_exact(width).enumerate() {
            if skip.contains(&i) {
                continue;
            }
            let offset = if get_bit(row, k) { k as usize } else { 0 };
            for j in 0..k {
                want[offset + j as usize] += get_bit(row, j) as u64;
            }
            want[2 * k as usize] += get_bit(row, k) as u64;
        }
        want
    }

    #[test]
    fn aggregation_reads_each_stage_into_its_counts() {
        // k = 16: the stage bit opens a byte of its own; 3 tiles + 1 bit: several tiles,
        // the stage bit in the last one.
        for k in [16u64, 70, (3 * BIT_TILE_BYTES * 8) as u64] {
            let m = TwoStageRappor::new(k, 1.0).unwrap();
            let width = row_bytes(k + 1);
            let rows = 900;
            let pad = (8 * width as u64 - k - 1) as u32;
            let mut reports: Vec<u8> = (0..(rows * width) as u32)
                .map(|i| (i ^ 7).wrapping_mul(2_654_435_761).rotate_left(9) as u8)
                .collect();
            let bad = [100usize, 650];
            for i in 0..rows {
                let last = &mut reports[i * width + width - 1];
                if pad > 0 {
                    if bad.contains(&i) {
                        *last |= 1;
                    } else {
                        *last &= !((1u16 << pad) - 1) as u8;
                    }
                }
            }
            let skip: &[usize] = if pad > 0 { &bad } else { &[] };
            let want = plain_statistic(k, &reports, skip);
            assert!(want[2 * k as usize] > 300 && want[2 * k as usize] < 600);
            for threads in [1, 4] {
                let mut counts = vec![0u64; 2 * k as usize + 1];
                let t = in_pool(threads, || m.aggregate(&reports, &mut counts, true)).unwrap();
                assert_eq!(t.valid as usize, rows - skip.len());
                assert_eq!(counts, want, "k {k}, {threads} threads");
            }
            if pad > 0 {
                let mut counts = vec![3u64; 2 * k as usize + 1];
                let e = m.aggregate(&reports, &mut counts, false).unwrap_err();
                assert!(e.to_string().contains("row 100"), "{e}");
                assert!(
                    counts.iter().all(|&c| c == 3),
                    "a refused batch changed counts"
                );
            }
            // A count that would wrap: refused, nothing changed.
            let mut full = vec![0u64; 2 * k as usize + 1];
            full[2 * k as usize] = u64::MAX;
            let before = full.clone();
            assert!(m.aggregate(&reports, &mut full, true).is_err());
            assert_eq!(full, before);
            assert!(m.aggregate(&reports, &mut full[1..], true).is_err());
            assert!(m
                .aggregate(&reports[1..], &mut vec![0; full.len()], true)
                .is_err());
        }
    }

    #[test]
    fn privatize_then_aggregate_counts_the_stages() {
        let m = TwoStageRappor::new(40, 2.0).unwrap();
        let values: Vec<u32> = (0..100_001u32).map(|i| (i * 7) % 40).collect();
        let rows = privatized(&m, &values, Stages::Alternating { first_user: 0 }, 4);
        let mut counts = vec![0u64; 81];
        let t = m.aggregate(&rows, &mut counts, false).unwrap();
        assert_eq!((t.valid, t.invalid), (100_001, 0));
        assert_eq!(counts[80], 50_000);
        assert_eq!(counts, plain_statistic(40, &rows, &[]));
        let run = |threads| {
            in_pool(threads, || {
                privatized(&m, &values, Stages::Alternating { first_user: 3 }, 4)
            })
        };
        assert_eq!(run(1), run(3));
        // Explicit stages are checked.
        let stages = vec![1u8; 3];
        let mut out = vec![0u8; 3 * 6];
        let e = m
            .privatize(
                &key_from_u64(1),
                &[1, 2],
                Stages::Explicit(&stages),
                &mut out[..12],
            )
            .unwrap_err();
        assert!(e.to_string().contains("one entry per value"), "{e}");
        let e = m
            .privatize(
                &key_from_u64(1),
                &[1, 2, 3],
                Stages::Explicit(&[1, 0, 2]),
                &mut out,
            )
            .unwrap_err();
        assert!(e.to_string().contains("stages[1] = 0"), "{e}");
        let e = m
            .privatize(
                &key_from_u64(1),
                &[1, 40, 3],
                Stages::Explicit(&[1, 2, 2]),
                &mut out,
            )
            .unwrap_err();
        assert!(e.to_string().contains("values[1] = 40"), "{e}");
    }

    /// Reference selection: indices sorted by (count descending, index ascending).
    fn top_reference(counts: &[u64], size: usize) -> Vec<bool> {
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(counts[i]), i));
        let mut member = vec![false; counts.len()];
        order[..size].iter().for_each(|&i| member[i] = true);
        member
    }

    #[test]
    fn two_stage_estimate_keeps_the_top_2s_with_ties_to_the_lowest_index() {
        let k = 10u64;
        let m = TwoStageRappor::new(k, 1.0).unwrap();
        let f = m.flip_probability();
        // M: values 0..10 with ties; N: anything; n2 = 50 of n = 100.
        let stage1 = [5u64, 9, 9, 1, 7, 9, 0, 7, 3, 7];
        let stage2: Vec<u64> = (0..10).map(|x| 10 + 3 * x).collect();
        let mut counts = stage1.to_vec();
        counts.extend(&stage2);
        counts.push(50);
        // s = 2: T = the 4 largest: 9, 9, 9 (1, 2, 5) and the first 7 (index 4).
        let est = m.two_stage_estimate(&counts, 100, 2).unwrap();
        for x in 0..10 {
            let want = if [1, 2, 4, 5].contains(&x) {
                (stage2[x] as f64 / 50.0 - f) / (1.0 - 2.0 * f)
            } else {
                0.0
            };
            assert_eq!(est[x], want, "x {x}");
        }
        // 2s ≥ k keeps every value.
        let est = m.two_stage_estimate(&counts, 100, 5).unwrap();
        assert!(est.iter().all(|&v| v != 0.0));
        for (bad_n, s, what) in [
            (100, 0, "sparsity"),
            (100, 11, "sparsity"),
            (49, 2, "more than n"),
        ] {
            let e = m.two_stage_estimate(&counts, bad_n, s).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
        let mut none = counts.clone();
        none[20] = 0;
        let e = m.two_stage_estimate(&none, 100, 2).unwrap_err();
        assert!(e.to_string().contains("no stage-2 reports"), "{e}");
        let e = m.two_stage_estimate(&counts, 50, 2).unwrap_err();
        assert!(e.to_string().contains("no stage-1 reports"), "{e}");
        assert!(m.two_stage_estimate(&counts[1..], 100, 2).is_err());
    }

    #[test]
    fn radix_selection_matches_a_sort() {
        let mut rng = crate::rng::stream(&key_from_u64(12), 0);
        for case in 0..300u64 {
            let len = 1 + (rng.next_u64() % 300) as usize;
            // Few distinct values (many ties), or wide ones (several radix passes).
            let spread = [3u64, 1000, 1 << 40, u64::MAX][(case % 4) as usize];
            let counts: Vec<u64> = (0..len)
                .map(|_| {
                    let v = rng.next_u64();
                    if spread == u64::MAX {
                        v
                    } else {
                        v % spread
                    }
                })
                .collect();
            let size = 1 + (rng.next_u64() % len as u64) as usize;
            let reference = top_reference(&counts, size);
            let (v, r) = nth_largest(&counts, size).unwrap();
            let cutoff = nth_equal(&counts, v, r).unwrap();
            let member: Vec<bool> = counts
                .iter()
                .enumerate()
                .map(|(x, &c)| c > v || (c == v && x <= cutoff))
                .collect();
            assert_eq!(member, reference, "case {case}: len {len}, size {size}");
        }
        // Across chunks of the parallel passes.
        let counts: Vec<u64> = (0..3 * VALUE_CHUNK as u64 + 5)
            .map(|i| (i * 7919) % 1001)
            .collect();
        for size in [1, 77, VALUE_CHUNK + 3, counts.len()] {
            let (v, r) = nth_largest(&counts, size).unwrap();
            let cutoff = nth_equal(&counts, v, r).unwrap();
            let member: Vec<bool> = counts
                .iter()
                .enumerate()
                .map(|(x, &c)| c > v || (c == v && x <= cutoff))
                .collect();
            assert_eq!(member, top_reference(&counts, size), "size {size}");
        }
    }

    #[test]
    fn linear_maps_pool_the_stages_unbiasedly_and_are_adjoint() {
        for (k, eps) in [(3u64, 0.7), (6, 2.0), (100, 0.5)] {
            let m = TwoStageRappor::new(k, eps).unwrap();
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let expected = m.expected_frequencies(&p);
            assert_eq!(expected.len() as u64, 2 * k + 1);
            for (e, v) in m.estimate_from_frequencies(&expected).iter().zip(&p) {
                assert!((e - v).abs() < 1e-12);
            }
            let w: Vec<f64> = (0..2 * k + 1).map(|j| (j as f64 * 0.37).sin()).collect();
            let lhs: f64 = expected.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
            // Pooled raw estimate = RAPPOR's on M + N.
            let counts: Vec<u64> = (0..2 * k + 1).map(|j| (j * 13 + 5) % 40).collect();
            let pooled: Vec<u64> = (0..k as usize)
                .map(|j| counts[j] + counts[k as usize + j])
                .collect();
            let rappor = m.rappor().symmetric().estimate_raw(&pooled, 80);
            for (a, b) in m.estimate_raw(&counts, 80).iter().zip(&rappor) {
                assert!((a - b).abs() < 1e-15);
            }
            if k <= 6 {
                // Expected statistic against the channel rows: bit j of stage s is bit j
                // with bit k = s; the last coordinate is the stage bit.
                let by_rows = expected_from_rows(&m, &p);
                let half = 1usize << k;
                for j in 0..k as usize {
                    let (mut first, mut second) = (0.0, 0.0);
                    for (o, q) in by_rows.iter().enumerate() {
                        if o >> j & 1 == 1 {
                            if o < half {
                                first += q;
                            } else {
                                second += q;
                            }
                        }
                    }
                    assert!((expected[j] - first).abs() < 1e-14);
                    assert!((expected[k as usize + j] - second).abs() < 1e-14);
                }
                let staged: f64 = by_rows[half..].iter().sum();
                assert!((expected[2 * k as usize] - staged).abs() < 1e-14);
            }
        }
    }

    #[test]
    fn simulate_has_the_law_of_a_random_order_with_alternating_stages() {
        // Per bit j: E and Var of M_j and N_j, and Cov(M_j, N_j) = −(a − b)² Var(n1_j),
        // from the hypergeometric split n1_j of the n_j users of value j. At ε = 5 the
        // split is about half of the variance of M_0 (a binomial split would double that
        // part) and the covariance is −52 with a standard error of about 2.
        let true_counts = [700u64, 0, 150, 51, 300];
        let k = true_counts.len() as u64;
        let m = TwoStageRappor::new(k, 5.0).unwrap();
        let (a, b) = m.probabilities();
        let n: u64 = true_counts.iter().sum();
        let (n1, n2) = ((n - n / 2) as f64, (n / 2) as f64);
        let nf = n as f64;
        let reps = 2000;
        let runs: Vec<Vec<u64>> = (0..reps)
            .map(|s| m.simulate(&key_from_u64(s), &true_counts).unwrap())
            .collect();
        for run in &runs {
            assert_eq!(run[2 * k as usize], n / 2);
        }
        let r = reps as f64;
        for j in 0..k as usize {
            let nj = true_counts[j] as f64;
            let mean1 = nj * n1 / nf;
            let var_split = nj * (n1 / nf) * (1.0 - n1 / nf) * (nf - nj) / (nf - 1.0);
            let g2 = (a - b) * (a - b);
            let want = [
                (
                    n1 * b + (a - b) * mean1,
                    mean1 * a * (1.0 - a) + (n1 - mean1) * b * (1.0 - b) + g2 * var_split,
                ),
                (
                    n2 * b + (a - b) * (nj - mean1),
                    (nj - mean1) * a * (1.0 - a)
                        + (n2 - nj + mean1) * b * (1.0 - b)
                        + g2 * var_split,
                ),
            ];
            let samples: Vec<[f64; 2]> = runs
                .iter()
                .map(|c| [c[j] as f64, c[k as usize + j] as f64])
                .collect();
            let mut avg = [0.0; 2];
            for s in 0..2 {
                avg[s] = samples.iter().map(|v| v[s]).sum::<f64>() / r;
                let var = samples.iter().map(|v| (v[s] - avg[s]).powi(2)).sum::<f64>() / (r - 1.0);
                let (mean, sigma2) = want[s];
                assert!(
                    (avg[s] - mean).abs() < 5.0 * (sigma2 / r).sqrt(),
                    "bit {j} stage {}: mean {} vs {mean}",
                    s + 1,
                    avg[s]
                );
                // Sample variance of near-normal counts: relative sd √(2/(r − 1)) ≈ 0.032.
                assert!(
                    (var / sigma2 - 1.0).abs() < 0.16,
                    "bit {j} stage {}: var {var} vs {sigma2}",
                    s + 1
                );
            }
            let cov = samples
                .iter()
                .map(|v| (v[0] - avg[0]) * (v[1] - avg[1]))
                .sum::<f64>()
                / (r - 1.0);
            let want_cov = -(a - b) * (a - b) * var_split;
            // The sample covariance has sd √((σ₁²σ₂² + cov²)/r).
            let sd = ((want[0].1 * want[1].1 + want_cov * want_cov) / r).sqrt();
            assert!(
                (cov - want_cov).abs() < 5.0 * sd,
                "bit {j}: cov {cov} vs {want_cov}"
            );
        }
    }

    #[test]
    fn simulate_is_reproducible_and_checks_its_input() {
        let m = TwoStageRappor::new(5000, 0.9).unwrap();
        let counts: Vec<u64> = (0..5000u64)
            .map(|x| if x < 64 { 15_000 } else { x % 3 })
            .collect();
        let key = key_from_u64(8);
        let one = in_pool(1, || m.simulate(&key, &counts).unwrap());
        assert_eq!(one, in_pool(3, || m.simulate(&key, &counts).unwrap()));
        assert_ne!(one, m.simulate(&key_from_u64(9), &counts).unwrap());
        assert!(m.simulate(&key, &counts[1..]).is_err());
        let mut huge = vec![0u64; 5000];
        huge[0] = u64::MAX;
        huge[1] = 1;
        assert!(m.simulate(&key, &huge).is_err());
        // Huge n: the stages split evenly, counts near their means.
        let mut big = vec![0u64; 5000];
        big[3] = 1u64 << 40; // the most one simulation accepts
        assert!(m
            .simulate(&key, &[&big[..3], &[(1u64 << 40) + 1], &big[4..]].concat())
            .is_err());
        let s = m.simulate(&key, &big).unwrap();
        let (a, b) = m.probabilities();
        let half = (1u64 << 39) as f64;
        assert_eq!(s[10_000], 1 << 39);
        for offset in [0, 5000] {
            assert!((s[offset + 3] as f64 - a * half).abs() < 6.0 * (half * a * (1.0 - a)).sqrt());
            assert!((s[offset] as f64 - b * half).abs() < 6.0 * (half * b * (1.0 - b)).sqrt());
        }
    }
}
