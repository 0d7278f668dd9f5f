//! SIGHUP: read the configuration again and apply what can change while running.
//!
//! The file is read, parsed and checked as at start (the same flags applied over it). An
//! invalid file is logged with its file, line and what was expected, and the configuration
//! in effect stays. Otherwise, what changed is applied at once and logged, key by key:
//!
//! | applied live | needs a restart (logged, the running value kept) |
//! | --- | --- |
//! | `sampling.frequency` (up to what the ring buffers opened at start hold), `storage.max_age`, `storage.max_bytes`, `storage.max_share_per_uid`, `api.socket_group`, `api.max_range`, `api.max_response_bytes`, `api.request_timeout`, `access.admin_group`, `budget.*`, `log.level` | `sampling.slice`, `kernel`, `call_graph`, `stack_bytes`, `naming_queue`, `off_cpu`, `storage.state_dir`, `storage.cache_dir`, `api.socket`, `api.max_concurrent_queries`, and any other key |
//!
//! systemd is told `RELOADING=1` with `MONOTONIC_USEC=`, then `READY=1` (with a `STATUS=`
//! saying how the reload went).

use std::sync::Arc;

use tracing::{error, info, warn};

use crate::access::{resolve_group, set_socket_group, GroupId};
use crate::config::{Config, ConfigError};
use crate::logging::SetLogFilter;
use crate::options::target_frequency;
use crate::state::{unix_now_ns, Shared};

/// What a reload needs besides the shared state.
pub struct Reloader {
    /// Reads the configuration again, flags applied, as at start.
    pub load: Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>,
    /// Changes the log filter.
    pub set_log_filter: SetLogFilter,
    /// The highest frequency the ring buffers opened at start hold (see
    /// `options::ring_frequency_limit`).
    pub ring_limit: u64,
    /// The admin group (read by the API).
    pub admin_gid: Arc<GroupId>,
}

/// A key that changed, with its old and new values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// `section.key`.
    pub key: &'static str,
    /// Old value, as the configuration's debug form.
    pub from: String,
    /// New value.
    pub to: String,
}

/// The keys that differ between `old` and `new`: (applied live, needing a restart). Keys this
/// module does not know (added later) are compared as a whole and reported as `other keys`.
pub fn changes(old: &Config, new: &Config) -> (Vec<Change>, Vec<Change>) {
    let mut live = Vec::new();
    let mut restart = Vec::new();
    macro_rules! key {
        ($list:ident, $name:literal, $($path:tt)+) => {
            if old.$($path)+ != new.$($path)+ {
                $list.push(Change {
                    key: $name,
                    from: format!("{:?}", old.$($path)+),
                    to: format!("{:?}", new.$($path)+),
                });
            }
        };
    }
    key!(live, "sampling.frequency", sampling.frequency.0);
    key!(live, "storage.max_age", storage.max_age.0);
    key!(live, "storage.max_bytes", storage.max_bytes.0);
    key!(
        live,
        "storage.max_share_per_uid",
        storage.max_share_per_uid.0
    );
    key!(live, "api.socket_group", api.socket_group);
    key!(live, "api.max_range", api.max_range.0);
    key!(live, "api.max_response_bytes", api.max_response_bytes.0);
    key!(live, "api.request_timeout", api.request_timeout.0);
    key!(live, "access.admin_group", access.admin_group);
    key!(live, "budget.max_cpu_percent", budget.max_cpu_percent.0);
    key!(live, "budget.max_resident", budget.max_resident.0);
    key!(live, "budget.min_frequency", budget.min_frequency.0);
    key!(live, "budget.window", budget.window.0);
    key!(live, "log.level", log.level.0);
    key!(live, "scrape.layout_labels", scrape.layout_labels);
    key!(restart, "sampling.slice", sampling.slice.0);
    key!(restart, "sampling.kernel", sampling.kernel);
    key!(restart, "sampling.call_graph", sampling.call_graph);
    key!(restart, "sampling.stack_bytes", sampling.stack_bytes.0);
    key!(restart, "sampling.naming_queue", sampling.naming_queue.0);
    key!(restart, "sampling.off_cpu", sampling.off_cpu);
    key!(restart, "storage.state_dir", storage.state_dir);
    key!(restart, "storage.cache_dir", storage.cache_dir);
    key!(restart, "api.socket", api.socket);
    key!(
        restart,
        "api.max_concurrent_queries",
        api.max_concurrent_queries.0
    );
    // Whatever else differs (keys added since): needs a restart.
    if &with_known_keys(new, old) != old {
        restart.push(Change {
            key: "other keys",
            from: String::new(),
            to: String::new(),
        });
    }
    (live, restart)
}

