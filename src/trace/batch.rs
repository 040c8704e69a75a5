//! The first batch-variant op: `bitexact run --vary batch=A,B --trace ops` runs a program at
//! batch size A and at batch size B (a multiple of A, n = B/A) and names the first op whose
//! result for some request differs between the two while its inputs for that request matched.
//!
//! Request r is in call `r / b` of a run at batch size b, at row `r % b`. The larger-batch run
//! traces with `$BITEXACT_TRACE_ROWS` = n (`python/bitexact/_trace/digest.py`): a tensor whose
//! first dimension is a multiple of n is labelled by the digests of its n row slices,
//! `f32[8,512]/8:<d1>,...,<d8>` ([`Label`], [`parse_label`]), and slice s of its call q holds
//! requests `q*B + s*A ..`, which the smaller-batch run made in its call `q*n + s`, whole
//! (`f32[1,512]:<d>`). So ([`first_variant`]):
//!
//! - records are aligned by identity as in [`super::first_divergence`] (rank, thread, step,
//!   phase, module, op: [`super::streams::Key`]), within calls of the program's batch function:
//!   the first op with sliced tensors that the two runs call a different number of times marks
//!   where each call begins (per rank, thread and step), in both runs. The i-th record of a key
//!   in the large run's call q is compared, slice s, with the i-th record of that key in the
//!   small run's call `q*n + s`, s = 0..n; when that call has no such record (an op one batch
//!   size makes and the other does not: a copy at one size that is a view at the other) it is
//!   not comparable. An op called as often in both runs (model set-up, weight loading) does not
//!   depend on the batch: occurrence j against occurrence j;
//! - slice s of a sliced label compares with the small run's whole label of the slice's shape
//!   (`[D0/n, ...]`, same dtype); an input that is not sliced (a parameter) compares whole with
//!   a small-run label of the same shape; anything else is not comparable: a result that does
//!   not scale with the batch (a reduction over it differs by design), a `:-` label (not
//!   hashed), a call with differing counts of tensors, and every record of a per-batch call
//!   with no sliced tensor (a last partial batch, arithmetic on batch reductions);
//! - the first record in the large run's order that has a comparable differing tensor is the
//!   answer: with every comparable input identical, the origin (`inputs_matched`, the op is
//!   batch-variant); with an input that already differed, a receiver. Records of the small run
//!   past what the large run covers (more requests, a last partial batch, or a run stopped
//!   early) are not compared.

use super::streams::{identities, Key};
use super::{Divergence, TraceEntry};
use std::collections::HashMap;
use std::fmt;

/// The digests a tensor label holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digests<'a> {
    /// `dtype[shape]:<digest>`: the whole tensor's.
    Whole(&'a str),
    /// `dtype[shape]/n:<d1>,...,<dn>`: its n row slices', in order.
    Rows(Vec<&'a str>),
    /// `dtype[shape]:-`: not hashed (too large, scratch memory, a meta tensor).
    Unhashed,
}

/// One tensor label of a program trace record (`f32[2,3]:<digest>`), parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label<'a> {
    /// The dtype's name (`f32`).
    pub dtype: &'a str,
    /// The tensor's whole shape (a sliced label's too).
    pub shape: Vec<usize>,
    /// Its digests.
    pub digests: Digests<'a>,
}

impl<'a> Label<'a> {
    /// The rows per slice of a sliced label (`D0 / n`), `None` for other labels.
    pub fn slice_rows(&self) -> Option<usize> {
        match &self.digests {
            Digests::Rows(d) if !d.is_empty() => Some(self.shape.first()? / d.len()),
            _ => None,
        }
    }
}

impl fmt::Display for Label<'_> {
    /// The label as the tracer writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(","))?;
        match &self.digests {
            Digests::Whole(d) => write!(f, ":{d}"),
            Digests::Rows(d) => write!(f, "/{}:{}", d.len(), d.join(",")),
            Digests::Unhashed => f.write_str(":-"),
        }
    }
}

/// Parses a tensor label (`f32[8,4]:<d>`, `f32[8,4]/2:<d1>,<d2>`, `f32[]:-`); `None` for
/// anything else, including a sliced label whose digest count is not its n or whose first
/// dimension is not a positive multiple of n.
pub fn parse_label(s: &str) -> Option<Label<'_>> {
    let (head, tail) = s.split_once(':')?;
    let (dtype, rest) = head.split_once('[')?;
    let (dims, after) = rest.split_once(']')?;
    if dtype.is_empty() || dtype.contains([']', '/', ',', ';']) {
        return None;
    }
    let shape = if dims.is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| d.parse().ok())
            .collect::<Option<Vec<usize>>>()?
    };
    let digest = |d: &str| !d.is_empty() && d != "-" && !d.contains([',', ';', ':']);
    let digests = if after.is_empty() {
        match tail {
            "-" => Digests::Unhashed,
            d if digest(d) => Digests::Whole(d),
            _ => return None,
        }
    } else {
        let n: usize = after.strip_prefix('/')?.parse().ok()?;
        let d: Vec<&str> = tail.split(',').collect();
        let d0 = *shape.first()?;
        if n == 0 || d.len() != n || d0 < n || !d0.is_multiple_of(n) || !d.iter().all(|x| digest(x))
        {
            return None;
        }
        Digests::Rows(d)
    };
    Some(Label {
        dtype,
        shape,
        digests,
    })
}

