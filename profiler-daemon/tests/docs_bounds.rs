//! The bounds table of docs/daemon.md ("Every thread, map and file has a bound") against the
//! configuration's defaults: each `` `section.key` (value) `` the table quotes must be the
//! default of `config/profilerd.toml`, which the config module's tests keep equal to the
//! built-in defaults. A default changed in the code without the docs fails here.

use std::path::Path;

/// A quoted or configured figure in base units: seconds, bytes, or a plain number.
fn figure(text: &str) -> Option<f64> {
    let text = text.trim().trim_matches('"');
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    // What follows the unit (`2% of a core`) is prose.
    let unit = unit.split_whitespace().next().unwrap_or("");
    let scale = match unit {
        "" | "Hz" | "%" => 1.0,
        "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(number * scale)
}

/// `(key, quoted value, line)` for every `` `section.key` (value) `` of the bounds table.
fn quoted_bounds(doc: &str) -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    let mut in_table = false;
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with("| what | bound | released |") {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            break;
        }
        if !in_table {
            continue;
        }
        let mut rest = line;
        while let Some(open) = rest.find('`') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('`') else { break };
            let key = &after[..close];
            let tail = &after[close + 1..];
            if let Some(value) = tail.strip_prefix(" (") {
                if key.contains('.')
                    && key
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || "._".contains(c))
                {
                    if let Some(end) = value.find(')') {
                        found.push((key.to_string(), value[..end].to_string(), n + 1));
                    }
                }
            }
            rest = tail;
        }
    }
    found
}

#[test]
fn the_bounds_table_quotes_the_configured_defaults() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/daemon.md")).unwrap();
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("config/profilerd.toml")).unwrap())
            .unwrap();
    let quoted = quoted_bounds(&doc);
    assert!(
        quoted.len() >= 12,
        "the bounds table of docs/daemon.md quotes too few configuration keys: {quoted:?}"
    );
    let mut wrong = Vec::new();
    for (key, value, line) in &quoted {
        let (section, name) = key.split_once('.').unwrap();
        let Some(configured) = config
            .get(section)
            .and_then(|s| s.get(name))
            .map(|v| match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        else {
            wrong.push(format!(
                "docs/daemon.md:{line}: `{key}` is not a key of config/profilerd.toml"
            ));
            continue;
        };
        match (figure(value), figure(&configured)) {
            (Some(a), Some(b)) if (a - b).abs() <= 1e-9 * b.abs().max(1.0) => {}
            _ => wrong.push(format!(
                "docs/daemon.md:{line}: `{key}` ({value}), but its default is {configured}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn figures_are_read_in_base_units() {
    assert_eq!(figure("3 d"), figure("3d"));
    assert_eq!(figure("1 GiB"), Some(1073741824.0));
    assert_eq!(figure("10 min"), figure("10m"));
    assert_eq!(figure("2% of a core"), Some(2.0));
    assert_ne!(figure("30 s"), figure("3m"));
    assert_eq!(figure("seven"), None);
}
