//! Stats: what each instance counted, as typed outcomes.
//!
//! Rule: counting costs no database round trip and no lock per request.
//! Every counter is an atomic that exists from start-up (the keys come from
//! the config), so a count is one relaxed add; a reload that adds a source,
//! a target or an API adds its counters ([`Counters::extend`]) and never
//! drops one (their unflushed counts still reach the ledger). The vocabulary is closed:
//! [`Outcome`], [`RejectReason`] and [`DeliveryOutcome`] are enums, so a
//! misspelt counter cannot compile. This module imports nothing from the
//! rest of the crate: ingest and deliver count, `app` flushes the deltas to
//! the ledger, `admin` renders them.

pub mod apis;
pub mod families;
pub mod latency;
mod names;
pub mod requests;

pub use names::{AttemptClass, DeliveryOutcome, Failure, Layer, Outcome, RejectReason};

use arc_swap::ArcSwap;
use foldhash::HashMap as FastMap;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// One counter's change since the last flush: (source, counter name, delta).
pub type Delta = (String, String, i64);

/// Per-source counters that are not rejections or deliveries; the names
/// are the keys in the ledger's counters table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counter {
    Received,
    Unique,
    DuplicateCache,
    DuplicateLedger,
    DuplicateBody,
    Conflict,
    InFlight,
    Unavailable,
    Unrouted,
    Handshakes,
}

const COUNTERS: [(Counter, &str); 10] = [
    (Counter::Received, "received"),
    (Counter::Unique, "unique"),
    (Counter::DuplicateCache, "duplicates.cache"),
    (Counter::DuplicateLedger, "duplicates.ledger"),
    (Counter::DuplicateBody, "duplicates.body"),
    (Counter::Conflict, "conflicts"),
    (Counter::InFlight, "inflight_rejected"),
    (Counter::Unavailable, "unavailable"),
    (Counter::Unrouted, "unrouted"),
    (Counter::Handshakes, "handshakes"),
];

#[derive(Default)]
struct TargetCounters {
    /// Indexed by `DeliveryOutcome as usize`.
    by_outcome: [AtomicI64; DeliveryOutcome::ALL.len()],
    /// Attempt latency (`targets.<name>.latency_le_<ms>`).
    latency: latency::Cells,
}

#[derive(Default)]
struct SourceCells {
    fixed: [AtomicI64; COUNTERS.len()],
    types: TypeCounts,
    /// Indexed by `RejectReason as usize`.
    rejected: [AtomicI64; RejectReason::ALL.len()],
}

/// A source's cells and its targets'; every cell is shared by `Arc`, so
/// the entry a reload builds for a source that gained a target counts into
/// the same atomics as the one it replaces.
struct SourceCounters {
    cells: Arc<SourceCells>,
    targets: FastMap<String, Arc<TargetCounters>>,
}

impl std::ops::Deref for SourceCounters {
    type Target = SourceCells;
    fn deref(&self) -> &SourceCells {
        &self.cells
    }
}

impl SourceCounters {
    /// A copy sharing every cell, to add targets to.
    fn grown(&self) -> Self {
        Self {
            cells: self.cells.clone(),
            targets: self.targets.clone(),
        }
    }
}

/// Counters by source, replaced whole (copy on write) when a reload adds one.
/// Looked up on every request by the source its path names (a request
/// never inserts): foldhash (Cargo.toml).
type SourceMap = FastMap<String, Arc<SourceCounters>>;

/// This instance's unflushed counts.
pub struct Counters {
    sources: ArcSwap<SourceMap>,
    /// Per proxied API (`stats/apis.rs`); empty until `with_apis`.
    apis: ArcSwap<HashMap<String, Arc<apis::ApiCells>>>,
    /// Serialises [`Counters::extend`] (copy, add, swap).
    growing: std::sync::Mutex<()>,
    /// Held by a flush from taking the deltas until the ledger has them, and
    /// by a snapshot while it reads: otherwise a snapshot taken mid-flush
    /// would miss the deltas in transit (zeroed here, not yet in the table).
    flushing: tokio::sync::Mutex<()>,
}

