//! ldpdist: distribution estimation from locally differentially private reports.
//!
//! The crate is pure Rust and usable without Python; `bindings` (feature `python`) only
//! translates types and errors for the `ldpdist._core` extension module.
//!
//! Kernels: [`hadamard`] (FWHT), [`simplex`] (projections), [`signs`] (seeded bit-packed ±1
//! matrices), [`omp`] (orthogonal matching pursuit), [`hull`] (Euclidean projection onto
//! the convex hull of a matrix's columns), [`privacy`] (the exact verifier of pairwise
//! privacy budgets), [`linear`] (linear queries: the exact L2 sensitivity, the Gaussian and
//! rejection-sampling protocols), [`rng`] (keys, reproducible parallel streams, exact samplers),
//! [`memory`] (the memory guard and its budget), [`interrupt`] (cooperative cancellation of
//! long loops). Protocols beyond distribution estimation: [`linear`] (linear queries),
//! [`heavy_hitters`] (the server-side kernels of heavy-hitter protocols: PEM's supports, the
//! collision operator of hashed candidates),
//! [`item_hash`] (their public seeded item hash, for many items at once).
//!
//! Mechanisms ([`mechanisms`]): each module holds one mechanism's client-side sampler and
//! its server-side aggregation and unbiased estimator. Index mechanisms (a report is one
//! integer) share the generic [`mechanisms::privatize`] and [`mechanisms::aggregate`];
//! [`mechanisms::Estimator`] is the server-side interface of every mechanism.
//!
//! # Example
//!
//! A fast Walsh–Hadamard transform, then Hadamard response end to end in pure Rust: each
//! user's value privatized into one report, the reports counted, and the distribution
//! estimated.
//!
//! ```
//! use ldpdist::hadamard::fwht_in_place;
//! use ldpdist::mechanisms::hadamard_response::HadamardResponse;
//! use ldpdist::mechanisms::{aggregate, privatize, Estimator};
//! use ldpdist::rng::key_from_u64;
//! use ldpdist::simplex::project_simplex;
//!
//! # fn main() -> ldpdist::error::Result<()> {
//! // x ← H·x, H the unnormalized Sylvester-order Hadamard matrix (H·H = n·I).
//! let mut x = vec![1.0_f64, 2.0, 3.0, 4.0];
//! fwht_in_place(&mut x);
//! assert_eq!(x, [10.0, -2.0, -4.0, 0.0]);
//!
//! // 100 000 users with values in [0, 8): 0 with probability 0.4, 1 with 0.2,
//! // 2, 3, 4 and 5 with 0.1 each, 6 and 7 never.
//! let k = 8;
//! let truth = [0.4, 0.2, 0.1, 0.1, 0.1, 0.1, 0.0, 0.0];
//! let values: Vec<u32> = (0..100_000)
//!     .map(|u| [0, 0, 0, 0, 1, 1, 2, 3, 4, 5][u % 10])
//!     .collect();
//!
//! // Client side: one ε-LDP report per user (ε = 2), reproducible from the key.
//! let hr = HadamardResponse::new(k, 2.0)?;
//! let mut reports = vec![0u32; values.len()];
//! privatize(&hr, &key_from_u64(1), &values, &mut reports)?;
//!
//! // Server side: the histogram of the reports, the unbiased estimate, and its Euclidean
//! // projection onto the probability simplex.
//! let mut counts = vec![0u64; hr.output_size_usize()];
//! let tally = aggregate(&reports, &mut counts, false)?;
//! let unbiased = hr.checked_estimate_raw(&counts, tally.valid)?;
//! let estimate = project_simplex(&unbiased)?;
//! let l1: f64 = estimate.iter().zip(truth).map(|(e, t)| (e - t).abs()).sum();
//! assert!(l1 < 0.1, "L1 error {l1}");
//! # Ok(())
//! # }
//! ```
//!
//! # Features and platforms
//!
//! * `python` (off by default): the PyO3 bindings of the `ldpdist._core` extension module,
//!   turned on by maturin for the Python package. Without it the crate links and runs with
//!   no Python interpreter.
//! * The crate is compiled for the baseline target (any x86-64 CPU); on x86-64 the hot
//!   kernels also have AVX2 and AVX-512 versions, chosen at run time from the CPU's
//!   features (see [`hadamard::Kernel`]), so no `target-cpu` flag is needed or wanted.
//! * Minimum Rust version: 1.89 (the AVX-512 target features and intrinsics).

pub mod error;
pub mod finite;
pub mod hadamard;
pub mod heavy_hitters;
pub mod hull;
pub mod interrupt;
pub mod item_hash;
pub mod linear;
pub mod mechanisms;
pub mod memory;
pub mod omp;
mod parallel;
pub mod privacy;
pub mod rng;
pub mod signs;
mod simd;
pub mod simplex;
#[cfg(test)]
mod test_inputs;

#[cfg(feature = "python")]
mod bindings;
