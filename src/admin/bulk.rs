//! Bulk actions (bearer, `admin` scope): a plan first, then a run in pages
//! in the background, with progress and cancel; and the audit log.
//!
//! - `POST /admin/bulk/plan` — `{"kind": "replay", <filters>}` (the filters
//!   of `POST /admin/replay`), optionally `page_size` (1–1000, default 100)
//!   and `pause_ms` (0–10000, default 10): counts what the action would
//!   touch, stores the plan and answers it with an id and an expiry;
//! - `POST /admin/bulk/{id}/start` — the operator confirms the plan;
//! - `GET /admin/bulk/{id}` — state, `done` of `total`;
//! - `POST /admin/bulk/{id}/cancel` — stops it at the next page;
//! - `GET /admin/bulk` — the recent actions;
//! - `GET /admin/audit` — who did what (bulk actions, replays, redeliveries).
//!
//! Rule: a kind ([`BulkKind`]) counts and runs; this module owns the plan,
//! the state machine (in the ledger: any replica answers, starts or
//! cancels), the pages' heartbeat and the audit entries. A new kind (such
//! as re-verifying refused requests) is one more [`BulkKind`] and a name in
//! [`kind`].

use super::events::format_time;
use crate::config::Scope;
use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::bulk::{AuditEntry, BulkRow, MAX_AUDIT_PAGE};
use crate::store::refused::{REFUSED, RefusedFilter};
use async_trait::async_trait;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

/// How long a plan may be confirmed: long enough to read it, short enough
/// that the ledger has not moved on much.
pub const PLAN_TTL: Duration = Duration::from_secs(600);
/// A running action whose heartbeat is older than this (plus its pause) is
/// shown `interrupted`: its runner's process ended. Pages are bounded, so
/// a live runner writes one far more often.
pub const STALE_AFTER: Duration = Duration::from_secs(30);
pub const DEFAULT_PAGE: i64 = 100;
pub const MAX_PAGE: i64 = 1000;
/// Between pages by default: SQLite's single writer goes to ingest between
/// two pages' transactions.
pub const DEFAULT_PAUSE_MS: i64 = 10;
pub const MAX_PAUSE_MS: i64 = 10_000;

/// What a plan counted.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Items the action would touch (what `done` counts).
    pub total: i64,
    /// The largest row id covered: later rows are never part of the action.
    pub bound: i64,
    /// Shown to the operator (`counts` of the answer).
    pub counts: Value,
    /// The finest counts (e.g. per source and target); a start is refused
    /// when any of them grew since the plan.
    pub cells: BTreeMap<String, i64>,
}

/// A running action as its kind sees it: the cancel flag and the progress
/// callback.
pub struct Job {
    id: String,
    state: AppState,
    pub page_size: i64,
    pause: Duration,
    cancelled: AtomicBool,
    done: AtomicI64,
    /// The state the ledger last answered (`cancelling`, `interrupted`…).
    seen: std::sync::Mutex<String>,
}

impl Job {
    /// True once the action was cancelled (or taken over as interrupted,
    /// or the process is draining): the kind stops before its next page.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || self.state.draining.is_cancelled()
    }

    /// Records `n` more items done (and a heartbeat), learns whether the
    /// action was cancelled meanwhile, then pauses before the next page.
    pub async fn progress(&self, n: u64) -> Result<(), StoreError> {
        let done = self.done.fetch_add(n as i64, Ordering::AcqRel) + n as i64;
        let now = self
            .state
            .store
            .bulk
            .bulk_progress(&self.id, done, Millis::now())
            .await?;
        let now = now.unwrap_or_default();
        if now != "running" {
            self.cancelled.store(true, Ordering::Release);
        }
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = now;
        if !self.cancelled() && !self.pause.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(self.pause) => {}
                () = self.state.draining.cancelled() => {}
            }
        }
        Ok(())
    }
}

