use super::*;

fn counters() -> Counters {
    let targets = vec!["billing".to_owned()];
    Counters::new([("stripe", targets.as_slice())])
}

#[test]
fn every_enum_index_matches_its_place_in_all() {
    for (i, r) in RejectReason::ALL.iter().enumerate() {
        assert_eq!(*r as usize, i, "{r:?}");
    }
    for (i, o) in DeliveryOutcome::ALL.iter().enumerate() {
        assert_eq!(*o as usize, i, "{o:?}");
    }
}

#[test]
fn an_outcome_counts_received_and_its_own_counter() {
    let c = counters();
    c.record("stripe", Outcome::New);
    c.record(
        "stripe",
        Outcome::Duplicate {
            layer: Layer::Cache,
            conflict: true,
        },
    );
    c.record("stripe", Outcome::Rejected(RejectReason::InvalidSignature));
    c.record("unknown", Outcome::New);
    let mut got = c.collect(false);
    got.sort();
    let want: Vec<Delta> = [
        ("conflicts", 1),
        ("duplicates.cache", 1),
        ("received", 3),
        ("rejected.invalid_signature", 1),
        ("unique", 1),
    ]
    .into_iter()
    .map(|(n, v)| ("stripe".to_owned(), n.to_owned(), v))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_dead_delivery_is_also_a_failed_attempt() {
    let c = counters();
    c.delivery("stripe", "billing", DeliveryOutcome::Dead, 12);
    c.delivery("stripe", "billing", DeliveryOutcome::Delivered, 12);
    let mut got = c.collect(true);
    got.sort();
    let names: Vec<_> = got.iter().map(|(_, n, v)| (n.as_str(), *v)).collect();
    assert_eq!(
        names,
        [
            ("targets.billing.dead", 1),
            ("targets.billing.delivered", 1),
            ("targets.billing.failed_attempts", 1),
            ("targets.billing.latency_le_25", 2),
        ]
    );
    assert!(c.collect(false).is_empty(), "take zeroes the counters");
}

#[tokio::test]
async fn a_failed_flush_keeps_the_deltas_for_the_next_one() {
    let c = counters();
    c.record("stripe", Outcome::New);
    let failed: Result<(), &str> = c.flush(async |_d: &[Delta]| Err("ledger down")).await;
    assert!(failed.is_err());
    let mut written = Vec::new();
    let ok: Result<(), &str> = c
        .flush(async |d: &[Delta]| {
            written.extend_from_slice(d);
            Ok(())
        })
        .await;
    assert!(ok.is_ok());
    written.sort();
    assert_eq!(
        written,
        [
            ("stripe".to_owned(), "received".to_owned(), 1),
            ("stripe".to_owned(), "unique".to_owned(), 1)
        ]
    );
}

#[test]
fn new_events_are_counted_by_type_and_a_failed_flush_puts_them_back() {
    let c = counters();
    c.typed("stripe", Some("invoice.paid"));
    c.typed("stripe", Some("invoice.paid"));
    c.typed("stripe", None);
    c.typed("unknown", Some("x"));
    let mut got = c.collect(false);
    got.sort();
    let want: Vec<Delta> = vec![
        ("stripe".into(), "types.invoice.paid".into(), 2),
        ("stripe".into(), "types.untyped".into(), 1),
    ];
    assert_eq!(got, want);
    let taken = c.collect(true);
    assert!(c.collect(false).is_empty());
    c.restore(&taken);
    let mut back = c.collect(false);
    back.sort();
    assert_eq!(back, want);
}

#[test]
fn types_beyond_the_cap_are_counted_as_other() {
    let c = counters();
    for i in 0..MAX_TYPES + 10 {
        c.typed("stripe", Some(&format!("t{i}")));
    }
    c.typed("stripe", Some("t0"));
    let got = c.collect(true);
    assert_eq!(got.len(), MAX_TYPES + 1);
    let count = |n: &str| got.iter().find(|d| d.1 == n).map(|d| d.2);
    assert_eq!(count("types.other"), Some(10));
    assert_eq!(count("types.t0"), Some(2));
    // Issue #32: the cap holds over all time, not per flush: a drained map
    // still admits no new name, while a known one keeps its own row.
    c.typed("stripe", Some("late"));
    c.typed("stripe", Some("t5"));
    let mut after = c.collect(true);
    after.sort();
    assert_eq!(
        after,
        [
            ("stripe".into(), "types.other".into(), 1),
            ("stripe".into(), "types.t5".into(), 1)
        ]
    );
}

#[test]
fn type_names_the_ledger_holds_count_against_the_cap_after_a_restart() {
    let c = counters();
    let rows: Vec<(String, String, i64)> = (0..MAX_TYPES)
        .map(|i| ("stripe".to_owned(), format!("types.old{i}"), 1))
        .collect();
    c.seed_types(&rows);
    c.typed("stripe", Some("brand_new"));
    c.typed("stripe", Some("old7"));
    let mut got = c.collect(true);
    got.sort();
    assert_eq!(
        got,
        [
            ("stripe".into(), "types.old7".into(), 1),
            ("stripe".into(), "types.other".into(), 1)
        ]
    );
}

#[test]
fn excess_types_are_the_lowest_counts_beyond_the_cap_never_other() {
    let mut rows: Vec<(String, String, i64)> = (0..MAX_TYPES + 5)
        .map(|i| ("gh".to_owned(), format!("types.t{i:03}"), i as i64))
        .collect();
    rows.push(("gh".into(), "types.other".into(), 0));
    rows.push(("gh".into(), "received".into(), 0));
    rows.push(("small".into(), "types.a".into(), 1));
    let got = excess_types(&rows, 3);
    assert_eq!(
        got,
        [(
            "gh".to_owned(),
            // Beyond the cap, highest counts first; later passes take the rest.
            vec![
                "types.t004".to_owned(),
                "types.t003".into(),
                "types.t002".into()
            ]
        )]
    );
    assert_eq!(excess_types(&rows, 100)[0].1.len(), 5);
}

#[test]
fn a_reload_adds_counters_and_keeps_the_counts_already_made() {
    let c = Counters::new([("stripe", &["a".to_owned()][..])]);
    c.record("stripe", Outcome::New);
    c.delivery("stripe", "a", DeliveryOutcome::Delivered, 12);
    // Unknown before the reload: not counted.
    c.record("github", Outcome::New);
    c.extend(
        [
            ("stripe", &["a".to_owned(), "b".to_owned()][..]),
            ("github", &[][..]),
        ],
        ["payments"],
    );
    c.record("stripe", Outcome::New);
    c.record("github", Outcome::New);
    c.delivery("stripe", "b", DeliveryOutcome::Delivered, 12);
    c.delivery("stripe", "a", DeliveryOutcome::Delivered, 12);
    c.api("payments", crate::stats::apis::ApiOutcome::Passthrough);
    let got: std::collections::HashMap<(String, String), i64> = c
        .collect(false)
        .into_iter()
        .map(|(s, n, v)| ((s, n), v))
        .collect();
    let get = |s: &str, n: &str| got.get(&(s.to_owned(), n.to_owned())).copied();
    assert_eq!(get("stripe", "unique"), Some(2));
    assert_eq!(get("github", "unique"), Some(1));
    assert_eq!(get("stripe", "targets.a.delivered"), Some(2));
    assert_eq!(get("stripe", "targets.b.delivered"), Some(1));
    assert_eq!(get("payments", "api.passthrough"), Some(1));
}

#[test]
fn attempts_are_classed_by_status_then_by_how_they_failed() {
    use AttemptClass as C;
    let cases = [
        (Some(200), None, C::Success),
        (Some(204), None, C::Success),
        (Some(404), Some(Failure::Other), C::ClientError),
        (Some(429), Some(Failure::Other), C::ClientError),
        (Some(500), Some(Failure::Other), C::ServerError),
        (Some(503), Some(Failure::Other), C::ServerError),
        (Some(302), Some(Failure::Other), C::Other),
        (None, Some(Failure::Timeout), C::Timeout),
        (None, Some(Failure::Connect), C::ConnectError),
        (None, Some(Failure::Other), C::Other),
        (None, None, C::Confirmed),
    ];
    for (status, failure, class) in cases {
        assert_eq!(
            AttemptClass::of(status, failure),
            class,
            "{status:?} {failure:?}"
        );
    }
    for (i, c) in AttemptClass::ALL.iter().enumerate() {
        assert_eq!(*c as usize, i);
    }
}
