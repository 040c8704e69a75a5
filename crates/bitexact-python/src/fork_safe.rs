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
use std::sync::{Arc, Mutex, OnceLock};

/// [`super::trace_writer::forks_so_far`] when the module was loaded: its process's.
static HOME: OnceLock<u64> = OnceLock::new();

/// A forked child's pool and the fork count it was made in.
static CHILD: Mutex<Option<(u64, Arc<ThreadPool>)>> = Mutex::new(None);

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
fn child_pool() -> Option<Arc<ThreadPool>> {
    let now = super::trace_writer::forks_so_far();
    if HOME.get().is_none_or(|&home| home == now) {
        return None;
    }
    let mut child = CHILD.lock().unwrap_or_else(|e| e.into_inner());
    match child.as_ref() {
        Some((made, pool)) if *made == now => Some(pool.clone()),
        _ => {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let pool = ThreadPoolBuilder::new().num_threads(threads).build().ok();
            let pool = pool.map(Arc::new);
            *child = pool.clone().map(|p| (now, p));
            pool
        }
    }
}
