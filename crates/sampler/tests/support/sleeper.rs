//! A child that sleeps for the drain-loop tests: its rings never wake the loop. Killed and
//! reaped when dropped.

use std::process::{Child, Command};

/// A `sleep 30` child, killed and reaped on drop.
pub struct Sleeper(pub Child);

impl Sleeper {
    /// Start `sleep 30`.
    pub fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("30").spawn().unwrap())
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
