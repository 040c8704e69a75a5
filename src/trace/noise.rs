//! Noise or not: whether two program traces that differ (two machines, two library versions,
//! two thread counts) differ by the rounding noise of a different summation order, or by
//! something larger (a changed argument, a bug, a numerical regression), judged from the two
//! records alone ([`judge`]).
//!
//! Each record of a program trace keeps, beside each result's exact digest, a float64 sketch
//! of it (norm, largest magnitude, non-finite count, [`super::sketch::SAMPLES`] fixed elements:
//! [`super::sketch`]) and the op's non-tensor arguments (`args`: `eps=1e-05,dim=[-1]`, see
//! [`arguments`]). Walking the first trace's records in order, each one whose counterpart in
//! the other trace has different results is judged:
//!
//! - **its relative difference** `d`: over the results that differ, the largest
//!   [`Sketch::relative_difference`] (norms, largest magnitudes, samples over the tensor's
//!   largest magnitude);
//! - **the noise threshold** of the op, `τ = min(`[`NOISE_FACTOR`]` · ε(dtype) · √K,
//!   `[`MAX_THRESHOLD`]`)`: `ε` the result dtype's machine epsilon, `K` the reduction length,
//!   inferred from the shapes ([`reduction_length`]: the largest dimension of any input, or the
//!   ratio of the largest input to the largest result when that is larger). Reordering a sum
//!   of `K` terms moves it by about `ε · √K` of the terms' scale (the rounding errors add like a
//!   random walk; `K · ε` is the worst case), and an elementwise op (`K` = 1) implemented
//!   differently (vectorized or not, another libm) by a few ULPs: hence the factor;
//! - **an op whose inputs are identical** on both sides (where a difference starts): beyond
//!   noise when its arguments differ (`same inputs, different arguments: eps 1e-05 vs 0.001`),
//!   when an integer or boolean result differs (rounding cannot explain it), or when `d > τ`;
//!   within noise otherwise;
//! - **an op whose inputs already differ** (downstream of a difference), or an in-place op
//!   (`aten::mul_`: the value it overwrote is an input its record does not show, [`in_place`]),
//!   whose arguments match: its inputs carry the
//!   difference so far, and ops amplify it (a normalization divides by a small spread, a
//!   subtraction cancels). It is beyond noise only when `d > max(τ, `[`GROWTH_ALLOWANCE`]` · g)`,
//!   `g` the growth so far: the largest relative difference of its differing inputs and of every
//!   record judged before it. An integer result that differs downstream (an argmax whose
//!   arguments moved by noise) is not judged.
//!
//! The answer is the first record beyond noise, if any; else the records agree within noise
//! everywhere, with the largest relative difference seen. A record without sketches (an older
//! trace, a device tensor, a tensor too large to hash) is counted as not judged. Records with
//! no counterpart (another op decomposition in another version) are left out of the judgement.
//! [`growth`](Judgement::growth) gives, per step, the records, how many differ, and the largest
//! relative difference and ULP distance among them.

use super::sketch::{self, Sketch};
use super::TraceEntry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// `c` in the threshold `c · ε · √K` (see the module docs).
pub const NOISE_FACTOR: f64 = 8.0;

/// The threshold is never above this relative difference (bf16 over long reductions).
pub const MAX_THRESHOLD: f64 = 0.05;

/// How many times the growth so far a downstream record may differ before it is beyond noise.
pub const GROWTH_ALLOWANCE: f64 = 100.0;

/// One step of the growth series: how the difference grows along the stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepGrowth {
    /// The step (optimizer steps completed before the records).
    pub step: u64,
    /// Records of the step with a counterpart in the other trace.
    pub records: usize,
    /// Of those, the records whose results differ.
    pub differing: usize,
    /// The largest relative difference among them (`None`: none differs, or none has sketches).
    pub max_rel: Option<f64>,
    /// The largest ULP distance among their sampled elements.
    pub max_ulp: Option<u64>,
}

/// How one differing record was judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    /// Where: `step 0, rank 0, aten::mm (call 3 of aten::mm) in module Net.fc1 (backward), t.py:9`.
    pub at: String,
    /// `within-noise`, `beyond-noise` or `not-judged`.
    pub judgement: String,
    /// Its relative difference, when sketches tell it.
    pub rel: Option<f64>,
    /// The difference it was allowed (the threshold, or the allowance for growth).
    pub allowed: Option<f64>,
    /// Why, in words.
    pub why: String,
}

