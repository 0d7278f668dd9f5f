//! Serving connections within bounds: a cap on the connections open at once (in total and per
//! uid), a timeout on the wait for a request's headers (after the connection opens and
//! after each answer), so that held or idle connections cannot use up the daemon's file
//! descriptors (shared with the binaries it pins and the slices it writes), and a write
//! timeout ([`WriteTimeout`]): a connection that accepts no byte of an answer for as long is
//! closed, and what its answer held (`answer::Held`) released.
//!
//! A connection past a cap gets a short 503 and is closed at once. The counting is
//! [`Limiter`]'s.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::Sleep;

pub use crate::http::limits::Slot;

/// The answer written to a connection refused at a cap (before it is closed).
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 53\r\nConnection: close\r\n\r\nprofilerd: too many connections open; try again later\n";

/// Write [`REFUSED`] if the socket takes it at once, then close it.
pub fn refuse_stream(stream: &tokio::net::UnixStream) {
    let _ = stream.try_write(REFUSED);
}

/// Write [`REFUSED`] if the socket takes it at once, then close it.
pub fn refuse_tcp(stream: &tokio::net::TcpStream) {
    let _ = stream.try_write(REFUSED);
}

/// A connection whose writes fail (`TimedOut`) once it has accepted no byte for `timeout`
/// while a write or flush waits: a client that stops reading an answer is closed, not held.
/// Reads are not timed here (the header timeout covers a request).
pub struct WriteTimeout<I> {
    io: I,
    timeout: Duration,
    /// Set when a write first finds the socket full; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteTimeout<I> {
    /// `io`, its writes timed out after `timeout` without progress.
    pub fn new(io: I, timeout: Duration) -> WriteTimeout<I> {
        WriteTimeout {
            io,
            timeout,
            stalled: None,
        }
    }

    /// After a write found no room: an error once the socket has taken nothing for the
    /// timeout (the timer armed at the first such write, woken when it runs out).
    fn poll_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client accepted no byte for {timeout:?}"),
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    /// `result` of a write, flush or shutdown: progress clears the stall, a wait arms it.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.poll_stall(cx).map(Err),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteTimeout<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_write(cx, buf);
        this.timed(cx, result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.timed(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_flush(cx);
        this.timed(cx, result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.io).poll_shutdown(cx);
        this.timed(cx, result)
    }
}

/// Serve HTTP/1 requests of one connection with `router` (`info` given to handlers as
/// `ConnectInfo`), closing it when no whole request header arrives within `idle` after it
/// opened or after an answer, or when it accepts no byte of an answer for `idle`
/// ([`WriteTimeout`]); ends early (gracefully) when `stop` changes. `slot` is released
/// when the connection ends.
pub async fn serve_one<I, T>(
    io: I,
    router: Router,
    info: T,
    idle: Duration,
    slot: Slot,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(info.clone()));
        let mut router = router.clone();
        async move {
            let response = tower_service::Service::call(&mut router, request).await;
            Ok::<_, Infallible>(response.unwrap_or_else(|e| match e {}))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(idle)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(WriteTimeout::new(io, idle)), service);
    tokio::pin!(conn);
    let stopping = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopping => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_client_that_reads_nothing_is_timed_out_and_one_that_reads_is_not() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let timeout = Duration::from_secs(10);
            // A pipe of 64 KiB that nobody reads: the writer fills it, then waits.
            let (ours, mut theirs) = tokio::io::duplex(64 << 10);
            let mut conn = WriteTimeout::new(ours, timeout);
            let big = vec![0u8; 1 << 20];
            let started = tokio::time::Instant::now();
            let err = conn.write_all(&big).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert_eq!(
                started.elapsed(),
                timeout,
                "timed from the first full write"
            );
            // A reader that keeps reading, however slowly (a piece every 5 s), is never
            // timed out: each byte accepted restarts the timer.
            let (ours, mut theirs2) = tokio::io::duplex(64 << 10);
            let mut conn = WriteTimeout::new(ours, timeout);
            let reader = tokio::spawn(async move {
                let mut buf = vec![0u8; 32 << 10];
                let mut total = 0;
                while total < (1 << 20) {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    total += theirs2.read(&mut buf).await.unwrap();
                }
                total
            });
            conn.write_all(&big).await.unwrap();
            drop(conn);
            assert_eq!(reader.await.unwrap(), 1 << 20);
            let mut first = [0u8; 1];
            assert_eq!(theirs.read(&mut first).await.unwrap(), 1);
        });
    }
}
