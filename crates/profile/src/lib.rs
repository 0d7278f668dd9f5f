//! profile crate.
