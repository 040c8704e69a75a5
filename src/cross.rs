//! Cross-device comparison (`bitexact report --backend all`): the same case's outputs on CPU
//! and CUDA, tensor by tensor.
//!
//! Which outputs must be identical across devices: every non-float tensor (integers, `bool`
//! masks, random words — dropout masks and Philox streams are pure functions of the element
//! index, so any difference is a bug). Float tensors may legitimately differ in the last bits
//! (e.g. `expf` is not correctly rounded on either device); for them the comparison reports the
//! number of differing elements and the max ULP distance, which is information, not a failure.
//! A `mismatch` (an exact tensor differs, or names / dtypes / shapes differ) makes the report fail.
//!
//! When both devices' digests agree no extra run is made; when they differ, the case runs once
//! more on each device (run-0 settings) to get the tensors and explain the difference.

use crate::backend::Backend;
use crate::case::{Case, Outputs};
use crate::diff;
use crate::harness::{CaseSource, RunStart, Runs};
use crate::outcome::cross::{CrossDevice, CrossTensor, CrossVerdict};
use crate::outcome::{CaseReport, Verdict};
use std::collections::BTreeSet;

/// Compares CPU outputs `cpu` with CUDA outputs `cuda` of one case.
pub fn compare_outputs(case: &str, cpu: &Outputs, cuda: &Outputs) -> CrossDevice {
    let names: BTreeSet<&String> = cpu.keys().chain(cuda.keys()).collect();
    let mut tensors = Vec::new();
    let mut verdict = CrossVerdict::Identical;
    for n in names {
        let t = match (cpu.get(n), cuda.get(n)) {
            (Some(a), Some(b)) => {
                let exact = !a.dtype().is_float();
                let same =
                    a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes() == b.bytes();
                let diff = (!same).then(|| diff::explain(n, [0, 0], a, b));
                let lined_up = diff.as_ref().is_none_or(|d| d.note.is_none());
                if !same {
                    verdict = if exact || !lined_up {
                        CrossVerdict::Mismatch
                    } else if verdict == CrossVerdict::Identical {
                        CrossVerdict::FloatDifference
                    } else {
                        verdict
                    };
                }
                CrossTensor {
                    tensor: n.clone(),
                    exact_required: Some(exact),
                    identical: same,
                    diff,
                }
            }
            (a, _) => {
                verdict = CrossVerdict::Mismatch;
                let mut d = diff::missing(n, [0, 0], a.is_some());
                d.note = Some(if a.is_some() {
                    "output only on cpu".into()
                } else {
                    "output only on cuda".into()
                });
                CrossTensor {
                    tensor: n.clone(),
                    exact_required: Some(true),
                    identical: false,
                    diff: Some(d),
                }
            }
        };
        tensors.push(t);
    }
    CrossDevice {
        case: case.to_string(),
        verdict,
        tensors,
        message: None,
    }
}

/// Compares case `case`'s CPU report `cpu` (final) with its CUDA report `cuda` (its evidence
/// so far: the comparison is evidence for it). Only two deterministic reports are compared;
/// when their digests differ, `planner` makes one more run on each device (run-0 settings) to
/// explain how.
pub fn compare(
    case: &dyn Case,
    cpu: &CaseReport,
    cuda: &CaseReport,
    planner: &mut dyn Runs,
) -> CrossDevice {
    let name = case.name();
    if let Some(r) = [cpu, cuda]
        .into_iter()
        .find(|r| r.verdict_so_far() == Verdict::Skipped)
    {
        let why = r
            .evidence
            .skipped
            .clone()
            .unwrap_or_else(|| "skipped".into());
        return CrossDevice::skipped(&name, format!("{}: {why}", r.backend));
    }
    if let Some(r) = [cpu, cuda]
        .into_iter()
        .find(|r| r.verdict_so_far() != Verdict::Deterministic)
    {
        return CrossDevice::skipped(
            &name,
            format!(
                "{} run was {}: only deterministic results are compared across devices",
                r.backend,
                r.verdict_so_far().name()
            ),
        );
    }
    if cpu.digests == cuda.digests {
        return CrossDevice {
            case: name.clone(),
            verdict: CrossVerdict::Identical,
            tensors: cpu
                .digests
                .keys()
                .map(|t| CrossTensor {
                    tensor: t.clone(),
                    exact_required: None,
                    identical: true,
                    diff: None,
                })
                .collect(),
            message: None,
        };
    }
    let settings = planner.settings(0, false);
    let mut run = |k: usize, backend| -> Result<Outputs, String> {
        let source = CaseSource {
            case,
            backend,
            children: None,
        };
        let told = RunStart {
            purpose: "cross-device: cpu and cuda",
            index: k,
            of: 2,
        };
        let c = planner
            .one(&source, &settings, 0, told)
            .map_err(|f| f.message)?;
        c.digests
            .iter()
            .map(|(n, _)| Ok((n.clone(), c.loader.load(n).map_err(|e| format!("{e:#}"))?)))
            .collect()
    };
    match (run(0, Backend::Cpu), run(1, Backend::Cuda)) {
        (Ok(a), Ok(b)) => compare_outputs(&name, &a, &b),
        (Err(e), _) | (_, Err(e)) => CrossDevice {
            case: name.clone(),
            verdict: CrossVerdict::Mismatch,
            tensors: Vec::new(),
            message: Some(format!("re-run to explain the difference failed: {e}")),
        },
    }
}

/// What a `mismatch` adds to the CUDA report's evidence: its message, or the outputs that
/// differ.
pub fn mismatch_evidence(c: &CrossDevice) -> Option<String> {
    if c.verdict != CrossVerdict::Mismatch {
        return None;
    }
    Some(match &c.message {
        Some(m) => m.clone(),
        None => {
            let differing: Vec<&str> = c
                .tensors
                .iter()
                .filter(|t| !t.identical)
                .map(|t| t.tensor.as_str())
                .collect();
            format!("{} differ(s) between cpu and cuda", differing.join(", "))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn outs(pairs: Vec<(&str, Tensor)>) -> Outputs {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn identical_float_difference_and_mismatch() {
        let a = outs(vec![
            ("mask", Tensor::from_bools(&[3], &[true, false, true])),
            ("y", Tensor::from_slice(&[2], &[1.0f32, 2.0])),
        ]);
        assert_eq!(
            compare_outputs("c", &a, &a).verdict,
            CrossVerdict::Identical
        );
        let mut b = a.clone();
        let y2 = f32::from_bits(2.0f32.to_bits() + 2);
        b.insert("y".into(), Tensor::from_slice(&[2], &[1.0f32, y2]));
        let c = compare_outputs("c", &a, &b);
        assert_eq!(c.verdict, CrossVerdict::FloatDifference);
        let y = c.tensors.iter().find(|t| t.tensor == "y").unwrap();
        assert_eq!(y.diff.as_ref().unwrap().max_ulp, Some(2));
        assert!(c.details()[0].contains("max 2 ULP"), "{:?}", c.details());
        b.insert("mask".into(), Tensor::from_bools(&[3], &[true, true, true]));
        let c = compare_outputs("c", &a, &b);
        assert_eq!(c.verdict, CrossVerdict::Mismatch);
        assert!(c.details().iter().any(|l| l.contains("must be identical")));
        b.remove("mask");
        let c = compare_outputs("c", &a, &b);
        assert_eq!(c.verdict, CrossVerdict::Mismatch);
        assert!(c.details()[0].contains("only on cpu"), "{:?}", c.details());
    }
}