/// `from` with every key [`changes`] knows set to `to`'s values.
fn with_known_keys(from: &Config, to: &Config) -> Config {
    let mut c = from.clone();
    c.sampling.frequency = to.sampling.frequency;
    c.sampling.slice = to.sampling.slice;
    c.sampling.kernel = to.sampling.kernel;
    c.sampling.call_graph = to.sampling.call_graph;
    c.sampling.stack_bytes = to.sampling.stack_bytes;
    c.sampling.naming_queue = to.sampling.naming_queue;
    c.sampling.off_cpu = to.sampling.off_cpu;
    c.storage = to.storage.clone();
    c.api.socket = to.api.socket.clone();
    c.api.socket_group = to.api.socket_group.clone();
    c.api.max_range = to.api.max_range;
    c.api.max_response_bytes = to.api.max_response_bytes;
    c.api.request_timeout = to.api.request_timeout;
    c.api.max_concurrent_queries = to.api.max_concurrent_queries;
    c.access.admin_group = to.access.admin_group.clone();
    c.budget = to.budget.clone();
    c.log = to.log.clone();
    c.scrape.layout_labels = to.scrape.layout_labels;
    c
}

/// `new` with the keys that need a restart set back to what `running` runs with: the
/// configuration in effect after a reload.
fn in_effect(new: &Config, running: &Config) -> Config {
    let mut c = running.clone();
    c.sampling.frequency = new.sampling.frequency;
    c.storage.max_age = new.storage.max_age;
    c.storage.max_bytes = new.storage.max_bytes;
    c.storage.max_share_per_uid = new.storage.max_share_per_uid;
    c.api.socket_group = new.api.socket_group.clone();
    c.api.max_range = new.api.max_range;
    c.api.max_response_bytes = new.api.max_response_bytes;
    c.scrape.layout_labels = new.scrape.layout_labels;
    c.api.request_timeout = new.api.request_timeout;
    c.access.admin_group = new.access.admin_group.clone();
    c.budget = new.budget.clone();
    c.log = new.log.clone();
    c
}

/// Reload the configuration (on SIGHUP); see the module's documentation.
pub fn reload(reloader: &Reloader, shared: &Shared) {
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Reloading,
        monotonic_usec(),
        sd_notify::NotifyState::Status("reloading the configuration"),
    ]);
    let status = match apply(reloader, shared) {
        Ok(()) => "sampling".to_string(),
        Err(err) => {
            error!("SIGHUP: the configuration was not reloaded: {err}; the one in effect stays");
            format!("sampling; the last reload failed: {err}")
        }
    };
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]);
}

fn monotonic_usec() -> sd_notify::NotifyState<'static> {
    sd_notify::NotifyState::monotonic_usec_now().unwrap_or(sd_notify::NotifyState::MonotonicUsec(0))
}

