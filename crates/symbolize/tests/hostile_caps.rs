//! Issue 11, items 4 and 6: decompression, symbol tables and debuglink CRCs are bounded by
//! the input's size and absolute limits. Every case opens a hostile file and names addresses
//! in it; the peak of heap memory (counted by this binary's allocator) and the time are
//! measured and bounded, and the file is skipped (wholly or a section), never the process.
//!
//! One test function runs the cases one after the other, so that the peak of one is not
//! another's.

mod common;
#[path = "support/hostile_elf.rs"]
mod hostile_elf;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use symbolize::{DebugSearch, FileSymbolizer, SymbolAddr};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Open `path` as a binary and name every 16th byte of its first 64 KiB of text, measuring
/// heap growth (peak above what was live before) and time.
fn measure(path: &Path, search: &DebugSearch) -> (usize, Duration, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let t = Instant::now();
    let mut named = 0;
    if let Ok(sym) = FileSymbolizer::open(path, None, search) {
        for a in (0x1000..0x1200u64).step_by(16) {
            named += sym.frames(SymbolAddr(a), true).len();
        }
    }
    let took = t.elapsed();
    (PEAK.load(Ordering::Relaxed) - before, took, named)
}

const MB: usize = 1 << 20;

fn no_search() -> DebugSearch {
    DebugSearch::default()
}

#[test]
fn hostile_files_are_bounded() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let pie = std::fs::read(&fx.pie).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let check =
        |what: &str, path: &Path, search: &DebugSearch, max_heap: usize, max_time: Duration| {
            let (heap, took, named) = measure(path, search);
            eprintln!(
                "{what}: peak heap {:.1} MB, {took:.1?}, {named} frames",
                heap as f64 / MB as f64
            );
            assert!(heap < max_heap, "{what}: peak heap {heap} bytes");
            assert!(took < max_time, "{what}: took {took:?}");
            named
        };

    // Baseline: the intact binary names its frames.
    let base = check(
        "intact",
        &fx.pie,
        &no_search(),
        16 * MB,
        Duration::from_secs(5),
    );
    assert!(base > 0);

    // The fuzzer's find: .debug_abbrev (zlib) declaring 0x40000000000000 bytes.
    let crash = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hostile/elf-crash-huge-alloc.bin");
    check(
        "fuzzer's huge declared size",
        &crash,
        &no_search(),
        16 * MB,
        Duration::from_secs(5),
    );

    // A 2 MB zlib .debug_info (expanding to about 2 GB) declaring 2 GiB: refused unread.
    let bomb = hostile_elf::zlib_bomb(2 * MB);
    let p = write(
        "zlib-declared",
        &hostile_elf::with_compressed_section(
            &pie,
            ".debug_info",
            hostile_elf::ZLIB,
            2 << 30,
            &bomb,
        ),
    );
    let named = check(
        "2 MB zlib declaring 2 GiB",
        &p,
        &no_search(),
        16 * MB,
        Duration::from_secs(5),
    );
    assert!(named > 0, "the symbol table still names frames");
    // The same declaring 100 MiB (under the 64x cap): stopped at the declared size.
    let p = write(
        "zlib-lying",
        &hostile_elf::with_compressed_section(
            &pie,
            ".debug_info",
            hostile_elf::ZLIB,
            100 << 20,
            &bomb,
        ),
    );
    check(
        "2 MB zlib declaring 100 MiB",
        &p,
        &no_search(),
        120 * MB,
        Duration::from_secs(20),
    );

    // A 66 KB zstd bomb (2.1 GB of output) declaring 1 MiB: stopped at 1 MiB.
    let bomb = hostile_elf::zstd_bomb(66_000);
    let p = write(
        "zstd",
        &hostile_elf::with_compressed_section(
            &pie,
            ".debug_info",
            hostile_elf::ZSTD,
            1 << 20,
            &bomb,
        ),
    );
    check(
        "66 KB zstd bomb",
        &p,
        &no_search(),
        16 * MB,
        Duration::from_secs(5),
    );
    // Declaring what it holds (2.1 GB): over the cap, refused unread.
    let p = write(
        "zstd-honest",
        &hostile_elf::with_compressed_section(
            &pie,
            ".debug_info",
            hostile_elf::ZSTD,
            (66_000 / 4) << 17,
            &bomb,
        ),
    );
    check(
        "66 KB zstd bomb, declared",
        &p,
        &no_search(),
        16 * MB,
        Duration::from_secs(5),
    );
    // The same bomb as .debug_abbrev, .debug_str and .debug_line at once.
    let mut multi = pie.clone();
    for s in [".debug_abbrev", ".debug_str", ".debug_line"] {
        multi = hostile_elf::with_compressed_section(&multi, s, hostile_elf::ZSTD, 4 << 20, &bomb);
    }
    let p = write("zstd-multi", &multi);
    check(
        "zstd bombs in three sections",
        &p,
        &no_search(),
        16 * MB,
        Duration::from_secs(5),
    );

    // 500k symbols sharing one 8 KB name (4 GB of names if each were copied): skipped.
    let p = write(
        "symbols",
        &hostile_elf::with_shared_long_names(&pie, 500_000, 8192),
    );
    check(
        "500k symbols sharing an 8 KB name",
        &p,
        &no_search(),
        64 * MB,
        Duration::from_secs(10),
    );

    // A debuglink to a 4 GiB sparse file beside the binary: not read for its CRC.
    let stripped = std::fs::read(&fx.pie_stripped).unwrap();
    let link = write(
        "link.contents",
        &hostile_elf::debuglink_contents("big.debug", 0x1234_5678),
    );
    let bin = dir.path().join("linked");
    write("linked.in", &stripped);
    common::run(
        "objcopy",
        &[
            &format!("--add-section=.gnu_debuglink={}", link.display()),
            &dir.path().join("linked.in").display().to_string(),
            &bin.display().to_string(),
        ],
    );
    let big = dir.path().join("big.debug");
    std::fs::write(&big, &pie).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    check(
        "debuglink to a 4 GiB sparse file",
        &bin,
        &no_search(),
        16 * MB,
        Duration::from_secs(2),
    );
}
