//! Quoting input in messages: a malformed file or value is quoted so the reader sees what was
//! wrong, but never more than [`MAX_QUOTE`] bytes of it (a 32 MiB header must not become a
//! 67 MB report).

/// The most bytes of a malformed input quoted in an error message.
pub const MAX_QUOTE: usize = 200;

/// `s` quoted for a message, cut to [`MAX_QUOTE`] bytes with `… (N bytes)` when longer.
pub fn excerpt(s: &str) -> String {
    match head(s) {
        None => format!("{s:?}"),
        Some(h) => format!("{h:?}… ({} bytes)", s.len()),
    }
}

/// `s` as it is (already quoted text, such as a value's canonical form), cut to
/// [`MAX_QUOTE`] bytes with `… (N bytes)` when longer.
pub fn cut(s: &str) -> String {
    match head(s) {
        None => s.to_string(),
        Some(h) => format!("{h}… ({} bytes)", s.len()),
    }
}

/// The longest path (or output name) shown whole in a message; a longer one keeps its start
/// and its end ([`path`]).
pub const MAX_PATH: usize = 240;

/// `s` shortened in the middle when longer than `max` bytes: its start and its end are kept,
/// with `…[N bytes]…` between them (`N` left out), so that whatever follows a long path in a
/// message (the cause of an error: `File name too long`) is never what is lost.
pub fn middle(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    // What stays besides the marker (at most 24 bytes), so the result is at most `max`.
    let keep = max.saturating_sub(24);
    let mut head = keep * 2 / 5;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - (keep - head);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}…[{} bytes]…{}", &s[..head], tail - head, &s[tail..]).into()
}

/// `p` for a message, shortened in the middle past [`MAX_PATH`] bytes (see [`middle`]).
pub fn path(p: &std::path::Path) -> String {
    let shown = p.display().to_string();
    middle(&shown, MAX_PATH).into_owned()
}

/// `args` as one shell command line that can be pasted back: a word with anything but
/// letters, digits and `-_./=:,+@%` in it is single-quoted (`'it'\''s'`), an empty one is `''`.
pub fn shell(args: &[String]) -> String {
    let word = |a: &String| {
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
        if !a.is_empty() && a.chars().all(plain) {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    args.iter().map(word).collect::<Vec<_>>().join(" ")
}

/// The first [`MAX_QUOTE`] bytes of `s` (on a character boundary) when it is longer.
fn head(s: &str) -> Option<&str> {
    if s.len() <= MAX_QUOTE {
        return None;
    }
    let mut n = MAX_QUOTE;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    Some(&s[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_cut() {
        assert_eq!(excerpt("ab"), "\"ab\"");
        let e = excerpt(&"é".repeat(1000));
        assert!(
            e.len() < MAX_QUOTE + 40 && e.ends_with("(2000 bytes)"),
            "{e}"
        );
        assert_eq!(cut("'ab'"), "'ab'");
        let c = cut(&"é".repeat(1000));
        assert!(c.starts_with('é') && c.ends_with("… (2000 bytes)") && c.len() < MAX_QUOTE + 20);
    }

    #[test]
    fn long_paths_keep_their_start_and_end() {
        let deep = format!("/tmp/run-0/{}leaf.bin", "dé/".repeat(1000));
        let shown = path(std::path::Path::new(&deep));
        assert!(shown.len() <= MAX_PATH + 4, "{shown}");
        assert!(shown.starts_with("/tmp/run-0/dé/"), "{shown}");
        assert!(shown.ends_with("dé/dé/leaf.bin"), "{shown}");
        let left_out = deep.len() - (shown.len() - "…[4020 bytes]…".len());
        assert!(shown.contains(&format!("…[{left_out} bytes]…")), "{shown}");
        assert_eq!(middle("short", 10), "short");
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        let args: Vec<String> = ["sh", "-c", "exec \"$0\" x.py", "it's", "", "a=b"]
            .map(String::from)
            .to_vec();
        assert_eq!(shell(&args), r#"sh -c 'exec "$0" x.py' 'it'\''s' '' a=b"#);
    }
}
