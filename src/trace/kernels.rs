//! The kernels a compiled region launched (`torch.compile`, Inductor), recorded inside the
//! region's record (`python/bitexact/_trace/kernels.py`): when a region's inputs are identical
//! and its output differs, [`first_divergent`] looks inside it for the first kernel whose
//! inputs are identical and whose output differs, and [`words`] names it:
//!
//! ```text
//! … compiled GPT (call 1 of compiled GPT) in module GPT (backward), train.py:305
//!   → kernel cpp_fused_sum_mul_17 (fuses aten::sum, aten::mul at model.py:88; reduction)
//! ```
//!
//! A trace line with a `"kernel"` field is a kernel record: it belongs to the next record of
//! its thread, the region's own (written when the region's call or backward ends). Traces
//! without kernel records (older tracers, `BITEXACT_TRACE_KERNELS=0`) read as before.

use super::TraceEntry;
use serde::{Deserialize, Serialize};

/// One kernel call inside a compiled region.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Kernel {
    /// The call as a record: `op` is the kernel's name (`cpp_fused_add_mul_0`,
    /// `extern_kernels.mm`), `inputs` and `output` the buffers it reads and writes,
    /// `generator` the random seeds it draws from (`inductor's random seeds|<digest>`).
    pub record: TraceEntry,
    /// The ATen ops it computes (`aten::sum`), as Inductor names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fuses: Vec<String>,
    /// The program's source lines of the FX nodes it was generated from (`model.py:88`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<String>,
    /// Whether its generated code accumulates (a reduction); false for a library call.
    #[serde(default)]
    pub reduction: bool,
}

/// The kernel a divergence names inside a compiled region, as the report carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DivergentKernel {
    /// The kernel's name (`cpp_fused_sum_mul_17`, a Triton kernel's, `extern_kernels.mm`).
    pub name: String,
    /// Its position among the kernel calls of the region's call (1-based).
    pub call: usize,
    /// The ATen ops it fuses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fuses: Vec<String>,
    /// The program's source lines of the FX nodes it was generated from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<String>,
    /// Whether it holds a reduction.
    pub reduction: bool,
}

impl DivergentKernel {
    fn of(k: &Kernel, call: usize) -> DivergentKernel {
        DivergentKernel {
            name: k.record.op.clone(),
            call,
            fuses: k.fuses.clone(),
            at: k.at.clone(),
            reduction: k.reduction,
        }
    }
}

/// In two runs' records of one compiled region call, the first kernel call whose output (or
/// generator state) differs, when its inputs are identical: `(its 0-based position, its
/// record in each run)`. None when the region holds no kernel records, when the runs launched
/// other kernels before it (other code was compiled), or when the first kernel that differs
/// already received different inputs.
pub fn first_divergent<'a>(
    x: &'a TraceEntry,
    y: &'a TraceEntry,
) -> Option<(usize, &'a Kernel, &'a Kernel)> {
    for (i, (a, b)) in x.kernels.iter().zip(&y.kernels).enumerate() {
        let (p, q) = (&a.record, &b.record);
        if p.op != q.op {
            return None;
        }
        if p.inputs == q.inputs && p.output == q.output && p.generator == q.generator {
            continue;
        }
        return (p.inputs == q.inputs).then_some((i, a, b));
    }
    None
}

/// `kernel cpp_fused_sum_mul_17 (fuses aten::sum, aten::mul at model.py:88; reduction)`.
pub fn words(k: &Kernel) -> String {
    let mut site = Vec::new();
    if !k.fuses.is_empty() {
        site.push(format!("fuses {}", k.fuses.join(", ")));
    }
    if !k.at.is_empty() {
        site.push(format!("at {}", k.at.join(", ")));
    }
    let mut parts = Vec::new();
    if !site.is_empty() {
        parts.push(site.join(" "));
    }
    if k.reduction {
        parts.push("reduction".to_string());
    }
    match parts.is_empty() {
        true => format!("kernel {}", k.record.op),
        false => format!("kernel {} ({})", k.record.op, parts.join("; ")),
    }
}

