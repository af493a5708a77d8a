//! Pairwise budget verification: the exact check that a channel is E-LDP (Acharya, Bonawitz,
//! Kairouz, Ramage & Sun, "Context-aware local differential privacy", ICML 2020, Section 2).
//!
//! A channel `Q` (k × |Y| row-major, `Q[x, y] = Q(y | x)`) is E-LDP for a budget matrix `E`
//! (k × k) when `Q(y|x) ≤ e^{E[x, x']} Q(y|x')` for all x, x', y. Both entry points reduce to
//! one quantity per ordered pair, over the outputs possible under x:
//!
//! ```text
//! M[x, x'] = max_{y : Q(y|x) > 0} (ln Q(y|x) − ln Q(y|x'))      (−∞ over no output)
//! ```
//!
//! * [`verify`]: the worst violation `max (M[x, x'] − E[x, x'])` over the constrained pairs
//!   (x ≠ x', `E[x, x']` finite), with its triple (x, x', y);
//! * [`realized_budgets`]: the smallest budget matrix Q satisfies, `max(M[x, x'], 0)` off the
//!   diagonal and 0 on it.
//!
//! # Exactness
//! Every amount is the f64 value of the reference formula `(ln a − ln b) − E[x, x']`, bit for
//! bit: the log channel `L = ln Q` is computed once with `f64::ln` (the C library's `log`,
//! the function Python's `math.log` calls; 0 gives −∞), each difference is one correctly
//! rounded subtraction (on the vector paths a fused multiply-add by 1, the same bits), and
//! maxima are exact whatever their order. Subtracting E after the maximum
//! changes nothing: rounding is monotone, so `fl(max_y d_y − e) = max_y fl(d_y − e)`. The
//! kernel also takes minima: `M[x', x]` is `−min_y (L[x, y] − L[x', y])` over the outputs
//! with `Q(y|x') > 0`, and `fl(−z) = −fl(z)`, so one subtraction serves both orders of a pair.
//!
//! The tie rule is the lexicographically first triple (x, x', y) among those of the maximal
//! amount: pairs are reduced with a total order (amount, then (x, x')), so the result is the
//! same on any number of threads, and the output y of the winning pair is recomputed after
//! the maximum pass as the first y whose own amount `fl(fl(L[x, y] − L[x', y]) − E[x, x'])`
//! equals it.
//!
//! # The kernel
//! No k × k × |Y| temporary: the pairs are cut into blocks of [`TILE`] × [`TILE`] rows of L
//! (the unordered pairs of row tiles I ≤ J, on rayon), the outputs into chunks of [`CHUNK`]
//! so that a block's rows stay in L2 while register blocks sweep them, and a register block
//! of RX × RY rows keeps its running maxima and minima in vector registers: per output
//! lane one subtraction, one max and one min serve two ordered pairs. The subtraction is a
//! fused multiply-add `fma(a, 1, −b)`, bit-identical to `a − b`, which leaves the add pipes
//! to the maxima and minima (see `Lanes::difference`). The −∞/NaN cases are
//! branch-free: `ln 0 = −∞`, so an impossible output of x gives `−∞ − b = −∞` (never a max),
//! one impossible under x' only gives `a − (−∞) = +∞` (the violation it is), and an output
//! impossible under both gives `(−∞) − (−∞) = NaN`, which the selects `if d > m { d } else
//! { m }` (x86 `maxpd`) and `if d < m { d } else { m }` ignore. Rows are padded with −∞ to a
//! multiple of [`LANES`] outputs, which the same rule ignores, so there is no tail loop. The
//! block kernel is written with explicit vector instructions for AVX-512 and AVX2 (+FMA),
//! SSE2 as the x86-64 baseline and scalar code elsewhere, picked at run time, with register
//! blocks sized to each register file; all give the same bits.
//!
//! Memory: the log channel (k × |Y| rounded up to [`LANES`], f64) and, for
//! [`realized_budgets`], the k × k result, declared to the memory guard before allocating
//! ([`footprint`]); blocks use fixed-size stack buffers. Interruption: [`crate::interrupt`] is
//! checked per block and per output chunk.

use crate::error::{Error, Result};
use crate::memory::{allocate_zeroed, Footprint};
use rayon::prelude::*;

/// Rows of L per tile: a block pairs two tiles.
pub const TILE: usize = 32;
/// Outputs per chunk: a block's 2 · TILE row pieces (512 KiB) stay in L2.
pub const CHUNK: usize = 1024;
/// Rows of L are padded to a multiple of this many outputs (the widest vector, 8 × f64).
pub const LANES: usize = 8;
/// Below this many (pair, output) operations, a call stays on the calling thread.
const PARALLEL_WORK: u128 = 1 << 22;

