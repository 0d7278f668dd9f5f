//! The symbol service's bounds, with real binaries: the open symbolizers stay within their
//! count and byte bounds while windows touch more files, evicted files are opened again and
//! named right, `evict_file` releases the file's mapping, the name cache stays bounded and
//! keeps answering right, files are opened ahead through the feed, and JIT maps are dropped
//! with their process.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use profile::{Frame, NormalizedStack, NormalizedWindow, StackEnd, ThreadLabels, WindowFile};
use symbolize::service::{Limits, PreloadRequest, ServiceOptions};
use symbolize::{DebugSearch, FileSymbolizer, SymbolService};

/// Options without debuginfod or on-disk caches, with `limits`.
fn options(limits: Limits) -> ServiceOptions {
    ServiceOptions {
        lines: false,
        source_locations: false,
        debug_search: DebugSearch::default(),
        debuginfod: None,
        kernel_cache_dir: None,
        time_weights: false,
        symbol_table_only: Vec::new(),
        limits,
    }
}

/// The file offset of the function `name` in `path`.
fn offset_of(path: &Path, name: &str) -> u64 {
    let sym = common::nm_code(path, &[])
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} not in {}", path.display()));
    let (off, vaddr, _, _) = common::load_segments(path)
        .into_iter()
        .find(|&(_, v, filesz, _)| sym.addr >= v && sym.addr < v + filesz)
        .expect("a segment holds the function");
    sym.addr - vaddr + off
}

