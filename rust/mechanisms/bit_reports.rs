//! Mechanisms whose report is a packed bit vector ([`BitMechanism`]): the row layout
//! (`numpy.packbits` order) and its bit helpers, the generic parallel [`privatize_bits`], and
//! the per-bit counting of [`aggregate_bits`] and [`aggregate_bit_groups`] (vertical
//! bit-plane counters: validation, all or nothing, at memory bandwidth).

use super::check_values;
use super::index_reports::{as_atomic, count_overflow, Tally};
use crate::error::{Error, Result};
use crate::memory::Footprint;
use crate::rng::{stream, Key, StreamRng, SAMPLE_CHUNK};
use crate::simd::multiversion;
use rayon::prelude::*;
use std::sync::atomic::Ordering;

/// A mechanism whose report is a vector of `bits()` bits, stored as a row of `⌈bits/8⌉`
/// bytes in `numpy.packbits` layout: bit j is `(row[j / 8] >> (7 − j % 8)) & 1`, and the
/// padding bits after the last one are 0. The aggregate is the vector of per-bit counts.
pub trait BitMechanism: Sync {
    /// k: values are integers in `[0, k)`.
    fn domain(&self) -> u64;
    /// Bits per report.
    fn bits(&self) -> u64;
    /// Write the report of `x < k` into `row` (`⌈bits/8⌉` bytes, zeroed by the caller),
    /// drawing randomness from `rng` only.
    fn sample_into(&self, rng: &mut StreamRng, x: u64, row: &mut [u8]);
    /// Write the report of the user at position `user` of the batch (0-based) holding
    /// `x`, drawing randomness from `rng` only. By default [`BitMechanism::sample_into`]: the
    /// report does not depend on the position. A mechanism whose public, data-independent
    /// part is assigned by position (two-stage RAPPOR's stage bit) overrides it.
    #[inline]
    fn sample_user(&self, rng: &mut StreamRng, user: usize, x: u64, row: &mut [u8]) {
        let _ = user;
        self.sample_into(rng, x, row)
    }
    /// Whether a row with padding bits already checked to be zero is a possible report
    /// (e.g. exactly d ones for subset selection). Default: every pattern is.
    fn valid_row(&self, _row: &[u8]) -> bool {
        true
    }
}

/// Bytes per packed report row.
pub fn row_bytes(bits: u64) -> usize {
    bits.div_ceil(8) as usize
}

/// Set bit j of a packed row.
#[inline(always)]
pub fn set_bit(row: &mut [u8], j: u64) {
    row[(j / 8) as usize] |= 0x80 >> (j % 8);
}

/// Clear bit j of a packed row.
#[inline(always)]
pub fn clear_bit(row: &mut [u8], j: u64) {
    row[(j / 8) as usize] &= !(0x80u8 >> (j % 8));
}

/// Clear the padding bits after the first `bits` bits of a packed row.
#[inline(always)]
pub fn clear_padding(row: &mut [u8], bits: u64) {
    let used = (bits % 8) as u32;
    if used != 0 {
        if let Some(last) = row.last_mut() {
            *last &= !(0xFFu8 >> used);
        }
    }
}

/// The number of set bits of a packed row.
#[inline]
pub fn ones(row: &[u8]) -> u64 {
    row.iter().map(|b| b.count_ones() as u64).sum()
}

/// Bit j of a packed row.
#[inline(always)]
pub fn get_bit(row: &[u8], j: u64) -> bool {
    row[(j / 8) as usize] & (0x80 >> (j % 8)) != 0
}

