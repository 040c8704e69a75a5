//! bitexact's own memory in run mode (issue 17): hashing an output maps its pages into
//! bitexact's resident set unless they are dropped as the hashing goes; a huge (sparse) output
//! must not become a huge RSS.

mod common;

#[test]
fn a_huge_sparse_output_keeps_rss_bounded() {
    let o = common::bitexact(&[
        "run",
        "--format",
        "json",
        "--",
        "sh",
        "-c",
        "truncate -s 1G \"$BITEXACT_OUT/big.bin\"",
    ]);
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(0), "{j}");
    let rss = j["cases"][0]["program"]["harness_peak_rss_bytes"]
        .as_u64()
        .expect("peak RSS");
    // Mapped whole, the 1 GiB file alone would be over 1 GiB of RSS; hashed in windows that
    // are dropped behind the cursor, two collections at once stay near 2 × 64 MiB.
    assert!(rss < 400 << 20, "bitexact's peak RSS {} MiB", rss >> 20);
}
