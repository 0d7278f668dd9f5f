//! The page's requests (`/api/…`): each checks its parameters, gets its stacks from the
//! [`Source`] and answers with a view of them (`views`) as JSON, or with the daemon's own
//! answer (the timeline, the range as pprof).

use std::sync::Arc;

use serde_json::json;

use crate::commands::ui::params::{BadRequest, Origin, Params, Selection, SELECTION};
use crate::commands::ui::source::{Source, SourceError};
use crate::commands::ui::stacks::Stacks;
use crate::commands::ui::views::{self, View};
use crate::history::{self, TimelineQuery};
use daemon_api::header;
use daemon_api::history::GroupBy;
use daemon_api::Measure;

/// An answer: status, content type, body, and a file name when it is a download.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
    /// Offered as a download under this name.
    pub download: Option<String>,
}

impl Reply {
    /// A JSON answer.
    pub fn json(body: String) -> Reply {
        Reply {
            status: 200,
            content_type: "application/json",
            body: body.into_bytes(),
            download: None,
        }
    }

    /// An error: `{"error": message}`.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: json!({ "error": message }).to_string().into_bytes(),
            download: None,
        }
    }
}

impl From<BadRequest> for Reply {
    fn from(err: BadRequest) -> Reply {
        Reply::error(400, &err.0)
    }
}

impl From<SourceError> for Reply {
    fn from(err: SourceError) -> Reply {
        Reply::error(err.status, &err.message)
    }
}

/// What the page is started with.
pub struct Start {
    /// The timeline's span at first, seconds.
    pub span: f64,
}

/// Answer `GET /api/NAME?query`.
pub async fn answer(source: &Arc<Source>, start: &Start, name: &str, query: &str) -> Reply {
    let result = match name {
        "info" => Ok(info(source, start)),
        "timeline" => timeline(source, query).await,
        "flame" => flame(source, query).await,
        "search" => search(source, query).await,
        "top" => top(source, query).await,
        "sandwich" => sandwich(source, query).await,
        "diff" => diff(source, query).await,
        "pprof" => pprof(source, query).await,
        _ => return Reply::error(404, "no such request"),
    };
    result.unwrap_or_else(|reply| reply)
}

/// `SELECTION` plus `more`.
fn allowed(more: &[&'static str]) -> Vec<&'static str> {
    SELECTION.iter().chain(more).copied().collect()
}

/// Parse `query` (of which only `allowed` keys) and select its stacks.
async fn selected(
    source: &Source,
    query: &str,
    more: &[&'static str],
) -> Result<(Params, Selection, Arc<Stacks>), Reply> {
    let params = Params::parse(query, &allowed(more))?;
    let selection = params.selection("", source.files().len())?;
    let stacks = source.stacks(&selection).await?;
    Ok((params, selection, stacks))
}

/// The minimum width of a frame, a share of the whole (`minwidth`, percent; 0.1 by default).
fn min_share(params: &Params) -> Result<f64, Reply> {
    Ok(params.bounded("minwidth", 0.001, 5.0, 0.1)? / 100.0)
}

/// `/api/info`: what the page shows (the daemon's history or files).
fn info(source: &Source, start: &Start) -> Reply {
    let files: Vec<_> = source
        .files()
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "kind": f.stacks.about.kind,
                "samples": f.stacks.total,
            })
        })
        .collect();
    Reply::json(
        json!({
            "mode": if source.socket().is_some() { "daemon" } else { "files" },
            "socket": source.socket().map(|s| s.display().to_string()),
            "files": files,
            "span": start.span,
            "version": env!("CARGO_PKG_VERSION"),
        })
        .to_string(),
    )
}

