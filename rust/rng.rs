//! Random streams: keys, per-chunk ChaCha streams, and exact integer samplers.
//!
//! # Keys
//! Every random computation is driven by a 256-bit [`Key`]. An integer seed `s` with
//! `0 ≤ s < 2^256` becomes the key `s.to_bytes(32, "little")`; `seed=None` draws the 32
//! key bytes from the operating system (getrandom).
//!
//! # Streams
//! Work that runs in parallel is cut into fixed-size chunks; chunk `c` draws from its own
//! ChaCha12 stream (`rand_chacha::ChaCha12Rng`, key = the key, 64-bit stream id = `c`, block
//! counter from 0). Chunk boundaries depend only on the input size, never on the thread
//! count, so a seeded result is bit-identical with 1 thread or 64.
//! Public matrices use ChaCha20 instead (see `signs`), so the two never share a keystream.
//!
//! # Exact samplers
//! [`uniform_below`] is Lemire's multiply-shift method on 32-bit words with rejection, so
//! every value in `[0, n)` has probability exactly `1/n`; [`bernoulli_ratio`] is exact for a
//! rational probability and [`bernoulli_f64`] is exact for the dyadic value of an `f64`.
//! None of them uses floating-point arithmetic on random words.
//!
//! # Counts
//! [`binomial`] and [`spread_uniform`] (a uniform multinomial by recursive halving) draw the
//! counts of many users at once, for simulation (never for a user's own report): they are
//! exact in law up to the double-precision arithmetic of `rand_distr::Binomial`, except
//! Binomial(n, 1/2) for n ≤ 1024, which is exact.

use crate::error::{Error, Result};
use rand_chacha::{ChaCha12Rng, ChaCha20Rng};
use rand_core::{Rng, SeedableRng};
use rand_distr::{Binomial, Distribution, Hypergeometric};
use rayon::prelude::*;

/// A 256-bit generator key (little-endian bytes of the integer seed).
pub type Key = [u8; 32];

/// The per-chunk generator used for private sampling.
pub type StreamRng = ChaCha12Rng;

/// Items per chunk of parallel sampling. Fixed: part of the reproducibility contract.
pub const SAMPLE_CHUNK: usize = 1 << 16;

/// Key from a u64 seed (the other 24 bytes are zero), as `seed.to_bytes(32, "little")`.
pub fn key_from_u64(seed: u64) -> Key {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key
}

/// A fresh key from the operating system's entropy source.
pub fn key_from_os() -> Result<Key> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| Error::Runtime(format!("the OS entropy source failed: {e}")))?;
    Ok(key)
}

/// The private-sampling stream of chunk `chunk` under `key`.
pub fn stream(key: &Key, chunk: u64) -> StreamRng {
    let mut rng = ChaCha12Rng::from_seed(*key);
    rng.set_stream(chunk);
    rng
}

/// The public ChaCha20 stream `stream_id` under `key` (used for public matrices).
pub fn public_stream(key: &Key, stream_id: u64) -> ChaCha20Rng {
    let mut rng = ChaCha20Rng::from_seed(*key);
    rng.set_stream(stream_id);
    rng
}

/// Uniform integer in `[0, n)`, exactly, for `1 ≤ n ≤ 2^32`.
///
/// Lemire (2019), "Fast random integer generation in an interval": draw a 32-bit word `x`,
/// form the 64-bit product `x·n`; reject while its low half is below `2^32 mod n`; return the
/// high half. Documented word by word so that other languages can reproduce the stream.
#[inline]
pub fn uniform_below<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    debug_assert!(n >= 1 && n <= 1 << 32);
    loop {
        if let Some(v) = lemire_accept(rng.next_u32() as u64, n, 32) {
            return v;
        }
    }
}

/// Uniform integer in `[0, n)`, exactly, for `1 ≤ n < 2^64`: [`uniform_below`] for
/// `n ≤ 2^32` (the same words), else Lemire's method on 64-bit words (128-bit product).
#[inline]
pub fn uniform_below_u64<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    debug_assert!(n >= 1);
    if n <= 1 << 32 {
        return uniform_below(rng, n);
    }
    loop {
        let product = rng.next_u64() as u128 * n as u128;
        let low = product as u64;
        if low < n && low < n.wrapping_neg() % n {
            continue;
        }
        return (product >> 64) as u64;
    }
}

/// One step of Lemire's method on a `bits`-bit word `x`: the value, or `None` to redraw.
/// The modulo is computed only on the rare slow path (low half of the product below `n`).
#[inline(always)]
fn lemire_accept(x: u64, n: u64, bits: u32) -> Option<u64> {
    let product = x * n;
    let low = product & ((1u64 << bits) - 1);
    if low < n {
        let threshold = ((1u64 << bits) - n) % n;
        if low < threshold {
            return None;
        }
    }
    Some(product >> bits)
}

