//! Compressive Privatization, client side (Xiong, Huang, Mao, Wang & Ying, "Compressive
//! Privatization: Sparse Distribution Estimation under Locally Differential Privacy",
//! arXiv:2012.02081, 2020; docs page Mechanisms › Compressive privatization): privatize a
//! value of `[0, k)` into the much smaller report alphabet `[0, m)` with a public seeded ±1
//! matrix `A` (m × k, `signs::SignMatrix`).
//!
//! # Channel (eq. 2)
//! Column x of A is the incidence vector of `C_x = {y : A_yx = +1}`, `n_x = |C_x|`,
//! `Z_x = n_x e^ε' + m − n_x` with ε' the *internal* epsilon (see calibration below):
//! `Q(y|x) = e^ε'/Z_x` for `y ∈ C_x`, `1/Z_x` otherwise. Eq. (3) holds for any ±1 matrix:
//! `Qᵀp = ((e^ε'+1)/2)(Σ_x p_x/Z_x)·1 + ((e^ε'−1)/2)·A(p/Z)`.
//!
//! # Matrices and regimes
//! * High privacy (ε ≤ 1 under [`Regime::Auto`]): columns with half ones — balanced
//!   (`SignKind::Balanced(0.5)`, exactly m/2 ones, m must be even) or the paper's i.i.d.
//!   `SignKind::Rademacher`.
//! * Medium privacy (Section 4; `1 < ε ≤ ln m` under Auto, or forced for any ε with
//!   `e^{−ε}·m ≥ 1`): P(+1) = e^{−ε} — balanced `SignKind::Balanced(e^{−ε})` (exactly
//!   `⌊m e^{−ε} + 1/2⌋` ones) or i.i.d. `SignKind::Bernoulli(e^{−ε})`.
//!   The matrix always uses the *requested* ε; calibration changes only ε'.
//!
//! # Sampling (client side, needs column x only: O(m))
//! With probability `ρ_x` (exact Bernoulli of the float, `rng::BernoulliThreshold`) report a
//! uniform element of `C_x`, else a uniform element of `[m] ∖ C_x`; "uniform element" is the
//! r-th set (resp. unset) bit of the packed column, `r = uniform_below(count)`, both exact.
//! Word order per report: one 64-bit draw (Bernoulli), then one `uniform_below`.
//! `ρ_x` depends only on `(n_x, m, ε')` ([`inside_probability`]), so a client holding the
//! public key, m, the sign kind and ε' (all in the spec) reproduces the server's channel:
//! [`privatize_from_spec`] generates its column with `signs::fill_column` and samples
//! exactly as [`CompressivePrivatization`]'s `IndexMechanism::sample` does from the matrix.
//!
//! # Exact privacy
//! `ρ(n) = n e^ε'/(n e^ε' + m − n)` is rounded down by `PRIVACY_MARGIN_ULPS`; the channel
//! actually used is `a(n) = ρ(n)/n` inside, `b(n) = (1 − ρ(n))/(m − n)` outside.
//! Degenerate columns (`n_x = 0` or `n_x = m`, possible with i.i.d. matrices for small m)
//! give the uniform channel `1/m` (ρ = 0 resp. 1): still private, they carry no information
//! about x (the Z formula gives the same `1/m`).
//!
//! The realized guarantee is the exact max over `(x1, x2, y)` of `ln Q(y|x1)/Q(y|x2)`,
//! computed from the probabilities actually used. The note's closed form
//! `ε' + ln(max_x Z_x / min_x Z_x)` is exact when some column of least Z has an element
//! outside some column of largest Z; when the extreme columns' supports are nested (e.g. an
//! empty column against a full one) it is only an upper bound. We compute it exactly in
//! `O(k·m/64 + G²)` with G the number of distinct `n_x`: group the columns by `n_x` (the
//! probabilities depend on n only); for each group keep the union `U` and intersection `I`
//! of its supports; then for groups g1, g2 the four kinds of outputs exist iff
//! * `y ∈ C_x1 ∖ C_x2` for some members: `U1 ⊄ I2`  (ratio `a1/b2`),
//! * `y ∈ C_x2 ∖ C_x1`: `U2 ⊄ I1`  (`b1/a2`),
//! * `y ∈ C_x1 ∩ C_x2`: `U1 ∩ U2 ≠ ∅`  (`a1/a2`),
//! * `y ∉ C_x1 ∪ C_x2`: `I1ᶜ ∩ I2ᶜ ≠ ∅`  (`b1/b2`),
//!
//! and the realized ε is the largest log-ratio over the kinds that exist (checked against
//! the full channel matrix in the tests). With balanced columns Z is constant and the
//! realized ε equals ε' = ε (up to the rounding down, below ε).
//!
//! # Calibration (i.i.d. matrices)
//! The realized ε is nondecreasing in ε' (every ratio ≥ 1 is `e^ε' Z2/Z1` or `Z2/Z1` with
//! `n2 ≥ n1`, both nondecreasing). With `calibrate = true`, ε' is the largest value found by
//! bisection whose realized ε is ≤ ε·(1 − 2^−40) (the headroom covers the few-ulp error of
//! evaluating the ratio in floating point, so the exact ratio is below ε too). With
//! `calibrate = false`, ε' = ε and the realized ε (typically above ε for i.i.d. matrices) is
//! reported as it is.

use super::randomized_response::{epsilon_too_small, round_down, PRIVACY_MARGIN_ULPS};
use super::{
    add_uniform_reports, as_atomic, check_domain, check_epsilon, draw_own_counts, simulation_users,
    IndexMechanism,
};
use crate::error::{Error, Result};
use crate::omp::{omp_with_intercept, OmpStop};
use crate::rng::{binomial, uniform_below, BernoulliThreshold, Key, StreamRng};
use crate::signs::{balanced_ones, fill_column, words_per_column, SignKind, SignMatrix, MAX_ROWS};
use rand_core::Rng;
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

thread_local! {
    /// A client's column and the balanced generator's scratch, reused across reports.
    static COLUMN: RefCell<(Vec<u64>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// How the columns of A are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixKind {
    /// Exactly the right number of +1 per column (m/2, or `⌊m e^{−ε} + 1/2⌋`), uniformly
    /// placed: Z_x is constant and the realized ε is ε.
    Balanced,
    /// The paper's i.i.d. matrix: Rademacher (high privacy) or Bernoulli(e^{−ε}) (medium).
    Rademacher,
}

/// Which construction of the paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regime {
    /// High for ε ≤ 1, medium for 1 < ε ≤ ln m, an error above.
    Auto,
    /// P(+1) = 1/2.
    High,
    /// P(+1) = e^{−ε} (needs `e^{−ε}·m ≥ 1`).
    Medium,
}

/// Bits that say which kinds of outputs two groups of columns share (see the module doc).
const IN_OUT: u8 = 1;
const OUT_IN: u8 = 2;
const IN_IN: u8 = 4;
const OUT_OUT: u8 = 8;

/// Headroom of the calibrated realized ε below the requested one (relative).
const CALIBRATION_HEADROOM: f64 = 1.0 / (1u64 << 40) as f64;

#[derive(Clone, Debug)]
pub struct CompressivePrivatization {
    k: u64,
    m: usize,
    epsilon: f64,
    internal_epsilon: f64,
    realized_epsilon: f64,
    matrix_kind: MatrixKind,
    regime: Regime,
    calibrate: bool,
    key: Key,
    sign_kind: SignKind,
    /// The bit-packed A, built on first server-side use (balanced) or at construction
    /// (i.i.d.: its guarantee depends on every column). Clients never need it.
    matrix: OnceLock<SignMatrix>,
    /// n_x for every column (i.i.d. matrices); empty for balanced ones, whose columns all
    /// have `uniform_ones` ones.
    ones: Vec<u32>,
    uniform_ones: Option<u32>,
    /// Indexed by n ∈ [0, m]: the exact Bernoulli(ρ(n)) sampler.
    inside: Vec<BernoulliThreshold>,
    /// Indexed by n: (a(n), b(n)) = (Q inside, Q outside) as realized.
    probs: Vec<(f64, f64)>,
}

