//! Records the rustc version for the platform fingerprint, and embeds every `kernels/*.cu` and
//! `kernels/*.cuh` file: writes `$OUT_DIR/kernel_sources.rs` with `SOURCES` and `HEADERS`
//! (name and `include_str!` of each file, sorted by name), included by
//! `src/backend/cuda/kernels.rs`. Also writes `$OUT_DIR/rust_tests_guide.rs`: the first
//! ```` ```rust ```` block of the Rust tests guide (`docs/guides/rust-tests.md`), which the
//! integration tests compile and run (`tests/it/user_examples.rs`).
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BITEXACT_RUSTC_VERSION={}", version.trim());
    println!("cargo:rerun-if-changed=build.rs");
    embed_kernels();
    extract_guide_example();
}

/// Writes `$OUT_DIR/rust_tests_guide.rs`: the guide's first Rust block as written, except that
/// a test asserting a snapshot is marked `#[ignore]` (its snapshot belongs in the user's crate,
/// not in bitexact's `snapshots/`).
fn extract_guide_example() {
    let guide = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("docs/guides/rust-tests.md");
    println!("cargo:rerun-if-changed={}", guide.display());
    let text = std::fs::read_to_string(&guide)
        .unwrap_or_else(|e| panic!("reading {}: {e}", guide.display()));
    let start = text
        .find("```rust\n")
        .expect("a ```rust block in the guide")
        + 8;
    let end = start
        + text[start..]
            .find("```")
            .expect("the guide's rust block ends");
    let mut out = String::new();
    for (i, test) in text[start..end].split("#[test]\n").enumerate() {
        if i > 0 {
            out.push_str("#[test]\n");
            if test.contains("assert_snapshot") {
                out.push_str("#[ignore = \"its snapshot belongs in the user's crate\"]\n");
            }
        }
        out.push_str(test);
    }
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("rust_tests_guide.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}

/// Writes `$OUT_DIR/kernel_sources.rs` from the files of `kernels/`.
fn embed_kernels() {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("kernels");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("kernels/ entry").path())
        .filter_map(|p| Some((p.file_name()?.to_str()?.to_string(), p)))
        .filter(|(n, _)| n.ends_with(".cu") || n.ends_with(".cuh"))
        .collect();
    files.sort();
    let table = |ext: &str| {
        let mut t = String::new();
        for (name, path) in files.iter().filter(|(n, _)| n.ends_with(ext)) {
            println!("cargo:rerun-if-changed={}", path.display());
            let path = path.to_str().expect("kernel path is UTF-8");
            writeln!(t, "    ({name:?}, include_str!({path:?})),").unwrap();
        }
        t
    };
    let out = format!(
        "/// Kernel files (`kernels/*.cu`, found by `build.rs`): name and text, sorted by name.\n\
         pub const SOURCES: &[(&str, &str)] = &[\n{}];\n\n\
         /// Headers the kernels include (`kernels/*.cuh`, e.g. `#include \"philox.cuh\"`): name \
         and text, sorted by name.\n\
         pub const HEADERS: &[(&str, &str)] = &[\n{}];\n",
        table(".cu"),
        table(".cuh"),
    );
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("kernel_sources.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
