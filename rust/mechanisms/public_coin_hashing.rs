//! ℓ-bit public-coin hashing with the two-stage estimator (Acharya, Kairouz, Liu & Sun,
//! "Estimating sparse discrete distributions under privacy and communication constraints",
//! ALT 2021, Section 3.1, eqs. (13)–(14), Lemmas 7–8; docs page Mechanisms › Sparse
//! estimation).
//!
//! **No privacy.** This is a communication-limited scheme, not a locally private one: a
//! report is a deterministic function of the user's value and public randomness, so it has
//! no ε (the type has no `epsilon` and does not implement `mechanisms::Estimator`, whose
//! interface is that of an ε-LDP channel). What it limits is the message: ℓ bits per user.
//!
//! # Hash family (normative)
//! User `i` (a public index the server assigns, e.g. a round-robin position) owns the hash
//! function `h_i: [0, k) → [0, 2^ℓ)`:
//!
//! * `(a_i, b_i)` are the first two 64-bit draws of the public ChaCha20 stream with key =
//!   the seed's 32 little-endian bytes and stream id (nonce) = `i` — exactly the stream that
//!   gives column `i` of a seeded sign matrix (`rng::public_stream`, README "Seeded sign
//!   matrices"): keystream words w0, w1, w2, w3 give `a_i = w0 + 2^32·w1`,
//!   `b_i = w2 + 2^32·w3`;
//! * `h_i(x) = ((a_i·x + b_i) mod 2^64) >> (64 − ℓ)`.
//!
//! This is Dietzfelbinger's multiply-add-shift scheme (Dietzfelbinger 1996, "Universal
//! hashing and k-wise independent random variables via integer arithmetic without primes";
//! Thorup 2015, "High speed hashing for integers and strings", §3.3): for keys `x < 2^w` and
//! `a, b` uniform in `[0, 2^w̄)`, `((a x + b) mod 2^w̄) >> (w̄ − ℓ)` is *strongly universal*
//! (pairwise independent: for `x ≠ x'`, `(h(x), h(x'))` is exactly uniform on
//! `[0, 2^ℓ)²`) whenever `w̄ ≥ w + ℓ − 1`. Here `w̄ = 64`, `w = 32` (k ≤ 2^32), ℓ ≤ 31.
//! The PRF (ChaCha20) stands in for uniform `(a_i, b_i)`; tests/test_public_coin_hashing.py
//! checks the family exhaustively on a scaled-down word size, the library against test
//! vectors computed with the independent tests/chacha_reference.py, and the uniformity and
//! pairwise independence of the real family with chi-square tests.
//!
//! The paper assumes fully independent random hash functions (Lemma 7's proof uses that the
//! `M(x)` of values inside and outside the support are independent); the family guarantees
//! pairwise independence only. Unbiasedness (below) needs no more than pairwise
//! independence; the concentration of Lemma 7 is not proved for this family.
//!
//! # Client and report format
//! User i with value x sends the ℓ-bit message `y_i = h_i(x)`; there is no client
//! randomness. The report travels with the user's index: one u64 `r = (i << ℓ) | y_i`, so
//! `i < 2^(64 − ℓ)` (larger indices are refused). Every u64 decodes to some `(i, y)`; a report
//! is malformed only in a wider integer type (negative), which the Python layer handles.
//!
//! # Stages
//! Stage 1 = users with even i, stage 2 = odd i: data-independent and balanced, which is all
//! the paper's "first n/2 / second n/2 messages" needs (independence of the stage from the
//! data and from the hashes).
//!
//! # Aggregate
//! The statistic has `2k + 1` counts: `M(x) = #{stage-1 users: h_i(x) = y_i}` at `[0, k)`,
//! `N(x)` likewise for stage 2 at `[k, 2k)`, and `n2` (stage-2 users) at `2k`; n (all users)
//! is the aggregator's. Aggregates of disjoint user sets add.
//!
//! With `b(x) = P(h_i(x) = y_i) = p_x(1 − 2^−ℓ) + 2^−ℓ` (eq. (13); exact for any value
//! distribution because the family is strongly universal: a user with value `x' ≠ x` collides
//! with probability exactly 2^−ℓ), `E[M(x) + N(x)] = n·b(x)`.
//!
//! # Kernel
//! The server evaluates `h_i(x)` for every (user, value): `n·k` evaluations. `h_i(x) = y_i`
//! iff `(a_i·x + c_i) mod 2^64 < 2^(64−ℓ)` with `c_i = b_i − y_i·2^(64−ℓ)` (the difference
//! of two numbers of `[y·2^s, (y+1)·2^s)` cannot wrap), so a comparison against one
//! threshold replaces shift-and-compare. Users are processed in blocks of [`USER_BLOCK`]:
//! their `(a_i, c_i)` are decoded once into a bounded buffer (stage-1 users first), then the
//! values are cut into ranges, one rayon task per range; a task owns the counts of its range,
//! so there are no per-thread copies and the integer counts do not depend on the thread
//! count. Within a task, a tile of consecutive values keeps its counters in vector registers
//! while the block's users stream through, branch-free: on x86-64 with AVX2, 48 values per
//! tile whose lanes start at `a·(x0 + l) + c` and advance by `8a`, so each evaluation is one
//! add, one compare and one counter update (`avx2`); elsewhere a portable kernel of 64
//! values computes `a·x + c` directly (vectorized by the compiler, AVX-512 when present,
//! `simd`). Interruption is checked before every block and every task; the counts are added
//! (checked, all or nothing) only at the end.
//!
//! # Estimators
//! * Generic decoders use the pooled unbiased estimate
//!   `p̃(x) = (2^ℓ (M + N)(x)/n − 1)/(2^ℓ − 1)`: a symmetric estimator with `high = 1`,
//!   `low = 2^−ℓ` (`SymmetricEstimator`), whose channel products act on the pooled counts
//!   (length k).
//! * The two-stage estimator (eq. (14)): `T` = the `min(2s, k)` values with the largest
//!   `M(x)` (ties to the lower index), `p̂(x) = (2^ℓ N(x)/n2 − 1)/(2^ℓ − 1)` on T, 0 elsewhere.
//!   It needs users in both stages.
//!
//! # Simulation (ideal hash model)
//! `simulate(true_counts)` draws the aggregate of `n = Σ N_x` users with indices `0..n` in a
//! uniformly random order, under *fully independent uniform* hash functions (the paper's
//! model, not the pairwise family). Stage 1 then holds a uniform random subset of
//! `n1 = ⌈n/2⌉` users, so the stage-1 counts per value `N1_x` are multivariate
//! hypergeometric (drawn as a chain of univariate hypergeometric variates: over chunks of
//! values by recursive halving on one stream, then value by value within a chunk).
//! Given the split, user i with value `x_i` matches its own value, and for `x ≠ x_i` the
//! indicators `[h_i(x) = h_i(x_i)]` are independent Bernoulli(2^−ℓ) across users and across
//! values (a fully random `h_i` has independent uniform values `h_i(x)`, independent of
//! `y_i = h_i(x_i)`). Hence `M(x) = N1_x + Binomial(n1 − N1_x, 2^−ℓ)`,
//! `N(x) = N2_x + Binomial(n2 − N2_x, 2^−ℓ)`, independent across x and between the stages
//! given the split. Cost O(k), independent of n (at most [`MAX_SIMULATED_USERS`] = 2^36
//! users: the hypergeometric sampler is not reliable beyond). This is exact in law under ideal hashing
//! (up to the double-precision arithmetic of the binomial and hypergeometric samplers,
//! `rng`), not for the multiply-add-shift family, whose `M(x)` share each user's `(a_i, b_i)`
//! across x: their means are the same, their joint law is not.
//!
//! Streams: the chunk split uses the simulation stream `(OwnSets, 0)`, chunk c of
//! `SIMULATION_VALUES` values the stream `(OwnCounts, c)` (`mechanisms::simulation_stream`).

