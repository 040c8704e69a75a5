//! The platform fingerprint: what a run's bits may depend on (CPU, OS, toolchain, GPU).

use serde::Serialize;

/// Facts about the machine and build a report was made on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Platform {
    /// Platform class for snapshots, e.g. `cpu-x86_64`.
    pub class: String,
    /// `std::env::consts::OS`.
    pub os: String,
    /// `std::env::consts::ARCH`.
    pub arch: String,
    /// CPU model name (from `/proc/cpuinfo` where available).
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// `rustc --version` of the build.
    pub rustc: String,
    /// bitexact version.
    pub bitexact: String,
}

impl Platform {
    /// The fingerprint of this process's machine.
    pub fn detect() -> Platform {
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
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            rustc: env!("BITEXACT_RUSTC_VERSION").into(),
            bitexact: env!("CARGO_PKG_VERSION").into(),
        }
    }
}
