//! `FileSymbolizer::release_resident_pages`: the pages naming read from a mapped file leave
//! the process's resident set, and lookups still answer. One test in its own binary, so that
//! no other test maps the same file meanwhile.

mod common;

use symbolize::{DebugSearch, FileSymbolizer, SymbolAddr};

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
    let read = common::shared_resident_kb(&exe);
    sym.release_resident_pages();
    let released = common::shared_resident_kb(&exe);
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
