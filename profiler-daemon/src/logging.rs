//! The daemon's log: tracing to stderr, with a filter a reload can change.

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
        .with_writer(std::io::stderr)
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
