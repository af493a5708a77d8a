//! The memory guard: every buffer whose size depends on k, m, n or the thread count is
//! declared here, with the *total* of an operation (all per-thread buffers included), and
//! compared with one budget *before* anything is allocated. An oversized request is a clear
//! [`Error::Memory`] naming the parts and how to lower them, never an abort or an OOM kill
//! (Linux over-commits: a plain allocation of too much succeeds and the process dies later).
//!
//! # The budget
//! The budget is the smallest of:
//! * the explicit limit, when one is set ([`set_limit`], or the environment variable
//!   `LDPDIST_MAX_MEMORY` read at first use: a byte count with an optional `K`, `M`, `G`, `T`
//!   suffix, powers of 1024), else [`AVAILABLE_FRACTION`] of the memory the OS reports as
//!   available (`MemAvailable` in /proc/meminfo);
//! * the address-space headroom under `RLIMIT_AS` (limit − current size, /proc/self);
//! * the cgroup headroom (`memory.max` − `memory.current`, cgroup v2), in containers.
//!
//! The last two are hard limits (crossing them fails for certain), so an explicit limit does
//! not lift them. Requests below [`OS_CHECK_ABOVE_BYTES`] are checked against the explicit
//! limit only (reading /proc costs more than such allocations).

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Fraction of the available memory the default budget allows.
pub const AVAILABLE_FRACTION: f64 = 0.75;

/// Below this total, requests are not compared with what the OS reports.
pub const OS_CHECK_ABOVE_BYTES: u128 = 16 << 20;

/// `u64::MAX`: no explicit limit; `UNSET`: not read from the environment yet.
const NO_LIMIT: u64 = u64::MAX;
const UNSET: u64 = u64::MAX - 1;
static EXPLICIT_LIMIT: AtomicU64 = AtomicU64::new(UNSET);

/// Name of the environment variable holding an explicit limit.
pub const LIMIT_VARIABLE: &str = "LDPDIST_MAX_MEMORY";

/// Parse a byte count such as `"3000000000"`, `"512M"`, `"2G"`, `"1.5GiB"`.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (number, scale) = match t.chars().last()?.to_ascii_uppercase() {
        'K' => (&t[..t.len() - 1], 1u64 << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        'T' => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let value: f64 = number.trim().parse().ok()?;
    let bytes = value * scale as f64;
    (value.is_finite() && value >= 0.0 && bytes < NO_LIMIT as f64).then_some(bytes as u64)
}

/// Set (`Some(bytes)`) or remove (`None`) the explicit limit.
pub fn set_limit(limit: Option<u64>) {
    EXPLICIT_LIMIT.store(
        limit.map_or(NO_LIMIT, |v| v.min(NO_LIMIT - 2)),
        Ordering::Relaxed,
    );
}

/// The explicit limit, reading `LDPDIST_MAX_MEMORY` on first use.
pub fn explicit_limit() -> Result<Option<u64>> {
    let mut value = EXPLICIT_LIMIT.load(Ordering::Relaxed);
    if value == UNSET {
        value = match std::env::var(LIMIT_VARIABLE) {
            Ok(text) => parse_bytes(&text).ok_or_else(|| {
                Error::Value(format!(
                    "{LIMIT_VARIABLE} = {text:?} is not a byte count (examples: 3000000000, \
                     512M, 2G)"
                ))
            })?,
            Err(_) => NO_LIMIT,
        };
        let _ = EXPLICIT_LIMIT.compare_exchange(UNSET, value, Ordering::Relaxed, Ordering::Relaxed);
    }
    Ok((value != NO_LIMIT).then_some(value))
}

/// A `Key:   <number> kB` field of a /proc file, in bytes.
fn proc_field(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Address-space headroom under RLIMIT_AS (soft limit − current virtual size).
fn address_space_headroom() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft = line["Max address space".len()..]
        .split_whitespace()
        .next()?;
    let limit: u64 = soft.parse().ok()?; // "unlimited" does not parse: no limit
    let size = proc_field("/proc/self/status", "VmSize:")?;
    Some(limit.saturating_sub(size))
}

