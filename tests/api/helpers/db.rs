//! A fresh database per test: a new Postgres database (dropped when the last
//! handle goes) or a SQLite file in a temp dir.

use super::Backend;
use sqlx::Connection;
use std::sync::Arc;

fn pg_base() -> String {
    std::env::var("HOOKGATE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

#[derive(Clone)]
pub struct TestDb {
    pub url: String,
    _guard: Arc<Guard>,
}

enum Guard {
    Pg(String),
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
}

impl TestDb {
    /// A connection holding `table` in EXCLUSIVE mode inside an open
    /// transaction (PostgreSQL): writes to it wait until `ROLLBACK` on it.
    pub async fn lock_table(&self, table: &'static str) -> sqlx::PgConnection {
        let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut c).await.unwrap();
        // A table name of the test's own, never input.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "LOCK TABLE {table} IN EXCLUSIVE MODE"
        )))
        .execute(&mut c)
        .await
        .unwrap();
        c
    }

    pub async fn create(backend: Backend) -> Self {
        match backend {
            Backend::Production => {
                let name = format!("hg_test_{}", hookgate::primitives::token::random_hex());
                let mut admin = sqlx::PgConnection::connect(&format!("{}/postgres", pg_base()))
                    .await
                    .expect("Postgres at HOOKGATE_TEST_PG (default 127.0.0.1:5432) is reachable");
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                Self {
                    url: format!("{}/{name}", pg_base()),
                    _guard: Arc::new(Guard::Pg(name)),
                }
            }
            Backend::Embedded => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("hookgate.db").display());
                Self {
                    url,
                    _guard: Arc::new(Guard::Sqlite(dir)),
                }
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Guard::Pg(name) = self {
            let name = name.clone();
            // Drop runs inside a test runtime: use a thread with its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    if let Ok(mut c) =
                        sqlx::PgConnection::connect(&format!("{}/postgres", pg_base())).await
                    {
                        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await;
                    }
                });
            })
            .join();
        }
    }
}

impl TestDb {
    /// The database name (Postgres) — the last path segment of the URL.
    pub fn name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or_default()
    }
}

/// host:port of the test Postgres, for a proxy in front of it.
pub fn pg_addr() -> std::net::SocketAddr {
    let base = pg_base();
    let hostport = base.rsplit('@').next().unwrap_or(&base);
    let hostport = hostport.trim_start_matches("postgres://");
    hostport.parse().expect("HOOKGATE_TEST_PG has host:port")
}
