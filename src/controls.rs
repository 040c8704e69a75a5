//! Controls: the switches every run is made under, with environment overrides.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The switches a run is made under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Controls {
    /// Base seed of every random stream.
    pub seed: u64,
    /// Deterministic-algorithms switch: only deterministic implementations may run.
    pub deterministic: bool,
    /// Autotune switch: time candidate implementations per shape and keep the fastest.
    pub benchmark: bool,
    /// Data-loader worker threads (0 = load on the calling thread).
    pub workers: usize,
    /// CPU thread-pool size.
    pub threads: usize,
    /// The thread counts `--vary threads` gives even and odd runs (default
    /// `default_thread_pair`; `--vary threads=A,B` chooses them).
    #[serde(default = "default_thread_pair")]
    pub thread_pair: [usize; 2],
    /// The worker counts `--vary workers` gives even and odd runs (default 0 and 3;
    /// `--vary workers=A,B` chooses them).
    #[serde(default = "default_worker_pair")]
    pub worker_pair: [usize; 2],
    /// The batch sizes `--vary batch` gives a program's even and odd runs through `{batch}`
    /// in its command (default 1 and 8; `--vary batch=A,B` chooses them).
    #[serde(
        default = "default_batch_pair",
        skip_serializing_if = "is_default_batch_pair"
    )]
    pub batch_pair: [usize; 2],
}

/// The batch sizes `--vary batch` compares in a program unless told: a request alone against
/// a batch of 8.
pub fn default_batch_pair() -> [usize; 2] {
    [1, 8]
}

fn is_default_batch_pair(p: &[usize; 2]) -> bool {
    *p == default_batch_pair()
}

/// The thread counts `--vary threads` compares unless told: 1 against the machine's cores,
/// at most 4 and at least 2 (a 2-core machine gets 1 vs 2, not an oversubscribed 1 vs 4).
pub fn default_thread_pair() -> [usize; 2] {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    [1, cores.clamp(2, 4)]
}

/// The worker counts `--vary workers` compares unless told: 0 (load in the calling thread)
/// against 3.
pub fn default_worker_pair() -> [usize; 2] {
    [0, 3]
}

impl Default for Controls {
    /// Seed 0, deterministic on, benchmark off, 0 workers, one thread per available core.
    fn default() -> Self {
        Controls {
            seed: 0,
            deterministic: true,
            benchmark: false,
            workers: 0,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            thread_pair: default_thread_pair(),
            worker_pair: default_worker_pair(),
            batch_pair: default_batch_pair(),
        }
    }
}

/// The environment variables that override controls.
pub const ENV_VARS: [&str; 5] = [
    crate::protocol::SEED_ENV,
    crate::protocol::DETERMINISTIC_ENV,
    crate::protocol::BENCHMARK_ENV,
    crate::protocol::WORKERS_ENV,
    crate::protocol::THREADS_ENV,
];

/// Parses `on/off`, `true/false`, `1/0`, `yes/no` (case-insensitive).
pub fn parse_switch(s: &str) -> Result<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => bail!("expected on or off, got {s:?}"),
    }
}

impl Controls {
    /// Defaults overridden by `BITEXACT_SEED`, `BITEXACT_DETERMINISTIC`, `BITEXACT_BENCHMARK`,
    /// `BITEXACT_WORKERS`, `BITEXACT_THREADS`; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<Controls> {
        Controls::from_env_where(|_| true)
    }

    /// Like [`Controls::from_env`], reading only the variables `read` accepts (the CLI skips
    /// those its flags override, so a flag wins over a bad value). A value that is not UTF-8
    /// is an error naming the variable, never silently ignored.
    pub fn from_env_where(read: impl Fn(&str) -> bool) -> Result<Controls> {
        for k in ENV_VARS.iter().filter(|k| read(k)) {
            if let Some(v) = std::env::var_os(k) {
                if v.to_str().is_none() {
                    bail!("{k}={v:?}: not valid UTF-8");
                }
            }
        }
        Controls::default().with_env(|k| if read(k) { std::env::var(k).ok() } else { None })
    }

    /// Applies overrides read through `get` (testable without touching the process environment).
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<String>) -> Result<Controls> {
        let read = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        if let Some(v) = read(crate::protocol::SEED_ENV) {
            self.seed = v
                .trim()
                .parse()
                .with_context(|| format!("BITEXACT_SEED={v:?}: not a u64"))?;
        }
        if let Some(v) = read(crate::protocol::DETERMINISTIC_ENV) {
            self.deterministic =
                parse_switch(v.trim()).context(crate::protocol::DETERMINISTIC_ENV)?;
        }
        if let Some(v) = read(crate::protocol::BENCHMARK_ENV) {
            self.benchmark = parse_switch(v.trim()).context(crate::protocol::BENCHMARK_ENV)?;
        }
        if let Some(v) = read(crate::protocol::WORKERS_ENV) {
            self.workers = v
                .trim()
                .parse()
                .with_context(|| format!("BITEXACT_WORKERS={v:?}: not a count"))?;
        }
        if let Some(v) = read(crate::protocol::THREADS_ENV) {
            let n: usize = v
                .trim()
                .parse()
                .with_context(|| format!("BITEXACT_THREADS={v:?}: not a count"))?;
            if n == 0 {
                bail!("BITEXACT_THREADS must be at least 1");
            }
            self.threads = n;
        }
        Ok(self)
    }

    /// Sets what CUDA libraries read from the environment (before any CUDA context exists):
    /// `CUBLAS_WORKSPACE_CONFIG=:4096:8` when deterministic, as PyTorch documents.
    pub fn export_library_env(&self) {
        if self.deterministic && std::env::var_os("CUBLAS_WORKSPACE_CONFIG").is_none() {
            std::env::set_var("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
        }
    }

    /// Short form for tables: `seed=0 det=on bench=off workers=0 threads=2`.
    pub fn summary(&self) -> String {
        let sw = |b: bool| if b { "on" } else { "off" };
        format!(
            "seed={} deterministic={} benchmark={} workers={} threads={}",
            self.seed,
            sw(self.deterministic),
            sw(self.benchmark),
            self.workers,
            self.threads
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn env_overrides_apply() {
        let c = Controls::default()
            .with_env(env(&[
                ("BITEXACT_SEED", "17"),
                ("BITEXACT_DETERMINISTIC", "off"),
                ("BITEXACT_BENCHMARK", "ON"),
                ("BITEXACT_WORKERS", "4"),
                ("BITEXACT_THREADS", "3"),
            ]))
            .unwrap();
        assert_eq!(
            (c.seed, c.deterministic, c.benchmark, c.workers, c.threads),
            (17, false, true, 4, 3)
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = Controls::default()
            .with_env(env(&[("BITEXACT_SEED", "x")]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("BITEXACT_SEED"));
        let e = Controls::default()
            .with_env(env(&[("BITEXACT_BENCHMARK", "maybe")]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("BITEXACT_BENCHMARK"));
        let e = Controls::default()
            .with_env(env(&[("BITEXACT_THREADS", "0")]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("BITEXACT_THREADS"));
    }
}
