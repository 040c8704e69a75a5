//! The Python package's native digest equals the Rust `Tensor` digest: the same values built in
//! Rust (`Tensor::from_slice`) and in numpy, hashed by `bitexact.digest` in the installed
//! package (`ci/python.sh` builds and installs it into the venv named by
//! `~/.cache/bitexact/python-path`). Without a Python whose `bitexact` has the native module
//! the test says `SKIPPED` and why. The file side (digest == what `bitexact run` reports) is in
//! `python/tests/test_native.py` and `ci/wheel.sh`.

use crate::common;

use bitexact::half::{bf16, f16};
use bitexact::{DType, Tensor};
use std::process::Command;

/// Python printing `name digest` per line for the numpy twins of [`rust_side`]'s tensors.
const SCRIPT: &str = r#"
import bitexact, numpy as np
n = 600_000  # 2.4 MB of f32: three 1 MiB chunks
i = np.arange(n, dtype=np.int64)
t = {
    "f32": ((i % 1000) * 0.25 - 3.0).astype(np.float32).reshape(600, 1000),
    "f64": (np.arange(7) * -1.5).astype(np.float64),
    "f16": (np.arange(10) * 0.5).astype(np.float16).reshape(2, 5),
    "bf16_bits": (np.arange(6, dtype=np.uint16) * 257).view(np.uint16),
    "i64_0d": np.array(-42, dtype=np.int64),
    "bool": (np.arange(5) % 2 == 0),
    "u8_empty": np.zeros((0, 3), dtype=np.uint8),
}
for name, a in t.items():
    print(name, bitexact.digest(a))
print("bf16", bitexact.digest(t["bf16_bits"].tobytes(), dtype="bf16", shape=[6]))
"#;

/// The same tensors built in Rust.
fn rust_side() -> Vec<(&'static str, Tensor)> {
    let n = 600_000;
    let f32s: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25 - 3.0).collect();
    let f64s: Vec<f64> = (0..7).map(|i| i as f64 * -1.5).collect();
    let f16s: Vec<f16> = (0..10).map(|i| f16::from_f32(i as f32 * 0.5)).collect();
    let bits: Vec<u16> = (0..6).map(|i| i * 257).collect();
    let bf16s: Vec<bf16> = bits.iter().map(|&b| bf16::from_bits(b)).collect();
    vec![
        ("f32", Tensor::from_slice(&[600, 1000], &f32s)),
        ("f64", Tensor::from_slice(&[7], &f64s)),
        ("f16", Tensor::from_slice(&[2, 5], &f16s)),
        ("bf16_bits", Tensor::from_slice(&[6], &bits)),
        ("i64_0d", Tensor::from_slice::<i64>(&[], &[-42])),
        (
            "bool",
            Tensor::from_bools(&[5], &[true, false, true, false, true]),
        ),
        (
            "u8_empty",
            Tensor::from_bytes(DType::U8, &[0, 3], vec![]).unwrap(),
        ),
        ("bf16", Tensor::from_slice(&[6], &bf16s)),
    ]
}

#[test]
fn python_digest_equals_the_rust_tensor_digest() {
    let Some(py) = common::python_with(&["numpy", "bitexact._native"]) else {
        common::tool_missing(
            "python_digest_equals_the_rust_tensor_digest",
            "no Python with numpy and the installed bitexact package (run ci/python.sh)",
        );
        return;
    };
    let out = Command::new(&py).args(["-c", SCRIPT]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let python: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(' ').expect("name digest"))
        .collect();
    let rust = rust_side();
    assert_eq!(python.len(), rust.len(), "{text}");
    for ((pname, pdigest), (rname, t)) in python.iter().zip(&rust) {
        assert_eq!(pname, rname);
        assert_eq!(
            *pdigest,
            bitexact::digest::tensor_digest(t).hex(),
            "{rname}: Python and Rust digests differ"
        );
    }
}
