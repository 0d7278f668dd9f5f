//! Hostile ELF files built from a real binary (issue 11, item 4/6), shared by the symbolize
//! tests (`tests/hostile_caps.rs`) and profctl's hostile-user test: compression bombs in DWARF
//! sections, sizes declared far beyond the data, a symbol table of many symbols sharing one
//! long name, and a `.gnu_debuglink` section. Built deterministically (no randomness) and
//! cheaply: a bomb is a repeated chunk of compressed stream, never the expanded data.

#![allow(dead_code)]

use std::io::Write;

/// `SHF_COMPRESSED`.
const SHF_COMPRESSED: u64 = 0x800;
/// `ELFCOMPRESS_ZLIB`, `ELFCOMPRESS_ZSTD`.
pub const ZLIB: u32 = 1;
/// See [`ZLIB`].
pub const ZSTD: u32 = 2;

fn u16_at(d: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(d[at..at + 2].try_into().unwrap())
}
fn u32_at(d: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(d[at..at + 4].try_into().unwrap())
}
fn u64_at(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}
fn put_u64(d: &mut [u8], at: usize, v: u64) {
    d[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The offset of section `name`'s header in a little-endian ELF64 image.
pub fn section_header(elf: &[u8], name: &str) -> Option<usize> {
    let shoff = u64_at(elf, 0x28) as usize;
    let shnum = u16_at(elf, 0x3c) as usize;
    let shstrndx = u16_at(elf, 0x3e) as usize;
    let strtab = u64_at(elf, shoff + shstrndx * 64 + 24) as usize;
    (0..shnum).map(|i| shoff + i * 64).find(|&h| {
        let at = strtab + u32_at(elf, h) as usize;
        elf[at..].split(|&b| b == 0).next() == Some(name.as_bytes())
    })
}

/// Append `contents` (8-aligned) to `elf` and point section header `hdr` at it.
fn repoint(elf: &mut Vec<u8>, hdr: usize, contents: &[u8]) {
    while elf.len() % 8 != 0 {
        elf.push(0);
    }
    let off = elf.len() as u64;
    elf.extend_from_slice(contents);
    put_u64(elf, hdr + 24, off);
    put_u64(elf, hdr + 32, contents.len() as u64);
}

/// `elf` with section `name` replaced by a compressed one: an ELF compression header of
/// type `kind` declaring `declared` bytes, then `stream`.
pub fn with_compressed_section(
    elf: &[u8],
    name: &str,
    kind: u32,
    declared: u64,
    stream: &[u8],
) -> Vec<u8> {
    let mut out = elf.to_vec();
    let hdr = section_header(&out, name).unwrap_or_else(|| panic!("no section {name}"));
    let mut contents = Vec::with_capacity(24 + stream.len());
    contents.extend_from_slice(&kind.to_le_bytes());
    contents.extend_from_slice(&0u32.to_le_bytes());
    contents.extend_from_slice(&declared.to_le_bytes());
    contents.extend_from_slice(&1u64.to_le_bytes());
    contents.extend_from_slice(stream);
    repoint(&mut out, hdr, &contents);
    let flags = u64_at(&out, hdr + 8) | SHF_COMPRESSED;
    put_u64(&mut out, hdr + 8, flags);
    out
}

/// A zlib stream of about `compressed` bytes expanding to about 1000 times as many zeros,
/// without ever holding them: a fully flushed chunk of 1 MiB of zeros is repeated (it does not
/// end, so it has no checksum; a decoder must stop on its own limit first).
pub fn zlib_bomb(compressed: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let zeros = vec![0u8; 1 << 20];
    let mut c = Compress::new(Compression::best(), true);
    let mut first = Vec::with_capacity(1 << 20);
    c.compress_vec(&zeros, &mut first, FlushCompress::Full)
        .unwrap();
    let mut chunk = Vec::with_capacity(1 << 20);
    c.compress_vec(&zeros, &mut chunk, FlushCompress::Full)
        .unwrap();
    let mut out = first;
    while out.len() < compressed {
        out.extend_from_slice(&chunk);
    }
    out
}

/// A zlib stream of `data`.
pub fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A zstd frame of `compressed` bytes or so made of RLE blocks of 128 KiB each: 4 bytes
/// expanding to 128 KiB (a 66 KB frame expands to 2.1 GB), declaring no content size.
pub fn zstd_bomb(compressed: usize) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
    let blocks = compressed.saturating_sub(out.len()) / 4;
    for i in 0..blocks.max(1) {
        let last = u32::from(i + 1 == blocks.max(1));
        let header = ((128u32 << 10) << 3) | (1 << 1) | last;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(0);
    }
    out
}

/// `elf` with its `.symtab` replaced by `count` function symbols in `.text`, each at its own
/// address and every one named by the same `name_len`-byte string.
pub fn with_shared_long_names(elf: &[u8], count: usize, name_len: usize) -> Vec<u8> {
    let mut out = elf.to_vec();
    let text = section_header(&out, ".text").expect(".text");
    let shoff = u64_at(&out, 0x28) as usize;
    let text_index = ((text - shoff) / 64) as u16;
    let text_addr = u64_at(&out, text + 16);
    let text_size = u64_at(&out, text + 32);
    let symtab = section_header(&out, ".symtab").expect(".symtab");
    let strtab_index = u32_at(&out, symtab + 40) as usize;
    let strtab = shoff + strtab_index * 64;
    let mut strings = vec![0u8];
    strings.extend(std::iter::repeat_n(b'f', name_len));
    strings.push(0);
    repoint(&mut out, strtab, &strings);
    let mut syms = vec![0u8; 24]; // the null symbol
    for i in 0..count {
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&1u32.to_le_bytes());
        s[4] = 0x12; // STB_GLOBAL, STT_FUNC
        s[6..8].copy_from_slice(&text_index.to_le_bytes());
        let addr = text_addr + (i as u64 % text_size.max(1));
        s[8..16].copy_from_slice(&addr.to_le_bytes());
        s[16..24].copy_from_slice(&1u64.to_le_bytes());
        syms.extend_from_slice(&s);
    }
    repoint(&mut out, symtab, &syms);
    out
}

/// The contents of a `.gnu_debuglink` section naming `file` with checksum `crc`.
pub fn debuglink_contents(file: &str, crc: u32) -> Vec<u8> {
    let mut v = file.as_bytes().to_vec();
    v.push(0);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v.extend_from_slice(&crc.to_le_bytes());
    v
}
