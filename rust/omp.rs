//! Orthogonal matching pursuit (Pati, Rezaiifar & Krishnaprasad 1993; Tropp & Gilbert 2007).
//!
//! Each step adds the column most correlated with the residual (largest `|a_jᵀ r|`, ties to
//! the lowest index; columns are not renormalized, as in scikit-learn's `orthogonal_mp`), then
//! refits least squares on the whole support. The normal equations `A_SᵀA_S x = A_Sᵀy` are
//! solved through a Cholesky factor grown by one row per step, so a step costs O(m·|S| + |S|²)
//! beyond the correlations.
//!
//! Correlations: on a dense matrix, a fresh `Aᵀr` per step (one pass over A, like BLAS gemv).
//! On a [`SignMatrix`] they are kept exact and cheap with Gram columns:
//! `Aᵀr = Aᵀy − Σ_{l∈S} x_l·(Aᵀa_l)` and `(Aᵀa_l)_i = m − 2·popcount(col_i XOR col_l)`, so a
//! step costs k popcounts of m bits plus O(k·|S|) flops, and A is never expanded to floats.
//!
//! A dictionary that [ranks approximately](Dictionary::ranks_approximately) (the structured
//! compressive matrix: a fast transform of a nearby matrix) has its [`RESCORED`] best-ranked
//! columns rescored exactly each step; the refit uses exact columns only.
//!
//! Stops after `s` atoms, when the residual norm is ≤ `tol`, when the residual is exactly
//! explained (norm ≤ 1e-12·‖y‖: further atoms would fit rounding noise), when the next
//! atom is numerically dependent on the chosen ones, or when the residual is orthogonal to
//! every remaining column.

use crate::error::{Error, Result};
use crate::parallel::for_each_chunk_mut;
use crate::signs::SignMatrix;
use crate::simd::multiversion;
use rayon::prelude::*;

/// The result of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct OmpResult {
    /// Coefficients, length k, zero off the support.
    pub coef: Vec<f64>,
    /// Selected columns in the order they were chosen.
    pub support: Vec<usize>,
    /// The coefficient of the all-ones atom (0 unless run with an intercept).
    pub intercept: f64,
    /// ‖y − A x − intercept·1‖₂ at the end.
    pub residual_norm: f64,
    /// Why the run stopped.
    pub stop: OmpStop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OmpStop {
    /// `s` atoms were chosen.
    Sparsity,
    /// The residual norm reached `tol`.
    Tolerance,
    /// The residual was explained to rounding precision.
    ExactFit,
    /// The best remaining column lies in the span of the chosen ones.
    Dependent,
    /// The residual is orthogonal to every remaining column: no atom can reduce it.
    Orthogonal,
}

/// What OMP needs from a matrix.
pub trait Dictionary: Sync {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// `Aᵀr`.
    fn rmatvec(&self, r: &[f64]) -> Result<Vec<f64>>;
    /// `Aᵀr` into `out` (length k): OMP's per-step products, which reuse one buffer.
    fn rmatvec_into(&self, r: &[f64], out: &mut [f64]) -> Result<()> {
        out.copy_from_slice(&self.rmatvec(r)?);
        Ok(())
    }
    /// Column `j` into `out` (length m).
    fn column(&self, j: usize, out: &mut [f64]);
    /// `Aᵀa_j` exactly, where cheap (bit-packed ±1 matrices); `None` makes OMP recompute `Aᵀr`.
    /// Bytes of scratch one `rmatvec` allocates beyond its result.
    fn rmatvec_scratch_bytes(&self) -> u64 {
        0
    }
    /// Whether [`gram_column`](Self::gram_column) gives exact Gram columns.
    fn has_gram(&self) -> bool {
        false
    }
    fn gram_column(&self, _j: usize) -> Option<Vec<i32>> {
        None
    }
    /// Whether `rmatvec` only ranks the columns (a close approximation of `Aᵀr`, e.g. the
    /// structured compressive matrix before its per-column flips): OMP then rescores the
    /// [`RESCORED`] best-ranked columns exactly with [`column`](Self::column) and picks the
    /// best of those, and takes every inner product of the refit from exact columns.
    fn ranks_approximately(&self) -> bool {
        false
    }
    /// For a dictionary that [ranks approximately](Self::ranks_approximately) (and has no
    /// exact Gram columns): the `count` columns not in `chosen` of largest |ranking value|
    /// (ties to the lowest index), in any order. The ranking value of column j is
    /// `rmatvec(r)_j`, or `rmatvec(r)_j − shift·rmatvec(1)_j` with `minus_ones = Some(shift)`
    /// (OMP's first step with an intercept). A dictionary can do this without any vector of
    /// k floats (the structured compressive matrix scans its transform buffer); this default
    /// builds them.
    fn top_ranked(
        &self,
        r: &[f64],
        minus_ones: Option<f64>,
        chosen: &[usize],
        count: usize,
    ) -> Result<Vec<usize>> {
        let mut ranking = self.rmatvec(r)?;
        if let Some(shift) = minus_ones {
            let ones = self.rmatvec(&vec![1.0; self.rows()])?;
            subtract_scaled_f64(&ones, shift, &mut ranking);
        }
        let mut sorted = chosen.to_vec();
        sorted.sort_unstable();
        Ok(top_unchosen(
            &ranking,
            |j| sorted.binary_search(&j).is_ok(),
            count,
        ))
    }
    /// Bytes one [`top_ranked`](Self::top_ranked) call allocates at its peak (beyond what
    /// the dictionary keeps).
    fn top_ranked_bytes(&self) -> u64 {
        (self.cols() as u64)
            .saturating_mul(16)
            .saturating_add(self.rmatvec_scratch_bytes())
    }
}

