//! CPU building blocks shared by the op implementations: fixed-order chunk sums and
//! float atomics (compare-and-swap on the bit pattern, the CPU analogue of CUDA `atomicAdd`).

use std::sync::atomic::{AtomicU32, Ordering};

/// Elements per chunk of the chunked summation tree (`reduce_sum`'s deterministic
/// implementations on both backends: the CUDA kernels sum the same chunks in the same order).
pub const SUM_CHUNK: usize = 1 << 14;

/// Sums a slice in a fixed order: 8 interleaved lanes, then the lanes pairwise.
/// The result depends only on the values, never on threads or timing.
pub fn chunk_sum(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut it = x.chunks_exact(8);
    for c in &mut it {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    for (l, v) in lanes.iter_mut().zip(it.remainder()) {
        *l += v;
    }
    pairwise_sum(&lanes)
}

/// Sums values by a fixed balanced binary tree over their index order.
pub fn pairwise_sum(x: &[f32]) -> f32 {
    match x.len() {
        0 => 0.0,
        1 => x[0],
        n => pairwise_sum(&x[..n / 2]) + pairwise_sum(&x[n / 2..]),
    }
}

/// Atomically adds `v` to the f32 stored as bits in `cell`; the result depends on the order
/// in which threads get there, which is the point.
pub fn atomic_add_f32(cell: &AtomicU32, v: f32) {
    let mut cur = cell.load(Ordering::Relaxed);
    loop {
        let new = (f32::from_bits(cur) + v).to_bits();
        match cell.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

/// A zeroed buffer of atomic f32 cells.
pub fn atomic_zeros(n: usize) -> Vec<AtomicU32> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

/// Reads atomic f32 cells back into plain values.
pub fn atomic_into_f32(cells: Vec<AtomicU32>) -> Vec<f32> {
    cells
        .into_iter()
        .map(|c| f32::from_bits(c.into_inner()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_exact_on_integers() {
        let x: Vec<f32> = (1..=1000).map(|i| i as f32).collect();
        assert_eq!(chunk_sum(&x), 500_500.0);
        assert_eq!(pairwise_sum(&x[..3]), 6.0);
        let c = AtomicU32::new(0);
        atomic_add_f32(&c, 1.5);
        atomic_add_f32(&c, 2.0);
        assert_eq!(f32::from_bits(c.into_inner()), 3.5);
    }
}
