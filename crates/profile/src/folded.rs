//! The folded-stack text format: `frame;frame;frame count`, root first.

use std::borrow::Cow;

/// Make a frame name safe for the folded format: no `;` (the separator) and no line breaks.
pub fn sanitize_frame(name: &str) -> Cow<'_, str> {
    if name.contains([';', '\n', '\r']) {
        Cow::Owned(name.replace(';', ":").replace(['\n', '\r'], " "))
    } else {
        Cow::Borrowed(name)
    }
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
        let (frames, n) = parse_folded_line("a b;operator() (int, int) 42").unwrap();
        assert_eq!(frames, vec!["a b", "operator() (int, int)"]);
        assert_eq!(n, 42);
        assert!(parse_folded_line("nocount").is_none());
    }
}
