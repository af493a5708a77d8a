//! Euclidean projection onto the convex hull of the columns of a matrix: the server's
//! projection step of the linear-query protocols (linear-queries paper, Section 3, Algorithms
//! 1–4 of Bassily, "Linear Queries Estimation with Local Differential Privacy", AISTATS 2019:
//! the averaged reports are projected onto L = A·B₁^J = conv{±a_v}; the tighter conv{a_v} is
//! allowed too, see the docs page Mechanisms › Linear queries).
//!
//! # Algorithm
//! P(y) = argmin_{w ∈ L} ½‖w − y‖² is y + x where x is the minimum-norm point of the translated
//! polytope conv{s − y : s a vertex}. It is found by Wolfe's minimum-norm-point algorithm
//! (Wolfe 1976, "Finding the nearest point in a polytope"), a Frank–Wolfe method with an active
//! set (the *corral*, at most d + 1 affinely independent vertices) that terminates finitely on
//! polytopes, where plain Frank–Wolfe converges as O(1/t):
//! * a *major cycle* adds the vertex s minimizing ⟨x, s⟩ (the linear-minimization oracle);
//! * *minor cycles* move x to the affine minimizer of the corral, dropping vertices whose
//!   weights would turn negative. The affine minimizer solves (11ᵀ + PᵀP)α = 1, μ = α/Σα
//!   (P the corral's translated vertices; the ones row makes the matrix positive definite for
//!   affinely independent vertices), through a Cholesky factor grown by one row per added
//!   vertex and downdated by Givens rotations per dropped one: O(dk + k²) per change.
//!
//! The oracle over all J columns is the O(dJ) scan Aᵀx, a pass over 8dJ bytes of memory;
//! at d = 100, J = 10⁵ that is 80 MB, several milliseconds, while the final face alone has
//! about d vertices and Wolfe's method adds one per major cycle. So the oracle has two levels
//! (column generation): major cycles run on a *working set* of vertices (the corral plus the
//! best candidates of the last full scan, at most `capacity + 2K` vertices), and when the
//! restricted problem is solved (restricted gap ≤ tol/4) one full scan computes the true
//! duality gap and brings the K most violating vertices into the working set. An *iteration*
//! is one full scan; the objective decreases strictly from one to the next.
//!
//! # Certificate
//! With s = argmin over hull vertices of ⟨w − y, s⟩, the Frank–Wolfe duality gap
//! g(w) = ⟨w − y, w − s⟩ bounds ½‖w − y‖² − ½‖P(y) − y‖² from above and is ≥ ‖w − P(y)‖²
//! (strong convexity). It is computed at the returned point by the last full scan, in floating
//! point (accurate to about d·ε·‖w − y‖·max‖a_v‖). The run stops when g ≤ `tol` (absolute, in
//! squared units of the points), or after `max_iter` scans, or when the working set holds every
//! improving vertex the scan found but rounding stops the restricted solve from progressing
//! (a tol below what double precision can certify); the last two return `converged = false`.
//!
//! # Layout, parallelism, determinism
//! A is row-major d × J (numpy C order), so a scan accumulates x_i·A[i, block] over the rows
//! into a per-block buffer of columns (the kernel of `omp`'s dense Aᵀr), rayon over column
//! blocks. Each block's candidates are ranked by (score, column, sign), a total order, so
//! merging them in any order gives the same list: results are bit-identical on any number of
//! threads.

use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::omp::rmatvec_row_major_block;
use crate::parallel::PARALLEL_WORK;
use crate::simd::multiversion;
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::HashSet;

/// Columns per scan block: the block's partial products (4 KiB) stay in L1 while the d rows
/// of the block stream through.
const COLUMN_BLOCK: usize = 512;

/// A vertex joins the corral only if its squared distance to the corral's affine hull (as the
/// Cholesky pivot measures it) exceeds this fraction of its squared norm in the augmented
/// space; below it, it is numerically dependent and the restricted solve has stalled.
const DEPENDENT_PIVOT: f64 = 1e-13;

/// The restricted problem is solved to this fraction of `tol` before the next full scan.
const RESTRICTED_TOL_FRACTION: f64 = 0.25;

