//! SIGINT and SIGTERM during an embedded recording: the first ends sampling, any later one
//! ends profctl at once.

use anyhow::{Context, Result};

/// SIGINT and SIGTERM: the first one during sampling ends the recording (outputs are still
/// written); a second one, or any after sampling ended (naming frames, writing outputs),
/// ends profctl at once with status 130, removing its temporary files. Watched on a thread of
/// its own, so that no blocked open or long symbolization can swallow a signal.
pub struct Signals {
    first: Option<tokio::sync::oneshot::Receiver<()>>,
    over: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Signals {
    /// Install the handlers (before anything is started, so no signal is missed) and start
    /// the watching thread.
    pub fn watch() -> Result<Signals> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the signal runtime")?;
        let (mut interrupt, mut terminate) = {
            let _entered = runtime.enter();
            (
                signal(SignalKind::interrupt()).context("watching SIGINT")?,
                signal(SignalKind::terminate()).context("watching SIGTERM")?,
            )
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let over = std::sync::Arc::new(AtomicBool::new(false));
        let seen_over = std::sync::Arc::clone(&over);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut tx = Some(tx);
                runtime.block_on(async {
                    loop {
                        let name = tokio::select! {
                            _ = interrupt.recv() => "SIGINT",
                            _ = terminate.recv() => "SIGTERM",
                        };
                        if !seen_over.load(Ordering::SeqCst) {
                            if let Some(tx) = tx.take() {
                                tracing::debug!("{name}: ending the recording");
                                let _ = tx.send(());
                                continue;
                            }
                        }
                        crate::output::remove_pending_temporaries();
                        eprintln!("profctl: {name}: stopping now; outputs not written");
                        std::process::exit(130);
                    }
                })
            })
            .context("starting the signal thread")?;
        Ok(Signals {
            first: Some(rx),
            over,
        })
    }

    /// A future that resolves at the first signal.
    pub fn first(&mut self) -> impl std::future::Future<Output = ()> {
        let rx = self.first.take();
        async move {
            let signalled = match rx {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            if !signalled {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sampling is over: any signal from now on ends profctl.
    pub fn sampling_over(&self) {
        self.over.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
