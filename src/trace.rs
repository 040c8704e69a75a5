//! Op traces: the digest of every op's inputs and output, in call order, so that two runs that
//! differ can be compared op by op and the first op whose output differs while its inputs
//! matched can be named (first-divergence localization).
//!
//! One record type ([`TraceEntry`](crate::trace::TraceEntry)) and one localizer
//! ([`first_divergence`](crate::trace::first_divergence)) serve built-in
//! cases (recorded by `Ctx::record`) and programs (`bitexact run --trace ops`: the Python
//! tracer's `.bitexact-trace-rank<R>.jsonl`, read by [`program::read_jsonl`](crate::trace::program::read_jsonl)). Records are
//! aligned by identity, not position: (rank, thread, step, phase, module, op, the call's number
//! among calls of that op there), so one extra op does not misalign the rest, and how a
//! program's threads interleave does not either ([`streams`](crate::trace::streams)).
//!
//! Trace digests are SHA-256 over the values' little-endian bytes (no header: the op and call
//! index identify them). Traces are JSON-serialisable, so they can be saved with
//! `bitexact report --trace FILE` and compared across processes and machines with
//! `bitexact diff-trace A B`.

use serde::{Deserialize, Serialize};

pub use arg::{trace_digest, TraceArg};
pub use own::Own;
use words::{
    generator_differs, nondeterministic, unseen_input, NONDETERMINISTIC_BACKWARD,
    NONDETERMINISTIC_MODULE, NONDETERMINISTIC_RECOMPUTED,
};
pub use words::{ARGUMENTS_DIFFER, GENERATOR_DIFFERS, NONDETERMINISTIC, SEEDED_DIFFERENTLY};

