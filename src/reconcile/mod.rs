//! Reconciliation: ask each configured provider's API which events it has,
//! and recover the ones the ledger never received (docs/operations.md,
//! "Reconciliation").
//!
//! Rule: recovery goes through the same gates as a webhook. Stripe events
//! read from `GET /v1/events` become a [`Verified`] through the one narrow
//! constructor for API-read events and are admitted by
//! [`Dedup::admit`](crate::dedup::Dedup::admit), so a webhook racing its
//! recovered copy still yields one `new`. GitHub and PayPal are asked to
//! send the missing ones again; those arrive signed at `POST /webhooks/…`
//! and are verified like any other request.
//!
//! Layering: beside `ingest`, above `dedup`, `deliver`, `store` and
//! `config`; nothing below imports it.

pub mod api;
pub mod github;
pub mod github_app;
pub mod paypal;
pub mod runner;
pub mod stripe;

use crate::config::Config;
use crate::config::reconcile::{ApiKind, Reconcile};
use crate::dedup::{self, Dedup};
use crate::deliver::Wake;
use crate::primitives::time::Millis;
use crate::store::reconcile::{Checkpoint, Finish, Lease};
use crate::store::{Ledger, StoreError};
use crate::verify::{EventId, Verified};
use api::{Api, Retry};
use bytes::Bytes;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a run owns its source without showing progress (renewed after
/// every page). A replica that died mid-run blocks the others this long.
pub const LEASE: Duration = Duration::from_secs(300);

/// One event (or delivery) the provider lists.
#[derive(Debug, Clone)]
pub struct Found {
    /// The id hookgate dedupes on (Stripe/PayPal event id, GitHub delivery GUID).
    pub event_id: String,
    pub event_type: Option<String>,
    /// Unix seconds, where the API says.
    pub created: Option<i64>,
    pub action: Action,
}

/// How a missing event is recovered.
#[derive(Debug, Clone)]
pub enum Action {
    /// The event object itself (Stripe): admitted through dedup.
    Admit(Bytes),
    /// Ask the provider to send it again; the value is the provider's handle
    /// (GitHub delivery id, PayPal event id).
    Resend(String),
}

/// One page of a provider's list, and the cursor of the next one.
#[derive(Debug, Default)]
pub struct Page {
    pub items: Vec<Found>,
    pub next: Option<String>,
}

/// What a run found, in the CLI's columns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Listed by the provider in the window.
    pub found: u64,
    /// Already in the ledger (or arrived while we recovered it).
    pub already: u64,
    /// Recovered (dry run: would be), or resent by the provider on request.
    pub recovered: u64,
    /// Could not be recovered this run.
    pub failed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("source `{0}` has no [sources.{0}.reconcile] table")]
    NotConfigured(String),
    #[error("another replica is reconciling this source right now")]
    Busy,
    #[error(
        "the {api} API refused the credential (HTTP {status}): check `reconcile.api_key` \
         (it must be valid and allowed to read events)"
    )]
    Credential { api: &'static str, status: u16 },
    #[error("the {api} API answered HTTP {status} to `{what}`")]
    Status {
        api: &'static str,
        what: &'static str,
        status: u16,
    },
    #[error(
        "the {api} API is rate limiting `{what}` for {wait_s} s, longer than a run waits; \
         the next run resumes from the checkpoint"
    )]
    RateLimited {
        api: &'static str,
        what: &'static str,
        wait_s: u64,
    },
    #[error("the {api} API could not be read (`{what}`): {why}")]
    Unreachable {
        api: &'static str,
        what: &'static str,
        why: &'static str,
    },
    #[error("the {api} API answered `{what}` with a body that is not the documented shape")]
    BadResponse {
        api: &'static str,
        what: &'static str,
    },
    #[error("the GitHub App's JWT could not be signed with `reconcile.api_key`")]
    AppJwt,
    #[error("stopped by shutdown")]
    Stopped,
    #[error("ledger unavailable: {0}")]
    Store(#[from] StoreError),
}

/// How a run authenticates beyond what the config holds.
enum Session {
    /// Stripe: the configured key on every call.
    Key,
    /// GitHub: the configured token, or an App's JWT minted as the run goes.
    GitHub(github::Auth),
    /// PayPal: the OAuth token taken at the run's start.
    PayPal(String),
}

/// How one run is made.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// The window, back from now.
    pub window: Duration,
    /// List and compare only: nothing is written, resent or leased.
    pub dry_run: bool,
    /// A scheduled run: due only once per interval, resumes an unfinished
    /// run's checkpoint and saves its own. The CLI runs unscheduled (it still
    /// takes the lease, so it never overlaps a replica's run).
    pub scheduled: bool,
}

