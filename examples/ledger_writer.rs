//! How fast the ledger's batched writer can go (B6): records per second that
//! `Records::append_ledger` takes in batches of 1,000 (the proxy's writer batch), on an
//! SQLite file or a PostgreSQL database.
//!
//! ```sh
//! cargo run --release -p portcullis-examples --example ledger_writer -- sqlite 100000
//! cargo run --release -p portcullis-examples --example ledger_writer -- postgres://postgres@127.0.0.1/test 100000
//! ```
//!
//! Each run writes RECORDS fresh attempts (a new attempt id prefix per run) and prints
//! `records=… seconds=… records_per_second=…`; bounded by RECORDS and by 120 s.

use portcullis_records::{Hasher, LedgerRow, LedgerUsage, Outcome, Records};
use std::time::{Duration, Instant};

const BATCH: usize = 1_000;
const MAX_TIME: Duration = Duration::from_secs(120);

fn row(run: u128, i: usize) -> LedgerRow {
    LedgerRow {
        attempt: format!("att-bench-{run}-{i}"),
        at: 1_765_000_000_000 + i as u64,
        request_id: Some(format!("req-{run}-{i}")),
        client_request_id: None,
        key: format!("key_{}", i % 100),
        tenant: Some(format!("tenant-{}", i % 10)),
        model: Some("gpt-4o-mini".into()),
        upstream_model: None,
        channel: Some("openai-a".into()),
        usage: Some(LedgerUsage {
            input_tokens: 1_200,
            cached_input_tokens: 300,
            cache_write_tokens: 0,
            output_tokens: 250,
            images: 0,
            videos: 0,
        }),
        amount: 330,
        outcome: Outcome::Settled,
        resolved_by: None,
        provider_object: None,
        correction: None,
        billed_to_balance: true,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_else(|| "sqlite".into());
    let records: usize = args.next().map_or(Ok(100_000), |n| n.parse())?;
    let dir = std::env::temp_dir().join(format!("pcx-ledger-bench-{}", std::process::id()));
    let url = if target == "sqlite" {
        std::fs::create_dir_all(&dir)?;
        format!("sqlite://{}", dir.join("records.db").display())
    } else {
        target
    };
    let db = Records::open(&url, Hasher::new(b"ledger-bench-hash-secret")?).await?;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let rows: Vec<LedgerRow> = (0..records).map(|i| row(run, i)).collect();
    let start = Instant::now();
    let mut written = 0;
    for batch in rows.chunks(BATCH) {
        db.append_ledger(batch, 0).await?;
        written += batch.len();
        if start.elapsed() > MAX_TIME {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "records={written} seconds={seconds:.2} records_per_second={:.0}",
        written as f64 / seconds
    );
    db.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
