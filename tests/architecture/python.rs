//! The Python package's house (`python/bitexact/` and its subpackages, `_trace/`…): no import
//! cycle between its modules, no module over [`super::MAX_LINES`] lines, and every module
//! opens with a docstring saying what it holds (`_sitecustomize.py` excepted: it is written
//! out as a `sitecustomize.py` of its own and opens with a comment saying the same).
//!
//! Every import counts, at the top of a module or inside a function (a lazy import is still
//! an arrow; it only moves the cycle from import time to call time): `from . import a, b`,
//! `from .a import x`, `from .. import a`, `from .._trace import state`,
//! `from bitexact import a`, `from bitexact._trace.state import x`,
//! `import bitexact._trace.state` (parenthesized and `as` forms too). A name imported from a
//! package that is not one of its modules is an attribute of its `__init__.py`: an arrow to
//! it. Importing a module of a subpackage runs that subpackage's `__init__.py` first: an
//! arrow to it too, except from inside that subpackage. A module's implicit import of its own
//! packages is not an arrow (Python imports them first, whoever asks), and neither is
//! `sys.modules.get("bitexact.x")`: a lookup that imports nothing. Strings and comments are
//! skipped.

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

/// The statements of `code`, parenthesized and backslash continuations joined.
fn statements(code: &str) -> Vec<String> {
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
    statements
}

/// `a.b` from `a` and `b`, either of which may be empty (the package itself).
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}.{b}"),
    }
}

/// The package's modules, by dotted name under the package: `_cli`, `_trace.state`, and for
/// an `__init__.py` its package's name (`_trace`; `__init__` for the package itself).
#[derive(Default)]
struct Modules {
    /// Every module's name.
    all: BTreeSet<String>,
    /// The subpackages' names (`_trace`), each also a module: its `__init__.py`.
    packages: BTreeSet<String>,
}

impl Modules {
    /// The package a module's relative imports start from: a subpackage's `__init__.py` is
    /// in that subpackage, any other module in its parent (`` for the package itself).
    fn package_of(&self, module: &str) -> String {
        if module == "__init__" {
            String::new()
        } else if self.packages.contains(module) {
            module.to_string()
        } else {
            module.rsplit_once('.').map_or("", |(p, _)| p).to_string()
        }
    }

    /// The module that holds the attributes of `target` (a package's `__init__`).
    fn init_of(target: &str) -> String {
        if target.is_empty() {
            "__init__".into()
        } else {
            target.to_string()
        }
    }

    /// What `from <from> import …` names, as a dotted name under the package (`` for the
    /// package itself), as written in `module`; None for another package or above this one.
    fn named_by_from(&self, from: &str, module: &str) -> Option<String> {
        let rest = from.trim_start_matches('.');
        let level = from.len() - rest.len();
        if level == 0 {
            return if from == PACKAGE {
                Some(String::new())
            } else {
                from.strip_prefix(&format!("{PACKAGE}."))
                    .map(str::to_string)
            };
        }
        let mut base = self.package_of(module);
        for _ in 1..level {
            if base.is_empty() {
                return None; // above the package
            }
            base = base.rsplit_once('.').map_or("", |(p, _)| p).to_string();
        }
        Some(join(&base, rest))
    }

    /// The modules importing `target` runs for `module`: each subpackage on the way that is
    /// not one of `module`'s own (Python imports those first, whoever asks), and `target`.
    fn imported(&self, target: &str, module: &str) -> Vec<String> {
        let own = |pkg: &str| module == pkg || module.starts_with(&format!("{pkg}."));
        let parts: Vec<&str> = target.split('.').collect();
        (1..=parts.len())
            .map(|k| parts[..k].join("."))
            .filter(|m| self.all.contains(m) && !own(m))
            .filter(|m| *m == target || self.packages.contains(m))
            .collect()
    }
}

