//! Ctrl-C and SIGTERM. The first one cancels the run: the sweep stops, the rows measured so far are
//! written, shared memory is unregistered and unlinked, and the process exits 130. A second one
//! exits at once, after unlinking this process's shared-memory segments.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::client::shm::unlink_all_live;

/// Exit code of an interrupted run (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;

/// How long a cancelled sweep may take to stop and write its rows before it is abandoned: it may
/// be waiting on a call to a server that never answers.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A handle that tells whether the run was cancelled.
#[derive(Clone)]
pub struct Interrupt {
    cancelled: watch::Receiver<bool>,
}

impl Interrupt {
    /// Starts listening for SIGINT and SIGTERM. Must be called inside the runtime.
    pub fn install() -> Interrupt {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let mut signals = 0;
            loop {
                wait_for_signal().await;
                signals += 1;
                if signals == 1 {
                    eprintln!("interrupted: writing the measured rows (Ctrl-C again to quit at once)");
                    let _ = tx.send(true);
                } else {
                    unlink_all_live();
                    std::process::exit(EXIT_INTERRUPTED.into());
                }
            }
        });
        Interrupt { cancelled: rx }
    }

    /// `work`, or, once the run is cancelled, `work` for at most [`STOP_GRACE`] more, then
    /// `abandoned()`.
    pub async fn bounded<T>(&self, work: impl Future<Output = T>, abandoned: impl FnOnce() -> T) -> T {
        tokio::pin!(work);
        tokio::select! {
            done = &mut work => return done,
            _ = self.cancelled() => {}
        }
        tokio::time::timeout(STOP_GRACE, work).await.unwrap_or_else(|_| abandoned())
    }

    /// Resolves once the run is cancelled (never, if it is not).
    pub async fn cancelled(&self) {
        let mut rx = self.cancelled.clone();
        if rx.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
