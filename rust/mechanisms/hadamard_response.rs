//! Hadamard Response (Acharya, Sun & Zhang 2018; shared/notes/hadamard-response.md), the
//! general (b, B) construction for every ε.
//!
//! * `B` = largest power of 2 with `B ≤ min(e^ε, 2k)`; `b` = smallest power of 2 with
//!   `b > ⌈k/B⌉`. Symbol x lives in block `j = ⌊x/(b−1)⌋` at row `r = (x mod (b−1)) + 1` of
//!   the Sylvester matrix `H_b`; its set is `C_x = {j·b + w : H_b(r, w) = +1}`, `h = b/2`
//!   outputs. Only the `⌈k/(b−1)⌉` blocks some symbol uses are kept: `K = blocks·b` outputs.
//!   With `B = 1` this is the high-privacy HR of DESIGN.md: `K = 2^⌈log2(k+1)⌉`, row x+1.
//! * Channel: `Q(z|x) = e^ε/Z` for `z ∈ C_x`, `1/Z` otherwise, `Z = h·e^ε + K − h`.
//! * Estimator, with `T_j` the fraction of reports in block j and `S_x` the fraction in `C_x`
//!   (notes, re-derived: `S_x = (b/4Z)(2 + (P_j + p_x)(e^ε − 1))`):
//!   `P̂_j = (T_j Z − b)/((b/2)(e^ε − 1))`, `p̂_x = (4 S_x Z/b − 2)/(e^ε − 1) − P̂_j`.
//!   All `S_x` of a block come from one FWHT of its histogram: `#C_x = ((Hc)_0 + (Hc)_r)/2`,
//!   so decoding costs `O(n + K log b)`.
//! * Sampling is O(1): with probability `ρ = h e^ε / Z` a uniform element of `C_x`, else a
//!   uniform element of the other `K − h` outputs. Elements of `C_x` are the `w` with even
//!   `popcount(r & w)`: the v-th one is v with a bit inserted at the lowest set bit of r and
//!   set so the parity is even (odd for the complement) — a bijection, so uniform.
//!
//! Exact privacy: `ρ` is the float rounded down by 8 ulps (below the real value) and drawn
//! exactly; the uniform draws are exact. The realized ratio `ρ(K − h)/((1 − ρ)h)` is increasing
//! in ρ, so it never exceeds `e^ε`; the estimator uses the realized `Z' = h/ρ·…` probabilities.

use super::randomized_response::{epsilon_too_small, round_down, PRIVACY_MARGIN_ULPS};
use super::{check_domain, check_epsilon, FastDiv, IndexMechanism};
use crate::error::Result;
use crate::hadamard::fwht_in_place;
use crate::rng::{uniform_below, BernoulliThreshold, StreamRng};

#[derive(Clone, Debug)]
pub struct HadamardResponse {
    k: u64,
    epsilon: f64,
    /// B of the construction (a power of two), outputs per block b (a power of two), and
    /// the number of blocks used.
    big_b: u64,
    b: u64,
    blocks: u64,
    /// Probability of reporting inside C_x, as realized.
    rho: f64,
    inside: BernoulliThreshold,
    /// Division by b − 1 (rows per block), without a hardware divide per report.
    rows_per_block: FastDiv,
}

impl HadamardResponse {
    /// The construction of the paper: `B` = largest power of 2 with `B ≤ min(e^ε, 2k)`.
    pub fn new(k: u64, epsilon: f64) -> Result<Self> {
        Self::with_blocks(k, epsilon, None)
    }

