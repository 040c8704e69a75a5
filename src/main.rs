//! The `bitexact` binary: the command line of [`bitexact::cli`], with the counting allocator.
//! Exit codes: 0 everything that ran passed, 1 a difference, mismatch, missed planted bug or
//! error, 2 bad usage or unreadable input (before any work).

use std::process::ExitCode;

/// Counts heap bytes so the report can show peak memory per run (the Python package's native
/// module, crates/bitexact-python, installs the same allocator).
#[global_allocator]
static ALLOC: bitexact::memory::CountingAlloc = bitexact::memory::CountingAlloc;

fn main() -> ExitCode {
    let me = match std::env::current_exe() {
        Ok(exe) => bitexact::harness::Launcher::Binary(exe),
        Err(e) => {
            eprintln!("error: locating bitexact: {e}");
            return ExitCode::from(2);
        }
    };
    ExitCode::from(bitexact::cli::main(std::env::args_os(), me))
}