/// Whether OMP on `a` takes the lean path: a dictionary that ranks approximately and has no
/// exact Gram columns ranks with [`Dictionary::top_ranked`] and keeps no vector of k
/// correlations or flags.
fn ranks_lean<D: Dictionary + ?Sized>(a: &D) -> bool {
    a.ranks_approximately() && !a.has_gram()
}

/// Columns rescored exactly per step on a dictionary that [ranks
/// approximately](Dictionary::ranks_approximately).
pub const RESCORED: usize = 16;

/// A borrowed dense m×k float64 matrix in row-major (C) or column-major (Fortran) order.
#[derive(Clone, Copy, Debug)]
pub struct DenseMatrix<'a> {
    data: &'a [f64],
    rows: usize,
    cols: usize,
    row_major: bool,
}

impl<'a> DenseMatrix<'a> {
    /// Borrow `data` as an m×k matrix; errors on a size mismatch or a NaN/inf entry (named
    /// by its (row, column)).
    pub fn new(data: &'a [f64], rows: usize, cols: usize, row_major: bool) -> Result<Self> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::Value(format!(
                "a {rows}×{cols} matrix needs {} entries, got {}",
                rows.saturating_mul(cols),
                data.len()
            )));
        }
        if crate::finite::check_finite(data, "A").is_err() && !data.is_empty() {
            let flat = data.iter().position(|v| !v.is_finite()).unwrap_or(0);
            let (i, j) = if row_major {
                (flat / cols, flat % cols)
            } else {
                (flat % rows, flat / rows)
            };
            return Err(Error::Value(format!(
                "A must be finite: element ({i}, {j}) is {}",
                data[flat]
            )));
        }
        Ok(Self {
            data,
            rows,
            cols,
            row_major,
        })
    }
}

const COLUMN_BLOCK: usize = 512;

multiversion! {
    /// `out[c] += Σ_i r_i · A[i, first + c]` over a block of columns of a row-major matrix,
    /// four rows per sweep so `out` is loaded and stored a quarter as often.
    pub(crate) fn rmatvec_row_major_block(data: &[f64], cols: usize, first: usize, r: &[f64], out: &mut [f64]) {
        let width = out.len();
        let row = |i: usize| &data[i * cols + first..i * cols + first + width];
        let quads = r.len() / 4;
        for q in 0..quads {
            let i = 4 * q;
            let (a0, a1, a2, a3) = (row(i), row(i + 1), row(i + 2), row(i + 3));
            let (r0, r1, r2, r3) = (r[i], r[i + 1], r[i + 2], r[i + 3]);
            for c in 0..width {
                out[c] += (r0 * a0[c] + r1 * a1[c]) + (r2 * a2[c] + r3 * a3[c]);
            }
        }
        for i in 4 * quads..r.len() {
            let (a, ri) = (row(i), r[i]);
            for c in 0..width {
                out[c] += ri * a[c];
            }
        }
    }
}

multiversion! {
    /// `out[j] = a_jᵀ r` for consecutive columns of a column-major block, four columns per
    /// sweep so each load of `r` serves four products.
    fn dots_column_major(columns: &[f64], rows: usize, r: &[f64], out: &mut [f64]) {
        let column = |j: usize| &columns[j * rows..(j + 1) * rows];
        let quads = out.len() / 4;
        for q in 0..quads {
            let (c0, c1, c2, c3) = (column(4 * q), column(4 * q + 1), column(4 * q + 2), column(4 * q + 3));
            let mut acc = [[0.0f64; 8]; 4];
            let chunks = rows / 8;
            for c in 0..chunks {
                for t in 0..8 {
                    let i = 8 * c + t;
                    acc[0][t] += c0[i] * r[i];
                    acc[1][t] += c1[i] * r[i];
                    acc[2][t] += c2[i] * r[i];
                    acc[3][t] += c3[i] * r[i];
                }
            }
            for (lane, col) in [c0, c1, c2, c3].iter().enumerate() {
                let tail: f64 = (8 * chunks..rows).map(|i| col[i] * r[i]).sum();
                out[4 * q + lane] = acc[lane].iter().sum::<f64>() + tail;
            }
        }
        for j in 4 * quads..out.len() {
            out[j] = dot(column(j), r);
        }
    }
}

