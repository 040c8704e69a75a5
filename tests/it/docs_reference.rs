//! The reference pages under `docs/reference/` are generated from the code, never written by
//! hand, and this test fails when one is stale:
//! - `cli.md` from clap's definition of the command line (`bitexact::cli::command()`);
//! - `json-report.md` and `report.schema.json` from the report types (`bitexact::Report`
//!   and everything it holds derive `schemars::JsonSchema`; field docs are their doc comments);
//! - `environment.md` from `src/protocol.rs` (`NAMES`, the trace levels and record fields).
//!
//! `BITEXACT_WRITE_DOCS=1 cargo test --test it docs_reference::` rewrites the pages (never in CI).
//! `a_stale_page_is_caught` shows the check failing on a planted change.

use bitexact::protocol::{TraceLevel, NAMES, TRACE_RECORD_FIELDS, TRACE_RECORD_VERSION};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::Path;

const FIX: &str = "BITEXACT_WRITE_DOCS=1 cargo test --test it docs_reference::";

/// The banner every generated page starts with.
fn banner(from: &str) -> String {
    format!(
        "<!-- GENERATED from {from} by tests/it/docs_reference.rs ({FIX}); do not edit. -->\n\n"
    )
}

/// A doc comment as a table cell, rustdoc's intra-doc links (`[`x`]`, `[x](path)`) as
/// plain code: their targets are Rust paths, not pages.
fn doc(s: &str) -> String {
    let re = regex::Regex::new(r"\[([^\]]+)\]\([^)]*\)|\[(`[^`\]]+`)\]").unwrap();
    cell(&re.replace_all(s, "$1$2"))
}

/// A table cell: one line, no column breaks.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

// ---- the command line -------------------------------------------------------------------

/// A help text as one table cell, its lines kept apart (`<br>`), ending in a full stop.
fn lines(s: &str) -> String {
    let parts: Vec<String> = s.lines().map(cell).filter(|l| !l.is_empty()).collect();
    let mut out = parts.join("<br>");
    if !out.is_empty() && !out.ends_with(['.', ':']) {
        out.push('.');
    }
    out
}

/// How an argument is written: `-s, --long <VALUE>`, `<NAME>`, `-- <CMD>...`.
fn arg_name(a: &clap::Arg) -> String {
    let flags: Vec<String> = [
        a.get_short().map(|s| format!("-{s}")),
        a.get_long().map(|l| format!("--{l}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut name = flags.join(", ");
    if a.get_action().takes_values() {
        let values: Vec<String> = match a.get_value_names() {
            Some(v) if !v.is_empty() => v.iter().map(|v| format!("<{v}>")).collect(),
            _ => vec![format!("<{}>", a.get_id().as_str().to_uppercase())],
        };
        name = format!("{name} {}", values.join(" ")).trim().to_string();
    }
    if a.is_last_set() {
        name = format!("-- {name}...");
    }
    name
}

/// The flags of `cmd` as one Markdown table (nothing when it has none).
fn arg_table(cmd: &clap::Command, out: &mut String) {
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .collect();
    if args.is_empty() {
        return;
    }
    out.push_str("| argument | description |\n|---|---|\n");
    for a in args {
        let help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut desc = lines(&help);
        let possible: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| match p.get_help() {
                Some(h) => format!("`{}`: {}", p.get_name(), cell(&h.to_string())),
                None => format!("`{}`", p.get_name()),
            })
            .collect();
        if !possible.is_empty() && a.get_action().takes_values() {
            let _ = write!(desc, " Values: {}.", possible.join("; "));
        }
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        if !defaults.is_empty() && a.get_action().takes_values() {
            let _ = write!(desc, " Default: `{}`.", defaults.join(","));
        }
        if a.is_required_set() {
            desc.push_str(" Required.");
        }
        let _ = writeln!(out, "| `{}` | {} |", arg_name(a).replace('|', "\\|"), desc);
    }
    out.push('\n');
}

/// `cmd`'s section and its subcommands', `depth` deep.
fn command_section(cmd: &mut clap::Command, path: &str, depth: usize, out: &mut String) {
    let _ = writeln!(out, "{} `{path}`\n", "#".repeat(depth));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", cell(&about.to_string()));
    }
    let usage = cmd.render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    arg_table(cmd, out);
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let sub = cmd.find_subcommand_mut(&name).expect("listed");
        command_section(sub, &format!("{path} {name}"), depth + 1, out);
    }
}

