//! Criterion benchmarks of the mechanisms (no Python involved): client-side privatization
//! throughput and server-side aggregation + decoding.
//!
//! Run: `cargo bench --bench mechanisms` (filter with e.g. `-- privatize/`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use ldpdist::linear::adaptive::{self as adaptive_queries, ReplyChannel};
use ldpdist::mechanisms::asymmetric_binary::AsymmetricBinaryResponse;
use ldpdist::mechanisms::block_hadamard::BlockHadamardResponse;
use ldpdist::mechanisms::compressive::{CompressivePrivatization, LinearModel, MatrixKind, Regime};
use ldpdist::mechanisms::hadamard_compressive::HadamardCompressivePrivatization;
use ldpdist::mechanisms::hadamard_response::HadamardResponse;
use ldpdist::mechanisms::high_low_hadamard::HighLowHadamardResponse;
use ldpdist::mechanisms::one_bit_hadamard::OneBitHadamardResponse;
use ldpdist::mechanisms::public_coin_hashing::{PublicCoinHashing, Users};
use ldpdist::mechanisms::randomized_response::RandomizedResponse;
use ldpdist::mechanisms::subset_selection::SubsetSelection;
use ldpdist::mechanisms::two_stage_rappor::{Stages, TwoStageRappor};
use ldpdist::mechanisms::unary_encoding::{BernoulliLanes, OptimizedUnaryEncoding, Rappor};
use ldpdist::mechanisms::{
    aggregate, aggregate_bits, privatize, privatize_bits, row_bytes, IndexMechanism,
};
use ldpdist::rng::{key_from_u64, sample_uniform};

const K: u64 = 10_000;

fn values(n: usize) -> Vec<u32> {
    sample_uniform(&key_from_u64(1), K, n)
        .unwrap()
        .into_iter()
        .map(|v| v as u32)
        .collect()
}

fn bench_privatize(c: &mut Criterion) {
    let n = 1_000_000;
    let xs = values(n);
    let key = key_from_u64(2);
    let mut group = c.benchmark_group("privatize");
    group.throughput(Throughput::Elements(n as u64));
    let rr = RandomizedResponse::new(K, 1.0).unwrap();
    let mut out16 = vec![0u16; n];
    group.bench_function("rr/k10000_eps1", |b| {
        b.iter(|| privatize(&rr, &key, black_box(&xs), &mut out16).unwrap())
    });
    for eps in [0.5, 3.0] {
        let hr = HadamardResponse::new(K, eps).unwrap();
        group.bench_function(format!("hr/k10000_eps{eps}"), |b| {
            b.iter(|| privatize(&hr, &key, black_box(&xs), &mut out16).unwrap())
        });
    }
    // Compressive privatization with its stored balanced matrix (built before timing).
    let cp = CompressivePrivatization::new(
        K,
        0.5,
        500,
        key_from_u64(4),
        MatrixKind::Balanced,
        Regime::Auto,
        false,
    )
    .unwrap();
    cp.prepare(n).unwrap();
    group.bench_function("cp/k10000_m500_eps0.5", |b| {
        b.iter(|| privatize(&cp, &key, black_box(&xs), &mut out16).unwrap())
    });
    // The asymmetric binary mechanism (k = 2): one exact Bernoulli flip per user.
    let bits: Vec<u32> = xs.iter().map(|&x| x & 1).collect();
    let mut out8 = vec![0u8; n];
    for (e01, e10) in [(0.5, 2.0), (f64::INFINITY, 1.0)] {
        let abr = AsymmetricBinaryResponse::new(e01, e10).unwrap();
        group.bench_function(format!("abr/eps01_{e01}_eps10_{e10}"), |b| {
            b.iter(|| privatize(&abr, &key, black_box(&bits), &mut out8).unwrap())
        });
    }
    group.finish();
    // Bit-vector mechanisms: 10^5 users × 1250-byte rows (125 MB of reports per call).
    let n = 100_000;
    let mut group = c.benchmark_group("privatize");
    group.throughput(Throughput::Elements(n as u64));
    let xs = &xs[..n];
    let mut rows = vec![0u8; n * row_bytes(K)];
    let rappor = Rappor::new(K, 1.0).unwrap();
    group.bench_function("rappor/k10000_eps1_n1e5", |b| {
        b.iter(|| privatize_bits(&rappor, &key, black_box(xs), &mut rows).unwrap())
    });
    let oue = OptimizedUnaryEncoding::new(K, 1.0).unwrap();
    group.bench_function("oue/k10000_eps1_n1e5", |b| {
        b.iter(|| privatize_bits(&oue, &key, black_box(xs), &mut rows).unwrap())
    });
    group.finish();
    // The Bernoulli(b) noise bits alone, one thread: 64 lanes per word until all are decided
    // (`word`, the original sampler) against `fill` (whole words for two digits, a
    // reservoir for the rest). Element: output bit.
    let mut group = c.benchmark_group("bernoulli_lanes");
    let mut buffer = vec![0u8; 1 << 20];
    group.throughput(Throughput::Elements(8 << 20));
    for (name, p) in [
        ("rappor_eps1", rappor.probabilities().1),
        ("oue_eps1", oue.probabilities().1),
    ] {
        let lanes = BernoulliLanes::new(p).unwrap();
        let mut rng = ldpdist::rng::stream(&key, 0);
        group.bench_function(format!("word/{name}"), |b| {
            b.iter(|| {
                for bytes in buffer.chunks_exact_mut(8) {
                    bytes.copy_from_slice(&lanes.word(&mut rng).to_le_bytes());
                }
            })
        });
        group.bench_function(format!("fill/{name}"), |b| {
            b.iter(|| lanes.fill(&mut rng, black_box(&mut buffer)))
        });
    }
    group.finish();
}

