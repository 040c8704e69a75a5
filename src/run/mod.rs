//! Run mode: any program as a case (`bitexact run -- CMD ARGS...`). The program runs K times,
//! each run with a fresh empty `$BITEXACT_OUT` and the environment contract below; the tensor
//! files it writes there are digested with the library's canonical digests and compared
//! exactly as a built-in case's outputs are, and the same judge ([`crate::harness::judge`]),
//! blame ([`Blame`]), snapshot check and reports apply.
//!
//! **Environment of each run** ([`env_for`]): `BITEXACT_OUT` (absolute, fresh, empty),
//! `BITEXACT_RUN` (0..K-1), `BITEXACT_SEED`, `BITEXACT_DETERMINISTIC` / `BITEXACT_BENCHMARK`
//! (`1`/`0`), `BITEXACT_WORKERS`; `BITEXACT_THREADS` with `OMP_NUM_THREADS`, `MKL_NUM_THREADS`
//! and `OPENBLAS_NUM_THREADS` when a thread count is given or varied; `PYTHONHASHSEED=0` unless
//! the `hashseed` variation gives each run its own; `CUBLAS_WORKSPACE_CONFIG=:4096:8` when
//! deterministic; under `poison`, `MALLOC_PERTURB_` and `BITEXACT_POISON` (otherwise
//! `MALLOC_PERTURB_` is left as the user's environment has it). The report lists them.
//!
//! **Outputs** ([`collect`]): every file under `$BITEXACT_OUT` (see [`crate::tensor_files`]);
//! `.bitexact-*` files are the helper's metadata, not outputs. A run with nothing to compare
//! is an error. Standard output is compared too with `--stdout` (as `<stdout>`).
//!
//! **Costs.** Blame re-runs the program K times with everything fixed (the control), then K
//! times per variation alone; only on a difference under variations. Outputs are hashed from
//! memory-mapped files; a differing output is loaded to explain it only up to
//! [`collect::EXPLAIN_MAX_BYTES`].

pub mod collect;
pub mod spawn;

use crate::backend::Backend;
use crate::controls::Controls;
use crate::digest::{self, Digest};
use crate::harness::{CaseReport, ProgramInfo, ProgramRun};
use crate::report::Report;
use crate::suite::Event;
use crate::vary::{Blame, RunSettings, Variation};
use anyhow::{bail, Context, Result};
use collect::{Collected, RunFiles};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A program to check, and how.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Program and arguments.
    pub command: Vec<OsString>,
    /// Case name (default `run/<program file name>`).
    pub name: String,
    /// Controls every run is made under.
    pub controls: Controls,
    /// Whether the thread count was given (then the thread variables are set).
    pub threads_given: bool,
    /// Runs (at least 2).
    pub runs: usize,
    /// Variations between runs (those that apply to programs).
    pub vary: Vec<Variation>,
    /// Kill a run's process group after this long.
    pub timeout: Option<Duration>,
    /// Address-space limit of each run in MiB.
    pub memory_limit_mb: Option<u64>,
    /// Compare standard output too.
    pub stdout: bool,
    /// Keep each run's outputs under `DIR/run-<i>` (main pass only).
    pub keep: Option<PathBuf>,
    /// Compare with the committed snapshot under this directory.
    pub snapshots: Option<PathBuf>,
}

impl RunConfig {
    /// Checks what can be checked before any run: the program can be started and `--keep` is
    /// usable. Errors name the culprit.
    pub fn validate(&self) -> Result<()> {
        let program = self.command.first().context("no command given after --")?;
        spawn::resolve(program)?;
        if let Some(k) = &self.keep {
            if k.exists() && (!k.is_dir() || std::fs::read_dir(k)?.next().is_some()) {
                bail!("--keep {}: must be an empty or new directory", k.display());
            }
            std::fs::create_dir_all(k)
                .map_err(|e| anyhow::anyhow!("--keep {}: {e}", k.display()))?;
        }
        let tmp = std::env::temp_dir();
        if !tmp.is_dir() {
            bail!(
                "the temporary directory {} (TMPDIR) is not a directory",
                tmp.display()
            );
        }
        Ok(())
    }
}

