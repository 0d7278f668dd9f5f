//! An open sampling session: its events and ring buffers (one per CPU, or per thread and
//! CPU), draining them, and changing them while they run (frequency, switch period, CPUs that
//! come and go). Opening one is in `session/open.rs`, what it asks the kernel for in
//! `session/spec.rs`.

use std::cell::Cell;
use std::io;
use std::os::fd::OwnedFd;

use perf_event_open_sys::bindings::perf_event_attr;

use tracing::{debug, info, warn};

use crate::config::{SessionInfo, Target};
use crate::error::SamplerError;
use crate::event::EventKind;
use crate::ring::{RawRecord, RingBuffer, RingStats};
use crate::system::{max_sample_rate, online_cpus, paranoid_level, OnlineCpus};

use crate::sys;

mod open;
mod spec;

/// An open sampling session: events plus one ring buffer per CPU.
pub struct Sampler {
    /// The rings, each with the event that owns its mapping.
    rings: Vec<Ring>,
    /// Events whose records go to a ring above (SET_OUTPUT); kept open until drop.
    redirected: Vec<Event>,
    info: SessionInfo,
    /// What the events were opened with, to open more of them for CPUs that come online.
    setup: Setup,
    /// CPUs that have events, ascending.
    cpus: Vec<u32>,
    /// Whether the events were enabled (and not disabled since).
    enabled: Cell<bool>,
    /// The online CPUs' list, opened at the first check (None until then, or when it
    /// cannot be opened: each check then opens it by path).
    online: std::cell::OnceCell<Option<OnlineCpus>>,
}

/// The attrs and ring sizes a session was opened with.
struct Setup {
    target: Target,
    /// The sampling attr, but for its frequency: `frequency` below.
    sample_attr: perf_event_attr,
    /// The frequency in effect (changed by [`Sampler::set_frequency`]).
    frequency: u64,
    sideband_attr: perf_event_attr,
    /// The context-switch attr, when switches are sampled.
    switch_attr: Option<perf_event_attr>,
    ring_pages: usize,
    sideband_pages: usize,
}

/// CPUs whose events [`Sampler::reopen_missing_cpus`] opened or closed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuChange {
    /// CPUs that came online: their events were opened (and enabled if the sampler is).
    pub opened: Vec<u32>,
    /// CPUs that went offline: their rings were drained and their events closed.
    pub closed: Vec<u32>,
}

/// Which of the two events of a CPU an event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    /// The sampling event (cycles or cpu-clock).
    Samples,
    /// The side-band dummy event (mmap, comm, task records).
    Sideband,
    /// The context-switch event (switch-out samples and switch records).
    Switches,
}

/// One open event.
struct Event {
    fd: OwnedFd,
    stream: Stream,
    cpu: u32,
}

/// A ring buffer and the event whose descriptor was mapped for it.
struct Ring {
    event: Event,
    buffer: RingBuffer,
}

/// CPUs in `online` without events, and CPUs with events no longer `online` (both sorted).
fn cpu_difference(opened: &[u32], online: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let missing = online
        .iter()
        .filter(|c| opened.binary_search(c).is_err())
        .copied()
        .collect();
    let gone = opened
        .iter()
        .filter(|c| online.binary_search(c).is_err())
        .copied()
        .collect();
    (missing, gone)
}

