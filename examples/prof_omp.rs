use ldpdist::omp::{omp, DenseMatrix, Dictionary};
use ldpdist::signs::{SignKind, SignMatrix};
use std::time::Instant;
fn main() {
    let (m, k, s) = (500, 10000, 25);
    let a = SignMatrix::new(ldpdist::rng::key_from_u64(7), m, k, SignKind::Rademacher).unwrap();
    let d = a.to_dense().unwrap();
    let dm = DenseMatrix::new(&d, m, k, true).unwrap();
    let mut x = vec![0.0; k];
    for i in 0..s {
        x[i * 397 % k] = 1.0 + i as f64 * 0.01;
    }
    let mut y = a.matvec(&x);
    for (i, v) in y.iter_mut().enumerate() {
        *v += ((i * 7919 % 101) as f64 - 50.0) * 0.002;
    }
    for _ in 0..3 {
        let t = Instant::now();
        let r = omp(&a, &y, s, None).unwrap();
        let e = t.elapsed();
        let t2 = Instant::now();
        let r2 = omp(&dm, &y, s, None).unwrap();
        let e2 = t2.elapsed();
        let t3 = Instant::now();
        for _ in 0..25 {
            std::hint::black_box(dm.rmatvec(&y));
        }
        let e3 = t3.elapsed();
        let t4 = Instant::now();
        for j in 0..25 {
            std::hint::black_box(a.gram_column(j));
        }
        let e4 = t4.elapsed();
        let t5 = Instant::now();
        for _ in 0..25 {
            std::hint::black_box(a.rmatvec(&y));
        }
        let e5 = t5.elapsed();
        println!(
            "sign {:?} dense {:?} | 25x dense rmatvec {:?} 25x gram {:?} 25x sign rmatvec {:?} {}",
            e,
            e2,
            e3,
            e4,
            e5,
            r.support == r2.support
        );
    }
}
