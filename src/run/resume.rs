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
//! compared with run 0's step of the same number, piece by piece ([`state_differences`]), and
//! each piece that differs is named. Programs without torch get the file-level check, and a
//! note says naming the state needs torch.

use super::checkpoint::{self, Completed, Matcher};
use super::source::ProgramSource;
use super::{spawn, Program};
use crate::harness::program::{ResumeCheck, StatePiece, StateRecord};
use crate::harness::{diagnose, Collected, Failure, FailureKind, RunMeta, Runs, Started};
use crate::outcome::CaseReport;
use crate::vary::RunSettings;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::Arc;

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
    /// Record the state a resume needs at each optimizer step (through the injected
    /// `sitecustomize`).
    pub state: bool,
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

/// What the killed launch left: its last completed checkpoint and the steps before it, or why
/// there is none.
#[derive(Clone, Debug)]
pub struct Killed {
    /// The checkpoint it was killed after.
    pub checkpoint: Completed,
}

/// The killed launch: runs the program in `out` (created here) with `env` under a checkpoint
/// watch that sends SIGKILL right after the Nth checkpoint completes. Killed so, `out` stays
/// for the resumed launch and [`Killed`] says after which checkpoint; a launch that ends before
/// that checkpoint fails the run (`no-checkpoint`, or its own failure when it failed), and
/// `out` is removed.
pub(super) fn start_killed(
    program: &Program,
    out: &Path,
    settings: &RunSettings,
    env: BTreeMap<String, String>,
) -> (Started, Option<Killed>) {
    let spec = program
        .resume
        .as_ref()
        .expect("a resume run has a resume spec");
    let harness = |e: anyhow::Error| Failure::from_error(FailureKind::Harness, &e);
    if let Err(e) = std::fs::create_dir(out) {
        let e = anyhow::anyhow!("creating {} for the killed launch: {e}", out.display());
        return (Started::failed(RunMeta::default(), harness(e)), None);
    }
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
    let watch = checkpoint::watch(
        out,
        spec.matcher.clone(),
        spec.at,
        pid.clone(),
        stop.clone(),
    );
    let ended = spawn::run(&spawn::Spawn {
        command: &command,
        env: &env,
        stdout: None,
        timeout: program.timeout,
        memory_limit_mb: program.memory_limit_mb,
        stop: Some(&stop),
        pid: Some(&pid),
    });
    let detector = watch.map(checkpoint::Watch::finish);
    let ended = match ended {
        Ok(e) => e,
        Err(e) => return (Started::failed(RunMeta::default(), harness(e)), None),
    };
    let meta = RunMeta {
        seconds: ended.seconds,
        peak_bytes: ended.peak_rss_bytes,
        ..RunMeta::default()
    };
    // Killed by the watch (its flag, not `ended.stopped`: the launch may die of the signal
    // before the spawn loop reads the flag).
    let reached = detector.as_ref().and_then(|d| d.completed.get(spec.at - 1));
    if let (true, Some(c)) = (stop.load(std::sync::atomic::Ordering::SeqCst), reached) {
        let killed = Killed {
            checkpoint: c.clone(),
        };
        let empty = Collected::of_outputs(crate::case::Outputs::new(), None);
        return (Started::ready(meta, empty), Some(killed));
    }
    let _ = std::fs::remove_dir_all(out);
    let seen = match &detector {
        Some(d) => d.seen(spec.at),
        None => "inotify is not available here to see checkpoints complete".into(),
    };
    let mut f = Failure::new(
        FailureKind::NoCheckpoint,
        format!(
            "no checkpoint matching {} completed ({seen}), so there was nothing to resume from",
            spec.matcher.describe()
        ),
    );
    if let Some(own) = spawn::failed(&ended, program.timeout, program.memory_limit_mb.is_some()) {
        f.message = format!(
            "the launch to be killed after a checkpoint failed first: {}",
            own.message
        );
        f.kind = own.kind;
    }
    (Started::failed(meta, f), None)
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
    if report.distinct_digests > 1 || report.evidence.failure.is_some() {
        report.notes.push(
            "resume: not checked: the uninterrupted runs 0 and 1 do not agree, so a resumed run has nothing to match"
                .into(),
        );
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
    if let Err(f) = planner.one(source, &settings, index, (&killed, 0, 2)) {
        return failed(report, f);
    }
    let ckpt = source.killed_launch()?.checkpoint;
    settings.knobs.resume = Some(crate::vary::Launch::Resumed);
    let mut resumed = match planner.one(source, &settings, index, ("resume: resumed launch", 1, 2))
    {
        Ok(c) => c,
        Err(mut f) => {
            f.message = format!("the resumed launch failed: {}", f.message);
            return failed(report, f);
        }
    };
    Some(compare(spec, first, &mut resumed, index, &ckpt, report))
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
    // The op trace covers the resumed launch only: not an output to compare here.
    let ops = crate::trace::program::OPS_NAME;
    resumed.digests.retain(|(n, _)| n != ops);
    let theirs = first.digests.iter().find(|(n, _)| n == ops);
    resumed.digests.extend(theirs.cloned());
    let step = (!resumed.state.is_empty() || !first.state.is_empty()).then_some(ckpt.steps);
    let mut check = ResumeCheck {
        checkpoint: ckpt.name.clone(),
        step: step.map(|s| s as u64),
        at_seconds: ckpt.at,
        resumed_with: spec.args.clone(),
        ..ResumeCheck::default()
    };
    let both = diagnose::union(&first.digests, &resumed.digests);
    for (name, x, y) in both {
        check.compared += 1;
        if x != y {
            check.differing.push(name.to_string());
        }
    }
    let state = state_line(first, resumed, ckpt.steps, &mut check);
    check.summary = summary(&check);
    if check.differing.is_empty() {
        report.notes.push(check.summary.clone()); // a mismatch says it as the verdict's message
    }
    report.notes.extend(state);
    if !check.differing.is_empty() {
        report.diff = diagnose::explain(first, 0, resumed, index);
        report.divergence = first_op_after_resume(first, resumed, ckpt.steps as u64, &check.state)
            .or_else(|| diagnose::first_output_divergence(first, resumed));
        report.evidence.resume_mismatch = Some(check.summary.clone());
    }
    check.differing.truncate(8);
    check
}

/// With op traces (`--trace ops`): the first op after the resume that differs from run 0's,
/// comparing both traces from `step` on (what the resumed launch did before its first step,
/// building the model and loading, has no counterpart). An op of identical inputs and another
/// output is not called nondeterministic (runs 0 and 1 agreed): a random op whose generator
/// the state record found differing says so; any other says what it reads besides its inputs
/// differs after the resume.
fn first_op_after_resume(
    first: &Collected,
    resumed: &Collected,
    step: u64,
    state: &[String],
) -> Option<crate::trace::Divergence> {
    let (Some(a), Some(b)) = (&first.trace, &resumed.trace) else {
        return None;
    };
    let from = |t: &[crate::trace::TraceEntry]| {
        t.iter()
            .filter(|e| e.step >= step)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut d = crate::trace::first_divergence(&from(a), &from(b))?;
    let generator = state.iter().find(|s| s.contains("generator"));
    let why = match generator.filter(|_| random(&d.op)) {
        Some(g) => {
            let name = g.split(" (").next().unwrap_or(g);
            format!("{name} differs (not restored at resume)")
        }
        None => "what it reads besides its inputs differs after the resume (a generator's state, or a setting the resumed launch makes otherwise)".into(),
    };
    d.explanation = d.explanation.replace("this op is nondeterministic", &why);
    Some(d)
}

/// Whether an ATen op draws random numbers (`aten::randint`, `aten::bernoulli_`,
/// `aten::native_dropout`, …).
fn random(op: &str) -> bool {
    let name = op.trim_start_matches("aten::");
    [
        "rand",
        "bernoulli",
        "dropout",
        "normal",
        "uniform",
        "multinomial",
        "exponential",
        "random_",
        "poisson",
        "cauchy",
        "geometric",
    ]
    .iter()
    .any(|r| name.starts_with(r) || name.contains(&format!("_{r}")))
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
    format!(
        "resume: killed (SIGKILL) {:.2}s in, right after checkpoint {}{at}; resumed with {}: {verdict}",
        c.at_seconds,
        c.checkpoint,
        crate::quote::shell(&c.resumed_with)
    )
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Compares the state records at the first step after the checkpoint (`step`); fills
/// `check.state` and returns the report's line, or a note on why none was compared.
fn state_line(
    first: &Collected,
    resumed: &Collected,
    step: usize,
    check: &mut ResumeCheck,
) -> Option<String> {
    if first.state.is_empty() && resumed.state.is_empty() {
        return Some(
            "resume: no state record (naming the state a checkpoint forgot needs a PyTorch program whose optimizer steps bitexact can see)"
                .into(),
        );
    }
    let at = |records: &[StateRecord]| records.iter().rfind(|r| r.step == step as u64).cloned();
    let (Some(mut a), Some(mut b)) = (at(&first.state), at(&resumed.state)) else {
        return Some(format!(
            "resume: no state record of step {step} in both runs (the resumed launch made no optimizer step?)"
        ));
    };
    let unused = unused_generators(&first.state, &a);
    for r in [&mut a, &mut b] {
        r.pieces.retain(|p| !unused.contains(&p.name));
    }
    check.state = state_differences(&a, &b);
    let before = step.checked_sub(1).map_or(String::new(), |s| {
        format!(", the first after the checkpoint taken at step {s}")
    });
    Some(match (check.state.is_empty(), check.differing.is_empty()) {
        (false, _) => format!(
            "resume: at step {step}{before}, differs from the uninterrupted run in: {}",
            check.state.join("; ")
        ),
        (true, true) => format!("resume: at step {step}{before}, every recorded piece of state agrees"),
        (true, false) => format!(
            "resume: at step {step}{before}, every recorded piece of state agrees, yet the outputs differ: the data the step read differs (a data position not restored), or state bitexact does not see differs"
        ),
    })
}

/// The generators of record `at` that the uninterrupted run never drew from since its first
/// record (the same state then and at `at`): a program that never seeds numpy or `random` and
/// never uses them has them differ in every run, and not restoring them changes nothing.
fn unused_generators(records: &[StateRecord], at: &StateRecord) -> Vec<String> {
    let Some(start) = records
        .iter()
        .filter(|r| r.rank == at.rank)
        .min_by_key(|r| r.step)
    else {
        return Vec::new();
    };
    let same = |p: &StatePiece| {
        start
            .pieces
            .iter()
            .any(|q| q.name == p.name && q.digest == p.digest)
    };
    let unused = at
        .pieces
        .iter()
        .filter(|p| p.kind == "generator" && same(p));
    unused
        .map(|p| p.name.clone())
        .filter(|_| start.step < at.step)
        .collect()
}

/// The pieces of state that differ between two records of one step, in `a`'s order, each
/// with both values when small (the resumed run's first) and how to fix it when known:
/// `StepLR: last_epoch 0 vs 6 uninterrupted`,
/// `torch's CPU generator (not restored: save and load torch.get_rng_state())`.
///
/// The record is made before the optimizer step, after the step's forward and backward, so
/// the step's gradients and BatchNorm's running statistics follow from what it read and drew.
/// They are named as what follows from the other pieces when some differ, and as the sign that
/// the data the step read differs (a data position not restored) when nothing else does. A
/// BatchNorm whose `num_batches_tracked` differs was not restored: its buffers are named. Pieces
/// one record has and the other lacks are counted per owner (`AdamW: 12 pieces only in the
/// uninterrupted run`, an optimizer rebuilt instead of restored).
pub fn state_differences(a: &StateRecord, b: &StateRecord) -> Vec<String> {
    let find = |r: &StateRecord, name: &str| r.pieces.iter().find(|q| q.name == name).cloned();
    let counted = |p: &StatePiece| p.name.ends_with("num_batches_tracked");
    let counters_agree = a
        .pieces
        .iter()
        .filter(|p| counted(p))
        .all(|p| find(b, &p.name).is_some_and(|q| q.digest == p.digest));
    let follows = |p: &StatePiece| {
        (p.kind == "data" && p.name.starts_with("gradients"))
            || (p.kind == "buffer" && counters_agree && !counted(p))
    };
    let (mut named, mut derived) = (Vec::new(), Vec::new());
    let mut only: Vec<(String, &str, usize, Option<String>)> = Vec::new();
    let mut alone = |p: &StatePiece, side: &'static str| {
        let owner = p.name.split(": ").next().unwrap_or(&p.name).to_string();
        match only.iter_mut().find(|o| o.0 == owner && o.1 == side) {
            Some(o) => o.2 += 1,
            None => only.push((owner, side, 1, p.hint.clone())),
        }
    };
    for p in &a.pieces {
        match find(b, &p.name) {
            None => alone(p, "the uninterrupted run"),
            Some(q) if q.digest == p.digest => {}
            Some(_) if follows(p) => derived.push(p.kind.clone()),
            Some(q) => push_piece(&mut named, p, &q),
        }
    }
    for q in b.pieces.iter().filter(|q| find(a, &q.name).is_none()) {
        alone(q, "the resumed run");
    }
    for (owner, side, n, hint) in only {
        let what = if n == 1 {
            "1 piece".into()
        } else {
            format!("{n} pieces")
        };
        let hint = hint.map_or(String::new(), |h| format!(" ({h})"));
        named.push(format!("{owner}: {what} only in {side}{hint}"));
    }
    if !derived.is_empty() {
        named.push(consequence(&derived, named.is_empty()));
    }
    named
}

/// Adds one differing piece to `named`: its name, both values when small (the resumed run's
/// first), its hint. A piece of the same owner and hint as the one before joins it
/// (`StepLR: last_epoch 0 vs 4 uninterrupted, _step_count 1 vs 5 uninterrupted (hint)`).
fn push_piece(named: &mut Vec<String>, uninterrupted: &StatePiece, resumed: &StatePiece) {
    let mut s = uninterrupted.name.clone();
    if let (Some(x), Some(y)) = (&uninterrupted.value, &resumed.value) {
        s.push_str(&format!(" {y} vs {x} uninterrupted"));
    }
    let hint = resumed.hint.as_ref().or(uninterrupted.hint.as_ref());
    let hint = hint.map_or(String::new(), |h| format!(" ({h})"));
    let owner = s.split_once(": ").map(|(o, _)| format!("{o}: "));
    if let (Some(last), Some(owner)) = (named.last_mut(), &owner) {
        if last.starts_with(owner.as_str()) && last.ends_with(&hint) && !hint.is_empty() {
            let kept = last.len() - hint.len();
            last.truncate(kept);
            last.push_str(&format!(", {}{hint}", &s[owner.len()..]));
            return;
        }
    }
    named.push(s + &hint);
}

/// What the differing gradients and buffers (`kinds`) say: they follow from the pieces named
/// before, or, when `alone`, the step read other data.
fn consequence(kinds: &[String], alone: bool) -> String {
    let buffers = kinds.iter().filter(|k| *k == "buffer").count();
    let mut what = Vec::new();
    if kinds.iter().any(|k| k == "data") {
        what.push("the step's gradients".to_string());
    }
    match buffers {
        0 => {}
        1 => what.push("1 BatchNorm statistic".into()),
        n => what.push(format!("{n} BatchNorm statistics")),
    }
    let what = what.join(" and ");
    match alone {
        true => format!(
            "the data the step read (a data position not restored: the epoch, the batch in it, or the sampler's order): {what} differ while every other recorded piece agrees"
        ),
        false => format!("and, following from the above, {what}"),
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

    fn piece(name: &str, digest: &str, value: Option<&str>, hint: Option<&str>) -> StatePiece {
        StatePiece {
            name: name.into(),
            kind: "other".into(),
            digest: digest.into(),
            value: value.map(Into::into),
            hint: hint.map(Into::into),
        }
    }

    #[test]
    fn random_ops_are_told_apart_by_name() {
        for op in [
            "aten::randint",
            "aten::bernoulli_.float",
            "aten::native_dropout",
            "aten::normal_",
            "aten::randn.generator",
            "aten::multinomial",
        ] {
            assert!(random(op), "{op}");
        }
        for op in [
            "aten::addmm",
            "aten::mean",
            "aten::embedding",
            "aten::arange",
        ] {
            assert!(!random(op), "{op}");
        }
    }

    #[test]
    fn differing_pieces_are_named_with_their_values_and_hints() {
        let hint = Some("not restored: save and load torch.get_rng_state()");
        let sched = Some("not restored: save and load scheduler.state_dict()");
        let a = StateRecord {
            step: 7,
            rank: 0,
            pieces: vec![
                piece("torch's CPU generator", "aa", None, hint),
                piece("StepLR: last_epoch", "06", Some("6"), sched),
                piece("StepLR: _step_count", "07", Some("7"), sched),
                piece("parameter 0.weight", "cc", None, None),
                piece("EMA", "dd", None, None),
            ],
        };
        let mut b = a.clone();
        b.pieces[0].digest = "bb".into();
        b.pieces[1] = piece("StepLR: last_epoch", "00", Some("0"), sched);
        b.pieces[2] = piece("StepLR: _step_count", "01", Some("1"), sched);
        b.pieces.remove(4);
        assert_eq!(
            state_differences(&a, &b),
            [
                "torch's CPU generator (not restored: save and load torch.get_rng_state())",
                "StepLR: last_epoch 0 vs 6 uninterrupted, _step_count 1 vs 7 uninterrupted (not restored: save and load scheduler.state_dict())",
                "EMA: 1 piece only in the uninterrupted run",
            ]
        );
        assert!(state_differences(&a, &a).is_empty());
    }

    #[test]
    fn gradients_and_statistics_follow_from_other_pieces_or_name_the_data() {
        let piece = |name: &str, kind: &str, digest: &str| StatePiece {
            name: name.into(),
            kind: kind.into(),
            digest: digest.into(),
            ..StatePiece::default()
        };
        let record = |gen: &str, grads: &str, mean: &str, count: &str| StateRecord {
            step: 4,
            rank: 0,
            pieces: vec![
                piece("torch's CPU generator", "generator", gen),
                piece("buffer 1.running_mean", "buffer", mean),
                piece("buffer 1.num_batches_tracked", "buffer", count),
                piece("gradients (what the step's data gave)", "data", grads),
                piece("AdamW: 0.weight exp_avg", "optimizer", "e"),
                piece("AdamW: 0.bias exp_avg", "optimizer", "f"),
            ],
        };
        let a = record("g", "d", "m", "5");
        // The data alone: gradients and statistics differ, the counter agrees.
        assert_eq!(
            state_differences(&a, &record("g", "D", "M", "5")),
            ["the data the step read (a data position not restored: the epoch, the batch in it, or the sampler's order): the step's gradients and 1 BatchNorm statistic differ while every other recorded piece agrees"]
        );
        // A generator: the gradients follow from it.
        assert_eq!(
            state_differences(&a, &record("G", "D", "m", "5")),
            [
                "torch's CPU generator",
                "and, following from the above, the step's gradients"
            ]
        );
        // BatchNorm not restored: its counter differs, so its buffers are named.
        assert_eq!(
            state_differences(&a, &record("g", "d", "M", "1")),
            ["buffer 1.running_mean", "buffer 1.num_batches_tracked"]
        );
        // An optimizer rebuilt: its per-parameter pieces are only in the uninterrupted run.
        let mut fresh = record("g", "d", "m", "5");
        fresh.pieces.truncate(4);
        assert_eq!(
            state_differences(&a, &fresh),
            ["AdamW: 2 pieces only in the uninterrupted run"]
        );
    }
}
