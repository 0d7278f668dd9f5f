//! The documentation kept true by tests: the `--help` of profctl, each of its subcommands and
//! profilerd against snapshots in `tests/help/` (`PROFCTL_BLESS=1` writes them anew), and every
//! `profctl`/`profilerd` command line quoted in README.md and docs/*.md parsed by the real
//! binaries, so a renamed or removed flag breaks this test and not a user's script; a
//! concrete `profilerd` line is also run with `--check-config`, so that one the daemon would
//! refuse to start with (`--pprof-listen` without a token) is wrong too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::profctl;
use crate::daemon::profilerd;

/// The environment variable that writes the snapshots instead of comparing.
const BLESS: &str = "PROFCTL_BLESS";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace")
        .to_path_buf()
}

/// Run `bin args…` as a user in a terminal of 100 columns would see it (clap wraps help to
/// `COLUMNS` when standard output is not a terminal).
fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("COLUMNS", "100")
        .env_remove("PROFILERD_SOCKET")
        .env_remove("PROFCTL_LOG")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

fn help_text(bin: &Path, args: &[&str]) -> String {
    let out = run(bin, args);
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands `profctl --help` lists (its "Commands:" section), without `help`.
fn subcommands(top_help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in top_help.lines() {
        if line.starts_with("Commands:") {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with(' ') {
                break;
            }
            // A name at two spaces of indent; continuation lines are indented further.
            if let Some(rest) = line.strip_prefix("  ") {
                if !rest.starts_with(' ') {
                    let name = rest.split_whitespace().next().unwrap_or_default();
                    if name != "help" {
                        names.push(name.to_string());
                    }
                }
            }
        }
    }
    names
}

#[test]
fn help_of_every_command_matches_its_snapshot() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/help");
    let bless = std::env::var_os(BLESS).is_some_and(|v| v == "1");
    let top = help_text(profctl(), &["--help"]);
    let subs = subcommands(&top);
    assert!(
        subs.len() >= 6 && subs.iter().any(|s| s == "record"),
        "profctl --help lists too few subcommands: {subs:?}"
    );
    let mut cases: Vec<(String, String)> = vec![("profctl".into(), top)];
    for sub in &subs {
        cases.push((
            format!("profctl-{sub}"),
            help_text(profctl(), &[sub, "--help"]),
        ));
    }
    cases.push(("profilerd".into(), help_text(&profilerd(), &["--help"])));

    let mut differ = Vec::new();
    for (name, text) in &cases {
        let path = dir.join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == *text => {}
            Ok(want) => differ.push(format!(
                "{name}: --help differs from {}:\n--- snapshot\n{want}\n--- now\n{text}",
                path.display()
            )),
            Err(e) => differ.push(format!("{name}: no snapshot {} ({e})", path.display())),
        }
    }
    // A snapshot of a command that no longer exists is a stale document too.
    if !bless {
        let known: BTreeSet<String> = cases.iter().map(|(n, _)| format!("{n}.txt")).collect();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !known.contains(&name) {
                differ.push(format!("{name}: a snapshot of no command"));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{}\n\nIf the change is meant, update the docs that quote it and run \
         `{BLESS}=1 cargo test -p profiler-cli --test integration docs::help`",
        differ.join("\n\n")
    );
}

/// One command line quoted in a document.
#[derive(Debug)]
struct Quoted {
    /// Where: `file:line`.
    place: String,
    /// `profctl` or `profilerd`.
    program: String,
    /// The words after the program name.
    words: Vec<String>,
    /// Named in prose (an inline code span: `profctl record --pid`), not a whole command:
    /// only its subcommand and flags are checked.
    mention: bool,
}

/// The first word of a quoted line, if it is one of ours (a prompt or `sudo` before it).
fn our_program(line: &str) -> Option<(&'static str, &str)> {
    let line = line.trim_start();
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let line = line.strip_prefix("sudo ").unwrap_or(line);
    for program in ["profctl", "profilerd"] {
        if let Some(rest) = line.strip_prefix(program) {
            if rest.is_empty() || rest.starts_with(' ') {
                return Some((program, rest));
            }
        }
        // `cargo run --release --bin profctl -- ARGS`
        let cargo = format!("--bin {program} -- ");
        if line.starts_with("cargo run") {
            if let Some(at) = line.find(&cargo) {
                return Some((program, &line[at + cargo.len() - 1..]));
            }
        }
    }
    None
}

