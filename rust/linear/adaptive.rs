//! Adaptive sample splitting: Algorithm 6 of Bassily, "Linear Queries Estimation with Local
//! Differential Privacy", AISTATS 2019 (Section 5, Theorem 5.2), pure ε-LDP with one bit per
//! user.
//!
//! # Protocol
//! Each of the n users is assigned one of d rounds up front, uniformly and independently of
//! the data ([`round_of`]). In round t the analyst publishes a query `q_t ∈ [−r, r]^J`; each
//! user of round t holding value v replies `+c_ε r` with probability
//! `½(1 + q_t[v]/(c_ε r))`, else `−c_ε r`, where `c_ε = (e^ε + 1)/(e^ε − 1)`; the reply is
//! unbiased for `q_t[v]` and the answer of round t is the mean reply. The analyst may choose
//! `q_{t+1}` from every earlier answer: users answer once, so adaptivity costs no privacy.
//! The user's message is the sign alone (one bit); the scale `c_ε r` is public.
//!
//! # The channel in double precision ([`ReplyChannel`])
//! With `h = ½ tanh(ε/2) = 1/(2 c_ε)` the probability of `+` is `P(+|v) = ½ + h·(q[v]/r)`,
//! computed as `fl(½ + fl(h · fl(q[v]/r)))`. Rounding is monotone and `|fl(q/r)| ≤ 1` when
//! `|q| ≤ r`, so every probability lies in `[p_min, p_max] = [fl(½ − h), fl(½ + h)]`, and the
//! privacy loss of any admissible query is at most that of the extremes,
//! `max(ln(p_max/p_min), ln((1 − p_min)/(1 − p_max)))`. `h` is calibrated so that this
//! value, plus a bound on its own floating-point error, is at most ε: start from
//! `½ tanh(ε/2)` and lower `h` by 2^-53 (one unit of `p_max`) while it is not. The replies
//! are drawn with [`BernoulliThreshold`], exact for the binary value of each probability,
//! so the realized channel is exactly the computed probabilities. The scale of the replies
//! is `c r` with `c = 1/(2h)` for the calibrated `h` (the paper's `c_ε` to within a few
//! ulps), which keeps the reply unbiased up to the rounding of the probability:
//! `|E[reply | v] − q[v]| ≤ c r · 2^-51`.
//!
//! # Round assignment ([`round_of`]) — public, reproducible by a client
//! Key = the public seed as 32 little-endian bytes. User i (0 ≤ i < 2^64 − 1) takes the
//! 32-bit word `x` at word position i of the ChaCha20 stream [`ASSIGNMENT_STREAM`] (block
//! counter ⌊i/16⌋, word i mod 16; `rng::public_stream`), and Lemire's step on it: with
//! `P = x·d`, the round is `P >> 32` unless `P mod 2^32 < 2^32 mod d`; in that case
//! (probability below d/2^32) the round is `rng::uniform_below(public_stream(key, i), d)`,
//! the user's own fallback stream. Both branches are exactly uniform on `[0, d)` and
//! independent of every value, so the assignment is data-independent.
//!
//! # Sampling
//! Replies are drawn in parallel chunks of `rng::SAMPLE_CHUNK` users, chunk c from the
//! private stream `rng::stream(key, c)`, one 64-bit word per reply (plus, with probability
//! 2^-64, more): a seeded result does not depend on the thread count, and
//! [`simulate_plus_count`] consumes the streams exactly as [`respond`] does, so a simulated
//! round equals the sum of the replies [`respond`] gives for the same key.

use crate::error::{Error, Result};
use crate::memory::{allocate_zeroed, zeroed_vec, Footprint};
use crate::rng::{
    par_fill_chunks, public_stream, stream, uniform_below, BernoulliThreshold, Key, SAMPLE_CHUNK,
};
use rand_core::Rng;
use rayon::prelude::*;