/// One op call in a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceEntry {
    /// Position of the call in the run (0-based).
    pub call: usize,
    /// Op family, e.g. `matmul`.
    pub op: String,
    /// Implementation that ran.
    pub algorithm: String,
    /// Digests of the inputs, in argument order.
    pub inputs: Vec<String>,
    /// Digest of the output (programs: every result, `dtype[shape]:digest`, `;`-separated).
    pub output: String,
    /// Step the call belongs to (programs: optimizer steps completed before it; cases: 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step: u64,
    /// Rank of the process that made the call (`RANK`; 0 alone).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rank: u64,
    /// The program thread that made the call (`ema_loop#0`), empty for the thread that
    /// started tracing and for cases: each thread is its own stream ([`streams`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thread: String,
    /// `forward`, `backward` or `recompute` (a module forward run again by a backward:
    /// activation checkpointing) for programs, empty for cases.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The innermost module running (`Net.encoder.fc1`), empty outside modules and for cases.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub module: String,
    /// The program's own source line that led to the call (`train.py:88`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The op's non-tensor arguments, `name=value` comma-separated (`eps=1e-05`), empty when
    /// it has none or the record is older ([`noise::arguments`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub args: String,
    /// A `--trace modules` module record: which of its first [`inputs`](Self::inputs) are the
    /// module's own parameters and persistent buffers (the rest are its arguments), by count
    /// (record versions 6 and 7) or by name (8 on); none for other records and before version
    /// 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<Own>,
    /// A `--trace modules` module record: its call's number among its thread's module calls, in
    /// the order they began (a call recorded later with a smaller number enclosed it; one
    /// recorded earlier with a larger number it made, or a call of it made); none for other
    /// records, before record version 7, and for a forward entered before tracing began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entered: Option<usize>,
    /// A `--trace modules` module record: how many of its last [`inputs`](Self::inputs) were
    /// labelled after its forward (its keyword tensor arguments, which torch's global forward
    /// pre-hook is not given; all of them for a forward entered before tracing began), so not
    /// necessarily as it received them; 0 for the rest, and before record version 8.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late: usize,
    /// A float64 sketch of each result, in the order of [`output`](Self::output) (empty text
    /// for a result without one; no sketches in older records): [`sketch`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sketches: Vec<String>,
    /// A random op's generator and its state before the call, `who|digest` (`torch's default
    /// CPU generator|1ccf17250133dec5`; empty for other ops and older records):
    /// `python/bitexact/_trace/generator.py`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generator: String,
    /// A compiled region's record: the kernels its call launched, in order (none in older
    /// traces, or with `BITEXACT_TRACE_KERNELS=0`): [`kernels`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<kernels::Kernel>,
    /// The op read a value its record does not show: the tensor an in-place op wrote, as it
    /// was before, in records before version 5 and for a partial write (`index_put_`)
    /// ([`program::hides_what_it_overwrote`]), or an input recorded by dtype and shape only
    /// (`f32[4]:-`); such an op is judged as downstream of any difference ([`noise`]).
    #[serde(skip)]
    pub hides_read: bool,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl TraceEntry {
    /// Whether this is a `--trace modules` record (`module output`, `parameter grad`): not an
    /// op call, so there is nothing to capture and replay in float64.
    pub fn is_module_record(&self) -> bool {
        matches!(self.op.as_str(), "module output" | "parameter grad")
    }

    /// Whether `trace` is a `--trace modules` trace (it holds module records): counted in
    /// records, not op calls.
    pub fn is_module_trace(trace: &[TraceEntry]) -> bool {
        trace.iter().any(TraceEntry::is_module_record)
    }

    /// The identity a record is aligned by, without its occurrence number.
    fn key(&self) -> streams::Key<'_> {
        (
            self.rank,
            &self.thread,
            self.step,
            &self.phase,
            &self.module,
            &self.op,
        )
    }

    /// What the record is aligned by with another run's, without its occurrence number.
    fn aligned(&self) -> streams::Aligned<'_> {
        (
            self.rank,
            &self.thread,
            self.step,
            &self.phase,
            &self.module,
            streams::aligned_op(&self.op),
        )
    }

    /// `step 3, rank 0, thread ema#0, aten::mm (call 17 of aten::mm) in module enc.fc1
    /// (backward), train.py:88` for program records (no thread for the main one; a
    /// recomputation says so); `--trace modules` records say what they are: `module enc.fc1
    /// (call 2 of enc.fc1) (forward)`, `gradient of enc.fc1.weight (backward)`; `call 4
    /// `matmul`` for a case's.
    fn describe(&self, occurrence: usize) -> String {
        if self.phase.is_empty() && self.module.is_empty() && self.source.is_empty() {
            return format!("call {} `{}`", self.call, self.op);
        }
        let thread = match self.thread.as_str() {
            "" => String::new(),
            t => format!("thread {t}, "),
        };
        let (op, m) = (&self.op, &self.module);
        let mut s = format!("step {}, rank {}, {thread}", self.step, self.rank);
        s.push_str(&match op.as_str() {
            "module output" => format!("module {m} (call {occurrence} of {m})"),
            "parameter grad" if occurrence == 1 => format!("gradient of {m}"),
            "parameter grad" => format!("gradient of {m} (record {occurrence} of it)"),
            _ if m.is_empty() => format!("{op} (call {occurrence} of {op})"),
            _ => format!("{op} (call {occurrence} of {op}) in module {m}"),
        });
        match self.phase.as_str() {
            "" => {}
            "recompute" => s.push_str(" (recomputed in the backward)"),
            p => s.push_str(&format!(" ({p})")),
        }
        if !self.source.is_empty() {
            s.push_str(&format!(", {}", self.source));
        }
        s
    }
}

/// Where two traces first diverge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Distributed runs (traces of several ranks): the rank whose first differing op is named,
    /// the origin when its inputs matched ([`ranks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// Distributed runs: where each other rank first differed (`rank 0 received it through
    /// c10d::allreduce_ at step 0 (backward)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receivers: Vec<String>,
    /// Program traces: how the difference grows, step by step ([`noise::StepGrowth`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub growth: Vec<noise::StepGrowth>,
    /// Program traces: whether the traces differ within rounding noise, and the first record
    /// beyond it ([`noise::classify_noise`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<noise::NoiseClassification>,
    /// The conditions varied between the two runs when the op whose inputs were identical gave
    /// another output ([`Divergence::under`]): the variation, not nondeterminism, changed it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub varied: Vec<crate::vary::Varied>,
    /// A random op of identical inputs whose generator's state differed before the call: the
    /// generator (`torch's default CPU generator`, `Net.noise's torch.Generator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// A compiled region whose inputs were identical and whose output differed: the first
    /// kernel it launched whose inputs were identical and whose output differed
    /// ([`kernels::first_divergent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<kernels::DivergentKernel>,
}