/// The worst violation of `Q(y|x) ≤ e^{E[x, x']} Q(y|x')` (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Violation {
    /// `max (ln Q(y|x) − ln Q(y|x')) − E[x, x']` over the constrained triples (x ≠ x',
    /// `E[x, x']` finite, `Q(y|x) > 0`), in nats: ≤ 0 iff Q is E-LDP; +∞ when an output
    /// possible under x is impossible under x' with a finite budget; −∞ when nothing is
    /// constrained.
    pub amount: f64,
    /// `(x, x', y)` of the worst triple, the lexicographically first among exact ties; None
    /// when nothing is constrained.
    pub triple: Option<(usize, usize, usize)>,
}

/// What [`footprint`] declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// [`verify`]: the log channel.
    Verify,
    /// [`realized_budgets`]: the log channel and the k × k result.
    RealizedBudgets,
}

/// Outputs per row of the padded log channel.
fn stride(outputs: usize) -> usize {
    outputs.div_ceil(LANES) * LANES
}

/// Everything `op` allocates for a k × `outputs` channel (the memory guard's declaration).
pub fn footprint(k: usize, outputs: usize, op: Operation) -> Footprint {
    let what = match op {
        Operation::Verify => "privacy.verify",
        Operation::RealizedBudgets => "privacy.realized_budgets",
    };
    let padded = (outputs as u128).div_ceil(LANES as u128) * LANES as u128;
    let mut f = Footprint::new(format!("{what} of a {k} × {outputs} channel")).add(
        "the log channel",
        k as u128 * padded,
        8,
    );
    if op == Operation::RealizedBudgets {
        f = f.add("the k × k budget matrix", k as u128 * k as u128, 8);
    }
    f.hint("the cost is k × |Y| for the log channel (and k × k for realized_budgets)")
}

/// The worst violation of E-LDP by the channel `q` (k × `outputs`, row-major) against the
/// budget matrix `budgets` (k × k, row-major: entries ≥ 0 or +∞, zero diagonal).
pub fn verify(q: &[f64], k: usize, outputs: usize, budgets: &[f64]) -> Result<Violation> {
    verify_with(Kernel::detect(), q, k, outputs, budgets)
}

fn verify_with(
    kernel: Kernel,
    q: &[f64],
    k: usize,
    outputs: usize,
    budgets: &[f64],
) -> Result<Violation> {
    check_shape(q, k, outputs)?;
    check_budgets(budgets, k)?;
    footprint(k, outputs, Operation::Verify).check()?;
    let log = LogChannel::new(q, k, outputs)?;
    let best = reduce_blocks(&log, |i, j| {
        let mut extrema = Extrema::new();
        kernel.block(&log, i, j, &mut extrema)?;
        Ok(extrema.worst(&log, budgets, i, j))
    })?;
    let Some(Candidate { amount, x, x2 }) = best.filter(|c| c.amount > f64::NEG_INFINITY) else {
        return Ok(Violation {
            amount: f64::NEG_INFINITY,
            triple: None,
        });
    };
    let y = log.first_output(x, x2, budgets[x * k + x2], amount)?;
    Ok(Violation {
        amount,
        triple: Some((x, x2, y)),
    })
}

/// The smallest budget matrix the channel `q` (k × `outputs`, row-major) satisfies:
/// `max(M[x, x'], 0)` off the diagonal (+∞ when an output possible under x is impossible
/// under x'), 0 on it. Row-major k × k.
pub fn realized_budgets(q: &[f64], k: usize, outputs: usize) -> Result<Vec<f64>> {
    realized_budgets_with(Kernel::detect(), q, k, outputs)
}

