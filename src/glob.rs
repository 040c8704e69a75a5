//! Globs over names: `*` matches any run of characters (`/` and `:` included, so `logs/*`
//! matches every output under `logs/` and `ckpt.pt:optimizer.*` every tensor of that
//! file's optimizer state); every other character matches itself. Used by `--filter` and the
//! ignore rules of run mode.

/// Whether the whole of `name` matches the glob `pattern`.
pub fn matches(pattern: &str, name: &str) -> bool {
    glob(pattern.as_bytes(), name.as_bytes()).0
}

/// Whether the whole of `s` matches the glob `p`, and the steps it took. Iterative two-pointer
/// matching with backtracking to the last `*` only: at most `(p.len() + 1) * (s.len() + 1)`
/// steps and never recursive, so `**********z` cannot blow up.
fn glob(p: &[u8], s: &[u8]) -> (bool, usize) {
    let (mut pi, mut si, mut steps) = (0, 0, 0);
    // Where the last `*` was in the pattern, and where in `s` its match currently ends.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        steps += 1;
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
            return (false, steps);
        }
    }
    (p[pi..].iter().all(|&b| b == b'*'), steps)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        fn glob_agrees_with_the_reference(p in "[ab*/:]{0,8}", s in "[ab/:]{0,10}") {
            proptest::prop_assert_eq!(glob(p.as_bytes(), s.as_bytes()).0, reference(p.as_bytes(), s.as_bytes()));
        }
    }

    #[test]
    fn many_stars_take_bounded_steps() {
        let name = "kernel/matmul/large/".repeat(50);
        for pattern in [
            "**********z".to_string(),
            format!("{}z", "*a".repeat(40)),
            "*".repeat(500),
        ] {
            let (m, steps) = glob(pattern.as_bytes(), name.as_bytes());
            assert_eq!(m, pattern.chars().all(|c| c == '*'));
            assert!(
                steps <= (pattern.len() + 1) * (name.len() + 1),
                "{steps} steps for {pattern:?}"
            );
        }
    }

    #[test]
    fn outputs_and_tensors() {
        assert!(matches("logs/*", "logs/a/b.txt"));
        assert!(matches(
            "ckpt.pt:optimizer.*",
            "ckpt.pt:optimizer.state.0.exp_avg"
        ));
        assert!(!matches("ckpt.pt:optimizer.*", "ckpt.pt:model.w"));
        assert!(matches("*.log", "run/train.log") && !matches("*.log", "train.log.1"));
    }
}
