//! `cargo bench --bench run_scale`: how run mode scales with the number of outputs. Collects a
//! run directory of N tiny files, and compares two runs of N tensors (one safetensors file
//! each) where only the last tensor differs (collection of both, the first divergence and its
//! explanation), for N = 10 000 and N = 100 000 (`BITEXACT_SCALE_N` sets the large N). The
//! ratio of the per-item times (large over small) is the linearity figure: 1.0 is linear,
//! 10.0 would be quadratic.

mod common;
use bitexact::harness::{explain, Collected, Loader};
use bitexact::program::collect;
use bitexact::Tensor;
use common::best;
use std::path::{Path, PathBuf};

/// A directory of `n` four-byte files.
fn many_files(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i:06}.bin")), (i as u32).to_le_bytes()).unwrap();
    }
}

/// One safetensors file of `n` one-element f32 tensors; the last is `last`.
fn many_tensors(dir: &Path, n: usize, last: f32) {
    std::fs::create_dir_all(dir).unwrap();
    let mut header = String::from("{");
    let mut data = Vec::with_capacity(n * 4);
    for i in 0..n {
        let v = if i + 1 == n { last } else { i as f32 };
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"t{i:06}\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{},{}]}}",
            i * 4,
            i * 4 + 4
        ));
        data.extend_from_slice(&v.to_le_bytes());
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&data);
    std::fs::write(dir.join("step.safetensors"), bytes).unwrap();
}

struct Files(PathBuf);
impl Loader for Files {
    fn load(&self, name: &str) -> bitexact::Result<Tensor> {
        collect::load(&self.0, None, name)
    }
}

fn collected(dir: &Path) -> Collected {
    let c = collect::collect(dir, None, (false, false), Default::default()).unwrap();
    let mut out = Collected::of_outputs(Default::default(), None);
    out.digests = c.digests;
    out.loader = Box::new(Files(dir.to_path_buf()));
    out
}

/// Seconds to collect `n` files, and to compare two runs of `n` tensors.
fn measure(root: &Path, n: usize) -> (f64, f64) {
    let files = root.join(format!("files-{n}"));
    many_files(&files, n);
    let t_files = best(3, || {
        collect::collect(&files, None, (false, false), Default::default())
            .unwrap()
            .digests
            .len()
    });
    let (a, b) = (root.join(format!("a-{n}")), root.join(format!("b-{n}")));
    many_tensors(&a, n, 1.0);
    many_tensors(&b, n, 2.0);
    let t_compare = best(3, || {
        let (x, y) = (collected(&a), collected(&b));
        let d = explain::first_output_divergence(&x, &y).expect("the last tensor differs");
        assert_eq!(d.op, format!("step.safetensors:t{:06}", n - 1));
        let diff = explain::explain(&x, 0, &y, 1);
        assert_eq!(diff.len(), 1);
    });
    (t_files, t_compare)
}

fn main() {
    let large: usize = std::env::var("BITEXACT_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let small = (large / 10).max(1);
    let root = tempfile::tempdir().unwrap();
    let (fs, cs) = measure(root.path(), small);
    let (fl, cl) = measure(root.path(), large);
    println!("run mode scaling (best of 3):");
    println!(
        "  collect {small:>7} files: {fs:8.3} s ({:8.1} µs/file)",
        fs / small as f64 * 1e6
    );
    println!(
        "  collect {large:>7} files: {fl:8.3} s ({:8.1} µs/file)  per-item ratio {:.2} (1.0 = linear)",
        fl / large as f64 * 1e6,
        (fl / large as f64) / (fs / small as f64)
    );
    println!(
        "  compare {small:>7} tensors: {cs:8.3} s ({:8.1} µs/tensor)",
        cs / small as f64 * 1e6
    );
    println!(
        "  compare {large:>7} tensors: {cl:8.3} s ({:8.1} µs/tensor)  per-item ratio {:.2} (1.0 = linear)",
        cl / large as f64 * 1e6,
        (cl / large as f64) / (cs / small as f64)
    );
}
