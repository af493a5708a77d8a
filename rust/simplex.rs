//! Euclidean projection onto the probability simplex `Δ = {p ≥ 0, Σp = 1}` and onto its
//! s-sparse subset.
//!
//! The projection is `p_i = max(v_i − θ, 0)` with the unique `θ` solving
//! `Σ_i max(v_i − θ, 0) = 1` (Held, Wolfe & Crowder 1974; Duchi et al. 2008, Fig. 1). The
//! sort-based rule finds θ from the values sorted decreasingly, `u_(1) ≥ u_(2) ≥ …`: with
//! `f(ρ) = (Σ_{i≤ρ} u_(i) − 1)/ρ`, `θ = f(ρ*)` for the largest `ρ*` with `u_(ρ*) > f(ρ*)`.
//! Two facts give the same θ in expected linear time, without sorting:
//!
//! * `(Σ_T v − 1)/|T| ≤ θ` for every non-empty set T (as `Σ_T (v − θ) ≤ Σ max(v − θ, 0) = 1`),
//!   so every such value — the threshold of a part of v projected on its own, every Michelot
//!   (1986) iterate, `(Σv − 1)/k` — discards the entries at or below it;
//! * `f(ρ + 1) > f(ρ)` iff `u_(ρ+1) > f(ρ)` iff position ρ + 1 is in the support (f increases
//!   up to ρ* and decreases after). So the counts, sums and maxima of value buckets, scanned
//!   top-down, tell which bucket holds the support's boundary, without ordering the entries
//!   inside the buckets.
//!
//! The algorithm follows Condat's (2016, "Fast projection onto the simplex and the ℓ1 ball",
//! Math. Program. 158, Sec. 3) filter-then-refine scheme, with his sequential online filter
//! replaced by per-chunk Michelot passes (parallel, cache-resident) and the refinement by
//! bucket rounds, whose cost does not depend on how slowly Michelot passes would shrink the
//! candidates (they stall on near-uniform inputs, where most entries are in the support):
//!
//! 1. one pass over chunks of `CHUNK` = 2^14 entries (in parallel): maximum and sum per chunk, and
//!    whether its entries are finite;
//! 2. with M = max v and `u = v − M`, the candidates are the `u` in `(L, 0]` with
//!    `L = max(−1, (Σu − 1)/k)`;
//! 3. a second pass: each chunk, while in L2, raises L to its own bound by Michelot iterates
//!    on its entries, copies its candidates to its own segment of the output buffer (the
//!    scratch space) when they are few, and adds them to the group's histogram: count and
//!    sum in `BUCKETS` = 4096 equal-width buckets over `(L, 0]`. Group histograms are combined in
//!    index order. Sampled at the bucket edges top-down, f increases up to the bucket holding
//!    ρ* or the one above it: the boundary lies in the bucket of the last increase or the
//!    next one below; entries above that pair are in the support (their count and sum carry
//!    over), entries below it are not. Further rounds, if needed, split the pair;
//! 4. once the pair holds at most `SOLVE_MAX` = 2^14 entries they are gathered and Michelot passes
//!    (then, if they stall, the sort-based rule) finish exactly. A pair of equal values is in
//!    the support whole. Candidates the buckets fail to split within `MAX_ROUNDS` = 6 rounds
//!    (values crowded near θ over many orders of magnitude) are sorted.
//!
//! Memory traffic: two reads of v, a third for inputs whose support is most of v (to gather
//! the boundary bucket), and the read and write of the output.
//!
//! Every step is exact in the sense of the sort-based rule: the result is the same projection
//! (tests compare against a plain sort-based reference). Values are shifted by M so sums over
//! candidates lie in `[−k, 0]` and cannot overflow, whatever the magnitudes. Chunks and groups
//! depend only on k and every float reduction runs in index order, so the result is
//! bit-identical whatever the thread count.

use crate::error::{Error, Result};
use crate::finite::check_finite;
use crate::interrupt::Check;
use crate::memory::{self, Footprint, Zeroable};
use crate::simd::multiversion;
use rayon::prelude::*;
use std::cmp::Ordering;

/// Entries per chunk (128 KiB of f64: the chunk stays in L2 while it is summarized).
const CHUNK: usize = 1 << 14;
/// Chunks per group; each group fills one histogram per round.
const GROUP_CHUNKS: usize = 8;
const GROUP: usize = CHUNK * GROUP_CHUNKS;
/// Buckets per histogram (64 KiB: stays in L2 while a group is counted).
const BUCKETS: usize = 4096;
/// Streaming Michelot passes over a chunk before its candidates are copied out.
const STREAMING_PASSES: usize = 4;
/// Michelot passes on copied candidates before they are sorted.
const MICHELOT_PASSES: usize = 8;
/// A chunk's candidates are copied when they are at most this fraction (1/n) of it.
const SPARSE_FRACTION: usize = 4;
/// Candidates solved directly (gathered, Michelot passes, sort-based rule).
const SOLVE_MAX: usize = 1 << 14;
/// Histogram rounds before the remaining candidates are sorted.
const MAX_ROUNDS: usize = 6;
/// Inputs at least this long are processed in parallel.
const PARALLEL_MIN: usize = 1 << 16;
/// `kept` of a chunk whose candidates were not copied: they are read from the input.
const IN_INPUT: u32 = u32::MAX;

const WHAT: &str = "the vector to project";

/// One chunk after the first pass (and, for `kept`, the second).
#[derive(Clone, Copy)]
struct ChunkSummary {
    max: f64,
    /// `Σ (x − max)` over the chunk.
    total: f64,
    /// Number of candidates at the start of the chunk's output segment, or [`IN_INPUT`].
    kept: u32,
    finite: bool,
    /// Least and largest shifted value among the candidates of the last histogram round.
    least: f64,
    most: f64,
}
// All-zero bytes are a valid summary (zeros, `false`).
impl Zeroable for ChunkSummary {}

