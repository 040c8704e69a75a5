//! Reader tests: round trips for every dtype, canonicalisation, error messages, scanning, and
//! proptests that no byte string makes a reader panic.

use super::{load::load_bytes, *};
use crate::{digest::tensor_digest, tensor::Tensor};
use half::{bf16, f16};
use proptest::prelude::*;
use std::io::Write;

/// A safetensors file written by hand: `(name, dtype, shape, bytes)` in offset order.
pub(crate) fn st_file(tensors: &[(&str, &str, &[usize], &[u8])]) -> Vec<u8> {
    let mut off = 0;
    let entries: Vec<String> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            let e = format!(
                "\"{n}\":{{\"dtype\":\"{d}\",\"shape\":{s:?},\"data_offsets\":[{off},{}]}}",
                off + b.len()
            );
            off += b.len();
            e
        })
        .collect();
    let header = format!("{{{}}}", entries.join(","));
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    tensors.iter().for_each(|t| out.extend_from_slice(t.3));
    out
}

/// An `.npy` (version 1.0) written by hand.
pub(crate) fn npy_file(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let f = if fortran { "True" } else { "False" };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': {f}, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

/// An `.npz` of `(entry name, content)`, stored or deflated.
pub(crate) fn npz_file(entries: &[(&str, Vec<u8>)], deflate: bool) -> Vec<u8> {
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    for (name, data) in entries {
        let opts = SimpleFileOptions::default().compression_method(method);
        w.start_file(*name, opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn file(name: &str) -> OutputFile {
    OutputFile {
        name: name.to_string(),
        path: PathBuf::from(name),
        kind: FileKind::of(name),
        len: 0,
        modified: None,
    }
}

fn le<T: crate::tensor::Element>(v: &[T]) -> Vec<u8> {
    Tensor::from_slice(&[v.len()], v).bytes().to_vec()
}

/// Every reader on `bytes` under every kind: Ok or Err, never a panic.
fn all_readers(bytes: &[u8]) {
    for name in ["f.safetensors", "f.npy", "f.npz", "f.bin"] {
        let f = file(name);
        if let Ok(list) = digest_bytes(&f, bytes) {
            if let Some((n, _)) = list.first() {
                let key = n
                    .strip_prefix("f.safetensors:")
                    .or(n.strip_prefix("f.npz:"));
                let _ = load_bytes(&f, bytes, key.map(str::to_string));
            }
        }
    }
}

#[test]
fn every_dtype_round_trips_through_safetensors_and_npy() {
    let cases: Vec<(Tensor, &str, &str)> = vec![
        (
            Tensor::from_slice(&[3], &[1.5f32, -0.0, f32::NAN]),
            "F32",
            "<f4",
        ),
        (Tensor::from_slice(&[2], &[1e300f64, -2.0]), "F64", "<f8"),
        (
            Tensor::from_slice(&[2], &[f16::from_f32(0.5), f16::MAX]),
            "F16",
            "<f2",
        ),
        (
            Tensor::from_slice(&[2], &[bf16::from_f32(3.0), bf16::MIN]),
            "BF16",
            "",
        ),
        (Tensor::from_slice(&[2], &[-7i8, 7]), "I8", "|i1"),
        (Tensor::from_slice(&[2], &[-7i16, 300]), "I16", "<i2"),
        (Tensor::from_slice(&[2], &[-7i32, 70000]), "I32", "<i4"),
        (Tensor::from_slice(&[2], &[i64::MIN, 1]), "I64", "<i8"),
        (Tensor::from_slice(&[2], &[0u8, 255]), "U8", "|u1"),
        (Tensor::from_slice(&[2], &[65535u16, 1]), "U16", "<u2"),
        (Tensor::from_slice(&[2], &[u32::MAX, 1]), "U32", "<u4"),
        (Tensor::from_slice(&[2], &[u64::MAX, 1]), "U64", "<u8"),
        (
            Tensor::from_slice(&[3], &[true, false, true]),
            "BOOL",
            "|b1",
        ),
        (
            Tensor::from_bytes(DType::F8E4M3, &[2], vec![0x38, 0x7e]).unwrap(),
            "F8_E4M3",
            "",
        ),
        (
            Tensor::from_bytes(DType::F8E5M2, &[2], vec![0x3c, 0x7c]).unwrap(),
            "F8_E5M2",
            "",
        ),
    ];
    for (t, st_dtype, npy_descr) in cases {
        let want = tensor_digest(&t);
        let st = st_file(&[("x", st_dtype, t.shape(), t.bytes())]);
        let f = file("a.safetensors");
        assert_eq!(
            digest_bytes(&f, &st).unwrap(),
            vec![("a.safetensors:x".into(), want)]
        );
        let back = load_bytes(&f, &st, Some("x".into())).unwrap().unwrap();
        assert_eq!(
            (back.dtype, &back.shape[..], &back.data[..]),
            (t.dtype(), t.shape(), t.bytes())
        );
        if !npy_descr.is_empty() {
            let npy = npy_file(npy_descr, false, t.shape(), t.bytes());
            assert_eq!(
                digest_bytes(&file("a.npy"), &npy).unwrap(),
                vec![("a.npy".into(), want)]
            );
        }
    }
}

#[test]
fn big_endian_fortran_and_complex_npy_are_canonicalised() {
    let t = Tensor::from_slice(&[2, 3], &[1i32, 2, 3, 4, 5, 6]);
    let want = vec![("m.npy".to_string(), tensor_digest(&t))];
    let be: Vec<u8> = [1i32, 2, 3, 4, 5, 6]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    let fo = le(&[1i32, 4, 2, 5, 3, 6]);
    let fo_be: Vec<u8> = [1i32, 4, 2, 5, 3, 6]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    for bytes in [
        npy_file(">i4", false, &[2, 3], &be),
        npy_file("<i4", true, &[2, 3], &fo),
        npy_file(">i4", true, &[2, 3], &fo_be),
    ] {
        assert_eq!(digest_bytes(&file("m.npy"), &bytes).unwrap(), want);
    }
    // 3-d Fortran order: element (i, j, k) at i + 2j + 6k.
    let vals: Vec<u16> = (0..24).collect();
    let mut f = vec![0u16; 24];
    for (c, &v) in vals.iter().enumerate() {
        let (i, j, k) = (c / 12, (c / 4) % 3, c % 4);
        f[i + 2 * j + 6 * k] = v;
    }
    let t3 = Tensor::from_slice(&[2, 3, 4], &vals);
    let got = digest_bytes(&file("t.npy"), &npy_file("<u2", true, &[2, 3, 4], &le(&f))).unwrap();
    assert_eq!(got[0].1, tensor_digest(&t3));
    // complex64 [2] → f32 [2, 2] (real, imaginary).
    let c = le(&[1.0f32, -1.0, 0.5, 2.0]);
    let t = load_bytes(&file("c.npy"), &npy_file("<c8", false, &[2], &c), None)
        .unwrap()
        .unwrap();
    assert_eq!((t.dtype, t.shape.clone()), (DType::F32, vec![2, 2]));
    assert_eq!(&t.data[..], &c[..]);
    let cbe: Vec<u8> = [1.0f64, -1.0]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    let t = load_bytes(&file("c.npy"), &npy_file(">c16", false, &[], &cbe), None)
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.dtype, &t.data[..]),
        (DType::F64, &le(&[1.0f64, -1.0])[..])
    );
}

#[test]
fn npz_stored_and_deflated_entries() {
    let a = Tensor::from_slice(&[2], &[1.0f32, 2.0]);
    let n = CHUNK_BYTES / 4 * 3 + 5; // several chunks: exercises the streaming digest
    let big = Tensor::from_slice(&[n], &(0..n as u32).collect::<Vec<_>>());
    let m = Tensor::from_slice(&[2], &[true, false]);
    let entries = vec![
        ("a.npy", npy_file("<f4", false, &[2], a.bytes())),
        ("big.npy", npy_file("<u4", false, &[n], big.bytes())),
        ("m.npy", npy_file("|b1", false, &[2], m.bytes())),
        (
            "dir/b.npy",
            npy_file(">f4", false, &[2], &[63, 128, 0, 0, 64, 0, 0, 0]),
        ),
        ("notes.txt", b"hello".to_vec()),
    ];
    let want = vec![
        ("o.npz:a".to_string(), tensor_digest(&a)),
        ("o.npz:big".to_string(), tensor_digest(&big)),
        ("o.npz:dir/b".to_string(), tensor_digest(&a)),
        ("o.npz:m".to_string(), tensor_digest(&m)),
        (
            "o.npz:notes.txt".to_string(),
            tensor_digest(&Tensor::from_slice(&[5], b"hello")),
        ),
    ];
    for deflate in [false, true] {
        let z = npz_file(&entries, deflate);
        assert_eq!(
            digest_bytes(&file("o.npz"), &z).unwrap(),
            want,
            "deflate {deflate}"
        );
        let got = load_bytes(&file("o.npz"), &z, Some("dir/b".into()))
            .unwrap()
            .unwrap();
        assert_eq!(&got.data[..], a.bytes());
        assert!(load_bytes(&file("o.npz"), &z, Some("zz".into()))
            .unwrap()
            .is_none());
    }
}

#[test]
fn malformed_files_are_errors_naming_file_and_fault() {
    let dir = tempfile::tempdir().unwrap();
    let err = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        let f = OutputFile::new(name, &dir.path().join(name)).unwrap();
        format!("{:#}", digest_file(&f).unwrap_err())
    };
    let mut st = 1_000_000_000_000u64.to_le_bytes().to_vec();
    st.resize(4096, b' ');
    let e = err("step_0003.safetensors", &st);
    assert_eq!(
        e,
        "step_0003.safetensors: header length 1000000000000 exceeds file size 4096"
    );
    let e = err("huge.npy", &npy_file("<f4", false, &[1 << 60], &[]));
    assert!(e.starts_with("huge.npy: data is 0 bytes but shape"), "{e}");
    let e = err("huger.npy", &npy_file("<f4", false, &[1 << 62, 8], &[]));
    assert!(
        e.starts_with("huger.npy: ") && e.contains("overflows"),
        "{e}"
    );
    let e = err("big.npy", &npy_file("<f4", false, &[1 << 40], &[0; 16]));
    assert!(
        e.contains("data is 16 bytes but shape [1099511627776] of f32 needs"),
        "{e}"
    );
    let e = err("c.npy", &npy_file("<c32", false, &[1], &[0; 32]));
    assert!(e.starts_with("c.npy: unsupported dtype \"<c32\""), "{e}");
    let e = err("s.npy", &npy_file("<U3", false, &[1], &[0; 12]));
    assert!(e.contains("unsupported dtype"), "{e}");
    let e = err("b.npy", &npy_file("|b1", false, &[2], &[1, 2]));
    assert!(e.contains("bool tensor holds the byte 2"), "{e}");
    let f4 = st_file(&[("w", "F4", &[2], &[0])]);
    let e = err("f4.safetensors", &f4);
    assert!(
        e.contains("f4.safetensors: tensor \"w\": unsupported dtype F4"),
        "{e}"
    );
    let e = err("t.npz", b"PK\x03\x04 not really");
    assert!(e.starts_with("t.npz: not a valid zip archive"), "{e}");
    let good = npy_file("<f4", false, &[4], &[0; 16]);
    let e = err("cut.npy", &good[..good.len() - 3]);
    assert!(e.contains("data is 13 bytes"), "{e}");
    let e = err("h.npy", &good[..20]);
    assert!(e.contains("header length"), "{e}");
    // An npz entry claiming 2^40 elements but holding 16 bytes: an error, no allocation.
    let z = npz_file(
        &[("x.npy", npy_file("<f4", false, &[1 << 40], &[0; 16]))],
        true,
    );
    let e = err("z.npz", &z);
    assert!(e.contains("data is 16 bytes but the header needs"), "{e}");
    // A raw empty file is a u8 tensor of shape [0].
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    let f = OutputFile::new("empty", &dir.path().join("empty")).unwrap();
    let empty = Tensor::from_slice::<u8>(&[0], &[]);
    assert_eq!(
        digest_file(&f).unwrap(),
        vec![("empty".into(), tensor_digest(&empty))]
    );
}

#[test]
fn scan_orders_naturally_skips_metadata_and_guards_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("sub/deeper")).unwrap();
    for name in [
        "step_10.npy",
        "step_2.npy",
        "sub/deeper/x.bin",
        "sub/a.bin",
        crate::protocol::PLATFORM_FILE,
        "sub/.bitexact-memory.jsonl",
    ] {
        let bytes = if name.ends_with(".npy") {
            npy_file("<f4", false, &[1], &[0; 4])
        } else {
            b"x".to_vec()
        };
        std::fs::write(p.join(name), bytes).unwrap();
    }
    std::os::unix::fs::symlink(p.join("sub/a.bin"), p.join("link.bin")).unwrap();
    std::os::unix::fs::symlink(p.join("sub"), p.join("sublink")).unwrap();
    let names: Vec<String> = scan(p).unwrap().into_iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "link.bin",
            "step_2.npy",
            "step_10.npy",
            "sub/a.bin",
            "sub/deeper/x.bin"
        ]
    );
    let meta: Vec<String> = metadata_files(p)
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(
        meta,
        [crate::protocol::PLATFORM_FILE, "sub/.bitexact-memory.jsonl"]
    );
    let all = digest_dir(p).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[0].1, all[3].1); // link.bin reads sub/a.bin
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::symlink(outside.path(), p.join("out.bin")).unwrap();
    let e = format!("{:#}", scan(p).unwrap_err());
    assert!(
        e.starts_with("out.bin: symlink points outside the output directory"),
        "{e}"
    );
    std::fs::remove_file(p.join("out.bin")).unwrap();
    std::os::unix::fs::symlink(p.join("nothing"), p.join("dangling")).unwrap();
    assert!(format!("{:#}", scan(p).unwrap_err()).starts_with("dangling: dangling symlink"));
    assert!(scan(&p.join("missing")).is_err());
}

