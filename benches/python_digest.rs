//! `bitexact.digest` from Python against the Rust digest and Python's hashlib, measured in one
//! run (targets as ratios, never asserted):
//! - a 1 GiB torch CPU tensor: `bitexact.digest(t)` ≥ 0.9 × the Rust digest of the same bytes
//!   (`digest_parts` here, in this process) and ≥ 1.8 × `hashlib.sha256(t.numpy().tobytes())`;
//! - 100 000 tiny tensors in under 1 s, one call each and through `bitexact.digests`.
//!
//! `cargo bench --bench python_digest`, with the installed package's interpreter in
//! `BITEXACT_PYTHON` (default: `~/.cache/bitexact/python-path`, which ci/python.sh writes) and
//! torch installed. Best of `BITEXACT_REPS` (default 3) for each figure.

use bitexact::digest::digest_parts;
use bitexact::DType;
#[path = "common/python.rs"]
mod python;
use std::time::Instant;

fn main() {
    let reps: usize = std::env::var("BITEXACT_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let n = 1usize << 30;
    let data: Vec<u8> = (0..n / 4)
        .flat_map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes())
        .collect();
    let shape = [n / 4];
    let mut rust = f64::INFINITY;
    for _ in 0..reps {
        let t0 = Instant::now();
        std::hint::black_box(digest_parts(DType::F32, &shape, &data));
        rust = rust.min(t0.elapsed().as_secs_f64());
    }
    drop(data);
    let v = python::run_json(
        "python_digest.py",
        &[&reps.to_string()],
        "the installed package and torch",
    );
    let f = |k: &str| v[k].as_f64().expect(k);
    let gb = |s: f64| n as f64 / s / 1e9;
    println!("1 GiB f32, best of {reps}:");
    println!(
        "  Rust digest_parts            {:.3} s  {:.2} GB/s",
        rust,
        gb(rust)
    );
    println!(
        "  bitexact.digest(torch)      {:.3} s  {:.2} GB/s",
        f("digest_1g"),
        gb(f("digest_1g"))
    );
    println!(
        "  hashlib.sha256(tobytes())   {:.3} s  {:.2} GB/s",
        f("hashlib_1g"),
        gb(f("hashlib_1g"))
    );
    println!(
        "  bitexact.digest / Rust      {:.2}x speed (target >= 0.9)",
        rust / f("digest_1g")
    );
    println!(
        "  bitexact.digest / hashlib   {:.2}x speed (target >= 1.8)",
        f("hashlib_1g") / f("digest_1g")
    );
    println!("100 000 tiny tensors (4 x f32):");
    println!(
        "  one digest() call each      {:.3} s (target < 1 s)",
        f("tiny_loop")
    );
    println!("  one digests(**tensors) call {:.3} s", f("tiny_batch"));
}
