//! A child that sleeps for the drain-loop tests: its rings never wake the loop. Killed and
//! reaped when dropped.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A `sleep 30` child, killed and reaped on drop.
pub struct Sleeper(pub Child);

impl Sleeper {
    /// Start `sleep 30` and wait until it sleeps: while the dynamic loader still maps its
    /// libraries, the mappings' records could fill a ring and start a round of their own.
    pub fn start() -> Sleeper {
        let sleeper = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
        let wchan = format!("/proc/{}/wchan", sleeper.0.id());
        let start = Instant::now();
        while !std::fs::read_to_string(&wchan).is_ok_and(|w| w.contains("nanosleep")) {
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
