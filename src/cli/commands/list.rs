//! `bitexact list`: every selected case with its backends and ops (and its planted bug).

use crate::cli::settings::ListSettings;
use anyhow::Result;

/// Prints one line per case; exit 0.
pub(crate) fn list(s: ListSettings) -> Result<u8> {
    let w = s.cases.iter().map(|c| c.name().len()).max().unwrap_or(4);
    let mut out = String::new();
    for c in &s.cases {
        let backends: Vec<&str> = c.backends().iter().map(|b| b.name()).collect();
        let mut line = format!(
            "{:w$}  {:9}  {}",
            c.name(),
            backends.join(","),
            c.ops().join(",")
        );
        if let Some(bug) = c.planted_bug() {
            line.push_str(&format!("  [planted bug: {bug}]"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}