fn realized_budgets_with(kernel: Kernel, q: &[f64], k: usize, outputs: usize) -> Result<Vec<f64>> {
    check_shape(q, k, outputs)?;
    footprint(k, outputs, Operation::RealizedBudgets).check()?;
    let log = LogChannel::new(q, k, outputs)?;
    let mut out = allocate_zeroed::<f64>(k * k, "the k × k budget matrix")?;
    let shared = SharedOut(out.as_mut_ptr());
    reduce_blocks(&log, |i, j| {
        let mut extrema = Extrema::new();
        kernel.block(&log, i, j, &mut extrema)?;
        // SAFETY: block (i, j) writes rows of tile i × columns of tile j and rows of tile j ×
        // columns of tile i, inside the k × k buffer; each unordered pair of tiles is one
        // block, so no two blocks write the same entry, and `out` outlives the reduction.
        unsafe { extrema.write_realized(shared, k, i, j) };
        Ok(None)
    })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Validation

fn check_shape(q: &[f64], k: usize, outputs: usize) -> Result<()> {
    if k == 0 || outputs == 0 {
        return Err(Error::Value(format!(
            "Q must be a non-empty 2-D array (inputs × outputs), got shape ({k}, {outputs})"
        )));
    }
    if k.checked_mul(outputs) != Some(q.len()) {
        return Err(Error::Value(format!(
            "Q has {} entries, not {k} × {outputs}",
            q.len()
        )));
    }
    Ok(())
}

/// A budget matrix: k × k, entries ≥ 0 or +∞ (no NaN), zero diagonal; the first offending
/// entry is named, in the order the Python layer checks them.
fn check_budgets(e: &[f64], k: usize) -> Result<()> {
    if k.checked_mul(k) != Some(e.len()) {
        return Err(Error::Value(format!(
            "budgets must be {k} × {k} (one row per input), got {} entries",
            e.len()
        )));
    }
    // `!(v >= 0)` is true for NaN and negative values.
    if let Some(i) = e.iter().position(|v| !(*v >= 0.0)) {
        return Err(Error::Value(format!(
            "budgets must be ≥ 0 or +inf: budgets[{}, {}] = {}",
            i / k,
            i % k,
            e[i]
        )));
    }
    if let Some(x) = (0..k).find(|&x| e[x * k + x] != 0.0) {
        return Err(Error::Value(format!(
            "budgets must have a zero diagonal: budgets[{x}, {x}] = {}",
            e[x * k + x]
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The log channel

/// `L = ln Q`, rows padded with −∞ to `stride` outputs.
struct LogChannel {
    data: Vec<f64>,
    k: usize,
    outputs: usize,
    stride: usize,
}

impl LogChannel {
    /// `ln q` (the C library's `log`; `ln 0 = −∞`), checking that q holds probabilities on
    /// the way: `ln` is NaN for NaN and negative entries and +∞ for +∞, so a finite-or-−∞
    /// log is exactly a finite, non-negative entry (−0 counts as 0).
    fn new(q: &[f64], k: usize, outputs: usize) -> Result<Self> {
        let stride = stride(outputs);
        let mut data = allocate_zeroed::<f64>(k * stride, "the log channel")?;
        let rows_per_task = (1 << 16) / stride + 1;
        let fill = |(task, rows): (usize, &mut [f64])| -> Result<bool> {
            crate::interrupt::check()?;
            let first = task * rows_per_task;
            let mut valid = true;
            for (r, row) in rows.chunks_exact_mut(stride).enumerate() {
                let src = &q[(first + r) * outputs..(first + r + 1) * outputs];
                for (l, &v) in row.iter_mut().zip(src) {
                    *l = v.ln();
                    valid &= *l < f64::INFINITY;
                }
                row[outputs..].fill(f64::NEG_INFINITY);
            }
            Ok(valid)
        };
        let valid = if q.len() < 1 << 16 {
            data.chunks_mut(rows_per_task * stride)
                .enumerate()
                .map(fill)
                .try_fold(true, |a, b| Ok::<_, Error>(a & b?))?
        } else {
            data.par_chunks_mut(rows_per_task * stride)
                .enumerate()
                .map(fill)
                .try_reduce(|| true, |a, b| Ok(a & b))?
        };
        if !valid {
            let i = q
                .iter()
                .position(|v| !(v.ln() < f64::INFINITY))
                .unwrap_or(0);
            return Err(Error::Value(format!(
                "Q must hold probabilities (finite, ≥ 0): Q[{}, {}] = {}",
                i / outputs,
                i % outputs,
                q[i]
            )));
        }
        Ok(Self {
            data,
            k,
            outputs,
            stride,
        })
    }

    fn row(&self, x: usize) -> &[f64] {
        &self.data[x * self.stride..(x + 1) * self.stride]
    }

    fn tiles(&self) -> usize {
        self.k.div_ceil(TILE)
    }

    /// The first y with `Q(y|x) > 0` whose amount `fl(fl(L[x, y] − L[x', y]) − e)` is
    /// `amount` (the maximum over y, so one exists).
    fn first_output(&self, x: usize, x2: usize, e: f64, amount: f64) -> Result<usize> {
        let (a, b) = (self.row(x), self.row(x2));
        (0..self.outputs)
            .find(|&y| a[y] > f64::NEG_INFINITY && (a[y] - b[y]) - e == amount)
            .ok_or_else(|| {
                Error::Runtime(format!(
                    "internal error in privacy.verify (please report): no output of the pair \
                     ({x}, {x2}) reaches its maximum {amount}"
                ))
            })
    }
}

// ---------------------------------------------------------------------------------------
// Blocks and their reduction

/// A constrained ordered pair and its amount `M[x, x'] − E[x, x']`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Candidate {
    amount: f64,
    x: usize,
    x2: usize,
}

/// The better of two candidates in the total order (larger amount, then the
/// lexicographically first pair): associative and commutative, so any reduction tree gives
/// the same result. Amounts are never NaN (M is never NaN, E is finite here).
fn better(a: Option<Candidate>, b: Option<Candidate>) -> Option<Candidate> {
    match (a, b) {
        (None, c) | (c, None) => c,
        (Some(a), Some(b)) => {
            let a_wins = a.amount > b.amount || (a.amount == b.amount && (a.x, a.x2) < (b.x, b.x2));
            Some(if a_wins { a } else { b })
        }
    }
}

/// `f(i, j)` over the blocks of tiles i ≤ j, reduced with [`better`]; on rayon when the
/// work pays for it.
fn reduce_blocks<F>(log: &LogChannel, f: F) -> Result<Option<Candidate>>
where
    F: Fn(usize, usize) -> Result<Option<Candidate>> + Sync + Send,
{
    let tiles = log.tiles();
    let work = log.k as u128 * log.k as u128 * log.stride as u128;
    if work < PARALLEL_WORK {
        let mut best = None;
        for i in 0..tiles {
            for j in i..tiles {
                best = better(best, f(i, j)?);
            }
        }
        return Ok(best);
    }
    (0..tiles)
        .into_par_iter()
        .flat_map(|i| (i..tiles).into_par_iter().map(move |j| (i, j)))
        .map(|(i, j)| f(i, j))
        .try_reduce(|| None, |a, b| Ok(better(a, b)))
}

/// Per pair (x in tile i, x' in tile j): `hi = max_y d` and `lo = min_y d` of
/// `d = L[x, y] − L[x', y]` (NaN ignored).
struct Extrema {
    hi: [[f64; TILE]; TILE],
    lo: [[f64; TILE]; TILE],
}

/// The output buffer of [`realized_budgets`], shared by the blocks (disjoint writes).
#[derive(Clone, Copy)]
struct SharedOut(*mut f64);
// SAFETY: blocks write disjoint entries (see `realized_budgets`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

/// Row range of tile t.
fn tile_rows(t: usize, k: usize) -> (usize, usize) {
    let start = t * TILE;
    (start, (k - start).min(TILE))
}

impl Extrema {
    /// Nothing seen yet (16 KiB, on the stack of the thread running the block).
    fn new() -> Self {
        Self {
            hi: [[f64::NEG_INFINITY; TILE]; TILE],
            lo: [[f64::INFINITY; TILE]; TILE],
        }
    }

    /// Visit the ordered pairs of block (i, j) with `M[x, x']`: from `hi` for (x in i,
    /// x' in j), and from `−lo` for the reverse pairs when i ≠ j (a diagonal block holds both
    /// orders in `hi`). The diagonal x = x' is skipped.
    #[inline]
    fn for_each_pair(
        &self,
        k: usize,
        i: usize,
        j: usize,
        mut visit: impl FnMut(usize, usize, f64),
    ) {
        let (i0, ni) = tile_rows(i, k);
        let (j0, nj) = tile_rows(j, k);
        for a in 0..ni {
            for b in 0..nj {
                let (x, x2) = (i0 + a, j0 + b);
                if x != x2 {
                    visit(x, x2, self.hi[a][b]);
                }
                if i != j {
                    visit(x2, x, -self.lo[a][b]);
                }
            }
        }
    }

    /// The block's best constrained candidate.
    fn worst(&self, log: &LogChannel, e: &[f64], i: usize, j: usize) -> Option<Candidate> {
        let k = log.k;
        let mut best = None;
        self.for_each_pair(k, i, j, |x, x2, m| {
            let budget = e[x * k + x2];
            if budget < f64::INFINITY {
                let c = Candidate {
                    amount: m - budget,
                    x,
                    x2,
                };
                best = better(best, Some(c));
            }
        });
        best
    }

    /// Write `max(M, 0)` of the block's pairs into the k × k buffer (its diagonal stays 0).
    ///
    /// # Safety
    /// `out` points to k × k f64 and no other thread writes the entries of block (i, j).
    unsafe fn write_realized(&self, out: SharedOut, k: usize, i: usize, j: usize) {
        self.for_each_pair(k, i, j, |x, x2, m| {
            // `m > 0` as numpy's maximum(m, 0) has it; m is never NaN.
            let value = if m > 0.0 { m } else { 0.0 };
            // SAFETY: x, x2 < k, and the caller guarantees exclusive access.
            unsafe { *out.0.add(x * k + x2) = value };
        });
    }
}

// ---------------------------------------------------------------------------------------
// The block kernel, per instruction set

/// The block kernel for this CPU.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Baseline,
}

impl Kernel {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
                return Kernel::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Kernel::Avx2;
            }
        }
        Kernel::Baseline
    }

    /// The extrema of block (i, j) (tiles i ≤ j) into `out` (fresh from [`Extrema::new`]).
    fn block(self, log: &LogChannel, i: usize, j: usize, out: &mut Extrema) -> Result<()> {
        crate::interrupt::check()?;
        match self {
            // SAFETY: the CPU has the features each function is compiled for (`detect`).
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { block_avx512(log, i, j, out) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { block_avx2(log, i, j, out) },
            Kernel::Baseline => block_baseline(log, i, j, out),
        }
    }
}

/// 32 vector registers of 8 lanes: a 3 × 2 register block keeps 12 accumulators and 5 rows
/// (4 × 2 and 2 × 2 measured no faster on AMD Zen 4; 4 × 3 spills). There the loop runs at
/// about 14 cycles per 8 outputs × 6 pairs, against the 12 its maxima and minima need on the
/// two add pipes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn block_avx512(log: &LogChannel, i: usize, j: usize, out: &mut Extrema) -> Result<()> {
    block_extrema::<lanes::Avx512, 3, 2>(log, i, j, out)
}

/// 16 vector registers of 4 lanes: a 2 × 2 register block (8 accumulators, 4 rows).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2(log: &LogChannel, i: usize, j: usize, out: &mut Extrema) -> Result<()> {
    block_extrema::<lanes::Avx2, 2, 2>(log, i, j, out)
}

