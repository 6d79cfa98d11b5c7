//! E3: the gateway always makes its own request id — the `x-request-id`
//! it answers with, the one it sends upstream and the usage record's idempotency key.
//! A client's `x-request-id` is kept apart, capped, as the record's
//! `client_request_id`. Through real sockets, with the usage log read back.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const CLIENT: &str = "sk-client-rid-41b7";

fn config(log: &Path) -> String {
    format!(
        r#"[server]
usage_log = {:?}

[policies.open]
concurrency = 16

[tenants.t]
balance = 1_000_000_000

[keys.client]
key = "{CLIENT}"
tenant = "t"
policy = "open"
"#,
        log.display().to_string()
    )
}

fn usage_log(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("portcullis-rid-{}-{name}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("usage.jsonl");
    let _ = std::fs::remove_file(&log);
    log
}

fn records(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn wait_records(log: &Path, n: usize) -> Vec<Value> {
    let ok = eventually(WAIT, || async { records(log).len() >= n }).await;
    assert!(ok, "{n} usage records expected: {:?}", records(log));
    records(log)
}

/// A 10 KB client `x-request-id`: the client gets the gateway's id back, the fake sees
/// the gateway's id (the client's appears nowhere upstream), the usage record's
/// idempotency key is the gateway's id, and the client's is kept cut to 128 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e3_a_huge_client_request_id_is_not_forwarded_nor_the_idempotency_key() {
    let log = usage_log("huge");
    let p = Proxy::start(&config(&log)).await;
    let huge: String = "rid-"
        .chars()
        .chain(('a'..='z').cycle().take(10_236))
        .collect();
    assert_eq!(huge.len(), 10_240);
    for (i, d) in DIALECTS.into_iter().enumerate() {
        let r = send(p.addr, &ask(d, CLIENT, false).header("x-request-id", &huge)).await;
        assert_eq!(r.status, 200, "{d:?}: {}", r.text());
        let ours = r.header("x-request-id").unwrap_or_default().to_owned();
        assert!(ours.starts_with("pc-"), "{d:?}: {ours:?}");
        assert_eq!(r.headers.get_all("x-request-id").iter().count(), 1);

        let s = p.fake.stats();
        let rec = s.recent_requests.last().expect("one upstream call");
        let upstream: Vec<&str> = rec
            .headers
            .get_all("x-request-id")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(upstream, [ours.as_str()], "{d:?}: the id sent upstream");
        assert!(
            !s.saw_anywhere(&huge[..64]),
            "the client's id reached the fake"
        );

        let recs = wait_records(&log, i + 1).await;
        let rec = &recs[i];
        assert_eq!(rec["idempotency_key"], ours.as_str(), "{rec}");
        assert_eq!(rec["client_request_id"], &huge[..128], "{rec}");
    }
}

/// Two requests with the same client id are two requests: two usage records, two
/// idempotency keys (the gateway's ids), each record carrying the client's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e3_one_client_id_twice_gives_two_usage_records() {
    let log = usage_log("twice");
    let p = Proxy::start(&config(&log)).await;
    let mut ours = Vec::new();
    for _ in 0..2 {
        let r = send(
            p.addr,
            &ask(Dialect::OpenAi, CLIENT, false).header("x-request-id", "client-rid-7"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        ours.push(r.header("x-request-id").unwrap().to_owned());
    }
    assert_ne!(ours[0], ours[1]);
    let recs = wait_records(&log, 2).await;
    assert_eq!(recs.len(), 2, "{recs:?}");
    let keys: Vec<&str> = recs
        .iter()
        .map(|r| r["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, [ours[0].as_str(), ours[1].as_str()]);
    for r in &recs {
        assert_eq!(r["client_request_id"], "client-rid-7", "{r}");
        assert_eq!(r["outcome"], "settled", "{r}");
    }
    let spent = usage(p.addr, CLIENT).await["money"]["key_spent"]
        .as_i64()
        .unwrap();
    let logged: i64 = recs.iter().map(|r| r["amount"].as_i64().unwrap()).sum();
    assert!(
        spent > 0 && spent == logged,
        "both requests billed: {spent} / {logged}"
    );
}

/// A client id that is not printable ASCII (a tab inside) or only blanks is not kept;
/// a request without one has none; the gateway's id is there in every case. Several
/// `x-request-id` headers: the first is kept, none is forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e3_only_printable_client_ids_are_kept() {
    let log = usage_log("printable");
    let p = Proxy::start(&config(&log)).await;
    let cases: [(&[&str], Value); 4] = [
        (&["id\twith-a-tab"], Value::Null),
        (&["   "], Value::Null),
        (&[], Value::Null),
        (&[" first-id ", "second-id"], "first-id".into()),
    ];
    for (i, (ids, want)) in cases.iter().enumerate() {
        let mut req = ask(Dialect::Anthropic, CLIENT, false);
        for id in *ids {
            req = req.header("x-request-id", id);
        }
        let r = send(p.addr, &req).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let ours = r.header("x-request-id").unwrap().to_owned();
        assert!(ours.starts_with("pc-"), "{ours}");
        let s = p.fake.stats();
        let rec = s.recent_requests.last().unwrap();
        assert_eq!(
            rec.headers.get_all("x-request-id").iter().count(),
            1,
            "{:?}",
            rec.headers
        );
        assert_eq!(rec.headers["x-request-id"], ours.as_str());
        let recs = wait_records(&log, i + 1).await;
        assert_eq!(&recs[i]["client_request_id"], want, "{ids:?}: {}", recs[i]);
        assert_eq!(recs[i]["idempotency_key"], ours.as_str());
    }
}
