//! Malformed input gives an error naming the file, never a panic.

mod common;

use std::io::Write;

use common::fixtures;
use symbolize::{ElfFile, Error, SymbolAddr};

fn pie_bytes() -> Vec<u8> {
    std::fs::read(&fixtures().pie).unwrap()
}

fn assert_err_names(result: Result<ElfFile, Error>, name: &str) -> Error {
    let err = result.expect_err("expected an error");
    assert!(
        err.to_string().contains(name),
        "error does not name {name}: {err}"
    );
    err
}

fn put_u64(data: &mut [u8], at: usize, v: u64) {
    data[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u16(data: &mut [u8], at: usize, v: u16) {
    data[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn truncated() {
    let data = pie_bytes();
    for len in [
        4,
        5,
        16,
        63,
        64,
        65,
        200,
        1000,
        data.len() / 2,
        data.len() - 64,
        data.len() - 1,
    ] {
        assert_err_names(ElfFile::parse(&data[..len], "trunc.elf"), "trunc.elf");
    }
    // Every prefix: no panic (a prefix may parse when it keeps what is needed).
    for len in (0..data.len()).step_by(97) {
        let _ = ElfFile::parse(&data[..len], "prefix");
    }
}

#[test]
fn garbage_and_not_elf() {
    for data in [
        &b""[..],
        b"\x7fEL",
        b"MZ\x90\x00 not an elf at all",
        &[0u8; 4096],
    ] {
        let err = assert_err_names(ElfFile::parse(data, "garbage.bin"), "garbage.bin");
        assert!(matches!(err, Error::NotElf { .. }), "{err:?}");
    }
    let mut seed = 0xdead_beef_u64;
    for _ in 0..200 {
        let mut data = b"\x7fELF".to_vec();
        for _ in 0..512 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            data.push(seed as u8);
        }
        let _ = ElfFile::parse(&data, "random");
    }
    // Bad class / endianness bytes.
    let mut data = pie_bytes();
    data[4] = 9;
    assert_err_names(ElfFile::parse(&data, "badclass"), "badclass");
}

#[test]
fn header_points_past_end() {
    let good = pie_bytes();
    let len = good.len() as u64;
    // e_shoff (0x28) past the end.
    let mut d = good.clone();
    put_u64(&mut d, 0x28, len + 0x1000);
    assert_err_names(ElfFile::parse(&d, "shoff.elf"), "shoff.elf");
    // e_shnum (0x3c) far too large.
    let mut d = good.clone();
    put_u16(&mut d, 0x3c, 0xfff0);
    assert_err_names(ElfFile::parse(&d, "shnum.elf"), "shnum.elf");
    // e_phoff (0x20) past the end.
    let mut d = good.clone();
    put_u64(&mut d, 0x20, len - 8);
    assert_err_names(ElfFile::parse(&d, "phoff.elf"), "phoff.elf");
    // .symtab's sh_offset past the end.
    let shoff = u64::from_le_bytes(good[0x28..0x30].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(good[0x3c..0x3e].try_into().unwrap()) as usize;
    let symtab = (0..shnum)
        .map(|i| shoff + i * 64)
        .find(|&h| u32::from_le_bytes(good[h + 4..h + 8].try_into().unwrap()) == 2)
        .expect("fixture has .symtab");
    let mut d = good.clone();
    put_u64(&mut d, symtab + 0x18, len + 4096);
    assert_err_names(ElfFile::parse(&d, "symtab.elf"), "symtab.elf");
}

#[test]
fn random_byte_flips_never_panic() {
    let good = pie_bytes();
    let mut seed = 0x1234_5678_u64;
    let mut ok = 0;
    for _ in 0..1500 {
        let mut d = good.clone();
        for _ in 0..4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Mostly hit the headers, where damage matters.
            let at = if seed % 2 == 0 {
                (seed >> 8) as usize % 64
            } else {
                (seed >> 8) as usize % d.len()
            };
            d[at] ^= (seed >> 40) as u8 | 1;
        }
        if let Ok(elf) = ElfFile::parse(&d, "flipped") {
            ok += 1;
            let _ = elf.symbol(SymbolAddr(0x1139));
            let _ = elf.build_id();
        }
    }
    assert!(ok > 0, "some flips should leave a parseable file");
}

#[test]
fn unaligned_input_is_fine() {
    let good = pie_bytes();
    let mut buf = vec![0u8; good.len() + 1];
    buf[1..].copy_from_slice(&good);
    let elf = ElfFile::parse(&buf[1..], "unaligned").unwrap();
    let aligned = ElfFile::parse(&good, "aligned").unwrap();
    assert_eq!(elf.symbol_count(), aligned.symbol_count());
    assert_eq!(elf.build_id(), aligned.build_id());
}

#[test]
fn open_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.so");
    let err = assert_err_names(ElfFile::open(&missing), "missing.so");
    assert!(matches!(err, Error::Io { .. }));
    let err = assert_err_names(ElfFile::open(dir.path()), &dir.path().display().to_string());
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    let empty = dir.path().join("empty.so");
    std::fs::File::create(&empty).unwrap();
    assert!(matches!(
        assert_err_names(ElfFile::open(&empty), "empty.so"),
        Error::NotElf { .. }
    ));
    let trunc = dir.path().join("trunc.so");
    std::fs::File::create(&trunc)
        .unwrap()
        .write_all(&pie_bytes()[..300])
        .unwrap();
    assert!(matches!(
        assert_err_names(ElfFile::open(&trunc), "trunc.so"),
        Error::Parse { .. }
    ));
}