/// The ChaCha20 stream id of the round assignment's first draws ("adaptive" would collide
/// with nothing either; the largest id keeps every user's fallback stream `i` below it).
pub const ASSIGNMENT_STREAM: u64 = u64::MAX;

/// Largest number of rounds: rounds are drawn by `uniform_below` and travel as u32.
pub const MAX_ROUNDS: u64 = 1 << 32;

/// Relative bound, in units of `f64::EPSILON`, on the floating-point error of a computed
/// privacy loss `ln_1p(gap/p)`: the gap and the quotient are each within ½ ulp, `ln_1p` is
/// within 1 ulp and its condition number `x/((1 + x) ln(1 + x))` is at most 1.
const LOSS_ERROR_ULPS: f64 = 8.0;

/// One unit in the last place of a probability in [½, 1).
const HALF_ULP_ABOVE: f64 = 1.0 / 9_007_199_254_740_992.0; // 2^-53

/// Calibration steps before ε is declared unrepresentable (a step lowers `h` by 2^-53).
const CALIBRATION_STEPS: usize = 64;

/// The privacy loss of a one-bit channel whose probabilities of `+` range over
/// `[p_min, p_max]`: `max(ln(p_max/p_min), ln((1 − p_min)/(1 − p_max)))`, 0 for a constant
/// channel, +∞ when a reply possible under one value is impossible under another.
pub fn privacy_loss(p_min: f64, p_max: f64) -> f64 {
    debug_assert!((0.0..=1.0).contains(&p_min) && p_min <= p_max && p_max <= 1.0);
    let gap = p_max - p_min;
    if gap == 0.0 {
        return 0.0;
    }
    if p_min == 0.0 || p_max == 1.0 {
        return f64::INFINITY;
    }
    // 1 − p_max is exact for p_max ≥ ½ (Sterbenz); for p_max < ½ it is within ½ ulp.
    (gap / p_min).ln_1p().max((gap / (1.0 - p_max)).ln_1p())
}

/// [`privacy_loss`] plus a bound on its floating-point error: the exact loss is at most this.
fn privacy_loss_bound(p_min: f64, p_max: f64) -> f64 {
    privacy_loss(p_min, p_max) * (1.0 + LOSS_ERROR_ULPS * f64::EPSILON)
}

/// The reply channel of one protocol: ε, r and the calibrated `h` (module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplyChannel {
    epsilon: f64,
    r: f64,
    half_gap: f64,
}

