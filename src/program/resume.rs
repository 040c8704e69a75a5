//! Resume ≡ uninterrupted (`bitexact run --vary resume --resume-with ARGS -- CMD`): a program
//! that is killed right after a checkpoint and resumed must end exactly as if it had never
//! stopped.
//!
//! Runs 0 and 1 run CMD uninterrupted: they are the control. When they agree, one more run is
//! made of two launches, both planned like any run ([`crate::harness::Planner`]):
//! 1. **the killed launch** (`resume: killed after checkpoint N`) runs CMD and is sent SIGKILL,
//!    as a preemption would, right after its Nth checkpoint is complete (`--resume-at N`,
//!    default 1; which paths are checkpoints and when one is complete: [`super::checkpoint`]);
//! 2. **the resumed launch** (`resume: resumed launch`) runs CMD with ARGS put where
//!    `{resume}` stands in it, or appended, in the same environment and the same
//!    `$BITEXACT_OUT`, holding what the killed launch left there (outputs written before the
//!    kill stay; those the resumed launch writes replace them). Its environment also has
//!    `BITEXACT_RESUME_STEP`: the optimizer steps the killed launch took before its checkpoint.
//!
//! The run's final outputs are compared with run 0's as usual (first divergence, element
//! counts, ULPs; the op trace, which only covers the resumed launch, is left out). They agree:
//! the check passes. They differ: `resume-mismatch` (exit 1). The killed launch ends before
//! its Nth checkpoint: `error`, saying what it wrote. The resumed launch fails: `error`, with
//! its Python exception.
//!
//! **The state the checkpoint forgot.** A PyTorch program records, at every optimizer step,
//! digests of what a bit-exact resume needs (`BITEXACT_STATE=1`; `python/bitexact/
//! _resume_state.py`): generators, optimizer and scheduler state, scaler, parameters and
//! buffers, data-loader state, the step's gradients. The resumed launch's first step is
//! compared with run 0's step of the same number, piece by piece (`resume_explain`), and
//! each piece that differs is named. Programs without torch get the file-level check, and a
//! note says naming the state needs torch.
//!
//! This file holds what was asked (the [`Spec`] and the launch commands); the run that checks
//! it is `resume_check`.

use super::checkpoint::Matcher;
use std::ffi::OsString;

/// Where the resume arguments go in the command (else they are appended).
pub const RESUME: &str = "{resume}";

/// What `--vary resume` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `--resume-with ARGS`, split into words.
    pub args: Vec<String>,
    /// `--resume-at N`: the checkpoint after which the launch is killed (1 = the first).
    pub at: usize,
    /// `--checkpoint GLOB`, or the default names.
    pub matcher: Matcher,
}

/// The command of a launch: the resumed launch gets `args` where [`RESUME`] stands or at the
/// end; every other launch has the placeholder removed.
pub fn command(command: &[OsString], args: Option<&[String]>) -> Vec<OsString> {
    let has = command.iter().any(|a| a == RESUME);
    let mut out = Vec::with_capacity(command.len() + args.map_or(0, <[String]>::len));
    for a in command {
        if a != RESUME {
            out.push(a.clone());
        } else if let Some(args) = args {
            out.extend(args.iter().map(OsString::from));
        }
    }
    if let (false, Some(args)) = (has, args) {
        out.extend(args.iter().map(OsString::from));
    }
    out
}

/// Splits `--resume-with`'s text into words: whitespace separates them; single or double
/// quotes keep spaces inside one (`--resume-with "--init_from=resume --out 'my dir'"`);
/// a backslash outside single quotes escapes the next character. An unclosed quote is an
/// error naming it.
pub fn words(text: &str) -> Result<Vec<String>, String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => cur.extend(chars.next()),
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
                continue;
            }
            (None, c) => cur.push(c),
        }
        any = true;
    }
    if let Some(q) = quote {
        return Err(format!("{text:?}: the quote {q} is never closed"));
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_resume_arguments_go_where_the_placeholder_stands_or_at_the_end() {
        let args = vec!["--init_from=resume".to_string()];
        let cmd = os(&["python", "train.py", "{resume}", "--iters", "20"]);
        assert_eq!(
            command(&cmd, Some(&args)),
            os(&["python", "train.py", "--init_from=resume", "--iters", "20"])
        );
        assert_eq!(
            command(&cmd, None),
            os(&["python", "train.py", "--iters", "20"])
        );
        let plain = os(&["python", "train.py"]);
        assert_eq!(
            command(&plain, Some(&args)),
            os(&["python", "train.py", "--init_from=resume"])
        );
        assert_eq!(command(&plain, None), plain);
    }

    #[test]
    fn resume_words_split_on_spaces_and_keep_quoted_ones() {
        let w = |s: &str| words(s).unwrap();
        assert_eq!(w("--init_from=resume"), ["--init_from=resume"]);
        assert_eq!(w("  --a 1   --b "), ["--a", "1", "--b"]);
        assert_eq!(
            w(r#"--out 'my dir' "x y" a\ b ''"#),
            ["--out", "my dir", "x y", "a b", ""]
        );
        assert!(words("--out 'oops").unwrap_err().contains("never closed"));
    }

    proptest::proptest! {
        #[test]
        fn quoted_words_come_back_as_they_were(ws in proptest::collection::vec("[a-z =/'\"-]{0,8}", 0..6)) {
            let quoted: Vec<String> = ws
                .iter()
                .map(|w| format!("'{}'", w.replace('\'', r#"'"'"'"#)))
                .collect();
            proptest::prop_assert_eq!(words(&quoted.join(" ")).unwrap(), ws);
        }
    }
}