/// The package modules `code` (the text of `module`) imports (`__init__` for the package
/// itself).
fn imports(code: &str, module: &str, modules: &Modules) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let names = |list: &str| -> Vec<String> {
        list.trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace())
            .split(',')
            .filter_map(|n| n.split_whitespace().next())
            .map(str::to_string)
            .collect()
    };
    for s in statements(code) {
        let words: Vec<&str> = s.split_whitespace().collect();
        match words.as_slice() {
            ["from", from, "import", ..] => {
                let Some(target) = modules.named_by_from(from, module) else {
                    continue; // another package
                };
                out.extend(modules.imported(&target, module));
                let list = &s[s.find(" import ").unwrap() + 8..];
                for n in names(list) {
                    let sub = join(&target, &n);
                    if modules.all.contains(&sub) {
                        out.extend(modules.imported(&sub, module));
                    } else {
                        out.insert(Modules::init_of(&target)); // an attribute
                    }
                }
            }
            ["import", ..] => {
                for n in names(&s[7..]) {
                    if n == PACKAGE {
                        out.insert("__init__".into());
                    } else if let Some(m) = n.strip_prefix(&format!("{PACKAGE}.")) {
                        out.extend(modules.imported(m, module));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The `.py` files under `package` (subpackages too, `__pycache__` not), by path relative to
/// it (`_trace/state.py`), sorted.
fn python_files(package: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![package.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "__pycache__") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "py") {
                let rel = p.strip_prefix(package).unwrap().to_string_lossy();
                out.push(rel.replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// The module a file under the package is (`_trace/state.py` → `_trace.state`,
/// `_trace/__init__.py` → `_trace`, `__init__.py` → `__init__`).
fn module_of_file(rel: &str) -> String {
    let stem = rel.trim_end_matches(".py");
    match stem.strip_suffix("/__init__") {
        Some(pkg) => pkg.replace('/', "."),
        None => stem.replace('/', "."),
    }
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

/// The package's import graph: `module.py` (`_trace/state.py`) → the package's modules it
/// imports (not the native one, a leaf).
fn graph(package: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = BTreeMap::new(); // module → (file, text)
    let mut modules = Modules::default();
    for rel in python_files(package) {
        let module = module_of_file(&rel);
        if rel.ends_with("/__init__.py") {
            modules.packages.insert(module.clone());
        }
        let text = std::fs::read_to_string(package.join(&rel)).unwrap();
        files.insert(module, (rel, text));
    }
    modules.all = files.keys().cloned().collect();
    modules.all.extend(native_module(package));
    let mut g = BTreeMap::new();
    for (module, (rel, text)) in &files {
        let to = imports(&code_of(text), module, &modules);
        let to = to
            .iter()
            .filter(|m| *m != module)
            .filter_map(|m| files.get(m).map(|(rel, _)| rel.clone()));
        g.insert(rel.clone(), to.collect());
    }
    g
}

/// Modules that need not open with a docstring: `_sitecustomize.py` runs as a file of its own
/// before `bitexact` is imported and opens with a comment header instead.
const NO_DOCSTRING: &[&str] = &["_sitecustomize.py"];

/// Modules of `package` over [`super::MAX_LINES`] lines or not opening with a docstring.
fn shape_problems(package: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for name in python_files(package) {
        let text = std::fs::read_to_string(package.join(&name)).unwrap();
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

/// A [`Modules`] of these names; those ending in `/` are subpackages (named without it).
fn modules_of(names: &[&str]) -> Modules {
    let mut m = Modules::default();
    for n in names {
        if let Some(pkg) = n.strip_suffix('/') {
            m.packages.insert(pkg.to_string());
        }
        m.all.insert(n.trim_end_matches('/').to_string());
    }
    m
}

#[test]
fn every_import_form_is_an_arrow_and_strings_are_not() {
    let modules = modules_of(&["__init__", "a", "b", "c", "d", "e", "f", "g"]);
    let code = code_of(
        "\"\"\"from . import f\"\"\"\nimport os, bitexact.a as x\n\
         from .b import y  # from . import f\n\
         def g():\n    from . import (c,\n        d as dd)\n    from bitexact import e, seed\n\
         s = 'import bitexact.f'\nt = sys.modules.get(\"bitexact.f\")\nfrom numpy import f\n\
         from .. import g\n",
    );
    let got: Vec<String> = imports(&code, "h", &modules).into_iter().collect();
    assert_eq!(got, ["__init__", "a", "b", "c", "d", "e"]);
}

/// Imports into, out of and between subpackages (`_trace/`, `_pytest/`): relative at any
/// level, absolute, and of a subpackage's attributes (its `__init__.py`). A module does not
/// import its own subpackage (Python imports it first); one outside it does.
#[test]
fn imports_resolve_through_subpackages() {
    let modules = modules_of(&[
        "__init__",
        "_cli",
        "_outputs",
        "_trace/",
        "_trace.state",
        "_trace.digest",
        "_pytest/",
        "_pytest.check",
    ]);
    let got = |module: &str, code: &str| -> Vec<String> {
        imports(&code_of(code), module, &modules)
            .into_iter()
            .collect()
    };
    let state = "from . import digest\nfrom .digest import x\nfrom .. import _outputs\n\
                 from .._pytest import check\nimport bitexact._pytest.check\n\
                 from bitexact._trace import digest\nfrom ... import above\n";
    assert_eq!(
        got("_trace.state", state),
        ["_outputs", "_pytest", "_pytest.check", "_trace.digest"]
    );
    assert_eq!(
        got(
            "_trace.state",
            "from . import start\nfrom .._trace import stop\n"
        ),
        ["_trace"]
    );
    assert_eq!(
        got("_trace", "from .state import run\nfrom . import digest\n"),
        ["_trace.digest", "_trace.state"]
    );
    let cli = "from ._trace import start\nimport bitexact._trace.state\n\
               from ._pytest.check import judge\nfrom bitexact._trace.digest import d\n";
    assert_eq!(
        got("_cli", cli),
        [
            "_pytest",
            "_pytest.check",
            "_trace",
            "_trace.digest",
            "_trace.state"
        ]
    );
}

/// Writes the modules `files` (relative path, code) as a package under `dir`, each opening
/// with a docstring.
fn write_package(dir: &Path, files: &[(&str, &str)]) {
    for (rel, code) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("\"\"\"{rel}.\"\"\"\n{code}")).unwrap();
    }
}

/// Cycles through subpackages fail: across the package boundary, and through a subpackage's
/// `__init__.py`.
#[test]
fn a_cycle_through_subpackages_is_caught() {
    let scratch = tempfile::tempdir().unwrap();
    let package = scratch.path().join(PACKAGE);
    write_package(
        &package,
        &[
            ("__init__.py", ""),
            ("_cli.py", "from ._trace import start\n"),
            ("_outputs.py", "from bitexact._pytest.check import f\n"),
            ("_trace/__init__.py", "from .state import start\n"),
            ("_trace/state.py", "from .. import _seed\n"),
            ("_seed.py", "def seed():\n    from ._trace import state\n"),
            ("_pytest/__init__.py", ""),
            ("_pytest/check.py", "from .._outputs import write\n"),
        ],
    );
    let p = problems(&package).join("\n");
    assert!(
        p.contains("Python import cycle between 2 modules: _outputs.py _pytest/check.py"),
        "{p}"
    );
    assert!(
        p.contains("cycle between 3 modules: _seed.py _trace/__init__.py _trace/state.py"),
        "{p}"
    );
    assert!(!p.contains("_cli.py") && !p.contains("docstring"), "{p}");
}

/// A module imports one that imports it: an arrow of the real package, planted back.
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
    let g = graph(&copy);
    let (from, to) = g
        .iter()
        .find_map(|(from, tos)| Some((from.clone(), tos.iter().next()?.clone())))
        .expect("the package has an import arrow");
    let name = match module_of_file(&from) {
        m if m == "__init__" => PACKAGE.to_string(),
        m => format!("{PACKAGE}.{m}"),
    };
    let back = format!("\ndef planted():\n    import {name}\n");
    let file = copy.join(&to);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text + &back).unwrap();
    let p = problems(&copy).join("\n");
    assert!(
        p.contains("Python import cycle between") && p.contains(&from) && p.contains(&to),
        "{from} → {to}: {p}"
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
