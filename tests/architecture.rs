//! Keeps the house (docs/architecture.md): reads the library's sources under `src/`
//! and fails, naming the files, on
//! - an import cycle between source files (`use crate::…`, `use super::…` and inline
//!   `crate::…`/`super::…` paths, resolved through `pub use` re-exports to the file that
//!   defines the item, and to each file not a facade whose re-export they went through);
//! - an import cycle between modules (a top-level `src/<name>` folder or file), each path
//!   counted for the module it names, facades' `pub use` re-exports included: a circle between
//!   files of two modules can hide behind re-exports, one between the modules cannot
//!   ([`ALLOWED_MODULE_CYCLES`] names the exceptions, with their reasons);
//! - an arrow that points back up the layers ([`LAYERS`]: data flows one way), between files
//!   or between modules;
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
//! asserts that each is reported; `planted_cycles_through_reexports_are_caught` plants
//! circles that only a `pub use` closes.

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
            "fingerprint",
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
            "scratch",
        ],
    ),
    ("backend", &["backend", "platform", "vary", "trace"]),
    ("cases", &["case", "ops", "train", "cases"]),
    ("outcome", &["outcome"]),
    (
        "harness",
        &["harness", "isolate", "program", "cross", "cost"],
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

/// `code` without its `use` statements (what [`uses`] reads), for the paths written inline.
fn without_uses(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let at_start = before
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == '}');
        let Some(end) = rest[i..].find(';').filter(|_| at_start) else {
            out.push_str(&rest[..i + 4]);
            rest = &rest[i + 4..];
            continue;
        };
        out.push_str(before);
        rest = &rest[i + end..];
    }
    out.push_str(rest);
    out
}

/// Makes `path` (as written in `module`) absolute from the crate root, or None for
/// external crates and std.
fn absolute(module: &str, path: &str) -> Option<Vec<String>> {
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
    base.extend(segs.iter().map(|s| s.to_string()));
    Some(base)
}

/// The crate's modules by path, and what each `pub use` re-exports.
struct Crate<'a> {
    /// Module path (`harness::planner`) → its file.
    modules: BTreeMap<&'a str, &'a Source>,
    /// (module, item) → the absolute path a `pub use` in that module re-exports it from.
    reexports: BTreeMap<(String, String), Vec<String>>,
}

