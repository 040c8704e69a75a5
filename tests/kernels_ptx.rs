//! CI check of the CUDA kernels without a GPU: every `kernels/*.cu` must compile to PTX with
//! NVRTC, and a kernel with a syntax error must be rejected with its file name and NVRTC's log.
//!
//! NVRTC is found as `bitexact::backend::cuda::nvrtc` documents (`BITEXACT_NVRTC`, the loader's
//! path, then python3's `nvidia-cuda-nvrtc` wheels; `ci/ptx.sh` installs one). Without NVRTC the
//! tests print a skip message and pass, unless `BITEXACT_REQUIRE_NVRTC=1`, which makes it fail.

use bitexact::backend::cuda::{kernels, nvrtc};
use std::path::Path;

/// `true` when NVRTC is available; else prints why the test is skipped (or fails when required).
fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc::load() {
        Ok(nv) => {
            eprintln!(
                "{test}: NVRTC {} from {}",
                nv.version().unwrap_or_default(),
                nv.origin
            );
            true
        }
        Err(e) if std::env::var("BITEXACT_REQUIRE_NVRTC").as_deref() == Ok("1") => {
            panic!("{test}: BITEXACT_REQUIRE_NVRTC=1 but NVRTC is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("{test}: skipped: {e}");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_to_ptx() {
    if !nvrtc_or_skip("every_kernel_compiles_to_ptx") {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cu"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "kernel files: {files:?}");
    let mut failures = Vec::new();
    for f in &files {
        // Compile the file as it is on disk (the embedded copy is checked equal to it).
        let src = std::fs::read_to_string(dir.join(f)).unwrap();
        let embedded = kernels::SOURCES.iter().find(|(n, _)| n == f).map(|s| s.1);
        assert_eq!(embedded, Some(src.as_str()), "{f} is embedded as on disk");
        match kernels::compile_ptx(f) {
            Ok(ptx) => {
                assert!(ptx.contains(".entry"), "{f}: PTX without kernels");
                eprintln!("{f}: {} bytes of PTX", ptx.len());
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn syntax_error_is_reported_with_file_and_log() {
    if !nvrtc_or_skip("syntax_error_is_reported_with_file_and_log") {
        return;
    }
    let bad = "#include \"philox.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] = 1.0f }\n";
    let e = kernels::compile_source("broken.cu", bad, kernels::DEFAULT_ARCH)
        .unwrap_err()
        .to_string();
    eprintln!("{e}");
    assert!(e.contains("broken.cu"), "{e}");
    assert!(e.contains("NVRTC compilation failed"), "{e}");
    assert!(e.contains("expected a \";\""), "NVRTC log missing: {e}");
}

#[test]
fn kernels_define_the_launched_entry_points() {
    if !nvrtc_or_skip("kernels_define_the_launched_entry_points") {
        return;
    }
    let want = [
        ("reduce_sum.cu", "reduce_chunks"),
        ("reduce_sum.cu", "reduce_partials"),
        ("reduce_sum.cu", "reduce_atomic"),
        ("col_sum.cu", "col_sum_fixed"),
        ("col_sum.cu", "col_sum_atomic"),
        ("matmul.cu", "matmul_tiled16"),
        ("matmul.cu", "matmul_tiled32"),
        ("matmul.cu", "matmul_splitk_atomic"),
        ("scatter_add.cu", "scatter_atomic"),
        ("scatter_add.cu", "scatter_segments"),
        ("softmax.cu", "softmax_rows"),
        ("layer_norm.cu", "layer_norm_rows"),
        ("dropout.cu", "dropout_philox"),
        ("philox.cu", "philox_fill"),
        ("sha256.cu", "sha256_chunks"),
    ];
    for (file, entry) in want {
        let ptx = kernels::compile_ptx(file).unwrap();
        assert!(
            ptx.contains(&format!(".entry {entry}(")),
            "{file} lacks entry {entry}"
        );
    }
    // --fmad=false: no fused multiply-add where the CPU rounds product and sum separately
    // (softmax's expf is excluded: CUDA's expf uses fma internally by design).
    for file in [
        "matmul.cu",
        "col_sum.cu",
        "layer_norm.cu",
        "reduce_sum.cu",
        "scatter_add.cu",
        "dropout.cu",
    ] {
        let ptx = kernels::compile_ptx(file).unwrap();
        assert!(
            !ptx.contains("fma.rn.f32"),
            "{file}: PTX contains fma.rn.f32"
        );
    }
}

#[test]
fn every_kernel_compiles_to_a_cubin_as_at_run_time() {
    if !nvrtc_or_skip("every_kernel_compiles_to_a_cubin_as_at_run_time") {
        return;
    }
    for arch in ["sm_80", "sm_90"] {
        for (file, _) in kernels::SOURCES {
            let cubin = kernels::compile_for(file, arch).unwrap_or_else(|e| panic!("{e:#}"));
            assert!(
                cubin.starts_with(b"\x7fELF"),
                "{file} for {arch}: not an ELF image"
            );
        }
    }
}
