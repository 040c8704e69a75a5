//! Snapshots across machines: a program whose snapshot for this platform class is missing is
//! compared with the snapshot of the same case and controls of another class
//! (`DIR/<other class>/<case>@<controls>.snap`), judged with the thresholds of
//! [`crate::trace::noise`] on the sketches stored with both snapshots (`sketch.<output>` in
//! `info`, made under `--snapshots` from run 0's floating-point outputs).
//!
//! Each output whose digest differs, in natural order of names, is judged at the threshold
//! `min(8 · ε(dtype) · √n, 0.05)`, `n` its element count. An output is the end of the whole
//! stream, where the noise of every op before it has grown, and a snapshot holds no record of
//! those ops, so the element count stands in for the reduction length (the allowance grows with
//! the tensor, as the sum of its rounding errors does). When every differing output is within
//! it the case is a `platform-difference (within noise)`, not a failure.
//!
//! An output is a receiver in the noise rule's words: downstream of every op, where rounding
//! noise may have been amplified honestly (Adam's division by `√v`, a sum that cancels), which
//! is not a change. Its own difference cannot tell amplified noise from a change, and a
//! snapshot keeps neither the ops' arguments nor their records, so an output over its threshold
//! (or a differing integer output) is never called beyond noise: it is a `mismatch (over the
//! noise threshold at the outputs: first at w.safetensors:fc.weight …)`, which says that
//! `bitexact diff-trace` of traced runs tells the two apart. Only what rounding cannot make
//! at all is beyond noise: a changed dtype or shape, or an output in one snapshot only
//! (`mismatch (beyond noise: first at …)`). The program's op stream digest (`<ops>`) is left to
//! `bitexact diff-trace`; any other output without a sketch leaves the comparison not judged
//! (the snapshot is then missing, as before).

use super::format::{Snapshot, SKETCH_PREFIX};
use super::naming::path;
use crate::controls::Controls;
use crate::tensor_files::natural_cmp;
use crate::trace::noise::threshold;
use crate::trace::sketch::{dtype_of_label, shape_of_label, Sketch};
use anyhow::Result;
use std::path::Path;

/// How a snapshot of another platform class compares.
#[derive(Clone, Debug, PartialEq)]
pub enum CrossClass {
    /// Every differing output within noise: the largest relative difference and where.
    Within(String),
    /// The first output over its threshold, or a differing integer output, and why: amplified
    /// noise or a change, which the outputs alone cannot tell apart.
    Over(String),
    /// The first output that rounding cannot explain (a changed dtype or shape, an output in
    /// one snapshot only) and why.
    Beyond(String),
    /// Some differing output has no sketch to judge.
    NotJudged(String),
}

/// The snapshots of `case` under `controls` of classes other than `class` in `dir`, by class
/// name.
pub fn other_classes(
    dir: &Path,
    class: &str,
    case: &str,
    controls: &Controls,
) -> Result<Vec<(String, Snapshot)>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut classes: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|c| c != class)
        .collect();
    classes.sort();
    let mut out = Vec::new();
    for c in classes {
        if let Some(s) = super::compare::read_existing(&path(dir, &c, case, controls))? {
            out.push((c, s));
        }
    }
    Ok(out)
}

/// An output's stored sketch: its dtype, shape and sketch.
fn stored(s: &Snapshot, name: &str) -> Option<(String, Sketch)> {
    let text = s.info(&format!("{SKETCH_PREFIX}{name}"))?;
    let (head, sketch) = text.split_once('|')?;
    Some((head.to_string(), Sketch::parse(sketch)?))
}

