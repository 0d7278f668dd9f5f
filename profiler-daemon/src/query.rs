//! Queries over the history: folded stacks for a time range, filtered by process, command
//! name and user, and by what the asking user may see.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

use crate::slice::{Slice, SliceStack};
use crate::store::Store;

/// What a query selects.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this process.
    pub pid: Option<u32>,
    /// Only threads with this command name.
    pub comm: Option<String>,
    /// Only processes of this user.
    pub uid: Option<u32>,
}

/// What the asking user may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Everything (root, the admin group).
    All,
    /// Only stacks of processes of this uid, without kernel frames.
    OwnOnly(u32),
}

/// Why a query was not answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The answer would be larger than allowed.
    #[error(
        "the answer is larger than {0} bytes: narrow the time range or filter by pid, comm or uid"
    )]
    TooLarge(u64),
    /// The query took longer than allowed.
    #[error("the query took longer than {0:?}: narrow the time range")]
    TooSlow(std::time::Duration),
}

/// A query's answer.
#[derive(Debug, Default)]
pub struct Folded {
    /// Folded lines (`comm;outermost;…;leaf count`), sorted, each ending in a newline.
    pub text: String,
    /// Samples in it.
    pub samples: u64,
    /// Slices read.
    pub slices: u64,
    /// Slices skipped as corrupt or truncated.
    pub skipped: u64,
}

impl Filter {
    fn admits(&self, s: &SliceStack, visibility: Visibility) -> bool {
        if let Visibility::OwnOnly(uid) = visibility {
            if s.uid != Some(uid) {
                return false;
            }
        }
        self.pid.is_none_or(|pid| s.pid == pid)
            && self.uid.is_none_or(|uid| s.uid == Some(uid))
            && self
                .comm
                .as_deref()
                .is_none_or(|comm| s.comm.as_deref() == Some(comm))
    }
}

/// The root frame of a stack: its command name (as profctl record writes it).
fn comm_of(s: &SliceStack) -> String {
    match &s.comm {
        Some(c) => profile::sanitize_frame(c).into_owned(),
        None if s.pid == 0 => "swapper".to_string(),
        None => format!("[pid {}]", s.pid),
    }
}

/// Add the stacks of `slice` that `filter` and `visibility` admit to `lines`.
pub fn add_slice(
    lines: &mut HashMap<String, u64>,
    slice: &Slice,
    filter: &Filter,
    visibility: Visibility,
) -> u64 {
    let mut samples = 0;
    let mut key = String::new();
    // Each name sanitized once per slice, not once per frame.
    let names: Vec<std::borrow::Cow<str>> = slice
        .names
        .iter()
        .map(|n| profile::sanitize_frame(n))
        .collect();
    for s in &slice.stacks {
        if !filter.admits(s, visibility) {
            continue;
        }
        let mut frames = &s.frames[..];
        if visibility != Visibility::All {
            frames = &frames[..frames.len() - (s.kernel_frames as usize).min(frames.len())];
        }
        key.clear();
        key.push_str(&comm_of(s));
        for &f in frames {
            key.push(';');
            key.push_str(names.get(f as usize).map_or("[unknown]", |n| n));
        }
        if frames.is_empty() {
            key.push_str(";[unknown]");
        }
        match lines.get_mut(key.as_str()) {
            Some(count) => *count += s.count,
            None => {
                lines.insert(key.clone(), s.count);
            }
        }
        samples += s.count;
    }
    samples
}

/// What one query may cost.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Largest answer.
    pub max_bytes: u64,
    /// When the query must have ended.
    pub deadline: Instant,
    /// The time allowed (for the message).
    pub timeout: std::time::Duration,
}

/// Folded stacks of `[since_ns, until_ns)` from `store`, within `bounds`.
pub fn folded(
    store: &Store,
    since_ns: u64,
    until_ns: u64,
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
) -> Result<Folded, QueryError> {
    let Bounds {
        max_bytes,
        deadline,
        timeout,
    } = *bounds;
    let selection = store.select(since_ns, until_ns);
    let mut lines: HashMap<String, u64> = HashMap::new();
    let mut key_bytes: u64 = 0;
    let mut out = Folded::default();
    for meta in &selection.slices {
        if Instant::now() > deadline {
            return Err(QueryError::TooSlow(timeout));
        }
        let slice = match store.read_in(meta, since_ns, until_ns) {
            Ok(Some(slice)) => slice,
            Ok(None) => continue,
            Err(_) => {
                out.skipped += 1;
                continue;
            }
        };
        out.slices += 1;
        let before = lines.len();
        out.samples += add_slice(&mut lines, &slice, filter, visibility);
        if lines.len() != before {
            key_bytes = lines.keys().map(|k| k.len() as u64 + 22).sum();
            if key_bytes > max_bytes {
                return Err(QueryError::TooLarge(max_bytes));
            }
        }
    }
    let mut sorted: Vec<(String, u64)> = lines.into_iter().collect();
    sorted.sort_unstable();
    out.text.reserve(key_bytes as usize);
    for (line, count) in sorted {
        let _ = writeln!(out.text, "{line} {count}");
    }
    if out.text.len() as u64 > max_bytes {
        return Err(QueryError::TooLarge(max_bytes));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::tests::example;

    #[test]
    fn visibility_and_filters() {
        let slice = example(0);
        let mut all = HashMap::new();
        assert_eq!(
            add_slice(&mut all, &slice, &Filter::default(), Visibility::All),
            38
        );
        assert_eq!(all["split;main;work;hot_a"], 30);
        assert_eq!(all["[pid 200];[truncated];main;entry_SYSCALL_64;do_sys"], 7);
        assert_eq!(all["init;main;main"], 1);

        let mut own = HashMap::new();
        let n = add_slice(&mut own, &slice, &Filter::default(), Visibility::OwnOnly(0));
        assert_eq!(n, 1);
        // Never a kernel frame for a user who is not an admin.
        assert_eq!(own.keys().collect::<Vec<_>>(), ["init;main"]);

        let mut by_comm = HashMap::new();
        let f = Filter {
            comm: Some("split".into()),
            ..Filter::default()
        };
        assert_eq!(add_slice(&mut by_comm, &slice, &f, Visibility::All), 30);
        let f = Filter {
            pid: Some(200),
            ..Filter::default()
        };
        assert_eq!(
            add_slice(&mut HashMap::new(), &slice, &f, Visibility::All),
            7
        );
        // Another user's uid filter never widens what a user sees.
        let f = Filter {
            uid: Some(1000),
            ..Filter::default()
        };
        assert_eq!(
            add_slice(&mut HashMap::new(), &slice, &f, Visibility::OwnOnly(0)),
            0
        );
    }
}
