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
    /// Unwind Go functions with the `pcsp` table (the binary has no `.debug_frame`; code the
    /// table does not hold, such as a cgo binary's C code, is left to `.eh_frame`); otherwise
    /// only the end of the stack is taken from the table.
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// A stack at 0x1000: words at 0x1000 + 8 i.
    fn stack(words: &[u64]) -> impl FnMut(u64) -> Result<u64, ()> + '_ {
        move |addr| {
            let i = addr.checked_sub(0x1000).ok_or(())? / 8;
            words.get(i as usize).copied().ok_or(())
        }
    }

    #[test]
    fn pcsp_moves_to_the_caller() {
        // A 24-byte frame: locals, the saved frame pointer, then the return address.
        let words = [0, 0xbad, 0x2000, 0x40_1234];
        let mut regs = UnwindRegsNative::new(0x40_0000, 0x1000, 0x1010);
        match pcsp_step(Some(24), &mut regs, &mut stack(&words)) {
            GoStep::Caller(ra) => assert_eq!(ra, 0x40_1234),
            _ => panic!("expected the caller"),
        }
        assert_eq!((regs.sp(), regs.bp()), (0x1020, 0x2000));
        // A frameless leaf: the return address at SP, the frame pointer untouched.
        let mut regs = UnwindRegsNative::new(0x40_0000, 0x1000, 0x3000);
        assert!(matches!(
            pcsp_step(Some(0), &mut regs, &mut stack(&[0x40_5678])),
            GoStep::Caller(0x40_5678)
        ));
        assert_eq!((regs.sp(), regs.bp()), (0x1008, 0x3000));
    }

    #[test]
    fn bad_deltas_and_short_copies() {
        let mut regs = UnwindRegsNative::new(0, 0x1000, 0);
        assert!(matches!(
            pcsp_step(None, &mut regs, &mut stack(&[1])),
            GoStep::Unknown
        ));
        assert!(matches!(
            pcsp_step(Some(-8), &mut regs, &mut stack(&[1])),
            GoStep::Unknown
        ));
        assert!(matches!(
            pcsp_step(Some(4), &mut regs, &mut stack(&[1])),
            GoStep::Unknown
        ));
        assert!(matches!(
            pcsp_step(Some(64), &mut regs, &mut stack(&[1])),
            GoStep::OutsideCopy(0x1040)
        ));
        assert_eq!(regs.sp(), 0x1000, "registers untouched when the step fails");
    }
}
