//! Rendering reports. A [`Report`] is plain data the suite builds ([`crate::suite`]); this
//! module only renders it. Every format goes through [`render`]; adding one touches its own
//! file and [`Format`] here.

pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod text;

use crate::outcome::Report;
use crate::outcome::{CaseReport, SnapshotStatus, Summary, Verdict};
use crate::outcome::{CostRow, ProgramRun};

/// A report output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// A readable table with explanations.
    Text,
    /// One JSON object (see `README.md`, "JSON report").
    Json,
    /// JUnit XML, one testcase per case and backend.
    Junit,
    /// A Markdown table for a pull-request comment.
    Markdown,
    /// One self-contained HTML page (no network): the JSON report embedded and drawn as
    /// tables and plots ([`html`]).
    Html,
}

impl Format {
    /// Every format with its name.
    pub const ALL: [(Format, &'static str); 5] = [
        (Format::Text, "text"),
        (Format::Json, "json"),
        (Format::Junit, "junit"),
        (Format::Markdown, "markdown"),
        (Format::Html, "html"),
    ];

    /// Parses a format name; the error lists the names.
    pub fn parse(s: &str) -> Result<Format, String> {
        Format::ALL
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(f, _)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = Format::ALL.iter().map(|(_, n)| *n).collect();
                format!("unknown format {s:?}; expected one of {}", names.join(", "))
            })
    }
}

/// The report rendered in `format`.
pub fn render(format: Format, report: &Report) -> String {
    match format {
        Format::Text => text::render(report),
        Format::Json => json::render(report),
        Format::Junit => junit::render(report),
        Format::Markdown => markdown::render(report),
        Format::Html => html::render(report),
    }
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
    /// Panics with every failing case's explanation unless the report passed (exit code 0).
    pub fn assert_passed(&self) {
        if self.exit_code() == 0 {
            return;
        }
        let mut msg = format!("bitexact: {}", counts(&self.summary));
        for c in self.cases.iter().filter(|c| c.verdict().is_failure()) {
            msg.push_str(&format!("\n{} [{}]: {}", c.name, c.backend, headline(c)));
            for line in details(c) {
                msg.push_str("\n    ");
                msg.push_str(&line);
            }
        }
        panic!("{msg}");
    }
}

impl CaseReport {
    /// Panics with the whole explanation unless the case passed; a skipped case passes with a
    /// `bitexact: … skipped` line on standard error, so the skip stays visible.
    pub fn assert_passed(&self) {
        if self.verdict() == Verdict::Skipped {
            eprintln!(
                "bitexact: SKIPPED {} on {}: {}",
                self.name,
                self.backend,
                self.message.as_deref().unwrap_or("")
            );
            return;
        }
        if self.passed() {
            return;
        }
        let mut msg = format!(
            "{} on {} is {} over {} runs ({} distinct digests)",
            self.name,
            self.backend,
            self.verdict().name(),
            self.runs,
            self.distinct_digests
        );
        for line in details(self) {
            msg.push_str("\n  ");
            msg.push_str(&line);
        }
        panic!("{msg}");
    }
}

/// The cells every renderer's table shows for a case besides its name, backend and verdict:
/// the runs (`4 (2 distinct)` when they differ) and the first 12 hex digits of run 0's digest.
pub fn row_cells(c: &CaseReport) -> (String, Option<&str>) {
    let runs = if c.distinct_digests > 1 {
        format!("{} ({} distinct)", c.runs, c.distinct_digests)
    } else {
        c.runs.to_string()
    };
    (runs, c.run_digests.first().map(|d| &d[..12]))
}

