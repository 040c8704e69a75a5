//! The platform fingerprint: what a run's bits may depend on (CPU, OS, toolchain, GPU).
//!
//! Snapshots ([`crate::snapshot`]) are kept per *platform class* (`Platform::class_for`:
//! `cpu-x86_64`, `cpu-aarch64`, `cuda-sm80`, `cuda-sm90`, ...) and store the whole fingerprint
//! as metadata, so a mismatch can say what differs between the machine that wrote the snapshot
//! and this one (`Platform::fields`). Every kept run directory records it too, with the
//! program's own platform file, and `bitexact diff-trace` says what differs between two
//! (`record`).

use crate::backend::Backend;
use serde::Serialize;

pub mod record;

/// Facts about the GPU a CUDA run used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GpuFingerprint {
    /// Device name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability as `major.minor`, e.g. `9.0`.
    pub compute_capability: String,
    /// Driver version, e.g. `550.54.15`.
    pub driver: String,
    /// CUDA runtime/driver API version, e.g. `12.4`.
    pub cuda: String,
    /// NVRTC version, e.g. `12.8`.
    pub nvrtc: String,
}

impl GpuFingerprint {
    /// Platform class of CUDA runs on this GPU: `cuda-sm<major><minor>`, e.g. `cuda-sm90`.
    pub fn class(&self) -> String {
        format!("cuda-sm{}", self.compute_capability.replace('.', ""))
    }
}

/// The GPU fingerprint of this machine, or `None` when no GPU is usable; queried once per
/// process (the query may create a CUDA context) and cached.
pub fn gpu_fingerprint() -> Option<GpuFingerprint> {
    static GPU: std::sync::OnceLock<Option<GpuFingerprint>> = std::sync::OnceLock::new();
    GPU.get_or_init(query_gpu).clone()
}

/// Asks the CUDA backend for the device's name, compute capability, driver, CUDA and NVRTC
/// versions.
///
/// The CUDA backend's device query ([`crate::backend::cuda::device_info`]); `None` without a
/// usable GPU (CUDA snapshots then fall back to the class `cuda-unknown`).
fn query_gpu() -> Option<GpuFingerprint> {
    let info = crate::backend::cuda::device_info()?;
    Some(GpuFingerprint {
        name: info.name,
        compute_capability: sm_to_major_minor(&info.compute_capability),
        driver: info.driver_version,
        cuda: info.cuda_version,
        nvrtc: info.nvrtc_version,
    })
}

/// `sm90` → `9.0`, `sm100` → `10.0` (the last digit is the minor version).
fn sm_to_major_minor(sm: &str) -> String {
    let digits = sm.trim_start_matches("sm");
    match digits.len() {
        0 | 1 => digits.to_string(),
        n => format!("{}.{}", &digits[..n - 1], &digits[n - 1..]),
    }
}

/// Facts about the machine and build a report was made on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Platform {
    /// Platform class of CPU runs for snapshots, e.g. `cpu-x86_64`.
    pub class: String,
    /// `std::env::consts::OS`.
    pub os: String,
    /// `std::env::consts::ARCH`.
    pub arch: String,
    /// CPU model name (from `/proc/cpuinfo` where available).
    pub cpu: String,
    /// CPU features that change which code paths run (e.g. `avx2,fma,sha`), detected at run time.
    pub cpu_features: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// C library version (glibc on GNU targets; `None` elsewhere).
    pub libc: Option<String>,
    /// `rustc --version` of the build.
    pub rustc: String,
    /// bitexact version.
    pub bitexact: String,
    /// The GPU, when one is usable ([`gpu_fingerprint`]).
    pub gpu: Option<GpuFingerprint>,
}

impl Platform {
    /// The fingerprint of this process's machine: detected once per process (reading
    /// `/proc/cpuinfo`, probing CPU features and the GPU), then cloned.
    pub fn detect() -> Platform {
        static DETECTED: std::sync::OnceLock<Platform> = std::sync::OnceLock::new();
        DETECTED.get_or_init(Platform::probe).clone()
    }

    /// Detects the fingerprint (what [`Platform::detect`] caches).
    fn probe() -> Platform {
        #[cfg(test)]
        PROBES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Platform {
            class: format!("cpu-{}", std::env::consts::ARCH),
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            cpu,
            cpu_features: cpu_features().join(","),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            libc: libc_version(),
            rustc: env!("BITEXACT_RUSTC_VERSION").into(),
            bitexact: env!("CARGO_PKG_VERSION").into(),
            gpu: gpu_fingerprint(),
        }
    }