/// Everything a run needs; shared by the background runner and the CLI.
#[derive(Clone)]
pub struct Reconciler {
    pub config: Arc<Config>,
    pub dedup: Arc<Dedup>,
    pub ledger: Arc<dyn Ledger>,
    pub wake: Wake,
    pub client: reqwest::Client,
    pub retry: Retry,
    /// Shutdown: a run stops between calls and hands its lease back.
    pub stop: CancellationToken,
}

impl Reconciler {
    /// A client for provider APIs: no redirects (a redirect could carry the
    /// credential elsewhere), bounded per-call time.
    pub fn http_client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default()
    }

    /// Runs `source` once. `Ok(None)`: not due, or another replica holds it
    /// (scheduled runs only).
    #[tracing::instrument(skip(self, opts))]
    pub async fn run(
        &self,
        source: &str,
        opts: RunOptions,
    ) -> Result<Option<Report>, ReconcileError> {
        let rec = self
            .config
            .reconcile
            .get(source)
            .ok_or_else(|| ReconcileError::NotConfigured(source.to_owned()))?
            .clone();
        let now = Millis::now();
        let window_start = now - opts.window;
        if opts.dry_run {
            let mut report = Report::default();
            self.walk(&rec, window_start, None, true, None, &mut report)
                .await?;
            return Ok(Some(report));
        }
        let owner = format!("{:032x}", rand::random::<u128>());
        let lease = Lease {
            source,
            owner: &owner,
            now,
            until: now + LEASE,
            next_run_at: now + rec.interval,
            force: !opts.scheduled,
        };
        let store = self.ledger.reconcile();
        let checkpoint = match store.start(&lease).await? {
            Some(c) => c,
            None if opts.scheduled => return Ok(None),
            None => return Err(ReconcileError::Busy),
        };
        let resume = checkpoint.filter(|_| opts.scheduled);
        let since = resume.as_ref().map_or(window_start, |c| c.since);
        if let Some(c) = &resume {
            tracing::info!(
                cursor = c.cursor,
                "resuming an unfinished reconciliation run"
            );
        }
        let mut report = Report::default();
        let save = opts.scheduled.then_some(owner.as_str());
        let result = tokio::select! {
            r = self.walk(&rec, since, resume.map(|c| c.cursor), false, save, &mut report) => r,
            _ = self.stop.cancelled() => Err(ReconcileError::Stopped),
        };
        let recovered = i64::try_from(report.recovered).unwrap_or(i64::MAX);
        if matches!(result, Err(ReconcileError::Stopped)) {
            store
                .release(source, &owner, Millis::now(), recovered)
                .await?;
            return Ok(None);
        }
        let error = result.as_ref().err().map(ToString::to_string);
        store
            .finish(&Finish {
                source,
                owner: &owner,
                now: Millis::now(),
                recovered,
                error: error.as_deref(),
                checkpointed: opts.scheduled,
            })
            .await?;
        metrics::counter!("hookgate_reconcile_recovered_total", "source" => source.to_owned())
            .increment(report.recovered);
        result.map(|()| Some(report))
    }

    /// Lists the window page by page from `cursor`, recovering what the
    /// ledger lacks. With `save`, the cursor is stored after each page so a
    /// run cut short resumes after the last finished page.
    async fn walk(
        &self,
        rec: &Reconcile,
        since: Millis,
        mut cursor: Option<String>,
        dry_run: bool,
        save: Option<&str>,
        report: &mut Report,
    ) -> Result<(), ReconcileError> {
        let api = Api {
            client: self.client.clone(),
            kind: rec.kind,
            retry: self.retry,
        };
        let session = match rec.kind {
            ApiKind::Stripe => Session::Key,
            ApiKind::GitHub => Session::GitHub(github::Auth::of(rec)),
            ApiKind::PayPal => Session::PayPal(paypal::token(&api, rec).await?),
        };
        loop {
            let after = cursor.as_deref();
            let page = match &session {
                Session::Key => stripe::page(&api, rec, since, after).await?,
                Session::GitHub(auth) => github::page(&api, rec, auth, since, after).await?,
                Session::PayPal(token) => paypal::page(&api, rec, token, since, after).await?,
            };
            self.settle(rec, &api, &session, page.items, dry_run, report)
                .await?;
            cursor = page.next;
            let Some(next) = &cursor else {
                return Ok(());
            };
            if let Some(owner) = save {
                let c = Checkpoint {
                    since,
                    cursor: next.clone(),
                };
                self.ledger
                    .reconcile()
                    .save_cursor(&rec.source, owner, &c, Millis::now() + LEASE)
                    .await?;
            }
        }
    }

    /// Compares one page with the ledger and recovers the missing events.
    async fn settle(
        &self,
        rec: &Reconcile,
        api: &Api,
        session: &Session,
        items: Vec<Found>,
        dry_run: bool,
        report: &mut Report,
    ) -> Result<(), ReconcileError> {
        let source = &rec.source;
        // One entry per id (GitHub lists every redelivery of a GUID).
        let mut seen = HashSet::new();
        let items: Vec<Found> = items
            .into_iter()
            .filter(|f| seen.insert(f.event_id.clone()))
            .collect();
        let ids: Vec<String> = items.iter().map(|f| f.event_id.clone()).collect();
        let known = self.ledger.reconcile().known(source, &ids).await?;
        report.found += items.len() as u64;
        for item in items {
            if known.contains(&item.event_id) {
                report.already += 1;
                continue;
            }
            if dry_run {
                report.recovered += 1;
                continue;
            }
            match self.recover(rec, api, session, item).await {
                Ok(true) => report.recovered += 1,
                Ok(false) => report.already += 1,
                Err(e) => {
                    report.failed += 1;
                    // A credential refused (or an App JWT unsigned) mid-run
                    // fails every later call too.
                    if matches!(
                        e,
                        ReconcileError::Credential { .. }
                            | ReconcileError::AppJwt
                            | ReconcileError::Store(_)
                    ) {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "event not recovered; the next run tries again");
                }
            }
        }
        Ok(())
    }

    /// Recovers one missing event. `Ok(false)`: it arrived meanwhile.
    async fn recover(
        &self,
        rec: &Reconcile,
        api: &Api,
        session: &Session,
        item: Found,
    ) -> Result<bool, ReconcileError> {
        match item.action {
            Action::Admit(body) => {
                self.admit(rec, item.event_id, item.event_type, item.created, body)
                    .await
            }
            Action::Resend(handle) => {
                match session {
                    Session::GitHub(auth) => github::redeliver(api, rec, auth, &handle).await?,
                    Session::PayPal(token) => {
                        let source = self.config.sources.get(&rec.source).map(|s| &**s);
                        paypal::resend(api, rec, source, token, &handle).await?;
                    }
                    Session::Key => {}
                }
                tracing::info!(
                    event.id = item.event_id,
                    "asked the provider to send a missing event again"
                );
                Ok(true)
            }
        }
    }

    async fn admit(
        &self,
        rec: &Reconcile,
        event_id: String,
        event_type: Option<String>,
        created: Option<i64>,
        body: Bytes,
    ) -> Result<bool, ReconcileError> {
        let Some(source) = self.config.sources.get(&rec.source) else {
            return Err(ReconcileError::NotConfigured(rec.source.clone()));
        };
        let bad = |_| ReconcileError::BadResponse {
            api: rec.kind.as_str(),
            what: "event id",
        };
        let id = EventId::parse(&event_id).map_err(bad)?;
        let v = Verified::from_provider_api(source, id, body, event_type, created);
        let cache_ttl = self.config.cache_ttl(source);
        match self.dedup.admit(v, cache_ttl, Millis::now()).await {
            Ok(dedup::Outcome::New { .. }) => {
                if !source.targets.is_empty() {
                    self.wake.notify(&source.targets);
                }
                tracing::info!(
                    event.id = event_id,
                    "recovered an event the provider had and we never received"
                );
                Ok(true)
            }
            Ok(dedup::Outcome::Duplicate { .. }) => Ok(false),
            Err(dedup::DedupError::InFlight) => Ok(false),
            Err(dedup::DedupError::Unavailable(e)) => Err(ReconcileError::Store(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    /// `Verified::from_provider_api` skips signature checks: only this
    /// module may call it, never a request handler.
    #[test]
    fn request_handlers_never_build_an_api_read_event() {
        for (file, text) in [
            ("ingest/mod.rs", include_str!("../ingest/mod.rs")),
            (
                "ingest/challenge.rs",
                include_str!("../ingest/challenge.rs"),
            ),
            ("proxy/mod.rs", include_str!("../proxy/mod.rs")),
            ("admin/events.rs", include_str!("../admin/events.rs")),
        ] {
            assert!(!text.contains("from_provider_api"), "{file}");
        }
    }
}
