//! Diagnoses of a difference, for every kind of run source: explain it output by output,
//! name the first output that differs in write order, blame the variation that breaks a
//! subject, and find cases whose result depends on what ran before them (the `order`
//! variation). Each adds evidence; none assigns a verdict.

use super::executor::pass;
use super::in_process::run_in_process;
use super::outcome::{CaseReport, Verdict};
use super::source::{Collected, RunSource};
use super::Options;
use crate::case::Case;
use crate::controls::Controls;
use crate::diff::{self, TensorDiff};
use crate::digest::{self, Digest};
use crate::trace::Divergence;
use crate::vary::{Blame, RunSettings, Variation};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// At most this many differing outputs are explained element by element (the rest are
/// counted in one more line).
pub const EXPLAIN_MAX_OUTPUTS: usize = 8;

/// The names of two runs' outputs, in the earlier run's order, then the later run's extra
/// names, each with its digest in either run.
fn union<'a>(
    a: &'a [(String, Digest)],
    b: &'a [(String, Digest)],
) -> Vec<(&'a str, Option<Digest>, Option<Digest>)> {
    let in_b: HashMap<&str, Digest> = b.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let in_a: HashMap<&str, Digest> = a.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let mut out: Vec<_> = a
        .iter()
        .map(|(n, d)| (n.as_str(), Some(*d), in_b.get(n.as_str()).copied()))
        .collect();
    out.extend(
        b.iter()
            .filter(|(n, _)| !in_a.contains_key(n.as_str()))
            .map(|(n, d)| (n.as_str(), None, Some(*d))),
    );
    out
}

/// Explains each output that differs between run `i` (`a`) and run `j` (`b`), in `a`'s
/// order, at most [`EXPLAIN_MAX_OUTPUTS`].
pub fn explain(a: &Collected, i: usize, b: &Collected, j: usize) -> Vec<TensorDiff> {
    let runs = [i, j];
    let differing: Vec<_> = union(&a.digests, &b.digests)
        .into_iter()
        .filter(|(_, x, y)| x != y)
        .collect();
    let mut out: Vec<TensorDiff> = differing
        .iter()
        .take(EXPLAIN_MAX_OUTPUTS)
        .map(|(n, x, y)| match (x, y) {
            (Some(_), None) => diff::missing(n, runs, true),
            (None, Some(_)) => diff::missing(n, runs, false),
            _ => {
                let mut d = match (a.loader.load(n), b.loader.load(n)) {
                    (Ok(x), Ok(y)) => diff::explain(n, runs, &x, &y),
                    (Err(e), _) | (_, Err(e)) => {
                        let mut d = diff::missing(n, runs, true);
                        d.note = Some(format!(
                            "digests differ; not explained element by element: {e:#}"
                        ));
                        d
                    }
                };
                if let (Some(x), Some(y)) = (a.loader.text(n), b.loader.text(n)) {
                    d.note = d.note.or(first_differing_line(n, &x, &y));
                }
                d
            }
        })
        .collect();
    if differing.len() > EXPLAIN_MAX_OUTPUTS {
        let mut d = diff::missing("…", runs, true);
        d.note = Some(format!(
            "{} more differing outputs not shown",
            differing.len() - EXPLAIN_MAX_OUTPUTS
        ));
        out.push(d);
    }
    out
}

/// The first output, in the order the earlier run wrote them, whose digest differs between two
/// runs or that only one of them wrote; every output before it is identical.
pub fn first_output_divergence(a: &Collected, b: &Collected) -> Option<Divergence> {
    union(&a.digests, &b.digests)
        .into_iter()
        .enumerate()
        .find(|(_, (_, x, y))| x != y)
        .map(|(i, (n, x, y))| Divergence {
            call: i,
            op: n.to_string(),
            inputs_matched: true,
            explanation: format!(
                "first divergence: {n}{} (every earlier output identical)",
                match (x, y) {
                    (Some(_), None) => " (missing in the later run)",
                    (None, Some(_)) => " (missing in the earlier run)",
                    _ => "",
                }
            ),
        })
}

/// The control (everything fixed), then each variation alone, `opts.runs` runs each.
pub fn blame(source: &dyn RunSource, controls: &Controls, opts: &Options) -> Blame {
    let diverges = |vary: &[Variation]| pass(source, controls, vary, opts.runs, false).diverged();
    if diverges(&[]) {
        return Blame::new(false, Vec::new());
    }
    let broken = opts
        .vary
        .iter()
        .copied()
        .filter(|&v| v.blamable() && diverges(&[v]))
        .collect();
    Blame::new(true, broken)
}

/// The `order` variation: runs the cases that passed once more, in reverse order, in this
/// process under the settings of their first run, and records as evidence which outputs now
/// differ from that first run. The caller re-judges the reports.
pub fn order_pass(
    cases: &[&dyn Case],
    controls: &Controls,
    vary: &[Variation],
    reports: &mut [CaseReport],
) {
    let mut settings = RunSettings::for_run(controls, vary, 0, false);
    settings.fresh_process = false;
    for r in reports.iter_mut().rev() {
        if r.verdict() != Verdict::Deterministic && r.verdict() != Verdict::Missed {
            continue;
        }
        let Some(case) = cases.iter().find(|c| c.name() == r.name) else {
            continue;
        };
        let Ok(out) = run_in_process(*case, r.backend, &settings) else {
            continue;
        };
        let now: BTreeMap<String, String> = digest::digest_all(&out.outputs)
            .into_iter()
            .map(|(k, d)| (k, d.hex()))
            .collect();
        if now == r.digests {
            continue;
        }
        let names: BTreeSet<&String> = now.keys().chain(r.digests.keys()).collect();
        let differing: Vec<&str> = names
            .into_iter()
            .filter(|n| now.get(*n) != r.digests.get(*n))
            .map(|n| n.as_str())
            .collect();
        r.blame = Some(Blame::new(true, vec![Variation::Order]));
        r.evidence.order_dependence = Some(format!(
            "result depends on case order: {} differ(s) when the suite runs again in reverse order",
            differing.join(", ")
        ));
        r.rejudge();
    }
}

/// The first line where two text outputs differ, in words (lines over 120 characters cut).
fn first_differing_line(name: &str, a: &[u8], b: &[u8]) -> Option<String> {
    let (x, y) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let (mut lx, mut ly) = (x.lines(), y.lines());
    for n in 1.. {
        match (lx.next(), ly.next()) {
            (None, None) => return None,
            (p, q) if p == q => continue,
            (p, q) => {
                let cap = |s: Option<&str>| match s {
                    None => "(no line)".to_string(),
                    Some(s) if s.chars().count() > 120 => {
                        format!("{:?}…", s.chars().take(120).collect::<String>())
                    }
                    Some(s) => format!("{s:?}"),
                };
                let name = name.trim_start_matches('<').trim_end_matches('>');
                return Some(format!(
                    "{name}: first differing line {n}: {} vs {}",
                    cap(p),
                    cap(q)
                ));
            }
        }
    }
    None
}
