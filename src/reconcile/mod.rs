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
//! and are verified like any other request. Each resend the provider
//! accepted is recorded (`hookgate_resends`), and the run marks the events
//! it brings recovered afterwards ([`Reconciler::mark_resent`]), so ingest
//! pays nothing for it.
//!
//! A non-dry run holds its source's lease and renews it after every page
//! (and within a long page); a renewal that finds another owner stops the
//! run ([`ReconcileError::LeaseLost`]).
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
use crate::store::{ReconcileStore, StoreError};
use crate::verify::{EventId, Verified};
use api::{Api, Retry};
use bytes::Bytes;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a run owns its source without showing progress (renewed after
/// every page). A replica that died mid-run blocks the others this long.
pub const LEASE: Duration = Duration::from_secs(300);

/// Within a page, the lease is also renewed before recovering an event
/// once this much time has passed since the last renewal: a page of
/// resends, each call waiting out rate limits, can outlast [`LEASE`].
const RENEW_EVERY: Duration = Duration::from_secs(60);

/// How long a requested resend waits for its event to be marked recovered.
/// Providers send at once or retry for a while (GitHub redelivers once;
/// PayPal retries a failed delivery); the resends of these three days are
/// the most the table holds.
pub const RESEND_MARK_TTL: Duration = Duration::from_secs(3 * 24 * 3600);

/// After its resends, a run waits at most this long for them to arrive and
/// marks them; the ones still on their way are marked by a later run.
const RESEND_WAIT: Duration = Duration::from_secs(5);
const RESEND_POLL: Duration = Duration::from_millis(200);

/// One event (or delivery) the provider lists.
#[derive(Debug, Clone)]
pub struct Found {
    /// The id hookgate dedupes on (Stripe/PayPal event id, GitHub delivery GUID).
    pub event_id: String,
    /// Unix seconds, where the API says.
    pub created: Option<i64>,
    pub action: Action,
}

/// How a missing event is recovered.
#[derive(Debug, Clone)]
pub enum Action {
    /// The event object itself (Stripe) and its type: admitted through
    /// dedup.
    Admit(Bytes, Option<String>),
    /// Ask the provider to send it again; the value is the provider's handle
    /// (GitHub delivery id, PayPal event id).
    Resend(String),
}

impl Found {
    /// Created (or, for GitHub, delivered) after `cutoff`. An item without
    /// a time is never held back.
    fn is_younger_than(&self, cutoff: Millis) -> bool {
        self.created.is_some_and(|c| Millis::from_secs(c) > cutoff)
    }
}

/// Unix seconds of an RFC 3339 UTC time (`2024-01-02T03:04:05Z`, with or
/// without fractional seconds), as the GitHub and PayPal APIs write them.
fn unix_secs(text: &str) -> Option<i64> {
    Millis::parse_rfc3339(text).map(Millis::as_secs)
}

/// A page's items and the run's grace cutoff: items created after it are
/// left to the provider.
struct Settle {
    items: Vec<Found>,
    young: Millis,
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
    /// Recovered (dry run: would be), or resends the provider accepted
    /// (GitHub, PayPal: counted when asked, marked when they arrive).
    pub recovered: u64,
    /// Could not be recovered this run.
    pub failed: u64,
    /// Missing but younger than `grace`: left to the provider's own
    /// delivery; a later run recovers them if they never arrive.
    pub deferred: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("source `{0}` has no [sources.{0}.reconcile] table")]
    NotConfigured(String),
    #[error("another replica is reconciling this source right now")]
    Busy,
    #[error(
        "another replica took this source's lease over mid-run (this run did not renew it \
         in time); the run stopped so that only one replica reconciles the source"
    )]
    LeaseLost,
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

/// The lease a non-dry run holds, as it renews it.
struct Hold<'a> {
    source: &'a str,
    owner: &'a str,
    /// A scheduled run: a renewal after a page also stores the cursor.
    checkpoint: bool,
    /// The last renewal (or the start).
    renewed: Instant,
}

