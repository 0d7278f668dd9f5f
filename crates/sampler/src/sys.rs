//! The crate's only `unsafe`: the perf_event_open syscall, its ioctls, mmap of the ring buffer,
//! and the drain loop's timer (a timerfd).
//!
//! Every wrapper returns `io::Result`; a new descriptor becomes an [`OwnedFd`] at once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys as sys;
use perf_event_open_sys::bindings::{perf_event_attr, perf_event_mmap_page};

/// Open one perf event (see perf_event_open(2)); `pid` -1 means every process, `cpu` -1 every CPU.
///
/// An attr asking for `PERF_FORMAT_LOST` that the kernel refuses (EINVAL: before 6.0) is
/// opened again without it; [`read_lost`] then fails for that event.
pub(crate) fn perf_event_open(attr: &perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let lost = u64::from(sys::bindings::PERF_FORMAT_LOST);
    match open_attr(attr, pid, cpu) {
        Err(err) if err.raw_os_error() == Some(libc::EINVAL) && attr.read_format & lost != 0 => {
            let mut without = *attr;
            without.read_format &= !lost;
            open_attr(&without, pid, cpu)
        }
        other => other,
    }
}

fn open_attr(attr: &perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut attr = *attr;
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr whose `size` field matches the
    // struct; the kernel only reads it (and may write back `size` on E2BIG), and we own the copy.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            pid,
            cpu,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn check_ioctl(ret: i32) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The samples the kernel lost on the event `fd` (opened with `PERF_FORMAT_LOST` alone:
/// read() answers {value, lost}); an error when it was opened without that format.
pub(crate) fn read_lost(fd: &OwnedFd) -> io::Result<u64> {
    let mut buf = [0u64; 4];
    // SAFETY: `buf` is a writable buffer of `size_of_val(&buf)` bytes that outlives the call;
    // `fd` is an open perf event descriptor.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(&buf),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n != 16 {
        return Err(io::Error::other(format!(
            "the event's read() answered {n} bytes, not value and lost count"
        )));
    }
    Ok(buf[1])
}

/// Start counting (PERF_EVENT_IOC_ENABLE).
pub(crate) fn enable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: `fd` is an open perf event descriptor; ENABLE takes no pointer argument.
    check_ioctl(unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), 0) })
}

/// Stop counting (PERF_EVENT_IOC_DISABLE).
pub(crate) fn disable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: `fd` is an open perf event descriptor; DISABLE takes no pointer argument.
    check_ioctl(unsafe { sys::ioctls::DISABLE(fd.as_raw_fd(), 0) })
}

/// Send `fd`'s records into the ring buffer of `target` (PERF_EVENT_IOC_SET_OUTPUT).
pub(crate) fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: both descriptors are open perf events; SET_OUTPUT takes a descriptor number.
    check_ioctl(unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) })
}

/// Set the event's sampling period, or, for an event in frequency mode, its frequency
/// (PERF_EVENT_IOC_PERIOD; the kernel reads which from the event's current `attr.freq`).
pub(crate) fn set_period(fd: &OwnedFd, value: u64) -> io::Result<()> {
    // `ioctls::PERIOD` of perf-event-open-sys passes its u64 argument by value, but the kernel
    // reads the new value through a pointer (`copy_from_user`): call ioctl directly.
    // SAFETY: `fd` is an open perf event descriptor; PERIOD reads one u64 through the pointer,
    // which points to a live local for the whole call; nothing is written through it.
    check_ioctl(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            sys::bindings::PERIOD as _,
            std::ptr::addr_of!(value),
        )
    })
}

