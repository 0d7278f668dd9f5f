//! PLT stubs are named `function@plt`, at the addresses objdump gives them, in binaries with a
//! classic `.plt` and with an IBT `.plt.sec`. (Stubs in `.plt.got`, for functions whose GOT
//! slot is filled at load time, are not named yet: they are left out here.)

#![cfg(target_arch = "x86_64")]

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection};
use symbolize::{ElfFile, SymbolAddr};

/// `(address, name)` of every `<name@plt>` objdump prints for `bin`.
fn objdump_plt(bin: &Path) -> Vec<(u64, String)> {
    let out = Command::new("objdump")
        .arg("-d")
        .arg(bin)
        .output()
        .expect("run objdump (binutils)");
    assert!(out.status.success(), "objdump -d {} failed", bin.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix(">:")?.strip_suffix("@plt")?;
            Some((u64::from_str_radix(addr.trim(), 16).ok()?, name.to_string()))
        })
        .collect()
}

fn check(bin: &Path) -> usize {
    let data = std::fs::read(bin).expect("read binary");
    let elf = ElfFile::parse(&data, &bin.display().to_string()).expect("parse");
    let file = object::File::parse(&*data).expect("parse with object");
    let stub_sections: Vec<std::ops::Range<u64>> = [".plt", ".plt.sec"]
        .iter()
        .filter_map(|n| file.section_by_name(n))
        .map(|s| s.address()..s.address() + s.size())
        .collect();
    let expected: Vec<(u64, String)> = objdump_plt(bin)
        .into_iter()
        .filter(|(a, _)| stub_sections.iter().any(|r| r.contains(a)))
        .collect();
    for (addr, name) in &expected {
        let want = format!("{name}@plt");
        for at in [*addr, addr + 8] {
            let got = elf.symbol(SymbolAddr(at)).map(|s| s.name);
            assert_eq!(
                got,
                Some(want.as_str()),
                "{}: address {at:#x} (stub at {addr:#x})",
                bin.display()
            );
        }
    }
    expected.len()
}

#[test]
fn plt_stubs_are_named_as_objdump_names_them() {
    let dir = std::env::temp_dir().join(format!("symbolize-plt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
         int main(int c, char **v) { puts(v[0]); return (int)strlen(getenv(\"HOME\") ?: \"\") + c; }\n",
    )
    .expect("write prog.c");
    let mut checked = 0;
    for (name, flags) in [
        ("classic", &["-O2", "-fcf-protection=none"][..]),
        ("ibt", &["-O2", "-fcf-protection=full", "-Wl,-z,ibtplt"][..]),
        ("lazy", &["-O2", "-Wl,-z,lazy"][..]),
    ] {
        let bin = dir.join(name);
        let status = Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc {flags:?} failed");
        let n = check(&bin);
        assert!(n >= 3, "{name}: objdump shows only {n} PLT stubs");
        checked += n;
    }
    assert!(checked > 0);
    let _ = std::fs::remove_dir_all(&dir);
}
