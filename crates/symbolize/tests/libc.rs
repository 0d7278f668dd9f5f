//! Symbolize the system libc against `readelf --dyn-syms`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{hex, readelf_build_id, run};
use symbolize::{ElfFile, SymbolAddr};

const CANDIDATES: &[&str] = &[
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/aarch64-linux-gnu/libc.so.6",
    "/usr/lib64/libc.so.6",
    "/lib64/libc.so.6",
];

fn libc_path() -> Option<&'static Path> {
    CANDIDATES.iter().map(Path::new).find(|p| p.exists())
}

/// Defined dynamic symbols: address -> (names, FUNC sizes).
fn dyn_syms(path: &Path) -> (BTreeMap<u64, BTreeSet<String>>, BTreeMap<u64, u64>) {
    let out = run(
        "readelf",
        &["--dyn-syms", "-W", &path.display().to_string()],
    );
    let mut names: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let mut funcs = BTreeMap::new();
    for line in out.lines() {
        // Num: Value Size Type Bind Vis Ndx Name
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !f[0].ends_with(':') || f[6] == "UND" {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(f[1], 16) else {
            continue;
        };
        let size = f[2].parse::<u64>().unwrap_or(0);
        let name = f[7].split('@').next().unwrap().to_string();
        if addr == 0 {
            continue;
        }
        names.entry(addr).or_default().insert(name);
        if f[3] == "FUNC" && size > 1 {
            funcs.insert(addr, size);
        }
    }
    (names, funcs)
}

#[test]
fn libc_exported_functions() {
    let Some(path) = libc_path() else {
        eprintln!("skipped: no libc.so.6 found");
        return;
    };
    let elf = ElfFile::open(path).unwrap();
    let (names, funcs) = dyn_syms(path);
    assert!(
        funcs.len() > 500,
        "expected many FUNC symbols, got {}",
        funcs.len()
    );
    let step = funcs.len() / 60;
    let picked: Vec<(u64, u64)> = funcs
        .iter()
        .step_by(step.max(1))
        .map(|(&a, &s)| (a, s))
        .collect();
    assert!(picked.len() >= 50);
    for (addr, size) in picked {
        for probe in [addr + 1, addr + size - 1] {
            let sym = elf
                .symbol(SymbolAddr(probe))
                .unwrap_or_else(|| panic!("no symbol at {probe:#x} ({:?})", names[&addr]));
            assert_eq!(
                sym.start,
                SymbolAddr(addr),
                "{probe:#x}: {sym:?} vs {:?}",
                names[&addr]
            );
            assert!(
                names[&addr].contains(sym.name),
                "{} not among {:?}",
                sym.name,
                names[&addr]
            );
        }
    }
    // Some well-known names (no aliases of these are expected).
    for name in ["qsort", "getpid", "fopen"] {
        let Some((&addr, _)) = names.iter().find(|(_, n)| n.contains(name)) else {
            continue;
        };
        let sym = elf.symbol(SymbolAddr(addr + 1)).unwrap();
        assert!(names[&addr].contains(sym.name), "{name}: got {}", sym.name);
    }
    if let Some(id) = readelf_build_id(path) {
        assert_eq!(elf.build_id().map(hex), Some(id));
    }
}
