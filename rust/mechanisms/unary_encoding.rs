//! Symmetric unary encodings: basic one-time RAPPOR (Erlingsson, Pihur & Korolova 2014, as
//! used by Acharya, Sun & Zhang, AISTATS 2019; docs page Mechanisms › Classic mechanisms) and
//! Optimized Unary
//! Encoding (OUE; Wang, Blocki, Li & Jha 2017, "Locally differentially private protocols for
//! frequency estimation", §4.3).
//!
//! Both one-hot encode `x ∈ [0, k)` into k bits and report each bit independently:
//! `P(bit j = 1 | x) = a` if `j = x` and `b` otherwise (Wang et al. eq. (6): "p" and "q").
//! Reports are rows of `⌈k/8⌉` bytes in `numpy.packbits` layout (see [`BitMechanism`]).
//!
//! * RAPPOR: every bit of the one-hot vector is flipped with probability
//!   `f = 1/(e^{ε/2} + 1)`: `a = 1 − f`, `b = f`.
//! * OUE (Wang et al. eq. (11)): `a = 1/2`, `b = 1/(e^ε + 1)`.
//!
//! Privacy: for `x ≠ x'` the likelihood ratio of a report y depends only on bits x and x'
//! and is largest for `y_x = 1, y_{x'} = 0`:
//! `Q(y|x)/Q(y|x') = (a/b)·((1 − b)/(1 − a))` (Wang et al. eq. (7)), so the realized
//! guarantee is `ln(a/b) + ln((1 − b)/(1 − a))`: `2 ln((1 − f)/f)` for RAPPOR and
//! `ln((1 − b)/b)` for OUE.
//!
//! Estimator (Wang et al. eq. (2)): from per-bit counts `c_j` of n reports,
//! `p̂_j = (c_j/n − b)/(a − b)`, unbiased, with
//! `Var(p̂_j) = (b(1 − b) + p_j (a − b)(1 − a − b)) / (n (a − b)²)`.
//!
//! # Exact privacy (rounding)
//! The probabilities are computed in floating point for `ε' = ε − δ`, `δ = 2^-46·max(ε, 1)`,
//! then rounded outward, so that the channel actually sampled (the exact binary values of `a`
//! and `b`, drawn exactly) is ε-LDP *and* the floating-point value reported by
//! `realized_epsilon` (accurate to a few 1e-16) is ≤ ε; it lies within 1e-12 of ε for
//! ε ≤ 16 (OUE: ε ≤ 60).
//! * OUE: `b` is the float of `1/(e^{ε'} + 1)` raised by 4 ulps (above the real value, which
//!   the float approximates to ≤ 3 ulps); `a = 1/2` is exact. `(1 − b)/b` is decreasing in b.
//! * RAPPOR: `f` is the float of `1/(e^{ε'/2} + 1)` raised by 4 ulps and then rounded up to a
//!   multiple of 2^-53, so that `a = 1 − f` is exact and the channel is exactly "flip each
//!   bit with probability f". `(1 − f)/f` is decreasing in f. The 2^-53 grid lowers the
//!   realized guarantee by at most `2^-52 (e^{ε/2} + 2)` (< 1e-12 for ε ≤ 16, 5e-12 at
//!   ε = 20), and caps it at `2 ln(2^53 − 1) ≈ 73.4`
//!   (for OUE the smallest positive float caps it at ≈ 744): asking for more gives a channel
//!   with a smaller realized ε, never a larger one.
//!
//! # Sampling (exact, ~0.04 random words per bit)
//! Bits `j ≠ x` are i.i.d. Bernoulli(b). They are drawn 64 at a time with [`BernoulliLanes`]:
//! lane ℓ of a word compares a uniform real `U_ℓ ∈ [0, 1)`, revealed one binary digit per
//! random word, with the binary expansion of b (finite: b is a float), most significant digit
//! first; the lane is decided at the first digit where they differ (`U < b` ⇒ 1). Each lane is
//! therefore exactly Bernoulli(b), lanes are independent (disjoint bits of the words), and
//! it needs no floating point; its cost does not depend on b (RAPPOR's b is close to 1/2 at
//! small ε, where geometric skipping gains nothing). Drawing a word until its last lane is
//! decided costs ≈ 7.3 random words ([`BernoulliLanes::word`]); rows are filled by
//! [`BernoulliLanes::fill`] instead, which decides the first two digits with whole words and
//! hands each lane still undecided (a quarter) an independent Bernoulli draw of the rest of
//! the expansion from a reservoir filled the same way: ≈ 2.7 random words per 64 bits
//! (`cargo bench --bench mechanisms -- bernoulli_lanes` times both). Lanes are exchangeable,
//! so a word's 64 lanes are written to 8 bytes of the row in any fixed order; the padding
//! bits of the last byte are cleared. Bit x is then overwritten with an exact Bernoulli(a)
//! draw ([`BernoulliThreshold`]).
//!
//! # Simulation
//! Given the users, the per-bit counts are independent: `c_j = Bin(n_j, a) + Bin(n − n_j, b)`.
//! [`UnaryEncoding::simulate`] draws them with `rand_distr::Binomial` (BINV/BTPE) from the
//! stream `rng::stream(key, j)` of bit j, in parallel over bits: reproducible for a seed and
//! independent of the thread count. The counts (hence the estimate) have the distribution of
//! `privatize` + aggregate, up to the floating-point accuracy of rand_distr's binomial sampler
//! (which is not exact to the last bit as the samplers of `privatize` are), but they are not
//! equal to the counts of any particular `privatize` call for the same seed.

