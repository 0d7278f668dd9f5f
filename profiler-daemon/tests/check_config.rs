//! `profilerd --check-config`: the documented default file is valid; an invalid one is refused
//! with its file and line, exit status 1; flags are checked too. (Also makes `cargo test`
//! build `profilerd` for profctl's end-to-end daemon tests.)

use std::path::Path;
use std::process::{Command, Output};

fn profilerd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_profilerd"))
        .args(args)
        .output()
        .expect("run profilerd")
}

#[test]
fn the_default_file_checks_and_bad_files_are_refused_with_file_and_line() {
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/profilerd.toml");
    let out = profilerd(&["--check-config", "--config", default.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[storage]\nmax_age = \"3d\"\nmax_bytes = -5\n").unwrap();
    let out = profilerd(&["--check-config", "--config", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: TOML parse error at line 3", bad.display())),
        "{stderr}"
    );

    let out = profilerd(&[
        "--check-config",
        "--config",
        default.to_str().unwrap(),
        "--freq",
        "0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--freq"), "{stderr}");

    let missing = dir.path().join("missing.toml");
    let out = profilerd(&["--check-config", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
}
