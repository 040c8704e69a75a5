//! Explaining a difference between two runs, for every kind of run source: output by output
//! (element by element, files streamed side by side, text by lines), how it grows file by
//! file, and the first output that differs in write order. Each adds evidence; none assigns a
//! verdict.

use super::source::Collected;
use crate::diff::{self, TensorDiff};
use crate::digest::Digest;
use crate::trace::Divergence;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// At most this many differing outputs are explained element by element (the rest are
/// counted in one more line).
pub const EXPLAIN_MAX_OUTPUTS: usize = 8;

/// The names of two runs' outputs, in the earlier run's order, then the later run's extra
/// names, each with its digest in either run. Made as it is read: 100 000 outputs cost two
/// tables of references, not a third list of every name.
pub fn union<'a>(
    a: &'a [(String, Digest)],
    b: &'a [(String, Digest)],
) -> impl Iterator<Item = (&'a str, Option<Digest>, Option<Digest>)> + 'a {
    let in_b: HashMap<&str, &Digest> = b.iter().map(|(n, d)| (n.as_str(), d)).collect();
    let in_a: HashSet<&str> = a.iter().map(|(n, _)| n.as_str()).collect();
    let ours = a
        .iter()
        .map(move |(n, d)| (n.as_str(), Some(*d), in_b.get(n.as_str()).map(|d| **d)));
    let extra = b
        .iter()
        .filter(move |(n, _)| !in_a.contains(n.as_str()))
        .map(|(n, d)| (n.as_str(), None, Some(*d)));
    ours.chain(extra)
}

/// Explains each output that differs between run `i` (`a`) and run `j` (`b`), in `a`'s
/// order, at most [`EXPLAIN_MAX_OUTPUTS`].
pub fn explain(a: &Collected, i: usize, b: &Collected, j: usize) -> Vec<TensorDiff> {
    let runs = [i, j];
    // A run stopped early lacks what it had not written yet: not a difference.
    let differing: Vec<_> = union(&a.digests, &b.digests)
        .filter(|(_, x, y)| x != y && !(b.partial && y.is_none()))
        .collect();
    let mut out: Vec<TensorDiff> = differing
        .iter()
        .take(EXPLAIN_MAX_OUTPUTS)
        .map(|(n, x, y)| match (x, y) {
            (Some(_), None) => diff::missing(n, runs, true),
            (None, Some(_)) => diff::missing(n, runs, false),
            _ => match (a.loader.raw(n), b.loader.raw(n)) {
                (Some((pa, text)), Some((pb, _))) => explain_files(n, runs, &pa, &pb, text),
                _ => match (a.loader.value(n), b.loader.value(n)) {
                    (Some(x), Some(y)) => diff::values(n, runs, &x, &y),
                    _ => explain_loaded(a, b, n, runs),
                },
            },
        })
        .collect();
    if differing.len() > EXPLAIN_MAX_OUTPUTS {
        let mut d = diff::missing("…", runs, true);
        d.note = Some(format!(
            "{} more differing outputs not shown; {}",
            differing.len() - EXPLAIN_MAX_OUTPUTS,
            growth(&a.digests, &differing)
        ));
        out.push(d);
    }
    out
}

/// Explains output `n` by loading it from both runs.
fn explain_loaded(a: &Collected, b: &Collected, n: &str, runs: [usize; 2]) -> TensorDiff {
    match (a.loader.load(n), b.loader.load(n)) {
        (Ok(x), Ok(y)) => diff::explain(n, runs, &x, &y),
        (Err(e), _) | (_, Err(e)) => {
            let mut d = diff::missing(n, runs, true);
            d.note = Some(crate::outcome::failure::cap(format!(
                "digests differ; not explained element by element: {e:#}"
            )));
            d
        }
    }
}

/// Explains output `n` that lies as plain bytes in files `pa` and `pb`, streaming them side by
/// side (memory: two windows, whatever their size); text is compared by lines.
fn explain_files(n: &str, runs: [usize; 2], pa: &Path, pb: &Path, text: bool) -> TensorDiff {
    let open = |p: &Path| -> std::io::Result<(std::fs::File, u64)> {
        let f = std::fs::File::open(p)?;
        let len = f.metadata()?.len();
        Ok((f, len))
    };
    let result = (|| -> std::io::Result<TensorDiff> {
        let ((mut fa, la), (mut fb, lb)) = (open(pa)?, open(pb)?);
        let mut d = diff::explain_readers(n, runs, (&mut fa, la), (&mut fb, lb))?;
        if text {
            let (fa, fb) = (std::fs::File::open(pa)?, std::fs::File::open(pb)?);
            if let Some(lines) = compare_lines(n, fa, fb)? {
                // Text is compared by lines: the counts are lines, not bytes (nor positions).
                d.positions = None;
                d.elements_differing = lines.differing;
                d.elements = lines.total;
                d.first_index = vec![lines.first];
                d.note = Some(lines.note);
            }
        }
        Ok(d)
    })();
    result.unwrap_or_else(|e| {
        let mut d = diff::missing(n, runs, true);
        d.note = Some(format!("digests differ; not explained: {e}"));
        d
    })
}

/// Files shown in the per-file summary of a divergence.
const GROWTH_FILES: usize = 10;

/// How a divergence grows file by file (a step's file, for a script that writes one per
/// step), in the earlier run's write order: `differing by file: step_2.safetensors 3/20,
/// step_3.safetensors 20/20 (2 of 40 files differ)`. The file of `path:key` is `path`.
fn growth(
    first: &[(String, Digest)],
    differing: &[(&str, Option<Digest>, Option<Digest>)],
) -> String {
    let file = |n: &str| n.split_once(':').map_or(n, |(f, _)| f).to_string();
    let mut order: Vec<String> = Vec::new();
    let mut totals: HashMap<String, (usize, usize)> = HashMap::new();
    for (n, _) in first {
        let f = file(n);
        let e = totals.entry(f.clone()).or_insert_with(|| {
            order.push(f);
            (0, 0)
        });
        e.1 += 1;
    }
    for (n, _, _) in differing {
        let f = file(n);
        let e = totals.entry(f.clone()).or_insert_with(|| {
            order.push(f);
            (0, 0)
        });
        e.0 += 1;
    }
    let hit: Vec<String> = order
        .iter()
        .filter(|f| totals[*f].0 > 0)
        .map(|f| format!("{f} {}/{}", totals[f].0, totals[f].1.max(totals[f].0)))
        .collect();
    let more = match hit.len().saturating_sub(GROWTH_FILES) {
        0 => String::new(),
        n => format!(", … {n} more"),
    };
    format!(
        "differing by file: {}{more} ({} of {} files differ)",
        hit[..hit.len().min(GROWTH_FILES)].join(", "),
        hit.len(),
        order.len()
    )
}

/// The first output, in the order the earlier run `a` wrote them, whose digest differs from the
/// later run `b`'s or that only one of them wrote: its place in that order, its name, and
/// which run lacks it (` (missing in the later run)`, ` (missing in the earlier run)`, or
/// nothing).
pub(super) fn first_differing<'a>(
    a: &'a Collected,
    b: &'a Collected,
) -> Option<(usize, &'a str, &'static str)> {
    let (i, (n, x, y)) = union(&a.digests, &b.digests)
        .enumerate()
        .find(|(_, (_, x, y))| x != y)?;
    let missing = match (x, y) {
        (Some(_), None) => " (missing in the later run)",
        (None, Some(_)) => " (missing in the earlier run)",
        _ => "",
    };
    Some((i, n, missing))
}

