//! The Prometheus families this process records, each with its type and
//! the `# HELP` text `/metrics` prints (docs/operations.md, "Monitoring and
//! alerting", explains each one).
//!
//! Rule: a family is named here before any code records it; names follow
//! the Prometheus conventions (<https://prometheus.io/docs/practices/naming/>):
//! the `hookgate_` prefix, the base unit in the name (`_seconds`, `_bytes`),
//! `_total` on counters, `_timestamp_seconds` on Unix times. The families
//! `/metrics` computes at each scrape from the ledger (backlog, last
//! accepted, health, build info) are `admin::metrics`'s.

/// A family's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// (name, type, help) of every family recorded through the process-wide
/// recorder.
pub const FAMILIES: &[(&str, Kind, &str)] = &[
    (
        "hookgate_requests_total",
        Kind::Counter,
        "Webhook requests answered, by source and outcome (new, duplicate_*, a rejection reason, in_flight, unavailable, timeout, …). Source _unknown: no such source.",
    ),
    (
        "hookgate_request_duration_seconds",
        Kind::Histogram,
        "Time from a webhook request's arrival to its answer, by source.",
    ),
    (
        "hookgate_verify_duration_seconds",
        Kind::Histogram,
        "Time spent checking a webhook's signature, by source.",
    ),
    (
        "hookgate_rejections_total",
        Kind::Counter,
        "Webhook requests refused before dedup, by source and reason (invalid_signature, timestamp_out_of_tolerance, …).",
    ),
    (
        "hookgate_source_last_received_timestamp_seconds",
        Kind::Gauge,
        "Unix time of the last request this process received for the source, whatever its outcome.",
    ),
    (
        "hookgate_unrouted_total",
        Kind::Counter,
        "New events no target's route matched (stored, delivered nowhere), by source.",
    ),
    (
        "hookgate_challenges_total",
        Kind::Counter,
        "Provider handshakes and URL challenges answered, by source and outcome.",
    ),
    (
        "hookgate_cache_claim_seconds",
        Kind::Histogram,
        "One dedup claim's round trip to the claim cache (Redis or in-process), answered or failed.",
    ),
    (
        "hookgate_trace_spans_dropped_total",
        Kind::Counter,
        "Finished spans dropped because the trace export queue was full (telemetry.max_queued_spans).",
    ),
    (
        "hookgate_trace_exports_total",
        Kind::Counter,
        "OTLP trace export requests, by outcome (ok, error).",
    ),
    (
        "hookgate_cache_errors_total",
        Kind::Counter,
        "Claim cache calls that failed; dedup fell back to the ledger.",
    ),
    (
        "hookgate_cache_near_hits_total",
        Kind::Counter,
        "Copies answered duplicate by the near cache in front of Redis (this process's done marks), without a claim.",
    ),
    (
        "hookgate_arrivals_dropped_total",
        Kind::Counter,
        "Duplicate arrivals not recorded for the console because their queue was full.",
    ),
    (
        "hookgate_refused_logged_total",
        Kind::Counter,
        "Requests that failed verification written to the refused-request log.",
    ),
    (
        "hookgate_refused_dropped_total",
        Kind::Counter,
        "Refused requests not logged because their queue was full or their write failed.",
    ),
    (
        "hookgate_refused_reverified_total",
        Kind::Counter,
        "Refused requests that verified when re-checked and were admitted, by source.",
    ),
    (
        "hookgate_ledger_batch_size",
        Kind::Histogram,
        "New events per group-commit write of the event writer.",
    ),
    (
        "hookgate_ledger_write_seconds",
        Kind::Histogram,
        "One group-commit write of new events: the statement and its COMMIT.",
    ),
    (
        "hookgate_attempt_batch_size",
        Kind::Histogram,
        "Delivery attempt records per group-commit write.",
    ),
    (
        "hookgate_attempt_write_seconds",
        Kind::Histogram,
        "One group-commit write of delivery attempt records.",
    ),
    (
        "hookgate_delivery_attempts_total",
        Kind::Counter,
        "Delivery attempts this process made, by target and what became of the delivery (delivered, retry, dead).",
    ),
    (
        "hookgate_delivery_attempt_results_total",
        Kind::Counter,
        "Delivery attempts this process made, by target and answer class (2xx, 4xx, 5xx, timeout, connect_error, confirmed, other).",
    ),
    (
        "hookgate_delivery_duration_seconds",
        Kind::Histogram,
        "Time one delivery attempt took, until the target answered or failed, by target.",
    ),
    (
        "hookgate_delivery_handoffs_total",
        Kind::Counter,
        "Deliveries handed to the target's loop straight from their commit, without a claim query, by target.",
    ),
    (
        "hookgate_delivery_concurrency_limit",
        Kind::Gauge,
        "Requests a target may have in flight now: its fixed concurrency, or its adaptive limit, by target.",
    ),
    (
        "hookgate_api_requests_total",
        Kind::Counter,
        "Idempotency-Key proxy requests, by API and outcome.",
    ),
    (
        "hookgate_api_upstream_duration_seconds",
        Kind::Histogram,
        "Time the proxied API took to answer a forwarded request, by API.",
    ),
    (
        "hookgate_config_reloads_total",
        Kind::Counter,
        "Config reloads (SIGHUP or POST /admin/reload) by outcome: applied, refused.",
    ),
    (
        "hookgate_reconcile_runs_total",
        Kind::Counter,
        "Reconciliation runs this process made, by source and outcome (ok, failed).",
    ),
    (
        "hookgate_reconcile_recovered_total",
        Kind::Counter,
        "Events reconciliation recovered or had resent, by source (this process's runs).",
    ),
    (
        "hookgate_reconcile_last_success_timestamp_seconds",
        Kind::Gauge,
        "Unix time of the source's last successful reconciliation run, by any replica (from the ledger).",
    ),
    (
        "hookgate_delivery_leases_lost_total",
        Kind::Counter,
        "Delivery attempts abandoned because this process could not renew the row's lease in time (paused, or cut off from the ledger); another worker sends the row. By target.",
    ),
    (
        "hookgate_connections_refused_total",
        Kind::Counter,
        "Connections refused at accept, by reason (per_client: the client's connection cap).",
    ),
    (
        "hookgate_connections_closed_idle_total",
        Kind::Counter,
        "Connections closed by the idle or header watchdog.",
    ),
];

/// Gives every family its `# HELP` (the recorder prints `# TYPE` itself),
/// and creates the series an alert must see at 0 before their first
/// increment. Called once, when the process-wide recorder is installed.
pub fn describe() {
    for &(name, kind, help) in FAMILIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
    for outcome in ["applied", "refused"] {
        metrics::counter!("hookgate_config_reloads_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("hookgate_cache_errors_total").increment(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_prometheus_conventions() {
        let mut seen = std::collections::HashSet::new();
        for &(name, kind, help) in FAMILIES {
            assert!(seen.insert(name), "{name} twice");
            assert!(name.starts_with("hookgate_"), "{name}");
            assert!(!help.is_empty() && !help.contains('\n'), "{name}");
            match kind {
                Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
                _ => assert!(!name.ends_with("_total"), "{name}"),
            }
            assert!(
                !name.contains("_ms") && !name.contains("millis"),
                "{name}: base units"
            );
        }
    }
}
