//! A sampled stack as a type: its kernel part, its user part, and how the user part ended.
//!
//! Every address in a [`Stack`] is a *code address*: where the frame was executing. For the
//! innermost frame of the whole stack that is the sampled instruction; for every other frame it
//! is the call instruction, stored as return address − 1 (which lies inside the call). The
//! stage that builds a stack applies this rule once; everything after it (normalizing,
//! symbolizing) looks addresses up as they are.

/// How the user part of a stack ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackEnd {
    /// Unwound to the thread's first frame (`_start`, `clone`): the stack is whole.
    Complete,
    /// The copied stack ran out before the outermost frame; continued from the kernel's
    /// frame-pointer chain.
    Spliced,
    /// The copied stack ran out and nothing could continue it: frames beyond are unknown
    /// (shown as a `[truncated]` frame).
    Truncated,
    /// Unwinding hit an address it could not unwind (no unwind info, garbage, a bad rule).
    Unknown,
    /// Walked by the kernel's frame-pointer chain: whether it is whole is not known.
    FramePointer,
    /// No user part: a kernel thread, or no user registers or stack came with the sample.
    NoUserStack,
}

impl StackEnd {
    /// Every variant, in the order of their codes.
    const ALL: [StackEnd; 6] = [
        StackEnd::Complete,
        StackEnd::Spliced,
        StackEnd::Truncated,
        StackEnd::Unknown,
        StackEnd::FramePointer,
        StackEnd::NoUserStack,
    ];

    /// A small number for compact storage (see [`StackEnd::from_code`]).
    pub fn code(self) -> u8 {
        StackEnd::ALL
            .iter()
            .position(|&e| e == self)
            .expect("every variant is listed") as u8
    }

    /// The end stored as `code`; unknown codes read as [`StackEnd::Unknown`].
    pub fn from_code(code: u8) -> StackEnd {
        StackEnd::ALL
            .get(usize::from(code))
            .copied()
            .unwrap_or(StackEnd::Unknown)
    }

    /// Whether this end counts in the stack-quality figures (the user part was unwound).
    pub fn is_unwound(self) -> bool {
        !matches!(self, StackEnd::FramePointer | StackEnd::NoUserStack)
    }
}

/// One sampled stack, innermost frame first in each part. Addresses are code addresses (see
/// the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stack<'a> {
    /// Kernel frames, innermost first (empty for a sample taken in user mode).
    pub kernel: &'a [u64],
    /// User frames, innermost first.
    pub user: &'a [u64],
    /// How the user part ended.
    pub user_end: StackEnd,
}

impl Stack<'_> {
    /// Frames in both parts.
    pub fn len(&self) -> usize {
        self.kernel.len() + self.user.len()
    }

    /// Whether the stack has no frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The code address of a caller whose return address is `return_address`.
pub fn call_site(return_address: u64) -> u64 {
    return_address.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_codes_round_trip() {
        for end in StackEnd::ALL {
            assert_eq!(StackEnd::from_code(end.code()), end);
        }
        assert_eq!(StackEnd::from_code(200), StackEnd::Unknown);
        assert!(StackEnd::Truncated.is_unwound());
        assert!(!StackEnd::FramePointer.is_unwound());
    }
}