/// Privatize every value into `out` (`values.len()` rows of `row_bytes(bits)` bytes), in
/// parallel; user u draws from the stream of chunk `u / SAMPLE_CHUNK`, as for index
/// mechanisms.
pub fn privatize_bits<M: BitMechanism>(
    mechanism: &M,
    key: &Key,
    values: &[u32],
    out: &mut [u8],
) -> Result<()> {
    let width = row_bytes(mechanism.bits());
    assert_eq!(values.len() * width, out.len(), "one row per value");
    check_values(values, mechanism.domain())?;
    if width == 0 {
        return Ok(());
    }
    // Interruption is checked before every 2^20 bytes of rows.
    let rows_per_check = ((1usize << 20) / width).clamp(1, SAMPLE_CHUNK);
    out.par_chunks_mut(SAMPLE_CHUNK * width)
        .enumerate()
        .try_for_each(|(c, rows)| {
            let mut rng = stream(key, c as u64);
            let first = c * SAMPLE_CHUNK;
            for (i, (row, &x)) in rows
                .chunks_exact_mut(width)
                .zip(&values[first..])
                .enumerate()
            {
                if i % rows_per_check == 0 {
                    crate::interrupt::check()?;
                }
                mechanism.sample_user(&mut rng, first + i, x as u64, row);
            }
            Ok(())
        })
}

/// Whether a row's padding bits are zero and the mechanism accepts it.
fn row_is_valid<M: BitMechanism>(mechanism: &M, row: &[u8]) -> bool {
    let pad = (8 * row.len() as u64 - mechanism.bits()) as u32;
    let padding_clear = pad == 0
        || row
            .last()
            .is_none_or(|&b| b & ((1u16 << pad) - 1) as u8 == 0);
    padding_clear && mechanism.valid_row(row)
}

/// Bytes of a row counted by one task's bit-plane counters in [`aggregate_bits`]: 8 u8
/// counters per byte (32 KiB, L1-sized) and their u32 totals (128 KiB).
pub const BIT_TILE_BYTES: usize = 1 << 12;

multiversion! {
    /// `planes[t·span + b] += bit t of row[b]` (t = 0 … 7 from the least significant bit):
    /// vertical counters, one u8 lane per byte of the row, so one row costs 8 shift/mask/add
    /// passes over its bytes whatever bits are set (vectorized: 32 or 64 bytes per
    /// instruction). The caller flushes before a counter can pass 255.
    fn add_bit_planes(row: &[u8], planes: &mut [u8]) {
        let span = row.len();
        for (t, plane) in planes.chunks_exact_mut(span).enumerate() {
            for (p, &byte) in plane.iter_mut().zip(row) {
                *p = p.wrapping_add((byte >> t) & 1);
            }
        }
    }
}

multiversion! {
    /// [`add_bit_planes`] for four rows at once: each counter is loaded and stored once per
    /// four rows (adds up to 4).
    fn add_bit_planes4(r0: &[u8], r1: &[u8], r2: &[u8], r3: &[u8], planes: &mut [u8]) {
        let span = r0.len();
        let (r1, r2, r3) = (&r1[..span], &r2[..span], &r3[..span]);
        for (t, plane) in planes.chunks_exact_mut(span).enumerate() {
            for b in 0..span {
                let sum = ((r0[b] >> t) & 1) + ((r1[b] >> t) & 1) + ((r2[b] >> t) & 1)
                    + ((r3[b] >> t) & 1);
                plane[b] = plane[b].wrapping_add(sum);
            }
        }
    }
}

multiversion! {
    /// Add the u8 counters to their u32 totals and clear them.
    fn flush_bit_planes(planes: &mut [u8], wide: &mut [u32]) {
        for (w, p) in wide.iter_mut().zip(planes.iter_mut()) {
            *w += *p as u32;
            *p = 0;
        }
    }
}

/// Bytes of reports one task of [`aggregate_bits`] reads (the unit of interruption).
const BIT_TASK_BYTES: usize = 1 << 22;

/// The buffers [`aggregate_bits`] allocates for `n` rows of `bits` bits: the per-bit
/// histogram, the bit-plane counters of a tile of [`BIT_TILE_BYTES`] per worker thread (5
/// bytes per bit: 160 KiB), and, when invalid rows are dropped, one validity bit per row.
/// O(bits + n/8 + threads · 160 KiB).
pub fn bit_aggregation_footprint(bits: u64, rows: u64) -> Footprint {
    bit_groups_aggregation_footprint(bits, rows, 1)
}

