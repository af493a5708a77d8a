//! High-Low Hadamard Response: distribution estimation under (A, ε)-High-Low LDP
//! (Acharya, Bonawitz, Kairouz, Ramage & Sun, "Context-aware local differential privacy",
//! ICML 2020, Section 5.1, eqs. (13)–(19), Theorem 3, with the corrections listed on the docs
//! page Mechanisms › Context-aware LDP applied here).
//!
//! Only the *sensitive* values `A ⊆ [0, k)` are protected: the channel satisfies
//! `Q(y|x) ≤ e^ε Q(y|x')` for every `x ∈ A`, every `x' ≠ x` and every report y, and nothing for
//! `x ∉ A` (budget matrix `privacy.high_low_budgets`: ε on the rows of A, +∞ elsewhere).
//!
//! # Layout
//! `s = |A|`, `t = k − s`, `S = 2^⌈log2(s + 1)⌉` (the smallest power of two above s; S = 1
//! when s = 0). Sensitive values are relabelled `a = 0 … s − 1` in increasing order of value,
//! the others `u = 0 … t − 1` likewise. Reports are integers in `[0, S + t)`: the *Hadamard
//! part* `[0, S)`, and one *dedicated slot* `S + u` per non-sensitive value (the paper's
//! `y = x + S − s`, 1-based). `S + t ≤ 2k`.
//!
//! # Channel (eqs. (13), (14), with this project's correction of (13))
//! * Sensitive a uses row `a + 1` of the Sylvester matrix `H_S` (the printed eq. (13) says row
//!   x, which makes row 0 — all +1 — a symbol's set; we measured a row sum of 1.46): its
//!   set is `C_a = {y ∈ [0, S) : H_S(a + 1, y) = +1}`, `|C_a| = S/2`. With probability ρ it
//!   reports a uniform element of `C_a`, else a uniform element of `[0, S) \ C_a`:
//!   `Q(y|a) = 2ρ/S` on `C_a`, `2(1 − ρ)/S` on the rest of `[0, S)`, 0 on the slots.
//! * Non-sensitive u reports its slot `S + u` with probability q, else a uniform element of
//!   `[0, S)`: `Q(S + u|u) = q`, `Q(y|u) = (1 − q)/S` for `y < S`, 0 on the other slots.
//!
//! The paper's values are `ρ = e^ε/(e^ε + 1)` and `q = (e^ε − 1)/(e^ε + 1)`. Realized (what the
//! sampler draws, exactly): `ρ'` = the double `e^ε/(e^ε + 1)` rounded down by 8 ulps, and
//! `q'` = the double `expm1(ε)/(expm1(ε) + 2)` rounded down by 8 ulps (expm1: `e^ε − 1` would
//! lose the low bits of q to cancellation at small ε), both below their real values.
//!
//! One report costs one 64-bit word w of the user's stream (rarely more): the Bernoulli
//! (ρ' or q') is decided exactly by its high 32 bits (`HighBitsBernoulli`: `hi < ⌊p·2^32⌋`,
//! and on equality, probability 2^−32, an exact Bernoulli of the remainder from further
//! words), and the uniform element by its low 32 bits: v = `⌊lo·n/2^32⌋` is exactly uniform
//! on `[0, n)` because n (S/2 or S) is a power of two at most 2^32 (Lemire's method without
//! rejection). The two halves of w are independent. The v-th element of `C_a` or of its
//! complement is `HadamardResponse::nth_with_parity` (a bijection, so uniform). The
//! realized budgets are then
//! * sensitive vs sensitive: `ε_AA = ln(ρ'/(1 − ρ'))` (two distinct rows of H_S disagree on
//!   some y, so it is attained when s ≥ 2),
//! * sensitive vs non-sensitive: `ε_AN = ln(2ρ'/(1 − q'))` (attained when s ≥ 1 and t ≥ 1),
//! * every other pair: +∞ (a non-sensitive value's slot is impossible under any other value),
//!
//! both at most ε because `ρ' ≤ e^ε/(e^ε + 1)` and `1 − q' ≥ 2/(e^ε + 1)` as real numbers.
//! [`HighLowHadamardResponse::realized_epsilon`] is the largest realized finite budget:
//! `max(ε_AA, ε_AN)` over the kinds of pairs that exist. With s = 0 no pair is constrained
//! (see below) and it is `ε_AN`, the budget the same q' would give a sensitive value, so that
//! the shared rule on the realized ε (`mechanisms::check_realized`) still refuses an ε whose
//! q' double precision cannot represent.
//!
//! # Estimator (eqs. (17), (18), with the realized probabilities)
//! With N the report histogram of n reports and f = N/n, the expected frequencies are
//! `E f_y = [P_A + (2ρ' − 1)·Σ_a p_a H_S(a + 1, y) + (1 − q') P_N] / S` for `y < S` (P_A, P_N the
//! mass of the sensitive / other values) and `E f_{S+u} = q' p_u`. The rows `r ≥ 1` of H_S sum
//! to 0 and are orthogonal, so `(H_S E f_{[0,S)})_{a+1} = (2ρ' − 1) p_a` and
//! * `p̂_a = c_A (H_S f_{[0,S)})_{a+1}`, `c_A = 1/(2ρ' − 1)` — one FWHT of the Hadamard part;
//!   equal to the paper's eq. (17), `2c(p̂(S_a) − 1/(e^ε+1)) − c(p̂([S]) − 2/(e^ε+1))`;
//! * `p̂_u = c_N f_{S+u}`, `c_N = 1/q'` — eq. (18);
//!
//! both exactly unbiased for the realized channel (the paper's `c = (e^ε + 1)/(e^ε − 1)` is
//! `c_A = c_N` before rounding). Their variances (multinomial reports; per report
//! `Z = H_S(a + 1, Y)·[Y < S]` has `E Z² = p([S])`):
//! * `Var p̂_a = (c_A² p([S]) − p_a²)/n`, `p([S]) = P_A + (1 − q') P_N` the probability of a
//!   report in the Hadamard part (eq. (16));
//! * `Var p̂_u = (c_N p_u − p_u²)/n`.
//!
//! Hence bound (19): `E‖p̂ − p‖₁ ≤ √(3 s² c²/n) + √(c k/n)` (Cauchy–Schwarz over each part).
//! Decoding costs one FWHT of length S plus O(k): `O(n + S log S + k)`.
//!
//! # Edge cases
//! * s = k (t = 0): the high-privacy Hadamard Response on k values (`HadamardResponse` with
//!   `blocks = 1`): the same outputs and rows (ρ' within an ulp: HR evaluates another
//!   floating-point expression of `e^ε/(e^ε + 1)`).
//! * s = 0: High-Low LDP with no sensitive value constrains nothing (every off-diagonal budget
//!   is +∞). The construction is applied as for every A — S = 1, the Hadamard part is the
//!   single report 0, a user reports `1 + u` with probability q' and 0 otherwise — so that the
//!   non-sensitive users' reports, the estimator and its variance `(c_N p_u − p_u²)/n` do not
//!   change in kind when A becomes empty. (Where nothing needs protection at all, a plain
//!   histogram of the values is c_N times more accurate.)
//!
//! # Simulation (exact in law, cost independent of n)
//! The mixture form of `mechanisms` ("Simulation"): `Q(·|a) = (2ρ' − 1)·U(C_a) +
//! 2(1 − ρ')·U([0, S))` and `Q(·|u) = q'·δ_{S+u} + (1 − q')·U([0, S))`. One binomial per value
//! draws its own-set users; the uniform users of all values form one multinomial over
//! `[0, S)` (`add_uniform_reports`); the own-set users of the sensitive values are spread over
//! `C_a` value by value, or — when they number at least 4 per output — by Hadamard Response's
//! passes over the single block of S outputs (`hadamard_response::hadamard_passes`), in
//! O(S log S) draws.
//!
//! # Value lookup
//! A report needs the kind and index of its value: `(sensitive, rank)` with rank = the number
//! of sensitive values below x. For `k ≤ 2^26`, or when the table is no larger than the
//! sensitive list itself (`16 s ≥ k`), a rank table holds one 64-bit membership word and the
//! rank of its first bit per 64 values (16 bytes per 64 values: 2.5 KB at k = 10^4, cache
//! resident); otherwise a binary search in the sorted sensitive list (O(log s)).

