//! Runtime CPU-feature dispatch for hot loops.
//!
//! The crate is compiled for the baseline target (so a wheel runs on any x86-64), and each
//! hot kernel is compiled three times: for the baseline, with AVX2+FMA, and with AVX-512
//! (F, VL, DQ, BW), the best one the CPU has being picked at run time. Kernels are plain Rust written so the compiler vectorizes them; the macro only
//! chooses the instruction set. `multiversion!` wraps a function body whose callees are
//! `#[inline(always)]`, so they are compiled with the same features.

/// Define `$name` that runs `$body` with the widest vector instructions the CPU has.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident $(<$($gen:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        #[inline]
        $vis fn $name $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
                unsafe fn with_avx512 $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? $body
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("avx512bw")
                {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    return unsafe { with_avx512 $(::<$($gen),*>)? ($($arg),*) };
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn with_avx2 $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? $body
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    return unsafe { with_avx2 $(::<$($gen),*>)? ($($arg),*) };
                }
            }
            fn baseline $(<$($gen : $bound),*>)? ($($arg : $ty),*) $(-> $ret)? $body
            baseline $(::<$($gen),*>)? ($($arg),*)
        }
    };
}

pub(crate) use multiversion;