multiversion! {
    fn dot(a: &[f64], b: &[f64]) -> f64 {
        let mut acc = [0.0f64; 8];
        let chunks = a.len() / 8;
        for c in 0..chunks {
            for t in 0..8 {
                acc[t] += a[8 * c + t] * b[8 * c + t];
            }
        }
        let tail: f64 = a[8 * chunks..].iter().zip(&b[8 * chunks..]).map(|(x, y)| x * y).sum();
        acc.iter().sum::<f64>() + tail
    }
}

impl Dictionary for DenseMatrix<'_> {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
    fn rmatvec(&self, r: &[f64]) -> Result<Vec<f64>> {
        let mut out = crate::memory::zeroed_vec::<f64>(self.cols, "the product Aᵀr")?;
        if self.row_major {
            out.par_chunks_mut(COLUMN_BLOCK)
                .enumerate()
                .for_each(|(b, block)| {
                    rmatvec_row_major_block(self.data, self.cols, b * COLUMN_BLOCK, r, block)
                });
        } else {
            out.par_chunks_mut(64).enumerate().for_each(|(b, block)| {
                let columns = &self.data[b * 64 * self.rows..(b * 64 + block.len()) * self.rows];
                dots_column_major(columns, self.rows, r, block)
            });
        }
        Ok(out)
    }
    fn column(&self, j: usize, out: &mut [f64]) {
        if self.row_major {
            for (i, o) in out.iter_mut().enumerate() {
                *o = self.data[i * self.cols + j];
            }
        } else {
            out.copy_from_slice(&self.data[j * self.rows..(j + 1) * self.rows]);
        }
    }
}

impl Dictionary for SignMatrix {
    fn rows(&self) -> usize {
        SignMatrix::rows(self)
    }
    fn cols(&self) -> usize {
        SignMatrix::cols(self)
    }
    fn rmatvec(&self, r: &[f64]) -> Result<Vec<f64>> {
        SignMatrix::rmatvec(self, r)
    }
    fn column(&self, j: usize, out: &mut [f64]) {
        self.column_f64(j, out)
    }
    fn rmatvec_scratch_bytes(&self) -> u64 {
        SignMatrix::rmatvec_scratch_bytes(self)
    }
    fn has_gram(&self) -> bool {
        true
    }
    fn gram_column(&self, j: usize) -> Option<Vec<i32>> {
        Some(SignMatrix::gram_column(self, j))
    }
}

/// Largest total of cached Gram columns (`s·k` int32): above it the correlations are
/// recomputed by `Aᵀr` each step instead. A size rule, not a memory-budget rule, so that the
/// result (which differs by rounding between the two paths) depends only on the problem.
pub const GRAM_CACHE_MAX_BYTES: u64 = 1 << 28;

/// Whether a run with at most `s` atoms on `k` columns caches Gram columns.
fn caches_grams(has_gram: bool, k: usize, s: usize) -> bool {
    has_gram && (s as u64 + 1).saturating_mul(k as u64).saturating_mul(4) <= GRAM_CACHE_MAX_BYTES
}

/// Everything [`omp_with_intercept`] allocates for at most `s` atoms on `a` (checked by it
/// before it starts); see [`footprint_for`].
pub fn footprint<D: Dictionary + ?Sized>(a: &D, s: usize) -> crate::memory::Footprint {
    if ranks_lean(a) {
        return ranked_footprint_for(a.rows(), a.cols(), s, a.top_ranked_bytes(), true);
    }
    footprint_for(
        a.rows(),
        a.cols(),
        s,
        a.has_gram(),
        a.rmatvec_scratch_bytes(),
    )
}

/// Everything [`omp_sparse`] allocates for at most `s` atoms on `a` (checked by it before
/// it starts): [`footprint`] without the result's vector of k coefficients.
pub fn sparse_footprint<D: Dictionary + ?Sized>(a: &D, s: usize) -> crate::memory::Footprint {
    if ranks_lean(a) {
        return ranked_footprint_for(a.rows(), a.cols(), s, a.top_ranked_bytes(), false);
    }
    let full = footprint(a, s);
    let result = (a.cols() as u128).saturating_mul(8);
    crate::memory::Footprint::new(format!(
        "OMP with up to {s} atoms on a {}×{} dictionary",
        a.rows(),
        a.cols()
    ))
    .add(
        "correlation and coefficient vectors (less the result)",
        u64::try_from(full.bytes().saturating_sub(result)).unwrap_or(u64::MAX),
        1,
    )
    .hint("lower the sparsity s (atoms) or the dictionary size")
}