fn cli_page() -> String {
    let mut cmd = bitexact::cli::command();
    cmd.build();
    let mut out = banner("clap's definition of the command line (src/cli/args.rs)");
    out.push_str("# Command line\n\n");
    out.push_str(
        "Every command and flag of `bitexact`, as `bitexact <command> --help` shows them. Exit \
         codes: [Verdicts and exit codes](verdicts.md).\n\n",
    );
    let subs: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            format!(
                "- [`bitexact {}`](#bitexact-{}): {}\n",
                s.get_name(),
                s.get_name(),
                cell(&about)
            )
        })
        .collect();
    out.push_str(&subs.concat());
    out.push('\n');
    command_section(&mut cmd, "bitexact", 2, &mut out);
    out.trim_end().to_string() + "\n"
}

// ---- the JSON report --------------------------------------------------------------------

/// A schema's type, in words, with definitions linked.
fn type_of(s: &Value) -> String {
    let Some(o) = s.as_object() else {
        return "any".into();
    };
    if let Some(r) = o.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[{name}](#{})", name.to_lowercase());
    }
    if let Some(alts) = o.get("anyOf").or(o.get("oneOf")).and_then(Value::as_array) {
        let parts: Vec<String> = alts.iter().map(type_of).collect();
        return parts.join(" or ");
    }
    if let Some(c) = o.get("const") {
        return format!("`{c}`");
    }
    if let Some(e) = o.get("enum").and_then(Value::as_array) {
        let parts: Vec<String> = e.iter().map(|v| format!("`{v}`")).collect();
        return parts.join(", ");
    }
    let types: Vec<String> = match o.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => vec!["any".into()],
    };
    let named: Vec<String> = types
        .iter()
        .map(|t| match t.as_str() {
            "array" => format!(
                "list of {}",
                o.get("items").map(type_of).unwrap_or("any".into())
            ),
            "object" => match o.get("additionalProperties") {
                Some(v @ Value::Object(_)) => format!("map of string to {}", type_of(v)),
                _ => "object".into(),
            },
            other => other.to_string(),
        })
        .collect();
    named.join(" or ")
}

/// One definition's section: its description, then its fields or its values.
fn definition(name: &str, s: &Map<String, Value>, out: &mut String) {
    let _ = writeln!(out, "## {name}\n");
    if let Some(d) = s.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{}\n", doc(d));
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push_str("| field | type | always present | description |\n|---|---|---|---|\n");
        for (field, p) in props {
            let desc = p.get("description").and_then(Value::as_str).unwrap_or("");
            let always = if required.contains(&field.as_str()) {
                "yes"
            } else {
                "no"
            };
            let _ = writeln!(
                out,
                "| `{field}` | {} | {always} | {} |",
                cell(&type_of(p)),
                doc(desc)
            );
        }
        out.push('\n');
    } else if let Some(alts) = s.get("oneOf").or(s.get("anyOf")).and_then(Value::as_array) {
        out.push_str("| value | meaning |\n|---|---|\n");
        for a in alts {
            let desc = a.get("description").and_then(Value::as_str).unwrap_or("");
            let _ = writeln!(out, "| {} | {} |", cell(&type_of(a)), doc(desc));
        }
        out.push('\n');
    } else {
        let _ = writeln!(out, "Type: {}.\n", type_of(&Value::Object(s.clone())));
    }
}

/// The report's JSON Schema (`report.schema.json`) and its page (`json-report.md`).
fn schema_pages() -> (String, String) {
    // What the report writes (serialize): a field skipped when empty is not required.
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let schema = generator.into_root_schema_for::<bitexact::Report>();
    let schema = serde_json::to_value(schema).unwrap();
    let json = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    let mut out = banner("the report types (src/outcome/ and the types they hold)");
    let _ = write!(
        out,
        "# JSON report\n\n`bitexact report --format json` and `bitexact run --format json` write \
         one object, described here field by field; the same as a JSON Schema: \
         [report.schema.json](report.schema.json). `version` is {}; within a version fields are \
         only added, so a reader should ignore fields it does not know. A field whose \
         \"always present\" is no is left out when empty.\n\n",
        bitexact::outcome::REPORT_VERSION
    );
    let root = schema.as_object().unwrap();
    definition("Report", root, &mut out);
    if let Some(defs) = root.get("$defs").and_then(Value::as_object) {
        let mut names: Vec<&String> = defs.keys().collect();
        names.sort();
        for name in names {
            definition(name, defs[name].as_object().unwrap(), &mut out);
        }
    }
    (json, out.trim_end().to_string() + "\n")
}

// ---- the protocol -----------------------------------------------------------------------

