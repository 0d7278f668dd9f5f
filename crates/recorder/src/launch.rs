//! Starting the command to profile, held after fork until its events are open.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use tokio::sync::oneshot;
use tracing::debug;

use crate::error::RecordError;
use crate::sys::{self, HeldChild};

/// A child process started for the recording.
pub struct Launched {
    held: HeldChild,
    program: String,
    exit: Option<oneshot::Receiver<Option<ExitStatus>>>,
    exited: bool,
}

/// Find `program` like a shell would: as given when it has a slash, else along PATH.
fn find_program(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn c_string(s: &OsStr) -> Result<CString, std::io::Error> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "argument contains a NUL byte",
        )
    })
}

impl Launched {
    /// Fork and hold the child before exec; [`Launched::release`] lets it exec.
    pub fn spawn(argv: &[OsString]) -> Result<Launched, RecordError> {
        let program = argv.first().ok_or(RecordError::EmptyCommand)?;
        let name = program.to_string_lossy().into_owned();
        let launch_err = |source| RecordError::Launch {
            program: name.clone(),
            source,
        };
        let path = find_program(program).ok_or_else(|| {
            launch_err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "command not found (searched PATH)",
            ))
        })?;
        let c_path = c_string(path.as_os_str()).map_err(launch_err)?;
        let c_argv = argv
            .iter()
            .map(|a| c_string(a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(launch_err)?;
        let held = sys::fork_held(&c_path, &c_argv).map_err(launch_err)?;
        debug!(pid = held.pid, program = %path.display(), "command forked, held before exec");
        Ok(Launched {
            held,
            program: name,
            exit: None,
            exited: false,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.held.pid
    }

    /// Let the child exec, and start watching for its exit.
    pub fn release(&mut self) -> Result<(), RecordError> {
        let pid = self.held.pid;
        let (tx, rx) = oneshot::channel();
        self.exit = Some(rx);
        let result = self.held.release();
        // Reap the child whatever happens, so it never lingers as a zombie.
        std::thread::Builder::new()
            .name("profctl-wait".into())
            .spawn(move || {
                let _ = tx.send(sys::wait_pid(pid).ok());
            })
            .map_err(|source| RecordError::Launch {
                program: self.program.clone(),
                source,
            })?;
        result.map_err(|source| RecordError::Launch {
            program: self.program.clone(),
            source,
        })
    }

    /// Wait for the child to exit.
    pub async fn wait(&mut self) -> Option<ExitStatus> {
        let status = match self.exit.as_mut() {
            Some(rx) => rx.await.ok().flatten(),
            None => std::future::pending().await,
        };
        self.exited = true;
        status
    }

    /// Ask the child to stop (SIGTERM), when the recording ends before it does.
    pub fn terminate(&mut self) {
        if !self.exited {
            let _ = sys::kill(self.held.pid, libc::SIGTERM);
        }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if self.held.is_held() {
            // Never released (the events failed to open): closing the gate makes it exit.
            let pid = self.held.pid;
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::wait_pid(pid);
        }
    }
}
