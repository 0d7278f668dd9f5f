//! Symbolize fixture binaries built with the system C/C++ compiler and
//! compare against binutils (`nm`, `addr2line`, `readelf`).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::{addr2line, by_addr, fixtures, hex, load_segments, nm_code, readelf_build_id};
use symbolize::{demangle, ElfFile, ElfLayout, FileOffset, SymbolAddr};

/// Check every function's start, middle and last byte (and the byte past a
/// sized function) against `nm` and `addr2line`. Returns the number of
/// addresses checked.
fn check_against_binutils(path: &Path, cxx: bool) -> usize {
    let elf = ElfFile::open(path).unwrap();
    let syms = nm_code(path, &[]);
    let names = by_addr(&syms);
    let demangled = by_addr(&nm_code(path, &["-C"]));
    let mut addrs = Vec::new();
    let mut seen = BTreeSet::new();
    for s in &syms {
        if !seen.insert(s.addr) {
            continue;
        }
        let size = s.size.unwrap_or(0);
        let probes = if size > 0 {
            vec![s.addr, s.addr + size / 2, s.addr + size - 1]
        } else {
            vec![s.addr]
        };
        for a in probes {
            let got = elf
                .symbol(SymbolAddr(a))
                .unwrap_or_else(|| panic!("{}: no symbol at {a:#x} ({})", path.display(), s.name));
            assert_eq!(
                got.start,
                SymbolAddr(s.addr),
                "{a:#x}: got {got:?}, nm says {}",
                s.name
            );
            assert!(
                names[&s.addr].contains(got.name),
                "{a:#x}: got {}, nm says {:?}",
                got.name,
                names[&s.addr]
            );
            assert!(
                demangled[&s.addr].contains(demangle(got.name).as_ref()),
                "{a:#x}: demangled {} not in nm -C {:?}",
                demangle(got.name),
                demangled[&s.addr]
            );
            addrs.push(a);
        }
        // The byte after a sized function belongs to it no longer.
        if size > 0 {
            let end = s.addr + size;
            if let Some(got) = elf.symbol(SymbolAddr(end)) {
                assert_eq!(
                    got.start,
                    SymbolAddr(end),
                    "{} leaks past its end: {got:?}",
                    s.name
                );
            }
        }
    }

    // addr2line (DWARF names where present) must agree wherever the address
    // has a single (demangled) name.
    let a2l = addr2line(path, &addrs, cxx);
    let mut agreed = 0;
    for (a, theirs) in addrs.iter().zip(&a2l) {
        let ours = elf.symbol(SymbolAddr(*a)).unwrap();
        let ours_demangled = demangle(ours.name);
        let set = if cxx {
            &demangled[&ours.start.0]
        } else {
            &names[&ours.start.0]
        };
        let ours_cmp = if cxx {
            ours_demangled.as_ref()
        } else {
            ours.name
        };
        if theirs == "??" {
            continue;
        }
        if set.len() == 1 {
            assert_eq!(ours_cmp, theirs, "addr2line disagrees at {a:#x}");
        } else {
            assert!(
                set.contains(theirs.as_str()),
                "{a:#x}: addr2line {theirs} not among {set:?}"
            );
        }
        agreed += 1;
    }
    assert!(
        agreed * 2 > addrs.len(),
        "addr2line answered too few: {agreed}/{}",
        addrs.len()
    );
    addrs.len()
}

fn name_at(elf: &ElfFile, addr: u64) -> Option<&str> {
    elf.symbol(SymbolAddr(addr)).map(|s| s.name)
}

fn nm_addr(path: &Path, name: &str) -> u64 {
    nm_code(path, &[])
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} not in nm output of {}", path.display()))
        .addr
}

#[test]
fn pie_matches_binutils() {
    let f = fixtures();
    let n = check_against_binutils(&f.pie, false);
    assert!(n > 20, "too few addresses checked: {n}");
    let elf = ElfFile::open(&f.pie).unwrap();
    for name in [
        "compute_alpha",
        "compute_beta",
        "compute_gamma",
        "helper_static",
        "main",
        "weak_function",
    ] {
        let a = nm_addr(&f.pie, name);
        assert_eq!(name_at(&elf, a + 1), Some(name));
    }
}