/// `ρ(n)`: probability of reporting inside a column with `n` ones out of `m`, as used
/// (rounded down by `PRIVACY_MARGIN_ULPS`; exactly 0 for n = 0 and 1 for n = m).
pub fn inside_probability(m: usize, n: usize, internal_epsilon: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if n >= m {
        return 1.0;
    }
    let e = internal_epsilon.exp();
    let inside = n as f64 * e;
    round_down(inside / (inside + (m - n) as f64), PRIVACY_MARGIN_ULPS)
}

/// `(a, b)`: Q(y|x) for y inside / outside a column with `n` ones, from `ρ(n)`.
/// `(ρ, (a, b))` of a balanced high-privacy column (`n = m/2`), as the balanced and the
/// structured (`hadamard_compressive`) matrices use them.
pub(crate) fn balanced_column_probabilities(m: usize, epsilon: f64) -> (f64, (f64, f64)) {
    let rho = inside_probability(m, m / 2, epsilon);
    (rho, column_probabilities(m, m / 2, rho))
}

fn column_probabilities(m: usize, n: usize, rho: f64) -> (f64, f64) {
    if n == 0 || n >= m {
        let u = 1.0 / m as f64;
        return (u, u);
    }
    (rho / n as f64, (1.0 - rho) / (m - n) as f64)
}