impl<'a> Crate<'a> {
    fn new(sources: &'a [Source]) -> Crate<'a> {
        let modules: BTreeMap<&str, &Source> =
            sources.iter().map(|s| (s.module.as_str(), s)).collect();
        let mut reexports = BTreeMap::new();
        for s in sources {
            for (is_pub, p) in uses(&s.code) {
                let child = |p: &str| {
                    let first = p.split("::").next().unwrap();
                    let path = match s.module.as_str() {
                        "" => first.to_string(),
                        m => format!("{m}::{first}"),
                    };
                    modules.contains_key(path.as_str())
                };
                let rel = if ["crate::", "super::", "self::"]
                    .iter()
                    .any(|k| p.starts_with(k))
                {
                    p.clone()
                } else if child(&p) {
                    format!("self::{p}")
                } else {
                    continue;
                };
                if let (true, Some(abs)) = (is_pub, absolute(&s.module, &rel)) {
                    if let Some(item) = abs.last() {
                        reexports.insert((s.module.clone(), item.clone()), abs.clone());
                    }
                }
            }
        }
        Crate { modules, reexports }
    }

    /// The module that defines what the absolute path `abs` names, and the modules whose
    /// `pub use` the path went through to reach it (None for what is not in the crate).
    fn resolve(&self, abs: &[String]) -> Option<(String, Vec<String>)> {
        let mut path = abs.to_vec();
        let mut through = Vec::new();
        for _ in 0..8 {
            let mut k = path.len();
            while k > 0 && !self.modules.contains_key(path[..k].join("::").as_str()) {
                k -= 1;
            }
            let m = path[..k].join("::");
            if k == 0 && !self.modules.contains_key("") {
                return None;
            }
            let Some(item) = path.get(k) else {
                return Some((m, through));
            };
            match self.reexports.get(&(m.clone(), item.clone())) {
                Some(target) if target[..] != path[..k + 1] => {
                    let mut next = target.clone();
                    next.extend(path[k + 1..].iter().cloned());
                    path = next;
                    through.push(m);
                }
                _ => return Some((m, through)),
            }
        }
        None
    }

    /// Every `crate::`/`super::` path `s` names: its `use` paths (a facade's `pub use`
    /// re-exports too when `facades`), its inline paths, and `alias::item` for each
    /// module it imports by name (`use crate::backend::cuda;` then `cuda::launch(…)`).
    fn named_paths(&self, s: &Source, facades: bool) -> Vec<String> {
        let mut paths: Vec<String> = uses(&s.code)
            .into_iter()
            .filter(|(is_pub, _)| facades || !(*is_pub && is_facade(&s.rel)))
            .map(|(_, p)| p)
            .collect();
        let code = &without_uses(&s.code);
        paths.extend(inline_paths(code, "crate::"));
        paths.extend(inline_paths(code, "super::"));
        let aliases: Vec<(String, String)> = paths
            .iter()
            .filter_map(|p| {
                let abs = absolute(&s.module, p)?;
                let named = self.modules.contains_key(abs.join("::").as_str());
                Some((abs.last()?.clone(), p.clone())).filter(|_| named)
            })
            .collect();
        for (alias, path) in aliases {
            paths.extend(alias_uses(code, &alias).map(|item| format!("{path}::{item}")));
        }
        paths.retain(|p| p.starts_with("crate::") || p.starts_with("super::"));
        paths
    }
}

/// The paths written inline in `code` that start with `start` (`crate::a::b::c(…)`), up to
/// the last name (not a `use` tree's `{`).
fn inline_paths<'c>(code: &'c str, start: &'c str) -> impl Iterator<Item = String> + 'c {
    let mut i = 0;
    std::iter::from_fn(move || loop {
        let at = i + code[i..].find(start)?;
        let end = code[at..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .map_or(code.len(), |e| at + e);
        i = end;
        let before = code[..at].chars().last();
        let path = code[at..end].trim_end_matches(':');
        let last = path.rsplit("::").next().unwrap_or("");
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            && !["crate", "super", "self"].contains(&last)
        {
            return Some(path.to_string());
        }
    })
}

/// The items `code` reaches as `alias::item`.
fn alias_uses<'c>(code: &'c str, alias: &str) -> impl Iterator<Item = &'c str> + 'c {
    let pat = format!("{alias}::");
    let mut i = 0;
    std::iter::from_fn(move || loop {
        let start = i + code[i..].find(&pat)?;
        let from = start + pat.len();
        let end = code[from..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(code.len(), |e| from + e);
        i = end.max(start + 1);
        let before = code[..start].chars().last();
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            return Some(&code[from..end]);
        }
    })
}

/// Whether `rel` is a facade: a `mod.rs` or `lib.rs`, whose `pub use` lines are the face of
/// its module, not needs of its own.
fn is_facade(rel: &str) -> bool {
    rel.ends_with("mod.rs") || rel == "lib.rs"
}

/// The import graph between files: file → files it uses. A path re-exported by `pub use` is
/// an arrow to the file that defines the item, and to every file that is not a facade whose
/// `pub use` it went through (`noise::PREFIX` re-exported by `noise.rs` from `format.rs` is an
/// arrow to both).
fn graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let krate = Crate::new(sources);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let edges = g.entry(s.rel.clone()).or_default();
        for p in krate.named_paths(s, false) {
            let Some(abs) = absolute(&s.module, &p) else {
                continue;
            };
            let Some((m, through)) = krate.resolve(&abs) else {
                continue;
            };
            let leaves = through
                .iter()
                .map(|t| &krate.modules[t.as_str()].rel)
                .filter(|rel| !is_facade(rel));
            let defining = (!m.is_empty()).then(|| &krate.modules[m.as_str()].rel);
            for rel in leaves.chain(defining) {
                if *rel != s.rel {
                    edges.insert(rel.clone());
                }
            }
        }
    }
    g
}

/// The top-level module (`src/<name>` folder or file) of a module path; `` for the root.
fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or("")
}

/// The import graph between top-level modules: module → modules it names, as written, facades'
/// `pub use` re-exports included (a module that re-exports another's item uses it). Paths to
/// the root's re-exports (`crate::Result`) count for the module that defines the item.
fn module_graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let krate = Crate::new(sources);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let from = top(&s.module);
        if from.is_empty() {
            continue; // lib.rs: declares and re-exports every module
        }
        let edges = g.entry(from.to_string()).or_default();
        for p in krate.named_paths(s, true) {
            let Some(abs) = absolute(&s.module, &p) else {
                continue;
            };
            let to = match abs.first() {
                Some(first) if krate.modules.contains_key(first.as_str()) => first.clone(),
                _ => match krate.resolve(&abs) {
                    Some((m, _)) => top(&m).to_string(),
                    None => continue,
                },
            };
            if !to.is_empty() && to != from {
                edges.insert(to);
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

/// The layer of a top-level module (the root's, last, for one [`LAYERS`] does not name).
fn layer_of(top: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, mods)| mods.contains(&top))
        .unwrap_or(LAYERS.len() - 1)
}

fn layer(rel: &str) -> usize {
    layer_of(top(&module_of(rel)))
}

/// Module cycles allowed, each with the reason it is allowed. None is: every cycle between
/// top-level modules fails.
const ALLOWED_MODULE_CYCLES: &[(&[&str], &str)] = &[];

/// Cycles between top-level modules, not counting those in [`ALLOWED_MODULE_CYCLES`].
fn module_cycles(sources: &[Source]) -> Vec<Vec<String>> {
    cycles(&module_graph(sources))
        .into_iter()
        .filter(|c| !ALLOWED_MODULE_CYCLES.iter().any(|(a, _)| c == a))
        .collect()
}