/// The default case name for a command: `run/<file name of the program or script>`.
pub fn default_name(command: &[OsString]) -> String {
    let script = command
        .iter()
        .skip(1)
        .find(|a| {
            let p = Path::new(a);
            !a.to_string_lossy().starts_with('-') && p.extension().is_some() && p.exists()
        })
        .or(command.first());
    let file = script
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap_or(p.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    format!("run/{file}")
}

/// The environment of run `index` (see the module docs).
pub fn env_for(
    cfg: &RunConfig,
    vary: &[Variation],
    index: usize,
    out: &Path,
) -> BTreeMap<String, String> {
    let s = RunSettings::for_run(&cfg.controls, vary, index, false);
    let c = &s.controls;
    let bit = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut env = BTreeMap::from([
        ("BITEXACT_OUT".to_string(), out.display().to_string()),
        ("BITEXACT_RUN".into(), index.to_string()),
        ("BITEXACT_SEED".into(), c.seed.to_string()),
        ("BITEXACT_DETERMINISTIC".into(), bit(c.deterministic)),
        ("BITEXACT_BENCHMARK".into(), bit(c.benchmark)),
        ("BITEXACT_WORKERS".into(), c.workers.to_string()),
    ]);
    let hashseed = if vary.contains(&Variation::Hashseed) {
        index + 1
    } else {
        0
    };
    env.insert("PYTHONHASHSEED".into(), hashseed.to_string());
    if cfg.threads_given || vary.contains(&Variation::Threads) {
        for k in [
            "BITEXACT_THREADS",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "OPENBLAS_NUM_THREADS",
        ] {
            env.insert(k.into(), c.threads.to_string());
        }
    }
    if c.deterministic {
        env.insert("CUBLAS_WORKSPACE_CONFIG".into(), ":4096:8".into());
    }
    if let Some(p) = s.knobs.poison {
        env.insert("MALLOC_PERTURB_".into(), p.to_string());
        env.insert("BITEXACT_POISON".into(), p.to_string());
    }
    env
}

/// One run: how it ended and what it left.
struct Record {
    index: usize,
    env: BTreeMap<String, String>,
    out: PathBuf,
    stdout: Option<PathBuf>,
    run: ProgramRun,
    result: Result<Collected, String>,
}

impl Record {
    fn digests(&self) -> &[(String, Digest)] {
        self.result.as_ref().map_or(&[], |c| &c.digests)
    }
    fn run_digest(&self) -> Digest {
        digest::run_digest(&self.digests().iter().cloned().collect())
    }
    fn files(&self) -> RunFiles<'_> {
        RunFiles {
            index: self.index,
            out: &self.out,
            stdout: self.stdout.clone(),
        }
    }
}

/// A directory removed on drop (unless kept).
struct Scratch(PathBuf, bool);
impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn scratch() -> Result<Scratch> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "bitexact-run-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    // Not create_dir_all: a missing TMPDIR is an error, never created.
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Scratch(dir, false))
}

