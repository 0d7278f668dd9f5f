//! A blocking client for the [debuginfod] protocol.
//!
//! debuginfod servers hand out ELF files by GNU build-id:
//! `GET $URL/buildid/<lowercase hex build-id>/debuginfo` (or `/executable`)
//! answers 200 with the file, or 404 when the server does not have it.
//!
//! [`Client`] asks every server named in its [`DebuginfodConfig`] in order and
//! stores what it gets in a local cache laid out like elfutils' own client
//! (`<cache>/<build-id>/debuginfo`), so elfutils tools (gdb, eu-stack, …) and
//! this crate can share one cache. Files are written through a temporary file
//! and renamed into place, so readers never see a half-written file. Misses
//! (every server answered 404) are remembered with an empty, mode-000 marker
//! file at the target path, which is honoured for [`NEGATIVE_CACHE_TTL`] (or
//! the number of seconds in `<cache>/cache_miss_s`, as elfutils does).
//!
//! Every network operation is bounded: [`Client::fetch`] never runs longer than
//! [`DebuginfodConfig::timeout`] in total, whatever the number of servers, and a body is
//! at most [`MAX_BODY_BYTES`] (see [`Client::set_max_bytes`]). A server is trusted for
//! nothing: a body that is not an ELF file, or whose GNU build-id is not the one asked for,
//! is refused and never kept.
//!
//! [debuginfod]: https://sourceware.org/elfutils/Debuginfod.html

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// How long a negative cache entry (a build-id that no server had) is honoured
/// unless `<cache>/cache_miss_s` says otherwise. Same default as elfutils.
pub const NEGATIVE_CACHE_TTL: Duration = Duration::from_secs(600);

/// Default bound on a response body (see [`Client::set_max_bytes`]): a larger body is
/// refused, and nothing of it is kept.
pub const MAX_BODY_BYTES: u64 = 1 << 30;

/// Default for [`DebuginfodConfig::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default for [`DebuginfodConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where to fetch from, where to cache, and how long to wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebuginfodConfig {
    /// Server base URLs, tried in order (e.g. `https://debuginfod.debian.net`).
    /// A trailing `/` is ignored.
    pub urls: Vec<String>,
    /// Root of the local cache; files go to `<cache_dir>/<build-id>/<artifact>`.
    pub cache_dir: PathBuf,
    /// Upper bound on one whole [`Client::fetch`] call, across all servers,
    /// including connecting and downloading the body. Default 10 s.
    pub timeout: Duration,
    /// Upper bound on establishing one connection (DNS, TCP, TLS). Default 2 s.
    pub connect_timeout: Duration,
}

impl DebuginfodConfig {
    /// Builds a configuration from the environment, the way elfutils does.
    ///
    /// Servers come from `DEBUGINFOD_URLS` (space-separated); returns `None`
    /// when it is unset or holds no URL. The cache is
    /// `$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`,
    /// else `$HOME/.cache/debuginfod_client` (else a directory under the
    /// system temporary directory). Timeouts are the defaults
    /// ([`DEFAULT_TIMEOUT`], [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn from_env() -> Option<DebuginfodConfig> {
        Self::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<DebuginfodConfig> {
        let urls: Vec<String> = var("DEBUGINFOD_URLS")?
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if urls.is_empty() {
            return None;
        }
        let non_empty = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let cache_dir = non_empty("DEBUGINFOD_CACHE_PATH")
            .or_else(|| non_empty("XDG_CACHE_HOME").map(|p| p.join("debuginfod_client")))
            .or_else(|| non_empty("HOME").map(|p| p.join(".cache").join("debuginfod_client")))
            .unwrap_or_else(|| std::env::temp_dir().join("debuginfod_client"));
        Some(DebuginfodConfig {
            urls,
            cache_dir,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        })
    }
}

/// Which file to fetch for a build-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Artifact {
    /// The separate debug info (`/debuginfo`), e.g. what `objcopy --only-keep-debug` makes.
    DebugInfo,
    /// The executable or shared object itself (`/executable`).
    Executable,
}

impl Artifact {
    /// The last path component of the URL, which is also the cache file name.
    pub fn as_str(self) -> &'static str {
        match self {
            Artifact::DebugInfo => "debuginfo",
            Artifact::Executable => "executable",
        }
    }
}