/// A copy of `src` at `dst` whose build-id differs in its first byte by `n` (so the copies
/// share no frame-cache entries and each is a file of its own).
fn copy_with_build_id(src: &Path, dst: &Path, n: u8) -> Vec<u8> {
    let id_hex = common::readelf_build_id(src).expect("the fixture has a build-id");
    let id: Vec<u8> = (0..id_hex.len() / 2)
        .map(|i| u8::from_str_radix(&id_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut bytes = std::fs::read(src).unwrap();
    let at = bytes
        .windows(id.len())
        .position(|w| w == id.as_slice())
        .expect("the build-id bytes are in the file");
    let mut new_id = id.clone();
    new_id[0] ^= n;
    bytes[at..at + id.len()].copy_from_slice(&new_id);
    std::fs::write(dst, &bytes).unwrap();
    new_id
}

/// A window with one single-frame stack per (file index, offset), files as given, each in a
/// thread of its own of this process.
fn window(files: &[(u32, PathBuf, Option<Vec<u8>>)], frames: &[(u32, u64)]) -> NormalizedWindow {
    let mut w = NormalizedWindow {
        files: files
            .iter()
            .map(|(id, path, build_id)| WindowFile {
                id: *id,
                path: path.display().to_string(),
                build_id: build_id.clone(),
                live: None,
                pinned: None,
            })
            .collect(),
        ..NormalizedWindow::default()
    };
    // A thread per stack, so that stacks with the same frames stay apart in the profile.
    for (i, &(file, offset)) in frames.iter().enumerate() {
        w.threads.push(ThreadLabels {
            pid: std::process::id(),
            tid: i as u32,
            comm: Some(format!("t{i:03}")),
            ..ThreadLabels::default()
        });
        w.stacks.push(NormalizedStack {
            thread: i as u32,
            frames_start: w.frames.len() as u32,
            kernel_len: 0,
            user_len: 1,
            user_end: StackEnd::FramePointer,
            count: 1,
            period: 1,
            weight: Default::default(),
        });
        w.frames.push(Frame::File { file, offset });
    }
    w
}

/// The leaf names of the profile's stacks, in stack order of the window (one frame each).
fn leaf_names(service: &mut SymbolService, w: &NormalizedWindow) -> Vec<String> {
    let (profile, stats) = service.symbolize(w);
    assert_eq!(stats.unnamed, 0, "every frame named");
    let mut lines = profile.folded_lines();
    lines.sort();
    lines
        .iter()
        .map(|l| {
            let stack = l.rsplit_once(' ').unwrap().0;
            stack.rsplit(';').next().unwrap().to_string()
        })
        .collect()
}

/// Copies of the PIE fixture with build-ids of their own, as window files.
fn copies(dir: &Path, n: usize) -> Vec<(u32, PathBuf, Option<Vec<u8>>)> {
    let fx = common::fixtures();
    (0..n)
        .map(|i| {
            let path = dir.join(format!("copy{i}"));
            let id = copy_with_build_id(&fx.pie, &path, i as u8 + 1);
            (100 + i as u32, path, Some(id))
        })
        .collect()
}

#[test]
fn open_symbolizers_stay_within_count_and_reopen_right() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let files = copies(dir.path(), 6);
    let (alpha, beta) = (
        offset_of(&fx.pie, "compute_alpha"),
        offset_of(&fx.pie, "compute_beta"),
    );
    let mut service = SymbolService::new(
        options(Limits {
            open_files: 2,
            ..Limits::default()
        }),
        None,
    );
    let frames_a: Vec<(u32, u64)> = (0..6).map(|i| (i, alpha)).collect();
    let names = leaf_names(&mut service, &window(&files, &frames_a));
    assert_eq!(names, vec!["compute_alpha"; 6]);
    assert!(service.sizes().symbolizers <= 2, "{:?}", service.sizes());
    // New offsets in every file: the evicted ones are opened again and name them right.
    let frames_b: Vec<(u32, u64)> = (0..6).map(|i| (i, beta)).collect();
    let w = window(&files, &frames_b);
    let (_, stats) = service.symbolize(&w);
    assert_eq!(stats.user.cache_misses, 6);
    assert!(
        stats.user.files >= 4,
        "evicted files were opened again: {stats:?}"
    );
    assert!(stats.user.files_evicted >= 4, "{stats:?}");
    assert!(service.sizes().symbolizers <= 2, "{:?}", service.sizes());
    // Named from the cache now, and right.
    assert_eq!(leaf_names(&mut service, &w), vec!["compute_beta"; 6]);
}

#[test]
fn open_symbolizers_stay_within_their_estimated_bytes() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let files = copies(dir.path(), 5);
    let alpha = offset_of(&fx.pie, "compute_alpha");
    // What one symbolizer weighs once it has named an address.
    let one = {
        let s = FileSymbolizer::open(&files[0].1, None, &DebugSearch::default()).unwrap();
        let addr = s.file_offset_to_addr(symbolize::FileOffset(alpha)).unwrap();
        assert_eq!(s.frames(addr, false)[0].function, "compute_alpha");
        s.estimated_bytes()
    };
    assert!(one > 0);
    let max_bytes = one * 5 / 2;
    let mut service = SymbolService::new(
        options(Limits {
            open_files: 100,
            open_file_bytes: max_bytes,
            ..Limits::default()
        }),
        None,
    );
    for i in 0..5u32 {
        let names = leaf_names(&mut service, &window(&files, &[(i, alpha)]));
        assert_eq!(names, vec!["compute_alpha"]);
        let sizes = service.sizes();
        assert!(
            sizes.symbolizer_bytes <= max_bytes,
            "{sizes:?}, bound {max_bytes}"
        );
        assert!((1..=2).contains(&sizes.symbolizers), "{sizes:?}");
    }
    // The first file was dropped by weight: naming a new address in it opens it again.
    let beta = offset_of(&fx.pie, "compute_beta");
    assert_eq!(
        leaf_names(&mut service, &window(&files, &[(0, beta)])),
        vec!["compute_beta"]
    );
}

/// How many lines of /proc/self/maps name `path`.
fn mappings_of(path: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.display().to_string();
    maps.lines()
        .filter(|l| l.split_whitespace().nth(5).is_some_and(|p| p == name))
        .count()
}

#[test]
fn evict_file_releases_the_mapping() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evict_me");
    std::fs::copy(&fx.pie, &path).unwrap();
    let files = vec![(7u32, path.clone(), None)];
    let mut service = SymbolService::new(options(Limits::default()), None);
    let alpha = offset_of(&fx.pie, "compute_alpha");
    assert_eq!(
        leaf_names(&mut service, &window(&files, &[(0, alpha)])),
        vec!["compute_alpha"]
    );
    assert!(
        mappings_of(&path) > 0,
        "the symbolizer maps the binary (its DWARF)"
    );
    assert_eq!(service.sizes().symbolizers, 1);
    assert!(service.evict_file(7));
    assert_eq!(mappings_of(&path), 0, "the mapping is released");
    assert_eq!(service.sizes().symbolizers, 0);
    assert!(!service.evict_file(7));
}

