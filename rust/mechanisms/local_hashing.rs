//! Optimized Local Hashing (OLH; Wang, Blocki, Li & Jha 2017, "Locally differentially private
//! protocols for frequency estimation", USENIX Security, section "Local Hashing"), with an
//! exact linear hash family so that the estimator is exactly unbiased.
//!
//! # Hash family
//! `g` is a prime and `t = ⌈log_g k⌉`. A value `x < k` is written in base g with t digits,
//! `x = Σ_i x_i g^i` (`x_0` least significant). A hash is a digit vector `a ∈ {0..g−1}^t`,
//! numbered `A = Σ_i a_i g^i ∈ [0, g^t)`, and `h_A(x) = (Σ_i a_i x_i) mod g`. For `x ≠ x'` the
//! difference `x − x'` is a nonzero vector over GF(g), so `Σ a_i (x_i − x'_i) = 0` holds for
//! exactly `g^{t−1}` of the `g^t` vectors a: `P_A[h_A(x) = h_A(x')] = 1/g` exactly — the
//! collision rate the OLH analysis assumes of a random hash function, with no approximation.
//!
//! # Client
//! One report per user, drawn from the user's private stream in this order: the digits
//! `a_0, …, a_{t−1}` (each `uniform_below(g)`, exact; g^t may exceed 2^32, hence digit by
//! digit), then the keep bit (`BernoulliThreshold(p)`), then — only when the bit is 0 — an
//! "other value" `o = uniform_below(g − 1)`. With `v = h_A(x)`: `y = v` if kept, else
//! `y = o + [o ≥ v]` (uniform over the g − 1 values ≠ v). The report is the single integer
//! `A·g + y ∈ [0, g^{t+1})`, so this is an [`IndexMechanism`] and the generic `privatize`,
//! `aggregate` (a histogram over the g^{t+1} outputs) and `simulate` apply unchanged.
//!
//! Channel: `Q(A·g + y | x) = g^{−t}·p` if `y = h_A(x)`, else `g^{−t}·q`, with
//! `p = e^ε/(e^ε + g − 1)` (OLH's generalized randomized response over `[0, g)`) and
//! `q = (1 − p)/(g − 1)`. Exact privacy as in `randomized_response`: `p` is the float value
//! rounded down by 4 ulps (below the real number) and drawn exactly, the uniform draws are
//! exact, so the realized ratio `p(g − 1)/(1 − p)` (increasing in p) never exceeds `e^ε`:
//! `realized_epsilon = ln(p(g − 1)/(1 − p)) ≤ ε`. Construction fails when ε is so small
//! (≲ 1e−15) that the rounded `p` is not above `1/g`.
//!
//! # Estimator
//! A report `(A, y)` *supports* x when `h_A(x) = y`. A holder of x supports x with
//! probability p. A holder of `x' ≠ x` does with probability
//! `(1/g)·p + (1 − 1/g)·q = (p + (1 − p))/g = 1/g` exactly (collision, then keep; or no
//! collision, then the one other value `h_A(x)`). With `C(x)` the number of the n reports that
//! support x and `f_x` the true frequency, `E[C(x)/n] = f_x p + (1 − f_x)/g`, so
//! `p̂_x = (C(x)/n − 1/g)/(p − 1/g)` (Wang et al.'s estimator for pure protocols with
//! `p* = p`, `q* = 1/g`) is exactly unbiased, with variance (users independent)
//! `[f_x p(1 − p) + (1 − f_x)(1/g)(1 − 1/g)] / (n (p − 1/g)²)`.
//!
//! # Choice of g
//! g is the prime minimizing OLH's variance factor `V(g) = (1/g)(1 − 1/g)/(p_g − 1/g)²` with
//! the realized (rounded) `p_g`, among the *admissible* primes: those with
//! * `g ≤ cap`, the smallest prime `≥ k`. When this binds (`e^ε + 1 > cap ≥ k`), a larger g
//!   would still lower V, but then k-ary randomized response has lower variance than OLH with
//!   any g (`e^ε + k − 2 < 4e^ε`);
//! * `g^{t+1} ≤ MAX_OUTPUTS = 2^24` (16,777,216 report values): the server aggregates a
//!   histogram over all `g^{t+1}` outputs, so this bounds its memory to 2^24 u64 counts,
//!   128 MiB. Without it, OLH's `g ≈ e^ε + 1` gives `g^{t+1} < g²k` outputs, which explodes at
//!   large ε (k = 10⁴: 7.9·10⁶ outputs at ε = 4, 6.4·10⁷ at ε = 6, 2.6·10¹⁰ at ε = 8);
//! * a keep probability `p_g` that is realizable (not the case for ε ≲ 1e−15).
//!
//! Ties go to the smaller g. Since `g² ≤ g^{t+1}`, every admissible g is at most 2^12 = 4096,
//! and `choose_prime` simply tries them all. Since `g^{t+1} ≥ g·k ≥ 2k`, no g is admissible
//! for k > 2^23: construction then fails with an error naming the cap (as it does, naming ε,
//! when ε is too small). [`OptimizedLocalHashing::with_prime`] is not subject to the cap.
//!
//! In real arithmetic `V(g) = (e^ε + g − 1)²/((e^ε − 1)²(g − 1))`, unimodal with its minimum
//! at `g = e^ε + 1` (OLH's choice). The output cap moves g away from there once the primes near
//! `e^ε + 1` have too many outputs — for k = 10⁴ from ε ≈ 4.15 (61 instead of 67), and g = 251
//! (t = 2, 251³ ≈ 1.58·10⁷ outputs) for all ε ≳ 5.55 — and then costs variance. Checked
//! numerically (mean squared error at the uniform distribution, k ≤ 2^23, ε ≤ 40 in steps of
//! 0.05): wherever the capped OLH still beats both k-ary randomized response and Hadamard
//! Response, its variance is at most 2.15 times that of the uncapped g; above a k-dependent ε,
//! one of those two is better than the capped OLH (though not always than the uncapped OLH).
//! For k = 10⁴ the cost is 5% at ε = 6 and 62% at ε = 7, and Hadamard Response is better from
//! ε ≈ 7.3; for k = 10⁶ the cap binds from ε ≈ 1.6 and Hadamard Response is better from
//! ε ≈ 3.2.
//!
//! # Decoding
//! `C(x) = Σ_A G[A][h_A(x)]` with `G[A][y]` the report histogram (index `A·g + y`). Two exact
//! algorithms, the cheaper one chosen (`t·g² ≤ k` selects the first):
//! * digit passes, `O(t·g^{t+2})`: writing `D_j(x_0..x_{j−1}, a_j..a_{t−1}, r) =
//!   Σ_{a_0..a_{j−1}} G[a][(r + Σ_{i<j} a_i x_i) mod g]`, one pass maps
//!   `D_{j+1}(…, x_j, …, r) = Σ_{a_j} D_j(…, a_j, …, (r + a_j x_j) mod g)`, and
//!   `C(x) = D_t(x, 0)`. Each pass is out of place and moves the digit it transforms to the top
//!   of the index (Stockham order), so after t passes the layout is `r + g·X` again.
//!   The adjoint (expected report frequencies) runs the same passes with `−a_j x_j`.
//!   For k = 10⁴, ε = 1 (g = 3, t = 9) this is 9·3^11 ≈ 1.6·10⁶ additions.
//! * hash by hash, `O(g^t·k)`: for every hash A with reports, `h_A(x)` for consecutive x
//!   by an incremental inner product (add `a_0` mod g along a run of `x_0`, add a precomputed
//!   prefix sum of digits at each carry), parallel over blocks of x (no reduction, so the
//!   result does not depend on the thread count).
//!
//! Counts are summed as f64, exactly (every partial sum is an integer ≤ n < 2^53).

