//! `bitexact diff-trace A B`: compare two trace files and name the first diverging op; for
//! program traces, also whether they differ within rounding noise ([`trace::noise`]) and how
//! the difference grows step by step.

use crate::cli::usage::usage;
use crate::platform::record::{self, Side};
use crate::trace::noise::text::{growth_line, lines as noise_lines};
use crate::trace::noise::{self, OwnStep};
use crate::trace::replay;
use crate::trace::{self, TraceFile};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Exit 0 when every case in either file has identical traces, 1 when any differs or is in one
/// file only, 2 when a file is unreadable or not a valid trace file (version, duplicates), or
/// two program traces label tensors differently (record version 2 or 3 against 4:
/// [`trace::program::same_labels`]).
/// Program op traces (`bitexact run --trace ops --keep DIR`: a run directory or its
/// `.bitexact-trace-rank<R>.jsonl`) are compared the same way, with the same answer, after a
/// line on what differs between the two runs' platforms ([`record::compare`]: each kept run
/// directory's `.bitexact-record.json` and `.bitexact-platform.json`); when they differ, an op
/// of identical inputs whose output differs gives different results on the two platforms
/// rather than being called nondeterministic. Program traces are then classified for noise
/// ([`trace::noise::classify_noise`], or [`trace::noise::classify_noise_with`] with the fp64
/// replay of a captured receiver): the first record beyond noise is the answer; when every differing record is
/// within noise or amplified (a receiver that grew only because its inputs already differed)
/// *and the platforms differ*, the exit code is 0 (the differences start within noise: what a
/// changed machine or library is expected to do); on one platform any difference is
/// nondeterminism, exit 1. `json`: one JSON object instead of text.
pub(crate) fn diff_trace(a: &Path, b: &Path, json: bool) -> Result<u8> {
    let program = |p: &Path| p.is_dir() || p.extension().is_some_and(|x| x == "jsonl");
    if program(a) || program(b) {
        return diff_program_traces(a, b, json);
    }
    let load = |p: &Path| TraceFile::load(p).map_err(|e| usage(format!("{e:#}")));
    let (ta, tb) = (load(a)?, load(b)?);
    let diffs = trace::diff_files(&ta, &tb);
    if diffs.is_empty() {
        println!("no traced cases in either file");
    }
    let mut differing = 0;
    for (name, backend, d) in diffs {
        match d {
            None => println!("{name} [{backend}]: identical traces"),
            Some(d) => {
                differing += 1;
                println!("{name} [{backend}]: {}", d.explanation);
            }
        }
    }
    Ok(u8::from(differing > 0))
}

/// Compares two programs' op traces (each a kept run directory or its `.jsonl`).
fn diff_program_traces(a: &Path, b: &Path, json: bool) -> Result<u8> {
    let load = |p: &Path| -> Result<trace::program::Read> {
        let t = if p.is_dir() {
            trace::program::read_dir_labelled(p)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: no {}<R>.jsonl in it (keep runs with `bitexact run --trace ops --keep DIR`)",
                    p.display(),
                    crate::protocol::TRACE_FILE_PREFIX
                )
            })?
        } else {
            trace::program::read_jsonl_labelled(p)?
        };
        Ok(t)
    };
    let bad = |e: anyhow::Error| usage(format!("{e:#}"));
    let (ra, rb) = (load(a).map_err(bad)?, load(b).map_err(bad)?);
    trace::program::same_labels((a, ra.labels), (b, rb.labels)).map_err(bad)?;
    let (ta, tb) = (ra.entries, rb.entries);
    let (pa, pb) = (Side::read(a).map_err(bad)?, Side::read(b).map_err(bad)?);
    let platforms = record::compare(&pa, &pb, ["A", "B"]);
    let mut d = first_divergence(&ta, &tb, [&pa, &pb], &platforms);
    let origin = d.as_ref().and_then(|d| origin_identity(&ta, d));
    let replay = d
        .as_ref()
        .and_then(|_| replay_for([a, b], &ta, origin.as_deref()));
    if let (Some(d), Some(replay)) = (d.as_mut(), &replay) {
        classify_replayed(d, replay, &ta, &tb);
    }
    let within = d.as_ref().is_some_and(|d| {
        let j = d.noise.as_ref();
        d.inputs_matched
            && j.is_some_and(|j| j.classification == "within-noise" && j.not_judged == 0)
    });
    let code = match &d {
        None => 0,
        Some(_) if within && platforms.differ() => 0,
        Some(_) => 1,
    };
    if json {
        let v = serde_json::json!({
            "platforms": {
                "differ": platforms.differ(),
                "differences": platforms.differences,
                "unknown": platforms.unknown,
            },
            "records": [ta.len(), tb.len()],
            "identical": d.is_none(),
            "in_place_in_one": trace::in_place_in_one(&ta, &tb),
            "divergence": d,
            "capture": origin,
            "replay": replay.as_ref().map(|r| match r {
                Replayed::Done(r, _) => serde_json::json!(r),
                Replayed::Not(why) => serde_json::json!({"error": why}),
            }),
        });
        println!("{v:#}");
        return Ok(code);
    }
    for line in platforms.lines() {
        println!("{line}");
    }
    print_verdict(d.as_ref(), replay.as_ref(), &ta, &tb);
    Ok(code)
}

