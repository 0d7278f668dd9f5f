//! Decompressed DWARF sections kept on disk, by build-id.
//!
//! Debian's debug files (libc6-dbg and most `-dbgsym` packages) compress their DWARF with
//! zlib. Decompressing libc's takes about 15 ms of CPU, which every `profctl record` that
//! meets a new libc address paid again. The sections are written once, uncompressed, to
//! `<dir>/<build-id>-<file identity>/<section>`, and later processes map them instead. The
//! identity (size, owner, device, inode, modification time of the debug file) binds an entry
//! to the file it was made from: another user's file carrying the same build-id has its own
//! entry and never supplies this one's sections. Only files whose
//! compressed DWARF is large are cached; a cached section is used only when its size is the
//! one the compression header announces, and files are replaced by rename, never rewritten in
//! place, so a mapping in use stays valid. At most [`MAX_FILES`] build-ids are kept: the
//! least recently written go first.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

/// Compressed DWARF smaller than this is decompressed every time (a few hundred µs at most).
#[cfg(not(test))]
const MIN_COMPRESSED_BYTES: u64 = 512 * 1024;
/// Unit tests cache the small binaries they build.
#[cfg(test)]
const MIN_COMPRESSED_BYTES: u64 = 1;
/// Build-ids kept in the cache directory.
const MAX_FILES: usize = 32;
/// Bytes kept in the cache directory (each section is at most 1 GiB, see
/// [`crate::decompress::MAX_SECTION_BYTES`]).
const MAX_BYTES: u64 = 4 << 30;

/// A section's bytes: decompressed in memory, or mapped from the cache.
pub(crate) enum SectionBytes {
    /// Decompressed by this process.
    Owned(Vec<u8>),
    /// Mapped from the cache directory.
    Mapped(memmap2::Mmap),
}

impl SectionBytes {
    /// The section's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            SectionBytes::Owned(v) => v,
            SectionBytes::Mapped(m) => m,
        }
    }
}

/// The cache entry of one debug file.
pub(crate) struct SectionCache {
    root: PathBuf,
    dir: PathBuf,
}

impl SectionCache {
    /// The entry of `obj` under `root`, when `obj` has a build-id and enough compressed DWARF
    /// to be worth caching.
    pub(crate) fn for_file(
        root: &Path,
        obj: &object::File<'_>,
        file: &crate::elf::FileIdentity,
    ) -> Option<SectionCache> {
        let build_id = obj.build_id().ok()??;
        let compressed: u64 = obj
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")))
            .filter_map(|s| s.compressed_file_range().ok())
            .filter(|r| r.format != object::CompressionFormat::None)
            .map(|r| r.compressed_size)
            .sum();
        (compressed >= MIN_COMPRESSED_BYTES).then(|| SectionCache {
            root: root.to_owned(),
            dir: root.join(format!("{}-{}", crate::error::hex(build_id), file.key())),
        })
    }

    fn path(&self, section: &str) -> PathBuf {
        self.dir.join(section.trim_start_matches('.'))
    }

    /// The cached section, if present with exactly `size` bytes.
    pub(crate) fn get(&self, section: &str, size: u64) -> Option<SectionBytes> {
        let path = self.path(section);
        let map = crate::elf::map_file(&path).ok()?;
        if map.len() as u64 != size {
            tracing::debug!(path = %path.display(), "ignoring a cached section of the wrong size");
            return None;
        }
        Some(SectionBytes::Mapped(map))
    }