use super::{
    simulation_stream, simulation_users, Operation, SimulationPhase, SymmetricEstimator,
    SIMULATION_VALUES,
};
use crate::error::{Error, Result};
use crate::memory::{allocate_zeroed, Footprint};
use crate::rng::{binomial, hypergeometric, public_stream, Key, StreamRng, SAMPLE_CHUNK};
use crate::simd::multiversion;
use rand_core::Rng;
use rayon::prelude::*;

/// Bits per message: ℓ ∈ [MIN_BITS, MAX_BITS] (multiply-add-shift with 64-bit words and
/// 32-bit keys is strongly universal for ℓ ≤ 33; 31 keeps `2^ℓ` and the reports comfortable).
pub const MIN_BITS: u32 = 1;
pub const MAX_BITS: u32 = 31;

/// Largest domain: keys must be below 2^32 for the family to be strongly universal.
pub const MAX_DOMAIN: u64 = 1 << 32;

/// Users decoded per block of aggregation: their `(a, c)` (256 KiB) stay in L2 while every
/// task streams through them.
pub const USER_BLOCK: usize = 1 << 14;

/// Most users [`PublicCoinHashing::simulate`] accepts: its stage split draws hypergeometric
/// variates over populations of up to n users, and `rand_distr`'s sampler (H2PE in double
/// precision) is not reliable on huge populations (numpy caps its own at 2^30 per class for
/// the same reason; rand_distr hangs above about 2^50, rust-random/rand_distr#35).
pub const MAX_SIMULATED_USERS: u64 = 1 << 36;

/// Values held in registers at once by the portable counting kernel (8 vectors of 8 u64
/// counters; the AVX2 kernel's tile is 48 values, `avx2::TILE`).
pub const TILE: usize = 64;

/// Value ranges of the aggregation tasks are multiples of this (whole tiles of both kernels).
const TASK_ALIGN: usize = 192;

/// Where user indices come from in [`PublicCoinHashing::privatize`].
#[derive(Clone, Copy, Debug)]
pub enum Users<'a> {
    /// Consecutive indices `first, first + 1, …` (position u gets `first + u`).
    From(u64),
    /// One explicit index per value.
    Listed(&'a [u64]),
}

#[derive(Clone, Debug)]
pub struct PublicCoinHashing {
    k: u64,
    bits: u32,
    key: Key,
    /// The key as the eight little-endian words of the ChaCha20 state.
    key_words: [u32; 8],
}

/// The hash of `x` under `(a, b)`: `((a·x + b) mod 2^64) >> shift`.
#[inline(always)]
pub fn hash_with(a: u64, b: u64, x: u64, shift: u32) -> u64 {
    a.wrapping_mul(x).wrapping_add(b) >> shift
}

impl PublicCoinHashing {
    /// ℓ-bit public-coin hashing of values in `[0, k)` with the public key `key` (the seed's
    /// 32 little-endian bytes).
    pub fn new(k: u64, bits: u32, key: Key) -> Result<Self> {
        if !(2..=MAX_DOMAIN).contains(&k) {
            return Err(Error::Value(format!(
                "k (the number of possible values) must lie in [2, 2^32], got {k}"
            )));
        }
        if !(MIN_BITS..=MAX_BITS).contains(&bits) {
            return Err(Error::Value(format!(
                "bits (ℓ, the message length) must lie in [{MIN_BITS}, {MAX_BITS}], got {bits}"
            )));
        }
        let mut key_words = [0u32; 8];
        for (w, bytes) in key_words.iter_mut().zip(key.chunks_exact(4)) {
            *w = u32::from_le_bytes(bytes.try_into().expect("4 bytes"));
        }
        Ok(Self {
            k,
            bits,
            key,
            key_words,
        })
    }

    pub fn k(&self) -> u64 {
        self.k
    }

    /// ℓ, bits per message.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    /// `64 − ℓ`: the hash keeps the top ℓ bits.
    fn shift(&self) -> u32 {
        64 - self.bits
    }

    /// Number of distinct messages, `2^ℓ`.
    pub fn messages(&self) -> u64 {
        1 << self.bits
    }

    /// User indices lie in `[0, 2^(64 − ℓ))` (they share the report's u64 with the message).
    pub fn max_users(&self) -> u64 {
        1 << (64 - self.bits)
    }

    /// Length of the aggregate: `M` (k), `N` (k) and `n2`.
    pub fn statistic_size(&self) -> u64 {
        2 * self.k + 1
    }

    /// `(a_i, b_i)` of user i (module documentation, "Hash family").
    #[inline]
    pub fn hash_parameters(&self, user: u64) -> (u64, u64) {
        let mut rng = public_stream(&self.key, user);
        let a = rng.next_u64();
        (a, rng.next_u64())
    }

