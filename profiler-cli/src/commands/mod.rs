//! One module per subcommand: each takes its parsed arguments (`crate::cli`) and runs the
//! command with the modules beneath (time, daemon client, history, input, render, output).
//! A new subcommand is a new file here, its arguments in `cli.rs`, one arm in `main.rs`.

pub mod diff;
pub mod flamegraph;
pub mod record;
pub mod status;
pub mod symbolize;
pub mod timeline;
pub mod top;
pub mod ui;
