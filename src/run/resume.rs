//! Resume ≡ uninterrupted (`bitexact run --vary resume --resume-with ARGS -- CMD`): a program
//! that is killed right after a checkpoint and resumed must end exactly as if it had never
//! stopped.
//!
//! Runs 0 and 1 run CMD uninterrupted: they are the control. When they agree, one more run is
//! made of two launches, both planned like any run ([`crate::harness::Planner`]):
//! 1. **the killed launch** (`resume: killed after checkpoint N`) runs CMD and is sent SIGKILL,
//!    as a preemption would, right after its Nth checkpoint is complete (`--resume-at N`,
//!    default 1; which paths are checkpoints and when one is complete: [`super::checkpoint`]);
//! 2. **the resumed launch** (`resume: resumed launch`) runs CMD with ARGS put where
//!    `{resume}` stands in it, or appended, in the same environment and the same
//!    `$BITEXACT_OUT`, holding what the killed launch left there (outputs written before the
//!    kill stay; those the resumed launch writes replace them). Its environment also has
//!    `BITEXACT_RESUME_STEP`: the optimizer steps the killed launch took before its checkpoint.
//!
//! The run's final outputs are compared with run 0's as usual (first divergence, element
//! counts, ULPs; the op trace, which only covers the resumed launch, is left out). They agree:
//! the check passes. They differ: `resume-mismatch` (exit 1). The killed launch ends before
//! its Nth checkpoint: `error`, saying what it wrote. The resumed launch fails: `error`, with
//! its Python exception.
//!
//! **The state the checkpoint forgot.** A PyTorch program records, at every optimizer step,
//! digests of what a bit-exact resume needs (`BITEXACT_STATE=1`; `python/bitexact/
//! _resume_state.py`): generators, optimizer and scheduler state, scaler, parameters and
//! buffers, data-loader state, the step's gradients. The resumed launch's first step is
//! compared with run 0's step of the same number, piece by piece (`resume_explain`), and
//! each piece that differs is named. Programs without torch get the file-level check, and a
//! note says naming the state needs torch.

use super::checkpoint::{Completed, Matcher};
use super::source::ProgramSource;
use super::{collect, Program};
use crate::harness::{diagnose, Collected, RunStart, Runs};
use crate::outcome::program::ResumeCheck;
use crate::outcome::{CaseReport, Failure};
use std::ffi::OsString;

/// Where the resume arguments go in the command (else they are appended).
pub const RESUME: &str = "{resume}";

/// What `--vary resume` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `--resume-with ARGS`, split into words.
    pub args: Vec<String>,
    /// `--resume-at N`: the checkpoint after which the launch is killed (1 = the first).
    pub at: usize,
    /// `--checkpoint GLOB`, or the default names.
    pub matcher: Matcher,
}

/// The command of a launch: the resumed launch gets `args` where [`RESUME`] stands or at the
/// end; every other launch has the placeholder removed.
pub fn command(command: &[OsString], args: Option<&[String]>) -> Vec<OsString> {
    let has = command.iter().any(|a| a == RESUME);
    let mut out = Vec::with_capacity(command.len() + args.map_or(0, <[String]>::len));
    for a in command {
        if a != RESUME {
            out.push(a.clone());
        } else if let Some(args) = args {
            out.extend(args.iter().map(OsString::from));
        }
    }
    if let (false, Some(args)) = (has, args) {
        out.extend(args.iter().map(OsString::from));
    }
    out
}

/// Splits `--resume-with`'s text into words: whitespace separates them; single or double
/// quotes keep spaces inside one (`--resume-with "--init_from=resume --out 'my dir'"`);
/// a backslash outside single quotes escapes the next character. An unclosed quote is an
/// error naming it.
pub fn words(text: &str) -> Result<Vec<String>, String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => cur.extend(chars.next()),
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
                continue;
            }
            (None, c) => cur.push(c),
        }
        any = true;
    }
    if let Some(q) = quote {
        return Err(format!("{text:?}: the quote {q} is never closed"));
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// The resume run after the main pass agreed: the killed launch, the resumed launch, and the
/// comparison with run 0 (`first`), into `report` (its program info is filled in later by
/// the caller, from the returned check).
pub(super) fn check(
    source: &ProgramSource,
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
    let both = diagnose::union(&first.digests, &resumed.digests);
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
        report.diff = diagnose::explain(first, 0, resumed, index);
        let steps = ckpt.steps as u64;
        report.divergence = super::resume_explain::first_op(first, resumed, steps, &check.state)
            .or_else(|| diagnose::first_output_divergence(first, resumed));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_resume_arguments_go_where_the_placeholder_stands_or_at_the_end() {
        let args = vec!["--init_from=resume".to_string()];
        let cmd = os(&["python", "train.py", "{resume}", "--iters", "20"]);
        assert_eq!(
            command(&cmd, Some(&args)),
            os(&["python", "train.py", "--init_from=resume", "--iters", "20"])
        );
        assert_eq!(
            command(&cmd, None),
            os(&["python", "train.py", "--iters", "20"])
        );
        let plain = os(&["python", "train.py"]);
        assert_eq!(
            command(&plain, Some(&args)),
            os(&["python", "train.py", "--init_from=resume"])
        );
        assert_eq!(command(&plain, None), plain);
    }

    #[test]
    fn resume_words_split_on_spaces_and_keep_quoted_ones() {
        let w = |s: &str| words(s).unwrap();
        assert_eq!(w("--init_from=resume"), ["--init_from=resume"]);
        assert_eq!(w("  --a 1   --b "), ["--a", "1", "--b"]);
        assert_eq!(
            w(r#"--out 'my dir' "x y" a\ b ''"#),
            ["--out", "my dir", "x y", "a b", ""]
        );
        assert!(words("--out 'oops").unwrap_err().contains("never closed"));
    }

    proptest::proptest! {
        #[test]
        fn quoted_words_come_back_as_they_were(ws in proptest::collection::vec("[a-z =/'\"-]{0,8}", 0..6)) {
            let quoted: Vec<String> = ws
                .iter()
                .map(|w| format!("'{}'", w.replace('\'', r#"'"'"'"#)))
                .collect();
            proptest::prop_assert_eq!(words(&quoted.join(" ")).unwrap(), ws);
        }
    }
}
