//! Hostile input from other users (issue 11): an unprivileged user the test creates
//! (`profctl-test`, through `setpriv`) attacks a root `profctl record` of the whole system, and
//! the recording must end in bounded time and memory, change no file outside its outputs, put
//! no root-only content in any output, and print no raw terminal escape.
//!
//! Every test here needs root (to create the user and to record the whole system); run as
//! another user they say so and pass.
//!
//! The tests that bound a whole recording's time and memory or count its losses hold the
//! sampling lock alone; those that judge names and files, or that profctl ends within seconds
//! of a signal or of its target's exit, run beside other tests that sample.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// A directory in /tmp owned by the test user, and a way to run commands as that user.
struct Attacker {
    uid: u32,
    gid: u32,
    dir: tempfile::TempDir,
}

impl Attacker {
    /// None (with a note) when not root.
    fn new() -> Option<Attacker> {
        if id(&["-u"]) != Some(0) {
            eprintln!("note: not root: the hostile-user tests need root; skipped");
            return None;
        }
        let (uid, gid) = ensure_test_user();
        let dir = tempfile::Builder::new()
            .prefix("profctl-hostile-")
            .tempdir_in("/tmp")
            .expect("tempdir in /tmp");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown attacker dir");
        Some(Attacker { uid, gid, dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A copy of `bin` in the attacker's directory, owned by the attacker.
    fn install(&self, bin: &Path, name: &str) -> PathBuf {
        let to = self.path(name);
        fs::copy(bin, &to).expect("copy workload");
        fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&to, Some(self.uid), Some(self.gid)).unwrap();
        to
    }

    /// `sh -c SCRIPT` as the attacker, in the attacker's directory.
    fn shell(&self, script: &str) -> Spawned {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--clear-groups")
            .args(["--", "sh", "-c", script])
            .current_dir(self.dir.path());
        Spawned::spawn(cmd, "the attacker's script")
    }
}

/// A directory only root may enter, for files the attacker must never get into a profile.
fn root_only_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("profctl-rootonly-")
        .tempdir_in("/tmp")
        .expect("root-only dir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Peak resident memory (VmHWM) of a live process, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Wait up to `limit` for `p`, following its peak resident memory; panics past the limit.
fn wait_measuring(p: &mut Spawned, limit: Duration) -> (Run, u64) {
    let deadline = Instant::now() + scaled(limit);
    let mut peak = 0;
    loop {
        if let Some(kib) = peak_kib(p.pid()) {
            peak = peak.max(kib);
        }
        if let Some(run) = p.wait_timeout(Duration::from_millis(20)) {
            return (run, peak);
        }
        if Instant::now() >= deadline {
            p.wait_or_panic(Duration::ZERO);
        }
    }
}

/// Root's whole-system `profctl record ARGS` in `cwd`.
fn root_record(args: &[&str], cwd: &Path) -> Spawned {
    let mut cmd = Command::new(profctl());
    cmd.arg("record").args(args).current_dir(cwd);
    Spawned::spawn(cmd, "root's profctl record")
}

fn assert_no_escapes(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.iter().any(|&b| b == 0x1b || b == 0x07),
        "{what} holds a raw terminal escape:\n{}",
        String::from_utf8_lossy(bytes)
    );
}

/// Items 1, 7 and 13: a binary swapped for a FIFO right after its exec, a JIT map that is a
/// FIFO, a 2 GB sparse JIT map, and a program whose name is a terminal escape, all while root
/// records the whole system: the recording ends on time, within a memory bound, and escapes
/// nothing raw.
#[test]
fn fifos_huge_jit_maps_and_escapes_from_another_user() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_lock();
    let w = workloads();
    attacker.install(&w.burner, "burner");
    let jit = crate::symbols::jitmap_workload();
    attacker.install(jit, "j");
    let escape_name = "e\x1b]0;pwned\x07x";
    attacker.install(&w.burner, escape_name);
    let out = scratch();

    let mut profctl = root_record(
        &["--duration", "4", "--folded", "out.folded", "-o", "out.svg"],
        out.path(),
    );
    wait_recording(&mut profctl);
    let script = format!(
        r#"
        ./j 3 > j1.out &
        ./j 3 > j2.out &
        "./{escape_name}" 2 &
        sleep 0.3
        p1=$(sed -n 's/^pid //p' j1.out); p2=$(sed -n 's/^pid //p' j2.out)
        rm -f /tmp/perf-$p1.map; mkfifo /tmp/perf-$p1.map
        truncate -s 2G /tmp/perf-$p2.map
        echo "jit $p1 $p2" > pids
        for i in $(seq 30); do
            cp burner b; ./b 0.04 & sleep 0.005; mv -f b b.old; mkfifo b; wait $!; rm -f b
        done
        wait
        "#
    );
    let mut attack = attacker.shell(&script);
    let (run, peak) = wait_measuring(&mut profctl, Duration::from_secs(60));
    let attack_run = attack.wait_or_panic(Duration::from_secs(60));
    // Remove what the attacker left in /tmp.
    if let Ok(pids) = fs::read_to_string(attacker.path("pids")) {
        for pid in pids.split_whitespace().skip(1) {
            let _ = fs::remove_file(format!("/tmp/perf-{pid}.map"));
        }
    }
    run.assert_success("root's recording under the attack");
    assert!(
        attack_run.status.success(),
        "the attack script failed: {}",
        attack_run.stderr
    );
    eprintln!(
        "hostile fifos: recording took {:.1?}, peak resident {:.1} MB",
        run.elapsed,
        peak as f64 / 1024.0
    );
    assert!(
        run.elapsed < scaled(Duration::from_secs(30)),
        "a 4 s recording took {:.1?}",
        run.elapsed
    );
    assert!(
        peak < 400 * 1024,
        "peak resident memory {:.1} MB (a 2 GB JIT map must not be read whole)",
        peak as f64 / 1024.0
    );
    let folded = fs::read(out.path().join("out.folded")).expect("folded output written");
    assert!(out.path().join("out.svg").exists(), "SVG written");
    assert_no_escapes("the folded output", &folded);
    assert_no_escapes("profctl's stderr", run.stderr.as_bytes());
    assert_no_escapes("profctl's stdout", run.stdout.as_bytes());
    let text = String::from_utf8_lossy(&folded);
    assert!(
        text.contains("e\\u{1b}]0:pwned\\u{7}x"),
        "the escape-named program is in the profile, escaped:\n{}",
        top_lines(&parse_folded(&text), 20)
    );
}

/// Item 2: the output goes into a directory the attacker owns. Links planted at the old
/// predictable temporary and probe names, and symlinks at the output names, must change no
/// file outside the outputs; a FIFO of the attacker's at the output path is refused before
/// recording, and the attacker's reader gets nothing.
#[test]
fn planted_links_and_fifos_at_output_paths_change_nothing() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_shared();
    let victims = root_only_dir();
    let victim = victims.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    let victim_dir_before = fs::read_dir(victims.path()).unwrap().count();
    // The pids profctl may get: the next few hundred after the last one handed out.
    let last: u32 = fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1000);
    let script = format!(
        r#"
        for p in $(seq {from} {to}); do
            ln -s {victim} .out.svg.$p.tmp; ln -s {victim} .out.folded.$p.tmp
            ln -s {victim} .profctl-probe-$p
        done
        ln -s {victim} out.svg
        ln -s {victims}/created-by-root out.folded
        "#,
        from = last + 1,
        to = last + 400,
        victim = victim.display(),
        victims = victims.path().display(),
    );
    attacker
        .shell(&script)
        .wait_or_panic(Duration::from_secs(60))
        .assert_success("planting links");
    let mut profctl = root_record(
        &[
            "--duration",
            "1",
            "-o",
            attacker.path("out.svg").to_str().unwrap(),
            "--folded",
            attacker.path("out.folded").to_str().unwrap(),
        ],
        attacker.dir.path(),
    );
    let run = profctl.wait_or_panic(Duration::from_secs(60));
    run.assert_success("recording into the attacker's directory");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(
        fs::read_dir(victims.path()).unwrap().count(),
        victim_dir_before,
        "a file was created in the root-only directory"
    );
    for name in ["out.svg", "out.folded"] {
        let meta = fs::symlink_metadata(attacker.path(name)).unwrap();
        assert!(meta.is_file(), "{name} is not a regular file now");
        assert_eq!(meta.uid(), 0, "{name} is not root's");
    }

    // A FIFO of the attacker's at the output path, with the attacker reading it.
    let mut reader = attacker.shell("rm -f leak.fifo; mkfifo leak.fifo; cat leak.fifo > leaked");
    let fifo = attacker.path("leak.fifo");
    wait_for("the attacker's FIFO", Duration::from_secs(10), || {
        use std::os::unix::fs::FileTypeExt;
        match fs::symlink_metadata(&fifo) {
            Ok(m) if m.file_type().is_fifo() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let started = Instant::now();
    let run = root_record(
        &[
            "--duration",
            "1",
            "--folded",
            attacker.path("leak.fifo").to_str().unwrap(),
        ],
        attacker.dir.path(),
    )
    .wait_or_panic(Duration::from_secs(30));
    reader.kill_tree();
    assert!(
        !run.status.success(),
        "writing into another user's FIFO was not refused"
    );
    assert!(
        run.stderr.contains("owned by uid"),
        "stderr: {}",
        run.stderr
    );
    assert!(
        started.elapsed() < scaled(Duration::from_secs(1) + Duration::from_millis(900)),
        "refused only after {:.1?} (it must be before recording)",
        started.elapsed()
    );
    let leaked = fs::read(attacker.path("leaked")).unwrap_or_default();
    assert!(
        leaked.is_empty(),
        "the attacker read {} bytes",
        leaked.len()
    );
}

/// Item 5: a running binary swapped for a symlink to a root-only ELF, and a JIT map that is a
/// symlink to a root-only file: neither file's names get into the profile.
#[test]
fn root_only_files_linked_by_another_user_are_not_shown() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_shared_long();
    let w = workloads();
    attacker.install(&w.burner, "b");
    attacker.install(crate::symbols::jitmap_workload(), "j");
    let secrets = root_only_dir();
    let secret_elf = secrets.path().join("secret_elf");
    fs::copy(&w.split, &secret_elf).unwrap();
    let secret_map = secrets.path().join("secret.map");
    fs::write(&secret_map, "0 7fffffffffff ROOT_SECRET_JIT\n").unwrap();
    fs::set_permissions(&secret_map, fs::Permissions::from_mode(0o600)).unwrap();
    // Functions only the root-only ELF (split.c) has; burner.c has main and thread_cpu_ns.
    let secret_only = [
        "hot_a",
        "hot_b",
        "hot_c",
        "jitter",
        "calibrate",
        "worker",
        "flush_thread",
        "write_results",
    ];
    let out = scratch();
    let mut profctl = root_record(&["--duration", "4", "--folded", "out.folded"], out.path());
    wait_recording(&mut profctl);
    let script = format!(
        r#"
        ./b 3 &
        ./j 3 > j.out &
        sleep 0.2
        mv b b.real; ln -s {elf} b
        p=$(sed -n 's/^pid //p' j.out); rm -f /tmp/perf-$p.map; ln -s {map} /tmp/perf-$p.map
        echo $p > pid
        wait
        "#,
        elf = secret_elf.display(),
        map = secret_map.display()
    );
    let mut attack = attacker.shell(&script);
    let run = profctl.wait_or_panic(Duration::from_secs(60));
    let attack_run = attack.wait_or_panic(Duration::from_secs(60));
    if let Ok(pid) = fs::read_to_string(attacker.path("pid")) {
        let _ = fs::remove_file(format!("/tmp/perf-{}.map", pid.trim()));
    }
    run.assert_success("root's recording under the attack");
    assert!(attack_run.status.success(), "attack: {}", attack_run.stderr);
    let text = fs::read_to_string(out.path().join("out.folded")).unwrap();
    let stacks = parse_folded(&text);
    assert!(
        comm_total(&stacks, "b") > 0,
        "the attacker's b was not sampled"
    );
    assert!(
        !text.contains("ROOT_SECRET_JIT"),
        "a root-only JIT map was read:\n{}",
        top_lines(&stacks, 10)
    );
    for stack in stacks.iter().filter(|s| s.comm == "b") {
        for name in &secret_only {
            assert!(
                !stack.frames.iter().any(|f| f == name),
                "the root-only ELF named a frame of b ({name}): {}",
                stack.line()
            );
        }
    }
}

/// Item 9: a signal while frames are being named (here: waiting on a debuginfod server that
/// never answers) ends profctl at once, with status 130.
#[test]
fn a_signal_during_naming_ends_profctl() {
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let stripped = dir.path().join("stripped");
    fs::copy(&w.burner, &stripped).unwrap();
    tool(Command::new("strip").arg(&stripped));
    // A server that accepts connections (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let mut cmd = Command::new(profctl());
    cmd.args(["record", "--folded", "out.folded", "--"])
        .arg(&stripped)
        .arg("1")
        .env("DEBUGINFOD_URLS", &url)
        .current_dir(dir.path());
    let mut profctl = Spawned::spawn(cmd, "profctl with a silent debuginfod");
    // Naming starts when the command has run and exited: its recording is over.
    let mut started = false;
    wait_for(
        "the recorded command's exit",
        Duration::from_secs(30),
        || {
            let running = descendants(profctl.pid()).len();
            started |= running > 0;
            match (started, running) {
                (true, 0) => Ok(()),
                _ if profctl.wait_timeout(Duration::ZERO).is_some() => Ok(()),
                _ => Err(format!("started {started}, {running} descendants")),
            }
        },
    );
    if let Some(run) = profctl.wait_timeout(Duration::ZERO) {
        eprintln!(
            "note: profctl ended before the signal ({}); nothing to interrupt",
            run.status
        );
        return;
    }
    let signalled = Instant::now();
    send_signal(profctl.pid(), "INT");
    let run = profctl.wait_or_panic(Duration::from_secs(5));
    assert!(
        signalled.elapsed() < scaled(Duration::from_secs(2)),
        "SIGINT while naming ended profctl only after {:.1?}",
        signalled.elapsed()
    );
    assert_eq!(run.status.code(), Some(130), "stderr: {}", run.stderr);
    assert!(
        run.stderr.contains("stopping now"),
        "stderr: {}",
        run.stderr
    );
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// Items 4 and 6: the attacker runs binaries carrying a 66 KB zstd bomb in `.debug_info`
/// (2.1 GB of output, declaring 4 MiB), a 2 MB zlib bomb declaring 2 GiB, zstd bombs in
/// `.debug_abbrev`, `.debug_str` and `.debug_line`, 500k symbols sharing one 8 KB name, and a
/// `.gnu_debuglink` naming a 4 GiB sparse file beside it, while root records the whole
/// system: the recording ends on time, in bounded memory, and still names the binaries' frames
/// where their symbols were not skipped.
#[test]
fn compression_bombs_huge_symbol_tables_and_debuglinks_are_bounded() {
    use crate::hostile_elf as h;
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_lock();
    let w = workloads();
    let burner = fs::read(&w.burner).unwrap();
    let write_as = |name: &str, bytes: &[u8]| {
        let p = attacker.path(name);
        fs::write(&p, bytes).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&p, Some(attacker.uid), Some(attacker.gid)).unwrap();
    };
    let zstd = h::zstd_bomb(66_000);
    write_as(
        "zstdbomb",
        &h::with_compressed_section(&burner, ".debug_info", h::ZSTD, 4 << 20, &zstd),
    );
    write_as(
        "zlibbomb",
        &h::with_compressed_section(
            &burner,
            ".debug_info",
            h::ZLIB,
            2 << 30,
            &h::zlib_bomb(2 << 20),
        ),
    );
    let mut multi = burner.clone();
    for s in [".debug_abbrev", ".debug_str", ".debug_line"] {
        multi = h::with_compressed_section(&multi, s, h::ZSTD, 4 << 20, &zstd);
    }
    write_as("multibomb", &multi);
    write_as(
        "symbols",
        &h::with_shared_long_names(&burner, 500_000, 8192),
    );
    // A stripped copy whose debuglink names a 4 GiB sparse file the attacker makes.
    let link = attacker.path("link.contents");
    fs::write(&link, h::debuglink_contents("big.debug", 0x1234_5678)).unwrap();
    let status = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(format!("--add-section=.gnu_debuglink={}", link.display()))
        .arg(&w.burner)
        .arg(attacker.path("linked"))
        .status()
        .expect("objcopy");
    assert!(status.success());
    std::os::unix::fs::chown(
        attacker.path("linked"),
        Some(attacker.uid),
        Some(attacker.gid),
    )
    .unwrap();
    let out = scratch();

    let mut profctl = root_record(
        &["--duration", "5", "--folded", "out.folded", "-o", "out.svg"],
        out.path(),
    );
    wait_recording(&mut profctl);
    let mut attack = attacker.shell(
        r#"
        truncate -s 4G big.debug
        for b in zstdbomb zlibbomb multibomb symbols linked; do ./$b 0.5; done
        "#,
    );
    let (run, peak) = wait_measuring(&mut profctl, Duration::from_secs(60));
    let attack_run = attack.wait_or_panic(Duration::from_secs(60));
    run.assert_success("root's recording under the attack");
    assert!(attack_run.status.success(), "{}", attack_run.stderr);
    eprintln!(
        "hostile bombs: recording took {:.1?}, peak resident {:.1} MB",
        run.elapsed,
        peak as f64 / 1024.0
    );
    assert!(
        run.elapsed < scaled(Duration::from_secs(20)),
        "a 5 s recording took {:.1?}",
        run.elapsed
    );
    // Unbounded, these attacks cost gigabytes (2.1 GB for the zlib section, 5.3 GB for a zstd
    // bomb, 4 GB for the shared names). The whole-system recording also names whatever else
    // runs meanwhile (a compiler's large libraries, other tests): 220 MB on a quiet machine,
    // 350 MB measured beside a build.
    assert!(
        peak < 600 * 1024,
        "peak resident memory {:.1} MB",
        peak as f64 / 1024.0
    );
    let text = fs::read_to_string(out.path().join("out.folded")).expect("folded output");
    let stacks = parse_folded(&text);
    for comm in ["zstdbomb", "zlibbomb", "multibomb", "linked"] {
        assert!(
            stacks.iter().any(|s| s.comm == comm && s.has("child_hot")),
            "{comm}'s child_hot is named:\n{}",
            top_lines(&stacks, 30)
        );
    }
    // Over a cap, a warning names the file.
    assert!(
        run.stderr.contains("compressed DWARF section skipped")
            && run.stderr.contains("symbol tables over their cap"),
        "no warning names the skipped files:\n{}",
        run.stderr
    );
}

/// Item 8: root runs with a cache directory another user controls (`XDG_CACHE_HOME` kept, as
/// `sudo -E` does): the attacker's directory, whose `profctl` entry is a symlink into a
/// directory only root may enter. profctl refuses the cache root with a warning naming it,
/// and writes nothing through the link.
#[test]
fn a_cache_directory_another_user_controls_is_refused() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let w = workloads();
    let victim = root_only_dir();
    let cache = attacker.path("cache");
    fs::create_dir(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(attacker.uid), Some(attacker.gid)).unwrap();
    let link = cache.join("profctl");
    std::os::unix::fs::symlink(victim.path(), &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(attacker.uid), Some(attacker.gid)).unwrap();
    let out = Command::new(profctl())
        .args(["symbolize", "--elf"])
        .arg(&w.burner)
        .arg("0x1000")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run profctl symbolize");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "profctl symbolize failed: {stderr}");
    assert!(
        stderr.contains("cache directory refused") && stderr.contains("owned by uid"),
        "no warning names the refused cache directory:\n{stderr}"
    );
    let written: Vec<_> = fs::read_dir(victim.path()).unwrap().collect();
    assert!(written.is_empty(), "written through the link: {written:?}");
}