/// The baseline: SSE2 (2 lanes) on x86-64, scalar elsewhere.
fn block_baseline(log: &LogChannel, i: usize, j: usize, out: &mut Extrema) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    return block_extrema::<lanes::Sse2, 2, 2>(log, i, j, out);
    #[cfg(not(target_arch = "x86_64"))]
    return block_extrema::<f64, 2, 2>(log, i, j, out);
}

/// The extrema of block (i, j): chunks of outputs, register blocks of RX rows of tile i ×
/// RY rows of tile j (rows past a tile's end repeat its last row; their results are dropped).
#[inline(always)]
fn block_extrema<V: Lanes, const RX: usize, const RY: usize>(
    log: &LogChannel,
    i: usize,
    j: usize,
    out: &mut Extrema,
) -> Result<()> {
    let (i0, ni) = tile_rows(i, log.k);
    let (j0, nj) = tile_rows(j, log.k);
    let mut start = 0;
    while start < log.stride {
        crate::interrupt::check()?;
        let end = (start + CHUNK).min(log.stride);
        for a in (0..ni).step_by(RX) {
            let rows_a: [&[f64]; RX] =
                std::array::from_fn(|r| &log.row(i0 + (a + r).min(ni - 1))[start..end]);
            for b in (0..nj).step_by(RY) {
                let rows_b: [&[f64]; RY] =
                    std::array::from_fn(|r| &log.row(j0 + (b + r).min(nj - 1))[start..end]);
                let (hi, lo) = register_block::<V, RX, RY>(&rows_a, &rows_b);
                for r in 0..RX.min(ni - a) {
                    for c in 0..RY.min(nj - b) {
                        let (h, l) = (&mut out.hi[a + r][b + c], &mut out.lo[a + r][b + c]);
                        *h = if hi[r][c] > *h { hi[r][c] } else { *h };
                        *l = if lo[r][c] < *l { lo[r][c] } else { *l };
                    }
                }
            }
        }
        start = end;
    }
    Ok(())
}

