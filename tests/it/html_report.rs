//! `--format html` in a real browser: the page of a planted divergence is rendered by headless
//! Chromium (`ci/browser.sh` installs Debian's `chromium`), and the DOM its script built
//! (`--dump-dom`) must hold the first diverging op (the same op the embedded JSON names), the
//! growth plot, the op timeline and the blame table; a screenshot (`--screenshot`) is saved
//! too. One page comes from `bitexact report` (a built-in planted case, seconds), one from
//! `bitexact run --trace ops` on a PyTorch program (needs torch). Without a browser (or torch)
//! each test says `SKIPPED` with the reason. `BITEXACT_WRITE_SCREENSHOT=1` writes the program's
//! screenshot to `docs/images/html-report.png`, the guide's picture
//! (`docs/guides/html-report.md`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A headless-capable Chromium: `$BITEXACT_CHROMIUM`, else the first of `chromium`,
/// `chromium-browser`, `google-chrome` that answers `--version`; `None` after saying
/// `SKIPPED` for `test`.
fn chromium(test: &str) -> Option<String> {
    let candidates = std::env::var("BITEXACT_CHROMIUM")
        .ok()
        .into_iter()
        .chain(["chromium", "chromium-browser", "google-chrome"].map(String::from));
    let found = candidates.into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        common::tool_missing(
            test,
            "no headless Chromium (set $BITEXACT_CHROMIUM, or run ci/browser.sh to install Debian's chromium)",
        );
    }
    found
}

/// Runs `browser` headless on `page` with `what` (`--dump-dom`, `--screenshot=…`, or both: one
/// start renders the page once for both), killed after two minutes: its standard output.
fn browse(browser: &str, page: &Path, what: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg("--window-size=1280,2250")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(what)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).map(|_| s)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("chromium {what:?} did not finish in 2 minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap().expect("chromium's output")
}

use crate::shared_runs::embedded;

/// The text of the element with `id` in `dom` (its first child's text, no nested tags).
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM:\n{dom}"));
    let rest = &dom[at..];
    let start = rest.find('>').unwrap() + 1;
    &rest[start..start + rest[start..].find('<').unwrap()]
}

/// The part of `dom` from the element with `id` to the end of its table or svg.
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let rest = &dom[at..];
    let end = ["</table>", "</svg>"]
        .iter()
        .filter_map(|t| rest.find(t))
        .min()
        .unwrap();
    &rest[..end]
}

/// Renders the page at `page` and checks what the script drew for case 0 from the embedded
/// report: the first diverging op named as the JSON names it, the growth plot with a bar per
/// step, the origin highlighted in the op timeline, the ULP histogram and the blame table
/// (with `breaks` in the row of `breaking`). Saves a screenshot at `png`. The DOM.
fn check_page(browser: &str, page: &Path, breaking: &str, png: &Path) -> String {
    let html = std::fs::read_to_string(page).unwrap();
    let report = embedded(&html);
    let case = &report["cases"][0];
    let shot_flag = format!("--screenshot={}", png.display());
    let dom = browse(browser, page, &["--dump-dom", &shot_flag]);
    let op = case["divergence"]["op"].as_str().expect("a divergence");
    assert_eq!(text_of(&dom, "first-op-0"), op, "the first diverging op");
    assert!(dom.contains("<tr class=\"origin\">"), "the origin row");
    let growth = element(&dom, "growth-plot-0");
    assert!(growth.contains("class=\"bar\""), "{growth}");
    let hist = element(&dom, "ulp-histogram-0");
    assert!(hist.contains("class=\"bar\""), "{hist}");
    let blame = element(&dom, "blame-table-0");
    let row = blame
        .split("<tr")
        .find(|r| r.contains(&format!("{breaking} varied alone")))
        .unwrap_or_else(|| panic!("no {breaking} row in {blame}"));
    assert!(row.contains(">breaks<"), "{row}");
    assert!(element(&dom, "verdicts").contains(case["name"].as_str().unwrap()));
    assert!(element(&dom, "platform").contains(report["platform"]["os"].as_str().unwrap()));
    let shot = std::fs::read(png).expect("the screenshot");
    assert!(shot.starts_with(b"\x89PNG\r\n\x1a\n") && shot.len() > 10_000);
    dom
}

#[test]
fn a_planted_divergence_renders_in_headless_chromium() {
    let test = "a_planted_divergence_renders_in_headless_chromium";
    let Some(browser) = chromium(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let traces = dir.path().join("traces.json");
    let o = common::bitexact(&[
        "report",
        "--filter",
        "infer/planted_dropout_in_eval",
        "--backend",
        "cpu",
        "--vary",
        "all",
        "--trace",
        traces.to_str().unwrap(),
        "--format",
        "html",
        "--out",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stdout(&o));
    let dom = check_page(&browser, &page, "seed", &dir.path().join("page.png"));
    // Built-in cases trace one step; the plot still says what it could not show.
    assert!(dom.contains("max ULP per step is not recorded"), "{dom}");
    // A report whose divergence records its growth per step gets the max-ULP line too.
    let mut report = embedded(&std::fs::read_to_string(&page).unwrap());
    report["cases"][0]["divergence"]["growth"] = serde_json::json!([
        {"step": 0, "records": 10, "differing": 0, "max_rel": null, "max_ulp": null},
        {"step": 1, "records": 10, "differing": 3, "max_rel": 1e-7, "max_ulp": 12},
        {"step": 2, "records": 10, "differing": 9, "max_rel": 1e-3, "max_ulp": 4096},
    ]);
    let grown = dir.path().join("grown.html");
    std::fs::write(&grown, bitexact::report::html::page(&report)).unwrap();
    let dom = browse(&browser, &grown, &["--dump-dom"]);
    let plot = element(&dom, "growth-plot-0");
    assert_eq!(plot.matches("<rect").count(), 3, "{plot}");
    assert!(
        plot.contains("<polyline") && plot.contains("step 2: 9 of 10 outputs differ, max 4096 ULP"),
        "{plot}"
    );
}

#[test]
fn a_traced_program_renders_in_headless_chromium() {
    let test = "a_traced_program_renders_in_headless_chromium";
    let Some(browser) = chromium(test) else {
        return;
    };
    let Some(py) = common::tracer_python(test) else {
        return;
    };
    let run = crate::shared_runs::conv_threads_traced(&py);
    if run.code == Some(0) {
        return common::premise_skip(
            test,
            "1 vs 2 threads give identical bits for conv_threads.py on this CPU: nothing diverged to draw",
        );
    }
    let page = run.page.clone();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run.code, Some(1), "{}", run.output);
    let write = std::env::var("BITEXACT_WRITE_SCREENSHOT").is_ok_and(|v| v == "1");
    let png = match write {
        true => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/images/html-report.png"),
        false => dir.path().join("page.png"),
    };
    let dom = check_page(&browser, &page, "threads", &png);
    // Each of the program's steps has its bar, and the op's output, captured in a re-run, is
    // drawn where it differs.
    let report = embedded(&std::fs::read_to_string(&page).unwrap());
    let steps = report["cases"][0]["traces"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["step"].as_u64().unwrap_or(0))
        .collect::<std::collections::BTreeSet<_>>();
    let bars = element(&dom, "growth-plot-0").matches("<rect").count();
    assert_eq!(bars, steps.len(), "a bar per step {steps:?}");
    assert!(steps.len() > 1, "{steps:?}");
    assert!(element(&dom, "positions-0").contains("class=\"cell\""));
    let timeline = element(&dom, "timeline-0");
    assert!(timeline.contains("origin: output differs"), "{timeline}");
}