/// cgroup v2 headroom (`memory.max` − `memory.current`) of this process's cgroup.
fn cgroup_headroom() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let base = format!("/sys/fs/cgroup{}", path.trim());
    let max: u64 = std::fs::read_to_string(format!("{base}/memory.max"))
        .ok()?
        .trim()
        .parse()
        .ok()?; // "max" does not parse: no limit
    let current: u64 = std::fs::read_to_string(format!("{base}/memory.current"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(max.saturating_sub(current))
}

/// The budget in force and where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub bytes: u64,
    pub source: String,
}

/// The budget for a request of `bytes` (the OS is consulted only for large requests).
fn budget_for(bytes: u128) -> Result<Budget> {
    let explicit = explicit_limit()?;
    let mut best = Budget {
        bytes: explicit.unwrap_or(NO_LIMIT),
        source: match explicit {
            Some(_) => format!("the limit set by ldpdist.set_memory_limit or {LIMIT_VARIABLE}"),
            None => "no limit".into(),
        },
    };
    if bytes <= OS_CHECK_ABOVE_BYTES {
        return Ok(best);
    }
    let mut consider = |limit: Option<u64>, source: &dyn Fn(u64) -> String| {
        if let Some(limit) = limit {
            if limit < best.bytes {
                best = Budget {
                    bytes: limit,
                    source: source(limit),
                };
            }
        }
    };
    if explicit.is_none() {
        let available = proc_field("/proc/meminfo", "MemAvailable:");
        consider(
            available.map(|a| (a as f64 * AVAILABLE_FRACTION) as u64),
            &|_| {
                format!(
                    "{:.0}% of the {} the OS reports available",
                    AVAILABLE_FRACTION * 100.0,
                    human(available.unwrap_or(0) as u128)
                )
            },
        );
    }
    consider(address_space_headroom(), &|_| {
        "the address space left under this process's RLIMIT_AS".into()
    });
    consider(cgroup_headroom(), &|_| {
        "the memory left under this container's cgroup limit".into()
    });
    Ok(best)
}

/// The budget a large request would get now (for diagnostics and the Python API).
pub fn current_budget() -> Result<Budget> {
    budget_for(u128::MAX)
}

/// `1.50 GiB`-style sizes.
pub fn human(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// The buffers one operation is about to allocate, named, with their total.
#[derive(Clone, Debug)]
pub struct Footprint {
    what: String,
    parts: Vec<(String, u128)>,
    hint: Option<String>,
}

impl Footprint {
    /// An empty footprint for the operation `what` (e.g. "HadamardResponse aggregation").
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            parts: Vec::new(),
            hint: None,
        }
    }

    /// Add `count` items of `item_bytes` bytes, named `part` (arithmetic never wraps).
    pub fn add(
        mut self,
        part: impl Into<String>,
        count: impl Into<u128>,
        item_bytes: usize,
    ) -> Self {
        let bytes = count.into().saturating_mul(item_bytes as u128);
        if bytes > 0 {
            self.parts.push((part.into(), bytes));
        }
        self
    }

    /// Add another footprint's parts (e.g. a sub-operation).
    pub fn include(mut self, other: &Footprint) -> Self {
        self.parts.extend(other.parts.iter().cloned());
        self
    }

    /// What to lower when the request is refused (appended to the message).
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Total bytes (saturating).
    pub fn bytes(&self) -> u128 {
        self.parts
            .iter()
            .fold(0u128, |total, (_, b)| total.saturating_add(*b))
    }

    /// `Ok` when the total fits the budget; otherwise an [`Error::Memory`] that names it.
    pub fn check(&self) -> Result<()> {
        let bytes = self.bytes();
        let hard_cap = isize::MAX as u128;
        let budget = if bytes > hard_cap {
            Budget {
                bytes: hard_cap as u64,
                source: "the address space".into(),
            }
        } else {
            budget_for(bytes)?
        };
        if bytes <= budget.bytes as u128 {
            return Ok(());
        }
        let parts = self
            .parts
            .iter()
            .map(|(name, b)| format!("{name} {}", human(*b)))
            .collect::<Vec<_>>()
            .join(", ");
        let hint = self
            .hint
            .as_deref()
            .map(|h| format!("; {h}"))
            .unwrap_or_default();
        Err(Error::Memory(format!(
            "{} needs {} ({parts}), more than the memory budget of {} ({}){hint}; the budget \
             can be changed with ldpdist.set_memory_limit() or {LIMIT_VARIABLE}",
            self.what,
            human(bytes),
            human(budget.bytes as u128),
            budget.source
        )))
    }
}

