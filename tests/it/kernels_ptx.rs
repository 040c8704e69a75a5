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
            bitexact::check::skip_notice(test, &e.to_string());
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
    assert!(!kernels::SOURCES.is_empty(), "no kernel files embedded");
    let mut failures = Vec::new();
    for (f, embedded) in kernels::SOURCES {
        // The embedded copy (which is compiled) must be the file as it is on disk.
        let src = std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(*embedded, src, "{f} is embedded as on disk");
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
fn every_entry_point_is_in_the_ptx_without_fma() {
    if !nvrtc_or_skip("every_entry_point_is_in_the_ptx_without_fma") {
        return;
    }
    // Every `__global__` function of every kernel file is an entry point of its PTX.
    for (file, src) in kernels::SOURCES {
        let ptx = kernels::compile_ptx(file).unwrap();
        let entries = kernels::entry_points(src);
        assert!(!entries.is_empty(), "{file} defines no kernel");
        for entry in entries {
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{file} lacks entry {entry}"
            );
        }
        // --fmad=false: no fused multiply-add where the CPU rounds product and sum separately
        // (except in files calling expf, such as softmax's: CUDA's expf uses fma internally by
        // design).
        if !src.contains("expf(") {
            assert!(
                !ptx.contains("fma.rn.f32"),
                "{file}: PTX contains fma.rn.f32"
            );
        }
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
