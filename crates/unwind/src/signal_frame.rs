//! Unwinding through a signal handler's return trampoline (glibc's `__restore_rt`): the
//! trampoline has no caller, the kernel saved the interrupted code's registers in a
//! `ucontext` on the stack, at a fixed distance from the trampoline's stack pointer.

use framehop::UnwindRegsNative;

/// Where the interrupted code's registers are, relative to the stack pointer at the trampoline.
#[cfg(target_arch = "x86_64")]
mod layout {
    /// `struct rt_sigframe` begins with the return address the handler popped, so the
    /// trampoline's stack pointer is the `ucontext`; its `uc_mcontext` (a `struct sigcontext`:
    /// r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip) starts 40 bytes in.
    const MCONTEXT: u64 = 40;
    pub const BP: u64 = MCONTEXT + 10 * 8;
    pub const SP: u64 = MCONTEXT + 15 * 8;
    pub const IP: u64 = MCONTEXT + 16 * 8;
}

/// The registers of the code a signal interrupted, read from the signal frame the kernel
/// pushed; `sp` is the stack pointer while the trampoline runs, `read` reads 8 bytes of the
/// copied stack. `Ok(None)`: this architecture's frame layout is not known here.
/// `Err(address)`: the frame lies outside the copied stack.
#[cfg(target_arch = "x86_64")]
pub(crate) fn interrupted_regs(
    sp: u64,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<(u64, UnwindRegsNative)>, u64> {
    let mut load = |offset: u64| {
        let at = sp.checked_add(offset).ok_or(u64::MAX)?;
        read(at).map_err(|()| at)
    };
    let ip = load(layout::IP)?;
    let sp = load(layout::SP)?;
    let bp = load(layout::BP)?;
    Ok(Some((ip, UnwindRegsNative::new(ip, sp, bp))))
}

/// The registers of the code a signal interrupted: not implemented for this architecture
/// (the stack ends there, counted as unknown).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn interrupted_regs(
    _sp: u64,
    _read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<(u64, UnwindRegsNative)>, u64> {
    Ok(None)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn reads_rip_rsp_rbp_from_the_sigcontext() {
        let sp = 0x7ffd_0000_1000u64;
        let mut stack = vec![0u64; 64];
        stack[(layout::IP / 8) as usize] = 0x5555_0000_1234;
        stack[(layout::SP / 8) as usize] = 0x7ffd_0000_2000;
        stack[(layout::BP / 8) as usize] = 0x7ffd_0000_2040;
        let mut read = |addr: u64| -> Result<u64, ()> {
            stack.get(((addr - sp) / 8) as usize).copied().ok_or(())
        };
        let (ip, regs) = interrupted_regs(sp, &mut read).unwrap().unwrap();
        assert_eq!(ip, 0x5555_0000_1234);
        assert_eq!(regs.sp(), 0x7ffd_0000_2000);
        assert_eq!(regs.bp(), 0x7ffd_0000_2040);
        // A frame beyond the copy names the first address that could not be read.
        let mut short = |addr: u64| -> Result<u64, ()> {
            if addr < sp + 64 {
                Ok(0)
            } else {
                Err(())
            }
        };
        assert_eq!(
            interrupted_regs(sp, &mut short).unwrap_err(),
            sp + layout::IP
        );
    }
}
