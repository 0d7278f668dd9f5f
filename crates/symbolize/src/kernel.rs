//! Kernel (and module) text symbols from `/proc/kallsyms`.

use std::collections::HashMap;
use std::path::Path;

use crate::error::Error;
use crate::table::{Binding, Bytes, Candidate, Table, TableBuilder};

const KALLSYMS: &str = "/proc/kallsyms";
const NO_MODULE: u32 = u32::MAX;

/// A kernel symbol found by [`KernelSymbols::lookup`].
#[derive(Clone, Copy, Debug)]
pub struct KernelSymbol<'a> {
    /// The symbol name.
    pub name: &'a str,
    /// The module (from the `[module]` column), `None` for the kernel image.
    pub module: Option<&'a str>,
    /// The symbol's address.
    pub start: u64,
}

/// The kernel's text symbols, sorted for lookup.
#[derive(Default)]
pub struct KernelSymbols {
    table: Table,
    /// Module names as (offset, len) into `module_names`.
    modules: Vec<(usize, usize)>,
    module_names: String,
    restricted: bool,
}

impl KernelSymbols {
    /// Read and parse `/proc/kallsyms`.
    pub fn load() -> Result<KernelSymbols, Error> {
        let text = std::fs::read_to_string(KALLSYMS).map_err(|source| Error::Io {
            path: Path::new(KALLSYMS).to_owned(),
            source,
        })?;
        Ok(Self::parse(&text))
    }

    /// Parse kallsyms text: lines `ffffffff81000000 T _stext`, module lines
    /// `ffffffffc0000000 t name\t[module]`. Keeps text symbols (types
    /// `t`, `T`, `w`, `W`); malformed lines are skipped.
    pub fn parse(text: &str) -> KernelSymbols {
        let mut builder = TableBuilder::default();
        let mut module_ids: HashMap<&str, u32> = HashMap::new();
        let mut modules = Vec::new();
        let mut module_names = String::new();
        let mut any_line = false;
        let mut any_nonzero = false;
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            any_line = true;
            any_nonzero |= addr != 0;
            let binding = match kind {
                "T" => Binding::Global,
                "W" | "w" => Binding::Weak,
                "t" => Binding::Local,
                _ => continue,
            };
            let module = fields
                .next()
                .and_then(|m| m.strip_prefix('['))
                .and_then(|m| m.strip_suffix(']'));
            let tag = match module {
                None => NO_MODULE,
                Some(m) => *module_ids.entry(m).or_insert_with(|| {
                    modules.push((module_names.len(), m.len()));
                    module_names.push_str(m);
                    (modules.len() - 1) as u32
                }),
            };
            let cand = Candidate {
                start: addr,
                size: 0,
                limit: u64::MAX,
                binding,
                tag,
            };
            if !builder.push(cand, name) {
                break;
            }
        }
        let restricted = any_line && !any_nonzero;
        if restricted {
            return KernelSymbols {
                restricted,
                ..Default::default()
            };
        }
        KernelSymbols {
            table: builder.build(),
            modules,
            module_names,
            restricted,
        }
    }

    /// True when every address read 0 (`kptr_restrict`, or not privileged);
    /// such a table holds no symbols and every lookup fails.
    pub fn is_restricted(&self) -> bool {
        self.restricted
    }

    /// The symbol with the greatest address `<= addr`. kallsyms has no
    /// sizes, so an address past the last symbol of a region still resolves
    /// to that symbol.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let e = self.table.lookup(addr)?;
        let module = self
            .modules
            .get(e.tag as usize)
            .and_then(|&(off, len)| self.module_names.get(off..off + len));
        Some(KernelSymbol {
            name: self.table.name(&e),
            module,
            start: e.start,
        })
    }

    /// Number of distinct symbol addresses.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no symbol was kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// First bytes of a kallsyms cache file.
const CACHE_MAGIC: &[u8; 8] = b"PCKSYM02";

impl KernelSymbols {
    /// Like [`KernelSymbols::load`], through a cache in `cache_dir`: reading /proc/kallsyms
    /// costs tens of milliseconds of kernel time, so the parsed table is kept per boot and
    /// loaded module set (`/proc/modules`), and reused while both are unchanged.
    pub fn load_cached(cache_dir: &Path) -> Result<KernelSymbols, Error> {
        let Some(key) = cache_key() else {
            return Self::load();
        };
        let path = cache_dir.join(format!("kallsyms-{key}.bin"));
        // Mapped and used in place: reading and unpacking the table (7 MB here) cost more
        // than the rest of a short recording.
        if let Some(cached) = crate::elf::map_file(&path)
            .ok()
            .and_then(|map| Self::from_cache(Bytes::Map(map)))
        {
            tracing::debug!(path = %path.display(), symbols = cached.len(), "kernel symbols from cache");
            return Ok(cached);
        }
        let loaded = Self::load()?;
        if !loaded.restricted && !loaded.is_empty() {
            if let Err(err) = write_cache(cache_dir, &path, &loaded.to_cache_bytes()) {
                tracing::debug!(%err, "cannot write the kernel symbol cache");
            }
        }
        Ok(loaded)
    }

