//! Finding a binary's debug info: the build-id directories, `.gnu_debuglink` (CRC checked),
//! MiniDebugInfo, extra directories, explicit debug files and a debug file's dwz
//! supplementary file, each candidate matched and read with the right user's access.

use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;
use object::{Object, ObjectSection};
use procmap::Access;

use crate::elf::{map_file_as, ElfFile, FileIdentity};
use crate::error::{hex, Error};

/// Where to look for separate debug files.
#[derive(Clone, Debug, Default)]
pub struct DebugSearch {
    /// Extra directories (`--debug-dir`), searched last: each for
    /// `<dir>/.build-id/xx/rest.debug` and `<dir>/<debuglink name>`.
    pub extra_dirs: Vec<PathBuf>,
    /// The system debug directory, normally `/usr/lib/debug`: searched for
    /// `.build-id/xx/rest.debug` and for `<dir of binary>/<debuglink name>`.
    /// Empty: not searched.
    pub system_debug_dir: PathBuf,
    /// Debug files to try last, matched by build-id only (for example fetched from a
    /// debuginfod server).
    pub debug_files: Vec<PathBuf>,
    /// Where the decompressed DWARF sections of large compressed debug files are kept, by
    /// build-id; None: decompressed again by every process.
    pub section_cache: Option<PathBuf>,
    /// Where the symbol tables of large binaries are kept once parsed, by build-id and file
    /// size; None: parsed again by every process.
    pub symbol_cache: Option<PathBuf>,
}

impl DebugSearch {
    /// The system's debug directory (`/usr/lib/debug`) and no extra ones.
    pub fn system() -> DebugSearch {
        DebugSearch {
            extra_dirs: Vec::new(),
            system_debug_dir: PathBuf::from("/usr/lib/debug"),
            debug_files: Vec::new(),
            section_cache: None,
            symbol_cache: None,
        }
    }
}

/// CRC-32 (IEEE 802.3, as zlib computes it): the checksum a
/// `.gnu_debuglink` section records for its debug file.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// A debug file named by `.gnu_debuglink` is CRC-checked (read whole) only up to this size;
/// a larger one is skipped (a multi-GB sparse file would cost seconds of reading).
pub const MAX_DEBUGLINK_BYTES: u64 = 1 << 30;

/// Facts about an ELF image needed to look for its debug info.
#[derive(Default)]
pub(crate) struct Inspect {
    pub(crate) build_id: Option<Vec<u8>>,
    /// Whether it has a non-empty `.debug_info`.
    pub(crate) has_dwarf: bool,
    /// `.gnu_debuglink`: the debug file's name and CRC.
    pub(crate) debuglink: Option<(String, u32)>,
    /// `.gnu_debugaltlink`: the dwz supplementary file's name and build-id.
    pub(crate) altlink: Option<(Vec<u8>, Vec<u8>)>,
    /// `.gnu_debugdata` (MiniDebugInfo, xz-compressed).
    pub(crate) mini_debug_info: Option<Vec<u8>>,
}

/// The [`Inspect`] facts of the ELF image `data` (all empty when it does not parse).
pub(crate) fn inspect(data: &[u8]) -> Inspect {
    let Ok(obj) = object::File::parse(data) else {
        return Inspect::default();
    };
    let has_dwarf = obj
        .section_by_name(".debug_info")
        .is_some_and(|s| s.file_range().is_some_and(|(_, size)| size > 0));
    Inspect {
        build_id: obj.build_id().ok().flatten().map(<[u8]>::to_vec),
        has_dwarf,
        debuglink: obj
            .gnu_debuglink()
            .ok()
            .flatten()
            .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc)),
        altlink: obj
            .gnu_debugaltlink()
            .ok()
            .flatten()
            .map(|(name, id)| (name.to_vec(), id.to_vec())),
        mini_debug_info: obj
            .section_by_name(".gnu_debugdata")
            .and_then(|s| s.data().ok())
            .filter(|d| !d.is_empty())
            .map(<[u8]>::to_vec),
    }
}