fn bench_server(c: &mut Criterion) {
    let n = 10_000_000;
    let hr = HadamardResponse::new(K, 0.5).unwrap();
    let mut reports = vec![0u16; n];
    privatize(&hr, &key_from_u64(3), &values(n), &mut reports).unwrap();
    let mut group = c.benchmark_group("server");
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("hr/aggregate_and_decode/k10000_n1e7", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; hr.output_size_usize()];
            aggregate(black_box(&reports), &mut counts, false).unwrap();
            black_box(hr.estimate_raw(&counts, n as u64))
        })
    });
    let true_counts = vec![100u64; K as usize];
    group.throughput(Throughput::Elements(K * 100));
    group.bench_function("hr/simulate/k10000_n1e6", |b| {
        b.iter(|| {
            hr.simulate(&key_from_u64(4), black_box(&true_counts))
                .unwrap()
        })
    });
    group.finish();
}

/// Public-coin hashing at the paper's communication experiment (k = 5000, n = 4·10^5, ℓ = 3):
/// privatization (one ChaCha20 stream per user) and the server's n·k = 2·10^9 hash
/// evaluations (aggregation) plus the two-stage estimate; simulate at the same size.
fn bench_public_coin_hashing(c: &mut Criterion) {
    let (k, n, bits) = (5000u64, 400_000usize, 3u32);
    let pch = PublicCoinHashing::new(k, bits, key_from_u64(7)).unwrap();
    let xs: Vec<u32> = sample_uniform(&key_from_u64(1), 50, n)
        .unwrap()
        .into_iter()
        .map(|v| v as u32)
        .collect();
    let mut reports = vec![0u64; n];
    pch.privatize(&xs, Users::From(0), &mut reports).unwrap();
    let mut group = c.benchmark_group("pch");
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("privatize/k5000_l3_n4e5", |b| {
        let mut out = vec![0u64; n];
        b.iter(|| {
            pch.privatize(black_box(&xs), Users::From(0), &mut out)
                .unwrap()
        })
    });
    group.throughput(Throughput::Elements(n as u64 * k));
    group.bench_function("aggregate_and_two_stage/k5000_l3_n4e5", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; 2 * k as usize + 1];
            pch.aggregate(black_box(&reports), &mut counts).unwrap();
            black_box(pch.two_stage_estimate(&counts, n as u64, 50).unwrap())
        })
    });
    let true_counts = vec![80u64; k as usize];
    group.throughput(Throughput::Elements(k));
    group.bench_function("simulate/k5000_n4e5", |b| {
        b.iter(|| {
            pch.simulate(&key_from_u64(4), black_box(&true_counts))
                .unwrap()
        })
    });
    group.finish();
}

