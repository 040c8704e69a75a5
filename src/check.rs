//! The library API for users' own tests: a few lines per case.
//!
//! ```no_run
//! use bitexact::{Case, Ctx, Outputs, Result, Tensor};
//!
//! struct MyCase;
//! impl Case for MyCase {
//!     fn name(&self) -> String {
//!         "my_crate/my_kernel".into()
//!     }
//!     fn backends(&self) -> Vec<bitexact::Backend> {
//!         vec![bitexact::Backend::Cpu]
//!     }
//!     fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
//!         let x = ctx.stream("x").uniform(1000);
//!         let s: f32 = x.iter().sum();
//!         Ok(Outputs::new().with("sum", Tensor::scalar(s)))
//!     }
//! }
//!
//! #[test]
//! fn my_kernel_is_deterministic() {
//!     bitexact::check(&MyCase).runs(3).assert_deterministic();
//! }
//!
//! #[test]
//! fn my_kernel_matches_its_snapshot() {
//!     bitexact::check(&MyCase).assert_snapshot();
//! }
//! ```
//!
//! **Variations and child processes.** `.vary(&[Variation::Process])` runs every run in a
//! fresh process, `.isolate()` the whole check (a crash or hang becomes an `error`, not a dead
//! test binary). A child is the caller's own test binary re-run for the one test that is
//! calling (`--exact NAME`, found from libtest's thread name, or given with
//! [`Check::test_name`]), as rusty-fork does: the test runs again up to this `check`, which
//! serves the parent's request and exits the child. Code before the `check` call therefore
//! runs once more in each child.
//!
//! Defaults: 2 runs on the CPU under [`Controls::from_env`] (seed 0, deterministic on,
//! benchmark off, overridable with `BITEXACT_*`). Snapshots go to `snapshots/` in the crate
//! being tested (`$CARGO_MANIFEST_DIR/snapshots`, else `./snapshots`), laid out as described in
//! [`crate::snapshot`]; review new or changed ones with `cargo insta review`. insta's
//! environment switches apply (`INSTA_UPDATE`, `INSTA_FORCE_PASS`, `CI`); its `insta.yaml`
//! configuration file is looked up in bitexact's own workspace, not the caller's, because the
//! assertion is made inside bitexact.

use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::isolate::{self, ChildConfig, Launcher};
use crate::outcome::{CaseReport, Verdict};
use crate::outcome::{Failure, FailureKind};
use crate::suite::{self, Subject, SuiteConfig};
use crate::vary::{Kind, Variation};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Checks `case`: configure with the builder methods, then [`Check::assert_deterministic`],
/// [`Check::assert_snapshot`] or [`Check::report`].
pub fn check(case: &dyn Case) -> Check<'_> {
    Check {
        case,
        runs: 2,
        controls: None,
        backend: Backend::Cpu,
        snapshots: None,
        vary: Vec::new(),
        isolate: false,
        timeout: None,
        test_name: None,
    }
}

/// A configured check of one case (see [`check`]).
pub struct Check<'a> {
    case: &'a dyn Case,
    runs: usize,
    controls: Option<Controls>,
    backend: Backend,
    snapshots: Option<PathBuf>,
    vary: Vec<Variation>,
    isolate: bool,
    timeout: Option<Duration>,
    test_name: Option<String>,
}