    /// `(a_i, b_i)` of every user of `users` into `a`, `b` (same length): the same words as
    /// [`Self::hash_parameters`], computed [`CHACHA_BATCH`] users at a time by
    /// `chacha20_first_words`.
    pub fn hash_parameters_into(&self, users: &[u64], a: &mut [u64], b: &mut [u64]) {
        assert!(users.len() == a.len() && users.len() == b.len());
        for ((users, a), b) in users
            .chunks(CHACHA_BATCH)
            .zip(a.chunks_mut(CHACHA_BATCH))
            .zip(b.chunks_mut(CHACHA_BATCH))
        {
            let mut nonces = [0u64; CHACHA_BATCH];
            nonces[..users.len()].copy_from_slice(users);
            let (mut wa, mut wb) = ([0u64; CHACHA_BATCH], [0u64; CHACHA_BATCH]);
            chacha20_first_words(&self.key_words, &nonces, &mut wa, &mut wb);
            a.copy_from_slice(&wa[..a.len()]);
            b.copy_from_slice(&wb[..b.len()]);
        }
    }

    /// `h_i(x)`.
    pub fn hash(&self, user: u64, x: u64) -> u64 {
        let (a, b) = self.hash_parameters(user);
        hash_with(a, b, x, self.shift())
    }

    /// The report of user i with message y: `(i << ℓ) | y`.
    pub fn report(&self, user: u64, message: u64) -> u64 {
        debug_assert!(user < self.max_users() && message < self.messages());
        user << self.bits | message
    }

    /// `(i, y)` of a report.
    pub fn decode(&self, report: u64) -> (u64, u64) {
        (report >> self.bits, report & (self.messages() - 1))
    }

    fn check_values(&self, values: &[u32]) -> Result<()> {
        if self.k >= MAX_DOMAIN {
            return Ok(());
        }
        if let Some(i) = values.par_iter().position_first(|&v| v as u64 >= self.k) {
            return Err(Error::Value(format!(
                "values must lie in [0, {}): values[{i}] = {}",
                self.k, values[i]
            )));
        }
        Ok(())
    }

    fn check_users(&self, users: Users<'_>, n: usize) -> Result<()> {
        let max = self.max_users();
        match users {
            Users::From(first) => {
                if n > 0 && first.checked_add(n as u64).is_none_or(|end| end > max) {
                    return Err(Error::Value(format!(
                        "user indices first_user + position run up to {first} + {} = {}, but \
                         with bits = {} they must be below 2^{} = {max} (the report (i << bits) \
                         | y is one u64)",
                        n - 1,
                        first as u128 + n as u128 - 1,
                        self.bits,
                        64 - self.bits
                    )));
                }
            }
            Users::Listed(list) => {
                if list.len() != n {
                    return Err(Error::Value(format!(
                        "users must hold one index per value: {} indices for {n} values",
                        list.len()
                    )));
                }
                if let Some(u) = list.par_iter().position_first(|&i| i >= max) {
                    return Err(Error::Value(format!(
                        "users[{u}] = {} is out of range: with bits = {} user indices must be \
                         below 2^{} = {max} (the report (i << bits) | y is one u64)",
                        list[u],
                        self.bits,
                        64 - self.bits
                    )));
                }
            }
        }
        Ok(())
    }

    /// The reports of `values` (one per user) into `out`: `(i << ℓ) | h_i(x)`, in parallel
    /// (chunks of `SAMPLE_CHUNK` users, interruptible between chunks). Deterministic: no
    /// randomness beyond the public key.
    pub fn privatize(&self, values: &[u32], users: Users<'_>, out: &mut [u64]) -> Result<()> {
        assert_eq!(values.len(), out.len(), "one report per value");
        self.check_values(values)?;
        self.check_users(users, values.len())?;
        let shift = self.shift();
        out.par_chunks_mut(SAMPLE_CHUNK)
            .enumerate()
            .try_for_each(|(c, chunk)| {
                crate::interrupt::check()?;
                let first = c * SAMPLE_CHUNK;
                for (g, group) in chunk.chunks_mut(CHACHA_BATCH).enumerate() {
                    let start = first + g * CHACHA_BATCH;
                    let mut ids = [0u64; CHACHA_BATCH];
                    for (j, id) in ids[..group.len()].iter_mut().enumerate() {
                        *id = match users {
                            Users::From(from) => from + (start + j) as u64,
                            Users::Listed(list) => list[start + j],
                        };
                    }
                    let (mut a, mut b) = ([0u64; CHACHA_BATCH], [0u64; CHACHA_BATCH]);
                    chacha20_first_words(&self.key_words, &ids, &mut a, &mut b);
                    for (j, o) in group.iter_mut().enumerate() {
                        let x = values[start + j] as u64;
                        *o = ids[j] << self.bits | hash_with(a[j], b[j], x, shift);
                    }
                }
                Ok(())
            })
    }

    /// `h_user(x)` for every x of `values` (the deterministic channel of one user).
    pub fn hashes(&self, user: u64, values: &[u32], out: &mut [u64]) -> Result<()> {
        assert_eq!(values.len(), out.len(), "one hash per value");
        self.check_values(values)?;
        let (a, b) = self.hash_parameters(user);
        let shift = self.shift();
        out.iter_mut()
            .zip(values)
            .for_each(|(o, &x)| *o = hash_with(a, b, x as u64, shift));
        Ok(())
    }

    /// What [`Self::aggregate`] allocates for `reports` reports: the added counts (`2k + 1`)
    /// and one block's buffers (the reports in stage order and their `(a, c)`).
    pub fn aggregation_footprint(&self, reports: u64) -> Footprint {
        let block = reports.min(USER_BLOCK as u64);
        Footprint::new(format!(
            "PublicCoinHashing aggregation of {reports} reports"
        ))
        .add("the counts to add (2k + 1)", self.statistic_size(), 8)
        .add("a block of decoded users (report, a, c)", block, 24)
        .hint("lower k (the aggregate has 2k + 1 counts)")
    }

