//! Distributed programs: `bitexact run -- torchrun --standalone --nproc-per-node 2 train.py`.
//! bitexact launches the user's torch.distributed command as any program (one process group
//! and container, so `--timeout` and the end of a run kill torchrun's agent and every rank);
//! the ranks write under `$BITEXACT_OUT/rank<R>/` (the Python helper and tracer read `RANK`),
//! and their op traces are compared rank by rank ([`crate::trace::ranks`]).
//!
//! This module holds what is specific to such commands:
//! - **`{nproc}`**: the placeholder for the world size in the command's arguments
//!   (`--nproc-per-node {nproc}` or `--nproc-per-node={nproc}`), replaced by `--world-size N`
//!   (default 2) in every run, and by 1 in the extra run of `--vary world-size`;
//! - **a failed rank**: torchrun's "Root Cause (first observed failure)" summary names the
//!   rank and its exit code; the report says so, with the rank's own last lines of standard
//!   error (torchrun's log lines and its own traceback left out).

use super::Program;
use crate::harness::{Collected, RunSource, RunStart, Runs};
use crate::outcome::WorldSize;
use crate::trace::program::OPS_NAME;
use std::collections::BTreeSet;
use std::ffi::OsString;

/// The world-size placeholder in a command's arguments.
pub const NPROC: &str = "{nproc}";

/// Default world size (`--world-size`).
pub const DEFAULT_WORLD_SIZE: usize = 2;

/// Whether any argument of `command` holds [`NPROC`].
pub fn uses_nproc(command: &[OsString]) -> bool {
    super::batch::uses(command, NPROC)
}

/// `command` with every [`NPROC`] replaced by `world_size`.
pub fn with_world_size(command: &[OsString], world_size: usize) -> Vec<OsString> {
    super::batch::replace(command, NPROC, world_size)
}

/// The failed rank torchrun names as the root cause in `stderr`: `rank 1 (local_rank 1)
/// exited with status 1` or `… was killed by signal 9 (SIGKILL)`; `None` when `stderr` has no
/// such summary (not torchrun, or the summary was cut off).
pub fn failed_rank(stderr: &str) -> Option<(u64, String)> {
    let root = &stderr[stderr.rfind("Root Cause (first observed failure)")?..];
    let field = |name: &str| {
        root.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
            .filter(|v| !v.is_empty())
    };
    let rank = field("rank")?;
    let code = field("exitcode").unwrap_or_default();
    let code = code.split_whitespace().next().unwrap_or("");
    let how = match code.parse::<i32>() {
        Ok(c) if c < 0 => format!(
            "was killed by signal {} ({})",
            -c,
            crate::process::signal_name(-c)
        ),
        Ok(c) => format!("exited with status {c}"),
        Err(_) => "failed".to_string(),
    };
    let number = rank.split_whitespace().next()?.parse().ok()?;
    let rank = rank.replace("local_rank: ", "local_rank ");
    Some((number, format!("rank {rank} {how}")))
}

/// The lines of `stderr` rank `rank` wrote: before torchrun reports the failure (its `…
/// api.py:…] failed (exitcode …` line), without torchrun's own log lines (`W1124
/// 21:40:07.436000 27424 torch/distributed/…`), and, when torch prefixes the ranks' lines
/// (`[rank1]: …`), only that rank's (the others mostly say that their peer went away).
pub fn ranks_stderr(stderr: &str, rank: u64) -> String {
    let end = stderr
        .lines()
        .position(|l| is_launcher_log(l) && l.contains("failed (exitcode"))
        .unwrap_or(usize::MAX);
    let kept: Vec<&str> = stderr
        .lines()
        .take(end)
        .filter(|l| !is_launcher_log(l))
        .collect();
    let prefix = format!("[rank{rank}]:");
    let own: Vec<&str> = kept
        .iter()
        .copied()
        .filter(|l| l.starts_with(&prefix))
        .collect();
    if own.is_empty() { kept } else { own }.join("\n")
}

