//! Criterion benchmarks of the mechanisms (no Python involved): client-side privatization
//! throughput and server-side aggregation + decoding.
//!
//! Run: `cargo bench --bench mechanisms` (filter with e.g. `-- privatize/`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use ldpdist::mechanisms::hadamard_response::HadamardResponse;
use ldpdist::mechanisms::randomized_response::RandomizedResponse;
use ldpdist::mechanisms::two_stage_rappor::{Stages, TwoStageRappor};
use ldpdist::mechanisms::unary_encoding::Rappor;
use ldpdist::mechanisms::{aggregate, aggregate_bits, privatize, privatize_bits, row_bytes};
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

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_privatize, bench_server, bench_two_stage_rappor
}
criterion_main!(benches);
