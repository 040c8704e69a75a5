//! [`TraceWriter`]: the op tracer's trace file (`python/bitexact/_trace/state.py`), written by a
//! background thread that also computes the trace fingerprints (and float64 sketches) the
//! program's thread would otherwise wait for.
//!
//! While a traced program runs, most of its time is single-threaded Python, so another core is
//! mostly idle. A record reaches [`TraceWriter::write`] as its JSON line with a NUL byte where
//! each host tensor's label goes (JSON escapes a NUL in any string, so a raw one is only ever
//! such a hole) and the tensors by address, as [`super::trace::trace_digests`] takes them; where
//! the record's `"sk"` field goes, a byte 1 (also escaped in any JSON string), filled with the
//! sketches of the results it names, or nothing when none has one, as the synchronous path. On
//! the caller's thread each tensor is looked up in the digest cache of [`super::trace`] (an
//! XXH3-128 of its bytes); a miss copies the bytes (cheaper than a fingerprint and a sketch) and
//! leaves the hashing to the writer's thread, which fills in the labels and writes the records
//! in the order they were made, byte for byte what the synchronous path writes. The copy is
//! made before the call returns, so a program that changes the tensor right after the op
//! still gets the fingerprint of the bytes the op saw.
//!
//! Memory is bounded: past [`QUEUED_BYTES`] copied bytes waiting to be hashed, a tensor is
//! hashed on the caller's thread; hashed copies' buffers are kept for reuse
//! ([`super::copy_pool`]). The tracer hands the writer tensors to hash only where torch's
//! threads leave a core free (`bitexact._trace.digest.background()`): where they take every
//! core, hashing on the writer's thread competes with them and a traced step got slower, so
//! there the program's thread hashes and gives the writer finished lines. Records are queued
//! without waking the writer's thread, which looks for them every [`POLL`] and writes (and
//! flushes) each batch it finds. [`TraceWriter::close`] (the tracer's `stop()`: at interpreter exit through `atexit`,
//! and before `os._exit`) waits until every record is written and closes the file. A process
//! killed by a signal or a crash loses the records still queued, as a process killed mid-write
//! loses its buffered output. A forked child (a DataLoader worker) does not have the writer's
//! thread: there the writer is never used (the tracer records in the process that started it
//! only), and writing, closing or dropping it does nothing.

use super::copy_pool::{copy, copy_checked, copy_raw, recycle, SharedPool};
use super::trace::{self, Seen, CACHE_ENTRIES};
use super::trace_hold::Held;
use super::trace_record::{finish, raw_copy, Record, Shown, Slot, Source};
use super::Host;
use pyo3::exceptions::{PyIOError, PyValueError};
use pyo3::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, OnceLock};
use std::thread::JoinHandle;
use twox_hash::XxHash3_128;

/// Bytes copied and not yet hashed, at most: past it, a tensor is hashed on the caller's
/// thread.
const QUEUED_BYTES: usize = 256 << 20;

/// The writer's thread's result: the first write error, if any.
type Done = JoinHandle<std::io::Result<()>>;

/// An item made ready for its slot: a host tensor to look up, or a held digest's slot.
pub(crate) enum Pre {
    Host(Host),
    Slot(Slot),
}

/// Records waiting for the writer's thread, and whether the writer was closed.
#[derive(Default)]
struct Queue {
    records: Vec<Record>,
    closed: bool,
}

/// The queue and the condition the writer's thread waits on (signalled at close only).
type SharedQueue = Arc<(Mutex<Queue>, Condvar)>;

/// How long the writer's thread waits when it finds no record. A record is queued without
/// waking the thread: a wake-up is a system call on the program's thread, and with one per
/// record, a traced step of a small transformer took longer than hashing on the program's
/// thread (21.9 ms against 18.6 ms).
const POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// How many times this process's line of descent has forked: incremented in each child by a
/// `pthread_atfork` handler (registered when the module loads, `fork_safe::init`, or else with
/// the first writer), so [`TraceWriter::mine`] is a
/// load, not a `getpid` system call (about 3.5 µs in this VM, once a record: 2% of a traced
/// nanoGPT step).
static FORKS: AtomicU64 = AtomicU64::new(0);

