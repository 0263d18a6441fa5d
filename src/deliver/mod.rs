//! Deliver: outbox workers that forward every committed event to its targets.
//!
//! One loop per target, so a slow or dead target only ever uses its own
//! `concurrency` slots (and never more of the global `max_in_flight`).
//! Rows are leased (`lease_until` + token) for a short `delivery.lease`,
//! renewed by a heartbeat while held ([`lease`]): a worker that dies loses
//! its leases within one lease and another worker takes the rows; a worker
//! that cannot renew stops sending before that. A commit wakes
//! the target's loop at once (local `Notify`, Postgres NOTIFY for other
//! replicas); `poll_interval` is only the fallback.
//!
//! Rule: what is sent, and how, is the target kind's (`target/`); this
//! module decides when and how often, and records what became of it.

pub mod fleet;
pub mod health;
pub mod lanes;
pub mod lease;
pub mod limit;
mod rate;
mod record;
pub mod retry;

use crate::config::{self, Config};
use crate::primitives::time::Millis;
use crate::stats::{AttemptClass, Counters, DeliveryOutcome, Failure};
use crate::store::{AttemptRecord, DueDelivery, LeaseRequest, NextState, Outbox, StoreError};
use crate::target::{Event, Sent, Sink, Target};
use lanes::{Handed, Lanes};
use lease::{LeaseGuard, Leases};
use record::Recorder;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Wakes target loops; cheap to clone.
#[derive(Clone, Default)]
pub struct Wake(Option<Lanes>);

impl Wake {
    /// The loops' wake-ups live on their hand-off lanes: the event writer
    /// wakes a lane when it commits a row the lane did not take. Looked up
    /// per wake, so a target a reload added is woken too.
    pub fn new(lanes: &Lanes) -> Self {
        Self(Some(lanes.clone()))
    }

    /// Wakes the loops of `targets`. A wake with nobody waiting is kept
    /// (Notify stores one permit), so none is lost between poll and sleep.
    pub fn notify<S: AsRef<str>>(&self, targets: &[S]) {
        if let Some(l) = &self.0 {
            l.notify(targets);
        }
    }

    pub fn notify_all(&self) {
        if let Some(l) = &self.0 {
            l.notify_all();
        }
    }
}

/// Everything a target loop needs.
struct Ctx {
    outbox: Arc<dyn Outbox>,
    recorder: Recorder,
    client: reqwest::Client,
    settings: config::Delivery,
    counters: Arc<Counters>,
    global: Arc<Semaphore>,
    /// This process's lease token: identifies our leases for release.
    token: String,
    /// The rows this process holds, renewed by the heartbeat.
    leases: Leases,
    grace: Duration,
    /// Per-target health (`/stats`, the failing/recovered log lines).
    health: health::Health,
    /// Attempt spans, when tracing is on.
    traces: Option<Arc<crate::traces::Traces>>,
}

impl Ctx {
    /// A claim of up to `limit` rows of `target`, leased from now. Take the
    /// claim's `Instant` before this (the rows' local deadline counts from it).
    fn lease<'a>(&'a self, target: &'a str, limit: i64) -> LeaseRequest<'a> {
        let now = Millis::now();
        LeaseRequest {
            target,
            token: &self.token,
            now,
            until: now + self.leases.lease(),
            limit,
        }
    }
}

/// Consecutive failed attempts after which a target counts as down: its
/// next success makes its retrying backlog due at once ([`Outbox::expedite`]).
/// One failing event among successes never counts, so a poison event keeps
/// its backoff.
const DOWN_AFTER: u32 = 3;

/// Largest claim in one query.
const MAX_CLAIM: usize = 512;

