//! What run mode reports about a program besides its outputs: [`program_info`] (the command,
//! its environment, how each run ended) and the varied controls it never read.

use super::killed::Resumable;
use super::Program;
use crate::harness::{Collected, RunMeta, Runs};
use crate::outcome::{CaseReport, ProgramInfo, ProgramRun};
use crate::vary::Variation;
use std::collections::BTreeMap;

/// The varied controls that reach a program only when it reads them (through the helper or
/// its variable), that the program was not seen to read in run 0, and a note saying so.
/// Other variations act through the environment whatever the program does (`threads`:
/// `OMP_NUM_THREADS` and friends; `poison`: `MALLOC_PERTURB_`; `hashseed`: `PYTHONHASHSEED`).
pub(super) fn unread_controls(
    varied: &[Variation],
    read: Option<&std::collections::BTreeSet<String>>,
) -> (Vec<String>, Option<String>) {
    let only_if_read: Vec<(&str, &str)> = varied
        .iter()
        .filter_map(|v| match v {
            Variation::Workers => Some(("workers", crate::protocol::WORKERS_ENV)),
            Variation::Seed => Some(("seed", crate::protocol::SEED_ENV)),
            _ => None,
        })
        .filter(|(name, _)| read.is_none_or(|r| !r.contains(*name)))
        .collect();
    if only_if_read.is_empty() {
        return (Vec::new(), None);
    }
    let names: Vec<String> = only_if_read.iter().map(|(n, _)| n.to_string()).collect();
    let vars: Vec<&str> = only_if_read.iter().map(|(_, v)| *v).collect();
    let how = "read them with the helper: DataLoader(..., **bitexact.dataloader_kwargs()), \
               bitexact.workers(), seed_everything() without a seed";
    let note = match read {
        Some(_) => format!(
            "varied but never read by the program: {} (it used the helper, but not for these; \
             a hard-coded value is not varied, so these runs did not test it; {how})",
            names.join(", ")
        ),
        None => format!(
            "varied {} {} the program only through {}, and it recorded no controls read \
             (it does not use the helper's readers): bitexact cannot tell whether {} \
             changed anything; {how}",
            names.join(", "),
            if names.len() == 1 { "reaches" } else { "reach" },
            vars.join(", "),
            if names.len() == 1 { "it" } else { "they" },
        ),
    };
    (names, Some(note))
}

/// This process's peak resident set size, bytes: `VmHWM` of `/proc/self/status`, the high-water
/// mark of this process's own address space. `getrusage(RUSAGE_SELF)` is the fallback where
/// there is no `/proc`: Linux folds into its `ru_maxrss` the peak of the process that exec'd
/// bitexact, so under a large parent (a test binary, a pytest process with torch loaded) it
/// reports the parent's memory, not bitexact's.
pub(super) fn own_peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok();
    let hwm = status.as_deref().and_then(|s| {
        let kb = s.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
        kb.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
    });
    if let Some(kb) = hwm {
        return Some(kb * 1024);
    }
    // SAFETY: an all-zero rusage is valid for getrusage to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the local we pass.
    (unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0)
        .then(|| (ru.ru_maxrss.max(0) as u64) * 1024)
}

