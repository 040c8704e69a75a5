//! The killed launch of `--vary resume` ([`super::resume`]): the program run under a
//! checkpoint watch ([`super::checkpoint`]) that sends SIGKILL right after its Nth checkpoint
//! completes, run again when the kill landed late, and what it leaves for the resumed launch.

use super::checkpoint::{self, Completed};
use super::resume::Spec;
use super::{ended, spawn, Program};
use crate::harness::{Collected, RunMeta, RunSource, Started};
use crate::outcome::{Failure, FailureKind};
use crate::vary::RunSettings;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// What the killed launch left for the resumed one.
#[derive(Clone, Debug)]
pub struct Killed {
    /// Its last checkpoint completed before it died: the Nth, or a later one when the program
    /// completed more before the kill landed (what the resumed launch finds on disk).
    pub checkpoint: Completed,
    /// Checkpoints it completed after the Nth before the kill landed.
    pub past: usize,
    /// For each earlier killed launch run again: the checkpoint its kill found half-written.
    pub late: Vec<String>,
    /// A checkpoint this launch's kill found half-written (after [`LATE_RETRIES`] tries).
    pub unfinished: Option<String>,
}

/// A program's run source as the resume check needs it: besides its runs, the program, its
/// `$BITEXACT_OUT` and what its killed launch left (implemented by `ProgramSource`).
pub(super) trait Resumable: RunSource {
    /// The program its runs run.
    fn program(&self) -> &Program;
    /// The `$BITEXACT_OUT` of every run.
    fn out_path(&self) -> PathBuf;
    /// What the killed launch of `--vary resume` left, once it was killed after its checkpoint.
    fn killed_launch(&self) -> Option<Killed>;
}

/// How many times the killed launch is run again when its kill landed while the program was
/// already writing a later checkpoint, which the resumed launch would find half-written: the
/// watch reads completions asynchronously, so on a loaded machine the kill can land a few
/// milliseconds late.
pub const LATE_RETRIES: usize = 2;

/// The killed launch: runs the program in `out` (created here) with `env` under a checkpoint
/// watch that sends SIGKILL right after the Nth checkpoint completes. Killed so, `out` stays
/// for the resumed launch and [`Killed`] says after which checkpoint; a kill that found a
/// later checkpoint begun is tried again ([`LATE_RETRIES`]). A launch that ends before that
/// checkpoint fails the run (`no-checkpoint`, or its own failure when it failed), and `out`
/// is removed.
pub(super) fn start_killed(
    program: &Program,
    out: &Path,
    settings: &RunSettings,
    env: BTreeMap<String, String>,
) -> (Started, Option<Killed>) {
    let harness = |e: anyhow::Error| Failure::from_error(FailureKind::Harness, &e);
    let Some(spec) = program.resume.as_ref() else {
        let e = anyhow::anyhow!("a killed launch of a program without --vary resume");
        return (Started::failed(RunMeta::default(), harness(e)), None);
    };
    let mut late = Vec::new();
    loop {
        let (ended, detector, stopped) = match launch_killed(program, spec, out, settings, &env) {
            Ok(l) => l,
            Err(e) => return (Started::failed(RunMeta::default(), harness(e)), None),
        };
        let meta = RunMeta {
            seconds: ended.seconds,
            peak_bytes: ended.peak_rss_bytes,
            ..RunMeta::default()
        };
        let done = detector.as_ref().map_or(&[][..], |d| &d.completed[..]);
        let Some(last) = done.last().filter(|_| stopped) else {
            let _ = std::fs::remove_dir_all(out);
            return (
                Started::failed(meta, no_checkpoint(program, spec, &ended, detector)),
                None,
            );
        };
        let begun = detector.as_ref().and_then(|d| d.begun.clone());
        if let (Some(b), true) = (&begun, late.len() < LATE_RETRIES) {
            late.push(b.clone());
            let _ = std::fs::remove_dir_all(out);
            continue;
        }
        keep_state_lines(out, last.steps);
        let killed = Killed {
            checkpoint: last.clone(),
            past: done.len().saturating_sub(spec.at.max(1)),
            late,
            unfinished: begun,
        };
        let empty = Collected::of_outputs(crate::case::Outputs::new(), None);
        return (Started::ready(meta, empty), Some(killed));
    }
}

