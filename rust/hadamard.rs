//! Fast Walsh–Hadamard transform in Sylvester order, and Sylvester matrix entries.
//!
//! Convention: `H(r, c) = (−1)^popcount(r & c)`, 0-based, unnormalized, so
//! `H·H = n·I`. [`fwht_in_place`] computes `x ← H·x` for `x.len() = n = 2^j` in
//! `n·log2(n)` additions.
//!
//! Layout of the computation: the vector is viewed as an `R × C` row-major matrix with
//! `C` = one block of 32 KiB (L1-resident: 2^12 f64 or i64, 2^13 f32). `H_n = H_R ⊗ H_C`, so
//! the transform is (1) an in-cache transform of every block, then (2) a length-`R`
//! transform down every column, each butterfly acting on contiguous, vectorizable runs of a
//! row. The data crosses memory twice instead of `log2 n` times. From 64 MiB on, a third
//! level (`three_pass`): super-blocks of 1 MiB are transformed as above, then the columns
//! across them through a contiguous scratch panel (two-level columns would be thousands of
//! rows 32 KiB apart, a TLB miss each). A caller that only reads the result once
//! ([`fwht_visiting_panels`]) gets each panel of the outer pass while in cache instead.
//!
//! Kernels ([`Kernel`], picked at run time; the crate is compiled for baseline x86-64):
//! on x86-64 with AVX-512F or AVX2, f64, f32 and i64 go through `std::arch` kernels (module
//! `x86`): the stages inside a vector by lane permutations, then radix-8/16 passes that hold
//! 8–16 vectors in registers (three or four stages per trip through L1 instead of two), and
//! column passes done in place with radix ≤ 8, streaming along the rows of a column task.
//! Elsewhere, plain loops vectorized by the compiler: radix-4 butterflies (two stages per
//! pass), column panels of `PANEL` columns copied to a contiguous scratch buffer (walking a
//! column with a stride of 32 KiB maps every row to the same cache sets). The AVX-512 kernel
//! takes 0.39–0.41× the time of the portable loops at 2^16 f64 and 0.31–0.40× at 2^20
//! (same process, interleaved, 2-core Zen 4; `cargo bench --bench kernels -- fwht/`).
//!
//! Vectors below 1 MiB (2^16 f64: L2-resident) are transformed on the calling thread: waking
//! rayon's workers and handing the columns of the second pass to the other core cost more
//! than the second core saves there (measured with `benches/kernels.rs`, see
//! benches/README.md). Larger ones run blocks, then column panels, as rayon tasks.
//!
//! Every size and thread count performs the same additions in the same order: stages
//! `h = 1, 2, 4, …, n/2` in turn, each output of a stage `a + b` or `a − b` of two outputs of
//! the previous one. Float results are therefore bit-identical whatever the block size, the
//! task split, the thread count or the kernel (and to a plain radix-2 transform).

use crate::simd::multiversion;
use rayon::prelude::*;
use std::ops::{Add, Sub};

/// Elements the transform works on: floats, and exact integers for count decoding.
pub trait Butterfly: Copy + Send + Sync + Add<Output = Self> + Sub<Output = Self> {
    #[doc(hidden)]
    /// Stages `h = first, 2·first, …, n/2` of `x` (see `transform_stages`) with `kernel`;
    /// types without hand-written kernels use the portable loops.
    #[inline]
    fn stages(x: &mut [Self], first: usize, kernel: Kernel) {
        let _ = kernel;
        portable_stages(x, first);
    }

    #[doc(hidden)]
    /// Length-`rows` transforms down columns `first..last` of the `rows × stride` matrix at
    /// `base` (see `transform_columns`) with `kernel`.
    #[inline]
    fn columns(
        base: SendPtr<Self>,
        rows: usize,
        stride: usize,
        columns: std::ops::Range<usize>,
        scratch: &mut Vec<Self>,
        kernel: Kernel,
    ) {
        transform_columns(
            base,
            rows,
            stride,
            columns.start,
            columns.end,
            PANEL,
            scratch,
            kernel,
        );
    }
}
/// `Butterfly` for a type with `std::arch` kernels in modules `$avx512` and `$avx2` of
/// [`x86`]; shapes they do not handle fall back to the portable loops.
macro_rules! vector_butterfly {
    ($t:ty, $avx512:ident, $avx2:ident) => {
        impl Butterfly for $t {
            #[inline]
            fn stages(x: &mut [$t], first: usize, kernel: Kernel) {
                #[cfg(target_arch = "x86_64")]
                {
                    // SAFETY: `fwht_with_kernel` checked `Kernel::is_supported`.
                    let done = match kernel {
                        Kernel::Avx512 => unsafe { x86::$avx512::stages(x, first) },
                        Kernel::Avx2 => unsafe { x86::$avx2::stages(x, first) },
                        Kernel::Portable => false,
                    };
                    if done {
                        return;
                    }
                }
                let _ = kernel;
                portable_stages(x, first);
            }

            #[inline]
            fn columns(
                base: SendPtr<$t>,
                rows: usize,
                stride: usize,
                columns: std::ops::Range<usize>,
                scratch: &mut Vec<$t>,
                kernel: Kernel,
            ) {
                #[cfg(target_arch = "x86_64")]
                {
                    let (p, c) = (base.0, columns.clone());
                    // SAFETY: `fwht_with_kernel` checked `Kernel::is_supported`; the caller
                    // owns these columns of every row exclusively.
                    let done = match kernel {
                        Kernel::Avx512 => unsafe { x86::$avx512::columns(p, rows, stride, c) },
                        Kernel::Avx2 => unsafe { x86::$avx2::columns(p, rows, stride, c) },
                        Kernel::Portable => false,
                    };
                    if done {
                        return;
                    }
                }
                let (first, last) = (columns.start, columns.end);
                transform_columns(base, rows, stride, first, last, PANEL, scratch, kernel);
            }
        }
    };
}
vector_butterfly!(f64, avx512_f64, avx2_f64);
vector_butterfly!(f32, avx512_f32, avx2_f32);
vector_butterfly!(i64, avx512_i64, avx2_i64);

