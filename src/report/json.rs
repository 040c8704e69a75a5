//! JSON report: one object `{version, controls, runs, platform, cases, cost?, summary}`.

use crate::outcome::Report;

/// The report as pretty-printed JSON.
pub fn render(report: &Report) -> String {
    serde_json::to_string_pretty(report).expect("report serialises") + "\n"
}