use super::randomized_response::{round_down, PRIVACY_MARGIN_ULPS};
use super::{
    add_uniform_reports, as_atomic, check_domain, check_epsilon, draw_own_counts,
    simulation_footprint, simulation_stream, simulation_users, spread_interruptible,
    IndexMechanism, Operation, SimulationPhase,
};
use crate::error::{Error, Result};
use crate::interrupt::{self, interruptible, uninterrupted, Check};
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{spread_uniform, uniform_below, BernoulliThreshold, Key, StreamRng};
use rayon::prelude::*;
use std::sync::atomic::Ordering;

/// The largest prime below 2^32: the largest g (`uniform_below` draws from at most 2^32).
pub const LARGEST_PRIME_BELOW_2_32: u64 = 4_294_967_291;

/// The most report values `g^{t+1}` of an automatically chosen g (module documentation,
/// "Choice of g"): the server's report histogram has `g^{t+1}` counts, so this bounds it to
/// 2^24 u64 counts (128 MiB).
pub const MAX_OUTPUTS: u64 = 1 << 24;

/// The largest g that can satisfy the cap: `g² ≤ g^{t+1} ≤ MAX_OUTPUTS` (t ≥ 1).
const MAX_MODULUS: u64 = 1 << 12;
const _: () = assert!(MAX_MODULUS * MAX_MODULUS == MAX_OUTPUTS);

/// Most base-g digits of a value or hash (`t ≤ 32` since `k ≤ 2^32` and `g ≥ 2`).
const MAX_DIGITS: usize = 33;

