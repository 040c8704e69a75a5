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
}
