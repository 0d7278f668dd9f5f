//! A persistent cache of symbolized frames, per build-id and file offset.
//!
//! Indexing a large binary's DWARF costs tens of milliseconds (a separate, compressed debug
//! file for libc about 60 ms), every run. Most profiles of the same programs hit the same
//! addresses again, so their frames are kept on disk (`<dir>/<build-id>.frames`) and a later
//! run answers them without opening the binary at all. Keyed by build-id, an entry can never
//! belong to another build. A file is mapped and searched in place (sorted keys), and only
//! the entries looked up are decoded, so a file that grew over many runs costs no more to
//! open. A corrupt or foreign file is ignored and rewritten; a corrupt entry is a miss.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rustc_hash::FxBuildHasher;

use crate::frame::ResolvedFrame;
use crate::table::{Bytes, Reader};

/// First bytes of a frames file.
const MAGIC: &[u8; 8] = b"PCFRM003";
/// Most entries kept per build-id: beyond, the file is not grown.
const MAX_ENTRIES_PER_FILE: usize = 1 << 20;

/// Key: file offset, and whether file:line was asked for, packed as `offset << 1 | lines`.
type Key = u64;

fn key(offset: u64, lines: bool) -> Key {
    offset << 1 | lines as u64
}

/// A frames file, mapped and searched in place: `MAGIC`, the entry count `n`, `n` sorted
/// keys, `n` end positions of the entries in the blob, then the blob. Loading costs a
/// mapping, not a decoding of every entry, however large the file grew.
struct MappedFrames {
    data: Bytes,
    count: usize,
}

impl MappedFrames {
    const KEYS: usize = 16;

    fn new(data: Bytes) -> Option<MappedFrames> {
        let mut r = Reader(data.strip_prefix(MAGIC)?);
        let count = usize::try_from(r.u64()?).ok()?;
        let blob = Self::KEYS.checked_add(count.checked_mul(16)?)?;
        if blob > data.len() {
            return None;
        }
        let frames = MappedFrames { data, count };
        let blob_len = frames.data.len() - blob;
        let last_end = count.checked_sub(1).map_or(0, |i| frames.end(i));
        (last_end == blob_len as u64).then_some(frames)
    }

    fn key(&self, i: usize) -> Key {
        u64_at(&self.data, Self::KEYS + i * 8)
    }

    fn end(&self, i: usize) -> u64 {
        u64_at(&self.data, Self::KEYS + self.count * 8 + i * 8)
    }

    fn find(&self, k: Key) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid).cmp(&k) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// The encoded frames of entry `i`.
    fn entry_bytes(&self, i: usize) -> Option<&[u8]> {
        let blob = Self::KEYS + self.count * 16;
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        let (start, end) = (
            usize::try_from(start).ok()?,
            usize::try_from(self.end(i)).ok()?,
        );
        self.data
            .get(blob.checked_add(start)?..blob.checked_add(end)?)
    }
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

#[derive(Default)]
struct FileFrames {
    /// What earlier runs saved.
    mapped: Option<MappedFrames>,
    /// Entries of `mapped` decoded so far (None: absent or corrupt).
    decoded: HashMap<Key, Option<Vec<ResolvedFrame>>, FxBuildHasher>,
    /// Entries added by this process.
    added: HashMap<Key, Vec<ResolvedFrame>, FxBuildHasher>,
}

impl FileFrames {
    fn contains(&self, k: Key) -> bool {
        self.added.contains_key(&k) || self.mapped.as_ref().is_some_and(|m| m.find(k).is_some())
    }

    fn len(&self) -> usize {
        self.mapped.as_ref().map_or(0, |m| m.count) + self.added.len()
    }
}

/// Frames by (build-id, file offset), loaded from and saved to a directory.
pub struct FrameCache {
    dir: Option<PathBuf>,
    files: HashMap<Vec<u8>, FileFrames, FxBuildHasher>,
    /// Lookups answered from the cache.
    pub hits: u64,
}

