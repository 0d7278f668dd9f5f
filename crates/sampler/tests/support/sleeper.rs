//! A child that sleeps for the drain-loop tests: its rings never wake the loop. Killed and
//! reaped when dropped.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A `sleep 30` child, killed and reaped on drop.
pub struct Sleeper(pub Child);

impl Sleeper {
    /// Start `sleep 30` and wait until it sleeps (its state `S`, which `sleep` reaches only in
    /// its sleep): while the dynamic loader still maps its libraries, the mappings' records
    /// could fill a ring and start a round of their own.
    pub fn start() -> Sleeper {
        let sleeper = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
        let stat = format!("/proc/{}/stat", sleeper.0.id());
        let sleeping = || {
            std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with('S')))
                .unwrap_or(false)
        };
        let start = Instant::now();
        while !sleeping() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "`sleep 30` did not reach its sleep in 10 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        sleeper
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
