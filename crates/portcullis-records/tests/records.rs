//! The records on both databases: every case runs on an SQLite file and on a PostgreSQL
//! server of the test's own (started on a free port as an unprivileged user).

use portcullis_records::{
    Backend, CorrectableQuery, Follower, Hasher, KeySpec, KeyState, LedgerCorrection, LedgerMoney,
    LedgerRow, LedgerUsage, NewKey, Outcome, PendingQuery, Records, RecordsError, Replica,
    TenantSpec, UsageQuery,
};
use portcullis_test_support::postgres::PostgresServer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Generous: these tests are about what arrives, not how fast.
const GENEROUS: Duration = Duration::from_secs(10);

fn hasher() -> Hasher {
    Hasher::new(b"test-hash-secret-0123456789").unwrap()
}

struct Db {
    url: String,
    _dir: Option<TempDir>,
    pg: Option<PostgresServer>,
}

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sqlite() -> Db {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pcx-records-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Db {
        url: format!("sqlite://{}", dir.join("records.db").display()),
        _dir: Some(TempDir(dir)),
        pg: None,
    }
}

fn postgres() -> Db {
    let pg = PostgresServer::start();
    Db {
        url: pg.url(),
        _dir: None,
        pg: Some(pg),
    }
}

async fn open(db: &Db) -> Records {
    Records::open(&db.url, hasher()).await.expect("open")
}

fn key(label: &str, tenant: Option<&str>) -> NewKey {
    NewKey {
        label: label.into(),
        tenant: tenant.map(Into::into),
        spec: KeySpec {
            rpm: Some(60),
            concurrency: Some(2),
            ..KeySpec::default()
        },
        expires_at: None,
    }
}

/// Runs `case` on SQLite and on PostgreSQL.
macro_rules! both {
    ($name:ident, $case:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$case(super::sqlite()).await;
            }
            #[tokio::test]
            async fn postgres() {
                super::$case(super::postgres()).await;
            }
        }
    };
}

/// K1: migrations apply to an empty database; reopening applies nothing twice and loses
/// nothing.
async fn migrations_apply_from_empty_and_a_reopen_keeps_everything(db: Db) {
    let r = open(&db).await;
    let (k, _) = r.create_key("admin", key("a", None), 1).await.unwrap();
    r.create_tenant("admin", "acme", TenantSpec::default(), 1)
        .await
        .unwrap();
    r.close().await;
    let r = open(&db).await;
    let c = r.changes_since(0).await.unwrap();
    assert_eq!(c.keys, vec![k]);
    assert_eq!(c.tenants.len(), 1);
    assert_eq!(c.revision, 2);
}
both!(
    k1_migrations_apply_from_empty_and_a_reopen_keeps_everything,
    migrations_apply_from_empty_and_a_reopen_keeps_everything
);

/// K1: a database of a newer schema than this build knows stops the open, naming it.
async fn a_newer_schema_stops_the_open(db: Db) {
    open(&db).await.close().await;
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let future = match Backend::of(&db.url).unwrap() {
        Backend::Sqlite => {
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (9999, 'future', 1, x'00', 0)"
        }
        Backend::Postgres => {
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (9999, 'future', TRUE, '\\x00'::bytea, 0)"
        }
    };
    sqlx::query(future).execute(&pool).await.unwrap();
    pool.close().await;
    match Records::open(&db.url, hasher()).await {
        Err(RecordsError::Schema(m)) => {
            assert!(m.contains("9999") && m.contains("newer"), "{m}")
        }
        other => panic!("expected a schema error, got {other:?}"),
    }
}
both!(
    k1_a_newer_schema_stops_the_open,
    a_newer_schema_stops_the_open
);

/// K1: a file that is not a database stops the open with an error naming it.
#[tokio::test]
async fn k1_a_file_that_is_not_a_database_stops_the_open() {
    let db = sqlite();
    let path = db.url.strip_prefix("sqlite://").unwrap();
    std::fs::write(path, vec![0x42u8; 8192]).unwrap();
    let e = Records::open(&db.url, hasher())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("records.db"), "{e}");
}