    /// Add the statistic of `reports` to `counts` (length `2k + 1`; module documentation,
    /// "Aggregate" and "Kernel"). All or nothing: on an error (memory, an interruption, a count
    /// that would pass 2^64 − 1) `counts` is left as it was.
    pub fn aggregate(&self, reports: &[u64], counts: &mut [u64]) -> Result<()> {
        let size = self.statistic_size() as usize;
        if counts.len() != size {
            return Err(Error::Value(format!(
                "counts must have length 2k + 1 = {size}, got {}",
                counts.len()
            )));
        }
        self.aggregation_footprint(reports.len() as u64).check()?;
        let k = self.k as usize;
        let mut added = allocate_zeroed::<u64>(size, "the counts to add (2k + 1)")?;
        let block = reports.len().min(USER_BLOCK);
        let mut ordered = allocate_zeroed::<u64>(block, "a block of reports in stage order")?;
        let mut a = allocate_zeroed::<u64>(block, "a block of multipliers")?;
        let mut c = allocate_zeroed::<u64>(block, "a block of offsets")?;
        let shift = self.shift();
        let threshold = 1u64 << shift;
        // Values per task: several tasks per thread (a thread descheduled by other processes
        // delays the block by one short task), whole tiles.
        let tasks = 8 * rayon::current_num_threads();
        let span = k.div_ceil(tasks).div_ceil(TASK_ALIGN).max(1) * TASK_ALIGN;
        let mut stage2 = 0u64;
        for part in reports.chunks(USER_BLOCK) {
            crate::interrupt::check()?;
            // Stage 1 (even i) first, then stage 2 (odd i), each in report order.
            let stage1 = part.iter().filter(|&&r| (r >> self.bits) & 1 == 0).count();
            let (mut first, mut second) = (0, stage1);
            for &r in part {
                if (r >> self.bits) & 1 == 0 {
                    ordered[first] = r;
                    first += 1;
                } else {
                    ordered[second] = r;
                    second += 1;
                }
            }
            stage2 += (part.len() - stage1) as u64;
            let len = part.len();
            a[..len]
                .par_chunks_mut(1 << 11)
                .zip(c[..len].par_chunks_mut(1 << 11))
                .zip(ordered[..len].par_chunks(1 << 11))
                .for_each(|((a, c), r)| {
                    for ((a, c), r) in a
                        .chunks_mut(CHACHA_BATCH)
                        .zip(c.chunks_mut(CHACHA_BATCH))
                        .zip(r.chunks(CHACHA_BATCH))
                    {
                        let mut ids = [0u64; CHACHA_BATCH];
                        for (id, &r) in ids.iter_mut().zip(r) {
                            *id = r >> self.bits;
                        }
                        let (mut wa, mut wb) = ([0u64; CHACHA_BATCH], [0u64; CHACHA_BATCH]);
                        chacha20_first_words(&self.key_words, &ids, &mut wa, &mut wb);
                        for (j, &r) in r.iter().enumerate() {
                            let message = r & (self.messages() - 1);
                            a[j] = wa[j];
                            c[j] = wb[j].wrapping_sub(message << shift);
                        }
                    }
                });
            let (a1, a2) = a[..len].split_at(stage1);
            let (c1, c2) = c[..len].split_at(stage1);
            let (m, rest) = added.split_at_mut(k);
            m.par_chunks_mut(span)
                .zip(rest[..k].par_chunks_mut(span))
                .enumerate()
                .try_for_each(|(t, (m, n))| {
                    crate::interrupt::check()?;
                    let x0 = (t * span) as u64;
                    count_matches(a1, c1, x0, threshold, m);
                    count_matches(a2, c2, x0, threshold, n);
                    Ok::<(), Error>(())
                })?;
        }
        added[2 * k] = stage2;
        if let Some(j) = (0..size).find(|&j| counts[j].checked_add(added[j]).is_none()) {
            return Err(Error::Value(format!(
                "count {j} would exceed 2^64 − 1; refused (the counts were left unchanged)"
            )));
        }
        counts.iter_mut().zip(&added).for_each(|(c, a)| *c += a);
        Ok(())
    }

    /// `(n1, n2)`, checked against the aggregate: `n2 ≤ n`.
    fn stage_sizes(&self, counts: &[u64], n: u64) -> Result<(u64, u64)> {
        let size = self.statistic_size() as usize;
        if counts.len() != size {
            return Err(Error::Value(format!(
                "counts must have length 2k + 1 = {size}, got {}",
                counts.len()
            )));
        }
        let n2 = counts[size - 1];
        if n2 > n {
            return Err(Error::Value(format!(
                "the aggregate holds n2 = {n2} stage-2 users, more than n = {n}"
            )));
        }
        Ok((n - n2, n2))
    }

    /// The estimator algebra of the pooled counts `M + N` (module documentation).
    pub fn symmetric(&self) -> SymmetricEstimator {
        SymmetricEstimator {
            high: 1.0,
            low: 1.0 / self.messages() as f64,
        }
    }

    /// The pooled unbiased estimate `(2^ℓ (M + N)(x)/n − 1)/(2^ℓ − 1)` from the aggregate of
    /// `n > 0` users.
    pub fn estimate_raw(&self, counts: &[u64], n: u64) -> Result<Vec<f64>> {
        self.stage_sizes(counts, n)?;
        if n == 0 {
            return Err(Error::Value(
                "there are no reports to estimate from (n = 0)".into(),
            ));
        }
        let k = self.k as usize;
        let mut freq = crate::memory::zeroed_vec::<f64>(k, "the estimate")?;
        freq.iter_mut()
            .zip(&counts[..k])
            .zip(&counts[k..2 * k])
            .for_each(|((f, &m), &nn)| *f = (m as f64 + nn as f64) / n as f64);
        let sym = self.symmetric();
        let gap = sym.high - sym.low;
        freq.iter_mut().for_each(|f| *f = (*f - sym.low) / gap);
        Ok(freq)
    }

