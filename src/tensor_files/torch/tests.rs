//! The torch.save reader on hostile input: random bytes, truncations and bit flips of real
//! files (the committed fixtures written by torch) never panic, and sizes a file claims are
//! never allocated before they are checked.

use super::read;
use crate::tensor_files::{digest_bytes, FileKind, OutputFile, Sink, View};
use anyhow::Result;
use proptest::prelude::*;
use std::path::PathBuf;

const CKPT: &[u8] = include_bytes!("../../../tests/fixtures/torch_files/data/ckpt.pt");
const LEGACY: &[u8] = include_bytes!("../../../tests/fixtures/torch_files/data/legacy.pt");

fn file() -> OutputFile {
    OutputFile {
        name: "x.pt".into(),
        path: PathBuf::from("x.pt"),
        kind: FileKind::Torch,
        len: 0,
        modified: None,
    }
}

/// Counts what the reader hands over.
#[derive(Default)]
struct Count(usize, usize);

impl<'a> Sink<'a> for Count {
    fn wants(&self, _: &str) -> bool {
        true
    }
    fn take(&mut self, _: Option<String>, v: View<'a>) -> Result<()> {
        if v.text {
            self.1 += 1
        } else {
            self.0 += 1
        }
        Ok(())
    }
}

#[test]
fn both_formats_hold_the_same_leaves() {
    let (mut a, mut b) = (Count::default(), Count::default());
    read(CKPT, &mut a).unwrap();
    read(LEGACY, &mut b).unwrap();
    assert_eq!((a.0, a.1), (b.0, b.1));
    assert!(a.0 > 20 && a.1 > 10, "{} tensors, {} values", a.0, a.1);
}

#[test]
fn every_truncation_of_the_legacy_file_is_an_error() {
    for n in 0..LEGACY.len() {
        assert!(digest_bytes(&file(), &LEGACY[..n]).is_err(), "cut at {n}");
    }
}

/// A pickle that claims 2^60 bytes of data, or a tensor expanded to 2^40 elements, is an
/// error, not an allocation.
#[test]
fn claimed_sizes_are_checked_before_use() {
    let mut p = vec![0x80, 2, 0x8e];
    p.extend((1u64 << 60).to_le_bytes());
    p.push(b'.');
    let e = super::pickle::load(&p).err().unwrap().to_string();
    assert!(e.contains("wanted"), "{e}");
    let e = super::walk::gather_for_test(&[0u8; 4], 1 << 40, 0).unwrap_err();
    assert!(e.to_string().contains("expands to"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = digest_bytes(&file(), &data);
    }

    #[test]
    fn random_pickles_never_panic(ops in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut p = vec![0x80, 2];
        p.extend(ops);
        let _ = super::pickle::load(&p);
    }

    #[test]
    fn bit_flips_never_panic(at in 0usize..CKPT.len(), bit in 0u8..8, legacy in any::<bool>()) {
        let mut data = if legacy { LEGACY.to_vec() } else { CKPT.to_vec() };
        let at = at % data.len();
        data[at] ^= 1 << bit;
        let _ = digest_bytes(&file(), &data);
    }

    #[test]
    fn truncations_never_panic(n in 0usize..CKPT.len()) {
        let _ = digest_bytes(&file(), &CKPT[..n]);
    }
}

/// A list that holds the previous one twice, 60 levels deep (2^60 leaves if expanded), is one
/// value whose text is cut, checked in linear time.
#[test]
fn shared_references_do_not_explode() {
    let mut p = vec![0x80, 2, b']', b'K', 1, b'a', b'r'];
    p.extend(0u32.to_le_bytes());
    for k in 0u32..60 {
        p.extend([b']', b'(', b'j']);
        p.extend(k.to_le_bytes());
        p.push(b'j');
        p.extend(k.to_le_bytes());
        p.extend([b'e', b'r']);
        p.extend((k + 1).to_le_bytes());
    }
    p.push(b'.');
    let (g, _) = super::pickle::load(&p).unwrap();
    let memo = std::cell::RefCell::new(vec![0; g.nodes.len()]);
    assert!(super::walk::is_value_for_test(&g, g.root, &memo));
    let t = super::text::text(&g, g.root);
    assert!(
        t.len() < super::text::TEXT_MAX + 1024 && t.ends_with(']'),
        "{}",
        t.len()
    );
}

/// The same archive with every entry deflated (torch stores, other zip tools may compress)
/// digests the same.
#[test]
fn a_compressed_archive_reads_like_the_stored_one() {
    use std::io::{Read, Write};
    let mut src = zip::ZipArchive::new(std::io::Cursor::new(CKPT)).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for i in 0..src.len() {
        let mut e = src.by_index(i).unwrap();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        out.start_file(e.name().unwrap().into_owned(), opts)
            .unwrap();
        out.write_all(&data).unwrap();
    }
    let deflated = out.finish().unwrap().into_inner();
    assert_eq!(
        digest_bytes(&file(), &deflated).unwrap(),
        digest_bytes(&file(), CKPT).unwrap()
    );
}
