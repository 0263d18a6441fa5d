//! Routing as verification sees it: the question it asks once dedup may
//! store an event (which of the source's targets want it?), on the request
//! view it already built, and the answer it hands over in the event's
//! facts. The rules are the targets' (`target::route`); a source carries
//! them as a [`Router`], so verification decides when routing runs, never
//! what it decides.
//!
//! Rule: nothing here knows a rule; it only asks.

use super::fields::Fields;
use std::fmt::Debug;

/// A source's routes, asked once per stored event.
pub trait Router: Debug + Send + Sync {
    /// The targets that want an event of type `event_type` with these
    /// fields, in config order, with their ordering keys.
    fn select(&self, event_type: Option<&str>, fields: &Fields<'_>) -> Routed;
}

/// The targets whose routes want an event, in config order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routed {
    pub targets: Vec<String>,
    /// Parallel to `targets`: `None` for a target without `order_by`;
    /// for one with it, the event's ordering key, or `""` when the event
    /// holds none (delivered unordered; see `store::NewEvent`).
    pub order_keys: Vec<Option<String>>,
}

/// A source no target subscribes to (tests, fuzzing).
#[derive(Debug)]
pub struct NoRoutes;

impl Router for NoRoutes {
    fn select(&self, _: Option<&str>, _: &Fields<'_>) -> Routed {
        Routed::default()
    }
}
