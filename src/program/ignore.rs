//! Ignore rules of run mode: what a program writes that is not a result.
//!
//! - **Outputs** by glob (`--ignore 'logs/*'`, `--ignore 'ckpt.pt:optimizer.*'`; see
//!   `crate::glob`): a matching output name (a file path, or `path:key` for a tensor inside
//!   a file) is left out of the comparison.
//! - **Standard output** by regular expression (`--stdout-ignore 'ms/batch.*'`): the matched
//!   part of every line is replaced by `<ignored>` before the output is hashed and compared, so
//!   a timing column does not make every run differ while the rest of the line still counts.
//!
//! The report says what each rule ignored in run 0 ([`Ignored`]).

use crate::digest::Digest;
pub use crate::outcome::Ignored;
use anyhow::{anyhow, Context, Result};
use regex::bytes::Regex;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

/// What replaces a masked part of a standard output line.
pub const MASK: &[u8] = b"<ignored>";

/// Lines longer than this are split into pieces of this size before masking (a program that
/// prints gigabytes without a newline keeps bitexact's memory bounded).
const MAX_LINE: u64 = 1 << 20;

/// The validated ignore rules.
#[derive(Clone, Debug, Default)]
pub struct Ignore {
    outputs: Vec<String>,
    stdout: Vec<(String, Regex)>,
}

impl Ignore {
    /// Rules from output globs and standard-output regular expressions; a malformed
    /// expression is an error naming it.
    pub fn new(outputs: &[String], stdout: &[String]) -> Result<Ignore> {
        let stdout = stdout
            .iter()
            .map(|p| {
                Regex::new(p)
                    .map(|r| (p.clone(), r))
                    .map_err(|e| anyhow!("--stdout-ignore {p:?}: not a regular expression: {e}"))
            })
            .collect::<Result<_>>()?;
        if let Some(p) = outputs.iter().find(|p| p.is_empty()) {
            return Err(anyhow!("--ignore {p:?}: an empty pattern"));
        }
        Ok(Ignore {
            outputs: outputs.to_vec(),
            stdout,
        })
    }

    /// Whether there are output rules (globs).
    pub fn filters_outputs(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// Whether there are standard-output rules.
    pub fn masks_stdout(&self) -> bool {
        !self.stdout.is_empty()
    }

    /// Leaves out every output a glob matches; returns what each glob left out.
    pub fn filter(&self, digests: &mut Vec<(String, Digest)>) -> Vec<Ignored> {
        let mut counts = vec![0usize; self.outputs.len()];
        digests.retain(|(name, _)| {
            match self
                .outputs
                .iter()
                .position(|p| crate::glob::matches(p, name))
            {
                Some(i) => {
                    counts[i] += 1;
                    false
                }
                None => true,
            }
        });
        self.outputs
            .iter()
            .zip(counts)
            .map(|(p, n)| Ignored {
                rule: format!("output {p}"),
                outputs: n,
                lines: 0,
            })
            .collect()
    }

    /// Copies the standard output at `from` to `to` with every match masked; returns the
    /// lines each expression masked.
    pub fn mask_stdout(&self, from: &Path, to: &Path) -> Result<Vec<Ignored>> {
        let src = std::fs::File::open(from).with_context(|| format!("{}", from.display()))?;
        let mut reader = std::io::BufReader::new(src);
        let mut out =
            BufWriter::new(std::fs::File::create(to).with_context(|| format!("{}", to.display()))?);
        let mut counts = vec![0u64; self.stdout.len()];
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = std::io::Read::take(&mut reader, MAX_LINE).read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            let mut masked = std::borrow::Cow::Borrowed(&line[..]);
            for (i, (_, re)) in self.stdout.iter().enumerate() {
                if re.is_match(&masked) {
                    counts[i] += 1;
                    masked = std::borrow::Cow::Owned(re.replace_all(&masked, MASK).into_owned());
                }
            }
            out.write_all(&masked)?;
        }
        out.flush()?;
        Ok(self
            .stdout
            .iter()
            .zip(counts)
            .map(|((p, _), n)| Ignored {
                rule: format!("stdout {p}"),
                outputs: 0,
                lines: n,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_filtered_and_counted() {
        let ig = Ignore::new(&["logs/*".into(), "*:opt.*".into()], &[]).unwrap();
        let d = Digest([0; 32]);
        let mut v: Vec<(String, Digest)> =
            ["logs/a", "logs/b/c", "w.npy", "ck.pt:opt.m", "ck.pt:w"]
                .iter()
                .map(|n| (n.to_string(), d))
                .collect();
        let counts = ig.filter(&mut v);
        let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["w.npy", "ck.pt:w"]);
        assert_eq!((counts[0].outputs, counts[1].outputs), (2, 1));
    }

    #[test]
    fn stdout_matches_are_masked_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(
            &a,
            "loss 1.5 | 31.2 ms/batch\nloss 1.4 | 29.9 ms/batch\ndone",
        )
        .unwrap();
        let ig = Ignore::new(&[], &[r"[0-9.]+ ms/batch".into()]).unwrap();
        let counts = ig.mask_stdout(&a, &b).unwrap();
        assert_eq!(
            std::fs::read_to_string(&b).unwrap(),
            "loss 1.5 | <ignored>\nloss 1.4 | <ignored>\ndone"
        );
        assert_eq!(counts[0].lines, 2);
        let e = Ignore::new(&[], &["(".into()]).unwrap_err().to_string();
        assert!(e.contains("--stdout-ignore \"(\""), "{e}");
    }
}
