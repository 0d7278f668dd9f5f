//! Draining every ring buffer as records arrive: epoll readiness through tokio's `AsyncFd`,
//! batched by the wakeup watermark, plus a drain whenever `tick` passed without one, so no
//! record waits longer than `tick`.

use std::future::Future;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::error::SamplerError;
use crate::ring::RawRecord;
use crate::session::Sampler;

/// Receives what the drain loop reads.
pub trait RecordSink {
    /// One record, in ring order (records of different CPUs are not ordered among each other).
    fn on_record(&mut self, record: RawRecord<'_>);
    /// How many bytes of the record last handed to `on_record`, from its start (header
    /// included), it read: the rings load about that much of each next record ahead of the
    /// time it is handed on (see [`crate::read_records_guided`]). 0: not known (the first
    /// [`crate::PREFETCH_BYTES`] are loaded). Default: 0.
    fn last_record_reach(&self) -> usize {
        0
    }
    /// Called before every drain round reads the rings (not before the final drain at stop).
    /// Default: nothing.
    fn on_round_start(&mut self) {}
    /// Called after every drain round (at least once per tick) and once after the final drain.
    fn on_round(&mut self, sampler: &Sampler);
    /// Asked after every round (after `on_round`): whether [`drain_until`] should return
    /// [`DrainEnd::Paused`] now, the events still enabled, so that the caller can change the
    /// set of rings, e.g. [`Sampler::reopen_missing_cpus`] when `on_round` found
    /// [`Sampler::online_cpus_changed`], then call it again. Default: never.
    fn pause_draining(&mut self) -> bool {
        false
    }
    /// Asked after every round: how long the loop may wait before the next one unless a
    /// ring's watermark or the wake starts it sooner; `tick` is the loop's own. A sink
    /// that saw nothing in the round that needs reading soon may answer longer (fewer
    /// wake-ups at rest). Default: `tick`.
    fn next_tick(&mut self, tick: Duration) -> Duration {
        tick
    }
}

/// Why [`drain_until`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainEnd {
    /// `stop` resolved: the events are disabled and the rings drained to empty.
    Stopped,
    /// [`RecordSink::pause_draining`] asked: the events still run and records wait in the
    /// rings; call [`drain_until`] again (with the same `stop`, e.g. `&mut stop` pinned).
    Paused,
}

/// Sample until `stop` resolves, handing each record to `sink.on_record` and calling
/// `sink.on_round` after every drain round (at least once per `tick`). On stop: disable every
/// event, drain the buffers to empty, and return [`DrainEnd::Stopped`]; the caller then drops
/// the sampler (unmap, close). The ring buffers are registered with epoll for the duration of
/// the call, so rings added meanwhile are not waited on: to add some, have the sink pause the
/// loop ([`RecordSink::pause_draining`]), change the sampler, and call this again:
///
/// ```no_run
/// # async fn run(mut sampler: sampler::Sampler, sink: &mut dyn sampler::RecordSink,
/// #     stop: impl std::future::Future<Output = ()>) -> Result<(), sampler::SamplerError> {
/// use sampler::{drain_until, DrainEnd};
/// let tick = std::time::Duration::from_millis(250);
/// tokio::pin!(stop);
/// while drain_until(&mut sampler, &mut stop, tick, sink).await? == DrainEnd::Paused {
///     sampler.reopen_missing_cpus(&mut |record| sink.on_record(record))?;
/// }
/// # Ok(()) }
/// ```
///
/// Must run inside a tokio runtime with IO enabled (and time, for a `stop` that sleeps).
pub async fn drain_until(
    sampler: &mut Sampler,
    stop: impl Future<Output = ()>,
    tick: Duration,
    sink: &mut dyn RecordSink,
) -> Result<DrainEnd, SamplerError> {
    drain_until_woken(sampler, stop, tick, None, sink).await
}

/// One drain round: every ring read into `sink`, guided by what it read of each record.
fn drain_into(sampler: &mut Sampler, sink: &mut dyn RecordSink) -> u64 {
    sampler.drain_guided(&mut |r| {
        sink.on_record(r);
        sink.last_record_reach()
    })
}

