//! What must not outlive bitexact, registered while it lives so that every way out cleans it
//! up the same way: the normal end of a run, `--timeout`, and SIGTERM / SIGINT / SIGHUP (the
//! signal watcher calls [`run_all`] before exiting).
//!
//! - **Containers** of runs ([`Container`]): a cgroup (v2) per run where the machine allows
//!   one, and always an environment marker every descendant inherits; [`Container::kill_all`]
//!   kills every process in the cgroup and every process carrying the marker, until none is
//!   left.
//! - **Directories** ([`register_dir`]): run directories in TMPDIR, removed on a signal (the
//!   normal path removes them when they are dropped).
//!
//! Without cgroups (no writable cgroup2 mount), a descendant that both leaves the run's process
//! group and replaces its environment (`setsid` then `execve` with a cleared environment) can
//! escape the sweep; with a cgroup nothing can (a process cannot leave its cgroup without
//! write access to another, and bitexact kills the whole cgroup).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static CONTAINERS: Mutex<Vec<(Option<PathBuf>, String)>> = Mutex::new(Vec::new());

/// A registered directory, unregistered when dropped.
pub struct DirGuard(PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let mut d = DIRS.lock().unwrap_or_else(|e| e.into_inner());
        d.retain(|p| *p != self.0);
    }
}

/// Registers `dir` to be removed if bitexact is stopped by a signal.
pub fn register_dir(dir: &Path) -> DirGuard {
    let mut d = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    d.push(dir.to_path_buf());
    DirGuard(dir.to_path_buf())
}

/// Kills every registered container's processes and removes every registered directory (the
/// signal path).
pub fn run_all() {
    let containers = CONTAINERS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (cgroup, marker) in &containers {
        kill(cgroup.as_deref(), marker);
    }
    for d in DIRS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Where a run's processes live: a cgroup when one could be made, and a marker.
pub struct Container {
    cgroup: Option<PathBuf>,
    procs: Option<CString>,
    marker: String,
}

impl Container {
    /// A new container: a child cgroup of bitexact's own cgroup (v2) when it can be created,
    /// and a random marker.
    pub fn new() -> Container {
        let marker = format!("{}-{:016x}", std::process::id(), random_u64());
        let cgroup = own_cgroup().and_then(|parent| {
            let dir = parent.join(format!("bitexact-{marker}"));
            std::fs::create_dir(&dir).ok()?;
            Some(dir)
        });
        let procs = cgroup.as_ref().and_then(|d| {
            CString::new(d.join("cgroup.procs").into_os_string().into_encoded_bytes()).ok()
        });
        let c = Container {
            cgroup,
            procs,
            marker,
        };
        CONTAINERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((c.cgroup.clone(), c.marker.clone()));
        c
    }

    /// The marker every process of the run inherits (as [`crate::protocol::RUN_ID_ENV`]).
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// What contains the run, in words (`cgroup v2`, or `process scan`).
    #[cfg(test)]
    fn mechanism(&self) -> &'static str {
        if self.cgroup.is_some() {
            "cgroup v2"
        } else {
            "process scan"
        }
    }

    /// The `cgroup.procs` file a child writes itself into ([`enter`]), when there is a cgroup.
    pub fn procs(&self) -> Option<CString> {
        self.procs.clone()
    }

    /// Kills every process of the run (cgroup and marker), reaping the ones re-parented to
    /// bitexact, until none is left.
    pub fn kill_all(&self) {
        kill(self.cgroup.as_deref(), &self.marker);
    }
}

/// Called in a child between fork and exec: moves it into the cgroup whose `cgroup.procs` is
/// `procs` (see [`Container::procs`]). Only async-signal-safe calls (open, write, close); a
/// cgroup that cannot be entered leaves the child contained by its marker only.
pub fn enter(procs: Option<&CString>) -> std::io::Result<()> {
    {
        let Some(path) = procs else {
            return Ok(());
        };
        // SAFETY: open/write/close on a NUL-terminated path we own; no allocation.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Ok(()); // contained by the marker only
            }
            libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
        Ok(())
    }
}

impl Default for Container {
    fn default() -> Container {
        Container::new()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.kill_all();
        if let Some(d) = &self.cgroup {
            let _ = std::fs::remove_dir(d);
        }
        let mut c = CONTAINERS.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|(_, m)| *m != self.marker);
    }
}

/// Kills the processes of a container until none is left (at most a few seconds).
fn kill(cgroup: Option<&Path>, marker: &str) {
    if let Some(d) = cgroup {
        let _ = std::fs::write(d.join("cgroup.kill"), "1");
    }
    for round in 0..200 {
        let mut pids = cgroup.map(cgroup_pids).unwrap_or_default();
        pids.extend(marked_pids(marker));
        pids.sort_unstable();
        pids.dedup();
        if pids.is_empty() {
            return;
        }
        for &pid in &pids {
            // SAFETY: kill and a non-blocking waitpid on a pid we found; waitpid only reaps it
            // if it is our (re-parented) child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
        std::thread::sleep(Duration::from_millis(if round < 10 { 1 } else { 10 }));
    }
}

/// The processes in a cgroup.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Live processes (not zombies) whose initial environment holds `MARKER_ENV=marker`.
fn marked_pids(marker: &str) -> Vec<i32> {
    let needle = format!("{}={marker}", crate::protocol::RUN_ID_ENV);
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .filter(|&pid| {
            // A zombie only needs reaping (done above when it is ours), not killing.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                != Some(true)
                || {
                    // SAFETY: reaps the zombie if it is our child; harmless otherwise.
                    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                    false
                }
        })
        .collect()
}

/// This process's cgroup (v2) directory, when a cgroup2 file system is mounted writable.
fn own_cgroup() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let point = left.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(point))
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(mount.join(rel.trim_start_matches('/')))
}

/// Eight random bytes from the kernel (zero if it has none to give).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into the local buffer.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_kills_a_setsid_daemon_by_marker_or_cgroup() {
        let c = Container::new();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "setsid sh -c 'sleep 60' & sleep 0.2"])
            .env(crate::protocol::RUN_ID_ENV, c.marker());
        let status = cmd.status().unwrap();
        assert!(status.success());
        assert!(!marked_pids(c.marker()).is_empty(), "the daemon runs");
        c.kill_all();
        assert!(marked_pids(c.marker()).is_empty(), "{}", c.mechanism());
    }
}
