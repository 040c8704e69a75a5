//! One run of an external program: the environment contract, its own process group (killed as
//! a whole on timeout, tied to bitexact's life), an optional address-space limit, standard
//! output captured to a file when compared, the tail of standard error kept for messages, and
//! the peak resident set size from `wait4`.

use crate::cleanup;
use crate::process;
use anyhow::{anyhow, Context, Result};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Bytes of standard error kept for messages (the end of it).
const STDERR_TAIL: usize = 16 * 1024;

/// How to start one run.
pub struct Spawn<'a> {
    /// Program and arguments.
    pub command: &'a [OsString],
    /// Variables set for this run (on top of bitexact's own environment).
    pub env: &'a BTreeMap<String, String>,
    /// Capture standard output into this file (else it goes to /dev/null).
    pub stdout: Option<&'a Path>,
    /// Kill the run's process group after this long.
    pub timeout: Option<Duration>,
    /// Address-space limit in MiB (`RLIMIT_AS`).
    pub memory_limit_mb: Option<u64>,
    /// Set by the output watcher to stop the run early (its whole process group is killed).
    pub stop: Option<&'a std::sync::atomic::AtomicBool>,
    /// Set to the process group's leader (the program) once it started, for a watcher that
    /// kills the group itself (`--vary resume`'s checkpoint watch).
    pub pid: Option<&'a std::sync::atomic::AtomicI32>,
}

/// How one run ended.
pub struct Ended {
    /// Exit status.
    pub status: ExitStatus,
    /// Wall time.
    pub seconds: f64,
    /// Peak resident set size of the program (and the children it waited for), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// The last lines of standard error.
    pub stderr_tail: String,
    /// Whether it was killed for exceeding the timeout.
    pub timed_out: bool,
    /// Whether bitexact stopped it early (its outputs already differed from run 0's).
    pub stopped: bool,
}

/// Whether `program` can be started: a path that exists, or a name found on `PATH`. Returns
/// what would run, so a missing program is reported before any work (exit 2).
pub fn resolve(program: &OsString) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |m: &std::fs::Metadata| m.is_file() && m.permissions().mode() & 0o111 != 0;
    let p = Path::new(program);
    if p.as_os_str().is_empty() {
        return Err(anyhow!("the command after -- is empty"));
    }
    if p.components().count() > 1 {
        return match std::fs::metadata(p) {
            Ok(m) if runnable(&m) => Ok(p.to_path_buf()),
            Ok(m) if m.is_file() => Err(anyhow!("{}: not executable", p.display())),
            Ok(_) => Err(anyhow!("{}: not a file", p.display())),
            Err(e) => Err(anyhow!("{}: {e}", p.display())),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| std::fs::metadata(c).is_ok_and(|m| runnable(&m)))
        .ok_or_else(|| anyhow!("{}: command not found on PATH", p.display()))
}

