//! What [`UnwindSections`] reads from real binaries' call-frame sections: glibc's signal
//! trampoline, and which section describes a binary's code when it has both `.eh_frame` and
//! `.debug_frame`.

use std::path::{Path, PathBuf};
use std::process::Command;

use unwind::UnwindSections;

/// The C library this test process runs with (Rust test binaries link glibc dynamically).
fn own_libc() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
        })
        .map(PathBuf::from)
        .expect("this test process maps no libc.so")
}

#[cfg(target_arch = "x86_64")]
#[test]
fn glibc_signal_trampoline_is_found_where_rt_sigreturn_is_called() {
    let libc = own_libc();
    let s = UnwindSections::load(&libc).expect("load libc's unwind sections");
    assert_eq!(
        s.signal_trampolines.len(),
        1,
        "{}: expected exactly one signal trampoline (__restore_rt), found {:x?}",
        libc.display(),
        s.signal_trampolines
    );
    let range = s.signal_trampolines[0].clone();
    let text = s.text.as_ref().expect("libc has .text");
    assert!(
        text.svma.start <= range.start && range.end <= text.svma.end,
        "trampoline {range:x?} outside .text {:x?}",
        text.svma
    );
    // mov $15 (rt_sigreturn), %rax; syscall
    const RT_SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
    let at = (range.start - text.svma.start) as usize;
    let code = &text.data[at..(range.end - text.svma.start) as usize];
    assert!(
        code.windows(RT_SIGRETURN.len()).any(|w| w == RT_SIGRETURN),
        "trampoline {range:x?} does not call rt_sigreturn: {code:02x?}"
    );
}

fn cc(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        "int leaf(int x) { return x * 3; }\nint main(int c, char **v) { (void)v; return leaf(c); }\n",
    )
    .expect("write prog.c");
    let out = dir.join(name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc {flags:?} failed");
    out
}

#[test]
fn debug_frame_is_used_where_eh_frame_does_not_describe_the_code() {
    let dir = std::env::temp_dir().join(format!("unwind-cfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");

    // Usual build: .eh_frame describes everything, there is no .debug_frame.
    let usual = cc(&dir, "usual", &["-O2", "-g"]);
    let s = UnwindSections::load(&usual).expect("load");
    assert!(s.eh_frame.is_some());
    assert!(
        !s.prefer_debug_frame,
        "usual -g build: .eh_frame is complete"
    );
    assert!(s.eh_frame_ranges.is_empty());
    assert!(
        s.signal_trampolines.is_empty(),
        "no trampoline in a plain program"
    );

    // -fno-asynchronous-unwind-tables -g: the program's code is in .debug_frame only; .eh_frame
    // keeps the start files' entries (when it exists at all).
    let debug_only = cc(
        &dir,
        "debug_only",
        &[
            "-O2",
            "-g",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let s = UnwindSections::load(&debug_only).expect("load");
    assert!(s.debug_frame.is_some(), "no .debug_frame in the -g build");
    if s.eh_frame.is_some() {
        assert!(
            s.prefer_debug_frame,
            ".debug_frame describes the program's code and must be preferred"
        );
    }

    // Stripped, the .debug_frame goes to the debug file: the binary lacks call-frame
    // information until it is read from there.
    let debug_file = dir.join("debug_only.debug");
    let stripped = dir.join("stripped");
    objcopy(&["--only-keep-debug", path(&debug_only), path(&debug_file)]);
    objcopy(&["--strip-debug", path(&debug_only), path(&stripped)]);
    let mut s = UnwindSections::load(&stripped).expect("load");
    assert!(s.debug_frame.is_none());
    assert!(
        s.may_lack_call_frame_info(),
        "stripped -fno-asynchronous-unwind-tables build"
    );
    assert!(s
        .add_debug_frame_from(&debug_file)
        .expect("read the debug file"));
    assert!(s.debug_frame.is_some() && !s.may_lack_call_frame_info());
    if s.eh_frame.is_some() {
        assert!(s.prefer_debug_frame);
    }
    // libc describes its code in .eh_frame (no search for a debug file).
    assert!(!UnwindSections::load(&own_libc())
        .unwrap()
        .may_lack_call_frame_info());
    let _ = std::fs::remove_dir_all(&dir);
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn objcopy(args: &[&str]) {
    let status = Command::new("objcopy")
        .args(args)
        .status()
        .expect("run objcopy");
    assert!(status.success(), "objcopy {args:?} failed");
}
