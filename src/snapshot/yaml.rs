//! The YAML subset of insta's snapshot header: one-line scalars, written exactly as insta's
//! emitter writes them (plain when safe, else double-quoted) and read back (plain, double- or
//! single-quoted). Nothing else of YAML is needed: the header is a flat map plus the `info`
//! map of scalars.

use std::fmt::Write as _;

/// A YAML scalar exactly as insta's emitter writes it: plain when safe, else double-quoted.
pub fn emit(s: &str) -> String {
    let needs_quotes = s.is_empty()
        || s.starts_with(' ')
        || s.ends_with(' ')
        || s.starts_with(['&', '*', '?', '|', '-', '<', '>', '=', '!', '%', '@', '.'])
        || s.contains(|c: char| {
            matches!(c, ':' | '{' | '}' | '[' | ']' | ',' | '#' | '`' | '"' | '\'' | '\\'
                | '\0'..='\x06' | '\t' | '\n' | '\r' | '\x0e'..='\x1a' | '\x1c'..='\x1f')
        })
        || [
            "yes", "Yes", "YES", "no", "No", "NO", "True", "TRUE", "true", "False", "FALSE",
            "false", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL", "~",
        ]
        .contains(&s)
        || s.starts_with("0x")
        || s.parse::<i64>().is_ok()
        || s.parse::<f64>().is_ok();
    if !needs_quotes {
        return s.to_string();
    }
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\x08' => o.push_str("\\b"),
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            '\x0c' => o.push_str("\\f"),
            '\r' => o.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Splits a header line `key: value` (or `key:` with an empty value) into its decoded key
/// and value.
pub fn key_value(line: &str) -> Result<(String, String), String> {
    let (key, rest) = if line.starts_with(['"', '\'']) {
        quoted(line)?
    } else {
        let end = line
            .char_indices()
            .find(|&(i, c)| c == ':' && matches!(line[i + 1..].chars().next(), None | Some(' ')))
            .map(|(i, _)| i)
            .ok_or_else(|| "expected `key: value`".to_string())?;
        (line[..end].trim_end().to_string(), &line[end..])
    };
    let rest = rest
        .strip_prefix(':')
        .ok_or_else(|| "expected `:` after the key".to_string())?;
    if rest.trim().is_empty() {
        return Ok((key, String::new()));
    }
    let rest = rest
        .strip_prefix(' ')
        .ok_or_else(|| "expected a space after `:`".to_string())?
        .trim_start();
    Ok((key, scalar(rest)?))
}

/// Decodes one scalar value: plain (trailing spaces dropped) or quoted.
pub fn scalar(s: &str) -> Result<String, String> {
    if !s.starts_with(['"', '\'']) {
        return Ok(s.trim_end().to_string());
    }
    let (v, rest) = quoted(s)?;
    if !rest.trim().is_empty() {
        return Err("unexpected text after a quoted value".into());
    }
    Ok(v)
}

/// Decodes a quoted scalar at the start of `s`; returns it and the text after the quotes.
fn quoted(s: &str) -> Result<(String, &str), String> {
    let mut chars = s.char_indices();
    let quote = match chars.next() {
        Some((_, q @ ('"' | '\''))) => q,
        _ => return Err("expected a quoted value".into()),
    };
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if quote == '\'' => {
                if s[i + 1..].starts_with('\'') {
                    chars.next();
                    out.push('\'');
                } else {
                    return Ok((out, &s[i + 1..]));
                }
            }
            '"' if quote == '"' => return Ok((out, &s[i + 1..])),
            '\\' if quote == '"' => {
                let (_, e) = chars.next().ok_or("unterminated escape")?;
                let hex = |n: usize, chars: &mut std::str::CharIndices| -> Result<char, String> {
                    let digits: String = chars.by_ref().take(n).map(|(_, c)| c).collect();
                    u32::from_str_radix(&digits, 16)
                        .ok()
                        .filter(|_| digits.len() == n)
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("bad escape \\{e}{digits}"))
                };
                out.push(match e {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    ' ' => ' ',
                    '0' => '\0',
                    'a' => '\x07',
                    'b' => '\x08',
                    't' => '\t',
                    'n' => '\n',
                    'v' => '\x0b',
                    'f' => '\x0c',
                    'r' => '\r',
                    'e' => '\x1b',
                    'N' => '\u{85}',
                    '_' => '\u{a0}',
                    'L' => '\u{2028}',
                    'P' => '\u{2029}',
                    'x' => hex(2, &mut chars)?,
                    'u' => hex(4, &mut chars)?,
                    'U' => hex(8, &mut chars)?,
                    other => return Err(format!("unknown escape \\{other}")),
                });
            }
            c => out.push(c),
        }
    }
    Err("unterminated quoted value".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emits_like_insta_and_reads_back() {
        assert_eq!(emit("plain text (1)"), "plain text (1)");
        assert_eq!(emit("a: b"), "\"a: b\"");
        assert_eq!(emit("2"), "\"2\"");
        assert_eq!(emit("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
        for s in [
            "",
            "a: b",
            "2",
            "say \"hi\"\n",
            "x\u{1}y",
            "é ü",
            " lead",
            "~",
            "-x",
        ] {
            assert_eq!(scalar(&emit(s)).unwrap(), s, "{s:?}");
        }
        assert_eq!(scalar("'it''s'").unwrap(), "it's");
    }

    #[test]
    fn key_values() {
        let kv = |l: &str| key_value(l).unwrap();
        assert_eq!(kv("info:"), ("info".into(), String::new()));
        assert_eq!(kv("cores: 2"), ("cores".into(), "2".into()));
        assert_eq!(kv("\"a: b\": \"c\""), ("a: b".into(), "c".into()));
        assert_eq!(
            kv("cpu: Intel(R) Xeon(R)"),
            ("cpu".into(), "Intel(R) Xeon(R)".into())
        );
        assert!(key_value("no colon").is_err());
        assert!(key_value("k: \"open").is_err());
        assert!(key_value("k: \"x\" tail").is_err());
        assert!(key_value("k: \"\\q\"").is_err());
    }
}
