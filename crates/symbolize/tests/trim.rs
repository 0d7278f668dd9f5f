//! `SymbolService::trim` lets go of what no window used since the last trim, and only that:
//! the pages of a file whose addresses keep being named stay resident, those of a file no
//! window used since go, and the names of both stay cached. In its own binary: it reads
//! this process's smaps, so no other test may map the same files meanwhile.

mod common;

use std::path::{Path, PathBuf};

use profile::{Frame, NormalizedStack, NormalizedWindow, StackEnd, ThreadLabels, WindowFile};
use symbolize::service::ServiceOptions;
use symbolize::{DebugSearch, SymbolService};

/// Code offsets of `path`'s functions (by its symbol table), every `step`-th.
fn function_offsets(path: &Path, step: usize) -> Vec<u64> {
    let segments = common::load_segments(path);
    common::nm_code(path, &[])
        .into_iter()
        .step_by(step)
        .filter_map(|sym| {
            let &(off, vaddr, _, _) = segments
                .iter()
                .find(|&&(_, v, filesz, _)| sym.addr >= v && sym.addr < v + filesz)?;
            Some(sym.addr - vaddr + off + 1)
        })
        .collect()
}

/// A window of one single-frame stack per offset of `file` (window file `id`).
fn window(id: u32, path: &Path, offsets: &[u64]) -> NormalizedWindow {
    let mut w = NormalizedWindow {
        files: vec![WindowFile {
            id,
            path: path.display().to_string(),
            build_id: None,
            live: None,
            pinned: None,
        }],
        ..NormalizedWindow::default()
    };
    for (i, &offset) in offsets.iter().enumerate() {
        w.threads.push(ThreadLabels {
            pid: std::process::id(),
            tid: i as u32,
            comm: Some(format!("t{i}")),
            ..ThreadLabels::default()
        });
        w.stacks.push(NormalizedStack {
            thread: i as u32,
            frames_start: i as u32,
            kernel_len: 0,
            user_len: 1,
            user_end: StackEnd::FramePointer,
            count: 1,
            period: 1,
            weight: Default::default(),
        });
        w.frames.push(Frame::File { file: 0, offset });
    }
    w
}

#[test]
fn a_trim_keeps_what_was_used_since_the_last_and_every_name() {
    // This test binary has DWARF of its own: two copies of it are two files to name.
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (busy, idle): (PathBuf, PathBuf) = (dir.path().join("busy"), dir.path().join("idle"));
    std::fs::copy(&exe, &busy).unwrap();
    std::fs::copy(&exe, &idle).unwrap();
    let offsets = function_offsets(&exe, 11);
    assert!(offsets.len() > 200, "only {} functions", offsets.len());
    let (first, later) = offsets.split_at(offsets.len() / 2);
    let options = ServiceOptions {
        debug_search: DebugSearch::default(),
        ..ServiceOptions::default()
    };
    let mut service = SymbolService::new(options, None);
    let (busy_w, idle_w) = (window(1, &busy, first), window(2, &idle, first));
    let unnamed = service.symbolize(&busy_w).1.unnamed;
    service.symbolize(&idle_w);
    service.trim();
    // The busy process runs on: new addresses of it are named; the idle one's are not.
    service.symbolize(&window(1, &busy, later));
    let (busy_read, idle_read) = (
        common::shared_resident_kb(&busy),
        common::shared_resident_kb(&idle),
    );
    let lookups = service.sizes().lookups;
    service.trim();
    let (busy_kept, idle_kept) = (
        common::shared_resident_kb(&busy),
        common::shared_resident_kb(&idle),
    );
    eprintln!(
        "resident kB before and after the trim: busy {busy_read} -> {busy_kept}, \
         idle {idle_read} -> {idle_kept}"
    );
    assert!(busy_read >= 256, "naming read only {busy_read} kB");
    assert_eq!(
        busy_kept, busy_read,
        "the file used since the last trim stays resident"
    );
    assert!(
        idle_kept <= 16,
        "{idle_kept} kB of the file no window used stay resident"
    );
    // Every name stays: the same stacks again look nothing up.
    for w in [&busy_w, &idle_w] {
        let (_, stats) = service.symbolize(w);
        assert_eq!((stats.user.cache_misses, stats.unnamed), (0, unnamed));
    }
    assert_eq!(service.sizes().lookups, lookups);
    // Under memory pressure every page goes, and nothing parsed: the next addresses of the
    // busy process, in the functions it ran last (in fewer units than a file keeps parsed),
    // are named without indexing DWARF again.
    service.release_resident_pages();
    assert!(
        common::shared_resident_kb(&busy) <= 16,
        "{} kB after release_resident_pages",
        common::shared_resident_kb(&busy)
    );
    let built = service.sizes().dwarf_indexes_built;
    assert!(built > 0, "DWARF indexed per unit: {:?}", service.sizes());
    let next: Vec<u64> = later[later.len() - 8..].iter().map(|o| o + 1).collect();
    let (_, stats) = service.symbolize(&window(1, &busy, &next));
    assert_eq!(stats.user.cache_misses, next.len() as u64);
    assert_eq!(
        service.sizes().dwarf_indexes_built,
        built,
        "an index was built again"
    );
}