#[test]
fn nopie_matches_binutils() {
    let f = fixtures();
    check_against_binutils(&f.nopie, false);
    let elf = ElfFile::open(&f.nopie).unwrap();
    let a = nm_addr(&f.nopie, "compute_beta");
    assert!(a >= 0x400000, "non-PIE should link high: {a:#x}");
    assert_eq!(name_at(&elf, a), Some("compute_beta"));
}

#[test]
fn shared_lib_matches_binutils_and_prefers_aliases() {
    let f = fixtures();
    check_against_binutils(&f.lib, false);
    let elf = ElfFile::open(&f.lib).unwrap();
    // lib_alias_target / lib_alias_global (global, same length: lexically
    // first), _lib_u (leading _), lib_alias_weak (weak).
    let a = nm_addr(&f.lib, "lib_alias_target");
    assert_eq!(name_at(&elf, a + 2), Some("lib_alias_global"));
    assert_eq!(
        name_at(&elf, nm_addr(&f.lib, "lib_static_helper")),
        Some("lib_static_helper")
    );
}

#[test]
fn cxx_matches_binutils_demangled() {
    let f = fixtures();
    let Some(cxx) = &f.cxx else {
        eprintln!("skipped: no g++");
        return;
    };
    check_against_binutils(cxx, true);
    let elf = ElfFile::open(cxx).unwrap();
    let expect = [
        (
            "_ZNK7fixture6Widget6scaledEi",
            "fixture::Widget::scaled(int) const",
        ),
        ("_ZN7fixture6Widget4makeEl", "fixture::Widget::make(long)"),
        ("_ZN7fixture10overloadedEd", "fixture::overloaded(double)"),
        (
            "_ZN7fixture3addIiEET_S1_S1_",
            "int fixture::add<int>(int, int)",
        ),
        (
            "_ZN7fixture12_GLOBAL__N_111anon_helperEPKc",
            "fixture::(anonymous namespace)::anon_helper(char const*)",
        ),
    ];
    for (mangled, pretty) in expect {
        let a = nm_addr(cxx, mangled);
        let sym = elf.symbol(SymbolAddr(a + 1)).unwrap();
        assert_eq!(sym.name, mangled);
        assert_eq!(demangle(sym.name), pretty);
    }
}

#[test]
fn stripped_lib_uses_dynsym() {
    let f = fixtures();
    let elf = ElfFile::open(&f.lib_stripped).unwrap();
    let full = ElfFile::open(&f.lib).unwrap();
    assert!(elf.symbol_count() > 0 && elf.symbol_count() < full.symbol_count());
    let dynamic = by_addr(&nm_code(&f.lib_stripped, &["-D"]));
    for name in ["lib_exported_a", "lib_exported_b"] {
        let a = nm_addr(&f.lib, name);
        assert_eq!(name_at(&elf, a + 3), Some(name));
        assert!(dynamic[&a].contains(name));
    }
    // The static helper is gone with .symtab; exported neighbours are sized,
    // so it is not misattributed.
    let helper = nm_addr(&f.lib, "lib_static_helper");
    assert_eq!(name_at(&elf, helper + 1), None);
    // Same build-id as the unstripped file.
    assert_eq!(elf.build_id(), full.build_id());
}

#[test]
fn stripped_pie_has_no_local_names() {
    let f = fixtures();
    let elf = ElfFile::open(&f.pie_stripped).unwrap();
    let dynamic = by_addr(&nm_code(&f.pie_stripped, &["-D"]));
    for name in ["compute_alpha", "helper_static", "main"] {
        let a = nm_addr(&f.pie, name);
        if let Some(sym) = elf.symbol(SymbolAddr(a)) {
            assert!(
                dynamic
                    .get(&sym.start.0)
                    .is_some_and(|s| s.contains(sym.name)),
                "{sym:?}"
            );
        }
    }
}