/// Arrows up the layers, one line each: between files, then between top-level modules.
fn arrows_up(sources: &[Source]) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in &graph(sources) {
        for to in tos.iter().filter(|to| layer(to) > layer(from)) {
            out.push(format!(
                "arrow up the layers: {from} ({}) uses {to} ({})",
                LAYERS[layer(from)].0,
                LAYERS[layer(to)].0
            ));
        }
    }
    for (from, tos) in &module_graph(sources) {
        for to in tos.iter().filter(|to| layer_of(to) > layer_of(from)) {
            out.push(format!(
                "arrow up the layers: module {from} ({}) uses module {to} ({})",
                LAYERS[layer_of(from)].0,
                LAYERS[layer_of(to)].0
            ));
        }
    }
    out
}

/// Everything wrong with the house under `src`, one line each.
fn problems(src: &Path) -> Vec<String> {
    let sources = read_sources(src);
    let mut out = Vec::new();
    for c in cycles(&graph(&sources)) {
        out.push(format!(
            "import cycle between {} files: {}",
            c.len(),
            c.join(" ")
        ));
    }
    for c in module_cycles(&sources) {
        out.push(format!(
            "import cycle between {} modules: {}",
            c.len(),
            c.join(" ")
        ));
    }
    out.extend(arrows_up(&sources));
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
    let edges: usize = g.values().map(BTreeSet::len).sum();
    println!("files: {} (import arrows: {edges})", sources.len());
    let file_cycles = cycles(&g);
    let sizes: Vec<usize> = file_cycles.iter().map(Vec::len).collect();
    println!(
        "import cycles between files: {} (files in each: {sizes:?})",
        file_cycles.len()
    );
    for c in &file_cycles {
        println!("  {}", c.join(" "));
    }
    let mg = module_graph(&sources);
    let edges: usize = mg.values().map(BTreeSet::len).sum();
    println!("modules: {} (import arrows: {edges})", mg.len());
    let module_cycles = cycles(&mg);
    println!("import cycles between modules: {}", module_cycles.len());
    for c in &module_cycles {
        println!("  {}", c.join(" "));
    }
    let up = arrows_up(&sources);
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
    let (_scratch, src, _) = scratch_src();
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

/// A copy of this crate's `src/` in a scratch directory, and the problems it has before
/// anything is planted.
fn scratch_src() -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &src);
    let before = problems(&src);
    (scratch, src, before)
}

/// Puts `line` at the top of the file `rel` under `src`.
fn plant(src: &Path, rel: &str, line: &str) {
    let file = src.join(rel);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{line}\n{text}")).unwrap();
}

/// The problems of `src` not among `before`, one a line.
fn new_problems(src: &Path, before: &[String]) -> String {
    let p = problems(src);
    let new: Vec<String> = p.into_iter().filter(|p| !before.contains(p)).collect();
    new.join("\n")
}

/// Circles that run through a `pub use`, which a graph of files resolved to the defining file
/// cannot see: a module taking an item of a module that reaches it through its facade's
/// re-exports, a facade re-exporting another module's item (circles of modules), and a file
/// reading its own item back through a sibling that re-exports it (a circle of files).
#[test]
fn planted_cycles_through_reexports_are_caught() {
    // outcome/mod.rs → cost.rs → harness, which reaches outcome/case.rs only through
    // outcome/mod.rs's `pub use`: no circle of files, one of modules, and an arrow up.
    let (_scratch, src, before) = scratch_src();
    plant(
        &src,
        "outcome/mod.rs",
        "use crate::cost::cost_of_determinism;",
    );
    let p = new_problems(&src, &before);
    assert!(
        p.contains("import cycle between 3 modules: cost harness outcome"),
        "{p}"
    );
    assert!(
        p.contains("arrow up the layers: outcome/mod.rs (outcome) uses cost.rs (harness)"),
        "{p}"
    );
    assert!(!p.contains("files:"), "{p}");
    // The same arrow as a facade's re-export: not even an arrow between files.
    let (_scratch, src, before) = scratch_src();
    plant(
        &src,
        "outcome/mod.rs",
        "pub use super::cost::cost_of_determinism;",
    );
    let p = new_problems(&src, &before);
    assert!(
        p.contains("import cycle between 3 modules: cost harness outcome"),
        "{p}"
    );
    assert!(
        !p.contains("files:") && !p.contains("outcome/mod.rs"),
        "{p}"
    );
    // format.rs's own constant read back through compare.rs's re-export, while compare.rs
    // uses format.rs.
    let (_scratch, src, before) = scratch_src();
    plant(
        &src,
        "snapshot/compare.rs",
        "pub use super::format::SKETCH_PREFIX;",
    );
    let read_back = "fn planted() -> &'static str { super::compare::SKETCH_PREFIX }";
    plant(&src, "snapshot/format.rs", read_back);
    let p = new_problems(&src, &before);
    assert!(
        p.contains("import cycle between 2 files: snapshot/compare.rs snapshot/format.rs"),
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
