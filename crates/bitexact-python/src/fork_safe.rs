//! [`detached`]: native work off the GIL that may use rayon, safe in a forked child.
//!
//! Rayon's global pool belongs to the process that started it: a forked child (a DataLoader
//! worker, a `multiprocessing` fork) inherits the pool's bookkeeping but not its threads, and
//! work handed to it there waits forever. In a process forked since this module was loaded,
//! the work runs in a pool of the child's own (made once per process), so a child that hashes
//! a large tensor (`bitexact.digest`, a trace it starts) finishes, in parallel.

use pyo3::marker::Ungil;
use pyo3::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// [`super::trace_writer::forks_so_far`] when the module was loaded: its process's.
static HOME: OnceLock<u64> = OnceLock::new();

/// A forked child's pool and the fork count it was made in; null before ([`per_process`]: an
/// inherited pool has no threads to stop, and is never freed).
static CHILD: AtomicPtr<(u64, ThreadPool)> = AtomicPtr::new(std::ptr::null_mut());

/// Counts forks from now on ([`super::trace_writer::forks_so_far`]): called when the module
/// loads.
pub(crate) fn init() {
    HOME.get_or_init(super::trace_writer::forks);
}

/// `f()` with the GIL released, its rayon work (if any) in this process's own pool: the global
/// one in the process that loaded the module, a pool of its own in a forked child.
pub(crate) fn detached<R, F>(py: Python<'_>, f: F) -> R
where
    R: Send + Ungil,
    F: FnOnce() -> R + Send + Ungil,
{
    py.detach(|| match child_pool() {
        None => f(),
        Some(pool) => pool.install(f),
    })
}

/// The pool of a forked child (see the module doc); `None` in the process that loaded the
/// module, or where no thread can be started (rayon could not run there either).
fn child_pool() -> Option<&'static ThreadPool> {
    let now = super::trace_writer::forks_so_far();
    if HOME.get().is_none_or(|&home| home == now) {
        return None;
    }
    per_process(&CHILD, || {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        ThreadPoolBuilder::new().num_threads(threads).build().ok()
    })
}

/// This process's value in `slot`: the one made since its last fork
/// ([`super::trace_writer::forks_so_far`]), else a new one from `make` (`None` when it makes
/// none). No lock guards `slot`, and a value made before a fork is never freed or touched in
/// the child: a lock inside it may be held forever there by a thread of the parent's (and a
/// thread of this process may still use it).
pub(crate) fn per_process<T>(
    slot: &'static AtomicPtr<(u64, T)>,
    make: impl Fn() -> Option<T>,
) -> Option<&'static T> {
    let now = super::trace_writer::forks_so_far();
    loop {
        let seen = slot.load(Ordering::Acquire);
        // SAFETY: a pointer stored in a slot is a leaked Box: valid for the process's life.
        if let Some((made, value)) = unsafe { seen.as_ref() } {
            if *made == now {
                return Some(value);
            }
        }
        let mine = Box::into_raw(Box::new((now, make()?)));
        match slot.compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `mine` was just leaked from a Box and is now stored: never freed.
            Ok(_) => return Some(unsafe { &(*mine).1 }),
            // Another thread stored its value first: ours, never shared, is dropped; look again.
            // SAFETY: `mine` came from Box::into_raw above and was not stored.
            Err(_) => drop(unsafe { Box::from_raw(mine) }),
        }
    }
}