/// The kernel part of a divergence at region records `x` and `y`: the region's place
/// followed by `→ kernel …` and the kernel's own verdict (`inputs identical, output differs:
/// …`, or its generator state), from `differing` applied to the two kernel records.
pub(super) fn inside(
    x: &TraceEntry,
    y: &TraceEntry,
    at: &str,
    differing: impl Fn(&TraceEntry, &TraceEntry, usize) -> super::Divergence,
) -> Option<super::Divergence> {
    let (i, a, b) = first_divergent(x, y)?;
    let inner = differing(&a.record, &b.record, i + 1);
    let verdict = inner.explanation.split_once(" — ")?.1.to_string();
    Some(super::Divergence {
        call: x.call,
        op: x.op.clone(),
        inputs_matched: true,
        explanation: format!("first divergence: {at} → {} — {verdict}", words(a)),
        generator: inner.generator,
        kernel: Some(DivergentKernel::of(a, i + 1)),
        ..super::Divergence::default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::program::read_dir;

    /// A region's record after its two kernel records, in one run with `out` the second
    /// kernel's output and the region's.
    fn trace(out: &str) -> String {
        let k = |op: &str, i: &str, o: &str, kernel: &str| {
            format!(
                r#"{{"v":3,"step":0,"rank":0,"phase":"backward","module":"GPT","op":"{op}","src":"t.py:9","in":["{i}"],"out":["{o}"],"kernel":{kernel}}}"#
            )
        };
        [
            k("extern_kernels.mm", "f32[2]:a", "f32[2]:b", r#"{"fuses":["aten::mm"]}"#),
            k(
                "cpp_fused_sum_1",
                "f32[2]:b",
                out,
                r#"{"fuses":["aten::sum"],"at":["m.py:4"],"reduction":true}"#,
            ),
            format!(
                r#"{{"v":3,"step":0,"rank":0,"phase":"backward","module":"GPT","op":"compiled GPT","src":"t.py:9","in":["f32[2]:a"],"out":["{out}"]}}"#
            ),
        ]
        .join("\n")
    }

    fn read(text: &str) -> Vec<super::TraceEntry> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".bitexact-trace-rank0.jsonl"), text).unwrap();
        read_dir(dir.path()).unwrap().unwrap()
    }

    #[test]
    fn a_region_names_its_first_kernel_of_identical_inputs_and_another_output() {
        let (a, b) = (read(&trace("f32[1]:c")), read(&trace("f32[1]:d")));
        assert_eq!(a.len(), 1, "kernel records belong to their region's record");
        assert_eq!(a[0].kernels.len(), 2);
        let d = super::super::first_divergence(&a, &b).unwrap();
        assert_eq!(
            d.explanation,
            "first divergence: step 0, rank 0, compiled GPT (call 1 of compiled GPT) in module \
             GPT (backward), t.py:9 → kernel cpp_fused_sum_1 (fuses aten::sum at m.py:4; \
             reduction) — inputs identical, output differs: this op is nondeterministic"
        );
        let k = d.kernel.unwrap();
        assert_eq!(
            (k.name.as_str(), k.call, k.reduction),
            ("cpp_fused_sum_1", 2, true)
        );
        // Without kernel records (an older trace): the region alone, as before.
        let plain = |t: &str| t.lines().last().unwrap().to_string();
        let (a, b) = (
            read(&plain(&trace("f32[1]:c"))),
            read(&plain(&trace("f32[1]:d"))),
        );
        let d = super::super::first_divergence(&a, &b).unwrap();
        assert!(d.kernel.is_none());
        assert!(d
            .explanation
            .ends_with("t.py:9 — inputs identical, output differs: this op is nondeterministic"));
    }
}
