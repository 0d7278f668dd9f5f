//! Crafted tables: lookups on a well-formed one, and every error path on broken ones.

use crate::{GoSymError, GoTable, Version};

const TEXT: u64 = 0x40_1000;

/// A Go 1.20 table (pointer size 8, quantum 1) with two functions: `main.leaf` at TEXT
/// (16 bytes, no frame) and `main.caller` at TEXT + 16 (32 bytes, a 24-byte frame after
/// its first 4 bytes, flagged TOPFRAME), both in main.go at line 10.
fn table_bytes() -> Vec<u8> {
    let names = b"main.leaf\0main.caller\0".to_vec();
    let cutab = 0u32.to_le_bytes().to_vec();
    let files = b"main.go\0".to_vec();
    // Offset 0 of the pc table means "no table".
    let mut pctab = vec![0u8];
    let leaf_sp = pctab.len() as u32;
    pctab.extend([2, 16, 0]);
    let caller_sp = pctab.len() as u32;
    pctab.extend([2, 4, 48, 28, 0]);
    let file = pctab.len() as u32;
    pctab.extend([2, 32, 0]);
    let line = pctab.len() as u32;
    pctab.extend([22, 32, 0]);

    let functab_len = 3 * 8;
    let func = |entry: u32, name: i32, sp: u32, flag: u8| {
        let mut f = Vec::new();
        for v in [entry, name as u32, 0, 0, sp, file, line, 0, 0, 10] {
            f.extend(v.to_le_bytes());
        }
        f.extend([0, flag, 0, 0]);
        f
    };
    let leaf = func(0, 0, leaf_sp, 0);
    let caller = func(16, 10, caller_sp, 1);
    let mut pcln = Vec::new();
    for (entry, off) in [
        (0u32, functab_len),
        (16, functab_len + leaf.len() as u32),
        (48, 0),
    ] {
        pcln.extend(entry.to_le_bytes());
        pcln.extend(off.to_le_bytes());
    }
    pcln.extend(leaf);
    pcln.extend(caller);

    let header_len = 8 + 8 * 8;
    let mut out = Vec::new();
    out.extend(0xffff_fff1u32.to_le_bytes());
    out.extend([0, 0, 1, 8]);
    let mut at = header_len as u64;
    let mut offsets = Vec::new();
    for part in [&names, &cutab, &files, &pctab] {
        offsets.push(at);
        at += part.len() as u64;
    }
    offsets.push(at);
    for word in [2u64, 1, TEXT].into_iter().chain(offsets) {
        out.extend(word.to_le_bytes());
    }
    for part in [names, cutab, files, pctab, pcln] {
        out.extend(part);
    }
    out
}

#[test]
fn lookups_on_a_crafted_table() {
    let bytes = table_bytes();
    let t = GoTable::from_pclntab(&bytes[..], 0x50_0000).expect("a valid table");
    assert_eq!(t.version(), Version::Go120);
    assert_eq!(t.len(), 2);
    assert_eq!(t.pc_range(), TEXT..TEXT + 48);
    assert!(t.func_at(TEXT - 1).is_none());
    assert!(t.func_at(TEXT + 48).is_none());
    let leaf = t.func_at(TEXT + 5).expect("leaf");
    assert_eq!(leaf.name(), Some("main.leaf"));
    assert_eq!((leaf.entry(), leaf.end()), (TEXT, TEXT + 16));
    assert_eq!(leaf.sp_delta(TEXT + 15), Some(0));
    assert_eq!(leaf.file_line(TEXT + 3), Some(("main.go", 10)));
    assert!(!leaf.is_top_frame());
    let caller = t.func_at(TEXT + 16).expect("caller");
    assert_eq!(caller.name(), Some("main.caller"));
    assert_eq!(caller.sp_delta(TEXT + 16), Some(0), "in the prologue");
    assert_eq!(caller.sp_delta(TEXT + 20), Some(24));
    assert_eq!(caller.sp_delta(TEXT + 47), Some(24));
    assert!(caller.is_top_frame());
    let mut frames = Vec::new();
    assert_eq!(
        t.frames(TEXT + 30, |f| frames.push(f.function.to_owned())),
        1
    );
    assert_eq!(frames, ["main.caller"]);
    assert!(!t.has_inline_info(), "no module data: no inline trees");
}

