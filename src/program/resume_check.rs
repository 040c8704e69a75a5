//! The resume check of `--vary resume` ([`super::resume`]): after the main pass agreed, the
//! killed launch and the resumed launch are planned as one more run, and its outputs and
//! state records are compared with run 0's.

use super::checkpoint::Completed;
use super::killed::Resumable;
use super::resume::Spec;
use super::{collect, Program};
use crate::harness::{explain, Collected, RunStart, Runs};
use crate::outcome::program::ResumeCheck;
use crate::outcome::CaseReport;
use crate::outcome::Failure;

/// The resume run after the main pass agreed: the killed launch, the resumed launch, and the
/// comparison with run 0 (`first`), into `report` (its program info is filled in later by
/// the caller, from the returned check).
pub(super) fn check(
    source: &dyn Resumable,
    program: &Program,
    first: &Collected,
    planner: &mut dyn Runs,
    report: &mut CaseReport,
) -> Option<ResumeCheck> {
    let spec = program.resume.as_ref()?;
    let why = match (&report.evidence.failure, report.distinct_digests > 1) {
        (Some(_), _) => "a run failed",
        (None, true) => "the uninterrupted runs differ, so a resumed run has nothing to match",
        (None, false) => "",
    };
    if !why.is_empty() {
        report.notes.push(format!("resume: not checked: {why}"));
        return None;
    }
    let index = planner.opts().runs;
    let mut settings = planner.settings(0, false);
    settings.knobs.resume = Some(crate::vary::Launch::Killed);
    let killed = format!("resume: killed after checkpoint {}", spec.at);
    let failed = |report: &mut CaseReport, f: Failure| {
        report.evidence.failure = Some(f.in_run(index));
        None
    };
    let told = |purpose, index| RunStart {
        purpose,
        index,
        of: 2,
    };
    if let Err(f) = planner.one(source, &settings, index, told(&killed, 0)) {
        return failed(report, f);
    }
    let killed = source.killed_launch()?;
    settings.knobs.resume = Some(crate::vary::Launch::Resumed);
    let mut resumed = match planner.one(source, &settings, index, told("resume: resumed launch", 1))
    {
        Ok(c) => c,
        Err(mut f) => {
            // A launch that failed before its program ran leaves the output directory.
            let _ = std::fs::remove_dir_all(source.out_path());
            let after = &killed.checkpoint.name;
            let half = match &killed.unfinished {
                Some(b) => format!("; the kill landed while the program was writing {b}, which it may have read half-written"),
                None => String::new(),
            };
            f.message = format!(
                "the resumed launch (after checkpoint {after}{half}) failed: {}",
                f.message
            );
            return failed(report, f);
        }
    };
    report.notes.extend(killed.late_notes());
    if killed.past > 0 {
        report.notes.push(format!(
            "resume: the program completed {} more checkpoint{} after the {}th before the kill landed; the resumed launch started from the last, {}",
            killed.past,
            if killed.past == 1 { "" } else { "s" },
            spec.at,
            killed.checkpoint.name
        ));
    }
    Some(compare(
        spec,
        first,
        &mut resumed,
        index,
        &killed.checkpoint,
        report,
    ))
}

/// Compares the resumed run with run 0: outputs (into `report.diff` and `divergence`, and the
/// evidence), and the state records at the first step after the checkpoint.
fn compare(
    spec: &Spec,
    first: &Collected,
    resumed: &mut Collected,
    index: usize,
    ckpt: &Completed,
    report: &mut CaseReport,
) -> ResumeCheck {
    // The op trace and standard output cover the resumed launch only: not compared here
    // (the ops after the resume are, in `first_op`).
    let partial_only = [crate::trace::program::OPS_NAME, collect::STDOUT_NAME];
    resumed
        .digests
        .retain(|(n, _)| !partial_only.contains(&n.as_str()));
    let theirs = first
        .digests
        .iter()
        .filter(|(n, _)| partial_only.contains(&n.as_str()));
    resumed.digests.extend(theirs.cloned());
    if first.digests.iter().any(|(n, _)| n == collect::STDOUT_NAME) {
        report.notes.push("resume: standard output is not compared: the resumed run's holds only what its resumed launch printed".into());
    }
    let step = (!resumed.state.is_empty() || !first.state.is_empty()).then_some(ckpt.steps);
    let mut check = ResumeCheck {
        checkpoint: ckpt.name.clone(),
        step: step.map(|s| s as u64),
        at_seconds: ckpt.at,
        resumed_with: spec.args.clone(),
        ..ResumeCheck::default()
    };
    let both = explain::union(&first.digests, &resumed.digests);
    let partial = resumed.partial; // stopped early: what it had not written is no difference
    for (name, x, y) in
        both.filter(|(n, _, y)| !(partial_only.contains(n) || partial && y.is_none()))
    {
        check.compared += 1;
        if x != y {
            check.differing.push(name.to_string());
        }
    }
    let state = super::resume_explain::state_line(first, resumed, ckpt.steps, &mut check);
    check.summary = summary(&check);
    if check.differing.is_empty() {
        report.notes.push(check.summary.clone()); // a mismatch says it as the verdict's message
    }
    report.notes.extend(state);
    if !check.differing.is_empty() {
        report.diff = explain::explain(first, 0, resumed, index);
        let steps = ckpt.steps as u64;
        report.divergence = super::resume_explain::first_op(first, resumed, steps, &check.state)
            .or_else(|| explain::first_output_divergence(first, resumed));
        report.evidence.resume_mismatch = Some(check.summary.clone());
    }
    check.differing.truncate(8);
    check
}

/// The report's line on the run: `resume: killed after checkpoint ckpt.pt (…), resumed: …`.
fn summary(c: &ResumeCheck) -> String {
    let at = match c.step {
        Some(s) => format!(" taken after {s} optimizer step{}", plural(s)),
        None => String::new(),
    };
    let verdict = match c.differing.first() {
        None => format!(
            "every one of {} outputs identical to the uninterrupted run's",
            c.compared
        ),
        Some(n) => format!(
            "{} of {} outputs differ from the uninterrupted run's, first {n}",
            c.differing.len(),
            c.compared
        ),
    };
    let how = match c.resumed_with.is_empty() {
        true => "relaunched unchanged".to_string(),
        false => format!("resumed with {}", crate::quote::shell(&c.resumed_with)),
    };
    format!(
        "resume: killed (SIGKILL) {:.2}s in, right after checkpoint {}{at}; {how}: {verdict}",
        c.at_seconds, c.checkpoint,
    )
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
