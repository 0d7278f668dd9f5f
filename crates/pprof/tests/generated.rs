//! The checked-in Rust code for the vendored `proto/google/profile.proto` is what prost-build
//! makes of it today: regenerated with `protoc` (Debian's protobuf-compiler) and compared byte
//! for byte. With `PPROF_REGENERATE=1` the checked-in copy is rewritten instead.

use std::path::Path;

#[test]
fn generated_code_matches_the_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    prost_build::Config::new()
        .out_dir(out.path())
        .compile_protos(
            &[root.join("proto/google/profile.proto")],
            &[root.join("proto")],
        )
        .expect("protoc (apt-get install protobuf-compiler) compiles profile.proto");
    let fresh = std::fs::read_to_string(out.path().join("perftools.profiles.rs")).unwrap();
    let checked_in_path = root.join("src/generated/perftools.profiles.rs");
    if std::env::var_os("PPROF_REGENERATE").is_some() {
        std::fs::write(&checked_in_path, &fresh).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&checked_in_path).unwrap();
    assert!(
        checked_in == fresh,
        "src/generated/perftools.profiles.rs differs from prost-build's output for \
         proto/google/profile.proto; regenerate it with \
         PPROF_REGENERATE=1 cargo test -p pprof --test generated"
    );
}