/// A separate debug file that matched.
struct DebugFile {
    map: Mmap,
    identity: FileIdentity,
    elf: ElfFile,
    info: Inspect,
}

/// What a candidate debug file must match.
#[derive(Clone, Copy)]
struct Want<'a> {
    /// Required build-id (`None`: the file may have any or none).
    build_id: Option<&'a [u8]>,
    /// False: a file without any build-id passes (debuglink: the CRC
    /// decides); one with another build-id still fails.
    build_id_required: bool,
    /// Required CRC-32 of the whole file.
    crc: Option<u32>,
    /// Where parsed symbol tables are kept ([`DebugSearch::symbol_cache`]).
    symbol_cache: Option<&'a Path>,
}

impl<'a> Want<'a> {
    /// A file found by build-id: it must have `build_id`.
    fn build_id(build_id: Option<&'a [u8]>, search: &'a DebugSearch) -> Want<'a> {
        Want {
            build_id,
            build_id_required: true,
            crc: None,
            symbol_cache: search.symbol_cache.as_deref(),
        }
    }

    /// A file `.gnu_debuglink` names: its CRC must be `crc`, and its build-id `build_id`
    /// when it has one.
    fn debuglink(build_id: Option<&'a [u8]>, crc: u32, search: &'a DebugSearch) -> Want<'a> {
        Want {
            build_id,
            build_id_required: false,
            crc: Some(crc),
            symbol_cache: search.symbol_cache.as_deref(),
        }
    }
}

/// A debug file at `path`, opened with `access` (the binary's owner's, for a path beside a
/// binary another user owns), if it matches `want`. A candidate found with a user's access
/// must also be that user's or root's: another user's file never names this binary's frames.
fn try_debug_file(path: &Path, want: Want<'_>, access: &Access) -> Option<DebugFile> {
    let (map, identity) = match map_file_as(path, access) {
        Ok(m) => m,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(candidate = %path.display(), "no debug file here");
            return None;
        }
        Err(err) => {
            tracing::debug!(candidate = %path.display(), %err, "cannot read debug file");
            return None;
        }
    };
    if let Access::User { uid, .. } = access {
        if identity.uid() != *uid && identity.uid() != 0 {
            tracing::debug!(
                candidate = %path.display(),
                owner = identity.uid(),
                "debug file owned by neither the binary's owner nor root; ignored"
            );
            return None;
        }
    }
    let info = inspect(&map);
    if let Some(want_id) = want.build_id {
        let missing_ok = !want.build_id_required && info.build_id.is_none();
        if !missing_ok && info.build_id.as_deref() != Some(want_id) {
            tracing::debug!(
                candidate = %path.display(),
                expected = %hex(want_id),
                found = %info.build_id.as_deref().map_or_else(|| "none".to_owned(), hex),
                "debug file has the wrong build-id; ignored"
            );
            return None;
        }
    }
    if let Some(want_crc) = want.crc {
        if map.len() as u64 > MAX_DEBUGLINK_BYTES {
            tracing::warn!(
                candidate = %path.display(),
                bytes = map.len(),
                limit = MAX_DEBUGLINK_BYTES,
                "debuglink file too large to check its CRC; skipped"
            );
            return None;
        }
        let found = crc32(&map);
        if found != want_crc {
            tracing::debug!(
                candidate = %path.display(),
                expected = format_args!("{want_crc:08x}"),
                found = format_args!("{found:08x}"),
                "debug file has the wrong CRC; ignored"
            );
            return None;
        }
    }
    let cache = want.symbol_cache.map(|dir| (dir, identity));
    let elf = match ElfFile::parse_cached(&map, &path.display().to_string(), cache) {
        Ok(e) => e,
        Err(err) => {
            tracing::debug!(candidate = %path.display(), %err, "cannot parse debug file");
            return None;
        }
    };
    tracing::debug!(debug_file = %path.display(), dwarf = info.has_dwarf, "debug file matches");
    Some(DebugFile {
        map,
        identity,
        elf,
        info,
    })
}