/// `diff-trace`'s text after the platforms: the divergence `d` (its noise judgement and
/// growth) or that the traces `ta` and `tb` are identical, then the fp64 replay.
fn print_verdict(
    d: Option<&trace::Divergence>,
    replay: Option<&Replayed>,
    ta: &[trace::TraceEntry],
    tb: &[trace::TraceEntry],
) {
    match d {
        // `--trace modules` records module outputs and parameter gradients, not op calls
        None if ta.iter().any(trace::TraceEntry::is_module_record) => {
            let s = if ta.len() == 1 { "" } else { "s" };
            println!("identical module traces ({} record{s})", ta.len())
        }
        None => match trace::in_place_in_one(ta, tb) {
            0 => println!("identical op traces ({} op calls)", ta.len()),
            n => println!(
                "identical op traces ({} op calls; {n} of them in place in one run and out of place in the other, with the same values: torch computes some ops out of place under a dispatch mode, how the tracer reaches ops on a machine with a GPU or without a C++ compiler)",
                ta.len()
            ),
        },
        Some(d) => {
            println!("{}", d.explanation);
            if let Some(j) = &d.noise {
                noise_lines(j, &d.growth)
                    .iter()
                    .for_each(|l| println!("{l}"));
            }
            if !d.growth.is_empty() {
                println!("{}", growth_line(&d.growth));
            }
        }
    }
    match replay {
        Some(Replayed::Done(r, _)) => println!("{}", r.line),
        Some(Replayed::Not(why)) => println!("fp64 replay: {why}"),
        None => {}
    }
}

/// What `diff-trace` says of an fp64 replay ([`replay`]).
enum Replayed {
    /// The captured op, replayed and judged, and its record's position in A's trace.
    Done(replay::Replay, usize),
    /// Why there is none: the captures are missing or disagree, or the replay failed.
    Not(String),
}

/// The identity (for `bitexact run --capture`) of the divergence's op when its inputs matched:
/// the op to capture for an fp64 replay. The JSON gives it as `capture`, so a script or test
/// can read which op differs first on this machine rather than assume it. None for a
/// `--trace modules` record: a module's forward or a gradient is not one op call.
fn origin_identity(ta: &[trace::TraceEntry], d: &trace::Divergence) -> Option<String> {
    ta.iter()
        .position(|e| e.call == d.call && d.rank.is_none_or(|r| r == e.rank))
        .filter(|&i| d.inputs_matched && !ta[i].is_module_record())
        .map(|i| trace::identity_json(ta, i))
}

/// The fp64 replay of the op both sides captured (`bitexact run --trace ops --capture`), when
/// both kept run directories hold a capture of the same op call; else, when the divergence is
/// an op whose inputs matched (its identity `origin`), how to capture it, ready to copy; else
/// nothing.
fn replay_for(
    sides: [&Path; 2],
    ta: &[trace::TraceEntry],
    origin: Option<&str>,
) -> Option<Replayed> {
    let captures = sides.map(replay::capture_path);
    let ids = captures.each_ref().map(|c| replay::captured_identity(c));
    let Some(index) = ids[0]
        .as_ref()
        .filter(|id| ids[1].as_ref() == Some(*id))
        .and_then(|id| replay::find(ta, id))
    else {
        let hint = origin.map(|id| {
            format!(
                "no capture of this op in A or B; capture it with \
                 `bitexact run --trace ops --capture '{id}' --keep DIR` on both sides"
            )
        });
        return match (&ids[0], &ids[1]) {
            (None, None) => hint.map(Replayed::Not),
            (Some(x), None) => Some(Replayed::Not(format!("A holds a capture of {x}, B none"))),
            (None, Some(y)) => Some(Replayed::Not(format!("B holds a capture of {y}, A none"))),
            (Some(x), Some(y)) if x != y => Some(Replayed::Not(format!(
                "the captures hold different op calls ({x} in A, {y} in B)"
            ))),
            (Some(x), Some(_)) => Some(Replayed::Not(format!(
                "the captured op call {x} is not in A's trace"
            ))),
        };
    };
    Some(
        match replay::replay(captures.each_ref().map(PathBuf::as_path), &ta[index]) {
            Ok(r) => Replayed::Done(r, index),
            Err(why) => Replayed::Not(format!("{why} ({} captured in both)", ta[index].op)),
        },
    )
}

