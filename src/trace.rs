//! Op traces: the digest of every op's inputs and output, in call order, so that two runs that
//! differ can be compared op by op and the first op whose output differs while its inputs
//! matched can be named (first-divergence localization).
//!
//! Trace digests are SHA-256 over the values' little-endian bytes (no header: the op and call
//! index identify them). Traces are JSON-serialisable, so they can be saved with
//! `bitexact report --trace FILE` and compared across processes and machines with
//! `bitexact diff-trace A B`.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A value an op call is traced with (borrowed).
#[derive(Clone, Copy, Debug)]
pub enum TraceArg<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// i64 values (indices).
    I64(&'a [i64]),
    /// Booleans (masks).
    Bool(&'a [bool]),
    /// u32 values (random words).
    U32(&'a [u32]),
    /// One f32.
    Scalar(f32),
}

impl<'a> From<&'a [f32]> for TraceArg<'a> {
    fn from(v: &'a [f32]) -> Self {
        TraceArg::F32(v)
    }
}
impl<'a> From<&'a Vec<f32>> for TraceArg<'a> {
    fn from(v: &'a Vec<f32>) -> Self {
        TraceArg::F32(v)
    }
}
impl<'a> From<&'a [i64]> for TraceArg<'a> {
    fn from(v: &'a [i64]) -> Self {
        TraceArg::I64(v)
    }
}
impl<'a> From<&'a [bool]> for TraceArg<'a> {
    fn from(v: &'a [bool]) -> Self {
        TraceArg::Bool(v)
    }
}
impl From<f32> for TraceArg<'_> {
    fn from(v: f32) -> Self {
        TraceArg::Scalar(v)
    }
}

/// Feeds values' little-endian bytes to `h`, a bounded buffer at a time.
fn feed<T: Copy, const W: usize>(h: &mut Sha256, v: &[T], le: impl Fn(T) -> [u8; W]) {
    let mut buf = Vec::with_capacity(v.len().min(1 << 14) * W);
    for chunk in v.chunks(1 << 14) {
        buf.clear();
        chunk.iter().for_each(|&x| buf.extend_from_slice(&le(x)));
        h.update(&buf);
    }
}

/// Short hex digest (first 16 bytes of SHA-256) of a traced value.
pub fn trace_digest(v: TraceArg) -> String {
    let mut h = Sha256::new();
    match v {
        TraceArg::F32(x) => feed(&mut h, x, f32::to_le_bytes),
        TraceArg::I64(x) => feed(&mut h, x, i64::to_le_bytes),
        TraceArg::Bool(x) => feed(&mut h, x, |b| [b as u8]),
        TraceArg::U32(x) => feed(&mut h, x, u32::to_le_bytes),
        TraceArg::Scalar(x) => h.update(x.to_le_bytes()),
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One op call in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// Position of the call in the run (0-based).
    pub call: usize,
    /// Op family, e.g. `matmul`.
    pub op: String,
    /// Implementation that ran.
    pub algorithm: String,
    /// Digests of the inputs, in argument order.
    pub inputs: Vec<String>,
    /// Digest of the output.
    pub output: String,
}

/// Where two traces first diverge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// Call index of the first entry that differs.
    pub call: usize,
    /// Op of that call.
    pub op: String,
    /// `true` when the op's inputs matched and only its output differed: the op itself is the
    /// source; `false` when its inputs already differed (the divergence came from code between
    /// traced ops, e.g. host-side arithmetic).
    pub inputs_matched: bool,
    /// One line for reports.
    pub explanation: String,
}

