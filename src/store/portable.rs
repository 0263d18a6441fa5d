//! The capabilities whose statements are the same text on PostgreSQL and
//! SQLite ([`Console`](super::Console), [`ReconcileStore`](super::ReconcileStore),
//! [`IdempotencyStore`](super::IdempotencyStore)), implemented once, in their
//! own modules, for [`Portable`]: a backend's main pool.
//!
//! Rule: nothing here knows which database it runs on beyond
//! [`Dialect`]; a statement that needs more than the dialect's few words
//! belongs in a backend's own capability file instead.

use super::console::Dialect;
use sqlx::{Database, Pool};

/// A backend's main pool, with the dialect its console SQL is built in.
pub(crate) struct Portable<DB: Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) dialect: Dialect,
}

impl<DB: Database> Portable<DB> {
    pub(crate) fn new(pool: Pool<DB>, dialect: Dialect) -> Self {
        Self { pool, dialect }
    }
}
