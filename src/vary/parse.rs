//! Parsing `--vary`: `all`, or a comma-separated list of variation names, where `threads`,
//! `workers` and (programs) `batch` may name the two counts they alternate between
//! (`threads=1,2`: even runs get 1 thread, odd runs 2; `batch=1,8`). The counts are written into the base [`Controls`] by [`Spec::apply`],
//! so every run, report and blame pass reads them from one place.

use super::{Kind, Variation, TABLE};
use crate::controls::Controls;
use anyhow::{bail, Result};

/// A parsed `--vary` value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    /// The variations, sorted, without repeats.
    pub variations: Vec<Variation>,
    /// Counts named by `threads=A,B`.
    pub thread_pair: Option<[usize; 2]>,
    /// Counts named by `workers=A,B`.
    pub worker_pair: Option<[usize; 2]>,
    /// Batch sizes named by `batch=A,B` (programs).
    pub batch_pair: Option<[usize; 2]>,
}

impl Spec {
    /// Parses `all` or a comma-separated list for `kind`. An unknown or empty name, one that
    /// does not apply to `kind`, or a malformed count pair is an error naming it.
    pub fn parse(s: &str, kind: Kind) -> Result<Spec> {
        let mut spec = Spec::default();
        let mut parts = s.split(',').map(str::trim).peekable();
        while let Some(part) = parts.next() {
            if part.is_empty() {
                bail!(
                    "empty variation name in {s:?}; expected all or a list of {}",
                    Variation::names(kind)
                );
            }
            if part == "all" {
                // A program cannot declare seed independence: `seed` only when named; the
                // world size needs `{nproc}` in the command, and resume its arguments: only
                // when named.
                let in_all = |v: &Variation| {
                    !(kind == Kind::Program
                        && matches!(
                            v,
                            Variation::Seed
                                | Variation::WorldSize
                                | Variation::Batch
                                | Variation::Resume
                        ))
                };
                let all = Variation::all().filter(|v| v.applies_to(kind) && in_all(v));
                spec.variations.extend(all);
                continue;
            }
            let (name, first) = match part.split_once('=') {
                Some((n, c)) => (n.trim(), Some(c.trim())),
                None => (part, None),
            };
            let v = lookup(name, kind)?;
            spec.variations.push(v);
            let Some(first) = first else { continue };
            // The second count is the next list item: `threads=1,2`.
            let second = parts.next_if(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty());
            let pair = counts(name, first, second)?;
            match v {
                Variation::Threads if pair.contains(&0) => {
                    bail!("{part},{}: a thread count must be at least 1", pair[1])
                }
                Variation::Threads => spec.thread_pair = Some(pair),
                Variation::Workers => spec.worker_pair = Some(pair),
                Variation::Batch if kind == Kind::Case => {
                    bail!("{part},{}: batch sizes apply to programs (bitexact run) only; built-in cases compare one batch with sub-batches of 7", pair[1])
                }
                Variation::Batch if pair.contains(&0) => {
                    bail!("{part},{}: a batch size must be at least 1", pair[1])
                }
                // The smaller size in the even runs: run 0, the reference a later run is
                // compared with (and stopped at its first difference), holds whole results.
                Variation::Batch => spec.batch_pair = Some([pair[0].min(pair[1]), pair[0].max(pair[1])]),
                _ => bail!("variation {name:?} takes no counts (only threads=A,B, workers=A,B and batch=A,B)"),
            }
        }
        spec.variations.sort();
        spec.variations.dedup();
        Ok(spec)
    }

    /// Writes the chosen counts into `controls` (the base every run's settings derive from).
    pub fn apply(&self, controls: &mut Controls) {
        if let Some(p) = self.thread_pair {
            controls.thread_pair = p;
        }
        if let Some(p) = self.worker_pair {
            controls.worker_pair = p;
        }
        if let Some(p) = self.batch_pair {
            controls.batch_pair = p;
        }
    }
}

impl Variation {
    /// The variations of [`Spec::parse`] alone (counts are checked, then dropped).
    pub fn parse_list(s: &str, kind: Kind) -> Result<Vec<Variation>> {
        Ok(Spec::parse(s, kind)?.variations)
    }
}