/// One kind of bulk action.
#[async_trait]
pub trait BulkKind: Send + Sync {
    /// The audit log's action (`bulk.<name>`) and the plan's `kind`.
    fn name(&self) -> &'static str;
    /// Checks a filter (an object of the kind's fields) before planning.
    fn check(&self, state: &AppState, filter: &Map<String, Value>) -> Result<(), ApiError>;
    /// Counts what `filter` matches now, up to `bound` (`None`: up to now).
    async fn plan(
        &self,
        state: &AppState,
        filter: &Map<String, Value>,
        bound: Option<i64>,
    ) -> Result<Plan, StoreError>;
    /// Acts on what `filter` matches up to `bound`, page by page: stops
    /// when [`Job::cancelled`], calls [`Job::progress`] after each page.
    async fn run(
        &self,
        state: &AppState,
        filter: &Map<String, Value>,
        bound: i64,
        job: &Job,
    ) -> Result<(), StoreError>;
}

/// The kind named `name`.
pub fn kind(name: &str) -> Option<Arc<dyn BulkKind>> {
    match name {
        "replay" => Some(Arc::new(Replay)),
        "reverify" => Some(Arc::new(Reverify)),
        _ => None,
    }
}

/// Replays dead deliveries (as `POST /admin/replay`), in pages of
/// delivery ids; `total` counts deliveries.
struct Replay;

impl Replay {
    fn filter(filter: &Map<String, Value>) -> Result<crate::store::console::EventFilter, ApiError> {
        let text = serde_json::to_vec(filter).unwrap_or_default();
        super::replay::parse_request(&text)
    }
}

#[async_trait]
impl BulkKind for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn check(&self, state: &AppState, filter: &Map<String, Value>) -> Result<(), ApiError> {
        let f = Self::filter(filter)?;
        let config = state.config();
        if let Some(s) = &f.source
            && !config.sources.contains_key(s)
        {
            return Err(ApiError::BadRequest(format!("unknown source `{s}`")));
        }
        if let Some(t) = &f.target
            && !config.targets.contains_key(t)
        {
            return Err(ApiError::BadRequest(format!("unknown target `{t}`")));
        }
        Ok(())
    }

    async fn plan(
        &self,
        state: &AppState,
        filter: &Map<String, Value>,
        bound: Option<i64>,
    ) -> Result<Plan, StoreError> {
        // Checked when planned; a stored filter parses the same way.
        let f = Self::filter(filter).unwrap_or_default();
        let p = state.store.console.dead_plan(&f, bound).await?;
        let mut by_target: BTreeMap<&str, i64> = BTreeMap::new();
        let mut cells = BTreeMap::new();
        for (s, t, n) in &p.deliveries {
            *by_target.entry(t).or_default() += n;
            cells.insert(format!("{s}/{t}"), *n);
        }
        let by_source: BTreeMap<&str, i64> =
            p.events.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let counts = json!({
            "events": p.events.iter().map(|e| e.1).sum::<i64>(),
            "deliveries": p.total_deliveries(),
            "by_source": by_source,
            "by_target": by_target,
        });
        Ok(Plan {
            total: p.total_deliveries(),
            bound: p.bound,
            counts,
            cells,
        })
    }

    async fn run(
        &self,
        state: &AppState,
        filter: &Map<String, Value>,
        bound: i64,
        job: &Job,
    ) -> Result<(), StoreError> {
        let f = Self::filter(filter).unwrap_or_default();
        let mut after = 0;
        while !job.cancelled() {
            let page = state
                .store
                .console
                .replay_page(&f, after, bound, job.page_size, Millis::now())
                .await?;
            let Some(last) = page.last else { break };
            after = last;
            if page.replayed > 0 {
                state.wake.notify_all();
            }
            job.progress(page.replayed).await?;
        }
        Ok(())
    }
}

/// Re-verifies refused requests (as `POST /admin/refused/reverify`), in
/// pages of refused-log ids, newest first; `total` counts requests.
struct Reverify;

