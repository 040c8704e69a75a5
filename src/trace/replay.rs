//! fp64 replay of a captured op: when both sides' kept run directories hold
//! a capture of the same op call (`bitexact run --trace ops --capture OP_IDENTITY`, or
//! localization's capture re-run), `diff-trace` replays the call in float64 on each side's
//! captured inputs and says which side's output is closer to the float64 result, by how many
//! ULPs of the output's dtype, and whether each is within noise.
//!
//! The replay itself is Python with torch (`python/bitexact/_replay.py`, embedded here and run
//! as `python -c`, so no bitexact package is needed where it runs): the interpreter is
//! `$BITEXACT_PYTHON` ([`crate::protocol::PYTHON_ENV`]), else the program's own (recorded in the
//! capture, if it still exists), else `python3` on `PATH`. It answers
//! with one JSON object (`Answer`); this module judges it.
//!
//! **The rule.** A side's error on a floating-point output is its largest absolute difference
//! from the float64 result over the result's scale (its largest finite magnitude): the same
//! measure as the noise judgement's ([`super::noise`]). It is **within noise** when at most the
//! op's threshold `τ` ([`noise::threshold`] of the output's dtype and the record's reduction
//! length). An integer or boolean output is within noise only when it equals the float64
//! result's. The side with the smaller largest ULP distance (then the smaller absolute error)
//! is **closer**. An op that writes a tensor (in place or through `out=`) is replayed from
//! that tensor as the op found it, which a capture keeps from before the op. Anything that
//! stops the replay (no torch, a capture by an older bitexact that kept only the value after
//! the op, an argument that cannot be rebuilt) is said in one line.
//!
//! A replay of a receiver (an op whose inputs already differ, each side replayed on its own
//! inputs) weighs its own step: `diff-trace` calls that receiver beyond noise when a side is
//! beyond noise here, and otherwise leaves it within noise or amplified, never beyond
//! ([`noise::classify_noise_with`]). The measure is over the result's scale, so a reduction
//! that cancels to nearly zero is beyond noise here by its own rounding.

use super::{noise, sketch, TraceEntry};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The replay script (`python/bitexact/_replay.py`).
const SCRIPT: &str = include_str!("../../python/bitexact/_replay.py");

/// How far one side's output is from the float64 result (the script's measure).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct SideError {
    /// Largest ULP distance, in the output's dtype, from the float64 result rounded to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ulp: Option<f64>,
    /// Median ULP distance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_ulp: Option<f64>,
    /// Elements equal to the float64 result rounded to the output's dtype.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<u64>,
    /// Largest absolute difference from the float64 result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_abs: Option<f64>,
    /// Integer and boolean outputs: elements that differ from the float64 result's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differing: Option<u64>,
    /// Whether this side is within noise ([`replay`] fills it in).
    pub within_noise: bool,
}

/// One output of the replayed op: both sides measured against the float64 result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ReplayedOutput {
    /// The output's position among the op's results.
    pub index: usize,
    /// Its dtype (torch's name: `float32`).
    pub dtype: String,
    /// Its element count.
    pub elements: u64,
    /// The float64 result's largest finite magnitude.
    pub scale: f64,
    /// Side A, side B.
    pub sides: Vec<SideError>,
    /// The noise threshold `τ` (relative to `scale`) for a floating-point output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// What the script answers (or `error`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Answer {
    error: Option<String>,
    op: String,
    identity: String,
    torch: String,
    inputs_identical: bool,
    outputs: Vec<ReplayedOutput>,
}

/// The replay of one op call, judged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Replay {
    /// The op replayed (`aten.mean.default`).
    pub op: String,
    /// Its identity (`[rank, thread, step, phase, module, op, occurrence]`).
    pub identity: String,
    /// The torch version that replayed it.
    pub torch: String,
    /// Whether both sides captured bit-identical inputs (else each is replayed on its own).
    pub inputs_identical: bool,
    /// Each output, both sides measured.
    pub outputs: Vec<ReplayedOutput>,
    /// `both within noise; A is closer`, `B is beyond noise, A within: A is closer`, …
    pub verdict: String,
    /// The text line: `fp64 replay of aten.mean.default: A: 0 ULP from the fp64 result, B: 1
    /// ULP: both within noise; A is closer`.
    pub line: String,
}

/// The capture file of a program trace given as a run directory or its `.jsonl`.
pub fn capture_path(trace: &Path) -> PathBuf {
    let dir = match trace.is_dir() {
        true => trace,
        false => trace.parent().unwrap_or(Path::new(".")),
    };
    dir.join(crate::protocol::CAPTURE_FILE)
}

