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

/// An npy whose 32 MiB header is malformed: the error names the file and quotes at most a few
/// hundred bytes of the header, so the report stays small (it was 67 MB).
#[test]
fn a_huge_malformed_header_gives_a_short_message() {
    let script = r#"
import os, struct
h = b"{'descr': '<f4', 'junk': '" + b"x" * (32 << 20) + b"'}"
h += b" " * ((-(len(h) + 12)) % 64) + b"\n"
with open(os.path.join(os.environ["BITEXACT_OUT"], "h.npy"), "wb") as f:
    f.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(h)) + h)
"#;
    let o = common::bitexact(&["run", "--format", "json", "--", "python3", "-c", script]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        o.stdout.len() < 64 << 10,
        "a {} byte report",
        o.stdout.len()
    );
    let j = common::json(&o);
    let f = &j["cases"][0]["evidence"]["failure"];
    assert_eq!(f["kind"], "unreadable-output", "{j}");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("h.npy") && msg.contains("bytes)"), "{msg}");
}

/// Explaining a difference streams the two outputs side by side: a 96 MiB output with one
/// differing byte, and a long differing standard output, cost two windows, not two copies.
#[test]
fn explaining_a_large_difference_streams_both_runs() {
    let o = common::bitexact(&[
        "run",
        "--stdout",
        "--format",
        "json",
        "--",
        "sh",
        "-c",
        "head -c 100663296 /dev/zero > \"$BITEXACT_OUT/big.bin\"; \
         [ $BITEXACT_RUN = 1 ] && printf x | dd of=\"$BITEXACT_OUT/big.bin\" bs=1 seek=1000 conv=notrunc 2>/dev/null; \
         head -c 100663296 /dev/zero | tr '\\0' 'a' | fold -w 100; echo run $BITEXACT_RUN",
    ]);
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(1), "{j}");
    let case = &j["cases"][0];
    let diff = case["diff"].as_array().unwrap();
    let big = diff
        .iter()
        .find(|d| d["tensor"] == "big.bin")
        .expect("big.bin explained");
    assert_eq!(
        (
            big["elements_differing"].as_u64(),
            big["first_index"][0].as_u64()
        ),
        (Some(1), Some(1000))
    );
    let out = diff
        .iter()
        .find(|d| d["tensor"] == "<stdout>")
        .expect("stdout explained");
    assert_eq!(out["elements_differing"], 1, "one line differs: {out}");
    let rss = case["program"]["harness_peak_rss_bytes"].as_u64().unwrap();
    assert!(rss < 200 << 20, "bitexact's peak RSS {} MiB", rss >> 20);
}
