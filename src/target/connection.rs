//! The one connection a broker target keeps (NATS, RabbitMQ): made on
//! first use, shared by every delivery to the target, and forgotten after
//! a failed publish so that the next attempt connects anew (a broker that
//! went away and came back, a connection that hangs).
//!
//! Rule: one connect at a time per target; a failed attempt forgets only
//! the connection it used.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Mutex;

pub struct LazyConnection<T> {
    slot: Mutex<Option<(u64, Arc<T>)>>,
    generations: AtomicU64,
}

impl<T> Default for LazyConnection<T> {
    fn default() -> Self {
        Self {
            slot: Mutex::new(None),
            generations: AtomicU64::new(0),
        }
    }
}

impl<T> LazyConnection<T> {
    /// The current connection while `alive` says it is usable, else a new
    /// one from `connect` (one connect at a time: concurrent attempts wait
    /// for it and share it). Also returns the connection's generation, for
    /// [`LazyConnection::forget`].
    pub async fn get<F, Fut>(
        &self,
        alive: impl Fn(&T) -> bool,
        connect: F,
    ) -> Result<(u64, Arc<T>), String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some((generation, conn)) = slot.as_ref()
            && alive(conn)
        {
            return Ok((*generation, conn.clone()));
        }
        *slot = None;
        let conn = Arc::new(connect().await?);
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        *slot = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// Drops the connection of `generation` (not a newer one that another
    /// attempt made meanwhile); generation 0: whichever is current.
    pub async fn forget(&self, generation: u64) {
        let mut slot = self.slot.lock().await;
        if slot
            .as_ref()
            .is_some_and(|(g, _)| generation == 0 || *g == generation)
        {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_is_reused_until_forgotten_and_a_stale_forget_is_ignored() {
        let shared: LazyConnection<u32> = LazyConnection::default();
        let (g1, c) = shared.get(|_| true, || async { Ok(7) }).await.unwrap();
        assert_eq!(*c, 7);
        let (again, _) = shared
            .get(|_| true, || async { Err("no reconnect".into()) })
            .await
            .unwrap();
        assert_eq!(again, g1, "reused");
        shared.forget(g1).await;
        let (g2, c) = shared.get(|_| true, || async { Ok(8) }).await.unwrap();
        assert_eq!((*c, g2 > g1), (8, true));
        shared.forget(g1).await;
        let (g3, _) = shared.get(|_| true, || async { Ok(9) }).await.unwrap();
        assert_eq!(g3, g2, "a stale forget leaves the newer connection");
        let (g4, c) = shared.get(|_| false, || async { Ok(10) }).await.unwrap();
        assert_eq!((*c, g4 > g3), (10, true), "a dead one is replaced");
        let e = shared.get(|_| false, || async { Err("down".into()) }).await;
        assert_eq!(e.unwrap_err(), "down");
    }
}
