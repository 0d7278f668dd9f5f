//! symbolize crate.
