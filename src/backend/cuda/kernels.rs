//! The CUDA C++ sources of `kernels/` (embedded in the binary by `build.rs`, which lists the
//! directory, so it runs from any directory and a new kernel file needs no Rust change) and
//! their NVRTC compilation to PTX, cached per process and per (file, architecture).
//!
//! Options: `--fmad=false` (no fused multiply-add, so products and sums round exactly as on the
//! CPU), `--std=c++17`, and `--gpu-architecture`: at run time the device's own `sm_XY`,
//! producing a CUBIN (machine code: it loads on any driver of the same major CUDA version, where
//! PTX from a newer NVRTC than the driver would be rejected); without a GPU, as CI does, PTX for
//! [`DEFAULT_ARCH`] (`compute_80`, valid for every CUDA 12.x and 13.x NVRTC). The headers (`philox.cuh`, `common.cuh`)
//! are handed to NVRTC as named headers, so messages name the file they are in.

use super::nvrtc;
use anyhow::{anyhow, bail, Result};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Architecture used when no GPU says otherwise.
pub const DEFAULT_ARCH: &str = "compute_80";

// `SOURCES` and `HEADERS`: every `kernels/*.cu` and `kernels/*.cuh`, listed by `build.rs`.
include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

/// The NVRTC options for `arch` (e.g. `compute_90`).
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--std=c++17".into(),
    ]
}

/// Compiles CUDA C++ `source`, called `name` in messages, with the kernel headers, for `arch`:
/// PTX for a virtual architecture (`compute_XY`), a CUBIN for a real one (`sm_XY`). Errors name
/// the file and carry NVRTC's log.
pub fn compile_source(name: &str, source: &str, arch: &str) -> Result<Vec<u8>> {
    let nv = nvrtc::load().map_err(|e| anyhow!("cannot compile {name}: {e}"))?;
    nv.compile(
        name,
        source,
        HEADERS,
        &options(arch),
        arch.starts_with("sm_"),
    )
    .map_err(|e| anyhow!("kernels/{e}"))
}

/// The kernel entry points (`__global__` functions) defined in the CUDA C++ `source`, in order.
pub fn entry_points(source: &str) -> Vec<&str> {
    source
        .split("__global__")
        .skip(1)
        .filter_map(|rest| rest.split('(').next()?.split_whitespace().last())
        .collect()
}

/// PTX of the kernel file `file` (e.g. `matmul.cu`) for [`DEFAULT_ARCH`]; works without a GPU.
pub fn compile_ptx(file: &str) -> Result<String> {
    String::from_utf8(compile_for(file, DEFAULT_ARCH)?)
        .map_err(|_| anyhow!("kernels/{file}: NVRTC returned PTX that is not UTF-8"))
}

/// The kernel file `file` compiled for `arch` (see [`compile_source`]), once per process.
pub fn compile_for(file: &str, arch: &str) -> Result<Vec<u8>> {
    type Cache = Mutex<HashMap<(String, String), Vec<u8>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (file.to_string(), arch.to_string());
    if let Some(p) = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(&key)
    {
        return Ok(p.clone());
    }
    let Some((_, src)) = SOURCES.iter().find(|(n, _)| *n == file) else {
        bail!("no kernel file kernels/{file}");
    };
    let out = compile_source(file, src, arch)?;
    CACHE
        .get()
        .expect("initialised above")
        .lock()
        .unwrap()
        .insert(key, out.clone());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_file_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu") || n.ends_with(".cuh"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = SOURCES
            .iter()
            .chain(HEADERS)
            .map(|(n, _)| n.to_string())
            .collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn entry_points_are_read_from_the_source() {
        let src = "extern \"C\" __global__ void a(int* x) {}\n__global__ void\nb (float y) {}";
        assert_eq!(entry_points(src), ["a", "b"]);
        for (file, src) in SOURCES {
            assert!(!entry_points(src).is_empty(), "{file} defines no kernel");
        }
    }

    #[test]
    fn unknown_file_is_named() {
        let e = compile_ptx("nope.cu").unwrap_err().to_string();
        assert!(e.contains("kernels/nope.cu"), "{e}");
    }
}
