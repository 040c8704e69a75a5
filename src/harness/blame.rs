//! Blame: which variation breaks a subject. The control pass (everything fixed), then one
//! pass per variation alone; each pass that diverges is named, with the first output or op in
//! which it did. Evidence only; the verdict is left to the judge.

use super::executor::{Pass, PassRuns};
use super::explain::first_differing;
use super::planner::Planner;
use super::source::RunSource;
use crate::outcome::FailureKind;
use crate::vary::{Blame, Variation};

/// Why a blame pass diverged, in one line: the first output in which a run differs from run 0
/// (`run 1 differs from run 0 first at step_0003.safetensors:w (stopped early)`, `… first at
/// their trace (<ops>)`), or, when no two runs differed, the failure that ended it (`run 1:
/// …`).
fn why(p: &Pass) -> Option<String> {
    let Some((i, b)) = p.differing.as_ref() else {
        return p.failure.as_ref().map(|f| f.line());
    };
    let first = match first_differing(p.first.as_ref()?, b) {
        Some((_, n, missing)) => output_words(n, missing),
        None => "its run digest".into(),
    };
    let stopped = if b.partial { " (stopped early)" } else { "" };
    Some(format!(
        "run {i} differs from run 0 first at {first}{stopped}"
    ))
}

/// How [`why`] names output `name` (`missing` says in which run it is missing): the digest of
/// the runs' traces as what it is, `their trace (<ops>)`.
fn output_words(name: &str, missing: &str) -> String {
    match name == crate::trace::program::OPS_NAME {
        true => format!("their trace ({name}){missing}"),
        false => format!("{name}{missing}"),
    }
}

/// With op traces (a program under `--trace`), where the runs of pass `p`, made with the one
/// variation `vary`, diverged.
fn first_op(p: &Pass, vary: &[Variation]) -> Option<(Variation, String)> {
    let a = p.first.as_ref()?.trace.as_ref()?;
    let b = p.differing.as_ref()?.1.trace.as_ref()?;
    let [v] = vary else {
        return None;
    };
    // Runs at other batch sizes make other op calls: their streams do not line up.
    if *v == Variation::Batch {
        return None;
    }
    let d = crate::trace::first_divergence(a, b)?;
    Some((*v, d.place().to_string()))
}

/// The control (everything fixed), then each variation alone, `opts.runs` runs each. With one
/// variation, "that variation alone" is the diverging `main` pass itself, which is not made
/// again: it is the evidence. The blame says how many runs it made and how long they took.
pub fn blame(source: &dyn RunSource, planner: &mut Planner, main: &Pass) -> Blame {
    let opts = planner.opts;
    let t0 = std::time::Instant::now();
    let mut passes: Vec<(String, usize)> = Vec::new();
    let mut first_ops: Vec<(Variation, String)> = Vec::new();
    let mut evidence: Vec<String> = Vec::new();
    let mut control_failed = false;
    let alone = |v: &[Variation]| opts.vary == v;
    let mut diverges = |vary: &[Variation], purpose: String| {
        let name = purpose.trim_start_matches("blame: ").to_string();
        let runs = PassRuns {
            count: opts.runs,
            traced: false,
        };
        if !vary.is_empty() && alone(vary) {
            let why = why(main).unwrap_or_default();
            evidence.push(format!("{name}: {why} (the main pass, not made again)"));
            first_ops.extend(first_op(main, vary));
            return main.diverged();
        }
        let mut p = planner.pass(source, vary, runs, &purpose);
        passes.push((purpose.clone(), p.metas.len()));
        let timed_out = p.failure.as_ref().map(|f| f.kind) == Some(FailureKind::Timeout);
        if p.failed_before_differing() && !timed_out {
            // A run failed before any two differed: the pass is made once more, so that one
            // crash that has nothing to do with the variation (a framework's teardown racing
            // under load) does not decide blame. The failure stays in the evidence; a crash
            // the variation causes every time fails again and counts. A timeout is not made
            // again (it would cost a second full --timeout wait).
            let why = why(&p).unwrap_or_default();
            evidence.push(format!("{name}: {why} (the pass was made again)"));
            let again = format!("{purpose} again");
            p = planner.pass(source, vary, runs, &again);
            passes.push((again, p.metas.len()));
        }
        if let Some(why) = why(&p) {
            control_failed |= vary.is_empty() && p.failed_before_differing();
            evidence.push(format!("{name}: {why}"));
        }
        first_ops.extend(first_op(&p, vary));
        p.diverged()
    };
    let blame = if diverges(&[], "blame: control".into()) {
        Blame::new(false, Vec::new()).control_failed(control_failed)
    } else {
        let tried: Vec<Variation> = opts.vary.iter().copied().filter(|v| v.blamable()).collect();
        let broken = tried
            .iter()
            .copied()
            .filter(|&v| diverges(&[v], format!("blame: {}", v.name())))
            .collect();
        Blame {
            tried,
            ..Blame::new(true, broken)
        }
    };
    blame
        .with_first_ops(first_ops)
        .with_cost(&passes, t0.elapsed().as_secs_f64())
        .with_evidence(evidence)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_trace_digest_is_named_as_the_runs_trace() {
        assert_eq!(super::output_words("<ops>", ""), "their trace (<ops>)");
        assert_eq!(super::output_words("w.npy", " (x)"), "w.npy (x)");
    }
}
