//! Mechanisms whose report is one integer in `[0, output_size)` ([`IndexMechanism`]): the
//! report integer types ([`ReportInt`]), the generic parallel [`privatize`] (user `u` draws
//! from the stream of chunk `u / SAMPLE_CHUNK`), and the histogram [`aggregate`] with its
//! [`Tally`] (validation, all or nothing, in O(output_size) memory).

use super::check_values;
use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{par_fill_chunks, Key, StreamRng};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Unsigned integer types reports are stored in (the smallest that holds `output_size − 1`).
pub trait ReportInt: crate::memory::Zeroable + Send + Sync + Default + 'static {
    fn from_u64(v: u64) -> Self;
    fn to_u64(self) -> u64;
}

macro_rules! report_int {
    ($($t:ty),*) => {$(
        impl ReportInt for $t {
            #[inline(always)]
            fn from_u64(v: u64) -> Self { v as $t }
            #[inline(always)]
            fn to_u64(self) -> u64 { self as u64 }
        }
    )*};
}
report_int!(u8, u16, u32, u64);

/// A mechanism whose report is one integer in `[0, output_size)`.
pub trait IndexMechanism: Sync {
    /// k: values are integers in `[0, k)`.
    fn domain(&self) -> u64;
    /// Number of distinct reports.
    fn output_size(&self) -> u64;
    /// One report for value `x < k`, drawing randomness from `rng` only.
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64;
    /// Called before a batch of `batch` reports (e.g. to build a cache worth its cost only
    /// for large batches; it allocates through the memory guard). Must not change the reports.
    fn prepare(&self, _batch: usize) -> Result<()> {
        Ok(())
    }
    /// The reports of consecutive `values` (`out.len() == values.len()`) from one stream:
    /// `sample` for each in order, unless a mechanism can overlap work across them (it must
    /// draw the same words in the same order).
    fn sample_into<R: ReportInt>(&self, rng: &mut StreamRng, values: &[u32], out: &mut [R])
    where
        Self: Sized,
    {
        for (o, &x) in out.iter_mut().zip(values) {
            *o = R::from_u64(self.sample(rng, x as u64));
        }
    }
    /// What the server-side operations need built first (`Estimator::prepare_server`): by
    /// default what the largest batch would.
    fn prepare_server(&self) -> Result<()> {
        self.prepare(usize::MAX)
    }
}

/// Privatize every value into `out` (same length), in parallel and reproducibly.
pub fn privatize<M: IndexMechanism, R: ReportInt>(
    mechanism: &M,
    key: &Key,
    values: &[u32],
    out: &mut [R],
) -> Result<()> {
    assert_eq!(values.len(), out.len(), "one report per value");
    check_values(values, mechanism.domain())?;
    mechanism.prepare(values.len())?;
    par_fill_chunks(key, out, |rng, first, chunk| {
        mechanism.sample_into(rng, &values[first..first + chunk.len()], chunk)
    })
}

/// What [`aggregate`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// Reports counted.
    pub valid: u64,
    /// Reports outside `[0, output_size)` (dropped).
    pub invalid: u64,
    /// Position of the first invalid report.
    pub first_invalid: Option<usize>,
}

/// Output sizes up to this many counts (1 MiB of u64) are histogrammed in private tables, at
/// most one per worker thread: cache-sized, so the increments stay in cache and need no
/// atomics. Larger outputs are counted in place ([`aggregate`]).
pub const PRIVATE_HISTOGRAM_MAX: usize = 1 << 17;

/// Reports per chunk of aggregation (the unit of interruption and of roll-back).
pub const AGGREGATE_CHUNK: usize = 1 << 16;

/// How [`aggregate`] counts `reports` reports into `size` counts: private tables (how many),
/// or in place.
fn private_tables(size: usize, reports: usize) -> Option<usize> {
    (size <= PRIVATE_HISTOGRAM_MAX).then(|| {
        rayon::current_num_threads()
            .min(reports.div_ceil(AGGREGATE_CHUNK))
            .max(1)
    })
}

/// The buffers [`aggregate`] allocates to count `reports` reports into `size` counts (checked
/// by [`aggregate`] itself before it allocates): for small outputs one private table of
/// `size` counts per part (at most one per worker thread, so at most threads × 1 MiB); for
/// large outputs one roll-back flag per chunk of [`AGGREGATE_CHUNK`] reports. Never
/// O(threads × size) for a large output.
pub fn aggregation_footprint(size: u64, reports: u64) -> Footprint {
    let f = Footprint::new(format!("aggregating {reports} reports into {size} counts"));
    match private_tables(size.min(usize::MAX as u64) as usize, reports as usize) {
        Some(parts) => f.add("per-thread tables", (parts as u64).saturating_mul(size), 8),
        None => f.add(
            "roll-back flags",
            reports.div_ceil(AGGREGATE_CHUNK as u64),
            1,
        ),
    }
}

/// Add the histogram of `reports` to `counts` (length `output_size`); see
/// [`aggregate_with_total`], which this is with the total of `counts` computed here.
pub fn aggregate<R: ReportInt>(
    reports: &[R],
    counts: &mut [u64],
    drop_invalid: bool,
) -> Result<Tally> {
    aggregate_with_total(reports, counts, drop_invalid, None)
}