/// The identity a capture file holds (its `identity` metadata, canonical), `None` when there is
/// no capture or it names none (written by an older bitexact).
pub fn captured_identity(capture: &Path) -> Option<String> {
    super::parse_identity(&capture_metadata(capture, "identity")?).ok()
}

/// One `__metadata__` entry of a capture file's safetensors header (the header alone is read).
fn capture_metadata(capture: &Path, key: &str) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(capture).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let n = u64::from_le_bytes(len);
    if n > 100 << 20 {
        return None;
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&header).ok()?;
    Some(v.get("__metadata__")?.get(key)?.as_str()?.to_string())
}

/// The interpreter that replays: `$BITEXACT_PYTHON`, else the one that made side A's capture
/// (then B's) where it still exists (its `python` metadata: the program's `sys.executable`, so
/// the replay finds the torch the program ran with), else `python3` on `PATH`.
fn interpreter(captures: [&Path; 2]) -> std::ffi::OsString {
    if let Some(p) = std::env::var_os(crate::protocol::PYTHON_ENV).filter(|p| !p.is_empty()) {
        return p;
    }
    captures
        .iter()
        .filter_map(|c| capture_metadata(c, "python"))
        .find(|p| !p.is_empty() && Path::new(p).is_file())
        .map(Into::into)
        .unwrap_or_else(|| "python3".into())
}

/// The index of the record of `trace` whose identity is `identity`.
pub fn find(trace: &[TraceEntry], identity: &str) -> Option<usize> {
    let want: serde_json::Value = serde_json::from_str(identity).ok()?;
    let ids = super::identities(trace);
    trace.iter().zip(ids).position(|(e, occ)| {
        serde_json::json!([e.rank, e.thread, e.step, e.phase, e.module, e.op, occ]) == want
    })
}

/// Replays the op call captured in `captures` (side A's, side B's) in float64 and judges each
/// side against it; `record` is the call's record (side A's), for the reduction length. `Err`:
/// why there is no replay, in words.
pub fn replay(captures: [&Path; 2], record: &TraceEntry) -> Result<Replay, String> {
    let python = interpreter(captures);
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .args(captures)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", python.to_string_lossy()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let answer: Answer = serde_json::from_str(text.trim()).map_err(|_| {
        let err = String::from_utf8_lossy(&out.stderr);
        format!(
            "{} gave no answer ({})",
            python.to_string_lossy(),
            crate::quote::excerpt(err.trim())
        )
    })?;
    if let Some(e) = answer.error {
        return Err(e);
    }
    Ok(classify_replay(answer, record))
}

