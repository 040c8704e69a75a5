//! Text report: a table (case, backend, verdict, runs, digest prefix, time), the explanation of
//! every difference, the cost of determinism when measured, and a summary line.

use crate::outcome::Report;
use std::fmt::Write;

/// Formats seconds as `850µs`, `12.3ms` or `1.24s`.
pub fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0}µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1}ms", s * 1e3)
    } else {
        format!("{s:.2}s")
    }
}

/// The highest per-run peak heap use of a case (`-` when nothing ran, `?` when unknown).
pub fn peak_memory(c: &crate::outcome::CaseReport) -> String {
    match c.peak_bytes.iter().max() {
        Some(&b) => crate::memory::human(b),
        None if c.runs == 0 => "-".into(),
        None => "?".into(),
    }
}

/// Longest explanation line printed (program output and file names can be anything).
pub const MAX_LINE: usize = 2000;

/// `s` fit for a terminal: newlines, tabs and carriage returns shown as `\n`, `\t`, `\r` and
/// other control characters (escapes, NULs) from program output or file names as `\u{..}`,
/// so they cannot forge report lines; cut at [`MAX_LINE`].
pub fn terminal_safe(s: &str) -> String {
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i == MAX_LINE {
            out.push_str(&format!("… ({} bytes)", s.len()));
            break;
        }
        match ch {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// One explanation line for the terminal, indented under its case. A line that holds newlines
/// (a failure quoting a program's last lines of stderr) goes on over several lines: each one
/// after the first indented by at least 10 spaces, deeper than any report line, so program
/// text can never pass for a case row, a summary or another explanation line.
pub fn detail(line: &str) -> String {
    let mut out = String::new();
    for (i, piece) in line.split('\n').enumerate() {
        let indent = match i {
            0 => 4,
            _ => 4 + 6usize.saturating_sub(piece.len() - piece.trim_start_matches(' ').len()),
        };
        out.push_str(&" ".repeat(indent));
        out.push_str(&terminal_safe(piece));
        out.push('\n');
    }
    out
}

/// The report as a readable table.
pub fn render(report: &Report) -> String {
    let mut o = String::new();
    let w = report
        .cases
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        o,
        "{:w$}  {:7}  {:17}  {:>12}  {:12}  {:>8}  {:>10}",
        "case", "backend", "verdict", "runs", "digest", "time", "peak mem"
    );
    for c in &report.cases {
        let (runs, digest) = super::row_cells(c);
        let digest = digest.unwrap_or("-");
        let _ = writeln!(
            o,
            "{:w$}  {:7}  {:17}  {:>12}  {:12}  {:>8}  {:>10}",
            terminal_safe(&c.name),
            c.backend.name(),
            c.verdict().name(),
            runs,
            digest,
            seconds(c.seconds),
            peak_memory(c)
        );
        for line in super::details(c) {
            o.push_str(&detail(&line));
        }
    }
    let not_invariant = super::batch_variant_ops(report);
    if !not_invariant.is_empty() {
        let _ = writeln!(
            o,
            "\nnot batch-invariant (results change with batch composition):"
        );
        for (op, cases) in not_invariant {
            let _ = writeln!(o, "  {op}: {}", cases.join(", "));
        }
    }
    if !report.cost.is_empty() {
        let _ = writeln!(o, "\ncost of determinism (fastest deterministic / fastest nondeterministic, best of runs):");
        for r in &report.cost {
            let [op, backend, det, nondet, ratio] = super::cost_cells(r);
            let _ = writeln!(
                o,
                "  {op:12} {backend:5} {det:>28}  vs {nondet:>28}  {ratio}"
            );
        }
    }
    if !report.cross_device.is_empty() {
        let _ = writeln!(o, "\ncross-device (cpu vs cuda):");
        for c in &report.cross_device {
            let _ = writeln!(o, "  {:w$}  {}", c.case, c.verdict.name());
            for line in c.details() {
                let _ = writeln!(o, "      {line}");
            }
            if let Some(m) = &c.message {
                let _ = writeln!(o, "      {m}");
            }
        }
    }
    o.push('\n');
    for note in super::notes(report) {
        let _ = writeln!(o, "{note}");
    }
    let _ = writeln!(
        o,
        "{}  ({} runs each; {})",
        super::counts(&report.summary),
        report.runs,
        super::controls_summary(report)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program's first divergence is followed by the noise judgement of its traces, as
    /// `bitexact diff-trace` answers it, in every format's explanation lines.
    #[test]
    fn a_programs_divergence_is_followed_by_its_noise_answer() {
        let mut c = crate::outcome::CaseReport::new("run/t.py", crate::backend::Backend::Cpu);
        c.program = Some(crate::outcome::ProgramInfo::default());
        let noise = crate::trace::noise::NoiseClassification {
            classification: "not-judged".into(),
            differing: 2,
            ..Default::default()
        };
        c.divergence = Some(crate::trace::Divergence {
            explanation: "module Net (call 1 of Net) (forward) …".into(),
            noise: Some(noise),
            ..Default::default()
        });
        let lines = super::super::details(&c);
        let at = lines.iter().position(|l| l.starts_with("module Net"));
        let next = at.and_then(|i| lines.get(i + 1));
        assert!(
            next.is_some_and(|l| l.starts_with("noise not judged: no differing record")),
            "{lines:#?}"
        );
    }

    #[test]
    fn program_text_cannot_forge_report_lines() {
        let s = terminal_safe("a\nFAKE deterministic\u{1b}[31m");
        assert!(!s.contains('\n') && !s.contains('\u{1b}'), "{s}");
        assert!(terminal_safe(&"x".repeat(5000)).ends_with("(5000 bytes)"));
        // Continuation lines of a failure stay deeper than every report line.
        let d = detail("run 0: exited with status 1; last lines of stderr:\n      boom\nFAKE x\r");
        let lines: Vec<&str> = d.lines().collect();
        assert_eq!(
            lines,
            [
                "    run 0: exited with status 1; last lines of stderr:",
                "          boom",
                "          FAKE x\\r"
            ]
        );
    }
}
