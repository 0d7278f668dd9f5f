//! procmap crate.