/// The outcome of [`project_hull`].
#[derive(Clone, Debug, PartialEq)]
pub struct HullProjection {
    /// The projected point (length d): a convex combination of the vertices.
    pub point: Vec<f64>,
    /// The Frank–Wolfe duality gap at `point` (≥ ‖point − P(y)‖², squared units).
    pub gap: f64,
    /// Full scans of the columns (one Aᵀx each) after the initial nearest-vertex scan.
    pub iterations: usize,
    /// Whether `gap ≤ tol`.
    pub converged: bool,
}

/// A hull vertex: column `column`, negated when `negative`, with its scan score.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    score: f64,
    column: usize,
    negative: bool,
}

impl Candidate {
    fn key(&self) -> (usize, bool) {
        (self.column, self.negative)
    }
    /// The total order of candidates: score, then column, then sign.
    fn order(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(self.column.cmp(&other.column))
            .then(self.negative.cmp(&other.negative))
    }
}

/// The `limit` smallest candidates seen, in increasing order.
#[derive(Clone, Debug)]
struct Best {
    limit: usize,
    items: Vec<Candidate>,
}

impl Best {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            items: Vec::new(),
        }
    }

    fn insert(&mut self, c: Candidate) {
        if self.items.len() == self.limit
            && self
                .items
                .last()
                .is_none_or(|last| c.order(last) != Ordering::Less)
        {
            return;
        }
        let at = self
            .items
            .partition_point(|e| e.order(&c) == Ordering::Less);
        self.items.insert(at, c);
        self.items.truncate(self.limit);
    }

    /// The union's `limit` smallest: independent of the order of merging.
    fn merge(self, other: Self) -> Self {
        let limit = self.limit;
        let (mut a, mut b) = (
            self.items.into_iter().peekable(),
            other.items.into_iter().peekable(),
        );
        let mut items = Vec::with_capacity(limit);
        while items.len() < limit {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.order(y) != Ordering::Greater,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            items.push(if take_a { a.next() } else { b.next() }.expect("peeked"));
        }
        Self { limit, items }
    }
}

multiversion! {
    /// `out[c] += A[i, first + c]²` over the rows of a block of columns.
    fn squared_norms_block(data: &[f64], cols: usize, first: usize, rows: usize, out: &mut [f64]) {
        let width = out.len();
        for i in 0..rows {
            let row = &data[i * cols + first..i * cols + first + width];
            for c in 0..width {
                out[c] += row[c] * row[c];
            }
        }
    }
}

/// A borrowed row-major d × J matrix of vertices (its columns).
#[derive(Clone, Copy)]
struct Columns<'a> {
    data: &'a [f64],
    rows: usize,
    cols: usize,
}

impl Columns<'_> {
    /// The `limit` best vertices by `score(⟨x, a_v⟩, ‖a_v‖²) = (score, negative)` (the norms
    /// are computed only `with_norms`; they are 0 otherwise). Stops early, with an error,
    /// when interrupted.
    fn scan(
        &self,
        x: &[f64],
        with_norms: bool,
        limit: usize,
        score: impl Fn(f64, f64) -> (f64, bool) + Sync,
    ) -> Result<Best> {
        let blocks = self.cols.div_ceil(COLUMN_BLOCK);
        let block_best = |b: usize| {
            let mut best = Best::new(limit);
            if crate::interrupt::requested() {
                return best; // unwinds quickly; the caller reports the interruption
            }
            let first = b * COLUMN_BLOCK;
            let width = COLUMN_BLOCK.min(self.cols - first);
            let mut products = [0.0f64; COLUMN_BLOCK];
            let mut norms = [0.0f64; COLUMN_BLOCK];
            rmatvec_row_major_block(self.data, self.cols, first, x, &mut products[..width]);
            if with_norms {
                squared_norms_block(self.data, self.cols, first, self.rows, &mut norms[..width]);
            }
            for c in 0..width {
                let (s, negative) = score(products[c], norms[c]);
                best.insert(Candidate {
                    score: s,
                    column: first + c,
                    negative,
                });
            }
            best
        };
        let best = if self.rows.saturating_mul(self.cols) < PARALLEL_WORK {
            (0..blocks)
                .map(block_best)
                .fold(Best::new(limit), Best::merge)
        } else {
            (0..blocks)
                .into_par_iter()
                .map(block_best)
                .reduce(|| Best::new(limit), Best::merge)
        };
        crate::interrupt::check()?;
        Ok(best)
    }

    /// Vertex `key` translated by −y.
    fn translated(&self, (column, negative): (usize, bool), y: &[f64], out: &mut Vec<f64>) {
        let sign = if negative { -1.0 } else { 1.0 };
        out.extend((0..self.rows).map(|i| sign * self.data[i * self.cols + column] - y[i]));
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 4];
    let chunks = a.len() / 4;
    for c in 0..chunks {
        for t in 0..4 {
            lanes[t] += a[4 * c + t] * b[4 * c + t];
        }
    }
    let tail: f64 = a[4 * chunks..]
        .iter()
        .zip(&b[4 * chunks..])
        .map(|(p, q)| p * q)
        .sum();
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
}

