//! Where the recorder finds a mapped file for naming: as a live process sees it. Naming
//! itself is [`symbolize::SymbolService`]'s.

use std::path::PathBuf;

use procmap::Mapping;

pub(crate) use symbolize::own_vdso_image as own_vdso;

/// The file as the live process sees it: a deleted file through its map_files, any other
/// through its root (it may live in another mount namespace). None once the process is gone.
pub(crate) fn live_path(pid: u32, mapping: &Mapping, path: &str) -> Option<PathBuf> {
    let through = match path.strip_suffix(" (deleted)") {
        Some(_) => PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start, mapping.end
        )),
        None => PathBuf::from(format!("/proc/{pid}/root{path}")),
    };
    through.exists().then_some(through)
}