/// Item 5, debug files: the attacker builds a program from public source (no build-id,
/// stripped) whose `.gnu_debuglink` carries the CRC of root's debug file for root's own build
/// of it (a root-only file, whose names differ), then links it in: `secret.debug` beside one
/// binary is a symlink to it, and beside another the whole `.debug/` directory is a symlink
/// to root's directory. Root's recording must read files beside the attacker's binaries with
/// the attacker's access: none of root's names may name the attacker's frames. The attacker's
/// own debug file (mode 0600) beside a third copy still names its frames.
#[test]
fn debug_files_linked_beside_another_users_binary_are_read_with_their_access() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_shared_long();
    let secrets = root_only_dir();
    // Root's build: the same code, its function named differently; its debug file root-only.
    let flags = [
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fno-optimize-sibling-calls",
        "-Wl,--build-id=none",
    ];
    let root_build = secrets.path().join("root_build");
    compile_with(
        "burner.c",
        &root_build,
        &flags,
        &["-Dchild_hot=root_secret_hot"],
    );
    let secret_debug = secrets.path().join("secret.debug");
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&root_build)
            .arg(&secret_debug),
    );
    fs::set_permissions(&secret_debug, fs::Permissions::from_mode(0o600)).unwrap();
    let crc = symbolize::crc32(&fs::read(&secret_debug).unwrap());
    // The attacker's build of the public source, stripped, linked to root's debug file.
    let public = secrets.path().join("public_build");
    compile_with("burner.c", &public, &flags, &[]);
    let link = secrets.path().join("link.contents");
    fs::write(
        &link,
        crate::hostile_elf::debuglink_contents("secret.debug", crc),
    )
    .unwrap();
    for sub in ["file", "dir"] {
        let dir = attacker.path(sub);
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(attacker.uid), Some(attacker.gid)).unwrap();
        let bin = dir.join(format!("linked_{sub}"));
        tool(
            Command::new("objcopy")
                .arg("--strip-all")
                .arg(format!("--add-section=.gnu_debuglink={}", link.display()))
                .arg(&public)
                .arg(&bin),
        );
        std::os::unix::fs::chown(&bin, Some(attacker.uid), Some(attacker.gid)).unwrap();
    }
    // The attacker's own debug file, only the attacker may read.
    let own = attacker.path("own");
    fs::create_dir(&own).unwrap();
    let own_debug = own.join("own.debug");
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&public)
            .arg(&own_debug),
    );
    let own_link = secrets.path().join("own_link.contents");
    let own_crc = symbolize::crc32(&fs::read(&own_debug).unwrap());
    fs::write(
        &own_link,
        crate::hostile_elf::debuglink_contents("own.debug", own_crc),
    )
    .unwrap();
    tool(
        Command::new("objcopy")
            .arg("--strip-all")
            .arg(format!(
                "--add-section=.gnu_debuglink={}",
                own_link.display()
            ))
            .arg(&public)
            .arg(own.join("linked_own")),
    );
    fs::set_permissions(&own_debug, fs::Permissions::from_mode(0o600)).unwrap();
    for p in [&own, &own_debug, &own.join("linked_own")] {
        std::os::unix::fs::chown(p, Some(attacker.uid), Some(attacker.gid)).unwrap();
    }
    let out = scratch();
    let mut profctl = root_record(&["--duration", "4", "--folded", "out.folded"], out.path());
    wait_recording(&mut profctl);
    let script = format!(
        r#"
        set -e
        ln -s {debug} file/secret.debug
        ln -s {secrets} dir/.debug
        file/linked_file 100000 & dir/linked_dir 100000 & own/linked_own 100000 & wait
        "#,
        debug = secret_debug.display(),
        secrets = secrets.path().display(),
    );
    // The attacker's programs run until root's recording is named: a binary in the
    // attacker's 0700 directory is opened through its live process (a process gone before
    // its mapping was read leaves only the path, which root's recording reads with nobody's
    // access: beside a 2-CPU hog, with programs of 1.2 s, linked_own once went unnamed,
    // most likely so).
    let mut attack = attacker.shell(&script);
    let run = profctl.wait_or_panic(Duration::from_secs(60));
    let attack_ended = attack.wait_timeout(Duration::ZERO);
    attack.kill_tree();
    run.assert_success("root's recording under the attack");
    // A link that failed (`set -e`) ends the script before its programs start.
    if let Some(ended) = attack_ended {
        panic!("the attack ended before the recording: {}", ended.stderr);
    }
    let text = fs::read_to_string(out.path().join("out.folded")).unwrap();
    let stacks = parse_folded(&text);
    for comm in ["linked_file", "linked_dir", "linked_own"] {
        assert!(
            comm_total(&stacks, comm) > 100,
            "the attacker's {comm} was not sampled:\n{}",
            comm_summary(&stacks)
        );
    }
    assert!(
        !text.contains("root_secret_hot"),
        "a root-only debug file named the attacker's frames:\n{}",
        top_lines(&stacks, 10)
    );
    assert!(
        frame_count(&stacks, "linked_own", "child_hot") > 100,
        "the attacker's own debug file (read with the attacker's access) did not name \
         child_hot:\n{}",
        top_lines(&stacks, 10)
    );
}