/// `(max_y d, min_y d)` of `d = a_r[y] − b_c[y]` for every (r, c), NaN ignored, over rows of
/// equal length, a multiple of `V::WIDTH` (the rows of L are padded to [`LANES`]). The
/// RX · RY maxima and minima stay in vector registers: per vector of outputs, RX + RY loads,
/// RX · RY subtractions, maxima and minima.
#[inline(always)]
fn register_block<V: Lanes, const RX: usize, const RY: usize>(
    a: &[&[f64]; RX],
    b: &[&[f64]; RY],
) -> ([[f64; RY]; RX], [[f64; RY]; RX]) {
    let len = a[0].len();
    assert!(
        len.is_multiple_of(V::WIDTH)
            && a.iter().all(|r| r.len() == len)
            && b.iter().all(|r| r.len() == len),
        "rows of equal length, a multiple of the vector width"
    );
    // SAFETY (all `unsafe` below): rows hold `len` entries, o + WIDTH ≤ len (asserted
    // above); the vector instructions are those of the caller's target features (`Lanes`).
    let mut hi = [[unsafe { V::splat(f64::NEG_INFINITY) }; RY]; RX];
    let mut lo = [[unsafe { V::splat(f64::INFINITY) }; RY]; RX];
    // A 1 the compiler cannot see, so that `difference` keeps its fused multiply-add.
    let one = unsafe { V::splat(std::hint::black_box(1.0)) };
    let mut o = 0;
    while o < len {
        unsafe {
            let av: [V; RX] = std::array::from_fn(|r| V::load(a[r].as_ptr().add(o)));
            let bv: [V; RY] = std::array::from_fn(|c| V::load(b[c].as_ptr().add(o)));
            for r in 0..RX {
                for c in 0..RY {
                    let d = V::difference(av[r], bv[c], one);
                    hi[r][c] = V::max_ignoring_nan(d, hi[r][c]);
                    lo[r][c] = V::min_ignoring_nan(d, lo[r][c]);
                }
            }
        }
        o += V::WIDTH;
    }
    unsafe {
        (
            std::array::from_fn(|r| std::array::from_fn(|c| V::reduce_max(hi[r][c]))),
            std::array::from_fn(|r| std::array::from_fn(|c| V::reduce_min(lo[r][c]))),
        )
    }
}

