//! The HTTP API on a Unix socket: status, folded stacks of the history, on-demand recordings,
//! Prometheus metrics; and the opt-in scrape listener (`scrape`). Every request on the socket
//! is authorized with the peer's credentials as they were at `connect(2)` (SO_PEERCRED,
//! SO_PEERGROUPS): root and the admin group see everything; any other user sees only stacks
//! of processes of their own uid, without kernel frames.
//!
//! One file per route group; a handler parses, authorizes, calls the layer beneath
//! (`query`, `recordings`, the shared state) and encodes the answer.

pub mod common;
pub mod folded;
pub mod pprof;
pub mod recordings;
pub mod scrape;
pub mod status;
pub mod timeline;

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::routing::get;
use axum::Router;
use tokio::net::UnixListener;

use crate::access::set_socket_group;
use crate::http::common::{ApiState, Peer};

/// Bind the API socket at `path`: its directory is created if missing; a socket left by a
/// daemon that is gone is replaced, one that answers is an error; mode 0666, or 0660 and
/// owned by `group` when set.
pub fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the socket's directory {}", dir.display()))?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("another profilerd answers on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    set_socket_group(path, group)?;
    Ok(listener)
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

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    state: Arc<ApiState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(state).into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
