//! The HTTP API on a Unix socket: status, folded stacks of the history, on-demand recordings,
//! Prometheus metrics; and the opt-in scrape listener (`scrape`). Every request on the socket
//! is authorized with the peer's credentials as they were at `connect(2)` (SO_PEERCRED,
//! SO_PEERGROUPS): root and the admin group see everything; any other user sees only stacks
//! of processes of their own uid, without kernel frames.
//!
//! One file per route group; a handler parses, authorizes, calls the layer beneath
//! (`query`, `recordings`, the shared state) and encodes the answer.

pub mod answer;
pub mod common;
pub mod conn;
pub mod folded;
pub mod limits;
pub mod pprof;
pub mod recordings;
pub mod scrape;
pub mod status;
pub mod timeline;

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::routing::get;
use axum::Router;
use tokio::net::UnixListener;

use crate::access::set_socket_group;
use crate::http::common::{ApiState, Peer};

/// Bind the API socket at `path`. Its directory must be root's alone (created, mode 0755, if
/// missing: `recorder::check_private_dir`); a socket left by a daemon that is gone is replaced, one that
/// answers is an error. The socket is bound in a private directory beside it, given its mode
/// (0666, or 0660 and owned by `group` when set) and only then renamed into place, so that it
/// is never visible with another mode and no path is followed.
pub fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    recorder::check_private_dir(dir, crate::sys::effective_uid(), 0o755).context("api.socket")?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("another profilerd answers on {}", path.display());
        }
    }
    let private = dir.join(format!(".profilerd-bind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| format!("creating {}", private.display()))?;
    let staged = private.join("socket");
    let bound = (|| {
        let listener =
            UnixListener::bind(&staged).with_context(|| format!("binding {}", staged.display()))?;
        set_socket_group(&staged, group)?;
        std::fs::rename(&staged, path)
            .with_context(|| format!("moving the socket to {}", path.display()))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&private);
    bound
}

/// The API's routes.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/v1/status", get(status::status))
        .route("/v1/folded", get(folded::folded))
        .route("/v1/timeline", get(timeline::timeline))
        .route("/v1/pprof", get(pprof::pprof))
        .route("/metrics", get(status::metrics))
        .merge(recordings::routes())
        .with_state(state)
}

/// Serve the API on `listener` until `shutdown` resolves: each connection counted against
/// `api.max_connections` and `api.max_connections_per_user`, and closed when idle for
/// `api.idle_timeout`.
pub async fn serve(
    listener: UnixListener,
    state: Arc<ApiState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router(Arc::clone(&state));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of descriptors (or another transient error): wait a little, so as
                    // not to spin, and go on.
                    tracing::debug!(%err, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let peer = Peer::of(&stream);
        let api = state.shared.live().api.clone();
        let caps = limits::Caps::connections(api.max_connections.0, api.max_connections_per_user.0);
        let Some(slot) = state
            .connections
            .admit(Some(peer.uid), state.is_admin(&peer), caps)
        else {
            tracing::debug!(
                uid = peer.uid,
                pid = peer.pid,
                "connection refused: too many open"
            );
            conn::refuse_stream(&stream);
            continue;
        };
        tokio::spawn(conn::serve_one(
            stream,
            router.clone(),
            peer,
            api.idle_timeout.0,
            slot,
            stop_rx.clone(),
        ));
    }
    let _ = stop_tx.send(true);
    // Answers under way end; then every connection closes.
    while state.connections.open() > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}
