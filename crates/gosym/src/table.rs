//! The function table of one Go binary: the `.gopclntab` header, its sub-tables, and lookups by
//! program counter (binary search of the function table; pc-value tables decoded in place).

use std::ops::Range;

use crate::bytes::{cstr_at, i16_at, i32_at, slice, u32_at, uvarint, word_at};
use crate::error::GoSymError;

/// Functions read at most (a corrupt count is refused before anything is sized by it).
pub const MAX_FUNCS: u64 = 1 << 22;
/// Longest function or file name read.
const MAX_NAME: usize = 64 << 10;
/// Most steps taken through one pc-value table, and most inlining levels followed.
const MAX_STEPS: usize = 1 << 20;
const MAX_INLINE_DEPTH: usize = 256;
/// Entries of one inline tree read at most.
const MAX_INLINE_ENTRIES: u32 = 1 << 20;

/// `PCDATA_InlTreeIndex` and `FUNCDATA_InlTree` (runtime/symtab.go).
const PCDATA_INL_TREE_INDEX: u32 = 2;
const FUNCDATA_INL_TREE: u32 = 3;
/// `funcFlag_TOPFRAME`: the function is the outermost frame of a stack (Go 1.17 and later).
const FLAG_TOPFRAME: u8 = 1;

/// The table layouts read, by header magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Go 1.16 and 1.17 (magic `0xfffffffa`).
    Go116,
    /// Go 1.18 and 1.19 (magic `0xfffffff0`).
    Go118,
    /// Go 1.20 and later (magic `0xfffffff1`).
    Go120,
}

impl Version {
    /// The version a header magic stands for.
    pub fn from_magic(magic: u32) -> Result<Version, GoSymError> {
        match magic {
            0xffff_fffa => Ok(Version::Go116),
            0xffff_fff0 => Ok(Version::Go118),
            0xffff_fff1 => Ok(Version::Go120),
            other => Err(GoSymError::UnsupportedMagic(other)),
        }
    }
}

/// A loadable segment of the binary: where its file bytes appear in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Address as stated in the file.
    pub vaddr: u64,
    /// File offset.
    pub offset: u64,
    /// Bytes in the file.
    pub file_size: u64,
    /// Whether the segment is writable (where the runtime's module data lives).
    pub writable: bool,
}

/// Where a table sits in the binary, and what is needed beside it.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    /// File range of the table (from its header to the end of its section or segment).
    pub range: Range<usize>,
    /// The header's address as stated in the file.
    pub vaddr: u64,
    /// Loadable segments, to read what the table points to by address (inline trees).
    pub segments: Vec<Segment>,
    /// The `.text` section's address, when the header has none (position-independent
    /// binaries leave it to a relocation).
    pub text: Option<u64>,
}

/// One Go binary's function table, read in place from the bytes `B` (the whole file, usually
/// a mapping of it). Built once (header checked, function table checked sorted); lookups are
/// binary searches and decode pc-value tables in place, allocating nothing.
pub struct GoTable<B> {
    data: B,
    version: Version,
    ptr_size: u8,
    quantum: u8,
    /// File range of the whole table.
    tab: Range<usize>,
    tab_vaddr: u64,
    nfunc: usize,
    text_start: u64,
    funcnames: Range<usize>,
    cutab: Range<usize>,
    filetab: Range<usize>,
    pctab: Range<usize>,
    /// From the function table to the end of the table (the `_func` records follow it).
    pcln: Range<usize>,
    segments: Vec<Segment>,
    /// `moduledata.gofunc` (Go 1.18 and later): the base of `FUNCDATA` offsets. Without it,
    /// inlined calls are not reported (the outer function is).
    gofunc: Option<u64>,
}

impl<B: AsRef<[u8]>> std::fmt::Debug for GoTable<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoTable")
            .field("version", &self.version)
            .field("functions", &self.nfunc)
            .field("bytes", &self.tab.len())
            .field("gofunc", &self.gofunc)
            .finish()
    }
}

/// One frame of a Go program counter: a function, or a call inlined into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoFrame<'a> {
    /// The function's name as the table spells it (see [`crate::print_name`] for Go's
    /// printed form).
    pub function: &'a str,
    /// The source file, when the table has it.
    pub file: Option<&'a str>,
    /// The line: of the pc for the innermost frame, of the inlined call for the others.
    pub line: Option<u32>,
    /// True for a call inlined into the next frame out.
    pub inlined: bool,
}

