//! Times profctl and profilerd exchange (issue 35 item 6): an instant goes out in a form that
//! cannot be read as a time ago, and a time before 1970 is refused by both. It went out as a
//! negative number of seconds, which profilerd reads as seconds before now: `profctl
//! flamegraph --since '1969-12-31 23:00'` answered for the last hour.

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{unix_now, Daemon};
use crate::daemon_reload::socket_get;

#[test]
fn daemon_refuses_times_before_1970_and_keeps_older_clients_forms() {
    let _guard = sampling_shared();
    let dir = scratch();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let socket = daemon.socket.to_str().unwrap().to_string();

    // profctl: refused with the time named, nothing written.
    let folded = dir.path().join("old.folded");
    let mut cmd = Command::new(profctl());
    cmd.args([
        "--socket",
        &socket,
        "flamegraph",
        "--since",
        "1969-12-31 23:00",
    ])
    .arg("--folded")
    .arg(&folded)
    .current_dir(dir.path())
    .env("TZ", "UTC");
    let run = Spawned::spawn(cmd, "profctl").wait_or_panic(Duration::from_secs(60));
    assert!(
        !run.status.success() && !folded.exists(),
        "a range from 1969 was answered: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("1969-12-31 23:00:00")
            && run.stderr.contains("before 1970-01-01 00:00:00 UTC"),
        "stderr: {}",
        run.stderr
    );

    // profilerd: a 400 naming the parameter.
    for (query, named) in [
        ("since=%40-3600", "since: \"@-3600\" is before 1970-01-01"),
        (
            "since=%400&until=%40-0.5",
            "until: \"@-0.5\" is before 1970-01-01",
        ),
    ] {
        let (status, body) = socket_get(&daemon.socket, &format!("/v1/folded?{query}"));
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(named), "{query}: {body}");
    }

    // What older clients send keeps its meaning: seconds, negative: seconds ago; and a
    // duration ago.
    let now = unix_now();
    for path in [
        "/v1/folded?since=-60".to_string(),
        format!("/v1/folded?since={:.3}&until={:.3}", now - 60.0, now),
        format!("/v1/pprof?since=%40{:.3}", now - 60.0),
        "/v1/timeline?since=-10m&bucket=60".to_string(),
    ] {
        let (status, body) = socket_get(&daemon.socket, &path);
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    }
    daemon.stop();
}