/// Count of the values in one bucket, and the sum of their offsets `u − edge` from the
/// bucket's left edge (small terms of one sign: accurate sums whatever the magnitudes).
#[derive(Clone, Copy)]
struct Bucket {
    count: u64,
    sum: f64,
}
// All-zero bytes are a valid bucket: the empty one.
impl Zeroable for Bucket {}

impl Bucket {
    const EMPTY: Bucket = Bucket { count: 0, sum: 0.0 };
}

type Histogram = [Bucket; BUCKETS];

/// Candidates of a round: the shifted values `u = x − shift` with `above < u ≤ top`.
#[derive(Clone, Copy)]
struct Range {
    shift: f64,
    above: f64,
    top: f64,
}

impl Range {
    #[inline(always)]
    fn holds(&self, x: f64) -> bool {
        let u = x - self.shift;
        u > self.above && u <= self.top
    }

    /// [`BUCKETS`] equal-width buckets over the range.
    fn buckets(&self) -> Buckets {
        Buckets::over(self.above, self.top)
    }
}

/// A filter on values.
trait Keep: Copy + Sync {
    fn holds(&self, x: f64) -> bool;
}

impl Keep for Range {
    #[inline(always)]
    fn holds(&self, x: f64) -> bool {
        Range::holds(self, x)
    }
}

/// Equal-width buckets from `origin`, `scale` buckets per unit of `u`. The index is a
/// non-decreasing function of `u` (every operation rounds monotonically; out-of-range values
/// are clamped), so any run of buckets holds the values of an interval.
#[derive(Clone, Copy)]
struct Buckets {
    origin: f64,
    scale: f64,
    /// `1/scale`.
    width: f64,
}

impl Buckets {
    #[inline(always)]
    fn index(&self, u: f64) -> usize {
        (((u - self.origin) * self.scale) as usize).min(BUCKETS - 1)
    }

    /// Left edge of bucket j (nominal: the reference point of its offsets, and the layout
    /// of the next round's buckets).
    #[inline(always)]
    fn edge(&self, j: usize) -> f64 {
        self.origin + j as f64 * self.width
    }

    /// `BUCKETS` buckets from `origin` to `end`.
    fn over(origin: f64, end: f64) -> Buckets {
        let scale = BUCKETS as f64 / (end - origin);
        Buckets {
            origin,
            scale,
            width: 1.0 / scale,
        }
    }
}

/// The candidates of `range` in buckets `low..=high` of a round.
#[derive(Clone, Copy)]
struct Band {
    range: Range,
    buckets: Buckets,
    low: usize,
    high: usize,
}

impl Keep for Band {
    #[inline(always)]
    fn holds(&self, x: f64) -> bool {
        let j = self.buckets.index(x - self.range.shift);
        self.range.holds(x) && j >= self.low && j <= self.high
    }
}

/// The threshold θ of the projection of `v` (finite, non-empty) onto the simplex.
pub fn simplex_threshold(v: &[f64]) -> Result<f64> {
    let mut scratch = memory::zeroed_vec::<f64>(v.len(), "the projection's scratch space")?;
    let (max, theta) = shifted_threshold(v, &mut scratch, &crate::interrupt::never, MAX_ROUNDS)?;
    Ok(max + theta)
}

/// `(max(v), θ − max(v))`: the threshold relative to the maximum, which keeps full precision
/// when |v| is huge (θ itself would round to max(v)). `scratch` (as long as `v`) is
/// overwritten. `check` runs before each chunk of work; its error stops the computation.
/// After `max_rounds` histogram rounds the candidates left are sorted. Fails on empty or
/// non-finite input, and when the chunk summaries and histograms (about 0.6 bytes per
/// entry) do not fit the memory budget.
fn shifted_threshold<C: Check>(
    v: &[f64],
    scratch: &mut [f64],
    check: &C,
    max_rounds: usize,
) -> Result<(f64, f64)> {
    assert_eq!(v.len(), scratch.len());
    if v.len() <= CHUNK {
        return small_threshold(v, scratch);
    }
    let k = v.len();
    let chunks = k.div_ceil(CHUNK);
    let groups = k.div_ceil(GROUP);
    Footprint::new("the simplex projection")
        .add(
            "chunk summaries",
            chunks as u128,
            std::mem::size_of::<ChunkSummary>(),
        )
        .add(
            "bucket histograms",
            ((groups + 1) * BUCKETS) as u128,
            std::mem::size_of::<Bucket>(),
        )
        .check()?;
    let mut summaries = memory::allocate_zeroed::<ChunkSummary>(chunks, "chunk summaries")?;
    let mut histograms = memory::allocate_zeroed::<Bucket>(groups * BUCKETS, "histograms")?;
    let mut parts = Parts {
        parallel: k >= PARALLEL_MIN,
        v,
        scratch,
        summaries: &mut summaries,
        histograms: &mut histograms,
    };

    // Step 1: maxima and sums.
    parts.for_each_chunk(check, false, |chunk, _, summary, _| {
        *summary = summarize_chunk(chunk)
    })?;
    if parts.summaries.iter().any(|s| !s.finite) {
        check_finite(v, WHAT)?;
    }

    // Step 2: global bound.
    let max = parts
        .summaries
        .iter()
        .fold(f64::NEG_INFINITY, |m, s| m.max(s.max));
    let mut total = 0.0;
    for (c, s) in parts.summaries.iter().enumerate() {
        let len = CHUNK.min(k - c * CHUNK);
        total += s.total + len as f64 * (s.max - max);
    }
    let lower = (-1.0f64).max((total - 1.0) / k as f64);

    // Step 3: histogram rounds, the first with per-chunk filtering.
    let mut range = Range {
        shift: max,
        above: lower,
        top: 0.0,
    };
    let mut buckets = range.buckets();
    let mut hist = parts.first_histogram(range, buckets, check)?;
    let mut prefix = (0.0f64, 0usize);
    let mut rounds = 0;
    loop {
        let boundary = boundary_buckets(&hist, buckets, prefix);
        prefix = boundary.before;
        let band = Band {
            range,
            buckets,
            low: boundary.low,
            high: boundary.high,
        };
        // Step 4.
        if boundary.count as usize <= SOLVE_MAX || rounds >= max_rounds {
            let n = parts.gather(band, check)?;
            check()?;
            let candidates = &mut parts.scratch[..n];
            let theta = if rounds < max_rounds {
                solve(candidates, max, prefix)
            } else {
                sorted_threshold(candidates, max, prefix, parts.parallel)
            };
            return Ok((max, theta));
        }
        let next = Buckets::over(buckets.edge(boundary.low), buckets.edge(boundary.high + 1));
        let (next_hist, least, most) = parts.histogram(band, next, check)?;
        if least == most {
            // Equal values: the first is in the support, so all are (the condition
            // u > f(ρ − 1) does not depend on how many equal values precede it).
            let theta = (prefix.0 + boundary.sum - 1.0) / (prefix.1 as u64 + boundary.count) as f64;
            return Ok((max, theta));
        }
        // The candidates are now exactly the band's, copied: no range filter needed.
        range.above = f64::NEG_INFINITY;
        range.top = f64::INFINITY;
        buckets = next;
        hist = next_hist;
        rounds += 1;
    }
}