/// The implementation of the in-cache stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Plain Rust loops, vectorized by the compiler (`multiversion!`): any CPU.
    Portable,
    /// `std::arch` AVX2 kernels (f64, f32).
    Avx2,
    /// `std::arch` AVX-512F kernels (f64, f32).
    Avx512,
}

impl Kernel {
    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        [Kernel::Avx512, Kernel::Avx2]
            .into_iter()
            .find(|k| k.is_supported())
            .unwrap_or(Kernel::Portable)
    }
}

/// Bytes of a block transformed entirely in L1 (32 KiB of L1d per core: `lscpu`).
const L1_BYTES: usize = 32 << 10;
/// From this many bytes on, the transform runs on rayon's pool; below, on the calling thread.
const PARALLEL_BYTES: usize = 1 << 20;
/// Columns transformed together in a column pass (two cache lines of f64).
const PANEL: usize = 16;
/// Entries of a column task (128 KiB of f64, tens of microseconds of work).
const COLUMN_TASK: usize = 1 << 14;
/// Blocks per task of the block pass (512 KiB of f64).
const BLOCKS_PER_TASK: usize = 16;

/// Length of a block transformed in L1.
fn block_len<T>() -> usize {
    L1_BYTES / std::mem::size_of::<T>()
}

/// Entry `(r, c)` of the Sylvester Hadamard matrix: `(−1)^popcount(r & c)`.
#[inline]
pub fn sylvester_entry(r: u64, c: u64) -> i8 {
    1 - 2 * ((r & c).count_ones() & 1) as i8
}

#[inline(always)]
fn butterfly4<T: Butterfly>(a: T, b: T, c: T, d: T) -> (T, T, T, T) {
    let (s0, d0, s1, d1) = (a + b, a - b, c + d, c - d);
    (s0 + s1, d0 + d1, s0 - s1, d0 - d1)
}

/// Stages `h = first, 2·first, …, n/2` of the transform of a contiguous block whose length
/// `n` is a power of two (`first` a power of two). With `first = 1` this is the whole
/// transform; a buffer of `R` rows of width `W` gets its length-`R` column transforms from
/// `first = W`, each butterfly acting on `W` contiguous entries.
#[inline(always)]
fn transform_stages<T: Butterfly>(x: &mut [T], first: usize) {
    let n = x.len();
    let mut h = first;
    if h == 1 && n >= 8 {
        // The first three stages inside each group of 8, written out: the generic loops
        // below would run with inner lengths 1 and 4, which do not vectorize.
        for g in x.chunks_exact_mut(8) {
            let [a0, a1, a2, a3, a4, a5, a6, a7] = [g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]];
            let (b0, b1, b2, b3) = (a0 + a1, a0 - a1, a2 + a3, a2 - a3);
            let (b4, b5, b6, b7) = (a4 + a5, a4 - a5, a6 + a7, a6 - a7);
            let (c0, c1, c2, c3) = (b0 + b2, b1 + b3, b0 - b2, b1 - b3);
            let (c4, c5, c6, c7) = (b4 + b6, b5 + b7, b4 - b6, b5 - b7);
            g[0] = c0 + c4;
            g[1] = c1 + c5;
            g[2] = c2 + c6;
            g[3] = c3 + c7;
            g[4] = c0 - c4;
            g[5] = c1 - c5;
            g[6] = c2 - c6;
            g[7] = c3 - c7;
        }
        h = 8;
    }
    while 4 * h <= n {
        for quad in x.chunks_exact_mut(4 * h) {
            let (a, rest) = quad.split_at_mut(h);
            let (b, rest) = rest.split_at_mut(h);
            let (c, d) = rest.split_at_mut(h);
            for i in 0..h {
                (a[i], b[i], c[i], d[i]) = butterfly4(a[i], b[i], c[i], d[i]);
            }
        }
        h *= 4;
    }
    if 2 * h <= n {
        let (a, b) = x.split_at_mut(h);
        for i in 0..h {
            (a[i], b[i]) = (a[i] + b[i], a[i] - b[i]);
        }
    }
}

multiversion! {
    /// [`transform_stages`] compiled for the widest vector instructions the CPU has.
    fn portable_stages<T: Butterfly>(x: &mut [T], first: usize) {
        transform_stages(x, first);
    }
}

/// The transform of every block of `block` entries of `x`.
fn transform_blocks<T: Butterfly>(x: &mut [T], block: usize, kernel: Kernel) {
    for b in x.chunks_exact_mut(block) {
        T::stages(b, 1, kernel);
    }
}

multiversion! {
    /// Length-`rows` transforms down columns `first..last` of the `rows × stride` matrix
    /// at `base`, a panel of `PANEL` columns at a time: the panel is copied into `scratch`
    /// (contiguous, so in L1 and free of the cache-set conflicts of a power-of-two stride),
    /// transformed there, and copied back.
    fn transform_columns<T: Butterfly>(base: SendPtr<T>, rows: usize, stride: usize, first: usize, last: usize, panel: usize, scratch: &mut Vec<T>, kernel: Kernel) {
        let mut col = first;
        while col < last {
            let width = panel.min(last - col);
            scratch.clear();
            for r in 0..rows {
                // SAFETY: the caller owns columns first..last of every row exclusively.
                let row = unsafe { std::slice::from_raw_parts(base.0.add(r * stride + col), width) };
                scratch.extend_from_slice(row);
            }
            T::stages(scratch, width, kernel);
            for (r, chunk) in scratch.chunks_exact(width).enumerate() {
                let row = unsafe { std::slice::from_raw_parts_mut(base.0.add(r * stride + col), width) };
                row.copy_from_slice(chunk);
            }
            col += width;
        }
    }
}

