//! Noise or not: whether two program traces that differ (two machines, two library versions,
//! two thread counts) differ by the rounding noise of a different summation order, honestly
//! amplified downstream, or by something else (a changed argument, a bug, a numerical
//! regression), classified from the two records alone ([`classify_noise`]), or with an fp64
//! replay of one op ([`classify_noise_with`]).
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
//! - **an origin**, an op whose inputs are identical on both sides (where a difference starts),
//!   (a `--trace modules` record lists less than what made it: a module's, when none of the
//!   modules it called differs; a gradient's, when no earlier record of its rank but a
//!   gradient differs) is
//!   judged by its own difference: beyond noise when its arguments differ (`same inputs,
//!   different arguments: eps 1e-05 vs 0.001`), when an integer or boolean result differs
//!   (rounding cannot explain it), or when `d > τ`; within noise otherwise;
//! - **a receiver**, an op whose inputs already differ (downstream of a difference), or an
//!   in-place op whose record does not show the value it overwrote (`aten::mul_` before record
//!   version 5, `aten::index_put_`: [`TraceEntry::hides_read`]): its inputs carry the difference so far, and ops amplify it honestly (a
//!   normalization divides by a small spread, a subtraction cancels, Adam divides by `√v`). Its
//!   allowance is `max(τ, `[`GROWTH_ALLOWANCE`]` · g)`, `g` the growth so far: the largest
//!   relative difference of its differing inputs and of every record judged before it. Within
//!   it, the receiver is within noise; past it, it is **amplified**: larger only because its
//!   inputs already differed, which is not a change. A receiver is **beyond noise** only when
//!   its arguments differ and `d` is past the allowance (arguments computed from values that
//!   already differ, a `.item()`, may differ by noise themselves), or when an fp64 replay of it
//!   is at hand ([`OwnStep`]: both sides captured it, [`super::replay`]) and its own step is
//!   beyond noise: a side's output farther than `τ` from the float64 result of the op on that
//!   side's own inputs. Without a replay, a receiver whose arguments match is never beyond
//!   noise. An integer result that differs downstream (an argmax whose arguments moved by
//!   noise) is not judged.
//!
//! The answer is the first record beyond noise, if any; else, when no differing record had
//! identical inputs (no origin: the difference entered between traced records, by an amount
//! none measured), the traces are not judged; else every difference starts at an
//! origin within noise, and the answer says how far it grew and through which op (the largest
//! amplified receiver, else the record of the largest difference: [`text::answer`]). A record
//! without sketches (an older trace, a device tensor, a tensor too large to hash) is counted as
//! not judged. Records with no counterpart (another op decomposition in another version) are
//! left out of the classification. [`growth`](NoiseClassification::growth) gives, per step, the
//! records, how many differ, and the largest relative difference and ULP distance among them.

use super::sketch::{self, Sketch};
use super::TraceEntry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

mod bounds;
pub mod text;
mod verdict;

pub use bounds::{
    argument_difference, arguments, reduction_length, threshold, GROWTH_ALLOWANCE, MAX_THRESHOLD,
    NOISE_FACTOR,
};

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

/// Where one differing record stands: within noise, amplified, beyond noise or not judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecordNoise {
    /// Where: `step 0, rank 0, aten::mm (call 3 of aten::mm) in module Net.fc1 (backward), t.py:9`.
    pub at: String,
    /// `within-noise`, `amplified` (a receiver past its allowance only because its inputs
    /// already differ: not a change), `beyond-noise` or `not-judged`.
    pub judgement: String,
    /// Its relative difference, when sketches tell it.
    pub rel: Option<f64>,
    /// The difference it was allowed (the threshold, or the allowance for growth).
    pub allowed: Option<f64>,
    /// Why, in words.
    pub why: String,
}