/// Cut what follows the command on its line: a `#` comment, or prose after a run of spaces
/// (synopsis tables: `profctl top … [-n N]      hottest functions`).
fn command_part(rest: &str) -> &str {
    let rest = rest.split(" #").next().unwrap_or(rest);
    let rest = rest.split(" && ").next().unwrap_or(rest);
    rest.split("   ").next().unwrap_or(rest).trim()
}

/// Every quoted command line of README.md and docs/*.md: lines of fenced code blocks and
/// inline code spans that start with `profctl` or `profilerd`.
fn quoted_commands() -> Vec<Quoted> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let short = file.strip_prefix(&root).unwrap().display().to_string();
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            let place = format!("{short}:{}", n + 1);
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let mut candidates: Vec<&str> = Vec::new();
            if fenced {
                candidates.push(line);
            } else {
                // Inline spans: the odd pieces of a split on backticks.
                candidates.extend(line.split('`').skip(1).step_by(2));
            }
            for candidate in candidates {
                let mention = !fenced;
                if let Some((program, rest)) = our_program(candidate) {
                    let words = command_part(rest)
                        .split_whitespace()
                        .map(str::to_string)
                        .collect();
                    found.push(Quoted {
                        place: place.clone(),
                        program: program.to_string(),
                        words,
                        mention,
                    });
                }
            }
        }
    }
    found
}

/// A synopsis (`[--pid N | -- COMMAND]`, `ADDR…`, `fp|dwarf`) is checked flag by flag; a
/// concrete line is parsed whole.
fn is_synopsis(words: &[String]) -> bool {
    words.iter().any(|w| {
        w.contains(['[', ']', '(', ')', '|', '…'])
            || w == "..."
            || w.ends_with("...")
            || w == "OPTIONS"
    })
}

/// A stand-in for a placeholder a document writes in capitals (`--pid N`, `--socket PATH`).
fn stand_in(word: &str, flag: Option<&str>) -> String {
    let is_placeholder = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == ':')
        && word.chars().any(|c| c.is_ascii_uppercase());
    if !is_placeholder {
        return word.to_string();
    }
    match (word, flag.unwrap_or_default()) {
        ("ADDR:PORT", _) => "127.0.0.1:6061".into(),
        (_, "--since" | "--until") | ("TIME", _) => "10m".into(),
        (_, "--comm") | ("NAME", _) => "name".into(),
        (_, "--cgroup") => "/system.slice".into(),
        (_, "--stack-size") => "8192".into(),
        ("PATH" | "FILE" | "DIR" | "F" | "BEFORE" | "AFTER" | "W" | "COMMAND" | "ARGS", _) => {
            "/tmp/profctl-docs-test".into()
        }
        _ => "1".into(),
    }
}

/// The long and short flags of `profctl [SUB] --help` / `profilerd --help`.
fn flags_of(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        for word in line.split([' ', ',']) {
            if word.starts_with('-') && word.len() > 1 {
                let flag = word.split(['=', '<', '.']).next().unwrap_or(word);
                flags.insert(flag.to_string());
            }
        }
    }
    flags
}

/// The flags a synopsis mentions (`[--pid N | --comm NAME]` gives `--pid`, `--comm`).
fn flags_in(words: &[String]) -> Vec<String> {
    let mut flags = Vec::new();
    for w in words {
        let w = w.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')' | '|' | '…'));
        if w == "--" || !w.starts_with('-') || w.len() < 2 || w.starts_with("---") {
            continue;
        }
        let flag = w.split(['=', '[', '|', '…']).next().unwrap_or(w);
        if flag.starts_with("--") || flag.len() == 2 {
            flags.push(flag.to_string());
        }
    }
    flags
}