/// Why [`Client::fetch`] failed. Every message names the build-id, the URL or
/// the path involved.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Every server answered 404 (or a fresh negative cache entry says so, or no
    /// server is configured).
    #[error("build-id {build_id} not found on any debuginfod server")]
    NotFound {
        /// Lowercase hex build-id.
        build_id: String,
    },
    /// The time budget ran out while talking to `url`.
    #[error("debuginfod request to {url} timed out")]
    Timeout {
        /// The URL being fetched.
        url: String,
    },
    /// The server answered with an unexpected HTTP status (not 200 or 404).
    #[error("debuginfod server answered {status} for {url}")]
    Http {
        /// The URL being fetched.
        url: String,
        /// HTTP status code.
        status: u16,
    },
    /// Reading or writing the local cache failed.
    #[error("debuginfod cache I/O error at {}: {source}", path.display())]
    Io {
        /// The cache path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// No connection could be made (refused, unreachable, DNS failure, …).
    #[error("cannot connect to debuginfod server for {url}: {message}")]
    Connect {
        /// The URL being fetched.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The connection was made but the exchange failed (protocol error,
    /// connection dropped mid-body, body not an ELF file, …).
    #[error("debuginfod transfer from {url} failed: {message}")]
    Transfer {
        /// The URL being fetched.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The body was larger than the client's bound.
    #[error("debuginfod body from {url} is larger than {limit} bytes; refused")]
    TooLarge {
        /// The URL being fetched.
        url: String,
        /// The bound ([`Client::set_max_bytes`]).
        limit: u64,
    },
    /// The file fetched is not the one asked for: its GNU build-id differs (or it has none).
    #[error("debuginfod file from {url} has build-id {found}, not {expected}; refused")]
    WrongBuildId {
        /// The URL fetched.
        url: String,
        /// The build-id asked for, lowercase hex.
        expected: String,
        /// The file's build-id, lowercase hex, or `none`.
        found: String,
    },
    /// The build-id given was empty.
    #[error("empty build-id")]
    EmptyBuildId,
}

/// A debuginfod client with a local cache. Cheap to share between threads
/// (`&Client` is all [`Client::fetch`] needs).
#[derive(Debug)]
pub struct Client {
    config: DebuginfodConfig,
    agent: ureq::Agent,
    max_bytes: u64,
}

/// Outcome of asking one server.
enum Attempt {
    Found(PathBuf),
    Missing,
    Failed(FetchError),
}

impl Client {
    /// Creates a client. No I/O happens until [`Client::cached`] or
    /// [`Client::fetch`] is called.
    pub fn new(config: DebuginfodConfig) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // 404 is an answer, not an error: look at statuses ourselves.
            .http_status_as_error(false)
            .timeout_global(Some(config.timeout))
            .timeout_connect(Some(config.connect_timeout))
            .user_agent(concat!("profctl-debuginfod/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client {
            config,
            agent,
            max_bytes: MAX_BODY_BYTES,
        }
    }

    /// Bound the size of a response body to `bytes` (default [`MAX_BODY_BYTES`]): a larger
    /// body fails with [`FetchError::TooLarge`] and nothing of it is kept.
    pub fn set_max_bytes(&mut self, bytes: u64) {
        self.max_bytes = bytes;
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &DebuginfodConfig {
        &self.config
    }

    /// Path of the cached file for `build_id` if it is present (no network).
    /// Negative cache entries are not reported here.
    pub fn cached(&self, build_id: &[u8], artifact: Artifact) -> Option<PathBuf> {
        if build_id.is_empty() {
            return None;
        }
        let path = self.cache_path(&hex(build_id), artifact);
        match fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() > 0 => Some(path),
            _ => None,
        }
    }

    /// Fetches `artifact` for `build_id` and returns the path of the cached
    /// file.
    ///
    /// Answers from the cache when it can: a cached file is returned at once,
    /// and a fresh negative entry gives [`FetchError::NotFound`] without any
    /// request. Otherwise each configured URL is tried in order until one has
    /// the file. When every server answered 404 a negative entry is written and
    /// `NotFound` returned; when some server failed otherwise, the last such
    /// error is returned and nothing is remembered.
    ///
    /// Blocks, but never for longer than [`DebuginfodConfig::timeout`] in
    /// total (plus local file I/O).
    pub fn fetch(&self, build_id: &[u8], artifact: Artifact) -> Result<PathBuf, FetchError> {
        if build_id.is_empty() {
            return Err(FetchError::EmptyBuildId);
        }
        let deadline = Instant::now() + self.config.timeout;
        let id = hex(build_id);
        let path = self.cache_path(&id, artifact);
        match fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() > 0 => return Ok(path),
            Ok(m) if m.is_file() => {
                let age = m
                    .modified()
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .unwrap_or(Duration::ZERO);
                if age <= self.negative_ttl() {
                    tracing::debug!(build_id = %id, "debuginfod: negative cache hit");
                    return Err(FetchError::NotFound { build_id: id });
                }
            }
            _ => {}
        }

        let mut last_error = None;
        for base in &self.config.urls {
            let url = format!(
                "{}/buildid/{id}/{}",
                base.trim_end_matches('/'),
                artifact.as_str()
            );
            match self.try_url(&url, &path, build_id, deadline) {
                Attempt::Found(p) => {
                    tracing::debug!(%url, path = %p.display(), "debuginfod: fetched");
                    return Ok(p);
                }
                Attempt::Missing => tracing::debug!(%url, "debuginfod: not found"),
                Attempt::Failed(e) => {
                    tracing::debug!(%url, error = %e, "debuginfod: fetch failed");
                    let out_of_time = matches!(e, FetchError::Timeout { .. });
                    last_error = Some(e);
                    if out_of_time {
                        break;
                    }
                }
            }
        }
        match last_error {
            Some(e) => Err(e),
            None => {
                if !self.config.urls.is_empty() {
                    self.write_negative(&path);
                }
                Err(FetchError::NotFound { build_id: id })
            }
        }
    }

    fn cache_path(&self, id: &str, artifact: Artifact) -> PathBuf {
        self.config.cache_dir.join(id).join(artifact.as_str())
    }

    /// elfutils reads the negative-cache lifetime from `<cache>/cache_miss_s`.
    fn negative_ttl(&self) -> Duration {
        fs::read_to_string(self.config.cache_dir.join("cache_miss_s"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(NEGATIVE_CACHE_TTL)
    }

    fn try_url(&self, url: &str, path: &Path, build_id: &[u8], deadline: Instant) -> Attempt {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Attempt::Failed(FetchError::Timeout {
                url: url.to_owned(),
            });
        }
        let response = self
            .agent
            .get(url)
            .config()
            .timeout_global(Some(remaining))
            .timeout_connect(Some(self.config.connect_timeout.min(remaining)))
            .build()
            .call();
        let response = match response {
            Ok(r) => r,
            Err(e) => return Attempt::Failed(request_error(url, e)),
        };
        match response.status().as_u16() {
            200 => {}
            404 => return Attempt::Missing,
            status => {
                return Attempt::Failed(FetchError::Http {
                    url: url.to_owned(),
                    status,
                });
            }
        }
        match self.store(
            url,
            path,
            build_id,
            response.into_body().into_reader(),
            deadline,
        ) {
            Ok(()) => Attempt::Found(path.to_owned()),
            Err(e) => Attempt::Failed(e),
        }
    }

    /// Streams `body` into a temporary file next to `path` (at most the client's byte
    /// bound), checks that it is an ELF file with `build_id`, then renames it into place.
    /// The temporary file is removed on any failure.
    fn store(
        &self,
        url: &str,
        path: &Path,
        build_id: &[u8],
        mut body: impl Read,
        deadline: Instant,
    ) -> Result<(), FetchError> {
        let dir = path.parent().unwrap_or(&self.config.cache_dir);
        let io_err = |p: &Path| {
            let p = p.to_owned();
            move |source| FetchError::Io { path: p, source }
        };
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempfile_in(dir)
            .map_err(io_err(dir))?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut total: u64 = 0;
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(body_error(url, e)),
            };
            if total == 0 && !buf[..n].starts_with(b"\x7fELF") {
                return Err(FetchError::Transfer {
                    url: url.to_owned(),
                    message: "response is not an ELF file".to_owned(),
                });
            }
            total += n as u64;
            if total > self.max_bytes {
                return Err(FetchError::TooLarge {
                    url: url.to_owned(),
                    limit: self.max_bytes,
                });
            }
            tmp.write_all(&buf[..n]).map_err(io_err(tmp.path()))?;
            // ureq enforces the global timeout on every read; this is a
            // belt-and-braces check in case a server trickles data.
            if Instant::now() > deadline {
                return Err(FetchError::Timeout {
                    url: url.to_owned(),
                });
            }
        }
        if total == 0 {
            return Err(FetchError::Transfer {
                url: url.to_owned(),
                message: "empty response body".to_owned(),
            });
        }
        let found = file_build_id(tmp.path());
        if found.as_deref() != Some(build_id) {
            return Err(FetchError::WrongBuildId {
                url: url.to_owned(),
                expected: hex(build_id),
                found: found.as_deref().map_or_else(|| "none".to_owned(), hex),
            });
        }
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(io_err(tmp.path()))?;
        tmp.persist(path).map_err(|e| FetchError::Io {
            path: path.to_owned(),
            source: e.error,
        })?;
        Ok(())
    }

    /// Records a miss: an empty file with mode 000 at the target path, which
    /// both old (mode check) and new (size check) elfutils understand.
    /// Failure to write it only costs a refetch next time, so it is logged.
    fn write_negative(&self, path: &Path) {
        let result = (|| -> io::Result<()> {
            let dir = path.parent().unwrap_or(&self.config.cache_dir);
            fs::create_dir_all(dir)?;
            let tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
            tmp.as_file()
                .set_permissions(fs::Permissions::from_mode(0o000))?;
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        })();
        if let Err(e) = result {
            tracing::debug!(path = %path.display(), error = %e, "debuginfod: cannot write negative cache entry");
        }
    }
}