/// Hand-written vector kernels for the in-cache stages (the compiler does not find this
/// schedule from the portable loops: it spills or gathers register-blocked arrays).
///
/// Stages `h < LANES` run inside each vector: a lane permutation brings each entry's partner
/// `b` next to `a`, one addition gives `a + b` in every lane and a masked subtraction
/// (partner minus self) overwrites the upper lanes of each pair with `a − b`: the same two
/// IEEE operations as the radix-2 butterfly (`a + b == b + a` exactly). Stages `h ≥ LANES`
/// pair whole vectors: a pass loads `R` vectors `h` apart into registers, applies
/// `log2 R` stages there and stores them, so the block crosses L1 `⌈stages / log2 R⌉`
/// times instead of `stages / 2`. No FMA: every result is one rounded `+` or `−`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    macro_rules! stage_kernels {
        (
            $module:ident, $features:literal, $t:ty, $v:ty, $lanes:expr, $max_log_radix:expr,
            $zero:ident, $load:ident, $store:ident, $add:ident, $sub:ident, $in_vector:path
        ) => {
            pub mod $module {
                use super::*;

                /// Stages `1, 2, …, R/2` (in vectors) of `R` vectors held in registers.
                #[inline]
                #[target_feature(enable = $features)]
                unsafe fn across<const R: usize>(v: &mut [$v; R]) {
                    let mut s = 1;
                    while s < R {
                        for j in 0..R {
                            if j & s == 0 {
                                let (a, b) = (v[j], v[j + s]);
                                v[j] = $add(a, b);
                                v[j + s] = $sub(a, b);
                            }
                        }
                        s *= 2;
                    }
                }

                /// One pass over the `n` entries at `p`: stages `h, 2h, …, R·h/2` with `R`
                /// vectors `h` apart in registers; with `IN_VECTOR` (then `h = LANES`) the
                /// stages inside each vector first.
                #[inline]
                #[target_feature(enable = $features)]
                unsafe fn pass<const R: usize, const IN_VECTOR: bool>(
                    p: *mut $t,
                    n: usize,
                    h: usize,
                ) {
                    let mut base = 0;
                    while base < n {
                        let mut i = 0;
                        while i < h {
                            let q = p.add(base + i);
                            let mut v: [$v; R] = [$zero(); R];
                            for k in 0..R {
                                v[k] = $load(q.add(k * h));
                            }
                            if IN_VECTOR {
                                for k in 0..R {
                                    v[k] = $in_vector(v[k]);
                                }
                            }
                            across(&mut v);
                            for k in 0..R {
                                $store(q.add(k * h), v[k]);
                            }
                            i += $lanes;
                        }
                        base += R * h;
                    }
                }

                #[target_feature(enable = $features)]
                unsafe fn pass_of_radix<const IN_VECTOR: bool>(
                    log_radix: u32,
                    p: *mut $t,
                    n: usize,
                    h: usize,
                ) {
                    match log_radix {
                        0 => pass::<1, IN_VECTOR>(p, n, h),
                        1 => pass::<2, IN_VECTOR>(p, n, h),
                        2 => pass::<4, IN_VECTOR>(p, n, h),
                        3 => pass::<8, IN_VECTOR>(p, n, h),
                        4 if $max_log_radix >= 4 => pass::<16, IN_VECTOR>(p, n, h),
                        _ => unreachable!(),
                    }
                }

                /// Stages `h, 2h, …, R·h/2` (in rows), in place, of the `rows × width`
                /// entries at `p` whose rows are `stride` apart.
                #[inline]
                #[target_feature(enable = $features)]
                unsafe fn column_pass<const R: usize>(
                    p: *mut $t,
                    stride: usize,
                    rows: usize,
                    width: usize,
                    h: usize,
                ) {
                    let mut base = 0;
                    while base < rows {
                        for i in base..base + h {
                            let row = p.add(i * stride);
                            let mut c = 0;
                            while c < width {
                                let mut v: [$v; R] = [$zero(); R];
                                for k in 0..R {
                                    v[k] = $load(row.add(k * h * stride + c));
                                }
                                across(&mut v);
                                for k in 0..R {
                                    $store(row.add(k * h * stride + c), v[k]);
                                }
                                c += $lanes;
                            }
                        }
                        base += R * h;
                    }
                }

                #[target_feature(enable = $features)]
                unsafe fn column_pass_of_radix(
                    log_radix: u32,
                    p: *mut $t,
                    stride: usize,
                    rows: usize,
                    width: usize,
                    h: usize,
                ) {
                    match log_radix {
                        1 => column_pass::<2>(p, stride, rows, width, h),
                        2 => column_pass::<4>(p, stride, rows, width, h),
                        3 => column_pass::<8>(p, stride, rows, width, h),
                        _ => unreachable!(),
                    }
                }

                /// Length-`rows` transforms down `columns` of the `rows × stride` matrix
                /// at `base`, in place: passes of radix ≤ 8, each streaming along the rows
                /// of the column range. Radix 8 because rows a power-of-two stride apart
                /// share one L1 set, which has 8 ways: with 16 rows in registers the stores
                /// miss L1 (measured: 1.5× slower than radix 8 at 2^16, and copying panels
                /// to a scratch buffer was slower still). `false` (nothing done) unless the
                /// columns are whole vectors.
                ///
                /// # Safety
                /// The CPU must support the target features; the caller owns `columns` of
                /// every row exclusively.
                #[target_feature(enable = $features)]
                pub unsafe fn columns(
                    base: *mut $t,
                    rows: usize,
                    stride: usize,
                    columns: std::ops::Range<usize>,
                ) -> bool {
                    let lanes: usize = $lanes;
                    if rows < 2 || columns.start % lanes != 0 || columns.end % lanes != 0 {
                        return rows < 2;
                    }
                    let stages = rows.trailing_zeros();
                    let passes = stages.div_ceil(3);
                    let region = base.add(columns.start);
                    let width = columns.end - columns.start;
                    let mut h = 1;
                    for k in 0..passes {
                        let log_radix = stages / passes + u32::from(k < stages % passes);
                        column_pass_of_radix(log_radix, region, stride, rows, width, h);
                        h <<= log_radix;
                    }
                    true
                }

                /// Stages `first, 2·first, …, n/2` of `x`, or `false` (nothing done) for the
                /// shapes it does not handle: fewer than two vectors, or `first` neither 1
                /// nor a multiple of a vector.
                ///
                /// # Safety
                /// The CPU must support the target features.
                #[target_feature(enable = $features)]
                pub unsafe fn stages(x: &mut [$t], first: usize) -> bool {
                    let n = x.len();
                    let lanes: usize = $lanes;
                    debug_assert!(n.is_power_of_two() && first.is_power_of_two());
                    let in_vector = first == 1;
                    if n < 2 * lanes || !(in_vector || first % lanes == 0) || first >= n {
                        return first >= n;
                    }
                    let mut h = if in_vector { lanes } else { first };
                    // Stages left across vectors, split into passes of (nearly) equal radix.
                    let across = (n / h).trailing_zeros();
                    let passes = across.div_ceil($max_log_radix).max(1);
                    let p = x.as_mut_ptr();
                    for k in 0..passes {
                        let log_radix = across / passes + u32::from(k < across % passes);
                        if k == 0 && in_vector {
                            pass_of_radix::<true>(log_radix, p, n, h);
                        } else {
                            pass_of_radix::<false>(log_radix, p, n, h);
                        }
                        h <<= log_radix;
                    }
                    true
                }
            }
        };
    }

    /// Stages 1, 2, 4 inside an 8-lane vector.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn in_vector_512d(v: __m512d) -> __m512d {
        let s = _mm512_permute_pd::<0x55>(v);
        let v = _mm512_mask_sub_pd(_mm512_add_pd(v, s), 0xAA, s, v);
        let s = _mm512_permutex_pd::<0x4E>(v);
        let v = _mm512_mask_sub_pd(_mm512_add_pd(v, s), 0xCC, s, v);
        let s = _mm512_shuffle_f64x2::<0x4E>(v, v);
        _mm512_mask_sub_pd(_mm512_add_pd(v, s), 0xF0, s, v)
    }

    /// Stages 1, 2, 4, 8 inside a 16-lane vector.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn in_vector_512s(v: __m512) -> __m512 {
        let s = _mm512_permute_ps::<0xB1>(v);
        let v = _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xAAAA, s, v);
        let s = _mm512_permute_ps::<0x4E>(v);
        let v = _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xCCCC, s, v);
        let s = _mm512_shuffle_f32x4::<0xB1>(v, v);
        let v = _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xF0F0, s, v);
        let s = _mm512_shuffle_f32x4::<0x4E>(v, v);
        _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xFF00, s, v)
    }

    /// Stages 1, 2 inside a 4-lane vector.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn in_vector_256d(v: __m256d) -> __m256d {
        let s = _mm256_permute_pd::<0b0101>(v);
        let v = _mm256_blend_pd::<0b1010>(_mm256_add_pd(v, s), _mm256_sub_pd(s, v));
        let s = _mm256_permute2f128_pd::<0x01>(v, v);
        _mm256_blend_pd::<0b1100>(_mm256_add_pd(v, s), _mm256_sub_pd(s, v))
    }

    /// Stages 1, 2, 4 inside an 8-lane vector.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn in_vector_256s(v: __m256) -> __m256 {
        let s = _mm256_permute_ps::<0xB1>(v);
        let v = _mm256_blend_ps::<0xAA>(_mm256_add_ps(v, s), _mm256_sub_ps(s, v));
        let s = _mm256_permute_ps::<0x4E>(v);
        let v = _mm256_blend_ps::<0xCC>(_mm256_add_ps(v, s), _mm256_sub_ps(s, v));
        let s = _mm256_permute2f128_ps::<0x01>(v, v);
        _mm256_blend_ps::<0xF0>(_mm256_add_ps(v, s), _mm256_sub_ps(s, v))
    }

    /// Stages 1, 2, 4 inside an 8-lane vector of i64 (wrapping, like `+` in release builds).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn in_vector_512i(v: __m512i) -> __m512i {
        let s = _mm512_permutex_epi64::<0xB1>(v);
        let v = _mm512_mask_sub_epi64(_mm512_add_epi64(v, s), 0xAA, s, v);
        let s = _mm512_permutex_epi64::<0x4E>(v);
        let v = _mm512_mask_sub_epi64(_mm512_add_epi64(v, s), 0xCC, s, v);
        let s = _mm512_shuffle_i64x2::<0x4E>(v, v);
        _mm512_mask_sub_epi64(_mm512_add_epi64(v, s), 0xF0, s, v)
    }

    /// Stages 1, 2 inside a 4-lane vector of i64.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn in_vector_256i(v: __m256i) -> __m256i {
        let s = _mm256_shuffle_epi32::<0x4E>(v);
        let v = _mm256_blend_epi32::<0xCC>(_mm256_add_epi64(v, s), _mm256_sub_epi64(s, v));
        let s = _mm256_permute2x128_si256::<0x01>(v, v);
        _mm256_blend_epi32::<0xF0>(_mm256_add_epi64(v, s), _mm256_sub_epi64(s, v))
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_512i(p: *const i64) -> __m512i {
        _mm512_loadu_si512(p.cast())
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_512i(p: *mut i64, v: __m512i) {
        _mm512_storeu_si512(p.cast(), v)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_256i(p: *const i64) -> __m256i {
        _mm256_loadu_si256(p.cast())
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_256i(p: *mut i64, v: __m256i) {
        _mm256_storeu_si256(p.cast(), v)
    }

    // AVX-512 has 32 vector registers (radix 16 fits), AVX2 16 (radix 8).
    stage_kernels!(
        avx512_f64,
        "avx512f",
        f64,
        __m512d,
        8,
        4,
        _mm512_setzero_pd,
        _mm512_loadu_pd,
        _mm512_storeu_pd,
        _mm512_add_pd,
        _mm512_sub_pd,
        in_vector_512d
    );
    stage_kernels!(
        avx512_f32,
        "avx512f",
        f32,
        __m512,
        16,
        4,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_add_ps,
        _mm512_sub_ps,
        in_vector_512s
    );
    stage_kernels!(
        avx2_f64,
        "avx2",
        f64,
        __m256d,
        4,
        3,
        _mm256_setzero_pd,
        _mm256_loadu_pd,
        _mm256_storeu_pd,
        _mm256_add_pd,
        _mm256_sub_pd,
        in_vector_256d
    );
    stage_kernels!(
        avx2_f32,
        "avx2",
        f32,
        __m256,
        8,
        3,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_add_ps,
        _mm256_sub_ps,
        in_vector_256s
    );
    stage_kernels!(
        avx512_i64,
        "avx512f",
        i64,
        __m512i,
        8,
        4,
        _mm512_setzero_si512,
        load_512i,
        store_512i,
        _mm512_add_epi64,
        _mm512_sub_epi64,
        in_vector_512i
    );
    stage_kernels!(
        avx2_i64,
        "avx2",
        i64,
        __m256i,
        4,
        3,
        _mm256_setzero_si256,
        load_256i,
        store_256i,
        _mm256_add_epi64,
        _mm256_sub_epi64,
        in_vector_256i
    );
}

/// A raw pointer that may cross threads; each task touches a disjoint set of elements.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct SendPtr<T>(*mut T);
impl<T> SendPtr<T> {
    /// Wrap a pointer whose users write disjoint ranges from several threads.
    pub fn new(p: *mut T) -> Self {
        Self(p)
    }
    pub fn get(&self) -> *mut T {
        self.0
    }
}
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// `x ← H·x` (unnormalized, Sylvester order). Panics unless `x.len()` is a power of two;
/// callers validate lengths first (see [`check_power_of_two`]).
pub fn fwht_in_place<T: Butterfly>(x: &mut [T]) {
    crate::interrupt::uninterrupted(fwht_in_place_checked(x, &crate::interrupt::never));
}

/// Stages `stride, 2·stride, …, n/2` of `x` viewed as `n/stride` rows of `stride` entries
/// (length-`n/stride` transforms down its columns), in column tasks of about
/// [`COLUMN_TASK`] entries, on rayon's pool when `parallel`.
fn column_pass<T, C>(
    x: &mut [T],
    stride: usize,
    parallel: bool,
    check: &C,
    kernel: Kernel,
) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    column_pass_with(x, stride, parallel, false, check, kernel)
}

/// [`column_pass`]; with `copying`, every panel goes through a contiguous scratch buffer
/// (`transform_columns`) whatever the kernel: the outer pass of a three-pass transform,
/// whose rows lie megabytes apart (in place, each row of a task would be a TLB miss and
/// share its cache sets with every other row).
fn column_pass_with<T, C>(
    x: &mut [T],
    stride: usize,
    parallel: bool,
    copying: bool,
    check: &C,
    kernel: Kernel,
) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    let rows = x.len() / stride;
    // Copied panels are whole tasks of up to COPY_PANEL_BYTES (several cache lines per row).
    let task_len = if copying {
        COPY_PANEL_BYTES / std::mem::size_of::<T>()
    } else {
        COLUMN_TASK
    };
    let width = (task_len / rows).clamp(PANEL.min(stride), stride);
    let base = SendPtr(x.as_mut_ptr());
    let task = |scratch: &mut Vec<T>, t: usize| {
        check()?;
        if copying {
            let (first, last) = (t * width, (t + 1) * width);
            transform_columns(base, rows, stride, first, last, width, scratch, kernel);
            return Ok(());
        }
        T::columns(
            base,
            rows,
            stride,
            t * width..(t + 1) * width,
            scratch,
            kernel,
        );
        Ok(())
    };
    if parallel {
        (0..stride / width)
            .into_par_iter()
            .try_for_each_init(Vec::new, task)
    } else {
        let mut scratch = Vec::new();
        (0..stride / width).try_for_each(|t| task(&mut scratch, t))
    }
}