impl ReplyChannel {
    /// The channel for ε (finite, in `(0, MAX_EPSILON]`) and query bound r (finite, > 0).
    /// Refused when double precision cannot realize ε to within the shared tolerance
    /// (`mechanisms::check_realized`): ε below about 1e-15 or above about 35.
    pub fn new(epsilon: f64, r: f64) -> Result<Self> {
        crate::mechanisms::check_epsilon(epsilon)?;
        if !(r.is_finite() && r > 0.0) {
            return Err(Error::Value(format!(
                "r (the bound on |q[v]|) must be a finite number > 0, got {r:?}"
            )));
        }
        let mut half_gap = 0.5 * (0.5 * epsilon).tanh();
        for _ in 0..CALIBRATION_STEPS {
            if privacy_loss_bound(0.5 - half_gap, 0.5 + half_gap) <= epsilon {
                break;
            }
            half_gap = (half_gap - HALF_ULP_ABOVE).max(0.0);
        }
        let channel = Self {
            epsilon,
            r,
            half_gap,
        };
        let realized = channel.realized_epsilon();
        if privacy_loss_bound(0.5 - half_gap, 0.5 + half_gap) > epsilon {
            return Err(Error::Value(format!(
                "epsilon = {epsilon:?} cannot be realized by the one-bit reply in double \
                 precision (it would realize {realized:?}); use a smaller epsilon"
            )));
        }
        crate::mechanisms::check_realized("AdaptiveLinearQueries", epsilon, realized)?;
        Ok(channel)
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    pub fn r(&self) -> f64 {
        self.r
    }

    /// `h`: `P(+|v) = ½ + h·q[v]/r`.
    pub fn half_gap(&self) -> f64 {
        self.half_gap
    }

    /// `c = 1/(2h)`, the paper's `c_ε = (e^ε + 1)/(e^ε − 1)` as realized.
    pub fn c_epsilon(&self) -> f64 {
        0.5 / self.half_gap
    }

    /// The magnitude of a reply, `c r`: a reply is `±c r`, an answer `c r · mean(±1)`.
    pub fn scale(&self) -> f64 {
        self.r * self.c_epsilon()
    }

    /// The privacy loss of the worst admissible query (entries ±r): at most ε, and equal to
    /// it up to the calibration (a few ulps).
    pub fn realized_epsilon(&self) -> f64 {
        privacy_loss(0.5 - self.half_gap, 0.5 + self.half_gap)
    }

    /// `P(+ | v)` for one query entry (finite, `|q| ≤ r`, unchecked).
    #[inline]
    pub fn plus_probability(&self, q: f64) -> f64 {
        0.5 + self.half_gap * (q / self.r)
    }

    /// Refuse a query that is empty, not finite, or above r in magnitude, naming the entry.
    pub fn check_query(&self, query: &[f64]) -> Result<()> {
        if query.is_empty() {
            return Err(Error::Value(
                "a query needs at least one entry (one per possible value)".into(),
            ));
        }
        if let Some(j) = query.iter().position(|q| q.is_nan() || q.abs() > self.r) {
            return Err(Error::Value(format!(
                "queries must be finite with |q[v]| ≤ r = {:?}: q[{j}] = {:?}",
                self.r, query[j]
            )));
        }
        Ok(())
    }

    /// `P(+ | v)` for every value of the query (checked first), shape (J,).
    pub fn plus_probabilities(&self, query: &[f64]) -> Result<Vec<f64>> {
        self.check_query(query)?;
        let mut out = zeroed_vec::<f64>(query.len(), "the reply probabilities")?;
        for (p, &q) in out.iter_mut().zip(query) {
            *p = self.plus_probability(q);
        }
        Ok(out)
    }

    /// The privacy loss of the query actually asked: from its own extreme probabilities, so
    /// below ε when `max |q[v]| − min` spans less than `[−r, r]`.
    pub fn realized_epsilon_of(&self, query: &[f64]) -> Result<f64> {
        self.check_query(query)?;
        let (lo, hi) = query
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &q| {
                (lo.min(q), hi.max(q))
            });
        Ok(privacy_loss(
            self.plus_probability(lo),
            self.plus_probability(hi),
        ))
    }

    /// The exact samplers of `P(+ | v)` for every value of the query (checked first).
    pub fn thresholds(&self, query: &[f64]) -> Result<Vec<BernoulliThreshold>> {
        self.check_query(query)?;
        Footprint::new("the reply samplers of a query")
            .add(
                "one sampler per value",
                query.len() as u128,
                std::mem::size_of::<BernoulliThreshold>(),
            )
            .check()?;
        query
            .iter()
            .map(|&q| BernoulliThreshold::new(self.plus_probability(q)))
            .collect()
    }
}

fn check_values(values: &[u32], domain: usize) -> Result<()> {
    match values.iter().position(|&v| v as usize >= domain) {
        Some(i) => Err(Error::Value(format!(
            "values must lie in [0, {domain}) (the query's length): values[{i}] = {}",
            values[i]
        ))),
        None => Ok(()),
    }
}

