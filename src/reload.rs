//! Reload without a restart: SIGHUP and `POST /admin/reload` re-read the
//! config file and the environment and apply what can change while serving
//! (sources, secrets, targets, routes, rate caps, `[apis.*]`, reconciliation
//! settings, the log level, the TLS certificate files).
//!
//! A reload is all or nothing: the new config is loaded and checked whole
//! (and its certificate read) before anything changes; if anything is wrong
//! it is refused, logged and counted, and the loaded config keeps serving.
//! Applied, it is swapped in as one snapshot: a request in flight finishes
//! on the config it started with, the next one starts on the new one. Then
//! the target loops follow the new table (`deliver::fleet`) and the
//! reconciliation runners restart (a run in progress hands its lease back
//! and the next resumes from its checkpoint). Settings fixed at start
//! (listen addresses, storage URLs, the cache…) keep their running value
//! and are named in a "needs a restart" warning.
//!
//! Rule: one reload at a time, in the order asked (one task owns them);
//! a SIGHUP never ends the process.

use crate::config::Config;
use crate::deliver::fleet::Fleet;
use crate::state::{AppState, Live, ReloadOutcome, Reloaded};
use crate::{telemetry, tls};
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a reload changes besides the snapshot in `AppState`.
pub struct Reloader {
    pub state: AppState,
    pub fleet: Arc<Mutex<Fleet>>,
    pub reconcilers: Arc<Mutex<Reconcilers>>,
    /// The TLS listeners' certificate, when TLS is on.
    pub certs: Option<tls::Certs>,
}

impl Reloader {
    /// Re-reads the config file and the environment and applies them, or
    /// refuses and keeps the loaded config. Logged and counted either way.
    pub async fn reload(&self) -> ReloadOutcome {
        let outcome = self.apply().await;
        let recorded = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        self.state.reloads.record(&recorded);
        let label = if outcome.is_ok() {
            "applied"
        } else {
            "refused"
        };
        metrics::counter!("hookgate_config_reloads_total", "outcome" => label).increment(1);
        if let Err(e) = &outcome {
            tracing::error!(
                error = %e,
                digest = %self.state.config().digest,
                "config reload refused; the loaded config keeps serving"
            );
        }
        outcome
    }

    async fn apply(&self) -> ReloadOutcome {
        let running = self.state.config();
        if running.path.is_none() && running.origin.starts_with("(inline") {
            return Err("this config was not read from a file; there is nothing to re-read".into());
        }
        let mut new = Config::load(running.path.as_deref()).map_err(|e| e.to_string())?;
        let needs_restart = new.keep_restart_only(&running);
        // Everything that can refuse the reload runs before anything changes.
        let certs = match (&self.certs, &new.server.tls) {
            (Some(_), Some(t)) => Some(tls::server_config(t)?),
            _ => None,
        };
        telemetry::set_log_level(&new.server.log_level)
            .map_err(|e| format!("server.log_level: {e}"))?;
        if let (Some(c), Some(loaded)) = (&self.certs, certs) {
            c.store(loaded);
        }
        let new = Arc::new(new);
        self.state.counters.extend(
            new.sources
                .values()
                .map(|s| (s.name.as_str(), s.targets.as_slice())),
            new.apis.keys().map(String::as_str),
        );
        self.state.swap(Live::new(new.clone()));
        for w in &new.warnings {
            tracing::warn!("{w}");
        }
        for key in &needs_restart {
            tracing::warn!(
                setting = key,
                "config reload: `{key}` changed but needs a restart; the running value stays"
            );
        }
        let changes = self.fleet.lock().await.apply(&new.targets).await;
        self.reconcilers
            .lock()
            .await
            .restart(&self.state, &new)
            .await;
        if !changes.removed.is_empty() {
            self.report_removed(&changes.removed).await;
        }
        tracing::info!(
            digest = %new.digest,
            previous = %running.digest,
            sources = new.sources.len(),
            targets = new.targets.len(),
            added = ?changes.added,
            removed = ?changes.removed,
            changed = ?changes.changed,
            "config reloaded"
        );
        Ok(Reloaded {
            digest: new.digest.clone(),
            needs_restart: needs_restart.into_iter().map(str::to_owned).collect(),
        })
    }

    /// Names the removed targets whose deliveries stay pending: they are
    /// never dead-lettered, and are sent once the target is configured again
    /// (or can be inspected with `events list`).
    async fn report_removed(&self, removed: &[String]) {
        let Ok(backlog) = self.state.store.console.backlog().await else {
            return;
        };
        for b in backlog.iter().filter(|b| removed.contains(&b.target)) {
            if b.pending > 0 {
                tracing::warn!(
                    target = %b.target,
                    pending = b.pending,
                    "target removed from the config: its pending deliveries stay pending \
                     (not dead-lettered) until it is configured again"
                );
            }
        }
    }
}

/// Serves reloads until `stop`: each SIGHUP and each request from
/// `POST /admin/reload` (answered with the outcome), one at a time.
pub async fn run(
    reloader: Reloader,
    mut requests: mpsc::Receiver<oneshot::Sender<ReloadOutcome>>,
    mut hangup: Hangup,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            asked = requests.recv() => match asked {
                Some(answer) => {
                    let outcome = reloader.reload().await;
                    let _ = answer.send(outcome);
                }
                None => return,
            },
            () = hangup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                let _ = reloader.reload().await;
            }
            _ = stop.cancelled() => return,
        }
    }
}

/// SIGHUP, registered as early as possible: once registered the signal no
/// longer ends the process (its default action), whatever it arrives during.
pub struct Hangup(
    #[cfg(unix)] Option<tokio::signal::unix::Signal>,
    #[cfg(not(unix))] (),
);

impl Hangup {
    pub fn register() -> Self {
        #[cfg(unix)]
        {
            let s = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
            if let Err(e) = &s {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; reload with POST /admin/reload");
            }
            Self(s.ok())
        }
        #[cfg(not(unix))]
        Self(())
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(s) = &mut self.0
            && s.recv().await.is_some()
        {
            return;
        }
        std::future::pending::<()>().await
    }
}

/// The reconciliation runners, one per reconciled source; restarted whole
/// by a reload.
pub struct Reconcilers {
    tasks: JoinSet<()>,
    /// This generation's stop: a child of the process's.
    stop: CancellationToken,
    parent: CancellationToken,
}

impl Reconcilers {
    pub fn start(state: &AppState, config: &Arc<Config>, parent: CancellationToken) -> Self {
        let mut r = Self {
            tasks: JoinSet::new(),
            stop: parent.child_token(),
            parent,
        };
        r.spawn(state, config);
        r
    }

    fn spawn(&mut self, state: &AppState, config: &Arc<Config>) {
        for source in config.reconcile.keys() {
            let r = crate::reconcile::Reconciler {
                config: config.clone(),
                dedup: state.dedup.clone(),
                store: state.store.reconcile.clone(),
                wake: state.wake.clone(),
                client: crate::reconcile::Reconciler::http_client(),
                retry: Default::default(),
                stop: self.stop.clone(),
            };
            self.tasks.spawn(crate::reconcile::runner::run(
                r,
                source.clone(),
                self.stop.clone(),
            ));
        }
    }

    /// Stops the runners (a run in progress hands its lease back) and starts
    /// those of `config`.
    async fn restart(&mut self, state: &AppState, config: &Arc<Config>) {
        if self.tasks.is_empty() && config.reconcile.is_empty() {
            return;
        }
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        self.stop = self.parent.child_token();
        self.spawn(state, config);
    }

    /// Waits for the runners (after the process's stop was cancelled).
    pub async fn join(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}