/// [`fwht_in_place`], calling `check` between tasks (each well under a millisecond of
/// work) and stopping with its error; `x` is then left partly transformed.
pub fn fwht_in_place_checked<T, C>(x: &mut [T], check: &C) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    fwht_with_kernel(x, check, Kernel::best())
}

/// [`fwht_in_place_checked`] with the in-cache stages run by `kernel` (one of
/// [`Kernel::is_supported`]); every kernel gives bit-identical results.
pub fn fwht_with_kernel<T, C>(x: &mut [T], check: &C, kernel: Kernel) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    assert!(
        kernel.is_supported(),
        "kernel {kernel:?} is not supported by this CPU"
    );
    let n = x.len();
    assert!(n.is_power_of_two(), "fwht length {n} is not a power of two");
    let block = block_len::<T>();
    if n <= block {
        transform_blocks(x, n, kernel);
        return Ok(());
    }
    if std::mem::size_of_val(x) >= THREE_PASS_BYTES {
        return three_pass(x, check, kernel, &|_| true);
    }
    let parallel = std::mem::size_of_val(x) >= PARALLEL_BYTES;
    if parallel {
        x.par_chunks_mut(BLOCKS_PER_TASK * block)
            .try_for_each(|blocks| {
                check()?;
                transform_blocks(blocks, block, kernel);
                Ok(())
            })?;
    } else {
        check()?;
        transform_blocks(x, block, kernel);
    }
    column_pass(x, block, parallel, check, kernel)
}

