//! Closing a window: its raw stacks, read against the process model at each stack's time,
//! become a self-contained [`NormalizedWindow`] that can be symbolized off the sampling thread.
//!
//! Runs on the thread that owns the process model, once per distinct stack per window.

use std::collections::HashMap;

use procmap::{FileId, ProcessTable};
use profile::{
    Frame, LiveMapping, NormalizedStack, NormalizedWindow, RawStacks, ThreadLabels, WindowFile,
    WindowSeconds,
};
use rustc_hash::FxBuildHasher;

use procmap::PinnedFiles;

/// Most ancestors a stack's labels carry (a deeper chain is cut: its oldest ancestors are not
/// named, and selecting their descendants misses it).
const MAX_ANCESTORS: usize = 32;

/// Normalize the stacks of the window `start..end`.
pub(crate) fn normalize(
    stacks: &RawStacks,
    start: u64,
    end: u64,
    processes: &ProcessTable,
    pinned: &PinnedFiles,
) -> NormalizedWindow {
    let mut window = NormalizedWindow {
        start,
        end,
        ..NormalizedWindow::default()
    };
    let mut files: HashMap<FileId, u32, FxBuildHasher> = HashMap::default();
    let mut threads: HashMap<ThreadLabels, u32> = HashMap::new();
    // Per-second counts by the raw stacks' index, handed on in the window's stack order.
    let by_index = stacks.seconds();
    let mut seconds = by_index.as_ref().map(|s| WindowSeconds::new(s.start));
    for (raw, stats) in stacks.iter() {
        if let (Some(out), Some(all)) = (seconds.as_mut(), by_index.as_ref()) {
            out.push(all.of(stats.index()));
        }
        let pid = raw.pid;
        let time = stats.first_time;
        let owner = processes.owner(pid, time);
        let labels = ThreadLabels {
            pid,
            tid: raw.tid,
            process_start: processes.process_key(pid, time).map_or(0, |k| k.start_time),
            comm: processes
                .thread_name(pid, raw.tid, time)
                .map(str::to_string),
            uid: owner.map(|o| o.uid),
            real_uid: owner.map(|o| o.real_uid),
            ancestors: processes.ancestors(pid, time, MAX_ANCESTORS),
        };
        let next = threads.len() as u32;
        let thread = *threads.entry(labels).or_insert(next);
        let frames_start = window.frames.len() as u32;
        window
            .frames
            .extend(raw.stack.kernel.iter().map(|&a| Frame::Kernel(a)));
        for &addr in raw.stack.user {
            let frame = match processes.find_mapping(pid, addr, time) {
                None => Frame::Unmapped(addr),
                Some(m) => {
                    let file = processes.files().get(m.file);
                    if file.is_pseudo() && file.path != "[vdso]" {
                        Frame::Anonymous(addr)
                    } else {
                        let next = window.files.len() as u32;
                        let index = *files.entry(m.file).or_insert_with(|| {
                            window.files.push(WindowFile {
                                id: m.file.0,
                                path: file.path.clone(),
                                build_id: file.build_id.clone(),
                                live: (!file.is_pseudo()).then_some(LiveMapping {
                                    pid,
                                    start: m.start,
                                    end: m.end,
                                }),
                                pinned: pinned.handle(m.file),
                            });
                            next
                        });
                        Frame::File {
                            file: index,
                            offset: m.file_offset(addr),
                        }
                    }
                }
            };
            window.frames.push(frame);
        }
        if raw.stack.user_end.is_unwound() {
            let binary = raw
                .stack
                .user
                .last()
                .and_then(|&addr| processes.find_mapping(pid, addr, time))
                .map_or("[unknown]", |m| processes.files().get(m.file).basename());
            window.quality.add(binary, raw.stack.user_end, stats.count);
        }
        window.stacks.push(NormalizedStack {
            thread,
            frames_start,
            kernel_len: raw.stack.kernel.len() as u32,
            user_len: raw.stack.user.len() as u32,
            user_end: raw.stack.user_end,
            count: stats.count,
            period: stats.period,
            weight: raw.weight,
        });
    }
    window.seconds = seconds;
    window.threads = vec![ThreadLabels::default(); threads.len()];
    for (labels, index) in threads {
        window.threads[index as usize] = labels;
    }
    window
}