/// The buffers [`aggregate_bit_groups`] allocates for `rows` rows of `bits` bits counted in
/// `groups` groups: [`bit_aggregation_footprint`] with a histogram per group (the groups
/// share the bit-plane counters): O(groups · bits + threads · 160 KiB + n/8).
pub fn bit_groups_aggregation_footprint(bits: u64, rows: u64, groups: u64) -> Footprint {
    let tile = row_bytes(bits).min(BIT_TILE_BYTES) as u64;
    Footprint::new(format!("aggregating {rows} reports of {bits} bits"))
        .add("the per-bit histogram", groups.saturating_mul(bits), 8)
        .add(
            "bit-plane counters (one set per thread)",
            (rayon::current_num_threads() as u64).saturating_mul(tile * 8),
            5,
        )
        .add("row validity bits", rows.div_ceil(64), 8)
}

/// Add the per-bit counts of packed `reports` (`n · row_bytes` bytes) to `counts` (length
/// `bits`). Malformed rows are tallied; with `drop_invalid == false` any of them is an error.
/// All or nothing: on an error (malformed rows without `drop_invalid`, an interruption, a
/// count that would pass 2^64 − 1, memory) `counts` is left as it was.
///
/// Rows are cut into tiles of at most [`BIT_TILE_BYTES`] bytes; a task counts one tile over
/// a block of rows in vertical (bit-plane) counters: 8 u8 counters per byte of the tile, one
/// per bit position, each row added with 8 vectorized shift/mask/add passes over its bytes
/// (`add_bit_planes`), flushed into u32 totals every 255 rows. The totals go to a shared
/// histogram with atomic integer additions (exact, so the result does not depend on the
/// thread count). The bytes are read once, sequentially: this counts at memory bandwidth
/// (the previous byte-value tables, 256 counts per byte, did one random increment per byte
/// into 2 MiB). Memory: [`bit_aggregation_footprint`].
pub fn aggregate_bits<M: BitMechanism>(
    mechanism: &M,
    reports: &[u8],
    counts: &mut [u64],
    drop_invalid: bool,
) -> Result<Tally> {
    aggregate_bit_groups(mechanism, reports, counts, 1, |_| 0, drop_invalid)
}

