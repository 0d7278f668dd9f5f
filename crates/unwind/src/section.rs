//! A section's bytes, shared zero-copy through one mapping of its file.

use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::Mmap;

/// A byte range of a mapped file: the data type handed to framehop.
#[derive(Clone)]
pub struct SectionData {
    pub(crate) map: Arc<Mmap>,
    pub(crate) range: Range<usize>,
}

impl SectionData {
    /// The mapping the bytes are in: its address (identity) and length.
    pub(crate) fn mapping(&self) -> (usize, usize) {
        (self.map.as_ptr() as usize, self.map.len())
    }
}

impl AsRef<[u8]> for SectionData {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// One section: where the file says it is loaded (SVMA range), and its bytes.
#[derive(Clone)]
pub struct Section {
    /// Address range as stated in the file.
    pub svma: Range<u64>,
    /// The bytes.
    pub data: SectionData,
}
