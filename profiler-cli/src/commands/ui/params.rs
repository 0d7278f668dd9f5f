//! The page's query strings, checked: which stacks (a range of the daemon's history or a
//! file, a filter, a measure) and what of them. Every parameter is known, bounded and of its
//! type, or the request is refused with a message naming it.

use std::collections::HashMap;

use daemon_api::Measure;

use crate::history::RangeFilter;

/// Longest query string taken.
pub const MAX_QUERY: usize = 8192;

/// Longest text parameter (a command name, a cgroup path, a function name, a search).
const MAX_TEXT: usize = 4096;

/// Longest range asked of the daemon (the daemon has its own bound, `api.max_range`).
const MAX_RANGE_SECONDS: f64 = 31.0 * 86_400.0;

/// Which stacks: a range of the daemon's history, or one of the files given.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// `since..until`, UNIX seconds.
    Range(f64, f64),
    /// The file of this index.
    File(usize),
}

/// Which stacks a view reads.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Where they come from.
    pub origin: Origin,
    /// The daemon's filter and measure (ranges only).
    pub filter: RangeFilter,
}

impl Selection {
    /// The key of these stacks in the cache.
    pub fn key(&self) -> String {
        match self.origin {
            Origin::Range(since, until) => {
                format!("range {since:.3} {until:.3} {:?}", self.filter)
            }
            Origin::File(i) => format!("file {i}"),
        }
    }
}

/// A query string's parameters, each taken at most once.
pub struct Params {
    values: HashMap<String, String>,
}

/// Why a request's parameters were refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

impl Params {
    /// The parameters of `query` (the part after `?`), of which only `allowed` may appear.
    pub fn parse(query: &str, allowed: &[&str]) -> Result<Params, BadRequest> {
        if query.len() > MAX_QUERY {
            return Err(BadRequest(format!(
                "the query string is longer than {MAX_QUERY} bytes"
            )));
        }
        let mut values = HashMap::new();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            if !allowed.contains(&key.as_ref()) {
                return Err(BadRequest(format!(
                    "unknown parameter {:?}; this request takes {}",
                    crate::output::printable(&key),
                    allowed.join(", ")
                )));
            }
            if value.len() > MAX_TEXT {
                return Err(BadRequest(format!("{key} is longer than {MAX_TEXT} bytes")));
            }
            if values.insert(key.to_string(), value.to_string()).is_some() {
                return Err(BadRequest(format!("{key} is given twice")));
            }
        }
        Ok(Params { values })
    }

    /// A text parameter, if given (and not empty).
    pub fn text(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A number parameter, if given.
    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, BadRequest> {
        self.text(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| BadRequest(format!("{key} is not a number of its kind: {v:?}")))
            })
            .transpose()
    }

    /// A yes/no parameter (`1`, `true`; absent: no).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.text(key), Some("1" | "true" | "on"))
    }

    /// A finite number in `lo..=hi`, or `default` when absent.
    pub fn bounded(&self, key: &str, lo: f64, hi: f64, default: f64) -> Result<f64, BadRequest> {
        match self.number::<f64>(key)? {
            None => Ok(default),
            Some(v) if v.is_finite() && (lo..=hi).contains(&v) => Ok(v),
            Some(v) => Err(BadRequest(format!(
                "{key} must be from {lo} to {hi}, got {v}"
            ))),
        }
    }

    /// The stacks asked for: `file=N` (one of `files` files), or `since`/`until` (UNIX
    /// seconds) with `pid`, `descendants`, `comm`, `uid`, `cgroup` and `measure`, each with
    /// `prefix` before its name (`base_` for a diff's other side).
    pub fn selection(&self, prefix: &str, files: usize) -> Result<Selection, BadRequest> {
        let key = |k: &str| format!("{prefix}{k}");
        if let Some(file) = self.number::<usize>(&key("file"))? {
            if file >= files {
                return Err(BadRequest(format!(
                    "{} must be below {files}, the number of files",
                    key("file")
                )));
            }
            return Ok(Selection {
                origin: Origin::File(file),
                filter: RangeFilter::default(),
            });
        }
        let time = |k: &str| -> Result<f64, BadRequest> {
            match self.number::<f64>(&key(k))? {
                Some(t) if t.is_finite() && t > 0.0 => Ok(t),
                Some(t) => Err(BadRequest(format!(
                    "{} must be UNIX seconds, got {t}",
                    key(k)
                ))),
                None if files > 0 => Err(BadRequest(format!("{} is missing", key("file")))),
                None => Err(BadRequest(format!("{} is missing", key(k)))),
            }
        };
        let (since, until) = (time("since")?, time("until")?);
        if since >= until || until - since > MAX_RANGE_SECONDS {
            return Err(BadRequest(format!(
                "{} must be before {}, and at most 31 days before it",
                key("since"),
                key("until")
            )));
        }
        if files > 0 {
            return Err(BadRequest(
                "this profctl ui shows files (--input): there is no history to ask".into(),
            ));
        }
        let pid = self.number::<u32>("pid")?;
        let descendants = self.flag("descendants");
        if descendants && pid.is_none() {
            return Err(BadRequest("descendants needs a pid".into()));
        }
        let cgroup = self.text("cgroup").map(str::to_string);
        if cgroup.as_deref().is_some_and(|c| !c.starts_with('/')) {
            return Err(BadRequest(
                "cgroup must be an absolute cgroup v2 path, such as /system.slice/nginx.service"
                    .into(),
            ));
        }
        let measure = match self.text("measure") {
            None | Some("cpu") => None,
            Some("off_cpu") => Some(Measure::OffCpu),
            Some("wall") => Some(Measure::Wall),
            Some(other) => {
                return Err(BadRequest(format!(
                    "measure must be cpu, off_cpu or wall, got {:?}",
                    crate::output::printable(other)
                )))
            }
        };
        Ok(Selection {
            origin: Origin::Range(since, until),
            filter: RangeFilter {
                pid,
                descendants,
                comm: self.text("comm").map(str::to_string),
                uid: self.number::<u32>("uid")?,
                cgroup,
                measure,
            },
        })
    }
}

