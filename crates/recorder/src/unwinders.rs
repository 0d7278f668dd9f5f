//! How a recording walks user stacks: the [`StackBuilder`] its call-graph mode asks for, and
//! the DWARF unwinders behind it.

use unwind::{StackBuilder, Unwinders};

use crate::options::{CallGraph, RecordOptions};

/// The stack builder for `options.call_graph`: the kernel's frame-pointer chain, or DWARF
/// unwinding of the copied stack (continued from that chain in `auto`).
pub(crate) fn stack_builder(options: &RecordOptions) -> StackBuilder {
    match options.call_graph {
        CallGraph::Fp => StackBuilder::frame_pointers(),
        CallGraph::Dwarf => StackBuilder::dwarf(unwinders(options), false),
        CallGraph::Auto => StackBuilder::dwarf(unwinders(options), true),
    }
}

/// DWARF unwinders that know the vDSO's call-frame information (read from this process's own
/// vDSO: the kernel maps the same image into every process) and find separate debug files the
/// way symbols are found: build-id and debuglink in the system and `--debug-dir` directories,
/// and debuginfod's cache (no download). Binaries and debug files are read on the unwinders'
/// loader thread, never on the thread that drains the rings.
fn unwinders(options: &RecordOptions) -> Unwinders {
    let mut unwinders = Unwinders::new();
    match symbolize::own_vdso_image() {
        Ok(image) => unwinders.set_vdso_image(&image),
        Err(err) => {
            tracing::debug!(%err, "cannot read the vDSO image; its frames unwind by frame pointer only")
        }
    }
    let search = options
        .preload_symbols
        .clone()
        .unwrap_or_else(symbolize::DebugSearch::system);
    let debuginfod = options.debuginfod.clone().map(debuginfod::Client::new);
    // A debug file found beside another user's binary is read again with that user's access.
    unwinders.set_debug_file_finder(Box::new(move |binary: &std::path::Path, access| {
        let symbolizer =
            symbolize::FileSymbolizer::open_as(binary, binary, None, &search, access).ok()?;
        if let Some((found, reader)) = symbolizer.debug_file_access() {
            return Some((found.to_path_buf(), reader.clone()));
        }
        let build_id = symbolizer.elf().build_id()?;
        let cached = debuginfod
            .as_ref()?
            .cached(build_id, debuginfod::Artifact::DebugInfo)?;
        Some((cached, procmap::Access::Own))
    }));
    unwinders
}
