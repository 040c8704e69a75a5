//! JUnit XML report, for CI systems that show test results (GitHub, GitLab, Jenkins).
//!
//! One `<testsuite>` per backend (`bitexact.cpu`, `bitexact.cuda`), one `<testcase>` per case
//! with `classname` = the suite name and `name` = the case name. Mapping of verdicts:
//! `deterministic` and `caught` (a planted bug found, as it should be) pass;
//! `nondeterministic`, `snapshot-mismatch` and `missed` are `<failure>`s; `error` is an
//! `<error>`; `skipped` is `<skipped>` with the reason. The failure body holds the whole
//! explanation (differing tensors, blame, localization). Controls and platform are properties.

use super::{details, headline};
use crate::backend::Backend;
use crate::outcome::Report;
use crate::outcome::{CaseReport, Verdict};
use std::fmt::Write;

/// The report as JUnit XML.
pub fn render(report: &Report) -> String {
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let count = |cases: &[&CaseReport], f: fn(Verdict) -> bool| {
        cases.iter().filter(|c| f(c.verdict())).count()
    };
    let all: Vec<&CaseReport> = report.cases.iter().collect();
    let total: f64 = all.iter().map(|c| c.seconds).sum();
    let _ = writeln!(
        o,
        "<testsuites name=\"bitexact\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{total:.3}\">",
        all.len(),
        count(&all, is_failure),
        count(&all, |v| v == Verdict::Error),
        count(&all, |v| v == Verdict::Skipped),
    );
    for backend in [Backend::Cpu, Backend::Cuda] {
        let cases: Vec<&CaseReport> = all
            .iter()
            .copied()
            .filter(|c| c.backend == backend)
            .collect();
        if cases.is_empty() {
            continue;
        }
        let suite = format!("bitexact.{}", backend.name());
        let _ = writeln!(
            o,
            "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            cases.len(),
            count(&cases, is_failure),
            count(&cases, |v| v == Verdict::Error),
            count(&cases, |v| v == Verdict::Skipped),
            cases.iter().map(|c| c.seconds).sum::<f64>(),
        );
        o.push_str("    <properties>\n");
        let props = [
            ("controls", super::controls_summary(report)),
            ("runs", report.runs.to_string()),
            ("platform", report.platform.class.clone()),
            ("cpu", report.platform.cpu.clone()),
            ("rustc", report.platform.rustc.clone()),
        ];
        for (k, v) in props {
            let _ = writeln!(o, "      <property name=\"{k}\" value=\"{}\"/>", attr(&v));
        }
        o.push_str("    </properties>\n");
        for c in cases {
            testcase(&mut o, &suite, c);
        }
        o.push_str("  </testsuite>\n");
    }
    o.push_str("</testsuites>\n");
    o
}

/// A `<failure>`: every failing verdict but `error` (an `<error>`), from the one list of
/// failing verdicts ([`Verdict::is_failure`]): batch-variant, device- and resume-mismatch too.
fn is_failure(v: Verdict) -> bool {
    v.is_failure() && v != Verdict::Error
}

fn testcase(o: &mut String, suite: &str, c: &CaseReport) {
    let _ = write!(
        o,
        "    <testcase name=\"{}\" classname=\"{suite}\" time=\"{:.3}\"",
        attr(&c.name),
        c.seconds
    );
    let body = details(c).join("\n");
    let head = attr(&headline(c));
    let tag = match c.verdict() {
        v if is_failure(v) => Some("failure"),
        Verdict::Error => Some("error"),
        _ => None,
    };
    o.push_str(">\n");
    match (tag, c.verdict()) {
        (Some(tag), v) => {
            let _ = writeln!(
                o,
                "      <{tag} message=\"{head}\" type=\"{}\">{}</{tag}>",
                v.name(),
                esc(&body)
            );
        }
        (None, Verdict::Skipped) => {
            let reason = c.message.as_deref().unwrap_or("skipped");
            let _ = writeln!(o, "      <skipped message=\"{}\"/>", attr(reason));
        }
        _ => {}
    }
    let mut out = format!("verdict: {}\n", headline(c));
    for (t, d) in &c.digests {
        let _ = writeln!(out, "digest {t}: {d}");
    }
    if c.verdict() == Verdict::Caught {
        out.push_str(&body);
    }
    let _ = writeln!(o, "      <system-out>{}</system-out>", esc(&out));
    o.push_str("    </testcase>\n");
}

/// Escapes text for an XML attribute value (newlines kept as `&#10;`).
fn attr(s: &str) -> String {
    esc(s).replace('\n', "&#10;")
}

/// Escapes text for XML content; drops characters XML 1.0 cannot hold.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\r' | '\n' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_drops_control_characters() {
        assert_eq!(esc("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(attr("x\ny"), "x&#10;y");
    }
}