/// One killed launch in a fresh `out`: how it ended, what its watch saw (`None`: no
/// inotify), and whether the watch killed it (its flag, not `Ended::stopped`: the launch may
/// die of the signal before the spawn loop reads the flag).
fn launch_killed(
    program: &Program,
    spec: &Spec,
    out: &Path,
    settings: &RunSettings,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<(spawn::Ended, Option<checkpoint::Detector>, bool)> {
    std::fs::create_dir(out)
        .map_err(|e| anyhow::anyhow!("creating {} for the killed launch: {e}", out.display()))?;
    super::tracer::clear(&super::trace::inject_dir(out));
    let batch = settings
        .knobs
        .batch
        .unwrap_or(settings.controls.batch_pair[0]);
    let command = program.command_for(settings.knobs.world_size, Some(batch));
    let (pid, stop) = (
        Arc::new(AtomicI32::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let matcher = spec.matcher.clone();
    let watch = checkpoint::watch(out, matcher, spec.at, pid.clone(), stop.clone());
    let ended = spawn::run(&spawn::Spawn {
        command: &command,
        env,
        stdout: None,
        timeout: program.timeout,
        memory_limit_mb: program.memory_limit_mb,
        stop: Some(&stop),
        pid: Some(&pid),
    });
    let detector = watch.map(checkpoint::Watch::finish);
    let ended = ended.inspect_err(|_| {
        let _ = std::fs::remove_dir_all(out);
    })?;
    Ok((ended, detector, stop.load(Ordering::SeqCst)))
}

/// Why a killed launch that was never killed left nothing to resume from: its own failure,
/// or what its watch saw instead of the Nth checkpoint.
fn no_checkpoint(
    program: &Program,
    spec: &Spec,
    ended: &spawn::Ended,
    detector: Option<checkpoint::Detector>,
) -> Failure {
    let Some(seen) = detector.as_ref().map(|d| d.seen(spec.at)) else {
        let f = "inotify is not available here, so bitexact cannot see a checkpoint complete";
        return Failure::new(FailureKind::Harness, f);
    };
    let mut f = Failure::new(
        FailureKind::NoCheckpoint,
        format!(
            "no checkpoint matching {} completed ({seen}), so there was nothing to resume from",
            spec.matcher.describe()
        ),
    );
    if let Some(own) = ended::failed(ended, program.timeout, program.memory_limit_mb.is_some()) {
        f.message = format!(
            "the launch to be killed after a checkpoint failed first: {}",
            own.message
        );
        f.kind = own.kind;
    }
    f
}

/// Keeps the first `steps` lines of the killed launch's rank-0 state record (those written
/// before its checkpoint completed): the records it made between the checkpoint and the kill
/// are not the resumed launch's, which appends its own from that step on.
fn keep_state_lines(out: &Path, steps: usize) {
    let path = out.join(format!("{}0.jsonl", crate::protocol::STATE_FILE_PREFIX));
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let kept: String = text.split_inclusive('\n').take(steps).collect();
    if kept.len() != text.len() {
        let _ = std::fs::write(&path, kept);
    }
}

impl Killed {
    /// What the report says of kills that landed late: launches run again, and a checkpoint the
    /// last kill found half-written.
    pub(super) fn late_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.late.is_empty() {
            notes.push(format!(
                "resume: the killed launch ran {} more time{}: its kill landed while the program was already writing a later checkpoint ({})",
                self.late.len(),
                if self.late.len() == 1 { "" } else { "s" },
                self.late.join(", ")
            ));
        }
        if let Some(b) = &self.unfinished {
            notes.push(format!(
                "resume: after {} tries the kill still landed while the program was writing {b}: the resumed launch found it half-written",
                LATE_RETRIES + 1
            ));
        }
        notes
    }
}