    /// The unbiased estimate from expected pooled frequencies `E[(M + N)(x)]/n` (length k).
    pub fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
        self.symmetric().estimate_from_frequencies(freq)
    }

    /// `E[(M + N)(x)]/n = 2^−ℓ Σp + (1 − 2^−ℓ) p_x` (length k).
    pub fn expected_frequencies(&self, dist: &[f64]) -> Vec<f64> {
        self.symmetric().apply(dist)
    }

    /// The adjoint of [`Self::expected_frequencies`] (the same symmetric map).
    pub fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        self.symmetric().apply(w)
    }

    /// The two-stage estimate of eq. (14) (module documentation, "Estimators"): the top
    /// `min(2s, k)` values by `M` (ties to the lower index), `(2^ℓ N(x)/n2 − 1)/(2^ℓ − 1)` on
    /// them, 0 elsewhere. Needs users in both stages.
    pub fn two_stage_estimate(&self, counts: &[u64], n: u64, sparsity: u64) -> Result<Vec<f64>> {
        let k = self.k as usize;
        if !(1..=self.k).contains(&sparsity) {
            return Err(Error::Value(format!(
                "sparsity must lie in [1, k = {}], got {sparsity}",
                self.k
            )));
        }
        let (n1, n2) = self.stage_sizes(counts, n)?;
        if n2 == 0 || n1 == 0 {
            let (which, parity) = if n2 == 0 { (2, "odd") } else { (1, "even") };
            return Err(Error::Value(format!(
                "the two-stage estimate needs users in both stages, but stage {which} ({parity} \
                 user indices) has none (n1 = {n1}, n2 = {n2})"
            )));
        }
        self.footprint(Operation::Estimate).check()?;
        let m = &counts[..k];
        let keep = (2 * sparsity).min(self.k) as usize;
        let mut order = crate::memory::allocate_zeroed::<u32>(k, "the value order")?;
        order
            .iter_mut()
            .enumerate()
            .for_each(|(x, o)| *o = x as u32);
        let larger_first = |&a: &u32, &b: &u32| m[b as usize].cmp(&m[a as usize]).then(a.cmp(&b));
        if keep < k {
            order.select_nth_unstable_by(keep, larger_first);
        }
        let mut estimate = allocate_zeroed::<f64>(k, "the estimate")?;
        let scale = self.messages() as f64;
        for &x in &order[..keep] {
            let f = counts[k + x as usize] as f64 / n2 as f64;
            estimate[x as usize] = (scale * f - 1.0) / (scale - 1.0);
        }
        Ok(estimate)
    }

    /// The aggregate of privatizing `true_counts[x]` users of each value x (indices `0..n` in
    /// a uniformly random order), exact in law under fully independent hash functions
    /// (module documentation, "Simulation"). O(k), whatever n.
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        let n = simulation_users(self.k, true_counts)?;
        if n > MAX_SIMULATED_USERS {
            return Err(Error::Value(format!(
                "simulate draws the stage split of {n} users with hypergeometric variates, \
                 which are reliable only up to 2^36 = {MAX_SIMULATED_USERS} users (rand_distr's \
                 sampler loses precision on larger populations and hangs above about 2^50, \
                 rust-random/rand_distr#35); simulate at most that many users"
            )));
        }
        self.footprint(Operation::Simulate { users: n }).check()?;
        let k = self.k as usize;
        let (n1, n2) = (n.div_ceil(2), n / 2);
        let chunks = k.div_ceil(SIMULATION_VALUES);
        let mut users = allocate_zeroed::<u64>(chunks, "users per chunk of values")?;
        let mut slots = allocate_zeroed::<u64>(chunks, "stage-1 users per chunk of values")?;
        for (u, chunk) in users.iter_mut().zip(true_counts.chunks(SIMULATION_VALUES)) {
            *u = chunk.iter().sum(); // ≤ n: no overflow
        }
        let mut rng = simulation_stream(key, SimulationPhase::OwnSets, 0);
        split_stage_one(&mut rng, &users, &mut slots, 0, chunks, n, n1);
        let mut out = allocate_zeroed::<u64>(2 * k + 1, "the simulated counts")?;
        out[2 * k] = n2;
        let beta = 1.0 / self.messages() as f64;
        let (m, rest) = out.split_at_mut(k);
        m.par_chunks_mut(SIMULATION_VALUES)
            .zip(rest[..k].par_chunks_mut(SIMULATION_VALUES))
            .zip(true_counts.par_chunks(SIMULATION_VALUES))
            .enumerate()
            .try_for_each(|(c, ((m, nn), counts))| {
                crate::interrupt::check()?;
                let mut rng = simulation_stream(key, SimulationPhase::OwnCounts, c as u64);
                let (mut left, mut places) = (users[c], slots[c]);
                for ((m, nn), &count) in m.iter_mut().zip(nn.iter_mut()).zip(counts) {
                    let first = hypergeometric(&mut rng, left, count, places);
                    left -= count;
                    places -= first;
                    let second = count - first;
                    *m = first + binomial(&mut rng, n1 - first, beta);
                    *nn = second + binomial(&mut rng, n2 - second, beta);
                }
                Ok::<(), Error>(())
            })?;
        Ok(out)
    }

    /// The buffers of a server-side operation: estimates hold the result (k floats) and, for
    /// the two-stage estimate, the value order (k u32); channel products one vector of k;
    /// a simulation the result (`2k + 1` counts) and two counts per chunk of values.
    pub fn footprint(&self, op: Operation) -> Footprint {
        let name = "PublicCoinHashing";
        match op {
            Operation::Estimate => Footprint::new(format!("{name} estimate"))
                .add("the estimate", self.k, 8)
                .add("the value order", self.k, 4),
            Operation::ChannelProduct => {
                Footprint::new(format!("{name} channel product")).add("the result", self.k, 8)
            }
            Operation::Simulate { .. } => Footprint::new(format!("{name} simulate"))
                .add("the simulated counts (2k + 1)", self.statistic_size(), 8)
                .add(
                    "users per chunk of values",
                    2 * self.k.div_ceil(SIMULATION_VALUES as u64),
                    8,
                )
                .hint("lower k (the simulation's memory is proportional to k, not to n)"),
        }
    }
}

/// Users per call of `chacha20_first_words`.
pub const CHACHA_BATCH: usize = 16;

/// The ChaCha20 input constants, "expand 32-byte k" as little-endian words.
const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// The ChaCha quarter round on rows a, b, c, d of [`CHACHA_BATCH`] states (lane l = stream l).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // lanes of four rows, indexed alike
fn quarter_round(x: &mut [[u32; CHACHA_BATCH]; 16], a: usize, b: usize, c: usize, d: usize) {
    for l in 0..CHACHA_BATCH {
        x[a][l] = x[a][l].wrapping_add(x[b][l]);
        x[d][l] = (x[d][l] ^ x[a][l]).rotate_left(16);
    }
    for l in 0..CHACHA_BATCH {
        x[c][l] = x[c][l].wrapping_add(x[d][l]);
        x[b][l] = (x[b][l] ^ x[c][l]).rotate_left(12);
    }
    for l in 0..CHACHA_BATCH {
        x[a][l] = x[a][l].wrapping_add(x[b][l]);
        x[d][l] = (x[d][l] ^ x[a][l]).rotate_left(8);
    }
    for l in 0..CHACHA_BATCH {
        x[c][l] = x[c][l].wrapping_add(x[d][l]);
        x[b][l] = (x[b][l] ^ x[c][l]).rotate_left(7);
    }
}

