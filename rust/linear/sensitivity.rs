//! The exact L2 sensitivity of a query matrix: Δ2 = max_{v, v'} ‖a_v − a_v'‖, the diameter of
//! its columns (Bassily, AISTATS 2019, Algorithm 1, and the sensitivity erratum on the docs
//! page Mechanisms › Linear queries: two inputs differ by up to 2r, not r, so the Gaussian
//! protocol must be calibrated to Δ2).
//!
//! # Accuracy
//! Every pair's squared distance is summed from its coordinate differences,
//! `Σ_k (a_v[k] − a_v'[k])²`, never through `‖a‖² + ‖b‖² − 2⟨a, b⟩`, whose cancellation loses
//! all relative accuracy for nearly equal columns. Each difference and square is one rounding
//! and the sum of d non-negative terms adds at most (d − 1) more, so the returned Δ2 is within
//! a relative `(d/2 + 2)·2⁻⁵³` of the exact diameter (and exact 0 when all columns are equal).
//!
//! # The search: the same answer as the O(J² d) scan, without scanning every pair
//! The result is the one of [`scan`] (every pair, the largest squared distance, then the
//! lexicographically first pair) bit for bit, but only pairs that can reach the maximum are
//! computed. Every skipped pair is skipped on a *certified* bound: an upper bound on its
//! distance, inflated by a relative margin far larger than the rounding of the bound and of
//! the pair's own computed distance (plus an absolute 2⁻⁵⁰⁰ for squares that underflow),
//! below the largest squared distance already computed. A skipped pair is therefore strictly
//! below the maximum as the scan computes it, and every pair that attains it is computed.
//!
//! 1. Duplicated columns are merged (a parallel sort): each distinct column is represented by
//!    its first index, which is what the lexicographically first pair uses.
//! 2. A lower bound: farthest-point passes (O(J d) each) from the point farthest from the
//!    bounding-box centre and from the extremes of each coordinate. They usually find the
//!    diameter itself; the bound only has to be good, never exact.
//! 3. d = 2: each point's partners at distance ≥ the bound lie in an angular window around
//!    its antipode (seen from the bounding-box centre): `‖x − y‖² = ρ_x² + ρ_y² + 2ρ_xρ_y cos ψ`
//!    with ψ the deviation from antipodal and ρ the distances to the centre, so
//!    `cos ψ ≥ (L − ρ_x² − ρ_max²)/(2ρ_x ρ_max)` (no partner when that exceeds 1). The points
//!    are sorted by angle and each window is two binary searches: O(J log J) plus the pairs in
//!    the windows, which is few even for points on a circle (where every point is on the
//!    convex hull and nothing is pruned by distance to the centre alone).
//! 4. d ≠ 2: a ball tree (median splits on the widest coordinate, 16 points per leaf); each
//!    point searches it for its farthest partner, skipping a node when
//!    `‖x − centre‖ + radius` is certified below the bound. Gaussian-like clouds prune almost
//!    everything; points on a sphere in d ≥ 3 prune poorly (each point's partners are the
//!    points near its antipode, and the bound's slack grows with a node's radius), which is
//!    why the search estimates its cost first ([`Search::estimate`]).
//!
//! The best value found so far raises the bound while the search runs (an atomic maximum):
//! pruning with a larger bound is still certified, so the result does not depend on the
//! order of the work or the number of threads.
//!
//! # Range
//! Squared distances must be representable: a matrix whose bounding box has a squared
//! diagonal that overflows (columns about 1.3·10¹⁵⁴ apart) is refused, and so is one whose
//! distinct columns are all closer than about 3·10⁻¹⁴⁵ (their squares underflow: the scan
//! would report Δ2 = 0 for columns that differ). Rescale such a matrix by a power of two.
//!
//! # Cost
//! [`Search::new`]: O(J log J · d) (the sort, the passes, the tree or the angle sort).
//! [`Search::estimate`]: the number of distance evaluations the search will make, exact for
//! d = 2 (the windows' sizes), and for the tree extrapolated from the searches of 48 points
//! spread over the tree, each stopped once it alone would exceed the caller's limit. Work is
//! counted in distance evaluations (a pair, or a point against a node).

use super::check_columns;
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::cmp::Ordering as CmpOrdering;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The diameter of the columns and a pair `(v, v')`, `v < v'`, that attains it (`(0, 0)` when
/// J = 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diameter {
    pub value: f64,
    pub pair: (usize, usize),
}

