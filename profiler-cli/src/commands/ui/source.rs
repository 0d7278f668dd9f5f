//! Where the page's stacks come from: profilerd's history over its socket, asked as the user
//! running profctl (so the daemon's per-user rules hold), one request at a time (the daemon
//! admits one query per user at once); or the files given with `--input`, read at start.
//! The last few answers are cached (keyed by range and filter, and by `minwidth` for a
//! bounded one), so that the views of one selection ask the daemon at most twice: once for
//! the flame graph, bounded, and once for the exact stacks that the top table, the search
//! and the sandwich share.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::commands::ui::params::{Origin, Selection};
use crate::commands::ui::stacks::{About, Stacks};
use crate::daemon_client::{self, Answer, ClientError};
use crate::history;

/// Ranges kept at most.
const CACHE_ENTRIES: usize = 6;
/// Bytes of stacks kept at most (estimated: [`Stacks::bytes`]).
const CACHE_BYTES: u64 = 512 << 20;
/// A range not used for this long is dropped.
const CACHE_IDLE: Duration = Duration::from_secs(300);
/// Longest wait for the daemon.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(120);

/// A file given with `--input`.
pub struct InputFile {
    /// Its path, printable.
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// Its stacks.
    pub stacks: Arc<Stacks>,
}

/// Where stacks come from.
pub enum Backend {
    /// profilerd at this socket.
    Daemon(PathBuf),
    /// These files.
    Files(Vec<InputFile>),
}

/// Why stacks could not be had: an HTTP status for the page and a message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SourceError {
    /// The status to answer with.
    pub status: u16,
    /// Why, printable.
    pub message: String,
}

impl From<ClientError> for SourceError {
    fn from(err: ClientError) -> SourceError {
        match err {
            // The daemon's own refusal (a bad filter, a range too long, busy) keeps its status.
            ClientError::Status { status, message } => SourceError { status, message },
            other => SourceError {
                status: 502,
                message: crate::output::printable(&format!("{:#}", anyhow::Error::new(other)))
                    .into_owned(),
            },
        }
    }
}

struct Entry {
    key: String,
    stacks: Arc<Stacks>,
    used: Instant,
}

/// The page's source of stacks.
pub struct Source {
    /// Daemon or files.
    pub backend: Backend,
    cache: Mutex<Vec<Entry>>,
    /// Held while a request to the daemon runs.
    daemon_turn: tokio::sync::Mutex<()>,
}

impl Source {
    /// A source over `backend`.
    pub fn new(backend: Backend) -> Source {
        Source {
            backend,
            cache: Mutex::new(Vec::new()),
            daemon_turn: tokio::sync::Mutex::new(()),
        }
    }

    /// The files, if this source shows files.
    pub fn files(&self) -> &[InputFile] {
        match &self.backend {
            Backend::Files(files) => files,
            Backend::Daemon(_) => &[],
        }
    }

    /// The daemon's socket, if this source asks one.
    pub fn socket(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Daemon(socket) => Some(socket),
            Backend::Files(_) => None,
        }
    }

    /// `GET path` of the daemon, after any request of this page still running.
    pub async fn daemon_get(&self, path: &str) -> Result<Answer, SourceError> {
        let socket = self.socket().ok_or_else(|| SourceError {
            status: 404,
            message: "this profctl ui shows files (--input), not profilerd's history".into(),
        })?;
        let _turn = self.daemon_turn.lock().await;
        let answer = tokio::time::timeout(
            DAEMON_TIMEOUT,
            daemon_client::request(socket, "GET", path, None),
        )
        .await
        .map_err(|_| ClientError::Timeout(DAEMON_TIMEOUT))??;
        Ok(answer.ok()?)
    }

    /// The stacks `selection` asks for: every one.
    pub async fn stacks(&self, selection: &Selection) -> Result<Arc<Stacks>, SourceError> {
        self.stacks_as(selection, None).await
    }

    /// The stacks `selection` asks for; of a range, with `minwidth` (percent), as profilerd
    /// bounds them for a flame graph drawn at that width (narrow frames merged, samples
    /// kept: `/v1/folded?minwidth=`), which the search, the top table and the sandwich
    /// cannot use. A file's stacks are whole.
    pub async fn stacks_as(
        &self,
        selection: &Selection,
        minwidth: Option<f64>,
    ) -> Result<Arc<Stacks>, SourceError> {
        let (since, until) = match selection.origin {
            Origin::File(i) => return Ok(Arc::clone(&self.files()[i].stacks)),
            Origin::Range(since, until) => (since, until),
        };
        let mut key = selection.key();
        if let Some(w) = minwidth {
            key.push_str(&format!("&minwidth={w}"));
        }
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let asked = Instant::now();
        let path = match minwidth {
            Some(w) => history::bounded_folded_path(since, until, &selection.filter, w),
            None => history::folded_path(since, until, &selection.filter),
        };
        let answer = self
            .daemon_get(&path.map_err(|e| SourceError {
                status: 400,
                message: e.to_string(),
            })?)
            .await?;
        let answered = asked.elapsed();
        // The same range asked twice at once: the second finds the first's answer.
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let bytes = answer.body.len();
        let read = Instant::now();
        let stacks = tokio::task::spawn_blocking(move || {
            let about = About {
                slices: answer.number(daemon_api::header::SLICES).unwrap_or(0),
                frequency: answer.number(daemon_api::header::FREQUENCY).unwrap_or(0),
                event: answer
                    .text(daemon_api::header::EVENT)
                    .unwrap_or("unknown")
                    .to_string(),
                kernel: answer.number(daemon_api::header::KERNEL_FRAMES) == Some(1),
                kind: "profilerd".into(),
            };
            let text = String::from_utf8_lossy(&answer.body);
            match answer.number(daemon_api::header::MIN_WIDTH_SAMPLES) {
                Some(min) if minwidth.is_some() => Stacks::from_bounded(&text, about, min),
                _ => Stacks::from_folded(&text, about),
            }
        })
        .await
        .map_err(|_| SourceError {
            status: 500,
            message: "reading the daemon's answer failed".into(),
        })?;
        tracing::info!(
            daemon_ms = answered.as_millis() as u64,
            read_ms = read.elapsed().as_millis() as u64,
            bytes,
            stacks = stacks.stacks.len(),
            bounded = minwidth.is_some(),
            "a range of the history"
        );
        let stacks = Arc::new(stacks);
        self.keep(key, Arc::clone(&stacks));
        Ok(stacks)
    }

    fn cached(&self, key: &str) -> Option<Arc<Stacks>> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        cache.retain(|e| now.duration_since(e.used) < CACHE_IDLE);
        let entry = cache.iter_mut().find(|e| e.key == key)?;
        entry.used = now;
        Some(Arc::clone(&entry.stacks))
    }

    /// Keep `stacks` under `key`, the least recently used dropped past the bounds.
    fn keep(&self, key: String, stacks: Arc<Stacks>) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.push(Entry {
            key,
            stacks,
            used: Instant::now(),
        });
        cache.sort_by_key(|e| std::cmp::Reverse(e.used));
        let mut bytes = 0;
        let mut kept = 0;
        cache.retain(|e| {
            bytes += e.stacks.bytes();
            kept += 1;
            kept == 1 || (kept <= CACHE_ENTRIES && bytes <= CACHE_BYTES)
        });
    }
}