/// The first output, in the order the earlier run wrote them, whose digest differs between two
/// runs or that only one of them wrote; every output before it is identical.
pub fn first_output_divergence(a: &Collected, b: &Collected) -> Option<Divergence> {
    first_differing(a, b).map(|(i, n, missing)| Divergence {
        call: i,
        op: n.to_string(),
        inputs_matched: true,
        explanation: format!("first divergence: {n}{missing} (every earlier output identical)"),
        ..Divergence::default()
    })
}

/// How two text outputs differ, line by line.
struct LineDiff {
    /// Lines that differ (a line only one output has counts).
    differing: usize,
    /// Lines in the longer output.
    total: usize,
    /// Index (0-based) of the first differing line.
    first: usize,
    /// In words: `stdout: 3/120 lines differ; first differing line 2: "…" vs "…"`.
    note: String,
}

/// Longest line compared whole; longer lines are compared in pieces of this size.
const MAX_LINE: u64 = 1 << 20;

/// Compares two text outputs line by line, streaming both (lines over 120 characters cut in
/// the note); `None` when every line is the same.
fn compare_lines(
    name: &str,
    a: impl std::io::Read,
    b: impl std::io::Read,
) -> std::io::Result<Option<LineDiff>> {
    use std::io::{BufRead, BufReader, Read};
    let (mut ra, mut rb) = (BufReader::new(a), BufReader::new(b));
    fn next(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<bool> {
        buf.clear();
        let n = Read::take(r, MAX_LINE).read_until(b'\n', buf)?;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        Ok(n > 0)
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let (mut total, mut differing) = (0, 0);
    let mut first: Option<(usize, String, String)> = None;
    loop {
        let (hx, hy) = (next(&mut ra, &mut x)?, next(&mut rb, &mut y)?);
        if !hx && !hy {
            break;
        }
        let (lx, ly) = (hx.then_some(&x[..]), hy.then_some(&y[..]));
        if lx != ly {
            differing += 1;
            if first.is_none() {
                let cap = |s: Option<&[u8]>| match s {
                    None => "(no line)".to_string(),
                    Some(s) => {
                        let s = String::from_utf8_lossy(s);
                        if s.chars().count() > 120 {
                            format!("{:?}…", s.chars().take(120).collect::<String>())
                        } else {
                            format!("{s:?}")
                        }
                    }
                };
                first = Some((total, cap(lx), cap(ly)));
            }
        }
        total += 1;
    }
    let name = name.trim_start_matches('<').trim_end_matches('>');
    Ok(first.map(|(first, p, q)| LineDiff {
        differing,
        total,
        first,
        note: format!(
            "{name}: {differing}/{total} lines differ; first differing line {}: {p} vs {q}",
            first + 1
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_counts_differing_outputs_per_file_in_write_order() {
        let (x, y) = (Digest([0; 32]), Digest([1; 32]));
        let first: Vec<(String, Digest)> = ["s2.st:a", "s2.st:b", "s10.st:a", "s10.st:b", "log"]
            .iter()
            .map(|n| (n.to_string(), x))
            .collect();
        let differing = [
            ("s2.st:b", Some(x), Some(y)),
            ("s10.st:a", Some(x), Some(y)),
            ("s10.st:b", Some(x), Some(y)),
        ];
        assert_eq!(
            growth(&first, &differing),
            "differing by file: s2.st 1/2, s10.st 2/2 (2 of 3 files differ)"
        );
    }

    #[test]
    fn text_outputs_are_compared_by_lines() {
        let d = compare_lines("<stdout>", &b"a\nb\nc\n"[..], &b"a\nB\nc\nd\n"[..])
            .unwrap()
            .unwrap();
        assert_eq!((d.differing, d.total, d.first), (2, 4, 1));
        assert_eq!(
            d.note,
            "stdout: 2/4 lines differ; first differing line 2: \"b\" vs \"B\""
        );
        assert!(compare_lines("<stdout>", &b"a\n"[..], &b"a\n"[..])
            .unwrap()
            .is_none());
    }
}
