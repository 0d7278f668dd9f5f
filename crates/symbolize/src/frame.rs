//! What every source of names (DWARF, symbol tables, the Go table) hands back for an
//! address: [`ResolvedFrame`], with names and paths cut to a bounded length.

/// Longest function name or source path a frame carries (longer ones are cut, ending in `…`).
pub const MAX_FRAME_NAME: usize = 4096;

/// One symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedFrame {
    /// The function name, demangled.
    pub function: String,
    /// The source file (as DWARF names it, usually absolute), when asked
    /// for and known.
    pub file: Option<String>,
    /// The source line, when asked for and known.
    pub line: Option<u32>,
    /// True for a call inlined into the frame before it.
    pub inlined: bool,
}

/// `s` cut to at most [`MAX_FRAME_NAME`] bytes (at a character boundary, ending in `…`).
pub(crate) fn cut_name(s: &mut String) {
    if s.len() > MAX_FRAME_NAME {
        let mut end = MAX_FRAME_NAME - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}