impl<B: AsRef<[u8]>> GoTable<B> {
    /// Read the table placed at `placement` in `data`.
    pub(crate) fn new(data: B, placement: Placement) -> Result<GoTable<B>, GoSymError> {
        let bytes = data.as_ref();
        let Placement {
            range,
            vaddr,
            segments,
            text,
        } = placement;
        let tab = slice(bytes, range.start, range.len())
            .ok_or(GoSymError::OutOfBounds { what: "table" })?;
        let magic = u32_at(tab, 0).ok_or(GoSymError::BadHeader("truncated"))?;
        let version = Version::from_magic(magic)?;
        let (pad1, pad2, quantum, ptr_size) = match slice(tab, 4, 4) {
            Some(&[a, b, q, p]) => (a, b, q, p),
            _ => return Err(GoSymError::BadHeader("truncated")),
        };
        if pad1 != 0 || pad2 != 0 {
            return Err(GoSymError::BadHeader("padding not zero"));
        }
        if !matches!(quantum, 1 | 2 | 4) {
            return Err(GoSymError::BadHeader("instruction quantum not 1, 2 or 4"));
        }
        if !matches!(ptr_size, 4 | 8) {
            return Err(GoSymError::BadHeader("pointer size not 4 or 8"));
        }
        let p = usize::from(ptr_size);
        let word =
            |i: usize| word_at(tab, 8 + i * p, ptr_size).ok_or(GoSymError::BadHeader("truncated"));
        let nfunc = word(0)?;
        if nfunc > MAX_FUNCS {
            return Err(GoSymError::TooManyFunctions(nfunc));
        }
        let nfunc = nfunc as usize;
        let (text_start, first) = match version {
            Version::Go116 => (0, 2),
            Version::Go118 | Version::Go120 => (word(2)?, 3),
        };
        let text_start = match (text_start, text) {
            (0, Some(t)) if version != Version::Go116 => t,
            (t, _) => t,
        };
        let offsets = [
            word(first)?,
            word(first + 1)?,
            word(first + 2)?,
            word(first + 3)?,
            word(first + 4)?,
        ];
        let header_end = (8 + (first + 5) * p) as u64;
        let len = tab.len() as u64;
        // The linker lays the sub-tables out in this order: each ends where the next starts.
        let mut bounds = [0u64; 6];
        bounds[..5].copy_from_slice(&offsets);
        bounds[5] = len;
        if bounds[0] < header_end || bounds.windows(2).any(|w| w[0] > w[1]) {
            return Err(GoSymError::OutOfBounds { what: "sub-tables" });
        }
        let at = |i: usize| range.start + bounds[i] as usize..range.start + bounds[i + 1] as usize;
        let table = GoTable {
            version,
            ptr_size,
            quantum,
            tab_vaddr: vaddr,
            nfunc,
            text_start,
            funcnames: at(0),
            cutab: at(1),
            filetab: at(2),
            pctab: at(3),
            pcln: at(4),
            tab: range,
            segments,
            gofunc: None,
            data,
        };
        table.check_functab()?;
        Ok(table)
    }

    /// Set `moduledata.gofunc`, the base of function-data offsets (Go 1.18 and later).
    pub(crate) fn set_gofunc(&mut self, gofunc: Option<u64>) {
        self.gofunc = gofunc;
    }

