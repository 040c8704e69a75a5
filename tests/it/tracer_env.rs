//! `--trace` wherever bitexact is installed: bitexact in one environment (the CI
//! venv's console script, `python -m bitexact`), the program under another Python that has
//! torch but not bitexact (a venv made here whose site-packages links every package of the CI
//! venv except bitexact, numpy and safetensors). The tracer still names the op; nothing of
//! bitexact's environment but its own package reaches the program; a program environment with
//! another bitexact version is named; and when tracing cannot work the run fails saying why.
//! Needs the CI venv (ci/python.sh); says `SKIPPED` without.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A planted unseeded noise op in a module (`aten::rand.generator` in `M`; seeded with
/// `--steady`, which the tests that need no divergence use: no capture re-runs), and what the
/// program can import: with `--isolated` it fails when numpy or safetensors (bitexact's
/// environment only) can be imported; it writes the `bitexact` it would import to `which.txt`.
const NOISE: &str = r#"
import importlib.util, os, shutil, sys, time, torch
if "--clear" in sys.argv:  # a program that empties its output directory first
    shutil.rmtree(os.environ["BITEXACT_OUT"]); os.makedirs(os.environ["BITEXACT_OUT"])
for leak in ("numpy", "safetensors"):
    if "--isolated" in sys.argv and importlib.util.find_spec(leak) is not None:
        sys.exit("%s leaked into the program's imports" % leak)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.fc = torch.nn.Linear(4, 4)
    def forward(self, x):
        seed = 0 if "--steady" in sys.argv else time.time_ns()
        return self.fc(x) + torch.rand(4, generator=torch.Generator().manual_seed(seed))
torch.manual_seed(0)
y = M()(torch.ones(2, 4))
torch.save({"y": y}, os.path.join(os.environ["BITEXACT_OUT"], "final.pt"))
spec = importlib.util.find_spec("bitexact")
with open(os.path.join(os.environ["BITEXACT_OUT"], "which.txt"), "w") as f:
    f.write(spec.origin if spec else "none")
"#;

/// The CI venv's Python (torch and the bitexact package with its native module), when its base
/// interpreter can make venvs (Debian without python3-venv cannot).
fn ci_python(test: &str) -> Option<String> {
    let py = common::python_with(&["torch", "bitexact._native", "bitexact._trace", "venv"]);
    let probe = "import shutil, tempfile, venv; d = tempfile.mkdtemp(); venv.create(d, with_pip=False); shutil.rmtree(d)";
    let venvs = py.as_ref().is_some_and(|py| {
        let o = Command::new(base_python(py)).args(["-c", probe]).output();
        o.is_ok_and(|o| o.status.success())
    });
    if !venvs {
        common::tool_missing(
            test,
            "no Python with torch and the installed bitexact package whose base interpreter makes venvs (run ci/python.sh)",
        );
        return None;
    }
    py
}

/// The interpreter `py`'s venv was made from.
fn base_python(py: &str) -> String {
    py_out(
        py,
        "import sys; print(getattr(sys, '_base_executable', sys.executable))",
    )
}

