//! One planner owns every run: every run a check makes — the main pass, blame's
//! passes, capture re-runs of a traced program, the order pass — reaches the suite's
//! `Event::Run` with its reason, and the report's JSON (`passes`) counts the same runs. A
//! verdict is final when `Event::Finished` says it: snapshots, the order pass and the other
//! device are weighed before, never after.

use crate::common;

use bitexact::program::{trace::TraceOptions, Program};
use bitexact::report::{self, Format};
use bitexact::suite::{self, Event, Subject, SuiteConfig};
use bitexact::vary::Variation;
use bitexact::{Backend, Controls, Report, Tensor, Verdict};
use bitexact::{Case, Ctx, Outputs};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::atomic::{AtomicU32, Ordering};

/// The runs told per subject (`purpose k/of`).
type Told = BTreeMap<String, Vec<String>>;

/// Runs `subjects` through the suite; returns the report, the runs told and the verdict each
/// `Finished` event carried.
fn collect(subjects: &[Subject], config: &SuiteConfig) -> (Report, Told, Vec<(String, Verdict)>) {
    let mut runs = Told::new();
    let mut finished = Vec::new();
    let report = suite::run(subjects, config, &mut |e| match e {
        Event::Run { name, run } => runs.entry(name.to_string()).or_default().push(format!(
            "{} {}/{}",
            run.purpose,
            run.index + 1,
            run.of
        )),
        Event::Finished(r) => finished.push((r.name.clone(), r.verdict())),
        _ => {}
    })
    .unwrap();
    (report, runs, finished)
}

