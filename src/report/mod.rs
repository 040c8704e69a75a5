//! Reports: the result of a `bitexact report` run and its output formats.

pub mod json;
pub mod junit;
pub mod markdown;
pub mod text;

use crate::controls::Controls;
use crate::cost::CostRow;
use crate::harness::{CaseReport, Summary, Verdict};
use crate::platform::Platform;
use serde::Serialize;

/// Version of the JSON report format.
pub const REPORT_VERSION: u32 = 1;

/// Everything a report run found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Report format version.
    pub version: u32,
    /// Controls the cases ran under.
    pub controls: Controls,
    /// Runs per case.
    pub runs: usize,
    /// Where it ran.
    pub platform: Platform,
    /// One entry per case and backend.
    pub cases: Vec<CaseReport>,
    /// Cost of determinism per op (measured with `--deterministic off`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cost: Vec<CostRow>,
    /// Totals per verdict.
    pub summary: Summary,
    /// CPU-vs-CUDA comparison per case (`--backend all`; see [`crate::cross`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cross_device: Vec<crate::cross::CrossDevice>,
}

/// Ops used by cases that the `batch` variation broke, with those cases (and the
/// implementation that ran): the ops that are not batch-invariant.
pub fn batch_variant_ops(report: &Report) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for c in &report.cases {
        if c.blame
            .as_ref()
            .is_some_and(|b| b.broken_by.contains(&crate::vary::Variation::Batch))
        {
            for (op, algo) in &c.algorithms {
                out.entry(op.clone())
                    .or_default()
                    .push(format!("{} ({algo})", c.name));
            }
        }
    }
    out
}

impl Report {
    /// Builds a report and its summary.
    pub fn new(
        controls: Controls,
        runs: usize,
        cases: Vec<CaseReport>,
        cost: Vec<CostRow>,
    ) -> Report {
        let summary = Summary::of(&cases);
        Report {
            version: REPORT_VERSION,
            controls,
            runs,
            platform: Platform::detect(),
            cases,
            cost,
            summary,
            cross_device: Vec::new(),
        }
    }

    /// Process exit code: 0 when every case that ran is deterministic (or a caught planted
    /// bug) and no cross-device comparison is a mismatch, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        let mismatch = self
            .cross_device
            .iter()
            .any(|c| c.verdict == crate::cross::CrossVerdict::Mismatch);
        if mismatch || self.cases.iter().any(|c| c.verdict.is_failure()) {
            1
        } else {
            0
        }
    }
}

/// The explanation lines of one case, shared by every format: each differing tensor, the
/// message (error, skip reason, planted bug), findings, memory growth, snapshot comparison, blame, localization, and the implementations
/// that ran when the case was nondeterministic.
pub fn details(c: &CaseReport) -> Vec<String> {
    let mut out: Vec<String> = c.diff.iter().map(|d| d.summary()).collect();
    out.extend(c.message.clone());
    out.extend(c.findings.iter().map(|f| format!("found: {f}")));
    out.extend(c.memory_growth.iter().map(|g| format!("flag: {g}")));
    if let Some(s) = c
        .snapshot
        .as_ref()
        .filter(|s| *s != crate::snapshot::MATCHES)
    {
        out.push(format!("snapshot: {s}"));
    }
    if let Some(b) = &c.blame {
        out.push(format!("blame: {}", b.explanation));
    }
    if let Some(d) = &c.divergence {
        out.push(format!("localized: {}", d.explanation));
    }
    if c.verdict == Verdict::Nondeterministic && !c.algorithms.is_empty() {
        let algos: Vec<String> = c
            .algorithms
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push(format!("algorithms: {}", algos.join(" ")));
    }
    out
}

/// One line saying what the verdict means for this case, e.g. `nondeterministic: 3 distinct
/// digests over 8 runs`.
pub fn headline(c: &CaseReport) -> String {
    match c.verdict {
        Verdict::Nondeterministic | Verdict::Caught | Verdict::Missed if c.distinct_digests > 1 => {
            format!(
                "{}: {} distinct digests over {} runs",
                c.verdict.name(),
                c.distinct_digests,
                c.runs
            )
        }
        v => match &c.message {
            Some(m) => format!("{}: {m}", v.name()),
            None => v.name().to_string(),
        },
    }
}

/// The verdict counts as one line: `12 deterministic, 1 nondeterministic, 0 errors, 2 skipped`,
/// with snapshot mismatches and caught planted bugs named when there are any.
pub fn counts(s: &Summary) -> String {
    let mut line = format!(
        "{} deterministic, {} nondeterministic, ",
        s.deterministic, s.nondeterministic
    );
    if s.snapshot_mismatches > 0 {
        line.push_str(&format!("{} snapshot mismatches, ", s.snapshot_mismatches));
    }
    line.push_str(&format!("{} errors, {} skipped", s.errors, s.skipped));
    if s.caught > 0 {
        line.push_str(&format!(", {} planted bugs caught", s.caught));
    }
    line
}