/// The footprint of OMP's lean path (a dictionary that ranks approximately, without Gram
/// columns) with at most `s` atoms on an m × k dictionary whose ranking allocates `ranking`
/// bytes per step: the atoms and the Cholesky factor, the ranking, and with `result` the
/// k coefficients of [`OmpResult`]; no vector of k correlations.
pub fn ranked_footprint_for(
    m: usize,
    k: usize,
    s: usize,
    ranking: u64,
    result: bool,
) -> crate::memory::Footprint {
    let (rows, cols, atoms) = (m as u64, k as u64, s as u64 + 1);
    crate::memory::Footprint::new(format!("OMP with up to {s} atoms on a {m}×{k} dictionary"))
        .add("the coefficients", if result { cols } else { 0 }, 8)
        .add(
            "atoms, residual and target",
            (atoms + 2).saturating_mul(rows),
            8,
        )
        .add("Cholesky factor", atoms.saturating_mul(atoms), 8)
        .add("support and coefficients", atoms, 16)
        .add("the ranking (Aᵀr and its best columns)", ranking, 1)
        .hint("lower the sparsity s (atoms) or the dictionary size")
}

/// The footprint of OMP with at most `s` atoms on an m × k dictionary (with exact Gram
/// columns or not, and `scratch` bytes per `Aᵀr`): five vectors of k correlations or
/// coefficients (Aᵀy, the current and the next correlations, Aᵀ1, the result), one flag per
/// column, the atoms and the Cholesky factor, the scratch of `Aᵀr`, and the cached Gram
/// columns when they are used.
pub fn footprint_for(
    m: usize,
    k: usize,
    s: usize,
    has_gram: bool,
    scratch: u64,
) -> crate::memory::Footprint {
    let (rows, cols, atoms) = (m as u64, k as u64, s as u64 + 1);
    let grams = if caches_grams(has_gram, k, s) {
        atoms.saturating_mul(cols)
    } else {
        0
    };
    crate::memory::Footprint::new(format!("OMP with up to {s} atoms on a {m}×{k} dictionary"))
        .add(
            "correlation and coefficient vectors",
            cols.saturating_mul(5),
            8,
        )
        .add("chosen flags", cols, 1)
        .add(
            "atoms, residual and target",
            (atoms + 2).saturating_mul(rows),
            8,
        )
        .add("Cholesky factor", atoms.saturating_mul(atoms), 8)
        .add("Aᵀr scratch", scratch, 1)
        .add("cached Gram columns", grams, 4)
        .hint("lower the sparsity s (atoms) or the dictionary size")
}

/// Validate the arguments shared by every OMP entry point.
pub fn check_arguments(m: usize, k: usize, y_len: usize, s: usize, tol: Option<f64>) -> Result<()> {
    if y_len != m {
        return Err(Error::Value(format!(
            "y has length {y_len} but the matrix has {m} rows"
        )));
    }
    if s == 0 || s > m.min(k) {
        return Err(Error::Value(format!(
            "the number of atoms s must lie in [1, min(m, k)] = [1, {}], got {s}",
            m.min(k)
        )));
    }
    if let Some(t) = tol {
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::Value(format!(
                "tol must be a finite number ≥ 0, got {t}"
            )));
        }
    }
    Ok(())
}

/// Run OMP for at most `s` atoms on `y ≈ A x`.
pub fn omp<D: Dictionary + ?Sized>(
    a: &D,
    y: &[f64],
    s: usize,
    tol: Option<f64>,
) -> Result<OmpResult> {
    omp_with_intercept(a, y, s, tol, false)
}

/// OMP on `y ≈ A x + β·1`: with `intercept`, the all-ones vector is an extra atom that is in
/// the support from the start and does not count towards `s` (the exact linear model of
/// compressive privatization, whose channel adds an unknown multiple of 1 to `A x`). On a
/// `SignMatrix` the correlations stay exact: `Aᵀ1` is computed once.
pub fn omp_with_intercept<D: Dictionary + ?Sized>(
    a: &D,
    y: &[f64],
    s: usize,
    tol: Option<f64>,
    intercept: bool,
) -> Result<OmpResult> {
    check_run(a, y, s, tol)?;
    footprint(a, s).check()?;
    let run = run(a, y, s, tol, intercept)?;
    let mut full = vec![0.0; a.cols()];
    for (&j, &c) in run.support.iter().zip(&run.coef) {
        full[j] = c;
    }
    Ok(OmpResult {
        coef: full,
        intercept: run.intercept,
        support: run.support,
        residual_norm: run.residual_norm,
        stop: run.stop,
    })
}

