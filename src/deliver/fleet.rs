//! The running target loops, one per configured target. A reload hands the
//! new target table to [`Fleet::apply`]: an added target's loop starts; a
//! removed one's loop stops after its in-flight attempts and releases its
//! leases, so its pending deliveries stay pending (never dead-lettered)
//! until the target is configured again; a changed target (any setting, a
//! rotated signing key included) gets a new loop, and a fresh lane, once the
//! old loop has stopped, so two loops never send for one target.
//!
//! Rule: only `apply` and `join` change the set of loops, and they are
//! called one at a time (the caller holds the fleet behind one lock).

use super::{Ctx, Lane, TargetCtx, target_loop};
use crate::deliver::lanes::Lanes;
use crate::target::Target;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Every target loop of this process.
pub struct Fleet {
    /// `None`: this process does not deliver (`delivery.enabled = false`).
    ctx: Option<Arc<Ctx>>,
    lanes: Lanes,
    loops: HashMap<String, Running>,
    /// The process's stop; each loop's own token is a child of it.
    stop: CancellationToken,
    /// The lease heartbeat (`deliver::lease`): stopped only after every
    /// loop has finished, so leases under attempts still being recorded at
    /// shutdown are renewed to the end.
    heartbeat: Option<(CancellationToken, JoinHandle<()>)>,
}

struct Running {
    target: Arc<Target>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// What [`Fleet::apply`] did, by target name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl Fleet {
    pub(super) fn new(ctx: Option<Arc<Ctx>>, lanes: Lanes, stop: CancellationToken) -> Self {
        Self {
            ctx,
            lanes,
            loops: HashMap::new(),
            stop,
            heartbeat: None,
        }
    }

    /// The lease heartbeat task and its own stop.
    pub(super) fn renewing(&mut self, stop: CancellationToken, task: JoinHandle<()>) {
        self.heartbeat = Some((stop, task));
    }

    /// A fleet that never runs a loop (delivery is off in this process).
    pub fn disabled(lanes: Lanes, stop: CancellationToken) -> Self {
        Self::new(None, lanes, stop)
    }

    pub(super) fn spawn(&mut self, target: Arc<Target>) {
        let Some(ctx) = &self.ctx else {
            return;
        };
        let stop = self.stop.child_token();
        let name = target.name.clone();
        let t = Arc::new(TargetCtx::new(
            target.clone(),
            self.lanes.wake(&name),
            &ctx.client,
        ));
        let lane = Lane {
            rx: self.lanes.receiver(&name),
            lanes: self.lanes.clone(),
        };
        let task = tokio::spawn(target_loop(ctx.clone(), t, lane, stop.clone()));
        self.loops.insert(name, Running { target, stop, task });
    }

    /// Brings the loops in line with `targets` (a reloaded config). Returns
    /// once every stopped loop has finished (within the shutdown grace each).
    pub async fn apply(&mut self, targets: &BTreeMap<String, Arc<Target>>) -> Changes {
        let mut changes = Changes::default();
        if self.ctx.is_none() {
            return changes;
        }
        for (name, t) in targets {
            if !self.loops.contains_key(name) {
                self.lanes.renew(t);
                self.spawn(t.clone());
                changes.added.push(name.clone());
            }
        }
        let mut stopping = Vec::new();
        for (name, running) in &self.loops {
            match targets.get(name) {
                None => changes.removed.push(name.clone()),
                Some(t) if !t.same_as(&running.target) => changes.changed.push(name.clone()),
                Some(_) => continue,
            }
            running.stop.cancel();
        }
        for name in changes.removed.iter().chain(&changes.changed) {
            if let Some(r) = self.loops.remove(name) {
                stopping.push(r.task);
            }
        }
        for task in stopping {
            let _ = task.await;
        }
        if let Some(ctx) = &self.ctx {
            for name in &changes.removed {
                ctx.health.forget(name);
            }
        }
        for name in &changes.changed {
            if let Some(t) = targets.get(name) {
                self.lanes.renew(t);
                self.spawn(t.clone());
            }
        }
        changes
    }

    /// Waits for every loop (after the process's stop was cancelled).
    pub async fn join(&mut self) {
        for (_, r) in self.loops.drain() {
            let _ = r.task.await;
        }
        if let Some((stop, task)) = self.heartbeat.take() {
            stop.cancel();
            let _ = task.await;
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some((stop, _)) = &self.heartbeat {
            stop.cancel();
        }
    }
}