/// K2: only the keyed hash of a secret is stored; the secret opens the key through it.
async fn only_the_hash_of_a_secret_is_stored(db: Db) {
    let r = open(&db).await;
    let (k, secret) = r
        .create_key("admin", key("a", Some("acme")), 1)
        .await
        .unwrap();
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    use sqlx::Row;
    for table in ["pcx_keys", "pcx_key_secrets", "pcx_audit"] {
        let rows = sqlx::query(&format!("SELECT * FROM {table}"))
            .fetch_all(&pool)
            .await
            .unwrap();
        assert!(!rows.is_empty());
        for row in rows {
            for i in 0..row.len() {
                let v: Option<String> = row.try_get(i).ok().flatten();
                assert!(
                    !v.unwrap_or_default().contains(&secret.expose()[7..]),
                    "{table} holds the secret"
                );
            }
        }
    }
    let hash: String = sqlx::query_scalar("SELECT hash FROM pcx_key_secrets")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(hash, hasher().digest(secret.expose()).to_hex());
    let mut replica = Replica::default();
    replica.apply(r.changes_since(0).await.unwrap());
    assert_eq!(
        replica
            .open(&hasher().digest(secret.expose()), 2)
            .map(|k| &k.id),
        Some(&k.id)
    );
    assert!(replica.open(&hasher().digest("sk-pcx-guess"), 2).is_none());
}
both!(
    k2_only_the_hash_of_a_secret_is_stored,
    only_the_hash_of_a_secret_is_stored
);

/// K3/K4: a second instance catches up by revision: creation, a lowered limit and a
/// revocation made on one reach the other's replica; a revoked key cannot be changed.
async fn a_second_instance_catches_up_by_revision(db: Db) {
    let a = open(&db).await;
    let b = open(&db).await;
    let mut replica = Replica::default();
    replica.apply(b.changes_since(0).await.unwrap());
    let (k, secret) = a.create_key("admin", key("a", None), 1).await.unwrap();
    let digest = hasher().digest(secret.expose());
    assert!(replica.open(&digest, 2).is_none());
    replica.apply(b.changes_since(replica.revision()).await.unwrap());
    assert_eq!(replica.open(&digest, 2).unwrap().spec.rpm, Some(60));
    a.update_key("admin", &k.id, None, 3, |k| {
        k.spec.rpm = Some(5);
        Ok(())
    })
    .await
    .unwrap();
    replica.apply(b.changes_since(replica.revision()).await.unwrap());
    assert_eq!(replica.open(&digest, 4).unwrap().spec.rpm, Some(5));
    a.revoke_key("admin", &k.id, None, 5).await.unwrap();
    let c = b.changes_since(replica.revision()).await.unwrap();
    assert_eq!(c.keys.len(), 1, "only the revoked row is read again");
    replica.apply(c);
    assert!(replica.open(&digest, 6).is_none());
    let again = a.update_key("admin", &k.id, None, 7, |_| Ok(())).await;
    assert!(matches!(again, Err(RecordsError::Conflict(_))), "{again:?}");
    let audit = a.audit(10).await.unwrap();
    let actions: Vec<_> = audit.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["key.revoke", "key.update", "key.create"]);
    assert!(audit.iter().all(|r| r.actor == "admin" && r.target == k.id));
}
both!(
    k4_a_second_instance_catches_up_by_revision,
    a_second_instance_catches_up_by_revision
);

/// K3: a patch is checked (400 naming the field) and a tenant's scope hides other
/// tenants' keys (not found); pages follow the id cursor.
async fn patches_are_checked_scopes_hide_and_pages_follow_the_cursor(db: Db) {
    let r = open(&db).await;
    let (a, _) = r
        .create_key("admin", key("a", Some("acme")), 1)
        .await
        .unwrap();
    let (b, _) = r
        .create_key("admin", key("b", Some("other")), 1)
        .await
        .unwrap();
    let bad = r
        .update_key("admin", &a.id, None, 2, |k| {
            k.spec.rpm = Some(0);
            Ok(())
        })
        .await;
    assert!(
        matches!(&bad, Err(RecordsError::Invalid(i)) if i.field == "rpm"),
        "{bad:?}"
    );
    assert_eq!(
        r.key(&a.id, None).await.unwrap().spec.rpm,
        Some(60),
        "nothing written"
    );
    assert_eq!(
        r.key(&b.id, Some("acme")).await,
        Err(RecordsError::NotFound)
    );
    assert!(matches!(
        r.revoke_key("t", &b.id, Some("acme"), 2).await,
        Err(RecordsError::NotFound)
    ));
    assert!(matches!(
        r.rotate_key("t", &b.id, Some("acme"), 0, 2).await,
        Err(RecordsError::NotFound)
    ));
    assert_eq!(r.key(&b.id, None).await.unwrap().state, KeyState::Active);
    for i in 0..5 {
        r.create_key("admin", key(&format!("p{i}"), Some("acme")), 1)
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = r.keys(Some("acme"), cursor.as_deref(), 2).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        cursor = page.last().map(|k| k.id.clone());
        seen.extend(page.into_iter().map(|k| k.id));
    }
    assert_eq!(seen.len(), 6, "every key of acme once: {seen:?}");
    assert!(!seen.contains(&b.id));
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted);
}
both!(
    k3_patches_are_checked_scopes_hide_and_pages_follow_the_cursor,
    patches_are_checked_scopes_hide_and_pages_follow_the_cursor
);

