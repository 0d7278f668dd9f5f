//! What every route of the Unix socket API needs: the handlers' shared state, who is asking
//! (the peer's credentials at `connect(2)`), and error answers.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::net::UnixStream;

use crate::access::{is_admin, GroupId, Visibility};
use crate::http::limits::{Caps, Limiter, Slot};
use crate::recordings::{Recordings, Requester};
use crate::state::Shared;

/// Who is asking: the peer's credentials at `connect(2)`.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Effective uid (`u32::MAX` when it could not be read: such a peer sees nothing).
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups (empty when they could not be read).
    pub groups: Vec<u32>,
    /// Process id (logged only: it may be reused).
    pub pid: Option<i32>,
}

impl Peer {
    /// The peer of a connection accepted on the API socket.
    pub fn of(io: &UnixStream) -> Peer {
        match io.peer_cred() {
            Ok(cred) => Peer {
                uid: cred.uid(),
                gid: cred.gid(),
                groups: crate::sys::peer_groups(io).unwrap_or_default(),
                pid: cred.pid(),
            },
            Err(err) => {
                tracing::warn!(%err, "cannot read a peer's credentials; it will see nothing");
                Peer {
                    uid: u32::MAX,
                    gid: u32::MAX,
                    groups: Vec::new(),
                    pid: None,
                }
            }
        }
    }
}

/// What the API handlers share.
pub struct ApiState {
    /// The daemon's shared state.
    pub shared: Arc<Shared>,
    /// The admin group's gid, if one is configured (changes on reload).
    pub admin_gid: Arc<GroupId>,
    /// Queries running, per uid (a slot is held until the query's blocking work ends).
    pub queries: Arc<Limiter>,
    /// On-demand recordings.
    pub recordings: Recordings,
    /// Connections open, per uid.
    pub connections: Arc<Limiter>,
}

impl ApiState {
    /// Whether `peer` sees everything.
    pub fn is_admin(&self, peer: &Peer) -> bool {
        is_admin(&self.admin_gid, peer.uid, peer.gid, &peer.groups)
    }

    /// What `peer` may see.
    pub fn visibility(&self, peer: &Peer) -> Visibility {
        Visibility::of(peer.uid, self.is_admin(peer))
    }

    /// A query slot for `peer` (held until the query's blocking work ends), or
    /// [`QueryRefused`] when a cap is reached.
    pub fn admit_query(&self, peer: &Peer, api: &crate::config::Api) -> Result<Slot, QueryRefused> {
        let caps = Caps::queries(api.max_concurrent_queries.0, api.max_queries_per_user.0);
        self.queries
            .admit(Some(peer.uid), self.is_admin(peer), caps)
            .ok_or(QueryRefused)
    }

    /// `peer` as the recordings know users.
    pub fn requester(&self, peer: &Peer) -> Requester {
        Requester {
            uid: peer.uid,
            admin: self.is_admin(peer),
        }
    }
}

/// A query refused because the caller's or everyone's query slots are taken.
#[derive(Debug)]
pub struct QueryRefused;

impl IntoResponse for QueryRefused {
    fn into_response(self) -> Response {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many queries at once (yours, or everyone's: api.max_queries_per_user, api.max_concurrent_queries); try again",
        )
    }
}

impl IntoResponse for crate::query::QueryError {
    /// 413 for an answer (or a file of its range) over the response bound, 503 for a query
    /// too slow or whose client went away.
    fn into_response(self) -> Response {
        use crate::query::QueryError;
        let status = match self {
            QueryError::TooLarge(_) | QueryError::FileTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            QueryError::TooSlow(_) | QueryError::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        };
        error(status, self.to_string())
    }
}

/// An error answer: `profilerd: MESSAGE`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, format!("profilerd: {}\n", message.into())).into_response()
}
