//! The integration tests that measure heap memory: one binary with bitexact's counting
//! allocator installed ([`bitexact::memory::CountingAlloc`]). Its counters are process-wide,
//! so these tests live apart from `tests/it/` (whose tests run side by side) and run one at a
//! time ([`serial`]): a measurement sees only the case under test.

mod practices;
mod train;

#[global_allocator]
static ALLOC: bitexact::memory::CountingAlloc = bitexact::memory::CountingAlloc;

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the binary's one lock: every test here takes it first, so one case runs at a time.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
