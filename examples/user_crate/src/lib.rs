//! A user's crate with a process-global bug: the order of a `HashMap` built once per process
//! decides a float sum. Two runs in one process agree; runs in fresh processes do not.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The table every call reads: built once per process, so its iteration order (keyed by the
/// process's random `RandomState`) is fixed within a process and differs between processes.
fn table() -> &'static HashMap<String, f32> {
    static TABLE: OnceLock<HashMap<String, f32>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..64)
            .map(|i| (format!("feature_{i}"), 1.0 / (i as f32 + 0.37)))
            .collect()
    })
}

/// Sums the table's weights times `x` in the table's iteration order (the bug: float addition
/// is not associative, so the order shows in the last bits).
pub fn weighted_total(x: f32) -> f32 {
    table().values().fold(0.0f32, |acc, w| acc + w * x)
}