/// The input, the scratch buffer, the chunk summaries and the group histograms, split into
/// the same groups of chunks by every pass.
struct Parts<'a> {
    parallel: bool,
    v: &'a [f64],
    scratch: &'a mut [f64],
    summaries: &'a mut [ChunkSummary],
    histograms: &'a mut [Bucket],
}

type Group<'g> = (
    &'g [f64],
    &'g mut [f64],
    &'g mut [ChunkSummary],
    &'g mut Histogram,
);

impl Parts<'_> {
    /// `work` on every group (in parallel for large inputs); the first error stops it.
    fn for_each_group<F>(&mut self, work: F) -> Result<()>
    where
        F: for<'g> Fn(Group<'g>) -> Result<()> + Sync + Send,
    {
        let input = self.v;
        let split = |(((a, b), c), d): (((_, _), _), &mut [Bucket])| {
            let d: &mut Histogram = d.try_into().expect("histograms of BUCKETS buckets");
            work((a, b, c, d))
        };
        if self.parallel {
            input
                .par_chunks(GROUP)
                .zip(self.scratch.par_chunks_mut(GROUP))
                .zip(self.summaries.par_chunks_mut(GROUP_CHUNKS))
                .zip(self.histograms.par_chunks_mut(BUCKETS))
                .try_for_each(split)
        } else {
            input
                .chunks(GROUP)
                .zip(self.scratch.chunks_mut(GROUP))
                .zip(self.summaries.chunks_mut(GROUP_CHUNKS))
                .zip(self.histograms.chunks_mut(BUCKETS))
                .try_for_each(split)
        }
    }

    /// `work` on every chunk, with its scratch segment, its summary and its group's histogram
    /// (cleared first if `clear_histograms`); `check` runs before each chunk.
    fn for_each_chunk<C, F>(&mut self, check: &C, clear_histograms: bool, work: F) -> Result<()>
    where
        C: Check,
        F: Fn(&[f64], &mut [f64], &mut ChunkSummary, &mut Histogram) + Sync + Send,
    {
        self.for_each_group(|(input, segments, summaries, hist)| {
            if clear_histograms {
                hist.fill(Bucket::EMPTY);
            }
            for ((chunk, segment), summary) in input
                .chunks(CHUNK)
                .zip(segments.chunks_mut(CHUNK))
                .zip(summaries)
            {
                check()?;
                work(chunk, segment, summary, hist);
            }
            Ok(())
        })
    }

    /// The group histograms added in index order.
    fn combined(&self) -> Vec<Bucket> {
        let mut total = vec![Bucket::EMPTY; BUCKETS];
        for hist in self.histograms.chunks(BUCKETS) {
            for (t, h) in total.iter_mut().zip(hist) {
                t.count += h.count;
                t.sum += h.sum;
            }
        }
        total
    }

    /// The histogram of the candidates in `range` (with `top` = 0: every entry above
    /// `above`), where each chunk first raises `above` to its own lower bound of θ: Michelot
    /// iterates on its entries, streamed while the chunk is in L2. A chunk whose candidates
    /// are then few gets them copied to its segment of the scratch buffer.
    fn first_histogram<C: Check>(
        &mut self,
        range: Range,
        buckets: Buckets,
        check: &C,
    ) -> Result<Vec<Bucket>> {
        self.for_each_chunk(check, true, |chunk, segment, summary, hist| {
            summary.kept = filter_chunk(chunk, segment, range, buckets, hist)
        })?;
        Ok(self.combined())
    }

    /// The histogram (over `buckets`) of the candidates in `band`, which are copied to the
    /// chunks' segments; with their least and largest value.
    fn histogram<C: Check>(
        &mut self,
        band: Band,
        buckets: Buckets,
        check: &C,
    ) -> Result<(Vec<Bucket>, f64, f64)> {
        let all = Range {
            shift: band.range.shift,
            above: f64::NEG_INFINITY,
            top: f64::INFINITY,
        };
        self.for_each_chunk(check, true, |chunk, segment, summary, hist| {
            let n = keep_in_segment(chunk, segment, summary.kept, band);
            (_, summary.least, summary.most) = count_into(&segment[..n], all, buckets, hist);
            summary.kept = n as u32;
        })?;
        let (least, most) = self
            .summaries
            .iter()
            .filter(|s| s.kept > 0)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, m), s| {
                (l.min(s.least), m.max(s.most))
            });
        Ok((self.combined(), least, most))
    }

    /// Copy the candidates in `range` to the start of the scratch buffer (in index order);
    /// their number.
    fn gather<C: Check>(&mut self, range: impl Keep, check: &C) -> Result<usize> {
        self.for_each_chunk(check, false, |chunk, segment, summary, _| {
            summary.kept = keep_in_segment(chunk, segment, summary.kept, range) as u32
        })?;
        // Segment c starts at c·CHUNK ≥ the total kept before it: moves go downwards.
        let mut n = 0;
        for (c, s) in self.summaries.iter().enumerate() {
            let start = c * CHUNK;
            let kept = s.kept as usize;
            self.scratch.copy_within(start..start + kept, n);
            n += kept;
        }
        Ok(n)
    }
}