/// One target's loop state shared with its attempts.
struct TargetCtx {
    target: Arc<Target>,
    /// HTTP client or broker connection (the target's kind in `target/`).
    sink: Sink,
    wake: Arc<Notify>,
    /// Failed attempts since the last success.
    failures: AtomicU32,
    /// When the target last came back (unix ms; 0: never), set before its
    /// retries are expedited (see [`after_recorded`]).
    recovered_at: std::sync::atomic::AtomicI64,
    /// Metric handles, built once (no label allocation per attempt).
    delivered: metrics::Counter,
    retried: metrics::Counter,
    dead: metrics::Counter,
    duration: metrics::Histogram,
    /// Rows that came by hand-off (no claim query).
    handed: metrics::Counter,
    /// `hookgate_delivery_attempt_results_total{target, class}`, indexed
    /// by `AttemptClass as usize`.
    results: [metrics::Counter; AttemptClass::ALL.len()],
    /// `rate`: tokens for the loop's claims and for the next row of an
    /// ordering key (shared: both lease rows to send).
    bucket: Option<rate::TargetBucket>,
    /// The target's in-flight slots: `concurrency`, fixed or adaptive.
    limit: Arc<limit::Limit>,
}

impl TargetCtx {
    /// Counts an attempt that went to `next` in the metrics and in the
    /// target's run of failures. `true` when it is a success after enough
    /// failures to call the target down: its retries are then expedited,
    /// once this attempt is recorded (so the failed attempts recorded
    /// before it are committed, and `expedite` sees them as retrying).
    fn count(&self, next: NextState, latency_ms: i64) -> bool {
        let counter = match next {
            NextState::Delivered => &self.delivered,
            NextState::RetryAt(_) => &self.retried,
            NextState::Dead => &self.dead,
        };
        counter.increment(1);
        self.duration.record(latency_ms as f64 / 1000.0);
        if next == NextState::Delivered {
            self.failures.swap(0, Ordering::Relaxed) >= DOWN_AFTER
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    fn new(target: Arc<Target>, wake: Arc<Notify>, http: &reqwest::Client) -> Self {
        let counter = |outcome: &'static str| {
            metrics::counter!("hookgate_delivery_attempts_total",
                "target" => target.name.clone(), "outcome" => outcome)
        };
        Self {
            delivered: counter("delivered"),
            retried: counter("retry"),
            dead: counter("dead"),
            duration: metrics::histogram!("hookgate_delivery_duration_seconds",
                "target" => target.name.clone()),
            handed: metrics::counter!("hookgate_delivery_handoffs_total",
                "target" => target.name.clone()),
            results: AttemptClass::ALL.map(|c| {
                metrics::counter!(
                "hookgate_delivery_attempt_results_total",
                "target" => target.name.clone(), "class" => c.as_str())
            }),
            failures: AtomicU32::new(0),
            recovered_at: std::sync::atomic::AtomicI64::new(0),
            bucket: target.rate.map(rate::TargetBucket::new),
            limit: limit::Limit::new(
                target.concurrency,
                target.adaptive,
                metrics::gauge!("hookgate_delivery_concurrency_limit",
                    "target" => target.name.clone()),
            ),
            sink: target.kind.sink(http),
            target,
            wake,
        }
    }
}

/// Starts one loop per target; they stop claiming when `stop` is cancelled,
/// finish in-flight attempts within `grace`, and release their leases.
pub fn start(
    config: &Config,
    outbox: Arc<dyn Outbox>,
    counters: Arc<Counters>,
    lanes: Lanes,
    health: health::Health,
    traces: Option<Arc<crate::traces::Traces>>,
    stop: CancellationToken,
) -> fleet::Fleet {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(crate::target::http::USER_AGENT)
        .tcp_nodelay(true)
        .build()
        .expect("HTTP client with default TLS");
    let token = lanes.token().to_owned();
    let leases = lanes.leases().clone();
    let heartbeat = CancellationToken::new();
    let renewing = tokio::spawn(lease::heartbeat(
        leases.clone(),
        outbox.clone(),
        token.clone(),
        heartbeat.clone(),
    ));
    let ctx = Arc::new(Ctx {
        leases,
        recorder: Recorder::start(outbox.clone(), token.clone()),
        outbox,
        client,
        settings: config.delivery.clone(),
        counters,
        global: Arc::new(Semaphore::new(config.delivery.max_in_flight)),
        token,
        grace: config.server.shutdown_grace,
        health,
        traces,
    });
    let mut fleet = fleet::Fleet::new(Some(ctx), lanes, stop);
    fleet.renewing(heartbeat, renewing);
    for target in config.targets.values() {
        fleet.spawn(target.clone());
    }
    fleet
}

/// A target's hand-off lane: rows committed by this process, already leased.
struct Lane {
    rx: Option<tokio::sync::mpsc::Receiver<Handed>>,
    lanes: Lanes,
}

impl Lane {
    async fn next(&mut self) -> Option<Handed> {
        match self.rx.as_mut() {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }

    /// No more hand-offs: rows still queued on the lane keep their lease
    /// and are released with the rest when the loop ends.
    fn close(&mut self, target: &str) {
        self.lanes.close(target);
        if let Some(rx) = self.rx.as_mut() {
            rx.close();
            while rx.try_recv().is_ok() {}
        }
    }
}

/// Claims due rows in batches: while a backlog is waiting, a claim is made
/// once a quarter of the target's slots are free (or nothing is in flight),
/// so draining costs one claim query per `concurrency / 4` deliveries, not
/// one per delivery. New commits are claimed at once into any free slot.
async fn target_loop(ctx: Arc<Ctx>, t: Arc<TargetCtx>, mut lane: Lane, stop: CancellationToken) {
    let mut claims = Claims::new();
    while !stop.is_cancelled() {
        let throttled = match claims.round(&ctx, &t, &stop).await {
            Round::ClaimAgain => continue,
            Round::Wait { throttled } => throttled,
        };
        tokio::select! {
            handed = lane.next() => match handed {
                Some(handed) => claims.spawn_handed(&ctx, &t, handed).await,
                None => lane.rx = None,
            },
            _ = t.wake.notified() => claims.more = true,
            _ = tokio::time::sleep(throttled.unwrap_or_default()), if throttled.is_some() => {}
            _ = tokio::time::sleep(ctx.settings.poll_interval) => claims.more = true,
            _ = claims.inflight.join_next(), if !claims.inflight.is_empty() => {}
            _ = stop.cancelled() => {}
        }
    }
    lane.close(&t.target.name);
    finish(&ctx, &t, claims.inflight).await;
}

/// A target loop's claims and the attempts they started.
struct Claims {
    inflight: JoinSet<()>,
    /// The last claim failed (logged once, until claims work again).
    failing: bool,
    /// More rows may be due than we have claimed so far.
    more: bool,
    /// The last claim filled every free slot: a backlog is waiting, so claim
    /// in batches rather than one row per freed slot.
    backlog: bool,
    /// `order_by`: the last key leased; the next claim visits the keys
    /// after it first (round-robin over keys).
    order_cursor: String,
}

/// What the loop does after a claim round.
enum Round {
    /// The claim filled every free slot: claim again at once.
    ClaimAgain,
    /// Wait for a hand-off, a wake-up, a finished attempt or the poll
    /// interval; `throttled`: a rate-capped target's bucket refills then.
    Wait { throttled: Option<Duration> },
}

impl Claims {
    fn new() -> Self {
        Self {
            inflight: JoinSet::new(),
            failing: false,
            more: true,
            backlog: false,
            order_cursor: String::new(),
        }
    }

