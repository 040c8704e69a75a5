//! Helpers shared by the benchmarks.
#![allow(dead_code)] // each bench uses a subset

use std::time::Instant;

/// Best wall time of `reps` calls of `f`.
pub fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// The number of cores, and the size in MiB from `BITEXACT_BENCH_MB` (default 1024).
pub fn cores_and_mb() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mb = std::env::var("BITEXACT_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    (cores, mb)
}