    /// The table's layout.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.nfunc
    }

    /// Whether the table has no function.
    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// Bytes of the table.
    pub fn table_bytes(&self) -> usize {
        self.tab.len()
    }

    /// The table header's address (as stated in the file).
    pub fn vaddr(&self) -> u64 {
        self.tab_vaddr
    }

    /// The address range the table covers (first function's entry to the end of the last).
    pub fn pc_range(&self) -> Range<u64> {
        match (self.entry(0), self.entry(self.nfunc)) {
            (Some(a), Some(b)) if self.nfunc > 0 => a..b,
            _ => 0..0,
        }
    }

    /// Whether inlined calls can be reported (the inline trees are reachable).
    pub fn has_inline_info(&self) -> bool {
        self.version == Version::Go116 || self.gofunc.is_some()
    }

    fn bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// The bytes the table is read from (the whole file).
    pub fn data(&self) -> &B {
        &self.data
    }

    pub(crate) fn data_bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    pub(crate) fn ptr_size(&self) -> u8 {
        self.ptr_size
    }

    pub(crate) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Offset of the function-name table from the header.
    pub(crate) fn funcnames_offset(&self) -> u64 {
        (self.funcnames.start - self.tab.start) as u64
    }

    fn pcln(&self) -> &[u8] {
        &self.bytes()[self.pcln.clone()]
    }

    fn functab_entry_size(&self) -> usize {
        match self.version {
            Version::Go116 => 2 * usize::from(self.ptr_size),
            _ => 8,
        }
    }

    /// Entry address of function `i` (`i == nfunc`: the end of the last function), and the
    /// offset of its `_func` record in the pcln table.
    fn functab(&self, i: usize) -> Option<(u64, usize)> {
        let off = i.checked_mul(self.functab_entry_size())?;
        let pcln = self.pcln();
        match self.version {
            Version::Go116 => {
                let p = usize::from(self.ptr_size);
                let entry = word_at(pcln, off, self.ptr_size)?;
                let func = word_at(pcln, off + p, self.ptr_size)?;
                Some((entry, usize::try_from(func).ok()?))
            }
            _ => {
                let entry = self.text_start.checked_add(u64::from(u32_at(pcln, off)?))?;
                Some((entry, u32_at(pcln, off + 4)? as usize))
            }
        }
    }

    fn entry(&self, i: usize) -> Option<u64> {
        self.functab(i).map(|(e, _)| e)
    }

    /// The function table must be readable and sorted for binary search.
    fn check_functab(&self) -> Result<(), GoSymError> {
        let mut last = 0u64;
        for i in 0..=self.nfunc {
            let (entry, _) = self.functab(i).ok_or(GoSymError::OutOfBounds {
                what: "function table",
            })?;
            if entry < last {
                return Err(GoSymError::Unsorted(i));
            }
            last = entry;
        }
        Ok(())
    }

    /// The function containing `pc` (an address as stated in the file).
    pub fn func_at(&self, pc: u64) -> Option<GoFunc<'_, B>> {
        if self.nfunc == 0 {
            return None;
        }
        // The last i with entry(i) <= pc, among 0..nfunc.
        let (mut lo, mut hi) = (0usize, self.nfunc);
        if pc < self.entry(0)? || pc >= self.entry(self.nfunc)? {
            return None;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid)? <= pc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (entry, func_off) = self.functab(lo)?;
        let end = self.entry(lo + 1)?;
        let f = GoFunc {
            table: self,
            entry,
            end,
            off: func_off,
        };
        // The record must be readable and agree with the function table.
        (f.record_entry()? == entry).then_some(f)
    }

    /// Frames for `pc`, innermost first (inlined calls, then the function containing `pc`),
    /// passed to `each`; returns how many. Nothing when no function contains `pc`.
    pub fn frames(&self, pc: u64, mut each: impl FnMut(GoFrame<'_>)) -> usize {
        let Some(f) = self.func_at(pc) else {
            return 0;
        };
        let tree = f.inline_tree();
        let mut at = pc;
        let mut n = 0;
        for _ in 0..MAX_INLINE_DEPTH {
            let (file, line) = match f.file_line(at) {
                Some((file, line)) => (Some(file), Some(line)),
                None => (None, None),
            };
            let inlined = tree.and_then(|t| {
                let ix = f.pcdata(PCDATA_INL_TREE_INDEX, at)?;
                let ix = u32::try_from(ix).ok()?;
                self.inlined_call(t, ix)
            });
            match inlined {
                Some((name_off, parent_pc)) => {
                    let Some(name) = self.func_name(name_off) else {
                        break;
                    };
                    each(GoFrame {
                        function: name,
                        file,
                        line,
                        inlined: true,
                    });
                    n += 1;
                    let Some(parent) = f.entry.checked_add_signed(i64::from(parent_pc)) else {
                        break;
                    };
                    if parent < f.entry || parent >= f.end {
                        break;
                    }
                    at = parent;
                }
                None => {
                    let Some(name) = f.name() else {
                        break;
                    };
                    each(GoFrame {
                        function: name,
                        file,
                        line,
                        inlined: false,
                    });
                    return n + 1;
                }
            }
        }
        n
    }

    /// The (name offset, parent pc offset) of entry `ix` of the inline tree at `tree`
    /// (an address).
    fn inlined_call(&self, tree: u64, ix: u32) -> Option<(i32, i32)> {
        if ix >= MAX_INLINE_ENTRIES {
            return None;
        }
        let (size, name_at, parent_at) = match self.version {
            // parent int16, funcID uint8, _ byte, file int32, line int32, func_ int32,
            // parentPc int32.
            Version::Go116 | Version::Go118 => (20u64, 12, 16),
            // funcID uint8, _ [3]byte, nameOff int32, parentPc int32, startLine int32.
            Version::Go120 => (16u64, 4, 8),
        };
        let entry = self.read_at_vaddr(tree.checked_add(u64::from(ix) * size)?, size as usize)?;
        if matches!(self.version, Version::Go116 | Version::Go118) {
            // Checked only for sanity: the parent comes from parentPc.
            i16_at(entry, 0)?;
        }
        Some((i32_at(entry, name_at)?, i32_at(entry, parent_at)?))
    }

    /// `len` bytes at address `vaddr`, from the segment holding them.
    fn read_at_vaddr(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        let seg = self.segments.iter().find(|s| {
            vaddr >= s.vaddr
                && vaddr
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= s.vaddr.saturating_add(s.file_size))
        })?;
        let off = seg.offset.checked_add(vaddr - seg.vaddr)?;
        slice(self.bytes(), usize::try_from(off).ok()?, len)
    }

    fn func_name(&self, name_off: i32) -> Option<&str> {
        let off = usize::try_from(name_off).ok()?;
        let names = &self.bytes()[self.funcnames.clone()];
        cstr_at(names, off, MAX_NAME)
    }

    /// The value of the pc-value table at `table_off` (an offset into the pc table; 0 means
    /// none) for `target`, in a function entered at `entry`.
    fn pcvalue(&self, table_off: u32, entry: u64, target: u64) -> Option<i32> {
        if table_off == 0 {
            return None;
        }
        let pctab = &self.bytes()[self.pctab.clone()];
        let mut at = table_off as usize;
        let mut pc = entry;
        let mut value: i32 = -1;
        for step in 0..MAX_STEPS {
            let uv = uvarint(pctab, &mut at)?;
            if uv == 0 && step > 0 {
                return None;
            }
            let delta = if uv & 1 != 0 {
                !(uv >> 1) as i32
            } else {
                (uv >> 1) as i32
            };
            let pc_delta = uvarint(pctab, &mut at)?;
            pc = pc.checked_add(u64::from(pc_delta) * u64::from(self.quantum))?;
            value = value.wrapping_add(delta);
            if target < pc {
                return Some(value);
            }
        }
        None
    }
}

