//! A user-defined case and its tests, written as a crate that uses bitexact (as a
//! dev-dependency) would write them.
//!
//! `cargo run --example user_case` prints the verdict; `cargo test` runs the tests below (the
//! example is declared with `test = true` in `Cargo.toml`). The snapshot lives in
//! `snapshots/cpu-<arch>/example.my_kernel@seed0-det.snap`; after an intended change to the
//! arithmetic, accept the new digests with `cargo insta review` or
//! `cargo run -- snapshot review --accept`.

use bitexact::{Backend, Case, Ctx, Outputs, Tensor};

/// `y = relu(x * w) + x / 2` over 4096 inputs drawn from the run's seed, and the total of `y`
/// summed in fixed 256-element chunks (a fixed order: the same bits on every run).
pub struct MyKernel;

impl Case for MyKernel {
    fn name(&self) -> String {
        "example/my_kernel".into()
    }

    fn backends(&self) -> Vec<Backend> {
        vec![Backend::Cpu]
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<Outputs> {
        let x = ctx.stream("x").uniform(4096);
        let w = ctx.stream("w").uniform(4096);
        let y: Vec<f32> = x
            .iter()
            .zip(&w)
            .map(|(a, b)| (a * b - 0.25).max(0.0) + 0.5 * a)
            .collect();
        let total: f32 = y.chunks(256).map(|c| c.iter().sum::<f32>()).sum();
        Ok(Outputs::from([
            ("y".to_string(), Tensor::from_slice(&[4096], &y)),
            ("total".to_string(), Tensor::scalar(total)),
        ]))
    }
}

fn main() {
    let r = bitexact::check(&MyKernel).runs(3).report();
    println!(
        "{}: {} over {} runs, run digest {}",
        r.name,
        r.verdict.name(),
        r.runs,
        r.run_digests.first().map_or("-", String::as_str)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn my_kernel_is_deterministic() {
        bitexact::check(&MyKernel).runs(3).assert_deterministic();
    }

    #[test]
    fn my_kernel_matches_its_snapshot() {
        bitexact::check(&MyKernel).assert_snapshot();
    }
}
