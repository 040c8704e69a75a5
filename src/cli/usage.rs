//! Usage errors: a bad flag, environment value or input found before any work, which the
//! command line reports and exits 2 for (every other error exits 1).

/// A usage error (bad flag value, a filter that matches nothing): exit code 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}

/// A usage error as an `anyhow::Error`.
pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Whether `e` is a usage error (exit 2).
pub(crate) fn is_usage(e: &anyhow::Error) -> bool {
    e.downcast_ref::<UsageError>().is_some()
}
