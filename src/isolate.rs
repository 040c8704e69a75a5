//! Child processes of the `bitexact` binary: one run in a fresh process (`--vary process`) or a
//! whole case in its own process (`--isolate`), so that a crash (abort, segfault), a hang
//! (`--timeout`) or running out of memory (`--memory-limit`) becomes that case's `error` with
//! its cause, and the report still completes.
//!
//! Protocol: the parent runs `bitexact __child run|check --case NAME --backend B --json JSON
//! --out FILE [--memory-limit MB]`. `run` writes one run's outputs (see [`crate::tensor_io`])
//! with its algorithms and trace as metadata; `check` writes the case's `CaseReport` as JSON.
//! Results travel through FILE, never stdout, so a case that prints cannot corrupt them.
//! Cases are found by name in the built-in registry, so this works for built-in cases only.

use crate::backend::Backend;
use crate::harness::{self, CaseReport, Options, RunResult};
use crate::tensor_io;
use crate::trace::TraceEntry;
use crate::vary::RunSettings;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How to start children: the binary, a per-child time limit and an address-space limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildConfig {
    /// Path of the `bitexact` binary.
    pub exe: PathBuf,
    /// Kill the child after this long.
    pub timeout: Option<Duration>,
    /// Address-space limit of the child in MiB (`setrlimit(RLIMIT_AS)`).
    pub memory_limit_mb: Option<u64>,
}

impl ChildConfig {
    /// Children of the running binary, no limits.
    pub fn current() -> Result<ChildConfig> {
        Ok(ChildConfig {
            exe: std::env::current_exe().context("locating the bitexact binary")?,
            timeout: None,
            memory_limit_mb: None,
        })
    }
}

/// Metadata of a run made in a child.
#[derive(Serialize, Deserialize)]
struct RunMeta {
    algorithms: BTreeMap<String, String>,
    trace: Option<Vec<TraceEntry>>,
    seconds: f64,
    #[serde(default)]
    findings: Vec<String>,
    #[serde(default)]
    peak_bytes: Option<u64>,
}

fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "bitexact-{}-{}-{tag}.out",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Names a signal for messages.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// Why a child failed, from its exit status and the tail of its stderr.
fn failure_cause(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let is_backtrace = |l: &str| {
        let t = l.trim_start();
        t.starts_with("at ")
            || t.starts_with("note:")
            || t.starts_with("stack backtrace")
            || t.split_once(':')
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    let tail: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !is_backtrace(l))
        .collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" | ");
    let oom = stderr.contains("memory allocation of") || stderr.contains("out of memory");
    let what = match status.signal() {
        _ if oom => "ran out of memory".to_string(),
        Some(9) => "killed by SIGKILL (the OOM killer or a memory limit?)".to_string(),
        Some(s) => format!("crashed with signal {s} ({})", signal_name(s)),
        None => format!("exited with status {}", status.code().unwrap_or(-1)),
    };
    if tail.is_empty() {
        what
    } else {
        format!("{what}: {tail}")
    }
}

/// Runs the binary with `args` plus `--out FILE`, enforcing the timeout; returns FILE's bytes.
fn run_child(cfg: &ChildConfig, args: &[String]) -> Result<Vec<u8>> {
    let out = temp_path("child");
    let mut cmd = Command::new(&cfg.exe);
    cmd.arg("__child").args(args).arg("--out").arg(&out);
    if let Some(mb) = cfg.memory_limit_mb {
        cmd.arg("--memory-limit").arg(mb.to_string());
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", cfg.exe.display()))?;
    let mut stderr_pipe = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if cfg.timeout.is_some_and(|t| t0.elapsed() > t) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&out);
            bail!(
                "timed out after {:.1}s (--timeout) and was killed",
                t0.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = reader.join().unwrap_or_default();
    let bytes = std::fs::read(&out);
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        bail!("{}", failure_cause(status, &stderr));
    }
    bytes.with_context(|| format!("child wrote no result ({})", out.display()))
}

fn case_args(mode: &str, case: &str, backend: Backend, json: String) -> Vec<String> {
    vec![
        mode.into(),
        "--case".into(),
        case.into(),
        "--backend".into(),
        backend.name().into(),
        "--json".into(),
        json,
    ]
}

/// One run of `case` in a fresh child process.
pub fn run_once(
    cfg: &ChildConfig,
    case: &str,
    backend: Backend,
    settings: &RunSettings,
) -> Result<RunResult> {
    let json = serde_json::to_string(settings)?;
    let bytes = run_child(cfg, &case_args("run", case, backend, json))?;
    let (meta, outputs) = tensor_io::decode(&bytes)?;
    let meta: RunMeta = serde_json::from_str(&meta).context("child run metadata")?;
    Ok(RunResult {
        outputs,
        algorithms: meta.algorithms,
        trace: meta.trace,
        seconds: meta.seconds,
        peak_bytes: meta.peak_bytes,
        findings: meta.findings,
    })
}

/// The whole check of `case` in a child process; a crash, hang or OOM becomes an `error` report.
pub fn check(
    cfg: &ChildConfig,
    case: &str,
    backend: Backend,
    controls: &crate::Controls,
    opts: &Options,
) -> CaseReport {
    let t0 = Instant::now();
    let json = serde_json::to_string(&(controls, opts)).expect("options serialise");
    let result = run_child(cfg, &case_args("check", case, backend, json))
        .and_then(|b| serde_json::from_slice::<CaseReport>(&b).context("child report"));
    result.unwrap_or_else(|e| {
        let mut r = harness::empty_report(case, backend);
        r.verdict = crate::Verdict::Error;
        r.message = Some(format!("isolated process {e:#}"));
        r.seconds = t0.elapsed().as_secs_f64();
        r
    })
}

/// Applies an address-space limit to this process (child side of `--memory-limit`).
pub fn limit_memory(mb: u64) -> Result<()> {
    let bytes = mb.saturating_mul(1 << 20);
    let lim = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
        bail!(
            "setrlimit(RLIMIT_AS, {mb} MiB) failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The child side: `mode` is `run` or `check`; writes the result to `out`.
pub fn child_main(
    mode: &str,
    case: &str,
    backend: Backend,
    json: &str,
    out: &Path,
    memory_limit_mb: Option<u64>,
) -> Result<()> {
    if let Some(mb) = memory_limit_mb {
        limit_memory(mb)?;
    }
    let c = crate::cases::find(case).ok_or_else(|| anyhow!("no case named {case:?}"))?;
    let bytes = match mode {
        "run" => {
            let settings: RunSettings =
                serde_json::from_str(json).context("--json run settings")?;
            let r = harness::run_in_process(c.as_ref(), backend, &settings)?;
            let meta = RunMeta {
                algorithms: r.algorithms,
                trace: r.trace,
                seconds: r.seconds,
                findings: r.findings,
                peak_bytes: r.peak_bytes,
            };
            tensor_io::encode(&serde_json::to_string(&meta)?, &r.outputs)
        }
        "check" => {
            let (controls, mut opts): (crate::Controls, Options) =
                serde_json::from_str(json).context("--json options")?;
            opts.isolated = true;
            serde_json::to_vec(&harness::check_case_with(
                c.as_ref(),
                backend,
                &controls,
                &opts,
            ))?
        }
        other => bail!("unknown child mode {other:?}"),
    };
    let tmp = out.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("renaming to {}", out.display()))?;
    Ok(())
}