/// The translated vertices the restricted problem works on (row t = vertex `keys[t]` − y).
struct WorkingSet {
    d: usize,
    points: Vec<f64>,
    keys: Vec<(usize, bool)>,
    members: HashSet<(usize, bool)>,
}

impl WorkingSet {
    fn len(&self) -> usize {
        self.keys.len()
    }
    fn point(&self, t: usize) -> &[f64] {
        &self.points[t * self.d..(t + 1) * self.d]
    }
    fn push(&mut self, key: (usize, bool), columns: &Columns<'_>, y: &[f64]) {
        if self.members.insert(key) {
            columns.translated(key, y, &mut self.points);
            self.keys.push(key);
        }
    }
    /// Keep only the rows `keep` (in that order); returns their new indices 0, 1, ….
    fn retain(&mut self, keep: &[usize]) {
        let mut points = Vec::with_capacity(self.points.capacity());
        let mut keys = Vec::with_capacity(self.keys.capacity());
        for &t in keep {
            points.extend_from_slice(self.point(t));
            keys.push(self.keys[t]);
        }
        self.members = keys.iter().copied().collect();
        self.points = points;
        self.keys = keys;
    }
}

/// Lower-triangular Cholesky factor of 11ᵀ + PᵀP over the corral (row r has r + 1 entries).
#[derive(Default)]
struct Cholesky {
    rows: Vec<Vec<f64>>,
}

impl Cholesky {
    /// Append the row `m` (the new vertex's entries against the corral, then its diagonal);
    /// `false` (and no change) when the vertex is numerically affinely dependent.
    fn append(&mut self, m: &[f64]) -> bool {
        let k = self.rows.len();
        let mut row = Vec::with_capacity(k + 1);
        for r in 0..k {
            let l = &self.rows[r];
            let partial: f64 = (0..r).map(|c| l[c] * row[c]).sum();
            row.push((m[r] - partial) / l[r]);
        }
        let pivot = m[k] - row.iter().map(|v| v * v).sum::<f64>();
        let independent = pivot > DEPENDENT_PIVOT * m[k]; // false for NaN as well
        if !independent {
            return false;
        }
        row.push(pivot.sqrt());
        self.rows.push(row);
        true
    }

    /// α with (LLᵀ)α = 1.
    fn solve_ones(&self) -> Vec<f64> {
        let k = self.rows.len();
        let mut z = vec![0.0; k];
        for r in 0..k {
            let l = &self.rows[r];
            let partial: f64 = (0..r).map(|c| l[c] * z[c]).sum();
            z[r] = (1.0 - partial) / l[r];
        }
        for r in (0..k).rev() {
            let partial: f64 = (r + 1..k).map(|c| self.rows[c][r] * z[c]).sum();
            z[r] = (z[r] - partial) / self.rows[r][r];
        }
        z
    }

