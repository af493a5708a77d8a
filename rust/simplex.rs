//! Euclidean projection onto the probability simplex `Δ = {p ≥ 0, Σp = 1}` and onto its
//! s-sparse subset.
//!
//! The projection is `p_i = max(v_i − θ, 0)` with the unique `θ` solving
//! `Σ_i max(v_i − θ, 0) = 1` (Held, Wolfe & Crowder 1974; Duchi et al. 2008, Fig. 1). The
//! sort-based rule finds θ from the sorted values: `θ = (Σ_{i≤ρ} u_(i) − 1)/ρ` for the largest
//! `ρ` with `u_(ρ) > (Σ_{i≤ρ} u_(i) − 1)/ρ`. Sorting all k values is the slow part, so first:
//!
//! 1. discard values that cannot be in the support: `θ ≥ max(v) − 1` and
//!    `θ ≥ (Σv − 1)/k` (both lower bounds follow from `Σ max(v_i − θ, 0) = 1`);
//! 2. run a few Michelot (1986) passes on the survivors — `θ ← (Σ_S v − 1)/|S|`,
//!    `S ← {i ∈ S : v_i > θ}` — whose θ increases monotonically to the exact threshold, and
//!    which ends, exactly, when S stops shrinking;
//! 3. if S is still shrinking after a few passes, sort S and apply the sort-based rule.
//!
//! Every step is exact in the sense of the sort-based rule; the result is the same projection
//! (tests compare against a plain sort-based reference). Values are shifted by `max(v)` first
//! so sums over the support lie in `[−|S|, 0]` and cannot overflow, whatever the magnitudes.

use crate::error::{Error, Result};
use crate::finite::check_finite;
use crate::simd::multiversion;
use rayon::prelude::*;

const MICHELOT_PASSES: usize = 8;
const STREAMING_PASSES: usize = 4;
const PARALLEL_MIN: usize = 1 << 16;
/// Entries per parallel filtering task (128 KiB of f64: stays in L2 across the passes).
const FILTER_CHUNK: usize = 1 << 14;

/// The threshold θ of the projection of `v` (finite, non-empty) onto the simplex.
pub fn simplex_threshold(v: &[f64]) -> f64 {
    let (max, theta) =
        crate::interrupt::uninterrupted(shifted_threshold(v, &crate::interrupt::never));
    max + theta
}

/// `(max(v), θ − max(v))`: the threshold relative to the maximum, which keeps full precision
/// when |v| is huge (θ itself would round to max(v)).
///
/// Large inputs are cut into cache-sized chunks that are filtered in parallel: the threshold
/// of a chunk projected on its own is a lower bound of θ (it is `(Σ_T v − 1)/|T|` for some set
/// T), so entries at or below it cannot be in the support. The survivors — a superset of the
/// support, with the global maximum among them — have exactly the threshold of `v`.
/// `check` runs before each chunk; its error stops the computation.
fn shifted_threshold<C: crate::interrupt::Check>(v: &[f64], check: &C) -> Result<(f64, f64)> {
    if v.len() < PARALLEL_MIN {
        return Ok(threshold_of_candidates(v));
    }
    let survivors: Vec<f64> = v
        .par_chunks(FILTER_CHUNK)
        .map(|chunk| {
            check()?;
            let (max, theta) = threshold_of_candidates(chunk);
            Ok(chunk
                .iter()
                .copied()
                .filter(|&x| x - max > theta)
                .collect::<Vec<f64>>())
        })
        .try_reduce(Vec::new, |mut a, b| {
            a.extend_from_slice(&b);
            Ok(a)
        })?;
    check()?;
    Ok(threshold_of_candidates(&survivors))
}

