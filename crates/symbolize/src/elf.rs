//! One ELF file's symbols, load segments and build-id.

use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, FileKind};

use crate::address::{FileOffset, SymbolAddr};
use crate::error::Error;
use crate::table::{Binding, Bytes, Candidate, Table, TableBuilder};

/// A function symbol found by [`ElfFile::symbol`].
#[derive(Clone, Copy, Debug)]
pub struct Symbol<'a> {
    /// The raw (mangled) name; see [`crate::demangle()`].
    pub name: &'a str,
    /// The symbol's address.
    pub start: SymbolAddr,
    /// The size from the symbol table; 0 when the table gives none.
    pub size: u64,
}

/// A `PT_LOAD` program header.
#[derive(Clone, Copy, Debug)]
struct LoadSegment {
    offset: u64,
    filesz: u64,
    memsz: u64,
    vaddr: u64,
}

/// A parsed ELF file: what symbolization needs, copied out of the file.
///
/// Holds no reference to the file or its mapping once built.
pub struct ElfFile {
    name: String,
    build_id: Option<Vec<u8>>,
    segments: Vec<LoadSegment>,
    table: Table,
}

impl ElfFile {
    /// Map the file at `path` and parse it. Errors name the path.
    pub fn open(path: &Path) -> Result<ElfFile, Error> {
        let map = map_file(path)?;
        Self::parse(&map, &path.display().to_string())
    }

    /// Parse an ELF image held in memory; `name` is used in errors.
    ///
    /// Copies what it needs, so `data` may be dropped afterwards.
    pub fn parse(data: &[u8], name: &str) -> Result<ElfFile, Error> {
        Self::parse_with(data, name, Symbols::Parse)
    }

    /// [`ElfFile::parse`], taking the symbol table from `cache` (a directory, and the identity
    /// of the file `data` was mapped from) when an earlier process left it there for this file
    /// (same build-id, size, owner, device, inode and modification time), and leaving it there
    /// for the next when the table is large. Building libc's table (sorting thousands of symbols)
    /// costs a millisecond or more; mapping a cached one costs nothing until lookups.
    pub(crate) fn parse_cached(
        data: &[u8],
        name: &str,
        cache: Option<(&Path, FileIdentity)>,
    ) -> Result<ElfFile, Error> {
        match cache {
            Some((dir, id)) => Self::parse_with(data, name, Symbols::Cached(dir, id)),
            None => Self::parse(data, name),
        }
    }

    /// [`ElfFile::parse`] without the symbol tables (no symbols will be found): only the
    /// build-id and `PT_LOAD` segments, for [`crate::ElfLayout`].
    pub(crate) fn parse_headers(data: &[u8], name: &str) -> Result<ElfFile, Error> {
        Self::parse_with(data, name, Symbols::None)
    }

    fn parse_with(data: &[u8], name: &str, symbols: Symbols<'_>) -> Result<ElfFile, Error> {
        if !data.starts_with(&elf::ELFMAG) {
            return Err(Error::NotElf {
                name: name.to_owned(),
            });
        }
        // `object` reads ELF structures in place and needs them aligned.
        let copy;
        let data = if data.as_ptr().align_offset(8) == 0 {
            data
        } else {
            copy = AlignedCopy::new(data);
            copy.bytes()
        };
        let perr = |e: object::Error| Error::Parse {
            name: name.to_owned(),
            message: e.to_string(),
        };
        match FileKind::parse(data).map_err(perr)? {
            FileKind::Elf32 => parse_elf::<elf::FileHeader32<Endianness>>(data, name, symbols),
            FileKind::Elf64 => parse_elf::<elf::FileHeader64<Endianness>>(data, name, symbols),
            _ => Err(Error::Parse {
                name: name.to_owned(),
                message: "unsupported ELF class".into(),
            }),
        }
    }

    /// The name given at parse time (the path, for [`ElfFile::open`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of its symbol table (in memory, or mapped from the symbol cache).
    pub fn table_bytes(&self) -> u64 {
        self.table.bytes()
    }

    /// Let go of the resident pages of its symbol table when that is mapped from the symbol
    /// cache; lookups fault them back in.
    pub fn release_resident_pages(&self) {
        self.table.release_resident_pages();
    }

