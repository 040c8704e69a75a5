//! The cost of determinism: per op, the time of the fastest deterministic implementation over
//! the fastest nondeterministic one, measured on the op's `kernel/<op>/large` case among the
//! cases the caller passes (an op whose large case is not among them is not measured).

use crate::backend::Backend;
use crate::case::{Case, Ctx};
use crate::controls::Controls;
use crate::harness::{call_case, pool};
use crate::ops;
use crate::outcome::CostRow;
use anyhow::{anyhow, Result};

/// Best time of `op` (seconds inside the op only) over `reps` runs of `case` with `algo` forced.
fn time_algo(
    case: &dyn Case,
    backend: Backend,
    controls: &Controls,
    op: &str,
    algo: &str,
    reps: usize,
) -> Result<f64> {
    let pool = pool(controls.threads)?;
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let mut ctx = Ctx::new(
            backend,
            Controls {
                deterministic: false,
                benchmark: false,
                ..controls.clone()
            },
        );
        ctx.forced.insert(op.into(), algo.into());
        pool.install(|| call_case(case, &mut ctx))?;
        let t = ctx
            .op_seconds
            .get(op)
            .copied()
            .ok_or_else(|| anyhow!("{op} did not run"))?;
        best = best.min(t);
    }
    Ok(best)
}

/// Measures every op that has both kinds of implementation on `backend`, `reps` times each.
pub fn cost_of_determinism(
    cases: &[&dyn Case],
    backend: Backend,
    controls: &Controls,
    reps: usize,
) -> Result<Vec<CostRow>> {
    let mut rows = Vec::new();
    for (op, algos) in ops::catalog() {
        let Some(case) = cases
            .iter()
            .find(|c| c.name() == format!("kernel/{op}/large"))
        else {
            continue;
        };
        let mut best: [Option<(String, f64)>; 2] = [None, None];
        for a in algos.iter().filter(|a| a.backend == backend) {
            let t = time_algo(*case, backend, controls, op, a.name, reps)?;
            let slot = &mut best[a.deterministic as usize];
            if slot.as_ref().is_none_or(|(_, b)| t < *b) {
                *slot = Some((a.name.to_string(), t));
            }
        }
        if let [Some(nd), Some(d)] = best {
            rows.push(CostRow {
                op: op.into(),
                backend,
                ratio: d.1 / nd.1,
                deterministic: d,
                nondeterministic: nd,
            });
        }
    }
    Ok(rows)
}