/// The buckets that may hold the support's boundary.
struct Boundary {
    /// Lowest and highest bucket (non-empty buckets between them: none, or `low` and
    /// `high` are the same).
    low: usize,
    high: usize,
    /// Their count and sum.
    count: u64,
    sum: f64,
    /// Sum and count of the entries above them (all in the support), prefix included.
    before: (f64, usize),
}

/// The boundary's buckets from the histogram of the candidates below `prefix` (sum, count of
/// the entries above them, all in the support).
///
/// With `f(ρ) = (Σ_{i≤ρ} u_(i) − 1)/ρ` strictly increasing up to the support size ρ* and
/// non-increasing after it, f sampled at the bucket edges, top-down, increases up to the
/// bucket b holding ρ* or the one above it and decreases after. So if the last increase is
/// at bucket i, ρ* lies in bucket i or in the next non-empty one below it: the first entry
/// of bucket i is in the support, and every entry below the pair is out of it.
fn boundary_buckets(hist: &[Bucket], buckets: Buckets, prefix: (f64, usize)) -> Boundary {
    let (mut sum, mut count) = prefix;
    let mut f_before = if count > 0 {
        (sum - 1.0) / count as f64
    } else {
        f64::NEG_INFINITY
    };
    let mut last_increase: Option<(usize, (f64, usize))> = None;
    for j in (0..hist.len()).rev() {
        let mut b = hist[j];
        if b.count == 0 {
            continue;
        }
        b.sum += b.count as f64 * buckets.edge(j);
        let f = (sum + b.sum - 1.0) / (count as u64 + b.count) as f64;
        if let Some((high, before)) = last_increase {
            if !(f > f_before) {
                let top = hist[high];
                return Boundary {
                    low: j,
                    high,
                    count: top.count + b.count,
                    sum: (top.sum + top.count as f64 * buckets.edge(high)) + b.sum,
                    before,
                };
            }
        }
        last_increase = Some((j, (sum, count)));
        sum += b.sum;
        count += b.count as usize;
        f_before = f;
    }
    let (high, before) = last_increase.expect("the maximum is a candidate");
    let top = hist[high];
    Boundary {
        low: high,
        high,
        count: top.count,
        sum: top.sum + top.count as f64 * buckets.edge(high),
        before,
    }
}

/// Threshold of an input of at most [`CHUNK`] entries, on the calling thread.
fn small_threshold(v: &[f64], scratch: &mut [f64]) -> Result<(f64, f64)> {
    let summary = summarize_chunk(v);
    if !summary.finite || v.is_empty() {
        check_finite(v, WHAT)?;
    }
    let max = summary.max;
    let lower = (-1.0f64).max((summary.total - 1.0) / v.len() as f64);
    let range = Range {
        shift: max,
        above: lower,
        top: 0.0,
    };
    let n = copy_candidates(v, scratch, range);
    Ok((max, solve(&mut scratch[..n], max, (0.0, 0))))
}

/// Maximum and `Σ (x − max)` of a chunk, and whether its entries are finite.
fn summarize_chunk(chunk: &[f64]) -> ChunkSummary {
    let max = maximum(chunk);
    let total = shifted_sum(chunk, max);
    // A NaN or an infinity makes the sum NaN or infinite; huge finite values can too.
    let finite = (max.is_finite() && total.is_finite()) || chunk.iter().all(|x| x.is_finite());
    ChunkSummary {
        max,
        total,
        kept: IN_INPUT,
        finite,
        least: f64::INFINITY,
        most: f64::NEG_INFINITY,
    }
}

/// Add the chunk's candidates in `range` (whose `top` is 0) to `hist`, above a lower bound
/// of θ raised by Michelot iterates on the chunk's entries (each `(Σ_T u − 1)/|T|` bounds θ
/// from below). When at most 1/[`SPARSE_FRACTION`] of the chunk is left, the candidates are
/// copied to `segment` (and refined there); returns how many, or [`IN_INPUT`].
fn filter_chunk(
    chunk: &[f64],
    segment: &mut [f64],
    range: Range,
    buckets: Buckets,
    hist: &mut Histogram,
) -> u32 {
    let mut keep = range;
    let (mut sum, mut count) = sum_above(chunk, range.shift, keep.above);
    for _ in 0..STREAMING_PASSES {
        if count * SPARSE_FRACTION <= chunk.len() {
            break;
        }
        let next = (sum - 1.0) / count as f64;
        if !(next > keep.above) {
            break;
        }
        keep.above = next;
        (sum, count) = sum_above(chunk, range.shift, keep.above);
    }
    if count * SPARSE_FRACTION > chunk.len() {
        count_into(chunk, keep, buckets, hist);
        return IN_INPUT;
    }
    let n = copy_candidates(chunk, segment, keep);
    let (n, _, _) = michelot(&mut segment[..n], range.shift, (0.0, 0), MICHELOT_PASSES);
    count_into(&segment[..n], range, buckets, hist);
    n as u32
}