/// K runs under `vary` in directories under `root`; stops at the first run that fails.
///
/// Pipelined: run `i`'s outputs are hashed on a background thread while run `i + 1` executes,
/// one collection at a time (the next waits for the previous), so bitexact's time per run is
/// mostly hidden behind the program's and its memory stays bounded by one run's outputs
/// whatever K is.
fn pass(cfg: &RunConfig, vary: &[Variation], root: &Path) -> Result<Vec<Record>> {
    type Collecting = std::thread::JoinHandle<Result<Collected, String>>;
    let mut out: Vec<Record> = Vec::new();
    let mut collecting: Option<(usize, Collecting)> = None;
    let finish = |out: &mut Vec<Record>, job: Option<(usize, Collecting)>| {
        if let Some((i, h)) = job {
            out[i].result = h
                .join()
                .unwrap_or_else(|_| Err("hashing the outputs panicked".into()));
        }
    };
    for index in 0..cfg.runs.max(2) {
        let dir = root.join(format!("run-{index}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = std::path::absolute(&dir)?;
        let stdout = cfg.stdout.then(|| root.join(format!("stdout-{index}")));
        let env = env_for(cfg, vary, index, &dir);
        let ended = spawn::run(&spawn::Spawn {
            command: &cfg.command,
            env: &env,
            stdout: stdout.as_deref(),
            timeout: cfg.timeout,
            memory_limit_mb: cfg.memory_limit_mb,
        })?;
        let run = ProgramRun {
            index,
            exit_status: ended.status.code(),
            signal: ended.status.signal(),
            seconds: ended.seconds,
            peak_rss_bytes: ended.peak_rss_bytes,
        };
        let failure = spawn::failure(&ended, cfg.timeout);
        let failed = failure.is_some();
        finish(&mut out, collecting.take());
        out.push(Record {
            index,
            env,
            out: dir.clone(),
            stdout: stdout.clone(),
            run,
            result: Err(failure.clone().unwrap_or_default()),
        });
        if failed {
            break;
        }
        if out[..out.len() - 1].iter().any(|r| r.result.is_err()) {
            out.pop(); // an earlier run's outputs were unreadable: that run is the error
            break;
        }
        let job = std::thread::spawn(move || {
            collect::collect(&dir, stdout.as_deref()).map_err(|e| format!("{e:#}"))
        });
        collecting = Some((out.len() - 1, job));
    }
    finish(&mut out, collecting.take());
    Ok(out)
}

/// Whether K runs under `vary` give more than one run digest (for blame).
fn diverges(cfg: &RunConfig, vary: &[Variation]) -> Result<bool> {
    let dir = scratch()?;
    let recs = pass(cfg, vary, &dir.0)?;
    let set: BTreeSet<Digest> = recs.iter().map(Record::run_digest).collect();
    Ok(set.len() > 1 || recs.iter().any(|r| r.result.is_err()))
}

/// Runs the program K times (and blame passes under variations) and returns the report.
pub fn check(cfg: &RunConfig, on_event: &mut dyn FnMut(Event)) -> Result<Report> {
    let t0 = Instant::now();
    spawn::become_subreaper();
    on_event(Event::Started {
        name: &cfg.name,
        backend: Backend::Cpu,
    });
    let root = match &cfg.keep {
        Some(k) => {
            std::fs::create_dir_all(k).with_context(|| format!("creating {}", k.display()))?;
            Scratch(k.clone(), true)
        }
        None => scratch()?,
    };
    let recs = pass(cfg, &cfg.vary, &root.0)?;
    let mut r = CaseReport::new(&cfg.name, Backend::Cpu);
    r.variations = cfg.vary.clone();
    r.program = Some(program_info(cfg, &recs));
    r.peak_bytes = recs.iter().filter_map(|x| x.run.peak_rss_bytes).collect();
    r.run_seconds = recs.iter().map(|x| x.run.seconds).collect();
    if let Some(bad) = recs.iter().find(|x| x.result.is_err()) {
        let why = bad.result.as_ref().err().cloned().unwrap_or_default();
        r.evidence.error = Some(format!("run {}: {why}", bad.index));
    } else if let Some(empty) = recs.iter().find(|x| x.digests().is_empty()) {
        r.evidence.error = Some(format!(
            "run {} wrote nothing to compare: write tensors into $BITEXACT_OUT (Python: `bitexact.dump(\"name\", x=tensor)` \
             or `bitexact.step(i, ...)`; numpy: `np.save(os.path.join(os.environ[\"BITEXACT_OUT\"], \"x.npy\"), x)`), \
             or pass --stdout to compare standard output",
            empty.index
        ));
    }
    let ok: Vec<&Record> = recs.iter().filter(|x| x.result.is_ok()).collect();
    r.runs = ok.len();
    r.run_digests = ok.iter().map(|x| x.run_digest().hex()).collect();
    r.distinct_digests = ok
        .iter()
        .map(|x| x.run_digest())
        .collect::<BTreeSet<_>>()
        .len();
    if let Some(first) = ok.first() {
        r.digests = first
            .digests()
            .iter()
            .map(|(k, d)| (k.clone(), d.hex()))
            .collect();
        let steps: Vec<(u64, u64)> = first
            .result
            .as_ref()
            .map(|c| c.steps.iter().map(|s| (s.step, s.rss_bytes)).collect())
            .unwrap_or_default();
        r.memory_growth = crate::memory::step_growth(&steps);
        if let Some(other) = ok.iter().find(|x| x.run_digest() != first.run_digest()) {
            r.divergence = collect::first_divergence(first.digests(), other.digests());
            r.diff = collect::explain(
                (&first.files(), first.digests()),
                (&other.files(), other.digests()),
            );
            if let (Some(a), Some(b)) = (&first.stdout, &other.stdout) {
                if let Some(line) = collect::first_differing_line(a, b) {
                    if let Some(d) = r.diff.iter_mut().find(|d| d.tensor == collect::STDOUT_NAME) {
                        d.note = Some(line);
                    }
                }
            }
            if !cfg.vary.is_empty() && r.evidence.error.is_none() {
                r.blame = Some(blame(cfg)?);
            }
        }
    }
    r.seconds = t0.elapsed().as_secs_f64();
    if let Some(p) = r.program.as_mut() {
        p.harness_peak_rss_bytes = own_peak_rss();
    }
    let mut r = r.judge();
    if let Some(dir) = &cfg.snapshots {
        snapshot(dir, &mut r, &cfg.controls);
    }
    on_event(Event::Finished(&r));
    let mut report = Report::new(cfg.controls.clone(), cfg.runs, vec![r], Vec::new());
    report.variations = cfg.vary.clone();
    report.backends = vec![Backend::Cpu];
    Ok(report)
}

/// Compares a deterministic run with its committed snapshot (see [`crate::suite::check_snapshots`]);
/// a missing or changed one is written as a pending `.snap.new` (never in CI).
fn snapshot(dir: &Path, r: &mut CaseReport, controls: &Controls) {
    use crate::harness::SnapshotStatus;
    let platform = crate::platform::Platform::detect();
    let new = crate::snapshot::Snapshot::of(r, controls, &platform).ok();
    crate::suite::check_snapshots(dir, std::slice::from_mut(r), controls);
    if let (Some(new), Some(SnapshotStatus::Missing | SnapshotStatus::Mismatch)) =
        (new, r.evidence.snapshot)
    {
        let note = crate::snapshot::write_pending(dir, r, &new, controls);
        let text = r.snapshot.take().unwrap_or_default();
        r.snapshot = Some(format!("{text}; {note}"));
    }
}

/// The control (everything fixed), then each variation alone, K runs each.
fn blame(cfg: &RunConfig) -> Result<Blame> {
    if diverges(cfg, &[])? {
        return Ok(Blame::new(false, Vec::new()));
    }
    let mut broken = Vec::new();
    for &v in &cfg.vary {
        if diverges(cfg, &[v])? {
            broken.push(v);
        }
    }
    Ok(Blame::new(true, broken))
}

/// This process's peak resident set size (`getrusage(RUSAGE_SELF)`), bytes.
fn own_peak_rss() -> Option<u64> {
    // SAFETY: an all-zero rusage is valid for getrusage to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the local we pass.
    (unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0)
        .then(|| (ru.ru_maxrss.max(0) as u64) * 1024)
}

fn program_info(cfg: &RunConfig, recs: &[Record]) -> ProgramInfo {
    let mut env = recs.first().map(|r| r.env.clone()).unwrap_or_default();
    env.insert(
        "BITEXACT_OUT".into(),
        "(a fresh empty directory per run)".into(),
    );
    env.insert("BITEXACT_RUN".into(), format!("0..{}", cfg.runs.max(2) - 1));
    let mut varied = BTreeMap::new();
    for k in env
        .keys()
        .filter(|k| !["BITEXACT_OUT", "BITEXACT_RUN"].contains(&k.as_str()))
    {
        let vals: Vec<String> = recs
            .iter()
            .map(|r| r.env.get(k).cloned().unwrap_or_default())
            .collect();
        if vals.iter().any(|v| *v != vals[0]) {
            varied.insert(k.clone(), vals);
        }
    }
    let first = recs.first().and_then(|r| r.result.as_ref().ok());
    ProgramInfo {
        kind: "run".into(),
        command: cfg
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env,
        varied,
        runs: recs.iter().map(|r| r.run.clone()).collect(),
        step_memory: first.map(|c| c.steps.clone()).unwrap_or_default(),
        platform: first.and_then(|c| c.platform.clone()),
        harness_peak_rss_bytes: None,
    }
}
