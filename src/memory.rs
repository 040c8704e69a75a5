//! Heap accounting: a counting global allocator (live bytes and a resettable peak) and the
//! growth check the harness applies across a case's repeated runs.
//!
//! Install [`CountingAlloc`] with `#[global_allocator]` in a binary (the `bitexact` binary and
//! the `train` integration test do); without it [`current`] and [`peak`] return `None` and
//! memory is reported as unknown, never as 0. The counters are process-wide: allocations made
//! by any thread during a run (rayon workers, loader workers) count toward it, so measurements
//! are only meaningful while one case runs at a time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static INSTALLED: AtomicBool = AtomicBool::new(false);
static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

/// A [`GlobalAlloc`] over [`System`] that counts live heap bytes and their high-water mark.
pub struct CountingAlloc;

impl CountingAlloc {
    fn grew(size: usize) {
        INSTALLED.store(true, Ordering::Relaxed);
        let now = CURRENT.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
    fn shrank(size: usize) {
        CURRENT.fetch_sub(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`; only counters are updated around it.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        Self::shrank(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            Self::shrank(layout.size());
            Self::grew(new_size);
        }
        p
    }
}

/// Makes every thread allocate from one heap (glibc's `M_ARENA_MAX` = 1), for run mode. glibc
/// gives each thread that allocates an arena of its own and keeps what is freed there for that
/// arena; in run mode one thread allocates what another frees (the output watcher and rayon's
/// workers make a run's hashes, its collector and the harness free them), so with an arena per
/// thread bitexact's resident set was the sum of every arena's high water, not what is live:
/// 95 to 102 MB for a run of 100 000 small files whose heap peaked at 58 MB, 72 to 79 MB with
/// one arena. The threads that share it spend their time in system calls and hashing, not in
/// the allocator. Arenas made before the call stay: `bitexact run` calls it before any other
/// thread allocates. A no-op where the C library is not glibc.
pub fn one_heap_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a tuning parameter of the allocator; it is thread-safe.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Hands the heap's free pages back to the system (see [`one_heap_arena`]). Called when a
/// run's outputs are collected. A no-op where the C library is not glibc.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether [`CountingAlloc`] is this process's global allocator (it has counted an allocation).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Live heap bytes now, or `None` when the counting allocator is not installed.
pub fn current() -> Option<u64> {
    installed().then(|| CURRENT.load(Ordering::Relaxed))
}

/// Highest live heap bytes since the last [`reset_peak`], or `None` when not installed.
pub fn peak() -> Option<u64> {
    installed().then(|| PEAK.load(Ordering::Relaxed))
}

/// Starts a new high-water mark at the current live bytes.
pub fn reset_peak() {
    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// `12.3 MiB`, `850.0 KiB` or `512 B`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1 << 20) as f64 {
        format!("{:.1} MiB", b / (1 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// Retained bytes beyond which growth across runs is flagged (on top of the relative part).
pub const GROWTH_MIN_BYTES: u64 = 1 << 20;

/// Checks the heap bytes a case left live after each run (relative to before its first run):
/// growth is flagged when every run retains more than the previous one and the total rise from
/// the first run to the last exceeds [`GROWTH_MIN_BYTES`] plus 10 % of the first run's value.
/// Returns the message, e.g. `memory grows across runs: 1.0 MiB → 3.0 MiB → 5.0 MiB live after
/// each run ...`.
pub fn growth(retained: &[u64]) -> Option<String> {
    if retained.len() < 2 || !retained.windows(2).all(|w| w[1] > w[0]) {
        return None;
    }
    let (first, last) = (retained[0], *retained.last().expect("non-empty"));
    if last - first <= GROWTH_MIN_BYTES + first / 10 {
        return None;
    }
    let steps: Vec<String> = retained.iter().map(|&b| human(b)).collect();
    Some(format!(
        "memory grows across runs: {} live after each run (state kept between runs, e.g. a loss history kept as a growing tensor?)",
        steps.join(" → ")
    ))
}

/// Checks per-step memory (`(step, bytes)` in step order) for the PyTorch FAQ's
/// "accumulating history" leak: flagged when memory rises in at least 3 of every 4 steps and
/// the rise from the first step to the last exceeds 16 MiB plus 10 % of the first step's value.
/// Returns the message with the figures.
pub fn step_growth(steps: &[(u64, u64)]) -> Option<String> {
    if steps.len() < 4 {
        return None;
    }
    let rises = steps.windows(2).filter(|w| w[1].1 > w[0].1).count();
    let (first, last) = (steps[0], steps[steps.len() - 1]);
    if rises * 4 < (steps.len() - 1) * 3 || last.1 <= first.1 + (16 << 20) + first.1 / 10 {
        return None;
    }
    Some(format!(
        "memory grows step over step: {} after step {} → {} after step {} ({} of {} steps grew; \
         history kept across the training loop, e.g. `total_loss += loss` without `.item()`?)",
        human(first.1),
        first.0,
        human(last.1),
        last.0,
        rises,
        steps.len() - 1
    ))
}

/// Limits this process's address space to `mb` MiB (`setrlimit(RLIMIT_AS)`): the child side
/// of `--memory-limit`, and the OOM self-test.
pub fn limit_address_space(mb: u64) -> anyhow::Result<()> {
    let bytes = mb.saturating_mul(1 << 20);
    let lim = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
        anyhow::bail!(
            "setrlimit(RLIMIT_AS, {mb} MiB) failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Peak heap bytes reached while `f` ran, above the live bytes when it started (`None` when the
/// counting allocator is not installed). The process-wide high-water mark the harness reads
/// for the whole run is kept: it is raised to this scope's peak, never lowered.
pub fn scoped_peak<T>(f: impl FnOnce() -> T) -> (T, Option<u64>) {
    let outer = PEAK.load(Ordering::Relaxed);
    let start = CURRENT.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let out = f();
    let inner = PEAK.fetch_max(outer, Ordering::Relaxed);
    (out, installed().then(|| inner.saturating_sub(start)))
}

thread_local! {
    /// The budget in force on this thread ([`with_budget`]): its limit and the bytes reserved.
    static BUDGET: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// A reservation over the budget would be exceeded: the out-of-memory error of
/// [`reserve`], with the figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes already reserved under the budget.
    pub reserved: u64,
    /// The budget.
    pub budget: u64,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "out of memory: tried to reserve {} with {} of the {} budget already reserved",
            human(self.requested),
            human(self.reserved),
            human(self.budget)
        )
    }
}

impl std::error::Error for OutOfMemory {}

/// Bytes reserved by [`reserve`], given back when dropped (on the thread that reserved them).
#[derive(Debug)]
pub struct Reservation {
    bytes: u64,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        BUDGET.with(|b| {
            if let Some((budget, reserved)) = b.get() {
                b.set(Some((budget, reserved.saturating_sub(self.bytes))));
            }
        });
    }
}

/// Reserves `bytes` under the budget in force before allocating a big buffer: an
/// [`OutOfMemory`] error when the reservations would exceed it (the code that checks can then
/// free what it holds and fall back, as after a CUDA out-of-memory error). Outside
/// [`with_budget`] every reservation succeeds.
///
/// Budgets are enforced on reservations, not inside the global allocator (an allocator that
/// returns null aborts the process); what is really live is measured by the counting
/// allocator ([`scoped_peak`]), so code that keeps buffers alive after giving their
/// reservations back is caught by comparing its real peak with the budget.
pub fn reserve(bytes: u64) -> Result<Reservation, OutOfMemory> {
    BUDGET.with(|b| {
        if let Some((budget, reserved)) = b.get() {
            if reserved.saturating_add(bytes) > budget {
                return Err(OutOfMemory {
                    requested: bytes,
                    reserved,
                    budget,
                });
            }
            b.set(Some((budget, reserved + bytes)));
        }
        Ok(Reservation {
            bytes,
            _thread_bound: std::marker::PhantomData,
        })
    })
}

/// Runs `f` under a memory budget of `bytes` for [`reserve`] on this thread (the budget in
/// force before is restored afterwards). Reservations are made and dropped inside `f`.
pub fn with_budget<T>(bytes: u64, f: impl FnOnce() -> T) -> T {
    let before = BUDGET.with(|b| b.replace(Some((bytes, 0))));
    let out = f();
    BUDGET.with(|b| b.set(before));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_growth_needs_a_steady_rise() {
        let mib = |n: u64| n << 20;
        let flat: Vec<(u64, u64)> = (0..10).map(|i| (i, mib(100) + (i % 2) * mib(1))).collect();
        assert_eq!(step_growth(&flat), None);
        let leak: Vec<(u64, u64)> = (0..10).map(|i| (i, mib(100) + i * mib(8))).collect();
        let msg = step_growth(&leak).unwrap();
        assert!(msg.contains("100.0 MiB after step 0"), "{msg}");
        assert_eq!(step_growth(&leak[..3]), None);
    }

    #[test]
    fn growth_needs_a_steady_rise_beyond_the_threshold() {
        let mib = 1u64 << 20;
        assert!(growth(&[mib, 3 * mib, 5 * mib])
            .unwrap()
            .contains("1.0 MiB → 3.0 MiB → 5.0 MiB"));
        assert_eq!(growth(&[mib, mib + 1000, mib + 2000]), None); // below the threshold
        assert_eq!(growth(&[mib, 5 * mib, 4 * mib]), None); // not steady
        assert_eq!(growth(&[mib]), None);
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 19), "1.5 MiB");
    }

    #[test]
    fn unknown_without_the_allocator() {
        // Library unit tests run on the system allocator: memory is unknown, never 0.
        assert_eq!((current(), peak()), (None, None));
        assert_eq!(scoped_peak(|| vec![0u8; 100].len()), (100, None));
    }

    #[test]
    fn budgets_refuse_reservations_beyond_them() {
        assert!(
            reserve(u64::MAX / 2).is_ok(),
            "no budget outside with_budget"
        );
        with_budget(1000, || {
            let a = reserve(600).unwrap();
            let e = reserve(500).unwrap_err();
            assert_eq!((e.requested, e.reserved, e.budget), (500, 600, 1000));
            assert!(e
                .to_string()
                .starts_with("out of memory: tried to reserve 500 B"));
            drop(a);
            assert_eq!(reserve(1000).unwrap().bytes(), 1000);
        });
        assert!(reserve(2000).is_ok());
    }
}