impl Reverify {
    /// The refused log's filter (`source`, `reason`, `since`, `until`),
    /// only rows still refused.
    fn filter(filter: &Map<String, Value>) -> Result<RefusedFilter, ApiError> {
        let pairs: Vec<(String, String)> = filter
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k.clone(), s.clone()),
                other => (k.clone(), other.to_string()),
            })
            .collect();
        let (mut f, _, _) = super::refused::parse_filter(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            false,
        )?;
        if f.state.as_deref().is_some_and(|s| s != REFUSED) {
            return Err(ApiError::BadRequest(
                "a bulk re-verify acts on requests still refused: leave `state` out".into(),
            ));
        }
        f.state = Some(REFUSED.to_owned());
        Ok(f)
    }
}

#[async_trait]
impl BulkKind for Reverify {
    fn name(&self) -> &'static str {
        "reverify"
    }

    fn check(&self, state: &AppState, filter: &Map<String, Value>) -> Result<(), ApiError> {
        let f = Self::filter(filter)?;
        if let Some(s) = &f.source
            && !state.config().sources.contains_key(s)
        {
            return Err(ApiError::BadRequest(format!("unknown source `{s}`")));
        }
        Ok(())
    }

    async fn plan(
        &self,
        state: &AppState,
        filter: &Map<String, Value>,
        bound: Option<i64>,
    ) -> Result<Plan, StoreError> {
        // Checked when planned; a stored filter parses the same way.
        let f = Self::filter(filter).unwrap_or_default();
        let (largest, per_source) = state.store.refused.plan(&f, bound).await?;
        let total = per_source.iter().map(|(_, n)| n).sum();
        let by_source: BTreeMap<&str, i64> =
            per_source.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        Ok(Plan {
            total,
            bound: bound.unwrap_or(largest),
            counts: json!({ "requests": total, "by_source": by_source }),
            cells: per_source.iter().cloned().collect(),
        })
    }

    async fn run(
        &self,
        state: &AppState,
        filter: &Map<String, Value>,
        bound: i64,
        job: &Job,
    ) -> Result<(), StoreError> {
        let f = Self::filter(filter).unwrap_or_default();
        let log = &state.store.refused;
        // Newest first from the plan's bound: rows refused after the plan
        // are not part of it.
        let mut before = Some(bound.saturating_add(1));
        while !job.cancelled() {
            let page = log.list(&f, before, job.page_size).await?;
            let Some(last) = page.last() else { break };
            before = Some(last.id);
            let mut n = 0;
            for listed in &page {
                if job.cancelled() {
                    break;
                }
                // Pruned meanwhile: nothing to do, but it was planned.
                if let Some(row) = log.get(listed.id).await? {
                    // Admission failed (ledger unavailable): the action
                    // stops; handled rows keep their result.
                    super::refused::reverify_one(state, &row)
                        .await
                        .map_err(|_| StoreError::Closed)?;
                }
                n += 1;
            }
            job.progress(n).await?;
            if (page.len() as i64) < job.page_size {
                break;
            }
        }
        Ok(())
    }
}

fn error(status: StatusCode, code: &str, message: String, extra: Value) -> Response {
    let mut doc = json!({"error": code, "message": message});
    if let (Some(d), Value::Object(x)) = (doc.as_object_mut(), extra) {
        d.extend(x);
    }
    (status, Json(doc)).into_response()
}

fn unavailable(e: &StoreError) -> Response {
    tracing::warn!(error = %e, "bulk actions: ledger unavailable");
    ApiError::Unavailable.into_response()
}

fn unknown() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "unknown_bulk_action",
        "no bulk action with this id".into(),
        Value::Null,
    )
}

fn stale_before() -> Millis {
    Millis(Millis::now().0 - STALE_AFTER.as_millis() as i64)
}

/// An action's answer. A plan past its expiry shows `expired`.
pub fn doc(b: &BulkRow) -> Value {
    let plan: Value = serde_json::from_str(&b.plan).unwrap_or(Value::Null);
    let state = if b.state == "planned" && b.expires_at <= Millis::now() {
        "expired"
    } else {
        b.state.as_str()
    };
    let time = |t: Option<Millis>| t.map(format_time);
    json!({
        "id": b.id,
        "kind": b.kind,
        "filter": serde_json::from_str::<Value>(&b.filter).unwrap_or(Value::Null),
        "state": state,
        "planned": b.planned,
        "counts": plan["counts"],
        "total": b.total,
        "done": b.done,
        "page_size": b.page_size,
        "pause_ms": b.pause_ms,
        "created_by": b.created_by,
        "started_by": b.started_by,
        "created_at": format_time(b.created_at),
        "expires_at": format_time(b.expires_at),
        "started_at": time(b.started_at),
        "finished_at": time(b.finished_at),
        "error": b.error,
    })
}

