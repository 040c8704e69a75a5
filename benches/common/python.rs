//! The Python side of the benches that time bitexact from Python (`python_digest`, `op_trace`):
//! the interpreter of the installed package and one run of a bench script that prints JSON.

use std::process::Command;

/// `BITEXACT_PYTHON`, else the venv ci/python.sh records in `~/.cache/bitexact/python-path`,
/// else `python3`.
pub fn python() -> String {
    std::env::var("BITEXACT_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        std::fs::read_to_string(format!("{home}/.cache/bitexact/python-path"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "python3".into())
    })
}

/// Runs `benches/<script>` with `args` and parses the JSON object it prints; exits 1 saying
/// what the Python side needs when it fails.
pub fn run_json(script: &str, args: &[&str], needs: &str) -> serde_json::Value {
    let path = format!("{}/benches/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .expect("run python");
    if !out.status.success() {
        eprintln!(
            "{script}: the Python side failed (needs {needs}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
    serde_json::from_slice(&out.stdout).expect("the bench script prints one JSON object")
}
