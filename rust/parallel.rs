//! When to go parallel. Waking rayon's workers costs tens of microseconds (measured: a
//! third of an OMP run at k = 10^4 went to the scheduler), so small kernels stay on the
//! calling thread.

use rayon::prelude::*;

/// Elementary operations below which a kernel runs on the calling thread.
pub const PARALLEL_WORK: usize = 1 << 18;

/// `f(chunk_index, chunk)` over `out.chunks_mut(chunk_len)`, on rayon's pool when `work`
/// (the kernel's total operation count) is large enough to pay for it.
pub fn for_each_chunk_mut<T, F>(out: &mut [T], chunk_len: usize, work: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    if work < PARALLEL_WORK {
        out.chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        out.par_chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// Run `f` on a fresh pool of `threads` threads (tests of thread-count independence).
#[cfg(test)]
pub(crate) fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}