/// The GNU build-id of the ELF file at `path`, reading only its headers and notes; None when
/// it is not an ELF file or has none.
fn file_build_id(path: &Path) -> Option<Vec<u8>> {
    use object::Object;
    let file = fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let obj = object::File::parse(&cache).ok()?;
    obj.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// Lowercase hex, as the protocol and the cache layout want.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn is_timeout_kind(kind: io::ErrorKind) -> bool {
    matches!(kind, io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)
}

/// Maps an error from sending the request / receiving the headers.
fn request_error(url: &str, e: ureq::Error) -> FetchError {
    let url = url.to_owned();
    match e {
        ureq::Error::Timeout(_) => FetchError::Timeout { url },
        ureq::Error::Io(io) if is_timeout_kind(io.kind()) => FetchError::Timeout { url },
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::AddrNotAvailable
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
                    | io::ErrorKind::NotConnected
            ) =>
        {
            FetchError::Connect {
                url,
                message: io.to_string(),
            }
        }
        e @ (ureq::Error::HostNotFound | ureq::Error::ConnectionFailed) => FetchError::Connect {
            url,
            message: e.to_string(),
        },
        e => FetchError::Transfer {
            url,
            message: e.to_string(),
        },
    }
}

/// Maps an error from reading the response body.
fn body_error(url: &str, e: io::Error) -> FetchError {
    match ureq::Error::from(e) {
        ureq::Error::Timeout(_) => FetchError::Timeout {
            url: url.to_owned(),
        },
        ureq::Error::Io(io) if is_timeout_kind(io.kind()) => FetchError::Timeout {
            url: url.to_owned(),
        },
        e => FetchError::Transfer {
            url: url.to_owned(),
            message: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0xAB, 0x01, 0xff]), "ab01ff");
    }

    #[test]
    fn from_vars_cache_precedence() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(DebuginfodConfig::from_vars(env(&[])), None);
        assert_eq!(
            DebuginfodConfig::from_vars(env(&[("DEBUGINFOD_URLS", "  ")])),
            None
        );
        let c = DebuginfodConfig::from_vars(env(&[
            ("DEBUGINFOD_URLS", "http://a  https://b/"),
            ("HOME", "/home/u"),
        ]))
        .unwrap();
        assert_eq!(c.urls, ["http://a", "https://b/"]);
        assert_eq!(c.cache_dir, Path::new("/home/u/.cache/debuginfod_client"));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        let c = DebuginfodConfig::from_vars(env(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/xdg"),
        ]))
        .unwrap();
        assert_eq!(c.cache_dir, Path::new("/xdg/debuginfod_client"));
        let c = DebuginfodConfig::from_vars(env(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("DEBUGINFOD_CACHE_PATH", "/c"),
        ]))
        .unwrap();
        assert_eq!(c.cache_dir, Path::new("/c"));
    }

    #[test]
    fn empty_build_id_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::new(DebuginfodConfig {
            urls: vec!["http://127.0.0.1:1".into()],
            cache_dir: dir.path().into(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        });
        assert!(matches!(
            client.fetch(&[], Artifact::DebugInfo),
            Err(FetchError::EmptyBuildId)
        ));
        assert_eq!(client.cached(&[], Artifact::DebugInfo), None);
    }
}