/// Entries of the blocks the transform's first pass handles in cache (32 KiB of `T`): the
/// unit of [`fwht_skipping_zero_blocks`].
pub fn cache_block_len<T>() -> usize {
    block_len::<T>()
}

/// [`fwht_in_place_checked`] for an `x` whose every block `b` (entries `b·B … (b+1)·B − 1`,
/// `B =` [`cache_block_len`]) with `!nonzero(b)` holds only `+0.0` (or integer zeros): those
/// blocks skip the in-cache pass, whose result on them is zeros anyway, so a sparse input
/// (a few thousand entries of a long vector) crosses memory about once instead of twice.
/// The remaining additions are those of the full transform in the same order: same bits.
pub fn fwht_skipping_zero_blocks<T, C>(
    x: &mut [T],
    check: &C,
    nonzero: &(dyn Fn(usize) -> bool + Sync),
) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    let kernel = Kernel::best();
    let n = x.len();
    assert!(n.is_power_of_two(), "fwht length {n} is not a power of two");
    let block = block_len::<T>();
    if n <= block || std::mem::size_of_val(x) < PARALLEL_BYTES {
        return fwht_with_kernel(x, check, kernel);
    }
    if std::mem::size_of_val(x) >= THREE_PASS_BYTES {
        return three_pass(x, check, kernel, nonzero);
    }
    x.par_chunks_mut(BLOCKS_PER_TASK * block)
        .enumerate()
        .try_for_each(|(task, blocks)| {
            check()?;
            for (i, b) in blocks.chunks_exact_mut(block).enumerate() {
                if nonzero(task * BLOCKS_PER_TASK + i) {
                    T::stages(b, 1, kernel);
                }
            }
            Ok(())
        })?;
    column_pass(x, block, true, check, kernel)
}

