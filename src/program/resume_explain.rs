//! What a resume mismatch is explained by (`--vary resume`, [`super::resume`]): the state the
//! checkpoint forgot, from the state records of the uninterrupted run 0 and of the resumed
//! run compared at the resumed launch's first optimizer step, piece by piece; and, with op
//! traces, the first op after the resume that differs, in words a user can act on.

use crate::harness::Collected;
use crate::outcome::program::{ResumeCheck, StatePiece, StateRecord};
use crate::trace::TraceEntry;

/// Compares the state records at the first step after the checkpoint (`step`); fills
/// `check.state` and returns the report's line, or a note on why none was compared.
pub(super) fn state_line(
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
    let light = only_light(&mut a, &mut b);
    check.state = state_differences(&a, &b);
    // Steps count from 0: step N is the first after a checkpoint taken after N steps.
    let before = format!(", the first after the checkpoint{light}");
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

/// When either record is light (the uninterrupted run's step followed a checkpoint its
/// recorder did not see written, from native code), keeps the pieces both records have, and
/// says so: ` (light records: the per-tensor pieces were not compared …)`; else `""`.
fn only_light(a: &mut StateRecord, b: &mut StateRecord) -> String {
    if a.heavy && b.heavy {
        return String::new();
    }
    let has = |r: &StateRecord, name: &str| r.pieces.iter().any(|p| p.name == name);
    let (a0, b0) = (a.clone(), b.clone());
    a.pieces.retain(|p| has(&b0, &p.name));
    b.pieces.retain(|p| has(&a0, &p.name));
    let who = if a.heavy {
        "the resumed run's"
    } else {
        "the uninterrupted run's"
    };
    format!(" (compared without the per-tensor pieces: {who} record of it is light, as its recorder saw no checkpoint written from Python before it)")
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

/// The records of the two traces (run 0's, the resumed run's) that a resume comparison looks
/// at, from step `step` on. That step begins at the optimizer step before the checkpoint: in
/// the uninterrupted run it opens with the rest of that iteration (a scaler's update, zeroing
/// the gradients, the checkpoint itself), in the resumed launch with building the model and
/// loading the checkpoint; neither has a counterpart in the other. Both then load the step's
/// batch outside the model and run its forward in the model's modules. So each trace is taken
/// from its first op inside a module at that step, and, before it, the longest run of ops
/// (op, module, phase) that both end their pre-forward records with: the batch's loading.
fn after(a: &[TraceEntry], b: &[TraceEntry], step: u64) -> [Vec<TraceEntry>; 2] {
    let forward = |t: &[TraceEntry]| {
        let from = t.iter().position(|e| e.step >= step).unwrap_or(t.len());
        let to = t[from..]
            .iter()
            .position(|e| e.step > step || !e.module.is_empty())
            .map_or(t.len(), |i| from + i);
        (from, to)
    };
    let ((fa, ta), (fb, tb)) = (forward(a), forward(b));
    let same = |x: &TraceEntry, y: &TraceEntry| {
        (&x.op, &x.module, &x.phase) == (&y.op, &y.module, &y.phase)
    };
    let shared = a[fa..ta]
        .iter()
        .rev()
        .zip(b[fb..tb].iter().rev())
        .take_while(|(x, y)| same(x, y))
        .count();
    [a[ta - shared..].to_vec(), b[tb - shared..].to_vec()]
}

/// With op traces (`--trace ops`): the first op after the resume that differs from run 0's,
/// comparing both traces from the resumed step's batch loading and forward on ([`after`]; what
/// the resumed launch did before, building the model and loading, has no counterpart). An op of identical inputs and another
/// output is not called nondeterministic (runs 0 and 1 agreed): a random op whose generator
/// the state record found differing says so; any other says what it reads besides its inputs
/// differs after the resume.
pub(super) fn first_op(
    first: &Collected,
    resumed: &Collected,
    step: u64,
    state: &[String],
) -> Option<crate::trace::Divergence> {
    let (Some(a), Some(b)) = (&first.trace, &resumed.trace) else {
        return None;
    };
    let [a, b] = after(a, b, step);
    let mut d = crate::trace::first_divergence(&a, &b)?;
    if d.generator.is_some() {
        let restored = "not restored at resume (runs 0 and 1 agreed)";
        d.explanation = (d.explanation).replace(crate::trace::SEEDED_DIFFERENTLY, restored);
        return Some(d);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn differing_pieces_are_named_with_their_values_and_hints() {
        let hint = Some("not restored: save and load torch.get_rng_state()");
        let sched = Some("not restored: save and load scheduler.state_dict()");
        let a = StateRecord {
            step: 7,
            rank: 0,
            heavy: true,
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
    fn a_light_record_is_compared_on_the_pieces_both_records_have() {
        let rng = Some("not restored: save and load torch.get_rng_state()");
        let mut a = StateRecord {
            step: 3,
            rank: 0,
            heavy: false,
            pieces: vec![piece("torch's CPU generator", "aa", None, rng)],
        };
        let mut b = a.clone();
        b.heavy = true;
        b.pieces[0].digest = "bb".into();
        b.pieces.push(piece("parameter 0.weight", "cc", None, None));
        let said = only_light(&mut a, &mut b);
        assert!(
            said.contains("the uninterrupted run's record of it is light"),
            "{said}"
        );
        // The parameter, absent from the light record, is not "only in the resumed run".
        assert_eq!(
            state_differences(&a, &b),
            ["torch's CPU generator (not restored: save and load torch.get_rng_state())"]
        );
        // Two full records keep every piece.
        b.pieces.push(piece("parameter 0.weight", "cc", None, None));
        let (mut x, mut y) = (b.clone(), b.clone());
        assert_eq!(only_light(&mut x, &mut y), "");
        assert_eq!(x.pieces.len(), 2);
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
            heavy: true,
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
}
