//! Snapshots: the committed digests of a case under given controls on a platform class, stored
//! in insta's file format so `cargo insta review` works on them.
//!
//! **Layout** ([`naming`]). `DIR/<class>/<case>@<controls>.snap`, where `<class>` is the
//! platform class (`cpu-x86_64`, `cuda-sm90`, ...; see [`Platform::class_for`]), `<case>` is
//! the case name with `/` replaced by `.` (`kernel.reduce_sum.small`), and `<controls>` names
//! the controls that legitimately change the bits: `seed<S>-det` or `seed<S>-nondet`, plus
//! `-bench` when the autotune switch is on ([`controls_suffix`]). Worker and thread counts are
//! not in the name: a deterministic case must give the same bits for any of them (the harness
//! checks that with variations); they are recorded in the metadata.
//!
//! **File** ([`format`](mod@format)). The body (what is compared) is the run digest and each
//! tensor digest, in name order:
//! ```text
//! run: 3f1c…
//! tensors:
//!   sum: 9a0b…
//! ```
//! The metadata (insta's `description` and `info`, never compared) holds the case, backend and
//! controls, and the platform fingerprint of the machine that wrote it ([`Platform::fields`]).
//! bitexact reads and writes this format itself, strictly (64-hex digests, unique tensor
//! names; errors name the file and line), in the exact bytes insta writes.
//!
//! **Comparing** ([`compare`](mod@compare)). On a mismatch, [`explain`] names the tensors
//! whose digests changed and what differs between the stored fingerprint and this machine's
//! ("rustc changed (rustc 1.95.0 → rustc 1.96.0): likely a toolchain change"), or says "same
//! platform fingerprint: regression". A snapshot file that exists but cannot be read is an
//! error naming it, never "no committed snapshot".
//!
//! **Writing** ([`store`], [`review`](mod@review), [`assertion`]). In `cargo test`,
//! [`assert_matches`] writes a new or changed snapshot as pending `.snap.new` and fails with
//! one message saying what was written and how to accept it (`cargo insta review`,
//! `bitexact snapshot review --accept`, or `mv`). `bitexact snapshot update` ([`update_each`])
//! writes `.snap` files directly. Every write is atomic (`crate::atomic::write_atomically`).
//! In CI (`CI` set, [`in_ci`]) nothing is written: `update` refuses unless forced, `review`
//! refuses to accept, and the assertion writes nothing unless `INSTA_UPDATE=always`/`force`
//! asks for it explicitly.

pub mod assertion;
pub mod compare;
pub mod format;
pub mod naming;
pub mod noise;
pub mod policy;
pub mod review;
pub mod store;
mod yaml;

pub use assertion::{assert_matches, check_matches};
pub use compare::{compare, explain, read_existing, Comparison, MATCHES};
pub use format::{FormatError, Snapshot};
pub use naming::{case_stem, committed_path, controls_suffix, path, pending_path};
pub use review::{review, Review, ReviewEntry};
pub use store::{pending, stale_temp_files, update, update_each, write_pending, Failed, Update};

#[cfg(doc)]
use crate::platform::Platform;

/// Whether this process runs in CI, by insta's rule (`CI` set to anything but empty, `0` or
/// `false`, or else `TF_BUILD` set): snapshots are then never written unless forced.
pub fn in_ci() -> bool {
    ci_from(|k| std::env::var(k).ok())
}

/// [`in_ci`] over the variables `get` returns.
fn ci_from(get: impl Fn(&str) -> Option<String>) -> bool {
    match get("CI").as_deref() {
        Some("false") | Some("0") | Some("") => false,
        None => get("TF_BUILD").is_some(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_by_insta_rule() {
        let ci = |vars: &[(&str, &str)]| {
            ci_from(|k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        assert!(!ci(&[]));
        assert!(!ci(&[("CI", "false")]) && !ci(&[("CI", "0")]) && !ci(&[("CI", "")]));
        assert!(ci(&[("CI", "true")]) && ci(&[("CI", "yes")]) && ci(&[("TF_BUILD", "x")]));
    }
}