impl Divergence {
    /// The same divergence between two runs made under conditions that differ (`varied`):
    /// an op whose inputs were identical and whose output differs is then said to differ
    /// under them (`inputs identical, output differs at 1 vs 2 threads`), not to be
    /// nondeterministic; a random op whose generator's state differed, to have been seeded
    /// differently in runs made under them (`…, made with seed 0 vs 1`); arguments that
    /// differed, to differ under them (`arguments differ at 1 vs 2 threads: other 1 vs 2`).
    /// Nothing varied, or inputs that differed: unchanged.
    pub fn under(mut self, varied: Vec<crate::vary::Varied>) -> Divergence {
        if varied.is_empty() || !self.inputs_matched {
            return self;
        }
        let words = crate::vary::differ::words(&varied);
        let made = format!("{SEEDED_DIFFERENTLY}, made {words}");
        if self.generator.is_some() {
            self.explanation = self.explanation.replacen(SEEDED_DIFFERENTLY, &made, 1);
        }
        for (old, new) in [
            (
                format!("output differs: {NONDETERMINISTIC}"),
                format!("output differs {words}"),
            ),
            (
                format!("output differs: {NONDETERMINISTIC_MODULE}"),
                format!("output differs {words}"),
            ),
            (
                format!("output differs: {NONDETERMINISTIC_BACKWARD}"),
                format!("output differs {words}"),
            ),
            (
                format!("output differs: {NONDETERMINISTIC_RECOMPUTED}"),
                format!("output differs {words}"),
            ),
            (
                format!("different output — {NONDETERMINISTIC}"),
                format!("different output {words}"),
            ),
            (
                format!("{ARGUMENTS_DIFFER}:"),
                format!("{ARGUMENTS_DIFFER} {words}:"),
            ),
        ] {
            self.explanation = self.explanation.replacen(&old, &new, 1);
        }
        self.varied = varied;
        self
    }
}

use streams::{alignments, identities};
pub use streams::{identity_json, in_place_in_one, parse_identity};

impl Divergence {
    /// The explanation without its verdict, when it has one: `step 0, rank 0, aten::addmm
    /// (call 1 of aten::addmm) in module Sequential.4 (forward), train.py:40` out of
    /// `first divergence: … — inputs identical, output differs: …` (as `differing` words
    /// it) or `first batch-variant op: … — inputs identical for request 0, …`
    /// ([`batch::first_variant`]); other explanations whole.
    pub fn place(&self) -> &str {
        let at = self
            .explanation
            .split(" — ")
            .next()
            .unwrap_or(&self.explanation);
        at.trim_start_matches("first divergence: ")
            .trim_start_matches("first batch-variant op: ")
    }
}

/// Compares two traces and names the first divergence, if any. Traces of several ranks (a
/// distributed run) are compared rank by rank and the origin rank is told apart from the
/// ranks that received the difference ([`ranks::localize`]); one rank's stream is compared
/// by `first_divergence_in`.
///
/// Program traces (records with a phase) also get the noise judgement and the growth series
/// ([`noise::classify_noise`]).
pub fn first_divergence(a: &[TraceEntry], b: &[TraceEntry]) -> Option<Divergence> {
    let mut d = ranks::localize(a, b)?;
    if a.iter().chain(b).any(|e| !e.phase.is_empty()) {
        let mut j = noise::classify_noise(a, b);
        d.growth = std::mem::take(&mut j.growth);
        d.noise = Some(j);
    }
    Some(d)
}