/// The explanation lines of one case, shared by every format: a program's first divergence
/// and the noise judgement of its traces (`within noise: …`, as `bitexact diff-trace` answers),
/// each differing tensor, the message (error, skip reason, planted bug), findings, memory
/// growth, snapshot comparison, blame, localization, and the implementations that ran when the
/// case was nondeterministic.
pub fn details(c: &CaseReport) -> Vec<String> {
    let mut out = program_lines(c);
    if let (Some(d), Some(_)) = (&c.divergence, &c.program) {
        out.push(d.explanation.clone());
        if let Some(j) = &d.noise {
            use crate::trace::noise::text::{answer, compared};
            out.push(answer(j, compared(&j.growth)));
        }
    }
    out.extend(c.diff.iter().map(|d| d.summary()));
    out.extend(c.message.clone());
    out.extend(c.findings.iter().map(|f| format!("found: {f}")));
    out.extend(c.notes.iter().map(|n| format!("note: {n}")));
    out.extend(c.memory_growth.iter().map(|g| format!("flag: {g}")));
    match (c.evidence.snapshot, &c.snapshot) {
        (Some(SnapshotStatus::Matched), _) => out.push("snapshot: matched".into()),
        (Some(status), Some(s)) => out.push(format!("snapshot {}: {s}", status.name())),
        _ => {}
    }
    if let Some(b) = &c.blame {
        out.push(format!("blame: {}", b.explanation));
        let more = b
            .evidence
            .iter()
            .filter(|e| !b.explanation.contains(e.as_str()));
        out.extend(more.map(|e| format!("blame evidence: {e}")));
    }
    if let (Some(d), None) = (&c.divergence, &c.program) {
        out.push(format!("localized: {}", d.explanation));
    }
    if c.verdict() == Verdict::Nondeterministic && !c.algorithms.is_empty() {
        let algos: Vec<String> = c
            .algorithms
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push(format!("algorithms: {}", algos.join(" ")));
    }
    out
}

