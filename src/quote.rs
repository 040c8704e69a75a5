//! Quoting input in messages: a malformed file or value is quoted so the reader sees what was
//! wrong, but never more than [`MAX_QUOTE`] bytes of it (a 32 MiB header must not become a
//! 67 MB report).

/// The most bytes of a malformed input quoted in an error message.
pub const MAX_QUOTE: usize = 200;

/// `s` quoted for a message, cut to [`MAX_QUOTE`] bytes with `… (N bytes)` when longer.
pub fn excerpt(s: &str) -> String {
    if s.len() <= MAX_QUOTE {
        return format!("{s:?}");
    }
    let mut cut = MAX_QUOTE;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{:?}… ({} bytes)", &s[..cut], s.len())
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
    }
}