/// Starts the run and waits for it (or its timeout).
pub fn run(s: &Spawn) -> Result<Ended> {
    let (program, args) = s
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no command to run"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).envs(s.env).stdin(Stdio::null());
    cmd.stdout(match s.stdout {
        Some(path) => Stdio::from(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        None => Stdio::null(),
    });
    cmd.stderr(Stdio::piped());
    // Every process of the run, however it leaves the group or session, is found again by
    // its cgroup or its marker and killed when the run ends (see `crate::cleanup`).
    let container = cleanup::Container::new();
    cmd.env(crate::protocol::RUN_ID_ENV, container.marker());
    let procs = container.procs();
    // SAFETY: `enter` makes only async-signal-safe calls on a path prepared before fork.
    unsafe {
        cmd.pre_exec(move || cleanup::enter(procs.as_ref()));
    }
    process::contain(&mut cmd);
    if let Some(mb) = s.memory_limit_mb {
        limit_memory(&mut cmd, mb);
    }
    process::halt_if_stopping(); // no new run once a stop began
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", program.to_string_lossy()))?;
    let rx = stderr_tail(child.stderr.take().expect("piped stderr"));
    let pid = child.id() as libc::pid_t;
    if let Some(p) = s.pid {
        p.store(pid, std::sync::atomic::Ordering::SeqCst);
    }
    // Killed with its group if bitexact gets SIGTERM, SIGINT or SIGHUP (see process::groups).
    let registered = process::register(pid);
    let Waited {
        status,
        rusage,
        timed_out,
        stopped,
    } = wait(pid, s, t0)?;
    // Killed by the signal watcher: it is removing the run directories and exits at once; going
    // on here (the next run) could make them again after it removed them.
    process::halt_if_stopping();
    let seconds = t0.elapsed().as_secs_f64();
    // The program is gone; anything it left running goes too (no orphans): its group, its
    // cgroup and every process carrying its marker.
    // SAFETY: signals the process group the child led; it may already be empty.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    container.kill_all();
    drop(registered);
    kill_escaped();
    // A process that escaped both (it holds stderr open) must not hang bitexact.
    let stderr_tail = rx
        .recv_timeout(Duration::from_secs(2))
        .unwrap_or_else(|_| "(stderr still held open by a process outside the run's group)".into());
    Ok(Ended {
        status,
        seconds,
        peak_rss_bytes: rusage.map(|r| (r.ru_maxrss.max(0) as u64) * 1024),
        stderr_tail,
        timed_out,
        stopped,
    })
}

/// How the wait for a run's program ended ([`wait`]).
struct Waited {
    /// Its exit status.
    status: ExitStatus,
    /// Its resource usage (and that of the children it waited for).
    rusage: Option<libc::rusage>,
    /// Whether it was killed for exceeding the timeout.
    timed_out: bool,
    /// Whether it was killed because the watcher asked to stop it.
    stopped: bool,
}

/// Waits for the program `pid`, started at `t0`, to exit: its process group is killed when
/// the watcher asks to stop it ([`Spawn::stop`]) or its timeout passes.
fn wait(pid: libc::pid_t, s: &Spawn, t0: Instant) -> Result<Waited> {
    let mut timed_out = false;
    let mut stopped = false;
    let mut nap = Duration::from_micros(200);
    // Readable when the child exits: the wait wakes at once instead of at its next nap.
    let exited = PidFd::open(pid);
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child, with pointers to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            return Ok(Waited {
                status: ExitStatus::from_raw(status),
                rusage: Some(ru),
                timed_out,
                stopped,
            });
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(anyhow!("waiting for the program: {e}"));
        }
        if !stopped && !timed_out {
            // Asked to stop (the watcher saw a divergence), or out of time.
            stopped = s
                .stop
                .is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst));
            timed_out = !stopped && s.timeout.is_some_and(|t| t0.elapsed() > t);
            if stopped || timed_out {
                // SAFETY: signals the process group the child leads (see `process::contain`).
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
        match &exited {
            Some(fd) => fd.wait(Duration::from_millis(10)),
            None => std::thread::sleep(nap),
        }
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

/// Limits the address space of the program `cmd` starts to `mb` MiB (`RLIMIT_AS`).
fn limit_memory(cmd: &mut Command, mb: u64) {
    // SAFETY: setrlimit is async-signal-safe and touches only the struct built here.
    unsafe {
        cmd.pre_exec(move || {
            let bytes = mb.saturating_mul(1 << 20) as libc::rlim_t;
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Reads the program's standard error on a thread of its own, keeping its last
/// [`STDERR_TAIL`] bytes: they are sent when the pipe closes.
fn stderr_tail(mut pipe: std::process::ChildStderr) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * STDERR_TAIL {
                tail.drain(..tail.len() - STDERR_TAIL);
            }
        }
        let text = String::from_utf8_lossy(&tail[tail.len().saturating_sub(STDERR_TAIL)..]);
        let _ = tx.send(text.into_owned());
    });
    rx
}

/// A pidfd (Linux 5.3+): readable once the process has exited.
struct PidFd(libc::c_int);

impl PidFd {
    fn open(pid: libc::pid_t) -> Option<PidFd> {
        // SAFETY: plain syscall on our own child's pid.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        (fd >= 0).then_some(PidFd(fd as libc::c_int))
    }

    /// Waits until the process exits or `limit` passes.
    fn wait(&self, limit: Duration) {
        let mut p = libc::pollfd {
            fd: self.0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, limit.as_millis() as libc::c_int) };
    }
}

impl Drop for PidFd {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): descendants of a run that
/// leave its process group (`setsid`) and lose their parent are re-parented to bitexact, so
/// `kill_escaped` can find them. Process-wide; called once by run mode.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Kills and reaps every direct child that leads its own process group: after a run has ended
/// these are its escaped descendants (re-parented here, see [`become_subreaper`]), which would
/// otherwise outlive bitexact or keep writing into the next run's outputs.
fn kill_escaped() {
    for pid in process::group_leading_children() {
        // SAFETY: signals that group, then reaps that one child of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}
