//! kallsyms parsing and lookup.

use std::collections::BTreeSet;

use symbolize::KernelSymbols;

const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000100 T do_one_initcall
ffffffff81000200 t local_helper
ffffffff81000300 D some_data
ffffffff81000400 W weak_fn
ffffffff81000500 r rodata_thing
ffffffffc0a01000 t mod_init_thing\t[snd_hda]
ffffffffc0a01080 T mod_exported\t[snd_hda]
ffffffffc0a02000 b mod_bss\t[snd_hda]
ffffffffc0b00000 t other_mod_fn\t[e1000e]
garbage line
ffffffff81000600
";

#[test]
fn parse_and_lookup() {
    let k = KernelSymbols::parse(SAMPLE);
    assert!(!k.is_restricted());
    assert!(!k.is_empty());
    // _stext/_text collapse; D, r, b are not text.
    assert_eq!(k.len(), 7);
    assert!(k.lookup(0xffff_ffff_80ff_ffff).is_none());
    let s = k.lookup(0xffff_ffff_8100_0010).unwrap();
    assert_eq!(
        (s.name, s.module, s.start),
        ("_text", None, 0xffff_ffff_8100_0000)
    );
    assert_eq!(
        k.lookup(0xffff_ffff_8100_01ff).unwrap().name,
        "do_one_initcall"
    );
    assert_eq!(
        k.lookup(0xffff_ffff_8100_0200).unwrap().name,
        "local_helper"
    );
    // some_data is skipped, so local_helper extends over it.
    assert_eq!(
        k.lookup(0xffff_ffff_8100_0350).unwrap().name,
        "local_helper"
    );
    assert_eq!(k.lookup(0xffff_ffff_8100_0450).unwrap().name, "weak_fn");
    let m = k.lookup(0xffff_ffff_c0a0_1004).unwrap();
    assert_eq!((m.name, m.module), ("mod_init_thing", Some("snd_hda")));
    let m = k.lookup(0xffff_ffff_c0a0_1fff).unwrap();
    assert_eq!((m.name, m.module), ("mod_exported", Some("snd_hda")));
    let m = k.lookup(0xffff_ffff_c0b0_0001).unwrap();
    assert_eq!((m.name, m.module), ("other_mod_fn", Some("e1000e")));
    // Past the last symbol still resolves (kallsyms has no sizes).
    assert_eq!(k.lookup(u64::MAX).unwrap().name, "other_mod_fn");
}

#[test]
fn restricted() {
    let text =
        "0000000000000000 T _stext\n0000000000000000 t foo\t[mod]\n0000000000000000 D data\n";
    let k = KernelSymbols::parse(text);
    assert!(k.is_restricted());
    assert!(k.is_empty());
    assert!(k.lookup(0).is_none());
    assert!(k.lookup(0xffff_ffff_8100_0000).is_none());
    let empty = KernelSymbols::parse("");
    assert!(!empty.is_restricted() && empty.is_empty());
}

#[test]
fn load_live_kallsyms() {
    let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
        eprintln!("skipped: /proc/kallsyms unreadable");
        return;
    };
    let k = KernelSymbols::load().expect("load");
    if k.is_restricted() {
        eprintln!("skipped: kallsyms is restricted");
        return;
    }
    assert!(k.len() > 1000);
    let mut checked = 0;
    for want in [
        "schedule",
        "do_sys_open",
        "do_sys_openat2",
        "vfs_read",
        "__schedule",
    ] {
        let addrs: Vec<u64> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && f[2] == want && "tT".contains(f[1]))
                    .then(|| u64::from_str_radix(f[0], 16).unwrap())
            })
            .collect();
        let Some(&addr) = addrs.first() else { continue };
        let aliases: BTreeSet<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{addr:016x} ")))
            .filter_map(|l| l.split_whitespace().nth(2))
            .collect();
        let s = k.lookup(addr + 1).unwrap();
        assert_eq!(s.start, addr);
        assert!(
            aliases.contains(s.name),
            "{want}: got {}, aliases {aliases:?}",
            s.name
        );
        checked += 1;
    }
    assert!(checked > 0, "none of the expected kernel functions found");
}