fn environment_page() -> String {
    let mut out = banner("src/protocol.rs");
    out.push_str(
        "# Environment variables and files\n\nThe names bitexact and the programs it runs share \
         (`src/protocol.rs`; Python reads the same names from `bitexact._protocol`). The run \
         contract ([concepts](../concepts/run-contract.md)) says which a run sees.\n\n\
         ## Environment variables\n\n| variable | constant | meaning |\n|---|---|---|\n",
    );
    let row = |out: &mut String, n: &bitexact::protocol::Name| {
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} |",
            n.value,
            n.constant,
            cell(n.doc)
        );
    };
    for n in NAMES.iter().filter(|n| n.value.starts_with("BITEXACT_")) {
        row(&mut out, n);
    }
    out.push_str(
        "\n## File names\n\nEvery file under `$BITEXACT_OUT` whose name starts with \
         `.bitexact-` is metadata and never compared.\n\n| name | constant | meaning |\n|---|---|---|\n",
    );
    for n in NAMES.iter().filter(|n| !n.value.starts_with("BITEXACT_")) {
        row(&mut out, n);
    }
    let levels: Vec<String> = TraceLevel::ALL.iter().map(|l| format!("`{l}`")).collect();
    let fields: Vec<String> = TRACE_RECORD_FIELDS
        .iter()
        .map(|f| format!("`{f}`"))
        .collect();
    let _ = write!(
        out,
        "\n## Op traces\n\n- Trace levels (`--trace`, `$BITEXACT_TRACE`): {}.\n- The fields of one \
         op-trace record, in order: {}.\n- Record format version (`\"v\"`): {TRACE_RECORD_VERSION}.\n",
        levels.join(", "),
        fields.join(", ")
    );
    out
}

// ---- freshness --------------------------------------------------------------------------

/// Every generated page: its path under the repository and its text.
fn pages() -> Vec<(&'static str, String)> {
    let (json, md) = schema_pages();
    vec![
        ("docs/reference/cli.md", cli_page()),
        ("docs/reference/json-report.md", md),
        ("docs/reference/report.schema.json", json),
        ("docs/reference/environment.md", environment_page()),
    ]
}

/// The pages whose committed text (`read`) differs from what the code makes.
fn stale(pages: &[(&'static str, String)], read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    pages
        .iter()
        .filter(|(path, text)| read(path).as_deref() != Some(text.as_str()))
        .map(|(path, _)| path.to_string())
        .collect()
}

#[test]
fn reference_pages_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = pages();
    if std::env::var_os("BITEXACT_WRITE_DOCS").is_some() && std::env::var_os("CI").is_none() {
        for (path, text) in &pages {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
    }
    let stale = stale(&pages, |p| std::fs::read_to_string(root.join(p)).ok());
    assert!(
        stale.is_empty(),
        "stale generated reference pages: {}; regenerate them with `{FIX}` and commit them",
        stale.join(", ")
    );
}

#[test]
fn a_stale_page_is_caught() {
    let pages = pages();
    let fresh = |p: &str| pages.iter().find(|(q, _)| *q == p).map(|(_, t)| t.clone());
    assert!(stale(&pages, fresh).is_empty());
    let env = "docs/reference/environment.md";
    let planted = |p: &str| {
        let t = fresh(p)?;
        Some(if p == env {
            t.replacen("BITEXACT_OUT", "BITEXACT_OUTPUT", 1)
        } else {
            t
        })
    };
    assert_eq!(stale(&pages, planted), [env]);
    assert_eq!(
        stale(&pages, |_| None).len(),
        pages.len(),
        "a missing page is stale"
    );
}

#[test]
fn pages_cover_every_command_verdict_and_name() {
    let cli = cli_page();
    for sub in bitexact::cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
    {
        assert!(
            cli.contains(&format!("`bitexact {}`", sub.get_name())),
            "{}",
            sub.get_name()
        );
    }
    assert!(!cli.contains("__child"), "hidden commands stay hidden");
    let (_, report) = schema_pages();
    for v in verdict_names() {
        let row = format!("`\"{v}\"`");
        assert!(report.contains(&row), "{v} in json-report.md");
    }
    let env = environment_page();
    for n in NAMES {
        assert!(env.contains(&format!("`{}`", n.value)), "{}", n.value);
    }
}

/// The verdict names, from the report schema (`Verdict`'s values).
fn verdict_names() -> Vec<String> {
    let (json, _) = schema_pages();
    let schema: Value = serde_json::from_str(&json).unwrap();
    let verdict = &schema["$defs"]["Verdict"];
    let values = verdict["oneOf"]
        .as_array()
        .or(verdict["enum"].as_array())
        .unwrap();
    values
        .iter()
        .filter_map(|v| v.get("const").or(Some(v)).and_then(Value::as_str))
        .map(String::from)
        .collect()
}

#[test]
fn every_verdict_has_a_row_in_the_readme_and_the_verdicts_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let names = verdict_names();
    assert!(names.len() >= 9, "{names:?}");
    for page in ["README.md", "docs/reference/verdicts.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        for v in &names {
            assert!(
                text.contains(&format!("| `{v}` |")),
                "{page} has no row for `{v}`"
            );
        }
    }
}
