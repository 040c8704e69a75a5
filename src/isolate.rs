//! Child processes: one run in a fresh process (`--vary process`) or a whole case in its own
//! process (`--isolate`), so that a crash (abort, segfault), a hang (`--timeout`) or running
//! out of memory (`--memory-limit`) becomes that case's `error` with its cause, and the report
//! still completes.
//!
//! **Finding the case.** The harness never looks cases up itself: the caller says how to start
//! a child that knows the case ([`Launcher`]), and the child side ([`serve`]) is handed the
//! case by whoever owns it.
//! - [`Launcher::Binary`]: the `bitexact` binary, `EXE __child`; its `main` finds the case in
//!   the built-in registry and calls [`serve`].
//! - [`Launcher::TestBinary`]: a user's own `cargo test` binary, re-run for one test
//!   (`EXE --exact TEST --nocapture --test-threads=1`), the way rusty-fork does. The test runs
//!   again up to its `bitexact::check(&case)`, which sees the request ([`request`]), serves it
//!   and exits the child process.
//!
//! **Protocol.** The request (mode, case name, backend, settings or options, output file,
//! memory limit) travels as JSON in the `BITEXACT_CHILD` environment variable; the result comes
//! back through the output file, never stdout, so a case that prints cannot corrupt it. A run
//! ([`run_in_child`]) writes its outputs ([`crate::tensor_io`]) with its algorithms and trace
//! as metadata; an assessment ([`assess_in_child`]) writes the case's `CaseReport` as JSON.
//!
//! **Hygiene** is the process plumbing's ([`crate::process`]): every child runs in its own
//! process group, killed as a whole on timeout (grandchildren included), receives SIGKILL when
//! its parent dies (`PR_SET_PDEATHSIG`), and is registered so that SIGTERM, SIGINT or SIGHUP
//! to bitexact kill it. An isolated case without `--timeout` is limited to
//! [`DEFAULT_ISOLATE_TIMEOUT`].

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::harness::{self, CaseRun, ChildRunner, Options};
pub use crate::harness::{ChildConfig, Launcher};
use crate::outcome::{CaseReport, Failure, FailureKind};
use crate::process::{contain, kill_group, register, signal_name};
use crate::tensor_io;
use crate::trace::TraceEntry;
use crate::vary::RunSettings;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Environment variable carrying a child's request.
pub const REQUEST_ENV: &str = "BITEXACT_CHILD";

/// Time limit of an isolated case when none is given (`--isolate` without `--timeout`).
pub const DEFAULT_ISOLATE_TIMEOUT: Duration = Duration::from_secs(600);

/// The command that starts a child for `launcher`, before the request is attached.
fn command(launcher: &Launcher) -> Command {
    match launcher {
        Launcher::Binary(exe) => {
            let mut c = Command::new(exe);
            c.arg("__child");
            c
        }
        Launcher::Command { program, args } => {
            let mut c = Command::new(program);
            c.args(args).arg("__child");
            c
        }
        Launcher::TestBinary { exe, test } => {
            let mut c = Command::new(exe);
            c.args(["--exact", test, "--nocapture", "--test-threads=1", "-q"]);
            c
        }
    }
}

/// What a child is asked to do.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Mode {
    /// One run under these settings.
    Run(RunSettings),
    /// The whole check under these controls and options.
    Check(Controls, Options),
}

/// A child's request, read from [`REQUEST_ENV`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    /// What to do.
    pub mode: Mode,
    /// The case, by name.
    pub case: String,
    /// The backend.
    pub backend: Backend,
    /// Where to write the result.
    pub out: PathBuf,
    /// Address-space limit to apply first, in MiB.
    pub memory_limit_mb: Option<u64>,
}

/// Metadata of a run made in a child.
#[derive(Serialize, Deserialize)]
struct ChildRunMeta {
    algorithms: BTreeMap<String, String>,
    trace: Option<Vec<TraceEntry>>,
    #[serde(default)]
    recorded_ops: usize,
    seconds: f64,
    #[serde(default)]
    findings: Vec<String>,
    #[serde(default)]
    peak_bytes: Option<u64>,
    #[serde(default)]
    notes: Vec<String>,
}

fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "bitexact-{}-{}-{tag}.out",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
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

/// Starts a child for `request`, enforcing the timeout; returns the output file's bytes.
fn run_child(cfg: &ChildConfig, mode: Mode, case: &str, backend: Backend) -> Result<Vec<u8>> {
    let out = temp_path("child");
    let request = Request {
        mode,
        case: case.to_string(),
        backend,
        out: out.clone(),
        memory_limit_mb: cfg.memory_limit_mb,
    };
    let mut cmd = command(&cfg.launcher);
    cmd.env(REQUEST_ENV, serde_json::to_string(&request)?);
    contain(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting a child process ({:?})", cfg.launcher))?;
    let registered = register(child.id() as i32);
    let mut stderr_pipe = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {}
            Err(e) => {
                kill_group(&mut child);
                return Err(e).context("waiting for a child process");
            }
        }
        if cfg.timeout.is_some_and(|t| t0.elapsed() > t) {
            kill_group(&mut child);
            let _ = std::fs::remove_file(&out);
            bail!(
                "timed out after {:.1}s (--timeout) and was killed with its process group",
                t0.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The child is gone; anything it left in its group (a grandchild holding stderr) goes too.
    kill_group(&mut child);
    drop(registered);
    let stderr = reader.join().unwrap_or_default();
    let bytes = std::fs::read(&out);
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        bail!("{}", failure_cause(status, &stderr));
    }
    bytes.with_context(|| match &cfg.launcher {
        Launcher::TestBinary { test, .. } => format!(
            "the child wrote no result: test {test:?} did not reach bitexact::check for this case"
        ),
        Launcher::Binary(_) | Launcher::Command { .. } => "the child wrote no result".to_string(),
    })
}

/// Starts fresh-process runs with a [`ChildConfig`] (the harness's [`ChildRunner`]).
pub struct Children<'a>(pub &'a ChildConfig);

