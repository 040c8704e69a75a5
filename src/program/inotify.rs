//! An inotify instance watching a directory tree (the output watcher's eyes: [`super::watch`]):
//! each watch knows its directory's name under the root, new subdirectories are watched as
//! they appear (with the files already in them), and a wait can be cut short by an eventfd.

use anyhow::{anyhow, Result};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What happened under the watched root, by name under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// A file was completed: closed after writing, or renamed into place.
    File(String),
    /// A file found in a directory when it appeared (it may still be open).
    Listed(String),
    /// A file was opened (to be written, or read: inotify does not say which).
    Opened(String),
    /// A directory appeared: created, or renamed into place (`moved`).
    Dir {
        /// Its name under the root.
        name: String,
        /// Renamed into place (with its contents), not created empty.
        moved: bool,
    },
}

/// An inotify instance watching a directory tree: each watch knows its directory's name under
/// the root.
pub(super) struct Inotify {
    fd: libc::c_int,
    /// An eventfd whose readiness ends a wait early (-1: none; owned by the caller).
    pub(super) wake: libc::c_int,
    dirs: HashMap<libc::c_int, String>,
    root: PathBuf,
    /// The kernel's event queue overflowed: events were lost, so completions were missed.
    pub(super) overflowed: bool,
}

impl Inotify {
    pub(super) fn new() -> Result<Inotify> {
        // SAFETY: plain syscall with flags.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(anyhow!("inotify: {}", std::io::Error::last_os_error()));
        }
        Ok(Inotify {
            fd,
            wake: -1,
            dirs: HashMap::new(),
            root: PathBuf::new(),
            overflowed: false,
        })
    }

    /// Watches directory `path`, named `prefix` under the root (`""` for the root itself).
    /// Opens are watched only so that two completions of a file are never one event: the
    /// kernel merges an event with an identical one still unread, and an open between two
    /// closes of the same file keeps them apart.
    pub(super) fn add(&mut self, path: &Path, prefix: String) -> Result<()> {
        let c = CString::new(path.as_os_str().as_bytes())?;
        let mask = libc::IN_CLOSE_WRITE
            | libc::IN_MOVED_TO
            | libc::IN_CREATE
            | libc::IN_OPEN
            | libc::IN_ONLYDIR;
        // SAFETY: a valid fd and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd, c.as_ptr(), mask) };
        if wd < 0 {
            return Err(anyhow!("inotify: {}", std::io::Error::last_os_error()));
        }
        if prefix.is_empty() {
            self.root = path.to_path_buf();
        }
        self.dirs.insert(wd, prefix);
        Ok(())
    }

    /// Waits up to `ms` for events and returns the names (under the root) of the files
    /// completed, once per completion; new subdirectories are watched, with the files already
    /// in them.
    pub(super) fn read(&mut self, ms: i32) -> Vec<String> {
        let events = self.read_events(ms).into_iter();
        events
            .filter_map(|e| match e {
                Event::File(name) | Event::Listed(name) => Some(name),
                Event::Dir { .. } | Event::Opened(_) => None,
            })
            .collect()
    }

    /// Waits up to `ms` for events and returns them in order: each file opened and each file
    /// completion, and each new subdirectory (created, or renamed into place) followed by the files already in it,
    /// which is then watched.
    pub(super) fn read_events(&mut self, ms: i32) -> Vec<Event> {
        let fd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut pfd = [fd(self.fd), fd(self.wake)];
        // SAFETY: two pollfds in a live array (a negative fd is ignored by poll).
        if unsafe { libc::poll(pfd.as_mut_ptr(), 2, ms) } <= 0 || pfd[0].revents == 0 {
            return Vec::new();
        }
        let mut events = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reads into our buffer, at most its length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let mut at = 0usize;
            let head = std::mem::size_of::<libc::inotify_event>();
            while at + head <= n as usize {
                // SAFETY: the kernel wrote a whole event here; read unaligned.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                let raw = &buf[at + head..at + head + ev.len as usize];
                let base = String::from_utf8_lossy(raw.split(|&b| b == 0).next().unwrap_or(&[]))
                    .into_owned();
                at += head + ev.len as usize;
                self.overflowed |= ev.mask & libc::IN_Q_OVERFLOW != 0;
                let Some(prefix) = self.dirs.get(&ev.wd).cloned() else {
                    continue;
                };
                let name = format!("{prefix}{base}");
                if ev.mask & libc::IN_ISDIR != 0 {
                    if ev.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                        let moved = ev.mask & libc::IN_MOVED_TO != 0;
                        let inside = self.watch_new(&name);
                        events.push(Event::Dir { name, moved });
                        events.extend(inside.into_iter().map(Event::Listed));
                    }
                } else if ev.mask & (libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO) != 0 {
                    events.push(Event::File(name));
                } else if ev.mask & libc::IN_OPEN != 0 {
                    events.push(Event::Opened(name));
                }
            }
        }
        events
    }

    /// Watches the new directory `name` and lists the files already in it.
    fn watch_new(&mut self, name: &str) -> Vec<String> {
        let path = self.root.join(name);
        if self.add(&path, format!("{name}/")).is_err() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for e in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            let n = format!("{name}/{}", e.file_name().to_string_lossy());
            match e.file_type() {
                Ok(t) if t.is_dir() => found.extend(self.watch_new(&n)),
                Ok(t) if t.is_file() => found.push(n),
                _ => {}
            }
        }
        found
    }
}

impl Drop for Inotify {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.fd) };
    }
}
