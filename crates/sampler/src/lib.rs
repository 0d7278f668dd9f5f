//! sampler crate.
