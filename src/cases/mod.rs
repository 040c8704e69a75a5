//! The built-in cases and the registry the CLI and tests iterate.

pub mod copy;
pub mod infer;
pub mod kernels;
pub mod planted;
pub mod practices;
pub mod train;

use crate::case::Case;

/// Every built-in case, in a fixed order.
pub fn registry() -> Vec<Box<dyn Case>> {
    let mut all: Vec<Box<dyn Case>> = Vec::new();
    all.extend(kernels::cases());
    all.extend(planted::cases());
    all.extend(train::cases());
    all.extend(practices::cases());
    all.extend(infer::cases());
    all.extend(copy::cases());
    all
}

/// Whether `name` matches `pattern`: comma-separated alternatives, each a substring or, when it
/// contains `*`, a glob over the whole name.
pub fn matches(pattern: &str, name: &str) -> bool {
    pattern
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if p.contains('*') {
                crate::glob::matches(p, name)
            } else {
                name.contains(p)
            }
        })
}

/// The registered cases whose names match `pattern` (all when `None`). Self-test cases
/// (`selftest/...`, which crash or hang on purpose) are selected only by a pattern that names
/// `selftest` explicitly.
pub fn select(pattern: Option<&str>) -> Vec<Box<dyn Case>> {
    let wants_selftests = pattern.is_some_and(|p| p.contains("selftest"));
    registry()
        .into_iter()
        .filter(|c| pattern.is_none_or(|p| matches(p, &c.name())))
        .filter(|c| wants_selftests || !c.name().starts_with("selftest/"))
        .collect()
}

/// The registered case named exactly `name`.
pub fn find(name: &str) -> Option<Box<dyn Case>> {
    registry().into_iter().find(|c| c.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        assert!(matches("reduce", "kernel/reduce_sum/small"));
        assert!(matches("kernel/*/large", "kernel/matmul/large"));
        assert!(!matches("kernel/*/large", "kernel/matmul/small"));
        assert!(matches("nomatch,matmul", "kernel/matmul/small"));
        assert!(!matches("nomatch", "kernel/matmul/small"));
    }

    #[test]
    fn names_are_unique() {
        let names: Vec<String> = registry().iter().map(|c| c.name()).collect();
        let set: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(set.len(), names.len());
    }
}
