//! The pytest plugin's `bitexact.check` against doing the same by hand, measured side by side
//! in one run (goals as ratios, never asserted):
//! - `isolate=True` (`bitexact run` in a driver process, K fresh interpreters, canonical
//!   digests, the report) against K `subprocess.run([python, "-c", …])` calls that pickle the
//!   result back and a comparison in the parent: goal ≤ 1.1 × by hand + 100 ms;
//! - `isolate=False` with a 100 MB result against calling the function K times: goal ≤ 1.05×
//!   (and the same with run 0's digests read from the result, which computes them).
//!
//! `cargo bench --bench pytest_check`, with the installed package's interpreter in
//! `BITEXACT_PYTHON` (default: `~/.cache/bitexact/python-path`, which ci/python.sh writes) and
//! numpy installed. Best of `BITEXACT_REPS` (default 5), the two of a pair timed alternately;
//! K = `BITEXACT_RUNS` (default 2).

#[path = "common/python.rs"]
mod python;

fn main() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let (reps, k) = (env("BITEXACT_REPS", "5"), env("BITEXACT_RUNS", "2"));
    let v = python::run_json(
        "pytest_check.py",
        &[&reps, &k],
        "the installed package with its pytest plugin, and numpy",
    );
    let f = |key: &str| v[key].as_f64().expect(key);
    let (hand, iso) = (f("by_hand"), f("isolated"));
    println!("bitexact.check, K = {k}, best of {reps}:");
    println!("  by hand: K subprocesses, results compared   {hand:.3} s");
    println!("  check(fn) (isolate=True)                     {iso:.3} s");
    println!(
        "  isolated / by hand                           {:.2}x, {:+.0} ms (goal <= 1.1x + 100 ms: {:.3} s)",
        iso / hand,
        (iso - hand) * 1e3,
        1.1 * hand + 0.1
    );
    let (calls, inp) = (f("calls"), f("in_process"));
    let (calls2, inp_d) = (f("calls_2"), f("in_process_digests"));
    println!("  K calls of fn (100 MB result)                {calls:.3} s");
    println!("  check(fn, isolate=False)                     {inp:.3} s");
    println!(
        "  in-process / calls                           {:.3}x (goal <= 1.05x)",
        inp / calls
    );
    println!(
        "  in-process, digests read / calls             {:.3}x ({inp_d:.3} s vs {calls2:.3} s)",
        inp_d / calls2
    );
}
