//! Keeps the house (docs/architecture.md): reads the library's sources under `src/`
//! and fails, naming the files, on
//! - an import cycle between source files (`use crate::…`, `use super::…` and inline
//!   `crate::…` paths, resolved through `pub use` re-exports to the file that defines the item);
//! - an arrow that points back up the layers ([`LAYERS`]: data flows one way);
//! - a source file over [`MAX_LINES`] lines;
//! - `fs::rename` outside the one atomic-write helper (`src/atomic.rs`);
//! - a verdict assigned outside the judge (`src/outcome/judge.rs`);
//! - an import cycle between the Python package's modules (`python/bitexact/`, see
//!   [`python`]), one of them over [`MAX_LINES`] lines, or one without a docstring.
//!
//! Test code (`#[cfg(test)]` sections) is not part of the house and is skipped. The binary's
//! own file (`src/main.rs`) imports the library as `bitexact::`, so it sits on top of
//! everything and is not scanned for `crate::` arrows; the command line itself (`src/cli/`,
//! which the Python bindings crate `crates/bitexact-python` calls too) is the top layer of the
//! library.
//! `planted_cycle_is_caught` proves the checks can fail: it copies `src/` to a scratch
//! directory, plants a cycle, an over-long file, a rename and a verdict assignment, and
//! asserts that each is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "architecture/python.rs"]
mod python;

/// Largest source file allowed, in lines.
const MAX_LINES: usize = 450;

/// The layers, bottom first: a module may use its own layer and the layers below, never one
/// above (the first matching prefix names a module's layer).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "atomic",
            "tensor",
            "digest",
            "sha_lanes",
            "rng",
            "controls",
            "memory",
            "process",
            "tensor_io",
            "tensor_files",
            "diff",
            "outputs",
            "glob",
            "cleanup",
            "quote",
            "protocol",
            "process",
        ],
    ),
    ("backend", &["backend", "platform", "vary", "trace"]),
    ("cases", &["case", "ops", "train", "cases"]),
    (
        "harness",
        &["outcome", "harness", "isolate", "run", "cross", "cost"],
    ),
    ("snapshots", &["snapshot"]),
    ("suite", &["suite", "check"]),
    ("report", &["report"]),
    ("cli", &["cli"]),
    ("root", &[""]),
];

/// One library source file.
struct Source {
    /// Path relative to `src/`.
    rel: String,
    /// Module path (`harness::outcome`; `` for lib.rs).
    module: String,
    /// The text outside `#[cfg(test)]` sections, comments removed.
    code: String,
    /// Lines of the whole file.
    lines: usize,
}

