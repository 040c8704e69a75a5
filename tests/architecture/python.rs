//! The Python package's house (`python/bitexact/`): no import cycle between its modules, no
//! module over [`super::MAX_LINES`] lines, and every module opens with a docstring saying what
//! it holds (`_sitecustomize.py` excepted: it is written out as a `sitecustomize.py` of its own
//! and opens with a comment saying the same).
//!
//! Every import counts, at the top of a module or inside a function (a lazy import is still
//! an arrow; it only moves the cycle from import time to call time): `from . import a, b`,
//! `from .a import x`, `from bitexact import a`, `from bitexact.a import x`,
//! `import bitexact.a` (parenthesized and `as` forms too). A name imported from the package
//! that is not one of its modules is an attribute of `__init__.py`: an arrow to it. A
//! submodule's implicit import of its parent package is not an arrow (Python imports the
//! parent first, whoever asks), and neither is `sys.modules.get("bitexact.x")`: a lookup that
//! imports nothing. Strings and comments are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const PACKAGE: &str = "bitexact";

/// `text` without comments and string literals (each string becomes `""`), lines kept.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let (mut out, mut i) = (String::new(), 0);
    while i < b.len() {
        let c = b[i];
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'"' || c == b'\'' {
            let triple = b[i..].starts_with(&[c, c, c]);
            let quote_len = if triple { 3 } else { 1 };
            i += quote_len;
            while i < b.len() {
                if b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if b[i] == b'\n' {
                    out.push('\n'); // keep line structure
                    if !triple {
                        break;
                    }
                }
                if b[i] == c && (!triple || b[i..].starts_with(&[c, c, c])) {
                    i += quote_len;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// The package modules `code` imports (`__init__` for the package itself), given the
/// package's module names.
fn imports(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    // Statements: join parenthesized continuations and backslash continuations.
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    for line in code.lines() {
        let line = line.trim_end();
        current.push(' ');
        current.push_str(line.trim_end_matches('\\'));
        depth += line.matches('(').count() as i32 - line.matches(')').count() as i32;
        if depth <= 0 && !line.ends_with('\\') {
            statements.extend(current.split(';').map(|s| s.trim().to_string()));
            current.clear();
            depth = 0;
        }
    }
    let mut out = BTreeSet::new();
    let module = |name: &str| modules.contains(name).then(|| name.to_string());
    let names = |list: &str| -> Vec<String> {
        list.trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace())
            .split(',')
            .filter_map(|n| n.split_whitespace().next())
            .map(str::to_string)
            .collect()
    };
    for s in statements {
        let words: Vec<&str> = s.split_whitespace().collect();
        match words.as_slice() {
            ["from", from, "import", ..] => {
                let list = &s[s.find(" import ").unwrap() + 8..];
                let sub = if *from == "." || *from == PACKAGE {
                    None
                } else if let Some(m) = from.strip_prefix('.') {
                    Some(m)
                } else if let Some(m) = from.strip_prefix(&format!("{PACKAGE}.")) {
                    Some(m)
                } else {
                    continue; // another package
                };
                match sub {
                    Some(m) => out.extend(module(m.split('.').next().unwrap_or(m))),
                    None => {
                        for n in names(list) {
                            out.insert(module(&n).unwrap_or_else(|| "__init__".into()));
                        }
                    }
                }
            }
            ["import", ..] => {
                for n in names(&s[7..]) {
                    if n == PACKAGE {
                        out.insert("__init__".into());
                    } else if let Some(m) = n.strip_prefix(&format!("{PACKAGE}.")) {
                        out.extend(module(m.split('.').next().unwrap_or(m)));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The native module maturin builds into the package (`module-name = "bitexact._native"` in
/// `pyproject.toml`, beside the package): a module of the package that imports nothing of it.
fn native_module(package: &Path) -> Option<String> {
    let toml = std::fs::read_to_string(package.with_file_name("pyproject.toml")).ok()?;
    let line = toml
        .lines()
        .find(|l| l.trim_start().starts_with("module-name"))?;
    let name = line.split('"').nth(1)?;
    Some(name.strip_prefix(&format!("{PACKAGE}."))?.to_string())
}

/// The package's import graph: `module.py` → the package's modules it imports (not the native
/// one, a leaf).
fn graph(package: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut texts = BTreeMap::new();
    for e in std::fs::read_dir(package).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "py") {
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            texts.insert(stem, std::fs::read_to_string(&p).unwrap());
        }
    }
    let mut modules: BTreeSet<String> = texts.keys().cloned().collect();
    modules.extend(native_module(package));
    let mut g = BTreeMap::new();
    for (stem, text) in &texts {
        let mut to = imports(&code_of(text), &modules);
        to.remove(stem);
        to.retain(|m| texts.contains_key(m));
        g.insert(
            format!("{stem}.py"),
            to.into_iter().map(|m| format!("{m}.py")).collect(),
        );
    }
    g
}

/// Modules that need not open with a docstring: `_sitecustomize.py` runs as a file of its own
/// before `bitexact` is imported and opens with a comment header instead.
const NO_DOCSTRING: &[&str] = &["_sitecustomize.py"];

/// Modules of `package` over [`super::MAX_LINES`] lines or not opening with a docstring.
fn shape_problems(package: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(package)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines = text.lines().count();
        if lines > super::MAX_LINES {
            out.push(format!(
                "{name} has {lines} lines (over {})",
                super::MAX_LINES
            ));
        }
        let opening = text.trim_start();
        let docstring = opening.starts_with("\"\"\"") || opening.starts_with("r\"\"\"");
        if !docstring && !NO_DOCSTRING.contains(&name.as_str()) {
            out.push(format!(
                "{name} does not open with a docstring saying what it holds"
            ));
        }
    }
    out
}

/// Everything wrong with the Python package in `package`, one line each.
pub fn problems(package: &Path) -> Vec<String> {
    let mut out: Vec<String> = super::cycles(&graph(package))
        .into_iter()
        .map(|c| {
            format!(
                "Python import cycle between {} modules: {}",
                c.len(),
                c.join(" ")
            )
        })
        .collect();
    out.extend(shape_problems(package));
    out
}

fn package() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(PACKAGE)
}

#[test]
fn the_python_package_is_kept() {
    assert_eq!(native_module(&package()).as_deref(), Some("_native"));
    let p = problems(&package());
    assert!(
        p.is_empty(),
        "the Python house is not kept:\n  {}",
        p.join("\n  ")
    );
}

#[test]
fn every_import_form_is_an_arrow_and_strings_are_not() {
    let modules: BTreeSet<String> = ["__init__", "a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let code = code_of(
        "\"\"\"from . import f\"\"\"\nimport os, bitexact.a as x\n\
         from .b import y  # from . import f\n\
         def g():\n    from . import (c,\n        d as dd)\n    from bitexact import e, seed\n\
         s = 'import bitexact.f'\nt = sys.modules.get(\"bitexact.f\")\nfrom numpy import f\n",
    );
    let got: Vec<String> = imports(&code, &modules).into_iter().collect();
    assert_eq!(got, ["__init__", "a", "b", "c", "d", "e"]);
}

/// The cycle the tracer had (issue 28): `_trace` imported `_trace_hooks` inside `start()`,
/// and `_trace_hooks` imported `_trace` at the top.
#[test]
fn a_planted_python_cycle_is_caught() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join(PACKAGE);
    super::copy_dir(&package(), &copy);
    std::fs::copy(
        package().with_file_name("pyproject.toml"),
        scratch.path().join("pyproject.toml"),
    )
    .unwrap();
    assert!(problems(&copy).is_empty());
    let hooks = copy.join("_trace_hooks.py");
    let text = std::fs::read_to_string(&hooks).unwrap();
    std::fs::write(&hooks, format!("from . import _trace\n{text}")).unwrap();
    let p = problems(&copy).join("\n");
    assert!(
        p.contains("Python import cycle between") && p.contains("_trace.py _trace_hooks.py"),
        "{p}"
    );
}

/// An over-long module and one without a docstring are caught too.
#[test]
fn a_planted_long_or_undocumented_module_is_caught() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join(PACKAGE);
    super::copy_dir(&package(), &copy);
    assert!(shape_problems(&copy).is_empty());
    let seed = copy.join("_seed.py");
    let text = std::fs::read_to_string(&seed).unwrap();
    let after_open = text.strip_prefix("\"\"\"").unwrap();
    let body = after_open.split_once("\"\"\"").unwrap().1; // the module without its docstring
    std::fs::write(&seed, body).unwrap();
    std::fs::write(
        copy.join("_long.py"),
        "\"\"\"Long.\"\"\"\n".to_string() + &"x = 1\n".repeat(super::MAX_LINES),
    )
    .unwrap();
    let p = shape_problems(&copy).join("\n");
    assert!(
        p.contains("_seed.py does not open with a docstring")
            && p.contains(&format!("_long.py has {} lines", super::MAX_LINES + 1)),
        "{p}"
    );
}