/// The first divergence of one rank: in `a`'s order, the first record whose counterpart in
/// `b` (same rank, thread, step, phase, module, op and occurrence, the op's in-place variant
/// counting as the op: [`streams::aligned_op`]) is missing or differs. A
/// missing counterpart means control flow diverged (said with what `b` does at that position
/// of the same thread's stream); one
/// whose inputs matched is the origin (this op is nondeterministic); one whose inputs already
/// differed received the difference from outside the traced ops. A record of `b` with no
/// counterpart in `a` ([`streams::first_extra`]) is reported where it comes before the
/// counterpart of the first record that differs, or else after `a` is done: either way the
/// answer does not depend on which trace is given first.
fn first_divergence_in(a: &[TraceEntry], b: &[TraceEntry]) -> Option<Divergence> {
    let (ia, ib) = (identities(a), identities(b)); // for the messages
    let (la, lb) = (alignments(a), alignments(b));
    let index = streams::aligned_index(b, &lb);
    let extra = streams::first_extra(a, &la, b, &lb);
    let only_b = |k: usize| streams::only_in_b(a, b, k, ib[k] + 1);
    for (pos, (x, (&n, &l))) in a.iter().zip(ia.iter().zip(&la)).enumerate() {
        let Some(&j) = index.get(&(x.aligned(), l)) else {
            let other = streams::counterpart(a, b, pos)
                .map_or("makes no more op calls".to_string(), |k| {
                    format!("calls {}", b[k].describe(ib[k] + 1))
                });
            return Some(Divergence {
                call: x.call,
                op: x.op.clone(),
                inputs_matched: false,
                explanation: format!(
                    "control flow diverged: run 0 calls {} where the other run {other}",
                    x.describe(n + 1)
                ),
                ..Divergence::default()
            });
        };
        let y = &b[j];
        if x.inputs == y.inputs && x.output == y.output && x.algorithm == y.algorithm {
            continue;
        }
        if let Some(k) = extra.filter(|&k| k < j) {
            return Some(only_b(k));
        }
        let (p, q) = streams::receiver(a, b, (&la, &index), (pos, j));
        return Some(differing(&a[p], &b[q], ia[p] + 1, Some((a, p))));
    }
    extra.map(only_b)
}

/// The divergence at counterparts `x` and `y` (occurrence `occ`) that differ; `within`: the
/// trace `x` is record `pos` of, which names a module record's inputs ([`words::received`]).
fn differing(
    x: &TraceEntry,
    y: &TraceEntry,
    occ: usize,
    within: Option<(&[TraceEntry], usize)>,
) -> Divergence {
    let inputs_matched = x.inputs == y.inputs;
    let program = !x.phase.is_empty();
    let at = x.describe(occ);
    let inner = || kernels::inside(x, y, &at, |x, y, n| differing(x, y, n, None));
    if let Some(d) = (inputs_matched && program).then(inner).flatten() {
        return d;
    }
    let explanation = if inputs_matched && x.algorithm != y.algorithm {
        format!(
            "first divergence at {at}: same inputs, algorithm changed ({} vs {})",
            x.algorithm, y.algorithm
        )
    } else if inputs_matched && program && x.args != y.args {
        // A number the program passed (a learning rate drawn unseeded): not the op's doing.
        format!(
            "first divergence: {at} — inputs identical, {ARGUMENTS_DIFFER}: {}",
            noise::argument_difference(&x.args, &y.args)
        )
    } else if let (true, Some(who)) = (inputs_matched, generator_differs(x, y)) {
        let explanation = format!(
            "first divergence: {at} — inputs identical, {GENERATOR_DIFFERS} ({who}): {SEEDED_DIFFERENTLY}"
        );
        return Divergence {
            call: x.call,
            op: x.op.clone(),
            inputs_matched,
            explanation,
            generator: Some(who),
            ..Divergence::default()
        };
    } else if let (true, Some(why)) = (inputs_matched && program, unseen_input(x)) {
        format!("first divergence: {at} — inputs identical as recorded, output differs: {why}")
    } else if inputs_matched && program && !x.generator.is_empty() {
        format!("first divergence: {at} — inputs and generator state identical, output differs: {NONDETERMINISTIC}")
    } else if inputs_matched && program {
        format!(
            "first divergence: {at} — inputs identical, output differs: {}",
            nondeterministic(x, within.map(|w| w.0))
        )
    } else if inputs_matched {
        format!(
            "first divergence at {at} ({} vs {}): same inputs, different output — {NONDETERMINISTIC}",
            x.algorithm, y.algorithm
        )
    } else {
        words::received(&at, x, y, within)
    };
    Divergence {
        call: x.call,
        op: x.op.clone(),
        inputs_matched,
        explanation,
        ..Divergence::default()
    }
}

pub use file::{diff_files, CaseTraces, TraceFile, MAX_TRACE_FILE_BYTES};

mod arg;
pub mod batch;
mod file;
pub mod kernels;
pub mod noise;
pub mod own;
pub mod program;
pub mod ranks;
pub mod replay;
pub mod sketch;
pub mod streams;
mod words;

#[cfg(test)]
mod module_tests;
#[cfg(test)]
mod tests;
