//! The CI formats of `bitexact report`: JUnit XML (parsed and checked as XML) and Markdown.

use crate::common;
use common::{bitexact, stdout};

/// Runs the atomic `scatter_add/large` case with the deterministic switch off until it is
/// caught (at most 3 attempts of 8 runs, like `tests/it/cli.rs`), plus the deterministic `softmax/small`.
fn caught_report(format: &str) -> String {
    let mut last = String::new();
    for _ in 0..3 {
        let o = bitexact(&[
            "report",
            "--filter",
            "softmax/small,scatter_add/large",
            "--deterministic",
            "off",
            "--runs",
            "8",
            "--threads",
            "4",
            "--format",
            format,
        ]);
        last = stdout(&o);
        if o.status.code() == Some(1) {
            return last;
        }
    }
    panic!("atomic scatter_add not caught in 3 attempts:\n{last}");
}

#[test]
fn junit_is_valid_xml_with_one_testcase_per_case_and_failures_explained() {
    let xml = caught_report("junit");
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("2"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let suite = root
        .children()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("a testsuite");
    assert_eq!(suite.attribute("name"), Some("bitexact.cpu"));
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let case = |name: &str| {
        *cases
            .iter()
            .find(|c| c.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("no testcase {name}"))
    };
    assert_eq!(cases.len(), 2);
    let softmax = case("kernel/softmax/small");
    assert!(softmax.children().all(|n| !n.has_tag_name("failure")));
    let failure = case("kernel/scatter_add/large")
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("the large case fails");
    assert_eq!(failure.attribute("type"), Some("nondeterministic"));
    assert!(failure
        .attribute("message")
        .unwrap()
        .contains("distinct digests over 8 runs"));
    let body = failure.text().unwrap_or_default();
    assert!(body.contains("elements differ"), "{body}");
    assert!(body.contains("scatter_add=atomic_cas"), "{body}");
}

#[test]
fn junit_reports_skipped_cuda_cases_with_the_reason() {
    let o = bitexact(&[
        "report",
        "--filter",
        "kernel/dropout/small",
        "--backend",
        "all",
        "--format",
        "junit",
    ]);
    let xml = stdout(&o);
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let cuda = doc
        .descendants()
        .find(|n| n.attribute("name") == Some("bitexact.cuda"))
        .expect("a cuda suite");
    let case = cuda
        .children()
        .find(|n| n.has_tag_name("testcase"))
        .unwrap();
    match case.children().find(|n| n.has_tag_name("skipped")) {
        Some(s) => assert!(!s.attribute("message").unwrap_or("").is_empty()),
        // On a machine with a GPU the case runs and must pass.
        None => assert!(case.children().all(|n| !n.has_tag_name("failure"))),
    }
}

#[test]
fn markdown_is_a_table_with_explanations() {
    let md = caught_report("markdown");
    assert!(md.starts_with("### bitexact: ❌"), "{md}");
    assert!(md.contains("| case | backend | verdict | runs | digest | time |"));
    let row = md
        .lines()
        .find(|l| l.starts_with("| `kernel/scatter_add/large`"))
        .expect("a row for the large case");
    assert!(row.contains("❌ nondeterministic"), "{row}");
    assert_eq!(row.matches('|').count(), 7, "{row}");
    assert!(md.contains("<details><summary>Explanations</summary>"));
    assert!(md.contains("elements differ"));
    assert!(md.contains("| op | backend | deterministic | nondeterministic | cost |"));
}

#[test]
fn markdown_shows_skipped_cuda_and_the_cross_device_section() {
    let o = bitexact(&[
        "report",
        "--filter",
        "kernel/philox/small",
        "--backend",
        "all",
        "--format",
        "markdown",
    ]);
    let md = stdout(&o);
    assert!(md.contains("**Cross-device (cpu vs cuda)**"), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| `kernel/philox/small` | cuda |"))
        .expect("a cuda row");
    // Without a GPU the CUDA run is skipped with the reason; with one it must pass.
    assert!(
        row.contains("⏭️ skipped") || row.contains("✅ deterministic"),
        "{row}"
    );
}