/// Bernoulli(num/den) exactly, for `0 ≤ num ≤ den`, `1 ≤ den ≤ 2^32`.
#[inline]
pub fn bernoulli_ratio<R: Rng + ?Sized>(rng: &mut R, num: u64, den: u64) -> bool {
    uniform_below(rng, den) < num
}

/// A Bernoulli threshold: `P(true)` is exactly the `f64` it was built from.
///
/// `p·2^64 = whole + rest` with `whole` an integer and `0 ≤ rest < 1` dyadic. A uniform 64-bit
/// word `w` decides at once when `w ≠ whole`; on `w = whole` (probability 2^-64) it recurses
/// on `rest`, so the probability is exactly `p` for every representable `p ∈ [0, 1]`.
#[derive(Clone, Copy, Debug)]
pub struct BernoulliThreshold {
    p: f64,
    whole: u128,
}

impl BernoulliThreshold {
    /// The probability it samples (exactly).
    pub fn probability(&self) -> f64 {
        self.p
    }
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::Value(format!(
                "a probability must lie in [0, 1], got {p}"
            )));
        }
        Ok(Self::new_unchecked(p))
    }

    fn new_unchecked(p: f64) -> Self {
        // p ≤ 1 ⇒ p·2^64 ≤ 2^64 fits u128; the product and the floor are exact in f64.
        let scaled = p * 18_446_744_073_709_551_616.0;
        let whole = scaled.floor() as u128;
        Self { p, whole }
    }

    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> bool {
        let w = rng.next_u64() as u128;
        if w != self.whole {
            return w < self.whole;
        }
        self.sample_rest(rng)
    }

    #[cold]
    fn sample_rest<R: Rng + ?Sized>(&self, rng: &mut R) -> bool {
        // rest = p·2^64 − whole is exact (both are multiples of the same power of two).
        let rest = self.p * 18_446_744_073_709_551_616.0 - self.whole as f64;
        rest > 0.0 && Self::new_unchecked(rest).sample(rng)
    }
}

/// Bernoulli(p) exactly for the binary value of `p` (see [`BernoulliThreshold`]).
pub fn bernoulli_f64<R: Rng + ?Sized>(rng: &mut R, p: f64) -> Result<bool> {
    Ok(BernoulliThreshold::new(p)?.sample(rng))
}

/// Binomial(n, 1/2) from the popcount of `n` random bits: exact, used up to this many trials.
const HALF_BY_BITS_MAX: u64 = 1024;

/// Binomial(n, p): the number of successes among `n` independent trials of probability `p`.
///
/// For `p = 1/2` and `n ≤ 1024` it is exact (the popcount of n random bits); otherwise it is
/// `rand_distr::Binomial` (inversion below `n·min(p, 1 − p) = 10`, else BTPE; Kachitvichyanukul
/// & Schmeiser 1988), exact in law up to its double-precision arithmetic (for `n > 2^53` the
/// lowest bits of the result are not random). `p` outside `(0, 1)` gives the degenerate
/// result (0 or n).
#[inline]
pub fn binomial<R: Rng + ?Sized>(rng: &mut R, n: u64, p: f64) -> u64 {
    if n == 0 || !(p > 0.0) {
        return 0;
    }
    if p >= 1.0 {
        return n;
    }
    if p == 0.5 && n <= HALF_BY_BITS_MAX {
        let mut left = n;
        let mut ones = 0u64;
        while left >= 64 {
            ones += rng.next_u64().count_ones() as u64;
            left -= 64;
        }
        if left > 0 {
            ones += (rng.next_u64() & ((1u64 << left) - 1)).count_ones() as u64;
        }
        return ones;
    }
    Binomial::new(n, p)
        .expect("0 < p < 1 is a valid binomial probability")
        .sample(rng)
}

/// Univariate hypergeometric variates with a parameter this small are drawn directly.
const SMALL_HYPERGEOMETRIC: u64 = 64;

