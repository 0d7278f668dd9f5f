//! The daemon's log: tracing to stderr, with a filter a reload can change. Each event is one
//! line: a line break or other control character in a field (a file name a user chose) is
//! written as `\xNN`, so that no one can forge a log line.

use std::io::{self, Write};

/// Changes the log filter of the running process.
pub type SetLogFilter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Start logging to stderr with `level` (or `PROFILERD_LOG` when set); returns what changes
/// the filter later.
pub fn init_logging(level: &str) -> SetLogFilter {
    let filter = match std::env::var("PROFILERD_LOG") {
        Ok(env) if !env.is_empty() => tracing_subscriber::EnvFilter::new(env),
        _ => tracing_subscriber::EnvFilter::new(level),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| OneLine(io::stderr()))
        .with_ansi(false)
        .with_target(false)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    builder.init();
    Box::new(move |level: &str| {
        let filter = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    })
}

/// A writer that keeps each event on one line: tracing's formatter writes an event, its
/// final line break included, in one call; every control character but that last line
/// break and tabs becomes `\xNN`.
pub struct OneLine<W: Write>(pub W);

impl<W: Write> Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        let mut out = Vec::with_capacity(buf.len() + 16);
        for &b in body {
            if b == b'\t' || (b >= 0x20 && b != 0x7f) {
                out.push(b);
            } else {
                write!(out, "\\x{b:02x}")?;
            }
        }
        if body.len() < buf.len() {
            out.push(b'\n');
        }
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A warning naming a file whose name holds line breaks and an escape, formatted by the
    /// daemon's own subscriber settings: one line, the breaks escaped.
    #[test]
    fn a_file_name_with_a_line_break_logs_one_line() {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&written);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || OneLine(SharedBuf(Arc::clone(&sink))))
            .with_ansi(false)
            .with_target(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let file = "/tmp/evil\n2026-01-01T00:00:00Z  WARN forged\r\x1b[2J";
            tracing::warn!(file = %file, "cannot read symbols; its frames stay unnamed");
        });
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(text.ends_with('\n'));
        assert!(
            text.contains("evil\\x0a2026") && text.contains("\\x0d\\x1b"),
            "{text:?}"
        );
    }

    struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