/// Michelot (1986) passes on `candidates` (values; u = x − shift) that, with `prefix` (sum,
/// count of entries known to be in the support), contain the support: `θ ← (Σu − 1)/|S|`,
/// `S ← {u > θ}`. θ increases to the exact threshold, reached when S stops shrinking. Returns
/// the number of candidates kept (at the start of the slice), the last θ (a lower bound of
/// the threshold) and whether it is exact.
fn michelot(
    candidates: &mut [f64],
    shift: f64,
    prefix: (f64, usize),
    passes: usize,
) -> (usize, f64, bool) {
    let mut n = candidates.len();
    let mut theta = f64::NEG_INFINITY;
    for _ in 0..passes {
        // Offsets from the previous θ: small terms of one sign, an accurate sum.
        let base = if theta.is_finite() { theta } else { 0.0 };
        let sum = prefix.0 + offset_sum(&candidates[..n], shift, base) + n as f64 * base;
        theta = (sum - 1.0) / (prefix.1 + n) as f64;
        let kept = retain_candidates(
            &mut candidates[..n],
            Range {
                shift,
                above: theta,
                top: f64::INFINITY,
            },
        );
        if kept == n {
            return (n, theta, true);
        }
        n = kept;
    }
    (n, theta, false)
}

/// The exact θ − shift from candidates that, with `prefix`, contain the support: Michelot
/// passes, then the sort-based rule if they stall.
fn solve(candidates: &mut [f64], shift: f64, prefix: (f64, usize)) -> f64 {
    let (n, theta, exact) = michelot(candidates, shift, prefix, MICHELOT_PASSES);
    if exact || n == 0 {
        return theta;
    }
    sorted_threshold(&mut candidates[..n], shift, prefix, false)
}

/// The sort-based rule on candidates (sorted in place), continuing from `prefix`.
fn sorted_threshold(u: &mut [f64], shift: f64, prefix: (f64, usize), parallel: bool) -> f64 {
    let larger_first = |a: &f64, b: &f64| b.total_cmp(a);
    if parallel {
        u.par_sort_unstable_by(larger_first);
    } else {
        u.sort_unstable_by(larger_first);
    }
    let (mut cumulative, count) = prefix;
    let mut theta = if count > 0 {
        (cumulative - 1.0) / count as f64
    } else {
        f64::NEG_INFINITY
    };
    for (i, &x) in u.iter().enumerate() {
        let x = x - shift;
        cumulative += x;
        let candidate = (cumulative - 1.0) / (count + i + 1) as f64;
        if x > candidate {
            theta = candidate;
        } else {
            break;
        }
    }
    theta
}

/// The chunk's candidates in `range` into the start of its segment: copied from the chunk
/// while `kept` is [`IN_INPUT`], else filtered among the `kept` already there; how many.
fn keep_in_segment(chunk: &[f64], segment: &mut [f64], kept: u32, range: impl Keep) -> usize {
    if kept == IN_INPUT {
        copy_candidates(chunk, segment, range)
    } else {
        retain_candidates(&mut segment[..kept as usize], range)
    }
}

/// Copy the entries of `chunk` in `range` to the start of `segment` (branch-free); their
/// number.
fn copy_candidates(chunk: &[f64], segment: &mut [f64], range: impl Keep) -> usize {
    let segment = &mut segment[..chunk.len()];
    let mut n = 0;
    for (i, &x) in chunk.iter().enumerate() {
        segment[n.min(i)] = x; // n ≤ i
        n += range.holds(x) as usize;
    }
    n
}

/// Keep the values in `range` at the start of `values` (order kept); their number.
fn retain_candidates(values: &mut [f64], range: impl Keep) -> usize {
    let mut n = 0;
    for i in 0..values.len() {
        let x = values[i];
        values[n.min(i)] = x; // n ≤ i
        n += range.holds(x) as usize;
    }
    n
}

/// Add the values in `keep` (shifted) to `hist`; their number, least and largest shifted
/// value. Values are first compacted block by block (branch-free), then counted.
fn count_into(
    values: &[f64],
    keep: Range,
    buckets: Buckets,
    hist: &mut Histogram,
) -> (usize, f64, f64) {
    const BLOCK: usize = 256;
    let mut block = [0.0f64; BLOCK];
    let (mut total, mut least, mut most) = (0, f64::INFINITY, f64::NEG_INFINITY);
    for part in values.chunks(BLOCK) {
        let mut n = 0;
        for (i, &x) in part.iter().enumerate() {
            let u = x - keep.shift;
            block[n.min(i)] = u; // n ≤ i < BLOCK
            n += (u > keep.above && u <= keep.top) as usize;
        }
        for &u in &block[..n] {
            let j = buckets.index(u);
            let b = &mut hist[j];
            b.count += 1;
            b.sum += u - buckets.edge(j);
            least = if u < least { u } else { least };
            most = if u > most { u } else { most };
        }
        total += n;
    }
    (total, least, most)
}

multiversion! {
    fn maximum(v: &[f64]) -> f64 {
        let mut lanes = [f64::NEG_INFINITY; 8];
        let chunks = v.chunks_exact(8);
        let tail = chunks.remainder();
        for chunk in chunks {
            for t in 0..8 {
                lanes[t] = if chunk[t] > lanes[t] { chunk[t] } else { lanes[t] };
            }
        }
        tail.iter().chain(&lanes).copied().fold(f64::NEG_INFINITY, f64::max)
    }
}

multiversion! {
    /// `(Σ_{u > bound} u, #{u > bound})` over `u = x − max`, without branches.
    fn sum_above(v: &[f64], max: f64, bound: f64) -> (f64, usize) {
        let mut sums = [0.0f64; 8];
        let mut counts = [0u64; 8];
        let chunks = v.chunks_exact(8);
        let tail = chunks.remainder();
        for chunk in chunks {
            for t in 0..8 {
                let u = chunk[t] - max;
                let keep = u > bound;
                sums[t] += if keep { u } else { 0.0 };
                counts[t] += keep as u64;
            }
        }
        for &x in tail {
            let u = x - max;
            if u > bound {
                sums[0] += u;
                counts[0] += 1;
            }
        }
        (sums.iter().sum(), counts.iter().sum::<u64>() as usize)
    }
}

