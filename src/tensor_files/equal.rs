//! Whether two finished files hold the same bytes: a later run's output against run 0's, so
//! that a file equal byte for byte takes run 0's digests instead of being hashed again (equal
//! bytes always parse to equal tensors, whatever the format). Comparing reads both files once
//! at memory speed, about 2.5× faster here than hashing one of them; each compared block's
//! mapped pages are dropped at once, so resident memory stays bounded.

use super::{release, FileKind, Mapped};
use anyhow::{anyhow, Result};
use rayon::prelude::*;
use std::path::Path;

/// Bytes compared by one task (a window is split into these).
const BLOCK_BYTES: usize = 4 << 20;

/// Whether the files at `a` and `b` have the same length and bytes. Both must be finished
/// outputs (mapped: see the module docs of [`super`] on truncation).
pub fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let (x, y) = (map_path(a)?, map_path(b)?);
    if x.len() != y.len() {
        return Ok(false);
    }
    // Each block's pages are dropped as soon as it is compared: resident memory stays at a
    // few blocks per thread, whatever the file size and however many files are compared.
    let equal = x
        .par_chunks(BLOCK_BYTES)
        .zip(y.par_chunks(BLOCK_BYTES))
        .all(|(p, q)| {
            let same = p == q;
            release(p);
            release(q);
            same
        });
    Ok(equal)
}

/// The first offset at which the files at `a` and `b` differ (the shorter length when one is a
/// prefix of the other), `None` when they are equal. Read with `pread` in blocks, never mapped:
/// `a` may belong to a program that is still running and could truncate it. `go_on` is asked
/// before each block; when it says no, the comparison stops with an error.
pub fn first_difference(a: &Path, b: &Path, go_on: &dyn Fn() -> bool) -> Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let open = |p: &Path| std::fs::File::open(p).map_err(|e| anyhow!("{}: {e}", p.display()));
    let (fa, fb) = (open(a)?, open(b)?);
    let (mut x, mut y) = (vec![0u8; BLOCK_BYTES], vec![0u8; BLOCK_BYTES]);
    let mut at = 0u64;
    loop {
        if !go_on() {
            anyhow::bail!("comparison of {} cancelled", a.display());
        }
        let n = fa.read_at(&mut x, at)?;
        let m = fb.read_at(&mut y, at)?;
        if let Some(i) = x[..n.min(m)]
            .iter()
            .zip(&y[..m.min(n)])
            .position(|(p, q)| p != q)
        {
            return Ok(Some(at + i as u64));
        }
        if n != m {
            return Ok(Some(at + n.min(m) as u64));
        }
        if n == 0 {
            return Ok(None);
        }
        at += n as u64;
    }
}

/// Where the tensor data of a file of `kind` begins, from its first 12 bytes `head`: every
/// byte after it belongs to exactly one tensor (safetensors' data offsets cover the data
/// without gaps; an `.npy` holds one array), so two such files equal up to there differ after
/// it only where a tensor's values differ. `None` for npz and `torch.save` files (zip
/// archives, where bytes may differ with equal tensors) and unreadable heads.
pub fn data_start(kind: FileKind, head: &[u8]) -> Option<u64> {
    match kind {
        FileKind::Safetensors => {
            let n = u64::from_le_bytes(head.get(..8)?.try_into().ok()?);
            n.checked_add(8)
        }
        FileKind::Npy => {
            let (start, len) = super::npy::prefix(head).ok()?;
            Some((start + len) as u64)
        }
        FileKind::Raw => Some(0),
        FileKind::Npz | FileKind::Torch => None,
    }
}

fn map_path(path: &Path) -> Result<Mapped> {
    let f = std::fs::File::open(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    super::map_open(&f).map_err(|e| anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::WINDOW_BYTES;
    use proptest::prelude::*;

    fn pair(a: &[u8], b: &[u8]) -> (tempfile::TempDir, bool) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), a).unwrap();
        std::fs::write(d.path().join("b"), b).unwrap();
        let same = same_bytes(&d.path().join("a"), &d.path().join("b")).unwrap();
        (d, same)
    }

    #[test]
    fn one_differing_byte_anywhere_in_a_large_file_is_seen() {
        let a = vec![7u8; 2 * WINDOW_BYTES + 123];
        assert!(pair(&a, &a).1);
        for at in [0, BLOCK_BYTES - 1, WINDOW_BYTES + 5, a.len() - 1] {
            let mut b = a.clone();
            b[at] ^= 1;
            assert!(!pair(&a, &b).1, "differing byte at {at}");
        }
        assert!(!pair(&a, &a[..a.len() - 1]).1, "shorter");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), b"x").unwrap();
        let e = same_bytes(&d.path().join("a"), &d.path().join("gone")).unwrap_err();
        assert!(format!("{e}").contains("gone"), "{e}");
    }

    #[test]
    fn the_first_difference_is_found_by_offset() {
        let a = vec![1u8; 3 * BLOCK_BYTES + 10];
        let d = tempfile::tempdir().unwrap();
        let (pa, pb) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&pa, &a).unwrap();
        std::fs::write(&pb, &a).unwrap();
        assert_eq!(first_difference(&pa, &pb, &|| true).unwrap(), None);
        let mut b = a.clone();
        b[2 * BLOCK_BYTES + 3] = 0;
        std::fs::write(&pb, &b).unwrap();
        assert_eq!(
            first_difference(&pa, &pb, &|| true).unwrap(),
            Some(2 * BLOCK_BYTES as u64 + 3)
        );
        std::fs::write(&pb, &a[..100]).unwrap();
        assert_eq!(first_difference(&pa, &pb, &|| true).unwrap(), Some(100));
    }

    #[test]
    fn data_starts_after_the_header() {
        let mut st = 24u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}      ");
        assert_eq!(data_start(FileKind::Safetensors, &st), Some(32));
        let npy = b"\x93NUMPY\x01\x00\x76\x00";
        assert_eq!(data_start(FileKind::Npy, npy), Some(128));
        assert_eq!(data_start(FileKind::Torch, &st), None);
        assert_eq!(data_start(FileKind::Safetensors, b"short"), None);
    }

    proptest! {
        #[test]
        fn agrees_with_comparing_the_bytes(a in proptest::collection::vec(any::<u8>(), 0..300),
                                           b in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(pair(&a, &b).1, a == b);
            prop_assert!(pair(&a, &a).1);
        }
    }
}