/// K5: after a rotation the old secret opens the key until the grace ends, the new one
/// from the start.
async fn rotation_keeps_the_old_secret_through_its_grace(db: Db) {
    let r = open(&db).await;
    let (k, old) = r.create_key("admin", key("a", None), 1_000).await.unwrap();
    let new = r
        .rotate_key("admin", &k.id, None, 30_000, 10_000)
        .await
        .unwrap();
    let mut replica = Replica::default();
    replica.apply(r.changes_since(0).await.unwrap());
    let (old, new) = (hasher().digest(old.expose()), hasher().digest(new.expose()));
    assert!(replica.open(&old, 39_999).is_some());
    assert!(replica.open(&old, 40_000).is_none());
    assert!(replica.open(&new, 40_000).is_some());
    // A second rotation with no grace ends both older secrets at once.
    let newest = r.rotate_key("admin", &k.id, None, 0, 20_000).await.unwrap();
    replica.apply(r.changes_since(replica.revision()).await.unwrap());
    assert!(replica.open(&old, 20_000).is_none() && replica.open(&new, 20_000).is_none());
    assert!(
        replica
            .open(&hasher().digest(newest.expose()), 20_000)
            .is_some()
    );
}
both!(
    k5_rotation_keeps_the_old_secret_through_its_grace,
    rotation_keeps_the_old_secret_through_its_grace
);

