//! Diagnoses of a difference: explain it tensor by tensor, localize the first diverging op
//! with traced re-runs, blame the variation that breaks a case, and find cases whose result
//! depends on what ran before them (the `order` variation). Each adds evidence; none assigns a
//! verdict.

use super::executor::{run_in_process, run_with, Run};
use super::outcome::{CaseReport, Verdict};
use super::{check_case_with, Options};
use crate::backend::Backend;
use crate::case::Case;
use crate::controls::Controls;
use crate::diff::{self, TensorDiff};
use crate::digest;
use crate::trace::{first_divergence, Divergence, TraceEntry};
use crate::vary::{Blame, RunSettings, Variation};
use std::collections::{BTreeMap, BTreeSet};

/// Traced re-runs [`localize`] may spend to catch a difference again.
pub const LOCALIZE_RUNS: usize = 16;

/// Explains, tensor by tensor, how run `j` differs from run `i`.
pub(super) fn explain_runs(a: &Run, i: usize, b: &Run, j: usize) -> Vec<TensorDiff> {
    let names: BTreeSet<&String> = a.digests.keys().chain(b.digests.keys()).collect();
    names
        .into_iter()
        .filter_map(|n| match (a.outputs.get(n), b.outputs.get(n)) {
            (Some(x), Some(y)) if a.digests[n] != b.digests[n] => {
                Some(diff::explain(n, [i, j], x, y))
            }
            (Some(_), None) => Some(diff::missing(n, [i, j], true)),
            (None, Some(_)) => Some(diff::missing(n, [i, j], false)),
            _ => None,
        })
        .collect()
}

/// Re-runs the settings of run 0 and run `j` alternately with tracing (up to
/// [`LOCALIZE_RUNS`] runs), comparing each new trace with every earlier one of the other
/// settings (or any earlier one when both settings are the same, i.e. no variation), and names
/// the first diverging op of the first differing pair. A race that shows rarely gets many
/// pairs out of few runs this way. Called only for cases that record op traces.
pub(super) fn localize(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
    j: usize,
) -> Option<Divergence> {
    let settings = [
        RunSettings::for_run(controls, &opts.vary, 0, true),
        RunSettings::for_run(controls, &opts.vary, j, true),
    ];
    if settings[0].knobs.batch_split != settings[1].knobs.batch_split {
        return None; // different batchings make different op calls: traces do not line up
    }
    let same = settings[0] == settings[1];
    let mut traces: Vec<(usize, Vec<TraceEntry>)> = Vec::new();
    for i in 0..LOCALIZE_RUNS {
        let side = i % 2;
        let t = run_with(case, backend, &settings[side], opts).ok()?.trace?;
        for (other, earlier) in &traces {
            if same || *other != side {
                if let Some(d) = first_divergence(earlier, &t) {
                    return Some(d);
                }
            }
        }
        traces.push((side, t));
    }
    None
}

/// The control (everything fixed), then each variation alone.
pub(super) fn blame(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    opts: &Options,
) -> Blame {
    let quiet = |vary: Vec<Variation>| Options {
        vary,
        trace: false,
        localize: false,
        blame: false,
        ..opts.clone()
    };
    let diverges = |vary: Vec<Variation>| {
        let r = check_case_with(case, backend, controls, &quiet(vary));
        r.distinct_digests > 1
    };
    if diverges(Vec::new()) {
        return Blame::new(false, Vec::new());
    }
    let broken = opts
        .vary
        .iter()
        .copied()
        .filter(|&v| v.blamable() && diverges(vec![v]))
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
        if r.verdict != Verdict::Deterministic && r.verdict != Verdict::Missed {
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