/// From this many bytes on, the transform takes three passes over memory instead of two.
const THREE_PASS_BYTES: usize = 64 << 20;
/// Bytes of a panel of the three-pass transform's outer pass (L2-resident).
const COPY_PANEL_BYTES: usize = 128 << 10;
/// Bytes of a super-block of the three-pass transform (L2-resident).
const SUPER_BLOCK_BYTES: usize = 1 << 20;

/// The transform of a long vector in three passes: each super-block of
/// [`SUPER_BLOCK_BYTES`] (blocks in cache, then its columns, as a mid-size transform)
/// as one task, then the length-`n/S` transforms across super-blocks through a contiguous
/// scratch buffer. In two passes the columns of a vector of hundreds of megabytes are
/// thousands of rows 32 KiB apart: a TLB miss per row and cache sets shared by every row
/// (measured: 4–9× the time of the block pass at 2^27 f32). Stages still run
/// `h = 1, 2, …, n/2` in turn: same bits. Blocks with `!nonzero(b)` are all zeros and skip
/// the in-cache pass.
fn three_pass<T, C>(
    x: &mut [T],
    check: &C,
    kernel: Kernel,
    nonzero: &(dyn Fn(usize) -> bool + Sync),
) -> crate::error::Result<()>
where
    T: Butterfly,
    C: crate::interrupt::Check,
{
    let block = block_len::<T>();
    let super_len = (SUPER_BLOCK_BYTES / std::mem::size_of::<T>()).min(x.len());
    let per = super_len / block;
    x.par_chunks_mut(super_len)
        .enumerate()
        .try_for_each(|(s, chunk)| {
            check()?;
            for (i, b) in chunk.chunks_exact_mut(block).enumerate() {
                if nonzero(s * per + i) {
                    T::stages(b, 1, kernel);
                }
            }
            column_pass(chunk, block, false, check, kernel)
        })?;
    if super_len == x.len() {
        return Ok(());
    }
    column_pass_with(x, super_len, true, true, check, kernel)
}

/// Whether [`fwht_visiting_panels`] applies to a vector of `n` entries of `T` (the sizes
/// that the public transform takes in three passes).
pub fn visits_panels<T>(n: usize) -> bool {
    n.is_power_of_two()
        && n * std::mem::size_of::<T>() >= THREE_PASS_BYTES
        && n > SUPER_BLOCK_BYTES / std::mem::size_of::<T>()
}

/// The transform of a vector given super-block by super-block, whose result is read panel by
/// panel and never stored: the three-pass transform (`three_pass`) of the vector `v` that
/// `fill` describes, where `fill(first, chunk)` writes `v[first … first + chunk.len()]`
/// into `chunk` (whose previous contents are garbage), and `nonzero(b)` is false only for
/// blocks of [`cache_block_len`] entries that `fill` leaves all `+0.0` (they skip the
/// in-cache pass). The outer pass copies each panel into a scratch buffer, transforms it
/// there and hands it to `visit(panel, rows, width, column)`: row `r` of the panel
/// (entries `r·width … (r+1)·width`) holds outputs `r·S + column … r·S + column + width`,
/// `S = n / rows`, so the panel lists its outputs in increasing index order. The panel is
/// not copied back: `x` (length `n`, see [`visits_panels`]) is a work buffer whose contents
/// are garbage before and after. Same stages in the same order as [`fwht_in_place`]: the
/// same bits. One pass writes the vector and one reads it, against four passes (and a
/// separate pass to read the result) for the in-place transform.
pub fn fwht_visiting_panels<T, C, R>(
    x: &mut [T],
    fill: &(dyn Fn(usize, &mut [T]) + Sync),
    nonzero: &(dyn Fn(usize) -> bool + Sync),
    check: &C,
    visit: &(dyn Fn(&[T], usize, usize, usize) -> R + Sync),
) -> crate::error::Result<Vec<R>>
where
    T: Butterfly,
    C: crate::interrupt::Check,
    R: Send,
{
    assert!(
        visits_panels::<T>(x.len()),
        "fwht_visiting_panels: length {}",
        x.len()
    );
    let kernel = Kernel::best();
    let block = block_len::<T>();
    let stride = SUPER_BLOCK_BYTES / std::mem::size_of::<T>();
    let per = stride / block;
    x.par_chunks_mut(stride)
        .enumerate()
        .try_for_each(|(s, chunk)| {
            check()?;
            fill(s * stride, chunk);
            for (i, b) in chunk.chunks_exact_mut(block).enumerate() {
                if nonzero(s * per + i) {
                    T::stages(b, 1, kernel);
                }
            }
            column_pass(chunk, block, false, check, kernel)
        })?;
    let rows = x.len() / stride;
    let width =
        (VISIT_PANEL_BYTES / std::mem::size_of::<T>() / rows).clamp(PANEL.min(stride), stride);
    let x: &[T] = x;
    (0..stride / width)
        .into_par_iter()
        .map_init(Vec::new, |scratch: &mut Vec<T>, t| {
            check()?;
            let column = t * width;
            copy_panel(x, rows, stride, column, width, scratch);
            T::stages(scratch, width, kernel);
            Ok(visit(scratch, rows, width, column))
        })
        .collect()
}

