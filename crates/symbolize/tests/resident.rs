//! `FileSymbolizer::release_resident_pages`: the pages naming read from a mapped file leave
//! the process's resident set, and lookups still answer. One test in its own binary, so that
//! no other test maps the same file meanwhile.

use std::path::Path;

use symbolize::{DebugSearch, FileSymbolizer, SymbolAddr};

/// Resident kB of the shared read-only mappings of `path` (the symbolizer's: the binary's own
/// code and data are private mappings).
fn shared_resident_kb(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut ours = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            ours = fields.get(1) == Some(&"r--s") && fields.get(5).map(Path::new) == Some(path);
        } else if ours && fields.first() == Some(&"Rss:") {
            kb += fields[1].parse::<u64>().unwrap();
        }
    }
    kb
}

#[test]
fn naming_leaves_no_mapped_pages_resident_after_a_release() {
    let exe = std::env::current_exe().unwrap();
    let search = DebugSearch {
        extra_dirs: vec![],
        system_debug_dir: Default::default(),
        debug_files: vec![],
        section_cache: None,
        symbol_cache: None,
    };
    let sym = FileSymbolizer::open(&exe, None, &search).unwrap();
    // Every function of this binary, by its symbol table.
    let nm = std::process::Command::new("nm")
        .args(["--defined-only", exe.to_str().unwrap()])
        .output()
        .unwrap();
    let addrs: Vec<u64> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (a, kind) = (f.next()?, f.next()?);
            matches!(kind, "t" | "T").then(|| u64::from_str_radix(a, 16).ok())?
        })
        .step_by(7)
        .collect();
    assert!(addrs.len() > 200, "only {} functions", addrs.len());
    let first: Vec<_> = addrs
        .iter()
        .map(|&a| sym.frames(SymbolAddr(a + 1), true))
        .collect();
    assert!(
        first
            .iter()
            .filter(|f| f.iter().any(|f| f.line.is_some()))
            .count()
            > 100
    );
    let read = shared_resident_kb(&exe);
    sym.release_resident_pages();
    let released = shared_resident_kb(&exe);
    eprintln!(
        "{} lookups: {read} kB of the mapped file resident, {released} kB after the release",
        addrs.len()
    );
    assert!(read >= 256, "naming read only {read} kB");
    assert!(released <= 16, "{released} kB still resident");
    let again: Vec<_> = addrs
        .iter()
        .map(|&a| sym.frames(SymbolAddr(a + 1), true))
        .collect();
    assert_eq!(first, again, "lookups after the release answer the same");
}