/// The number in `doc[key]` within `range`, or `default`.
fn bounded(
    doc: &mut Map<String, Value>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    default: i64,
) -> Result<i64, ApiError> {
    match doc.remove(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_i64().filter(|n| range.contains(n)).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "`{key}` must be a whole number from {} to {}",
                range.start(),
                range.end()
            ))
        }),
    }
}

/// `POST /admin/bulk/plan`.
pub async fn plan(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let who = match super::authorize_scope(&state, &headers, Scope::Admin) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let mut doc: Map<String, Value> = match serde_json::from_slice(&body) {
        Ok(d) => d,
        Err(e) => {
            return ApiError::BadRequest(format!("invalid bulk plan request: {e}")).into_response();
        }
    };
    let kind = match doc.remove("kind") {
        Some(Value::String(k)) => match self::kind(&k) {
            Some(kind) => kind,
            None => {
                return ApiError::BadRequest(format!("unknown bulk kind `{k}`")).into_response();
            }
        },
        _ => return ApiError::BadRequest("`kind` is required (`replay`)".into()).into_response(),
    };
    let page_size = match bounded(&mut doc, "page_size", 1..=MAX_PAGE, DEFAULT_PAGE) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    let pause_ms = match bounded(&mut doc, "pause_ms", 0..=MAX_PAUSE_MS, DEFAULT_PAUSE_MS) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = kind.check(&state, &doc) {
        return e.into_response();
    }
    let plan = match kind.plan(&state, &doc, None).await {
        Ok(p) => p,
        Err(e) => return unavailable(&e),
    };
    let now = Millis::now();
    let row = BulkRow {
        id: crate::primitives::token::random_hex(),
        kind: kind.name().to_owned(),
        filter: Value::Object(doc).to_string(),
        plan: json!({"counts": plan.counts, "cells": plan.cells}).to_string(),
        planned: plan.total,
        bound: plan.bound,
        page_size,
        pause_ms,
        state: "planned".into(),
        total: 0,
        done: 0,
        created_by: who,
        started_by: None,
        created_at: now,
        expires_at: Millis(now.0 + PLAN_TTL.as_millis() as i64),
        started_at: None,
        finished_at: None,
        heartbeat_at: None,
        error: None,
    };
    if let Err(e) = state.store.bulk.create_bulk(&row).await {
        return unavailable(&e);
    }
    (StatusCode::CREATED, Json(self::doc(&row))).into_response()
}

