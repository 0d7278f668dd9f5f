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

/// Bring the calling thread back to nice 0 when it started below: a helper started by a
/// thread that runs ahead of users' threads (profilerd's drain) does not itself run ahead.
/// Raising a nice value needs no privilege.
pub(crate) fn not_ahead_of_default_priority() {
    // SAFETY: errno is this thread's own; getpriority and setpriority take integers only, and
    // who = 0 is the calling thread on Linux (-1 is a valid nice value: errno tells an error).
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice < 0 && *libc::__errno_location() == 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, 0);
        }
    }
}