/// Whether `n` is prime, for `n < 4_759_123_141` (deterministic Miller–Rabin with the
/// witnesses 2, 7 and 61, which are exact below that bound; Jaeschke 1993).
pub fn is_prime(n: u64) -> bool {
    assert!(
        n < 4_759_123_141,
        "is_prime is exact below 4759123141, got {n}"
    );
    if n < 2 {
        return false;
    }
    for small in [2u64, 3, 5, 7, 11, 13, 61] {
        if n % small == 0 {
            return n == small;
        }
    }
    let mul = |a: u64, b: u64| ((a as u128 * b as u128) % n as u128) as u64;
    let pow = |mut base: u64, mut e: u64| {
        let mut r = 1u64;
        while e > 0 {
            if e & 1 == 1 {
                r = mul(r, base);
            }
            base = mul(base, base);
            e >>= 1;
        }
        r
    };
    let s = (n - 1).trailing_zeros();
    let d = (n - 1) >> s;
    'witness: for a in [2u64, 7, 61] {
        let mut x = pow(a, d);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = mul(x, x);
            if x == n - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// The smallest prime `≥ n` (for `n ≤ 2^32`).
fn next_prime(mut n: u64) -> u64 {
    while !is_prime(n) {
        n += 1;
    }
    n
}

/// Division by a fixed `d ∈ [2, 2^32)` of numerators below 2^32 with one 128-bit multiply:
/// `⌊x/d⌋ = ⌊⌈2^64/d⌉·x / 2^64⌋` (Lemire, Kaser & Kurz 2019, exact since `d ≤ 2^32`).
#[derive(Clone, Copy, Debug)]
struct Divider {
    d: u64,
    inverse: u64,
}

impl Divider {
    fn new(d: u64) -> Self {
        debug_assert!((2..1 << 32).contains(&d));
        Self {
            d,
            inverse: u64::MAX / d + 1,
        }
    }

    /// `(x / d, x % d)` for `x < 2^32`.
    #[inline(always)]
    fn div_rem(&self, x: u64) -> (u64, u64) {
        debug_assert!(x < 1 << 32);
        let q = ((self.inverse as u128 * x as u128) >> 64) as u64;
        (q, x - q * self.d)
    }

    /// `x mod d` for any x (the fast path below 2^32).
    #[inline(always)]
    fn rem(&self, x: u64) -> u64 {
        if x < 1 << 32 {
            self.div_rem(x).1
        } else {
            x % self.d
        }
    }
}

/// `t = ⌈log_g k⌉ ≥ 1` and `g^t`, or `None` when the output size `g^{t+1}` overflows a u64.
fn digits_for(k: u64, g: u64) -> Option<(u32, u64)> {
    let (mut t, mut hashes) = (1u32, g);
    while hashes < k {
        hashes = hashes.checked_mul(g)?;
        t += 1;
    }
    hashes.checked_mul(g)?;
    Some((t, hashes))
}

/// The keep probability `e^ε/(e^ε + g − 1)` rounded down by `PRIVACY_MARGIN_ULPS` ulps, or `None` when it is not
/// above `1/g` (ε below about 1e−15): the channel would then not be ε-LDP.
fn keep_probability(g: u64, epsilon: f64) -> Option<f64> {
    let e = epsilon.exp();
    let p = if e.is_finite() {
        e / (e + (g - 1) as f64)
    } else {
        1.0
    };
    let p = round_down(p, PRIVACY_MARGIN_ULPS);
    // Rounding is monotone: fl(p·g) > 1 implies p·g > 1 exactly.
    (p * g as f64 > 1.0).then_some(p)
}

/// OLH's variance factor `(1/g)(1 − 1/g)/(p − 1/g)²` (the variance of `p̂_x` is this over n,
/// for a value of frequency 0).
fn variance_factor(g: u64, p: f64) -> f64 {
    let q = 1.0 / g as f64;
    q * (1.0 - q) / ((p - q) * (p - q))
}

/// Why a prime g is or is not admissible for (k, ε) (module documentation, "Choice of g";
/// the bound `g ≤ cap` is the caller's).
#[derive(Clone, Copy, Debug)]
enum Admissible {
    /// With its variance factor.
    Yes(f64),
    /// `g^{t+1} > MAX_OUTPUTS`.
    TooManyOutputs,
    /// The rounded keep probability is not above 1/g.
    EpsilonTooSmall,
}

fn admissible(k: u64, epsilon: f64, g: u64) -> Admissible {
    // `digits_for` is `None` only when g^{t+1} overflows a u64, far above the cap.
    match digits_for(k, g) {
        Some((_, hashes)) if hashes * g <= MAX_OUTPUTS => {}
        _ => return Admissible::TooManyOutputs,
    }
    match keep_probability(g, epsilon) {
        Some(p) => Admissible::Yes(variance_factor(g, p)),
        None => Admissible::EpsilonTooSmall,
    }
}

/// The prime g of the module documentation ("Choice of g").
///
/// Every admissible g has `g² ≤ g^{t+1} ≤ MAX_OUTPUTS`, so g ≤ `MAX_MODULUS` = 4096: the
/// scan simply tries every g from 2 to `min(cap, MAX_MODULUS)` (at most 4095 primality tests,
/// 564 of them prime; tens of microseconds), in increasing order so that ties go to the smaller g. When no g is
/// admissible, the error says which condition failed: the output cap (k > 2^23, since
/// `g^{t+1} ≥ g·k ≥ 2k`) or the keep probability (ε ≲ 1e−15).
fn choose_prime(k: u64, epsilon: f64) -> Result<u64> {
    let cap = next_prime(k.min(LARGEST_PRIME_BELOW_2_32));
    let mut best: Option<(f64, u64)> = None;
    let mut fits = false;
    for g in 2..=cap.min(MAX_MODULUS) {
        if !is_prime(g) {
            continue;
        }
        match admissible(k, epsilon, g) {
            Admissible::Yes(v) => {
                fits = true;
                if best.is_none_or(|(bv, _)| v < bv) {
                    best = Some((v, g));
                }
            }
            Admissible::EpsilonTooSmall => fits = true,
            Admissible::TooManyOutputs => {}
        }
    }
    if let Some((_, g)) = best {
        return Ok(g);
    }
    Err(Error::Value(if fits {
        format!(
            "epsilon = {epsilon:?} is too small: the keep probability e^ε/(e^ε + g − 1), rounded \
             down so that the realized guarantee never exceeds ε, is not above 1/g"
        )
    } else {
        format!(
            "k = {k} is too large for OptimizedLocalHashing: reports take g^(t+1) ≥ 2k values \
             (g ≥ 2, g^t ≥ k), above the cap of {MAX_OUTPUTS} = 2^24 report values that bounds \
             the server's histogram; k must be at most 2^23 = {}",
            MAX_OUTPUTS / 2
        )
    }))
}

#[derive(Clone, Debug)]
pub struct OptimizedLocalHashing {
    k: u64,
    epsilon: f64,
    /// The prime modulus, the number of digits, and `g^t` (the number of hashes).
    g: u64,
    t: u32,
    hashes: u64,
    /// Probability of keeping `h_A(x)`, as realized.
    p: f64,
    keep: BernoulliThreshold,
    divider: Divider,
}

impl OptimizedLocalHashing {
    /// OLH for values in `[0, k)` with the variance-minimizing prime g (module documentation).
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let g = choose_prime(k, epsilon)?;
        Self::with_prime(k, epsilon, g)
    }

    /// OLH with a given prime modulus g (e.g. to match another implementation). Not subject
    /// to [`MAX_OUTPUTS`]: any prime `g < 2^32` whose `g^{t+1}` report values fit in a u64 is
    /// accepted, and the caller is responsible for the size of the report histogram.
    pub fn with_prime(k: u64, epsilon: f64, g: u64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        if !(2..=LARGEST_PRIME_BELOW_2_32).contains(&g) || !is_prime(g) {
            return Err(Error::Value(format!(
                "g must be a prime in [2, {LARGEST_PRIME_BELOW_2_32}], got {g}"
            )));
        }
        let (t, hashes) = digits_for(k, g).ok_or_else(|| {
            Error::Value(format!(
                "g = {g} gives g^(t+1) ≥ 2^64 outputs for k = {k}: reports would not fit in 64 bits"
            ))
        })?;
        let p = keep_probability(g, epsilon).ok_or_else(|| {
            Error::Value(format!(
                "epsilon = {epsilon:?} is too small: the keep probability, rounded down, is not \
                 above 1/g = 1/{g}"
            ))
        })?;
        Ok(Self {
            k,
            epsilon,
            g,
            t,
            hashes,
            p,
            keep: BernoulliThreshold::new(p)?,
            divider: Divider::new(g),
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`). The
    /// estimate and the channel products hold at most two arrays of `S = g^{t+1}` floats (the
    /// digit passes' source and destination; hash by hash: the weights and the list of hashes
    /// with reports, at most `2·g^t` entries while it is collected) and the result (k); a
    /// simulation one or two arrays of S counts (two with the digit passes,
    /// [`Self::simulation_uses_digit_passes`]).
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "OptimizedLocalHashing";
        let outputs = self.hashes * self.g;
        let linear = |f: Footprint| {
            f.add("two work arrays of g^(t+1)", 2 * outputs, 8)
                .add("the result", self.k, 8)
        };
        match op {
            Operation::Estimate => linear(Footprint::new(format!("{name} estimate"))),
            Operation::ChannelProduct => linear(Footprint::new(format!("{name} channel product"))),
            Operation::Simulate { users } => simulation_footprint(
                name,
                outputs,
                if self.simulation_uses_digit_passes(users) {
                    2
                } else {
                    1
                },
            ),
        }
    }

    /// The prime modulus g (hash values lie in `[0, g)`).
    pub fn g(&self) -> u64 {
        self.g
    }

    /// Number of base-g digits, `t = ⌈log_g k⌉` (there are `g^t` hashes).
    pub fn t(&self) -> u32 {
        self.t
    }

    /// `(p, q)`: given the hash, the probability of reporting `h_A(x)` and of each other value
    /// in `[0, g)`. Channel entries are these divided by `g^t`.
    pub fn probabilities(&self) -> (f64, f64) {
        (self.p, (1.0 - self.p) / (self.g - 1) as f64)
    }

    /// `ln(p(g − 1)/(1 − p))`: the exact guarantee of the channel used (≤ ε).
    pub fn realized_epsilon(&self) -> f64 {
        let (p, q) = self.probabilities();
        p.ln() - q.ln()
    }

    /// `h_A(x) = Σ a_i x_i mod g` (hash number A, value x < g^t).
    pub fn hash(&self, a: u64, x: u64) -> u64 {
        let (mut a, mut x, mut h) = (a, x, 0u64);
        for _ in 0..self.t {
            h = (h + (a % self.g) * (x % self.g)) % self.g;
            a /= self.g;
            x /= self.g;
        }
        h
    }

    /// `(A, y)` of a report `A·g + y`.
    pub fn split_report(&self, report: u64) -> (u64, u64) {
        (report / self.g, report % self.g)
    }

    /// The t base-g digits of z, least significant first.
    fn digits(&self, mut z: u64, out: &mut [u64; MAX_DIGITS]) {
        for d in out.iter_mut().take(self.t as usize) {
            *d = z % self.g;
            z /= self.g;
        }
    }

    /// Calls `f(z, Σ_i fixed_i z_i mod g)` for z in `start..end` (`end ≤ g^t`), in order,
    /// updating the inner product incrementally: along a run of `z_0` it grows by `fixed_0`;
    /// a carry into digit c (digits 1..c−1 wrapping from g − 1 to 0) adds
    /// `Σ_{1≤i≤c} fixed_i` (since `−(g − 1) ≡ 1`).
    #[inline]
    fn for_each_product(&self, fixed: &[u64], start: u64, end: u64, mut f: impl FnMut(u64, usize)) {
        debug_assert!(end <= self.hashes && fixed.len() == self.t as usize);
        if start >= end {
            return;
        }
        let (g, t) = (self.g, self.t as usize);
        let mut digits = [0u64; MAX_DIGITS];
        self.digits(start, &mut digits);
        let mut carry_step = [0u64; MAX_DIGITS];
        let (mut high, mut prefix) = (0u64, 0u64);
        for i in 1..t {
            high = (high + fixed[i] * digits[i]) % g;
            prefix = (prefix + fixed[i]) % g;
            carry_step[i] = prefix;
        }
        let a0 = fixed[0];
        let (mut z, mut low) = (start, digits[0]);
        loop {
            let run_end = (z + (g - low)).min(end);
            let mut h = (high + a0 * low) % g;
            while z < run_end {
                f(z, h as usize);
                h += a0;
                if h >= g {
                    h -= g;
                }
                z += 1;
            }
            if z >= end {
                return;
            }
            low = 0;
            let mut c = 1;
            while digits[c] == g - 1 {
                digits[c] = 0;
                c += 1;
            }
            digits[c] += 1;
            high += carry_step[c];
            if high >= g {
                high -= g;
            }
        }
    }

    /// Whether the digit passes cost less than hash-by-hash decoding (`t·g^{t+2}` against
    /// `g^t·k`).
    fn digit_passes_are_cheaper(&self) -> bool {
        (self.t as u128) * (self.g as u128) * (self.g as u128) <= self.k as u128
    }

    /// `S(x) = Σ_A w[A·g + h_A(x)]` for x < k (w of length g^{t+1}; the digit passes reuse
    /// its storage). `check` runs between parallel tasks; its error stops the computation.
    fn adjoint<C: Check>(&self, w: Vec<f64>, check: &C) -> Result<Vec<f64>> {
        if self.digit_passes_are_cheaper() {
            self.adjoint_by_digits_owned(w, check)
        } else {
            self.adjoint_by_hash(&w, check)
        }
    }

    /// `M[A·g + y] = Σ_{x : h_A(x) = y} d_x` (d of length k).
    fn forward<C: Check>(&self, d: &[f64], check: &C) -> Result<Vec<f64>> {
        if self.digit_passes_are_cheaper() {
            self.forward_by_digits(d, check)
        } else {
            self.forward_by_hash(d, check)
        }
    }

    /// t passes over an array of length g^{t+1} laid out as `r + g·(d_0 + g·d_1 + …)`; each
    /// replaces the lowest digit `d_0 = v` by its partner u, moved to the top:
    /// `dst[r + g·R + g^t·u] = Σ_v src[((r + s·u·v) mod g) + g·v + g²·R]`, with `s = +1`
    /// (adjoint: v = a_j, u = x_j) or `s = −1` (forward: v = x_j, u = a_j).
    fn digit_passes<C: Check>(
        &self,
        mut src: Vec<f64>,
        forward: bool,
        check: &C,
    ) -> Result<Vec<f64>> {
        let g = self.g as usize;
        let inner = self.hashes as usize / g; // g^{t−1} values of R
        let mut dst = vec![0.0; src.len()];
        // Values of R per parallel task: a power of g, about 4096 entries of output.
        let mut per_task = 1usize;
        while per_task * g <= inner && g * g * per_task <= 1 << 12 {
            per_task *= g;
        }
        let tasks_per_u = inner / per_task;
        for _ in 0..self.t {
            let src_ref = &src;
            dst.par_chunks_mut(g * per_task)
                .enumerate()
                .try_for_each(|(task, out)| {
                    check()?;
                    let u = task / tasks_per_u;
                    let first = (task % tasks_per_u) * per_task;
                    let step = if forward { (g - u) % g } else { u };
                    for (i, o) in out.chunks_exact_mut(g).enumerate() {
                        let block = &src_ref[g * g * (first + i)..][..g * g];
                        o.fill(0.0);
                        let mut shift = 0usize;
                        for row in block.chunks_exact(g) {
                            // o[r] += row[(r + shift) mod g]
                            let (head, tail) = o.split_at_mut(g - shift);
                            head.iter_mut()
                                .zip(&row[shift..])
                                .for_each(|(a, b)| *a += b);
                            tail.iter_mut()
                                .zip(&row[..shift])
                                .for_each(|(a, b)| *a += b);
                            shift += step;
                            if shift >= g {
                                shift -= g;
                            }
                        }
                    }
                    Ok(())
                })?;
            std::mem::swap(&mut src, &mut dst);
        }
        Ok(src)
    }

    #[cfg(test)]
    fn adjoint_by_digits(&self, w: &[f64]) -> Vec<f64> {
        uninterrupted(self.adjoint_by_digits_owned(w.to_vec(), &interrupt::never))
    }

    fn adjoint_by_digits_owned<C: Check>(&self, w: Vec<f64>, check: &C) -> Result<Vec<f64>> {
        let g = self.g as usize;
        let d = self.digit_passes(w, false, check)?;
        Ok((0..self.k as usize).map(|x| d[g * x]).collect())
    }

    fn forward_by_digits<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        let g = self.g as usize;
        let mut src = vec![0.0; (self.hashes * self.g) as usize];
        for (x, &v) in dist.iter().enumerate() {
            src[g * x] = v;
        }
        self.digit_passes(src, true, check)
    }

    /// Values of x per parallel task of hash-by-hash decoding.
    fn x_block(&self) -> usize {
        let tasks = 8 * rayon::current_num_threads() as u64;
        self.k.div_ceil(tasks).clamp(256, 1 << 16) as usize
    }

    fn adjoint_by_hash<C: Check>(&self, w: &[f64], check: &C) -> Result<Vec<f64>> {
        let g = self.g as usize;
        let t = self.t as usize;
        // Hashes with a nonzero weight (with few reports, most have none).
        let active: Vec<u64> = (0..self.hashes)
            .into_par_iter()
            .filter(|&a| w[a as usize * g..][..g].iter().any(|&v| v != 0.0))
            .collect();
        let mut out = vec![0.0; self.k as usize];
        let block = self.x_block();
        // Hashes between checks: about 2^20 hash evaluations.
        let per_check = ((1usize << 20) / block).max(1);
        out.par_chunks_mut(block)
            .enumerate()
            .try_for_each(|(c, out)| {
                let start = (c * block) as u64;
                let end = start + out.len() as u64;
                let mut digits = [0u64; MAX_DIGITS];
                for group in active.chunks(per_check) {
                    check()?;
                    for &a in group {
                        self.digits(a, &mut digits);
                        let row = &w[a as usize * g..][..g];
                        self.for_each_product(&digits[..t], start, end, |x, h| {
                            out[(x - start) as usize] += row[h];
                        });
                    }
                }
                Ok(())
            })?;
        Ok(out)
    }

    fn forward_by_hash<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        let g = self.g as usize;
        let t = self.t as usize;
        let mut out = vec![0.0; (self.hashes * self.g) as usize];
        // One row is k hash evaluations; a task holds about 2^20 of them.
        let rows_per_task = ((1usize << 20) / self.k as usize).clamp(1, (4096 / g).max(1));
        out.par_chunks_mut(g * rows_per_task)
            .enumerate()
            .try_for_each(|(c, rows)| {
                check()?;
                let mut digits = [0u64; MAX_DIGITS];
                for (i, row) in rows.chunks_exact_mut(g).enumerate() {
                    self.digits((c * rows_per_task + i) as u64, &mut digits);
                    self.for_each_product(&digits[..t], 0, self.k, |x, h| {
                        row[h] += dist[x as usize];
                    });
                }
                Ok(())
            })?;
        Ok(out)
    }

    /// `C(x)`: the number of counted reports that support x (`h_A(x) = y`), from the report
    /// histogram (length g^{t+1}). Exact below 2^53 reports.
    pub fn support_counts(&self, counts: &[u64]) -> Vec<f64> {
        let w: Vec<f64> = counts.par_iter().map(|&c| c as f64).collect();
        uninterrupted(self.adjoint(w, &interrupt::never))
    }

    /// Row x of the channel matrix (length g^{t+1}).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (p, q) = self.probabilities();
        let scale = self.hashes as f64;
        row.fill(q / scale);
        let mut digits = [0u64; MAX_DIGITS];
        self.digits(x, &mut digits);
        let g = self.g as usize;
        self.for_each_product(&digits[..self.t as usize], 0, self.hashes, |a, h| {
            row[a as usize * g + h] = p / scale;
        });
    }

    interruptible! {
        /// Unbiased estimate from the report histogram (length g^{t+1}, `n = Σ counts > 0`).
        pub fn estimate_raw / try_estimate_raw
            = try_estimate_raw_with(counts: &[u64], n: u64) -> Vec<f64>;
    }

    fn try_estimate_raw_with<C: Check>(
        &self,
        counts: &[u64],
        n: u64,
        check: &C,
    ) -> Result<Vec<f64>> {
        let w: Vec<f64> = counts.par_iter().map(|&c| c as f64).collect();
        let inv_g = 1.0 / self.g as f64;
        let gap = self.p - inv_g;
        let n = n as f64;
        Ok(self
            .adjoint(w, check)?
            .into_iter()
            .map(|c| (c / n - inv_g) / gap)
            .collect())
    }

    interruptible! {
        /// Unbiased estimate from report frequencies (length g^{t+1}, summing to 1).
        pub fn estimate_from_frequencies / try_estimate_from_frequencies
            = try_estimate_from_frequencies_with(freq: &[f64]) -> Vec<f64>;
    }

    fn try_estimate_from_frequencies_with<C: Check>(
        &self,
        freq: &[f64],
        check: &C,
    ) -> Result<Vec<f64>> {
        let inv_g = 1.0 / self.g as f64;
        let gap = self.p - inv_g;
        Ok(self
            .adjoint(freq.to_vec(), check)?
            .into_iter()
            .map(|s| (s - inv_g) / gap)
            .collect())
    }

    interruptible! {
        /// Expected report frequencies `Qᵀ dist` (length g^{t+1}):
        /// `(q·Σ dist + (p − q)·Σ_{x : h_A(x) = y} dist_x) / g^t`.
        pub fn expected_frequencies / try_expected_frequencies
            = try_expected_frequencies_with(dist: &[f64]) -> Vec<f64>;
    }

    fn try_expected_frequencies_with<C: Check>(&self, dist: &[f64], check: &C) -> Result<Vec<f64>> {
        let (p, q) = self.probabilities();
        // In index order (a parallel float sum would depend on the thread count).
        let total: f64 = dist.iter().sum();
        let scale = self.hashes as f64;
        let mut m = self.forward(dist, check)?;
        m.par_iter_mut()
            .for_each(|v| *v = (q * total + (p - q) * *v) / scale);
        Ok(m)
    }

    interruptible! {
        /// `Q w` (length k): `(q·Σ w + (p − q)·Σ_A w[A·g + h_A(x)]) / g^t`, the adjoint of
        /// [`expected_frequencies`](Self::expected_frequencies).
        pub fn channel_apply / try_channel_apply
            = try_channel_apply_with(w: &[f64]) -> Vec<f64>;
    }

    fn try_channel_apply_with<C: Check>(&self, w: &[f64], check: &C) -> Result<Vec<f64>> {
        let (p, q) = self.probabilities();
        // In index order (a parallel float sum would depend on the thread count).
        let total: f64 = w.iter().sum();
        let scale = self.hashes as f64;
        let mut s = self.adjoint(w.to_vec(), check)?;
        s.par_iter_mut()
            .for_each(|v| *v = (q * total + (p - q) * *v) / scale);
        Ok(s)
    }
}

impl OptimizedLocalHashing {
    /// The probability `1 − α = (g·p − 1)/(g − 1)` that a user reports from its own set
    /// `{A·g + h_A(x)}` in the mixture form of the channel (`mechanisms`, "Simulation").
    fn own_set_weight(&self) -> f64 {
        let g = self.g as f64;
        (g * self.p - 1.0) / (g - 1.0)
    }

    /// Whether a simulation of `users` users draws the own sets by digit passes: when they
    /// cost less than value by value for many users (`g² ≤ k`, as for decoding: t passes of
    /// `g^{t+2}` splits against `k·g^t` hashes) and the expected own-set users are at least
    /// the number of outputs.
    pub fn simulation_uses_digit_passes(&self, users: u64) -> bool {
        self.g * self.g <= self.k
            && users as f64 * self.own_set_weight() >= (self.hashes * self.g) as f64
    }

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law
    /// (module documentation, "Simulation").
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let users = simulation_users(self.k, true_counts)?;
        self.simulate_with(key, true_counts, self.simulation_uses_digit_passes(users))
    }

    fn simulate_with(&self, key: &Key, true_counts: &[u64], passes: bool) -> Result<Vec<u64>> {
        self.simulate_with_tasks(key, true_counts, passes, PASS_ENTRIES)
    }

    /// With about `entries` source entries per task of the digit passes (tests use few).
    fn simulate_with_tasks(
        &self,
        key: &Key,
        true_counts: &[u64],
        passes: bool,
        entries: usize,
    ) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let size = (self.hashes * self.g) as usize;
        let own = self.own_set_weight();
        let g = self.g;
        let mut counts = allocate_zeroed::<u64>(size, "the report counts")?;
        let uniform = if passes {
            // K_x at index g·x (offset 0, digits of x): the passes draw the hash digits.
            let cells = as_atomic(&mut counts);
            let uniform = draw_own_counts(
                key,
                true_counts,
                |_| own,
                |_, x, kept| {
                    cells[(g * x) as usize].store(kept, Ordering::Relaxed);
                    Ok(())
                },
            )?;
            counts = self.own_sets_by_digit_passes(key, counts, entries)?;
            uniform
        } else {
            let cells = as_atomic(&mut counts);
            draw_own_counts(
                key,
                true_counts,
                |_| own,
                |rng, x, kept| {
                    spread_interruptible(rng, 0, self.hashes, kept, &mut |a, n| {
                        let y = self.hash(a, x);
                        cells[(a * g + y) as usize].fetch_add(n, Ordering::Relaxed);
                    })
                },
            )?
        };
        add_uniform_reports(key, &mut counts, uniform)?;
        Ok(counts)
    }

    /// The own-set reports of the counts `src[g·x] = K_x`, by the sampling version of the
    /// forward digit passes (module documentation, "Simulation").
    fn own_sets_by_digit_passes(
        &self,
        key: &Key,
        mut src: Vec<u64>,
        entries: usize,
    ) -> Result<Vec<u64>> {
        let g = self.g as usize;
        let hashes = self.hashes as usize;
        let rest = hashes / g; // g^{t−1} values of R
        let mut dst = allocate_zeroed::<u64>(src.len(), "the digit passes' destination")?;
        // Values of R per task: about `entries` source entries.
        let per_task = (entries / (g * g)).max(1);
        for pass in 0..self.t as u64 {
            dst.par_iter_mut().for_each(|v| *v = 0);
            let cells = as_atomic(&mut dst);
            src.par_chunks(g * g * per_task)
                .enumerate()
                .try_for_each(|(task, block)| {
                    crate::interrupt::check()?;
                    let id = pass << 40 | task as u64;
                    let mut rng = simulation_stream(key, SimulationPhase::OwnSets, id);
                    let first = task * per_task;
                    for (i, entries) in block.chunks_exact(g * g).enumerate() {
                        let r = first + i;
                        for (v, row) in entries.chunks_exact(g).enumerate() {
                            for (o, &c) in row.iter().enumerate() {
                                spread_uniform(&mut rng, 0, g as u64, c, &mut |u, n| {
                                    let u = u as usize;
                                    let y = (o + u * v) % g;
                                    cells[y + g * r + hashes * u].fetch_add(n, Ordering::Relaxed);
                                });
                            }
                        }
                    }
                    Ok::<(), crate::error::Error>(())
                })?;
            debug_assert!(rest * g * g == src.len());
            std::mem::swap(&mut src, &mut dst);
        }
        Ok(src)
    }
}

/// Source entries per task of the simulation's digit passes.
const PASS_ENTRIES: usize = 1 << 12;

impl IndexMechanism for OptimizedLocalHashing {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.hashes * self.g
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let g = self.g;
        let (mut rest, mut hash, mut place, mut h) = (x, 0u64, 1u64, 0u64);
        for _ in 0..self.t {
            let a = uniform_below(rng, g);
            let (q, digit) = self.divider.div_rem(rest);
            rest = q;
            h = self.divider.rem(h + a * digit);
            hash += a * place;
            place = place.wrapping_mul(g); // g^t·g fits; the last product is unused
        }
        let y = if self.keep.sample(rng) {
            h
        } else {
            let other = uniform_below(rng, g - 1);
            other + (other >= h) as u64
        };
        hash * g + y
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{
        assert_law_of, assert_simulate_matches_privatize_in_law, assert_simulation_law,
        channel_stats, chi_square, empirical_row, expected_from_rows,
    };
    use super::super::{aggregate, channel_matrix, privatize};
    use super::*;
    use crate::rng::key_from_u64;

    fn sieve(limit: usize) -> Vec<bool> {
        let mut prime = vec![true; limit + 1];
        prime[0] = false;
        prime[1] = false;
        let mut i = 2;
        while i * i <= limit {
            if prime[i] {
                (i * i..=limit).step_by(i).for_each(|j| prime[j] = false);
            }
            i += 1;
        }
        prime
    }

    #[test]
    fn primality_and_division_are_exact() {
        let table = sieve(200_000);
        for (n, &p) in table.iter().enumerate() {
            assert_eq!(is_prime(n as u64), p, "n = {n}");
        }
        assert!(is_prime(LARGEST_PRIME_BELOW_2_32));
        assert!((LARGEST_PRIME_BELOW_2_32 + 1..1 << 32).all(|n| !is_prime(n)));
        assert!(is_prime(2_147_483_647));
        assert!(!is_prime(4_294_967_297)); // 641 · 6700417
        assert!(!is_prime(3_215_031_751)); // strong pseudoprime to bases 2, 3, 5, 7
        assert_eq!(next_prime(1 << 32), 4_294_967_311);
        for d in [
            2u64,
            3,
            5,
            7,
            149,
            65_521,
            1_000_003,
            LARGEST_PRIME_BELOW_2_32,
        ] {
            let div = Divider::new(d);
            let xs = (0..1u64 << 32)
                .step_by(7_919)
                .chain([(1 << 32) - 1, d - 1, d, d + 1]);
            for x in xs {
                assert_eq!(div.div_rem(x), (x / d, x % d), "x {x} d {d}");
            }
            for x in [1u64 << 32, u64::MAX, (1 << 40) + 17] {
                assert_eq!(div.rem(x), x % d);
            }
        }
    }

    #[test]
    fn collision_probability_is_exactly_one_over_g() {
        for (k, g) in [
            (2u64, 2u64),
            (5, 2),
            (9, 3),
            (10, 3),
            (27, 3),
            (30, 5),
            (50, 7),
            (12, 11),
            (20, 23),
        ] {
            let m = OptimizedLocalHashing::with_prime(k, 1.0, g).unwrap();
            let hashes = m.hashes;
            assert_eq!(hashes, g.pow(m.t));
            assert!(g.pow(m.t - 1) < k && k <= hashes);
            let table: Vec<Vec<u64>> = (0..hashes)
                .map(|a| (0..k).map(|x| m.hash(a, x)).collect())
                .collect();
            for x in 0..k as usize {
                for y in x + 1..k as usize {
                    let collisions = table.iter().filter(|h| h[x] == h[y]).count() as u64;
                    assert_eq!(collisions * g, hashes, "k {k} g {g}: x {x} x' {y}");
                }
            }
            // The incremental inner products agree with the direct hash, both ways round.
            let mut digits = [0u64; MAX_DIGITS];
            for a in 0..hashes {
                m.digits(a, &mut digits);
                let mut seen = vec![];
                m.for_each_product(&digits[..m.t as usize], 0, k, |x, h| {
                    seen.push((x, h as u64))
                });
                let direct: Vec<(u64, u64)> = (0..k).map(|x| (x, m.hash(a, x))).collect();
                assert_eq!(seen, direct);
                // From an arbitrary start.
                let mut seen = vec![];
                m.for_each_product(&digits[..m.t as usize], k / 3, k, |x, h| {
                    seen.push((x, h as u64))
                });
                assert_eq!(seen, direct[(k / 3) as usize..]);
            }
        }
    }

    #[test]
    fn channel_is_exactly_epsilon_ldp() {
        let mut checked = 0;
        for k in [2u64, 3, 7, 16, 100] {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0] {
                let m = OptimizedLocalHashing::new(k, eps).unwrap();
                let size = m.output_size();
                assert!(m.realized_epsilon() <= eps && eps - m.realized_epsilon() < 1e-12);
                // Every combination fits in 2^24 entries (the largest is k = 100, ε = 5:
                // g = 101, t = 1, 100 × 10201); assert it so the check cannot go missing.
                assert!(k * size <= 1 << 24, "k {k} eps {eps}: {size} outputs");
                let q = channel_matrix(k, size, 1 << 24, |x, r| m.channel_row(x, r)).unwrap();
                let (ratio, sum_err) = channel_stats(&q, k as usize);
                assert!(
                    sum_err < 1e-12,
                    "k {k} eps {eps}: rows sum off by {sum_err}"
                );
                assert!(ratio <= eps + 1e-12, "k {k} eps {eps}: {ratio}");
                assert!(
                    (ratio - m.realized_epsilon()).abs() < 1e-12,
                    "k {k} eps {eps}"
                );
                // Exactly two distinct entries, p/g^t on the supported outputs (g^t per row).
                let (p, _) = m.probabilities();
                let high = p / m.hashes as f64;
                for row in q.chunks_exact(size as usize) {
                    assert_eq!(row.iter().filter(|&&v| v == high).count() as u64, m.hashes);
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 25);
        // Larger instances, analytically: realized ε from the realized p, never above ε.
        for (k, eps) in [
            (1000u64, 5.0),
            (10_000, 1.0),
            (10_000, 8.0),
            (1 << 23, 0.5),
            (1 << 23, 30.0),
        ] {
            let m = OptimizedLocalHashing::new(k, eps).unwrap();
            let (p, q) = m.probabilities();
            assert!(p > 1.0 / m.g as f64 && q < p);
            assert!((p + (m.g - 1) as f64 * q - 1.0).abs() < 1e-12);
            assert!(m.realized_epsilon() <= eps, "k {k} eps {eps}");
            // Too large for a channel matrix of at most 2^24 entries.
            assert!(
                k as u128 * m.output_size() as u128 > 1 << 24,
                "k {k} eps {eps}"
            );
        }
    }

    /// `g^{t+1}` with `t = ⌈log_g k⌉ ≥ 1`, computed without shortcuts (u128, no overflow for
    /// g < 2^32 and k ≤ 2^32).
    fn brute_output_size(k: u64, g: u64) -> u128 {
        let mut power = g as u128;
        while power < k as u128 {
            power *= g as u128;
        }
        power * g as u128
    }

    /// The argmin of the realized variance factor over every admissible prime, by brute force:
    /// every prime `g ≤ min(next_prime(k), MAX_OUTPUTS)` (no use of `g ≤ 4096`), with
    /// `g^{t+1} ≤ MAX_OUTPUTS` and a realizable keep probability; ties to the smaller g.
    fn brute_force_g(primes: &[bool], k: u64, eps: f64) -> Option<u64> {
        let limit = next_prime(k).min(MAX_OUTPUTS);
        let mut best: Option<(f64, u64)> = None;
        for g in 2..=limit {
            if !primes[g as usize] || brute_output_size(k, g) > MAX_OUTPUTS as u128 {
                continue;
            }
            if let Some(p) = keep_probability(g, eps) {
                let v = variance_factor(g, p);
                if best.is_none_or(|(bv, _)| v < bv) {
                    best = Some((v, g));
                }
            }
        }
        best.map(|(_, g)| g)
    }

    const CAP_EPSILONS: [f64; 7] = [0.5, 1.0, 4.0, 6.0, 8.0, 20.0, 100.0];

    #[test]
    fn g_minimizes_the_realized_variance_over_all_admissible_primes() {
        let primes = sieve(1 << 21);
        let mut epsilons = vec![
            1e-9, 0.05, 0.1, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 4.15, 5.0, 5.6, 6.0, 7.0, 8.0,
            10.0, 20.0, 100.0, 700.0,
        ];
        epsilons.extend(CAP_EPSILONS);
        let mut checked = 0;
        for k in [
            2u64, 3, 4, 5, 7, 10, 16, 50, 100, 257, 1000, 4093, 4096, 5000, 10_000, 100_000,
            1_000_000,
        ] {
            for &eps in &epsilons {
                let m = OptimizedLocalHashing::new(k, eps).unwrap();
                assert_eq!(Some(m.g), brute_force_g(&primes, k, eps), "k {k} eps {eps}");
                assert!(m.output_size() <= MAX_OUTPUTS, "k {k} eps {eps}");
                checked += 1;
            }
        }
        assert_eq!(checked, 17 * 28);
        assert_eq!(OptimizedLocalHashing::new(10_000, 1.0).unwrap().g, 3);
        assert_eq!(OptimizedLocalHashing::new(10_000, 1.0).unwrap().t, 9);
    }

    #[test]
    fn output_size_is_capped() {
        for k in [10u64, 10_000, 1_000_000, 1 << 32] {
            for eps in CAP_EPSILONS {
                let label = format!("k {k} eps {eps}");
                match OptimizedLocalHashing::new(k, eps) {
                    Ok(m) => {
                        let size = m.output_size();
                        assert!(size <= MAX_OUTPUTS, "{label}: {size} outputs");
                        assert_eq!(size as u128, brute_output_size(k, m.g), "{label}");
                        assert_eq!(size, m.hashes * m.g, "{label}");
                        assert!(m.realized_epsilon() <= eps, "{label}");
                    }
                    Err(err) => {
                        // Only when no prime is admissible: every g has g^{t+1} ≥ 2k > 2^24.
                        assert!(2 * k > MAX_OUTPUTS, "{label}: {err}");
                        let msg = err.to_string();
                        assert!(msg.contains("too large") && msg.contains("2^23"), "{msg}");
                    }
                }
            }
        }
        // k = 10⁴ (g, g^{t+1}): uncapped, ε = 6 and 8 would take 401³ ≈ 6.4·10⁷ and
        // 2971³ ≈ 2.6·10¹⁰ outputs.
        for (eps, g, size) in [
            (1.0, 3, 59_049),
            (4.0, 53, 7_890_481),
            (6.0, 251, 15_813_251),
            (8.0, 251, 15_813_251),
        ] {
            let m = OptimizedLocalHashing::new(10_000, eps).unwrap();
            assert_eq!((m.g, m.output_size()), (g, size), "eps {eps}");
        }
        // The largest k with an admissible g is 2^23 (g = 2, t = 23, 2^24 outputs).
        for eps in CAP_EPSILONS {
            let m = OptimizedLocalHashing::new(1 << 23, eps).unwrap();
            assert_eq!((m.g, m.t, m.output_size()), (2, 23, MAX_OUTPUTS));
            assert!(OptimizedLocalHashing::new((1 << 23) + 1, eps).is_err());
        }
        // with_prime is not capped: (k = 10⁴, g = 2971) has 2971³ ≈ 2.6·10¹⁰ outputs.
        let m = OptimizedLocalHashing::with_prime(10_000, 8.0, 2971).unwrap();
        assert_eq!(m.output_size(), 2971u64.pow(3));
    }

    #[test]
    fn sampler_matches_the_channel() {
        // (k, ε) → (g, t): (5, 1) → (3, 2), 27 outputs; (4, 0.1) → (2, 2), 8; (3, 3) → (3, 1), 9.
        // Critical values of chi-square at p = 0.001 for df 26, 7, 8.
        for (k, eps, g, t, critical) in [
            (5u64, 1.0, 3u64, 2u32, 54.05),
            (4, 0.1, 2, 2, 24.32),
            (3, 3.0, 3, 1, 26.12),
        ] {
            let m = OptimizedLocalHashing::new(k, eps).unwrap();
            assert_eq!((m.g, m.t), (g, t));
            let size = m.output_size() as usize;
            let mut row = vec![0.0; size];
            for x in [0u32, 1, (k - 1) as u32] {
                m.channel_row(x as u64, &mut row);
                let draws = 300_000;
                let freq = empirical_row(&m, x, draws, 17 + x as u64);
                let chi2 = chi_square(&freq, &row, draws);
                assert!(chi2 < critical, "k {k} eps {eps} x {x}: chi2 {chi2}");
            }
        }
    }

    /// Instances on both sides of the decoder choice.
    fn instances() -> Vec<OptimizedLocalHashing> {
        let mut out = vec![];
        for (k, eps, g) in [
            (10u64, 0.5, None),
            (100, 1.0, None),
            (100, 2.0, None),
            (100, 5.0, None),
            (7, 1.0, Some(2u64)),
            (30, 1.0, Some(5)),
            (200, 3.0, Some(3)),
            (1000, 1.0, None),
            (50, 2.0, Some(53)),
        ] {
            out.push(match g {
                None => OptimizedLocalHashing::new(k, eps).unwrap(),
                Some(g) => OptimizedLocalHashing::with_prime(k, eps, g).unwrap(),
            });
        }
        assert!(out.iter().any(|m| m.digit_passes_are_cheaper()));
        assert!(out.iter().any(|m| !m.digit_passes_are_cheaper()));
        out
    }

    #[test]
    fn estimator_is_unbiased_and_both_decoders_agree() {
        for m in instances() {
            let (k, size) = (m.k, m.output_size() as usize);
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let label = format!("k {k} g {} t {}", m.g, m.t);
            // Both algorithms, both directions.
            let w: Vec<f64> = (0..size).map(|z| (z as f64 * 0.37).sin()).collect();
            let never = &interrupt::never;
            let (a1, a2) = (
                m.adjoint_by_digits(&w),
                m.adjoint_by_hash(&w, never).unwrap(),
            );
            let (f1, f2) = (
                m.forward_by_digits(&p, never).unwrap(),
                m.forward_by_hash(&p, never).unwrap(),
            );
            for (a, b) in a1.iter().zip(&a2).chain(f1.iter().zip(&f2)) {
                assert!((a - b).abs() < 1e-9, "{label}: {a} vs {b}");
            }
            // Expected frequencies against the channel rows directly.
            let freq = m.expected_frequencies(&p);
            for (a, b) in freq.iter().zip(&expected_from_rows(&m, &p)) {
                assert!((a - b).abs() < 1e-14, "{label}");
            }
            assert!((freq.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            // Unbiasedness on exact expectations.
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-9, "{label}: {a} vs {b}");
            }
            // Adjoint identity <Qᵀp, w> = <p, Q w>, and Q 1 = 1.
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12, "{label}");
            for v in m.channel_apply(&vec![1.0; size]) {
                assert!((v - 1.0).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn grouped_decoding_equals_direct_decoding_of_each_report() {
        for m in instances() {
            let k = m.k;
            let n = 3_000usize;
            let values: Vec<u32> = (0..n)
                .map(|i| ((i * i + 3 * i) % k as usize) as u32)
                .collect();
            let mut reports = vec![0u64; n];
            privatize(&m, &key_from_u64(8), &values, &mut reports).unwrap();
            let mut counts = vec![0u64; m.output_size() as usize];
            aggregate(&reports, &mut counts, false).unwrap();
            // O(n·k): every report against every value.
            let mut direct = vec![0.0; k as usize];
            for &r in &reports {
                let (a, y) = m.split_report(r);
                for x in 0..k {
                    if m.hash(a, x) == y {
                        direct[x as usize] += 1.0;
                    }
                }
            }
            let w: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
            assert_eq!(m.adjoint_by_digits(&w), direct, "k {k} g {}", m.g);
            assert_eq!(
                m.adjoint_by_hash(&w, &interrupt::never).unwrap(),
                direct,
                "k {k} g {}",
                m.g
            );
            assert_eq!(m.support_counts(&counts), direct);
            let est = m.estimate_raw(&counts, n as u64);
            let inv_g = 1.0 / m.g as f64;
            for (e, c) in est.iter().zip(&direct) {
                assert_eq!(*e, (c / n as f64 - inv_g) / (m.p - inv_g));
            }
        }
    }

    #[test]
    fn simulate_follows_the_exact_law_by_both_own_set_algorithms() {
        // (k, ε, g): (9, 1) → g = 3, t = 2, 27 outputs; (30, 1, 5): t = 3, 625 outputs;
        // (10, 2, 2): t = 4, 32 outputs; (7, 3, 11): t = 1, 121 outputs (g² > k).
        for (i, (k, eps, g)) in [
            (9u64, 1.0, None),
            (30, 1.0, Some(5u64)),
            (10, 2.0, Some(2)),
            (7, 3.0, Some(11)),
        ]
        .into_iter()
        .enumerate()
        {
            let m = match g {
                None => OptimizedLocalHashing::new(k, eps).unwrap(),
                Some(g) => OptimizedLocalHashing::with_prime(k, eps, g).unwrap(),
            };
            let label = format!("k {k} g {} t {}", m.g, m.t);
            let counts: Vec<u64> = (0..k)
                .map(|x| (x * 997 % 130) + (x % 3 == 0) as u64 * 900)
                .collect();
            let few: Vec<u64> = counts.iter().map(|c| c % 5).collect();
            let m = &m;
            let by = |passes: bool, entries: usize| {
                move |key: &Key, c: &[u64]| m.simulate_with_tasks(key, c, passes, entries).unwrap()
            };
            let seed = 1_000 * i as u64;
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
                &counts,
                300,
                seed + 1,
            );
            // Digit passes with one R per task and with the default task size.
            for entries in [1usize, PASS_ENTRIES] {
                let what = format!("{label} digit passes, {entries} entries per task");
                assert_law_of(&what, m, by(true, entries), &counts, 300, seed + 2);
            }
            assert_simulate_matches_privatize_in_law(&label, m, &counts, 150, seed + 3);
        }
    }

    #[test]
    fn simulate_chooses_digit_passes_for_many_users_and_is_exact_at_10_to_the_12() {
        let m = OptimizedLocalHashing::new(9, 1.0).unwrap();
        assert_eq!((m.g, m.t), (3, 2));
        assert!(!m.simulation_uses_digit_passes(20));
        assert!(m.simulation_uses_digit_passes(1_000_000));
        // g² > k: never (value by value is cheaper for any number of users).
        let wide = OptimizedLocalHashing::with_prime(7, 3.0, 11).unwrap();
        assert!(!wide.simulation_uses_digit_passes(u64::MAX));
        let huge: Vec<u64> = (0..9).map(|x| (x + 1) * 100_000_000_000).collect();
        assert_simulation_law("10^12 users", &m, &huge, 300, 91);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(OptimizedLocalHashing::new(1, 1.0).is_err());
        assert!(OptimizedLocalHashing::new((1 << 32) + 1, 1.0).is_err());
        assert!(OptimizedLocalHashing::new(5, 0.0).is_err());
        assert!(OptimizedLocalHashing::new(5, f64::NAN).is_err());
        assert!(OptimizedLocalHashing::new(5, f64::INFINITY).is_err());
        assert!(OptimizedLocalHashing::with_prime(5, 1.0, 4).is_err());
        assert!(OptimizedLocalHashing::with_prime(5, 1.0, 1).is_err());
        // 2^31 − 1 is prime, but for k = 2^32 it needs t = 2 and (2^31 − 1)^3 ≥ 2^64 outputs.
        let err = OptimizedLocalHashing::with_prime(1 << 32, 1.0, 2_147_483_647).unwrap_err();
        assert!(err.to_string().contains("64 bits"), "{err}");
        // ε so small that p rounded down is not above 1/g: refused, not silently weaker.
        let err = OptimizedLocalHashing::new(10, 1e-17).unwrap_err();
        assert!(err.to_string().contains("too small"), "{err}");
        let m = OptimizedLocalHashing::new(10, 1e-9).unwrap();
        assert!(m.realized_epsilon() > 0.0 && m.realized_epsilon() <= 1e-9);
    }
}