/// Refuse `count` items of `item_bytes` bytes, named `what`, beyond the budget.
pub fn check_fits(count: usize, item_bytes: usize, what: &str) -> Result<()> {
    Footprint::new(format!("allocating {what}"))
        .add(what.to_string(), count as u128, item_bytes)
        .check()
}

/// Types whose all-zero bit pattern is their zero value, so that a zero-filled buffer can
/// come straight from the allocator.
pub trait Zeroable: Copy {}
macro_rules! zeroable {
    ($($t:ty),*) => { $(impl Zeroable for $t {})* };
}
zeroable!(u8, u16, u32, u64, usize, i8, i16, i32, i64, f32, f64, bool);

/// A zero-filled vector, after [`check_fits`] and a fallible reservation.
pub fn zeroed_vec<T: Zeroable>(count: usize, what: &str) -> Result<Vec<T>> {
    check_fits(count, std::mem::size_of::<T>(), what)?;
    allocate_zeroed(count, what)
}

/// A zero-filled vector whose size an enclosing [`Footprint`] has already checked: only the
/// allocator's refusal is turned into an error here. The zeros come from `alloc_zeroed`
/// (fresh pages from the OS for large sizes) rather than a fill: a multi-gigabyte buffer is
/// ready at once, and its pages are touched by the interruptible work that follows.
pub fn allocate_zeroed<T: Zeroable>(count: usize, what: &str) -> Result<Vec<T>> {
    let refused = || {
        Error::Memory(format!(
            "{what}: the allocator refused {}",
            human(count as u128 * std::mem::size_of::<T>() as u128)
        ))
    };
    let layout = std::alloc::Layout::array::<T>(count).map_err(|_| refused())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a nonzero size; all-zero bytes are a valid T (`Zeroable`); the
    // pointer comes from the global allocator with the layout of a Vec<T> of capacity count.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            return Err(refused());
        }
        Ok(Vec::from_raw_parts(ptr, count, count))
    }
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

    #[test]
    fn parses_byte_counts() {
        assert_eq!(parse_bytes("1000"), Some(1000));
        assert_eq!(parse_bytes("2K"), Some(2048));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_bytes(" 3 g "), Some(3 << 30));
        assert_eq!(parse_bytes("2GB"), Some(2 << 30));
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes(""), None);
    }

    #[test]
    fn footprints_sum_their_parts_and_name_them_when_refused() {
        let f = Footprint::new("a test operation")
            .add("first", 3u64, 8)
            .add("second", u128::MAX, 2)
            .hint("lower k");
        assert_eq!(f.bytes(), u128::MAX);
        let message = f.check().unwrap_err().to_string();
        for word in [
            "a test operation",
            "first",
            "second",
            "lower k",
            LIMIT_VARIABLE,
        ] {
            assert!(message.contains(word), "{message}");
        }
        assert!(Footprint::new("nothing").check().is_ok());
    }

    #[test]
    fn the_budget_is_finite_on_linux() {
        let budget = current_budget().unwrap();
        assert!(budget.bytes > 0 && budget.bytes < u64::MAX, "{budget:?}");
    }
}