    /// Keep a decompressed section for later processes; failures are only logged.
    pub(crate) fn put(&self, section: &str, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let path = self.path(section);
        let new_build_id = !self.dir.exists();
        if let Err(err) = crate::disk_cache::write_replacing(&path, data) {
            tracing::debug!(path = %path.display(), %err, "cannot cache a decompressed section");
        }
        if new_build_id {
            crate::disk_cache::prune(&self.root, MAX_FILES, MAX_BYTES, Path::is_dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use object::{Object, ObjectSection};

    use crate::{DebugSearch, FileSymbolizer, ResolvedFrame, SymbolAddr};

    /// Every fourth address of `.text`, with file:line.
    fn all_frames(bin: &std::path::Path, search: &DebugSearch) -> Vec<Vec<ResolvedFrame>> {
        let data = std::fs::read(bin).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let text = obj.section_by_name(".text").unwrap();
        let sym = FileSymbolizer::open(bin, None, search).unwrap();
        (text.address()..text.address() + text.size())
            .step_by(4)
            .map(|a| sym.frames(SymbolAddr(a), true))
            .collect()
    }

    #[test]
    fn sections_are_cached_reused_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("inline-gz");
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/inline.c");
        let status = Command::new("cc")
            .args(["-O2", "-g", "-gz=zlib", "-Wl,--build-id", "-o"])
            .arg(&bin)
            .arg(fixture)
            .status()
            .unwrap();
        assert!(status.success());
        let cache = dir.path().join("cache");
        let search = DebugSearch {
            system_debug_dir: Default::default(),
            section_cache: Some(cache.clone()),
            ..DebugSearch::system()
        };
        let uncached = all_frames(
            &bin,
            &DebugSearch {
                section_cache: None,
                ..search.clone()
            },
        );
        assert!(uncached.iter().flatten().any(|f| f.line.is_some()));

        // The first process decompresses and writes; the second maps.
        assert_eq!(all_frames(&bin, &search), uncached);
        let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
        assert_eq!(entries.len(), 1, "one build-id directory");
        let info = entries[0].path().join("debug_info");
        let line = entries[0].path().join("debug_line");
        let info_len = std::fs::metadata(&info).unwrap().len();
        assert!(info_len > 0);
        assert_eq!(all_frames(&bin, &search), uncached);

        // The cached bytes are what is read: garbage of the right size changes the lines.
        let good_line = std::fs::read(&line).unwrap();
        std::fs::write(&line, vec![0xffu8; good_line.len()]).unwrap();
        assert_ne!(all_frames(&bin, &search), uncached);

        // A section of the wrong size is ignored and rewritten.
        std::fs::write(&line, b"short").unwrap();
        assert_eq!(all_frames(&bin, &search), uncached);
        assert_eq!(std::fs::read(&line).unwrap(), good_line);
    }

    /// Issue 11, item 3: a file another user made, carrying the build-id of a system file
    /// and DWARF naming its functions otherwise, is symbolized first; the system file's
    /// frames afterwards are its own, not the cached sections of the first.
    #[test]
    fn another_files_sections_never_serve_a_file_with_its_build_id() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/inline.c");
        // The attacker's source: the same code nine lines further down.
        let shifted = dir.path().join("inline.c");
        let text = std::fs::read_to_string(fixture).unwrap();
        std::fs::write(&shifted, format!("{}{text}", "\n".repeat(9))).unwrap();
        let build = |out: &std::path::Path, src: &std::path::Path, extra: &[&str]| {
            let status = Command::new("cc")
                .args(["-O2", "-g", "-gz=zlib", "-Wl,--build-id"])
                .args(extra)
                .arg("-o")
                .arg(out)
                .arg(src)
                .status()
                .unwrap();
            assert!(status.success());
        };
        let system = dir.path().join("system");
        build(&system, fixture.as_ref(), &[]);
        let poison = dir.path().join("poison");
        // Names of the same lengths, so that the sections have the same sizes.
        build(&poison, &shifted, &["-Dhot=HOT", "-Dinl1=INL1"]);
        // Give the attacker's file the system file's build-id.
        let id_of = |p: &std::path::Path| {
            let data = std::fs::read(p).unwrap();
            object::File::parse(&*data)
                .unwrap()
                .build_id()
                .unwrap()
                .unwrap()
                .to_vec()
        };
        let (want, have) = (id_of(&system), id_of(&poison));
        let mut bytes = std::fs::read(&poison).unwrap();
        let at = bytes.windows(have.len()).position(|w| w == have).unwrap();
        bytes[at..at + want.len()].copy_from_slice(&want);
        std::fs::write(&poison, &bytes).unwrap();
        assert_eq!(id_of(&poison), want);
        if unsafe_free_is_root() {
            std::os::unix::fs::chown(&poison, Some(65534), Some(65534)).unwrap();
        }

        let search = DebugSearch {
            system_debug_dir: Default::default(),
            section_cache: Some(dir.path().join("cache")),
            ..DebugSearch::system()
        };
        let uncached = all_frames(
            &system,
            &DebugSearch {
                section_cache: None,
                ..search.clone()
            },
        );
        let poisoned = all_frames(&poison, &search);
        let names = |f: &[Vec<ResolvedFrame>]| {
            f.iter()
                .flatten()
                .any(|f| f.function == "HOT" || f.function == "INL1")
        };
        assert!(names(&poisoned), "the attacker's file names its own frames");
        assert_ne!(poisoned, uncached, "the attacker's lines differ");
        let after = all_frames(&system, &search);
        assert!(!names(&after), "the system file got the attacker's names");
        assert_eq!(after, uncached);
    }

    /// Whether this process runs as root (reads `/proc/self/status`, no libc call).
    fn unsafe_free_is_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
            })
            .unwrap_or(false)
    }

    #[test]
    fn old_build_ids_are_evicted() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..super::MAX_FILES + 3 {
            std::fs::create_dir(dir.path().join(format!("{i:02}"))).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let cache = super::SectionCache {
            root: dir.path().to_owned(),
            dir: dir.path().join("new"),
        };
        cache.put(".debug_info", b"bytes");
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), super::MAX_FILES);
        assert!(left.contains(&"new".to_string()));
        assert!(!left.contains(&"00".to_string()) && !left.contains(&"03".to_string()));
    }
}