/// The result of [`omp_sparse`]: [`OmpResult`] with the coefficients of the support only.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseOmpResult {
    /// Selected columns in the order they were chosen.
    pub support: Vec<usize>,
    /// `coef[i]` is the coefficient of column `support[i]`.
    pub coef: Vec<f64>,
    /// The coefficient of the all-ones atom (0 unless run with an intercept).
    pub intercept: f64,
    /// ‖y − A x − intercept·1‖₂ at the end.
    pub residual_norm: f64,
    /// Why the run stopped.
    pub stop: OmpStop,
}

/// [`omp_with_intercept`] returning the coefficients of the support only (no vector of k
/// coefficients): the same run, the same numbers.
pub fn omp_sparse<D: Dictionary + ?Sized>(
    a: &D,
    y: &[f64],
    s: usize,
    tol: Option<f64>,
    intercept: bool,
) -> Result<SparseOmpResult> {
    check_run(a, y, s, tol)?;
    sparse_footprint(a, s).check()?;
    run(a, y, s, tol, intercept)
}

fn check_run<D: Dictionary + ?Sized>(a: &D, y: &[f64], s: usize, tol: Option<f64>) -> Result<()> {
    check_arguments(a.rows(), a.cols(), y.len(), s, tol)?;
    if let Some(i) = y.iter().position(|v| !v.is_finite()) {
        return Err(Error::Value(format!(
            "y must be finite: element {i} is {}",
            y[i]
        )));
    }
    Ok(())
}

/// The run of [`omp_with_intercept`] (arguments checked, footprint checked).
fn run<D: Dictionary + ?Sized>(
    a: &D,
    y: &[f64],
    s: usize,
    tol: Option<f64>,
    intercept: bool,
) -> Result<SparseOmpResult> {
    let (m, k) = (a.rows(), a.cols());
    let use_grams = caches_grams(a.has_gram(), k, s);
    let approximate = a.ranks_approximately();
    // The lean path ranks through `top_ranked`: no `initial`, correlations, Aᵀ1 or flags.
    let lean = ranks_lean(a);
    let y_norm = dot(y, y).sqrt();
    let exact_fit = 1e-12 * y_norm;
    let initial = if lean { Vec::new() } else { a.rmatvec(y)? };
    let mut correlations = initial.clone();
    let mut chosen = vec![false; if lean { 0 } else { k }];
    let mut support: Vec<usize> = Vec::with_capacity(s);
    let mut atoms: Vec<Vec<f64>> = Vec::with_capacity(s + 1); // dense atoms, intercept first
    let mut grams: Vec<Vec<i32>> = Vec::new(); // Aᵀa_l for l ∈ S, when exact Gram is cheap
    let mut chol = Cholesky::with_capacity(s + 1);
    let mut rhs: Vec<f64> = Vec::with_capacity(s + 1); // atomsᵀ y
    let mut coef: Vec<f64> = Vec::new(); // coefficients of `atoms`
    let mut residual = y.to_vec();
    let mut residual_norm = y_norm;
    let mut stale = false; // correlations lag behind the last refit

    // Aᵀ1, the correlations of the all-ones atom with every column.
    let ones_corr = if intercept {
        let ones = vec![1.0; m];
        let corr = if lean { None } else { Some(a.rmatvec(&ones)?) };
        chol.push(&[], m as f64);
        rhs.push(y.iter().sum());
        atoms.push(ones);
        coef = chol.solve(&rhs);
        refit_residual(y, &atoms, &coef, &mut residual);
        residual_norm = dot(&residual, &residual).sqrt();
        stale = true;
        corr
    } else {
        None
    };
    let fixed = atoms.len();

    let stop = loop {
        if tol.is_some_and(|t| residual_norm <= t) {
            break OmpStop::Tolerance;
        }
        if residual_norm <= exact_fit {
            break OmpStop::ExactFit;
        }
        if support.len() == s {
            break OmpStop::Sparsity;
        }
        if stale && !lean {
            // Refreshed only when another atom is wanted: the last refit needs none.
            if grams.len() == support.len() {
                correlations = updated_correlations(&initial, &grams, &coef[fixed..]);
                if let Some(oc) = &ones_corr {
                    subtract_scaled_f64(oc, coef[0], &mut correlations);
                }
            } else {
                a.rmatvec_into(&residual, &mut correlations)?;
            }
        }
        crate::interrupt::check()?;
        let best = if lean {
            // The ranking the full path would use: Aᵀy (less coef₀·Aᵀ1 with an intercept)
            // for the first atom, a fresh Aᵀr afterwards.
            let top = if support.is_empty() {
                a.top_ranked(y, intercept.then(|| coef[0]), &support, RESCORED)?
            } else {
                a.top_ranked(&residual, None, &support, RESCORED)?
            };
            rescore(a, &top, &residual)
        } else if approximate {
            best_rescored(a, &correlations, &chosen, &residual)
        } else {
            most_correlated(&correlations, &chosen)
        };
        let Some(j) = best else {
            break OmpStop::Orthogonal;
        };
        let mut column = vec![0.0; m];
        a.column(j, &mut column);
        let gram = if use_grams { a.gram_column(j) } else { None };
        let cross: Vec<f64> = match &gram {
            Some(g) => ones_corr
                .iter()
                .map(|oc| oc[j])
                .chain(support.iter().map(|&l| g[l] as f64))
                .collect(),
            None => atoms.iter().map(|atom| dot(atom, &column)).collect(),
        };
        let norm2 = gram
            .as_ref()
            .map_or_else(|| dot(&column, &column), |g| g[j] as f64);
        if !chol.push(&cross, norm2) {
            break OmpStop::Dependent;
        }
        let right_hand_side = if approximate {
            dot(&column, y)
        } else {
            initial[j]
        };
        if !lean {
            chosen[j] = true;
        }
        support.push(j);
        atoms.push(column);
        rhs.push(right_hand_side);
        if let Some(g) = gram {
            grams.push(g);
        }
        coef = chol.solve(&rhs);
        refit_residual(y, &atoms, &coef, &mut residual);
        residual_norm = dot(&residual, &residual).sqrt();
        stale = true;
    };

    Ok(SparseOmpResult {
        coef: coef[fixed..].to_vec(),
        intercept: if intercept { coef[0] } else { 0.0 },
        support,
        residual_norm,
        stop,
    })
}