/// Add the histogram of `reports` to `counts` (length `output_size`). Reports out of range
/// are counted in the tally; with `drop_invalid == false` any of them is an error.
///
/// All or nothing: on an error (invalid reports without `drop_invalid`, an interruption, a
/// count that would pass 2^64 − 1, memory) `counts` is left as it was.
///
/// Memory is O(size) at most ([`aggregation_footprint`]): outputs of at most
/// [`PRIVATE_HISTOGRAM_MAX`] counts are histogrammed in cache-sized private tables (one per
/// part of the reports, at most one per worker thread), summed and added with checked
/// additions. Larger outputs are counted in place with atomic increments (exact integer
/// additions, so the result does not depend on their order or on the thread count); each
/// chunk of [`AGGREGATE_CHUNK`] reports is flagged once applied, so that an interruption or
/// invalid reports roll back exactly the applied chunks. In place, no count can wrap: with
/// `T = Σ counts` (`total`, when the caller knows it — an aggregator's n; otherwise summed
/// here with overflow detection) every count is at most T, so `T + reports.len() ≤ 2^64 − 1`
/// (checked first) bounds every count after the batch. `total` must be `Σ counts` exactly.
pub fn aggregate_with_total<R: ReportInt>(
    reports: &[R],
    counts: &mut [u64],
    drop_invalid: bool,
    total: Option<u64>,
) -> Result<Tally> {
    let size = counts.len();
    let footprint = aggregation_footprint(size as u64, reports.len() as u64);
    footprint.check()?;
    let outcome = match private_tables(size, reports.len()) {
        Some(parts) => aggregate_private(reports, counts, parts, drop_invalid),
        None => aggregate_in_place(reports, counts, total, crate::interrupt::check),
    };
    let (invalid, rollback) = outcome?;
    let first_invalid = (invalid > 0)
        .then(|| {
            reports
                .par_iter()
                .position_first(|r| r.to_u64() >= size as u64)
        })
        .flatten();
    if invalid > 0 && !drop_invalid {
        if let Some(undo) = rollback {
            undo(counts);
        }
        let i = first_invalid.unwrap_or(0);
        return Err(Error::Value(format!(
            "{invalid} of {} reports lie outside [0, {size}); the first is reports[{i}] = {} \
             (pass on_invalid='drop' to drop and count them)",
            reports.len(),
            reports[i].to_u64()
        )));
    }
    Ok(Tally {
        valid: reports.len() as u64 - invalid,
        invalid,
        first_invalid,
    })
}

/// What an aggregation strategy returns: the number of invalid reports, and (when the
/// counts were already changed) how to undo it.
type Counted<'a> = (u64, Option<Box<dyn FnOnce(&mut [u64]) + 'a>>);

/// Private tables: `parts` tables of `counts.len()`, one per contiguous part of the reports,
/// summed, then added to `counts` only if no sum wraps and no invalid report is refused
/// (nothing to undo).
fn aggregate_private<'a, R: ReportInt>(
    reports: &'a [R],
    counts: &mut [u64],
    parts: usize,
    drop_invalid: bool,
) -> Result<Counted<'a>> {
    let size = counts.len();
    let mut tables = crate::memory::allocate_zeroed::<u64>(parts * size, "per-thread tables")?;
    let part_len = reports
        .len()
        .div_ceil(AGGREGATE_CHUNK)
        .div_ceil(parts)
        .max(1)
        * AGGREGATE_CHUNK;
    let invalid = tables
        .par_chunks_mut(size.max(1))
        .zip(reports.par_chunks(part_len))
        .map(|(table, part)| -> Result<u64> {
            let mut bad = 0u64;
            for chunk in part.chunks(AGGREGATE_CHUNK) {
                crate::interrupt::check()?;
                for &r in chunk {
                    let r = r.to_u64();
                    if r < size as u64 {
                        table[r as usize] += 1;
                    } else {
                        bad += 1;
                    }
                }
            }
            Ok(bad)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))?;
    if invalid > 0 && !drop_invalid {
        return Ok((invalid, None));
    }
    let (sum, rest) = tables.split_at_mut(size);
    for table in rest.chunks_exact(size.max(1)) {
        sum.iter_mut().zip(table).for_each(|(s, t)| *s += t);
    }
    if let Some(y) = (0..size).find(|&y| counts[y].checked_add(sum[y]).is_none()) {
        return Err(count_overflow(y));
    }
    counts.iter_mut().zip(sum.iter()).for_each(|(c, s)| *c += s);
    Ok((invalid, None))
}

/// The error of a count that would pass 2^64 − 1 (also the bit aggregation's).
pub(super) fn count_overflow(y: usize) -> Error {
    Error::Value(format!(
        "count {y} would exceed 2^64 − 1 reports; refused (the counts were left unchanged)"
    ))
}