/// Classifies the script's answer against the noise threshold of `record`'s op.
fn classify_replay(answer: Answer, record: &TraceEntry) -> Replay {
    let labels: Vec<&str> = record.output.split(';').collect();
    let k = noise::reduction_length(&record.inputs, &labels);
    let mut outputs = answer.outputs;
    outputs.retain(|o| o.sides.len() == 2);
    for o in &mut outputs {
        let dtype = labels.get(o.index).and_then(|l| sketch::dtype_of_label(l));
        o.threshold = dtype.and_then(|d| noise::threshold(d, k));
        let scale = o.scale;
        let threshold = o.threshold;
        for s in &mut o.sides {
            s.within_noise = match (s.differing, s.max_abs, threshold) {
                (Some(n), _, _) => n == 0,
                (None, Some(e), Some(t)) => e == 0.0 || e / scale <= t,
                _ => false,
            };
        }
    }
    let side = |i: usize| {
        let within = outputs.iter().all(|o| o.sides[i].within_noise);
        let ulp = outputs
            .iter()
            .filter_map(|o| o.sides[i].max_ulp)
            .fold(0.0, f64::max);
        let median = outputs
            .iter()
            .filter_map(|o| o.sides[i].median_ulp)
            .fold(0.0, f64::max);
        let abs = outputs
            .iter()
            .filter_map(|o| o.sides[i].max_abs)
            .fold(0.0, f64::max);
        let wrong: u64 = outputs.iter().filter_map(|o| o.sides[i].differing).sum();
        (within, ulp, median, abs, wrong)
    };
    let (a, b) = (side(0), side(1));
    let closer = match (a.1 + a.4 as f64, b.1 + b.4 as f64) {
        (x, y) if x < y => "A is closer",
        (x, y) if x > y => "B is closer",
        _ if a.3 < b.3 => "A is closer",
        _ if a.3 > b.3 => "B is closer",
        _ => "equally close",
    };
    let verdict = match (a.0, b.0) {
        (true, true) => format!("both within noise; {closer}"),
        (true, false) => format!("B is beyond noise, A within: {closer}"),
        (false, true) => format!("A is beyond noise, B within: {closer}"),
        (false, false) => format!("both beyond noise; {closer}"),
    };
    let elements: u64 = outputs.iter().map(|o| o.elements).sum();
    let ulps = |s: (bool, f64, f64, f64, u64), from: &str| {
        let mut t = format!("{} ULP{from}", s.1);
        if elements > 1 {
            t.push_str(&format!(" (median {})", s.2));
        }
        if s.4 > 0 {
            t.push_str(&format!(", {} integer elements differ", s.4));
        }
        t
    };
    let own = match answer.inputs_identical {
        true => "",
        false => " (the captured inputs differ: each side replayed on its own)",
    };
    let line = format!(
        "fp64 replay of {} (torch {}, {elements} output element{}){own}: A: {}, B: {}: {verdict}",
        answer.op,
        answer.torch,
        if elements == 1 { "" } else { "s" },
        ulps(a, " from the fp64 result"),
        ulps(b, "")
    );
    Replay {
        op: answer.op,
        identity: answer.identity,
        torch: answer.torch,
        inputs_identical: answer.inputs_identical,
        outputs,
        verdict,
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(a: (f64, f64), b: (f64, f64)) -> Answer {
        let side = |(ulp, abs): (f64, f64)| SideError {
            max_ulp: Some(ulp),
            median_ulp: Some(0.0),
            max_abs: Some(abs),
            ..SideError::default()
        };
        Answer {
            op: "aten.mean.default".into(),
            identity: r#"[0,"",0,"forward","","aten::mean",0]"#.into(),
            torch: "2.15.0".into(),
            inputs_identical: true,
            outputs: vec![ReplayedOutput {
                dtype: "float32".into(),
                elements: 1,
                scale: 1.0,
                sides: vec![side(a), side(b)],
                ..ReplayedOutput::default()
            }],
            ..Answer::default()
        }
    }

    fn record() -> TraceEntry {
        TraceEntry {
            op: "aten::mean".into(),
            inputs: vec!["f32[2048,64]:aa".into()],
            output: "f32[]:bb".into(),
            phase: "forward".into(),
            ..TraceEntry::default()
        }
    }

    #[test]
    fn the_closer_side_is_named_and_noise_classified_by_the_ops_threshold() {
        let r = classify_replay(answer((1.0, 6e-8), (2.0, 1.2e-7)), &record());
        assert_eq!(r.verdict, "both within noise; A is closer");
        assert!(
            r.line.starts_with("fp64 replay of aten.mean.default (torch 2.15.0, 1 output element): A: 1 ULP from the fp64 result, B: 2 ULP: both within noise"),
            "{}",
            r.line
        );
        // τ for f32 over K = 131072 terms: 8 · ε · √K.
        let t = r.outputs[0].threshold.unwrap();
        assert!((t - 8.0 * f32::EPSILON as f64 * 131072f64.sqrt()).abs() < 1e-12);
        let r = classify_replay(answer((3.0, 1e-7), (9e5, 0.2)), &record());
        assert_eq!(r.verdict, "B is beyond noise, A within: A is closer");
        let r = classify_replay(answer((4.0, 1e-7), (4.0, 1e-7)), &record());
        assert_eq!(r.verdict, "both within noise; equally close");
    }

    #[test]
    fn an_integer_output_that_differs_is_beyond_noise() {
        let mut a = answer((0.0, 0.0), (0.0, 0.0));
        a.outputs[0].sides[1] = SideError {
            differing: Some(3),
            ..SideError::default()
        };
        let r = classify_replay(a, &record());
        assert_eq!(r.verdict, "B is beyond noise, A within: A is closer");
        assert!(r.line.contains("3 integer elements differ"), "{}", r.line);
    }

    #[test]
    fn a_capture_without_identity_or_file_names_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = capture_path(dir.path());
        assert_eq!(captured_identity(&p), None);
        let header =
            br#"{"__metadata__":{"identity":"[0,\"\",0,\"forward\",\"\",\"aten::mean\",0]"}}"#;
        let mut blob = (header.len() as u64).to_le_bytes().to_vec();
        blob.extend_from_slice(header);
        std::fs::write(&p, &blob).unwrap();
        assert_eq!(
            captured_identity(&p).as_deref(),
            Some(r#"[0,"",0,"forward","","aten::mean",0]"#)
        );
        assert_eq!(
            find(&[record()], r#"[0,"",0,"forward","","aten::mean",0]"#),
            Some(0)
        );
        assert_eq!(
            find(&[record()], r#"[0,"",0,"forward","","aten::mean",1]"#),
            None
        );
    }
}