/// `Σ_k (a[k] − b[k])²` with four independent accumulators (vectorizable; a fixed order, so
/// the same bits on every run).
#[inline]
fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (a4.remainder(), b4.remainder());
    for (x, y) in a4.zip(b4) {
        for t in 0..4 {
            let diff = x[t] - y[t];
            lanes[t] += diff * diff;
        }
    }
    let mut total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (x, y) in ra.iter().zip(rb) {
        let diff = x - y;
        total += diff * diff;
    }
    total
}

/// A candidate: (squared distance, first index, second index).
type Candidate = (f64, usize, usize);

/// The better of two candidates: larger squared distance, then the earlier pair.
fn better(a: Candidate, b: Candidate) -> Candidate {
    if a.0 > b.0 || (a.0 == b.0 && (a.1, a.2) <= (b.1, b.2)) {
        a
    } else {
        b
    }
}

/// The candidate of a pair of original indices, ordered.
#[inline]
fn candidate(s: f64, a: usize, b: usize) -> Candidate {
    if a < b {
        (s, a, b)
    } else {
        (s, b, a)
    }
}

/// The exact diameter by the O(J² d) scan of every pair (the reference [`diameter`]
/// reproduces): rows of the upper triangle over rayon's pool, each checking
/// [`crate::interrupt`].
pub fn scan(columns: &[f64], j: usize, d: usize) -> Result<Diameter> {
    check_columns(columns, j, d)?;
    let row = |v: usize| -> Result<Candidate> {
        crate::interrupt::check()?;
        let a = &columns[v * d..(v + 1) * d];
        let mut best = (0.0, v, v);
        for w in v + 1..j {
            let candidate = (squared_distance(a, &columns[w * d..(w + 1) * d]), v, w);
            best = better(best, candidate);
        }
        Ok(best)
    };
    let work = (j as u128)
        .saturating_mul(j as u128)
        .saturating_mul(d as u128);
    let (squared, v, w) = if work < crate::parallel::PARALLEL_WORK as u128 {
        (0..j)
            .map(row)
            .try_fold((0.0, 0, 0), |acc, r| r.map(|r| better(acc, r)))?
    } else {
        (0..j)
            .into_par_iter()
            .map(row)
            .try_reduce(|| (0.0, 0, 0), |a, b| Ok(better(a, b)))?
    };
    // A zero diameter is reported on the pair (0, 0), whatever the order of the reduction.
    let pair = if squared > 0.0 { (v, w) } else { (0, 0) };
    Ok(Diameter {
        value: squared.sqrt(),
        pair,
    })
}

/// The exact diameter of the J columns (row-major J × d `columns`), by the certified search
/// of the module documentation: the same value and pair as [`scan`]. Interruptible; no limit
/// on its work (see [`Search`] for the estimate and the limit).
pub fn diameter(columns: &[f64], j: usize, d: usize) -> Result<Diameter> {
    let search = Search::new(columns, j, d)?;
    search.run(0, search.len(), None)?;
    search.result()
}

/// Points per leaf of the ball tree.
const LEAF: usize = 16;

/// Points whose searches are sampled by [`Search::estimate`].
const SAMPLES: usize = 48;

/// Queries per interruption check and per parallel task.
const QUERY_CHUNK: usize = 64;

/// 2⁻⁵⁰⁰: an absolute margin on distances, covering squares that underflow.
fn absolute_margin() -> f64 {
    f64::powi(2.0, -500)
}

/// 2⁻⁹⁶⁰: the smallest largest squared distance accepted (below it, squares underflow).
fn smallest_squared() -> f64 {
    f64::powi(2.0, -960)
}

/// A node of the ball tree: points `start..end` (in tree order), a centre and a radius that
/// bounds (with margin) the distance from the centre to each of them.
#[derive(Clone, Debug)]
struct Node {
    start: usize,
    end: usize,
    /// Children (0 for a leaf: the root is never a child).
    left: usize,
    right: usize,
    radius: f64,
}

enum Method {
    /// Fewer than two distinct columns.
    Done,
    /// d = 2: points sorted by angle around `centre`.
    Angular {
        angle: Vec<f64>,
        /// Upper bounds on the distance of each point to the centre.
        rho: Vec<f64>,
        rho_max: f64,
        /// Points too close to the centre for their angle to mean anything: in every window.
        loose: Vec<usize>,
    },
    /// A ball tree over the points (in tree order); `centres` holds d numbers per node.
    Tree { nodes: Vec<Node>, centres: Vec<f64> },
}

