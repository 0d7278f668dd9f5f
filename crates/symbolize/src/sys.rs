//! The crate's system calls that need `unsafe`.

/// Where the kernel mapped this process's vDSO (`AT_SYSINFO_EHDR`), if it did.
pub(crate) fn vdso_base() -> Option<u64> {
    // SAFETY: getauxval only reads the auxiliary vector the kernel gave this process.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    (base != 0).then_some(base)
}

/// Let go of the pages of `map` that this process has resident. They stay in the page
/// cache, and the next read faults them back in from there (or from the file).
pub(crate) fn release_resident_pages(map: &memmap2::Mmap) {
    // SAFETY: every `Mmap` of this crate maps a file read-only and is never written, so
    // MADV_DONTNEED discards nothing: later reads see the same file bytes again.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
}
