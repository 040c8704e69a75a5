//! bitexact catches this crate's process-global HashMap-order bug through
//! `check(..).vary(&[Variation::Process])`, and a crashing case becomes an error instead of
//! killing the test binary (`.isolate()`).

use bitexact::{Case, Ctx, Outputs, Result, Tensor, Variation, Verdict};

struct Total;
impl Case for Total {
    fn name(&self) -> String {
        "user_crate/weighted_total".into()
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        let x = ctx.stream("x").uniform(256);
        let y: Vec<f32> = x.iter().map(|&v| user_crate::weighted_total(v)).collect();
        Ok(Outputs::new().with("y", Tensor::from_slice(&[y.len()], &y)))
    }
}

#[test]
fn in_one_process_the_bug_hides() {
    let r = bitexact::check(&Total).runs(4).report();
    assert_eq!(r.verdict, Verdict::Deterministic, "{r:?}");
}

#[test]
fn a_fresh_process_per_run_catches_it_and_blames_process() {
    // With 6 runs, every pair of processes would have to agree by chance for this to pass.
    let r = bitexact::check(&Total)
        .runs(6)
        .vary(&[Variation::Process])
        .report();
    assert_eq!(r.verdict, Verdict::Nondeterministic, "{r:?}");
    let blame = r.blame.expect("blame");
    assert_eq!(blame.broken_by, vec![Variation::Process], "{blame:?}");
    assert!(blame.reproducible_when_fixed);
    println!("CAUGHT {}: {}", r.name, blame.explanation);
    for d in &r.diff {
        println!("CAUGHT {}", d.summary());
    }
}

struct Crashes;
impl Case for Crashes {
    fn name(&self) -> String {
        "user_crate/crashes".into()
    }
    fn run(&self, _ctx: &mut Ctx) -> Result<Outputs> {
        std::process::abort()
    }
}

#[test]
fn a_crashing_case_is_an_error_not_a_dead_test_binary() {
    let r = bitexact::check(&Crashes).isolate().report();
    assert_eq!(r.verdict, Verdict::Error, "{r:?}");
    let msg = r.message.unwrap_or_default();
    assert!(msg.contains("SIGABRT"), "{msg}");
    println!("ISOLATED {}: {msg}", r.name);
}
