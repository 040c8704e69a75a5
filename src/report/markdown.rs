//! Markdown report, fit for a pull-request comment: a headline with the summary, a table (case,
//! backend, verdict, runs, digest prefix, time), then the explanation of every case that did not
//! pass in a collapsible block, and the cost of determinism when it was measured.

use super::details;
use super::text::seconds;
use crate::outcome::Report;
use crate::outcome::Verdict;
use std::fmt::Write;

/// The report as GitHub-flavoured Markdown.
pub fn render(report: &Report) -> String {
    let mut o = String::new();
    headline(&mut o, report);
    cases_table(&mut o, report);
    explanations(&mut o, report);
    if !report.cost.is_empty() {
        o.push_str("\n| op | backend | deterministic | nondeterministic | cost |\n");
        o.push_str("|---|---|---|---|---:|\n");
        for r in &report.cost {
            let _ = writeln!(o, "| {} |", super::cost_cells(r).join(" | "));
        }
    }
    cross_device(&mut o, report);
    o
}

/// The headline with the summary, the controls and the report's notes.
fn headline(o: &mut String, report: &Report) {
    let failed = report.exit_code() != 0;
    let _ = writeln!(
        o,
        "### bitexact: {} {}\n",
        if failed { "❌" } else { "✅" },
        super::counts(&report.summary)
    );
    let _ = writeln!(
        o,
        "{} runs per case · {} · `{}`\n",
        report.runs,
        cell(&super::controls_summary(report)),
        cell(&report.platform.class)
    );
    for note in super::notes(report) {
        let _ = writeln!(o, "{}\n", cell(&note));
    }
}

/// One row per case: backend, verdict, runs, digest prefix, time.
fn cases_table(o: &mut String, report: &Report) {
    o.push_str("| case | backend | verdict | runs | digest | time |\n");
    o.push_str("|---|---|---|---:|---|---:|\n");
    for c in &report.cases {
        let (runs, digest) = super::row_cells(c);
        let digest = digest.map_or_else(|| "–".into(), |d| format!("`{d}`"));
        let _ = writeln!(
            o,
            "| `{}` | {} | {} {} | {runs} | {digest} | {} |",
            cell(&c.name),
            c.backend.name(),
            icon(c.verdict()),
            c.verdict().name(),
            seconds(c.seconds)
        );
    }
}

/// The explanation of every case that did not pass, in one collapsible block.
fn explanations(o: &mut String, report: &Report) {
    let explained: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.verdict() != Verdict::Deterministic)
        .filter(|c| !details(c).is_empty())
        .collect();
    if explained.is_empty() {
        return;
    }
    o.push_str("\n<details><summary>Explanations</summary>\n\n");
    for c in explained {
        let _ = writeln!(
            o,
            "**`{}`** ({}, {})\n",
            cell(&c.name),
            c.backend.name(),
            c.verdict().name()
        );
        o.push_str("```\n");
        for line in details(c) {
            let _ = writeln!(o, "{}", line.replace("```", "'''"));
        }
        o.push_str("```\n\n");
    }
    o.push_str("</details>\n");
}

/// The cross-device table (cpu vs cuda), when there is one.
fn cross_device(o: &mut String, report: &Report) {
    if report.cross_device.is_empty() {
        return;
    }
    o.push_str("\n**Cross-device (cpu vs cuda)**\n\n| case | verdict | details |\n|---|---|---|\n");
    for c in &report.cross_device {
        let mut lines = c.details();
        lines.extend(c.message.clone());
        let lines: Vec<String> = lines.iter().map(|l| cell(l)).collect();
        let _ = writeln!(
            o,
            "| `{}` | {} | {} |",
            cell(&c.case),
            c.verdict.name(),
            lines.join("<br>")
        );
    }
}

fn icon(v: Verdict) -> &'static str {
    match v {
        Verdict::Deterministic | Verdict::Caught => "✅",
        Verdict::Skipped => "⏭️",
        _ => "❌",
    }
}

/// Makes text safe inside a table cell: no pipes or newlines, no backticks breaking code spans.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace(['\n', '\r'], " ")
        .replace('`', "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc`d"), "a\\|b c'd");
    }
}