impl Check<'_> {
    /// Runs per check (at least 2; default 2).
    pub fn runs(mut self, runs: usize) -> Self {
        self.runs = runs.max(2);
        self
    }

    /// Runs under these controls instead of the defaults.
    pub fn controls(mut self, controls: Controls) -> Self {
        self.controls = Some(controls);
        self
    }

    /// Runs with this base seed.
    pub fn seed(mut self, seed: u64) -> Self {
        let mut c = self.current_controls();
        c.seed = seed;
        self.controls = Some(c);
        self
    }

    /// Runs on this backend (default CPU). A backend not available here gives `skipped`.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Keeps snapshots under this directory instead of `$CARGO_MANIFEST_DIR/snapshots`.
    pub fn snapshot_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.snapshots = Some(dir.into());
        self
    }

    /// Varies these conditions between runs; on a difference, blame names the one that breaks
    /// the case. Variations that apply only to programs (e.g. `hashseed`) are ignored.
    pub fn vary(mut self, variations: &[Variation]) -> Self {
        self.vary = variations
            .iter()
            .copied()
            .filter(|v| v.applies_to(Kind::Case))
            .collect();
        self.vary.sort();
        self.vary.dedup();
        self
    }

    /// Varies every condition that applies to Rust cases.
    pub fn vary_all(self) -> Self {
        let all: Vec<Variation> = Variation::all().collect();
        self.vary(&all)
    }

    /// Runs the whole check in a child process: a crash, hang or out-of-memory becomes an
    /// `error` verdict instead of bringing the test binary down.
    pub fn isolate(mut self) -> Self {
        self.isolate = true;
        self
    }

    /// Kills a child process (isolated check or `process` variation run) after this long;
    /// default for an isolated check: `isolate::DEFAULT_ISOLATE_TIMEOUT`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The full name of the calling test (`module::test`), when libtest's thread name does not
    /// give it (e.g. a custom test harness). Needed only for child processes.
    pub fn test_name(mut self, name: impl Into<String>) -> Self {
        self.test_name = Some(name.into());
        self
    }

    fn current_controls(&self) -> Controls {
        self.controls.clone().unwrap_or_else(|| {
            Controls::from_env().unwrap_or_else(|e| panic!("bitexact controls: {e:#}"))
        })
    }

    /// The snapshot directory this check uses.
    pub fn snapshots(&self) -> PathBuf {
        self.snapshots.clone().unwrap_or_else(|| {
            std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join("snapshots")
        })
    }

    /// How to start children: this test binary, re-run for the calling test.
    fn children(&self) -> Result<ChildConfig, String> {
        let exe = std::env::current_exe().map_err(|e| format!("locating the test binary: {e}"))?;
        let test = match &self.test_name {
            Some(t) => t.clone(),
            None => match std::thread::current().name() {
                Some(n) if n != "main" => n.to_string(),
                _ => {
                    return Err(
                        "child processes re-run the calling test, but this thread is not a libtest test; name it with .test_name(\"module::test\")"
                            .to_string(),
                    )
                }
            },
        };
        let mut cfg = ChildConfig::new(Launcher::TestBinary { exe, test });
        cfg.timeout = self.timeout;
        Ok(cfg)
    }

    /// Runs the case K times (and its variations, blame and diagnoses) and returns the
    /// harness's report, whatever the verdict. Inside a child process started by a check, it
    /// serves the parent's request for this case and exits the process instead.
    pub fn report(&self) -> CaseReport {
        serve_if_child(self.case);
        let controls = self.current_controls();
        let mut config = SuiteConfig::new(vec![self.backend], controls, self.runs);
        config.options.vary = self.vary.clone();
        let needs_children = self.isolate || self.vary.contains(&Variation::Process);
        if needs_children {
            match self.children() {
                Ok(cfg) => {
                    config.options.isolate = self.isolate.then(|| cfg.clone());
                    config.options.children = Some(cfg);
                }
                Err(why) => {
                    let mut r = CaseReport::new(&self.case.name(), self.backend);
                    r.evidence.failure = Some(Failure::new(FailureKind::Harness, why));
                    return r.judge();
                }
            }
        }
        match suite::run(&[Subject::Case(self.case)], &config, &mut |_| {}) {
            Ok(mut report) => report.cases.remove(0),
            Err(e) => {
                let mut r = CaseReport::new(&self.case.name(), self.backend);
                r.evidence.failure = Some(Failure::from_error(FailureKind::Harness, &e));
                r.judge()
            }
        }
    }

    /// Runs the case K times and panics unless every run gave bit-identical outputs; the panic
    /// message names the case and explains each differing tensor. A case that cannot run on
    /// the backend here (`skipped`) passes, with a `SKIPPED` line written straight to the
    /// terminal (past libtest's output capture), so the skip stays visible in `cargo test`.
    pub fn assert_deterministic(&self) -> CaseReport {
        let r = self.report();
        if r.verdict() == Verdict::Skipped {
            skip_notice(&r.name, &r.message.clone().unwrap_or_default());
            return r;
        }
        r.assert_passed();
        r
    }

    /// Asserts determinism, then that the digests match the committed snapshot of this case,
    /// controls and platform class. A new or changed snapshot is written as pending
    /// `.snap.new` (not in CI) and the panic message says which tensors changed and what
    /// differs in the platform fingerprint.
    pub fn assert_snapshot(&self) -> CaseReport {
        let r = self.assert_deterministic();
        if r.verdict() == Verdict::Deterministic {
            crate::snapshot::assert_matches(&self.snapshots(), &r, &self.current_controls());
        }
        r
    }
}

/// In a child process started for `case`: serves the request and exits the process.
fn serve_if_child(case: &dyn Case) {
    let Some(request) = isolate::request() else {
        return;
    };
    let code = match request {
        Ok(req) if req.case != case.name() => return,
        Ok(req) => match isolate::serve(&req, case) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("bitexact child: {e:#}");
                1
            }
        },
        Err(e) => {
            eprintln!("bitexact child: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

/// Writes `SKIPPED what: why` straight to standard error, past libtest's output capture (which
/// only catches `print!`/`eprint!`), so a test that could not run does not pass silently. When
/// `$BITEXACT_SKIP_LOG` names a file ([`crate::protocol::SKIP_LOG_ENV`]), the line is also
/// appended to it as one line (`one_line`), so a script running many test binaries
/// (`ci/test.sh`) can list and count every skip in its summary.
pub fn skip_notice(what: &str, why: &str) {
    let line = format!("bitexact: SKIPPED {what}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(crate::protocol::SKIP_LOG_ENV).filter(|l| !l.is_empty()) {
        let line = format!(
            "bitexact: SKIPPED {what}: {}\n",
            one_line(why, SKIP_LOG_CHARS)
        );
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// How much of a skip's reason the skip log keeps (its standard error line keeps all).
const SKIP_LOG_CHARS: usize = 400;

/// `text` on one line (every run of whitespace, line breaks too, one space), cut to `max`
/// characters with `…`: a reason that quotes a report's JSON is still one skip.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Ctx, Outputs};

    #[test]
    fn a_skip_reason_is_one_line_in_the_log() {
        assert_eq!(one_line("a {\n  \"b\": 1\n}", 100), "a { \"b\": 1 }");
        assert_eq!(one_line("ééé ééé", 3), "ééé…");
        assert_eq!(one_line("short", 5), "short");
    }
    use crate::tensor::Tensor;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Drifts(AtomicUsize);
    impl Case for Drifts {
        fn name(&self) -> String {
            "test/drifts".into()
        }
        fn run(&self, _ctx: &mut Ctx) -> anyhow::Result<Outputs> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) as f32;
            Ok(Outputs::new().with("w", Tensor::from_slice(&[2], &[1.0f32, n])))
        }
    }

    #[test]
    fn failure_message_explains_the_difference() {
        let err = std::panic::catch_unwind(|| {
            check(&Drifts(AtomicUsize::new(0)))
                .runs(3)
                .seed(5)
                .assert_deterministic();
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("test/drifts on cpu is nondeterministic over 3 runs"),
            "{msg}"
        );
        assert!(msg.contains("w: 1/2 elements differ"), "{msg}");
    }
}
