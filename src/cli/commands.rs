//! The command line's shape: the subcommands and the flags each takes ([`super::flags`] for
//! `report`, `list` and `snapshot`; [`super::run_flags`] for `run`).

use super::flags::{ReportArgs, SnapshotCommand};
use super::run_flags::ProgramArgs;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The parsed command line.
#[derive(Parser)]
#[command(
    name = "bitexact",
    version,
    about = "Determinism test harness for GPU kernels and training steps"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Subcommand)]
pub enum Command {
    /// Run every matching case K times per backend, compare the runs bit for bit, and report.
    Report(ReportArgs),
    /// List every case with its backends and the ops it uses.
    List {
        /// Only cases whose name contains this (comma-separated; `*` globs).
        #[arg(long)]
        filter: Option<String>,
    },
    /// Write or review committed snapshots (see `bitexact snapshot --help`).
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Compare two trace files (from `report --trace FILE`, or the op traces of programs kept
    /// with `run --trace ops --keep DIR`: a run directory or its `.jsonl`) and name the first
    /// diverging op.
    DiffTrace {
        /// First trace.
        a: PathBuf,
        /// Second trace.
        b: PathBuf,
    },
    /// Run any program K times and compare the tensor files it writes into $BITEXACT_OUT
    /// (safetensors, npy, npz, torch.save .pt/.pth; other files as bytes): `bitexact run [flags] -- CMD ARGS...`.
    Run(Box<ProgramArgs>),
    /// Internal: serve a parent's request in a child process (see `crate::isolate`).
    #[command(name = "__child", hide = true)]
    Child,
}