/// `/usr/lib/debug/.build-id/xx/rest.debug` under `dir`.
fn build_id_path_in(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(
        dir.join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{}.debug", hex(rest))),
    )
}

/// `/proc/PID/root/usr/bin` → `/usr/bin`: the directory as the process sees it.
fn without_proc_root(dir: &Path) -> PathBuf {
    let mut comps = dir.components();
    let is_proc_root = matches!(
        (comps.next(), comps.next(), comps.next(), comps.next()),
        (Some(Component::RootDir), Some(Component::Normal(p)), Some(Component::Normal(pid)), Some(Component::Normal(r)))
            if p == "proc" && r == "root" && pid.to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
    );
    if is_proc_root {
        Path::new("/").join(comps.as_path())
    } else {
        dir.to_path_buf()
    }
}

/// A debuglink name must be a plain file name: no directories, no `..`.
pub(crate) fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// Decompress `.gnu_debugdata` (xz), bounded (see [`crate::decompress::xz`]).
fn xz_decompress(data: &[u8], binary: &Path) -> Option<Vec<u8>> {
    match crate::decompress::xz(data) {
        Ok(out) => Some(out),
        Err(err @ crate::decompress::DecompressError::TooLarge { .. }) => {
            tracing::warn!(file = %binary.display(), %err, "MiniDebugInfo (.gnu_debugdata) skipped");
            None
        }
        Err(err) => {
            tracing::debug!(file = %binary.display(), %err, "cannot decompress .gnu_debugdata");
            None
        }
    }
}

/// The file whose DWARF a search found, and the access it was read with (its dwz file is
/// read so too).
pub(crate) struct DwarfSource {
    /// The file's name (its path, or the binary's name for the binary's own DWARF).
    pub(crate) name: String,
    pub(crate) map: Mmap,
    pub(crate) identity: FileIdentity,
    /// `.gnu_debugaltlink`: the dwz supplementary file's name and build-id.
    pub(crate) altlink: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) access: Access,
}

/// Search state while opening.
#[derive(Default)]
pub(crate) struct Found {
    /// Symbol tables of the debug sources, in search order.
    pub(crate) extra_symbols: Vec<ElfFile>,
    /// Labels of the sources found, in search order.
    pub(crate) sources: Vec<String>,
    /// The file with DWARF; the search stops once it is found.
    pub(crate) dwarf: Option<DwarfSource>,
}

/// What the search for a binary's debug files starts from.
pub(crate) struct SearchFrom<'a> {
    /// The binary as the process sees it (debuglink files are looked for beside it).
    pub(crate) path: &'a Path,
    /// The build-id debug files must have: the binary's, else the one the kernel reported.
    pub(crate) build_id: Option<&'a [u8]>,
    /// The binary's `.gnu_debuglink` (a plain file name and the CRC), when usable.
    pub(crate) debuglink: Option<&'a (String, u32)>,
    /// The binary's `.gnu_debugdata` section (xz), when it has one.
    pub(crate) mini_debug_info: Option<&'a [u8]>,
    /// The access files beside the binary are read with.
    pub(crate) beside: &'a Access,
}

impl Found {
    /// Record a matching debug file; true when it has DWARF (search done).
    fn add(&mut self, label: String, file: DebugFile, access: &Access) -> bool {
        tracing::debug!(source = %label, "debug info source found");
        self.sources.push(label);
        let DebugFile {
            map,
            identity,
            elf,
            info,
        } = file;
        let name = elf.name().to_owned();
        self.extra_symbols.push(elf);
        if info.has_dwarf {
            self.dwarf = Some(DwarfSource {
                name,
                map,
                identity,
                altlink: info.altlink,
                access: access.clone(),
            });
            true
        } else {
            false
        }
    }