    /// Claims as many due rows as there are free slots (and, with `rate`,
    /// tokens), and starts their attempts.
    async fn round(
        &mut self,
        ctx: &Arc<Ctx>,
        t: &Arc<TargetCtx>,
        stop: &CancellationToken,
    ) -> Round {
        let mut free = t
            .limit
            .available()
            .min(ctx.global.available_permits())
            .min(MAX_CLAIM);
        // Free slots that make a claim worth its query while a backlog waits.
        let threshold = (t.limit.current() / 4).max(1);
        let wants = self.more
            && free > 0
            && (!self.backlog || free >= threshold || self.inflight.is_empty());
        let mut throttled = None;
        // `rate`: only as many rows are claimed as may be sent now.
        if wants && let Some(b) = &t.bucket {
            (free, throttled) = b.take(free, &*ctx.outbox, &t.target.name).await;
        }
        if !wants || free == 0 {
            return Round::Wait { throttled };
        }
        let taken = Instant::now();
        match self.claim(ctx, t, free).await {
            Ok(rows) => {
                if self.failing {
                    self.failing = false;
                    tracing::info!(target = %t.target.name, "delivery claims work again");
                }
                self.more = rows.len() == free;
                self.backlog = self.more;
                if let Some(b) = &t.bucket {
                    b.give_back(free - rows.len());
                }
                for row in rows {
                    let lease = ctx.leases.hold(row.id, taken);
                    self.spawn_claimed(ctx, t, (row, lease), stop).await;
                }
                if self.more {
                    return Round::ClaimAgain;
                }
            }
            Err(e) => {
                if let Some(b) = &t.bucket {
                    b.give_back(free);
                }
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(target = %t.target.name, error = %e, "cannot claim deliveries");
                }
            }
        }
        Round::Wait { throttled }
    }

