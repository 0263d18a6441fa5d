//! The idempotency store on PostgreSQL: the shared SQL of
//! `store::idempotency` on this ledger's pool.

crate::store::idempotency::impl_idempotency_store!(super::PgLedger);
