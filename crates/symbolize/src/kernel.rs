//! Kernel (and module) text symbols from `/proc/kallsyms`.

use std::collections::HashMap;
use std::path::Path;

use crate::error::Error;
use crate::table::{Binding, Bytes, Candidate, Table, TableBuilder};

const KALLSYMS: &str = "/proc/kallsyms";
const MODULES: &str = "/proc/modules";
const NO_MODULE: u32 = u32::MAX;

/// The loaded kernel modules, as far as kallsyms depends on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ModuleSet {
    /// /proc/modules could not be read (or the table did not come from /proc/kallsyms).
    #[default]
    Unknown,
    /// No /proc/modules: a kernel without module support, whose set never changes.
    NoModules,
    /// A hash of each module's name, size and address, in the order listed.
    Fingerprint(u64),
}

impl ModuleSet {
    /// The set loaded now.
    fn current() -> ModuleSet {
        match std::fs::read(MODULES) {
            Ok(text) => ModuleSet::Fingerprint(modules_fingerprint(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => ModuleSet::NoModules,
            Err(err) => {
                tracing::debug!(%err, "cannot read {MODULES}");
                ModuleSet::Unknown
            }
        }
    }
}

/// FNV-1a over each line's name, size and address (`name size refcount deps state address`):
/// the reference counts, dependents and states change while a module is in use and do not
/// move its symbols. Lines stay in their order (newest module first), so a module unloaded and
/// loaded again at the same address still changes it. Stable across runs and Rust versions
/// (unlike std's hasher): it names cache files.
fn modules_fingerprint(text: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut add = |bytes: &[u8]| {
        for &b in bytes.iter().chain(b"\0") {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    };
    for line in text.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        if let [name, size, _refcount, _deps, _state, address, ..] = fields[..] {
            add(name);
            add(size);
            add(address);
        }
    }
    hash
}

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
    /// The modules loaded when kallsyms was read (read just before it).
    module_set: ModuleSet,
}

impl KernelSymbols {
    /// Let go of the resident pages of its table when that is mapped from the cache; lookups
    /// fault them back in.
    pub fn release_resident_pages(&self) {
        self.table.release_resident_pages();
    }

    /// Read and parse `/proc/kallsyms`.
    pub fn load() -> Result<KernelSymbols, Error> {
        let module_set = ModuleSet::current();
        let text = std::fs::read_to_string(KALLSYMS).map_err(|source| Error::Io {
            path: Path::new(KALLSYMS).to_owned(),
            source,
        })?;
        Ok(KernelSymbols {
            module_set,
            ..Self::parse(&text)
        })
    }

    /// Whether kernel modules were loaded, unloaded or reloaded since the table was read
    /// (names, sizes and addresses in `/proc/modules`, compared with those read just before
    /// kallsyms): a long-running caller then loads the table again, or symbols of modules
    /// loaded since stay unnamed. Costs one read of /proc/modules (a few µs per module), for
    /// a slow tick. False when either set is unknown: a table from [`KernelSymbols::parse`],
    /// or /proc/modules unreadable.
    pub fn modules_changed(&self) -> bool {
        self.changed_from(ModuleSet::current())
    }

    fn changed_from(&self, now: ModuleSet) -> bool {
        match (self.module_set, now) {
            (ModuleSet::Unknown, _) | (_, ModuleSet::Unknown) => false,
            (then, now) => then != now,
        }
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
            module_set: ModuleSet::Unknown,
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
    /// loaded module set (`/proc/modules`), and reused while both are unchanged. Without a
    /// readable /proc/modules (but for a kernel without modules) the set is unknown and the
    /// cache is not used.
    pub fn load_cached(cache_dir: &Path) -> Result<KernelSymbols, Error> {
        let module_set = ModuleSet::current();
        let Some(key) = cache_key(module_set) else {
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
            return Ok(KernelSymbols {
                module_set,
                ..cached
            });
        }
        let loaded = Self::load()?;
        // A module loaded or unloaded while kallsyms was read: the table may not be the one
        // of `key`'s set (nor of today's); use it, but cache nothing.
        let unchanged = loaded.module_set == module_set && ModuleSet::current() == module_set;
        if !unchanged {
            tracing::debug!("kernel modules changed while kallsyms was read: not cached");
        }
        if unchanged && !loaded.restricted && !loaded.is_empty() {
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
            module_set: ModuleSet::Unknown,
        })
    }
}

/// Boot id and the module set: what kallsyms depends on. None when the set is unknown.
fn cache_key(modules: ModuleSet) -> Option<String> {
    let hash = match modules {
        ModuleSet::Unknown => return None,
        ModuleSet::NoModules => 0,
        ModuleSet::Fingerprint(hash) => hash,
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
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
            .field("module_set", &self.module_set)
            .finish()
    }
}

#[cfg(test)]
mod module_tests {
    use super::*;