    /// Up to `limit` due rows. An ordered target has its own claim (one
    /// row per key at a time); every other target keeps the plain one.
    async fn claim(
        &mut self,
        ctx: &Ctx,
        t: &TargetCtx,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let lease = ctx.lease(&t.target.name, limit as i64);
        if t.target.order_by.is_none() {
            return ctx.outbox.claim_due(&lease).await;
        }
        let (rows, last) = ctx
            .outbox
            .claim_due_ordered(&lease, &self.order_cursor)
            .await?;
        if let Some(k) = last {
            self.order_cursor = k;
        }
        Ok(rows)
    }

    /// Starts a claimed row's attempt once a slot is free. On an ordered
    /// target the slot stays with the row's key, whose next row goes in it
    /// once this one is recorded.
    async fn spawn_claimed(
        &mut self,
        ctx: &Arc<Ctx>,
        t: &Arc<TargetCtx>,
        row: (DueDelivery, LeaseGuard),
        stop: &CancellationToken,
    ) {
        let local = t.limit.acquire().await;
        let global = ctx.global.clone().acquire_owned().await;
        let (ctx, t, stop) = (ctx.clone(), t.clone(), stop.clone());
        // Boxed (see `spawn_handed`).
        self.inflight.spawn(Box::pin(async move {
            let _global = global;
            if t.target.order_by.is_none() {
                attempt(&ctx, &t, row, Sending::slot(local)).await;
                return;
            }
            let _local = local;
            let mut next = Some(row);
            while let Some(row) = next.take() {
                let freed = attempt(&ctx, &t, row, Sending::default()).await;
                if let Some(key) = freed
                    && !stop.is_cancelled()
                {
                    next = successor(&ctx, &t, &key).await;
                }
            }
        }));
    }