/// The judgement of two traces (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Judgement {
    /// `within-noise` (every differing record judged is), `beyond-noise`, or `not-judged` (no
    /// differing record could be judged: no sketches).
    pub classification: String,
    /// The first record where the traces differ and their inputs matched, judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Verdict>,
    /// The answer: the first record beyond noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_beyond_noise: Option<Verdict>,
    /// The largest relative difference of any record (over the records up to the first beyond
    /// noise when there is one, then every record).
    pub largest_rel: Option<f64>,
    /// Where it was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_at: Option<String>,
    /// Records with a counterpart whose results differ.
    pub differing: usize,
    /// Of those, how many could not be judged (no sketches; integer results downstream).
    pub not_judged: usize,
    /// Per step: records, differing records, largest relative difference and ULP distance.
    #[serde(skip)]
    pub growth: Vec<StepGrowth>,
}

/// The reduction length `K` of an op from its tensors' labels: the largest dimension of any
/// input, or the number of input elements per result element (largest input over largest
/// result) when that is larger; at least 1.
pub fn reduction_length(inputs: &[String], outputs: &[&str]) -> usize {
    let numel = |s: &[usize]| s.iter().product::<usize>();
    let shapes = |labels: &mut dyn Iterator<Item = &str>| -> Vec<Vec<usize>> {
        labels.filter_map(sketch::shape_of_label).collect()
    };
    let ins = shapes(&mut inputs.iter().map(String::as_str));
    let outs = shapes(&mut outputs.iter().copied());
    let largest_dim = ins.iter().flatten().copied().max().unwrap_or(1);
    let largest_in = ins.iter().map(|s| numel(s)).max().unwrap_or(1);
    let largest_out = outs.iter().map(|s| numel(s)).max().unwrap_or(1).max(1);
    largest_dim.max(largest_in.div_ceil(largest_out)).max(1)
}

/// The noise threshold `min(c · ε · √K, cap)` of a result of `dtype` reduced over `k` terms;
/// `None` for a dtype that is not floating point.
pub fn threshold(dtype: crate::tensor::DType, k: usize) -> Option<f64> {
    let eps = sketch::epsilon(dtype)?;
    Some((NOISE_FACTOR * eps * (k.max(1) as f64).sqrt()).min(MAX_THRESHOLD))
}

/// `name=value` pairs of a record's `args` text, split at the commas outside brackets
/// (`normalized_shape=[16],eps=1e-05` → `normalized_shape` `[16]`, `eps` `1e-05`); an item
/// without `=` is named by its position (`#2`).
pub fn arguments(text: &str) -> Vec<(String, String)> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth <= 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text.is_empty() {
        items.push(&text[start..]);
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (format!("#{i}"), item.to_string()),
        })
        .collect()
}

