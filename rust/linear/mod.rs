//! Linear queries under local differential privacy (Bassily, "Linear Queries Estimation with
//! Local Differential Privacy", AISTATS 2019, Sections 3 and 5; the docs page Mechanisms ›
//! Linear queries lists the errata this module corrects).
//!
//! Setting: a domain \[J\], a query matrix A ∈ R^{d×J} whose column `a_v` is the answer vector
//! of a user holding `v`; the target is A·p. Everything here takes the matrix as its
//! **columns**: a row-major J × d slice (`columns[v * d + k] = A[k, v]`), so that the column a
//! user needs is contiguous.
//!
//! * [`sensitivity`]: the exact L2 sensitivity Δ2 = max ‖a_v − a_v'‖ (the diameter of the
//!   columns), which the Gaussian protocol is calibrated to (the paper uses r, wrongly).
//! * [`gaussian`]: Algorithm 1 (a_v + N(0, σ² I_d)) and the server's mean (Algorithm 2, step 4).
//! * [`rejection`]: Algorithm 3 with the clipped acceptance probability that makes it pure
//!   ε-LDP, and Algorithm 4's mean of the accepted reports.
//! * [`adaptive`]: adaptive sample splitting (Algorithm 6, Theorem 5.2), pure ε-LDP with one
//!   bit per user, for queries chosen one at a time from the answers so far.
//!
//! σ and every other calibration are computed by the Python layer (`ldpdist.linear`); the
//! kernels here take them as given and only re-check that they are finite and ≥ 0.

pub mod adaptive;
pub mod gaussian;
pub mod rejection;
pub mod sensitivity;

use crate::error::{Error, Result};
use crate::rng::{self, Key, StreamRng};
use rayon::prelude::*;

/// Check the shape of a J × d column slice: `d ≥ 1`, `J ≥ 1`, the length `J·d`, finite entries.
pub(crate) fn check_columns(columns: &[f64], j: usize, d: usize) -> Result<()> {
    if d == 0 || j == 0 {
        return Err(Error::Value(format!(
            "the query matrix must have d ≥ 1 rows and J ≥ 1 columns, got d = {d}, J = {j}"
        )));
    }
    if j.checked_mul(d) != Some(columns.len()) {
        return Err(Error::Value(format!(
            "the columns hold {} numbers, not J·d = {j}·{d}",
            columns.len()
        )));
    }
    crate::finite::check_finite(columns, "the query matrix")
}

/// Check that every value indexes a column (`v < J`), naming the first one that does not.
pub(crate) fn check_values(values: &[u32], j: usize) -> Result<()> {
    if let Some(i) = values.iter().position(|&v| v as usize >= j) {
        return Err(Error::Value(format!(
            "values must lie in [0, {j}): values[{i}] = {}",
            values[i]
        )));
    }
    Ok(())
}

/// Check a noise scale: finite and ≥ 0.
pub(crate) fn check_sigma(sigma: f64) -> Result<()> {
    if !(sigma.is_finite() && sigma >= 0.0) {
        return Err(Error::Value(format!(
            "sigma must be finite and ≥ 0, got {sigma}"
        )));
    }
    Ok(())
}

/// The sampling loop shared by the report protocols: `values.len()` users, each writing its
/// row of `out` (row-major n × d) from its column `a_v`. Users are cut into chunks of
/// [`gaussian::REPORT_CHUNK`]; chunk `c` draws from `rng::stream(key, c)` user by user, so a
/// seeded result is bit-identical on any number of threads. Checks the output's size first.
pub(crate) fn fill_reports(
    columns: &[f64],
    d: usize,
    key: &Key,
    values: &[u32],
    out: &mut [f64],
    report: impl Fn(&mut StreamRng, usize, &[f64], &mut [f64]) + Sync,
) -> Result<()> {
    if values.len().checked_mul(d) != Some(out.len()) {
        return Err(Error::Value(format!(
            "the output holds {} numbers, not n·d = {}·{d}",
            out.len(),
            values.len()
        )));
    }
    let chunk = gaussian::REPORT_CHUNK;
    out.par_chunks_mut(chunk * d)
        .zip(values.par_chunks(chunk))
        .enumerate()
        .try_for_each(|(c, (rows, vs))| {
            crate::interrupt::check()?;
            let mut rng = rng::stream(key, c as u64);
            for (row, &v) in rows.chunks_exact_mut(d).zip(vs) {
                let v = v as usize;
                report(&mut rng, v, &columns[v * d..(v + 1) * d], row);
            }
            Ok(())
        })
}