    /// Starts a hand-off's attempt: leased at commit, no claim needed.
    async fn spawn_handed(&mut self, ctx: &Arc<Ctx>, t: &Arc<TargetCtx>, handed: Handed) {
        let local = t.limit.acquire().await;
        let global = ctx.global.clone().acquire_owned().await;
        // The heartbeat renewed the row while it waited for a slot; if it
        // could not, the row is no longer ours to send: it is left to
        // expire and be claimed, never attempted twice at once.
        if !handed.lease.valid() {
            return;
        }
        t.handed.increment(1);
        let (ctx, t) = (ctx.clone(), t.clone());
        // Boxed: a task's future is copied when it is spawned, when its
        // output replaces it and when that output is read; a box makes each
        // of those a pointer's copy, not the attempt's few kilobytes.
        self.inflight.spawn(Box::pin(async move {
            let _global = global;
            let Handed { row, lease, slot } = handed;
            let sending = Sending {
                _lane: Some(slot),
                ..Sending::slot(local)
            };
            attempt(&ctx, &t, (row, lease), sending).await;
        }));
    }
}

/// Graceful: finish what is in flight within the grace period; whatever
/// is cut off keeps its lease token and is released here: only this
/// target's leases, since other targets' loops may still be recording
/// attempts under the same process token.
async fn finish(ctx: &Ctx, t: &TargetCtx, mut inflight: JoinSet<()>) {
    let drained = tokio::time::timeout(ctx.grace, async {
        while inflight.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        inflight.abort_all();
    }
    match ctx.outbox.release_leases(&ctx.token, &t.target.name).await {
        Ok(n) if n > 0 => {
            tracing::info!(target = %t.target.name, released = n, "released delivery leases")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not release leases; they expire by themselves"),
    }
}

/// One attempt: send (HTTP or broker), classify, record (group-committed
/// with other attempts). Returns the row's ordering key when the row left
/// `pending` (delivered or dead) on an ordered target: its key's next row
/// may go now. The row is held (its lease renewed) until the record
/// commits; the send is abandoned if the lease can no longer be vouched for.
#[tracing::instrument(skip_all, fields(target = %t.target.name, source = %held.0.source, event.id = %held.0.event_id))]
async fn attempt(
    ctx: &Ctx,
    t: &TargetCtx,
    held: (DueDelivery, LeaseGuard),
    sending: Sending,
) -> Option<String> {
    let (row, lease) = held;
    let number = row.attempts + 1;
    // What the target and the log see: numbers go on after a replay, which
    // restarts only the retry budget (`number`).
    let shown = row.earlier_attempts + number;
    let started_at = Millis::now();
    let t0 = Instant::now();
    // `biased`: the lease is checked before the send is polled, at every
    // wake-up, so a process resumed after a pause abandons the send before
    // it can write another byte of it (deliver::lease).
    let sent = tokio::select! {
        biased;
        _ = lease.lost() => None,
        sent = send(t, &row, shown, started_at, ctx.traces.as_deref()) => Some(sent),
    };
    let Some((sent, traced)) = sent else {
        tracing::warn!(
            attempt = shown,
            "delivery lease could not be renewed in time: attempt abandoned, the row goes to \
             whichever worker takes it next"
        );
        metrics::counter!("hookgate_delivery_leases_lost_total", "target" => t.target.name.clone())
            .increment(1);
        return None;
    };
    let took = t0.elapsed();
    let latency_ms = took.as_millis() as i64;
    t.limit.sample(limit::signal(&sent), t0, took);
    // The target has answered: its slot may take the next row while this
    // one waits for its group commit.
    drop(sending);
    t.results[class(&sent) as usize].increment(1);

    let (rec, failure) = outcome(&t.target, &row, number, sent, started_at, latency_ms);
    if let Some(span) = traced {
        span.end(rec.status, rec.error.as_deref(), rec.next);
    }
    ctx.health
        .record(&t.target.name, rec.error.as_deref(), Millis::now());
    let recovered = t.count(rec.next, latency_ms);
    let recorded = record(ctx, row.id, &rec, shown).await;
    // Recorded (or given up): the row needs no more renewals.
    drop(lease);
    if !recorded {
        return None;
    }
    ctx.counters
        .delivery(&row.source, &t.target.name, counted(rec.next), latency_ms);
    after_recorded(ctx, t, &rec, recovered).await;
    if rec.next == NextState::Dead {
        let reason = retry::dead_reason(&t.target.retry, row.received_at, Millis::now(), &failure);
        tracing::warn!(
            attempt = shown,
            error = rec.error.as_deref().unwrap_or(""),
            reason,
            "delivery dead"
        );
    } else {
        let outcome = label(rec.next);
        tracing::debug!(attempt = shown, outcome, latency_ms, "delivery attempt");
    }
    // Ordered target: a delivered or dead row frees its key.
    match rec.next {
        NextState::RetryAt(_) => None,
        _ => row.order_key.filter(|_| t.target.order_by.is_some()),
    }
}

/// The attempt's class for `hookgate_delivery_attempt_results_total`.
fn class(sent: &Sent) -> AttemptClass {
    let (status, error) = match sent {
        Sent::Delivered { status } => (*status, None),
        Sent::Retry { status, error, .. } | Sent::Permanent { status, error } => {
            (*status, Some(error.as_str()))
        }
    };
    let failure = error.map(|e| match e {
        crate::target::http::TIMEOUT => Failure::Timeout,
        crate::target::http::CONNECT_FAILED => Failure::Connect,
        _ => Failure::Other,
    });
    AttemptClass::of(status, failure)
}

/// Sends `row` as attempt `number` (as the target sees it) through the
/// target's sink; with tracing on, as a span that the message carries.
async fn send(
    t: &TargetCtx,
    row: &DueDelivery,
    number: i32,
    started_at: Millis,
    traces: Option<&crate::traces::Traces>,
) -> (Sent, Option<crate::traces::attempt::Attempt>) {
    let event = Event {
        source: &row.source,
        event_id: &row.event_id,
        event_type: row.event_type.as_deref(),
        body: &row.body,
        headers: &row.headers,
    };
    let mut message = t.target.message(event, number, started_at.as_secs());
    let traced = traces.map(|tr| tr.attempt(&t.target, &message, number));
    if let Some(a) = &traced {
        message.trace = a.headers();
    }
    let sent = t.sink.send(&t.target.endpoint(), &message).await;
    (sent, traced)
}

/// The attempt as recorded: where the row goes next (delivered; else as
/// `retry` decides: dead when no retry can succeed, on a permanent status
/// or after the target's retry window; else a retry after backoff or the
/// target's `Retry-After`), with the failure it judged.
fn outcome(
    target: &Target,
    row: &DueDelivery,
    number: i32,
    sent: Sent,
    started_at: Millis,
    latency_ms: i64,
) -> (AttemptRecord, retry::Failure) {
    let (status, error, retry_after, permanent) = match sent {
        Sent::Delivered { status } => (status, None, None, false),
        Sent::Retry {
            status,
            error,
            retry_after,
        } => (status, Some(error), retry_after, false),
        Sent::Permanent { status, error } => (status, Some(error), None, true),
    };
    let failure = retry::Failure {
        number: number as u32,
        status,
        retry_after,
        permanent,
    };
    let next = if error.is_none() {
        NextState::Delivered
    } else {
        retry::after_failure(
            &target.retry,
            row.received_at,
            Millis::now(),
            &failure,
            rand::random::<f64>(),
        )
    };
    let rec = AttemptRecord {
        started_at,
        latency_ms,
        status,
        error,
        next,
    };
    (rec, failure)
}

/// Records the attempt, retrying a failed write briefly; `false` when it
/// is not recorded (the lease was lost, or the ledger kept failing: the
/// lease then expires and the event is sent again, at least once).
async fn record(ctx: &Ctx, delivery_id: i64, rec: &AttemptRecord, shown: i32) -> bool {
    let mut wait = Duration::from_millis(100);
    for _ in 0..5 {
        match ctx.recorder.finish(delivery_id, rec.clone()).await {
            Ok(true) => return true,
            Ok(false) => {
                tracing::warn!(
                    attempt = shown,
                    "lease lost before the attempt was recorded"
                );
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "recording a delivery attempt failed; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
    false
}

/// Once an attempt is recorded: a target that came back has its retries
/// expedited. A failure that started before the recovery may be recorded
/// after the recovery's `expedite` ran (a later batch): it would keep its
/// backoff. So the recovery is published before `expedite` runs, and a
/// failure that started before it expedites again once recorded: either
/// `expedite` sees the failure's row, or the failure sees the recovery.
async fn after_recorded(ctx: &Ctx, t: &TargetCtx, rec: &AttemptRecord, recovered: bool) {
    if recovered {
        t.recovered_at.store(Millis::now().0, Ordering::SeqCst);
        expedite(ctx, t).await;
    } else if matches!(rec.next, NextState::RetryAt(_))
        && t.recovered_at.load(Ordering::SeqCst) >= rec.started_at.0
    {
        expedite(ctx, t).await;
    }
}

/// How `/stats` counts an attempt that went to `next`.
fn counted(next: NextState) -> DeliveryOutcome {
    match next {
        NextState::Delivered => DeliveryOutcome::Delivered,
        NextState::Dead => DeliveryOutcome::Dead,
        NextState::RetryAt(_) => DeliveryOutcome::Failed,
    }
}

/// The `outcome` label of an attempt that went to `next`.
fn label(next: NextState) -> &'static str {
    match next {
        NextState::Delivered => "delivered",
        NextState::RetryAt(_) => "retry",
        NextState::Dead => "dead",
    }
}

/// What an attempt holds only while it sends: the target's `concurrency`
/// slot and, for a hand-off, the lane slot. Both bound what is in flight to
/// the target, so they come back as soon as it answered; the wait for the
/// attempt's record (a group commit shared with other attempts) holds only
/// the process-wide `max_in_flight` permit, which bounds the attempts not yet
/// recorded. The row stays leased under our token until its record commits,
/// so no claim can take it meanwhile.
#[derive(Default)]
struct Sending {
    _slot: Option<limit::Permit>,
    _lane: Option<lanes::Slot>,
}

impl Sending {
    fn slot(permit: limit::Permit) -> Self {
        Self {
            _slot: Some(permit),
            _lane: None,
        }
    }
}

/// The next row of ordering key `key` (whose row was just delivered or went
/// dead), leased now if it is due and free: a key's backlog flows at the
/// speed of its target, one row after the other, without a claim walk over
/// every key. `None`: nothing due (a retry's backoff, or another replica
/// took it); the loop's claims find it later.
async fn successor(ctx: &Ctx, t: &TargetCtx, key: &str) -> Option<(DueDelivery, LeaseGuard)> {
    // A rate-capped target: the next row needs a token like any claim.
    // Without one the key waits; the loop claims its row (first of its key)
    // once the bucket refills, so the key keeps its order.
    if let Some(b) = &t.bucket
        && b.take(1, &*ctx.outbox, &t.target.name).await.0 == 0
    {
        t.wake.notify_one();
        return None;
    }
    let taken = Instant::now();
    match ctx
        .outbox
        .claim_successor(&ctx.lease(&t.target.name, 1), key)
        .await
    {
        Ok(row) => {
            if row.is_none()
                && let Some(b) = &t.bucket
            {
                b.give_back(1);
            }
            row.map(|row| {
                let lease = ctx.leases.hold(row.id, taken);
                (row, lease)
            })
        }
        Err(e) => {
            if let Some(b) = &t.bucket {
                b.give_back(1);
            }
            tracing::debug!(error = %e, "could not claim the key's next row; the loop will");
            t.wake.notify_one();
            None
        }
    }
}

/// The target answered after being down: its retrying backlog is due now,
/// and its loop claims it at full speed instead of waiting out backoffs.
async fn expedite(ctx: &Ctx, t: &TargetCtx) {
    match ctx.outbox.expedite(&t.target.name, Millis::now()).await {
        Ok(n) => {
            if n > 0 {
                tracing::info!(target = %t.target.name, rows = n, "target is back: retries due now");
            }
            t.wake.notify_one();
        }
        Err(e) => tracing::debug!(error = %e, "could not expedite retries; backoff applies"),
    }
}