    /// Drop vertex `i`: remove its row, then Givens rotations on column pairs (j, j+1)
    /// restore the triangular shape of the rows below (LLᵀ keeps its value).
    fn delete(&mut self, i: usize) {
        self.rows.remove(i);
        let k = self.rows.len();
        for j in i..k {
            let (a, b) = (self.rows[j][j], self.rows[j][j + 1]);
            let h = a.hypot(b);
            let (c, s) = (a / h, b / h);
            for r in j..k {
                let row = &mut self.rows[r];
                let (p, q) = (row[j], row[j + 1]);
                row[j] = c * p + s * q;
                row[j + 1] = c * q - s * p;
            }
            self.rows[j].truncate(j + 1);
        }
    }
}

/// Wolfe's active set: vertices (indices into the working set), weights, Cholesky factor.
#[derive(Default)]
struct Corral {
    members: Vec<usize>,
    weights: Vec<f64>,
    factor: Cholesky,
}

impl Corral {
    /// Add working-set vertex `t` with weight 0; `false` when it is numerically dependent.
    fn add(&mut self, t: usize, ws: &WorkingSet) -> bool {
        let p = ws.point(t);
        let mut m: Vec<f64> = self
            .members
            .iter()
            .map(|&u| 1.0 + dot(ws.point(u), p))
            .collect();
        m.push(1.0 + dot(p, p));
        if !self.factor.append(&m) {
            return false;
        }
        self.members.push(t);
        self.weights.push(0.0);
        true
    }

    fn remove(&mut self, i: usize) {
        self.factor.delete(i);
        self.members.remove(i);
        self.weights.remove(i);
    }

    /// x = Σ weights · points.
    fn point(&self, ws: &WorkingSet, x: &mut [f64]) {
        x.fill(0.0);
        for (&t, &w) in self.members.iter().zip(&self.weights) {
            for (xi, pi) in x.iter_mut().zip(ws.point(t)) {
                *xi += w * pi;
            }
        }
    }

    /// Minor cycles after a vertex was added: move to the affine minimizer of the corral,
    /// dropping vertices on the way. `false` when rounding blocks progress (the new vertex
    /// would leave at once, or the system is too ill-conditioned to solve).
    fn minor_cycles(&mut self) -> bool {
        let newest = *self.members.last().expect("a vertex was just added");
        loop {
            let alpha = self.factor.solve_ones();
            let total: f64 = alpha.iter().sum();
            if !(total > 0.0 && total.is_finite()) {
                let last = self.members.len() - 1;
                self.remove(last);
                return false;
            }
            let mu: Vec<f64> = alpha.iter().map(|a| a / total).collect();
            if mu.iter().all(|&m| m > 0.0) {
                self.weights = mu;
                return true;
            }
            // The largest step from the weights towards μ that keeps them ≥ 0.
            let (mut theta, mut leaving) = (f64::INFINITY, 0);
            for (i, (&w, &m)) in self.weights.iter().zip(&mu).enumerate() {
                if m <= 0.0 {
                    let ratio = w / (w - m);
                    if ratio < theta {
                        (theta, leaving) = (ratio, i);
                    }
                }
            }
            for (w, m) in self.weights.iter_mut().zip(&mu) {
                *w += theta * (m - *w);
            }
            self.weights[leaving] = 0.0;
            let stuck = theta == 0.0 && self.members[leaving] == newest;
            for i in (0..self.members.len()).rev() {
                if self.weights[i] <= 0.0 {
                    self.remove(i);
                }
            }
            if stuck || self.members.is_empty() {
                return false;
            }
            let sum: f64 = self.weights.iter().sum();
            self.weights.iter_mut().for_each(|w| *w /= sum);
        }
    }
}

/// The number of hull vertices, the corral's capacity, the candidates taken per scan and the
/// working set's capacity, for d × J columns.
fn sizes(d: usize, j: usize, symmetric: bool) -> (usize, usize, usize, usize) {
    let vertices = if symmetric { j.saturating_mul(2) } else { j };
    let capacity = vertices.min(d.saturating_add(1));
    let per_scan = vertices.min(d.saturating_add(1).clamp(32, 512));
    let working = vertices.min(capacity.saturating_add(2 * per_scan));
    (vertices, capacity, per_scan, working)
}