impl Counters {
    /// Counters for every `(source, its targets)`.
    pub fn new<'a>(sources: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Self {
        let c = Self {
            sources: ArcSwap::default(),
            apis: ArcSwap::default(),
            growing: std::sync::Mutex::new(()),
            flushing: tokio::sync::Mutex::new(()),
        };
        c.extend(sources, []);
        c
    }

    /// Adds counters for the sources, their targets and the APIs not counted
    /// yet (a reload); existing ones keep their counts.
    pub fn extend<'a>(
        &self,
        sources: impl IntoIterator<Item = (&'a str, &'a [String])>,
        apis: impl IntoIterator<Item = &'a str>,
    ) {
        let _one_at_a_time = self.growing.lock().unwrap_or_else(|p| p.into_inner());
        let mut map: SourceMap = (**self.sources.load()).clone();
        for (name, targets) in sources {
            let known = map.get(name);
            let missing = targets
                .iter()
                .any(|t| known.is_none_or(|s| !s.targets.contains_key(t)));
            if known.is_some() && !missing {
                continue;
            }
            let mut sc = match known {
                None => SourceCounters {
                    cells: Arc::default(),
                    targets: FastMap::default(),
                },
                Some(old) => old.grown(),
            };
            for t in targets {
                sc.targets.entry(t.clone()).or_default();
            }
            map.insert(name.to_owned(), Arc::new(sc));
        }
        self.sources.store(Arc::new(map));
        let mut api_map = (**self.apis.load()).clone();
        for a in apis {
            api_map.entry(a.to_owned()).or_default();
        }
        self.apis.store(Arc::new(api_map));
    }

    /// Counts one request to a known source with what became of it.
    pub fn record(&self, source: &str, outcome: Outcome) {
        let sources = self.sources.load();
        let Some(s) = sources.get(source) else {
            return;
        };
        // A handshake or ping is not an event received: counted apart.
        if outcome == Outcome::Answered {
            s.fixed[Counter::Handshakes as usize].fetch_add(1, Ordering::Relaxed);
            return;
        }
        s.fixed[Counter::Received as usize].fetch_add(1, Ordering::Relaxed);
        Self::count(s, outcome);
    }

    /// Counts what became of one more event of a request already counted
    /// as received (the further items of a split batch).
    pub fn tally(&self, source: &str, outcome: Outcome) {
        if let Some(s) = self.sources.load().get(source) {
            Self::count(s, outcome);
        }
    }

    /// Counts `outcome` into a source's cells, found once by the caller.
    fn count(s: &SourceCounters, outcome: Outcome) {
        let add = |c: Counter| s.fixed[c as usize].fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::New => {
                add(Counter::Unique);
            }
            Outcome::Duplicate { layer, conflict } => {
                add(match layer {
                    Layer::Cache => Counter::DuplicateCache,
                    Layer::Ledger => Counter::DuplicateLedger,
                    Layer::Body => Counter::DuplicateBody,
                });
                if conflict {
                    add(Counter::Conflict);
                }
            }
            Outcome::Rejected(r) => {
                s.rejected[r as usize].fetch_add(1, Ordering::Relaxed);
            }
            Outcome::InFlight => {
                add(Counter::InFlight);
            }
            Outcome::Unavailable => {
                add(Counter::Unavailable);
            }
            Outcome::Answered | Outcome::UnknownSource | Outcome::Timeout | Outcome::BadRequest => {
            }
        }
    }

    /// Counts a handshake answered outside `POST` (a `GET` challenge).
    pub fn handshake(&self, source: &str) {
        if let Some(s) = self.sources.load().get(source) {
            s.fixed[Counter::Handshakes as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a new event that no target's route matched (stored, not
    /// delivered anywhere).
    pub fn unrouted(&self, source: &str) {
        if let Some(s) = self.sources.load().get(source) {
            s.fixed[Counter::Unrouted as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Seeds each source's admitted type names with those whose counter
    /// rows the ledger already holds (`rows` as `Tallies::counters` gives
    /// them), so a restart does not admit another [`MAX_TYPES`] new names.
    pub fn seed_types(&self, rows: &[(String, String, i64)]) {
        let sources = self.sources.load();
        for (source, name, _) in rows {
            if let (Some(t), Some(s)) = (name.strip_prefix(TYPE_PREFIX), sources.get(source)) {
                s.types.seed(t);
            }
        }
    }

    /// Counts a new event under its type (`/stats` `unique_by_type`).
    pub fn typed(&self, source: &str, event_type: Option<&str>) {
        if let Some(s) = self.sources.load().get(source) {
            s.types.add(event_type.unwrap_or(UNTYPED), 1);
        }
    }

    /// Counts one finished delivery attempt that took `latency_ms`.
    pub fn delivery(&self, source: &str, target: &str, outcome: DeliveryOutcome, latency_ms: i64) {
        let sources = self.sources.load();
        let Some(t) = sources.get(source).and_then(|s| s.targets.get(target)) else {
            return;
        };
        t.latency.observe(latency_ms);
        t.by_outcome[outcome as usize].fetch_add(1, Ordering::Relaxed);
        if outcome == DeliveryOutcome::Dead {
            t.by_outcome[DeliveryOutcome::Failed as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes this instance's deltas and hands them to `write` (the ledger);
    /// if it fails they are put back for the next flush.
    pub async fn flush<E>(
        &self,
        write: impl AsyncFnOnce(&[Delta]) -> Result<(), E>,
    ) -> Result<(), E> {
        let _in_transit = self.flushing.lock().await;
        let deltas = self.collect(true);
        if deltas.is_empty() {
            return Ok(());
        }
        let result = write(&deltas).await;
        if result.is_err() {
            self.restore(&deltas);
        }
        result
    }

    /// Totals per (source, counter name): what `read` returns (the ledger's
    /// flushed sums) plus this instance's unflushed deltas, read while no
    /// flush is in transit.
    pub async fn totals<E>(
        &self,
        read: impl AsyncFnOnce() -> Result<Vec<Delta>, E>,
    ) -> Result<HashMap<(String, String), i64>, E> {
        let mut totals: HashMap<(String, String), i64> = HashMap::new();
        let _no_flush_in_transit = self.flushing.lock().await;
        for (s, n, v) in read().await?.into_iter().chain(self.collect(false)) {
            *totals.entry((s, n)).or_default() += v;
        }
        Ok(totals)
    }

    /// Reads (and with `take`, zeroes) every non-zero counter.
    fn collect(&self, take: bool) -> Vec<Delta> {
        let read = |a: &AtomicI64| {
            if take {
                a.swap(0, Ordering::Relaxed)
            } else {
                a.load(Ordering::Relaxed)
            }
        };
        let mut out = Vec::new();
        for (source, s) in self.sources.load().iter() {
            let mut push = |name: String, v: i64| {
                if v != 0 {
                    out.push((source.clone(), name, v));
                }
            };
            for (i, (_, name)) in COUNTERS.iter().enumerate() {
                push((*name).to_owned(), read(&s.fixed[i]));
            }
            for r in RejectReason::ALL {
                push(r.counter_name(), read(&s.rejected[r as usize]));
            }
            for (target, t) in &s.targets {
                for o in DeliveryOutcome::ALL {
                    push(o.counter_name(target), read(&t.by_outcome[o as usize]));
                }
                for (i, cell) in t.latency.0.iter().enumerate() {
                    push(
                        format!("targets.{target}.{}", latency::bucket_name(i)),
                        read(cell),
                    );
                }
            }
            for (t, v) in s.types.read(take) {
                push(format!("{TYPE_PREFIX}{t}"), v);
            }
        }
        self.collect_apis(&read, &mut out);
        out
    }

    /// The counter cell a flushed name belongs to, if it is still configured.
    fn cell<'m>(
        sources: &'m SourceMap,
        apis: &'m HashMap<String, Arc<apis::ApiCells>>,
        source: &str,
        name: &str,
    ) -> Option<&'m AtomicI64> {
        if name.starts_with("api.") {
            return apis::api_cell(apis, source, name);
        }
        let s = sources.get(source)?;
        if let Some(i) = COUNTERS.iter().position(|(_, n)| *n == name) {
            return Some(&s.fixed[i]);
        }
        if let Some(r) = RejectReason::ALL.iter().find(|r| r.counter_name() == name) {
            return Some(&s.rejected[*r as usize]);
        }
        let (target, what) = name.strip_prefix("targets.")?.rsplit_once('.')?;
        if let Some(i) = latency::bucket_of_name(what) {
            return Some(&s.targets.get(target)?.latency.0[i]);
        }
        let o = DeliveryOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == what)?;
        Some(&s.targets.get(target)?.by_outcome[o as usize])
    }

    fn restore(&self, deltas: &[Delta]) {
        let (sources, apis) = (self.sources.load(), self.apis.load());
        for (source, name, v) in deltas {
            if let (Some(t), Some(s)) = (name.strip_prefix(TYPE_PREFIX), sources.get(source)) {
                s.types.add(t, *v);
            } else if let Some(c) = Self::cell(&sources, &apis, source, name) {
                c.fetch_add(*v, Ordering::Relaxed);
            }
        }
    }
}

/// Counter names of the per-type counts: `types.<event type>`.
pub const TYPE_PREFIX: &str = "types.";
/// The type counted for an event whose provider names none.
pub const UNTYPED: &str = "untyped";
/// Most distinct type names one source ever counts (over the process's
/// life, seeded at start with the names the ledger already holds: see
/// [`Counters::seed_types`]); later new names are counted under
/// [`OTHER_TYPES`]. Types are read only from verified requests, but some
/// providers name the type in a header outside the signature (GitHub,
/// Shopify, WooCommerce), so one captured request replayed with made-up
/// names must not mint a permanent counter row per name.
pub const MAX_TYPES: usize = 256;
/// Where types beyond [`MAX_TYPES`] are counted.
pub const OTHER_TYPES: &str = "other";

/// Per source, the `types.<name>` counter rows beyond the [`MAX_TYPES`]
/// with the highest counts (`types.other` is never one), at most `batch`
/// names per source: what the purge loop folds into `types.other`, so rows
/// minted before the cap held over all time (or by several replicas) do not
/// stay forever.
pub fn excess_types(rows: &[(String, String, i64)], batch: usize) -> Vec<(String, Vec<String>)> {
    let mut by_source: HashMap<&str, Vec<(&str, i64)>> = HashMap::new();
    for (source, name, v) in rows {
        if name.starts_with(TYPE_PREFIX) && name.as_str() != format!("{TYPE_PREFIX}{OTHER_TYPES}") {
            by_source.entry(source).or_default().push((name, *v));
        }
    }
    let mut out: Vec<(String, Vec<String>)> = by_source
        .into_iter()
        .filter(|(_, names)| names.len() > MAX_TYPES)
        .map(|(source, mut names)| {
            // Highest counts stay; ties by name, so every replica agrees.
            names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let excess = names[MAX_TYPES..]
                .iter()
                .take(batch)
                .map(|(n, _)| (*n).to_owned())
                .collect();
            (source.to_owned(), excess)
        })
        .collect();
    out.sort();
    out
}

/// New events per event type. The vocabulary is open (the provider's), so
/// unlike the atomics above this is a map behind a lock; it is taken once
/// per new event, not per request, and held for one map update.
#[derive(Default)]
struct TypeCounts(std::sync::Mutex<Types>);

#[derive(Default)]
struct Types {
    /// Counts since the last flush.
    counts: FastMap<String, i64>,
    /// Every name admitted so far (at most [`MAX_TYPES`]); kept across
    /// flushes, so the cap holds over all time, not per flush.
    known: foldhash::HashSet<String>,
}

impl TypeCounts {
    fn add(&self, event_type: &str, n: i64) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Counted since the last flush: admitted already (a key of `counts`
        // is an admitted name or OTHER_TYPES, which counts as itself).
        if let Some(c) = t.counts.get_mut(event_type) {
            *c += n;
            return;
        }
        let admitted = t.known.contains(event_type)
            || (t.known.len() < MAX_TYPES && t.known.insert(event_type.to_owned()));
        let key = if admitted { event_type } else { OTHER_TYPES };
        *t.counts.entry(key.to_owned()).or_default() += n;
    }

    /// Marks `event_type` as already counted (its row exists).
    fn seed(&self, event_type: &str) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if t.known.len() < MAX_TYPES && event_type != OTHER_TYPES {
            t.known.insert(event_type.to_owned());
        }
    }

    /// The counts (with `take`, drained).
    fn read(&self, take: bool) -> Vec<(String, i64)> {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if take {
            t.counts.drain().collect()
        } else {
            t.counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
        }
    }
}

#[cfg(test)]
mod tests;
