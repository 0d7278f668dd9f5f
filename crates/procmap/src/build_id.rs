//! The GNU build-id of an ELF file, read from its note segments with bounded work (the file
//! may belong to anyone).

use std::fs::File;

use object::read::elf::{FileHeader, ProgramHeader};
use object::{elf, Endianness, FileKind, ReadCache, ReadRef};

/// Most program headers looked at.
const MAX_PROGRAM_HEADERS: u32 = 256;
/// Most bytes of note segments read, over the whole file: a file with more is refused.
const MAX_NOTE_BYTES: u64 = 64 * 1024;

/// The GNU build-id in `file`'s `PT_NOTE` segments (where the kernel reads it from), if it is
/// an ELF file with one and its headers and notes are of a sane size.
pub(crate) fn read_build_id(file: &File) -> Option<Vec<u8>> {
    let data = ReadCache::new(file);
    match FileKind::parse(&data).ok()? {
        FileKind::Elf32 => from_notes::<elf::FileHeader32<Endianness>, _>(&data),
        FileKind::Elf64 => from_notes::<elf::FileHeader64<Endianness>, _>(&data),
        _ => None,
    }
}

fn from_notes<'data, Elf, R>(data: R) -> Option<Vec<u8>>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    if header.phnum(endian, data).ok()? as u32 > MAX_PROGRAM_HEADERS {
        return None;
    }
    let mut budget = MAX_NOTE_BYTES;
    for segment in header.program_headers(endian, data).ok()? {
        if segment.p_type(endian) != elf::PT_NOTE {
            continue;
        }
        let size: u64 = segment.p_filesz(endian).into();
        budget = budget.checked_sub(size)?;
        let Ok(Some(mut notes)) = segment.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                return Some(note.desc().to_vec());
            }
        }
    }
    None
}

/// Build a tiny executable with the given build-id (hex) with `cc`.
#[cfg(test)]
pub(crate) fn compile_with_build_id(dir: &std::path::Path, hex: &str) -> std::path::PathBuf {
    use std::io::Write;
    let out = dir.join(format!("tiny-{hex}"));
    let mut cc = std::process::Command::new("cc")
        .args(["-x", "c", "-", "-o"])
        .arg(&out)
        .arg(format!("-Wl,--build-id=0x{hex}"))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("cc (a C compiler) is needed to build a test binary");
    cc.stdin
        .take()
        .unwrap()
        .write_all(b"int main(void) { return 0; }\n")
        .unwrap();
    assert!(cc.wait().unwrap().success(), "cc failed");
    out
}

/// Bytes of a hex string.
#[cfg(test)]
pub(crate) fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn reads_the_build_id_and_refuses_absurd_notes() {
        let dir = tempfile::tempdir().unwrap();
        let path = compile_with_build_id(dir.path(), ID);
        let file = File::open(&path).unwrap();
        assert_eq!(read_build_id(&file), Some(unhex(ID)));
        // Every PT_NOTE claims 8 MiB, and the file (sparse) is that long: the notes are
        // readable, and the build-id still comes first in them, but the file is refused
        // (ELF64, little-endian: e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38;
        // p_filesz at 32 in a program header).
        const HUGE: u64 = 8 << 20;
        let mut bytes = std::fs::read(&path).unwrap();
        let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
        let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().unwrap()) as usize;
        let (size, count) = (u16_at(&bytes, 0x36), u16_at(&bytes, 0x38));
        let mut patched = 0;
        for i in 0..count {
            let ph = phoff + i * size;
            if u32::from_le_bytes(bytes[ph..ph + 4].try_into().unwrap()) == elf::PT_NOTE {
                bytes[ph + 32..ph + 40].copy_from_slice(&HUGE.to_le_bytes());
                patched += 1;
            }
        }
        assert!(patched > 0);
        let huge = dir.path().join("huge-notes");
        std::fs::write(&huge, &bytes).unwrap();
        let len = bytes.len() as u64 + HUGE;
        File::options()
            .write(true)
            .open(&huge)
            .unwrap()
            .set_len(len)
            .unwrap();
        assert_eq!(read_build_id(&File::open(&huge).unwrap()), None);
        // Not ELF, or empty.
        let text = dir.path().join("text");
        std::fs::write(&text, "#!/bin/sh\n").unwrap();
        assert_eq!(read_build_id(&File::open(&text).unwrap()), None);
        std::fs::write(&text, "").unwrap();
        assert_eq!(read_build_id(&File::open(&text).unwrap()), None);
    }
}