#[test]
fn load_names_and_missing_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tensor::from_slice(&[2], &[bf16::from_f32(1.0), bf16::from_f32(2.0)]);
    let bytes = st_file(&[("a.b", "BF16", &[2], t.bytes()), ("z", "U8", &[1], &[9])]);
    std::fs::write(dir.path().join("s.safetensors"), bytes).unwrap();
    let f = OutputFile::new("s.safetensors", &dir.path().join("s.safetensors")).unwrap();
    let names: Vec<String> = digest_file(&f).unwrap().into_iter().map(|p| p.0).collect();
    assert_eq!(names, ["s.safetensors:a.b", "s.safetensors:z"]);
    assert_eq!(load(&f, "s.safetensors:a.b").unwrap(), t);
    let e = load(&f, "s.safetensors:nope").unwrap_err().to_string();
    assert_eq!(e, "s.safetensors: no tensor \"s.safetensors:nope\" in it");
    assert!(load(&f, "other.npy").is_err());
}

/// Valid files of every kind to truncate and flip bits in.
fn valid_files() -> Vec<(&'static str, Vec<u8>)> {
    let f = le(&[1.0f32, 2.0, 3.0, 4.0]);
    let npy = npy_file("<f4", false, &[2, 2], &f);
    let npy_f = npy_file(">f4", true, &[2, 2], &f);
    let st = st_file(&[("a", "F32", &[2, 2], &f), ("b", "BOOL", &[2], &[0, 1])]);
    let entries = vec![("a.npy", npy.clone()), ("b.npy", npy_f.clone())];
    vec![
        ("f.npy", npy),
        ("f.npy", npy_f),
        ("f.safetensors", st),
        ("f.npz", npz_file(&entries, false)),
        ("f.npz", npz_file(&entries, true)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        all_readers(&bytes);
        // Also behind each format's magic / plausible prefix, to get past the first check.
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        npy.extend_from_slice(&bytes);
        all_readers(&npy);
        let mut st = (bytes.len() as u64 / 2).to_le_bytes().to_vec();
        st.extend_from_slice(&bytes);
        all_readers(&st);
    }

    #[test]
    fn npy_header_text_never_panics(text in "[{}()\\[\\]'\",: a-zA-Z0-9<>|_]{0,80}", data in proptest::collection::vec(any::<u8>(), 0..40)) {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(text.len() as u16).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
        b.extend_from_slice(&data);
        all_readers(&b);
    }

    #[test]
    fn truncations_are_errors_never_panics(which in 0usize..5, cut in any::<prop::sample::Index>()) {
        let (name, bytes) = &valid_files()[which];
        let n = cut.index(bytes.len());
        all_readers(&bytes[..n]);
        prop_assert!(digest_bytes(&file(name), &bytes[..n]).is_err(), "{name} cut at {n} parsed");
    }

    #[test]
    fn bit_flips_never_panic(which in 0usize..5, flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4)) {
        let (_, bytes) = &valid_files()[which];
        let mut b = bytes.clone();
        for (i, bit) in flips {
            let i = i.index(b.len());
            b[i] ^= 1 << bit;
        }
        all_readers(&b);
    }
}