/// The users' replies (+1 or −1, the sign of `±c r`) to `query`, one per value, into `out`:
/// chunk c of [`SAMPLE_CHUNK`] users draws from `rng::stream(key, c)`.
pub fn respond(
    channel: &ReplyChannel,
    key: &Key,
    query: &[f64],
    values: &[u32],
    out: &mut [i8],
) -> Result<()> {
    if out.len() != values.len() {
        return Err(Error::Value(format!(
            "one reply per value: {} values, room for {} replies",
            values.len(),
            out.len()
        )));
    }
    let thresholds = channel.thresholds(query)?;
    check_values(values, thresholds.len())?;
    par_fill_chunks(key, out, |rng, first, chunk| {
        let values = &values[first..first + chunk.len()];
        for (reply, &v) in chunk.iter_mut().zip(values) {
            *reply = if thresholds[v as usize].sample(rng) {
                1
            } else {
                -1
            };
        }
    })
}

/// The number of `+` replies [`respond`] would give with the same key, without storing them
/// (a simulated round: the answer is `c r (2·plus − n)/n`).
pub fn simulate_plus_count(
    channel: &ReplyChannel,
    key: &Key,
    query: &[f64],
    values: &[u32],
) -> Result<u64> {
    let thresholds = channel.thresholds(query)?;
    check_values(values, thresholds.len())?;
    values
        .par_chunks(SAMPLE_CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            crate::interrupt::check()?;
            let mut rng = stream(key, c as u64);
            let plus = chunk
                .iter()
                .filter(|&&v| thresholds[v as usize].sample(&mut rng))
                .count();
            Ok(plus as u64)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))
}

/// The number of `+1` among replies that must each be +1 or −1 (else the first offender is
/// named).
pub fn count_plus(replies: &[i8]) -> Result<u64> {
    if let Some(i) = replies.par_iter().position_first(|&b| b != 1 && b != -1) {
        return Err(Error::Value(format!(
            "replies must be +1 or −1: replies[{i}] = {}",
            replies[i]
        )));
    }
    Ok(replies.par_iter().filter(|&&b| b == 1).count() as u64)
}

fn check_rounds(rounds: u64) -> Result<()> {
    if !(1..=MAX_ROUNDS).contains(&rounds) {
        return Err(Error::Value(format!(
            "rounds must lie in [1, 2^32], got {rounds}"
        )));
    }
    Ok(())
}

/// Lemire's step on the first draw `x`: the round, or `None` when the word is rejected.
#[inline]
fn first_draw(x: u32, rounds: u64) -> Option<u32> {
    let product = x as u64 * rounds;
    let low = product & 0xFFFF_FFFF;
    if low < rounds && low < ((1u64 << 32) - rounds) % rounds {
        return None;
    }
    Some((product >> 32) as u32)
}

#[cold]
fn fallback_draw(key: &Key, user: u64, rounds: u64) -> u32 {
    uniform_below(&mut public_stream(key, user), rounds) as u32
}

/// The round of user `user` (`< 2^64 − 1`) among `rounds` (module documentation).
pub fn round_of(key: &Key, user: u64, rounds: u64) -> Result<u32> {
    check_rounds(rounds)?;
    if user == u64::MAX {
        return Err(Error::Value("user indices must be below 2^64 − 1".into()));
    }
    let mut rng = public_stream(key, ASSIGNMENT_STREAM);
    rng.set_word_pos(user as u128);
    Ok(first_draw(rng.next_u32(), rounds).unwrap_or_else(|| fallback_draw(key, user, rounds)))
}

/// The rounds of the users `users` (each `< 2^64 − 1`), into `out`, in parallel chunks.
pub fn rounds_of(key: &Key, users: &[u64], rounds: u64, out: &mut [u32]) -> Result<()> {
    check_rounds(rounds)?;
    if out.len() != users.len() {
        return Err(Error::Value(format!(
            "one round per user: {} users, room for {} rounds",
            users.len(),
            out.len()
        )));
    }
    out.par_chunks_mut(SAMPLE_CHUNK)
        .zip(users.par_chunks(SAMPLE_CHUNK))
        .try_for_each(|(out, users)| {
            crate::interrupt::check()?;
            for (round, &user) in out.iter_mut().zip(users) {
                *round = round_of(key, user, rounds)?;
            }
            Ok(())
        })
}