/// [`aggregate_bits`] with the rows split into `groups` groups: row r's bits are added to
/// `counts[g·bits .. (g + 1)·bits]` with `g = group(r)` (a function of the row, e.g. a
/// public bit of it; values ≥ `groups` count in the last group). `counts` has length
/// `groups · bits`. The same validation, all-or-nothing update, overflow checks and
/// thread-count independence; memory [`bit_groups_aggregation_footprint`]. Each task makes
/// one pass per group over its block of rows (4 MiB), counting that group's rows in the
/// one set of cache-sized counters (with the previous byte-value tables, two alternating
/// groups measured 1.2–1.5× the time of one group, against 1.6–2× for one pass into a
/// table per group).
pub fn aggregate_bit_groups<M: BitMechanism>(
    mechanism: &M,
    reports: &[u8],
    counts: &mut [u64],
    groups: usize,
    group: impl Fn(&[u8]) -> usize + Sync,
    drop_invalid: bool,
) -> Result<Tally> {
    let bits = mechanism.bits();
    let width = row_bytes(bits);
    let groups = groups.max(1);
    let size = (bits as usize).checked_mul(groups).ok_or_else(|| {
        Error::Memory(format!(
            "{groups} groups of {bits} counts do not fit in memory"
        ))
    })?;
    if counts.len() != size {
        return Err(Error::Value(format!(
            "counts must have length {size}, got {}",
            counts.len()
        )));
    }
    if width == 0 || reports.len() % width != 0 {
        return Err(Error::Value(format!(
            "packed reports must have {width} bytes per row, got {} bytes in all",
            reports.len()
        )));
    }
    let n = reports.len() / width;
    bit_groups_aggregation_footprint(bits, n as u64, groups as u64).check()?;
    // Rows per block: about BIT_TASK_BYTES of reports per task (validation reads whole rows).
    let block_rows = (BIT_TASK_BYTES / width).max(1);
    let invalid = reports
        .par_chunks(block_rows * width)
        .map(|rows| -> Result<u64> {
            crate::interrupt::check()?;
            Ok(rows
                .chunks_exact(width)
                .filter(|row| !row_is_valid(mechanism, row))
                .count() as u64)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))?;
    let first_invalid = (invalid > 0)
        .then(|| {
            reports
                .par_chunks_exact(width)
                .position_first(|row| !row_is_valid(mechanism, row))
        })
        .flatten();
    if invalid > 0 && !drop_invalid {
        return Err(Error::Value(format!(
            "{invalid} of {n} reports are malformed (padding bits set, or not a possible report \
             of this mechanism); the first is row {} (pass on_invalid='drop' to drop and count them)",
            first_invalid.unwrap_or(0)
        )));
    }
    // Which rows to count, when some are dropped: one bit per row.
    let valid_rows = if invalid > 0 {
        let mut words = crate::memory::allocate_zeroed::<u64>(n.div_ceil(64), "row validity bits")?;
        words
            .par_chunks_mut(block_rows.div_ceil(64).max(1))
            .enumerate()
            .try_for_each(|(c, chunk)| {
                crate::interrupt::check()?;
                let first = c * block_rows.div_ceil(64).max(1) * 64;
                for (w, word) in chunk.iter_mut().enumerate() {
                    for t in 0..64 {
                        let i = first + 64 * w + t;
                        if i < n && row_is_valid(mechanism, &reports[i * width..(i + 1) * width]) {
                            *word |= 1 << t;
                        }
                    }
                }
                Ok::<(), Error>(())
            })?;
        Some(words)
    } else {
        None
    };
    let mut histogram = crate::memory::allocate_zeroed::<u64>(size, "the per-bit histogram")?;
    let cells = as_atomic(&mut histogram);
    let tile = width.min(BIT_TILE_BYTES);
    let tiles = width.div_ceil(tile);
    let tile_rows = (BIT_TASK_BYTES / tile).max(1);
    let blocks = n.div_ceil(tile_rows);
    (0..blocks * tiles).into_par_iter().try_for_each_init(
        || {
            let planes = crate::memory::allocate_zeroed::<u8>(8 * tile, "bit-plane counters");
            let wide = crate::memory::allocate_zeroed::<u32>(8 * tile, "bit-plane totals");
            planes.and_then(|p| wide.map(|w| (p, w)))
        },
        |buffers, task| -> Result<()> {
            crate::interrupt::check()?;
            let (planes, wide) = match buffers {
                Ok(b) => (&mut b.0, &mut b.1),
                Err(e) => return Err(Error::Memory(e.to_string())),
            };
            let (block, t) = (task / tiles, task % tiles);
            let (first_byte, last_byte) = (t * tile, ((t + 1) * tile).min(width));
            let span = last_byte - first_byte;
            let first_row = block * tile_rows;
            let last_row = (first_row + tile_rows).min(n);
            // One pass over the block per group (the counters stay cache-sized).
            for g in 0..groups {
                wide[..8 * span].fill(0);
                let mut pending = 0u32; // rows in the u8 counters since the last flush
                let mut counted = false;
                let mut batch: [usize; 4] = [0; 4]; // rows waiting to be added, four at a time
                let mut batched = 0;
                let row = |i: usize| &reports[i * width + first_byte..i * width + last_byte];
                for i in first_row..last_row {
                    if let Some(valid) = &valid_rows {
                        if valid[i / 64] >> (i % 64) & 1 == 0 {
                            continue;
                        }
                    }
                    if groups > 1
                        && group(&reports[i * width..(i + 1) * width]).min(groups - 1) != g
                    {
                        continue;
                    }
                    counted = true;
                    batch[batched] = i;
                    batched += 1;
                    if batched == 4 {
                        let [a, b, c, d] = batch;
                        add_bit_planes4(row(a), row(b), row(c), row(d), &mut planes[..8 * span]);
                        batched = 0;
                        pending += 4;
                        if pending + 4 > u8::MAX as u32 {
                            flush_bit_planes(&mut planes[..8 * span], &mut wide[..8 * span]);
                            pending = 0;
                        }
                    }
                }
                for &i in &batch[..batched] {
                    add_bit_planes(row(i), &mut planes[..8 * span]);
                }
                if !counted {
                    continue;
                }
                flush_bit_planes(&mut planes[..8 * span], &mut wide[..8 * span]);
                for (t, plane) in wide[..8 * span].chunks_exact(span).enumerate() {
                    for (b, &c) in plane.iter().enumerate() {
                        // Plane t counts bit t (from the least significant) of each byte:
                        // bit j = 8·byte + 7 − t of the row in numpy.packbits order.
                        let j = 8 * (first_byte + b) + 7 - t;
                        if c > 0 && j < bits as usize {
                            cells[g * bits as usize + j].fetch_add(c as u64, Ordering::Relaxed);
                        }
                    }
                }
            }
            Ok(())
        },
    )?;
    if let Some(j) = (0..size).find(|&j| counts[j].checked_add(histogram[j]).is_none()) {
        return Err(count_overflow(j));
    }
    counts.iter_mut().zip(&histogram).for_each(|(c, h)| *c += h);
    Ok(Tally {
        valid: (n as u64) - invalid,
        invalid,
        first_invalid,
    })
}