/// In place: atomic increments into `counts`, chunk by chunk, after proving that no count
/// can wrap ([`aggregate_with_total`]); interrupted (`check` fails before a chunk), the
/// applied chunks are rolled back.
fn aggregate_in_place<'a, R: ReportInt>(
    reports: &'a [R],
    counts: &mut [u64],
    total: Option<u64>,
    check: impl Fn() -> Result<()> + Sync,
) -> Result<Counted<'a>> {
    let size = counts.len() as u64;
    let total = match total {
        Some(t) => t,
        None => sum_counts(counts)?,
    };
    if total.checked_add(reports.len() as u64).is_none() {
        return Err(Error::Value(format!(
            "adding {} reports to counts of {total} reports would pass 2^64 − 1 in all; refused",
            reports.len()
        )));
    }
    let chunks = reports.len().div_ceil(AGGREGATE_CHUNK);
    let mut applied = crate::memory::allocate_zeroed::<bool>(chunks, "roll-back flags")?;
    let cells = as_atomic(counts);
    let outcome = reports
        .par_chunks(AGGREGATE_CHUNK)
        .zip(applied.par_iter_mut())
        .map(|(chunk, flag)| -> Result<u64> {
            check()?;
            let mut bad = 0u64;
            for &r in chunk {
                let r = r.to_u64();
                if r < size {
                    cells[r as usize].fetch_add(1, Ordering::Relaxed);
                } else {
                    bad += 1;
                }
            }
            *flag = true;
            Ok(bad)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b));
    let undo = move |counts: &mut [u64]| {
        let cells = as_atomic(counts);
        reports
            .par_chunks(AGGREGATE_CHUNK)
            .zip(applied.par_iter())
            .filter(|(_, &done)| done)
            .for_each(|(chunk, _)| {
                for &r in chunk {
                    let r = r.to_u64();
                    if r < size {
                        cells[r as usize].fetch_sub(1, Ordering::Relaxed);
                    }
                }
            });
    };
    match outcome {
        Ok(invalid) => Ok((invalid, Some(Box::new(undo)))),
        Err(e) => {
            undo(counts);
            Err(e)
        }
    }
}

/// `Σ counts`, refused when it passes 2^64 − 1 (counts that no aggregation can have made).
fn sum_counts(counts: &[u64]) -> Result<u64> {
    counts
        .par_chunks(1 << 16)
        .map(|chunk| {
            crate::interrupt::check()?;
            chunk
                .iter()
                .try_fold(0u64, |s, &c| s.checked_add(c))
                .ok_or_else(counts_overflowed)
        })
        .try_reduce(|| 0, |a, b| a.checked_add(b).ok_or_else(counts_overflowed))
}

fn counts_overflowed() -> Error {
    Error::Value("the counts sum to 2^64 or more reports: they cannot come from aggregation".into())
}

/// `counts` viewed as atomic cells, for increments from several threads. Sound: `AtomicU64`
/// has the size and bit validity of `u64` and, on the targets where their alignments agree
/// (asserted at compile time), its layout; the exclusive borrow guarantees that no
/// non-atomic access overlaps the returned view.
pub(crate) fn as_atomic(counts: &mut [u64]) -> &[AtomicU64] {
    const _: () = assert!(
        std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>()
            && std::mem::size_of::<AtomicU64>() == std::mem::size_of::<u64>()
    );
    // SAFETY: see above; the lifetime of the view is that of the exclusive borrow.
    unsafe { &*(counts as *mut [u64] as *const [AtomicU64]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::in_pool;

    /// Reports with a few malformed entries, deterministic.
    fn words(n: usize, salt: u32) -> impl Iterator<Item = u32> {
        (0..n as u32).map(move |i| (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(7))
    }

    #[test]
    fn index_aggregation_matches_a_plain_count_in_both_strategies_and_rolls_back() {
        // 1000 outputs: private tables; 2^18 > PRIVATE_HISTOGRAM_MAX: in place (atomics).
        for size in [1000usize, 1 << 18] {
            let mut reports: Vec<u32> = words(300_000, 5).map(|w| w % size as u32).collect();
            let mut want = vec![3u64; size];
            for &r in &reports {
                want[r as usize] += 1;
            }
            for threads in [1, 3] {
                let mut counts = vec![3u64; size];
                in_pool(threads, || aggregate(&reports, &mut counts, false)).unwrap();
                assert_eq!(counts, want, "size {size}, {threads} threads");
            }
            // An invalid report late in the batch: refused, counts untouched.
            reports[250_000] = size as u32;
            let mut counts = vec![3u64; size];
            let e = aggregate(&reports, &mut counts, false).unwrap_err();
            assert!(e.to_string().contains("reports[250000]"), "{e}");
            assert!(
                counts.iter().all(|&c| c == 3),
                "size {size}: not rolled back"
            );
            // Dropped instead: counted without it.
            let t = aggregate(&reports, &mut counts, true).unwrap();
            assert_eq!((t.invalid, t.first_invalid), (1, Some(250_000)));
            // A count that would wrap: refused, untouched.
            let mut full = vec![0u64; size];
            full[reports[0] as usize] = u64::MAX;
            let before = full.clone();
            assert!(aggregate(&reports[..10], &mut full, false).is_err());
            assert_eq!(full, before, "size {size}: overflow not rolled back");
        }
    }
}