/// The rounds of users `0..out.len()`, in parallel chunks (each reads its words of the
/// assignment stream sequentially from its first user's position).
pub fn assign_rounds(key: &Key, rounds: u64, out: &mut [u32]) -> Result<()> {
    check_rounds(rounds)?;
    out.par_chunks_mut(SAMPLE_CHUNK)
        .enumerate()
        .try_for_each(|(c, chunk)| {
            crate::interrupt::check()?;
            let first = (c * SAMPLE_CHUNK) as u64;
            let mut rng = public_stream(key, ASSIGNMENT_STREAM);
            rng.set_word_pos(first as u128);
            for (i, round) in chunk.iter_mut().enumerate() {
                let x = rng.next_u32();
                *round = first_draw(x, rounds)
                    .unwrap_or_else(|| fallback_draw(key, first + i as u64, rounds));
            }
            Ok(())
        })
}

/// Everything [`group_users`] allocates.
pub fn grouping_footprint(n_users: u64, rounds: u64) -> Footprint {
    Footprint::new(format!(
        "the round assignment of {n_users} users to {rounds} rounds"
    ))
    .add("one round per user", n_users as u128, 4)
    .add("the users in round order", n_users as u128, 8)
    .add("the round offsets", rounds as u128 + 1, 8)
    .hint("the cost is 12 bytes per user and 8 per round")
}