/// [`drain_until`], with one more reason to drain: `wake`, notified from any thread
/// (`Notify::notify_one`), starts a round at once, as a tick would (a notification that comes
/// while a round runs starts the next one as soon as it ends).
pub async fn drain_until_woken(
    sampler: &mut Sampler,
    stop: impl Future<Output = ()>,
    tick: Duration,
    wake: Option<&tokio::sync::Notify>,
    sink: &mut dyn RecordSink,
) -> Result<DrainEnd, SamplerError> {
    let fds: Vec<AsyncFd<OwnedFd>> = sampler
        .ring_owned_fds()
        .map(crate::sys::register_readable)
        .collect::<Result<_, _>>()
        .map_err(|source| SamplerError::Io {
            what: "registering ring buffers with epoll",
            source,
        })?;
    // Rings whose task exited: the kernel reports them readable (HUP) for good, so they are
    // no longer waited on; the tick and the other rings still drain them.
    let mut closed = vec![false; fds.len()];
    // The tick is a timerfd in the same epoll set, armed again after every round: a round the
    // rings or `wake` started postpones it, so that at rest, when the watermarks wake the loop
    // more often than the tick would, the tick adds no wake-up, and no record waits longer
    // than `tick`. (tokio's timer woke this thread two or three times for each tick: once at
    // its wheel's slot before the deadline, once at it, once more for the runtime's unpark.)
    let timer = crate::sys::timer()
        .and_then(|t| {
            // At once: the first round drains what the rings hold already.
            crate::sys::arm_timer(&t, Duration::ZERO)?;
            crate::sys::register_readable_owned(t)
        })
        .map_err(|source| SamplerError::Io {
            what: "creating the drain tick's timer",
            source,
        })?;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => break,
            () = any_readable(&fds, &mut closed) => {}
            () = expired(&timer) => {}
            () = woken(wake) => {}
        }
        sink.on_round_start();
        drain_into(sampler, sink);
        sink.on_round(sampler);
        if let Err(source) = crate::sys::arm_timer(timer.get_ref(), sink.next_tick(tick)) {
            return Err(SamplerError::Io {
                what: "arming the drain tick's timer",
                source,
            });
        }
        if sink.pause_draining() {
            return Ok(DrainEnd::Paused);
        }
    }
    sampler.disable();
    drop(fds);
    while drain_into(sampler, sink) > 0 {}
    sink.on_round(sampler);
    Ok(DrainEnd::Stopped)
}

/// Resolves when `timer` expired, its expiration read and its readiness cleared.
async fn expired(timer: &AsyncFd<OwnedFd>) {
    std::future::poll_fn(|cx| match timer.poll_read_ready(cx) {
        std::task::Poll::Ready(Ok(mut guard)) => {
            crate::sys::clear_timer(timer.get_ref());
            guard.clear_ready();
            std::task::Poll::Ready(())
        }
        // The descriptor cannot fail; were it to, the rings and `wake` still start rounds.
        std::task::Poll::Ready(Err(_)) => std::task::Poll::Pending,
        std::task::Poll::Pending => std::task::Poll::Pending,
    })
    .await
}

/// Resolves when `wake` is notified; never without one.
async fn woken(wake: Option<&tokio::sync::Notify>) {
    match wake {
        Some(wake) => wake.notified().await,
        None => std::future::pending().await,
    }
}

/// Resolves when any of `fds` not `closed` is readable, after clearing the readiness of every
/// one that is.
///
/// Every ring is drained after any wakes, so all readiness is consumed here, before the
/// drain: data written after this point wakes the loop again. A ring whose task exited stays
/// readable for good (HUP, which tokio never clears): it is marked `closed` and no longer
/// polled, so that the loop does not spin. Polls the descriptors in place, without allocating.
async fn any_readable(fds: &[AsyncFd<OwnedFd>], closed: &mut [bool]) {
    std::future::poll_fn(|cx| {
        let mut any = false;
        for (fd, closed) in fds.iter().zip(closed.iter_mut()) {
            if *closed {
                continue;
            }
            if let std::task::Poll::Ready(ready) = fd.poll_read_ready(cx) {
                match ready {
                    Ok(mut guard) => {
                        *closed = guard.ready().is_read_closed();
                        guard.clear_ready();
                    }
                    Err(_) => *closed = true,
                }
                any = true;
            }
        }
        if any {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}