fn is_permission(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

fn permission_error(target: &Target) -> SamplerError {
    let paranoid = paranoid_level().map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let (scope, hint) = match target {
        Target::System => (
            "the whole system".to_string(),
            "Profiling every process needs root, CAP_PERFMON (Linux 5.8+) or CAP_SYS_ADMIN, or \
             kernel.perf_event_paranoid <= 0 (sysctl kernel.perf_event_paranoid=0).\n\
             Without privileges, profile your own processes: `profctl record -- COMMAND` or \
             `profctl record --pid PID` for a process you own.",
        ),
        Target::Process { pid, .. } => (
            format!("process {pid}"),
            "An unprivileged user can profile only their own processes, and only user space when \
             kernel.perf_event_paranoid >= 2; other users' processes need root or CAP_PERFMON \
             (and ptrace access: CAP_SYS_PTRACE or kernel.yama.ptrace_scope).",
        ),
    };
    SamplerError::PermissionDenied {
        scope,
        paranoid,
        hint,
    }
}

impl Sampler {
    /// What was opened.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// Change the sampling frequency of every sampling event, without reopening them (no
    /// gap in the samples): `hz` lowered to `kernel.perf_event_max_sample_rate` as in
    /// [`Sampler::open`]. Returns the frequency now in effect, which [`SessionInfo::frequency`]
    /// reports from then on.
    ///
    /// Exact for [`Target::System`]. With [`Target::Process`], the kernel changes only the
    /// events this sampler opened, not its inherited copies in threads and children created
    /// since: which of those run at which rate is up to the kernel (measured on 6.18 with
    /// cpu-clock: a child forked before the change ran at the new rate, one forked after it at
    /// the old). Reopen for an exact change there. On error, some events may already run at
    /// the new frequency; `info().frequency` still names the old one.
    pub fn set_frequency(&mut self, hz: u64) -> Result<u64, SamplerError> {
        if hz == 0 {
            return Err(SamplerError::Frequency {
                requested: 0,
                why: "must be at least 1".into(),
            });
        }
        let frequency = clamp_frequency(hz, max_sample_rate());
        if frequency != hz {
            info!(
                requested = hz,
                frequency, "frequency lowered to kernel.perf_event_max_sample_rate"
            );
        }
        let value = period_argument(self.info.event, frequency);
        let mut failure = None;
        for event in self.all_events().filter(|e| e.stream == Stream::Samples) {
            if let Err(source) = sys::set_period(&event.fd, value) {
                failure.get_or_insert(source);
            }
        }
        if let Some(source) = failure {
            return Err(SamplerError::Io {
                what: "PERF_EVENT_IOC_PERIOD",
                source,
            });
        }
        debug!(
            from = self.info.frequency,
            to = frequency,
            "sampling frequency changed"
        );
        self.info.frequency = frequency;
        self.setup.frequency = frequency;
        Ok(frequency)
    }

    /// Sample one context switch in `period` from now on (see [`SwitchSampling`](crate::SwitchSampling)): the
    /// events this sampler opened change at once; threads created later inherit the new
    /// period, those created earlier keep theirs (the kernel's PERF_EVENT_IOC_PERIOD changes
    /// one event, not its inherited copies). Switch samples carry no period: what one stood
    /// for is counted from the switch records.
    pub fn set_switch_period(&mut self, period: u64) -> Result<(), SamplerError> {
        let period = period.max(1);
        for event in self.all_events().filter(|e| e.stream == Stream::Switches) {
            sys::set_period(&event.fd, period).map_err(|source| SamplerError::Io {
                what: "PERF_EVENT_IOC_PERIOD",
                source,
            })?;
        }
        Ok(())
    }

    /// Whether the CPUs online now (`/sys/devices/system/cpu/online`) differ from those the
    /// events are open on: a CPU came online (it is not sampled until
    /// [`Sampler::reopen_missing_cpus`]) or went offline. One small sysfs read, for a slow
    /// tick (every few seconds); false when the file cannot be read.
    ///
    /// A CPU that goes offline and comes back between two calls is not seen; whether its
    /// events survive that is up to the kernel.
    pub fn online_cpus_changed(&self) -> bool {
        let held = self.online.get_or_init(|| OnlineCpus::open().ok());
        let online = match held {
            Some(list) => list.read(),
            None => online_cpus(),
        };
        match online {
            Ok(online) => online != self.cpus,
            Err(err) => {
                debug!(%err, "cannot read the online CPUs");
                false
            }
        }
    }

    /// Bring the events in line with the CPUs online now, for [`Target::System`]: open the
    /// events and rings of CPUs that came online (enabled if the sampler is), and close those
    /// of CPUs that went offline after handing what their rings still hold to `on_record`.
    ///
    /// [`crate::drain_until`] registers the rings once: leave it first (see
    /// [`crate::RecordSink::pause_draining`]), call this, then call it again. A process
    /// session (short, and following threads whose events cannot be reopened without
    /// gaps) is refused with [`SamplerError::SystemOnly`]: reopen the whole sampler instead.
    /// On error, the CPUs done so far stay done and a later call retries the rest.
    pub fn reopen_missing_cpus(
        &mut self,
        on_record: &mut dyn FnMut(RawRecord<'_>),
    ) -> Result<CpuChange, SamplerError> {
        if self.setup.target != Target::System {
            return Err(SamplerError::SystemOnly {
                what: "reopening events for CPUs that came online",
            });
        }
        let online = online_cpus().map_err(|source| SamplerError::Io {
            what: "reading the online CPUs",
            source,
        })?;
        let (missing, gone) = cpu_difference(&self.cpus, &online);
        let mut change = CpuChange::default();
        for cpu in gone {
            for ring in self.rings.iter_mut().filter(|r| r.event.cpu == cpu) {
                ring.buffer.drain(on_record);
            }
            self.rings.retain(|r| r.event.cpu != cpu);
            self.redirected.retain(|e| e.cpu != cpu);
            self.cpus.retain(|&c| c != cpu);
            change.closed.push(cpu);
        }
        let result = missing.iter().try_for_each(|&cpu| {
            let rings: Vec<Ring> = self.setup.open_cpu(cpu)?.into_iter().flatten().collect();
            if self.enabled.get() {
                for ring in &rings {
                    sys::enable(&ring.event.fd).map_err(|source| SamplerError::Io {
                        what: "PERF_EVENT_IOC_ENABLE",
                        source,
                    })?;
                }
            }
            self.rings.extend(rings);
            if let Err(at) = self.cpus.binary_search(&cpu) {
                self.cpus.insert(at, cpu);
            }
            change.opened.push(cpu);
            Ok(())
        });
        self.info.rings = self.rings.len();
        self.info.events = self.rings.len() + self.redirected.len();
        if !change.opened.is_empty() || !change.closed.is_empty() {
            info!(opened = ?change.opened, closed = ?change.closed, "events follow the online CPUs");
        }
        result.map(|()| change)
    }

    /// Start sampling on every event.
    pub fn enable(&self) -> Result<(), SamplerError> {
        self.enabled.set(true);
        for fd in self.all_fds() {
            sys::enable(fd).map_err(|source| SamplerError::Io {
                what: "PERF_EVENT_IOC_ENABLE",
                source,
            })?;
        }
        Ok(())
    }

    /// Stop sampling on every event (records already written stay in the buffers).
    pub fn disable(&self) {
        self.enabled.set(false);
        for fd in self.all_fds() {
            if let Err(err) = sys::disable(fd) {
                warn!(%err, "PERF_EVENT_IOC_DISABLE failed");
            }
        }
    }

    fn all_events(&self) -> impl Iterator<Item = &Event> {
        self.rings
            .iter()
            .map(|ring| &ring.event)
            .chain(self.redirected.iter())
    }

    fn all_fds(&self) -> impl Iterator<Item = &OwnedFd> {
        self.all_events().map(|event| &event.fd)
    }

    pub(crate) fn ring_owned_fds(&self) -> impl Iterator<Item = &OwnedFd> {
        self.rings.iter().map(|ring| &ring.event.fd)
    }

    /// Read every ring buffer once, side-band rings first; returns the number of records
    /// handed to `on_record`.
    ///
    /// Side-band records (mmap, comm, fork, exit) that were written before a round's samples
    /// are thus handed on before them: a sample of a new process, or of a process on a reused
    /// pid, finds its FORK and mappings already known, whichever CPU they came from.
    pub fn drain(&mut self, on_record: &mut dyn FnMut(RawRecord<'_>)) -> u64 {
        self.drain_guided(&mut |record| {
            on_record(record);
            0
        })
    }

    /// [`Sampler::drain`], with `on_record` answering how many bytes of each record, from its
    /// start, it read (0: not known), so that the rings load about that much of the next
    /// record ahead of time (see [`crate::read_records_guided`]).
    pub fn drain_guided(&mut self, on_record: &mut dyn FnMut(RawRecord<'_>) -> usize) -> u64 {
        let mut read = 0;
        for stream in [Stream::Sideband, Stream::Samples] {
            read += self
                .rings
                .iter_mut()
                .filter(|ring| ring.event.stream == stream)
                .map(|ring| ring.buffer.drain_guided(on_record))
                .sum::<u64>();
        }
        // Switch samples are told from CPU samples by the kind they are handed on with.
        let mut tagged = |r: RawRecord<'_>| {
            on_record(RawRecord {
                kind: crate::record::switch_kind(r.kind),
                ..r
            })
        };
        for ring in self
            .rings
            .iter_mut()
            .filter(|ring| ring.event.stream == Stream::Switches)
        {
            read += ring.buffer.drain_guided(&mut tagged);
        }
        read
    }

    /// Samples the kernel counted as lost on the sampling events (`PERF_FORMAT_LOST`, read
    /// from each event; kernels before 6.0 do not count them, and give 0). Unlike LOST records,
    /// this includes losses no record reports yet, such as a ring that filled at the very end.
    pub fn kernel_lost(&self) -> u64 {
        self.rings
            .iter()
            .map(|ring| &ring.event)
            .chain(&self.redirected)
            .filter(|event| event.stream == Stream::Samples)
            .filter_map(|event| sys::read_lost(&event.fd).ok())
            .sum()
    }

    /// Switch samples and records the kernel counted as lost on the context-switch events
    /// (as [`Sampler::kernel_lost`]; 0 when switches are not sampled).
    pub fn switches_lost(&self) -> u64 {
        self.all_events()
            .filter(|event| event.stream == Stream::Switches)
            .filter_map(|event| sys::read_lost(&event.fd).ok())
            .sum()
    }

    /// Ring counters summed over every buffer.
    pub fn ring_stats(&self) -> RingStats {
        self.rings
            .iter()
            .fold(RingStats::default(), |mut acc, ring| {
                let s = ring.buffer.stats();
                acc.records += s.records;
                acc.wrapped += s.wrapped;
                acc.malformed += s.malformed;
                acc.skipped_bytes += s.skipped_bytes;
                acc
            })
    }
}

impl Setup {
    /// Open a CPU's sampling and side-band events for the whole system, disabled, each with
    /// its ring.
    /// The sample, side-band and (when switches are sampled) context-switch rings of `cpu`,
    /// for the whole system.
    fn open_cpu(&self, cpu: u32) -> Result<[Option<Ring>; 3], SamplerError> {
        let open = |attr, stream, pages| {
            let fd = sys::perf_event_open(attr, -1, cpu as i32).map_err(|source| {
                if is_permission(&source) {
                    permission_error(&self.target)
                } else {
                    SamplerError::Open {
                        what: format!("pid -1, cpu {cpu}"),
                        source,
                    }
                }
            })?;
            let map = sys::RingMap::new(&fd, pages)
                .map_err(|source| SamplerError::RingMap { pages, source })?;
            Ok(Ring {
                event: Event { fd, stream, cpu },
                buffer: RingBuffer::new(map),
            })
        };
        let mut sample_attr = self.sample_attr;
        sample_attr.__bindgen_anon_1.sample_freq = self.frequency;
        let switches = match &self.switch_attr {
            Some(attr) => Some(open(attr, Stream::Switches, self.ring_pages)?),
            None => None,
        };
        Ok([
            Some(open(&sample_attr, Stream::Samples, self.ring_pages)?),
            Some(open(
                &self.sideband_attr,
                Stream::Sideband,
                self.sideband_pages,
            )?),
            switches,
        ])
    }
}

/// `requested` Hz, lowered to the kernel's maximum `max` when there is one.
fn clamp_frequency(requested: u64, max: Option<u64>) -> u64 {
    match max {
        Some(max) if max > 0 => requested.min(max),
        _ => requested,
    }
}

/// The PERF_EVENT_IOC_PERIOD argument that makes an event of `kind` sample at `hz`.
fn period_argument(kind: EventKind, hz: u64) -> u64 {
    match kind {
        // Frequency mode: the kernel takes the value as the new `sample_freq`.
        EventKind::Cycles => hz,
        // cpu-clock runs on an hrtimer, so the kernel turns the frequency into a fixed period
        // (NSEC_PER_SEC / freq ns) when the event is created and clears `attr.freq`
        // (`perf_swevent_init_hrtimer`): the ioctl then takes a period in nanoseconds. The
        // frequency itself would be read as a period of a few hundred ns, which the kernel
        // raises to 10 µs: 100 kHz.
        EventKind::CpuClock => (1_000_000_000 / hz).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EventChoice, SamplerConfig};
    use crate::system::is_privileged;

    #[test]
    fn frequency_is_clamped_to_the_kernel_maximum() {
        assert_eq!(clamp_frequency(999, Some(500)), 500);
        assert_eq!(clamp_frequency(99, Some(500)), 99);
        assert_eq!(clamp_frequency(99, None), 99);
        assert_eq!(clamp_frequency(99, Some(0)), 99, "0 is no maximum");
    }

    #[test]
    fn cpu_clock_takes_a_period_cycles_a_frequency() {
        assert_eq!(period_argument(EventKind::CpuClock, 1000), 1_000_000);
        assert_eq!(period_argument(EventKind::CpuClock, 99), 10_101_010);
        assert_eq!(period_argument(EventKind::CpuClock, u64::MAX), 1);
        assert_eq!(period_argument(EventKind::Cycles, 99), 99);
    }

    /// A child spinning on one CPU, killed on drop.
    struct Spinner(std::process::Child);

    impl Spinner {
        fn on(cpu: u32) -> Spinner {
            Spinner(
                std::process::Command::new("taskset")
                    .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
                    .spawn()
                    .expect("taskset"),
            )
        }

        /// Its CPU time, in seconds (utime + stime in USER_HZ, 100 here).
        fn cpu_seconds(&self) -> f64 {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap();
            let rest = stat.rsplit_once(") ").unwrap().1;
            let f: Vec<u64> = rest
                .split_whitespace()
                .skip(11)
                .take(2)
                .map(|v| v.parse().unwrap())
                .collect();
            (f[0] + f[1]) as f64 / 100.0
        }

        /// Wait until it ran `seconds` more (at most 20 s).
        fn run_for(&self, seconds: f64) {
            let start = self.cpu_seconds();
            for _ in 0..200 {
                std::thread::sleep(std::time::Duration::from_millis(100));
                if self.cpu_seconds() - start >= seconds {
                    break;
                }
            }
        }
    }

    impl Drop for Spinner {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Counts the samples of `pid` on `cpu` among the records handed to it.
    fn samples_of(pid: u32, cpu: u32, count: &mut u64) -> impl FnMut(RawRecord<'_>) + '_ {
        move |raw| {
            if let crate::Record::Sample(s) = crate::decode(raw) {
                *count += u64::from(s.pid == pid && s.cpu == cpu);
            }
        }
    }

    /// Without offlining CPUs: the events of one CPU are relabelled as those of a CPU that is
    /// not online, as if it had been replaced. `reopen_missing_cpus` must hand over what the
    /// relabelled rings hold, close them, and open the real CPU's events anew.
    #[test]
    fn reopen_follows_the_online_cpus() {
        let online = online_cpus().unwrap();
        if !is_privileged() || online.len() < 2 {
            eprintln!("note: needs root and two CPUs");
            return;
        }
        let cpu = online[1];
        let ghost = 10_000 + cpu;
        let mut config = SamplerConfig::new(Target::System);
        config.event = EventChoice::Force(EventKind::CpuClock);
        config.frequency = 199;
        let mut sampler = Sampler::open(&config).unwrap();
        assert!(!sampler.online_cpus_changed());
        let rings = sampler.info().rings;
        for ring in sampler.rings.iter_mut().filter(|r| r.event.cpu == cpu) {
            ring.event.cpu = ghost;
        }
        sampler.cpus = sampler
            .cpus
            .iter()
            .map(|&c| if c == cpu { ghost } else { c })
            .collect();
        sampler.cpus.sort_unstable();
        assert!(
            sampler.online_cpus_changed(),
            "{cpu} without events, {ghost} not online"
        );
        sampler.enable().unwrap();

        let spinner = Spinner::on(cpu);
        let pid = spinner.0.id();
        spinner.run_for(0.3);
        // The CPU's new events must take the frequency in effect, not the one opened with.
        assert_eq!(sampler.set_frequency(50).unwrap(), 50);
        let mut handed_over = 0;
        let change = sampler
            .reopen_missing_cpus(&mut samples_of(pid, cpu, &mut handed_over))
            .unwrap();
        assert_eq!(
            change,
            CpuChange {
                opened: vec![cpu],
                closed: vec![ghost]
            }
        );
        assert!(
            handed_over > 0,
            "the closed rings' samples were handed over"
        );
        assert!(!sampler.online_cpus_changed());
        assert_eq!(sampler.info().rings, rings);
        assert_eq!(sampler.cpus, online);

        sampler.drain(&mut |_| {});
        let start = spinner.cpu_seconds();
        spinner.run_for(0.5);
        let mut after = 0;
        sampler.drain(&mut samples_of(pid, cpu, &mut after));
        let rate = after as f64 / (spinner.cpu_seconds() - start);
        assert!(
            (10.0..=100.0).contains(&rate),
            "{after} samples on CPU {cpu} from its new events: {rate:.0} per CPU-second, \
             expected about 50"
        );
        assert!(
            sampler.reopen_missing_cpus(&mut |_| {}).unwrap() == CpuChange::default(),
            "nothing left to do"
        );
    }

    #[test]
    fn reopen_is_refused_for_a_process() {
        let mut config = SamplerConfig::new(Target::Process {
            pid: std::process::id(),
            enable_on_exec: false,
        });
        config.event = EventChoice::Force(EventKind::CpuClock);
        let Ok(mut sampler) = Sampler::open(&config) else {
            eprintln!("note: cannot open events on this process");
            return;
        };
        assert!(matches!(
            sampler.reopen_missing_cpus(&mut |_| {}),
            Err(SamplerError::SystemOnly { .. })
        ));
    }

    #[test]
    fn cpus_that_came_and_went() {
        assert_eq!(
            cpu_difference(&[0, 1, 2, 3], &[0, 1, 2, 3]),
            (vec![], vec![])
        );
        assert_eq!(cpu_difference(&[0, 1], &[0, 1, 2, 3]), (vec![2, 3], vec![]));
        assert_eq!(cpu_difference(&[0, 1, 2, 3], &[0, 2]), (vec![], vec![1, 3]));
        assert_eq!(
            cpu_difference(&[0, 1, 3], &[0, 2, 3, 4]),
            (vec![2, 4], vec![1])
        );
    }
}