/// The users of every round: `(order, offsets)` with the users of round t, ascending, at
/// `order[offsets[t]..offsets[t + 1]]` (a counting sort of the assignment).
pub fn group_users(key: &Key, n_users: u64, rounds: u64) -> Result<(Vec<u64>, Vec<u64>)> {
    check_rounds(rounds)?;
    if n_users == u64::MAX {
        return Err(Error::Value("n_users must be below 2^64 − 1".into()));
    }
    grouping_footprint(n_users, rounds).check()?;
    let n = usize::try_from(n_users)
        .map_err(|_| Error::Memory(format!("{n_users} users do not fit in memory")))?;
    let d = rounds as usize;
    let mut assignment = allocate_zeroed::<u32>(n, "one round per user")?;
    assign_rounds(key, rounds, &mut assignment)?;
    let mut offsets = allocate_zeroed::<u64>(d + 1, "the round offsets")?;
    for chunk in assignment.chunks(SAMPLE_CHUNK) {
        crate::interrupt::check()?;
        for &t in chunk {
            offsets[t as usize + 1] += 1;
        }
    }
    for t in 0..d {
        offsets[t + 1] += offsets[t];
    }
    let mut order = allocate_zeroed::<u64>(n, "the users in round order")?;
    // `offsets` becomes each round's next free slot, then is shifted back by one round.
    for (c, chunk) in assignment.chunks(SAMPLE_CHUNK).enumerate() {
        crate::interrupt::check()?;
        for (i, &t) in chunk.iter().enumerate() {
            let slot = &mut offsets[t as usize];
            order[*slot as usize] = (c * SAMPLE_CHUNK + i) as u64;
            *slot += 1;
        }
    }
    offsets.copy_within(0..d, 1);
    offsets[0] = 0;
    Ok((order, offsets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::key_from_u64;

    fn channel(epsilon: f64) -> ReplyChannel {
        ReplyChannel::new(epsilon, 1.0).unwrap()
    }

    #[test]
    fn calibration_keeps_the_loss_at_most_epsilon_and_tight() {
        for epsilon in [1e-6, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0] {
            let ch = channel(epsilon);
            let realized = ch.realized_epsilon();
            assert!(realized * (1.0 + LOSS_ERROR_ULPS * f64::EPSILON) <= epsilon);
            assert!(
                (epsilon - realized) / epsilon < 1e-6,
                "ε = {epsilon}: realized {realized}"
            );
            let nominal = (epsilon.exp() + 1.0) / epsilon.exp_m1();
            assert!((ch.c_epsilon() - nominal).abs() <= 1e-9 * nominal.max(1.0 / epsilon));
        }
    }

    #[test]
    fn unrepresentable_epsilons_and_bad_r_are_refused() {
        assert!(ReplyChannel::new(1e-17, 1.0).is_err());
        assert!(ReplyChannel::new(60.0, 1.0).is_err());
        assert!(ReplyChannel::new(f64::INFINITY, 1.0).is_err());
        assert!(ReplyChannel::new(f64::NAN, 1.0).is_err());
        assert!(ReplyChannel::new(0.0, 1.0).is_err());
        for r in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(ReplyChannel::new(1.0, r).is_err(), "r = {r}");
        }
    }

    #[test]
    fn every_admissible_query_stays_inside_the_extremes() {
        let ch = ReplyChannel::new(0.7, 2.5).unwrap();
        let (lo, hi) = (ch.plus_probability(-2.5), ch.plus_probability(2.5));
        for i in 0..=1000 {
            let q = -2.5 + 5.0 * i as f64 / 1000.0;
            let p = ch.plus_probability(q.clamp(-2.5, 2.5));
            assert!(lo <= p && p <= hi);
        }
        assert_eq!(
            ch.realized_epsilon_of(&[-2.5, 2.5]).unwrap(),
            ch.realized_epsilon()
        );
        assert!(ch.realized_epsilon_of(&[-1.0, 1.0]).unwrap() < ch.realized_epsilon());
        assert_eq!(ch.realized_epsilon_of(&[0.3, 0.3]).unwrap(), 0.0);
    }

    #[test]
    fn replies_are_unbiased_up_to_the_rounding_of_the_probability() {
        let ch = ReplyChannel::new(1.3, 0.8).unwrap();
        for i in 0..=200 {
            let q = -0.8 + 1.6 * i as f64 / 200.0;
            let q = q.clamp(-0.8, 0.8);
            let mean = ch.scale() * (2.0 * ch.plus_probability(q) - 1.0);
            assert!(
                (mean - q).abs() <= ch.scale() * 2f64.powi(-51),
                "q = {q}: {mean}"
            );
        }
    }

    #[test]
    fn bad_queries_and_values_are_refused_with_their_position() {
        let ch = channel(1.0);
        let err = |r: Result<Vec<f64>>| match r {
            Err(Error::Value(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(err(ch.plus_probabilities(&[])).contains("at least one"));
        assert!(err(ch.plus_probabilities(&[0.0, f64::NAN])).contains("q[1]"));
        assert!(err(ch.plus_probabilities(&[0.0, 0.5, 1.5])).contains("q[2]"));
        let mut out = [0i8; 2];
        let e = respond(&ch, &key_from_u64(1), &[0.0, 1.0], &[1, 2], &mut out).unwrap_err();
        assert!(matches!(e, Error::Value(m) if m.contains("values[1] = 2")));
        let e = count_plus(&[1, -1, 0, 1]).unwrap_err();
        assert!(matches!(e, Error::Value(m) if m.contains("replies[2] = 0")));
    }

    #[test]
    fn reply_frequencies_match_the_probabilities() {
        // Three values with P(+) = ½(1 + q/c); binomial z-scores at 1e6 replies each.
        let ch = channel(1.0);
        let query = [-1.0, 0.25, 1.0];
        let n = 1_000_000usize;
        let values: Vec<u32> = (0..3 * n).map(|i| (i % 3) as u32).collect();
        let mut out = vec![0i8; values.len()];
        respond(&ch, &key_from_u64(4), &query, &values, &mut out).unwrap();
        for (v, &q) in query.iter().enumerate() {
            let p = ch.plus_probability(q);
            let plus = out.iter().skip(v).step_by(3).filter(|&&b| b == 1).count() as f64;
            let z = (plus - n as f64 * p) / (n as f64 * p * (1.0 - p)).sqrt();
            assert!(z.abs() < 4.5, "value {v}: z = {z}");
        }
    }

    #[test]
    fn simulation_equals_the_sum_of_the_replies_at_any_thread_count() {
        let ch = channel(0.5);
        let key = key_from_u64(9);
        let query: Vec<f64> = (0..50).map(|j| (j as f64 / 25.0) - 1.0).collect();
        let values: Vec<u32> = (0..3 * SAMPLE_CHUNK as u32 + 11).map(|i| i % 50).collect();
        let run = |threads: usize| {
            crate::parallel::in_pool(threads, || {
                let mut out = vec![0i8; values.len()];
                respond(&ch, &key, &query, &values, &mut out).unwrap();
                let plus = simulate_plus_count(&ch, &key, &query, &values).unwrap();
                (out, plus)
            })
        };
        let (one, plus_one) = run(1);
        for threads in [2, 4] {
            assert_eq!(run(threads), (one.clone(), plus_one));
        }
        assert_eq!(count_plus(&one).unwrap(), plus_one);
    }

    #[test]
    fn assignment_is_uniform_reproducible_and_matches_round_of() {
        let key = key_from_u64(2024);
        let rounds = 7u64;
        let n = 2 * SAMPLE_CHUNK + 5;
        let mut all = vec![0u32; n];
        assign_rounds(&key, rounds, &mut all).unwrap();
        for user in [0usize, 1, 15, 16, SAMPLE_CHUNK - 1, SAMPLE_CHUNK, n - 1] {
            assert_eq!(all[user], round_of(&key, user as u64, rounds).unwrap());
        }
        let users: Vec<u64> = (0..n as u64).rev().collect();
        let mut reversed = vec![0u32; n];
        rounds_of(&key, &users, rounds, &mut reversed).unwrap();
        assert!(reversed.iter().rev().eq(all.iter()));
        let mut counts = [0f64; 7];
        for &t in &all {
            counts[t as usize] += 1.0;
        }
        let e = n as f64 / 7.0;
        let chi2: f64 = counts.iter().map(|c| (c - e) * (c - e) / e).sum();
        assert!(
            chi2 < 22.46,
            "chi2 = {chi2} (df 6, p = 0.001 critical 22.46)"
        );
        let (order, offsets) = group_users(&key, n as u64, rounds).unwrap();
        assert_eq!(offsets[7] as usize, n);
        for t in 0..7 {
            let users = &order[offsets[t] as usize..offsets[t + 1] as usize];
            assert!(users.windows(2).all(|w| w[0] < w[1]));
            assert!(users.iter().all(|&u| all[u as usize] == t as u32));
        }
    }

    #[test]
    fn assignment_falls_back_to_the_users_own_stream_on_a_rejected_word() {
        // d = 3: 2^32 mod 3 = 1, so only the word 0 is rejected; it then draws from stream i.
        assert_eq!(first_draw(0, 3), None);
        assert_eq!(first_draw(1, 3), Some(0));
        assert_eq!(first_draw(u32::MAX, 3), Some(2));
        assert_eq!(first_draw(0, 1 << 32), Some(0));
        let key = key_from_u64(1);
        let own = uniform_below(&mut public_stream(&key, 5), 3) as u32;
        assert_eq!(fallback_draw(&key, 5, 3), own);
    }

    #[test]
    fn assignment_test_vectors() {
        // Also checked from the specification alone by tests/test_linear_adaptive.py.
        let key = key_from_u64(12345);
        let got: Vec<u32> = [0u64, 1, 2, 3, 16, 1000, 123_456_789]
            .iter()
            .map(|&i| round_of(&key, i, 100).unwrap())
            .collect();
        assert_eq!(got, ASSIGNMENT_VECTORS.to_vec());
    }

    /// Rounds (d = 100, seed 12345) of users 0, 1, 2, 3, 16, 1000, 123456789.
    const ASSIGNMENT_VECTORS: [u32; 7] = [94, 83, 70, 4, 22, 58, 4];
}