/// A window like [`window`], each file held open as a recording pins it.
fn pinned_window(files: &[(u32, PathBuf)], frames: &[(u32, u64)]) -> NormalizedWindow {
    let mut w = window(
        &files
            .iter()
            .map(|(id, path)| {
                let id_hex = common::readelf_build_id(path).expect("a build-id");
                let bytes = (0..id_hex.len() / 2)
                    .map(|i| u8::from_str_radix(&id_hex[2 * i..2 * i + 2], 16).unwrap())
                    .collect();
                (*id, path.clone(), Some(bytes))
            })
            .collect::<Vec<_>>(),
        frames,
    );
    for (file, (_, path)) in w.files.iter_mut().zip(files) {
        file.pinned = Some(std::sync::Arc::new(std::fs::File::open(path).unwrap()));
    }
    w
}

#[test]
fn copies_of_a_binary_share_a_symbolizer_and_names_but_not_across_owners() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let (first, second, theirs) = (
        dir.path().join("deploy-1"),
        dir.path().join("deploy-2"),
        dir.path().join("theirs"),
    );
    std::fs::copy(&fx.pie, &first).unwrap();
    std::fs::copy(&fx.pie, &second).unwrap();
    // Another user's file with the same build-id and size whose function is named otherwise.
    let bytes = std::fs::read(&fx.pie).unwrap();
    let (from, to) = (b"compute_alpha", b"compute_omega");
    let mut patched = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            patched.extend_from_slice(to);
            i += from.len();
        } else {
            patched.push(bytes[i]);
            i += 1;
        }
    }
    std::fs::write(&theirs, &patched).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();

    let alpha = offset_of(&fx.pie, "compute_alpha");
    let beta = offset_of(&fx.pie, "compute_beta");
    let files = vec![(1u32, first.clone()), (2, second.clone()), (3, theirs)];
    let mut service = SymbolService::new(options(Limits::default()), None);
    let (_, stats) = service.symbolize(&pinned_window(&files, &[(0, alpha)]));
    assert_eq!((stats.user.files, stats.user.cache_misses), (1, 1));
    // The second copy: no file opened, the first copy's name.
    let w = pinned_window(&files, &[(1, alpha)]);
    let (_, stats) = service.symbolize(&w);
    assert_eq!((stats.user.files, stats.user.cache_hits), (0, 1));
    assert_eq!(leaf_names(&mut service, &w), vec!["compute_alpha"]);
    assert_eq!((service.sizes().files, service.sizes().sources), (2, 1));
    // Another owner's file is a source of its own, named from itself.
    let w = pinned_window(&files, &[(2, alpha)]);
    assert_eq!(leaf_names(&mut service, &w), vec!["compute_omega"]);
    assert_eq!(service.sizes().symbolizers, 2);

    // The copy the symbolizer was read from is released: it is closed, so the copy's space
    // can be freed; the names stay for the other copy, which is opened when a new address
    // needs it.
    assert!(mappings_of(&first) > 0);
    assert!(service.evict_file(1));
    assert_eq!(mappings_of(&first), 0, "nothing maps the released copy");
    let w = pinned_window(&files, &[(1, alpha)]);
    let (_, stats) = service.symbolize(&w);
    assert_eq!((stats.user.files, stats.user.cache_hits), (0, 1));
    let w = pinned_window(&files, &[(1, beta)]);
    assert_eq!(leaf_names(&mut service, &w), vec!["compute_beta"]);
    assert!(
        mappings_of(&second) > 0,
        "opened from the copy still mapped"
    );
    // Releasing the last copy leaves the source idle (known for the next deploy), with
    // nothing open.
    assert!(service.evict_file(2));
    assert_eq!(mappings_of(&second), 0);
    assert!(service.evict_file(3));
    assert_eq!(service.sizes().symbolizers, 0);
    assert_eq!((service.sizes().files, service.sizes().sources), (0, 2));
    let third = dir.path().join("deploy-3");
    std::fs::copy(&fx.pie, &third).unwrap();
    let (_, stats) = service.symbolize(&pinned_window(&[(4, third)], &[(0, alpha)]));
    assert_eq!(
        (stats.user.files, stats.user.cache_hits),
        (0, 1),
        "the next deploy"
    );
}

