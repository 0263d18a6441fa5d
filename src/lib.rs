//! hookgate: a webhook receiver gateway.
//!
//! # Layout, in request order
//! - [`config`]: TOML + environment → validated [`config::Config`]; secrets redacted.
//! - [`ingest`]: `POST /webhooks/{source}`; orchestrates the steps below.
//! - [`verify`]: provider definitions (data, `providers/*.toml`) and signature
//!   schemes; builds the only type dedup accepts, [`verify::Verified`].
//! - [`dedup`]: the claim state machine over a fast [`dedup::cache::ClaimCache`]
//!   (Redis or in-process) and the durable ledger; its event writer
//!   ([`dedup::writer`]) group-commits new events and hands their deliveries
//!   to this process's lanes; duplicate arrivals are recorded in the background.
//! - [`batch`]: group commit, storage-agnostic: jobs of concurrent tasks share
//!   one write (events; attempt records).
//! - [`store`]: the ledger (PostgreSQL or SQLite) as capabilities, one per kind
//!   of caller: [`store::EventLog`], [`store::Outbox`], [`store::Tallies`],
//!   [`store::Console`], [`store::ReconcileStore`], [`store::IdempotencyStore`].
//! - [`reconcile`]: asks provider APIs for the events they have and recovers
//!   the ones never received, through the same dedup path (beside `ingest`).
//! - [`proxy`]: `/api/{name}/…`, the Idempotency-Key proxy in front of internal APIs.
//! - [`deliver`]: outbox workers that forward events to targets, and the
//!   hand-off lanes that bring them new rows without a claim.
//! - [`target`]: what a target is: which events it wants (its route), and
//!   how each kind (HTTP, Redis stream, NATS, RabbitMQ) is configured and
//!   sends, one file per kind.
//! - [`admin`]: `/stats`, `/metrics`, `/healthz`, `/readyz`, replay.
//! - [`stats`]: counters as typed outcomes, the vocabulary every layer counts in.
//! - [`primitives`]: values every layer shares (durations, secrets, times,
//!   stored headers), the cryptographic building blocks and random tokens;
//!   imports nothing.
//! - [`error`]: every handler error as an HTTP answer, and what it counts as.
//! - [`app`], [`http`], [`serve`] (accept loop, transport limits, the bounded
//!   body read), [`tls`] (native HTTPS), [`reload`] (SIGHUP and
//!   `POST /admin/reload`), [`state`], [`cli`], [`telemetry`], [`shutdown`]: wiring.
//! - [`traces`]: OpenTelemetry spans of webhooks and delivery attempts, over
//!   OTLP, when `[telemetry] otlp_endpoint` is set.

pub mod admin;
pub mod alerts;
pub mod app;
pub mod batch;
pub mod cli;
pub mod config;
pub mod dedup;
pub mod deliver;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ingest;
pub mod primitives;
pub mod proxy;
pub mod reconcile;
pub mod reload;
pub mod serve;
pub mod shutdown;
pub mod state;
pub mod stats;
pub mod store;
pub mod target;
pub mod telemetry;
pub mod tls;
pub mod traces;
pub mod verify;