/// Two-stage RAPPOR at the sparse-estimation paper's k = 5000, ε = 0.9, beside RAPPOR (the
/// same private bits plus a stage bit; aggregation keyed by the stage bit in one pass).
fn bench_two_stage_rappor(c: &mut Criterion) {
    let k = 5000u64;
    let eps = 0.9;
    let tsr = TwoStageRappor::new(k, eps).unwrap();
    let rappor = Rappor::new(k, eps).unwrap();
    let xs: Vec<u32> = sample_uniform(&key_from_u64(1), k, 1_000_000)
        .unwrap()
        .into_iter()
        .map(|v| v as u32)
        .collect();
    let key = key_from_u64(2);
    let mut group = c.benchmark_group("two_stage_rappor");
    let n = 100_000;
    group.throughput(Throughput::Elements(n as u64));
    let mut rows = vec![0u8; n * row_bytes(k + 1)];
    group.bench_function("privatize/k5000_eps0.9_n1e5", |b| {
        b.iter(|| {
            let stages = Stages::Alternating { first_user: 0 };
            tsr.privatize(&key, black_box(&xs[..n]), stages, &mut rows)
                .unwrap()
        })
    });
    let mut plain = vec![0u8; n * row_bytes(k)];
    group.bench_function("rappor_privatize/k5000_eps0.9_n1e5", |b| {
        b.iter(|| privatize_bits(&rappor, &key, black_box(&xs[..n]), &mut plain).unwrap())
    });
    drop((rows, plain));
    let n = xs.len();
    let mut rows = vec![0u8; n * row_bytes(k + 1)];
    tsr.privatize(&key, &xs, Stages::Alternating { first_user: 0 }, &mut rows)
        .unwrap();
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("aggregate/k5000_n1e6", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; 2 * k as usize + 1];
            tsr.aggregate(black_box(&rows), &mut counts, false).unwrap();
            counts
        })
    });
    drop(rows);
    let mut plain = vec![0u8; n * row_bytes(k)];
    privatize_bits(&rappor, &key, &xs, &mut plain).unwrap();
    group.bench_function("rappor_aggregate/k5000_n1e6", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; k as usize];
            aggregate_bits(&rappor, black_box(&plain), &mut counts, false).unwrap();
            counts
        })
    });
    drop(plain);
    // Decoding and simulation: p uniform on 64 values, n = 10^6.
    let mut true_counts = vec![0u64; k as usize];
    true_counts[..64]
        .iter_mut()
        .for_each(|c| *c = 1_000_000 / 64);
    let statistic = tsr.simulate(&key_from_u64(5), &true_counts).unwrap();
    let total: u64 = true_counts.iter().sum();
    group.throughput(Throughput::Elements(k));
    group.bench_function("two_stage_estimate/k5000_s64", |b| {
        b.iter(|| {
            tsr.two_stage_estimate(black_box(&statistic), total, 64)
                .unwrap()
        })
    });
    group.bench_function("simulate/k5000_n1e6", |b| {
        b.iter(|| {
            tsr.simulate(&key_from_u64(6), black_box(&true_counts))
                .unwrap()
        })
    });
    group.finish();
}