/// Item 14: root records `--pid` of another user's process without a duration; the process
/// exits (as its user decides): the recording must end with it, not run on forever.
#[test]
fn a_pid_recording_ends_when_another_users_process_exits() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_shared();
    let w = workloads();
    attacker.install(&w.burner, "b");
    let mut target = attacker.shell("echo $$ > pid; exec ./b 1.5");
    let pid_file = attacker.path("pid");
    let pid = wait_for("the target's pid file", Duration::from_secs(10), || {
        fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| "no pid yet".to_string())
    });
    let out = scratch();
    let mut profctl = root_record(
        &["--pid", &pid.to_string(), "--folded", "out.folded"],
        out.path(),
    );
    let target_run = target.wait_or_panic(Duration::from_secs(30));
    let exited = Instant::now();
    assert!(target_run.status.success(), "{}", target_run.stderr);
    let run = profctl.wait_or_panic(Duration::from_secs(20));
    run.assert_success("--pid of a process that exited");
    assert!(
        exited.elapsed() < scaled(Duration::from_secs(3)),
        "the recording went on {:.1?} after its process exited",
        exited.elapsed()
    );
    let stacks = read_folded(&out.path().join("out.folded"));
    assert!(
        frame_count(&stacks, "b", "child_hot") > 0,
        "the target was not profiled:\n{}",
        comm_summary(&stacks)
    );
}

