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
//! long loops). Protocols beyond distribution estimation: [`linear`] (linear queries).

pub mod error;
pub mod finite;
pub mod hadamard;
pub mod hull;
pub mod interrupt;
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

#[cfg(feature = "python")]
mod bindings;
