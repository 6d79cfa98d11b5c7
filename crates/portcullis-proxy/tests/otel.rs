//! The request and attempt spans exported over OTLP/gRPC with the
//! GenAI semantic-convention attributes. A fake collector (opentelemetry-proto's
//! `TraceServiceServer` on tonic) runs in the test on a loopback port; the gateway's
//! exporter is started on it from a `[telemetry]` table; real clients send a
//! non-streamed, a streamed, a Gemini and a rejected request, each with a W3C
//! `traceparent` of its own; the spans the collector receives are checked against
//! the usage log and against the `traceparent` the fake upstream saw.
//!
//! One exporter and one global subscriber per test binary, so one test drives the
//! exporter; the others check the `[telemetry]` table.

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use portcullis_proxy::Config;
use portcullis_proxy::telemetry::Exporter;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

// ------------------------------------------------------------------ the collector

/// What the fake collector received: every span, and the `service.name` of each batch.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|v| match v {
                    Any::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            self.services.lock().unwrap().push(service);
            for ss in rs.scope_spans {
                self.spans.lock().unwrap().extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// Serves the collector on a loopback port; returns its address.
    async fn start(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        addr
    }

    /// The spans received of the trace `trace_id`.
    fn trace(&self, trace_id: &[u8]) -> Vec<Span> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }
}

// ------------------------------------------------------------------ span reading

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Any> {
    let mut found = s
        .attributes
        .iter()
        .filter(|kv| kv.key == key)
        .filter_map(|kv| kv.value.as_ref()?.value.as_ref());
    let first = found.next();
    assert!(
        found.next().is_none(),
        "attribute {key} appears twice on span {:?}",
        s.name
    );
    first
}

fn str_attr<'a>(s: &'a Span, key: &str) -> Option<&'a str> {
    match attr(s, key)? {
        Any::StringValue(v) => Some(v),
        other => panic!("{key} on {:?} is not a string: {other:?}", s.name),
    }
}

fn int_attr(s: &Span, key: &str) -> Option<i64> {
    match attr(s, key)? {
        Any::IntValue(v) => Some(*v),
        other => panic!("{key} on {:?} is not an integer: {other:?}", s.name),
    }
}

fn bool_attr(s: &Span, key: &str) -> Option<bool> {
    match attr(s, key)? {
        Any::BoolValue(v) => Some(*v),
        other => panic!("{key} on {:?} is not a boolean: {other:?}", s.name),
    }
}

