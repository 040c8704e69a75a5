//! Scratch directories for unit tests: a path inside a [`tempfile::TempDir`], removed with it
//! on drop. The one temp-directory guard the tests share.

use std::path::PathBuf;

/// A scratch path (`.0`) and the temporary directory that holds it (removed on drop).
pub(crate) struct Scratch(pub PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl Scratch {
    /// A directory that exists and is empty.
    pub(crate) fn new() -> Scratch {
        let t = tempfile::Builder::new()
            .prefix("bitexact-test-")
            .tempdir()
            .unwrap();
        Scratch(t.path().to_path_buf(), t)
    }

    /// A path that does not exist yet (its parent does).
    pub(crate) fn absent() -> Scratch {
        let t = tempfile::Builder::new()
            .prefix("bitexact-test-")
            .tempdir()
            .unwrap();
        Scratch(t.path().join("d"), t)
    }
}