#[test]
fn name_cache_stays_bounded_and_answers_right() {
    let fx = common::fixtures();
    let files = vec![(1u32, fx.pie.clone(), None)];
    let functions = [
        "compute_alpha",
        "compute_beta",
        "compute_gamma",
        "weak_function",
    ];
    // Several offsets inside each function.
    let mut frames = Vec::new();
    let mut expected = Vec::new();
    for f in functions {
        let start = offset_of(&fx.pie, f);
        for delta in 0..4 {
            frames.push((0u32, start + delta));
            expected.push(f.to_string());
        }
    }
    expected.sort();
    let max_names = 6;
    let mut service = SymbolService::new(
        options(Limits {
            names: max_names,
            name_bytes: 1 << 20,
            ..Limits::default()
        }),
        None,
    );
    let w = window(&files, &frames);
    for round in 0..3 {
        let (profile, stats) = service.symbolize(&w);
        assert_eq!(stats.unnamed, 0);
        let sizes = service.sizes();
        assert!(sizes.names <= max_names, "round {round}: {sizes:?}");
        assert!(stats.user.cache_evictions > 0, "round {round}: {stats:?}");
        let mut names: Vec<String> = profile
            .folded_lines()
            .iter()
            .map(|l| {
                l.rsplit_once(' ')
                    .unwrap()
                    .0
                    .rsplit(';')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        names.sort();
        assert_eq!(names, expected, "round {round}");
        assert_eq!(profile.total(), frames.len() as u64);
    }
    // Bounded by bytes of names too.
    let mut service = SymbolService::new(
        options(Limits {
            name_bytes: 600,
            ..Limits::default()
        }),
        None,
    );
    service.symbolize(&w);
    assert!(service.sizes().name_bytes <= 600, "{:?}", service.sizes());
    assert!(service.sizes().names > 0);
}

#[test]
fn files_are_opened_ahead_through_the_feed() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("preload_me");
    std::fs::copy(&fx.pie, &path).unwrap();
    let alpha = offset_of(&fx.pie, "compute_alpha");
    let mut service = SymbolService::new(options(Limits::default()), None);
    let feed = service.feed();
    assert!(feed.preloaded.request(PreloadRequest {
        file: 3,
        content: None,
        read_from: path.clone(),
        path: path.clone(),
        build_id: None,
        warm_offset: alpha,
    }));
    // Asked once: a second request for the same file is not queued.
    assert!(!feed.preloaded.request(PreloadRequest {
        file: 3,
        content: None,
        read_from: path.clone(),
        path: path.clone(),
        build_id: None,
        warm_offset: alpha,
    }));
    let deadline = Instant::now() + Duration::from_secs(20);
    while service.sizes().preloaded == 0 {
        assert!(
            Instant::now() < deadline,
            "the preloader never opened the file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The file is gone before the window is named: only what was opened ahead can name it
    // (a window that ignored it would open the file again, and fail).
    std::fs::remove_file(&path).unwrap();
    let files = vec![(3u32, path.clone(), None)];
    let w = window(&files, &[(0, alpha)]);
    let (profile, stats) = service.symbolize(&w);
    assert_eq!(stats.user.files, 1);
    assert_eq!(stats.unnamed, 0, "named from the file opened ahead");
    let lines = profile.folded_lines();
    assert!(
        lines.iter().all(|l| l.contains("compute_alpha")),
        "named from the file opened ahead: {lines:?}"
    );
    assert_eq!(service.sizes().preloaded, 0);
    assert_eq!(service.sizes().symbolizers, 1);
    // The service holds it now: asking again is a no-op.
    assert!(!feed.preloaded.request(PreloadRequest {
        file: 3,
        content: None,
        read_from: path.clone(),
        path,
        build_id: None,
        warm_offset: alpha,
    }));
    assert_eq!(leaf_names(&mut service, &w), vec!["compute_alpha"]);
}

#[test]
fn jit_maps_are_dropped_with_their_process_and_shed_drops_the_caches() {
    let fx = common::fixtures();
    let pid = std::process::id();
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::write(&map, "7f0000001000 100 jitted_function\n").unwrap();
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _remove = Remove(map);
    let mut service = SymbolService::new(options(Limits::default()), None);
    let mut w = window(
        &[(1, fx.pie.clone(), None)],
        &[(0, offset_of(&fx.pie, "compute_alpha"))],
    );
    w.stacks.push(NormalizedStack {
        thread: 0,
        frames_start: w.frames.len() as u32,
        kernel_len: 0,
        user_len: 1,
        user_end: StackEnd::FramePointer,
        count: 1,
        period: 1,
        weight: Default::default(),
    });
    w.frames.push(Frame::Anonymous(0x7f0000001010));
    let mut names = leaf_names(&mut service, &w);
    names.sort();
    assert_eq!(names, vec!["compute_alpha", "jitted_function"]);
    let sizes = service.sizes();
    assert_eq!((sizes.jit_maps, sizes.symbolizers, sizes.names), (1, 1, 1));
    assert!(
        !service.evict_process(pid, 12345),
        "another process with that pid"
    );
    assert!(service.evict_process(pid, 0));
    assert_eq!(service.sizes().jit_maps, 0);
    leaf_names(&mut service, &w);
    service.shed();
    let sizes = service.sizes();
    assert_eq!(
        (
            sizes.jit_maps,
            sizes.symbolizers,
            sizes.names,
            sizes.symbolizer_bytes
        ),
        (0, 0, 1, 0),
        "{sizes:?}: names used since the last shed stay, for one more"
    );
    service.shed();
    assert_eq!(service.sizes().names, 0, "two sheds drop every name");
    // Naming goes on after shedding.
    let mut names = leaf_names(&mut service, &w);
    names.sort();
    assert_eq!(names, vec!["compute_alpha", "jitted_function"]);
}

/// `src` copied to `dst` without its build-id note, as some toolchains ship their binaries
/// (rustup's rustc, LLVM and lld have none).
fn copy_without_build_id(src: &Path, dst: &Path) {
    let out = std::process::Command::new("objcopy")
        .args(["--remove-section", ".note.gnu.build-id"])
        .arg(src)
        .arg(dst)
        .output()
        .expect("objcopy runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(common::readelf_build_id(dst), None, "no build-id left");
}

/// A window of `frames` in the file `path` (no build-id), mapped by a process whose
/// recording knows it as file `id` and holds it open.
fn process_window(id: u32, path: &Path, frames: &[(u32, u64)]) -> NormalizedWindow {
    let mut w = window(&[(id, path.to_path_buf(), None)], frames);
    w.files[0].pinned = Some(std::sync::Arc::new(std::fs::File::open(path).unwrap()));
    w
}

#[test]
fn a_second_window_of_the_same_stacks_looks_nothing_up() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let compiler = dir.path().join("compiler");
    copy_without_build_id(&fx.pie, &compiler);
    let mut frames = Vec::new();
    for f in ["compute_alpha", "compute_beta", "compute_gamma"] {
        let start = offset_of(&fx.pie, f);
        frames.extend((0..3).map(|delta| (0u32, start + delta)));
    }
    let mut service = SymbolService::new(options(Limits::default()), None);
    let first = leaf_names(&mut service, &process_window(1, &compiler, &frames));
    let looked_up = service.sizes().lookups;
    assert_eq!(
        looked_up,
        frames.len() as u64,
        "each address looked up once"
    );
    // The next windows, the same stacks: every address is named from the cache, with a
    // trim between them (as the daemon does every few slices), then one that lets go of
    // everything it can (memory pressure); and from a new process of the same binary each
    // time (a compiler run after run: the recorder's file id is new once the last process
    // mapping it exited), the process before it gone.
    for round in 0..4u32 {
        let id = 2 + round;
        service.evict_file(id - 1);
        let w = process_window(id, &compiler, &frames);
        assert_eq!(leaf_names(&mut service, &w), first, "round {round}");
        let (_, stats) = service.symbolize(&w);
        assert_eq!(
            (stats.user.cache_misses, service.sizes().lookups),
            (0, looked_up),
            "round {round}: the second window of these stacks looked addresses up again"
        );
        match round {
            0 => {}
            1 => service.trim(),
            _ => service.release_resident_pages(),
        }
    }
    assert_eq!(service.sizes().names, frames.len());
}

/// The inline fixture built in `dir`: its path, its build-id and the file offset of `hot`
/// (whose code holds inlined calls).
fn inline_fixture(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>, u64) {
    let bin = common::build_inline(dir, "inl", &[]);
    let id_hex = common::readelf_build_id(&bin).expect("the fixture has a build-id");
    let id = (0..id_hex.len() / 2)
        .map(|i| u8::from_str_radix(&id_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let hot = offset_of(&bin, "hot");
    (bin, id, hot)
}

#[test]
fn a_binary_named_from_its_symbol_table_alone_reads_no_dwarf() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, id, hot) = inline_fixture(dir.path());
    let size = common::nm_code(&bin, &[])
        .into_iter()
        .find(|s| s.name == "hot")
        .and_then(|s| s.size)
        .expect("hot has a size");
    let frames: Vec<(u32, u64)> = (0..size).map(|d| (0, hot + d)).collect();
    let w = window(&[(1, bin.clone(), Some(id.clone()))], &frames);
    let folded = |service: &mut SymbolService| -> Vec<String> {
        let (profile, stats) = service.symbolize(&w);
        assert_eq!(stats.unnamed, 0, "every frame named");
        profile.folded_lines()
    };

    // Through DWARF: some addresses of `hot` are inside its inlined calls.
    let mut through_dwarf = SymbolService::new(options(Limits::default()), None);
    let lines = folded(&mut through_dwarf);
    assert!(
        lines.iter().any(|l| l.contains("inl3")),
        "no inlined frame through DWARF: {lines:?}"
    );
    assert!(through_dwarf.sizes().dwarf_indexes_built > 0);

    // Listed by build-id: each address is `hot` alone, and no DWARF index is built.
    let mut table_only = SymbolService::new(
        ServiceOptions {
            symbol_table_only: vec![id.clone().into()],
            ..options(Limits::default())
        },
        None,
    );
    let lines = folded(&mut table_only);
    assert_eq!(lines.len(), frames.len(), "{lines:?}");
    for line in &lines {
        let stack = line.rsplit_once(' ').unwrap().0;
        assert_eq!(stack.rsplit(';').next(), Some("hot"), "{line}");
        assert!(!stack.contains("inl"), "{line}");
    }
    let sizes = table_only.sizes();
    assert_eq!(
        sizes.lookups,
        frames.len() as u64,
        "each address looked up once"
    );
    assert_eq!(
        sizes.dwarf_indexes_built, 0,
        "no DWARF read for a listed binary"
    );
    // Named again from the cache.
    folded(&mut table_only);
    assert_eq!(table_only.sizes().lookups, frames.len() as u64);

    // A mapping read from /proc carries no build-id (the daemon's own, mapped before it began
    // sampling): the file's own build-id is what is checked.
    let mut from_proc = SymbolService::new(
        ServiceOptions {
            symbol_table_only: vec![id.into()],
            ..options(Limits::default())
        },
        None,
    );
    let w = window(&[(1, bin.clone(), None)], &frames);
    let (profile, _) = from_proc.symbolize(&w);
    let lines = profile.folded_lines();
    assert!(
        lines.iter().all(|l| !l.contains("inl")),
        "inlined frames of a listed binary mapped without a build-id: {lines:?}"
    );
    assert_eq!(from_proc.sizes().dwarf_indexes_built, 0);
}

#[test]
fn a_binary_opened_ahead_builds_no_dwarf_index_when_named_from_its_symbol_table() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, id, hot) = inline_fixture(dir.path());
    // The file opened ahead (as for a new stack), then a window naming `hot`: the DWARF
    // indexes built, the preloader's warming included.
    let indexes_built = |listed: Vec<Box<[u8]>>| -> (u64, Vec<String>) {
        let mut service = SymbolService::new(
            ServiceOptions {
                symbol_table_only: listed,
                ..options(Limits::default())
            },
            None,
        );
        let feed = service.feed();
        assert!(feed.preloaded.request(PreloadRequest {
            file: 1,
            content: None,
            read_from: bin.clone(),
            path: bin.clone(),
            build_id: Some(id.clone()),
            warm_offset: hot,
        }));
        let deadline = Instant::now() + Duration::from_secs(20);
        while service.sizes().preloaded == 0 {
            assert!(Instant::now() < deadline, "the preloader never opened it");
            std::thread::sleep(Duration::from_millis(10));
        }
        let w = window(&[(1, bin.clone(), Some(id.clone()))], &[(0, hot)]);
        let (profile, stats) = service.symbolize(&w);
        assert_eq!(stats.unnamed, 0);
        assert_eq!(
            service.sizes().preloaded,
            0,
            "the file opened ahead was taken"
        );
        (service.sizes().dwarf_indexes_built, profile.folded_lines())
    };
    let (built, _) = indexes_built(Vec::new());
    assert!(
        built > 0,
        "warming an unlisted binary builds its DWARF index"
    );
    let (built, lines) = indexes_built(vec![id.clone().into()]);
    assert_eq!(
        built, 0,
        "a listed binary's DWARF index was built: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("hot") && !l.contains("inl")),
        "{lines:?}"
    );
}
