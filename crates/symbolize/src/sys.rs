//! The crate's system calls that need `unsafe`.

/// Where the kernel mapped this process's vDSO (`AT_SYSINFO_EHDR`), if it did.
pub(crate) fn vdso_base() -> Option<u64> {
    // SAFETY: getauxval only reads the auxiliary vector the kernel gave this process.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    (base != 0).then_some(base)
}
