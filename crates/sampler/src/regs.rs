//! Which user registers to sample for unwinding, and where they sit in a sample
//! (perf_regs numbering of `arch/*/include/uapi/asm/perf_regs.h`; values come in bit order).

/// The registers an unwinder needs, as sampled in user mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (rbp on x86-64, x29 on aarch64).
    pub fp: u64,
    /// Link register (aarch64; 0 elsewhere).
    pub lr: u64,
}

#[cfg(target_arch = "x86_64")]
mod arch {
    pub const BP: u32 = 6;
    pub const SP: u32 = 7;
    pub const IP: u32 = 8;
    /// bp, sp, ip.
    pub const MASK: u64 = 1 << BP | 1 << SP | 1 << IP;
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub const FP: u32 = 29;
    pub const LR: u32 = 30;
    pub const SP: u32 = 31;
    pub const PC: u32 = 32;
    /// x29, x30, sp, pc.
    pub const MASK: u64 = 1 << FP | 1 << LR | 1 << SP | 1 << PC;
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod arch {
    pub const MASK: u64 = 0;
}

/// `sample_regs_user` for unwinding on this architecture.
pub const UNWIND_REGS_MASK: u64 = arch::MASK;

/// The value of register `reg` among `values` sampled with `mask`.
fn reg(values: &[u8], mask: u64, reg: u32) -> Option<u64> {
    if mask & (1 << reg) == 0 {
        return None;
    }
    let index = (mask & ((1u64 << reg) - 1)).count_ones() as usize;
    let bytes = values.get(index * 8..index * 8 + 8)?;
    Some(u64::from_ne_bytes(bytes.try_into().ok()?))
}

/// Extract the unwinding registers from sampled register values.
#[cfg(target_arch = "x86_64")]
pub(crate) fn unwind_regs(values: &[u8], mask: u64) -> Option<UserRegs> {
    Some(UserRegs {
        ip: reg(values, mask, arch::IP)?,
        sp: reg(values, mask, arch::SP)?,
        fp: reg(values, mask, arch::BP)?,
        lr: 0,
    })
}

/// Extract the unwinding registers from sampled register values.
#[cfg(target_arch = "aarch64")]
pub(crate) fn unwind_regs(values: &[u8], mask: u64) -> Option<UserRegs> {
    Some(UserRegs {
        ip: reg(values, mask, arch::PC)?,
        sp: reg(values, mask, arch::SP)?,
        fp: reg(values, mask, arch::FP)?,
        lr: reg(values, mask, arch::LR)?,
    })
}

/// Extract the unwinding registers from sampled register values.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn unwind_regs(values: &[u8], mask: u64) -> Option<UserRegs> {
    let _ = (values, mask, reg);
    None
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn registers_come_in_bit_order() {
        let values: Vec<u8> = [0xb0u64, 0x5e, 0x1f]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let r = unwind_regs(&values, UNWIND_REGS_MASK).unwrap();
        assert_eq!((r.fp, r.sp, r.ip), (0xb0, 0x5e, 0x1f));
        assert!(unwind_regs(&values[..16], UNWIND_REGS_MASK).is_none());
    }
}
