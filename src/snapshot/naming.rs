//! Snapshot names and paths: `DIR/<class>/<case>@<controls>.snap`, and the pending
//! `.snap.new` beside it.

use crate::controls::Controls;
use std::path::{Path, PathBuf};

/// The controls part of a snapshot's name: `seed0-det`, `seed7-nondet-bench`, ...
pub fn controls_suffix(controls: &Controls) -> String {
    format!(
        "seed{}-{}{}",
        controls.seed,
        if controls.deterministic {
            "det"
        } else {
            "nondet"
        },
        if controls.benchmark { "-bench" } else { "" }
    )
}

/// The case part of a snapshot's name: `kernel/reduce_sum/small` → `kernel.reduce_sum.small`
/// (dots rather than insta's `__`, which insta would read as a module prefix and show only
/// `small` in `cargo insta review`).
pub fn case_stem(case: &str) -> String {
    case.replace(['/', '\\'], ".")
}

/// `DIR/<class>/<case>@<controls>.snap`.
pub fn path(dir: &Path, class: &str, case: &str, controls: &Controls) -> PathBuf {
    dir.join(class).join(format!(
        "{}@{}.snap",
        case_stem(case),
        controls_suffix(controls)
    ))
}

/// `x.snap` → `x.snap.new`.
pub fn pending_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".new");
    PathBuf::from(s)
}

/// `x.snap.new` → `x.snap` (the committed snapshot a pending one would replace).
pub fn committed_path(pending: &Path) -> PathBuf {
    let s = pending.as_os_str().to_string_lossy();
    PathBuf::from(s.strip_suffix(".new").unwrap_or(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let c = Controls {
            seed: 7,
            benchmark: true,
            ..Controls::default()
        };
        let p = path(
            Path::new("snapshots"),
            "cpu-x86_64",
            "kernel/reduce_sum/small",
            &c,
        );
        assert_eq!(
            p,
            Path::new("snapshots/cpu-x86_64/kernel.reduce_sum.small@seed7-det-bench.snap")
        );
        assert_eq!(committed_path(&pending_path(&p)), p);
        let nondet = Controls {
            deterministic: false,
            ..Controls::default()
        };
        assert_eq!(controls_suffix(&nondet), "seed0-nondet");
    }
}