/// `/api/timeline`: the daemon's CPU timeline of the range, by `by` (`top` groups, buckets
/// of `bucket` seconds), with the daemon's slice length.
async fn timeline(source: &Source, query: &str) -> Result<Reply, Reply> {
    let params = Params::parse(query, &allowed(&["by", "top", "bucket"]))?;
    let selection = params.selection("", source.files().len())?;
    let Origin::Range(since, until) = selection.origin else {
        return Err(Reply::error(400, "a timeline is of a range"));
    };
    let by = match params.text("by").unwrap_or("comm") {
        "comm" => GroupBy::Comm,
        "pid" => GroupBy::Pid,
        "uid" => GroupBy::Uid,
        "cgroup" => GroupBy::Cgroup,
        _ => return Err(Reply::error(400, "by must be comm, pid, uid or cgroup")),
    };
    let top = params.bounded("top", 1.0, 100.0, 8.0)? as u16;
    let bucket = params.number::<u64>("bucket")?;
    if bucket.is_some_and(|b| b == 0 || b > 7 * 86_400) {
        return Err(Reply::error(400, "bucket must be from 1 to 604800 seconds"));
    }
    let path = history::timeline_path(
        (since, until),
        &selection.filter,
        &TimelineQuery {
            bucket,
            by,
            top,
            function: params.text("function").map(str::to_string),
        },
    )
    .map_err(|e| Reply::error(400, &e.to_string()))?;
    let answer = source.daemon_get(&path).await?;
    let timeline: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|_| Reply::error(502, "profilerd's timeline is not JSON"))?;
    let slice = answer.number(header::SLICE_NS).unwrap_or(0) as f64 / 1e9;
    Ok(Reply::json(
        json!({ "slice_seconds": slice, "timeline": timeline, "since": since, "until": until })
            .to_string(),
    ))
}

/// `/api/flame`: the flame graph (or, with `focus`, the named function's callees), with what
/// the range is and the `profctl flamegraph` command that draws it.
async fn flame(source: &Source, query: &str) -> Result<Reply, Reply> {
    let params = Params::parse(query, &allowed(&["minwidth", "focus"]))?;
    let selection = params.selection("", source.files().len())?;
    let min = min_share(&params)?;
    // The whole graph of a range: profilerd sends it bounded at the page's width, so that an
    // hour of a busy host is a few thousand frames, not every stack. The function filter and
    // the focus are profctl's own: they need every stack.
    let bounded = params.text("function").is_none() && params.text("focus").is_none();
    let stacks = source
        .stacks_as(&selection, bounded.then_some(min * 100.0))
        .await?;
    let view = View::new(&stacks, params.text("function"));
    let tree = match params.text("focus") {
        Some(name) => views::focus(&view, name, min)
            .ok_or_else(|| Reply::error(404, "no stack of this range holds that function"))?,
        None => views::flame(&view, min),
    };
    let about = &stacks.about;
    let unit = match selection.filter.measure {
        Some(_) => "µs",
        None => "samples",
    };
    let meta = json!({
        "unit": unit,
        "slices": about.slices,
        "frequency": about.frequency,
        "event": about.event,
        "kernel": about.kernel,
        "kind": about.kind,
        "cut": stacks.cut,
        "command": command_line(source, &selection),
    });
    Ok(Reply::json(format!(
        "{{\"about\":{meta},\"flame\":{tree}}}"
    )))
}

/// `/api/search`: the share of samples with a frame whose name holds `q`.
async fn search(source: &Source, query: &str) -> Result<Reply, Reply> {
    let (params, _, stacks) = selected(source, query, &["q"]).await?;
    let q = params
        .text("q")
        .ok_or_else(|| Reply::error(400, "q is missing"))?;
    Ok(Reply::json(views::search(
        &View::new(&stacks, params.text("function")),
        q,
    )))
}

/// `/api/top`: functions by self (or `by=total`) samples, the first `limit`.
async fn top(source: &Source, query: &str) -> Result<Reply, Reply> {
    let (params, _, stacks) = selected(source, query, &["by", "limit"]).await?;
    let by_total = match params.text("by").unwrap_or("self") {
        "self" => false,
        "total" => true,
        _ => return Err(Reply::error(400, "by must be self or total")),
    };
    let limit = params.bounded("limit", 1.0, views::MAX_ROWS as f64, 200.0)? as usize;
    Ok(Reply::json(views::top(
        &View::new(&stacks, params.text("function")),
        by_total,
        limit,
    )))
}