multiversion! {
    /// The first four keystream words of block 0 of the ChaCha20 streams `(key, nonce)` for
    /// [`CHACHA_BATCH`] nonces at once, as `a = w0 + 2^32·w1`, `b = w2 + 2^32·w3`: exactly the
    /// first two 64-bit draws of `rng::public_stream(key, nonce)` (Bernstein's layout: block
    /// counter 0 in words 12–13, nonce in 14–15; 20 rounds, then the input added back). The
    /// generic stream computes four 64-byte blocks to hand out two words; this computes the
    /// one block needed, 16 streams per vector lane group (tested equal to `public_stream`).
    fn chacha20_first_words(
        key: &[u32; 8],
        nonces: &[u64; CHACHA_BATCH],
        a: &mut [u64; CHACHA_BATCH],
        b: &mut [u64; CHACHA_BATCH],
    ) {
        let mut x = [[0u32; CHACHA_BATCH]; 16];
        for (row, &word) in x.iter_mut().zip(SIGMA.iter().chain(key)) {
            *row = [word; CHACHA_BATCH];
        }
        for l in 0..CHACHA_BATCH {
            x[14][l] = nonces[l] as u32;
            x[15][l] = (nonces[l] >> 32) as u32;
        }
        for _ in 0..10 {
            quarter_round(&mut x, 0, 4, 8, 12);
            quarter_round(&mut x, 1, 5, 9, 13);
            quarter_round(&mut x, 2, 6, 10, 14);
            quarter_round(&mut x, 3, 7, 11, 15);
            quarter_round(&mut x, 0, 5, 10, 15);
            quarter_round(&mut x, 1, 6, 11, 12);
            quarter_round(&mut x, 2, 7, 8, 13);
            quarter_round(&mut x, 3, 4, 9, 14);
        }
        for l in 0..CHACHA_BATCH {
            let w = |i: usize| x[i][l].wrapping_add(SIGMA[i]) as u64;
            a[l] = w(0) | w(1) << 32;
            b[l] = w(2) | w(3) << 32;
        }
    }
}

/// Split `slots` stage-1 places among the `users` of chunks `[first, first + len)` (which
/// hold `total` users): the places among the first half's users are hypergeometric, then
/// each half recursively. Writes the leaves into `out`.
fn split_stage_one(
    rng: &mut StreamRng,
    users: &[u64],
    out: &mut [u64],
    first: usize,
    len: usize,
    total: u64,
    slots: u64,
) {
    if len == 0 {
        return;
    }
    if len == 1 {
        out[first] = slots;
        return;
    }
    let half = len / 2;
    let left: u64 = users[first..first + half].iter().sum();
    let to_left = hypergeometric(rng, total, left, slots);
    split_stage_one(rng, users, out, first, half, left, to_left);
    split_stage_one(
        rng,
        users,
        out,
        first + half,
        len - half,
        total - left,
        slots - to_left,
    );
}

/// `out[j] += #{u : (a[u]·(x0 + j) + c[u]) mod 2^64 < threshold}` (module documentation,
/// "Kernel"): the AVX2 kernel where the CPU has AVX2, else the portable one.
fn count_matches(a: &[u64], c: &[u64], x0: u64, threshold: u64, out: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, the only feature the kernel is compiled for.
        unsafe { avx2::count_matches(a, c, x0, threshold, out) };
        return;
    }
    count_matches_portable(a, c, x0, threshold, out)
}

multiversion! {
    /// The portable kernel, tile by tile of [`TILE`] values: per user and value one multiply,
    /// one add, one compare and one counter update, vectorized along the values.
    fn count_matches_portable(a: &[u64], c: &[u64], x0: u64, threshold: u64, out: &mut [u64]) {
        let mut start = 0;
        while start < out.len() {
            let tile = count_tile(a, c, x0 + start as u64, threshold);
            let end = (start + TILE).min(out.len());
            out[start..end]
                .iter_mut()
                .zip(&tile)
                .for_each(|(o, t)| *o += t);
            start = end;
        }
    }
}

/// The counts of one tile of [`TILE`] values from `x0` (values past the output are computed
/// and discarded by the caller), counters in vector registers while the users stream through.
#[inline(always)]
fn count_tile(a: &[u64], c: &[u64], x0: u64, threshold: u64) -> [u64; TILE] {
    let mut counts = [0u64; TILE];
    let mut xs = [0u64; TILE];
    for (t, x) in xs.iter_mut().enumerate() {
        *x = x0 + t as u64;
    }
    for (&a, &c) in a.iter().zip(c) {
        for (count, &x) in counts.iter_mut().zip(&xs) {
            *count += (a.wrapping_mul(x).wrapping_add(c) < threshold) as u64;
        }
    }
    counts
}