/// One-bit Hadamard Response: privatize with round-robin groups (k = 5000: 16-bit reports;
/// k = 2^20: K = 2^21 groups, 32-bit reports), the server at k = 2^20 (aggregation of 10^7
/// reports, then the FWHT decoding), and simulate at the paper's setting (k = 5000,
/// n = 3·10^6, s = 16 and 4096 values equally likely) and at n = 10^12, by the automatic
/// choice and by each algorithm forced.
fn bench_one_bit_hadamard(c: &mut Criterion) {
    let n = 1_000_000;
    let key = key_from_u64(2);
    let mut group = c.benchmark_group("obhr");
    group.throughput(Throughput::Elements(n as u64));
    let small = OneBitHadamardResponse::new(5000, 0.5).unwrap();
    let xs: Vec<u32> = values(n).into_iter().map(|v| v % 5000).collect();
    let mut out16 = vec![0u16; n];
    group.bench_function("privatize/k5000_eps0.5", |b| {
        b.iter(|| {
            small
                .privatize_round_robin(&key, black_box(&xs), 0, &mut out16)
                .unwrap()
        })
    });
    let big_k = 1u64 << 20;
    let big = OneBitHadamardResponse::new(big_k, 0.5).unwrap();
    let wide: Vec<u32> = sample_uniform(&key_from_u64(5), big_k, n)
        .unwrap()
        .into_iter()
        .map(|v| v as u32)
        .collect();
    let mut out32 = vec![0u32; n];
    group.bench_function("privatize/k2^20_eps0.5", |b| {
        b.iter(|| {
            big.privatize_round_robin(&key, black_box(&wide), 0, &mut out32)
                .unwrap()
        })
    });
    let reports_n = 10_000_000;
    let many: Vec<u32> = sample_uniform(&key_from_u64(6), big_k, reports_n)
        .unwrap()
        .into_iter()
        .map(|v| v as u32)
        .collect();
    let mut reports = vec![0u32; reports_n];
    big.privatize_round_robin(&key_from_u64(7), &many, 0, &mut reports)
        .unwrap();
    let size = 2 * big.groups() as usize;
    group.throughput(Throughput::Elements(reports_n as u64));
    group.bench_function("server/aggregate_and_decode/k2^20_n1e7", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; size];
            aggregate(black_box(&reports), &mut counts, false).unwrap();
            black_box(big.estimate_raw(&counts, reports_n as u64))
        })
    });
    let mut counts = vec![0u64; size];
    aggregate(&reports, &mut counts, false).unwrap();
    group.throughput(Throughput::Elements(big_k));
    group.bench_function("server/decode/k2^20", |b| {
        b.iter(|| black_box(big.estimate_raw(black_box(&counts), reports_n as u64)))
    });
    let users = 3_000_000u64;
    for s in [16u64, 4096] {
        let per = users / s;
        let true_counts: Vec<u64> = (0..5000u64).map(|x| if x < s { per } else { 0 }).collect();
        group.throughput(Throughput::Elements(per * s));
        group.bench_function(format!("simulate/k5000_n3e6_s{s}"), |b| {
            b.iter(|| {
                small
                    .simulate(&key_from_u64(8), black_box(&true_counts))
                    .unwrap()
            })
        });
        for (name, passes) in [("passes", true), ("shuffle", false)] {
            group.bench_function(format!("simulate_{name}/k5000_n3e6_s{s}"), |b| {
                b.iter(|| {
                    small
                        .simulate_with(&key_from_u64(8), black_box(&true_counts), passes)
                        .unwrap()
                })
            });
        }
        let huge: Vec<u64> = true_counts
            .iter()
            .map(|&c| c / per * 1_000_000_000_000 / s)
            .collect();
        group.throughput(Throughput::Elements(huge.iter().sum()));
        group.bench_function(format!("simulate/k5000_n1e12_s{s}"), |b| {
            b.iter(|| small.simulate(&key_from_u64(9), black_box(&huge)).unwrap())
        });
    }
    group.finish();
}

/// Block Hadamard Response at k = 10^4 with m = 10 and 100 equal blocks (K_j = 1024 and
/// 128: 10 240 and 12 800 outputs, 16-bit reports) and with a partition of sizes
/// 1, 2, 3, …: privatize 10^6 reports, decode the counts (one FWHT per block), aggregation
/// + decoding of 10^7 reports, and simulate at n = 10^6 and 10^12.
fn bench_block_hadamard(c: &mut Criterion) {
    let n = 1_000_000;
    let xs = values(n);
    let key = key_from_u64(2);
    let mut steps: Vec<u64> = (1..).take_while(|s| s * (s + 1) / 2 <= K).collect();
    let covered: u64 = steps.iter().sum();
    *steps.last_mut().unwrap() += K - covered;
    let partitions = [
        ("10blocks", vec![K / 10; 10]),
        ("100blocks", vec![K / 100; 100]),
        ("sizes1to140", steps),
    ];
    let mut group = c.benchmark_group("bhr");
    for (name, sizes) in &partitions {
        let bhr = BlockHadamardResponse::from_sizes(sizes, 1.0).unwrap();
        let size = bhr.output_size_usize();
        let mut out16 = vec![0u16; n];
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("privatize/k10000_{name}_eps1"), |b| {
            b.iter(|| privatize(&bhr, &key, black_box(&xs), &mut out16).unwrap())
        });
        privatize(&bhr, &key, &xs, &mut out16).unwrap();
        let mut counts = vec![0u64; size];
        aggregate(&out16, &mut counts, false).unwrap();
        group.throughput(Throughput::Elements(K));
        group.bench_function(format!("decode/k10000_{name}"), |b| {
            b.iter(|| black_box(bhr.estimate_raw(black_box(&counts), n as u64)))
        });
        let true_counts = vec![100u64; K as usize];
        group.throughput(Throughput::Elements(K * 100));
        group.bench_function(format!("simulate/k10000_{name}_n1e6"), |b| {
            b.iter(|| {
                bhr.simulate(&key_from_u64(4), black_box(&true_counts))
                    .unwrap()
            })
        });
        let huge = vec![100_000_000u64; K as usize];
        group.throughput(Throughput::Elements(K * 100_000_000));
        group.bench_function(format!("simulate/k10000_{name}_n1e12"), |b| {
            b.iter(|| bhr.simulate(&key_from_u64(4), black_box(&huge)).unwrap())
        });
    }
    let bhr = BlockHadamardResponse::from_sizes(&partitions[1].1, 1.0).unwrap();
    let reports_n = 10_000_000;
    let mut reports = vec![0u16; reports_n];
    privatize(&bhr, &key_from_u64(3), &values(reports_n), &mut reports).unwrap();
    group.throughput(Throughput::Elements(reports_n as u64));
    group.bench_function("aggregate_and_decode/k10000_100blocks_n1e7", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; bhr.output_size_usize()];
            aggregate(black_box(&reports), &mut counts, false).unwrap();
            black_box(bhr.estimate_raw(&counts, reports_n as u64))
        })
    });
    group.finish();
}

