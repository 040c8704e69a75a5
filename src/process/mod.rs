//! Process plumbing shared by everything that starts children (isolated cases and
//! `--vary process` runs in `crate::isolate`, programs in `crate::program`): each child in its own
//! process group tied to bitexact's life ([`contain`]), the registry of live groups and what
//! happens to them when bitexact is told to stop ([`groups`]), and signal names. It knows
//! nothing of cases, runs or reports.

pub mod groups;
pub use groups::{
    group_leading_children, halt_if_stopping, install_signal_handlers, register, stopping,
};

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Names a signal for messages.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// Puts a command's process in its own process group, tied to the parent's life: it gets
/// SIGKILL when the parent dies, so no child outlives bitexact (its own children are another
/// matter: see [`groups`]). Callers should [`register`] the child's pid once it is spawned.
pub fn contain(cmd: &mut Command) {
    cmd.process_group(0);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; the closure only reads a copied pid.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between fork and prctl: the death signal will never come.
            if libc::getppid() != parent {
                libc::_exit(128 + libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Kills the whole process group led by `child` and reaps `child`.
pub fn kill_group(child: &mut std::process::Child) {
    // SAFETY: kill with a negative pid signals the group the child leads (see `contain`).
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}