/// The results of a record (`output`, `;`-separated labels; empty: none).
fn results(output: &str) -> Vec<&str> {
    if output.is_empty() {
        Vec::new()
    } else {
        output.split(';').collect()
    }
}

/// The tensors of one record, parsed (`None`: a label that does not parse).
struct Parsed<'a> {
    ins: Vec<Option<Label<'a>>>,
    outs: Vec<Option<Label<'a>>>,
}

impl<'a> Parsed<'a> {
    fn of(e: &'a TraceEntry) -> Self {
        Parsed {
            ins: e.inputs.iter().map(|l| parse_label(l)).collect(),
            outs: results(&e.output).into_iter().map(parse_label).collect(),
        }
    }

    /// Whether any of its tensors is labelled by row slices.
    fn sliced(&self) -> bool {
        let rows = |l: &Option<Label>| l.as_ref().is_some_and(|l| l.slice_rows().is_some());
        self.ins.iter().chain(&self.outs).any(rows)
    }
}

/// Whether the large run's `large` (for slice `s`, `None`: a call that does not depend on the
/// batch, compared whole only) equals the small run's `small`; `None`: not comparable.
fn same(large: &Option<Label>, small: &Option<Label>, s: Option<usize>) -> Option<bool> {
    let (l, m) = (large.as_ref()?, small.as_ref()?);
    let Digests::Whole(x) = m.digests else {
        return None;
    };
    if l.dtype != m.dtype {
        return None;
    }
    match (&l.digests, s) {
        (Digests::Whole(y), _) => (l.shape == m.shape).then(|| *y == x),
        (Digests::Rows(d), Some(s)) => {
            let mut shape = l.shape.clone();
            shape[0] = l.slice_rows()?;
            (shape == m.shape).then(|| d.get(s) == Some(&x))
        }
        _ => None,
    }
}

/// Whether one large-run record (for slice `s`) is invariant to the batch against its
/// small-run counterpart: the same, varying because its inputs already vary, or where the
/// variance starts.
enum Invariance {
    /// Nothing comparable differs.
    Same,
    /// These inputs already differ.
    Received(Vec<usize>),
    /// Every comparable input matches and a comparable result differs.
    Origin,
}

/// How the large-run record `x` (slice `s`) compares with its small-run counterpart `y`.
fn invariance(x: &Parsed, y: &TraceEntry, s: Option<usize>) -> Invariance {
    let y = Parsed::of(y);
    if x.ins.len() == y.ins.len() {
        let differ: Vec<usize> = (0..x.ins.len())
            .filter(|&i| same(&x.ins[i], &y.ins[i], s) == Some(false))
            .collect();
        if !differ.is_empty() {
            return Invariance::Received(differ);
        }
    }
    // In a batch call a result that is not sliced does not scale with the batch (a reduction
    // over it): not comparable.
    let whole_ok =
        |l: &Option<Label>| s.is_none() || l.as_ref().is_some_and(|l| l.slice_rows().is_some());
    if x.outs.len() == y.outs.len()
        && (0..x.outs.len())
            .any(|i| whole_ok(&x.outs[i]) && same(&x.outs[i], &y.outs[i], s) == Some(false))
    {
        return Invariance::Origin;
    }
    Invariance::Same
}

/// How many records of each key `trace` has.
fn counts(trace: &[TraceEntry]) -> HashMap<Key<'_>, usize> {
    let mut c: HashMap<Key, usize> = HashMap::new();
    trace
        .iter()
        .for_each(|e| *c.entry(e.key()).or_default() += 1);
    c
}