/// `residual = y − Σ coef_l·atom_l`.
fn refit_residual(y: &[f64], atoms: &[Vec<f64>], coef: &[f64], residual: &mut [f64]) {
    residual.copy_from_slice(y);
    for (atom, &c) in atoms.iter().zip(coef) {
        residual
            .iter_mut()
            .zip(atom)
            .for_each(|(r, &v)| *r -= c * v);
    }
}

/// `Aᵀy − Σ_l coef_l·(Aᵀa_l)`, blockwise over the k entries (in parallel when large).
fn updated_correlations(initial: &[f64], grams: &[Vec<i32>], coef: &[f64]) -> Vec<f64> {
    let mut out = initial.to_vec();
    let work = out.len() * grams.len();
    for_each_chunk_mut(&mut out, 4096, work, |b, block| {
        let first = b * 4096;
        for (g, &c) in grams.iter().zip(coef) {
            subtract_scaled(&g[first..first + block.len()], c, block);
        }
    });
    out
}

multiversion! {
    fn subtract_scaled_f64(g: &[f64], c: f64, out: &mut [f64]) {
        for (o, &v) in out.iter_mut().zip(g) {
            *o -= c * v;
        }
    }
}

multiversion! {
    fn subtract_scaled(g: &[i32], c: f64, out: &mut [f64]) {
        for (o, &v) in out.iter_mut().zip(g) {
            *o -= c * v as f64;
        }
    }
}

/// Index of the largest |correlation| among columns not yet chosen; ties to the lowest index.
fn most_correlated(correlations: &[f64], chosen: &[bool]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (j, (&c, &taken)) in correlations.iter().zip(chosen).enumerate() {
        let c = c.abs();
        if !taken && best.is_none_or(|(_, b)| c > b) {
            best = Some((j, c));
        }
    }
    best.filter(|&(_, c)| c > 0.0).map(|(j, _)| j)
}

/// The column among the [`RESCORED`] unchosen ones of largest ranking `|correlation|`
/// whose exact `|a_jᵀ r|` is largest (ties to the lowest index); `None` when that is 0.
fn best_rescored<D: Dictionary + ?Sized>(
    a: &D,
    correlations: &[f64],
    chosen: &[bool],
    residual: &[f64],
) -> Option<usize> {
    let top = top_unchosen(correlations, |j| chosen[j], RESCORED);
    rescore(a, &top, residual)
}

/// The best `count` entries of largest `|value|` among those `taken` refuses, ties to the
/// lowest index, as `(|value|, index)` in descending order (of `|value|`, then ascending
/// index): a short sorted list. `first` is the index of `values[0]`.
pub(crate) fn top_list(
    values: impl IntoIterator<Item = f64>,
    first: usize,
    taken: impl Fn(usize) -> bool,
    count: usize,
) -> Vec<(f64, usize)> {
    let mut top: Vec<(f64, usize)> = Vec::with_capacity(count + 1);
    if count == 0 {
        return top;
    }
    for (i, v) in values.into_iter().enumerate() {
        let c = v.abs();
        if top.len() == count && c <= top[count - 1].0 {
            continue;
        }
        let j = first + i;
        if taken(j) {
            continue;
        }
        let at = top.partition_point(|&(v, _)| v >= c);
        top.insert(at, (c, j));
        top.truncate(count);
    }
    top
}