#[test]
fn every_truncation_is_refused_or_harmless() {
    let bytes = table_bytes();
    for len in 0..bytes.len() {
        if let Ok(t) = GoTable::from_pclntab(&bytes[..len], 0) {
            // Whatever was accepted answers lookups without panicking.
            for pc in TEXT - 1..TEXT + 50 {
                if let Some(f) = t.func_at(pc) {
                    let _ = (f.name(), f.sp_delta(pc), f.file_line(pc), f.is_top_frame());
                }
                t.frames(pc, |_| {});
            }
        }
    }
}

#[test]
fn corrupt_bytes_never_panic() {
    let bytes = table_bytes();
    // Every single-byte corruption of the table, past the header.
    for at in 8..bytes.len() {
        for value in [0x00, 0x7f, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[at] = value;
            if let Ok(t) = GoTable::from_pclntab(&b[..], 0) {
                for pc in TEXT - 1..TEXT + 50 {
                    if let Some(f) = t.func_at(pc) {
                        let _ = (f.name(), f.sp_delta(pc), f.file_line(pc));
                    }
                    t.frames(pc, |_| {});
                }
            }
        }
    }
}

#[test]
fn header_errors_are_typed() {
    let bytes = table_bytes();
    let with = |at: usize, patch: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + patch.len()].copy_from_slice(patch);
        GoTable::from_pclntab(b, 0).map(|_| ()).unwrap_err()
    };
    assert_eq!(
        with(0, &0xffff_fffbu32.to_le_bytes()),
        GoSymError::UnsupportedMagic(0xffff_fffb),
        "Go 1.2-1.15 tables are not read"
    );
    assert!(matches!(with(4, &[1]), GoSymError::BadHeader(_)));
    assert!(matches!(with(6, &[3]), GoSymError::BadHeader(_)));
    assert!(matches!(with(7, &[2]), GoSymError::BadHeader(_)));
    assert_eq!(
        with(8, &u64::MAX.to_le_bytes()),
        GoSymError::TooManyFunctions(u64::MAX)
    );
    // More functions than the function table holds: what follows it is read as entries
    // until they are out of order or out of bounds.
    assert!(matches!(
        with(8, &100_000u64.to_le_bytes()),
        GoSymError::OutOfBounds { .. } | GoSymError::Unsorted(_)
    ));
    // Sub-table offsets out of order, or past the end.
    assert!(matches!(
        with(32, &u64::MAX.to_le_bytes()),
        GoSymError::OutOfBounds { .. }
    ));
    assert!(matches!(
        with(8 + 7 * 8, &0u64.to_le_bytes()),
        GoSymError::OutOfBounds { .. }
    ));
    // An entry before the previous one.
    let pcln = u64::from_le_bytes(bytes[64..72].try_into().unwrap()) as usize;
    assert_eq!(
        with(pcln + 16, &8u32.to_le_bytes()),
        GoSymError::Unsorted(2)
    );
    assert_eq!(
        GoTable::from_pclntab(&bytes[..6], 0).unwrap_err(),
        GoSymError::BadHeader("truncated")
    );
}

#[test]
fn not_elf_and_not_go() {
    assert!(matches!(
        GoTable::from_elf(&b"not an ELF file"[..]),
        Err(GoSymError::Elf(_))
    ));
    // A C binary of this machine (the test's own executable is Rust): no Go table.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert_eq!(
        GoTable::from_elf(&me[..]).unwrap_err(),
        GoSymError::NotFound
    );
    assert!(!crate::is_go_binary(&me));
}