multiversion! {
    /// `Σ ((x − shift) − base)` in a fixed order.
    fn offset_sum(v: &[f64], shift: f64, base: f64) -> f64 {
        let mut sums = [0.0f64; 8];
        let chunks = v.chunks_exact(8);
        let tail = chunks.remainder();
        for chunk in chunks {
            for t in 0..8 {
                sums[t] += (chunk[t] - shift) - base;
            }
        }
        for &x in tail {
            sums[0] += (x - shift) - base;
        }
        sums.iter().sum()
    }
}

multiversion! {
    /// `Σ (x − shift)` in a fixed order.
    fn shifted_sum(v: &[f64], shift: f64) -> f64 {
        let mut sums = [0.0f64; 8];
        let chunks = v.chunks_exact(8);
        let tail = chunks.remainder();
        for chunk in chunks {
            for t in 0..8 {
                sums[t] += chunk[t] - shift;
            }
        }
        for &x in tail {
            sums[0] += x - shift;
        }
        sums.iter().sum()
    }
}

/// Euclidean projection of `v` onto the probability simplex.
pub fn project_simplex(v: &[f64]) -> Result<Vec<f64>> {
    let mut out = memory::zeroed_vec::<f64>(v.len(), "the projection")?;
    project_simplex_into(v, &mut out)?;
    Ok(out)
}

/// [`project_simplex`] into a caller-provided buffer of the same length (so the bindings
/// can write straight into a numpy array). `out` is the computation's scratch space: after
/// an error (non-finite input, interruption, memory budget) its content is unspecified.
pub fn project_simplex_into(v: &[f64], out: &mut [f64]) -> Result<()> {
    assert_eq!(v.len(), out.len(), "output length must match the input");
    let (max, theta) = shifted_threshold(v, out, &crate::interrupt::check, MAX_ROUNDS)?;
    let clip = |(o, &x): (&mut f64, &f64)| *o = ((x - max) - theta).max(0.0);
    if v.len() >= PARALLEL_MIN {
        out.par_iter_mut().zip(v).with_min_len(CHUNK).for_each(clip);
    } else {
        out.iter_mut().zip(v).for_each(clip);
    }
    Ok(())
}

/// `v[a]` before `v[b]` when larger, under the total order of `f64::total_cmp`.
fn larger_first(a: &f64, b: &f64) -> Ordering {
    b.total_cmp(a)
}

/// Indices of the `s` largest values of `v` (signed, `f64::total_cmp`), ties broken towards
/// the lower index, in increasing index order. `scratch` (as long as `v`) is overwritten.
///
/// The s-th largest value comes from a selection on a copy (expected linear time); one pass
/// then keeps the larger values and the first of the equal ones.
fn top_indices_with(v: &[f64], s: usize, scratch: &mut [f64]) -> Vec<usize> {
    let mut support = Vec::with_capacity(s);
    if s == 0 {
        return support;
    }
    scratch.copy_from_slice(v);
    let (_, &mut pivot, _) = scratch.select_nth_unstable_by(s - 1, larger_first);
    let larger = v
        .iter()
        .filter(|x| x.total_cmp(&pivot) == Ordering::Greater)
        .count();
    let mut equal = s - larger;
    for (i, x) in v.iter().enumerate() {
        match x.total_cmp(&pivot) {
            Ordering::Greater => support.push(i),
            Ordering::Equal if equal > 0 => {
                support.push(i);
                equal -= 1;
            }
            _ => {}
        }
    }
    support
}

/// Indices of the `s` largest values of `v` (signed), ties broken towards the lower index,
/// in increasing index order (`s` is capped at `v.len()`).
pub fn top_indices(v: &[f64], s: usize) -> Result<Vec<usize>> {
    let s = s.min(v.len());
    Footprint::new("the top-s selection")
        .add("a copy of the values", v.len() as u128, 8)
        .add("the indices", s as u128, std::mem::size_of::<usize>())
        .check()?;
    let mut scratch = memory::allocate_zeroed::<f64>(v.len(), "a copy of the values")?;
    Ok(top_indices_with(v, s, &mut scratch))
}