/// How many times this process's line of descent has forked since the module loaded
/// ([`FORKS`]).
pub(crate) fn forks_so_far() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// The child's side of a fork: see [`FORKS`] (an atomic increment: async-signal-safe).
extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Whether the handler of [`FORKS`] is registered (`pthread_atfork` can fail for lack of
/// memory): without it, [`TraceWriter::mine`] compares process ids.
static COUNTED: AtomicBool = AtomicBool::new(false);

/// [`FORKS`] now, its handler registered first (once per process; a forked child inherits it).
pub(crate) fn forks() -> u64 {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic; no other state is
        // touched.
        let done = unsafe { libc::pthread_atfork(None, None, Some(forked)) } == 0;
        COUNTED.store(done, Ordering::Relaxed);
    });
    FORKS.load(Ordering::Relaxed)
}

/// A trace file written by a background thread that hashes the tensors of its records (see the
/// module doc).
#[pyclass(module = "bitexact._native")]
pub struct TraceWriter {
    queue: SharedQueue,
    thread: Mutex<Option<Done>>,
    queued: Arc<AtomicUsize>,
    pool: SharedPool,
    /// [`forks`] when the writer was made: it belongs to that process only.
    forks: u64,
    /// The process that made the writer (see [`COUNTED`]).
    pid: u32,
    sketch: bool,
}