/// High-Low Hadamard Response at k = 10^4 (targets: privatize ≥ 50 M reports/s on
/// 2 cores, decoding the counts ≤ 5 ms): every third value sensitive (S = 4096, 10 762
/// outputs) and 100 sensitive values (S = 128); the value lookup by the rank table, and at
/// k = 2^32 with 1000 sensitive values by binary search; aggregation + decoding of 10^7
/// reports; simulate of 10^6 and 10^12 users.
fn bench_high_low_hadamard(c: &mut Criterion) {
    let n = 1_000_000;
    let xs = values(n);
    let key = key_from_u64(2);
    let every_third: Vec<u64> = (0..K).step_by(3).collect();
    let hundred: Vec<u64> = (0..K).step_by(100).collect();
    let mut group = c.benchmark_group("hlhr");
    group.throughput(Throughput::Elements(n as u64));
    let mut out16 = vec![0u16; n];
    for eps in [0.5, 1.0] {
        let m = HighLowHadamardResponse::new(K, eps, &every_third).unwrap();
        group.bench_function(format!("privatize/k10000_s3334_eps{eps}"), |b| {
            b.iter(|| privatize(&m, &key, black_box(&xs), &mut out16).unwrap())
        });
    }
    let few = HighLowHadamardResponse::new(K, 1.0, &hundred).unwrap();
    group.bench_function("privatize/k10000_s100_eps1", |b| {
        b.iter(|| privatize(&few, &key, black_box(&xs), &mut out16).unwrap())
    });
    let wide_sensitive: Vec<u64> = (0..1000u64).map(|i| i * 4_294_967).collect();
    let wide = HighLowHadamardResponse::new(1 << 32, 1.0, &wide_sensitive).unwrap();
    assert!(!wide.has_rank_table());
    let wide_xs: Vec<u32> = xs.iter().map(|&x| x.wrapping_mul(429_497)).collect();
    let mut out64 = vec![0u64; n];
    group.bench_function("privatize/k2^32_s1000_eps1_search", |b| {
        b.iter(|| privatize(&wide, &key, black_box(&wide_xs), &mut out64).unwrap())
    });
    let m = HighLowHadamardResponse::new(K, 1.0, &every_third).unwrap();
    let big_n = 10_000_000;
    let mut reports = vec![0u16; big_n];
    privatize(&m, &key_from_u64(3), &values(big_n), &mut reports).unwrap();
    let mut counts = vec![0u64; m.output_size() as usize];
    aggregate(&reports, &mut counts, false).unwrap();
    group.throughput(Throughput::Elements(1));
    group.bench_function("server/decode/k10000", |b| {
        b.iter(|| black_box(m.estimate_raw(black_box(&counts), big_n as u64)))
    });
    group.throughput(Throughput::Elements(big_n as u64));
    group.bench_function("server/aggregate_and_decode/k10000_n1e7", |b| {
        b.iter(|| {
            let mut counts = vec![0u64; m.output_size() as usize];
            aggregate(black_box(&reports), &mut counts, false).unwrap();
            black_box(m.estimate_raw(&counts, big_n as u64))
        })
    });
    for (name, per_value) in [("n1e6", 100u64), ("n1e12", 100_000_000)] {
        let true_counts = vec![per_value; K as usize];
        group.throughput(Throughput::Elements(K * per_value));
        group.bench_function(format!("simulate/k10000_{name}"), |b| {
            b.iter(|| {
                m.simulate(&key_from_u64(4), black_box(&true_counts))
                    .unwrap()
            })
        });
    }
    group.finish();
}

