//! Symbol-name demangling for Rust (legacy and v0) and C++ (Itanium ABI).

use std::borrow::Cow;

/// Demangle a raw symbol name.
///
/// Rust legacy names lose their `::h<hash>` suffix; Rust v0 names (`_R…`)
/// are demangled via `rustc-demangle`; C++ names (`_Z…`) via `cpp_demangle`
/// with parameters shown (as `nm -C` prints them). Anything else, including
/// names that fail to demangle, is returned unchanged. Never panics.
pub fn demangle(raw: &str) -> Cow<'_, str> {
    let rust_first = raw.starts_with("_R") || is_rust_legacy(raw);
    if rust_first {
        if let Some(s) = rust(raw) {
            return Cow::Owned(s);
        }
    }
    if raw.starts_with("_Z") {
        if let Some(s) = cpp(raw) {
            return Cow::Owned(s);
        }
        // A legacy Rust name without a hash is also valid C++; C++ had a go.
        if !rust_first {
            if let Some(s) = rust(raw) {
                return Cow::Owned(s);
            }
        }
    }
    Cow::Borrowed(raw)
}

/// Whether `raw` is `_ZN…17h<16 hex digits>E` (optionally with a `.suffix`),
/// the shape rustc's legacy mangling always produces.
fn is_rust_legacy(raw: &str) -> bool {
    let Some(body) = raw.strip_prefix("_ZN") else {
        return false;
    };
    body.match_indices("17h").any(|(i, _)| {
        let rest = body.as_bytes().get(i + 3..).unwrap_or_default();
        rest.len() > 16
            && rest[..16].iter().all(u8::is_ascii_hexdigit)
            && rest[16] == b'E'
            && (rest.len() == 17 || rest[17] == b'.')
    })
}

fn rust(raw: &str) -> Option<String> {
    let d = rustc_demangle::try_demangle(raw).ok()?;
    // `{:#}` omits the legacy hash.
    Some(format!("{d:#}"))
}

fn cpp(raw: &str) -> Option<String> {
    // cpp_demangle bounds its recursion; the unwind guard is belt and braces
    // for adversarial symbol tables.
    std::panic::catch_unwind(|| {
        let sym = cpp_demangle::Symbol::new(raw.as_bytes()).ok()?;
        sym.demangle(&cpp_demangle::DemangleOptions::default()).ok()
    })
    .ok()
    .flatten()
}

/// `clock_gettime@@GLIBC_2.17` → `clock_gettime`: symbol versions are noise in a profile.
pub(crate) fn without_version(name: &str) -> &str {
    match name.find('@') {
        Some(at) if at > 0 => &name[..at],
        _ => name,
    }
}

/// The name to show for a symbol-table name: version suffix dropped, then demangled. A PLT
/// stub keeps its `@plt` suffix (`_ZN3foo3barEv@plt` → `foo::bar()@plt`): it is not the
/// function itself.
pub fn function_name(raw: &str) -> Cow<'_, str> {
    match raw.strip_suffix("@plt") {
        Some(target) if !target.is_empty() => {
            Cow::Owned(format!("{}@plt", demangle(without_version(target))))
        }
        _ => demangle(without_version(raw)),
    }
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn plt_stubs_keep_their_suffix() {
        assert_eq!(super::function_name("memcpy@plt"), "memcpy@plt");
        assert_eq!(super::function_name("memcpy@GLIBC_2.14"), "memcpy");
        assert_eq!(super::function_name("_ZN3foo3barEv@plt"), "foo::bar()@plt");
    }

    #[test]
    fn rust_legacy_drops_hash() {
        assert_eq!(
            demangle("_ZN4core3fmt9Formatter3pad17h1234567890abcdefE"),
            "core::fmt::Formatter::pad"
        );
        assert_eq!(
            demangle("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE"),
            "std::rt::lang_start::{{closure}}"
        );
        assert_eq!(
            demangle("_ZN71_$LT$Test$u20$$u2b$$u20$$u27$static$u20$as$u20$foo..Bar$LT$Test$GT$$GT$3bar17h930b740aa94f1d3aE"),
            "<Test + 'static as foo::Bar<Test>>::bar"
        );
    }

    #[test]
    fn rust_v0() {
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(
            demangle("_RNvNtCs1234_7mycrate4main4test"),
            "mycrate::main::test"
        );
        assert_eq!(
            demangle("_RINvNtC3std3mem8align_ofdE"),
            "std::mem::align_of::<f64>"
        );
    }

    #[test]
    fn cpp() {
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(demangle("_ZN2ns5Klass6methodEv"), "ns::Klass::method()");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(demangle("_ZN2ns5KlassC2Ev"), "ns::Klass::Klass()");
        // A `_ZN…E` name without a Rust hash is C++ (and reads the same).
        assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
    }

    #[test]
    fn unchanged() {
        for s in [
            "main",
            "",
            "_Z",
            "_ZN",
            "_R",
            "_ZZZZZ",
            "__libc_start_main",
            "_ZN3foo",
            "ümlaut",
        ] {
            assert_eq!(demangle(s), s, "{s:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678_9abc_def0_u64;
        for i in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 40) as usize;
            let alphabet = b"_ZNRSsIEvitT0123456789abcdefhCDKPR$.";
            let mut s = String::from(if i % 2 == 0 { "_Z" } else { "_R" });
            let mut x = seed;
            for _ in 0..len {
                s.push(alphabet[(x % alphabet.len() as u64) as usize] as char);
                x = x.rotate_left(7).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            }
            let _ = demangle(&s);
        }
    }
}