/// `/api/sandwich`: the callers and callees of the function `name`.
async fn sandwich(source: &Source, query: &str) -> Result<Reply, Reply> {
    let (params, _, stacks) = selected(source, query, &["name", "minwidth"]).await?;
    let name = params
        .text("name")
        .ok_or_else(|| Reply::error(400, "name is missing"))?;
    let view = View::new(&stacks, params.text("function"));
    views::sandwich(&view, name, min_share(&params)?)
        .map(Reply::json)
        .ok_or_else(|| Reply::error(404, "no stack of this range holds that function"))
}

/// `/api/diff`: the flame graph of the range with each frame's samples in the other range
/// (`base_since`, `base_until`, or `base_file`).
async fn diff(source: &Source, query: &str) -> Result<Reply, Reply> {
    let (params, _, after) = selected(
        source,
        query,
        &["minwidth", "base_since", "base_until", "base_file"],
    )
    .await?;
    let base = params.selection("base_", source.files().len())?;
    let base = Selection {
        filter: params.selection("", source.files().len())?.filter,
        ..base
    };
    let before = source.stacks(&base).await?;
    let function = params.text("function");
    Ok(Reply::json(views::diff(
        &View::new(&after, function),
        &View::new(&before, function),
        min_share(&params)?,
    )))
}

/// `/api/pprof`: the range as the daemon's pprof profile, a download.
async fn pprof(source: &Source, query: &str) -> Result<Reply, Reply> {
    let params = Params::parse(query, SELECTION)?;
    let selection = params.selection("", source.files().len())?;
    let Origin::Range(since, until) = selection.origin else {
        return Err(Reply::error(400, "a file is downloaded as itself"));
    };
    let answer = source
        .daemon_get(
            &history::pprof_path(since, until, &selection.filter)
                .map_err(|e| Reply::error(400, &e.to_string()))?,
        )
        .await?;
    Ok(Reply {
        status: 200,
        content_type: "application/octet-stream",
        body: answer.body,
        download: Some(format!("profctl-{since:.0}-{until:.0}.pb.gz")),
    })
}

/// `word` as one shell word.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The `profctl flamegraph` command line that draws the same stacks (the function filter and
/// focus are the page's own: the command has none).
fn command_line(source: &Source, selection: &Selection) -> String {
    let mut words: Vec<String> = vec!["profctl".into()];
    match selection.origin {
        Origin::File(i) => {
            words.extend(["flamegraph".into(), "--input".into()]);
            words.push(shell_word(&source.files()[i].path.display().to_string()));
        }
        Origin::Range(since, until) => {
            if let Some(socket) = source.socket() {
                let socket = socket.display().to_string();
                if socket != daemon_api::DEFAULT_SOCKET {
                    words.extend(["--socket".into(), shell_word(&socket)]);
                }
            }
            words.push("flamegraph".into());
            words.extend(["--since".into(), format!("@{since:.3}")]);
            words.extend(["--until".into(), format!("@{until:.3}")]);
            let f = &selection.filter;
            if let Some(pid) = f.pid {
                words.extend(["--pid".into(), pid.to_string()]);
            }
            if f.descendants {
                words.push("--descendants".into());
            }
            if let Some(comm) = &f.comm {
                words.extend(["--comm".into(), shell_word(comm)]);
            }
            if let Some(uid) = f.uid {
                words.extend(["--uid".into(), uid.to_string()]);
            }
            if let Some(cgroup) = &f.cgroup {
                words.extend(["--cgroup".into(), shell_word(cgroup)]);
            }
            match f.measure {
                Some(Measure::OffCpu) => words.push("--off-cpu".into()),
                Some(Measure::Wall) => words.push("--wall".into()),
                Some(Measure::Cpu) | None => {}
            }
        }
    }
    words.extend(["-o".into(), "range.svg".into()]);
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_when_they_must_be() {
        assert_eq!(
            shell_word("/system.slice/a.service"),
            "/system.slice/a.service"
        );
        assert_eq!(shell_word("my app"), "'my app'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