pub(super) fn program_info(
    program: &Program,
    metas: &[RunMeta],
    first: Option<&Collected>,
) -> ProgramInfo {
    let runs: Vec<&(ProgramRun, BTreeMap<String, String>)> =
        metas.iter().filter_map(|m| m.program.as_ref()).collect();
    let mut env = runs.first().map(|r| r.1.clone()).unwrap_or_default();
    if let Some(out) = env.get_mut(crate::protocol::OUT_ENV) {
        out.push_str(" (the same path every run, new and empty each time)");
    }
    env.insert(
        crate::protocol::RUN_ENV.into(),
        format!("0..{}", runs.len().max(1) - 1),
    );
    let mut varied = BTreeMap::new();
    for k in env
        .keys()
        .filter(|k| ![crate::protocol::OUT_ENV, crate::protocol::RUN_ENV].contains(&k.as_str()))
    {
        let vals: Vec<String> = runs
            .iter()
            .map(|r| r.1.get(k).cloned().unwrap_or_default())
            .collect();
        if vals.iter().any(|v| *v != vals[0]) {
            varied.insert(k.clone(), vals);
        }
    }
    ProgramInfo {
        kind: "run".into(),
        command: program
            .command_for(None, None)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env,
        varied,
        runs: runs.iter().map(|r| r.0.clone()).collect(),
        step_memory: first.map(|c| c.steps.clone()).unwrap_or_default(),
        platform: first.and_then(|c| c.platform.clone()),
        ignored: first.map(|c| c.ignored.clone()).unwrap_or_default(),
        controls_read: first
            .and_then(|c| c.controls_read.as_ref())
            .map(|r| r.iter().cloned().collect()),
        unread_controls: Vec::new(),
        config: program.config.as_ref().map(|p| p.display().to_string()),
        harness_peak_rss_bytes: None,
        world_size: None,
        resume: None,
        sketches: match (program.sketch_outputs, first) {
            (true, Some(c)) => sketches(c),
            _ => BTreeMap::new(),
        },
    }
}

/// The sketches of a run's floating-point outputs: name → `dtype[shape]|<sketch>`
/// ([`crate::trace::sketch`]), each loaded in turn (an output that cannot be loaded, or one
/// over [`super::collect::EXPLAIN_MAX_BYTES`], has none).
fn sketches(c: &Collected) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, _) in &c.digests {
        let Ok(t) = c.loader.load(name) else {
            continue;
        };
        if t.bytes().len() as u64 > super::collect::EXPLAIN_MAX_BYTES {
            continue;
        }
        if let Some(s) = crate::trace::sketch::Sketch::of(t.dtype(), t.bytes()) {
            let shape: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
            let head = format!("{}[{}]", t.dtype().name(), shape.join(","));
            out.insert(name.clone(), format!("{head}|{}", s.text()));
        }
    }
    out
}
/// What a program's runs add to its report, once the main pass is done (the source's
/// `describe`): batch sizes, step memory, the trace note, the program info with its unread
/// controls, `moved` (kept runs' outputs that went elsewhere), and the runs of its own that
/// `--vary resume` and `--vary world-size` make.
pub(super) fn describe(
    source: &dyn Resumable,
    report: &mut CaseReport,
    metas: &[RunMeta],
    first: Option<&Collected>,
    planner: &mut dyn Runs,
    moved: Vec<String>,
) {
    let program = source.program();
    let world_size = planner.opts().vary.contains(&Variation::WorldSize);
    if planner.opts().vary.contains(&Variation::Batch) {
        let [a, b] = [0, 1].map(|i| planner.settings(i, false).knobs.batch.unwrap_or(0));
        report.notes.push(format!(
            "batch sizes: {} is {a} in the even runs, {b} in the odd runs",
            super::batch::BATCH
        ));
    }
    if let Some(c) = first {
        let steps: Vec<(u64, u64)> = c.steps.iter().map(|s| (s.step, s.rss_bytes)).collect();
        report.memory_growth = crate::memory::step_growth(&steps);
    }
    if let (Some(c), Some(t)) = (first, &program.trace) {
        report.notes.push(super::trace::note(c.trace.as_deref(), t));
    }
    report
        .notes
        .extend(first.iter().flat_map(|c| c.notes.iter().cloned()));
    report.notes.extend(moved);
    let mut info = program_info(program, metas, first);
    info.harness_peak_rss_bytes = own_peak_rss();
    let read = first.and_then(|c| c.controls_read.as_ref());
    let (unread, note) = unread_controls(&report.variations, read);
    info.unread_controls = unread;
    report.notes.extend(note);
    if let Some(c) = first {
        info.resume = super::resume_check::check(source, program, c, planner, report);
    }
    if let (Some(c), true) = (first, world_size) {
        let w = super::distributed::check_world_size(source, program, c, planner);
        report.notes.push(w.summary.clone());
        if program.world_size_invariant && w.depends == Some(true) {
            report.evidence.world_size_dependence =
                Some(format!("--world-size-invariant: {}", w.summary));
        }
        info.world_size = Some(w);
    }
    report.program = Some(info);
}