/// Exact Euclidean projection onto the s-sparse simplex `{p ∈ Δ : |supp p| ≤ s}`.
///
/// Kyrillidis et al. (2013), "Sparse projections onto the simplex", Thm. 1: the optimal support
/// is the `s` largest entries of `v`; project those onto the simplex, zero the rest.
pub fn project_sparse_simplex(v: &[f64], s: usize) -> Result<Vec<f64>> {
    check_finite(v, WHAT)?;
    if s == 0 || s > v.len() {
        return Err(Error::Value(format!(
            "sparsity s must lie in [1, {}] (the vector's length), got {s}",
            v.len()
        )));
    }
    Footprint::new("the sparse simplex projection")
        .add("the projection", v.len() as u128, 8)
        .add("a copy of the values for the selection", v.len() as u128, 8)
        .add("the support", s as u128, std::mem::size_of::<usize>())
        .add("its values and their projection", 2 * s as u128, 8)
        .check()?;
    let support = {
        let mut scratch = memory::allocate_zeroed::<f64>(v.len(), "a copy of the values")?;
        top_indices_with(v, s, &mut scratch)
    };
    // Zeroed pages the projection does not write are never touched.
    let mut out = memory::allocate_zeroed::<f64>(v.len(), "the projection")?;
    let mut values = memory::allocate_zeroed::<f64>(s, "the support's values")?;
    values
        .iter_mut()
        .zip(&support)
        .for_each(|(x, &i)| *x = v[i]);
    let mut projected = memory::allocate_zeroed::<f64>(s, "the support's projection")?;
    project_simplex_into(&values, &mut projected)?;
    for (&i, p) in support.iter().zip(projected) {
        out[i] = p;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{key_from_u64, stream};
    use rand_core::Rng;

    fn reference_threshold(v: &[f64]) -> f64 {
        let mut u = v.to_vec();
        let max = u.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        u.iter_mut().for_each(|x| *x -= max);
        u.sort_unstable_by(|a, b| b.total_cmp(a));
        let (mut cumulative, mut theta) = (0.0, u[0] - 1.0);
        for (i, &x) in u.iter().enumerate() {
            cumulative += x;
            let candidate = (cumulative - 1.0) / (i + 1) as f64;
            if x > candidate {
                theta = candidate;
            } else {
                break;
            }
        }
        max + theta
    }

    fn random_vector(seed: u64, k: usize, scale: f64) -> Vec<f64> {
        let mut rng = stream(&key_from_u64(seed), 0);
        (0..k)
            .map(|_| ((rng.next_u32() as f64) / 4294967296.0 - 0.5) * scale)
            .collect()
    }

    fn assert_kkt(v: &[f64], p: &[f64]) {
        let sum: f64 = p.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "sum = {sum}");
        assert!(p.iter().all(|&x| x >= 0.0));
        // KKT: p_i > 0 ⇒ v_i − p_i = θ; p_i = 0 ⇒ v_i ≤ θ.
        let i = p.iter().position(|&x| x > 0.0).unwrap();
        let theta = v[i] - p[i];
        let scale = v.iter().fold(1.0f64, |a, &x| a.max(x.abs()));
        for (&vi, &pi) in v.iter().zip(p) {
            if pi > 0.0 {
                assert!((vi - pi - theta).abs() <= 1e-12 * scale);
            } else {
                assert!(vi <= theta + 1e-12 * scale);
            }
        }
    }

    #[test]
    fn filtered_threshold_equals_the_sort_based_rule() {
        for (seed, k, scale) in [
            (1, 1, 1.0),
            (2, 2, 0.1),
            (3, 10, 3.0),
            (4, 1000, 0.01),
            (5, 1000, 100.0),
            (6, 100_000, 1e-3),
            (7, 200_000, 10.0),
        ] {
            let v = random_vector(seed, k, scale);
            let (a, b) = (simplex_threshold(&v).unwrap(), reference_threshold(&v));
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                "k = {k}: {a} vs {b}"
            );
            assert_kkt(&v, &project_simplex(&v).unwrap());
        }
    }

    #[test]
    fn slowly_shrinking_supports_fall_back_to_sorting() {
        // Geometric values make every Michelot pass remove only a few entries.
        let v: Vec<f64> = (0..200).map(|i| 0.9f64.powi(i)).collect();
        let p = project_simplex(&v).unwrap();
        assert_kkt(&v, &p);
        assert!((simplex_threshold(&v).unwrap() - reference_threshold(&v)).abs() < 1e-14);
    }

    #[test]
    fn special_inputs() {
        assert_eq!(project_simplex(&[5.0]).unwrap(), vec![1.0]);
        assert_eq!(project_simplex(&[-3.0, -5.0]).unwrap(), vec![1.0, 0.0]);
        assert_eq!(project_simplex(&[0.25; 4]).unwrap(), vec![0.25; 4]);
        let huge = [1e300, -1e300, 1e300 - 1e285];
        assert_kkt(&huge, &project_simplex(&huge).unwrap());
        assert_eq!(project_simplex(&[2.0, 2.0]).unwrap(), vec![0.5, 0.5]);
        assert!(project_simplex(&[]).is_err());
        assert!(project_simplex(&[1.0, f64::NAN]).is_err());
        assert!(project_simplex(&[f64::INFINITY]).is_err());
    }

    #[test]
    fn sparse_projection_beats_every_support_of_size_s() {
        for seed in 0..30 {
            let v = random_vector(100 + seed, 7, 2.0);
            for s in 1..=7 {
                let p = project_sparse_simplex(&v, s).unwrap();
                assert!(p.iter().filter(|&&x| x > 0.0).count() <= s);
                let dist =
                    |q: &[f64]| -> f64 { v.iter().zip(q).map(|(a, b)| (a - b).powi(2)).sum() };
                let best = p_dist_over_supports(&v, s, &dist);
                assert!(dist(&p) <= best + 1e-12, "seed {seed}, s {s}");
            }
        }
    }

    fn p_dist_over_supports(v: &[f64], s: usize, dist: &dyn Fn(&[f64]) -> f64) -> f64 {
        let k = v.len();
        let mut best = f64::INFINITY;
        for mask in 1u32..(1 << k) {
            if mask.count_ones() as usize != s {
                continue;
            }
            let idx: Vec<usize> = (0..k).filter(|i| mask >> i & 1 == 1).collect();
            let vals: Vec<f64> = idx.iter().map(|&i| v[i]).collect();
            let proj = project_simplex(&vals).unwrap();
            let mut q = vec![0.0; k];
            idx.iter().zip(proj).for_each(|(&i, x)| q[i] = x);
            best = best.min(dist(&q));
        }
        best
    }

    #[test]
    fn top_indices_breaks_ties_towards_the_lower_index() {
        assert_eq!(
            top_indices(&[1.0, 3.0, 3.0, 3.0, 0.0], 2).unwrap(),
            vec![1, 2]
        );
        assert_eq!(top_indices(&[-1.0, -2.0], 2).unwrap(), vec![0, 1]);
        assert!(project_sparse_simplex(&[1.0], 0).is_err());
        assert!(project_sparse_simplex(&[1.0], 2).is_err());
    }
    fn uniforms(seed: u64, k: usize) -> Vec<f64> {
        let mut rng = stream(&key_from_u64(seed), 0);
        (0..k)
            .map(|_| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            .collect()
    }

    fn normals(seed: u64, k: usize) -> Vec<f64> {
        let u = uniforms(seed, 2 * k);
        (0..k)
            .map(|i| {
                (-2.0 * (1.0 - u[2 * i]).ln()).sqrt() * (std::f64::consts::TAU * u[2 * i + 1]).cos()
            })
            .collect()
    }

    /// The input families `project_simplex` is benchmarked on (uniform, near-uniform, a few
    /// large entries over noise) and the hard cases (ties, extreme magnitudes, a narrow
    /// cluster), at length k.
    fn families(k: usize) -> Vec<(&'static str, Vec<f64>)> {
        let n = normals(k as u64, k);
        let kf = k as f64;
        let mut few_large: Vec<f64> = n.iter().map(|x| 1e-3 * x).collect();
        for (j, i) in (0..k).step_by(k / 5 + 1).enumerate() {
            few_large[i] = 1.0 + 0.1 * j as f64;
        }
        vec![
            ("uniform", uniforms(k as u64 + 1, k)),
            ("gaussian", n.clone()),
            (
                "near-uniform",
                n.iter().map(|x| 1.0 / kf + x / kf).collect(),
            ),
            ("few large", few_large),
            ("all equal", vec![0.3; k]),
            (
                "exact ties",
                (0..k).map(|i| ((i * 7919) % 13) as f64 / 13.0).collect(),
            ),
            (
                "counts / n",
                n.iter()
                    .map(|x| (x * 3.0 + 20.0).round().max(0.0) / (20.0 * kf))
                    .collect(),
            ),
            ("huge", n.iter().map(|x| x * 1e300).collect()),
            ("huge offset", n.iter().map(|x| 1e300 + x * 1e285).collect()),
            ("negative", n.iter().map(|x| -50.0 - x.abs()).collect()),
            ("subnormal", n.iter().map(|x| x * 1e-310).collect()),
            (
                // One entry above a cluster narrower than a first-round bucket.
                "cluster",
                std::iter::once(1.0)
                    .chain(n[1..].iter().map(|x| 0.1 + x * 1e-12))
                    .collect(),
            ),
        ]
    }

    /// Difference allowed between two thresholds relative to the maximum (in (−1, 0]): both
    /// are sums of up to k terms of magnitude below 1, added in different orders, whose
    /// rounding errors can reach k·ε (all terms of one sign: the reference's running sum).
    fn tolerance(k: usize) -> f64 {
        1e-14 + 2.0 * f64::EPSILON * k as f64
    }

    fn assert_same_threshold(v: &[f64], what: &str) {
        let (a, b) = (simplex_threshold(v).unwrap(), reference_threshold(v));
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // Compare relative to the maximum (where θ lies within 1): absolute precision there.
        let (a, b) = (a - max, b - max);
        assert!(
            (a - b).abs() <= tolerance(v.len()) || a == b,
            "{what}, k = {}: {a} vs {b}",
            v.len()
        );
    }

    #[test]
    fn every_family_matches_the_sort_based_rule_and_the_kkt_conditions() {
        // One chunk; several chunks on one thread; the parallel path with a partial chunk.
        for k in [1, 2, 7, 1000, CHUNK + 3, 3 * CHUNK, PARALLEL_MIN + 12_345] {
            for (name, v) in families(k) {
                assert_same_threshold(&v, name);
                let p = project_simplex(&v).unwrap();
                assert_kkt(&v, &p);
            }
        }
    }

    #[test]
    fn every_path_gives_the_same_threshold() {
        // max_rounds = 0 sorts the first boundary bucket's candidates whatever their number;
        // 1 allows one more histogram round; the default several.
        let k = 300_001;
        for (name, v) in families(k) {
            let reference = reference_threshold(&v);
            for rounds in [0, 1, MAX_ROUNDS] {
                let mut scratch = vec![0.0; k];
                let (max, theta) =
                    shifted_threshold(&v, &mut scratch, &crate::interrupt::never, rounds).unwrap();
                let (a, b) = ((max + theta) - max, reference - max);
                assert!(
                    (a - b).abs() <= tolerance(k) || a == b,
                    "{name}, {rounds} rounds: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let k = 2 * PARALLEL_MIN + 777;
        for (name, v) in families(k) {
            let one = crate::parallel::in_pool(1, || project_simplex(&v).unwrap());
            for threads in [2, 3] {
                let many = crate::parallel::in_pool(threads, || project_simplex(&v).unwrap());
                assert!(
                    one.iter()
                        .zip(&many)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name}, {threads} threads"
                );
            }
        }
    }

    #[test]
    fn an_interruption_stops_the_projection() {
        let v = uniforms(9, 3 * CHUNK);
        let mut out = vec![0.0; v.len()];
        let stop = || Err(Error::Interrupted);
        assert!(matches!(
            shifted_threshold(&v, &mut out, &stop, MAX_ROUNDS),
            Err(Error::Interrupted)
        ));
    }

    #[test]
    fn non_finite_entries_are_reported_by_index() {
        for k in [5, 3 * CHUNK] {
            let mut v = uniforms(10, k);
            v[k - 2] = f64::NAN;
            let message = project_simplex(&v).unwrap_err().to_string();
            assert!(message.contains(&format!("element {}", k - 2)), "{message}");
            v[k - 2] = f64::NEG_INFINITY;
            assert!(project_simplex(&v).is_err());
        }
    }

    #[test]
    fn top_indices_equals_a_stable_sort() {
        // Few distinct values: many ties at the s-th largest.
        for seed in 0..20u64 {
            let k = 1 + (seed as usize * 37) % 500;
            let v: Vec<f64> = uniforms(seed, k)
                .iter()
                .map(|x| (x * 6.0).floor() - 2.0)
                .collect();
            for s in [1, k / 3 + 1, k] {
                let mut order: Vec<usize> = (0..k).collect();
                order.sort_by(|&a, &b| v[b].total_cmp(&v[a])); // stable: lower index first
                let mut want = order[..s].to_vec();
                want.sort_unstable();
                assert_eq!(top_indices(&v, s).unwrap(), want, "seed {seed}, s {s}");
            }
        }
    }
}
