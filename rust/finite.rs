//! Finiteness checks for float inputs: one branch-free, vectorized, parallel pass, and a
//! precise error (the first offending position) only when it fails.

use crate::error::{Error, Result};
use crate::simd::multiversion;
use rayon::prelude::*;

const PARALLEL_MIN: usize = 1 << 16;
const CHUNK: usize = 1 << 14;

/// `Err` naming the first non-finite entry of `v`, or the emptiness of `v`.
pub fn check_finite(v: &[f64], what: &str) -> Result<()> {
    if v.is_empty() {
        return Err(Error::Value(format!("{what} is empty")));
    }
    let finite = if v.len() >= PARALLEL_MIN {
        v.par_chunks(CHUNK).all(all_finite)
    } else {
        all_finite(v)
    };
    if finite {
        return Ok(());
    }
    let i = v
        .iter()
        .position(|x| !x.is_finite())
        .expect("a non-finite entry exists");
    Err(Error::Value(format!(
        "{what} must be finite: element {i} is {}",
        v[i]
    )))
}

multiversion! {
    /// True when no entry is NaN or ±∞: `x·0` is 0 for finite x and NaN otherwise, and a
    /// NaN poisons the lane sums, so the test is one branch-free pass.
    fn all_finite(v: &[f64]) -> bool {
        let mut lanes = [0.0f64; 8];
        let chunks = v.chunks_exact(8);
        let tail = chunks.remainder();
        for chunk in chunks {
            for t in 0..8 {
                lanes[t] += chunk[t] * 0.0;
            }
        }
        tail.iter().all(|x| x.is_finite()) && lanes.iter().all(|&l| l == 0.0)
    }
}

/// Copy `src` into `dst` (same length) and check finiteness in the same pass, in parallel:
/// the input is read once, and the pages of a fresh output are touched by every core.
pub fn copy_finite(src: &[f64], dst: &mut [f64], what: &str) -> Result<()> {
    assert_eq!(src.len(), dst.len(), "copy_finite needs equal lengths");
    let finite = dst
        .par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .map(|(d, s)| {
            d.copy_from_slice(s);
            all_finite(s)
        })
        .reduce(|| true, |a, b| a && b);
    if finite {
        Ok(())
    } else {
        check_finite(src, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_bad_position() {
        let mut v = vec![1.0; 200_000];
        assert!(check_finite(&v, "v").is_ok());
        v[150_000] = f64::NEG_INFINITY;
        v[170_000] = f64::NAN;
        let err = check_finite(&v, "v").unwrap_err();
        assert_eq!(
            err,
            Error::Value("v must be finite: element 150000 is -inf".into())
        );
        assert!(check_finite(&[], "v").is_err());
        assert!(check_finite(&[1.0, 2.0, f64::NAN], "v").is_err());
        let mut out = vec![0.0; v.len()];
        assert_eq!(copy_finite(&v, &mut out, "v").unwrap_err(), err);
        v[150_000] = 2.0;
        v[170_000] = 3.0;
        copy_finite(&v, &mut out, "v").unwrap();
        assert_eq!(out, v);
    }
}