impl ChildRunner for Children<'_> {
    fn run_in_child(
        &self,
        case: &str,
        backend: Backend,
        settings: &RunSettings,
    ) -> Result<CaseRun, Failure> {
        run_in_child(self.0, case, backend, settings).map_err(|e| child_failure(&e))
    }
}

/// One run of `case` in a fresh child process.
pub fn run_in_child(
    cfg: &ChildConfig,
    case: &str,
    backend: Backend,
    settings: &RunSettings,
) -> Result<CaseRun> {
    let bytes = run_child(cfg, Mode::Run(settings.clone()), case, backend)?;
    let (meta, outputs) = tensor_io::decode(&bytes)?;
    let meta: ChildRunMeta = serde_json::from_str(&meta).context("child run metadata")?;
    Ok(CaseRun {
        outputs,
        algorithms: meta.algorithms,
        trace: meta.trace,
        recorded_ops: meta.recorded_ops,
        seconds: meta.seconds,
        peak_bytes: meta.peak_bytes,
        findings: meta.findings,
        notes: meta.notes,
    })
}

/// The whole assessment of `case` in a child process (`--isolate`): the child's report, or
/// the child's failure (crash, hang, out of memory) as typed evidence.
pub fn assess_in_child(
    cfg: &ChildConfig,
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
) -> CaseReport {
    let t0 = Instant::now();
    let mut cfg = cfg.clone();
    cfg.timeout = cfg.timeout.or(Some(DEFAULT_ISOLATE_TIMEOUT));
    let mode = Mode::Check(controls.clone(), opts.clone());
    let result = run_child(&cfg, mode, &case.name(), backend)
        .and_then(|b| serde_json::from_slice::<CaseReport>(&b).context("child report"));
    result.unwrap_or_else(|e| {
        let mut report = CaseReport::new(&case.name(), backend);
        report.variations = opts.vary.clone();
        report.evidence.planted = case.planted_bug().map(str::to_string);
        let f = child_failure(&e);
        report.evidence.failure = Some(Failure::new(
            f.kind,
            format!("isolated process {}", f.message),
        ));
        report.seconds = t0.elapsed().as_secs_f64();
        report.judge()
    })
}

/// The typed failure of a child process from the error `run_child` gave.
fn child_failure(e: &anyhow::Error) -> Failure {
    let text = format!("{e:#}");
    let kind = if text.starts_with("timed out") {
        FailureKind::Timeout
    } else if text.starts_with("ran out of memory") || text.contains("(the OOM killer") {
        FailureKind::OutOfMemory
    } else if text.starts_with("crashed with signal") {
        FailureKind::Signal
    } else if text.starts_with("exited with status") {
        FailureKind::ExitStatus
    } else {
        FailureKind::Harness
    };
    Failure::new(kind, text)
}

/// The request this process was started with, when it is a child.
pub fn request() -> Option<Result<Request>> {
    let json = std::env::var_os(REQUEST_ENV)?;
    let json = json.to_string_lossy();
    Some(serde_json::from_str(&json).with_context(|| format!("{REQUEST_ENV}: malformed request")))
}

/// The child side: applies the memory limit, runs `case` as `request` asks and writes the
/// result file.
pub fn serve(request: &Request, case: &dyn Case) -> Result<()> {
    if let Some(mb) = request.memory_limit_mb {
        crate::memory::limit_address_space(mb)?;
    }
    let bytes = match &request.mode {
        Mode::Run(settings) => {
            let r = harness::run_in_process(case, request.backend, settings)?;
            let meta = ChildRunMeta {
                algorithms: r.algorithms,
                trace: r.trace,
                recorded_ops: r.recorded_ops,
                seconds: r.seconds,
                findings: r.findings,
                peak_bytes: r.peak_bytes,
                notes: r.notes,
            };
            tensor_io::encode(&serde_json::to_string(&meta)?, &r.outputs)
        }
        Mode::Check(controls, opts) => {
            let mut opts = opts.clone();
            opts.isolated = true;
            let children = opts.children.as_ref().map(Children);
            let children = children.as_ref().map(|c| c as &dyn ChildRunner);
            let r = harness::assess_case_with(case, request.backend, controls, &opts, children);
            serde_json::to_vec(&r)?
        }
    };
    write_result(&request.out, &bytes)
}

fn write_result(out: &Path, bytes: &[u8]) -> Result<()> {
    crate::atomic::write_atomically(out, bytes)
}

/// The child side for a case found through `lookup` (the `bitexact` binary's `__child`).
pub fn child_main(lookup: &dyn Fn(&str) -> Option<Box<dyn Case>>) -> Result<()> {
    let request = match request() {
        Some(r) => r?,
        None => bail!("__child is internal: it needs {REQUEST_ENV}"),
    };
    let Some(case) = lookup(&request.case) else {
        bail!("no case named {:?}", request.case);
    };
    serve(&request, case.as_ref())
}