    /// Snapshot class of runs on `backend` here: `cpu-<arch>`, or `cuda-sm<cc>` (`cuda-unknown`
    /// when no GPU fingerprint is available).
    pub fn class_for(&self, backend: Backend) -> String {
        match backend {
            Backend::Cpu => self.class.clone(),
            Backend::Cuda => self
                .gpu
                .as_ref()
                .map_or_else(|| "cuda-unknown".to_string(), GpuFingerprint::class),
        }
    }

    /// The fingerprint as `(field, value)` pairs in a fixed order, as stored in snapshots.
    /// GPU fields are present only with a GPU; `cores` is kept for information only.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut f = vec![
            ("class", self.class.clone()),
            ("os", self.os.clone()),
            ("arch", self.arch.clone()),
            ("cpu", self.cpu.clone()),
            ("cpu_features", self.cpu_features.clone()),
            ("cores", self.cores.to_string()),
            (
                "libc",
                self.libc.clone().unwrap_or_else(|| "unknown".into()),
            ),
            ("rustc", self.rustc.clone()),
            ("bitexact", self.bitexact.clone()),
        ];
        if let Some(g) = &self.gpu {
            f.extend([
                ("gpu", g.name.clone()),
                ("compute_capability", g.compute_capability.clone()),
                ("driver", g.driver.clone()),
                ("cuda", g.cuda.clone()),
                ("nvrtc", g.nvrtc.clone()),
            ]);
        }
        f
    }
}

/// How many times [`Platform::probe`] ran (tests only).
#[cfg(test)]
static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// CPU features that select different code paths in compilers and math libraries.
#[allow(unused_mut)]
fn cpu_features() -> Vec<&'static str> {
    let mut f: Vec<&'static str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($feat:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($feat) {
                    f.push($feat);
                }
            )*};
        }
        probe!(
            "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "sha", "aes"
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! probe {
            ($($feat:tt),*) => {$(
                if std::arch::is_aarch64_feature_detected!($feat) {
                    f.push($feat);
                }
            )*};
        }
        probe!("neon", "fp16", "sve", "sve2", "sha2", "aes");
    }
    f
}

/// The C library's version string (`glibc 2.36`), where it can be asked.
fn libc_version() -> Option<String> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        Some(format!("glibc {}", v.to_string_lossy()))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_capability_from_sm_names() {
        assert_eq!(sm_to_major_minor("sm90"), "9.0");
        assert_eq!(sm_to_major_minor("sm100"), "10.0");
        let gpu = GpuFingerprint {
            name: "x".into(),
            compute_capability: sm_to_major_minor("sm80"),
            driver: "d".into(),
            cuda: "c".into(),
            nvrtc: "n".into(),
        };
        assert_eq!(gpu.class(), "cuda-sm80");
    }

    #[test]
    fn detect_runs_once_per_process() {
        use std::sync::atomic::Ordering::SeqCst;
        let a = Platform::detect();
        let probes = PROBES.load(SeqCst);
        assert_eq!(Platform::detect(), a);
        assert_eq!(Platform::detect(), a);
        assert_eq!(PROBES.load(SeqCst), probes, "detect probed again");
        assert!(probes >= 1);
    }

    #[test]
    fn classes() {
        let p = Platform::detect();
        assert_eq!(
            p.class_for(Backend::Cpu),
            format!("cpu-{}", std::env::consts::ARCH)
        );
        let mut q = p.clone();
        q.gpu = Some(GpuFingerprint {
            name: "NVIDIA H100".into(),
            compute_capability: "9.0".into(),
            driver: "550.54".into(),
            cuda: "12.4".into(),
            nvrtc: "12.8".into(),
        });
        assert_eq!(q.class_for(Backend::Cuda), "cuda-sm90");
        assert!(q.fields().iter().any(|(k, v)| *k == "nvrtc" && v == "12.8"));
        assert!(p.fields().iter().all(|(k, _)| *k != "gpu"));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_is_detected() {
        assert!(libc_version().unwrap().starts_with("glibc 2."));
    }
}