/// Merge lists of [`top_list`] (of disjoint index ranges) into the best `count` overall.
pub(crate) fn merge_top_lists(lists: Vec<Vec<(f64, usize)>>, count: usize) -> Vec<(f64, usize)> {
    let mut all: Vec<(f64, usize)> = lists.into_iter().flatten().collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    all.truncate(count);
    all
}

/// The indices of the `count` entries of largest `|value|` not `taken` (ties to the lowest
/// index), best first.
fn top_unchosen(values: &[f64], taken: impl Fn(usize) -> bool, count: usize) -> Vec<usize> {
    top_list(values.iter().copied(), 0, taken, count)
        .into_iter()
        .map(|(_, j)| j)
        .collect()
}

/// The column of `top` whose exact `|a_jᵀ r|` is largest (ties to the lowest index); `None`
/// when that is 0.
fn rescore<D: Dictionary + ?Sized>(a: &D, top: &[usize], residual: &[f64]) -> Option<usize> {
    let mut column = vec![0.0; residual.len()];
    let mut best: Option<(f64, usize)> = None;
    for &j in top {
        a.column(j, &mut column);
        let exact = dot(&column, residual).abs();
        if best.is_none_or(|(v, b)| exact > v || (exact == v && j < b)) {
            best = Some((exact, j));
        }
    }
    best.filter(|&(v, _)| v > 0.0).map(|(_, j)| j)
}

/// Lower-triangular Cholesky factor of `A_SᵀA_S`, grown one atom at a time.
struct Cholesky {
    rows: Vec<Vec<f64>>,
}

impl Cholesky {
    fn with_capacity(s: usize) -> Self {
        Self {
            rows: Vec::with_capacity(s),
        }
    }

    /// Add an atom with inner products `cross = A_Sᵀa` and `norm2 = aᵀa`; false (and no
    /// change) when the atom is numerically in the span of the support.
    fn push(&mut self, cross: &[f64], norm2: f64) -> bool {
        let w = self.forward(cross);
        let d2 = norm2 - w.iter().map(|v| v * v).sum::<f64>();
        if !(d2 > 1e-10 * norm2) {
            return false;
        }
        let mut row = w;
        row.push(d2.sqrt());
        self.rows.push(row);
        true
    }

    /// Solve `L z = b`.
    fn forward(&self, b: &[f64]) -> Vec<f64> {
        let mut z = Vec::with_capacity(b.len() + 1);
        for (i, row) in self.rows.iter().enumerate() {
            let partial: f64 = row[..i].iter().zip(&z).map(|(l, v)| l * v).sum();
            z.push((b[i] - partial) / row[i]);
        }
        z
    }