/// `POST /admin/bulk/{id}/start`: refused (409) when the plan expired, was
/// started or cancelled already, or when the filter now matches more in
/// any cell (source and target) than the plan showed: the operator
/// confirmed those numbers, and more would act on what they did not see.
/// Fewer is accepted (some were replayed or purged meanwhile); `total` is
/// the count at the start.
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let who = match super::authorize_scope(&state, &headers, Scope::Admin) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let bulk = &state.store.bulk;
    let row = match find(&state, &id).await {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    if row.state != "planned" {
        return error(
            StatusCode::CONFLICT,
            "not_a_plan",
            format!("the action is {}, not a plan waiting to start", row.state),
            json!({"state": row.state}),
        );
    }
    if row.expires_at <= Millis::now() {
        return error(
            StatusCode::CONFLICT,
            "plan_expired",
            "the plan expired; plan again".into(),
            json!({"expires_at": format_time(row.expires_at)}),
        );
    }
    let Some(kind) = kind(&row.kind) else {
        return unknown();
    };
    let filter: Map<String, Value> = serde_json::from_str(&row.filter).unwrap_or_default();
    let now_plan = match kind.plan(&state, &filter, Some(row.bound)).await {
        Ok(p) => p,
        Err(e) => return unavailable(&e),
    };
    let planned: Value = serde_json::from_str(&row.plan).unwrap_or(Value::Null);
    let grew: Vec<&String> = now_plan
        .cells
        .iter()
        .filter(|(k, n)| **n > planned["cells"][k.as_str()].as_i64().unwrap_or(0))
        .map(|(k, _)| k)
        .collect();
    if !grew.is_empty() {
        return error(
            StatusCode::CONFLICT,
            "plan_changed",
            format!(
                "the filter now matches more than planned (in {}); plan again",
                grew.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            json!({"planned": row.planned, "now": now_plan.total, "counts": now_plan.counts}),
        );
    }
    match bulk
        .start_bulk(&id, now_plan.total, &who, Millis::now())
        .await
    {
        Ok(true) => {}
        // Another request started, cancelled or outlived it meanwhile.
        Ok(false) => {
            return error(
                StatusCode::CONFLICT,
                "not_a_plan",
                "the plan was started, cancelled or expired meanwhile".into(),
                Value::Null,
            );
        }
        Err(e) => return unavailable(&e),
    }
    let entry = AuditEntry {
        id: 0,
        at: Millis::now(),
        who: who.clone(),
        action: format!("bulk.{}", kind.name()),
        filter: row.filter.clone(),
        count: now_plan.total,
        outcome: "running".into(),
        bulk_id: Some(id.clone()),
    };
    if let Err(e) = bulk.audit(&entry).await {
        tracing::error!(error = %e, bulk.id = id, "audit entry not written");
    }
    tracing::info!(
        bulk.id = id,
        kind = kind.name(),
        total = now_plan.total,
        by = who,
        "bulk action started"
    );
    let job = Job {
        id: id.clone(),
        state: state.clone(),
        page_size: row.page_size,
        pause: Duration::from_millis(row.pause_ms as u64),
        cancelled: AtomicBool::new(false),
        done: AtomicI64::new(0),
        seen: std::sync::Mutex::new("running".into()),
    };
    tokio::spawn(run(state.clone(), kind, filter, row.bound, job));
    match find(&state, &id).await {
        Ok(r) => (StatusCode::ACCEPTED, Json(doc(&r))).into_response(),
        Err(answer) => answer,
    }
}

/// Runs `job` to its end and records how it ended.
async fn run(
    state: AppState,
    kind: Arc<dyn BulkKind>,
    filter: Map<String, Value>,
    bound: i64,
    job: Job,
) {
    let outcome = kind.run(&state, &filter, bound, &job).await;
    let seen = job.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (end, error) = match outcome {
        Err(e) => ("failed", Some(e.to_string())),
        Ok(()) if seen == "cancelling" => ("cancelled", None),
        // Stopped by the drain: another run may be planned after the restart.
        Ok(()) if state.draining.is_cancelled() && job.cancelled() => ("interrupted", None),
        Ok(()) if seen == "running" => ("done", None),
        // Marked interrupted (or removed) by someone else: leave it so.
        Ok(()) => {
            tracing::warn!(bulk.id = job.id, state = seen, "bulk action stopped");
            return;
        }
    };
    let done = job.done.load(Ordering::Acquire);
    let bulk = &state.store.bulk;
    match bulk
        .finish_bulk(&job.id, end, error.as_deref(), Millis::now())
        .await
    {
        Ok(true) => {
            if let Err(e) = bulk.audit_outcome(&job.id, done, end).await {
                tracing::error!(error = %e, bulk.id = job.id, "audit outcome not written");
            }
            tracing::info!(
                bulk.id = job.id,
                state = end,
                done,
                error,
                "bulk action ended"
            );
        }
        // A stale heartbeat had it marked interrupted: it stays so.
        Ok(false) => {}
        // The row stays `running` with an old heartbeat: readers mark it
        // `interrupted`.
        Err(e) => tracing::warn!(error = %e, bulk.id = job.id, "bulk action end not recorded"),
    }
}

/// Action `id` as readers see it (a stale heartbeat shown as interrupted),
/// or the answer to give: 404 when there is none, 503 when the ledger
/// cannot say.
async fn find(state: &AppState, id: &str) -> Result<BulkRow, Response> {
    match state.store.bulk.bulk(id, stale_before()).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(unknown()),
        Err(e) => Err(unavailable(&e)),
    }
}

