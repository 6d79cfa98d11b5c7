//! The gateway code table as the pages show it: every [`GatewayCode`] in table order
//! with its HTTP status and default message (both from the core's table, never retyped)
//! and what it means to the key holder who got it.

use portcullis::core::GatewayCode;
use serde_json::{Value, json};

/// What `code` means and what to do about it, for a key holder; `None` for a code this
/// table does not know yet (a unit test keeps the table complete).
pub fn meaning(code: GatewayCode) -> Option<&'static str> {
    use GatewayCode::*;
    Some(match code {
        InvalidRequest => {
            "The request was malformed (bad JSON, no model, wrong field types). Fix it before sending again."
        }
        Unauthenticated => "No API key was sent, or the gateway does not know it.",
        InsufficientBalance => "The account's balance is used up. Top up; retrying will not help.",
        SpendCapReached => {
            "This key has spent as much as its spend cap allows (spend + pending shown above)."
        }
        BudgetExhausted => {
            "A money budget (tenant, task or billing period) cannot hold this request's upper bound. It frees up when its period resets."
        }
        Forbidden => {
            "This key may not be used for this request: the model is not allowed for it, the key expired, or the task named is not this key's."
        }
        NotFound => "Unknown model or route.",
        RequestTimeout => "The request body did not arrive in time.",
        PayloadTooLarge => "The request body is over the gateway's size limit.",
        Unprocessable => "The request could not be processed.",
        ConcurrencyLimit => {
            "Every in-flight slot of this key is taken (streams hold theirs until they end). Retry when one of your requests finishes."
        }
        RpmLimit => {
            "A request, image, video or amount tier is full — not necessarily requests per minute, whatever the message says. See which tier above is at its limit and when it resets; Retry-After says the same."
        }
        RphLimit => {
            "The gateway's own provider accounts are at their hourly request limit. Retry after the Retry-After delay."
        }
        RpdLimit => "The gateway's own provider accounts are at their daily request limit.",
        TpmLimit => {
            "A token tier is full: the request's estimate (input + max output) does not fit. Wait for the reset above, or ask for fewer output tokens."
        }
        SubscriptionQuota => {
            "Your subscription's quota for this tier is used up and pay-as-you-go is off. It recovers at the reset shown; with pay-as-you-go on, requests go on and are billed to the balance."
        }
        UpstreamCooling => {
            "Every provider channel for this model is rate-limited or cooling down. Retry after the Retry-After delay."
        }
        CapacityBusy => {
            "All provider capacity for this model is busy and the request could not be queued in time. Retry shortly."
        }
        UpstreamRateLimited => {
            "Every provider channel tried answered with rate limiting. Retry shortly."
        }
        Internal => {
            "Something unexpected went wrong inside the gateway. Quote the request id when you report it."
        }
        NoUpstream => "No provider channel is configured for this model.",
        UpstreamFailed => "Every provider channel tried failed. Retry.",
        StoreUnavailable => {
            "The gateway cannot check limits right now (its store is unreachable) and refuses rather than guess. Retry shortly."
        }
        BillingRecordMissing => {
            "The gateway cannot bill this account right now; an operator has to restore it. Retry later."
        }
        QueueDeadlineExceeded => {
            "The request's deadline passed while it waited for provider capacity."
        }
        _ => return None,
    })
}

/// Every code, in table order: `[{"code", "status", "message", "meaning"}]`.
pub fn codes_json() -> Value {
    Value::Array(
        GatewayCode::ALL
            .iter()
            .map(|c| {
                json!({
                    "code": c.code(),
                    "status": c.http_status(),
                    "message": c.default_message(),
                    "meaning": meaning(*c).unwrap_or(c.default_message()),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e1_every_gateway_code_has_a_meaning_and_the_table_follows_the_core() {
        for c in GatewayCode::ALL {
            assert!(meaning(*c).is_some(), "no meaning for {c}");
        }
        let v = codes_json();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), GatewayCode::ALL.len());
        for (row, c) in rows.iter().zip(GatewayCode::ALL) {
            assert_eq!(row["code"], c.code());
            assert_eq!(row["status"], c.http_status());
            assert_eq!(row["message"], c.default_message());
        }
    }
}