/// A new empty venv at `dir` made by `ci`'s base interpreter: its Python, which has no torch.
fn bare_venv(ci: &str, dir: &Path) -> String {
    let o = Command::new(base_python(ci))
        .args(["-m", "venv", "--without-pip"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir.join("bin/python").display().to_string()
}

fn py_out(py: &str, code: &str) -> String {
    let o = Command::new(py).args(["-c", code]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A Python environment under `dir` with every package of `ci`'s site-packages but bitexact,
/// numpy and safetensors (linked), and `extra` packages of its own (name, `__init__.py`).
/// Returns its interpreter.
fn program_env(ci: &str, dir: &Path, extra: &[(&str, &str)]) -> String {
    let site = py_out(
        ci,
        "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))",
    );
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    for e in std::fs::read_dir(&site).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let skip = ["bitexact", "numpy", "safetensors", "__pycache__"];
        if skip.iter().any(|s| name.starts_with(s)) || name.ends_with(".pth") {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), shared.join(&name)).unwrap();
    }
    let py = bare_venv(ci, &dir.join("venv"));
    let own_site = PathBuf::from(py_out(
        &py,
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ));
    std::fs::write(own_site.join("shared.pth"), shared.display().to_string()).unwrap();
    for (name, init) in extra {
        std::fs::create_dir_all(own_site.join(name)).unwrap();
        std::fs::write(own_site.join(name).join("__init__.py"), init).unwrap();
    }
    py
}

/// `bitexact run --trace ops --format json --keep KEEP -- PY -c NOISE --isolated` through
/// `bitexact` (a command line), with `env`: (exit code, the case, what run 0 wrote to
/// which.txt). `PY` may be a shell command line (`sh -c …`) too.
fn run(bitexact: &[&str], py: &[&str], env: &[(&str, &str)]) -> (i32, serde_json::Value, String) {
    let mut command = py.to_vec();
    command.extend(["-c", NOISE, "--isolated"]);
    run_flags(bitexact, &["--trace", "ops"], &command, env)
}

/// `bitexact FLAGS --format json --keep KEEP -- COMMAND` (see [`run`]).
fn run_flags(
    bitexact: &[&str],
    flags: &[&str],
    command: &[&str],
    env: &[(&str, &str)],
) -> (i32, serde_json::Value, String) {
    let keep = tempfile::tempdir().unwrap();
    let kept = keep.path().join("k");
    let mut c = Command::new(bitexact[0]);
    c.args(&bitexact[1..])
        .arg("run")
        .args(flags)
        .args(["--format", "json", "--keep"])
        .arg(&kept)
        .arg("--")
        .args(command)
        .env_remove(bitexact::protocol::PYTHON_PACKAGE_ENV);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let case = common::json(&o)["cases"][0].clone();
    let which = std::fs::read_to_string(kept.join("run-0/which.txt")).unwrap_or_default();
    (o.status.code().unwrap(), case, which)
}

fn explanation(case: &serde_json::Value) -> &str {
    case["divergence"]["explanation"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn the_tracer_runs_in_a_program_python_without_bitexact() {
    let Some(ci) = ci_python("the_tracer_runs_in_a_program_python_without_bitexact") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let py = program_env(&ci, dir.path(), &[]);
    // The console script of bitexact's own environment, as `pipx install` gives it.
    let (code, case, which) = run(&[&ci, "-m", "bitexact"], &[&py], &[]);
    assert_eq!(code, 1, "{case:#}");
    let d = explanation(&case);
    assert!(d.contains("aten::rand"), "{d}");
    assert!(d.contains("in module M (forward)"), "{d}");
    assert!(d.contains("inputs identical"), "{d}");
    // The program imported bitexact's own package, through the private directory, and its
    // version was read from bitexact's environment: no version note.
    assert!(which.contains(".bitexact-inject/bitexact/"), "{which}");
    let notes = case["notes"].to_string();
    assert!(!notes.contains("used bitexact"), "{notes}");
}

#[test]
fn a_program_with_another_bitexact_version_is_told_and_one_of_the_same_keeps_its_own() {
    let Some(ci) = ci_python("a_program_with_another_bitexact_version_is_told") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let old = "__version__ = \"0.0.1\"\nraise ImportError('the old bitexact was imported')\n";
    let py = program_env(&ci, dir.path(), &[("bitexact", old)]);
    let console = [ci.as_str(), "-m", "bitexact"];
    let steady = [py.as_str(), "-c", NOISE, "--isolated", "--steady"];
    let (code, case, which) = run_flags(&console, &["--trace", "ops"], &steady, &[]);
    assert_eq!(code, 0, "{case:#}");
    assert!(traced(&case), "{case:#}");
    assert!(which.contains(".bitexact-inject/bitexact/"), "{which}");
    let notes = case["notes"].to_string();
    assert!(notes.contains("has bitexact 0.0.1"), "{notes}");
    // The CI venv's own bitexact is this version: the program keeps using it (numpy is
    // importable there, so the leak check is off).
    let (code, case, which) = run(
        &console,
        &["sh", "-c", "exec \"$0\" -c \"$2\" --steady", &ci],
        &[],
    );
    assert_eq!(code, 0, "{case:#}");
    assert!(traced(&case), "{case:#}");
    assert!(which.contains("site-packages/bitexact/"), "{which}");
}

/// Copies the `.py` files of the package `from`, its subpackages' too, to `to`.
fn copy_python_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && p.join("__init__.py").is_file() {
            copy_python_files(&p, &to.join(p.file_name().unwrap()));
        } else if p.extension().is_some_and(|x| x == "py") {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// Whether `case`'s runs recorded op traces with op calls in them.
fn traced(case: &serde_json::Value) -> bool {
    let notes = case["notes"].to_string();
    case["digests"]["<ops>"].is_string() && !notes.contains("op trace: 0 op calls")
}

/// Asserts that the run (`code`, `case`) failed because it could not trace; its message.
fn untraceable(code: i32, case: &serde_json::Value) -> String {
    assert_eq!(code, 1, "{case:#}");
    let f = &case["evidence"]["failure"];
    assert_eq!(f["kind"], "trace-unavailable", "{case:#}");
    f["message"].as_str().unwrap_or_default().to_string()
}

#[test]
fn when_the_tracer_cannot_start_the_run_fails_and_says_why() {
    let Some(ci) = ci_python("when_the_tracer_cannot_start_the_run_fails_and_says_why") else {
        return;
    };
    let me = env!("CARGO_BIN_EXE_bitexact");
    let dir = tempfile::tempdir().unwrap();
    let py = program_env(&ci, dir.path(), &[]);
    // A binary built by cargo has no package of its own; the program's Python has none.
    let (code, case, _) = run(&[me], &[&py], &[]);
    let msg = untraceable(code, &case);
    assert!(
        msg.starts_with(&format!(
            "--trace ops: {py} cannot import bitexact's tracer"
        )),
        "{msg}"
    );
    assert!(msg.contains("BITEXACT_PYTHON_PACKAGE"), "{msg}");
    // Given a package whose native module cannot load.
    let installed = py_out(
        &ci,
        "import bitexact, os; print(os.path.dirname(bitexact.__file__))",
    );
    let broken = dir.path().join("broken/bitexact");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/bitexact");
    copy_python_files(&source, &broken);
    std::fs::write(broken.join("_native.abi3.so"), b"not an ELF file").unwrap();
    let package = [("BITEXACT_PYTHON_PACKAGE", broken.to_str().unwrap())];
    let (code, case, _) = run(&[me], &[&py], &package);
    let msg = untraceable(code, &case);
    assert!(
        msg.contains("cannot load bitexact's native module"),
        "{msg}"
    );
    // A Python without torch, given a working package.
    let bare_py = bare_venv(&ci, &dir.path().join("bare"));
    let package = [("BITEXACT_PYTHON_PACKAGE", installed.as_str())];
    let (code, case, _) = run(&[me], &[&bare_py], &package);
    let msg = untraceable(code, &case);
    assert!(
        msg.starts_with(&format!("--trace ops: {bare_py} has no torch")),
        "{msg}"
    );
    // No Python at all.
    let (code, case, _) = run(
        &[me],
        &["sh", "-c", "echo x > \"$BITEXACT_OUT/x.txt\"", "sh"],
        &package,
    );
    let msg = untraceable(code, &case);
    assert!(
        msg.starts_with("--trace ops: no Python process started it"),
        "{msg}"
    );
}

#[test]
fn a_package_directory_that_is_not_one_is_bad_input() {
    let o = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--trace", "ops", "--", "true"])
        .env("BITEXACT_PYTHON_PACKAGE", "/nonexistent/bitexact")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("$BITEXACT_PYTHON_PACKAGE /nonexistent/bitexact"),
        "{err}"
    );
}

/// A Python older than 3.9 that runs, on `PATH` or under pyenv, if this machine has one.
fn old_python() -> Option<String> {
    let mut candidates: Vec<String> = ["python3.8", "python3.7", "python3.6", "python2.7"]
        .map(String::from)
        .to_vec();
    let pyenv = PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv/versions");
    for e in std::fs::read_dir(pyenv).into_iter().flatten().flatten() {
        let v = e.file_name().to_string_lossy().into_owned();
        if ["2.", "3.6", "3.7", "3.8"].iter().any(|p| v.starts_with(p)) {
            candidates.push(e.path().join("bin/python").display().to_string());
        }
    }
    candidates.into_iter().find(|p| {
        let o = Command::new(p).args(["-c", "print(1)"]).output();
        o.is_ok_and(|o| o.status.success())
    })
}

/// Python programs that could defeat the check: a wrapper Python without torch that launches
/// the real program (its failed claim must not keep the child from tracing or seeding), a
/// program that empties its output directory (the tracer keeps its records elsewhere, so it
/// is still seen to have started), a run stopped early before its Python started
/// (nondeterministic, not untraceable), and a Python older than 3.9 (named as too old, never
/// blamed on `-I` / `-E`).
#[test]
fn wrappers_cleared_outputs_early_stops_and_old_pythons_are_judged_right() {
    let test = "wrappers_cleared_outputs_early_stops_and_old_pythons_are_judged_right";
    let Some(ci) = ci_python(test) else {
        return;
    };
    let me = env!("CARGO_BIN_EXE_bitexact");
    let dir = tempfile::tempdir().unwrap();
    let py = program_env(&ci, dir.path(), &[]);
    let installed = py_out(
        &ci,
        "import bitexact, os; print(os.path.dirname(bitexact.__file__))",
    );
    let package = [("BITEXACT_PYTHON_PACKAGE", installed.as_str())];
    let bare = bare_venv(&ci, &dir.path().join("bare"));
    let wrap = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))";
    // The wrapper has no torch; its child traces.
    let wrapped = [
        bare.as_str(),
        "-c",
        wrap,
        &py,
        "-c",
        NOISE,
        "--isolated",
        "--steady",
    ];
    let (code, case, _) = run_flags(&[me], &["--trace", "ops"], &wrapped, &package);
    assert_eq!(code, 0, "{case:#}");
    assert!(traced(&case), "{case:#}");
    // ... and is seeded (torch.randn is then the same in every run).
    let draw = "import os, torch; torch.save(torch.randn(3), os.environ['BITEXACT_OUT'] + '/x.pt')";
    let seeded = ["--seed-everything"];
    let (code, case, _) = run_flags(
        &[me],
        &seeded,
        &[&bare, "-c", wrap, &py, "-c", draw],
        &package,
    );
    assert_eq!(code, 0, "{case:#}");
    // A program that empties $BITEXACT_OUT after the tracer started: its trace is gone with
    // it, which the report says, but the tracer did start.
    let clears = [
        py.as_str(),
        "-c",
        NOISE,
        "--clear",
        "--isolated",
        "--steady",
    ];
    let (code, case, _) = run_flags(&[me], &["--trace", "ops"], &clears, &package);
    assert_eq!(code, 0, "{case:#}");
    let notes = case["notes"].to_string();
    assert!(
        notes.contains("the tracer started, yet run 0 left no op trace"),
        "{notes}"
    );
    // Run 1 differs (and is stopped) before its Python starts: nondeterministic, not untraceable.
    let early = "echo $BITEXACT_RUN > $BITEXACT_OUT/a.txt; sleep 3; exec \"$0\" -c 'print(1)'";
    let (code, case, _) = run_flags(
        &[me],
        &["--trace", "ops"],
        &["sh", "-c", early, &py],
        &package,
    );
    assert_eq!(
        (code, case["verdict"].as_str()),
        (1, Some("nondeterministic")),
        "{case:#}"
    );
    // A Python older than 3.9, where this machine has one.
    let Some(old) = old_python() else {
        bitexact::check::skip_notice(test, "(part) no Python older than 3.9 on PATH");
        return;
    };
    let (code, case, _) = run_flags(
        &[me],
        &["--trace", "ops"],
        &[&old, "-c", "print(1)"],
        &package,
    );
    let msg = untraceable(code, &case);
    assert!(
        msg.contains("bitexact's tracer needs Python 3.9 or newer"),
        "{msg}"
    );
}