/// Hint the CPU to start loading the cache line holding `data[offset]` (an offset past the
/// end is ignored); never faults, never blocks, does nothing on other architectures. For ring
/// data written by another CPU, whose every line is a cache miss: issued early, the misses
/// overlap.
#[inline]
pub(crate) fn prefetch(data: &[u8], offset: usize) {
    #[cfg(target_arch = "x86_64")]
    if offset < data.len() {
        let line = data.as_ptr().wrapping_add(offset).cast::<i8>();
        // SAFETY: PREFETCHT0 is a hint that neither reads nor writes memory as far as the
        // program is concerned (it never faults; `line` is inside `data` anyway); SSE, whose
        // target feature the intrinsic names, is part of every x86_64 CPU.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, offset);
}

/// The current CLOCK_MONOTONIC time in ns: the clock of the records' timestamps.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if ret != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// A new CLOCK_MONOTONIC timerfd, non-blocking, disarmed (see timerfd_create(2)).
pub(crate) fn timer() -> io::Result<OwnedFd> {
    // SAFETY: timerfd_create takes no pointer; a negative return is an error.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arm `timer` (from [`timer`]) to expire once, `after` from now (at least 1 ns: a zero
/// value would disarm it).
pub(crate) fn arm_timer(timer: &OwnedFd, after: std::time::Duration) -> io::Result<()> {
    let after = after.max(std::time::Duration::from_nanos(1));
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: after.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: after.subsec_nanos() as libc::c_long,
        },
    };
    // SAFETY: `spec` is a valid itimerspec for the duration of the call; the old value is not
    // asked for (null).
    let ret = unsafe { libc::timerfd_settime(timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clear `timer`'s expirations (it is readable until read); nothing to read is not an error.
pub(crate) fn clear_timer(timer: &OwnedFd) {
    let mut expirations = 0u64;
    // SAFETY: `expirations` is a writable u64 of the 8 bytes a timerfd read takes, alive for
    // the call; the descriptor is non-blocking.
    let _ = unsafe {
        libc::read(
            timer.as_raw_fd(),
            std::ptr::addr_of_mut!(expirations).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// A shared, read-write mapping of a perf event's metadata page and data area.
pub(crate) struct RingMap {
    base: NonNull<u8>,
    len: usize,
    page: usize,
}

// SAFETY: the mapping is plain shared memory; all access to the control fields goes through
// atomics and the data area is only read; nothing in it is tied to a thread.
unsafe impl Send for RingMap {}

impl RingMap {
    /// Map `1 + data_pages` pages of `fd` (data_pages a power of two).
    pub(crate) fn new(fd: &OwnedFd, data_pages: usize) -> io::Result<RingMap> {
        let page = page_size();
        let len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of a perf event fd; the kernel validates the length and
        // we check the result before using it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(RingMap { base, len, page })
    }

    fn control(&self) -> *mut perf_event_mmap_page {
        self.base.as_ptr().cast()
    }

    /// Load `data_head` with acquire ordering: every record before it is fully written.
    pub(crate) fn load_head(&self) -> u64 {
        // SAFETY: data_head is an aligned u64 inside the mapped metadata page, written by the
        // kernel; reading it atomically through an AtomicU64 view is what the ABI prescribes.
        let head =
            unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.control()).data_head)) };
        head.load(Ordering::Acquire)
    }

    /// Load our own last published `data_tail`.
    pub(crate) fn load_tail(&self) -> u64 {
        // SAFETY: as in `load_head`; only this process writes data_tail.
        let tail =
            unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.control()).data_tail)) };
        tail.load(Ordering::Relaxed)
    }

    /// Publish `data_tail` with release ordering: the kernel may now overwrite what we read.
    pub(crate) fn store_tail(&self, tail: u64) {
        // SAFETY: as in `load_head`; the release store orders our reads of the data before it.
        let slot =
            unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.control()).data_tail)) };
        slot.store(tail, Ordering::Release);
    }

    /// The data area (every page after the first).
    pub(crate) fn data(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes long and lives as long as `self`; the kernel writes
        // only between data_head and data_tail, which callers read after the acquire load above.
        unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.page), self.len - self.page)
        }
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned; nothing borrows the data now.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// Register a duplicate of `fd` with tokio's reactor for read readiness.
pub(crate) fn register_readable(fd: &OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    register_readable_owned(fd.try_clone()?)
}

/// Register `fd` with tokio's reactor for read readiness; the `AsyncFd` owns it.
pub(crate) fn register_readable_owned(
    fd: OwnedFd,
) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of `fd`, an OwnedFd that stays open, and keeps
    // returning the same descriptor, for the AsyncFd's whole lifetime.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