/// Hypergeometric: marked items in a uniform sample of `draws` out of `population` items of
/// which `marked` are marked (`marked, draws ≤ population`). Exact by sequential draws when
/// the smaller parameter or the mode is small, else `rand_distr`'s H2PE (exact in law up to
/// its double-precision arithmetic, like [`binomial`]).
pub fn hypergeometric<R: Rng + ?Sized>(
    rng: &mut R,
    population: u64,
    marked: u64,
    draws: u64,
) -> u64 {
    debug_assert!(marked <= population && draws <= population);
    if draws == 0 || marked == 0 {
        return 0;
    }
    if marked == population {
        return draws;
    }
    if draws == population {
        return marked;
    }
    if marked > population - marked {
        return draws - hypergeometric(rng, population, population - marked, draws);
    }
    if draws > population - draws {
        return marked - hypergeometric(rng, population, marked, population - draws);
    }
    // Symmetric in (marked, draws): let a ≤ b, both ≤ population/2.
    let (a, b) = (marked.min(draws), marked.max(draws));
    let mode = (a as u128 + 1) * (b as u128 + 1) / (population as u128 + 2);
    if a <= SMALL_HYPERGEOMETRIC || mode < 16 {
        // Each of the a marked items in turn is in the sample with probability
        // (sample places left)/(items left). Cost O(a); with mode < 16, a < 4·√population.
        let mut hits = 0;
        for j in 0..a {
            if uniform_below_u64(rng, population - j) < b - hits {
                hits += 1;
            }
        }
        return hits;
    }
    // Mode ≥ 16 > 10: rand_distr uses H2PE (bounded set-up and expected cost).
    Hypergeometric::new(population, a, b)
        .expect("valid hypergeometric parameters")
        .sample(rng)
}

/// Counts at or below `DIRECT_PER_OUTPUT` users per output are spread by direct uniform draws
/// (one per user) rather than by halving (about two binomial draws per output reached).
const DIRECT_PER_OUTPUT: u64 = 2;

/// A Multinomial(`count`; uniform over `[start, start + len)`) draw: calls `emit(position,
/// users)` for positions that receive users (a position may be emitted more than once; the
/// users of its calls add up).
///
/// Recursive halving: the users of `[lo, hi)` split between its halves by
/// Binomial(count, left/len), exact in law because a multinomial's restriction to a part of
/// its cells, given the part's total, is again multinomial. Recursion stops where the count
/// is 0, so it costs `O(min(count·log len, len))` binomial draws; where there are at most
/// `DIRECT_PER_OUTPUT` users per position they are placed one by one with
/// [`uniform_below_u64`] instead (the same law, cheaper there).
pub fn spread_uniform<R: Rng + ?Sized>(
    rng: &mut R,
    start: u64,
    len: u64,
    count: u64,
    emit: &mut impl FnMut(u64, u64),
) {
    if count == 0 || len == 0 {
        return;
    }
    if len == 1 {
        emit(start, count);
        return;
    }
    if count <= len.saturating_mul(DIRECT_PER_OUTPUT) {
        for _ in 0..count {
            emit(start + uniform_below_u64(rng, len), 1);
        }
        return;
    }
    let left = len / 2;
    let to_left = if 2 * left == len {
        binomial(rng, count, 0.5)
    } else {
        binomial(rng, count, left as f64 / len as f64)
    };
    spread_uniform(rng, start, left, to_left, emit);
    spread_uniform(rng, start + left, len - left, count - to_left, emit);
}

/// Fill `out` in parallel: chunk `c` (of [`SAMPLE_CHUNK`] items) gets `stream(key, c)`.
///
/// `fill_chunk(rng, first_index, chunk)` must consume randomness only from `rng`; the result
/// is then independent of the thread count. Stops between chunks when interrupted
/// (`crate::interrupt`).
pub fn par_fill_chunks<T, F>(key: &Key, out: &mut [T], fill_chunk: F) -> Result<()>
where
    T: Send,
    F: Fn(&mut StreamRng, usize, &mut [T]) + Sync,
{
    out.par_chunks_mut(SAMPLE_CHUNK)
        .enumerate()
        .try_for_each(|(c, chunk)| {
            crate::interrupt::check()?;
            let mut rng = stream(key, c as u64);
            fill_chunk(&mut rng, c * SAMPLE_CHUNK, chunk);
            Ok(())
        })
}

/// `size` exact uniform draws from `[0, n)`, in parallel and reproducible.
pub fn sample_uniform(key: &Key, n: u64, size: usize) -> Result<Vec<u64>> {
    if n == 0 || n > 1 << 32 {
        return Err(Error::Value(format!("n must lie in [1, 2^32], got {n}")));
    }
    let mut out = crate::memory::zeroed_vec::<u64>(size, "the uniform sample")?;
    par_fill_chunks(key, &mut out, |rng, _, chunk| {
        for v in chunk.iter_mut() {
            *v = uniform_below(rng, n);
        }
    })?;
    Ok(out)
}