    /// The GNU build-id (`.note.gnu.build-id` or a `PT_NOTE`), if present.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// Translate a file offset to the virtual address the ELF file uses,
    /// through the `PT_LOAD` segment containing it (within `p_filesz`, or
    /// failing that within `p_memsz`).
    pub fn file_offset_to_addr(&self, offset: FileOffset) -> Option<SymbolAddr> {
        let off = offset.0;
        let within = |s: &&LoadSegment, len: u64| off >= s.offset && off - s.offset < len;
        let seg = self
            .segments
            .iter()
            .find(|s| within(s, s.filesz))
            .or_else(|| self.segments.iter().find(|s| within(s, s.memsz)))?;
        Some(SymbolAddr(seg.vaddr.wrapping_add(off - seg.offset)))
    }

    /// The inverse of [`ElfFile::file_offset_to_addr`]: `p_offset + (addr - p_vaddr)` for the
    /// `PT_LOAD` segment whose file-backed part (`p_filesz`) contains `addr`.
    ///
    /// None when no segment's file bytes hold `addr` (outside every segment, or in a
    /// zero-filled tail such as `.bss`), and when the offset would translate back to
    /// another address (overlapping segments): a result always round-trips.
    pub(crate) fn addr_to_file_offset(&self, addr: SymbolAddr) -> Option<FileOffset> {
        let a = addr.0;
        let seg = self
            .segments
            .iter()
            .find(|s| a >= s.vaddr && a - s.vaddr < s.filesz)?;
        let offset = FileOffset(seg.offset.checked_add(a - seg.vaddr)?);
        (self.file_offset_to_addr(offset) == Some(addr)).then_some(offset)
    }

    /// `PT_LOAD` segments as (virtual address, memory size), in file order.
    pub(crate) fn load_segments(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|s| (s.vaddr, s.memsz))
    }

    /// The function containing `addr`, if any.
    pub fn symbol(&self, addr: SymbolAddr) -> Option<Symbol<'_>> {
        let e = self.table.lookup(addr.0)?;
        Some(Symbol {
            name: self.table.name(&e),
            start: SymbolAddr(e.start),
            size: e.size,
        })
    }

    /// Number of distinct function addresses known (aliases count once).
    pub fn symbol_count(&self) -> usize {
        self.table.len()
    }
}

impl std::fmt::Debug for ElfFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfFile")
            .field("name", &self.name)
            .field("build_id", &self.build_id.as_deref().map(crate::error::hex))
            .field("segments", &self.segments)
            .field("symbols", &self.table.len())
            .finish()
    }
}

/// Which file on disk some bytes came from: what the on-disk caches are keyed by (with the
/// build-id), so that an entry made from one file never serves another. A file another user
/// made with root's libc's build-id differs from libc in owner, device and inode, and a file
/// rewritten in place in size or modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    uid: u32,
    /// The file's group (not part of the key): with `uid`, the owner's access.
    gid: u32,
}

impl FileIdentity {
    /// The identity of the file `meta` describes.
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileIdentity {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            uid: meta.uid(),
            gid: meta.gid(),
        }
    }

    /// The access of the file's owner (its uid and the file's group): what files found
    /// beside it are read with.
    pub(crate) fn owner(&self) -> procmap::Access {
        procmap::Access::user(self.uid, self.gid, Vec::new())
    }

    /// The owner's uid.
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    /// A file-name part naming this identity.
    pub(crate) fn key(&self) -> String {
        format!(
            "{}-u{}-{:x}-{}-{}",
            self.size, self.uid, self.dev, self.ino, self.mtime_ns
        )
    }
}

/// Map the regular, non-empty file at `path` read-only. Errors name the path.
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap, Error> {
    map_file_identified(path).map(|(map, _)| map)
}

/// [`map_file`], with the identity of the file mapped (from the descriptor mapped, so that
/// it is the identity of those bytes even if the path changes meanwhile).
pub(crate) fn map_file_identified(path: &Path) -> Result<(memmap2::Mmap, FileIdentity), Error> {
    map_file_as(path, &procmap::Access::Own)
}

/// [`map_file_identified`] opening the path with `access` (another user's, for a path that
/// user controls): without blocking, a regular file only.
pub(crate) fn map_file_as(
    path: &Path,
    access: &procmap::Access,
) -> Result<(memmap2::Mmap, FileIdentity), Error> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    // Without blocking: a FIFO put where a binary was must not hang the caller.
    let file = access.open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.len() == 0 {
        return Err(Error::NotElf {
            name: path.display().to_string(),
        });
    }
    // SAFETY: the mapping is read-only and private; everything built from it
    // either copies what it needs or keeps the mapping alive alongside the
    // borrowed data. A concurrent truncation of the file could still raise
    // SIGBUS while reading; that is the accepted cost of not reading whole
    // binaries.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    Ok((map, FileIdentity::of(&meta)))
}