use super::hadamard_response::{hadamard_passes, HadamardResponse, PASSES_ABOVE, PASS_CHUNK};
use super::randomized_response::{epsilon_too_small, round_down, PRIVACY_MARGIN_ULPS};
use super::{
    add_uniform_reports, as_atomic, check_domain, check_epsilon, draw_own_counts,
    simulation_footprint, simulation_users, spread_interruptible, IndexMechanism, Operation,
};
use crate::error::{Error, Result};
use crate::hadamard::fwht_in_place_checked;
use crate::interrupt::{interruptible, Check};
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{BernoulliThreshold, Key, StreamRng};
use rand_core::Rng;
use rayon::prelude::*;
use std::sync::atomic::Ordering;

/// Domains up to this size always get the rank table (at most 16 MiB).
const RANK_TABLE_ALWAYS: u64 = 1 << 26;

/// Values per task when an estimate or a channel product is assembled value by value.
const ASSEMBLE_CHUNK: usize = 1 << 14;

#[derive(Clone, Debug)]
pub struct HighLowHadamardResponse {
    k: u64,
    epsilon: f64,
    /// The sensitive values, sorted increasingly (distinct, each < k).
    sensitive: Vec<u32>,
    /// `S = 2^⌈log2(s + 1)⌉`: outputs of the Hadamard part.
    big_s: u64,
    /// Probability that a sensitive value reports inside its own set, as realized.
    rho: f64,
    inside: HighBitsBernoulli,
    /// Probability that a non-sensitive value reports its own slot, as realized.
    q: f64,
    own_slot: HighBitsBernoulli,
    /// Per 64 values: `[membership bits, sensitive values below the word]` (empty when the
    /// lookup binary-searches `sensitive`).
    ranks: Vec<u64>,
}

impl HighLowHadamardResponse {
    /// The mechanism for values in `[0, k)` protecting the values of `sensitive` (distinct,
    /// each < k, in any order) with budget ε.
    pub fn new(k: u64, epsilon: f64, sensitive: &[u64]) -> Result<Self> {
        check_domain(k)?;
        let table = k <= RANK_TABLE_ALWAYS || (sensitive.len() as u64).saturating_mul(16) >= k;
        Self::with_lookup(k, epsilon, sensitive, table)
    }

