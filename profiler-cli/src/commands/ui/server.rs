//! The HTTP server on 127.0.0.1: connections (at most [`MAX_CONNECTIONS`] at once, each
//! closed when it waits longer than [`HEAD_TIMEOUT`] for a request head, idle ones included,
//! and after [`LIFETIME`] in any case: the browser opens another), the guard applied to every request, the page's own files (built into
//! profctl) and the `/api/` requests.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::commands::ui::api::{self, Reply, Start};
use crate::commands::ui::guard::{self, Guard, Verdict};
use crate::commands::ui::source::Source;

/// Connections served at once; past it, new ones wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 32;
/// Longest wait for a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is closed after this long.
const LIFETIME: Duration = Duration::from_secs(600);
/// Largest request head.
const MAX_HEAD: usize = 16 * 1024;

/// The page's files: path, content type, bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "/ui.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/ui.js"),
    ),
    (
        "/ui.css",
        "text/css; charset=utf-8",
        include_str!("assets/ui.css"),
    ),
];

/// Bytes of the page without data (its files).
pub fn page_bytes() -> usize {
    ASSETS.iter().map(|(_, _, text)| text.len()).sum()
}

/// What every connection shares.
pub struct Server {
    /// Who may ask.
    pub guard: Guard,
    /// Where stacks come from.
    pub source: Arc<Source>,
    /// What the page starts with.
    pub start: Start,
}

/// Serve on `listener` until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    server: Arc<Server>,
    stop: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            _ = &mut stop => return,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::debug!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let server = Arc::clone(&server);
                async move { Ok::<_, Infallible>(handle(&server, req).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(LIFETIME, connection).await {
                Ok(Err(err)) => tracing::debug!(%err, "connection ended"),
                Err(_) => tracing::debug!("connection open too long: closed"),
                Ok(Ok(())) => {}
            }
        });
    }
}

/// One request.
async fn handle(server: &Server, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let reply = match server.guard.check(&method, &path, &query, req.headers()) {
        Verdict::Refuse(status, why) => text(status, why),
        Verdict::SignIn(cookie) => {
            let mut response = text(303, "signed in");
            response
                .headers_mut()
                .insert("location", HeaderValue::from_static("/"));
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert("set-cookie", value);
            }
            response
        }
        Verdict::Serve => match path.strip_prefix("/api/") {
            Some(name) => {
                let name = name.to_string();
                encode(api::answer(&server.source, &server.start, &name, &query).await)
            }
            None => match ASSETS.iter().find(|(p, _, _)| *p == path) {
                Some((_, content_type, body)) => {
                    bytes(200, content_type, Bytes::from_static(body.as_bytes()))
                }
                None => text(404, "not found"),
            },
        },
    };
    let mut reply = reply;
    guard::secure(reply.headers_mut());
    reply
}

fn bytes(status: u16, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = HeaderValue::from_str(content_type) {
        response.headers_mut().insert("content-type", value);
    }
    response
}

fn text(status: u16, message: &str) -> Response<Full<Bytes>> {
    bytes(
        status,
        "text/plain; charset=utf-8",
        Bytes::from(format!("profctl ui: {message}\n")),
    )
}

fn encode(reply: Reply) -> Response<Full<Bytes>> {
    let mut response = bytes(reply.status, reply.content_type, Bytes::from(reply.body));
    if let Some(name) = reply.download {
        let value = format!("attachment; filename=\"{name}\"");
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert("content-disposition", value);
        }
    }
    response
}
