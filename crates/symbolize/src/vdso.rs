//! The vDSO image of this process: the kernel maps the same one into every 64-bit process,
//! so frames in any process's `[vdso]` are named (and unwound) from this copy.

use std::io::{Error, ErrorKind};
use std::os::unix::fs::FileExt;

/// The ELF image of this process's vDSO, read through `/proc/self/mem`.
pub fn own_vdso_image() -> std::io::Result<Vec<u8>> {
    let base = crate::sys::vdso_base()
        .ok_or_else(|| Error::new(ErrorKind::NotFound, "no vDSO in the auxiliary vector"))?;
    let mem = std::fs::File::open("/proc/self/mem")?;
    // The image is a whole ELF file ending with its section headers (ELF64 header fields:
    // e_shoff at 0x28, e_shentsize at 0x3a, e_shnum at 0x3c).
    let mut header = [0u8; 64];
    mem.read_exact_at(&mut header, base)?;
    if &header[..4] != b"\x7fELF" {
        return Err(Error::new(
            ErrorKind::InvalidData,
            "the vDSO is not an ELF image",
        ));
    }
    let field = |at: usize, len: usize| {
        let mut bytes = [0u8; 8];
        bytes[..len].copy_from_slice(&header[at..at + len]);
        u64::from_le_bytes(bytes)
    };
    let size = field(0x28, 8) + field(0x3a, 2) * field(0x3c, 2);
    if !(64..=1 << 20).contains(&size) {
        return Err(Error::new(ErrorKind::InvalidData, "implausible vDSO size"));
    }
    let mut bytes = vec![0u8; size as usize];
    mem.read_exact_at(&mut bytes, base)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image read through the auxiliary vector is the whole `[vdso]` mapping's ELF file.
    #[test]
    fn own_vdso_is_the_mapped_elf_image() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(range) = maps
            .lines()
            .find(|l| l.ends_with("[vdso]"))
            .and_then(|l| l.split_whitespace().next())
        else {
            eprintln!("skipped: this process has no vDSO");
            return;
        };
        let (start, end) = range.split_once('-').unwrap();
        let mapped =
            u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap();
        let bytes = own_vdso_image().expect("the vDSO image");
        assert!(bytes.len() as u64 <= mapped && bytes.len() as u64 > mapped / 4);
        let elf = crate::ElfFile::parse(&bytes, "[vdso]").expect("the vDSO parses");
        assert!(elf.symbol_count() > 0, "the vDSO has symbols");
    }
}
