//! Kernel frames: kallsyms, loaded once in the background (while the first window is still
//! being recorded) and shared; names cached by address across windows, bounded like user
//! names.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tracing::warn;

use super::names::{CachedNames, NameCache};
use crate::KernelSymbols;

/// Kernel symbols, loaded once in the background and shared. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct KernelLoader {
    slot: Arc<Mutex<Slot>>,
    cache_dir: Option<PathBuf>,
}

#[derive(Default)]
enum Slot {
    #[default]
    NotStarted,
    Loading(std::thread::JoinHandle<Option<KernelSymbols>>),
    Ready(Option<Arc<KernelSymbols>>),
}

impl KernelLoader {
    /// A loader keeping kallsyms per boot in `cache_dir` (None: parsed every time).
    pub(crate) fn new(cache_dir: Option<PathBuf>) -> KernelLoader {
        KernelLoader {
            slot: Arc::default(),
            cache_dir,
        }
    }

    /// Start reading /proc/kallsyms in a background thread (once; later calls do nothing).
    pub(crate) fn start(&self) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*slot, Slot::NotStarted) {
            let dir = self.cache_dir.clone();
            if let Ok(handle) = std::thread::Builder::new()
                .name("kallsyms".into())
                .spawn(move || load(dir))
            {
                *slot = Slot::Loading(handle);
            }
        }
    }

    /// The kernel symbols, waiting for the background load (or loading them now).
    fn get(&self) -> Option<Arc<KernelSymbols>> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let ready = match std::mem::take(&mut *slot) {
            Slot::Ready(k) => k,
            Slot::Loading(handle) => handle.join().ok().flatten().map(Arc::new),
            Slot::NotStarted => load(self.cache_dir.clone()).map(Arc::new),
        };
        *slot = Slot::Ready(ready.clone());
        ready
    }

    /// Read kallsyms again now (the module set changed), for every holder of this loader.
    fn reload(&self) -> Option<Arc<KernelSymbols>> {
        let ready = load(self.cache_dir.clone()).map(Arc::new);
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Slot::Ready(ready.clone());
        ready
    }
}

/// How often the module set is compared with the one kallsyms was read with (a read of
/// `/proc/modules`), at most.
const MODULES_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Read /proc/kallsyms, saying why kernel frames will stay unnamed when it cannot be used.
fn load(cache_dir: Option<PathBuf>) -> Option<KernelSymbols> {
    let loaded = match cache_dir {
        Some(dir) => KernelSymbols::load_cached(&dir),
        None => KernelSymbols::load(),
    };
    match loaded {
        Ok(k) if !k.is_restricted() => Some(k),
        Ok(_) => {
            warn!("kernel symbol addresses are hidden (kernel.kptr_restrict); kernel frames stay unnamed");
            None
        }
        Err(err) => {
            warn!(%err, "cannot read kernel symbols; kernel frames stay unnamed");
            None
        }
    }
}

/// Names of kernel addresses.
pub(crate) struct KernelNames {
    loader: KernelLoader,
    symbols: Option<Option<Arc<KernelSymbols>>>,
    cache: NameCache<u64>,
    /// When the module set was last checked.
    modules_checked: Option<std::time::Instant>,
    /// Times kallsyms was read again because modules were loaded or unloaded.
    reloads: u64,
    /// Whether an address was looked up in the symbols since the last
    /// [`KernelNames::release_resident_pages`].
    looked_up: bool,
}

impl KernelNames {
    /// Names from `loader`'s symbols, at most `max_entries` addresses and `max_bytes` of
    /// names cached.
    pub(crate) fn new(loader: KernelLoader, max_entries: usize, max_bytes: usize) -> KernelNames {
        KernelNames {
            loader,
            symbols: None,
            cache: NameCache::new(max_entries, max_bytes),
            modules_checked: None,
            reloads: 0,
            looked_up: false,
        }
    }

    /// Let go of the resident pages of the kernel symbol table, when it is mapped and (unless
    /// `all`) no address was looked up in it since the last call.
    pub(crate) fn release_resident_pages(&mut self, all: bool) {
        let used = std::mem::take(&mut self.looked_up);
        if let (true, Some(Some(symbols))) = (all || !used, &self.symbols) {
            symbols.release_resident_pages();
        }
    }

    /// Read kallsyms again when kernel modules were loaded or unloaded since it was read
    /// (checked at most every [`MODULES_CHECK_INTERVAL`]; call before naming a window), so that
    /// a long-lived service names the code of modules loaded after it started.
    pub(crate) fn refresh_if_modules_changed(&mut self) {
        let Some(Some(symbols)) = &self.symbols else {
            return;
        };
        if self
            .modules_checked
            .is_some_and(|at| at.elapsed() < MODULES_CHECK_INTERVAL)
        {
            return;
        }
        self.modules_checked = Some(std::time::Instant::now());
        if symbols.modules_changed() {
            tracing::info!("kernel modules changed; reading kernel symbols again");
            self.symbols = Some(self.loader.reload());
            self.cache.clear();
            self.reloads += 1;
        }
    }

    /// Times kallsyms was read again because the module set changed.
    pub(crate) fn reloads(&self) -> u64 {
        self.reloads
    }

    /// The loader (for feeds).
    pub(crate) fn loader(&self) -> &KernelLoader {
        &self.loader
    }

    /// The name of the kernel address `addr` (`[kernel]` when unknown).
    pub(crate) fn name(&mut self, addr: u64) -> CachedNames<'_> {
        if self.cache.get(&addr).is_none() {
            self.looked_up = true;
            let loader = &self.loader;
            let symbols = self.symbols.get_or_insert_with(|| loader.get());
            let (name, named) = match symbols.as_ref().and_then(|k| k.lookup(addr)) {
                Some(sym) => (sym.name, true),
                None => ("[kernel]", false),
            };
            self.cache.insert(addr, &[name], None, named);
        }
        self.cache.get(&addr).expect("just cached")
    }

    /// Drop the cached names.
    pub(crate) fn clear(&mut self) {
        self.cache.clear();
    }

    /// Addresses cached, and bytes of their names.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.cache.len(), self.cache.bytes())
    }

    /// Names dropped so far to stay within the bounds.
    pub(crate) fn evicted(&self) -> u64 {
        self.cache.evicted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_stay_bounded_and_right() {
        let text: String = (0..100u64)
            .map(|i| {
                format!(
                    "{:x} T kernel_function_{i}\n",
                    0xffff_ffff_8100_0000 + i * 0x100
                )
            })
            .collect();
        let mut names = KernelNames::new(KernelLoader::new(None), 10, 1 << 20);
        names.symbols = Some(Some(Arc::new(KernelSymbols::parse(&text))));
        for round in 0..2 {
            for i in 0..100u64 {
                let n = names.name(0xffff_ffff_8100_0000 + i * 0x100 + 8);
                assert_eq!(n.name(0), format!("kernel_function_{i}"), "round {round}");
                assert!(n.named());
                assert!(names.sizes().0 <= 10);
            }
        }
        assert!(names.evicted() >= 180);
        assert!(!names.name(0x10).named(), "below every symbol");
        names.clear();
        assert_eq!(names.sizes(), (0, 0));
    }
}
