//! The verdict on one differing record of two program traces ([`super::classify_noise`]): an
//! origin judged by its own difference, a receiver by the allowance for what it received.

use super::{
    argument_difference, reduction_length, sketch, threshold, OwnStep, RecordNoise, TraceEntry,
    GROWTH_ALLOWANCE, NOISE_FACTOR,
};

/// The verdict on one differing record `x` (occurrence `n`) against its counterpart `y`:
/// `rel` its relative difference, `(discrete, unknown, upstream)` whether an integer result
/// differs, whether a result has no sketch and whether what its record does not list differs
/// (a module it called: [`super::a_callee_differs`]; for a `parameter grad`, made by the whole
/// forward and backward: any earlier differing record of its rank but a gradient), a
/// receiver then, whatever its inputs; `grown` the growth so far, `own` its fp64 replay.
pub(super) fn record_noise(
    x: &TraceEntry,
    y: &TraceEntry,
    n: usize,
    rel: Option<f64>,
    (discrete, unknown, upstream): (bool, bool, bool),
    grown: f64,
    own: Option<&OwnStep>,
) -> RecordNoise {
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
    let mk = |judgement: &str, allowed: Option<f64>, why: String| RecordNoise {
        at: x.describe(n + 1),
        judgement: judgement.into(),
        rel,
        allowed,
        why,
    };
    let same_inputs = x.inputs == y.inputs && !upstream;
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
    if same_inputs && !x.hides_read {
        let why = format!("relative difference {r:.2e}, threshold {}", rule(d, tau));
        let judgement = if r <= tau {
            "within-noise"
        } else {
            "beyond-noise"
        };
        return mk(judgement, Some(tau), why);
    }
    let receives = match (upstream, x.inputs == y.inputs) {
        (true, _) if x.op == "parameter grad" => "an earlier record of its rank already differs",
        (true, _) => "a module it calls already differs",
        (false, true) if x.inputs.iter().any(|l| l.ends_with(":-")) => {
            "an input is recorded by dtype and shape only (not hashed), and may already differ"
        }
        (false, true) => "it writes in place (the value it overwrote is not in its record)",
        (false, false) => "its inputs already differ",
    };
    let (judgement, allowed, why) = received(x, y, (r, tau), (&rule(d, tau), receives), grown, own);
    mk(judgement, Some(allowed), why)
}

/// The verdict's words on a record `x` that receives a difference (`receives` says how: its
/// inputs differ from `y`'s, it writes in place, a module it calls differs), `r` its relative
/// difference, `tau` the threshold `rule` gives, `grown` the growth so far and `own` its fp64
/// replay: within the allowance for what it received, beyond noise (its own step, or its
/// arguments), or amplified. Gives the judgement, the difference allowed, and why.
fn received(
    x: &TraceEntry,
    y: &TraceEntry,
    (r, tau): (f64, f64),
    (rule, receives): (&str, &str),
    grown: f64,
    own: Option<&OwnStep>,
) -> (&'static str, f64, String) {
    let allowed = tau.max(GROWTH_ALLOWANCE * grown);
    let why = format!(
        "relative difference {r:.2e}; {receives}, growth so far {grown:.2e}, allowed max({rule}, \
         {GROWTH_ALLOWANCE} × {grown:.2e}) = {allowed:.2e}"
    );
    let replayed = own.map_or(String::new(), |o| {
        format!("; fp64 replay on each side's own inputs: {}", o.verdict)
    });
    let (judgement, why) = match own {
        Some(o) if o.beyond => (
            "beyond-noise",
            format!("{why}; its own step is beyond noise{replayed}"),
        ),
        _ if r <= allowed => ("within-noise", format!("{why}{replayed}")),
        _ if x.args != y.args => (
            "beyond-noise",
            format!(
                "{why}; its arguments differ: {}",
                argument_difference(&x.args, &y.args)
            ),
        ),
        _ => (
            "amplified",
            format!(
                "{why}; amplified: past the allowance only because the values it reads already \
                 differ, {}{}",
                match x.is_module_record() {
                    true => "its non-tensor arguments not recorded",
                    false => "its arguments match",
                },
                match own {
                    Some(_) => replayed,
                    None => " (no fp64 replay of its own step)".into(),
                }
            ),
        ),
    };
    (judgement, allowed, why)
}
