//! One stack's user frames, named within a window at a bounded cost: an address already
//! named in the window takes the ids it got then (a name is sanitized and interned once per
//! window, not once per frame: a 4 KiB name in a 1000-deep stack would otherwise be hashed
//! a thousand times per sample), and a stack keeps at most [`super::Limits::stack_frames`]
//! frames, inlined ones included, the innermost first (the rest is cut, marked
//! `[truncated]`), so that naming a window costs at most that many frames per sample.

use std::collections::HashMap;
use std::time::Instant;

use profile::{Frame, FrameId, NormalizedWindow, Profile, ThreadLabels};
use rustc_hash::FxBuildHasher;

use super::names::SourceLine;
use super::{LocatedFrame, LocatedLine, SymbolService};

/// Frame ids of the user addresses named in the window so far, by (window file, offset).
#[derive(Default)]
pub(super) struct WindowNames {
    /// (start in `ids`, count, named).
    at: HashMap<(u32, u64), (u32, u32, bool), FxBuildHasher>,
    ids: Vec<FrameId>,
}

/// What naming a stack's user frames found.
pub(super) struct UserFrames {
    /// Frames that are not names.
    pub unnamed: u64,
    /// Whether the stack was cut at [`super::Limits::stack_frames`].
    pub capped: bool,
}

impl SymbolService {
    /// Push the names of `user` (a stack's user frames, innermost first) onto `frames`
    /// (which may hold its kernel frames already), at most `stack_frames` in all; with
    /// `located`, also each frame with its source lines.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_user_stack(
        &mut self,
        profile: &mut Profile,
        window: &NormalizedWindow,
        thread: &ThreadLabels,
        user: &[Frame],
        now: Instant,
        frames: &mut Vec<FrameId>,
        mut located: Option<(&mut Vec<LocatedFrame>, &mut Vec<SourceLine>)>,
        known: &mut WindowNames,
    ) -> UserFrames {
        let max = self.stack_frames;
        let mut out = UserFrames {
            unnamed: 0,
            capped: false,
        };
        for &frame in user {
            if frames.len() >= max {
                out.capped = true;
                break;
            }
            let key = match frame {
                Frame::File { file, offset } if located.is_none() => Some((file, offset)),
                _ => None,
            };
            if let Some(&(start, count, named)) = key.and_then(|k| known.at.get(&k)) {
                frames.extend_from_slice(&known.ids[start as usize..(start + count) as usize]);
                out.unnamed += !named as u64;
                continue;
            }
            let before = frames.len();
            let sources = located.as_mut().map(|(_, s)| &mut **s);
            let named = self.push_user_frames(profile, window, thread, frame, now, frames, sources);
            out.unnamed += !named as u64;
            if let Some(key) = key {
                let start = known.ids.len() as u32;
                known.ids.extend_from_slice(&frames[before..]);
                let count = (frames.len() - before) as u32;
                known.at.insert(key, (start, count, named));
            }
            if let Some((located, sources)) = located.as_mut() {
                let lines = self.located_lines(profile, &frames[before..], sources);
                located.push(LocatedFrame {
                    site: Some(frame),
                    lines,
                });
            }
        }
        if frames.len() > max {
            // The last address's inlined functions went past the cap: its outer ones go.
            let excess = frames.len() - max;
            frames.truncate(max);
            if let Some(last) = located.as_mut().and_then(|(l, _)| l.last_mut()) {
                last.lines.truncate(last.lines.len().saturating_sub(excess));
            }
            out.capped = true;
        }
        out
    }

    /// The lines of one located frame: `ids` (its functions, innermost first) with
    /// `sources` (their files and lines, in the same order).
    fn located_lines(
        &self,
        profile: &Profile,
        ids: &[FrameId],
        sources: &[SourceLine],
    ) -> Vec<LocatedLine> {
        ids.iter()
            .enumerate()
            .map(|(i, &id)| {
                let (file, line) = sources.get(i).cloned().unwrap_or((None, 0));
                let name = profile.name(id);
                // The name alone, without the `(file:line)` lines put in it.
                let function = match (&file, self.lines) {
                    (Some(f), true) if line > 0 => {
                        name.strip_suffix(&format!(" ({f}:{line})")).unwrap_or(name)
                    }
                    _ => name,
                };
                LocatedLine {
                    name: id,
                    function: function.into(),
                    file,
                    line,
                }
            })
            .collect()
    }
}