/// A vector of f64 lanes for [`register_block`]: explicit instructions, since the
/// autovectorizer turned the register block's accumulators into gathers and scatters.
///
/// # Safety
/// Every method may use the implementation's instructions: call them only from code
/// compiled with (and dispatched on) those target features.
trait Lanes: Copy {
    const WIDTH: usize;
    unsafe fn splat(v: f64) -> Self;
    /// `WIDTH` f64 from `p` (unaligned).
    unsafe fn load(p: *const f64) -> Self;
    /// `a − b` per lane, correctly rounded. With FMA it is computed as `fma(a, one, −b)`
    /// (`one` = 1.0): `a · 1` is exact and the sum is rounded once, so the result is the
    /// subtraction's, bit for bit (±∞ and NaN alike), but it runs on the multiply pipes and
    /// leaves the add pipes to the maxima and minima (on AMD Zen 4, measured: 2 cycles per
    /// 8-lane subtraction + max + min instead of 3).
    unsafe fn difference(a: Self, b: Self, one: Self) -> Self;
    /// Per lane `if d > m { d } else { m }` (x86 `maxpd d, m`): a NaN `d` keeps `m`.
    unsafe fn max_ignoring_nan(d: Self, m: Self) -> Self;
    /// Per lane `if d < m { d } else { m }` (x86 `minpd d, m`).
    unsafe fn min_ignoring_nan(d: Self, m: Self) -> Self;
    /// The largest lane (lanes are never NaN here).
    unsafe fn reduce_max(self) -> f64;
    /// The smallest lane (lanes are never NaN here).
    unsafe fn reduce_min(self) -> f64;
}

/// One lane: the portable baseline.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
impl Lanes for f64 {
    const WIDTH: usize = 1;
    #[inline(always)]
    unsafe fn splat(v: f64) -> Self {
        v
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> Self {
        unsafe { *p }
    }
    #[inline(always)]
    unsafe fn difference(a: Self, b: Self, _one: Self) -> Self {
        a - b
    }
    #[inline(always)]
    unsafe fn max_ignoring_nan(d: Self, m: Self) -> Self {
        if d > m {
            d
        } else {
            m
        }
    }
    #[inline(always)]
    unsafe fn min_ignoring_nan(d: Self, m: Self) -> Self {
        if d < m {
            d
        } else {
            m
        }
    }
    #[inline(always)]
    unsafe fn reduce_max(self) -> f64 {
        self
    }
    #[inline(always)]
    unsafe fn reduce_min(self) -> f64 {
        self
    }
}

#[cfg(target_arch = "x86_64")]
mod lanes {
    //! x86-64 vectors. `_mm*_max_pd(d, m)` is `maxpd`: when either operand is NaN it returns
    //! the second, exactly the select `if d > m { d } else { m }`.
    use super::Lanes;
    use std::arch::x86_64::*;

    macro_rules! lanes {
        ($name:ident, $vector:ty, $width:expr, $set1:ident, $load:ident, $store:ident,
         |$a:ident, $b:ident, $one:ident| $difference:expr, $max:ident, $min:ident) => {
            #[derive(Clone, Copy)]
            pub(super) struct $name($vector);

            impl $name {
                #[inline(always)]
                unsafe fn lanes(self) -> [f64; $width] {
                    let mut out = [0.0; $width];
                    unsafe { $store(out.as_mut_ptr(), self.0) };
                    out
                }
            }

            impl Lanes for $name {
                const WIDTH: usize = $width;
                #[inline(always)]
                unsafe fn splat(v: f64) -> Self {
                    Self(unsafe { $set1(v) })
                }
                #[inline(always)]
                unsafe fn load(p: *const f64) -> Self {
                    Self(unsafe { $load(p) })
                }
                #[inline(always)]
                unsafe fn difference($a: Self, $b: Self, $one: Self) -> Self {
                    Self(unsafe { $difference })
                }
                #[inline(always)]
                unsafe fn max_ignoring_nan(d: Self, m: Self) -> Self {
                    Self(unsafe { $max(d.0, m.0) })
                }
                #[inline(always)]
                unsafe fn min_ignoring_nan(d: Self, m: Self) -> Self {
                    Self(unsafe { $min(d.0, m.0) })
                }
                #[inline(always)]
                unsafe fn reduce_max(self) -> f64 {
                    let v = unsafe { self.lanes() };
                    v.iter()
                        .fold(f64::NEG_INFINITY, |m, &x| if x > m { x } else { m })
                }
                #[inline(always)]
                unsafe fn reduce_min(self) -> f64 {
                    let v = unsafe { self.lanes() };
                    v.iter()
                        .fold(f64::INFINITY, |m, &x| if x < m { x } else { m })
                }
            }
        };
    }