/// Compares two traces and names the first divergence, if any.
pub fn first_divergence(a: &[TraceEntry], b: &[TraceEntry]) -> Option<Divergence> {
    for (x, y) in a.iter().zip(b) {
        if x == y {
            continue;
        }
        if x.op != y.op {
            return Some(Divergence {
                call: x.call,
                op: x.op.clone(),
                inputs_matched: false,
                explanation: format!(
                    "call {}: the runs called different ops (`{}` vs `{}`): control flow diverged",
                    x.call, x.op, y.op
                ),
            });
        }
        let inputs_matched = x.inputs == y.inputs;
        let explanation = if inputs_matched && x.algorithm != y.algorithm {
            format!(
                "first divergence at call {} `{}`: same inputs, algorithm changed ({} vs {})",
                x.call, x.op, x.algorithm, y.algorithm
            )
        } else if inputs_matched {
            format!(
                "first divergence at call {} `{}` ({} vs {}): same inputs, different output — this op is nondeterministic",
                x.call, x.op, x.algorithm, y.algorithm
            )
        } else {
            let mut which: Vec<String> = x
                .inputs
                .iter()
                .zip(&y.inputs)
                .enumerate()
                .filter(|(_, (p, q))| p != q)
                .map(|(i, _)| format!("input {i}"))
                .collect();
            if x.inputs.len() != y.inputs.len() {
                which.push(format!("{} vs {} inputs", x.inputs.len(), y.inputs.len()));
            }
            format!(
                "call {} `{}` already received different inputs ({}) although every earlier traced output matched: \
                 the divergence comes from code between traced ops",
                x.call,
                x.op,
                which.join(", ")
            )
        };
        return Some(Divergence {
            call: x.call,
            op: x.op.clone(),
            inputs_matched,
            explanation,
        });
    }
    (a.len() != b.len()).then(|| Divergence {
        call: a.len().min(b.len()),
        op: String::new(),
        inputs_matched: true,
        explanation: format!(
            "the runs made {} and {} op calls: control flow diverged",
            a.len(),
            b.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(call: usize, op: &str, inputs: &[&str], output: &str) -> TraceEntry {
        TraceEntry {
            call,
            op: op.into(),
            algorithm: "x".into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            output: output.into(),
        }
    }

    #[test]
    fn names_the_first_op_whose_output_differs_with_equal_inputs() {
        let a = vec![
            e(0, "matmul", &["a", "b"], "c"),
            e(1, "softmax", &["c"], "d"),
        ];
        let b = vec![
            e(0, "matmul", &["a", "b"], "c2"),
            e(1, "softmax", &["c2"], "d2"),
        ];
        let d = first_divergence(&a, &b).unwrap();
        assert_eq!(
            (d.call, d.op.as_str(), d.inputs_matched),
            (0, "matmul", true)
        );
        assert!(first_divergence(&a, &a).is_none());
    }

    #[test]
    fn a_changed_algorithm_is_named_as_such() {
        let a = vec![e(0, "matmul", &["a", "b"], "c")];
        let mut b = a.clone();
        b[0].algorithm = "tiled32".into();
        b[0].output = "c2".into();
        let d = first_divergence(&a, &b).unwrap();
        assert!(
            d.explanation.contains("algorithm changed (x vs tiled32)"),
            "{}",
            d.explanation
        );
        assert!(!d.explanation.contains("nondeterministic"));
        let mut c = a.clone();
        c[0].inputs.push("extra".into());
        let d = first_divergence(&a, &c).unwrap();
        assert!(d.explanation.contains("2 vs 3 inputs"), "{}", d.explanation);
    }

    #[test]
    fn differing_inputs_point_outside_the_ops() {
        let a = vec![
            e(0, "matmul", &["a", "b"], "c"),
            e(1, "softmax", &["x"], "d"),
        ];
        let b = vec![
            e(0, "matmul", &["a", "b"], "c"),
            e(1, "softmax", &["y"], "d2"),
        ];
        let d = first_divergence(&a, &b).unwrap();
        assert!(!d.inputs_matched && d.explanation.contains("input 0"));
    }

    #[test]
    fn digests_are_value_sensitive() {
        assert_ne!(
            trace_digest((&[0.0f32][..]).into()),
            trace_digest((&[-0.0f32][..]).into())
        );
        assert_eq!(
            trace_digest((&[1i64, 2][..]).into()),
            trace_digest(TraceArg::I64(&[1, 2]))
        );
        assert_ne!(
            trace_digest(TraceArg::Bool(&[true])),
            trace_digest(TraceArg::Bool(&[false]))
        );
    }
}

/// The traces of one case on one backend, as saved by `--trace FILE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseTraces {
    /// Case name.
    pub name: String,
    /// Backend name.
    pub backend: String,
    /// One trace per run.
    pub runs: Vec<Vec<TraceEntry>>,
}

/// A trace file: `{"version": 1, "platform": ..., "cases": [...]}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceFile {
    /// Format version (1).
    pub version: u32,
    /// Fingerprint of the machine that recorded it (free-form JSON).
    pub platform: serde_json::Value,
    /// Traces per case and backend.
    pub cases: Vec<CaseTraces>,
}

impl TraceFile {
    /// The traces recorded in `report` (cases traced with `Options::trace`).
    pub fn of_report(report: &crate::report::Report) -> anyhow::Result<TraceFile> {
        Ok(TraceFile {
            version: 1,
            platform: serde_json::to_value(&report.platform)?,
            cases: report
                .cases
                .iter()
                .filter(|r| !r.traces.is_empty())
                .map(|r| CaseTraces {
                    name: r.name.clone(),
                    backend: r.backend.name().into(),
                    runs: r.traces.clone(),
                })
                .collect(),
        })
    }

    /// Reads a trace file; errors name the file.
    pub fn load(path: &std::path::Path) -> anyhow::Result<TraceFile> {
        use anyhow::Context;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading trace file {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a bitexact trace file", path.display()))
    }
}

/// Compares run 0 of every case present in both files: `(case, backend, first divergence)`;
/// a case present in only one file is reported with an explanation.
pub fn diff_files(a: &TraceFile, b: &TraceFile) -> Vec<(String, String, Option<Divergence>)> {
    a.cases
        .iter()
        .map(|ca| {
            let cb = b
                .cases
                .iter()
                .find(|cb| cb.name == ca.name && cb.backend == ca.backend);
            let d = match (ca.runs.first(), cb.and_then(|c| c.runs.first())) {
                (Some(x), Some(y)) => first_divergence(x, y),
                _ => Some(Divergence {
                    call: 0,
                    op: String::new(),
                    inputs_matched: false,
                    explanation: "no trace of this case in the second file".to_string(),
                }),
            };
            (ca.name.clone(), ca.backend.clone(), d)
        })
        .collect()
}
