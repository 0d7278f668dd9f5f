//! Go code: unwinding a frame with the Go runtime's own stack-pointer table (`pcsp` in
//! `.gopclntab`), for Go binaries without call-frame information (stripped of `.debug_frame`),
//! and the outermost frames of Go stacks (`TOPFRAME` functions such as `runtime.goexit`).

use std::ops::Range;
use std::sync::Arc;

use framehop::UnwindRegsNative;
use gosym::GoTable;

use crate::section::SectionData;

/// A Go binary mapped into a process.
#[derive(Clone)]
pub(crate) struct GoModule {
    /// Process addresses of the mapping.
    pub avma: Range<u64>,
    /// Added to file addresses to get process addresses.
    pub bias: u64,
    pub table: Arc<GoTable<SectionData>>,
    /// Unwind with the `pcsp` table (the binary has no call-frame information of its own);
    /// otherwise only the end of the stack is taken from the table.
    pub use_pcsp: bool,
}

/// What the Go table says about one frame.
pub(crate) enum GoStep {
    /// No Go function holds the address: another unwinder's turn.
    NotGo,
    /// The frame is the outermost of its stack (the stack is complete with it).
    Top,
    /// Unwind this frame with the binary's call-frame information.
    CallFrameInfo,
    /// The caller's return address (the registers were moved to the caller).
    Caller(u64),
    /// The table has no stack-pointer delta for the address, or a bad one.
    Unknown,
    /// The stack copy does not hold this address.
    OutsideCopy(u64),
}

/// Step out of the frame at `lookup` (a process address: the sampled instruction, or a call
/// site) in `module`, moving `regs` to the caller.
pub(crate) fn step(
    module: &GoModule,
    lookup: u64,
    regs: &mut UnwindRegsNative,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> GoStep {
    let pc = lookup.wrapping_sub(module.bias);
    let Some(func) = module.table.func_at(pc) else {
        return GoStep::NotGo;
    };
    if func.is_top_frame() {
        return GoStep::Top;
    }
    if !module.use_pcsp {
        return GoStep::CallFrameInfo;
    }
    pcsp_step(func.sp_delta(pc), regs, read_stack)
}

/// x86-64: the return address is at SP + delta, the caller's SP (the CFA) 8 bytes above it,
/// and a function with a frame saved its caller's frame pointer just below the return address.
#[cfg(target_arch = "x86_64")]
fn pcsp_step(
    delta: Option<i32>,
    regs: &mut UnwindRegsNative,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> GoStep {
    let Some(delta) = delta.filter(|d| *d >= 0 && d % 8 == 0) else {
        return GoStep::Unknown;
    };
    let sp = regs.sp();
    let Some(ra_at) = sp.checked_add(delta as u64) else {
        return GoStep::Unknown;
    };
    let ra = match read_stack(ra_at) {
        Ok(ra) => ra,
        Err(()) => return GoStep::OutsideCopy(ra_at),
    };
    if delta > 0 {
        if let Ok(bp) = read_stack(ra_at - 8) {
            regs.set_bp(bp);
        }
    }
    regs.set_sp(ra_at + 8);
    GoStep::Caller(ra)
}

/// Elsewhere the table's deltas are not used yet (the link register's rules differ): the
/// frame is left to the binary's call-frame information or frame pointers.
#[cfg(not(target_arch = "x86_64"))]
fn pcsp_step(
    _delta: Option<i32>,
    _regs: &mut UnwindRegsNative,
    _read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> GoStep {
    GoStep::CallFrameInfo
}