/// Position of the r-th (0-based) set bit of `w` (`r < popcount(w)`), without branches
/// (Vigna 2008, "Broadword implementation of rank/select queries", §5): byte prefix
/// popcounts by one multiplication, the byte holding the bit by a parallel comparison of
/// the prefix sums with r, then a table lookup inside that byte. A select loop with
/// data-dependent exits was the slowest step of a report (one mispredicted branch per bit
/// skipped).
#[inline(always)]
fn select_in_word(w: u64, r: u32) -> u32 {
    const ONES_STEP_8: u64 = 0x0101_0101_0101_0101;
    const MSBS_STEP_8: u64 = 0x8080_8080_8080_8080;
    let mut sums = w - ((w >> 1) & 0x5555_5555_5555_5555);
    sums = (sums & 0x3333_3333_3333_3333) + ((sums >> 2) & 0x3333_3333_3333_3333);
    sums = (sums + (sums >> 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    // Byte i: the number of set bits in bytes 0..=i (at most 64, so no carries).
    sums = sums.wrapping_mul(ONES_STEP_8);
    // Byte i has its top bit set iff prefix(i) ≤ r; those bytes come first.
    let at_most_r = ((r as u64 * ONES_STEP_8) | MSBS_STEP_8).wrapping_sub(sums) & MSBS_STEP_8;
    let place = at_most_r.count_ones() * 8;
    // Set bits before byte `place/8`: the prefix of the previous byte (0 for the first).
    let before = ((sums << 8) >> place) as u32 & 0xFF;
    let byte = (w >> place) as usize & 0xFF;
    place + SELECT_IN_BYTE[((r - before) as usize) << 8 | byte] as u32
}

/// `SELECT_IN_BYTE[r·256 + b]`: position of the r-th set bit of byte b (8 if none).
static SELECT_IN_BYTE: [u8; 2048] = {
    let mut table = [8u8; 2048];
    let mut b = 0;
    while b < 256 {
        let (mut bit, mut r) = (0, 0);
        while bit < 8 {
            if b >> bit & 1 == 1 {
                table[r * 256 + b] = bit as u8;
                r += 1;
            }
            bit += 1;
        }
        b += 1;
    }
    table
};

/// Row of the r-th (0-based) +1 entry of a packed column (`r < ones`).
#[inline(always)]
fn select_set(column: &[u64], r: u64) -> u64 {
    select_in_column(column, r, |w| w)
}

/// Row of the r-th (0-based) −1 entry among the first m rows (`r < m − ones`). Bits at
/// rows ≥ m are 0 in storage, so their complements come after every valid −1 entry.
#[inline(always)]
fn select_unset(column: &[u64], r: u64) -> u64 {
    select_in_column(column, r, |w| !w)
}

/// The r-th set bit of the words `view(column[i])`, scanning words until it is reached.
/// (Visiting every word with conditional moves instead of exiting early measured slower.)
#[inline(always)]
fn select_in_column(column: &[u64], mut r: u64, view: impl Fn(u64) -> u64) -> u64 {
    for (i, &w) in column.iter().enumerate() {
        let w = view(w);
        let c = w.count_ones() as u64;
        if r < c {
            return 64 * i as u64 + select_in_word(w, r as u32) as u64;
        }
        r -= c;
    }
    unreachable!("select: r is at least the number of such bits")
}

/// One report from a packed column alone (`words_per_column(m)` words, rows ≥ m zero) with
/// `ones` +1 entries: with probability `inside` a uniform +1 row, else a uniform −1 row.
/// `inside` must be `BernoulliThreshold::new(inside_probability(m, ones, ε'))`.
#[inline]
pub fn sample_from_column<R: Rng + ?Sized>(
    rng: &mut R,
    column: &[u64],
    m: usize,
    ones: usize,
    inside: &BernoulliThreshold,
) -> u64 {
    if inside.sample(rng) {
        select_set(column, uniform_below(rng, ones as u64))
    } else {
        select_unset(column, uniform_below(rng, (m - ones) as u64))
    }
}

/// The client: privatize `x` knowing only the public spec (key, m, sign kind, ε'), in O(m)
/// time and memory: generate column x with `signs::fill_column`, then
/// [`sample_from_column`]. Identical reports to the matrix path for the same stream.
pub fn privatize_from_spec<R: Rng + ?Sized>(
    rng: &mut R,
    key: &Key,
    m: usize,
    kind: SignKind,
    internal_epsilon: f64,
    x: u64,
) -> Result<u64> {
    if !(2..=MAX_ROWS).contains(&m) {
        return Err(Error::Value(format!(
            "m must lie in [2, 2^31 − 1], got {m}"
        )));
    }
    crate::memory::check_fits(m, 5, "the column")?;
    let mut column = vec![0u64; words_per_column(m)];
    let mut scratch = Vec::new();
    fill_column(key, m, kind, x, &mut column, &mut scratch);
    let ones = column
        .iter()
        .map(|w| w.count_ones() as usize)
        .sum::<usize>();
    let inside = BernoulliThreshold::new(inside_probability(m, ones, internal_epsilon))?;
    Ok(sample_from_column(rng, &column, m, ones, &inside))
}

/// Which kinds of outputs each ordered pair of column groups shares (see the module doc).
struct Overlaps {
    /// Distinct n_x, one per group.
    group_ones: Vec<usize>,
    /// `flags[g1·G + g2]`: IN_OUT | OUT_IN | IN_IN | OUT_OUT.
    flags: Vec<u8>,
}

impl Overlaps {
    /// Errors: the tables do not fit in the memory budget (`G` groups need `G²` flags and
    /// `2·G` column masks), or an interruption.
    fn new(matrix: &SignMatrix, ones: &[u32]) -> Result<Self> {
        let m = matrix.rows();
        let words = words_per_column(m);
        let mut group_of = crate::memory::zeroed_vec::<u32>(m + 1, "the column-weight groups")?;
        group_of.fill(u32::MAX);
        let mut group_ones = Vec::new();
        for &n in ones {
            if group_of[n as usize] == u32::MAX {
                group_of[n as usize] = group_ones.len() as u32;
                group_ones.push(n as usize);
            }
        }
        let g = group_ones.len();
        crate::memory::Footprint::new(format!(
            "the overlaps of {g} column-weight groups (m = {m})"
        ))
        .add(
            "union and intersection masks",
            2 * (g as u64) * words as u64,
            8,
        )
        .add("pair flags", (g as u64) * g as u64, 1)
        .hint("lower m (the number of distinct column weights grows with m)")
        .check()?;
        let mut union = crate::memory::allocate_zeroed::<u64>(g * words, "union masks")?;
        let mut inter = crate::memory::allocate_zeroed::<u64>(g * words, "intersection masks")?;
        inter.fill(!0u64);
        for (x, &n) in ones.iter().enumerate() {
            if x % 4096 == 0 {
                crate::interrupt::check()?;
            }
            let at = group_of[n as usize] as usize * words;
            for (i, &w) in matrix.column_bits(x).iter().enumerate() {
                union[at + i] |= w;
                inter[at + i] &= w; // rows ≥ m: every column has 0 there
            }
        }
        let mut valid = vec![!0u64; words];
        if m % 64 != 0 {
            valid[words - 1] = (1u64 << (m % 64)) - 1;
        }
        let u = |g: usize| &union[g * words..(g + 1) * words];
        let i = |g: usize| &inter[g * words..(g + 1) * words];
        let any = |f: &dyn Fn(usize) -> u64| (0..words).any(|t| f(t) != 0);
        let mut flags = crate::memory::allocate_zeroed::<u8>(g * g, "pair flags")?;
        for g1 in 0..g {
            crate::interrupt::check()?;
            for g2 in 0..g {
                let (u1, u2, i1, i2) = (u(g1), u(g2), i(g1), i(g2));
                let mut f = 0;
                if any(&|t| u1[t] & !i2[t]) {
                    f |= IN_OUT;
                }
                if any(&|t| u2[t] & !i1[t]) {
                    f |= OUT_IN;
                }
                if any(&|t| u1[t] & u2[t]) {
                    f |= IN_IN;
                }
                if any(&|t| !i1[t] & !i2[t] & valid[t]) {
                    f |= OUT_OUT;
                }
                flags[g1 * g + g2] = f;
            }
        }
        Ok(Self { group_ones, flags })
    }

    /// The exact realized ε (max log-ratio, ≥ 0) of the channel with internal ε'.
    fn realized(&self, m: usize, internal_epsilon: f64) -> f64 {
        let logs: Vec<(f64, f64)> = self
            .group_ones
            .iter()
            .map(|&n| {
                let (a, b) = column_probabilities(m, n, inside_probability(m, n, internal_epsilon));
                (a.ln(), b.ln())
            })
            .collect();
        let g = logs.len();
        let mut worst = 0.0f64;
        for g1 in 0..g {
            for g2 in 0..g {
                let f = self.flags[g1 * g + g2];
                let ((a1, b1), (a2, b2)) = (logs[g1], logs[g2]);
                if f & IN_OUT != 0 {
                    worst = worst.max(a1 - b2);
                }
                if f & OUT_IN != 0 {
                    worst = worst.max(b1 - a2);
                }
                if f & IN_IN != 0 {
                    worst = worst.max(a1 - a2);
                }
                if f & OUT_OUT != 0 {
                    worst = worst.max(b1 - b2);
                }
            }
        }
        worst
    }
}

impl CompressivePrivatization {
    /// See the module documentation. Errors: k ∉ [2, 2^32], ε not finite and > 0,
    /// m ∉ [2, min(k − 1, 2^31 − 1)], an odd m with balanced high-privacy columns, ε > ln m
    /// under `Regime::Auto`, `e^{−ε}·m < 1` with `Regime::Medium`, or a matrix too large
    /// for the memory available.
    pub fn new(
        k: u64,
        epsilon: f64,
        m: usize,
        key: Key,
        matrix: MatrixKind,
        regime: Regime,
        calibrate: bool,
    ) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        if m < 2 {
            return Err(Error::Value(format!(
                "m (the number of possible reports) must be at least 2, got {m}"
            )));
        }
        if m as u64 >= k {
            return Err(Error::Value(format!(
                "m = {m} ≥ k = {k} makes no sense for compressive privatization (it compresses \
                 k values into m < k reports): use a direct mechanism such as randomized \
                 response or Hadamard response"
            )));
        }
        if m > MAX_ROWS {
            return Err(Error::Value(format!("m must be at most 2^31 − 1, got {m}")));
        }
        let ln_m = (m as f64).ln();
        let regime = match regime {
            Regime::Auto if epsilon <= 1.0 => Regime::High,
            Regime::Auto if epsilon <= ln_m => Regime::Medium,
            Regime::Auto => {
                return Err(Error::Value(format!(
                    "epsilon = {epsilon:?} exceeds ln m = {ln_m:.4} (m = {m}): the medium-privacy \
                     construction needs at least e^-epsilon·m ≥ 1 ones per column. Use a \
                     smaller epsilon, a larger m (m ≥ {:.0}), regime='high', or a direct \
                     mechanism (Hadamard response) for low privacy",
                    epsilon.exp().ceil()
                )))
            }
            r => r,
        };
        let p_one = (-epsilon).exp();
        if regime == Regime::Medium && p_one * (m as f64) < 1.0 {
            return Err(Error::Value(format!(
                "regime='medium' needs e^-epsilon·m ≥ 1 (at least one +1 per column on \
                 average), got e^-{epsilon:?}·{m} = {:.4}: use a smaller epsilon or a larger m",
                p_one * m as f64
            )));
        }
        let sign_kind = match (regime, matrix) {
            (Regime::High, MatrixKind::Balanced) => {
                if m % 2 != 0 {
                    return Err(Error::Value(format!(
                        "balanced high-privacy columns have exactly m/2 ones, so m must be \
                         even, got m = {m} (use m = {} or matrix='rademacher')",
                        m + 1
                    )));
                }
                SignKind::Balanced(0.5)
            }
            (Regime::High, MatrixKind::Rademacher) => SignKind::Rademacher,
            (_, MatrixKind::Balanced) => {
                if balanced_ones(m, p_one) >= m {
                    return Err(Error::Value(format!(
                        "with epsilon = {epsilon:?} and m = {m}, balanced medium-privacy columns \
                         would be all +1 (round(m·e^-epsilon) = m) and carry no information: \
                         use regime='high'"
                    )));
                }
                SignKind::Balanced(p_one)
            }
            (_, MatrixKind::Rademacher) => SignKind::Bernoulli(p_one),
        };
        // Checked for both kinds: a balanced matrix is built on the server's first use.
        SignMatrix::footprint(m, k as usize)
            .add("column weights", k, 4)
            .check()?;
        if matrix == MatrixKind::Balanced {
            // Every Z_x is equal: the realized guarantee is ln(a/b) of the common weight,
            // known without the matrix (exact as soon as two columns differ).
            let n = balanced_ones(m, sign_kind.p());
            let rho = inside_probability(m, n, epsilon);
            let (a, b) = column_probabilities(m, n, rho);
            if !(a > b) {
                return Err(epsilon_too_small(epsilon));
            }
            let probs = (0..=m)
                .map(|c| column_probabilities(m, c, inside_probability(m, c, epsilon)))
                .collect();
            let inside = (0..=m)
                .map(|c| BernoulliThreshold::new(inside_probability(m, c, epsilon)))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Self {
                k,
                m,
                epsilon,
                internal_epsilon: epsilon,
                realized_epsilon: a.ln() - b.ln(),
                matrix_kind: matrix,
                regime,
                calibrate,
                key,
                sign_kind,
                matrix: OnceLock::new(),
                ones: Vec::new(),
                uniform_ones: Some(n as u32),
                inside,
                probs,
            });
        }
        let a = SignMatrix::new(key, m, k as usize, sign_kind)?;
        let mut ones = crate::memory::allocate_zeroed::<u32>(k as usize, "column weights")?;
        ones.par_chunks_mut(1 << 16)
            .enumerate()
            .try_for_each(|(c, chunk)| {
                crate::interrupt::check()?;
                for (i, n) in chunk.iter_mut().enumerate() {
                    *n = a.column_ones((c << 16) + i);
                }
                Ok::<(), Error>(())
            })?;
        let overlaps = Overlaps::new(&a, &ones)?;

        let mut internal = epsilon;
        let mut realized = overlaps.realized(m, internal);
        if calibrate && realized > epsilon {
            let target = epsilon * (1.0 - CALIBRATION_HEADROOM);
            let (mut lo, mut hi) = (epsilon / 2.0, epsilon);
            let mut found = overlaps.realized(m, lo);
            let mut halvings = 0;
            while found > target {
                hi = lo;
                lo /= 2.0;
                found = overlaps.realized(m, lo);
                halvings += 1;
                if halvings > 1000 {
                    return Err(epsilon_too_small(epsilon));
                }
            }
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                if !(mid > lo && mid < hi) {
                    break;
                }
                let r = overlaps.realized(m, mid);
                if r <= target {
                    (lo, found) = (mid, r);
                } else {
                    hi = mid;
                }
            }
            internal = lo;
            realized = found;
        }

        let probs: Vec<(f64, f64)> = (0..=m)
            .map(|n| column_probabilities(m, n, inside_probability(m, n, internal)))
            .collect();
        // Every informative column must favour its own outputs.
        if overlaps
            .group_ones
            .iter()
            .any(|&n| n > 0 && n < m && !(probs[n].0 > probs[n].1))
        {
            return Err(epsilon_too_small(epsilon));
        }
        let inside = (0..=m)
            .map(|n| BernoulliThreshold::new(inside_probability(m, n, internal)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            k,
            m,
            epsilon,
            internal_epsilon: internal,
            realized_epsilon: realized,
            matrix_kind: matrix,
            regime,
            calibrate,
            key,
            sign_kind,
            matrix: OnceLock::from(a),
            ones,
            uniform_ones: None,
            inside,
            probs,
        })
    }

    pub fn k(&self) -> u64 {
        self.k
    }
    pub fn m(&self) -> usize {
        self.m
    }
    /// The ε asked for.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`).
    ///
    /// Every operation builds the matrix first when it is not built yet
    /// ([`SignMatrix::footprint`]); an estimate runs OMP with up to min(m − 1, k) atoms
    /// ([`omp::footprint`](crate::omp::footprint)) and a channel product one `Aᵀw`.
    pub fn footprint(&self, op: super::Operation) -> crate::memory::Footprint {
        let (k, m) = (self.k, self.m as u64);
        let name = "CompressivePrivatization";
        let mut f = super::vector_footprint(name, op, k, m);
        if !self.matrix_built() {
            f = f.include(&SignMatrix::footprint(self.m, self.k as usize));
        }
        match op {
            super::Operation::Estimate => f.include(&crate::omp::footprint_for(
                self.m,
                self.k as usize,
                self.omp_cap(),
                true,
                self.rmatvec_scratch_bytes(),
            )),
            super::Operation::ChannelProduct => {
                f.add("Aᵀw scratch", self.rmatvec_scratch_bytes(), 1)
            }
            super::Operation::Simulate { .. } => f,
        }
    }

    /// Bytes of the lookup tables of one `Aᵀr` on the m × k matrix.
    fn rmatvec_scratch_bytes(&self) -> u64 {
        words_per_column(self.m) as u64 * 8 * 256 * 8
    }

    /// Most atoms OMP may choose: min(m − 1, k).
    fn omp_cap(&self) -> usize {
        (self.m - 1).min(self.k as usize)
    }
    /// ε' of the channel formula (= ε unless calibrated).
    pub fn internal_epsilon(&self) -> f64 {
        self.internal_epsilon
    }
    /// Exact max log-ratio of the channel actually used.
    pub fn realized_epsilon(&self) -> f64 {
        self.realized_epsilon
    }
    pub fn matrix_kind(&self) -> MatrixKind {
        self.matrix_kind
    }
    /// The regime used (never `Auto`).
    pub fn regime(&self) -> Regime {
        self.regime
    }
    pub fn calibrated(&self) -> bool {
        self.calibrate
    }
    /// The sign kind of the matrix (part of the spec a client needs).
    pub fn sign_kind(&self) -> SignKind {
        self.sign_kind
    }
    /// The public key of the matrix.
    pub fn key(&self) -> &Key {
        &self.key
    }
    /// The bit-packed matrix, built (once) on first use: refused when it no longer fits in
    /// the memory budget, or interrupted.
    pub fn try_matrix(&self) -> Result<&SignMatrix> {
        if let Some(a) = self.matrix.get() {
            return Ok(a);
        }
        let a = SignMatrix::new(self.key, self.m, self.k as usize, self.sign_kind)?;
        // Another thread may have built it meanwhile: same key, same matrix.
        Ok(self.matrix.get_or_init(|| a))
    }

    /// The matrix, for the infallible `Estimator` methods: the bindings only reach them
    /// through `Estimator::checked_*`, which build it with [`try_matrix`](Self::try_matrix)
    /// first (`Estimator::prepare`); a direct Rust caller gets a panic if it does not fit.
    fn matrix(&self) -> &SignMatrix {
        match self.try_matrix() {
            Ok(a) => a,
            Err(e) => panic!("the compressive-privatization matrix could not be built: {e}"),
        }
    }
    /// Whether the matrix has been built (clients privatizing small batches never build it).
    pub fn matrix_built(&self) -> bool {
        self.matrix.get().is_some()
    }
    /// n_x (number of +1 in column x) for every x.
    pub fn column_ones(&self) -> Vec<u32> {
        match self.uniform_ones {
            Some(n) => vec![n; self.k as usize],
            None => self.ones.clone(),
        }
    }
    #[inline]
    fn ones_of(&self, x: u64) -> usize {
        self.uniform_ones.unwrap_or_else(|| self.ones[x as usize]) as usize
    }
    /// `(Q(y|x) for y ∈ C_x, for y ∉ C_x)` as realized (both 1/m for a degenerate column).
    pub fn column_probabilities(&self, x: u64) -> (f64, f64) {
        self.probs[self.ones_of(x)]
    }

    /// Row x of the channel matrix (length m).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (a, b) = self.column_probabilities(x);
        // The column alone (as a client generates it) unless the matrix is already built.
        let mut own = Vec::new();
        let column = match self.matrix.get() {
            Some(matrix) => matrix.column_bits(x as usize),
            None => {
                own.resize(words_per_column(self.m), 0);
                fill_column(
                    &self.key,
                    self.m,
                    self.sign_kind,
                    x,
                    &mut own,
                    &mut Vec::new(),
                );
                &own
            }
        };
        for (y, q) in row.iter_mut().enumerate() {
            *q = if (column[y / 64] >> (y % 64)) & 1 == 1 {
                a
            } else {
                b
            };
        }
    }

    /// Expected report frequencies `Qᵀ p` (length m), by eq. (3) with the realized
    /// probabilities: `Q(y|x) = (a_x + b_x)/2 + A_yx (a_x − b_x)/2`, so
    /// `q = (Σ_x p_x (a_x + b_x)/2)·1 + A w`, `w_x = p_x (a_x − b_x)/2` (one `matvec`).
    pub fn expected_frequencies(&self, p: &[f64]) -> Vec<f64> {
        assert_eq!(
            p.len() as u64,
            self.k,
            "expected_frequencies needs p of length k"
        );
        let mut constant = 0.0;
        let w: Vec<f64> = p
            .iter()
            .enumerate()
            .map(|(x, &v)| {
                let (a, b) = self.column_probabilities(x as u64);
                constant += v * (a + b) / 2.0;
                v * (a - b) / 2.0
            })
            .collect();
        let mut q = self
            .matrix()
            .matvec(&w)
            .expect("a vector of length m fits in memory");
        q.iter_mut().for_each(|v| *v += constant);
        q
    }

    /// One report for `x`, computed as a client would: from column x generated on its own
    /// (`signs::fill_column`, O(m)), not from the stored matrix. Same reports as
    /// `IndexMechanism::sample` for the same stream.
    pub fn privatize_one<R: Rng + ?Sized>(&self, rng: &mut R, x: u64) -> Result<u64> {
        if x >= self.k {
            return Err(Error::Value(format!(
                "values must lie in [0, {}), got {x}",
                self.k
            )));
        }
        privatize_from_spec(
            rng,
            &self.key,
            self.m,
            self.sign_kind,
            self.internal_epsilon,
            x,
        )
    }
}

