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
    }
}