/// Everything a run needs; shared by the background runner and the CLI.
#[derive(Clone)]
pub struct Reconciler {
    pub config: Arc<Config>,
    pub dedup: Arc<Dedup>,
    /// Leases, checkpoints, statuses and resends (`store::reconcile`).
    pub store: Arc<dyn ReconcileStore>,
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
            self.walk(&rec, window_start, None, None, &mut report)
                .await?;
            return Ok(Some(report));
        }
        let owner = crate::primitives::token::random_hex();
        let lease = Lease {
            source,
            owner: &owner,
            now,
            until: now + LEASE,
            next_run_at: now + rec.interval,
            force: !opts.scheduled,
        };
        let store = &*self.store;
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
        let mut hold = Hold {
            source,
            owner: &owner,
            checkpoint: opts.scheduled,
            renewed: Instant::now(),
        };
        let cursor = resume.map(|c| c.cursor);
        let result = tokio::select! {
            r = self.pass(&rec, since, cursor, &mut hold, &mut report) => r,
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

    /// A leased run: marks the resends of earlier runs that have arrived,
    /// walks the window, then waits briefly for this run's resends.
    async fn pass(
        &self,
        rec: &Reconcile,
        since: Millis,
        cursor: Option<String>,
        hold: &mut Hold<'_>,
        report: &mut Report,
    ) -> Result<(), ReconcileError> {
        let resends = matches!(rec.kind, ApiKind::GitHub | ApiKind::PayPal);
        if resends {
            self.mark_resent(&rec.source, None).await?;
        }
        let started = Millis::now();
        self.walk(rec, since, cursor, Some(hold), report).await?;
        if resends && report.recovered > 0 {
            self.mark_resent(&rec.source, Some(started)).await?;
        }
        Ok(())
    }

    /// Marks recovered the events resends of `source` brought, and forgets
    /// the resends applied, moot or expired (`store::reconcile`). With
    /// `since` (this run's start), polls for up to [`RESEND_WAIT`] until
    /// every resend this run asked for has arrived.
    async fn mark_resent(&self, source: &str, since: Option<Millis>) -> Result<(), ReconcileError> {
        let store = &*self.store;
        let deadline = Instant::now() + RESEND_WAIT;
        let mut marked = 0;
        let waiting = loop {
            let now = Millis::now();
            let applied = store
                .apply_resends(source, now, since.unwrap_or(now))
                .await?;
            marked += applied.marked;
            if since.is_none() || applied.waiting == 0 || Instant::now() >= deadline {
                break applied.waiting;
            }
            tokio::time::sleep(RESEND_POLL).await;
        };
        if marked > 0 || waiting > 0 {
            tracing::info!(
                marked,
                waiting,
                "resent events marked recovered; the ones still on their way are marked by a later run"
            );
        }
        Ok(())
    }

    /// Extends the run's lease (a scheduled run's also stores `checkpoint`,
    /// the next page's cursor). Another owner: [`ReconcileError::LeaseLost`].
    async fn renew(
        &self,
        hold: &mut Hold<'_>,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), ReconcileError> {
        let store = &*self.store;
        let until = Millis::now() + LEASE;
        let held = match checkpoint {
            Some(c) if hold.checkpoint => {
                store
                    .save_cursor(hold.source, hold.owner, &c, until)
                    .await?
            }
            _ => store.renew(hold.source, hold.owner, until).await?,
        };
        if !held {
            return Err(ReconcileError::LeaseLost);
        }
        hold.renewed = Instant::now();
        Ok(())
    }

    /// Lists the window page by page from `cursor`, recovering what the
    /// ledger lacks. With `hold` (a non-dry run) the lease is renewed after
    /// each page and, for a scheduled run, the cursor stored, so a run cut
    /// short resumes after the last finished page. Without it (a dry run)
    /// nothing is written or resent.
    async fn walk(
        &self,
        rec: &Reconcile,
        since: Millis,
        mut cursor: Option<String>,
        mut hold: Option<&mut Hold<'_>>,
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
        // Fixed for the whole run, so every page is judged alike.
        let young = Millis::now() - rec.grace;
        loop {
            let after = cursor.as_deref();
            let page = match &session {
                Session::Key => stripe::page(&api, rec, since, after).await?,
                Session::GitHub(auth) => github::page(&api, rec, auth, since, after).await?,
                Session::PayPal(token) => {
                    paypal::page(&api, rec, token, since, young, after).await?
                }
            };
            let items = Settle {
                items: page.items,
                young,
            };
            self.settle(rec, &api, &session, items, hold.as_deref_mut(), report)
                .await?;
            cursor = page.next;
            if let Some(h) = hold.as_deref_mut() {
                let c = cursor.clone().map(|cursor| Checkpoint { since, cursor });
                self.renew(h, c).await?;
            }
            if cursor.is_none() {
                return Ok(());
            }
        }
    }

    /// Compares one page with the ledger and recovers the missing events
    /// older than the grace.
    async fn settle(
        &self,
        rec: &Reconcile,
        api: &Api,
        session: &Session,
        page: Settle,
        mut hold: Option<&mut Hold<'_>>,
        report: &mut Report,
    ) -> Result<(), ReconcileError> {
        let Settle { items, young } = page;
        let source = &rec.source;
        // One entry per id (GitHub lists every redelivery of a GUID).
        let mut seen = HashSet::new();
        let items: Vec<Found> = items
            .into_iter()
            .filter(|f| seen.insert(f.event_id.clone()))
            .collect();
        let ids: Vec<String> = items.iter().map(|f| f.event_id.clone()).collect();
        let known = self.store.known(source, &ids).await?;
        report.found += items.len() as u64;
        for item in items {
            if known.contains(&item.event_id) {
                report.already += 1;
                continue;
            }
            if item.is_younger_than(young) {
                // The provider may be delivering it right now. Nothing is
                // stored for it: the window start never moves past it (a
                // checkpoint keeps the run's `since`, and a new run starts
                // `lookback` back), so the next run lists it again.
                report.deferred += 1;
                continue;
            }
            let Some(h) = hold.as_deref_mut() else {
                // A dry run.
                report.recovered += 1;
                continue;
            };
            if h.renewed.elapsed() >= RENEW_EVERY {
                self.renew(h, None).await?;
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
            Action::Admit(body, event_type) => {
                self.admit(rec, item.event_id, event_type, item.created, body)
                    .await
            }
            Action::Resend(handle) => {
                // Taken before asking: an event received earlier came by
                // itself and is never marked recovered.
                let requested_at = Millis::now();
                match session {
                    Session::GitHub(auth) => github::redeliver(api, rec, auth, &handle).await?,
                    Session::PayPal(token) => {
                        let source = self.config.sources.get(&rec.source).map(|s| &**s);
                        paypal::resend(api, rec, source, token, &handle).await?;
                    }
                    Session::Key => {}
                }
                // Accepted: the event it brings is marked recovered later
                // (`mark_resent`), off the ingest path.
                self.store
                    .resend_requested(
                        &rec.source,
                        &item.event_id,
                        requested_at,
                        requested_at + RESEND_MARK_TTL,
                    )
                    .await?;
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