/// `GET /admin/bulk/{id}`.
pub async fn show(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match find(&state, &id).await {
        Ok(r) => Json(doc(&r)).into_response(),
        Err(answer) => answer,
    }
}

/// `GET /admin/bulk`: the 20 newest actions.
pub async fn recent(State(state): State<AppState>) -> Response {
    match state.store.bulk.recent_bulk(20, stale_before()).await {
        Ok(rows) => {
            Json(json!({"items": rows.iter().map(doc).collect::<Vec<_>>()})).into_response()
        }
        Err(e) => unavailable(&e),
    }
}

/// `POST /admin/bulk/{id}/cancel`: a plan is cancelled at once; a running
/// action becomes `cancelling` and its runner (on whichever replica) stops
/// before its next page, then shows `cancelled`. An action that already
/// ended: 409.
pub async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let who = match super::authorize_scope(&state, &headers, Scope::Admin) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let bulk = &state.store.bulk;
    let before = match find(&state, &id).await {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let after = match bulk.cancel_bulk(&id, Millis::now()).await {
        Ok(Some(s)) => s,
        Ok(None) => return unknown(),
        Err(e) => return unavailable(&e),
    };
    if after == before.state || !matches!(after.as_str(), "cancelled" | "cancelling") {
        return error(
            StatusCode::CONFLICT,
            "already_ended",
            format!("the action is {after}"),
            json!({"state": after}),
        );
    }
    if before.state == "running" {
        let entry = AuditEntry {
            id: 0,
            at: Millis::now(),
            who,
            action: format!("bulk.{}.cancel", before.kind),
            filter: json!({"bulk_id": id}).to_string(),
            count: before.done,
            outcome: "done".into(),
            bulk_id: None,
        };
        if let Err(e) = bulk.audit(&entry).await {
            tracing::error!(error = %e, bulk.id = id, "audit entry not written");
        }
    }
    match find(&state, &id).await {
        Ok(r) => (StatusCode::ACCEPTED, Json(doc(&r))).into_response(),
        Err(answer) => answer,
    }
}

/// Records a single operator action (a replay, a redelivery) in the audit
/// log; a failure is logged, the action stands.
pub async fn record(state: &AppState, who: &str, action: &str, filter: Value, count: u64) {
    let entry = AuditEntry {
        id: 0,
        at: Millis::now(),
        who: who.to_owned(),
        action: action.to_owned(),
        filter: filter.to_string(),
        count: count as i64,
        outcome: "done".into(),
        bulk_id: None,
    };
    if let Err(e) = state.store.bulk.audit(&entry).await {
        tracing::error!(error = %e, action, "audit entry not written");
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct AuditQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

/// `GET /admin/audit?before=<id>&limit=<n>`: newest first; `next` is the
/// `before` of the following page.
pub async fn audit(State(state): State<AppState>, Query(q): Query<AuditQuery>) -> Response {
    let limit = q.limit.unwrap_or(50).clamp(1, MAX_AUDIT_PAGE);
    match state.store.bulk.audit_log(q.before, limit).await {
        Ok(items) => {
            let next = (items.len() as i64 == limit)
                .then(|| items.last().map(|e| e.id))
                .flatten();
            let items: Vec<Value> = items
                .iter()
                .map(|e| {
                    json!({
                        "id": e.id,
                        "at": format_time(e.at),
                        "who": e.who,
                        "action": e.action,
                        "filter": serde_json::from_str::<Value>(&e.filter).unwrap_or(Value::Null),
                        "count": e.count,
                        "outcome": e.outcome,
                        "bulk_id": e.bulk_id,
                    })
                })
                .collect();
            Json(json!({"items": items, "next": next})).into_response()
        }
        Err(e) => unavailable(&e),
    }
}