/// What a program case ran (`bitexact run`): command, the environment bitexact set (and what
/// varied), each run's exit status, time and peak RSS, per-step memory and the program's
/// platform report.
pub fn program_lines(c: &CaseReport) -> Vec<String> {
    let Some(p) = &c.program else {
        return Vec::new();
    };
    let mut out = vec![format!("command: {}", crate::quote::shell(&p.command))];
    let env: Vec<String> = p
        .env
        .iter()
        .filter(|(k, _)| !p.varied.contains_key(*k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.push(format!("env: {}", env.join(" ")));
    if !p.varied.is_empty() {
        let varied: Vec<String> = p
            .varied
            .iter()
            .map(|(k, v)| format!("{k}={}", v.join("|")))
            .collect();
        out.push(format!("varied per run: {}", varied.join(" ")));
    }
    let runs: Vec<String> = p.runs.iter().map(run_cell).collect();
    out.push(format!(
        "runs (status, time, peak RSS): {}",
        runs.join(" · ")
    ));
    if let Some(f) = &p.config {
        out.push(format!("project file: {f}"));
    }
    if !p.ignored.is_empty() {
        let rules: Vec<String> = p
            .ignored
            .iter()
            .map(|i| match i.lines {
                0 if i.rule.starts_with("output ") => format!("{} ({} outputs)", i.rule, i.outputs),
                n => format!("{} ({n} lines masked)", i.rule),
            })
            .collect();
        out.push(format!("ignored (run 0): {}", rules.join(" · ")));
    }
    if let (Some(first), Some(last)) = (p.step_memory.first(), p.step_memory.last()) {
        out.push(format!(
            "step memory (run 0, RSS): {} after step {} → {} after step {} ({} steps)",
            crate::memory::human(first.rss_bytes),
            first.step,
            crate::memory::human(last.rss_bytes),
            last.step,
            p.step_memory.len()
        ));
    }
    if let Some(serde_json::Value::Object(m)) = &p.platform {
        let fields: Vec<String> = m
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect();
        out.push(format!("program platform: {}", fields.join(" ")));
    }
    out
}

/// One run of a program, as its report line lists it: `#1 exit 0 1.2s 300 MiB`, and why it
/// was stopped early, if it was.
fn run_cell(r: &ProgramRun) -> String {
    let status = match (r.exit_status, r.signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "?".into(),
    };
    let rss = r
        .peak_rss_bytes
        .map(crate::memory::human)
        .unwrap_or("?".into());
    let stopped = match &r.stopped_early {
        Some(why) => format!(" ({why})"),
        None => String::new(),
    };
    format!(
        "#{} {status} {} {rss}{stopped}",
        r.index,
        text::seconds(r.seconds)
    )
}

/// One line saying what the verdict means for this case, e.g. `nondeterministic: 3 distinct
/// digests over 8 runs`.
pub fn headline(c: &CaseReport) -> String {
    match c.verdict() {
        Verdict::Nondeterministic | Verdict::Caught | Verdict::Missed if c.distinct_digests > 1 => {
            format!(
                "{}: {} distinct digests over {} runs",
                c.verdict().name(),
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
    if s.device_mismatches > 0 {
        line.push_str(&format!("{} device mismatches, ", s.device_mismatches));
    }
    if s.batch_variant > 0 {
        line.push_str(&format!("{} batch-variant, ", s.batch_variant));
    }
    if s.resume_mismatch > 0 {
        line.push_str(&format!("{} resume-mismatch, ", s.resume_mismatch));
    }
    line.push_str(&format!("{} errors, {} skipped", s.errors, s.skipped));
    if s.caught > 0 {
        line.push_str(&format!(", {} planted bugs caught", s.caught));
    }
    if s.snapshots_missing > 0 {
        line.push_str(&format!(", {} snapshots missing", s.snapshots_missing));
    }
    line
}

/// One cost-of-determinism row as cells: op, backend, deterministic implementation and time,
/// nondeterministic implementation and time, ratio with its direction in words.
pub fn cost_cells(r: &CostRow) -> [String; 5] {
    [
        r.op.clone(),
        r.backend.name().to_string(),
        format!("{} {}", r.deterministic.0, text::seconds(r.deterministic.1)),
        format!(
            "{} {}",
            r.nondeterministic.0,
            text::seconds(r.nondeterministic.1)
        ),
        format!("{:.2}x ({})", r.ratio, cost_words(r.ratio)),
    ]
}

/// The cost of determinism in words: `deterministic is 1.15x slower`, `… 33.3x faster`, or
/// `… as fast` within 1 %.
pub fn cost_words(ratio: f64) -> String {
    if !ratio.is_finite() || ratio <= 0.0 {
        "not measurable".to_string()
    } else if (ratio - 1.0).abs() < 0.01 {
        "deterministic is as fast".to_string()
    } else if ratio > 1.0 {
        format!("deterministic is {ratio:.2}x slower")
    } else {
        format!("deterministic is {:.2}x faster", 1.0 / ratio)
    }
}

/// The controls the runs were made under, one line: a control a variation changed shows each
/// value it took (`threads=1|4 (varied)`), not the base value.
pub fn controls_summary(report: &Report) -> String {
    use crate::vary::RunSettings;
    let base = &report.controls;
    let s0 = RunSettings::for_run(base, &report.variations, 0, false).controls;
    let s1 = RunSettings::for_run(base, &report.variations, 1, false).controls;
    let show = |name: &str, a: String, b: String| {
        if a == b {
            format!("{name}={a}")
        } else {
            format!("{name}={a}|{b} (varied)")
        }
    };
    let sw = |b: bool| if b { "on" } else { "off" }.to_string();
    [
        show("seed", s0.seed.to_string(), s1.seed.to_string()),
        show("deterministic", sw(s0.deterministic), sw(s1.deterministic)),
        show("benchmark", sw(s0.benchmark), sw(s1.benchmark)),
        show("workers", s0.workers.to_string(), s1.workers.to_string()),
        show("threads", s0.threads.to_string(), s1.threads.to_string()),
    ]
    .join(" ")
}

/// Notes for the end of a report: the variations that were active, and a warning when
/// nothing ran.
pub fn notes(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    if !report.variations.is_empty() {
        let names: Vec<&str> = report.variations.iter().map(|v| v.name()).collect();
        out.push(format!("variations: {}", names.join(", ")));
    }
    if report.nothing_ran() {
        out.push(format!(
            "nothing ran: all {} cases were skipped (see each reason); exit code 0 because nothing failed",
            report.cases.len()
        ));
    }
    out
}