#[test]
fn notype_text_symbols_when_no_funcs() {
    let f = fixtures();
    let elf = ElfFile::open(&f.notype).unwrap();
    assert_eq!(elf.symbol_count(), 3);
    for (name, len) in [("asm_first", 3), ("asm_second", 2), ("asm_third", 1)] {
        let a = nm_addr(&f.notype, name);
        for off in 0..len {
            assert_eq!(name_at(&elf, a + off), Some(name), "{name}+{off}");
        }
    }
    // asm_third is size 0 and the last symbol: it ends with .text.
    let third = nm_addr(&f.notype, "asm_third");
    assert_eq!(name_at(&elf, third + 1), None);
}

#[test]
fn file_offset_to_addr_matches_readelf() {
    let f = fixtures();
    let mut saw_shifted = false;
    for path in [&f.pie, &f.nopie, &f.lib, &f.lib_stripped] {
        let elf = ElfFile::open(path).unwrap();
        let loads = load_segments(path);
        assert!(loads.len() >= 2, "{}: {loads:?}", path.display());
        let in_file = |off: u64| loads.iter().any(|&(o, _, fs, _)| off >= o && off < o + fs);
        for &(off, vaddr, filesz, memsz) in &loads {
            saw_shifted |= off != vaddr;
            for probe in [off, off + filesz / 2, off + filesz.saturating_sub(1)] {
                assert_eq!(
                    elf.file_offset_to_addr(FileOffset(probe)),
                    Some(SymbolAddr(vaddr + probe - off)),
                    "{}: offset {probe:#x}",
                    path.display()
                );
            }
            // Within p_memsz (bss) when no other segment has that offset.
            if memsz > filesz && !in_file(off + filesz) {
                assert_eq!(
                    elf.file_offset_to_addr(FileOffset(off + filesz)),
                    Some(SymbolAddr(vaddr + filesz))
                );
            }
        }
        let end = loads.iter().map(|&(o, _, _, m)| o + m).max().unwrap();
        assert_eq!(elf.file_offset_to_addr(FileOffset(end + 0x10_0000)), None);
    }
    assert!(
        saw_shifted,
        "no segment with p_offset != p_vaddr was exercised"
    );
    // The text segment of the non-PIE is linked at 0x400000 + offset.
    let elf = ElfFile::open(&f.nopie).unwrap();
    let text = load_segments(&f.nopie)
        .into_iter()
        .find(|&(o, v, _, _)| o != 0 && v != o)
        .unwrap();
    assert_eq!(
        elf.file_offset_to_addr(FileOffset(text.0 + 5)),
        Some(SymbolAddr(text.1 + 5))
    );
}