/// A hint for a rank that `how` failed with the lines `own` it wrote: a rank aborted by
/// `terminate called without an active exception` is most likely torch's gloo teardown at
/// exit (a worker thread releasing a work that holds a Python object while the interpreter
/// finalizes), which the script can avoid.
pub fn hint(how: &str, own: &str) -> Option<&'static str> {
    (how.contains("(SIGABRT)") && own.contains("terminate called without an active exception"))
        .then_some(
            "a rank aborted this way is most likely torch's gloo teardown racing Python's \
             finalization (see the discussion in pytorch/pytorch#179291); ending each rank \
             with os._exit(0) after dist.destroy_process_group() avoids it",
        )
}

/// Whether `line` is a log line of torch.distributed's launcher: `W1124 21:40:07.436000 27424
/// torch/distributed/…`.
fn is_launcher_log(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let level = words.next().unwrap_or("");
    let starts = level.len() == 5
        && level.starts_with(['I', 'W', 'E'])
        && level[1..].chars().all(|c| c.is_ascii_digit());
    starts && line.contains("torch/distributed/")
}

/// `--vary world-size`: one more run under run 0's settings with 1 process, compared with run 0
/// (`first`, `--world-size N` processes) on what both wrote: the outputs both have, and the op
/// traces of the ranks both have (rank 0), which name the first op that differs. Outputs only
/// the N-process run wrote (other ranks' files) are counted, not compared.
pub(super) fn check_world_size(
    source: &dyn RunSource,
    program: &Program,
    first: &Collected,
    planner: &mut dyn Runs,
) -> WorldSize {
    let n = program.world_size;
    let mut settings = planner.settings(0, false);
    settings.knobs.world_size = Some(1);
    let mut w = WorldSize {
        sizes: [n, 1],
        ..WorldSize::default()
    };
    let told = RunStart {
        purpose: "world size: 1 process",
        index: 0,
        of: 1,
    };
    let other = match planner.one(source, &settings, 0, told) {
        Ok(c) => c,
        Err(f) => {
            w.summary = format!(
                "world size: the run with 1 process failed, so world sizes {n} and 1 were not compared: {}",
                f.message
            );
            return w;
        }
    };
    let mut differing = Vec::new();
    let mut only_one = 0;
    let both = crate::harness::explain::union(&first.digests, &other.digests);
    for (name, ours, theirs) in both.filter(|(k, _, _)| *k != OPS_NAME) {
        match (ours, theirs) {
            (Some(x), Some(y)) => {
                w.compared += 1;
                if x != y {
                    differing.push(name.to_string());
                }
            }
            (Some(_), None) => w.only_larger += 1,
            _ => only_one += 1,
        }
    }
    if let (Some(a), Some(b)) = (&first.trace, &other.trace) {
        let ranks: BTreeSet<u64> = b.iter().map(|e| e.rank).collect();
        let (a, b) = (computation(a, &ranks), computation(b, &ranks));
        w.first_op = crate::trace::first_divergence(&a, &b).map(|d| d.place().to_string());
    }
    let depends = !differing.is_empty() || w.first_op.is_some() || only_one > 0;
    w.depends = Some(depends);
    let mut s = if depends {
        format!("world size: results depend on it ({n} vs 1 processes, information)")
    } else {
        format!("world size: results identical with {n} and 1 processes")
    };
    s.push_str(&format!("; {} outputs compared", w.compared));
    if let Some(name) = differing.first() {
        let how = match (first.loader.load(name), other.loader.load(name)) {
            (Ok(x), Ok(y)) => crate::diff::explain(name, [0, 1], &x, &y).summary(),
            _ => name.clone(),
        };
        s.push_str(&format!(", {} differ, first {how}", differing.len()));
    }
    if let Some(op) = &w.first_op {
        s.push_str(&format!("; first op that differs: {op}"));
    }
    if w.only_larger > 0 {
        s.push_str(&format!(
            "; {} outputs only with {n} processes (other ranks), not compared",
            w.only_larger
        ));
    }
    if only_one > 0 {
        s.push_str(&format!("; {only_one} outputs only with 1 process"));
    }
    differing.truncate(8);
    w.differing = differing;
    w.summary = s;
    w
}