/// The variation called `name` that applies to `kind`.
fn lookup(name: &str, kind: Kind) -> Result<Variation> {
    match TABLE.iter().find(|i| i.name == name) {
        Some(i) if i.variation.applies_to(kind) => Ok(i.variation),
        Some(_) => bail!(
            "variation {name:?} does not apply to {}; expected all or a list of {}",
            match kind {
                Kind::Case => "built-in cases",
                Kind::Program => "programs (bitexact run)",
            },
            Variation::names(kind)
        ),
        None => bail!(
            "unknown variation {name:?}; expected all or a list of {}",
            Variation::names(kind)
        ),
    }
}

/// The two counts of `name=first,second`: both decimal, and different (equal counts would
/// vary nothing).
fn counts(name: &str, first: &str, second: Option<&str>) -> Result<[usize; 2]> {
    let Some(second) = second else {
        bail!("{name}={first}: give two counts, the even runs' and the odd runs', e.g. {name}=1,2");
    };
    let parse = |c: &str| -> Result<usize> {
        match c.parse::<usize>() {
            Ok(n) if n <= 1024 => Ok(n),
            _ => bail!("{name}={first},{second}: {c:?} is not a count from 0 to 1024"),
        }
    };
    let pair = [parse(first)?, parse(second)?];
    if pair[0] == pair[1] {
        bail!("{name}={first},{second}: the two counts are equal, so nothing would vary");
    }
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_lists_and_rejects_unknown_names() {
        assert_eq!(
            Variation::parse_list("all", Kind::Case).unwrap(),
            Variation::all()
                .filter(|v| v.applies_to(Kind::Case))
                .collect::<Vec<_>>()
        );
        for bad in ["", "threads,", ",", "hashseed"] {
            assert!(Variation::parse_list(bad, Kind::Case).is_err(), "{bad:?}");
        }
        assert_eq!(
            Variation::parse_list("all", Kind::Program).unwrap(),
            vec![
                Variation::Threads,
                Variation::Workers,
                Variation::Poison,
                Variation::Hashseed
            ]
        );
        assert!(Variation::help(Kind::Case).contains("batch: rows"));
        assert_eq!(
            Variation::parse_list("poison, threads,poison", Kind::Case).unwrap(),
            vec![Variation::Threads, Variation::Poison]
        );
        assert!(Variation::parse_list("threads,colour", Kind::Case)
            .unwrap_err()
            .to_string()
            .contains("\"colour\""));
    }

    #[test]
    fn count_pairs_are_parsed_and_checked() {
        let s = Spec::parse("threads=1,2,workers=2,0,poison", Kind::Program).unwrap();
        assert_eq!(
            s.variations,
            vec![Variation::Threads, Variation::Workers, Variation::Poison]
        );
        assert_eq!((s.thread_pair, s.worker_pair), (Some([1, 2]), Some([2, 0])));
        let mut c = Controls::default();
        s.apply(&mut c);
        assert_eq!((c.thread_pair, c.worker_pair), ([1, 2], [2, 0]));
        assert_eq!(
            Spec::parse("threads", Kind::Case).unwrap().thread_pair,
            None
        );
        for (bad, says) in [
            ("threads=1", "give two counts"),
            ("threads=0,2", "at least 1"),
            ("threads=2,2", "equal"),
            ("threads=x,2", "\"x\""),
            ("workers=1,99999", "\"99999\""),
            ("poison=1,2", "takes no counts"),
            ("threads=1,,2", "give two counts"),
        ] {
            let e = Spec::parse(bad, Kind::Program).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    proptest! {
        /// Any text parses or errors; never panics.
        #[test]
        fn never_panics(s in ".{0,40}", kind in prop_oneof![Just(Kind::Case), Just(Kind::Program)]) {
            let _ = Spec::parse(&s, kind);
        }

        /// A pair written out is the pair read back.
        #[test]
        fn pairs_round_trip(a in 1usize..=1024, b in 1usize..=1024) {
            prop_assume!(a != b);
            let s = Spec::parse(&format!("threads={a},{b}"), Kind::Program).unwrap();
            prop_assert_eq!(s.thread_pair, Some([a, b]));
        }
    }
}