impl IndexMechanism for CompressivePrivatization {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.m as u64
    }
    /// Large batches (at least k values: a server or a simulation) build the matrix once;
    /// smaller ones generate each user's column on its own, as a client does.
    fn prepare(&self, batch: usize) -> Result<()> {
        if batch as u64 >= self.k {
            self.try_matrix()?;
        }
        Ok(())
    }

    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let n = self.ones_of(x);
        if let Some(a) = self.matrix.get() {
            return sample_from_column(rng, a.column_bits(x as usize), self.m, n, &self.inside[n]);
        }
        COLUMN.with(|buffers| {
            let (column, scratch) = &mut *buffers.borrow_mut();
            column.resize(words_per_column(self.m), 0);
            fill_column(&self.key, self.m, self.sign_kind, x, column, scratch);
            sample_from_column(rng, column, self.m, n, &self.inside[n])
        })
    }
}

/// How the estimator treats the all-ones term of eq. (3).
/// The estimator's four forms from an inherent `estimate_sparse(freq, n, sparsity, model)`:
/// the raw estimate (exact model, noise-level stop) and the noise-free recovery, fallible
/// (the bindings) and panicking (Rust callers that size their problems). Shared by the
/// stored and the structured (`hadamard_compressive`) matrices.
macro_rules! sparse_estimate_forms {
    () => {
        /// Sparse recovery with the exact model and the noise-level stop (the "raw" estimate);
        /// fails only on memory or an interruption.
        pub fn try_estimate_raw(&self, counts: &[u64], n: u64) -> $crate::error::Result<Vec<f64>> {
            let freq: Vec<f64> = counts.iter().map(|&c| c as f64 / n as f64).collect();
            Ok(self
                .estimate_sparse(
                    &freq,
                    Some(n),
                    None,
                    $crate::mechanisms::compressive::LinearModel::Exact,
                )?
                .estimate)
        }

        /// Noise-free recovery from exact report frequencies (returns p when it is sparse
        /// enough for OMP to find its support).
        pub fn try_estimate_from_frequencies(
            &self,
            freq: &[f64],
        ) -> $crate::error::Result<Vec<f64>> {
            Ok(self
                .estimate_sparse(
                    freq,
                    None,
                    None,
                    $crate::mechanisms::compressive::LinearModel::Exact,
                )?
                .estimate)
        }

        /// [`try_estimate_raw`](Self::try_estimate_raw) for Rust callers that size their
        /// problems (panics on memory or interruption); the bindings use the fallible form.
        pub fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64> {
            self.try_estimate_raw(counts, n)
                .unwrap_or_else(|e| panic!("compressive estimate failed: {e}"))
        }

        /// [`try_estimate_from_frequencies`](Self::try_estimate_from_frequencies), panicking.
        pub fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
            self.try_estimate_from_frequencies(freq)
                .unwrap_or_else(|e| panic!("compressive estimate failed: {e}"))
        }
    };
}
pub(crate) use sparse_estimate_forms;