/// `size` exact Bernoulli(p) draws, in parallel and reproducible.
pub fn sample_bernoulli(key: &Key, p: f64, size: usize) -> Result<Vec<bool>> {
    let threshold = BernoulliThreshold::new(p)?;
    let mut out = crate::memory::zeroed_vec::<bool>(size, "the Bernoulli sample")?;
    par_fill_chunks(key, &mut out, |rng, _, chunk| {
        for v in chunk.iter_mut() {
            *v = threshold.sample(rng);
        }
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A generator that replays fixed words, to pin the samplers' arithmetic.
    struct Replay(Vec<u32>, usize);
    impl rand_core::TryRng for Replay {
        type Error = core::convert::Infallible;
        fn try_next_u32(&mut self) -> core::result::Result<u32, Self::Error> {
            self.1 += 1;
            Ok(self.0[self.1 - 1])
        }
        fn try_next_u64(&mut self) -> core::result::Result<u64, Self::Error> {
            let lo = self.try_next_u32()? as u64;
            let hi = self.try_next_u32()? as u64;
            Ok(lo | hi << 32)
        }
        fn try_fill_bytes(&mut self, _: &mut [u8]) -> core::result::Result<(), Self::Error> {
            unimplemented!()
        }
    }

    #[test]
    fn lemire_step_is_exactly_uniform_over_every_word() {
        // The same step on 8-bit words, enumerated: every n ≤ 256 gets each value equally often.
        for n in 1u64..=256 {
            let mut counts = vec![0u32; n as usize];
            for x in 0u64..256 {
                if let Some(v) = lemire_accept(x, n, 8) {
                    counts[v as usize] += 1;
                }
            }
            assert!(
                counts.iter().all(|&c| c == (256 / n) as u32),
                "n = {n}: {counts:?}"
            );
        }
    }

    #[test]
    fn uniform_below_rejects_the_biased_words() {
        // n = 3: 2^32 mod 3 = 1, so the one word whose low product is 0 is rejected.
        let mut rng = Replay(vec![0, 0x8000_0000], 0);
        assert_eq!(uniform_below(&mut rng, 3), 1);
        assert_eq!(rng.1, 2, "the word 0 must have been rejected");
    }

    #[test]
    fn uniform_below_counts_match_within_chi_square() {
        let mut rng = stream(&key_from_u64(7), 0);
        let n = 7u64;
        let draws = 700_000;
        let mut counts = [0f64; 7];
        for _ in 0..draws {
            counts[uniform_below(&mut rng, n) as usize] += 1.0;
        }
        let e = draws as f64 / n as f64;
        let chi2: f64 = counts.iter().map(|c| (c - e) * (c - e) / e).sum();
        assert!(
            chi2 < 22.46,
            "chi2 = {chi2} (df 6, p = 0.001 critical 22.46)"
        );
    }

    #[test]
    fn bernoulli_threshold_is_exact_at_the_boundaries() {
        let mut rng = stream(&key_from_u64(1), 0);
        let never = BernoulliThreshold::new(0.0).unwrap();
        let always = BernoulliThreshold::new(1.0).unwrap();
        for _ in 0..10_000 {
            assert!(!never.sample(&mut rng));
            assert!(always.sample(&mut rng));
        }
        assert!(BernoulliThreshold::new(1.5).is_err());
        assert!(BernoulliThreshold::new(f64::NAN).is_err());
    }

    #[test]
    fn bernoulli_threshold_handles_a_word_equal_to_the_threshold() {
        // p = 0.5: whole = 2^63. The word 2^63 ties; the remainder is 0, so the tie is false.
        let half = BernoulliThreshold::new(0.5).unwrap();
        let mut rng = Replay(vec![0, 0x8000_0000], 0);
        assert!(!half.sample(&mut rng));
        let mut rng = Replay(vec![0xFFFF_FFFF, 0x7FFF_FFFF], 0);
        assert!(half.sample(&mut rng));
    }

    #[test]
    fn bernoulli_rate_matches_p() {
        let key = key_from_u64(3);
        let draws = sample_bernoulli(&key, 0.3, 1_000_000).unwrap();
        let ones = draws.iter().filter(|&&b| b).count() as f64;
        let sd = (1e6 * 0.3 * 0.7f64).sqrt();
        assert!((ones - 3e5).abs() < 5.0 * sd, "ones = {ones}");
    }

    #[test]
    fn parallel_sampling_does_not_depend_on_the_thread_count() {
        let key = key_from_u64(11);
        let size = 3 * SAMPLE_CHUNK + 17;
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| sample_uniform(&key, 1000, size).unwrap());
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap()
            .install(|| sample_uniform(&key, 1000, size).unwrap());
        assert_eq!(one, four);
    }

    #[test]
    fn chunks_use_distinct_streams() {
        let key = key_from_u64(5);
        let s = sample_uniform(&key, 1 << 32, 2 * SAMPLE_CHUNK).unwrap();
        assert_ne!(s[..64], s[SAMPLE_CHUNK..SAMPLE_CHUNK + 64]);
    }
}
