//! Program runs that several tests read, each made once per test binary: the first test to
//! ask makes it while the others wait, in cargo's scratch directory for integration tests. A
//! run of a real PyTorch program costs seconds of CPU per process; two tests asserting
//! different things of the same run need not pay for it twice.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A kept run of `examples/python/conv_threads.py` under `--trace ops --vary threads
/// --keep-going`, written as an HTML page.
pub struct ConvThreads {
    /// Its exit code.
    pub code: Option<i32>,
    /// Its standard output and error.
    pub output: String,
    /// The page, `report.html` in the project directory.
    pub page: PathBuf,
}

impl ConvThreads {
    /// The JSON report embedded in the page.
    pub fn report(&self) -> serde_json::Value {
        let page = std::fs::read_to_string(&self.page);
        embedded(&page.unwrap_or_else(|e| panic!("{e}: no page; the run said:\n{}", self.output)))
    }
}

/// `bitexact run --trace ops --vary threads --keep-going --format html --out report.html --
/// python conv_threads.py`, run from a project directory holding a copy of the example, with
/// `py`'s directory first on PATH: the page (and the guide's screenshot) shows no path of this
/// machine's work tree or home.
pub fn conv_threads_traced(py: &str) -> &'static ConvThreads {
    static RUN: OnceLock<ConvThreads> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("conv-threads-traced-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/conv_threads.py");
        std::fs::copy(&example, dir.join("conv_threads.py")).unwrap();
        let bin = Path::new(py).parent().unwrap().display().to_string();
        let path = format!("{bin}:{}", std::env::var("PATH").unwrap_or_default());
        let mut c = Command::new(env!("CARGO_BIN_EXE_bitexact"));
        c.args(["run", "--trace", "ops", "--vary", "threads", "--keep-going"])
            .args(["--format", "html", "--out", "report.html", "--"])
            .args(["python", "conv_threads.py"])
            .current_dir(&dir)
            .env("PATH", path);
        for var in ["SEED", "DETERMINISTIC", "BENCHMARK", "WORKERS", "THREADS"] {
            c.env_remove(format!("BITEXACT_{var}"));
        }
        let o = c.output().unwrap();
        ConvThreads {
            code: o.status.code(),
            output: common::stdout(&o) + &String::from_utf8_lossy(&o.stderr),
            page: dir.join("report.html"),
        }
    })
}

/// The JSON report embedded in an HTML page.
pub fn embedded(page: &str) -> serde_json::Value {
    let open = "id=\"bitexact-report\">";
    let start = page.find(open).expect("the embedded report") + open.len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).expect("the embedded report is JSON")
}