/// How two traces differ: within rounding noise or beyond it (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoiseClassification {
    /// `within-noise` (every difference starts at an origin within noise, and every record
    /// judged is within noise or amplified), `beyond-noise`, or `not-judged` (no differing
    /// record could be judged, for want of sketches, or no origin: the difference entered
    /// between traced records, by an amount none measured).
    pub classification: String,
    /// The first record where the traces differ and their inputs matched, judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<RecordNoise>,
    /// The answer: the first record beyond noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_beyond_noise: Option<RecordNoise>,
    /// The largest relative difference of any record (over the records up to the first beyond
    /// noise when there is one, then every record).
    pub largest_rel: Option<f64>,
    /// Where it was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_at: Option<String>,
    /// The largest relative difference of an origin (an op of identical inputs, not in place)
    /// judged: where the differences start, before any growth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_origin_rel: Option<f64>,
    /// Records with a counterpart whose results differ.
    pub differing: usize,
    /// Of those, how many could not be judged (no sketches; integer results downstream).
    pub not_judged: usize,
    /// Of the differing records, the receivers judged `amplified` (past their allowance only
    /// because their inputs already differ).
    #[serde(default)]
    pub amplified: usize,
    /// The amplified receiver of the largest relative difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_amplified: Option<RecordNoise>,
    /// Per step: records, differing records, largest relative difference and ULP distance.
    #[serde(skip)]
    pub growth: Vec<StepGrowth>,
    /// Whether the traces are `--trace modules` traces: their records are counted as records,
    /// not op calls ([`text::answer`]).
    #[serde(skip)]
    pub modules: bool,
    /// Whether a record with no counterpart came before the first that differs: a difference
    /// with no origin may have started there ([`text::answer`]).
    #[serde(skip)]
    pub unaligned: bool,
}

/// An fp64 replay of one record's op on each side's own captured inputs
/// ([`super::replay`]), for [`classify_noise_with`]: whether that op's own step is beyond
/// noise.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnStep {
    /// The record's position in the first trace.
    pub index: usize,
    /// Whether a side's output is beyond noise from the float64 result on its own inputs.
    pub beyond: bool,
    /// The replay's verdict (`both within noise; A is closer`).
    pub verdict: String,
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

/// Classifies how two program traces differ (see the module docs): the records are aligned as
/// [`super::first_divergence`] aligns them.
pub fn classify_noise(a: &[TraceEntry], b: &[TraceEntry]) -> NoiseClassification {
    classify_noise_with(a, b, None)
}