    lanes!(
        Avx512,
        __m512d,
        8,
        _mm512_set1_pd,
        _mm512_loadu_pd,
        _mm512_storeu_pd,
        |a, b, one| _mm512_fmsub_pd(a.0, one.0, b.0),
        _mm512_max_pd,
        _mm512_min_pd
    );
    lanes!(
        Avx2,
        __m256d,
        4,
        _mm256_set1_pd,
        _mm256_loadu_pd,
        _mm256_storeu_pd,
        |a, b, one| _mm256_fmsub_pd(a.0, one.0, b.0),
        _mm256_max_pd,
        _mm256_min_pd
    );
    lanes!(
        Sse2,
        __m128d,
        2,
        _mm_set1_pd,
        _mm_loadu_pd,
        _mm_storeu_pd,
        |a, b, _one| _mm_sub_pd(a.0, b.0),
        _mm_max_pd,
        _mm_min_pd
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: deterministic test inputs.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn uniform(&mut self) -> f64 {
            (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
        }
    }

    /// A random channel with some zero entries, rows normalized, and a budget matrix with
    /// some +∞ entries.
    fn random_case(seed: u64, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut g = Rng(seed);
        let mut q: Vec<f64> = (0..k * n)
            .map(|_| {
                if g.next().is_multiple_of(7) {
                    0.0
                } else {
                    g.uniform() + 1e-3
                }
            })
            .collect();
        for row in q.chunks_mut(n) {
            let s: f64 = row.iter().sum();
            if s > 0.0 {
                row.iter_mut().for_each(|v| *v /= s);
            }
        }
        let e = (0..k * k)
            .map(|i| match (i / k == i % k, g.next() % 5) {
                (true, _) => 0.0,
                (false, 0) => f64::INFINITY,
                _ => 2.0 * g.uniform(),
            })
            .collect();
        (q, e)
    }

    /// The brute-force triple loop, the definition itself.
    fn reference(q: &[f64], k: usize, n: usize, e: &[f64]) -> Violation {
        let mut best = Violation {
            amount: f64::NEG_INFINITY,
            triple: None,
        };
        for x in 0..k {
            for x2 in 0..k {
                let budget = e[x * k + x2];
                if x == x2 || budget == f64::INFINITY {
                    continue;
                }
                for y in 0..n {
                    let (a, b) = (q[x * n + y], q[x2 * n + y]);
                    if a > 0.0 {
                        let amount = (a.ln() - b.ln()) - budget;
                        if amount > best.amount {
                            best = Violation {
                                amount,
                                triple: Some((x, x2, y)),
                            };
                        }
                    }
                }
            }
        }
        best
    }

    fn reference_realized(q: &[f64], k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; k * k];
        for x in 0..k {
            for x2 in 0..k {
                if x == x2 {
                    continue;
                }
                let mut m = f64::NEG_INFINITY;
                for y in 0..n {
                    let (a, b) = (q[x * n + y], q[x2 * n + y]);
                    if a > 0.0 && a.ln() - b.ln() > m {
                        m = a.ln() - b.ln();
                    }
                }
                out[x * k + x2] = if m > 0.0 { m } else { 0.0 };
            }
        }
        out
    }