/// A copy of a byte slice starting at an 8-aligned address.
struct AlignedCopy {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedCopy {
    fn new(data: &[u8]) -> Self {
        let mut buf = vec![0u8; data.len() + 8];
        let start = buf.as_ptr().align_offset(8).min(8);
        buf[start..start + data.len()].copy_from_slice(data);
        AlignedCopy {
            buf,
            start,
            len: data.len(),
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

/// What [`ElfFile::parse_with`] does about symbols.
#[derive(Clone, Copy)]
enum Symbols<'a> {
    /// Skip them (headers only).
    None,
    /// Parse the symbol tables.
    Parse,
    /// Parse them, or take them from this cache directory, for the file of this identity.
    Cached(&'a Path, FileIdentity),
}

/// Most symbols one file's tables may hold; a file with more has its symbols skipped.
pub const MAX_SYMBOLS: usize = 8 << 20;
/// Longest symbol name kept (longer ones are cut).
pub const MAX_SYMBOL_NAME: usize = 4096;
/// Most name bytes one file's tables may hold: at most twice the file's size (names come from
/// its string tables; many symbols naming one long string must not multiply it) and at most
/// this; a file with more has its symbols skipped.
pub const MAX_SYMBOL_NAME_BYTES: u64 = 1 << 30;

/// The name-byte cap of a file of `file_len` bytes (see [`MAX_SYMBOL_NAME_BYTES`]).
fn name_bytes_cap(file_len: usize) -> u64 {
    (file_len as u64)
        .saturating_mul(2)
        .clamp(1 << 20, MAX_SYMBOL_NAME_BYTES)
}

/// `raw` cut to at most [`MAX_SYMBOL_NAME`] bytes.
fn cut_symbol_name(raw: &[u8]) -> &[u8] {
    &raw[..raw.len().min(MAX_SYMBOL_NAME)]
}

/// First bytes of a cached symbol table file.
const SYMTAB_MAGIC: &[u8; 8] = b"PCSYMT02";
/// Tables with fewer symbols are parsed every time (well under a millisecond).
const MIN_CACHED_SYMBOLS: usize = 2000;
/// Cached symbol tables kept: the least recently written go first.
const MAX_CACHED_TABLES: usize = 256;
/// Bytes of cached symbol tables kept.
const MAX_CACHED_TABLE_BYTES: u64 = 1 << 30;

fn cached_table_path(dir: &Path, build_id: &[u8], file: &FileIdentity) -> PathBuf {
    dir.join(format!(
        "{}-{}.symtab",
        crate::error::hex(build_id),
        file.key()
    ))
}

/// The table cached at `path`, mapped and used in place; None when absent or not one.
fn load_cached_table(path: &Path) -> Option<Table> {
    let map = map_file(path).ok()?;
    if !map.starts_with(SYMTAB_MAGIC) {
        return None;
    }
    let layout = Table::layout(&map, SYMTAB_MAGIC.len())?;
    (layout.end == map.len()).then(|| Table::serialized(Bytes::Map(map), layout))
}

/// Keep `table` at `path` (atomically: temporary file, then rename); failures are only
/// logged. The oldest tables beyond [`MAX_CACHED_TABLES`] are removed. Returns the table as
/// cached, mapped from the file just written (its pages in the page cache, not in the heap:
/// what lookups touch stays resident until it is released, and the kernel may reclaim it),
/// or `table` itself when it could not be cached.
fn store_cached_table(dir: &Path, path: &Path, table: Table) -> Table {
    let mut bytes = SYMTAB_MAGIC.to_vec();
    table.write_to(&mut bytes);
    if let Err(err) = crate::disk_cache::write_replacing(path, &bytes) {
        tracing::debug!(path = %path.display(), %err, "cannot cache a symbol table");
        return table;
    }
    drop(bytes);
    let mapped = load_cached_table(path);
    crate::disk_cache::prune(dir, MAX_CACHED_TABLES, MAX_CACHED_TABLE_BYTES, |p| {
        p.extension().is_some_and(|e| e == "symtab")
    });
    match mapped {
        Some(mapped) if mapped.len() == table.len() => mapped,
        _ => table,
    }
}

fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    name: &str,
    symbols: Symbols<'_>,
) -> Result<ElfFile, Error> {
    let perr = |e: object::Error| Error::Parse {
        name: name.to_owned(),
        message: e.to_string(),
    };
    let header = Elf::parse(data).map_err(perr)?;
    let endian = header.endian().map_err(perr)?;
    let phdrs = header.program_headers(endian, data).map_err(perr)?;
    let sections = header.sections(endian, data).map_err(perr)?;

    let segments: Vec<LoadSegment> = phdrs
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| LoadSegment {
            offset: p.p_offset(endian).into(),
            filesz: p.p_filesz(endian).into(),
            memsz: p.p_memsz(endian).into(),
            vaddr: p.p_vaddr(endian).into(),
        })
        .collect();

    let build_id = find_build_id::<Elf>(endian, data, phdrs, &sections).map_err(perr)?;

    let cache = match (symbols, &build_id) {
        (Symbols::Cached(dir, file), Some(id)) if file.size == data.len() as u64 => {
            Some((dir, cached_table_path(dir, id, &file)))
        }
        _ => None,
    };
    if let Some(table) = cache.as_ref().and_then(|(_, path)| load_cached_table(path)) {
        tracing::debug!(file = name, symbols = table.len(), "cached ELF symbols");
        return Ok(ElfFile {
            name: name.to_owned(),
            build_id,
            segments,
            table,
        });
    }

    let thumb_bit = header.e_machine(endian) == elf::EM_ARM;
    let mut funcs = TableBuilder::default();
    let mut text = TableBuilder::default();
    let sh_types: &[u32] = match symbols {
        Symbols::None => &[],
        Symbols::Parse | Symbols::Cached(..) => &[elf::SHT_SYMTAB, elf::SHT_DYNSYM],
    };
    let names_cap = name_bytes_cap(data.len());
    let mut name_bytes = 0u64;
    let mut over_cap = None;
    'tables: for &sh_type in sh_types {
        let symtab = sections.symbols(endian, data, sh_type).map_err(perr)?;
        for (index, sym) in symtab.enumerate() {
            if sym.is_undefined(endian) {
                continue;
            }
            let mut value: u64 = sym.st_value(endian).into();
            let kind = sym.st_type();
            let is_func = kind == elf::STT_FUNC || kind == elf::STT_GNU_IFUNC;
            if is_func && thumb_bit {
                value &= !1;
            }
            if value == 0 {
                continue;
            }
            let section = symtab
                .symbol_section(endian, sym, index)
                .map_err(perr)?
                .and_then(|i| sections.section(i).ok());
            let executable = section.is_some_and(|s| {
                let flags: u64 = s.sh_flags(endian).into();
                flags & u64::from(elf::SHF_EXECINSTR) != 0
            });
            let is_text = kind == elf::STT_NOTYPE && executable;
            if !(is_func || is_text) {
                continue;
            }
            let raw = symtab.symbol_name(endian, sym).map_err(perr)?;
            if raw.is_empty() || raw.starts_with(b"$") {
                continue; // unnamed, or ARM/AArch64 mapping symbols
            }
            let limit = match section {
                Some(s) if s.sh_flags(endian).into() & u64::from(elf::SHF_ALLOC) != 0 => {
                    let addr: u64 = s.sh_addr(endian).into();
                    addr.saturating_add(s.sh_size(endian).into())
                }
                _ => segments
                    .iter()
                    .find(|s| value >= s.vaddr && value - s.vaddr < s.memsz)
                    .map_or(u64::MAX, |s| s.vaddr.saturating_add(s.memsz)),
            };
            let binding = match sym.st_bind() {
                elf::STB_LOCAL => Binding::Local,
                elf::STB_WEAK => Binding::Weak,
                _ => Binding::Global,
            };
            let cand = Candidate {
                start: value,
                size: sym.st_size(endian).into(),
                limit,
                binding,
                tag: 0,
            };
            let raw = cut_symbol_name(raw);
            name_bytes += raw.len() as u64;
            if name_bytes > names_cap {
                over_cap = Some(format!("names over {names_cap} bytes"));
                break 'tables;
            }
            if funcs.len() + text.len() >= MAX_SYMBOLS {
                over_cap = Some(format!("over {MAX_SYMBOLS} symbols"));
                break 'tables;
            }
            let sym_name = String::from_utf8_lossy(raw);
            let target = if is_func { &mut funcs } else { &mut text };
            if !target.push(cand, &sym_name) {
                tracing::warn!(file = name, "symbol names exceed 4 GiB; ignoring the rest");
                break;
            }
        }
    }
    let skipped = over_cap.is_some();
    if let Some(why) = over_cap {
        tracing::warn!(file = name, limit = %why, "symbol tables over their cap; the file's symbols are skipped");
        funcs = TableBuilder::default();
        text = TableBuilder::default();
    }
    let mut table = if funcs.len() > 0 { funcs } else { text };
    if !matches!(symbols, Symbols::None) && header.e_machine(endian) == elf::EM_X86_64 && !skipped {
        let mut budget = names_cap - name_bytes;
        if !add_plt_symbols::<Elf>(endian, data, &sections, &mut table, &mut budget) {
            tracing::warn!(
                file = name,
                "PLT names over the symbol-name cap; the rest skipped"
            );
        }
    }
    let mut table = table.build();
    if !matches!(symbols, Symbols::None) {
        tracing::debug!(file = name, symbols = table.len(), "parsed ELF symbols");
    }
    if let Some((dir, path)) = &cache {
        if table.len() >= MIN_CACHED_SYMBOLS {
            table = store_cached_table(dir, path, table);
        }
    }
    Ok(ElfFile {
        name: name.to_owned(),
        build_id,
        segments,
        table,
    })
}

/// The GNU build-id from note sections, else from `PT_NOTE` segments.
fn find_build_id<'data, Elf: FileHeader<Endian = Endianness>>(
    endian: Endianness,
    data: &'data [u8],
    phdrs: &'data [Elf::ProgramHeader],
    sections: &object::read::elf::SectionTable<'data, Elf, &'data [u8]>,
) -> object::Result<Option<Vec<u8>>> {
    for s in sections.iter() {
        if let Some(mut notes) = s.notes(endian, data)? {
            while let Some(note) = notes.next()? {
                if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                    return Ok(Some(note.desc().to_vec()));
                }
            }
        }
    }
    for p in phdrs {
        if let Some(mut notes) = p.notes(endian, data)? {
            while let Some(note) = notes.next()? {
                if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                    return Ok(Some(note.desc().to_vec()));
                }
            }
        }
    }
    Ok(None)
}

