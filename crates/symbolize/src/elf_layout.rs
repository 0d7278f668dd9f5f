//! The cheap facts of an ELF file: its build-id and `PT_LOAD` segments, without its symbol
//! tables or DWARF.
//!
//! Enough to key a [`crate::FrameCache`] (build-id + file offset) for addresses given in the
//! file's own address space ([`SymbolAddr`], as `addr2line -e` takes them) before deciding
//! whether the file has to be opened for symbolization at all.

use std::path::Path;

use crate::address::{FileOffset, SymbolAddr};
use crate::elf::{map_file, ElfFile};
use crate::error::Error;

/// An ELF file's build-id and `PT_LOAD` segments.
///
/// Reading one touches the ELF header, the program and section headers and the build-id
/// note only: no symbol table is parsed and no DWARF is read. The translation between
/// [`SymbolAddr`] and [`FileOffset`] is the one [`ElfFile::file_offset_to_addr`] (and so
/// [`crate::FileSymbolizer::file_offset_to_addr`] for a readable binary) uses, so frame-cache
/// keys computed here match those the recorder writes.
pub struct ElfLayout {
    /// Parsed without symbol tables: only `build_id` and the segments are meaningful.
    elf: ElfFile,
}

impl ElfLayout {
    /// Map the file at `path` and read its build-id and `PT_LOAD` segments. Errors name
    /// the path.
    pub fn read(path: &Path) -> Result<ElfLayout, Error> {
        let map = map_file(path)?;
        Self::parse(&map, &path.display().to_string())
    }

    /// [`ElfLayout::read`] from an ELF image held in memory; `name` is used in errors.
    ///
    /// Copies what it needs, so `data` may be dropped afterwards.
    pub fn parse(data: &[u8], name: &str) -> Result<ElfLayout, Error> {
        Ok(ElfLayout {
            elf: ElfFile::parse_headers(data, name)?,
        })
    }

    /// The GNU build-id (`.note.gnu.build-id` or a `PT_NOTE`), if present: the same bytes
    /// as [`ElfFile::build_id`].
    pub fn build_id(&self) -> Option<&[u8]> {
        self.elf.build_id()
    }

    /// The file offset of the byte at `addr`: `p_offset + (addr - p_vaddr)` for the
    /// `PT_LOAD` segment whose file-backed part (`p_filesz`) contains it.
    ///
    /// None when no segment's file bytes hold `addr` (outside every segment, or in a
    /// zero-filled tail such as `.bss`), and when the offset would translate back to another
    /// address (overlapping segments). A result always round-trips through
    /// [`ElfLayout::file_offset_to_addr`].
    pub fn addr_to_file_offset(&self, addr: SymbolAddr) -> Option<FileOffset> {
        self.elf.addr_to_file_offset(addr)
    }

    /// Translate a file offset to the file's virtual address; see
    /// [`ElfFile::file_offset_to_addr`].
    pub fn file_offset_to_addr(&self, offset: FileOffset) -> Option<SymbolAddr> {
        self.elf.file_offset_to_addr(offset)
    }
}