/// The records of `trace` a world-size comparison looks at: those of `ranks`, from each rank's
/// first op inside a module on (set-up before it, such as DDP's parameter broadcast and shape
/// checks, differs with the world size by construction), without collectives whose shapes
/// follow the world size ([`per_rank_list`]).
fn computation(
    trace: &[crate::trace::TraceEntry],
    ranks: &BTreeSet<u64>,
) -> Vec<crate::trace::TraceEntry> {
    let mut started = BTreeSet::new();
    trace
        .iter()
        .filter(|e| {
            if !e.module.is_empty() {
                started.insert(e.rank);
            }
            ranks.contains(&e.rank) && started.contains(&e.rank) && !per_rank_list(&e.op)
        })
        .cloned()
        .collect()
}

/// Whether collective `op` takes or returns one tensor (or slice) per rank (`allgather_`,
/// `reduce_scatter_`, `alltoall_`, …): its shapes follow the world size, so a world-size comparison skips it (DDP's
/// set-up checks gather from every rank before any computation).
fn per_rank_list(op: &str) -> bool {
    crate::trace::ranks::is_collective(op)
        && ["gather", "scatter", "alltoall", "all_to_all"]
            .iter()
            .any(|w| op.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard error of `torchrun --standalone --nproc-per-node 2` whose rank 1 raised
    /// (torch 2.15, shortened).
    const TORCHRUN: &str = "W1124 21:40:04.1 27424 torch/distributed/run.py:982] *****
Traceback (most recent call last):
  File \"/tmp/sc/f.py\", line 4, in <module>
    raise RuntimeError(\"rank one broke\")
RuntimeError: rank one broke
W1124 21:40:07.436000 27424 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 27431 closing signal SIGTERM
E1124 21:40:07.452000 27424 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 27432) of binary: python
Traceback (most recent call last):
  File \"/venv/bin/torchrun\", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 27431)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_21:40:07
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 27432)
  error_file: <N/A>
============================================================";

    #[test]
    fn the_root_cause_rank_is_named_with_its_own_stderr() {
        let (rank, what) = failed_rank(TORCHRUN).unwrap();
        assert_eq!(
            (rank, what.as_str()),
            (1, "rank 1 (local_rank 1) exited with status 1")
        );
        let own = ranks_stderr(TORCHRUN, 1);
        assert!(own.ends_with("RuntimeError: rank one broke"), "{own}");
        assert!(!own.contains("torch/distributed"), "{own}");
        let killed = TORCHRUN.replace("exitcode  : 1 (pid", "exitcode  : -9 (pid");
        assert!(failed_rank(&killed)
            .unwrap()
            .1
            .contains("killed by signal 9 (SIGKILL)"));
        // torch prefixes each rank's lines: only the failed rank's are kept.
        let prefixed = "[rank1]: RuntimeError: mine\n[rank0]: RuntimeError: peer closed";
        assert_eq!(ranks_stderr(prefixed, 1), "[rank1]: RuntimeError: mine");
        assert_eq!(failed_rank("Traceback: plain python"), None);
    }

    #[test]
    fn a_rank_aborted_at_exit_gets_the_gloo_teardown_hint() {
        let aborted = TORCHRUN
            .replace("exitcode  : 1 (pid", "exitcode  : -6 (pid")
            .replace(
                "RuntimeError: rank one broke",
                "terminate called without an active exception",
            );
        let (rank, how) = failed_rank(&aborted).unwrap();
        assert!(how.contains("(SIGABRT)"), "{how}");
        let h = hint(&how, &ranks_stderr(&aborted, rank)).unwrap();
        assert!(h.contains("os._exit(0)"), "{h}");
        // Another abort, or the same words without SIGABRT, gets none.
        assert_eq!(hint(&how, "Assertion `x' failed."), None);
        let (_, exited) = failed_rank(TORCHRUN).unwrap();
        assert_eq!(
            hint(&exited, "terminate called without an active exception"),
            None
        );
    }

    #[test]
    fn nproc_is_replaced_in_every_argument() {
        let cmd: Vec<OsString> = ["torchrun", "--nproc-per-node={nproc}", "t.py"]
            .map(OsString::from)
            .to_vec();
        assert!(uses_nproc(&cmd));
        assert_eq!(with_world_size(&cmd, 1)[1], "--nproc-per-node=1");
        assert!(!uses_nproc(&with_world_size(&cmd, 2)));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in ".{0,400}") {
            let _ = failed_rank(&s);
            let _ = ranks_stderr(&s, 1);
            let with = format!("Root Cause (first observed failure):\n{s}");
            let _ = failed_rank(&with);
        }
    }
}