use super::{
    check_domain, check_epsilon, clear_bit, clear_padding, set_bit, BitMechanism,
    SymmetricEstimator,
};
use crate::error::{Error, Result};
use crate::rng::{stream, BernoulliThreshold, Key, StreamRng};
use rand_core::Rng;
use rand_distr::{Binomial, Distribution};
use rayon::prelude::*;
use std::ops::Deref;

/// `x` raised by `ulps` units in the last place (for finite x ≥ 0).
fn round_up(x: f64, ulps: u64) -> f64 {
    f64::from_bits(x.to_bits() + ulps)
}

/// The ε the probabilities are computed for: `ε − 2^-46·max(ε, 1)` (see the module doc).
fn shaded(epsilon: f64) -> f64 {
    epsilon - epsilon.max(1.0) * (-46f64).exp2()
}

/// 64 independent Bernoulli(p) bits per u64 word, each exactly Bernoulli(p) for the binary
/// value of the `f64` p (see the module documentation).
#[derive(Clone, Debug)]
pub struct BernoulliLanes {
    /// `digits[i]` is all ones if binary digit i + 1 of p (weight 2^-(i+1)) is 1, else 0;
    /// the expansion ends with the last 1 digit.
    digits: Vec<u64>,
    /// p = 1 (whose expansion 0.111… does not end).
    always: bool,
}

impl BernoulliLanes {
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::Value(format!(
                "a probability must lie in [0, 1], got {p}"
            )));
        }
        if p == 1.0 {
            return Ok(Self {
                digits: Vec::new(),
                always: true,
            });
        }
        let mut digits = Vec::new();
        // Doubling and taking the integer part is exact for a float in [0, 1): each step is a
        // multiplication by 2 and, when ≥ 1, a subtraction of 1 with an exact result.
        let mut rest = p;
        while rest > 0.0 {
            rest *= 2.0;
            if rest >= 1.0 {
                rest -= 1.0;
                digits.push(!0u64);
            } else {
                digits.push(0);
            }
        }
        Ok(Self {
            digits,
            always: false,
        })
    }

    /// One word of 64 independent Bernoulli(p) lanes.
    #[inline]
    pub fn word<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        if self.always {
            return !0;
        }
        self.word_from(0, rng)
    }

    /// Binary digit `i + 1` of p as a lane mask (0 past the end of the expansion).
    #[inline(always)]
    fn digit(&self, i: usize) -> u64 {
        self.digits.get(i).copied().unwrap_or(0)
    }

    /// 64 lanes of Bernoulli(p_start), `p_start = 0.d_{start+1} d_{start+2} …` (the digits of
    /// p from `start` on): one random word per digit until every lane is decided.
    fn word_from<R: Rng + ?Sized>(&self, start: usize, rng: &mut R) -> u64 {
        let mut undecided = !0u64;
        let mut ones = 0u64;
        for &digit in self.digits.get(start..).unwrap_or(&[]) {
            compare_digit(rng.next_u64(), digit, &mut ones, &mut undecided);
            if undecided == 0 {
                return ones;
            }
        }
        // Undecided lanes match p's whole (finite) expansion: U ≥ p.
        ones
    }

    /// Fill `out` with independent Bernoulli(p) bits (every bit of every byte), exactly.
    ///
    /// [`word`](Self::word) spends a random word on every lane until the last of its 64 lanes
    /// is decided (≈ 7.3 words per 64 lanes). Here only the first `FULL_LEVELS` digits use
    /// whole words; a lane still undecided after them (a quarter of them) needs `U' < p'`
    /// for a fresh uniform `U'` and `p'` the rest of the expansion — an independent
    /// Bernoulli(p') draw, which it takes from a reservoir of lanes drawn 64 at a time by the
    /// same rule one level deeper (the `n` undecided lanes of a word receive the next `n`
    /// reservoir lanes in order, by a bit deposit). Every lane still compares its own uniform
    /// digits with p's, so each bit is exactly Bernoulli(p) and the bits are independent;
    /// the cost falls to `2/(1 − 1/4) ≈ 2.7` random words per 64 bits. The deposit is the
    /// BMI2 `pdep` instruction where the CPU has it, else a loop with the same result.
    pub fn fill<R: Rng + ?Sized>(&self, rng: &mut R, out: &mut [u8]) {
        if self.always {
            out.fill(0xFF);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("bmi2") {
            // SAFETY: the CPU has BMI2.
            return unsafe { self.fill_bmi2(rng, out) };
        }
        self.fill_with::<SoftwareDeposit, R>(rng, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi2,popcnt")]
    unsafe fn fill_bmi2<R: Rng + ?Sized>(&self, rng: &mut R, out: &mut [u8]) {
        self.fill_with::<Bmi2Deposit, R>(rng, out)
    }

    #[inline(always)]
    fn fill_with<D: Deposit, R: Rng + ?Sized>(&self, rng: &mut R, out: &mut [u8]) {
        let mut stragglers = Stragglers::default();
        let mut random = [0u8; 8 * FULL_LEVELS * BLOCK_WORDS];
        for block in out.chunks_mut(8 * BLOCK_WORDS) {
            // The top level of `lanes`, for a block of words at once: the random words come
            // in one call, and the digit comparisons vectorize.
            let words = block.len().div_ceil(8);
            let random = &mut random[..8 * FULL_LEVELS * words];
            rng.fill_bytes(random);
            let mut ones = [0u64; BLOCK_WORDS];
            let mut undecided = [!0u64; BLOCK_WORDS];
            for (level, level_words) in random.chunks_exact(8 * words).enumerate() {
                let digit = self.digit(level);
                for ((one, open), bytes) in ones
                    .iter_mut()
                    .zip(&mut undecided)
                    .zip(level_words.chunks_exact(8))
                {
                    let u = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                    compare_digit(u, digit, one, open);
                }
            }
            for ((bytes, ones), open) in block.chunks_mut(8).zip(ones).zip(undecided) {
                let one = self.settle::<D, R>(rng, &mut stragglers, 1, ones, open);
                let len = bytes.len();
                bytes.copy_from_slice(&one.to_le_bytes()[..len]);
            }
        }
    }

    /// 64 lanes of Bernoulli(p_start), `start = FULL_LEVELS·depth` (see [`fill`](Self::fill)).
    #[inline(always)]
    fn lanes<D: Deposit, R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        stragglers: &mut Stragglers,
        depth: usize,
    ) -> u64 {
        let start = FULL_LEVELS * depth;
        if depth == STRAGGLER_DEPTHS {
            return self.word_from(start, rng);
        }
        let mut undecided = !0u64;
        let mut ones = 0u64;
        for level in 0..FULL_LEVELS {
            let digit = self.digit(start + level);
            compare_digit(rng.next_u64(), digit, &mut ones, &mut undecided);
        }
        self.settle::<D, R>(rng, stragglers, depth + 1, ones, undecided)
    }

    /// `ones` with its `undecided` lanes (those equal to p's first `FULL_LEVELS·depth`
    /// digits) decided by the next lanes of the depth-`depth` reservoir.
    #[inline(always)]
    fn settle<D: Deposit, R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        stragglers: &mut Stragglers,
        depth: usize,
        ones: u64,
        undecided: u64,
    ) -> u64 {
        if undecided == 0 || FULL_LEVELS * depth >= self.digits.len() {
            // p's expansion has ended: the undecided lanes have U ≥ p.
            return ones;
        }
        let drawn = self.straggler_lanes::<D, R>(rng, stragglers, depth, undecided.count_ones());
        ones | D::deposit(drawn, undecided)
    }

    /// The next `n` (1 ≤ n ≤ 64) lanes of the depth-`depth` reservoir, in its low bits.
    fn straggler_lanes<D: Deposit, R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        stragglers: &mut Stragglers,
        depth: usize,
        n: u32,
    ) -> u64 {
        let slot = depth - 1;
        let (word, avail) = (stragglers.word[slot], stragglers.avail[slot]);
        if n <= avail {
            stragglers.word[slot] = shift_right(word, n);
            stragglers.avail[slot] = avail - n;
            return low_bits(word, n);
        }
        let fresh = self.lanes::<D, R>(rng, stragglers, depth);
        let need = n - avail;
        stragglers.word[slot] = shift_right(fresh, need);
        stragglers.avail[slot] = 64 - need;
        low_bits(word | shift_left(fresh, avail), n)
    }
}

