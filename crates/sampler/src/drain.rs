//! Draining every ring buffer as records arrive: epoll readiness through tokio's `AsyncFd`,
//! batched by the wakeup watermark, plus a periodic drain so no record waits longer than `tick`.

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
    /// Called after every drain round (at least once per tick) and once after the final drain.
    fn on_round(&mut self, sampler: &Sampler);
}

/// Sample until `stop` resolves, handing each record to `sink.on_record` and calling
/// `sink.on_round` after every drain round (at least once per `tick`). On stop: disable every event, drain the buffers
/// to empty, and return; the caller then drops the sampler (unmap, close).
///
/// Must run inside a tokio runtime with IO and time enabled.
pub async fn drain_until(
    sampler: &mut Sampler,
    stop: impl Future<Output = ()>,
    tick: Duration,
    sink: &mut dyn RecordSink,
) -> Result<(), SamplerError> {
    let fds: Vec<AsyncFd<OwnedFd>> = sampler
        .ring_owned_fds()
        .map(crate::sys::register_readable)
        .collect::<Result<_, _>>()
        .map_err(|source| SamplerError::Io {
            what: "registering ring buffers with epoll",
            source,
        })?;
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => break,
            (ready, _, _) = futures_any_readable(&fds) => {
                if let Ok(mut guard) = ready {
                    guard.clear_ready();
                }
            }
            _ = interval.tick() => {}
        }
        sampler.drain(&mut |r| sink.on_record(r));
        sink.on_round(sampler);
    }
    sampler.disable();
    drop(fds);
    while sampler.drain(&mut |r| sink.on_record(r)) > 0 {}
    sink.on_round(sampler);
    Ok(())
}

/// Resolves when any of `fds` is readable: the guard of the first one, its index, the rest.
async fn futures_any_readable(
    fds: &[AsyncFd<OwnedFd>],
) -> (
    std::io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, OwnedFd>>,
    usize,
    (),
) {
    if fds.is_empty() {
        std::future::pending::<()>().await;
    }
    let futures = fds.iter().map(|fd| Box::pin(fd.readable()));
    let (result, index, _rest) = futures_util::future::select_all(futures).await;
    (result, index, ())
}