impl FrameCache {
    /// A cache kept in `dir` (None: in memory only).
    pub fn new(dir: Option<PathBuf>) -> FrameCache {
        FrameCache {
            dir,
            files: HashMap::default(),
            hits: 0,
        }
    }

    fn file(&mut self, build_id: &[u8]) -> &mut FileFrames {
        if !self.files.contains_key(build_id) {
            let mapped = self
                .dir
                .as_deref()
                .and_then(|dir| load(&path_for(dir, build_id)));
            self.files.insert(
                build_id.to_vec(),
                FileFrames {
                    mapped,
                    ..FileFrames::default()
                },
            );
        }
        self.files.get_mut(build_id).expect("inserted above")
    }

    /// Whether frames for this address are cached (maps the build-id's file on first use).
    pub fn contains(&mut self, build_id: &[u8], offset: u64, lines: bool) -> bool {
        self.file(build_id).contains(key(offset, lines))
    }

    /// The cached frames (outermost first) of an address.
    pub fn get(&mut self, build_id: &[u8], offset: u64, lines: bool) -> Option<&[ResolvedFrame]> {
        let k = key(offset, lines);
        let file = self.file(build_id);
        let found = if file.added.contains_key(&k) {
            true
        } else {
            let mapped = &file.mapped;
            file.decoded
                .entry(k)
                .or_insert_with(|| {
                    let m = mapped.as_ref()?;
                    decode_entry(m.entry_bytes(m.find(k)?)?)
                })
                .is_some()
        };
        if !found {
            return None;
        }
        self.hits += 1;
        let file = self.files.get(build_id)?;
        match file.added.get(&k) {
            Some(frames) => Some(frames),
            None => file.decoded.get(&k)?.as_deref(),
        }
    }

    /// Remember the frames of an address.
    pub fn insert(&mut self, build_id: &[u8], offset: u64, lines: bool, frames: &[ResolvedFrame]) {
        let file = self.file(build_id);
        if file.len() < MAX_ENTRIES_PER_FILE {
            file.added.insert(key(offset, lines), frames.to_vec());
        }
    }

    /// Write every build-id's file that gained entries (atomically: temporary file, then
    /// rename): the earlier entries, copied as they are, merged with the new ones.
    pub fn save(&mut self) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        for (build_id, file) in self.files.iter_mut().filter(|(_, f)| !f.added.is_empty()) {
            let path = path_for(dir, build_id);
            crate::disk_cache::write_replacing(&path, &encode(file))?;
            // The new file holds everything: later lookups read it.
            file.mapped = load(&path);
            file.decoded.clear();
            file.added.clear();
        }
        crate::disk_cache::prune(dir, MAX_CACHED_FILES, MAX_CACHED_BYTES, |p| {
            p.extension().is_some_and(|e| e == "frames")
        });
        Ok(())
    }
}

/// Frame files kept on disk: the least recently written beyond this go first.
pub const MAX_CACHED_FILES: usize = 1024;
/// Bytes of frame files kept on disk.
pub const MAX_CACHED_BYTES: u64 = 256 << 20;

fn path_for(dir: &Path, build_id: &[u8]) -> PathBuf {
    dir.join(format!("{}.frames", crate::error::hex(build_id)))
}