/// The runs the JSON report counts for case `i`: `(purpose, runs)` of its `passes`.
fn passes_in_json(report: &Report, i: usize) -> Vec<(String, u64)> {
    let json: serde_json::Value =
        serde_json::from_str(&report::render(Format::Json, report)).unwrap();
    json["cases"][i]["passes"]
        .as_array()
        .expect("passes in the JSON")
        .iter()
        .map(|p| {
            (
                p["purpose"].as_str().unwrap().to_string(),
                p["runs"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The runs told, grouped as the JSON groups them: consecutive runs of one purpose.
fn grouped(told: &[String]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for t in told {
        let purpose = t.rsplit_once(' ').unwrap().0.to_string();
        match out.last_mut() {
            Some((p, n)) if *p == purpose => *n += 1,
            _ => out.push((purpose, 1)),
        }
    }
    out
}

fn program(argv: &[&str]) -> Program {
    let mut p = Program::new(argv.iter().map(OsString::from).collect());
    p.name = "run/planner".into();
    p
}

/// A program whose output is its thread count, run twice a pass under `vary`: the report and
/// the runs it made, as [`collect`] gives them.
fn thread_count_program(vary: Vec<Variation>) -> (Report, Told) {
    let p = program(&[
        "sh",
        "-c",
        "echo $OMP_NUM_THREADS > \"$BITEXACT_OUT/x.txt\"",
    ]);
    let mut config = SuiteConfig::new(vec![Backend::Cpu], Controls::default(), 2);
    config.options.vary = vary;
    let (report, runs, _) = collect(&[Subject::Program(&p)], &config);
    (report, runs)
}

#[test]
fn every_run_of_a_blamed_program_is_an_event_and_in_the_json() {
    let (report, runs) = thread_count_program(vec![Variation::Threads]);
    assert_eq!(report.cases[0].verdict(), Verdict::Nondeterministic);
    let told = &runs["run/planner"];
    assert_eq!(
        grouped(told),
        [("main".to_string(), 2), ("blame: control".to_string(), 2)]
    );
    assert_eq!(passes_in_json(&report, 0), grouped(told));
}

/// With one variation, the diverging main pass is that variation's blame pass: blame makes only
/// the control. With two, each is made alone.
#[test]
fn blame_makes_a_variations_pass_only_when_another_is_varied_too() {
    let (report, runs) = thread_count_program(vec![Variation::Threads, Variation::Workers]);
    let blame = report.cases[0].blame.as_ref().expect("a blame");
    assert_eq!(blame.broken_by, [Variation::Threads], "{blame:?}");
    assert_eq!(
        grouped(&runs["run/planner"]),
        [
            ("main".to_string(), 2),
            ("blame: control".to_string(), 2),
            ("blame: threads".to_string(), 2),
            ("blame: workers".to_string(), 2)
        ]
    );
}

#[test]
fn every_run_of_a_traced_program_with_a_divergence_is_an_event_and_in_the_json() {
    let Some(py) = common::tracer_python(
        "every_run_of_a_traced_program_with_a_divergence_is_an_event_and_in_the_json",
    ) else {
        return;
    };
    // The thread count reaches the result through a Python int: the op's tensor inputs match
    // while its output differs, so the op is the origin and its tensors are captured.
    let script = "import os, torch\n\
                  y = torch.ones(4) * torch.get_num_threads()\n\
                  torch.save({'y': y}, os.path.join(os.environ['BITEXACT_OUT'], 'y.pt'))\n";
    let mut p = program(&[&py, "-c", script]);
    p.trace = Some(TraceOptions::default());
    let mut config = SuiteConfig::new(vec![Backend::Cpu], Controls::default(), 2);
    config.options.vary = vec![Variation::Threads];
    let (report, runs, _) = collect(&[Subject::Program(&p)], &config);
    let case = &report.cases[0];
    assert_eq!(case.verdict(), Verdict::Nondeterministic, "{case:?}");
    let d = case.divergence.as_ref().expect("the first diverging op");
    assert!(d.op.contains("mul"), "{d:?}");
    let told = &runs["run/planner"];
    assert_eq!(
        grouped(told),
        [
            ("main".to_string(), 2),
            ("capture: runs 0 and 1".to_string(), 2),
            ("blame: control".to_string(), 2)
        ],
        "{told:?}"
    );
    assert!(told.contains(&"capture: runs 0 and 1 2/2".to_string()));
    assert_eq!(passes_in_json(&report, 0), grouped(told));
    let made: u64 = passes_in_json(&report, 0).iter().map(|(_, n)| n).sum();
    assert_eq!(made as usize, told.len());
}

/// What `Polluter` leaves behind for `Victim` (the tests using them hold `ONE_AT_A_TIME`).
static SHARED: AtomicU32 = AtomicU32::new(0);
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Leaves process-global state behind.
struct Polluter;
impl Case for Polluter {
    fn name(&self) -> String {
        "test/polluter".into()
    }
    fn run(&self, _ctx: &mut Ctx) -> anyhow::Result<Outputs> {
        SHARED.store(1, Ordering::SeqCst);
        Ok(Outputs::from([("x".to_string(), Tensor::scalar(1u32))]))
    }
}

/// Reads process-global state and resets it.
struct Victim;
impl Case for Victim {
    fn name(&self) -> String {
        "test/victim".into()
    }
    fn run(&self, _ctx: &mut Ctx) -> anyhow::Result<Outputs> {
        let v = SHARED.swap(0, Ordering::SeqCst);
        Ok(Outputs::from([("seen".to_string(), Tensor::scalar(v))]))
    }
}

#[test]
fn order_variation_finds_state_leaking_between_cases() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cases: Vec<Box<dyn Case>> = vec![Box::new(Victim), Box::new(Polluter)];
    let mut config = SuiteConfig::new(vec![Backend::Cpu], Controls::default(), 2);
    config.options.vary = vec![Variation::Order];
    let cases: Vec<&dyn Case> = cases.iter().map(|c| c.as_ref()).collect();
    let reports = suite::run(&Subject::cases(&cases), &config, &mut |_| {})
        .unwrap()
        .cases;
    let victim = reports.iter().find(|r| r.name == "test/victim").unwrap();
    assert_eq!(victim.verdict(), Verdict::Nondeterministic, "{victim:?}");
    assert_eq!(
        victim.blame.as_ref().unwrap().broken_by,
        vec![Variation::Order]
    );
    assert!(victim.message.as_ref().unwrap().contains("case order"));
    assert_eq!(
        reports
            .iter()
            .find(|r| r.name == "test/polluter")
            .unwrap()
            .verdict(),
        Verdict::Deterministic
    );
}

#[test]
fn no_verdict_changes_after_finished() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path().to_path_buf();
    let cases: Vec<Box<dyn Case>> = vec![Box::new(Victim), Box::new(Polluter)];
    let cases: Vec<&dyn Case> = cases.iter().map(|c| c.as_ref()).collect();
    let subjects = Subject::cases(&cases);
    // A committed snapshot of the polluter that no longer matches: a snapshot mismatch.
    let mut config = SuiteConfig::new(vec![Backend::Cpu], Controls::default(), 2);
    let (first, _, _) = collect(&subjects, &config);
    let polluter = first
        .cases
        .iter()
        .find(|c| c.name == "test/polluter")
        .unwrap();
    let platform = bitexact::platform::Platform::detect();
    let mut snap = bitexact::snapshot::Snapshot::of(polluter, &config.controls, &platform).unwrap();
    snap.run = "0".repeat(64);
    let class = platform.class_for(Backend::Cpu);
    let path = bitexact::snapshot::path(&scratch, &class, "test/polluter", &config.controls);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, snap.file_text()).unwrap();

    SHARED.store(0, Ordering::SeqCst); // as in a fresh process
    config.snapshots = Some(scratch.clone());
    config.options.vary = vec![Variation::Order];
    let (report, runs, finished) = collect(&subjects, &config);
    let finals: Vec<(String, Verdict)> = report
        .cases
        .iter()
        .map(|c| (c.name.clone(), c.verdict()))
        .collect();
    assert_eq!(finished.len(), finals.len());
    for f in &finished {
        assert!(
            finals.contains(f),
            "{f:?} changed after Finished: {finals:?}"
        );
    }
    let verdict = |n: &str| finals.iter().find(|(c, _)| c == n).unwrap().1;
    assert_eq!(verdict("test/victim"), Verdict::Nondeterministic);
    assert_eq!(verdict("test/polluter"), Verdict::SnapshotMismatch);
    assert_eq!(runs["test/victim"].last().unwrap(), "order: reverse 1/1");
}