/// K6: a management token opens its tenant, and nothing else.
async fn tokens_name_their_tenant(db: Db) {
    let r = open(&db).await;
    r.create_tenant("admin", "acme", TenantSpec::default(), 1)
        .await
        .unwrap();
    let dup = r
        .create_tenant("admin", "acme", TenantSpec::default(), 1)
        .await;
    assert!(
        matches!(&dup, Err(RecordsError::Conflict(m)) if m.contains("acme")),
        "{dup:?}"
    );
    let (id, token) = r.create_token("admin", "acme", 2).await.unwrap();
    let mut replica = Replica::default();
    replica.apply(r.changes_since(0).await.unwrap());
    let t = replica.token(&hasher().digest(token.expose())).unwrap();
    assert_eq!((t.id.as_str(), t.tenant.as_str()), (id.as_str(), "acme"));
    assert!(replica.token(&hasher().digest("pcx-mt-guess")).is_none());
    let updated = r
        .update_tenant("admin", "acme", 3, |s| {
            s.weight = Some(4);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(updated.spec.weight, Some(4));
    assert_eq!(
        r.update_tenant("admin", "nobody", 3, |_| Ok(())).await,
        Err(RecordsError::NotFound)
    );
}
both!(k6_tokens_name_their_tenant, tokens_name_their_tenant);

/// What a follower published last.
type Seen = Arc<Mutex<Replica>>;

async fn follower(r: Arc<Records>, poll: Duration) -> (Follower, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let f = Follower::start(r, poll, move |rep| *s.lock().unwrap() = rep.clone())
        .await
        .unwrap();
    (f, seen)
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < GENEROUS,
            "{what}: not within {GENEROUS:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// K4: on PostgreSQL a change made by one instance reaches another's follower by
/// notification — its poll is set to a minute here, so only the notification can
/// bring it.
#[tokio::test]
async fn k4_postgres_changes_reach_other_instances_by_notification() {
    let db = postgres();
    let a = open(&db).await;
    let b = Arc::new(open(&db).await);
    let (_f, seen) = follower(b, Duration::from_secs(60)).await;
    // A change made before the listener is connected is read when it connects (it
    // wakes the follower once then); the revocation below comes by notification.
    let (k, secret) = a.create_key("admin", key("a", None), 1).await.unwrap();
    let digest = hasher().digest(secret.expose());
    wait_for("the new key", || {
        seen.lock().unwrap().open(&digest, 2).is_some()
    })
    .await;
    a.revoke_key("admin", &k.id, None, 3).await.unwrap();
    wait_for("the revocation", || {
        seen.lock().unwrap().open(&digest, 4).is_none()
    })
    .await;
}

/// K4: on SQLite (no notifications between processes) the poll brings changes; in this
/// process `changed` does at once.
#[tokio::test]
async fn k4_sqlite_changes_arrive_by_poll_and_by_changed() {
    let db = sqlite();
    let a = open(&db).await;
    let b = Arc::new(open(&db).await);
    let (fb, seen) = follower(b, Duration::from_millis(100)).await;
    let (_, secret) = a.create_key("admin", key("a", None), 1).await.unwrap();
    let digest = hasher().digest(secret.expose());
    wait_for("the new key by poll", || {
        seen.lock().unwrap().open(&digest, 2).is_some()
    })
    .await;
    let c = Arc::new(open(&db).await);
    let (fc, seen_c) = follower(c.clone(), Duration::from_secs(60)).await;
    let (_, s2) = c.create_key("admin", key("b", None), 1).await.unwrap();
    fc.changed();
    let d2 = hasher().digest(s2.expose());
    wait_for("the new key by changed()", || {
        seen_c.lock().unwrap().open(&d2, 2).is_some()
    })
    .await;
    assert!(fb.status().connected);
}

/// K8: the instance that made a change serves it once `sync` returns — a key it
/// created opens, a key it revoked no longer does — with no poll or notification to
/// bring it (its poll is an hour; SQLite has no notifications). Twice, so the second
/// `sync` waits for a read begun after its own change, not for one already done.
#[tokio::test(flavor = "current_thread")]
async fn k8_the_instance_that_made_a_change_serves_it_when_sync_returns() {
    let db = sqlite();
    let r = Arc::new(open(&db).await);
    let (f, seen) = follower(r.clone(), Duration::from_secs(3600)).await;
    let (k, secret) = r.create_key("admin", key("a", None), 1).await.unwrap();
    let digest = hasher().digest(secret.expose());
    assert!(seen.lock().unwrap().open(&digest, 2).is_none());
    assert!(f.sync(GENEROUS).await, "no read within {GENEROUS:?}");
    assert!(
        seen.lock().unwrap().open(&digest, 2).is_some(),
        "sync returned before the new key was served"
    );
    r.revoke_key("admin", &k.id, None, 3).await.unwrap();
    assert!(f.sync(GENEROUS).await, "no read within {GENEROUS:?}");
    assert!(
        seen.lock().unwrap().open(&digest, 4).is_none(),
        "sync returned before the revocation was served"
    );
}

/// K7: the database killed: changes answer "unavailable" (never hang), the replica keeps
/// serving the keys it had, and after a restart changes work again and the follower
/// catches up; nothing written before is lost.
#[tokio::test]
async fn k7_postgres_killed_and_restarted() {
    let mut db = postgres();
    let r = Arc::new(open(&db).await);
    let (k, secret) = r.create_key("admin", key("a", None), 1).await.unwrap();
    let digest = hasher().digest(secret.expose());
    let (f, seen) = follower(r.clone(), Duration::from_millis(100)).await;
    wait_for("the key", || {
        seen.lock().unwrap().open(&digest, 2).is_some()
    })
    .await;
    db.pg.as_mut().unwrap().kill();
    let start = Instant::now();
    let e = r.create_key("admin", key("b", None), 2).await;
    assert!(matches!(e, Err(RecordsError::Unavailable(_))), "{e:?}");
    assert!(
        start.elapsed() < GENEROUS,
        "a change with the database away answers, not hangs"
    );
    wait_for("the follower noticing", || !f.status().connected).await;
    assert!(
        seen.lock().unwrap().open(&digest, 3).is_some(),
        "known keys keep being served"
    );
    db.pg.as_mut().unwrap().restart();
    let start = Instant::now();
    let (k2, s2) = loop {
        match r.create_key("admin", key("b", None), 4).await {
            Ok(v) => break v,
            Err(RecordsError::Unavailable(_)) if start.elapsed() < GENEROUS => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("after the restart: {e}"),
        }
    };
    let d2 = hasher().digest(s2.expose());
    wait_for("the follower catching up", || {
        seen.lock().unwrap().open(&d2, 5).is_some()
    })
    .await;
    assert!(f.status().connected);
    assert_eq!(
        r.key(&k.id, None).await.unwrap().label,
        "a",
        "written before: kept"
    );
    assert_eq!(r.key(&k2.id, None).await.unwrap().label, "b");
}

fn ledger_row(
    attempt: &str,
    at: u64,
    key: &str,
    tenant: Option<&str>,
    amount: i64,
    outcome: Outcome,
) -> LedgerRow {
    LedgerRow {
        attempt: attempt.into(),
        at,
        request_id: Some(format!("req-{attempt}")),
        client_request_id: None,
        key: key.into(),
        tenant: tenant.map(Into::into),
        model: Some(if at % 2 == 0 { "gpt-4o-mini" } else { "claude" }.into()),
        upstream_model: None,
        channel: Some("openai".into()),
        usage: Some(LedgerUsage {
            input_tokens: 10,
            cached_input_tokens: 2,
            cache_write_tokens: 1,
            output_tokens: 5,
            images: 0,
            videos: 0,
        }),
        amount,
        outcome,
        resolved_by: None,
        billed_to_balance: true,
        provider_object: None,
        correction: None,
    }
}

/// B6: every attempt is one row however often it is written (a retried batch, a spool
/// replayed after a crash); B7: a pending attempt is resolved once — a second
/// resolution and a late replay of its pending record change nothing.
async fn ledger_writes_each_attempt_once_and_resolves_a_pending_one_once(db: Db) {
    let r = open(&db).await;
    let pending = ledger_row("att-a", 10, "k1", Some("acme"), 155, Outcome::Pending);
    let settled = ledger_row("att-b", 11, "k1", Some("acme"), 40, Outcome::Settled);
    let rows = vec![pending.clone(), settled.clone()];
    r.append_ledger(&rows, 100).await.unwrap();
    r.append_ledger(&rows, 101).await.unwrap();
    let page = r.usage(&UsageQuery::default(), None, 100).await.unwrap();
    assert_eq!(page.rows, rows, "written twice, kept once");
    assert_eq!((page.totals.settled, page.totals.pending), (40, 155));
    let resolved = LedgerRow {
        amount: 30,
        outcome: Outcome::Reconciled,
        resolved_by: Some("operator".into()),
        ..pending.clone()
    };
    r.append_ledger(std::slice::from_ref(&resolved), 102)
        .await
        .unwrap();
    // A second resolution, and the pending record replayed late: neither lands.
    let again = LedgerRow {
        amount: 0,
        outcome: Outcome::WrittenOff,
        ..resolved.clone()
    };
    r.append_ledger(&[again, pending.clone(), settled.clone()], 103)
        .await
        .unwrap();
    assert_eq!(r.ledger_row("att-a").await.unwrap(), resolved);
    assert_eq!(r.ledger_row("att-b").await.unwrap(), settled);
    assert_eq!(r.ledger_row("att-z").await, Err(RecordsError::NotFound));
    let money = r.ledger_money().await.unwrap();
    assert_eq!(
        money,
        vec![(
            (Some("acme".to_owned()), None),
            LedgerMoney {
                settled: 70,
                pending: 0
            }
        )]
    );
}
both!(
    b6_ledger_writes_each_attempt_once_and_resolves_a_pending_one_once,
    ledger_writes_each_attempt_once_and_resolves_a_pending_one_once
);

/// B6: the usage query selects by key (id or label), tenant, model, channel, outcome
/// and time; pages follow the cursor without losing or repeating a row; the totals are
/// over everything selected, whatever the page; the books' sums count only what a
/// balance pays, per tenant and per tenant-less key.
async fn usage_queries_filter_page_and_sum(db: Db) {
    let r = open(&db).await;
    let (k, _) = r
        .create_key("admin", key("labelled", None), 1)
        .await
        .unwrap();
    let mut rows = Vec::new();
    for i in 0..25u64 {
        let (key_id, tenant) = match i % 3 {
            0 => (k.id.as_str(), None),
            1 => ("file-key", Some("acme")),
            _ => ("file-key-2", Some("other")),
        };
        let outcome = if i % 5 == 0 {
            Outcome::Pending
        } else {
            Outcome::Settled
        };
        let mut row = ledger_row(
            &format!("att-{i:02}"),
            1000 + i / 2,
            key_id,
            tenant,
            10 + i as i64,
            outcome,
        );
        row.billed_to_balance = i != 24;
        rows.push(row);
    }
    r.append_ledger(&rows, 5000).await.unwrap();
    let all = |q: UsageQuery| {
        let r = &r;
        async move {
            let mut got = Vec::new();
            let mut cursor = None;
            loop {
                let page = r.usage(&q, cursor.as_deref(), 4).await.unwrap();
                assert!(page.rows.len() <= 4);
                got.extend(page.rows);
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => return (got, page.totals),
                }
            }
        }
    };
    let select =
        |f: &dyn Fn(&LedgerRow) -> bool| rows.iter().filter(|r| f(r)).cloned().collect::<Vec<_>>();
    let (got, totals) = all(UsageQuery::default()).await;
    assert_eq!(got, rows, "every row once, oldest first");
    assert_eq!(totals.attempts, 25);
    assert_eq!(totals.output_tokens, 125);
    let settled: i64 = rows
        .iter()
        .filter(|r| r.outcome == Outcome::Settled)
        .map(|r| r.amount)
        .sum();
    let pending: i64 = rows
        .iter()
        .filter(|r| r.outcome == Outcome::Pending)
        .map(|r| r.amount)
        .sum();
    assert_eq!((totals.settled, totals.pending), (settled, pending));
    let by_label = all(UsageQuery {
        key: Some("labelled".into()),
        ..UsageQuery::default()
    })
    .await
    .0;
    assert_eq!(
        by_label,
        select(&|r| r.key == k.id),
        "a database key by its label"
    );
    let by_id = all(UsageQuery {
        key: Some(k.id.clone()),
        ..UsageQuery::default()
    })
    .await
    .0;
    assert_eq!(by_id, by_label, "and by its id");
    let acme = all(UsageQuery {
        tenant: Some("acme".into()),
        ..UsageQuery::default()
    })
    .await;
    assert_eq!(acme.0, select(&|r| r.tenant.as_deref() == Some("acme")));
    assert_eq!(acme.1.attempts, acme.0.len() as u64);
    let q = UsageQuery {
        model: Some("claude".into()),
        channel: Some("openai".into()),
        outcome: Some(Outcome::Settled),
        from: Some(1003),
        to: Some(1010),
        ..UsageQuery::default()
    };
    assert_eq!(
        all(q).await.0,
        select(&|r| r.model.as_deref() == Some("claude")
            && r.outcome == Outcome::Settled
            && (1003..1010).contains(&r.at))
    );
    assert!(matches!(
        r.usage(&UsageQuery::default(), Some("garbage"), 10).await,
        Err(RecordsError::Invalid(i)) if i.field == "cursor"
    ));
    let money = r.ledger_money().await.unwrap();
    let expect = |book: &dyn Fn(&LedgerRow) -> bool| {
        let of = |o: Outcome| {
            rows.iter()
                .filter(|r| r.billed_to_balance && book(r) && r.outcome == o)
                .map(|r| r.amount)
                .sum::<i64>()
        };
        LedgerMoney {
            settled: of(Outcome::Settled),
            pending: of(Outcome::Pending),
        }
    };
    assert_eq!(
        money,
        vec![
            ((None, Some(k.id.clone())), expect(&|r| r.tenant.is_none())),
            (
                (Some("acme".into()), None),
                expect(&|r| r.tenant.as_deref() == Some("acme"))
            ),
            (
                (Some("other".into()), None),
                expect(&|r| r.tenant.as_deref() == Some("other"))
            ),
        ]
    );
    // Per key, each with its tenant (B6: a key's spend is held against these).
    let per_key = r.key_money().await.unwrap();
    assert_eq!(
        per_key,
        vec![
            ((None, k.id.clone()), expect(&|r| r.key == k.id)),
            (
                (Some("acme".into()), "file-key".into()),
                expect(&|r| r.key == "file-key")
            ),
            (
                (Some("other".into()), "file-key-2".into()),
                expect(&|r| r.key == "file-key-2")
            ),
        ]
    );
}
both!(
    b6_usage_queries_filter_page_and_sum,
    usage_queries_filter_page_and_sum
);

/// B6: newest first, pages follow the cursor to older rows without losing or repeating
/// one (rows of the same millisecond too), the exact reverse of oldest first; a key id
/// given exactly selects that key alone — never a database key whose label is the same
/// text — while the totals are the same whatever the order.
async fn usage_queries_newest_first_and_by_exact_key_id(db: Db) {
    let r = open(&db).await;
    // A database key labelled like the file key "file-key".
    let (k, _) = r
        .create_key("admin", key("file-key", None), 1)
        .await
        .unwrap();
    let mut rows = Vec::new();
    for i in 0..17u64 {
        let key_id = if i % 3 == 0 {
            k.id.as_str()
        } else {
            "file-key"
        };
        rows.push(ledger_row(
            &format!("att-{i:02}"),
            2000 + i / 3,
            key_id,
            Some("acme"),
            5 + i as i64,
            Outcome::Settled,
        ));
    }
    r.append_ledger(&rows, 9000).await.unwrap();
    let all = |q: UsageQuery| {
        let r = &r;
        async move {
            let mut got = Vec::new();
            let mut cursor = None;
            loop {
                let page = r.usage(&q, cursor.as_deref(), 4).await.unwrap();
                assert!(page.rows.len() <= 4);
                got.extend(page.rows);
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => return (got, page.totals),
                }
            }
        }
    };
    let newest = UsageQuery {
        newest_first: true,
        ..UsageQuery::default()
    };
    let (got, totals) = all(newest.clone()).await;
    let mut reversed = rows.clone();
    reversed.reverse();
    assert_eq!(got, reversed, "every row once, newest first");
    assert_eq!(totals, all(UsageQuery::default()).await.1);
    let first = r.usage(&newest, None, 1).await.unwrap();
    assert_eq!(first.rows, vec![rows[16].clone()], "the newest row first");

    let exact = all(UsageQuery {
        key_id: Some("file-key".into()),
        newest_first: true,
        ..UsageQuery::default()
    })
    .await;
    let mut file_rows: Vec<LedgerRow> = rows
        .iter()
        .filter(|r| r.key == "file-key")
        .cloned()
        .collect();
    file_rows.reverse();
    assert_eq!(exact.0, file_rows, "the file key's rows alone");
    assert_eq!(exact.1.attempts, file_rows.len() as u64);
    let by_label = all(UsageQuery {
        key: Some("file-key".into()),
        ..UsageQuery::default()
    })
    .await;
    assert_eq!(
        by_label.1.attempts,
        rows.len() as u64,
        "`key` also finds the database key labelled so"
    );
    let db_key = all(UsageQuery {
        key_id: Some(k.id.clone()),
        ..UsageQuery::default()
    })
    .await
    .0;
    assert_eq!(
        db_key,
        rows.iter()
            .filter(|r| r.key == k.id)
            .cloned()
            .collect::<Vec<_>>()
    );
}
both!(
    b6_usage_queries_newest_first_and_by_exact_key_id,
    usage_queries_newest_first_and_by_exact_key_id
);

/// B7: the resolver of unknown outcomes reads the pending rows that reached the ledger
/// in a span of time, with or without the provider's object, page by page; the object
/// is kept when the row is resolved, and a resolved row is read no more.
async fn pending_rows_by_age_and_provider_object(db: Db) {
    let r = open(&db).await;
    let with = |a: &str| LedgerRow {
        provider_object: Some(format!("/v1/responses/resp_{a}")),
        ..ledger_row(a, 1, "k1", Some("acme"), 100, Outcome::Pending)
    };
    let without = |a: &str| ledger_row(a, 1, "k1", Some("acme"), 100, Outcome::Pending);
    r.append_ledger(&[with("att-1"), without("att-2")], 1_000)
        .await
        .unwrap();
    r.append_ledger(
        &[
            with("att-3"),
            ledger_row("att-4", 1, "k1", None, 5, Outcome::Settled),
        ],
        2_000,
    )
    .await
    .unwrap();
    let read = |q: PendingQuery| {
        let r = &r;
        async move {
            r.pending_ledger(&q, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|p| (p.row.attempt, p.since, p.row.provider_object.is_some()))
                .collect::<Vec<_>>()
        }
    };
    let all = read(PendingQuery {
        before: 5_000,
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(
        all,
        vec![
            ("att-1".to_owned(), 1_000, true),
            ("att-2".to_owned(), 1_000, false),
            ("att-3".to_owned(), 2_000, true),
        ]
    );
    let older = read(PendingQuery {
        before: 2_000,
        with_object: Some(true),
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(older, vec![("att-1".to_owned(), 1_000, true)]);
    let lacking = read(PendingQuery {
        before: 5_000,
        with_object: Some(false),
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(lacking, vec![("att-2".to_owned(), 1_000, false)]);
    let recent = read(PendingQuery {
        from: Some(1_500),
        before: 5_000,
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(recent, vec![("att-3".to_owned(), 2_000, true)]);
    let next = read(PendingQuery {
        before: 5_000,
        after: Some((1_000, "att-1".to_owned())),
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(next.len(), 2, "{next:?}");
    assert_eq!(next[0].0, "att-2");
    // By the object it names (a polled job's), with the cursor too.
    let named = read(PendingQuery {
        before: 5_000,
        object: Some("/v1/responses/resp_att-3".to_owned()),
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(named, vec![("att-3".to_owned(), 2_000, true)]);
    let named_after = read(PendingQuery {
        before: 5_000,
        after: Some((1_000, "att-1".to_owned())),
        object: Some("/v1/responses/resp_att-3".to_owned()),
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(named_after, named);
    // Resolved by the provider's answer: the object stays, the row is read no more.
    let resolved = LedgerRow {
        amount: 42,
        outcome: Outcome::Reconciled,
        resolved_by: Some("provider".into()),
        provider_object: None,
        correction: None,
        ..with("att-1")
    };
    r.append_ledger(&[resolved], 3_000).await.unwrap();
    let row = r.ledger_row("att-1").await.unwrap();
    assert_eq!(
        (row.outcome, row.amount, row.resolved_by.as_deref()),
        (Outcome::Reconciled, 42, Some("provider"))
    );
    assert_eq!(
        row.provider_object.as_deref(),
        Some("/v1/responses/resp_att-1")
    );
    let left = read(PendingQuery {
        before: 5_000,
        ..PendingQuery::default()
    })
    .await;
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|(a, _, _)| a != "att-1"));
}
both!(
    b7_pending_rows_by_age_and_provider_object,
    pending_rows_by_age_and_provider_object
);

/// B7: an automatic charge (`streamed`, `upper_bound`) naming a provider object is read
/// by the resolver until it is corrected; the correction is written once beside the
/// first charge (a second write, or one on a row that is not a final charge, changes
/// nothing) and counted in every money sum: the usage totals, the books' and the keys'.
async fn a_correction_is_recorded_once_and_counted_in_every_sum(db: Db) {
    let r = open(&db).await;
    let object = |a: &str| Some(format!("/v1/responses/resp_{a}"));
    let automatic = |a: &str, at, amount, outcome, by: &str| LedgerRow {
        resolved_by: Some(by.into()),
        provider_object: object(a),
        ..ledger_row(a, at, "k1", Some("acme"), amount, outcome)
    };
    r.append_ledger(
        &[
            automatic("att-s", 10, 40, Outcome::Settled, "streamed"),
            automatic("att-u", 11, 100, Outcome::Reconciled, "upper_bound"),
            automatic("att-o", 12, 30, Outcome::Reconciled, "operator"),
            automatic("att-v", 13, 30, Outcome::Reconciled, "provider"),
            LedgerRow {
                provider_object: object("att-p"),
                ..ledger_row("att-p", 14, "k1", Some("acme"), 50, Outcome::Pending)
            },
            LedgerRow {
                resolved_by: Some("streamed".into()),
                ..ledger_row("att-n", 15, "k1", Some("acme"), 5, Outcome::Settled)
            },
        ],
        1_000,
    )
    .await
    .unwrap();
    let read = |q: CorrectableQuery| {
        let r = &r;
        async move {
            r.correctable_ledger(&q, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|row| row.attempt)
                .collect::<Vec<_>>()
        }
    };
    let all = CorrectableQuery {
        from: 0,
        before: 1_000,
        after: None,
    };
    assert_eq!(read(all.clone()).await, vec!["att-s", "att-u"]);
    assert_eq!(
        read(CorrectableQuery {
            from: 11,
            ..all.clone()
        })
        .await,
        vec!["att-u"]
    );
    assert_eq!(
        read(CorrectableQuery {
            after: Some((10, "att-s".into())),
            ..all.clone()
        })
        .await,
        vec!["att-u"]
    );
    // The provider reported 55 for the cut stream.
    assert!(
        r.correct_ledger("att-s", 15, "provider", 2_000)
            .await
            .unwrap()
    );
    assert!(
        !r.correct_ledger("att-s", -30, "provider", 2_001)
            .await
            .unwrap()
    );
    assert!(
        !r.correct_ledger("att-p", 5, "provider", 2_001)
            .await
            .unwrap()
    );
    assert!(
        !r.correct_ledger("att-z", 5, "provider", 2_001)
            .await
            .unwrap()
    );
    let row = r.ledger_row("att-s").await.unwrap();
    assert_eq!(
        row.correction,
        Some(LedgerCorrection {
            amount: 15,
            by: "provider".into(),
            at: 2_000
        })
    );
    assert_eq!((row.amount, row.cost()), (40, 55));
    assert_eq!(r.ledger_row("att-p").await.unwrap().correction, None);
    assert_eq!(read(all.clone()).await, vec!["att-u"]);
    // The upper bound was too high: 100 → 70.
    assert!(
        r.correct_ledger("att-u", -30, "provider", 2_002)
            .await
            .unwrap()
    );
    assert!(read(all).await.is_empty());
    // 40 + 15 + 100 − 30 + 30 + 30 + 5 settled, 50 pending.
    let page = r.usage(&UsageQuery::default(), None, 100).await.unwrap();
    assert_eq!((page.totals.settled, page.totals.pending), (190, 50));
    let money = LedgerMoney {
        settled: 190,
        pending: 50,
    };
    assert_eq!(
        r.ledger_money().await.unwrap(),
        vec![((Some("acme".to_owned()), None), money)]
    );
    assert_eq!(
        r.key_money().await.unwrap(),
        vec![((Some("acme".to_owned()), "k1".to_owned()), money)]
    );
    // A replayed first charge leaves the correction as it is.
    r.append_ledger(
        &[automatic("att-s", 10, 40, Outcome::Settled, "streamed")],
        3_000,
    )
    .await
    .unwrap();
    assert_eq!(r.ledger_row("att-s").await.unwrap().cost(), 55);
}
both!(
    b7_a_correction_is_recorded_once_and_counted_in_every_sum,
    a_correction_is_recorded_once_and_counted_in_every_sum
);