impl std::fmt::Debug for ElfLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfLayout")
            .field("name", &self.elf.name())
            .field("build_id", &self.elf.build_id().map(crate::error::hex))
            .field("segments", &self.elf.load_segments().count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PT_LOAD` as (offset, vaddr, filesz, memsz).
    type Load = (u64, u64, u64, u64);

    /// A minimal little-endian ELF64 executable: `loads` as `PT_LOAD` headers, then a
    /// `PT_NOTE` with a GNU build-id note when `build_id` is given. No sections.
    fn elf64(loads: &[Load], build_id: Option<&[u8]>) -> Vec<u8> {
        const EHDR: usize = 64;
        const PHDR: usize = 56;
        let phnum = loads.len() + usize::from(build_id.is_some());
        let note_at = EHDR + phnum * PHDR;
        let mut d = vec![0u8; EHDR];
        d[..4].copy_from_slice(b"\x7fELF");
        d[4] = 2; // ELFCLASS64
        d[5] = 1; // little endian
        d[6] = 1; // EV_CURRENT
        d[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        d[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        d[20..24].copy_from_slice(&1u32.to_le_bytes());
        d[32..40].copy_from_slice(&(EHDR as u64).to_le_bytes()); // e_phoff
        d[52..54].copy_from_slice(&(EHDR as u16).to_le_bytes());
        d[54..56].copy_from_slice(&(PHDR as u16).to_le_bytes());
        d[56..58].copy_from_slice(&(phnum as u16).to_le_bytes());
        let phdr = |d: &mut Vec<u8>, p_type: u32, (off, vaddr, filesz, memsz): Load, align| {
            d.extend_from_slice(&p_type.to_le_bytes());
            d.extend_from_slice(&4u32.to_le_bytes()); // PF_R
            for v in [off, vaddr, vaddr, filesz, memsz, align] {
                d.extend_from_slice(&v.to_le_bytes());
            }
        };
        for &l in loads {
            phdr(&mut d, 1, l, 0x1000);
        }
        if let Some(id) = build_id {
            let size = 16 + id.len().next_multiple_of(4) as u64;
            phdr(&mut d, 4, (note_at as u64, 0, size, size), 4);
            d.extend_from_slice(&4u32.to_le_bytes()); // namesz
            d.extend_from_slice(&(id.len() as u32).to_le_bytes());
            d.extend_from_slice(&3u32.to_le_bytes()); // NT_GNU_BUILD_ID
            d.extend_from_slice(b"GNU\0");
            d.extend_from_slice(id);
            d.resize(d.len().next_multiple_of(4), 0);
        }
        d
    }

    fn off(layout: &ElfLayout, addr: u64) -> Option<u64> {
        layout.addr_to_file_offset(SymbolAddr(addr)).map(|o| o.0)
    }

    #[test]
    fn non_pie_addresses_map_into_their_segment() {
        // An older ld's non-PIE layout: text at 0x400000, data (with .bss) at 0x600e10.
        let id = [0xde, 0xad, 0xbe, 0xef, 0x01];
        let data = elf64(
            &[
                (0, 0x400000, 0x70c, 0x70c),
                (0xe10, 0x600e10, 0x230, 0x1000),
            ],
            Some(&id),
        );
        let layout = ElfLayout::parse(&data, "nopie").unwrap();
        assert_eq!(layout.build_id(), Some(&id[..]));
        assert_eq!(off(&layout, 0x400000), Some(0));
        assert_eq!(off(&layout, 0x400526), Some(0x526));
        assert_eq!(off(&layout, 0x40070b), Some(0x70b));
        assert_eq!(off(&layout, 0x40070c), None, "past the text segment");
        assert_eq!(off(&layout, 0x600e10), Some(0xe10));
        assert_eq!(off(&layout, 0x60103f), Some(0x103f));
        assert_eq!(off(&layout, 0x601040), None, ".bss has no file bytes");
        assert_eq!(off(&layout, 0x3fffff), None);
        assert_eq!(off(&layout, 0), None);
        assert_eq!(off(&layout, u64::MAX), None);
    }

    #[test]
    fn pie_offsets_shifted_from_addresses() {
        // A PIE linked with -z separate-code: the data segment's offset is not its address.
        let data = elf64(
            &[
                (0, 0, 0x5e0, 0x5e0),
                (0x1000, 0x1000, 0x1d1, 0x1d1),
                (0x2000, 0x2000, 0x108, 0x108),
                (0x2df0, 0x3df0, 0x220, 0x228),
            ],
            None,
        );
        let layout = ElfLayout::parse(&data, "pie").unwrap();
        assert_eq!(layout.build_id(), None);
        assert_eq!(off(&layout, 0x1139), Some(0x1139));
        assert_eq!(off(&layout, 0x3e00), Some(0x2e00));
        assert_eq!(off(&layout, 0x3000), None, "between segments");
        for addr in [0x10, 0x1139, 0x2100, 0x3df0, 0x400f] {
            let o = layout.addr_to_file_offset(SymbolAddr(addr)).unwrap();
            assert_eq!(layout.file_offset_to_addr(o), Some(SymbolAddr(addr)));
        }
    }

    #[test]
    fn offsets_that_do_not_round_trip_are_refused() {
        // Two segments holding the same file bytes: an offset names the first one's address.
        let data = elf64(
            &[
                (0x1000, 0x401000, 0x100, 0x100),
                (0x1000, 0x801000, 0x100, 0x100),
            ],
            None,
        );
        let layout = ElfLayout::parse(&data, "overlap").unwrap();
        assert_eq!(off(&layout, 0x401010), Some(0x1010));
        assert_eq!(off(&layout, 0x801010), None);
    }

    #[test]
    fn not_elf_is_an_error() {
        assert!(matches!(
            ElfLayout::parse(b"#!/bin/sh\n", "script"),
            Err(Error::NotElf { .. })
        ));
        let mut data = elf64(&[(0, 0, 0x10, 0x10)], None);
        data.truncate(70);
        assert!(ElfLayout::parse(&data, "cut").is_err());
        assert!(ElfLayout::read(Path::new("/nonexistent/profctl-elf-layout")).is_err());
    }
}
