//! CPU priority of the daemon's threads: the drain thread ahead of users' threads, every other
//! thread at the default or below.
//!
//! When every CPU is busy with a user's threads (nice 0), a drain thread at nice 0 waits its
//! turn after each wake-up, and rings overflow. A thread may raise its nice value but not lower
//! it without CAP_SYS_NICE, which the unit does not grant; so the unit starts the daemon at
//! `Nice=-5` and, before any other thread exists, [`init`] keeps one idle thread at that
//! priority to spawn the threads that must run ahead ([`spawn_ahead`]: a thread starts at the
//! nice value of the thread that creates it), then brings the main thread back to nice 0, so
//! that every other thread (API, queries, naming, recordings, their helpers) starts there.

use std::io;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::sys;

/// A spawn to run on the thread kept ahead.
type Job = Box<dyn FnOnce() + Send>;

/// The thread kept at the start's priority, when there is one.
static AHEAD: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();

/// At start, before any other thread: when the process starts below nice 0 (the unit's
/// `Nice=`), keep a thread at that value to spawn threads ahead, and bring the calling
/// thread back to 0. Returns the nice value kept, or None (the process started at 0 or
/// above: everything runs at that).
pub fn init() -> io::Result<Option<i32>> {
    let nice = sys::nice_of_this_thread()?;
    if nice >= 0 {
        return Ok(None);
    }
    let (tx, rx) = channel::<Job>();
    std::thread::Builder::new()
        .name("ahead".into())
        .spawn(move || {
            for job in rx {
                job();
            }
        })?;
    let _ = AHEAD.set(Mutex::new(tx));
    sys::set_nice_for_this_thread(0)?;
    Ok(Some(nice))
}

/// Spawn thread `name` running `f` ahead of users' threads: from the thread [`init`] kept,
/// at the unit's nice value; without one, as any thread (at the caller's).
pub fn spawn_ahead<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let builder = std::thread::Builder::new().name(name.into());
    let Some(ahead) = AHEAD.get() else {
        return builder.spawn(f);
    };
    let (tx, rx) = channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(builder.spawn(f));
    });
    ahead
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(job)
        .map_err(|_| io::Error::other("the thread kept ahead is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("the thread kept ahead did not answer"))?
}
