//! The live child process groups, and what happens to them when bitexact is told to stop.
//!
//! Every child bitexact starts leads its own process group ([`super::contain`]), so a terminal's
//! Ctrl-C (SIGINT to the foreground group) or a CI runner's SIGTERM reaches bitexact but not
//! its children. [`install_signal_handlers`] makes SIGTERM, SIGINT and SIGHUP kill every
//! child process group (grandchildren included) before bitexact exits with `128 + signal`:
//! the groups registered here ([`register`], done by `crate::isolate` for isolated cases
//! and `--vary process` runs) and, to also cover children started elsewhere with
//! [`super::contain`] (`bitexact run` programs), every direct child that leads its own group,
//! found in `/proc`.
//!
//! **SIGKILL** cannot be caught: then only `PR_SET_PDEATHSIG` acts, and it kills the *direct*
//! children only. A grandchild (e.g. `sh -c 'sleep 100 & …'` under `bitexact run`) is not
//! signalled; it is re-parented to init (or the nearest subreaper) and keeps running until
//! it exits by itself or someone kills its process group (`kill -KILL -PGID`; the group id
//! is the pid of the direct child bitexact started).

use std::sync::atomic::{AtomicI32, Ordering};

/// Slots of the registry: more live children than this are still killed through `/proc`.
const SLOTS: usize = 1024;
static GROUPS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
/// Write end of the self-pipe the signal handler writes the signal number to (-1: none).
static PIPE: AtomicI32 = AtomicI32::new(-1);
/// Set once a stop signal arrived: the watcher is cleaning up and will exit the process.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether bitexact is being stopped by a signal. The main thread checks it before it reports
/// and exits, so a child killed by the stop path cannot make bitexact exit 1 first (the
/// watcher exits with `128 + signal` once everything is cleaned up).
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Parks the calling thread for good when bitexact is being stopped by a signal: the watcher
/// kills every child, removes every run directory and exits the process, and a thread that went
/// on (to collect a killed run's files, or to start the next run) could make a directory again
/// after the watcher removed it.
pub fn halt_if_stopping() {
    while stopping() {
        std::thread::park();
    }
}

/// A registered process group; unregistered when dropped (after the child is reaped).
pub struct Registered(Option<usize>);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            GROUPS[i].store(0, Ordering::SeqCst);
        }
    }
}

/// Registers the process group `pgid` (a child's pid, see [`super::contain`]) to be killed
/// if bitexact is stopped by a signal. Lock-free, so the stop path can read it at any time.
pub fn register(pgid: i32) -> Registered {
    let slot = (pgid > 0)
        .then(|| {
            GROUPS.iter().position(|g| {
                g.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            })
        })
        .flatten();
    Registered(slot)
}

/// The process groups registered now.
pub fn registered() -> Vec<i32> {
    GROUPS
        .iter()
        .map(|g| g.load(Ordering::SeqCst))
        .filter(|&g| g > 0)
        .collect()
}

/// Direct children of this process that lead their own process group (pid == pgid).
pub fn group_leading_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(me)
                && f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pid)
        })
        .collect()
}

/// Kills every registered child process group and every direct child leading its own group;
/// returns how many groups were signalled.
pub fn kill_all_children() -> usize {
    let mut groups = registered();
    groups.extend(group_leading_children());
    groups.sort_unstable();
    groups.dedup();
    for &g in &groups {
        // SAFETY: kill with a negative pid signals that process group; no memory is touched.
        unsafe { libc::kill(-g, libc::SIGKILL) };
    }
    groups.len()
}

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE.load(Ordering::SeqCst);
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; `b` lives for the call.
    unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
}

/// Installs handlers for SIGTERM, SIGINT and SIGHUP: a watcher thread then kills every child
/// process group ([`kill_all_children`]) and exits with `128 + signal`. Idempotent.
pub fn install_signal_handlers() -> std::io::Result<()> {
    if PIPE.load(Ordering::SeqCst) >= 0 {
        return Ok(());
    }
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    PIPE.store(fds[1], Ordering::SeqCst);
    std::thread::Builder::new()
        .name("bitexact-signals".into())
        .spawn(move || watch(fds[0]))?;
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only calls write(2) is valid.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The watcher: waits for a signal number on the pipe, kills the children and exits.
fn watch(fd: i32) {
    let mut b = 0u8;
    loop {
        // SAFETY: reads one byte into a live local.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
    let sig = i32::from(b);
    STOPPING.store(true, Ordering::SeqCst);
    let n = kill_all_children();
    // Every run's container (cgroup, marker) and temporary directory, as the normal path does.
    crate::cleanup::run_all();
    eprintln!(
        "bitexact: stopped by {}; killed {n} child process group(s)",
        super::signal_name(sig)
    );
    // SAFETY: _exit ends the process at once, without running other threads' destructors
    // (which could deadlock on locks the interrupted threads hold).
    unsafe { libc::_exit(128 + sig) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_and_unregister() {
        let g = register(999_999);
        assert!(registered().contains(&999_999));
        drop(g);
        assert!(!registered().contains(&999_999));
        assert!(register(0).0.is_none());
    }
}
