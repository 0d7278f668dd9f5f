//! pprof to folded stacks and back.

use std::collections::HashMap;

use crate::builder::{Builder, Labels, LineSpec};
use crate::label;
use crate::proto::{Function, Location, Mapping, Profile};
use crate::PprofError;

/// Most frames one folded stack may have (inline frames included): deeper is refused as
/// invalid (a location with many lines referenced many times would multiply a small file).
pub const MAX_FOLDED_FRAMES: usize = 16 << 10;

/// Most frames all the distinct folded stacks of one profile may hold together.
pub const MAX_FOLDED_TOTAL_FRAMES: usize = 16 << 20;

/// How [`fold`] names frames.
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldOptions {
    /// Put the sample's `comm` label, when it has one, as the root frame (profctl's folded
    /// stacks carry the thread's command name there).
    pub comm_root: bool,
    /// Name frames `function (file:line)` where the file and line are known.
    pub lines: bool,
}

/// A stack, root first, and its count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoldedStack {
    /// Frame names, root first; names are as the profile has them (they may hold `;` or
    /// control characters: sanitize before writing folded text).
    pub frames: Vec<String>,
    /// Samples.
    pub count: u64,
}

/// Which value of each sample is its count: the `samples/count` one, else the first with unit
/// `count`, else the default sample type, else the last (as `go tool pprof` shows).
fn count_index<'a>(p: &Profile, string: &impl Fn(i64) -> Result<&'a str, PprofError>) -> usize {
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (string(t.r#type).unwrap_or(""), string(t.unit).unwrap_or("")))
        .collect();
    if let Some(i) = types.iter().position(|&t| t == ("samples", "count")) {
        return i;
    }
    if let Some(i) = types.iter().position(|&(_, u)| u == "count") {
        return i;
    }
    if p.default_sample_type != 0 {
        let default = string(p.default_sample_type).unwrap_or("");
        if let Some(i) = types.iter().position(|&(t, _)| t == default) {
            return i;
        }
    }
    types.len().saturating_sub(1)
}

/// The stacks of `profile` with their counts, merged by frame names and sorted. Inline frames
/// (a location's several lines) become frames of their own, outermost first. A reference that
/// names nothing (a string index, a location, function or mapping id) is an error, and so is
/// a stack deeper than [`MAX_FOLDED_FRAMES`] or more than [`MAX_FOLDED_TOTAL_FRAMES`] frames in
/// all.
pub fn fold(profile: &Profile, options: &FoldOptions) -> Result<Vec<FoldedStack>, PprofError> {
    let p = profile;
    let string = |i: i64| -> Result<&str, PprofError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| PprofError::Invalid(format!("string index {i} out of range")))
    };
    let functions: HashMap<u64, &Function> = p.function.iter().map(|f| (f.id, f)).collect();
    let mappings: HashMap<u64, &Mapping> = p.mapping.iter().map(|m| (m.id, m)).collect();
    let locations: HashMap<u64, &Location> = p.location.iter().map(|l| (l.id, l)).collect();
    let value = count_index(p, &string);
    // Each location's frames, outermost first, named once.
    let mut named: HashMap<u64, Vec<String>> = HashMap::new();
    let mut merged: HashMap<Vec<String>, u64> = HashMap::new();
    let mut total_frames = 0usize;
    let comm_key = p.string_table.iter().position(|s| s == label::COMM);
    let pid_key = p.string_table.iter().position(|s| s == label::PID);
    for sample in &p.sample {
        let count = sample.value.get(value).copied().unwrap_or(0);
        if count <= 0 {
            continue;
        }
        let mut frames = Vec::with_capacity(sample.location_id.len() + 1);
        if options.comm_root {
            let comm = sample
                .label
                .iter()
                .find(|l| Some(l.key as usize) == comm_key && l.str != 0);
            // A thread whose name was never seen (its process's records lost) is rooted at
            // its pid, as profilerd's folded answers root it, never at its outermost frame.
            let pid = || {
                sample
                    .label
                    .iter()
                    .find(|l| Some(l.key as usize) == pid_key && l.str == 0)
                    .map(|l| l.num)
            };
            // (Asked by callers whose profile has command names: a profile without them, such
            // as Go's own, is folded without `comm_root`.)
            frames.push(match (comm, pid()) {
                (Some(l), _) => string(l.str)?.to_string(),
                (None, Some(0)) => "swapper".to_string(),
                (None, Some(pid)) => format!("[pid {pid}]"),
                (None, None) => "[unknown]".to_string(),
            });
        }
        for id in sample.location_id.iter().rev() {
            if !named.contains_key(id) {
                let loc = locations.get(id).ok_or_else(|| {
                    PprofError::Invalid(format!("a sample names location {id}, which is not there"))
                })?;
                let names = location_names(loc, &functions, &mappings, &string, options)?;
                named.insert(*id, names);
            }
            let names = &named[id];
            if frames.len() + names.len() > MAX_FOLDED_FRAMES {
                return Err(PprofError::Invalid(format!(
                    "a sample's stack is deeper than {MAX_FOLDED_FRAMES} frames"
                )));
            }
            frames.extend(names.iter().cloned());
        }
        if sample.location_id.is_empty() {
            // A stack with nothing the reader may see (all kernel frames, withheld from a
            // user) keeps its time under `[unknown]`, as profilerd's folded answers keep it.
            frames.push("[unknown]".to_string());
        }
        if !merged.contains_key(&frames) {
            total_frames += frames.len();
            if total_frames > MAX_FOLDED_TOTAL_FRAMES {
                return Err(PprofError::Invalid(format!(
                    "the stacks hold more than {MAX_FOLDED_TOTAL_FRAMES} frames in all"
                )));
            }
        }
        let c = merged.entry(frames).or_default();
        *c = c.saturating_add(count as u64);
    }
    let mut out: Vec<FoldedStack> = merged
        .into_iter()
        .map(|(frames, count)| FoldedStack { frames, count })
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The frames of one location, outermost first.
fn location_names<'a>(
    loc: &Location,
    functions: &HashMap<u64, &Function>,
    mappings: &HashMap<u64, &Mapping>,
    string: &impl Fn(i64) -> Result<&'a str, PprofError>,
    options: &FoldOptions,
) -> Result<Vec<String>, PprofError> {
    let mapping = match loc.mapping_id {
        0 => None,
        id => Some(*mappings.get(&id).ok_or_else(|| {
            PprofError::Invalid(format!(
                "location {} names mapping {id}, which is not there",
                loc.id
            ))
        })?),
    };
    let unnamed = || -> Result<String, PprofError> {
        Ok(match mapping {
            Some(m) => {
                let file = string(m.filename)?;
                let base = file.rsplit('/').next().unwrap_or(file);
                format!("{base}+{:#x}", loc.address)
            }
            None if loc.address != 0 => format!("[unknown]+{:#x}", loc.address),
            None => "[unknown]".to_string(),
        })
    };
    if loc.line.is_empty() {
        return Ok(vec![unnamed()?]);
    }
    let mut names = Vec::with_capacity(loc.line.len());
    for line in loc.line.iter().rev() {
        let f = functions.get(&line.function_id).ok_or_else(|| {
            PprofError::Invalid(format!(
                "location {} names function {}, which is not there",
                loc.id, line.function_id
            ))
        })?;
        let mut name = string(f.name)?;
        if name.is_empty() {
            name = string(f.system_name)?;
        }
        let mut name = if name.is_empty() {
            unnamed()?
        } else {
            name.to_string()
        };
        let file = string(f.filename)?;
        if options.lines && !file.is_empty() && line.line > 0 {
            name = format!("{name} ({file}:{})", line.line);
        }
        names.push(name);
    }
    Ok(names)
}

