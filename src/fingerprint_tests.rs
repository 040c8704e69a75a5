use super::*;
use proptest::prelude::*;

/// The definition, word by word, with no blocks, lanes' accumulators or chunks.
fn plain(data: &[u8]) -> Fingerprint {
    let mut acc = [0u64; 2];
    for (i, w) in data.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..w.len()].copy_from_slice(w);
        let w = u64::from_le_bytes(word);
        for (a, m) in acc.iter_mut().zip(M) {
            *a = a.wrapping_add(mix(w ^ (i as u64 + 1).wrapping_mul(m)));
        }
    }
    Fingerprint::finish(acc, data.len() as u64)
}

/// Bytes that are no pattern of the constants: `i * 7 mod 251`.
fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn known_answers_match_the_python_oracle() {
    // Produced by python/bitexact/_fingerprint.py's `oracle` (plain Python integers):
    //   python -c "from bitexact._fingerprint import oracle; print(oracle(b''), ...)"
    // with b"", b"\0", b"abc", bytes(range(8)), bytes(range(9)), bytes(range(64)) and
    // bytes(i * 7 % 251 for i in range(1000)).
    let cases: [(&[u8], &str); 6] = [
        (b"", "e220a8397b1dcdaf8209b480faed1b10"),
        (b"\0", "c0737b7cf89e44abedf866e1425e2f47"),
        (b"abc", "66c5cf8bd923c50bddfe8d53d6646cde"),
        (
            &[0, 1, 2, 3, 4, 5, 6, 7],
            "9f9e89e2eb06380a3f756d773061764e",
        ),
        (
            &[0, 1, 2, 3, 4, 5, 6, 7, 8],
            "f5840d05235ee462d54d7edb87a2ff75",
        ),
        (&bytes(1000), "2222c2d8c7f9e19e5e4ab8e5bc11266d"),
    ];
    for (data, want) in cases {
        assert_eq!(fingerprint(data).hex(), want, "{} bytes", data.len());
        assert_eq!(fingerprint_serial(data).to_string(), want);
    }
    let range: Vec<u8> = (0..64).collect();
    assert_eq!(
        fingerprint(&range).hex(),
        "1686d20863506e6bff0d19311c8344bd"
    );
}

#[test]
fn zero_padding_does_not_alias() {
    // The same words, once padded: nbytes tells them apart.
    assert_ne!(fingerprint(b"ab"), fingerprint(b"ab\0"));
    assert_ne!(fingerprint(b""), fingerprint(&[0; 8]));
}

#[test]
fn a_large_tensor_in_parallel_chunks_equals_the_plain_definition() {
    let data = bytes(3 * PAR_BYTES + 13);
    assert_eq!(fingerprint(&data), plain(&data));
    assert_eq!(fingerprint_serial(&data), plain(&data));
}

proptest! {
    #[test]
    fn every_path_gives_the_definitions_value(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(0usize..600, 0..6),
    ) {
        let want = plain(&data);
        prop_assert_eq!(fingerprint(&data), want);
        // In pieces of any length (a strided view's rows), and as word-aligned chunks summed
        // in any order (threads, a GPU grid).
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
        cuts.sort_unstable();
        let mut f = Fingerprinter::default();
        let mut at = 0;
        for &c in cuts.iter().chain([&data.len()]) {
            f.update(&data[at..c]);
            at = c;
        }
        prop_assert_eq!(f.finish(), want);
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c & !7).collect();
        bounds.extend([0, data.len()]);
        bounds.sort_unstable();
        bounds.dedup();
        let mut acc = [0, 0];
        for w in bounds.windows(2).rev() {
            acc = add(acc, sums(&data[w[0]..w[1]], (w[0] / 8) as u64));
        }
        prop_assert_eq!(Fingerprint::finish(acc, data.len() as u64), want);
    }

    #[test]
    fn a_permuted_tensor_has_another_fingerprint(
        data in proptest::collection::vec(any::<u64>(), 2..200),
        seed in any::<u64>(),
    ) {
        // Any permutation that changes the words' order (the data not all one value).
        let mut p = data.clone();
        let mut s = seed;
        for i in (1..p.len()).rev() {
            s = mix(s.wrapping_add(M[0]));
            p.swap(i, (s % (i as u64 + 1)) as usize);
        }
        prop_assume!(p != data);
        let le = |v: &[u64]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let (a, b) = (fingerprint(&le(&data)), fingerprint(&le(&p)));
        prop_assert_ne!(a.0[0], b.0[0]);
        prop_assert_ne!(a.0[1], b.0[1]);
    }

    #[test]
    fn one_changed_word_changes_each_lane(
        data in proptest::collection::vec(any::<u64>(), 1..200),
        at in any::<usize>(),
        flip in 1u64..,
    ) {
        let le = |v: &[u64]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let mut changed = data.clone();
        let at = at % data.len();
        changed[at] ^= flip;
        let (a, b) = (fingerprint(&le(&data)), fingerprint(&le(&changed)));
        prop_assert_ne!(a.0[0], b.0[0]);
        prop_assert_ne!(a.0[1], b.0[1]);
    }

    #[test]
    fn a_strided_view_gathered_equals_its_contiguous_copy(
        rows in 1usize..9, cols in 1usize..9, size in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
    ) {
        // A row-major [rows, cols] buffer read as its transpose: the gathered elements, fed
        // to a Fingerprinter one element at a time, equal the contiguous transposed copy.
        let raw = bytes(rows * cols * size);
        let mut copy = Vec::new();
        let mut f = Fingerprinter::default();
        for c in 0..cols {
            for r in 0..rows {
                let e = &raw[(r * cols + c) * size..(r * cols + c + 1) * size];
                copy.extend_from_slice(e);
                f.update(e);
            }
        }
        prop_assert_eq!(f.finish(), fingerprint(&copy));
        prop_assert_eq!(fingerprint(&copy), plain(&copy));
    }
}
