//! `profctl status`: what profilerd says of itself, one `key: value` a line.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::daemon_client::{self, socket_path};
use crate::output::printable;

/// Run `profctl status` against the daemon at `socket` (or the default one).
pub fn run(socket: Option<&Path>) -> Result<ExitCode> {
    let socket = socket_path(socket);
    let answer = daemon_client::get(&socket, "/v1/status")?.ok()?;
    let value: serde_json::Value =
        serde_json::from_slice(&answer.body).context("reading profilerd's status")?;
    let Some(fields) = value.as_object() else {
        bail!("profilerd's status is not an object");
    };
    println!("profilerd at {}", printable(&socket.display().to_string()));
    for (key, value) in fields {
        let shown = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        println!("  {key}: {}", printable(&shown));
    }
    Ok(ExitCode::SUCCESS)
}