/// A replayed receiver is classified by its own step ([`noise::classify_noise_with`]): the
/// noise answer of `d` again, with the float64 replay of the op it names.
fn classify_replayed(
    d: &mut trace::Divergence,
    replay: &Replayed,
    ta: &[trace::TraceEntry],
    tb: &[trace::TraceEntry],
) {
    let Replayed::Done(r, index) = replay else {
        return;
    };
    if d.noise.is_some() {
        let own = OwnStep {
            index: *index,
            beyond: (r.outputs.iter().flat_map(|o| &o.sides)).any(|s| !s.within_noise),
            verdict: r.verdict.clone(),
        };
        let mut j = noise::classify_noise_with(ta, tb, Some(&own));
        j.growth.clear();
        d.noise = Some(j);
    }
}

/// The first divergence of two kept runs' traces, in words that name what differed: the
/// conditions varied between two runs of one `bitexact run --keep`, read from their records
/// ([`crate::vary::differ::from_records`]), and any other difference as the platform's.
fn first_divergence(
    ta: &[trace::TraceEntry],
    tb: &[trace::TraceEntry],
    [pa, pb]: [&Side; 2],
    platforms: &record::Comparison,
) -> Option<trace::Divergence> {
    let varied = match (&pa.record, &pb.record) {
        (Some(x), Some(y)) => crate::vary::differ::from_records(x, y),
        _ => Vec::new(),
    };
    let other_platform =
        (platforms.differences.iter()).any(|l| !crate::vary::differ::explains(&varied, l));
    let mut d = trace::first_divergence(ta, tb)?;
    d.explanation = as_files(&d.explanation);
    if other_platform {
        d.explanation = across_platforms(&d.explanation);
    }
    Some(d.under(varied))
}

/// A control-flow divergence in the words of two trace files: what `bitexact run` calls run 0
/// and the other run are trace A and trace B, as given, whichever runs they came from.
fn as_files(explanation: &str) -> String {
    explanation
        .replacen("run 0 calls ", "trace A calls ", 1)
        .replacen("where the other run ", "where trace B ", 1)
        .replacen("the other run also calls ", "trace B also calls ", 1)
        .replacen("which run 0 never makes", "which trace A never makes", 1)
}

/// A divergence's explanation for two runs on different platforms: what it calls
/// nondeterministic (an op, or a collective, whose inputs were identical) gives different
/// results on the two platforms, which one machine's runs cannot tell apart from
/// nondeterminism.
fn across_platforms(explanation: &str) -> String {
    explanation
        .replace(
            " is nondeterministic",
            " gives different results on the two platforms",
        )
        .replace("nondeterministic", "platform-dependent")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: &str, out: &str) -> trace::TraceEntry {
        let line = format!(
            r#"{{"v": 2, "step": 0, "rank": 0, "phase": "forward", "module": "", "op": "{op}", "occ": 0, "src": "t.py:1", "in": ["f32[4]:aa"], "out": ["f32[4]:{out}"]}}"#
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".bitexact-trace-rank0.jsonl");
        std::fs::write(&p, line + "\n").unwrap();
        trace::program::read_jsonl(&p).unwrap().remove(0)
    }

    /// Control flow that diverged is told in terms of the files as given (trace A, trace B),
    /// not of runs, whichever order they come in.
    #[test]
    fn control_flow_is_told_by_trace_a_and_b() {
        let (a, b) = (entry("aten::mul", "bb"), entry("aten::sin", "bb"));
        for (x, y) in [(&a, &b), (&b, &a)] {
            let d = trace::first_divergence(std::slice::from_ref(x), std::slice::from_ref(y));
            let e = as_files(&d.unwrap().explanation);
            assert!(
                e.starts_with("control flow diverged: trace A calls ")
                    && e.contains(" where trace B calls ")
                    && !e.contains("run 0"),
                "{e}"
            );
        }
        let extra = trace::first_divergence(&[], std::slice::from_ref(&a)).unwrap();
        let e = as_files(&extra.explanation);
        assert!(
            e.contains("trace B also calls ") && e.contains("which trace A never makes"),
            "{e}"
        );
    }

    #[test]
    fn an_op_of_identical_inputs_differs_on_two_platforms_not_nondeterministically() {
        let d = trace::first_divergence(&[entry("aten::mul", "bb")], &[entry("aten::mul", "cc")])
            .unwrap();
        assert!(
            d.explanation.contains("this op is nondeterministic"),
            "{d:?}"
        );
        let e = across_platforms(&d.explanation);
        assert!(
            e.ends_with("inputs identical, output differs: this op gives different results on the two platforms"),
            "{e}"
        );
        assert!(!e.contains("nondeterministic"), "{e}");
        let collective = "first divergence: x — inputs identical on every rank, output differs: \
                          the collective itself is nondeterministic (origin: rank 1)";
        let e = across_platforms(collective);
        assert!(e.contains("the collective itself gives different results on the two platforms (origin: rank 1)"), "{e}");
    }
}