/// Check the report frequencies and the sparsity of a sparse estimate; returns the atoms OMP
/// may pick (s, or min(m − 1, k) when s is unknown) and the sampling noise level of `n`
/// reports, `√((1 − ‖q̂‖²)/n)` (0 for exact frequencies, `n = None`).
pub(crate) fn sparse_plan(
    freq: &[f64],
    m: usize,
    k: usize,
    n: Option<u64>,
    sparsity: Option<usize>,
) -> Result<(usize, f64)> {
    if freq.len() != m {
        return Err(Error::Value(format!(
            "expected {m} report frequencies, got {}",
            freq.len()
        )));
    }
    let cap = (m - 1).min(k);
    if let Some(s) = sparsity {
        if s == 0 || s > cap {
            return Err(Error::Value(format!(
                "sparsity must lie in [1, min(m − 1, k)] = [1, {cap}], got {s}"
            )));
        }
    }
    let sum_sq: f64 = freq.iter().map(|f| f * f).sum();
    let noise = n.map_or(0.0, |n| ((1.0 - sum_sq).max(0.0) / n as f64).sqrt());
    Ok((sparsity.unwrap_or(cap), noise))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearModel {
    /// `q = c·1 + A w` exactly, with `w_x = p_x (a_x − b_x)/2` (the realized probabilities)
    /// and the unknown constant `c` fitted by OMP as an intercept; valid for every ±1 matrix
    /// and both regimes.
    Exact,
    /// Algorithm 1 as printed (high privacy): `y = (e^ε+1)/(e^ε−1)(√m q̂ − 1/√m)`,
    /// `B = A/√m`, OMP, then `p̂ = D'^{-1} f` with `D' = m(e^ε+1)/2 · diag(1/Z_x)`.
    Paper,
}

/// What [`CompressivePrivatization::estimate_sparse`] found.
#[derive(Clone, Debug)]
pub struct SparseEstimate {
    /// The estimate p̂' (length k), before any simplex decoder.
    pub estimate: Vec<f64>,
    /// Chosen columns, in order.
    pub support: Vec<usize>,
    /// Final OMP residual norm, in the units of the model's target.
    pub residual_norm: f64,
    /// The noise level the sample size implies, in the same units: `√((1 − ‖q̂‖²)/n)` for
    /// the exact model (scaled by `m(e^ε+1)/(e^ε−1)` for the paper's).
    pub noise_level: f64,
    /// Why OMP stopped.
    pub stop: OmpStop,
}

impl CompressivePrivatization {
    /// Probabilities `(a, b)` of column 0 (inside, outside); equal for every column of a
    /// balanced matrix (see [`column_probabilities`](Self::column_probabilities)).
    pub fn probabilities(&self) -> (f64, f64) {
        self.column_probabilities(0)
    }

    sparse_estimate_forms!();

    /// [`expected_frequencies`](Self::expected_frequencies), failing (instead of panicking)
    /// when the matrix cannot be built.
    pub fn try_expected_frequencies(&self, p: &[f64]) -> Result<Vec<f64>> {
        self.try_matrix()?;
        Ok(self.expected_frequencies(p))
    }

    /// [`channel_apply`](Self::channel_apply), failing (instead of panicking) when the matrix
    /// cannot be built.
    pub fn try_channel_apply(&self, w: &[f64]) -> Result<Vec<f64>> {
        self.try_matrix()?;
        Ok(self.channel_apply(w))
    }

    /// `Q w` (length k): `(Q w)_x = (a_x + b_x)/2 · Σw + (a_x − b_x)/2 · (Aᵀw)_x`.
    pub fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        let total: f64 = w.iter().sum();
        let at_w = self
            .matrix()
            .rmatvec(w)
            .expect("rmatvec of a length-m vector");
        at_w.iter()
            .enumerate()
            .map(|(x, &v)| {
                let (a, b) = self.column_probabilities(x as u64);
                (a + b) / 2.0 * total + (a - b) / 2.0 * v
            })
            .collect()
    }

    /// Sparse recovery of p from report counts (Algorithm 1 of the paper, or its exact form).
    ///
    /// With `sparsity = Some(s)` OMP picks s atoms (the paper assumes s known). With `None`
    /// it stops when the residual reaches the noise level of `n` reports (at most m − 1
    /// atoms): real users do not know s. `n = None` means the counts are exact frequencies
    /// (noise level 0).
    pub fn estimate_sparse(
        &self,
        freq: &[f64],
        n: Option<u64>,
        sparsity: Option<usize>,
        model: LinearModel,
    ) -> Result<SparseEstimate> {
        let m = self.m;
        let (atoms, sampling_noise) = sparse_plan(freq, m, self.k as usize, n, sparsity)?;
        let e = self.internal_epsilon.exp();
        let (target, scale, intercept) = match model {
            LinearModel::Exact => (freq.to_vec(), 1.0, true),
            LinearModel::Paper => {
                if self.regime() != Regime::High {
                    return Err(Error::Value(
                        "model='paper' is Algorithm 1, stated for the high-privacy regime; \
                         use model='exact' (valid for every regime)"
                            .into(),
                    ));
                }
                let scale = (e + 1.0) / (e - 1.0) * m as f64;
                let y = freq.iter().map(|f| scale * f - scale / m as f64).collect();
                (y, scale, false)
            }
        };
        let noise_level = scale * sampling_noise;
        let tol = sparsity.is_none().then_some(noise_level);
        let run = omp_with_intercept(self.try_matrix()?, &target, atoms, tol, intercept)?;
        let estimate = run
            .coef
            .iter()
            .enumerate()
            .map(|(x, &w)| {
                let (a, b) = self.column_probabilities(x as u64);
                match model {
                    // w_x = p_x (a_x − b_x)/2; a degenerate column (a = b) carries no signal.
                    LinearModel::Exact if a > b => 2.0 * w / (a - b),
                    LinearModel::Exact => 0.0,
                    // D'^{-1} f with 1/Z_x = b_x.
                    LinearModel::Paper => w * 2.0 / (m as f64 * (e + 1.0) * b),
                }
            })
            .collect();
        Ok(SparseEstimate {
            estimate,
            support: run.support,
            residual_norm: run.residual_norm,
            noise_level,
            stop: run.stop,
        })
    }
}