/// The first op whose result for some request differs between the smaller-batch run `small`
/// (whole results) and the larger-batch run `large` (row-sliced labels, `rows` = n = B/A),
/// `sizes` = [A, B]; `None` when everything comparable matches (see the module docs for the
/// alignment and what is comparable). `call` is the large run's record's position.
pub fn first_variant(
    small: &[TraceEntry],
    large: &[TraceEntry],
    rows: usize,
    sizes: [usize; 2],
) -> Option<Divergence> {
    let rows = rows.max(1);
    let (is, il) = (identities(small), identities(large));
    let index: HashMap<(Key, usize), usize> = small
        .iter()
        .zip(&is)
        .enumerate()
        .map(|(t, (e, &n))| ((e.key(), n), t))
        .collect();
    let (cs, cl) = (counts(small), counts(large));
    let parsed: Vec<Parsed> = large.iter().map(Parsed::of).collect();
    // An op with sliced tensors that the two runs call a different number of times runs per
    // call of the program's batch function; the first such op of each (rank, thread, step)
    // marks where each call begins, in both runs.
    let per_batch = |x: &TraceEntry, p: &Parsed| {
        p.sliced()
            && cs
                .get(&x.key())
                .is_some_and(|&n| n > 0 && n != cl[&x.key()])
    };
    let mut markers: HashMap<Group, Key> = HashMap::new();
    for (x, p) in large.iter().zip(&parsed) {
        if per_batch(x, p) {
            markers.entry(group(x)).or_insert(x.key());
        }
    }
    let small_at: HashMap<(Key, usize, usize), usize> = calls(small, &markers)
        .into_iter()
        .enumerate()
        .filter_map(|(t, place)| place.map(|(call, i)| ((small[t].key(), call, i), t)))
        .collect();
    let large_places = calls(large, &markers);
    let [a, b] = sizes;
    for (((x, &j), p), place) in large.iter().zip(&il).zip(&parsed).zip(large_places) {
        let key = x.key();
        let at = x.describe(j + 1);
        if cl[&key] == cs.get(&key).copied().unwrap_or(0) {
            // Called as often in both runs: does not depend on the batch.
            if let Some(&t) = index.get(&(key, j)) {
                match invariance(p, &small[t], None) {
                    Invariance::Same => {}
                    Invariance::Received(which) => {
                        return Some(received(x, &at, &which, None, sizes))
                    }
                    Invariance::Origin => return Some(origin(x, &at, None, sizes)),
                }
            }
            continue;
        }
        let Some((q, i)) = place.filter(|_| p.sliced()) else {
            continue; // outside the batch calls, or no per-request tensor
        };
        for s in 0..rows {
            // A call of the smaller run that lacks this op (a view at one batch size, a copy
            // at the other) is not comparable here, not control flow.
            let Some(&t) = small_at.get(&(key, q * rows + s, i)) else {
                continue;
            };
            let request = q * b + s * a;
            match invariance(p, &small[t], Some(s)) {
                Invariance::Same => {}
                Invariance::Received(which) => {
                    return Some(received(x, &at, &which, Some(request), sizes))
                }
                Invariance::Origin => return Some(origin(x, &at, Some(request), sizes)),
            }
        }
    }
    None
}

/// The records a batch call belongs to: (rank, thread, step).
type Group<'a> = (u64, &'a str, u64);

fn group(e: &TraceEntry) -> Group<'_> {
    (e.rank, &e.thread, e.step)
}

/// Each record's place in the batch calls of its group: (call, its occurrence among the
/// records of its key in that call); `None` before the group's first call (or in a group
/// without a marker). A call begins at each record of the group's marker key.
fn calls<'a>(
    trace: &'a [TraceEntry],
    markers: &HashMap<Group<'a>, Key<'a>>,
) -> Vec<Option<(usize, usize)>> {
    let mut call: HashMap<Group, usize> = HashMap::new();
    let mut seen: HashMap<Key, (usize, usize)> = HashMap::new(); // key → (call, count)
    trace
        .iter()
        .map(|e| {
            let g = group(e);
            let marker = markers.get(&g)?;
            if e.key() == *marker {
                call.entry(g).and_modify(|c| *c += 1).or_insert(0);
            }
            let c = *call.get(&g)?;
            let n = seen.entry(e.key()).or_insert((c, 0));
            if n.0 != c {
                *n = (c, 0);
            }
            n.1 += 1;
            Some((c, n.1 - 1))
        })
        .collect()
}

/// `… for request R` when the call depends on the batch.
fn for_request(request: Option<usize>) -> String {
    request.map_or(String::new(), |r| format!(" for request {r}"))
}

fn origin(x: &TraceEntry, at: &str, request: Option<usize>, [a, b]: [usize; 2]) -> Divergence {
    let whole = if request.is_none() {
        ", in a call made alike at every batch size"
    } else {
        ""
    };
    Divergence {
        call: x.call,
        op: x.op.clone(),
        inputs_matched: true,
        explanation: format!(
            "first batch-variant op: {at} — inputs identical{}, output differs (batch {a} vs {b}){whole}",
            for_request(request)
        ),
        ..Divergence::default()
    }
}

fn received(
    x: &TraceEntry,
    at: &str,
    which: &[usize],
    request: Option<usize>,
    [a, b]: [usize; 2],
) -> Divergence {
    let which: Vec<String> = which.iter().map(|i| format!("input {i}")).collect();
    Divergence {
        call: x.call,
        op: x.op.clone(),
        inputs_matched: false,
        explanation: format!(
            "{at} received a difference: inputs already differ{} (batch {a} vs {b}: {}) \
             although every earlier comparable output matched",
            for_request(request),
            which.join(", ")
        ),
        ..Divergence::default()
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