/// One function of a [`GoTable`].
pub struct GoFunc<'t, B> {
    table: &'t GoTable<B>,
    entry: u64,
    end: u64,
    /// Offset of the `_func` record in the pcln table.
    off: usize,
}

impl<'t, B: AsRef<[u8]>> GoFunc<'t, B> {
    /// The function's entry address.
    pub fn entry(&self) -> u64 {
        self.entry
    }

    /// The end of the function (the next function's entry).
    pub fn end(&self) -> u64 {
        self.end
    }

    fn record(&self) -> &'t [u8] {
        self.table.pcln().get(self.off..).unwrap_or_default()
    }

    /// Offset in the record of the fields after the entry.
    fn fields(&self) -> usize {
        match self.table.version {
            Version::Go116 => usize::from(self.table.ptr_size),
            _ => 4,
        }
    }

    fn record_entry(&self) -> Option<u64> {
        let r = self.record();
        match self.table.version {
            Version::Go116 => word_at(r, 0, self.table.ptr_size),
            _ => self.table.text_start.checked_add(u64::from(u32_at(r, 0)?)),
        }
    }

    /// The `u32` field `i` after the entry: nameoff, args, deferreturn, pcsp, pcfile, pcln,
    /// npcdata, cuOffset.
    fn field(&self, i: usize) -> Option<u32> {
        u32_at(self.record(), self.fields() + 4 * i)
    }

    /// Offsets of (funcID, flag, nfuncdata) and of the pcdata array.
    fn tail(&self) -> (usize, usize, usize, usize) {
        let base = self.fields() + 32;
        match self.table.version {
            Version::Go120 => (base + 4, base + 5, base + 7, base + 8),
            _ => (base, base + 1, base + 3, base + 4),
        }
    }

    /// The function's name as the table spells it.
    pub fn name(&self) -> Option<&'t str> {
        self.table.func_name(self.field(0)? as i32)
    }

    /// The stack-pointer delta at `pc`: the bytes the function has pushed or reserved
    /// below its caller's return address (its `pcsp` table). The caller's frame starts
    /// (CFA) at SP + delta + the return address's size.
    pub fn sp_delta(&self, pc: u64) -> Option<i32> {
        self.table.pcvalue(self.field(3)?, self.entry, pc)
    }

    /// The source file and line at `pc` (of the innermost inlined call there).
    pub fn file_line(&self, pc: u64) -> Option<(&'t str, u32)> {
        let file = self.table.pcvalue(self.field(4)?, self.entry, pc)?;
        let line = self.table.pcvalue(self.field(5)?, self.entry, pc)?;
        let cu = self.field(7)?;
        let ix = u64::from(cu) + u64::try_from(file).ok()?;
        let cutab = &self.table.bytes()[self.table.cutab.clone()];
        let file_off = u32_at(cutab, usize::try_from(ix.checked_mul(4)?).ok()?)?;
        if file_off == u32::MAX {
            return None;
        }
        let filetab = &self.table.bytes()[self.table.filetab.clone()];
        let file = cstr_at(filetab, file_off as usize, MAX_NAME)?;
        Some((file, u32::try_from(line).ok()?))
    }

    /// Whether the function is the outermost frame of any stack it is on (the runtime's
    /// `TOPFRAME` flag: `runtime.goexit`, `runtime.mstart`, `runtime.rt0_go`, …; Go 1.17 and
    /// later).
    pub fn is_top_frame(&self) -> bool {
        if self.table.version == Version::Go116 {
            return false;
        }
        let (_, flag, _, _) = self.tail();
        self.record()
            .get(flag)
            .is_some_and(|f| f & FLAG_TOPFRAME != 0)
    }

    fn npcdata(&self) -> Option<u32> {
        self.field(6)
    }

    /// The value of pc-data table `table` at `pc`.
    fn pcdata(&self, table: u32, pc: u64) -> Option<i32> {
        if table >= self.npcdata()? {
            return None;
        }
        let (_, _, _, pcdata) = self.tail();
        let off = u32_at(self.record(), pcdata + 4 * table as usize)?;
        self.table.pcvalue(off, self.entry, pc)
    }

    /// The address of the function's inline tree, if it has one and it can be found.
    fn inline_tree(&self) -> Option<u64> {
        let (_, _, nfuncdata, pcdata) = self.tail();
        let nfuncdata = u32::from(*self.record().get(nfuncdata)?);
        if FUNCDATA_INL_TREE >= nfuncdata {
            return None;
        }
        let funcdata = pcdata + 4 * self.npcdata()? as usize;
        match self.table.version {
            Version::Go116 => {
                // Pointers, aligned to the pointer size in memory.
                let p = u64::from(self.table.ptr_size);
                let pcln_vaddr = self.table.tab_vaddr
                    + (self.table.pcln.start - self.table.tab.start) as u64
                    + self.off as u64;
                let mut at = funcdata;
                if (pcln_vaddr + at as u64) % p != 0 {
                    at += 4;
                }
                let ptr = word_at(
                    self.record(),
                    at + FUNCDATA_INL_TREE as usize * p as usize,
                    self.table.ptr_size,
                )?;
                (ptr != 0).then_some(ptr)
            }
            _ => {
                let off = u32_at(self.record(), funcdata + 4 * FUNCDATA_INL_TREE as usize)?;
                if off == u32::MAX {
                    return None;
                }
                self.table.gofunc?.checked_add(u64::from(off))
            }
        }
    }
}