/// Check one quoted line against the real binary; `Err` says what is wrong.
fn check(q: &Quoted) -> Result<(), String> {
    let bin: PathBuf = match q.program.as_str() {
        "profctl" => profctl().to_path_buf(),
        _ => profilerd(),
    };
    // profctl's global `--socket PATH` may stand before the subcommand.
    let mut words: Vec<String> = q.words.clone();
    let mut global = Vec::new();
    let mut optional_global = false;
    if q.program == "profctl" {
        while words
            .first()
            .is_some_and(|w| w.starts_with('-') || w.starts_with("[-"))
        {
            let w = words.remove(0);
            optional_global |= w.starts_with('[');
            let takes_value = w.trim_start_matches('[') == "--socket";
            global.push(w);
            if takes_value && !words.is_empty() {
                global.push(words.remove(0));
            }
        }
    }
    let sub = match q.program.as_str() {
        "profctl" => match words.first() {
            Some(w) => Some(w.clone()),
            None => return Ok(()), // the program named alone, in prose
        },
        _ => None,
    };
    if q.program == "profilerd"
        && !is_synopsis(&words)
        && words.first().is_some_and(|w| w.starts_with('-'))
    {
        // A whole profilerd command (not a name in prose, such as the `profilerd slice v1`
        // comment of a file): the daemon must take it as a configuration.
        check_config(&bin, &words)?;
    }
    if q.mention || optional_global || is_synopsis(&words) {
        let mut help_args: Vec<&str> = sub.iter().map(String::as_str).collect();
        help_args.push("--help");
        let out = run(&bin, &help_args);
        if !out.status.success() {
            return Err(format!(
                "`{} {}` is not a command: {}",
                q.program,
                help_args[0],
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let mut known = flags_of(&String::from_utf8_lossy(&out.stdout));
        if q.program == "profctl" {
            known.extend(flags_of(&help_text(profctl(), &["--help"])));
        }
        let missing: Vec<String> = flags_in(&words)
            .into_iter()
            .chain(flags_in(&global))
            .filter(|f| !known.contains(f))
            .collect();
        return if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("no such flag {missing:?}"))
        };
    }
    // A concrete line: placeholders replaced, then parsed by clap, which stops at `--help`
    // once everything before it has parsed (an unknown flag or a bad value fails first).
    let mut args: Vec<String> = global.clone();
    let mut previous: Option<String> = None;
    let mut tail = Vec::new();
    let mut after_dashes = false;
    for w in &words {
        if w == "--" {
            after_dashes = true;
        }
        let w = stand_in(w, previous.as_deref());
        if after_dashes {
            tail.push(w);
        } else {
            previous = Some(w.clone());
            args.push(w);
        }
    }
    args.push("--help".into());
    args.extend(tail);
    let out = run(&bin, &args.iter().map(String::as_str).collect::<Vec<_>>());
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "does not parse (as `{} {}`): {}",
            q.program,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `profilerd WORDS --check-config` (placeholders stood in), with `--config` an empty file (the
/// built-in defaults) unless the words name one: `Err` says why the daemon refused it.
fn check_config(bin: &Path, words: &[String]) -> Result<(), String> {
    let config = std::env::temp_dir().join(format!("profctl-docs-{}.toml", std::process::id()));
    std::fs::write(&config, "").unwrap();
    let mut args: Vec<String> = Vec::new();
    let mut previous: Option<String> = None;
    for w in words {
        let w = if previous.as_deref() == Some("--config") {
            config.display().to_string()
        } else {
            stand_in(w, previous.as_deref())
        };
        previous = Some(w.clone());
        args.push(w);
    }
    if !args.iter().any(|a| a == "--config") {
        args.extend(["--config".to_string(), config.display().to_string()]);
    }
    if !args.iter().any(|a| a == "--check-config") {
        args.push("--check-config".into());
    }
    let out = run(bin, &args.iter().map(String::as_str).collect::<Vec<_>>());
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "profilerd refuses it (as `profilerd {}`): {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[test]
fn every_command_line_in_the_docs_parses() {
    let quoted = quoted_commands();
    assert!(
        quoted.len() > 30,
        "too few command lines found in README.md and docs/: {}",
        quoted.len()
    );
    let wrong: Vec<String> = quoted
        .iter()
        .filter_map(|q| {
            check(q)
                .err()
                .map(|e| format!("{}: `{} {}`: {e}", q.place, q.program, q.words.join(" ")))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} quoted command lines are wrong:\n{}",
        wrong.len(),
        quoted.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_docs_check_catches_a_renamed_flag() {
    // The checker itself: a made-up flag, in both forms, must be refused.
    for words in [
        vec!["record", "--frequency-of-sampling", "99"],
        vec!["record", "[--frequency-of-sampling", "HZ]"],
    ] {
        let q = Quoted {
            place: "test".into(),
            program: "profctl".into(),
            words: words.into_iter().map(String::from).collect(),
            mention: false,
        };
        assert!(check(&q).is_err(), "{q:?} was taken");
    }
    let q = Quoted {
        place: "test".into(),
        program: "profctl".into(),
        words: ["record", "--pid", "N", "--freq", "HZ", "-o", "x.pb.gz"]
            .map(String::from)
            .to_vec(),
        mention: false,
    };
    assert_eq!(check(&q), Ok(()));
    // A profilerd line that parses but that the daemon refuses to start with.
    let q = Quoted {
        place: "test".into(),
        program: "profilerd".into(),
        words: ["--pprof-listen", "127.0.0.1:6060"]
            .map(String::from)
            .to_vec(),
        mention: true,
    };
    let refused = check(&q).unwrap_err();
    assert!(refused.contains("scrape.token_file"), "{refused}");
}
