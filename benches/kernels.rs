//! Criterion benchmarks of the Rust kernels (no Python involved).
//!
//! Run: `cargo bench --bench kernels` (all), or filter by group name, e.g.
//! `cargo bench --bench kernels -- fwht/` or `cargo bench --bench kernels -- omp/`.
//! Short runs while developing: `-- --warm-up-time 1 --measurement-time 2`.
//!
//! Inputs are deterministic (a SplitMix64 generator, fixed seeds), so runs are comparable
//! across commits. Kernels run on rayon's global pool (all cores unless
//! `RAYON_NUM_THREADS` says otherwise), as they do for users.
//!
//! Group names read `kernel/variant/size`, e.g. `fwht/f64/1048576`, `omp/sign/m500_k10000_s25`,
//! `privacy/verify/k2000_y4000`, `project_hull/outside/d100_j100000`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use ldpdist::hadamard::fwht_in_place;
use ldpdist::hull::project_hull;
use ldpdist::omp::{omp, DenseMatrix};
use ldpdist::privacy::{realized_budgets, verify};
use ldpdist::rng::{key_from_u64, sample_bernoulli, sample_uniform};
use ldpdist::signs::{column_signs, SignKind, SignMatrix};
use ldpdist::simplex::{project_simplex, project_sparse_simplex};

// ----------------------------------------------------------------------------------------
// Deterministic inputs

/// SplitMix64 (Steele, Lea & Flood 2014): a tiny, seedable generator for test inputs.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller; one of the pair is discarded, speed is irrelevant here).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// `n` floats in [-1, 1).
fn uniform_vector(seed: u64, n: usize) -> Vec<f64> {
    let mut g = SplitMix64(seed);
    (0..n).map(|_| 2.0 * g.uniform() - 1.0).collect()
}

/// `n` floats in [0, 1).
fn random_unit_vector(seed: u64, n: usize) -> Vec<f64> {
    let mut g = SplitMix64(seed);
    (0..n).map(|_| g.uniform()).collect()
}

/// Ten entries in [1, 2) at random positions over N(0, (10⁻³)²) noise.
fn few_large_vector(seed: u64, n: usize) -> Vec<f64> {
    let mut g = SplitMix64(seed);
    let mut v: Vec<f64> = (0..n).map(|_| 1e-3 * g.normal()).collect();
    for _ in 0..10 {
        let j = (g.next_u64() % n as u64) as usize;
        v[j] = 1.0 + g.uniform();
    }
    v
}

/// Noisy near-uniform distribution: `1/k + N(0, sigma²)` per entry.
fn noisy_uniform(seed: u64, k: usize, sigma: f64) -> Vec<f64> {
    let mut g = SplitMix64(seed);
    (0..k)
        .map(|_| 1.0 / k as f64 + sigma * g.normal())
        .collect()
}

/// A vector of length k with exactly s non-zeros of magnitude in [0.5, 1.5), random signs.
fn sparse_vector(seed: u64, k: usize, s: usize) -> Vec<f64> {
    let mut g = SplitMix64(seed);
    let mut x = vec![0.0; k];
    let mut placed = 0;
    while placed < s {
        let j = (g.next_u64() % k as u64) as usize;
        if x[j] == 0.0 {
            let magnitude = 0.5 + g.uniform();
            x[j] = if g.next_u64() & 1 == 1 {
                magnitude
            } else {
                -magnitude
            };
            placed += 1;
        }
    }
    x
}

/// Time `routine` on a fresh copy of `source` per iteration; the copy is not timed.
///
/// The FWHT is in place and unnormalized (`H·H = n·I`), so re-transforming the same buffer
/// would overflow to inf/NaN (f64) or wrap (i64) within a few hundred iterations. Copying
/// just before the call also leaves the input warm in cache, as right after it was produced.
fn time_on_fresh_copies<T: Copy>(
    iters: u64,
    source: &[T],
    buffer: &mut [T],
    routine: impl Fn(&mut [T]),
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        buffer.copy_from_slice(source);
        let start = Instant::now();
        routine(black_box(&mut *buffer));
        total += start.elapsed();
    }
    total
}

