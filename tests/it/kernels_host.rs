//! Runs the CUDA kernels of `kernels/*.cu` on the CPU through a small host emulation of the CUDA
//! execution model (`tests/emu/cuda_host.hpp`: one OS thread per GPU thread, `__syncthreads` as
//! a barrier, `__shared__` as block-wide statics), compiled with the system C++ compiler and
//! `-ffp-contract=off` (the host side of NVRTC's `--fmad=false`). This checks, without a GPU,
//! the kernels' indexing, synchronisation and summation orders: the deterministic kernels must
//! give the CPU implementations' bits, the Philox kernel the CPU's stream for any grid.
//! The kernel files are the library's (`kernels::SOURCES`), all included in one generated
//! translation unit with `tests/emu/kernels.cpp`. Launch geometries come from
//! `src/backend/cuda/geometry.rs`. Without a C++20 compiler the tests print a skip message and
//! pass.

use crate::common;
use bitexact::backend::cuda::geometry::{self, Geometry};
use bitexact::backend::cuda::{kernels, ops::TILED16, ops::TILED32};
use bitexact::backend::Backend;
use bitexact::rng::Stream;
use bitexact::Ctx;
use bitexact::{ops, Controls};
use libloading::Library;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::OnceLock;

type Body<'a> = &'a (dyn Fn() + Sync);
type Launch =
    unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, u32, u32, u32, u32, u32, u32);

/// The emulated kernels, built once per test process (`Err`: why not).
fn emu() -> Result<&'static Library, String> {
    static LIB: OnceLock<Result<Library, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out = tmp.join("libbitexact_emu.so");
        // One translation unit: the emulation header, every kernel file, then the extras.
        let include = |p: PathBuf| format!("#include \"{}\"\n", p.display());
        let mut unit = include(root.join("tests/emu/cuda_host.hpp"));
        for (file, _) in kernels::SOURCES {
            unit += &include(root.join("kernels").join(file));
        }
        unit += &include(root.join("tests/emu/kernels.cpp"));
        let cpp = tmp.join("bitexact_emu_kernels.cpp");
        std::fs::write(&cpp, unit).map_err(|e| format!("writing {}: {e}", cpp.display()))?;
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let o = std::process::Command::new(&cxx)
            .args(["-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared"])
            .args(["-pthread", "-o"])
            .arg(&out)
            .arg(&cpp)
            .output()
            .map_err(|e| format!("no C++ compiler `{cxx}`: {e}"))?;
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            if err.contains("barrier") && err.contains("No such file") {
                return Err(format!("`{cxx}` has no C++20 <barrier>"));
            }
            panic!("compiling the emulated kernels failed:\n{err}");
        }
        // SAFETY: our own freshly built library; its initialisers only set up statics.
        unsafe { Library::new(&out) }.map_err(|e| format!("loading {}: {e}", out.display()))
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn skip(test: &str) -> Option<&'static Library> {
    match emu() {
        Ok(l) => Some(l),
        Err(e) => {
            common::tool_missing(test, &e.to_string());
            None
        }
    }
}

extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` points at the `Body` passed to `launch`, alive for the whole launch.
    let body = unsafe { *(data as *const Body<'_>) };
    body();
}

/// Runs `body` (which calls one kernel) on every thread of `grid` × `block`.
fn launch(lib: &Library, (grid, block): Geometry, body: Body<'_>) {
    // SAFETY: `emu_launch` has the `Launch` signature (tests/emu/cuda_host.hpp).
    unsafe {
        let f = lib.get::<Launch>(b"emu_launch").unwrap();
        let mut b = body;
        f(
            trampoline,
            &mut b as *mut Body<'_> as *mut c_void,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
        );
    }
}

/// A kernel symbol as a function pointer of type `T`.
fn kernel<T: Copy>(lib: &Library, name: &str) -> T {
    // SAFETY: callers name `T` as the kernel's C signature in kernels/*.cu.
    unsafe { *lib.get::<T>(name.as_bytes()).unwrap() }
}

/// A raw pointer that may be shared by the emulated threads (the kernels do the synchronising).
#[derive(Clone, Copy)]
struct P<T>(*mut T);
unsafe impl<T> Sync for P<T> {}
unsafe impl<T> Send for P<T> {}

impl<T> P<T> {
    /// The pointer (a method, so closures capture the whole `P`, not its non-`Sync` field).
    fn p(self) -> *mut T {
        self.0
    }
}

fn ptr<T>(v: &mut [T]) -> P<T> {
    P(v.as_mut_ptr())
}

fn inputs(seed: u64, n: usize) -> Vec<f32> {
    Stream::new(seed, 5)
        .uniform(n)
        .into_iter()
        .map(|u| 2.0 * u - 1.0)
        .collect()
}

fn cpu() -> Ctx {
    Ctx::new(Backend::Cpu, Controls::default())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn philox_kernel_gives_the_cpu_stream_for_any_grid() {
    let Some(lib) = skip("philox_kernel_gives_the_cpu_stream_for_any_grid") else {
        return;
    };
    type F = unsafe extern "C" fn(*mut u32, u64, u64, u64, u64);
    let f: F = kernel(lib, "philox_fill");
    for (seed, offset, n) in [
        (0, 0, 1),
        (7, 1, 7),
        (42, 3, 1000),
        (u64::MAX, (1 << 34) + 2, 999),
    ] {
        let mut want = vec![0u32; n];
        Stream {
            seed,
            stream: 11,
            offset,
        }
        .fill_u32(&mut want);
        for blocks in [Some(1), Some(3), None] {
            let mut got = vec![0u32; n];
            let o = ptr(&mut got);
            launch(lib, geometry::philox(n as u64, blocks), &move || unsafe {
                f(o.p(), n as u64, seed, 11, offset)
            });
            assert_eq!(
                got, want,
                "seed {seed} offset {offset} n {n} blocks {blocks:?}"
            );
        }
    }
}

#[test]
fn dropout_kernel_matches_the_cpu() {
    let Some(lib) = skip("dropout_kernel_matches_the_cpu") else {
        return;
    };
    type F = unsafe extern "C" fn(*const f32, *mut f32, *mut u8, u64, u64, u64, u64, f32, f32);
    let f: F = kernel(lib, "dropout_philox");
    let x = inputs(1, 1500);
    let p = 0.3f32;
    let start = Stream {
        seed: 9,
        stream: 4,
        offset: 5,
    };
    let (want_y, want_m) = ops::dropout::dropout(&mut cpu(), &x, p, &mut start.clone()).unwrap();
    let (mut y, mut m) = (vec![0f32; x.len()], vec![0u8; x.len()]);
    let (xp, yp, mp) = (P(x.as_ptr() as *mut f32), ptr(&mut y), ptr(&mut m));
    let n = x.len() as u64;
    launch(lib, geometry::cover(n), &move || unsafe {
        f(xp.p(), yp.p(), mp.p(), n, 9, 4, 5, p, 1.0 / (1.0 - p))
    });
    assert_eq!(bits(&y), bits(&want_y));
    assert_eq!(m.iter().map(|&b| b != 0).collect::<Vec<_>>(), want_m);
}

#[test]
fn reduce_kernels_match_the_cpu() {
    let Some(lib) = skip("reduce_kernels_match_the_cpu") else {
        return;
    };
    type Chunks = unsafe extern "C" fn(*const f32, u64, *mut f32, u64);
    type Partials = unsafe extern "C" fn(*const f32, u32, *mut f32);
    type Atomic = unsafe extern "C" fn(*const f32, u64, *mut f32);
    let (fc, fp, fa): (Chunks, Partials, Atomic) = (
        kernel(lib, "reduce_chunks"),
        kernel(lib, "reduce_partials"),
        kernel(lib, "reduce_atomic"),
    );
    for n in [1usize, 1000, 100_003, 41 * 16384 + 5] {
        let x = inputs(n as u64, n);
        let want = ops::reduce_sum::reduce_sum(&mut cpu(), &x).unwrap();
        let chunks = n.div_ceil(bitexact::backend::cpu::SUM_CHUNK);
        let mut partials = vec![0f32; chunks];
        let mut out = [0f32; 1];
        let (xp, pp, op) = (P(x.as_ptr() as *mut f32), ptr(&mut partials), ptr(&mut out));
        launch(
            lib,
            geometry::reduce_chunks(chunks as u64),
            &move || unsafe { fc(xp.p(), n as u64, pp.p(), chunks as u64) },
        );
        launch(lib, geometry::reduce_partials(), &move || unsafe {
            fp(pp.p(), chunks as u32, op.p())
        });
        assert_eq!(out[0].to_bits(), want.to_bits(), "n = {n}");
        let mut atomic = [0f32; 1];
        let ap = ptr(&mut atomic);
        launch(lib, geometry::reduce_atomic(n as u64), &move || unsafe {
            fa(xp.p(), n as u64, ap.p())
        });
        assert!(
            (atomic[0] - want).abs() <= 1e-3 * (n as f32).sqrt(),
            "n = {n}"
        );
    }
}

#[test]
fn col_sum_kernels_match_the_cpu() {
    let Some(lib) = skip("col_sum_kernels_match_the_cpu") else {
        return;
    };
    type ColSum = unsafe extern "C" fn(*const f32, u32, u32, *mut f32);
    let (ff, fa): (ColSum, ColSum) = (kernel(lib, "col_sum_fixed"), kernel(lib, "col_sum_atomic"));
    for (rows, cols) in [(1usize, 1usize), (32, 128), (33, 300), (7, 513)] {
        let x = inputs((rows * 1000 + cols) as u64, rows * cols);
        let want = ops::col_sum::col_sum(&mut cpu(), &x, rows, cols).unwrap();
        let xp = P(x.as_ptr() as *mut f32);
        let (r, c) = (rows as u32, cols as u32);
        let mut fixed = vec![0f32; cols];
        let fp = ptr(&mut fixed);
        launch(lib, geometry::col_sum_fixed(c), &move || unsafe {
            ff(xp.p(), r, c, fp.p())
        });
        assert_eq!(bits(&fixed), bits(&want), "{rows}x{cols}");
        let mut atomic = vec![0f32; cols];
        let ap = ptr(&mut atomic);
        launch(lib, geometry::col_sum_atomic(r, c), &move || unsafe {
            fa(xp.p(), r, c, ap.p())
        });
        for (a, w) in atomic.iter().zip(&want) {
            assert!(
                (a - w).abs() <= 1e-4 * rows as f32,
                "{rows}x{cols}: {a} vs {w}"
            );
        }
    }
}

#[test]
fn matmul_kernels_match_the_cpu() {
    let Some(lib) = skip("matmul_kernels_match_the_cpu") else {
        return;
    };
    type Tiled = unsafe extern "C" fn(*const f32, *const f32, *mut f32, u32, u32, u32);
    type Split = unsafe extern "C" fn(*const f32, *const f32, *mut f32, u32, u32, u32, u32, u32);
    let (m, k, n) = (37usize, 150usize, 21usize);
    let (a, b) = (inputs(2, m * k), inputs(3, k * n));
    let want = ops::matmul::matmul(&mut cpu(), &a, &b, m, k, n).unwrap();
    let (ap, bp) = (P(a.as_ptr() as *mut f32), P(b.as_ptr() as *mut f32));
    let (m32, k32, n32) = (m as u32, k as u32, n as u32);
    for kind in [TILED16, TILED32] {
        let (name, geo) = (kind.entry, geometry::matmul_tiled(m32, n32, kind.tile));
        let f: Tiled = kernel(lib, name);
        let mut c = vec![0f32; m * n];
        let cp = ptr(&mut c);
        launch(lib, geo, &move || unsafe {
            f(ap.p(), bp.p(), cp.p(), m32, k32, n32)
        });
        assert_eq!(bits(&c), bits(&want), "{name}");
    }
    let (geo, (seg, splits)) = geometry::matmul_splitk(m32, k32, n32, 4);
    let f: Split = kernel(lib, "matmul_splitk_atomic");
    let mut c = vec![0f32; m * n];
    let cp = ptr(&mut c);
    launch(lib, geo, &move || unsafe {
        f(ap.p(), bp.p(), cp.p(), m32, k32, n32, seg, splits)
    });
    for (x, y) in c.iter().zip(&want) {
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
            "split-K {x} vs {y}"
        );
    }
}

#[test]
fn scatter_kernels_match_the_cpu() {
    let Some(lib) = skip("scatter_kernels_match_the_cpu") else {
        return;
    };
    type Seg = unsafe extern "C" fn(*const f32, *const u64, *const u64, *mut f32, u32, u32);
    type Atomic = unsafe extern "C" fn(*const f32, *const i64, *mut f32, u64, u32);
    let (n, d, m) = (700usize, 5usize, 40usize);
    let src = inputs(4, n * d);
    let mut s = Stream::new(1, 2);
    let index: Vec<i64> = (0..n).map(|_| s.below(m as u32) as i64).collect();
    let want = ops::scatter_add::scatter_add(&mut cpu(), &src, &index, m, d).unwrap();
    let (start, order) = ops::scatter_add::sort_by_index(&index, m);
    let as64 = |v: Vec<usize>| v.into_iter().map(|x| x as u64).collect::<Vec<u64>>();
    let (start, order) = (as64(start), as64(order));
    let f: Seg = kernel(lib, "scatter_segments");
    let mut out = vec![0f32; m * d];
    let (sp, op, stp, outp) = (
        P(src.as_ptr() as *mut f32),
        P(order.as_ptr() as *mut u64),
        P(start.as_ptr() as *mut u64),
        ptr(&mut out),
    );
    launch(lib, geometry::cover((m * d) as u64), &move || unsafe {
        f(sp.p(), op.p(), stp.p(), outp.p(), m as u32, d as u32)
    });
    assert_eq!(bits(&out), bits(&want));
    let f: Atomic = kernel(lib, "scatter_atomic");
    let mut out = vec![0f32; m * d];
    let (ip, outp) = (P(index.as_ptr() as *mut i64), ptr(&mut out));
    launch(lib, geometry::cover((n * d) as u64), &move || unsafe {
        f(sp.p(), ip.p(), outp.p(), n as u64, d as u32)
    });
    for (x, y) in out.iter().zip(&want) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "atomic {x} vs {y}");
    }
}

#[test]
fn row_kernels_match_the_cpu() {
    let Some(lib) = skip("row_kernels_match_the_cpu") else {
        return;
    };
    type Soft = unsafe extern "C" fn(*const f32, *mut f32, u32, u32);
    type Norm = unsafe extern "C" fn(*const f32, *const f32, *const f32, *mut f32, u32, u32, f32);
    let (rows, cols) = (5usize, 517usize);
    let x: Vec<f32> = inputs(6, rows * cols).iter().map(|v| v * 4.0).collect();
    let (g, b) = (inputs(7, cols), inputs(8, cols));
    let xp = P(x.as_ptr() as *mut f32);
    let f: Soft = kernel(lib, "softmax_rows");
    let mut y = vec![0f32; x.len()];
    let yp = ptr(&mut y);
    launch(lib, geometry::rows(rows as u64), &move || unsafe {
        f(xp.p(), yp.p(), rows as u32, cols as u32)
    });
    let want = ops::softmax::softmax(&mut cpu(), &x, rows, cols).unwrap();
    assert_eq!(bits(&y), bits(&want), "softmax (host expf is the CPU's)");
    let f: Norm = kernel(lib, "layer_norm_rows");
    let mut y = vec![0f32; x.len()];
    let (gp, bp, yp) = (
        P(g.as_ptr() as *mut f32),
        P(b.as_ptr() as *mut f32),
        ptr(&mut y),
    );
    launch(lib, geometry::rows(rows as u64), &move || unsafe {
        f(
            xp.p(),
            gp.p(),
            bp.p(),
            yp.p(),
            rows as u32,
            cols as u32,
            1e-5,
        )
    });
    let want = ops::layer_norm::layer_norm(&mut cpu(), &x, &g, &b, rows, cols, 1e-5).unwrap();
    assert_eq!(bits(&y), bits(&want), "layer_norm");
}

#[test]
fn sha256_kernel_matches_sha2_and_the_tensor_digest() {
    let Some(lib) = skip("sha256_kernel_matches_sha2_and_the_tensor_digest") else {
        return;
    };
    use sha2::{Digest as _, Sha256};
    type F = unsafe extern "C" fn(*const u8, u64, u64, *mut u8);
    let f: F = kernel(lib, "sha256_chunks");
    let hash = |data: &[u8], chunk: usize| -> Vec<[u8; 32]> {
        let chunks = data.len().div_ceil(chunk);
        let mut out = vec![0u8; 32 * chunks];
        let (dp, op) = (P(data.as_ptr() as *mut u8), ptr(&mut out));
        let (len, cb) = (data.len() as u64, chunk as u64);
        launch(lib, geometry::sha256(chunks as u64), &move || unsafe {
            f(dp.p(), len, cb, op.p())
        });
        out.chunks_exact(32)
            .map(|c| c.try_into().unwrap())
            .collect()
    };
    let mut s = Stream::new(3, 3);
    let mut words = vec![0u32; (1 << 19) + 16];
    s.fill_u32(&mut words);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    // Tails around the padding boundaries: 0, 55, 56, 63, 64 and 119 bytes after full blocks.
    for (len, chunk) in [
        (1, 1),
        (55, 64),
        (56, 64),
        (63, 64),
        (64, 64),
        (64 * 9 + 119, 1000),
    ] {
        let data = &bytes[..len];
        let want: Vec<[u8; 32]> = data
            .chunks(chunk)
            .map(|c| Sha256::digest(c).into())
            .collect();
        assert_eq!(hash(data, chunk), want, "len {len} chunk {chunk}");
    }
    // A tensor of 2 MiB + 12 bytes: three chunks combined as the CPU digest does.
    let n = (bitexact::digest::CHUNK_BYTES * 2 + 12) / 4;
    let t = bitexact::Tensor::from_slice(&[n], &words[..n]);
    let chunks = hash(t.bytes(), bitexact::digest::CHUNK_BYTES);
    assert_eq!(chunks.len(), 3);
    assert_eq!(
        bitexact::digest::from_chunk_digests(&t, &chunks),
        bitexact::digest::tensor_digest(&t)
    );
}

#[test]
fn fingerprint_kernel_matches_the_host_fingerprint_for_any_grid_and_alignment() {
    let test = "fingerprint_kernel_matches_the_host_fingerprint_for_any_grid_and_alignment";
    let Some(lib) = skip(test) else {
        return;
    };
    use bitexact::fingerprint::{fingerprint, Fingerprint};
    type F = unsafe extern "C" fn(*const u64, *mut u64);
    let f: F = kernel(lib, "fingerprint_sums");
    // All of `data` in one launch of `blocks` blocks along x (None: the library's geometry),
    // each buffer at byte offset `skew` of its allocation.
    let run = |data: &[&[u8]], skew: usize, blocks: Option<u32>| -> Vec<Fingerprint> {
        let bufs: Vec<Vec<u8>> = data
            .iter()
            .map(|d| [vec![0xa5; skew], d.to_vec()].concat())
            .collect();
        let mut items: Vec<u64> = bufs
            .iter()
            .zip(data)
            .flat_map(|(b, d)| [b.as_ptr() as u64 + skew as u64, d.len() as u64])
            .collect();
        let mut out = vec![0u64; items.len()];
        let words = data.iter().map(|d| d.len().div_ceil(8) as u64).max();
        let mut geo = geometry::fingerprint(words.unwrap_or(0), data.len() as u32);
        if let Some(b) = blocks {
            geo.0 .0 = b;
        }
        let (ip, op) = (ptr(&mut items), ptr(&mut out));
        launch(lib, geo, &move || unsafe { f(ip.p(), op.p()) });
        let sums = out.chunks_exact(2).map(|a| [a[0], a[1]]);
        sums.zip(data)
            .map(|(a, d)| Fingerprint::finish(a, d.len() as u64))
            .collect()
    };
    let mut words = vec![0u32; 4100];
    Stream::new(7, 2).fill_u32(&mut words);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let lens = [0usize, 1, 7, 8, 9, 2047, 2049, 16_385];
    let data: Vec<&[u8]> = lens.iter().map(|&l| &bytes[..l]).collect();
    let want: Vec<Fingerprint> = data.iter().map(|d| fingerprint(d)).collect();
    for (skew, blocks) in [(0, None), (3, None), (5, Some(1)), (0, Some(3))] {
        assert_eq!(
            run(&data, skew, blocks),
            want,
            "skew {skew}, blocks {blocks:?}"
        );
    }
}

#[test]
fn philox_normal_device_math_matches_the_cpu() {
    let Some(lib) = skip("philox_normal_device_math_matches_the_cpu") else {
        return;
    };
    let normal: unsafe extern "C" fn(u32, u32) -> f32 = kernel(lib, "emu_philox_normal");
    let ln: unsafe extern "C" fn(f64) -> f64 = kernel(lib, "emu_det_ln");
    let cos: unsafe extern "C" fn(f64) -> f64 = kernel(lib, "emu_det_cos_2pi");
    let mut words = vec![0u32; 400_000];
    Stream::new(5, 6).fill_u32(&mut words);
    words.extend([
        0,
        0,
        0xff,
        0xffff_ffff,
        0xffff_ffff,
        0x100,
        0x8000_0000,
        0x4000_0000,
    ]);
    for p in words.chunks_exact(2) {
        let want = bitexact::rng::normal_from_words(p[0], p[1]);
        // SAFETY: plain functions of their arguments.
        let got = unsafe { normal(p[0], p[1]) };
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "words {:#x} {:#x}",
            p[0],
            p[1]
        );
    }
    for i in 0..10_000u32 {
        let u = i as f64 / 10_000.0;
        let x = (i as f64 + 1.0) / 7_777.0;
        unsafe {
            assert_eq!(
                cos(u).to_bits(),
                bitexact::rng::det_cos_2pi(u).to_bits(),
                "cos {u}"
            );
            assert_eq!(
                ln(x).to_bits(),
                bitexact::rng::det_ln(x).to_bits(),
                "ln {x}"
            );
        }
    }
}