/// Everything [`project_hull`] allocates for a d × J matrix: the working set (translated
/// vertices, keys and the set of keys, scores), the Cholesky factor of the corral, the
/// candidate lists of a scan (two per thread in flight), and a few d-vectors.
pub fn footprint(d: usize, j: usize, symmetric: bool) -> Footprint {
    let (_, capacity, per_scan, working) = sizes(d, j, symmetric);
    let (d64, w, c) = (d as u128, working as u128, capacity as u128);
    let threads = rayon::current_num_threads() as u128;
    Footprint::new(format!(
        "the projection onto the hull of {j} columns in dimension {d}"
    ))
    .add("working set of vertices", w.saturating_mul(d64), 8)
    .add("working-set keys and scores", w.saturating_mul(3), 24)
    .add(
        "corral Cholesky factor",
        c.saturating_mul(c + 1) / 2 + 4 * c,
        8,
    )
    .add(
        "scan candidate lists",
        (threads * 2 + 2).saturating_mul(4 * per_scan as u128),
        24,
    )
    .add("point and search vectors", d64.saturating_mul(4), 8)
    .hint("lower the dimension d")
}

/// Check the arguments of [`project_hull`], naming the first non-finite entry.
fn check_arguments(
    points: &[f64],
    d: usize,
    j: usize,
    y: &[f64],
    tol: f64,
    max_iter: usize,
) -> Result<()> {
    if d == 0 || j == 0 {
        return Err(Error::Value(format!(
            "points must have at least one row and one column, got shape ({d}, {j})"
        )));
    }
    if d.checked_mul(j) != Some(points.len()) {
        return Err(Error::Value(format!(
            "a {d}×{j} matrix needs {} entries, got {}",
            d.saturating_mul(j),
            points.len()
        )));
    }
    if y.len() != d {
        return Err(Error::Value(format!(
            "y has length {} but the points have dimension d = {d}",
            y.len()
        )));
    }
    if crate::finite::check_finite(points, "points").is_err() {
        let flat = points.iter().position(|v| !v.is_finite()).unwrap_or(0);
        return Err(Error::Value(format!(
            "points must be finite: element ({}, {}) is {}",
            flat / j,
            flat % j,
            points[flat]
        )));
    }
    crate::finite::check_finite(y, "y")?;
    if !(tol.is_finite() && tol > 0.0) {
        return Err(Error::Value(format!(
            "tol must be finite and > 0, got {tol}"
        )));
    }
    if max_iter == 0 {
        return Err(Error::Value("max_iter must be ≥ 1, got 0".into()));
    }
    Ok(())
}