    fn to_cache_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.table.len() * 40);
        out.extend_from_slice(CACHE_MAGIC);
        self.table.write_to(&mut out);
        out.extend_from_slice(&(self.modules.len() as u64).to_le_bytes());
        for &(off, len) in &self.modules {
            out.extend_from_slice(&(off as u64).to_le_bytes());
            out.extend_from_slice(&(len as u64).to_le_bytes());
        }
        out.extend_from_slice(&(self.module_names.len() as u64).to_le_bytes());
        out.extend_from_slice(self.module_names.as_bytes());
        out
    }

    /// Parse a cache file; None when it is not one (corrupt files are ignored, not trusted).
    #[cfg(test)]
    fn from_cache_bytes(bytes: &[u8]) -> Option<KernelSymbols> {
        Self::from_cache(Bytes::Vec(bytes.to_vec()))
    }

    /// Use a cache file's bytes: its table in place, its module names copied (they are few).
    fn from_cache(data: Bytes) -> Option<KernelSymbols> {
        if !data.starts_with(CACHE_MAGIC) {
            return None;
        }
        let layout = Table::layout(&data, CACHE_MAGIC.len())?;
        let mut r = crate::table::Reader(&data[layout.end..]);
        let count = usize::try_from(r.u64()?).ok()?;
        if count.checked_mul(16)? > r.0.len() {
            return None;
        }
        let mut modules = Vec::with_capacity(count);
        for _ in 0..count {
            modules.push((
                usize::try_from(r.u64()?).ok()?,
                usize::try_from(r.u64()?).ok()?,
            ));
        }
        let names_len = usize::try_from(r.u64()?).ok()?;
        let module_names = String::from_utf8(r.bytes(names_len)?.to_vec()).ok()?;
        if modules
            .iter()
            .any(|&(off, len)| off.checked_add(len).is_none_or(|end| end > names_len))
            || !r.0.is_empty()
        {
            return None;
        }
        Some(KernelSymbols {
            table: Table::serialized(data, layout),
            modules,
            module_names,
            restricted: false,
        })
    }
}

/// Boot id and a hash of the loaded modules (names and addresses): what kallsyms depends on.
fn cache_key() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let modules = std::fs::read("/proc/modules").unwrap_or_default();
    // FNV-1a: stable across runs and Rust versions (unlike std's hasher).
    let hash = modules.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    Some(format!("{}-{hash:016x}", boot.trim()))
}

/// Write the cache atomically and drop caches of other boots or module sets.
fn write_cache(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::disk_cache::write_replacing(path, bytes)?;
    crate::disk_cache::keep_newest(dir, 1, |p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("kallsyms-"))
    });
    Ok(())
}

impl std::fmt::Debug for KernelSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSymbols")
            .field("symbols", &self.table.len())
            .field("modules", &self.modules.len())
            .field("restricted", &self.restricted)
            .finish()
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    const TEXT: &str = "ffffffff81000000 T _stext\nffffffff81000100 t helper\nffffffffc0000000 t mod_fn\t[mymod]\n";

    #[test]
    fn cache_bytes_round_trip_and_reject_corruption() {
        let k = KernelSymbols::parse(TEXT);
        let bytes = k.to_cache_bytes();
        let back = KernelSymbols::from_cache_bytes(&bytes).expect("round trip");
        for addr in [
            0xffffffff81000000u64,
            0xffffffff81000150,
            0xffffffffc0000010,
        ] {
            let (a, b) = (k.lookup(addr).unwrap(), back.lookup(addr).unwrap());
            assert_eq!((a.name, a.module, a.start), (b.name, b.module, b.start));
        }
        for cut in 0..bytes.len() {
            assert!(
                KernelSymbols::from_cache_bytes(&bytes[..cut]).is_none(),
                "cut at {cut}"
            );
        }
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(KernelSymbols::from_cache_bytes(&bad).is_none());
    }

    #[test]
    fn load_cached_writes_then_reads_the_cache() {
        let Ok(direct) = KernelSymbols::load() else {
            return;
        };
        if direct.is_restricted() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("profctl-kcache-{}", std::process::id()));
        let first = KernelSymbols::load_cached(&dir).unwrap();
        assert_eq!(first.len(), direct.len());
        let cached: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(cached.len(), 1, "one cache file written");
        // Replace the cache with a small table: a second load must answer from it, not from
        // /proc/kallsyms.
        std::fs::write(&cached[0], KernelSymbols::parse(TEXT).to_cache_bytes()).unwrap();
        let second = KernelSymbols::load_cached(&dir).unwrap();
        assert_eq!(second.len(), 3, "the second load read the cache");
        // A corrupt cache is not trusted: kallsyms is read again and the cache rewritten.
        std::fs::write(&cached[0], b"PCKSYM02 garbage").unwrap();
        assert_eq!(
            KernelSymbols::load_cached(&dir).unwrap().len(),
            direct.len()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