/// Item 10: another user keeps both CPUs busy in deep stacks while root records the whole
/// system into rings too small to keep up (`--ring-pages 16`: three samples with stacks):
/// the summary must say samples were lost, as many as the kernel counted, never "0 lost".
#[test]
fn overflowing_rings_report_their_losses() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    // Beside other tests: losses and the count of samples taken only grow with their load.
    let _guard = sampling_shared();
    let w = workloads();
    attacker.install(&w.burner, "b");
    let mut attack = attacker.shell("./b 3 & ./b 3 & ./b 3 & wait");
    wait_for(
        "the attacker's three burners",
        Duration::from_secs(10),
        || match descendants(attack.pid()).len() {
            n if n >= 3 => Ok(()),
            n => Err(format!("{n} running")),
        },
    );
    let out = scratch();
    let run = root_record(
        &[
            "--duration",
            "2",
            "--ring-pages",
            "16",
            "--folded",
            "out.folded",
        ],
        out.path(),
    )
    .wait_or_panic(Duration::from_secs(60));
    attack.wait_or_panic(Duration::from_secs(60));
    run.assert_success("a whole-system recording into small rings");
    let summary = run
        .stderr
        .lines()
        .find(|l| l.contains(" samples in ") && l.contains(" lost"))
        .unwrap_or_else(|| panic!("no summary line:\n{}", run.stderr));
    let number_before = |word: &str| -> u64 {
        let at = summary.find(word).expect("word in summary");
        summary[..at]
            .split(|c: char| !c.is_ascii_digit())
            .rfind(|s| !s.is_empty())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no number before {word:?} in {summary:?}"))
    };
    let samples = number_before(" samples in ");
    let lost = number_before(" lost");
    eprintln!("small rings: {summary}");
    assert!(lost > 0, "rings of 16 pages lost nothing: {summary}");
    // Two CPUs at 999 Hz for 2 s: about 4000 samples taken, kept or lost.
    assert!(
        samples + lost >= 2000,
        "only {samples} samples and {lost} lost counted: {summary}"
    );
}