/// One digit of U (the bits of `u`, one per lane) against p's (`digit`, all lanes equal):
/// lanes still undecided where U's digit is 0 and p's is 1 have U < p (a 1); lanes where
/// the digits differ are decided; the rest stay undecided.
#[inline(always)]
fn compare_digit(u: u64, digit: u64, ones: &mut u64, undecided: &mut u64) {
    *ones |= *undecided & !u & digit;
    *undecided &= !(u ^ digit);
}

/// Digits of p decided by whole random words at each depth of [`BernoulliLanes::fill`].
const FULL_LEVELS: usize = 2;
/// Words of a row drawn together by [`BernoulliLanes::fill`] (2 KiB of output).
const BLOCK_WORDS: usize = 32;
/// Reservoir depths of [`BernoulliLanes::fill`]; a lane reaches the last one with
/// probability 4^-8, and draws its remaining digits there with whole words.
const STRAGGLER_DEPTHS: usize = 8;

/// Reservoirs of drawn but unused lanes, one per depth: the low `avail` bits of `word`.
#[derive(Default)]
struct Stragglers {
    word: [u64; STRAGGLER_DEPTHS],
    avail: [u32; STRAGGLER_DEPTHS],
}

#[inline(always)]
fn low_bits(x: u64, n: u32) -> u64 {
    if n >= 64 {
        x
    } else {
        x & ((1u64 << n) - 1)
    }
}

#[inline(always)]
fn shift_right(x: u64, n: u32) -> u64 {
    x.checked_shr(n).unwrap_or(0)
}

#[inline(always)]
fn shift_left(x: u64, n: u32) -> u64 {
    x.checked_shl(n).unwrap_or(0)
}

/// `pdep`: the low bits of `bits`, in order, at the set positions of `mask`.
trait Deposit {
    fn deposit(bits: u64, mask: u64) -> u64;
}