/// Euclidean projection of `y` (length d) onto conv{±a_v} (`symmetric`) or conv{a_v}, where
/// a_v are the columns of the row-major d × J matrix `points`; stops at duality gap ≤ `tol`
/// or after `max_iter` full scans (see the module documentation). Interruptible.
pub fn project_hull(
    points: &[f64],
    d: usize,
    j: usize,
    y: &[f64],
    symmetric: bool,
    tol: f64,
    max_iter: usize,
) -> Result<HullProjection> {
    check_arguments(points, d, j, y, tol, max_iter)?;
    footprint(d, j, symmetric).check()?;
    let (_, capacity, per_scan, working) = sizes(d, j, symmetric);
    let columns = Columns {
        data: points,
        rows: d,
        cols: j,
    };
    let mut ws = WorkingSet {
        d,
        points: Vec::with_capacity(working * d),
        keys: Vec::with_capacity(working),
        members: HashSet::with_capacity(working),
    };

    // Start from the vertex nearest to y, with the next nearest as the first working set:
    // ‖s − y‖² − ‖y‖² = ‖a_v‖² ∓ 2⟨y, a_v⟩, the sign chosen to make it smaller.
    let nearest = columns.scan(y, true, per_scan, |c, n| {
        if symmetric {
            (n - 2.0 * c.abs(), c < 0.0)
        } else {
            (n - 2.0 * c, false)
        }
    })?;
    for candidate in &nearest.items {
        ws.push(candidate.key(), &columns, y);
    }
    let mut corral = Corral::default();
    // A lone vertex always passes the pivot test (its pivot is 1 + ‖s − y‖² ≥ 1).
    let added = corral.add(0, &ws);
    debug_assert!(added);
    corral.weights[0] = 1.0;
    let mut x = ws.point(0).to_vec();
    let mut scores = Vec::with_capacity(working);
    let restricted_tol = RESTRICTED_TOL_FRACTION * tol;

    let mut iterations = 0;
    loop {
        restricted_solve(
            &mut corral,
            &ws,
            &mut x,
            &mut scores,
            restricted_tol,
            capacity,
        )?;

        let point: Vec<f64> = y.iter().zip(&x).map(|(a, b)| a + b).collect();
        let best = columns.scan(&x, false, 2 * per_scan, |c, _| {
            if symmetric {
                (-c.abs(), c > 0.0)
            } else {
                (c, false)
            }
        })?;
        iterations += 1;
        let at_point = dot(&x, &point);
        let lowest = best.items[0].score;
        let gap = (at_point - lowest).max(0.0);
        if !gap.is_finite() {
            return Err(Error::Value(
                "the points and y are too large for double precision (the duality gap \
                 overflows); rescale them"
                    .into(),
            ));
        }
        let done = |converged| HullProjection {
            point: point.clone(),
            gap,
            iterations,
            converged,
        };
        if gap <= tol {
            return Ok(done(true));
        }
        if iterations >= max_iter {
            return Ok(done(false));
        }
        let fresh: Vec<(usize, bool)> = best
            .items
            .iter()
            .filter(|c| c.score < at_point && !ws.members.contains(&c.key()))
            .take(per_scan)
            .map(Candidate::key)
            .collect();
        if fresh.is_empty() {
            // Every improving vertex is in the working set, yet its restricted problem cannot
            // progress: tol is below what rounding lets the method certify.
            return Ok(done(false));
        }
        if ws.len() + fresh.len() > working {
            ws.retain(&corral.members);
            corral.members = (0..corral.members.len()).collect();
        }
        for key in fresh {
            ws.push(key, &columns, y);
        }
    }
}