fn load(path: &Path) -> Option<MappedFrames> {
    let map = crate::elf::map_file(path).ok()?;
    let frames = MappedFrames::new(Bytes::Map(map));
    if frames.is_none() {
        tracing::debug!(path = %path.display(), "ignoring a corrupt frame cache");
    }
    frames
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

fn encode_entry(out: &mut Vec<u8>, list: &[ResolvedFrame]) {
    out.extend_from_slice(&(list.len() as u32).to_le_bytes());
    for f in list {
        out.push(f.inlined as u8);
        out.extend_from_slice(&f.line.unwrap_or(u32::MAX).to_le_bytes());
        put_str(out, Some(&f.function));
        put_str(out, f.file.as_deref());
    }
}

/// The file's earlier entries (bytes copied, not decoded) merged with its added ones, in
/// key order; an added entry replaces an earlier one with the same key.
fn encode(file: &FileFrames) -> Vec<u8> {
    let mut added: Vec<(&Key, &Vec<ResolvedFrame>)> = file.added.iter().collect();
    added.sort_unstable_by_key(|(k, _)| **k);
    let mut keys = Vec::new();
    let mut blob = Vec::new();
    let mut ends = Vec::new();
    let mut push = |k: Key, write: &mut dyn FnMut(&mut Vec<u8>)| {
        keys.push(k);
        write(&mut blob);
        ends.push(blob.len() as u64);
    };
    let mut new = added.into_iter().peekable();
    if let Some(m) = &file.mapped {
        for i in 0..m.count {
            let k = m.key(i);
            while let Some((&nk, frames)) = new.next_if(|(nk, _)| **nk < k) {
                push(nk, &mut |b| encode_entry(b, frames));
            }
            if new.peek().is_some_and(|(nk, _)| **nk == k) {
                continue; // replaced by the added entry, written next
            }
            if let Some(bytes) = m.entry_bytes(i) {
                push(k, &mut |b| b.extend_from_slice(bytes));
            }
        }
    }
    for (&k, frames) in new {
        push(k, &mut |b| encode_entry(b, frames));
    }
    let mut out = Vec::with_capacity(16 + keys.len() * 16 + blob.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for k in &keys {
        out.extend_from_slice(&k.to_le_bytes());
    }
    for e in &ends {
        out.extend_from_slice(&e.to_le_bytes());
    }
    out.extend_from_slice(&blob);
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

/// One entry's frames; None when the bytes are not an entry.
fn decode_entry(bytes: &[u8]) -> Option<Vec<ResolvedFrame>> {
    let mut r = Reader(bytes);
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
    r.0.is_empty().then_some(list)
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
        assert!(MappedFrames::new(Bytes::Vec(bytes.clone())).is_some());
        for cut in 0..bytes.len() {
            assert!(
                MappedFrames::new(Bytes::Vec(bytes[..cut].to_vec())).is_none(),
                "cut at {cut}"
            );
        }
        std::fs::write(&path, b"garbage").unwrap();
        assert_eq!(
            FrameCache::new(Some(dir.clone())).get(&id, 0x99, false),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn later_runs_merge_into_the_file_and_replace_entries() {
        let dir = std::env::temp_dir().join(format!("profctl-frames-merge-{}", std::process::id()));
        let id = [7u8; 20];
        let mut first = FrameCache::new(Some(dir.clone()));
        for offset in (0..2000u64).step_by(2) {
            first.insert(
                &id,
                offset,
                false,
                &[frame(&format!("f{offset}"), None, false)],
            );
        }
        first.save().unwrap();
        assert_eq!(first.get(&id, 100, false).unwrap()[0].function, "f100");

        let mut second = FrameCache::new(Some(dir.clone()));
        assert!(second.contains(&id, 1998, false));
        assert!(!second.contains(&id, 1999, false));
        for offset in (1..2000u64).step_by(2) {
            second.insert(
                &id,
                offset,
                false,
                &[frame(&format!("g{offset}"), None, false)],
            );
        }
        second.insert(&id, 10, false, &[frame("replaced", Some(3), true)]);
        second.save().unwrap();

        let mut third = FrameCache::new(Some(dir.clone()));
        for offset in 0..2000u64 {
            let want = match offset {
                10 => "replaced".to_string(),
                o if o % 2 == 0 => format!("f{o}"),
                o => format!("g{o}"),
            };
            assert_eq!(
                third.get(&id, offset, false).unwrap()[0].function,
                want,
                "{offset}"
            );
        }
        assert_eq!(third.get(&id, 10, false).unwrap()[0].line, Some(3));
        assert_eq!(third.get(&id, 2000, false), None);
        assert_eq!(third.hits, 2001);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
