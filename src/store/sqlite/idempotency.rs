//! The idempotency store on SQLite: the shared SQL of `store::idempotency`
//! on this ledger's pool (one writer at a time makes each statement atomic).

crate::store::idempotency::impl_idempotency_store!(super::SqliteLedger);