    /// Every kernel this CPU can run (the dispatch picks only the widest).
    fn kernels() -> Vec<Kernel> {
        let mut all = vec![Kernel::Baseline];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                all.push(Kernel::Avx2);
            }
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
                all.push(Kernel::Avx512);
            }
        }
        assert!(all.contains(&Kernel::detect()));
        all
    }

    #[test]
    fn equals_the_triple_loop_bit_for_bit() {
        // Sizes around the tile, register-block and lane boundaries, and past the parallel
        // threshold (k = 70, n = 1100: several tiles and output chunks).
        for (seed, k, n) in [
            (1, 1, 1),
            (2, 2, 1),
            (3, 3, 5),
            (4, 7, 9),
            (5, 33, 17),
            (6, 64, 8),
            (7, 70, 1100),
            (8, 5, 2049),
        ] {
            let (q, e) = random_case(seed, k, n);
            let want = reference(&q, k, n, &e);
            let want_realized = reference_realized(&q, k, n);
            for kernel in kernels() {
                let got = verify_with(kernel, &q, k, n, &e).unwrap();
                assert_eq!(got.triple, want.triple, "{kernel:?}, k = {k}, n = {n}");
                assert_eq!(got.amount.to_bits(), want.amount.to_bits(), "{kernel:?}");
                let got = realized_budgets_with(kernel, &q, k, n).unwrap();
                let same = got
                    .iter()
                    .zip(&want_realized)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{kernel:?}, k = {k}, n = {n}");
            }
        }
    }

    #[test]
    fn ties_go_to_the_lexicographically_first_triple() {
        // Every row equal: all amounts are −E; equal budgets tie every pair and output.
        let (k, n) = (40, 12);
        let q = vec![1.0 / n as f64; k * n];
        let mut e = vec![0.5; k * k];
        (0..k).for_each(|x| e[x * k + x] = 0.0);
        let v = verify(&q, k, n, &e).unwrap();
        assert_eq!(v.triple, Some((0, 1, 0)));
        assert_eq!(v.amount, -0.5);
        // A smaller budget on a late pair makes it the worst; its first output is reported.
        e[37 * k + 3] = 0.25;
        assert_eq!(verify(&q, k, n, &e).unwrap().triple, Some((37, 3, 0)));
    }

    #[test]
    fn impossible_outputs_and_unconstrained_pairs() {
        // Row 1 never outputs 2: (0, 1) is violated infinitely at y = 2, unless unconstrained.
        let q = [0.2, 0.3, 0.5, 0.5, 0.5, 0.0];
        let mut e = [0.0, 1.0, 1.0, 0.0];
        let v = verify(&q, 2, 3, &e).unwrap();
        assert_eq!(v.amount, f64::INFINITY);
        assert_eq!(v.triple, Some((0, 1, 2)));
        e[1] = f64::INFINITY;
        let v = verify(&q, 2, 3, &e).unwrap();
        assert_eq!(v.triple, Some((1, 0, 0)));
        assert_eq!(v.amount, (0.5f64.ln() - 0.2f64.ln()) - 1.0);
        e[2] = f64::INFINITY;
        let v = verify(&q, 2, 3, &e).unwrap();
        assert_eq!((v.amount, v.triple), (f64::NEG_INFINITY, None));
        let r = realized_budgets(&q, 2, 3).unwrap();
        assert_eq!(r, vec![0.0, f64::INFINITY, 0.5f64.ln() - 0.2f64.ln(), 0.0]);
        // A zero row constrains nothing and realizes 0 against every other row.
        let q = [0.0, 0.0, 0.5, 0.5];
        let v = verify(&q, 2, 2, &[0.0, 1.0, f64::INFINITY, 0.0]).unwrap();
        assert_eq!((v.amount, v.triple), (f64::NEG_INFINITY, None));
        assert_eq!(
            realized_budgets(&q, 2, 2).unwrap(),
            vec![0.0, 0.0, f64::INFINITY, 0.0]
        );
    }

    #[test]
    fn bad_input_is_a_value_error() {
        let q = [0.5, 0.5, 0.5, 0.5];
        let e = [0.0, 1.0, 1.0, 0.0];
        let message = |r: Result<Violation>| match r {
            Err(Error::Value(m)) => m,
            other => panic!("expected a ValueError, got {other:?}"),
        };
        assert!(message(verify(&q, 0, 4, &[])).contains("non-empty"));
        assert!(message(verify(&q, 2, 3, &e)).contains("not 2 × 3"));
        assert!(message(verify(&q, 2, 2, &e[..3])).contains("must be 2 × 2"));
        for (bad, want) in [
            (f64::NAN, "Q[1, 0] = NaN"),
            (-0.25, "Q[1, 0] = -0.25"),
            (f64::INFINITY, "Q[1, 0] = inf"),
        ] {
            let mut q = q;
            q[2] = bad;
            assert!(message(verify(&q, 2, 2, &e)).contains(want));
            assert!(matches!(realized_budgets(&q, 2, 2), Err(Error::Value(_))));
        }
        for (bad, at, want) in [
            (f64::NAN, 2, "budgets[1, 0] = NaN"),
            (-1.0, 1, "budgets[0, 1] = -1"),
            (0.5, 3, "zero diagonal: budgets[1, 1] = 0.5"),
            (f64::INFINITY, 0, "zero diagonal: budgets[0, 0] = inf"),
        ] {
            let mut e = e;
            e[at] = bad;
            assert!(message(verify(&q, 2, 2, &e)).contains(want), "{bad}");
        }
        // −0 is a probability of 0: output 0 is impossible under input 0 only.
        let v = verify(&[-0.0, 1.0, 0.5, 0.5], 2, 2, &e).unwrap();
        assert_eq!((v.amount, v.triple), (f64::INFINITY, Some((1, 0, 0))));
    }

    #[test]
    fn the_memory_guard_refuses_before_allocating() {
        // A slice of 2^61 entries cannot exist: check the declaration itself.
        let f = footprint(1 << 30, 1 << 31, Operation::RealizedBudgets);
        assert!(matches!(f.check(), Err(Error::Memory(ref m)) if m.contains("the log channel")));
        assert_eq!(
            footprint(3, 5, Operation::Verify).bytes(),
            3 * 8 * 8,
            "rows padded to 8 outputs"
        );
        assert_eq!(
            footprint(3, 5, Operation::RealizedBudgets).bytes(),
            3 * 8 * 8 + 9 * 8
        );
    }
}