/// The writer's thread: records in order until the writer is closed, flushed after each batch
/// it finds queued. After a write error it keeps hashing (so later records' digests are known)
/// and returns the error.
fn run(
    file: File,
    queue: SharedQueue,
    queued: Arc<AtomicUsize>,
    pool: SharedPool,
    sketch: bool,
) -> std::io::Result<()> {
    let mut out = BufWriter::new(file);
    let mut result = Ok(());
    let mut spare = Vec::new();
    let (lock, wake) = &*queue;
    loop {
        let (mut batch, closed) = {
            let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
            if q.records.is_empty() && !q.closed {
                q = (wake.wait_timeout(q, POLL))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            // The program's thread pushes into last batch's emptied vector: no regrowing.
            (
                std::mem::replace(&mut q.records, std::mem::take(&mut spare)),
                q.closed,
            )
        };
        if batch.is_empty() {
            spare = batch;
            if closed {
                break;
            }
            continue;
        }
        for rec in batch.drain(..) {
            let line = finish(rec, &queued, &pool, sketch);
            if result.is_ok() {
                result = out.write_all(line.as_bytes());
            }
        }
        spare = batch;
        if result.is_ok() {
            result = out.flush();
        }
    }
    result.and(out.flush())
}

/// Marks `queue` closed and wakes its writer's thread.
fn close_queue(queue: &SharedQueue) {
    let (lock, wake) = &**queue;
    lock.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
    wake.notify_one();
}

impl TraceWriter {
    /// The slot of `t`: from the cache (`c`, when `use_cache`; not a digest without the
    /// sketch `want`s), hashed now when the queue is full, else a copy for the writer's thread.
    /// A tensor whose sketch is wanted is a result: copied while its check is computed, unless
    /// it is likely to be a cache hit ([`trace::likely_seen`]).
    fn slot(&self, host: Host, c: &mut trace::CacheMap, use_cache: bool, want: bool) -> Slot {
        let t = &host;
        let raw = raw_copy(t);
        let copied = if raw { t.data().len() } else { t.nbytes };
        let full = self.queued.load(Ordering::Relaxed) + copied > QUEUED_BYTES;
        let early_copy = want && !full && !(use_cache && trace::likely_seen(c, t));
        let (check, mut early) = match (use_cache, early_copy, raw || t.strides.is_none()) {
            (false, _, _) => (0, None),
            (true, false, _) => (XxHash3_128::oneshot(t.data()), None),
            (true, true, true) => {
                let (buf, check) = copy_checked(&self.pool, t.data());
                (check, Some(buf))
            }
            (true, true, false) => (XxHash3_128::oneshot(t.data()), Some(copy(&self.pool, t))),
        };
        let hit = (trace::seen(c, t, check))
            .filter(|_| use_cache)
            .and_then(|seen| match seen.hashed.get() {
                Some(h) if want && h.1.is_none() => None,
                Some(h) => Some(Source::Ready(h.clone())),
                // Queued by this writer, which makes a sketch whenever records have them.
                None => Some(Source::Wait(seen.hashed.clone())),
            });
        let source = hit.unwrap_or_else(|| {
            let (source, hashed) = if full {
                let h = trace::hash(t, self.sketch);
                (Source::Ready(h.clone()), Arc::new(OnceLock::from(h)))
            } else {
                self.queued.fetch_add(copied, Ordering::Relaxed);
                let hashed = Arc::new(OnceLock::new());
                let bytes = early.take().unwrap_or_else(|| match raw {
                    true => copy_raw(&self.pool, t.data()),
                    false => copy(&self.pool, t),
                });
                let strides = t.strides.clone().filter(|_| raw);
                (Source::Hash(bytes, strides, hashed.clone()), hashed)
            };
            if use_cache {
                c.insert(trace::key(t), Seen::new(t, check, hashed));
            }
            source
        });
        if let Some(unused) = early {
            recycle(&self.pool, unused); // a cache hit after all
        }
        Slot {
            dtype: host.dtype,
            shape: host.shape, // moved: no allocation
            source,
        }
    }

    /// Whether this process is the one that started the writer's thread.
    pub(crate) fn mine(&self) -> bool {
        match COUNTED.load(Ordering::Relaxed) {
            true => FORKS.load(Ordering::Relaxed) == self.forks,
            false => std::process::id() == self.pid,
        }
    }
}

#[pymethods]
impl TraceWriter {
    /// Creates (truncates) the trace file at `path` and starts the writer's thread; with
    /// `sketch`, the tensors it hashes also get their float64 sketches (the records' `"sk"`).
    #[new]
    #[pyo3(signature = (path, sketch=true))]
    fn new(path: PathBuf, sketch: bool) -> PyResult<TraceWriter> {
        let file = File::create(&path)
            .map_err(|e| PyIOError::new_err(format!("{}: {e}", path.display())))?;
        let queue = SharedQueue::default();
        let queued = Arc::new(AtomicUsize::new(0));
        let pool = SharedPool::default();
        let (q, p, r) = (queued.clone(), pool.clone(), queue.clone());
        let thread = std::thread::Builder::new()
            .name("bitexact-trace".into())
            .spawn(move || run(file, r, q, p, sketch))
            .map_err(|e| PyIOError::new_err(format!("cannot start the trace writer: {e}")))?;
        Ok(TraceWriter {
            queue,
            thread: Mutex::new(Some(thread)),
            queued,
            pool,
            forks: forks(),
            pid: std::process::id(),
            sketch,
        })
    }

    /// Queues one record: `line` with a NUL byte where each of `items`' labels goes, `items`
    /// the host tensors as [`super::trace::trace_digests`] takes them (the caller keeps them
    /// alive for the call; their bytes are read, and copied when they must be hashed, before
    /// it returns). `cache`: whether a digest may be reused (the cache of
    /// [`super::trace`]). `sketches`: for each result of the record, the index in `items` of
    /// the tensor whose sketch it shows, or -1, or the sketch's text; the line then has a byte
    /// 1 where its `"sk"` field goes. A byte 2 (a device value not filled in) is an error.
    /// After [`TraceWriter::close`], and in a forked child, does nothing.
    /// An item may also be a [`Held`] (from [`TraceWriter::hold`]), once for each tensor it
    /// holds: the next of its digests.
    #[pyo3(signature = (line, items, cache=true, sketches=None))]
    fn write(
        &self,
        py: Python<'_>,
        line: String,
        items: Vec<Bound<'_, PyAny>>,
        cache: bool,
        sketches: Option<Vec<Shown>>,
    ) -> PyResult<()> {
        if !self.mine() {
            return Ok(());
        }
        let tensors = (items.into_iter())
            .map(|e| match e.cast::<Held>() {
                Ok(h) => h.get().take().map(Pre::Slot),
                Err(_) => Host::item(e.extract()?).map(Pre::Host),
            })
            .collect::<PyResult<Vec<Pre>>>()?;
        self.queue(py, line, tensors, cache, sketches.unwrap_or_default())
    }

    /// The digests of host tensors (as [`TraceWriter::write`] takes them) as they are now,
    /// before an op writes them in place, for that op's record ([`Held`]): from the cache
    /// (with `cache`), or one the writer's thread is still making, or made now. In a forked
    /// child, holds nothing (no record is written there).
    #[pyo3(signature = (items, cache=true))]
    fn hold(&self, py: Python<'_>, items: Vec<super::Item>, cache: bool) -> PyResult<Held> {
        let tensors = match self.mine() {
            true => Host::items(items)?,
            false => Vec::new(),
        };
        Ok(crate::fork_safe::detached(py, || Held::of(tensors, cache)))
    }

    /// Writes every queued record, closes the file and returns the first write error, if any
    /// (idempotent). In a forked child, does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if !self.mine() {
            return Ok(());
        }
        close_queue(&self.queue);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        match thread {
            None => Ok(()),
            Some(t) => match py.detach(|| t.join()) {
                Ok(result) => result.map_err(|e| PyIOError::new_err(format!("trace: {e}"))),
                Err(_) => Err(PyIOError::new_err("the trace writer panicked")),
            },
        }
    }
}

