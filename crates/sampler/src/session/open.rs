//! Opening a session: the events of every CPU (whole system) or of every thread on every CPU
//! (one process), their rings mapped (halved while the locked-memory limit refuses them), and
//! the fallbacks when the kernel refuses kernel frames or hardware cycles.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::io;

use perf_event_open_sys::bindings::perf_event_attr;
use tracing::{debug, info};

use crate::config::{EventChoice, SamplerConfig, SessionInfo, Target};
use crate::error::SamplerError;
use crate::event::{build_attr, build_sideband_attr, build_switch_attr, AttrSpec, EventKind};
use crate::ring::RingBuffer;
use crate::sys;
use crate::system::online_cpus;

use super::spec::{attr_spec, check_config};
use super::{is_permission, permission_error, Event, Ring, Sampler, Setup, Stream};

/// The smallest ring tried when the locked-memory limit refuses larger ones.
const MIN_RING_PAGES: usize = 8;

impl Sampler {
    /// Open the events for `config`, disabled; call [`Sampler::enable`] to start.
    ///
    /// Picks the event (cycles, else cpu-clock), lowers the frequency to the kernel's maximum
    /// and drops kernel sampling when privileges require it, noting each change in
    /// [`SessionInfo::notes`].
    pub fn open(config: &SamplerConfig) -> Result<Sampler, SamplerError> {
        check_config(config)?;
        let mut notes = Vec::new();
        let spec = attr_spec(config, &mut notes)?;
        let cpus = online_cpus().map_err(|source| SamplerError::Io {
            what: "reading the online CPUs",
            source,
        })?;
        let mut sampler = Self::open_falling_back(config, spec, &cpus, &mut notes)?;
        sampler.info.notes = notes;
        sampler.info.frequency = spec.frequency;
        info!(event = %sampler.info.event, frequency = spec.frequency, kernel = sampler.info.kernel_included, idle_excluded = sampler.info.idle_excluded, events = sampler.info.events, "sampling events opened");
        Ok(sampler)
    }