/// Single-threaded threshold: streaming Michelot passes (branch-free sums over the entries
/// above the current bound, no copies), then the survivors are copied out and refined by
/// Michelot passes and, if those stall, the sort-based rule.
fn threshold_of_candidates(v: &[f64]) -> (f64, f64) {
    let max = maximum(v);
    // θ − max > −1 always (the largest entry alone gives this bound).
    let mut bound = -1.0f64;
    for _ in 0..STREAMING_PASSES {
        let (sum, count) = sum_above(v, max, bound);
        let next = (sum - 1.0) / count as f64;
        if !(next > bound) {
            break;
        }
        bound = next;
    }
    let mut support = Vec::with_capacity(v.len().min(1024));
    support.extend(v.iter().map(|&x| x - max).filter(|&u| u > bound));
    // The maximum (u = 0) always survives (bound < 0), so the support is never empty.
    for _ in 0..MICHELOT_PASSES {
        let theta = (support.iter().sum::<f64>() - 1.0) / support.len() as f64;
        let before = support.len();
        support.retain(|&u| u > theta);
        if support.len() == before {
            return (max, theta);
        }
    }
    (max, sorted_threshold(&mut support))
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

/// The sort-based rule on (shifted) candidate values; sorts `u` in place.
fn sorted_threshold(u: &mut [f64]) -> f64 {
    u.sort_unstable_by(|a, b| b.total_cmp(a));
    let mut cumulative = 0.0;
    let mut theta = u[0] - 1.0;
    for (i, &x) in u.iter().enumerate() {
        cumulative += x;
        let candidate = (cumulative - 1.0) / (i + 1) as f64;
        if x > candidate {
            theta = candidate;
        } else {
            break;
        }
    }
    theta
}

/// Euclidean projection of `v` onto the probability simplex.
pub fn project_simplex(v: &[f64]) -> Result<Vec<f64>> {
    let mut out = crate::memory::zeroed_vec::<f64>(v.len(), "the projection")?;
    project_simplex_into(v, &mut out)?;
    Ok(out)
}

/// [`project_simplex`] into a caller-provided buffer of the same length (so the bindings
/// can write straight into a numpy array).
pub fn project_simplex_into(v: &[f64], out: &mut [f64]) -> Result<()> {
    assert_eq!(v.len(), out.len(), "output length must match the input");
    check_finite(v, "the vector to project")?;
    let (max, theta) = shifted_threshold(v, &crate::interrupt::check)?;
    let clip = |(o, &x): (&mut f64, &f64)| *o = ((x - max) - theta).max(0.0);
    if v.len() >= PARALLEL_MIN {
        out.par_iter_mut()
            .zip(v)
            .with_min_len(FILTER_CHUNK)
            .for_each(clip);
    } else {
        out.iter_mut().zip(v).for_each(clip);
    }
    Ok(())
}

/// Indices of the `s` largest values of `v` (signed), ties broken towards the lower index,
/// in increasing index order.
pub fn top_indices(v: &[f64], s: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    let larger_first = |&a: &usize, &b: &usize| v[b].total_cmp(&v[a]).then(a.cmp(&b));
    if s < order.len() {
        order.select_nth_unstable_by(s, larger_first);
        order.truncate(s);
    }
    order.sort_unstable();
    order
}

/// Exact Euclidean projection onto the s-sparse simplex `{p ∈ Δ : |supp p| ≤ s}`.
///
/// Kyrillidis et al. (2013), "Sparse projections onto the simplex", Thm. 1: the optimal support
/// is the `s` largest entries of `v`; project those onto the simplex, zero the rest.
pub fn project_sparse_simplex(v: &[f64], s: usize) -> Result<Vec<f64>> {
    check_finite(v, "the vector to project")?;
    if s == 0 || s > v.len() {
        return Err(Error::Value(format!(
            "sparsity s must lie in [1, {}] (the vector's length), got {s}",
            v.len()
        )));
    }
    let support = top_indices(v, s);
    let values: Vec<f64> = support.iter().map(|&i| v[i]).collect();
    let projected = project_simplex(&values)?;
    let mut out = vec![0.0; v.len()];
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
        max + sorted_threshold(&mut u)
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
            let (a, b) = (simplex_threshold(&v), reference_threshold(&v));
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
        assert!((simplex_threshold(&v) - reference_threshold(&v)).abs() < 1e-14);
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
        assert_eq!(top_indices(&[1.0, 3.0, 3.0, 3.0, 0.0], 2), vec![1, 2]);
        assert_eq!(top_indices(&[-1.0, -2.0], 2), vec![0, 1]);
        assert!(project_sparse_simplex(&[1.0], 0).is_err());
        assert!(project_sparse_simplex(&[1.0], 2).is_err());
    }
}
