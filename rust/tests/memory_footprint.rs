//! Every mechanism's declared footprints (`Estimator::footprint`, what the memory guard
//! checks before an operation runs) cover the bytes the operation really allocates.
//!
//! A counting global allocator records the peak of live heap bytes; each operation runs
//! once to warm up (thread pools, thread-locals), then again with the peak reset, and the
//! growth of the peak over the bytes live before the call must not exceed the declaration.
//! One test function, so no other test allocates meanwhile.

use ldpdist::mechanisms::asymmetric_binary::AsymmetricBinaryResponse;
use ldpdist::mechanisms::block_hadamard::BlockHadamardResponse;
use ldpdist::mechanisms::compressive::{CompressivePrivatization, MatrixKind, Regime};
use ldpdist::mechanisms::hadamard_response::HadamardResponse;
use ldpdist::mechanisms::high_low_hadamard::HighLowHadamardResponse;
use ldpdist::mechanisms::local_hashing::OptimizedLocalHashing;
use ldpdist::mechanisms::one_bit_hadamard::OneBitHadamardResponse;
use ldpdist::mechanisms::public_coin_hashing::{PublicCoinHashing, Users};
use ldpdist::mechanisms::randomized_response::RandomizedResponse;
use ldpdist::mechanisms::subset_selection::SubsetSelection;
use ldpdist::mechanisms::two_stage_rappor::TwoStageRappor;
use ldpdist::mechanisms::unary_encoding::{OptimizedUnaryEncoding, Rappor};
use ldpdist::mechanisms::{
    aggregate, aggregate_bits, aggregation_footprint, bit_aggregation_footprint, row_bytes,
    BitMechanism, Estimator, Operation,
};
use ldpdist::privacy::{self, footprint as privacy_footprint};
use ldpdist::rng::key_from_u64;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let live = LIVE.fetch_add(grow, Ordering::SeqCst) + grow;
                PEAK.fetch_max(live, Ordering::SeqCst);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated at the peak of `f` beyond those live before it (after a warm-up run).
fn peak_growth<T>(mut f: impl FnMut() -> T) -> usize {
    drop(f());
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let out = f();
    let peak = PEAK.load(Ordering::SeqCst);
    drop(out);
    peak - before
}

/// Allowance for what is not sized by the mechanism (rayon's job bookkeeping, small vectors).
const SLACK: usize = 64 << 10;

/// Every under-declared operation of `mech`, as a message.
fn check<E: Estimator>(name: &str, mech: &E, users: u64) -> Vec<String> {
    let k = mech.domain_size() as usize;
    let size = mech.statistic_size() as usize;
    let counts: Vec<u64> = (0..size as u64).map(|i| 1 + i % 7).collect();
    let n: u64 = counts.iter().sum::<u64>().max(1);
    let freq: Vec<f64> = counts.iter().map(|&c| c as f64 / n as f64).collect();
    let dist = vec![1.0 / k as f64; k];
    let true_counts = vec![users / k as u64; k];
    let key = key_from_u64(3);
    let cases: Vec<(Operation, &str, usize)> = vec![
        (
            Operation::Estimate,
            "estimate_raw",
            peak_growth(|| mech.estimate_raw(&counts, n)),
        ),
        (
            Operation::Estimate,
            "estimate_from_frequencies",
            peak_growth(|| mech.estimate_from_frequencies(&freq)),
        ),
        (
            Operation::ChannelProduct,
            "expected_frequencies",
            peak_growth(|| mech.expected_frequencies(&dist)),
        ),
        (
            Operation::ChannelProduct,
            "channel_apply",
            peak_growth(|| mech.channel_apply(&freq)),
        ),
        (
            Operation::Simulate { users },
            "simulate_counts",
            peak_growth(|| mech.simulate_counts(&key, &true_counts).unwrap()),
        ),
    ];
    cases
        .into_iter()
        .filter_map(|(op, what, used)| {
            let declared = mech.footprint(op).bytes() as usize;
            (used > declared + SLACK).then(|| {
                format!(
                    "{name}: {what} allocated {used} bytes at its peak, but its footprint \
                     declares {declared} (k = {k}, statistic size {size})"
                )
            })
        })
        .collect()
}