/// A prepared diameter search (module documentation): build it, ask for its cost, run it in
/// parts (`run(start, stop)` over the query points `0..len()`), read its result.
pub struct Search {
    d: usize,
    /// The distinct columns, row-major m × d, in query order.
    points: Vec<f64>,
    /// The first original index of each.
    index: Vec<usize>,
    method: Method,
    /// Relative margin of the bounds (module documentation).
    margin: f64,
    best: Mutex<Candidate>,
    /// The bits of the largest squared distance computed so far (non-negative floats order
    /// as their bits).
    bound: AtomicU64,
    work: AtomicU64,
}

/// Lexicographic order of two rows, −0 and +0 equal.
fn compare_rows(a: &[f64], b: &[f64]) -> CmpOrdering {
    for (x, y) in a.iter().zip(b) {
        let o = (x + 0.0).total_cmp(&(y + 0.0));
        if o != CmpOrdering::Equal {
            return o;
        }
    }
    CmpOrdering::Equal
}

impl Search {
    /// Merge duplicates, check the range, find a lower bound and build the search structure
    /// (O(J log J · d)); interruptible.
    pub fn new(columns: &[f64], j: usize, d: usize) -> Result<Search> {
        check_columns(columns, j, d)?;
        crate::memory::check_fits(j.saturating_mul(d + 4), 8, "the diameter search")?;
        let row = |v: usize| &columns[v * d..(v + 1) * d];
        // 1. Distinct columns, each at its first index.
        let mut order: Vec<usize> = (0..j).collect();
        let by_row = |a: &usize, b: &usize| compare_rows(row(*a), row(*b)).then(a.cmp(b));
        if j * d >= crate::parallel::PARALLEL_WORK {
            order.par_sort_unstable_by(by_row);
        } else {
            order.sort_unstable_by(by_row);
        }
        crate::interrupt::check()?;
        let mut index: Vec<usize> = Vec::new();
        for (t, &v) in order.iter().enumerate() {
            if t == 0 || compare_rows(row(order[t - 1]), row(v)) != CmpOrdering::Equal {
                index.push(v);
            }
        }
        drop(order);
        index.sort_unstable();
        let m = index.len();
        let margin = 1.0 + 256.0 * (d as f64 + 8.0) * f64::EPSILON;
        let mut points = Vec::with_capacity(m * d);
        for &v in &index {
            points.extend_from_slice(row(v));
        }
        let mut search = Search {
            d,
            points,
            index,
            method: Method::Done,
            margin,
            best: Mutex::new((0.0, 0, 0)),
            bound: AtomicU64::new(0),
            work: AtomicU64::new(0),
        };
        if m < 2 {
            return Ok(search);
        }
        // 2. The range: the squared diagonal of the bounding box must be finite.
        let (lo, hi) = search.bounding_box(0..m);
        let diagonal: f64 = lo.iter().zip(&hi).map(|(a, b)| (b - a) * (b - a)).sum();
        if !diagonal.is_finite() {
            let (k, span) = lo.iter().zip(&hi).map(|(a, b)| b - a).enumerate().fold(
                (0, 0.0f64),
                |acc, (k, s)| if s > acc.1 { (k, s) } else { acc },
            );
            return Err(Error::Value(format!(
                "the query matrix is too large for double precision: its columns span {span:e} \
                 in query {k}, and the squared distances between columns overflow; rescale the \
                 queries (for example divide them by a power of 2) and their answers"
            )));
        }
        // 3. A lower bound from farthest-point passes.
        let centre: Vec<f64> = lo.iter().zip(&hi).map(|(a, b)| 0.5 * a + 0.5 * b).collect();
        let mut starts = vec![search.farthest_from(&centre).1];
        let widest = (0..d)
            .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])).then(b.cmp(&a)))
            .unwrap_or(0);
        for k in [widest] {
            let (mut low, mut high) = (0, 0);
            for t in 1..m {
                let x = search.point(t)[k];
                if x < search.point(low)[k] {
                    low = t;
                }
                if x > search.point(high)[k] {
                    high = t;
                }
            }
            starts.push(low);
            starts.push(high);
        }
        starts.sort_unstable();
        starts.dedup();
        for start in starts {
            let mut from = start;
            let mut last = -1.0;
            for _ in 0..4 {
                crate::interrupt::check()?;
                let (s, to) = search.farthest_from(search.point(from));
                search.offer(candidate(s, search.index[from], search.index[to]));
                if s <= last {
                    break;
                }
                last = s;
                from = to;
            }
        }
        // 4. The structure of the search.
        search.method = if d == 2 {
            search.angular(&centre)?
        } else {
            search.tree()?
        };
        Ok(search)
    }

    fn point(&self, t: usize) -> &[f64] {
        &self.points[t * self.d..(t + 1) * self.d]
    }

    fn bounding_box(&self, range: std::ops::Range<usize>) -> (Vec<f64>, Vec<f64>) {
        let mut lo = vec![f64::INFINITY; self.d];
        let mut hi = vec![f64::NEG_INFINITY; self.d];
        for t in range {
            for (k, &x) in self.point(t).iter().enumerate() {
                lo[k] = lo[k].min(x);
                hi[k] = hi[k].max(x);
            }
        }
        (lo, hi)
    }

    /// The farthest point from `x` and its squared distance (ties: the first position).
    fn farthest_from(&self, x: &[f64]) -> (f64, usize) {
        let m = self.index.len();
        let pick = |a: (f64, usize), b: (f64, usize)| {
            if a.0 > b.0 || (a.0 == b.0 && a.1 <= b.1) {
                a
            } else {
                b
            }
        };
        (0..m)
            .into_par_iter()
            .with_min_len(4096)
            .map(|t| (squared_distance(x, self.point(t)), t))
            .reduce(|| (-1.0, usize::MAX), pick)
    }

    /// Record a computed pair: the best candidate and the pruning bound.
    fn offer(&self, c: Candidate) {
        let mut best = self.best.lock().expect("the diameter search's lock");
        *best = better(*best, c);
        self.bound.fetch_max(c.0.to_bits(), Ordering::Relaxed);
    }

    fn current_bound(&self) -> f64 {
        f64::from_bits(self.bound.load(Ordering::Relaxed))
    }

    /// Sort the points by angle around `centre` (d = 2).
    fn angular(&mut self, centre: &[f64]) -> Result<Method> {
        let m = self.index.len();
        let tiny = f64::powi(2.0, -900);
        let polar: Vec<(f64, f64)> = (0..m)
            .map(|t| {
                let p = self.point(t);
                let (x, y) = (p[0] - centre[0], p[1] - centre[1]);
                let rho = (x * x + y * y).sqrt() * self.margin + absolute_margin();
                (y.atan2(x), rho)
            })
            .collect();
        let mut order: Vec<usize> = (0..m).collect();
        order.sort_unstable_by(|&a, &b| polar[a].0.total_cmp(&polar[b].0).then(a.cmp(&b)));
        crate::interrupt::check()?;
        self.reorder(&order);
        let angle: Vec<f64> = order.iter().map(|&t| polar[t].0).collect();
        let rho: Vec<f64> = order.iter().map(|&t| polar[t].1).collect();
        let rho_max = rho.iter().cloned().fold(0.0, f64::max);
        let loose = (0..m).filter(|&t| rho[t] < tiny).collect();
        Ok(Method::Angular {
            angle,
            rho,
            rho_max,
            loose,
        })
    }

    /// Put the points (and their indices) in `order`.
    fn reorder(&mut self, order: &[usize]) {
        let d = self.d;
        let mut points = Vec::with_capacity(self.points.len());
        for &t in order {
            points.extend_from_slice(&self.points[t * d..(t + 1) * d]);
        }
        self.points = points;
        self.index = order.iter().map(|&t| self.index[t]).collect();
    }

    /// Build the ball tree and put the points in tree order.
    fn tree(&mut self) -> Result<Method> {
        let (d, m) = (self.d, self.index.len());
        let mut order: Vec<usize> = (0..m).collect();
        let mut nodes = vec![Node {
            start: 0,
            end: m,
            left: 0,
            right: 0,
            radius: 0.0,
        }];
        // The split coordinate is the widest side of a box inherited from the parent (its box
        // cut at the median): it contains the node's points, which is all a split needs (the
        // radii below are computed from the points themselves).
        let (lo, hi) = self.bounding_box(0..m);
        let mut pending = vec![(0usize, lo, hi)];
        while let Some((n, lo, hi)) = pending.pop() {
            let (start, end) = (nodes[n].start, nodes[n].end);
            if end - start <= LEAF {
                continue;
            }
            if n % 1024 == 0 {
                crate::interrupt::check()?;
            }
            let k = (0..d)
                .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])).then(b.cmp(&a)))
                .unwrap_or(0);
            let mid = (start + end) / 2;
            let points = &self.points;
            order[start..end].select_nth_unstable_by(mid - start, |&a, &b| {
                points[a * d + k]
                    .total_cmp(&points[b * d + k])
                    .then(a.cmp(&b))
            });
            let (left, right) = (nodes.len(), nodes.len() + 1);
            for (s, e) in [(start, mid), (mid, end)] {
                nodes.push(Node {
                    start: s,
                    end: e,
                    left: 0,
                    right: 0,
                    radius: 0.0,
                });
            }
            nodes[n].left = left;
            nodes[n].right = right;
            let cut = points[order[mid] * d + k];
            let (mut left_hi, mut right_lo) = (hi.clone(), lo.clone());
            left_hi[k] = cut;
            right_lo[k] = cut;
            pending.push((left, lo, left_hi));
            pending.push((right, right_lo, hi));
        }
        self.reorder(&order);
        // Centres (bounding-box centres) and radii, certified with the margins.
        let mut centres = vec![0.0; nodes.len() * d];
        nodes
            .par_iter_mut()
            .zip(centres.par_chunks_mut(d))
            .with_min_len(64)
            .for_each(|(node, centre)| {
                let (lo, hi) = self.bounding_box(node.start..node.end);
                for k in 0..d {
                    centre[k] = 0.5 * lo[k] + 0.5 * hi[k];
                }
                let far = (node.start..node.end)
                    .map(|t| squared_distance(centre, self.point(t)))
                    .fold(0.0, f64::max);
                node.radius = far.sqrt() * self.margin + absolute_margin();
            });
        Ok(Method::Tree { nodes, centres })
    }

    /// Query points (`run`'s positions).
    pub fn len(&self) -> usize {
        match self.method {
            Method::Done => 0,
            _ => self.index.len(),
        }
    }

    /// Whether there is nothing to search (fewer than two distinct columns).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distance evaluations made so far.
    pub fn work(&self) -> u64 {
        self.work.load(Ordering::Relaxed)
    }

    /// The squared distance below which a pair is certified not to matter.
    fn threshold(&self) -> f64 {
        self.current_bound()
    }

    /// The window of partners of point `t` (d = 2): index ranges in angle order.
    fn window(&self, t: usize, angle: &[f64], rho: &[f64], rho_max: f64) -> [(usize, usize); 2] {
        use std::f64::consts::PI;
        let m = angle.len();
        let l = self.threshold() / (self.margin * self.margin);
        let (r, big) = (rho[t], rho_max);
        let reach = r * r + big * big;
        let all = [(0, m), (0, 0)];
        if r < f64::powi(2.0, -900) || l <= reach * self.margin {
            return all; // even perpendicular partners could reach it
        }
        let gamma = (l - reach) / (2.0 * r * big);
        // generous: a relative 1e-12 below, then the angle above
        let gamma = gamma - 1e-12 * (l + reach) / (2.0 * r * big);
        if gamma > 1.0 {
            return [(0, 0), (0, 0)];
        }
        let half = gamma.max(-1.0).acos() * (1.0 + 1e-12) + 1e-12;
        if half >= PI {
            return all;
        }
        let mut target = angle[t] + PI;
        if target > PI {
            target -= 2.0 * PI;
        }
        let (a, b) = (target - half, target + half);
        let find = |x: f64| angle.partition_point(|&y| y < x);
        let upto = |x: f64| angle.partition_point(|&y| y <= x);
        if a < -PI {
            [(0, upto(b)), (find(a + 2.0 * PI), m)]
        } else if b > PI {
            [(find(a), m), (0, upto(b - 2.0 * PI))]
        } else {
            [(find(a), upto(b)), (0, 0)]
        }
    }

    /// The search of query point `t`: its best candidate and the work it took; stopped (with
    /// `true`) once its work passes `cap`.
    fn query(&self, t: usize, cap: u64) -> (Candidate, u64, bool) {
        let x = self.point(t);
        let it = self.index[t];
        let mut best: Candidate = (0.0, it, it);
        let mut work = 0u64;
        let consider = |w: usize, best: &mut Candidate| {
            if w != t {
                let s = squared_distance(x, self.point(w));
                *best = better(*best, candidate(s, it, self.index[w]));
            }
        };
        match &self.method {
            Method::Done => {}
            Method::Angular {
                angle,
                rho,
                rho_max,
                loose,
            } => {
                for (a, b) in self.window(t, angle, rho, *rho_max) {
                    for w in a..b {
                        consider(w, &mut best);
                    }
                    work += (b - a) as u64;
                }
                for &w in loose {
                    consider(w, &mut best);
                }
                work += loose.len() as u64 + 1;
            }
            Method::Tree { nodes, centres } => {
                let d = self.d;
                let bound_of = |n: usize| {
                    let c = &centres[n * d..(n + 1) * d];
                    let reach = (squared_distance(x, c).sqrt() + nodes[n].radius) * self.margin
                        + absolute_margin();
                    reach * reach
                };
                let mut stack = vec![(0usize, bound_of(0))];
                work += 1;
                while let Some((n, reach)) = stack.pop() {
                    if reach < self.threshold().max(best.0) {
                        continue;
                    }
                    let node = &nodes[n];
                    if node.left == 0 {
                        for w in node.start..node.end {
                            consider(w, &mut best);
                        }
                        work += (node.end - node.start) as u64;
                    } else {
                        let (l, r) = (bound_of(node.left), bound_of(node.right));
                        work += 2;
                        // the farther child is searched first (popped last pushed)
                        if l >= r {
                            stack.push((node.right, r));
                            stack.push((node.left, l));
                        } else {
                            stack.push((node.left, l));
                            stack.push((node.right, r));
                        }
                    }
                    if work > cap {
                        return (best, work, true);
                    }
                }
            }
        }
        (best, work, false)
    }

    /// The number of distance evaluations [`run`](Self::run) over every point will make:
    /// exact for d = 2, sampled for the tree (module documentation). With a `limit`, each
    /// sampled search stops once it alone shows that the total exceeds it (the estimate is
    /// then at least `limit`). O(J log J) at most, with the sample's work bounded by the limit.
    pub fn estimate(&self, limit: Option<u64>) -> Result<u64> {
        let m = self.len();
        match &self.method {
            Method::Done => Ok(0),
            Method::Angular {
                angle,
                rho,
                rho_max,
                loose,
            } => {
                let total: u64 = (0..m)
                    .into_par_iter()
                    .with_min_len(4096)
                    .map(|t| {
                        self.window(t, angle, rho, *rho_max)
                            .iter()
                            .map(|(a, b)| (b - a) as u64)
                            .sum::<u64>()
                            + loose.len() as u64
                            + 1
                    })
                    .sum();
                Ok(total)
            }
            Method::Tree { .. } => {
                let samples = SAMPLES.min(m);
                // a single sample above `cap` puts the extrapolation above the limit
                let cap = limit.map_or(u64::MAX, |l| {
                    (l as u128 * samples as u128 / m as u128).min(u64::MAX as u128) as u64 + 1
                });
                let works: Vec<u64> = (0..samples)
                    .into_par_iter()
                    .map(|i| {
                        let t = (2 * i + 1) * m / (2 * samples);
                        let (c, w, _) = self.query(t, cap);
                        self.offer(c);
                        w
                    })
                    .collect();
                crate::interrupt::check()?;
                let mean = works.iter().map(|&w| w as f64).sum::<f64>() / samples as f64;
                Ok((mean * m as f64).min(u64::MAX as f64) as u64)
            }
        }
    }

    /// Search from the query points `start..stop` (in parallel, interruptible). With
    /// `max_work`, stops with an error once the total work passes it.
    pub fn run(&self, start: usize, stop: usize, max_work: Option<u64>) -> Result<()> {
        let stop = stop.min(self.len());
        if start >= stop {
            return Ok(());
        }
        let limit = max_work.unwrap_or(u64::MAX);
        let chunks: Vec<usize> = (start..stop).step_by(QUERY_CHUNK).collect();
        chunks.into_par_iter().try_for_each(|first| {
            crate::interrupt::check()?;
            let last = (first + QUERY_CHUNK).min(stop);
            let mut best: Candidate = (0.0, 0, 0);
            let mut work = 0u64;
            for t in first..last {
                let (c, w, _) = self.query(t, u64::MAX);
                best = better(best, c);
                work += w;
                if c.0 > self.current_bound() {
                    self.bound.fetch_max(c.0.to_bits(), Ordering::Relaxed);
                }
            }
            self.offer(best);
            let total = self.work.fetch_add(work, Ordering::Relaxed) + work;
            if total > limit {
                return Err(Error::Value(format!(
                    "the exact sensitivity search passed its limit of {limit} distance \
                     evaluations (the estimate made before it started was lower); raise the \
                     limit or pass None to run it to the end"
                )));
            }
            Ok(())
        })
    }

    /// The diameter (after `run` over every query point): the value and pair of [`scan`].
    /// Refuses a matrix whose distinct columns are too close for their squared distances to
    /// be represented.
    pub fn result(&self) -> Result<Diameter> {
        let (squared, v, w) = *self.best.lock().expect("the diameter search's lock");
        if self.index.len() >= 2 && squared < smallest_squared() {
            return Err(Error::Value(format!(
                "the columns of the query matrix differ by at most about {:e}: their squared \
                 distances underflow double precision, so the sensitivity cannot be computed \
                 (it would round to 0 for columns that differ); rescale the queries (for \
                 example multiply them by a power of 2) and their answers",
                squared.sqrt().max(f64::MIN_POSITIVE)
            )));
        }
        let pair = if squared > 0.0 { (v, w) } else { (0, 0) };
        Ok(Diameter {
            value: squared.sqrt(),
            pair,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(columns: &[f64], j: usize, d: usize) -> f64 {
        let mut best = 0.0f64;
        for v in 0..j {
            for w in 0..j {
                let s: f64 = (0..d)
                    .map(|k| (columns[v * d + k] - columns[w * d + k]).powi(2))
                    .sum();
                best = best.max(s.sqrt());
            }
        }
        best
    }

    #[test]
    fn matches_brute_force_and_finds_antipodes() {
        let (j, d) = (37, 5);
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        };
        let mut columns: Vec<f64> = (0..j * d).map(|_| next()).collect();
        let got = diameter(&columns, j, d).unwrap();
        assert!((got.value - brute(&columns, j, d)).abs() <= 1e-15 * got.value);
        // Make columns 3 and 20 antipodal and the longest: Δ2 = 2r exactly.
        for k in 0..d {
            columns[3 * d + k] = if k == 0 { 10.0 } else { 0.0 };
            columns[20 * d + k] = if k == 0 { -10.0 } else { 0.0 };
        }
        let got = diameter(&columns, j, d).unwrap();
        assert_eq!(got.value, 20.0);
        assert_eq!(got.pair, (3, 20));
    }

    #[test]
    fn near_duplicates_and_single_column() {
        // Two columns 1e-12 apart at norm 1e6: the Gram form would return 0 or garbage.
        let columns = [1e6, 2e6, 1e6 + 1e-9 * 1e3, 2e6];
        let got = diameter(&columns, 2, 2).unwrap();
        let exact = (1e6 + 1e-9 * 1e3) - 1e6;
        assert_eq!(got.value, exact);
        let one = diameter(&[1.0, 2.0, 3.0], 1, 3).unwrap();
        assert_eq!(
            one,
            Diameter {
                value: 0.0,
                pair: (0, 0)
            }
        );
        assert!(diameter(&[], 0, 3).is_err());
        assert!(diameter(&[f64::NAN], 1, 1).is_err());
    }

    use crate::test_inputs::Inputs;

    impl Inputs {
        /// J points in R^d of one of several shapes (some degenerate).
        fn shape(&mut self, kind: usize, j: usize, d: usize) -> Vec<f64> {
            let mut a: Vec<f64> = (0..j * d).map(|_| self.normal()).collect();
            match kind {
                0 => {}
                1 => {
                    // on a sphere
                    for v in 0..j {
                        let row = &mut a[v * d..(v + 1) * d];
                        let n = row.iter().map(|x| x * x).sum::<f64>().sqrt();
                        row.iter_mut().for_each(|x| *x /= n);
                    }
                }
                2 => {
                    // small integers: many duplicates and ties
                    a.iter_mut().for_each(|x| *x = (x.round()).clamp(-2.0, 2.0));
                }
                3 => {
                    // collinear: t·u + c
                    let u: Vec<f64> = (0..d).map(|_| self.normal()).collect();
                    for v in 0..j {
                        let t = self.normal();
                        for k in 0..d {
                            a[v * d + k] = t * u[k] + 0.25;
                        }
                    }
                }
                4 => {
                    // all equal
                    let p: Vec<f64> = (0..d).map(|_| self.normal()).collect();
                    for v in 0..j {
                        a[v * d..(v + 1) * d].copy_from_slice(&p);
                    }
                }
                5 => {
                    // two tight clusters far apart, with exact copies
                    for v in 0..j {
                        let side = if v % 2 == 0 { 1e3 } else { -1e3 };
                        for k in 0..d {
                            a[v * d + k] = side + 1e-9 * a[v * d + k];
                        }
                        if v >= 2 && v % 5 == 0 {
                            let w = self.below(v);
                            let copy: Vec<f64> = a[w * d..(w + 1) * d].to_vec();
                            a[v * d..(v + 1) * d].copy_from_slice(&copy);
                        }
                    }
                }
                _ => {
                    // a regular polygon / cube corners: many exact ties of the diameter
                    for v in 0..j {
                        for k in 0..d {
                            let angle = std::f64::consts::TAU * (v as f64) / (j as f64);
                            a[v * d + k] = if k % 2 == 0 { angle.cos() } else { angle.sin() };
                            if d > 2 && k >= 2 {
                                a[v * d + k] = if (v >> (k % 3)) & 1 == 0 { 1.0 } else { -1.0 };
                            }
                        }
                    }
                }
            }
            a
        }
    }

    #[test]
    fn the_search_reproduces_the_scan_bit_for_bit() {
        let mut g = Inputs(2024);
        for case in 0..700 {
            let d = 1 + case % 8;
            let kind = (case / 8) % 7;
            let j = 1 + g.below(if case % 3 == 0 { 300 } else { 60 });
            let a = g.shape(kind, j, d);
            let fast = diameter(&a, j, d).unwrap();
            let slow = scan(&a, j, d).unwrap();
            assert_eq!(
                (fast.value.to_bits(), fast.pair),
                (slow.value.to_bits(), slow.pair),
                "case {case}: kind {kind}, J = {j}, d = {d}"
            );
        }
    }

    #[test]
    fn a_circle_and_a_large_cloud_finish() {
        // d = 2 on a circle: every point is on the hull, nothing is pruned by its distance to
        // the centre; the angular windows keep the work near linear.
        let j = 1 << 16;
        let mut a = Vec::with_capacity(2 * j);
        for v in 0..j {
            let t = std::f64::consts::TAU * (v as f64 + 0.3) / j as f64;
            a.push(t.cos());
            a.push(t.sin());
        }
        let search = Search::new(&a, j, 2).unwrap();
        let work = search.estimate(None).unwrap();
        assert!(work < 64 * j as u64, "{work}");
        search.run(0, search.len(), None).unwrap();
        let got = search.result().unwrap();
        assert!((got.value - 2.0).abs() < 1e-9, "{got:?}");
        assert!(search.work() <= work);
        let mut g = Inputs(5);
        let j = 1 << 15;
        for d in [1, 3, 8] {
            let a = g.shape(0, j, d);
            let search = Search::new(&a, j, d).unwrap();
            assert!(search.estimate(None).unwrap() < 1000 * j as u64);
            search.run(0, search.len(), None).unwrap();
            assert!(search.result().unwrap().value > 0.0);
        }
    }

    #[test]
    fn a_sphere_estimate_stops_at_the_limit_and_the_run_refuses_to_pass_it() {
        let mut g = Inputs(9);
        let (j, d) = (1 << 14, 6);
        let a = g.shape(1, j, d);
        let search = Search::new(&a, j, d).unwrap();
        let limit = 10 * j as u64;
        let estimate = search.estimate(Some(limit)).unwrap();
        assert!(estimate > limit, "{estimate}");
        let err = search.run(0, search.len(), Some(limit)).unwrap_err();
        assert!(matches!(err, Error::Value(m) if m.contains("limit")));
    }

    #[test]
    fn refuses_overflowing_and_underflowing_distances() {
        let big = [1e300, -1e300, 0.0, 0.0];
        let err = diameter(&big, 2, 2).unwrap_err();
        assert!(matches!(err, Error::Value(m) if m.contains("overflow")));
        // 1e-170 apart: the square underflows to 0, so the scan says Δ2 = 0
        let tiny = [0.0, 1e-170];
        assert_eq!(scan(&tiny, 2, 1).unwrap().value, 0.0);
        let err = diameter(&tiny, 2, 1).unwrap_err();
        assert!(matches!(err, Error::Value(m) if m.contains("underflow")));
        // equal columns, however tiny, are fine
        let same = [1e-170, 1e-170, 1e-170];
        assert_eq!(diameter(&same, 3, 1).unwrap().value, 0.0);
        // -0 and +0 are the same point
        assert_eq!(diameter(&[0.0, -0.0], 2, 1).unwrap().pair, (0, 0));
    }

    #[test]
    fn same_result_on_any_pool() {
        let (j, d) = (300, 8);
        let columns: Vec<f64> = (0..j * d)
            .map(|i| ((i * 7919) % 1000) as f64 / 1000.0)
            .collect();
        let reference = diameter(&columns, j, d).unwrap();
        for threads in [1, 2, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            assert_eq!(
                pool.install(|| diameter(&columns, j, d).unwrap()),
                reference
            );
        }
    }
}
