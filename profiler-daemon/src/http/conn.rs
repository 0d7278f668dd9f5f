//! Serving connections within bounds: a cap on the connections open at once (in total and per
//! uid), and a timeout on the wait for a request's headers (after the connection opens and
//! after each answer), so that held or idle connections cannot use up the daemon's file
//! descriptors (shared with the binaries it pins and the slices it writes).
//!
//! A connection past a cap gets a short 503 and is closed at once. The counting is
//! [`Limiter`]'s.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

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

/// Serve HTTP/1 requests of one connection with `router` (`info` given to handlers as
/// `ConnectInfo`), closing it when no whole request header arrives within `idle` after it
/// opened or after an answer; ends early (gracefully) when `stop` changes. `slot` is released
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
    let conn = builder.serve_connection(TokioIo::new(io), service);
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
