//! When a recording ends: told to stop, its duration elapsed, the command it ran exited, or
//! the process it follows is gone.

use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use tracing::info;

use crate::launch::Launched;

/// Resolves when the recording ends: `stop` resolves, `duration` elapses, `child` (the command
/// launched for the recording) exits, or process `target_pid` is gone. Returns the command's
/// exit status when its exit ended the recording.
pub(crate) async fn recording_ends(
    stop: impl Future<Output = ()>,
    duration: Option<Duration>,
    child: Option<&mut Launched>,
    target_pid: Option<u32>,
) -> Option<ExitStatus> {
    let child_exit = async {
        match child {
            Some(child) => child.wait().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = stop => None,
        () = sleep_or_forever(duration) => None,
        status = child_exit => status,
        () = process_gone(target_pid) => {
            info!("the recorded process exited; recording ends");
            None
        }
    }
}

/// Resolves once process `pid` has exited (gone, a zombie, or its pid reused: its start time
/// changed), checked every 250 ms; never for None.
async fn process_gone(pid: Option<u32>) {
    let Some(pid) = pid else {
        return std::future::pending().await;
    };
    // (state, start time) from /proc/PID/stat; the name before them may hold spaces.
    let read = || -> Option<(char, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let start = fields.nth(18)?.parse().ok()?;
        Some((state, start))
    };
    let Some((_, started)) = read() else {
        return;
    };
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match read() {
            Some((state, start)) if start == started && !matches!(state, 'Z' | 'X') => {}
            _ => return,
        }
    }
}

async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
