//! Op families: one semantics, several implementations per backend, picked by [`Ctx::dispatch`].
//!
//! Implementation lists are in fixed-choice order: with the benchmark switch off, the first
//! candidate allowed by the deterministic switch runs. The fast nondeterministic variants come
//! first (so `--deterministic off` behaves like a framework's default), deterministic ones after.
//!
//! [`Ctx::dispatch`]: crate::case::Ctx::dispatch

pub mod col_sum;
pub mod dropout;
pub mod layer_norm;
pub mod matmul;
pub mod philox;
pub mod reduce_sum;
pub mod scatter_add;
pub mod softmax;

use crate::case::Algo;

/// Every op family with its implementations, for `bitexact list` and the cost table.
pub fn catalog() -> Vec<(&'static str, &'static [Algo])> {
    vec![
        ("reduce_sum", reduce_sum::ALGOS),
        ("matmul", matmul::ALGOS),
        ("scatter_add", scatter_add::ALGOS),
        ("softmax", softmax::ALGOS),
        ("layer_norm", layer_norm::ALGOS),
        ("dropout", dropout::ALGOS),
        ("col_sum", col_sum::ALGOS),
        ("philox", philox::ALGOS),
    ]
}

/// Checks that a buffer has the length its shape implies; the error names op and argument.
pub fn check_len(op: &str, arg: &str, got: usize, want: usize) -> anyhow::Result<()> {
    if got != want {
        anyhow::bail!("`{op}`: `{arg}` has {got} elements, its shape needs {want}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::backend::Backend;

    #[test]
    fn every_op_has_a_deterministic_implementation_on_each_backend() {
        for (op, algos) in super::catalog() {
            for b in [Backend::Cpu, Backend::Cuda] {
                assert!(
                    algos.iter().any(|a| a.backend == b && a.deterministic),
                    "{op} has no deterministic {b} implementation"
                );
            }
            let names: std::collections::BTreeSet<&str> = algos.iter().map(|a| a.name).collect();
            assert_eq!(
                names.len(),
                algos.len(),
                "{op}: duplicate implementation names"
            );
        }
    }

    #[test]
    fn ops_with_nondeterministic_cpu_variants_have_them_on_cuda_too() {
        for (op, algos) in super::catalog() {
            let has = |b: Backend| algos.iter().any(|a| a.backend == b && !a.deterministic);
            assert_eq!(has(Backend::Cpu), has(Backend::Cuda), "{op}");
        }
    }
}