#[cfg(test)]
mod tests {
    use super::super::unary_encoding::Rappor;
    use super::*;
    use crate::parallel::in_pool;

    /// Reports with a few malformed entries, deterministic.
    fn words(n: usize, salt: u32) -> impl Iterator<Item = u32> {
        (0..n as u32).map(move |i| (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(7))
    }

    #[test]
    fn bit_aggregation_over_several_tiles_matches_a_plain_count() {
        // 3·BIT_TILE_BYTES·8 + 1 bits: four tiles, 7 padding bits in the last byte.
        let bits = (3 * BIT_TILE_BYTES * 8 + 1) as u64;
        let m = Rappor::new(bits, 1.0).unwrap();
        let width = row_bytes(bits);
        let rows = 700;
        let mut reports: Vec<u8> = words(rows * width, 9).map(|w| w as u8).collect();
        // Clear the padding of every row but rows 100 and 650 (malformed).
        for i in 0..rows {
            if i != 100 && i != 650 {
                reports[i * width + width - 1] &= 0x80;
            } else {
                reports[i * width + width - 1] |= 0x01;
            }
        }
        let mut want = vec![0u64; bits as usize];
        for i in (0..rows).filter(|&i| i != 100 && i != 650) {
            for (j, w) in want.iter_mut().enumerate() {
                *w += get_bit(&reports[i * width..(i + 1) * width], j as u64) as u64;
            }
        }
        let mut counts = vec![1u64; bits as usize];
        let e = aggregate_bits(&m, &reports, &mut counts, false).unwrap_err();
        assert!(e.to_string().contains("row 100"), "{e}");
        assert!(
            counts.iter().all(|&c| c == 1),
            "refused batch changed the counts"
        );
        for threads in [1, 4] {
            let mut counts = vec![0u64; bits as usize];
            let t = in_pool(threads, || aggregate_bits(&m, &reports, &mut counts, true)).unwrap();
            assert_eq!((t.valid, t.invalid, t.first_invalid), (698, 2, Some(100)));
            assert_eq!(counts, want, "{threads} threads");
        }
        let mut full = vec![u64::MAX; bits as usize];
        assert!(aggregate_bits(&m, &reports, &mut full, true).is_err());
        assert!(
            full.iter().all(|&c| c == u64::MAX),
            "overflow changed the counts"
        );
    }
}
