//! What a reload may not change: the settings a running process was built
//! with (listeners, the ledger and cache connections, the shared delivery
//! settings), put back to their running value and named for a warning.
//!
//! Rule: comparison only; secrets are compared, never shown.

use super::{Config, Database, Delivery, Server};
use crate::primitives::secret::Secret;

impl Config {
    /// The settings of `self` (a config a reload just read) that cannot
    /// change while serving and differ from `running`'s: each is put back
    /// to the running value, and its key is returned for a "needs a
    /// restart" warning. Listeners are bound, pools and caches connected,
    /// and the delivery loops' shared settings fixed once at start.
    pub fn keep_restart_only(&mut self, running: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let (new, old) = (&self.server, &running.server);
        let mut keep = |key: &'static str, same: bool| {
            if !same {
                changed.push(key);
            }
        };
        keep("server.listen", new.listen == old.listen);
        keep("server.admin_listen", new.admin_listen == old.admin_listen);
        keep(
            "server.max_connections",
            new.max_connections == old.max_connections,
        );
        keep(
            "server.header_read_timeout",
            new.header_read_timeout == old.header_read_timeout,
        );
        keep("server.idle_timeout", new.idle_timeout == old.idle_timeout);
        keep(
            "server.max_connections_per_client",
            new.max_connections_per_client == old.max_connections_per_client,
        );
        keep(
            "server.keep_alive_timeout",
            new.keep_alive_timeout == old.keep_alive_timeout,
        );
        keep(
            "server.max_buffered_body_bytes / max_buffered_body_bytes_per_client / max_buffered_answer_bytes",
            (
                new.max_buffered_body_bytes,
                new.max_buffered_body_bytes_per_client,
                new.max_buffered_answer_bytes,
            ) == (
                old.max_buffered_body_bytes,
                old.max_buffered_body_bytes_per_client,
                old.max_buffered_answer_bytes,
            ),
        );
        keep(
            "server.protect_metrics",
            new.protect_metrics == old.protect_metrics,
        );
        keep(
            "server.request_timeout",
            new.request_timeout == old.request_timeout,
        );
        keep(
            "server.shutdown_grace",
            new.shutdown_grace == old.shutdown_grace,
        );
        keep("server.log_format", new.log_format == old.log_format);
        keep(
            "server.tls_cert / server.tls_key (turning TLS on or off)",
            new.tls.is_some() == old.tls.is_some(),
        );
        keep("telemetry", self.traces == running.traces);
        keep(
            "storage.database_url",
            database_text(&self.storage.database) == database_text(&running.storage.database),
        );
        keep(
            "storage.redis_url",
            self.storage.redis_url.as_ref().map(Secret::expose)
                == running.storage.redis_url.as_ref().map(Secret::expose),
        );
        let (s, o) = (&self.storage, &running.storage);
        keep("storage.key_prefix", s.key_prefix == o.key_prefix);
        keep(
            "storage.cache_capacity",
            s.cache_capacity == o.cache_capacity,
        );
        keep(
            "storage.near_cache_capacity",
            s.near_cache_capacity == o.near_cache_capacity,
        );
        keep("storage.redis_timeout", s.redis_timeout == o.redis_timeout);
        keep(
            "storage.max_connections",
            s.max_connections == o.max_connections,
        );
        keep(
            "storage.statement_timeout",
            s.statement_timeout == o.statement_timeout,
        );
        let (d, o) = (&self.dedup, &running.dedup);
        keep(
            "[dedup]",
            (
                d.claim_ttl,
                d.cache_ttl,
                d.inflight_wait,
                d.purge_interval,
                d.stats_flush_interval,
            ) == (
                o.claim_ttl,
                o.cache_ttl,
                o.inflight_wait,
                o.purge_interval,
                o.stats_flush_interval,
            ),
        );
        let (d, o) = (&self.delivery, &running.delivery);
        // The retry settings live on in each target (`Target::retry`), so
        // a target whose retry settings change gets a new loop.
        keep(
            "delivery.enabled / max_in_flight / poll_interval / lease / heartbeat",
            (
                d.enabled,
                d.max_in_flight,
                d.poll_interval,
                d.lease,
                d.heartbeat,
            ) == (
                o.enabled,
                o.max_in_flight,
                o.poll_interval,
                o.lease,
                o.heartbeat,
            ),
        );
        // Put back what the running process was built with.
        let tls = self.server.tls.take();
        let server = Server {
            admin_token: self.server.admin_token.take(),
            tokens: std::mem::take(&mut self.server.tokens),
            max_body_bytes: self.server.max_body_bytes,
            log_level: std::mem::take(&mut self.server.log_level),
            trusted_proxies: std::mem::take(&mut self.server.trusted_proxies),
            // New files for a running TLS listener; on or off needs a restart.
            tls: if running.server.tls.is_some() {
                tls.or(running.server.tls.clone())
            } else {
                None
            },
            ..running.server.clone()
        };
        self.server = server;
        self.storage = running.storage.clone();
        self.dedup = running.dedup.clone();
        self.traces = running.traces.clone();
        self.delivery = Delivery {
            backoff_base: self.delivery.backoff_base,
            backoff_max: self.delivery.backoff_max,
            retry_for: self.delivery.retry_for,
            permanent_statuses: std::mem::take(&mut self.delivery.permanent_statuses),
            ..running.delivery.clone()
        };
        changed
    }
}

/// The database URL's text (it may hold a password: compared, never shown).
fn database_text(d: &Database) -> String {
    match d {
        Database::Sqlite(u) => u.clone(),
        Database::Postgres(u) => u.expose().to_owned(),
    }
}