/// The parameters that select stacks (both sides of a diff) and narrow them.
pub const SELECTION: &[&str] = &[
    "since",
    "until",
    "file",
    "pid",
    "descendants",
    "comm",
    "uid",
    "cgroup",
    "measure",
    "function",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &str) -> Result<Selection, BadRequest> {
        Params::parse(q, SELECTION)?.selection("", 0)
    }

    #[test]
    fn ranges_filters_and_refusals() {
        let s = parse("since=100&until=160.5&pid=7&descendants=1&comm=a%20b").unwrap();
        assert_eq!(s.origin, Origin::Range(100.0, 160.5));
        assert_eq!(s.filter.pid, Some(7));
        assert_eq!(s.filter.comm.as_deref(), Some("a b"));
        let key = s.key();
        assert!(
            key.starts_with("range 100.000 160.500 ")
                && key.contains("pid: Some(7)")
                && key.contains("comm: Some(\"a b\")")
                && key.contains("descendants: true"),
            "{key}"
        );
        for (bad, says) in [
            ("since=100", "until is missing"),
            ("since=200&until=100", "before"),
            ("since=1&until=2&x=1", "unknown parameter \"x\""),
            ("since=1&until=2&since=3", "twice"),
            ("since=1&until=2&pid=-1", "pid is not a number"),
            ("since=1&until=2&descendants=1", "needs a pid"),
            ("since=1&until=2&cgroup=rel", "absolute"),
            ("since=1&until=2&measure=gpu", "measure must be"),
            ("since=nan&until=2", "UNIX seconds"),
        ] {
            let err = parse(bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(err.0.contains(says), "{bad}: {}", err.0);
        }
        let long = format!("comm={}", "a".repeat(MAX_QUERY));
        assert!(Params::parse(&long, SELECTION).is_err());
    }

    #[test]
    fn files_by_index() {
        let p = Params::parse("file=1", SELECTION).unwrap();
        assert_eq!(p.selection("", 2).unwrap().origin, Origin::File(1));
        assert!(p.selection("", 1).is_err());
        let p = Params::parse("since=1&until=2", SELECTION).unwrap();
        assert!(p.selection("", 2).unwrap_err().0.contains("files"));
        let p = Params::parse("base_file=0", &["base_file"]).unwrap();
        assert_eq!(p.selection("base_", 1).unwrap().origin, Origin::File(0));
    }
}
