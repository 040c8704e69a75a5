//! The default case name of `bitexact run -- CMD ARGS…`: `run/<the script's file name>`.
//!
//! The script is the first argument that names an existing file with an extension and is not
//! an option (`python train.py config/x.py` → `run/train.py`: the script comes before the
//! files it reads). A shell wrapper (`sh -c 'exec "$0" train.py "$@"' python config/x.py`)
//! hides the script inside its command string, so the words of that string are looked at
//! first, then the arguments after it. Without any such file the program's own name is used
//! (`run/my-tool`).

use std::ffi::OsString;
use std::path::Path;

/// Shells whose `-c STRING` is searched for the script.
const SHELLS: [&str; 6] = ["sh", "bash", "dash", "zsh", "ksh", "ash"];

/// The default case name for a command: `run/<file name of the program or script>`.
pub fn default_name(command: &[OsString]) -> String {
    let script = candidates(command)
        .into_iter()
        .find(|a| {
            let p = Path::new(a);
            !a.to_string_lossy().starts_with('-') && p.extension().is_some() && p.exists()
        })
        .or_else(|| command.first().cloned());
    let file = script
        .map(|p| {
            Path::new(&p)
                .file_name()
                .unwrap_or(p.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    format!("run/{file}")
}

/// The arguments that may name the script, in the order they are tried: after the program,
/// with a shell's `-c` string replaced by its words.
fn candidates(command: &[OsString]) -> Vec<OsString> {
    let rest = command.get(1..).unwrap_or_default();
    let shell = command.first().is_some_and(|p| {
        let name = Path::new(p)
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        SHELLS.contains(&name.as_ref())
    });
    // `sh -c STRING`, `bash -ec STRING`, … (options before it are skipped).
    let flag = rest.iter().position(|a| {
        let a = a.to_string_lossy();
        a.starts_with('-') && !a.starts_with("--") && a.contains('c')
    });
    match (shell, flag) {
        (true, Some(i)) if i + 1 < rest.len() => {
            let mut out: Vec<OsString> = words(&rest[i + 1].to_string_lossy())
                .into_iter()
                .map(OsString::from)
                .collect();
            out.extend(rest[i + 2..].iter().cloned());
            out
        }
        _ => rest.to_vec(),
    }
}

/// The words of a shell command string: split at unquoted whitespace and `;&|()<>`, with
/// single quotes, double quotes and backslashes removed as the shell does (no expansion).
fn words(script: &str) -> Vec<String> {
    let (mut out, mut word, mut any) = (Vec::new(), String::new(), false);
    let mut chars = script.chars();
    let mut quote = None::<char>;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') | (None, '\\') => {
                word.extend(chars.next());
                any = true;
            }
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() || ";&|()<>".contains(c) => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_in(dir: &Path, args: &[&str]) -> String {
        let cmd: Vec<OsString> = args
            .iter()
            .map(|a| {
                let p = dir.join(a);
                if p.exists() {
                    p.into_os_string()
                } else {
                    a.replace("DIR", &dir.display().to_string()).into()
                }
            })
            .collect();
        default_name(&cmd)
    }

    #[test]
    fn the_script_is_named_not_the_files_it_reads() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("config")).unwrap();
        std::fs::write(d.path().join("train.py"), "").unwrap();
        std::fs::write(d.path().join("config/x.py"), "").unwrap();
        let p = d.path();
        assert_eq!(
            name_in(p, &["python", "train.py", "config/x.py"]),
            "run/train.py"
        );
        assert_eq!(
            name_in(
                p,
                &[
                    "sh",
                    "-c",
                    "exec \"$0\" DIR/train.py \"$@\"",
                    "python",
                    "config/x.py"
                ]
            ),
            "run/train.py"
        );
        assert_eq!(
            name_in(p, &["/bin/bash", "-ec", "cd DIR && python 'train.py'", "x"]),
            "run/bash",
            "a relative path in the string is not resolved against the directory it cds to"
        );
        assert_eq!(
            name_in(p, &["bash", "-ec", "python 'DIR/train.py'; echo done"]),
            "run/train.py"
        );
        assert_eq!(name_in(p, &["my-tool", "--flag"]), "run/my-tool");
    }

    #[test]
    fn shell_words_follow_quotes_and_escapes() {
        assert_eq!(
            words(r#"exec "$0" train.py "$@""#),
            ["exec", "$0", "train.py", "$@"]
        );
        assert_eq!(
            words(r#"a 'b c' d\ e "f\"g" ''"#),
            ["a", "b c", "d e", "f\"g", ""]
        );
        assert_eq!(words("a;b&&c|d"), ["a", "b", "c", "d"]);
        assert_eq!(words("  "), Vec::<String>::new());
    }

    proptest::proptest! {
        #[test]
        fn words_never_panic(s in "\\PC{0,80}") {
            let _ = words(&s);
            let cmd = vec![OsString::from("sh"), OsString::from("-c"), OsString::from(s)];
            let _ = default_name(&cmd);
        }

        #[test]
        fn quoted_commands_split_back(args in proptest::collection::vec("\\PC{0,12}", 1..5)) {
            proptest::prop_assert_eq!(words(&crate::quote::shell(&args)), args);
        }
    }
}