fn module_of(rel: &str) -> String {
    let stem = rel.trim_end_matches(".rs");
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    if stem == "lib" {
        String::new()
    } else {
        stem.replace('/', "::")
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` items.
fn strip(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut pending_cfg_test = false;
    let mut depth = 0i32;
    for line in text.lines() {
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        let t = code.trim();
        if t.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        let opens = code.matches('{').count() as i32;
        let closes = code.matches('}').count() as i32;
        if pending_cfg_test && skip_depth.is_none() && !t.is_empty() && !t.starts_with("#[") {
            pending_cfg_test = false;
            if opens > closes {
                skip_depth = Some(depth);
            }
            depth += opens - closes;
            continue; // a one-line item (`mod tests;`, `use …;`) or the opening line
        }
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn read_sources(src: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "main.rs" {
                return None;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            Some(Source {
                module: module_of(&rel),
                code: strip(&text),
                lines: text.lines().count(),
                rel,
            })
        })
        .collect()
}

/// Expands `use` trees into full paths: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        return vec![path.split_whitespace().collect::<String>()];
    };
    let prefix: String = tree[..open].split_whitespace().collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| match p.as_str() {
            "self" => prefix.trim_end_matches("::").to_string(),
            _ => format!("{prefix}{p}"),
        })
        .collect()
}

/// Every `use` statement's paths in `code` (with `pub` or not), and whether it is `pub use`.
fn uses(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let at_start = before
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == '}');
        let after = &rest[i + 4..];
        let Some(end) = after.find(';') else { break };
        if at_start {
            let is_pub = before.trim_end().ends_with("pub") || before.trim_end().ends_with(')');
            for p in expand(&after[..end]) {
                out.push((is_pub, p));
            }
        }
        rest = &after[end..];
    }
    out
}

/// Makes `path` (as written in `module`) absolute from the crate root, or None for
/// external crates and std.
fn absolute(module: &str, is_mod_rs: bool, path: &str) -> Option<Vec<String>> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    };
    match segs.first().copied() {
        Some("crate") => {
            segs.remove(0);
            base.clear();
        }
        Some("super") => {
            // In `a/b.rs` (module a::b), super is `a`; in `a/b/mod.rs` (also a::b), super is `a`.
            while segs.first() == Some(&"super") {
                segs.remove(0);
                base.pop();
            }
        }
        Some("self") => {
            segs.remove(0);
        }
        _ => return None,
    }
    let _ = is_mod_rs;
    base.extend(segs.iter().map(|s| s.to_string()));
    Some(base)
}

/// The import graph: file → files it uses, with `pub use` re-exports resolved to the file
/// that defines the item.
fn graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeMap<&str, &Source> = sources.iter().map(|s| (s.module.as_str(), s)).collect();
    // (module, item) → the module a `pub use` re-exports it from.
    let mut reexports: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for s in sources {
        let is_mod = s.rel.ends_with("mod.rs") || s.rel == "lib.rs";
        for (is_pub, p) in uses(&s.code) {
            let rel = if p.starts_with("crate::")
                || p.starts_with("super::")
                || p.starts_with("self::")
            {
                p.clone()
            } else if modules.contains_key(
                format!(
                    "{}{}",
                    if s.module.is_empty() {
                        String::new()
                    } else {
                        format!("{}::", s.module)
                    },
                    p.split("::").next().unwrap()
                )
                .as_str(),
            ) {
                format!("self::{p}")
            } else {
                continue;
            };
            if let (true, Some(abs)) = (is_pub, absolute(&s.module, is_mod, &rel)) {
                if let Some(item) = abs.last() {
                    reexports.insert((s.module.clone(), item.clone()), abs.clone());
                }
            }
        }
    }
    // Resolves an absolute path to the file that defines what it names.
    let resolve = |abs: &[String]| -> Option<String> {
        let mut path = abs.to_vec();
        for _ in 0..8 {
            let mut k = path.len();
            while k > 0 && !modules.contains_key(path[..k].join("::").as_str()) {
                k -= 1;
            }
            let m = path[..k].join("::");
            if k == 0 && !modules.contains_key("") {
                return None;
            }
            match path.get(k) {
                Some(item) => match reexports.get(&(m.clone(), item.clone())) {
                    Some(target) if target[..] != path[..k + 1] => {
                        let mut next = target.clone();
                        next.extend(path[k + 1..].iter().cloned());
                        path = next;
                    }
                    _ => return Some(m),
                },
                None => return Some(m),
            }
        }
        None
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let is_mod = s.rel.ends_with("mod.rs") || s.rel == "lib.rs";
        let mut paths: Vec<String> = uses(&s.code)
            .into_iter()
            .filter(|(is_pub, _)| !(*is_pub && is_mod)) // a facade's re-exports are not its needs
            .map(|(_, p)| p)
            .collect();
        // Inline paths: `crate::a::b::c(...)`.
        let code = &s.code;
        let mut i = 0;
        while let Some(j) = code[i..].find("crate::") {
            let start = i + j;
            let end = code[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| start + e);
            paths.push(code[start..end].trim_end_matches(':').to_string());
            i = end;
        }
        // Modules imported by name (`use crate::backend::cuda;` then `cuda::launch(…)`): each
        // `alias::item` use resolves through that module to the file defining the item.
        let mut aliases: Vec<(String, String)> = Vec::new();
        for p in &paths {
            if let Some(abs) = absolute(&s.module, is_mod, p) {
                if modules.contains_key(abs.join("::").as_str()) {
                    if let Some(last) = abs.last() {
                        aliases.push((last.clone(), p.clone()));
                    }
                }
            }
        }
        for (alias, path) in aliases {
            let pat = format!("{alias}::");
            let mut i = 0;
            while let Some(j) = code[i..].find(&pat) {
                let start = i + j;
                let before = code[..start].chars().last();
                let end = code[start + pat.len()..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .map_or(code.len(), |e| start + pat.len() + e);
                if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    paths.push(format!("{path}::{}", &code[start + pat.len()..end]));
                }
                i = end.max(start + 1);
            }
        }
        let edges = g.entry(s.rel.clone()).or_default();
        for p in paths {
            if !(p.starts_with("crate::") || p.starts_with("super::")) {
                continue;
            }
            let Some(abs) = absolute(&s.module, is_mod, &p) else {
                continue;
            };
            if let Some(m) = resolve(&abs) {
                let target = modules[m.as_str()];
                if target.rel != s.rel && !m.is_empty() {
                    edges.insert(target.rel.clone());
                }
            }
        }
    }
    g
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn layer(rel: &str) -> usize {
    let m = module_of(rel);
    let top = m.split("::").next().unwrap_or("");
    LAYERS
        .iter()
        .position(|(_, mods)| mods.contains(&top))
        .unwrap_or(LAYERS.len() - 1)
}

/// Everything wrong with the house under `src`, one line each.
fn problems(src: &Path) -> Vec<String> {
    let sources = read_sources(src);
    let g = graph(&sources);
    let mut out = Vec::new();
    for c in cycles(&g) {
        out.push(format!(
            "import cycle between {} files: {}",
            c.len(),
            c.join(" ")
        ));
    }
    for (from, tos) in &g {
        for to in tos {
            if layer(to) > layer(from) {
                out.push(format!(
                    "arrow up the layers: {from} ({}) uses {to} ({})",
                    LAYERS[layer(from)].0,
                    LAYERS[layer(to)].0
                ));
            }
        }
    }
    for s in &sources {
        if s.lines > MAX_LINES {
            out.push(format!(
                "{} has {} lines (over {MAX_LINES})",
                s.rel, s.lines
            ));
        }
        if s.rel != "atomic.rs" && s.code.contains("fs::rename") {
            out.push(format!("{} calls fs::rename outside src/atomic.rs", s.rel));
        }
        let assigns = s.code.contains(".verdict =") && !s.code.contains(".verdict() ==");
        if s.rel != "outcome/judge.rs" && (assigns || s.code.contains("verdict: Verdict::")) {
            out.push(format!("{} assigns a verdict outside the judge", s.rel));
        }
    }
    out
}

/// Figures of the house under `BITEXACT_ARCH_SRC` (default: this crate's `src/`), for the
/// record: `BITEXACT_ARCH_SRC=/path/to/src cargo test --test architecture figures -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn figures() {
    let src = std::env::var_os("BITEXACT_ARCH_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let sources = read_sources(&src);
    let g = graph(&sources);
    let cycles = cycles(&g);
    let sizes: Vec<usize> = cycles.iter().map(Vec::len).collect();
    println!("files: {}", sources.len());
    println!("import cycles: {} (files in each: {sizes:?})", cycles.len());
    for c in &cycles {
        println!("  {}", c.join(" "));
    }
    let up: Vec<String> = problems(&src)
        .into_iter()
        .filter(|p| p.starts_with("arrow up"))
        .collect();
    println!("arrows up the layers: {}", up.len());
    for p in &up {
        println!("  {p}");
    }
    let largest = sources.iter().max_by_key(|s| s.lines).unwrap();
    println!("largest file: {} ({} lines)", largest.rel, largest.lines);
    let pub_items: usize = sources
        .iter()
        .map(|s| {
            s.code
                .lines()
                .filter(|l| l.trim_start().starts_with("pub "))
                .count()
        })
        .sum();
    println!("`pub ` lines (outside tests): {pub_items}");
}

#[test]
fn the_house_is_kept() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let p = problems(&src);
    assert!(p.is_empty(), "the house is not kept:\n  {}", p.join("\n  "));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest: PathBuf = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

#[test]
fn planted_cycle_is_caught() {
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &src);
    assert!(problems(&src).is_empty());
    // digest → report, while report (through the harness) already uses digest.
    let digest = src.join("digest.rs");
    let text = std::fs::read_to_string(&digest).unwrap();
    std::fs::write(
        &digest,
        format!("use crate::report::render;\nfn planted() {{ let _ = render; }}\n{text}"),
    )
    .unwrap();
    let p = problems(&src).join("\n");
    assert!(p.contains("import cycle"), "{p}");
    assert!(
        p.contains("digest.rs") && p.contains("report/mod.rs"),
        "{p}"
    );
    assert!(
        p.contains("arrow up the layers: digest.rs (base) uses report/mod.rs"),
        "{p}"
    );
    // An over-long file, a rename and a verdict set outside the judge.
    std::fs::write(src.join("rng.rs"), "// x\n".repeat(MAX_LINES + 1)).unwrap();
    let diff = src.join("diff.rs");
    let text = std::fs::read_to_string(&diff).unwrap();
    std::fs::write(
        &diff,
        format!("{text}\nfn sneaky(r: &mut R) {{ std::fs::rename(\"a\", \"b\").ok(); r.verdict = V::X; }}\n"),
    )
    .unwrap();
    let p = problems(&src).join("\n");
    assert!(
        p.contains(&format!("rng.rs has {} lines", MAX_LINES + 1)),
        "{p}"
    );
    assert!(
        p.contains("diff.rs calls fs::rename outside src/atomic.rs"),
        "{p}"
    );
    assert!(
        p.contains("diff.rs assigns a verdict outside the judge"),
        "{p}"
    );
}

#[test]
fn test_sections_and_comments_are_skipped() {
    let code = strip(
        "use crate::a;\n// use crate::b;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::c;\n    fn g() { if x { } }\n}\nfn h() {}\n",
    );
    assert!(code.contains("crate::a") && code.contains("fn h"), "{code}");
    assert!(
        !code.contains("crate::b") && !code.contains("crate::c"),
        "{code}"
    );
    assert_eq!(
        expand("crate::a::{b, c::{d, e as f}, self}"),
        vec![
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "crate::a"
        ]
    );
}

/// The `bitexact` crate has no PyO3 anywhere in its dependency tree: the Python bindings are
/// their own crate (`crates/bitexact-python`), as `cargo tree -p bitexact` would show.
#[test]
fn the_library_crate_does_not_depend_on_pyo3() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lock: toml::Value = std::fs::read_to_string(root.join("Cargo.lock"))
        .unwrap()
        .parse()
        .unwrap();
    let packages = lock["package"].as_array().unwrap();
    let deps = |name: &str| -> Vec<String> {
        let p = packages.iter().find(|p| p["name"].as_str() == Some(name));
        p.and_then(|p| p.get("dependencies"))
            .and_then(|d| d.as_array())
            .map(|d| {
                d.iter()
                    .filter_map(|s| s.as_str()?.split(' ').next().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut seen = BTreeSet::new();
    let mut todo = vec!["bitexact".to_string()];
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            todo.extend(deps(&name));
        }
    }
    assert!(seen.len() > 10, "the walk found the tree: {seen:?}");
    let py: Vec<_> = seen.iter().filter(|n| n.starts_with("pyo3")).collect();
    assert!(py.is_empty(), "bitexact depends on {py:?}");
    assert!(
        deps("bitexact-python").iter().any(|d| d == "pyo3"),
        "the bindings crate is in the workspace"
    );
}