/// Source of the twin programs of item 3: 2500 small functions (symbol tables of 2000 symbols
/// or more are the ones profctl caches on disk), a spare function whose name only pads the
/// string table, and `victim_hot`, which burns CPU for `argv[1]` seconds.
fn twins_source() -> String {
    let mut src = String::from("#include <stdlib.h>\n#include <time.h>\n");
    for i in 0..2500 {
        src.push_str(&format!(
            "int filler_{i}(int x) {{ return x * {} + {i}; }}\n",
            i % 7 + 2
        ));
    }
    src.push_str(
        r#"
int size_pad_name(int x) { return x + 1; }
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
volatile unsigned long sink;
__attribute__((noinline)) void victim_hot(double seconds) {
    double end = now() + seconds;
    unsigned long x = 1;
    while (now() < end)
        for (int i = 0; i < 200000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}
int main(int argc, char **argv) {
    victim_hot(argc > 1 ? atof(argv[1]) : 1.0);
    return sink == 42;
}
"#,
    );
    src
}

/// Flags of both twins: frame pointers, no DWARF (names come from the symbol table, the
/// cache this test plays against; frames from DWARF go to the frame cache instead).
const TWIN_FLAGS: &str =
    "-O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls";

/// The GNU build-id of `bin` in hex, by readelf.
fn gnu_build_id(bin: &Path) -> String {
    tool(Command::new("readelf").arg("-n").arg(bin))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build-id", bin.display()))
        .trim()
        .to_owned()
}

/// The address `nm` gives `symbol` in `bin`.
fn symbol_address(bin: &Path, symbol: &str) -> String {
    tool(Command::new("nm").arg(bin))
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, _, name) = (f.next()?, f.next()?, f.next()?);
            (name == symbol).then(|| addr.to_owned())
        })
        .unwrap_or_else(|| panic!("{} has no symbol {symbol}", bin.display()))
}

