//! What differed between two compared runs: the varied conditions with their two values
//! ([`between`]), so that an op whose inputs were identical and whose output differs is said
//! to differ *under the variation* (`at 1 vs 2 threads`), never called nondeterministic when
//! something was varied on purpose.

use super::{RunSettings, Variation};
use serde::{Deserialize, Serialize};

/// One condition that differed between two compared runs, with its value in each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Varied {
    /// The variation (`threads`, `hashseed`, `batch`, …).
    pub variation: Variation,
    /// Its value in the first run and in the other (`["1", "2"]`).
    pub values: [String; 2],
}

impl Varied {
    /// The words after "output differs": `at 1 vs 2 threads`, `with PYTHONHASHSEED 1 vs 2`,
    /// `at batch 1 vs 8`, `at world size 1 vs 2`, `with poison 0x00 vs 0xff`.
    pub fn words(&self) -> String {
        let [a, b] = &self.values;
        match self.variation {
            Variation::Threads => format!("at {a} vs {b} threads"),
            Variation::Workers => format!("at {a} vs {b} data-loader workers"),
            Variation::Poison => format!("with poison {a} vs {b}"),
            Variation::Batch => format!("at batch {a} vs {b}"),
            Variation::Hashseed => format!("with PYTHONHASHSEED {a} vs {b}"),
            Variation::Seed => format!("with seed {a} vs {b}"),
            Variation::WorldSize => format!("at world size {a} vs {b}"),
            Variation::Process | Variation::Order | Variation::Resume => {
                format!("with {} {a} vs {b}", self.variation.name())
            }
        }
    }
}

/// The words for every condition in `varied`, joined: `at 1 vs 2 threads and with
/// PYTHONHASHSEED 1 vs 2`.
pub fn words(varied: &[Varied]) -> String {
    let each: Vec<String> = varied.iter().map(Varied::words).collect();
    each.join(" and ")
}

/// The conditions that differ between run `i` under `a` and run `j` under `b`, in the order
/// the variations were given.
pub fn between((a, i): (&RunSettings, usize), (b, j): (&RunSettings, usize)) -> Vec<Varied> {
    let poison = |p: Option<u8>| format!("0x{:02x}", p.unwrap_or(0));
    let size = |n: Option<usize>| n.map_or("unsplit".to_string(), |n| n.to_string());
    let mut out = Vec::new();
    let mut push = |variation, x: String, y: String| {
        if x != y && !out.iter().any(|v: &Varied| v.variation == variation) {
            out.push(Varied {
                variation,
                values: [x, y],
            });
        }
    };
    let pair = |x: &dyn ToString, y: &dyn ToString| (x.to_string(), y.to_string());
    for v in a.varied.iter().chain(&b.varied).copied() {
        let (x, y) = match v {
            Variation::Threads => pair(&a.controls.threads, &b.controls.threads),
            Variation::Workers => pair(&a.controls.workers, &b.controls.workers),
            Variation::Seed => pair(&a.controls.seed, &b.controls.seed),
            Variation::Hashseed => pair(&(i + 1), &(j + 1)),
            Variation::Poison => (poison(a.knobs.poison), poison(b.knobs.poison)),
            Variation::Batch => match (a.knobs.batch, b.knobs.batch) {
                (Some(x), Some(y)) => pair(&x, &y),
                _ => (size(a.knobs.batch_split), size(b.knobs.batch_split)),
            },
            Variation::WorldSize => (size(a.knobs.world_size), size(b.knobs.world_size)),
            Variation::Process | Variation::Order | Variation::Resume => continue,
        };
        push(v, x, y);
    }
    out
}

/// The record keys (`.bitexact-record.json`'s controls, and the program's platform file's
/// labels) that a variation sets, with the variation.
const RECORDED: [(&str, Variation); 9] = [
    ("threads", Variation::Threads),
    ("torch threads", Variation::Threads),
    ("workers", Variation::Workers),
    ("seed", Variation::Seed),
    ("program seed", Variation::Seed),
    ("hashseed", Variation::Hashseed),
    ("poison", Variation::Poison),
    ("batch", Variation::Batch),
    ("world size", Variation::WorldSize),
];

/// The conditions that differ between two kept runs, from their records' fields (`(label,
/// value)`, as [`crate::platform::record::Side`] reads them): `bitexact diff-trace` of two
/// runs of one `bitexact run --vary threads --keep DIR` names the thread counts.
pub fn from_records(a: &[(String, String)], b: &[(String, String)]) -> Vec<Varied> {
    let find =
        |f: &[(String, String)], k: &str| f.iter().find(|(l, _)| l == k).map(|(_, v)| v.clone());
    let mut out: Vec<Varied> = Vec::new();
    for (key, variation) in RECORDED {
        if let (Some(x), Some(y)) = (find(a, key), find(b, key)) {
            if x != y && !out.iter().any(|v| v.variation == variation) {
                out.push(Varied {
                    variation,
                    values: [x, y],
                });
            }
        }
    }
    out
}

/// Whether a `label A vs B` difference between two records is one a variation in `varied`
/// makes (`threads 1 vs 2`, `torch threads 1 vs 2` under `threads`).
pub fn explains(varied: &[Varied], difference: &str) -> bool {
    RECORDED.iter().any(|(key, v)| {
        difference.starts_with(&format!("{key} ")) && varied.iter().any(|x| x.variation == *v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controls::Controls;

    fn pair(vary: &[Variation]) -> Vec<Varied> {
        let c = Controls {
            thread_pair: [1, 2],
            ..Controls::default()
        };
        let [a, b] = [0, 1].map(|i| RunSettings::for_run(&c, vary, i, false));
        between((&a, 0), (&b, 1))
    }

    #[test]
    fn each_varied_condition_is_named_with_its_two_values() {
        assert_eq!(words(&pair(&[Variation::Threads])), "at 1 vs 2 threads");
        assert_eq!(
            words(&pair(&[Variation::Hashseed])),
            "with PYTHONHASHSEED 1 vs 2"
        );
        assert_eq!(words(&pair(&[Variation::Batch])), "at batch 1 vs 8");
        assert_eq!(
            words(&pair(&[Variation::Poison])),
            "with poison 0xff vs 0x5a"
        );
        assert_eq!(words(&pair(&[Variation::Seed])), "with seed 0 vs 1");
        assert_eq!(
            words(&pair(&[Variation::Threads, Variation::Hashseed])),
            "at 1 vs 2 threads and with PYTHONHASHSEED 1 vs 2"
        );
        // Nothing varied, or a variation that does not differ between two runs: nothing.
        assert!(pair(&[]).is_empty() && pair(&[Variation::Process]).is_empty());
    }

    #[test]
    fn kept_runs_records_name_what_was_varied() {
        let f = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let a = f(&[
            ("cpu", "x"),
            ("threads", "1"),
            ("torch threads", "1"),
            ("seed", "0"),
        ]);
        let b = f(&[
            ("cpu", "x"),
            ("threads", "2"),
            ("torch threads", "2"),
            ("seed", "0"),
        ]);
        let varied = from_records(&a, &b);
        assert_eq!(words(&varied), "at 1 vs 2 threads");
        assert!(explains(&varied, "torch threads 1 vs 2"));
        assert!(!explains(&varied, "cpu x vs y") && !explains(&varied, "seed 0 vs 1"));
        assert!(from_records(&a, &a).is_empty());
    }
}