/// Wolfe's major cycles over the working set until its duality gap is ≤ `tol`, or rounding
/// blocks progress (then the caller's full scan decides what to do).
fn restricted_solve(
    corral: &mut Corral,
    ws: &WorkingSet,
    x: &mut [f64],
    scores: &mut Vec<f64>,
    tol: f64,
    capacity: usize,
) -> Result<()> {
    // Wolfe's method is finite; the cap only guards against cycling under rounding.
    let max_cycles = 100usize.saturating_add(capacity.saturating_mul(50));
    for _ in 0..max_cycles {
        crate::interrupt::check()?;
        let norm = dot(x, x);
        scores.clear();
        scores.extend((0..ws.len()).map(|t| dot(x, ws.point(t))));
        let (entering, lowest) =
            scores
                .iter()
                .enumerate()
                .fold(
                    (0, f64::INFINITY),
                    |(bt, bs), (t, &s)| {
                        if s < bs {
                            (t, s)
                        } else {
                            (bt, bs)
                        }
                    },
                );
        if norm - lowest <= tol || corral.members.contains(&entering) {
            return Ok(());
        }
        if !corral.add(entering, ws) {
            return Ok(());
        }
        let progressed = corral.minor_cycles();
        corral.point(ws, x);
        if !progressed || dot(x, x) >= norm {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_inputs::Inputs;

    impl Inputs {
        /// d × J row-major, Gaussian columns scaled to norm 1.
        fn sphere_columns(&mut self, d: usize, j: usize) -> Vec<f64> {
            let mut a: Vec<f64> = (0..d * j).map(|_| self.normal()).collect();
            for v in 0..j {
                let norm = (0..d).map(|i| a[i * j + v].powi(2)).sum::<f64>().sqrt();
                for i in 0..d {
                    a[i * j + v] /= norm;
                }
            }
            a
        }
    }

    fn column(a: &[f64], d: usize, j: usize, v: usize) -> Vec<f64> {
        (0..d).map(|i| a[i * j + v]).collect()
    }

    /// max over vertices s of ⟨y − w, s − w⟩: ≤ 0 exactly at the projection.
    fn worst_variational(a: &[f64], d: usize, j: usize, y: &[f64], w: &[f64], sym: bool) -> f64 {
        let r: Vec<f64> = y.iter().zip(w).map(|(p, q)| p - q).collect();
        let mut worst = f64::NEG_INFINITY;
        for v in 0..j {
            let s = column(a, d, j, v);
            for sign in if sym { vec![1.0, -1.0] } else { vec![1.0] } {
                let value: f64 = (0..d).map(|i| r[i] * (sign * s[i] - w[i])).sum();
                worst = worst.max(value);
            }
        }
        worst
    }

    #[test]
    fn projects_onto_a_segment_and_a_square() {
        // conv{a_0, a_1} with a_0 = (0, 0), a_1 = (1, 0) (row-major 2 × 2).
        let a = [0.0, 1.0, 0.0, 0.0];
        let r = project_hull(&a, 2, 2, &[0.3, 2.0], false, 1e-12, 100).unwrap();
        assert!(r.converged && r.gap <= 1e-12);
        assert!(
            (r.point[0] - 0.3).abs() < 1e-9 && r.point[1].abs() < 1e-9,
            "{r:?}"
        );
        let r = project_hull(&a, 2, 2, &[3.0, -1.0], false, 1e-12, 100).unwrap();
        assert!(
            (r.point[0] - 1.0).abs() < 1e-9 && r.point[1].abs() < 1e-9,
            "{r:?}"
        );
        // conv{±e_1, ±e_2}: the ℓ1 ball; (1, 1) projects to (½, ½).
        let identity = [1.0, 0.0, 0.0, 1.0];
        let r = project_hull(&identity, 2, 2, &[1.0, 1.0], true, 1e-14, 100).unwrap();
        assert!(
            (r.point[0] - 0.5).abs() < 1e-7 && (r.point[1] - 0.5).abs() < 1e-7,
            "{r:?}"
        );
        // Inside: y itself.
        let r = project_hull(&identity, 2, 2, &[0.2, -0.3], true, 1e-12, 100).unwrap();
        assert!(r.converged);
        assert!(
            (r.point[0] - 0.2).abs() < 1e-6 && (r.point[1] + 0.3).abs() < 1e-6,
            "{r:?}"
        );
    }

    #[test]
    fn satisfies_the_variational_inequality_on_random_polytopes() {
        let mut g = Inputs(7);
        for &(d, j, sym) in &[
            (5, 40, true),
            (5, 40, false),
            (30, 3000, true),
            (30, 3000, false),
            (1, 5, false),
            (3, 1, false),
            (3, 1, true),
        ] {
            let a = g.sphere_columns(d, j);
            let y: Vec<f64> = (0..d).map(|_| 2.0 * g.normal()).collect();
            let r = project_hull(&a, d, j, &y, sym, 1e-10, 1000).unwrap();
            assert!(r.converged && r.gap <= 1e-10, "{d} {j} {sym}: {r:?}");
            // ⟨y − w, s − w⟩ ≤ gap-sized slack for every vertex s.
            let worst = worst_variational(&a, d, j, &y, &r.point, sym);
            assert!(worst <= 1e-10 + 1e-12, "{d} {j} {sym}: worst {worst}");
        }
    }

    #[test]
    fn degenerate_columns() {
        // Duplicates and a zero column.
        let a = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]; // 2 × 4: e1, e1, e2, e2 … as columns
        let r = project_hull(&a, 2, 4, &[1.0, 1.0], false, 1e-12, 100).unwrap();
        assert!(
            (r.point[0] - 0.5).abs() < 1e-6 && (r.point[1] - 0.5).abs() < 1e-6,
            "{r:?}"
        );
        let zero = [0.0, 0.0, 0.0];
        let r = project_hull(&zero, 3, 1, &[1.0, 2.0, 3.0], true, 1e-12, 10).unwrap();
        assert!(
            r.converged && r.point.iter().all(|&v| v.abs() < 1e-12),
            "{r:?}"
        );
        // y equal to a vertex.
        let r = project_hull(&a, 2, 4, &[0.0, 1.0], false, 1e-12, 10).unwrap();
        assert!(r.converged && r.point == vec![0.0, 1.0], "{r:?}");
    }

    #[test]
    fn reports_non_convergence_and_rejects_bad_input() {
        let mut g = Inputs(3);
        let (d, j) = (40, 5000);
        let a = g.sphere_columns(d, j);
        // Inside the hull, where the corral needs d + 1 vertices: one scan is not enough.
        let y: Vec<f64> = (0..d)
            .map(|i| 0.5 * (0..d).map(|v| a[i * j + v]).sum::<f64>() / d as f64)
            .collect();
        let r = project_hull(&a, d, j, &y, true, 1e-12, 1).unwrap();
        assert!(!r.converged && r.gap > 1e-12 && r.iterations == 1, "{r:?}");
        let full = project_hull(&a, d, j, &y, true, 1e-12, 1000).unwrap();
        assert!(full.converged && full.iterations > 1);
        // The certificate bounds the squared distance to the (converged) projection.
        let dist2: f64 = r
            .point
            .iter()
            .zip(&full.point)
            .map(|(p, q)| (p - q).powi(2))
            .sum();
        assert!(dist2 <= r.gap + 1e-10, "{dist2} > {}", r.gap);

        let bad = |e: Result<HullProjection>, words: &str| match e {
            Err(Error::Value(m)) => assert!(m.contains(words), "{m}"),
            other => panic!("{other:?}"),
        };
        bad(project_hull(&[], 0, 3, &[], true, 1e-9, 10), "shape (0, 3)");
        bad(
            project_hull(&[1.0, f64::NAN], 1, 2, &[0.0], true, 1e-9, 10),
            "element (0, 1) is NaN",
        );
        bad(
            project_hull(&[1.0, 2.0], 1, 2, &[f64::INFINITY], true, 1e-9, 10),
            "y must be finite",
        );
        bad(
            project_hull(&[1.0, 2.0], 1, 2, &[0.0, 1.0], true, 1e-9, 10),
            "length 2",
        );
        bad(
            project_hull(&[1.0, 2.0], 1, 2, &[0.0], true, 0.0, 10),
            "tol",
        );
        bad(
            project_hull(&[1.0, 2.0], 1, 2, &[0.0], true, 1e-9, 0),
            "max_iter",
        );
    }

    #[test]
    fn bit_identical_on_any_number_of_threads() {
        let mut g = Inputs(11);
        let (d, j) = (20, 40_000); // large enough for the parallel scan
        let a = g.sphere_columns(d, j);
        let y: Vec<f64> = (0..d).map(|_| 2.0 * g.normal()).collect();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| project_hull(&a, d, j, &y, true, 1e-11, 1000).unwrap())
        };
        let one = run(1);
        assert!(one.converged);
        for threads in [2, 4] {
            let other = run(threads);
            assert_eq!(one.gap.to_bits(), other.gap.to_bits());
            assert!(one
                .point
                .iter()
                .zip(&other.point)
                .all(|(p, q)| p.to_bits() == q.to_bits()));
            assert_eq!(one.iterations, other.iterations);
        }
    }

    #[test]
    fn cholesky_downdate_matches_a_fresh_factor() {
        let m = |i: usize, k: usize| {
            1.0 + ((i * 7 + k * 7) % 5) as f64 * 0.1 + if i == k { 6.0 } else { 0.0 }
        };
        let mut full = Cholesky::default();
        for r in 0..5 {
            let row: Vec<f64> = (0..=r).map(|c| m(r, c)).collect();
            assert!(full.append(&row));
        }
        full.delete(1);
        let kept = [0, 2, 3, 4];
        let mut fresh = Cholesky::default();
        for (r, &i) in kept.iter().enumerate() {
            let row: Vec<f64> = kept[..=r].iter().map(|&c| m(i, c)).collect();
            assert!(fresh.append(&row));
        }
        for (p, q) in full.rows.iter().zip(&fresh.rows) {
            assert_eq!(p.len(), q.len());
            for (a, b) in p.iter().zip(q) {
                assert!((a - b).abs() < 1e-12, "{:?} vs {:?}", full.rows, fresh.rows);
            }
        }
    }
}
