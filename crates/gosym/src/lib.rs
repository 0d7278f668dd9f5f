//! Go's runtime function table (`.gopclntab`), read from a binary for profiling.
//!
//! Every Go binary carries the table its runtime uses for tracebacks and stack growth, even
//! when built with `-ldflags='-s -w'` (no `.symtab`, no DWARF): per function its name, and
//! per program counter the source file and line, the inlined calls, and the stack-pointer
//! delta (`pcsp`), which is how the Go runtime itself unwinds. [`GoTable`] reads the formats
//! of Go 1.16 and later, little-endian, in place from the file's bytes: found by section
//! name, or by its header when the section headers are gone; every read bounds-checked.
//!
//! Addresses are the file's own (as stated in the ELF file), not process addresses.

mod bytes;
mod error;
mod locate;
mod name;
mod table;

pub use error::GoSymError;
pub use locate::is_go_binary;
pub use name::print_name;
pub use table::{GoFrame, GoFunc, GoTable, Segment, Version, MAX_FUNCS};

#[cfg(test)]
mod tests;
