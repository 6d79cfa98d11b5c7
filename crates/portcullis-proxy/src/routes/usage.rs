//! The ledger's admin routes (B6): `GET /admin/usage` (every billed attempt of every
//! instance, filtered, paged — oldest first, or newest with `order=newest` — summed, or
//! exported as CSV) and `GET /admin/books` (the books check: per tenant, opening
//! balance + top-ups = balance + settled + pending).
//! Mounted with the key routes ([`super::keys`]) when the gateway has a records
//! database.

// As in `keys.rs`: a helper's error is the handler's answer itself (a 400 naming the
// field), returned at once, never carried.
#![allow(clippy::result_large_err)]

use super::records_api::{Answer, Keys, answer, invalid, records_error, refused};
use crate::keys::body::{parse_time, rfc3339};
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use portcullis::core::BillingStore;
use portcullis_records::{LedgerRow, Outcome, UsageQuery};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Most rows one CSV export holds; past it the answer says where to go on.
const CSV_MAX: usize = 100_000;

#[derive(Deserialize)]
pub(super) struct UsageParams {
    key: Option<String>,
    tenant: Option<String>,
    model: Option<String>,
    channel: Option<String>,
    outcome: Option<String>,
    /// RFC 3339, inclusive.
    from: Option<String>,
    /// RFC 3339, exclusive.
    to: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
    format: Option<String>,
    /// `oldest` (the default) or `newest` first.
    order: Option<String>,
}

impl UsageParams {
    /// The query, or the 400 naming the parameter that is wrong. A tenant's token is
    /// kept to its tenant.
    fn query(&self, scope: Option<&str>) -> Result<UsageQuery, Response> {
        let time = |field: &'static str, v: &Option<String>| {
            v.as_deref()
                .map(|t| parse_time(field, t))
                .transpose()
                .map_err(|i| invalid(i.field, i.reason))
        };
        let outcome = match self.outcome.as_deref() {
            None => None,
            Some(o) => Some(Outcome::parse(o).ok_or_else(|| {
                invalid(
                    "outcome",
                    format!("{o:?} is none of settled, pending, refunded, written_off, reconciled"),
                )
            })?),
        };
        if let (Some(scope), Some(t)) = (scope, &self.tenant) {
            if t != scope {
                return Err(invalid(
                    "tenant",
                    "a tenant's token sees its own tenant only",
                ));
            }
        }
        let newest_first = match self.order.as_deref() {
            None | Some("oldest") => false,
            Some("newest") => true,
            Some(o) => {
                return Err(invalid(
                    "order",
                    format!("{o:?} is neither oldest nor newest"),
                ));
            }
        };
        Ok(UsageQuery {
            key: self.key.clone(),
            tenant: scope.map(str::to_owned).or_else(|| self.tenant.clone()),
            model: self.model.clone(),
            channel: self.channel.clone(),
            outcome,
            from: time("from", &self.from)?,
            to: time("to", &self.to)?,
            key_id: None,
            newest_first,
        })
    }
}

/// A row as the API shows it.
fn shown(r: &LedgerRow) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    v["at_ms"] = json!(r.at);
    v["at"] = json!(rfc3339(r.at));
    v
}

const CSV_HEADER: &str = "at,attempt,request_id,key,tenant,model,upstream_model,channel,\
     input_tokens,cached_input_tokens,cache_write_tokens,output_tokens,images,videos,amount,\
     outcome,resolved_by,billed_to_balance,correction,corrected_by,corrected_at\n";

/// A field as CSV writes it: quoted when it holds a comma, a quote or a line break, and
/// never read as a formula by a spreadsheet (a leading `=`, `+`, `-` or `@` is quoted
/// behind an apostrophe).
fn csv_field(out: &mut String, v: &str) {
    let v = match v.chars().next() {
        Some('=' | '+' | '-' | '@') => format!("'{v}"),
        _ => v.to_owned(),
    };
    if v.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&v.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&v);
    }
}

fn csv_row(out: &mut String, r: &LedgerRow) {
    let u = r.usage.unwrap_or_default();
    let c = r.correction.as_ref();
    let n = |v: u64| {
        if r.usage.is_some() {
            v.to_string()
        } else {
            String::new()
        }
    };
    let fields = [
        rfc3339(r.at),
        r.attempt.clone(),
        r.request_id.clone().unwrap_or_default(),
        r.key.clone(),
        r.tenant.clone().unwrap_or_default(),
        r.model.clone().unwrap_or_default(),
        r.upstream_model.clone().unwrap_or_default(),
        r.channel.clone().unwrap_or_default(),
        n(u.input_tokens),
        n(u.cached_input_tokens),
        n(u.cache_write_tokens),
        n(u.output_tokens),
        n(u.images),
        n(u.videos),
        r.amount.to_string(),
        r.outcome.as_str().to_owned(),
        r.resolved_by.clone().unwrap_or_default(),
        r.billed_to_balance.to_string(),
    ];
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        csv_field(out, f);
    }
    // The correction (B7): a signed number, written as one (never read as a formula).
    out.push(',');
    if let Some(c) = c {
        out.push_str(&c.amount.to_string());
    }
    out.push(',');
    csv_field(out, c.map_or("", |c| c.by.as_str()));
    out.push(',');
    csv_field(out, &c.map(|c| rfc3339(c.at)).unwrap_or_default());
    out.push('\n');
}