    /// Solve `L Lᵀ x = b`.
    fn solve(&self, b: &[f64]) -> Vec<f64> {
        let mut x = self.forward(b);
        for i in (0..x.len()).rev() {
            let partial: f64 = (i + 1..x.len()).map(|t| self.rows[t][i] * x[t]).sum();
            x[i] = (x[i] - partial) / self.rows[i][i];
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{key_from_u64, stream, uniform_below};
    use crate::signs::SignKind;
    use rand_core::Rng;

    fn sparse_vector(seed: u64, k: usize, s: usize) -> Vec<f64> {
        let mut rng = stream(&key_from_u64(seed), 0);
        let mut x = vec![0.0; k];
        let mut placed = 0;
        while placed < s {
            let j = uniform_below(&mut rng, k as u64) as usize;
            if x[j] == 0.0 {
                let magnitude = 0.5 + (rng.next_u32() as f64) / 4294967296.0;
                x[j] = if rng.next_u32() & 1 == 1 {
                    magnitude
                } else {
                    -magnitude
                };
                placed += 1;
            }
        }
        x
    }

    #[test]
    fn recovers_sparse_vectors_exactly_on_both_paths() {
        let (m, k, s) = (200, 2000, 10);
        for seed in 0..20 {
            let a = SignMatrix::new(key_from_u64(seed), m, k, SignKind::Rademacher).unwrap();
            let dense = a.to_dense().unwrap();
            let d = DenseMatrix::new(&dense, m, k, true).unwrap();
            let x = sparse_vector(1000 + seed, k, s);
            let y = a.matvec(&x).unwrap();
            let packed = omp(&a, &y, s, None).unwrap();
            let float = omp(&d, &y, s, None).unwrap();
            for result in [&packed, &float] {
                let err: f64 = result
                    .coef
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                assert!(err < 1e-10, "seed {seed}: max error {err}");
            }
            let mut sorted = packed.support.clone();
            sorted.sort();
            let mut want: Vec<usize> = (0..k).filter(|&j| x[j] != 0.0).collect();
            want.sort();
            assert_eq!(sorted, want);
            assert_eq!(packed.support, float.support);
        }
    }

    #[test]
    fn stops_at_the_tolerance_and_on_an_exact_fit() {
        let (m, k) = (64, 300);
        let a = SignMatrix::new(key_from_u64(5), m, k, SignKind::Rademacher).unwrap();
        let x = sparse_vector(6, k, 3);
        let y = a.matvec(&x).unwrap();
        let run = omp(&a, &y, 20, None).unwrap();
        assert_eq!(run.stop, OmpStop::ExactFit);
        assert_eq!(run.support.len(), 3);
        let loose = omp(&a, &y, 20, Some(1e6)).unwrap();
        assert_eq!(loose.stop, OmpStop::Tolerance);
        assert!(loose.support.is_empty());
    }

    #[test]
    fn recovers_a_sparse_vector_plus_a_constant_with_an_intercept() {
        // Bernoulli(0.3) columns are far from orthogonal to 1: without the intercept atom the
        // constant leaks into the chosen columns; with it, recovery is exact.
        let (m, k, s) = (150, 1000, 8);
        for seed in 0..10 {
            let a = SignMatrix::new(key_from_u64(seed), m, k, SignKind::Bernoulli(0.3)).unwrap();
            let dense = a.to_dense().unwrap();
            let d = DenseMatrix::new(&dense, m, k, true).unwrap();
            let x = sparse_vector(500 + seed, k, s);
            let beta = 0.75 - seed as f64 * 0.1;
            let y: Vec<f64> = a.matvec(&x).unwrap().iter().map(|v| v + beta).collect();
            for run in [
                omp_with_intercept(&a, &y, s, None, true).unwrap(),
                omp_with_intercept(&d, &y, s, None, true).unwrap(),
            ] {
                let err = run
                    .coef
                    .iter()
                    .zip(&x)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0.0, f64::max);
                assert!(err < 1e-10, "seed {seed}: {err}");
                assert!((run.intercept - beta).abs() < 1e-10);
                assert_eq!(run.support.len(), s);
            }
            let plain = omp(&a, &y, s, None).unwrap();
            let err = plain
                .coef
                .iter()
                .zip(&x)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f64::max);
            assert!(
                err > 1e-3,
                "the constant should bias plain OMP (seed {seed})"
            );
        }
    }

    #[test]
    fn an_orthogonal_residual_is_reported_as_such() {
        let a = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        let d = DenseMatrix::new(&a, 3, 3, true).unwrap();
        let run = omp(&d, &[0.0, 0.0, 5.0], 2, None).unwrap();
        assert_eq!(run.stop, OmpStop::Orthogonal);
        assert!(run.support.is_empty());
        assert_eq!(run.residual_norm, 5.0);
    }

    #[test]
    fn column_major_and_row_major_agree() {
        let (m, k) = (30, 50);
        let a = SignMatrix::new(key_from_u64(8), m, k, SignKind::Bernoulli(0.3)).unwrap();
        let row_major = a.to_dense().unwrap();
        let mut col_major = vec![0.0; m * k];
        for i in 0..m {
            for j in 0..k {
                col_major[j * m + i] = row_major[i * k + j];
            }
        }
        let y: Vec<f64> = (0..m).map(|i| (i as f64).sin()).collect();
        let r = omp(
            &DenseMatrix::new(&row_major, m, k, true).unwrap(),
            &y,
            5,
            None,
        )
        .unwrap();
        let c = omp(
            &DenseMatrix::new(&col_major, m, k, false).unwrap(),
            &y,
            5,
            None,
        )
        .unwrap();
        assert_eq!(r.support, c.support);
        for (a, b) in r.coef.iter().zip(&c.coef) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn rejects_bad_arguments() {
        let a = SignMatrix::new(key_from_u64(1), 10, 20, SignKind::Rademacher).unwrap();
        assert!(omp(&a, &[0.0; 9], 2, None).is_err());
        assert!(omp(&a, &[0.0; 10], 0, None).is_err());
        assert!(omp(&a, &[0.0; 10], 11, None).is_err());
        assert!(omp(&a, &[0.0; 10], 2, Some(-1.0)).is_err());
        let mut y = [0.0; 10];
        y[3] = f64::NAN;
        assert!(omp(&a, &y, 2, None).is_err());
    }
}
