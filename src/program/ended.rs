//! Why a program run that did not succeed failed ([`super::spawn::Ended`]): in words (exit
//! status or signal, the Python exception that ended it, the last lines of standard error,
//! a torch.distributed launch's failed rank) and as a typed failure.

use super::spawn::Ended;
use crate::outcome::{Failure, FailureKind};
use crate::process;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// Why a run failed, in words: exit status or signal, the Python exception that ended it (when
/// it exited with status 1, Python's status for an uncaught exception, and its standard error
/// ends with a traceback), and the last lines of standard error.
pub fn failure(e: &Ended, timeout: Option<Duration>) -> Option<String> {
    if e.timed_out {
        return Some(format!(
            "timed out after {:.1}s (--timeout {:.1}); its process group was killed",
            e.seconds,
            timeout.map_or(0.0, |t| t.as_secs_f64())
        ));
    }
    if e.status.success() || e.stopped {
        return None;
    }
    let what = match (e.status.code(), e.status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s} ({})", process::signal_name(s)),
        _ => "failed".to_string(),
    };
    // `: ValueError: bad value`, for a process that exited with status 1 (`how`) after a
    // traceback in `stderr`.
    let raised = |how: &str, stderr: &str| {
        how.ends_with("exited with status 1")
            .then(|| super::python_error::exception(stderr))
            .flatten()
            .map(|x| format!(": {}", crate::quote::middle(&x, STDERR_LINE_MAX)))
            .unwrap_or_default()
    };
    // A torch.distributed launch names its failed rank: said first, with that rank's lines.
    if let Some((n, rank)) = super::distributed::failed_rank(&e.stderr_tail) {
        let own = super::distributed::ranks_stderr(&e.stderr_tail, n);
        let hint = super::distributed::hint(&rank, &own)
            .map(|h| format!("; hint: {h}"))
            .unwrap_or_default();
        let exception = raised(&rank, &own);
        let tail = last_lines(&own);
        return Some(format!(
            "{rank} (torchrun {what}){exception}{hint}; last lines of its stderr:\n      {tail}"
        ));
    }
    let exception = raised(&what, &e.stderr_tail);
    let tail = last_lines(&e.stderr_tail);
    Some(if tail.is_empty() {
        format!("{what} (nothing on stderr)")
    } else {
        format!("{what}{exception}; last lines of stderr:\n      {tail}")
    })
}

/// The last 5 non-empty lines of `text`, indented for a report.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // Each cut in the middle (a long path it quotes keeps its start and end), so all five fit
    // in a failure message and the error that ends a line is never lost.
    let last = lines[lines.len().saturating_sub(5)..].iter();
    let shown: Vec<_> = last
        .map(|l| crate::quote::middle(l, STDERR_LINE_MAX))
        .collect();
    shown.join("\n      ")
}

/// The longest line of a program's standard error quoted whole in a failure message.
const STDERR_LINE_MAX: usize = 360;

/// The typed failure of a run that did not succeed: [`failure`]'s words, and its kind.
pub fn failed(e: &Ended, timeout: Option<Duration>, memory_limited: bool) -> Option<Failure> {
    let why = failure(e, timeout)?;
    let kind = if e.timed_out {
        FailureKind::Timeout
    } else if e.status.signal() == Some(libc::SIGKILL) && memory_limited
        || e.stderr_tail.contains("MemoryError")
        || e.stderr_tail.contains("out of memory")
    {
        FailureKind::OutOfMemory
    } else if e.status.signal().is_some() {
        FailureKind::Signal
    } else {
        FailureKind::ExitStatus
    };
    Some(Failure::new(kind, why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::ExitStatus;

    fn ended(code: i32, stderr: &str) -> Ended {
        Ended {
            status: ExitStatus::from_raw(code << 8),
            seconds: 1.0,
            peak_rss_bytes: None,
            stderr_tail: stderr.into(),
            timed_out: false,
            stopped: false,
        }
    }

    const RAISED: &str = "Traceback (most recent call last):
  File \"/tmp/t.py\", line 6, in <module>
    y = cm(x)
AssertionError: UnspecializedNNModuleVariable(Sequential) is already tracked for mutation.

from user code:

Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace
";

    #[test]
    fn a_python_exception_is_named_before_the_last_lines() {
        let why = failure(&ended(1, RAISED), None).unwrap();
        assert!(
            why.starts_with(
                "exited with status 1: AssertionError: UnspecializedNNModuleVariable(Sequential) \
                 is already tracked for mutation.; last lines of stderr:\n      "
            ),
            "{why}"
        );
        assert!(why.ends_with("Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"));
        // Another status is not Python's for an uncaught exception: no name, the tail as before.
        let why = failure(&ended(3, RAISED), None).unwrap();
        assert!(
            why.starts_with("exited with status 3; last lines of stderr:"),
            "{why}"
        );
        let why = failure(&ended(1, "boom\n"), None).unwrap();
        assert_eq!(
            why,
            "exited with status 1; last lines of stderr:\n      boom"
        );
    }

    #[test]
    fn a_failed_ranks_exception_is_named_from_its_own_lines() {
        let stderr = "[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank0]:   File \"/tmp/f.py\", line 7, in <module>
[rank1]:   File \"/tmp/f.py\", line 4, in <module>
[rank1]:     raise RuntimeError(\"rank one broke\")
[rank0]: torch.distributed.DistBackendError: peer closed
[rank1]: RuntimeError: rank one broke
E1124 21:40:07.452000 27424 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 27432) of binary: python
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 27432)
";
        let why = failure(&ended(1, stderr), None).unwrap();
        assert!(
            why.starts_with(
                "rank 1 (local_rank 1) exited with status 1 (torchrun exited with status 1): \
                 RuntimeError: rank one broke; last lines of its stderr:"
            ),
            "{why}"
        );
    }
}