    /// Whether a file with DWARF was found (the search stops there).
    fn done(&self) -> bool {
        self.dwarf.is_some()
    }

    /// Look for debug files, in this order, until one has DWARF: `<system>/.build-id/xx/rest.debug`;
    /// `.gnu_debuglink` next to the binary, in its `.debug/` folder and under
    /// `<system>/<dir of binary>`; MiniDebugInfo; each extra directory; the explicit debug
    /// files. Every match's symbol table is kept.
    pub(crate) fn search(&mut self, from: &SearchFrom<'_>, search: &DebugSearch) {
        self.search_system_build_id(from, search);
        self.search_debuglink(from, search);
        self.search_mini_debug_info(from);
        self.search_extra_dirs(from, search);
        self.search_debug_files(from, search);
    }

    /// Step 1: `<system>/.build-id/xx/rest.debug`.
    fn search_system_build_id(&mut self, from: &SearchFrom<'_>, search: &DebugSearch) {
        let system = &search.system_debug_dir;
        if self.done() || system.as_os_str().is_empty() {
            return;
        }
        if let Some(p) = from.build_id.and_then(|id| build_id_path_in(system, id)) {
            let want = Want::build_id(from.build_id, search);
            if let Some(f) = try_debug_file(&p, want, &Access::Own) {
                self.add(format!("build-id dir {}", p.display()), f, &Access::Own);
            }
        }
    }

    /// Step 2: `.gnu_debuglink`: beside the binary and in its `.debug/` folder (with the access
    /// of files beside it), then under the system directory (with ours).
    fn search_debuglink(&mut self, from: &SearchFrom<'_>, search: &DebugSearch) {
        let (false, Some((name, crc))) = (self.done(), from.debuglink) else {
            return;
        };
        let system = &search.system_debug_dir;
        let path = from.path;
        let dir = path.parent().unwrap_or(Path::new("/"));
        let mut candidates = vec![
            (dir.join(name), from.beside),
            (dir.join(".debug").join(name), from.beside),
        ];
        if !system.as_os_str().is_empty() {
            let rel = without_proc_root(dir);
            let rel = rel.strip_prefix("/").unwrap_or(&rel);
            candidates.push((system.join(rel).join(name), &Access::Own));
        }
        for (p, reader) in candidates {
            // A debuglink naming the binary itself is no debug file.
            if p == path {
                continue;
            }
            if let Some(f) =
                try_debug_file(&p, Want::debuglink(from.build_id, *crc, search), reader)
            {
                if self.add(format!("debuglink {}", p.display()), f, reader) {
                    break;
                }
            }
        }
    }

    /// Step 3: MiniDebugInfo (`.gnu_debugdata`): symbols only, never DWARF.
    fn search_mini_debug_info(&mut self, from: &SearchFrom<'_>) {
        let (false, Some(xz)) = (self.done(), from.mini_debug_info) else {
            return;
        };
        let path = from.path;
        let Some(data) = xz_decompress(xz, path) else {
            return;
        };
        let name = format!("{} [.gnu_debugdata]", path.display());
        match ElfFile::parse(&data, &name) {
            Ok(mini_elf) => match (mini_elf.build_id(), from.build_id) {
                (Some(a), Some(b)) if a != b => {
                    tracing::debug!("MiniDebugInfo has another build-id; ignored");
                }
                _ => {
                    tracing::debug!(binary = %path.display(), symbols = mini_elf.symbol_count(), "debug info source: MiniDebugInfo");
                    self.sources.push("minidebuginfo".to_owned());
                    self.extra_symbols.push(mini_elf);
                }
            },
            Err(err) => tracing::debug!(%err, "cannot parse MiniDebugInfo"),
        }
    }