/// [`classify_noise`], with the fp64 replay `own` of one record: a receiver whose own step is
/// beyond noise is beyond noise (an origin is judged by its difference whatever the replay says).
pub fn classify_noise_with(
    a: &[TraceEntry],
    b: &[TraceEntry],
    own: Option<&OwnStep>,
) -> NoiseClassification {
    let (ia, la) = (super::identities(a), super::alignments(a)); // the messages', the index's
    let lb = super::alignments(b);
    let index = super::streams::aligned_index(b, &lb);
    // A call only `b` makes, before the counterpart of the first record that differs.
    let extra = super::streams::first_extra(a, &la, b, &lb);
    let mut j = NoiseClassification {
        modules: TraceEntry::is_module_trace(a),
        ..NoiseClassification::default()
    };
    let mut steps: std::collections::BTreeMap<u64, StepGrowth> = Default::default();
    let mut seen: Seen = Default::default();
    let mut so_far = 0f64;
    let mut differs = vec![false; a.len()];
    let mut ranks_differing = std::collections::HashSet::new();
    for (pos, (x, (&n, &l))) in a.iter().zip(ia.iter().zip(&la)).enumerate() {
        let Some(&k) = index.get(&(x.aligned(), l)) else {
            j.unaligned |= j.differing == 0;
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
        j.unaligned |= j.differing == 0 && extra.is_some_and(|e| e < k);
        j.differing += 1;
        differs[pos] = true;
        let (rel, discrete, unknown) = difference(x, y, g);
        if let Some(r) = rel {
            g.max_rel = Some(g.max_rel.map_or(r, |m| m.max(r)));
            if j.largest_rel.is_none_or(|m| r > m) {
                j.largest_rel = Some(r);
                j.largest_at = Some(x.describe(n + 1));
            }
        }
        if j.first_beyond_noise.is_none() {
            let grown = input_difference(&seen, x, y).unwrap_or(0.0).max(so_far);
            let mine = own.filter(|o| o.index == pos);
            let upstream = match x.op.as_str() {
                "parameter grad" => ranks_differing.contains(&x.rank),
                _ => a_callee_differs(a, pos, &differs),
            };
            let v = verdict::record_noise(x, y, n, rel, (discrete, unknown, upstream), grown, mine);
            let origin = x.inputs == y.inputs && !upstream && !x.hides_read;
            if let Some(r) = rel.filter(|_| origin) {
                j.largest_origin_rel = Some(j.largest_origin_rel.map_or(r, |m| m.max(r)));
            }
            count(&mut j, v, origin);
            so_far = so_far.max(rel.unwrap_or(0.0));
        }
        remember(&mut seen, x, y);
        if x.op != "parameter grad" {
            // (a gradient's sibling gradients do not depend on it)
            ranks_differing.insert(x.rank);
        }
    }
    j.growth = steps.into_values().collect();
    // No origin: the difference entered between traced records, by an amount none measured.
    let unmeasured = j.differing > 0 && (j.not_judged == j.differing || j.origin.is_none());
    j.classification = match (&j.first_beyond_noise, unmeasured) {
        (Some(_), _) => "beyond-noise",
        (None, true) => "not-judged",
        _ => "within-noise",
    }
    .into();
    j
}

/// How the results of a differing record `x` differ from its counterpart `y`'s: the largest
/// relative difference among those measured, whether an integer result differs (or the
/// results differ in number), and whether a result has no sketch. Their ULPs go into `g`.
fn difference(x: &TraceEntry, y: &TraceEntry, g: &mut StepGrowth) -> (Option<f64>, bool, bool) {
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
    (rel, discrete, unknown)
}

/// Counts the verdict `v` on a record into `j` (an `origin` record reads the same inputs on
/// both sides): records not judged, amplified ones (the largest kept), the first origin and
/// the first record beyond noise.
fn count(j: &mut NoiseClassification, v: RecordNoise, origin: bool) {
    match v.judgement.as_str() {
        "not-judged" => j.not_judged += 1,
        "amplified" => {
            j.amplified += 1;
            let m = j.largest_amplified.as_ref().and_then(|v| v.rel);
            if m.is_none_or(|m| v.rel.is_some_and(|r| r > m)) {
                j.largest_amplified = Some(v.clone());
            }
        }
        _ => {}
    }
    if j.origin.is_none() && origin {
        j.origin = Some(v.clone());
    }
    if v.judgement == "beyond-noise" {
        j.first_beyond_noise = Some(v);
    }
}

/// Whether module record `a[pos]` called a module whose record differs (`differs`, by
/// position): the module records of its stream, step and phase just before it that its module
/// encloses, written as its callees returned, and the other records among them (a compiled
/// region's) made in it. A module's record lists its own state and arguments, not its
/// callees', so its output then differs whatever its inputs: a receiver. With the records'
/// call numbers (`entered`, record version 7) its callees are the module records just before
/// it whose calls began after its own (written between its call's start and end, in its
/// thread); without them, those below its path (a callee named by another path, a module
/// shared with another parent, then ends the search).
fn a_callee_differs(a: &[TraceEntry], pos: usize, differs: &[bool]) -> bool {
    let x = &a[pos];
    if x.op != "module output" {
        return false;
    }
    for k in (0..pos).rev() {
        let e = &a[k];
        if (e.rank, &e.thread) != (x.rank, &x.thread) {
            continue; // another thread's stream, interleaved
        }
        if (e.step, &e.phase) != (x.step, &x.phase) {
            return false;
        }
        let callee = match e.op == x.op {
            true => super::streams::encloses(x, e),
            false => e.module == x.module || super::streams::is_below(&e.module, &x.module),
        };
        if e.op != x.op && !callee {
            continue;
        }
        if !callee {
            return false; // before the call: another module's, or an earlier call's
        }
        if differs[k] {
            return true;
        }
    }
    false
}

/// Whether `op` writes a tensor in place (`aten::mul_.Tensor`, `aten::_foreach_add_.List`).
/// Where its record does not show the written tensor's value before the op, which may already
/// differ ([`TraceEntry::hides_read`]), such an op is judged as downstream.
pub fn in_place(op: &str) -> bool {
    let name = op.split('.').next().unwrap_or(op);
    name.ends_with('_') && !name.ends_with("__")
}

#[cfg(test)]
#[path = "noise_tests.rs"]
mod tests;
