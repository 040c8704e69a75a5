//! `cargo bench --bench fingerprint`: the trace fingerprint ([`bitexact::fingerprint`]) against
//! the canonical SHA-256 digest ([`bitexact::digest::digest_parts`], chunked and parallel) on
//! the same tensors (1 KiB, 64 KiB, 4 MiB, 64 MiB of f32), in GB/s and as a ratio, measured in
//! the same run: each round times every method once, and each figure is the best round. Also
//! the fingerprint on one thread, and XXH3-128 of the bytes (the op tracer's cache check,
//! `crates/bitexact-python/src/trace.rs`: the cache pays only where it is faster than the
//! fingerprint it saves). `BITEXACT_REPS` rounds (default 5).

use bitexact::digest::digest_parts;
use bitexact::fingerprint::{fingerprint, fingerprint_serial};
use bitexact::DType;
use std::time::Instant;
use twox_hash::XxHash3_128;

/// Seconds per call of `f`, called often enough to take about 20 ms.
fn per_call<T>(calls: usize, mut f: impl FnMut() -> T) -> f64 {
    let t = Instant::now();
    for _ in 0..calls {
        std::hint::black_box(f());
    }
    t.elapsed().as_secs_f64() / calls as f64
}

fn main() {
    let reps: usize = std::env::var("BITEXACT_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "trace fingerprint vs canonical SHA-256 digest, {cores} cores, best of {reps} rounds:"
    );
    println!(
        "{:>8}  {:>12} {:>12} {:>12} {:>12}  {:>9}",
        "size", "fingerprint", "fp 1 thread", "SHA-256", "XXH3-128", "fp / SHA"
    );
    for kib in [1usize, 64, 4 << 10, 64 << 10] {
        let n = kib << 10;
        let data: Vec<u8> = (0..n / 4)
            .flat_map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes())
            .collect();
        let shape = [n / 4];
        let calls = ((20 << 20) / n).max(1);
        let mut best = [f64::INFINITY; 4];
        for _ in 0..reps {
            let times = [
                per_call(calls, || fingerprint(&data)),
                per_call(calls, || fingerprint_serial(&data)),
                per_call(calls, || digest_parts(DType::F32, &shape, &data)),
                per_call(calls, || XxHash3_128::oneshot(&data)),
            ];
            for (b, t) in best.iter_mut().zip(times) {
                *b = b.min(t);
            }
        }
        let gb = |s: f64| n as f64 / s / 1e9;
        let size = if kib < 1024 {
            format!("{kib} KiB")
        } else {
            format!("{} MiB", kib >> 10)
        };
        println!(
            "{size:>8}  {:>7.2} GB/s {:>7.2} GB/s {:>7.2} GB/s {:>7.2} GB/s  {:>8.1}x",
            gb(best[0]),
            gb(best[1]),
            gb(best[2]),
            gb(best[3]),
            best[2] / best[0]
        );
    }
}