/// Name the x86-64 PLT stubs `function@plt`, as objdump and perf do: the `n`th relocation of
/// `.rela.plt` belongs to the `n`th 16-byte stub of `.plt.sec` (when the binary has one,
/// built with IBT) or else to the `n + 1`th stub of `.plt` (its first stub calls the dynamic
/// linker). Stubs of `R_X86_64_IRELATIVE` relocations have no name and stay unnamed.
fn add_plt_symbols<'data, Elf: FileHeader<Endian = Endianness>>(
    endian: Endianness,
    data: &'data [u8],
    sections: &object::read::elf::SectionTable<'data, Elf, &'data [u8]>,
    table: &mut TableBuilder,
    name_budget: &mut u64,
) -> bool {
    const STUB: u64 = 16;
    let Some((_, rela_plt)) = sections.section_by_name(endian, b".rela.plt") else {
        return true;
    };
    let Ok(Some((relocations, symtab_index))) = rela_plt.rela(endian, data) else {
        return true;
    };
    let Ok(symtab) = sections.symbol_table_by_index(endian, data, symtab_index) else {
        return true;
    };
    let stubs = match sections.section_by_name(endian, b".plt.sec") {
        Some((_, sec)) => (sec, 0),
        None => match sections.section_by_name(endian, b".plt") {
            Some((_, plt)) => (plt, 1),
            None => return true,
        },
    };
    let (section, first) = stubs;
    let start: u64 = section.sh_addr(endian).into();
    let size: u64 = section.sh_size(endian).into();
    let end = start.saturating_add(size);
    for (i, rela) in relocations.iter().enumerate() {
        use object::read::elf::Rela;
        if rela.r_type(endian, false) != elf::R_X86_64_JUMP_SLOT {
            continue;
        }
        let Some(stub) = (i as u64)
            .checked_add(first)
            .and_then(|n| n.checked_mul(STUB))
            .and_then(|off| start.checked_add(off))
            .filter(|&a| a.saturating_add(STUB) <= end)
        else {
            continue;
        };
        let Ok(sym) = symtab.symbol(object::SymbolIndex(rela.r_sym(endian, false) as usize)) else {
            continue;
        };
        let Ok(name) = symtab.symbol_name(endian, sym) else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        let cand = Candidate {
            start: stub,
            size: STUB,
            limit: end,
            binding: Binding::Local,
            tag: 0,
        };
        let name = cut_symbol_name(name);
        let cost = name.len() as u64 + 4;
        if cost > *name_budget || table.len() >= MAX_SYMBOLS {
            return false;
        }
        *name_budget -= cost;
        if !table.push(cand, &format!("{}@plt", String::from_utf8_lossy(name))) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod symbol_cache_tests {
    use super::*;

    /// Every 97th byte of the first executable segment: the symbol found there, if any.
    fn names(elf: &ElfFile) -> Vec<Option<(String, u64)>> {
        let seg = elf.segments.iter().find(|s| s.memsz > 0x10000).unwrap();
        (seg.vaddr..seg.vaddr + seg.memsz)
            .step_by(97)
            .map(|a| {
                elf.symbol(crate::SymbolAddr(a))
                    .map(|s| (s.name.to_string(), s.start.0))
            })
            .collect()
    }

    #[test]
    fn large_symbol_tables_are_cached_and_checked() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let parsed = ElfFile::parse(&exe, "test").unwrap();
        assert!(parsed.symbol_count() >= MIN_CACHED_SYMBOLS);
        let id = parsed
            .build_id()
            .expect("the test binary has a build-id")
            .to_vec();
        let ident = FileIdentity::of(&std::fs::metadata(std::env::current_exe().unwrap()).unwrap());
        let cache = Some((dir.path(), ident));
        let path = cached_table_path(dir.path(), &id, &ident);

        let first = ElfFile::parse_cached(&exe, "test", cache).unwrap();
        assert!(path.exists(), "the table was written");
        let second = ElfFile::parse_cached(&exe, "test", cache).unwrap();
        assert_eq!(names(&first), names(&parsed));
        assert_eq!(names(&second), names(&parsed));
        assert_eq!(second.symbol_count(), parsed.symbol_count());

        // The cached table is what is read: a foreign one changes the answers.
        let mut small = TableBuilder::default();
        small.push(
            Candidate {
                start: 0,
                size: u64::MAX,
                limit: u64::MAX,
                binding: Binding::Global,
                tag: 0,
            },
            "everything",
        );
        let mut bytes = SYMTAB_MAGIC.to_vec();
        small.build().write_to(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        let foreign = ElfFile::parse_cached(&exe, "test", cache).unwrap();
        assert_eq!(foreign.symbol_count(), 1);

        // A corrupt one is ignored, and replaced.
        std::fs::write(&path, b"PCSYMT01 short").unwrap();
        let again = ElfFile::parse_cached(&exe, "test", cache).unwrap();
        assert_eq!(names(&again), names(&parsed));
        assert!(load_cached_table(&path).is_some(), "rewritten");
    }

    /// Issue 11, item 3: a copy of a binary (same build-id and size) whose symbol names were
    /// changed, symbolized first, leaves a cached table that never names the binary's own.
    #[test]
    fn another_files_table_never_serves_a_file_with_its_build_id() {
        use object::{Object, ObjectSection, ObjectSymbol};
        let exe_path = std::env::current_exe().unwrap();
        let exe = std::fs::read(&exe_path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (start, len) = object::File::parse(&*exe)
            .unwrap()
            .section_by_name(".strtab")
            .and_then(|s| s.file_range())
            .unwrap();
        let mut poison = exe.clone();
        for b in &mut poison[start as usize..(start + len) as usize] {
            b.make_ascii_uppercase();
        }
        let poison_path = dir.path().join("poison");
        std::fs::write(&poison_path, &poison).unwrap();
        let identity = |p: &Path| FileIdentity::of(&std::fs::metadata(p).unwrap());
        let cache = dir.path().join("cache");
        let poisoned =
            ElfFile::parse_cached(&poison, "poison", Some((&cache, identity(&poison_path))))
                .unwrap();
        // The names at the first 500 function addresses.
        let funcs: Vec<u64> = object::File::parse(&*exe)
            .unwrap()
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
            .map(|s| s.address())
            .take(500)
            .collect();
        let at = |e: &ElfFile| -> Vec<Option<String>> {
            funcs
                .iter()
                .map(|&a| e.symbol(SymbolAddr(a)).map(|s| s.name.to_owned()))
                .collect()
        };
        let truth = at(&ElfFile::parse(&exe, "exe").unwrap());
        assert!(truth.iter().flatten().count() > 100);
        assert!(at(&poisoned) != truth, "the attacker's names differ");
        let own = ElfFile::parse_cached(&exe, "exe", Some((&cache, identity(&exe_path)))).unwrap();
        assert!(at(&own) == truth, "the binary got another file's names");
    }
}