    /// With `big_b = Some(B)` (a power of two, `1 ≤ B ≤ 2k`) instead of the paper's rule;
    /// `Some(1)` is the high-privacy HR for every ε. Every B gives an exactly ε-LDP channel.
    pub fn with_blocks(k: u64, epsilon: f64, big_b: Option<u64>) -> Result<Self> {
        check_domain(k)?;
        check_epsilon(epsilon)?;
        let e = epsilon.exp();
        let big_b = match big_b {
            Some(v) if v.is_power_of_two() && v <= 2 * k => v,
            Some(v) => {
                return Err(crate::error::Error::Value(format!(
                    "blocks (B) must be a power of two in [1, 2k] = [1, {}], got {v}",
                    2 * k
                )))
            }
            None => {
                let cap = e.min(2.0 * k as f64);
                let mut v = 1u64;
                while (2 * v) as f64 <= cap {
                    v *= 2;
                }
                v
            }
        };
        let per_block = k.div_ceil(big_b); // ⌈k/B⌉
        let b = (per_block + 1).next_power_of_two(); // smallest power of 2 > ⌈k/B⌉
        let blocks = k.div_ceil(b - 1);
        let (h, outputs) = ((b / 2) as f64, (blocks * b) as f64);
        let rho = round_down(h * e / (h * e + outputs - h), PRIVACY_MARGIN_ULPS);
        // Inside must stay strictly more likely per output than outside.
        if !(rho * (outputs - h) > (1.0 - rho) * h) {
            return Err(epsilon_too_small(epsilon));
        }
        let inside = BernoulliThreshold::new(rho)?;
        Ok(Self {
            k,
            epsilon,
            big_b,
            b,
            blocks,
            rho,
            inside,
            rows_per_block: FastDiv::new(b - 1),
        })
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The buffers of a server-side operation (`mechanisms::Estimator::footprint`): the
    /// estimate also holds the integer block transforms (two vectors of K).
    pub fn footprint(&self, op: super::Operation) -> crate::memory::Footprint {
        let outputs = self.blocks * self.b;
        let f = super::vector_footprint("HadamardResponse", op, self.k, outputs);
        match op {
            super::Operation::Estimate => f.add("block transforms", 2 * outputs, 8),
            _ => f,
        }
    }

    /// `(B, b, K)`: the block count of the construction (a power of two), outputs per block,
    /// and outputs kept (`⌈k/(b−1)⌉·b`).
    pub fn shape(&self) -> (u64, u64, u64) {
        (self.big_b, self.b, self.blocks * self.b)
    }

    /// Number of outputs, as a length.
    pub fn output_size_usize(&self) -> usize {
        (self.blocks * self.b) as usize
    }

    fn h(&self) -> f64 {
        (self.b / 2) as f64
    }

    fn outputs(&self) -> f64 {
        (self.blocks * self.b) as f64
    }

    /// `(Q(z|x) for z ∈ C_x, for z ∉ C_x)` as realized.
    pub fn probabilities(&self) -> (f64, f64) {
        (
            self.rho / self.h(),
            (1.0 - self.rho) / (self.outputs() - self.h()),
        )
    }

    /// The exact guarantee of the channel used (≤ ε).
    pub fn realized_epsilon(&self) -> f64 {
        let (inside, outside) = self.probabilities();
        inside.ln() - outside.ln()
    }

    /// The realized `e^ε` and normalizer Z (Q(z|x) = e^ε/Z inside, 1/Z outside).
    fn realized_ez(&self) -> (f64, f64) {
        let (inside, outside) = self.probabilities();
        (inside / outside, 1.0 / outside)
    }

    /// Block and row of symbol x.
    #[inline]
    fn place(&self, x: u64) -> (u64, u64) {
        let (j, r) = self.rows_per_block.div_rem(x);
        (j, r + 1)
    }

    /// Row x of the channel matrix (length K).
    pub fn channel_row(&self, x: u64, row: &mut [f64]) {
        let (inside, outside) = self.probabilities();
        row.fill(outside);
        let (j, r) = self.place(x);
        for w in 0..self.b {
            if (r & w).count_ones() % 2 == 0 {
                row[(j * self.b + w) as usize] = inside;
            }
        }
    }

    /// Report counts per block, transformed: `out[j·b + r] = (H_b c_j)_r` (exact integers).
    fn block_transforms(&self, counts: &[i64]) -> Vec<i64> {
        let mut t = counts.to_vec();
        for block in t.chunks_exact_mut(self.b as usize) {
            fwht_in_place(block);
        }
        t
    }

    /// Unbiased estimate from the report histogram (length K, `n > 0`).
    pub fn estimate_raw(&self, counts: &[u64], n: u64) -> Vec<f64> {
        let ints: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
        let t = self.block_transforms(&ints);
        let freq_of = |v: i64| v as f64 / n as f64;
        self.estimate_from_transforms(|j, r| freq_of(t[(j * self.b + r) as usize]))
    }

    /// Unbiased estimate from report frequencies (length K), e.g. exact expectations.
    pub fn estimate_from_frequencies(&self, freq: &[f64]) -> Vec<f64> {
        let mut t = freq.to_vec();
        for block in t.chunks_exact_mut(self.b as usize) {
            fwht_in_place(block);
        }
        self.estimate_from_transforms(|j, r| t[(j * self.b + r) as usize])
    }

    /// The estimator, given `transformed(j, r) = (H_b f_j)_r` for the block frequencies f_j.
    fn estimate_from_transforms(&self, transformed: impl Fn(u64, u64) -> f64) -> Vec<f64> {
        let (e, z) = self.realized_ez();
        let b = self.b as f64;
        let block_mass: Vec<f64> = (0..self.blocks)
            .map(|j| (transformed(j, 0) * z - b) / ((b / 2.0) * (e - 1.0)))
            .collect();
        (0..self.k)
            .map(|x| {
                let (j, r) = self.place(x);
                let s = (transformed(j, 0) + transformed(j, r)) / 2.0;
                (4.0 * s * z / b - 2.0) / (e - 1.0) - block_mass[j as usize]
            })
            .collect()
    }

    /// Expected report frequencies `Qᵀ dist` (length K), one FWHT per block.
    pub fn expected_frequencies(&self, dist: &[f64]) -> Vec<f64> {
        let (e, z) = self.realized_ez();
        let total: f64 = dist.iter().sum();
        let mut out = vec![0.0; (self.blocks * self.b) as usize];
        // Σ_{x in block j, z ∈ C_x} p_x = (P_j + (H p_j)_z)/2 with p_j placed at rows 1..b−1.
        for (x, &v) in dist.iter().enumerate() {
            let (j, r) = self.place(x as u64);
            out[(j * self.b + r) as usize] = v;
        }
        for block in out.chunks_exact_mut(self.b as usize) {
            let mass: f64 = block.iter().sum();
            fwht_in_place(block);
            block
                .iter_mut()
                .for_each(|v| *v = (total + (e - 1.0) * (mass + *v) / 2.0) / z);
        }
        out
    }

    /// `Q w` (length k): `(Q w)_x = Σ_z Q(z|x) w_z`, the adjoint of `expected_frequencies`.
    pub fn channel_apply(&self, w: &[f64]) -> Vec<f64> {
        let (e, z) = self.realized_ez();
        let total: f64 = w.iter().sum();
        let mut t = w.to_vec();
        let mut mass = vec![0.0; self.blocks as usize];
        for (j, block) in t.chunks_exact_mut(self.b as usize).enumerate() {
            mass[j] = block.iter().sum();
            fwht_in_place(block);
        }
        (0..self.k)
            .map(|x| {
                let (j, r) = self.place(x);
                let inside = (mass[j as usize] + t[(j * self.b + r) as usize]) / 2.0;
                (total + (e - 1.0) * inside) / z
            })
            .collect()
    }

    /// The v-th (0-based) w in `[0, b)` with `popcount(r & w)` of the given parity.
    #[inline]
    fn nth_with_parity(r: u64, v: u64, odd: bool) -> u64 {
        let t = r.trailing_zeros();
        let low = v & ((1 << t) - 1);
        let w = ((v >> t) << (t + 1)) | low;
        let parity = (r & w).count_ones() & 1 == 1;
        w | (((parity != odd) as u64) << t)
    }
}

impl IndexMechanism for HadamardResponse {
    fn domain(&self) -> u64 {
        self.k
    }
    fn output_size(&self) -> u64 {
        self.blocks * self.b
    }
    #[inline]
    fn sample(&self, rng: &mut StreamRng, x: u64) -> u64 {
        let (j, r) = self.place(x);
        let half = self.b / 2;
        if self.inside.sample(rng) {
            return j * self.b + Self::nth_with_parity(r, uniform_below(rng, half), false);
        }
        let u = uniform_below(rng, self.blocks * self.b - half);
        if u < half {
            j * self.b + Self::nth_with_parity(r, u, true)
        } else {
            let u = u - half;
            let other = u / self.b;
            let block = other + (other >= j) as u64;
            block * self.b + u % self.b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_matrix;
    use super::super::testing::{
        assert_simulate_matches_privatize, channel_stats, chi_square, empirical_row,
        expected_from_rows,
    };
    use super::*;
    use crate::hadamard::sylvester_entry;

    #[test]
    fn high_privacy_layout_follows_the_convention() {
        let m = HadamardResponse::new(10, 0.5).unwrap();
        assert_eq!(m.shape(), (1, 16, 16));
        let mut row = vec![0.0; 16];
        for x in 0..10u64 {
            m.channel_row(x, &mut row);
            let (inside, _) = m.probabilities();
            for z in 0..16u64 {
                assert_eq!(row[z as usize] == inside, sylvester_entry(x + 1, z) == 1);
            }
        }
        assert_eq!(HadamardResponse::new(16, 0.1).unwrap().shape(), (1, 32, 32));
    }

    #[test]
    fn channel_is_exactly_epsilon_ldp() {
        for k in [2u64, 3, 7, 16, 100] {
            for eps in [0.1, 0.5, 1.0, 2.0, 5.0] {
                let m = HadamardResponse::new(k, eps).unwrap();
                let size = m.output_size();
                let q = channel_matrix(k, size, 1 << 22, |x, r| m.channel_row(x, r)).unwrap();
                let (ratio, sum_err) = channel_stats(&q, k as usize);
                assert!(
                    sum_err < 1e-12,
                    "k {k} eps {eps}: rows sum off by {sum_err}"
                );
                assert!(ratio <= eps + 1e-12, "k {k} eps {eps}: {ratio}");
                assert!((ratio - m.realized_epsilon()).abs() < 1e-12);
                assert!(eps - m.realized_epsilon() < 1e-12, "k {k} eps {eps}");
                assert!(size <= 4 * k, "K = {size} > 4k");
            }
        }
    }

    #[test]
    fn estimator_is_unbiased_and_fwht_decoding_equals_the_direct_formula() {
        for (k, eps) in [(10u64, 0.5), (7, 2.0), (100, 3.0), (100, 5.0), (33, 1.5)] {
            let m = HadamardResponse::new(k, eps).unwrap();
            let p: Vec<f64> = (0..k).map(|x| ((x * 7 + 3) % 11) as f64).collect();
            let total: f64 = p.iter().sum();
            let p: Vec<f64> = p.iter().map(|v| v / total).collect();
            let freq = m.expected_frequencies(&p);
            let size = m.output_size() as usize;
            for (a, b) in freq.iter().zip(&expected_from_rows(&m, &p)) {
                assert!((a - b).abs() < 1e-14);
            }
            let est = m.estimate_from_frequencies(&freq);
            for (a, b) in est.iter().zip(&p) {
                assert!((a - b).abs() < 1e-9, "k {k} eps {eps}: {a} vs {b}");
            }
            // FWHT decoding against S_x computed by summing over C_x directly.
            let counts: Vec<u64> = (0..size as u64).map(|z| (z * 31 + 7) % 50).collect();
            let n: u64 = counts.iter().sum();
            let fast = m.estimate_raw(&counts, n);
            let (e, zz) = m.realized_ez();
            let b = m.b as f64;
            for x in 0..k {
                let (j, r) = m.place(x);
                let block = &counts[(j * m.b) as usize..((j + 1) * m.b) as usize];
                let t: f64 = block.iter().sum::<u64>() as f64 / n as f64;
                let s: f64 = (0..m.b)
                    .filter(|&w| sylvester_entry(r, w) == 1)
                    .map(|w| block[w as usize] as f64)
                    .sum::<f64>()
                    / n as f64;
                let mass = (t * zz - b) / ((b / 2.0) * (e - 1.0));
                let direct = (4.0 * s * zz / b - 2.0) / (e - 1.0) - mass;
                assert!((fast[x as usize] - direct).abs() < 1e-9);
            }
            // Adjoint identity: <Qᵀp, w> = <p, Q w>.
            let w: Vec<f64> = (0..size).map(|z| (z as f64 * 0.37).sin()).collect();
            let lhs: f64 = freq.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = p.iter().zip(m.channel_apply(&w)).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
        }
    }

    #[test]
    fn sampler_matches_the_channel() {
        for (k, eps) in [(6u64, 0.5), (5, 3.0)] {
            let m = HadamardResponse::new(k, eps).unwrap();
            let size = m.output_size() as usize;
            let mut row = vec![0.0; size];
            for x in [0u32, (k - 1) as u32] {
                m.channel_row(x as u64, &mut row);
                let draws = 400_000;
                let freq = empirical_row(&m, x, draws, 5 + x as u64);
                // Critical value of chi-square at p = 0.001 for df = size − 1 ≤ 15: < 37.7.
                assert!(
                    chi_square(&freq, &row, draws) < 37.7,
                    "k {k} eps {eps} x {x}"
                );
            }
        }
    }

    #[test]
    fn simulate_equals_privatizing_sorted_values() {
        let m = HadamardResponse::new(20, 2.0).unwrap();
        let true_counts: Vec<u64> = (0..20).map(|x| (x * 997 % 13000) as u64).collect();
        assert_simulate_matches_privatize(&m, &true_counts, 4);
    }
}