/// Linear queries (rust/linear): Gaussian privatize at d = 16 (target ≥ 10 M reports/s),
/// rejection-sampling privatize, and the server's mean of 10^7 × 16 reports (target: memory
/// bandwidth, 1.28 GB per pass).
fn bench_linear(c: &mut Criterion) {
    use ldpdist::linear::{gaussian, rejection};
    let (j, d) = (1000usize, 16usize);
    let columns: Vec<f64> = (0..j * d)
        .map(|i| ((i * 7919) % 1000) as f64 / 4000.0)
        .collect();
    let n = 1_000_000;
    let xs: Vec<u32> = values(n).into_iter().map(|v| v % j as u32).collect();
    let key = key_from_u64(4);
    let mut out = vec![0.0f64; n * d];
    let mut group = c.benchmark_group("linear");
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("gaussian_privatize/d16", |b| {
        b.iter(|| gaussian::privatize(&columns, j, d, 7.0, &key, black_box(&xs), &mut out).unwrap())
    });
    // ε = 1 with independent columns: band ε/2, acceptance scale e^{−band}
    let rule = rejection::Rule::new(0.5, -0.5, rejection::Acceptance::Clipped).unwrap();
    group.bench_function("rejection_privatize/d16", |b| {
        b.iter(|| {
            rejection::privatize(&columns, j, d, 22.0, &rule, &key, black_box(&xs), &mut out)
                .unwrap()
        })
    });
    let big = 10_000_000;
    let big_xs: Vec<u32> = (0..big).map(|i| (i % j) as u32).collect();
    let mut reports = vec![0.0f64; big * d];
    gaussian::privatize(&columns, j, d, 7.0, &key, &big_xs, &mut reports).unwrap();
    group.throughput(Throughput::Bytes((big * d * 8) as u64));
    group.sample_size(10);
    group.bench_function("mean/n1e7_d16", |b| {
        b.iter(|| gaussian::mean(black_box(&reports), d, false).unwrap())
    });
    group.finish();
}

/// Adaptive sample splitting (linear::adaptive): one exact Bernoulli reply per user for a
/// J = 1000 query, stored (respond) or only counted (a simulated round); the public round
/// assignment of 10^6 users to 100 rounds.
fn bench_adaptive_linear_queries(c: &mut Criterion) {
    let n = 1_000_000;
    let channel = ReplyChannel::new(1.0, 1.0).unwrap();
    let query: Vec<f64> = (0..1000).map(|j| (j as f64 * 0.37).sin()).collect();
    let xs: Vec<u32> = values(n).into_iter().map(|v| v % 1000).collect();
    let key = key_from_u64(3);
    let mut group = c.benchmark_group("adaptive");
    group.throughput(Throughput::Elements(n as u64));
    let mut out = vec![0i8; n];
    group.bench_function("respond/J1000_eps1", |b| {
        b.iter(|| adaptive_queries::respond(&channel, &key, &query, black_box(&xs), &mut out))
    });
    group.bench_function("simulate_plus_count/J1000_eps1", |b| {
        b.iter(|| adaptive_queries::simulate_plus_count(&channel, &key, &query, black_box(&xs)))
    });
    let mut rounds = vec![0u32; n];
    group.bench_function("assign_rounds/d100", |b| {
        b.iter(|| adaptive_queries::assign_rounds(&key, 100, black_box(&mut rounds)))
    });
    group.finish();
}