/// Classifies how `new` differs from `old`, a snapshot of another platform class: within
/// noise, beyond it or not judged (see the module docs).
pub fn classify_cross_class(old: &Snapshot, new: &Snapshot) -> CrossClass {
    let mut names: Vec<&String> = old.tensors.keys().chain(new.tensors.keys()).collect();
    names.sort_by(|a, b| natural_cmp(a, b));
    names.dedup();
    let (mut largest, mut unjudged, mut differing) = (None::<(f64, &str)>, Vec::new(), 0);
    for name in names {
        let (p, q) = (old.tensors.get(name), new.tensors.get(name));
        if p == q || name == crate::trace::program::OPS_NAME {
            continue;
        }
        differing += 1;
        let (Some(_), Some(_)) = (p, q) else {
            return CrossClass::Beyond(format!("first at {name}: in one snapshot only"));
        };
        let (Some((ha, sa)), Some((hb, sb))) = (stored(old, name), stored(new, name)) else {
            unjudged.push(name.as_str());
            continue;
        };
        let dtype = dtype_of_label(&ha);
        if ha != hb || dtype.is_none() {
            return CrossClass::Beyond(format!("first at {name}: {ha} vs {hb}"));
        }
        let n: usize = shape_of_label(&ha).unwrap_or_default().iter().product();
        let Some(tau) = dtype.and_then(|d| threshold(d, n)) else {
            return CrossClass::Over(format!("first at {name}: an integer output differs"));
        };
        let r = sa.relative_difference(&sb);
        if r > tau {
            return CrossClass::Over(format!(
                "first at {name}: relative difference {r:.2e} over the threshold {tau:.2e} \
                 (8 × ε × √{n})"
            ));
        }
        if largest.is_none_or(|(m, _)| r > m) {
            largest = Some((r, name));
        }
    }
    if !unjudged.is_empty() {
        return CrossClass::NotJudged(format!("no sketch of {}", unjudged.join(", ")));
    }
    let (r, at) = largest.unwrap_or((0.0, "-"));
    CrossClass::Within(format!(
        "{differing} outputs differ, largest relative difference {r:.2e} at {at}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn snap(values: &[(&str, &[f32])], ints: &[(&str, &str)]) -> Snapshot {
        let mut tensors = BTreeMap::new();
        let mut info = Vec::new();
        for (name, v) in values {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            let d =
                crate::digest::digest_parts(crate::tensor::DType::F32, &[v.len()], &bytes).hex();
            tensors.insert(name.to_string(), d);
            let s = Sketch::of(crate::tensor::DType::F32, &bytes).unwrap();
            let head = format!("f32[{}]", v.len());
            info.push((
                format!("{SKETCH_PREFIX}{name}"),
                format!("{head}|{}", s.text()),
            ));
        }
        for (name, d) in ints {
            tensors.insert(name.to_string(), d.repeat(64));
        }
        Snapshot {
            run: "0".repeat(64),
            tensors,
            description: String::new(),
            info,
        }
    }

    #[test]
    fn outputs_within_noise_are_a_platform_difference_and_large_ones_a_mismatch() {
        let next = f32::from_bits(2f32.to_bits() + 1);
        let a = snap(&[("w", &[1.0, 2.0]), ("z", &[5.0])], &[("i", "a")]);
        let b = snap(&[("w", &[1.0, next]), ("z", &[5.0])], &[("i", "a")]);
        match classify_cross_class(&a, &b) {
            CrossClass::Within(why) => assert!(why.starts_with("1 outputs differ"), "{why}"),
            other => panic!("{other:?}"),
        }
        let c = snap(&[("w", &[1.0, 2.02]), ("z", &[5.0])], &[("i", "a")]);
        match classify_cross_class(&a, &c) {
            CrossClass::Over(why) => assert!(why.starts_with("first at w: relative"), "{why}"),
            other => panic!("{other:?}"),
        }
        let d = snap(&[("w", &[1.0, 2.0]), ("z", &[5.0])], &[("i", "b")]);
        assert_eq!(
            classify_cross_class(&a, &d),
            CrossClass::NotJudged("no sketch of i".into())
        );
        let e = snap(&[("w", &[1.0, 2.0])], &[("i", "a")]);
        assert_eq!(
            classify_cross_class(&a, &e),
            CrossClass::Beyond("first at z: in one snapshot only".into())
        );
    }
}