    /// [`Sampler::open_fitting`], again without kernel frames when a process's events are
    /// refused them, or on cpu-clock when `auto`'s cycles cannot sample (each noted).
    fn open_falling_back(
        config: &SamplerConfig,
        spec: AttrSpec,
        cpus: &[u32],
        notes: &mut Vec<String>,
    ) -> Result<Sampler, SamplerError> {
        match Self::open_fitting(config, &spec, cpus, notes) {
            Err(SamplerError::PermissionDenied { .. })
                if spec.include_kernel && !matches!(config.target, Target::System) =>
            {
                notes.push("kernel frames excluded: not permitted for this user".into());
                let spec = AttrSpec {
                    include_kernel: false,
                    ..spec
                };
                Self::open_fitting(config, &spec, cpus, notes)
            }
            Err(SamplerError::Open { source, .. })
                if spec.kind == EventKind::Cycles
                    && config.event == EventChoice::Auto
                    && !is_permission(&source) =>
            {
                notes.push(format!(
                    "cycles could not sample ({source}); using cpu-clock"
                ));
                let spec = AttrSpec {
                    kind: EventKind::CpuClock,
                    ..spec
                };
                Self::open_fitting(config, &spec, cpus, notes)
            }
            other => other,
        }
    }
    /// [`Sampler::open_with`], halving the ring size while the locked-memory limit refuses it.
    fn open_fitting(
        config: &SamplerConfig,
        spec: &AttrSpec,
        cpus: &[u32],
        notes: &mut Vec<String>,
    ) -> Result<Sampler, SamplerError> {
        let mut pages = config.ring_pages;
        loop {
            match Self::open_with(config, spec, cpus, pages) {
                Err(SamplerError::RingMap { source, .. })
                    if pages > MIN_RING_PAGES
                        && matches!(
                            source.raw_os_error(),
                            Some(libc::EPERM) | Some(libc::ENOMEM)
                        ) =>
                {
                    pages /= 2;
                }
                Ok(sampler) => {
                    if pages != config.ring_pages {
                        notes.push(format!(
                            "ring buffers reduced from {} to {pages} pages per CPU by the locked-memory limit \
                             (kernel.perf_event_mlock_kb, RLIMIT_MEMLOCK); expect lost samples at high rates",
                            config.ring_pages
                        ));
                    }
                    return Ok(sampler);
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Open the events and rings of `ring_pages` (side-band rings no larger) on `cpus`.
    fn open_with(
        config: &SamplerConfig,
        spec: &AttrSpec,
        cpus: &[u32],
        ring_pages: usize,
    ) -> Result<Sampler, SamplerError> {
        let sideband_pages = config.sideband_ring_pages.min(ring_pages);
        let spec = &with_watermarks(config, spec, ring_pages, sideband_pages);
        let setup = Setup {
            target: config.target.clone(),
            sample_attr: build_attr(spec),
            frequency: spec.frequency,
            sideband_attr: build_sideband_attr(spec),
            switch_attr: config.switches.map(|s| build_switch_attr(spec, s.period)),
            ring_pages,
            sideband_pages,
        };
        let mut rings = OpeningRings::new(cpus.len());
        match config.target {
            Target::System => {
                for (index, &cpu) in cpus.iter().enumerate() {
                    let [samples, sideband, switches] = setup.open_cpu(cpu)?;
                    rings.samples[index] = samples;
                    rings.sideband[index] = sideband;
                    rings.switches[index] = switches;
                }
            }
            Target::Process { pid, .. } => {
                let cpu_samples = config.switches.is_none_or(|s| s.cpu_samples);
                rings.attach_process(&setup, pid, cpus, cpu_samples)?;
            }
        }
        Ok(rings.into_sampler(spec, setup))
    }
}

/// `spec` with the wake-up watermarks of rings of `ring_pages` and side-band rings of
/// `sideband_pages`.
fn with_watermarks(
    config: &SamplerConfig,
    spec: &AttrSpec,
    ring_pages: usize,
    sideband_pages: usize,
) -> AttrSpec {
    let ring_bytes = ring_pages * sys::page_size();
    AttrSpec {
        sideband_watermark: config
            .sideband_wakeup
            .watermark(sideband_pages * sys::page_size()),
        // Wake at `wakeup_percent` of the ring (at least the byte watermark), and never
        // later than three quarters of it.
        wakeup_watermark: u32::try_from(
            (spec.wakeup_watermark as usize)
                .max(ring_bytes / 100 * usize::from(config.wakeup_percent.min(75)))
                .min(ring_bytes / 4 * 3),
        )
        .unwrap_or(u32::MAX),
        ..*spec
    }
}

/// The rings of a session being opened, per CPU (by index in the CPUs opened): one for
/// samples, one for side-band records, one for context switches; further events on the same
/// CPU write into them (SET_OUTPUT).
struct OpeningRings {
    samples: Vec<Option<Ring>>,
    sideband: Vec<Option<Ring>>,
    switches: Vec<Option<Ring>>,
    /// Events whose records go to one of the rings.
    redirected: Vec<Event>,
}

/// Why an event of a thread could not be attached: the OS error, if the open failed, and the
/// error to report.
type AttachError = (Option<i32>, SamplerError);

impl OpeningRings {
    fn new(cpus: usize) -> OpeningRings {
        OpeningRings {
            samples: (0..cpus).map(|_| None).collect(),
            sideband: (0..cpus).map(|_| None).collect(),
            switches: (0..cpus).map(|_| None).collect(),
            redirected: Vec::new(),
        }
    }

    /// Attach to every thread of process `pid` on every CPU (`cpu_samples`: with the sampling
    /// event), listing its threads again until no new one shows up (threads can appear while
    /// attaching). A thread that exits between listing and opening is skipped.
    fn attach_process(
        &mut self,
        setup: &Setup,
        pid: u32,
        cpus: &[u32],
        cpu_samples: bool,
    ) -> Result<(), SamplerError> {
        let mut attached = BTreeSet::new();
        loop {
            let tids = match tids_of(pid) {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(SamplerError::NoSuchProcess { pid })
                }
                Err(source) => {
                    return Err(SamplerError::Io {
                        what: "listing the process's threads",
                        source,
                    })
                }
            };
            let new: Vec<u32> = tids.difference(&attached).copied().collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                attached.insert(tid);
                match self.attach_thread(setup, tid, cpus, cpu_samples) {
                    Ok(()) => {}
                    // A thread that exited between listing and opening.
                    Err((Some(libc::ESRCH), _)) if tid != pid => {}
                    Err((_, e)) => return Err(e),
                }
            }
        }
        debug!(pid, threads = attached.len(), "attached to process");
        Ok(())
    }

    /// Open the events of thread `tid` on every CPU, each attached to its CPU's ring.
    fn attach_thread(
        &mut self,
        setup: &Setup,
        tid: u32,
        cpus: &[u32],
        cpu_samples: bool,
    ) -> Result<(), AttachError> {
        for (index, &cpu) in cpus.iter().enumerate() {
            let streams = [
                (
                    Some(&setup.sample_attr).filter(|_| cpu_samples),
                    Stream::Samples,
                ),
                (Some(&setup.sideband_attr), Stream::Sideband),
                (setup.switch_attr.as_ref(), Stream::Switches),
            ];
            for (attr, stream) in streams {
                let Some(attr) = attr else { continue };
                self.attach(setup, attr, stream, tid as i32, cpu, index)?;
            }
        }
        Ok(())
    }

    /// Open one event of `pid` on `cpu` and attach it to the CPU's ring of its stream
    /// (mapping the ring on first use: side-band rings of `setup.sideband_pages`, the others
    /// of `setup.ring_pages`).
    fn attach(
        &mut self,
        setup: &Setup,
        attr: &perf_event_attr,
        stream: Stream,
        pid: i32,
        cpu: u32,
        index: usize,
    ) -> Result<(), AttachError> {
        let fd = sys::perf_event_open(attr, pid, cpu as i32)
            .map_err(|e| (e.raw_os_error(), open_error(&setup.target, pid, cpu, e)))?;
        let event = Event { fd, stream, cpu };
        let (rings, pages) = match stream {
            Stream::Samples => (&mut self.samples, setup.ring_pages),
            Stream::Sideband => (&mut self.sideband, setup.sideband_pages),
            Stream::Switches => (&mut self.switches, setup.ring_pages),
        };
        match &rings[index] {
            Some(ring) => {
                sys::set_output(&event.fd, &ring.event.fd).map_err(|source| {
                    (
                        None,
                        SamplerError::Io {
                            what: "PERF_EVENT_IOC_SET_OUTPUT",
                            source,
                        },
                    )
                })?;
                self.redirected.push(event);
            }
            None => {
                let map = sys::RingMap::new(&event.fd, pages)
                    .map_err(|source| (None, SamplerError::RingMap { pages, source }))?;
                rings[index] = Some(Ring {
                    event,
                    buffer: RingBuffer::new(map),
                });
            }
        }
        Ok(())
    }

    /// The session: its rings (sample rings first, then side-band, then switch rings), the
    /// events redirected into them, and what was opened.
    fn into_sampler(self, spec: &AttrSpec, setup: Setup) -> Sampler {
        let rings: Vec<Ring> = self
            .samples
            .into_iter()
            .chain(self.sideband)
            .chain(self.switches)
            .flatten()
            .collect();
        let events = rings.len() + self.redirected.len();
        let mut opened: Vec<u32> = rings.iter().map(|r| r.event.cpu).collect();
        opened.sort_unstable();
        opened.dedup();
        let info = SessionInfo {
            event: spec.kind,
            frequency: spec.frequency,
            kernel_included: spec.include_kernel,
            idle_excluded: spec.idle_excluded(),
            notes: Vec::new(),
            events,
            rings: rings.len(),
            ring_pages: setup.ring_pages,
            wakeup_watermark: spec.wakeup_watermark as usize,
            format: spec.format,
        };
        Sampler {
            rings,
            redirected: self.redirected,
            info,
            setup,
            cpus: opened,
            enabled: Cell::new(false),
            online: std::cell::OnceCell::new(),
        }
    }
}

/// The error for an event of `pid` on `cpu` the kernel refused with `source`.
fn open_error(target: &Target, pid: i32, cpu: u32, source: io::Error) -> SamplerError {
    if is_permission(&source) {
        permission_error(target)
    } else if source.raw_os_error() == Some(libc::ESRCH) && pid > 0 {
        SamplerError::NoSuchProcess { pid: pid as u32 }
    } else {
        SamplerError::Open {
            what: format!("pid {pid}, cpu {cpu}"),
            source,
        }
    }
}

/// The threads of process `pid`, from /proc.
fn tids_of(pid: u32) -> io::Result<BTreeSet<u32>> {
    let mut tids = BTreeSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.insert(tid);
        }
    }
    Ok(tids)
}