/// Read, check and apply the new configuration.
fn apply(reloader: &Reloader, shared: &Shared) -> Result<(), ConfigError> {
    let new = (reloader.load)()?;
    let old = shared.live();
    // Groups are resolved first: a group that does not exist refuses the whole reload.
    let invalid = |key: &str, err: anyhow::Error| ConfigError::Invalid {
        origin: key.to_string(),
        message: format!("{err:#}"),
    };
    let admin_gid = new
        .access
        .admin_group
        .as_deref()
        .map(resolve_group)
        .transpose()
        .map_err(|e| invalid("access.admin_group", e))?;
    let socket_gid = new
        .api
        .socket_group
        .as_deref()
        .map(resolve_group)
        .transpose()
        .map_err(|e| invalid("api.socket_group", e))?;
    let (live, restart) = changes(&old, &new);
    if live.is_empty() && restart.is_empty() {
        info!("SIGHUP: the configuration is unchanged");
        return Ok(());
    }
    for c in &restart {
        if c.key == "other keys" {
            warn!("SIGHUP: other keys changed: they take effect after a restart");
        } else {
            warn!(
                "SIGHUP: {} changed from {} to {}: this takes effect after a restart",
                c.key, c.from, c.to
            );
        }
    }
    let effective = in_effect(&new, &old);
    if old.api.socket_group != new.api.socket_group {
        if let Err(err) = set_socket_group(&old.api.socket, socket_gid) {
            return Err(invalid("api.socket_group", err));
        }
    }
    if old.storage.max_age != new.storage.max_age || old.storage.max_bytes != new.storage.max_bytes
    {
        shared
            .store
            .set_retention(new.storage.max_age.0, new.storage.max_bytes.0);
        shared.store.apply_retention(unix_now_ns());
    }
    shared
        .store
        .set_share_per_uid(new.storage.max_share_per_uid.0);
    reloader.admin_gid.set(admin_gid);
    if old.log.level != new.log.level {
        match std::env::var("PROFILERD_LOG") {
            Ok(env) if !env.is_empty() => {
                warn!("SIGHUP: log.level is not applied: PROFILERD_LOG ({env}) takes its place")
            }
            _ => {
                if let Err(err) = (reloader.set_log_filter)(&new.log.level.0) {
                    warn!(%err, "SIGHUP: cannot change the log filter");
                }
            }
        }
    }
    if old.sampling.frequency != new.sampling.frequency {
        let target = target_frequency(&new, reloader.ring_limit);
        shared.budget.set_target_frequency(target);
        // A new frequency applies at once (the budget lowers it again if it costs too much);
        // other reloads leave what the budget set.
        shared.rate.request(target);
    }
    shared.set_live(effective);
    for c in &live {
        info!("SIGHUP: {} changed from {} to {}", c.key, c.from, c.to);
    }
    info!(
        applied = live.len(),
        need_restart = restart.len(),
        "SIGHUP: configuration reloaded"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("/test.toml")).unwrap()
    }

    #[test]
    fn changes_are_sorted_into_live_and_restart() {
        let old = Config::default();
        let new = parse(
            "[sampling]\nfrequency = 49\nslice = \"5s\"\n[storage]\nmax_age = \"1d\"\n[budget]\nmax_cpu_percent = 1.5\n[log]\nlevel = \"debug\"\n",
        );
        let (live, restart) = changes(&old, &new);
        let keys = |v: &[Change]| v.iter().map(|c| c.key).collect::<Vec<_>>();
        assert_eq!(
            keys(&live),
            [
                "sampling.frequency",
                "storage.max_age",
                "budget.max_cpu_percent",
                "log.level"
            ]
        );
        assert_eq!(keys(&restart), ["sampling.slice"]);
        assert_eq!(live[0].from, "99");
        assert_eq!(live[0].to, "49");
        // In effect: the live keys are new, the others stay.
        let effective = in_effect(&new, &old);
        assert_eq!(effective.sampling.frequency.0, 49);
        assert_eq!(effective.sampling.slice, old.sampling.slice);
        assert_eq!(changes(&old, &old), (vec![], vec![]));
    }

    #[test]
    fn every_key_is_known() {
        // A key changed everywhere: every difference is named, none falls to "other keys".
        let new = parse(
            r#"
[sampling]
frequency = 1
slice = "2s"
kernel = false
call_graph = "fp"
stack_bytes = 8
naming_queue = 1
[storage]
state_dir = "/a"
cache_dir = "/b"
max_age = "1h"
max_bytes = 5
[api]
socket = "/c"
socket_group = "g"
max_range = "2h"
max_response_bytes = 6
request_timeout = "3s"
max_concurrent_queries = 9
[access]
admin_group = "h"
[budget]
max_cpu_percent = 7
max_resident = 8
min_frequency = 1
window = "4s"
[log]
level = "warn"
"#,
        );
        let (live, restart) = changes(&Config::default(), &new);
        assert!(restart.iter().all(|c| c.key != "other keys"), "{restart:?}");
        assert_eq!(live.len() + restart.len(), 22, "{live:?} {restart:?}");
        assert_eq!(in_effect(&new, &new), new);
    }
}
