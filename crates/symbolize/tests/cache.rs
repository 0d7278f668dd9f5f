//! SymbolCache: parse once, check build-ids, cache failures.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use common::{fixtures, hex};
use symbolize::{ElfFile, Error, FileKey, SymbolCache};

fn path_key(p: &Path) -> FileKey {
    let m = std::fs::metadata(p).unwrap();
    FileKey::Path {
        path: p.to_owned(),
        dev: m.dev(),
        ino: m.ino(),
    }
}

#[test]
fn same_key_parsed_once() {
    let f = fixtures();
    let mut cache = SymbolCache::new();
    assert_eq!(cache.len(), 0);
    let key = path_key(&f.pie);
    let a = cache.get(&key, &f.pie).unwrap();
    let b = cache.get(&key, &f.pie).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(cache.len(), 1);
    let lib = cache.get(&path_key(&f.lib), &f.lib).unwrap();
    assert!(!Arc::ptr_eq(&a, &lib));
    assert_eq!(cache.len(), 2);
}

#[test]
fn build_id_keys() {
    let f = fixtures();
    let mut cache = SymbolCache::default();
    let id = ElfFile::open(&f.lib).unwrap().build_id().unwrap().to_vec();
    // Right build-id, found through the stripped copy: fine.
    let key = FileKey::BuildId(id.clone());
    let a = cache.get(&key, &f.lib_stripped).unwrap();
    assert_eq!(a.build_id(), Some(id.as_slice()));
    assert!(Arc::ptr_eq(&a, &cache.get(&key, &f.lib).unwrap()));

    // Wrong build-id: not trusted.
    let mut wrong = id.clone();
    wrong[0] ^= 0xff;
    let err = cache
        .get(&FileKey::BuildId(wrong.clone()), &f.lib)
        .unwrap_err();
    match &*err {
        Error::BuildIdMismatch {
            path,
            expected,
            found,
        } => {
            assert_eq!(path, &f.lib);
            assert_eq!(expected, &hex(&wrong));
            assert_eq!(found, &hex(&id));
        }
        other => panic!("expected BuildIdMismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("libfixture.so"), "{err}");

    // A file without a build-id.
    let dir = tempfile::tempdir().unwrap();
    let no_id = dir.path().join("noid.so");
    let st = std::process::Command::new("objcopy")
        .args(["--remove-section=.note.gnu.build-id"])
        .arg(&f.lib)
        .arg(&no_id)
        .status()
        .unwrap();
    assert!(st.success());
    let err = SymbolCache::new()
        .get(&FileKey::BuildId(id), &no_id)
        .unwrap_err();
    assert!(
        matches!(&*err, Error::BuildIdMismatch { found, .. } if found == "none"),
        "{err:?}"
    );
}

#[test]
fn failures_are_cached() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.so");
    std::fs::write(&path, b"\x7fELF\x02\x01\x01 truncated").unwrap();
    let key = path_key(&path);
    let mut cache = SymbolCache::new();
    let e1 = cache.get(&key, &path).unwrap_err();
    assert!(e1.to_string().contains("corrupt.so"), "{e1}");
    // Even once the file is fixed, the cached failure stands for this key.
    std::fs::copy(&fixtures().lib, &path).unwrap();
    let e2 = cache.get(&key, &path).unwrap_err();
    assert!(Arc::ptr_eq(&e1, &e2));
    assert_eq!(cache.len(), 1);
    // Missing files too.
    let missing = dir.path().join("missing.so");
    let key = FileKey::Path {
        path: missing.clone(),
        dev: 0,
        ino: 0,
    };
    let e3 = cache.get(&key, &missing).unwrap_err();
    assert!(matches!(&*e3, Error::Io { .. }));
    assert!(Arc::ptr_eq(&e3, &cache.get(&key, &missing).unwrap_err()));
}
