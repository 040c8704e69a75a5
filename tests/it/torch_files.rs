//! `torch.save` files (`.pt`) read without executing pickle: every tensor of a checkpoint
//! digests exactly like the same values written as safetensors, in both torch formats (zip and
//! legacy), and the non-tensor leaves are named values, explained as text when runs differ.
//!
//! Two sources: the committed fixtures under `tests/fixtures/torch_files/data` (checked on
//! every machine, no Python needed), and files written fresh by
//! `tests/fixtures/torch_files/gen.py` when a Python with torch is found; otherwise that part
//! prints `skipped: <reason>`. The `bitexact run` tests need torch too.

use crate::common;
use bitexact::tensor_files::{digest_dir, load, load_value, scan};
use bitexact::Digest;
use common::python_with;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Checks one directory written by gen.py; returns how many tensors were matched.
fn check_dir(dir: &Path) -> usize {
    let got: BTreeMap<String, Digest> = digest_dir(dir)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .into_iter()
        .collect();
    let refs: Vec<(&String, &Digest)> = got
        .iter()
        .filter(|(n, _)| n.starts_with("ref.safetensors:"))
        .collect();
    assert_eq!(refs.len(), 18, "tensors in ref.safetensors: {refs:?}");
    for (name, want) in &refs {
        let key = name.trim_start_matches("ref.safetensors:");
        for file in ["ckpt.pt", "legacy.pt"] {
            let n = format!("{file}:tensors.{key}");
            assert_eq!(got.get(&n), Some(*want), "{n} digests unlike {name}");
        }
    }
    assert_eq!(got.get("one.pt"), got.get("ref.safetensors:t"));
    for n in [
        "ckpt.pt:model.0.weight",
        "ckpt.pt:model.2.bias",
        "ckpt.pt:optimizer.state.0.exp_avg_sq",
        "ckpt.pt:optimizer.state.3.step",
        "ckpt.pt:optimizer.param_groups.0.lr",
        "ckpt.pt:args.batch_size",
        "legacy.pt:optimizer.state.1.exp_avg",
    ] {
        assert!(got.contains_key(n), "{n} missing from {:?}", got.keys());
    }
    // The same checkpoint in both formats holds the same outputs with the same digests.
    let strip = |prefix: &str| -> BTreeMap<String, Digest> {
        got.iter()
            .filter_map(|(n, d)| Some((n.strip_prefix(prefix)?.to_string(), *d)))
            .collect()
    };
    assert_eq!(strip("ckpt.pt:"), strip("legacy.pt:"));
    // Values are text; tensors are not values.
    let files = scan(dir).unwrap();
    let ckpt = files.iter().find(|f| f.name == "ckpt.pt").unwrap();
    for (n, want) in [
        ("ckpt.pt:config.out_dir", "'out'"),
        ("ckpt.pt:config.lr", "0.001"),
        ("ckpt.pt:config.betas", "(0.9, 0.95)"),
        ("ckpt.pt:config.compile", "None"),
        ("ckpt.pt:args.name", "'tiny'"),
        ("ckpt.pt:device", "torch.device('cpu')"),
        ("ckpt.pt:dtype", "torch.bfloat16"),
        ("ckpt.pt:iter_num", "7"),
        ("ckpt.pt:od.a", "1"),
    ] {
        assert_eq!(load_value(ckpt, n).unwrap().as_deref(), Some(want), "{n}");
    }
    assert_eq!(load_value(ckpt, "ckpt.pt:tensors.t").unwrap(), None);
    let t = load(ckpt, "ckpt.pt:tensors.t").unwrap();
    assert_eq!(t.shape(), &[6, 4]);
    refs.len()
}

#[test]
fn committed_torch_save_fixtures_digest_like_safetensors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_files/data");
    println!(
        "matched {} tensors in the committed fixtures",
        check_dir(&dir)
    );
}

#[test]
fn torch_save_files_written_now_digest_like_safetensors() {
    let Some(py) = python_with(&["torch"]) else {
        return common::tool_missing(
            "torch_save_files_written_now…",
            "no Python with torch (run ci/python.sh)",
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_files/gen.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("matched {} tensors written now", check_dir(dir.path()));
}

/// `bitexact run` of a torch script (`-c` source); returns (exit code, stdout).
fn run(py: &str, source: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bitexact"))
        .args(["run", "--no-config", "--"])
        .arg(py)
        .args(["-c", source])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_checkpoint_config_value_that_differs_is_named_and_the_out_dir_is_stable() {
    let Some(py) = python_with(&["torch"]) else {
        return common::tool_missing(
            "a_checkpoint_config_value…",
            "no Python with torch (run ci/python.sh)",
        );
    };
    // nanoGPT-style: the checkpoint records out_dir = $BITEXACT_OUT, which is the same path
    // in every run, so the checkpoint is deterministic.
    let nanogpt = "import os, torch\n\
        out = os.environ['BITEXACT_OUT']; torch.manual_seed(0)\n\
        torch.save({'model': {'w': torch.randn(4, 4)}, 'config': {'out_dir': out}, 'iter_num': 3}, os.path.join(out, 'ckpt.pt'))\n";
    let (code, text) = run(&py, nanogpt);
    assert_eq!(code, 0, "{text}");
    // A value that follows the run index is named, with both values, as text.
    let leaky = "import os, torch\n\
        out = os.environ['BITEXACT_OUT']; run = os.environ['BITEXACT_RUN']; torch.manual_seed(0)\n\
        w = torch.randn(4, 4)\n\
        torch.save({'model': {'w': w}, 'config': {'out_dir': '/ckpt/run-' + run}}, os.path.join(out, 'ckpt.pt'))\n";
    let (code, text) = run(&py, leaky);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("ckpt.pt:config.out_dir: '/ckpt/run-0' vs '/ckpt/run-1'"),
        "{text}"
    );
    assert!(
        !text.contains("ckpt.pt:model.w"),
        "the tensors are identical: {text}"
    );
    // A tensor that differs is explained element by element, by its name in the checkpoint.
    let drift = "import os, torch\n\
        out = os.environ['BITEXACT_OUT']; torch.manual_seed(0)\n\
        w = torch.randn(4, 4); w[2, 3] += 1e-6 * int(os.environ['BITEXACT_RUN'])\n\
        torch.save({'model': {'w': w}}, os.path.join(out, 'ckpt.pt'))\n";
    let (code, text) = run(&py, drift);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("ckpt.pt:model.w: 1/16 elements differ") && text.contains("first at [2, 3]"),
        "{text}"
    );
}