/// Bytes of a panel of [`fwht_visiting_panels`]' outer pass (L2-resident).
const VISIT_PANEL_BYTES: usize = 256 << 10;

multiversion! {
    /// `scratch` ← columns `column … column + width` of the `rows × stride` matrix `x`.
    fn copy_panel<T: Butterfly>(x: &[T], rows: usize, stride: usize, column: usize, width: usize, scratch: &mut Vec<T>) {
        scratch.clear();
        for r in 0..rows {
            let at = r * stride + column;
            scratch.extend_from_slice(&x[at..at + width]);
        }
    }
}

/// The error for a length that is not `2^j`, or `None`.
pub fn check_power_of_two(n: usize) -> Option<crate::error::Error> {
    (!n.is_power_of_two()).then(|| {
        crate::error::Error::Value(format!(
            "the Walsh–Hadamard transform needs a length 2^j (j ≥ 0), got {n}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense_product(x: &[f64]) -> Vec<f64> {
        let n = x.len() as u64;
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|c| sylvester_entry(r, c) as f64 * x[c as usize])
                    .sum()
            })
            .collect()
    }

    fn test_vector(n: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 7919) % 113) as f64 - 56.0).collect()
    }

    #[test]
    fn matches_the_sylvester_matrix_up_to_4096() {
        for j in 0..=12 {
            let n = 1usize << j;
            let x = test_vector(n);
            let mut y = x.clone();
            fwht_in_place(&mut y);
            // Integer-valued inputs: every partial sum is exact in f64.
            assert_eq!(y, dense_product(&x), "n = {n}");
        }
    }

    /// The plain radix-2 transform, stage by stage in increasing `h`: the order of additions
    /// every layout must reproduce exactly.
    fn radix2<T: Butterfly>(x: &mut [T]) {
        let mut h = 1;
        while h < x.len() {
            for pair in x.chunks_exact_mut(2 * h) {
                let (a, b) = pair.split_at_mut(h);
                for i in 0..h {
                    (a[i], b[i]) = (a[i] + b[i], a[i] - b[i]);
                }
            }
            h *= 2;
        }
    }

    /// Non-integer floats in [−1, 1): rounding differs between addition orders.
    fn float_vector(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn every_size_matches_the_integer_transform_and_the_radix2_order() {
        for j in 0..=22 {
            let n = 1usize << j;
            let x = test_vector(n);
            let mut ints: Vec<i64> = x.iter().map(|&v| v as i64).collect();
            let mut floats = x.clone();
            fwht_in_place(&mut floats);
            fwht_in_place(&mut ints);
            assert!(
                floats.iter().zip(&ints).all(|(&f, &i)| f == i as f64),
                "n = {n}"
            );
            // H·H = n·I.
            fwht_in_place(&mut ints);
            assert!(
                ints.iter().zip(&x).all(|(&i, &v)| i == v as i64 * n as i64),
                "n = {n}"
            );
            // Spot-check entries against the definition.
            for r in [0usize, 1, n / 2 + n / 3, n - 1]
                .into_iter()
                .filter(|&r| r < n)
            {
                let direct: f64 = (0..n)
                    .map(|c| sylvester_entry(r as u64, c as u64) as f64 * x[c])
                    .sum();
                assert_eq!(floats[r], direct, "n = {n}, r = {r}");
            }
            // Rounded floats (f64 and f32): bit-identical to the radix-2 order.
            let y = float_vector(n, j as u64);
            let (mut fast, mut plain) = (y.clone(), y.clone());
            fwht_in_place(&mut fast);
            radix2(&mut plain);
            assert!(
                fast.iter()
                    .zip(&plain)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "f64, n = {n}"
            );
            let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
            let (mut fast, mut plain) = (y32.clone(), y32);
            fwht_in_place(&mut fast);
            radix2(&mut plain);
            assert!(
                fast.iter()
                    .zip(&plain)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "f32, n = {n}"
            );
        }
    }

    #[test]
    fn float_results_do_not_depend_on_the_thread_count() {
        // 2^20 and 2^21 run in parallel (≥ 1 MiB); 2^16 on the calling thread.
        for j in [16, 20, 21] {
            let n = 1usize << j;
            let y = float_vector(n, 7 + j as u64);
            let run = |threads| {
                crate::parallel::in_pool(threads, || {
                    let mut a = y.clone();
                    fwht_in_place(&mut a);
                    let mut b: Vec<f32> = y.iter().map(|&v| v as f32).collect();
                    fwht_in_place(&mut b);
                    (a, b)
                })
            };
            let (a1, b1) = run(1);
            for threads in [2, 3] {
                let (a, b) = run(threads);
                assert!(a.iter().zip(&a1).all(|(p, q)| p.to_bits() == q.to_bits()));
                assert!(b.iter().zip(&b1).all(|(p, q)| p.to_bits() == q.to_bits()));
            }
        }
    }

    #[test]
    fn three_passes_give_the_same_bits_as_two() {
        // 2^21 f32 and f64: several super-blocks; the public entry takes three passes from
        // THREE_PASS_BYTES on, so call it directly here.
        let n = 1usize << 21;
        let y = float_vector(n, 31);
        let mut two = y.clone();
        fwht_in_place(&mut two);
        let mut three = y.clone();
        three_pass(
            &mut three,
            &crate::interrupt::never,
            Kernel::best(),
            &|_| true,
        )
        .unwrap();
        assert!(three
            .iter()
            .zip(&two)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
        let mut two = y32.clone();
        fwht_in_place(&mut two);
        let mut three = y32;
        three_pass(
            &mut three,
            &crate::interrupt::never,
            Kernel::Portable,
            &|_| true,
        )
        .unwrap();
        assert!(three
            .iter()
            .zip(&two)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn visiting_panels_gives_the_same_bits() {
        // A sparse f32 input of 2^24 entries (the smallest size visited), given by `fill`
        // into a buffer of garbage; every output is seen once, in index order per panel.
        let n = 1usize << 24;
        assert!(visits_panels::<f32>(n) && !visits_panels::<f32>(n / 2));
        let block = cache_block_len::<f32>();
        let mut entries: Vec<(usize, f32)> = (0..300usize)
            .map(|t| ((t * 2654435761) % n, (t as f32 - 149.5) / 7.0))
            .collect();
        entries.sort_unstable_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        let mut full = vec![0.0f32; n];
        let mut nonzero = vec![false; n / block];
        for &(i, v) in &entries {
            full[i] += v;
            nonzero[i / block] = true;
        }
        fwht_in_place(&mut full);
        let mut x = vec![f32::NAN; n];
        let fill = |first: usize, chunk: &mut [f32]| {
            chunk.fill(0.0);
            let lo = entries.partition_point(|e| e.0 < first);
            let end = first + chunk.len();
            for &(i, v) in entries[lo..].iter().take_while(|e| e.0 < end) {
                chunk[i - first] += v;
            }
        };
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let bad = fwht_visiting_panels(
            &mut x,
            &fill,
            &|b| nonzero[b],
            &crate::interrupt::never,
            &|panel: &[f32], rows, width, column| {
                seen.fetch_add(panel.len(), std::sync::atomic::Ordering::Relaxed);
                let stride = n / rows;
                (0..panel.len())
                    .filter(|&i| {
                        let at = (i / width) * stride + column + i % width;
                        panel[i].to_bits() != full[at].to_bits()
                    })
                    .count()
            },
        )
        .unwrap();
        assert_eq!(bad.iter().sum::<usize>(), 0);
        assert_eq!(seen.into_inner(), n);
    }

    #[test]
    fn skipping_zero_blocks_gives_the_same_bits() {
        // A sparse input large enough for the parallel path; the flags name the blocks with
        // entries, and a flag set on an all-zero block changes nothing either.
        for n in [1usize << 16, 1 << 21] {
            let block = cache_block_len::<f32>();
            let mut x = vec![0.0f32; n];
            let mut nonzero = vec![false; n / block];
            for t in 0..40usize {
                let i = (t * 2654435761) % n;
                x[i] = (t as f32 - 19.5) / 3.0;
                nonzero[i / block] = true;
            }
            nonzero[n / block - 1] = true;
            let mut full = x.clone();
            fwht_in_place(&mut full);
            fwht_skipping_zero_blocks(&mut x, &crate::interrupt::never, &|b| nonzero[b]).unwrap();
            assert!(
                x.iter().zip(&full).all(|(a, b)| a.to_bits() == b.to_bits()),
                "n = {n}"
            );
        }
    }

    #[test]
    fn every_kernel_gives_the_same_bits() {
        let kernels: Vec<Kernel> = [Kernel::Portable, Kernel::Avx2, Kernel::Avx512]
            .into_iter()
            .filter(|k| k.is_supported())
            .collect();
        // Every size (the vector kernels start at two vectors; below they defer to the
        // portable loops), and sizes with a column pass, sequential and parallel.
        for j in 0..=21 {
            let n = 1usize << j;
            let y = float_vector(n, 100 + j as u64);
            let mut plain = y.clone();
            radix2(&mut plain);
            let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
            let mut plain32 = y32.clone();
            radix2(&mut plain32);
            let ints: Vec<i64> = y.iter().map(|&v| (v * 1e12) as i64).collect();
            let mut plain_ints = ints.clone();
            radix2(&mut plain_ints);
            for &kernel in &kernels {
                let mut c = ints.clone();
                fwht_with_kernel(&mut c, &crate::interrupt::never, kernel).unwrap();
                assert_eq!(c, plain_ints, "i64, {kernel:?}, n = {n}");
                let mut a = y.clone();
                fwht_with_kernel(&mut a, &crate::interrupt::never, kernel).unwrap();
                assert!(
                    a.iter()
                        .zip(&plain)
                        .all(|(p, q)| p.to_bits() == q.to_bits()),
                    "f64, {kernel:?}, n = {n}"
                );
                let mut b = y32.clone();
                fwht_with_kernel(&mut b, &crate::interrupt::never, kernel).unwrap();
                assert!(
                    b.iter()
                        .zip(&plain32)
                        .all(|(p, q)| p.to_bits() == q.to_bits()),
                    "f32, {kernel:?}, n = {n}"
                );
            }
        }
        // Signed zeros and infinities take the same path through every kernel.
        let special = [0.0, -0.0, f64::INFINITY, -1.0, 1e308, -1e308, 0.5, -0.0];
        let mut x: Vec<f64> = (0..1 << 13)
            .map(|i| special[i % 8] * (1 + i % 5) as f64)
            .collect();
        x.rotate_left(3);
        let mut plain = x.clone();
        radix2(&mut plain);
        for &kernel in &kernels {
            let mut a = x.clone();
            fwht_with_kernel(&mut a, &crate::interrupt::never, kernel).unwrap();
            assert!(
                a.iter()
                    .zip(&plain)
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())),
                "{kernel:?}"
            );
        }
    }

    #[test]
    fn the_checked_transform_stops_between_tasks() {
        let mut x = test_vector(1 << 20);
        let stop = || Err(crate::error::Error::Interrupted);
        assert!(matches!(
            fwht_in_place_checked(&mut x, &stop),
            Err(crate::error::Error::Interrupted)
        ));
    }

    #[test]
    fn sylvester_entries_follow_the_convention() {
        assert_eq!(sylvester_entry(0, 12345), 1);
        assert_eq!(sylvester_entry(3, 1), -1);
        assert_eq!(sylvester_entry(3, 3), 1);
        assert_eq!(sylvester_entry(5, 7), 1);
        assert_eq!(sylvester_entry(5, 4), -1);
    }

    #[test]
    fn rejects_lengths_that_are_not_powers_of_two() {
        assert!(check_power_of_two(0).is_some());
        assert!(check_power_of_two(12).is_some());
        assert!(check_power_of_two(1).is_none());
    }
}
