//! Op families: one semantics, several implementations per backend, picked by [`Ctx::dispatch`].
//!
//! Each op module has an `IMPLS` table of `Impl` values (name, backend, deterministic flag and
//! the function that runs it, of the op's own function type) and the op function that dispatches
//! over it. `catalog` is the registry: every op family with the metadata of its table.
//!
//! Implementation tables are in fixed-choice order: with the benchmark switch off, the first
//! candidate allowed by the deterministic switch runs. The fast nondeterministic variants come
//! first (so `--deterministic off` behaves like a framework's default), deterministic ones after.
//!
//! [`Ctx::dispatch`]: crate::case::Ctx::dispatch

pub mod col_sum;
pub mod copy;
pub mod dropout;
pub mod layer_norm;
pub mod matmul;
pub mod philox;
pub mod reduce_sum;
pub mod scatter_add;
pub mod softmax;

use crate::case::{Algo, Impl};

/// Every op family with the metadata of its implementations (in fixed-choice order), for
/// `bitexact list`, the cost-of-determinism table and tests.
pub fn catalog() -> Vec<(&'static str, Vec<Algo>)> {
    vec![
        ("reduce_sum", algos(reduce_sum::IMPLS)),
        ("matmul", algos(matmul::IMPLS)),
        ("scatter_add", algos(scatter_add::IMPLS)),
        ("softmax", algos(softmax::IMPLS)),
        ("layer_norm", algos(layer_norm::IMPLS)),
        ("dropout", algos(dropout::IMPLS)),
        ("col_sum", algos(col_sum::IMPLS)),
        ("philox", algos(philox::IMPLS)),
    ]
}

/// The metadata of an implementation table.
pub fn algos<F>(impls: &[Impl<F>]) -> Vec<Algo> {
    impls.iter().map(Impl::algo).collect()
}

/// Checks that a buffer has the length its shape implies; the error names op and argument.
pub fn expect_len(op: &str, arg: &str, got: usize, want: usize) -> anyhow::Result<()> {
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
