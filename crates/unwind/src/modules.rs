//! The framehop modules one mapping of a binary adds to an address space's unwinders.

use std::ops::Range;

use framehop::{ExplicitModuleSectionInfo, Module};

use crate::go_frame::GoModule;
use crate::section::SectionData;
use crate::sections::UnwindSections;

/// What one mapping adds to an address space's unwinders.
pub(crate) struct ModuleParts {
    pub module: Module<SectionData>,
    pub trampolines: Vec<Range<u64>>,
    pub alternate: Option<(Module<SectionData>, Vec<Range<u64>>)>,
    pub go: Option<GoModule>,
}

/// The framehop module(s) for a mapping at `avma` (file offset `pgoff`) of a binary with
/// `sections`; None when no segment of the binary fits the mapping. Modules are unnamed
/// (framehop keeps the name for debugging only): a copy of an address space with tens of
/// thousands of modules then allocates no string per module.
pub(crate) fn module_parts(
    sections: &UnwindSections,
    avma: Range<u64>,
    pgoff: u64,
) -> Option<ModuleParts> {
    let bias = sections.bias(avma.start, pgoff)?;
    let in_process = |r: &Range<u64>| r.start.wrapping_add(bias)..r.end.wrapping_add(bias);
    let alternate =
        (sections.prefer_debug_frame && !sections.eh_frame_ranges.is_empty()).then(|| {
            let module = Module::new(
                String::new(),
                avma.clone(),
                bias,
                section_info(sections, CallFrameSection::EhFrame),
            );
            (
                module,
                sections.eh_frame_ranges.iter().map(in_process).collect(),
            )
        });
    let primary = if sections.prefer_debug_frame {
        CallFrameSection::DebugFrame
    } else {
        CallFrameSection::EhFrame
    };
    let go = sections.go.as_ref().map(|table| GoModule {
        avma: avma.clone(),
        bias,
        table: table.clone(),
        // Go's linker writes no `.eh_frame` for Go code (a cgo binary's describes its C code
        // only): without `.debug_frame`, Go functions are walked with the table.
        use_pcsp: sections.debug_frame.is_none(),
    });
    Some(ModuleParts {
        module: Module::new(String::new(), avma, bias, section_info(sections, primary)),
        trampolines: sections.signal_trampolines.iter().map(in_process).collect(),
        alternate,
        go,
    })
}

/// Which call-frame section a framehop module reads (framehop reads `.debug_frame` only when
/// it is given no `.eh_frame`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallFrameSection {
    EhFrame,
    DebugFrame,
}

fn section_info(
    sections: &UnwindSections,
    which: CallFrameSection,
) -> ExplicitModuleSectionInfo<SectionData> {
    let eh = which == CallFrameSection::EhFrame;
    ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: sections.text.as_ref().map(|s| s.svma.clone()),
        text: sections.text.as_ref().map(|s| s.data.clone()),
        eh_frame_svma: sections
            .eh_frame
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.svma.clone()),
        eh_frame: sections
            .eh_frame
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.data.clone()),
        eh_frame_hdr_svma: sections
            .eh_frame_hdr
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.svma.clone()),
        eh_frame_hdr: sections
            .eh_frame_hdr
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.data.clone()),
        debug_frame: sections
            .debug_frame
            .as_ref()
            .filter(|_| !eh)
            .map(|s| s.data.clone()),
        stubs_svma: None,
        stub_helper_svma: None,
        got_svma: None,
        unwind_info: None,
        text_segment_svma: None,
        text_segment: None,
    }
}