// ----------------------------------------------------------------------------------------
// Benchmarks

fn bench_fwht(c: &mut Criterion) {
    let mut group = c.benchmark_group("fwht/f64");
    for log_n in [10u32, 16, 20] {
        let n = 1usize << log_n;
        let source = uniform_vector(1, n);
        let mut buffer = source.clone();
        // One "element" = one entry of x; n·log2(n) additions per transform.
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| time_on_fresh_copies(iters, &source, &mut buffer, fwht_in_place))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("fwht/i64");
    let n = 1usize << 20;
    let source: Vec<i64> = {
        let mut g = SplitMix64(2);
        (0..n).map(|_| (g.next_u64() % 1000) as i64).collect()
    };
    let mut buffer = source.clone();
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function(BenchmarkId::from_parameter(n), |b| {
        b.iter_custom(|iters| time_on_fresh_copies(iters, &source, &mut buffer, fwht_in_place))
    });
    group.finish();
}

fn bench_simplex(c: &mut Criterion) {
    let mut group = c.benchmark_group("project_simplex");
    for k in [10_000usize, 1_000_000] {
        let v = noisy_uniform(3, k, 1e-3);
        group.throughput(Throughput::Elements(k as u64));
        group.bench_with_input(BenchmarkId::from_parameter(k), &v, |b, v| {
            b.iter(|| project_simplex(black_box(v)).unwrap())
        });
    }
    // Three input families at k = 10^6 and 10^7: random (uniform [0, 1)),
    // near-uniform with full support (1/k + N(0, (1/k)²): ≈ 82 % of the entries in the support) and a few
    // large entries over small noise. The result's allocation is included.
    group.sample_size(10);
    for k in [1_000_000usize, 10_000_000] {
        group.throughput(Throughput::Elements(k as u64));
        for (family, v) in [
            ("random", random_unit_vector(5, k)),
            ("near_uniform", noisy_uniform(6, k, 1.0 / k as f64)),
            ("few_large", few_large_vector(7, k)),
        ] {
            group.bench_with_input(BenchmarkId::new(family, k), &v, |b, v| {
                b.iter(|| project_simplex(black_box(v)).unwrap())
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("project_sparse_simplex");
    let (k, s) = (1_000_000usize, 50usize);
    let v = noisy_uniform(4, k, 1e-3);
    group.throughput(Throughput::Elements(k as u64));
    group.bench_with_input(
        BenchmarkId::from_parameter(format!("k{k}_s{s}")),
        &v,
        |b, v| b.iter(|| project_sparse_simplex(black_box(v), black_box(s)).unwrap()),
    );
    group.finish();
}

const M: usize = 500;
const K: usize = 10_000;
const S: usize = 25;

fn bench_signs(c: &mut Criterion) {
    let key = key_from_u64(7);
    let size = format!("m{M}_k{K}");

    // Throughput in matrix entries (m·k) for everything that touches the whole matrix.
    let mut group = c.benchmark_group("sign_matrix/new");
    group.throughput(Throughput::Elements((M * K) as u64));
    for (name, kind) in [
        ("rademacher", SignKind::Rademacher),
        ("balanced", SignKind::Balanced(0.5)),
    ] {
        group.bench_function(BenchmarkId::new(name, &size), |b| {
            b.iter(|| SignMatrix::new(black_box(key), M, K, kind).unwrap())
        });
    }
    group.finish();

    let a = SignMatrix::new(key, M, K, SignKind::Rademacher).unwrap();

    let mut group = c.benchmark_group("sign_matrix/rmatvec");
    group.throughput(Throughput::Elements((M * K) as u64));
    let r = uniform_vector(8, M);
    group.bench_function(BenchmarkId::from_parameter(&size), |b| {
        b.iter(|| a.rmatvec(black_box(&r)).unwrap())
    });
    group.finish();

    let mut group = c.benchmark_group("sign_matrix/gram_column");
    group.throughput(Throughput::Elements((M * K) as u64));
    group.bench_function(BenchmarkId::from_parameter(&size), |b| {
        b.iter(|| a.gram_column(black_box(1234)))
    });
    group.finish();

    // Extra: matvec on an s-sparse x (what OMP's callers use to simulate y = A x); only the
    // s non-zero columns are read, so throughput is in touched entries m·s.
    let mut group = c.benchmark_group("sign_matrix/matvec_sparse");
    let x = sparse_vector(9, K, S);
    group.throughput(Throughput::Elements((M * S) as u64));
    group.bench_function(BenchmarkId::from_parameter(format!("{size}_s{S}")), |b| {
        b.iter(|| a.matvec(black_box(&x)).unwrap())
    });
    group.finish();

    // Extra: one column computed alone, as a client does to privatize its value.
    let mut group = c.benchmark_group("sign_column");
    group.throughput(Throughput::Elements(M as u64));
    for (name, kind) in [
        ("rademacher", SignKind::Rademacher),
        ("balanced", SignKind::Balanced(0.5)),
    ] {
        group.bench_function(BenchmarkId::new(name, format!("m{M}")), |b| {
            b.iter(|| column_signs(black_box(&key), M, kind, black_box(4321)).unwrap())
        });
    }
    group.finish();
}

fn bench_omp(c: &mut Criterion) {
    let a = SignMatrix::new(key_from_u64(11), M, K, SignKind::Rademacher).unwrap();
    let x = sparse_vector(12, K, S);
    let mut y = a.matvec(&x).unwrap();
    let mut g = SplitMix64(13);
    y.iter_mut().for_each(|v| *v += 0.01 * g.normal());
    let dense = a.to_dense().unwrap(); // row-major (C order), m·k f64 = 40 MB
    let d = DenseMatrix::new(&dense, M, K, true).unwrap();

    // Sanity: both paths recover the planted support (else the timings mean little).
    let truth: Vec<usize> = (0..K).filter(|&j| x[j] != 0.0).collect();
    for support in [
        omp(&a, &y, S, None).unwrap().support,
        omp(&d, &y, S, None).unwrap().support,
    ] {
        let mut sorted = support;
        sorted.sort_unstable();
        assert_eq!(sorted, truth, "OMP did not recover the planted support");
    }

    let mut group = c.benchmark_group("omp");
    group.sample_size(20);
    let size = format!("m{M}_k{K}_s{S}");
    group.bench_function(BenchmarkId::new("sign", &size), |b| {
        b.iter(|| omp(&a, black_box(&y), S, None).unwrap())
    });
    group.bench_function(BenchmarkId::new("dense_row_major", &size), |b| {
        b.iter(|| omp(&d, black_box(&y), S, None).unwrap())
    });
    group.finish();
}

fn bench_sampling(c: &mut Criterion) {
    let key = key_from_u64(17);
    let size = 1_000_000usize;

    let mut group = c.benchmark_group("sample_uniform");
    group.throughput(Throughput::Elements(size as u64));
    group.bench_function(
        BenchmarkId::from_parameter(format!("n1000_size{size}")),
        |b| b.iter(|| sample_uniform(black_box(&key), 1000, size).unwrap()),
    );
    group.finish();

    // Extra: the other exact sampler.
    let mut group = c.benchmark_group("sample_bernoulli");
    group.throughput(Throughput::Elements(size as u64));
    group.bench_function(
        BenchmarkId::from_parameter(format!("p0.3_size{size}")),
        |b| b.iter(|| sample_bernoulli(black_box(&key), 0.3, size).unwrap()),
    );
    group.finish();
}

/// A random k × n channel: rows of uniform (0, 1] weights, normalized (no zero entry).
fn random_channel(seed: u64, k: usize, n: usize) -> Vec<f64> {
    let mut g = SplitMix64(seed);
    let mut q: Vec<f64> = (0..k * n).map(|_| 1.0 - g.uniform()).collect();
    for row in q.chunks_mut(n) {
        let total: f64 = row.iter().sum();
        row.iter_mut().for_each(|v| *v /= total);
    }
    q
}

fn bench_privacy(c: &mut Criterion) {
    // Target: verify at k = 2000, |Y| = 4000 under 1 s on 2 cores.
    let (k, n) = (2000usize, 4000usize);
    let q = random_channel(19, k, n);
    let mut e = vec![1.0; k * k];
    (0..k).for_each(|x| e[x * k + x] = 0.0);
    let mut group = c.benchmark_group("privacy");
    group.sample_size(10);
    // One "element" = one (ordered pair, output) triple: k·(k−1)·|Y| of them.
    group.throughput(Throughput::Elements((k * (k - 1) * n) as u64));
    let size = format!("k{k}_y{n}");
    group.bench_function(BenchmarkId::new("verify", &size), |b| {
        b.iter(|| verify(black_box(&q), k, n, black_box(&e)).unwrap())
    });
    group.bench_function(BenchmarkId::new("realized_budgets", &size), |b| {
        b.iter(|| realized_budgets(black_box(&q), k, n).unwrap())
    });
    group.finish();
}

/// Target: d = 100, J = 10⁵ to a duality gap of 1e-6 in under 1 s on 2 cores.
/// Columns: Gaussian, scaled to norm ≤ 1 (here all have norm 1: ‖g‖ ≈ 10 in d = 100).
/// Outside: y = the mean of 5 columns + N(0, 0.3²) noise (distance ≈ 2.9 from the hull);
/// inside: y = half a Dirichlet-weighted mix of 50 columns.
fn bench_hull(c: &mut Criterion) {
    let (d, j) = (100usize, 100_000usize);
    let mut g = SplitMix64(23);
    let mut a: Vec<f64> = (0..d * j).map(|_| g.normal()).collect();
    for v in 0..j {
        let norm = (0..d).map(|i| a[i * j + v].powi(2)).sum::<f64>().sqrt();
        let scale = 1.0 / norm.max(1.0);
        (0..d).for_each(|i| a[i * j + v] *= scale);
    }
    let outside: Vec<f64> = (0..d)
        .map(|i| (0..5).map(|v| a[i * j + v]).sum::<f64>() / 5.0 + 0.3 * g.normal())
        .collect();
    let weights: Vec<f64> = (0..50).map(|_| -(1.0 - g.uniform()).ln()).collect();
    let total: f64 = weights.iter().sum();
    let inside: Vec<f64> = (0..d)
        .map(|i| 0.5 * (0..50).map(|v| weights[v] * a[i * j + v]).sum::<f64>() / total)
        .collect();
    let tol = 1e-6;
    let mut group = c.benchmark_group("project_hull");
    group.sample_size(10);
    group.throughput(Throughput::Elements((d * j) as u64));
    let size = format!("d{d}_j{j}");
    for (name, y) in [("outside", &outside), ("inside", &inside)] {
        for symmetric in [true, false] {
            let r = project_hull(&a, d, j, y, symmetric, tol, 10_000).unwrap();
            assert!(
                r.converged,
                "{name} symmetric={symmetric}: {} after {}",
                r.gap, r.iterations
            );
            let variant = if symmetric {
                name.to_string()
            } else {
                format!("{name}_plain")
            };
            group.bench_function(BenchmarkId::new(variant, &size), |b| {
                b.iter(|| project_hull(&a, d, j, black_box(y), symmetric, tol, 10_000).unwrap())
            });
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_hull,
    bench_fwht,
    bench_simplex,
    bench_signs,
    bench_omp,
    bench_sampling,
    bench_privacy
);
criterion_main!(benches);
