//! The `order` variation: cases whose result depends on what ran before them, found by
//! running each case once more, in reverse order, in the same process. Evidence only.

use super::in_process::CaseSource;
use super::source::{RunStart, Runs};
use crate::case::Case;
use crate::outcome::{CaseReport, Verdict};
use crate::vary::{Blame, Variation};
use std::collections::{BTreeMap, BTreeSet};

/// The `order` variation for one report: runs its case once more in this process under the
/// settings of its first run (the suite calls it for the cases in reverse order, after every
/// case ran once), made by `planner`, and records as evidence which outputs now differ from
/// that first run. Only reports whose evidence so far says deterministic (or a planted bug
/// missed) are checked; the verdict is left to the judge.
pub fn order_check(case: &dyn Case, r: &mut CaseReport, planner: &mut dyn Runs) {
    let now = r.verdict_so_far();
    if now != Verdict::Deterministic && now != Verdict::Missed {
        return;
    }
    let mut settings = planner.settings(0, false);
    settings.fresh_process = false;
    let source = CaseSource {
        case,
        backend: r.backend,
        children: None,
    };
    let told = RunStart {
        purpose: "order: reverse",
        index: 0,
        of: 1,
    };
    let Ok(out) = planner.one(&source, &settings, 0, told) else {
        return;
    };
    let now: BTreeMap<String, String> = out
        .digests
        .iter()
        .map(|(k, d)| (k.clone(), d.hex()))
        .collect();
    if now == r.digests {
        return;
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
}