/// Structured compressive privatization (`matrix="hadamard"`): privatization with the
/// server's balance table (k = 10^4, m = 500; k = 2^24, m = 4096 with uniform values, whose
/// table lookups miss the cache, and with 50 distinct values), and the sparse decode (one
/// single-precision FWHT of length 2K per OMP step) at k = 2^20, m = 2048, s = 25.
fn bench_structured_compressive(c: &mut Criterion) {
    let n = 1_000_000;
    let key = key_from_u64(2);
    let mut group = c.benchmark_group("cp_hadamard");
    group.throughput(Throughput::Elements(n as u64));
    let mut out = vec![0u16; n];
    for (k, m) in [(10_000u64, 500usize), (1 << 24, 4096)] {
        let cp = HadamardCompressivePrivatization::new(k, 0.5, m, key_from_u64(3)).unwrap();
        let uniform: Vec<u32> = sample_uniform(&key_from_u64(1), k, n)
            .unwrap()
            .into_iter()
            .map(|v| v as u32)
            .collect();
        cp.prepare(usize::MAX >> 1).unwrap(); // the balance table, untimed
        group.bench_function(format!("privatize/k{k}_m{m}_uniform"), |b| {
            b.iter(|| privatize(&cp, &key, black_box(&uniform), &mut out).unwrap())
        });
        let few: Vec<u32> = uniform
            .iter()
            .map(|&v| uniform[(v % 50) as usize])
            .collect();
        group.bench_function(format!("privatize/k{k}_m{m}_50values"), |b| {
            b.iter(|| privatize(&cp, &key, black_box(&few), &mut out).unwrap())
        });
    }
    let (k, m, s) = (1u64 << 20, 2048usize, 25usize);
    let cp = HadamardCompressivePrivatization::new(k, 0.5, m, key_from_u64(3)).unwrap();
    let mut p = vec![0.0; k as usize];
    for (i, v) in sample_uniform(&key_from_u64(4), k, s)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        p[v as usize] += (i + 1) as f64;
    }
    let total: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= total);
    let freq = cp.try_expected_frequencies(&p).unwrap();
    group.throughput(Throughput::Elements(k));
    group.sample_size(10);
    group.bench_function(format!("decode/k2^20_m{m}_s{s}"), |b| {
        b.iter(|| {
            cp.estimate_sparse(
                black_box(&freq),
                Some(10_000_000),
                Some(s),
                LinearModel::Exact,
            )
            .unwrap()
        })
    });
    group.finish();
}

/// Subset Selection at k = 10^4: the exact `simulate` of 10^6 users for the distributions of
/// the cp-figure2 preset (ε = 0.5, d = 3775; geometric, and uniform over 10 or 25 values at
/// spread positions) and over all of [k]; `privatize` at ε = 1 (d = 2690), 10^5 users.
fn bench_subset_selection(c: &mut Criterion) {
    let mut group = c.benchmark_group("ss");
    let n = 1_000_000u64;
    let ss = SubsetSelection::new(K, 0.5).unwrap();
    let spread = |s: u64| -> Vec<u64> {
        let mut t = vec![0u64; K as usize];
        for j in 0..s {
            t[((j * 7919 + 13) % K) as usize] += n / s + u64::from(j < n % s);
        }
        t
    };
    let mut geometric = vec![0u64; K as usize];
    let (mut left, mut p) = (n, 0.2);
    for t in geometric.iter_mut() {
        let c = ((left as f64) * p).round() as u64;
        *t = c.min(left);
        left -= *t;
        p = 0.2;
        if left == 0 {
            break;
        }
    }
    geometric[0] += left;
    let cases = [
        ("geo0.8", geometric),
        ("unif10", spread(10)),
        ("unif25", spread(25)),
        ("uniform", spread(K)),
    ];
    group.throughput(Throughput::Elements(n));
    for (name, true_counts) in &cases {
        group.bench_function(format!("simulate/k10000_eps0.5_n1e6_{name}"), |b| {
            b.iter(|| {
                ss.simulate(&key_from_u64(8), black_box(true_counts))
                    .unwrap()
            })
        });
    }
    let users = 100_000usize;
    let xs = values(users);
    let ss1 = SubsetSelection::new(K, 1.0).unwrap();
    let mut rows = vec![0u8; users * row_bytes(K)];
    group.throughput(Throughput::Elements(users as u64));
    group.bench_function("privatize/ss/k10000_eps1", |b| {
        b.iter(|| privatize_bits(&ss1, &key_from_u64(2), black_box(&xs), &mut rows).unwrap())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_privatize, bench_server, bench_two_stage_rappor, bench_one_bit_hadamard,
        bench_public_coin_hashing, bench_block_hadamard, bench_high_low_hadamard, bench_linear,
        bench_adaptive_linear_queries, bench_structured_compressive, bench_subset_selection
}
criterion_main!(benches);
