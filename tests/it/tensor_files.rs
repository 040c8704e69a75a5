//! Cross-language proof: values written by numpy (`.npy`, `.npz`, stored and compressed), by
//! the `safetensors` Python package, and by hand as bf16 safetensors digest exactly like a
//! Rust `Tensor::from_slice` of the same values.
//!
//! Two sources: the committed fixtures under `tests/fixtures/tensor_files/data` (checked on
//! every machine, no Python needed), and files written fresh by
//! `tests/fixtures/tensor_files/gen.py` when a Python with numpy is found (`BITEXACT_PYTHON`,
//! then `~/.cache/bitexact/venv/bin/python`, then `python3`); otherwise that part prints
//! `skipped: <reason>`.

use bitexact::digest::tensor_digest;
use bitexact::half::{bf16, f16};
use bitexact::tensor_files::{digest_dir, load, metadata_files, natural_cmp, scan};
use bitexact::{DType, Digest, Tensor};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The values of `arrays()` in gen.py, built in Rust.
fn arrays() -> Vec<(&'static str, Tensor)> {
    let v = |t: &[f32]| t.to_vec();
    let h = |x: &[f64]| x.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>();
    let f32s = [
        0.0,
        -0.0,
        1.5,
        -2.25,
        f32::MAX,
        1e-45,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let f64s = [0.0, -0.0, 0.1, -1e308, 5e-324, f64::INFINITY, f64::NAN];
    let f16s = [
        0.5,
        -1.0,
        65504.0,
        6.103515625e-05,
        5.960464477539063e-08,
        f64::NEG_INFINITY,
    ];
    let mut f16v = h(&f16s);
    f16v.push(f16::NAN);
    vec![
        ("f32", Tensor::from_slice(&[9], &v(&f32s))),
        ("f64", Tensor::from_slice(&[7], &f64s)),
        ("f16", Tensor::from_slice(&[7], &f16v)),
        ("i8", Tensor::from_slice(&[4], &[i8::MIN, -1, 0, i8::MAX])),
        (
            "i16",
            Tensor::from_slice(&[4], &[i16::MIN, -1, 0, i16::MAX]),
        ),
        (
            "i32",
            Tensor::from_slice(&[4], &[i32::MIN, -1, 0, i32::MAX]),
        ),
        (
            "i64",
            Tensor::from_slice(&[4], &[i64::MIN, -1, 0, i64::MAX]),
        ),
        ("u8", Tensor::from_slice(&[3], &[0u8, 1, 255])),
        ("u16", Tensor::from_slice(&[3], &[0u16, 1, 65535])),
        ("u32", Tensor::from_slice(&[3], &[0u32, 1, u32::MAX])),
        ("u64", Tensor::from_slice(&[3], &[0u64, 1, u64::MAX])),
        ("bool", Tensor::from_slice(&[3], &[true, false, true])),
        ("m23", m23()),
    ]
}

fn m23() -> Tensor {
    Tensor::from_slice(&[2, 3], &[0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5])
}

/// Every output name gen.py writes and the Rust tensor it must digest like.
fn expected(with_st: bool) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for (n, t) in arrays() {
        out.push((format!("npy/{n}.npy"), t.clone()));
        out.push((format!("all.npz:{n}"), t.clone()));
        out.push((format!("allz.npz:{n}"), t.clone()));
        if with_st {
            out.push((format!("st.safetensors:{n}"), t));
        }
    }
    out.push(("npy/m23_fortran.npy".into(), m23()));
    out.push(("npy/m23_be.npy".into(), m23()));
    let c64 = Tensor::from_slice(&[2, 2], &[1.0f32, 2.0, -0.5, -1.0]);
    out.push(("npy/c64.npy".into(), c64));
    let bf = [1.0, -2.5, 0.0078125, bf16::MAX.to_f32(), 0.0].map(bf16::from_f32);
    out.push((
        "bf16.safetensors:bf16".into(),
        Tensor::from_slice(&[5], &bf),
    ));
    let bf2: Vec<bf16> = [0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5].map(bf16::from_f32).into();
    out.push((
        "bf16.safetensors:bf16_2d".into(),
        Tensor::from_slice(&[2, 3], &bf2),
    ));
    out.push((
        "notes.txt".into(),
        Tensor::from_slice(&[10], b"raw bytes\n"),
    ));
    out
}

/// Checks that `dir` holds exactly the expected outputs, each digesting like its Rust tensor,
/// in natural order; returns how many were checked.
fn check_dir(dir: &Path) -> usize {
    let with_st = dir.join("st.safetensors").exists();
    let got = digest_dir(dir).unwrap_or_else(|e| panic!("{e:#}"));
    let mut want: Vec<(String, Digest)> = expected(with_st)
        .into_iter()
        .map(|(n, t)| (n, tensor_digest(&t)))
        .collect();
    want.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    let names = |v: &[(String, Digest)]| v.iter().map(|p| p.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&got),
        names(&want),
        "output names in {}",
        dir.display()
    );
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        assert_eq!(g, w, "{name}: digest differs from the Rust tensor's");
    }
    // load() gives back the same tensor (and dtype) as Rust built.
    let files = scan(dir).unwrap();
    let file = |n: &str| files.iter().find(|f| f.name == n).unwrap();
    let t = load(file("allz.npz"), "allz.npz:f16").unwrap();
    assert_eq!((t.dtype(), t), (DType::F16, arrays()[2].1.clone()));
    let t = load(file("npy/m23_fortran.npy"), "npy/m23_fortran.npy").unwrap();
    assert_eq!(t, m23());
    let meta = metadata_files(dir).unwrap();
    assert_eq!(
        meta.len(),
        1,
        "the .bitexact-platform.json is metadata, not an output"
    );
    got.len()
}

#[test]
fn committed_numpy_and_safetensors_fixtures_digest_like_rust_tensors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tensor_files/data");
    assert!(
        dir.join("st.safetensors").exists(),
        "fixtures written without safetensors"
    );
    let n = check_dir(&dir);
    println!("checked {n} committed fixture outputs");
}

/// A Python with numpy, or why there is none.
fn python() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("BITEXACT_PYTHON") {
        candidates.push(p.into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cache/bitexact/venv/bin/python"));
    }
    candidates.push("python3".into());
    let mut why = Vec::new();
    for p in candidates {
        match Command::new(&p).args(["-c", "import numpy"]).output() {
            Ok(o) if o.status.success() => return Ok(p),
            Ok(_) => why.push(format!("{} has no numpy", p.display())),
            Err(e) => why.push(format!("{}: {e}", p.display())),
        }
    }
    Err(why.join("; "))
}

#[test]
fn files_written_by_python_now_digest_like_rust_tensors() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: no Python with numpy ({why})");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tensor_files/gen.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !dir.path().join("st.safetensors").exists() {
        println!(
            "skipped: safetensors part ({} lacks the safetensors package)",
            py.display()
        );
    }
    let n = check_dir(dir.path());
    println!("checked {n} outputs written just now by {}", py.display());
}
