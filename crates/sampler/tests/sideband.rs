//! The side-band ring wakes the reader at every record, not at a tick: the mappings of a
//! process's exec are read while it still runs, so that its binary can be opened through
//! /proc. (An exec writes its COMM record first, then the MMAP2 records of the binary and
//! the dynamic loader; the last of these is what must not wait.) With a byte watermark
//! (`SidebandWakeup::Bytes`) the same record waits for the tick instead.

use std::cell::Cell;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sampler::{
    decode, drain_until, RawRecord, Record, RecordSink, Sampler, SamplerConfig, SidebandWakeup,
    Target,
};

/// The tests of this file measure wake-ups: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct SeeExec {
    pid: u32,
    seen: Rc<Cell<Option<Instant>>>,
}

impl RecordSink for SeeExec {
    fn on_record(&mut self, raw: RawRecord<'_>) {
        if let Record::Mmap2(m) = decode(raw) {
            let interpreter = m.filename.windows(3).any(|w| w == b"ld-");
            if m.pid == self.pid && interpreter && self.seen.get().is_none() {
                self.seen.set(Some(Instant::now()));
            }
        }
    }
    fn on_round(&mut self, _: &Sampler) {}
}

/// When the dynamic loader's MMAP2 record of an exec was read.
struct Exec {
    /// When the child was released to exec.
    released: Instant,
    /// When the drain loop was stopped.
    stopped: Instant,
    /// When the record was read (`None`: never, not even by the final drain).
    read: Option<Instant>,
}

/// A child that execs `sleep` 300 ms into a drain loop with a one-hour tick, sampled with
/// `wakeup`; the loop stops once the record is read or `give_up` after the release.
fn exec_under(wakeup: SidebandWakeup, give_up: Duration) -> Exec {
    let mut child = Command::new("sh")
        .args(["-c", "read go; exec sleep 3"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // As `profctl record -- CMD` opens them: enabled by the exec.
    let mut config = SamplerConfig::new(Target::Process {
        pid,
        enable_on_exec: true,
    });
    config.frequency = 10;
    config.sideband_wakeup = wakeup;
    let mut sampler = match Sampler::open(&config) {
        Ok(s) => s,
        Err(err) => {
            let _ = child.kill();
            panic!("cannot open events on a child process: {err}");
        }
    };
    sampler.enable().unwrap();
    let seen = Rc::new(Cell::new(None));
    let mut sink = SeeExec {
        pid,
        seen: seen.clone(),
    };
    // Released 300 ms into the drain loop, well after its first (immediate) round.
    let mut stdin = child.stdin.take().unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let at = Instant::now();
        std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
        at
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let watch = seen.clone();
    let stopped = Rc::new(Cell::new(None));
    let stopped_at = stopped.clone();
    runtime.block_on(async {
        // The tick is an hour: only a wake-up by the side-band ring can deliver the record.
        let stop = async {
            let deadline = Instant::now() + Duration::from_millis(300) + give_up;
            while watch.get().is_none() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            stopped_at.set(Some(Instant::now()));
        };
        drain_until(&mut sampler, stop, Duration::from_secs(3600), &mut sink)
            .await
            .unwrap();
    });
    let released = release.join().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    Exec {
        released,
        stopped: stopped.get().unwrap(),
        read: seen.get(),
    }
}

#[test]
fn an_exec_is_read_long_before_the_tick() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let exec = exec_under(SidebandWakeup::EveryRecord, Duration::from_secs(10));
    let at = exec
        .read
        .expect("the dynamic loader's MMAP2 record was not read within 10 s");
    assert!(
        at - exec.released < Duration::from_secs(2),
        "the dynamic loader's MMAP2 record was read {:?} after the exec",
        at - exec.released
    );
}

#[test]
fn a_byte_watermark_leaves_the_exec_to_the_tick() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // A few hundred bytes of records, far below the watermark: no wake-up, and the tick is an
    // hour, so the record is read only by the final drain after the loop stops.
    let exec = exec_under(
        SidebandWakeup::Bytes(64 * 1024),
        Duration::from_millis(1500),
    );
    let at = exec
        .read
        .expect("the record was not even read by the final drain");
    assert!(
        at >= exec.stopped,
        "read {:?} after the exec, before the loop stopped: the watermark woke the reader",
        at - exec.released
    );
}
