//! The words of a noise classification ([`super::classify_noise`]), as `bitexact diff-trace`
//! prints them: where the origin stands, the answer, and the growth per step.

use super::{NoiseClassification, StepGrowth};

/// The text of a noise classification: where the origin stands (unless it is the answer), then
/// the answer ([`answer`]).
pub fn lines(j: &NoiseClassification, growth: &[StepGrowth]) -> Vec<String> {
    let mut out = Vec::new();
    let beyond = j.first_beyond_noise.as_ref();
    if let Some(o) = j
        .origin
        .as_ref()
        .filter(|o| beyond.is_none_or(|b| b.at != o.at))
    {
        out.push(format!(
            "origin {}: {}",
            o.judgement.replace('-', " "),
            o.why
        ));
    }
    out.push(answer(j, compared(growth)));
    out
}

/// Where a difference with no origin entered, in a `--trace modules` trace: its records
/// leave out what ran between module calls, and a buffer written by a module's own forward,
/// which they show only as the next call's input.
const MODULES_BETWEEN: &str = "between traced records (code between traced module calls, \
     or a module's forward updating its own buffer, which its records show only as the next \
     call's input)";

/// How many records with a counterpart in both traces `growth` counts, step by step.
pub fn compared(growth: &[StepGrowth]) -> usize {
    growth.iter().map(|g| g.records).sum()
}

/// The answer of a classification whose records with a counterpart number `compared`: the first
/// record beyond noise; else, when every difference starts at an origin within noise, how far
/// it grew and through which op (the largest amplified receiver, else the record of the
/// largest difference): `within noise: every difference starts at ops within rounding noise
/// (first: …); it grew to 7.5e-3 through … (amplified, not a change)`.
pub fn answer(j: &NoiseClassification, compared: usize) -> String {
    let unit = match j.modules {
        true => "record",
        false => "op call",
    };
    if j.differing == 0 {
        return format!(
            "no noise to judge: every one of the {compared} {unit}s with a counterpart in both \
             traces is identical"
        );
    }
    if let Some(b) = &j.first_beyond_noise {
        return format!("beyond noise: first at {} — {}", b.at, b.why);
    }
    if j.classification == "not-judged" && j.not_judged == j.differing {
        return format!(
            "noise not judged: none of the {} differing records has sketches (records of an \
             older bitexact, or tensors not on the host)",
            j.differing
        );
    }
    let Some(o) = &j.origin else {
        let entered = match (j.unaligned, j.modules) {
            (true, _) => {
                "where the traces stop lining up (records with no counterpart come before \
                     the first that differs: another decomposition of an op, or control flow) \
                     or between traced records"
            }
            (false, false) => "between traced records (code they do not cover)",
            // A module record takes its buffers as inputs before its forward: a forward that
            // updates one (BatchNorm's running statistics) shows it only at the next call.
            (false, true) => MODULES_BETWEEN,
        };
        return format!(
            "noise not judged: no differing record had identical inputs, so the difference \
             entered {entered}, by an amount none of them measured; {} {unit}s differ",
            j.differing
        );
    };
    let starts = format!(
        "every difference starts at {} within rounding noise (first: {})",
        if j.modules { "records" } else { "ops" },
        o.at
    );
    let grew = match (j.largest_rel, &j.largest_at) {
        (Some(r), Some(at)) if j.largest_origin_rel.is_none_or(|o| r > o) => {
            let through = j.largest_amplified.as_ref().map_or(at, |v| &v.at);
            format!("it grew to {r:.1e} through {through} (amplified, not a change)")
        }
        (Some(r), Some(at)) => {
            format!("it grew no further: largest relative difference {r:.1e} at {at}")
        }
        _ => "no relative difference measured (no sketches)".into(),
    };
    let mut counts = match j.differing {
        1 => format!("1 {unit} differs"),
        n => format!("{n} {unit}s differ"),
    };
    if j.amplified > 0 {
        let their = if j.amplified == 1 { "its" } else { "their" };
        counts.push_str(&format!(
            ", {} amplified past {their} allowance",
            j.amplified
        ));
    }
    if j.not_judged > 0 {
        counts.push_str(&format!(", {} not judged", j.not_judged));
    }
    format!("within noise: {starts}; {grew}; {counts}")
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