// -- simulation ------------------------------------------------------------------------

impl CompressivePrivatization {
    /// The probability `1 − α_x = (m·ρ(n_x) − n_x)/(m − n_x)` that a user of x reports
    /// uniformly inside `C_x` (the +1 rows of column x) in the mixture form of the channel
    /// (`mechanisms`, "Simulation"); 0 for a column with no −1 or no +1 entries, whose
    /// channel is uniform.
    fn own_set_weight(&self, x: u64) -> f64 {
        let n = self.ones_of(x);
        if n == 0 || n >= self.m {
            return 0.0;
        }
        let rho = inside_probability(self.m, n, self.internal_epsilon);
        (self.m as f64 * rho - n as f64) / (self.m - n) as f64
    }

    /// The report histogram of `true_counts[x]` users holding each value x, exact in law
    /// (`mechanisms`, "Simulation"): for each value with users, `K_x` of them spread
    /// uniformly over the +1 rows of column x by halving over bit ranges of the packed column
    /// (O(min(K_x, n_x)·log m) binomial draws and O(m/64·log m) popcounts); the others
    /// uniformly over all m reports. Uses the matrix (built on first use; its size was checked
    /// at construction) and one array of m counts.
    pub fn simulate(&self, key: &Key, true_counts: &[u64]) -> Result<Vec<u64>> {
        simulation_users(self.k, true_counts)?;
        let matrix = self.try_matrix()?;
        let mut counts = crate::memory::allocate_zeroed::<u64>(self.m, "the report counts")?;
        let cells = as_atomic(&mut counts);
        let uniform = draw_own_counts(
            key,
            true_counts,
            |x| self.own_set_weight(x),
            |rng, x, kept| {
                let column = matrix.column_bits(x as usize);
                let ones = self.ones_of(x) as u64;
                spread_over_ones(
                    rng,
                    column,
                    0,
                    64 * column.len(),
                    ones,
                    kept,
                    &mut |y, n| {
                        cells[y as usize].fetch_add(n, Ordering::Relaxed);
                    },
                )
            },
        )?;
        add_uniform_reports(key, &mut counts, uniform)?;
        Ok(counts)
    }
}

/// Number of set bits of the packed `column` in the bit range `[lo, hi)`.
fn ones_between(column: &[u64], lo: usize, hi: usize) -> u64 {
    let mut total = 0u64;
    let mut at = lo;
    while at < hi {
        let word = at / 64;
        let end = ((word + 1) * 64).min(hi);
        let width = end - at;
        let mask = if width == 64 {
            !0
        } else {
            ((1u64 << width) - 1) << (at % 64)
        };
        total += (column[word] & mask).count_ones() as u64;
        at = end;
    }
    total
}

