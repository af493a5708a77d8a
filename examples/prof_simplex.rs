use rayon::prelude::*;
use std::time::Instant;
fn main() {
    let k = 1_000_000;
    let mut s = 1u64;
    let v: Vec<f64> = (0..k)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 3.4e-3
        })
        .collect();
    for _ in 0..4 {
        let t = Instant::now();
        let p = ldpdist::simplex::project_simplex(&v).unwrap();
        let e = t.elapsed();
        let t2 = Instant::now();
        let th = ldpdist::simplex::simplex_threshold(&v);
        let e2 = t2.elapsed();
        let t3 = Instant::now();
        let f = v.par_iter().position_first(|x| !x.is_finite());
        let e3 = t3.elapsed();
        let t4 = Instant::now();
        let q: Vec<f64> = v.par_iter().map(|&x| (x - th).max(0.0)).collect();
        let e4 = t4.elapsed();
        let t5 = Instant::now();
        let q2: Vec<f64> = v.iter().map(|&x| (x - th).max(0.0)).collect();
        let e5 = t5.elapsed();
        println!(
            "project {:?} threshold {:?} finite {:?} clip-par {:?} clip-seq {:?} {} {:?} {}",
            e,
            e2,
            e3,
            e4,
            e5,
            p[0] + th,
            f,
            q[0] + q2[0]
        );
    }
}