/// Root's `profctl record ARGS` in `cwd` with `cache` as `XDG_CACHE_HOME`, set through
/// env(1) because [`Spawned::spawn`] gives every run a cache of its own, and item 3 is about
/// what one run leaves in the cache for the next.
fn root_record_cached(args: &[&str], cwd: &Path, cache: &Path) -> Spawned {
    let mut cmd = Command::new("env");
    cmd.arg(format!("XDG_CACHE_HOME={}", cache.display()))
        .arg(profctl())
        .arg("record")
        .args(args)
        .current_dir(cwd);
    Spawned::spawn(cmd, "root's profctl record with a shared cache")
}

/// The files of `dir` (sorted; none if it is missing), for failure messages.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Item 3, cache poisoning across users, end to end. Root owns `victim` (in a directory only
/// root may write) whose hot function is `victim_hot`. The attacker, an unprivileged user,
/// builds `poison` from the same source with `victim_hot` renamed `poisoned_name`, links it
/// with the victim's build-id (`-Wl,--build-id=0x…`) and pads it to the victim's size, so the
/// two files agree in build-id, size and code addresses and differ only in their names.
///
/// Attack: root records the whole system (`XDG_CACHE_HOME` a cache directory kept between
/// runs) while the attacker runs `poison`; profctl parses its symbol table (2500 symbols) and
/// caches it under `symbols/`. A later root recording of `victim` with the same cache must
/// name its frames `victim_hot`, never `poisoned_name`. The reverse order, on a fresh cache
/// (root's table cached first), must not name the attacker's frames with root's names.
///
/// Before the fix (42c16a1; `f677a78` still has it) the table cache was keyed by build-id and
/// size only (`<build-id>-<size>.symtab`): the victim's lookup found the attacker's table and
/// every `victim_hot` sample was shown as `poisoned_name` (and the other way round). Keys now
/// also hold the file's owner, device, inode and mtime (`symbolize::elf::FileIdentity`).
#[test]
fn a_users_file_with_roots_build_id_never_names_roots_frames() {
    let Some(attacker) = Attacker::new() else {
        return;
    };
    let _guard = sampling_shared();
    // Root's program, in a directory only root may write.
    let root_dir = root_only_dir();
    let src = twins_source();
    let root_src = root_dir.path().join("victim.c");
    fs::write(&root_src, &src).unwrap();
    let victim = root_dir.path().join("victim");
    tool(
        Command::new("cc")
            .args(TWIN_FLAGS.split_whitespace())
            .arg("-Wl,--build-id=sha1")
            .arg("-o")
            .arg(&victim)
            .arg(&root_src),
    );
    let id = gnu_build_id(&victim);
    let size = fs::metadata(&victim).unwrap().len();
    // The attacker's twin, built as the attacker: `victim_hot` renamed, the padding name
    // shortened (the string table ends up shorter), then padded to the victim's size with
    // zeros after the section headers.
    fs::write(attacker.path("poison.c"), &src).unwrap();
    std::os::unix::fs::chown(
        attacker.path("poison.c"),
        Some(attacker.uid),
        Some(attacker.gid),
    )
    .unwrap();
    attacker
        .shell(&format!(
            "cc {TWIN_FLAGS} -Dvictim_hot=poisoned_name -Dsize_pad_name=s \
             -Wl,--build-id=0x{id} -o poison poison.c && \
             test $(stat -c %s poison) -le {size} && truncate -s {size} poison"
        ))
        .wait_or_panic(Duration::from_secs(120))
        .assert_success("building the attacker's twin");
    let poison = attacker.path("poison");
    let meta = fs::metadata(&poison).unwrap();
    assert_eq!(meta.uid(), attacker.uid, "the twin is the attacker's file");
    assert_eq!(
        gnu_build_id(&poison),
        id,
        "the twin carries root's build-id"
    );
    assert_eq!(meta.len(), size, "the twin has the victim's size");
    assert_eq!(
        symbol_address(&poison, "poisoned_name"),
        symbol_address(&victim, "victim_hot"),
        "the renamed function is at the victim's address"
    );

    // Attacker first, then root's program.
    let cache = root_only_dir();
    let symbols = cache.path().join("profctl/symbols");
    let out = scratch();
    let mut profctl = root_record_cached(
        &["--duration", "60", "--folded", "attack.folded"],
        out.path(),
        cache.path(),
    );
    wait_recording(&mut profctl);
    let attack_run = attacker
        .shell("./poison 1.5")
        .wait_or_panic(Duration::from_secs(60));
    // The twin has run its 1.5 CPU-s, however long a busy machine took: the recording ends
    // (the --duration is only a bound).
    send_signal(profctl.pid(), "INT");
    let run = profctl.wait_or_panic(Duration::from_secs(60));
    run.assert_success("root's recording of the attacker's twin");
    assert!(attack_run.status.success(), "{}", attack_run.stderr);
    let stacks = read_folded(&out.path().join("attack.folded"));
    // Judged as a share of the twin's samples, not a count: a whole-system recording beside
    // other tests and a two-CPU hog lost most of them (230 of some 1500 in one run).
    let (named, all) = (
        frame_count(&stacks, "poison", "poisoned_name"),
        comm_total(&stacks, "poison"),
    );
    assert!(
        named >= 50 && named as f64 >= 0.9 * all as f64,
        "the attacker's twin is not named by its own table ({named} of its {all} samples):\n{}",
        top_lines(&stacks, 20)
    );
    let cached = listing(&symbols);
    assert!(
        cached.iter().any(|f| f.starts_with(&id)),
        "the attacker's symbol table was not cached (the attack did not reach the cache); \
         {}: {cached:?}",
        symbols.display()
    );
    let run = root_record_cached(
        &[
            "--folded",
            "victim.folded",
            "--",
            victim.to_str().unwrap(),
            "1.5",
        ],
        out.path(),
        cache.path(),
    )
    .wait_or_panic(Duration::from_secs(60));
    run.assert_success("root's recording of its own program after the attack");
    let text = fs::read_to_string(out.path().join("victim.folded")).unwrap();
    let stacks = parse_folded(&text);
    assert!(
        !text.contains("poisoned_name"),
        "the attacker's file named root's frames (symbol cache keyed by build-id and size \
         only?):\n{}\ncache: {:?}",
        top_lines(&stacks, 20),
        listing(&symbols)
    );
    assert!(
        frame_count(&stacks, "victim", "victim_hot") > 300,
        "root's program is not named victim_hot:\n{}",
        top_lines(&stacks, 20)
    );

    // The reverse, on a fresh cache: root's table cached first, then the attacker's twin.
    let cache = root_only_dir();
    let symbols = cache.path().join("profctl/symbols");
    root_record_cached(
        &[
            "--folded",
            "victim2.folded",
            "--",
            victim.to_str().unwrap(),
            "1",
        ],
        out.path(),
        cache.path(),
    )
    .wait_or_panic(Duration::from_secs(60))
    .assert_success("root's recording of its own program");
    let stacks = read_folded(&out.path().join("victim2.folded"));
    assert!(
        frame_count(&stacks, "victim", "victim_hot") > 200,
        "root's program is not named victim_hot:\n{}",
        top_lines(&stacks, 20)
    );
    let cached = listing(&symbols);
    assert!(
        cached.iter().any(|f| f.starts_with(&id)),
        "root's symbol table was not cached; {}: {cached:?}",
        symbols.display()
    );
    let mut profctl = root_record_cached(
        &["--duration", "60", "--folded", "attack2.folded"],
        out.path(),
        cache.path(),
    );
    wait_recording(&mut profctl);
    let attack_run = attacker
        .shell("./poison 1.5")
        .wait_or_panic(Duration::from_secs(60));
    // The twin has run its 1.5 CPU-s, however long a busy machine took: the recording ends
    // (the --duration is only a bound).
    send_signal(profctl.pid(), "INT");
    let run = profctl.wait_or_panic(Duration::from_secs(60));
    run.assert_success("root's recording of the attacker's twin after root's program");
    assert!(attack_run.status.success(), "{}", attack_run.stderr);
    let stacks = read_folded(&out.path().join("attack2.folded"));
    assert!(
        !stacks
            .iter()
            .any(|s| s.comm == "poison" && s.has("victim_hot")),
        "root's file named the attacker's frames:\n{}",
        top_lines(&stacks, 20)
    );
    assert!(
        frame_count(&stacks, "poison", "poisoned_name") > 300,
        "the attacker's twin is not named by its own table:\n{}",
        top_lines(&stacks, 20)
    );
}