/// `GET /admin/usage`.
pub(super) async fn usage<St>(
    State(s): State<Arc<Keys<St>>>,
    Query(p): Query<UsageParams>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, true)?;
    let q = p.query(caller.scope.as_deref())?;
    let records = s.directory.records();
    match p.format.as_deref() {
        None | Some("json") => {
            let page = records
                .usage(&q, p.cursor.as_deref(), p.limit.unwrap_or(100))
                .await
                .map_err(records_error)?;
            Ok(answer(
                StatusCode::OK,
                json!({
                    "records": page.rows.iter().map(shown).collect::<Vec<_>>(),
                    "totals": page.totals,
                    "next_cursor": page.next_cursor,
                }),
            ))
        }
        Some("csv") => {
            let mut out = String::from(CSV_HEADER);
            let (mut rows, mut cursor) = (0usize, p.cursor.clone());
            loop {
                let page = records
                    .usage(&q, cursor.as_deref(), portcullis_records::USAGE_PAGE_MAX)
                    .await
                    .map_err(records_error)?;
                for r in &page.rows {
                    csv_row(&mut out, r);
                }
                rows += page.rows.len();
                cursor = page.next_cursor;
                if cursor.is_none() || rows >= CSV_MAX {
                    break;
                }
            }
            let mut r = (
                [
                    (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                    (
                        http::header::CONTENT_DISPOSITION,
                        "attachment; filename=\"usage.csv\"",
                    ),
                ],
                out,
            )
                .into_response();
            // Past CSV_MAX rows: where the next export starts.
            if let Some(c) = cursor.and_then(|c| http::HeaderValue::from_str(&c).ok()) {
                r.headers_mut()
                    .insert(http::HeaderName::from_static("x-next-cursor"), c);
            }
            Ok(r)
        }
        Some(other) => Err(invalid(
            "format",
            format!("{other:?} is neither json nor csv"),
        )),
    }
}

/// `GET /admin/books`: every tenant's books, exact or with their differences
/// ([`crate::books::check`]).
pub(super) async fn books<St: BillingStore>(
    State(s): State<Arc<Keys<St>>>,
    req: Request,
) -> Answer {
    s.caller(&req, false)?;
    let running = s.stack.load();
    match crate::books::check(s.directory.records(), &running.config, &running.live.store).await {
        Ok(report) => Ok(answer(
            StatusCode::OK,
            serde_json::to_value(&report).unwrap_or_default(),
        )),
        Err(crate::books::CheckError::Records(e)) => Err(records_error(e)),
        Err(crate::books::CheckError::Store(m)) => Err(refused(StatusCode::SERVICE_UNAVAILABLE, m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b7_a_csv_row_shows_its_correction_as_a_signed_number() {
        let mut row = LedgerRow {
            attempt: "att-1".into(),
            at: 0,
            request_id: None,
            client_request_id: None,
            key: "k".into(),
            tenant: None,
            model: None,
            upstream_model: None,
            channel: None,
            usage: None,
            amount: 40,
            outcome: portcullis_records::Outcome::Settled,
            resolved_by: Some("streamed".into()),
            billed_to_balance: true,
            provider_object: None,
            correction: None,
        };
        let mut out = String::new();
        csv_row(&mut out, &row);
        assert!(out.ends_with(",40,settled,streamed,true,,,\n"), "{out}");
        assert_eq!(out.matches(',').count(), CSV_HEADER.matches(',').count());
        row.correction = Some(portcullis_records::LedgerCorrection {
            amount: -15,
            by: "provider".into(),
            at: 1_000,
        });
        let mut out = String::new();
        csv_row(&mut out, &row);
        assert!(
            out.ends_with(",40,settled,streamed,true,-15,provider,1970-01-01T00:00:01Z\n"),
            "{out}"
        );
    }

    #[test]
    fn b6_csv_fields_are_quoted_and_never_formulas() {
        let mut out = String::new();
        for v in [
            "plain",
            "a,b",
            "say \"hi\"",
            "=SUM(A1)",
            "-1",
            "@x",
            "line\nbreak",
        ] {
            csv_field(&mut out, v);
            out.push('|');
        }
        assert_eq!(
            out,
            "plain|\"a,b\"|\"say \"\"hi\"\"\"|'=SUM(A1)|'-1|'@x|\"line\nbreak\"|"
        );
    }
}