    /// Step 4: Each extra directory: `.build-id/xx/rest.debug`, then `<dir>/<debuglink name>`.
    fn search_extra_dirs(&mut self, from: &SearchFrom<'_>, search: &DebugSearch) {
        'dirs: for dir in &search.extra_dirs {
            if self.done() {
                break;
            }
            if let Some(p) = from.build_id.and_then(|id| build_id_path_in(dir, id)) {
                let want = Want::build_id(from.build_id, search);
                if let Some(f) = try_debug_file(&p, want, &Access::Own) {
                    if self.add(format!("extra dir {}", p.display()), f, &Access::Own) {
                        break 'dirs;
                    }
                }
            }
            if let Some((name, crc)) = from.debuglink {
                let p = dir.join(name);
                let want = Want::debuglink(from.build_id, *crc, search);
                if let Some(f) = try_debug_file(&p, want, &Access::Own) {
                    if self.add(format!("extra dir {}", p.display()), f, &Access::Own) {
                        break 'dirs;
                    }
                }
            }
        }
    }

    /// Step 5: Explicit debug files, by build-id.
    fn search_debug_files(&mut self, from: &SearchFrom<'_>, search: &DebugSearch) {
        for p in &search.debug_files {
            if self.done() || from.build_id.is_none() {
                break;
            }
            let want = Want::build_id(from.build_id, search);
            if let Some(f) = try_debug_file(p, want, &Access::Own) {
                self.add(format!("debug file {}", p.display()), f, &Access::Own);
            }
        }
    }
}

/// The dwz supplementary file named by `.gnu_debugaltlink`, matched by
/// build-id: the path as given (relative to the debug file's directory),
/// else by build-id under the system and extra debug directories. Returns its name
/// (the path it was found at), its mapping and which file that is.
///
/// The path the debug file names is read with `access` (the debug file's reader's: a user's
/// debug file may name any path); the debug directories with our own.
pub(crate) fn find_sup(
    debug_file: &Path,
    file: &[u8],
    id: &[u8],
    search: &DebugSearch,
    access: &Access,
) -> Option<(String, Mmap, FileIdentity)> {
    let name = Path::new(std::str::from_utf8(file).ok()?);
    let mut candidates = Vec::new();
    if name.is_absolute() {
        candidates.push((name.to_path_buf(), access));
    } else if let Some(dir) = debug_file.parent() {
        candidates.push((dir.join(name), access));
    }
    for dir in std::iter::once(&search.system_debug_dir).chain(&search.extra_dirs) {
        if !dir.as_os_str().is_empty() {
            candidates.extend(build_id_path_in(dir, id).map(|p| (p, &Access::Own)));
        }
    }
    let want = Want::build_id(Some(id), search);
    for (p, reader) in candidates {
        if let Some(f) = try_debug_file(&p, want, reader) {
            tracing::debug!(sup = %p.display(), "using the dwz supplementary file");
            return Some((p.display().to_string(), f.map, f.identity));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn proc_root_stripped() {
        assert_eq!(
            without_proc_root(Path::new("/proc/123/root/usr/bin")),
            Path::new("/usr/bin")
        );
        assert_eq!(
            without_proc_root(Path::new("/proc/self/root/usr/bin")),
            Path::new("/proc/self/root/usr/bin")
        );
        assert_eq!(
            without_proc_root(Path::new("/usr/bin")),
            Path::new("/usr/bin")
        );
    }

    #[test]
    fn build_id_paths() {
        assert_eq!(
            build_id_path_in(Path::new("/x"), &[0xab, 0xcd, 0xef]).unwrap(),
            Path::new("/x/.build-id/ab/cdef.debug")
        );
        assert!(build_id_path_in(Path::new("/x"), &[0xab]).is_none());
    }

    #[test]
    fn names() {
        assert!(plain_file_name("a.debug"));
        assert!(!plain_file_name("../a.debug"));
        assert!(!plain_file_name(""));
        assert_eq!(crate::demangle::without_version("f@@GLIBC_2.2"), "f");
    }
}
