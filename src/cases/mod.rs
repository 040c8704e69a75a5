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
                glob(p.as_bytes(), name.as_bytes())
            } else {
                name.contains(p)
            }
        })
}

/// Whether the whole of `s` matches the glob `p` (`*` matches any run of bytes, every other
/// byte itself). Iterative two-pointer matching with backtracking to the last `*` only: linear
/// in `p.len() * s.len()` at worst and never recursive, so `**********z` cannot blow up.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // Where the last `*` was in the pattern, and where in `s` its match currently ends.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            pi += 1;
            star = Some((pi, si));
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            // Let the last `*` swallow one more byte and retry from just after it.
            pi = sp;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
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

    /// The obvious recursive matcher, exponential on `**…*z`: the reference for the proptest.
    fn reference(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => reference(&p[1..], s) || (!s.is_empty() && reference(p, &s[1..])),
            (Some(a), Some(b)) if a == b => reference(&p[1..], &s[1..]),
            _ => false,
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn glob_agrees_with_the_reference(p in "[ab*/]{0,8}", s in "[ab/]{0,10}") {
            proptest::prop_assert_eq!(glob(p.as_bytes(), s.as_bytes()), reference(p.as_bytes(), s.as_bytes()));
        }
    }

    #[test]
    fn many_stars_are_linear() {
        let name = "kernel/matmul/large/".repeat(50);
        let t0 = std::time::Instant::now();
        for pattern in [
            "**********z",
            &format!("{}z", "*a".repeat(40)),
            &"*".repeat(500),
        ] {
            assert_eq!(matches(pattern, &name), pattern.chars().all(|c| c == '*'));
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn names_are_unique() {
        let names: Vec<String> = registry().iter().map(|c| c.name()).collect();
        let set: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(set.len(), names.len());
    }
}
