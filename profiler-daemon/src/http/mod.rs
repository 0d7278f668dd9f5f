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