/// The AVX2 kernel. Per user, lanes hold `w = a·x + c` for 4 consecutive values, biased by
/// 2^63 (adding 2^63 mod 2^64 flips the top bit, so an unsigned `w < threshold` is the signed
/// `w ⊕ 2^63 < threshold ⊕ 2^63`, which AVX2's `vpcmpgtq` computes); two chains of lanes
/// advance by `8a`, so each evaluation is one add, one compare and one subtraction of the
/// compare mask (−1) from its counter. A tile of [`avx2::TILE`] values keeps 12 vectors of
/// counters in registers while the block's users stream through; no multiplication in the
/// inner loop. (The multiply form above needs AVX-512DQ's `vpmullq` to vectorize well: on
/// AVX2 alone it runs at about a third of this kernel's speed.)
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Values per tile: 12 vectors of 4 counters.
    pub const TILE: usize = 48;
    const GROUPS: usize = TILE / 4;
    const BIAS: u64 = 1 << 63;

    /// See `count_matches` (the caller checks that the CPU has AVX2).
    #[target_feature(enable = "avx2")]
    pub unsafe fn count_matches(a: &[u64], c: &[u64], x0: u64, threshold: u64, out: &mut [u64]) {
        let mut start = 0;
        while start < out.len() {
            let end = (start + TILE).min(out.len());
            // SAFETY: AVX2 is enabled for this function and its caller.
            unsafe { count_tile(a, c, x0 + start as u64, threshold, &mut out[start..end]) };
            start = end;
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn count_tile(a: &[u64], c: &[u64], x0: u64, threshold: u64, out: &mut [u64]) {
        let limit = _mm256_set1_epi64x((threshold ^ BIAS) as i64);
        let mut counts = [_mm256_setzero_si256(); GROUPS];
        for (&a, &c) in a.iter().zip(c) {
            let base = c.wrapping_add(a.wrapping_mul(x0)) ^ BIAS;
            let lane = |l: u64| base.wrapping_add(a.wrapping_mul(l)) as i64;
            let first = _mm256_set_epi64x(lane(3), lane(2), lane(1), lane(0));
            let step4 = _mm256_set1_epi64x(a.wrapping_mul(4) as i64);
            let step8 = _mm256_set1_epi64x(a.wrapping_mul(8) as i64);
            let (mut even, mut odd) = (first, _mm256_add_epi64(first, step4));
            for g in 0..GROUPS / 2 {
                // A lane below the limit gives −1: subtracting it counts the match.
                let hit = _mm256_cmpgt_epi64(limit, even);
                counts[2 * g] = _mm256_sub_epi64(counts[2 * g], hit);
                let hit = _mm256_cmpgt_epi64(limit, odd);
                counts[2 * g + 1] = _mm256_sub_epi64(counts[2 * g + 1], hit);
                even = _mm256_add_epi64(even, step8);
                odd = _mm256_add_epi64(odd, step8);
            }
        }
        let mut lanes = [0u64; TILE];
        for (g, v) in counts.iter().enumerate() {
            // SAFETY: 4 u64 from lanes[4g], within the array (unaligned store).
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().add(4 * g) as *mut __m256i, *v) };
        }
        out.iter_mut().zip(&lanes).for_each(|(o, l)| *o += l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::key_from_u64;

    fn pch(k: u64, bits: u32, seed: u64) -> PublicCoinHashing {
        PublicCoinHashing::new(k, bits, key_from_u64(seed)).unwrap()
    }

    /// The statistic by definition: every (user, value) pair hashed one by one.
    fn plain_statistic(m: &PublicCoinHashing, reports: &[u64]) -> Vec<u64> {
        let k = m.k() as usize;
        let mut counts = vec![0u64; 2 * k + 1];
        for &r in reports {
            let (user, y) = m.decode(r);
            let stage = (user & 1) as usize;
            counts[2 * k] += stage as u64;
            for x in 0..k {
                if m.hash(user, x as u64) == y {
                    counts[stage * k + x] += 1;
                }
            }
        }
        counts
    }

    use crate::parallel::in_pool;

    #[test]
    fn parameters_are_checked() {
        let key = key_from_u64(1);
        assert!(PublicCoinHashing::new(1, 3, key).is_err());
        assert!(PublicCoinHashing::new((1 << 32) + 1, 3, key).is_err());
        assert!(PublicCoinHashing::new(10, 0, key).is_err());
        assert!(PublicCoinHashing::new(10, 32, key).is_err());
        assert!(PublicCoinHashing::new(1 << 32, 31, key).is_ok());
    }

    #[test]
    fn hash_parameters_are_the_first_words_of_the_public_stream() {
        // The same stream as column i of a seeded sign matrix: rademacher column i's first 64
        // signs are the bits of a_i.
        let m = pch(10, 5, 42);
        for user in [0u64, 1, 77, 1 << 40] {
            let (a, _) = m.hash_parameters(user);
            let column =
                crate::signs::column_signs(m.key(), 64, crate::signs::SignKind::Rademacher, user)
                    .unwrap();
            for (bit, sign) in column.iter().enumerate() {
                assert_eq!((a >> bit) & 1 == 1, *sign > 0, "user {user} bit {bit}");
            }
        }
    }

    #[test]
    fn batched_chacha_equals_the_public_stream() {
        for seed in [0u64, 1, 42, u64::MAX] {
            let mut key = key_from_u64(seed);
            key[31] ^= (seed as u8).wrapping_mul(37); // high key bytes too
            let m = PublicCoinHashing::new(10, 3, key).unwrap();
            let users: Vec<u64> = (0..100u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 64))
                .chain([0, 1, u32::MAX as u64, 1 << 32, u64::MAX])
                .collect();
            let (mut a, mut b) = (vec![0u64; users.len()], vec![0u64; users.len()]);
            m.hash_parameters_into(&users, &mut a, &mut b);
            for (i, &u) in users.iter().enumerate() {
                assert_eq!((a[i], b[i]), m.hash_parameters(u), "seed {seed} user {u}");
            }
        }
    }

    #[test]
    fn reports_carry_the_user_and_the_hash() {
        let m = pch(1000, 7, 3);
        let values: Vec<u32> = (0..5000u32).map(|i| (i * 37) % 1000).collect();
        let mut out = vec![0u64; values.len()];
        m.privatize(&values, Users::From(12_345), &mut out).unwrap();
        for (u, (&r, &x)) in out.iter().zip(&values).enumerate() {
            let (user, y) = m.decode(r);
            assert_eq!(user, 12_345 + u as u64);
            assert_eq!(y, m.hash(user, x as u64));
        }
        let listed: Vec<u64> = (0..values.len() as u64).map(|i| 3 * i + 1).collect();
        m.privatize(&values, Users::Listed(&listed), &mut out)
            .unwrap();
        assert!(out.iter().zip(&listed).all(|(&r, &i)| r >> 7 == i));
    }

    #[test]
    fn user_indices_past_the_report_width_are_refused() {
        let m = pch(10, 31, 3);
        let mut out = vec![0u64; 3];
        let max = m.max_users();
        assert!(m
            .privatize(&[1, 2, 3], Users::From(max - 3), &mut out)
            .is_ok());
        let e = m
            .privatize(&[1, 2, 3], Users::From(max - 2), &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("first_user"), "{e}");
        assert!(m
            .privatize(&[1, 2, 3], Users::From(u64::MAX), &mut out)
            .is_err());
        let e = m
            .privatize(&[1, 2, 3], Users::Listed(&[0, max, 1]), &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("users[1]"), "{e}");
        let e = m
            .privatize(&[1, 2, 10], Users::From(0), &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("values[2] = 10"), "{e}");
    }

    #[test]
    fn aggregation_matches_the_definition_at_any_thread_count() {
        // Several blocks, a partial tile (k = 150), users of both stages in any order.
        for (k, bits) in [(150u64, 3u32), (2, 1), (64, 31), (200, 8)] {
            let m = pch(k, bits, 9);
            let n = USER_BLOCK * 2 + 777;
            let values: Vec<u32> = (0..n as u64).map(|i| ((i * i) % k) as u32).collect();
            let users: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % 100_003 + 5).collect();
            let mut reports = vec![0u64; n];
            m.privatize(&values, Users::Listed(&users), &mut reports)
                .unwrap();
            let want = plain_statistic(&m, &reports);
            for threads in [1, 3] {
                let mut counts = vec![5u64; 2 * k as usize + 1];
                in_pool(threads, || m.aggregate(&reports, &mut counts)).unwrap();
                let got: Vec<u64> = counts.iter().map(|c| c - 5).collect();
                assert_eq!(got, want, "k {k} bits {bits} threads {threads}");
            }
        }
    }

    #[test]
    fn both_counting_kernels_match_a_plain_count() {
        let (n, k) = (1000usize, 300usize);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let a: Vec<u64> = (0..n).map(|_| next()).collect();
        let c: Vec<u64> = (0..n).map(|_| next()).collect();
        for (bits, x0) in [(1u32, 0u64), (3, 5), (31, (1 << 32) - 300)] {
            let threshold = 1u64 << (64 - bits);
            let want: Vec<u64> = (0..k as u64)
                .map(|j| {
                    a.iter()
                        .zip(&c)
                        .filter(|(&a, &c)| a.wrapping_mul(x0 + j).wrapping_add(c) < threshold)
                        .count() as u64
                })
                .collect();
            let mut got = vec![0u64; k];
            count_matches_portable(&a, &c, x0, threshold, &mut got);
            assert_eq!(got, want, "portable, bits {bits}");
            let mut got = vec![0u64; k];
            count_matches(&a, &c, x0, threshold, &mut got);
            assert_eq!(got, want, "dispatched, bits {bits}");
        }
    }

    #[test]
    fn aggregation_refuses_overflow_and_wrong_lengths_without_changing_counts() {
        let m = pch(20, 4, 1);
        let mut reports = vec![0u64; 100];
        let values: Vec<u32> = (0..100).map(|i| i % 20).collect();
        m.privatize(&values, Users::From(0), &mut reports).unwrap();
        let mut full = vec![u64::MAX; 41];
        full[40] = 0;
        assert!(m.aggregate(&reports, &mut full).is_err());
        assert!(full[..40].iter().all(|&c| c == u64::MAX) && full[40] == 0);
        assert!(m.aggregate(&reports, &mut vec![0u64; 40]).is_err());
    }

    #[test]
    fn pooled_estimate_is_unbiased_on_exact_expectations() {
        let m = pch(7, 2, 1);
        let p = [0.1, 0.0, 0.3, 0.2, 0.15, 0.05, 0.2];
        let est = m.estimate_from_frequencies(&m.expected_frequencies(&p));
        for (e, q) in est.iter().zip(&p) {
            assert!((e - q).abs() < 1e-12);
        }
    }

    #[test]
    fn two_stage_keeps_the_top_values_of_stage_one() {
        let m = pch(6, 1, 1);
        // M = [5, 9, 9, 1, 0, 9], N = [4, 4, 4, 4, 4, 2], n2 = 8, n = 20.
        let counts = [5, 9, 9, 1, 0, 9, 4, 4, 4, 4, 4, 2, 8];
        let est = m.two_stage_estimate(&counts, 20, 1).unwrap();
        // Top 2 by M, ties to the lower index: {1, 2}; p̂ = (2·4/8 − 1)/(2 − 1) = 0.
        assert_eq!(est, vec![0.0; 6]);
        let est = m.two_stage_estimate(&counts, 20, 2).unwrap();
        // Top 4: {1, 2, 5, 0}; x = 5: (2·2/8 − 1) = −0.5.
        assert_eq!(est, vec![0.0, 0.0, 0.0, 0.0, 0.0, -0.5]);
        let est = m.two_stage_estimate(&counts, 20, 6).unwrap();
        assert_eq!(est[3], 0.0);
        assert!(m.two_stage_estimate(&counts, 20, 0).is_err());
        assert!(m.two_stage_estimate(&counts, 20, 7).is_err());
        let mut none = counts;
        none[12] = 0;
        let e = m.two_stage_estimate(&none, 20, 1).unwrap_err();
        assert!(e.to_string().contains("stage 2"), "{e}");
        let e = m.two_stage_estimate(&counts, 8, 1).unwrap_err();
        assert!(e.to_string().contains("stage 1"), "{e}");
        assert!(m.two_stage_estimate(&counts, 7, 1).is_err());
    }

    #[test]
    fn simulation_has_the_ideal_hash_moments_and_is_thread_count_independent() {
        // E[M(x)] = E[N1_x] + (n1 − E[N1_x])β with E[N1_x] = N_x n1/n; variances include the
        // hypergeometric split. Checked on means and on the totals' identities.
        let m = pch(5, 2, 1);
        let true_counts = [400u64, 0, 250, 100, 51];
        let n: u64 = true_counts.iter().sum();
        let (n1, n2) = (n.div_ceil(2) as f64, (n / 2) as f64);
        let beta = 0.25;
        let reps = 400;
        let mut mean = [0.0; 11];
        for s in 0..reps {
            let out = m.simulate(&key_from_u64(s), &true_counts).unwrap();
            assert_eq!(out[10], n / 2);
            for (acc, &v) in mean.iter_mut().zip(&out) {
                *acc += v as f64 / reps as f64;
            }
        }
        for (x, &c) in true_counts.iter().enumerate() {
            let c = c as f64;
            let want_m = c * n1 / n as f64 * (1.0 - beta) + n1 * beta;
            let want_n = c * n2 / n as f64 * (1.0 - beta) + n2 * beta;
            // sd of a single draw is below √n; 400 reps.
            let se = (n as f64).sqrt() / (reps as f64).sqrt();
            assert!(
                (mean[x] - want_m).abs() < 5.0 * se,
                "M({x}) {} vs {want_m}",
                mean[x]
            );
            assert!((mean[5 + x] - want_n).abs() < 5.0 * se, "N({x})");
        }
        let big: Vec<u64> = (0..10_000u64).map(|x| x % 13).collect();
        let one = in_pool(1, || m_big().simulate(&key_from_u64(3), &big).unwrap());
        let four = in_pool(4, || m_big().simulate(&key_from_u64(3), &big).unwrap());
        assert_eq!(one, four);
    }

    fn m_big() -> PublicCoinHashing {
        pch(10_000, 4, 2)
    }
}