struct SoftwareDeposit;
impl Deposit for SoftwareDeposit {
    #[inline(always)]
    fn deposit(mut bits: u64, mut mask: u64) -> u64 {
        let mut out = 0;
        while mask != 0 {
            let lowest = mask & mask.wrapping_neg();
            out |= lowest & (bits & 1).wrapping_neg();
            bits >>= 1;
            mask ^= lowest;
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
struct Bmi2Deposit;
#[cfg(target_arch = "x86_64")]
impl Deposit for Bmi2Deposit {
    #[inline(always)]
    fn deposit(bits: u64, mask: u64) -> u64 {
        // SAFETY: only used through `fill_bmi2`, on CPUs with BMI2.
        unsafe { std::arch::x86_64::_pdep_u64(bits, mask) }
    }
}

/// The symmetric unary-encoding channel shared by [`Rappor`] and [`OptimizedUnaryEncoding`]:
/// `P(bit j = 1 | x) = a` for `j = x`, `b` otherwise.
#[derive(Clone, Debug)]
pub struct UnaryEncoding {
    k: u64,
    epsilon: f64,
    a: f64,
    b: f64,
    keep: BernoulliThreshold,
    noise: BernoulliLanes,
}

impl UnaryEncoding {
    /// The channel with the given (already rounded) probabilities `b < a`.
    fn with_probabilities(k: u64, epsilon: f64, a: f64, b: f64) -> Result<Self> {
        debug_assert!(0.0 <= b && b < a && a <= 1.0);
        Ok(Self {
            k,
            epsilon,
            a,
            b,
            keep: BernoulliThreshold::new(a)?,
            noise: BernoulliLanes::new(b)?,
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`).
    pub fn footprint(&self, op: super::Operation) -> crate::memory::Footprint {
        super::vector_footprint("unary encoding", op, self.k, self.k)
    }

    /// `(a, b)`: `P(bit x = 1 | x)` and `P(bit j = 1 | x)` for `j ≠ x`, as realized.
    pub fn probabilities(&self) -> (f64, f64) {
        (self.a, self.b)
    }

    /// `ln(a/b) + ln((1 − b)/(1 − a))`: the exact guarantee of the channel used (≤ ε).
    pub fn realized_epsilon(&self) -> f64 {
        let (a, b) = (self.a, self.b);
        (a.ln() - b.ln()) + ((-b).ln_1p() - (-a).ln_1p())
    }

    /// Row x of the channel matrix over the `2^k` outputs (output `o` has bit j equal to
    /// `(o >> j) & 1`); only for `k < 64` (the bindings refuse large matrices first).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let k = self.k as usize;
        debug_assert!(k < 64 && row.len() == 1 << k);
        let (a, b) = (self.a, self.b);
        // P(the k − 1 other bits have c ones in a given pattern) = b^c (1 − b)^(k−1−c).
        let others: Vec<f64> = (0..k as i32)
            .map(|c| b.powi(c) * (1.0 - b).powi(k as i32 - 1 - c))
            .collect();
        let own = 1u64 << x;
        for (o, q) in row.iter_mut().enumerate() {
            let o = o as u64;
            let c = (o & !own).count_ones() as usize;
            *q = (if o & own != 0 { a } else { 1.0 - a }) * others[c];
        }
    }

    /// The estimator algebra (`mechanisms::SymmetricEstimator`): estimate, expected
    /// frequencies and channel products of the `Estimator` trait all come from it.
    pub(crate) fn symmetric(&self) -> SymmetricEstimator {
        SymmetricEstimator {
            high: self.a,
            low: self.b,
        }
    }

    /// Per-bit counts of privatizing `true_counts[x]` users holding each x, without storing
    /// reports: `c_j = Bin(n_j, a) + Bin(n − n_j, b)` from the stream of bit j (see the
    /// module documentation for what "equal in distribution" means here).
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        if true_counts.len() as u64 != self.k {
            return Err(Error::Value(format!(
                "true_counts must have length k = {}, got {}",
                self.k,
                true_counts.len()
            )));
        }
        let n = super::total_users(true_counts)?;
        let mut counts = crate::memory::zeroed_vec::<u64>(true_counts.len(), "the per-bit counts")?;
        let binomial = |trials: u64, p: f64, rng: &mut StreamRng| -> u64 {
            // p ∈ [0, 1] by construction, so `new` cannot fail.
            Binomial::new(trials, p).map(|d| d.sample(rng)).unwrap_or(0)
        };
        // Chunks of bits are the unit of interruption; bit j always uses stream j.
        const BITS_PER_CHECK: usize = 1024;
        counts
            .par_chunks_mut(BITS_PER_CHECK)
            .zip(true_counts.par_chunks(BITS_PER_CHECK))
            .enumerate()
            .try_for_each(|(c, (out, users))| {
                crate::interrupt::check()?;
                for (i, (o, &nj)) in out.iter_mut().zip(users).enumerate() {
                    let mut rng = stream(key, (c * BITS_PER_CHECK + i) as u64);
                    let on = binomial(nj, self.a, &mut rng);
                    *o = on + binomial(n - nj, self.b, &mut rng);
                }
                Ok::<(), Error>(())
            })?;
        Ok(counts)
    }

    #[inline]
    fn fill_row(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]) {
        self.noise.fill(rng, row);
        clear_padding(row, self.k);
        clear_bit(row, x);
        if self.keep.sample(rng) {
            set_bit(row, x);
        }
    }
}

impl BitMechanism for UnaryEncoding {
    fn domain(&self) -> u64 {
        self.k
    }
    fn bits(&self) -> u64 {
        self.k
    }
    #[inline]
    fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]) {
        self.fill_row(rng, x, row)
    }
}

/// Basic one-time RAPPOR: the one-hot vector of x with every bit flipped independently with
/// probability `f = 1/(e^{ε/2} + 1)` (rounded up, see the module documentation).
#[derive(Clone, Debug)]
pub struct Rappor(UnaryEncoding);

impl Rappor {
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let grid = (53f64).exp2();
        let f = round_up(1.0 / ((shaded(epsilon) / 2.0).exp() + 1.0), 4);
        // Up to a multiple of 2^-53 (exact scaling and ceil): then 1 − f is exact.
        let f = ((f * grid).ceil() / grid).min(0.5);
        Ok(Self(UnaryEncoding::with_probabilities(
            k,
            epsilon,
            1.0 - f,
            f,
        )?))
    }

    /// The flip probability f (`b = f`, `a = 1 − f`).
    pub fn flip_probability(&self) -> f64 {
        self.0.b
    }
}

/// Optimized Unary Encoding: bit x is 1 with probability 1/2, every other bit with
/// probability `b = 1/(e^ε + 1)` (rounded up, see the module documentation).
#[derive(Clone, Debug)]
pub struct OptimizedUnaryEncoding(UnaryEncoding);

impl OptimizedUnaryEncoding {
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let b = round_up(1.0 / (shaded(epsilon).exp() + 1.0), 4).min(0.5);
        Ok(Self(UnaryEncoding::with_probabilities(k, epsilon, 0.5, b)?))
    }
}

macro_rules! unary_wrapper {
    ($t:ty) => {
        impl Deref for $t {
            type Target = UnaryEncoding;
            fn deref(&self) -> &UnaryEncoding {
                &self.0
            }
        }

        impl BitMechanism for $t {
            fn domain(&self) -> u64 {
                self.0.k
            }
            fn bits(&self) -> u64 {
                self.0.k
            }
            #[inline]
            fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]) {
                self.0.fill_row(rng, x, row)
            }
        }
    };
}

unary_wrapper!(Rappor);
unary_wrapper!(OptimizedUnaryEncoding);

#[cfg(test)]
mod tests {
    use super::super::testing::{channel_stats, chi_square};
    use super::super::{aggregate_bits, channel_matrix, get_bit, privatize_bits, row_bytes};
    use super::*;
    use crate::rng::key_from_u64;

    const EPSILONS: [f64; 5] = [0.1, 0.5, 1.0, 2.0, 5.0];

    fn both(k: u64, eps: f64) -> [(&'static str, UnaryEncoding); 2] {
        [
            ("RAPPOR", Rappor::new(k, eps).unwrap().0),
            ("OUE", OptimizedUnaryEncoding::new(k, eps).unwrap().0),
        ]
    }

    /// Replays fixed u64 words.
    struct Words(Vec<u64>, usize);
    impl rand_core::TryRng for Words {
        type Error = core::convert::Infallible;
        fn try_next_u32(&mut self) -> core::result::Result<u32, Self::Error> {
            Ok(self.try_next_u64()? as u32)
        }
        fn try_next_u64(&mut self) -> core::result::Result<u64, Self::Error> {
            self.1 += 1;
            Ok(self.0[self.1 - 1])
        }
        fn try_fill_bytes(&mut self, _: &mut [u8]) -> core::result::Result<(), Self::Error> {
            unimplemented!()
        }
    }

    #[test]
    fn lanes_are_exactly_bernoulli_over_every_digit_sequence() {
        // p with a 4-digit expansion: enumerate all 2^4 digit sequences of U in each lane at
        // once (lane ℓ reads the bits of ℓ mod 16), so each lane sees every sequence.
        for (num, p) in [
            (5u32, 0.3125),
            (1, 0.0625),
            (8, 0.5),
            (15, 0.9375),
            (0, 0.0),
        ] {
            let lanes = BernoulliLanes::new(p).unwrap();
            let words: Vec<u64> = (0..4)
                .map(|i| {
                    (0..64u64).fold(0u64, |w, lane| {
                        // Digit i + 1 (most significant first) of the 4-bit number lane mod 16.
                        w | ((((lane % 16) >> (3 - i)) & 1) << lane)
                    })
                })
                .collect();
            let word = lanes.word(&mut Words(words, 0));
            for lane in 0..64u64 {
                let u = (lane % 16) as u32; // U ∈ [u/16, (u+1)/16)
                assert_eq!(word >> lane & 1 == 1, u < num, "p {p} lane {lane}");
            }
            assert_eq!(word.count_ones(), 4 * num, "p = {p}");
        }
        assert_eq!(
            BernoulliLanes::new(1.0)
                .unwrap()
                .word(&mut Words(vec![], 0)),
            !0
        );
        assert!(BernoulliLanes::new(1.5).is_err() && BernoulliLanes::new(f64::NAN).is_err());
    }

    #[test]
    fn filled_bits_are_independent_bernoulli() {
        use super::super::testing::{chi_square, chi_square_critical};
        // Byte values (8 bits at once) and pairs of bits 64 apart (the same lane of
        // consecutive words, which the straggler reservoir links) have the product law.
        for (seed, p) in [
            (1u64, 0.3125),
            (2, 0.2689414213699951),
            (3, 1e-3),
            (4, 0.5 + 1e-9),
        ] {
            let lanes = BernoulliLanes::new(p).unwrap();
            let mut rng = stream(&crate::rng::key_from_u64(seed), 0);
            let mut out = vec![0u8; 1 << 19];
            // Uneven lengths exercise the partial last block and the partial last word.
            for piece in out.chunks_mut(8 * BLOCK_WORDS + 5) {
                lanes.fill(&mut rng, piece);
            }
            let mut freq = vec![0.0; 256];
            for &b in &out {
                freq[b as usize] += 1.0 / out.len() as f64;
            }
            let probs: Vec<f64> = (0..256u32)
                .map(|v| p.powi(v.count_ones() as i32) * (1.0 - p).powi(8 - v.count_ones() as i32))
                .collect();
            let stat = chi_square(&freq, &probs, out.len());
            assert!(
                stat < chi_square_critical(255),
                "p = {p}: bytes chi² {stat}"
            );
            let pairs = out.len() - 8;
            let mut joint = vec![0.0; 4];
            for i in 0..pairs {
                let (a, b) = (out[i] & 1, out[i + 8] & 1);
                joint[(2 * a + b) as usize] += 1.0 / pairs as f64;
            }
            let q = [(1.0 - p) * (1.0 - p), (1.0 - p) * p, p * (1.0 - p), p * p];
            let stat = chi_square(&joint, &q, pairs);
            assert!(stat < chi_square_critical(3), "p = {p}: pairs chi² {stat}");
        }
    }

    #[test]
    fn fill_is_reproducible_and_handles_the_end_points() {
        let key = crate::rng::key_from_u64(9);
        let lanes = BernoulliLanes::new(0.3).unwrap();
        let (mut a, mut b) = (vec![0u8; 1000], vec![0u8; 1000]);
        lanes.fill(&mut stream(&key, 0), &mut a);
        lanes.fill(&mut stream(&key, 0), &mut b);
        assert_eq!(a, b);
        BernoulliLanes::new(1.0)
            .unwrap()
            .fill(&mut stream(&key, 1), &mut a);
        assert!(a.iter().all(|&x| x == 0xFF));
        BernoulliLanes::new(0.0)
            .unwrap()
            .fill(&mut stream(&key, 1), &mut a);
        assert!(a.iter().all(|&x| x == 0));
    }

    #[test]
    fn software_deposit_is_pdep() {
        let mut rng = stream(&crate::rng::key_from_u64(5), 0);
        for _ in 0..10_000 {
            let (bits, mask) = (rng.next_u64(), rng.next_u64() & rng.next_u64());
            let mut expected = 0u64;
            let mut next = 0;
            for i in 0..64 {
                if mask >> i & 1 == 1 {
                    expected |= (bits >> next & 1) << i;
                    next += 1;
                }
            }
            assert_eq!(SoftwareDeposit::deposit(bits, mask), expected);
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("bmi2") {
                assert_eq!(Bmi2Deposit::deposit(bits, mask), expected);
            }
        }
    }

    #[test]
    fn lane_expansion_is_the_binary_value() {
        for p in [0.3, 1.0 / 3.0, 0.0067, 1e-300, 5e-324, 0.5 - 1e-17] {
            let lanes = BernoulliLanes::new(p).unwrap();
            // Σ digit_i 2^-i, summed from the least significant digit up, is exact.
            let value = lanes
                .digits
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, &d)| d != 0)
                .fold(0.0f64, |s, (i, _)| s + (-(i as f64 + 1.0)).exp2());
            assert_eq!(value, p);
        }
    }

    #[test]
    fn channel_is_exactly_epsilon_ldp() {
        for k in [2u64, 3, 7] {
            for eps in EPSILONS {
                for (name, m) in both(k, eps) {
                    let q = channel_matrix(k, 1 << k, 1 << 20, |x, r| m.channel_row(x, r)).unwrap();
                    let (ratio, sum_err) = channel_stats(&q, k as usize);
                    assert!(sum_err < 1e-12, "{name} k {k} eps {eps}: {sum_err}");
                    assert!(ratio <= eps + 1e-12, "{name} k {k} eps {eps}: {ratio}");
                    assert!(
                        (ratio - m.realized_epsilon()).abs() < 1e-12,
                        "{name} k {k} eps {eps}: {ratio} vs {}",
                        m.realized_epsilon()
                    );
                }
            }
        }
    }

    #[test]
    fn realized_epsilon_is_at_most_epsilon_and_close_to_it() {
        // Independent computation: the max log-ratio over the four patterns of the two bits in
        // which x and x' differ (the other bits cancel), from the probabilities as used.
        for k in [2u64, 5, 16, 64, 100] {
            for eps in EPSILONS {
                for (name, m) in both(k, eps) {
                    let (a, b) = m.probabilities();
                    let own = [1.0 - a, a]; // P(bit x = v | x)
                    let other = [1.0 - b, b]; // P(bit x = v | x'), x' ≠ x
                    let mut worst = 0.0f64;
                    for vx in 0..2 {
                        for vy in 0..2 {
                            let p = own[vx] * other[vy];
                            let p2 = other[vx] * own[vy];
                            worst = worst.max((p / p2).ln().abs());
                        }
                    }
                    let r = m.realized_epsilon();
                    assert!(r <= eps, "{name} k {k} eps {eps}: {r}");
                    assert!(eps - r < 1e-12, "{name} k {k} eps {eps}: {r}");
                    assert!((r - worst).abs() < 1e-12, "{name}: {r} vs {worst}");
                }
            }
        }
        // Closed forms.
        for eps in EPSILONS {
            let r = Rappor::new(10, eps).unwrap();
            let f = r.flip_probability();
            assert_eq!(r.probabilities(), (1.0 - f, f));
            assert!((f - 1.0 / ((eps / 2.0).exp() + 1.0)).abs() < 1e-14);
            let o = OptimizedUnaryEncoding::new(10, eps).unwrap();
            let (a, b) = o.probabilities();
            assert_eq!(a, 0.5);
            assert!((b - 1.0 / (eps.exp() + 1.0)).abs() < 1e-14);
        }
    }

    #[test]
    fn reported_epsilon_never_exceeds_epsilon_on_a_dense_grid() {
        for i in 1..=20_000 {
            let eps = i as f64 * 1e-3 * (1.0 + 1e-7 * i as f64);
            for (name, m) in both(4, eps) {
                let r = m.realized_epsilon();
                // RAPPOR's 2^-53 grid for f costs up to 2^-52 (e^{ε/2} + 2) (module doc).
                let grid = if name == "RAPPOR" {
                    2.3e-16 * ((eps / 2.0).exp() + 2.0)
                } else {
                    0.0
                };
                assert!(r <= eps && eps - r < 1e-12 + grid, "{name} eps {eps}: {r}");
                if eps <= 16.0 {
                    assert!(eps - r < 1e-12, "{name} eps {eps}: {r}");
                }
            }
        }
        for i in 0..100 {
            let eps = 20.0 + 0.4 * i as f64;
            let r = OptimizedUnaryEncoding::new(4, eps)
                .unwrap()
                .realized_epsilon();
            assert!(r <= eps && eps - r < 1e-12, "OUE eps {eps}: {r}");
        }
        // Very large ε: capped, never above.
        for eps in [800.0, 1e300] {
            assert!(OptimizedUnaryEncoding::new(4, eps).is_err());
            assert!(Rappor::new(4, eps).is_err());
        }
        for eps in [50.0, 80.0, 700.0] {
            for (name, m) in both(4, eps) {
                let r = m.realized_epsilon();
                assert!(
                    r.is_finite() && r > 30.0 && r <= eps,
                    "{name} eps {eps}: {r}"
                );
            }
        }
    }

    fn privatize_same(m: &UnaryEncoding, x: u32, draws: usize, seed: u64) -> Vec<u8> {
        let width = row_bytes(m.bits());
        let mut out = vec![0u8; draws * width];
        privatize_bits(m, &key_from_u64(seed), &vec![x; draws], &mut out).unwrap();
        out
    }

    #[test]
    fn sampler_matches_the_full_channel_for_k_3() {
        for eps in [0.5, 3.0] {
            for (name, m) in both(3, eps) {
                let mut row = vec![0.0; 8];
                for x in 0..3u32 {
                    m.channel_row(x as u64, &mut row);
                    let draws = 200_000;
                    let rows = privatize_same(&m, x, draws, 100 + x as u64);
                    let mut freq = vec![0.0; 8];
                    for r in &rows {
                        assert_eq!(r & 0x1F, 0, "padding bits set");
                        let o = (0..3).fold(0usize, |o, j| o | (get_bit(&[*r], j) as usize) << j);
                        freq[o] += 1.0 / draws as f64;
                    }
                    let chi2 = chi_square(&freq, &row, draws);
                    // df = 7: P(chi2 > 24.32) = 0.001.
                    assert!(chi2 < 24.32, "{name} eps {eps} x {x}: chi2 {chi2}");
                }
            }
        }
    }

    #[test]
    fn per_bit_frequencies_and_pairwise_independence() {
        // k = 70 spans a full word and a partial one (9 bytes, 2 padding bits).
        let k = 70u64;
        for (eps, x) in [(1.0, 0u32), (0.2, 64), (4.0, 69)] {
            for (name, m) in both(k, eps) {
                let (a, b) = m.probabilities();
                let draws = 100_000;
                let rows = privatize_same(&m, x, draws, 7 + x as u64);
                let mut counts = vec![0u64; k as usize];
                aggregate_bits(&m, &rows, &mut counts, false).unwrap();
                // Per-bit counts: independent binomials, Σ z² ~ χ²(70); P(> 112.3) = 0.001.
                let chi2: f64 = counts
                    .iter()
                    .enumerate()
                    .map(|(j, &c)| {
                        let p = if j as u32 == x { a } else { b };
                        let e = p * draws as f64;
                        (c as f64 - e).powi(2) / (e * (1.0 - p))
                    })
                    .sum();
                assert!(chi2 < 112.3, "{name} eps {eps} x {x}: chi2 {chi2}");
                // Joint law of pairs of bits (same byte, across bytes, across words, with x).
                let width = row_bytes(k);
                for (i, j) in [(1u64, 2u64), (7, 8), (63, 64), (0, 69), (x as u64, 33)] {
                    if i == j {
                        continue;
                    }
                    let mut joint = [0.0f64; 4];
                    for r in rows.chunks_exact(width) {
                        let cell = (get_bit(r, i) as usize) << 1 | get_bit(r, j) as usize;
                        joint[cell] += 1.0 / draws as f64;
                    }
                    let pi = if i == x as u64 { a } else { b };
                    let pj = if j == x as u64 { a } else { b };
                    let probs = [
                        (1.0 - pi) * (1.0 - pj),
                        (1.0 - pi) * pj,
                        pi * (1.0 - pj),
                        pi * pj,
                    ];
                    let chi2 = chi_square(&joint, &probs, draws);
                    // df = 3: P(chi2 > 16.27) = 0.001.
                    assert!(chi2 < 16.27, "{name} eps {eps} bits {i},{j}: {chi2}");
                }
                // Padding bits are never set.
                assert!(rows.chunks_exact(width).all(|r| r[width - 1] & 0x03 == 0));
            }
        }
    }

    #[test]
    fn privatize_does_not_depend_on_the_thread_count() {
        let m = Rappor::new(100, 1.0).unwrap();
        let values: Vec<u32> = (0..150_000u32).map(|i| i % 100).collect();
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    let mut out = vec![0u8; values.len() * 13];
                    privatize_bits(&m, &key_from_u64(3), &values, &mut out).unwrap();
                    out
                })
        };
        assert_eq!(run(1), run(3));
    }

    #[test]
    fn estimator_is_unbiased_on_expected_frequencies() {
        for (k, eps) in [(6u64, 0.7), (100, 2.0), (3, 5.0)] {
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            for (name, m) in both(k, eps) {
                let est = m
                    .symmetric()
                    .estimate_from_frequencies(&m.symmetric().apply(&p));
                for (e, v) in est.iter().zip(&p) {
                    assert!((e - v).abs() < 1e-12, "{name}: {e} vs {v}");
                }
                // estimate_raw is the same map on counts / n.
                let counts: Vec<u64> = (0..k).map(|j| (j * 13 + 5) % 40).collect();
                let freq: Vec<f64> = counts.iter().map(|&c| c as f64 / 40.0).collect();
                assert_eq!(
                    m.symmetric().estimate_raw(&counts, 40),
                    m.symmetric().estimate_from_frequencies(&freq)
                );
                // Adjoint identity <Qᵀp, w> = <p, Q w>, and expected frequencies against the
                // full channel for small k.
                let w: Vec<f64> = (0..k).map(|j| (j as f64 * 0.37).sin()).collect();
                let lhs: f64 = m
                    .symmetric()
                    .apply(&p)
                    .iter()
                    .zip(&w)
                    .map(|(a, b)| a * b)
                    .sum();
                let rhs: f64 = p
                    .iter()
                    .zip(m.symmetric().apply(&w))
                    .map(|(a, b)| a * b)
                    .sum();
                assert!((lhs - rhs).abs() < 1e-12);
                if k <= 8 {
                    let size = 1usize << k;
                    let mut row = vec![0.0; size];
                    let mut direct = vec![0.0; k as usize];
                    for x in 0..k {
                        m.channel_row(x, &mut row);
                        for (o, q) in row.iter().enumerate() {
                            for (j, d) in direct.iter_mut().enumerate() {
                                if o >> j & 1 == 1 {
                                    *d += p[x as usize] * q;
                                }
                            }
                        }
                    }
                    for (a, b) in m.symmetric().apply(&p).iter().zip(&direct) {
                        assert!((a - b).abs() < 1e-14);
                    }
                }
            }
        }
    }

    #[test]
    fn simulate_agrees_with_privatize_in_mean_and_variance() {
        let k = 5u64;
        let true_counts = [800u64, 0, 150, 50, 1000];
        let n: u64 = true_counts.iter().sum();
        let values: Vec<u32> = true_counts
            .iter()
            .enumerate()
            .flat_map(|(x, &c)| std::iter::repeat_n(x as u32, c as usize))
            .collect();
        let reps = 1000;
        for (name, m) in both(k, 1.0) {
            let (a, b) = m.probabilities();
            let width = row_bytes(k);
            let mut simulated = vec![Vec::with_capacity(reps); k as usize];
            let mut privatized = vec![Vec::with_capacity(reps); k as usize];
            for rep in 0..reps as u64 {
                let s = m.simulate(&key_from_u64(rep), &true_counts).unwrap();
                let mut rows = vec![0u8; values.len() * width];
                privatize_bits(&m, &key_from_u64(1_000_000 + rep), &values, &mut rows).unwrap();
                let mut c = vec![0u64; k as usize];
                aggregate_bits(&m, &rows, &mut c, false).unwrap();
                for j in 0..k as usize {
                    simulated[j].push(s[j] as f64);
                    privatized[j].push(c[j] as f64);
                }
            }
            for j in 0..k as usize {
                let nj = true_counts[j] as f64;
                let mean = nj * a + (n as f64 - nj) * b;
                let var = nj * a * (1.0 - a) + (n as f64 - nj) * b * (1.0 - b);
                for (what, sample) in [("simulate", &simulated[j]), ("privatize", &privatized[j])] {
                    let m1 = sample.iter().sum::<f64>() / reps as f64;
                    let v1 =
                        sample.iter().map(|v| (v - m1).powi(2)).sum::<f64>() / (reps - 1) as f64;
                    // Mean: 4.5 standard errors. Variance: the sample variance of ~normal
                    // counts has relative sd sqrt(2/(reps − 1)) = 0.045; allow 5 of them.
                    let z = (m1 - mean) / (var / reps as f64).sqrt();
                    assert!(z.abs() < 4.5, "{name} {what} bit {j}: z = {z}");
                    assert!(
                        (v1 / var - 1.0).abs() < 0.225,
                        "{name} {what} bit {j}: var {v1} vs {var}"
                    );
                }
            }
        }
    }

    #[test]
    fn simulate_is_reproducible_and_checks_its_input() {
        let m = OptimizedUnaryEncoding::new(10_000, 1.0).unwrap();
        let counts: Vec<u64> = (0..10_000u64).map(|x| 100 + x % 7).collect();
        let key = key_from_u64(8);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| m.simulate(&key, &counts).unwrap());
        assert_eq!(one, m.simulate(&key, &counts).unwrap());
        assert_ne!(one, m.simulate(&key_from_u64(9), &counts).unwrap());
        assert!(m.simulate(&key, &counts[1..]).is_err());
        let mut huge = vec![0u64; 10_000];
        huge[0] = u64::MAX;
        huge[1] = 1;
        assert!(m.simulate(&key, &huge).is_err());
        // Huge n: counts stay within [0, n] and near their mean.
        let mut big = vec![0u64; 10_000];
        big[3] = 1 << 40;
        let s = m.simulate(&key, &big).unwrap();
        let (a, b) = m.probabilities();
        let n = (1u64 << 40) as f64;
        assert!((s[3] as f64 - a * n).abs() < 6.0 * (n * a * (1.0 - a)).sqrt());
        assert!((s[0] as f64 - b * n).abs() < 6.0 * (n * b * (1.0 - b)).sqrt());
    }

    #[test]
    fn rejects_bad_parameters_and_values() {
        for eps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Rappor::new(5, eps).is_err());
            assert!(OptimizedUnaryEncoding::new(5, eps).is_err());
        }
        assert!(Rappor::new(1, 1.0).is_err());
        assert!(OptimizedUnaryEncoding::new(1, 1.0).is_err());
        let m = Rappor::new(5, 1.0).unwrap();
        let mut out = vec![0u8; 3];
        let err = privatize_bits(&m, &key_from_u64(0), &[1, 5, 2], &mut out).unwrap_err();
        assert!(err.to_string().contains("values[1] = 5"));
        // Padding bits (the low 3 bits of the byte for k = 5) make a row malformed.
        let mut counts = vec![0u64; 5];
        assert!(aggregate_bits(&m, &[0x80, 0x81, 0x04], &mut counts, false).is_err());
        assert_eq!(counts, vec![0; 5]);
        let t = aggregate_bits(&m, &[0x80, 0x81, 0x08], &mut counts, true).unwrap();
        assert_eq!((t.valid, t.invalid, t.first_invalid), (2, 1, Some(1)));
        assert_eq!(counts, vec![1, 0, 0, 0, 1]);
    }
}
