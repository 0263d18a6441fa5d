//! HTTP-level tests: the real gateway on loopback, real PostgreSQL and Redis
//! (or the embedded default), real target servers.

mod helpers;

mod admin_events;
mod admin_find;
mod alerts;
mod availability;
mod backup;
mod body_dedup;
mod bulk;
mod cli;
mod cli_events;
mod crash_recovery;
mod dedup;
mod delivery;
mod faults;
mod hardening;
mod idempotency;
mod ingest;
mod ledger_faults;
mod listen;
mod metrics;
mod operations;
mod ordering;
mod pg_crash;
mod providers;
mod queues;
mod queues_nats;
mod queues_rabbitmq;
mod rate;
mod reconcile;
mod reconcile_resend;
mod refused;
mod reload;
mod retry_window;
mod reverse_proxy;
mod routing;
mod split;
mod topologies;
mod traces;
mod upgrade;

/// Generates a `production` and an `embedded` test per listed
/// `async fn name(backend: Backend)`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod production {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Production).await
                }
            )*
        }
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Embedded).await
                }
            )*
        }
    };
}