/// [`ElfLayout`] (headers only) against `readelf -lW` / `-n`, on a PIE, a non-PIE, a shared
/// library (with and without symbols) and this Rust test binary: every `PT_LOAD` byte maps to
/// `p_offset + (addr - p_vaddr)` and back the way [`ElfFile::file_offset_to_addr`] goes.
#[test]
fn elf_layout_matches_readelf() {
    let f = fixtures();
    let exe = std::env::current_exe().unwrap();
    let paths = [&f.pie, &f.nopie, &f.lib, &f.lib_stripped, &exe];
    let mut saw_shifted = false;
    for path in paths {
        let layout = ElfLayout::read(path).unwrap();
        let elf = ElfFile::open(path).unwrap();
        assert_eq!(
            layout.build_id().map(hex),
            readelf_build_id(path),
            "{}",
            path.display()
        );
        assert_eq!(layout.build_id(), elf.build_id(), "{}", path.display());
        let loads = load_segments(path);
        assert!(loads.len() >= 2, "{}: {loads:?}", path.display());
        for &(off, vaddr, filesz, memsz) in &loads {
            if filesz == 0 {
                continue;
            }
            saw_shifted |= off != vaddr;
            for delta in [0, filesz / 2, filesz - 1] {
                let got = layout.addr_to_file_offset(SymbolAddr(vaddr + delta));
                assert_eq!(
                    got,
                    Some(FileOffset(off + delta)),
                    "{}: address {:#x}",
                    path.display(),
                    vaddr + delta
                );
                assert_eq!(
                    elf.file_offset_to_addr(got.unwrap()),
                    Some(SymbolAddr(vaddr + delta)),
                    "{}: the recorder's translation does not come back",
                    path.display()
                );
            }
            if memsz > filesz {
                assert_eq!(
                    layout.addr_to_file_offset(SymbolAddr(vaddr + filesz)),
                    None,
                    "{}: .bss has no file offset",
                    path.display()
                );
            }
        }
        let end = loads.iter().map(|&(_, v, _, m)| v + m).max().unwrap();
        assert_eq!(
            layout.addr_to_file_offset(SymbolAddr(end + 0x10_0000)),
            None
        );
    }
    assert!(saw_shifted, "no segment with p_offset != p_vaddr");
    // The non-PIE is linked at 0x400000: its addresses are far from their offsets.
    let layout = ElfLayout::read(&f.nopie).unwrap();
    let text = load_segments(&f.nopie)
        .into_iter()
        .find(|&(o, v, _, _)| o != 0 && v >= 0x400000)
        .unwrap();
    assert_eq!(
        layout.addr_to_file_offset(SymbolAddr(text.1 + 5)),
        Some(FileOffset(text.0 + 5))
    );
    assert_eq!(layout.addr_to_file_offset(SymbolAddr(text.0 + 5)), None);
}

#[test]
fn build_id_matches_readelf() {
    let f = fixtures();
    let mut paths = vec![
        f.pie.clone(),
        f.nopie.clone(),
        f.lib.clone(),
        f.lib_stripped.clone(),
    ];
    paths.extend(f.cxx.clone());
    for path in paths {
        let expected = readelf_build_id(&path).expect("fixtures are linked with --build-id");
        let elf = ElfFile::open(&path).unwrap();
        assert_eq!(
            elf.build_id().map(hex),
            Some(expected),
            "{}",
            path.display()
        );
    }
    assert_eq!(
        ElfFile::open(&f.notype).unwrap().build_id().map(hex),
        readelf_build_id(&f.notype)
    );
}

/// End to end: run the PIE (linked against the .so), read the runtime
/// addresses it prints and its own /proc/self/maps, and symbolize them the
/// way the profiler does: addr - map_start + pgoff -> vaddr -> symbol.
#[test]
fn runtime_addresses_resolve_through_mappings() {
    let f = fixtures();
    let out = Command::new(&f.pie).output().expect("run fixture");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut maps = Vec::new();
    let mut probes = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("ADDR ") {
            let (name, addr) = rest.split_once(' ').unwrap();
            probes.push((
                name.to_string(),
                u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap(),
            ));
            continue;
        }
        // 5583c6080000-5583c6081000 r-xp 00001000 08:01 123 /path
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() == 6 && fields[0].contains('-') {
            let (lo, hi) = fields[0].split_once('-').unwrap();
            let lo = u64::from_str_radix(lo, 16).unwrap();
            let hi = u64::from_str_radix(hi, 16).unwrap();
            let pgoff = u64::from_str_radix(fields[2], 16).unwrap();
            maps.push((lo, hi, pgoff, fields[5].to_string()));
        }
    }
    assert_eq!(probes.len(), 5, "{text}");
    for (name, addr) in probes {
        let (lo, _, pgoff, path) = maps
            .iter()
            .find(|(lo, hi, _, _)| addr >= *lo && addr < *hi)
            .unwrap_or_else(|| panic!("{name} at {addr:#x} is in no mapping"));
        let elf = ElfFile::open(Path::new(path)).unwrap();
        for delta in [0, 1] {
            let vaddr = elf
                .file_offset_to_addr(FileOffset(addr + delta - lo + pgoff))
                .unwrap();
            assert_eq!(
                name_at(&elf, vaddr.0),
                Some(name.as_str()),
                "{name}+{delta} via {path}"
            );
        }
    }
}