/// A profile from folded stacks (`frame;frame;frame count` lines, root first; empty lines
/// skipped), one sample of `period_ns` per count. With `comm_root`, each line's first frame is
/// the thread's command name and becomes the sample's `comm` label (so that [`fold`] with
/// [`FoldOptions::comm_root`] gives the same lines back).
pub fn from_folded(text: &str, period_ns: u64, comm_root: bool) -> Result<Profile, PprofError> {
    let mut b = Builder::new(period_ns);
    let mut ids = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |reason| PprofError::Folded {
            line: i + 1,
            reason,
        };
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (stack, count) = line
            .rsplit_once(' ')
            .ok_or_else(|| bad("no count after the stack"))?;
        let count: u64 = count
            .parse()
            .map_err(|_| bad("the count is not a whole number"))?;
        let mut frames = stack.split(';');
        let comm = if comm_root { frames.next() } else { None };
        ids.clear();
        for name in frames {
            ids.push(b.location(
                0,
                0,
                &[LineSpec {
                    function: name,
                    ..Default::default()
                }],
            ));
        }
        ids.reverse();
        b.add_sample(
            &ids,
            count,
            &Labels {
                comm,
                ..Default::default()
            },
        );
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MappingSpec;

    #[test]
    fn inline_frames_fold_outermost_first() {
        let mut b = Builder::new(1);
        let m = b.mapping(&MappingSpec {
            file: "/usr/bin/app",
            ..Default::default()
        });
        let leaf = b.location(
            m,
            0x40,
            &[
                LineSpec {
                    function: "inlined",
                    file: Some("a.c"),
                    line: 3,
                },
                LineSpec {
                    function: "caller",
                    file: Some("a.c"),
                    line: 10,
                },
            ],
        );
        let main = b.location(
            m,
            0x80,
            &[LineSpec {
                function: "main",
                ..Default::default()
            }],
        );
        let anon = b.location(m, 0x99, &[]);
        let labels = Labels {
            comm: Some("app"),
            ..Default::default()
        };
        b.add_sample(&[leaf, main], 4, &labels);
        b.add_sample(&[anon, main], 1, &labels);
        let p = b.finish();
        let folded = fold(
            &p,
            &FoldOptions {
                comm_root: true,
                lines: true,
            },
        )
        .unwrap();
        assert_eq!(
            folded,
            vec![
                FoldedStack {
                    frames: vec!["app", "main", "app+0x99"]
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    count: 1
                },
                FoldedStack {
                    frames: vec!["app", "main", "caller (a.c:10)", "inlined (a.c:3)"]
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    count: 4
                },
            ]
        );
    }

    #[test]
    fn folded_round_trips() {
        let text = "app;main;a 5\napp;main;b 1\nsh;x 2\n";
        let p = from_folded(text, 1_000_000, true).unwrap();
        let back = fold(
            &p,
            &FoldOptions {
                comm_root: true,
                ..Default::default()
            },
        )
        .unwrap();
        let lines: Vec<String> = back
            .iter()
            .map(|s| format!("{} {}", s.frames.join(";"), s.count))
            .collect();
        assert_eq!(lines.join("\n") + "\n", text);
        let err = from_folded("a;b\n", 1, true).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn a_thread_without_a_name_is_rooted_at_its_pid() {
        let mut p = from_folded("app;main;a 5\n", 1_000_000, true).unwrap();
        let pid_key = p.string_table.len() as i64;
        p.string_table.push(label::PID.to_string());
        let sample = &mut p.sample[0];
        sample.label.clear();
        sample.label.push(crate::proto::Label {
            key: pid_key,
            num: 4242,
            ..Default::default()
        });
        let options = FoldOptions {
            comm_root: true,
            ..Default::default()
        };
        let folded = fold(&p, &options).unwrap();
        assert_eq!(folded[0].frames, vec!["[pid 4242]", "main", "a"]);
        p.sample[0].label.clear();
        let folded = fold(&p, &options).unwrap();
        assert_eq!(folded[0].frames, vec!["[unknown]", "main", "a"]);
    }

    #[test]
    fn a_sample_without_locations_is_kept_under_unknown() {
        let mut p = from_folded("app;main;a 5\n", 1_000_000, true).unwrap();
        p.sample[0].location_id.clear();
        let options = FoldOptions {
            comm_root: true,
            ..Default::default()
        };
        let folded = fold(&p, &options).unwrap();
        assert_eq!(folded[0].frames, vec!["app", "[unknown]"]);
        assert_eq!(folded[0].count, 5);
        let folded = fold(&p, &FoldOptions::default()).unwrap();
        assert_eq!(folded[0].frames, vec!["[unknown]"]);
    }

    #[test]
    fn dangling_references_are_errors() {
        let mut p = from_folded("app;main 1\n", 1, true).unwrap();
        p.sample[0].location_id.push(99);
        let err = fold(&p, &FoldOptions::default()).unwrap_err();
        assert!(err.to_string().contains("location 99"), "{err}");
        let mut p = from_folded("app;main 1\n", 1, true).unwrap();
        p.function[0].name = 1000;
        assert!(fold(&p, &FoldOptions::default()).is_err());
        // A deep stack from few bytes: one location repeated.
        let mut p = from_folded("app;main 1\n", 1, true).unwrap();
        p.sample[0].location_id = vec![1; MAX_FOLDED_FRAMES + 1];
        let err = fold(&p, &FoldOptions::default()).unwrap_err();
        assert!(err.to_string().contains("deeper than"), "{err}");
    }
}