impl TraceWriter {
    /// [`TraceWriter::write`] of tensors made ready (for the op tracer's native lane too,
    /// [`super::trace_lane`]): checks the line's holes and marks against them, then queues it.
    pub(crate) fn queue(
        &self,
        py: Python<'_>,
        line: String,
        tensors: Vec<Pre>,
        cache: bool,
        sketches: Vec<Shown>,
    ) -> PyResult<()> {
        if !self.mine() {
            return Ok(());
        }
        if line.bytes().any(|b| b == 2) {
            // A device value's mark (`_trace.device.LATER`) left in: never valid JSON.
            return Err(PyValueError::new_err(
                "a record with a device value's mark not filled in",
            ));
        }
        let holes = line.bytes().filter(|&b| b == 0).count();
        if holes != tensors.len() {
            return Err(PyValueError::new_err(format!(
                "a record with {holes} label holes and {} tensors",
                tensors.len()
            )));
        }
        let marks = line.bytes().filter(|&b| b == 1).count();
        let plain = |t: &str| {
            t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".,;|-+".contains(&b))
        };
        if marks != usize::from(!sketches.is_empty())
            || sketches.iter().any(|k| match k {
                Shown::Slot(_) => k.slot().is_some_and(|i| i >= tensors.len()),
                Shown::Text(t) => !plain(t),
            })
        {
            return Err(PyValueError::new_err(format!(
                "a record with {marks} sketch marks and sketches {sketches:?} of {} tensors",
                tensors.len()
            )));
        }
        crate::fork_safe::detached(py, || {
            let (lock, _) = &*self.queue;
            if lock.lock().unwrap_or_else(|e| e.into_inner()).closed {
                return Ok(());
            }
            // The cache stays locked until the record is queued: a later record that waits on
            // one of its copies is queued after it.
            let mut c = trace::cache();
            if c.len() + tensors.len() > CACHE_ENTRIES {
                c.clear();
            }
            // Whether slot i's sketch is wanted (a record names one or two results: a scan,
            // no allocation).
            let want = |i: usize| self.sketch && sketches.iter().any(|k| k.slot() == Some(i));
            let slots = (tensors.into_iter().enumerate())
                .map(|(i, t)| match t {
                    Pre::Host(t) => self.slot(t, &mut c, cache, want(i)),
                    Pre::Slot(s) => s,
                })
                .collect();
            let rec = Record {
                line,
                slots,
                sketches,
            };
            let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
            if q.closed {
                // Closed meanwhile (by another thread): the copies' digests are still made,
                // since the cache holds them and a later writer would wait for them.
                drop(q);
                finish(rec, &self.queued, &self.pool, self.sketch);
                return Ok(());
            }
            q.records.push(rec);
            Ok(())
        })
    }
}

impl Drop for TraceWriter {
    /// Closes the writer when it is dropped unclosed; in a forked child, leaks its thread's
    /// handle (the thread belongs to the parent).
    fn drop(&mut self) {
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if self.mine() {
            close_queue(&self.queue);
            if let Some(t) = thread {
                let _ = t.join();
            }
        } else {
            std::mem::forget(thread);
        }
    }
}
