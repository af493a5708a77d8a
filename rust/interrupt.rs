//! Cooperative interruption of long computations.
//!
//! Long loops (privatize, aggregate, simulate, matrix builds, OMP) call [`check`] between
//! chunks of bounded work (at most a few milliseconds each); once [`request`] has been called
//! it returns [`Error::Interrupted`] and the computation unwinds through its `Result`s, leaving
//! its outputs untouched (every operation that mutates a caller's buffer validates and
//! computes first, and writes last). The Python bindings request an interruption when the
//! interpreter receives SIGINT (Ctrl-C) during a call and clear it when no call is running;
//! a pure-Rust caller can wire its own signal handling to [`request`] and [`clear`].

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Ask every running computation to stop at its next check.
pub fn request() {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Withdraw a request (computations started afterwards run normally).
pub fn clear() {
    REQUESTED.store(false, Ordering::Relaxed);
}

/// Whether an interruption has been requested.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// `Err(Error::Interrupted)` once an interruption has been requested.
#[inline]
pub fn check() -> Result<()> {
    if requested() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// A check function that computations call between chunks of work: [`check`] (stop when
/// interrupted) or [`never`](fn@never).
pub trait Check: Fn() -> Result<()> + Sync {}
impl<F: Fn() -> Result<()> + Sync> Check for F {}

/// A check that never stops: the uninterruptible entry points of computations that take a
/// check function pass this one.
pub fn never() -> Result<()> {
    Ok(())
}

/// The value of a computation whose only failure is its check, run with [`never`](fn@never).
pub fn uninterrupted<T>(outcome: Result<T>) -> T {
    match outcome {
        Ok(value) => value,
        Err(e) => unreachable!("a computation checked with `never` stopped: {e}"),
    }
}

/// The two entry points of a computation written once as `WITH(args…, check)`, for `impl`
/// blocks: `NAME` runs it with [`never`] (uninterruptible, so infallible) and `TRY_NAME` with
/// [`check`] (returns `Error::Interrupted` once asked to stop).
///
/// ```text
/// interruptible! {
///     /// Unbiased estimate from the report histogram.
///     pub fn estimate_raw / try_estimate_raw
///         = try_estimate_raw_with(counts: &[u64], n: u64) -> Vec<f64>;
/// }
/// ```
macro_rules! interruptible {
    ($($(#[$doc:meta])* pub fn $name:ident / $try_name:ident
       = $with:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, $($arg: $ty),*) -> $ret {
            $crate::interrupt::uninterrupted(self.$with($($arg,)* &$crate::interrupt::never))
        }

        #[doc = concat!("[`", stringify!($name), "`](Self::", stringify!($name),
                        "), stopping when interrupted (`crate::interrupt`).")]
        pub fn $try_name(&self, $($arg: $ty),*) -> $crate::error::Result<$ret> {
            self.$with($($arg,)* &$crate::interrupt::check)
        }
    )*};
}
pub(crate) use interruptible;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_reports_a_request_until_cleared() {
        // The flag is global: this is the only unit test that sets it.
        assert!(check().is_ok());
        request();
        assert_eq!(check(), Err(Error::Interrupted));
        clear();
        assert!(check().is_ok());
    }
}
