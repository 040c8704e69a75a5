//! Why a run failed, as typed evidence: the judge and the reports tell a timeout from a crash
//! from running out of memory by its [`FailureKind`], never by parsing words. The message is
//! for people; it is capped ([`MESSAGE_MAX`]) because it may quote what a program printed.

use serde::{Deserialize, Serialize};

/// Longest failure message kept, in bytes (a longer one keeps its start and its end, cut in
/// the middle at character boundaries: see [`cap`]).
pub const MESSAGE_MAX: usize = 2048;

/// What kind of failure ended a case's runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The case returned an error.
    Error,
    /// The case panicked.
    Panic,
    /// A process exited with a non-zero status.
    ExitStatus,
    /// A process was killed by a signal (a crash: SIGSEGV, SIGABRT, ...).
    Signal,
    /// A run went past `--timeout` and was killed.
    Timeout,
    /// A run ran out of memory (allocation failure, `--memory-limit`, the OOM killer).
    OutOfMemory,
    /// A run's outputs could not be read (a malformed tensor file, an unreadable file).
    UnreadableOutput,
    /// A run wrote nothing to compare.
    NothingToCompare,
    /// bitexact could not start or talk to a process it needed.
    Harness,
    /// `--trace` (or `--seed-everything`) was asked for and no process of the run could start
    /// it: no torch, a Python that cannot load bitexact's package, or no Python at all.
    TraceUnavailable,
    /// `--vary resume`: the launch to be killed after its Nth checkpoint ended before that
    /// checkpoint was complete.
    NoCheckpoint,
}

impl FailureKind {
    /// Name as printed and in JSON (`exit-status`, `timeout`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Error => "error",
            FailureKind::Panic => "panic",
            FailureKind::ExitStatus => "exit-status",
            FailureKind::Signal => "signal",
            FailureKind::Timeout => "timeout",
            FailureKind::OutOfMemory => "out-of-memory",
            FailureKind::UnreadableOutput => "unreadable-output",
            FailureKind::NothingToCompare => "nothing-to-compare",
            FailureKind::Harness => "harness",
            FailureKind::TraceUnavailable => "trace-unavailable",
            FailureKind::NoCheckpoint => "no-checkpoint",
        }
    }
}

/// A failed run: its kind, which run it was, and what happened in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The index of the run that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<usize>,
    /// What happened (capped at [`MESSAGE_MAX`] bytes).
    pub message: String,
}

impl Failure {
    /// A failure of `kind` saying `message` (capped).
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            run: None,
            message: cap(message.into()),
        }
    }

    /// From an error: a panic when its text says so (see `call_case`), else `kind`.
    pub fn from_error(kind: FailureKind, e: &anyhow::Error) -> Failure {
        let text = format!("{e:#}");
        let kind = if text.starts_with("panicked: ") {
            FailureKind::Panic
        } else {
            kind
        };
        Failure::new(kind, text)
    }

    /// The same failure, attributed to run `index`.
    pub fn in_run(mut self, index: usize) -> Failure {
        self.run = Some(index);
        self
    }

    /// One line for reports: `run 1: <message>`.
    pub fn line(&self) -> String {
        match self.run {
            Some(i) => format!("run {i}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

/// `s` cut to about [`MESSAGE_MAX`] bytes in the middle (`…[N bytes]…`) when longer: for
/// every message that may quote what a program wrote. Its start (what failed) and its end
/// are kept: an error's cause comes last (`reading PATH: File name too long`), and so do a
/// program's last lines of standard error.
pub fn cap(s: String) -> String {
    match crate::quote::middle(&s, MESSAGE_MAX) {
        std::borrow::Cow::Borrowed(_) => s,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_capped_and_panics_recognised() {
        let long = format!("reading {}: File name too long", "é".repeat(MESSAGE_MAX));
        let f = Failure::new(FailureKind::ExitStatus, long);
        assert!(f.message.len() <= MESSAGE_MAX, "{}", f.message.len());
        assert!(f.message.starts_with("reading éé") && f.message.contains("bytes]…"));
        assert!(
            f.message.ends_with("éé: File name too long"),
            "{}",
            f.message
        );
        let p = Failure::from_error(FailureKind::Error, &anyhow::anyhow!("panicked: boom"));
        assert_eq!(p.kind, FailureKind::Panic);
        assert_eq!(p.in_run(2).line(), "run 2: panicked: boom");
        let json = serde_json::to_string(&Failure::new(FailureKind::Timeout, "t")).unwrap();
        assert_eq!(json, r#"{"kind":"timeout","message":"t"}"#);
    }
}