    /// [`new`](Self::new) with the value lookup chosen: the rank table (`true`) or a binary
    /// search of the sorted sensitive list (`false`); the reports are the same.
    pub fn with_lookup(k: u64, epsilon: f64, sensitive: &[u64], rank_table: bool) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let words = k.div_ceil(64);
        Footprint::new("HighLowHadamardResponse")
            .add("the sensitive values", sensitive.len() as u64, 4)
            .add("the rank table", if rank_table { 2 * words } else { 0 }, 8)
            .hint("lower k or the number of sensitive values")
            .check()?;
        if let Some(i) = sensitive.iter().position(|&v| v >= k) {
            return Err(Error::Value(format!(
                "sensitive values must lie in [0, {k}): sensitive[{i}] = {}",
                sensitive[i]
            )));
        }
        let mut sorted = allocate_zeroed::<u32>(sensitive.len(), "the sensitive values")?;
        sorted
            .iter_mut()
            .zip(sensitive)
            .for_each(|(o, &v)| *o = v as u32);
        sorted.par_sort_unstable();
        if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::Value(format!(
                "sensitive values must be distinct: {} is repeated",
                pair[0]
            )));
        }
        let s = sorted.len() as u64;
        let big_s = (s + 1).next_power_of_two();
        let e = epsilon.exp();
        let rho = round_down(e / (e + 1.0), PRIVACY_MARGIN_ULPS);
        if !(rho > 0.5) {
            return Err(epsilon_too_small(epsilon));
        }
        let em1 = epsilon.exp_m1();
        let q_float = em1 / (em1 + 2.0);
        // Rounding down by 8 ulps needs more than 8 ulps above zero.
        if !(q_float >= f64::MIN_POSITIVE) {
            return Err(epsilon_too_small(epsilon));
        }
        let q = round_down(q_float, PRIVACY_MARGIN_ULPS);
        let mut ranks = Vec::new();
        if rank_table {
            ranks = allocate_zeroed::<u64>(2 * words as usize, "the rank table")?;
            for &v in &sorted {
                ranks[2 * (v as usize / 64)] |= 1 << (v % 64);
            }
            let mut below = 0u64;
            for pair in ranks.chunks_exact_mut(2) {
                pair[1] = below;
                below += pair[0].count_ones() as u64;
            }
        }
        Ok(Self {
            k,
            epsilon,
            sensitive: sorted,
            big_s,
            rho,
            inside: HighBitsBernoulli::new(rho)?,
            q,
            own_slot: HighBitsBernoulli::new(q)?,
            ranks,
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The sensitive values, sorted increasingly.
    pub fn sensitive(&self) -> &[u32] {
        &self.sensitive
    }

    /// `(s, t, S)`: sensitive values, other values, outputs of the Hadamard part.
    pub fn shape(&self) -> (u64, u64, u64) {
        let s = self.sensitive.len() as u64;
        (s, self.k - s, self.big_s)
    }

    /// Whether the value lookup uses the rank table (else a binary search).
    pub fn has_rank_table(&self) -> bool {
        !self.ranks.is_empty()
    }

    fn outputs(&self) -> u64 {
        self.big_s + self.k - self.sensitive.len() as u64
    }

    /// `(ρ', q')`: the realized probabilities of a sensitive value reporting inside its set
    /// and of a non-sensitive value reporting its slot.
    pub fn probabilities(&self) -> (f64, f64) {
        (self.rho, self.q)
    }

    /// `(ε_AA, ε_AN)`: the realized budgets between two sensitive values and from a sensitive
    /// value to a non-sensitive one (module documentation), whether or not such pairs exist.
    pub fn pair_budgets(&self) -> (f64, f64) {
        let (rho, q) = (self.rho, self.q);
        // 1 − ρ' is exact (ρ' ≥ 1/2); ln(1 − q') = ln_1p(−q') without rounding 1 − q'.
        (rho.ln() - (1.0 - rho).ln(), (2.0 * rho).ln() - (-q).ln_1p())
    }

    /// The largest realized finite budget (module documentation): `max(ε_AA, ε_AN)` over the
    /// kinds of pairs that exist; `ε_AN` when s = 0.
    pub fn realized_epsilon(&self) -> f64 {
        let (both_sensitive, cross) = self.pair_budgets();
        let (s, t, _) = self.shape();
        match (s >= 2, t >= 1 && s >= 1) {
            (true, true) => both_sensitive.max(cross),
            (true, false) => both_sensitive,
            _ => cross,
        }
    }

    /// `c_A = 1/(2ρ' − 1)` and `c_N = 1/q'`: the estimator's scale factors.
    fn scales(&self) -> (f64, f64) {
        (1.0 / (2.0 * self.rho - 1.0), 1.0 / self.q)
    }

    /// `(true, a)` for the sensitive value of index a, `(false, u)` for the non-sensitive
    /// value of index u.
    #[inline(always)]
    fn classify(&self, x: u64) -> (bool, u64) {
        if !self.ranks.is_empty() {
            let word = 2 * (x / 64) as usize;
            let (bits, before) = (self.ranks[word], self.ranks[word + 1]);
            let bit = x % 64;
            let rank = before + (bits & ((1u64 << bit) - 1)).count_ones() as u64;
            if (bits >> bit) & 1 == 1 {
                (true, rank)
            } else {
                (false, x - rank)
            }
        } else {
            let rank = self.sensitive.partition_point(|&a| (a as u64) < x) as u64;
            if self
                .sensitive
                .get(rank as usize)
                .is_some_and(|&a| a as u64 == x)
            {
                (true, rank)
            } else {
                (false, x - rank)
            }
        }
    }

    /// The value of report slot `S + u` and of Hadamard row `a + 1` are found by index; this
    /// writes `sensitive(a)` or `other(u)` for every value x into a vector of length k, in
    /// parallel over fixed chunks of values (each starts with one binary search), checking
    /// `check` before each chunk.
    fn assemble<C: Check>(
        &self,
        check: &C,
        sensitive: impl Fn(usize) -> f64 + Sync,
        other: impl Fn(usize) -> f64 + Sync,
    ) -> Result<Vec<f64>> {
        let mut out = vec![0.0; self.k as usize];
        out.par_chunks_mut(ASSEMBLE_CHUNK)
            .enumerate()
            .try_for_each(|(c, piece)| {
                check()?;
                let first = c * ASSEMBLE_CHUNK;
                let list = &self.sensitive;
                let mut rank = list.partition_point(|&a| (a as usize) < first);
                for (i, v) in piece.iter_mut().enumerate() {
                    let x = first + i;
                    if list.get(rank).is_some_and(|&a| a as usize == x) {
                        *v = sensitive(rank);
                        rank += 1;
                    } else {
                        *v = other(x - rank);
                    }
                }
                Ok(())
            })?;
        Ok(out)
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`): an
    /// estimate holds the transform of the Hadamard part (S) and the result (k); a channel
    /// product the transform and a result of `max(k, S + t)`; a simulation the counts
    /// (S + t) and, when it uses the passes, the odd-parity states (S).
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "HighLowHadamardResponse";
        let (k, big_s, outputs) = (self.k, self.big_s, self.outputs());
        match op {
            Operation::Estimate => Footprint::new(format!("{name} estimate"))
                .add("the Hadamard part's transform", big_s, 8)
                .add("the result", k, 8),
            Operation::ChannelProduct => Footprint::new(format!("{name} channel product"))
                .add("the Hadamard part's transform", big_s, 8)
                .add("the result", k.max(outputs), 8),
            Operation::Simulate { users } => {
                let odd = if self.simulation_may_use_passes(users) {
                    big_s
                } else {
                    0
                };
                simulation_footprint(name, outputs, 1).add("the odd-parity states", odd, 8)
            }
        }
    }

    /// Row x of the channel matrix (length S + t).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let big_s = self.big_s as usize;
        row.fill(0.0);
        match self.classify(x) {
            (true, a) => {
                let half = (self.big_s / 2) as f64;
                let (inside, outside) = (self.rho / half, (1.0 - self.rho) / half);
                for (y, v) in row[..big_s].iter_mut().enumerate() {
                    let plus = ((a + 1) & y as u64).count_ones() % 2 == 0;
                    *v = if plus { inside } else { outside };
                }
            }
            (false, u) => {
                row[..big_s].fill((1.0 - self.q) / self.big_s as f64);
                row[big_s + u as usize] = self.q;
            }
        }
    }

    interruptible! {
        /// Unbiased estimate from the report histogram (length S + t, `n > 0`).
        pub fn estimate_raw / try_estimate_raw
            = try_estimate_raw_with(counts: &[u64], n: u64) -> Vec<f64>;
    }

    /// The transform of the Hadamard part is exact in i64 (|entries| ≤ n).
    fn try_estimate_raw_with<C: Check>(
        &self,
        counts: &[u64],
        n: u64,
        check: &C,
    ) -> Result<Vec<f64>> {
        let big_s = self.big_s as usize;
        let mut t: Vec<i64> = counts[..big_s].par_iter().map(|&c| c as i64).collect();
        fwht_in_place_checked(&mut t, check)?;
        let (c_a, c_n) = self.scales();
        let (c_a, c_n) = (c_a / n as f64, c_n / n as f64);
        let slots = &counts[big_s..];
        self.assemble(check, |a| t[a + 1] as f64 * c_a, |u| slots[u] as f64 * c_n)
    }

    interruptible! {
        /// Unbiased estimate from report frequencies (length S + t), e.g. exact expectations.
        pub fn estimate_from_frequencies / try_estimate_from_frequencies
            = try_estimate_from_frequencies_with(freq: &[f64]) -> Vec<f64>;
    }

    fn try_estimate_from_frequencies_with<C: Check>(
        &self,
        freq: &[f64],
        check: &C,
    ) -> Result<Vec<f64>> {
        let big_s = self.big_s as usize;
        let mut t = freq[..big_s].to_vec();
        fwht_in_place_checked(&mut t, check)?;
        let (c_a, c_n) = self.scales();
        let slots = &freq[big_s..];
        self.assemble(check, |a| t[a + 1] * c_a, |u| slots[u] * c_n)
    }

    interruptible! {
        /// Expected report frequencies `Qᵀ dist` (length S + t), one FWHT of length S.
        pub fn expected_frequencies / try_expected_frequencies
            = try_expected_frequencies_with(dist: &[f64]) -> Vec<f64>;
    }

    fn try_expected_frequencies_with<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        let big_s = self.big_s as usize;
        let mut out = vec![0.0; self.outputs() as usize];
        // p_a at row a + 1, q'·p_u at slot S + u; the masses in index order (a parallel
        // float sum would depend on the thread count).
        let (mut mass_a, mut mass_n) = (0.0, 0.0);
        let mut rank = 0usize;
        for (x, &p) in dist.iter().enumerate() {
            if self.sensitive.get(rank).is_some_and(|&a| a as usize == x) {
                out[rank + 1] = p;
                mass_a += p;
                rank += 1;
            } else {
                out[big_s + x - rank] = self.q * p;
                mass_n += p;
            }
        }
        let (hadamard, _) = out.split_at_mut(big_s);
        fwht_in_place_checked(hadamard, check)?;
        // E f_y = [P_A + (2ρ' − 1)(H v)_y + (1 − q') P_N] / S, v_{a+1} = p_a, v_0 = 0.
        let base = mass_a + (1.0 - self.q) * mass_n;
        let gap = 2.0 * self.rho - 1.0;
        let scale = 1.0 / self.big_s as f64;
        hadamard
            .par_iter_mut()
            .with_min_len(1 << 14)
            .for_each(|v| *v = (base + gap * *v) * scale);
        Ok(out)
    }

    interruptible! {
        /// `Q w` (length k): `(Q w)_x = Σ_y Q(y|x) w_y`, the adjoint of `expected_frequencies`.
        pub fn channel_apply / try_channel_apply
            = try_channel_apply_with(w: &[f64]) -> Vec<f64>;
    }

    fn try_channel_apply_with<C: Check>(&self, w: &[f64], check: &C) -> Result<Vec<f64>> {
        let big_s = self.big_s as usize;
        // In index order (a parallel float sum would depend on the thread count).
        let total: f64 = w[..big_s].iter().sum();
        let mut t = w[..big_s].to_vec();
        fwht_in_place_checked(&mut t, check)?;
        let scale = 1.0 / self.big_s as f64;
        let gap = 2.0 * self.rho - 1.0;
        let uniform = (1.0 - self.q) * total * scale;
        let slots = &w[big_s..];
        self.assemble(
            check,
            |a| (total + gap * t[a + 1]) * scale,
            |u| self.q * slots[u] + uniform,
        )
    }

    /// The own-set weights of the mixture form: `2ρ' − 1` (sensitive), `q'` (other).
    fn own_weights(&self) -> (f64, f64) {
        (2.0 * self.rho - 1.0, self.q)
    }

    /// Whether `sensitive_users` users of sensitive values are spread by the passes: when
    /// their expected own-set users number at least [`PASSES_ABOVE`] per output of the
    /// Hadamard part.
    fn simulation_uses_passes(&self, sensitive_users: u64) -> bool {
        sensitive_users as f64 * self.own_weights().0 >= PASSES_ABOVE * self.big_s as f64
    }

    /// Whether a simulation of `users` users in all may use the passes (for its footprint).
    fn simulation_may_use_passes(&self, users: u64) -> bool {
        self.simulation_uses_passes(users)
    }

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law
    /// (module documentation, "Simulation").
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        // Σ over the sensitive values fits: it is at most the total, checked above.
        let sensitive_users: u64 = self
            .sensitive
            .iter()
            .map(|&a| true_counts[a as usize])
            .sum();
        let passes = self.simulation_uses_passes(sensitive_users);
        self.simulate_with_chunk(key, true_counts, passes, PASS_CHUNK)
    }

    /// With the sensitive own sets spread by the passes (`chunk` positions per task, a power
    /// of two) or value by value.
    fn simulate_with_chunk(
        &self,
        key: &Key,
        true_counts: &[u64],
        passes: bool,
        chunk: usize,
    ) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let big_s = self.big_s as usize;
        let half = self.big_s / 2;
        let (own_sensitive, own_other) = self.own_weights();
        let weight = |x: u64| {
            if self.classify(x).0 {
                own_sensitive
            } else {
                own_other
            }
        };
        let mut counts = allocate_zeroed::<u64>(self.outputs() as usize, "the report counts")?;
        let uniform = if passes {
            let mut odd = allocate_zeroed::<u64>(big_s, "the odd-parity states")?;
            let cells = as_atomic(&mut counts);
            // K_a goes to its state (row a + 1, even): the passes spread it.
            let uniform = draw_own_counts(key, true_counts, weight, |_, x, kept| {
                let (sensitive, index) = self.classify(x);
                let at = if sensitive {
                    index as usize + 1
                } else {
                    big_s + index as usize
                };
                cells[at].store(kept, Ordering::Relaxed);
                Ok(())
            })?;
            hadamard_passes(key, &mut counts[..big_s], &mut odd, self.big_s, chunk, 0)?;
            uniform
        } else {
            let cells = as_atomic(&mut counts);
            draw_own_counts(key, true_counts, weight, |rng, x, kept| {
                let (sensitive, index) = self.classify(x);
                if !sensitive {
                    cells[big_s + index as usize].store(kept, Ordering::Relaxed);
                    return Ok(());
                }
                spread_interruptible(rng, 0, half, kept, &mut |v, n| {
                    let y = HadamardResponse::nth_with_parity(index + 1, v, false);
                    cells[y as usize].fetch_add(n, Ordering::Relaxed);
                })
            })?
        };
        add_uniform_reports(key, &mut counts[..big_s], uniform)?;
        Ok(counts)
    }
}

impl IndexMechanism for HighLowHadamardResponse {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.outputs()
    }
    /// One word w per report (module documentation): the Bernoulli from its high half, the
    /// uniform element from its low half. Both kinds of value compute everything from the
    /// same word and the result is selected at the end, so that the kind (which follows the
    /// data) costs no mispredicted branch.
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let (sensitive, index) = self.classify(x);
        let word = rng.next_u64();
        let (high, low) = (word >> 32, word & 0xFFFF_FFFF);
        let bernoulli = if sensitive {
            &self.inside
        } else {
            &self.own_slot
        };
        let hit = bernoulli.decide(high, rng);
        // Sensitive: uniform on S/2 elements; other: uniform on the S of the Hadamard part.
        let v = (low * (self.big_s >> sensitive as u32)) >> 32;
        // Inside C_a (even parity with row a + 1) on a hit, else its complement in [0, S).
        let hadamard = HadamardResponse::nth_with_parity(index + 1, v, !hit);
        let other = if hit { self.big_s + index } else { v };
        if sensitive {
            hadamard
        } else {
            other
        }
    }
}

/// An exact Bernoulli(p) decided by 32 random bits in all but a 2^−32 fraction of draws:
/// with `p·2^32 = whole + rest` (`whole` an integer, `0 ≤ rest < 1`, both exact), a uniform
/// 32-bit `high` gives `high < whole`, except on `high = whole` where an exact
/// Bernoulli(`rest`) is drawn from the stream ([`BernoulliThreshold`]). So `P(true) =
/// whole/2^32 + rest/2^32 = p` exactly, for the binary value of every `p ∈ [0, 1]`.
#[derive(Clone, Copy, Debug)]
struct HighBitsBernoulli {
    whole: u64,
    rest: BernoulliThreshold,
}

impl HighBitsBernoulli {
    fn new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::Value(format!(
                "a probability must lie in [0, 1], got {p}"
            )));
        }
        // Exact: scaling by a power of two, the floor, and the fractional part of a double.
        let scaled = p * 4_294_967_296.0;
        let whole = scaled.floor();
        Ok(Self {
            whole: whole as u64,
            rest: BernoulliThreshold::new(scaled - whole)?,
        })
    }

    /// The outcome for the uniform 32-bit `high`, drawing from `rng` only on a tie.
    #[inline(always)]
    fn decide(&self, high: u64, rng: &mut StreamRng) -> bool {
        if high != self.whole {
            return high < self.whole;
        }
        self.tie(rng)
    }

    #[cold]
    #[inline(never)]
    fn tie(&self, rng: &mut StreamRng) -> bool {
        self.rest.sample(rng)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{
        assert_law_of, assert_simulate_matches_privatize_in_law, assert_simulation_law, chi_square,
        chi_square_critical, empirical_row, expected_from_rows,
    };
    use super::super::{channel_matrix, Estimator};
    use super::*;
    use crate::hadamard::sylvester_entry;

    fn every_third(k: u64) -> Vec<u64> {
        (0..k).step_by(3).collect()
    }

    /// The realized budget matrix of a channel (row-major, k × outputs): `E[x][x'] = max_y
    /// ln Q(y|x) − ln Q(y|x')` over `Q(y|x) > 0` (∞ when `Q(y|x') = 0` there), 0 diagonal.
    fn budgets_of(q: &[f64], k: usize) -> Vec<f64> {
        let cols = q.len() / k;
        let mut e = vec![0.0; k * k];
        for x in 0..k {
            for xp in (0..k).filter(|&xp| xp != x) {
                let mut worst = 0.0f64;
                for y in 0..cols {
                    let (a, b) = (q[x * cols + y], q[xp * cols + y]);
                    if a > 0.0 {
                        worst = worst.max(if b > 0.0 {
                            a.ln() - b.ln()
                        } else {
                            f64::INFINITY
                        });
                    }
                }
                e[x * k + xp] = worst;
            }
        }
        e
    }

    fn instances() -> Vec<HighLowHadamardResponse> {
        let mut out = vec![];
        for (k, sensitive) in [
            (2u64, vec![]),
            (2, vec![1]),
            (2, vec![0, 1]),
            (7, every_third(7)),
            (7, vec![6, 0, 3, 2]),
            (16, (0..15).collect()),
            (16, (0..16).collect()),
            (33, vec![32]),
            (100, every_third(100)),
        ] {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0] {
                for table in [true, false] {
                    out.push(
                        HighLowHadamardResponse::with_lookup(k, eps, &sensitive, table).unwrap(),
                    );
                }
            }
        }
        out
    }

    #[test]
    fn layout_and_lookup_follow_the_module_documentation() {
        let m = HighLowHadamardResponse::new(10, 1.0, &[7, 2, 5]).unwrap();
        assert_eq!(m.shape(), (3, 7, 4));
        assert_eq!(m.output_size(), 11);
        assert_eq!(m.sensitive(), &[2, 5, 7]);
        let kinds: Vec<(bool, u64)> = (0..10).map(|x| m.classify(x)).collect();
        let want = [
            (false, 0),
            (false, 1),
            (true, 0),
            (false, 2),
            (false, 3),
            (true, 1),
            (false, 4),
            (true, 2),
            (false, 5),
            (false, 6),
        ];
        assert_eq!(kinds, want);
        let search = HighLowHadamardResponse::with_lookup(10, 1.0, &[7, 2, 5], false).unwrap();
        assert!(m.has_rank_table() && !search.has_rank_table());
        for x in 0..10 {
            assert_eq!(search.classify(x), m.classify(x));
        }
        // Across word boundaries of the table.
        let sensitive: Vec<u64> = vec![0, 63, 64, 65, 127, 128, 199];
        let a = HighLowHadamardResponse::with_lookup(200, 1.0, &sensitive, true).unwrap();
        let b = HighLowHadamardResponse::with_lookup(200, 1.0, &sensitive, false).unwrap();
        for x in 0..200 {
            assert_eq!(a.classify(x), b.classify(x), "x {x}");
        }
        // Sensitive rows are rows a + 1 of H_S; slots S + u.
        let mut row = vec![0.0; 11];
        m.channel_row(5, &mut row);
        let (rho, q) = m.probabilities();
        for y in 0..4u64 {
            let want = if sylvester_entry(2, y) == 1 {
                rho / 2.0
            } else {
                (1.0 - rho) / 2.0
            };
            assert_eq!(row[y as usize], want);
        }
        assert!(row[4..].iter().all(|&v| v == 0.0));
        m.channel_row(8, &mut row);
        assert_eq!(row[4 + 5], q);
        assert!(row[..4].iter().all(|&v| v == (1.0 - q) / 4.0));
        // s = 0: S = 1; s = k: no slots.
        assert_eq!(
            HighLowHadamardResponse::new(5, 1.0, &[]).unwrap().shape(),
            (0, 5, 1)
        );
        let all = HighLowHadamardResponse::new(5, 1.0, &[0, 1, 2, 3, 4]).unwrap();
        assert_eq!((all.shape(), all.output_size()), ((5, 0, 8), 8));
    }

    #[test]
    fn bad_sensitive_sets_are_refused() {
        let e = HighLowHadamardResponse::new(10, 1.0, &[1, 10]).unwrap_err();
        assert!(e.to_string().contains("sensitive[1] = 10"), "{e}");
        let e = HighLowHadamardResponse::new(10, 1.0, &[4, 1, 4]).unwrap_err();
        assert!(e.to_string().contains("4 is repeated"), "{e}");
        assert!(HighLowHadamardResponse::new(10, 0.0, &[1]).is_err());
        assert!(HighLowHadamardResponse::new(10, f64::NAN, &[1]).is_err());
        assert!(HighLowHadamardResponse::new(10, 5e-324, &[]).is_err());
        assert!(HighLowHadamardResponse::new(1, 1.0, &[]).is_err());
    }

    #[test]
    fn channel_is_exactly_high_low_ldp_with_the_closed_form_budgets() {
        for m in instances() {
            let (s, t, _) = m.shape();
            let (k, size) = (m.k as usize, m.output_size());
            let q = channel_matrix(m.k, size, 1 << 22, |x, r| m.channel_row(x, r)).unwrap();
            for x in 0..k {
                let sum: f64 = q[x * size as usize..(x + 1) * size as usize].iter().sum();
                assert!((sum - 1.0).abs() < 1e-12, "row {x} sums to {sum}");
            }
            let e = budgets_of(&q, k);
            let (both, cross) = m.pair_budgets();
            let eps = m.epsilon();
            assert!(both <= eps && cross <= eps && eps - both.min(cross) < 1e-12 * eps.max(1.0));
            for x in 0..k as u64 {
                for xp in (0..k as u64).filter(|&xp| xp != x) {
                    let got = e[x as usize * k + xp as usize];
                    let want = match (m.classify(x).0, m.classify(xp).0) {
                        (true, true) => both,
                        (true, false) => cross,
                        (false, _) => f64::INFINITY,
                    };
                    assert!(
                        got == want || (got - want).abs() < 1e-12,
                        "k {k} s {s} eps {eps}: E[{x}][{xp}] = {got}, want {want}"
                    );
                }
            }
            let finite = e
                .iter()
                .filter(|v| v.is_finite())
                .fold(0.0f64, |a, &b| a.max(b));
            if s >= 1 {
                assert!((finite - m.realized_epsilon()).abs() < 1e-12, "s {s} t {t}");
            }
        }
    }

    #[test]
    fn all_sensitive_is_hadamard_response_with_one_block() {
        for (k, eps) in [(5u64, 0.5), (16, 2.0), (100, 1.0)] {
            let all: Vec<u64> = (0..k).collect();
            let m = HighLowHadamardResponse::new(k, eps, &all).unwrap();
            let hr = HadamardResponse::with_blocks(k, eps, Some(1)).unwrap();
            assert_eq!(m.output_size(), IndexMechanism::output_size(&hr));
            let size = m.output_size() as usize;
            let (mut a, mut b) = (vec![0.0; size], vec![0.0; size]);
            for x in 0..k {
                m.channel_row(x, &mut a);
                hr.channel_row(x, &mut b);
                // ρ' agrees within an ulp (HR's float expression rounds differently).
                for (u, v) in a.iter().zip(&b) {
                    assert!(
                        (u - v).abs() <= 4.0 * f64::EPSILON * v,
                        "k {k} eps {eps} row {x}"
                    );
                }
            }
            assert!((m.realized_epsilon() - hr.realized_epsilon()).abs() < 1e-14);
        }
    }

    #[test]
    fn estimator_is_unbiased_and_the_linear_maps_are_the_channel() {
        for m in instances() {
            let k = m.k;
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let freq = m.expected_frequencies(&p);
            for (a, b) in freq.iter().zip(&expected_from_rows(&m, &p)) {
                assert!((a - b).abs() < 1e-15, "{a} vs {b}");
            }
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-12, "k {k}: {a} vs {b}");
            }
            // Adjoint identity: <Qᵀp, w> = <p, Q w>.
            let size = m.output_size() as usize;
            let w: Vec<f64> = (0..size).map(|z| (z as f64 * 0.37).sin()).collect();
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
            // From counts: the same formula as from frequencies.
            let counts: Vec<u64> = (0..size as u64).map(|z| (z * 31 + 7) % 50).collect();
            let n: u64 = counts.iter().sum();
            let f: Vec<f64> = counts.iter().map(|&c| c as f64 / n as f64).collect();
            for (a, b) in m
                .estimate_raw(&counts, n)
                .iter()
                .zip(m.estimate_from_frequencies(&f))
            {
                assert!((a - b).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn sampler_matches_the_channel_with_both_lookups() {
        for (k, sensitive) in [
            (9u64, vec![1u64, 4, 5, 8]),
            (6, vec![]),
            (5, (0..5).collect()),
            (40, every_third(40)),
        ] {
            for table in [true, false] {
                let m = HighLowHadamardResponse::with_lookup(k, 1.0, &sensitive, table).unwrap();
                let size = m.output_size() as usize;
                let mut row = vec![0.0; size];
                for x in [0u32, 1, (k - 1) as u32] {
                    m.channel_row(x as u64, &mut row);
                    let draws = 300_000;
                    let freq = empirical_row(&m, x, draws, 11 + x as u64 + k);
                    for (f, r) in freq.iter().zip(&row) {
                        assert!(*r > 0.0 || *f == 0.0, "an impossible report was drawn");
                    }
                    let df = row.iter().filter(|&&r| r > 0.0).count() - 1;
                    let stat = chi_square(&freq, &row, draws);
                    assert!(
                        stat < chi_square_critical(df),
                        "k {k} x {x} table {table}: chi-square {stat} (df {df})"
                    );
                }
            }
        }
    }

    #[test]
    fn the_high_bits_bernoulli_is_exact_and_draws_the_remainder_on_a_tie() {
        let mut rng = crate::rng::stream(&crate::rng::key_from_u64(1), 0);
        // p·2^32 = 12345.25: below the tie true, above false, on it Bernoulli(1/4).
        let b = HighBitsBernoulli::new((12345.25) / 4_294_967_296.0).unwrap();
        assert_eq!(b.whole, 12345);
        assert!(b.decide(12344, &mut rng) && !b.decide(12346, &mut rng));
        let draws = 200_000;
        let ties = (0..draws).filter(|_| b.decide(12345, &mut rng)).count() as f64;
        let sigma = (0.25 * 0.75 / draws as f64).sqrt();
        assert!((ties / draws as f64 - 0.25).abs() < 5.0 * sigma, "{ties}");
        // The ends: p = 1 is always true (whole = 2^32), p = 0 never (tie on 0, remainder 0).
        let (one, zero) = (
            HighBitsBernoulli::new(1.0).unwrap(),
            HighBitsBernoulli::new(0.0).unwrap(),
        );
        for high in [0u64, 1, (1 << 32) - 1] {
            assert!(one.decide(high, &mut rng) && !zero.decide(high, &mut rng));
        }
        assert!(HighBitsBernoulli::new(1.5).is_err() && HighBitsBernoulli::new(f64::NAN).is_err());
    }

    #[test]
    fn both_lookups_give_the_same_reports() {
        let sensitive = [3u64, 17, 64, 65, 300, 999];
        let a = HighLowHadamardResponse::with_lookup(1000, 0.7, &sensitive, true).unwrap();
        let b = HighLowHadamardResponse::with_lookup(1000, 0.7, &sensitive, false).unwrap();
        let values: Vec<u32> = (0..200_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) % 1000)
            .collect();
        let key = crate::rng::key_from_u64(5);
        let (mut ra, mut rb) = (vec![0u16; values.len()], vec![0u16; values.len()]);
        super::super::privatize(&a, &key, &values, &mut ra).unwrap();
        super::super::privatize(&b, &key, &values, &mut rb).unwrap();
        assert_eq!(ra, rb);
    }

    #[test]
    fn simulate_follows_the_exact_law_by_both_own_set_algorithms() {
        let counts = |k: u64| -> Vec<u64> {
            (0..k)
                .map(|x| (x * 997 % 130) + (x % 3 == 0) as u64 * 500)
                .collect()
        };
        for (i, (k, sensitive)) in [
            (9u64, vec![0u64, 3, 6]),
            (10, vec![1, 2, 3, 4, 5, 6, 7, 9]),
            (6, (0..6).collect()),
            (5, vec![]),
        ]
        .into_iter()
        .enumerate()
        {
            let m = HighLowHadamardResponse::new(k, 1.0, &sensitive).unwrap();
            let label = format!("k {k} sensitive {sensitive:?}");
            let seed = 100 * i as u64;
            let c = counts(k);
            let few: Vec<u64> = c.iter().map(|v| v % 7).collect();
            let m = &m;
            let by = |passes: bool, chunk: usize| {
                move |key: &Key, c: &[u64]| m.simulate_with_chunk(key, c, passes, chunk).unwrap()
            };
            assert_law_of(
                &format!("{label} by value, few"),
                m,
                by(false, 1),
                &few,
                300,
                seed,
            );
            assert_law_of(
                &format!("{label} by value"),
                m,
                by(false, 1),
                &c,
                300,
                seed + 1,
            );
            for chunk in [2usize, PASS_CHUNK] {
                let what = format!("{label} passes, chunk {chunk}");
                assert_law_of(&what, m, by(true, chunk), &c, 300, seed + 2);
            }
            assert_simulate_matches_privatize_in_law(&label, m, &c, 200, seed + 3);
        }
    }

    #[test]
    fn simulate_chooses_the_passes_for_many_sensitive_users_and_is_exact_at_10_to_the_12() {
        let m = HighLowHadamardResponse::new(9, 0.5, &[0, 2, 4, 6]).unwrap();
        // (every value has users: an output no one can report has no variance, and the
        // law's chi-square needs a non-singular covariance)
        let mut c = vec![1u64; 9];
        c[1] = 1 << 40; // the non-sensitive users do not count towards the passes
        assert!(!m.simulation_uses_passes(4));
        assert!(m.simulation_uses_passes(1_000_000));
        let huge: Vec<u64> = (0..9).map(|x| (x + 1) * 100_000_000_000).collect();
        assert_simulation_law("10^12 users", &m, &huge, 300, 77);
        assert_simulation_law("2^40 non-sensitive users", &m, &c, 300, 79);
        let few = [1u64, 3, 1, 1, 1, 1, 2, 1, 2];
        assert_simulation_law("6 users", &m, &few, 400, 78);
    }

    #[test]
    fn seeded_reports_and_simulations_do_not_depend_on_the_thread_count() {
        let m = HighLowHadamardResponse::new(3000, 1.0, &every_third(3000)).unwrap();
        let values: Vec<u32> = (0..300_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) % 3000)
            .collect();
        let counts: Vec<u64> = (0..3000u64).map(|x| x * x % 1000 * 1000).collect();
        let key = crate::rng::key_from_u64(9);
        let run = |threads: usize| {
            crate::parallel::in_pool(threads, || {
                let mut reports = vec![0u16; values.len()];
                super::super::privatize(&m, &key, &values, &mut reports).unwrap();
                let sim = m.simulate(&key, &counts).unwrap();
                let est = m.estimate_raw(&sim, sim.iter().sum());
                (reports, sim, est)
            })
        };
        let one = run(1);
        for threads in [2, 3] {
            let other = run(threads);
            assert!(one.0 == other.0 && one.1 == other.1, "{threads} threads");
            assert_eq!(
                one.2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                other.2.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn footprints_cover_the_estimator_types() {
        let m = HighLowHadamardResponse::new(1000, 1.0, &every_third(1000)).unwrap();
        assert!(m.footprint(Operation::Estimate).bytes() >= 8 * (1000 + 512));
        let users = 1u64 << 30;
        assert!(m.simulation_may_use_passes(users));
        let sim = m.footprint(Operation::Simulate { users }).bytes();
        assert!(sim >= 8 * (m.output_size() + 512) as u128);
        assert_eq!(Estimator::statistic_size(&m), m.output_size());
    }
}
