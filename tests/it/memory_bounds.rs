//! bitexact's own memory in run mode: hashing an output maps its pages into
//! bitexact's resident set unless they are dropped as the hashing goes; a huge (sparse) output
//! must not become a huge RSS.

use crate::common;

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
    // --keep-going: run 1 patches big.bin after completing it, which would stop it early and
    // cut its standard output short.
    let o = common::bitexact(&[
        "run",
        "--keep-going",
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

/// `bitexact run --runs 2` on a program that hard-links `n` copies of one `mb` MiB sparse file
/// into `$BITEXACT_OUT` (at once: the run ends long before run 0's outputs are hashed).
fn linked(n: usize, mb: usize) -> (Option<i32>, serde_json::Value, std::time::Duration) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    std::fs::File::create(&src)
        .unwrap()
        .set_len((mb as u64) << 20)
        .unwrap();
    let script = format!(
        "for i in $(seq {n}); do ln {} \"$BITEXACT_OUT/f$i.bin\"; done",
        src.display()
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--format", "json", "--", "sh", "-c", &script])
        .env("TMPDIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("bitexact hung (killed after 120 s)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.code(), common::json(&o), t0.elapsed())
}

#[test]
fn outputs_equal_to_run_0s_are_compared_within_the_bound_and_never_hang() {
    // Run 1 ends at once; its collection compares its files with run 0's while run 0's are
    // still being hashed, then waits for run 0's digests. That wait once ran on the thread
    // pool run 0's hashing needed (a deadlock in 4 of 6 tries with two 300 MiB files), and
    // the comparison kept 2 × 64 MiB per thread resident (262 MiB here for eight 66 MiB
    // files, over the bound of 1.5 × 66 MiB + 100 MB).
    for _ in 0..3 {
        let (code, j, _) = linked(2, 300);
        assert_eq!(code, Some(0), "{j}");
    }
    let (code, j, _) = linked(8, 66);
    assert_eq!(code, Some(0), "{j}");
    let rss = j["cases"][0]["program"]["harness_peak_rss_bytes"]
        .as_u64()
        .expect("peak RSS");
    let bound = (1.5 * (66u64 << 20) as f64) as u64 + 100_000_000;
    assert!(rss < bound, "bitexact's peak RSS {} MiB", rss >> 20);
}

/// bitexact's own peak RSS of a run, from its JSON report.
fn own_rss(j: &serde_json::Value) -> u64 {
    j["cases"][0]["program"]["harness_peak_rss_bytes"]
        .as_u64()
        .expect("peak RSS")
}

/// 100 000 small files in one run: every per-file structure (the watcher's hashes, the scan,
/// the baseline, the digests, their order) counts 100 000 times, and together they must stay
/// under the bound of 100 MB (the largest file is a few bytes).
#[test]
fn a_hundred_thousand_small_files_stay_within_the_bound() {
    let script = r#"
import os
o = os.environ["BITEXACT_OUT"]
for i in range(100000):
    with open(os.path.join(o, "f%06d.bin" % i), "wb") as f:
        f.write(b"x%d" % i)
"#;
    let o = common::bitexact(&["run", "--format", "json", "--", "python3", "-c", script]);
    let j = common::json(&o);
    assert_eq!(o.status.code(), Some(0), "{}", j["cases"][0]["message"]);
    assert_eq!(j["cases"][0]["digests"].as_object().unwrap().len(), 100_000);
    let rss = own_rss(&j);
    assert!(rss < 100_000_000, "bitexact's peak RSS {} MiB", rss >> 20);
}

/// One safetensors file of 100 000 tensors, one of which differs in run 1: its 7 MB header is
/// parsed for hashing and again for loading the differing tensor of both runs to explain it,
/// and each parse must stay small (the `safetensors` crate's costs 74 MB) to keep bitexact
/// under 1.5 × the file + 100 MB.
#[test]
fn a_hundred_thousand_tensors_in_one_file_stay_within_the_bound() {
    let script = r#"
import json, os, struct
n, data, header = 100000, bytearray(), {}
for i in range(n):
    header["t%06d" % i] = {"dtype": "F32", "shape": [2], "data_offsets": [8 * i, 8 * i + 8]}
    v = float(i) + (1.0 if i == 54321 and os.environ["BITEXACT_RUN"] == "1" else 0.0)
    data += struct.pack("<2f", float(i), v)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(os.environ["BITEXACT_OUT"], "m.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
"#;
    let o = common::bitexact(&["run", "--format", "json", "--", "python3", "-c", script]);
    let j = common::json(&o);
    let case = &j["cases"][0];
    assert_eq!(o.status.code(), Some(1), "{}", case["message"]);
    let diff = case["diff"].as_array().unwrap();
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(diff[0]["tensor"], "m.safetensors:t054321");
    assert_eq!(diff[0]["first_index"][0], 1);
    let size = 8 + (8 + 76) * 100_000u64; // the header takes about 77 bytes a tensor
    let bound = (1.5 * size as f64) as u64 + 100_000_000;
    let rss = own_rss(&j);
    assert!(rss < bound, "bitexact's peak RSS {} MiB", rss >> 20);
}
