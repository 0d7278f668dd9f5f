//! Go binaries: frames from the Go runtime's function table (`.gopclntab`), which every Go
//! binary keeps even when stripped of `.symtab` and DWARF, and Go's printed form of names.

use std::path::Path;

use gosym::GoTable;
use memmap2::Mmap;

use crate::elf::map_file;
use crate::symbolizer::ResolvedFrame;

/// The Go function table of the binary at `path`, whose bytes `first` were mapped already
/// (looked at, not kept: the table holds a mapping of its own, since the first may be handed
/// to the DWARF reader). None for a binary that is not Go or whose table cannot be read.
pub(crate) fn open_table(path: &Path, first: &[u8]) -> Option<GoTable<Mmap>> {
    use object::Object;
    let no_sections = object::File::parse(first).is_ok_and(|f| f.sections().next().is_none());
    if !gosym::is_go_binary(first) && !no_sections {
        return None;
    }
    let map = map_file(path).ok()?;
    match GoTable::from_elf(map) {
        Ok(table) => {
            tracing::debug!(binary = %path.display(), functions = table.len(), inline = table.has_inline_info(), "Go function table");
            Some(table)
        }
        Err(err) => {
            tracing::debug!(binary = %path.display(), %err, "no Go function table");
            None
        }
    }
}

/// Frames of `addr` from `table` into `out` (outermost first, as
/// [`crate::FileSymbolizer::frames`] gives them); nothing when no Go function holds `addr`.
pub(crate) fn frames_into(
    table: &GoTable<Mmap>,
    addr: u64,
    with_lines: bool,
    out: &mut Vec<ResolvedFrame>,
) {
    table.frames(addr, |f| {
        out.push(ResolvedFrame {
            function: f.function.to_owned(),
            file: f.file.filter(|_| with_lines).map(str::to_owned),
            line: f.line.filter(|_| with_lines),
            inlined: f.inlined,
        })
    });
    out.reverse();
}

/// Name the outermost of `out` (frames of `addr` from DWARF or a symbol table) as the Go
/// table does, when it has a function there: the table's names are those Go's own tools
/// print (`runtime.goexit` where the symbol table has its ABI wrapper's `runtime.goexit.abi0`).
pub(crate) fn table_name_outermost(table: &GoTable<Mmap>, addr: u64, out: &mut [ResolvedFrame]) {
    let Some(first) = out.first_mut() else {
        return;
    };
    if let Some(name) = table.func_at(addr).and_then(|f| f.name()) {
        if first.function != name {
            first.function = name.to_owned();
        }
    }
}

/// Names in the form Go prints them (generic functions as `pkg.F[...]`), for the frames of a
/// Go binary whatever source named them, so that DWARF, `.symtab` and `.gopclntab` agree.
pub(crate) fn print_names(out: &mut [ResolvedFrame]) {
    for f in out {
        if let std::borrow::Cow::Owned(name) = gosym::print_name(&f.function) {
            f.function = name;
        }
    }
}