/// `eps 1e-05 vs 0.001` for each argument that differs between two `args` texts (`(none)` on
/// the side without it), `; `-separated.
pub fn argument_difference(a: &str, b: &str) -> String {
    let (x, y) = (arguments(a), arguments(b));
    let get = |v: &[(String, String)], k: &str| v.iter().find(|(n, _)| n == k).map(|p| p.1.clone());
    let mut names: Vec<&String> = x.iter().map(|p| &p.0).collect();
    names.extend(y.iter().map(|p| &p.0).filter(|n| get(&x, n).is_none()));
    let none = || "(none)".to_string();
    names
        .into_iter()
        .filter_map(|n| {
            let (p, q) = (get(&x, n), get(&y, n));
            (p != q).then(|| {
                format!(
                    "{n} {} vs {}",
                    p.unwrap_or_else(none),
                    q.unwrap_or_else(none)
                )
            })
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A record's results: `(label, sketch)` pairs (the sketch `None` when it has none).
fn results(e: &TraceEntry) -> Vec<(&str, Option<Sketch>)> {
    let labels: Vec<&str> = match e.output.as_str() {
        "" => Vec::new(),
        o => o.split(';').collect(),
    };
    labels
        .iter()
        .enumerate()
        .map(|(i, &l)| (l, e.sketches.get(i).and_then(|s| Sketch::parse(s))))
        .collect()
}

/// How two results differ: `Ok(Some((rel, ulp)))` measured, `Ok(None)` equal, `Err(true)` an
/// integer or boolean result differs, `Err(false)` no sketch to tell.
type Measured = Result<Option<(f64, Option<u64>)>, bool>;

fn measure(x: (&str, &Option<Sketch>), y: (&str, &Option<Sketch>)) -> Measured {
    if x.0 == y.0 {
        return Ok(None);
    }
    let dtype = sketch::dtype_of_label(x.0);
    if dtype.is_some_and(|d| !d.is_float()) {
        return Err(true);
    }
    match (x.1, y.1, dtype) {
        (Some(p), Some(q), Some(d))
            if sketch::shape_of_label(x.0) == sketch::shape_of_label(y.0) =>
        {
            Ok(Some((p.relative_difference(q), p.max_ulp(q, d))))
        }
        _ => Err(false),
    }
}

/// The sketches of each side's results so far, by label.
type Seen = [HashMap<String, Sketch>; 2];

/// Remembers the sketches of the results of `x` (side 0) and `y` (side 1).
fn remember(seen: &mut Seen, x: &TraceEntry, y: &TraceEntry) {
    for (side, e) in [x, y].into_iter().enumerate() {
        for (l, s) in results(e) {
            if let Some(s) = s {
                seen[side].insert(l.to_string(), s);
            }
        }
    }
}

/// The largest relative difference of the inputs that differ between `x` and `y`, from the
/// sketches of the results that made them (`None` when none is known).
fn input_difference(seen: &Seen, x: &TraceEntry, y: &TraceEntry) -> Option<f64> {
    x.inputs
        .iter()
        .zip(&y.inputs)
        .filter(|(p, q)| p != q)
        .filter_map(|(p, q)| Some(seen[0].get(p)?.relative_difference(seen[1].get(q)?)))
        .reduce(f64::max)
}

/// Judges two program traces (see the module docs): the records are aligned as
/// [`super::first_divergence`] aligns them.
pub fn judge(a: &[TraceEntry], b: &[TraceEntry]) -> Judgement {
    let (ia, ib) = (super::identities(a), super::identities(b));
    let index: HashMap<_, usize> = (b.iter().zip(&ib).enumerate())
        .map(|(j, (e, &n))| ((e.key(), n), j))
        .collect();
    let mut j = Judgement::default();
    let mut steps: std::collections::BTreeMap<u64, StepGrowth> = Default::default();
    let mut seen: Seen = Default::default();
    let mut so_far = 0f64;
    for (x, &n) in a.iter().zip(&ia) {
        let Some(&k) = index.get(&(x.key(), n)) else {
            continue;
        };
        let y = &b[k];
        let g = steps.entry(x.step).or_insert(StepGrowth {
            step: x.step,
            records: 0,
            differing: 0,
            max_rel: None,
            max_ulp: None,
        });
        g.records += 1;
        if x.output == y.output {
            remember(&mut seen, x, y);
            continue;
        }
        g.differing += 1;
        j.differing += 1;
        let (rx, ry) = (results(x), results(y));
        let mut rel: Option<f64> = None;
        let (mut discrete, mut unknown) = (rx.len() != ry.len(), false);
        for ((lx, sx), (ly, sy)) in rx.iter().zip(&ry) {
            match measure((lx, sx), (ly, sy)) {
                Ok(Some((r, ulp))) => {
                    rel = Some(rel.map_or(r, |m| m.max(r)));
                    g.max_ulp = g.max_ulp.max(ulp);
                }
                Ok(None) => {}
                Err(true) => discrete = true,
                Err(false) => unknown = true,
            }
        }
        if let Some(r) = rel {
            g.max_rel = Some(g.max_rel.map_or(r, |m| m.max(r)));
            if j.largest_rel.is_none_or(|m| r > m) {
                j.largest_rel = Some(r);
                j.largest_at = Some(x.describe(n + 1));
            }
        }
        if j.first_beyond_noise.is_none() {
            let v = verdict(x, y, n, rel, discrete, unknown, &seen, so_far);
            if v.judgement == "not-judged" {
                j.not_judged += 1;
            }
            if j.origin.is_none() && x.inputs == y.inputs {
                j.origin = Some(v.clone());
            }
            if v.judgement == "beyond-noise" {
                j.first_beyond_noise = Some(v);
            }
            so_far = so_far.max(rel.unwrap_or(0.0));
        }
        remember(&mut seen, x, y);
    }
    j.growth = steps.into_values().collect();
    j.classification = match (&j.first_beyond_noise, j.not_judged == j.differing) {
        (Some(_), _) => "beyond-noise",
        (None, true) if j.differing > 0 => "not-judged",
        _ => "within-noise",
    }
    .into();
    j
}

/// The verdict on one differing record `x` (occurrence `n`) against its counterpart `y`.
#[allow(clippy::too_many_arguments)]
fn verdict(
    x: &TraceEntry,
    y: &TraceEntry,
    n: usize,
    rel: Option<f64>,
    discrete: bool,
    unknown: bool,
    seen: &Seen,
    so_far: f64,
) -> Verdict {
    let outs: Vec<&str> = x.output.split(';').collect();
    let float_out = outs
        .iter()
        .zip(y.output.split(';'))
        .filter(|&(p, q)| *p != q)
        .find_map(|(p, _)| sketch::dtype_of_label(p).filter(|d| d.is_float()));
    let k = reduction_length(&x.inputs, &outs);
    let tau = float_out.and_then(|d| threshold(d, k));
    let rule = |d: crate::tensor::DType, tau: f64| {
        format!(
            "{NOISE_FACTOR} × ε({d}) {:.3e} × √{k} = {tau:.2e}",
            sketch::epsilon(d).unwrap_or(0.0)
        )
    };
    let mk = |judgement: &str, allowed: Option<f64>, why: String| Verdict {
        at: x.describe(n + 1),
        judgement: judgement.into(),
        rel,
        allowed,
        why,
    };
    let same_inputs = x.inputs == y.inputs;
    if same_inputs && x.args != y.args {
        let why = format!(
            "same inputs, different arguments: {}",
            argument_difference(&x.args, &y.args)
        );
        return mk("beyond-noise", tau, why);
    }
    if same_inputs && discrete {
        let why = "same inputs, an integer result differs: rounding does not explain it";
        return mk("beyond-noise", None, why.into());
    }
    let (Some(r), Some(d), Some(tau)) = (rel, float_out, tau) else {
        let why = match (unknown, discrete) {
            (true, _) => "no sketch of its results to measure the difference",
            _ => "an integer result differs downstream of a difference",
        };
        return mk("not-judged", None, why.into());
    };
    if same_inputs && !in_place(&x.op) {
        let why = format!("relative difference {r:.2e}, threshold {}", rule(d, tau));
        return mk(
            if r <= tau {
                "within-noise"
            } else {
                "beyond-noise"
            },
            Some(tau),
            why,
        );
    }
    let grown = input_difference(seen, x, y).unwrap_or(0.0).max(so_far);
    let allowed = tau.max(GROWTH_ALLOWANCE * grown);
    let why = format!(
        "relative difference {r:.2e}; its inputs already differ, growth so far {grown:.2e}, \
         allowed max({}, {GROWTH_ALLOWANCE} × {grown:.2e}) = {allowed:.2e}",
        rule(d, tau)
    );
    mk(
        if r <= allowed {
            "within-noise"
        } else {
            "beyond-noise"
        },
        Some(allowed),
        why,
    )
}

/// Whether `op` writes a tensor in place (`aten::mul_.Tensor`, `aten::_foreach_add_.List`):
/// the tensor it writes is a result only in its record, so its value before the op, which may
/// already differ, is an input the record does not show; such an op is judged as downstream.
pub fn in_place(op: &str) -> bool {
    let name = op.split('.').next().unwrap_or(op);
    name.ends_with('_') && !name.ends_with("__")
}

/// The one-line summary of a growth series: `largest relative difference per step: 0 3.1e-8
/// (12 of 300 records differ), 1 2.2e-7 (…), …` (the first and last three steps of a long
/// series).
pub fn growth_line(growth: &[StepGrowth]) -> String {
    let one = |g: &StepGrowth| {
        let rel = g.max_rel.map_or("-".to_string(), |r| format!("{r:.1e}"));
        format!("{} {rel} ({}/{})", g.step, g.differing, g.records)
    };
    let shown: Vec<String> = if growth.len() > 7 {
        let mut v: Vec<String> = growth[..3].iter().map(one).collect();
        v.push("…".into());
        v.extend(growth[growth.len() - 3..].iter().map(one));
        v
    } else {
        growth.iter().map(one).collect()
    };
    format!(
        "growth: largest relative difference per step (differing/records): {}",
        shown.join(", ")
    )
}

#[cfg(test)]
#[path = "noise_tests.rs"]
mod tests;
