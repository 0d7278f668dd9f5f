//! Kernel (and module) text symbols from `/proc/kallsyms`.

use std::collections::HashMap;
use std::path::Path;

use crate::error::Error;
use crate::table::{Binding, Candidate, Table, TableBuilder};

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
            name: self.table.name(e),
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

impl std::fmt::Debug for KernelSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSymbols")
            .field("symbols", &self.table.len())
            .field("modules", &self.modules.len())
            .field("restricted", &self.restricted)
            .finish()
    }
}
