//! A persistent cache of symbolized frames, per build-id and file offset.
//!
//! Indexing a large binary's DWARF costs tens of milliseconds (a separate, compressed debug
//! file for libc about 60 ms), every run. Most profiles of the same programs hit the same
//! addresses again, so their frames are kept on disk (`<dir>/<build-id>.frames`) and a later
//! run answers them without opening the binary at all. Keyed by build-id, an entry can never
//! belong to another build. A corrupt or foreign file is ignored and rewritten.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::symbolizer::ResolvedFrame;
use crate::table::Reader;

/// First bytes of a frames file.
const MAGIC: &[u8; 8] = b"PCFRM001";
/// Most entries kept per build-id: beyond, the file is not grown.
const MAX_ENTRIES_PER_FILE: usize = 1 << 20;

/// Key: file offset, and whether file:line was asked for.
type Key = (u64, bool);

#[derive(Default)]
struct FileFrames {
    frames: HashMap<Key, Vec<ResolvedFrame>>,
    dirty: bool,
}

/// Frames by (build-id, file offset), loaded from and saved to a directory.
pub struct FrameCache {
    dir: Option<PathBuf>,
    files: HashMap<Vec<u8>, FileFrames>,
    /// Lookups answered from the cache.
    pub hits: u64,
}

impl FrameCache {
    /// A cache kept in `dir` (None: in memory only).
    pub fn new(dir: Option<PathBuf>) -> FrameCache {
        FrameCache {
            dir,
            files: HashMap::new(),
            hits: 0,
        }
    }

    fn file(&mut self, build_id: &[u8]) -> &mut FileFrames {
        if !self.files.contains_key(build_id) {
            let loaded = self
                .dir
                .as_deref()
                .and_then(|dir| load(&path_for(dir, build_id)))
                .unwrap_or_default();
            self.files.insert(build_id.to_vec(), loaded);
        }
        self.files.get_mut(build_id).expect("inserted above")
    }

    /// Whether frames for this address are cached (loads the build-id's file on first use).
    pub fn contains(&mut self, build_id: &[u8], offset: u64, lines: bool) -> bool {
        self.file(build_id).frames.contains_key(&(offset, lines))
    }

    /// The cached frames (outermost first) of an address.
    pub fn get(&mut self, build_id: &[u8], offset: u64, lines: bool) -> Option<&[ResolvedFrame]> {
        if !self.contains(build_id, offset, lines) {
            return None;
        }
        self.hits += 1;
        self.files
            .get(build_id)?
            .frames
            .get(&(offset, lines))
            .map(Vec::as_slice)
    }

    /// Remember the frames of an address.
    pub fn insert(&mut self, build_id: &[u8], offset: u64, lines: bool, frames: &[ResolvedFrame]) {
        let file = self.file(build_id);
        if file.frames.len() < MAX_ENTRIES_PER_FILE {
            file.frames.insert((offset, lines), frames.to_vec());
            file.dirty = true;
        }
    }

    /// Write every changed build-id's file (atomically: temporary file, then rename).
    pub fn save(&mut self) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        for (build_id, file) in self.files.iter_mut().filter(|(_, f)| f.dirty) {
            std::fs::create_dir_all(dir)?;
            let path = path_for(dir, build_id);
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, encode(&file.frames))?;
            std::fs::rename(&tmp, &path)?;
            file.dirty = false;
        }
        Ok(())
    }
}

fn path_for(dir: &Path, build_id: &[u8]) -> PathBuf {
    dir.join(format!("{}.frames", crate::error::hex(build_id)))
}

fn load(path: &Path) -> Option<FileFrames> {
    let bytes = std::fs::read(path).ok()?;
    let frames = decode(&bytes);
    if frames.is_none() {
        tracing::debug!(path = %path.display(), "ignoring a corrupt frame cache");
    }
    Some(FileFrames {
        frames: frames?,
        dirty: false,
    })
}

fn put_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

fn encode(frames: &HashMap<Key, Vec<ResolvedFrame>>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(frames.len() as u64).to_le_bytes());
    for (&(offset, lines), list) in frames {
        out.extend_from_slice(&offset.to_le_bytes());
        out.push(lines as u8);
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for f in list {
            out.push(f.inlined as u8);
            out.extend_from_slice(&f.line.unwrap_or(u32::MAX).to_le_bytes());
            put_str(&mut out, Some(&f.function));
            put_str(&mut out, f.file.as_deref());
        }
    }
    out
}

fn get_str(r: &mut Reader<'_>) -> Option<Option<String>> {
    let len = r.u32()?;
    if len == u32::MAX {
        return Some(None);
    }
    Some(Some(
        String::from_utf8(r.bytes(len as usize)?.to_vec()).ok()?,
    ))
}

fn decode(bytes: &[u8]) -> Option<HashMap<Key, Vec<ResolvedFrame>>> {
    let mut r = Reader(bytes.strip_prefix(MAGIC)?);
    let count = usize::try_from(r.u64()?).ok()?;
    let mut frames = HashMap::with_capacity(count.min(MAX_ENTRIES_PER_FILE));
    for _ in 0..count {
        let offset = r.u64()?;
        let lines = *r.bytes(1)?.first()? != 0;
        let n = r.u32()? as usize;
        if n > r.0.len() {
            return None;
        }
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            let inlined = *r.bytes(1)?.first()? != 0;
            let line = Some(r.u32()?).filter(|&l| l != u32::MAX);
            let function = get_str(&mut r)??;
            let file = get_str(&mut r)?;
            list.push(ResolvedFrame {
                function,
                file,
                line,
                inlined,
            });
        }
        frames.insert((offset, lines), list);
    }
    r.0.is_empty().then_some(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, line: Option<u32>, inlined: bool) -> ResolvedFrame {
        ResolvedFrame {
            function: name.into(),
            file: line.map(|_| "/src/a.c".into()),
            line,
            inlined,
        }
    }

    #[test]
    fn saves_loads_and_rejects_corruption() {
        let dir = std::env::temp_dir().join(format!("profctl-frames-{}", std::process::id()));
        let id = [0xab, 0xcd, 0x01];
        let chain = vec![frame("hot", Some(14), false), frame("inl1", Some(9), true)];
        let mut cache = FrameCache::new(Some(dir.clone()));
        assert!(!cache.contains(&id, 0x1234, true));
        cache.insert(&id, 0x1234, true, &chain);
        cache.insert(&id, 0x99, false, &[frame("main", None, false)]);
        cache.save().unwrap();

        let mut again = FrameCache::new(Some(dir.clone()));
        assert_eq!(again.get(&id, 0x1234, true), Some(&chain[..]));
        assert_eq!(
            again.get(&id, 0x1234, false),
            None,
            "lines are part of the key"
        );
        assert_eq!(
            again.get(&id, 0x99, false).map(|f| f[0].function.as_str()),
            Some("main")
        );
        assert_eq!(again.get(&[1, 2, 3], 0x99, false), None, "another build-id");
        assert_eq!(again.hits, 2);

        let path = path_for(&dir, &id);
        let bytes = std::fs::read(&path).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        std::fs::write(&path, b"garbage").unwrap();
        assert_eq!(
            FrameCache::new(Some(dir.clone())).get(&id, 0x99, false),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