    /// /proc/modules as the kernel writes it.
    const MODULES_TEXT: &str = "\
nf_tables 372736 0 - Live 0xffffffffc0a00000
e1000e 344064 0 - Live 0xffffffffc0800000
crc32_pclmul 12288 1 e1000e, Live 0xffffffffc0600000 (E)
";

    fn set(text: &str) -> ModuleSet {
        ModuleSet::Fingerprint(modules_fingerprint(text.as_bytes()))
    }

    fn loaded_with(text: &str) -> KernelSymbols {
        KernelSymbols {
            module_set: set(text),
            ..KernelSymbols::parse("ffffffff81000000 T _stext\n")
        }
    }

    #[test]
    fn use_counts_and_states_are_no_change() {
        let k = loaded_with(MODULES_TEXT);
        assert!(!k.changed_from(set(MODULES_TEXT)));
        let in_use = MODULES_TEXT
            .replace(
                "nf_tables 372736 0 - Live",
                "nf_tables 372736 3 nft_ct, Live",
            )
            .replace("e1000e 344064 0 - Live", "e1000e 344064 0 - Unloading");
        assert!(!k.changed_from(set(&in_use)));
    }

    #[test]
    fn a_module_loaded_unloaded_moved_or_reloaded_is_a_change() {
        let k = loaded_with(MODULES_TEXT);
        let loaded = format!("dummy 12288 0 - Live 0xffffffffc0c00000\n{MODULES_TEXT}");
        assert!(k.changed_from(set(&loaded)), "loaded");
        let unloaded: String = MODULES_TEXT
            .lines()
            .skip(1)
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(k.changed_from(set(&unloaded)), "unloaded");
        let moved = MODULES_TEXT.replace("0xffffffffc0800000", "0xffffffffc0900000");
        assert!(k.changed_from(set(&moved)), "moved");
        let mut lines: Vec<&str> = MODULES_TEXT.lines().collect();
        lines.swap(0, 1);
        assert!(
            k.changed_from(set(&lines.join("\n"))),
            "reloaded: listed first"
        );
        assert!(k.changed_from(ModuleSet::NoModules));
    }

    #[test]
    fn an_unknown_set_is_never_a_change() {
        let parsed = KernelSymbols::parse("ffffffff81000000 T _stext\n");
        assert!(!parsed.changed_from(set(MODULES_TEXT)));
        assert!(!loaded_with(MODULES_TEXT).changed_from(ModuleSet::Unknown));
        assert!(
            cache_key(ModuleSet::Unknown).is_none(),
            "nothing cached for it"
        );
    }

    #[test]
    fn cache_keys_follow_the_module_set() {
        let Some(a) = cache_key(set(MODULES_TEXT)) else {
            return; // no boot id
        };
        let in_use = MODULES_TEXT.replace("1 e1000e,", "2 e1000e,other,");
        assert_eq!(cache_key(set(&in_use)).unwrap(), a);
        let moved = MODULES_TEXT.replace("0xffffffffc0800000", "0xffffffffc0900000");
        assert_ne!(cache_key(set(&moved)).unwrap(), a);
        assert_ne!(cache_key(ModuleSet::NoModules).unwrap(), a);
    }

    #[test]
    fn load_reads_the_module_set() {
        let Ok(k) = KernelSymbols::load() else {
            return;
        };
        assert_ne!(k.module_set, ModuleSet::Unknown);
        assert!(!k.modules_changed(), "nothing loaded meanwhile");
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
