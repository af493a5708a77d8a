//! Criterion benchmarks of the mechanisms (no Python involved): client-side privatization
//! throughput and server-side aggregation + decoding.
//!
//! Run: `cargo bench --bench mechanisms` (filter with e.g. `-- privatize/`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use ldpdist::mechanisms::hadamard_response::HadamardResponse;
use ldpdist::mechanisms::public_coin_hashing::{PublicCoinHashing, Users};
use ldpdist::mechanisms::randomized_response::RandomizedResponse;
use ldpdist::mechanisms::{aggregate, privatize};
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

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_privatize, bench_server, bench_public_coin_hashing
}
criterion_main!(benches);
