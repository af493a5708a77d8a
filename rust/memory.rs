//! Allocation guard: large buffers are checked against the memory the machine can give
//! *before* they are allocated, so an oversized request is a clear error, not an OOM kill
//! (Linux over-commits, so a plain allocation of too much would succeed and die later).

use crate::error::{Error, Result};

/// Bytes the allocation may not exceed: `MemAvailable` from /proc/meminfo where the OS
/// reports it, else no limit beyond what the allocator refuses.
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Requests below this size are not checked against the OS (reading /proc/meminfo costs
/// microseconds, more than the small allocations themselves).
const CHECK_ABOVE_BYTES: u128 = 64 << 20;

/// Refuse a request of `count` items of `item_bytes` each that cannot fit; `what` names it.
pub fn check_fits(count: usize, item_bytes: usize, what: &str) -> Result<()> {
    let bytes = (count as u128) * (item_bytes as u128);
    let too_big = |limit: u128, why: &str| {
        Err(Error::Memory(format!(
            "{what} needs {bytes} bytes ({:.2} GiB), more than {why} ({:.2} GiB)",
            bytes as f64 / (1u64 << 30) as f64,
            limit as f64 / (1u64 << 30) as f64
        )))
    };
    if bytes > isize::MAX as u128 {
        return too_big(isize::MAX as u128, "the address space allows");
    }
    if bytes <= CHECK_ABOVE_BYTES {
        return Ok(());
    }
    if let Some(limit) = available_bytes() {
        if bytes > limit as u128 {
            return too_big(limit as u128, "the memory available");
        }
    }
    Ok(())
}

/// A zero-filled vector, after [`check_fits`] and a fallible reservation.
pub fn zeroed_vec<T: Default + Clone>(count: usize, what: &str) -> Result<Vec<T>> {
    check_fits(count, std::mem::size_of::<T>(), what)?;
    let mut v = Vec::new();
    v.try_reserve_exact(count)
        .map_err(|_| Error::Memory(format!("{what}: the allocator refused {count} items")))?;
    v.resize(count, T::default());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_impossible_sizes_before_allocating() {
        let err = zeroed_vec::<u64>(usize::MAX / 4, "a huge buffer").unwrap_err();
        assert!(matches!(err, Error::Memory(ref m) if m.contains("a huge buffer")));
        assert_eq!(zeroed_vec::<u8>(10, "small").unwrap(), vec![0u8; 10]);
    }
}