/// A Multinomial(`count`; uniform over the `ones` set bits of `column` in `[lo, hi)`) draw,
/// emitted as `(row, users)`: recursive halving over bit ranges (word-aligned above one word)
/// with Binomial(count, ones_left/ones) per split — exact in law, as for `rng::spread_uniform`
/// — and direct draws of the r-th set bit inside a word once there are at most two users per
/// set bit. Checks for interruption at every range of more than one word.
pub(crate) fn spread_over_ones(
    rng: &mut StreamRng,
    column: &[u64],
    lo: usize,
    hi: usize,
    ones: u64,
    count: u64,
    emit: &mut impl FnMut(u64, u64),
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    debug_assert!(ones > 0 && ones == ones_between(column, lo, hi));
    let single_word = lo / 64 == (hi - 1) / 64;
    if single_word {
        let width = hi - lo;
        let mask = if width == 64 {
            !0
        } else {
            ((1u64 << width) - 1) << (lo % 64)
        };
        let word = column[lo / 64] & mask;
        let base = (lo / 64 * 64) as u64;
        if ones == 1 {
            emit(base + word.trailing_zeros() as u64, count);
            return Ok(());
        }
        if count <= 2 * ones {
            for _ in 0..count {
                let r = uniform_below(rng, ones) as u32;
                emit(base + select_in_word(word, r) as u64, 1);
            }
            return Ok(());
        }
    } else {
        crate::interrupt::check()?;
    }
    let mid = if single_word {
        lo + (hi - lo) / 2
    } else {
        let (first, last) = (lo / 64, hi.div_ceil(64));
        (first + (last - first) / 2) * 64
    };
    let left = ones_between(column, lo, mid);
    let to_left = binomial(rng, count, left as f64 / ones as f64);
    if left > 0 {
        spread_over_ones(rng, column, lo, mid, left, to_left, emit)?;
    }
    if ones > left {
        spread_over_ones(rng, column, mid, hi, ones - left, count - to_left, emit)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{
        assert_simulate_matches_privatize_in_law, assert_simulation_law, channel_stats, chi_square,
        empirical_row,
    };
    use super::super::{channel_matrix, privatize};
    use super::*;
    use crate::rng::{key_from_u64, stream};

    fn cp(
        k: u64,
        eps: f64,
        m: usize,
        seed: u64,
        kind: MatrixKind,
        regime: Regime,
    ) -> CompressivePrivatization {
        CompressivePrivatization::new(k, eps, m, key_from_u64(seed), kind, regime, false).unwrap()
    }

    fn full_channel(c: &CompressivePrivatization) -> Vec<f64> {
        channel_matrix(c.k(), c.m() as u64, 1 << 24, |x, r| c.channel_row(x, r)).unwrap()
    }

    /// Brute force over (x1, x2, y) of the full channel matrix.
    fn brute_force_epsilon(c: &CompressivePrivatization) -> (f64, f64) {
        channel_stats(&full_channel(c), c.k() as usize)
    }

    /// The note's closed form ε' + ln(max Z / min Z) with the realized probabilities
    /// (Z_x = 1/b_x; for degenerate columns Z = m).
    fn closed_form(c: &CompressivePrivatization) -> f64 {
        let (mut zmax, mut zmin) = (0.0f64, f64::INFINITY);
        let mut within = 0.0f64;
        for x in 0..c.k() {
            let (a, b) = c.column_probabilities(x);
            // 1/Z_x is the outside probability: ln Z = −ln b; e^ε' = a/b.
            zmax = zmax.max(1.0 / b);
            zmin = zmin.min(1.0 / b);
            within = within.max((a / b).ln());
        }
        within + (zmax / zmin).ln()
    }

    const SETTINGS: [(MatrixKind, Regime, &str); 4] = [
        (MatrixKind::Balanced, Regime::High, "balanced high"),
        (MatrixKind::Balanced, Regime::Medium, "balanced medium"),
        (MatrixKind::Rademacher, Regime::High, "rademacher"),
        (MatrixKind::Rademacher, Regime::Medium, "bernoulli medium"),
    ];

    #[test]
    fn channel_rows_sum_to_one_and_realized_epsilon_is_the_max_log_ratio() {
        for (kind, regime, name) in SETTINGS {
            for (k, m) in [(40u64, 8usize), (101, 12), (30, 6), (200, 16)] {
                for eps in [0.3f64, 1.0, 1.5] {
                    if regime == Regime::Medium && (-eps).exp() * (m as f64) < 1.0 {
                        continue;
                    }
                    for seed in 0..3 {
                        let c = cp(k, eps, m, seed, kind, regime);
                        let (ratio, sum_err) = brute_force_epsilon(&c);
                        let tag = format!("{name} k {k} m {m} eps {eps} seed {seed}");
                        assert!(sum_err < 1e-12, "{tag}: rows off by {sum_err}");
                        assert!(
                            (ratio - c.realized_epsilon()).abs() < 1e-12,
                            "{tag}: brute force {ratio} vs {}",
                            c.realized_epsilon()
                        );
                        if kind == MatrixKind::Balanced {
                            let r = c.realized_epsilon();
                            assert!(r <= eps && eps - r < 1e-12, "{tag}: realized {r}");
                            assert!(c.column_ones().iter().all(|&n| n == c.column_ones()[0]));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn realized_epsilon_is_exact_with_degenerate_and_nested_columns() {
        // Tiny m: i.i.d. columns are often all −1 / all +1 or nested, where the closed form
        // ε' + ln(Zmax/Zmin) overstates the guarantee. Compare with brute force on many seeds.
        let mut below_closed_form = 0;
        let mut degenerate = 0;
        for m in [2usize, 3, 4, 5] {
            for k in [3u64, 4, 6, 9] {
                if m as u64 >= k {
                    continue;
                }
                for seed in 0..60 {
                    for (regime, eps) in [(Regime::High, 0.8), (Regime::Medium, 0.5)] {
                        let c = cp(k, eps, m, seed, MatrixKind::Rademacher, regime);
                        let (ratio, sum_err) = brute_force_epsilon(&c);
                        assert!(sum_err < 1e-12);
                        assert!(
                            (ratio - c.realized_epsilon()).abs() < 1e-12,
                            "m {m} k {k} seed {seed}: {ratio} vs {}",
                            c.realized_epsilon()
                        );
                        let closed = closed_form(&c);
                        assert!(c.realized_epsilon() <= closed + 1e-12);
                        if c.realized_epsilon() < closed - 1e-6 {
                            below_closed_form += 1;
                        }
                        if c.column_ones().iter().any(|&n| n == 0 || n as usize == m) {
                            degenerate += 1;
                        }
                    }
                }
            }
        }
        assert!(below_closed_form > 0, "no nested case was exercised");
        assert!(degenerate > 0, "no degenerate column was exercised");
    }

    #[test]
    fn closed_form_holds_when_the_extreme_columns_are_not_nested() {
        let mut generic = 0;
        for (kind, regime, name) in &SETTINGS[2..] {
            for seed in 0..5 {
                let c = cp(300, 1.2, 24, seed, *kind, *regime);
                let (ratio, _) = brute_force_epsilon(&c);
                assert!(
                    (ratio - c.realized_epsilon()).abs() < 1e-12,
                    "{name} seed {seed}"
                );
                assert!(c.realized_epsilon() > c.epsilon(), "{name} seed {seed}");
                // Is some least-n column outside some largest-n column somewhere?
                let ones = c.column_ones();
                let (lo, hi) = (*ones.iter().min().unwrap(), *ones.iter().max().unwrap());
                let a = c.matrix();
                let words = words_per_column(24);
                let not_nested = (0..300).filter(|&x| ones[x] == lo).any(|x1| {
                    (0..300).filter(|&x| ones[x] == hi).any(|x2| {
                        (0..words).any(|t| a.column_bits(x1)[t] & !a.column_bits(x2)[t] != 0)
                    })
                });
                let closed = closed_form(&c);
                if not_nested {
                    generic += 1;
                    assert!(
                        (c.realized_epsilon() - closed).abs() < 1e-12,
                        "{name} seed {seed}"
                    );
                } else {
                    assert!(c.realized_epsilon() < closed, "{name} seed {seed}");
                }
            }
        }
        assert!(generic > 0, "no generic case was exercised");
    }

    #[test]
    fn calibration_meets_the_requested_epsilon_and_uncalibrated_is_reported_honestly() {
        for (kind, regime, name) in &SETTINGS[2..] {
            for (k, m, eps) in [(200u64, 16usize, 0.5), (120, 10, 1.3), (500, 40, 2.0)] {
                let key = key_from_u64(11);
                let cal =
                    CompressivePrivatization::new(k, eps, m, key, *kind, *regime, true).unwrap();
                let raw =
                    CompressivePrivatization::new(k, eps, m, key, *kind, *regime, false).unwrap();
                let tag = format!("{name} k {k} m {m} eps {eps}");
                let r = cal.realized_epsilon();
                assert!(r <= eps && eps - r < 1e-9, "{tag}: calibrated realized {r}");
                assert!(cal.internal_epsilon() < eps);
                let (ratio, _) = brute_force_epsilon(&cal);
                assert!((ratio - r).abs() < 1e-12, "{tag}");
                assert_eq!(raw.internal_epsilon(), eps);
                assert!(
                    raw.realized_epsilon() > eps,
                    "{tag}: {}",
                    raw.realized_epsilon()
                );
                let (ratio, _) = brute_force_epsilon(&raw);
                assert!((ratio - raw.realized_epsilon()).abs() < 1e-12, "{tag}");
                // Same public matrix either way.
                assert_eq!(cal.column_ones(), raw.column_ones());
            }
        }
        // Balanced: calibration is a no-op.
        let key = key_from_u64(3);
        let b = CompressivePrivatization::new(
            100,
            0.7,
            10,
            key,
            MatrixKind::Balanced,
            Regime::Auto,
            true,
        )
        .unwrap();
        assert_eq!(b.internal_epsilon(), 0.7);
    }

    #[test]
    fn sampler_matches_the_channel() {
        for (i, (kind, regime, name)) in SETTINGS.iter().enumerate() {
            let c = cp(50, 1.2, 16, 21, *kind, *regime);
            let mut row = vec![0.0; 16];
            for x in [0u32, 17, 49] {
                c.channel_row(x as u64, &mut row);
                let draws = 300_000;
                let freq = empirical_row(&c, x, draws, 100 + i as u64 * 10 + x as u64);
                // df = 15: P(chi2 > 37.70) = 0.001.
                let chi2 = chi_square(&freq, &row, draws);
                assert!(chi2 < 37.70, "{name} x {x}: chi2 {chi2}");
            }
        }
    }

    #[test]
    fn sampler_handles_degenerate_columns() {
        // m = 2 i.i.d.: columns all −1 or all +1 occur; the report must be uniform.
        let c = cp(40, 0.8, 2, 5, MatrixKind::Rademacher, Regime::High);
        let x = (0..40u64)
            .find(|&x| c.column_ones()[x as usize] != 1)
            .expect("a degenerate column among 40 with m = 2");
        let mut row = vec![0.0; 2];
        c.channel_row(x, &mut row);
        assert_eq!(row, vec![0.5, 0.5]);
        let freq = empirical_row(&c, x as u32, 100_000, 1);
        assert!(chi_square(&freq, &row, 100_000) < 10.83); // df 1, p = 0.001
    }

    #[test]
    fn select_matches_a_naive_scan() {
        let mut rng = stream(&key_from_u64(8), 0);
        for m in [1usize, 63, 64, 65, 130, 500] {
            for _ in 0..50 {
                let words = words_per_column(m);
                let mut col: Vec<u64> = (0..words).map(|_| rng.next_u64()).collect();
                if m % 64 != 0 {
                    col[words - 1] &= (1u64 << (m % 64)) - 1;
                }
                let bit = |y: usize| (col[y / 64] >> (y % 64)) & 1 == 1;
                let set: Vec<u64> = (0..m).filter(|&y| bit(y)).map(|y| y as u64).collect();
                let unset: Vec<u64> = (0..m).filter(|&y| !bit(y)).map(|y| y as u64).collect();
                for (r, &y) in set.iter().enumerate() {
                    assert_eq!(select_set(&col, r as u64), y);
                }
                for (r, &y) in unset.iter().enumerate() {
                    assert_eq!(select_unset(&col, r as u64), y);
                }
            }
        }
    }

    #[test]
    fn select_in_word_finds_every_set_bit_of_edge_words() {
        let mut words = vec![
            !0u64,
            1,
            1 << 63,
            0x8000_0000_0000_0001,
            0xFF00,
            0x00FF_0000_0000_0000,
        ];
        words.extend((0..64).map(|i| 1u64 << i));
        words.extend((0..64).map(|i| !(1u64 << i)));
        for w in words {
            let positions: Vec<u32> = (0..64).filter(|&i| w >> i & 1 == 1).collect();
            for (r, &p) in positions.iter().enumerate() {
                assert_eq!(select_in_word(w, r as u32), p, "word {w:#x} rank {r}");
            }
        }
    }

    #[test]
    fn column_alone_path_equals_matrix_path() {
        for (kind, regime, name) in SETTINGS {
            for (k, m) in [(300u64, 70usize), (1000, 128), (65, 64)] {
                let c =
                    CompressivePrivatization::new(k, 1.1, m, key_from_u64(4), kind, regime, true)
                        .unwrap();
                let mut a = stream(&key_from_u64(9), 3);
                let mut b = a.clone();
                let mut spec_rng = a.clone();
                for i in 0..3000u64 {
                    let x = (i * 7919) % k;
                    let from_matrix = c.sample(&mut a, x);
                    let alone = c.privatize_one(&mut b, x).unwrap();
                    let from_spec = privatize_from_spec(
                        &mut spec_rng,
                        &key_from_u64(4),
                        m,
                        c.sign_kind(),
                        c.internal_epsilon(),
                        x,
                    )
                    .unwrap();
                    assert_eq!(from_matrix, alone, "{name} k {k} m {m} x {x}");
                    assert_eq!(from_matrix, from_spec, "{name} k {k} m {m} x {x}");
                }
            }
        }
    }

    #[test]
    fn simulate_follows_the_exact_law() {
        for (i, (kind, regime, name)) in SETTINGS.iter().enumerate() {
            // m = 12 (one word), m = 70 and 130 (two and three words: halving over words).
            for (k, m) in [(30u64, 12usize), (80, 70), (150, 130)] {
                let c = cp(k, 1.4, m, 2, *kind, *regime);
                let counts: Vec<u64> = (0..k)
                    .map(|x| (x * 4099 % 900) + (x == 5) as u64 * 20_000)
                    .collect();
                let label = format!("{name} k {k} m {m}");
                let seed = 1_000 * i as u64 + m as u64;
                assert_simulation_law(&label, &c, &counts, 300, seed);
                let few: Vec<u64> = counts.iter().map(|n| n % 3).collect();
                assert_simulation_law(&format!("{label} few"), &c, &few, 300, seed + 1);
                if m == 12 {
                    assert_simulate_matches_privatize_in_law(&label, &c, &counts, 100, seed + 2);
                }
            }
        }
        // Degenerate columns (m = 2, i.i.d.): uniform reports.
        let c = cp(40, 0.8, 2, 5, MatrixKind::Rademacher, Regime::High);
        assert!(c.column_ones().iter().any(|&n| n != 1));
        let counts: Vec<u64> = (0..40).map(|x| x * 1_000_000_000).collect();
        assert_simulation_law(
            "m = 2, degenerate columns, 10^12 users",
            &c,
            &counts,
            300,
            9,
        );
    }

    #[test]
    fn expected_frequencies_match_the_channel_rows() {
        for (kind, regime, name) in SETTINGS {
            for m in [2usize, 10, 70] {
                if regime == Regime::Medium && (-0.9f64).exp() * (m as f64) < 1.0 {
                    continue;
                }
                let k = 150u64;
                let c = cp(k, 0.9, m, 13, kind, regime);
                let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
                let total: f64 = p.iter().sum();
                let p: Vec<f64> = p.iter().map(|v| v / total).collect();
                let fast = c.expected_frequencies(&p);
                let mut direct = vec![0.0; m];
                let mut row = vec![0.0; m];
                for (x, &px) in p.iter().enumerate() {
                    c.channel_row(x as u64, &mut row);
                    direct.iter_mut().zip(&row).for_each(|(d, q)| *d += px * q);
                }
                for (a, b) in fast.iter().zip(&direct) {
                    assert!((a - b).abs() < 1e-14, "{name} m {m}: {a} vs {b}");
                }
                assert!((fast.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn rejects_values_outside_the_domain() {
        let c = cp(20, 0.5, 8, 0, MatrixKind::Balanced, Regime::Auto);
        let mut out = vec![0u16; 3];
        let err = privatize(&c, &key_from_u64(0), &[1, 20, 2], &mut out).unwrap_err();
        assert!(err.to_string().contains("values[1] = 20"), "{err}");
        let mut rng = stream(&key_from_u64(0), 0);
        assert!(c.privatize_one(&mut rng, 20).is_err());
        assert!(c.privatize_one(&mut rng, 19).is_ok());
    }

    #[test]
    fn rejects_bad_parameters_with_clear_errors() {
        let new = |k: u64, eps: f64, m: usize, kind, regime| {
            CompressivePrivatization::new(k, eps, m, key_from_u64(1), kind, regime, false)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        use MatrixKind::*;
        assert!(new(100, 0.5, 9, Balanced, Regime::Auto).contains("m must be even"));
        assert!(new(100, 0.5, 100, Balanced, Regime::Auto).contains("direct mechanism"));
        assert!(new(100, 0.5, 150, Rademacher, Regime::Auto).contains("direct mechanism"));
        assert!(new(100, 0.5, 1, Rademacher, Regime::Auto).contains("at least 2"));
        assert!(new(100, 0.0, 10, Balanced, Regime::Auto).contains("epsilon"));
        assert!(new(100, -1.0, 10, Balanced, Regime::Auto).contains("epsilon"));
        assert!(new(100, f64::NAN, 10, Balanced, Regime::Auto).contains("epsilon"));
        assert!(new(1, 0.5, 10, Balanced, Regime::Auto).contains("k"));
        let too_large = new(100, 3.0, 10, Balanced, Regime::Auto);
        assert!(
            too_large.contains("ln m") && too_large.contains("larger m"),
            "{too_large}"
        );
        assert!(new(100, 3.0, 10, Rademacher, Regime::Medium).contains("e^-epsilon·m ≥ 1"));
        assert!(new(100, 1e-3, 10, Balanced, Regime::Medium).contains("regime='high'"));
        // Accepted edge cases.
        let ok = |k, eps, m, kind, regime| {
            CompressivePrivatization::new(k, eps, m, key_from_u64(1), kind, regime, false).unwrap()
        };
        assert_eq!(
            ok(100, 2.0, 10, Balanced, Regime::Auto).regime(),
            Regime::Medium
        );
        assert_eq!(
            ok(100, 1.0, 10, Balanced, Regime::Auto).regime(),
            Regime::High
        );
        assert_eq!(
            ok(100, 3.0, 10, Rademacher, Regime::High).regime(),
            Regime::High
        );
        assert_eq!(ok(3, 0.5, 2, Balanced, Regime::Auto).output_size(), 2);
        let medium = ok(1000, 2.0, 100, Balanced, Regime::Auto);
        assert!(medium.column_ones().iter().all(|&n| n == 14)); // round(100·e^-2) = 14
    }
}

#[cfg(test)]
mod client_tests {
    use super::*;
    use crate::mechanisms::privatize;
    use crate::rng::key_from_u64;

    fn balanced(seed: u64) -> CompressivePrivatization {
        CompressivePrivatization::new(
            1000,
            0.5,
            100,
            key_from_u64(seed),
            MatrixKind::Balanced,
            Regime::Auto,
            true,
        )
        .unwrap()
    }

    #[test]
    fn small_batches_never_build_the_matrix_and_match_the_server() {
        let client = balanced(9);
        let values: Vec<u32> = (0..500).map(|i| (i * 7 % 1000) as u32).collect();
        let mut from_columns = vec![0u16; values.len()];
        privatize(&client, &key_from_u64(1), &values, &mut from_columns).unwrap();
        assert!(
            !client.matrix_built(),
            "a batch below k values must not build A"
        );
        let server = balanced(9);
        server.matrix();
        let mut from_matrix = vec![0u16; values.len()];
        privatize(&server, &key_from_u64(1), &values, &mut from_matrix).unwrap();
        assert_eq!(from_columns, from_matrix);
        // A batch of at least k values builds it once, with the same reports.
        let all: Vec<u32> = (0..1000).collect();
        let mut big = vec![0u16; all.len()];
        privatize(&client, &key_from_u64(1), &all, &mut big).unwrap();
        assert!(client.matrix_built());
        let mut again = vec![0u16; all.len()];
        privatize(&balanced(9), &key_from_u64(1), &all, &mut again).unwrap();
        assert_eq!(big, again);
    }

    #[test]
    fn balanced_realized_epsilon_needs_no_matrix_and_matches_the_channel() {
        let m = balanced(3);
        let realized = m.realized_epsilon();
        assert!(!m.matrix_built());
        assert!(realized <= 0.5 && 0.5 - realized < 1e-12);
        let mut worst = 0.0f64;
        let (rows, cols) = (1000usize, 100usize);
        let mut q = vec![0.0; rows * cols];
        for (x, row) in q.chunks_exact_mut(cols).enumerate() {
            m.channel_row(x as u64, row);
        }
        for y in 0..cols {
            let column = (0..rows).map(|x| q[x * cols + y]);
            let (lo, hi) = column.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
            worst = worst.max((hi / lo).ln());
        }
        assert!((worst - realized).abs() < 1e-12);
    }
}
