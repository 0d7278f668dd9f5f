//! `systemd/profilerd.service` is a valid unit (`systemd-analyze verify` prints nothing: it
//! exits 0 on unknown keys and bad values, so any output fails) and keeps its hardening
//! (`systemd-analyze security --offline=true` at or under [`MAX_EXPOSURE`]). `ExecStart=` and
//! the other commands are pointed at the binary built here, since verify fails when they are
//! missing. Needs `systemd-analyze` (Debian package `systemd`; scripts/test installs it).

use std::path::Path;
use std::process::Command;

/// The highest exposure accepted (measured: 2.8 "OK" with systemd 252).
const MAX_EXPOSURE: f64 = 3.0;

/// The unit, with /usr/bin/profilerd replaced by the binary under test, in a directory of its
/// own (verify names the unit after its file).
fn unit_under_test() -> (tempfile::TempDir, std::path::PathBuf) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/profilerd.service");
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/profilerd"), "{text}");
    let text = text.replace("/usr/bin/profilerd", env!("CARGO_BIN_EXE_profilerd"));
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("profilerd.service");
    std::fs::write(&unit, text).unwrap();
    (dir, unit)
}

fn systemd_analyze(args: &[&str], unit: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run systemd-analyze ({e}): install the `systemd` package (scripts/test does)")
        })
}

#[test]
fn the_unit_verifies_without_a_word() {
    let (_dir, unit) = unit_under_test();
    let out = systemd_analyze(&["verify"], &unit);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify ({}):\n{said}",
        out.status
    );
}

#[test]
fn the_unit_keeps_its_hardening() {
    let (_dir, unit) = unit_under_test();
    let threshold = format!("--threshold={}", (MAX_EXPOSURE * 10.0).round() as u32);
    let out = systemd_analyze(&["security", "--offline=true", &threshold], &unit);
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for profilerd.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure level in:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    eprintln!("systemd-analyze security: exposure {exposure}");
    assert!(
        exposure <= MAX_EXPOSURE && out.status.success(),
        "exposure {exposure} is above {MAX_EXPOSURE} ({}):\n{text}",
        out.status
    );
    // What must stay off for sampling and naming to work (see docs/install.md).
    let unit_text = std::fs::read_to_string(&unit).unwrap();
    for forbidden in [
        "ProtectKernelLogs=yes",
        "ProtectProc=",
        "ProcSubset=",
        "PrivateTmp=yes",
    ] {
        assert!(
            !unit_text.contains(forbidden),
            "{forbidden} breaks profiling"
        );
    }
    assert!(unit_text.contains("SystemCallFilter=@system-service @debug"));
    // What a user makes the daemon do stays within a memory and task limit of its own.
    for bound in ["MemoryMax=", "MemoryHigh=", "TasksMax="] {
        assert!(
            unit_text
                .lines()
                .any(|l| l.starts_with(bound) && l.len() > bound.len()),
            "the unit sets no {bound}"
        );
    }
}