#[test]
fn declared_footprints_cover_the_allocations() {
    let key = key_from_u64(7);
    let mut failures = Vec::new();
    for k in [1000u64, 1 << 16] {
        let users = 4 * k;
        let rr = RandomizedResponse::new(k, 1.0).unwrap();
        failures.extend(check("RandomizedResponse", &rr, users));
        for blocks in [None, Some(1)] {
            let hr = HadamardResponse::with_blocks(k, 2.0, blocks).unwrap();
            failures.extend(check("HadamardResponse", &hr, users));
        }
        // Every third value sensitive; simulation value by value (4k users) and by the
        // passes (10^12 users), and the edge cases s = 0 and s = k.
        let sensitive: Vec<u64> = (0..k).step_by(3).collect();
        let hlhr = HighLowHadamardResponse::new(k, 1.0, &sensitive).unwrap();
        failures.extend(check("HighLowHadamardResponse", &hlhr, users));
        failures.extend(check("HighLowHadamardResponse", &hlhr, 1_000_000_000_000));
        let all: Vec<u64> = (0..k).collect();
        for set in [&[][..], &all[..]] {
            let hlhr = HighLowHadamardResponse::new(k, 1.0, set).unwrap();
            failures.extend(check("HighLowHadamardResponse", &hlhr, users));
        }
        let rappor = Rappor::new(k, 1.0).unwrap();
        failures.extend(check("RAPPOR", &rappor, users));
        let oue = OptimizedUnaryEncoding::new(k, 1.0).unwrap();
        failures.extend(check("OptimizedUnaryEncoding", &oue, users));
        let tsr = TwoStageRappor::new(k, 1.0).unwrap();
        failures.extend(check("TwoStageRappor", &tsr, users));
        let ss = SubsetSelection::new(k, 1.0).unwrap();
        failures.extend(check("SubsetSelection", &ss, users));
        let olh = OptimizedLocalHashing::new(k, 1.0).unwrap();
        failures.extend(check("OptimizedLocalHashing", &olh, users));
        // Simulation by the shuffle (4k users) and, at k = 1000, by the passes (10^12 users:
        // O(K log K) large hypergeometric draws, slow in debug builds at k = 2^16).
        let obhr = OneBitHadamardResponse::new(k, 1.0).unwrap();
        failures.extend(check("OneBitHadamardResponse", &obhr, users));
        if k == 1000 {
            failures.extend(check("OneBitHadamardResponse", &obhr, 1_000_000_000_000));
        }
        // Block HR: blocks of sizes 1, 2, 3, … (singletons and many regions), ten equal
        // blocks, one large block beside small ones, and a non-contiguous partition; by
        // value (4k users) and by the passes (10^12 users).
        let mut sizes: Vec<u64> = (1..).take_while(|s| s * (s + 1) / 2 <= k).collect();
        let covered: u64 = sizes.iter().sum();
        *sizes.last_mut().unwrap() += k - covered;
        let labels: Vec<u32> = (0..k as u32).map(|x| x % 7 + (x % 3 == 0) as u32).collect();
        let partitions = [
            BlockHadamardResponse::from_sizes(&sizes, 1.0).unwrap(),
            BlockHadamardResponse::from_sizes(&vec![k / 10; 10], 1.0).unwrap(),
            BlockHadamardResponse::from_sizes(&[k - 10, 4, 6], 1.0).unwrap(),
            BlockHadamardResponse::from_labels(&labels, 1.0).unwrap(),
        ];
        for bhr in &partitions {
            failures.extend(check("BlockHadamardResponse", bhr, users));
            failures.extend(check("BlockHadamardResponse", bhr, 1_000_000_000_000));
        }
        let used = peak_growth(|| BlockHadamardResponse::from_labels(&labels, 1.0).unwrap());
        let declared = BlockHadamardResponse::construction_footprint(k, 8).bytes() as usize;
        if used > declared + SLACK {
            failures.push(format!(
                "BlockHadamardResponse construction at k = {k}: {used} > {declared}"
            ));
        }
        for kind in [MatrixKind::Balanced, MatrixKind::Rademacher] {
            let cp =
                CompressivePrivatization::new(k, 0.5, 64, key, kind, Regime::Auto, true).unwrap();
            failures.extend(check("CompressivePrivatization", &cp, users));
        }
    }
    // k = 2 whatever the budgets: vectors of 2 (the estimate, frequencies, counts).
    for (e01, e10) in [(0.5, 2.0), (f64::INFINITY, 1.0)] {
        let abr = AsymmetricBinaryResponse::new(e01, e10).unwrap();
        failures.extend(check("AsymmetricBinaryResponse", &abr, 1_000_000));
    }
    failures.extend(aggregation_failures());
    failures.extend(public_coin_hashing_failures());
    failures.extend(privacy_failures());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Aggregation allocates what `aggregation_footprint` / `bit_aggregation_footprint` declare,
/// for small and large outputs (private tables / in place; one tile / many tiles), and with
/// invalid rows dropped (the validity bits).
fn aggregation_failures() -> Vec<String> {
    let mut failures = Vec::new();
    for size in [1000usize, 1 << 20] {
        let reports: Vec<u32> = (0..1u32 << 18)
            .map(|i| i.wrapping_mul(2_654_435_761) % size as u32)
            .collect();
        let mut counts = vec![0u64; size];
        let used = peak_growth(|| aggregate(&reports, &mut counts, false).unwrap());
        let declared = aggregation_footprint(size as u64, reports.len() as u64).bytes() as usize;
        if used > declared + SLACK {
            failures.push(format!("aggregate into {size}: {used} > {declared}"));
        }
    }
    for k in [100u64, 1 << 16] {
        let rappor = Rappor::new(k, 1.0).unwrap();
        let width = row_bytes(BitMechanism::bits(&rappor));
        let rows = 2000usize;
        let mut reports = vec![0u8; rows * width];
        for (i, b) in reports.iter_mut().enumerate() {
            *b = (i as u32).wrapping_mul(2_654_435_761) as u8;
        }
        let mut counts = vec![0u64; k as usize];
        // Padding bits set in some rows (k = 100 has 4): the validity bits are used.
        let used = peak_growth(|| aggregate_bits(&rappor, &reports, &mut counts, true).unwrap());
        let declared = bit_aggregation_footprint(k, rows as u64).bytes() as usize;
        if used > declared + SLACK {
            failures.push(format!("aggregate_bits of {k} bits: {used} > {declared}"));
        }
        // Two-stage RAPPOR: k + 1 bits per row, counted in two groups by the stage bit.
        let tsr = TwoStageRappor::new(k, 1.0).unwrap();
        let width = row_bytes(tsr.report_bits());
        let mut reports = vec![0u8; rows * width];
        for (i, b) in reports.iter_mut().enumerate() {
            *b = (i as u32).wrapping_mul(2_654_435_761) as u8;
        }
        let mut counts = vec![0u64; 2 * k as usize + 1];
        let used = peak_growth(|| tsr.aggregate(&reports, &mut counts, true).unwrap());
        let declared = tsr.aggregation_footprint(rows as u64).bytes() as usize;
        if used > declared + SLACK {
            failures.push(format!(
                "two-stage aggregate of {k} bits: {used} > {declared}"
            ));
        }
        let mut counts = vec![1u64; 2 * k as usize + 1];
        counts[2 * k as usize] = 1;
        let used = peak_growth(|| tsr.two_stage_estimate(&counts, 2 * k + 1, 10).unwrap());
        if used > 8 * k as usize + SLACK {
            failures.push(format!(
                "two-stage estimate of {k} values: {used} > {}",
                8 * k
            ));
        }
    }
    failures
}

/// Public-coin hashing is not an `Estimator` (no ε): its operations and their footprints one
/// by one (aggregation over several user blocks, both estimates, the linear maps, simulate).
fn public_coin_hashing_failures() -> Vec<String> {
    let mut failures = Vec::new();
    for k in [1000u64, 1 << 16] {
        let m = PublicCoinHashing::new(k, 3, key_from_u64(5)).unwrap();
        let n = 40_000usize;
        let values: Vec<u32> = (0..n as u64).map(|i| (i % k) as u32).collect();
        let mut reports = vec![0u64; n];
        m.privatize(&values, Users::From(0), &mut reports).unwrap();
        let mut counts = vec![0u64; 2 * k as usize + 1];
        let mut cases: Vec<(&str, usize, u128)> = Vec::new();
        let used = peak_growth(|| m.aggregate(&reports, &mut counts).unwrap());
        cases.push(("aggregate", used, m.aggregation_footprint(n as u64).bytes()));
        let n_all = 2 * n as u64; // peak_growth aggregated the reports twice
        let estimate = m.footprint(Operation::Estimate).bytes();
        let used = peak_growth(|| m.estimate_raw(&counts, n_all).unwrap());
        cases.push(("estimate_raw", used, estimate));
        let used = peak_growth(|| m.two_stage_estimate(&counts, n_all, 10).unwrap());
        cases.push(("two_stage_estimate", used, estimate));
        let dist = vec![1.0 / k as f64; k as usize];
        let product = m.footprint(Operation::ChannelProduct).bytes();
        let used = peak_growth(|| m.expected_frequencies(&dist));
        cases.push(("expected_frequencies", used, product));
        let used = peak_growth(|| m.channel_apply(&dist));
        cases.push(("channel_apply", used, product));
        let true_counts = vec![7u64; k as usize];
        let users = 7 * k;
        let used = peak_growth(|| m.simulate(&key_from_u64(1), &true_counts).unwrap());
        cases.push((
            "simulate",
            used,
            m.footprint(Operation::Simulate { users }).bytes(),
        ));
        for (what, used, declared) in cases {
            if used > declared as usize + SLACK {
                failures.push(format!(
                    "PublicCoinHashing: {what} allocated {used} bytes at its peak, but its \
                     footprint declares {declared} (k = {k})"
                ));
            }
        }
    }
    failures
}

/// The exact privacy verifier (`ldpdist::privacy`): `verify` and `realized_budgets` on the
/// calling thread (small) and on rayon (several tiles and output chunks), and long rows.
fn privacy_failures() -> Vec<String> {
    let mut failures = Vec::new();
    for (k, n) in [(20usize, 30usize), (300, 1000), (3, 100_000)] {
        let q: Vec<f64> = (0..k * n)
            .map(|i| 1.0 + (i as u32).wrapping_mul(2_654_435_761) as f64 / 2f64.powi(32))
            .collect();
        let mut e = vec![1.0; k * k];
        (0..k).for_each(|x| e[x * k + x] = 0.0);
        let cases = [
            (
                "verify",
                peak_growth(|| privacy::verify(&q, k, n, &e).unwrap()),
                privacy_footprint(k, n, privacy::Operation::Verify).bytes(),
            ),
            (
                "realized_budgets",
                peak_growth(|| privacy::realized_budgets(&q, k, n).unwrap()),
                privacy_footprint(k, n, privacy::Operation::RealizedBudgets).bytes(),
            ),
        ];
        for (what, used, declared) in cases {
            if used > declared as usize + SLACK {
                failures.push(format!(
                    "privacy::{what} allocated {used} bytes at its peak, but its footprint \
                     declares {declared} (k = {k}, |Y| = {n})"
                ));
            }
        }
    }
    failures
}
