//! Talking to profilerd over its Unix socket (HTTP/1.1): which socket, one request and its
//! answer, the answer's status as an error. Transport only: what a request means is the
//! caller's (`history`, `commands/`), in the types and names of `daemon-api`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::BodyExt;

use crate::output::printable;

use daemon_api::{DEFAULT_SOCKET, SOCKET_ENV};

/// Largest answer read from the daemon.
const MAX_BODY: usize = 512 << 20;

/// Longest wait for an answer.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Why a request to profilerd failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The async runtime could not start.
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    /// Nothing accepts connections on the socket.
    #[error(
        "cannot reach profilerd at {socket} (is it running? `profctl record` records without it)"
    )]
    Connect {
        /// The socket, printable.
        socket: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP handshake failed.
    #[error("talking to profilerd")]
    Handshake(#[source] hyper::Error),
    /// The request could not be built (a bad path).
    #[error("building the request")]
    Build(#[source] hyper::http::Error),
    /// Sending the request or reading the answer's head failed.
    #[error("asking profilerd")]
    Send(#[source] hyper::Error),
    /// Reading the answer's body failed (or it was larger than the bound).
    #[error("reading profilerd's answer: {0}")]
    Body(String),
    /// No answer in time.
    #[error("profilerd did not answer within {0:?}")]
    Timeout(Duration),
    /// The daemon answered with an error status.
    #[error("profilerd answered {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The daemon's message, printable.
        message: String,
    },
}

/// The daemon's socket: `--socket`, else `$PROFILERD_SOCKET`, else the default
/// ([`DEFAULT_SOCKET`]).
pub fn socket_path(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// An answer of the daemon.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body.
    pub body: Vec<u8>,
}

impl Answer {
    /// A numeric header.
    pub fn number(&self, name: &str) -> Option<u64> {
        self.headers.get(name)?.to_str().ok()?.parse().ok()
    }

    /// A text header.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// This answer, or its body as an error unless it is a success (200).
    pub fn ok(self) -> Result<Answer, ClientError> {
        check(&self)?;
        Ok(self)
    }
}

/// `GET path_and_query` on the daemon at `socket`, waiting at most two minutes.
pub fn get(socket: &Path, path_and_query: &str) -> Result<Answer, ClientError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)?;
    runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, request(socket, "GET", path_and_query, None))
            .await
            .map_err(|_| ClientError::Timeout(TIMEOUT))?
    })
}

/// `METHOD path_and_query` on the daemon at `socket`, with a JSON `body` if given.
pub async fn request(
    socket: &Path,
    method: &str,
    path_and_query: &str,
    body: Option<Vec<u8>>,
) -> Result<Answer, ClientError> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| ClientError::Connect {
            socket: printable(&socket.display().to_string()).into_owned(),
            source,
        })?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(ClientError::Handshake)?;
    let connection = tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(hyper::header::HOST, "profilerd");
    if body.is_some() {
        builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let request = builder
        .body(http_body_util::Full::new(hyper::body::Bytes::from(
            body.unwrap_or_default(),
        )))
        .map_err(ClientError::Build)?;
    let response = sender
        .send_request(request)
        .await
        .map_err(ClientError::Send)?;
    let (parts, body) = response.into_parts();
    let body = http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| ClientError::Body(e.to_string()))?
        .to_bytes();
    connection.abort();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.to_vec(),
    })
}

/// Whether something accepts connections on `socket` (the daemon, presumably).
pub fn answers(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

/// The answer's body as an error, unless it is a success (200).
pub fn check(answer: &Answer) -> Result<(), ClientError> {
    if answer.status == 200 {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&answer.body);
    Err(ClientError::Status {
        status: answer.status,
        message: printable(text.trim().trim_start_matches("profilerd: ")).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_named_comes_first() {
        assert_eq!(
            socket_path(Some(Path::new("/tmp/x.sock"))),
            PathBuf::from("/tmp/x.sock")
        );
    }

    #[test]
    fn error_statuses_carry_the_daemons_message() {
        let answer = Answer {
            status: 403,
            headers: hyper::HeaderMap::new(),
            body: b"profilerd: not yours\n".to_vec(),
        };
        let err = answer.ok().err().unwrap();
        assert_eq!(err.to_string(), "profilerd answered 403: not yours");
    }
}
