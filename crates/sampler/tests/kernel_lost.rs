//! Issue 11, item 10: samples the kernel drops are counted even when no LOST record reports
//! them yet. A one-page ring that is never read overflows at once; LOST records are written
//! only once the reader frees space, so the drop is known only through `PERF_FORMAT_LOST`.

use std::process::{Child, Command};
use std::time::Duration;

use sampler::{Sampler, SamplerConfig, Target};

struct Spinner(Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_unread_full_ring_counts_its_losses() {
    let spinner = Spinner(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    let mut config = SamplerConfig::new(Target::Process {
        pid: spinner.0.id(),
        enable_on_exec: false,
    });
    config.frequency = 4000;
    config.ring_pages = 1;
    let sampler = Sampler::open(&config).expect("open events on a child");
    sampler.enable().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    sampler.disable();
    let lost = sampler.kernel_lost();
    eprintln!("kernel counted {lost} lost samples");
    assert!(lost > 0, "a never-read one-page ring lost nothing");
}
