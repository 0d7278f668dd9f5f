//! Checks of values that are each valid but must go together (a slice shorter than the
//! retention, absolute paths, an address to listen on, …).

use std::time::Duration;

use super::{Config, ConfigError};

/// The longest `api.request_timeout`: a query never runs longer, so that files it selected
/// are still there when it reads them (roll-up members are deleted two minutes after their
/// roll-up replaced them).
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(100);

impl Config {
    /// Cross-field checks; `origin` names where the values came from.
    pub fn check(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let slice = self.sampling.slice.0;
        if slice < Duration::from_secs(1) || slice > Duration::from_secs(3600) {
            return Err(invalid(format!(
                "sampling.slice is {slice:?}: expected from 1s to 1h"
            )));
        }
        if self.storage.max_age.0 < slice {
            return Err(invalid(format!(
                "storage.max_age ({:?}) is shorter than sampling.slice ({slice:?}): expected at least one slice",
                self.storage.max_age.0
            )));
        }
        if self.api.max_range.0 < slice {
            return Err(invalid(format!(
                "api.max_range ({:?}) is shorter than sampling.slice ({slice:?})",
                self.api.max_range.0
            )));
        }
        if self.api.request_timeout.0 > MAX_REQUEST_TIMEOUT {
            return Err(invalid(format!(
                "api.request_timeout is {:?}: expected at most {MAX_REQUEST_TIMEOUT:?}",
                self.api.request_timeout.0
            )));
        }
        if let Some(listen) = &self.scrape.listen {
            let Ok(addr) = listen.parse::<std::net::SocketAddr>() else {
                return Err(invalid(format!(
                    "scrape.listen is {listen:?}: expected ADDR:PORT such as \"127.0.0.1:6060\" or \"[::1]:6060\""
                )));
            };
            if self.scrape.token_file.is_none() {
                if !self.scrape.allow_unauthenticated {
                    return Err(invalid(format!(
                        "scrape.listen is {listen:?} without scrape.token_file: set a token file, or (on loopback only) scrape.allow_unauthenticated = true, which lets every local user see every process"
                    )));
                }
                if !addr.ip().is_loopback() {
                    return Err(invalid(format!(
                        "scrape.allow_unauthenticated needs a loopback scrape.listen, not {listen:?}: set scrape.token_file"
                    )));
                }
            }
        }
        if let Some(path) = &self.scrape.token_file {
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "scrape.token_file is {}: expected an absolute path",
                    path.display()
                )));
            }
        }
        if self.budget.window.0 < slice {
            return Err(invalid(format!(
                "budget.window ({:?}) is shorter than sampling.slice ({slice:?}): each slice is named at once, so CPU use must be averaged over one slice at least",
                self.budget.window.0
            )));
        }
        for (key, path) in [
            ("storage.state_dir", &self.storage.state_dir),
            ("storage.cache_dir", &self.storage.cache_dir),
            ("api.socket", &self.api.socket),
        ] {
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "{key} is {}: expected an absolute path",
                    path.display()
                )));
            }
        }
        Ok(())
    }
}