fn attr_f64(s: &Span, key: &str) -> Option<f64> {
    match attr(s, key)? {
        Any::DoubleValue(v) => Some(*v),
        other => panic!("{key} on {:?} is not a double: {other:?}", s.name),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A client's span: a trace id and span id of its own for each request of the test.
struct ClientSpan {
    trace_id: String,
    span_id: String,
}

impl ClientSpan {
    fn new(n: u8) -> Self {
        Self {
            trace_id: format!("4bf92f3577b34da6a3ce929d0e0e47{n:02x}"),
            span_id: format!("00f067aa0ba902{n:02x}"),
        }
    }
    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

// ------------------------------------------------------------------ the system

const ALICE: &str = "sk-client-otel-alice-5d21";
const TIGHT: &str = "sk-client-otel-tight-77c0";

fn config(log: &Path, collector: SocketAddr) -> String {
    format!(
        r#"[server]
usage_log = {:?}

[telemetry]
otlp_endpoint = "http://{collector}"
service_name = "portcullis-otel-test"
sampling_ratio = 1.0
export_timeout = "5s"

[policies.open]
concurrency = 16

[policies.one-a-minute]
requests = [{{ window = "1m", limit = 1 }}]

[tenants.acme]
balance = 1_000_000_000

[keys.alice]
key = "{ALICE}"
tenant = "acme"
policy = "open"

[keys.tight]
key = "{TIGHT}"
tenant = "acme"
policy = "one-a-minute"
"#,
        log.display().to_string()
    )
}

fn usage_log() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("otel-test-{}", std::process::id()));
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

/// The usage record of the request the client sent with `x-request-id: rid`.
async fn record_of(log: &Path, rid: &str) -> Value {
    let found = eventually(WAIT, || async {
        records(log).iter().any(|r| r["client_request_id"] == rid)
    })
    .await;
    assert!(found, "no usage record for {rid}: {:?}", records(log));
    records(log)
        .into_iter()
        .find(|r| r["client_request_id"] == rid)
        .unwrap()
}

/// Flushes the exporter until the collector holds `n` spans of `trace_id` (bounded).
async fn spans_of(
    exporter: &Arc<Exporter>,
    collector: &Collector,
    trace_id: &str,
    n: usize,
) -> Vec<Span> {
    let id = unhex(trace_id);
    for _ in 0..100 {
        let e = exporter.clone();
        tokio::task::spawn_blocking(move || e.flush())
            .await
            .unwrap()
            .expect("flush");
        let got = collector.trace(&id);
        if got.len() >= n {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{n} spans of trace {trace_id} expected, got {:?}",
        collector
            .trace(&id)
            .iter()
            .map(|s| &s.name)
            .collect::<Vec<_>>()
    );
}

/// The request span and the attempt spans of one trace, checked to hang together:
/// the request span is a SERVER span whose parent is the client's span; each attempt
/// is a child of it.
fn split(spans: &[Span], client: &ClientSpan) -> (Span, Vec<Span>) {
    let (requests, attempts): (Vec<&Span>, Vec<&Span>) = spans
        .iter()
        .partition(|s| s.kind != SpanKind::Client as i32);
    assert_eq!(requests.len(), 1, "one request span: {spans:?}");
    let request = requests[0].clone();
    assert_eq!(request.kind, SpanKind::Server as i32, "{:?}", request.name);
    assert_eq!(
        hex(&request.parent_span_id),
        client.span_id,
        "the request span's parent is the client's span"
    );
    for a in &attempts {
        assert_eq!(
            a.parent_span_id, request.span_id,
            "an attempt is a child of the request span"
        );
        assert_eq!(a.name, request.name, "an attempt is named like its request");
    }
    (request, attempts.into_iter().cloned().collect())
}

/// The `traceparent` the fake upstream received for the trace `trace_id`.
fn upstream_traceparent(proxy: &Proxy, trace_id: &str) -> (String, String) {
    let seen: Vec<String> = proxy
        .fake
        .stats()
        .recent_requests
        .iter()
        .filter_map(|r| {
            r.headers
                .get("traceparent")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .filter(|tp| tp.split('-').nth(1) == Some(trace_id))
        .collect();
    assert_eq!(
        seen.len(),
        1,
        "one upstream request of trace {trace_id}: {seen:?}"
    );
    let parts: Vec<&str> = seen[0].split('-').collect();
    assert_eq!(parts.len(), 4, "{}", seen[0]);
    assert_eq!(parts[0], "00");
    (parts[2].to_owned(), parts[3].to_owned())
}

fn tokens_of(record: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| {
        record[k]
            .as_i64()
            .unwrap_or_else(|| panic!("{k} in {record}"))
    };
    let input = n("input_tokens") + n("cached_input_tokens") + n("cache_write_tokens");
    (
        input,
        n("cached_input_tokens"),
        n("cache_write_tokens"),
        n("output_tokens"),
    )
}

fn assert_tokens(s: &Span, record: &Value) {
    let (input, cache_read, cache_write, output) = tokens_of(record);
    assert!(output > 0 && input > 0, "the fake reports usage: {record}");
    assert_eq!(
        int_attr(s, "gen_ai.usage.input_tokens"),
        Some(input),
        "{}",
        s.name
    );
    assert_eq!(
        int_attr(s, "gen_ai.usage.cache_read.input_tokens"),
        Some(cache_read)
    );
    assert_eq!(
        int_attr(s, "gen_ai.usage.cache_creation.input_tokens"),
        Some(cache_write)
    );
    assert_eq!(
        int_attr(s, "gen_ai.usage.output_tokens"),
        Some(output),
        "{}",
        s.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_request_and_attempt_spans_reach_the_collector_with_genai_attributes() {
    let collector = Collector::default();
    let at = collector.start().await;
    let log = usage_log();
    let text = format!("{}\n{CHANNELS}", config(&log, at));
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let exporter = Arc::new(
        Exporter::start(config.telemetry())
            .expect("exporter")
            .expect("an endpoint is configured"),
    );
    assert_eq!(exporter.endpoint(), format!("http://{at}"));
    tracing_subscriber::registry()
        .with(exporter.layer())
        .try_init()
        .expect("the test binary's only subscriber");
    let proxy = Proxy::start_config(config).await;

    // 1. Not streamed, OpenAI.
    let plain = ClientSpan::new(1);
    let r = send(
        proxy.addr,
        &ask(Dialect::OpenAi, ALICE, false)
            .header("traceparent", plain.traceparent())
            .header("x-request-id", "otel-plain"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // 2. Streamed, Anthropic.
    let stream = ClientSpan::new(2);
    let r = send(
        proxy.addr,
        &ask(Dialect::Anthropic, ALICE, true)
            .header("traceparent", stream.traceparent())
            .header("x-request-id", "otel-stream"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // 3. Gemini: its operation is `generate_content`.
    let gemini = ClientSpan::new(3);
    let r = send(
        proxy.addr,
        &ask(Dialect::Gemini, ALICE, false).header("traceparent", gemini.traceparent()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // 4. One request a minute: the second is refused with 42902.
    let first = ClientSpan::new(4);
    let r = send(
        proxy.addr,
        &ask(Dialect::OpenAi, TIGHT, false).header("traceparent", first.traceparent()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let refused = ClientSpan::new(5);
    let r = send(
        proxy.addr,
        &ask(Dialect::OpenAi, TIGHT, false).header("traceparent", refused.traceparent()),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    // 5. A health probe and a metrics scrape: not traced (a probe every few seconds
    // would bury the model calls in the trace store).
    let probe = ClientSpan::new(6);
    for path in ["/healthz", "/metrics"] {
        let r = send(
            proxy.addr,
            &Req::get(path).header("traceparent", probe.traceparent()),
        )
        .await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    rejection(&r, Dialect::OpenAi, 42902);

    // -------- the non-streamed request
    let spans = spans_of(&exporter, &collector, &plain.trace_id, 2).await;
    let (req, attempts) = split(&spans, &plain);
    assert_eq!(req.name, "chat gpt-4o-mini");
    assert_eq!(str_attr(&req, "gen_ai.operation.name"), Some("chat"));
    assert_eq!(str_attr(&req, "gen_ai.provider.name"), Some("openai"));
    assert_eq!(str_attr(&req, "gen_ai.request.model"), Some("gpt-4o-mini"));
    assert_eq!(str_attr(&req, "gen_ai.response.model"), Some("gpt-4o-mini"));
    assert_eq!(bool_attr(&req, "gen_ai.request.stream"), Some(false));
    assert_eq!(int_attr(&req, "http.response.status_code"), Some(200));
    assert_eq!(str_attr(&req, "portcullis.key"), Some("alice"));
    assert_eq!(str_attr(&req, "portcullis.tenant"), Some("acme"));
    assert_eq!(str_attr(&req, "portcullis.channel"), Some("openai-a"));
    assert_eq!(int_attr(&req, "portcullis.attempts"), Some(1));
    assert_eq!(attr(&req, "error.type"), None);
    assert_eq!(attr(&req, "portcullis.rejection.code"), None);
    assert_eq!(
        attr(&req, "gen_ai.response.time_to_first_chunk"),
        None,
        "time to first chunk is for streams"
    );
    let record = record_of(&log, "otel-plain").await;
    assert_tokens(&req, &record);
    // No secret anywhere: neither the client's key nor the channel credential.
    for s in &spans {
        for kv in &s.attributes {
            let v = format!("{:?}", kv.value);
            assert!(
                !v.contains(ALICE) && !v.contains(CRED_OPENAI),
                "a secret in {}: {v}",
                kv.key
            );
        }
    }
    assert_eq!(attempts.len(), 1);
    let a = &attempts[0];
    assert_eq!(int_attr(a, "n"), Some(1));
    assert_eq!(str_attr(a, "gen_ai.provider.name"), Some("openai"));
    assert_eq!(str_attr(a, "gen_ai.request.model"), Some("gpt-4o-mini"));
    assert_eq!(str_attr(a, "gen_ai.response.model"), Some("gpt-4o-mini"));
    assert_eq!(int_attr(a, "http.response.status_code"), Some(200));
    assert_eq!(str_attr(a, "server.address"), Some("127.0.0.1"));
    assert!(int_attr(a, "server.port").is_some_and(|p| p > 0));
    assert_eq!(str_attr(a, "channel"), Some("openai-a"));
    assert_tokens(a, &record);
    // The upstream request carried the attempt's span as its parent, in the same trace.
    let (parent, flags) = upstream_traceparent(&proxy, &plain.trace_id);
    assert_eq!(
        parent,
        hex(&a.span_id),
        "the upstream's parent is the attempt span"
    );
    assert_eq!(flags, "01", "sampled");
    assert!(req.end_time_unix_nano >= a.end_time_unix_nano);

    // -------- the streamed request
    let spans = spans_of(&exporter, &collector, &stream.trace_id, 2).await;
    let (req, attempts) = split(&spans, &stream);
    assert_eq!(req.name, "chat claude-sonnet-4-5");
    assert_eq!(str_attr(&req, "gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(bool_attr(&req, "gen_ai.request.stream"), Some(true));
    assert_eq!(str_attr(&req, "portcullis.channel"), Some("anthropic-a"));
    let ttft = attr_f64(&req, "gen_ai.response.time_to_first_chunk")
        .expect("time to first chunk on a stream");
    let whole = (req.end_time_unix_nano - req.start_time_unix_nano) as f64 / 1e9;
    assert!(
        ttft > 0.0 && ttft <= whole,
        "time to first chunk {ttft}s within the request's {whole}s"
    );
    let record = record_of(&log, "otel-stream").await;
    assert_tokens(&req, &record);
    assert_eq!(attempts.len(), 1);
    let a = &attempts[0];
    let attempt_ttft =
        attr_f64(a, "gen_ai.response.time_to_first_chunk").expect("on the attempt too");
    assert!(attempt_ttft > 0.0 && attempt_ttft <= ttft);
    assert_eq!(bool_attr(a, "gen_ai.request.stream"), Some(true));
    assert_tokens(a, &record);
    let (parent, _) = upstream_traceparent(&proxy, &stream.trace_id);
    assert_eq!(parent, hex(&a.span_id));

    // -------- Gemini
    let spans = spans_of(&exporter, &collector, &gemini.trace_id, 2).await;
    let (req, attempts) = split(&spans, &gemini);
    assert_eq!(req.name, "generate_content gemini-2.5-flash");
    assert_eq!(
        str_attr(&req, "gen_ai.operation.name"),
        Some("generate_content")
    );
    assert_eq!(str_attr(&req, "gen_ai.provider.name"), Some("gcp.gemini"));
    assert_eq!(
        str_attr(&attempts[0], "gen_ai.provider.name"),
        Some("gcp.gemini")
    );

    // -------- the refused request: no attempt, the gateway's code
    let spans = spans_of(&exporter, &collector, &refused.trace_id, 1).await;
    let (req, attempts) = split(&spans, &refused);
    assert!(attempts.is_empty(), "a refused request makes no attempt");
    assert_eq!(req.name, "chat gpt-4o-mini");
    assert_eq!(str_attr(&req, "portcullis.key"), Some("tight"));
    assert_eq!(int_attr(&req, "portcullis.rejection.code"), Some(42902));
    assert_eq!(
        str_attr(&req, "portcullis.rejection.layer"),
        Some("anchored_window")
    );
    assert_eq!(str_attr(&req, "error.type"), Some("42902"));
    assert_eq!(int_attr(&req, "http.response.status_code"), Some(429));
    assert_eq!(attr(&req, "portcullis.channel"), None);
    assert_eq!(attr(&req, "gen_ai.usage.output_tokens"), None);
    assert!(
        upstream_seen(&proxy, &refused.trace_id) == 0,
        "nothing went upstream"
    );

    // Every batch named the configured service.
    let services = collector.services.lock().unwrap().clone();
    assert!(!services.is_empty());
    assert!(
        services.iter().all(|s| s == "portcullis-otel-test"),
        "{services:?}"
    );
    // A span per request and per attempt, nothing else (no other crate's spans).
    let mut names: BTreeMap<(i32, String), usize> = BTreeMap::new();
    for s in collector.spans.lock().unwrap().iter() {
        *names.entry((s.kind, s.name.clone())).or_default() += 1;
    }
    let (server, client) = (SpanKind::Server as i32, SpanKind::Client as i32);
    let of_kind = |k: i32| -> usize {
        names
            .iter()
            .filter(|((kind, _), _)| *kind == k)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(of_kind(client), 4, "{names:?}");
    assert_eq!(
        names.get(&(server, "chat gpt-4o-mini".into())),
        Some(&3),
        "{names:?}"
    );
    assert_eq!(names.values().sum::<usize>(), 9, "{names:?}");

    drop(proxy);
    let e = Arc::into_inner(exporter).expect("the last handle");
    tokio::task::spawn_blocking(move || e.shutdown(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("shutdown");
    if let Some(dir) = log.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn upstream_seen(proxy: &Proxy, trace_id: &str) -> usize {
    proxy
        .fake
        .stats()
        .recent_requests
        .iter()
        .filter(|r| {
            r.headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|tp| tp.contains(trace_id))
        })
        .count()
}

// ------------------------------------------------------------------ the table

fn parse_error(table: &str) -> portcullis_proxy::ConfigError {
    let text = format!("[telemetry]\n{table}\n");
    Config::parse(&text).expect_err(table)
}

#[test]
fn p3_a_bad_telemetry_table_is_refused_at_its_line() {
    let e = parse_error("service_name = \"gw\"\nsampling_ratio = 1.5");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.reason.contains("sampling_ratio"), "{e}");
    let e = parse_error("sampling_ratio = -0.1");
    assert_eq!(e.line, Some(2), "{e}");
    let e = parse_error("otlp_endpoint = \"127.0.0.1:4317\"");
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.reason.contains("http://"), "{e}");
    let e = parse_error("otlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"");
    assert!(e.reason.contains("no path"), "{e}");
    let e = parse_error("export_timeout = \"0s\"");
    assert!(e.reason.contains("export_timeout"), "{e}");
    let e = parse_error("export_timeout = \"2m\"");
    assert!(e.reason.contains("export_timeout"), "{e}");
    let e = parse_error("otlp_endpont = \"http://127.0.0.1:4317\"");
    assert!(e.reason.contains("otlp_endpont"), "a misspelt key: {e}");
    let e = parse_error("service_name = \"\"");
    assert!(e.reason.contains("service_name"), "{e}");
}

#[test]
fn p3_a_good_telemetry_table_is_read() {
    let c = Config::parse(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4317\"\nservice_name = \"gw\"\n\
         sampling_ratio = 0.25\nexport_timeout = \"3s\"\naccept_traceparent = false\n",
    )
    .expect("a good table");
    let t = c.telemetry();
    assert_eq!(t.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4317"));
    assert_eq!(t.service_name.as_deref(), Some("gw"));
    assert_eq!(t.sampling_ratio, 0.25);
    assert_eq!(t.export_timeout, Duration::from_secs(3));
    assert!(!t.accept_traceparent);
    let d = Config::parse("").expect("no table").telemetry().clone();
    assert_eq!(d.otlp_endpoint, None);
    assert_eq!(d.sampling_ratio, 1.0);
    assert_eq!(d.export_timeout, Duration::from_secs(10));
    assert!(
        d.accept_traceparent,
        "joining the client's trace is the default"
    );
}
