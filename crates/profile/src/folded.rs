//! The folded-stack text format: `frame;frame;frame count`, root first.

use std::borrow::Cow;

/// Longest frame name kept, in bytes; a longer one is cut (at a character boundary) and ends
/// in `…` (names come from files other users control: one huge name must not cost memory in
/// every profile and cache).
pub const MAX_FRAME_NAME: usize = 4096;

/// Make a frame name safe for the folded format and for a terminal: no `;` (the separator),
/// no line breaks, other control characters (terminal escapes) shown as `\u{..}`, and at most
/// [`MAX_FRAME_NAME`] bytes.
pub fn sanitize_frame(name: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c == ';' || c.is_control();
    if !name.contains(unsafe_char) && name.len() <= MAX_FRAME_NAME {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len().min(MAX_FRAME_NAME + 8));
    for c in name.chars() {
        match c {
            ';' => out.push(':'),
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
        if out.len() > MAX_FRAME_NAME {
            let mut cut = MAX_FRAME_NAME - '…'.len_utf8();
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push('…');
            break;
        }
    }
    Cow::Owned(out)
}

/// Split a folded line into its frames (root first) and count.
pub fn parse_folded_line(line: &str) -> Option<(Vec<&str>, u64)> {
    let (stack, count) = line.trim_end().rsplit_once(' ')?;
    Some((stack.split(';').collect(), count.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes_and_parses() {
        assert_eq!(
            sanitize_frame("<[u8; 4] as Foo>::bar"),
            "<[u8: 4] as Foo>::bar"
        );
        assert!(matches!(sanitize_frame("main"), Cow::Borrowed(_)));
        assert_eq!(sanitize_frame("a\x1b]0;x\x07b\nc"), "a\\u{1b}]0:x\\u{7}b c");
        let long = "é".repeat(10_000);
        let cut = sanitize_frame(&long);
        assert!(
            cut.len() <= MAX_FRAME_NAME && cut.ends_with('…'),
            "{}",
            cut.len()
        );
        let (frames, n) = parse_folded_line("a b;operator() (int, int) 42").unwrap();
        assert_eq!(frames, vec!["a b", "operator() (int, int)"]);
        assert_eq!(n, 42);
        assert!(parse_folded_line("nocount").is_none());
    }
}
